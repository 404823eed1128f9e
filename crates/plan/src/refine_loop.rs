//! The refine loop behind `coldstart plan --refine`: a plan that learns
//! from the starts it serves.
//!
//! The seed plan is compiled from the profile's readahead-off runs (traced
//! first when there are none). Then, in turn: a cold start of the program
//! through the prefetcher with the current plan is traced at the device's
//! normal readahead; its misses are counted (`crate::misses`);
//! the plan is refined from them (`crate::refine`). The loop
//! stops when a start leaves nothing to learn (refining it would add and
//! drop no page), when it has run its iterations, or when it is interrupted.
//! It does not stop when a start's misses fail to shrink: at a large
//! readahead a start reads a whole window for the one unplanned page it
//! demands, so the plan learns about a page per window per start (touches
//! of pages a window already brought in are not seen until that window is
//! gone) while the counts stay flat. The plan file is replaced only by a
//! plan whose start left fewer of the misses a plan can fix
//! ([`plannable_misses`]), or as few and read less, than every plan before it,
//! and always atomically, so an interrupted loop leaves the best plan
//! measured so far.

use crate::compile::{CompileOptions, compile};
use crate::misses::{MissAccount, MissReason, account};
use crate::refine::{RefineStats, refine, retime};
use anyhow::Context;
use coldstart_analyze::loaded::LoadedRun;
use coldstart_prefetch::launcher::Wrapper;
use coldstart_prefetch::{Plan, format};
use coldstart_profile::summary::TraceSummary;
use coldstart_profile::{EndReason, Profile, RunId};
use coldstart_system::cache::CacheMode;
use coldstart_system::launch::LaunchSpec;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

/// Where the loop says what it is doing, one line at a time.
pub type Step<'a> = &'a mut dyn FnMut(&str);

/// One start the loop needs traced into a profile.
pub struct TracedStart {
    /// The program, behind the prefetcher when the start is served.
    pub launch: LaunchSpec,
    pub cache: CacheMode,
    /// None: the device's own setting.
    pub read_ahead_kb: Option<u64>,
}

/// The tracer the loop's starts go through (`coldstart_record::trace`,
/// quietly): handed in by the caller, so that plan, and the report that
/// renders its results, do not link the tracer.
pub type Tracer<'a> = &'a mut dyn FnMut(&mut Profile, TracedStart) -> anyhow::Result<TraceSummary>;

/// A start in which pages the prefetcher read and the program later
/// needed were evicted, more than this fraction of the plan's bytes, was
/// disturbed (memory pressure, caches dropped by something else) and is
/// traced once more.
pub const DISTURBED_AT: f64 = 0.01;

/// What a refinement can still fix in a start: the pages the program
/// demanded that the plan did not hold (its file or its page was not in
/// it, whether or not the program had asked the kernel for it first).
/// Races, evictions and the pages the program asked for but never demanded
/// are not fixed by adding pages; and the bytes a start reads vary more
/// from start to start (a race triggers a readahead window of up to
/// read_ahead_kb) than this count does, so the loop judges plans by it.
pub fn plannable_misses(misses: &MissAccount) -> u64 {
    [
        MissReason::FileNotInPlan,
        MissReason::PageNotInPlan,
        MissReason::Asked,
    ]
    .iter()
    .map(|&r| misses.by_reason.get(r).demanded_pages)
    .sum()
}

pub struct RefineOptions {
    pub profile: PathBuf,
    /// Where the plan is written (replaced atomically when it improves).
    pub plan_path: PathBuf,
    /// The program, started as the user and with the readiness the caller
    /// chose; the loop puts the prefetcher in front of it.
    pub launch: LaunchSpec,
    /// What starts the program with a plan (`coldstart-run`, or
    /// `coldstart run`).
    pub prefetcher: Wrapper,
    /// Serve the starts with `--no-read-around`, as the plan will be
    /// served, so that the misses learned are the ones left under it.
    pub no_read_around: bool,
    /// Readahead-off starts to trace first when the profile has none.
    pub seeds: usize,
    /// Starts to trace with a plan, at most.
    pub iterations: usize,
    /// read_ahead_kb for the served starts (None: the device's own).
    pub read_ahead_kb: Option<u64>,
    pub compile: CompileOptions,
}

