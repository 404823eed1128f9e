//! The benchmark runner through a mock executor (as hyperfine tests its
//! statistics): each "run" returns a time chosen here, so the order of
//! runs, the warm-up and re-warm runs, the statistics and the warnings are
//! checked against figures worked out by hand.

use super::*;
use std::collections::VecDeque;
use std::sync::atomic::AtomicBool;

/// Records what the runner asked for and answers with the queued figures.
#[derive(Default)]
struct Mock {
    log: Vec<String>,
    timed: VecDeque<Measurement>,
    evictions: VecDeque<FileEviction>,
    /// Raise the interrupt flag when the timed run with this index starts.
    interrupt_at: Option<usize>,
    timed_count: usize,
}

impl Executor for Mock {
    fn run_untimed(&mut self, command: usize, _: &AtomicBool) -> Result<(), BenchError> {
        self.log.push(format!("untimed {command}"));
        Ok(())
    }

    fn run_timed(
        &mut self,
        command: usize,
        interrupted: &AtomicBool,
    ) -> Result<Measurement, BenchError> {
        self.log.push(format!("timed {command}"));
        let index = self.timed_count;
        self.timed_count += 1;
        if self.interrupt_at == Some(index) {
            interrupted.store(true, Ordering::Release);
            return Ok(Measurement {
                end_reason: EndReason::Interrupted,
                ..ok(1.0)
            });
        }
        Ok(self
            .timed
            .pop_front()
            .expect("a figure for every timed run"))
    }

    fn drop_page_cache(&mut self) -> Result<(), BenchError> {
        self.log.push("drop".into());
        Ok(())
    }

    fn evict(&mut self, path: &Path) -> FileEviction {
        self.log.push(format!("evict {}", path.display()));
        self.evictions
            .pop_front()
            .expect("an answer for every eviction")
    }
}

/// A counted run of `ms` milliseconds.
fn ok(ms: f64) -> Measurement {
    Measurement {
        end_reason: EndReason::Exited,
        wall_ns: (ms * 1e6) as i64,
        exit_code: Some(0),
        exit_signal: None,
        major_faults: 0,
        minor_faults: 0,
        read_bytes: 0,
    }
}

fn command(name: &str) -> LaunchSpec {
    LaunchSpec {
        argv: vec![name.into()],
        identity: launch::Identity {
            uid: 0,
            gid: 0,
            groups: vec![],
            user: None,
        },
        ready_regex: None,
        ready_file: None,
        timeout: Some(Duration::from_secs(2)),
        forward: launch::Forward::Discard,
        env: vec![],
    }
}

fn variant(name: &str, command: usize, cache: CacheMode) -> Variant {
    Variant {
        name: name.into(),
        command,
        cache,
    }
}

fn options(commands: &[&str], variants: Vec<Variant>, runs: usize, warmup: usize) -> Options {
    Options {
        commands: commands.iter().map(|c| command(c)).collect(),
        variants,
        runs,
        warmup,
        evict: vec![],
        grace: Duration::from_millis(1),
    }
}

fn environment() -> Environment {
    Environment {
        kernel: "6.18.0".into(),
        cpus: 2,
        cpu_model: None,
        memory_bytes: None,
        cpu_governor: None,
        program: None,
        device: None,
        read_ahead_kb: None,
        page_size: 4096,
        damon_reclaim: false,
        coldstart_version: "0.1.0".into(),
        started_at_unix_s: 0,
    }
}

/// Runs the benchmark through `mock`; returns the result and the events
/// the caller saw, as text.
fn bench_with(options: &Options, mock: &mut Mock) -> (BenchResult, Vec<String>) {
    let interrupted = AtomicBool::new(false);
    let mut events = Vec::new();
    let result = run(options, environment(), mock, &interrupted, |event| {
        events.push(match event {
            Event::Warmup { command, index } => format!("warmup {command} #{index}"),
            Event::Rewarm { variant } => format!("rewarm {variant}"),
            Event::Run(r) => format!("run {} round {} ok {}", r.variant, r.round, r.ok),
        })
    })
    .unwrap();
    (result, events)
}

fn close(actual: f64, expected: f64) -> bool {
    (actual - expected).abs() < 1e-9 * expected.abs().max(1.0)
}

