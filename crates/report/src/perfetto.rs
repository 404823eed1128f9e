//! `coldstart report --perfetto`: the run as a Chrome Trace Event JSON
//! file, which ui.perfetto.dev (and chrome://tracing) open, so a start can
//! be zoomed down to single reads and faults per task.
//!
//! Read requests are complete ("X") slices on the task that read; faults
//! are thread instants; cumulative MiB read is a counter per process;
//! `ready` is a global instant. Timestamps are µs since program start.
//!
//! Perfetto drops "X" slices that overlap without nesting on one thread,
//! so a task's overlapping requests go to extra tracks named after it
//! ("… overlapping reads #n"), with synthetic tids from [`LANE_TID_BASE`].

use coldstart_analyze::{FileTimeline, ProcessInfo, ReadRequest, RunReport, Timeline};
use coldstart_profile::PageEventKind;
use serde_json::{Value, json};
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

/// Renders the trace; the text is one JSON object.
pub fn perfetto_json(report: &RunReport, timeline: &Timeline) -> String {
    let tasks = Tasks::new(&timeline.processes);
    let page_size = timeline.page_size.max(1);
    let mut metadata: Vec<Value> = Vec::new();
    let mut events: Vec<(f64, Value)> = Vec::new();

    // Every task that appears gets named, whether or not it read anything.
    let mut task_pids: Vec<i32> = timeline.processes.iter().map(|p| p.pid).collect();
    for file in &timeline.files {
        task_pids.extend(file.points.iter().map(|p| p.pid));
        task_pids.extend(file.requests.iter().map(|r| r.pid));
    }
    task_pids.sort_unstable();
    task_pids.dedup();
    let mut process_ids: Vec<i32> = task_pids.iter().map(|&p| tasks.process_of(p)).collect();
    process_ids.sort_unstable();
    process_ids.dedup();
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

    // Read requests, per task in time order, each on the first track of
    // that task where it does not overlap the previous slice.
    let mut by_task: BTreeMap<i32, Vec<(&FileTimeline, &ReadRequest)>> = BTreeMap::new();
    for file in &timeline.files {
        for request in &file.requests {
            by_task
                .entry(request.pid)
                .or_default()
                .push((file, request));
        }
    }
    let mut next_lane_tid = LANE_TID_BASE;
    // (t_end_ns, tgid, bytes) for the counters.
    let mut completed: Vec<(i64, i32, u64)> = Vec::new();
    for (pid, mut requests) in by_task {
        let tgid = tasks.process_of(pid);
        requests.sort_by_key(|(_, request)| (request.t_start_ns, request.t_end_ns));
        // Per track: its tid and where its last slice ends.
        let mut lanes: Vec<(i64, i64)> = Vec::new();
        for (file, request) in requests {
            let end = request.t_end_ns.max(request.t_start_ns);
            let tid = match lanes
                .iter_mut()
                .find(|(_, last)| *last <= request.t_start_ns)
            {
                Some(lane) => {
                    lane.1 = end;
                    lane.0
                }
                None => {
                    let tid = if lanes.is_empty() {
                        i64::from(pid)
                    } else {
                        let tid = next_lane_tid;
                        next_lane_tid += 1;
                        metadata.push(json!({
                            "ph": "M", "name": "thread_name", "ts": 0, "pid": tgid, "tid": tid,
                            "args": {"name": format!("{} ({pid}) overlapping reads #{}", tasks.name(pid), lanes.len())},
                        }));
                        tid
                    };
                    lanes.push((tid, end));
                    tid
                }
            };
            let bytes = request.npages.saturating_mul(page_size);
            let ts = us(request.t_start_ns);
            events.push((
                ts,
                json!({
                    "ph": "X", "cat": "read", "name": basename(&file.path),
                    "ts": ts, "dur": us(end - request.t_start_ns),
                    "pid": tgid, "tid": tid,
                    "args": {
                        "path": file.path,
                        "first_page": request.first_page,
                        "pages": request.npages,
                        "bytes": bytes,
                        "offset": request.first_page.saturating_mul(page_size),
                    },
                }),
            ));
            completed.push((end, tgid, bytes));
        }
    }

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

    // Cumulative MiB read per process, stepping when each request ends;
    // each counter starts at 0 so the first step is visible.
    completed.sort_by_key(|&(t, tgid, _)| (t, tgid));
    let mut read_so_far: BTreeMap<i32, u64> = BTreeMap::new();
    for &(_, tgid, _) in &completed {
        if read_so_far.insert(tgid, 0).is_none() {
            events.push((
                0.0,
                json!({"ph": "C", "name": "MiB read", "ts": 0.0, "pid": tgid, "tid": tgid, "args": {"MiB": 0.0}}),
            ));
        }
    }
    for (t, tgid, bytes) in completed {
        let total = read_so_far.entry(tgid).or_insert(0);
        *total = total.saturating_add(bytes);
        let ts = us(t);
        events.push((
            ts,
            json!({
                "ph": "C", "name": "MiB read", "ts": ts, "pid": tgid, "tid": tgid,
                "args": {"MiB": *total as f64 / (1024.0 * 1024.0)},
            }),
        ));
    }

    if let Some(ready) = timeline.ready_ns {
        let root = timeline
            .processes
            .first()
            .map(|p| p.tgid.unwrap_or(p.pid))
            .unwrap_or(0);
        let ts = us(ready);
        events.push((
            ts,
            json!({"ph": "i", "s": "g", "name": "ready", "cat": "mark", "ts": ts, "pid": root, "tid": root}),
        ));
    }

    events.sort_by(|a, b| a.0.total_cmp(&b.0));
    let trace_events: Vec<Value> = metadata
        .into_iter()
        .chain(events.into_iter().map(|(_, event)| event))
        .collect();
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
