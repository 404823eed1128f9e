//! One start of a planned program, from the exec event to its end.
//!
//! 1. At the event, before the program runs, the share of the planned pages
//!    of the plan's most planned file already cached is sampled: the start
//!    is cold or not ([`CacheSample`]).
//! 2. What the exec was given (its arguments, and its environment with
//!    COLDSTART_SERVE=0 in it or not), read at the event from the memory
//!    the process still has while its exec is under way ([`given_to_exec`];
//!    for a script, with the arguments its interpreter is given,
//!    [`given_to_script_exec`]); else once the exec completed: /proc/PID/exe
//!    names the executable and the new environment is readable, or, for a
//!    script, as soon as its interpreter runs ([`wait_for_script_exec`]).
//!    (fanotify tells of the exec while the old program's memory is still
//!    the process's.)
//! 3. The start is served, held out at random, opted out, or not served
//!    because memory is short or enough starts are being served.
//! 4. A served start's plan is replayed on threads named like every
//!    coldstart prefetcher, as the user the program runs as.
//! 5. The process tree is sampled until it falls quiet, its first process
//!    exits, or the cap; the replay is stopped there if still going.
//!
//! A program with no plan yet (learning) is not served: its start is
//! traced, when the service has a trace ready, and handed back with the
//! record for [`crate::learn`]. A served start may be traced as well, to
//! refine the plan; held-out and opted-out starts never are.

use crate::state::{EndedBy, Outcome, Program, StartRecord};
use coldstart_prefetch::Plan;
use coldstart_prefetch::replay::{
    self, DEFAULT_WINDOW_BYTES, Method, PREFETCHER_COMM, ReplayOptions, ReplayReport,
};
use coldstart_record::attach::{Attached, AttachedEnd};
use coldstart_system::cache;
use coldstart_system::credentials::Credentials;
use coldstart_system::exec_args;
use coldstart_system::identity::Inode;
use coldstart_system::launch::monotonic_ns;
use coldstart_system::path_handle::{self, Symlinks};
use coldstart_system::proc::{self, Usage};
use std::collections::HashSet;
use std::hash::{BuildHasher, RandomState};
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The variable a start's environment sets to 0 not to be served.
pub const OPT_OUT_VARIABLE: &str = "COLDSTART_SERVE";

/// How long the exec may take to complete before the start is given up.
const EXEC_DEADLINE: Duration = Duration::from_secs(2);

/// How long a process may stay as it was at the event before its exec is
/// taken as completed already.
const EXEC_SETTLE: Duration = Duration::from_millis(20);

/// How often the exec's completion is checked (a check reads two small
/// /proc files).
const EXEC_POLL: Duration = Duration::from_micros(50);

/// How often the process tree is sampled while it starts.
const SAMPLE_EVERY: Duration = Duration::from_millis(100);

/// The executable's pages sampled for the residency at the exec.
const SAMPLED_PAGES: u64 = 256;

/// Memory a served start leaves available at least, beyond its plan.
const KEEP_AVAILABLE: u64 = 256 << 20;

/// Memory pressure (PSI some avg10, percent) above which nothing is served.
const MAX_PRESSURE: f64 = 10.0;

/// A program a start of the executable may be a start of: which one it is
/// depends on its arguments' class, read once the exec completed.
#[derive(Clone)]
pub struct Candidate {
    pub program: Program,
    /// None while the program is learning.
    pub plan: Option<Arc<Plan>>,
    /// The plan's pages sampled at the exec; None without a plan, or when
    /// its file could not be opened.
    pub sample: Option<Arc<CacheSample>>,
}

/// Which of the programs of an executable, of argument classes `classes`,
/// a start of argument class `class` is a start of: the one of that class,
/// else one that has none (it is for every start).
pub fn chosen(classes: &[Option<&str>], class: &str) -> Option<usize> {
    classes
        .iter()
        .position(|c| *c == Some(class))
        .or_else(|| classes.iter().position(Option::is_none))
}

