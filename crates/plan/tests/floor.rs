//! The floor of a plan against a hand-made warm start, with every arrival
//! and lateness worked out by hand below.

use coldstart_analyze::loaded::LoadedRun;
use coldstart_plan::floor::{Device, predict};
use coldstart_prefetch::replay::PREFETCHER_COMM;
use coldstart_prefetch::{Extent, Plan, PlanFile, PlanSource};
use coldstart_profile::{EndReason, File, FileId, Mark, PageEvent, PageEventKind, Run, handmade};

const PAGE: u64 = 4096;
const APP: i32 = 100;
const PREFETCHER: i32 = 150;
const OUTSIDER: i32 = 999;
const SDA1: u64 = (8 << 8) | 1;
const A: FileId = 1;
const B: FileId = 2;

fn plan_file(path: &str) -> PlanFile {
    PlanFile {
        path: path.into(),
        size: 4096 * PAGE,
        mtime_ns: None,
        build_id: None,
    }
}

/// Three extents, in this order: a.so pages 0-255 (1 MiB), a.so page 1000
/// (4 KiB), b.so pages 0-511 (2 MiB).
fn the_plan() -> Plan {
    let extent = |file, page, pages| Extent {
        file,
        page,
        pages,
        need_ns: 0,
    };
    Plan {
        page_size: PAGE,
        source: PlanSource {
            profile: "p.db".into(),
            runs: vec![1],
            min_runs: 1,
            merge_gap_pages: 0,
            max_extent_pages: 1024,
            max_bytes: None,
            pages_from: "demand".into(),
        },
        files: vec![plan_file("/lib/a.so"), plan_file("/lib/b.so")],
        extents: vec![extent(0, 0, 256), extent(0, 1000, 1), extent(1, 0, 512)],
        lookups: Vec::new(),
    }
}

fn file(id: FileId, path: &str) -> File {
    File {
        id,
        dev: SDA1,
        ino: 10 + id as u64,
        path: Some(path.into()),
        size: Some(4096 * PAGE),
        mtime_ns: None,
        build_id: None,
        opened_by_tree: true,
        kind: None,
        opened_as: None,
        note: None,
    }
}

fn event(t_us: i64, pid: i32, file_id: FileId, page: u64, kind: PageEventKind) -> PageEvent {
    PageEvent {
        t_ns: t_us * 1000,
        pid,
        file_id,
        page,
        npages: 1,
        kind,
    }
}

/// A warm start ready at 10 ms: the program first uses b.so page 10 at
/// 0.5 ms (a fault-around mapping) and a.so page 5 at 1 ms (a fault); it
/// never uses a.so page 1000. A prefetcher's read of b.so at 0.1 ms, an
/// outsider's fault on a.so page 1000 at 0.2 ms and the program's fault on
/// a.so page 0 after the ready mark say nothing about first use.
fn warm_start() -> LoadedRun {
    let mut start = handmade::run_start(PAGE, 128);
    start.argv = vec!["/bin/app".into()];
    LoadedRun::new(
        Run {
            id: 1,
            start,
            ended_ns: Some(20_000_000),
            end_reason: Some(EndReason::Exited),
            exit_code: Some(0),
            exit_signal: None,
            root_pid: Some(APP),
            lost_events: 0,
            complete: true,
            loader: None,
        },
        vec![file(A, "/lib/a.so"), file(B, "/lib/b.so")],
        vec![
            event(100, PREFETCHER, B, 0, PageEventKind::Read),
            event(200, OUTSIDER, A, 1000, PageEventKind::Fault),
            event(500, APP, B, 10, PageEventKind::Map),
            event(1000, APP, A, 5, PageEventKind::Fault),
            event(12_000, APP, A, 1000, PageEventKind::Fault),
        ],
        Vec::new(),
        vec![
            handmade::process(APP, Some(APP), "app", true),
            handmade::process(PREFETCHER, Some(PREFETCHER), PREFETCHER_COMM, true),
            handmade::process(OUTSIDER, Some(OUTSIDER), "other", false),
        ],
        vec![Mark {
            t_ns: 10_000_000,
            name: "ready".into(),
        }],
    )
}

/// 1 GB/s and 100 µs a request: a.so 0-255 costs 100 + 1048.576 µs, a.so
/// 1000 costs 100 + 4.096 µs, b.so 0-511 costs 100 + 2097.152 µs.
const GIGABYTE_DEVICE: Device = Device {
    bandwidth_bytes_s: 1e9,
    request_s: 100e-6,
};

/// Within a nanosecond: the model sums seconds as floating point.
fn close(got: i64, want: i64) -> bool {
    (got - want).abs() <= 1
}

#[test]
fn the_floor_reads_what_the_start_uses_in_the_order_it_uses_it() {
    let floor = predict(&the_plan(), &warm_start(), GIGABYTE_DEVICE);
    // Perfect order: b.so first (used at 500 µs), arriving at 2197.152 µs,
    // 1697.152 µs late; then a.so 0-255 (used at 1000 µs), arriving at
    // 3345.728 µs, 2345.728 µs late. a.so 1000 is never used before ready.
    assert!(close(floor.mapped.held_back_ns, 2_345_728), "{floor:?}");
    assert_eq!(floor.mapped.latest_extent, Some(0));
    assert!(
        close(floor.mapped.floor_ns, 10_000_000 + 2_345_728),
        "{floor:?}"
    );
    assert_eq!(floor.reference_ns, 10_000_000);
    assert_eq!((floor.mapped.extents_used, floor.extents), (2, 3));
    // The plan's order: a.so 0-255 arrives at 1148.576 µs (148.576 late),
    // a.so 1000 at 1252.672 µs, b.so at 3449.824 µs (2949.824 late).
    assert!(
        close(floor.mapped.held_back_plan_order_ns, 2_949_824),
        "{floor:?}"
    );
    assert!(close(floor.plan_read_ns, 3_449_824), "{floor:?}");
}

#[test]
fn pages_only_fault_around_mapped_are_left_out_of_the_demanded_floor() {
    let floor = predict(&the_plan(), &warm_start(), GIGABYTE_DEVICE);
    // b.so page 10 was only mapped (at 500 µs): counting demanded pages,
    // the start uses a.so 0-255 alone (its fault at 1000 µs). Read first,
    // in either order, it arrives at 1148.576 µs: 148.576 µs late.
    assert_eq!(floor.demanded.extents_used, 1);
    assert!(close(floor.demanded.held_back_ns, 148_576), "{floor:?}");
    assert!(
        close(floor.demanded.floor_ns, 10_000_000 + 148_576),
        "{floor:?}"
    );
    assert!(
        close(floor.demanded.held_back_plan_order_ns, 148_576),
        "{floor:?}"
    );
    // Mappings counted as uses, b.so makes both orders later.
    assert!(floor.mapped.held_back_ns > floor.demanded.held_back_ns);
}

#[test]
fn a_device_fast_enough_holds_nothing_back() {
    // 1 TB/s and 1 µs a request: b.so arrives at 3.1 µs, a.so at 5.2 µs,
    // long before their first use.
    let device = Device {
        bandwidth_bytes_s: 1e12,
        request_s: 1e-6,
    };
    let floor = predict(&the_plan(), &warm_start(), device);
    assert_eq!(floor.mapped.held_back_ns, 0);
    assert_eq!(floor.mapped.latest_extent, None);
    assert_eq!(floor.mapped.floor_ns, floor.reference_ns);
}
