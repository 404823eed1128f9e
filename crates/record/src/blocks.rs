//! Block-level startup traces, without hardware branch records and without
//! instrumenting the program: it runs under ptrace with a one-shot
//! breakpoint on the first byte of every basic block that the
//! `.llvm_bb_addr_map` section of its files names (`clang
//! -fbasic-block-address-map`). Each breakpoint is removed at its first hit,
//! so the trace gives the order in which the start first ran each block of
//! the very build a cluster file will be applied to, at one trap per block
//! ever run; code that runs again runs at full speed.
//!
//! Files mapped later (the libraries ld.so loads, dlopen) are armed when
//! ld.so tells a debugger its list of objects changed: a breakpoint on its
//! `_dl_debug_state`, whose `ret` the tracer performs itself. Forked
//! children keep the parent's remaining breakpoints (the memory is
//! copied), so they are traced too; an exec starts afresh.
//!
//! The breakpoints are written through /proc/PID/mem, which makes private
//! copies of the patched text pages: a block trace says nothing about the
//! pages a start reads, and `coldstart trace --blocks` records no page
//! events.

use coldstart_binary::block_map::{BlockMap, discover_block_map_path, read_block_map_path};
use coldstart_profile::{BlockEndReason, BlockEvent, BlockFile, BlockRun, BlockRunId, Profile};
use coldstart_system::launch::Identity;
use std::collections::{HashMap, HashSet};
use std::ffi::OsString;
use std::fs::File;
use std::io;
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What can go wrong tracing blocks.
#[derive(Debug, thiserror::Error)]
pub enum BlocksError {
    #[error("cannot start {program}")]
    Start {
        program: String,
        #[source]
        source: io::Error,
    },
    #[error("no command given")]
    NoCommand,
    #[error("block tracing needs ptrace on x86-64; this is {0}")]
    Unsupported(&'static str),
    #[error("tracing {program} with ptrace: {detail}")]
    Ptrace { program: String, detail: String },
}

/// How to run the traced program.
#[derive(Debug, Clone)]
pub struct BlockTraceOptions {
    pub argv: Vec<OsString>,
    /// The user the program runs as.
    pub identity: Identity,
    /// Variables added to the program's environment.
    pub env: Vec<(OsString, OsString)>,
    /// The program (and every process it started) is killed after this
    /// long; what it ran until then is kept.
    pub timeout: Option<Duration>,
    /// The program's standard output goes to standard error (when
    /// coldstart's own output is JSON).
    pub stdout_to_stderr: bool,
    /// Files (canonical paths) whose blocks are found by disassembly when
    /// they have no block map (builds by gcc, or for BOLT).
    pub discover: Vec<PathBuf>,
}

/// One file that was mapped executable during the start.
#[derive(Debug, Clone)]
pub struct TracedFile {
    pub path: PathBuf,
    pub dev: u64,
    pub ino: u64,
    pub size: u64,
    pub mtime_ns: i64,
    pub build_id: Option<String>,
    /// Its block map, or None when it has none (a build without
    /// `-fbasic-block-address-map`: nothing of it is traced).
    pub map: Option<Arc<BlockMap>>,
    /// Why its map could not be read, when it could not.
    pub problem: Option<String>,
    /// Breakpoints it got, over every process that mapped it.
    pub armed: u64,
}

/// A block's first run in one process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockHit {
    /// The process (tgid).
    pub pid: i32,
    /// Rank of this first run among the process's, from 1.
    pub seq: u64,
    /// Nanoseconds after the program was started.
    pub t_ns: u64,
    /// Index into [`BlockTrace::files`].
    pub file: usize,
    pub block: BlockRef,
}

/// A block of a file's map: function, range and block indices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BlockRef {
    pub function: u32,
    pub range: u32,
    pub block: u32,
}

/// Why the trace ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockEnd {
    /// Every traced process exited.
    Exited,
    /// The timeout passed; the program was killed.
    Timeout,
    /// Ctrl-C (or SIGTERM, SIGHUP); the program was killed.
    Interrupted,
}

