//! `coldstart loadcost`: what the dynamic loader charges per relocation,
//! symbol, initializer, search-path entry, library and MiB on this machine,
//! measured rather than assumed. Generated libraries vary one factor at a
//! time from a small base library; each is timed under `dlopen` and as a
//! program's DT_NEEDED, warm and cold; a line fitted through the level
//! medians gives the cost per unit with a bootstrap interval. A direct
//! measurement of applying relative relocations checks the method.

pub mod design;
pub mod direct;
pub mod fit;
pub mod generate;
pub mod run;

use anyhow::{Context, bail};
use coldstart_bench::Environment;
use design::{Cache, Design, Factor, Mode};
use fit::{Fit, LevelSummary};
use run::Measurements;
use serde::Serialize;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

/// One factor in one mode and cache state: its levels and fitted cost.
#[derive(Debug, Clone, Serialize)]
pub struct Series {
    pub factor: Factor,
    pub unit: &'static str,
    pub description: &'static str,
    pub mode: Mode,
    pub cache: Cache,
    pub levels: Vec<LevelSummary>,
    /// None when fewer than two levels were timed.
    pub fit: Option<Fit>,
}

/// The direct measurement of applying relative relocations, set against
/// the fitted cost of a relative relocation under a warm `dlopen`.
#[derive(Debug, Clone, Serialize)]
pub struct DirectCheck {
    /// Application times per level (the `relative` factor's libraries).
    pub levels: Vec<LevelSummary>,
    pub fit: Fit,
    /// The `relative` factor's fit for a warm dlopen.
    pub dlopen_warm: Fit,
    /// Whether the two intervals overlap.
    pub agrees: bool,
}

/// Everything `coldstart loadcost` found.
#[derive(Debug, Clone, Serialize)]
pub struct LoadCost {
    pub environment: Environment,
    pub compiler: String,
    pub design: Design,
    pub work_dir: PathBuf,
    /// Rounds completed (fewer than designed when interrupted).
    pub rounds: usize,
    pub interrupted: bool,
    pub series: Vec<Series>,
    /// Present when the design includes the `relative` factor.
    pub direct: Option<DirectCheck>,
}

impl LoadCost {
    pub fn series(&self, factor: Factor, mode: Mode, cache: Cache) -> Option<&Series> {
        self.series
            .iter()
            .find(|s| s.factor == factor && s.mode == mode && s.cache == cache)
    }
}

/// What the caller sees while the experiment runs.
pub enum Progress {
    Building { done: usize, total: usize },
    Timing { done: usize, total: usize },
}

/// How to run the experiment.
pub struct Options {
    pub design: Design,
    /// Where the libraries and programs are built; kept afterwards.
    pub work_dir: PathBuf,
    /// Orders the runs and seeds the bootstrap.
    pub seed: u64,
    /// Compilations at a time.
    pub jobs: usize,
}

/// Builds, times and fits.
pub fn run(
    options: &Options,
    interrupted: &AtomicBool,
    progress: &(dyn Fn(Progress) + Sync),
) -> anyhow::Result<LoadCost> {
    let design = &options.design;
    if design.rounds < 2 {
        bail!("loadcost needs at least 2 rounds to give an interval");
    }
    let built = generate::build(design, &options.work_dir, options.jobs, &|done, total| {
        progress(Progress::Building { done, total })
    })?;
    make_readable(&built.root)?;
    let targets = direct_targets(&built)?;
    let measurements = run::measure(
        &built,
        design,
        &targets,
        options.seed,
        interrupted,
        &|done, total| progress(Progress::Timing { done, total }),
    )?;
    if measurements.rounds < 2 {
        bail!(
            "interrupted after {} complete round(s): nothing to fit",
            measurements.rounds
        );
    }
    let series = fit_series(design, &measurements, options.seed);
    let relative = series
        .iter()
        .find(|s| s.factor == Factor::Relative && s.mode == Mode::Dlopen && s.cache == Cache::Warm)
        .and_then(|s| s.fit.clone());
    let direct =
        relative.and_then(|dlopen_warm| direct_check(&measurements, dlopen_warm, options.seed));
    let probe = built
        .configs
        .first()
        .map(|c| c.libraries[0].clone())
        .unwrap_or_else(|| built.root.clone());
    Ok(LoadCost {
        environment: Environment::detect(&probe),
        compiler: built.compiler.clone(),
        design: design.clone(),
        work_dir: built.root.clone(),
        rounds: measurements.rounds,
        interrupted: measurements.interrupted || interrupted.load(Ordering::Relaxed),
        series,
        direct,
    })
}

