//! The floor: the best cold start a perfect prefetch of a plan could reach
//! on a device, predicted from a traced start.
//!
//! A perfect prefetcher starts reading at launch, in the plan's order, and
//! keeps the device busy: the extent `k` has arrived when the device has
//! spent, on it and on every extent before it, one request each (the
//! device's time per request with the replay's reads in flight) and their
//! bytes over its streaming bandwidth. The program runs as it does with
//! everything cached: `reference` should be a warm start (its events give
//! the time each extent is first used at warm speed; page events of a warm
//! start are the faults, fault-around mappings and read() calls, which
//! happen whether the pages are cached or not). Data needed by time `t`
//! cannot arrive before it is read, so the start is held back by the
//! largest lateness `arrival - first use` over the extents it uses, and
//! the floor is the reference start's length plus that lateness. A mapping
//! is not a use, though: fault-around maps cached pages before the program
//! needs them, and its later use of a mapped page leaves no event, so the
//! same figures are also given from the demanded pages alone (faults,
//! read() calls, touches); the first overstate the lateness, the second
//! understate it. Costs the model leaves out (reading filesystem metadata,
//! the program's own CPU time competing with the prefetcher's, pages the
//! plan lacks) only raise the real start above it.

use crate::compile::plannable_path;
use coldstart_analyze::loaded::{LoadedRun, event_pages};
use coldstart_prefetch::Plan;
use coldstart_profile::PageEventKind;
use serde::Serialize;
use std::collections::HashMap;

/// How fast the device reads: what `coldstart plan --calibrate` measures.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Device {
    /// Streaming bandwidth, bytes per second.
    pub bandwidth_bytes_s: f64,
    /// Device time per request with the replay's reads in flight, seconds.
    pub request_s: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Floor {
    pub device: Device,
    /// The reference start's length: its ready mark, else its end, ns.
    pub reference_ns: i64,
    /// When the device has read the whole plan, ns after launch.
    pub plan_read_ns: i64,
    pub extents: usize,
    /// The prediction counting every event of the program on a page as a
    /// use, fault-around mappings included (its keys stand at the top
    /// level of the JSON).
    #[serde(flatten)]
    pub mapped: Bound,
    /// The same prediction counting only the pages the start demanded (a
    /// fault, a read() or a touch). A warm start's fault-around maps cached
    /// pages before the program uses them (often long before, or never),
    /// and the program's later use of a mapped page leaves no event:
    /// mappings counted as uses overstate the lateness, demanded pages
    /// alone understate it. The truth lies between.
    pub demanded: Bound,
}

/// The floor from one reading of which pages the reference start used.
#[derive(Debug, Clone, Serialize)]
pub struct Bound {
    /// How long the perfect prefetch holds the start back: the largest
    /// lateness of an extent over its first use (0 when every extent
    /// arrives in time).
    pub held_back_ns: i64,
    /// The extent (index into the plan) that is latest in the perfect
    /// order, if any is late.
    pub latest_extent: Option<usize>,
    /// reference + held back: the best cold start with this plan.
    pub floor_ns: i64,
    /// How long reading the plan in its own order (as `coldstart run`
    /// does) would hold the start back on the same device.
    pub held_back_plan_order_ns: i64,
    /// Extents the reference start used, of all.
    pub extents_used: usize,
}

