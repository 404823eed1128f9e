//! The profile database's schema, versioned with SQLite's `user_version`
//! and marked as coldstart's with `application_id`, so a profile from a newer
//! coldstart or a database from another program is refused with a clear
//! message instead of being misread. docs/profile-db.md documents it.

/// "cold" in ASCII: marks the file as a coldstart profile.
pub const APPLICATION_ID: i32 = 0x636f_6c64;

/// The schema this build writes and reads. Older versions are upgraded in
/// place by [`MIGRATIONS`] when a profile is opened.
pub const SCHEMA_VERSION: i32 = 9;

/// The `functions` table, in both the new-profile schema and the 2 -> 3
/// migration, so the two cannot drift apart.
macro_rules! functions_table {
    () => {
        r#"
CREATE TABLE functions (
    run_id     INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    pid        INTEGER NOT NULL,          -- process whose instrumentation recorded the calls
    first_seq  INTEGER NOT NULL,          -- rank of the function's first call in that process, from 1
    file_id    INTEGER NOT NULL,          -- files.id of the same run (checked by the writer)
    offset     INTEGER NOT NULL,          -- file offset: the symbol's start, or the recorded address when unnamed
    size       INTEGER,                   -- bytes of the symbol; NULL when unnamed
    symbol     TEXT,                      -- raw (mangled) symbol name; NULL when no symbol covers the address
    first_t_ns INTEGER NOT NULL,          -- first call, ns after the program was started
    calls      INTEGER NOT NULL,          -- entries counted until the process dumped them
    PRIMARY KEY (run_id, pid, first_seq)
) WITHOUT ROWID;
"#
    };
}

/// The `runs.loader` column, in both the new-profile schema (last, where
/// `ALTER TABLE ... ADD COLUMN` puts it) and the 3 -> 4 migration.
macro_rules! runs_loader_column {
    () => {
        "loader TEXT"
    };
}

/// Schema 5's additions for correcting loader spans for the probes' own
/// cost, in both the new-profile schema and the 4 -> 5 migration: the
/// probe hits each span holds and the run's calibrated cost of one hit.
/// `ALTER TABLE` in both, so a new profile's columns sit where an
/// upgraded one's do.
macro_rules! probe_cost_columns {
    () => {
        r#"
ALTER TABLE loader_spans ADD COLUMN probe_hits INTEGER; -- loader probe hits on its task after its beginning, up to and including its end (entry: since the exec); NULL when it never ended
ALTER TABLE runs ADD COLUMN loader_hit_ns INTEGER;      -- calibrated cost of one loader probe hit in ns; NULL when not calibrated
"#
    };
}

/// The `inode_loads` table, in both the new-profile schema and the 5 -> 6
/// migration.
macro_rules! inode_loads_table {
    () => {
        r#"
CREATE TABLE inode_loads (
    run_id  INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    t_ns    INTEGER NOT NULL,             -- ns after the program was started
    pid     INTEGER NOT NULL,             -- task whose lookup waited for the read
    file_id INTEGER NOT NULL              -- files.id of the same run: the inode (its path when it could be resolved)
);
"#
    };
}

/// The `path_lookups` table, in both the new-profile schema and the 6 -> 7
/// migration.
macro_rules! path_lookups_table {
    () => {
        r#"
CREATE TABLE path_lookups (
    run_id  INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    t_ns    INTEGER NOT NULL,             -- the call's entry, ns after the program was started
    pid     INTEGER NOT NULL,             -- task that made the call
    call    TEXT NOT NULL,                -- system call, as its tracepoint names it (openat, newfstatat, ...)
    path    TEXT,                         -- the name, absolute; NULL when not recorded (see missed)
    missed  TEXT                          -- NULL when recorded; else unreadable | too long | unresolved | not utf-8
);
"#
    };
}

