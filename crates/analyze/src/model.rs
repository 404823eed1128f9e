//! The analysis of one run as serialisable values: what `coldstart report`
//! prints as tables, JSON, charts and timelines. Field names are stable
//! and documented in docs/report-json.md.

use serde::Serialize;

/// Everything `report` says about one run.
#[derive(Debug, Clone, Serialize)]
pub struct RunReport {
    pub profile: String,
    pub run: RunInfo,
    pub totals: Totals,
    /// Files the traced program's processes (or the prefetcher that
    /// served the start, in the tree or outside it) read or touched, most
    /// bytes read first.
    pub files: Vec<FileReport>,
    /// Files only other processes (or kernel threads) read during the run:
    /// kept apart so they do not inflate the program's figures.
    pub outside_files: Vec<OutsideFile>,
    /// The tree's tasks, then the prefetcher's tasks outside the tree.
    pub processes: Vec<ProcessInfo>,
    pub warnings: Vec<String>,
    /// The dynamic loader's phases per process and object, for runs traced
    /// with `--loader`; None otherwise.
    pub loader: Option<LoaderReport>,
}

#[derive(Debug, Clone, Serialize)]
pub struct RunInfo {
    pub id: i64,
    pub argv: Vec<String>,
    pub cache_mode: String,
    pub kernel: String,
    pub page_size: u64,
    pub read_ahead_kb: Option<u64>,
    /// read_ahead_kb was 0: every page read was demanded by a fault or a
    /// read(), so pages read count as touched.
    pub demand_reads: bool,
    pub end_reason: Option<String>,
    pub exit_code: Option<i32>,
    pub exit_signal: Option<i32>,
    /// ns from program start to the ready mark (exit, ready line or file).
    pub ready_ns: Option<i64>,
    pub ended_ns: Option<i64>,
    pub lost_events: u64,
    pub complete: bool,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Totals {
    pub files: usize,
    pub pages_read: u64,
    pub bytes_read: u64,
    pub pages_faulted: u64,
    pub pages_mapped: u64,
    pub pages_accessed: u64,
    pub pages_touched: u64,
    pub bytes_touched: u64,
    pub pages_touched_or_mapped: u64,
    pub bytes_touched_or_mapped: u64,
    pub read_amplification: Option<f64>,
    pub read_requests: u64,
    pub seek_forward_bytes: u64,
    pub seek_backward_bytes: u64,
}

/// Per-file figures, counting only the traced tree's events.
#[derive(Debug, Clone, Serialize)]
pub struct FileReport {
    /// The path that opens the file here, or, in brackets, what an
    /// unresolved row holds (`[ext4 metadata on /dev/vda (mounted at /)]`)
    /// or its identity (`[dev MAJ:MIN inode N]`).
    pub path: String,
    /// The path the program opened it by, when that is not `path`: the
    /// overlay path of the layer file holding its pages, the path inside
    /// the program's own mount namespace.
    pub opened_as: Option<String>,
    /// What the row holds (file data, filesystem metadata, memory); absent
    /// in profiles recorded before coldstart told them apart.
    pub kind: Option<coldstart_profile::FileKind>,
    pub resolved: bool,
    pub dev: u64,
    pub ino: u64,
    /// The file's size; None for filesystem metadata (the size of the whole
    /// device) and memory.
    pub size: Option<u64>,
    pub build_id: Option<String>,
    /// Distinct pages that entered the page cache.
    pub pages_read: u64,
    pub bytes_read: u64,
    /// Distinct pages with a page fault (not satisfied by fault-around).
    pub pages_faulted: u64,
    /// Distinct pages inside fault-around windows.
    pub pages_mapped: u64,
    /// Distinct pages accessed through read() and friends.
    pub pages_accessed: u64,
    /// Faulted or accessed (or, in a run with read_ahead_kb 0, read): the
    /// pages startup certainly used.
    pub pages_touched: u64,
    pub bytes_touched: u64,
    /// Touched or mapped by fault-around: an upper bound on the pages used,
    /// since a page fault-around mapped may or may not be used later.
    pub pages_touched_or_mapped: u64,
    pub bytes_touched_or_mapped: u64,
    /// pages_read / pages_touched; None when nothing was touched.
    pub read_amplification: Option<f64>,
    /// Runs of contiguous pages that entered the cache together.
    pub read_requests: u64,
    /// Summed distance from one request's end to the next one's start,
    /// by direction; None for filesystem metadata and memory, whose
    /// offsets are not places in a file.
    pub seek_forward_bytes: Option<u64>,
    pub seek_backward_bytes: Option<u64>,
    pub first_access_ns: Option<i64>,
    pub last_access_ns: Option<i64>,
    /// Processes (of the tree) that read or touched it: "comm (pid)".
    pub processes: Vec<String>,
    /// Other processes also read or touched it during the run.
    pub touched_by_others: bool,
    pub opened_by_tree: bool,
    /// Per ELF section (and unclaimed byte ranges); None when the file is
    /// not ELF, is gone, or changed since the trace (see `attribution`).
    pub sections: Option<Vec<SectionReport>>,
    /// Why sections are missing, when they are.
    pub attribution: Option<String>,
    /// Symbols lying on touched pages, in order of first touch.
    pub symbols: Vec<SymbolTouch>,
    pub symbol_source: Option<String>,
    /// With --pages: the page lists as [first, last] inclusive extents.
    pub pages: Option<PageLists>,
}

/// Per-section figures; bytes are the section's bytes on those pages.
#[derive(Debug, Clone, Serialize)]
pub struct SectionReport {
    pub name: String,
    pub offset: u64,
    pub size: u64,
    pub bytes_read: u64,
    pub bytes_faulted: u64,
    pub bytes_mapped: u64,
    pub bytes_touched: u64,
    pub pages_read: u64,
    pub pages_touched: u64,
    pub symbols_touched: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct SymbolTouch {
    pub name: String,
    pub offset: u64,
    pub size: u64,
    pub section: Option<String>,
    pub first_touch_ns: i64,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct PageLists {
    pub read: Vec<[u64; 2]>,
    pub faulted: Vec<[u64; 2]>,
    pub mapped: Vec<[u64; 2]>,
    pub accessed: Vec<[u64; 2]>,
}

#[derive(Debug, Clone, Serialize)]
pub struct OutsideFile {
    pub path: String,
    pub pages_read: u64,
    pub processes: Vec<String>,
}

/// A task of the traced tree, or of the prefetcher outside it.
pub type ProcessInfo = coldstart_profile::Process;

/// What the charts and the Perfetto export draw: per file, each page
/// event on the run's clock, and the file's sections as bands.
#[derive(Debug, Clone, Serialize)]
pub struct Timeline {
    pub page_size: u64,
    pub ready_ns: Option<i64>,
    pub ended_ns: Option<i64>,
    pub files: Vec<FileTimeline>,
    pub processes: Vec<ProcessInfo>,
    /// The tasks among `processes` that are the prefetcher's
    /// ([`crate::loaded::prefetcher_tasks`]), in pid order: whose reads the
    /// chart draws in their own colour.
    pub prefetcher_tasks: Vec<i32>,
    /// The dynamic loader's phases of the tree's tasks (runs traced with
    /// `--loader`), outermost first: what the chart draws as bands under
    /// the page plot.
    pub loader: Vec<LoaderBand>,
}

/// One loader span as the chart draws it.
#[derive(Debug, Clone, Serialize)]
pub struct LoaderBand {
    pub phase: coldstart_profile::LoaderPhase,
    pub pid: i32,
    /// The object's path as the loader named it ("" is the main program).
    pub object: Option<String>,
    pub t_begin_ns: i64,
    /// When the span never ended: the end of the span holding it (ld.so
    /// unwound it), or of the run for an outermost one.
    pub t_end_ns: i64,
    /// Nesting among the task's spans by time, 0 outermost: a load inside
    /// `start` is 1, its search 2, an open attempt 3.
    pub depth: u32,
}

#[derive(Debug, Clone, Serialize)]
pub struct FileTimeline {
    /// Same label as FileReport::path.
    pub path: String,
    /// File size in bytes (or the highest page seen, when unknown).
    pub size: u64,
    /// Tree events only, in time order.
    pub points: Vec<TimelinePoint>,
    /// Read requests (contiguous runs entering the cache together).
    pub requests: Vec<ReadRequest>,
    pub sections: Vec<Band>,
}

#[derive(Debug, Clone, Copy, Serialize)]
pub struct TimelinePoint {
    pub t_ns: i64,
    pub pid: i32,
    pub page: u64,
    pub npages: u64,
    pub kind: coldstart_profile::PageEventKind,
}

#[derive(Debug, Clone, Copy, Serialize)]
pub struct ReadRequest {
    pub t_start_ns: i64,
    pub t_end_ns: i64,
    pub pid: i32,
    pub first_page: u64,
    pub npages: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Band {
    pub name: String,
    pub offset: u64,
    pub size: u64,
}

/// What the dynamic loader did in a run traced with `coldstart trace
/// --loader`: per process and per object, the time of each phase, the I/O
/// that happened in it, relocations and initializers.
#[derive(Debug, Clone, Serialize)]
pub struct LoaderReport {
    /// What the loader trace could and could not see (the run's `loader`
    /// note in the profile).
    pub sight: Option<String>,
    /// When the program was ready, for comparison (as `run.ready_ns`).
    pub ready_ns: Option<i64>,
    /// The cost of one probe hit as calibrated when the run was traced;
    /// None leaves every `corrected_*` figure out.
    pub probe_hit_ns: Option<u64>,
    /// Per phase over every process, in phase order.
    pub phases: Vec<PhaseTotal>,
    /// Page events of the tree that fell in no loader span.
    pub outside_loader: PagesIo,
    /// One per program image (a process from one exec), first started first.
    pub processes: Vec<LoaderProcess>,
}

/// Pages the tree's page events covered: each event's pages summed, so a
/// page read or touched twice counts twice.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct PagesIo {
    /// Pages entering the page cache.
    pub pages_read: u64,
    /// Pages touched (faults, read(), user faults; reads too when
    /// readahead was off), as `files[].pages_touched` counts them.
    pub pages_touched: u64,
}

/// One phase's spans and the I/O that happened while it was the innermost
/// span of its task.
#[derive(Debug, Clone, Serialize)]
pub struct PhaseTotal {
    pub phase: coldstart_profile::LoaderPhase,
    pub spans: u64,
    /// Of those, spans that never returned (unwound by an error, or still
    /// running when the run ended).
    pub unfinished: u64,
    /// Summed lengths. Phases nest (a load holds its search and map), so
    /// totals of different phases overlap.
    pub total_ns: i64,
    /// Summed lengths less the spans nested in them: time the phase was
    /// the innermost. Self times of all phases add up to the loader's time.
    pub self_ns: i64,
    /// Probe hits the spans held (see `LoaderSpan::probe_hits`), nested
    /// spans' hits included.
    pub probe_hits: u64,
    /// `total_ns` less `probe_hit_ns` per hit each span held, each span
    /// at least 0: the time without the probes' traps.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub corrected_total_ns: Option<i64>,
    /// `self_ns` corrected the same way, with the hits no nested span held.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub corrected_self_ns: Option<i64>,
    #[serde(flatten)]
    pub io: PagesIo,
}

/// The loader's work in one program image: a process from one exec (or a
/// forked process that never exec'd).
#[derive(Debug, Clone, Serialize)]
pub struct LoaderProcess {
    /// The process (thread group) id.
    pub pid: i32,
    pub comm: Option<String>,
    /// The main program's file, when the trace resolved it.
    pub program: Option<String>,
    /// When it exec'd: the `start` span's beginning.
    pub exec_ns: Option<i64>,
    /// Length of the `start` span: exec until the initial set of objects is
    /// loaded and relocated.
    pub start_ns: Option<i64>,
    /// Exec until the jump to the program's entry (initializers included).
    pub entry_ns: Option<i64>,
    /// `start_ns` and `entry_ns` less the probe hits they held times
    /// `probe_hit_ns`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub corrected_start_ns: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub corrected_entry_ns: Option<i64>,
    /// Probe hits from the exec to the entry.
    pub entry_probe_hits: Option<u64>,
    /// Time in `dlopen` calls, a dlopen an initializer made inside another
    /// counted once.
    pub dlopen_ns: i64,
    /// The loader's time in this image: `entry_ns` (or `start_ns` when no
    /// entry was seen) plus `dlopen_ns`.
    pub loader_ns: i64,
    /// Initializers ld.so ran and their summed time (dlopen'd ones too).
    pub initializers: u64,
    pub initializers_ns: i64,
    pub phases: Vec<PhaseTotal>,
    /// Most loader time first (search + map + relocate + init).
    pub objects: Vec<LoaderObject>,
    /// Each `dlopen` call in order.
    pub dlopens: Vec<DlopenCall>,
}

/// How an object came into the process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ObjectOrigin {
    /// The program, ld.so, or a library of the initial set (DT_NEEDED).
    Initial,
    /// Loaded inside a `dlopen` call.
    Dlopen,
}

/// What the loader spent on one object of one process.
#[derive(Debug, Clone, Serialize)]
pub struct LoaderObject {
    /// As the loader names it: link_map `l_name` (a path), `""` for the
    /// main program; for a load that failed, the name asked for.
    pub object: String,
    /// Its file's path from the profile's files, when known.
    pub path: Option<String>,
    pub main_program: bool,
    pub origin: ObjectOrigin,
    /// With origin `dlopen`: the name the `dlopen` call that brought it in
    /// asked for (itself, or an object depending on it).
    pub dlopen: Option<String>,
    /// Names the loads of it asked for, in first-asked order.
    pub names: Vec<String>,
    /// Load bias (`l_addr`).
    pub base: Option<u64>,
    /// Its first span's beginning.
    pub first_ns: i64,
    /// search + map + relocate + init.
    pub loader_ns: i64,
    /// ld.so relocated it (a `relocate` span).
    pub relocated: bool,
    pub search_ns: i64,
    pub map_ns: i64,
    pub relocate_ns: i64,
    /// `call_init`, its initializers included.
    pub init_ns: i64,
    /// Loads that found it already loaded (no search, no map).
    pub references: u64,
    /// Loads that never returned (ld.so gave up: a library not found).
    pub failed_loads: u64,
    pub opens_tried: u64,
    /// Opens that returned an error (result < 0).
    pub opens_failed: u64,
    /// Each open attempt of its search, in order.
    pub opens: Vec<OpenAttempt>,
    /// From its file's ELF; None when it could not be read (see
    /// `relocations_note`).
    pub relocations: Option<ObjectRelocations>,
    pub relocations_note: Option<String>,
    /// Symbol lookups its relocation made, when counted (`trace
    /// --loader-lookups`).
    pub lookups: Option<u64>,
    /// In the order they ran.
    pub initializers: Vec<InitializerCall>,
    /// I/O in its phases, the sum of `io`.
    #[serde(flatten)]
    pub pages: PagesIo,
    /// Per phase with any I/O, in phase order.
    pub io: Vec<PhaseIo>,
}

/// Pages of one phase.
#[derive(Debug, Clone, Serialize)]
pub struct PhaseIo {
    pub phase: coldstart_profile::LoaderPhase,
    #[serde(flatten)]
    pub io: PagesIo,
}

/// One open the loader tried while searching for an object.
#[derive(Debug, Clone, Serialize)]
pub struct OpenAttempt {
    pub path: Option<String>,
    /// The fd, or -errno; None when it never returned.
    pub result: Option<i64>,
    pub t_begin_ns: i64,
    pub duration_ns: i64,
}

/// The relocations the loader applies to an object, by kind, read from its
/// file as `coldstart inspect` counts them.
#[derive(Debug, Clone, Serialize)]
pub struct ObjectRelocations {
    pub total: u64,
    /// R_*_RELATIVE entries and decoded DT_RELR addresses.
    pub relative: u64,
    /// Relocations naming a symbol (each a lookup), PLT slots included.
    pub symbolic: u64,
    /// Neither: R_*_IRELATIVE (an ifunc resolver call each), TLS offsets
    /// without a symbol.
    pub other: u64,
    /// R_*_JUMP_SLOT: PLT slots, bound at load time only with `bind_now`.
    pub plt: u64,
    /// Of `relative`, the addresses DT_RELR encodes.
    pub relr: u64,
    pub bind_now: bool,
    /// Type name -> count, DT_RELR excluded (it has no type).
    pub by_type: std::collections::BTreeMap<String, u64>,
}

/// One DT_INIT or DT_INIT_ARRAY entry ld.so called.
#[derive(Debug, Clone, Serialize)]
pub struct InitializerCall {
    /// `DT_INIT` or `DT_INIT_ARRAY[i]`.
    pub slot: Option<String>,
    /// The function's run-time address.
    pub target: Option<u64>,
    /// target - base: its address in the object's file.
    pub address: Option<u64>,
    /// The symbol covering `address`, demangled; None when no symbol does
    /// or the file could not be read.
    pub name: Option<String>,
    pub raw_name: Option<String>,
    pub t_begin_ns: i64,
    pub duration_ns: i64,
    /// False when it never returned before its object's init did, or the
    /// run ended.
    pub finished: bool,
}

/// One `dlopen` call.
#[derive(Debug, Clone, Serialize)]
pub struct DlopenCall {
    /// The task that called it.
    pub pid: i32,
    /// The name asked for.
    pub name: Option<String>,
    /// The object it returned.
    pub object: Option<String>,
    /// None when it never returned.
    pub succeeded: Option<bool>,
    pub t_begin_ns: i64,
    pub duration_ns: i64,
}
