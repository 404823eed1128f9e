//! Exact (device, inode) -> path resolution while the program runs.
//!
//! Trace events name files by device and inode only. A fanotify group
//! marked on every filesystem reports each open and exec with an open file
//! descriptor of the very file, so fstat gives its identity and
//! /proc/self/fd its path at that moment: no walking the disk afterwards,
//! no guessing between hard links or files replaced since. Files nobody
//! opens during the run (already open before it) are looked up in the
//! live processes' /proc/PID/maps, which also carry device and inode.

use coldstart_system::fanotify::{self, OpenEvents};
use coldstart_system::proc;
use std::collections::HashMap;
use std::fs;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

pub use coldstart_system::identity::Inode;

/// A file as it was when it was opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeenFile {
    pub path: String,
    pub size: u64,
    pub mtime_ns: i64,
    /// Processes (tgids) that opened it, first opener first.
    pub openers: Vec<i32>,
    /// The path the program opened it by, when that is not `path` (an
    /// overlay's path for the layer file holding its pages, the path in
    /// the program's own mount namespace).
    pub opened_as: Option<String>,
    /// No mount here reaches the file: `path` is the one it was opened by,
    /// in another mount namespace, and opens nothing (or another file) here.
    pub unreachable: bool,
}

/// Collects opens from every filesystem until stopped.
pub struct OpenWatcher {
    stop: Arc<AtomicBool>,
    /// Closed to wake the collecting thread at once when stopping.
    wake: Option<io::PipeWriter>,
    thread: Option<JoinHandle<(HashMap<Inode, SeenFile>, OpenEvents)>>,
    /// Filesystems fanotify refused to watch (pseudo filesystems mostly).
    pub unwatched: Vec<String>,
}

impl OpenWatcher {
    /// Starts watching opens on every mounted filesystem backed by a device
    /// or otherwise holding regular files.
    pub fn start() -> io::Result<OpenWatcher> {
        let group = OpenEvents::new()?;
        let unwatched = for_each_filesystem(|target| group.watch_filesystem(target));
        let stop = Arc::new(AtomicBool::new(false));
        let (woken, wake) = io::pipe()?;
        let thread = {
            let stop = Arc::clone(&stop);
            std::thread::Builder::new()
                .name("coldstart-opens".into())
                .spawn(move || {
                    let seen = collect(&group, &stop, &woken);
                    (seen, group)
                })?
        };
        Ok(OpenWatcher {
            stop,
            wake: Some(wake),
            thread: Some(thread),
            unwatched,
        })
    }

    /// Stops watching and returns every file opened meanwhile.
    pub fn finish(self) -> HashMap<Inode, SeenFile> {
        self.finish_apart().0
    }

    /// As [`OpenWatcher::finish`], but hands back the fanotify group
    /// instead of closing it: closing a group marked on filesystems waits
    /// for the kernel to free its marks (about 20 ms here), which the
    /// caller can do while it works on, or together with other waits.
    pub fn finish_apart(mut self) -> (HashMap<Inode, SeenFile>, Option<OpenEvents>) {
        self.stop.store(true, Ordering::Release);
        drop(self.wake.take());
        match self.thread.take().and_then(|t| t.join().ok()) {
            Some((seen, group)) => (seen, Some(group)),
            None => (HashMap::new(), None),
        }
    }
}