/// What a start needs from the service.
pub struct StartContext {
    /// The programs of the executable, those with a class first.
    pub candidates: Vec<Candidate>,
    /// The trace attached to the start at its exec, when it is traced.
    pub trace: Option<Attached>,
    /// The executable's inode, as the event handed it over.
    pub planned: Inode,
    /// A script's interpreter, when it is an ELF program the service found
    /// as the script's "#!" line names it.
    pub interpreter: Option<Interpreter>,
    /// The process as the event found it.
    pub before: Before,
    /// What its exec was given, when it could be read at the event.
    pub given: Option<Given>,
    pub pid: i32,
    /// The event was read, CLOCK_MONOTONIC.
    pub seen_ns: i64,
    pub hold_out_percent: u32,
    /// False when as many starts are being served as allowed.
    pub may_serve: bool,
}

/// A start followed to its end.
pub enum Followed {
    /// A start of the candidate at `index`.
    Start {
        index: usize,
        record: StartRecord,
        /// The start's trace, still to be written and learned from.
        trace: Option<Box<(Attached, AttachedEnd)>>,
    },
    /// A start whose arguments' class no candidate takes: nothing was
    /// served or traced; watched, as an unknown executable's start is.
    Unclaimed { class: String, end: End },
}

/// Follows one start to its end; `None` when the process was gone (or
/// never completed its exec) before the start could be judged.
pub fn follow(mut context: StartContext, stopping: &AtomicBool) -> Option<Followed> {
    let at_unix_ms = unix_ms();
    // At the event, before the program runs: for each plan that may be the
    // start's, how much of it is cached.
    let shares: Vec<f64> = context
        .candidates
        .iter()
        .map(|c| c.sample.as_deref().map_or(0.0, CacheSample::resident_share))
        .collect();
    let decided_at_exec = context.given.as_ref().is_some_and(|g| g.under_way);
    let (opted_out, argv) = match context.given.take() {
        Some(Given {
            opted_out, argv, ..
        }) => (opted_out, argv),
        None => {
            let given = match &context.interpreter {
                Some(interpreter) => wait_for_script_exec(
                    &context.before,
                    context.planned,
                    interpreter,
                    context.pid,
                )?,
                None => Given {
                    opted_out: wait_for_exec(&context.before, context.planned, context.pid)?,
                    argv: command_line(context.pid),
                    under_way: false,
                },
            };
            (given.opted_out, given.argv)
        }
    };
    let class = crate::learn::argument_class(&argv);
    let classes: Vec<Option<&str>> = context
        .candidates
        .iter()
        .map(|c| c.program.class.as_deref())
        .collect();
    let Some(index) = chosen(&classes, &class) else {
        // Not this executable's start of a class it knows: watched for what
        // it reads, as an unknown executable's start is.
        drop(context.trace.take());
        let first = context.candidates.first()?;
        let watched = Program {
            cap_ms: crate::learn::WATCH_CAP_MS,
            ..first.program.clone()
        };
        let end = watch_tree(context.pid, context.seen_ns, &watched, stopping);
        return Some(Followed::Unclaimed { class, end });
    };
    let Candidate {
        program,
        plan,
        sample,
        ..
    } = context.candidates.swap_remove(index);
    let resident_share = shares[index];
    if !crate::learn::wants_trace(&program) {
        drop(context.trace.take());
    }
    let short = memory_short(plan.as_ref().map_or(0, |p| p.bytes()));
    let outcome = decide(&context, plan.is_some(), opted_out, short);
    let credentials = Credentials::of_process(context.pid).ok();
    let uid = credentials.as_ref().map(|c| c.uid);
    let gid = credentials.as_ref().map(|c| c.gid);
    // Only starts served or learned from are traced.
    let trace = context.trace.take();
    let trace = match outcome {
        Outcome::Served | Outcome::Learning => trace,
        _ => {
            // Stops recording now, not at the start's end.
            drop(trace);
            None
        }
    };
    let replay_stop = Arc::new(AtomicBool::new(false));
    let first_request_ns = Arc::new(AtomicI64::new(0));
    let replay = match (&plan, outcome) {
        (Some(plan), Outcome::Served) => spawn_replay(
            Arc::clone(plan),
            credentials,
            Arc::clone(&replay_stop),
            Arc::clone(&first_request_ns),
        ),
        _ => None,
    };
    let end = watch_tree(context.pid, context.seen_ns, &program, stopping);
    replay_stop.store(true, Ordering::Release);
    // Once the exec completed (the start may have been decided before).
    let exe = std::fs::read_link(exe_link(context.pid))
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| program.exe.display().to_string());
    // Off the start's way: a file replaced since (an upgrade) is sampled
    // anew from the next start on.
    if let Some(sample) = &sample {
        sample.reopen_if_replaced();
    }
    let report: Option<ReplayReport> = replay.and_then(|thread| thread.join().ok());
    let first = first_request_ns.load(Ordering::Acquire);
    let traced = trace.is_some();
    let trace = trace.map(|attached| {
        Box::new((
            attached,
            AttachedEnd {
                argv,
                exe,
                uid: uid.unwrap_or(0),
                gid: gid.unwrap_or(0),
                ended_ns: end.at_ns,
                exited: end.by == EndedBy::Exited,
            },
        ))
    });
    let record = StartRecord {
        at_unix_ms,
        pid: context.pid,
        uid,
        outcome,
        ended_by: end.by,
        end_ms: (end.at_ns - context.seen_ns) as f64 / 1e6,
        resident_share,
        program_read_bytes: end.read_bytes,
        prefetch_bytes: report.as_ref().map_or(0, |r| r.bytes_requested),
        // The replay tells its lead once it asked for a byte, or when it
        // ends short of that: only a replay that asked has a first request.
        first_request_us: (first > 0 && report.as_ref().is_some_and(|r| r.bytes_requested > 0))
            .then(|| (first - context.seen_ns) as f64 / 1e3),
        skipped_files: report
            .map(|r| {
                r.files_skipped
                    .iter()
                    .take(5)
                    .map(|s| format!("{}: {}", s.path, s.reason))
                    .collect()
            })
            .unwrap_or_default(),
        traced,
        decided_at_exec,
    };
    Some(Followed::Start {
        index,
        record,
        trace,
    })
}

