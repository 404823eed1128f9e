//! Starting the program to measure and deciding when its startup is over.
//!
//! The program runs as the user who invoked coldstart through sudo, never
//! as root by accident. Its output passes through coldstart line by line so
//! a ready pattern can be matched. Startup ends when the program exits, a
//! line matches, a ready file appears, the timeout passes or the user
//! interrupts; then the whole process tree is terminated. coldstart makes
//! itself a child subreaper so even daemonised descendants are found.

use crate::cgroup::Cgroup;
use crate::proc;
use regex::Regex;
use rustix::process::{Pid, PidfdFlags, Signal};
use std::ffi::{CStr, CString, OsString};
use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// CLOCK_MONOTONIC in nanoseconds: the clock the trace instance uses too.
pub fn monotonic_ns() -> i64 {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    ts.tv_sec * 1_000_000_000 + ts.tv_nsec
}

/// Whether coldstart runs as root, as tracing and dropping the whole page
/// cache need.
pub fn is_root() -> bool {
    crate::process::effective_uid() == 0
}

/// Who the program runs as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub uid: u32,
    pub gid: u32,
    pub groups: Vec<u32>,
    /// USER, LOGNAME and HOME to set when switching users.
    pub user: Option<(String, PathBuf)>,
}

impl Identity {
    /// The user who invoked coldstart: SUDO_UID/SUDO_GID when root came from
    /// sudo (unless `as_root`), otherwise the current user unchanged.
    pub fn invoking_user(as_root: bool) -> io::Result<Identity> {
        let euid = crate::process::effective_uid();
        let gid = rustix::process::getegid().as_raw();
        let sudo_uid = std::env::var("SUDO_UID").ok().and_then(|v| v.parse().ok());
        let sudo_gid = std::env::var("SUDO_GID").ok().and_then(|v| v.parse().ok());
        match (euid, sudo_uid, as_root) {
            (0, Some(uid), false) if uid != 0 => {
                let gid = sudo_gid.unwrap_or(gid);
                let user = user_of(uid);
                let groups = match &user {
                    Some((name, _)) => group_list(name, gid),
                    None => vec![gid],
                };
                Ok(Identity {
                    uid,
                    gid,
                    groups,
                    user,
                })
            }
            _ => Ok(Identity {
                uid: euid,
                gid,
                groups: Vec::new(),
                user: None,
            }),
        }
    }