#[test]
fn variants_are_interleaved_after_the_warm_up_of_every_command() {
    let options = options(
        &["a", "b"],
        vec![
            variant("A", 0, CacheMode::Warm),
            variant("B", 1, CacheMode::Warm),
        ],
        2,
        2,
    );
    let mut mock = Mock {
        timed: [10.0, 20.0, 11.0, 21.0].map(ok).into(),
        ..Mock::default()
    };
    let (result, events) = bench_with(&options, &mut mock);
    // Two warm-ups of each command, then rounds A B, A B; the warm-ups
    // leave both commands warm, so no re-warm run.
    assert_eq!(
        mock.log,
        [
            "untimed 0",
            "untimed 0",
            "untimed 1",
            "untimed 1",
            "timed 0",
            "timed 1",
            "timed 0",
            "timed 1"
        ]
    );
    assert_eq!(
        events,
        [
            "warmup 0 #0",
            "warmup 0 #1",
            "warmup 1 #0",
            "warmup 1 #1",
            "run 0 round 0 ok true",
            "run 1 round 0 ok true",
            "run 0 round 1 ok true",
            "run 1 round 1 ok true"
        ]
    );
    let order: Vec<(usize, usize, f64)> = result
        .runs
        .iter()
        .map(|r| (r.variant, r.round, r.wall_ms))
        .collect();
    assert_eq!(
        order,
        [(0, 0, 10.0), (1, 0, 20.0), (0, 1, 11.0), (1, 1, 21.0)]
    );
    assert_eq!(result.rewarm_runs, 0);
    assert!(!result.interrupted);
}

#[test]
fn a_warm_variant_is_warmed_again_after_another_command_s_eviction() {
    let mut options = options(
        &["a", "b"],
        vec![
            variant("A", 0, CacheMode::Warm),
            variant("B", 1, CacheMode::Selective),
            variant("C", 1, CacheMode::Cold),
        ],
        2,
        0,
    );
    options.evict = vec!["/lib/x.so".into(), "/tmp/gone".into(), "/etc/locked".into()];
    let denied = FileEviction::Failed("cannot evict /etc/locked: permission denied".into());
    let mut mock = Mock {
        timed: [1.0, 2.0, 3.0, 1.0, 2.0, 3.0].map(ok).into(),
        evictions: [
            FileEviction::Evicted { resident_after: 3 },
            FileEviction::Gone,
            denied.clone(),
            FileEviction::Evicted { resident_after: 5 },
            FileEviction::Gone,
            denied,
        ]
        .into(),
        ..Mock::default()
    };
    let (result, events) = bench_with(&options, &mut mock);
    // Round 0: A has never run, so one untimed run warms it; B evicts its
    // three files; C drops the whole cache. Round 1: A's command last ran
    // before two evictions, so it is warmed again.
    let evict_all = ["evict /lib/x.so", "evict /tmp/gone", "evict /etc/locked"];
    let mut expected = vec!["untimed 0", "timed 0"];
    expected.extend(evict_all);
    expected.extend(["timed 1", "drop", "timed 1", "untimed 0", "timed 0"]);
    expected.extend(evict_all);
    expected.extend(["timed 1", "drop", "timed 1"]);
    assert_eq!(mock.log, expected);
    assert_eq!(events[0], "rewarm 0");
    assert_eq!(events[4], "rewarm 0");
    assert_eq!(result.rewarm_runs, 2);
    let still: Vec<Option<u64>> = result.runs.iter().map(|r| r.still_resident_pages).collect();
    assert_eq!(still, [None, Some(3), None, None, Some(5), None]);
    // Each variant ran 1.0, 2.0 or 3.0 ms both times: no spread and exact
    // ratios 2 and 3, so the only warnings are the eviction outcomes, the
    // missing and the unevictable file named once despite two rounds.
    assert_eq!(
        result.warnings,
        [
            "up to 5 pages of the evicted files stayed resident because running processes map \
             them (usually shared libraries such as libc): selective-cold keeps them, as a start \
             after login would; `coldstart evict --profile` names the processes"
                .to_string(),
            "1 file(s) the profile names no longer exist (temporary files of the traced run): \
             nothing of them to evict"
                .to_string(),
            "could not evict a file, so selective runs may be partly warm: cannot evict \
             /etc/locked: permission denied"
                .to_string(),
        ]
    );
}

