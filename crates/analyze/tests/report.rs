//! `analyze::analyze` on profiles built by hand: every figure below is
//! worked out from the events in the comments, not taken from a run of the
//! code.

use coldstart_analyze::{Options, analyze};
use coldstart_profile::handmade;
use coldstart_profile::{
    Batch, EndReason, Mark, NewFile, PageEvent, PageEventKind, Process, Profile, Readahead,
    ReadaheadKind, RunEnd,
};

const MS: i64 = 1_000_000;
const PAGE: u64 = 4096;
/// The traced program.
const APP: i32 = 100;
/// Another process on the machine.
const OTHER: i32 = 999;
/// glibc's makedev(8, 1): a real disk.
const SDA1: u64 = (8 << 8) | 1;

fn file(path: &str, ino: u64, size: u64) -> NewFile {
    NewFile {
        dev: SDA1,
        ino,
        path: Some(path.into()),
        size: Some(size),
        mtime_ns: Some(1),
        build_id: None,
        opened_by_tree: true,
        kind: None,
        opened_as: None,
        note: None,
    }
}

fn event(
    pid: i32,
    file: usize,
    page: u64,
    npages: u64,
    kind: PageEventKind,
    t_ns: i64,
) -> PageEvent {
    PageEvent {
        t_ns,
        pid,
        file_id: Batch::batch_file_id(file),
        page,
        npages,
        kind,
    }
}

fn process(pid: i32, comm: &str, in_tree: bool) -> Process {
    handmade::process(pid, Some(pid), comm, in_tree)
}

/// /bin/app (10 pages), /lib/libz.so (6000 bytes: one full page and 1904
/// bytes of a second) and /usr/share/other.dat, which only another process
/// reads. Ready at 9 ms.
fn write_run(profile: &mut Profile, read_ahead_kb: u64) -> i64 {
    use PageEventKind::*;
    let run = profile
        .begin_run(&handmade::run_start(PAGE, read_ahead_kb))
        .unwrap();
    let page_events = vec![
        // /bin/app: reads 0-3 then 4-5 (one request, contiguous, same
        // task), 8 (a second), 2 again (a third, backwards).
        event(APP, 0, 0, 4, Read, MS),
        event(APP, 0, 4, 2, Read, 2 * MS),
        event(APP, 0, 8, 1, Read, 3 * MS),
        event(APP, 0, 2, 1, Read, 4 * MS),
        // A fault on page 1 whose fault-around window maps 0-3, and a
        // read() of page 8.
        event(APP, 0, 1, 1, Fault, 5 * MS),
        event(APP, 0, 0, 4, Map, 5 * MS),
        event(APP, 0, 8, 1, Access, 6 * MS),
        // Another process reads page 9: not the app's.
        event(OTHER, 0, 9, 1, Read, 6 * MS),
        // libz: page 0, then page 1 after a readahead decision (7.2 ms),
        // which makes it a request of its own; a fault on page 1.
        event(APP, 1, 0, 1, Read, 7 * MS),
        event(APP, 1, 1, 1, Read, 7 * MS + 500_000),
        event(APP, 1, 1, 1, Fault, 8 * MS),
        // other.dat: only the other process.
        event(OTHER, 2, 0, 3, Read, 8 * MS),
    ];
    profile
        .write(
            run,
            &Batch {
                files: vec![
                    file("/bin/app", 1, 10 * PAGE),
                    file("/lib/libz.so", 2, 6000),
                    file("/usr/share/other.dat", 3, 3 * PAGE),
                ],
                processes: vec![process(APP, "app", true), process(OTHER, "other", false)],
                page_events,
                readahead: vec![Readahead {
                    t_ns: 7 * MS + 200_000,
                    pid: APP,
                    file_id: Batch::batch_file_id(1),
                    kind: ReadaheadKind::Sync,
                    page: 1,
                    size: 1,
                    async_size: 0,
                    ra_pages: 32,
                    mmap_miss: None,
                    prev_pos: None,
                    req_count: None,
                }],
                marks: vec![Mark {
                    t_ns: 9 * MS,
                    name: "ready".into(),
                }],
                lost: vec![],
                ..Default::default()
            },
        )
        .unwrap();
    profile
        .end_run(
            run,
            &RunEnd {
                ended_ns: 20 * MS,
                end_reason: EndReason::ReadyRegex,
                exit_code: None,
                exit_signal: Some(15),
                root_pid: Some(APP),
            },
        )
        .unwrap();
    run
}

