//! One traced run, start to finish: put the page cache in the requested
//! state, set up a private trace instance and the open watcher, start the
//! program, wait for its startup to end, stop tracing, and write what the
//! kernel saw into the profile.
//!
//! Raw trace buffers are only kept in memory while the program runs and
//! decoded after tracing stopped, so decoding costs the program nothing.

use crate::filesystems::Filesystems;
use crate::loader::calibrate;
use crate::loader::probes::{LoaderProbes, NoProbes};
use crate::loader::spans::SpanAssembly;
use crate::loader::{self};
use crate::names::{Attachments, NameRecorder, Recorded};
use crate::paths::FileMapping;
use crate::paths::{self, Inode, OpenWatcher, SeenFile};
use crate::subvolumes::{Placed, SubvolumeRecorder, Subvolumes};
use crate::tracefs::clock::{Placement, TraceClock};
use crate::tracefs::events::{
    Decoder, EventKind, FileKey, TraceEvent, kernel_dev_to_user, user_dev_to_kernel,
};
use crate::tracefs::format::HeaderPage;
use crate::tracefs::instance::{self, Instance, TraceError};
use crate::tracefs::ringbuf;
use crate::tracefs::uprobes::{self, Uprobes};
use coldstart_profile::summary::{LookupCounts, TraceSummary};
use coldstart_profile::{
    Batch, CacheMode, EndReason, InodeLoad, LoaderSpan, LookupMissed, LostEvents, Mark, NewFile,
    PageEvent, PageEventKind, PathLookup, Process, Profile, Readahead, ReadaheadKind, RunEnd,
    RunId, RunStart,
};
use coldstart_system::build_id::build_id;
use coldstart_system::cache;
use coldstart_system::fanotify::OpenEvents;
use coldstart_system::launch::{self, Ending, LaunchSpec, Launched, monotonic_ns};
use coldstart_system::proc;
use coldstart_system::readahead::{self, ReadaheadOverride, read_ahead_kb_for};
use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

/// Events the tracer needs; the readahead and task ones are optional.
const REQUIRED_EVENTS: &[&str] = &[
    "filemap/mm_filemap_add_to_page_cache",
    "filemap/mm_filemap_fault",
    "filemap/mm_filemap_map_pages",
    "sched/sched_process_exec",
    "sched/sched_process_exit",
];

pub(crate) const USER_FAULTS: &str = "exceptions/page_fault_user";

/// How to trace.
#[derive(Debug, Clone)]
pub struct TraceOptions {
    pub launch: LaunchSpec,
    pub cache: CacheMode,
    /// Files to evict for `CacheMode::Selective`.
    pub evict: Vec<PathBuf>,
    /// Trace buffer per CPU.
    pub buffer_kb_per_cpu: u64,
    /// Time between SIGTERM and SIGKILL when the tree is terminated.
    pub grace: Duration,
    /// Also trace every user page fault (exceptions:page_fault_user) and map
    /// it through the tree's mappings: finds touched pages fault-around had
    /// mapped, at the cost of many more events (it slows the start down).
    pub user_faults: bool,
    /// Set every device's read_ahead_kb to this for the run (restored
    /// after): 0 makes the pages read exactly the pages demanded.
    pub read_ahead_kb: Option<u64>,
    /// Trace the dynamic loader's phases per object with uprobes on ld.so.
    pub loader: bool,
    /// With `loader`: also count symbol lookups (a trap per lookup).
    pub loader_lookups: bool,
}

/// The trace buffer per CPU unless the user chooses. The readers drain it
/// every 100 ms, so it holds 160 MB/s of events per CPU; cold starts of
/// Firefox ESR and Chromium with `--user-faults` (the most events a trace
/// records: 270,000 and 220,000) lost none in 16 MiB, on this machine's 2
/// CPUs with a compile running beside them. Growing the kernel's buffers
/// takes time at every trace: 15 ms for 16 MiB per CPU, 37 ms for 64.
pub const DEFAULT_BUFFER_KB_PER_CPU: u64 = 16 * 1024;

impl TraceOptions {
    /// A trace of `launch` from a cold page cache with the defaults: the
    /// default buffer and grace, no user-fault tracing, the devices'
    /// own readahead.
    pub fn cold(launch: LaunchSpec) -> TraceOptions {
        TraceOptions {
            launch,
            cache: CacheMode::Cold,
            evict: Vec::new(),
            buffer_kb_per_cpu: DEFAULT_BUFFER_KB_PER_CPU,
            grace: coldstart_system::launch::DEFAULT_GRACE,
            user_faults: false,
            read_ahead_kb: None,
            loader: false,
            loader_lookups: false,
        }
    }
}

/// What the terminal shows while the program runs.
#[derive(Debug, Clone, Copy)]
pub struct Progress {
    pub elapsed_ns: i64,
    pub trace_bytes: u64,
}

/// Stages reported before the program starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stage {
    RemovedStale(Vec<String>),
    DroppingCaches,
    Evicting {
        files: usize,
        still_resident_pages: u64,
    },
    WarmingUp,
    /// Every device's read_ahead_kb set to `read_ahead_kb` for the run.
    Readahead {
        devices: usize,
        read_ahead_kb: u64,
    },
    /// Readahead settings a killed coldstart had left changed, put back.
    RestoredReadahead(Vec<PathBuf>),
    Tracing,
    Writing {
        events: usize,
    },
    Warning(String),
}

/// Traces one run of the program into `profile`.
pub fn trace(
    profile: &mut Profile,
    options: &TraceOptions,
    interrupted: &AtomicBool,
    stage: impl FnMut(Stage),
    progress: impl FnMut(Progress),
) -> Result<TraceSummary, TraceError> {
    trace_then_clean_up(profile, options, interrupted, stage, progress).map(|(summary, _)| summary)
}

/// What a finished trace still removes from the kernel: its instance and
/// uprobes, the name recorder's programs, the open watcher's group. Each
/// waits for the kernel (removing an instance takes 30-90 ms here), on a
/// thread of its own; dropping this waits for them all.
#[must_use = "dropping the cleanup waits for it: hold it while other work is done"]
pub struct Cleanup {
    _removal: Removal,
}

