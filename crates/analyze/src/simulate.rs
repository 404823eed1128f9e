//! Predicts what a traced start would read under other readahead settings
//! or another layout: replays the pages one run touched, in time order,
//! through the [readahead model](crate::readahead), file by file, and
//! optionally sets the prediction next to what another run measured.
//!
//! The best source is a run traced with readahead off (`--read-ahead-kb
//! 0`): its faults and reads are exactly the pages the program demanded,
//! in the order it demanded them. Any other run works but its faults are
//! shaped by its own readahead (pages fault-around mapped never fault), so
//! the prediction says so.

use crate::loaded::{LoadedRun, demand_reads, event_pages};
use crate::pages::{self, PageSet};
use crate::readahead::{
    Access, AccessKind, Decision, FileSimulation, KernelSettings, Mapping, Prediction,
};
use crate::relayout::Relayout;
use crate::run::label;
use coldstart_profile::{FileId, PageEventKind, Profile, Readahead, ReadaheadKind, RunId};
use globset::GlobMatcher;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;

/// What to simulate.
#[derive(Debug, Clone, Default)]
pub struct SimulateOptions {
    /// Run whose accesses are replayed; the latest complete run with
    /// readahead off, else the latest complete run, when None.
    pub run: Option<RunId>,
    /// Device read_ahead_kb to predict for; the source run's when None.
    pub read_ahead_kb: Option<u64>,
    /// fault_around_bytes; the source run's (else 65536) when None.
    pub fault_around_bytes: Option<u64>,
    /// Only files whose path matches.
    pub file: Option<GlobMatcher>,
    /// A run traced with the predicted setting, to compare with.
    pub against: Option<RunId>,
    /// Layouts to predict instead of the current one, by file path.
    pub relayouts: Vec<Relayout>,
}

/// The prediction for one run.
#[derive(Debug, Clone, Serialize)]
pub struct SimulationReport {
    pub profile: String,
    /// The run whose accesses were replayed.
    pub source_run: RunId,
    /// Its read_ahead_kb; 0 means its accesses are exactly the demanded pages.
    pub source_read_ahead_kb: Option<u64>,
    pub read_ahead_kb: u64,
    pub fault_around_bytes: u64,
    pub page_size: u64,
    /// The run measured for comparison.
    pub against_run: Option<RunId>,
    pub files: Vec<FilePrediction>,
    pub totals: SimulationTotals,
    pub warnings: Vec<String>,
}

/// One file's prediction.
#[derive(Debug, Clone, Serialize)]
pub struct FilePrediction {
    pub path: String,
    /// Pages in the file.
    pub pages: u64,
    /// Pages known to be cached when the start began (read by other
    /// processes, or touched but never read): such a file was not cold, and
    /// what else was cached is unknown, so it is left out of the cold totals.
    pub cached_at_start: u64,
    /// Distinct pages the replayed accesses touched.
    pub pages_touched: u64,
    pub pages_read: u64,
    pub read_requests: u64,
    /// Accesses that missed the cache (major faults, reads that waited).
    pub misses: u64,
    /// Requests per readahead path.
    pub requests_by_decision: BTreeMap<String, u64>,
    /// True when the file was laid out anew from an order.
    pub relaid: bool,
    /// How much of the order the file could place, when relaid.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub relayout: Option<crate::relayout::RelayoutSummary>,
    /// What the comparison run read of the same file.
    pub measured: Option<Measured>,
}

/// Measured figures of the comparison run.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Measured {
    pub pages_read: u64,
    pub read_requests: u64,
}

#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct SimulationTotals {
    pub files: u64,
    pub pages_touched: u64,
    pub pages_read: u64,
    pub read_requests: u64,
    pub misses: u64,
    pub measured_pages_read: Option<u64>,
    pub measured_read_requests: Option<u64>,
    /// Over the files that were cold at the start (no cached pages known).
    pub cold: ColdTotals,
}

