//! The names a traced start looks up: every path handed to a file system
//! call (open, stat, access, readlink, exec, mkdir, unlink, rename, ...),
//! the ones that do not exist included.
//!
//! A lookup walks directories and reads inodes, and when those are not
//! cached the program waits for the disk while no file page is read, so a
//! page trace cannot show it, and the trace events carry only the address
//! of the name, not the name. A small BPF program on each call's
//! `syscalls/sys_enter_*` tracepoint copies the name out of the caller's
//! memory into a BPF ring buffer, which a thread here drains while the
//! program runs. On x86-64 one program on the raw `sys_enter` tracepoint
//! (and one on `sys_exit`) does it for every call, reading the arguments
//! from the task's saved registers: a program attached through a perf event
//! per call took 60-85 ms each to detach (the kernel waits out RCU grace
//! periods under a mutex, one event at a time), 3.6 s for the 53; the raw
//! attachments detach at once. Elsewhere, or where the kernel refuses the
//! raw attachment, a program per call's `syscalls/sys_enter_*` event. Relative names are made absolute at once from
//! /proc/TID/cwd or /proc/TID/fd/DFD.
//!
//! Nothing outlives the recorder: the programs are attached through
//! descriptors and the kernel detaches them when those close, on every exit
//! path, a killed coldstart included.
//!
//! What the kernel cannot copy is counted, not guessed: a name in a page
//! the program has not touched yet (the copy may not fault), a name longer
//! than [`NAME_BYTES`], a record the ring buffer had no room for.

use crate::bpf_asm::*;
use coldstart_profile::LookupMissed;
use coldstart_system::bpf;
use std::collections::HashMap;
use std::fs;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;

/// The calls recorded: (tracepoint, field holding a name, field holding
/// the directory descriptor it is relative to). A call this kernel has no
/// tracepoint for, or whose fields differ, is left out; `openat` must be
/// there. The second name of rename and link calls is their own entry.
/// symlink's first name is the link's text, not a lookup, so only its
/// second is recorded.
pub const CALLS: &[(&str, &str, Option<&str>)] = &[
    ("openat", "filename", Some("dfd")),
    ("openat2", "filename", Some("dfd")),
    ("open", "filename", None),
    ("creat", "pathname", None),
    ("newfstatat", "filename", Some("dfd")),
    ("statx", "filename", Some("dfd")),
    ("newstat", "filename", None),
    ("newlstat", "filename", None),
    ("access", "filename", None),
    ("faccessat", "filename", Some("dfd")),
    ("faccessat2", "filename", Some("dfd")),
    ("readlink", "path", None),
    ("readlinkat", "pathname", Some("dfd")),
    ("execve", "filename", None),
    ("execveat", "filename", Some("fd")),
    ("statfs", "pathname", None),
    ("chdir", "filename", None),
    ("mkdir", "pathname", None),
    ("mkdirat", "pathname", Some("dfd")),
    ("rmdir", "pathname", None),
    ("unlink", "pathname", None),
    ("unlinkat", "pathname", Some("dfd")),
    ("rename", "oldname", None),
    ("rename", "newname", None),
    ("renameat", "oldname", Some("olddfd")),
    ("renameat", "newname", Some("newdfd")),
    ("renameat2", "oldname", Some("olddfd")),
    ("renameat2", "newname", Some("newdfd")),
    ("link", "oldname", None),
    ("link", "newname", None),
    ("linkat", "oldname", Some("olddfd")),
    ("linkat", "newname", Some("newdfd")),
    ("symlink", "newname", None),
    ("symlinkat", "newname", Some("newdfd")),
    ("mknod", "filename", None),
    ("mknodat", "filename", Some("dfd")),
    ("truncate", "path", None),
    ("chmod", "filename", None),
    ("fchmodat", "filename", Some("dfd")),
    ("chown", "filename", None),
    ("lchown", "filename", None),
    ("fchownat", "filename", Some("dfd")),
    ("utimensat", "filename", Some("dfd")),
    ("getxattr", "pathname", None),
    ("lgetxattr", "pathname", None),
    ("listxattr", "pathname", None),
    ("llistxattr", "pathname", None),
    ("inotify_add_watch", "pathname", None),
];

/// Calls that take AT_EMPTY_PATH, and the field holding their flags: with
/// it, an empty name means the descriptor itself (glibc's fstat is
/// `fstatat(fd, "", AT_EMPTY_PATH)`), and when that "" sits in a page not
/// yet present the copy fails without it being a name at all.
const FLAG_FIELDS: &[(&str, &str)] = &[
    ("newfstatat", "flag"),
    ("statx", "flags"),
    ("fchownat", "flag"),
    ("execveat", "flags"),
    ("utimensat", "flags"),
    ("faccessat2", "flags"),
    ("linkat", "flags"),
];

/// `AT_EMPTY_PATH`.
const AT_EMPTY_PATH: i32 = 0x1000;

