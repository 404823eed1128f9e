//! The demo's summary: the figures a person reads first, and a check reads
//! from `--json` (what the cold start reads, and what each fix changed,
//! with its interval), drawn from the demo's traces and benches. Every
//! figure is None where it was not measured.

use crate::bench::{Start, StartBench};
use crate::cold_start::ColdStart;
use crate::demo::PackedApp;
use crate::order::OrderLoop;
use coldstart_analyze::{FileReport, RunReport};
use coldstart_bench::stats::median;
use coldstart_profile::{FileKind, Profile};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Serialize)]
pub struct DemoSummary {
    pub app: App,
    /// Timed runs of each variant in each bench.
    pub runs: usize,
    /// What the starts with a plan (and the empty plan) went through.
    pub launcher: Launcher,
    /// The traced cold start (None without root).
    pub reads: Option<Reads>,
    /// One interleaved bench per read_ahead_kb: the kernel's default first
    /// (as root, when the device is not at it already), then the device's.
    pub settings: Vec<Setting>,
    /// The relinked build's executable-section pages (as root).
    pub relink: Option<RelinkPages>,
    /// What `coldstart pack` changed in what the loader reads.
    pub pack: Option<PackTables>,
    pub files: Files,
}

/// The sample app as generated and built.
#[derive(Debug, Clone, Serialize)]
pub struct App {
    pub translation_units: u32,
    pub functions: usize,
    /// Functions its start calls.
    pub startup_calls: usize,
    pub build_seconds: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Launcher {
    pub path: PathBuf,
    /// The small coldstart-run, rather than `coldstart run`.
    pub coldstart_run: bool,
    /// Why coldstart-run was not used, when it was not.
    pub note: Option<String>,
}

/// What the traced cold start read, against what it touched.
#[derive(Debug, Clone, Serialize)]
pub struct Reads {
    /// The device's setting, which the start was traced at.
    pub read_ahead_kb: Option<u64>,
    pub ready_ms: Option<f64>,
    pub files: usize,
    pub read_requests: u64,
    pub bytes_read: u64,
    /// Exactly what the start used: what it read when traced again with
    /// readahead off.
    pub bytes_touched: u64,
    /// The three files it read most.
    pub top_files: Vec<FileReads>,
    /// The three ELF sections (summed over files) it read most of beyond
    /// what it touched.
    pub untouched_sections: Vec<SectionReads>,
}

#[derive(Debug, Clone, Serialize)]
pub struct FileReads {
    pub path: String,
    /// file, metadata or memory.
    pub kind: &'static str,
    pub bytes_read: u64,
    pub bytes_touched: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct SectionReads {
    pub name: String,
    pub bytes_read: u64,
    pub bytes_touched: u64,
}

/// A figure from interleaved runs: computed from the medians of the rounds
/// in which every start it needs was counted, with a 95% interval by a
/// bootstrap over those rounds (each round resampled whole, so the starts
/// stay paired as they ran).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Estimate {
    pub median: f64,
    /// [low, high]; None with fewer than two rounds, or when the figure is
    /// undefined in more than 1 resample in 40 (a gap closed where cold is
    /// not clearly slower than warm).
    pub ci95: Option<(f64, f64)>,
}

impl Estimate {
    /// Whether the interval holds zero: a change no larger than the runs'
    /// own spread. None without an interval.
    pub fn within_noise(&self) -> Option<bool> {
        self.ci95.map(|(low, high)| low <= 0.0 && high >= 0.0)
    }
}

/// One bench at one read_ahead_kb. Times are in ms; "cold" is a cold start
/// as root, else selective-cold (the app's own files evicted).
#[derive(Debug, Clone, Serialize)]
pub struct Setting {
    pub read_ahead_kb: Option<u64>,
    /// The device's own setting (else the kernel's default, set for the
    /// bench).
    pub device: bool,
    /// cold or selective.
    pub cache: &'static str,
    pub warm_ms: Option<Estimate>,
    pub cold_ms: Option<Estimate>,
    /// cold / warm.
    pub cold_warm_ratio: Option<Estimate>,
    pub with_plan_ms: Option<Estimate>,
    /// (cold - with plan) / (cold - warm): 1 as fast as warm, 0 no gain.
    pub plan_gap_closed: Option<Estimate>,
    /// Cold through the launcher with an empty plan, minus plain cold.
    pub launcher_alone_ms: Option<Estimate>,
    pub relinked_cold_ms: Option<Estimate>,
    /// Relinked minus plain cold.
    pub relink_change_ms: Option<Estimate>,
    pub packed_cold_ms: Option<Estimate>,
    /// Packed minus plain cold.
    pub pack_change_ms: Option<Estimate>,
    /// Bytes the whole cold start read from storage (medians), plain and
    /// packed.
    pub cold_read_bytes: Option<f64>,
    pub packed_cold_read_bytes: Option<f64>,
}

/// Executable-section pages the start touched (exact: traced with
/// readahead off), before and after the relink.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct RelinkPages {
    pub text_pages_touched_before: u64,
    pub text_pages_touched_after: u64,
}

