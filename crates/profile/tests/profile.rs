//! The profile database: round trips, crash safety and refusing files it
//! cannot read with a message that names the file and the problem.

use coldstart_profile::*;
use rusqlite::Connection;
use std::path::Path;

fn start() -> RunStart {
    RunStart {
        argv: vec!["/bin/app".into(), "--flag with space".into()],
        cwd: "/tmp".into(),
        cache_mode: CacheMode::Cold,
        started_at_unix_ns: 1_700_000_000_000_000_000,
        kernel: "6.18.0".into(),
        page_size: 4096,
        read_ahead_kb: Some(8192),
        fault_around_bytes: Some(65536),
        uid: 1000,
        gid: 1000,
        tool_version: "0.1.0".into(),
    }
}

fn batch() -> Batch {
    Batch {
        files: vec![
            NewFile {
                dev: 65024,
                ino: 42,
                path: Some("/usr/lib/libx.so".into()),
                size: Some(1 << 20),
                mtime_ns: Some(123),
                build_id: Some("abcd".into()),
                opened_by_tree: true,
            },
            NewFile {
                dev: 65024,
                ino: 43,
                path: None,
                size: None,
                mtime_ns: None,
                build_id: None,
                opened_by_tree: false,
            },
        ],
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
        page_events: vec![
            PageEvent {
                t_ns: -5,
                pid: 100,
                file_id: Batch::batch_file_id(1),
                page: 7,
                npages: 1,
                kind: PageEventKind::Map,
            },
            PageEvent {
                t_ns: 10,
                pid: 100,
                file_id: Batch::batch_file_id(0),
                page: 3,
                npages: 4,
                kind: PageEventKind::Read,
            },
        ],
        readahead: vec![Readahead {
            t_ns: 9,
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
        marks: vec![Mark {
            t_ns: 4_000,
            name: "ready".into(),
        }],
        lost: vec![
            LostEvents { cpu: 0, events: 3 },
            LostEvents { cpu: 1, events: 4 },
        ],
    }
}

#[test]
fn a_run_round_trips() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.db");
    let mut profile = Profile::create_or_open(&path).unwrap();
    let run = profile.begin_run(&start()).unwrap();
    let ids = profile.write(run, &batch()).unwrap();
    profile
        .end_run(
            run,
            &RunEnd {
                ended_ns: 5_000,
                end_reason: EndReason::ReadyRegex,
                exit_code: None,
                exit_signal: Some(15),
                root_pid: Some(100),
            },
        )
        .unwrap();
    drop(profile);

    let profile = Profile::open(&path).unwrap();
    let runs = profile.runs().unwrap();
    assert_eq!(runs.len(), 1);
    let r = profile.run(None).unwrap();
    assert_eq!(r.id, run);
    assert_eq!(r.start.argv, start().argv);
    assert_eq!(r.start.cache_mode, CacheMode::Cold);
    assert_eq!(r.end_reason, Some(EndReason::ReadyRegex));
    assert_eq!(r.exit_signal, Some(15));
    assert_eq!(r.lost_events, 7, "sum of the per-CPU counts");
    assert!(r.complete);

    let files = profile.files(run).unwrap();
    assert_eq!(files.iter().map(|f| f.id).collect::<Vec<_>>(), ids);
    assert_eq!(files[0].path.as_deref(), Some("/usr/lib/libx.so"));
    assert_eq!(files[1].path, None);

    let events = profile.page_events(run).unwrap();
    assert_eq!(events.len(), 2);
    assert_eq!(events[0].t_ns, -5, "time order, negative times kept");
    assert_eq!(events[0].file_id, ids[1], "batch-relative ids resolved");
    assert_eq!(events[1].file_id, ids[0]);
    assert_eq!((events[1].page, events[1].npages), (3, 4));

    let ra = profile.readahead(run).unwrap();
    assert_eq!(ra[0].file_id, ids[0]);
    assert_eq!(ra[0].prev_pos, Some(-1));
    assert_eq!(profile.marks(run).unwrap()[0].name, "ready");
    assert_eq!(profile.processes(run).unwrap(), batch().processes);
    assert_eq!(profile.lost_events(run).unwrap().len(), 2);
}

#[test]
fn an_unfinished_run_is_listed_but_not_chosen_by_default() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.db");
    let mut profile = Profile::create_or_open(&path).unwrap();
    let first = profile.begin_run(&start()).unwrap();
    profile.end_run(first, &ended()).unwrap();
    let second = profile.begin_run(&start()).unwrap();
    profile.write(second, &batch()).unwrap();
    // The recorder "dies" here: no end_run.
    drop(profile);

    let profile = Profile::open(&path).unwrap();
    let runs = profile.runs().unwrap();
    assert_eq!(runs.len(), 2);
    assert!(!runs[1].complete);
    assert_eq!(runs[1].end_reason, None);
    assert_eq!(
        profile.page_events(second).unwrap().len(),
        2,
        "committed batches survive"
    );
    assert_eq!(profile.run(None).unwrap().id, first);
    let err = profile.run(Some(99)).unwrap_err().to_string();
    assert!(
        err.contains("no run 99") && err.contains("runs: 1, 2"),
        "{err}"
    );
}

