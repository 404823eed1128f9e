//! Rows of a profile are untrusted: one edited by hand (or by a buggy
//! writer) to hold a negative page, a page count near 2^64, an unknown
//! kind or an impossible task id is refused when read, with one error that
//! names the profile, the run and the row.

use coldstart_profile::*;
use rusqlite::Connection;
use std::path::Path;

fn start() -> RunStart {
    RunStart {
        argv: vec!["/bin/app".into()],
        cwd: "/tmp".into(),
        cache_mode: CacheMode::Cold,
        started_at_unix_ns: 1_700_000_000_000_000_000,
        kernel: "6.18.0".into(),
        page_size: 4096,
        read_ahead_kb: Some(128),
        fault_around_bytes: Some(65536),
        uid: 1000,
        gid: 1000,
        tool_version: "0.1.0".into(),
    }
}

/// One file (row id 1), one process (pid 100), two page events (seq 0:
/// page 7 x1; seq 1: page 3 x4), one readahead row, one function, one
/// lost-events row, two loader spans (seq 0: an open from 3 to 4; seq 1:
/// relocating file 1 from 5 to 8).
fn write_profile(path: &Path) -> RunId {
    let mut p = Profile::create_or_open(path).unwrap();
    let run = p.begin_run(&start()).unwrap();
    let file = NewFile {
        dev: 65024,
        ino: 42,
        path: Some("/usr/lib/libx.so".into()),
        size: Some(1 << 20),
        mtime_ns: Some(123),
        build_id: None,
        opened_by_tree: true,
        kind: None,
        opened_as: None,
        note: None,
    };
    let event = |t_ns, page, npages| PageEvent {
        t_ns,
        pid: 100,
        file_id: Batch::batch_file_id(0),
        page,
        npages,
        kind: PageEventKind::Read,
    };
    let files = p
        .write(
            run,
            &Batch {
                files: vec![file],
                processes: vec![Process {
                    pid: 100,
                    ppid: Some(1),
                    tgid: Some(100),
                    comm: Some("app".into()),
                    exe: Some("/bin/app".into()),
                    t_start_ns: Some(0),
                    t_end_ns: Some(5_000),
                    in_tree: true,
                }],
                page_events: vec![event(1, 7, 1), event(2, 3, 4)],
                readahead: vec![Readahead {
                    t_ns: 1,
                    pid: 100,
                    file_id: Batch::batch_file_id(0),
                    kind: ReadaheadKind::Sync,
                    page: 3,
                    size: 4,
                    async_size: 1,
                    ra_pages: 32,
                    mmap_miss: Some(2),
                    prev_pos: Some(-1),
                    req_count: Some(1),
                }],
                marks: vec![],
                lost: vec![LostEvents { cpu: 0, events: 3 }],
                inode_loads: vec![InodeLoad {
                    t_ns: 4,
                    pid: 100,
                    file_id: Batch::batch_file_id(0),
                }],
                path_lookups: vec![PathLookup {
                    t_ns: 4,
                    pid: 100,
                    call: "openat".into(),
                    path: Ok("/etc/hosts".into()),
                }],
                loader_spans: vec![
                    LoaderSpan {
                        pid: 100,
                        phase: LoaderPhase::Relocate,
                        object: Some("/usr/lib/libx.so".into()),
                        file_id: Some(Batch::batch_file_id(0)),
                        t_begin_ns: 5,
                        t_end_ns: Some(8),
                        base: Some(0x7f00_0000_0000),
                        target: None,
                        detail: None,
                        result: None,
                        lookups: Some(12),
                        depth: 1,
                        probe_hits: Some(40),
                    },
                    LoaderSpan {
                        pid: 100,
                        phase: LoaderPhase::Open,
                        object: None,
                        file_id: None,
                        t_begin_ns: 3,
                        t_end_ns: Some(4),
                        base: None,
                        target: None,
                        detail: Some("/usr/lib/libx.so".into()),
                        result: Some(3),
                        lookups: None,
                        depth: 2,
                        probe_hits: Some(1),
                    },
                ],
            },
        )
        .unwrap();
    assert_eq!(files, vec![1]);
    p.write_functions(
        run,
        &[],
        &[FunctionEvent {
            pid: 100,
            first_seq: 1,
            file_id: 1,
            offset: 0x1000,
            size: Some(16),
            symbol: Some("main".into()),
            first_t_ns: 10,
            calls: 1,
        }],
    )
    .unwrap();
    p.end_run(
        run,
        &RunEnd {
            ended_ns: 10_000,
            end_reason: EndReason::Exited,
            exit_code: Some(0),
            exit_signal: None,
            root_pid: Some(100),
        },
    )
    .unwrap();
    run
}