/// The `loader_spans` table, in both the new-profile schema and the 3 -> 4
/// migration. Addresses (`base`, `target`) are the u64 values as INTEGER;
/// user-space addresses are below 2^63, so a negative one is a damaged row.
macro_rules! loader_spans_table {
    () => {
        r#"
CREATE TABLE loader_spans (
    run_id     INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    seq        INTEGER NOT NULL,          -- 0, 1, ... in order of t_begin_ns within a batch; later batches follow
    pid        INTEGER NOT NULL,          -- task (thread) that ran it
    phase      TEXT NOT NULL,             -- start | load | search | map | open | relocate | init | initializer | dlopen | entry
    object     TEXT,                      -- link_map l_name ("" is the main program) or the name asked for
    file_id    INTEGER,                   -- files.id of the same run when the object's file is known (checked by the writer)
    t_begin_ns INTEGER NOT NULL,
    t_end_ns   INTEGER,                   -- NULL when it never returned before the run ended
    base       INTEGER,                   -- load bias (l_addr) when known
    target     INTEGER,                   -- initializer: the function's address; entry: the program's entry address
    detail     TEXT,                      -- open: the path tried; load, dlopen: the name asked for; initializer: DT_INIT or DT_INIT_ARRAY[i]
    result     INTEGER,                   -- open: the fd or -errno; dlopen: 1 when it returned an object, 0 when it failed
    lookups    INTEGER,                   -- relocate: symbol lookups counted during it, when counted
    depth      INTEGER NOT NULL,          -- nesting among this task's spans, 0 outermost
    PRIMARY KEY (run_id, seq)
) WITHOUT ROWID;
"#
    };
}

/// The block-level startup trace tables, in both the new-profile schema
/// and the 8 -> 9 migration. A block run is a recording of its own, not a
/// `runs` row: it has no page events, and no analysis of runs sees it.
/// Addresses, offsets and counts are u64 values as INTEGER; the writer
/// refuses one past 2^63 - 1, so a negative one is a damaged row.
macro_rules! block_runs_tables {
    () => {
        r#"
CREATE TABLE block_runs (
    id                 INTEGER PRIMARY KEY,
    argv               TEXT NOT NULL,     -- JSON array of strings
    cwd                TEXT NOT NULL,
    started_at_unix_ns INTEGER NOT NULL,  -- wall clock when the program was started
    duration_ns        INTEGER NOT NULL,  -- from the start to the end of the trace
    end_reason         TEXT NOT NULL,     -- exited | timeout | interrupted
    exit_code          INTEGER,
    exit_signal        INTEGER,
    uid                INTEGER NOT NULL,  -- user the program ran as
    gid                INTEGER NOT NULL,
    root_pid           INTEGER NOT NULL,
    traps              INTEGER NOT NULL,  -- breakpoint traps the tracer handled
    tool_version       TEXT NOT NULL
);
CREATE TABLE block_files (
    block_run_id INTEGER NOT NULL REFERENCES block_runs(id) ON DELETE CASCADE,
    file         INTEGER NOT NULL,        -- 0, 1, ... within the run
    path         TEXT NOT NULL,           -- UTF-8 text; a path that is not UTF-8 is its bytes as a BLOB
    dev          INTEGER NOT NULL,        -- st_dev as user space sees it (the u64 bit pattern)
    ino          INTEGER NOT NULL,
    size         INTEGER NOT NULL,
    mtime_ns     INTEGER NOT NULL,
    build_id     TEXT,
    has_map      INTEGER NOT NULL,        -- 1 when the file had a block map and was traced
    problem      TEXT,                    -- why its block map could not be read
    armed        INTEGER NOT NULL,        -- breakpoints written in it, over every process
    PRIMARY KEY (block_run_id, file)
) WITHOUT ROWID;
CREATE TABLE blocks (
    block_run_id INTEGER NOT NULL REFERENCES block_runs(id) ON DELETE CASCADE,
    pid          INTEGER NOT NULL,        -- process (tgid) that ran the block
    first_seq    INTEGER NOT NULL,        -- rank of the block's first run in that process, from 1
    file         INTEGER NOT NULL,        -- block_files.file of the same run (checked by the writer)
    function     INTEGER NOT NULL,        -- link-time address of the function's entry
    symbol       TEXT,                    -- raw function name; NULL when none
    bb_id        INTEGER NOT NULL,        -- the block's id in the function's block map
    address      INTEGER NOT NULL,        -- link-time address of the block
    offset       INTEGER NOT NULL,        -- file offset of the block
    size         INTEGER NOT NULL,        -- bytes of the block
    first_t_ns   INTEGER NOT NULL,        -- first run, ns after the program was started
    PRIMARY KEY (block_run_id, pid, first_seq)
) WITHOUT ROWID;
"#
    };
}