/// Calls whose results the recorder follows, from their exit tracepoints:
/// the descriptors opens return and the directory a chdir enters, so names
/// relative to them resolve as they did in the call even when the
/// descriptor is closed (or the process gone) by the time the record is
/// drained.
pub const EXITS: &[&str] = &["openat", "openat2", "open", "creat", "chdir"];

/// Exit records carry `EXIT_BASE` + their index in [`EXITS`] as the call.
const EXIT_BASE: i32 = 0x1000;

/// The size of an exit record: time, pid_tgid, call, unused, result.
const EXIT_RECORD_BYTES: i32 = 32;

/// The longest name copied, its terminating NUL included. Longer names are
/// counted as such and left out.
pub const NAME_BYTES: usize = 512;

/// One record in the ring buffer: time (CLOCK_MONOTONIC ns), pid_tgid
/// (tgid << 32 | tid), the call's index in [`CALLS`], the directory
/// descriptor, the copy's result (bytes with the NUL, or -errno), the
/// call's flags (0 when it has none in [`FLAG_FIELDS`]), then the name.
const RECORD_BYTES: usize = 32 + NAME_BYTES;

/// The ring buffer's size: a power of two, about 15,000 records, far more
/// than a start makes between two drains.
const RING_BYTES: usize = 8 << 20;

/// `AT_FDCWD`, as the recorded directory descriptor of calls without one.
const AT_FDCWD: i32 = -100;

/// A name one of the program's tasks looked up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedName {
    /// CLOCK_MONOTONIC ns at the call's entry.
    pub t_ns: i64,
    /// The task (thread) that made the call.
    pub tid: i32,
    /// Its process.
    pub tgid: i32,
    /// The system call, as its tracepoint names it ("openat", ...).
    pub call: &'static str,
    /// The name as an absolute path (relative ones joined to the task's
    /// working directory or directory descriptor when recorded).
    pub path: String,
}

/// A name the recorder could not record, and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MissedName {
    /// CLOCK_MONOTONIC ns at the call's entry.
    pub t_ns: i64,
    pub tid: i32,
    pub tgid: i32,
    pub call: &'static str,
    pub why: LookupMissed,
}

/// What a recorder recorded, and what it could not.
#[derive(Debug, Default)]
pub struct Recorded {
    /// In the order the calls were made on each CPU, drained in turn.
    pub names: Vec<RecordedName>,
    pub missed: Vec<MissedName>,
    /// Records the full ring buffer had no room for, machine-wide.
    pub dropped: u64,
}

/// How the recorder's programs are attached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attachment {
    /// One program on the raw `sys_enter` and one on `sys_exit` (x86-64).
    Raw,
    /// A program per call, each on its `syscalls/sys_enter_*` event through
    /// a perf event (slow to detach).
    PerCall,
}

/// Records names until finished.
pub struct NameRecorder {
    /// The programs' attachments; closing them detaches the programs.
    _attached: Vec<OwnedFd>,
    /// How they are attached.
    pub attachment: Attachment,
    drops: bpf::Map,
    stop: Arc<AtomicBool>,
    /// Closed to wake the draining thread at once when stopping.
    wake: Option<io::PipeWriter>,
    thread: Option<JoinHandle<Recorded>>,
    /// Calls this kernel has no usable tracepoint for.
    pub missing_calls: Vec<&'static str>,
}

impl NameRecorder {
    /// Attaches the programs (raw where this kernel and architecture allow,
    /// else one per call's entry tracepoint under the tracefs root `root`)
    /// and starts draining. Names looked up by this process itself are not
    /// recorded.
    pub fn start(root: &Path) -> io::Result<NameRecorder> {
        match NameRecorder::start_with(root, Attachment::Raw) {
            Ok(recorder) => Ok(recorder),
            Err(_) => NameRecorder::start_with(root, Attachment::PerCall),
        }
    }

    /// As [`NameRecorder::start`], attached as `attachment` says, or an
    /// error.
    pub fn start_with(root: &Path, attachment: Attachment) -> io::Result<NameRecorder> {
        let ring = bpf::Map::ring_buffer(RING_BYTES as u32)?;
        let drops = bpf::Map::array(8, 1)?;
        let own_tgid = std::process::id();
        let (attached, missing_calls) = match attachment {
            Attachment::Raw => attach_raw(root, own_tgid, &ring, &drops)?,
            Attachment::PerCall => attach_per_call(root, own_tgid, &ring, &drops)?,
        };
        if missing_calls.contains(&"openat") {
            bpf::detach_together(attached);
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "this kernel has no syscalls/sys_enter_openat tracepoint",
            ));
        }
        let reader = bpf::RingReader::map(ring)?;
        let stop = Arc::new(AtomicBool::new(false));
        let (woken, wake) = io::pipe()?;
        let thread = {
            let stop = Arc::clone(&stop);
            std::thread::Builder::new()
                .name("coldstart-names".into())
                .spawn(move || drain_until(reader, &stop, &woken))?
        };
        Ok(NameRecorder {
            _attached: attached,
            attachment,
            drops,
            stop,
            wake: Some(wake),
            thread: Some(thread),
            missing_calls,
        })
    }

    /// Detaches the programs, drains what is left and returns the names
    /// in the order they were recorded.
    pub fn finish(mut self) -> Recorded {
        bpf::detach_together(std::mem::take(&mut self._attached));
        self.drain()
    }

    /// Drains what is recorded so far and returns it with the programs
    /// still attached: detaching waits for the kernel (tens of ms), which
    /// the caller can do while it works on, or together with other waits.
    /// Names recorded after the drain are lost with the ring.
    pub fn finish_apart(mut self) -> (Recorded, Attachments) {
        let attached = Attachments(std::mem::take(&mut self._attached));
        (self.drain(), attached)
    }

    fn drain(&mut self) -> Recorded {
        self.stop.store(true, Ordering::Release);
        drop(self.wake.take());
        let mut recorded = self
            .thread
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or_default();
        let mut dropped = [0u8; 8];
        recorded.dropped = match self.drops.lookup(&0u32.to_ne_bytes(), &mut dropped) {
            Ok(()) => u64::from_ne_bytes(dropped),
            Err(_) => 0,
        };
        recorded
    }
}

