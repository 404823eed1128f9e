//! Time the app's start, interleaved: warm against cold, cold with its
//! prefetch plan, and cold relinked with its order files; the plan's
//! effect, and the plain against the relinked build, at one read_ahead_kb.

use crate::{Step, sample_launch};
use anyhow::Context;
use coldstart_bench::{BenchResult, Environment, Options, Variant, VariantResult};
use coldstart_prefetch::launcher::Wrapper;
use coldstart_profile::CacheMode;
use coldstart_sample::BuiltApp;
use coldstart_system::launch::LaunchSpec;
use coldstart_system::launch::is_root;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

/// Timed runs of each variant.
pub const RUNS: usize = 10;

/// Which start a bench variant times.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    Warm,
    /// Cold (root) or selective-cold: the app's own files evicted.
    Cold,
    WithPlan,
    /// Cold through the launcher with an empty plan: its own cost.
    LauncherOnly,
    Relinked,
    /// The app packed by `coldstart pack`, warm and cold.
    PackedWarm,
    Packed,
}

/// A bench of the app's starts, each variant known by what it starts.
pub struct StartBench {
    pub result: BenchResult,
    /// `Start` of each of `result.variants`.
    pub starts: Vec<Start>,
}

impl StartBench {
    /// The median wall time of `start`, if it was timed and a run counted.
    pub fn median_ms(&self, start: Start) -> Option<f64> {
        self.variant(start)
            .and_then(|v| v.wall_ms.as_ref())
            .map(|s| s.median)
    }

    /// The bench's figures of `start`, if it was timed.
    pub fn variant(&self, start: Start) -> Option<&VariantResult> {
        let i = self.starts.iter().position(|&s| s == start)?;
        self.result.variants.get(i)
    }
}

/// Times `plain` warm against cold, interleaved: cold drops the whole page
/// cache (root); without root, selective-cold evicts the app's own files
/// (its executable, library and parts), which any user may do. With a plan, also cold through `wrapper`;
/// with a relinked build, that cold too. `progress` is told the timed
/// runs done and their total after each one.
pub fn bench_starts(
    plain: &BuiltApp,
    plan: Option<&Path>,
    wrapper: &Wrapper,
    relinked: Option<&BuiltApp>,
    packed: Option<&[PathBuf]>,
    step: Step<'_>,
    mut progress: impl FnMut(usize, usize),
) -> anyhow::Result<StartBench> {
    let cold = if is_root() {
        CacheMode::Cold
    } else {
        CacheMode::Selective
    };
    let executable = &plain.executable;
    let mut commands = vec![sample_launch(executable)?];
    let mut variants = Vec::new();
    let mut starts = Vec::new();
    let mut add = |start: Start, name: String, command: usize, cache: CacheMode| {
        variants.push(Variant {
            name,
            command,
            cache,
        });
        starts.push(start);
    };
    let warm = CacheMode::Warm;
    add(
        Start::Warm,
        format!("sample app ({})", warm.as_str()),
        0,
        warm,
    );
    add(
        Start::Cold,
        format!("sample app ({})", cold.as_str()),
        0,
        cold,
    );
    if let Some(plan) = plan {
        let empty = crate::plan::empty_plan_beside(plan)?;
        for (path, start, name) in [
            (plan, Start::WithPlan, "sample app + plan"),
            (
                empty.as_path(),
                Start::LauncherOnly,
                "sample app + empty plan",
            ),
        ] {
            commands.push(LaunchSpec {
                argv: wrapper.argv(&[], path, &[executable.as_os_str().to_owned()]),
                ..sample_launch(executable)?
            });
            add(
                start,
                format!("{name} ({})", cold.as_str()),
                commands.len() - 1,
                cold,
            );
        }
    }
    let mut evict = plain.binaries();
    if let Some(app) = relinked {
        commands.push(sample_launch(&app.executable)?);
        add(
            Start::Relinked,
            format!("sample app relinked with its order ({})", cold.as_str()),
            commands.len() - 1,
            cold,
        );
        evict.extend(app.binaries());
    }
    if let Some(packed) = packed {
        let packed_executable = packed.first().context("no packed executable")?;
        commands.push(sample_launch(packed_executable)?);
        let command = commands.len() - 1;
        add(
            Start::PackedWarm,
            format!("sample app packed ({})", warm.as_str()),
            command,
            warm,
        );
        add(
            Start::Packed,
            format!("sample app packed ({})", cold.as_str()),
            command,
            cold,
        );
        evict.extend(packed.iter().cloned());
    }
    step(&format!(
        "timing its start warm against {}{} ({RUNS} interleaved runs each)",
        cold.as_str(),
        match plan {
            Some(_) if wrapper.is_small() => {
                ", and with its prefetch plan and an empty plan (the launcher alone) through \
                 coldstart-run"
            }
            Some(_) => {
                ", and with its prefetch plan and an empty plan (the launcher alone) through \
                 `coldstart run` (the smaller coldstart-run is not built beside this binary: \
                 `cargo build --release` builds it)"
            }
            None => "",
        }
    ));
    let total = variants.len() * RUNS;
    let mut done = 0;
    let options = Options {
        commands,
        variants,
        runs: RUNS,
        warmup: 1,
        evict,
        grace: coldstart_system::launch::DEFAULT_GRACE,
    };
    let result = coldstart_bench::bench(
        &options,
        Environment::detect(executable),
        &AtomicBool::new(false),
        |event| {
            if let coldstart_bench::Event::Run(_) = event {
                done += 1;
                progress(done, total);
            }
        },
    )
    .context("benchmarking the sample app")?;
    Ok(StartBench { result, starts })
}

