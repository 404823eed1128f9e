//! Replaying a plan: worker threads take the plan's extents in order and ask
//! the kernel to bring them into the page cache, skipping what is already
//! there, so the program finds its pages resident when it reaches them. Each
//! file is opened once and checked against the identity it had when traced:
//! a missing file, or one whose size or modification time changed, is
//! skipped, never read; one whose build-id differs is caught by a check
//! beside the workers, and its extents not yet requested are skipped. The
//! plan's lookups are looked up in the order the start needs them, on
//! threads of their own, so the inode tables and directories the program's
//! path lookups need are cached.
//! Each worker keeps a bounded window of its requests in flight
//! ([`DEFAULT_WINDOW_BYTES`]), so a page the program misses is read soon
//! rather than behind the rest of the plan.
//!
//! A plan may be hostile (a service replays plans as root for the user who
//! started a program), so nothing is opened before it is known to be a
//! regular file on a filesystem with data: a FIFO, device or socket is
//! never opened, and no open can block on one (`open_checked`). Paths
//! under /proc, /sys and /dev are refused; with
//! [`ReplayOptions::no_symlinks`], so are paths through a symbolic link;
//! with [`ReplayOptions::open_as`], every thread that opens or looks up a
//! file does so as that user.

use crate::model::{Lookup, Plan, PlanFile};
use coldstart_system::build_id::build_id_of_open;
use coldstart_system::cache::{self, FaultIn};
use coldstart_system::credentials::Credentials;
use coldstart_system::identity::{Change, FileIdentity};
use coldstart_system::path_handle::{self, PathHandle, Symlinks};
use coldstart_system::{filesystem, process, readahead};
use serde::Serialize;
use std::collections::VecDeque;
use std::fs::{File, FileType};
use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Component, Path};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

/// How pages are brought in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Method {
    /// readahead(2) of each extent: queues the reads and returns.
    Readahead,
    /// posix_fadvise(WILLNEED) of each extent: the same through fadvise.
    Fadvise,
    /// pread(2) of each extent into a buffer: waits for each read.
    Pread,
    /// mmap and madvise(MADV_POPULATE_READ) of each extent: waits, and
    /// leaves nothing mapped.
    Populate,
    /// Peer: readahead(2) of every file of the plan, whole (the ld.so
    /// "readahead every library" idea).
    WholeFile,
    /// Peer: map every file of the plan and touch each page (vmtouch -t).
    TouchWhole,
}

impl Method {
    pub const fn as_str(self) -> &'static str {
        match self {
            Method::Readahead => "readahead",
            Method::Fadvise => "fadvise",
            Method::Pread => "pread",
            Method::Populate => "populate",
            Method::WholeFile => "whole-file",
            Method::TouchWhole => "touch-whole",
        }
    }

    pub const ALL: [Method; 6] = [
        Method::Readahead,
        Method::Fadvise,
        Method::Pread,
        Method::Populate,
        Method::WholeFile,
        Method::TouchWhole,
    ];

    pub fn parse(text: &str) -> Option<Method> {
        Method::ALL.into_iter().find(|m| m.as_str() == text)
    }

    fn whole_files(self) -> bool {
        matches!(self, Method::WholeFile | Method::TouchWhole)
    }

    /// Whether a call queues its reads and returns before they are done,
    /// so that a replay can have them in flight. The whole-file peer does,
    /// but is left unbounded, as the idea it stands for is.
    fn queues_reads(self) -> bool {
        matches!(self, Method::Readahead | Method::Fadvise)
    }
}

/// The name of the prefetcher's threads and the test of it, where the
/// profile's readers find them too.
pub use coldstart_system::process::{PREFETCHER_COMM, is_prefetcher};

/// Prefetch threads when not told: the CPUs, at least 2 and at most 8.
/// readahead(2) only waits for the file's block mapping and page
/// allocation, so a few threads keep the device busy; more compete with
/// the starting program for the CPUs. Measured on 2 CPUs: the sample app
/// started cold in 31.1 ms with 8 threads, 25.8 ms with 2 and 26.5 ms
/// without a plan; Firefox ESR in 1155 ms with 8 and 1130 ms with 2.
pub fn default_threads() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(2)
        .clamp(2, 8)
}

/// How much of the plan the prefetcher keeps requested from the device and
/// not yet read, when not told: 2 MiB, shared among the workers.
///
/// readahead(2) returns once its reads are queued, so an unbounded replay
/// queues the plan as fast as the device takes requests: 64 MiB of
/// Chromium's plan within its first 80 ms here (virtio, 128 tags, requests
/// of up to 4 MiB). A page the program misses meanwhile is read after
/// them: single 4 KiB reads issued during an unbounded prefill waited up to
/// 28-54 ms, against 7-11 ms with a window of 0.5-2 MiB, while the prefill
/// itself took as long with any window down to 512 KiB (Chromium's plan
/// 197-216 ms, Firefox's 142-152 ms). Served cold starts with a 2 MiB
/// window against none, 16 interleaved rounds each, medians: Chromium
/// 657/724 and 678/711 ms at read_ahead_kb 128, 650/686 and 702/702 ms at
/// 8192; Firefox ESR 632/647 ms at 128 and 671/670 at 8192; LibreOffice
/// 1116/1117 ms at 128 and 1082/1098 at 8192: up to 67 ms faster, and
/// never more than 1 ms slower. Chromium at 8192 read 6-11 MiB more
/// with it: readahead windows of its own around pages it reached before
/// the prefetcher. On plans refined through starts with the window, 20
/// rounds: faster in all six cells, by 15-68 ms (bench/README.md).
pub const DEFAULT_WINDOW_BYTES: u64 = 2 << 20;