/// Totals over the files that were cold when the start began.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct ColdTotals {
    pub files: u64,
    pub pages_read: u64,
    pub measured_pages_read: Option<u64>,
}

/// Errors are the profile's, or a file that cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum SimulateError {
    #[error(transparent)]
    Profile(#[from] coldstart_profile::Error),
    #[error("{0}")]
    Input(String),
}

/// Replays a run through the readahead model.
pub fn simulate(
    profile: &Profile,
    options: &SimulateOptions,
) -> Result<SimulationReport, SimulateError> {
    let source = match options.run {
        Some(id) => profile.run(Some(id))?,
        None => default_source(profile)?,
    };
    let page_size = source.start.page_size.max(1);
    let mut warnings = Vec::new();
    let (read_ahead_kb, fault_around_bytes) =
        predicted_settings(profile, options, &source, &mut warnings)?;
    let settings = KernelSettings::new(read_ahead_kb, fault_around_bytes, page_size);

    let against = options
        .against
        .map(|run| LoadedRun::load(profile, Some(run)))
        .transpose()?;
    let source = LoadedRun::load_rows(profile, source)?;
    let streams = access_streams(&source);
    // Pages other processes (coldstart itself, shared libraries it uses)
    // had cached: the comparison run's when there is one, as its
    // measurement started from that state.
    let preloaded = cached_by_others(against.as_ref().unwrap_or(&source));
    let measured = match &against {
        Some(against) => {
            if against
                .run
                .start
                .read_ahead_kb
                .is_some_and(|kb| kb != read_ahead_kb)
            {
                warnings.push(format!(
                    "run {} was traced with read_ahead_kb {}, not the {read_ahead_kb} predicted for",
                    against.id(),
                    against.run.start.read_ahead_kb.unwrap_or_default()
                ));
            }
            Some(measured_reads(against))
        }
        None => None,
    };

    let mut files = Vec::new();
    let mut unreadable = Vec::new();
    for stream in streams {
        if let Some(glob) = &options.file
            && !glob.is_match(&stream.path)
        {
            continue;
        }
        let warm = preloaded
            .get(&stream.path)
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        let relayout = options.relayouts.iter().find(|r| r.path == stream.path);
        files.extend(predict_file(
            &stream,
            settings,
            page_size,
            warm,
            relayout,
            measured.as_ref(),
            &mut unreadable,
        ));
    }
    for relayout in &options.relayouts {
        if !files.iter().any(|f| f.path == relayout.path) {
            return Err(SimulateError::Input(format!(
                "run {} never touched {}: nothing to predict for its new layout",
                source.id(),
                relayout.path
            )));
        }
    }
    if !unreadable.is_empty() {
        warnings.push(format!(
            "{} ELF files could not be read, so each was taken as one read-only mapping \
             (first: {})",
            unreadable.len(),
            unreadable[0]
        ));
    }
    files.sort_by(|a, b| b.pages_read.cmp(&a.pages_read).then(a.path.cmp(&b.path)));
    let totals = totals(&files, measured.is_some());
    Ok(SimulationReport {
        profile: profile.path().display().to_string(),
        source_run: source.id(),
        source_read_ahead_kb: source.run.start.read_ahead_kb,
        read_ahead_kb,
        fault_around_bytes,
        page_size,
        against_run: options.against,
        files,
        totals,
        warnings,
    })
}

