//! `coldstart simulate`: replay a traced run through the readahead model
//! for another read_ahead_kb or another layout, and print the prediction.

use crate::args::SimulateArgs;
use crate::output;
use anyhow::{Context, bail};
use coldstart_analyze::relayout::Relayout;
use coldstart_analyze::simulate::{self, SimulateOptions};
use coldstart_binary::OffsetIndex;
use coldstart_layout::split::split_from_profile;
use coldstart_layout::traced;
use coldstart_profile::Profile;
use coldstart_report::Style;
use std::path::Path;
use std::process::ExitCode;

pub fn run(args: &SimulateArgs) -> anyhow::Result<ExitCode> {
    let profile = Profile::open(&args.profile)?;
    let file = args
        .binary
        .as_deref()
        .map(simulate::binary_matcher)
        .transpose()?;
    let mut relayouts = Vec::new();
    if let (Some(order), Some(binary)) = (&args.order, &args.binary) {
        let names = coldstart_layout::read_order_file(order)?;
        let glob = file.as_ref().expect("--order requires --binary");
        let traced = simulate::binary_path_in_run(&profile, args.run, glob, binary)?;
        let index = OffsetIndex::from_path(traced.as_ref())
            .with_context(|| format!("reading the symbols of {traced}"))?;
        let mut relayout = Relayout::new(&traced, &index, &names);
        if let Some(run) = args.functions_run {
            let module = traced::module_glob(traced.as_ref(), None)?;
            let called = traced::called_functions(&profile, run, &index, &module)?;
            if called.is_empty() {
                bail!(
                    "run {run} of {} recorded no function of {traced} (was it traced with \
                     --functions from an instrumented build of it?)",
                    args.profile.display()
                );
            }
            relayout = relayout.with_functions(called);
        }
        if relayout.summary.placed == 0 {
            bail!(
                "none of the {} names in {} is a sized symbol of {traced} (first: {})",
                names.len(),
                order.display(),
                names.first().map_or("none", String::as_str)
            );
        }
        if relayout.summary.missing > 0 {
            output::step(&format!(
                "{} of {} names in {} are not symbols of {traced} and stay unordered (e.g. {})",
                relayout.summary.missing,
                relayout.summary.ordered,
                order.display(),
                relayout.summary.missing_examples.join(", ")
            ));
        }
        relayouts.push(relayout);
    }
    if args.split {
        let glob = file.as_ref().expect("--split requires --binary");
        let binary = args.binary.as_deref().unwrap_or_default();
        let traced = simulate::binary_path_in_run(&profile, args.run, glob, binary)?;
        let split = split_from_profile(&profile, Path::new(&traced), &args.block_run, &[], false)?;
        for warning in &split.warnings {
            output::step(&format!("warning: {warning}"));
        }
        let relayout = split.relayout(&traced);
        if relayout.summary.placed == 0 {
            bail!(
                "block {} of {} ran no block {traced} could place",
                output::runs_text(&split.block_runs),
                args.profile.display()
            );
        }
        relayouts.push(relayout);
    }
    let report = simulate::simulate(
        &profile,
        &SimulateOptions {
            run: args.run,
            read_ahead_kb: args.read_ahead_kb,
            fault_around_bytes: args.fault_around_kb.map(|kb| kb * 1024),
            file,
            against: args.against,
            relayouts,
        },
    )?;
    if args.format.json {
        output::print_json(&report)?;
    } else {
        let style = if args.format.markdown {
            Style::Markdown
        } else {
            Style::Plain
        };
        output::print_text(&coldstart_report::simulate::render(
            &report,
            style,
            args.top.0.unwrap_or(usize::MAX),
        ))?;
    }
    Ok(ExitCode::SUCCESS)
}