/// One traced start with a plan.
#[derive(Debug, Clone, Serialize)]
pub struct Iteration {
    pub run: RunId,
    /// The plan this start was served by (`PLAN.startN`).
    pub plan: String,
    pub plan_bytes: u64,
    pub plan_extents: usize,
    /// Whether this plan is the best so far and was written.
    pub kept: bool,
    pub misses: MissAccount,
    /// How the next plan was refined from this start, when one was.
    pub refined: Option<RefineStats>,
}

#[derive(Debug, Clone, Serialize)]
pub struct RefineReport {
    pub plan_path: String,
    pub seed_runs: Vec<RunId>,
    /// The seed runs traced by this loop (none when the profile had them).
    pub seeds_traced: Vec<RunId>,
    pub seed_bytes: u64,
    pub iterations: Vec<Iteration>,
    /// The length of the warm start whose order of first use the plans
    /// were put in, ms.
    pub ordered_by_warm_start_ms: Option<f64>,
    /// Index into `iterations` of the plan written.
    pub best: Option<usize>,
    pub stopped: String,
}

/// Runs the loop, tracing each start through `trace`; `step` hears each
/// stage, `interrupted` stops it between (and, through the tracer, inside)
/// starts.
pub fn refine_loop(
    options: &RefineOptions,
    trace: Tracer<'_>,
    interrupted: &AtomicBool,
    step: Step<'_>,
) -> anyhow::Result<RefineReport> {
    let mut profile = Profile::create_or_open(&options.profile)?;
    let label = options.profile.display().to_string();
    let mut seeds_traced = Vec::new();
    if options.compile.runs.is_none() && seed_runs(&profile)?.is_empty() {
        for i in 0..options.seeds {
            check(interrupted)?;
            step(&format!(
                "tracing seed {} of {} with readahead off (the exact pages the start needs)",
                i + 1,
                options.seeds
            ));
            let summary = trace(
                &mut profile,
                TracedStart {
                    launch: clone_launch(&options.launch, None),
                    cache: CacheMode::Cold,
                    read_ahead_kb: Some(0),
                },
            )
            .context("tracing a seed start")?;
            ended_well(summary.reason, summary.run)?;
            seeds_traced.push(summary.run);
        }
    }
    let mut compile_options = options.compile.clone();
    if compile_options.runs.is_none() {
        compile_options.runs = Some(seed_runs(&profile)?);
    }
    let seed = compile(&profile, &label, &compile_options)
        .with_context(|| format!("cannot compile the seed plan from {label}"))?
        .plan;
    step(&format!(
        "seed plan from runs {:?}: {} extents of {} files, {:.1} MiB",
        seed.source.runs,
        seed.extents.len(),
        seed.files.len(),
        mib(seed.bytes())
    ));
    let mut report = RefineReport {
        plan_path: options.plan_path.display().to_string(),
        seed_runs: seed.source.runs.clone(),
        seeds_traced,
        seed_bytes: seed.bytes(),
        iterations: Vec::new(),
        ordered_by_warm_start_ms: None,
        best: None,
        stopped: format!("ran {} iterations", options.iterations),
    };
    let result = iterate(
        options,
        trace,
        &mut profile,
        &seed,
        &mut report,
        interrupted,
        step,
    );
    if let Err(e) = result {
        if report.best.is_none() {
            return Err(e);
        }
        report.stopped = format!("{e:#}");
    }
    Ok(report)
}

