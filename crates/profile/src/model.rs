//! The rows of a profile as Rust values: what the tracer writes and what
//! every analysis reads.

pub use coldstart_system::identity::FileIdentity;
use serde::Serialize;

/// A run's row id.
pub type RunId = i64;
/// A file's row id (unique across runs of one profile).
pub type FileId = i64;

// The cache state a run started in belongs to the page-cache room; the
// profile stores it and re-exports it for its readers.
pub use coldstart_system::cache::CacheMode;

/// Why a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum EndReason {
    /// The program exited by itself.
    Exited,
    /// The program was killed by a signal it did not ask for.
    Signaled,
    /// A line of its output matched --ready-regex.
    ReadyRegex,
    /// The --ready-file appeared.
    ReadyFile,
    /// --timeout passed first.
    Timeout,
    /// The user interrupted coldstart.
    Interrupted,
    /// coldstart failed while recording.
    Failed,
}

impl EndReason {
    pub fn as_str(self) -> &'static str {
        match self {
            EndReason::Exited => "exited",
            EndReason::Signaled => "signaled",
            EndReason::ReadyRegex => "ready-regex",
            EndReason::ReadyFile => "ready-file",
            EndReason::Timeout => "timeout",
            EndReason::Interrupted => "interrupted",
            EndReason::Failed => "failed",
        }
    }

    pub fn parse(text: &str) -> Option<EndReason> {
        [
            EndReason::Exited,
            EndReason::Signaled,
            EndReason::ReadyRegex,
            EndReason::ReadyFile,
            EndReason::Timeout,
            EndReason::Interrupted,
            EndReason::Failed,
        ]
        .into_iter()
        .find(|reason| reason.as_str() == text)
    }

    /// True when the program reached the point the user called ready.
    pub fn is_ready(self) -> bool {
        matches!(
            self,
            EndReason::Exited | EndReason::ReadyRegex | EndReason::ReadyFile
        )
    }
}

/// What is known when a run starts.
#[derive(Debug, Clone, Serialize)]
pub struct RunStart {
    pub argv: Vec<String>,
    pub cwd: String,
    pub cache_mode: CacheMode,
    pub started_at_unix_ns: i64,
    pub kernel: String,
    pub page_size: u64,
    pub read_ahead_kb: Option<u64>,
    pub fault_around_bytes: Option<u64>,
    pub uid: u32,
    pub gid: u32,
    pub tool_version: String,
}

/// What is known when a run ends.
#[derive(Debug, Clone, Serialize)]
pub struct RunEnd {
    pub ended_ns: i64,
    pub end_reason: EndReason,
    pub exit_code: Option<i32>,
    pub exit_signal: Option<i32>,
    pub root_pid: Option<i32>,
}

/// A run as stored.
#[derive(Debug, Clone, Serialize)]
pub struct Run {
    pub id: RunId,
    #[serde(flatten)]
    pub start: RunStart,
    pub ended_ns: Option<i64>,
    /// None while the run was still being recorded (or the recorder died).
    pub end_reason: Option<EndReason>,
    pub exit_code: Option<i32>,
    pub exit_signal: Option<i32>,
    pub root_pid: Option<i32>,
    pub lost_events: u64,
    pub complete: bool,
    /// None when the dynamic loader was not traced; else what its trace
    /// could and could not see (see [`Profile::set_run_loader`](crate::Profile::set_run_loader)).
    pub loader: Option<String>,
}

/// A task seen during a run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Process {
    pub pid: i32,
    pub ppid: Option<i32>,
    pub tgid: Option<i32>,
    pub comm: Option<String>,
    pub exe: Option<String>,
    pub t_start_ns: Option<i64>,
    pub t_end_ns: Option<i64>,
    pub in_tree: bool,
}

impl Process {
    /// Whether the task carries the prefetcher's name
    /// ([`coldstart_system::process::PREFETCHER_COMM`]), in the traced tree
    /// or outside it. Which of those tasks served a run is
    /// `coldstart_analyze::loaded::prefetcher_tasks`'s to say.
    pub fn named_prefetcher(&self) -> bool {
        coldstart_system::process::is_prefetcher(self.comm.as_deref())
    }
}

