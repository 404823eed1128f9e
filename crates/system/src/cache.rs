//! Page cache control: drop the whole cache, evict one file, and measure how
//! much (and which part) of a file is resident. `coldstart trace` uses this
//! to start each run from a known cache state (cold, selective, warm), and
//! `coldstart evict` reports what could not be evicted and who holds it;
//! the prefetcher also brings a file's ext4 extent tree in.
//!
//! Linux only: cachestat(2), mincore(2), posix_fadvise(2), an ext4 ioctl
//! and /proc.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::ops::Range;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

use serde::{Serialize, Serializer};

use crate::proc;

const DROP_CACHES: &str = "/proc/sys/vm/drop_caches";

/// How many bytes of a file the mincore fallback maps at once. Bounds both the
/// address space taken and the residency vector, so huge files work on 32-bit.
const MINCORE_WINDOW: u64 = 1 << 30;

/// A system call or file operation, as named in [`CacheError`] messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    Open,
    Stat,
    Sync,
    Evict,
    Cachestat,
    Map,
    Mincore,
    DropCaches,
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Operation::Open => "open",
            Operation::Stat => "fstat",
            Operation::Sync => "fdatasync",
            Operation::Evict => "posix_fadvise(DONTNEED)",
            Operation::Cachestat => "cachestat",
            Operation::Map => "mmap",
            Operation::Mincore => "mincore",
            Operation::DropCaches => "write",
        })
    }
}

/// A page cache operation failed. Every message names the file and the
/// operation, and says what to do about permission problems.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    #[error("{op} {}: {error}{}", path.display(), hint(*op, error))]
    Io {
        op: Operation,
        path: PathBuf,
        error: io::Error,
    },
    #[error(
        "{op} {}: it is {kind}, not a regular file; only regular files have \
         page cache residency to measure or evict",
        path.display()
    )]
    NotRegularFile {
        op: Operation,
        path: PathBuf,
        kind: &'static str,
    },
}

impl CacheError {
    fn io(op: Operation, path: &Path, error: io::Error) -> CacheError {
        CacheError::Io {
            op,
            path: path.to_path_buf(),
            error,
        }
    }

    /// The file the failed operation was about.
    pub fn path(&self) -> &Path {
        match self {
            CacheError::Io { path, .. } | CacheError::NotRegularFile { path, .. } => path,
        }
    }

    /// The operation that failed.
    pub fn operation(&self) -> Operation {
        match self {
            CacheError::Io { op, .. } | CacheError::NotRegularFile { op, .. } => *op,
        }
    }

    /// The underlying OS error, if there was one.
    pub fn io_error(&self) -> Option<&io::Error> {
        match self {
            CacheError::Io { error, .. } => Some(error),
            CacheError::NotRegularFile { .. } => None,
        }
    }
}

/// What to do about an error, for the errors where the OS message alone
/// leaves the user guessing.
fn hint(op: Operation, error: &io::Error) -> &'static str {
    let errno = error.raw_os_error();
    let denied = matches!(errno, Some(libc::EACCES) | Some(libc::EPERM));
    match op {
        Operation::DropCaches if denied => {
            "; dropping the whole page cache needs root (CAP_SYS_ADMIN): rerun as \
             root, e.g. with sudo"
        }
        Operation::DropCaches if errno == Some(libc::EROFS) => {
            "; /proc/sys is mounted read-only, as in most containers: run on the \
             host or in a privileged container"
        }
        Operation::Cachestat if denied => {
            "; the kernel shows a file's page cache state only to its owner, to users \
             who may write it, and to root: rerun as root"
        }
        Operation::Mincore if denied => {
            "; the kernel shows a file's page cache state only to its owner, to users \
             who may write it, and to root (to anyone else mincore claims every page \
             is resident): rerun as root"
        }
        Operation::Open if errno == Some(libc::EACCES) => {
            "; this user may not read the file: rerun as root or grant read permission"
        }
        _ if denied => {
            "; the kernel refused the operation (file permissions, a security module \
             such as SELinux or AppArmor, or a seccomp filter): rerun as root"
        }
        _ => "",
    }
}