/// The relocation tables the loader reads at every start, before and
/// after packing, summed over the packed binaries.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct PackTables {
    pub table_bytes_before: u64,
    pub table_bytes_after: u64,
    /// Pages the tables span.
    pub loader_pages_before: u64,
    pub loader_pages_after: u64,
    /// The packed programs printed what the originals printed.
    pub output_matches: bool,
}

/// Where to look next.
#[derive(Debug, Clone, Serialize)]
pub struct Files {
    /// The traced start's report page (HTML, with its chart).
    pub report_page: Option<PathBuf>,
    pub plan: Option<PathBuf>,
    pub order_files: Vec<PathBuf>,
    /// The full text report.
    pub detail: PathBuf,
}

impl Setting {
    /// The figures of `bench`, timed at `read_ahead_kb`.
    pub fn of(bench: &StartBench, read_ahead_kb: Option<u64>, device: bool) -> Setting {
        use Start::*;
        let one = |start| estimate(bench, &[start], |m| Some(m[0]));
        let minus_cold = |start| estimate(bench, &[start, Cold], |m| Some(m[0] - m[1]));
        let read = |start| bench.variant(start).and_then(|v| v.read_bytes_median);
        Setting {
            read_ahead_kb,
            device,
            cache: bench.variant(Cold).map_or("cold", |v| v.cache),
            warm_ms: one(Warm),
            cold_ms: one(Cold),
            cold_warm_ratio: estimate(bench, &[Cold, Warm], |m| (m[1] > 0.0).then(|| m[0] / m[1])),
            with_plan_ms: one(WithPlan),
            plan_gap_closed: estimate(bench, &[Warm, Cold, WithPlan], |m| {
                (m[1] > m[0]).then(|| (m[1] - m[2]) / (m[1] - m[0]))
            }),
            launcher_alone_ms: minus_cold(LauncherOnly),
            relinked_cold_ms: one(Relinked),
            relink_change_ms: minus_cold(Relinked),
            packed_cold_ms: one(Packed),
            pack_change_ms: minus_cold(Packed),
            cold_read_bytes: read(Cold),
            packed_cold_read_bytes: read(Packed),
        }
    }
}

impl RelinkPages {
    /// At the kernel's default read_ahead_kb (text pages touched are traced
    /// with readahead off, so alike at every setting).
    pub fn of(order: &OrderLoop) -> RelinkPages {
        RelinkPages {
            text_pages_touched_before: order.at_default.before.text_pages_touched,
            text_pages_touched_after: order.at_default.after.text_pages_touched,
        }
    }
}

impl PackTables {
    pub fn of(packed: &PackedApp) -> PackTables {
        let sum = |f: fn(&coldstart_pack::Report) -> u64| packed.reports.iter().map(f).sum();
        PackTables {
            table_bytes_before: sum(|r| r.rela_bytes_before),
            table_bytes_after: sum(|r| r.rela_bytes_after + r.relr_bytes),
            loader_pages_before: sum(|r| r.loader_pages_before),
            loader_pages_after: sum(|r| r.loader_pages_after),
            output_matches: packed.output_matches,
        }
    }
}

