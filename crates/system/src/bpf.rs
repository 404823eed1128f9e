//! The BPF system calls the name recorder needs: maps (an array and a ring
//! buffer), loading a tracepoint program, attaching it to a tracepoint
//! through perf_event_open, and reading the ring buffer's records from its
//! mapping. The programs themselves are the recorder's; this module only
//! hands them to the kernel. Neither rustix nor nix wraps bpf(2) or
//! perf_event_open, so the calls are raw here, each with why it is sound.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

// The BPF interface, as linux/bpf.h defines it.
const BPF_MAP_CREATE: libc::c_long = 0;
const BPF_MAP_LOOKUP_ELEM: libc::c_long = 1;
const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_MAP_TYPE_ARRAY: u32 = 2;
const BPF_MAP_TYPE_RINGBUF: u32 = 27;
const BPF_PROG_TYPE_TRACEPOINT: u32 = 5;
const BPF_PROG_TYPE_RAW_TRACEPOINT: u32 = 17;
const BPF_RAW_TRACEPOINT_OPEN: libc::c_long = 17;
const RINGBUF_BUSY: u32 = 1 << 31;
const RINGBUF_DISCARD: u32 = 1 << 30;
const RINGBUF_HEADER: usize = 8;
const PERF_TYPE_TRACEPOINT: u32 = 2;
const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 1 << 3;
const PERF_EVENT_IOC_ENABLE: libc::c_ulong = 0x2400;
const PERF_EVENT_IOC_DISABLE: libc::c_ulong = 0x2401;
const PERF_EVENT_IOC_SET_BPF: libc::c_ulong = 0x4004_2408;

/// The `bpf(2)` system call with an attribute block of `attr`'s size.
///
/// # Safety
/// Every pointer stored in `attr` must be valid for what `command` makes
/// the kernel read or write through it.
unsafe fn bpf(command: libc::c_long, attr: &mut [u64]) -> io::Result<i32> {
    // SAFETY: the block is valid for its length; its pointers are the caller's.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            command,
            attr.as_mut_ptr(),
            std::mem::size_of_val(attr),
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as i32)
    }
}

/// Puts two u32 fields into one u64 word of an attribute block (little
/// or big endian alike: field order in memory is what counts).
fn pair(first: u32, second: u32) -> u64 {
    let mut bytes = [0u8; 8];
    bytes[..4].copy_from_slice(&first.to_ne_bytes());
    bytes[4..].copy_from_slice(&second.to_ne_bytes());
    u64::from_ne_bytes(bytes)
}

fn owned(fd: i32) -> OwnedFd {
    // SAFETY: fd was just returned to us by the kernel and is ours alone.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

/// A BPF map, with the sizes it was created with so that lookups can be
/// checked against them.
#[derive(Debug)]
pub struct Map {
    fd: OwnedFd,
    key_size: u32,
    value_size: u32,
    entries: u32,
}

impl Map {
    /// An array of `entries` values of `value_size` bytes, keyed by u32.
    pub fn array(value_size: u32, entries: u32) -> io::Result<Map> {
        Map::create(BPF_MAP_TYPE_ARRAY, 4, value_size, entries)
    }

    /// A ring buffer of `bytes` (a power of two, a multiple of the page).
    pub fn ring_buffer(bytes: u32) -> io::Result<Map> {
        Map::create(BPF_MAP_TYPE_RINGBUF, 0, 0, bytes)
    }

    fn create(map_type: u32, key_size: u32, value_size: u32, entries: u32) -> io::Result<Map> {
        // map_type, key_size, value_size, max_entries, map_flags, ...
        let mut attr = [0u64; 16];
        attr[0] = pair(map_type, key_size);
        attr[1] = pair(value_size, entries);
        // SAFETY: BPF_MAP_CREATE's block holds no pointers.
        let fd = unsafe { bpf(BPF_MAP_CREATE, &mut attr) }
            .map_err(|e| io::Error::new(e.kind(), format!("creating a BPF map: {e}")))?;
        Ok(Map {
            fd: owned(fd),
            key_size,
            value_size,
            entries,
        })
    }

    /// The value under `key` into `value`; both must be the map's sizes.
    pub fn lookup(&self, key: &[u8], value: &mut [u8]) -> io::Result<()> {
        if key.len() != self.key_size as usize || value.len() != self.value_size as usize {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a BPF map lookup of the wrong key or value size",
            ));
        }
        // map_fd, pad, key, value, flags
        let mut attr = [0u64; 4];
        attr[0] = pair(self.fd.as_raw_fd() as u32, 0);
        attr[1] = key.as_ptr() as u64;
        attr[2] = value.as_mut_ptr() as u64;
        // SAFETY: key and value are live buffers of the map's own sizes.
        unsafe { bpf(BPF_MAP_LOOKUP_ELEM, &mut attr) }?;
        Ok(())
    }

    /// The descriptor a program's BPF_PSEUDO_MAP_FD instruction names.
    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