/// [`trace`], returning with the kernel's cleanup still under way, so the
/// caller can show the summary and close the profile meanwhile.
pub fn trace_then_clean_up(
    profile: &mut Profile,
    options: &TraceOptions,
    interrupted: &AtomicBool,
    mut stage: impl FnMut(Stage),
    progress: impl FnMut(Progress),
) -> Result<(TraceSummary, Cleanup), TraceError> {
    let root = instance::tracefs_root()?;
    clean_up_after_killed_runs(&root, &mut stage);
    let page_size = cache::page_size();
    // Reads ld.so and its debug file, so before the cache is prepared.
    let loader_probes = plan_loader_probes(options, &mut stage);
    // The instance is set up while the cache is prepared: it reads nothing
    // from a disk, and growing its buffers takes 15-25 ms.
    let preparing = Preparing::start(&root, options);
    let warmup_ns = prepare_cache(options, interrupted, &mut stage)?;
    if interrupted.load(Ordering::Acquire) {
        return Err(TraceError::Interrupted);
    }
    // The program's process is made now, and waits to exec until tracing is
    // on: joining its cgroup waits for an RCU grace period, which passes
    // while the tracer is set up instead of counting as the start's.
    let prepared = launch::prepare(&options.launch).map_err(|e| launch_error(options, e))?;
    // Files opened from here on take the device's readahead size.
    let readahead = override_readahead(options, &mut stage)?;
    let tracer = Tracer::start(
        &root,
        options,
        preparing,
        loader_probes.as_ref(),
        &mut stage,
    )?;
    let run = profile.begin_run(&run_start(options, page_size))?;
    if let Some(sight) = loader_sight(options, &loader_probes) {
        profile.set_run_loader(run, &sight)?;
    }
    if let Some(hit_ns) = tracer.loader_hit_ns {
        profile.set_run_loader_hit_ns(run, hit_ns)?;
    }

    stage(Stage::Tracing);
    let launched = launch_traced(profile, run, &tracer, prepared, options)?;
    let (t0, root_pid) = (launched.t0_ns, launched.root_pid);
    let (ending, mappings) = wait_for_startup(&launched, &tracer, options, interrupted, progress)?;
    // Tracing is off: the instance can go while the tree is ended.
    let captured = tracer.finish();
    let mapped = paths::mapped_files();
    let exit = launched.terminate(options.grace);
    drop(readahead);

    let (events, placed) = decode_buffers(
        &captured.buffers,
        &captured.header,
        &captured.decoder,
        captured.subvolumes.as_ref(),
        &captured.placement,
    )?;
    if placed.unplaced > 0 {
        stage(Stage::Warning(format!(
            "{} page events on btrfs could not be placed in a subvolume; \
             their files are listed apart, unnamed",
            placed.unplaced
        )));
    }
    stage(Stage::Writing {
        events: events.len(),
    });
    let filesystems = Filesystems::here().with_subvolumes(
        captured
            .subvolumes
            .as_ref()
            .map(Subvolumes::subvolume_devices)
            .unwrap_or_default(),
    );
    let mut opens = captured.opens;
    filesystems.resolve_overlay_opens(&mut opens);
    let assembled = assemble(
        &events,
        t0,
        root_pid,
        &filesystems,
        &opens,
        &mapped,
        &mappings,
        page_size,
        loader_probes
            .as_ref()
            .ok()
            .and_then(|p| p.as_ref())
            .map(|p| p.counts_lookups()),
    );
    for unseen in filesystems.unseen_metadata(assembled.batch.files.iter().map(|f| f.dev)) {
        stage(Stage::Warning(unseen));
    }
    let end = run_end(ending, exit, t0, root_pid);
    let mut batch = assembled.batch;
    clip_mappings(&mut batch);
    let mut batch = with_end_marks(batch, captured.lost, &end);
    let lookups = captured
        .names
        .map(|recorded| add_path_lookups(&mut batch, recorded, t0));
    let summary = TraceSummary {
        run,
        reason: end.end_reason,
        ended_ns: end.ended_ns,
        exit,
        lost_events: batch.lost.iter().map(|l| l.events).sum(),
        trace_bytes: captured.trace_bytes,
        events: events.len(),
        files: batch.files.len(),
        unresolved_files: batch.files.iter().filter(|f| f.path.is_none()).count(),
        processes_in_tree: batch.processes.iter().filter(|p| p.in_tree).count(),
        pages_read: assembled.pages_read,
        pages_read_by_tree: assembled.pages_read_by_tree,
        warmup_ns,
        start_monotonic_ns: t0,
        lookups,
    };
    profile.write(run, &batch)?;
    profile.end_run(run, &end)?;
    Ok((
        summary,
        Cleanup {
            _removal: captured._removing,
        },
    ))
}

/// The loader probes when the loader is to be traced: `Ok(None)` when it
/// is not, `Err` (already reported as a warning) when it cannot be.
fn plan_loader_probes(
    options: &TraceOptions,
    stage: &mut impl FnMut(Stage),
) -> Result<Option<LoaderProbes>, NoProbes> {
    if !options.loader {
        return Ok(None);
    }
    match loader::probes_for(&options.launch, options.loader_lookups) {
        Ok(probes) => {
            for missing in &probes.missing {
                stage(Stage::Warning(format!("loader trace: {missing}")));
            }
            Ok(Some(probes))
        }
        Err(e) => {
            stage(Stage::Warning(format!(
                "the loader's phases will not be traced: {e}"
            )));
            Err(e)
        }
    }
}

/// What the profile says about the loader trace of the run, if asked for.
fn loader_sight(
    options: &TraceOptions,
    probes: &Result<Option<LoaderProbes>, NoProbes>,
) -> Option<String> {
    if !options.loader {
        return None;
    }
    Some(match probes {
        Ok(Some(probes)) => probes.sight(),
        Ok(None) => return None,
        Err(e) => format!("not traced: {e}"),
    })
}

/// Removes what a coldstart killed mid-run left behind: its trace
/// instances, its uprobes and its readahead override.
fn clean_up_after_killed_runs(root: &Path, stage: &mut impl FnMut(Stage)) {
    let mut stale = instance::remove_stale_instances(root);
    // After the instances: a probe still enabled in one cannot be removed.
    stale.extend(uprobes::remove_stale_uprobes(root));
    if !stale.is_empty() {
        stage(Stage::RemovedStale(stale));
    }
    let restored = readahead::restore_stale();
    if !restored.is_empty() {
        stage(Stage::RestoredReadahead(restored));
    }
}

/// Puts the page cache in the requested state: dropped, the listed files
/// evicted, or warmed by an untraced run (whose duration it returns).
fn prepare_cache(
    options: &TraceOptions,
    interrupted: &AtomicBool,
    stage: &mut impl FnMut(Stage),
) -> Result<Option<i64>, TraceError> {
    match options.cache {
        CacheMode::Cold => {
            stage(Stage::DroppingCaches);
            cache::drop_all()?;
        }
        CacheMode::Selective => {
            let mut still = 0;
            for path in &options.evict {
                match cache::evict(path) {
                    Ok(eviction) => still += eviction.resident_after,
                    Err(e) => stage(Stage::Warning(e.to_string())),
                }
            }
            stage(Stage::Evicting {
                files: options.evict.len(),
                still_resident_pages: still,
            });
        }
        CacheMode::Warm => {
            stage(Stage::WarmingUp);
            let mut untraced = options.launch.clone();
            untraced.forward = launch::Forward::Discard;
            let warmup = launch::launch(&untraced).map_err(|e| launch_error(options, e))?;
            let ending = warmup.wait_for_end(interrupted, || {});
            let warmup_ns = ending.at_ns - warmup.t0_ns;
            warmup.terminate(options.grace);
            return Ok(Some(warmup_ns));
        }
        // The cache as it is.
        CacheMode::AsFound => {}
    }
    Ok(None)
}

/// Sets every device's read_ahead_kb for the run when asked to; the
/// returned override puts the old values back when dropped.
fn override_readahead(
    options: &TraceOptions,
    stage: &mut impl FnMut(Stage),
) -> Result<Option<ReadaheadOverride>, TraceError> {
    let Some(kb) = options.read_ahead_kb else {
        return Ok(None);
    };
    let over = ReadaheadOverride::set_all(kb)?;
    stage(Stage::Readahead {
        devices: over.saved().len(),
        read_ahead_kb: kb,
    });
    Ok(Some(over))
}

/// The kernel side of a traced run: a private trace instance with the
/// events enabled, threads draining its buffers, and the open watcher.
struct Tracer {
    // Fields drop in order, and the buffer files the readers hold must be
    // closed before the instance can be removed.
    readers: Readers,
    watcher: Option<OpenWatcher>,
    names: Option<NameRecorder>,
    subvolumes: Option<SubvolumeRecorder>,
    /// Holds the instance's marker open, so it too drops before the instance.
    clock: TraceClock,
    instance: Instance,
    /// After the instance: probes enabled in it cannot be removed before.
    uprobes: Option<Uprobes>,
    /// The calibrated cost of one loader probe hit, when measured.
    loader_hit_ns: Option<u64>,
    decoder: Decoder,
    header: HeaderPage,
}

