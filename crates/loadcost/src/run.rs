//! Times the built configurations: round after round, every configuration
//! in every mode and cache state once, in a new shuffled order each round,
//! so that drift on a shared machine spreads over all of them instead of
//! landing on one factor. Every run's own report is checked: it must exit
//! cleanly and say that exactly the expected initializers ran.

use crate::design::{Cache, Config, Design, Mode};
use crate::direct::RelativeTable;
use crate::generate::{Built, BuiltConfig};
use anyhow::{Context, bail};
use coldstart_system::launch::Identity;
use serde::Serialize;
use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How long one run may take before it counts as hung.
const RUN_TIMEOUT: Duration = Duration::from_secs(20);

/// Variables that would change what the loader does.
const LOADER_VARIABLES: [&str; 6] = [
    "LD_LIBRARY_PATH",
    "LD_PRELOAD",
    "LD_BIND_NOW",
    "LD_BIND_NOT",
    "LD_DEBUG",
    "LD_AUDIT",
];

/// The timed runs of one configuration in one mode and cache state.
#[derive(Debug, Clone, Serialize)]
pub struct Cell {
    pub config: Config,
    pub mode: Mode,
    pub cache: Cache,
    /// Nanoseconds, in the order they were taken.
    pub samples_ns: Vec<f64>,
}

/// A library whose relative relocations are also applied by hand, once a
/// round, among the timed runs.
#[derive(Debug, Clone)]
pub struct DirectTarget {
    pub level: u64,
    pub path: std::path::PathBuf,
    pub table: RelativeTable,
}

/// Everything one experiment timed.
#[derive(Debug, Clone, Serialize)]
pub struct Measurements {
    pub cells: Vec<Cell>,
    /// Per direct target, in the order given: (level, nanoseconds).
    pub direct: Vec<(u64, Vec<f64>)>,
    /// Rounds completed; fewer than asked when interrupted.
    pub rounds: usize,
    pub interrupted: bool,
}

impl Measurements {
    pub fn cell(&self, config: Config, mode: Mode, cache: Cache) -> Option<&Cell> {
        self.cells
            .iter()
            .find(|c| c.config == config && c.mode == mode && c.cache == cache)
    }
}

/// Where one timed run of a round goes.
#[derive(Debug, Clone, Copy)]
enum Slot {
    /// A program run: (configuration index, cell index).
    Program(usize, usize),
    /// An application by hand: the direct target's index.
    Direct(usize),
}

/// Runs `design.rounds` rounds over `built`, with the `direct` targets'
/// applications shuffled in among the program runs so that both see the
/// same machine. `progress` gets (runs done, runs in all). Stops after the
/// current run when `interrupted` is raised and returns the complete rounds.
pub fn measure(
    built: &Built,
    design: &Design,
    direct: &[DirectTarget],
    seed: u64,
    interrupted: &AtomicBool,
    progress: &dyn Fn(usize, usize),
) -> anyhow::Result<Measurements> {
    let identity = Identity::invoking_user(false).context("cannot find the invoking user")?;
    let mut cells: Vec<Cell> = Vec::new();
    let mut slots = Vec::new();
    for (index, built_config) in built.configs.iter().enumerate() {
        for &mode in &design.modes {
            for &cache in &design.caches {
                slots.push(Slot::Program(index, cells.len()));
                cells.push(Cell {
                    config: built_config.config,
                    mode,
                    cache,
                    samples_ns: Vec::with_capacity(design.rounds),
                });
            }
        }
    }
    slots.extend((0..direct.len()).map(Slot::Direct));
    let mut direct_samples: Vec<(u64, Vec<f64>)> =
        direct.iter().map(|t| (t.level, Vec::new())).collect();
    let total = slots.len() * design.rounds;
    let mut rng = SplitMix::new(seed);
    let mut rounds = 0;
    'rounds: for _ in 0..design.rounds {
        let mut order = slots.clone();
        shuffle(&mut order, &mut rng);
        let mut round = Vec::with_capacity(order.len());
        for (done, &slot) in order.iter().enumerate() {
            if interrupted.load(Ordering::Relaxed) {
                break 'rounds;
            }
            let nanos = match slot {
                Slot::Program(config_index, cell_index) => {
                    let cell = &cells[cell_index];
                    let config = &built.configs[config_index];
                    time_one(built, config, cell.mode, cell.cache, &identity)?
                }
                Slot::Direct(index) => direct[index].table.apply(&direct[index].path)?,
            };
            round.push((slot, nanos));
            progress(rounds * slots.len() + done + 1, total);
        }
        // Only whole rounds count: every cell then has as many samples as
        // every other, taken under the same conditions.
        for (slot, nanos) in round {
            match slot {
                Slot::Program(_, cell_index) => cells[cell_index].samples_ns.push(nanos),
                Slot::Direct(index) => direct_samples[index].1.push(nanos),
            }
        }
        rounds += 1;
    }
    Ok(Measurements {
        cells,
        direct: direct_samples,
        rounds,
        interrupted: interrupted.load(Ordering::Relaxed),
    })
}

