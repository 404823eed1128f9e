//! Exact (device, inode) -> path resolution while the program runs.
//!
//! Trace events name files by device and inode only. A fanotify group
//! marked on every filesystem reports each open and exec with an open file
//! descriptor of the very file, so fstat gives its identity and
//! /proc/self/fd its path at that moment: no walking the disk afterwards,
//! no guessing between hard links or files replaced since. Files nobody
//! opens during the run (already open before it) are looked up in the
//! live processes' /proc/PID/maps, which also carry device and inode.

use coldstart_system::proc;
use std::collections::HashMap;
use std::fs;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
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
        let flags = libc::FAN_CLASS_NOTIF | libc::FAN_CLOEXEC | libc::FAN_UNLIMITED_QUEUE;
        let event_flags =
            (libc::O_RDONLY | libc::O_LARGEFILE | libc::O_CLOEXEC | libc::O_NOATIME) as u32;
        // SAFETY: plain syscall wrapper.
        let fd = unsafe { libc::fanotify_init(flags, event_flags) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fanotify_init returned a fresh descriptor we own.
        let group = unsafe { OwnedFd::from_raw_fd(fd) };
        let mut unwatched = Vec::new();
        let mut marked_devices = Vec::new();
        for proc::Mount { target, fstype } in proc::mounts() {
            let Ok(meta) = fs::metadata(&target) else {
                continue;
            };
            if marked_devices.contains(&meta.dev()) || is_pseudo(&fstype) {
                continue;
            }
            let Ok(c_target) = std::ffi::CString::new(target.as_os_str().as_bytes()) else {
                continue;
            };
            // SAFETY: valid descriptor and NUL-terminated path.
            let rc = unsafe {
                libc::fanotify_mark(
                    group.as_raw_fd(),
                    libc::FAN_MARK_ADD | libc::FAN_MARK_FILESYSTEM,
                    libc::FAN_OPEN | libc::FAN_OPEN_EXEC,
                    libc::AT_FDCWD,
                    c_target.as_ptr(),
                )
            };
            if rc == 0 {
                marked_devices.push(meta.dev());
            } else {
                unwatched.push(format!(
                    "{} ({fstype}): {}",
                    target.display(),
                    io::Error::last_os_error()
                ));
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

fn collect(group: OwnedFd, stop: &AtomicBool) -> HashMap<FileIdentity, SeenFile> {
    let mut seen: HashMap<FileIdentity, SeenFile> = HashMap::new();
    let mut buf = vec![0u8; EVENT_BUFFER];
    let mut poll = libc::pollfd {
        fd: group.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // After the stop request, drain what is queued, then leave.
    let mut draining = false;
    loop {
        if stop.load(Ordering::Acquire) {
            draining = true;
        }
        let timeout_ms = if draining { 0 } else { 20 };
        // SAFETY: one valid pollfd.
        let ready = unsafe { libc::poll(&mut poll, 1, timeout_ms) };
        if ready <= 0 {
            if draining {
                return seen;
            }
            continue;
        }
        // SAFETY: buf is writable for its length.
        let n = unsafe { libc::read(group.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if n <= 0 {
            if draining {
                return seen;
            }
            std::thread::sleep(Duration::from_millis(5));
            continue;
        }
        parse_events(&buf[..n as usize], &mut seen);
    }
}

fn parse_events(mut bytes: &[u8], seen: &mut HashMap<FileIdentity, SeenFile>) {
    let header = std::mem::size_of::<libc::fanotify_event_metadata>();
    while bytes.len() >= header {
        // SAFETY: at least one header's worth of bytes; read_unaligned
        // copes with any alignment.
        let meta: libc::fanotify_event_metadata =
            unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast()) };
        let len = meta.event_len as usize;
        if len < header || len > bytes.len() {
            return;
        }
        if meta.fd >= 0 {
            // SAFETY: the kernel handed us this descriptor with the event.
            let fd = unsafe { OwnedFd::from_raw_fd(meta.fd) };
            record(&fd, meta.pid, seen);
        }
        bytes = &bytes[len..];
    }
}

fn record(fd: &OwnedFd, pid: i32, seen: &mut HashMap<FileIdentity, SeenFile>) {
    // SAFETY: zeroed stat is a valid out-parameter.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: valid fd and out-pointer.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return;
    }
    if st.st_mode & libc::S_IFMT != libc::S_IFREG {
        return;
    }
    let key = (st.st_dev, st.st_ino);
    if let Some(file) = seen.get_mut(&key) {
        if !file.openers.contains(&pid) {
            file.openers.push(pid);
        }
        return;
    }
    let Ok(path) = fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())) else {
        return;
    };
    seen.insert(
        key,
        SeenFile {
            path: path.to_string_lossy().into_owned(),
            size: st.st_size as u64,
            mtime_ns: st.st_mtime * 1_000_000_000 + st.st_mtime_nsec,
            openers: vec![pid],
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

/// FILEID_INO32_GEN in the kernel's exportfs.h.
const FILEID_INO32_GEN: i32 = 1;

#[repr(C)]
struct InodeHandle {
    handle_bytes: u32,
    handle_type: i32,
    ino: u32,
    generation: u32,
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
        let mut handle = InodeHandle {
            handle_bytes: 8,
            handle_type: FILEID_INO32_GEN,
            ino: u32::try_from(ino).ok()?,
            generation: 0,
        };
        // SAFETY: the handle is a valid struct file_handle of 8 bytes of
        // payload; the kernel only reads it. The descriptor returned, if
        // any, is ours.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_open_by_handle_at,
                mount.as_raw_fd(),
                &mut handle as *mut InodeHandle,
                libc::O_PATH | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return None;
        }
        // SAFETY: a fresh descriptor from the kernel.
        let file = fs::File::from(unsafe { OwnedFd::from_raw_fd(fd as i32) });
        let link = fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd())).ok()?;
        let path = link.to_str()?.to_string();
        // A disconnected or deleted inode has no usable path; anything else
        // must still name this very inode.
        let named = fs::symlink_metadata(&path).ok()?;
        (path.starts_with('/') && (named.dev(), named.ino()) == identity).then_some(path)
    }
}