/// The command line of `pid`, its arguments split at NULs.
pub fn command_line(pid: i32) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|bytes| {
            bytes
                .split(|&b| b == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// The pages of a plan whose residency tells a cold start from a warm one:
/// at most [`SAMPLED_PAGES`] of the planned pages of its most planned file,
/// spread evenly, with that file opened when the plan is loaded (as root,
/// never through a symbolic link, a regular file only). Held open, the file
/// keeps its inode and directory entries in memory, so sampling it at an
/// exec reads nothing from the disk and costs the start's replay no wait:
/// opened at each exec instead, it took 0.4-0.9 ms of a cold Firefox start
/// before the first request. Sampling the executable alone would be free,
/// but a script's few pages are cached by its exec itself, and they said
/// every start was warm.
pub struct CacheSample {
    path: std::path::PathBuf,
    file: Mutex<std::fs::File>,
    /// Byte offsets of the sampled pages.
    offsets: Vec<u64>,
    page_size: u64,
}

impl CacheSample {
    /// The sample of `plan`; None when it plans no pages or its most
    /// planned file cannot be opened.
    pub fn of(plan: &Plan) -> Option<CacheSample> {
        let mut pages_of = vec![0u64; plan.files.len()];
        for e in &plan.extents {
            if let Some(count) = pages_of.get_mut(e.file) {
                *count += e.pages;
            }
        }
        let index = (0..pages_of.len()).max_by_key(|&i| pages_of[i])?;
        let pages: Vec<u64> = plan
            .extents
            .iter()
            .filter(|e| e.file == index)
            .flat_map(|e| e.page..e.page + e.pages)
            .collect();
        if pages.is_empty() {
            return None;
        }
        let step = (pages.len() as u64).div_ceil(SAMPLED_PAGES).max(1) as usize;
        let path = std::path::PathBuf::from(&plan.files[index].path);
        Some(CacheSample {
            file: Mutex::new(path_handle::open_regular(&path, Symlinks::Refuse).ok()?),
            path,
            offsets: pages
                .iter()
                .step_by(step)
                .map(|page| page * plan.page_size)
                .collect(),
            page_size: plan.page_size,
        })
    }

    /// The share of the sampled pages resident now.
    pub fn resident_share(&self) -> f64 {
        let Ok(file) = self.file.lock() else {
            return 0.0;
        };
        let resident = self
            .offsets
            .iter()
            .filter(|&&offset| {
                matches!(
                    cache::cached_pages_in(&file, offset, self.page_size),
                    Ok(Some(1))
                )
            })
            .count();
        resident as f64 / self.offsets.len().max(1) as f64
    }

    /// Opens the file again when its path names another file now.
    pub fn reopen_if_replaced(&self) {
        let Ok(mut file) = self.file.lock() else {
            return;
        };
        let held = file.metadata().ok().map(|m| Inode::of(&m));
        if Inode::of_path(&self.path) != held
            && let Ok(fresh) = path_handle::open_regular(&self.path, Symlinks::Refuse)
        {
            *file = fresh;
        }
    }
}

/// What the process was when the event was read: an exec in progress
/// leaves both as they were until the new program's memory is installed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Before {
    exe: Option<Inode>,
    environment_start: Option<u64>,
}

impl Before {
    pub fn snapshot(pid: i32) -> Before {
        Before {
            exe: Inode::of_path(&exe_link(pid)),
            environment_start: proc::environment_start(pid),
        }
    }
}

fn exe_link(pid: i32) -> std::path::PathBuf {
    std::path::PathBuf::from(format!("/proc/{pid}/exe"))
}

/// What a start's exec was given: whether it opts out, and its arguments.
pub struct Given {
    pub opted_out: bool,
    pub argv: Vec<String>,
    /// Read while the exec was still under way (else right after it).
    pub under_way: bool,
}

/// What the exec of `planned` by process `pid` was given, read from the
/// process's memory while the exec is still under way ([`exec_args`]), at
/// the event: the start is then decided without waiting for the exec to
/// complete, which first reads the binary's headers and its interpreter's
/// from the disk (1.0-1.7 ms of a cold Firefox start). The memory read is
/// the old program's as long as the process's executable is not yet the
/// planned file. `None` when that cannot be read surely (the exec completed
/// already, the process runs the planned file itself, or it stayed on a
/// CPU): the start then waits for the exec. A script's start is read by
/// [`given_to_script_exec`].
pub fn given_to_exec(pid: i32, planned: Inode) -> Option<Given> {
    let args = exec_args::read(pid, || Inode::of_path(&exe_link(pid)) != Some(planned))?;
    Some(given(&args, &args.argv))
}

/// The program a planned script's "#!" line names, looked up when the
/// plan is loaded and again after each start: a start decided at its exec
/// then does not wait for the interpreter's path lookup and first page,
/// which a cold exec reads from the disk at that very moment (0.6-2.5 ms
/// of a cold Chromium start's exec here).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interpreter {
    /// As the line names it.
    pub named: Vec<u8>,
    pub inode: Inode,
    /// An ELF file: an exec of the script ends running it.
    pub elf: bool,
    /// The line gives the interpreter an argument, before the script's name.
    pub argument: bool,
}

