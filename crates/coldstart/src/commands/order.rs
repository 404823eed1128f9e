//! `coldstart order`: turn a profile's startup traces of one binary into an
//! order file for a linker or BOLT, and say what could not be ordered.

use crate::args::OrderArgs;
use crate::output;
use anyhow::{Context, bail};
use coldstart_layout::traced::{ProfileOrder, order_from_profile};
use coldstart_profile::Profile;
use std::process::ExitCode;

pub fn run(args: &OrderArgs) -> anyhow::Result<ExitCode> {
    if args.json && args.output.as_os_str() == "-" {
        bail!("--json prints the diagnostics to stdout; give the order file a path with -o");
    }
    let profile = Profile::open(&args.profile)?;
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
