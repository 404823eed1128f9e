//! coldstart's profile room: one SQLite file holds many traced runs of a
//! program (their processes, files, page events, readahead decisions and
//! marks), and block-level startup traces apart from them. The tracer
//! writes it; every analysis reads it; nothing else is shared between them.
//!
//! A run's row is committed before its events, and each batch of rows is
//! its own transaction, so a crash keeps everything already written and
//! leaves the run marked incomplete.

mod blocks;
mod check;
pub mod handmade;
mod loader;
mod model;
mod schema;
pub mod summary;

pub use check::{MAX_PAGE_END, MAX_PAGE_SIZE, MAX_PID, MIN_PAGE_SIZE};
pub use model::*;
pub use schema::SCHEMA_VERSION;

use rusqlite::{Connection, OpenFlags, OptionalExtension, params};
use std::collections::HashSet;
use std::path::{Path, PathBuf};

/// What can go wrong with a profile file.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{path}: no such profile")]
    Missing { path: PathBuf },
    #[error("{path}: not a coldstart profile ({detail})")]
    NotAProfile { path: PathBuf, detail: String },
    #[error(
        "{path}: written by a newer coldstart (profile schema {found}, this build reads up to {supported}); upgrade coldstart"
    )]
    NewerSchema {
        path: PathBuf,
        found: i32,
        supported: i32,
    },
    #[error(
        "{path}: written by an older coldstart (profile schema {found}); upgrading it to schema {current} needs write access to the file: {source}"
    )]
    CannotUpgrade {
        path: PathBuf,
        found: i32,
        current: i32,
        #[source]
        source: rusqlite::Error,
    },
    #[error("{path}: no room left to write the profile: {source}")]
    DiskFull {
        path: PathBuf,
        #[source]
        source: rusqlite::Error,
    },
    #[error("{path}: profile is damaged or unreadable: {source}")]
    Damaged {
        path: PathBuf,
        #[source]
        source: rusqlite::Error,
    },
    #[error("{path}: no run {run} in this profile{hint}")]
    NoSuchRun {
        path: PathBuf,
        run: RunId,
        hint: String,
    },
    #[error("{path}: no block run{} in this profile{hint}", numbered(run))]
    NoSuchBlockRun {
        path: PathBuf,
        /// None when the newest was asked for.
        run: Option<BlockRunId>,
        hint: String,
    },
    #[error("{path}: {detail}")]
    Invalid { path: PathBuf, detail: String },
    /// A row whose values no run could have produced (see `check`).
    #[error("{path}: run {run}: {table} row {row}: {detail}")]
    BadRow {
        path: PathBuf,
        run: RunId,
        table: &'static str,
        row: String,
        detail: String,
    },
    /// A row of a block run that no trace could have produced.
    #[error("{path}: block run {run}: {table} row {row}: {detail}")]
    BadBlockRow {
        path: PathBuf,
        run: BlockRunId,
        table: &'static str,
        row: String,
        detail: String,
    },
}

pub type Result<T> = std::result::Result<T, Error>;

/// " 7" for block run 7, nothing when the newest was asked for.
fn numbered(run: &Option<BlockRunId>) -> String {
    run.map(|id| format!(" {id}")).unwrap_or_default()
}

/// Gives the profile at `path`, with SQLite's `-wal` and `-shm` files
/// beside it, to `uid`:`gid`: a profile created through sudo belongs to
/// the user, like their files. Best effort: a file that is missing or
/// cannot be given stays as it is.
pub fn give_to(path: &Path, uid: u32, gid: u32) {
    for suffix in ["", "-wal", "-shm"] {
        let mut name = path.as_os_str().to_owned();
        name.push(suffix);
        let _ = std::os::unix::fs::chown(Path::new(&name), Some(uid), Some(gid));
    }
}

/// An open profile database.
pub struct Profile {
    conn: Connection,
    path: PathBuf,
}

impl Profile {
    /// Opens a profile for writing, creating it when it does not exist.
    pub fn create_or_open(path: &Path) -> Result<Profile> {
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE
                | OpenFlags::SQLITE_OPEN_CREATE
                | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(|source| damaged(path, source))?;
        let profile = Profile {
            conn,
            path: path.to_path_buf(),
        };
        profile.configure()?;
        if profile.is_empty_database()? {
            profile.create_schema()?;
        } else {
            let version = profile.check_schema()?;
            profile
                .upgrade(version)
                .map_err(|source| damaged(path, source))?;
        }
        Ok(profile)
    }

