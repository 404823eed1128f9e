//! Refining a plan from hand-made served starts: which pages the refined
//! plan adds, keeps and drops, the identities of new files, the need times
//! of added pages scaled into the seed's time line, and extents built as
//! compile builds them.

mod common;

use coldstart_analyze::loaded::LoadedRun;
use coldstart_plan::compile::CompileOptions;
use coldstart_plan::refine::{RefineStats, refine};
use coldstart_prefetch::replay::PREFETCHER_COMM;
use coldstart_prefetch::{Extent, Plan, PlanFile, PlanSource};
use coldstart_profile::{
    EndReason, File, FileId, Mark, PageEvent, PageEventKind, Process, Run, RunId, handmade,
};
use common::{MS, PAGE, event, file, plan_file};

const SERVED: RunId = 7;
const APP: i32 = 100;
const PREFETCHER: i32 = 150;
const OUTSIDER: i32 = 999;

/// File ids of the served run.
const A: FileId = 1;
const C: FileId = 2;
const NEW: FileId = 3;
const CHANGED: FileId = 4;

fn extent(file: usize, page: u64, pages: u64, need_ms: i64) -> Extent {
    Extent {
        file,
        page,
        pages,
        need_ns: need_ms * MS,
    }
}

fn plan(files: Vec<PlanFile>, extents: Vec<Extent>, pages_from: &str) -> Plan {
    Plan {
        page_size: PAGE,
        source: PlanSource {
            profile: "p.db".into(),
            runs: vec![1, 2, 3],
            min_runs: 1,
            merge_gap_pages: 4,
            max_extent_pages: 1024,
            max_bytes: None,
            pages_from: pages_from.into(),
        },
        files,
        extents,
        lookups: Vec::new(),
    }
}

fn processes() -> Vec<Process> {
    vec![
        handmade::process(PREFETCHER, Some(PREFETCHER), PREFETCHER_COMM, true),
        handmade::process(APP, Some(APP), "app", true),
        handmade::process(OUTSIDER, Some(OUTSIDER), "other", false),
    ]
}

/// A start served at readahead 128 KiB, ended at `ended_ms`, ready at
/// `ready_ms` when given.
fn served(
    id: RunId,
    files: Vec<File>,
    events: Vec<PageEvent>,
    ready_ms: Option<i64>,
    ended_ms: i64,
) -> LoadedRun {
    let mut start = handmade::run_start(PAGE, 128);
    start.argv = ["coldstart-run", "--plan", "/p/plan", "--", "/bin/app"]
        .map(String::from)
        .to_vec();
    LoadedRun::new(
        Run {
            id,
            start,
            ended_ns: Some(ended_ms * MS),
            end_reason: Some(EndReason::ReadyRegex),
            exit_code: None,
            exit_signal: Some(15),
            root_pid: Some(APP),
            lost_events: 0,
            complete: true,
            loader: None,
        },
        files,
        events,
        Vec::new(),
        processes(),
        ready_ms
            .map(|t| Mark {
                t_ns: t * MS,
                name: "ready".into(),
            })
            .into_iter()
            .collect(),
    )
}

fn options() -> CompileOptions {
    CompileOptions {
        merge_gap_pages: 4,
        max_extent_pages: 1024,
        ..CompileOptions::default()
    }
}

/// The seed: /etc/opened (opened only); a.so pages 0-3 needed at 10 ms and
/// 40-41 at 50 ms (the seed's last need); changed.so pages 0-1 at 20 ms.
/// 8 pages.
fn the_seed() -> Plan {
    plan(
        vec![
            plan_file("/etc/opened", 1),
            plan_file("/lib/a.so", 100),
            plan_file("/lib/changed.so", 10),
        ],
        vec![
            extent(1, 0, 4, 10),
            extent(2, 0, 2, 20),
            extent(1, 40, 2, 50),
        ],
        "demand",
    )
}

/// The seed and what an earlier refinement added: a.so page 60 (X, needed
/// at 30 ms) and 70 (Z, at 35 ms), c.so page 3 (W, at 12 ms).
fn the_current() -> Plan {
    plan(
        vec![
            plan_file("/etc/opened", 1),
            plan_file("/lib/a.so", 100),
            plan_file("/lib/c.so", 10),
            plan_file("/lib/changed.so", 10),
        ],
        vec![
            extent(1, 0, 4, 10),
            extent(2, 3, 1, 12),
            extent(3, 0, 2, 20),
            extent(1, 60, 1, 30),
            extent(1, 70, 1, 35),
            extent(1, 40, 2, 50),
        ],
        "demand+refined",
    )
}

