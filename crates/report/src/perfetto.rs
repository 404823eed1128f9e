//! `coldstart report --perfetto`: the run as a Chrome Trace Event JSON
//! file, which ui.perfetto.dev (and chrome://tracing) open, so a start can
//! be zoomed down to single reads and faults per task.
//!
//! Read requests are complete ("X") slices on the task that read; faults
//! are thread instants; cumulative MiB read is a counter per process;
//! `ready` is a global instant. Timestamps are µs since program start.
//!
//! The dynamic loader's spans (runs traced with `--loader`) are "X" slices
//! on the task that ran them, named after the phase and the object's file
//! name, so Perfetto shows ld.so's call structure: `start` around the
//! initial loads and relocations, each `load` around its `search` (around
//! the `open` attempts) and `map`, each `init` around its `initializer`s,
//! each `dlopen` around what it loaded. The jump to the entry is a thread
//! instant.
//!
//! Perfetto drops "X" slices that overlap without nesting on one thread,
//! so a task's overlapping requests go to extra tracks named after it
//! ("… overlapping reads #n"), with synthetic tids from [`LANE_TID_BASE`];
//! so does a request that starts or ends inside a loader span it does not
//! lie in. A loader span that never ended (ld.so unwound it with longjmp)
//! ends with the run: it is cut to end with the span around it, and says
//! so in its args.

use crate::chart::loader::object_name;
use coldstart_analyze::{FileTimeline, LoaderBand, ProcessInfo, ReadRequest, RunReport, Timeline};
use coldstart_profile::{LoaderPhase, PageEventKind};
use serde_json::{Value, json};
use std::cmp::Reverse;
use std::collections::{BTreeMap, HashMap};

/// First tid of the extra read tracks: above Linux's largest pid_max
/// (2^22), so they cannot collide with a real task.
pub const LANE_TID_BASE: i64 = 1 << 30;

fn us(ns: i64) -> f64 {
    ns as f64 / 1000.0
}

fn basename(path: &str) -> &str {
    path.rsplit('/').find(|s| !s.is_empty()).unwrap_or(path)
}

/// Names and process ids of the run's tasks.
struct Tasks<'a> {
    by_pid: HashMap<i32, &'a ProcessInfo>,
}

impl<'a> Tasks<'a> {
    fn new(processes: &'a [ProcessInfo]) -> Tasks<'a> {
        Tasks {
            by_pid: processes.iter().map(|p| (p.pid, p)).collect(),
        }
    }

    /// The process a task belongs to: its tgid when known.
    fn process_of(&self, pid: i32) -> i32 {
        self.by_pid.get(&pid).and_then(|p| p.tgid).unwrap_or(pid)
    }

    fn name(&self, pid: i32) -> String {
        match self.by_pid.get(&pid) {
            Some(p) => p
                .comm
                .clone()
                .or_else(|| p.exe.as_deref().map(|e| basename(e).to_string()))
                .unwrap_or_else(|| format!("pid {pid}")),
            None => format!("pid {pid}"),
        }
    }

    /// A process is named after its executable, else its leader's comm.
    fn process_name(&self, tgid: i32) -> String {
        match self.by_pid.get(&tgid) {
            Some(p) => p
                .exe
                .as_deref()
                .map(|e| basename(e).to_string())
                .or_else(|| p.comm.clone())
                .unwrap_or_else(|| format!("pid {tgid}")),
            None => format!("pid {tgid}"),
        }
    }
}

/// One loader span as a slice: its end cut to nest in the span around it.
struct LoaderSlice<'a> {
    band: &'a LoaderBand,
    end: i64,
    clipped: bool,
}

/// The loader's slices per task, outer spans first, and per task the
/// times at which one begins or ends (sorted), where a read request on the
/// same track must not start or end.
struct LoaderSlices<'a> {
    slices: Vec<LoaderSlice<'a>>,
    boundaries: HashMap<i32, Vec<i64>>,
}