/// The page cache state a measured program starts in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CacheMode {
    /// Whole page cache dropped.
    Cold,
    /// Only the files the program used were evicted.
    Selective,
    /// Program run once untraced first.
    Warm,
    /// The cache as the start found it: a start `coldstart serve` traced
    /// while it learned, the cache neither dropped nor warmed.
    AsFound,
}

impl CacheMode {
    pub fn as_str(self) -> &'static str {
        match self {
            CacheMode::Cold => "cold",
            CacheMode::Selective => "selective",
            CacheMode::Warm => "warm",
            CacheMode::AsFound => "as-found",
        }
    }

    pub fn parse(text: &str) -> Option<CacheMode> {
        match text {
            "cold" => Some(CacheMode::Cold),
            "selective" => Some(CacheMode::Selective),
            "warm" => Some(CacheMode::Warm),
            "as-found" => Some(CacheMode::AsFound),
            _ => None,
        }
    }
}

/// How residency was measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ResidencyMethod {
    /// cachestat(2), Linux 6.5 and later: page counts without mapping the file.
    Cachestat,
    /// mmap + mincore(2): per-page, works on any kernel.
    Mincore,
}

/// How much of one file is in the page cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Residency {
    /// Pages the file spans: its size rounded up to whole pages.
    pub pages: u64,
    /// Of those, pages in the page cache.
    pub resident: u64,
    /// Resident pages not yet written back; mincore cannot tell, so `None`.
    pub dirty: Option<u64>,
    pub method: ResidencyMethod,
}

/// Which pages of one file are in the page cache.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ResidentPages {
    pub page_size: u64,
    /// Pages the file spans: its size rounded up to whole pages.
    pub pages: u64,
    /// Number of resident pages: the total length of `runs`.
    pub resident: u64,
    /// Resident pages as half-open ranges of page indices, ascending,
    /// neither overlapping nor touching.
    pub runs: Vec<Range<u64>>,
}

impl ResidentPages {
    /// Whether page `page` (an index, not a byte offset) is resident.
    pub fn contains(&self, page: u64) -> bool {
        // Runs are sorted, so the candidate is the last run starting at or
        // before `page`.
        let after = self.runs.partition_point(|run| run.start <= page);
        after > 0 && self.runs[after - 1].contains(&page)
    }

    /// The indices of the resident pages, ascending.
    pub fn iter(&self) -> impl Iterator<Item = u64> + '_ {
        self.runs.iter().flat_map(|run| run.clone())
    }
}

#[derive(Default)]
struct RunBuilder {
    runs: Vec<Range<u64>>,
    resident: u64,
}

impl RunBuilder {
    fn push(&mut self, page: u64) {
        self.resident += 1;
        match self.runs.last_mut() {
            Some(run) if run.end == page => run.end += 1,
            _ => self.runs.push(page..page + 1),
        }
    }

    fn finish(self, page_size: u64, pages: u64) -> ResidentPages {
        ResidentPages {
            page_size,
            pages,
            resident: self.resident,
            runs: self.runs,
        }
    }
}

/// A process that maps a file into its address space.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MappingProcess {
    pub pid: u32,
    /// The process name from /proc/PID/comm (at most 15 bytes).
    pub comm: String,
}

/// The outcome of evicting one file from the page cache.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Eviction {
    #[serde(serialize_with = "serialize_path")]
    pub path: PathBuf,
    /// File size in bytes.
    pub size: u64,
    pub pages: u64,
    pub resident_before: u64,
    pub resident_after: u64,
    /// Processes mapping the file, filled only when pages stayed resident:
    /// mapped pages cannot be evicted, so these are the likely reason.
    pub mapped_by: Vec<MappingProcess>,
}

/// Paths need not be UTF-8, and serde refuses those that are not; a report
/// should still print them.
fn serialize_path<S: Serializer>(path: &Path, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(&path.to_string_lossy())
}

/// The system page size in bytes.
pub fn page_size() -> u64 {
    static PAGE_SIZE: OnceLock<u64> = OnceLock::new();
    *PAGE_SIZE.get_or_init(|| rustix::param::page_size() as u64)
}

fn pages_for(size: u64) -> u64 {
    size.div_ceil(page_size())
}