    /// Makes `command` run as this identity when that is a change of user:
    /// supplementary groups, gid and uid set between fork and exec, and
    /// USER, LOGNAME and HOME to match. Nothing otherwise.
    pub fn apply_to(&self, command: &mut Command) {
        if !self.switches() {
            return;
        }
        if let Some((name, home)) = &self.user {
            command
                .env("USER", name)
                .env("LOGNAME", name)
                .env("HOME", home);
        }
        let identity = self.clone();
        // SAFETY: only async-signal-safe calls between fork and exec.
        unsafe {
            command.pre_exec(move || {
                if libc::setgroups(identity.groups.len(), identity.groups.as_ptr()) != 0
                    || libc::setgid(identity.gid) != 0
                    || libc::setuid(identity.uid) != 0
                {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }

    /// True when starting the program needs a change of user.
    pub fn switches(&self) -> bool {
        self.uid != crate::process::effective_uid()
    }
}

fn user_of(uid: u32) -> Option<(String, PathBuf)> {
    let mut buf = vec![0 as libc::c_char; 16 * 1024];
    // SAFETY: zeroed passwd is a valid out-parameter.
    let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
    let mut result = std::ptr::null_mut();
    // SAFETY: buffers are valid for the lengths given.
    let rc = unsafe { libc::getpwuid_r(uid, &mut pwd, buf.as_mut_ptr(), buf.len(), &mut result) };
    if rc != 0 || result.is_null() {
        return None;
    }
    // SAFETY: getpwuid_r filled NUL-terminated strings inside buf.
    let (name, home) = unsafe { (CStr::from_ptr(pwd.pw_name), CStr::from_ptr(pwd.pw_dir)) };
    Some((
        name.to_string_lossy().into_owned(),
        PathBuf::from(home.to_string_lossy().into_owned()),
    ))
}

fn group_list(user: &str, gid: u32) -> Vec<u32> {
    let Ok(name) = CString::new(user) else {
        return vec![gid];
    };
    let mut count: libc::c_int = 64;
    loop {
        let mut groups = vec![0 as libc::gid_t; count as usize];
        // SAFETY: groups has room for `count` entries.
        let rc = unsafe { libc::getgrouplist(name.as_ptr(), gid, groups.as_mut_ptr(), &mut count) };
        if rc >= 0 {
            groups.truncate(count as usize);
            return groups;
        }
        if count <= groups.len() as libc::c_int {
            return vec![gid];
        }
    }
}

/// Where the program's output goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Forward {
    /// stdout to coldstart's stdout, stderr to its stderr.
    Through,
    /// Both to coldstart's stderr (its stdout carries JSON).
    ToStderr,
    /// Discarded.
    Discard,
}

/// How long a terminated tree gets between SIGTERM and SIGKILL, unless a
/// caller has a reason to wait otherwise: long enough for a program to
/// flush what it writes on exit, short against a start.
pub const DEFAULT_GRACE: std::time::Duration = std::time::Duration::from_millis(500);

/// How to run and when startup counts as done.
#[derive(Debug, Clone)]
pub struct LaunchSpec {
    pub argv: Vec<OsString>,
    pub identity: Identity,
    pub ready_regex: Option<Regex>,
    pub ready_file: Option<PathBuf>,
    pub timeout: Option<Duration>,
    pub forward: Forward,
    /// Variables added to the program's environment.
    pub env: Vec<(OsString, OsString)>,
}

impl LaunchSpec {
    /// `argv` started as the invoking user (not as root by accident), its
    /// output discarded, its start over when it exits or after `timeout`:
    /// what callers then change field by field.
    pub fn quiet(argv: Vec<OsString>, timeout: Duration) -> io::Result<LaunchSpec> {
        Ok(LaunchSpec {
            argv,
            identity: Identity::invoking_user(false)?,
            ready_regex: None,
            ready_file: None,
            timeout: Some(timeout),
            forward: Forward::Discard,
            env: Vec::new(),
        })
    }
}

/// A started program.
pub struct Launched {
    pub root_pid: i32,
    /// Monotonic time just before the program was started.
    pub t0_ns: i64,
    exit: Arc<Mutex<Option<(i64, std::process::ExitStatus)>>>,
    ready_at: Arc<AtomicI64>,
    /// Rung when the program exits or prints its ready line.
    wake: Arc<Wake>,
    waiter: Option<JoinHandle<()>>,
    forwarders: Vec<JoinHandle<()>>,
    spec: LaunchSpec,
    /// The group holding the tree, when cgroup v2 is usable.
    cgroup: Option<Cgroup>,
}

/// Why startup counted as over. A profile records it with one more reason
/// of its own (coldstart failed while recording), so record maps it there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndReason {
    /// The program exited by itself.
    Exited,
    /// The program was killed by a signal it did not ask for.
    Signaled,
    /// A line of its output matched the ready pattern.
    ReadyRegex,
    /// The ready file appeared.
    ReadyFile,
    /// The timeout passed first.
    Timeout,
    /// The user interrupted coldstart.
    Interrupted,
}

impl EndReason {
    /// The name reports and profiles use (coldstart_profile::EndReason
    /// spells the same reasons the same way).
    pub fn as_str(self) -> &'static str {
        match self {
            EndReason::Exited => "exited",
            EndReason::Signaled => "signaled",
            EndReason::ReadyRegex => "ready-regex",
            EndReason::ReadyFile => "ready-file",
            EndReason::Timeout => "timeout",
            EndReason::Interrupted => "interrupted",
        }
    }
}

/// How startup ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ending {
    pub reason: EndReason,
    /// Monotonic time of the end.
    pub at_ns: i64,
}

