//! Block-level startup traces in a profile: the `block_runs`,
//! `block_files` and `blocks` tables, apart from `runs` (a block trace has
//! no page events, and no analysis of runs may see it). One check per
//! table serves both directions, so the writer never stores a row the
//! reader would refuse.

use crate::{
    BlockEndReason, BlockEvent, BlockFile, BlockRun, BlockRunId, Error, Profile, Result, check,
    damaged,
};
use rusqlite::types::Value;
use rusqlite::{OptionalExtension, params};
use std::collections::HashSet;
use std::ffi::OsString;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::PathBuf;

/// What to tell a user whose profile has no block run to read.
const RECORD_ONE: &str = "record one with `coldstart trace --blocks`";

/// A `block_runs` row as stored, before [`checked_run`] checks it.
struct RunRow {
    id: i64,
    argv: String,
    cwd: String,
    started_at_unix_ns: i64,
    duration_ns: i64,
    end_reason: String,
    exit_code: Option<i64>,
    exit_signal: Option<i64>,
    uid: i64,
    gid: i64,
    root_pid: i64,
    traps: i64,
    tool_version: String,
}

const RUN_COLUMNS: &str = "SELECT id, argv, cwd, started_at_unix_ns, duration_ns, end_reason,
    exit_code, exit_signal, uid, gid, root_pid, traps, tool_version FROM block_runs";

fn run_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<RunRow> {
    Ok(RunRow {
        id: row.get(0)?,
        argv: row.get(1)?,
        cwd: row.get(2)?,
        started_at_unix_ns: row.get(3)?,
        duration_ns: row.get(4)?,
        end_reason: row.get(5)?,
        exit_code: row.get(6)?,
        exit_signal: row.get(7)?,
        uid: row.get(8)?,
        gid: row.get(9)?,
        root_pid: row.get(10)?,
        traps: row.get(11)?,
        tool_version: row.get(12)?,
    })
}

/// The block run a row describes, or what is wrong with it.
fn checked_run(row: &RunRow) -> std::result::Result<BlockRun, String> {
    let argv: Vec<String> = serde_json::from_str(&row.argv)
        .map_err(|e| format!("argv is not a JSON list of strings: {e}"))?;
    let end_reason = BlockEndReason::parse(&row.end_reason)
        .ok_or_else(|| format!("unknown end reason {:?}", row.end_reason))?;
    Ok(BlockRun {
        id: row.id,
        argv,
        cwd: row.cwd.clone(),
        started_at_unix_ns: row.started_at_unix_ns,
        duration_ns: check::non_negative("duration_ns", row.duration_ns)?,
        end_reason,
        exit_code: check::i32_opt("exit_code", row.exit_code)?,
        exit_signal: check::i32_opt("exit_signal", row.exit_signal)?,
        uid: check::u32_value("uid", row.uid)?,
        gid: check::u32_value("gid", row.gid)?,
        root_pid: check::pid("root_pid", row.root_pid)?,
        traps: check::non_negative("traps", row.traps)?,
        tool_version: row.tool_version.clone(),
    })
}

/// A `block_files` row as stored, before [`checked_file`] checks it.
struct FileRow {
    file: i64,
    /// Read untyped: text, or a BLOB of the bytes of a path that is not
    /// UTF-8.
    path: Value,
    dev: i64,
    ino: i64,
    size: i64,
    mtime_ns: i64,
    build_id: Option<String>,
    has_map: i64,
    problem: Option<String>,
    armed: i64,
}

fn file_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<FileRow> {
    Ok(FileRow {
        file: row.get(0)?,
        path: row.get(1)?,
        dev: row.get(2)?,
        ino: row.get(3)?,
        size: row.get(4)?,
        mtime_ns: row.get(5)?,
        build_id: row.get(6)?,
        has_map: row.get(7)?,
        problem: row.get(8)?,
        armed: row.get(9)?,
    })
}

/// The file a row describes, when it is the run's `position`th (files are
/// numbered 0, 1, ... so that a block's `file` indexes them), or what is
/// wrong with it.
fn checked_file(row: &FileRow, position: usize) -> std::result::Result<BlockFile, String> {
    if usize::try_from(row.file) != Ok(position) {
        return Err(format!(
            "file {} is not {position}: a run's files are numbered 0, 1, ...",
            row.file
        ));
    }
    let path = match &row.path {
        Value::Text(text) => PathBuf::from(text),
        Value::Blob(bytes) => PathBuf::from(OsString::from_vec(bytes.clone())),
        Value::Null => return Err("path is NULL".into()),
        Value::Integer(_) | Value::Real(_) => return Err("path is a number".into()),
    };
    if path.as_os_str().is_empty() {
        return Err("path is empty".into());
    }
    Ok(BlockFile {
        file: position as u32,
        path,
        // Stored as i64 bit patterns of the u64 st_dev/st_ino, as in `files`.
        dev: row.dev as u64,
        ino: row.ino as u64,
        size: check::non_negative("size", row.size)?,
        mtime_ns: row.mtime_ns,
        build_id: row.build_id.clone(),
        has_map: check::flag("has_map", row.has_map)?,
        problem: row.problem.clone(),
        armed: check::non_negative("armed", row.armed)?,
    })
}