impl Interpreter {
    /// The interpreter the line of the script at `script` names now
    /// ([`Interpreter::named`]); `None` for no line.
    pub fn of_script(script: &std::path::Path) -> Option<Interpreter> {
        let file = path_handle::open_regular(script, Symlinks::Follow).ok()?;
        Interpreter::of_line(read_shebang(&file)?)
    }

    /// The program at `named`, as the service sees it; `None` for a name
    /// relative to the directory a start runs in. A process in another
    /// root directory may run another file of that name: its start is
    /// still checked to be an exec of the planned script.
    fn of_line(line: exec_args::Shebang) -> Option<Interpreter> {
        let named = line.interpreter;
        named.starts_with(b"/").then_some(())?;
        let path = std::path::PathBuf::from(std::ffi::OsStr::from_bytes(&named));
        let handle = path_handle::PathHandle::open(&path, Symlinks::Follow).ok()?;
        Some(Interpreter {
            inode: Inode::of(&handle.metadata().ok()?),
            elf: coldstart_system::build_id::is_elf_file(&path),
            argument: line.argument.is_some(),
            named,
        })
    }
}

/// The "#!" line of the script open as `script`.
fn read_shebang(script: &std::fs::File) -> Option<exec_args::Shebang> {
    use std::os::unix::fs::FileExt;
    let mut head = [0u8; exec_args::SCRIPT_HEAD];
    let read = script.read_at(&mut head, 0).ok()?;
    exec_args::Shebang::parse(&head[..read])
}