/// How the program ended, after the tree was terminated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exit {
    pub code: Option<i32>,
    pub signal: Option<i32>,
}

const NOT_READY: i64 = i64::MIN;

/// Starts the program. Fails (naming the program) if it cannot be started.
pub fn launch(spec: &LaunchSpec) -> io::Result<Launched> {
    prepare(spec)?.start()
}

/// The program forked and waiting to exec ([`prepare`]).
pub struct Prepared {
    /// One byte here lets the child exec; closing it unwritten ends the
    /// child before it runs anything.
    gate: Option<io::PipeWriter>,
    /// The parent's copy of the end the child waits on, kept until the child
    /// surely forked with it.
    gate_read: Option<io::PipeReader>,
    /// The child writes its pid here (4 bytes, native order) once it is in
    /// its group, just before it waits at the gate; the waiter thread writes
    /// 0 when the spawn failed.
    ready: io::PipeReader,
    /// What `ready` said, once read: the child's pid, or None if it failed.
    pid: Option<Option<i32>>,
    spawned: std::sync::mpsc::Receiver<io::Result<Spawned>>,
    exit: Arc<Mutex<Option<(i64, std::process::ExitStatus)>>>,
    wake: Arc<Wake>,
    waiter: Option<JoinHandle<()>>,
    spec: LaunchSpec,
    cgroup: Option<Cgroup>,
}

/// What the waiter thread hands over once the program exec'd.
struct Spawned {
    pid: i32,
    stdout: Option<std::process::ChildStdout>,
    stderr: Option<std::process::ChildStderr>,
}