/// A private instance, tracing off, with the page events enabled.
struct Ready {
    /// Before the instance: it holds a file of the instance open, and an
    /// instance with open files cannot be removed.
    clock: TraceClock,
    instance: Instance,
    decoder: Decoder,
}

/// A private instance with the page events enabled and tracing off,
/// tracing nothing yet: its clock ready, its buffers grown.
fn prepare_instance(
    root: &Path,
    buffer_kb_per_cpu: u64,
    user_faults: bool,
) -> Result<Ready, TraceError> {
    let instance = Instance::create(root, "")?;
    instance.set("tracing_on", "0")?;
    // The clock first: changing it (where it must be) empties the buffers,
    // which takes milliseconds once they are big.
    let clock = TraceClock::set_up(&instance)?;
    instance.set("buffer_size_kb", &buffer_kb_per_cpu.to_string())?;
    // Full buffers drop new events (counted) instead of overwriting old ones.
    instance.set("options/overwrite", "0")?;
    let decoder = Decoder::from_events_dir(&instance.events_dir())?;
    enable_events(&instance, &decoder, user_faults)?;
    Ok(Ready {
        instance,
        decoder,
        clock,
    })
}

/// [`prepare_instance`] on a thread of its own (or, without one, at
/// [`Preparing::wait`]). Dropping this without waiting waits for the thread
/// and removes what it set up.
struct Preparing {
    thread: Option<std::thread::JoinHandle<Result<Ready, TraceError>>>,
    root: PathBuf,
    buffer_kb_per_cpu: u64,
    user_faults: bool,
}

impl Preparing {
    fn start(root: &Path, options: &TraceOptions) -> Preparing {
        let (root, kb, user_faults) = (
            root.to_path_buf(),
            options.buffer_kb_per_cpu,
            options.user_faults,
        );
        let on_thread = root.clone();
        let thread = std::thread::Builder::new()
            .name("coldstart-prepare".into())
            .spawn(move || prepare_instance(&on_thread, kb, user_faults))
            .ok();
        Preparing {
            thread,
            root,
            buffer_kb_per_cpu: kb,
            user_faults,
        }
    }

    fn wait(mut self) -> Result<Ready, TraceError> {
        match self.thread.take().map(std::thread::JoinHandle::join) {
            Some(Ok(prepared)) => prepared,
            Some(Err(panic)) => std::panic::resume_unwind(panic),
            None => prepare_instance(&self.root, self.buffer_kb_per_cpu, self.user_faults),
        }
    }
}