/// What `traced` (a start at the device's readahead) read, against what
/// `demand` (the same start with readahead off) touched.
pub fn reads(traced: &RunReport, demand: &RunReport) -> Reads {
    let touched: BTreeMap<&str, &FileReport> =
        demand.files.iter().map(|f| (f.path.as_str(), f)).collect();
    let mut top_files: Vec<&FileReport> = traced.files.iter().collect();
    top_files.sort_by_key(|f| std::cmp::Reverse(f.bytes_read));
    let mut sections: BTreeMap<&str, SectionReads> = BTreeMap::new();
    for file in &traced.files {
        let demand_sections = touched
            .get(file.path.as_str())
            .and_then(|f| f.sections.as_deref())
            .unwrap_or_default();
        for section in file.sections.iter().flatten() {
            let entry = sections
                .entry(section.name.as_str())
                .or_insert_with(|| SectionReads {
                    name: section.name.clone(),
                    bytes_read: 0,
                    bytes_touched: 0,
                });
            entry.bytes_read += section.bytes_read;
            entry.bytes_touched += demand_sections
                .iter()
                .filter(|s| s.name == section.name && s.offset == section.offset)
                .map(|s| s.bytes_touched)
                .sum::<u64>();
        }
    }
    let mut untouched: Vec<SectionReads> = sections.into_values().collect();
    untouched.sort_by_key(|s| std::cmp::Reverse(s.bytes_read.saturating_sub(s.bytes_touched)));
    untouched.retain(|s| s.bytes_read > s.bytes_touched);
    untouched.truncate(3);
    Reads {
        read_ahead_kb: traced.run.read_ahead_kb,
        ready_ms: traced.run.ready_ns.map(|ns| ns as f64 / 1e6),
        files: traced.totals.files,
        read_requests: traced.totals.read_requests,
        bytes_read: traced.totals.bytes_read,
        bytes_touched: demand.totals.bytes_touched,
        top_files: top_files
            .into_iter()
            .take(3)
            .map(|f| FileReads {
                path: f.path.clone(),
                kind: f.kind.unwrap_or(FileKind::File).name(),
                bytes_read: f.bytes_read,
                bytes_touched: touched.get(f.path.as_str()).map_or(0, |d| d.bytes_touched),
            })
            .collect(),
        untouched_sections: untouched,
    }
}

/// What `start` read, against what its readahead-off run (analyzed here,
/// with sections) touched.
pub fn traced_reads(start: &ColdStart) -> anyhow::Result<Reads> {
    let profile = Profile::open(&start.profile)?;
    let (demand, _) = coldstart_analyze::analyze(
        &profile,
        &coldstart_analyze::Options {
            run: Some(start.demand_run),
            attribute: true,
            ..Default::default()
        },
    )?;
    Ok(reads(&start.report, &demand))
}

/// The order files' paths and the rest, for "where to look next".
pub fn files(
    report_page: Option<&Path>,
    plan: Option<&Path>,
    order: Option<&OrderLoop>,
    detail: &Path,
) -> Files {
    Files {
        report_page: report_page.map(Path::to_path_buf),
        plan: plan.map(Path::to_path_buf),
        order_files: order.map(|o| o.order_files.clone()).unwrap_or_default(),
        detail: detail.to_path_buf(),
    }
}

/// Resamples of the rounds behind each interval.
const RESAMPLES: usize = 2000;

/// `figure` of the medians of `starts` (in that order) over the rounds of
/// `bench` in which each was counted, with its bootstrap interval. None
/// when a start was not timed, no round counted them all, or the figure is
/// undefined at the medians.
fn estimate(
    bench: &StartBench,
    starts: &[Start],
    figure: impl Fn(&[f64]) -> Option<f64>,
) -> Option<Estimate> {
    let rounds = paired_rounds(bench, starts)?;
    let medians = column_medians(&rounds, (0..rounds.len()).collect::<Vec<_>>().as_slice());
    Some(Estimate {
        median: figure(&medians)?,
        ci95: bootstrap(&rounds, &figure),
    })
}

