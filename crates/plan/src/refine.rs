//! Refining a plan from the starts it served.
//!
//! A plan compiled from readahead-off traces (the *seed*) holds exactly
//! the pages those starts needed. A start with the plan is faster, and a
//! faster start can do different work (Firefox's forkserver opened codec
//! libraries that none of the slow traced starts opened). Traced through
//! `coldstart-run` at the device's normal readahead, such a start shows
//! what the program still read itself ([`crate::misses`]). The refined
//! plan is, file by file:
//! - the seed's pages, always (the exact seed is never dropped);
//! - the pages an earlier refinement added that a served start still used
//!   (any event of the program on them: a fault, a fault-around mapping, a
//!   read() or a read); pages no served start used any more are dropped;
//! - the demanded pages of every miss of the served starts (the page a
//!   fault or read() named, not the readahead window the kernel read
//!   around it), before the start was ready.
//!
//! Need times of the added pages come from faster starts than the seed's;
//! they are scaled into the seed's time line by the ratio of the two
//! starts' lengths (the seed's last need over the served start's ready
//! time, or its end), so that the prefetch order stays one order.

use crate::compile::{CompileOptions, CompileStats, build_extents, number_files, plannable_path};
use crate::misses::{MissReason, misses};
use coldstart_analyze::loaded::{LoadedRun, event_pages};
use coldstart_prefetch::{Extent, Lookup, Plan, PlanFile};
use coldstart_profile::{PageEventKind, RunId};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap, HashSet};

/// What a refinement changed, in pages.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RefineStats {
    /// The served runs refined from.
    pub runs: Vec<RunId>,
    /// Pages of the seed (always kept).
    pub seed_pages: u64,
    /// Pages an earlier refinement added that a served start still used.
    pub kept_pages: u64,
    /// Pages an earlier refinement added that no served start used.
    pub dropped_pages: u64,
    /// Demanded pages of misses, newly planned.
    pub added_pages: u64,
    /// Pages the program read around its misses (readahead windows),
    /// not planned.
    pub window_pages_left_out: u64,
    /// Paths whose inodes a served start's program still read from the
    /// disk itself, newly planned as lookups.
    pub added_lookups: u64,
    /// Files the served starts saw changed since the plan: the plan is
    /// stale for them; trace new seeds.
    pub changed_files: Vec<String>,
}

#[derive(Debug, Clone)]
pub struct Refined {
    pub plan: Plan,
    pub stats: RefineStats,
}

/// One file of the refined plan.
struct Pages {
    file: PlanFile,
    /// page -> need time, ns, in the seed's time line.
    need: BTreeMap<u64, i64>,
}