    /// Opens an existing profile read-only.
    pub fn open(path: &Path) -> Result<Profile> {
        match std::fs::metadata(path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(Error::Missing {
                    path: path.to_path_buf(),
                });
            }
            Ok(meta) if meta.is_dir() => {
                return Err(Error::NotAProfile {
                    path: path.to_path_buf(),
                    detail: "it is a directory".into(),
                });
            }
            _ => {}
        }
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(|source| damaged(path, source))?;
        let profile = Profile {
            conn,
            path: path.to_path_buf(),
        };
        if profile.is_empty_database()? {
            return Err(Error::NotAProfile {
                path: path.to_path_buf(),
                detail: "the file is empty".into(),
            });
        }
        let version = profile.check_schema()?;
        if version < schema::SCHEMA_VERSION {
            // Upgrading writes, so it needs a second, writable connection.
            drop(profile);
            let writable = Connection::open_with_flags(
                path,
                OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
            )
            .map_err(|source| cannot_upgrade(path, version, source))?;
            let writer = Profile {
                conn: writable,
                path: path.to_path_buf(),
            };
            writer.configure()?;
            writer
                .upgrade(version)
                .map_err(|source| cannot_upgrade(path, version, source))?;
            drop(writer);
            return Profile::open(path);
        }
        Ok(profile)
    }

    /// Runs the migrations from `version` to the current schema, each in
    /// its own transaction.
    fn upgrade(&self, version: i32) -> rusqlite::Result<()> {
        for from in version..schema::SCHEMA_VERSION {
            let sql = format!(
                "BEGIN; {} PRAGMA user_version = {}; COMMIT;",
                schema::MIGRATIONS[(from - 1) as usize],
                from + 1
            );
            if let Err(e) = self.conn.execute_batch(&sql) {
                let _ = self.conn.execute_batch("ROLLBACK");
                return Err(e);
            }
        }
        Ok(())
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn configure(&self) -> Result<()> {
        // WAL keeps committed batches safe if the recorder dies; NORMAL sync
        // is durable across process crashes, which is what matters here.
        self.conn
            .execute_batch(
                "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON;",
            )
            .map_err(|source| self.classify(source))
    }

    fn is_empty_database(&self) -> Result<bool> {
        let tables: i64 = self
            .conn
            .query_row("SELECT count(*) FROM sqlite_master", [], |row| row.get(0))
            .map_err(|source| self.classify(source))?;
        Ok(tables == 0)
    }

    fn create_schema(&self) -> Result<()> {
        let sql = format!(
            "BEGIN; {} PRAGMA application_id = {}; PRAGMA user_version = {}; COMMIT;",
            schema::CREATE,
            schema::APPLICATION_ID,
            schema::SCHEMA_VERSION
        );
        self.conn
            .execute_batch(&sql)
            .map_err(|source| self.classify(source))
    }

    /// Checks the file is a profile this build can read; returns its
    /// schema version.
    fn check_schema(&self) -> Result<i32> {
        let pragma = |name: &str| -> Result<i32> {
            self.conn
                .query_row(&format!("PRAGMA {name}"), [], |row| row.get(0))
                .map_err(|source| self.classify(source))
        };
        let application_id = pragma("application_id")?;
        if application_id != schema::APPLICATION_ID {
            return Err(Error::NotAProfile {
                path: self.path.clone(),
                detail: format!(
                    "an SQLite database of another program (application_id {application_id:#x})"
                ),
            });
        }
        let version = pragma("user_version")?;
        if version > schema::SCHEMA_VERSION {
            return Err(Error::NewerSchema {
                path: self.path.clone(),
                found: version,
                supported: schema::SCHEMA_VERSION,
            });
        }
        if version < 1 {
            return Err(Error::NotAProfile {
                path: self.path.clone(),
                detail: format!("schema version {version} is not one coldstart ever wrote"),
            });
        }
        Ok(version)
    }

    /// SQLite reports "file is not a database" for foreign files; say that
    /// in the profile's terms.
    fn classify(&self, source: rusqlite::Error) -> Error {
        if let rusqlite::Error::SqliteFailure(code, _) = &source
            && code.code == rusqlite::ErrorCode::NotADatabase
        {
            return Error::NotAProfile {
                path: self.path.clone(),
                detail: "not an SQLite database".into(),
            };
        }
        damaged(&self.path, source)
    }

    /// Records the start of a run and commits it, so the run is listed
    /// (as incomplete) even if the recorder dies before it ends.
    pub fn begin_run(&mut self, start: &RunStart) -> Result<RunId> {
        let argv = serde_json::to_string(&start.argv).map_err(|e| Error::Invalid {
            path: self.path.clone(),
            detail: format!("cannot encode argv: {e}"),
        })?;
        self.conn
            .execute(
                "INSERT INTO runs (argv, cwd, cache_mode, started_at_unix_ns, kernel, page_size,
                    read_ahead_kb, fault_around_bytes, uid, gid, tool_version)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
                params![
                    argv,
                    start.cwd,
                    start.cache_mode.as_str(),
                    start.started_at_unix_ns,
                    start.kernel,
                    start.page_size as i64,
                    start.read_ahead_kb.map(|v| v as i64),
                    start.fault_around_bytes.map(|v| v as i64),
                    start.uid,
                    start.gid,
                    start.tool_version,
                ],
            )
            .map_err(|source| self.classify(source))?;
        Ok(self.conn.last_insert_rowid())
    }

    /// Writes a batch of a run's rows in one transaction. Page events are
    /// appended after the run's earlier ones, in the batch's order (which
    /// should be time order).
    pub fn write(&mut self, run: RunId, batch: &Batch) -> Result<Vec<FileId>> {
        self.with_references_checked_here(run, |p| p.write_unchecked(run, batch))
    }

    /// Writes the functions a run's processes called, in one transaction,
    /// with the files they sit in. A file the run already has (same device
    /// and inode, as the page trace adds them) keeps its row, and gains the
    /// path, size, mtime or build-id it lacked; others get a new row. A
    /// function names one of `files` by a negative id (as in [`Batch`]) or
    /// a file of the run by its id. Returns the ids of `files`.
    pub fn write_functions(
        &mut self,
        run: RunId,
        files: &[NewFile],
        functions: &[FunctionEvent],
    ) -> Result<Vec<FileId>> {
        self.with_references_checked_here(run, |p| {
            p.write_functions_unchecked(run, files, functions)
        })
    }

    /// Runs a bulk write with SQLite's foreign key checks off. Hundreds of
    /// thousands of rows: SQLite's per-row lookups would double the cost,
    /// so the writers check the references themselves (the run here, file
    /// ids as they go, kinds by type).
    fn with_references_checked_here<T>(
        &mut self,
        run: RunId,
        write: impl FnOnce(&mut Profile) -> Result<T>,
    ) -> Result<T> {
        let path = self.path.clone();
        let fail = |source| damaged(&path, source);
        let exists: bool = self
            .conn
            .query_row(
                "SELECT EXISTS (SELECT 1 FROM runs WHERE id = ?1)",
                [run],
                |row| row.get(0),
            )
            .map_err(fail)?;
        if !exists {
            return Err(Error::NoSuchRun {
                path: path.clone(),
                run,
                hint: String::new(),
            });
        }
        self.without_foreign_keys(write)
    }

    /// Runs `write` with SQLite's foreign key checks off, and turns them
    /// back on whatever it returned. The caller checks the references.
    fn without_foreign_keys<T>(
        &mut self,
        write: impl FnOnce(&mut Profile) -> Result<T>,
    ) -> Result<T> {
        let path = self.path.clone();
        let fail = |source| damaged(&path, source);
        self.conn
            .execute_batch("PRAGMA foreign_keys = OFF")
            .map_err(fail)?;
        let written = write(self);
        let restored = self.conn.execute_batch("PRAGMA foreign_keys = ON");
        let written = written?;
        restored.map_err(fail)?;
        Ok(written)
    }

    fn write_unchecked(&mut self, run: RunId, batch: &Batch) -> Result<Vec<FileId>> {
        let path = self.path.clone();
        let fail = |source| damaged(&path, source);
        let tx = self.conn.transaction().map_err(fail)?;
        let mut file_ids = Vec::with_capacity(batch.files.len());
        let mut run_files = files_of_run(&tx, run).map_err(fail)?;
        let next_seq: i64 = tx
            .query_row(
                "SELECT coalesce(max(seq) + 1, 0) FROM page_events WHERE run_id = ?1",
                [run],
                |row| row.get(0),
            )
            .map_err(fail)?;
        {
            for file in &batch.files {
                file_ids.push(insert_file(&tx, run, file).map_err(fail)?);
            }
            run_files.extend(&file_ids);
            let resolve = |id| resolve_file(&path, run, id, &file_ids, &run_files);
            let mut insert = tx
                .prepare_cached(
                    "INSERT OR REPLACE INTO processes (run_id, pid, ppid, tgid, comm, exe, t_start_ns, t_end_ns, in_tree)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                )
                .map_err(fail)?;
            for p in &batch.processes {
                insert
                    .execute(params![
                        run,
                        p.pid,
                        p.ppid,
                        p.tgid,
                        p.comm,
                        p.exe,
                        p.t_start_ns,
                        p.t_end_ns,
                        p.in_tree
                    ])
                    .map_err(fail)?;
            }
            let mut insert = tx
                .prepare_cached(
                    "INSERT INTO page_events (run_id, seq, t_ns, pid, file_id, page, npages, kind)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                )
                .map_err(fail)?;
            // Typed binds: this loop is the bulk of a trace's write time.
            insert.raw_bind_parameter(1, run).map_err(fail)?;
            for (seq, e) in (next_seq..).zip(&batch.page_events) {
                insert.raw_bind_parameter(2, seq).map_err(fail)?;
                insert.raw_bind_parameter(3, e.t_ns).map_err(fail)?;
                insert.raw_bind_parameter(4, e.pid).map_err(fail)?;
                insert
                    .raw_bind_parameter(5, resolve(e.file_id)?)
                    .map_err(fail)?;
                insert.raw_bind_parameter(6, e.page as i64).map_err(fail)?;
                insert
                    .raw_bind_parameter(7, e.npages as i64)
                    .map_err(fail)?;
                insert.raw_bind_parameter(8, e.kind.code()).map_err(fail)?;
                insert.raw_execute().map_err(fail)?;
            }
            let mut insert = tx
                .prepare_cached(
                    "INSERT INTO readahead (run_id, t_ns, pid, file_id, kind, page, size, async_size,
                        ra_pages, mmap_miss, prev_pos, req_count)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
                )
                .map_err(fail)?;
            for r in &batch.readahead {
                insert
                    .execute(params![
                        run,
                        r.t_ns,
                        r.pid,
                        resolve(r.file_id)?,
                        r.kind.as_str(),
                        r.page as i64,
                        r.size as i64,
                        r.async_size as i64,
                        r.ra_pages as i64,
                        r.mmap_miss.map(|v| v as i64),
                        r.prev_pos,
                        r.req_count.map(|v| v as i64),
                    ])
                    .map_err(fail)?;
            }
            let mut insert = tx
                .prepare_cached("INSERT INTO marks (run_id, t_ns, name) VALUES (?1, ?2, ?3)")
                .map_err(fail)?;
            for m in &batch.marks {
                insert.execute(params![run, m.t_ns, m.name]).map_err(fail)?;
            }
            let mut insert = tx
                .prepare_cached(
                    "INSERT INTO inode_loads (run_id, t_ns, pid, file_id) VALUES (?1, ?2, ?3, ?4)",
                )
                .map_err(fail)?;
            for l in &batch.inode_loads {
                insert
                    .execute(params![run, l.t_ns, l.pid, resolve(l.file_id)?])
                    .map_err(fail)?;
            }
            let mut insert = tx
                .prepare_cached(
                    "INSERT INTO path_lookups (run_id, t_ns, pid, call, path, missed)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                )
                .map_err(fail)?;
            for l in &batch.path_lookups {
                let (path, missed) = match &l.path {
                    Ok(path) => (Some(path.as_str()), None),
                    Err(why) => (None, Some(why.as_str())),
                };
                insert
                    .execute(params![run, l.t_ns, l.pid, l.call, path, missed])
                    .map_err(fail)?;
            }
            let mut insert = tx
                .prepare_cached(
                    "INSERT OR REPLACE INTO lost_events (run_id, cpu, events) VALUES (?1, ?2, ?3)",
                )
                .map_err(fail)?;
            for l in &batch.lost {
                insert
                    .execute(params![run, l.cpu, l.events as i64])
                    .map_err(fail)?;
            }
            loader::insert_spans(&path, &tx, run, &batch.loader_spans, &file_ids, &run_files)?;
        }
        tx.commit().map_err(fail)?;
        Ok(file_ids)
    }

    fn write_functions_unchecked(
        &mut self,
        run: RunId,
        files: &[NewFile],
        functions: &[FunctionEvent],
    ) -> Result<Vec<FileId>> {
        let path = self.path.clone();
        let fail = |source| damaged(&path, source);
        let tx = self.conn.transaction().map_err(fail)?;
        let mut run_files = files_of_run(&tx, run).map_err(fail)?;
        let mut file_ids = Vec::with_capacity(files.len());
        {
            let mut existing = tx
                .prepare_cached("SELECT id FROM files WHERE run_id = ?1 AND dev = ?2 AND ino = ?3")
                .map_err(fail)?;
            // Fill in only what the page trace could not learn.
            let mut complete = tx
                .prepare_cached(
                    "UPDATE files SET path = coalesce(path, ?2), size = coalesce(size, ?3),
                        mtime_ns = coalesce(mtime_ns, ?4), build_id = coalesce(build_id, ?5),
                        kind = coalesce(kind, ?6), opened_as = coalesce(opened_as, ?7),
                        note = coalesce(note, ?8)
                     WHERE id = ?1",
                )
                .map_err(fail)?;
            for file in files {
                let found: Option<FileId> = existing
                    .query_row(params![run, file.dev as i64, file.ino as i64], |row| {
                        row.get(0)
                    })
                    .optional()
                    .map_err(fail)?;
                let id = match found {
                    Some(id) => {
                        complete
                            .execute(params![
                                id,
                                file.path,
                                file.size.map(|v| v as i64),
                                file.mtime_ns,
                                file.build_id,
                                file.kind.map(FileKind::name),
                                file.opened_as,
                                file.note
                            ])
                            .map_err(fail)?;
                        id
                    }
                    None => insert_file(&tx, run, file).map_err(fail)?,
                };
                file_ids.push(id);
            }
            run_files.extend(&file_ids);
            let mut insert = tx
                .prepare_cached(
                    "INSERT INTO functions (run_id, pid, first_seq, file_id, offset, size, symbol,
                        first_t_ns, calls)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                )
                .map_err(fail)?;
            // Typed binds, as for page events: a big program calls 10^5
            // functions before it is ready.
            insert.raw_bind_parameter(1, run).map_err(fail)?;
            for f in functions {
                let file_id = resolve_file(&path, run, f.file_id, &file_ids, &run_files)?;
                insert.raw_bind_parameter(2, f.pid).map_err(fail)?;
                insert
                    .raw_bind_parameter(3, f.first_seq as i64)
                    .map_err(fail)?;
                insert.raw_bind_parameter(4, file_id).map_err(fail)?;
                insert
                    .raw_bind_parameter(5, f.offset as i64)
                    .map_err(fail)?;
                insert
                    .raw_bind_parameter(6, f.size.map(|v| v as i64))
                    .map_err(fail)?;
                insert
                    .raw_bind_parameter(7, f.symbol.as_deref())
                    .map_err(fail)?;
                insert.raw_bind_parameter(8, f.first_t_ns).map_err(fail)?;
                insert.raw_bind_parameter(9, f.calls as i64).map_err(fail)?;
                match insert.raw_execute() {
                    Ok(_) => {}
                    Err(rusqlite::Error::SqliteFailure(e, _))
                        if e.code == rusqlite::ErrorCode::ConstraintViolation =>
                    {
                        return Err(Error::Invalid {
                            path: path.clone(),
                            detail: format!(
                                "run {run}: process {} has two functions with first call number {}",
                                f.pid, f.first_seq
                            ),
                        });
                    }
                    Err(source) => return Err(fail(source)),
                }
            }
        }
        tx.commit().map_err(fail)?;
        Ok(file_ids)
    }

    /// Records how a run ended and marks it complete.
    pub fn end_run(&mut self, run: RunId, end: &RunEnd) -> Result<()> {
        self.conn
            .execute(
                "UPDATE runs SET ended_ns = ?2, end_reason = ?3, exit_code = ?4, exit_signal = ?5,
                    root_pid = ?6,
                    lost_events = (SELECT coalesce(sum(events), 0) FROM lost_events WHERE run_id = ?1),
                    complete = 1
                 WHERE id = ?1",
                params![
                    run,
                    end.ended_ns,
                    end.end_reason.as_str(),
                    end.exit_code,
                    end.exit_signal,
                    end.root_pid
                ],
            )
            .map_err(|source| self.classify(source))?;
        Ok(())
    }

    /// Deletes run `run` and every row of it (the foreign keys cascade):
    /// how a profile that keeps only its newest runs stays bounded.
    pub fn delete_run(&mut self, run: RunId) -> Result<()> {
        self.conn
            .execute("DELETE FROM runs WHERE id = ?1", params![run])
            .map_err(|source| self.classify(source))?;
        Ok(())
    }

    /// All runs, oldest first.
    pub fn runs(&self) -> Result<Vec<Run>> {
        let mut stmt = self
            .conn
            .prepare(&format!("{RUN_COLUMNS} ORDER BY id"))
            .map_err(|source| self.classify(source))?;
        let rows = stmt
            .query_map([], run_from_row)
            .map_err(|source| self.classify(source))?;
        let mut runs = Vec::new();
        for row in rows {
            runs.push(self.decode_run(row.map_err(|source| self.classify(source))?)?);
        }
        Ok(runs)
    }

    /// One run; `None` selects the latest complete run.
    pub fn run(&self, id: Option<RunId>) -> Result<Run> {
        let row = match id {
            Some(id) => self
                .conn
                .query_row(&format!("{RUN_COLUMNS} WHERE id = ?1"), [id], run_from_row)
                .optional(),
            None => self
                .conn
                .query_row(
                    &format!("{RUN_COLUMNS} WHERE complete = 1 ORDER BY id DESC LIMIT 1"),
                    [],
                    run_from_row,
                )
                .optional(),
        }
        .map_err(|source| self.classify(source))?;
        match row {
            Some(row) => self.decode_run(row),
            None => {
                let ids: Vec<String> = self.runs()?.iter().map(|r| r.id.to_string()).collect();
                Err(Error::NoSuchRun {
                    path: self.path.clone(),
                    run: id.unwrap_or(0),
                    hint: if ids.is_empty() {
                        " (it has no complete runs)".into()
                    } else {
                        format!(" (runs: {})", ids.join(", "))
                    },
                })
            }
        }
    }

    fn decode_run(&self, row: RunRow) -> Result<Run> {
        let run = row.id;
        let bad = |detail: String| self.bad_row(run, "runs", format!("id {run}"), detail);
        let argv: Vec<String> = serde_json::from_str(&row.argv)
            .map_err(|e| bad(format!("argv is not a JSON list of strings: {e}")))?;
        let cache_mode = CacheMode::parse(&row.cache_mode)
            .ok_or_else(|| bad(format!("unknown cache mode {:?}", row.cache_mode)))?;
        let end_reason = match &row.end_reason {
            Some(text) => Some(
                EndReason::parse(text)
                    .ok_or_else(|| bad(format!("unknown end reason {text:?}")))?,
            ),
            None => None,
        };
        let checked = || -> std::result::Result<Run, String> {
            Ok(Run {
                id: row.id,
                start: RunStart {
                    argv,
                    cwd: row.cwd.clone(),
                    cache_mode,
                    started_at_unix_ns: row.started_at_unix_ns,
                    kernel: row.kernel.clone(),
                    page_size: check::page_size(row.page_size)?,
                    read_ahead_kb: check::non_negative_opt("read_ahead_kb", row.read_ahead_kb)?,
                    fault_around_bytes: check::non_negative_opt(
                        "fault_around_bytes",
                        row.fault_around_bytes,
                    )?,
                    uid: check::u32_value("uid", row.uid)?,
                    gid: check::u32_value("gid", row.gid)?,
                    tool_version: row.tool_version.clone(),
                },
                ended_ns: row.ended_ns,
                end_reason,
                exit_code: check::i32_opt("exit_code", row.exit_code)?,
                exit_signal: check::i32_opt("exit_signal", row.exit_signal)?,
                root_pid: check::pid_opt("root_pid", row.root_pid)?,
                lost_events: check::non_negative("lost_events", row.lost_events)?,
                complete: check::flag("complete", row.complete)?,
                loader: row.loader.clone(),
            })
        };
        checked().map_err(bad)
    }

    /// The error for a row that fails its checks: names the profile, the
    /// run, the table and the row, so the user can find and fix it.
    fn bad_row(&self, run: RunId, table: &'static str, row: String, detail: String) -> Error {
        Error::BadRow {
            path: self.path.clone(),
            run,
            table,
            row,
            detail,
        }
    }

    /// Ids of the files of a run, which every event must name.
    fn file_ids(&self, run: RunId) -> Result<HashSet<FileId>> {
        files_of_run(&self.conn, run).map_err(|source| self.classify(source))
    }

    pub fn processes(&self, run: RunId) -> Result<Vec<Process>> {
        let raw = self.query(
            "SELECT pid, ppid, tgid, comm, exe, t_start_ns, t_end_ns, in_tree
             FROM processes WHERE run_id = ?1 ORDER BY t_start_ns IS NULL, t_start_ns, pid",
            run,
            |row| {
                Ok((
                    row.get::<_, i64>(0)?,
                    row.get::<_, Option<i64>>(1)?,
                    row.get::<_, Option<i64>>(2)?,
                    row.get::<_, Option<String>>(3)?,
                    row.get::<_, Option<String>>(4)?,
                    row.get::<_, Option<i64>>(5)?,
                    row.get::<_, Option<i64>>(6)?,
                    row.get::<_, i64>(7)?,
                ))
            },
        )?;
        raw.into_iter()
            .map(
                |(pid, ppid, tgid, comm, exe, t_start_ns, t_end_ns, in_tree)| {
                    let checked = || -> std::result::Result<Process, String> {
                        Ok(Process {
                            pid: check::pid("pid", pid)?,
                            ppid: check::pid_opt("ppid", ppid)?,
                            tgid: check::pid_opt("tgid", tgid)?,
                            comm,
                            exe,
                            t_start_ns,
                            t_end_ns,
                            in_tree: check::flag("in_tree", in_tree)?,
                        })
                    };
                    checked().map_err(|detail| {
                        self.bad_row(run, "processes", format!("pid {pid}"), detail)
                    })
                },
            )
            .collect()
    }

    pub fn files(&self, run: RunId) -> Result<Vec<File>> {
        let raw = self.query(
            "SELECT id, dev, ino, path, size, mtime_ns, build_id, opened_by_tree,
                    kind, opened_as, note
             FROM files WHERE run_id = ?1 ORDER BY id",
            run,
            |row| {
                Ok((
                    row.get::<_, FileId>(0)?,
                    row.get::<_, i64>(1)?,
                    row.get::<_, i64>(2)?,
                    row.get::<_, Option<String>>(3)?,
                    row.get::<_, Option<i64>>(4)?,
                    row.get::<_, Option<i64>>(5)?,
                    row.get::<_, Option<String>>(6)?,
                    row.get::<_, i64>(7)?,
                    (
                        row.get::<_, Option<String>>(8)?,
                        row.get::<_, Option<String>>(9)?,
                        row.get::<_, Option<String>>(10)?,
                    ),
                ))
            },
        )?;
        raw.into_iter()
            .map(
                |(id, dev, ino, path, size, mtime_ns, build_id, opened_by_tree, origin)| {
                    let (kind, opened_as, note) = origin;
                    let checked = || -> std::result::Result<File, String> {
                        Ok(File {
                            id,
                            // Stored as i64 bit patterns of the u64 st_dev/st_ino.
                            dev: dev as u64,
                            ino: ino as u64,
                            path,
                            size: check::file_size(size)?,
                            mtime_ns,
                            build_id,
                            opened_by_tree: check::flag("opened_by_tree", opened_by_tree)?,
                            kind: match kind {
                                Some(name) => {
                                    Some(FileKind::from_name(&name).ok_or_else(|| {
                                        format!("kind {name:?} is none of file, metadata, memory")
                                    })?)
                                }
                                None => None,
                            },
                            opened_as,
                            note,
                        })
                    };
                    checked()
                        .map_err(|detail| self.bad_row(run, "files", format!("id {id}"), detail))
                },
            )
            .collect()
    }

    /// A run's page events in time order.
    pub fn page_events(&self, run: RunId) -> Result<Vec<PageEvent>> {
        let run_files = self.file_ids(run)?;
        let raw = self.query(
            "SELECT seq, t_ns, pid, file_id, page, npages, kind FROM page_events
             WHERE run_id = ?1 ORDER BY seq",
            run,
            |row| {
                Ok((
                    row.get::<_, i64>(0)?,
                    row.get::<_, i64>(1)?,
                    row.get::<_, i64>(2)?,
                    row.get::<_, i64>(3)?,
                    row.get::<_, i64>(4)?,
                    row.get::<_, i64>(5)?,
                    row.get::<_, i64>(6)?,
                ))
            },
        )?;
        raw.into_iter()
            .map(|(seq, t_ns, pid, file_id, page, npages, kind)| {
                let checked = || -> std::result::Result<PageEvent, String> {
                    let kind = PageEventKind::from_code(kind)
                        .ok_or_else(|| format!("unknown page event kind {kind}"))?;
                    let (page, npages) = check::page_range(page, npages)?;
                    Ok(PageEvent {
                        t_ns,
                        pid: check::pid("pid", pid)?,
                        file_id: file_of_run(file_id, &run_files)?,
                        page,
                        npages,
                        kind,
                    })
                };
                checked().map_err(|detail| {
                    self.bad_row(
                        run,
                        "page_events",
                        format!("seq {seq} (page {page}, npages {npages})"),
                        detail,
                    )
                })
            })
            .collect::<Result<Vec<_>>>()
            .map(|mut events| {
                // Stored in time order unless a run was written in several
                // unordered batches; a stable sort of sorted data is one pass.
                events.sort_by_key(|e| e.t_ns);
                events
            })
    }

    pub fn readahead(&self, run: RunId) -> Result<Vec<Readahead>> {
        let run_files = self.file_ids(run)?;
        let raw = self.query(
            "SELECT rowid, t_ns, pid, file_id, kind, page, size, async_size, ra_pages, mmap_miss,
                prev_pos, req_count
             FROM readahead WHERE run_id = ?1 ORDER BY t_ns, rowid",
            run,
            |row| {
                Ok((
                    row.get::<_, i64>(0)?,
                    (
                        row.get::<_, i64>(1)?,
                        row.get::<_, i64>(2)?,
                        row.get::<_, i64>(3)?,
                        row.get::<_, String>(4)?,
                    ),
                    (
                        row.get::<_, i64>(5)?,
                        row.get::<_, i64>(6)?,
                        row.get::<_, i64>(7)?,
                        row.get::<_, i64>(8)?,
                    ),
                    (
                        row.get::<_, Option<i64>>(9)?,
                        row.get::<_, Option<i64>>(10)?,
                        row.get::<_, Option<i64>>(11)?,
                    ),
                ))
            },
        )?;
        raw.into_iter()
            .map(
                |(
                    rowid,
                    (t_ns, pid, file_id, kind),
                    (page, size, async_size, ra_pages),
                    (mmap_miss, prev_pos, req_count),
                )| {
                    let checked = || -> std::result::Result<Readahead, String> {
                        let kind = ReadaheadKind::parse(&kind)
                            .ok_or_else(|| format!("unknown readahead kind {kind:?}"))?;
                        let (page, size) = check::window(page, size)?;
                        Ok(Readahead {
                            t_ns,
                            pid: check::pid("pid", pid)?,
                            file_id: file_of_run(file_id, &run_files)?,
                            kind,
                            page,
                            size,
                            async_size: check::non_negative("async_size", async_size)?,
                            ra_pages: check::non_negative("ra_pages", ra_pages)?,
                            mmap_miss: check::non_negative_opt("mmap_miss", mmap_miss)?,
                            prev_pos,
                            req_count: check::non_negative_opt("req_count", req_count)?,
                        })
                    };
                    checked().map_err(|detail| {
                        self.bad_row(run, "readahead", format!("rowid {rowid}"), detail)
                    })
                },
            )
            .collect()
    }

    pub fn marks(&self, run: RunId) -> Result<Vec<Mark>> {
        self.query(
            "SELECT t_ns, name FROM marks WHERE run_id = ?1 ORDER BY t_ns",
            run,
            |row| {
                Ok(Mark {
                    t_ns: row.get(0)?,
                    name: row.get(1)?,
                })
            },
        )
    }

    /// The run's inode loads, in time order.
    pub fn inode_loads(&self, run: RunId) -> Result<Vec<InodeLoad>> {
        let run_files = self.file_ids(run)?;
        let raw = self.query(
            "SELECT rowid, t_ns, pid, file_id FROM inode_loads WHERE run_id = ?1
             ORDER BY t_ns, rowid",
            run,
            |row| {
                Ok((
                    row.get::<_, i64>(0)?,
                    row.get::<_, i64>(1)?,
                    row.get::<_, i64>(2)?,
                    row.get::<_, i64>(3)?,
                ))
            },
        )?;
        raw.into_iter()
            .map(|(rowid, t_ns, pid, file_id)| {
                let checked = || -> std::result::Result<InodeLoad, String> {
                    Ok(InodeLoad {
                        t_ns,
                        pid: check::pid("pid", pid)?,
                        file_id: file_of_run(file_id, &run_files)?,
                    })
                };
                checked().map_err(|detail| {
                    self.bad_row(run, "inode_loads", format!("rowid {rowid}"), detail)
                })
            })
            .collect()
    }

    /// The run's path lookups, in time order.
    pub fn path_lookups(&self, run: RunId) -> Result<Vec<PathLookup>> {
        type Raw = (i64, i64, i64, String, Option<String>, Option<String>);
        let raw: Vec<Raw> = self.query(
            "SELECT rowid, t_ns, pid, call, path, missed FROM path_lookups WHERE run_id = ?1
             ORDER BY t_ns, rowid",
            run,
            |row| {
                Ok((
                    row.get(0)?,
                    row.get(1)?,
                    row.get(2)?,
                    row.get(3)?,
                    row.get(4)?,
                    row.get(5)?,
                ))
            },
        )?;
        raw.into_iter()
            .map(|(rowid, t_ns, pid, call, path, missed)| {
                let checked = || -> std::result::Result<PathLookup, String> {
                    let path = match (path, missed) {
                        (Some(path), None) if path.starts_with('/') => Ok(path),
                        (Some(path), None) => return Err(format!("path {path:?} is not absolute")),
                        (None, Some(missed)) => Err(LookupMissed::parse(&missed)
                            .ok_or_else(|| format!("unknown missed {missed:?}"))?),
                        _ => return Err("exactly one of path and missed must be set".into()),
                    };
                    Ok(PathLookup {
                        t_ns,
                        pid: check::pid("pid", pid)?,
                        call,
                        path,
                    })
                };
                checked().map_err(|detail| {
                    self.bad_row(run, "path_lookups", format!("rowid {rowid}"), detail)
                })
            })
            .collect()
    }

    pub fn lost_events(&self, run: RunId) -> Result<Vec<LostEvents>> {
        let raw = self.query(
            "SELECT cpu, events FROM lost_events WHERE run_id = ?1 ORDER BY cpu",
            run,
            |row| Ok((row.get::<_, i64>(0)?, row.get::<_, i64>(1)?)),
        )?;
        raw.into_iter()
            .map(|(cpu, events)| {
                let checked = || -> std::result::Result<LostEvents, String> {
                    Ok(LostEvents {
                        cpu: check::u32_value("cpu", cpu)?,
                        events: check::non_negative("events", events)?,
                    })
                };
                checked().map_err(|detail| {
                    self.bad_row(run, "lost_events", format!("cpu {cpu}"), detail)
                })
            })
            .collect()
    }

    /// The functions a run's processes called, by process, then in the
    /// order of their first calls.
    pub fn functions(&self, run: RunId) -> Result<Vec<FunctionEvent>> {
        let run_files = self.file_ids(run)?;
        let raw = self.query(
            "SELECT pid, first_seq, file_id, offset, size, symbol, first_t_ns, calls
             FROM functions WHERE run_id = ?1 ORDER BY pid, first_seq",
            run,
            |row| {
                Ok((
                    row.get::<_, i64>(0)?,
                    row.get::<_, i64>(1)?,
                    row.get::<_, i64>(2)?,
                    row.get::<_, i64>(3)?,
                    row.get::<_, Option<i64>>(4)?,
                    row.get::<_, Option<String>>(5)?,
                    row.get::<_, i64>(6)?,
                    row.get::<_, i64>(7)?,
                ))
            },
        )?;
        raw.into_iter()
            .map(
                |(pid, first_seq, file_id, offset, size, symbol, first_t_ns, calls)| {
                    let checked = || -> std::result::Result<FunctionEvent, String> {
                        if first_seq < 1 {
                            return Err(format!("first_seq {first_seq} is not at least 1"));
                        }
                        Ok(FunctionEvent {
                            pid: check::pid("pid", pid)?,
                            first_seq: first_seq as u64,
                            file_id: file_of_run(file_id, &run_files)?,
                            offset: check::non_negative("offset", offset)?,
                            size: check::non_negative_opt("size", size)?,
                            symbol,
                            first_t_ns,
                            calls: check::non_negative("calls", calls)?,
                        })
                    };
                    checked().map_err(|detail| {
                        self.bad_row(
                            run,
                            "functions",
                            format!("pid {pid} first_seq {first_seq}"),
                            detail,
                        )
                    })
                },
            )
            .collect()
    }
    fn query<T>(
        &self,
        sql: &str,
        run: RunId,
        map: impl FnMut(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
    ) -> Result<Vec<T>> {
        let mut stmt = self
            .conn
            .prepare_cached(sql)
            .map_err(|source| self.classify(source))?;
        let rows = stmt
            .query_map([run], map)
            .map_err(|source| self.classify(source))?;
        rows.collect::<rusqlite::Result<Vec<T>>>()
            .map_err(|source| self.classify(source))
    }
}

/// Rows to write together. Page events, readahead rows and loader spans may
/// name files of the same batch by position: file_id -1 is `files[0]`, -2
/// `files[1]`...
#[derive(Debug, Default, Clone)]
pub struct Batch {
    pub files: Vec<NewFile>,
    pub processes: Vec<Process>,
    pub page_events: Vec<PageEvent>,
    pub readahead: Vec<Readahead>,
    pub marks: Vec<Mark>,
    pub lost: Vec<LostEvents>,
    /// Numbered in order of `t_begin_ns` after the run's earlier spans.
    pub loader_spans: Vec<LoaderSpan>,
    pub inode_loads: Vec<InodeLoad>,
    pub path_lookups: Vec<PathLookup>,
}

impl Batch {
    /// The id that refers to `files[index]` of this batch.
    pub fn batch_file_id(index: usize) -> FileId {
        -(index as FileId) - 1
    }

    /// The position in `files` a batch-relative id names: the inverse of
    /// [`Batch::batch_file_id`]; None for a profile's own (non-negative) id.
    pub fn batch_index(id: FileId) -> Option<usize> {
        // -(id + 1) cannot overflow, even for i64::MIN.
        (id < 0).then(|| usize::try_from(-(id + 1)).ok()).flatten()
    }
}

const RUN_COLUMNS: &str = "SELECT id, argv, cwd, cache_mode, started_at_unix_ns, ended_ns, end_reason,
    exit_code, exit_signal, kernel, page_size, read_ahead_kb, fault_around_bytes, uid, gid, root_pid,
    lost_events, tool_version, complete, loader FROM runs";

/// A `runs` row as stored, before [`Profile::decode_run`] checks it.
struct RunRow {
    id: RunId,
    argv: String,
    cwd: String,
    cache_mode: String,
    started_at_unix_ns: i64,
    ended_ns: Option<i64>,
    end_reason: Option<String>,
    exit_code: Option<i64>,
    exit_signal: Option<i64>,
    kernel: String,
    page_size: i64,
    read_ahead_kb: Option<i64>,
    fault_around_bytes: Option<i64>,
    uid: i64,
    gid: i64,
    root_pid: Option<i64>,
    lost_events: i64,
    tool_version: String,
    complete: i64,
    loader: Option<String>,
}

fn run_from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<RunRow> {
    Ok(RunRow {
        id: row.get(0)?,
        argv: row.get(1)?,
        cwd: row.get(2)?,
        cache_mode: row.get(3)?,
        started_at_unix_ns: row.get(4)?,
        ended_ns: row.get(5)?,
        end_reason: row.get(6)?,
        exit_code: row.get(7)?,
        exit_signal: row.get(8)?,
        kernel: row.get(9)?,
        page_size: row.get(10)?,
        read_ahead_kb: row.get(11)?,
        fault_around_bytes: row.get(12)?,
        uid: row.get(13)?,
        gid: row.get(14)?,
        root_pid: row.get(15)?,
        lost_events: row.get(16)?,
        tool_version: row.get(17)?,
        complete: row.get(18)?,
        loader: row.get(19)?,
    })
}

/// A file id read from an event row: it must be a file of the same run.
fn file_of_run(id: i64, run_files: &HashSet<FileId>) -> std::result::Result<FileId, String> {
    if run_files.contains(&id) {
        Ok(id)
    } else {
        Err(format!("file_id {id} is not a file of this run"))
    }
}

/// Ids of the files a run already has.
fn files_of_run(conn: &Connection, run: RunId) -> rusqlite::Result<HashSet<FileId>> {
    let mut select = conn.prepare_cached("SELECT id FROM files WHERE run_id = ?1")?;
    select.query_map([run], |row| row.get(0))?.collect()
}

fn insert_file(conn: &Connection, run: RunId, file: &NewFile) -> rusqlite::Result<FileId> {
    conn.prepare_cached(
        "INSERT INTO files (run_id, dev, ino, path, size, mtime_ns, build_id, opened_by_tree,
                            kind, opened_as, note)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
    )?
    .execute(params![
        run,
        file.dev as i64,
        file.ino as i64,
        file.path,
        file.size.map(|v| v as i64),
        file.mtime_ns,
        file.build_id,
        file.opened_by_tree,
        file.kind.map(FileKind::name),
        file.opened_as,
        file.note,
    ])?;
    Ok(conn.last_insert_rowid())
}

