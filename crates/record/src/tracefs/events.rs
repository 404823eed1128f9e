//! Turns raw tracepoint records into coldstart's domain events: page-cache
//! insertions and removals, faults, mapped and read page ranges, readahead
//! decisions and process lifecycle.
//!
//! Field offsets come from the running kernel's format files, never from
//! constants here, because they move between kernel versions and configs.

use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use super::format::{EventFormat, Field, FormatError};
use crate::loader::probes::Probe;

/// A decoded tracepoint hit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceEvent {
    /// Ring-buffer timestamp, in the instance's trace clock.
    pub ts: u64,
    /// The thread that hit the tracepoint (`common_pid`).
    pub tid: i32,
    pub kind: EventKind,
}

/// A file as the page cache knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FileKey {
    /// Kernel dev_t encoding, `major << 20 | minor`; see
    /// [`kernel_dev_to_user`] to compare with `st_dev`.
    pub dev: u32,
    pub ino: u64,
}

/// Which readahead tracepoint fired.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReadaheadKind {
    /// `page_cache_sync_ra`: a miss triggered readahead.
    Sync,
    /// `page_cache_async_ra`: a hit on a readahead marker triggered more.
    Async,
    /// `page_cache_ra_order`: readahead allocating large folios.
    Order,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventKind {
    /// A folio of 2^order pages starting at page `index` entered the cache.
    PageCacheAdd {
        file: FileKey,
        index: u64,
        order: u8,
    },
    /// A folio of 2^order pages starting at page `index` left the cache.
    PageCacheDelete {
        file: FileKey,
        index: u64,
        order: u8,
    },
    /// A page fault on page `index` of a mapped file.
    Fault { file: FileKey, index: u64 },
    /// Fault-around mapped pages `first..=last` without a fault each.
    MapPages {
        file: FileKey,
        first: u64,
        last: u64,
    },
    /// read()/splice looked up pages `first..=last`.
    GetPages {
        file: FileKey,
        first: u64,
        last: u64,
    },
    Readahead {
        kind: ReadaheadKind,
        file: FileKey,
        index: u64,
        order: u32,
        size: u32,
        async_size: u32,
        ra_pages: u32,
        /// Only the sync and async events carry the last three.
        mmap_miss: Option<u32>,
        prev_pos: Option<i64>,
        req_count: Option<u64>,
    },
    /// Task `pid` was created by the event's `tid`.
    NewTask {
        pid: i32,
        comm: String,
        clone_flags: u64,
    },
    /// Task `pid` (formerly `old_pid`, if a non-leader thread exec'd) ran
    /// execve on `filename`, as the caller spelt it.
    Exec {
        pid: i32,
        old_pid: i32,
        filename: String,
    },
    /// Task `pid` exited; `group_dead` says it was the last of its process,
    /// on kernels that report it.
    Exit {
        pid: i32,
        comm: String,
        group_dead: Option<bool>,
    },
    /// A page fault in user space at `address` of the faulting task.
    UserFault { address: u64 },
    /// A uprobe on the dynamic loader fired, with what it fetched.
    Loader(LoaderHit),
    /// ext4 read the inode table block holding inode `file` from the disk
    /// to look the inode up: filesystem metadata the lookup waited for.
    InodeLoad { file: FileKey },
    /// The task entered a call asking the kernel to read ahead:
    /// readahead(2), or fadvise64(_64) or madvise with WILLNEED. What enters the
    /// cache on this task until [`EventKind::AskEnd`] was asked for.
    AskStart,
    /// The task left readahead(2), fadvise64(_64) or madvise (any advice).
    AskEnd,
}

/// What one loader probe read: which arguments are present depends on the
/// probe (see [`crate::loader::probes`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoaderHit {
    pub probe: Probe,
    /// A path or name; None when the probe fetches none or the loader's
    /// memory could not be read.
    pub path: Option<String>,
    pub base: Option<u64>,
    pub target: Option<u64>,
    pub value: Option<i64>,
    /// The stack pointer at an entry probe: a later entry at or above it
    /// on the same task means this frame is gone.
    pub sp: Option<u64>,
}

/// Why a record was not turned into an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Skip {
    #[error("record of {len} bytes is too short for its event id")]
    NoHeader { len: usize },
    #[error("event id {0} is not one the decoder was built for")]
    UnknownId(u16),
    #[error("{event}: field `{field}` lies outside the record or is out of range")]
    Malformed {
        event: &'static str,
        field: &'static str,
    },
}