/// Programs of a [`NameRecorder`] still attached; dropping this detaches
/// them, together.
pub struct Attachments(Vec<OwnedFd>);

impl Drop for Attachments {
    fn drop(&mut self) {
        bpf::detach_together(std::mem::take(&mut self.0));
    }
}

impl Drop for NameRecorder {
    fn drop(&mut self) {
        bpf::detach_together(std::mem::take(&mut self._attached));
        self.stop.store(true, Ordering::Release);
        drop(self.wake.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The attachments and missing calls of a program per call.
type Attached = (Vec<OwnedFd>, Vec<&'static str>);

/// A program per call's entry event (and per followed call's exit event),
/// each attached through a perf event.
fn attach_per_call(
    root: &Path,
    own_tgid: u32,
    ring: &bpf::Map,
    drops: &bpf::Map,
) -> io::Result<Attached> {
    let mut attached = Vec::new();
    let mut missing_calls = Vec::new();
    let result = (|| -> io::Result<()> {
        for (index, &(call, name_field, dfd_field)) in CALLS.iter().enumerate() {
            let Some(layout) = call_layout(root, call, name_field, dfd_field) else {
                if !missing_calls.contains(&call) {
                    missing_calls.push(call);
                }
                continue;
            };
            let program = program(&layout, index as i32, own_tgid, ring, drops);
            let program = load_program(&program, bpf::ProgramType::Tracepoint).map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("loading the name recorder's program for {call}: {e}"),
                )
            })?;
            attached.push(bpf::attach_to_tracepoint(layout.id, &program)?);
        }
        for (index, &call) in EXITS.iter().enumerate() {
            let dir = root
                .join("events/syscalls")
                .join(format!("sys_exit_{call}"));
            let Some((id, ret_offset)) = exit_layout(&dir) else {
                continue;
            };
            let program = exit_program(ret_offset, EXIT_BASE + index as i32, own_tgid, ring, drops);
            let program = load_program(&program, bpf::ProgramType::Tracepoint).map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("loading the name recorder's program for {call}'s exit: {e}"),
                )
            })?;
            attached.push(bpf::attach_to_tracepoint(id, &program)?);
        }
        Ok(())
    })();
    match result {
        Ok(()) => Ok((attached, missing_calls)),
        Err(e) => {
            bpf::detach_together(attached);
            Err(e)
        }
    }
}

/// The layout of `call`'s entry event, when it has the fields named.
fn call_layout(
    root: &Path,
    call: &str,
    name_field: &str,
    dfd_field: Option<&str>,
) -> Option<Layout> {
    let dir = root
        .join("events/syscalls")
        .join(format!("sys_enter_{call}"));
    let flags_field = FLAG_FIELDS.iter().find(|f| f.0 == call).map(|f| f.1);
    layout(&dir, name_field, dfd_field, flags_field)
}

/// One name a call passes, for the raw program: its syscall number, its
/// index in [`CALLS`], and the arguments holding the name, the directory
/// descriptor and the flags (their order in the call).
#[derive(Debug, Clone, Copy)]
struct RawCall {
    nr: i64,
    index: i32,
    name_arg: usize,
    dfd_arg: Option<usize>,
    flags_arg: Option<usize>,
}

/// Where x86-64's `struct pt_regs` keeps a system call's arguments (rdi,
/// rsi, rdx, r10, r8, r9), the call's number (orig_ax) and the code
/// segment (cs).
const PT_REGS_ARGS: [i32; 6] = [112, 104, 96, 56, 72, 64];
const PT_REGS_ORIG_AX: i32 = 120;
const PT_REGS_CS: i32 = 136;
/// The code segment of a 64-bit task's system call (`__USER_CS`): a 32-bit
/// task's calls are numbered otherwise and left out.
const USER64_CS: i32 = 0x33;

