//! Which btrfs subvolume each page-cache event's file is in.
//!
//! The page-cache tracepoints name a file by its superblock's device and
//! its inode number. On btrfs every subvolume shares one superblock, whose
//! device is none that stat() reports (each subvolume has a device of its
//! own), and inode numbers start again in each subvolume: (device, inode)
//! neither resolves a file nor tells two files apart.
//!
//! So a small BPF program runs beside each of those tracepoints, on the
//! arguments the kernel hands them: from the folio, mapping or inode it
//! follows pointers to the inode and, when its superblock is btrfs, to its
//! subvolume's root and the device number stat() reports for files in
//! it. Each hit is recorded with its CPU, task, inode number and time. The
//! trace event and the program run in the same call of the tracepoint, on
//! the same CPU, so each event of a btrfs superblock meets its hit in that
//! CPU's order: [`Subvolumes::place`] gives the event the subvolume's
//! device, after which (device, inode) is what stat() says of the file.
//!
//! The structure offsets the program follows come from the running
//! kernel's BTF. The programs detach when their descriptors close, on
//! every exit path.

use crate::bpf_asm::*;
use crate::tracefs::events::{EventKind, FileKey, ReadaheadKind, TraceEvent};
use coldstart_system::btf::{Btf, BtfError};
use coldstart_system::{bpf, proc};
use std::collections::{HashMap, HashSet};
use std::ffi::CString;
use std::io;
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;

/// linux/magic.h BTRFS_SUPER_MAGIC.
const BTRFS_SUPER_MAGIC: u64 = 0x9123_683e;

/// One hit: time (CLOCK_MONOTONIC ns, the trace's clock), inode number,
/// pid_tgid, the subvolume's device (kernel encoding; 0 for btrfs's own
/// trees), CPU, tracepoint.
const HIT_BYTES: i32 = 40;

/// The ring buffer: about 200,000 hits, drained every 10 ms.
const RING_BYTES: u32 = 8 << 20;

/// How far apart in time an event and its hit may be: they are taken in
/// the same tracepoint call, microseconds apart.
const WINDOW_NS: u64 = 1_000_000;

/// The tracepoints whose events name files, as the kernel names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Tracepoint {
    Add = 0,
    Delete = 1,
    Fault = 2,
    MapPages = 3,
    GetPages = 4,
    SyncReadahead = 5,
    AsyncReadahead = 6,
    OrderReadahead = 7,
}

const TRACEPOINTS: [(&str, Tracepoint); 8] = [
    ("mm_filemap_add_to_page_cache", Tracepoint::Add),
    ("mm_filemap_delete_from_page_cache", Tracepoint::Delete),
    ("mm_filemap_fault", Tracepoint::Fault),
    ("mm_filemap_map_pages", Tracepoint::MapPages),
    ("mm_filemap_get_pages", Tracepoint::GetPages),
    ("page_cache_sync_ra", Tracepoint::SyncReadahead),
    ("page_cache_async_ra", Tracepoint::AsyncReadahead),
    ("page_cache_ra_order", Tracepoint::OrderReadahead),
];

impl Tracepoint {
    fn from_index(index: u32) -> Option<Tracepoint> {
        TRACEPOINTS
            .iter()
            .map(|&(_, tp)| tp)
            .find(|&tp| tp as u32 == index)
    }

    /// The tracepoint an event came from, and the file it names.
    fn of(kind: &mut EventKind) -> Option<(Tracepoint, &mut FileKey)> {
        match kind {
            EventKind::PageCacheAdd { file, .. } => Some((Tracepoint::Add, file)),
            EventKind::PageCacheDelete { file, .. } => Some((Tracepoint::Delete, file)),
            EventKind::Fault { file, .. } => Some((Tracepoint::Fault, file)),
            EventKind::MapPages { file, .. } => Some((Tracepoint::MapPages, file)),
            EventKind::GetPages { file, .. } => Some((Tracepoint::GetPages, file)),
            EventKind::Readahead { kind, file, .. } => Some((
                match kind {
                    ReadaheadKind::Sync => Tracepoint::SyncReadahead,
                    ReadaheadKind::Async => Tracepoint::AsyncReadahead,
                    ReadaheadKind::Order => Tracepoint::OrderReadahead,
                },
                file,
            )),
            _ => None,
        }
    }
}

/// Why subvolumes cannot be told apart on this kernel.
#[derive(Debug)]
pub enum NoSubvolumes {
    Btf(BtfError),
    /// A member the program reads is not the width it reads.
    Width(String),
    Bpf(io::Error),
}