/// A run reading /bin/app (pages 0 and 4) and ext4's metadata through the
/// block device's cache (dev 0:3, whose inode is the disk's number) at
/// disk pages 1,000,000 then 10: far apart, and not a file.
#[test]
fn metadata_rows_have_no_file_size_and_no_seek() {
    use PageEventKind::*;
    let dir = tempfile::tempdir().unwrap();
    let mut profile = Profile::create_or_open(&dir.path().join("p.db")).unwrap();
    let run = profile.begin_run(&handmade::run_start(PAGE, 128)).unwrap();
    let metadata = NewFile {
        dev: 3,
        ino: (8 << 20) | 1,
        path: None,
        size: Some(512 << 30),
        kind: Some(coldstart_profile::FileKind::Metadata),
        note: Some("ext4 metadata on /dev/sda1 (mounted at /)".into()),
        opened_by_tree: false,
        ..file("", 0, 0)
    };
    let batch = Batch {
        files: vec![file("/bin/app", 1, 10 * PAGE), metadata],
        processes: vec![process(APP, "app", true)],
        page_events: vec![
            event(APP, 1, 1_000_000, 1, Read, MS),
            event(APP, 1, 10, 1, Read, 2 * MS),
            event(APP, 0, 0, 1, Read, 3 * MS),
            event(APP, 0, 4, 1, Read, 4 * MS),
        ],
        ..Default::default()
    };
    profile.write(run, &batch).unwrap();
    profile
        .end_run(
            run,
            &RunEnd {
                ended_ns: 5 * MS,
                end_reason: EndReason::Exited,
                exit_code: Some(0),
                exit_signal: None,
                root_pid: Some(APP),
            },
        )
        .unwrap();
    let (report, _) = analyze(&profile, &Options::default()).unwrap();
    let row = |path: &str| report.files.iter().find(|f| f.path == path).unwrap();
    let meta = row("[ext4 metadata on /dev/sda1 (mounted at /)]");
    assert_eq!(meta.read_requests, 2);
    assert_eq!(
        (meta.size, meta.seek_forward_bytes, meta.seek_backward_bytes),
        (None, None, None)
    );
    let app = row("/bin/app");
    // Page 0, then page 4: 3 pages forward.
    assert_eq!(app.size, Some(10 * PAGE));
    assert_eq!(
        (app.seek_forward_bytes, app.seek_backward_bytes),
        (Some(3 * PAGE), Some(0))
    );
    assert_eq!(
        (
            report.totals.seek_forward_bytes,
            report.totals.seek_backward_bytes
        ),
        (3 * PAGE, 0)
    );
}

