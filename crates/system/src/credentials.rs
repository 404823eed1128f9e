//! Opening files as another user, on one thread: what a service running as
//! root needs to read a plan's files on behalf of the user who started a
//! program, with the kernel deciding each access exactly as for that user
//! (directory search bits, ACLs, file modes).
//!
//! Per thread, because such a service has many threads and serves several
//! users at once: each replay thread takes the user's credentials for
//! itself and ends with the replay, and no other thread of the process is
//! touched. The kernel keeps credentials per thread; it is the C library
//! that makes setgroups(3) and setuid(3) change every thread of the process
//! (POSIX asks that; glibc signals each thread to repeat the call). So the
//! calls here are the raw system calls: setgroups(2), setfsgid(2),
//! setfsuid(2).
//!
//! Only the filesystem ids change (and the supplementary groups, which the
//! kernel checks file access against too); the real and effective ids stay,
//! so the thread keeps its signals, limits and the right to switch back.
//! What it takes: CAP_SETGID for the groups and the filesystem gid,
//! CAP_SETUID for the filesystem uid (or ids the thread already has). When
//! the filesystem uid goes from 0 to another, the kernel clears the
//! filesystem capabilities from the thread's effective set (CAP_DAC_OVERRIDE,
//! CAP_DAC_READ_SEARCH, CAP_FOWNER, CAP_CHOWN, CAP_FSETID, ...), which is
//! the point: root's way around file permissions is gone for that thread.
//! Other capabilities stay, and security modules (SELinux, AppArmor) still
//! judge the service's own label: this is for opening and reading files, not
//! a sandbox for running anything else.

use std::io;

/// Who the kernel checks a thread's file accesses against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credentials {
    /// The filesystem user id.
    pub uid: u32,
    /// The filesystem group id.
    pub gid: u32,
    /// The supplementary groups.
    pub groups: Vec<u32>,
}

impl Credentials {
    /// The credentials a process (or thread, by its tid) opens files with:
    /// its filesystem uid and gid and its supplementary groups, from
    /// /proc/PID/status.
    pub fn of_process(pid: i32) -> io::Result<Credentials> {
        crate::proc::filesystem_credentials(pid)
    }

    /// Makes the calling thread, and only it, open files as these
    /// credentials: its supplementary groups, then its filesystem gid, then
    /// its filesystem uid, each checked to have taken effect. Threads it
    /// starts afterwards inherit them. On an error the thread may have
    /// taken some of them and not others: it must not open anything.
    pub fn assume_on_this_thread(&self) -> io::Result<()> {
        self.set_groups()?;
        set_filesystem_id(FilesystemId::Group, self.gid)?;
        set_filesystem_id(FilesystemId::User, self.uid)
    }

    /// setgroups(2) for this thread (rustix makes the raw call), unless it
    /// has these groups already: a thread without CAP_SETGID may then
    /// still take credentials it has.
    fn set_groups(&self) -> io::Result<()> {
        let wanted = sorted(self.groups.iter().copied());
        let current = || -> io::Result<Vec<u32>> {
            let groups = rustix::process::getgroups()?;
            Ok(sorted(groups.iter().map(|g| g.as_raw())))
        };
        if current()? == wanted {
            return Ok(());
        }
        let gids: Vec<rustix::process::Gid> = self
            .groups
            .iter()
            .map(|&g| rustix::process::Gid::from_raw(g))
            .collect();
        rustix::thread::set_thread_groups(&gids)
            .map_err(|e| io::Error::new(io::Error::from(e).kind(), format!("setgroups: {e}")))?;
        let now = current()?;
        if now != wanted {
            return Err(io::Error::other(format!(
                "setgroups did not take effect: the thread's groups are {now:?}, not {wanted:?}"
            )));
        }
        Ok(())
    }
}

/// Groups in the order the kernel keeps them (it sorts them on setgroups).
fn sorted(groups: impl Iterator<Item = u32>) -> Vec<u32> {
    let mut groups: Vec<u32> = groups.collect();
    groups.sort_unstable();
    groups
}

#[derive(Debug, Clone, Copy)]
enum FilesystemId {
    User,
    Group,
}

/// setfsuid(2) or setfsgid(2) of this thread to `id`. Neither call reports
/// failure: each returns the id the thread had before. So it is made twice,
/// and the second call's answer is the id the first one left.
fn set_filesystem_id(which: FilesystemId, id: u32) -> io::Result<()> {
    let (call, name) = match which {
        FilesystemId::User => (libc::SYS_setfsuid, "setfsuid"),
        FilesystemId::Group => (libc::SYS_setfsgid, "setfsgid"),
    };
    // SAFETY: setfsuid and setfsgid take one integer and touch no memory of
    // ours; they change this thread's credentials only (the raw calls, not
    // a C library's process-wide emulation).
    let now = unsafe {
        libc::syscall(call, id as libc::c_long);
        libc::syscall(call, id as libc::c_long)
    };
    if now as u32 != id {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "{name}({id}) did not take effect: the thread's id is still {now} (it takes CAP_SETUID and CAP_SETGID, and a valid id)"
            ),
        ));
    }
    Ok(())
}