/// Forks the program's process and does all a start needs short of the
/// exec: its user, its group of the tree, its process group. So the time
/// [`Prepared::start`] takes is the exec's: moving a process into a cgroup
/// waits for an RCU grace period (8-20 ms here) that would otherwise count
/// as the program's own start, and that overlaps with whatever the caller
/// does meanwhile (a trace sets up its instance). The child waits on a
/// pipe; dropping the [`Prepared`] ends it before it runs anything.
pub fn prepare(spec: &LaunchSpec) -> io::Result<Prepared> {
    let Some((program, args)) = spec.argv.split_first() else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "no command given",
        ));
    };
    // Orphans of the tree re-parent to coldstart, so they can be found and
    // terminated instead of escaping to init.
    let _ = rustix::process::set_child_subreaper(Some(rustix::process::getpid()));

    // A group of its own per launch: two prepared launches may coexist.
    static LAUNCHES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = LAUNCHES.fetch_add(1, Ordering::Relaxed);
    let cgroup = Cgroup::create(&format!("tree{n}"));
    let procs = cgroup.as_ref().and_then(|g| g.procs_file().ok());
    let mut command = Command::new(program);
    // The program runs in its own process group, so reading the terminal would
    // stop it with SIGTTIN until the timeout; it reads end-of-file instead.
    command.args(args).stdin(Stdio::null());
    command.envs(spec.env.iter().map(|(k, v)| (k, v)));
    match spec.forward {
        // A ready line must still be seen, so output is read and dropped.
        Forward::Discard if spec.ready_regex.is_none() => {
            command.stdout(Stdio::null()).stderr(Stdio::null());
        }
        _ => {
            command.stdout(Stdio::piped()).stderr(Stdio::piped());
        }
    }
    command.process_group(0);
    spec.identity.apply_to(&mut command);
    if let Some(procs) = procs {
        // Joining the group needs the rights of the one who opened
        // cgroup.procs (root), which the kernel checks, not the user's.
        // SAFETY: write(2) is async-signal-safe.
        unsafe {
            command.pre_exec(move || {
                if libc::write(procs.as_raw_fd(), b"0".as_ptr().cast(), 1) != 1 {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    // SAFETY: prctl is async-signal-safe.
    unsafe {
        command.pre_exec(|| {
            // If coldstart dies, so does the program it was measuring (the
            // thread that forks it, the waiter below, lives as long as it).
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
            Ok(())
        });
    }
    let (gate_read, gate) = io::pipe()?;
    let (ready, ready_write) = io::pipe()?;
    let (gate_in, gate_out, ready_out) = (
        gate_read.as_raw_fd(),
        gate.as_raw_fd(),
        ready_write.as_raw_fd(),
    );
    // SAFETY: close, write and read are async-signal-safe.
    unsafe {
        command.pre_exec(move || {
            // The child's copy of the gate's write end: the parent's alone
            // keeps the gate open, so the child sees it closed if coldstart
            // gives up or dies.
            libc::close(gate_out);
            let pid = libc::getpid().to_ne_bytes();
            if libc::write(ready_out, pid.as_ptr().cast(), pid.len()) != pid.len() as isize {
                return Err(io::Error::last_os_error());
            }
            let mut byte = 0u8;
            loop {
                match libc::read(gate_in, (&raw mut byte).cast(), 1) {
                    1 => return Ok(()),
                    0 => return Err(io::Error::from_raw_os_error(libc::ECANCELED)),
                    _ => {
                        let error = io::Error::last_os_error();
                        if error.kind() != io::ErrorKind::Interrupted {
                            return Err(error);
                        }
                    }
                }
            }
        });
    }

    let (tell, spawned) = std::sync::mpsc::channel();
    let exit = Arc::new(Mutex::new(None));
    let wake = Arc::new(Wake::default());
    let waiter = {
        let exit = Arc::clone(&exit);
        let wake = Arc::clone(&wake);
        std::thread::Builder::new()
            .name("coldstart-wait".into())
            .spawn(move || {
                let mut ready_write = ready_write;
                // Returns once the child exec'd, or failed to.
                let mut child = match command.spawn() {
                    Ok(child) => child,
                    Err(e) => {
                        // Whether or not the child said it was ready.
                        let _ = ready_write.write_all(&0i32.to_ne_bytes());
                        let _ = tell.send(Err(e));
                        return;
                    }
                };
                drop(ready_write);
                let pid = child.id() as i32;
                let _ = tell.send(Ok(Spawned {
                    pid,
                    stdout: child.stdout.take(),
                    stderr: child.stderr.take(),
                }));
                let waited = child.wait();
                forget_root(pid);
                if let Ok(status) = waited {
                    let at = monotonic_ns();
                    if let Ok(mut slot) = exit.lock() {
                        *slot = Some((at, status));
                    }
                    wake.ring();
                }
            })?
    };
    Ok(Prepared {
        gate: Some(gate),
        gate_read: Some(gate_read),
        ready,
        pid: None,
        spawned,
        exit,
        wake,
        waiter: Some(waiter),
        spec: spec.clone(),
        cgroup,
    })
}

impl Prepared {
    /// The pid of the program's process, once it is ready to exec (waits
    /// for that); None when it could not be made ready ([`Prepared::start`]
    /// then says why).
    pub fn pid(&mut self) -> Option<i32> {
        if self.pid.is_none() {
            // The child's pid, or the waiter's 0 when the spawn failed; end
            // of file only if both are gone, which the waiter's answer
            // explains.
            let mut word = [0u8; 4];
            let said = self
                .ready
                .read_exact(&mut word)
                .map(|()| i32::from_ne_bytes(word));
            self.pid = Some(said.ok().filter(|&pid| pid > 0));
            // Before the gate opens: the child cannot have ended yet.
            if let (Some(Some(pid)), Ok(mut roots)) = (self.pid, ROOTS.lock()) {
                roots.push(pid);
            }
        }
        self.pid.flatten()
    }

    /// Lets the program exec, once its process is ready, and returns when
    /// it has: `t0_ns` is taken then, so the program's time starts at its
    /// exec. Fails (naming the program) if it could not be started.
    pub fn start(mut self) -> io::Result<Launched> {
        self.pid();
        let t0_ns = monotonic_ns();
        if let Some(mut gate) = self.gate.take() {
            let _ = gate.write_all(b"!");
        }
        self.gate_read = None;
        let spawned = self
            .spawned
            .recv()
            .unwrap_or_else(|_| Err(io::Error::other("the thread starting the program ended")));
        let program = self.spec.argv[0].to_string_lossy().into_owned();
        let spawned = match spawned {
            Ok(spawned) => spawned,
            Err(e) => {
                if let Some(waiter) = self.waiter.take() {
                    let _ = waiter.join();
                }
                if let Some(pid) = self.pid.flatten() {
                    forget_root(pid);
                }
                return Err(io::Error::new(
                    e.kind(),
                    format!("cannot start {program}: {e}"),
                ));
            }
        };
        let ready_at = Arc::new(AtomicI64::new(NOT_READY));
        let spec = self.spec.clone();
        let mut forwarders = Vec::new();
        if let Some(out) = spawned.stdout {
            let to = match spec.forward {
                Forward::Through => Sink::Stdout,
                Forward::ToStderr => Sink::Stderr,
                Forward::Discard => Sink::Nowhere,
            };
            forwarders.push(forward(
                out,
                to,
                spec.ready_regex.clone(),
                &ready_at,
                &self.wake,
            ));
        }
        if let Some(err) = spawned.stderr {
            let to = match spec.forward {
                Forward::Discard => Sink::Nowhere,
                _ => Sink::Stderr,
            };
            forwarders.push(forward(
                err,
                to,
                spec.ready_regex.clone(),
                &ready_at,
                &self.wake,
            ));
        }
        Ok(Launched {
            root_pid: spawned.pid,
            t0_ns,
            exit: Arc::clone(&self.exit),
            ready_at,
            wake: Arc::clone(&self.wake),
            waiter: self.waiter.take(),
            forwarders,
            spec,
            cgroup: self.cgroup.take(),
        })
    }
}

impl Drop for Prepared {
    /// Not started: the gate closes unopened, and the child ends without
    /// running anything, its waiter with it. The child is killed too, by a
    /// pidfd taken while it surely waits at the gate: a process another
    /// thread forked meanwhile may hold a copy of the gate's write end, and
    /// keep it open while it runs without exec.
    fn drop(&mut self) {
        let Some(waiter) = self.waiter.take() else {
            return;
        };
        let child = self
            .pid()
            .and_then(Pid::from_raw)
            .and_then(|pid| rustix::process::pidfd_open(pid, PidfdFlags::empty()).ok());
        self.gate = None;
        if let Some(child) = child {
            let _ = rustix::process::pidfd_send_signal(&child, Signal::KILL);
        }
        let _ = waiter.join();
        if let Some(pid) = self.pid.flatten() {
            forget_root(pid);
        }
    }
}

/// Where one of the program's output streams goes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Sink {
    Stdout,
    Stderr,
    Nowhere,
}

fn forward(
    stream: impl Read + Send + 'static,
    to: Sink,
    regex: Option<Regex>,
    ready_at: &Arc<AtomicI64>,
    wake: &Arc<Wake>,
) -> JoinHandle<()> {
    let ready_at = Arc::clone(ready_at);
    let wake = Arc::clone(wake);
    std::thread::spawn(move || {
        let mut reader = BufReader::new(stream);
        let mut line = Vec::new();
        loop {
            line.clear();
            match reader.read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            if let Some(regex) = &regex
                && ready_at.load(Ordering::Acquire) == NOT_READY
                && regex.is_match(&String::from_utf8_lossy(trim_newline(&line)))
            {
                let _ = ready_at.compare_exchange(
                    NOT_READY,
                    monotonic_ns(),
                    Ordering::AcqRel,
                    Ordering::Acquire,
                );
                wake.ring();
            }
            // A closed coldstart stdout must not stop the program's output
            // from being drained (the program would block on a full pipe).
            let _ = match to {
                Sink::Stdout => io::stdout().lock().write_all(&line),
                Sink::Stderr => io::stderr().lock().write_all(&line),
                Sink::Nowhere => Ok(()),
            };
        }
    })
}

/// A doorbell between the threads watching the program and the one
/// waiting for its end.
#[derive(Default)]
struct Wake {
    rung: Mutex<bool>,
    bell: Condvar,
}

impl Wake {
    fn ring(&self) {
        if let Ok(mut rung) = self.rung.lock() {
            *rung = true;
            self.bell.notify_all();
        }
    }

    /// Waits until rung (since the last wait) or `timeout` passed.
    fn wait(&self, timeout: Duration) {
        let Ok(rung) = self.rung.lock() else {
            return;
        };
        if let Ok((mut rung, _)) = self.bell.wait_timeout_while(rung, timeout, |rung| !*rung) {
            *rung = false;
        }
    }
}

/// The line without its terminator, so `$` matches at the end of the line.
fn trim_newline(line: &[u8]) -> &[u8] {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    line.strip_suffix(b"\r").unwrap_or(line)
}

impl Launched {
    /// Waits until startup is over for any of the reasons the spec allows,
    /// or `interrupted` becomes true. Calls `tick` about every 50 ms.
    pub fn wait_for_end(&self, interrupted: &AtomicBool, mut tick: impl FnMut()) -> Ending {
        let deadline = self
            .spec
            .timeout
            .map(|t| self.t0_ns + t.as_nanos().min(i64::MAX as u128) as i64);
        let mut last_tick = monotonic_ns();
        loop {
            let ready = self.ready_at.load(Ordering::Acquire);
            if ready != NOT_READY {
                return Ending {
                    reason: EndReason::ReadyRegex,
                    at_ns: ready,
                };
            }
            if let Some((at, status)) = self.exit_status() {
                let reason = if status.signal().is_some() {
                    EndReason::Signaled
                } else {
                    EndReason::Exited
                };
                return Ending { reason, at_ns: at };
            }
            let now = monotonic_ns();
            if let Some(file) = &self.spec.ready_file
                && file.exists()
            {
                return Ending {
                    reason: EndReason::ReadyFile,
                    at_ns: now,
                };
            }
            if deadline.is_some_and(|d| now >= d) {
                return Ending {
                    reason: EndReason::Timeout,
                    at_ns: now,
                };
            }
            if interrupted.load(Ordering::Acquire) {
                return Ending {
                    reason: EndReason::Interrupted,
                    at_ns: now,
                };
            }
            if now - last_tick >= 50_000_000 {
                tick();
                last_tick = now;
            }
            // Exit and ready are timed where they happen and ring at once;
            // the ready file, the timeout and Ctrl-C are polled. No busy
            // loop: on a small machine it would steal CPU from the program.
            self.wake.wait(Duration::from_millis(10));
        }
    }

    fn exit_status(&self) -> Option<(i64, std::process::ExitStatus)> {
        self.exit.lock().ok().and_then(|slot| *slot)
    }

    /// Processes of the tree still alive (zombies included).
    pub fn members(&self) -> Vec<i32> {
        match &self.cgroup {
            Some(group) => group.members(),
            None => descendants_of(self.root_pid),
        }
    }

    /// Terminates every process of the tree (SIGTERM, then SIGKILL after
    /// `grace`), reaps them, and returns how the program itself ended.
    pub fn terminate(mut self, grace: Duration) -> Exit {
        let signal_all = |this: &Launched, signal: Signal| {
            // The process group we created, then each member by itself:
            // one that left the group is still ours to end.
            if let Some(group) = Pid::from_raw(this.root_pid) {
                let _ = rustix::process::kill_process_group(group, signal);
            }
            for pid in this.members().into_iter().filter_map(Pid::from_raw) {
                let _ = rustix::process::kill_process(pid, signal);
            }
        };
        let alive = |this: &Launched| this.exit_status().is_none() || !this.members().is_empty();
        if alive(&self) {
            signal_all(&self, Signal::TERM);
            let deadline = monotonic_ns() + grace.as_nanos() as i64;
            while alive(&self) && monotonic_ns() < deadline {
                reap_orphans();
                std::thread::sleep(Duration::from_millis(5));
            }
            while alive(&self) {
                if !self.cgroup.as_ref().is_some_and(Cgroup::kill_all) {
                    signal_all(&self, Signal::KILL);
                }
                reap_orphans();
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        reap_orphans();
        if let Some(waiter) = self.waiter.take() {
            let _ = waiter.join();
        }
        for forwarder in self.forwarders.drain(..) {
            let _ = forwarder.join();
        }
        let status = self.exit_status().map(|(_, status)| status);
        Exit {
            code: status.and_then(|s| s.code()),
            signal: status.and_then(|s| s.signal()),
        }
    }
}

/// Live descendants of `root` (without cgroups, orphans that re-parented
/// to coldstart are found by `reap_orphans` instead).
fn descendants_of(root: i32) -> Vec<i32> {
    let parents: Vec<(i32, i32)> = proc::pids()
        .into_iter()
        .filter_map(|pid| Some((pid, proc::parent_of(pid)?)))
        .collect();
    let mut found = Vec::new();
    let mut frontier = vec![root];
    while let Some(parent) = frontier.pop() {
        for &(pid, ppid) in &parents {
            if (ppid == parent || pid == root) && !found.contains(&pid) {
                found.push(pid);
                frontier.push(pid);
            }
        }
    }
    found
}

/// The programs launched and not yet reaped by their waiter threads, by
/// pid, registered before they exec: [`reap_orphans`] leaves them alone,
/// whichever launch it cleans up after (two may run at once in one
/// process).
static ROOTS: Mutex<Vec<i32>> = Mutex::new(Vec::new());

/// `pid` is no launched program's any more (reaped, or never exec'd).
fn forget_root(pid: i32) {
    if let Ok(mut roots) = ROOTS.lock() {
        roots.retain(|&root| root != pid);
    }
}

/// Reaps children that re-parented to coldstart (it is their subreaper);
/// the programs themselves are left to their waiter threads.
fn reap_orphans() {
    let roots = ROOTS.lock().map(|r| r.clone()).unwrap_or_default();
    let launches = Launches::here();
    for pid in proc::own_children() {
        if !roots.contains(&pid) && launches.made(pid) {
            let mut status = 0;
            // SAFETY: non-blocking wait on our own child.
            unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG | libc::__WALL) };
        }
    }
}

/// Tells a launched tree's orphans (adopted by this process, their child
/// subreaper) from the children another part of the process made itself
/// and waits for (a compiler a test runs beside a trace): reaping one of
/// those would leave its owner's wait with ECHILD.
struct Launches {
    /// The prefix of the name of every launch's cgroup.
    cgroup_prefix: String,
    own_cgroup: Option<String>,
    own_group: i32,
}

impl Launches {
    fn here() -> Launches {
        Launches {
            cgroup_prefix: format!("{}{}-tree", crate::cgroup::PREFIX, std::process::id()),
            own_cgroup: proc::own_cgroup(),
            own_group: rustix::process::getpgrp().as_raw_nonzero().get(),
        }
    }

    /// Whether child `pid` comes from a launch: it is (or died) in one of
    /// this process's launch cgroups; or, launched without one (still in
    /// this process's cgroup), it is in a process group other than this
    /// process's, as a launched program leads its own.
    fn made(&self, pid: i32) -> bool {
        let cgroup = proc::cgroup_of(pid);
        let in_launch_group = cgroup.as_deref().is_some_and(|path| {
            path.rsplit('/')
                .next()
                .is_some_and(|name| name.starts_with(&self.cgroup_prefix))
        });
        in_launch_group
            || (cgroup == self.own_cgroup
                && proc::process_group_of(pid).is_some_and(|group| group != self.own_group))
    }
}

/// `program` as exec would find it: itself when it has a slash, else the
/// first PATH entry holding a file of that name.
pub fn resolve_program(program: &Path) -> Option<PathBuf> {
    if program.components().count() > 1 {
        return Some(program.to_path_buf());
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_file())
}