/// The two raw programs, on `sys_enter` and `sys_exit`. The argument
/// order comes from each call's event format (its fields after
/// `__syscall_nr` are the arguments in order), the numbers from this
/// architecture's table.
fn attach_raw(
    root: &Path,
    own_tgid: u32,
    ring: &bpf::Map,
    drops: &bpf::Map,
) -> io::Result<Attached> {
    if !cfg!(target_arch = "x86_64") {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "the raw name recorder reads x86-64 registers",
        ));
    }
    let mut calls = Vec::new();
    let mut missing_calls = Vec::new();
    for (index, &(call, name_field, dfd_field)) in CALLS.iter().enumerate() {
        let arg = |offset: i16| usize::try_from((offset - 16) / 8).ok().filter(|&a| a < 6);
        let raw = call_layout(root, call, name_field, dfd_field).and_then(|layout| {
            Some(RawCall {
                nr: syscall_number(call)?,
                index: index as i32,
                name_arg: arg(layout.name_offset)?,
                dfd_arg: match layout.dfd_offset {
                    Some(offset) => Some(arg(offset)?),
                    None => None,
                },
                flags_arg: match layout.flags_offset {
                    Some(offset) => Some(arg(offset)?),
                    None => None,
                },
            })
        });
        match raw {
            Some(raw) => calls.push(raw),
            None if !missing_calls.contains(&call) => missing_calls.push(call),
            None => {}
        }
    }
    let exits: Vec<(i64, i32)> = EXITS
        .iter()
        .enumerate()
        .filter_map(|(index, &call)| Some((syscall_number(call)?, EXIT_BASE + index as i32)))
        .collect();
    let enter = load_program(
        &raw_enter_program(&calls, own_tgid, ring, drops),
        bpf::ProgramType::RawTracepoint,
    )?;
    let exit = load_program(
        &raw_exit_program(&exits, own_tgid, ring, drops),
        bpf::ProgramType::RawTracepoint,
    )?;
    let mut attached = vec![bpf::attach_to_raw_tracepoint(c"sys_enter", &enter)?];
    match bpf::attach_to_raw_tracepoint(c"sys_exit", &exit) {
        Ok(fd) => attached.push(fd),
        Err(e) => {
            bpf::detach_together(attached);
            return Err(e);
        }
    }
    Ok((attached, missing_calls))
}

/// The x86-64 system call number of a call in [`CALLS`] (the tracepoint
/// names `newstat` and `newlstat` are stat and lstat).
#[cfg(target_arch = "x86_64")]
fn syscall_number(call: &str) -> Option<i64> {
    use libc::*;
    Some(match call {
        "openat" => SYS_openat,
        "openat2" => SYS_openat2,
        "open" => SYS_open,
        "creat" => SYS_creat,
        "newfstatat" => SYS_newfstatat,
        "statx" => SYS_statx,
        "newstat" => SYS_stat,
        "newlstat" => SYS_lstat,
        "access" => SYS_access,
        "faccessat" => SYS_faccessat,
        "faccessat2" => SYS_faccessat2,
        "readlink" => SYS_readlink,
        "readlinkat" => SYS_readlinkat,
        "execve" => SYS_execve,
        "execveat" => SYS_execveat,
        "statfs" => SYS_statfs,
        "chdir" => SYS_chdir,
        "mkdir" => SYS_mkdir,
        "mkdirat" => SYS_mkdirat,
        "rmdir" => SYS_rmdir,
        "unlink" => SYS_unlink,
        "unlinkat" => SYS_unlinkat,
        "rename" => SYS_rename,
        "renameat" => SYS_renameat,
        "renameat2" => SYS_renameat2,
        "link" => SYS_link,
        "linkat" => SYS_linkat,
        "symlink" => SYS_symlink,
        "symlinkat" => SYS_symlinkat,
        "mknod" => SYS_mknod,
        "mknodat" => SYS_mknodat,
        "truncate" => SYS_truncate,
        "chmod" => SYS_chmod,
        "fchmodat" => SYS_fchmodat,
        "chown" => SYS_chown,
        "lchown" => SYS_lchown,
        "fchownat" => SYS_fchownat,
        "utimensat" => SYS_utimensat,
        "getxattr" => SYS_getxattr,
        "lgetxattr" => SYS_lgetxattr,
        "listxattr" => SYS_listxattr,
        "llistxattr" => SYS_llistxattr,
        "inotify_add_watch" => SYS_inotify_add_watch,
        _ => return None,
    })
}

#[cfg(not(target_arch = "x86_64"))]
fn syscall_number(_call: &str) -> Option<i64> {
    None
}

