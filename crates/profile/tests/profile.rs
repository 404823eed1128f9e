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
                kind: None,
                opened_as: None,
                note: None,
            },
            NewFile {
                dev: 65024,
                ino: 43,
                path: None,
                size: None,
                mtime_ns: None,
                build_id: None,
                opened_by_tree: false,
                kind: None,
                opened_as: None,
                note: None,
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
        loader_spans: Vec::new(),
        inode_loads: vec![
            InodeLoad {
                t_ns: 30,
                pid: 100,
                file_id: Batch::batch_file_id(1),
            },
            InodeLoad {
                t_ns: 2,
                pid: 100,
                file_id: Batch::batch_file_id(0),
            },
        ],
        path_lookups: vec![
            PathLookup {
                t_ns: 40,
                pid: 100,
                call: "openat".into(),
                path: Ok("/usr/lib/libx.so".into()),
            },
            PathLookup {
                t_ns: 3,
                pid: 100,
                call: "newfstatat".into(),
                path: Err(LookupMissed::Unreadable),
            },
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
    let lookups = profile.path_lookups(run).unwrap();
    assert_eq!(lookups.len(), 2);
    assert_eq!(lookups[0].path, Err(LookupMissed::Unreadable), "time order");
    assert_eq!(lookups[1], batch().path_lookups[0]);
    assert_eq!(
        profile.inode_loads(run).unwrap(),
        [
            InodeLoad {
                t_ns: 2,
                pid: 100,
                file_id: ids[0],
            },
            InodeLoad {
                t_ns: 30,
                pid: 100,
                file_id: ids[1],
            },
        ],
        "in time order, batch-relative ids resolved"
    );
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

/// Takes a current profile's files back to schema 7's columns: no kind,
/// no path opened as, no note.
const BEFORE_FILE_ORIGIN: &str = "ALTER TABLE files DROP COLUMN note; \
    ALTER TABLE files DROP COLUMN opened_as; ALTER TABLE files DROP COLUMN kind;";

/// Takes a current profile back to schema 8's tables: no block runs.
const BEFORE_BLOCK_RUNS: &str = "DROP TABLE blocks; DROP TABLE block_files; DROP TABLE block_runs;";

/// Takes a current profile back to schema 3's layout: no loader spans, no
/// `runs.loader` nor `runs.loader_hit_ns` (the last columns, so the others
/// keep their places).
const BEFORE_LOADER_SPANS: &str = "DROP TABLE path_lookups; DROP TABLE inode_loads; DROP TABLE loader_spans; \
    ALTER TABLE runs DROP COLUMN loader_hit_ns; ALTER TABLE runs DROP COLUMN loader;";

/// Takes a current profile back to schema 4's layout: no probe hits per
/// loader span, no calibrated cost per hit.
const BEFORE_PROBE_COST: &str = "DROP TABLE path_lookups; DROP TABLE inode_loads; \
    ALTER TABLE loader_spans DROP COLUMN probe_hits; \
    ALTER TABLE runs DROP COLUMN loader_hit_ns;";

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
    // and without schema 3's functions table or schema 4's loader spans.
    Connection::open(&path)
        .unwrap()
        .execute_batch(&format!(
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
             {BEFORE_LOADER_SPANS} {BEFORE_FILE_ORIGIN} {BEFORE_BLOCK_RUNS}
             PRAGMA user_version = 1;
             COMMIT;"
        ))
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
    more.inode_loads.clear();
    more.path_lookups.clear();
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
        kind: None,
        opened_as: None,
        note: None,
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
    // What coldstart wrote before function traces: no functions table
    // (nor schema 4's loader spans).
    Connection::open(&path)
        .unwrap()
        .execute_batch(&format!(
            "BEGIN; DROP TABLE functions; {BEFORE_LOADER_SPANS} {BEFORE_FILE_ORIGIN} \
             {BEFORE_BLOCK_RUNS} PRAGMA user_version = 2; COMMIT;"
        ))
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

/// A span of `phase` by task 100 with nothing but its times and depth.
fn span(phase: LoaderPhase, t_begin_ns: i64, t_end_ns: Option<i64>, depth: u32) -> LoaderSpan {
    LoaderSpan {
        pid: 100,
        phase,
        object: None,
        file_id: None,
        t_begin_ns,
        t_end_ns,
        base: None,
        target: None,
        detail: None,
        result: None,
        lookups: None,
        depth,
        probe_hits: t_end_ns.map(|_| 2),
    }
}

/// A start of one library, written out of time order: loading libx.so
/// (search, a failed and a good open, map), relocating it, its two
/// initializers (the second never returned), then the jump to the entry.
fn loader_spans() -> Vec<LoaderSpan> {
    let libx = |mut s: LoaderSpan| {
        s.object = Some("/usr/lib/libx.so".into());
        s.file_id = Some(Batch::batch_file_id(0));
        s.base = Some(0x7f12_3456_0000);
        s
    };
    let mut load = span(LoaderPhase::Load, 100, Some(900), 1);
    load.object = Some("libx.so".into());
    load.detail = Some("libx.so".into());
    // Same t_begin_ns as the load it belongs to: written after it, kept after it.
    let search = span(LoaderPhase::Search, 100, Some(400), 2);
    let mut failed_open = span(LoaderPhase::Open, 150, Some(160), 3);
    failed_open.detail = Some("/opt/app/lib/libx.so".into());
    failed_open.result = Some(-2);
    let mut open = span(LoaderPhase::Open, 300, Some(350), 3);
    open.detail = Some("/usr/lib/libx.so".into());
    open.result = Some(3);
    let mut relocate = libx(span(LoaderPhase::Relocate, 1_000, Some(1_800), 1));
    relocate.lookups = Some(42);
    let mut first_init = libx(span(LoaderPhase::Initializer, 2_100, Some(2_200), 2));
    first_init.target = Some(0x7f12_3456_1130);
    first_init.detail = Some("DT_INIT".into());
    let mut hung_init = libx(span(LoaderPhase::Initializer, 2_300, None, 2));
    hung_init.target = Some(0x7f12_3456_1200);
    hung_init.detail = Some("DT_INIT_ARRAY[0]".into());
    let mut main_program = span(LoaderPhase::Start, 0, Some(3_000), 0);
    main_program.object = Some(String::new());
    let mut entry = span(LoaderPhase::Entry, 3_000, Some(3_000), 0);
    entry.object = Some(String::new());
    entry.target = Some(0x5555_5555_5040);
    vec![
        relocate,
        libx(span(LoaderPhase::Map, 400, Some(900), 2)),
        load,
        search,
        failed_open,
        open,
        hung_init,
        libx(span(LoaderPhase::Init, 2_000, None, 1)),
        first_init,
        main_program,
        entry,
    ]
}

/// `loader_spans.seq` and `t_begin_ns` of a run as stored.
fn stored_seqs(path: &Path, run: RunId) -> Vec<(i64, i64)> {
    let conn = Connection::open(path).unwrap();
    let mut select = conn
        .prepare("SELECT seq, t_begin_ns FROM loader_spans WHERE run_id = ?1 ORDER BY seq")
        .unwrap();
    select
        .query_map([run], |row| Ok((row.get(0)?, row.get(1)?)))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap()
}

#[test]
fn loader_spans_round_trip_in_time_order() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.db");
    let mut p = Profile::create_or_open(&path).unwrap();
    let run = p.begin_run(&start()).unwrap();
    let untraced = p.begin_run(&start()).unwrap();
    let mut with_spans = batch();
    with_spans.loader_spans = loader_spans();
    let ids = p.write(run, &with_spans).unwrap();
    let note = "ld.so probes from /usr/lib/debug/.build-id/7e/0123.debug";
    p.set_run_loader(run, note).unwrap();
    let err = p
        .set_run_loader(untraced + 1, note)
        .unwrap_err()
        .to_string();
    assert!(err.contains(&format!("no run {}", untraced + 1)), "{err}");
    drop(p);

    let p = Profile::open(&path).unwrap();
    assert_eq!(p.run(Some(run)).unwrap().loader.as_deref(), Some(note));
    assert_eq!(p.run(Some(untraced)).unwrap().loader, None);
    assert!(p.loader_spans(untraced).unwrap().is_empty());

    // The oracle: the written spans, stably sorted by hand on t_begin_ns,
    // with the batch's file named by its row id.
    let mut expected = loader_spans();
    for s in &mut expected {
        if s.file_id.is_some() {
            s.file_id = Some(ids[0]);
        }
    }
    let by_begin = |s: &LoaderSpan| s.t_begin_ns;
    let mut order: Vec<usize> = (0..expected.len()).collect();
    order.sort_by(|&a, &b| {
        by_begin(&expected[a])
            .cmp(&by_begin(&expected[b]))
            .then(a.cmp(&b))
    });
    let expected: Vec<LoaderSpan> = order.iter().map(|&i| expected[i].clone()).collect();
    let read = p.loader_spans(run).unwrap();
    assert_eq!(read, expected);
    assert_eq!(
        read.iter()
            .map(|s| (s.phase.as_str(), s.t_begin_ns))
            .take(4)
            .collect::<Vec<_>>(),
        [("start", 0), ("load", 100), ("search", 100), ("open", 150)],
        "ties keep the order they were written in"
    );
    assert_eq!(read[7].t_end_ns, None, "an init that never returned");
    assert_eq!(
        stored_seqs(&path, run),
        read.iter()
            .enumerate()
            .map(|(seq, s)| (seq as i64, s.t_begin_ns))
            .collect::<Vec<_>>(),
        "seq is 0, 1, ... in time order"
    );
}

#[test]
fn a_second_batch_of_loader_spans_is_numbered_after_the_first() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.db");
    let mut p = Profile::create_or_open(&path).unwrap();
    let run = p.begin_run(&start()).unwrap();
    let other = p.begin_run(&start()).unwrap();
    let first = Batch {
        loader_spans: vec![
            span(LoaderPhase::Relocate, 500, Some(600), 0),
            span(LoaderPhase::Load, 100, Some(200), 0),
        ],
        ..Default::default()
    };
    p.write(run, &first).unwrap();
    // Another run's spans do not move this run's numbering.
    p.write(other, &first).unwrap();
    let mut dlopen = span(LoaderPhase::Dlopen, 300, Some(450), 0);
    dlopen.detail = Some("libplugin.so".into());
    dlopen.result = Some(1);
    let second = Batch {
        loader_spans: vec![span(LoaderPhase::Entry, 900, Some(900), 0), dlopen],
        ..Default::default()
    };
    p.write(run, &second).unwrap();
    assert_eq!(
        stored_seqs(&path, run),
        vec![(0, 100), (1, 500), (2, 300), (3, 900)],
        "appended after seq 1, in time order within the batch"
    );
    assert_eq!(stored_seqs(&path, other), vec![(0, 100), (1, 500)]);
    let begins: Vec<i64> = p
        .loader_spans(run)
        .unwrap()
        .iter()
        .map(|s| s.t_begin_ns)
        .collect();
    assert_eq!(begins, vec![100, 300, 500, 900], "read back in time order");
}