#[test]
fn summaries_are_exact() {
    let options = options(&["a"], vec![variant("A", 0, CacheMode::Warm)], 5, 1);
    let mut mock = Mock {
        timed: [100.0, 102.0, 98.0, 100.0, 100.0]
            .map(|ms| Measurement {
                major_faults: ms as u64 - 90,
                minor_faults: 2 * ms as u64,
                read_bytes: 4096 * ms as u64,
                ..ok(ms)
            })
            .into(),
        ..Mock::default()
    };
    let (result, _) = bench_with(&options, &mut mock);
    let a = &result.variants[0];
    let s = a.wall_ms.as_ref().unwrap();
    // Mean (100 + 102 + 98 + 100 + 100) / 5 = 100; sorted 98 100 100 100
    // 102, median 100; sample variance (0 + 4 + 4 + 0 + 0) / 4 = 2.
    assert_eq!(
        (s.n, s.mean, s.median, s.min, s.max),
        (5, 100.0, 100.0, 98.0, 102.0)
    );
    assert!(close(s.std_dev.unwrap(), 2f64.sqrt()));
    // 95% CI: t(0.975, 4 df) = 2.7764451051977934 (tables), half width
    // 2.7764451051977934 * sqrt(2) / sqrt(5) = 1.7559780661701656.
    let (low, high) = s.ci95.unwrap();
    assert!(close(low, 100.0 - 1.7559780661701656), "{low}");
    assert!(close(high, 100.0 + 1.7559780661701656), "{high}");
    // Deviations from the median 0 2 2 0 0: MAD 0, so no outliers.
    assert!(s.outliers.is_empty());
    // Medians of 10 12 8 10 10, 200 204 196 200 200 and 4096 x those.
    assert_eq!(a.major_faults_median, Some(10.0));
    assert_eq!(a.minor_faults_median, Some(200.0));
    assert_eq!(a.read_bytes_median, Some(409600.0));
    assert_eq!((a.runs_ok, a.runs_failed), (5, 0));
    assert!(a.ratio.is_none(), "the first variant is the baseline");
    // Relative half width 1.756% is under 5%: nothing to warn about.
    assert!(result.warnings.is_empty(), "{:?}", result.warnings);
}

#[test]
fn ratios_of_steady_variants_are_exact() {
    let options = options(
        &["a", "b"],
        vec![
            variant("A", 0, CacheMode::Warm),
            variant("B", 1, CacheMode::Warm),
        ],
        3,
        1,
    );
    let mut mock = Mock {
        timed: [100.0, 150.0, 100.0, 150.0, 100.0, 150.0].map(ok).into(),
        ..Mock::default()
    };
    let (result, _) = bench_with(&options, &mut mock);
    // Neither side varies: the ratio 150 / 100 and its interval are exact,
    // and the interval excludes 1, so no warning.
    let ratio = result.variants[1].ratio.as_ref().unwrap();
    assert_eq!(ratio.ratio, 1.5);
    assert_eq!(ratio.ci95, Some((1.5, 1.5)));
    assert!(result.warnings.is_empty(), "{:?}", result.warnings);
}

