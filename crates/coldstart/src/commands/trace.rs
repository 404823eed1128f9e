//! `coldstart trace`: one traced run of a program, appended to a profile,
//! with a spinner while it runs and a one-screen summary at the end.

use crate::args::{CacheArg, TraceArgs};
use crate::output;
use anyhow::{Context, bail};
use coldstart_analyze as analyze;
use coldstart_profile::{CacheMode, EndReason, Profile};
use coldstart_record::launch::{Forward, Identity, LaunchSpec};
use coldstart_record::trace::{self, Stage, TraceOptions};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

pub fn run(args: &TraceArgs) -> anyhow::Result<ExitCode> {
    let timeout = args.readiness.timeout()?;
    if args.buffer_mb == 0 {
        bail!("--buffer-mb must be at least 1");
    }
    let ready_regex = args.readiness.regex()?;
    // SAFETY: geteuid never fails.
    if unsafe { libc::geteuid() } != 0 {
        bail!(
            "coldstart trace needs root for kernel tracing and dropping caches; run it as: sudo coldstart trace ... (the program still runs as you)"
        );
    }
    let identity =
        Identity::invoking_user(args.run_as.as_root).context("cannot look up the invoking user")?;
    let cache = match args.cache {
        _ if !args.evict.is_empty() => CacheMode::Selective,
        CacheArg::Cold => CacheMode::Cold,
        CacheArg::Selective => CacheMode::Selective,
        CacheArg::Warm => CacheMode::Warm,
    };
    let evict = if !args.evict.is_empty() {
        args.evict.clone()
    } else if cache == CacheMode::Selective {
        files_to_evict(args.evict_from.as_deref().unwrap_or(&args.output))?
    } else {
        Vec::new()
    };

    let interrupted = super::interrupt_flag()?;

    let existed = args.output.exists();
    let mut profile = Profile::create_or_open(&args.output)?;
    if !existed && identity.switches() {
        give_to(&args.output, &identity);
    }
    let mut options = TraceOptions {
        launch: LaunchSpec {
            argv: args.program.command.clone(),
            identity: identity.clone(),
            ready_regex,
            ready_file: args.readiness.ready_file.clone(),
            timeout: Some(timeout),
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
        grace: Duration::from_millis(500),
        user_faults: args.user_faults,
        read_ahead_kb: args.read_ahead_kb,
    };
    let functions_dir = if args.functions {
        Some(records_dir_for(&mut options.launch)?)
    } else {
        None
    };
    let spinner = output::spinner();
    let summary = trace::trace(
        &mut profile,
        &options,
        &interrupted,
        |stage| match stage {
            Stage::RemovedStale(names) => spinner.println(format!(
                "coldstart: removed trace instances left by an earlier coldstart: {}",
                names.join(", ")
            )),
            Stage::DroppingCaches => spinner.set_message("dropping the page cache"),
            Stage::Evicting {
                files,
                still_resident_pages,
            } => {
                spinner.println(format!(
                    "coldstart: evicted {files} files of the previous run{}",
                    if still_resident_pages > 0 {
                        format!(" ({still_resident_pages} pages stay resident: mapped by running processes)")
                    } else {
                        String::new()
                    }
                ));
            }
            Stage::WarmingUp => spinner.set_message("warm-up run (untraced)"),
            Stage::Readahead {
                devices,
                read_ahead_kb,
            } => spinner.println(format!(
                "coldstart: read_ahead_kb set to {read_ahead_kb} on {devices} devices for this run"
            )),
            Stage::RestoredReadahead(paths) => spinner.println(format!(
                "coldstart: restored readahead settings an earlier coldstart left changed: {}",
                paths
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
            Stage::Tracing => spinner.set_message("tracing"),
            Stage::Writing { events } => {
                spinner.set_message(format!("writing {events} events to the profile"))
            }
            Stage::Warning(text) => spinner.println(format!("coldstart: warning: {text}")),
        },
        |progress| {
            spinner.set_message(format!(
                "tracing {:.1} s, {} of trace data",
                progress.elapsed_ns as f64 / 1e9,
                coldstart_binary::human_bytes(progress.trace_bytes)
            ))
        },
    )
    .with_context(|| format!("tracing {}", args.program.command.first().map(|c| c.to_string_lossy()).unwrap_or_default()));
    spinner.finish_and_clear();
    let summary = summary?;
    let functions = match &functions_dir {
        Some(dir) => Some(record_functions(&mut profile, &summary, dir.path())?),
        None => None,
    };
    if !existed && identity.switches() {
        give_to(&args.output, &identity);
    }

    let (report, _) = analyze::analyze(
        &profile,
        &analyze::Options {
            run: Some(summary.run),
            attribute: false,
            ..Default::default()
        },
    )?;
    let view = Summary {
        profile: args.output.display().to_string(),
        run: summary.run,
        end_reason: summary.reason.as_str(),
        ready_ms: report.run.ready_ns.map(ms),
        ended_ms: ms(summary.ended_ns),
        warmup_ms: summary.warmup_ns.map(ms),
        exit_code: summary.exit.code,
        exit_signal: summary.exit.signal,
        processes: summary.processes_in_tree,
        files: report.files.len(),
        unresolved_files: summary.unresolved_files,
        outside_files: report.outside_files.len(),
        bytes_read: report.totals.bytes_read,
        bytes_touched: report.totals.bytes_touched,
        read_requests: report.totals.read_requests,
        read_amplification: report.totals.read_amplification,
        events: summary.events,
        lost_events: summary.lost_events,
        top_files: report
            .files
            .iter()
            .take(5)
            .map(|f| TopFile {
                path: f.path.clone(),
                bytes_read: f.bytes_read,
                bytes_touched: f.bytes_touched,
            })
            .collect(),
        functions,
    };
    if args.json {
        output::print_json(&view)?;
    } else {
        output::print_text(&render(&view))?;
    }
    Ok(match summary.reason {
        EndReason::Interrupted => ExitCode::from(130),
        _ => ExitCode::SUCCESS,
    })
}

/// A fresh directory the instrumented program writes its function records
/// to, as itself, handed to it through its environment.
pub(crate) fn records_dir_for(launch: &mut LaunchSpec) -> anyhow::Result<tempfile::TempDir> {
    let dir = tempfile::Builder::new()
        .prefix("coldstart-functions")
        .tempdir()
        .context("creating a directory for the function records")?;
    if launch.identity.switches() {
        std::os::unix::fs::chown(
            dir.path(),
            Some(launch.identity.uid),
            Some(launch.identity.gid),
        )
        .with_context(|| format!("giving {} to the traced user", dir.path().display()))?;
    }
    launch.env.push((
        coldstart_record::functions::DIR_ENV.into(),
        dir.path().as_os_str().to_owned(),
    ));
    Ok(dir)
}

/// Reads the function records the instrumented program left, names the
/// functions from each binary's symbols and adds them to the run.
pub(crate) fn record_functions(
    profile: &mut Profile,
    summary: &trace::TraceSummary,
    dir: &Path,
) -> anyhow::Result<FunctionsSummary> {
    use coldstart_record::functions;
    let dumps = functions::read_dump_dir(dir)?;
    if dumps.is_empty() {
        output::step(
            "warning: --functions: the program wrote no function records; was it compiled with \
             -finstrument-functions (gcc) or -finstrument-function-entry-bare (clang) and linked \
             with coldstart's runtime (coldstart runtime --help)? Did it exit normally?",
        );
    }
    let trace = functions::Symbolizer::new().symbolize(&dumps);
    let rows = trace.profile_rows(summary.start_monotonic_ns);
    profile.write_functions(summary.run, &rows.files, &rows.functions)?;
    let unnamed: u64 = trace.modules.iter().map(|m| m.unnamed).sum();
    let dropped = trace.dropped();
    if dropped > 0 {
        output::step(&format!(
            "warning: --functions: the runtime's table was full and {dropped} calls went \
             unrecorded; raise COLDSTART_FUNCTIONS_CAPACITY"
        ));
    }
    Ok(FunctionsSummary {
        processes: dumps.len(),
        functions: rows.functions.len(),
        unnamed,
        dropped,
    })
}

#[derive(Serialize)]
pub(crate) struct FunctionsSummary {
    processes: usize,
    pub functions: usize,
    unnamed: u64,
    dropped: u64,
}

/// The files the program used in the latest run of `profile`.
fn files_to_evict(profile: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let profile = Profile::open(profile).with_context(|| {
        "--cache selective evicts the files of a previous run: trace once with --cache cold first, or give --evict-from PROFILE"
    })?;
    Ok(analyze::files_used(&profile, None)?)
}

/// A profile created through sudo belongs to the user, like their files.
fn give_to(path: &Path, identity: &Identity) {
    for suffix in ["", "-wal", "-shm"] {
        let mut name = path.as_os_str().to_owned();
        name.push(suffix);
        let _ = std::os::unix::fs::chown(Path::new(&name), Some(identity.uid), Some(identity.gid));
    }
}

fn ms(ns: i64) -> f64 {
    (ns as f64 / 1e4).round() / 100.0
}

#[derive(Serialize)]
struct Summary {
    profile: String,
    run: i64,
    end_reason: &'static str,
    ready_ms: Option<f64>,
    ended_ms: f64,
    /// --cache warm: the untraced warm-up run, launched the same way.
    warmup_ms: Option<f64>,
    exit_code: Option<i32>,
    exit_signal: Option<i32>,
    processes: usize,
    files: usize,
    unresolved_files: usize,
    outside_files: usize,
    bytes_read: u64,
    bytes_touched: u64,
    read_requests: u64,
    read_amplification: Option<f64>,
    events: usize,
    lost_events: u64,
    top_files: Vec<TopFile>,
    /// With --functions: what the instrumentation recorded.
    #[serde(skip_serializing_if = "Option::is_none")]
    functions: Option<FunctionsSummary>,
}

#[derive(Serialize)]
struct TopFile {
    path: String,
    bytes_read: u64,
    bytes_touched: u64,
}

fn render(s: &Summary) -> String {
    use coldstart_binary::human_bytes;
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(out, "\nrun {} in {}: {}", s.run, s.profile, s.end_reason);
    match s.ready_ms {
        Some(ready) => {
            let _ = writeln!(out, "  ready after      {ready:.1} ms");
        }
        None => {
            let _ = writeln!(out, "  ended after      {:.1} ms (never ready)", s.ended_ms);
        }
    }
    if let Some(warmup) = s.warmup_ms {
        let _ = writeln!(
            out,
            "  untraced run     {warmup:.1} ms (the warm-up, launched the same way)"
        );
    }
    if let Some(code) = s.exit_code {
        let _ = writeln!(out, "  exit status      {code}");
    }
    if let Some(signal) = s.exit_signal {
        let _ = writeln!(out, "  killed by signal {signal}");
    }
    let _ = writeln!(out, "  processes        {}", s.processes);
    if let Some(f) = &s.functions {
        let _ = writeln!(
            out,
            "  functions        {} first calls from {} processes ({} unnamed, {} calls dropped)",
            f.functions, f.processes, f.unnamed, f.dropped
        );
    }
    let _ = writeln!(
        out,
        "  files            {} ({} without a path, {} read only by other processes)",
        s.files, s.unresolved_files, s.outside_files
    );
    let _ = writeln!(out, "  read into cache  {}", human_bytes(s.bytes_read));
    let _ = writeln!(
        out,
        "  touched          {}{}",
        human_bytes(s.bytes_touched),
        s.read_amplification
            .map(|a| format!("   (read amplification {a:.1}x)"))
            .unwrap_or_default()
    );
    let _ = writeln!(out, "  read requests    {}", s.read_requests);
    let _ = writeln!(out, "  trace events     {}", s.events);
    if s.lost_events > 0 {
        let _ = writeln!(
            out,
            "  LOST EVENTS      {} (figures are lower bounds; use a bigger --buffer-mb)",
            s.lost_events
        );
    }
    if !s.top_files.is_empty() {
        let _ = writeln!(out, "\n  most read:");
        for f in &s.top_files {
            let _ = writeln!(
                out,
                "  {:>10} read {:>10} touched  {}",
                human_bytes(f.bytes_read),
                human_bytes(f.bytes_touched),
                f.path
            );
        }
    }
    let _ = writeln!(out, "\nnext: coldstart report {}", s.profile);
    out
}