impl Drop for Preparing {
    fn drop(&mut self) {
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// What the trace leaves behind in the kernel, torn down on threads of
/// their own while the trace is decoded and written: the instance and its
/// uprobes (freeing the buffers and the events takes about 50 ms), the name
/// recorder's programs and the open watcher's fanotify group (each waits
/// for an RCU grace period, about 20 ms). Apart, those waits overlap
/// instead of adding up. Dropping this waits for all of them.
struct Removal(Vec<std::thread::JoinHandle<()>>);

impl Removal {
    fn start(
        instance: Instance,
        uprobes: Option<Uprobes>,
        names: Option<Attachments>,
        opens: Option<OpenEvents>,
    ) -> Removal {
        let mut removal = Removal(Vec::new());
        removal.spawn(move || {
            drop(instance);
            // After the instance: probes enabled in it cannot be removed before.
            drop(uprobes);
        });
        if let Some(names) = names {
            removal.spawn(move || drop(names));
        }
        if let Some(opens) = opens {
            removal.spawn(move || drop(opens));
        }
        removal
    }

    /// Runs `remove` on a thread, or here when no thread can be started
    /// (the closure is then dropped, which removes what it holds).
    fn spawn(&mut self, remove: impl FnOnce() + Send + 'static) {
        if let Ok(thread) = std::thread::Builder::new()
            .name("coldstart-remove".into())
            .spawn(remove)
        {
            self.0.push(thread);
        }
    }
}

impl Drop for Removal {
    fn drop(&mut self) {
        for thread in self.0.drain(..) {
            let _ = thread.join();
        }
    }
}

/// What a finished [`Tracer`] captured.
struct Captured {
    /// Held until the trace is written: see [`Removal`].
    _removing: Removal,
    buffers: Vec<(u32, Vec<u8>)>,
    trace_bytes: u64,
    lost: Vec<LostEvents>,
    opens: HashMap<Inode, SeenFile>,
    names: Option<Recorded>,
    subvolumes: Option<Subvolumes>,
    decoder: Decoder,
    header: HeaderPage,
    placement: Placement,
}

impl Tracer {
    /// Sets up the instance (tracing still off), then starts the open
    /// watcher and the buffer readers.
    fn start(
        root: &Path,
        options: &TraceOptions,
        preparing: Preparing,
        loader_probes: Result<&Option<LoaderProbes>, &NoProbes>,
        stage: &mut impl FnMut(Stage),
    ) -> Result<Tracer, TraceError> {
        // While the instance is being set up: these need nothing of it.
        let watcher = start_open_watcher(stage);
        let names = start_name_recorder(root, stage);
        let subvolumes = start_subvolume_recorder(stage);
        let Ready {
            instance,
            mut decoder,
            clock,
        } = preparing.wait()?;
        let (uprobes, loader_hit_ns) = match loader_probes {
            Ok(Some(probes)) => {
                let calibration = HitCalibration::before(probes);
                let uprobes = enable_loader_probes(root, &instance, &mut decoder, probes)?;
                let hit_ns = calibration.after(stage);
                (Some(uprobes), hit_ns)
            }
            _ => (None, None),
        };
        let header = HeaderPage::read(&instance.events_dir())
            .or_else(|_| HeaderPage::read(&root.join("events")))?;
        let subbuf_size = header.data_offset + header.data_size;
        let readers = Readers::start(&instance, subbuf_size, options.buffer_kb_per_cpu)?;
        Ok(Tracer {
            readers,
            watcher,
            names,
            subvolumes,
            instance,
            uprobes,
            loader_hit_ns,
            decoder,
            header,
            clock,
        })
    }

    /// Collects the buffers, the lost-event counts and the opens, and
    /// removes the instance.
    fn finish(self) -> Captured {
        let Tracer {
            readers,
            watcher,
            names,
            subvolumes,
            instance,
            uprobes,
            decoder,
            header,
            clock,
            ..
        } = self;
        let (buffers, trace_bytes, lost) = drain_and_count(readers, &instance);
        let placement = clock.placement();
        // Its marker file open would keep the instance from being removed.
        drop(clock);
        let (names, attachments) = names.map(NameRecorder::finish_apart).unzip();
        let subvolumes = subvolumes.map(SubvolumeRecorder::finish);
        let (opens, group) = watcher.map(OpenWatcher::finish_apart).unzip();
        let removing = Removal::start(instance, uprobes, attachments, group.flatten());
        Captured {
            _removing: removing,
            buffers,
            trace_bytes,
            lost,
            opens: opens.unwrap_or_default(),
            names,
            subvolumes,
            decoder,
            header,
            placement,
        }
    }
}

/// Each CPU's raw buffer, as the readers moved it out of the kernel.
pub(crate) type CpuBuffers = Vec<(u32, Vec<u8>)>;

/// Stops the readers and collects each CPU's buffer, their total bytes and
/// the events each CPU's buffer lost.
pub(crate) fn drain_and_count(
    readers: Readers,
    instance: &Instance,
) -> (CpuBuffers, u64, Vec<LostEvents>) {
    let buffers = readers.finish();
    let trace_bytes = buffers.iter().map(|(_, b)| b.len() as u64).sum();
    let lost = instance
        .cpus()
        .iter()
        .map(|&cpu| LostEvents {
            cpu,
            events: instance.lost_events(cpu).unwrap_or(0),
        })
        .collect();
    (buffers, trace_bytes, lost)
}

/// Enables every event the decoder knows (user faults only when asked
/// for); fails naming the first required event this kernel lacks.
pub(crate) fn enable_events(
    instance: &Instance,
    decoder: &Decoder,
    user_faults: bool,
) -> Result<(), TraceError> {
    check_required_events(decoder)?;
    enable_events_where(instance, decoder, |event| {
        user_faults || event != USER_FAULTS
    })
}

/// Fails when the kernel lacks an event every trace needs.
pub(crate) fn check_required_events(decoder: &Decoder) -> Result<(), TraceError> {
    let enabled = decoder.enabled_events();
    for required in REQUIRED_EVENTS {
        if !enabled.iter().any(|e| e == required) {
            return Err(TraceError::MissingEvent(required.to_string()));
        }
    }
    Ok(())
}

/// Enables, in `instance`, the events the decoder understands that `which`
/// picks.
pub(crate) fn enable_events_where(
    instance: &Instance,
    decoder: &Decoder,
    which: impl Fn(&str) -> bool,
) -> Result<(), TraceError> {
    for event in decoder.enabled_events() {
        if which(event) {
            instance.enable(event)?;
        }
    }
    Ok(())
}

/// Defines the loader's uprobes in this process's group, teaches the
/// decoder their formats and enables them in the instance only.
fn enable_loader_probes(
    root: &Path,
    instance: &Instance,
    decoder: &mut Decoder,
    probes: &LoaderProbes,
) -> Result<Uprobes, TraceError> {
    let group = uprobes::group_name("");
    let definitions: Vec<(&'static str, String)> = probes
        .points
        .iter()
        .map(|p| (p.probe.name(), p.definition(&group, &probes.ld_so)))
        .collect();
    let defined = Uprobes::define(root, &group, &definitions)?;
    let kinds: Vec<_> = probes.points.iter().map(|p| p.probe).collect();
    decoder.add_loader_probes(&instance.events_dir(), &group, &kinds)?;
    for event in defined.events() {
        instance.enable(&event)?;
    }
    Ok(defined)
}

/// Times a loader call in this process without the probes, then with
/// them (see `loader::calibrate`).
struct HitCalibration {
    hits: u64,
    without_ns: Option<f64>,
    /// Why the cost cannot be measured, when it cannot.
    unmeasurable: Option<String>,
}

impl HitCalibration {
    fn before(probes: &LoaderProbes) -> HitCalibration {
        let hits = calibrate::hits_per_call(probes);
        let unmeasurable = if !calibrate::runs_under(&probes.ld_so) {
            Some(format!(
                "coldstart does not run under {}",
                probes.ld_so.display()
            ))
        } else if hits == 0 {
            Some("neither dlopen nor the loads it makes are probed".to_string())
        } else {
            None
        };
        let without_ns = unmeasurable.is_none().then(calibrate::call_ns).flatten();
        HitCalibration {
            hits,
            without_ns,
            unmeasurable,
        }
    }

    /// The cost of one hit, the probes now on; a warning when unknown.
    fn after(self, stage: &mut impl FnMut(Stage)) -> Option<u64> {
        let measured = self
            .without_ns
            .zip(calibrate::call_ns())
            .and_then(|(without, with)| calibrate::hit_ns(without, with, self.hits));
        if measured.is_none() {
            let why = self
                .unmeasurable
                .unwrap_or_else(|| "a probed dlopen was not slower than an unprobed one".into());
            stage(Stage::Warning(format!(
                "loader trace: the cost of a probe hit was not measured ({why}): \
                 loader times are reported as traced, probes' cost included"
            )));
        }
        measured
    }
}

/// The open watcher, or `None` with a warning: paths then come from
/// /proc/PID/maps alone.
fn start_open_watcher(stage: &mut impl FnMut(Stage)) -> Option<OpenWatcher> {
    match OpenWatcher::start() {
        Ok(watcher) => Some(watcher),
        Err(e) => {
            stage(Stage::Warning(format!(
                "cannot watch file opens ({e}); paths will come from /proc/PID/maps only"
            )));
            None
        }
    }
}

/// The btrfs subvolume recorder, `None` when no btrfs is mounted, or with
/// a warning when it cannot run: files on btrfs then stay unresolved.
fn start_subvolume_recorder(stage: &mut impl FnMut(Stage)) -> Option<SubvolumeRecorder> {
    match SubvolumeRecorder::start() {
        Ok(recorder) => recorder,
        Err(e) => {
            stage(Stage::Warning(format!(
                "cannot tell btrfs subvolumes apart ({e}); files on btrfs will not be named"
            )));
            None
        }
    }
}

/// The name recorder, or `None` with a warning: the plan then warms only
/// the inodes the trace saw loaded.
fn start_name_recorder(root: &Path, stage: &mut impl FnMut(Stage)) -> Option<NameRecorder> {
    match NameRecorder::start(root) {
        Ok(recorder) => Some(recorder),
        Err(e) => {
            stage(Stage::Warning(format!(
                "cannot record the names the program looks up ({e}); \
                 plans will warm only the inodes the trace saw read"
            )));
            None
        }
    }
}

/// Adds the tree's recorded names to the batch (times made relative to
/// `t0`) and counts them.
fn add_path_lookups(batch: &mut Batch, recorded: Recorded, t0: i64) -> LookupCounts {
    let tree: HashSet<i32> = batch
        .processes
        .iter()
        .filter(|p| p.in_tree)
        .map(|p| p.pid)
        .collect();
    let mut counts = LookupCounts {
        dropped: recorded.dropped,
        ..LookupCounts::default()
    };
    let mut lookups: Vec<PathLookup> = Vec::new();
    for name in recorded.names.into_iter().filter(|n| tree.contains(&n.tid)) {
        counts.recorded += 1;
        lookups.push(PathLookup {
            t_ns: name.t_ns - t0,
            pid: name.tid,
            call: name.call.to_string(),
            path: Ok(name.path),
        });
    }
    for missed in recorded
        .missed
        .into_iter()
        .filter(|m| tree.contains(&m.tid))
    {
        match missed.why {
            LookupMissed::Unreadable => counts.unreadable += 1,
            LookupMissed::Unresolved => counts.unresolved += 1,
            LookupMissed::TooLong | LookupMissed::NotUtf8 => counts.other += 1,
        }
        lookups.push(PathLookup {
            t_ns: missed.t_ns - t0,
            pid: missed.tid,
            call: missed.call.to_string(),
            path: Err(missed.why),
        });
    }
    lookups.sort_by_key(|l| l.t_ns);
    batch.path_lookups = lookups;
    counts
}

/// What the profile records about the run before it starts.
fn run_start(options: &TraceOptions, page_size: u64) -> RunStart {
    RunStart {
        argv: options
            .launch
            .argv
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect(),
        cwd: std::env::current_dir()
            .map(|d| d.display().to_string())
            .unwrap_or_default(),
        cache_mode: options.cache,
        started_at_unix_ns: unix_now_ns(),
        kernel: proc::kernel_release(),
        page_size,
        read_ahead_kb: options.read_ahead_kb.or_else(|| {
            options
                .launch
                .argv
                .first()
                .and_then(|p| read_ahead_kb_for(Path::new(p)))
        }),
        fault_around_bytes: std::fs::read_to_string("/sys/kernel/debug/fault_around_bytes")
            .ok()
            .and_then(|t| t.trim().parse().ok()),
        uid: options.launch.identity.uid,
        gid: options.launch.identity.gid,
        tool_version: env!("CARGO_PKG_VERSION").to_string(),
    }
}

/// Turns tracing on and lets the prepared program exec. If it cannot
/// start, tracing stops and the run is ended as failed.
fn launch_traced(
    profile: &mut Profile,
    run: RunId,
    tracer: &Tracer,
    prepared: launch::Prepared,
    options: &TraceOptions,
) -> Result<Launched, TraceError> {
    tracer.instance.set("tracing_on", "1")?;
    // Written before the program may run: it then costs the start nothing.
    tracer.clock.mark()?;
    match prepared.start() {
        Ok(launched) => Ok(launched),
        Err(e) => {
            tracer.instance.set("tracing_on", "0")?;
            let _ = profile.end_run(
                run,
                &RunEnd {
                    ended_ns: 0,
                    end_reason: EndReason::Failed,
                    exit_code: None,
                    exit_signal: None,
                    root_pid: None,
                },
            );
            Err(launch_error(options, e))
        }
    }
}

/// Waits for startup to end, showing progress, then stops tracing: what
/// happens while the tree is torn down is not startup. With user faults,
/// the tree's file mappings are sampled meanwhile to resolve them.
fn wait_for_startup(
    launched: &Launched,
    tracer: &Tracer,
    options: &TraceOptions,
    interrupted: &AtomicBool,
    mut progress: impl FnMut(Progress),
) -> Result<(Ending, Mappings), TraceError> {
    let t0 = launched.t0_ns;
    // User faults name addresses; the tree's file mappings, sampled while
    // it runs, turn them into file pages.
    let mut mappings = Mappings::default();
    let ending: Ending = launched.wait_for_end(interrupted, || {
        // Reading /proc/PID/maps takes each process's mmap lock: only
        // worth it when user faults need resolving.
        if options.user_faults {
            mappings.sample(&launched.members());
        }
        progress(Progress {
            elapsed_ns: monotonic_ns() - t0,
            trace_bytes: tracer.readers.bytes(),
        })
    });
    // The first mark places the trace; this one only refines the rate.
    let _ = tracer.clock.mark();
    tracer.instance.set("tracing_on", "0")?;
    if options.user_faults {
        mappings.sample(&launched.members());
    }
    Ok((ending, mappings))
}

/// How the run ended, on the run's clock, as the profile records it.
fn run_end(ending: Ending, exit: launch::Exit, t0: i64, root_pid: i32) -> RunEnd {
    RunEnd {
        ended_ns: ending.at_ns - t0,
        end_reason: recorded_reason(ending.reason),
        exit_code: exit.code,
        exit_signal: exit.signal,
        root_pid: Some(root_pid),
    }
}

/// The launcher's reason, as a profile names it.
fn recorded_reason(reason: launch::EndReason) -> EndReason {
    match reason {
        launch::EndReason::Exited => EndReason::Exited,
        launch::EndReason::Signaled => EndReason::Signaled,
        launch::EndReason::ReadyRegex => EndReason::ReadyRegex,
        launch::EndReason::ReadyFile => EndReason::ReadyFile,
        launch::EndReason::Timeout => EndReason::Timeout,
        launch::EndReason::Interrupted => EndReason::Interrupted,
    }
}

/// The run's rows with the lost-event counts and the "end" mark, plus a
/// "ready" mark at the same time when startup reached ready.
fn with_end_marks(mut batch: Batch, lost: Vec<LostEvents>, end: &RunEnd) -> Batch {
    batch.lost = lost;
    batch.marks.push(Mark {
        t_ns: end.ended_ns,
        name: "end".into(),
    });
    if end.end_reason.is_ready() {
        batch.marks.push(Mark {
            t_ns: end.ended_ns,
            name: "ready".into(),
        });
    }
    batch
}

fn launch_error(options: &TraceOptions, error: std::io::Error) -> TraceError {
    TraceError::Launch {
        program: options
            .launch
            .argv
            .first()
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default(),
        error,
    }
}

/// One thread per CPU moving raw sub-buffers out of the kernel while the
/// program runs, so a small kernel buffer suffices for a long start.
pub(crate) struct Readers {
    stop: Arc<AtomicBool>,
    bytes: Arc<AtomicU64>,
    threads: Vec<(u32, JoinHandle<Vec<u8>>)>,
}

impl Readers {
    pub(crate) fn start(
        instance: &Instance,
        subbuf_size: usize,
        buffer_kb: u64,
    ) -> Result<Readers, TraceError> {
        // Wake often enough that a CPU writing 40 MB/s of events (several
        // times a browser's cold start) fills a quarter of its buffer at
        // most, and seldom enough not to disturb the program: 100 ms with
        // the default 16 MiB.
        let period = Duration::from_millis((buffer_kb / 160).clamp(5, 100));
        let stop = Arc::new(AtomicBool::new(false));
        let bytes = Arc::new(AtomicU64::new(0));
        let mut threads = Vec::new();
        for &cpu in instance.cpus() {
            let mut file: File = instance.open_cpu(cpu)?;
            let stop = Arc::clone(&stop);
            let bytes = Arc::clone(&bytes);
            let thread = std::thread::Builder::new()
                .name(format!("coldstart-cpu{cpu}"))
                .spawn(move || {
                    let mut out = Vec::new();
                    loop {
                        let done = stop.load(Ordering::Acquire);
                        if let Ok(n) = instance::drain(&mut file, subbuf_size, &mut out) {
                            bytes.fetch_add(n as u64, Ordering::Relaxed);
                        }
                        if done {
                            return out;
                        }
                        std::thread::park_timeout(period);
                    }
                })
                .map_err(TraceError::Thread)?;
            threads.push((cpu, thread));
        }
        Ok(Readers {
            stop,
            bytes,
            threads,
        })
    }

    fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    /// Drains what is left and returns each CPU's bytes.
    pub(crate) fn finish(mut self) -> Vec<(u32, Vec<u8>)> {
        self.stop.store(true, Ordering::Release);
        for (_, thread) in &self.threads {
            thread.thread().unpark();
        }
        self.threads
            .drain(..)
            .filter_map(|(cpu, t)| Some((cpu, t.join().ok()?)))
            .collect()
    }
}

impl Drop for Readers {
    fn drop(&mut self) {
        // Buffer files must be closed before the instance can be removed.
        self.stop.store(true, Ordering::Release);
        for (_, thread) in self.threads.drain(..) {
            thread.thread().unpark();
            let _ = thread.join();
        }
    }
}

/// Decodes each CPU's raw sub-buffers (as read from trace_pipe_raw) into
/// events on CLOCK_MONOTONIC (`placement` says how), merged in time order.
/// With `subvolumes`, events of files on btrfs are given their subvolume's
/// device, CPU by CPU.
pub fn decode_buffers(
    buffers: &[(u32, Vec<u8>)],
    header: &HeaderPage,
    decoder: &Decoder,
    subvolumes: Option<&Subvolumes>,
    placement: &Placement,
) -> Result<(Vec<TraceEvent>, Placed), TraceError> {
    let mut events = Vec::new();
    let mut marks = Vec::new();
    let mut by_cpu = Vec::with_capacity(buffers.len());
    for (cpu, buffer) in buffers {
        let first = events.len();
        ringbuf::decode_stream(buffer, header, |ts, payload| {
            if let Some(mark) = placement.mark_in(payload) {
                marks.push((mark, ts));
            } else if let Some(event) = decoder.decode(ts, payload) {
                events.push(event);
            }
        })
        .map_err(|source| TraceError::Buffer { cpu: *cpu, source })?;
        by_cpu.push((*cpu, first..events.len()));
    }
    // On CLOCK_MONOTONIC before the subvolumes are matched: the subvolume
    // recorder's times are on it.
    let map = placement.map(&marks)?;
    for event in &mut events {
        event.ts = map.place(event.ts);
    }
    let mut placed = Placed::default();
    if let Some(subvolumes) = subvolumes {
        for (cpu, range) in by_cpu {
            let on_cpu = subvolumes.place(cpu, &mut events[range]);
            placed.placed += on_cpu.placed;
            placed.metadata += on_cpu.metadata;
            placed.unplaced += on_cpu.unplaced;
        }
    }
    // Each CPU's stream is in order already: a stable sort merges them fast.
    events.sort_by_key(|e| e.ts);
    Ok((events, placed))
}

/// Snapshots of the tree's file mappings per process, newest last.
#[derive(Default)]
pub struct Mappings {
    by_pid: HashMap<i32, Vec<Vec<FileMapping>>>,
}

impl Mappings {
    fn sample(&mut self, pids: &[i32]) {
        for &pid in pids {
            let mut now = paths::file_mappings(pid);
            if now.is_empty() {
                continue;
            }
            now.sort_unstable_by_key(|m| m.start);
            let history = self.by_pid.entry(pid).or_default();
            if history.last() != Some(&now) {
                history.push(now);
            }
        }
    }

    /// The file and offset mapped at `address` in process `pid`, from the
    /// newest snapshot that maps it.
    fn resolve(&self, pid: i32, address: u64) -> Option<(Inode, u64)> {
        self.by_pid.get(&pid)?.iter().rev().find_map(|snapshot| {
            let i = snapshot.partition_point(|m| m.start <= address);
            let m = snapshot.get(i.checked_sub(1)?)?;
            (address < m.end).then(|| (m.file, m.offset + (address - m.start)))
        })
    }
}

/// A run's rows, ready for [`Profile::write`].
pub struct Assembled {
    pub batch: Batch,
    pub pages_read: u64,
    pub pages_read_by_tree: u64,
}

/// Turns decoded events into profile rows: the process tree, the files
/// with their exact paths, and page events on the run's clock.
///
/// `t0` is the launch time on the trace clock, `filesystems` the mounts
/// that tell what each row holds, `opens` what the open watcher saw, `mapped` paths found in /proc/PID/maps, `mappings` the
/// tree's mappings for user faults. `loader` is `Some` when the loader
/// was probed, saying whether symbol lookups were.
#[allow(clippy::too_many_arguments)]
pub fn assemble(
    events: &[TraceEvent],
    t0: i64,
    root_pid: i32,
    filesystems: &Filesystems,
    opens: &HashMap<Inode, SeenFile>,
    mapped: &HashMap<Inode, String>,
    mappings: &Mappings,
    page_size: u64,
    loader: Option<bool>,
) -> Assembled {
    let mut run = RunAssembly {
        t0,
        root_pid,
        page_size,
        filesystems,
        opens,
        mapped,
        mappings,
        processes: HashMap::new(),
        in_tree: HashSet::new(),
        tgid_of: HashMap::from([(root_pid, root_pid)]),
        files: Vec::new(),
        file_index: HashMap::new(),
        page_events: Vec::new(),
        readahead: Vec::new(),
        asking: HashMap::new(),
        inode_loads: Vec::new(),
        loader: loader.map(SpanAssembly::new),
        pages_read: 0,
        pages_read_by_tree: 0,
    };
    for event in events {
        run.add(event);
    }
    run.finish()
}

/// A run's rows as its events are added in time order.
struct RunAssembly<'a> {
    t0: i64,
    root_pid: i32,
    page_size: u64,
    filesystems: &'a Filesystems,
    opens: &'a HashMap<Inode, SeenFile>,
    mapped: &'a HashMap<Inode, String>,
    mappings: &'a Mappings,
    /// The process tree, in event order: the root, then whatever a member
    /// creates. A task's process (tgid) is itself unless it is a thread.
    processes: HashMap<i32, Process>,
    /// The root joins the tree at its exec: before that it is coldstart's
    /// own fork, touching coldstart's pages, not the program's.
    in_tree: HashSet<i32>,
    tgid_of: HashMap<i32, i32>,
    files: Vec<NewFile>,
    file_index: HashMap<FileKey, usize>,
    page_events: Vec<PageEvent>,
    readahead: Vec<Readahead>,
    /// Tasks of the tree inside a call asking the kernel to read ahead,
    /// with the `readahead` row of the pages that call brought in last.
    asking: HashMap<i32, Option<usize>>,
    /// The tree's lookups that read an inode table block.
    inode_loads: Vec<InodeLoad>,
    /// The loader's spans, when its probes were on.
    loader: Option<SpanAssembly>,
    pages_read: u64,
    pages_read_by_tree: u64,
}

impl RunAssembly<'_> {
    fn add(&mut self, event: &TraceEvent) {
        let t_ns = event.ts as i64 - self.t0;
        let tid = event.tid;
        match &event.kind {
            EventKind::PageCacheAdd { file, index, order } => {
                let npages = 1u64 << (*order).min(20);
                self.pages_read += npages;
                if self.in_tree.contains(&tid) {
                    self.pages_read_by_tree += npages;
                }
                self.add_pages(t_ns, tid, *file, *index, npages, PageEventKind::Read);
                if self.asking.contains_key(&tid) {
                    self.add_asked(t_ns, tid, *file, *index, npages);
                }
            }
            EventKind::PageCacheDelete { file, index, order } => {
                let npages = 1u64 << (*order).min(20);
                self.add_pages(t_ns, tid, *file, *index, npages, PageEventKind::Evict);
            }
            EventKind::Fault { file, index } => {
                self.add_pages(t_ns, tid, *file, *index, 1, PageEventKind::Fault);
            }
            EventKind::MapPages { file, first, last } => {
                let n = last.saturating_sub(*first) + 1;
                self.add_pages(t_ns, tid, *file, *first, n, PageEventKind::Map);
            }
            EventKind::GetPages { file, first, last } => {
                let n = last.saturating_sub(*first) + 1;
                self.add_pages(t_ns, tid, *file, *first, n, PageEventKind::Access);
            }
            EventKind::Readahead {
                kind,
                file,
                index,
                size,
                async_size,
                ra_pages,
                mmap_miss,
                prev_pos,
                req_count,
                ..
            } => {
                let file_id = self.file_id(*file);
                self.readahead.push(Readahead {
                    t_ns,
                    pid: tid,
                    file_id,
                    kind: readahead_kind(*kind),
                    page: *index,
                    size: u64::from(*size),
                    async_size: u64::from(*async_size),
                    ra_pages: u64::from(*ra_pages),
                    mmap_miss: mmap_miss.map(u64::from),
                    prev_pos: *prev_pos,
                    req_count: *req_count,
                });
            }
            EventKind::NewTask {
                pid,
                comm,
                clone_flags,
            } => self.add_task(t_ns, tid, *pid, comm, *clone_flags),
            EventKind::Exec {
                pid,
                old_pid,
                filename,
            } => {
                self.add_exec(t_ns, *pid, *old_pid, filename);
                if let Some(loader) = &mut self.loader {
                    loader.exec(*pid, t_ns, filename);
                }
            }
            EventKind::Loader(hit) => {
                // The probes fire in every process on the machine.
                if self.in_tree.contains(&tid)
                    && let Some(loader) = &mut self.loader
                {
                    loader.add(tid, t_ns, hit);
                }
            }
            EventKind::UserFault { address } => self.add_user_fault(t_ns, tid, *address),
            EventKind::InodeLoad { file } => {
                // Other programs' lookups are not the start's.
                if self.in_tree.contains(&tid) {
                    let file_id = self.file_id(*file);
                    self.inode_loads.push(InodeLoad {
                        t_ns,
                        pid: tid,
                        file_id,
                    });
                }
            }
            EventKind::AskStart => {
                if self.in_tree.contains(&tid) {
                    self.asking.insert(tid, None);
                }
            }
            EventKind::AskEnd => {
                self.asking.remove(&tid);
            }
            EventKind::Exit { pid, comm, .. } => {
                let p = self.process(*pid);
                p.t_end_ns = Some(t_ns);
                p.comm.get_or_insert_with(|| comm.clone());
            }
        }
    }

    /// The process row of task `pid`, created empty when first seen.
    fn process(&mut self, pid: i32) -> &mut Process {
        self.processes.entry(pid).or_insert_with(|| Process {
            pid,
            ppid: None,
            tgid: None,
            comm: None,
            exe: None,
            t_start_ns: None,
            t_end_ns: None,
            in_tree: false,
        })
    }

    /// The batch id of a file, its row made on first sight.
    fn file_id(&mut self, key: FileKey) -> i64 {
        let next = self.files.len();
        let index = *self.file_index.entry(key).or_insert_with(|| {
            self.files
                .push(new_file(key, self.filesystems, self.opens, self.mapped));
            next
        });
        Batch::batch_file_id(index)
    }

    /// Pages that entered the cache during task `pid`'s call asking for
    /// them: they extend the call's last row when they follow it in the
    /// same file, else start a row.
    fn add_asked(&mut self, t_ns: i64, pid: i32, file: FileKey, page: u64, npages: u64) {
        let file_id = self.file_id(file);
        let last = self.asking.get(&pid).copied().flatten();
        if let Some(row) = last.and_then(|i| self.readahead.get_mut(i))
            && row.file_id == file_id
            && row.page.saturating_add(row.size) == page
        {
            row.size = row.size.saturating_add(npages);
            return;
        }
        self.asking.insert(pid, Some(self.readahead.len()));
        self.readahead.push(Readahead {
            t_ns,
            pid,
            file_id,
            kind: ReadaheadKind::Asked,
            page,
            size: npages,
            async_size: 0,
            ra_pages: 0,
            mmap_miss: None,
            prev_pos: None,
            req_count: None,
        });
    }

    fn add_pages(
        &mut self,
        t_ns: i64,
        pid: i32,
        file: FileKey,
        page: u64,
        npages: u64,
        kind: PageEventKind,
    ) {
        let file_id = self.file_id(file);
        self.page_events.push(PageEvent {
            t_ns,
            pid,
            file_id,
            page,
            npages,
            kind,
        });
    }

    /// Task `pid` created by `parent`: a thread shares its creator's
    /// process, and children of the tree are in the tree.
    fn add_task(&mut self, t_ns: i64, parent: i32, pid: i32, comm: &str, clone_flags: u64) {
        let is_thread = clone_flags & libc::CLONE_THREAD as u64 != 0;
        let tgid = if is_thread {
            self.tgid_of.get(&parent).copied().unwrap_or(parent)
        } else {
            pid
        };
        self.tgid_of.insert(pid, tgid);
        if self.in_tree.contains(&parent) {
            self.in_tree.insert(pid);
        }
        let p = self.process(pid);
        p.ppid = Some(parent);
        p.tgid = Some(tgid);
        p.comm = Some(comm.to_string());
        p.t_start_ns = Some(t_ns);
    }

    fn add_exec(&mut self, t_ns: i64, pid: i32, old_pid: i32, filename: &str) {
        // A thread that execs takes over its process's id.
        if self.in_tree.contains(&old_pid) || pid == self.root_pid {
            self.in_tree.insert(pid);
        }
        let p = self.process(pid);
        p.exe = Some(filename.to_string());
        p.comm = Path::new(filename)
            .file_name()
            .map(|n| n.to_string_lossy().chars().take(15).collect());
        p.t_start_ns.get_or_insert(t_ns);
    }

    /// A user fault of the tree, as a touch of the file page mapped at
    /// the address (faults on anything else are dropped).
    fn add_user_fault(&mut self, t_ns: i64, tid: i32, address: u64) {
        let tgid = self.tgid_of.get(&tid).copied().unwrap_or(tid);
        if self.in_tree.contains(&tid)
            && let Some((file, offset)) = self.mappings.resolve(tgid, address)
        {
            let key = FileKey {
                dev: user_dev_to_kernel(file.dev),
                ino: file.ino,
            };
            let page = offset / self.page_size;
            self.add_pages(t_ns, tid, key, page, 1, PageEventKind::Touch);
        }
    }

    /// The rows, with what only the whole run tells: which files the tree
    /// opened, which processes are in it.
    fn finish(mut self) -> Assembled {
        // Tasks seen only as the source of page events.
        let sources: Vec<i32> = self.page_events.iter().map(|e| e.pid).collect();
        for pid in sources {
            self.process(pid);
        }
        let loader_spans = match self.loader.take() {
            Some(loader) => self.loader_files(loader.finish()),
            None => Vec::new(),
        };
        self.resolve_loaded_inodes();
        let tree_tgids: HashSet<i32> = self
            .in_tree
            .iter()
            .map(|pid| self.tgid_of.get(pid).copied().unwrap_or(*pid))
            .collect();
        for file in &mut self.files {
            file.opened_by_tree = self
                .opens
                .get(&Inode {
                    dev: file.dev,
                    ino: file.ino,
                })
                .is_some_and(|seen| seen.openers.iter().any(|p| tree_tgids.contains(p)));
        }
        let mut processes: Vec<Process> = self
            .processes
            .into_values()
            .map(|mut p| {
                p.in_tree = self.in_tree.contains(&p.pid);
                if p.tgid.is_none() {
                    p.tgid = self.tgid_of.get(&p.pid).copied();
                }
                if p.comm.is_none() {
                    p.comm = proc::comm(p.pid);
                }
                p
            })
            .collect();
        processes.sort_by_key(|p| p.pid);
        Assembled {
            batch: Batch {
                files: self.files,
                processes,
                page_events: self.page_events,
                readahead: self.readahead,
                marks: Vec::new(),
                lost: Vec::new(),
                loader_spans,
                inode_loads: self.inode_loads,
                path_lookups: Vec::new(),
            },
            pages_read: self.pages_read,
            pages_read_by_tree: self.pages_read_by_tree,
        }
    }
}

impl RunAssembly<'_> {
    /// Inodes the tree's lookups loaded are mostly directories, which
    /// nobody opens or maps: their paths come from file handles.
    fn resolve_loaded_inodes(&mut self) {
        let mut resolver = None;
        for load in &self.inode_loads {
            let Some(file) = Batch::batch_index(load.file_id).and_then(|i| self.files.get_mut(i))
            else {
                continue;
            };
            if file.path.is_some() {
                continue;
            }
            let resolver = resolver.get_or_insert_with(paths::HandleResolver::mounted);
            let Some(path) = resolver.path(Inode {
                dev: file.dev,
                ino: file.ino,
            }) else {
                continue;
            };
            file.build_id = build_id(Path::new(&path));
            name_from_disk(file, path);
        }
    }

