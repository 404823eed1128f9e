//! Block runs in a profile: they round trip with their files (whatever
//! bytes their paths hold) and blocks, stay apart from `runs`, are written
//! whole or not at all, and a damaged row is refused by name when read.

use coldstart_profile::*;
use rusqlite::Connection;
use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};

fn block_run() -> BlockRun {
    BlockRun {
        id: 0,
        argv: vec!["/usr/bin/app".into(), "--flag with space".into()],
        cwd: "/tmp".into(),
        started_at_unix_ns: 1_700_000_000_000_000_000,
        duration_ns: 25_000_000,
        end_reason: BlockEndReason::Exited,
        exit_code: Some(0),
        exit_signal: None,
        uid: 1000,
        gid: 1000,
        root_pid: 100,
        traps: 4_321,
        tool_version: "0.1.0".into(),
    }
}

/// `/opt/caf\xe9/libx.so`: Latin-1, not UTF-8.
fn latin1_path() -> PathBuf {
    PathBuf::from(OsString::from_vec(b"/opt/caf\xe9/libx.so".to_vec()))
}

/// The program (traced), a library whose path is not UTF-8 (traced) and
/// libc, which has no block map.
fn files() -> Vec<BlockFile> {
    let file = |file, path: PathBuf, has_map, armed| BlockFile {
        file,
        path,
        dev: 65024,
        ino: 40 + u64::from(file),
        size: 1 << 20,
        mtime_ns: 1_690_000_000_123_456_789,
        build_id: Some(format!("ab{file}")),
        has_map,
        problem: None,
        armed,
    };
    let mut libc = file(2, "/lib/x86_64-linux-gnu/libc.so.6".into(), false, 0);
    libc.problem = Some("no .llvm_bb_addr_map section".into());
    libc.build_id = None;
    vec![
        file(0, "/usr/bin/app".into(), true, 1_500),
        file(1, latin1_path(), true, 300),
        libc,
    ]
}

fn block(pid: i32, first_seq: u64, file: u32, symbol: Option<&str>) -> BlockEvent {
    BlockEvent {
        pid,
        first_seq,
        file,
        function: 0x1000 * u64::from(file + 1),
        symbol: symbol.map(str::to_string),
        bb_id: first_seq as u32,
        address: 0x1000 * u64::from(file + 1) + 16 * first_seq,
        offset: 16 * first_seq,
        size: 12,
        first_t_ns: 1_000 * first_seq as i64,
    }
}

/// Two processes' first runs, written out of (pid, first_seq) order.
fn blocks() -> Vec<BlockEvent> {
    vec![
        block(101, 1, 0, Some("main")),
        block(100, 2, 1, Some("_ZN3lib4initEv")),
        block(100, 1, 0, Some("main")),
        block(101, 2, 1, None),
        block(100, 3, 0, None),
    ]
}

/// Rows of `table` of any block run, counted with raw SQL.
fn rows(path: &Path, table: &str) -> i64 {
    Connection::open(path)
        .unwrap()
        .query_row(&format!("SELECT count(*) FROM {table}"), [], |r| r.get(0))
        .unwrap()
}

#[test]
fn a_block_run_round_trips_with_its_files_and_blocks() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.db");
    let mut p = Profile::create_or_open(&path).unwrap();
    let id = p
        .write_block_run(&block_run(), &files(), &blocks())
        .unwrap();
    drop(p);

    let p = Profile::open(&path).unwrap();
    let expected = BlockRun { id, ..block_run() };
    assert_eq!(p.block_run(Some(id)).unwrap(), expected);
    assert_eq!(p.block_runs().unwrap(), [expected]);
    assert_eq!(p.block_files(id).unwrap(), files());
    assert_eq!(p.block_files(id).unwrap()[1].path, latin1_path());
    let mut in_order = blocks();
    in_order.sort_by_key(|b| (b.pid, b.first_seq));
    assert_eq!(
        p.blocks(id).unwrap(),
        in_order,
        "by process, then first run"
    );
    assert!(p.runs().unwrap().is_empty(), "a block run is not a run");
    assert!(p.run(None).is_err());

    // UTF-8 paths are text, like every path of a profile; the other one is
    // its bytes.
    let kinds: Vec<String> = Connection::open(&path)
        .unwrap()
        .prepare("SELECT typeof(path) FROM block_files ORDER BY file")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap();
    assert_eq!(kinds, ["text", "blob", "text"]);
}

