//! The service's loop. It sleeps in poll(2) on three descriptors and wakes
//! for nothing else (no timer): the fanotify group told of execs of the
//! planned executables, an inotify watch on the state directory and on the
//! executables' directories, and the pipe its signals write to.
//!
//! - An exec of a planned executable starts a thread that follows the
//!   start ([`crate::start`]) and records it; an exec by a process of a
//!   start already followed is part of that start.
//! - A change in the state directory (`coldstart serve install`, a plan
//!   switched off) or to a planned executable (a package upgrade) reloads
//!   the programs: each is checked again, and the marks set anew.
//! - SIGTERM or SIGINT ends the follows under way (their starts recorded as
//!   stopped) and the service; SIGHUP reloads.
//! - With learning on ([`crate::learn`]), the group also reports every exec
//!   on the machine's filesystems: a start of an unknown program is
//!   watched, and one that waited on the disk makes its program learning.
//!   A trace instance is kept ready while a program's next start is to be
//!   traced, and attached to that start at its exec event.

use crate::admit::admit;
use crate::learn;
use crate::start::{self, StartContext};
use crate::state::{Program, ProgramState, StartRecord, State, StateError};
use crate::verdict::{self, Verdict};
use coldstart_prefetch::Plan;
use coldstart_record::attach::{LEARN_BUFFER_KB_PER_CPU, Ready};
use coldstart_system::build_id::build_id;
use coldstart_system::fanotify::{ExecEvent, ExecEvents};
use coldstart_system::identity::{FileIdentity, Inode};
use coldstart_system::launch::monotonic_ns;
use rustix::event::{PollFd, PollFlags};
use rustix::fs::inotify;
use std::collections::HashMap;
use std::io::Read as _;
use std::os::fd::AsRawFd;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Where the service's lines go (one per start, per program loaded or
/// refused); shared with the threads that follow starts.
pub type Log = Arc<dyn Fn(&str) + Send + Sync>;

/// How the service runs.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    pub state_dir: PathBuf,
    /// The share of starts held out at random, in percent.
    pub hold_out_percent: u32,
    /// Plans larger than this are refused.
    pub max_plan_bytes: u64,
    /// Starts followed at once; a start beyond them is not served.
    pub max_starts: usize,
    /// Learn plans from ordinary starts: hear of every exec, watch unknown
    /// programs' starts, trace the starts of programs to learn.
    pub learn: bool,
    /// A start of an unknown program that read this many bytes from
    /// storage makes its program learning.
    pub learn_min_read_bytes: u64,
}

/// The share of starts held out unless told: one in ten.
pub const DEFAULT_HOLD_OUT_PERCENT: u32 = 10;

/// Starts followed at once unless told.
pub const DEFAULT_MAX_STARTS: usize = 4;

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(transparent)]
    State(#[from] StateError),
    #[error("cannot watch execs: {0} (fanotify needs CAP_SYS_ADMIN: run coldstart serve as root)")]
    Fanotify(std::io::Error),
    #[error("cannot watch the state directory {path}: {error}")]
    Inotify {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("cannot handle signals: {0}")]
    Signals(std::io::Error),
}

/// A program being served, as loaded.
struct Loaded {
    program: Program,
    /// None while the program is learning.
    plan: Option<Arc<Plan>>,
    /// The plan's pages sampled at each exec, their file held open.
    sample: Option<Arc<start::CacheSample>>,
    /// The executable is an ELF file (not a script), read when loaded.
    elf: bool,
    /// A script's interpreter, looked up when loaded and after each start.
    interpreter: Arc<Mutex<Option<start::Interpreter>>>,
    inode: Inode,
    /// The first process of each start being followed.
    roots: Roots,
    /// Held while a start's record is written.
    record_lock: Arc<Mutex<()>>,
    /// What was read to load it: reloaded only when it changes.
    fingerprint: Fingerprint,
}

/// The first process of each start of a program being followed.
type Roots = Arc<Mutex<Vec<i32>>>;

/// program.json's text and the plan file's size and mtime.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Fingerprint {
    program: String,
    plan: Option<(u64, i64)>,
}

/// Descriptors set aside for each start followed at once: a replay holds
/// every file of its plan open (Chromium's learned plan names 274 files,
/// Firefox's 239).
const DESCRIPTORS_PER_START: usize = 1024;

/// Makes room in the descriptor table for the replays of `max_starts`
/// starts at once, and for the service's own descriptors, before its
/// first thread. The table of a process with threads grows only after an
/// RCU grace period (expand_fdtable), and the replay grows it as its plan
/// needs: the first served start of a big plan after the service started
/// paid that on its way, 12-16 ms of its cold start before the first
/// request (Chromium, against 0.5-0.7 ms for the starts after). The soft
/// limit on open files is raised to the hard one first, since 1024, what
/// systemd gives a service, holds one big replay but not four.
fn make_room_for_replays(max_starts: usize) {
    coldstart_system::process::raise_open_files_limit();
    // At most 16384 files (a table of 256 KiB), whatever --max-starts says;
    // below the soft limit, which the reservation keeps to.
    let files = max_starts
        .saturating_add(1)
        .saturating_mul(DESCRIPTORS_PER_START);
    coldstart_prefetch::replay::reserve_descriptors(files.min(16 * 1024));
}