/// The served start, ready at 25 ms (so the scale into the seed's time line
/// is 50 / 25 = 2). By construction:
/// - the prefetcher read the whole current plan, Z included;
/// - a fault-around mapping of a.so 56-63 covers X: kept;
/// - a fault of c.so 3 uses W: kept;
/// - Z: only the prefetcher and the outsider touched it: dropped;
/// - a.so 20 (Y) faulted at 7 ms, read with the window 16-23: Y added at
///   14 ms, 7 window pages left out;
/// - new.so 9 faulted at 6.5 ms and 7 at 8 ms, each read alone: added at
///   13 and 16 ms, one extent 7-9 through the 1-page gap;
/// - changed.so (now 11 pages, planned at 10) 0 faulted and read: a changed
///   file, not added;
/// - a.so 80 faulted and read at 30 ms, after ready: not added;
/// - the outsider's fault and read of a.so 90: not the program's;
/// - seed pages a.so 40-41 and changed.so 0-1: unused, kept.
fn the_start() -> LoadedRun {
    let mut new = file(NEW, "/lib/new.so", 50);
    new.mtime_ns = Some(9);
    new.build_id = Some("abc".into());
    use PageEventKind::*;
    served(
        SERVED,
        vec![
            file(A, "/lib/a.so", 100),
            file(C, "/lib/c.so", 10),
            new,
            file(CHANGED, "/lib/changed.so", 11),
        ],
        vec![
            event(100, PREFETCHER, A, 0, 4, Read),
            event(110, PREFETCHER, C, 3, 1, Read),
            event(120, PREFETCHER, CHANGED, 0, 2, Read),
            event(130, PREFETCHER, A, 60, 1, Read),
            event(140, PREFETCHER, A, 70, 1, Read),
            event(150, PREFETCHER, A, 40, 2, Read),
            event(3_000, APP, A, 56, 8, Map),
            event(4_000, APP, C, 3, 1, Fault),
            event(5_000, OUTSIDER, A, 68, 4, Map),
            event(6_500, APP, NEW, 9, 1, Fault),
            event(6_510, APP, NEW, 9, 1, Read),
            event(7_000, APP, A, 20, 1, Fault),
            event(7_010, APP, A, 16, 8, Read),
            event(8_000, APP, NEW, 7, 1, Fault),
            event(8_010, APP, NEW, 7, 1, Read),
            event(9_000, APP, CHANGED, 0, 1, Fault),
            event(9_010, APP, CHANGED, 0, 1, Read),
            event(10_000, OUTSIDER, A, 90, 1, Fault),
            event(10_010, OUTSIDER, A, 90, 1, Read),
            event(30_000, APP, A, 80, 1, Fault),
            event(30_010, APP, A, 80, 1, Read),
        ],
        Some(25),
        100,
    )
}

fn paths(plan: &Plan) -> Vec<&str> {
    plan.files.iter().map(|f| f.path.as_str()).collect()
}

/// The refined plan's extents as (path, page, pages, need ms).
fn extents(plan: &Plan) -> Vec<(&str, u64, u64, i64)> {
    plan.extents
        .iter()
        .map(|e| {
            assert_eq!(e.need_ns % MS, 0, "{e:?}");
            (
                plan.files[e.file].path.as_str(),
                e.page,
                e.pages,
                e.need_ns / MS,
            )
        })
        .collect()
}

#[test]
fn a_served_start_adds_its_demanded_misses_keeps_used_additions_and_drops_the_rest() {
    let refined = refine(&the_seed(), &the_current(), &[the_start()], &options());
    assert_eq!(
        refined.stats,
        RefineStats {
            runs: vec![SERVED],
            seed_pages: 8,
            kept_pages: 2,
            dropped_pages: 1,
            added_pages: 3,
            window_pages_left_out: 7,
            added_lookups: 0,
            changed_files: vec!["/lib/changed.so".into()],
        }
    );
    let plan = &refined.plan;
    assert_eq!(
        extents(plan),
        [
            ("/lib/a.so", 0, 4, 10),
            ("/lib/c.so", 3, 1, 12),
            // 9 at 6.5 ms and 7 at 8 ms, times 2; page 8 fills the gap.
            ("/lib/new.so", 7, 3, 13),
            ("/lib/a.so", 20, 1, 14),
            ("/lib/changed.so", 0, 2, 20),
            ("/lib/a.so", 60, 1, 30),
            ("/lib/a.so", 40, 2, 50),
        ]
    );
    // Opened-only files first, then in order of first need.
    assert_eq!(
        paths(plan),
        [
            "/etc/opened",
            "/lib/a.so",
            "/lib/c.so",
            "/lib/new.so",
            "/lib/changed.so"
        ]
    );
    // A new file as the served start saw it; planned files as planned (the
    // changed one too: its seed pages stay until new seeds are traced).
    assert_eq!(
        plan.files[3],
        PlanFile {
            path: "/lib/new.so".into(),
            size: 50 * PAGE,
            mtime_ns: Some(9),
            build_id: Some("abc".into()),
        }
    );
    assert_eq!(plan.files[2], plan_file("/lib/c.so", 10));
    assert_eq!(plan.files[4], plan_file("/lib/changed.so", 10));
    assert_eq!(plan.page_size, PAGE);
    assert_eq!(plan.source.runs, [1, 2, 3, SERVED]);
    assert_eq!(plan.source.pages_from, "demand+refined");
    assert_eq!(plan.bytes(), (4 + 1 + 3 + 1 + 2 + 1 + 2) * PAGE);
}