    /// Names each span's file from the path the span assembly found for
    /// it (the main program's is the file its task had exec'd when the
    /// span began). Files not yet in the run are added.
    fn loader_files(&mut self, spans: Vec<(LoaderSpan, Option<String>)>) -> Vec<LoaderSpan> {
        let mut by_path: HashMap<String, Option<i64>> = HashMap::new();
        let mut named = Vec::with_capacity(spans.len());
        for (mut span, path) in spans {
            let Some(path) = path else {
                named.push(span);
                continue;
            };
            let id = match by_path.get(&path) {
                Some(id) => *id,
                None => {
                    let id = paths::identity_of(Path::new(&path)).map(|Inode { dev, ino }| {
                        self.file_id(FileKey {
                            dev: user_dev_to_kernel(dev),
                            ino,
                        })
                    });
                    by_path.insert(path, id);
                    id
                }
            };
            span.file_id = id;
            named.push(span);
        }
        named
    }
}

fn readahead_kind(kind: crate::tracefs::events::ReadaheadKind) -> ReadaheadKind {
    match kind {
        crate::tracefs::events::ReadaheadKind::Sync => ReadaheadKind::Sync,
        crate::tracefs::events::ReadaheadKind::Async => ReadaheadKind::Async,
        crate::tracefs::events::ReadaheadKind::Order => ReadaheadKind::Order,
    }
}