/// One timed run: puts the library files in the cache state asked for,
/// runs the program and returns the time it reports.
fn time_one(
    built: &Built,
    config: &BuiltConfig,
    mode: Mode,
    cache: Cache,
    identity: &Identity,
) -> anyhow::Result<f64> {
    match cache {
        // An untimed run first: the files, their dentries and the
        // program's own pages are all in memory for the timed one.
        Cache::Warm => {
            run_program(built, config, mode, identity)?;
        }
        Cache::Cold => {
            for library in &config.libraries {
                evict(library)?;
            }
        }
    }
    run_program(built, config, mode, identity)
}

/// How often eviction is tried before a file counts as unevictable.
const EVICTION_ATTEMPTS: usize = 10;

/// Evicts `library` from the page cache. A page the kernel was still
/// handling (a per-CPU LRU batch, a just-exited process's unmapping) can
/// survive one posix_fadvise, so eviction is retried briefly; a file that
/// stays resident makes the run not cold, which is an error.
fn evict(library: &Path) -> anyhow::Result<()> {
    let mut last = None;
    for _ in 0..EVICTION_ATTEMPTS {
        let eviction = coldstart_system::cache::evict(library)
            .with_context(|| format!("cannot evict {}", library.display()))?;
        if eviction.resident_after == 0 {
            return Ok(());
        }
        last = Some(eviction);
        std::thread::sleep(Duration::from_millis(2));
    }
    let eviction = last.expect("at least one attempt");
    bail!(
        "{} kept {} pages in the page cache after {EVICTION_ATTEMPTS} evictions (mapped by {:?}): \
         a cold run would not be cold",
        library.display(),
        eviction.resident_after,
        eviction.mapped_by
    )
}

fn run_program(
    built: &Built,
    config: &BuiltConfig,
    mode: Mode,
    identity: &Identity,
) -> anyhow::Result<f64> {
    let mut command = match mode {
        Mode::Dlopen => Command::new(&config.dlopen_host),
        Mode::Needed => {
            let mut command = Command::new(&built.launcher);
            command.arg(&config.needed_program);
            command
        }
    };
    for variable in LOADER_VARIABLES {
        command.env_remove(variable);
    }
    command
        .current_dir(&config.dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    identity.apply_to(&mut command);
    let program = match mode {
        Mode::Dlopen => &config.dlopen_host,
        Mode::Needed => &config.needed_program,
    };
    let mut child = command
        .spawn()
        .with_context(|| format!("cannot start {}", program.display()))?;
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if started.elapsed() > RUN_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            bail!(
                "{} did not finish within {} s",
                program.display(),
                RUN_TIMEOUT.as_secs()
            );
        }
        std::thread::sleep(Duration::from_micros(500));
    };
    let mut stdout = String::new();
    let mut stderr = String::new();
    if let Some(mut out) = child.stdout.take() {
        out.read_to_string(&mut stdout)?;
    }
    if let Some(mut err) = child.stderr.take() {
        err.read_to_string(&mut stderr)?;
    }
    if !status.success() {
        bail!(
            "{} failed ({status}): {}",
            program.display(),
            stderr.trim_end()
        );
    }
    parse_report(program, &stdout, config.expected_ready)
}