/// A path as `block_files` stores it: text when it is UTF-8, like every
/// path of a profile; else its bytes as a BLOB, so it still opens the file.
fn stored_path(path: &std::path::Path) -> Value {
    match path.to_str() {
        Some(text) => Value::Text(text.to_owned()),
        None => Value::Blob(path.as_os_str().as_bytes().to_vec()),
    }
}

/// The numeric columns of a `blocks` row as stored, before
/// [`checked_block`] checks them.
struct BlockRow {
    pid: i64,
    first_seq: i64,
    file: i64,
    function: i64,
    bb_id: i64,
    address: i64,
    offset: i64,
    size: i64,
    first_t_ns: i64,
}

/// The block a row describes (its symbol left out), or what is wrong with
/// it. `files` are the file numbers of the run.
fn checked_block(row: &BlockRow, files: &HashSet<u32>) -> std::result::Result<BlockEvent, String> {
    if row.first_seq < 1 {
        return Err(format!("first_seq {} is not at least 1", row.first_seq));
    }
    let file = u32::try_from(row.file)
        .ok()
        .filter(|file| files.contains(file))
        .ok_or_else(|| format!("file {} is not a file of this block run", row.file))?;
    Ok(BlockEvent {
        pid: check::pid("pid", row.pid)?,
        first_seq: row.first_seq as u64,
        file,
        function: check::non_negative("function", row.function)?,
        symbol: None,
        bb_id: check::u32_value("bb_id", row.bb_id)?,
        address: check::non_negative("address", row.address)?,
        offset: check::non_negative("offset", row.offset)?,
        size: check::non_negative("size", row.size)?,
        first_t_ns: row.first_t_ns,
    })
}

/// An event as the row the writer stores, refused when the reader would
/// refuse it.
fn block_row(event: &BlockEvent, files: &HashSet<u32>) -> std::result::Result<BlockRow, String> {
    let row = BlockRow {
        pid: event.pid.into(),
        first_seq: check::stored_u64("first_seq", event.first_seq)?,
        file: event.file.into(),
        function: check::stored_u64("function", event.function)?,
        bb_id: event.bb_id.into(),
        address: check::stored_u64("address", event.address)?,
        offset: check::stored_u64("offset", event.offset)?,
        size: check::stored_u64("size", event.size)?,
        first_t_ns: event.first_t_ns,
    };
    checked_block(&row, files)?;
    Ok(row)
}

impl Profile {
    /// Writes a block run with its files and blocks, in one transaction,
    /// and returns its id (`run.id` is ignored). `files` must be numbered
    /// 0, 1, ... in order; each block names one of them, and a process's
    /// blocks have distinct `first_seq`s from 1. Anything the readers would
    /// refuse (a value past 2^63 - 1, a pid that is no task id) is refused
    /// here, and then nothing is written.
    pub fn write_block_run(
        &mut self,
        run: &BlockRun,
        files: &[BlockFile],
        blocks: &[BlockEvent],
    ) -> Result<BlockRunId> {
        // The writer checks every reference itself: SQLite's per-row
        // lookup of the block run would double the cost of a million rows.
        self.without_foreign_keys(|p| p.write_block_run_unchecked(run, files, blocks))
    }

