//! Tracing a start that is already under way: how `coldstart serve` learns
//! a program's plan from its ordinary starts, with no launcher, no cache
//! drop and no setting changed.
//!
//! A [`Ready`] trace is a private instance with the events that find a
//! start's pages enabled and tracing off, set up ahead of the start it will
//! record (creating the instance and its buffers takes milliseconds; a
//! start's first pages are read within one). When the exec of a program to
//! learn is seen, [`Ready::attach`] limits the instance to that process and
//! the tasks it creates (`set_event_pid` with `options/event-fork`) and
//! turns tracing on: two writes. Then it enables the other events (reads
//! through read(2), readahead, evictions, inode loads, the calls that ask
//! for readahead), about 40 us each: an event enabled, even with tracing
//! off, costs every process on the machine a call at each hit, and the
//! syscall events put every system call of every process on the slow path
//! (a ready instance with all of them cost each exec of /bin/true 12 us of
//! kernel time, with only these 5 us). Nothing outside the start's tree is recorded, and the
//! service's own reads (its prefetch threads) are not the tree's. Files are
//! named by the opens seen from the attach on, by the processes' mappings,
//! and by ext4 file handles for files opened before it.
//!
//! What differs from `coldstart trace`: the start's first microseconds
//! (the exec itself, before the attach) are not recorded, the names the
//! program looks up are not recorded (the plan warms no lookups), and the
//! page cache is as the start found it ([`CacheMode::AsFound`]).

use crate::filesystems::Filesystems;
use crate::paths::{self, HandleResolver, Inode, OpenWatcher};
use crate::trace::Mappings;
use crate::trace::{
    Readers, USER_FAULTS, assemble, check_required_events, clip_mappings, decode_buffers,
    drain_and_count, enable_events_where, unix_now_ns,
};
use crate::tracefs::clock::Placement;
use crate::tracefs::events::{Decoder, EventKind, TraceEvent};
use crate::tracefs::format::HeaderPage;
use crate::tracefs::instance::{self, Instance, TraceError};
use coldstart_profile::summary::TraceSummary;
use coldstart_profile::{CacheMode, EndReason, FileKind, Mark, Profile, RunEnd, RunStart};
use coldstart_system::build_id::build_id;
use coldstart_system::cache;
use coldstart_system::launch::Exit;
use coldstart_system::proc;

/// The buffer per CPU of a learning trace. Only the start's tree is
/// recorded and the readers drain it every 50 ms: a cold start of Firefox
/// ESR writes about 3 MiB of events in all.
pub const LEARN_BUFFER_KB_PER_CPU: u64 = 8 * 1024;

/// The events a [`Ready`] trace has enabled before its start: the pages a
/// start reads and maps, and its processes. The others are enabled at
/// the attach.
const ARMED_EVENTS: &[&str] = &[
    "filemap/mm_filemap_add_to_page_cache",
    "filemap/mm_filemap_fault",
    "filemap/mm_filemap_map_pages",
    "sched/sched_process_exec",
    "sched/sched_process_exit",
    "task/task_newtask",
];

/// A trace instance set up, tracing off, waiting for a start to record.
pub struct Ready {
    instance: Instance,
    decoder: Decoder,
    header: HeaderPage,
    buffer_kb_per_cpu: u64,
}

/// A start being recorded.
pub struct Attached {
    // Fields drop in order: the readers' buffer files close before the
    // instance is removed.
    readers: Readers,
    watcher: Option<OpenWatcher>,
    instance: Instance,
    decoder: Decoder,
    header: HeaderPage,
    root: i32,
    t0_ns: i64,
    started_at_unix_ns: i64,
}

/// What the service knows of a recorded start when it ends.
#[derive(Debug, Clone)]
pub struct AttachedEnd {
    /// The command line, as the root process had it.
    pub argv: Vec<String>,
    /// The executable, as exec'd.
    pub exe: String,
    pub uid: u32,
    pub gid: u32,
    /// When the start ended, CLOCK_MONOTONIC.
    pub ended_ns: i64,
    /// Whether its first process had exited by then.
    pub exited: bool,
}