/// Starts a raw program: r6 = the context (the tracepoint's arguments: the
/// task's registers, then the call's number or result, kept at r10 - 8),
/// r9 = the registers; returns unless the caller is a 64-bit task of
/// another process, whose pid_tgid is then in r7. Returns the jumps to the
/// end, for the caller to patch.
fn raw_prologue(p: &mut Vec<Insn>, own_tgid: u32) -> Vec<usize> {
    p.extend([
        mov_reg(6, 1),
        load_u64(9, 6, 0),
        load_u64(1, 6, 8),
        store_u64(10, -8, 1),
        call(HELPER_GET_CURRENT_PID_TGID),
        mov_reg(7, 0),
        mov_reg(1, 0),
        rsh_imm(1, 32),
    ]);
    let mut to_end = vec![p.len()];
    p.push(jump_if_eq(1, own_tgid as i32, 0));
    read_register(p, PT_REGS_CS);
    to_end.push(p.len());
    p.push(jump_if_ne(1, USER64_CS, 0));
    to_end
}

/// Appends: r1 = the u64 at `offset` in the task's saved registers (r9),
/// through the stack word at r10 - 16 (zero when it cannot be read).
fn read_register(p: &mut Vec<Insn>, offset: i32) {
    p.extend([
        mov_reg(1, 10),
        add_imm(1, -16),
        mov_imm(2, 8),
        mov_reg(3, 9),
        add_imm(3, offset),
        call(HELPER_PROBE_READ_KERNEL),
        load_u64(1, 10, -16),
    ]);
}

/// Appends a jump per call number in `numbers` (r1 holds the task's) to
/// the block of that number, and a jump to the end for the others. Returns
/// (the jump's index, its number) and the index of the jump to the end.
fn dispatch(p: &mut Vec<Insn>, numbers: &[i64]) -> (Vec<(usize, i64)>, usize) {
    let mut jumps = Vec::new();
    for &nr in numbers {
        jumps.push((p.len(), nr));
        p.push(jump_if_eq(1, nr as i32, 0));
    }
    let other = p.len();
    p.push(jump(0));
    (jumps, other)
}

/// Appends: reserve `bytes` of the ring buffer into r8 (or jump to the drop
/// count: the index returned, to patch), and fill in the time, pid_tgid
/// (r7) and `call_index`. Both kinds of program make their records so.
fn reserve_record(p: &mut Vec<Insn>, bytes: i32, call_index: i32, ring: &bpf::Map) -> usize {
    p.extend(load_map(1, ring));
    p.extend([
        mov_imm(2, bytes),
        mov_imm(3, 0),
        call(HELPER_RINGBUF_RESERVE),
    ]);
    let full = p.len();
    p.push(jump_if_eq(0, 0, 0));
    p.extend([
        mov_reg(8, 0),
        store_u64(8, 8, 7),
        call(HELPER_KTIME_GET_NS),
        store_u64(8, 0, 0),
        store_u32_imm(8, 16, call_index),
    ]);
    full
}

/// Appends: copy the name r3 points to into the record (r8) after its
/// header, store the copy's result, and submit the record.
fn copy_name_and_submit(p: &mut Vec<Insn>) {
    p.extend([
        mov_reg(1, 8),
        add_imm(1, 32),
        mov_imm(2, NAME_BYTES as i32),
        call(HELPER_PROBE_READ_USER_STR),
        store_u32(8, 24, 0),
    ]);
    submit(p);
}

/// Appends: store r1 as the record's (r8) result, and submit it.
fn store_result_and_submit(p: &mut Vec<Insn>) {
    p.push(store_u32(8, 24, 1));
    submit(p);
}

/// Appends: submit the record r8 points to.
fn submit(p: &mut Vec<Insn>) {
    p.extend([mov_reg(1, 8), mov_imm(2, 0), call(HELPER_RINGBUF_SUBMIT)]);
}

/// Ends a raw program: the end (return 0) and the drop count; patches
/// `to_end` and `full` jumps.
fn raw_epilogue(mut p: Vec<Insn>, to_end: &[usize], full: &[usize], drops: &bpf::Map) -> Vec<Insn> {
    let end = p.len();
    p.extend([mov_imm(0, 0), exit()]);
    let drop_count = p.len();
    let no_slot = add_one_to_counter(&mut p, drops);
    let after = p.len();
    p.extend([mov_imm(0, 0), exit()]);
    for &j in to_end {
        patch_jump(&mut p, j, end);
    }
    for &j in full {
        patch_jump(&mut p, j, drop_count);
    }
    patch_jump(&mut p, no_slot, after);
    p
}

