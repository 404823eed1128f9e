//! Running the benchmark: every variant (a command in a cache state) timed
//! round by round, interleaved, each run from its cache state, with the page
//! faults and storage reads of the whole process tree beside the time.

use crate::environment::Environment;
use crate::stats::{self, Ratio, Summary};
use coldstart_system::cache::{self, CacheMode};
use coldstart_system::launch::{self, EndReason, LaunchSpec};
use coldstart_system::process::children_usage;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// One thing to time: a command started in a cache state.
#[derive(Debug, Clone)]
pub struct Variant {
    /// How tables name it, e.g. "firefox-esr (cold)".
    pub name: String,
    /// Index into `Options::commands`.
    pub command: usize,
    pub cache: CacheMode,
}

impl Variant {
    /// Every command in every cache state, command by command: the names
    /// are the commands' own, with the cache state added when there are
    /// several.
    pub fn each_in_each(names: Vec<String>, caches: &[CacheMode]) -> Vec<Variant> {
        let mut variants = Vec::new();
        for (command, name) in names.into_iter().enumerate() {
            for &cache in caches {
                variants.push(Variant {
                    name: if caches.len() > 1 {
                        format!("{name} ({})", cache.as_str())
                    } else {
                        name.clone()
                    },
                    command,
                    cache,
                });
            }
        }
        variants
    }
}

#[derive(Debug, Clone)]
pub struct Options {
    /// How to start each command and when it counts as ready.
    pub commands: Vec<LaunchSpec>,
    pub variants: Vec<Variant>,
    /// Timed runs per variant.
    pub runs: usize,
    /// Untimed runs of each command before the first timed run.
    pub warmup: usize,
    /// Files `CacheMode::Selective` evicts before each run.
    pub evict: Vec<PathBuf>,
    /// Time between SIGTERM and SIGKILL when the tree is terminated.
    pub grace: Duration,
}

/// Something the caller may show while the benchmark runs.
#[derive(Debug)]
pub enum Event<'a> {
    /// An untimed run before the first round.
    Warmup { command: usize, index: usize },
    /// An untimed run that makes a warm variant warm again after an
    /// eviction dropped its files.
    Rewarm { variant: usize },
    /// A timed run finished (counted or failed).
    Run(&'a RunRecord),
}

/// One timed run.
#[derive(Debug, Clone, Serialize)]
pub struct RunRecord {
    /// Index into the variants.
    pub variant: usize,
    /// 0-based round: runs of one round are A B C ... in variant order.
    pub round: usize,
    /// Counted in the statistics: ready, or exited with status 0.
    pub ok: bool,
    /// Why the run was not counted.
    pub failure: Option<String>,
    /// exited, signaled, ready-regex, ready-file or timeout.
    pub end_reason: &'static str,
    /// From just before the program was started until it was ready (or ended).
    pub wall_ms: f64,
    pub exit_code: Option<i32>,
    pub exit_signal: Option<i32>,
    /// Page faults that read from storage, by the whole process tree.
    pub major_faults: u64,
    pub minor_faults: u64,
    /// Bytes the process tree caused to be read from storage.
    pub read_bytes: u64,
    /// Pages of the evicted files still resident after the eviction
    /// (selective), which running processes map.
    pub still_resident_pages: Option<u64>,
}