impl<'a> LoaderSlices<'a> {
    fn new(bands: &'a [LoaderBand]) -> LoaderSlices<'a> {
        let mut by_task: BTreeMap<i32, Vec<&LoaderBand>> = BTreeMap::new();
        for band in bands.iter().filter(|b| b.phase != LoaderPhase::Entry) {
            by_task.entry(band.pid).or_default().push(band);
        }
        let mut slices = Vec::new();
        let mut boundaries = HashMap::new();
        for (pid, mut bands) in by_task {
            bands.sort_by_key(|b| (b.t_begin_ns, Reverse(b.t_end_ns), b.depth));
            // Ends of the slices around the current one, innermost last.
            let mut around: Vec<i64> = Vec::new();
            let mut times = Vec::with_capacity(bands.len() * 2);
            for band in bands {
                while around.last().is_some_and(|&end| end <= band.t_begin_ns) {
                    around.pop();
                }
                let mut end = band.t_end_ns.max(band.t_begin_ns);
                let mut clipped = false;
                if let Some(&outer) = around.last()
                    && end > outer
                {
                    end = outer;
                    clipped = true;
                }
                around.push(end);
                times.extend([band.t_begin_ns, end]);
                slices.push(LoaderSlice { band, end, clipped });
            }
            times.sort_unstable();
            times.dedup();
            boundaries.insert(pid, times);
        }
        LoaderSlices { slices, boundaries }
    }

    /// A loader slice of task `pid` begins or ends strictly inside
    /// (start, end): a slice from start to end would not nest with it.
    fn crosses(&self, pid: i32, start: i64, end: i64) -> bool {
        self.boundaries.get(&pid).is_some_and(|times| {
            let after = times.partition_point(|&t| t <= start);
            times.get(after).is_some_and(|&t| t < end)
        })
    }
}

fn loader_name(phase: LoaderPhase, object: Option<&str>) -> String {
    match object_name(object) {
        Some(name) => format!("{} {name}", phase.as_str()),
        None => phase.as_str().to_string(),
    }
}

/// The loader's slices and entry instants, outer slices before the ones
/// they contain (the final sort by time is stable, so equal starts keep
/// this order and nest).
fn loader_events(slices: &LoaderSlices, bands: &[LoaderBand], tasks: &Tasks) -> Vec<(f64, Value)> {
    let mut events = Vec::new();
    for slice in &slices.slices {
        let band = slice.band;
        let ts = us(band.t_begin_ns);
        let mut args = json!({"object": band.object, "depth": band.depth});
        if slice.clipped {
            args["ended"] = json!(format!(
                "never returned: cut to end with the span around it at {} µs",
                us(slice.end)
            ));
        }
        events.push((
            ts,
            json!({
                "ph": "X", "cat": "loader", "name": loader_name(band.phase, band.object.as_deref()),
                "ts": ts, "dur": us(slice.end - band.t_begin_ns),
                "pid": tasks.process_of(band.pid), "tid": band.pid,
                "args": args,
            }),
        ));
    }
    for band in bands.iter().filter(|b| b.phase == LoaderPhase::Entry) {
        let ts = us(band.t_begin_ns);
        events.push((
            ts,
            json!({
                "ph": "i", "s": "t", "cat": "loader",
                "name": loader_name(band.phase, band.object.as_deref()),
                "ts": ts, "pid": tasks.process_of(band.pid), "tid": band.pid,
                "args": {"object": band.object},
            }),
        ));
    }
    events
}

/// Renders the trace; the text is one JSON object.
pub fn perfetto_json(report: &RunReport, timeline: &Timeline) -> String {
    let tasks = Tasks::new(&timeline.processes);
    let page_size = timeline.page_size.max(1);
    let loader = LoaderSlices::new(&timeline.loader);
    let mut metadata = task_names(timeline, &tasks);
    let mut events = loader_events(&loader, &timeline.loader, &tasks);
    let reads = read_slices(timeline, &tasks, &loader, page_size);
    metadata.extend(reads.track_names);
    events.extend(reads.slices);
    events.extend(fault_instants(timeline, &tasks, page_size));
    events.extend(read_counters(reads.completed));
    events.extend(ready_mark(timeline));
    events.sort_by(|a, b| a.0.total_cmp(&b.0));
    let trace_events: Vec<Value> = metadata
        .into_iter()
        .chain(events.into_iter().map(|(_, event)| event))
        .collect();
    trace_document(report, trace_events)
}

/// Metadata naming every process and task that appears, whether or not it
/// read anything.
fn task_names(timeline: &Timeline, tasks: &Tasks) -> Vec<Value> {
    let mut task_pids: Vec<i32> = timeline.processes.iter().map(|p| p.pid).collect();
    for file in &timeline.files {
        task_pids.extend(file.points.iter().map(|p| p.pid));
        task_pids.extend(file.requests.iter().map(|r| r.pid));
    }
    task_pids.extend(timeline.loader.iter().map(|b| b.pid));
    task_pids.sort_unstable();
    task_pids.dedup();
    let mut process_ids: Vec<i32> = task_pids.iter().map(|&p| tasks.process_of(p)).collect();
    process_ids.sort_unstable();
    process_ids.dedup();
    let mut metadata = Vec::with_capacity(process_ids.len() + task_pids.len());
    for &tgid in &process_ids {
        metadata.push(json!({
            "ph": "M", "name": "process_name", "ts": 0, "pid": tgid, "tid": tgid,
            "args": {"name": tasks.process_name(tgid)},
        }));
    }
    for &pid in &task_pids {
        metadata.push(json!({
            "ph": "M", "name": "thread_name", "ts": 0,
            "pid": tasks.process_of(pid), "tid": pid,
            "args": {"name": tasks.name(pid)},
        }));
    }
    metadata
}

/// A read request that has completed: when, in which process, how many
/// bytes; the steps of the "MiB read" counters.
struct CompletedRead {
    t_end_ns: i64,
    tgid: i32,
    bytes: u64,
}

/// The read requests as slices, the names of the extra tracks they
/// needed, and the reads the counters step with.
struct ReadSlices {
    slices: Vec<(f64, Value)>,
    track_names: Vec<Value>,
    completed: Vec<CompletedRead>,
}

/// One task's read tracks: each one's tid and where its last slice ends,
/// the task's own track first.
struct TaskTracks {
    lanes: Vec<(i64, i64)>,
}

impl TaskTracks {
    fn new(pid: i32) -> TaskTracks {
        TaskTracks {
            lanes: vec![(i64::from(pid), i64::MIN)],
        }
    }