#[test]
fn without_a_ready_mark_need_times_scale_by_the_starts_end_and_misses_count_until_it() {
    // Ended at 200 ms: scale 50 / 200. A fault at 40 ms needs the page at
    // 10 ms of the seed's time line.
    let start = served(
        SERVED,
        vec![file(A, "/lib/a.so", 100)],
        vec![
            event(40_000, APP, A, 30, 1, PageEventKind::Fault),
            event(40_010, APP, A, 30, 1, PageEventKind::Read),
        ],
        None,
        200,
    );
    let refined = refine(&the_seed(), &the_seed(), &[start], &options());
    assert_eq!(refined.stats.added_pages, 1);
    assert!(
        extents(&refined.plan).contains(&("/lib/a.so", 30, 1, 10)),
        "{:?}",
        extents(&refined.plan)
    );
}

#[test]
fn a_page_two_starts_demanded_is_added_once_at_the_earlier_scaled_need() {
    // Both ready at 25 ms (scale 2): one faults b.so 5 at 9 ms, the other
    // at 6 ms.
    let start = |id, t_us| {
        served(
            id,
            vec![file(A, "/lib/b.so", 10)],
            vec![
                event(t_us, APP, A, 5, 1, PageEventKind::Fault),
                event(t_us + 10, APP, A, 5, 1, PageEventKind::Read),
            ],
            Some(25),
            100,
        )
    };
    let refined = refine(
        &the_seed(),
        &the_current(),
        &[start(8, 9_000), start(9, 6_000)],
        &options(),
    );
    assert_eq!(refined.stats.runs, [8, 9]);
    assert_eq!(refined.stats.added_pages, 1);
    // Neither start used X, Z or W.
    assert_eq!(
        (refined.stats.kept_pages, refined.stats.dropped_pages),
        (0, 3)
    );
    assert_eq!(
        extents(&refined.plan),
        [
            ("/lib/a.so", 0, 4, 10),
            ("/lib/b.so", 5, 1, 12),
            ("/lib/changed.so", 0, 2, 20),
            ("/lib/a.so", 40, 2, 50),
        ]
    );
    assert_eq!(refined.plan.source.runs, [1, 2, 3, 8, 9]);
}

#[test]
fn with_no_served_start_the_refinement_is_the_seed() {
    let refined = refine(&the_seed(), &the_current(), &[], &options());
    assert_eq!(refined.stats.seed_pages, 8);
    assert_eq!(
        (
            refined.stats.kept_pages,
            refined.stats.dropped_pages,
            refined.stats.added_pages
        ),
        (0, 3, 0)
    );
    let seed = the_seed();
    assert_eq!(refined.plan.files, seed.files);
    assert_eq!(refined.plan.extents, seed.extents);
}

#[test]
fn retiming_puts_the_extents_in_the_order_a_start_first_used_them() {
    // a.so 0-3 needed at 10 ms, c.so 3 at 12 ms, a.so 40-41 at 50 ms (the
    // plan's last need). The start, ready at 25 ms: the program maps a.so
    // 40 at 2 ms and faults c.so 3 at 6 ms; a.so 0-3 it never uses, so its
    // need scales by 25 / 50 to 5 ms; the prefetcher's read of a.so 0 at
    // 0.1 ms and the outsider's fault on it at 0.2 ms are not uses.
    let plan = plan(
        vec![
            plan_file("/etc/opened", 1),
            plan_file("/lib/a.so", 100),
            plan_file("/lib/c.so", 10),
        ],
        vec![
            extent(1, 0, 4, 10),
            extent(2, 3, 1, 12),
            extent(1, 40, 2, 50),
        ],
        "demand",
    );
    let start = served(
        SERVED,
        vec![file(A, "/lib/a.so", 100), file(C, "/lib/c.so", 10)],
        vec![
            event(100, PREFETCHER, A, 0, 4, PageEventKind::Read),
            event(200, OUTSIDER, A, 0, 1, PageEventKind::Fault),
            event(2_000, APP, A, 40, 1, PageEventKind::Map),
            event(6_000, APP, C, 3, 1, PageEventKind::Fault),
        ],
        Some(25),
        100,
    );
    let retimed = coldstart_plan::refine::retime(&plan, &start);
    assert_eq!(
        extents(&retimed),
        [
            ("/lib/a.so", 40, 2, 2),
            ("/lib/a.so", 0, 4, 5),
            ("/lib/c.so", 3, 1, 6),
        ]
    );
    // The opened-only file first, then by first need; nothing else moves.
    assert_eq!(paths(&retimed), ["/etc/opened", "/lib/a.so", "/lib/c.so"]);
    assert_eq!(retimed.bytes(), plan.bytes());
    assert_eq!(retimed.source, plan.source);
}