impl std::fmt::Display for NoSubvolumes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NoSubvolumes::Btf(e) => write!(f, "{e}"),
            NoSubvolumes::Width(what) => write!(f, "{what}"),
            NoSubvolumes::Bpf(e) => write!(f, "{e}"),
        }
    }
}

/// The structure offsets the programs follow.
#[derive(Debug, Clone, Copy)]
struct Offsets {
    folio_mapping: i32,
    mapping_host: i32,
    inode_sb: i32,
    inode_ino: i32,
    sb_magic: i32,
    /// From the inode to its btrfs_inode's root pointer (negative: the
    /// inode is inside the btrfs_inode).
    inode_root: i32,
    root_anon_dev: i32,
}

impl Offsets {
    fn read(btf: &Btf) -> Result<Offsets, NoSubvolumes> {
        let member = |ty: &str, name: &str, size: u64| {
            let m = btf.member(ty, name).map_err(NoSubvolumes::Btf)?;
            if m.size != size {
                return Err(NoSubvolumes::Width(format!(
                    "{ty}.{name} is {} bytes wide, not {size}",
                    m.size
                )));
            }
            i32::try_from(m.offset)
                .map_err(|_| NoSubvolumes::Width(format!("{ty}.{name} is too far in")))
        };
        Ok(Offsets {
            folio_mapping: member("folio", "mapping", 8)?,
            mapping_host: member("address_space", "host", 8)?,
            inode_sb: member("inode", "i_sb", 8)?,
            inode_ino: member("inode", "i_ino", 8)?,
            sb_magic: member("super_block", "s_magic", 8)?,
            // vfs_inode is a whole struct inode, whose width varies: only
            // its offset matters.
            inode_root: member("btrfs_inode", "root", 8)?
                - btf
                    .member("btrfs_inode", "vfs_inode")
                    .map_err(NoSubvolumes::Btf)
                    .and_then(|m| {
                        i32::try_from(m.offset).map_err(|_| {
                            NoSubvolumes::Width("btrfs_inode.vfs_inode is too far in".into())
                        })
                    })?,
            root_anon_dev: member("btrfs_root", "anon_dev", 4)?,
        })
    }
}

/// A hit of a program: what its trace event needs to be placed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hit {
    pub ts: u64,
    pub tid: i32,
    pub cpu: u32,
    pub tracepoint: Tracepoint,
    pub ino: u64,
    /// The subvolume's device, kernel encoding; 0 for btrfs's own trees.
    pub dev: u32,
}

/// Records hits until finished.
pub struct SubvolumeRecorder {
    attached: Vec<OwnedFd>,
    drops: bpf::Map,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Vec<Hit>>>,
}

impl SubvolumeRecorder {
    /// Attaches the programs when a btrfs filesystem is mounted (None when
    /// none is: there is nothing to tell apart).
    pub fn start() -> Result<Option<SubvolumeRecorder>, NoSubvolumes> {
        if btrfs_superblocks().is_empty() {
            return Ok(None);
        }
        let btf = Btf::kernel(&["btrfs"]).map_err(NoSubvolumes::Btf)?;
        let offsets = Offsets::read(&btf)?;
        let ring = bpf::Map::ring_buffer(RING_BYTES).map_err(NoSubvolumes::Bpf)?;
        let drops = bpf::Map::array(8, 1).map_err(NoSubvolumes::Bpf)?;
        let mut attached = Vec::new();
        for (name, tracepoint) in TRACEPOINTS {
            // A kernel without the readahead tracepoints lacks their events too.
            let Some(argument) = btf.tracepoint_argument(name, 0) else {
                continue;
            };
            let chain = match argument.as_str() {
                "folio" => vec![offsets.folio_mapping, offsets.mapping_host],
                "address_space" => vec![offsets.mapping_host],
                "inode" => Vec::new(),
                other => {
                    return Err(NoSubvolumes::Width(format!(
                        "tracepoint {name} is passed a {other}, not a folio, mapping or inode"
                    )));
                }
            };
            let program = program(&chain, &offsets, tracepoint, &ring, &drops);
            let loaded = bpf::load_program(
                bpf::ProgramType::RawTracepoint,
                &encode(&program),
                // bpf_probe_read_kernel is offered to GPL-compatible programs
                // only; this one is this file's own code, under MIT as well.
                c"Dual MIT/GPL",
            )
            .map_err(|e| {
                NoSubvolumes::Bpf(io::Error::new(
                    e.kind(),
                    format!("loading the subvolume program for {name}: {e}"),
                ))
            })?;
            let name = CString::new(name).expect("no NUL in a tracepoint name");
            attached
                .push(bpf::attach_to_raw_tracepoint(&name, &loaded).map_err(NoSubvolumes::Bpf)?);
        }
        let reader = bpf::RingReader::map(ring).map_err(NoSubvolumes::Bpf)?;
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let stop = Arc::clone(&stop);
            std::thread::Builder::new()
                .name("coldstart-subvolumes".into())
                .spawn(move || drain_until(reader, &stop))
                .map_err(NoSubvolumes::Bpf)?
        };
        Ok(Some(SubvolumeRecorder {
            attached,
            drops,
            stop,
            thread: Some(thread),
        }))
    }

    /// Detaches the programs and returns every hit, with the btrfs
    /// superblocks they are for.
    pub fn finish(mut self) -> Subvolumes {
        self.attached.clear();
        self.stop.store(true, Ordering::Release);
        let hits = self
            .thread
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or_default();
        let mut dropped = [0u8; 8];
        let dropped = match self.drops.lookup(&0u32.to_ne_bytes(), &mut dropped) {
            Ok(()) => u64::from_ne_bytes(dropped),
            Err(_) => 0,
        };
        Subvolumes::new(hits, btrfs_superblocks(), dropped)
    }
}

