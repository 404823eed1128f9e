//! Starting a program by exec while a detached prefetcher replays its
//! plan: what `coldstart run` and the small `coldstart-run` wrapper do. The
//! program keeps the caller's pid, streams, exit status and signals; nothing
//! about the plan can keep it from starting.

use crate::format;
use crate::model::Plan;
use crate::read_around;
use crate::replay::{self, ReplayOptions, ReplayReport};
use std::ffi::OsString;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

/// Messages on stderr start with this.
const NAME: &str = "coldstart run";

#[derive(Debug, Clone)]
pub struct Launch {
    pub plan: PathBuf,
    pub replay: ReplayOptions,
    /// Start the program once the prefetcher has requested this many bytes
    /// of the plan (or finished it), waiting at most [`LEAD_TIMEOUT`]: the
    /// first extents are then in the page cache, or on their way, when the
    /// dynamic loader maps the program and its libraries, so its first
    /// faults wait for them instead of each starting a readahead window of
    /// its own. 0 starts the program at once.
    pub lead_bytes: u64,
    /// Prefetch everything, then start the program.
    pub wait: bool,
    /// Name every skipped file and print what the replay did.
    pub verbose: bool,
    /// Load the audit module that makes faults on planned files' data
    /// mappings read one page (`read_around`).
    pub no_read_around: bool,
}

/// Prefetches `launch.plan` beside (or, with `wait`, before) `command`,
/// which replaces this process. Returns only when the program cannot be
/// started, with the exit status a shell would give: 127 when it is not
/// found, 126 otherwise. Must be called while the process has one thread.
pub fn exec_with_plan(launch: &Launch, command: &[OsString]) -> u8 {
    let mut environment = Vec::new();
    match load(&launch.plan) {
        Ok(plan) => {
            if launch.no_read_around {
                environment = audit_environment(&plan);
            }
            if launch.wait {
                let report = replay::replay(&plan, &launch.replay, &AtomicBool::new(false));
                tell(&launch.plan, &plan, &report, launch.verbose);
            } else {
                start_prefetcher(launch, &plan);
            }
        }
        Err(e) => eprintln!("{NAME}: {e}; starting the program without prefetching"),
    }
    let Some(program) = command.first() else {
        eprintln!("{NAME}: no program to start");
        return 127;
    };
    // exec only returns on failure.
    let error = std::process::Command::new(program)
        .args(&command[1..])
        .envs(environment)
        .exec();
    eprintln!(
        "{NAME}: cannot start {}: {error}",
        program.to_string_lossy()
    );
    if error.kind() == std::io::ErrorKind::NotFound {
        127
    } else {
        126
    }
}

/// The variables that load the `--no-read-around` module, or none (said once
/// on stderr) when it cannot be installed: the program starts either way.
fn audit_environment(plan: &Plan) -> Vec<(&'static str, OsString)> {
    let existing = std::env::var_os(read_around::AUDIT_VARIABLE);
    read_around::environment(plan, existing.as_deref()).unwrap_or_else(|e| {
        eprintln!(
            "{NAME}: --no-read-around: {e}; starting the program with the kernel's read-around"
        );
        Vec::new()
    })
}

/// The plan at `path`, or why it cannot be used.
fn load(path: &Path) -> Result<Plan, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read the plan {}: {e}", path.display()))?;
    format::parse(&text, path).map_err(|e| e.to_string())
}

/// The longest the program waits for the prefetcher's lead.
pub const LEAD_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(100);

/// Forks the prefetcher twice over, so it is nobody's child but a subreaper's
/// or init's (the program need not reap it), and lets it run the plan until
/// the program, which this process becomes by exec, exits. With a lead, waits
/// for the prefetcher to say it has requested that much first.
fn start_prefetcher(launch: &Launch, plan: &Plan) {
    // A pidfd of this process survives exec and reports the program's exit.
    let program = watch_self();
    // The prefetcher tells the lead by writing a byte; both ends are
    // close-on-exec, so the program inherits neither.
    let lead = if launch.lead_bytes > 0 {
        lead_pipe()
    } else {
        None
    };
    // SAFETY: coldstart is single-threaded here (no thread was started yet),
    // so the child may run ordinary code.
    match unsafe { libc::fork() } {
        -1 => {
            eprintln!(
                "{NAME}: cannot start the prefetcher: {}; starting the program without it",
                std::io::Error::last_os_error()
            );
        }
        0 => {
            // SAFETY: still single-threaded.
            if unsafe { libc::fork() } == 0 {
                detach_stdio();
                let signal = lead.map(|(read, write)| {
                    drop(read);
                    std::sync::Mutex::new(Some(write))
                });
                let on_lead = || {
                    if let Some(slot) = &signal
                        && let Ok(mut write) = slot.lock()
                        && let Some(fd) = write.take()
                    {
                        use std::io::Write;
                        let _ = std::fs::File::from(fd).write_all(b"!");
                    }
                };
                let stop = AtomicBool::new(false);
                // Before the watcher thread, while growing it is free.
                replay::reserve_descriptors(plan.files.len());
                std::thread::scope(|scope| {
                    scope.spawn(|| {
                        wait_for_exit(&program);
                        stop.store(true, Ordering::Relaxed);
                    });
                    let report = replay::replay_with_lead(
                        plan,
                        &launch.replay,
                        &stop,
                        launch.lead_bytes,
                        &on_lead,
                    );
                    tell(&launch.plan, plan, &report, launch.verbose);
                    // SAFETY: ends this process at once, without waiting for
                    // the watcher thread or running the parent's exit handlers.
                    unsafe { libc::_exit(0) };
                });
            }
            // SAFETY: the intermediate child ends at once.
            unsafe { libc::_exit(0) };
        }
        child => {
            let mut status = 0;
            // SAFETY: reaping our own child, which exits immediately.
            unsafe { libc::waitpid(child, &mut status, 0) };
            if let Some((read, write)) = lead {
                drop(write);
                wait_for_lead(&read);
            }
        }
    }
}

