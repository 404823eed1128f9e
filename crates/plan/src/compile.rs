//! Compiling a plan from traced runs.
//!
//! For each run pooled, the pages the program's process tree needed before
//! it was ready (the `ready` mark; the end of the run without one), with the
//! time each was first needed. A page is planned when enough of the runs
//! needed it (`min_fraction` of them), so one odd run neither bloats nor
//! starves the plan; its need time is the lower median of the first-need
//! times of the runs that needed it. Planned pages of a file form extents;
//! extents closer than the merge gap become one read, long ones are split,
//! and the extents are ordered by need time.
//!
//! Which events say a page was needed depends on how the run was traced.
//! With readahead off (`trace --read-ahead-kb 0`) the kernel reads only what
//! is demanded, so the pages the tree read are exactly the pages it needed,
//! and those count along with faults, touches and read() accesses. With
//! readahead on, reads include the readahead windows, so only faults,
//! touches, read() accesses and fault-around mappings count; the mappings
//! make that a superset of the touched pages, which readahead off avoids.
//! Which processes are the tree, when a run was ready and which events are
//! touches are the analyze room's ([`LoadedRun`]), as for every report.

use crate::lookups::LookupPool;
use coldstart_analyze::loaded::{LoadedRun, demand_reads, event_pages, is_touch};
use coldstart_analyze::lower_median;
use coldstart_prefetch::{Extent, FORMAT_VERSION, Plan, PlanFile, PlanSource};
use coldstart_profile::{EndReason, File, FileIdentity, PageEventKind, Profile, Run, RunId};
use serde::Serialize;
use std::collections::HashMap;

const _: () = assert!(FORMAT_VERSION == 2);

/// A page is planned when at least this fraction of the runs needed it.
/// Low: a page the plan misses costs the program a synchronous read and the
/// kernel's readahead window around it, a page too many costs one page of
/// reading.
pub const DEFAULT_MIN_FRACTION: f64 = 0.25;

/// Extents of a file at most this many bytes apart are merged into one
/// read. Measured on this project's machine kind (virtio disk, 2 CPUs) with
/// `plan --calibrate` on libxul.so, as the replay reads (readahead(2) on 2
/// threads, the queue full), three times at read_ahead_kb 128 and 8192: one
/// more request cost 8.0-12.2 µs of the device's time and a byte more ran
/// at 815-897 MB/s, so a request is worth 7.0-10.1 KB of reading. The
/// replay agreed: Firefox ESR's seed plan merged at 0, 4, 8, 16 and 32 KiB
/// (83-107 MB, 3,196-1,007 extents) prefilled in the same 148-169 ms, and
/// merged at 256 KiB (164 MB) in 221-226 ms. (With two reads in flight, as
/// the calibration measured at first, a request cost 21-78 µs and this was
/// 16 KiB: 7% more bytes for Firefox's plan, for nothing.)
pub const DEFAULT_MERGE_GAP_BYTES: u64 = 8 << 10;

/// Extents longer than this many bytes are split, so one read does not
/// hold back the extents needed after it.
pub const DEFAULT_MAX_EXTENT_BYTES: u64 = 4 << 20;

#[derive(Debug, Clone)]
pub struct CompileOptions {
    /// Runs to pool; `None` pools every complete run.
    pub runs: Option<Vec<RunId>>,
    /// A page is planned when at least this fraction of the runs needed it
    /// (rounded up, and at least one run).
    pub min_fraction: f64,
    /// Extents of a file at most this many pages apart are merged.
    pub merge_gap_pages: u64,
    /// Extents longer than this are split.
    pub max_extent_pages: u64,
    /// The plan's total size is capped at this many bytes; the extents
    /// needed last are dropped.
    pub max_bytes: Option<u64>,
}

impl CompileOptions {
    /// The defaults for pages of `page_size` bytes (the profile's): the
    /// byte defaults above in whole pages, an extent at least one page.
    pub fn for_page_size(page_size: u64) -> CompileOptions {
        let page_size = page_size.max(1);
        CompileOptions {
            runs: None,
            min_fraction: DEFAULT_MIN_FRACTION,
            merge_gap_pages: DEFAULT_MERGE_GAP_BYTES / page_size,
            max_extent_pages: (DEFAULT_MAX_EXTENT_BYTES / page_size).max(1),
            max_bytes: None,
        }
    }
}

