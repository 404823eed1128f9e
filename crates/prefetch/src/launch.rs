//! Starting a program by exec while a detached prefetcher replays its
//! plan: what `coldstart run` and the small `coldstart-run` wrapper do. The
//! program keeps the caller's pid, streams, exit status and signals; nothing
//! about the plan can keep it from starting.

use crate::format;
use crate::model::Plan;
use crate::read_around;
use crate::replay::{self, ReplayOptions, ReplayReport};
use coldstart_system::process::{self, ExitWatch, Forked};
use std::ffi::OsString;
use std::io::{PipeReader, PipeWriter};
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
    if launch.program_waits_for_the_plan() {
        match load(&launch.plan) {
            Ok(plan) => {
                if launch.no_read_around {
                    environment = audit_environment(&plan);
                }
                if launch.wait {
                    let report = replay::replay(&plan, &launch.replay, &AtomicBool::new(false));
                    tell(&launch.plan, &plan, &report, launch.verbose);
                } else {
                    start_prefetcher(launch, Loaded::Here(&plan));
                }
            }
            Err(e) => eprintln!("{NAME}: {e}; starting the program without prefetching"),
        }
    } else {
        start_prefetcher(launch, Loaded::ByPrefetcher);
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

impl Launch {
    /// Whether the program starts only once the plan is read: it needs the
    /// plan's files for the audit module (`no_read_around`), waits for the
    /// whole replay (`wait`) or for its lead. Otherwise the prefetcher reads
    /// the plan, and reading it cold (the file's directory, inode and data:
    /// dependent reads from the disk) is not on the program's way.
    fn program_waits_for_the_plan(&self) -> bool {
        self.no_read_around || self.wait || self.lead_bytes > 0
    }
}

/// Where the prefetcher's plan comes from.
enum Loaded<'a> {
    /// Read before the fork.
    Here(&'a Plan),
    /// To be read by the prefetcher itself, after the fork.
    ByPrefetcher,
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

/// The plan at `path`, or why it cannot be used. Only a regular file is
/// read: opening a FIFO would wait for a writer, and a device or /proc file
/// is no plan (the open does not block, and the type is checked before any
/// read).
fn load(path: &Path) -> Result<Plan, String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let cannot =
        |e: &dyn std::fmt::Display| format!("cannot read the plan {}: {e}", path.display());
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| cannot(&e))?;
    if !file.metadata().map_err(|e| cannot(&e))?.is_file() {
        return Err(cannot(&"not a regular file"));
    }
    let mut text = String::new();
    file.read_to_string(&mut text).map_err(|e| cannot(&e))?;
    format::parse(&text, path).map_err(|e| e.to_string())
}

/// The longest the program waits for the prefetcher's lead.
pub const LEAD_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(100);

/// Forks the prefetcher twice over, so it is nobody's child but a subreaper's
/// or init's (the program need not reap it), and lets it run the plan until
/// the program, which this process becomes by exec, exits. With a lead, waits
/// for the prefetcher to say it has requested that much first.
fn start_prefetcher(launch: &Launch, plan: Loaded<'_>) {
    // A pidfd of this process survives exec and reports the program's exit.
    let program = ExitWatch::of_self();
    // The prefetcher tells the lead by writing a byte; both ends are
    // close-on-exec, so the program inherits neither.
    let lead = if launch.lead_bytes > 0 {
        std::io::pipe().ok()
    } else {
        None
    };
    // After a fork of a process with several threads the child could only
    // make async-signal-safe calls; here there is one thread (none was
    // started yet), so both children run ordinary code.
    // SAFETY: coldstart is single-threaded here, as exec_with_plan requires.
    match unsafe { process::fork() } {
        Err(e) => {
            eprintln!("{NAME}: cannot start the prefetcher: {e}; starting the program without it");
        }
        Ok(Forked::Child) => {
            // SAFETY: still single-threaded.
            if let Ok(Forked::Child) = unsafe { process::fork() } {
                match plan {
                    Loaded::Here(plan) => run_prefetcher(launch, plan, &program, lead),
                    Loaded::ByPrefetcher => match load(&launch.plan) {
                        Ok(plan) => run_prefetcher(launch, &plan, &program, lead),
                        Err(e) => {
                            eprintln!("{NAME}: {e}; the program runs without prefetching");
                        }
                    },
                }
            }
            // The intermediate child ends at once.
            process::exit_now(0);
        }
        Ok(Forked::Parent(child)) => {
            // Reaping our own child, which exits immediately.
            process::reap(child);
            if let Some((read, write)) = lead {
                drop(write);
                process::wait_readable(&read, LEAD_TIMEOUT);
            }
        }
    }
}

/// The detached prefetcher: replays the plan until `program` exits, tells
/// the lead through `lead`'s write end, and ends this process.
fn run_prefetcher(
    launch: &Launch,
    plan: &Plan,
    program: &ExitWatch,
    lead: Option<(PipeReader, PipeWriter)>,
) -> ! {
    process::detach_stdin_stdout();
    let signal = lead.map(|(read, write)| {
        drop(read);
        std::sync::Mutex::new(Some(write))
    });
    let on_lead = || {
        if let Some(slot) = &signal
            && let Ok(mut write) = slot.lock()
            && let Some(mut write) = write.take()
        {
            use std::io::Write;
            let _ = write.write_all(b"!");
        }
    };
    let stop = AtomicBool::new(false);
    // Before the watcher thread, while growing it is free.
    replay::reserve_descriptors(plan.files.len());
    std::thread::scope(|scope| {
        scope.spawn(|| {
            program.wait();
            stop.store(true, Ordering::Relaxed);
        });
        let report =
            replay::replay_with_lead(plan, &launch.replay, &stop, launch.lead_bytes, &on_lead);
        tell(&launch.plan, plan, &report, launch.verbose);
        // Ends this process at once, without waiting for the watcher thread
        // or running the parent's exit handlers.
        process::exit_now(0)
    })
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
            "{NAME}: {} of {} files of {} were skipped (missing, unreadable, not a regular file or changed since traced){}; --verbose names them",
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
