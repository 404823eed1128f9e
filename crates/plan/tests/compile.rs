//! Compiling plans from hand-made profiles whose pages, times and
//! identities are known: the extents, their order, the pooling threshold,
//! changed files and the size cap come out as documented.

use coldstart_plan::compile::{CompileOptions, compile, threshold};
use coldstart_prefetch::{Extent, PlanFile};
use coldstart_profile::handmade;
use coldstart_profile::{
    Batch, EndReason, Mark, NewFile, PageEvent, PageEventKind, Profile, RunEnd, RunStart,
};

const MS: i64 = 1_000_000;
const PID: i32 = 100;
const STRANGER: i32 = 999;
/// glibc's makedev(8, 1): a real disk.
const SDA1: u64 = (8 << 8) | 1;
/// makedev(0, 23): an in-kernel filesystem.
const SHM: u64 = 23;

fn file(path: &str, size: u64, mtime_ns: i64) -> NewFile {
    NewFile {
        dev: SDA1,
        // Distinct paths, distinct inodes.
        ino: path
            .bytes()
            .fold(7u64, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b))),
        path: Some(path.into()),
        size: Some(size),
        mtime_ns: Some(mtime_ns),
        build_id: None,
        opened_by_tree: true,
        kind: None,
        opened_as: None,
        note: None,
    }
}

fn event(file: usize, page: u64, npages: u64, kind: PageEventKind, t_ms: i64) -> PageEvent {
    PageEvent {
        t_ns: t_ms * MS,
        pid: PID,
        file_id: Batch::batch_file_id(file),
        page,
        npages,
        kind,
    }
}

fn start(read_ahead_kb: u64) -> RunStart {
    handmade::run_start(4096, read_ahead_kb)
}

/// Adds a complete run with `files` and `events`, readahead off unless
/// `read_ahead_kb` says otherwise, ready at `ready_ms`.
fn add_run(
    profile: &mut Profile,
    read_ahead_kb: u64,
    files: Vec<NewFile>,
    page_events: Vec<PageEvent>,
    ready_ms: Option<i64>,
) -> i64 {
    let run = profile.begin_run(&start(read_ahead_kb)).unwrap();
    let process = |pid, in_tree| handmade::process(pid, Some(pid), "app", in_tree);
    profile
        .write(
            run,
            &Batch {
                files,
                processes: vec![process(PID, true), process(STRANGER, false)],
                page_events,
                marks: ready_ms
                    .map(|t| Mark {
                        t_ns: t * MS,
                        name: "ready".into(),
                    })
                    .into_iter()
                    .collect(),
                ..Default::default()
            },
        )
        .unwrap();
    profile
        .end_run(
            run,
            &RunEnd {
                ended_ns: 1000 * MS,
                end_reason: EndReason::ReadyRegex,
                exit_code: None,
                exit_signal: Some(15),
                root_pid: Some(PID),
            },
        )
        .unwrap();
    run
}

fn options(min_fraction: f64, merge_gap_pages: u64) -> CompileOptions {
    CompileOptions {
        min_fraction,
        merge_gap_pages,
        ..Default::default()
    }
}

fn extent(file: usize, page: u64, pages: u64, need_ms: i64) -> Extent {
    Extent {
        file,
        page,
        pages,
        need_ns: need_ms * MS,
    }
}

fn paths(files: &[PlanFile]) -> Vec<&str> {
    files.iter().map(|f| f.path.as_str()).collect()
}