/// Statistics of one variant over its counted runs.
#[derive(Debug, Clone, Serialize)]
pub struct VariantResult {
    pub name: String,
    pub command: Vec<String>,
    pub cache: &'static str,
    pub runs_ok: usize,
    pub runs_failed: usize,
    /// Wall time in milliseconds; None when no run counted.
    pub wall_ms: Option<Summary>,
    /// Mean wall time relative to the first variant's, with its 95% CI;
    /// None for the first variant itself.
    pub ratio: Option<Ratio>,
    pub major_faults_median: Option<f64>,
    pub minor_faults_median: Option<f64>,
    pub read_bytes_median: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct BenchResult {
    pub environment: Environment,
    pub variants: Vec<VariantResult>,
    /// Every timed run, in the order they ran.
    pub runs: Vec<RunRecord>,
    /// Untimed runs made before warm runs whose command had not run since
    /// the start or since the latest eviction.
    pub rewarm_runs: usize,
    /// Ctrl-C stopped the benchmark early; the figures cover the runs done.
    pub interrupted: bool,
    pub warnings: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// The launcher's error names the program already.
    #[error("{error}")]
    Launch {
        program: String,
        error: std::io::Error,
    },
    #[error(transparent)]
    Cache(#[from] cache::CacheError),
    #[error("cannot remove the ready file {}: {error}", path.display())]
    ReadyFile {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("nothing to run: {0}")]
    Empty(&'static str),
}

/// Relative half-width of the mean's 95% CI above which a variant's figures
/// are called too noisy to conclude from.
pub const MAX_RELATIVE_HALF_WIDTH: f64 = 0.05;

/// What one timed run measured, before it is judged counted or failed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Measurement {
    /// Why startup ended; `Interrupted` when Ctrl-C ended it.
    pub end_reason: EndReason,
    /// From just before the program was started until it was ready (or ended).
    pub wall_ns: i64,
    pub exit_code: Option<i32>,
    pub exit_signal: Option<i32>,
    /// Page faults that read from storage, by the whole process tree.
    pub major_faults: u64,
    pub minor_faults: u64,
    /// Bytes the process tree caused to be read from storage.
    pub read_bytes: u64,
}

/// What evicting one file from the page cache did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileEviction {
    /// Evicted; this many of its pages stayed resident (mapped by running
    /// processes).
    Evicted { resident_after: u64 },
    /// The file no longer exists, so nothing of it is cached.
    Gone,
    /// Could not evict it, for this reason.
    Failed(String),
}

/// Everything a benchmark does to the machine: start a command and wait for
/// it, and put the page cache in a variant's state. [`Launcher`] does it for
/// real; tests put an executor that returns exact figures in its place, so
/// the order of runs and the statistics can be checked exactly.
pub trait Executor {
    /// Runs `command` (an index into `Options::commands`) once, untimed, to
    /// its end (or until `interrupted`).
    fn run_untimed(&mut self, command: usize, interrupted: &AtomicBool) -> Result<(), BenchError>;
    /// Runs `command` once and measures it.
    fn run_timed(
        &mut self,
        command: usize,
        interrupted: &AtomicBool,
    ) -> Result<Measurement, BenchError>;
    /// Drops the whole page cache (a cold variant).
    fn drop_page_cache(&mut self) -> Result<(), BenchError>;
    /// Evicts one file's pages (a selective variant).
    fn evict(&mut self, path: &Path) -> FileEviction;
}

/// The real executor: programs started by the launcher, the page cache
/// dropped and evicted through the kernel, faults and reads from
/// getrusage.
pub struct Launcher<'a> {
    options: &'a Options,
}

impl<'a> Launcher<'a> {
    pub fn new(options: &'a Options) -> Launcher<'a> {
        Launcher { options }
    }
}

impl Executor for Launcher<'_> {
    fn run_untimed(&mut self, command: usize, interrupted: &AtomicBool) -> Result<(), BenchError> {
        let launched = start(self.options, command)?;
        launched.wait_for_end(interrupted, || {});
        launched.terminate(self.options.grace);
        Ok(())
    }

    fn run_timed(
        &mut self,
        command: usize,
        interrupted: &AtomicBool,
    ) -> Result<Measurement, BenchError> {
        let before = children_usage();
        let launched = start(self.options, command)?;
        let t0 = launched.t0_ns;
        let ending = launched.wait_for_end(interrupted, || {});
        let exit = launched.terminate(self.options.grace);
        let after = children_usage();
        Ok(Measurement {
            end_reason: ending.reason,
            wall_ns: ending.at_ns - t0,
            exit_code: exit.code,
            exit_signal: exit.signal,
            major_faults: after.major_faults.saturating_sub(before.major_faults),
            minor_faults: after.minor_faults.saturating_sub(before.minor_faults),
            read_bytes: after.read_bytes.saturating_sub(before.read_bytes),
        })
    }

    fn drop_page_cache(&mut self) -> Result<(), BenchError> {
        Ok(cache::drop_all()?)
    }

    fn evict(&mut self, path: &Path) -> FileEviction {
        match cache::evict(path) {
            Ok(e) => FileEviction::Evicted {
                resident_after: e.resident_after,
            },
            Err(e)
                if e.io_error()
                    .is_some_and(|io| io.kind() == std::io::ErrorKind::NotFound) =>
            {
                FileEviction::Gone
            }
            Err(e) => FileEviction::Failed(e.to_string()),
        }
    }
}

/// Times every variant with real programs: [`run`] with the [`Launcher`].
pub fn bench(
    options: &Options,
    environment: Environment,
    interrupted: &AtomicBool,
    on_event: impl FnMut(Event),
) -> Result<BenchResult, BenchError> {
    run(
        options,
        environment,
        &mut Launcher::new(options),
        interrupted,
        on_event,
    )
}

