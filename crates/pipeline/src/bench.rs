//! Time the app's start, interleaved: warm against cold, cold with its
//! prefetch plan, and cold relinked with its order files; and the plain
//! against the relinked build at one read_ahead_kb.

use crate::{Step, is_root, sample_launch};
use anyhow::Context;
use coldstart_bench::{BenchResult, Environment, Options, Variant};
use coldstart_prefetch::launcher::Wrapper;
use coldstart_profile::CacheMode;
use coldstart_sample::BuiltApp;
use coldstart_system::launch::LaunchSpec;
use std::path::Path;
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
        let i = self.starts.iter().position(|&s| s == start)?;
        self.result
            .variants
            .get(i)
            .and_then(|v| v.wall_ms.as_ref())
            .map(|s| s.median)
    }
}

/// Times `plain` warm against cold, interleaved: cold drops the whole page
/// cache (root); without root, selective-cold evicts the app's own two
/// files, which any user may do. With a plan, also cold through `wrapper`;
/// with a relinked build, that cold too. `progress` is told the timed
/// runs done and their total after each one.
pub fn bench_starts(
    plain: &BuiltApp,
    plan: Option<&Path>,
    wrapper: &Wrapper,
    relinked: Option<&BuiltApp>,
    packed: Option<(&Path, &Path)>,
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
        commands.push(LaunchSpec {
            argv: wrapper.argv(plan, &[executable.as_os_str().to_owned()]),
            ..sample_launch(executable)?
        });
        add(
            Start::WithPlan,
            format!("sample app + plan ({})", cold.as_str()),
            1,
            cold,
        );
    }
    let mut evict = vec![executable.clone(), plain.library.clone()];
    if let Some(app) = relinked {
        commands.push(sample_launch(&app.executable)?);
        add(
            Start::Relinked,
            format!("sample app relinked with its order ({})", cold.as_str()),
            commands.len() - 1,
            cold,
        );
        evict.extend([app.executable.clone(), app.library.clone()]);
    }
    if let Some((packed_executable, packed_library)) = packed {
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
        evict.extend([
            packed_executable.to_path_buf(),
            packed_library.to_path_buf(),
        ]);
    }
    step(&format!(
        "timing its start warm against {}{} ({RUNS} interleaved runs each)",
        cold.as_str(),
        match plan {
            Some(_) if wrapper.is_small() => ", and with its prefetch plan through coldstart-run",
            Some(_) => {
                ", and with its prefetch plan through `coldstart run` (the smaller coldstart-run \
                 is not built beside this binary: `cargo build --release` builds it)"
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

/// Medians of cold starts of the plain and the relinked app, interleaved,
/// with every device's read_ahead_kb held at `read_ahead_kb` meanwhile.
pub fn bench_at(
    plain: &BuiltApp,
    relinked: &BuiltApp,
    read_ahead_kb: u64,
    step: Step<'_>,
) -> anyhow::Result<(Option<f64>, Option<f64>)> {
    step(&format!(
        "timing both builds cold at read_ahead_kb {read_ahead_kb} ({RUNS} interleaved runs each)"
    ));
    let _readahead = coldstart_system::readahead::ReadaheadOverride::set_all(read_ahead_kb)?;
    let starts = [Start::Cold, Start::Relinked];
    let options = Options {
        commands: vec![
            sample_launch(&plain.executable)?,
            sample_launch(&relinked.executable)?,
        ],
        variants: ["sample app (cold)", "relinked with its order (cold)"]
            .iter()
            .enumerate()
            .map(|(command, name)| Variant {
                name: name.to_string(),
                command,
                cache: CacheMode::Cold,
            })
            .collect(),
        runs: RUNS,
        warmup: 1,
        evict: Vec::new(),
        grace: coldstart_system::launch::DEFAULT_GRACE,
    };
    let bench = StartBench {
        result: coldstart_bench::bench(
            &options,
            Environment::detect(&plain.executable),
            &AtomicBool::new(false),
            |_| {},
        )
        .context("timing the plain and the relinked sample app")?,
        starts: starts.to_vec(),
    };
    Ok((
        bench.median_ms(Start::Cold),
        bench.median_ms(Start::Relinked),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use coldstart_bench::VariantResult;
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
}
