//! `coldstart plan`: compile a prefetch plan from a profile's runs and write
//! it as text, with a summary of what it holds and what was left out.

use crate::args::PlanArgs;
use crate::output;
use anyhow::{Context, bail};
use coldstart_binary::human_bytes;
use coldstart_plan::compile::{self, CompileOptions};
use coldstart_plan::refine_loop::{RefineOptions, TracedStart, refine_loop};
use coldstart_prefetch::calibrate::{self, Calibration};
use coldstart_prefetch::format;
use coldstart_prefetch::launcher::Wrapper;
use coldstart_profile::Profile;
use coldstart_record::trace::{self, TraceOptions};
use coldstart_system::launch::{self, Forward, LaunchSpec};
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
    let page_size = coldstart_system::cache::page_size();
    if args.max_extent_kb * 1024 < page_size {
        bail!("--max-extent-kb must be at least one page ({page_size} bytes)");
    }
    if args.refine {
        return refine(args);
    }
    let profile = Profile::open(&args.profile)?;
    let label = args.profile.display().to_string();
    let mut options = compile_options(args, page_size);
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
            "coldstart plan: a cold 4 KiB read takes {:.0} µs alone; with the queue full, as the \
             replay keeps it, a read costs {:.1} µs more and {:.0} MB/s ({} scattered reads of 4 KiB \
             took {:.1} µs each, {} of {} {:.1} µs): extents closer than {} are merged",
            measured.latency_us,
            measured.request_us,
            measured.bandwidth_mb_s,
            measured.small_reads,
            measured.small_read_us,
            measured.large_reads,
            human_bytes(measured.large_read_bytes),
            measured.large_read_us,
            human_bytes(measured.merge_gap_bytes)
        ));
        options.merge_gap_pages = measured.merge_gap_bytes / page_size;
        compiled = compile::compile(&profile, &label, &options)?;
        calibration = Some(measured);
    }

    let text = format::write(&compiled.plan);
    let to_stdout = args.output == Path::new("-");
    if !to_stdout {
        format::save(&compiled.plan, &args.output)
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

fn compile_options(args: &PlanArgs, page_size: u64) -> CompileOptions {
    CompileOptions {
        runs: (!args.runs.is_empty()).then(|| args.runs.clone()),
        min_fraction: args.min_fraction,
        merge_gap_pages: args
            .merge_gap_kb
            .map_or(compile::DEFAULT_MERGE_GAP_BYTES, |kb| kb * 1024)
            / page_size,
        max_extent_pages: args.max_extent_kb * 1024 / page_size,
        max_bytes: args.max_mb.map(|mb| mb << 20),
    }
}

/// `plan --refine`: the loop of `coldstart_plan::refine_loop`.
fn refine(args: &PlanArgs) -> anyhow::Result<ExitCode> {
    if args.output == Path::new("-") {
        bail!("--refine writes the plan to a file: give it with -o APP.plan");
    }
    if args.iterations == 0 {
        bail!("--iterations must be at least 1");
    }
    if args.calibrate {
        bail!(
            "--calibrate and --refine cannot be combined: calibrate first, then refine with --merge-gap-kb"
        );
    }
    if !launch::is_root() {
        bail!(
            "coldstart plan --refine traces cold starts, which needs root; run it as: sudo coldstart plan ... --refine -- PROGRAM (the program still runs as you)"
        );
    }
    let page_size = coldstart_system::cache::page_size();
    let options = RefineOptions {
        profile: args.profile.clone(),
        plan_path: args.output.clone(),
        launch: LaunchSpec {
            argv: args.command.clone(),
            identity: args.run_as.identity()?,
            ready_regex: args.readiness.regex()?,
            ready_file: args.readiness.ready_file.clone(),
            timeout: Some(args.readiness.timeout()?),
            forward: Forward::Discard,
            env: Vec::new(),
        },
        prefetcher: Wrapper::beside(
            std::env::current_exe().context("cannot find coldstart's own executable")?,
        ),
        no_read_around: args.no_read_around,
        seeds: args.seeds,
        iterations: args.iterations,
        read_ahead_kb: args.read_ahead_kb,
        compile: compile_options(args, page_size),
    };
    let interrupted = super::interrupt_flag()?;
    let mut tracer = |profile: &mut Profile, start: TracedStart| {
        let options = TraceOptions {
            cache: start.cache,
            read_ahead_kb: start.read_ahead_kb,
            ..TraceOptions::cold(start.launch)
        };
        Ok(trace::trace(
            profile,
            &options,
            &interrupted,
            |_| {},
            |_| {},
        )?)
    };
    let report = refine_loop(&options, &mut tracer, &interrupted, &mut |line| {
        output::step(&format!("coldstart plan: {line}"))
    })?;
    if args.json {
        output::print_json(&report)?;
    } else {
        output::print_text(&coldstart_report::refine::render(&report))?;
    }
    Ok(if report.best.is_some() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