/// What the exec of script `planned` (open as `script`) by process `pid`
/// gives the script's interpreter, read at the event as for a program
/// ([`given_to_exec`]): its arguments are made from the script's "#!" line
/// and the exec's ([`exec_args::Shebang`]), the environment is the exec's.
/// The line's interpreter is `known` when it names the same; else it is
/// looked up now. The memory read is the old program's as long as the
/// process's executable is the one it ran at the event and not the
/// interpreter. `None`, and the start waits for the exec, when the line
/// names no ELF program (a script's interpreter may be
/// another script), the process already runs the interpreter, the exec
/// under way is not of this script (it runs a script whose interpreter
/// this script is), or it will fail (the script given by a descriptor
/// closed at the exec, which its interpreter cannot open).
pub fn given_to_script_exec(
    pid: i32,
    planned: Inode,
    script: &std::fs::File,
    known: Option<&Interpreter>,
) -> Option<Given> {
    // The kernel has just read the line: it is cached.
    let shebang = read_shebang(script)?;
    let interpreter = match known.filter(|k| k.named == shebang.interpreter) {
        Some(known) => known.clone(),
        None => Interpreter::of_line(shebang.clone())?,
    };
    if !interpreter.elf {
        return None;
    }
    let old = Inode::of_path(&exe_link(pid)).filter(|&old| old != interpreter.inode)?;
    let args = exec_args::read(pid, || Inode::of_path(&exe_link(pid)) == Some(old))?;
    if Inode::of_path(&exec_args::seen_from_outside(pid, &args.filename)) != Some(planned) {
        return None;
    }
    // A script exec'd from a descriptor closed at the exec fails.
    if let Some(fd) = args.from_descriptor
        && exec_args::closes_on_exec(pid, fd) != Some(false)
    {
        return None;
    }
    Some(given(&args, &shebang.interpreter_argv(&args)))
}

fn given(args: &exec_args::ExecArgs, argv: &[Vec<u8>]) -> Given {
    Given {
        opted_out: args.variable(OPT_OUT_VARIABLE) == Some(&b"0"[..]),
        argv: argv
            .iter()
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect(),
        under_way: true,
    }
}

/// What the interpreter of script `planned` was given, read at the event
/// when the exec completed already: process `pid` runs `interpreter`, and
/// its arguments name the script. Read then, not once the start's thread
/// has waited: a script may run on to an exec of its own at once (Chromium's
/// execs its binary with options of its own), and the arguments read after
/// it were another program's, so a start was taken for one of another
/// argument class. `None` when the process does not run the interpreter or
/// its arguments name another script.
pub fn given_after_script_exec(
    pid: i32,
    planned: Inode,
    interpreter: &Interpreter,
) -> Option<Given> {
    let now = Before::snapshot(pid);
    (now.exe == Some(interpreter.inode) && now.environment_start.is_some_and(|start| start != 0))
        .then_some(())?;
    let argv = command_line(pid);
    let script_at = 1 + usize::from(interpreter.argument);
    names_script(pid, &argv, script_at, planned).then_some(())?;
    let opted_out = proc::environment_variable(pid, OPT_OUT_VARIABLE).ok()?;
    // Still the same program: what was read is its.
    (Before::snapshot(pid) == now).then_some(())?;
    Some(Given {
        opted_out: opted_out.as_deref() == Some("0"),
        argv,
        under_way: false,
    })
}

/// Waits for the exec of script `planned` by process `pid` to complete,
/// and reads what its interpreter was given as soon as it runs
/// ([`given_after_script_exec`]): a script may leave its interpreter for a
/// program of its own within a millisecond, and was read after that as a
/// start of the program's options (Chromium's script adds a dozen). When
/// the process runs another program already (it was past the script at
/// the event, or ran on before it could be read), what that program was
/// given stands: a script that always runs on that fast gets a class of
/// its own options and the program's, the same at every start. `None`
/// when the process is gone or the exec did not complete within
/// [`EXEC_DEADLINE`].
pub fn wait_for_script_exec(
    before: &Before,
    planned: Inode,
    interpreter: &Interpreter,
    pid: i32,
) -> Option<Given> {
    let started = monotonic_ns();
    let deadline = started + EXEC_DEADLINE.as_nanos() as i64;
    let settle = started + EXEC_SETTLE.as_nanos() as i64;
    loop {
        if let Some(given) = given_after_script_exec(pid, planned, interpreter) {
            return Some(given);
        }
        let now = Before::snapshot(pid);
        if now.exe.is_none() && !proc::process_exists(pid) {
            return None;
        }
        let set_up = now.environment_start.is_some_and(|start| start != 0);
        let ran_on = now.exe != before.exe || monotonic_ns() > settle;
        if now.exe != Some(interpreter.inode)
            && set_up
            && ran_on
            && let Some(given) = given_now(pid)
        {
            return Some(given);
        }
        if monotonic_ns() > deadline {
            return None;
        }
        std::thread::sleep(EXEC_POLL);
    }
}