/// The raw `sys_enter` program: for a call in `calls`, a record per name
/// it passes, as [`program`] makes one from the call's own event.
fn raw_enter_program(
    calls: &[RawCall],
    own_tgid: u32,
    ring: &bpf::Map,
    drops: &bpf::Map,
) -> Vec<Insn> {
    let mut p = Vec::new();
    let mut to_end = raw_prologue(&mut p, own_tgid);
    p.push(load_u64(1, 10, -8));
    let mut numbers: Vec<i64> = calls.iter().map(|c| c.nr).collect();
    numbers.sort_unstable();
    numbers.dedup();
    let (jumps, other) = dispatch(&mut p, &numbers);
    to_end.push(other);
    let mut full = Vec::new();
    for (jump_at, nr) in jumps {
        let block = p.len();
        patch_jump(&mut p, jump_at, block);
        for c in calls.iter().filter(|c| c.nr == nr) {
            full.push(reserve_record(&mut p, RECORD_BYTES as i32, c.index, ring));
            match c.dfd_arg {
                Some(arg) => {
                    read_register(&mut p, PT_REGS_ARGS[arg]);
                    p.push(store_u32(8, 20, 1));
                }
                None => p.push(store_u32_imm(8, 20, AT_FDCWD)),
            }
            match c.flags_arg {
                Some(arg) => {
                    read_register(&mut p, PT_REGS_ARGS[arg]);
                    p.push(store_u32(8, 28, 1));
                }
                None => p.push(store_u32_imm(8, 28, 0)),
            }
            read_register(&mut p, PT_REGS_ARGS[c.name_arg]);
            p.push(mov_reg(3, 1));
            copy_name_and_submit(&mut p);
        }
        to_end.push(p.len());
        p.push(jump(0));
    }
    raw_epilogue(p, &to_end, &full, drops)
}

/// The raw `sys_exit` program: for a call in `exits` (number, record
/// call), a record of its result, as [`exit_program`] makes one.
fn raw_exit_program(
    exits: &[(i64, i32)],
    own_tgid: u32,
    ring: &bpf::Map,
    drops: &bpf::Map,
) -> Vec<Insn> {
    let mut p = Vec::new();
    let mut to_end = raw_prologue(&mut p, own_tgid);
    read_register(&mut p, PT_REGS_ORIG_AX);
    let numbers: Vec<i64> = exits.iter().map(|e| e.0).collect();
    let (jumps, other) = dispatch(&mut p, &numbers);
    to_end.push(other);
    let mut full = Vec::new();
    for ((jump_at, _), &(_, call_index)) in jumps.into_iter().zip(exits) {
        let block = p.len();
        patch_jump(&mut p, jump_at, block);
        full.push(reserve_record(&mut p, EXIT_RECORD_BYTES, call_index, ring));
        p.push(load_u64(1, 10, -8));
        store_result_and_submit(&mut p);
        to_end.push(p.len());
        p.push(jump(0));
    }
    raw_epilogue(p, &to_end, &full, drops)
}

/// Where a call's tracepoint keeps what the program needs.
struct Layout {
    id: u64,
    name_offset: i16,
    dfd_offset: Option<i16>,
    flags_offset: Option<i16>,
}

/// The tracepoint's id and field offsets from its `format`, when it has a
/// `const char *` name field and (if named) an 8-byte descriptor field.
fn layout(
    dir: &Path,
    name_field: &str,
    dfd_field: Option<&str>,
    flags_field: Option<&str>,
) -> Option<Layout> {
    let id = read_tracefs(&dir.join("id"))?.trim().parse().ok()?;
    let format = read_tracefs(&dir.join("format"))?;
    let field = |wanted: &str| -> Option<(String, i16, u32)> {
        format.lines().find_map(|line| {
            let line = line.trim().strip_prefix("field:")?;
            let mut parts = line.split(';').map(str::trim);
            let declaration = parts.next()?;
            let offset = parts.next()?.strip_prefix("offset:")?.parse().ok()?;
            let size = parts.next()?.strip_prefix("size:")?.parse().ok()?;
            let (ty, name) = declaration.rsplit_once(' ')?;
            (name == wanted).then(|| (ty.trim().to_string(), offset, size))
        })
    };
    let (ty, name_offset, size) = field(name_field)?;
    if ty.replace(' ', "") != "constchar*" || size != 8 {
        return None;
    }
    // An optional field must be there, 8 bytes wide, when named.
    let optional = |wanted: Option<&str>| -> Option<Option<i16>> {
        match wanted {
            Some(wanted) => field(wanted)
                .filter(|&(_, _, size)| size == 8)
                .map(|(_, offset, _)| Some(offset)),
            None => Some(None),
        }
    };
    let dfd_offset = optional(dfd_field)?;
    let flags_offset = optional(flags_field)?;
    Some(Layout {
        id,
        name_offset,
        dfd_offset,
        flags_offset,
    })
}

/// A tracefs text file, whole (see `read_control`): the kernel makes the
/// text again for each read, and a trace reads about a hundred of these.
fn read_tracefs(path: &Path) -> Option<String> {
    crate::tracefs::instance::read_control(path).ok()
}

/// An exit tracepoint's id and the offset of its 8-byte `ret`.
fn exit_layout(dir: &Path) -> Option<(u64, i16)> {
    let id = read_tracefs(&dir.join("id"))?.trim().parse().ok()?;
    let format = read_tracefs(&dir.join("format"))?;
    let line = format.lines().find(|l| l.contains("field:long ret;"))?;
    let offset = line
        .split(';')
        .find_map(|p| p.trim().strip_prefix("offset:"))?;
    let size = line
        .split(';')
        .find_map(|p| p.trim().strip_prefix("size:"))?;
    (size == "8").then_some(())?;
    Some((id, offset.parse().ok()?))
}

