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

use crate::admit::admit;
use crate::start::{self, StartContext};
use crate::state::{Program, ProgramState, StartRecord, State, StateError};
use crate::verdict::{self, Verdict};
use coldstart_prefetch::Plan;
use coldstart_system::build_id::build_id;
use coldstart_system::fanotify::{ExecEvent, ExecEvents};
use coldstart_system::identity::{FileIdentity, Inode};
use coldstart_system::launch::monotonic_ns;
use rustix::event::{PollFd, PollFlags};
use rustix::fs::inotify;
use std::collections::HashMap;
use std::io::Read as _;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

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
    plan: Arc<Plan>,
    inode: Inode,
    /// The first process of each start being followed.
    roots: Arc<Mutex<Vec<i32>>>,
    /// Held while a start's record is written.
    record_lock: Arc<Mutex<()>>,
    /// What was read to load it: reloaded only when it changes.
    fingerprint: Fingerprint,
}

/// program.json's text and the plan file's size and mtime.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Fingerprint {
    program: String,
    plan: Option<(u64, i64)>,
}

/// Runs the service until SIGTERM or SIGINT; `log` takes each line it has
/// to say (one per start, per program loaded or refused).
pub fn serve(options: &ServeOptions, log: &Log) -> Result<(), ServeError> {
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
    };
    service.reload(log)?;
    log(&format!(
        "serving {} program(s) from {}; holding out {}% of starts",
        service.loaded.len(),
        options.state_dir.display(),
        options.hold_out_percent
    ));
    let mut threads: Vec<JoinHandle<()>> = Vec::new();
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        let ready: Vec<bool> = {
            let events = service.events.as_fd();
            let mut fds = [
                PollFd::new(&signals.read, PollFlags::IN),
                PollFd::new(&service.watch, PollFlags::IN),
                PollFd::new(&events, PollFlags::IN),
            ];
            match rustix::event::poll(&mut fds, None) {
                Ok(_) | Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(ServeError::Signals(e.into())),
            }
            fds.iter().map(|f| !f.revents().is_empty()).collect()
        };
        if ready[0] {
            match signals.take() {
                SignalTaken::Stop => break,
                SignalTaken::Reload => service.reload(log)?,
                SignalTaken::None => {}
            }
        }
        if ready[1] && service.state_changed() {
            service.reload(log)?;
        }
        if ready[2] {
            let mut execs = Vec::new();
            let read = service.events.read(&mut buffer, |event| match event {
                ExecEvent::Exec { file, pid } => execs.push(Seen {
                    seen_ns: monotonic_ns(),
                    before: start::Before::snapshot(pid),
                    file,
                    pid,
                }),
                ExecEvent::Overflow => {
                    log("the exec event queue overflowed: some starts were not seen")
                }
            });
            if let Err(e) = read {
                log(&format!("cannot read exec events: {e}"));
            }
            for seen in execs {
                if let Some(thread) = service.exec_seen(seen, log) {
                    threads.push(thread);
                }
            }
        }
        threads.retain(|t| !t.is_finished());
    }
    service.stopping.store(true, Ordering::Release);
    for thread in threads {
        let _ = thread.join();
    }
    log("stopped");
    Ok(())
}

/// An exec the group reported, as the loop read it.
struct Seen {
    file: std::fs::File,
    pid: i32,
    /// When the event was read, CLOCK_MONOTONIC.
    seen_ns: i64,
    /// The process then.
    before: start::Before,
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
}