pub const CREATE: &str = concat!(
    r#"
CREATE TABLE runs (
    id                 INTEGER PRIMARY KEY,
    argv               TEXT NOT NULL,     -- JSON array of strings
    cwd                TEXT NOT NULL,
    cache_mode         TEXT NOT NULL,     -- cold | selective | warm
    started_at_unix_ns INTEGER NOT NULL,  -- wall clock when the program was started
    ended_ns           INTEGER,           -- end of the run, ns after the program was started
    end_reason         TEXT,              -- exited | signaled | ready-regex | ready-file | timeout | interrupted | failed; NULL while recording
    exit_code          INTEGER,
    exit_signal        INTEGER,
    kernel             TEXT NOT NULL,
    page_size          INTEGER NOT NULL,
    read_ahead_kb      INTEGER,           -- of the device holding the program, when known
    fault_around_bytes INTEGER,
    uid                INTEGER NOT NULL,  -- user the program ran as
    gid                INTEGER NOT NULL,
    root_pid           INTEGER,
    lost_events        INTEGER NOT NULL DEFAULT 0,
    tool_version       TEXT NOT NULL,
    complete           INTEGER NOT NULL DEFAULT 0,
    "#,
    runs_loader_column!(),
    r#"            -- NULL when the loader was not traced, else what its trace could and could not see
);
CREATE TABLE processes (
    run_id     INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    pid        INTEGER NOT NULL,          -- kernel task id (threads have their own)
    ppid       INTEGER,                   -- creating task
    tgid       INTEGER,                   -- process the task belongs to, when known
    comm       TEXT,
    exe        TEXT,                      -- last exec'd file
    t_start_ns INTEGER,
    t_end_ns   INTEGER,
    in_tree    INTEGER NOT NULL,          -- 1 for the traced program and its descendants
    PRIMARY KEY (run_id, pid)
) WITHOUT ROWID;
CREATE TABLE files (
    id             INTEGER PRIMARY KEY,
    run_id         INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    dev            INTEGER NOT NULL,      -- st_dev as user space sees it
    ino            INTEGER NOT NULL,
    path           TEXT,                  -- NULL when it could not be resolved exactly
    size           INTEGER,
    mtime_ns       INTEGER,
    build_id       TEXT,
    opened_by_tree INTEGER NOT NULL,      -- opened or exec'd by the traced tree during the run
    kind           TEXT,                  -- 'file', 'metadata' or 'memory'; NULL before schema 8
    opened_as      TEXT,                  -- the path the program opened it by, when not `path`
    note           TEXT,                  -- what a row without a path holds, or why it has none
    UNIQUE (run_id, dev, ino)
);
CREATE TABLE page_events (
    run_id  INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    seq     INTEGER NOT NULL,             -- position in the run, in time order
    t_ns    INTEGER NOT NULL,             -- ns after the program was started (may be negative)
    pid     INTEGER NOT NULL,
    file_id INTEGER NOT NULL,             -- files.id of the same run (checked by the writer)
    page    INTEGER NOT NULL,             -- first page index in the file
    npages  INTEGER NOT NULL,
    kind    INTEGER NOT NULL REFERENCES event_kinds(id),
    PRIMARY KEY (run_id, seq)
) WITHOUT ROWID;
CREATE TABLE event_kinds (
    id   INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    what TEXT NOT NULL
);
INSERT INTO event_kinds VALUES
    (0, 'read',   'pages entered the page cache (filemap:mm_filemap_add_to_page_cache)'),
    (1, 'fault',  'a page fault on a file page (filemap:mm_filemap_fault)'),
    (2, 'map',    'pages mapped by fault-around (filemap:mm_filemap_map_pages)'),
    (3, 'access', 'pages accessed through read() and friends (filemap:mm_filemap_get_pages)'),
    (4, 'evict',  'pages left the page cache (filemap:mm_filemap_delete_from_page_cache)'),
    (5, 'touch',  'a user page fault on a mapping of the page (exceptions:page_fault_user through /proc/PID/maps)');
CREATE TABLE readahead (
    run_id        INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    t_ns          INTEGER NOT NULL,
    pid           INTEGER NOT NULL,
    file_id       INTEGER NOT NULL REFERENCES files(id) ON DELETE CASCADE,
    kind          TEXT NOT NULL,          -- sync | async | order
    page          INTEGER NOT NULL,
    size          INTEGER NOT NULL,       -- pages in the window
    async_size    INTEGER NOT NULL,
    ra_pages      INTEGER NOT NULL,
    mmap_miss     INTEGER,
    prev_pos      INTEGER,
    req_count     INTEGER
);
CREATE TABLE marks (
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    t_ns   INTEGER NOT NULL,
    name   TEXT NOT NULL
);
CREATE TABLE lost_events (
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    cpu    INTEGER NOT NULL,
    events INTEGER NOT NULL,              -- dropped by the kernel buffer of this CPU
    PRIMARY KEY (run_id, cpu)
) WITHOUT ROWID;
"#,
    functions_table!(),
    loader_spans_table!(),
    probe_cost_columns!(),
    inode_loads_table!(),
    path_lookups_table!(),
    block_runs_tables!()
);