#[derive(Debug, Clone)]
pub struct ReplayOptions {
    pub threads: usize,
    pub method: Method,
    /// The most bytes of the plan requested and not yet read, shared among
    /// the threads; 0 sets no bound. Only the methods that queue reads
    /// and return (readahead, fadvise) have reads in flight to bound.
    pub window_bytes: u64,
    /// Refuse a planned path (of a file or a lookup) that goes through a
    /// symbolic link, /proc's magic links included: for a plan someone
    /// else wrote. Paths under /proc, /sys and /dev are refused either way.
    pub no_symlinks: bool,
    /// Open and look up the plan's files as this user: every replay thread
    /// that may open or look up a file takes these credentials first (only
    /// itself: see [`Credentials`]), so the kernel grants exactly what the
    /// user may read. For a service replaying, as root, the plan of the
    /// user who started a program. None: as this process.
    pub open_as: Option<Credentials>,
}

/// Why a file of the plan was not prefetched.
#[derive(Debug, Clone, Serialize)]
pub struct Skipped {
    pub path: String,
    pub reason: String,
}

/// What a replay did.
#[derive(Debug, Clone, Serialize)]
pub struct ReplayReport {
    pub method: Method,
    pub threads: usize,
    pub files_opened: usize,
    pub files_skipped: Vec<Skipped>,
    /// Lookups of the plan that resolved (the path exists now).
    pub lookups_done: usize,
    /// Lookups that did not: missing paths and other errors.
    pub lookups_missing: usize,
    /// Files of the plan with extents on ext4 whose extent tree was asked
    /// into the cache ahead of their extents (a tree of at most four
    /// extents is in the inode: nothing more is read for it).
    pub extent_trees: usize,
    /// Extents (or whole files) the kernel was asked for.
    pub extents_requested: u64,
    /// Extents found wholly resident and left alone.
    pub extents_resident: u64,
    pub bytes_requested: u64,
    /// The bound on bytes in flight the replay kept (0: none).
    pub window_bytes: u64,
    /// Requested extents the workers waited for, to stay within the window.
    pub waits: u64,
    /// Errors from the prefetch calls themselves (rare: I/O errors), and
    /// threads that could not take [`ReplayOptions::open_as`] (they stopped
    /// before opening anything).
    pub errors: Vec<String>,
    pub elapsed_ms: f64,
    /// The replay was stopped before the end of the plan.
    pub stopped: bool,
}

/// One opened file, or why it could not be used.
type Opened = Result<File, String>;

struct Shared<'a> {
    plan: &'a Plan,
    method: Method,
    symlinks: Symlinks,
    open_as: Option<&'a Credentials>,
    files: Vec<OnceLock<Opened>>,
    /// Why a file that opened as traced is not the traced file after all
    /// (its build-id differs), once the check has said so.
    rejected: Vec<OnceLock<String>>,
    /// Files whose cache state cachestat may not tell us (EPERM): always
    /// prefetched; the kernel skips resident pages itself, cheaply.
    no_cachestat: Vec<AtomicBool>,
    next: AtomicUsize,
    requested: AtomicU64,
    resident: AtomicU64,
    bytes: AtomicU64,
    waits: AtomicU64,
    extent_trees: AtomicUsize,
    errors: Mutex<Vec<String>>,
    lead_bytes: u64,
    on_lead: &'a (dyn Fn() + Sync),
    lead_told: AtomicBool,
}

/// Replays `plan` on `options.threads` threads until it is done or `stop`
/// is raised. Never fails: problems are counted in the report.
pub fn replay(plan: &Plan, options: &ReplayOptions, stop: &AtomicBool) -> ReplayReport {
    replay_with_lead(plan, options, stop, 0, &|| {})
}