/// A file whose pages appear in a run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct File {
    pub id: FileId,
    pub dev: u64,
    pub ino: u64,
    pub path: Option<String>,
    pub size: Option<u64>,
    pub mtime_ns: Option<i64>,
    pub build_id: Option<String>,
    pub opened_by_tree: bool,
    /// What the row holds; None in profiles older than schema 8.
    pub kind: Option<FileKind>,
    /// The path the program opened the file by, when that is not `path`:
    /// the overlay path of a layer's file, or the path inside the
    /// program's own mount namespace.
    pub opened_as: Option<String>,
    /// What a row without a path holds ("ext4 metadata of /dev/vda"), or
    /// why it has no path.
    pub note: Option<String>,
}

/// What a file row holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FileKind {
    /// A file's data, read from a device.
    File,
    /// A filesystem's own metadata: a block device's cache (ext4's inode
    /// tables and directories), btrfs's trees.
    Metadata,
    /// Pages in memory only: tmpfs, shared memory, memfd, /proc.
    Memory,
}

impl FileKind {
    pub fn name(self) -> &'static str {
        match self {
            FileKind::File => "file",
            FileKind::Metadata => "metadata",
            FileKind::Memory => "memory",
        }
    }

    pub fn from_name(name: &str) -> Option<FileKind> {
        [FileKind::File, FileKind::Metadata, FileKind::Memory]
            .into_iter()
            .find(|k| k.name() == name)
    }
}

impl File {
    /// The size, modification time and build-id the run saw, when the
    /// recorder could stat the file (it records size and time together).
    pub fn identity(&self) -> Option<FileIdentity> {
        Some(FileIdentity {
            size: self.size?,
            mtime_ns: self.mtime_ns,
            build_id: self.build_id.clone(),
        })
    }

    /// The major number of the file's device (libc's decoding of `st_dev`,
    /// as bench and the page-cache code use too).
    pub fn dev_major(&self) -> u32 {
        libc::major(self.dev)
    }

    /// The minor number of the file's device.
    pub fn dev_minor(&self) -> u32 {
        libc::minor(self.dev)
    }

    /// Whether the file is one of the kernel's own: a block device's cache
    /// holding filesystem metadata, btrfs's trees, shared memory, memfd,
    /// tmpfs, /proc. Its pages are not read from a file on a device, so it
    /// is never planned, never a miss, and its offsets are not a file's.
    /// Profiles older than schema 8 did not record it: there, device major
    /// 0 tells (which misjudged btrfs subvolumes and overlays).
    pub fn in_kernel(&self) -> bool {
        match self.kind {
            Some(kind) => kind != FileKind::File,
            None => self.dev_major() == 0,
        }
    }
}

/// A file to insert: everything but the id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewFile {
    pub dev: u64,
    pub ino: u64,
    pub path: Option<String>,
    pub size: Option<u64>,
    pub mtime_ns: Option<i64>,
    pub build_id: Option<String>,
    pub opened_by_tree: bool,
    pub kind: Option<FileKind>,
    pub opened_as: Option<String>,
    pub note: Option<String>,
}

/// What happened to a page range.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PageEventKind {
    /// Entered the page cache: read from disk.
    Read = 0,
    /// A page fault on the page.
    Fault = 1,
    /// Mapped by fault-around without its own fault.
    Map = 2,
    /// Accessed through read() and friends.
    Access = 3,
    /// Left the page cache.
    Evict = 4,
    /// A user page fault at an address mapping this page: the page was
    /// touched, whether or not fault-around had mapped it already.
    Touch = 5,
}

impl PageEventKind {
    pub const ALL: [PageEventKind; 6] = [
        PageEventKind::Read,
        PageEventKind::Fault,
        PageEventKind::Map,
        PageEventKind::Access,
        PageEventKind::Evict,
        PageEventKind::Touch,
    ];

    pub fn code(self) -> i64 {
        self as i64
    }

    pub fn from_code(code: i64) -> Option<PageEventKind> {
        PageEventKind::ALL.into_iter().find(|k| k.code() == code)
    }

    /// Whether the program itself asked for the event's pages: a fault, a
    /// read() (access) or a user fault (touch). Reads may be readahead,
    /// fault-around mappings are the kernel's guess, evictions ask nothing.
    pub fn is_demand(self) -> bool {
        match self {
            PageEventKind::Fault | PageEventKind::Access | PageEventKind::Touch => true,
            PageEventKind::Read | PageEventKind::Map | PageEventKind::Evict => false,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            PageEventKind::Read => "read",
            PageEventKind::Fault => "fault",
            PageEventKind::Map => "map",
            PageEventKind::Access => "access",
            PageEventKind::Evict => "evict",
            PageEventKind::Touch => "touch",
        }
    }
}