/// The program for one call: skip this process's own calls; reserve a
/// record (or count a drop), fill it, copy the name, submit.
fn program(
    layout: &Layout,
    call_index: i32,
    own_tgid: u32,
    ring: &bpf::Map,
    drops: &bpf::Map,
) -> Vec<Insn> {
    let mut p = Vec::new();
    let jumps = reserve(&mut p, RECORD_BYTES as i32, call_index, own_tgid, ring);
    match layout.dfd_offset {
        Some(offset) => p.extend([load_u64(1, 6, offset), store_u32(8, 20, 1)]),
        None => p.push(store_u32_imm(8, 20, AT_FDCWD)),
    }
    match layout.flags_offset {
        Some(offset) => p.extend([load_u64(1, 6, offset), store_u32(8, 28, 1)]),
        None => p.push(store_u32_imm(8, 28, 0)),
    }
    p.push(load_u64(3, 6, layout.name_offset));
    copy_name_and_submit(&mut p);
    p.extend([mov_imm(0, 0), exit()]);
    count_drop(p, jumps, drops)
}

/// The program for one call's exit: the record's result is the call's.
fn exit_program(
    ret_offset: i16,
    call_index: i32,
    own_tgid: u32,
    ring: &bpf::Map,
    drops: &bpf::Map,
) -> Vec<Insn> {
    let mut p = Vec::new();
    let jumps = reserve(&mut p, EXIT_RECORD_BYTES, call_index, own_tgid, ring);
    p.push(load_u64(1, 6, ret_offset));
    store_result_and_submit(&mut p);
    p.extend([mov_imm(0, 0), exit()]);
    count_drop(p, jumps, drops)
}

/// Where [`reserve`]'s two forward jumps sit: skipping this process's own
/// calls, and a full ring buffer.
struct Jumps {
    skip_own: usize,
    full: usize,
}

/// Starts a program: r6 = the context; returns unless the caller is another
/// process; reserves `bytes` of the ring buffer into r8 and fills in the
/// time, pid_tgid (also kept in r7) and `call_index`.
fn reserve(
    p: &mut Vec<Insn>,
    bytes: i32,
    call_index: i32,
    own_tgid: u32,
    ring: &bpf::Map,
) -> Jumps {
    p.extend([
        mov_reg(6, 1),
        call(HELPER_GET_CURRENT_PID_TGID),
        mov_reg(7, 0),
        mov_reg(1, 0),
        rsh_imm(1, 32),
    ]);
    let skip_own = p.len();
    p.push(jump_if_eq(1, own_tgid as i32, 0)); // to the end, patched below
    let full = reserve_record(p, bytes, call_index, ring);
    Jumps { skip_own, full }
}

/// Ends a program: counts a drop in the drops map, returns 0; patches the
/// jumps of [`reserve`] to here.
fn count_drop(mut p: Vec<Insn>, jumps: Jumps, drops: &bpf::Map) -> Vec<Insn> {
    let Jumps { skip_own, full } = jumps;
    let drop_count = p.len();
    let no_slot = add_one_to_counter(&mut p, drops);
    let end = p.len();
    p.extend([mov_imm(0, 0), exit()]);
    patch_jump(&mut p, skip_own, end);
    patch_jump(&mut p, full, drop_count);
    patch_jump(&mut p, no_slot, end);
    p
}

fn load_program(insns: &[Insn], kind: bpf::ProgramType) -> io::Result<OwnedFd> {
    // GPL-compatible: bpf_probe_read_user_str is offered only to such
    // programs. The program is this file's own code, under MIT as well.
    bpf::load_program(kind, &encode(insns), c"Dual MIT/GPL")
}

/// Drains every few milliseconds until `stop`, then once more.
fn drain_until(reader: bpf::RingReader, stop: &AtomicBool, woken: &io::PipeReader) -> Recorded {
    let mut resolver = Resolver::default();
    loop {
        let stopping = stop.load(Ordering::Acquire);
        reader.drain(|record| resolver.add(record));
        if stopping {
            return resolver.recorded;
        }
        // The wake pipe's writer is closed right after the stop request.
        reader.wait(Some(woken.as_fd()), 10);
    }
}