/// Drop the whole page cache (and dentries and inodes), after writing back
/// dirty data so that it can be dropped. Pages mapped by running processes
/// stay resident. Needs root.
pub fn drop_all() -> Result<(), CacheError> {
    rustix::fs::sync();
    let path = Path::new(DROP_CACHES);
    let mut file = OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(|e| CacheError::io(Operation::DropCaches, path, e))?;
    // 3 = page cache plus dentries and inodes: a cold start also rereads
    // directories and inodes.
    file.write_all(b"3")
        .map_err(|e| CacheError::io(Operation::DropCaches, path, e))
}

/// Evict `path` from the page cache and report how much stayed resident, and
/// if any did, which processes map the file.
pub fn evict(path: &Path) -> Result<Eviction, CacheError> {
    let file = open_read(path)?;
    let meta = regular_metadata(&file, path, Operation::Evict)?;
    let (before, pending) = measure(&file, path, &meta)?;

    // fadvise only drops clean pages, so dirty pages and pages under
    // writeback must be written first. cachestat says whether there are
    // any; with mincore we cannot tell, so always sync.
    if pending != Some(0)
        && let Err(e) = rustix::fs::fdatasync(&file)
    {
        return Err(CacheError::io(Operation::Sync, path, e.into()));
    }
    // Offset 0, length 0: the whole file, whatever its size is by now.
    if let Err(e) = rustix::fs::fadvise(&file, 0, None, rustix::fs::Advice::DontNeed) {
        return Err(CacheError::io(Operation::Evict, path, e.into()));
    }

    let (after, _) = measure(&file, path, &meta)?;
    let mapped_by = if after.resident > 0 {
        mapping_processes(meta.dev(), meta.ino())
    } else {
        Vec::new()
    };
    Ok(Eviction {
        path: path.to_path_buf(),
        size: meta.size(),
        pages: before.pages,
        resident_before: before.resident,
        resident_after: after.resident,
        mapped_by,
    })
}

/// How much of `path` is in the page cache.
pub fn residency(path: &Path) -> Result<Residency, CacheError> {
    let file = open_read(path)?;
    residency_fd(&file, path)
}

/// How much of an open file is in the page cache; `path` only names the file
/// in errors.
pub fn residency_fd(file: &File, path: &Path) -> Result<Residency, CacheError> {
    let meta = regular_metadata(file, path, Operation::Cachestat)?;
    measure(file, path, &meta).map(|(residency, _)| residency)
}

/// Which pages of `path` are in the page cache, via mincore. Mapping the file
/// to ask does not fault any page in.
pub fn resident_pages(path: &Path) -> Result<ResidentPages, CacheError> {
    let file = open_read(path)?;
    resident_pages_fd(&file, path)
}

/// Which pages of an open file are in the page cache; `path` names the file
/// in errors and is used to check that the kernel will answer truthfully.
pub fn resident_pages_fd(file: &File, path: &Path) -> Result<ResidentPages, CacheError> {
    let meta = regular_metadata(file, path, Operation::Mincore)?;
    let mut builder = RunBuilder::default();
    mincore_scan(file, path, &meta, |page| builder.push(page))?;
    Ok(builder.finish(page_size(), pages_for(meta.size())))
}

/// The processes that map the file with device `dev` and inode `ino` (as in
/// `st_dev`, `st_ino`), ascending by pid. Processes that exit meanwhile or
/// whose maps we may not read are left out.
///
/// Matches the device and inode that /proc/PID/maps shows, which are the
/// superblock's: on btrfs subvolumes and overlayfs they can differ from what
/// stat reports, and such mappings are missed.
pub fn mapping_processes(dev: u64, ino: u64) -> Vec<MappingProcess> {
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    let mut found = Vec::new();
    for pid in proc::pids() {
        let maps_it = proc::maps(pid).is_ok_and(|maps| {
            maps.lines()
                .any(|line| maps_line_matches(&line, major, minor, ino))
        });
        if !maps_it {
            continue;
        }
        // No comm means the process has exited since we read its maps.
        let (Ok(pid), Some(comm)) = (u32::try_from(pid), proc::comm(pid)) else {
            continue;
        };
        found.push(MappingProcess { pid, comm });
    }
    found.sort_by_key(|p| p.pid);
    found
}

