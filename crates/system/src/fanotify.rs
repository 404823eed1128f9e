//! Learning which files are opened or executed, and opening a file by its inode number:
//! how the tracer names the files trace events give only as device and
//! inode. A notification-class fanotify group marked on whole filesystems
//! hands over each open with a descriptor of the very file; for files
//! nobody opens, ext4's file handles open an inode by number.
//!
//! rustix has no fanotify and nix's would add a dependency to every program
//! that links this crate (the small `coldstart-run` among them), for four
//! calls: they are raw here, each with why it is sound.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// A fanotify group reporting opens and execs, never blocking them.
#[derive(Debug)]
pub struct OpenEvents {
    group: OwnedFd,
}

/// One open the group reported.
#[derive(Debug)]
pub struct Opened {
    /// The opened file, opened again for us (read-only, O_NOATIME).
    pub file: File,
    /// The process (tgid) that opened it.
    pub pid: i32,
}

impl OpenEvents {
    /// A notification group with an unlimited queue (needs CAP_SYS_ADMIN).
    pub fn new() -> io::Result<OpenEvents> {
        let group = notification_group(libc::FAN_UNLIMITED_QUEUE)?;
        Ok(OpenEvents { group })
    }

    /// Reports opens and execs anywhere on the filesystem mounted at `mount`.
    pub fn watch_filesystem(&self, mount: &Path) -> io::Result<()> {
        mark(
            &self.group,
            libc::FAN_MARK_ADD | libc::FAN_MARK_FILESYSTEM,
            libc::FAN_OPEN | libc::FAN_OPEN_EXEC,
            mount,
        )
    }

    /// Waits up to `timeout_ms` for events, returning early when `wake`
    /// (when given) is readable or closed at its other end; whether events
    /// are queued.
    pub fn wait(&self, wake: Option<BorrowedFd<'_>>, timeout_ms: u64) -> bool {
        crate::process::poll_readable(self.group.as_fd(), wake, timeout_ms)
    }

    /// Reads the queued events into `buffer` and hands each open to `each`;
    /// Ok(0) or an error when nothing could be read.
    pub fn read(&self, buffer: &mut [u8], mut each: impl FnMut(Opened)) -> io::Result<usize> {
        let n = rustix::io::read(&self.group, &mut *buffer)?;
        for_each_event(&buffer[..n], |_, file, pid| {
            if let Some(file) = file {
                each(Opened { file, pid });
            }
        });
        Ok(n)
    }
}