/// Removes the trace instances (and uprobes) of coldstart processes that no
/// longer exist, such as a service killed with SIGKILL; their names. Does
/// nothing where tracefs is not mounted.
pub fn remove_left_behind() -> Vec<String> {
    let Some(root) = proc::mount_of_type("tracefs") else {
        return Vec::new();
    };
    let mut removed = instance::remove_stale_instances(&root);
    removed.extend(crate::tracefs::uprobes::remove_stale_uprobes(&root));
    removed
}

impl Ready {
    /// Sets up a private instance (tagged `tag`) with [`ARMED_EVENTS`]
    /// enabled and tracing off. Removes the instances of coldstart
    /// processes that no longer exist first.
    pub fn prepare(tag: &str, buffer_kb_per_cpu: u64) -> Result<Ready, TraceError> {
        let root = instance::tracefs_root()?;
        instance::remove_stale_instances(&root);
        let instance = Instance::create(&root, tag)?;
        instance.set("tracing_on", "0")?;
        // The clock first: changing it empties the buffers, which takes
        // milliseconds once they are big.
        instance.set("trace_clock", "mono")?;
        instance.set("buffer_size_kb", &buffer_kb_per_cpu.to_string())?;
        instance.set("options/overwrite", "0")?;
        // Tasks the traced ones create are traced, those that exit dropped.
        instance.set("options/event-fork", "1")?;
        let decoder = Decoder::from_events_dir(&instance.events_dir())?;
        check_required_events(&decoder)?;
        enable_events_where(&instance, &decoder, |event| ARMED_EVENTS.contains(&event))?;
        let header = HeaderPage::read(&instance.events_dir())
            .or_else(|_| HeaderPage::read(&root.join("events")))?;
        Ok(Ready {
            instance,
            decoder,
            header,
            buffer_kb_per_cpu,
        })
    }

    /// Records process `root` (which exec'd at `t0_ns`, CLOCK_MONOTONIC)
    /// and the tasks it creates from now on.
    pub fn attach(self, root: i32, t0_ns: i64) -> Result<Attached, TraceError> {
        let Ready {
            instance,
            decoder,
            header,
            buffer_kb_per_cpu,
        } = self;
        instance.set("set_event_pid", &root.to_string())?;
        instance.set("tracing_on", "1")?;
        // Reads through read(2) first: the most of what is left.
        let mut rest: Vec<&str> = decoder
            .enabled_events()
            .into_iter()
            .filter(|e| !ARMED_EVENTS.contains(e) && *e != USER_FAULTS)
            .collect();
        rest.sort_by_key(|e| *e != "filemap/mm_filemap_get_pages");
        for event in rest {
            instance.enable(event)?;
        }
        // After tracing is on: the first pages matter more than the opens,
        // which the mappings and file handles name as well.
        let watcher = OpenWatcher::start().ok();
        let subbuf_size = header.data_offset + header.data_size;
        let readers = Readers::start(&instance, subbuf_size, buffer_kb_per_cpu)?;
        Ok(Attached {
            readers,
            watcher,
            instance,
            decoder,
            header,
            root,
            t0_ns,
            started_at_unix_ns: unix_now_ns(),
        })
    }
}