/// Runs the service until SIGTERM or SIGINT; `log` takes each line it has
/// to say (one per start, per program loaded or refused).
pub fn serve(options: &ServeOptions, log: &Log) -> Result<(), ServeError> {
    make_room_for_replays(options.max_starts);
    let state = State::open(&options.state_dir)?;
    let lock = state.lock()?;
    let signals = Signals::register()?;
    let watch = inotify::init(inotify::CreateFlags::CLOEXEC | inotify::CreateFlags::NONBLOCK)
        .map_err(|e| ServeError::Inotify {
            path: state.programs_dir(),
            error: e.into(),
        })?;
    let mut service = Service {
        lock,
        following: Arc::new(AtomicUsize::new(0)),
        stopping: Arc::new(AtomicBool::new(false)),
        state,
        options: options.clone(),
        loaded: HashMap::new(),
        events: ExecEvents::new().map_err(ServeError::Fanotify)?,
        watch,
        refused: HashMap::new(),
        ready: Vec::new(),
        owed: None,
        traces_made: 0,
        no_trace: None,
        tracing: Arc::new(AtomicUsize::new(0)),
        wake: signals.wake.try_clone().map_err(ServeError::Signals)?,
        watching: Arc::new(Mutex::new(Vec::new())),
        watched: HashMap::new(),
        unmarked: Vec::new(),
        filesystems_marked: false,
        discovery: None,
        watched_dirs: HashMap::new(),
        announced: HashMap::new(),
        recent_execs: RecentExecs::default(),
    };
    if options.learn {
        for name in coldstart_record::attach::remove_left_behind() {
            log(&format!(
                "removed the trace instance {name}, left by a coldstart killed before"
            ));
        }
    }
    service.reload(log)?;
    service.keep_ready(log);
    log(&format!(
        "serving {} program(s) from {}; holding out {}% of starts; {}",
        service.loaded.len(),
        options.state_dir.display(),
        options.hold_out_percent,
        if options.learn {
            "learning the programs whose starts wait on the disk"
        } else {
            "not learning"
        }
    ));
    let mut threads: Vec<JoinHandle<()>> = Vec::new();
    let mut buffer = vec![0u8; 64 * 1024];
    let mut discovery_buffer = vec![0u8; 8 * 1024];
    // When the discovery group may be read next: after a read, it is left
    // out of the poll for DISCOVERY_EVERY, so that a storm of execs wakes
    // the service ten times a second, not at every exec.
    let mut discovery_due = 0i64;
    loop {
        let now = monotonic_ns();
        let discover = service.discovery.is_some() && now >= discovery_due;
        let ready: Vec<bool> = {
            let events = service.events.as_fd();
            let mut fds = vec![
                PollFd::new(&signals.read, PollFlags::IN),
                PollFd::new(&service.watch, PollFlags::IN),
                PollFd::new(&events, PollFlags::IN),
            ];
            if let Some(discovery) = service.discovery.as_ref().filter(|_| discover) {
                fds.push(PollFd::from_borrowed_fd(discovery.as_fd(), PollFlags::IN));
            }
            let wait = (service.discovery.is_some() && !discover).then(|| {
                let left = discovery_due - now;
                rustix::event::Timespec {
                    tv_sec: (left / 1_000_000_000) as _,
                    tv_nsec: (left % 1_000_000_000) as _,
                }
            });
            match rustix::event::poll(&mut fds, wait.as_ref()) {
                Ok(_) | Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(ServeError::Signals(e.into())),
            }
            fds.iter().map(|f| !f.revents().is_empty()).collect()
        };
        if ready[0] {
            match signals.take() {
                SignalTaken::Stop => break,
                SignalTaken::Reload => {
                    // Filesystems mounted since are marked too.
                    service.filesystems_marked = false;
                    service.reload(log)?;
                }
                SignalTaken::None => {}
            }
        }
        if ready[1] && service.state_changed() {
            service.reload(log)?;
        }
        if ready[2] {
            let execs = service.read_execs(&mut buffer, log);
            for seen in execs {
                if let Some(thread) = service.exec_seen(seen, log) {
                    threads.push(thread);
                }
            }
        }
        if ready.get(3) == Some(&true) {
            discovery_due = monotonic_ns() + DISCOVERY_EVERY_NS;
            // Drained whole (it was left to fill for a while), a small
            // batch at a time: each event holds an open descriptor until
            // its batch is handled.
            loop {
                let execs = service.read_discovered(&mut discovery_buffer, log);
                if execs.is_empty() {
                    break;
                }
                for seen in execs {
                    if let Some(thread) = service.exec_seen(seen, log) {
                        threads.push(thread);
                    }
                }
            }
        }
        threads.retain(|t| !t.is_finished());
        service.keep_ready(log);
    }
    service.stopping.store(true, Ordering::Release);
    service.ready.clear();
    for thread in threads {
        let _ = thread.join();
    }
    log("stopped");
    Ok(())
}

/// An exec the group reported, as the loop read it.
struct Seen {
    file: std::fs::File,
    inode: Inode,
    pid: i32,
    /// When the event was read, CLOCK_MONOTONIC.
    seen_ns: i64,
    /// The process then, when the executable is planned.
    before: Option<start::Before>,
    /// What its exec was given, read then (planned ELF executables).
    given: Option<start::Given>,
}

struct Service {
    /// The state directory's lock, held while the service runs.
    lock: std::fs::File,
    /// Starts being followed now.
    following: Arc<AtomicUsize>,
    /// Raised when the service stops: the follows end.
    stopping: Arc<AtomicBool>,
    state: State,
    options: ServeOptions,
    loaded: HashMap<String, Loaded>,
    events: ExecEvents,
    watch: OwnedFd,
    /// Programs refused at the last load, with why: said once.
    refused: HashMap<String, String>,
    /// Traces set up for the next starts to trace, while some are wanted
    /// (one per program that wants one, [`MAX_TRACES`] at most).
    ready: Vec<Ready>,
    /// The program whose start wanted a trace and found none ready (all
    /// were tracing other programs' starts), and when: the last ready
    /// trace is kept for its next start, for [`OWED_FOR`], so that a
    /// machine busy starting other programs that want traces (a build's
    /// compilers) cannot keep it from ever being learned.
    owed: Option<(String, Instant)>,
    /// Traces set up so far: each instance gets a name of its own.
    traces_made: u32,
    /// Why no trace can be set up, said once (until the next reload).
    no_trace: Option<String>,
    /// Starts being traced now (at most [`MAX_TRACES`]).
    tracing: Arc<AtomicUsize>,
    /// Wakes the loop (see [`Signals::wake`]).
    wake: UnixStream,
    /// The first process of each unknown program's start being watched.
    watching: Arc<Mutex<Vec<i32>>>,
    /// Starts watched per unknown executable, this run of the service.
    watched: HashMap<Inode, u8>,
    /// Filesystems whose execs cannot be heard of, with why: said once.
    unmarked: Vec<String>,
    /// Whether the discovery group has the filesystems marked (learning).
    filesystems_marked: bool,
    /// Told of every exec on the machine's filesystems, when learning: read
    /// at most every [`DISCOVERY_EVERY_NS`].
    discovery: Option<ExecEvents>,
    /// What each inotify watch descriptor is on.
    watched_dirs: HashMap<i32, Watched>,
    /// What was said of each program loaded: said again when it changes.
    announced: HashMap<String, String>,
    /// Processes that exec'd an unknown executable lately.
    recent_execs: RecentExecs,
}