/// A new notification-class fanotify group with `extra` init flags; events
/// carry read-only, O_NOATIME descriptors.
fn notification_group(extra: libc::c_uint) -> io::Result<OwnedFd> {
    let flags = libc::FAN_CLASS_NOTIF | libc::FAN_CLOEXEC | extra;
    let event_flags =
        (libc::O_RDONLY | libc::O_LARGEFILE | libc::O_CLOEXEC | libc::O_NOATIME) as u32;
    // SAFETY: no pointers; a descriptor or -1 comes back.
    let fd = unsafe { libc::fanotify_init(flags, event_flags) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fanotify_init returned a fresh descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// fanotify_mark of `path` in `group`.
fn mark(group: &OwnedFd, flags: libc::c_uint, mask: u64, path: &Path) -> io::Result<()> {
    let path = CString::new(path.as_os_str().as_bytes())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    // SAFETY: our group's descriptor and a NUL-terminated path.
    let rc = unsafe {
        libc::fanotify_mark(
            group.as_raw_fd(),
            flags,
            mask,
            libc::AT_FDCWD,
            path.as_ptr(),
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Hands each event in `bytes` (what a read of a group returned) to
/// `each`: its mask, its descriptor (owned from here on) and its pid.
fn for_each_event(mut bytes: &[u8], mut each: impl FnMut(u64, Option<File>, i32)) {
    let header = std::mem::size_of::<libc::fanotify_event_metadata>();
    while bytes.len() >= header {
        // SAFETY: at least one header's worth of bytes; read_unaligned
        // copes with any alignment.
        let meta: libc::fanotify_event_metadata =
            unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast()) };
        let len = meta.event_len as usize;
        if len < header || len > bytes.len() {
            break;
        }
        let file = (meta.fd >= 0).then(|| {
            // SAFETY: the kernel handed us this descriptor with the event.
            File::from(unsafe { OwnedFd::from_raw_fd(meta.fd) })
        });
        each(meta.mask, file, meta.pid);
        bytes = &bytes[len..];
    }
}

/// A fanotify group told of execs of the files marked in it, and of nothing
/// else: a program nobody marked pays nothing for it. Notification class,
/// so an exec never waits for the listener, and a bounded queue, so a
/// listener that stops reading costs the kernel a fixed amount of memory
/// (the kernel then drops events and queues one overflow event instead).
#[derive(Debug)]
pub struct ExecEvents {
    group: OwnedFd,
}

/// What an [`ExecEvents`] group reported.
#[derive(Debug)]
pub enum ExecEvent {
    /// Process `pid` (its tgid) is executing `file`, opened again for us
    /// (read-only, O_NOATIME).
    Exec { file: File, pid: i32 },
    /// The queue was full: execs were missed.
    Overflow,
}

impl ExecEvents {
    /// A notification group with the kernel's default queue limit (needs
    /// CAP_SYS_ADMIN).
    pub fn new() -> io::Result<ExecEvents> {
        let group = notification_group(libc::FAN_NONBLOCK)?;
        Ok(ExecEvents { group })
    }

    /// Reports every exec of the inode `path` names now (symbolic links
    /// followed); a file later put at that path is not marked.
    pub fn mark(&self, path: &Path) -> io::Result<()> {
        self.change_mark(libc::FAN_MARK_ADD, path)
    }

    /// Reports every exec of any file on the filesystem mounted at
    /// `mount`: how the service hears of programs it has no plan for yet.
    pub fn mark_filesystem(&self, mount: &Path) -> io::Result<()> {
        mark(
            &self.group,
            libc::FAN_MARK_ADD | libc::FAN_MARK_FILESYSTEM,
            libc::FAN_OPEN_EXEC,
            mount,
        )
    }

    /// Stops reporting execs of the inode `path` names now.
    pub fn unmark(&self, path: &Path) -> io::Result<()> {
        self.change_mark(libc::FAN_MARK_REMOVE, path)
    }

    fn change_mark(&self, action: libc::c_uint, path: &Path) -> io::Result<()> {
        mark(&self.group, action, libc::FAN_OPEN_EXEC, path)
    }

    /// The group's descriptor, to poll beside others.
    pub fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.group.as_fd()
    }

    /// Reads what is queued and hands each event to `each`; Ok(0) when
    /// nothing was.
    pub fn read(&self, buffer: &mut [u8], mut each: impl FnMut(ExecEvent)) -> io::Result<usize> {
        let n = match rustix::io::read(&self.group, &mut *buffer) {
            Ok(n) => n,
            Err(rustix::io::Errno::AGAIN) => return Ok(0),
            Err(e) => return Err(e.into()),
        };
        for_each_event(&buffer[..n], |mask, file, pid| {
            if mask & libc::FAN_Q_OVERFLOW != 0 {
                each(ExecEvent::Overflow);
            } else if let Some(file) = file {
                each(ExecEvent::Exec { file, pid });
            }
        });
        Ok(n)
    }
}

/// FILEID_INO32_GEN in the kernel's exportfs.h.
const FILEID_INO32_GEN: i32 = 1;

/// A struct file_handle of type FILEID_INO32_GEN.
#[repr(C)]
struct InodeHandle {
    handle_bytes: u32,
    handle_type: i32,
    ino: u32,
    generation: u32,
}

/// Opens (O_PATH) inode `ino` of the filesystem `mount` (a directory
/// descriptor on it, not O_PATH) by an ext4 file handle of generation 0,
/// which names an inode by number alone. Needs CAP_DAC_READ_SEARCH.
pub fn open_inode(mount: impl AsFd, ino: u32) -> io::Result<File> {
    let mut handle = InodeHandle {
        handle_bytes: 8,
        handle_type: FILEID_INO32_GEN,
        ino,
        generation: 0,
    };
    // SAFETY: the handle is a valid struct file_handle of 8 bytes of
    // payload; the kernel only reads it.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_open_by_handle_at,
            mount.as_fd().as_raw_fd(),
            &mut handle as *mut InodeHandle,
            libc::O_PATH | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor from the kernel.
    Ok(File::from(unsafe { OwnedFd::from_raw_fd(fd as i32) }))
}

/// The largest handle payload the kernel gives (linux/exportfs.h
/// MAX_HANDLE_SZ).
const MAX_HANDLE_BYTES: usize = 128;

/// A file's handle: what names it within its filesystem, whichever mount
/// or mount namespace reaches it (btrfs's includes the subvolume).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileHandle {
    /// struct file_handle as the kernel lays it out: handle_bytes,
    /// handle_type, then the payload.
    raw: Vec<u8>,
}

/// The handle of an open file (name_to_handle_at with AT_EMPTY_PATH);
/// fails on a filesystem that cannot make handles.
pub fn handle_of(file: impl AsFd) -> io::Result<FileHandle> {
    // 8-byte aligned room for the header and the largest payload.
    let mut words = vec![0u64; (8 + MAX_HANDLE_BYTES).div_ceil(8)];
    words[0] = MAX_HANDLE_BYTES as u64; // handle_bytes (low half), type 0
    let mut mount_id: libc::c_int = 0;
    // SAFETY: the buffer holds a struct file_handle whose handle_bytes says
    // how much payload room follows; the kernel writes at most that much.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_name_to_handle_at,
            file.as_fd().as_raw_fd(),
            c"".as_ptr(),
            words.as_mut_ptr(),
            &mut mount_id as *mut libc::c_int,
            libc::AT_EMPTY_PATH,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_ne_bytes()).collect();
    let payload = u32::from_ne_bytes(bytes[..4].try_into().expect("4 bytes")) as usize;
    if payload > MAX_HANDLE_BYTES {
        return Err(io::Error::other(
            "the kernel gave a handle larger than it may",
        ));
    }
    Ok(FileHandle {
        raw: bytes[..8 + payload].to_vec(),
    })
}