#[test]
fn loader_span_writes_refuse_what_could_not_be_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.db");
    let mut p = Profile::create_or_open(&path).unwrap();
    let run = p.begin_run(&start()).unwrap();
    let other = p.begin_run(&start()).unwrap();
    let other_ids = p.write(other, &batch()).unwrap();

    let refused = |p: &mut Profile, bad: LoaderSpan| {
        let mut b = batch();
        b.loader_spans = vec![span(LoaderPhase::Start, 0, Some(10), 0), bad];
        p.write(run, &b).unwrap_err().to_string()
    };
    let err = refused(&mut p, span(LoaderPhase::Map, 50, Some(40), 1));
    assert!(
        err.contains("run 1: loader span map at t_begin_ns 50 of task 100: t_end_ns 40 is before t_begin_ns 50"),
        "{err}"
    );
    let mut high = span(LoaderPhase::Entry, 50, Some(50), 0);
    high.target = Some(1 << 63);
    let err = refused(&mut p, high);
    assert!(
        err.contains("target 0x8000000000000000 does not fit 63 bits"),
        "{err}"
    );
    let mut stranger = span(LoaderPhase::Map, 50, Some(60), 0);
    stranger.pid = -7;
    let err = refused(&mut p, stranger);
    assert!(err.contains("pid -7 is not a task id"), "{err}");
    let mut elsewhere = span(LoaderPhase::Map, 50, Some(60), 0);
    elsewhere.file_id = Some(other_ids[0]);
    let err = refused(&mut p, elsewhere);
    assert!(err.contains("not a file of this run"), "{err}");
    let mut unknown = span(LoaderPhase::Map, 50, Some(60), 0);
    unknown.file_id = Some(Batch::batch_file_id(2));
    let err = refused(&mut p, unknown);
    assert!(err.contains("file id -3"), "{err}");

    // Each refusal left nothing of its batch behind.
    assert!(p.loader_spans(run).unwrap().is_empty());
    assert!(p.page_events(run).unwrap().is_empty());
    assert!(p.files(run).unwrap().is_empty());
    // The largest value that fits is kept exactly.
    let mut top = span(LoaderPhase::Entry, 50, Some(50), 0);
    top.target = Some(i64::MAX as u64);
    top.lookups = Some(i64::MAX as u64);
    top.result = Some(i64::MIN);
    top.depth = u32::MAX;
    p.write(
        run,
        &Batch {
            loader_spans: vec![top.clone()],
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(p.loader_spans(run).unwrap(), vec![top]);
}

#[test]
fn a_schema_3_profile_gains_loader_spans_and_the_runs_loader_column() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v3.db");
    let run = one_complete_run(&path);
    let functions = [function(100, 1, Batch::batch_file_id(0), Some("main"))];
    {
        let mut p = Profile::create_or_open(&path).unwrap();
        p.write_functions(run, &batch().files[..1], &functions)
            .unwrap();
    }
    Connection::open(&path)
        .unwrap()
        .execute_batch(&format!(
            "BEGIN; {BEFORE_LOADER_SPANS} {BEFORE_FILE_ORIGIN} {BEFORE_BLOCK_RUNS} \
             PRAGMA user_version = 3; COMMIT;"
        ))
        .unwrap();

    let p = Profile::open(&path).unwrap();
    let r = p.run(Some(run)).unwrap();
    assert!(r.complete, "the run's row is kept");
    assert_eq!(r.loader, None, "a v3 run did not trace the loader");
    assert_eq!(r.lost_events, 7);
    assert_eq!(p.page_events(run).unwrap().len(), 2, "page events kept");
    assert_eq!(p.functions(run).unwrap().len(), 1, "functions kept");
    assert!(p.loader_spans(run).unwrap().is_empty());
    drop(p);
    assert_eq!(user_version(&path), SCHEMA_VERSION);

    // The upgraded tables are the ones a new profile gets.
    let fresh = dir.path().join("fresh.db");
    drop(Profile::create_or_open(&fresh).unwrap());
    for pragma in [
        "table_xinfo(runs)",
        "table_xinfo(loader_spans)",
        "foreign_key_list(loader_spans)",
        "index_list(loader_spans)",
    ] {
        assert_eq!(shape(&path, pragma), shape(&fresh, pragma), "{pragma}");
    }
    assert_eq!(shape(&path, "table_xinfo(loader_spans)").len(), 15);

    let mut p = Profile::create_or_open(&path).unwrap();
    let ids: Vec<FileId> = p.files(run).unwrap().iter().map(|f| f.id).collect();
    let mut relocate = span(LoaderPhase::Relocate, 10, Some(20), 0);
    relocate.file_id = Some(ids[0]);
    p.write(
        run,
        &Batch {
            loader_spans: vec![relocate.clone()],
            ..Default::default()
        },
    )
    .unwrap();
    p.set_run_loader(run, "no debug file for ld.so").unwrap();
    assert_eq!(p.loader_spans(run).unwrap(), vec![relocate]);
    assert_eq!(
        p.run(Some(run)).unwrap().loader.as_deref(),
        Some("no debug file for ld.so")
    );
    // Deleting the run deletes its spans too.
    drop(p);
    let conn = Connection::open(&path).unwrap();
    conn.execute_batch("PRAGMA foreign_keys = ON; DELETE FROM runs;")
        .unwrap();
    let left: i64 = conn
        .query_row("SELECT count(*) FROM loader_spans", [], |r| r.get(0))
        .unwrap();
    assert_eq!(left, 0);
}