/// [`replay`], calling `on_lead` once: when the requests made reach
/// `lead_bytes` (each request counted once the call that makes it has
/// returned), or when the replay ends short of that.
pub fn replay_with_lead(
    plan: &Plan,
    options: &ReplayOptions,
    stop: &AtomicBool,
    lead_bytes: u64,
    on_lead: &(dyn Fn() + Sync),
) -> ReplayReport {
    let started = Instant::now();
    let shared = Shared::new(plan, options, lead_bytes, on_lead);
    reserve_descriptors(plan.files.len());
    let schedule = Schedule::new(plan, options);
    let looked_up = run_threads(&shared, &schedule, stop);
    shared.tell_lead();
    let (files_opened, files_skipped) = shared.file_outcomes();
    ReplayReport {
        method: options.method,
        threads: schedule.threads,
        files_opened,
        files_skipped,
        lookups_done: looked_up.done,
        lookups_missing: looked_up.missing,
        extent_trees: shared.extent_trees.load(Ordering::Relaxed),
        extents_requested: shared.requested.load(Ordering::Relaxed),
        extents_resident: shared.resident.load(Ordering::Relaxed),
        bytes_requested: shared.bytes.load(Ordering::Relaxed),
        window_bytes: if schedule.window > 0 {
            options.window_bytes
        } else {
            0
        },
        waits: shared.waits.load(Ordering::Relaxed),
        stopped: schedule.stopped_short(&shared, stop, looked_up),
        errors: shared.errors.into_inner().unwrap_or_default(),
        elapsed_ms: started.elapsed().as_secs_f64() * 1e3,
    }
}

/// What a replay's threads are to do, by its method.
///
/// Work items: the plan's extents in order (for the whole-file peers, one
/// item per file), each file opened and checked when its first extent
/// comes up. Beside the workers, one more thread opens every file of the
/// plan in its order: the files only opened (warming their path lookup and
/// inode for the program) and the others ahead of their extents. Opening
/// them all before the first extent, as this did at first, kept every
/// worker off the device for the first 50-100 ms of a cold Firefox start
/// (226 files, each with its build-id read from the device), while the
/// program raced ahead and read its libraries itself with readahead windows
/// around them. Once every file is open, that thread checks their
/// build-ids, which the workers do not wait for. Right after opening a file
/// with extents to read, it has ext4 read the file's extent tree
/// ([`Shared::precache_extents`]). More threads look up the plan's lookups
/// in need order; the whole-file peers make none.
struct Schedule<'a> {
    lookups: &'a [Lookup],
    /// Work items the workers take in turn.
    items: usize,
    /// Per file of the plan, whether its extent tree is read: those with
    /// extents to read. The whole-file peers stay the ideas they stand for.
    has_extents: Vec<bool>,
    threads: usize,
    /// Each worker's share of the bytes in flight; 0 for no bound.
    window: u64,
}

impl<'a> Schedule<'a> {
    fn new(plan: &'a Plan, options: &ReplayOptions) -> Schedule<'a> {
        let whole_files = options.method.whole_files();
        let lookups: &[Lookup] = if whole_files { &[] } else { &plan.lookups };
        let items = if whole_files {
            plan.files.len()
        } else {
            plan.extents.len()
        };
        let mut has_extents = vec![false; plan.files.len()];
        if !whole_files {
            for extent in &plan.extents {
                if let Some(slot) = has_extents.get_mut(extent.file) {
                    *slot = true;
                }
            }
        }
        let threads = options.threads.max(1);
        let window = if options.method.queues_reads() {
            options.window_bytes.div_ceil(threads as u64)
        } else {
            0
        };
        Schedule {
            lookups,
            items,
            has_extents,
            threads,
            window,
        }
    }

    /// Whether `stop` ended the replay with work items or lookups left.
    fn stopped_short(&self, shared: &Shared, stop: &AtomicBool, looked_up: LookedUp) -> bool {
        stop.load(Ordering::Relaxed)
            && (shared.next.load(Ordering::Relaxed) < self.items
                || looked_up.done + looked_up.missing < self.lookups.len())
    }
}

/// Runs the lookup threads, the opener and the workers until they are done
/// or stopped. The threads are created under the prefetcher's name; the
/// calling thread gets its own back afterwards (with --wait it is the
/// thread that then becomes the program).
fn run_threads(shared: &Shared, schedule: &Schedule, stop: &AtomicBool) -> LookedUp {
    let own_name = process::thread_name();
    process::set_thread_name(PREFETCHER_COMM);
    std::thread::scope(|scope| {
        let lookups = schedule.lookups;
        let looked_up =
            (!lookups.is_empty()).then(|| scope.spawn(|| shared.look_up(lookups, stop)));
        scope.spawn(|| shared.open_all_then_check(&schedule.has_extents, stop));
        for _ in 0..schedule.threads {
            scope.spawn(|| shared.work_through(schedule.items, schedule.window, stop));
        }
        if let Some(name) = &own_name {
            process::set_thread_name(name);
        }
        looked_up
            .and_then(|thread| thread.join().ok())
            .unwrap_or_default()
    })
}

/// How many lookups resolved and how many did not.
#[derive(Debug, Default, Clone, Copy)]
struct LookedUp {
    done: usize,
    missing: usize,
}

/// The largest directory whose entries a lookup reads: enough for the
/// directories a start walks (a 4 KiB block holds about a hundred entries),
/// short of reading a huge one (a mail spool, a cache) for one name.
const MAX_DIRECTORY_READ: u64 = 64 << 10;

/// Threads that make the plan's lookups. Each lookup that misses waits for
/// one synchronous metadata read; several in flight keep ahead of the
/// program, which starts at the same moment and makes its own lookups in
/// the same order. In traced served Firefox starts (read_ahead_kb 8192, 4
/// each) the program still read 220-255 metadata blocks itself with one
/// thread in inode order, 110-179 with one in need order, 109-144 with
/// four (bench/README.md).
const LOOKUP_THREADS: usize = 4;

/// The order lookups are made in: need time, then inode number. Plans
/// written before need order (format 2 wrote inode order) are replayed in
/// need order too.
fn lookup_order(lookups: &[Lookup]) -> Vec<&Lookup> {
    let mut in_order: Vec<&Lookup> = lookups.iter().collect();
    in_order.sort_by_key(|l| (l.need_ns, l.ino));
    in_order
}

/// One lookup, as [`Shared::look_up`] describes; whether the path exists
/// (and was not refused). Opens nothing but a directory to read, and that
/// through the descriptor that was checked to be one.
fn look_up_one(path: &str, symlinks: Symlinks) -> bool {
    if kernel_directory(path).is_some() {
        return false;
    }
    // O_PATH without following: the walk reads the inode, as lstat would.
    let Ok(handle) = PathHandle::open_no_follow(Path::new(path), symlinks) else {
        return false;
    };
    let Ok(meta) = handle.metadata() else {
        return false;
    };
    if meta.is_symlink() && symlinks == Symlinks::Follow {
        // The program's open or stat follows it.
        let _ = PathHandle::open(Path::new(path), symlinks).map(|target| target.metadata());
    }
    if meta.is_dir() && meta.size() <= MAX_DIRECTORY_READ {
        cache::read_directory_once(&handle);
    }
    true
}

/// A range of a plan file the kernel was asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Requested {
    file: usize,
    offset: u64,
    len: u64,
}