#[test]
fn one_demand_run_gives_its_pages_up_to_ready_merged_and_in_need_order() {
    let dir = tempfile::tempdir().unwrap();
    let mut profile = Profile::create_or_open(&dir.path().join("p.db")).unwrap();
    let mut shm = file("/dev/shm/x", 40960, 1);
    shm.dev = SHM;
    let mut unresolved = file("/lost", 40960, 1);
    unresolved.path = None;
    let mut not_opened = file("/lib/unused.so", 4096, 1);
    not_opened.opened_by_tree = false;
    add_run(
        &mut profile,
        0,
        vec![
            file("/lib/a.so", 100 * 4096, 7),
            file("/etc/config", 10, 7),
            shm,
            unresolved,
            file("/lib/b.so", 8192, 7),
            not_opened,
        ],
        vec![
            // a.so: pages 0-3 read at 5 ms, page 10 touched at 2 ms: 6 pages
            // apart, merged by a gap of 8 into 0+11, needed at 2 ms.
            event(0, 0, 4, PageEventKind::Read, 5),
            event(0, 10, 1, PageEventKind::Touch, 2),
            // Page 40 faulted at 30 ms: its own extent.
            event(0, 40, 1, PageEventKind::Fault, 30),
            // After ready (50 ms): left out.
            event(0, 60, 1, PageEventKind::Fault, 51),
            // Evicted: not a need.
            event(0, 80, 1, PageEventKind::Evict, 3),
            // In-kernel and unresolved files: left out.
            event(2, 0, 2, PageEventKind::Fault, 1),
            event(3, 0, 2, PageEventKind::Fault, 1),
            // b.so: read() at 1 ms, first.
            event(4, 1, 1, PageEventKind::Access, 1),
            // Past its end (2 pages): left out.
            event(4, 7, 1, PageEventKind::Fault, 1),
        ],
        Some(50),
    );
    let compiled = compile(&profile, "p.db", &options(0.5, 8)).unwrap();
    let plan = &compiled.plan;
    assert_eq!(plan.page_size, 4096);
    assert_eq!(plan.source.runs, vec![1]);
    assert_eq!(plan.source.pages_from, "demand");
    assert_eq!(
        paths(&plan.files),
        ["/etc/config", "/lib/b.so", "/lib/a.so"]
    );
    assert_eq!(
        plan.extents,
        [
            extent(1, 1, 1, 1),
            extent(2, 0, 11, 2),
            extent(2, 40, 1, 30)
        ]
    );
    assert_eq!(plan.files[2].size, 100 * 4096);
    assert_eq!(plan.files[2].mtime_ns, Some(7));
    assert_eq!(compiled.stats.pages_needed, 7);
    assert_eq!(compiled.stats.pages_merged_gaps, 6);
    assert_eq!(compiled.stats.pages_unplannable, 4);
    assert_eq!(compiled.stats.files_opened_only, 1);
    assert_eq!(plan.bytes(), 13 * 4096);
    assert!(compiled.warnings.is_empty(), "{:?}", compiled.warnings);
}

#[test]
fn only_tree_processes_count() {
    let dir = tempfile::tempdir().unwrap();
    let mut profile = Profile::create_or_open(&dir.path().join("p.db")).unwrap();
    let mut stranger = event(0, 9, 1, PageEventKind::Read, 4);
    stranger.pid = STRANGER;
    add_run(
        &mut profile,
        0,
        vec![file("/lib/a.so", 40960, 7)],
        vec![event(0, 2, 1, PageEventKind::Fault, 1), stranger],
        Some(50),
    );
    let plan = compile(&profile, "p.db", &options(0.5, 0)).unwrap().plan;
    assert_eq!(plan.extents, [extent(0, 2, 1, 1)]);
}

#[test]
fn pooling_keeps_pages_enough_runs_needed_at_their_lower_median_time() {
    let dir = tempfile::tempdir().unwrap();
    let mut profile = Profile::create_or_open(&dir.path().join("p.db")).unwrap();
    let a = || vec![file("/lib/a.so", 1000 * 4096, 7)];
    // Page 100 needed by all three runs (at 5, 1, 3 ms), page 200 by two
    // (at 2 and 8 ms), page 300 by one.
    add_run(
        &mut profile,
        0,
        a(),
        vec![
            event(0, 100, 1, PageEventKind::Fault, 5),
            event(0, 200, 1, PageEventKind::Fault, 2),
            event(0, 300, 1, PageEventKind::Fault, 9),
        ],
        Some(500),
    );
    add_run(
        &mut profile,
        0,
        a(),
        vec![
            event(0, 100, 1, PageEventKind::Fault, 1),
            // Needed twice in one run: its first need counts, once.
            event(0, 200, 1, PageEventKind::Read, 8),
            event(0, 200, 1, PageEventKind::Fault, 9),
        ],
        Some(500),
    );
    add_run(
        &mut profile,
        0,
        a(),
        vec![event(0, 100, 1, PageEventKind::Fault, 3)],
        Some(500),
    );

    // Half of three runs is two.
    let half = compile(&profile, "p.db", &options(0.5, 0)).unwrap();
    assert_eq!(half.plan.source.min_runs, 2);
    assert_eq!(
        half.plan.extents,
        [extent(0, 200, 1, 2), extent(0, 100, 1, 3)]
    );
    assert_eq!(half.stats.pages_below_threshold, 1);

    let all = compile(&profile, "p.db", &options(1.0, 0)).unwrap();
    assert_eq!(all.plan.extents, [extent(0, 100, 1, 3)]);

    // Any run: page 300 joins; its only time is its median.
    let any = compile(&profile, "p.db", &options(0.01, 0)).unwrap();
    assert_eq!(
        any.plan.extents,
        [
            extent(0, 200, 1, 2),
            extent(0, 100, 1, 3),
            extent(0, 300, 1, 9)
        ]
    );

    // Only runs 2 and 3, both needed: page 200 only run 2 needed.
    let two = compile(
        &profile,
        "p.db",
        &CompileOptions {
            runs: Some(vec![3, 2]),
            ..options(1.0, 0)
        },
    )
    .unwrap();
    assert_eq!(two.plan.source.runs, vec![2, 3]);
    assert_eq!(two.plan.extents, [extent(0, 100, 1, 1)]);
}