/// One page event: `npages` pages from `page` of a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct PageEvent {
    pub t_ns: i64,
    pub pid: i32,
    pub file_id: FileId,
    pub page: u64,
    pub npages: u64,
    pub kind: PageEventKind,
}

/// Which readahead path the kernel took, or the program's request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ReadaheadKind {
    Sync,
    Async,
    Order,
    /// Pages the program asked for: they entered the cache during its
    /// readahead(2), or fadvise64 or madvise with WILLNEED. One row per
    /// contiguous run of pages a call brought in (`page`, `size`); the other
    /// fields are 0 or absent.
    Asked,
}

impl ReadaheadKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ReadaheadKind::Sync => "sync",
            ReadaheadKind::Async => "async",
            ReadaheadKind::Order => "order",
            ReadaheadKind::Asked => "asked",
        }
    }

    pub fn parse(text: &str) -> Option<ReadaheadKind> {
        match text {
            "sync" => Some(ReadaheadKind::Sync),
            "async" => Some(ReadaheadKind::Async),
            "order" => Some(ReadaheadKind::Order),
            "asked" => Some(ReadaheadKind::Asked),
            _ => None,
        }
    }
}

/// A readahead decision by the kernel.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Readahead {
    pub t_ns: i64,
    pub pid: i32,
    pub file_id: FileId,
    pub kind: ReadaheadKind,
    pub page: u64,
    pub size: u64,
    pub async_size: u64,
    pub ra_pages: u64,
    pub mmap_miss: Option<u64>,
    pub prev_pos: Option<i64>,
    pub req_count: Option<u64>,
}

/// A named instant of a run, such as `ready`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Mark {
    pub t_ns: i64,
    pub name: String,
}

/// A lookup that had to read the inode table block holding a file's inode
/// from the disk (ext4:ext4_load_inode): filesystem metadata the start
/// waited for. The file row names the inode (a directory, often).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct InodeLoad {
    pub t_ns: i64,
    /// The task that waited.
    pub pid: i32,
    pub file_id: FileId,
}

/// A name a task of the run handed to a file system call (open, stat,
/// access, exec, ...), whether or not it existed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PathLookup {
    pub t_ns: i64,
    /// The task that made the call.
    pub pid: i32,
    /// The system call, as its tracepoint names it.
    pub call: String,
    /// The name as an absolute path, or why it was not recorded.
    pub path: Result<String, LookupMissed>,
}

/// Why a lookup's name was not recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum LookupMissed {
    /// The kernel could not copy it (its page was not present).
    Unreadable,
    TooLong,
    /// Relative, and its directory could not be told.
    Unresolved,
    NotUtf8,
}

impl LookupMissed {
    pub const ALL: [LookupMissed; 4] = [
        LookupMissed::Unreadable,
        LookupMissed::TooLong,
        LookupMissed::Unresolved,
        LookupMissed::NotUtf8,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            LookupMissed::Unreadable => "unreadable",
            LookupMissed::TooLong => "too long",
            LookupMissed::Unresolved => "unresolved",
            LookupMissed::NotUtf8 => "not utf-8",
        }
    }

    pub fn parse(text: &str) -> Option<LookupMissed> {
        LookupMissed::ALL.into_iter().find(|m| m.as_str() == text)
    }
}

/// Events one CPU's trace buffer dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct LostEvents {
    pub cpu: u32,
    pub events: u64,
}

/// A function a process called during a run, as compiler instrumentation
/// recorded it: where it sits in a file, when it was first called and how
/// often it was entered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FunctionEvent {
    /// The process (its tgid) whose instrumentation recorded the calls.
    pub pid: i32,
    /// Rank of the function's first call among all first calls of `pid`,
    /// from 1; unique within the process.
    pub first_seq: u64,
    /// The file holding the function. When writing, a negative id names
    /// one of the files written along with it, as in [`Batch`](crate::Batch).
    pub file_id: FileId,
    /// File offset of the function: its symbol's start when it is named,
    /// else the address the instrumentation recorded, as a file offset.
    pub offset: u64,
    /// Bytes of the symbol; None when unnamed.
    pub size: Option<u64>,
    /// Raw (mangled) symbol name; None when no symbol covers the address.
    pub symbol: Option<String>,
    /// The first call, ns after the program was started.
    pub first_t_ns: i64,
    /// Entries counted until the process wrote its record.
    pub calls: u64,
}