#[test]
fn failed_runs_and_outliers_are_warned_about() {
    let options = options(&["a"], vec![variant("A", 0, CacheMode::Warm)], 8, 1);
    let failed = |end_reason, exit_code, exit_signal| Measurement {
        end_reason,
        exit_code,
        exit_signal,
        major_faults: 999,
        ..ok(5.0)
    };
    let counted = [100.0, 101.0, 99.0, 100.0, 150.0].map(|ms| Measurement {
        major_faults: ms as u64,
        ..ok(ms)
    });
    let mut timed: VecDeque<Measurement> = counted.into();
    timed.extend([
        failed(EndReason::Exited, Some(1), None),
        failed(EndReason::Timeout, None, Some(9)),
        failed(EndReason::Signaled, None, Some(11)),
    ]);
    let mut mock = Mock {
        timed,
        ..Mock::default()
    };
    let (result, events) = bench_with(&options, &mut mock);
    assert_eq!(events.last().unwrap(), "run 0 round 7 ok false");
    let failures: Vec<Option<&str>> = result.runs.iter().map(|r| r.failure.as_deref()).collect();
    assert_eq!(
        failures[5..],
        [
            Some("exited with status 1"),
            Some("not ready after 2 s: killed"),
            Some("killed by signal 11 before it was ready")
        ]
    );
    let a = &result.variants[0];
    assert_eq!((a.runs_ok, a.runs_failed), (5, 3));
    // Failed runs do not count: median of 100 101 99 100 150 is 100.
    assert_eq!(a.major_faults_median, Some(100.0));
    let s = a.wall_ms.as_ref().unwrap();
    // Median 100, deviations 0 1 1 0 50, MAD 1: the modified z-score of
    // 150 is 0.6745 * 50 / 1 = 33.7 > 3.5, the others at most 0.67.
    assert_eq!(s.outliers, [4]);
    // Mean 110; deviations -10 -9 -11 -10 40 square to 2002, variance
    // 500.5, sd 22.371857; half width 2.7764451 * 22.371857 / sqrt(5) =
    // 27.778330, 25.25% of the mean.
    assert_eq!(s.mean, 110.0);
    assert_eq!(
        result.warnings,
        [
            "A: 3 of 8 runs failed and are not counted (exited with status 1; not ready after 2 s: \
             killed; killed by signal 11 before it was ready)",
            "A: 1 outlier run(s) (more than 3.5 median absolute deviations from the median): \
             other programs or background I/O may have interfered; close them, or add --warmup",
            "A: the spread is too wide to conclude within 5% (95% CI of the mean is ±25.3%): \
             run more rounds (-n) on a quieter machine",
        ]
    );
}

#[test]
fn one_counted_run_gives_no_interval() {
    let options = options(&["a"], vec![variant("A", 0, CacheMode::Cold)], 1, 0);
    let mut mock = Mock {
        timed: [ok(42.0)].into(),
        ..Mock::default()
    };
    let (result, _) = bench_with(&options, &mut mock);
    assert_eq!(mock.log, ["drop", "timed 0"]);
    let s = result.variants[0].wall_ms.as_ref().unwrap();
    assert_eq!((s.n, s.mean, s.std_dev, s.ci95), (1, 42.0, None, None));
    assert_eq!(
        result.warnings,
        ["A: one counted run gives no confidence interval; use -n 10 or more"]
    );
}

#[test]
fn ctrl_c_stops_after_the_runs_already_done() {
    let options = options(
        &["a", "b"],
        vec![
            variant("A", 0, CacheMode::Warm),
            variant("B", 1, CacheMode::Warm),
        ],
        3,
        0,
    );
    let mut mock = Mock {
        timed: [10.0, 20.0, 10.0].map(ok).into(),
        // The fourth timed run (round 1, B) is interrupted.
        interrupt_at: Some(3),
        ..Mock::default()
    };
    let (result, _) = bench_with(&options, &mut mock);
    assert_eq!(
        mock.log,
        [
            "untimed 0",
            "timed 0",
            "untimed 1",
            "timed 1",
            "timed 0",
            "timed 1"
        ]
    );
    assert!(result.interrupted);
    let done: Vec<(usize, usize)> = result.runs.iter().map(|r| (r.variant, r.round)).collect();
    assert_eq!(done, [(0, 0), (1, 0), (0, 1)]);
    assert_eq!(result.variants[0].runs_ok, 2);
    assert_eq!(result.variants[1].runs_ok, 1);
}

#[test]
fn nothing_to_run_is_refused() {
    let mut mock = Mock::default();
    let interrupted = AtomicBool::new(false);
    let none = options(&["a"], vec![], 1, 0);
    let error = run(&none, environment(), &mut mock, &interrupted, |_| {}).unwrap_err();
    assert_eq!(error.to_string(), "nothing to run: no command");
    let zero = options(&["a"], vec![variant("A", 0, CacheMode::Warm)], 0, 0);
    let error = run(&zero, environment(), &mut mock, &interrupted, |_| {}).unwrap_err();
    assert_eq!(
        error.to_string(),
        "nothing to run: --runs must be at least 1"
    );
    assert!(mock.log.is_empty());
}