/// Whether one mapping is of (major:minor, ino).
fn maps_line_matches(line: &proc::MapsLine, major: u32, minor: u32, ino: u64) -> bool {
    line.major == major && line.minor == minor && line.inode == ino
}

/// Open for reading without touching atime, so that measuring a file does
/// not count as using it.
fn open_read(path: &Path) -> Result<File, CacheError> {
    // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a
    // writer; it has no effect on regular files, and we never read anyway.
    let open = |flags| {
        OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_CLOEXEC | libc::O_NONBLOCK | flags)
            .open(path)
    };
    match open(libc::O_NOATIME) {
        // O_NOATIME is reserved to the file's owner and CAP_FOWNER.
        Err(e) if e.raw_os_error() == Some(libc::EPERM) => open(0),
        result => result,
    }
    .map_err(|e| CacheError::io(Operation::Open, path, e))
}

fn regular_metadata(
    file: &File,
    path: &Path,
    op: Operation,
) -> Result<std::fs::Metadata, CacheError> {
    let meta = file
        .metadata()
        .map_err(|e| CacheError::io(Operation::Stat, path, e))?;
    let file_type = meta.file_type();
    let kind = if file_type.is_file() {
        return Ok(meta);
    } else if file_type.is_dir() {
        "a directory"
    } else if file_type.is_block_device() {
        "a block device"
    } else if file_type.is_char_device() {
        "a character device"
    } else if file_type.is_fifo() {
        "a FIFO"
    } else if file_type.is_socket() {
        "a socket"
    } else {
        "a special file"
    };
    Err(CacheError::NotRegularFile {
        op,
        path: path.to_path_buf(),
        kind,
    })
}

/// Residency of the first `meta.size()` bytes, plus the number of pages dirty
/// or under writeback when cachestat could tell.
fn measure(
    file: &File,
    path: &Path,
    meta: &std::fs::Metadata,
) -> Result<(Residency, Option<u64>), CacheError> {
    let pages = pages_for(meta.size());
    if let Some(stat) = cachestat(file, path, meta.size())? {
        let residency = Residency {
            pages,
            // cachestat reads length 0 as "to the end of the file", so an
            // empty file that grew meanwhile could report pages beyond `pages`.
            resident: stat.nr_cache.min(pages),
            dirty: Some(stat.nr_dirty),
            method: ResidencyMethod::Cachestat,
        };
        return Ok((residency, Some(stat.nr_dirty + stat.nr_writeback)));
    }
    let mut resident = 0;
    mincore_scan(file, path, meta, |_| resident += 1)?;
    let residency = Residency {
        pages,
        resident,
        dirty: None,
        method: ResidencyMethod::Mincore,
    };
    Ok((residency, None))
}

/// `struct cachestat_range` from <linux/mman.h>.
#[repr(C)]
struct CachestatRange {
    off: u64,
    len: u64,
}

/// `struct cachestat` from <linux/mman.h>.
#[repr(C)]
#[derive(Default)]
struct Cachestat {
    nr_cache: u64,
    nr_dirty: u64,
    nr_writeback: u64,
    nr_evicted: u64,
    nr_recently_evicted: u64,
}

/// cachestat(2) is 451 in every unified syscall table; libc does not export
/// it for all architectures yet. Elsewhere (mips, x32) we only use mincore.
#[cfg(any(
    all(target_arch = "x86_64", target_pointer_width = "64"),
    target_arch = "x86",
    target_arch = "aarch64",
    target_arch = "arm",
    target_arch = "riscv64",
    target_arch = "riscv32",
    target_arch = "loongarch64",
    target_arch = "powerpc",
    target_arch = "powerpc64",
    target_arch = "s390x",
    target_arch = "sparc64",
))]
const SYS_CACHESTAT: Option<libc::c_long> = Some(451);
#[cfg(not(any(
    all(target_arch = "x86_64", target_pointer_width = "64"),
    target_arch = "x86",
    target_arch = "aarch64",
    target_arch = "arm",
    target_arch = "riscv64",
    target_arch = "riscv32",
    target_arch = "loongarch64",
    target_arch = "powerpc",
    target_arch = "powerpc64",
    target_arch = "s390x",
    target_arch = "sparc64",
)))]
const SYS_CACHESTAT: Option<libc::c_long> = None;