/// Per round, the wall times of `starts` in order: only rounds in which
/// every one ran and was counted.
fn paired_rounds(bench: &StartBench, starts: &[Start]) -> Option<Vec<Vec<f64>>> {
    let variants = starts
        .iter()
        .map(|&start| bench.starts.iter().position(|&s| s == start))
        .collect::<Option<Vec<usize>>>()?;
    let mut by_round: BTreeMap<usize, Vec<Option<f64>>> = BTreeMap::new();
    for run in bench.result.runs.iter().filter(|r| r.ok) {
        if let Some(column) = variants.iter().position(|&v| v == run.variant) {
            by_round
                .entry(run.round)
                .or_insert_with(|| vec![None; variants.len()])[column] = Some(run.wall_ms);
        }
    }
    let rounds: Vec<Vec<f64>> = by_round
        .into_values()
        .filter_map(|times| times.into_iter().collect())
        .collect();
    (!rounds.is_empty()).then_some(rounds)
}

fn column_medians(rounds: &[Vec<f64>], picked: &[usize]) -> Vec<f64> {
    (0..rounds[0].len())
        .map(|column| {
            median(
                &picked
                    .iter()
                    .map(|&r| rounds[r][column])
                    .collect::<Vec<_>>(),
            )
        })
        .collect()
}