/// The read_ahead_kb and fault_around_bytes to predict for: the options',
/// else the comparison run's (read_ahead_kb) or the source run's. Warns
/// when the source run's faults are shaped by its own readahead.
fn predicted_settings(
    profile: &Profile,
    options: &SimulateOptions,
    source: &coldstart_profile::Run,
    warnings: &mut Vec<String>,
) -> Result<(u64, u64), SimulateError> {
    if !demand_reads(source) {
        warnings.push(format!(
            "run {} was traced with read_ahead_kb {}: its faults are shaped by that readahead \
             (pages fault-around mapped never fault), so predictions lean on it; trace once \
             with --read-ahead-kb 0 for the pages the program really demands",
            source.id,
            source
                .start
                .read_ahead_kb
                .map_or("unknown".to_string(), |kb| kb.to_string())
        ));
    }
    let read_ahead_kb = match (options.read_ahead_kb, options.against) {
        (Some(kb), _) => kb,
        (None, Some(against)) => {
            profile
                .run(Some(against))?
                .start
                .read_ahead_kb
                .ok_or_else(|| {
                    SimulateError::Input(format!(
                        "run {against} does not record its read_ahead_kb; give --read-ahead-kb"
                    ))
                })?
        }
        (None, None) => source.start.read_ahead_kb.ok_or_else(|| {
            SimulateError::Input(format!(
                "run {} does not record its read_ahead_kb; give --read-ahead-kb",
                source.id
            ))
        })?,
    };
    let fault_around_bytes = options
        .fault_around_bytes
        .or(source.start.fault_around_bytes)
        .unwrap_or(65536);
    Ok((read_ahead_kb, fault_around_bytes))
}

/// One file's accesses replayed through the model, from the pages cached
/// before the start (`warm`), in its new layout when `relayout` gives one;
/// None for a file of unknown or zero size. An ELF file that cannot be
/// read is noted in `unreadable` and taken as one read-only mapping.
fn predict_file(
    stream: &Stream,
    settings: KernelSettings,
    page_size: u64,
    warm: &[(u64, u64)],
    relayout: Option<&Relayout>,
    measured: Option<&HashMap<String, Measured>>,
    unreadable: &mut Vec<String>,
) -> Option<FilePrediction> {
    let pages = stream.size?.div_ceil(page_size);
    if pages == 0 {
        return None;
    }
    let mappings = match mappings_of(Path::new(&stream.path), page_size) {
        Ok(m) => m,
        Err(reason) => {
            unreadable.push(format!("{}: {reason}", stream.path));
            Vec::new()
        }
    };
    let mut sim = FileSimulation::new(settings, pages, &mappings);
    for &(first, npages) in warm {
        sim.preload(first, npages);
    }
    let cached_at_start = PageSet::from_ranges(warm.to_vec()).len();
    match relayout {
        Some(relayout) => {
            for access in relaid_accesses(relayout, &stream.accesses, page_size) {
                sim.access(access);
            }
        }
        None => stream.accesses.iter().for_each(|(_, a)| sim.access(*a)),
    }
    let prediction = sim.finish();
    Some(file_report(
        &stream.path,
        pages,
        cached_at_start,
        &prediction,
        relayout.map(|r| r.summary.clone()),
        measured.map(|m| {
            m.get(&stream.path)
                .or_else(|| relayout.and_then(|_| relinked_copy(m, &stream.path)))
                .copied()
                .unwrap_or(Measured {
                    pages_read: 0,
                    read_requests: 0,
                })
        }),
    ))
}