/// Turns records into absolute names, following what opens returned and
/// where chdirs went.
#[derive(Default)]
struct Resolver {
    recorded: Recorded,
    /// Per task: the call and resolved name of an open or chdir whose exit
    /// has not come yet.
    pending: HashMap<i32, (&'static str, String)>,
    /// Per process: what each descriptor an open returned names.
    descriptors: HashMap<i32, HashMap<i32, String>>,
    /// Per process: the directory its last successful chdir entered.
    directories: HashMap<i32, String>,
}

impl Resolver {
    fn add(&mut self, record: &[u8]) {
        if record.len() < EXIT_RECORD_BYTES as usize {
            return;
        }
        let u64_at = |at: usize| u64::from_ne_bytes(record[at..at + 8].try_into().unwrap());
        let i32_at = |at: usize| i32::from_ne_bytes(record[at..at + 4].try_into().unwrap());
        let t_ns = u64_at(0) as i64;
        let pid_tgid = u64_at(8);
        let (tid, tgid) = (pid_tgid as u32 as i32, (pid_tgid >> 32) as i32);
        let index = i32_at(16);
        let result = i32_at(24);
        if let Some(call) = index
            .checked_sub(EXIT_BASE)
            .and_then(|i| EXITS.get(usize::try_from(i).ok()?))
        {
            self.exited(tid, tgid, call, result);
            return;
        }
        let Some(&(call, _, _)) = usize::try_from(index).ok().and_then(|i| CALLS.get(i)) else {
            return;
        };
        if record.len() < RECORD_BYTES {
            return;
        }
        let empty_path = i32_at(28) & AT_EMPTY_PATH != 0;
        let path = match self.name(record, result, empty_path) {
            Some(Ok(name)) => self
                .absolute(tid, tgid, i32_at(20), name)
                .ok_or(LookupMissed::Unresolved),
            Some(Err(why)) => Err(why),
            // An empty name: a call on a descriptor with AT_EMPTY_PATH.
            None => return,
        };
        let path = match path {
            Ok(path) => path,
            Err(why) => {
                return self.recorded.missed.push(MissedName {
                    t_ns,
                    tid,
                    tgid,
                    call,
                    why,
                });
            }
        };
        if EXITS.contains(&call) {
            self.pending.insert(tid, (call, path.clone()));
        }
        self.recorded.names.push(RecordedName {
            t_ns,
            tid,
            tgid,
            call,
            path,
        });
    }

    /// The name a record holds, given the copy's `result`; `None` when
    /// empty.
    /// With `empty_path` (AT_EMPTY_PATH), a name that could not be copied
    /// is taken for the empty one such calls pass.
    fn name<'r>(
        &self,
        record: &'r [u8],
        result: i32,
        empty_path: bool,
    ) -> Option<Result<&'r str, LookupMissed>> {
        if result < 0 {
            return (!empty_path).then_some(Err(LookupMissed::Unreadable));
        }
        let copied = result as usize;
        if copied <= 1 {
            return None;
        }
        if copied >= NAME_BYTES {
            return Some(Err(LookupMissed::TooLong));
        }
        Some(std::str::from_utf8(&record[32..32 + copied - 1]).map_err(|_| LookupMissed::NotUtf8))
    }

    fn exited(&mut self, tid: i32, tgid: i32, call: &str, result: i32) {
        let Some((entered, path)) = self.pending.remove(&tid) else {
            return;
        };
        if entered != call || result < 0 {
            return;
        }
        if call == "chdir" {
            self.directories.insert(tgid, path);
        } else {
            self.descriptors
                .entry(tgid)
                .or_default()
                .insert(result, path);
        }
    }

    /// `name` as an absolute path. A descriptor is looked up first in what
    /// the process's opens returned (exact, and closed descriptors too),
    /// then in /proc; the working directory first in /proc (a fchdir is
    /// not followed), then where the process's last chdir went.
    fn absolute(&self, tid: i32, tgid: i32, dfd: i32, name: &str) -> Option<String> {
        if name.starts_with('/') {
            return Some(name.to_string());
        }
        let from_proc = |what: String| {
            // The thread's own view first; its process's (the same, unless
            // it unshared them) when the thread has already exited.
            [tid, tgid].iter().find_map(|task| {
                let link = fs::read_link(format!("/proc/{task}/{what}")).ok()?;
                let link = link.to_str()?;
                // Not a pipe, socket or anonymous inode, nor deleted.
                (link.starts_with('/') && !link.ends_with(" (deleted)")).then(|| link.to_string())
            })
        };
        let base = if dfd == AT_FDCWD {
            from_proc("cwd".into()).or_else(|| self.directories.get(&tgid).cloned())
        } else {
            self.descriptors
                .get(&tgid)
                .and_then(|d| d.get(&dfd))
                .cloned()
                .or_else(|| from_proc(format!("fd/{dfd}")))
        }?;
        Some(join(&base, name))
    }
}

/// `base/name`, with `.` components of `name` dropped (they look nothing
/// up); `..` is kept, as the kernel resolves it after symlinks.
fn join(base: &str, name: &str) -> String {
    let mut out = base.trim_end_matches('/').to_string();
    for part in name.split('/').filter(|p| !p.is_empty() && *p != ".") {
        out.push('/');
        out.push_str(part);
    }
    if out.is_empty() {
        out.push('/');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_names_join_their_directory_without_dot_components() {
        assert_eq!(join("/home/u", "a/./b"), "/home/u/a/b");
        assert_eq!(join("/", "etc/passwd"), "/etc/passwd");
        assert_eq!(join("/home/u/", "../v"), "/home/u/../v");
        assert_eq!(join("/srv", "."), "/srv");
    }
}