/// What the dynamic loader (ld.so) was doing during a [`LoaderSpan`], as
/// uprobes on its internal functions saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LoaderPhase {
    /// From exec until ld.so has loaded and relocated the initial set of
    /// objects and is about to run their initializers (`_dl_start_user`):
    /// that set's loads and relocations lie inside it.
    Start,
    /// `_dl_map_object`: finding and mapping one object.
    Load,
    /// The part of a load before a file was chosen.
    Search,
    /// `_dl_map_object_from_fd`: mapping the chosen file.
    Map,
    /// One open attempt by the loader.
    Open,
    /// `_dl_relocate_object`.
    Relocate,
    /// `call_init` of one object.
    Init,
    /// One DT_INIT or DT_INIT_ARRAY entry.
    Initializer,
    /// `_dl_open`.
    Dlopen,
    /// The jump to the program's entry: an instant.
    Entry,
}

impl LoaderPhase {
    pub const ALL: [LoaderPhase; 10] = [
        LoaderPhase::Start,
        LoaderPhase::Load,
        LoaderPhase::Search,
        LoaderPhase::Map,
        LoaderPhase::Open,
        LoaderPhase::Relocate,
        LoaderPhase::Init,
        LoaderPhase::Initializer,
        LoaderPhase::Dlopen,
        LoaderPhase::Entry,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            LoaderPhase::Start => "start",
            LoaderPhase::Load => "load",
            LoaderPhase::Search => "search",
            LoaderPhase::Map => "map",
            LoaderPhase::Open => "open",
            LoaderPhase::Relocate => "relocate",
            LoaderPhase::Init => "init",
            LoaderPhase::Initializer => "initializer",
            LoaderPhase::Dlopen => "dlopen",
            LoaderPhase::Entry => "entry",
        }
    }

    pub fn parse(text: &str) -> Option<LoaderPhase> {
        LoaderPhase::ALL
            .into_iter()
            .find(|phase| phase.as_str() == text)
    }
}

/// An interval the dynamic loader spent on one thing, for one task.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LoaderSpan {
    /// The task (thread) that ran it.
    pub pid: i32,
    pub phase: LoaderPhase,
    /// The object as the loader names it (link_map `l_name`, a path; ""
    /// is the main program), or the name asked for.
    pub object: Option<String>,
    /// The object's file, when known. When writing, a negative id names
    /// one of the files written along with it, as in [`Batch`](crate::Batch).
    pub file_id: Option<FileId>,
    pub t_begin_ns: i64,
    /// None when it never returned before the run ended.
    pub t_end_ns: Option<i64>,
    /// Load bias (`l_addr`), when known.
    pub base: Option<u64>,
    /// `initializer`: the function's address; `entry`: the program's entry.
    pub target: Option<u64>,
    /// `open`: the path tried; `load`, `dlopen`: the name asked for;
    /// `initializer`: `DT_INIT` or `DT_INIT_ARRAY[i]`.
    pub detail: Option<String>,
    /// `open`: the fd returned or -errno; `dlopen`: 1 when it returned an
    /// object, 0 when it failed.
    pub result: Option<i64>,
    /// `relocate`: symbol lookups counted during it, when counted.
    pub lookups: Option<u64>,
    /// Nesting among this task's spans, 0 outermost.
    pub depth: u32,
    /// Loader probe hits on its task after its beginning, up to and
    /// including the one that ended it: the hits whose cost it holds. For
    /// `entry`, the hits since the exec. None when it never ended.
    pub probe_hits: Option<u64>,
}

/// A block run's row id. Block runs are numbered apart from [`RunId`]s.
pub type BlockRunId = i64;

/// A block-level startup trace: the program ran under a ptrace tracer with
/// a one-shot breakpoint on every basic block its files' block maps
/// (`.llvm_bb_addr_map`) name. A recording of its own kind, not a [`Run`]:
/// it has no page events, and no analysis of runs sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BlockRun {
    /// Ignored when writing; the profile numbers block runs itself.
    pub id: BlockRunId,
    pub argv: Vec<String>,
    pub cwd: String,
    /// Wall clock when the program was started.
    pub started_at_unix_ns: i64,
    /// From the start to the end of the trace.
    pub duration_ns: u64,
    pub end_reason: BlockEndReason,
    pub exit_code: Option<i32>,
    pub exit_signal: Option<i32>,
    /// Who the program ran as.
    pub uid: u32,
    pub gid: u32,
    /// The process the tracer started.
    pub root_pid: i32,
    /// Breakpoint traps the tracer handled: first runs of blocks, threads
    /// racing to one, and the dynamic loader's notifications.
    pub traps: u64,
    pub tool_version: String,
}