/// The accesses a start makes to a file laid out anew. With the functions
/// it called (a function trace), accesses to relaid code are those
/// functions at their new places, at the time of their first call; other
/// accesses (and all of them without a function trace) follow each touched
/// old page's bytes to where they move, which counts every symbol on a
/// touched page as used.
fn relaid_accesses(relayout: &Relayout, accesses: &[(i64, Access)], page_size: u64) -> Vec<Access> {
    let Some(functions) = &relayout.functions else {
        return accesses
            .iter()
            .flat_map(|(_, access)| {
                relayout
                    .pages_for(access.page, page_size)
                    .into_iter()
                    .map(|page| Access { page, ..*access })
            })
            .collect();
    };
    let Some(process) = accesses.first().map(|(_, a)| a.process) else {
        return Vec::new();
    };
    // Old pages holding code that ran: a fault on one is the trace's code
    // running, replayed below at its new place.
    let ran: HashSet<u64> = functions
        .iter()
        .flat_map(|f| f.offset / page_size..(f.offset + f.size.max(1)).div_ceil(page_size))
        .collect();
    let mut merged: Vec<(i64, Access)> = accesses
        .iter()
        .flat_map(|&(t, access)| {
            // Relaid code is replayed from the trace of what ran, but for
            // code no such trace covers: a fault on a page where nothing
            // the trace saw run lies was for it (a page holding both was
            // faulted in for the code that ran, as far as anyone can tell).
            let pages = if relayout.is_relaid_code(access.page, page_size) {
                let mut pages = if ran.contains(&access.page) {
                    Vec::new()
                } else {
                    relayout.untraced_pages_for(access.page, page_size)
                };
                if relayout.holds_other_bytes(access.page, page_size) {
                    pages.push(access.page);
                }
                pages
            } else {
                relayout.pages_for(access.page, page_size)
            };
            pages
                .into_iter()
                .map(move |page| (t, Access { page, ..access }))
        })
        .collect();
    for function in functions {
        let Some(new) = relayout.new_offset(function.offset) else {
            continue;
        };
        let end = new + function.size.max(1);
        for page in new / page_size..end.div_ceil(page_size) {
            merged.push((
                function.t_ns,
                Access {
                    process,
                    page,
                    kind: AccessKind::Fault,
                },
            ));
        }
    }
    merged.sort_by_key(|(t, _)| *t);
    merged.into_iter().map(|(_, a)| a).collect()
}

/// The traced files a `--binary` pattern names: a pattern with glob
/// characters, or an absolute path, as it is; any other text as a path
/// suffix, so a plain name matches the traced path ending in it.
pub fn binary_matcher(pattern: &str) -> Result<GlobMatcher, SimulateError> {
    let glob = if pattern.contains(['*', '?', '[']) || pattern.starts_with('/') {
        pattern.to_string()
    } else {
        format!("*{pattern}")
    };
    globset::GlobBuilder::new(&glob)
        .literal_separator(false)
        .build()
        .map(|g| g.compile_matcher())
        .map_err(|e| SimulateError::Input(format!("--binary {pattern:?} is not a valid glob: {e}")))
}

/// The one file `binary` (matched by `glob`) names in the run a simulation
/// replays (`run`, else [`default_source`]), as that run spells its path.
pub fn binary_path_in_run(
    profile: &Profile,
    run: Option<RunId>,
    glob: &GlobMatcher,
    binary: &str,
) -> Result<String, SimulateError> {
    let run = match run {
        Some(id) => profile.run(Some(id))?,
        None => default_source(profile)?,
    };
    let paths: Vec<String> = profile
        .files(run.id)?
        .into_iter()
        .filter_map(|f| f.path)
        .filter(|p| glob.is_match(p))
        .collect();
    match paths.as_slice() {
        [one] => Ok(one.clone()),
        [] => Err(SimulateError::Input(format!(
            "run {} of {} has no file matching --binary {binary:?}",
            run.id,
            profile.path().display()
        ))),
        many => Err(SimulateError::Input(format!(
            "--binary {binary:?} matches {} files of run {} ({}); give a longer path",
            many.len(),
            run.id,
            many.iter().take(3).cloned().collect::<Vec<_>>().join(", ")
        ))),
    }
}

/// The latest complete run traced with readahead off, else the latest
/// complete run.
pub fn default_source(profile: &Profile) -> Result<coldstart_profile::Run, SimulateError> {
    let runs = profile.runs()?;
    let complete = runs.iter().rev().filter(|r| r.complete);
    let chosen = complete
        .clone()
        .find(|r| demand_reads(r))
        .or_else(|| runs.iter().rev().find(|r| r.complete));
    match chosen {
        Some(run) => Ok(run.clone()),
        None => Err(SimulateError::Input(format!(
            "{} holds no complete run to replay",
            profile.path().display()
        ))),
    }
}