/// The rows of `PRAGMA pragma` as text, to compare two profiles' tables.
fn shape(path: &Path, pragma: &str) -> Vec<String> {
    let conn = Connection::open(path).unwrap();
    let mut select = conn.prepare(&format!("PRAGMA {pragma}")).unwrap();
    let columns = select.column_count();
    select
        .query_map([], |row| {
            (0..columns)
                .map(|i| {
                    row.get::<_, rusqlite::types::Value>(i)
                        .map(|v| format!("{v:?}"))
                })
                .collect::<rusqlite::Result<Vec<_>>>()
                .map(|values| values.join(" "))
        })
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap()
}

#[test]
fn a_schema_4_profile_gains_probe_hits_and_the_cost_of_a_hit() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v4.db");
    let run = one_complete_run(&path);
    let mut relocate = span(LoaderPhase::Relocate, 10, Some(20), 0);
    relocate.probe_hits = None;
    {
        let mut p = Profile::create_or_open(&path).unwrap();
        p.write(
            run,
            &Batch {
                loader_spans: vec![relocate.clone()],
                ..Default::default()
            },
        )
        .unwrap();
    }
    Connection::open(&path)
        .unwrap()
        .execute_batch(&format!(
            "BEGIN; {BEFORE_PROBE_COST} {BEFORE_FILE_ORIGIN} {BEFORE_BLOCK_RUNS} \
             PRAGMA user_version = 4; COMMIT;"
        ))
        .unwrap();

    let mut p = Profile::create_or_open(&path).unwrap();
    assert_eq!(user_version(&path), SCHEMA_VERSION);
    assert_eq!(
        p.loader_spans(run).unwrap(),
        vec![relocate],
        "a v4 span kept, its hits unknown"
    );
    assert_eq!(p.run_loader_hit_ns(run).unwrap(), None);
    p.set_run_loader_hit_ns(run, 1_850).unwrap();
    assert_eq!(p.run_loader_hit_ns(run).unwrap(), Some(1_850));

    let fresh = dir.path().join("fresh.db");
    drop(Profile::create_or_open(&fresh).unwrap());
    for pragma in ["table_xinfo(runs)", "table_xinfo(loader_spans)"] {
        assert_eq!(shape(&path, pragma), shape(&fresh, pragma), "{pragma}");
    }
}