/// One worker's requests that may still be in flight, oldest first.
#[derive(Debug)]
struct InFlight {
    /// The most bytes this worker keeps in flight; 0 for no bound.
    window: u64,
    requests: VecDeque<Requested>,
    bytes: u64,
}

impl InFlight {
    fn new(window: u64) -> InFlight {
        InFlight {
            window,
            requests: VecDeque::new(),
            bytes: 0,
        }
    }

    /// Records a request just made; returns the oldest ones to wait for,
    /// in order, until the rest fit the window. The newest is never among
    /// them, however large: the device is never left without work.
    fn add(&mut self, request: Requested) -> Vec<Requested> {
        if self.window == 0 {
            return Vec::new();
        }
        self.requests.push_back(request);
        self.bytes += request.len;
        let mut oldest = Vec::new();
        while self.bytes > self.window && self.requests.len() > 1 {
            let done = self.requests.pop_front().expect("more than one request");
            self.bytes -= done.len;
            oldest.push(done);
        }
        oldest
    }
}

impl<'a> Shared<'a> {
    fn new(
        plan: &'a Plan,
        options: &'a ReplayOptions,
        lead_bytes: u64,
        on_lead: &'a (dyn Fn() + Sync),
    ) -> Shared<'a> {
        Shared {
            plan,
            method: options.method,
            symlinks: if options.no_symlinks {
                Symlinks::Refuse
            } else {
                Symlinks::Follow
            },
            open_as: options.open_as.as_ref(),
            files: plan.files.iter().map(|_| OnceLock::new()).collect(),
            rejected: plan.files.iter().map(|_| OnceLock::new()).collect(),
            no_cachestat: plan.files.iter().map(|_| AtomicBool::new(false)).collect(),
            next: AtomicUsize::new(0),
            requested: AtomicU64::new(0),
            resident: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            waits: AtomicU64::new(0),
            extent_trees: AtomicUsize::new(0),
            errors: Mutex::new(Vec::new()),
            lead_bytes,
            on_lead,
            lead_told: AtomicBool::new(false),
        }
    }

    /// Takes [`ReplayOptions::open_as`] on the calling thread, if set;
    /// false when it cannot, said among the errors: the thread must then
    /// stop without opening or reading anything.
    fn read_as_user(&self, thread: &str) -> bool {
        let Some(credentials) = self.open_as else {
            return true;
        };
        match credentials.assume_on_this_thread() {
            Ok(()) => true,
            Err(e) => {
                self.error(format!(
                    "{thread} cannot read as uid {} gid {}: {e}; it stopped, having read nothing",
                    credentials.uid, credentials.gid
                ));
                false
            }
        }
    }

    fn error(&self, message: String) {
        if let Ok(mut errors) = self.errors.lock() {
            errors.push(message);
        }
    }

    /// Looks up each path in the order the start needs it (then by inode
    /// number), on [`LOOKUP_THREADS`] threads taking the next from one
    /// queue, not following a final symlink: the filesystem reads the
    /// inode-table block holding each uncached inode (ext4, with
    /// `inode_readahead_blks`, the aligned run of blocks around it), so
    /// neighbours come in with the same read. A small directory also has its
    /// entries read once, caching the blocks the program's lookups in it
    /// walk, negative ones included. Paths under /proc, /sys and /dev, and
    /// with `no_symlinks` paths through a symbolic link, count as missing.
    /// Stops when `stop` is raised; never fails.
    fn look_up(&self, lookups: &[Lookup], stop: &AtomicBool) -> LookedUp {
        let in_order = lookup_order(lookups);
        let next = AtomicUsize::new(0);
        let done = AtomicUsize::new(0);
        let missing = AtomicUsize::new(0);
        std::thread::scope(|scope| {
            for _ in 0..LOOKUP_THREADS.min(in_order.len()) {
                scope.spawn(|| {
                    if !self.read_as_user("a lookup thread") {
                        return;
                    }
                    while !stop.load(Ordering::Relaxed) {
                        let Some(lookup) = in_order.get(next.fetch_add(1, Ordering::Relaxed))
                        else {
                            return;
                        };
                        if look_up_one(&lookup.path, self.symlinks) {
                            done.fetch_add(1, Ordering::Relaxed);
                        } else {
                            missing.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                });
            }
        });
        LookedUp {
            done: done.into_inner(),
            missing: missing.into_inner(),
        }
    }

    /// The opener thread: opens every file of the plan in its order, having
    /// ext4 read the extent tree of each with extents to read, then checks
    /// their build-ids.
    fn open_all_then_check(&self, has_extents: &[bool], stop: &AtomicBool) {
        if !self.read_as_user("the opener thread") {
            return;
        }
        for (index, &extents) in has_extents.iter().enumerate() {
            if stop.load(Ordering::Relaxed) {
                return;
            }
            if self.open(index).is_ok() && extents {
                self.precache_extents(index);
            }
        }
        for index in 0..self.plan.files.len() {
            if stop.load(Ordering::Relaxed) {
                return;
            }
            self.check_build_id(index);
        }
    }

    /// A worker: takes the next work item until there is none, waiting for
    /// its oldest requests whenever more than `window` bytes are in flight.
    fn work_through(&self, items: usize, window: u64, stop: &AtomicBool) {
        if !self.read_as_user("a worker thread") {
            return;
        }
        let mut in_flight = InFlight::new(window);
        loop {
            if stop.load(Ordering::Relaxed) {
                return;
            }
            let item = self.next.fetch_add(1, Ordering::Relaxed);
            if item >= items {
                return;
            }
            if let Some(requested) = self.work(item) {
                for oldest in in_flight.add(requested) {
                    self.wait_for(oldest);
                }
            }
        }
    }

    /// How many files were opened and used, and why the others were
    /// skipped.
    fn file_outcomes(&self) -> (usize, Vec<Skipped>) {
        let mut files_opened = 0;
        let mut files_skipped = Vec::new();
        for ((file, slot), rejected) in self.plan.files.iter().zip(&self.files).zip(&self.rejected)
        {
            match (slot.get(), rejected.get()) {
                (Some(Ok(_)), None) => files_opened += 1,
                (Some(Err(reason)), _) | (_, Some(reason)) => files_skipped.push(Skipped {
                    path: file.path.clone(),
                    reason: reason.clone(),
                }),
                (None, None) => {}
            }
        }
        (files_opened, files_skipped)
    }

    /// Asks for one item of the plan; returns what was requested from the
    /// device, if anything was.
    fn work(&self, index: usize) -> Option<Requested> {
        let page_size = self.plan.page_size;
        let (file, offset, len) = if self.method.whole_files() {
            (index, 0, self.plan.files[index].size)
        } else {
            let e = self.plan.extents[index];
            (e.file, e.page * page_size, e.pages * page_size)
        };
        let Ok(handle) = self.open(file) else {
            return None;
        };
        if self.rejected[file].get().is_some() {
            return None;
        }
        if len == 0 || self.resident(file, handle, offset, len) {
            self.resident.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        self.requested.fetch_add(1, Ordering::Relaxed);
        if let Err(e) = fetch(self.method, handle, offset, len) {
            self.error(format!(
                "{} at {offset}+{len}: {e}",
                self.plan.files[file].path
            ));
        }
        let requested = self.bytes.fetch_add(len, Ordering::Relaxed) + len;
        if requested >= self.lead_bytes {
            self.tell_lead();
        }
        Some(Requested { file, offset, len })
    }

    /// Waits until the last page of a requested range has been read: a
    /// one-byte read of it sleeps on the page while its read is in flight.
    /// The plan's descriptors are POSIX_FADV_RANDOM ([`open_checked`]), so
    /// if that page is not in the cache at all (the kernel dropped it, or
    /// never queued it), this reads that one page, not a window.
    fn wait_for(&self, request: Requested) {
        let Some(Ok(file)) = self.files[request.file].get() else {
            return;
        };
        self.waits.fetch_add(1, Ordering::Relaxed);
        let mut byte = [0u8; 1];
        use std::os::unix::fs::FileExt;
        let _ = file.read_at(&mut byte, request.offset + request.len.max(1) - 1);
    }

    /// Calls `on_lead` the first time only.
    fn tell_lead(&self) {
        if !self.lead_told.swap(true, Ordering::Relaxed) {
            (self.on_lead)();
        }
    }

    fn open(&self, index: usize) -> &Opened {
        self.files[index].get_or_init(|| open_checked(&self.plan.files[index], self.symlinks))
    }

    /// Has ext4 read the extent tree of an opened file, so that the workers'
    /// reads of its far extents, and the program's, do not each wait for
    /// the tree block that maps them first. The files of a package
    /// installed on a fresh filesystem mostly have at most four extents,
    /// kept in the inode, and cost one call each; a file rewritten in
    /// place over years can have hundreds. A failure is not an error of
    /// the replay: the reads find the tree as they would have.
    fn precache_extents(&self, index: usize) {
        let Some(Ok(file)) = self.files[index].get() else {
            return;
        };
        if let Ok(true) = cache::precache_extents(file) {
            self.extent_trees.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Compares the build-id of an opened file with the plan's, and rejects
    /// the file when they differ: its extents not yet requested are skipped.
    fn check_build_id(&self, index: usize) {
        let Some(expected) = &self.plan.files[index].build_id else {
            return;
        };
        let Ok(file) = self.open(index) else {
            return;
        };
        let reason = match build_id_of_open(file) {
            Some(found) if &found == expected => return,
            Some(found) => {
                format!("changed since traced: build-id {found}, the plan says {expected}")
            }
            None => "changed since traced: it has no build-id now".to_string(),
        };
        let _ = self.rejected[index].set(reason);
    }

    /// Whether the whole range is resident, where cachestat may say so.
    fn resident(&self, index: usize, file: &File, offset: u64, len: u64) -> bool {
        if self.no_cachestat[index].load(Ordering::Relaxed) {
            return false;
        }
        match cache::cached_pages_in(file, offset, len) {
            Ok(Some(cached)) => cached >= len.div_ceil(self.plan.page_size),
            Ok(None) => false,
            Err(_) => {
                self.no_cachestat[index].store(true, Ordering::Relaxed);
                false
            }
        }
    }
}

/// Opens a plan file, once it is known to be a regular file, and checks it
/// is the file that was traced, by its size and modification time: what the
/// inode says, so the check reads nothing the open did not. The build-id,
/// which takes a read of the file's first page, is checked after every file
/// is open, on the thread that opens them ([`Shared::check_build_id`]),
/// never on a worker's way: a worker that waited for it waited behind every
/// read already queued on the device (20-30 ms each at the start of a cold
/// Firefox plan, where the workers spent 340-400 ms of a 200 ms replay
/// opening files).
///
/// The path is opened with O_PATH first, which opens nothing (a plan may
/// name a FIFO, whose open would wait for a writer forever, or a device),
/// and its inode examined; the file is then opened for reading through
/// that descriptor, so the file read is the file examined.
fn open_checked(planned: &PlanFile, symlinks: Symlinks) -> Opened {
    if let Some(directory) = kernel_directory(&planned.path) {
        return Err(format!(
            "under /{directory}: not a file a start reads from disk"
        ));
    }
    let handle = PathHandle::open(Path::new(&planned.path), symlinks)
        .map_err(|e| why_not_opened(&e, symlinks))?;
    let meta = handle.metadata().map_err(|e| format!("cannot stat: {e}"))?;
    if !meta.is_file() {
        return Err(format!(
            "not a regular file ({})",
            file_type_name(meta.file_type())
        ));
    }
    let magic = handle
        .filesystem_magic()
        .map_err(|e| format!("cannot stat its filesystem: {e}"))?;
    if let Some(interface) = filesystem::kernel_interface(magic) {
        return Err(format!(
            "on {interface}: not a file a start reads from disk"
        ));
    }
    // Without O_NOATIME where the file is not ours (PathHandle says why).
    let file = handle.open_for_reading().map_err(|e| match e.kind() {
        io::ErrorKind::PermissionDenied => "not readable by this user".to_string(),
        io::ErrorKind::WouldBlock => "cannot open: another process holds a lease on it".to_string(),
        _ => format!("cannot open: {e}"),
    })?;
    // Reads through this descriptor (the build-id check, Method::Pread) must
    // not start the kernel's readahead: besides reading what the plan does
    // not say, a readahead window leaves a PG_readahead mark whose first
    // touch by the program starts an asynchronous window of read_ahead_kb
    // (8 MiB on this project's machines). readahead(2), fadvise(WILLNEED)
    // and MADV_POPULATE_READ read exactly what is asked regardless.
    // The advice is per open file: the program's own descriptors keep theirs.
    let _ = cache::advise_random(&file);
    // The inode examined is the inode opened.
    match FileIdentity::of_metadata(&meta).change_since(&planned.identity()) {
        Some(Change::Size { now, recorded }) => Err(format!(
            "changed since traced: {now} bytes, the plan says {recorded}"
        )),
        Some(Change::ModificationTime) => {
            Err("changed since traced: modification time differs".to_string())
        }
        // No build-id is read here (see above), so none can differ.
        Some(Change::BuildId) | None => Ok(file),
    }
}

/// Why the O_PATH open of a planned path failed, as a skip reason.
fn why_not_opened(error: &io::Error, symlinks: Symlinks) -> String {
    if path_handle::is_symlink_refusal(error) {
        return match symlinks {
            Symlinks::Refuse => "path goes through a symbolic link".to_string(),
            Symlinks::Follow => {
                "path goes through a /proc magic link, or too many symbolic links".to_string()
            }
        };
    }
    if path_handle::is_openat2_missing(error) {
        return "cannot refuse symbolic links: this kernel has no openat2 (Linux 5.6)".to_string();
    }
    match error.kind() {
        io::ErrorKind::NotFound => "missing".to_string(),
        // A directory on the way that this user may not search.
        io::ErrorKind::PermissionDenied => "not readable by this user".to_string(),
        _ => format!("cannot open: {error}"),
    }
}

/// What a file that is not a regular file is, for a skip reason.
fn file_type_name(file_type: FileType) -> &'static str {
    if file_type.is_fifo() {
        "FIFO"
    } else if file_type.is_char_device() {
        "character device"
    } else if file_type.is_block_device() {
        "block device"
    } else if file_type.is_socket() {
        "socket"
    } else if file_type.is_dir() {
        "directory"
    } else if file_type.is_symlink() {
        "symbolic link"
    } else {
        "unknown file type"
    }
}

/// The directory of the kernel's interfaces (proc, sys or dev) a path is
/// under, by its words (`..` taken back lexically): such paths are refused
/// before anything is opened or looked up. A start reads nothing there from
/// disk, and reads there can block (trace_pipe) or have effects. Symbolic
/// links into them are caught after the O_PATH open, by the filesystem
/// ([`filesystem::kernel_interface`]).
fn kernel_directory(path: &str) -> Option<&'static str> {
    let mut words = Vec::new();
    for component in Path::new(path).components() {
        match component {
            Component::Normal(word) => words.push(word),
            Component::ParentDir => {
                words.pop();
            }
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    let first = words.first()?;
    ["proc", "sys", "dev"]
        .into_iter()
        .find(|directory| *first == std::ffi::OsStr::new(directory))
}

/// Makes room in the descriptor table for the plan's files before any
/// thread starts. Growing the table of a process with several threads waits
/// for an RCU grace period each time it grows (expand_fdtable): on a cold
/// Firefox plan of 239 files, three waits of 11-16 ms on the thread opening
/// them, at the start, while the program raced ahead. Asking once for a
/// descriptor above all the plan needs grows the table once, and without
/// the wait while the process has one thread. Within the soft limit on open
/// files, which this leaves alone (with `--wait` the program inherits it).
/// [`replay`] calls it; a caller that starts threads of its own first calls
/// it before them.
pub fn reserve_descriptors(files: usize) {
    // The standard streams, the plan, a pidfd and pipes: a few more.
    process::grow_descriptor_table(files.saturating_add(64));
}

/// The most one readahead(2) or fadvise(WILLNEED) call is asked for when
/// sysfs does not tell the device's own cap: the kernel's default
/// read_ahead_kb, below any cap it applies.
const FALLBACK_CALL_CAP: u64 = 128 << 10;

/// The per-call cap of the device holding `file`, read from sysfs once per
/// device.
fn call_cap(file: &File) -> u64 {
    static CAPS: Mutex<Vec<(u64, u64)>> = Mutex::new(Vec::new());
    let Ok(meta) = file.metadata() else {
        return FALLBACK_CALL_CAP;
    };
    let dev = meta.dev();
    let Ok(mut caps) = CAPS.lock() else {
        return FALLBACK_CALL_CAP;
    };
    if let Some(&(_, cap)) = caps.iter().find(|(d, _)| *d == dev) {
        return cap;
    }
    let cap = readahead::call_cap_bytes_of_device(dev).unwrap_or(FALLBACK_CALL_CAP);
    caps.push((dev, cap));
    cap
}

/// `[offset, offset + len)` in pieces of at most `cap` bytes.
pub fn pieces(offset: u64, len: u64, cap: u64) -> impl Iterator<Item = (u64, u64)> {
    let cap = cap.max(1);
    let end = offset.saturating_add(len);
    (offset..end)
        .step_by(cap as usize)
        .map(move |at| (at, cap.min(end - at)))
}

/// Asks for `[offset, offset + len)` of `file` by `method`.
pub(crate) fn fetch(method: Method, file: &File, offset: u64, len: u64) -> io::Result<()> {
    match method {
        Method::Readahead | Method::WholeFile | Method::Fadvise => {
            // The kernel reads at most the device's cap per call and drops
            // the rest without a word: ask in pieces no larger.
            let cap = call_cap(file);
            for (at, piece) in pieces(offset, len, cap) {
                if method == Method::Fadvise {
                    cache::advise_willneed(file, at, piece)?;
                } else {
                    cache::readahead(file, at, piece)?;
                }
            }
            Ok(())
        }
        Method::Pread => {
            use std::os::unix::fs::FileExt;
            let mut buffer = vec![0u8; (len as usize).min(1 << 20)];
            let mut at = offset;
            let end = offset + len;
            while at < end {
                let want = ((end - at) as usize).min(buffer.len());
                let got = file.read_at(&mut buffer[..want], at)?;
                if got == 0 {
                    break;
                }
                at += got as u64;
            }
            Ok(())
        }
        Method::Populate => cache::fault_in(file, offset, len, FaultIn::Populate),
        Method::TouchWhole => cache::fault_in(file, offset, len, FaultIn::TouchEachPage),
    }
}

#[cfg(test)]
mod tests {
    use super::{
        InFlight, Lookup, Requested, kernel_directory, lookup_order, pieces, reserve_descriptors,
    };

    fn request(offset: u64, len: u64) -> Requested {
        Requested {
            file: 0,
            offset,
            len,
        }
    }

    #[test]
    fn a_window_waits_for_the_oldest_requests_until_the_rest_fit() {
        let mut in_flight = InFlight::new(100);
        assert!(in_flight.add(request(0, 40)).is_empty());
        assert!(in_flight.add(request(40, 60)).is_empty());
        // 140 bytes: the oldest goes, 60 + 40 fit.
        assert_eq!(in_flight.add(request(100, 40)), vec![request(0, 40)]);
        // 100 + 90: both older ones go, in order.
        assert_eq!(
            in_flight.add(request(140, 90)),
            vec![request(40, 60), request(100, 40)]
        );
        // A request larger than the window stays in flight alone.
        assert_eq!(in_flight.add(request(230, 500)), vec![request(140, 90)]);
        assert_eq!(in_flight.add(request(730, 1)), vec![request(230, 500)]);
    }

    #[test]
    fn no_window_never_waits() {
        let mut in_flight = InFlight::new(0);
        for at in 0..100 {
            assert!(in_flight.add(request(at << 20, 1 << 20)).is_empty());
        }
    }

    /// The kernel's size of this process's descriptor table, and the highest
    /// descriptor open, from /proc.
    fn descriptor_table() -> (usize, usize) {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let size = status
            .lines()
            .find_map(|line| line.strip_prefix("FDSize:"))
            .map(|n| n.trim().parse().unwrap())
            .unwrap();
        let highest = std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .map(|entry| {
                entry
                    .unwrap()
                    .file_name()
                    .to_str()
                    .unwrap()
                    .parse()
                    .unwrap()
            })
            .max()
            .unwrap();
        (size, highest)
    }

    #[test]
    fn the_descriptor_table_is_grown_once_for_the_plans_files_and_nothing_stays_open() {
        let (size, _) = descriptor_table();
        // A plan with as many files as the table has slots now: the table must
        // grow to hold them and the 64 spare.
        reserve_descriptors(size);
        let (grown, highest) = descriptor_table();
        assert!(
            grown >= size + 64,
            "FDSize {grown} after reserving for {size} files (it was {size})"
        );
        // Other tests of this process open files beside this one, at the
        // lowest free numbers; the reserving descriptor was at size + 64.
        assert!(
            highest < size + 64,
            "descriptor {highest} left open by the reservation"
        );
    }

    #[test]
    fn lookups_are_made_in_need_order_then_inode_order() {
        let lookup = |path: &str, ino, need_ns| Lookup {
            path: path.into(),
            ino,
            need_ns,
        };
        // As an older plan wrote them: by inode number.
        let plan = [
            lookup("/a", 10, 900),
            lookup("/b", 20, -5),
            lookup("/c", 30, 900),
            lookup("/d", 40, 100),
            lookup("/e", 5, 900),
        ];
        let order: Vec<&str> = lookup_order(&plan)
            .iter()
            .map(|l| l.path.as_str())
            .collect();
        assert_eq!(order, ["/b", "/d", "/e", "/a", "/c"]);
    }

    #[test]
    fn paths_under_proc_sys_and_dev_are_told_by_their_words() {
        assert_eq!(kernel_directory("/proc/self/status"), Some("proc"));
        assert_eq!(kernel_directory("/sys"), Some("sys"));
        assert_eq!(kernel_directory("//dev/./zero"), Some("dev"));
        assert_eq!(kernel_directory("/usr/../proc/1/root/etc"), Some("proc"));
        assert_eq!(kernel_directory("/usr/lib/dev/x"), None);
        assert_eq!(kernel_directory("/procfs/x"), None);
        assert_eq!(kernel_directory("/"), None);
    }

    #[test]
    fn a_range_is_asked_for_in_pieces_no_larger_than_the_cap() {
        let got: Vec<_> = pieces(4096, 10 * 4096, 4 * 4096).collect();
        assert_eq!(
            got,
            [(4096, 16384), (20480, 16384), (36864, 8192)],
            "4 + 4 + 2 pages from page 1"
        );
        assert_eq!(pieces(0, 8192, 8192).collect::<Vec<_>>(), [(0, 8192)]);
        assert_eq!(pieces(0, 0, 8192).count(), 0);
        // A cap of 0 (never given) still makes progress.
        assert_eq!(pieces(0, 3, 0).count(), 3);
    }
}