impl Attached {
    /// Stops recording and writes the start into `profile` as a run.
    pub fn finish(
        self,
        profile: &mut Profile,
        end: &AttachedEnd,
    ) -> Result<TraceSummary, TraceError> {
        let page_size = cache::page_size();
        let _ = self.instance.set("tracing_on", "0");
        let mapped = paths::mapped_files();
        let (buffers, trace_bytes, lost) = drain_and_count(self.readers, &self.instance);
        drop(self.instance);
        let opens = self.watcher.map(OpenWatcher::finish).unwrap_or_default();
        let (root, t0_ns) = (self.root, self.t0_ns);
        let (decoder, header) = (self.decoder, self.header);
        let (mut events, _) = decode_buffers(&buffers, &header, &decoder, None, &Placement::Mono)?;
        // The root's exec happened before the attach: it is the tree's
        // first member from the start, as a launched program is at its exec.
        events.insert(
            0,
            TraceEvent {
                ts: t0_ns.max(0) as u64,
                tid: root,
                kind: EventKind::Exec {
                    pid: root,
                    old_pid: root,
                    filename: end.exe.clone(),
                },
            },
        );
        let filesystems = Filesystems::here();
        let mut opens = opens;
        filesystems.resolve_overlay_opens(&mut opens);
        let assembled = assemble(
            &events,
            t0_ns,
            root,
            &filesystems,
            &opens,
            &mapped,
            &Mappings::default(),
            page_size,
            None,
        );
        let mut batch = assembled.batch;
        name_by_handles(&mut batch.files);
        clip_mappings(&mut batch);
        batch.lost = lost;
        let ended_ns = end.ended_ns - t0_ns;
        batch.marks.push(Mark {
            t_ns: ended_ns,
            name: "end".into(),
        });
        let start = RunStart {
            argv: end.argv.clone(),
            cwd: String::new(),
            cache_mode: CacheMode::AsFound,
            started_at_unix_ns: self.started_at_unix_ns,
            kernel: proc::kernel_release(),
            page_size,
            read_ahead_kb: coldstart_system::readahead::read_ahead_kb_for(std::path::Path::new(
                &end.exe,
            )),
            fault_around_bytes: None,
            uid: end.uid,
            gid: end.gid,
            tool_version: env!("CARGO_PKG_VERSION").to_string(),
        };
        let run = profile.begin_run(&start)?;
        let run_end = RunEnd {
            ended_ns,
            end_reason: if end.exited {
                EndReason::Exited
            } else {
                EndReason::Timeout
            },
            exit_code: None,
            exit_signal: None,
            root_pid: Some(root),
        };
        let summary = TraceSummary {
            run,
            reason: run_end.end_reason,
            ended_ns,
            exit: Exit {
                code: None,
                signal: None,
            },
            lost_events: batch.lost.iter().map(|l| l.events).sum(),
            trace_bytes,
            events: events.len(),
            files: batch.files.len(),
            unresolved_files: batch.files.iter().filter(|f| f.path.is_none()).count(),
            processes_in_tree: batch.processes.iter().filter(|p| p.in_tree).count(),
            pages_read: assembled.pages_read,
            pages_read_by_tree: assembled.pages_read_by_tree,
            warmup_ns: None,
            start_monotonic_ns: t0_ns,
            lookups: None,
        };
        profile.write(run, &batch)?;
        profile.end_run(run, &run_end)?;
        Ok(summary)
    }
}

/// Names the files no open or mapping named (opened before the attach, or
/// read and closed by a process gone by the end) by ext4 file handles.
fn name_by_handles(files: &mut [coldstart_profile::NewFile]) {
    let mut resolver: Option<HandleResolver> = None;
    let unnamed = |f: &&mut coldstart_profile::NewFile| {
        f.path.is_none() && !matches!(f.kind, Some(FileKind::Metadata | FileKind::Memory))
    };
    for file in files.iter_mut().filter(unnamed) {
        let resolver = resolver.get_or_insert_with(HandleResolver::mounted);
        let identity = Inode {
            dev: file.dev,
            ino: file.ino,
        };
        let Some(path) = resolver.path(identity) else {
            continue;
        };
        if std::fs::metadata(&path).is_ok_and(|m| m.is_file()) {
            crate::trace::name_from_disk(file, path.clone());
            file.build_id = build_id(std::path::Path::new(&path));
            file.note = None;
            file.kind = Some(FileKind::File);
        }
    }
}
