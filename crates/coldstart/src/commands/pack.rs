//! `coldstart pack FILE... (-o OUT | --out-dir DIR | --dry-run)`: pack each
//! file's relative relocations as DT_RELR into a new file. A file that
//! cannot be packed gets one line naming it and why; the others go on.
//! Ctrl-C stops after the file being written, which is never left half done.

use crate::args::PackArgs;
use crate::output;
use anyhow::bail;
use coldstart_pack::{Error, Refused, Report, pack_file};
use serde::Serialize;
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::Ordering;

#[derive(Serialize)]
struct Refusal {
    path: String,
    code: &'static str,
    reason: String,
}

#[derive(Serialize)]
struct Output<'a> {
    dry_run: bool,
    packed: &'a [Report],
    refused: Vec<Refusal>,
}

pub fn run(args: &PackArgs) -> anyhow::Result<ExitCode> {
    let destinations = destinations(args)?;
    let interrupted = super::interrupt_flag()?;
    let bar = output::progress(args.files.len() as u64, "packing");
    if args.files.len() < 2 {
        bar.finish_and_clear();
    }
    let mut packed = Vec::new();
    let mut refused: Vec<Refused> = Vec::new();
    let mut failed = false;
    for (input, destination) in args.files.iter().zip(&destinations) {
        if interrupted.load(Ordering::Relaxed) {
            bar.finish_and_clear();
            eprintln!("coldstart: interrupted: the files not yet packed were left alone");
            failed = true;
            break;
        }
        bar.set_message(
            input
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
        );
        match pack_file(input, destination.as_deref()) {
            Ok(report) => packed.push(report),
            Err(Error::Refused(refusal)) => {
                failed |= !refusal.reason.is_not_a_candidate();
                refused.push(refusal);
            }
            Err(err) => {
                bar.suspend(|| eprintln!("coldstart: error: {err}"));
                failed = true;
            }
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    if args.json {
        output::print_json(&Output {
            dry_run: args.dry_run,
            packed: &packed,
            refused: refused
                .iter()
                .map(|r| Refusal {
                    path: r.path.display().to_string(),
                    code: r.reason.code(),
                    reason: r.reason.to_string(),
                })
                .collect(),
        })?;
    } else {
        output::print_text(&coldstart_report::pack::render(&packed, args.dry_run))?;
    }
    for refusal in &refused {
        eprintln!("coldstart: {refusal}");
    }
    Ok(if failed || packed.is_empty() {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// The output path of each input (None for a dry run), checked before any
/// work: one -o for one input, distinct names under --out-dir.
fn destinations(args: &PackArgs) -> anyhow::Result<Vec<Option<PathBuf>>> {
    if args.dry_run {
        return Ok(vec![None; args.files.len()]);
    }
    if let Some(output) = &args.output {
        if args.files.len() > 1 {
            bail!(
                "-o names one output file, but {} inputs were given: use --out-dir DIR",
                args.files.len()
            );
        }
        return Ok(vec![Some(output.clone())]);
    }
    let Some(dir) = &args.out_dir else {
        bail!(
            "say where to write: -o OUT for one input or --out-dir DIR for several \
             (pack never rewrites its input; --dry-run only reports)"
        );
    };
    if dir.exists() && !dir.is_dir() {
        bail!("--out-dir {}: not a directory", dir.display());
    }
    std::fs::create_dir_all(dir)
        .map_err(|err| anyhow::anyhow!("--out-dir {}: cannot create it: {err}", dir.display()))?;
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for input in &args.files {
        let Some(name) = input.file_name() else {
            bail!(
                "{}: has no file name to write under --out-dir",
                input.display()
            );
        };
        if !seen.insert(name.to_os_string()) {
            bail!(
                "two inputs are named {}: under --out-dir one would overwrite the other",
                name.to_string_lossy()
            );
        }
        out.push(Some(dir.join(name)));
    }
    Ok(out)
}