/// The floor of `plan` on `device`, with `reference` giving when the
/// program first uses each extent.
pub fn predict(plan: &Plan, reference: &LoadedRun, device: Device) -> Floor {
    let cost_s = |index: usize| {
        let bytes = (plan.extents[index].pages * plan.page_size) as f64;
        device.request_s + bytes / device.bandwidth_bytes_s.max(1.0)
    };
    let reference_ns = reference.ready_ns().or(reference.run.ended_ns).unwrap_or(0);
    // The plan's own order, as `coldstart run` reads it.
    let in_order: Vec<usize> = (0..plan.extents.len()).collect();
    let plan_read_s: f64 = in_order.iter().map(|&i| cost_s(i)).sum();
    let bound = |uses: Uses| {
        let first_use = first_use_by_extent(plan, reference, uses);
        // The perfect prefetch reads what the start uses, in the order it
        // first uses it (earliest deadline first, which minimises the
        // largest lateness), and nothing else before it.
        let mut used: Vec<usize> = (0..plan.extents.len())
            .filter(|&i| first_use[i].is_some())
            .collect();
        used.sort_by_key(|&i| (first_use[i], i));
        let (held_back_ns, latest_extent) = lateness(&used, &first_use, cost_s);
        Bound {
            held_back_ns,
            latest_extent,
            floor_ns: reference_ns + held_back_ns,
            held_back_plan_order_ns: lateness(&in_order, &first_use, cost_s).0,
            extents_used: used.len(),
        }
    };
    Floor {
        device,
        reference_ns,
        plan_read_ns: (plan_read_s * 1e9) as i64,
        extents: plan.extents.len(),
        mapped: bound(Uses::Any),
        demanded: bound(Uses::Demanded),
    }
}

/// Which events of a run count as a use of a page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Uses {
    /// Every event of the program, fault-around mappings included.
    Any,
    /// Faults, read() calls and touches: the pages the program asked for.
    Demanded,
}

/// Reading `order` back to back from launch: the largest lateness of an
/// extent's arrival over its first use, and that extent.
fn lateness(
    order: &[usize],
    first_use: &[Option<i64>],
    cost_s: impl Fn(usize) -> f64,
) -> (i64, Option<usize>) {
    let mut elapsed_s = 0.0;
    let mut worst = (0i64, None);
    for &index in order {
        elapsed_s += cost_s(index);
        if let Some(used) = first_use[index] {
            let late = (elapsed_s * 1e9) as i64 - used.max(0);
            if late > worst.0 {
                worst = (late, Some(index));
            }
        }
    }
    worst
}

/// For each extent of the plan, the earliest event of the program (not a
/// prefetcher) on any of its pages in `run`, before the run was ready:
/// any event but an eviction, or with `Uses::Demanded` only faults, read()
/// calls and touches.
pub(crate) fn first_use_by_extent(plan: &Plan, run: &LoadedRun, uses: Uses) -> Vec<Option<i64>> {
    let prefetcher = run.prefetcher_tasks();
    let until = run.ready_ns().or(run.run.ended_ns);
    // Per plan file, its extents as (first page, end page, index), sorted.
    let mut by_path: HashMap<&str, Vec<(u64, u64, usize)>> = HashMap::new();
    for (index, e) in plan.extents.iter().enumerate() {
        if let Some(file) = plan.files.get(e.file) {
            by_path.entry(file.path.as_str()).or_default().push((
                e.page,
                e.page.saturating_add(e.pages),
                index,
            ));
        }
    }
    for extents in by_path.values_mut() {
        extents.sort_unstable();
    }
    let paths: HashMap<_, _> = run
        .files
        .iter()
        .filter_map(|f| plannable_path(f).map(|p| (f.id, p)))
        .collect();
    let mut first = vec![None; plan.extents.len()];
    for e in run.tree_events() {
        let counts = match uses {
            Uses::Any => e.kind != PageEventKind::Evict,
            Uses::Demanded => e.kind.is_demand(),
        };
        if !counts || prefetcher.contains(&e.pid) || until.is_some_and(|u| e.t_ns > u) {
            continue;
        }
        let Some(extents) = paths.get(&e.file_id).and_then(|p| by_path.get(p)) else {
            continue;
        };
        let pages = event_pages(e);
        // Extents overlapping [pages.start, pages.end).
        let from = extents.partition_point(|&(_, end, _)| end <= pages.start);
        for &(start, _, index) in &extents[from..] {
            if start >= pages.end {
                break;
            }
            let slot: &mut Option<i64> = &mut first[index];
            if slot.is_none_or(|t| e.t_ns < t) {
                *slot = Some(e.t_ns);
            }
        }
    }
    first
}