/// Writes a fresh profile, applies `corrupt` to it with raw SQL, then
/// returns the error `read` gives on the opened profile.
fn error_after(corrupt: &str, read: impl Fn(&Profile, RunId) -> Result<()>) -> (String, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.db");
    let run = write_profile(&path);
    {
        let profile = Profile::open(&path).unwrap();
        read(&profile, run).expect("the uncorrupted profile reads");
    }
    Connection::open(&path)
        .unwrap()
        .execute_batch(corrupt)
        .unwrap();
    let profile = Profile::open(&path).unwrap();
    let error = read(&profile, run).expect_err(corrupt);
    (error.to_string(), path.display().to_string())
}

fn page_events(p: &Profile, run: RunId) -> Result<()> {
    p.page_events(run).map(drop)
}

fn assert_refused(
    corrupt: &str,
    read: impl Fn(&Profile, RunId) -> Result<()>,
    row_and_detail: &str,
) {
    let (error, path) = error_after(corrupt, read);
    assert_eq!(
        error,
        format!("{path}: run 1: {row_and_detail}"),
        "{corrupt}"
    );
}

#[test]
fn page_events_with_impossible_ranges_are_refused_by_row() {
    assert_refused(
        "UPDATE page_events SET page = -1 WHERE seq = 1",
        page_events,
        "page_events row seq 1 (page -1, npages 4): page -1 is negative",
    );
    assert_refused(
        "UPDATE page_events SET npages = 0 WHERE seq = 0",
        page_events,
        "page_events row seq 0 (page 7, npages 0): npages 0 is not at least 1",
    );
    assert_refused(
        "UPDATE page_events SET npages = -3 WHERE seq = 0",
        page_events,
        "page_events row seq 0 (page 7, npages -3): npages -3 is not at least 1",
    );
    // 2^62 + 2^62 does not overflow an i64 sum of two positives past
    // u64, but reaches far beyond 2^41 pages.
    assert_refused(
        "UPDATE page_events SET page = 4611686018427387904, npages = 4611686018427387904 WHERE seq = 1",
        page_events,
        "page_events row seq 1 (page 4611686018427387904, npages 4611686018427387904): \
         pages 4611686018427387904..4611686018427387904+4611686018427387904 reach past page \
         2199023255552, the largest file a profile describes",
    );
    // The last page a profile can describe is 2^41 - 1: page 2^41 - 1,
    // one page, is accepted; one more is not.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.db");
    let run = write_profile(&path);
    Connection::open(&path)
        .unwrap()
        .execute_batch("UPDATE page_events SET page = 2199023255551, npages = 1 WHERE seq = 1")
        .unwrap();
    let events = Profile::open(&path).unwrap().page_events(run).unwrap();
    assert_eq!((events[1].page, events[1].npages), (2199023255551, 1));
    assert_refused(
        "UPDATE page_events SET page = 2199023255551, npages = 2 WHERE seq = 1",
        page_events,
        "page_events row seq 1 (page 2199023255551, npages 2): pages 2199023255551..2199023255551+2 \
         reach past page 2199023255552, the largest file a profile describes",
    );
}

#[test]
fn page_events_with_unknown_kinds_pids_or_files_are_refused_by_row() {
    assert_refused(
        // The schema refers kinds to event_kinds; a hand edit can turn that off.
        "PRAGMA foreign_keys = OFF; UPDATE page_events SET kind = 9 WHERE seq = 0",
        page_events,
        "page_events row seq 0 (page 7, npages 1): unknown page event kind 9",
    );
    assert_refused(
        "UPDATE page_events SET pid = -2 WHERE seq = 1",
        page_events,
        "page_events row seq 1 (page 3, npages 4): pid -2 is not a task id (0 to 4194304)",
    );
    assert_refused(
        "UPDATE page_events SET pid = 4194305 WHERE seq = 1",
        page_events,
        "page_events row seq 1 (page 3, npages 4): pid 4194305 is not a task id (0 to 4194304)",
    );
    assert_refused(
        "UPDATE page_events SET file_id = 77 WHERE seq = 0",
        page_events,
        "page_events row seq 0 (page 7, npages 1): file_id 77 is not a file of this run",
    );
}