impl Drop for SubvolumeRecorder {
    fn drop(&mut self) {
        self.attached.clear();
        self.stop.store(true, Ordering::Release);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The superblock devices of mounted btrfs filesystems, kernel encoding.
pub fn btrfs_superblocks() -> HashSet<u32> {
    proc::mountinfo(None)
        .iter()
        .filter(|m| m.fstype == "btrfs")
        .map(|m| crate::tracefs::events::user_dev_to_kernel(m.dev))
        .collect()
}

/// Drains every 10 ms until `stop`, then once more.
fn drain_until(reader: bpf::RingReader, stop: &AtomicBool) -> Vec<Hit> {
    let mut hits = Vec::new();
    loop {
        let stopping = stop.load(Ordering::Acquire);
        reader.drain(|record| hits.extend(parse_hit(record)));
        if stopping {
            return hits;
        }
        reader.wait(None, 10);
    }
}

fn parse_hit(record: &[u8]) -> Option<Hit> {
    let u64_at = |at: usize| Some(u64::from_ne_bytes(record.get(at..at + 8)?.try_into().ok()?));
    let u32_at = |at: usize| Some(u32::from_ne_bytes(record.get(at..at + 4)?.try_into().ok()?));
    Some(Hit {
        ts: u64_at(0)?,
        ino: u64_at(8)?,
        tid: u64_at(16)? as u32 as i32,
        dev: u32_at(24)?,
        cpu: u32_at(28)?,
        tracepoint: Tracepoint::from_index(u32_at(32)?)?,
    })
}

/// The program for one tracepoint: from its first argument follow `chain`
/// to the inode; leave unless its superblock is btrfs; read the inode
/// number and its subvolume's device; record them with the time, task and
/// CPU (or count a drop when the ring buffer is full).
fn program(
    chain: &[i32],
    offsets: &Offsets,
    tracepoint: Tracepoint,
    ring: &bpf::Map,
    drops: &bpf::Map,
) -> Vec<Insn> {
    let mut p = Vec::new();
    // Jumps to `out`, patched at the end.
    let mut to_out = Vec::new();
    // The first argument.
    p.push(load_u64(1, 1, 0));
    for &off in chain {
        read_kernel(&mut p, &mut to_out, (1, off), 8, true);
    }
    // r7 = the inode.
    p.push(mov_reg(7, 1));
    read_kernel(&mut p, &mut to_out, (7, offsets.inode_sb), 8, true);
    read_kernel(&mut p, &mut to_out, (1, offsets.sb_magic), 8, false);
    p.extend(load_imm64(2, BTRFS_SUPER_MAGIC));
    to_out.push(p.len());
    p.push(jump_if_ne_reg(1, 2, 0));
    // r8 = the inode number.
    read_kernel(&mut p, &mut to_out, (7, offsets.inode_ino), 8, false);
    p.push(mov_reg(8, 1));
    // r1 = its subvolume's root; r9 = the root's device (4 bytes).
    read_kernel(&mut p, &mut to_out, (7, offsets.inode_root), 8, true);
    read_kernel(&mut p, &mut to_out, (1, offsets.root_anon_dev), 4, false);
    p.push(mov_reg(9, 1));
    // The record.
    p.extend(load_map(1, ring));
    p.extend([
        mov_imm(2, HIT_BYTES),
        mov_imm(3, 0),
        call(HELPER_RINGBUF_RESERVE),
    ]);
    let full = p.len();
    p.push(jump_if_eq(0, 0, 0));
    p.extend([
        mov_reg(6, 0),
        store_u64(6, 8, 8),
        store_u32(6, 24, 9),
        store_u32_imm(6, 32, tracepoint as i32),
        store_u32_imm(6, 36, 0),
        call(HELPER_KTIME_GET_NS),
        store_u64(6, 0, 0),
        call(HELPER_GET_CURRENT_PID_TGID),
        store_u64(6, 16, 0),
        call(HELPER_GET_SMP_PROCESSOR_ID),
        store_u32(6, 28, 0),
        mov_reg(1, 6),
        mov_imm(2, 0),
        call(HELPER_RINGBUF_SUBMIT),
    ]);
    // Submitted: past the drop count.
    to_out.push(p.len());
    p.push(jump(0));
    // The ring buffer was full: count it.
    let drop_count = p.len();
    to_out.push(add_one_to_counter(&mut p, drops));
    let out = p.len();
    p.extend([mov_imm(0, 0), exit()]);
    for from in to_out {
        patch_jump(&mut p, from, out);
    }
    patch_jump(&mut p, full, drop_count);
    p
}

/// Appends: r1 = the `width`-byte (8 or 4) value at base + off, read
/// through bpf_probe_read_kernel via the stack slot at r10 - 8 (zeroed
/// first for a narrower read); a failed read (or, if `nonzero`, a 0 read)
/// jumps to the program's way out, whose jumps `to_out` collects.
fn read_kernel(
    p: &mut Vec<Insn>,
    to_out: &mut Vec<usize>,
    (base, off): (u8, i32),
    width: i32,
    nonzero: bool,
) {
    if width < 8 {
        p.push(store_u64_imm(10, -8, 0));
    }
    p.extend([
        mov_reg(3, base),
        add_imm(3, off),
        mov_reg(1, 10),
        add_imm(1, -8),
        mov_imm(2, width),
        call(HELPER_PROBE_READ_KERNEL),
    ]);
    to_out.push(p.len());
    p.push(jump_if_ne(0, 0, 0));
    p.push(if width < 8 {
        load_u32(1, 10, -8)
    } else {
        load_u64(1, 10, -8)
    });
    if nonzero {
        to_out.push(p.len());
        p.push(jump_if_eq(1, 0, 0));
    }
}

/// The hits of a run, by CPU and tracepoint in time order, ready to place
/// that CPU's events.
#[derive(Debug, Default)]
pub struct Subvolumes {
    hits: HashMap<(u32, Tracepoint), Vec<Hit>>,
    superblocks: HashSet<u32>,
    /// Hits the full ring buffer had no room for.
    pub dropped: u64,
}

/// What placing a run's events found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Placed {
    /// Events of btrfs files given their subvolume's device.
    pub placed: u64,
    /// Events of btrfs's own trees (its metadata), left on the superblock.
    pub metadata: u64,
    /// Events of btrfs superblocks no hit was found for.
    pub unplaced: u64,
}

impl Subvolumes {
    pub fn new(mut hits: Vec<Hit>, superblocks: HashSet<u32>, dropped: u64) -> Subvolumes {
        hits.sort_by_key(|h| h.ts);
        let mut by_key: HashMap<(u32, Tracepoint), Vec<Hit>> = HashMap::new();
        for hit in hits {
            by_key
                .entry((hit.cpu, hit.tracepoint))
                .or_default()
                .push(hit);
        }
        Subvolumes {
            hits: by_key,
            superblocks,
            dropped,
        }
    }

