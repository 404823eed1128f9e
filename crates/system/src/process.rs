//! Process control for the prefetch launcher: forking the detached
//! prefetcher, learning when the program (this process after exec) exits,
//! naming threads, and the descriptor table and streams a prefetcher needs.
//! Safe wrappers over rustix where it has the call; `fork` stays unsafe for
//! its callers, since only they know the process has one thread.

use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::process::{Pid, PidfdFlags, Resource, WaitOptions};
use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::Duration;

/// Which side of a fork this is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Forked {
    Child,
    Parent(i32),
}

/// Forks this process.
///
/// # Safety
/// The process must have one thread. After a fork of a multi-threaded
/// process the child may only make async-signal-safe calls (a lock another
/// thread held stays locked forever); with one thread the child may run
/// ordinary code, which the launcher's prefetcher does.
pub unsafe fn fork() -> io::Result<Forked> {
    // SAFETY: the caller guarantees one thread (see above).
    match unsafe { libc::fork() } {
        -1 => Err(io::Error::last_os_error()),
        0 => Ok(Forked::Child),
        child => Ok(Forked::Parent(child)),
    }
}

/// Ends this process at once: no exit handlers, no waiting for threads, no
/// flushing of buffers the parent filled before a fork.
pub fn exit_now(code: i32) -> ! {
    // SAFETY: _exit has no preconditions and does not return.
    unsafe { libc::_exit(code) }
}

/// Reaps a child of ours; one wait, whatever it answers.
pub fn reap(child: i32) {
    if let Some(pid) = Pid::from_raw(child) {
        let _ = rustix::process::waitpid(Some(pid), WaitOptions::empty());
    }
}

/// Waits until `fd` is readable or closed at the other end, or `timeout`
/// passes; an interrupted wait resumes with the time left.
pub fn wait_readable(fd: impl AsFd, timeout: Duration) {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let left = Timespec {
            tv_sec: left.as_secs() as _,
            tv_nsec: left.subsec_nanos() as _,
        };
        let mut fds = [PollFd::new(&fd, PollFlags::IN)];
        match rustix::event::poll(&mut fds, Some(&left)) {
            Err(rustix::io::Errno::INTR) => continue,
            _ => return,
        }
    }
}

/// Waits up to `timeout_ms` until `fd` is readable, or `wake` (when given)
/// is readable or closed at its other end; whether `fd` is readable.
pub(crate) fn poll_readable(
    fd: BorrowedFd<'_>,
    wake: Option<BorrowedFd<'_>>,
    timeout_ms: u64,
) -> bool {
    let timeout = Timespec {
        tv_sec: (timeout_ms / 1000) as _,
        tv_nsec: ((timeout_ms % 1000) * 1_000_000) as _,
    };
    let mut fds = vec![PollFd::new(&fd, PollFlags::IN)];
    if let Some(wake) = &wake {
        fds.push(PollFd::new(wake, PollFlags::IN));
    }
    match rustix::event::poll(&mut fds, Some(&timeout)) {
        Ok(n) if n > 0 => fds[0].revents().contains(PollFlags::IN),
        _ => false,
    }
}

/// How a process learns that another one ended.
#[derive(Debug)]
pub enum ExitWatch {
    /// A pidfd (Linux 5.3): readable once the process exits.
    Pidfd(OwnedFd),
    /// Older kernels: asked every 50 ms whether the pid still exists.
    Pid(i32),
}

impl ExitWatch {
    /// A watch on this process. A pidfd is close-on-exec: a program this
    /// process becomes by exec does not inherit it, a child by fork does.
    pub fn of_self() -> ExitWatch {
        let pid = rustix::process::getpid();
        match rustix::process::pidfd_open(pid, PidfdFlags::empty()) {
            Ok(fd) => ExitWatch::Pidfd(fd),
            Err(_) => ExitWatch::Pid(pid.as_raw_nonzero().get()),
        }
    }