/// The synchronous readahead calls of a run (page_cache_sync_ra: a read
/// that found its first page uncached), each matched at most once to the
/// read its page then entered the cache by.
struct SyncReads {
    /// Per (file, task), in time order.
    calls: HashMap<(FileId, i32), Vec<SyncRead>>,
}

/// One synchronous readahead call.
struct SyncRead {
    t_ns: i64,
    page: u64,
    /// Pages the read asked for.
    pages: u64,
    matched: bool,
}

impl SyncReads {
    fn of(run: &LoadedRun) -> SyncReads {
        let mut calls: HashMap<(FileId, i32), Vec<SyncRead>> = HashMap::new();
        for row in &run.readahead {
            if row.kind == ReadaheadKind::Sync {
                calls
                    .entry((row.file_id, row.pid))
                    .or_default()
                    .push(SyncRead {
                        t_ns: row.t_ns,
                        page: row.page,
                        pages: row.req_count.unwrap_or(1).max(1),
                        matched: false,
                    });
            }
        }
        SyncReads { calls }
    }

    /// The pages requested by the unmatched call of the same task and file
    /// that began at `event`'s page at or before it, when there is one.
    fn take(&mut self, event: &coldstart_profile::PageEvent) -> Option<u64> {
        let calls = self.calls.get_mut(&(event.file_id, event.pid))?;
        let call = calls
            .iter_mut()
            .rev()
            .find(|c| !c.matched && c.t_ns <= event.t_ns && c.page == event.page)?;
        call.matched = true;
        Some(call.pages)
    }
}

/// One file's accesses by the traced tree, in time order.
struct Stream {
    path: String,
    size: Option<u64>,
    /// (ns after the start, access), in time order.
    accesses: Vec<(i64, Access)>,
}

/// Each file's accesses by the traced tree: the events that touched its
/// pages ([`LoadedRun::touches`]). With readahead off, a page the tree read
/// that no fault or read() demanded first was either read by the kernel
/// for the task (the exec reading an ELF header: a synchronous readahead
/// row covers it, and the reader's own access event comes only after the
/// page is in) or asked for explicitly (madvise, fadvise, readahead(2));
/// with readahead on, reads are readahead's own and not accesses.
fn access_streams(run: &LoadedRun) -> Vec<Stream> {
    // Per file: its accesses, and the pages demanded so far.
    type Demanded = (Vec<(i64, Access)>, HashSet<u64>);
    let mut by_file: HashMap<FileId, Demanded> = HashMap::new();
    let mut sync_reads = SyncReads::of(run);
    for event in &run.events {
        let Some(process) = run.tree_process(event.pid) else {
            continue;
        };
        // Every file the tree used gets a stream, even one it only mapped.
        let (accesses, demanded) = by_file.entry(event.file_id).or_default();
        if !run.touches(event) {
            continue;
        }
        let pages = event_pages(event);
        let kind = match event.kind {
            PageEventKind::Fault | PageEventKind::Touch => {
                // One fault per page (the recorder writes one page).
                for page in pages {
                    demanded.insert(page);
                    accesses.push((
                        event.t_ns,
                        Access {
                            process,
                            page,
                            kind: AccessKind::Fault,
                        },
                    ));
                }
                continue;
            }
            PageEventKind::Access => {
                demanded.extend(pages);
                AccessKind::Read {
                    pages: event.npages,
                }
            }
            PageEventKind::Read if !demanded.contains(&event.page) => {
                if let Some(pages) = sync_reads.take(event) {
                    demanded.extend(event.page..event.page.saturating_add(pages));
                    accesses.push((
                        event.t_ns,
                        Access {
                            process,
                            page: event.page,
                            kind: AccessKind::Read { pages },
                        },
                    ));
                    continue;
                }
                if let Some((
                    _,
                    Access {
                        process: last_process,
                        page,
                        kind: AccessKind::Prefetch { pages },
                    },
                )) = accesses.last_mut()
                    && *last_process == process
                    && page.saturating_add(*pages) == event.page
                {
                    *pages = pages.saturating_add(event.npages);
                    continue;
                }
                AccessKind::Prefetch {
                    pages: event.npages,
                }
            }
            _ => continue,
        };
        accesses.push((
            event.t_ns,
            Access {
                process,
                page: event.page,
                kind,
            },
        ));
    }
    run.files
        .iter()
        .filter_map(|file| {
            let (accesses, _) = by_file.remove(&file.id)?;
            file.path.as_ref()?;
            Some(Stream {
                path: label(file),
                size: file.size,
                accesses,
            })
        })
        .collect()
}