impl AsFd for Map {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// The kinds of program the recorder loads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProgramType {
    /// Attached to a trace event; reads the event's record.
    Tracepoint,
    /// Attached to a tracepoint by name; reads the arguments the kernel
    /// passes the tracepoint (pointers to its own structures).
    RawTracepoint,
}

/// Loads a program (`code`: its instructions as the kernel reads them).
/// On refusal the error ends with the verifier's last word.
pub fn load_program(kind: ProgramType, code: &[u8], license: &CStr) -> io::Result<OwnedFd> {
    const INSN_BYTES: usize = 8;
    let mut log = vec![0u8; 64 << 10];
    // prog_type, insn_cnt, insns, license, log_level, log_size, log_buf,
    // kern_version, ...
    let mut attr = [0u64; 20];
    let prog_type = match kind {
        ProgramType::Tracepoint => BPF_PROG_TYPE_TRACEPOINT,
        ProgramType::RawTracepoint => BPF_PROG_TYPE_RAW_TRACEPOINT,
    };
    attr[0] = pair(prog_type, (code.len() / INSN_BYTES) as u32);
    attr[1] = code.as_ptr() as u64;
    attr[2] = license.as_ptr() as u64;
    attr[3] = pair(1, log.len() as u32);
    attr[4] = log.as_mut_ptr() as u64;
    // SAFETY: the code (of insn_cnt whole instructions), the license and the
    // log (of log_size bytes) are live buffers.
    match unsafe { bpf(BPF_PROG_LOAD, &mut attr) } {
        Ok(fd) => Ok(owned(fd)),
        Err(e) => {
            let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
            let verifier = String::from_utf8_lossy(&log[..end]);
            let last = verifier.lines().rev().find(|l| !l.trim().is_empty());
            Err(io::Error::new(
                e.kind(),
                match last {
                    Some(line) => format!("{e} (verifier: {line})"),
                    None => e.to_string(),
                },
            ))
        }
    }
}

/// Opens the tracepoint `tracepoint` (its id under tracefs) as a perf event
/// on CPU 0 (a tracepoint's BPF programs run on every CPU) and attaches
/// `program`. Closing the returned event detaches it.
pub fn attach_to_tracepoint(tracepoint: u64, program: &OwnedFd) -> io::Result<OwnedFd> {
    // perf_event_attr: type, size, config, sample_period, the rest zero.
    let mut attr = [0u64; 16];
    attr[0] = pair(PERF_TYPE_TRACEPOINT, std::mem::size_of_val(&attr) as u32);
    attr[1] = tracepoint;
    attr[2] = 1;
    // SAFETY: the attribute block is valid and sized as its size field says.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            attr.as_mut_ptr(),
            -1 as libc::pid_t,
            0 as libc::c_int,
            -1 as libc::c_int,
            PERF_FLAG_FD_CLOEXEC,
        )
    };
    if fd < 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(
            e.kind(),
            format!("opening tracepoint {tracepoint} as a perf event: {e}"),
        ));
    }
    let event = owned(fd as i32);
    // SAFETY: ioctls on a descriptor we own, with an int argument.
    unsafe {
        if libc::ioctl(
            event.as_raw_fd(),
            PERF_EVENT_IOC_SET_BPF,
            program.as_raw_fd(),
        ) != 0
            || libc::ioctl(event.as_raw_fd(), PERF_EVENT_IOC_ENABLE, 0) != 0
        {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(
                e.kind(),
                format!("attaching the name recorder's program: {e}"),
            ));
        }
    }
    Ok(event)
}

/// Detaches the programs of `events` (descriptors from
/// [`attach_to_tracepoint`]), all of them at once. Each close waits for the
/// kernel to be sure no CPU still runs the program (RCU grace periods,
/// 60-85 ms here), so 53 closed in turn took 3.6 s; closed from threads of
/// their own, the waits overlap. Every event is disabled first, so none
/// fires after this begins. Returns when all are closed.
pub fn detach_together(events: Vec<OwnedFd>) {
    for event in &events {
        // SAFETY: an ioctl without argument on a descriptor we own.
        unsafe {
            libc::ioctl(event.as_raw_fd(), PERF_EVENT_IOC_DISABLE, 0);
        }
    }
    std::thread::scope(|scope| {
        let mut closing = Vec::new();
        for event in events {
            let spawned = std::thread::Builder::new()
                .name("coldstart-detach".into())
                .stack_size(64 * 1024)
                .spawn_scoped(scope, move || drop(event));
            // Without a thread (none left), it is closed here, in turn.
            if let Ok(thread) = spawned {
                closing.push(thread);
            }
        }
        for thread in closing {
            let _ = thread.join();
        }
    });
}