#[test]
fn a_schema_5_profile_gains_the_inode_loads_table() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v5.db");
    let run = one_complete_run(&path);
    Connection::open(&path)
        .unwrap()
        .execute_batch(&format!(
            "BEGIN; DROP TABLE path_lookups; DROP TABLE inode_loads; {BEFORE_FILE_ORIGIN} \
             {BEFORE_BLOCK_RUNS} PRAGMA user_version = 5; COMMIT;"
        ))
        .unwrap();

    let mut p = Profile::create_or_open(&path).unwrap();
    assert_eq!(user_version(&path), SCHEMA_VERSION);
    assert_eq!(p.inode_loads(run).unwrap(), [], "a v5 run has none");
    assert_eq!(p.page_events(run).unwrap().len(), 2, "its events kept");
    let next = p.begin_run(&start()).unwrap();
    let ids = p.write(next, &batch()).unwrap();
    assert_eq!(p.inode_loads(next).unwrap()[0].file_id, ids[0]);

    let fresh = dir.path().join("fresh.db");
    drop(Profile::create_or_open(&fresh).unwrap());
    let pragma = "table_xinfo(inode_loads)";
    assert_eq!(shape(&path, pragma), shape(&fresh, pragma));
}

#[test]
fn a_schema_6_profile_gains_the_path_lookups_table() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v6.db");
    let run = one_complete_run(&path);
    Connection::open(&path)
        .unwrap()
        .execute_batch(&format!(
            "BEGIN; DROP TABLE path_lookups; {BEFORE_FILE_ORIGIN} {BEFORE_BLOCK_RUNS} \
             PRAGMA user_version = 6; COMMIT;"
        ))
        .unwrap();

    let mut p = Profile::create_or_open(&path).unwrap();
    assert_eq!(user_version(&path), SCHEMA_VERSION);
    assert_eq!(p.path_lookups(run).unwrap(), [], "a v6 run has none");
    assert_eq!(p.inode_loads(run).unwrap().len(), 2, "its inode loads kept");
    let next = p.begin_run(&start()).unwrap();
    p.write(next, &batch()).unwrap();
    assert_eq!(p.path_lookups(next).unwrap().len(), 2);

    let fresh = dir.path().join("fresh.db");
    drop(Profile::create_or_open(&fresh).unwrap());
    let pragma = "table_xinfo(path_lookups)";
    assert_eq!(shape(&path, pragma), shape(&fresh, pragma));
}