impl Service {
    /// Loads every program of the state afresh where it changed, checks it,
    /// and marks the executables of those served in a new fanotify group.
    fn reload(&mut self, log: &Log) -> Result<(), ServeError> {
        self.recreate_if_deleted(log);
        if let Err(e) = self.add_watch(&self.state.programs_dir()) {
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
            let _ = self.add_watch(&self.state.programs_dir().join(&id));
            let fingerprint = self.fingerprint(&id);
            if let Some(old) = self.loaded.remove(&id)
                && Some(&old.fingerprint) == fingerprint.as_ref()
                && self.still_the_executable(&old)
            {
                loaded.insert(id, old);
                continue;
            }
            match self.load(&id, fingerprint) {
                Ok(Some(program)) => {
                    if let Some(dir) = program.program.exe.parent() {
                        let _ = self.add_watch(dir);
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
        for (id, l) in &loaded {
            if !self.loaded.contains_key(id) {
                log(&format!(
                    "{}: serving a plan of {} MiB in {} files",
                    l.program.exe.display(),
                    l.plan.bytes() >> 20,
                    l.plan.files.len()
                ));
            }
        }
        self.loaded = loaded;
        self.refused = refused;
        if marks_changed {
            self.remark(log)?;
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

    fn add_watch(&self, dir: &Path) -> Result<(), ServeError> {
        use inotify::WatchFlags as W;
        let flags = W::CREATE
            | W::DELETE
            | W::MOVED_TO
            | W::MOVED_FROM
            | W::CLOSE_WRITE
            | W::ATTRIB
            | W::DELETE_SELF
            | W::ONLYDIR;
        inotify::add_watch(&self.watch, dir, flags)
            .map(|_| ())
            .map_err(|e| ServeError::Inotify {
                path: dir.to_path_buf(),
                error: e.into(),
            })
    }

    /// Drains the inotify queue; whether anything but a starts record or a
    /// temporary file changed.
    fn state_changed(&self) -> bool {
        let mut buffer = [std::mem::MaybeUninit::<u8>::uninit(); 8192];
        let mut reader = inotify::Reader::new(&self.watch, &mut buffer);
        let mut changed = false;
        while let Ok(event) = reader.next() {
            let name = event
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            if name != "starts.json" && !name.ends_with(".tmp") {
                changed = true;
            }
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
    fn load(&self, id: &str, fingerprint: Option<Fingerprint>) -> Result<Option<Loaded>, String> {
        let mut program = self.state.program(id).map_err(|e| e.to_string())?;
        if program.state != ProgramState::Serving {
            return Ok(None);
        }
        if let Some(change) = executable_change(&program) {
            program.state = ProgramState::Stale;
            program.why = Some(change);
            self.state
                .save_program(&program)
                .map_err(|e| e.to_string())?;
            return Ok(None);
        }
        let mut plan = self.state.plan(id).map_err(|e| e.to_string())?;
        admit(&mut plan, self.options.max_plan_bytes)
            .map_err(|why| format!("{}: {why}", self.state.plan_path(id).display()))?;
        let inode = Inode::of_path(&program.exe)
            .ok_or_else(|| format!("{} is gone", program.exe.display()))?;
        Ok(Some(Loaded {
            program,
            plan: Arc::new(plan),
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
    fn exec_seen(&self, seen: Seen, log: &Log) -> Option<JoinHandle<()>> {
        let Seen {
            file,
            pid,
            seen_ns,
            before,
        } = seen;
        let following = &self.following;
        let inode = Inode::of(&file.metadata().ok()?);
        let loaded = self.loaded.values().find(|l| l.inode == inode)?;
        {
            let mut roots = loaded.roots.lock().ok()?;
            if roots.iter().any(|&root| start::descends_from(pid, root)) {
                return None;
            }
            roots.push(pid);
        }
        let may_serve = following.fetch_add(1, Ordering::AcqRel) < self.options.max_starts;
        let context = StartContext {
            program: loaded.program.clone(),
            plan: Arc::clone(&loaded.plan),
            planned: inode,
            before,
            pid,
            seen_ns,
            hold_out_percent: self.options.hold_out_percent,
            may_serve,
        };
        let state = self.state.clone();
        let roots = Arc::clone(&loaded.roots);
        let record_lock = Arc::clone(&loaded.record_lock);
        let counter = Arc::clone(following);
        let stopping = Arc::clone(&self.stopping);
        let thread_log = Arc::clone(log);
        let thread = std::thread::Builder::new()
            // The prefetcher's name from the start: a trace tells the
            // replay's reads from the program's by it, and the kernel gives
            // a new thread its creator's name.
            .name(coldstart_prefetch::replay::PREFETCHER_COMM.into())
            .spawn(move || {
                let id = context.program.id.clone();
                let exe = context.program.exe.clone();
                if let Some(record) = start::follow(context, &stopping) {
                    let _guard = record_lock.lock();
                    for line in record_start(&state, &id, &exe, record) {
                        thread_log(&line);
                    }
                }
                counter.fetch_sub(1, Ordering::AcqRel);
                if let Ok(mut roots) = roots.lock() {
                    roots.retain(|&r| r != pid);
                }
            });
        match thread {
            Ok(thread) => Some(thread),
            Err(e) => {
                following.fetch_sub(1, Ordering::AcqRel);
                log(&format!(
                    "cannot follow a start of {}: {e}",
                    loaded.program.exe.display()
                ));
                None
            }
        }
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
        Ok(Signals { read, stop, reload })
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