/// Opens (O_PATH) the file `handle` names through `mount`, a directory
/// descriptor (not O_PATH) on a mount of the same filesystem. Needs
/// CAP_DAC_READ_SEARCH. Fails when the mount's filesystem has no such file.
pub fn open_handle(mount: impl AsFd, handle: &FileHandle) -> io::Result<File> {
    let mut words = vec![0u64; handle.raw.len().div_ceil(8)];
    for (i, chunk) in handle.raw.chunks(8).enumerate() {
        let mut word = [0u8; 8];
        word[..chunk.len()].copy_from_slice(chunk);
        words[i] = u64::from_ne_bytes(word);
    }
    // SAFETY: a struct file_handle the kernel made, 8-byte aligned; the
    // kernel only reads it.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_open_by_handle_at,
            mount.as_fd().as_raw_fd(),
            words.as_mut_ptr(),
            libc::O_PATH | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor from the kernel.
    Ok(File::from(unsafe { OwnedFd::from_raw_fd(fd as i32) }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn a_handle_opens_the_same_file_through_another_descriptor_of_its_filesystem() {
        if !rustix::process::geteuid().is_root() {
            eprintln!("SKIPPED: open_by_handle_at needs CAP_DAC_READ_SEARCH");
            return;
        }
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"x").unwrap();
        let file = File::open(&path).unwrap();
        let handle = handle_of(&file).unwrap();
        // The filesystem's mount, reached from its root directory.
        let mount = File::open(dir.path()).unwrap();
        let opened = open_handle(&mount, &handle).unwrap();
        let (a, b) = (file.metadata().unwrap(), opened.metadata().unwrap());
        assert_eq!((a.dev(), a.ino()), (b.dev(), b.ino()));
        let link = std::fs::read_link(format!("/proc/self/fd/{}", opened.as_raw_fd())).unwrap();
        assert_eq!(link, path);
        // A handle of a removed file opens nothing.
        drop((file, opened));
        std::fs::remove_file(&path).unwrap();
        assert!(open_handle(&mount, &handle).is_err());
    }
}
