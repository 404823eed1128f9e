//! Opening a path someone else chose (a prefetch plan may be hostile)
//! without side effects until its inode is known. The path is first opened
//! with O_PATH, which opens nothing: a FIFO, device or socket is never
//! really opened, so nothing can block on it or start a device. The inode
//! is examined through that descriptor, and only then opened for reading
//! through the descriptor itself (/proc/self/fd/N), so the file read is the
//! file examined even if its path is renamed over in between.

use rustix::fs::{CWD, Mode, OFlags, ResolveFlags};
use std::fs::{File, Metadata};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::Path;

/// How symbolic links on a path are treated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Symlinks {
    /// Followed, except /proc's magic links (/proc/PID/fd/N, /proc/PID/root,
    /// ...), which open another process's files whatever the path says:
    /// refused where the kernel has openat2 (Linux 5.6), followed on older
    /// kernels.
    Follow,
    /// A path through any symbolic link, magic or not, is refused (ELOOP).
    /// Needs openat2: without it every path is refused (ENOSYS).
    Refuse,
}

/// A path opened with O_PATH: it names one inode and reads nothing. Only
/// fstat-like calls are made on the descriptor (kept as a `File` for std's
/// metadata, never read through).
#[derive(Debug)]
pub struct PathHandle {
    file: File,
}

impl PathHandle {
    /// Opens `path` with O_PATH, following a final symbolic link as
    /// `symlinks` says.
    pub fn open(path: &Path, symlinks: Symlinks) -> io::Result<PathHandle> {
        open_path(path, OFlags::empty(), symlinks)
    }

    /// Opens `path` with O_PATH; a final symbolic link is opened itself,
    /// not followed, even with [`Symlinks::Refuse`] (as lstat would see it).
    pub fn open_no_follow(path: &Path, symlinks: Symlinks) -> io::Result<PathHandle> {
        open_path(path, OFlags::NOFOLLOW, symlinks)
    }

    /// The inode's metadata (statx through the descriptor).
    pub fn metadata(&self) -> io::Result<Metadata> {
        self.file.metadata()
    }

    /// The magic number of the filesystem the inode is on (see
    /// [`crate::filesystem::kernel_interface`]).
    pub fn filesystem_magic(&self) -> io::Result<u64> {
        crate::filesystem::magic_of_file(&self.file)
    }

    /// Opens the inode for reading, without updating its access time where
    /// the caller may ask that (the file's owner, or CAP_FOWNER). The kernel
    /// checks read permission against the calling thread's filesystem
    /// credentials, as for any open. Opened non-blocking, then set back to
    /// blocking: the open of a regular file may wait for another process's
    /// lease on it to be broken (up to /proc/sys/fs/lease-break-time, 45 s
    /// by default), where a non-blocking open fails at once (WouldBlock).
    pub fn open_for_reading(&self) -> io::Result<File> {
        let flags = OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NONBLOCK;
        let fd = match self.reopen(flags | OFlags::NOATIME) {
            // O_NOATIME is refused (EPERM) for files the caller does not own.
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => self.reopen(flags)?,
            other => other?,
        };
        let now = rustix::fs::fcntl_getfl(&fd)?;
        rustix::fs::fcntl_setfl(&fd, now - OFlags::NONBLOCK)?;
        Ok(File::from(fd))
    }

    /// Opens the inode as a directory for reading its entries, without
    /// updating its access time (so only where the caller may ask that).
    /// Fails with NotADirectory for anything else, which is then not opened.
    pub fn open_directory(&self) -> io::Result<OwnedFd> {
        self.reopen(OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOATIME | OFlags::CLOEXEC)
    }

    /// Opens this descriptor's inode anew through its /proc/self/fd link,
    /// the one way to turn an O_PATH descriptor into an open file.
    fn reopen(&self, flags: OFlags) -> io::Result<OwnedFd> {
        let link = format!("/proc/self/fd/{}", self.file.as_raw_fd());
        rustix::fs::openat(CWD, link.as_str(), flags, Mode::empty()).map_err(|e| {
            if e == rustix::io::Errno::NOENT {
                // The inode is held open: only /proc itself can be missing.
                io::Error::other(format!(
                    "cannot re-open it through {link}: is /proc mounted?"
                ))
            } else {
                e.into()
            }
        })
    }
}

