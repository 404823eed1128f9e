//! Exact (device, inode) -> path resolution while the program runs.
//!
//! Trace events name files by device and inode only. A fanotify group
//! marked on every filesystem reports each open and exec with an open file
//! descriptor of the very file, so fstat gives its identity and
//! /proc/self/fd its path at that moment: no walking the disk afterwards,
//! no guessing between hard links or files replaced since. Files nobody
//! opens during the run (already open before it) are looked up in the
//! live processes' /proc/PID/maps, which also carry device and inode.

use std::collections::HashMap;
use std::fs;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
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
        for (target, fstype) in mount_points() {
            let Ok(meta) = fs::metadata(&target) else {
                continue;
            };
            if marked_devices.contains(&meta.dev()) || is_pseudo(&fstype) {
                continue;
            }
            let Ok(c_target) = std::ffi::CString::new(target.clone()) else {
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
                    "{target} ({fstype}): {}",
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

fn mount_points() -> Vec<(String, String)> {
    let Ok(mounts) = fs::read_to_string("/proc/self/mounts") else {
        return Vec::new();
    };
    mounts
        .lines()
        .filter_map(|line| {
            let mut f = line.split_whitespace();
            let (_src, target, fstype) = (f.next()?, f.next()?, f.next()?);
            Some((unescape_mount(target), fstype.to_string()))
        })
        .collect()
}

/// /proc/self/mounts escapes space, tab, newline and backslash as octal.
fn unescape_mount(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\'
            && let Some(digits) = bytes.get(i + 1..i + 4)
            && digits.iter().all(|d| (b'0'..=b'7').contains(d))
        {
            let value = digits.iter().fold(0u32, |v, d| v * 8 + u32::from(d - b'0'));
            out.push(value as u8);
            i += 4;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
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
    let Ok(entries) = fs::read_dir("/proc") else {
        return found;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        if !name.to_string_lossy().bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(maps) = fs::read_to_string(entry.path().join("maps")) else {
            continue;
        };
        for line in maps.lines() {
            if let Some((identity, path)) = parse_maps_line(line) {
                found.entry(identity).or_insert(path);
            }
        }
    }
    found
}

/// "addr perms offset MAJ:MIN inode path": device numbers in hex.
fn parse_maps_line(line: &str) -> Option<(FileIdentity, String)> {
    let mut fields = line.splitn(6, ' ');
    let _range = fields.next()?;
    let _perms = fields.next()?;
    let _offset = fields.next()?;
    let dev = fields.next()?;
    let ino: u64 = fields.next()?.parse().ok()?;
    let path = fields.next()?.trim_start();
    if ino == 0 || !path.starts_with('/') || path.ends_with(" (deleted)") {
        return None;
    }
    let (major, minor) = dev.split_once(':')?;
    let major = u32::from_str_radix(major, 16).ok()?;
    let minor = u32::from_str_radix(minor, 16).ok()?;
    Some(((libc::makedev(major, minor), ino), path.to_string()))
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
    let Ok(maps) = fs::read_to_string(format!("/proc/{pid}/maps")) else {
        return Vec::new();
    };
    maps.lines()
        .filter_map(|line| {
            let (file, _) = parse_maps_line(line)?;
            let mut fields = line.split(' ');
            let (start, end) = fields.next()?.split_once('-')?;
            let offset = fields.nth(1)?;
            Some(FileMapping {
                start: u64::from_str_radix(start, 16).ok()?,
                end: u64::from_str_radix(end, 16).ok()?,
                offset: u64::from_str_radix(offset, 16).ok()?,
                file,
            })
        })
        .collect()
}

/// The identity of a path, for matching it against trace events.
pub fn identity_of(path: &Path) -> Option<FileIdentity> {
    fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_lines_give_identity_and_path() {
        let line = "7f1c2a000000-7f1c2a022000 r--p 00000000 fe:00 811083                     /usr/lib/firefox-esr/libxul.so";
        let ((dev, ino), path) = parse_maps_line(line).unwrap();
        assert_eq!(dev, libc::makedev(0xfe, 0));
        assert_eq!(ino, 811083);
        assert_eq!(path, "/usr/lib/firefox-esr/libxul.so");
        assert!(parse_maps_line("7f-8f rw-p 00000000 00:00 0 [heap]").is_none());
        assert!(parse_maps_line("7f-8f r--p 00000000 fe:00 12 /tmp/x (deleted)").is_none());
    }

    #[test]
    fn mount_points_are_unescaped() {
        assert_eq!(unescape_mount("/mnt/a\\040b"), "/mnt/a b");
        assert_eq!(unescape_mount("/plain"), "/plain");
    }
}