    /// Puts a slice from `start` to `end` on the first track where it does
    /// not overlap the previous slice (on the task's own track, only if it
    /// does not cross a loader slice); None when no track is free.
    fn claim(&mut self, start: i64, end: i64, crosses_loader: bool) -> Option<i64> {
        let (_, lane) = self
            .lanes
            .iter_mut()
            .enumerate()
            .find(|(i, (_, last))| *last <= start && (*i > 0 || !crosses_loader))?;
        lane.1 = end;
        Some(lane.0)
    }
}

/// Read requests, per task in time order, each on the first track of that
/// task where it does not overlap the previous slice (and, on the task's
/// own track, nests with the loader's slices); extra tracks get tids from
/// [`LANE_TID_BASE`] on.
fn read_slices(
    timeline: &Timeline,
    tasks: &Tasks,
    loader: &LoaderSlices,
    page_size: u64,
) -> ReadSlices {
    let mut reads = ReadSlices {
        slices: Vec::new(),
        track_names: Vec::new(),
        completed: Vec::new(),
    };
    let mut next_lane_tid = LANE_TID_BASE;
    for (pid, mut requests) in requests_by_task(timeline) {
        let tgid = tasks.process_of(pid);
        requests.sort_by_key(|(_, request)| (request.t_start_ns, request.t_end_ns));
        let mut tracks = TaskTracks::new(pid);
        for (file, request) in requests {
            let end = request.t_end_ns.max(request.t_start_ns);
            let crosses_loader = loader.crosses(pid, request.t_start_ns, end);
            let tid = match tracks.claim(request.t_start_ns, end, crosses_loader) {
                Some(tid) => tid,
                None => {
                    let tid = next_lane_tid;
                    next_lane_tid += 1;
                    reads.track_names.push(json!({
                        "ph": "M", "name": "thread_name", "ts": 0, "pid": tgid, "tid": tid,
                        "args": {"name": format!("{} ({pid}) overlapping reads #{}", tasks.name(pid), tracks.lanes.len())},
                    }));
                    tracks.lanes.push((tid, end));
                    tid
                }
            };
            let bytes = request.npages.saturating_mul(page_size);
            reads
                .slices
                .push(read_slice(file, request, end, (tgid, tid), page_size));
            reads.completed.push(CompletedRead {
                t_end_ns: end,
                tgid,
                bytes,
            });
        }
    }
    reads
}

fn requests_by_task(timeline: &Timeline) -> BTreeMap<i32, Vec<(&FileTimeline, &ReadRequest)>> {
    let mut by_task: BTreeMap<i32, Vec<(&FileTimeline, &ReadRequest)>> = BTreeMap::new();
    for file in &timeline.files {
        for request in &file.requests {
            by_task
                .entry(request.pid)
                .or_default()
                .push((file, request));
        }
    }
    by_task
}

/// One read request as an "X" slice ending at `end` on track (pid, tid).
fn read_slice(
    file: &FileTimeline,
    request: &ReadRequest,
    end: i64,
    (tgid, tid): (i32, i64),
    page_size: u64,
) -> (f64, Value) {
    let ts = us(request.t_start_ns);
    (
        ts,
        json!({
            "ph": "X", "cat": "read", "name": basename(&file.path),
            "ts": ts, "dur": us(end - request.t_start_ns),
            "pid": tgid, "tid": tid,
            "args": {
                "path": file.path,
                "first_page": request.first_page,
                "pages": request.npages,
                "bytes": request.npages.saturating_mul(page_size),
                "offset": request.first_page.saturating_mul(page_size),
            },
        }),
    )
}

/// Page faults as thread instants on the task that faulted.
fn fault_instants(timeline: &Timeline, tasks: &Tasks, page_size: u64) -> Vec<(f64, Value)> {
    let mut events = Vec::new();
    for file in &timeline.files {
        let name = format!("fault {}", basename(&file.path));
        for point in file
            .points
            .iter()
            .filter(|p| p.kind == PageEventKind::Fault)
        {
            let ts = us(point.t_ns);
            events.push((
                ts,
                json!({
                    "ph": "i", "s": "t", "cat": "fault", "name": name,
                    "ts": ts, "pid": tasks.process_of(point.pid), "tid": point.pid,
                    "args": {
                        "path": file.path,
                        "page": point.page,
                        "pages": point.npages,
                        "offset": point.page.saturating_mul(page_size),
                    },
                }),
            ));
        }
    }
    events
}

/// Cumulative MiB read per process, stepping when each request ends; each
/// counter starts at 0 so the first step is visible.
fn read_counters(mut completed: Vec<CompletedRead>) -> Vec<(f64, Value)> {
    completed.sort_by_key(|read| (read.t_end_ns, read.tgid));
    let mut events = Vec::new();
    let mut read_so_far: BTreeMap<i32, u64> = BTreeMap::new();
    for read in &completed {
        if read_so_far.insert(read.tgid, 0).is_none() {
            events.push((
                0.0,
                json!({"ph": "C", "name": "MiB read", "ts": 0.0, "pid": read.tgid, "tid": read.tgid, "args": {"MiB": 0.0}}),
            ));
        }
    }
    for read in completed {
        let total = read_so_far.entry(read.tgid).or_insert(0);
        *total = total.saturating_add(read.bytes);
        let ts = us(read.t_end_ns);
        events.push((
            ts,
            json!({
                "ph": "C", "name": "MiB read", "ts": ts, "pid": read.tgid, "tid": read.tgid,
                "args": {"MiB": *total as f64 / (1024.0 * 1024.0)},
            }),
        ));
    }
    events
}

/// `ready` as a global instant, on the run's first process.
fn ready_mark(timeline: &Timeline) -> Option<(f64, Value)> {
    let ready = timeline.ready_ns?;
    let root = timeline
        .processes
        .first()
        .map(|p| p.tgid.unwrap_or(p.pid))
        .unwrap_or(0);
    let ts = us(ready);
    Some((
        ts,
        json!({"ph": "i", "s": "g", "name": "ready", "cat": "mark", "ts": ts, "pid": root, "tid": root}),
    ))
}

/// The trace file: its events and what run they come from.
fn trace_document(report: &RunReport, trace_events: Vec<Value>) -> String {
    let run = &report.run;
    json!({
        "traceEvents": trace_events,
        "displayTimeUnit": "ms",
        "otherData": {
            "tool": "coldstart",
            "profile": report.profile,
            "run": run.id,
            "command": run.argv.join(" "),
            "cache_mode": run.cache_mode,
            "kernel": run.kernel,
            "end_reason": run.end_reason,
            "lost_events": run.lost_events,
        },
    })
    .to_string()
}