/// The processes that exec'd lately, oldest first: a constant time per
/// exec, however many execs the machine makes.
#[derive(Default)]
struct RecentExecs {
    order: std::collections::VecDeque<(i64, i32)>,
    last: HashMap<i32, i64>,
}

impl RecentExecs {
    /// Records an exec by `pid` at `now_ns`; whether it is the first exec
    /// of that process within [`RECENT_EXEC_NS`] (else it goes on with the
    /// start its earlier exec began). False too while more than
    /// [`MAX_WATCHED`] processes exec'd lately: a storm of execs is not
    /// watched.
    fn first_of_its_start(&mut self, pid: i32, now_ns: i64) -> bool {
        while let Some(&(at, old)) = self.order.front() {
            if now_ns - at < RECENT_EXEC_NS {
                break;
            }
            self.order.pop_front();
            if self.last.get(&old) == Some(&at) {
                self.last.remove(&old);
            }
        }
        let first = self.last.insert(pid, now_ns).is_none();
        self.order.push_back((now_ns, pid));
        first && self.last.len() <= MAX_WATCHED
    }
}

/// An exec by a process that exec'd this recently continues its start.
const RECENT_EXEC_NS: i64 = 2_000_000_000;

/// What an inotify watch is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Watched {
    /// programs/: a program added or removed.
    Programs,
    /// programs/ID/: its program.json or plan.
    Program,
    /// A directory holding a program's executable.
    ExecutableDir,
}

/// How often the discovery group is read at most while execs keep coming.
const DISCOVERY_EVERY_NS: i64 = 100_000_000;

/// Starts traced at once at most: two programs learning at the same time
/// are both learned.
const MAX_TRACES: usize = 2;
/// How long the last ready trace is kept for a program whose start found
/// none (see `Service::owed`).
const OWED_FOR: Duration = Duration::from_secs(60);

/// Unknown executables remembered at most (then forgotten, all at once).
const MAX_WATCHED: usize = 4096;

impl Service {
    /// Loads every program of the state afresh where it changed, checks it,
    /// and marks the executables of those served in a new fanotify group.
    fn reload(&mut self, log: &Log) -> Result<(), ServeError> {
        self.recreate_if_deleted(log);
        if let Err(e) = self.add_watch(&self.state.programs_dir(), Watched::Programs) {
            log(&e.to_string());
        }
        let ids = self.state.program_ids().unwrap_or_else(|e| {
            log(&format!("{e}; serving nothing until it can be read"));
            Vec::new()
        });
        let marked = sorted_inodes(&self.loaded);
        let mut loaded = HashMap::new();
        let mut refused = HashMap::new();
        for id in ids {
            let _ = self.add_watch(&self.state.programs_dir().join(&id), Watched::Program);
            let fingerprint = self.fingerprint(&id);
            if let Some(old) = self.loaded.remove(&id)
                && Some(&old.fingerprint) == fingerprint.as_ref()
                && self.still_the_executable(&old)
            {
                loaded.insert(id, old);
                continue;
            }
            match self.load(&id, fingerprint, log) {
                Ok(Some(program)) => {
                    if let Some(dir) = program.program.exe.parent() {
                        let _ = self.add_watch(dir, Watched::ExecutableDir);
                    }
                    loaded.insert(id, program);
                }
                Ok(None) => {}
                Err(why) => {
                    if self.refused.get(&id) != Some(&why) {
                        log(&format!("{id}: refused: {why}"));
                    }
                    refused.insert(id, why);
                }
            }
        }
        let marks_changed = sorted_inodes(&loaded) != marked;
        // Each program is announced when what it is served changes.
        let mut announced = HashMap::new();
        let mut changes = Vec::new();
        for (id, l) in &loaded {
            let text = match &l.plan {
                Some(plan) => format!(
                    "{}: serving a plan of {} MiB in {} files",
                    l.program.exe.display(),
                    plan.bytes() >> 20,
                    plan.files.len()
                ),
                None => format!(
                    "{}: learning: its next start will be traced",
                    l.program.exe.display()
                ),
            };
            if self.announced.get(id) != Some(&text) {
                changes.push(text.clone());
            }
            announced.insert(id.clone(), text);
        }
        self.announced = announced;
        self.loaded = loaded;
        self.refused = refused;
        self.no_trace = None;
        if marks_changed {
            self.remark(log)?;
        }
        if self.options.learn && !self.filesystems_marked {
            self.mark_filesystems(log)?;
        }
        // Said once its executable is marked: a start from then on is seen.
        for text in changes {
            log(&text);
        }
        Ok(())
    }