fn open_error(path: &Path) -> String {
    match Profile::open(path) {
        Ok(_) => panic!("{} opened", path.display()),
        Err(e) => e.to_string(),
    }
}

#[test]
fn foreign_damaged_and_newer_files_are_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();

    let missing = dir.path().join("missing.db");
    assert!(open_error(&missing).contains("no such profile"));
    assert!(!missing.exists(), "opening for reading creates nothing");

    let text = dir.path().join("text.db");
    std::fs::write(
        &text,
        "this is not a database at all, just some text\n".repeat(200),
    )
    .unwrap();
    let err = open_error(&text);
    assert!(
        err.starts_with(&text.display().to_string()) && err.contains("not a coldstart profile"),
        "{err}"
    );

    let empty = dir.path().join("empty.db");
    std::fs::write(&empty, "").unwrap();
    assert!(open_error(&empty).contains("empty"));

    let foreign = dir.path().join("foreign.db");
    Connection::open(&foreign)
        .unwrap()
        .execute_batch("CREATE TABLE t (x); PRAGMA application_id = 7;")
        .unwrap();
    assert!(open_error(&foreign).contains("another program"));
    assert!(
        Profile::create_or_open(&foreign).is_err(),
        "never written into"
    );

    let newer = dir.path().join("newer.db");
    drop(Profile::create_or_open(&newer).unwrap());
    Connection::open(&newer)
        .unwrap()
        .execute_batch(&format!("PRAGMA user_version = {};", SCHEMA_VERSION + 1))
        .unwrap();
    let err = open_error(&newer);
    assert!(
        err.contains("newer coldstart") && err.contains("upgrade"),
        "{err}"
    );

    // A profile cut short: SQLite notices the missing pages when queried.
    let cut = dir.path().join("cut.db");
    {
        let mut p = Profile::create_or_open(&cut).unwrap();
        let run = p.begin_run(&start()).unwrap();
        let mut big = batch();
        big.page_events = (0..20_000)
            .map(|i| PageEvent {
                t_ns: i,
                pid: 1,
                file_id: Batch::batch_file_id(0),
                page: i as u64,
                npages: 1,
                kind: PageEventKind::Fault,
            })
            .collect();
        p.write(run, &big).unwrap();
        // Fold the write-ahead log into the file so truncating it matters.
        p.end_run(run, &ended()).unwrap();
    }
    Connection::open(&cut)
        .unwrap()
        .execute_batch("PRAGMA wal_checkpoint(TRUNCATE); PRAGMA journal_mode = DELETE;")
        .unwrap();
    let len = std::fs::metadata(&cut).unwrap().len();
    let file = std::fs::OpenOptions::new().write(true).open(&cut).unwrap();
    file.set_len(len / 2).unwrap();
    let result = Profile::open(&cut).and_then(|p| {
        let run = p.run(None)?;
        p.page_events(run.id)
    });
    let err = result
        .expect_err("a truncated profile must not read as whole")
        .to_string();
    assert!(err.starts_with(&cut.display().to_string()), "{err}");
}

fn ended() -> RunEnd {
    RunEnd {
        ended_ns: 1,
        end_reason: EndReason::Exited,
        exit_code: Some(0),
        exit_signal: None,
        root_pid: None,
    }
}

/// A new profile holding one complete run of [`batch`]; returns the run.
fn one_complete_run(path: &Path) -> RunId {
    let mut p = Profile::create_or_open(path).unwrap();
    let run = p.begin_run(&start()).unwrap();
    p.write(run, &batch()).unwrap();
    p.end_run(run, &ended()).unwrap();
    run
}

fn user_version(path: &Path) -> i32 {
    Connection::open(path)
        .unwrap()
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap()
}