/// The 7 -> 8 columns of `files`, which a new profile has in its table.
macro_rules! file_origin_columns {
    () => {
        "ALTER TABLE files ADD COLUMN kind TEXT;
         ALTER TABLE files ADD COLUMN opened_as TEXT;
         ALTER TABLE files ADD COLUMN note TEXT;"
    };
}

/// Upgrades: `MIGRATIONS[i]` takes a profile from version i + 1 to i + 2.
pub const MIGRATIONS: &[&str] = &[
    // 1 -> 2: page events clustered by (run, time order), so a trace's
    // events append to one B-tree and a run reads back without a sort;
    // the per-row foreign key to files (an unindexed check on every insert
    // and delete) is dropped.
    r#"
CREATE TABLE page_events_v2 (
    run_id  INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    seq     INTEGER NOT NULL,
    t_ns    INTEGER NOT NULL,
    pid     INTEGER NOT NULL,
    file_id INTEGER NOT NULL,
    page    INTEGER NOT NULL,
    npages  INTEGER NOT NULL,
    kind    INTEGER NOT NULL REFERENCES event_kinds(id),
    PRIMARY KEY (run_id, seq)
) WITHOUT ROWID;
INSERT INTO page_events_v2
    SELECT run_id, row_number() OVER (PARTITION BY run_id ORDER BY t_ns, rowid) - 1,
           t_ns, pid, file_id, page, npages, kind
    FROM page_events;
DROP TABLE page_events;
ALTER TABLE page_events_v2 RENAME TO page_events;
"#,
    // 2 -> 3: function-level traces from the instrumentation runtime.
    functions_table!(),
    // 3 -> 4: the dynamic loader's phases, and what the loader trace saw.
    concat!(
        "ALTER TABLE runs ADD COLUMN ",
        runs_loader_column!(),
        ";",
        loader_spans_table!()
    ),
    // 4 -> 5: probe hits per loader span and the run's cost of one hit.
    probe_cost_columns!(),
    // 5 -> 6: inodes whose table blocks a start read from the disk.
    inode_loads_table!(),
    // 6 -> 7: the names a start looked up.
    path_lookups_table!(),
    // 7 -> 8: what each file row holds, the path the program opened it
    // by, and what names a row without a path.
    file_origin_columns!(),
    // 8 -> 9: block-level startup traces, apart from `runs`.
    block_runs_tables!(),
];