    fn write_block_run_unchecked(
        &mut self,
        run: &BlockRun,
        files: &[BlockFile],
        blocks: &[BlockEvent],
    ) -> Result<BlockRunId> {
        let path = self.path.clone();
        let fail = |source| damaged(&path, source);
        let refuse = |what: String, detail: String| Error::Invalid {
            path: path.clone(),
            detail: format!("block run not written: {what}: {detail}"),
        };
        let row = RunRow {
            id: 0,
            argv: serde_json::to_string(&run.argv)
                .map_err(|e| refuse("argv".into(), e.to_string()))?,
            cwd: run.cwd.clone(),
            started_at_unix_ns: run.started_at_unix_ns,
            duration_ns: check::stored_u64("duration_ns", run.duration_ns)
                .map_err(|e| refuse("the run".into(), e))?,
            end_reason: run.end_reason.as_str().into(),
            exit_code: run.exit_code.map(i64::from),
            exit_signal: run.exit_signal.map(i64::from),
            uid: run.uid.into(),
            gid: run.gid.into(),
            root_pid: run.root_pid.into(),
            traps: check::stored_u64("traps", run.traps)
                .map_err(|e| refuse("the run".into(), e))?,
            tool_version: run.tool_version.clone(),
        };
        checked_run(&row).map_err(|e| refuse("the run".into(), e))?;
        let tx = self.conn.transaction().map_err(fail)?;
        tx.execute(
            "INSERT INTO block_runs (argv, cwd, started_at_unix_ns, duration_ns, end_reason,
                exit_code, exit_signal, uid, gid, root_pid, traps, tool_version)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
            params![
                row.argv,
                row.cwd,
                row.started_at_unix_ns,
                row.duration_ns,
                row.end_reason,
                row.exit_code,
                row.exit_signal,
                row.uid,
                row.gid,
                row.root_pid,
                row.traps,
                row.tool_version,
            ],
        )
        .map_err(fail)?;
        let id = tx.last_insert_rowid();
        {
            let mut insert = tx
                .prepare_cached(
                    "INSERT INTO block_files (block_run_id, file, path, dev, ino, size, mtime_ns,
                        build_id, has_map, problem, armed)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
                )
                .map_err(fail)?;
            for (position, file) in files.iter().enumerate() {
                let what = || format!("files[{position}] ({})", file.path.display());
                let row = FileRow {
                    file: file.file.into(),
                    path: stored_path(&file.path),
                    dev: file.dev as i64,
                    ino: file.ino as i64,
                    size: check::stored_u64("size", file.size).map_err(|e| refuse(what(), e))?,
                    mtime_ns: file.mtime_ns,
                    build_id: file.build_id.clone(),
                    has_map: file.has_map.into(),
                    problem: file.problem.clone(),
                    armed: check::stored_u64("armed", file.armed).map_err(|e| refuse(what(), e))?,
                };
                checked_file(&row, position).map_err(|e| refuse(what(), e))?;
                insert
                    .execute(params![
                        id,
                        row.file,
                        row.path,
                        row.dev,
                        row.ino,
                        row.size,
                        row.mtime_ns,
                        row.build_id,
                        row.has_map,
                        row.problem,
                        row.armed,
                    ])
                    .map_err(fail)?;
            }
            let numbers: HashSet<u32> = files.iter().map(|f| f.file).collect();
            let mut insert = tx
                .prepare_cached(
                    "INSERT INTO blocks (block_run_id, pid, first_seq, file, function, symbol,
                        bb_id, address, offset, size, first_t_ns)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
                )
                .map_err(fail)?;
            // Typed binds, as for page events: a start runs 10^5 to 10^6
            // blocks.
            insert.raw_bind_parameter(1, id).map_err(fail)?;
            for (index, block) in blocks.iter().enumerate() {
                let what = || {
                    format!(
                        "blocks[{index}] (pid {} first_seq {})",
                        block.pid, block.first_seq
                    )
                };
                let row = block_row(block, &numbers).map_err(|e| refuse(what(), e))?;
                insert.raw_bind_parameter(2, row.pid).map_err(fail)?;
                insert.raw_bind_parameter(3, row.first_seq).map_err(fail)?;
                insert.raw_bind_parameter(4, row.file).map_err(fail)?;
                insert.raw_bind_parameter(5, row.function).map_err(fail)?;
                insert
                    .raw_bind_parameter(6, block.symbol.as_deref())
                    .map_err(fail)?;
                insert.raw_bind_parameter(7, row.bb_id).map_err(fail)?;
                insert.raw_bind_parameter(8, row.address).map_err(fail)?;
                insert.raw_bind_parameter(9, row.offset).map_err(fail)?;
                insert.raw_bind_parameter(10, row.size).map_err(fail)?;
                insert
                    .raw_bind_parameter(11, row.first_t_ns)
                    .map_err(fail)?;
                match insert.raw_execute() {
                    Ok(_) => {}
                    Err(rusqlite::Error::SqliteFailure(e, _))
                        if e.code == rusqlite::ErrorCode::ConstraintViolation =>
                    {
                        return Err(refuse(
                            what(),
                            format!(
                                "process {} has two blocks with first_seq {}",
                                block.pid, block.first_seq
                            ),
                        ));
                    }
                    Err(source) => return Err(fail(source)),
                }
            }
        }
        tx.commit().map_err(fail)?;
        Ok(id)
    }

    /// Deletes block run `run` with its files and blocks (the foreign keys
    /// cascade). A run that is not there is no error, as for
    /// [`Profile::delete_run`].
    pub fn delete_block_run(&mut self, run: BlockRunId) -> Result<()> {
        self.conn
            .execute("DELETE FROM block_runs WHERE id = ?1", params![run])
            .map_err(|source| self.classify(source))?;
        Ok(())
    }

    /// All block runs, oldest first.
    pub fn block_runs(&self) -> Result<Vec<BlockRun>> {
        let mut stmt = self
            .conn
            .prepare(&format!("{RUN_COLUMNS} ORDER BY id"))
            .map_err(|source| self.classify(source))?;
        let rows = stmt
            .query_map([], run_row)
            .map_err(|source| self.classify(source))?;
        let mut runs = Vec::new();
        for row in rows {
            runs.push(self.decode_block_run(&row.map_err(|source| self.classify(source))?)?);
        }
        Ok(runs)
    }

    /// One block run; `None` selects the newest. A run that is not there
    /// is an error that lists the runs there are, or says how to record one.
    pub fn block_run(&self, id: Option<BlockRunId>) -> Result<BlockRun> {
        let row = match id {
            Some(id) => self
                .conn
                .query_row(&format!("{RUN_COLUMNS} WHERE id = ?1"), [id], run_row)
                .optional(),
            None => self
                .conn
                .query_row(
                    &format!("{RUN_COLUMNS} ORDER BY id DESC LIMIT 1"),
                    [],
                    run_row,
                )
                .optional(),
        }
        .map_err(|source| self.classify(source))?;
        if let Some(row) = row {
            return self.decode_block_run(&row);
        }
        // Only the ids: a damaged row elsewhere should not hide this error.
        let mut stmt = self
            .conn
            .prepare("SELECT id FROM block_runs ORDER BY id")
            .map_err(|source| self.classify(source))?;
        let ids = stmt
            .query_map([], |row| row.get::<_, BlockRunId>(0))
            .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
            .map_err(|source| self.classify(source))?;
        let ids: Vec<String> = ids.iter().map(|id| id.to_string()).collect();
        Err(Error::NoSuchBlockRun {
            path: self.path.clone(),
            run: id,
            hint: if ids.is_empty() {
                format!(" (it has none; {RECORD_ONE})")
            } else {
                format!(" (block runs: {})", ids.join(", "))
            },
        })
    }

    fn decode_block_run(&self, row: &RunRow) -> Result<BlockRun> {
        checked_run(row).map_err(|detail| {
            self.bad_block_row(row.id, "block_runs", format!("id {}", row.id), detail)
        })
    }

    /// The files mapped executable during a block run, in order of their
    /// numbers (0, 1, ...); none for a run that is not there.
    pub fn block_files(&self, run: BlockRunId) -> Result<Vec<BlockFile>> {
        let rows = self.query(
            "SELECT file, path, dev, ino, size, mtime_ns, build_id, has_map, problem, armed
             FROM block_files WHERE block_run_id = ?1 ORDER BY file",
            run,
            file_row,
        )?;
        rows.iter()
            .enumerate()
            .map(|(position, row)| {
                checked_file(row, position).map_err(|detail| {
                    self.bad_block_row(run, "block_files", format!("file {}", row.file), detail)
                })
            })
            .collect()
    }

    /// The blocks a block run's processes ran, by process, then in the
    /// order of their first runs; none for a run that is not there.
    pub fn blocks(&self, run: BlockRunId) -> Result<Vec<BlockEvent>> {
        let files: HashSet<u32> = self
            .query(
                "SELECT file FROM block_files WHERE block_run_id = ?1",
                run,
                |row| row.get::<_, i64>(0),
            )?
            .into_iter()
            .filter_map(|file| u32::try_from(file).ok())
            .collect();
        let rows = self.query(
            "SELECT pid, first_seq, file, function, bb_id, address, offset, size, first_t_ns,
                symbol
             FROM blocks WHERE block_run_id = ?1 ORDER BY pid, first_seq",
            run,
            |row| {
                Ok((
                    BlockRow {
                        pid: row.get(0)?,
                        first_seq: row.get(1)?,
                        file: row.get(2)?,
                        function: row.get(3)?,
                        bb_id: row.get(4)?,
                        address: row.get(5)?,
                        offset: row.get(6)?,
                        size: row.get(7)?,
                        first_t_ns: row.get(8)?,
                    },
                    row.get::<_, Option<String>>(9)?,
                ))
            },
        )?;
        rows.into_iter()
            .map(|(row, symbol)| {
                let block = checked_block(&row, &files).map_err(|detail| {
                    self.bad_block_row(
                        run,
                        "blocks",
                        format!("pid {} first_seq {}", row.pid, row.first_seq),
                        detail,
                    )
                })?;
                Ok(BlockEvent { symbol, ..block })
            })
            .collect()
    }

    /// The error for a block run's row that fails its checks: names the
    /// profile, the block run, the table and the row.
    fn bad_block_row(
        &self,
        run: BlockRunId,
        table: &'static str,
        row: String,
        detail: String,
    ) -> Error {
        Error::BadBlockRow {
            path: self.path.clone(),
            run,
            table,
            row,
            detail,
        }
    }
}