#[test]
fn a_schema_1_profile_is_upgraded_when_opened() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.db");
    let run = one_complete_run(&path);
    // Put page_events back in schema 1's layout (no seq, rowid table with
    // an index), rows stored newest first, as coldstart 0.1 could leave them,
    // and without schema 3's functions table.
    Connection::open(&path)
        .unwrap()
        .execute_batch(
            "BEGIN;
             CREATE TABLE v1 (
                 run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
                 t_ns INTEGER NOT NULL, pid INTEGER NOT NULL,
                 file_id INTEGER NOT NULL REFERENCES files(id) ON DELETE CASCADE,
                 page INTEGER NOT NULL, npages INTEGER NOT NULL,
                 kind INTEGER NOT NULL REFERENCES event_kinds(id));
             INSERT INTO v1 SELECT run_id, t_ns, pid, file_id, page, npages, kind
                 FROM page_events ORDER BY seq DESC;
             DROP TABLE page_events;
             ALTER TABLE v1 RENAME TO page_events;
             CREATE INDEX page_events_by_run ON page_events (run_id, file_id);
             DROP TABLE functions;
             PRAGMA user_version = 1;
             COMMIT;",
        )
        .unwrap();

    let profile = Profile::open(&path).unwrap();
    let events = profile.page_events(run).unwrap();
    assert_eq!(
        events.iter().map(|e| e.t_ns).collect::<Vec<_>>(),
        vec![-5, 10],
        "every event kept, in time order"
    );
    drop(profile);
    assert_eq!(user_version(&path), SCHEMA_VERSION);
    // And it takes new runs like any other profile.
    let mut p = Profile::create_or_open(&path).unwrap();
    let second = p.begin_run(&start()).unwrap();
    p.write(second, &batch()).unwrap();
    assert_eq!(p.page_events(second).unwrap().len(), 2);
}

#[test]
fn writes_check_references_and_batches_append_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.db");
    let mut p = Profile::create_or_open(&path).unwrap();
    let run = p.begin_run(&start()).unwrap();
    let ids = p.write(run, &batch()).unwrap();

    // An event naming a file of no batch and no run: refused, nothing kept.
    let mut bad = batch();
    bad.files.clear();
    bad.readahead.clear();
    bad.page_events[0].file_id = 999_999;
    let err = p.write(run, &bad).unwrap_err().to_string();
    assert!(err.contains("file id 999999"), "{err}");
    assert_eq!(p.page_events(run).unwrap().len(), 2);

    // A run that does not exist.
    let err = p.write(run + 1, &batch()).unwrap_err().to_string();
    assert!(err.contains(&format!("no run {}", run + 1)), "{err}");

    // A second batch naming the first batch's files by id: appended, and
    // read back in time order across batches.
    let mut more = batch();
    more.files.clear();
    more.readahead.clear();
    more.processes.clear();
    more.marks.clear();
    more.lost.clear();
    more.page_events[0].file_id = ids[0];
    more.page_events[0].t_ns = 0;
    more.page_events[1].file_id = ids[1];
    more.page_events[1].t_ns = 20;
    p.write(run, &more).unwrap();
    let times: Vec<i64> = p.page_events(run).unwrap().iter().map(|e| e.t_ns).collect();
    assert_eq!(times, vec![-5, 0, 10, 20]);

    // The events still belong to their run: deleting it deletes them.
    drop(p);
    let conn = Connection::open(&path).unwrap();
    conn.execute_batch("PRAGMA foreign_keys = ON; DELETE FROM runs;")
        .unwrap();
    let left: i64 = conn
        .query_row("SELECT count(*) FROM page_events", [], |r| r.get(0))
        .unwrap();
    assert_eq!(left, 0);
}

fn function(pid: i32, first_seq: u64, file_id: FileId, symbol: Option<&str>) -> FunctionEvent {
    FunctionEvent {
        pid,
        first_seq,
        file_id,
        offset: 0x1000 + first_seq * 16,
        size: symbol.map(|_| 16),
        symbol: symbol.map(String::from),
        first_t_ns: first_seq as i64 * 100 - 50,
        calls: first_seq * 3,
    }
}

