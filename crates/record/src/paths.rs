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
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

/// (st_dev, st_ino) as user space sees them.
pub type FileIdentity = (u64, u64);

/// A file as it was when it was opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeenFile {
    pub path: String,
    pub size: u64,
    pub mtime_ns: i64,
    /// Processes (tgids) that opened it, first opener first.
    pub openers: Vec<i32>,
    /// The path the program opened it by, when that is not `path` (an
    /// overlay's path for the layer file holding its pages).
    pub opened_as: Option<String>,
}

/// Collects opens from every filesystem until stopped.
pub struct OpenWatcher {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<HashMap<FileIdentity, SeenFile>>>,
    /// Filesystems fanotify refused to watch (pseudo filesystems mostly).
    pub unwatched: Vec<String>,
}

impl OpenWatcher {
    /// Starts watching opens on every mounted filesystem backed by a device
    /// or otherwise holding regular files.
    pub fn start() -> io::Result<OpenWatcher> {
        let group = OpenEvents::new()?;
        let mut unwatched = Vec::new();
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
            match group.watch_filesystem(&target) {
                Ok(()) => marked_devices.push(meta.dev()),
                Err(e) => unwatched.push(format!("{} ({fstype}): {e}", target.display())),
            }
        }
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let stop = Arc::clone(&stop);
            std::thread::Builder::new()
                .name("coldstart-opens".into())
                .spawn(move || collect(group, &stop))?
        };
        Ok(OpenWatcher {
            stop,
            thread: Some(thread),
            unwatched,
        })
    }

    /// Stops watching and returns every file opened meanwhile.
    pub fn finish(mut self) -> HashMap<FileIdentity, SeenFile> {
        self.stop.store(true, Ordering::Release);
        self.thread
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or_default()
    }
}

impl Drop for OpenWatcher {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
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

fn collect(group: OpenEvents, stop: &AtomicBool) -> HashMap<FileIdentity, SeenFile> {
    let mut seen: HashMap<FileIdentity, SeenFile> = HashMap::new();
    let mut buf = vec![0u8; EVENT_BUFFER];
    // After the stop request, drain what is queued, then leave.
    let mut draining = false;
    loop {
        if stop.load(Ordering::Acquire) {
            draining = true;
        }
        let timeout_ms = if draining { 0 } else { 20 };
        if !group.wait(timeout_ms) {
            if draining {
                return seen;
            }
            continue;
        }
        let read = group.read(&mut buf, |opened| {
            record(&opened.file, opened.pid, &mut seen)
        });
        if !matches!(read, Ok(n) if n > 0) {
            if draining {
                return seen;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

fn record(file: &fs::File, pid: i32, seen: &mut HashMap<FileIdentity, SeenFile>) {
    let Ok(meta) = file.metadata() else {
        return;
    };
    if !meta.is_file() {
        return;
    }
    let key = (meta.dev(), meta.ino());
    if let Some(file) = seen.get_mut(&key) {
        if !file.openers.contains(&pid) {
            file.openers.push(pid);
        }
        return;
    }
    let Ok(path) = fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd())) else {
        return;
    };
    seen.insert(
        key,
        SeenFile {
            path: path.to_string_lossy().into_owned(),
            size: meta.size(),
            mtime_ns: coldstart_system::identity::mtime_ns(&meta),
            openers: vec![pid],
            opened_as: None,
        },
    );
}

/// Files mapped by live processes, by identity, from /proc/PID/maps.
pub fn mapped_files() -> HashMap<FileIdentity, String> {
    let mut found = HashMap::new();
    for pid in proc::pids() {
        let Ok(maps) = proc::maps(pid) else {
            continue;
        };
        for line in maps.lines() {
            if let Some(path) = file_path(&line) {
                found.entry((line.device(), line.inode)).or_insert(path);
            }
        }
    }
    found
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
    pub file: FileIdentity,
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
            file: (line.device(), line.inode),
        })
        .collect()
}

/// The identity of a path, for matching it against trace events.
pub fn identity_of(path: &Path) -> Option<FileIdentity> {
    fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
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
    pub fn path(&self, identity: FileIdentity) -> Option<String> {
        let (dev, ino) = identity;
        let mount = self.mounts.get(&dev)?;
        let file = fanotify::open_inode(mount, u32::try_from(ino).ok()?).ok()?;
        let link = fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd())).ok()?;
        let path = link.to_str()?.to_string();
        // A disconnected or deleted inode has no usable path; anything else
        // must still name this very inode.
        let named = fs::symlink_metadata(&path).ok()?;
        (path.starts_with('/') && (named.dev(), named.ino()) == identity).then_some(path)
    }
}
