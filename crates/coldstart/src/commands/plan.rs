//! `coldstart plan`: compile a prefetch plan from a profile's runs and write
//! it as text, with a summary of what it holds and what was left out.

use crate::args::PlanArgs;
use crate::output;
use anyhow::{Context, bail};
use coldstart_binary::human_bytes;
use coldstart_plan::compile::{self, CompileOptions};
use coldstart_prefetch::calibrate::{self, Calibration};
use coldstart_prefetch::format;
use coldstart_profile::Profile;
use serde::Serialize;
use std::path::Path;
use std::process::ExitCode;

#[derive(Serialize)]
struct PlanSummary<'a> {
    output: String,
    files: usize,
    extents: usize,
    bytes: u64,
    calibration: Option<&'a Calibration>,
    stats: &'a compile::CompileStats,
    warnings: &'a [String],
    plan: &'a coldstart_prefetch::Plan,
}

pub fn run(args: &PlanArgs) -> anyhow::Result<ExitCode> {
    if !(args.min_fraction > 0.0 && args.min_fraction <= 1.0) {
        bail!("--min-fraction must be above 0 and at most 1");
    }
    let profile = Profile::open(&args.profile)?;
    let page_size = coldstart_system::cache::page_size();
    if args.max_extent_kb * 1024 < page_size {
        bail!("--max-extent-kb must be at least one page ({page_size} bytes)");
    }
    let label = args.profile.display().to_string();
    let mut options = CompileOptions {
        runs: (!args.runs.is_empty()).then(|| args.runs.clone()),
        min_fraction: args.min_fraction,
        merge_gap_pages: args
            .merge_gap_kb
            .map_or(compile::DEFAULT_MERGE_GAP_BYTES, |kb| kb * 1024)
            / page_size,
        max_extent_pages: args.max_extent_kb * 1024 / page_size,
        max_bytes: args.max_mb.map(|mb| mb << 20),
    };
    let mut compiled = compile::compile(&profile, &label, &options)
        .with_context(|| format!("cannot compile a plan from {label}"))?;

    let mut calibration = None;
    if args.calibrate {
        let largest = compiled
            .plan
            .most_planned_file(16 << 20)
            .map(|f| f.path.clone())
            .context("the plan has no file of 16 MiB or more to calibrate on")?;
        output::step(&format!(
            "coldstart plan: calibrating the device on {largest}"
        ));
        let measured = calibrate::calibrate(
            Path::new(&largest),
            args.threads
                .unwrap_or_else(coldstart_prefetch::replay::default_threads),
        )
        .with_context(|| format!("calibrating on {largest}"))?;
        output::step(&format!(
            "coldstart plan: a cold 4 KiB read takes {:.0} µs alone and {:.0} µs of the device's time \
             with {} in flight; sequential reads run at {:.0} MB/s: extents closer than {} are merged",
            measured.latency_us,
            measured.request_us,
            measured.threads,
            measured.bandwidth_mb_s,
            human_bytes(measured.merge_gap_bytes)
        ));
        options.merge_gap_pages = measured.merge_gap_bytes / page_size;
        compiled = compile::compile(&profile, &label, &options)?;
        calibration = Some(measured);
    }

    let text = format::write(&compiled.plan);
    let to_stdout = args.output == Path::new("-");
    if !to_stdout {
        std::fs::write(&args.output, &text)
            .with_context(|| format!("cannot write {}", args.output.display()))?;
    }
    let plan = &compiled.plan;
    if args.json {
        output::print_json(&PlanSummary {
            output: args.output.display().to_string(),
            files: plan.files.len(),
            extents: plan.extents.len(),
            bytes: plan.bytes(),
            calibration: calibration.as_ref(),
            stats: &compiled.stats,
            warnings: &compiled.warnings,
            plan,
        })?;
    } else {
        if to_stdout {
            output::print_text(&text)?;
        }
        for warning in &compiled.warnings {
            eprintln!("coldstart plan: warning: {warning}");
        }
        eprintln!(
            "coldstart plan: {} extents of {} files, {}, from runs {:?} of {}{}",
            plan.extents.len(),
            plan.files.len(),
            human_bytes(plan.bytes()),
            plan.source.runs,
            label,
            if to_stdout {
                String::new()
            } else {
                format!(": wrote {}", args.output.display())
            }
        );
    }
    Ok(ExitCode::SUCCESS)
}
