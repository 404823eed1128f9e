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
    /// Files the traced program's processes read or touched, most bytes
    /// read first.
    pub files: Vec<FileReport>,
    /// Files only other processes (or kernel threads) read during the run:
    /// kept apart so they do not inflate the program's figures.
    pub outside_files: Vec<OutsideFile>,
    pub processes: Vec<ProcessInfo>,
    pub warnings: Vec<String>,
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
    /// The file's path, or `[dev MAJ:MIN inode N]` (`[in-kernel file: ...]` for
    /// major 0) when it was not resolved.
    pub path: String,
    pub resolved: bool,
    pub dev: u64,
    pub ino: u64,
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
    pub seek_forward_bytes: u64,
    pub seek_backward_bytes: u64,
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

/// A task of the traced tree.
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
    /// The end of the run when the span never ended.
    pub t_end_ns: i64,
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
