//! `coldstart order`: turn a profile's startup traces of one binary into an
//! order file for a linker or BOLT, and say what could not be ordered.

use crate::args::OrderArgs;
use crate::output;
use anyhow::{Context, bail};
use coldstart_layout::Linker;
use coldstart_layout::split::{SplitReport, split_from_profile};
use coldstart_layout::traced::{ProfileOrder, order_from_profile};
use coldstart_profile::Profile;
use std::path::Path;
use std::process::ExitCode;

pub fn run(args: &OrderArgs) -> anyhow::Result<ExitCode> {
    if args.json && args.output.as_os_str() == "-" {
        bail!("--json prints the diagnostics to stdout; give the order file a path with -o");
    }
    let profile = Profile::open(&args.profile)?;
    if let Some(clusters) = &args.clusters {
        return split(args, &profile, clusters);
    }
    let report = order_from_profile(
        &profile,
        &ProfileOrder {
            binary: &args.binary,
            runs: &args.runs,
            module: args.module.as_deref(),
            pages_only: args.pages,
            strategy: args.strategy,
            linker: args.linker,
            objects: &args.objects,
            ld: &args.ld,
            output: &args.output,
        },
    )?;
    if args.output.as_os_str() == "-" {
        output::print_text(&report.text)?;
    } else {
        std::fs::write(&args.output, &report.text)
            .with_context(|| format!("writing {}", args.output.display()))?;
    }
    if args.json {
        output::print_json(&report)?;
    } else {
        eprint!("{}", coldstart_report::order::render(&report));
    }
    Ok(ExitCode::SUCCESS)
}

/// `--clusters`: the cluster file and lld's order from a block trace.
fn split(args: &OrderArgs, profile: &Profile, clusters: &Path) -> anyhow::Result<ExitCode> {
    let bolt = match args.linker {
        Linker::Lld => false,
        Linker::Bolt => true,
        _ => bail!(
            "--clusters splits functions through clang and lld (--linker lld: a cluster file and a \
             symbol order) or through BOLT (--linker bolt: a profile and a function order); \
             gold, GNU ld and the others cannot order the split parts"
        ),
    };
    let report = split_from_profile(profile, &args.binary, &args.block_run, &args.runs, bolt)?;
    let (split, order) = if bolt {
        (report.order.bolt_profile(), report.order.function_order())
    } else {
        (report.order.cluster_file(), report.order.symbol_order())
    };
    write_file(clusters, &split)?;
    if args.output.as_os_str() == "-" {
        output::print_text(&order)?;
    } else {
        write_file(&args.output, &order)?;
    }
    if args.json {
        output::print_json(&report)?;
    } else {
        eprint!("{}", render_split(&report, clusters, bolt));
    }
    Ok(ExitCode::SUCCESS)
}

/// Writes `text` whole to a file beside `path`, then renames it over
/// `path`: an interrupted write leaves the old file.
fn write_file(path: &Path, text: &str) -> anyhow::Result<()> {
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let mut file = tempfile::NamedTempFile::new_in(dir)
        .with_context(|| format!("writing {}", path.display()))?;
    std::io::Write::write_all(&mut file, text.as_bytes())
        .with_context(|| format!("writing {}", path.display()))?;
    file.persist(path)
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

fn render_split(report: &SplitReport, clusters: &Path, bolt: bool) -> String {
    let order = &report.order;
    let human = coldstart_binary::human_bytes;
    let mut out = format!(
        "{} functions split ({} more placed whole) from block {} of {}: {} blocks ran, {} of \
         code in startup clusters instead of {} in whole functions\n",
        order.split().count(),
        order.functions.iter().filter(|f| f.whole).count(),
        output::runs_text(&report.block_runs),
        report.traced_file.display(),
        order.blocks_ran,
        human(order.startup_bytes()),
        human(order.function_bytes()),
    );
    if bolt {
        out.push_str(&format!(
            "BOLT profile: {} (llvm-bolt -data=FILE -split-functions -reorder-functions=user \
             -function-order=ORDER)\n",
            clusters.display()
        ));
    } else {
        out.push_str(&format!("cluster file: {}\n", clusters.display()));
    }
    if !order.data.is_empty() {
        let by_code = order.data.iter().filter(|d| d.source == "code").count();
        out.push_str(&format!(
            "{} data symbols follow the code in the order ({} of data): {by_code} that the start's \
             code addresses, {} more on data pages the page traces saw touched\n",
            order.data.len(),
            human(order.data.iter().map(|d| d.size).sum()),
            order.data.len() - by_code
        ));
    }
    if !order.unsplit.is_empty() {
        let bytes: u64 = order.unsplit.iter().map(|u| u.startup_bytes).sum();
        out.push_str(&format!(
            "{} functions that ran are not split ({} of their startup code):\n",
            order.unsplit.len(),
            human(bytes)
        ));
        for unsplit in order.unsplit.iter().take(20) {
            out.push_str(&format!(
                "  {} at {:#x}: {}\n",
                unsplit.name.as_deref().unwrap_or("(unnamed)"),
                unsplit.address,
                unsplit.reason
            ));
        }
        if order.unsplit.len() > 20 {
            out.push_str(&format!(
                "  ... and {} more (--json lists them all)\n",
                order.unsplit.len() - 20
            ));
        }
    }
    for warning in &report.warnings {
        out.push_str(&format!("warning: {warning}\n"));
    }
    out
}