impl AsFd for PathHandle {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }
}

/// openat2 with O_PATH and the resolution `symlinks` asks for; on kernels
/// without openat2, plain openat when symbolic links may be followed.
fn open_path(path: &Path, extra: OFlags, symlinks: Symlinks) -> io::Result<PathHandle> {
    let flags = OFlags::PATH | OFlags::CLOEXEC | extra;
    let resolve = match symlinks {
        Symlinks::Follow => ResolveFlags::NO_MAGICLINKS,
        Symlinks::Refuse => ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
    };
    let fd = match rustix::fs::openat2(CWD, path, flags, Mode::empty(), resolve) {
        Err(rustix::io::Errno::NOSYS) if symlinks == Symlinks::Follow => {
            rustix::fs::openat(CWD, path, flags, Mode::empty())?
        }
        other => other?,
    };
    Ok(PathHandle {
        file: File::from(fd),
    })
}

/// The regular file at `path`, opened for reading ([`PathHandle`]: a FIFO,
/// device or socket found there is never opened, so nothing blocks on it);
/// anything else is an InvalidInput error.
pub fn open_regular(path: &Path, symlinks: Symlinks) -> io::Result<File> {
    let handle = PathHandle::open(path, symlinks)?;
    if !handle.metadata()?.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a regular file",
        ));
    }
    handle.open_for_reading()
}

/// Whether an error of [`PathHandle::open`] with [`Symlinks::Refuse`] says
/// the path went through a symbolic link.
pub fn is_symlink_refusal(error: &io::Error) -> bool {
    error.raw_os_error() == Some(libc::ELOOP)
}

/// Whether an error of [`PathHandle::open`] says the kernel has no openat2.
pub fn is_openat2_missing(error: &io::Error) -> bool {
    error.raw_os_error() == Some(libc::ENOSYS)
}

#[cfg(test)]
mod tests {
    use super::{PathHandle, Symlinks, is_symlink_refusal};
    use std::io::Read;
    use std::os::unix::fs::FileTypeExt;

    #[test]
    fn a_fifo_is_opened_by_path_only_and_examined_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let status = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(status.success());
        // A plain open for reading would wait here for a writer.
        let handle = PathHandle::open(&fifo, Symlinks::Refuse).unwrap();
        assert!(handle.metadata().unwrap().file_type().is_fifo());
    }

    #[test]
    fn the_file_read_is_the_file_opened_by_path_even_after_a_rename_over_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, "first").unwrap();
        let handle = PathHandle::open(&path, Symlinks::Refuse).unwrap();
        let other = dir.path().join("g");
        std::fs::write(&other, "second").unwrap();
        std::fs::rename(&other, &path).unwrap();
        let mut text = String::new();
        handle
            .open_for_reading()
            .unwrap()
            .read_to_string(&mut text)
            .unwrap();
        assert_eq!(text, "first");
    }

    #[test]
    fn refusing_symlinks_refuses_a_final_one_and_one_on_the_way() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("d")).unwrap();
        std::fs::write(dir.path().join("d/f"), "x").unwrap();
        std::os::unix::fs::symlink("f", dir.path().join("d/link")).unwrap();
        std::os::unix::fs::symlink("d", dir.path().join("dlink")).unwrap();
        for path in ["d/link", "dlink/f"] {
            let error = PathHandle::open(&dir.path().join(path), Symlinks::Refuse).unwrap_err();
            assert!(is_symlink_refusal(&error), "{path}: {error}");
            assert!(PathHandle::open(&dir.path().join(path), Symlinks::Follow).is_ok());
        }
        // Not followed, a final symlink is the link itself.
        let link =
            PathHandle::open_no_follow(&dir.path().join("d/link"), Symlinks::Refuse).unwrap();
        assert!(link.metadata().unwrap().file_type().is_symlink());
    }
}