#[test]
fn figures_per_file_and_in_total_with_readahead_on() {
    let dir = tempfile::tempdir().unwrap();
    let mut profile = Profile::create_or_open(&dir.path().join("p.db")).unwrap();
    let run = write_run(&mut profile, 128);
    let (report, timeline) = analyze(&profile, &Options::default()).unwrap();
    assert_eq!(report.run.id, run);
    assert_eq!(report.run.ready_ns, Some(9 * MS));
    assert!(!report.run.demand_reads);
    assert_eq!(timeline.ready_ns, Some(9 * MS));
    // Only the app is listed as the tree's process.
    let pids: Vec<i32> = report.processes.iter().map(|p| p.pid).collect();
    assert_eq!(pids, [APP]);

    // Biggest reader first.
    let paths: Vec<&str> = report.files.iter().map(|f| f.path.as_str()).collect();
    assert_eq!(paths, ["/bin/app", "/lib/libz.so"]);

    let app = &report.files[0];
    // Read: {0..5, 8} = 7 pages (page 2 twice, the other's page 9 not
    // counted), all inside the 10-page file: 7 * 4096 bytes.
    assert_eq!((app.pages_read, app.bytes_read), (7, 7 * PAGE));
    // Touched = faulted {1} + accessed {8}; mapped {0..3}; touched or
    // mapped {0, 1, 2, 3, 8}.
    assert_eq!(
        (app.pages_faulted, app.pages_mapped, app.pages_accessed),
        (1, 4, 1)
    );
    assert_eq!((app.pages_touched, app.bytes_touched), (2, 2 * PAGE));
    assert_eq!(
        (app.pages_touched_or_mapped, app.bytes_touched_or_mapped),
        (5, 5 * PAGE)
    );
    // 7 pages read for 2 touched.
    assert_eq!(app.read_amplification, Some(3.5));
    // Requests [0, 6), [8, 9), [2, 3): forward from byte 6 * 4096 to
    // 8 * 4096 (8192), backward from 9 * 4096 to 2 * 4096 (28672).
    assert_eq!(app.read_requests, 3);
    assert_eq!(
        (app.seek_forward_bytes, app.seek_backward_bytes),
        (Some(8192), Some(28672))
    );
    assert_eq!(
        (app.first_access_ns, app.last_access_ns),
        (Some(MS), Some(6 * MS))
    );
    assert_eq!(app.processes, ["app (100)"]);
    assert!(app.touched_by_others, "the other process read page 9");

    let libz = &report.files[1];
    // Both pages read; the file ends 1904 bytes into page 1, so 6000
    // bytes read, and the touched page 1 holds 1904 of them.
    assert_eq!((libz.pages_read, libz.bytes_read), (2, 6000));
    assert_eq!((libz.pages_touched, libz.bytes_touched), (1, 1904));
    assert_eq!(libz.read_amplification, Some(2.0));
    // The readahead decision between the two reads splits them; they are
    // contiguous, so no seek.
    assert_eq!(libz.read_requests, 2);
    assert_eq!(
        (libz.seek_forward_bytes, libz.seek_backward_bytes),
        (Some(0), Some(0))
    );
    assert!(!libz.touched_by_others);

    // other.dat: only the other process read it (3 pages).
    assert_eq!(report.outside_files.len(), 1);
    let outside = &report.outside_files[0];
    assert_eq!(outside.path, "/usr/share/other.dat");
    assert_eq!(outside.pages_read, 3);
    assert_eq!(outside.processes, ["other (999)"]);

    let t = &report.totals;
    assert_eq!(t.files, 2);
    assert_eq!((t.pages_read, t.bytes_read), (9, 7 * PAGE + 6000));
    assert_eq!((t.pages_touched, t.bytes_touched), (3, 2 * PAGE + 1904));
    assert_eq!(
        (t.pages_touched_or_mapped, t.bytes_touched_or_mapped),
        (6, 5 * PAGE + 1904)
    );
    // 9 pages read for 3 touched.
    assert_eq!(t.read_amplification, Some(3.0));
    assert_eq!(t.read_requests, 5);
    assert_eq!((t.seek_forward_bytes, t.seek_backward_bytes), (8192, 28672));
    assert!(report.warnings.is_empty(), "{:?}", report.warnings);
}

#[test]
fn with_readahead_off_every_page_read_was_demanded() {
    let dir = tempfile::tempdir().unwrap();
    let mut profile = Profile::create_or_open(&dir.path().join("p.db")).unwrap();
    let first = write_run(&mut profile, 0);
    // A later run must not be picked when the first is asked for.
    write_run(&mut profile, 128);
    let options = Options {
        run: Some(first),
        ..Options::default()
    };
    let (report, _) = analyze(&profile, &options).unwrap();
    assert!(report.run.demand_reads);
    let app = &report.files[0];
    // Touched = read {0..5, 8} + faulted {1} + accessed {8}: 7 pages, so
    // no amplification; touched or mapped adds nothing (mapped {0..3}).
    assert_eq!((app.pages_touched, app.bytes_touched), (7, 7 * PAGE));
    assert_eq!(app.read_amplification, Some(1.0));
    assert_eq!(app.pages_touched_or_mapped, 7);
    assert_eq!(report.totals.pages_touched, 9);
    assert_eq!(report.totals.read_amplification, Some(1.0));
}

#[test]
fn a_file_glob_keeps_only_matching_files() {
    let dir = tempfile::tempdir().unwrap();
    let mut profile = Profile::create_or_open(&dir.path().join("p.db")).unwrap();
    write_run(&mut profile, 128);
    let options = Options {
        file: Some(globset::Glob::new("/lib/*").unwrap().compile_matcher()),
        ..Options::default()
    };
    let (report, _) = analyze(&profile, &options).unwrap();
    let paths: Vec<&str> = report.files.iter().map(|f| f.path.as_str()).collect();
    assert_eq!(paths, ["/lib/libz.so"]);
    assert_eq!(report.totals.pages_read, 2);
    assert!(report.outside_files.is_empty());
}

/// The system-wide service's process, running before the trace (so it has
/// no row), and its replay thread: outside the traced tree, named as the
/// prefetcher (the name the replay gives its threads).
const SERVICE_PROCESS: i32 = 299;
const SERVICE: i32 = 300;
/// A thread of the service's that replayed an earlier start and ended
/// before this one began.
const STALE: i32 = 301;