#[test]
fn the_newest_block_run_is_chosen_and_a_profile_without_one_says_how_to_record_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.db");
    let mut p = Profile::create_or_open(&path).unwrap();
    // A page-trace run is no block run.
    let run = p.begin_run(&handmade::run_start(4096, 128)).unwrap();
    p.end_run(run, &handmade::exited(10, 100)).unwrap();

    let err = p.block_run(None).unwrap_err().to_string();
    assert_eq!(
        err,
        format!(
            "{}: no block run in this profile (it has none; record one with \
             `coldstart trace --blocks`)",
            path.display()
        )
    );
    let err = p.block_run(Some(run)).unwrap_err().to_string();
    assert!(
        err.contains(&format!("no block run {run} in this profile")),
        "{err}"
    );

    let first = p.write_block_run(&block_run(), &[], &[]).unwrap();
    let mut later = block_run();
    later.end_reason = BlockEndReason::Timeout;
    later.exit_code = None;
    later.exit_signal = Some(9);
    let second = p.write_block_run(&later, &files(), &blocks()).unwrap();
    assert!(second > first);
    assert_eq!(
        p.block_run(None).unwrap(),
        BlockRun {
            id: second,
            ..later
        }
    );
    assert_eq!(p.block_run(Some(first)).unwrap().id, first);
    let err = p.block_run(Some(second + 1)).unwrap_err().to_string();
    assert_eq!(
        err,
        format!(
            "{}: no block run {} in this profile (block runs: {first}, {second})",
            path.display(),
            second + 1
        )
    );
    assert_eq!(p.runs().unwrap().len(), 1, "the page-trace run alone");
}

/// Writes `files` and `blocks` as a block run of a profile that has one
/// already; returns the error, after checking nothing else was written.
fn refused(files: &[BlockFile], blocks: &[BlockEvent]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.db");
    let mut p = Profile::create_or_open(&path).unwrap();
    let kept = p
        .write_block_run(&block_run(), &self::files(), &self::blocks())
        .unwrap();
    let err = p
        .write_block_run(&block_run(), files, blocks)
        .expect_err("refused")
        .to_string();
    assert!(err.starts_with(&path.display().to_string()), "{err}");
    assert!(err.contains("block run not written"), "{err}");
    assert_eq!(
        p.block_runs()
            .unwrap()
            .iter()
            .map(|r| r.id)
            .collect::<Vec<_>>(),
        [kept]
    );
    drop(p);
    assert_eq!(rows(&path, "block_files"), self::files().len() as i64);
    assert_eq!(rows(&path, "blocks"), self::blocks().len() as i64);
    err
}

#[test]
fn a_block_naming_a_file_not_in_the_run_is_refused_and_nothing_written() {
    let mut bad = blocks();
    bad.push(block(100, 4, 3, None));
    let err = refused(&files(), &bad);
    assert!(
        err.ends_with("blocks[5] (pid 100 first_seq 4): file 3 is not a file of this block run"),
        "{err}"
    );
}

#[test]
fn a_process_with_two_blocks_of_one_seq_is_refused_and_nothing_written() {
    let mut bad = blocks();
    bad.push(block(101, 2, 0, Some("again")));
    let err = refused(&files(), &bad);
    assert!(
        err.ends_with("process 101 has two blocks with first_seq 2"),
        "{err}"
    );
}

#[test]
fn seq_zero_values_past_63_bits_and_misnumbered_files_are_refused() {
    let mut bad = blocks();
    bad[0].first_seq = 0;
    let err = refused(&files(), &bad);
    assert!(err.ends_with("first_seq 0 is not at least 1"), "{err}");

    let mut bad = blocks();
    bad[4].address = u64::MAX;
    let err = refused(&files(), &bad);
    assert!(
        err.ends_with("address 0xffffffffffffffff does not fit 63 bits"),
        "{err}"
    );

    let mut bad = blocks();
    bad[1].pid = -3;
    let err = refused(&files(), &bad);
    assert!(err.contains("pid -3 is not a task id"), "{err}");

    let mut misnumbered = files();
    misnumbered[2].file = 1;
    let err = refused(&misnumbered, &blocks());
    assert!(
        err.contains("file 1 is not 2: a run's files are numbered 0, 1, ..."),
        "{err}"
    );

    let mut big = files();
    big[0].armed = 1 << 63;
    let err = refused(&big, &blocks());
    assert!(
        err.contains("armed 0x8000000000000000 does not fit 63 bits"),
        "{err}"
    );
}