/// Set once cachestat returned ENOSYS, so later calls go straight to mincore.
static CACHESTAT_MISSING: AtomicBool = AtomicBool::new(false);

/// cachestat over `[0, size)`, or `None` when the kernel or file system does
/// not support it and mincore must be used instead.
fn cachestat(file: &File, path: &Path, size: u64) -> Result<Option<Cachestat>, CacheError> {
    cachestat_range(file, 0, size)
        .map_err(|error| CacheError::io(Operation::Cachestat, path, error))
}

/// How many pages of `[offset, offset + len)` of an open file are in the page
/// cache, by cachestat(2); `None` where the kernel or file system lacks it.
/// Fails with EPERM for files the caller neither owns nor may write (unless
/// root).
pub fn cached_pages_in(file: &File, offset: u64, len: u64) -> io::Result<Option<u64>> {
    cachestat_range(file, offset, len).map(|stat| stat.map(|s| s.nr_cache))
}

/// Reads the extent tree of an open file on ext4 into the cache
/// (`EXT4_IOC_PRECACHE_EXTENTS`), so that reading a far part of the file
/// later does not first wait for the tree block that maps it: ext4 reads a
/// missing tree block synchronously on the reader's way (in readahead(2)
/// too). A file of at most four extents keeps its tree in the inode and
/// costs nothing more. Ok(false) on any other filesystem, which is asked
/// nothing.
pub fn precache_extents(file: &File) -> io::Result<bool> {
    // linux/magic.h: ext2, ext3 and ext4 share it; the ext4 driver, which
    // mounts all three here, knows the call, and any other answers ENOTTY.
    const EXT4_SUPER_MAGIC: u64 = 0xef53;
    // _IO('f', 18), fs/ext4/ext4.h.
    const EXT4_IOC_PRECACHE_EXTENTS: libc::c_ulong = 0x6612;
    if crate::filesystem::magic_of_file(file)? != EXT4_SUPER_MAGIC {
        return Ok(false);
    }
    // SAFETY: an ioctl without an argument on a descriptor we hold.
    if unsafe { libc::ioctl(file.as_raw_fd(), EXT4_IOC_PRECACHE_EXTENTS as _) } != 0 {
        let error = io::Error::last_os_error();
        return match error.raw_os_error() {
            Some(libc::ENOTTY | libc::EOPNOTSUPP) => Ok(false),
            _ => Err(error),
        };
    }
    Ok(true)
}

/// Tells the kernel that reads through this open file are random, so that
/// none of them starts a readahead window (`POSIX_FADV_RANDOM`). The advice
/// belongs to this open file, not to other openers of the same file.
pub fn advise_random(file: &File) -> io::Result<()> {
    rustix::fs::fadvise(file, 0, None, rustix::fs::Advice::Random)?;
    Ok(())
}

/// Asks the kernel to read `[offset, offset + len)` of `file` into the page
/// cache in the background (`POSIX_FADV_WILLNEED`).
pub fn advise_willneed(file: &File, offset: u64, len: u64) -> io::Result<()> {
    rustix::fs::fadvise(
        file,
        offset,
        std::num::NonZeroU64::new(len),
        rustix::fs::Advice::WillNeed,
    )?;
    Ok(())
}