#[test]
fn functions_round_trip_and_share_the_page_trace_files() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.db");
    let mut p = Profile::create_or_open(&path).unwrap();
    let run = p.begin_run(&start()).unwrap();
    let page_ids = p.write(run, &batch()).unwrap();

    // libx.so is in the page trace already (same dev and inode, without a
    // path this time); the instrumented helper is not.
    let helper = NewFile {
        dev: 65024,
        ino: 77,
        path: Some("/opt/app/helper".into()),
        size: Some(4096),
        mtime_ns: None,
        build_id: None,
        opened_by_tree: false,
    };
    let mut libx = batch().files[0].clone();
    libx.path = None;
    // The unresolved file of the page trace learns its path.
    let mut unnamed = batch().files[1].clone();
    unnamed.path = Some("/usr/lib/liby.so".into());
    let functions = vec![
        function(200, 2, Batch::batch_file_id(1), None),
        function(200, 1, Batch::batch_file_id(0), Some("_Z4mainv")),
        function(100, 1, page_ids[0], Some("init")),
        function(100, 2, Batch::batch_file_id(2), Some("g")),
    ];
    let ids = p
        .write_functions(run, &[libx, helper, unnamed], &functions)
        .unwrap();
    assert_eq!(ids[0], page_ids[0], "the page trace's row is reused");
    assert_eq!(ids[2], page_ids[1]);
    assert!(!page_ids.contains(&ids[1]), "a new row for a new file");
    drop(p);

    let p = Profile::open(&path).unwrap();
    let files = p.files(run).unwrap();
    assert_eq!(files.len(), 3);
    assert_eq!(files[0].path.as_deref(), Some("/usr/lib/libx.so"), "kept");
    assert_eq!(
        files[1].path.as_deref(),
        Some("/usr/lib/liby.so"),
        "filled in"
    );
    assert_eq!(files[2].path.as_deref(), Some("/opt/app/helper"));
    let read = p.functions(run).unwrap();
    let mut expected = functions.clone();
    expected[0].file_id = ids[1];
    expected[1].file_id = ids[0];
    expected[3].file_id = ids[2];
    expected.sort_by_key(|f| (f.pid, f.first_seq));
    assert_eq!(read, expected, "by process, then first-call order");
}

#[test]
fn function_writes_check_files_and_first_call_numbers() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.db");
    let mut p = Profile::create_or_open(&path).unwrap();
    let run = p.begin_run(&start()).unwrap();
    let other = p.begin_run(&start()).unwrap();
    let other_ids = p.write(other, &batch()).unwrap();

    let err = p
        .write_functions(run, &[], &[function(1, 1, other_ids[0], None)])
        .unwrap_err()
        .to_string();
    assert!(err.contains("not a file of this run"), "{err}");
    let err = p
        .write_functions(run, &[], &[function(1, 1, i64::MIN, None)])
        .unwrap_err()
        .to_string();
    assert!(err.contains("not a file of this run"), "{err}");

    let files = batch().files;
    let twice = [
        function(7, 3, Batch::batch_file_id(0), None),
        function(7, 3, Batch::batch_file_id(1), None),
    ];
    let err = p
        .write_functions(run, &files, &twice)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("process 7") && err.contains("first call number 3"),
        "{err}"
    );
    assert!(p.functions(run).unwrap().is_empty(), "nothing half-written");
    assert!(p.files(run).unwrap().is_empty());

    let err = p
        .write_functions(other + 1, &files, &[])
        .unwrap_err()
        .to_string();
    assert!(err.contains(&format!("no run {}", other + 1)), "{err}");
}

#[test]
fn a_big_program_s_functions_write_in_one_go() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.db");
    let mut p = Profile::create_or_open(&path).unwrap();
    let run = p.begin_run(&start()).unwrap();
    let functions: Vec<FunctionEvent> = (1..=200_000)
        .map(|seq| function(9, seq, Batch::batch_file_id(0), Some("f")))
        .collect();
    p.write_functions(run, &batch().files[..1], &functions)
        .unwrap();
    let read = p.functions(run).unwrap();
    assert_eq!(read.len(), functions.len());
    assert_eq!(read.last().map(|f| f.calls), Some(600_000));
}

#[test]
fn a_schema_2_profile_gains_the_functions_table() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v2.db");
    let run = one_complete_run(&path);
    // What coldstart wrote before function traces: no functions table.
    Connection::open(&path)
        .unwrap()
        .execute_batch("BEGIN; DROP TABLE functions; PRAGMA user_version = 2; COMMIT;")
        .unwrap();

    let p = Profile::open(&path).unwrap();
    assert!(p.functions(run).unwrap().is_empty());
    assert_eq!(p.page_events(run).unwrap().len(), 2, "page events kept");
    drop(p);
    assert_eq!(user_version(&path), SCHEMA_VERSION);

    let mut p = Profile::create_or_open(&path).unwrap();
    let ids: Vec<FileId> = p.files(run).unwrap().iter().map(|f| f.id).collect();
    p.write_functions(run, &[], &[function(100, 1, ids[0], Some("main"))])
        .unwrap();
    assert_eq!(p.functions(run).unwrap()[0].symbol.as_deref(), Some("main"));
    // Deleting the run deletes its functions too.
    drop(p);
    let conn = Connection::open(&path).unwrap();
    conn.execute_batch("PRAGMA foreign_keys = ON; DELETE FROM runs;")
        .unwrap();
    let left: i64 = conn
        .query_row("SELECT count(*) FROM functions", [], |r| r.get(0))
        .unwrap();
    assert_eq!(left, 0);
}