/// The 2.5th and 97.5th percentiles of `figure` over resamples of the
/// rounds, drawn by a fixed generator so the same runs give the same
/// interval.
fn bootstrap(rounds: &[Vec<f64>], figure: &impl Fn(&[f64]) -> Option<f64>) -> Option<(f64, f64)> {
    let n = rounds.len();
    if n < 2 {
        return None;
    }
    // The workspace's one splitmix64; n is small, so the modulo bias is
    // below 2^-58.
    let mut random = coldstart_sample::Rng::new(0x636f_6c64_7374_6172);
    let mut picked = vec![0; n];
    let mut values = Vec::with_capacity(RESAMPLES);
    for _ in 0..RESAMPLES {
        picked
            .iter_mut()
            .for_each(|p| *p = (random.next_u64() % n as u64) as usize);
        values.extend(figure(&column_medians(rounds, &picked)));
    }
    if values.len() * 40 < RESAMPLES * 39 {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let at = |q: f64| values[((values.len() - 1) as f64 * q).round() as usize];
    Some((at(0.025), at(0.975)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use coldstart_bench::stats::summarize;
    use coldstart_bench::{BenchResult, Environment, RunRecord, VariantResult};

    /// A bench of `starts`, one column of wall times each, row r being
    /// round r; a NaN is a run that failed.
    fn bench(starts: &[Start], rounds: &[&[f64]]) -> StartBench {
        let runs = rounds
            .iter()
            .enumerate()
            .flat_map(|(round, times)| {
                times
                    .iter()
                    .enumerate()
                    .map(move |(variant, &wall_ms)| RunRecord {
                        variant,
                        round,
                        ok: !wall_ms.is_nan(),
                        failure: None,
                        end_reason: "ready-regex",
                        wall_ms,
                        exit_code: Some(0),
                        exit_signal: None,
                        major_faults: 0,
                        minor_faults: 0,
                        read_bytes: 0,
                        still_resident_pages: None,
                    })
            })
            .collect::<Vec<_>>();
        let variants = (0..starts.len())
            .map(|v| {
                let times: Vec<f64> = runs
                    .iter()
                    .filter(|r| r.variant == v && r.ok)
                    .map(|r| r.wall_ms)
                    .collect();
                VariantResult {
                    name: format!("variant {v}"),
                    command: Vec::new(),
                    cache: "cold",
                    runs_ok: times.len(),
                    runs_failed: rounds.len() - times.len(),
                    wall_ms: summarize(&times),
                    ratio: None,
                    major_faults_median: None,
                    minor_faults_median: None,
                    read_bytes_median: Some(1e6 * (v + 1) as f64),
                }
            })
            .collect();
        StartBench {
            result: BenchResult {
                environment: Environment::detect(Path::new("/nonexistent")),
                variants,
                runs,
                rewarm_runs: 0,
                interrupted: false,
                warnings: Vec::new(),
            },
            starts: starts.to_vec(),
        }
    }

    #[test]
    fn each_figure_is_taken_from_the_medians_of_the_rounds_that_timed_it() {
        use Start::*;
        // Warm 10; the plan halves each round's cold-warm gap; the empty
        // plan costs exactly 2 ms a round; the relinked build failed once.
        let bench = bench(
            &[Warm, Cold, WithPlan, LauncherOnly, Relinked],
            &[
                &[10.0, 50.0, 30.0, 52.0, 40.0],
                &[10.0, 30.0, 20.0, 32.0, f64::NAN],
                &[10.0, 40.0, 25.0, 42.0, 35.0],
                &[10.0, 60.0, 35.0, 62.0, 31.0],
                &[10.0, 20.0, 15.0, 22.0, 30.0],
            ],
        );
        let setting = Setting::of(&bench, Some(128), false);
        assert_eq!(setting.read_ahead_kb, Some(128));
        assert_eq!(setting.cold_ms.unwrap().median, 40.0);
        assert_eq!(setting.cold_warm_ratio.unwrap().median, 4.0);
        // Rounds resampled whole keep these exact in every resample: the
        // interval is the figure itself.
        assert_eq!(
            setting.plan_gap_closed,
            Some(Estimate {
                median: 0.5,
                ci95: Some((0.5, 0.5))
            })
        );
        assert_eq!(
            setting.launcher_alone_ms,
            Some(Estimate {
                median: 2.0,
                ci95: Some((2.0, 2.0))
            })
        );
        assert_eq!(
            setting.launcher_alone_ms.unwrap().within_noise(),
            Some(false)
        );
        // Round 1 is left out of the relinked figures: cold 45 (50, 40, 60,
        // 20), relinked 33 (40, 35, 31, 30).
        let relink = setting.relink_change_ms.unwrap();
        assert_eq!(relink.median, 33.0 - 45.0);
        let (low, high) = relink.ci95.unwrap();
        assert!(low <= high && low < 0.0 && high > 0.0, "{relink:?}");
        assert_eq!(relink.within_noise(), Some(true));
        // Not timed, not made up.
        assert_eq!(setting.packed_cold_ms, None);
        assert_eq!(setting.pack_change_ms, None);
        assert_eq!(setting.packed_cold_read_bytes, None);
        assert_eq!(setting.cold_read_bytes, Some(2e6));
        // The same runs give the same intervals.
        assert_eq!(
            Setting::of(&bench, Some(128), false).relink_change_ms,
            Some(relink)
        );
    }

    #[test]
    fn a_gap_that_is_not_there_has_no_share_closed() {
        use Start::*;
        // Cold no slower than warm: nothing to close.
        let flat = bench(
            &[Warm, Cold, WithPlan],
            &[
                &[10.0, 10.0, 12.0],
                &[11.0, 10.0, 12.0],
                &[10.0, 10.0, 12.0],
            ],
        );
        assert_eq!(Setting::of(&flat, None, true).plan_gap_closed, None);
        // Cold slower at the medians but not in every resample: a figure,
        // without an interval.
        let unclear = bench(
            &[Warm, Cold, WithPlan],
            &[&[10.0, 9.0, 9.0], &[10.0, 12.0, 11.0], &[10.0, 11.0, 10.0]],
        );
        let gap = Setting::of(&unclear, None, true).plan_gap_closed.unwrap();
        assert_eq!((gap.median, gap.ci95), (1.0, None));
        assert_eq!(gap.within_noise(), None);
        // One round says nothing about spread.
        let once = bench(&[Warm, Cold], &[&[10.0, 30.0]]);
        let ratio = Setting::of(&once, None, true).cold_warm_ratio.unwrap();
        assert_eq!((ratio.median, ratio.ci95), (3.0, None));
    }
}