#[test]
fn a_schema_7_profile_gains_the_file_origin_columns_left_unknown() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v7.db");
    let run = one_complete_run(&path);
    Connection::open(&path)
        .unwrap()
        .execute_batch(&format!(
            "BEGIN; {BEFORE_FILE_ORIGIN} {BEFORE_BLOCK_RUNS} PRAGMA user_version = 7; COMMIT;"
        ))
        .unwrap();

    let mut p = Profile::create_or_open(&path).unwrap();
    assert_eq!(user_version(&path), SCHEMA_VERSION);
    let files = p.files(run).unwrap();
    assert!(!files.is_empty());
    for file in &files {
        assert_eq!(
            (file.kind, &file.opened_as, &file.note),
            (None, &None, &None)
        );
    }
    // A new run records them.
    let next = p.begin_run(&start()).unwrap();
    let mut written = batch();
    written.files[0].kind = Some(FileKind::Metadata);
    written.files[0].note = Some("ext4 metadata on /dev/vda (mounted at /)".into());
    written.files[0].opened_as = Some("/merged/x".into());
    p.write(next, &written).unwrap();
    let read = &p.files(next).unwrap()[0];
    assert_eq!(read.kind, Some(FileKind::Metadata));
    assert!(read.in_kernel());
    assert_eq!(
        read.note.as_deref(),
        Some("ext4 metadata on /dev/vda (mounted at /)")
    );
    assert_eq!(read.opened_as.as_deref(), Some("/merged/x"));

    let fresh = dir.path().join("fresh.db");
    drop(Profile::create_or_open(&fresh).unwrap());
    let pragma = "table_xinfo(files)";
    assert_eq!(shape(&path, pragma), shape(&fresh, pragma));
}