#[test]
fn thresholds_round_up() {
    assert_eq!(threshold(0.5, 3), 2);
    assert_eq!(threshold(0.5, 4), 2);
    assert_eq!(threshold(0.3, 10), 3);
    assert_eq!(threshold(0.01, 10), 1);
    assert_eq!(threshold(1.0, 7), 7);
}

#[test]
fn a_file_that_changed_counts_only_from_the_runs_that_saw_it_as_it_is() {
    let dir = tempfile::tempdir().unwrap();
    let mut profile = Profile::create_or_open(&dir.path().join("p.db")).unwrap();
    // Run 1 saw the old a.so; runs 2 and 3 the new one (another mtime).
    add_run(
        &mut profile,
        0,
        vec![file("/lib/a.so", 40960, 1), file("/lib/b.so", 40960, 1)],
        vec![
            event(0, 5, 1, PageEventKind::Fault, 1),
            event(1, 0, 1, PageEventKind::Fault, 1),
        ],
        Some(500),
    );
    for _ in 0..2 {
        add_run(
            &mut profile,
            0,
            vec![file("/lib/a.so", 40960, 2), file("/lib/b.so", 40960, 1)],
            vec![
                event(0, 6, 1, PageEventKind::Fault, 2),
                event(1, 0, 1, PageEventKind::Fault, 1),
            ],
            Some(500),
        );
    }
    let compiled = compile(&profile, "p.db", &options(1.0, 0)).unwrap();
    let plan = &compiled.plan;
    assert_eq!(paths(&plan.files), ["/lib/b.so", "/lib/a.so"]);
    assert_eq!(plan.files[1].mtime_ns, Some(2));
    // Page 5 only the old file had; page 6 both runs of the new one need.
    assert_eq!(plan.extents, [extent(0, 0, 1, 1), extent(1, 6, 1, 2)]);
    assert_eq!(compiled.warnings.len(), 1, "{:?}", compiled.warnings);
    assert!(
        compiled.warnings[0].contains("/lib/a.so (changed after run 1)"),
        "{:?}",
        compiled.warnings
    );
}

#[test]
fn a_file_written_at_every_start_is_left_out() {
    let dir = tempfile::tempdir().unwrap();
    let mut profile = Profile::create_or_open(&dir.path().join("p.db")).unwrap();
    for mtime in 1..=3 {
        add_run(
            &mut profile,
            0,
            vec![
                file("/home/u/prefs.js", 4096, mtime),
                file("/lib/b.so", 40960, 1),
            ],
            vec![
                event(0, 0, 1, PageEventKind::Read, 1),
                event(1, 0, 1, PageEventKind::Fault, 1),
            ],
            Some(500),
        );
    }
    let compiled = compile(&profile, "p.db", &options(0.5, 0)).unwrap();
    assert_eq!(paths(&compiled.plan.files), ["/lib/b.so"]);
    assert_eq!(compiled.stats.files_rewritten, 1);
    assert!(
        compiled.warnings[0].contains("left out: /home/u/prefs.js"),
        "{:?}",
        compiled.warnings
    );
}

#[test]
fn runs_whose_program_never_started_are_not_pooled() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.db");
    let mut profile = Profile::create_or_open(&path).unwrap();
    let run = profile.begin_run(&start(0)).unwrap();
    profile
        .end_run(
            run,
            &RunEnd {
                ended_ns: 0,
                end_reason: EndReason::Failed,
                exit_code: None,
                exit_signal: None,
                root_pid: None,
            },
        )
        .unwrap();
    add_run(
        &mut profile,
        0,
        vec![file("/lib/a.so", 40960, 7)],
        vec![event(0, 1, 1, PageEventKind::Fault, 1)],
        Some(500),
    );
    // One run of one needing page 1: kept at any threshold.
    let compiled = compile(&profile, "p.db", &options(1.0, 0)).unwrap();
    assert_eq!(compiled.plan.source.runs, vec![2]);
    assert_eq!(compiled.plan.extents, [extent(0, 1, 1, 1)]);
    let error = compile(
        &profile,
        "p.db",
        &CompileOptions {
            runs: Some(vec![1]),
            ..Default::default()
        },
    )
    .unwrap_err()
    .to_string();
    assert!(error.contains("run 1 never started"), "{error}");
}