fn iterate(
    options: &RefineOptions,
    trace: Tracer<'_>,
    profile: &mut Profile,
    seed: &Plan,
    report: &mut RefineReport,
    interrupted: &AtomicBool,
    step: Step<'_>,
) -> anyhow::Result<()> {
    // The order the plans are read in: the one a warm start uses them in.
    let warm = warm_reference(options, trace, interrupted, step)?;
    report.ordered_by_warm_start_ms =
        Some(warm.ready_ns().or(warm.run.ended_ns).unwrap_or(0) as f64 / 1e6);
    let mut candidate = retime(seed, &warm);
    // (plannable misses, bytes the program read) of the best start so far.
    let mut best: Option<(u64, u64)> = None;
    let mut retried: Vec<usize> = Vec::new();
    for i in 0..options.iterations {
        check(interrupted)?;
        let candidate_path = &start_plan_path(&options.plan_path, i + 1);
        format::save(&candidate, candidate_path)
            .with_context(|| format!("cannot write {}", candidate_path.display()))?;
        make_readable(candidate_path);
        step(&format!(
            "start {} of at most {}: cold, through the prefetcher, with a {:.1} MiB plan",
            i + 1,
            options.iterations,
            mib(candidate.bytes())
        ));
        let (summary, loaded, misses) = loop {
            let summary = trace(
                profile,
                TracedStart {
                    launch: clone_launch(
                        &options.launch,
                        Some(Served {
                            wrapper: &options.prefetcher,
                            no_read_around: options.no_read_around,
                            plan: candidate_path,
                        }),
                    ),
                    cache: CacheMode::Cold,
                    read_ahead_kb: options.read_ahead_kb,
                },
            )
            .context("tracing a start with the plan")?;
            ended_well(summary.reason, summary.run)?;
            let loaded = LoadedRun::load(profile, Some(summary.run))?;
            let misses = account(&loaded, &candidate);
            if misses.prefetcher_tasks == 0 {
                anyhow::bail!(
                    "run {}: no prefetcher task ({}) in the traced start: is {} a coldstart prefetcher?",
                    summary.run,
                    coldstart_prefetch::replay::PREFETCHER_COMM,
                    options.prefetcher.path.display()
                );
            }
            let evicted = misses.by_reason.get(MissReason::Evicted).bytes;
            if evicted as f64 <= DISTURBED_AT * misses.plan_bytes as f64 || retried.contains(&i) {
                break (summary, loaded, misses);
            }
            // Something else evicted what the prefetcher read (memory
            // pressure, another tool dropping caches): the start says
            // nothing about the plan. Once more.
            retried.push(i);
            check(interrupted)?;
            step(&format!(
                "  run {}: {:.1} MiB the prefetcher read were evicted before the program used them: tracing this start again",
                summary.run,
                mib(evicted)
            ));
        };
        let score = (plannable_misses(&misses), misses.program.bytes);
        let better = best.is_none_or(|b| score < b);
        step(&format!(
            "  the prefetcher read {:.1} MiB, the program {:.1} MiB itself; {} pages it demanded were not in the plan{}",
            mib(misses.prefetcher.bytes),
            mib(misses.program.bytes),
            score.0,
            if better {
                ""
            } else {
                "; not better than the best plan, which stays"
            }
        ));
        if better {
            format::save(&candidate, &options.plan_path)
                .with_context(|| format!("cannot write {}", options.plan_path.display()))?;
            best = Some(score);
            report.best = Some(report.iterations.len());
        }
        report.iterations.push(Iteration {
            run: summary.run,
            plan: candidate_path.display().to_string(),
            plan_bytes: candidate.bytes(),
            plan_extents: candidate.extents.len(),
            kept: better,
            misses,
            refined: None,
        });
        if i + 1 == options.iterations {
            break;
        }
        let refined = refine(
            seed,
            &candidate,
            std::slice::from_ref(&loaded),
            &options.compile,
        );
        if refined.stats.added_pages == 0
            && refined.stats.dropped_pages == 0
            && refined.stats.added_lookups == 0
        {
            // Need times may still move, but the pages would not: the next
            // start would be served by the same pages.
            report.stopped = "the start left nothing to add or drop".to_string();
            return Ok(());
        }
        if let Some(last) = report.iterations.last_mut() {
            last.refined = Some(refined.stats.clone());
        }
        step(&format!(
            "  refined: {} pages added (demanded by misses), {} kept, {} dropped; {} read-around pages left out; {} lookups added",
            refined.stats.added_pages,
            refined.stats.kept_pages,
            refined.stats.dropped_pages,
            refined.stats.window_pages_left_out,
            refined.stats.added_lookups
        ));
        candidate = retime(&refined.plan, &warm);
    }
    Ok(())
}