/// What the program process `pid` runs now was given: its arguments and
/// whether its environment opts out. `None` while its environment cannot
/// be read (its exec under way) or the process is gone.
fn given_now(pid: i32) -> Option<Given> {
    let opted_out = proc::environment_variable(pid, OPT_OUT_VARIABLE).ok()?;
    Some(Given {
        opted_out: opted_out.as_deref() == Some("0"),
        argv: command_line(pid),
        under_way: false,
    })
}

/// Whether `argv`, the arguments of a script's interpreter in process
/// `pid`, name script `planned` at `script_at`, where the kernel puts the
/// name the exec was given: after the interpreter's, and after the "#!"
/// line's argument when there is one. Only that one is looked up: the exec
/// has just been through its directories, where another argument (an
/// option, a file the program is to open) would be looked up in a
/// directory that may have to be read from the disk, behind the start's
/// own reads.
fn names_script(pid: i32, argv: &[String], script_at: usize, planned: Inode) -> bool {
    argv.get(script_at).is_some_and(|name| {
        Inode::of_path(&exec_args::seen_from_outside(pid, name.as_bytes())) == Some(planned)
    })
}

/// Waits until the exec completed and the new environment is readable;
/// whether it opts out. The exec completed once /proc/PID/exe is the
/// planned file (an executable; a parent running that same file, whose
/// exec is still under way, is taken for completed: its environment is
/// the one read), or once the process's memory is new (its
/// environment's address moved from the snapshot's and is set, the stack
/// being randomized) or its executable another file (a script's
/// interpreter). A script whose exec completed before the snapshot was
/// taken moves nothing: after [`EXEC_SETTLE`] it is taken as completed.
/// `None` when the process is gone or the exec never completes (it failed).
pub fn wait_for_exec(before: &Before, planned: Inode, pid: i32) -> Option<bool> {
    let started = monotonic_ns();
    let deadline = started + EXEC_DEADLINE.as_nanos() as i64;
    let settle = started + EXEC_SETTLE.as_nanos() as i64;
    let before = *before;
    loop {
        let now = Before::snapshot(pid);
        if now.exe.is_none() && !proc::process_exists(pid) {
            return None;
        }
        let set_up = now.environment_start.is_some_and(|start| start != 0);
        let planned = now.exe == Some(planned);
        let moved = now.environment_start != before.environment_start || now.exe != before.exe;
        let settled = monotonic_ns() > settle && now == before;
        if set_up && (planned || moved || settled) {
            match proc::environment_variable(pid, OPT_OUT_VARIABLE) {
                Ok(value) => return Some(value.as_deref() == Some("0")),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(_) => return None,
            }
        }
        if monotonic_ns() > deadline {
            return None;
        }
        std::thread::sleep(EXEC_POLL);
    }
}

/// Whether to serve the start, in this order: opted out, held out,
/// memory short, busy, served.
fn decide(context: &StartContext, planned: bool, opted_out: bool, memory_short: bool) -> Outcome {
    if opted_out {
        return Outcome::OptedOut;
    }
    if !planned {
        return Outcome::Learning;
    }
    if held_out(context.hold_out_percent, context.pid) {
        return Outcome::HeldOut;
    }
    if memory_short {
        return Outcome::MemoryShort;
    }
    if !context.may_serve {
        return Outcome::Busy;
    }
    Outcome::Served
}

/// A draw of `percent` in a hundred, seeded per process by std.
fn held_out(percent: u32, pid: i32) -> bool {
    let draw = RandomState::new().hash_one((monotonic_ns(), pid)) % 10_000;
    draw < u64::from(percent.min(100)) * 100
}

/// Whether reading `plan_bytes` now would press on memory: less than the
/// plan and [`KEEP_AVAILABLE`] available, or tasks already waiting for
/// memory ([`MAX_PRESSURE`]).
fn memory_short(plan_bytes: u64) -> bool {
    let available = proc::meminfo_bytes("MemAvailable").unwrap_or(u64::MAX);
    let pressure = proc::memory_pressure_avg10().unwrap_or(0.0);
    available < plan_bytes.saturating_add(KEEP_AVAILABLE) || pressure > MAX_PRESSURE
}