/// A close-on-exec pipe: (read end, write end).
fn lead_pipe() -> Option<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills two descriptors on success.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return None;
    }
    // SAFETY: fresh descriptors we own.
    Some(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Waits until the prefetcher writes its byte, closes the pipe (it ended,
/// or died) or [`LEAD_TIMEOUT`] passes.
fn wait_for_lead(read: &OwnedFd) {
    use std::os::fd::AsRawFd;
    let deadline = std::time::Instant::now() + LEAD_TIMEOUT;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let mut poll = libc::pollfd {
            fd: read.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        let ready = unsafe { libc::poll(&mut poll, 1, left.as_millis() as libc::c_int) };
        if ready < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
            continue;
        }
        return;
    }
}

/// How the prefetcher learns that the program ended.
enum Program {
    Pidfd(OwnedFd),
    Pid(libc::pid_t),
}

fn watch_self() -> Program {
    // SAFETY: getpid never fails.
    let pid = unsafe { libc::getpid() };
    // pidfd_open (Linux 5.3) returns a close-on-exec descriptor: the program
    // does not inherit it, the prefetcher (by fork) does.
    // SAFETY: plain syscall.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd >= 0 {
        // SAFETY: a fresh descriptor we own.
        Program::Pidfd(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
    } else {
        Program::Pid(pid)
    }
}

fn wait_for_exit(program: &Program) {
    use std::os::fd::AsRawFd;
    match program {
        Program::Pidfd(fd) => {
            let mut poll = libc::pollfd {
                fd: fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd; -1 waits until the process exits.
            while unsafe { libc::poll(&mut poll, 1, -1) } < 0 {}
        }
        // SAFETY: signal 0 only checks that the process exists.
        Program::Pid(pid) => {
            while unsafe { libc::kill(*pid, 0) } == 0 {
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
        }
    }
}

/// The prefetcher must not hold the program's stdin or stdout: a pipe
/// reader would otherwise wait for the prefetcher as well.
fn detach_stdio() {
    if let Ok(null) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
    {
        use std::os::fd::AsRawFd;
        // SAFETY: duplicating onto the standard descriptors.
        unsafe {
            libc::dup2(null.as_raw_fd(), 0);
            libc::dup2(null.as_raw_fd(), 1);
        }
    }
}

/// Problems once on stderr; everything with --verbose.
fn tell(plan_path: &Path, plan: &Plan, report: &ReplayReport, verbose: bool) {
    let skipped = &report.files_skipped;
    if verbose {
        for s in skipped {
            eprintln!("{NAME}: skipped {}: {}", s.path, s.reason);
        }
        for e in &report.errors {
            eprintln!("{NAME}: {e}");
        }
        eprintln!(
            "{NAME}: {} by {} on {} threads{} in {:.1} ms: {} of {} extents requested ({:.1} MiB), {} already resident, {} files opened ({} ext4 extent trees cached){}{}",
            plan_path.display(),
            report.method.as_str(),
            report.threads,
            if report.window_bytes > 0 {
                format!(
                    ", at most {} KiB in flight ({} waits)",
                    report.window_bytes / 1024,
                    report.waits
                )
            } else {
                String::new()
            },
            report.elapsed_ms,
            report.extents_requested,
            plan.extents.len(),
            report.bytes_requested as f64 / (1 << 20) as f64,
            report.extents_resident,
            report.files_opened,
            report.extent_trees,
            if plan.lookups.is_empty() {
                String::new()
            } else {
                format!(
                    ", {} of {} lookups resolved ({} missing)",
                    report.lookups_done,
                    plan.lookups.len(),
                    report.lookups_missing
                )
            },
            if report.stopped {
                ", stopped when the program exited"
            } else {
                ""
            }
        );
    } else if !skipped.is_empty() || !report.errors.is_empty() {
        eprintln!(
            "{NAME}: {} of {} files of {} were skipped (missing, unreadable or changed since traced){}; --verbose names them",
            skipped.len(),
            plan.files.len(),
            plan_path.display(),
            if report.errors.is_empty() {
                String::new()
            } else {
                format!(", and {} prefetch requests failed", report.errors.len())
            }
        );
    }
}