/// Refines `current` (a plan that was `seed` or a refinement of it) from
/// the starts it served.
pub fn refine(
    seed: &Plan,
    current: &Plan,
    served: &[LoadedRun],
    options: &CompileOptions,
) -> Refined {
    let page_size = seed.page_size.max(1);
    let mut stats = RefineStats {
        runs: served.iter().map(LoadedRun::id).collect(),
        ..RefineStats::default()
    };
    let mut files: HashMap<String, Pages> = HashMap::new();
    let seed_pages = plan_pages(seed);
    for (path, (file, need)) in &seed_pages {
        stats.seed_pages += need.len() as u64;
        files.insert(
            path.clone(),
            Pages {
                file: file.clone(),
                need: need.clone(),
            },
        );
    }
    let seed_end = seed.extents.iter().map(|e| e.need_ns).max().unwrap_or(0);

    // Pages earlier refinements added: kept while a served start uses them.
    let used = used_pages(served);
    for (path, (file, need)) in plan_pages(current) {
        let seed_file = seed_pages.get(&path);
        for (page, t) in need {
            if seed_file.is_some_and(|(_, s)| s.contains_key(&page)) {
                continue;
            }
            if used.contains(&(path.clone(), page)) {
                stats.kept_pages += 1;
                files
                    .entry(path.clone())
                    .or_insert_with(|| Pages {
                        file: file.clone(),
                        need: BTreeMap::new(),
                    })
                    .need
                    .entry(page)
                    .or_insert(t);
            } else {
                stats.dropped_pages += 1;
            }
        }
    }

    // The demanded pages of the served starts' misses.
    let mut changed: HashSet<String> = HashSet::new();
    for run in served {
        let until = run.ready_ns().or(run.run.ended_ns);
        let scale = time_scale(run, seed_end);
        let by_id: HashMap<_, _> = run.files.iter().map(|f| (f.id, f)).collect();
        for miss in misses(run, current) {
            let Some(file) = by_id.get(&miss.file) else {
                continue;
            };
            let Some(path) = plannable_path(file) else {
                continue;
            };
            if miss.reason == MissReason::BeforePrefetcher {
                // The launcher's own start: a plan cannot serve it.
                continue;
            }
            if miss.reason == MissReason::FileChanged {
                changed.insert(path.to_string());
                continue;
            }
            let Some(demanded) = miss.demanded_ns else {
                stats.window_pages_left_out += 1;
                continue;
            };
            if until.is_some_and(|u| demanded > u) {
                continue;
            }
            let Some(seen) = file.identity() else {
                continue;
            };
            if miss.page.saturating_mul(page_size) >= seen.size {
                continue;
            }
            let entry = files.entry(path.to_string()).or_insert_with(|| Pages {
                file: PlanFile::new(path.to_string(), seen),
                need: BTreeMap::new(),
            });
            let t = (demanded as f64 * scale) as i64;
            match entry.need.get_mut(&miss.page) {
                Some(old) => *old = (*old).min(t),
                None => {
                    entry.need.insert(miss.page, t);
                    stats.added_pages += 1;
                }
            }
        }
    }
    stats.changed_files = changed.into_iter().collect();
    stats.changed_files.sort();

    // Lookups: the current plan's, and whatever inodes the served starts'
    // programs still loaded from the disk themselves.
    let mut lookups: HashMap<String, Lookup> = seed
        .lookups
        .iter()
        .chain(&current.lookups)
        .map(|l| (l.path.clone(), l.clone()))
        .collect();
    for run in served {
        let scale = time_scale(run, seed_end);
        for (path, (t_ns, ino)) in crate::lookups::program_loads(run) {
            let need_ns = (t_ns as f64 * scale) as i64;
            let entry = lookups.entry(path.clone()).or_insert_with(|| {
                stats.added_lookups += 1;
                Lookup { path, ino, need_ns }
            });
            entry.need_ns = entry.need_ns.min(need_ns);
        }
    }
    let mut lookups: Vec<Lookup> = lookups.into_values().collect();
    crate::lookups::sort(&mut lookups);

    let mut plan = assemble(seed, current, served, files, options);
    plan.lookups = lookups;
    Refined { plan, stats }
}

/// The factor from `run`'s time line onto the seed's: the seed's last
/// need over the run's ready time (its end without one).
fn time_scale(run: &LoadedRun, seed_end: i64) -> f64 {
    match run.ready_ns().or(run.run.ended_ns) {
        Some(u) if u > 0 && seed_end > 0 => seed_end as f64 / u as f64,
        _ => 1.0,
    }
}

/// A plan's pages by path, with its files' identities and each page's need
/// time (its extent's).
fn plan_pages(plan: &Plan) -> HashMap<String, (PlanFile, BTreeMap<u64, i64>)> {
    let mut out: HashMap<String, (PlanFile, BTreeMap<u64, i64>)> = HashMap::new();
    for e in &plan.extents {
        let Some(file) = plan.files.get(e.file) else {
            continue;
        };
        let (_, need) = out
            .entry(file.path.clone())
            .or_insert_with(|| (file.clone(), BTreeMap::new()));
        for page in e.page..e.page.saturating_add(e.pages) {
            let t = need.entry(page).or_insert(e.need_ns);
            *t = (*t).min(e.need_ns);
        }
    }
    out
}

/// (path, page) of every page the program's processes used in any of the
/// runs: read, faulted, mapped by fault-around, read() or touched.
fn used_pages(served: &[LoadedRun]) -> HashSet<(String, u64)> {
    let mut used = HashSet::new();
    for run in served {
        let prefetcher = run.prefetcher_tasks();
        let paths: HashMap<_, _> = run
            .files
            .iter()
            .filter_map(|f| plannable_path(f).map(|p| (f.id, p)))
            .collect();
        for e in run.tree_events() {
            if e.kind == PageEventKind::Evict || prefetcher.contains(&e.pid) {
                continue;
            }
            let Some(path) = paths.get(&e.file_id) else {
                continue;
            };
            for page in event_pages(e) {
                used.insert((path.to_string(), page));
            }
        }
    }
    used
}