/// The file row an event names: a negative id is a file written along
/// with it, by position (see [`Batch::batch_file_id`]); either way it must
/// be a file of the run.
fn resolve_file(
    path: &Path,
    run: RunId,
    id: FileId,
    written: &[FileId],
    run_files: &HashSet<FileId>,
) -> Result<FileId> {
    let resolved = match Batch::batch_index(id) {
        Some(index) => written.get(index).copied().unwrap_or(id),
        None => id,
    };
    if run_files.contains(&resolved) {
        Ok(resolved)
    } else {
        Err(Error::Invalid {
            path: path.to_path_buf(),
            detail: format!("run {run}: an event names file id {id}, not a file of this run"),
        })
    }
}

fn cannot_upgrade(path: &Path, found: i32, source: rusqlite::Error) -> Error {
    Error::CannotUpgrade {
        path: path.to_path_buf(),
        found,
        current: schema::SCHEMA_VERSION,
        source,
    }
}

/// An SQLite error of the profile's file: a full disk said as such (the
/// file is sound), anything else as damage.
fn damaged(path: &Path, source: rusqlite::Error) -> Error {
    let path = path.to_path_buf();
    if source.sqlite_error_code() == Some(rusqlite::ErrorCode::DiskFull) {
        Error::DiskFull { path, source }
    } else {
        Error::Damaged { path, source }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sqlite_error(code: i32) -> rusqlite::Error {
        rusqlite::Error::SqliteFailure(rusqlite::ffi::Error::new(code), None)
    }

    #[test]
    fn a_full_disk_is_said_as_such_and_other_errors_as_damage() {
        let path = Path::new("/state/p.db");
        let full = damaged(path, sqlite_error(rusqlite::ffi::SQLITE_FULL)).to_string();
        assert!(
            full.starts_with("/state/p.db: no room left to write the profile: "),
            "{full}"
        );
        let corrupt = damaged(path, sqlite_error(rusqlite::ffi::SQLITE_CORRUPT)).to_string();
        assert!(
            corrupt.starts_with("/state/p.db: profile is damaged or unreadable: "),
            "{corrupt}"
        );
    }
}