/// The format files did not describe events this decoder can read.
#[derive(Debug, thiserror::Error)]
pub enum DecoderError {
    #[error(transparent)]
    Format(#[from] FormatError),
    #[error("tracepoint {event} is not available on this kernel, and coldstart needs it")]
    MissingEvent { event: &'static str },
    #[error("tracepoint {event}: its format has no field `{field}`")]
    MissingField {
        event: &'static str,
        field: &'static str,
    },
    #[error("tracepoint {event}: field `{field}` is {found}, expected {expected}")]
    FieldShape {
        event: &'static str,
        field: &'static str,
        found: String,
        expected: &'static str,
    },
    #[error("cannot decode {event}: the decoder holds at most 254 kinds of event")]
    TooManyEvents { event: &'static str },
    #[error("tracepoints {event} and {other} both have id {id}")]
    DuplicateId {
        event: &'static str,
        other: &'static str,
        id: u16,
    },
}

#[derive(Debug, Clone, Copy)]
enum Spec {
    PageCacheAdd,
    PageCacheDelete,
    Fault,
    MapPages,
    GetPages,
    Readahead(ReadaheadKind),
    NewTask,
    Exec,
    Exit,
    UserFault,
    InodeLoad,
    /// Entering readahead(2) (no advice field), fadvise64 or fadvise64_64
    /// (`advice`), or madvise (`behavior`).
    AskEnter(Option<&'static str>),
    AskExit,
}

/// The tracepoints coldstart reads: "system/event", what it means, and
/// whether a kernel without it is acceptable.
const EVENTS: [(&str, Spec, bool); 21] = [
    (
        "filemap/mm_filemap_add_to_page_cache",
        Spec::PageCacheAdd,
        true,
    ),
    (
        "filemap/mm_filemap_delete_from_page_cache",
        Spec::PageCacheDelete,
        true,
    ),
    ("filemap/mm_filemap_fault", Spec::Fault, true),
    ("filemap/mm_filemap_map_pages", Spec::MapPages, true),
    ("filemap/mm_filemap_get_pages", Spec::GetPages, true),
    // Readahead tracepoints are recent (2025); without them we lose the
    // why of a read, not the what.
    (
        "readahead/page_cache_sync_ra",
        Spec::Readahead(ReadaheadKind::Sync),
        false,
    ),
    (
        "readahead/page_cache_async_ra",
        Spec::Readahead(ReadaheadKind::Async),
        false,
    ),
    (
        "readahead/page_cache_ra_order",
        Spec::Readahead(ReadaheadKind::Order),
        false,
    ),
    ("task/task_newtask", Spec::NewTask, true),
    ("sched/sched_process_exec", Spec::Exec, true),
    ("sched/sched_process_exit", Spec::Exit, true),
    // x86 only: the address of every user page fault, which tells which
    // page of a mapped file was touched even when fault-around had mapped
    // it already (then no filemap fault fires).
    ("exceptions/page_fault_user", Spec::UserFault, false),
    // ext4 only: which inodes a start had to read from the disk, the
    // metadata a prefetcher can warm by looking them up first.
    ("ext4/ext4_load_inode", Spec::InodeLoad, false),
    // The calls a program makes to have the kernel read ahead for it
    // (pages it asked for are not pages it needed): kernels built with
    // syscall tracepoints.
    ("syscalls/sys_enter_readahead", Spec::AskEnter(None), false),
    ("syscalls/sys_exit_readahead", Spec::AskExit, false),
    (
        "syscalls/sys_enter_fadvise64",
        Spec::AskEnter(Some("advice")),
        false,
    ),
    ("syscalls/sys_exit_fadvise64", Spec::AskExit, false),
    // fadvise64_64 is what arm64, riscv and other architectures without
    // fadvise64 in their syscall table call it.
    (
        "syscalls/sys_enter_fadvise64_64",
        Spec::AskEnter(Some("advice")),
        false,
    ),
    ("syscalls/sys_exit_fadvise64_64", Spec::AskExit, false),
    (
        "syscalls/sys_enter_madvise",
        Spec::AskEnter(Some("behavior")),
        false,
    ),
    ("syscalls/sys_exit_madvise", Spec::AskExit, false),
];

/// POSIX_FADV_WILLNEED and MADV_WILLNEED: both 3 on Linux.
const WILLNEED: u64 = 3;

/// A field the decoder reads, with a static name for [`Skip`] reports.
#[derive(Debug, Clone)]
struct Slot {
    name: &'static str,
    field: Field,
}

impl Slot {
    fn u64(&self, record: &[u8]) -> Result<u64, &'static str> {
        self.field.read_u64(record).ok_or(self.name)
    }

    fn u32(&self, record: &[u8]) -> Result<u32, &'static str> {
        u32::try_from(self.u64(record)?).map_err(|_| self.name)
    }

    fn u8(&self, record: &[u8]) -> Result<u8, &'static str> {
        u8::try_from(self.u64(record)?).map_err(|_| self.name)
    }

    fn i64(&self, record: &[u8]) -> Result<i64, &'static str> {
        self.field.read_i64(record).ok_or(self.name)
    }