    /// Makes the state directory again, with its lock, when it was deleted
    /// under the service: what was in it is gone, the service goes on.
    fn recreate_if_deleted(&mut self, log: &Log) {
        if self.state.programs_dir().is_dir() && self.state.dir().join("lock").exists() {
            return;
        }
        match State::open(self.state.dir()).and_then(|state| state.lock()) {
            Ok(lock) => {
                self.lock = lock;
                log(&format!(
                    "{} was deleted: made again, empty",
                    self.state.dir().display()
                ));
            }
            Err(e) => log(&format!(
                "the state directory was deleted and cannot be made again: {e}"
            )),
        }
    }

    /// A fresh group with every served executable marked: the old group's
    /// marks go with it, whatever became of their files.
    fn remark(&mut self, log: &Log) -> Result<(), ServeError> {
        let events = ExecEvents::new().map_err(ServeError::Fanotify)?;
        for l in self.loaded.values() {
            if let Err(e) = events.mark(&l.program.exe) {
                log(&format!(
                    "{}: cannot watch its execs: {e}",
                    l.program.exe.display()
                ));
            }
        }
        self.events = events;
        Ok(())
    }

    /// A new discovery group with every filesystem marked: told of the
    /// execs of all programs, to learn the unknown ones.
    fn mark_filesystems(&mut self, log: &Log) -> Result<(), ServeError> {
        let discovery = ExecEvents::new().map_err(ServeError::Fanotify)?;
        let unmarked =
            coldstart_record::paths::for_each_filesystem(|mount| discovery.mark_filesystem(mount));
        for failed in &unmarked {
            if !self.unmarked.contains(failed) {
                log(&format!(
                    "execs on {failed} cannot be heard of: its programs are not learned"
                ));
            }
        }
        self.unmarked = unmarked;
        self.discovery = Some(discovery);
        self.filesystems_marked = true;
        Ok(())
    }

    /// The execs of planned (and learning) executables queued now, each
    /// with a snapshot of its process taken at once.
    fn read_execs(&self, buffer: &mut [u8], log: &Log) -> Vec<Seen> {
        let mut execs = Vec::new();
        let read = self.events.read(buffer, |event| match event {
            ExecEvent::Exec { file, pid } => {
                let seen_ns = monotonic_ns();
                let Ok(meta) = file.metadata() else { return };
                let inode = Inode::of(&meta);
                let planned: Vec<&Loaded> =
                    self.loaded.values().filter(|l| l.inode == inode).collect();
                if let Some(first) = planned.first() {
                    // First, while the exec may still be under way.
                    let given = if planned.iter().all(|l| l.elf) {
                        start::given_to_exec(pid, inode)
                    } else if planned.iter().all(|l| !l.elf) {
                        let known = first.interpreter.lock().ok().and_then(|i| i.clone());
                        start::given_to_script_exec(pid, inode, &file, known.as_ref()).or_else(
                            || known.and_then(|k| start::given_after_script_exec(pid, inode, &k)),
                        )
                    } else {
                        None
                    };
                    execs.push(Seen {
                        seen_ns,
                        before: Some(start::Before::snapshot(pid)),
                        given,
                        inode,
                        file,
                        pid,
                    });
                }
            }
            ExecEvent::Overflow => {
                log("the exec event queue overflowed: some starts were not seen")
            }
        });
        if let Err(e) = read {
            log(&format!("cannot read exec events: {e}"));
        }
        execs
    }

    /// One buffer's worth of the execs the discovery group queued, but
    /// those of the programs known (their own group tells of them); empty
    /// when nothing is queued.
    fn read_discovered(&self, buffer: &mut [u8], log: &Log) -> Vec<Seen> {
        let Some(discovery) = &self.discovery else {
            return Vec::new();
        };
        let mut execs = Vec::new();
        loop {
            let read = discovery.read(buffer, |event| {
                if let ExecEvent::Exec { file, pid } = event {
                    let Ok(meta) = file.metadata() else { return };
                    let inode = Inode::of(&meta);
                    if !self.loaded.values().any(|l| l.inode == inode) {
                        execs.push(Seen {
                            seen_ns: monotonic_ns(),
                            before: None,
                            given: None,
                            inode,
                            file,
                            pid,
                        });
                    }
                }
            });
            match read {
                // Events of known programs only: read on.
                Ok(n) if n > 0 && execs.is_empty() => continue,
                Ok(_) => break,
                Err(e) => {
                    log(&format!("cannot read exec events: {e}"));
                    break;
                }
            }
        }
        execs
    }

    fn add_watch(&mut self, dir: &Path, what: Watched) -> Result<(), ServeError> {
        use inotify::WatchFlags as W;
        let flags = W::CREATE
            | W::DELETE
            | W::MOVED_TO
            | W::MOVED_FROM
            | W::CLOSE_WRITE
            | W::ATTRIB
            | W::DELETE_SELF
            | W::ONLYDIR;
        let wd = inotify::add_watch(&self.watch, dir, flags).map_err(|e| ServeError::Inotify {
            path: dir.to_path_buf(),
            error: e.into(),
        })?;
        self.watched_dirs.insert(wd, what);
        Ok(())
    }

    /// Drains the inotify queue; whether a program was added or removed,
    /// a program.json or plan changed, or a program's executable: not a
    /// starts record, a profile or a temporary file, and no other file of
    /// an executable's directory.
    fn state_changed(&self) -> bool {
        let mut buffer = [std::mem::MaybeUninit::<u8>::uninit(); 8192];
        let mut reader = inotify::Reader::new(&self.watch, &mut buffer);
        let mut changed = false;
        while let Ok(event) = reader.next() {
            let name = event.file_name().map(|n| n.to_string_lossy().into_owned());
            let Some(what) = self.watched_dirs.get(&event.wd()) else {
                continue;
            };
            changed |= match (what, name.as_deref()) {
                // The directory itself went.
                (_, None) => true,
                (_, Some(name)) if name.ends_with(".tmp") => false,
                (Watched::Programs, Some(_)) => true,
                (Watched::Program, Some(name)) => name == "program.json" || name == "plan",
                (Watched::ExecutableDir, Some(name)) => self.loaded.values().any(|l| {
                    l.program
                        .exe
                        .file_name()
                        .is_some_and(|n| n.to_string_lossy() == name)
                }),
            };
        }
        changed
    }

