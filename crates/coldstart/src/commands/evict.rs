//! `coldstart evict`: drop files from the page cache and say what stayed
//! resident and who holds it; `--check` only measures residency (like
//! vmtouch); `--all` drops the whole cache.

use crate::args::EvictArgs;
use crate::output;
use anyhow::Context;
use coldstart_analyze as analyze;
use coldstart_profile::Profile;
use coldstart_system::cache;
use coldstart_system::eviction::{self, EvictReport, FileError, Mode};
use coldstart_system::walk;
use std::process::ExitCode;

pub fn run(args: &EvictArgs) -> anyhow::Result<ExitCode> {
    if args.all {
        return drop_all(args);
    }
    let mut walk_errors = Vec::new();
    let mut targets = Vec::new();
    for path in &args.paths {
        walk::files_under(path, &mut targets, &mut walk_errors);
    }
    if let Some(profile_path) = &args.profile {
        let profile = Profile::open(profile_path)?;
        let files = analyze::files_used(&profile, args.profile_run.run)
            .with_context(|| format!("cannot read the files of {}", profile_path.display()))?;
        targets.extend(files);
    }
    // The same file named twice (a path and its directory) is done once.
    let mut seen = std::collections::HashSet::new();
    targets.retain(|p| seen.insert(p.clone()));

    let bar = output::progress(
        targets.len() as u64,
        if args.check { "checking" } else { "evicting" },
    );
    let mode = if args.check {
        Mode::Check { pages: args.pages }
    } else {
        Mode::Evict
    };
    let errors = walk_errors.into_iter().map(FileError::from).collect();
    let report = eviction::evict_files(&targets, mode, errors, || bar.inc(1));
    bar.finish_and_clear();

    if args.json {
        output::print_json(&report)?;
    } else {
        output::print_text(&coldstart_report::evict::render(&report))?;
    }
    for error in &report.errors {
        eprintln!("coldstart: error: {}", error.error);
    }
    Ok(if report.errors.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn drop_all(args: &EvictArgs) -> anyhow::Result<ExitCode> {
    let before = meminfo_cached();
    cache::drop_all()?;
    let report: EvictReport = eviction::dropped_all(before, meminfo_cached());
    if args.json {
        output::print_json(&report)?;
    } else {
        output::print_text(&coldstart_report::evict::render_dropped_all(&report))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// "Cached:" from /proc/meminfo, in bytes.
fn meminfo_cached() -> Option<u64> {
    coldstart_system::proc::meminfo_bytes("Cached")
}