    fn i32(&self, record: &[u8]) -> Result<i32, &'static str> {
        i32::try_from(self.i64(record)?).map_err(|_| self.name)
    }

    /// Strings from the kernel are bytes (a comm can be set to anything);
    /// invalid UTF-8 is replaced rather than losing the event.
    fn text(&self, record: &[u8]) -> Result<String, &'static str> {
        let bytes = self.field.read_bytes(record).ok_or(self.name)?;
        Ok(String::from_utf8_lossy(bytes).into_owned())
    }
}

#[derive(Debug, Clone)]
struct FileSlots {
    dev: Slot,
    ino: Slot,
}

impl FileSlots {
    fn read(&self, record: &[u8]) -> Result<FileKey, &'static str> {
        Ok(FileKey {
            dev: self.dev.u32(record)?,
            ino: self.ino.u64(record)?,
        })
    }
}

#[derive(Debug, Clone)]
enum Shape {
    PageCache {
        delete: bool,
        file: FileSlots,
        index: Slot,
        /// Kernels before folio orders were traced report single pages.
        order: Option<Slot>,
    },
    Fault {
        file: FileSlots,
        index: Slot,
    },
    Range {
        get_pages: bool,
        file: FileSlots,
        first: Slot,
        last: Slot,
    },
    /// Boxed: by far the largest shape, and rare.
    Readahead(Box<ReadaheadSlots>),
    NewTask {
        pid: Slot,
        comm: Slot,
        clone_flags: Slot,
    },
    Exec {
        filename: Slot,
        pid: Slot,
        old_pid: Slot,
    },
    Exit {
        comm: Slot,
        pid: Slot,
        group_dead: Option<Slot>,
    },
    UserFault {
        address: Slot,
    },
    InodeLoad {
        file: FileSlots,
    },
    /// readahead(2) has no advice: every call asks.
    AskEnter {
        advice: Option<Slot>,
    },
    AskExit,
    Loader(Box<LoaderSlots>),
}

#[derive(Debug, Clone)]
struct LoaderSlots {
    probe: Probe,
    path: Option<Slot>,
    base: Option<Slot>,
    target: Option<Slot>,
    value: Option<Slot>,
    sp: Option<Slot>,
}

#[derive(Debug, Clone)]
struct ReadaheadSlots {
    kind: ReadaheadKind,
    file: FileSlots,
    index: Slot,
    order: Slot,
    size: Slot,
    async_size: Slot,
    ra_pages: Slot,
    /// Only the sync and async events carry the last three.
    mmap_miss: Option<Slot>,
    prev_pos: Option<Slot>,
    req_count: Option<Slot>,
}

#[derive(Debug, Clone)]
struct Layout {
    event: &'static str,
    common_pid: Slot,
    shape: Shape,
}

/// Marks an id with no layout in [`Decoder::by_id`].
const NO_LAYOUT: u8 = u8::MAX;

/// How many records [`Decoder::decode`] turned away, by reason.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SkipCounts {
    pub no_header: u64,
    pub unknown_id: u64,
    pub malformed: u64,
}

impl SkipCounts {
    pub fn total(&self) -> u64 {
        self.no_header + self.unknown_id + self.malformed
    }
}

/// Atomics so `decode` can take `&self` and the decoder stay `Sync`;
/// they are touched only on the (rare) skip path.
#[derive(Debug, Default)]
struct SkipCounters {
    no_header: AtomicU64,
    unknown_id: AtomicU64,
    malformed: AtomicU64,
}