/// What the prefetch plan did to the app's cold start at one
/// read_ahead_kb: medians of one interleaved bench of warm, cold and cold
/// with the plan.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PlanEffect {
    pub read_ahead_kb: u64,
    pub warm_ms: Option<f64>,
    pub cold_ms: Option<f64>,
    pub with_plan_ms: Option<f64>,
    /// Cold through the launcher with an empty plan: what the launcher's
    /// own start costs, which the plan must win back.
    pub launcher_only_ms: Option<f64>,
    /// What the whole start read from storage (the program and, with the
    /// plan, its prefetcher).
    pub cold_read_bytes: Option<f64>,
    pub with_plan_read_bytes: Option<f64>,
}

impl PlanEffect {
    /// From a bench with the plan (`bench_starts` given one), run at
    /// `read_ahead_kb`; None when it timed no start with the plan.
    pub fn of(bench: &StartBench, read_ahead_kb: u64) -> Option<PlanEffect> {
        let read = |start| bench.variant(start).and_then(|v| v.read_bytes_median);
        bench.variant(Start::WithPlan)?;
        Some(PlanEffect {
            read_ahead_kb,
            warm_ms: bench.median_ms(Start::Warm),
            cold_ms: bench.median_ms(Start::Cold),
            with_plan_ms: bench.median_ms(Start::WithPlan),
            launcher_only_ms: bench.median_ms(Start::LauncherOnly),
            cold_read_bytes: read(Start::Cold),
            with_plan_read_bytes: read(Start::WithPlan),
        })
    }

    /// (cold - cold with the plan) / (cold - warm): 1 is a cold start as
    /// fast as a warm one, 0 no gain, below 0 slower than plain cold. None
    /// when a median is missing or cold was no slower than warm.
    pub fn gap_closed(&self) -> Option<f64> {
        let (warm, cold, plan) = (self.warm_ms?, self.cold_ms?, self.with_plan_ms?);
        (cold > warm).then(|| (cold - plan) / (cold - warm))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use coldstart_bench::stats::summarize;

    fn variant(name: &str, wall_ms: &[f64]) -> VariantResult {
        VariantResult {
            name: name.to_string(),
            command: Vec::new(),
            cache: "cold",
            runs_ok: wall_ms.len(),
            runs_failed: 0,
            wall_ms: summarize(wall_ms),
            ratio: None,
            major_faults_median: None,
            minor_faults_median: None,
            read_bytes_median: None,
        }
    }

    #[test]
    fn medians_are_found_by_what_the_variant_starts_not_by_its_name() {
        let bench = StartBench {
            result: BenchResult {
                environment: Environment::detect(Path::new("/nonexistent")),
                // Both named alike: only the typed starts tell them apart.
                variants: vec![
                    variant("sample app (cold)", &[3.0, 1.0, 2.0]),
                    variant("sample app (cold)", &[10.0, 40.0]),
                    variant("never counted", &[]),
                ],
                runs: Vec::new(),
                rewarm_runs: 0,
                interrupted: false,
                warnings: Vec::new(),
            },
            starts: vec![Start::Relinked, Start::Cold, Start::Warm],
        };
        assert_eq!(bench.median_ms(Start::Relinked), Some(2.0));
        assert_eq!(bench.median_ms(Start::Cold), Some(25.0));
        assert_eq!(bench.median_ms(Start::Warm), None);
        assert_eq!(bench.median_ms(Start::WithPlan), None);
    }

    #[test]
    fn the_plans_effect_is_the_share_of_the_cold_warm_gap_it_closes() {
        let with_bytes = |name: &str, wall_ms: &[f64], bytes: f64| VariantResult {
            read_bytes_median: Some(bytes),
            ..variant(name, wall_ms)
        };
        let bench = StartBench {
            result: BenchResult {
                environment: Environment::detect(Path::new("/nonexistent")),
                variants: vec![
                    with_bytes("warm", &[10.0, 12.0, 11.0], 0.0),
                    with_bytes("cold", &[50.0, 52.0, 51.0], 8e6),
                    with_bytes("plan", &[21.0, 20.0, 22.0], 3e6),
                    with_bytes("empty plan", &[55.0, 53.0, 54.0], 8e6),
                ],
                runs: Vec::new(),
                rewarm_runs: 0,
                interrupted: false,
                warnings: Vec::new(),
            },
            starts: vec![
                Start::Warm,
                Start::Cold,
                Start::WithPlan,
                Start::LauncherOnly,
            ],
        };
        let effect = PlanEffect::of(&bench, 128).unwrap();
        assert_eq!(
            (effect.warm_ms, effect.cold_ms, effect.with_plan_ms),
            (Some(11.0), Some(51.0), Some(21.0))
        );
        assert_eq!(effect.launcher_only_ms, Some(54.0));
        assert_eq!(
            (effect.cold_read_bytes, effect.with_plan_read_bytes),
            (Some(8e6), Some(3e6))
        );
        // (51 - 21) / (51 - 11)
        assert_eq!(effect.gap_closed(), Some(0.75));
        // Slower than plain cold: below zero, said as it is.
        let slower = PlanEffect {
            with_plan_ms: Some(61.0),
            ..effect
        };
        assert_eq!(slower.gap_closed(), Some(-0.25));
        // No gap to close.
        let none = PlanEffect {
            cold_ms: Some(11.0),
            ..effect
        };
        assert_eq!(none.gap_closed(), None);
        // A bench without the plan has no effect to tell.
        let without = StartBench {
            starts: vec![Start::Warm, Start::Cold, Start::Relinked, Start::Packed],
            ..bench
        };
        assert_eq!(PlanEffect::of(&without, 128), None);
    }
}