/// A profile with one block run of [`files`] and [`blocks`], damaged by
/// `corrupt`; returns the error `read` gives, after the profile's path and
/// the block run, which it must start with.
fn error_after(corrupt: &str, read: impl Fn(&Profile, BlockRunId) -> Result<()>) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.db");
    let id = {
        let mut p = Profile::create_or_open(&path).unwrap();
        let id = p
            .write_block_run(&block_run(), &files(), &blocks())
            .unwrap();
        read(&p, id).expect("the undamaged profile reads");
        id
    };
    Connection::open(&path)
        .unwrap()
        .execute_batch(corrupt)
        .unwrap();
    let p = Profile::open(&path).unwrap();
    let err = read(&p, id).expect_err(corrupt).to_string();
    let prefix = format!("{}: block run {id}: ", path.display());
    err.strip_prefix(&prefix)
        .unwrap_or_else(|| panic!("{err} does not start with {prefix}"))
        .to_string()
}

/// A reader of one block run whose result the test is about.
type Read = fn(&Profile, BlockRunId) -> Result<()>;

fn read_blocks(p: &Profile, run: BlockRunId) -> Result<()> {
    p.blocks(run).map(drop)
}

fn read_files(p: &Profile, run: BlockRunId) -> Result<()> {
    p.block_files(run).map(drop)
}

fn read_run(p: &Profile, run: BlockRunId) -> Result<()> {
    p.block_run(Some(run)).map(drop)
}

#[test]
fn damaged_block_rows_are_refused_by_table_and_row() {
    let cases: [(&str, Read, &str); 9] = [
        (
            "UPDATE blocks SET offset = -16 WHERE pid = 100 AND first_seq = 2",
            read_blocks,
            "blocks row pid 100 first_seq 2: offset -16 is negative",
        ),
        (
            "UPDATE blocks SET file = 7 WHERE pid = 101 AND first_seq = 1",
            read_blocks,
            "blocks row pid 101 first_seq 1: file 7 is not a file of this block run",
        ),
        (
            "UPDATE blocks SET first_seq = 0 WHERE pid = 101 AND first_seq = 1",
            read_blocks,
            "blocks row pid 101 first_seq 0: first_seq 0 is not at least 1",
        ),
        (
            "UPDATE blocks SET bb_id = -1 WHERE pid = 100 AND first_seq = 1",
            read_blocks,
            "blocks row pid 100 first_seq 1: bb_id -1 is not between 0 and 4294967295",
        ),
        (
            "UPDATE block_files SET armed = -2 WHERE file = 1",
            read_files,
            "block_files row file 1: armed -2 is negative",
        ),
        (
            "DELETE FROM block_files WHERE file = 1",
            read_files,
            "block_files row file 2: file 2 is not 1: a run's files are numbered 0, 1, ...",
        ),
        (
            "UPDATE block_files SET path = '' WHERE file = 0",
            read_files,
            "block_files row file 0: path is empty",
        ),
        (
            "UPDATE block_runs SET end_reason = 'crashed'",
            read_run,
            "block_runs row id 1: unknown end reason \"crashed\"",
        ),
        (
            "UPDATE block_runs SET traps = -1",
            |p, _| p.block_runs().map(drop),
            "block_runs row id 1: traps -1 is negative",
        ),
    ];
    for (corrupt, read, expected) in cases {
        assert_eq!(error_after(corrupt, read), expected, "{corrupt}");
    }
}

#[test]
fn deleting_a_block_run_deletes_its_files_and_blocks() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.db");
    let mut p = Profile::create_or_open(&path).unwrap();
    let gone = p
        .write_block_run(&block_run(), &files(), &blocks())
        .unwrap();
    let kept = p
        .write_block_run(&block_run(), &files(), &blocks())
        .unwrap();
    p.delete_block_run(gone).unwrap();

    assert_eq!(p.block_runs().unwrap()[0].id, kept);
    assert_eq!(p.block_runs().unwrap().len(), 1);
    assert!(p.block_run(Some(gone)).is_err());
    assert!(p.block_files(gone).unwrap().is_empty());
    assert!(p.blocks(gone).unwrap().is_empty());
    assert_eq!(p.blocks(kept).unwrap().len(), blocks().len());
    drop(p);
    assert_eq!(rows(&path, "block_files"), files().len() as i64);
    assert_eq!(rows(&path, "blocks"), blocks().len() as i64);
}

#[test]
fn a_big_start_s_blocks_write_in_one_go() {
    // A big start runs 10^5 to 10^6 blocks; a fifth of a million keeps
    // the test quick in a debug build.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.db");
    let mut p = Profile::create_or_open(&path).unwrap();
    let many: Vec<BlockEvent> = (1..=200_000)
        .map(|seq| block(100 + (seq % 4) as i32, seq, (seq % 3) as u32, Some("f")))
        .collect();
    let id = p.write_block_run(&block_run(), &files(), &many).unwrap();
    let read = p.blocks(id).unwrap();
    assert_eq!(read.len(), many.len());
    assert_eq!(
        read.last().map(|b| (b.pid, b.first_seq)),
        Some((103, 199_999))
    );
}