/// Decodes the records of the tracepoints in [`Decoder::enabled_events`].
#[derive(Debug)]
pub struct Decoder {
    /// Where every record keeps its event id; the same for all events.
    common_type: Field,
    /// Event id to index in `layouts`: one load per record, no hashing.
    by_id: Vec<u8>,
    layouts: Vec<Layout>,
    enabled: Vec<&'static str>,
    skipped: SkipCounters,
}

impl Decoder {
    /// Reads `<dir>/<system>/<event>/format` for every tracepoint coldstart
    /// uses. `dir` is a trace instance's `events` directory. Optional
    /// tracepoints this kernel lacks are left out of
    /// [`Decoder::enabled_events`]; missing required ones are an error.
    pub fn from_events_dir(dir: &Path) -> Result<Decoder, DecoderError> {
        let mut found = Vec::new();
        for (name, spec, required) in EVENTS {
            match EventFormat::read(&dir.join(name)) {
                Ok(format) => found.push((name, spec, format)),
                Err(FormatError::Io { source, .. })
                    if source.kind() == io::ErrorKind::NotFound && !required => {}
                Err(FormatError::Io { source, .. }) if source.kind() == io::ErrorKind::NotFound => {
                    return Err(DecoderError::MissingEvent { event: name });
                }
                Err(e) => return Err(e.into()),
            }
        }
        Decoder::build(found)
    }

    /// Builds a decoder from already parsed formats, matched to tracepoints
    /// by event name (`mm_filemap_fault`). Formats of other events are
    /// ignored; missing required ones are an error.
    pub fn from_formats(
        formats: impl IntoIterator<Item = EventFormat>,
    ) -> Result<Decoder, DecoderError> {
        let mut pending: Vec<EventFormat> = formats.into_iter().collect();
        let mut found = Vec::new();
        for (name, spec, required) in EVENTS {
            let event_name = name.rsplit('/').next().unwrap_or(name);
            match pending.iter().position(|f| f.name == event_name) {
                Some(i) => found.push((name, spec, pending.swap_remove(i))),
                None if required => return Err(DecoderError::MissingEvent { event: name }),
                None => {}
            }
        }
        Decoder::build(found)
    }

    fn build(found: Vec<(&'static str, Spec, EventFormat)>) -> Result<Decoder, DecoderError> {
        let Some((first, _, first_format)) = found.first() else {
            return Err(DecoderError::MissingEvent { event: EVENTS[0].0 });
        };
        let first = Fields {
            event: first,
            format: first_format,
        };
        let common_type = first.scalar("common_type")?.field;
        if common_type.size > 2 {
            return Err(first.shape("common_type", "at most 2 bytes"));
        }
        let mut decoder = Decoder {
            common_type,
            by_id: Vec::new(),
            layouts: Vec::with_capacity(found.len()),
            enabled: Vec::with_capacity(found.len()),
            skipped: SkipCounters::default(),
        };
        for (event, spec, format) in found {
            let fields = Fields {
                event,
                format: &format,
            };
            let layout = Layout {
                event,
                common_pid: fields.scalar("common_pid")?,
                shape: fields.shape_for(spec)?,
            };
            decoder.insert(&fields, layout)?;
            decoder.enabled.push(event);
        }
        Ok(decoder)
    }

    /// Adds the loader's uprobes of `group`, whose formats are under
    /// `events_dir/<group>/<probe name>/format`.
    pub fn add_loader_probes(
        &mut self,
        events_dir: &Path,
        group: &str,
        probes: &[Probe],
    ) -> Result<(), DecoderError> {
        for &probe in probes {
            let format = EventFormat::read(&events_dir.join(group).join(probe.name()))?;
            let fields = Fields {
                event: probe.name(),
                format: &format,
            };
            let shape = Shape::Loader(Box::new(LoaderSlots {
                probe,
                path: fields.optional_string("path")?,
                base: fields.optional_scalar("base")?,
                target: fields.optional_scalar("target")?,
                value: fields.optional_scalar("value")?,
                sp: fields.optional_scalar("sp")?,
            }));
            let layout = Layout {
                event: probe.name(),
                common_pid: fields.scalar("common_pid")?,
                shape,
            };
            self.insert(&fields, layout)?;
        }
        Ok(())
    }

    /// Gives the event of `fields` its layout, found by the id its format
    /// names; every event must keep its id where the others do.
    fn insert(&mut self, fields: &Fields<'_>, layout: Layout) -> Result<(), DecoderError> {
        if fields.scalar("common_type")?.field != self.common_type {
            return Err(fields.shape("common_type", "where other events have it"));
        }
        let id = fields.format.id;
        let index = usize::from(id);
        if self.by_id.len() <= index {
            self.by_id.resize(index + 1, NO_LAYOUT);
        }
        if let Some(other) = self.layouts.get(usize::from(self.by_id[index])) {
            return Err(DecoderError::DuplicateId {
                event: layout.event,
                other: other.event,
                id,
            });
        }
        if self.layouts.len() >= usize::from(NO_LAYOUT) {
            return Err(DecoderError::TooManyEvents {
                event: layout.event,
            });
        }
        self.by_id[index] = self.layouts.len() as u8;
        self.layouts.push(layout);
        Ok(())
    }

    /// The "system/event" tracepoints this decoder understands, which are
    /// the ones to enable.
    pub fn enabled_events(&self) -> Vec<&'static str> {
        self.enabled.clone()
    }