fn new_file(
    key: FileKey,
    filesystems: &Filesystems,
    opens: &HashMap<Inode, SeenFile>,
    mapped: &HashMap<Inode, String>,
) -> NewFile {
    let identity = Inode {
        dev: kernel_dev_to_user(key.dev),
        ino: key.ino,
    };
    let mut file = NewFile {
        dev: identity.dev,
        ino: identity.ino,
        path: None,
        size: None,
        mtime_ns: None,
        build_id: None,
        opened_by_tree: false,
        kind: None,
        opened_as: None,
        note: None,
    };
    let mut unreachable = None;
    if let Some(seen) = opens.get(&identity).filter(|seen| seen.unreachable) {
        // Opened in another mount namespace, through mounts none of ours
        // reaches: there is no path here to give.
        file.size = Some(seen.size);
        file.mtime_ns = Some(seen.mtime_ns);
        file.opened_as = seen.opened_as.clone();
        unreachable = Some(format!(
            "opened as {} in another mount namespace; no mount here reaches it",
            seen.path
        ));
    } else if let Some(seen) = opens.get(&identity) {
        file.path = Some(seen.path.clone());
        file.size = Some(seen.size);
        file.mtime_ns = Some(seen.mtime_ns);
        file.opened_as = seen.opened_as.clone();
    } else if let Some(path) = mapped.get(&identity) {
        // Trust a maps path only while it still names the same inode.
        if paths::identity_of(Path::new(path)) == Some(identity) {
            name_from_disk(&mut file, path.clone());
        }
    }
    if let Some(path) = &file.path {
        file.build_id = build_id(Path::new(path));
    }
    let (kind, note) = filesystems.classify(identity, file.path.is_some());
    file.kind = Some(kind);
    file.note = unreachable.or(note);
    file
}