    fn fingerprint(&self, id: &str) -> Option<Fingerprint> {
        let program =
            std::fs::read_to_string(self.state.programs_dir().join(id).join("program.json"))
                .ok()?;
        let plan = std::fs::metadata(self.state.plan_path(id)).ok().map(|m| {
            use std::os::unix::fs::MetadataExt;
            (m.size(), m.mtime() * 1_000_000_000 + m.mtime_nsec())
        });
        Some(Fingerprint { program, plan })
    }

    /// Whether the file at the executable's path is still the one loaded.
    fn still_the_executable(&self, loaded: &Loaded) -> bool {
        Inode::of_path(&loaded.program.exe) == Some(loaded.inode)
    }

    /// Loads program `id` to serve it: `Ok(None)` when it is not to be
    /// served (off, stale, or found changed now: then recorded as stale),
    /// `Err` with why when its files are refused.
    fn load(
        &self,
        id: &str,
        fingerprint: Option<Fingerprint>,
        log: &Log,
    ) -> Result<Option<Loaded>, String> {
        if !self
            .state
            .programs_dir()
            .join(id)
            .join("program.json")
            .exists()
        {
            // Being made: its program.json comes last.
            return Ok(None);
        }
        let mut program = self.state.program(id).map_err(|e| e.to_string())?;
        let learning = program.state == ProgramState::Learning;
        if !(program.state == ProgramState::Serving || learning && self.options.learn) {
            return Ok(None);
        }
        if let Some(change) = executable_change(&program) {
            if self.options.learn && program.exe.is_file() {
                // Learned afresh: the old plan and its starts were another
                // program's.
                let class = program.class.clone().unwrap_or_default();
                let fresh =
                    learn::learning_program(&program.exe, &class).map_err(|e| e.to_string())?;
                log(&format!("{change}: learning it again"));
                program = crate::state::Program {
                    id: program.id.clone(),
                    why: Some(format!("relearning: {change}")),
                    quiet_ms: program.quiet_ms,
                    cap_ms: program.cap_ms,
                    ..fresh
                };
                // The record first: a reader never sees a serving program
                // without its plan.
                self.state
                    .save_program(&program)
                    .map_err(|e| e.to_string())?;
                self.state.remove_learned(id).map_err(|e| e.to_string())?;
                self.state.save_starts(id, &[]).map_err(|e| e.to_string())?;
                return Ok(None);
            }
            program.state = ProgramState::Stale;
            program.why = Some(change);
            self.state
                .save_program(&program)
                .map_err(|e| e.to_string())?;
            return Ok(None);
        }
        let plan = if learning {
            None
        } else {
            let mut plan = self.state.plan(id).map_err(|e| e.to_string())?;
            admit(&mut plan, self.options.max_plan_bytes)
                .map_err(|why| format!("{}: {why}", self.state.plan_path(id).display()))?;
            Some(Arc::new(plan))
        };
        let inode = Inode::of_path(&program.exe)
            .ok_or_else(|| format!("{} is gone", program.exe.display()))?;
        let sample = plan
            .as_deref()
            .and_then(start::CacheSample::of)
            .map(Arc::new);
        let elf = coldstart_system::build_id::is_elf_file(&program.exe);
        let interpreter = (!elf)
            .then(|| start::Interpreter::of_script(&program.exe))
            .flatten();
        Ok(Some(Loaded {
            program,
            plan,
            sample,
            elf,
            interpreter: Arc::new(Mutex::new(interpreter)),
            inode,
            roots: Arc::new(Mutex::new(Vec::new())),
            record_lock: Arc::new(Mutex::new(())),
            fingerprint: fingerprint.unwrap_or(Fingerprint {
                program: String::new(),
                plan: None,
            }),
        }))
    }