fn fit_series(design: &Design, measurements: &Measurements, seed: u64) -> Vec<Series> {
    let mut series = Vec::new();
    for (&factor, levels) in design.factors.iter().zip(&design.levels) {
        for &mode in &design.modes {
            for &cache in &design.caches {
                let runs: Vec<(u64, &[f64])> = levels
                    .iter()
                    .filter_map(|&level| {
                        measurements
                            .cell(design::Config { factor, level }, mode, cache)
                            .map(|cell| (level, cell.samples_ns.as_slice()))
                    })
                    .collect();
                let (summaries, fit) = match fit::fit(&runs, seed) {
                    Some((summaries, fit)) => (summaries, Some(fit)),
                    None => (Vec::new(), None),
                };
                series.push(Series {
                    factor,
                    unit: factor.unit(),
                    description: factor.description(),
                    mode,
                    cache,
                    levels: summaries,
                    fit,
                });
            }
        }
    }
    series
}

/// The `relative` factor's libraries, with their relocation tables read
/// and checked: each must hold exactly its level more relative relocations
/// than the base library.
fn direct_targets(built: &generate::Built) -> anyhow::Result<Vec<run::DirectTarget>> {
    let targets: Vec<run::DirectTarget> = built
        .configs
        .iter()
        .filter(|c| c.config.factor == Factor::Relative)
        .map(|c| {
            let path = c.libraries[0].clone();
            let table = direct::RelativeTable::read(&path)?;
            Ok(run::DirectTarget {
                level: c.config.level,
                path,
                table,
            })
        })
        .collect::<anyhow::Result<_>>()?;
    // The toolchain adds a few of its own (crt files, .init_array): the
    // level is what the factor adds on top.
    let base = targets.iter().map(|t| t.table.relative).min().unwrap_or(0);
    for target in &targets {
        if (target.table.relative - base) as u64 != target.level {
            bail!(
                "{} has {} relative relocations, {} more than the base; the design asked for {}",
                target.path.display(),
                target.table.relative,
                target.table.relative - base,
                target.level
            );
        }
    }
    Ok(targets)
}

fn direct_check(measurements: &Measurements, dlopen_warm: Fit, seed: u64) -> Option<DirectCheck> {
    let runs: Vec<(u64, &[f64])> = measurements
        .direct
        .iter()
        .map(|(level, runs)| (*level, runs.as_slice()))
        .collect();
    let (levels, fit) = fit::fit(&runs, seed)?;
    let agrees = fit.overlaps(&dlopen_warm);
    Some(DirectCheck {
        levels,
        fit,
        dlopen_warm,
        agrees,
    })
}

/// When coldstart runs under sudo the programs run as the invoking user,
/// who must be able to reach them: the work directory is opened up for
/// reading and searching (its contents are generated, nothing secret; what
/// the builds create below it is readable under any usual umask).
fn make_readable(root: &std::path::Path) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(root)
        .with_context(|| format!("cannot read {}", root.display()))?
        .permissions()
        .mode();
    if mode & 0o055 != 0o055 {
        std::fs::set_permissions(root, std::fs::Permissions::from_mode(mode | 0o055))
            .with_context(|| format!("cannot open up {} for the invoking user", root.display()))?;
    }
    Ok(())
}
