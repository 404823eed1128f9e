//! `coldstart run`: start a program by exec while a detached prefetcher
//! replays its plan. The program keeps coldstart's pid, streams, exit status
//! and signals; nothing about the plan can keep it from starting.

use crate::args::{MethodArg, RunArgs};
use anyhow::Context;
use coldstart_prefetch::replay::{self, Method, ReplayOptions, ReplayReport};
use coldstart_prefetch::{Plan, format};
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};

pub fn run(args: &RunArgs) -> anyhow::Result<ExitCode> {
    if let Some(path) = &args.write_launcher {
        return write_launcher(args, path);
    }
    let options = ReplayOptions {
        threads: args.threads.clamp(1, 256),
        method: method(args.method),
    };
    match load(&args.plan) {
        Ok(plan) if args.wait => {
            let report = replay::replay(&plan, &options, &AtomicBool::new(false));
            tell(&args.plan, &plan, &report, args.verbose);
        }
        Ok(plan) => start_prefetcher(&args.plan, &plan, &options, args.verbose),
        Err(e) => eprintln!("coldstart run: {e:#}; starting the program without prefetching"),
    }
    // exec only returns on failure.
    let error = std::process::Command::new(&args.command[0])
        .args(&args.command[1..])
        .exec();
    eprintln!(
        "coldstart run: cannot start {}: {error}",
        args.command[0].to_string_lossy()
    );
    // As a shell would: 127 for a program not found, 126 for one not runnable.
    Ok(ExitCode::from(
        if error.kind() == std::io::ErrorKind::NotFound {
            127
        } else {
            126
        },
    ))
}

fn method(arg: MethodArg) -> Method {
    match arg {
        MethodArg::Readahead => Method::Readahead,
        MethodArg::Fadvise => Method::Fadvise,
        MethodArg::Pread => Method::Pread,
        MethodArg::Populate => Method::Populate,
        MethodArg::WholeFile => Method::WholeFile,
        MethodArg::TouchWhole => Method::TouchWhole,
    }
}

fn load(path: &Path) -> anyhow::Result<Plan> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the plan {}", path.display()))?;
    Ok(format::parse(&text, path)?)
}

/// Forks the prefetcher twice over, so it is nobody's child but a subreaper's
/// or init's (the program need not reap it), and lets it run the plan until
/// the program, which this process becomes by exec, exits.
fn start_prefetcher(plan_path: &Path, plan: &Plan, options: &ReplayOptions, verbose: bool) {
    // A pidfd of this process survives exec and reports the program's exit.
    let program = watch_self();
    // SAFETY: coldstart is single-threaded here (no thread was started yet),
    // so the child may run ordinary code.
    match unsafe { libc::fork() } {
        -1 => {
            eprintln!(
                "coldstart run: cannot start the prefetcher: {}; starting the program without it",
                std::io::Error::last_os_error()
            );
        }
        0 => {
            // SAFETY: still single-threaded.
            if unsafe { libc::fork() } == 0 {
                detach_stdio();
                let stop = AtomicBool::new(false);
                std::thread::scope(|scope| {
                    scope.spawn(|| {
                        wait_for_exit(&program);
                        stop.store(true, Ordering::Relaxed);
                    });
                    let report = replay::replay(plan, options, &stop);
                    tell(plan_path, plan, &report, verbose);
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
        }
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
            eprintln!("coldstart run: skipped {}: {}", s.path, s.reason);
        }
        for e in &report.errors {
            eprintln!("coldstart run: {e}");
        }
        eprintln!(
            "coldstart run: {} by {} on {} threads in {:.1} ms: {} of {} extents requested ({:.1} MiB), {} already resident, {} files opened{}",
            plan_path.display(),
            report.method.as_str(),
            report.threads,
            report.elapsed_ms,
            report.extents_requested,
            plan.extents.len(),
            report.bytes_requested as f64 / (1 << 20) as f64,
            report.extents_resident,
            report.files_opened,
            if report.stopped {
                ", stopped when the program exited"
            } else {
                ""
            }
        );
    } else if !skipped.is_empty() || !report.errors.is_empty() {
        eprintln!(
            "coldstart run: {} of {} files of {} were skipped (missing, unreadable or changed since traced){}; --verbose names them",
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

fn write_launcher(args: &RunArgs, path: &Path) -> anyhow::Result<ExitCode> {
    let quote = |text: &str| -> anyhow::Result<String> {
        Ok(shlex::try_quote(text)
            .with_context(|| format!("{text:?} cannot be quoted for the shell"))?
            .into_owned())
    };
    let coldstart = std::env::current_exe().context("cannot find the coldstart binary")?;
    let plan = std::path::absolute(&args.plan)
        .with_context(|| format!("cannot resolve {}", args.plan.display()))?;
    let command = args
        .command
        .iter()
        .map(|a| quote(&a.to_string_lossy()))
        .collect::<anyhow::Result<Vec<_>>>()?
        .join(" ");
    let mut options = String::new();
    if args.threads != 8 {
        options.push_str(&format!(" --threads {}", args.threads));
    }
    if args.method != MethodArg::Readahead {
        options.push_str(&format!(" --method {}", method(args.method).as_str()));
    }
    let script = format!(
        "#!/bin/sh\n\
         # Starts {program} while coldstart prefetches what its start needs\n\
         # (written by coldstart {version}). Without coldstart or the plan, the\n\
         # program starts unchanged.\n\
         coldstart={coldstart}\n\
         plan={plan}\n\
         if [ -x \"$coldstart\" ] && [ -r \"$plan\" ]; then\n\
         \x20   exec \"$coldstart\" run --plan \"$plan\"{options} -- {command} \"$@\"\n\
         fi\n\
         exec {command} \"$@\"\n",
        program = args.command[0].to_string_lossy(),
        version = env!("CARGO_PKG_VERSION"),
        coldstart = quote(&coldstart.to_string_lossy())?,
        plan = quote(&plan.to_string_lossy())?,
    );
    std::fs::write(path, script).with_context(|| format!("cannot write {}", path.display()))?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
        .with_context(|| format!("cannot make {} executable", path.display()))?;
    eprintln!("coldstart run: wrote the launcher {}", path.display());
    Ok(ExitCode::SUCCESS)
}