impl Default for CompileOptions {
    /// The defaults for 4 KiB pages; [`CompileOptions::for_page_size`] for
    /// a profile of another page size.
    fn default() -> Self {
        CompileOptions::for_page_size(4096)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum CompileError {
    #[error(transparent)]
    Profile(#[from] coldstart_profile::Error),
    #[error("{0}")]
    Runs(String),
}

/// What went into a plan and what was left out, in pages.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CompileStats {
    pub runs: Vec<RunStats>,
    /// A page needs this many of the runs to be planned.
    pub min_runs: usize,
    /// Pages that enough runs needed.
    pub pages_needed: u64,
    /// Pages some run needed, but too few of them.
    pub pages_below_threshold: u64,
    /// Pages planned only because they lie in a merged gap.
    pub pages_merged_gaps: u64,
    /// Needed pages dropped by the size cap.
    pub pages_over_cap: u64,
    /// Pages of files left out: unresolved paths, in-kernel files, unknown
    /// size.
    pub pages_unplannable: u64,
    /// Files in the plan that are only opened (no extent).
    pub files_opened_only: usize,
    /// Files left out because they change at every start.
    pub files_rewritten: usize,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RunStats {
    pub run: RunId,
    /// Pages of plannable files this run needed.
    pub pages_needed: u64,
    /// Where its pages stop counting: the ready mark, else its end.
    pub until_ns: Option<i64>,
    pub ready: bool,
}

#[derive(Debug, Clone)]
pub struct Compiled {
    pub plan: Plan,
    pub warnings: Vec<String>,
    pub stats: CompileStats,
}

/// One file across the pooled runs, keyed by path.
#[derive(Default)]
struct Pooled {
    /// The latest run's identity, which the plan records.
    identity: Option<FileIdentity>,
    /// (page, first-need time) per run, one entry per page and run.
    needs: Vec<(u64, i64)>,
    /// Runs that saw the file with another identity: they do not count
    /// for it.
    runs_changed: Vec<RunId>,
    /// Whether the run before the latest that saw the file saw it otherwise:
    /// then it changes at every start (a profile, log or cache the program
    /// writes) and any plan of it would be stale. None until a second run
    /// sees it.
    changes_each_start: Option<bool>,
    /// Runs in which the tree opened the file or needed a page of it.
    runs_used: usize,
}

/// Compiles `profile`'s runs into a plan; `label` is the profile as the user
/// named it, recorded in the plan's header.
pub fn compile(
    profile: &Profile,
    label: &str,
    options: &CompileOptions,
) -> Result<Compiled, CompileError> {
    let runs = select_runs(profile, options)?;
    let page_size = common_page_size(&runs)?;
    let mut warnings = Vec::new();
    let mut stats = CompileStats::default();
    let demand = runs.iter().all(demand_reads);
    if !demand {
        warnings.push(
            "some runs were traced with readahead on, so the plan counts fault-around mappings as needed \
             and is larger than what the program touches; trace with --read-ahead-kb 0 for an exact plan"
                .to_string(),
        );
    }

    let latest = runs
        .last()
        .expect("select_runs returns at least one run")
        .id;
    let mut pooled: HashMap<String, Pooled> = HashMap::new();
    let mut lookups = LookupPool::default();
    for run in runs.iter().rev() {
        let loaded = LoadedRun::load_rows(profile, run.clone())?;
        lookups.add(&loaded);
        if run.id == latest {
            pooled = reference_identities(&loaded.files);
        }
        if loaded.ready_ns().is_none() {
            warnings.push(format!(
                "run {} has no ready mark: every page it needed until it ended counts (trace with --ready-regex \
                 or --ready-file to stop at readiness)",
                run.id
            ));
        }
        let needs = first_needs(&loaded, demand);
        let run_stats = pool_run(&loaded, needs, latest, page_size, &mut pooled, &mut stats);
        stats.runs.push(run_stats);
    }
    stats.runs.reverse();
    let min_runs = threshold(options.min_fraction, runs.len());
    stats.min_runs = min_runs;

    let mut decided = decide_files(pooled, runs.len(), options, &mut stats);
    warnings.extend(changed_file_warnings(&decided.rewritten, &decided.upgraded));
    decided.extents.sort_by_key(|e| (e.need_ns, e.file, e.page));
    if let Some(cap) = options.max_bytes {
        warnings.extend(apply_cap(&mut decided.extents, cap, page_size, &mut stats));
    }
    stats.files_opened_only = decided.opened_only.len();
    let into_files = |pairs: Vec<(String, FileIdentity)>| -> Vec<PlanFile> {
        pairs
            .into_iter()
            .map(|(path, identity)| PlanFile::new(path, identity))
            .collect()
    };
    let files = number_files(
        into_files(decided.opened_only),
        into_files(decided.planned),
        &mut decided.extents,
    );

    let plan = Plan {
        page_size,
        source: PlanSource {
            profile: label.to_string(),
            runs: runs.iter().map(|r| r.id).collect(),
            min_runs,
            merge_gap_pages: options.merge_gap_pages,
            max_extent_pages: options.max_extent_pages,
            max_bytes: options.max_bytes,
            pages_from: if demand {
                "demand"
            } else {
                "touched-or-mapped"
            }
            .to_string(),
        },
        files,
        extents: decided.extents,
        lookups: lookups.lookups(min_runs),
    };
    Ok(Compiled {
        plan,
        warnings,
        stats,
    })
}

/// The page size all `runs` were traced with; pages of different sizes
/// cannot be pooled.
fn common_page_size(runs: &[Run]) -> Result<u64, CompileError> {
    let first = &runs[0];
    match runs
        .iter()
        .find(|r| r.start.page_size != first.start.page_size)
    {
        Some(other) => Err(CompileError::Runs(format!(
            "runs {} and {} were traced with different page sizes ({} and {} bytes)",
            first.id, other.id, first.start.page_size, other.start.page_size
        ))),
        None => Ok(first.start.page_size.max(1)),
    }
}

/// Each plannable file of the latest run, with the identity the plan
/// records and every other run is checked against.
fn reference_identities(files: &[File]) -> HashMap<String, Pooled> {
    let mut pooled: HashMap<String, Pooled> = HashMap::new();
    for file in files {
        if let (Some(path), Some(identity)) = (plannable_path(file), file.identity()) {
            pooled.entry(path.to_string()).or_default().identity = Some(identity);
        }
    }
    pooled
}

/// Whether an event of `kind` says a page was needed: the page was touched
/// ([`is_touch`]; reads count when every run was traced with readahead
/// off, `demand`), or, with readahead on, fault-around mapped it. The pool
/// decides, not each run, so that all runs count the same events.
fn is_need(kind: PageEventKind, demand: bool) -> bool {
    is_touch(kind, demand) || (!demand && kind == PageEventKind::Map)
}

/// The run's first-need time of each page its tree needed before it was
/// ready (the end of the run without a ready mark), per file id.
fn first_needs(run: &LoadedRun, demand: bool) -> HashMap<i64, HashMap<u64, i64>> {
    let until = run.ready_ns().or(run.run.ended_ns);
    let mut first: HashMap<i64, HashMap<u64, i64>> = HashMap::new();
    for e in run.tree_events() {
        if !is_need(e.kind, demand) || until.is_some_and(|u| e.t_ns > u) {
            continue;
        }
        let pages = first.entry(e.file_id).or_default();
        for page in event_pages(e) {
            pages
                .entry(page)
                .and_modify(|t| *t = (*t).min(e.t_ns))
                .or_insert(e.t_ns);
        }
    }
    first
}

/// Adds one run's needs to the pool, file by file, when the run saw the
/// file as the latest run did; notes files that changed between runs.
fn pool_run(
    run: &LoadedRun,
    mut first: HashMap<i64, HashMap<u64, i64>>,
    latest: RunId,
    page_size: u64,
    pooled: &mut HashMap<String, Pooled>,
    stats: &mut CompileStats,
) -> RunStats {
    let id = run.id();
    let mut needed = 0u64;
    for file in &run.files {
        let pages = first.remove(&file.id).unwrap_or_default();
        let (Some(path), Some(seen)) = (plannable_path(file), file.identity()) else {
            stats.pages_unplannable += pages.len() as u64;
            continue;
        };
        if pages.is_empty() && !file.opened_by_tree {
            continue;
        }
        let Some(entry) = pooled.get_mut(path) else {
            // Gone from the latest run: nothing to check it against, and
            // the program no longer uses it.
            continue;
        };
        let reference = entry
            .identity
            .as_ref()
            .expect("pooled files have an identity");
        let same = reference.same_as(&seen);
        if id == latest && !same {
            // Another inode at the path in the same run: the one the
            // program replaced (the path names the new one now).
            continue;
        }
        if id != latest && entry.changes_each_start.is_none() {
            entry.changes_each_start = Some(!same);
        }
        if !same {
            if !entry.runs_changed.contains(&id) {
                entry.runs_changed.push(id);
            }
            continue;
        }
        entry.runs_used += 1;
        needed += pages.len() as u64;
        // Pages past the end of the file (a mapping's tail) cannot be read.
        let end = reference.size.div_ceil(page_size);
        entry
            .needs
            .extend(pages.into_iter().filter(|&(p, _)| p < end));
    }
    stats.pages_unplannable += first.values().map(|p| p.len() as u64).sum::<u64>();
    RunStats {
        run: id,
        pages_needed: needed,
        until_ns: run.ready_ns().or(run.run.ended_ns),
        ready: run.ready_ns().is_some(),
    }
}

/// What becomes of the pooled files.
#[derive(Default)]
struct Decided {
    /// Files only opened (no page planned), by path.
    opened_only: Vec<(String, FileIdentity)>,
    /// Files with planned pages; `extents` number them by position here.
    planned: Vec<(String, FileIdentity)>,
    extents: Vec<Extent>,
    /// Files left out because they change at every start.
    rewritten: Vec<String>,
    /// Files that changed between runs and then stayed, with the last run
    /// that saw them otherwise.
    upgraded: Vec<String>,
}

/// Decides each pooled file, by path: left out (unused, rewritten at every
/// start), only opened, or planned with the extents of the pages enough of
/// the runs that saw it as it is now needed.
fn decide_files(
    mut pooled: HashMap<String, Pooled>,
    runs: usize,
    options: &CompileOptions,
    stats: &mut CompileStats,
) -> Decided {
    let mut paths: Vec<String> = pooled.keys().cloned().collect();
    paths.sort();
    let mut decided = Decided::default();
    for path in paths {
        let mut entry = pooled.remove(&path).expect("path from the map");
        if entry.runs_used == 0 {
            continue;
        }
        if entry.changes_each_start == Some(true) {
            stats.files_rewritten += 1;
            decided.rewritten.push(path);
            continue;
        }
        if !entry.runs_changed.is_empty() {
            entry.runs_changed.sort();
            let last = entry.runs_changed[entry.runs_changed.len() - 1];
            decided
                .upgraded
                .push(format!("{path} (changed after run {last})"));
        }
        // A file that changed counts over the runs that saw it as it is now.
        let needs_runs = threshold(options.min_fraction, runs - entry.runs_changed.len());
        let pages = pool(entry.needs, needs_runs, stats);
        let identity = entry.identity.expect("pooled files have an identity");
        if pages.is_empty() {
            if entry.runs_used >= needs_runs {
                decided.opened_only.push((path, identity));
            }
            continue;
        }
        let index = decided.planned.len();
        decided.planned.push((path, identity));
        decided
            .extents
            .extend(build_extents(index, &pages, options, stats));
    }
    decided
}

/// The warnings about files that changed between runs.
fn changed_file_warnings(rewritten: &[String], upgraded: &[String]) -> Vec<String> {
    let mut warnings = Vec::new();
    if !rewritten.is_empty() {
        warnings.push(format!(
            "{} files changed between the last two runs that used them: the program (or something beside it) \
             writes them at every start, so a plan of them would be stale; left out: {}",
            rewritten.len(),
            examples(rewritten)
        ));
    }
    if !upgraded.is_empty() {
        warnings.push(format!(
            "{} files changed between runs and then stayed as they are: only the runs that saw them as they \
             are now count for them: {}",
            upgraded.len(),
            examples(upgraded)
        ));
    }
    warnings
}

/// Drops the extents (in need order) past `cap` bytes: those needed last.
/// The warning saying what was dropped, if anything was.
fn apply_cap(
    extents: &mut Vec<Extent>,
    cap: u64,
    page_size: u64,
    stats: &mut CompileStats,
) -> Option<String> {
    let mut total = 0u64;
    let keep = extents
        .iter()
        .position(|e| {
            total = total.saturating_add(e.pages.saturating_mul(page_size));
            total > cap
        })
        .unwrap_or(extents.len());
    let dropped = extents.get(keep..).filter(|d| !d.is_empty())?;
    stats.pages_over_cap = dropped.iter().map(|e| e.pages).sum();
    let warning = format!(
        "the size cap dropped the {} extents needed last ({} pages, from {:.1} ms after launch on)",
        dropped.len(),
        stats.pages_over_cap,
        dropped[0].need_ns as f64 / 1e6
    );
    extents.truncate(keep);
    Some(warning)
}

/// The plan's files: `opened_only` first, as given, then `planned` in the
/// order the (sorted) extents first need them; renumbers the extents'
/// files, which index `planned`, to match. Planned files no extent names
/// are left out.
pub(crate) fn number_files(
    opened_only: Vec<PlanFile>,
    planned: Vec<PlanFile>,
    extents: &mut [Extent],
) -> Vec<PlanFile> {
    let mut files = opened_only;
    let mut renumber: Vec<Option<usize>> = vec![None; planned.len()];
    let mut slots: Vec<Option<PlanFile>> = planned.into_iter().map(Some).collect();
    for extent in extents {
        let new = *renumber[extent.file].get_or_insert_with(|| {
            files.push(
                slots[extent.file]
                    .take()
                    .expect("each file is numbered once"),
            );
            files.len() - 1
        });
        extent.file = new;
    }
    files
}

/// The runs to pool, oldest first.
fn select_runs(profile: &Profile, options: &CompileOptions) -> Result<Vec<Run>, CompileError> {
    let all = profile.runs()?;
    // A run whose program never started has nothing to plan from.
    let started = |r: &Run| r.end_reason != Some(EndReason::Failed);
    let runs: Vec<Run> = match &options.runs {
        // Starts a prefetcher served read what the plan said, not what the
        // program needed: they refine a plan (`crate::refine`), they do not
        // seed one.
        None => {
            let mut chosen = Vec::new();
            for run in all.into_iter().filter(|r| r.complete && started(r)) {
                if !served_by_prefetcher(&run, &profile.processes(run.id)?) {
                    chosen.push(run);
                }
            }
            chosen
        }
        Some(ids) => {
            let mut chosen = Vec::new();
            for id in ids {
                let run = profile.run(Some(*id))?;
                if !started(&run) {
                    return Err(CompileError::Runs(format!(
                        "{}: run {id} never started its program: nothing to plan from",
                        profile.path().display()
                    )));
                }
                if !chosen.iter().any(|r: &Run| r.id == run.id) {
                    chosen.push(run);
                }
            }
            chosen.sort_by_key(|r| r.id);
            chosen
        }
    };
    if runs.is_empty() {
        return Err(CompileError::Runs(format!(
            "{}: no complete run of a started program to compile a plan from (trace the program first; \
             starts served by a prefetcher count only when named with --runs)",
            profile.path().display()
        )));
    }
    Ok(runs)
}

/// Whether a prefetcher served `run`, whose rows are `processes`: a start
/// through `coldstart run` or `coldstart-run` (the prefetcher in the
/// tree), or one the system-wide service served from outside the tree
/// ([`coldstart_analyze::loaded::prefetcher_tasks`]).
pub fn served_by_prefetcher(run: &Run, processes: &[coldstart_profile::Process]) -> bool {
    !coldstart_analyze::loaded::prefetcher_tasks(run, processes).is_empty()
}

/// The first few of `items`, and how many more.
fn examples(items: &[String]) -> String {
    const SHOWN: usize = 3;
    let mut text = items[..items.len().min(SHOWN)].join(", ");
    if items.len() > SHOWN {
        text.push_str(&format!(" and {} more", items.len() - SHOWN));
    }
    text
}

/// At least `fraction` of `runs`, rounded up, and at least one.
pub fn threshold(fraction: f64, runs: usize) -> usize {
    // The epsilon keeps 0.3 × 10 at 3, not 4.
    ((fraction * runs as f64 - 1e-9).ceil() as usize).clamp(1, runs.max(1))
}

/// A path worth prefetching: resolved, and not one of the kernel's own
/// files (metadata buffers, shared memory, /proc).
pub(crate) fn plannable_path(file: &File) -> Option<&str> {
    file.path.as_deref().filter(|_| !file.in_kernel())
}

/// Pages at least `min_runs` runs needed, sorted, with the lower median of
/// their first-need times.
fn pool(mut needs: Vec<(u64, i64)>, min_runs: usize, stats: &mut CompileStats) -> Vec<(u64, i64)> {
    needs.sort_unstable();
    let mut pages = Vec::new();
    for group in needs.chunk_by(|a, b| a.0 == b.0) {
        if group.len() >= min_runs {
            // Sorted by time within the page.
            pages.push((group[0].0, lower_median(group).1));
        } else {
            stats.pages_below_threshold += 1;
        }
    }
    stats.pages_needed += pages.len() as u64;
    pages
}

/// Extents of one file's needed pages (sorted): consecutive pages joined,
/// gaps of at most `merge_gap_pages` filled, then split at
/// `max_extent_pages`; each needed when its earliest page is.
pub(crate) fn build_extents(
    file: usize,
    pages: &[(u64, i64)],
    options: &CompileOptions,
    stats: &mut CompileStats,
) -> Vec<Extent> {
    let max = options.max_extent_pages.max(1);
    let mut out = Vec::new();
    let mut start = 0;
    while start < pages.len() {
        let mut end = start + 1;
        while end < pages.len() && pages[end].0 - pages[end - 1].0 - 1 <= options.merge_gap_pages {
            end += 1;
        }
        let group = &pages[start..end];
        // Split into pieces of at most `max` pages; a piece holding only gap
        // pages cannot occur, since every piece starts at a needed page.
        let mut i = 0;
        while i < group.len() {
            let piece_start = group[i].0;
            let mut need = group[i].1;
            let mut j = i + 1;
            while j < group.len() && group[j].0 < piece_start.saturating_add(max) {
                need = need.min(group[j].1);
                j += 1;
            }
            let piece_end = group[j - 1].0 + 1;
            stats.pages_merged_gaps += piece_end - piece_start - (j - i) as u64;
            out.push(Extent {
                file,
                page: piece_start,
                pages: piece_end - piece_start,
                need_ns: need,
            });
            i = j;
        }
        start = end;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_byte_defaults_are_whole_pages_of_any_size() {
        // 8 KiB gap and 4 MiB extents: 2 and 1024 pages of 4 KiB, 0 and
        // 256 of 16 KiB, 0 and 64 of 64 KiB.
        for (page_size, gap, extent) in [(4096, 2, 1024), (16384, 0, 256), (65536, 0, 64)] {
            let options = CompileOptions::for_page_size(page_size);
            assert_eq!(
                (options.merge_gap_pages, options.max_extent_pages),
                (gap, extent),
                "{page_size}"
            );
            assert_eq!(options.min_fraction, 0.25);
        }
        let default = CompileOptions::default();
        assert_eq!(
            (default.merge_gap_pages, default.max_extent_pages),
            (2, 1024)
        );
        // An extent is at least one page, however large the pages.
        assert_eq!(CompileOptions::for_page_size(8 << 20).max_extent_pages, 1);
    }
}