#[test]
fn runs_with_impossible_settings_are_refused_by_row() {
    let run = |p: &Profile, run: RunId| p.run(Some(run)).map(drop);
    let runs = |p: &Profile, _: RunId| p.runs().map(drop);
    assert_refused(
        "UPDATE runs SET page_size = 0",
        run,
        "runs row id 1: page_size 0 is not a power of two from 512 to 2097152",
    );
    assert_refused(
        "UPDATE runs SET page_size = 4095",
        runs,
        "runs row id 1: page_size 4095 is not a power of two from 512 to 2097152",
    );
    assert_refused(
        "UPDATE runs SET read_ahead_kb = -128",
        run,
        "runs row id 1: read_ahead_kb -128 is negative",
    );
    assert_refused(
        "UPDATE runs SET uid = -1",
        run,
        "runs row id 1: uid -1 is not between 0 and 4294967295",
    );
    assert_refused(
        "UPDATE runs SET root_pid = 0 - 5",
        run,
        "runs row id 1: root_pid -5 is not a task id (0 to 4194304)",
    );
    assert_refused(
        "UPDATE runs SET cache_mode = 'tepid'",
        run,
        "runs row id 1: unknown cache mode \"tepid\"",
    );
    assert_refused(
        "UPDATE runs SET complete = 2",
        run,
        "runs row id 1: complete 2 is neither 0 nor 1",
    );
}

#[test]
fn files_processes_and_other_rows_are_refused_by_row() {
    assert_refused(
        "UPDATE files SET size = -4096",
        |p, run| p.files(run).map(drop),
        "files row id 1: size -4096 is negative",
    );
    assert_refused(
        "UPDATE processes SET ppid = 99999999",
        |p, run| p.processes(run).map(drop),
        "processes row pid 100: ppid 99999999 is not a task id (0 to 4194304)",
    );
    assert_refused(
        "UPDATE readahead SET size = -1",
        |p, run| p.readahead(run).map(drop),
        "readahead row rowid 1: size -1 is negative",
    );
    assert_refused(
        "UPDATE readahead SET kind = 'sideways'",
        |p, run| p.readahead(run).map(drop),
        "readahead row rowid 1: unknown readahead kind \"sideways\"",
    );
    assert_refused(
        "UPDATE readahead SET page = 2199023255550, size = 3",
        |p, run| p.readahead(run).map(drop),
        "readahead row rowid 1: pages 2199023255550..2199023255550+3 reach past page \
         2199023255552, the largest file a profile describes",
    );
    assert_refused(
        "UPDATE inode_loads SET file_id = 5",
        |p, run| p.inode_loads(run).map(drop),
        "inode_loads row rowid 1: file_id 5 is not a file of this run",
    );
    assert_refused(
        "UPDATE inode_loads SET pid = -7",
        |p, run| p.inode_loads(run).map(drop),
        "inode_loads row rowid 1: pid -7 is not a task id (0 to 4194304)",
    );
    assert_refused(
        "UPDATE path_lookups SET path = 'etc/hosts'",
        |p, run| p.path_lookups(run).map(drop),
        "path_lookups row rowid 1: path \"etc/hosts\" is not absolute",
    );
    assert_refused(
        "UPDATE path_lookups SET missed = 'unreadable'",
        |p, run| p.path_lookups(run).map(drop),
        "path_lookups row rowid 1: exactly one of path and missed must be set",
    );
    assert_refused(
        "UPDATE path_lookups SET path = NULL, missed = 'lost'",
        |p, run| p.path_lookups(run).map(drop),
        "path_lookups row rowid 1: unknown missed \"lost\"",
    );
    assert_refused(
        "UPDATE lost_events SET events = -3",
        |p, run| p.lost_events(run).map(drop),
        "lost_events row cpu 0: events -3 is negative",
    );
    assert_refused(
        "UPDATE functions SET offset = -16",
        |p, run| p.functions(run).map(drop),
        "functions row pid 100 first_seq 1: offset -16 is negative",
    );
    assert_refused(
        "UPDATE functions SET first_seq = 0",
        |p, run| p.functions(run).map(drop),
        "functions row pid 100 first_seq 0: first_seq 0 is not at least 1",
    );
    assert_refused(
        "UPDATE functions SET file_id = 5",
        |p, run| p.functions(run).map(drop),
        "functions row pid 100 first_seq 1: file_id 5 is not a file of this run",
    );
}