/// Replays the plan on a thread named as the prefetcher (its workers take
/// the name), as `credentials`; `None` when the thread cannot start.
fn spawn_replay(
    plan: Arc<Plan>,
    credentials: Option<Credentials>,
    stop: Arc<AtomicBool>,
    first_request_ns: Arc<AtomicI64>,
) -> Option<std::thread::JoinHandle<ReplayReport>> {
    std::thread::Builder::new()
        .name(PREFETCHER_COMM.to_string())
        .spawn(move || {
            let options = ReplayOptions {
                threads: replay::default_threads(),
                method: Method::Readahead,
                window_bytes: DEFAULT_WINDOW_BYTES,
                no_symlinks: true,
                open_as: credentials,
            };
            replay::replay_with_lead(&plan, &options, &stop, 1, &|| {
                first_request_ns.store(monotonic_ns(), Ordering::Release);
            })
        })
        .ok()
}

/// Where and how a start ended.
pub struct End {
    pub at_ns: i64,
    pub by: EndedBy,
    /// What the tree had read from storage by then.
    pub read_bytes: u64,
}

/// Samples the tree from `context.pid` every [`SAMPLE_EVERY`] until it
/// falls quiet for the program's quiet time, its first process exits, the
/// cap is reached or the service stops. A sample is busy when the tree used
/// a fifth of a CPU or more since the one before (two clock ticks in
/// 100 ms), read 256 KiB or more from storage, or waited on 4 major faults.
/// A quiet start ends at its last busy sample, or at its last sample with
/// any read or major fault when that came later: a start that reads a few
/// pages and idles is not cut off before the reads it waited for.
/// `pid` exec'd at `seen_ns`; the quiet time and the cap are `program`'s.
pub fn watch_tree(pid: i32, seen_ns: i64, program: &Program, stopping: &AtomicBool) -> End {
    let quiet_ns = program.quiet_ms as i64 * 1_000_000;
    let cap_at = seen_ns + program.cap_ms as i64 * 1_000_000;
    let mut last_busy = seen_ns;
    let mut last_read = seen_ns;
    let mut before = Usage::default();
    let mut read_bytes = 0;
    loop {
        std::thread::sleep(SAMPLE_EVERY);
        let now = monotonic_ns();
        if exited(pid) {
            return End {
                at_ns: now,
                by: EndedBy::Exited,
                read_bytes,
            };
        }
        let usage = tree_usage(pid);
        read_bytes = read_bytes.max(usage.read_bytes);
        let busy = usage.cpu_ticks.saturating_sub(before.cpu_ticks) >= 2
            || usage.read_bytes.saturating_sub(before.read_bytes) >= 256 << 10
            || usage.major_faults.saturating_sub(before.major_faults) >= 4;
        if usage.read_bytes > before.read_bytes || usage.major_faults > before.major_faults {
            last_read = now;
        }
        before = usage;
        if busy {
            last_busy = now;
        }
        let by = if now - last_busy >= quiet_ns {
            Some(EndedBy::Quiet)
        } else if now >= cap_at {
            Some(EndedBy::Cap)
        } else if stopping.load(Ordering::Acquire) {
            Some(EndedBy::Stopped)
        } else {
            None
        };
        if let Some(by) = by {
            let at_ns = if by == EndedBy::Quiet {
                last_busy.max(last_read)
            } else {
                now
            };
            return End {
                at_ns,
                by,
                read_bytes,
            };
        }
    }
}

/// Whether the process has exited (a zombie has no executable any more).
fn exited(pid: i32) -> bool {
    std::fs::read_link(format!("/proc/{pid}/exe")).is_err()
}

/// The usage of the tree from `root` now: its live processes, each with
/// its reaped descendants.
fn tree_usage(root: i32) -> Usage {
    let mut total = Usage::default();
    let mut seen = HashSet::new();
    let mut queue = vec![root];
    while let Some(pid) = queue.pop() {
        if !seen.insert(pid) {
            continue;
        }
        if let Some(usage) = proc::usage(pid) {
            total.cpu_ticks += usage.cpu_ticks;
            total.major_faults += usage.major_faults;
            total.read_bytes += usage.read_bytes;
        }
        queue.extend(proc::children_of(pid));
    }
    total
}

fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Whether `pid` descends from `ancestor` (or is it): a process of a start
/// already followed.
pub fn descends_from(pid: i32, ancestor: i32) -> bool {
    let mut current = pid;
    for _ in 0..64 {
        if current == ancestor {
            return true;
        }
        match proc::parent_of(current) {
            Some(parent) if parent > 1 && parent != current => current = parent,
            _ => return false,
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::{CacheSample, chosen};
    use coldstart_prefetch::handmade;
    use std::io::Read;
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::FileExt;

    const PAGE: u64 = 4096;

    #[test]
    fn a_start_is_of_the_program_of_its_class_else_of_one_for_every_class() {
        let writer = Some("--writer");
        assert_eq!(chosen(&[writer, None], "--writer"), Some(0));
        assert_eq!(chosen(&[None, writer], "--writer"), Some(1));
        assert_eq!(chosen(&[writer, None], "--calc"), Some(1));
        assert_eq!(chosen(&[writer, Some("")], "--calc"), None);
        assert_eq!(chosen(&[], ""), None);
    }

    /// The share of `pages` that mincore(2) finds resident in `path`.
    fn oracle(path: &std::path::Path, pages: &[u64]) -> f64 {
        let resident = coldstart_testkit::resident_pages(path);
        let cached = pages.iter().filter(|p| resident.contains(p)).count();
        cached as f64 / pages.len() as f64
    }

    #[test]
    fn the_sample_reads_the_most_planned_file_and_follows_its_replacement() {
        // On a disk: tmpfs pages cannot be evicted.
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let (small, big) = (dir.path().join("small"), dir.path().join("big"));
        coldstart_testkit::cold_file(&small, 8, PAGE);
        coldstart_testkit::cold_file(&big, 600, PAGE);
        let plan = handmade::plan(
            PAGE,
            vec![
                handmade::file(&small).unwrap(),
                handmade::file(&big).unwrap(),
            ],
            &[(0, 0, 8), (1, 0, 300), (1, 400, 200)],
        );
        let sample = CacheSample::of(&plan).unwrap();
        // 500 planned pages of the big file, every second one sampled.
        let sampled: Vec<u64> = (0..300).chain(400..600).step_by(2).collect();
        assert_eq!(sampled.len(), 250);
        assert_eq!(sample.resident_share(), 0.0);

        // The small file cached whole, and the big file's first 300 pages.
        std::fs::File::open(&small)
            .unwrap()
            .read_to_end(&mut Vec::new())
            .unwrap();
        // Read with readahead off for the descriptor: those pages alone.
        let reader = std::fs::File::open(&big).unwrap();
        // SAFETY: plain fadvise on our own descriptor.
        let rc = unsafe { libc::posix_fadvise(reader.as_raw_fd(), 0, 0, libc::POSIX_FADV_RANDOM) };
        assert_eq!(rc, 0);
        let mut first = vec![0u8; 300 * PAGE as usize];
        reader.read_exact_at(&mut first, 0).unwrap();
        let share = oracle(&big, &sampled);
        assert!(share > 0.0, "nothing of what was read stayed cached");
        assert_eq!(sample.resident_share(), share);

        // Another file renamed over the big one, cached whole: the sample
        // holds the old one until it is reopened.
        let new = dir.path().join("big.new");
        std::fs::write(&new, vec![7u8; 600 * PAGE as usize]).unwrap();
        std::fs::rename(&new, &big).unwrap();
        assert_eq!(sample.resident_share(), share);
        sample.reopen_if_replaced();
        assert_eq!(sample.resident_share(), oracle(&big, &sampled));
        assert!(sample.resident_share() > share);
    }

    #[test]
    fn no_sample_without_planned_pages_or_a_regular_file() {
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let file = dir.path().join("f");
        coldstart_testkit::cold_file(&file, 4, PAGE);
        let planned = handmade::file(&file).unwrap();
        assert!(CacheSample::of(&handmade::plan(PAGE, vec![planned.clone()], &[])).is_none());
        // A symbolic link at the planned path is not followed.
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        let mut linked = planned;
        linked.path = link.to_string_lossy().into_owned();
        assert!(CacheSample::of(&handmade::plan(PAGE, vec![linked], &[(0, 0, 4)])).is_none());
    }
}