/// Everything a profile says about its runs, as text, to compare a
/// profile before and after an upgrade.
fn everything_about_runs(p: &Profile) -> String {
    let mut all = format!("{:?}", p.runs().unwrap());
    for run in p.runs().unwrap() {
        let id = run.id;
        all += &format!(
            "{:?}{:?}{:?}{:?}{:?}{:?}{:?}{:?}{:?}{:?}",
            p.processes(id).unwrap(),
            p.files(id).unwrap(),
            p.page_events(id).unwrap(),
            p.readahead(id).unwrap(),
            p.marks(id).unwrap(),
            p.lost_events(id).unwrap(),
            p.functions(id).unwrap(),
            p.loader_spans(id).unwrap(),
            p.inode_loads(id).unwrap(),
            p.path_lookups(id).unwrap(),
        );
    }
    all
}

#[test]
fn a_schema_8_profile_gains_the_block_run_tables_empty() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v8.db");
    let run = one_complete_run(&path);
    let before = {
        let mut p = Profile::create_or_open(&path).unwrap();
        let ids: Vec<FileId> = p.files(run).unwrap().iter().map(|f| f.id).collect();
        p.write_functions(run, &[], &[function(100, 1, ids[0], Some("main"))])
            .unwrap();
        everything_about_runs(&p)
    };
    Connection::open(&path)
        .unwrap()
        .execute_batch(&format!(
            "BEGIN; {BEFORE_BLOCK_RUNS} PRAGMA user_version = 8; COMMIT;"
        ))
        .unwrap();

    // Reading upgrades it too.
    let p = Profile::open(&path).unwrap();
    assert_eq!(user_version(&path), SCHEMA_VERSION);
    assert_eq!(
        everything_about_runs(&p),
        before,
        "every row of its runs kept"
    );
    assert_eq!(p.block_runs().unwrap(), []);
    let err = p.block_run(None).unwrap_err().to_string();
    assert!(err.contains("coldstart trace --blocks"), "{err}");
    drop(p);

    // And it takes block runs like a new profile.
    let mut p = Profile::create_or_open(&path).unwrap();
    let block_run = BlockRun {
        id: 0,
        argv: vec!["/bin/app".into()],
        cwd: "/".into(),
        started_at_unix_ns: 1,
        duration_ns: 2,
        end_reason: BlockEndReason::Exited,
        exit_code: Some(0),
        exit_signal: None,
        uid: 0,
        gid: 0,
        root_pid: 100,
        traps: 0,
        tool_version: "test".into(),
    };
    let id = p.write_block_run(&block_run, &[], &[]).unwrap();
    assert_eq!(p.block_run(None).unwrap().id, id);
    assert_eq!(everything_about_runs(&p), before, "a block run is no run");

    let fresh = dir.path().join("fresh.db");
    drop(Profile::create_or_open(&fresh).unwrap());
    for table in ["block_runs", "block_files", "blocks"] {
        for pragma in [
            format!("table_xinfo({table})"),
            format!("index_list({table})"),
        ] {
            assert_eq!(shape(&path, &pragma), shape(&fresh, &pragma), "{pragma}");
        }
    }
    let foreign_keys = "foreign_key_list(blocks)";
    assert_eq!(shape(&path, foreign_keys), shape(&fresh, foreign_keys));
}

#[test]
fn a_negative_cost_per_probe_hit_is_refused_on_read() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.db");
    let run = one_complete_run(&path);
    Connection::open(&path)
        .unwrap()
        .execute("UPDATE runs SET loader_hit_ns = -5", [])
        .unwrap();
    let p = Profile::open(&path).unwrap();
    let err = p.run_loader_hit_ns(run).unwrap_err().to_string();
    assert!(err.contains("loader_hit_ns"), "{err}");
}

#[test]
fn a_batch_relative_id_names_its_position_and_a_profile_id_none() {
    for index in [0usize, 1, 7, 1 << 40] {
        assert_eq!(Batch::batch_index(Batch::batch_file_id(index)), Some(index));
    }
    assert_eq!(Batch::batch_file_id(0), -1);
    assert_eq!(Batch::batch_index(0), None);
    assert_eq!(Batch::batch_index(42), None);
    assert_eq!(Batch::batch_index(i64::MIN), Some(i64::MAX as usize));
}