/// readahead(2): starts reading `[offset, offset + len)` of `file` into the
/// page cache and returns once the reads are queued.
pub fn readahead(file: &File, offset: u64, len: u64) -> io::Result<()> {
    let offset =
        libc::off64_t::try_from(offset).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let len = usize::try_from(len).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: no pointers; rustix has no readahead(2).
    if unsafe { libc::readahead(file.as_raw_fd(), offset, len) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// How [`fault_in`] brings a mapped range into the page cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultIn {
    /// MADV_POPULATE_READ (Linux 5.14) after MADV_RANDOM, which keeps
    /// read-around from reading past the range; one byte per page when the
    /// kernel lacks it.
    Populate,
    /// One byte read per page, with the kernel's read-around, as vmtouch
    /// does.
    TouchEachPage,
}

/// Maps `[offset, offset + len)` of `file` (cut at its size) read-only,
/// faults every page in by `how`, and unmaps it.
pub fn fault_in(file: &File, offset: u64, len: u64, how: FaultIn) -> io::Result<()> {
    let size = file.metadata()?.size();
    let end = offset.saturating_add(len).min(size);
    if end <= offset {
        return Ok(());
    }
    let page = page_size();
    let start = offset / page * page;
    let length = usize::try_from(end - start).map_err(io::Error::other)?;
    // SAFETY: a read-only mapping within the file's size; a concurrent
    // truncation could fault the reads below, as it would any reader's.
    let map = unsafe {
        memmap2::MmapOptions::new()
            .offset(start)
            .len(length)
            .map(file)?
    };
    let populated = how == FaultIn::Populate && {
        let _ = map.advise(memmap2::Advice::Random);
        map.advise(memmap2::Advice::PopulateRead).is_ok()
    };
    if !populated {
        let sum = (0..length)
            .step_by(page as usize)
            .fold(0u8, |sum, at| sum.wrapping_add(map[at]));
        std::hint::black_box(sum);
    }
    Ok(())
}

/// Reads a directory's entries once, so that later lookups in it find them
/// cached, without touching its access time: a directory this process may
/// not open with O_NOATIME (another user's) is left unread rather than
/// marked as read. The directory is the one `directory` names, opened
/// through it: anything else is left unopened.
pub fn read_directory_once(directory: &crate::path_handle::PathHandle) {
    let Ok(directory) = directory.open_directory() else {
        return;
    };
    let mut buffer = [std::mem::MaybeUninit::<u8>::uninit(); 16 << 10];
    let mut entries = rustix::fs::RawDir::new(directory, &mut buffer);
    while let Some(Ok(_)) = entries.next() {}
}

fn cachestat_range(file: &File, offset: u64, len: u64) -> io::Result<Option<Cachestat>> {
    let Some(nr) = SYS_CACHESTAT else {
        return Ok(None);
    };
    if CACHESTAT_MISSING.load(Ordering::Relaxed) {
        return Ok(None);
    }
    let range = CachestatRange { off: offset, len };
    let mut stat = Cachestat::default();
    // SAFETY: both pointers refer to live, correctly laid out structs; the
    // kernel only writes `stat`.
    let rc = unsafe {
        libc::syscall(
            nr,
            file.as_raw_fd(),
            &range as *const CachestatRange,
            &mut stat as *mut Cachestat,
            0 as libc::c_uint,
        )
    };
    if rc == 0 {
        return Ok(Some(stat));
    }
    let error = io::Error::last_os_error();
    match error.raw_os_error() {
        Some(libc::ENOSYS) => {
            CACHESTAT_MISSING.store(true, Ordering::Relaxed);
            Ok(None)
        }
        // hugetlbfs files, for one.
        Some(libc::EOPNOTSUPP) => Ok(None),
        // EPERM (not owner, cannot write, not root) is not a reason to fall
        // back: mincore would answer "all resident" for the same file.
        _ => Err(error),
    }
}

/// Whether mincore will tell the truth about this file. For files the caller
/// neither owns nor may write, Linux (since 5.0) claims every page is
/// resident, to close a side channel; root passes through CAP_FOWNER.
fn mincore_is_truthful(meta: &std::fs::Metadata, path: &Path) -> bool {
    let euid = crate::process::effective_uid();
    if euid == 0 || meta.uid() == euid {
        return true;
    }
    rustix::fs::accessat(
        rustix::fs::CWD,
        path,
        rustix::fs::Access::WRITE_OK,
        rustix::fs::AtFlags::EACCESS,
    )
    .is_ok()
}

/// Unmaps a mincore window even when the scan bails out early.
struct Mapping {
    addr: *mut libc::c_void,
    len: usize,
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `addr` and `len` are exactly what mmap returned and took.
        unsafe { libc::munmap(self.addr, self.len) };
    }
}