    /// Follows a start of a planned executable on a thread of its own,
    /// unless the exec belongs to a start already followed.
    fn exec_seen(&mut self, seen: Seen, log: &Log) -> Option<JoinHandle<()>> {
        let inode = seen.inode;
        let Some(before) = seen.before else {
            return if self.options.learn {
                self.watch_unknown(seen, inode, log)
            } else {
                None
            };
        };
        let Seen {
            pid,
            seen_ns,
            given,
            ..
        } = seen;
        let following = &self.following;
        // The programs of this executable, those for one class first: which
        // one the start is depends on its arguments, read once its exec
        // completed.
        let mut candidates: Vec<&Loaded> =
            self.loaded.values().filter(|l| l.inode == inode).collect();
        if candidates.is_empty() {
            return None;
        }
        candidates.sort_by_key(|l| (l.program.class.is_none(), l.program.id.clone()));
        for loaded in &candidates {
            let roots = loaded.roots.lock().ok()?;
            if roots.iter().any(|&root| start::descends_from(pid, root)) {
                return None;
            }
        }
        for loaded in &candidates {
            if let Ok(mut roots) = loaded.roots.lock() {
                roots.push(pid);
            }
        }
        let may_serve = following.fetch_add(1, Ordering::AcqRel) < self.options.max_starts;
        // The trace first: the start's first pages are read within a
        // millisecond of its exec. When what the exec was given is known
        // already, only for the program the start is of; else for any that
        // wants one, and dropped once the start is known to be of a program
        // that wants none. (Attached for another class's sake, it held up
        // the replay of every cold Chromium start by 150-280 ms.)
        let of_start = given.as_ref().map(|given| {
            let classes: Vec<Option<&str>> = candidates
                .iter()
                .map(|l| l.program.class.as_deref())
                .collect();
            start::chosen(&classes, &learn::argument_class(&given.argv))
        });
        let wanting: Vec<&str> = candidates
            .iter()
            .enumerate()
            .filter(|(i, l)| {
                learn::wants_trace(&l.program) && of_start.is_none_or(|chosen| chosen == Some(*i))
            })
            .map(|(_, l)| l.program.id.as_str())
            .collect();
        let wants = !wanting.is_empty();
        let owed_to_another = self.owed.as_ref().is_some_and(|(id, since)| {
            !wanting.contains(&id.as_str()) && since.elapsed() < OWED_FOR
        });
        let may_take = self.ready.len() > usize::from(owed_to_another);
        let trace = if wants && may_take {
            self.tracing.fetch_add(1, Ordering::AcqRel);
            let attached = self
                .ready
                .pop()
                .and_then(|ready| match ready.attach(pid, seen_ns) {
                    Ok(attached) => Some(attached),
                    Err(e) => {
                        log(&format!("cannot trace a start: {e}"));
                        None
                    }
                });
            if attached.is_none() {
                self.tracing.fetch_sub(1, Ordering::AcqRel);
            }
            attached
        } else {
            None
        };
        let traced = trace.is_some();
        if wants {
            let owed_here = self
                .owed
                .as_ref()
                .is_some_and(|(id, _)| wanting.contains(&id.as_str()));
            if traced && owed_here {
                self.owed = None;
            } else if !traced && !owed_to_another && !owed_here {
                self.owed = Some((wanting[0].to_string(), Instant::now()));
            }
        }
        let exe = candidates[0].program.exe.clone();
        let exe_name = exe.display().to_string();
        let context = StartContext {
            candidates: candidates
                .iter()
                .map(|l| start::Candidate {
                    program: l.program.clone(),
                    plan: l.plan.clone(),
                    sample: l.sample.clone(),
                })
                .collect(),
            trace,
            planned: inode,
            interpreter: candidates[0]
                .interpreter
                .lock()
                .ok()
                .and_then(|known| known.as_ref().filter(|i| i.elf).cloned()),
            before,
            given,
            pid,
            seen_ns,
            hold_out_percent: self.options.hold_out_percent,
            may_serve,
        };
        let locks: Vec<(Roots, Arc<Mutex<()>>)> = candidates
            .iter()
            .map(|l| (Arc::clone(&l.roots), Arc::clone(&l.record_lock)))
            .collect();
        let state = self.state.clone();
        let counter = Arc::clone(following);
        let stopping = Arc::clone(&self.stopping);
        let thread_log = Arc::clone(log);
        let tracing = Arc::clone(&self.tracing);
        let wake = self.wake.try_clone().ok();
        let max_plan_bytes = self.options.max_plan_bytes;
        let learning = self.options.learn;
        let min_read = self.options.learn_min_read_bytes;
        // A script's interpreter, looked up again once the start is over.
        let interpreter = (!candidates[0].elf).then(|| Arc::clone(&candidates[0].interpreter));
        let thread = std::thread::Builder::new()
            // The prefetcher's name from the start: a trace tells the
            // replay's reads from the program's by it, and the kernel gives
            // a new thread its creator's name.
            .name(coldstart_prefetch::replay::PREFETCHER_COMM.into())
            .spawn(move || {
                let ids: Vec<String> = context
                    .candidates
                    .iter()
                    .map(|c| c.program.id.clone())
                    .collect();
                match start::follow(context, &stopping) {
                    Some(start::Followed::Start {
                        index,
                        record,
                        trace,
                    }) => {
                        let _guard = locks[index].1.lock();
                        for line in record_start(&state, &ids[index], &exe, record) {
                            thread_log(&line);
                        }
                        if let Some(traced) = trace {
                            let (attached, end) = *traced;
                            // Decoding and compiling yield to everything else.
                            lower_priority();
                            match learn::learn_from(
                                &state,
                                &ids[index],
                                attached,
                                &end,
                                max_plan_bytes,
                            ) {
                                Ok(line) => thread_log(&line),
                                Err(why) => thread_log(&format!("{}: {why}", exe.display())),
                            }
                        }
                    }
                    Some(start::Followed::Unclaimed { class, end }) if learning => {
                        consider_learning(&state, &exe, &class, inode, &end, min_read, &thread_log);
                    }
                    _ => {}
                }
                if let Some(interpreter) = interpreter {
                    let now = start::Interpreter::of_script(&exe);
                    if let Ok(mut known) = interpreter.lock() {
                        *known = now;
                    }
                }
                if traced {
                    tracing.fetch_sub(1, Ordering::AcqRel);
                    if let Some(mut wake) = wake {
                        use std::io::Write as _;
                        let _ = wake.write(&[0]);
                    }
                }
                counter.fetch_sub(1, Ordering::AcqRel);
                for (roots, _) in &locks {
                    if let Ok(mut roots) = roots.lock() {
                        roots.retain(|&r| r != pid);
                    }
                }
            });
        match thread {
            Ok(thread) => Some(thread),
            Err(e) => {
                following.fetch_sub(1, Ordering::AcqRel);
                if traced {
                    self.tracing.fetch_sub(1, Ordering::AcqRel);
                }
                for loaded in self.loaded.values().filter(|l| l.inode == inode) {
                    if let Ok(mut roots) = loaded.roots.lock() {
                        roots.retain(|&r| r != pid);
                    }
                }
                log(&format!("cannot follow a start of {exe_name}: {e}"));
                None
            }
        }
    }