    /// The kernel's id for `event` ("system/event"), if decoded.
    pub fn id(&self, event: &str) -> Option<u16> {
        let index = self.layouts.iter().position(|l| l.event == event)?;
        let id = self.by_id.iter().position(|&i| usize::from(i) == index)?;
        u16::try_from(id).ok()
    }

    /// Decodes one ring-buffer payload, counting the records it cannot
    /// decode in [`Decoder::skipped`]. Allocates only for comm and filename
    /// strings.
    pub fn decode(&self, ts: u64, payload: &[u8]) -> Option<TraceEvent> {
        match self.try_decode(ts, payload) {
            Ok(event) => Some(event),
            Err(skip) => {
                let counter = match skip {
                    Skip::NoHeader { .. } => &self.skipped.no_header,
                    Skip::UnknownId(_) => &self.skipped.unknown_id,
                    Skip::Malformed { .. } => &self.skipped.malformed,
                };
                counter.fetch_add(1, Ordering::Relaxed);
                None
            }
        }
    }

    /// Records [`Decoder::decode`] has turned away so far.
    pub fn skipped(&self) -> SkipCounts {
        SkipCounts {
            no_header: self.skipped.no_header.load(Ordering::Relaxed),
            unknown_id: self.skipped.unknown_id.load(Ordering::Relaxed),
            malformed: self.skipped.malformed.load(Ordering::Relaxed),
        }
    }

    /// Decodes one payload and says why when it cannot; counts nothing.
    pub fn try_decode(&self, ts: u64, payload: &[u8]) -> Result<TraceEvent, Skip> {
        let id = self
            .common_type
            .read_u64(payload)
            .ok_or(Skip::NoHeader { len: payload.len() })? as u16;
        let layout = self
            .by_id
            .get(usize::from(id))
            .and_then(|&i| self.layouts.get(usize::from(i)))
            .ok_or(Skip::UnknownId(id))?;
        let malformed = |field| Skip::Malformed {
            event: layout.event,
            field,
        };
        let tid = layout.common_pid.i32(payload).map_err(malformed)?;
        let kind = decode_shape(&layout.shape, payload).map_err(malformed)?;
        Ok(TraceEvent { ts, tid, kind })
    }
}