/// `<nanoseconds> <initializers that ran>`, as the programs print it.
fn parse_report(program: &Path, stdout: &str, expected_ready: u64) -> anyhow::Result<f64> {
    let mut fields = stdout.split_whitespace();
    let (Some(nanos), Some(ready), None) = (fields.next(), fields.next(), fields.next()) else {
        bail!(
            "{} printed {:?}, not \"<ns> <initializers>\"",
            program.display(),
            stdout.trim_end()
        );
    };
    let nanos: u64 = nanos
        .parse()
        .with_context(|| format!("{} printed a bad time {nanos:?}", program.display()))?;
    let ready: u64 = ready
        .parse()
        .with_context(|| format!("{} printed a bad count {ready:?}", program.display()))?;
    if ready != expected_ready {
        bail!(
            "{}: {ready} initializers ran, the library has {expected_ready}",
            program.display()
        );
    }
    Ok(nanos as f64)
}

/// splitmix64 (the sample generator's, fixed forever), so that a seed gives
/// the same run order on every machine. Draws in a range by rejection, not
/// by the generator's multiply-shift, so a seed gives the order it always
/// has.
struct SplitMix(coldstart_sample::Rng);

impl SplitMix {
    fn new(seed: u64) -> SplitMix {
        SplitMix(coldstart_sample::Rng::new(seed))
    }

    /// Uniform in 0..bound (bound > 0), by rejection.
    fn below(&mut self, bound: u64) -> u64 {
        let zone = u64::MAX - u64::MAX % bound;
        loop {
            let x = self.0.next_u64();
            if x < zone {
                return x % bound;
            }
        }
    }
}

/// Fisher-Yates.
fn shuffle<T>(items: &mut [T], rng: &mut SplitMix) {
    for i in (1..items.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        items.swap(i, j);
    }
}

/// splitmix64 drawn `count` times from `seed`, for the fit's bootstrap.
pub(crate) fn stream(seed: u64) -> impl FnMut(u64) -> u64 {
    let mut rng = SplitMix::new(seed);
    move |bound| rng.below(bound)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_are_checked() {
        let p = Path::new("/x/prog");
        assert_eq!(parse_report(p, "1234 7\n", 7).unwrap(), 1234.0);
        let wrong = parse_report(p, "1234 6\n", 7).unwrap_err().to_string();
        assert!(
            wrong.contains("6 initializers ran, the library has 7"),
            "{wrong}"
        );
        assert!(parse_report(p, "1234\n", 0).is_err());
        assert!(parse_report(p, "1234 0 9\n", 0).is_err());
        assert!(parse_report(p, "-5 0\n", 0).is_err());
    }

    #[test]
    fn a_seed_gives_the_order_it_always_has() {
        // Seed 1 as the first version (its own splitmix64) shuffled ten
        // slots, computed outside Rust from the published algorithm.
        let mut order: Vec<u32> = (0..10).collect();
        shuffle(&mut order, &mut SplitMix::new(1));
        assert_eq!(order, [4, 2, 8, 1, 9, 3, 0, 6, 7, 5]);
    }

    #[test]
    fn shuffle_is_a_permutation_and_depends_on_the_seed() {
        let mut a: Vec<u32> = (0..50).collect();
        let mut b = a.clone();
        shuffle(&mut a, &mut SplitMix::new(1));
        shuffle(&mut b, &mut SplitMix::new(2));
        assert_ne!(a, b);
        let mut sorted = a.clone();
        sorted.sort();
        assert_eq!(sorted, (0..50).collect::<Vec<_>>());
    }
}