/// Times every variant through `executor`: untimed warm-up runs of each
/// command, then `runs` rounds of A B C ..., each variant's run from its
/// cache state; then the statistics and warnings.
pub fn run(
    options: &Options,
    environment: Environment,
    executor: &mut impl Executor,
    interrupted: &AtomicBool,
    mut on_event: impl FnMut(Event),
) -> Result<BenchResult, BenchError> {
    if options.variants.is_empty() || options.commands.is_empty() {
        return Err(BenchError::Empty("no command"));
    }
    if options.runs == 0 {
        return Err(BenchError::Empty("--runs must be at least 1"));
    }
    let mut runs = Vec::new();
    let mut rewarm_runs = 0;
    let mut missing_files = Vec::new();
    // Evictions so far, and the count when each command last ran: a warm
    // variant whose command has not run since the latest eviction is not warm.
    let mut evictions = 0usize;
    let mut last_run_after = vec![None::<usize>; options.commands.len()];

    'all: {
        for (command, last) in last_run_after.iter_mut().enumerate() {
            for index in 0..options.warmup {
                if interrupted.load(Ordering::Acquire) {
                    break 'all;
                }
                on_event(Event::Warmup { command, index });
                executor.run_untimed(command, interrupted)?;
                *last = Some(evictions);
            }
        }
        for round in 0..options.runs {
            for (index, variant) in options.variants.iter().enumerate() {
                if interrupted.load(Ordering::Acquire) {
                    break 'all;
                }
                let mut still_resident = None;
                match variant.cache {
                    CacheMode::Warm => {
                        if last_run_after[variant.command] != Some(evictions) {
                            on_event(Event::Rewarm { variant: index });
                            executor.run_untimed(variant.command, interrupted)?;
                            rewarm_runs += 1;
                        }
                    }
                    CacheMode::Cold => {
                        executor.drop_page_cache()?;
                        evictions += 1;
                    }
                    // The cache as the previous run left it.
                    CacheMode::AsFound => {}
                    CacheMode::Selective => {
                        let mut still = 0;
                        for path in &options.evict {
                            // A file that no longer exists (a temporary file
                            // of the traced run) has nothing cached. Other
                            // errors are reported once per file.
                            let missing = match executor.evict(path) {
                                FileEviction::Evicted { resident_after } => {
                                    still += resident_after;
                                    continue;
                                }
                                FileEviction::Gone => None,
                                FileEviction::Failed(error) => Some(error),
                            };
                            if !missing_files.iter().any(|(p, _)| p == path) {
                                missing_files.push((path.clone(), missing));
                            }
                        }
                        still_resident = Some(still);
                        evictions += 1;
                    }
                }
                if interrupted.load(Ordering::Acquire) {
                    break 'all;
                }
                let measured = executor.run_timed(variant.command, interrupted)?;
                let Some(mut record) = judge(options, variant.command, &measured) else {
                    break 'all;
                };
                last_run_after[variant.command] = Some(evictions);
                record.variant = index;
                record.round = round;
                record.still_resident_pages = still_resident;
                on_event(Event::Run(&record));
                runs.push(record);
            }
        }
    }

    let variants = summarize(options, &runs);
    let warnings = warnings(&variants, &runs, &missing_files);
    Ok(BenchResult {
        environment,
        variants,
        runs,
        rewarm_runs,
        interrupted: interrupted.load(Ordering::Acquire),
        warnings,
    })
}

fn start(options: &Options, command: usize) -> Result<launch::Launched, BenchError> {
    let spec = &options.commands[command];
    if let Some(file) = &spec.ready_file {
        match std::fs::remove_file(file) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(error) => {
                return Err(BenchError::ReadyFile {
                    path: file.clone(),
                    error,
                });
            }
        }
    }
    launch::launch(spec).map_err(|error| BenchError::Launch {
        program: spec
            .argv
            .first()
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default(),
        error,
    })
}

/// A timed run as recorded: counted, or failed with the reason; None when
/// Ctrl-C ended it (it is not recorded).
fn judge(options: &Options, command: usize, measured: &Measurement) -> Option<RunRecord> {
    let failure = match measured.end_reason {
        EndReason::Interrupted => return None,
        EndReason::ReadyRegex | EndReason::ReadyFile => None,
        EndReason::Exited if measured.exit_code == Some(0) => None,
        EndReason::Exited => Some(format!(
            "exited with status {}",
            measured.exit_code.unwrap_or(-1)
        )),
        EndReason::Signaled => Some(format!(
            "killed by signal {} before it was ready",
            measured.exit_signal.unwrap_or(0)
        )),
        EndReason::Timeout => Some(format!(
            "not ready after {} s: killed",
            options.commands[command]
                .timeout
                .map_or(0.0, |t| t.as_secs_f64())
        )),
    };
    Some(RunRecord {
        variant: 0,
        round: 0,
        ok: failure.is_none(),
        failure,
        end_reason: measured.end_reason.as_str(),
        wall_ms: measured.wall_ns as f64 / 1e6,
        exit_code: measured.exit_code,
        exit_signal: measured.exit_signal,
        major_faults: measured.major_faults,
        minor_faults: measured.minor_faults,
        read_bytes: measured.read_bytes,
        still_resident_pages: None,
    })
}