    /// The devices of the subvolumes the hits placed files in, as stat()
    /// encodes them.
    pub fn subvolume_devices(&self) -> HashSet<u64> {
        self.hits
            .values()
            .flatten()
            .filter(|hit| hit.dev != 0)
            .map(|hit| crate::tracefs::events::kernel_dev_to_user(hit.dev))
            .collect()
    }

    /// Whether `dev` (kernel encoding) is a btrfs superblock's.
    pub fn is_btrfs_superblock(&self, dev: u32) -> bool {
        self.superblocks.contains(&dev)
    }

    /// Gives each event of CPU `cpu` (in that CPU's order) on a btrfs
    /// superblock the device of the subvolume its inode is in, from the hit
    /// the same tracepoint call recorded.
    pub fn place(&self, cpu: u32, events: &mut [TraceEvent]) -> Placed {
        let mut placed = Placed::default();
        // Per tracepoint: the first hit not yet used or passed.
        let mut next: HashMap<Tracepoint, usize> = HashMap::new();
        let mut used: HashSet<(Tracepoint, usize)> = HashSet::new();
        for event in events.iter_mut() {
            let (ts, tid) = (event.ts, event.tid);
            let Some((tracepoint, file)) = Tracepoint::of(&mut event.kind) else {
                continue;
            };
            if !self.superblocks.contains(&file.dev) {
                continue;
            }
            let hits = self
                .hits
                .get(&(cpu, tracepoint))
                .map(Vec::as_slice)
                .unwrap_or(&[]);
            let start = next.entry(tracepoint).or_insert(0);
            while *start < hits.len()
                && (hits[*start].ts + WINDOW_NS < ts || used.contains(&(tracepoint, *start)))
            {
                *start += 1;
            }
            let found = (*start..hits.len())
                .take_while(|&i| hits[i].ts <= ts + WINDOW_NS)
                .find(|&i| {
                    !used.contains(&(tracepoint, i))
                        && hits[i].tid == tid
                        && hits[i].ino == file.ino
                });
            match found {
                Some(i) => {
                    used.insert((tracepoint, i));
                    if hits[i].dev == 0 {
                        placed.metadata += 1;
                    } else {
                        file.dev = hits[i].dev;
                        placed.placed += 1;
                    }
                }
                None => placed.unplaced += 1,
            }
        }
        placed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hit(ts: u64, tid: i32, ino: u64, dev: u32) -> Hit {
        Hit {
            ts,
            tid,
            cpu: 0,
            tracepoint: Tracepoint::Fault,
            ino,
            dev,
        }
    }

    fn fault(ts: u64, tid: i32, dev: u32, ino: u64) -> TraceEvent {
        TraceEvent {
            ts,
            tid,
            kind: EventKind::Fault {
                file: FileKey { dev, ino },
                index: 0,
            },
        }
    }

    #[test]
    fn events_of_a_btrfs_superblock_take_their_hits_device_in_order() {
        let sb = 39;
        let subvolumes = Subvolumes::new(
            vec![
                // A hit whose event was lost, long before.
                hit(100, 7, 257, 40),
                hit(5_000_000, 7, 257, 40),
                hit(5_000_100, 7, 257, 41),
                hit(5_000_200, 8, 1, 0),
            ],
            HashSet::from([sb]),
            0,
        );
        let mut events = vec![
            fault(5_000_050, 7, sb, 257),
            fault(5_000_150, 7, sb, 257),
            fault(5_000_250, 8, sb, 1),
            // Another filesystem's inode 257 is left alone.
            fault(5_000_300, 7, 254, 257),
            // No hit for this one.
            fault(9_000_000, 7, sb, 257),
        ];
        let placed = subvolumes.place(0, &mut events);
        let devs: Vec<u32> = events
            .iter_mut()
            .map(|e| Tracepoint::of(&mut e.kind).unwrap().1.dev)
            .collect();
        assert_eq!(devs, [40, 41, sb, 254, sb]);
        assert_eq!(
            placed,
            Placed {
                placed: 2,
                metadata: 1,
                unplaced: 1
            }
        );
    }

    #[test]
    fn a_hit_on_another_cpu_or_task_is_not_taken() {
        let sb = 39;
        let mut other_cpu = hit(1000, 7, 257, 40);
        other_cpu.cpu = 1;
        let subvolumes = Subvolumes::new(
            vec![other_cpu, hit(1000, 9, 257, 41)],
            HashSet::from([sb]),
            0,
        );
        let mut events = vec![fault(1010, 7, sb, 257)];
        assert_eq!(subvolumes.place(0, &mut events).unplaced, 1);
    }

    #[test]
    fn records_parse_field_by_field() {
        let mut record = Vec::new();
        record.extend(123u64.to_ne_bytes());
        record.extend(257u64.to_ne_bytes());
        record.extend(((55u64 << 32) | 77).to_ne_bytes());
        record.extend(41u32.to_ne_bytes());
        record.extend(1u32.to_ne_bytes());
        record.extend((Tracepoint::Add as u32).to_ne_bytes());
        record.extend(0u32.to_ne_bytes());
        assert_eq!(
            parse_hit(&record),
            Some(Hit {
                ts: 123,
                tid: 77,
                cpu: 1,
                tracepoint: Tracepoint::Add,
                ino: 257,
                dev: 41
            })
        );
        assert_eq!(parse_hit(&record[..20]), None);
    }
}