/// Pages that were in the page cache without the traced tree reading them
/// during a run, by path: pages other processes read (coldstart itself,
/// libraries it shares with the program), and pages the tree touched that
/// never entered the cache while it ran, so were cached before it started.
fn cached_by_others(run: &LoadedRun) -> HashMap<String, Vec<(u64, u64)>> {
    let mut read: HashMap<FileId, Vec<(u64, u64)>> = HashMap::new();
    let mut touched: HashMap<FileId, Vec<(u64, u64)>> = HashMap::new();
    let mut out: HashMap<FileId, Vec<(u64, u64)>> = HashMap::new();
    for event in &run.events {
        let in_tree = run.in_tree(event.pid);
        match event.kind {
            PageEventKind::Read if in_tree => read.entry(event.file_id).or_default(),
            PageEventKind::Read => out.entry(event.file_id).or_default(),
            // Touched reads (readahead off) were taken above: they entered
            // the cache while the tree ran.
            _ if in_tree && run.touches(event) => touched.entry(event.file_id).or_default(),
            _ => continue,
        }
        .push(range_of(event));
    }
    for (file, ranges) in touched {
        let read = PageSet::from_ranges(read.remove(&file).unwrap_or_default());
        let before = PageSet::from_ranges(ranges).difference(&read);
        if !before.is_empty() {
            out.entry(file)
                .or_default()
                .extend(before.extents().iter().map(|&(a, b)| (a, b - a)));
        }
    }
    run.files
        .iter()
        .filter_map(|f| Some((label(f), out.remove(&f.id)?)))
        .collect()
}

/// What a run measured of the relinked copy of `path` (a file laid out
/// anew is usually built into another directory): the one file of the
/// measured run with the same file name, if there is exactly one.
fn relinked_copy<'a>(measured: &'a HashMap<String, Measured>, path: &str) -> Option<&'a Measured> {
    let name = Path::new(path).file_name()?;
    let mut same = measured
        .iter()
        .filter(|(other, _)| Path::new(other.as_str()).file_name() == Some(name));
    match (same.next(), same.next()) {
        (Some((_, measured)), None) => Some(measured),
        _ => None,
    }
}

/// Pages each file's page cache took in during a run, by path, and the
/// read requests that took (counted as `coldstart report` counts them).
fn measured_reads(run: &LoadedRun) -> HashMap<String, Measured> {
    let mut reads: HashMap<FileId, Vec<&coldstart_profile::PageEvent>> = HashMap::new();
    for event in run.tree_events() {
        if event.kind == PageEventKind::Read {
            reads.entry(event.file_id).or_default().push(event);
        }
    }
    let mut decisions: HashMap<FileId, Vec<&Readahead>> = HashMap::new();
    for decision in &run.readahead {
        decisions
            .entry(decision.file_id)
            .or_default()
            .push(decision);
    }
    let mut out = HashMap::new();
    for file in &run.files {
        let Some(file_reads) = reads.get(&file.id) else {
            continue;
        };
        let set = PageSet::from_ranges(file_reads.iter().map(|e| range_of(e)).collect());
        let ra = decisions.get(&file.id).map(Vec::as_slice).unwrap_or(&[]);
        out.insert(
            label(file),
            Measured {
                pages_read: set.len(),
                read_requests: pages::read_requests(file_reads, ra).len() as u64,
            },
        );
    }
    out
}