    /// Watches the start of an executable the service has no program for:
    /// one that reads [`ServeOptions::learn_min_read_bytes`] from storage
    /// makes its program learning. A few starts per executable at most, eight
    /// at once, none that belongs to a start followed or watched already.
    fn watch_unknown(&mut self, seen: Seen, inode: Inode, log: &Log) -> Option<JoinHandle<()>> {
        if self.watched.len() >= MAX_WATCHED {
            self.watched.clear();
        }
        let pid = seen.pid;
        // A process that exec'd moments ago and execs again (a script's
        // interpreter, a launcher) goes on with the same start.
        if !self.recent_execs.first_of_its_start(pid, seen.seen_ns) {
            return None;
        }
        let count = self.watched.entry(inode).or_insert(0);
        if *count >= learn::WATCHED_STARTS_PER_PROGRAM {
            return None;
        }
        let mut watching = self.watching.lock().ok()?;
        if watching.len() >= learn::WATCHED_AT_ONCE {
            return None;
        }
        let followed = self
            .loaded
            .values()
            .filter_map(|l| l.roots.lock().ok().map(|r| r.clone()))
            .flatten();
        if watching
            .iter()
            .copied()
            .chain(followed)
            .any(|root| start::descends_from(pid, root))
        {
            return None;
        }
        let exe = std::fs::read_link(format!("/proc/self/fd/{}", seen.file.as_raw_fd())).ok()?;
        if !exe.is_absolute()
            || !std::fs::metadata(&exe).is_ok_and(|m| m.is_file())
            || learn::not_learned(&exe).is_some()
            || exe.starts_with(self.state.dir())
        {
            return None;
        }
        *count += 1;
        watching.push(pid);
        drop(watching);
        let state = self.state.clone();
        let stopping = Arc::clone(&self.stopping);
        let watching = Arc::clone(&self.watching);
        let thread_log = Arc::clone(log);
        let min_read = self.options.learn_min_read_bytes;
        let before = start::Before::snapshot(pid);
        let exe_name = exe.display().to_string();
        let thread = std::thread::Builder::new()
            .name("cs-watch".into())
            .spawn(move || {
                // Its class once its exec completed (its arguments are the
                // old program's until then). A script's, from what its
                // interpreter was given, which a script may leave at once
                // for a program of its own with other arguments.
                let argv = match start::Interpreter::of_script(&exe).filter(|i| i.elf) {
                    Some(interpreter) => {
                        start::wait_for_script_exec(&before, inode, &interpreter, pid)
                            .map(|given| given.argv)
                    }
                    None => {
                        start::wait_for_exec(&before, inode, pid).map(|_| start::command_line(pid))
                    }
                };
                let class = argv.map(|argv| learn::argument_class(&argv));
                if let Some(class) = class
                    && let Ok(program) = learn::learning_program(&exe, &class)
                {
                    let watched = crate::state::Program {
                        cap_ms: learn::WATCH_CAP_MS,
                        ..program
                    };
                    let end = start::watch_tree(pid, seen.seen_ns, &watched, &stopping);
                    consider_learning(&state, &exe, &class, inode, &end, min_read, &thread_log);
                }
                if let Ok(mut watching) = watching.lock() {
                    watching.retain(|&r| r != pid);
                }
            });
        match thread {
            Ok(thread) => Some(thread),
            Err(e) => {
                if let Ok(mut w) = self.watching.lock() {
                    w.retain(|&r| r != pid);
                }
                log(&format!("cannot watch a start of {exe_name}: {e}"));
                None
            }
        }
    }

    /// Sets a trace up while a program's next start is to be traced and
    /// none is (or drops it when none is wanted, freeing its buffers).
    fn keep_ready(&mut self, log: &Log) {
        let wanting = if self.options.learn {
            self.loaded
                .values()
                .filter(|l| learn::wants_trace(&l.program))
                .count()
        } else {
            0
        };
        if let Some((id, since)) = &self.owed
            && (since.elapsed() >= OWED_FOR
                || !self
                    .loaded
                    .get(id)
                    .is_some_and(|l| learn::wants_trace(&l.program)))
        {
            self.owed = None;
        }
        if wanting == 0 {
            self.ready.clear();
            return;
        }
        // One per program that wants a trace, at most MAX_TRACES: each
        // costs every process on the machine a little at each page event
        // while it waits (see `coldstart_record::attach`), and one program's
        // start does not take another's; the next is set up as soon as one
        // is attached.
        while self.no_trace.is_none()
            && self.ready.len() < wanting.min(MAX_TRACES)
            && self.ready.len() + self.tracing.load(Ordering::Acquire) < MAX_TRACES
        {
            self.traces_made += 1;
            let tag = format!("learn{}", self.traces_made);
            match Ready::prepare(&tag, LEARN_BUFFER_KB_PER_CPU) {
                Ok(ready) => self.ready.push(ready),
                Err(e) => {
                    let why = e.to_string();
                    log(&format!("cannot set a trace up to learn plans: {why}"));
                    self.no_trace = Some(why);
                }
            }
        }
    }
}

/// After a watched start of `exe` (of argument class `class`, from the
/// executable `inode`) that ended as `end` says: when it read at least
/// `min_read` from storage, and the class has no program yet, a program is
/// made for it, learning.
fn consider_learning(
    state: &State,
    exe: &Path,
    class: &str,
    inode: Inode,
    end: &start::End,
    min_read: u64,
    log: &Log,
) {
    let read_bytes = end.read_bytes;
    let Ok(program) = learn::learning_program(exe, class) else {
        return;
    };
    if read_bytes < min_read
        || end.by == crate::state::EndedBy::Stopped
        || state.program(&program.id).is_ok()
        || Inode::of_path(exe) != Some(inode)
    {
        return;
    }
    log(&format!(
        "{}{}: its start read {:.1} MiB from storage: learning it",
        exe.display(),
        describe_class(class),
        read_bytes as f64 / 1048576.0
    ));
    if let Err(e) = state
        .save_starts(&program.id, &[])
        .or_else(|_| state.save_program_dir(&program.id))
        .and_then(|()| state.save_program(&program))
    {
        log(&format!("cannot record it: {e}"));
    }
}

/// How a log line names a class: nothing for the class without options.
fn describe_class(class: &str) -> String {
    if class.is_empty() {
        String::new()
    } else {
        format!(" [{class}]")
    }
}