impl Drop for OpenWatcher {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        drop(self.wake.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Calls `mark` with one mount of each mounted filesystem backed by a
/// device or otherwise holding regular files (pseudo filesystems left
/// out); returns the mounts it failed on, with why.
pub fn for_each_filesystem(mut mark: impl FnMut(&Path) -> io::Result<()>) -> Vec<String> {
    let mut failed = Vec::new();
    let mut marked_devices = Vec::new();
    for proc::Mount { target, fstype } in proc::mounts() {
        let Ok(meta) = fs::metadata(&target) else {
            continue;
        };
        if marked_devices.contains(&meta.dev()) || is_pseudo(&fstype) {
            continue;
        }
        // A path with a NUL in it cannot be named to the kernel.
        if target.as_os_str().as_bytes().contains(&0) {
            continue;
        }
        match mark(&target) {
            Ok(()) => marked_devices.push(meta.dev()),
            Err(e) => failed.push(format!("{} ({fstype}): {e}", target.display())),
        }
    }
    failed
}

fn is_pseudo(fstype: &str) -> bool {
    matches!(
        fstype,
        "proc"
            | "sysfs"
            | "devpts"
            | "cgroup"
            | "cgroup2"
            | "tracefs"
            | "debugfs"
            | "securityfs"
            | "pstore"
            | "bpf"
            | "mqueue"
            | "hugetlbfs"
            | "configfs"
            | "fusectl"
            | "binfmt_misc"
            | "autofs"
            | "efivarfs"
            | "rpc_pipefs"
            | "nsfs"
    )
}

const EVENT_BUFFER: usize = 64 * 1024;

fn collect(
    group: &OpenEvents,
    stop: &AtomicBool,
    woken: &io::PipeReader,
) -> HashMap<Inode, SeenFile> {
    let mut seen: HashMap<Inode, SeenFile> = HashMap::new();
    let here = Here::new();
    let mut buf = vec![0u8; EVENT_BUFFER];
    // After the stop request, drain what is queued, then leave.
    let mut draining = false;
    loop {
        if stop.load(Ordering::Acquire) {
            draining = true;
        }
        // The wake pipe's writer is closed right after the stop request,
        // so a stop is seen at once, not at the next timeout.
        let timeout_ms = if draining { 0 } else { 100 };
        if !group.wait(Some(woken.as_fd()), timeout_ms) {
            if draining {
                return seen;
            }
            continue;
        }
        let read = group.read(&mut buf, |opened| {
            record(&opened.file, opened.pid, &here, &mut seen)
        });
        if !matches!(read, Ok(n) if n > 0) {
            if draining {
                return seen;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

fn record(file: &fs::File, pid: i32, here: &Here, seen: &mut HashMap<Inode, SeenFile>) {
    let Ok(meta) = file.metadata() else {
        return;
    };
    if !meta.is_file() {
        return;
    }
    let key = Inode::of(&meta);
    if let Some(file) = seen.get_mut(&key) {
        if !file.openers.contains(&pid) {
            file.openers.push(pid);
        }
        return;
    }
    let Ok(path) = fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd())) else {
        return;
    };
    let seen_as = path.to_string_lossy().into_owned();
    let mut opened_as = None;
    let mut unreachable = false;
    // The kernel writes the path from the mount the file was opened
    // through: in another mount namespace (a sandbox, a container) or
    // through an overlay's private mount of a layer, that path may name
    // nothing here, or another file.
    // A removed file keeps the path it had, marked by the kernel.
    let path = if names(&seen_as, key) || seen_as.ends_with(" (deleted)") {
        seen_as
    } else {
        if here.other_namespace(pid) {
            opened_as = Some(seen_as.clone());
        }
        match here.path_of(file, key) {
            Some(path) => path,
            None => {
                unreachable = true;
                opened_as = Some(seen_as.clone());
                seen_as
            }
        }
    };
    seen.insert(
        key,
        SeenFile {
            path,
            size: meta.size(),
            mtime_ns: coldstart_system::identity::mtime_ns(&meta),
            openers: vec![pid],
            opened_as,
            unreachable,
        },
    );
}

/// Whether `path` names the file `identity` in this mount namespace.
pub fn names(path: &str, identity: Inode) -> bool {
    fs::metadata(path).is_ok_and(|meta| Inode::of(&meta) == identity)
}

/// This process's mount namespace, where plans are replayed: finds the
/// path here of a file opened through a mount it does not have.
struct Here {
    namespace: Option<std::path::PathBuf>,
    /// Mount points, those of the same device as a file tried first.
    mounts: Vec<(u64, std::path::PathBuf)>,
}

impl Here {
    fn new() -> Here {
        Here {
            namespace: fs::read_link("/proc/self/ns/mnt").ok(),
            mounts: proc::mountinfo(None)
                .into_iter()
                .map(|m| (m.dev, m.target))
                .collect(),
        }
    }

    /// Whether process `pid` is in another mount namespace than ours.
    fn other_namespace(&self, pid: i32) -> bool {
        match (
            &self.namespace,
            fs::read_link(format!("/proc/{pid}/ns/mnt")),
        ) {
            (Some(ours), Ok(theirs)) => *ours != theirs,
            _ => false,
        }
    }

    /// A path here naming the open `file` (of identity `key`): its handle
    /// opened through each mount of a filesystem of its type, until one
    /// reaches it by a path that names it.
    fn path_of(&self, file: &fs::File, key: Inode) -> Option<String> {
        let handle = fanotify::handle_of(file).ok()?;
        let magic = coldstart_system::filesystem::magic_of_file(file).ok()?;
        let mut mounts: Vec<&(u64, std::path::PathBuf)> = self.mounts.iter().collect();
        mounts.sort_by_key(|(dev, _)| *dev != key.dev);
        for (_, target) in mounts {
            if coldstart_system::filesystem::magic_of_path(target).ok() != Some(magic) {
                continue;
            }
            // Not O_PATH: open_by_handle_at refuses such a descriptor.
            let Ok(dir) = fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_DIRECTORY)
                .open(target)
            else {
                continue;
            };
            let Ok(found) = fanotify::open_handle(&dir, &handle) else {
                continue;
            };
            let Ok(link) = fs::read_link(format!("/proc/self/fd/{}", found.as_raw_fd())) else {
                continue;
            };
            if let Some(path) = link.to_str()
                && names(path, key)
            {
                return Some(path.to_string());
            }
        }
        None
    }
}

/// Files mapped by live processes, by identity, from /proc/PID/maps.
pub fn mapped_files() -> HashMap<Inode, String> {
    let mut found = HashMap::new();
    for pid in proc::pids() {
        let Ok(maps) = proc::maps(pid) else {
            continue;
        };
        for line in maps.lines() {
            if let Some(path) = file_path(&line) {
                found.entry(mapped_identity(pid, &line)).or_insert(path);
            }
        }
    }
    found
}

/// The identity of the file a mapping maps, as stat() and the page cache
/// (once btrfs events are placed) name it. /proc/PID/maps gives the
/// superblock's device, which on btrfs is no subvolume's, and an
/// overlay's inode where the pages are its layer file's; for such
/// (device major 0) mappings the mapped file itself, through
/// /proc/PID/map_files, says.
fn mapped_identity(pid: i32, line: &proc::MapsLine) -> Inode {
    let listed = Inode {
        dev: line.device(),
        ino: line.inode,
    };
    if libc::major(listed.dev) != 0 {
        return listed;
    }
    fs::metadata(format!(
        "/proc/{pid}/map_files/{:x}-{:x}",
        line.start, line.end
    ))
    .map(|meta| Inode::of(&meta))
    .unwrap_or(listed)
}

/// The path of a mapping of a file on disk, when it is UTF-8.
fn file_path(line: &proc::MapsLine) -> Option<String> {
    Some(std::str::from_utf8(line.file_path()?).ok()?.to_string())
}

/// A file mapping of a process: [start, end) maps the file from `offset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileMapping {
    pub start: u64,
    pub end: u64,
    pub offset: u64,
    pub file: Inode,
}

/// The file mappings of one process now (empty if it is gone).
pub fn file_mappings(pid: i32) -> Vec<FileMapping> {
    let Ok(maps) = proc::maps(pid) else {
        return Vec::new();
    };
    maps.lines()
        .filter(|line| file_path(line).is_some())
        .map(|line| FileMapping {
            start: line.start,
            end: line.end,
            offset: line.offset,
            file: mapped_identity(pid, &line),
        })
        .collect()
}

/// The identity of a path, for matching it against trace events.
pub fn identity_of(path: &Path) -> Option<Inode> {
    Inode::of_path(path)
}

/// Paths of inodes known only by device and inode number, found through
/// file handles: for ext4, a handle of type FILEID_INO32_GEN with
/// generation 0 names an inode by number alone (the generation is checked
/// only when non-zero). `open_by_handle_at` needs CAP_DAC_READ_SEARCH,
/// which the tracer has as root. Directories come back with their full
/// path; a file whose name is no longer cached may come back without one
/// and is left unresolved, as is anything the kernel calls deleted.
pub struct HandleResolver {
    /// A descriptor of the first mount of each ext4 device.
    mounts: HashMap<u64, OwnedFd>,
}

impl HandleResolver {
    /// Opens a mount of each ext4 filesystem. Any mount of it will do: a
    /// path found through one is checked against the inode it must name.
    pub fn mounted() -> HandleResolver {
        let mut mounts = HashMap::new();
        for proc::Mount { target, fstype } in proc::mounts() {
            if fstype != "ext4" {
                continue;
            }
            // Not O_PATH: open_by_handle_at refuses such a descriptor.
            let Ok(dir) = fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_DIRECTORY)
                .open(&target)
            else {
                continue;
            };
            let Ok(meta) = dir.metadata() else {
                continue;
            };
            mounts
                .entry(meta.dev())
                .or_insert_with(|| OwnedFd::from(dir));
        }
        HandleResolver { mounts }
    }

    /// The path that names `identity` now, when it can be found exactly.
    pub fn path(&self, identity: Inode) -> Option<String> {
        let mount = self.mounts.get(&identity.dev)?;
        let file = fanotify::open_inode(mount, u32::try_from(identity.ino).ok()?).ok()?;
        let link = fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd())).ok()?;
        let path = link.to_str()?.to_string();
        // A disconnected or deleted inode has no usable path; anything else
        // must still name this very inode.
        let named = fs::symlink_metadata(&path).ok()?;
        (path.starts_with('/') && Inode::of(&named) == identity).then_some(path)
    }
}