/// An event's pages as (first page, count).
fn range_of(event: &coldstart_profile::PageEvent) -> (u64, u64) {
    let pages = event_pages(event);
    (pages.start, pages.end - pages.start)
}

/// The file's loadable segments as mappings, as ld.so maps them: one
/// mapping per segment, from the segment's first page to its last.
/// Files that are not ELF (data files, caches) have no segments: the
/// caller treats them as one read-only mapping.
pub fn mappings_of(path: &Path, page_size: u64) -> Result<Vec<Mapping>, String> {
    if !coldstart_system::build_id::is_elf_file(path) {
        return Ok(Vec::new());
    }
    let options = coldstart_binary::InspectOptions { page_size };
    let inspection = coldstart_binary::inspect_path(path, &options).map_err(|e| e.to_string())?;
    let mut mappings: Vec<Mapping> = inspection
        .segments
        .iter()
        .filter(|s| s.kind == "LOAD" && s.file_size > 0)
        .map(|s| Mapping {
            first: s.offset / page_size,
            end: (s.offset + s.file_size).div_ceil(page_size),
            exec: s.flags.contains('X'),
            write: s.flags.contains('W'),
            virtual_delta: (s.address / page_size) as i64 - (s.offset / page_size) as i64,
        })
        .collect();
    mappings.sort_by_key(|m| m.first);
    // Segments that share a page: the later mapping owns it from its start.
    for i in 1..mappings.len() {
        if mappings[i - 1].end > mappings[i].first {
            mappings[i - 1].end = mappings[i].first;
        }
    }
    mappings.retain(|m| m.end > m.first);
    Ok(mappings)
}

fn file_report(
    path: &str,
    pages: u64,
    cached_at_start: u64,
    prediction: &Prediction,
    relayout: Option<crate::relayout::RelayoutSummary>,
    measured: Option<Measured>,
) -> FilePrediction {
    let mut by_decision = BTreeMap::new();
    for request in &prediction.requests {
        *by_decision
            .entry(decision_name(request.decision).to_string())
            .or_insert(0) += 1;
    }
    FilePrediction {
        path: path.to_string(),
        pages,
        cached_at_start,
        pages_touched: prediction.pages_touched,
        pages_read: prediction.pages_read,
        read_requests: prediction.requests.len() as u64,
        misses: prediction.misses,
        requests_by_decision: by_decision,
        relaid: relayout.is_some(),
        relayout,
        measured,
    }
}

fn decision_name(decision: Decision) -> &'static str {
    match decision {
        Decision::ExecFault => "exec-fault",
        Decision::AroundFault => "around-fault",
        Decision::SinglePage => "single-page",
        Decision::SyncRead => "sync-read",
        Decision::Async => "async",
        Decision::Explicit => "explicit",
    }
}

fn totals(files: &[FilePrediction], measured: bool) -> SimulationTotals {
    let mut totals = SimulationTotals {
        files: files.len() as u64,
        ..SimulationTotals::default()
    };
    for file in files {
        totals.pages_touched += file.pages_touched;
        totals.pages_read += file.pages_read;
        totals.read_requests += file.read_requests;
        totals.misses += file.misses;
    }
    let cold = files.iter().filter(|f| f.cached_at_start == 0);
    totals.cold = ColdTotals {
        files: cold.clone().count() as u64,
        pages_read: cold.clone().map(|f| f.pages_read).sum(),
        measured_pages_read: measured
            .then(|| cold.filter_map(|f| f.measured).map(|m| m.pages_read).sum()),
    };
    if measured {
        totals.measured_pages_read = Some(
            files
                .iter()
                .filter_map(|f| f.measured)
                .map(|m| m.pages_read)
                .sum(),
        );
        totals.measured_read_requests = Some(
            files
                .iter()
                .filter_map(|f| f.measured)
                .map(|m| m.read_requests)
                .sum(),
        );
    }
    totals
}