fn decode_shape(shape: &Shape, p: &[u8]) -> Result<EventKind, &'static str> {
    Ok(match shape {
        Shape::PageCache {
            delete,
            file,
            index,
            order,
        } => {
            let file = file.read(p)?;
            let index = index.u64(p)?;
            let order = match order {
                Some(order) => order.u8(p)?,
                None => 0,
            };
            if *delete {
                EventKind::PageCacheDelete { file, index, order }
            } else {
                EventKind::PageCacheAdd { file, index, order }
            }
        }
        Shape::Fault { file, index } => EventKind::Fault {
            file: file.read(p)?,
            index: index.u64(p)?,
        },
        Shape::Range {
            get_pages,
            file,
            first,
            last,
        } => {
            let file = file.read(p)?;
            let first = first.u64(p)?;
            let last = last.u64(p)?;
            if *get_pages {
                EventKind::GetPages { file, first, last }
            } else {
                EventKind::MapPages { file, first, last }
            }
        }
        Shape::Readahead(ra) => EventKind::Readahead {
            kind: ra.kind,
            file: ra.file.read(p)?,
            index: ra.index.u64(p)?,
            order: ra.order.u32(p)?,
            size: ra.size.u32(p)?,
            async_size: ra.async_size.u32(p)?,
            ra_pages: ra.ra_pages.u32(p)?,
            mmap_miss: ra.mmap_miss.as_ref().map(|s| s.u32(p)).transpose()?,
            prev_pos: ra.prev_pos.as_ref().map(|s| s.i64(p)).transpose()?,
            req_count: ra.req_count.as_ref().map(|s| s.u64(p)).transpose()?,
        },
        Shape::NewTask {
            pid,
            comm,
            clone_flags,
        } => EventKind::NewTask {
            pid: pid.i32(p)?,
            comm: comm.text(p)?,
            clone_flags: clone_flags.u64(p)?,
        },
        Shape::Exec {
            filename,
            pid,
            old_pid,
        } => EventKind::Exec {
            pid: pid.i32(p)?,
            old_pid: old_pid.i32(p)?,
            filename: filename.text(p)?,
        },
        Shape::Exit {
            comm,
            pid,
            group_dead,
        } => EventKind::Exit {
            pid: pid.i32(p)?,
            comm: comm.text(p)?,
            group_dead: group_dead
                .as_ref()
                .map(|s| s.u64(p).map(|v| v != 0))
                .transpose()?,
        },
        Shape::UserFault { address } => EventKind::UserFault {
            address: address.u64(p)?,
        },
        Shape::InodeLoad { file } => EventKind::InodeLoad {
            file: file.read(p)?,
        },
        Shape::AskEnter { advice: None } => EventKind::AskStart,
        Shape::AskEnter {
            advice: Some(advice),
        } => {
            if advice.u64(p)? == WILLNEED {
                EventKind::AskStart
            } else {
                EventKind::AskEnd
            }
        }
        Shape::AskExit => EventKind::AskEnd,
        Shape::Loader(slots) => EventKind::Loader(LoaderHit {
            probe: slots.probe,
            // A string the kernel could not fetch reads "(fault)".
            path: match &slots.path {
                Some(slot) => Some(slot.text(p)?).filter(|t| t != "(fault)"),
                None => None,
            },
            base: slots.base.as_ref().map(|s| s.u64(p)).transpose()?,
            target: slots.target.as_ref().map(|s| s.u64(p)).transpose()?,
            value: slots.value.as_ref().map(|s| s.i64(p)).transpose()?,
            sp: slots.sp.as_ref().map(|s| s.u64(p)).transpose()?,
        }),
    })
}

/// Looks fields up in one event's format and checks they are usable.
struct Fields<'a> {
    event: &'static str,
    format: &'a EventFormat,
}

