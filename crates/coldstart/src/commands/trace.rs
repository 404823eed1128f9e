//! `coldstart trace`: one traced run of a program, appended to a profile,
//! with a spinner while it runs and a one-screen summary at the end.

use crate::args::TraceArgs;
use crate::output;
use anyhow::{Context, bail};
use coldstart_analyze as analyze;
use coldstart_profile::summary::{FunctionsSummary, TraceSummary};
use coldstart_profile::{CacheMode, EndReason, Profile};
use coldstart_record::function_records::{record_functions, records_dir_for};
use coldstart_record::trace::{self, Stage, TraceOptions};
use coldstart_report::trace::Summary;
use coldstart_system::launch::{self, Forward, Identity, LaunchSpec};
use indicatif::ProgressBar;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

pub fn run(args: &TraceArgs) -> anyhow::Result<ExitCode> {
    if args.blocks {
        return super::blocks::run(args);
    }
    if args.buffer_mb == 0 {
        bail!("--buffer-mb must be at least 1");
    }
    if !launch::is_root() {
        bail!(
            "coldstart trace needs root for kernel tracing and dropping caches; run it as: sudo coldstart trace ... (the program still runs as you)"
        );
    }
    let identity =
        Identity::invoking_user(args.run_as.as_root).context("cannot look up the invoking user")?;
    let interrupted = super::interrupt_flag()?;
    let mut options = trace_options(args, identity.clone())?;

    let existed = args.output.exists();
    let mut profile = Profile::create_or_open(&args.output)?;
    if !existed && identity.switches() {
        coldstart_profile::give_to(&args.output, identity.uid, identity.gid);
    }
    let functions_dir = if args.functions {
        Some(records_dir_for(&mut options.launch)?)
    } else {
        None
    };
    let spinner = output::spinner();
    let traced = trace::trace_then_clean_up(
        &mut profile,
        &options,
        &interrupted,
        |stage| show_stage(&spinner, stage),
        |progress| {
            spinner.set_message(format!(
                "tracing {:.1} s, {} of trace data",
                progress.elapsed_ns as f64 / 1e9,
                coldstart_binary::human_bytes(progress.trace_bytes)
            ))
        },
    )
    .with_context(|| {
        format!(
            "tracing {}",
            args.program
                .command
                .first()
                .map(|c| c.to_string_lossy())
                .unwrap_or_default()
        )
    });
    spinner.finish_and_clear();
    // The kernel's cleanup runs on while the summary is shown and the
    // profile closed.
    let (summary, _cleanup) = traced?;
    let functions = match &functions_dir {
        Some(dir) => {
            let recorded = record_functions(&mut profile, &summary, dir.path())?;
            recorded.warnings.iter().for_each(|w| output::step(w));
            Some(recorded)
        }
        None => None,
    };
    if !existed && identity.switches() {
        coldstart_profile::give_to(&args.output, identity.uid, identity.gid);
    }
    print_summary(args, &profile, &summary, functions)?;
    drop(profile);
    Ok(match summary.reason {
        EndReason::Interrupted => ExitCode::from(130),
        _ => ExitCode::SUCCESS,
    })
}

/// What the flags ask of the trace: the program and when it is ready, the
/// cache state and what selective-cold evicts, the buffers and probes.
fn trace_options(args: &TraceArgs, identity: Identity) -> anyhow::Result<TraceOptions> {
    let cache = if args.evict.is_empty() {
        CacheMode::from(args.cache)
    } else {
        CacheMode::Selective
    };
    let evict = if !args.evict.is_empty() {
        args.evict.clone()
    } else if cache == CacheMode::Selective {
        files_to_evict(args.evict_from.as_deref().unwrap_or(&args.output))?
    } else {
        Vec::new()
    };
    Ok(TraceOptions {
        launch: LaunchSpec {
            argv: args.program.command.clone(),
            identity,
            ready_regex: args.readiness.regex()?,
            ready_file: args.readiness.ready_file.clone(),
            timeout: Some(args.readiness.timeout()?),
            forward: if args.json {
                Forward::ToStderr
            } else {
                Forward::Through
            },
            env: Vec::new(),
        },
        cache,
        evict,
        buffer_kb_per_cpu: args.buffer_mb * 1024,
        grace: launch::DEFAULT_GRACE,
        user_faults: args.user_faults,
        read_ahead_kb: args.read_ahead_kb,
        loader: args.loader,
        loader_lookups: args.loader_lookups,
    })
}

/// One stage of the trace on the spinner: a message while it lasts, or a
/// line above it for what the user should know.
fn show_stage(spinner: &ProgressBar, stage: Stage) {
    match stage {
        Stage::RemovedStale(names) => output::say(
            spinner,
            format!(
                "coldstart: removed trace instances and uprobes left by an earlier coldstart: {}",
                names.join(", ")
            ),
        ),
        Stage::DroppingCaches => spinner.set_message("dropping the page cache"),
        Stage::Evicting {
            files,
            still_resident_pages,
        } => {
            output::say(
                spinner,
                format!(
                    "coldstart: evicted {files} files of the previous run{}",
                    if still_resident_pages > 0 {
                        format!(
                            " ({still_resident_pages} pages stay resident: mapped by running processes)"
                        )
                    } else {
                        String::new()
                    }
                ),
            );
        }
        Stage::WarmingUp => spinner.set_message("warm-up run (untraced)"),
        Stage::Readahead {
            devices,
            read_ahead_kb,
        } => output::say(
            spinner,
            format!(
                "coldstart: read_ahead_kb set to {read_ahead_kb} on {devices} devices for this run"
            ),
        ),
        Stage::RestoredReadahead(paths) => output::say(
            spinner,
            format!(
                "coldstart: restored readahead settings an earlier coldstart left changed: {}",
                paths
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ),
        Stage::Tracing => spinner.set_message("tracing"),
        Stage::Writing { events } => {
            spinner.set_message(format!("writing {events} events to the profile"))
        }
        Stage::Warning(text) => output::say(spinner, format!("coldstart: warning: {text}")),
    }
}

/// The run's one-screen summary, as text or `--json`.
fn print_summary(
    args: &TraceArgs,
    profile: &Profile,
    summary: &TraceSummary,
    functions: Option<FunctionsSummary>,
) -> anyhow::Result<()> {
    let (report, _) = analyze::analyze(
        profile,
        &analyze::Options {
            run: Some(summary.run),
            attribute: false,
            ..Default::default()
        },
    )?;
    let view = Summary::new(&args.output, summary, &report, functions);
    if args.json {
        output::print_json(&view)
    } else {
        output::print_text(&coldstart_report::trace::render(&view))
    }
}

/// The files the program used in the latest run of `profile`.
fn files_to_evict(profile: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let profile = Profile::open(profile).with_context(|| {
        "--cache selective evicts the files of a previous run: trace once with --cache cold first, or give --evict-from PROFILE"
    })?;
    Ok(analyze::files_used(&profile, None)?)
}