/// Call `resident` with the index of every resident page among the first
/// `meta.size()` bytes, in ascending order.
fn mincore_scan(
    file: &File,
    path: &Path,
    meta: &std::fs::Metadata,
    mut resident: impl FnMut(u64),
) -> Result<(), CacheError> {
    let size = meta.size();
    if size == 0 {
        // mmap rejects a zero length, and there is nothing to ask about.
        return Ok(());
    }
    if !mincore_is_truthful(meta, path) {
        return Err(CacheError::io(
            Operation::Mincore,
            path,
            io::Error::from_raw_os_error(libc::EPERM),
        ));
    }
    let page = page_size();
    let mut flags = Vec::new();
    let mut offset = 0;
    while offset < size {
        let window = (size - offset).min(MINCORE_WINDOW);
        let too_big = || {
            CacheError::io(
                Operation::Map,
                path,
                io::Error::from_raw_os_error(libc::EOVERFLOW),
            )
        };
        let len = usize::try_from(window).map_err(|_| too_big())?;
        let file_offset = libc::off_t::try_from(offset).map_err(|_| too_big())?;
        // A shared read-only mapping: creating it faults nothing in, and
        // mincore on it reports the file's page cache.
        // SAFETY: a fresh mapping chosen by the kernel; we never touch its memory.
        let addr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                file_offset,
            )
        };
        if addr == libc::MAP_FAILED {
            return Err(CacheError::io(
                Operation::Map,
                path,
                io::Error::last_os_error(),
            ));
        }
        let mapping = Mapping { addr, len };
        flags.clear();
        flags.resize(window.div_ceil(page) as usize, 0u8);
        // SAFETY: the range is our mapping, and `flags` holds one byte per page of it.
        if unsafe { libc::mincore(mapping.addr, mapping.len, flags.as_mut_ptr()) } != 0 {
            return Err(CacheError::io(
                Operation::Mincore,
                path,
                io::Error::last_os_error(),
            ));
        }
        drop(mapping);
        let first = offset / page;
        for (index, flag) in flags.iter().enumerate() {
            // Only the lowest bit is defined; the rest are reserved.
            if flag & 1 != 0 {
                resident(first + index as u64);
            }
        }
        offset += window;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_line_matches_device_and_inode() {
        let matches = |line: &[u8], major, minor, ino| {
            proc::MapsLine::parse(line).is_some_and(|m| maps_line_matches(&m, major, minor, ino))
        };
        let line = b"7f1c2a000000-7f1c2a021000 r--p 00000000 fd:01 1234567    /usr/lib/x.so";
        assert!(matches(line, 0xfd, 1, 1234567));
        assert!(!matches(line, 0xfd, 2, 1234567));
        assert!(!matches(line, 0xfd, 1, 123456));
        // Anonymous mappings have inode 0 and no path.
        let anon = b"7ffd1e5d6000-7ffd1e5f7000 rw-p 00000000 00:00 0 ";
        assert!(!matches(anon, 0xfd, 1, 1234567));
        assert!(matches(anon, 0, 0, 0));
        // Majors above 0xff print with more digits.
        let wide = b"00400000-00401000 r-xp 00000000 103:02 42 /x";
        assert!(matches(wide, 0x103, 2, 42));
        assert!(!matches(b"garbage", 0, 0, 0));
        assert!(!matches(b"a b c nocolon 42 /x", 0, 0, 42));
    }

    #[test]
    fn run_builder_merges_adjacent_pages() {
        let mut builder = RunBuilder::default();
        for page in [0, 1, 4, 6, 7] {
            builder.push(page);
        }
        let pages = builder.finish(4096, 9);
        assert_eq!(pages.runs, vec![0..2, 4..5, 6..8]);
        assert_eq!(pages.resident, 5);
        assert_eq!(pages.pages, 9);
        assert!(pages.contains(0) && pages.contains(1) && pages.contains(7));
        assert!(!pages.contains(2) && !pages.contains(5) && !pages.contains(8));
        assert_eq!(pages.iter().collect::<Vec<_>>(), vec![0, 1, 4, 6, 7]);
        let none = RunBuilder::default().finish(4096, 0);
        assert!(!none.contains(0));
    }

    #[test]
    fn hint_explains_root_for_drop_caches() {
        let e = CacheError::io(
            Operation::DropCaches,
            Path::new(DROP_CACHES),
            io::Error::from_raw_os_error(libc::EACCES),
        );
        let message = e.to_string();
        assert!(message.contains(DROP_CACHES), "{message}");
        assert!(message.contains("root"), "{message}");
    }
}