impl Fields<'_> {
    fn shape(&self, field: &'static str, expected: &'static str) -> DecoderError {
        let found = match self.format.field(field) {
            Some(f) if f.data_loc => "a __data_loc string".to_string(),
            Some(f) => format!("{} bytes at offset {}", f.size, f.offset),
            None => "missing".to_string(),
        };
        DecoderError::FieldShape {
            event: self.event,
            field,
            found,
            expected,
        }
    }

    fn optional_scalar(&self, name: &'static str) -> Result<Option<Slot>, DecoderError> {
        let Some(field) = self.format.field(name) else {
            return Ok(None);
        };
        if field.data_loc || ![1, 2, 4, 8].contains(&field.size) {
            return Err(self.shape(name, "an integer of 1, 2, 4 or 8 bytes"));
        }
        Ok(Some(Slot {
            name,
            field: field.clone(),
        }))
    }

    fn scalar(&self, name: &'static str) -> Result<Slot, DecoderError> {
        self.optional_scalar(name)?
            .ok_or(DecoderError::MissingField {
                event: self.event,
                field: name,
            })
    }

    fn optional_string(&self, name: &'static str) -> Result<Option<Slot>, DecoderError> {
        match self.format.field(name) {
            Some(_) => self.string(name).map(Some),
            None => Ok(None),
        }
    }

    fn string(&self, name: &'static str) -> Result<Slot, DecoderError> {
        let field = self.format.field(name).ok_or(DecoderError::MissingField {
            event: self.event,
            field: name,
        })?;
        let usable = if field.data_loc {
            field.size == 4
        } else {
            field.size > 0
        };
        if !usable {
            return Err(self.shape(name, "a char array or a 4-byte __data_loc string"));
        }
        Ok(Slot {
            name,
            field: field.clone(),
        })
    }

    fn file(&self) -> Result<FileSlots, DecoderError> {
        Ok(FileSlots {
            dev: self.scalar("s_dev")?,
            ino: self.scalar("i_ino")?,
        })
    }

    fn shape_for(&self, spec: Spec) -> Result<Shape, DecoderError> {
        Ok(match spec {
            Spec::PageCacheAdd | Spec::PageCacheDelete => Shape::PageCache {
                delete: matches!(spec, Spec::PageCacheDelete),
                file: self.file()?,
                index: self.scalar("index")?,
                order: self.optional_scalar("order")?,
            },
            Spec::Fault => Shape::Fault {
                file: self.file()?,
                index: self.scalar("index")?,
            },
            Spec::MapPages | Spec::GetPages => Shape::Range {
                get_pages: matches!(spec, Spec::GetPages),
                file: self.file()?,
                first: self.scalar("index")?,
                last: self.scalar("last_index")?,
            },
            Spec::Readahead(kind) => Shape::Readahead(Box::new(ReadaheadSlots {
                kind,
                file: self.file()?,
                index: self.scalar("index")?,
                order: self.scalar("order")?,
                size: self.scalar("size")?,
                async_size: self.scalar("async_size")?,
                ra_pages: self.scalar("ra_pages")?,
                mmap_miss: self.optional_scalar("mmap_miss")?,
                prev_pos: self.optional_scalar("prev_pos")?,
                req_count: self.optional_scalar("req_count")?,
            })),
            Spec::NewTask => Shape::NewTask {
                pid: self.scalar("pid")?,
                comm: self.string("comm")?,
                clone_flags: self.scalar("clone_flags")?,
            },
            Spec::Exec => Shape::Exec {
                filename: self.string("filename")?,
                pid: self.scalar("pid")?,
                old_pid: self.scalar("old_pid")?,
            },
            Spec::Exit => Shape::Exit {
                comm: self.string("comm")?,
                pid: self.scalar("pid")?,
                group_dead: self.optional_scalar("group_dead")?,
            },
            Spec::UserFault => Shape::UserFault {
                address: self.scalar("address")?,
            },
            Spec::InodeLoad => Shape::InodeLoad {
                file: FileSlots {
                    dev: self.scalar("dev")?,
                    ino: self.scalar("ino")?,
                },
            },
            Spec::AskEnter(advice) => Shape::AskEnter {
                advice: advice.map(|name| self.scalar(name)).transpose()?,
            },
            Spec::AskExit => Shape::AskExit,
        })
    }
}

/// Converts a kernel dev_t as tracepoints report it (`major << 20 | minor`)
/// to the `st_dev` encoding stat() returns (glibc `makedev`).
pub fn kernel_dev_to_user(dev: u32) -> u64 {
    let major = u64::from(dev >> 20);
    let minor = u64::from(dev & 0xf_ffff);
    ((major & 0xffff_f000) << 32)
        | ((major & 0xfff) << 8)
        | ((minor & 0xffff_ff00) << 12)
        | (minor & 0xff)
}

/// Converts an `st_dev` to the kernel dev_t tracepoints report. Bits the
/// kernel's 12-bit major / 20-bit minor cannot hold are dropped; stat()
/// never returns such a device.
pub fn user_dev_to_kernel(dev: u64) -> u32 {
    let major = ((dev >> 32) & 0xffff_f000) | ((dev >> 8) & 0xfff);
    let minor = ((dev >> 12) & 0xffff_ff00) | (dev & 0xff);
    (((major & 0xfff) << 20) | (minor & 0xf_ffff)) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dev_round_trip_matches_libc() {
        for (major, minor) in [
            (0u32, 0u32),
            (8, 1),
            (259, 3),
            (0xfff, 0xf_ffff),
            (7, 0x1234),
        ] {
            let kernel = (major << 20) | minor;
            let user = kernel_dev_to_user(kernel);
            assert_eq!(user, libc::makedev(major, minor), "{major}:{minor}");
            assert_eq!(libc::major(user), major);
            assert_eq!(libc::minor(user), minor);
            assert_eq!(user_dev_to_kernel(user), kernel);
        }
    }

    #[test]
    fn every_tracepoint_name_is_system_slash_event() {
        for (name, _, _) in EVENTS {
            let parts: Vec<_> = name.split('/').collect();
            assert_eq!(parts.len(), 2, "{name}");
        }
    }
}