/// Keeps, of each fault-around mapping, the pages that can have been
/// mapped. The kernel's `mm_filemap_map_pages` event gives the range
/// fault-around tried (up to `fault_around_bytes` around the fault), but
/// only the pages cached then are mapped: a page of the range counts when
/// the start read it earlier in the trace, or when it was not read during
/// the trace and is cached now (it was cached before the start, or read by
/// someone else, such as the service's own prefetch threads, which the
/// start's trace does not see).
pub(crate) fn clip_mappings(batch: &mut coldstart_profile::Batch) {
    use coldstart_profile::{Batch, PageEvent, PageEventKind};
    use std::collections::HashMap;
    let mut first_read: HashMap<(i64, u64), i64> = HashMap::new();
    for e in batch
        .page_events
        .iter()
        .filter(|e| e.kind == PageEventKind::Read)
    {
        for page in e.page..e.page.saturating_add(e.npages) {
            first_read.entry((e.file_id, page)).or_insert(e.t_ns);
        }
    }
    let mut resident: HashMap<i64, Option<cache::ResidentPages>> = HashMap::new();
    let files = &batch.files;
    let mut clipped = Vec::with_capacity(batch.page_events.len());
    for e in batch.page_events.drain(..) {
        if e.kind != PageEventKind::Map {
            clipped.push(e);
            continue;
        }
        let now = resident.entry(e.file_id).or_insert_with(|| {
            let file = Batch::batch_index(e.file_id).and_then(|i| files.get(i))?;
            cache::resident_pages(std::path::Path::new(file.path.as_ref()?)).ok()
        });
        let mapped = |page: u64| match first_read.get(&(e.file_id, page)) {
            Some(&t) => t <= e.t_ns,
            None => now.as_ref().is_some_and(|r| r.contains(page)),
        };
        let mut run: Option<u64> = None;
        let end = e.page.saturating_add(e.npages);
        for page in e.page..=end {
            match (run, page < end && mapped(page)) {
                (None, true) => run = Some(page),
                (Some(start), false) => {
                    clipped.push(PageEvent {
                        page: start,
                        npages: page - start,
                        ..e
                    });
                    run = None;
                }
                _ => {}
            }
        }
    }
    batch.page_events = clipped;
}