fn summarize(options: &Options, runs: &[RunRecord]) -> Vec<VariantResult> {
    let ok_times = |v: usize| -> Vec<f64> {
        runs.iter()
            .filter(|r| r.variant == v && r.ok)
            .map(|r| r.wall_ms)
            .collect()
    };
    let baseline = ok_times(0);
    options
        .variants
        .iter()
        .enumerate()
        .map(|(index, variant)| {
            let times = ok_times(index);
            let counted: Vec<&RunRecord> =
                runs.iter().filter(|r| r.variant == index && r.ok).collect();
            let median_of = |f: fn(&RunRecord) -> u64| {
                let values: Vec<f64> = counted.iter().map(|r| f(r) as f64).collect();
                stats::summarize(&values).map(|s| s.median)
            };
            VariantResult {
                name: variant.name.clone(),
                command: options.commands[variant.command]
                    .argv
                    .iter()
                    .map(|a| a.to_string_lossy().into_owned())
                    .collect(),
                cache: variant.cache.as_str(),
                runs_ok: times.len(),
                runs_failed: runs.iter().filter(|r| r.variant == index && !r.ok).count(),
                wall_ms: stats::summarize(&times),
                ratio: (index > 0)
                    .then(|| stats::ratio_of_means(&times, &baseline))
                    .flatten(),
                major_faults_median: median_of(|r| r.major_faults),
                minor_faults_median: median_of(|r| r.minor_faults),
                read_bytes_median: median_of(|r| r.read_bytes),
            }
        })
        .collect()
}

fn warnings(
    variants: &[VariantResult],
    runs: &[RunRecord],
    missing_files: &[(PathBuf, Option<String>)],
) -> Vec<String> {
    let mut out = Vec::new();
    for (index, v) in variants.iter().enumerate() {
        if v.runs_failed > 0 {
            let reasons: Vec<&str> = runs
                .iter()
                .filter(|r| r.variant == index && !r.ok)
                .filter_map(|r| r.failure.as_deref())
                .collect();
            out.push(format!(
                "{}: {} of {} runs failed and are not counted ({})",
                v.name,
                v.runs_failed,
                v.runs_failed + v.runs_ok,
                dedup(&reasons).join("; ")
            ));
        }
        let Some(summary) = &v.wall_ms else {
            continue;
        };
        if summary.n < 2 {
            out.push(format!(
                "{}: one counted run gives no confidence interval; use -n 10 or more",
                v.name
            ));
            continue;
        }
        if !summary.outliers.is_empty() {
            out.push(format!(
                "{}: {} outlier run(s) (more than 3.5 median absolute deviations from the median): \
                 other programs or background I/O may have interfered; close them, or add --warmup",
                v.name,
                summary.outliers.len()
            ));
        }
        if let Some(width) = stats::relative_ci_half_width(summary)
            && width > MAX_RELATIVE_HALF_WIDTH
        {
            out.push(format!(
                "{}: the spread is too wide to conclude within {:.0}% (95% CI of the mean is ±{:.1}%): \
                 run more rounds (-n) on a quieter machine",
                v.name,
                MAX_RELATIVE_HALF_WIDTH * 100.0,
                width * 100.0
            ));
        }
        if let Some(ratio) = &v.ratio
            && ratio.ci95.is_some()
            && !ratio.excludes_one()
        {
            out.push(format!(
                "{}: not distinguishable from {} (the ratio's 95% CI includes 1.0)",
                v.name, variants[0].name
            ));
        }
    }
    let still: u64 = runs
        .iter()
        .filter_map(|r| r.still_resident_pages)
        .max()
        .unwrap_or(0);
    if still > 0 {
        out.push(format!(
            "up to {still} pages of the evicted files stayed resident because running processes map \
             them (usually shared libraries such as libc): selective-cold keeps them, as a start \
             after login would; `coldstart evict --profile` names the processes"        ));
    }
    let gone = missing_files.iter().filter(|(_, e)| e.is_none()).count();
    if gone > 0 {
        out.push(format!(
            "{gone} file(s) the profile names no longer exist (temporary files of the traced run): \
             nothing of them to evict"
        ));
    }
    for error in missing_files.iter().filter_map(|(_, e)| e.as_ref()) {
        out.push(format!(
            "could not evict a file, so selective runs may be partly warm: {error}"
        ));
    }
    out
}

fn dedup<'a>(items: &[&'a str]) -> Vec<&'a str> {
    let mut out: Vec<&str> = Vec::new();
    for item in items {
        if !out.contains(item) {
            out.push(item);
        }
    }
    out
}

#[cfg(test)]
#[path = "run_tests.rs"]
mod tests;