/// The profile's runs a plan is seeded from: complete runs of a started
/// program traced with readahead off (the exact pages a start needs), not
/// served by a prefetcher. Runs at other settings (a warm trace, a cold one
/// at the device's readahead) would make the seed a superset: they are
/// left out unless named with --runs.
fn seed_runs(profile: &Profile) -> anyhow::Result<Vec<RunId>> {
    let mut out = Vec::new();
    for run in profile.runs()? {
        if run.complete
            && run.end_reason != Some(EndReason::Failed)
            && run.start.read_ahead_kb == Some(0)
            && !crate::compile::served_by_prefetcher(&run, &profile.processes(run.id)?)
        {
            out.push(run.id);
        }
    }
    Ok(out)
}

/// A warm start of the program, traced into a profile of its own that is
/// removed afterwards (a warm run must never seed a plan): when it first
/// uses each page is the order a perfect prefetch reads them in
/// (`crate::floor`), which the plans are put in
/// (`crate::refine::retime`).
fn warm_reference(
    options: &RefineOptions,
    trace: Tracer<'_>,
    interrupted: &AtomicBool,
    step: Step<'_>,
) -> anyhow::Result<LoadedRun> {
    check(interrupted)?;
    step("tracing a warm start, for the order the start uses its pages in");
    let dir = options
        .plan_path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let scratch = tempfile::Builder::new()
        .prefix(".coldstart-warm-")
        .tempdir_in(dir)
        .or_else(|_| tempfile::tempdir())
        .context("cannot make a directory for the warm start's profile")?;
    let path = scratch.path().join("warm.db");
    let mut profile = Profile::create_or_open(&path)?;
    let summary = trace(
        &mut profile,
        TracedStart {
            launch: clone_launch(&options.launch, None),
            cache: CacheMode::Warm,
            read_ahead_kb: options.read_ahead_kb,
        },
    )
    .context("tracing a warm start")?;
    ended_well(summary.reason, summary.run)?;
    Ok(LoadedRun::load(&profile, Some(summary.run))?)
}

fn check(interrupted: &AtomicBool) -> anyhow::Result<()> {
    if interrupted.load(Ordering::Relaxed) {
        anyhow::bail!("interrupted");
    }
    Ok(())
}

/// A start the loop can learn from: it ran to its end or readiness.
fn ended_well(reason: EndReason, run: RunId) -> anyhow::Result<()> {
    match reason {
        EndReason::Exited | EndReason::ReadyRegex | EndReason::ReadyFile => Ok(()),
        other => anyhow::bail!(
            "run {run} ended by {}: not a start to learn from",
            other.as_str()
        ),
    }
}

/// How a start is served: through which wrapper, with which plan.
struct Served<'a> {
    wrapper: &'a Wrapper,
    no_read_around: bool,
    plan: &'a Path,
}

/// The program's launch, behind the prefetcher when `served`.
fn clone_launch(launch: &LaunchSpec, served: Option<Served<'_>>) -> LaunchSpec {
    let argv = match served {
        Some(served) => {
            let flags: &[&str] = if served.no_read_around {
                &["--no-read-around"]
            } else {
                &[]
            };
            served.wrapper.argv(flags, served.plan, &launch.argv)
        }
        None => launch.argv.clone(),
    };
    LaunchSpec {
        argv,
        identity: launch.identity.clone(),
        ready_regex: launch.ready_regex.clone(),
        ready_file: launch.ready_file.clone(),
        timeout: launch.timeout,
        forward: launch.forward,
        env: launch.env.clone(),
    }
}

/// The plan of the `start`-th start (from 1), beside the plan file: kept,
/// so that `coldstart report --run N` finds the plan run N was served by.
pub fn start_plan_path(plan: &Path, start: usize) -> PathBuf {
    let name = plan
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "plan".to_string());
    plan.with_file_name(format!("{name}.start{start}"))
}

/// The program runs as the invoking user: it must be able to read the
/// plan root wrote.
fn make_readable(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o644));
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1 << 20) as f64
}