/// Names `file` by `path`, found after the fact (not by its open), with
/// the size and modification time the path has now.
pub(crate) fn name_from_disk(file: &mut NewFile, path: String) {
    if let Ok(meta) = std::fs::symlink_metadata(&path) {
        use std::os::unix::fs::MetadataExt;
        file.size = Some(meta.size());
        file.mtime_ns = Some(coldstart_system::identity::mtime_ns(&meta));
    }
    file.path = Some(path);
}

pub(crate) fn unix_now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn launch_reasons_are_recorded_under_the_same_names() {
        use launch::EndReason as Launch;
        let expected = [
            (Launch::Exited, EndReason::Exited, "exited"),
            (Launch::Signaled, EndReason::Signaled, "signaled"),
            (Launch::ReadyRegex, EndReason::ReadyRegex, "ready-regex"),
            (Launch::ReadyFile, EndReason::ReadyFile, "ready-file"),
            (Launch::Timeout, EndReason::Timeout, "timeout"),
            (Launch::Interrupted, EndReason::Interrupted, "interrupted"),
        ];
        for (launched, recorded, name) in expected {
            assert_eq!(recorded_reason(launched), recorded);
            // Benchmarks report the launcher's name, profiles their own.
            assert_eq!(launched.as_str(), name);
            assert_eq!(recorded.as_str(), name);
        }
    }

    use coldstart_profile::FileKind;
    fn event(t_ns: i64, page: u64, npages: u64, kind: PageEventKind) -> PageEvent {
        PageEvent {
            t_ns,
            pid: 7,
            file_id: Batch::batch_file_id(0),
            page,
            npages,
            kind,
        }
    }

    #[test]
    fn a_mapping_keeps_only_the_pages_read_before_it() {
        // A file with no path: nothing is known cached but what the trace
        // saw read.
        let file = NewFile {
            dev: 1,
            ino: 2,
            path: None,
            size: None,
            mtime_ns: None,
            build_id: None,
            opened_by_tree: true,
            kind: Some(FileKind::File),
            opened_as: None,
            note: None,
        };
        let mut batch = Batch {
            files: vec![file],
            page_events: vec![
                event(10, 3, 2, PageEventKind::Read),
                event(15, 9, 1, PageEventKind::Fault),
                event(20, 0, 16, PageEventKind::Map),
                // Read after the mapping: it was not mapped by it.
                event(30, 8, 1, PageEventKind::Read),
                event(40, 6, 4, PageEventKind::Map),
            ],
            ..Batch::default()
        };
        clip_mappings(&mut batch);
        let left: Vec<(i64, u64, u64, PageEventKind)> = batch
            .page_events
            .iter()
            .map(|e| (e.t_ns, e.page, e.npages, e.kind))
            .collect();
        assert_eq!(
            left,
            [
                (10, 3, 2, PageEventKind::Read),
                (15, 9, 1, PageEventKind::Fault),
                (20, 3, 2, PageEventKind::Map),
                (30, 8, 1, PageEventKind::Read),
                (40, 8, 1, PageEventKind::Map),
            ]
        );
    }
}