#[test]
fn with_readahead_on_mappings_count_and_reads_do_not() {
    let dir = tempfile::tempdir().unwrap();
    let mut profile = Profile::create_or_open(&dir.path().join("p.db")).unwrap();
    add_run(
        &mut profile,
        8192,
        vec![file("/lib/a.so", 400 * 4096, 7)],
        vec![
            event(0, 0, 128, PageEventKind::Read, 1),
            event(0, 16, 16, PageEventKind::Map, 2),
            event(0, 20, 1, PageEventKind::Fault, 2),
            event(0, 100, 1, PageEventKind::Touch, 3),
        ],
        Some(500),
    );
    let compiled = compile(&profile, "p.db", &options(0.5, 0)).unwrap();
    assert_eq!(compiled.plan.source.pages_from, "touched-or-mapped");
    assert_eq!(
        compiled.plan.extents,
        [extent(0, 16, 16, 2), extent(0, 100, 1, 3)]
    );
    assert!(
        compiled.warnings[0].contains("--read-ahead-kb 0"),
        "{:?}",
        compiled.warnings
    );
}

#[test]
fn long_extents_are_split_and_the_cap_drops_what_is_needed_last() {
    let dir = tempfile::tempdir().unwrap();
    let mut profile = Profile::create_or_open(&dir.path().join("p.db")).unwrap();
    add_run(
        &mut profile,
        0,
        vec![file("/lib/a.so", 4000 * 4096, 7)],
        vec![
            // 2000 pages read over 20 ms, 100 pages a millisecond.
            event(0, 0, 100, PageEventKind::Read, 40),
            event(0, 100, 1900, PageEventKind::Read, 10),
            event(0, 3000, 10, PageEventKind::Fault, 20),
        ],
        Some(500),
    );
    let compiled = compile(
        &profile,
        "p.db",
        &CompileOptions {
            max_extent_pages: 1024,
            ..options(0.5, 0)
        },
    )
    .unwrap();
    assert_eq!(
        compiled.plan.extents,
        [
            extent(0, 0, 1024, 10),
            extent(0, 1024, 976, 10),
            extent(0, 3000, 10, 20)
        ]
    );

    let capped = compile(
        &profile,
        "p.db",
        &CompileOptions {
            max_extent_pages: 1024,
            max_bytes: Some(2000 * 4096),
            ..options(0.5, 0)
        },
    )
    .unwrap();
    assert_eq!(capped.plan.extents.len(), 2);
    assert_eq!(capped.plan.bytes(), 2000 * 4096);
    assert_eq!(capped.stats.pages_over_cap, 10);
    assert!(
        capped.warnings[0].contains("size cap"),
        "{:?}",
        capped.warnings
    );
}

#[test]
fn a_profile_without_complete_runs_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("empty.db");
    let profile = Profile::create_or_open(&path).unwrap();
    let error = compile(&profile, "empty.db", &CompileOptions::default())
        .unwrap_err()
        .to_string();
    assert!(error.contains("empty.db"), "{error}");
    assert!(error.contains("no complete run"), "{error}");

    let mut profile = profile;
    add_run(&mut profile, 0, vec![], vec![], Some(1));
    let error = compile(
        &profile,
        "empty.db",
        &CompileOptions {
            runs: Some(vec![7]),
            ..Default::default()
        },
    )
    .unwrap_err()
    .to_string();
    assert!(error.contains("no run 7"), "{error}");
}

#[test]
fn a_run_without_ready_counts_until_its_end_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let mut profile = Profile::create_or_open(&dir.path().join("p.db")).unwrap();
    add_run(
        &mut profile,
        0,
        vec![file("/lib/a.so", 40960, 7)],
        vec![event(0, 3, 1, PageEventKind::Fault, 900)],
        None,
    );
    let compiled = compile(&profile, "p.db", &options(0.5, 0)).unwrap();
    assert_eq!(compiled.plan.extents, [extent(0, 3, 1, 900)]);
    assert!(compiled.warnings[0].contains("no ready mark"));
    assert!(!compiled.stats.runs[0].ready);
}