/// Lowers the calling thread's CPU priority (nice 10): the work after a
/// traced start must not slow the next.
fn lower_priority() {
    // SAFETY: no pointers; a thread id of this process and a priority.
    unsafe {
        libc::setpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t, 10);
    }
}

/// The executables' inodes of the programs loaded, sorted: what is marked.
fn sorted_inodes(loaded: &HashMap<String, Loaded>) -> Vec<Inode> {
    let mut inodes: Vec<Inode> = loaded.values().map(|l| l.inode).collect();
    inodes.sort();
    inodes
}

/// Appends a start to its program's record, switches the plan off when
/// the starts say it does not help, and returns the lines to log.
fn record_start(state: &State, id: &str, exe: &Path, record: StartRecord) -> Vec<String> {
    let mut lines = vec![describe(exe, &record)];
    let mut starts = match state.starts(id) {
        Ok(starts) => starts,
        Err(e) => {
            lines.push(format!("{e}; starting its record afresh"));
            Vec::new()
        }
    };
    starts.push(record);
    if let Err(e) = state.save_starts(id, &starts) {
        lines.push(format!("cannot record the start: {e}"));
    }
    if let Verdict::SwitchOff(why) = verdict::verdict(&verdict::gain(&starts))
        && let Ok(mut program) = state.program(id)
        && program.state == ProgramState::Serving
    {
        lines.push(format!("{}: plan switched off: {why}", exe.display()));
        program.state = ProgramState::Off;
        program.why = Some(why);
        if let Err(e) = state.save_program(&program) {
            lines.push(format!("cannot record it: {e}"));
        }
    }
    lines
}

/// One line for the log about a start.
fn describe(exe: &Path, r: &StartRecord) -> String {
    let user = r.uid.map(|u| format!(", uid {u}")).unwrap_or_default();
    let mut line = format!(
        "{} (pid {}{user}): {}; over after {:.0} ms ({:?}), {:.0}% of its pages cached at the exec, its processes read {:.1} MiB",
        exe.display(),
        r.pid,
        r.outcome.as_str(),
        r.end_ms,
        r.ended_by,
        r.resident_share * 100.0,
        r.program_read_bytes as f64 / 1048576.0
    );
    if r.outcome == crate::state::Outcome::Served {
        line.push_str(&format!(
            "; the plan asked for {:.1} MiB",
            r.prefetch_bytes as f64 / 1048576.0
        ));
        if let Some(us) = r.first_request_us {
            line.push_str(&format!(", the first {us:.0} us after the exec"));
        }
        if r.decided_at_exec {
            line.push_str(" (decided while the exec was under way)");
        }
        for skipped in &r.skipped_files {
            line.push_str(&format!("; skipped {skipped}"));
        }
    }
    line
}

/// How the executable differs from the identity its plan was made for.
fn executable_change(program: &Program) -> Option<String> {
    let now = match FileIdentity::of_path(&program.exe) {
        Ok(identity) => identity,
        Err(e) => return Some(format!("{} cannot be read: {e}", program.exe.display())),
    };
    let now = FileIdentity {
        build_id: build_id(&program.exe),
        ..now
    };
    now.change_since(&program.identity.file_identity())
        .map(|change| {
            format!(
                "{} changed since its plan was made ({change:?})",
                program.exe.display()
            )
        })
}

/// The signals the service answers, written to a pipe its loop polls.
struct Signals {
    read: UnixStream,
    /// Written to by the threads when a traced start is done with: the
    /// loop wakes and sets the next trace up.
    wake: UnixStream,
    stop: Arc<AtomicBool>,
    reload: Arc<AtomicBool>,
}

enum SignalTaken {
    Stop,
    Reload,
    None,
}

impl Signals {
    fn register() -> Result<Signals, ServeError> {
        use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
        let (read, write) = UnixStream::pair().map_err(ServeError::Signals)?;
        read.set_nonblocking(true).map_err(ServeError::Signals)?;
        let stop = Arc::new(AtomicBool::new(false));
        let reload = Arc::new(AtomicBool::new(false));
        for signal in [SIGTERM, SIGINT] {
            signal_hook::flag::register(signal, Arc::clone(&stop)).map_err(ServeError::Signals)?;
        }
        signal_hook::flag::register(SIGHUP, Arc::clone(&reload)).map_err(ServeError::Signals)?;
        for signal in [SIGTERM, SIGINT, SIGHUP] {
            let write = write.try_clone().map_err(ServeError::Signals)?;
            signal_hook::low_level::pipe::register(signal, write).map_err(ServeError::Signals)?;
        }
        let wake = write.try_clone().map_err(ServeError::Signals)?;
        wake.set_nonblocking(true).map_err(ServeError::Signals)?;
        Ok(Signals {
            read,
            wake,
            stop,
            reload,
        })
    }

    fn take(&self) -> SignalTaken {
        let mut bytes = [0u8; 64];
        while matches!((&self.read).read(&mut bytes), Ok(n) if n > 0) {}
        if self.stop.load(Ordering::Acquire) {
            SignalTaken::Stop
        } else if self.reload.swap(false, Ordering::AcqRel) {
            SignalTaken::Reload
        } else {
            SignalTaken::None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_that_execs_again_soon_goes_on_with_its_start() {
        let mut recent = RecentExecs::default();
        let s = 1_000_000_000;
        assert!(recent.first_of_its_start(10, 0));
        assert!(recent.first_of_its_start(11, s / 2));
        // The script's interpreter, then the program it execs.
        assert!(!recent.first_of_its_start(10, s));
        assert!(!recent.first_of_its_start(10, s + 1));
        // Long after its last exec, a process starts anew.
        assert!(recent.first_of_its_start(11, 3 * s));
        assert!(recent.first_of_its_start(10, 3 * s + 2));
        // Only the execs of the last 2 s are remembered.
        assert_eq!(recent.order.len(), 2);
        assert_eq!(recent.last.len(), 2);
    }
}