/// A start the service served: its thread reads /bin/app 0-7 at 1 ms and
/// /lib/libz.so 0-1 at 1.5 ms; the app then faults /bin/app pages 1 and 5
/// (cached: no read of its own) and reads page 9 itself; another process
/// reads other.dat 0-2, and the stale thread read other.dat 5 before the
/// start (-2 ms).
fn write_served_run(profile: &mut Profile) {
    use PageEventKind::*;
    let run = profile.begin_run(&handmade::run_start(PAGE, 128)).unwrap();
    let replay_thread =
        |pid: i32| handmade::process(pid, Some(SERVICE_PROCESS), "cs-prefetch", false);
    let mut service = replay_thread(SERVICE);
    service.t_start_ns = Some(MS / 2);
    let mut stale = replay_thread(STALE);
    (stale.t_start_ns, stale.t_end_ns) = (Some(-5 * MS), Some(-MS));
    profile
        .write(
            run,
            &Batch {
                files: vec![
                    file("/bin/app", 1, 10 * PAGE),
                    file("/lib/libz.so", 2, 6000),
                    file("/usr/share/other.dat", 3, 8 * PAGE),
                ],
                processes: vec![
                    process(APP, "app", true),
                    service,
                    stale,
                    process(OTHER, "other", false),
                ],
                page_events: vec![
                    event(STALE, 2, 5, 1, Read, -2 * MS),
                    event(SERVICE, 0, 0, 8, Read, MS),
                    event(SERVICE, 1, 0, 2, Read, MS + MS / 2),
                    event(APP, 0, 1, 1, Fault, 2 * MS),
                    event(APP, 0, 5, 1, Fault, 2 * MS),
                    event(APP, 0, 9, 1, Read, 3 * MS),
                    event(APP, 0, 9, 1, Fault, 3 * MS),
                    event(OTHER, 2, 0, 3, Read, 4 * MS),
                ],
                ..Default::default()
            },
        )
        .unwrap();
    profile
        .end_run(run, &handmade::exited(20 * MS, APP))
        .unwrap();
}

#[test]
fn a_start_the_service_served_counts_its_prefetchers_reads_as_the_runs() {
    let dir = tempfile::tempdir().unwrap();
    let mut profile = Profile::create_or_open(&dir.path().join("p.db")).unwrap();
    write_served_run(&mut profile);
    let (report, timeline) = analyze(&profile, &Options::default()).unwrap();

    // /bin/app: the service's 8 pages and the app's page 9; touched are
    // the app's faults {1, 5, 9}. libz: the service's 2 pages (6000
    // bytes), touched by no one, and still the run's.
    let paths: Vec<&str> = report.files.iter().map(|f| f.path.as_str()).collect();
    assert_eq!(paths, ["/bin/app", "/lib/libz.so"]);
    let app = &report.files[0];
    assert_eq!((app.pages_read, app.pages_touched), (9, 3));
    assert_eq!(app.processes, ["cs-prefetch (300)", "app (100)"]);
    assert!(!app.touched_by_others);
    let libz = &report.files[1];
    assert_eq!(
        (libz.pages_read, libz.bytes_read, libz.pages_touched),
        (2, 6000, 0)
    );
    assert_eq!(libz.processes, ["cs-prefetch (300)"]);

    // other.dat stays outside: the stale thread was gone before the start.
    assert_eq!(report.outside_files.len(), 1);
    assert_eq!(report.outside_files[0].pages_read, 4);
    assert_eq!(
        report.outside_files[0].processes,
        ["cs-prefetch (301)", "other (999)"]
    );

    // The tree, then the service's thread; the chart knows it as the
    // prefetcher's.
    let pids: Vec<i32> = report.processes.iter().map(|p| p.pid).collect();
    assert_eq!(pids, [APP, SERVICE]);
    let pids: Vec<i32> = timeline.processes.iter().map(|p| p.pid).collect();
    assert_eq!(pids, [APP, SERVICE]);
    assert_eq!(timeline.prefetcher_tasks, [SERVICE]);
    let points: Vec<(i32, u64)> = timeline.files[0]
        .points
        .iter()
        .filter(|p| p.kind == PageEventKind::Read)
        .map(|p| (p.pid, p.npages))
        .collect();
    assert_eq!(points, [(SERVICE, 8), (APP, 1)]);
}