/// A traced start.
#[derive(Debug, Clone)]
pub struct BlockTrace {
    pub files: Vec<TracedFile>,
    /// First runs, in the order the tracer saw them.
    pub hits: Vec<BlockHit>,
    /// Every process traced, with the file it last executed.
    pub processes: Vec<(i32, PathBuf)>,
    pub root_pid: i32,
    /// Wall clock when the program was started.
    pub started_at_unix_ns: i64,
    pub duration_ns: u64,
    pub end: BlockEnd,
    /// Exit code or signal of the first process, when it ended by itself.
    pub exit_code: Option<i32>,
    pub exit_signal: Option<i32>,
    /// Breakpoints hit (a block's first run, and the races of threads on
    /// one), and ld.so's notifications.
    pub traps: u64,
}

impl BlockTrace {
    /// The block a hit names.
    pub fn block(&self, hit: &BlockHit) -> Option<&coldstart_binary::block_map::Block> {
        let map = self.files.get(hit.file)?.map.as_ref()?;
        map.functions
            .get(hit.block.function as usize)?
            .ranges
            .get(hit.block.range as usize)?
            .blocks
            .get(hit.block.block as usize)
    }
}

/// Runs the program under the block tracer until every process it started
/// exited, the timeout passed or `interrupted` was raised.
pub fn trace_blocks(
    options: &BlockTraceOptions,
    interrupted: &AtomicBool,
) -> Result<BlockTrace, BlocksError> {
    if !cfg!(all(target_os = "linux", target_arch = "x86_64")) {
        return Err(BlocksError::Unsupported(std::env::consts::ARCH));
    }
    let Some((program, args)) = options.argv.split_first() else {
        return Err(BlocksError::NoCommand);
    };
    let program_name = program.to_string_lossy().into_owned();
    let mut command = Command::new(program);
    command
        .args(args)
        .stdin(Stdio::null())
        .envs(options.env.iter().map(|(k, v)| (k, v)))
        .process_group(0);
    if options.stdout_to_stderr {
        let stderr = io::stderr()
            .as_fd()
            .try_clone_to_owned()
            .map_err(|source| BlocksError::Start {
                program: program_name.clone(),
                source,
            })?;
        command.stdout(Stdio::from(stderr));
    }
    options.identity.apply_to(&mut command);
    // SAFETY: prctl and ptrace are async-signal-safe.
    unsafe {
        command.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
            if libc::ptrace(libc::PTRACE_TRACEME, 0, 0, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let started_at_unix_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0);
    let t0 = Instant::now();
    let child = command.spawn().map_err(|source| BlocksError::Start {
        program: program_name.clone(),
        source,
    })?;
    let root_pid = child.id() as i32;
    // The child is reaped by waitpid below, never through `child`.
    drop(child);

    let live = Arc::new(Mutex::new(HashSet::from([root_pid])));
    let stop = AtomicBool::new(false);
    let deadline = options.timeout.map(|t| Instant::now() + t);
    let mut tracer = Tracer::new(root_pid, t0, Arc::clone(&live), options.discover.clone());
    let (result, ended_by) = std::thread::scope(|scope| {
        // Ends the trace at the timeout or on Ctrl-C by killing every
        // traced process (a process stopped by ptrace dies of SIGKILL too).
        let watcher = std::thread::Builder::new()
            .name("coldstart-blocks-watch".into())
            .spawn_scoped(scope, || {
                while !stop.load(Ordering::Acquire) {
                    let end = if interrupted.load(Ordering::Acquire) {
                        Some(BlockEnd::Interrupted)
                    } else if deadline.is_some_and(|d| Instant::now() >= d) {
                        Some(BlockEnd::Timeout)
                    } else {
                        None
                    };
                    if end.is_some() {
                        kill_all(root_pid, &live);
                        return end;
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                None
            });
        let result = tracer.run();
        stop.store(true, Ordering::Release);
        let ended_by = match watcher {
            Ok(watcher) => watcher.join().ok().flatten(),
            Err(_) => None,
        };
        (result, ended_by)
    });
    if let Err(detail) = result {
        kill_all(root_pid, &live);
        tracer.reap_all();
        return Err(BlocksError::Ptrace {
            program: program_name,
            detail,
        });
    }
    let end = ended_by.unwrap_or(BlockEnd::Exited);
    Ok(tracer.finish(started_at_unix_ns, t0.elapsed().as_nanos() as u64, end))
}

/// Writes `trace`, made with `options`, to `profile` as a block run with
/// its files and each block's first run per process; returns its id.
pub fn write_block_run(
    profile: &mut Profile,
    trace: &BlockTrace,
    options: &BlockTraceOptions,
) -> Result<BlockRunId, coldstart_profile::Error> {
    let run = BlockRun {
        id: 0,
        argv: options
            .argv
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect(),
        cwd: std::env::current_dir()
            .map(|d| d.to_string_lossy().into_owned())
            .unwrap_or_default(),
        started_at_unix_ns: trace.started_at_unix_ns,
        duration_ns: trace.duration_ns,
        end_reason: match trace.end {
            BlockEnd::Exited => BlockEndReason::Exited,
            BlockEnd::Timeout => BlockEndReason::Timeout,
            BlockEnd::Interrupted => BlockEndReason::Interrupted,
        },
        exit_code: trace.exit_code,
        exit_signal: trace.exit_signal,
        uid: options.identity.uid,
        gid: options.identity.gid,
        root_pid: trace.root_pid,
        traps: trace.traps,
        tool_version: env!("CARGO_PKG_VERSION").to_string(),
    };
    let files: Vec<BlockFile> = trace
        .files
        .iter()
        .enumerate()
        .map(|(i, f)| BlockFile {
            file: i as u32,
            path: f.path.clone(),
            dev: f.dev,
            ino: f.ino,
            size: f.size,
            mtime_ns: f.mtime_ns,
            build_id: f.build_id.clone(),
            has_map: f.map.is_some(),
            problem: f.problem.clone(),
            armed: f.armed,
        })
        .collect();
    let blocks: Vec<BlockEvent> = trace
        .hits
        .iter()
        .filter_map(|hit| {
            let map = trace.files[hit.file].map.as_ref()?;
            let function = map.functions.get(hit.block.function as usize)?;
            let block = trace.block(hit)?;
            Some(BlockEvent {
                pid: hit.pid,
                first_seq: hit.seq,
                file: hit.file as u32,
                function: function.address,
                symbol: function.names.first().cloned(),
                bb_id: block.id,
                address: block.address,
                offset: block.offset,
                size: block.size,
                first_t_ns: hit.t_ns as i64,
            })
        })
        .collect();
    profile.write_block_run(&run, &files, &blocks)
}

fn kill_all(root_pid: i32, live: &Mutex<HashSet<i32>>) {
    // SAFETY: kill(2) with a process group and with pids this tracer holds.
    unsafe { libc::kill(-root_pid, libc::SIGKILL) };
    if let Ok(live) = live.lock() {
        for &pid in live.iter() {
            // SAFETY: as above.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}

const INT3: u8 = 0xcc;

/// A file by (device, inode).
type FileKey = (u64, u64);

/// One executable mapping of a file: addresses and the file offset of
/// `start`. (Only those: a file's read-only segment can map the same file
/// offsets as its code, at other addresses, when the linker packs the
/// segments' pages, as lld does.)
struct Mapping {
    start: u64,
    end: u64,
    offset: u64,
}
const PAGE: u64 = 4096;

/// One address space: the breakpoints written into it.
struct Space {
    /// /proc/PID/mem of a process using it.
    mem: File,
    /// Every address given a breakpoint, with the byte it replaced.
    original: HashMap<u64, u8>,
    /// Breakpoints not yet hit, with the blocks starting there.
    pending: HashMap<u64, Vec<(usize, BlockRef)>>,
    /// Files armed, by (dev, ino).
    armed_files: HashSet<FileKey>,
    /// ld.so's `ret` in `_dl_debug_state`, when found.
    notify_at: Option<u64>,
}

type SpaceRef = std::rc::Rc<std::cell::RefCell<Space>>;

struct Task {
    tgid: i32,
    space: SpaceRef,
}

struct Tracer {
    /// Files whose blocks are found by disassembly.
    discover: Vec<PathBuf>,
    root_pid: i32,
    t0: Instant,
    live: Arc<Mutex<HashSet<i32>>>,
    tasks: HashMap<i32, Task>,
    /// Children whose first stop came before their parent's event.
    early: HashSet<i32>,
    /// Children announced by their parent, whose first stop is to come.
    announced: HashSet<i32>,
    files: Vec<TracedFile>,
    file_index: HashMap<FileKey, usize>,
    hits: Vec<BlockHit>,
    seq: HashMap<i32, u64>,
    processes: HashMap<i32, PathBuf>,
    exit_code: Option<i32>,
    exit_signal: Option<i32>,
    traps: u64,
}

impl Tracer {
    fn new(
        root_pid: i32,
        t0: Instant,
        live: Arc<Mutex<HashSet<i32>>>,
        discover: Vec<PathBuf>,
    ) -> Tracer {
        Tracer {
            discover,
            root_pid,
            t0,
            live,
            tasks: HashMap::new(),
            early: HashSet::new(),
            announced: HashSet::new(),
            files: Vec::new(),
            file_index: HashMap::new(),
            hits: Vec::new(),
            seq: HashMap::new(),
            processes: HashMap::new(),
            exit_code: None,
            exit_signal: None,
            traps: 0,
        }
    }

    fn finish(self, started_at_unix_ns: i64, duration_ns: u64, end: BlockEnd) -> BlockTrace {
        let mut processes: Vec<(i32, PathBuf)> = self.processes.into_iter().collect();
        processes.sort();
        BlockTrace {
            files: self.files,
            hits: self.hits,
            processes,
            root_pid: self.root_pid,
            started_at_unix_ns,
            duration_ns,
            end,
            exit_code: self.exit_code,
            exit_signal: self.exit_signal,
            traps: self.traps,
        }
    }

    /// Reaps what is left after a failure (the processes were killed).
    fn reap_all(&mut self) {
        loop {
            let mut status = 0;
            // SAFETY: waitpid with a valid out-pointer.
            let pid = unsafe { libc::waitpid(-1, &mut status, libc::__WALL) };
            if pid <= 0 {
                return;
            }
        }
    }

    fn run(&mut self) -> Result<(), String> {
        // The first stop: the SIGTRAP of the program's own exec.
        let status = wait_for(self.root_pid)?;
        if !libc::WIFSTOPPED(status) {
            return Err("the program ended before its first instruction".into());
        }
        let options = libc::PTRACE_O_TRACEFORK
            | libc::PTRACE_O_TRACEVFORK
            | libc::PTRACE_O_TRACECLONE
            | libc::PTRACE_O_TRACEEXEC
            | libc::PTRACE_O_EXITKILL;
        // SAFETY: ptrace on our stopped tracee.
        if unsafe { libc::ptrace(libc::PTRACE_SETOPTIONS, self.root_pid, 0, options) } != 0 {
            return Err(format!("PTRACE_SETOPTIONS: {}", io::Error::last_os_error()));
        }
        self.exec(self.root_pid)?;
        resume(self.root_pid, 0);
        loop {
            let mut status = 0;
            // SAFETY: waitpid with a valid out-pointer.
            let pid = unsafe { libc::waitpid(-1, &mut status, libc::__WALL) };
            if pid < 0 {
                let err = io::Error::last_os_error();
                match err.raw_os_error() {
                    Some(libc::EINTR) => continue,
                    Some(libc::ECHILD) => return Ok(()),
                    _ => return Err(format!("waitpid: {err}")),
                }
            }
            self.stopped(pid, status)?;
        }
    }

    fn stopped(&mut self, pid: i32, status: i32) -> Result<(), String> {
        if libc::WIFEXITED(status) || libc::WIFSIGNALED(status) {
            if pid == self.root_pid {
                if libc::WIFEXITED(status) {
                    self.exit_code = Some(libc::WEXITSTATUS(status));
                } else {
                    self.exit_signal = Some(libc::WTERMSIG(status));
                }
            }
            self.tasks.remove(&pid);
            if let Ok(mut live) = self.live.lock() {
                live.remove(&pid);
            }
            return Ok(());
        }
        if !libc::WIFSTOPPED(status) {
            return Ok(());
        }
        let signal = libc::WSTOPSIG(status);
        let event = (status >> 16) & 0xff;
        // A new task's first stop (the SIGSTOP of its attach): it runs once
        // its parent's event told whose it is.
        if self.announced.remove(&pid) {
            resume(pid, 0);
            return Ok(());
        }
        if !self.tasks.contains_key(&pid) {
            self.early.insert(pid);
            return Ok(());
        }
        if signal == libc::SIGTRAP && event != 0 {
            match event {
                libc::PTRACE_EVENT_FORK | libc::PTRACE_EVENT_VFORK | libc::PTRACE_EVENT_CLONE => {
                    let child = event_message(pid)? as i32;
                    self.adopt(pid, child, event)?;
                }
                libc::PTRACE_EVENT_EXEC => self.exec(pid)?,
                _ => {}
            }
            resume(pid, 0);
            return Ok(());
        }
        if signal == libc::SIGTRAP && self.breakpoint(pid)? {
            return Ok(());
        }
        // A signal for the program: delivered. A group stop (no siginfo)
        // is not kept: the program goes on.
        let deliver = if siginfo_code(pid).is_some() {
            signal
        } else {
            0
        };
        resume(pid, deliver);
        Ok(())
    }

    /// A new task from `parent`'s fork, vfork or clone.
    fn adopt(&mut self, parent: i32, child: i32, event: i32) -> Result<(), String> {
        let (parent_tgid, parent_space) = {
            let task = &self.tasks[&parent];
            (task.tgid, std::rc::Rc::clone(&task.space))
        };
        let tgid = tgid_of(child).unwrap_or(child);
        let shares_memory = event == libc::PTRACE_EVENT_VFORK
            || tgid == parent_tgid
            || (event == libc::PTRACE_EVENT_CLONE && same_memory(parent, child));
        let space = if shares_memory {
            parent_space
        } else {
            // A copy of the parent's memory, with the breakpoints it had.
            let mem = File::options()
                .read(true)
                .write(true)
                .open(format!("/proc/{child}/mem"))
                .map_err(|e| format!("opening /proc/{child}/mem: {e}"))?;
            let from = parent_space.borrow();
            std::rc::Rc::new(std::cell::RefCell::new(Space {
                mem,
                original: from.original.clone(),
                pending: from.pending.clone(),
                armed_files: from.armed_files.clone(),
                notify_at: from.notify_at,
            }))
        };
        if tgid != parent_tgid
            && let Some(exe) = self.processes.get(&parent_tgid).cloned()
        {
            self.processes.insert(tgid, exe);
        }
        self.tasks.insert(child, Task { tgid, space });
        if let Ok(mut live) = self.live.lock() {
            live.insert(child);
        }
        if self.early.remove(&child) {
            resume(child, 0);
        } else {
            self.announced.insert(child);
        }
        Ok(())
    }

    /// `pid` executed a program (or is the first process, at its first
    /// stop): a new address space, armed with what is mapped now and ld.so's
    /// notification.
    fn exec(&mut self, pid: i32) -> Result<(), String> {
        let mem = File::options()
            .read(true)
            .write(true)
            .open(format!("/proc/{pid}/mem"))
            .map_err(|e| format!("opening /proc/{pid}/mem: {e}"))?;
        let space = std::rc::Rc::new(std::cell::RefCell::new(Space {
            mem,
            original: HashMap::new(),
            pending: HashMap::new(),
            armed_files: HashSet::new(),
            notify_at: None,
        }));
        let tgid = tgid_of(pid).unwrap_or(pid);
        // Threads other than the one that executed are gone.
        self.tasks.retain(|_, t| t.tgid != tgid);
        self.tasks.insert(
            pid,
            Task {
                tgid,
                space: std::rc::Rc::clone(&space),
            },
        );
        if let Ok(exe) = std::fs::read_link(format!("/proc/{pid}/exe")) {
            self.processes.insert(tgid, exe);
        }
        let notification = loader_notification(pid, &space.borrow().mem);
        if let Some(at) = notification {
            let mut s = space.borrow_mut();
            if write_breakpoint(&mut s, at)? {
                s.notify_at = Some(at);
            }
        }
        self.arm_new_files(pid, &space)
    }

    /// Arms every executable mapping of a file not armed yet in `space`.
    fn arm_new_files(&mut self, pid: i32, space: &SpaceRef) -> Result<(), String> {
        let Ok(maps) = coldstart_system::proc::maps(pid) else {
            return Ok(());
        };
        // Every executable mapping of each file, with its place in the file;
        // files in address order.
        let mut by_file: HashMap<FileKey, (PathBuf, Vec<Mapping>)> = HashMap::new();
        let mut keys = Vec::new();
        for line in maps.lines() {
            let Some(path) = line.file_path() else {
                continue;
            };
            if !line.perms.contains(&b'x') {
                continue;
            }
            let key = (line.device(), line.inode);
            by_file
                .entry(key)
                .or_insert_with(|| {
                    keys.push(key);
                    (PathBuf::from(std::ffi::OsStr::from_bytes(path)), Vec::new())
                })
                .1
                .push(Mapping {
                    start: line.start,
                    end: line.end,
                    offset: line.offset,
                });
        }
        for key in keys {
            if space.borrow().armed_files.contains(&key) {
                continue;
            }
            space.borrow_mut().armed_files.insert(key);
            let (path, mappings) = &by_file[&key];
            let file = self.file(key, path);
            let Some(map) = self.files[file].map.clone() else {
                continue;
            };
            let armed = arm(&mut space.borrow_mut(), file, &map, mappings)?;
            self.files[file].armed += armed;
        }
        Ok(())
    }

    /// The index of a file in `files`, reading its map at its first sight.
    fn file(&mut self, key: FileKey, path: &Path) -> usize {
        if let Some(&index) = self.file_index.get(&key) {
            return index;
        }
        let meta = std::fs::metadata(path).ok();
        let same = meta.as_ref().is_some_and(|m| (m.dev(), m.ino()) == key);
        let (map, problem) = if !same {
            (
                None,
                Some("the file at this path is no longer the one mapped".to_string()),
            )
        } else {
            match read_block_map_path(path) {
                Ok(None) if self.discover.iter().any(|d| d == path) => {
                    match discover_block_map_path(path) {
                        Ok(map) => (Some(Arc::new(map)), None),
                        Err(e) => (None, Some(e.to_string())),
                    }
                }
                Ok(map) => (map.map(Arc::new), None),
                Err(e) => (None, Some(e.to_string())),
            }
        };
        let meta = meta.filter(|_| same);
        self.files.push(TracedFile {
            path: path.to_path_buf(),
            dev: key.0,
            ino: key.1,
            size: meta.as_ref().map_or(0, |m| m.size()),
            mtime_ns: meta
                .as_ref()
                .map_or(0, |m| m.mtime() * 1_000_000_000 + m.mtime_nsec()),
            build_id: coldstart_system::build_id::build_id(path),
            map,
            problem,
            armed: 0,
        });
        self.file_index.insert(key, self.files.len() - 1);
        self.files.len() - 1
    }

    /// Handles a SIGTRAP stop that may be one of ours; false when it is
    /// not (the program's own).
    fn breakpoint(&mut self, pid: i32) -> Result<bool, String> {
        let Some(mut regs) = registers(pid) else {
            return Ok(false);
        };
        let at = regs.rip.wrapping_sub(1);
        let task = &self.tasks[&pid];
        let tgid = task.tgid;
        let space = std::rc::Rc::clone(&task.space);
        let mut s = space.borrow_mut();
        if s.notify_at == Some(at) {
            // ld.so's list of objects changed: arm what it mapped, then
            // return from _dl_debug_state for it (the breakpoint stays).
            self.traps += 1;
            let sp = regs.rsp;
            let mut word = [0u8; 8];
            s.mem
                .read_exact_at(&mut word, sp)
                .map_err(|e| format!("reading the stack of {pid}: {e}"))?;
            regs.rip = u64::from_le_bytes(word);
            regs.rsp = sp + 8;
            drop(s);
            self.arm_new_files(pid, &space)?;
            set_registers(pid, &regs)?;
            resume(pid, 0);
            return Ok(true);
        }
        let Some(&byte) = s.original.get(&at) else {
            return Ok(false);
        };
        self.traps += 1;
        if let Some(blocks) = s.pending.remove(&at) {
            let t_ns = self.t0.elapsed().as_nanos() as u64;
            let seq = self.seq.entry(tgid).or_insert(0);
            for (file, block) in blocks {
                *seq += 1;
                self.hits.push(BlockHit {
                    pid: tgid,
                    seq: *seq,
                    t_ns,
                    file,
                    block,
                });
            }
        }
        // Restored at every trap there: a process forked while another
        // thread's hit was handled may still hold the breakpoint.
        s.mem
            .write_all_at(&[byte], at)
            .map_err(|e| format!("restoring {at:#x} in {pid}: {e}"))?;
        regs.rip = at;
        set_registers(pid, &regs)?;
        resume(pid, 0);
        Ok(true)
    }
}

/// Writes breakpoints at the start of every block of `map` that a mapping
/// of the file holds; returns how many were written.
fn arm(
    space: &mut Space,
    file: usize,
    map: &BlockMap,
    mappings: &[Mapping],
) -> Result<u64, String> {
    let mut targets: Vec<(u64, BlockRef)> = Vec::new();
    for (f, function) in map.functions.iter().enumerate() {
        for (r, range) in function.ranges.iter().enumerate() {
            for (b, block) in range.blocks.iter().enumerate() {
                // An empty block starts where the next one does: it holds
                // no code of its own to run.
                if block.size == 0 {
                    continue;
                }
                let Some(address) = mappings.iter().find_map(|m| {
                    (block.offset >= m.offset && block.offset < m.offset + (m.end - m.start))
                        .then(|| m.start + (block.offset - m.offset))
                }) else {
                    continue;
                };
                targets.push((
                    address,
                    BlockRef {
                        function: f as u32,
                        range: r as u32,
                        block: b as u32,
                    },
                ));
            }
        }
    }
    targets.sort_by_key(|t| t.0);
    let mut armed = 0;
    let mut page = vec![0u8; PAGE as usize];
    let mut i = 0;
    while i < targets.len() {
        let base = targets[i].0 & !(PAGE - 1);
        let mut j = i;
        while j < targets.len() && targets[j].0 < base + PAGE {
            j += 1;
        }
        space
            .mem
            .read_exact_at(&mut page, base)
            .map_err(|e| format!("reading code at {base:#x}: {e}"))?;
        let mut changed = false;
        for &(address, block) in &targets[i..j] {
            let at = (address - base) as usize;
            if let Some(pending) = space.pending.get_mut(&address) {
                pending.push((file, block));
                continue;
            }
            if space.original.contains_key(&address) || page[at] == INT3 {
                // Already run (a breakpoint hit before this file was seen
                // again), or the program's own trap: left alone.
                continue;
            }
            space.original.insert(address, page[at]);
            space.pending.insert(address, vec![(file, block)]);
            page[at] = INT3;
            changed = true;
            armed += 1;
        }
        if changed {
            space
                .mem
                .write_all_at(&page, base)
                .map_err(|e| format!("writing breakpoints at {base:#x}: {e}"))?;
        }
        i = j;
    }
    Ok(armed)
}

/// Writes one lasting breakpoint (ld.so's notification).
fn write_breakpoint(space: &mut Space, at: u64) -> Result<bool, String> {
    let mut byte = [0u8];
    if space.mem.read_exact_at(&mut byte, at).is_err() {
        return Ok(false);
    }
    space
        .mem
        .write_all_at(&[INT3], at)
        .map_err(|e| format!("writing a breakpoint at {at:#x}: {e}"))?;
    Ok(true)
}

/// The address of the `ret` of ld.so's `_dl_debug_state` in process `pid`,
/// which a debugger breaks on to hear of objects mapped and unmapped.
/// None for a static program, or an ld.so whose function is not a bare
/// return.
fn loader_notification(pid: i32, mem: &File) -> Option<u64> {
    let auxv = std::fs::read(format!("/proc/{pid}/auxv")).ok()?;
    let base = auxv
        .chunks_exact(16)
        .map(|pair| {
            let key = u64::from_le_bytes(pair[..8].try_into().unwrap_or_default());
            let value = u64::from_le_bytes(pair[8..].try_into().unwrap_or_default());
            (key, value)
        })
        .find(|&(key, _)| key == libc::AT_BASE)?
        .1;
    if base == 0 {
        return None;
    }
    let maps = coldstart_system::proc::maps(pid).ok()?;
    let path = maps
        .lines()
        .find(|line| line.start == base)
        .and_then(|line| line.file_path())
        .map(|p| PathBuf::from(std::ffi::OsStr::from_bytes(p)))?;
    let data = std::fs::read(&path).ok()?;
    let value = symbol_value(&data, b"_dl_debug_state")?;
    let start = base + value;
    // endbr64 (f3 0f 1e fa) then ret (c3), or a bare ret.
    let mut code = [0u8; 5];
    mem.read_exact_at(&mut code, start).ok()?;
    if code[0] == 0xc3 {
        Some(start)
    } else if code == [0xf3, 0x0f, 0x1e, 0xfa, 0xc3] {
        Some(start + 4)
    } else {
        None
    }
}

fn symbol_value(data: &[u8], name: &[u8]) -> Option<u64> {
    use object::{Object, ObjectSymbol};
    let file = object::File::parse(data).ok()?;
    file.dynamic_symbols()
        .chain(file.symbols())
        .find(|s| s.name_bytes().ok() == Some(name))
        .map(|s| s.address())
}

fn wait_for(pid: i32) -> Result<i32, String> {
    loop {
        let mut status = 0;
        // SAFETY: waitpid with a valid out-pointer.
        let got = unsafe { libc::waitpid(pid, &mut status, libc::__WALL) };
        if got == pid {
            return Ok(status);
        }
        let err = io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::EINTR) {
            return Err(format!("waitpid: {err}"));
        }
    }
}

fn resume(pid: i32, signal: i32) {
    // SAFETY: ptrace on a stopped tracee; a tracee killed meanwhile makes
    // it fail with ESRCH, which is fine: its exit is reported next.
    unsafe { libc::ptrace(libc::PTRACE_CONT, pid, 0, signal as libc::c_long) };
}

fn event_message(pid: i32) -> Result<u64, String> {
    let mut message: libc::c_ulong = 0;
    // SAFETY: the out-pointer is valid.
    if unsafe { libc::ptrace(libc::PTRACE_GETEVENTMSG, pid, 0, &mut message) } != 0 {
        return Err(format!(
            "PTRACE_GETEVENTMSG of {pid}: {}",
            io::Error::last_os_error()
        ));
    }
    Ok(message as u64)
}

/// The si_code of the signal `pid` stopped with, or None in a group stop.
fn siginfo_code(pid: i32) -> Option<i32> {
    // SAFETY: zeroed siginfo is a valid out-parameter.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: the out-pointer is valid.
    let rc = unsafe { libc::ptrace(libc::PTRACE_GETSIGINFO, pid, 0, &mut info) };
    (rc == 0).then_some(info.si_code)
}

#[cfg(target_arch = "x86_64")]
type Registers = libc::user_regs_struct;

#[cfg(target_arch = "x86_64")]
fn registers(pid: i32) -> Option<Registers> {
    // SAFETY: zeroed registers are a valid out-parameter.
    let mut regs: Registers = unsafe { std::mem::zeroed() };
    // SAFETY: the out-pointer is valid.
    let rc = unsafe { libc::ptrace(libc::PTRACE_GETREGS, pid, 0, &mut regs) };
    (rc == 0).then_some(regs)
}

#[cfg(not(target_arch = "x86_64"))]
struct Registers {
    rip: u64,
    rsp: u64,
}

#[cfg(not(target_arch = "x86_64"))]
fn registers(_pid: i32) -> Option<Registers> {
    None
}

#[cfg(not(target_arch = "x86_64"))]
fn set_registers(_pid: i32, _regs: &Registers) -> Result<(), String> {
    Err("no breakpoints on this architecture".into())
}

#[cfg(target_arch = "x86_64")]
fn set_registers(pid: i32, regs: &Registers) -> Result<(), String> {
    // SAFETY: the pointer is valid.
    if unsafe { libc::ptrace(libc::PTRACE_SETREGS, pid, 0, regs) } != 0 {
        return Err(format!(
            "PTRACE_SETREGS of {pid}: {}",
            io::Error::last_os_error()
        ));
    }
    Ok(())
}

fn tgid_of(pid: i32) -> Option<i32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Tgid:"))
        .and_then(|v| v.trim().parse().ok())
}

/// Whether two tasks share one address space (kcmp KCMP_VM); false when
/// the kernel cannot tell.
fn same_memory(a: i32, b: i32) -> bool {
    const KCMP_VM: libc::c_long = 1;
    // SAFETY: kcmp takes only integers.
    let rc = unsafe { libc::syscall(libc::SYS_kcmp, a, b, KCMP_VM, 0, 0) };
    rc == 0
}