#[test]
fn loader_spans_with_impossible_values_are_refused_by_row() {
    let spans = |p: &Profile, run: RunId| p.loader_spans(run).map(drop);
    assert_refused(
        "UPDATE loader_spans SET phase = 'unload' WHERE seq = 1",
        spans,
        "loader_spans row seq 1: unknown loader phase \"unload\"",
    );
    assert_refused(
        "UPDATE loader_spans SET pid = -1 WHERE seq = 0",
        spans,
        "loader_spans row seq 0: pid -1 is not a task id (0 to 4194304)",
    );
    assert_refused(
        "UPDATE loader_spans SET t_end_ns = 4 WHERE seq = 1",
        spans,
        "loader_spans row seq 1: t_end_ns 4 is before t_begin_ns 5",
    );
    assert_refused(
        "UPDATE loader_spans SET base = -4096 WHERE seq = 1",
        spans,
        "loader_spans row seq 1: base -4096 is negative",
    );
    assert_refused(
        "UPDATE loader_spans SET target = -9223372036854775808 WHERE seq = 0",
        spans,
        "loader_spans row seq 0: target -9223372036854775808 is negative",
    );
    assert_refused(
        "UPDATE loader_spans SET lookups = -1 WHERE seq = 1",
        spans,
        "loader_spans row seq 1: lookups -1 is negative",
    );
    assert_refused(
        "UPDATE loader_spans SET depth = -1 WHERE seq = 0",
        spans,
        "loader_spans row seq 0: depth -1 is not between 0 and 4294967295",
    );
    assert_refused(
        "UPDATE loader_spans SET file_id = 77 WHERE seq = 1",
        spans,
        "loader_spans row seq 1: file_id 77 is not a file of this run",
    );
    // INTEGER affinity keeps what cannot be an integer as REAL or TEXT.
    assert_refused(
        "UPDATE loader_spans SET result = 2.5 WHERE seq = 0",
        spans,
        "loader_spans row seq 0: result 2.5 is not a 64-bit integer",
    );
    assert_refused(
        "UPDATE loader_spans SET result = 1e19 WHERE seq = 0",
        spans,
        "loader_spans row seq 0: result 10000000000000000000 is not a 64-bit integer",
    );
    assert_refused(
        "UPDATE loader_spans SET result = 'EBADF' WHERE seq = 0",
        spans,
        "loader_spans row seq 0: result \"EBADF\" is not a 64-bit integer",
    );
}

#[test]
fn loader_spans_that_pass_their_checks_read_back_as_stored() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.db");
    let run = write_profile(&path);
    // The edges the checks allow: an instant, an unfinished span, the
    // idle task, the largest address and depth, a NULL file.
    Connection::open(&path)
        .unwrap()
        .execute_batch(
            "UPDATE loader_spans SET t_end_ns = t_begin_ns, pid = 0, file_id = NULL,
                 target = 9223372036854775807, depth = 4294967295 WHERE seq = 0;
             UPDATE loader_spans SET t_end_ns = NULL, result = '-2' WHERE seq = 1;",
        )
        .unwrap();
    let spans = Profile::open(&path).unwrap().loader_spans(run).unwrap();
    assert_eq!(spans.len(), 2);
    assert_eq!(
        (spans[0].t_end_ns, spans[0].pid, spans[0].file_id),
        (Some(3), 0, None)
    );
    assert_eq!(
        (spans[0].target, spans[0].depth),
        (Some(i64::MAX as u64), u32::MAX)
    );
    assert_eq!(spans[1].t_end_ns, None);
    assert_eq!(
        spans[1].result,
        Some(-2),
        "text that is an integer is stored as one"
    );
    assert_eq!(spans[1].file_id, Some(1));
}