/// The refined plan: extents built as `compile` builds them, ordered by
/// need; the current plan's opened-only files kept.
fn assemble(
    seed: &Plan,
    current: &Plan,
    served: &[LoadedRun],
    files: HashMap<String, Pages>,
    options: &CompileOptions,
) -> Plan {
    let mut stats = CompileStats::default();
    let mut paths: Vec<String> = files.keys().cloned().collect();
    paths.sort();
    let mut files = files;
    let mut planned: Vec<PlanFile> = Vec::new();
    let mut extents = Vec::new();
    for path in paths {
        let pages = files.remove(&path).expect("path from the map");
        if pages.need.is_empty() {
            continue;
        }
        let list: Vec<(u64, i64)> = pages.need.into_iter().collect();
        extents.extend(build_extents(planned.len(), &list, options, &mut stats));
        planned.push(pages.file);
    }
    extents.sort_by_key(|e| (e.need_ns, e.file, e.page));
    // Opened-only files first (by path), as compile writes them, then the
    // planned ones in order of first need.
    let with_extents: HashSet<usize> = current.extents.iter().map(|e| e.file).collect();
    let mut opened_only: Vec<PlanFile> = current
        .files
        .iter()
        .enumerate()
        .filter(|(i, f)| !with_extents.contains(i) && !planned.iter().any(|p| p.path == f.path))
        .map(|(_, f)| f.clone())
        .collect();
    opened_only.sort_by(|a, b| a.path.cmp(&b.path));
    let out = number_files(opened_only, planned, &mut extents);
    let mut runs = seed.source.runs.clone();
    runs.extend(served.iter().map(LoadedRun::id));
    runs.sort_unstable();
    runs.dedup();
    let mut source = seed.source.clone();
    source.runs = runs;
    source.pages_from = format!("{}+refined", seed.source.pages_from);
    Plan {
        page_size: seed.page_size,
        source,
        files: out,
        extents,
        lookups: Vec::new(),
    }
}

/// The plan in the order `run` (a served start) first used its extents:
/// each extent the program used before it was ready is needed when it
/// first used any of its pages, on that start's time line; the others keep
/// their place relative to the plan's time line, scaled onto the start's
/// (the plan's last need onto the start's ready time, or its end). The
/// extents and files are the plan's; only need times and the order move.
///
/// A plan compiled from readahead-off traces is in the order of those slow
/// starts, whose phases overlap differently from a fast start's: on
/// Chromium the floor (`crate::floor`) of a seed plan read in its own order
/// held a warm start back 315 ms where the order the start uses held it
/// back 85 ms (both counting fault-around mappings as uses).
pub fn retime(plan: &Plan, run: &LoadedRun) -> Plan {
    let until = run.ready_ns().or(run.run.ended_ns);
    let first = crate::floor::first_use_by_extent(plan, run, crate::floor::Uses::Any);
    let plan_end = plan.extents.iter().map(|e| e.need_ns).max().unwrap_or(0);
    let scale = match until {
        Some(u) if u > 0 && plan_end > 0 => u as f64 / plan_end as f64,
        _ => 1.0,
    };
    let mut extents: Vec<Extent> = plan
        .extents
        .iter()
        .zip(&first)
        .map(|(e, used)| Extent {
            need_ns: used.unwrap_or((e.need_ns as f64 * scale) as i64),
            ..*e
        })
        .collect();
    extents.sort_by_key(|e| (e.need_ns, e.file, e.page));
    // Files: the opened-only ones first, as they were, then by first need.
    let with_extents: HashSet<usize> = extents.iter().map(|e| e.file).collect();
    let (opened_only, planned): (Vec<_>, Vec<_>) = plan
        .files
        .iter()
        .cloned()
        .enumerate()
        .partition(|(index, _)| !with_extents.contains(index));
    // Extents index the plan's files; number_files wants them to index the
    // planned ones.
    let mut position = vec![0; plan.files.len()];
    for (at, (index, _)) in planned.iter().enumerate() {
        position[*index] = at;
    }
    for extent in &mut extents {
        extent.file = position[extent.file];
    }
    let files = number_files(
        opened_only.into_iter().map(|(_, f)| f).collect(),
        planned.into_iter().map(|(_, f)| f).collect(),
        &mut extents,
    );
    Plan {
        page_size: plan.page_size,
        source: plan.source.clone(),
        files,
        extents,
        lookups: plan.lookups.clone(),
    }
}