    /// Returns once the watched process has exited.
    pub fn wait(&self) {
        match self {
            ExitWatch::Pidfd(fd) => {
                let mut fds = [PollFd::new(fd, PollFlags::IN)];
                while rustix::event::poll(&mut fds, None).is_err() {}
            }
            ExitWatch::Pid(pid) => {
                let Some(pid) = Pid::from_raw(*pid) else {
                    return;
                };
                while rustix::process::test_kill_process(pid).is_ok() {
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
        }
    }
}

/// Points stdin and stdout at /dev/null, so that a background process holds
/// neither end of a pipe it inherited; stderr stays.
pub fn detach_stdin_stdout() {
    if let Ok(null) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
    {
        let _ = rustix::stdio::dup2_stdin(&null);
        let _ = rustix::stdio::dup2_stdout(&null);
    }
}

/// Grows the descriptor table so that it holds descriptor `wanted` (kept
/// below the soft limit on open files), by duplicating one there and closing
/// it at once; failures are harmless and ignored.
pub fn grow_descriptor_table(wanted: usize) {
    let limit = rustix::process::getrlimit(Resource::Nofile);
    let wanted = match limit.current {
        Some(current) => wanted.min(
            usize::try_from(current)
                .unwrap_or(usize::MAX)
                .saturating_sub(1),
        ),
        None => wanted,
    };
    let Ok(null) = std::fs::File::open("/dev/null") else {
        return;
    };
    let Ok(wanted) = i32::try_from(wanted) else {
        return;
    };
    // The duplicate closes when dropped.
    let _ = rustix::io::fcntl_dupfd_cloexec(&null, wanted);
}

/// Raises the soft limit on open files to the hard limit, for a process
/// that holds many files open at once and never waits on them with
/// select(2), whose descriptor sets stop at 1024 (the reason systemd starts
/// services with a soft limit of 1024 and leaves the rest to the hard one).
/// A failure leaves the limit as it was.
pub fn raise_open_files_limit() {
    let limit = rustix::process::getrlimit(Resource::Nofile);
    if limit.current != limit.maximum {
        let _ = rustix::process::setrlimit(
            Resource::Nofile,
            rustix::process::Rlimit {
                current: limit.maximum,
                maximum: limit.maximum,
            },
        );
    }
}

/// The calling thread's name (comm), if the kernel tells it.
pub fn thread_name() -> Option<String> {
    let name = rustix::thread::name().ok()?;
    Some(name.to_string_lossy().into_owned())
}

/// The name (comm) of the threads that replay a plan, in whichever process
/// replays it: the detached prefetcher of `coldstart run` and
/// `coldstart-run`, inside the traced tree, or the system-wide service,
/// outside it. A trace tells the prefetcher's reads from the program's by
/// it: the kernel copies a thread's name to the threads it creates, and the
/// recorder takes each task's name when it is created, so the workers are
/// named before they exist. At most 15 bytes, the kernel's limit. It lives
/// here, below both, because the replay (which links no profile reader)
/// sets it and the profile's readers test it.
pub const PREFETCHER_COMM: &str = "cs-prefetch";

const _: () = assert!(PREFETCHER_COMM.len() <= 15);

/// Whether a task of that name (comm) is the prefetcher's: the one name
/// test every reading of a trace applies (through
/// `coldstart_analyze::loaded::prefetcher_tasks`, which also asks a task
/// outside the traced tree to have been created during the run by a
/// process that was running before it).
pub fn is_prefetcher(comm: Option<&str>) -> bool {
    comm == Some(PREFETCHER_COMM)
}

/// Names the calling thread (the kernel keeps the first 15 bytes).
pub fn set_thread_name(name: &str) {
    let bytes = &name.as_bytes()[..name.len().min(15)];
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    if let Ok(name) = CString::new(&bytes[..end]) {
        let _ = rustix::thread::set_name(&name);
    }
}

/// Whether the dynamic loader has `object` (a soname or path) loaded:
/// dlopen(RTLD_NOLOAD), and the dlclose that gives its reference back.
pub fn reopen_loaded(object: &std::ffi::CStr) -> bool {
    // SAFETY: RTLD_NOLOAD loads nothing and runs no initializer; the handle
    // is closed at once.
    unsafe {
        let handle = libc::dlopen(object.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD);
        if handle.is_null() {
            return false;
        }
        libc::dlclose(handle);
    }
    true
}

/// The effective user id of this process.
pub fn effective_uid() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// What the reaped descendants of this process have used so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChildrenUsage {
    pub major_faults: u64,
    pub minor_faults: u64,
    pub read_bytes: u64,
}

/// getrusage(RUSAGE_CHILDREN): every descendant that has been reaped, at any
/// depth (a process's own reaped children are added to it when it is
/// reaped; orphans re-parent to a subreaper). ru_inblock is the task's
/// read_bytes accounting in 512-byte units. rustix has no getrusage.
pub fn children_usage() -> ChildrenUsage {
    // SAFETY: getrusage fills the zeroed plain-data struct it is given;
    // RUSAGE_CHILDREN always exists.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage);
        usage
    };
    ChildrenUsage {
        major_faults: usage.ru_majflt.max(0) as u64,
        minor_faults: usage.ru_minflt.max(0) as u64,
        read_bytes: usage.ru_inblock.max(0) as u64 * 512,
    }
}

#[cfg(test)]
mod tests {
    use super::{set_thread_name, thread_name};

    #[test]
    fn a_thread_name_is_cut_to_fifteen_bytes_as_proc_shows_it() {
        std::thread::spawn(|| {
            set_thread_name("coldstart-prefetch-worker");
            let comm = std::fs::read_to_string("/proc/thread-self/comm").unwrap();
            assert_eq!(comm, "coldstart-prefe\n");
            assert_eq!(thread_name().as_deref(), Some("coldstart-prefe"));
        })
        .join()
        .unwrap();
    }
}