/// Why a block run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum BlockEndReason {
    /// Every traced process exited.
    Exited,
    /// The timeout passed and the program was killed.
    Timeout,
    /// The user interrupted coldstart and the program was killed.
    Interrupted,
}

impl BlockEndReason {
    pub const ALL: [BlockEndReason; 3] = [
        BlockEndReason::Exited,
        BlockEndReason::Timeout,
        BlockEndReason::Interrupted,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            BlockEndReason::Exited => "exited",
            BlockEndReason::Timeout => "timeout",
            BlockEndReason::Interrupted => "interrupted",
        }
    }

    pub fn parse(text: &str) -> Option<BlockEndReason> {
        BlockEndReason::ALL
            .into_iter()
            .find(|reason| reason.as_str() == text)
    }
}

/// A file mapped executable during a block run, traced or not.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BlockFile {
    /// Its number in the run: the files of a run are 0, 1, ... in order,
    /// so `files[event.file as usize]` is the file a [`BlockEvent`] names.
    pub file: u32,
    /// The path it was mapped from; need not be UTF-8.
    #[serde(serialize_with = "lossy_path")]
    pub path: std::path::PathBuf,
    pub dev: u64,
    pub ino: u64,
    pub size: u64,
    pub mtime_ns: i64,
    pub build_id: Option<String>,
    /// It had a block map and its blocks were traced.
    pub has_map: bool,
    /// Why its block map could not be read, when it could not.
    pub problem: Option<String>,
    /// Breakpoints written in it, over every process that mapped it.
    pub armed: u64,
}

/// A basic block's first run in one process of a block run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BlockEvent {
    /// The process (tgid) that ran it.
    pub pid: i32,
    /// Rank of this first run among the process's first runs, from 1;
    /// unique within the process.
    pub first_seq: u64,
    /// The [`BlockFile::file`] holding the block.
    pub file: u32,
    /// Link-time address of the entry of the block's function.
    pub function: u64,
    /// Raw (mangled) name of the function; None when it has none.
    pub symbol: Option<String>,
    /// The block's id in its function's block map.
    pub bb_id: u32,
    /// Link-time address of the block.
    pub address: u64,
    /// File offset of the block.
    pub offset: u64,
    /// Bytes of the block.
    pub size: u64,
    /// The first run, ns after the program was started.
    pub first_t_ns: i64,
}

/// Paths need not be UTF-8, and serde refuses those that are not; a
/// report should still show them.
fn lossy_path<S: serde::Serializer>(
    path: &std::path::Path,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(&path.to_string_lossy())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn on_device(dev: u64) -> File {
        File {
            id: 1,
            dev,
            ino: 2,
            path: None,
            size: None,
            mtime_ns: None,
            build_id: None,
            opened_by_tree: false,
            kind: None,
            opened_as: None,
            note: None,
        }
    }

    #[test]
    fn device_numbers_decode_as_glibc_decodes_them() {
        let numbers = [
            (0, 0),
            (0, 23),
            (8, 1),
            (259, 3),
            (0xfff, 0xff),
            (0x1000, 0x100),
            (0xffff_ffff, 0xffff_ffff),
            (0x1234_5678, 0x9abc_def0),
        ];
        for (major, minor) in numbers {
            let dev = libc::makedev(major, minor);
            let file = on_device(dev);
            assert_eq!((file.dev_major(), file.dev_minor()), (major, minor));
            assert_eq!(file.in_kernel(), major == 0, "{major}:{minor}");
        }
    }

    #[test]
    fn demand_is_a_fault_a_read_call_or_a_user_fault() {
        let demanded: Vec<PageEventKind> = PageEventKind::ALL
            .into_iter()
            .filter(|k| k.is_demand())
            .collect();
        assert_eq!(
            demanded,
            [
                PageEventKind::Fault,
                PageEventKind::Access,
                PageEventKind::Touch
            ]
        );
    }
}