/// Attaches a raw tracepoint `program` to the tracepoint `name` (as the
/// kernel names it, without its system: "mm_filemap_fault"). Closing the
/// returned descriptor detaches it.
pub fn attach_to_raw_tracepoint(name: &CStr, program: &OwnedFd) -> io::Result<OwnedFd> {
    // name, prog_fd (and a cookie, left zero).
    let mut attr = [0u64; 3];
    attr[0] = name.as_ptr() as u64;
    attr[1] = pair(program.as_raw_fd() as u32, 0);
    // SAFETY: the name is a live NUL-terminated string.
    let fd = unsafe { bpf(BPF_RAW_TRACEPOINT_OPEN, &mut attr) }.map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("attaching a program to raw tracepoint {name:?}: {e}"),
        )
    })?;
    Ok(owned(fd))
}

/// The consumer's side of a BPF ring buffer.
pub struct RingReader {
    map: Map,
    consumer: *mut u8,
    producer: *mut u8,
    page: usize,
}

// SAFETY: the mappings are only used by the one thread that owns the reader.
unsafe impl Send for RingReader {}

impl RingReader {
    /// Maps a ring buffer made by [`Map::ring_buffer`].
    pub fn map(map: Map) -> io::Result<RingReader> {
        let page = crate::cache::page_size() as usize;
        let data = map.entries as usize;
        // SAFETY: mapping the ring buffer's pages as the kernel lays them
        // out: the consumer page writable, then the producer page and the
        // data area (mapped twice in a row) read-only.
        unsafe {
            let consumer = libc::mmap(
                std::ptr::null_mut(),
                page,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                map.raw_fd(),
                0,
            );
            if consumer == libc::MAP_FAILED {
                return Err(io::Error::last_os_error());
            }
            let producer = libc::mmap(
                std::ptr::null_mut(),
                page + 2 * data,
                libc::PROT_READ,
                libc::MAP_SHARED,
                map.raw_fd(),
                page as libc::off_t,
            );
            if producer == libc::MAP_FAILED {
                let e = io::Error::last_os_error();
                libc::munmap(consumer, page);
                return Err(e);
            }
            Ok(RingReader {
                map,
                consumer: consumer.cast(),
                producer: producer.cast(),
                page,
            })
        }
    }

    fn data_bytes(&self) -> usize {
        self.map.entries as usize
    }

    fn consumer_pos(&self) -> &AtomicU64 {
        // SAFETY: the first word of the consumer page, 8-aligned, mapped
        // for the reader's life.
        unsafe { &*(self.consumer as *const AtomicU64) }
    }

    fn producer_pos(&self) -> &AtomicU64 {
        // SAFETY: as above, on the producer page.
        unsafe { &*(self.producer as *const AtomicU64) }
    }

    /// Hands every submitted record to `each`, in order, and frees them.
    pub fn drain(&self, mut each: impl FnMut(&[u8])) {
        let mut consumer = self.consumer_pos().load(Ordering::Acquire);
        let producer = self.producer_pos().load(Ordering::Acquire);
        // SAFETY: data starts one page after the producer page; the kernel
        // maps it twice in a row, so a record never wraps.
        let data = unsafe { self.producer.add(self.page) };
        while consumer < producer {
            let at = (consumer as usize) & (self.data_bytes() - 1);
            // SAFETY: the header is 8-aligned inside the data area.
            let header = unsafe { &*(data.add(at) as *const AtomicU32) };
            let length = header.load(Ordering::Acquire);
            if length & RINGBUF_BUSY != 0 {
                break;
            }
            let bytes = (length & !(RINGBUF_BUSY | RINGBUF_DISCARD)) as usize;
            if length & RINGBUF_DISCARD == 0 {
                // SAFETY: a committed record of `bytes` bytes after its header.
                each(unsafe { std::slice::from_raw_parts(data.add(at + RINGBUF_HEADER), bytes) });
            }
            consumer += (RINGBUF_HEADER + bytes).next_multiple_of(8) as u64;
            self.consumer_pos().store(consumer, Ordering::Release);
        }
    }

    /// Waits until a record may be ready, `wake` (when given) is readable
    /// or closed at its other end, or `timeout_ms` passes.
    pub fn wait(&self, wake: Option<BorrowedFd<'_>>, timeout_ms: u64) {
        crate::process::poll_readable(self.map.as_fd(), wake, timeout_ms);
    }
}

impl Drop for RingReader {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly what `map` mapped.
        unsafe {
            libc::munmap(self.consumer.cast(), self.page);
            libc::munmap(self.producer.cast(), self.page + 2 * self.data_bytes());
        }
    }
}
