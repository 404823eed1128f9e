//! One run's report: per file (and ELF section, and symbol) what was read
//! into the page cache versus what startup touched, how many read
//! requests that took and how far the reads jumped around.
//!
//! Only events of the traced process tree, and of the prefetcher's tasks
//! outside it (the system-wide service that served the start; see
//! [`crate::loaded::prefetcher_tasks`]), count toward a file's figures, so
//! a start the service served reads as one `coldstart run` served; files
//! only other processes read are listed apart.

use crate::loaded::{LoadedRun, event_pages, page_offset};
use crate::loader::analyze_loader;
use crate::model::*;
use crate::pages::{self, PageSet, Request};
use coldstart_binary::OffsetIndex;
use coldstart_profile::{
    File, FileId, FileIdentity, LoaderSpan, PageEvent, PageEventKind, Process, Profile, Readahead,
    Run, RunId,
};
use globset::GlobMatcher;
use std::collections::HashMap;
use std::path::Path;

/// What to analyse.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// The run; the latest complete one when None.
    pub run: Option<RunId>,
    /// Only files whose path matches.
    pub file: Option<GlobMatcher>,
    /// Include page lists.
    pub pages: bool,
    /// Attribute to ELF sections and symbols (reads the files).
    pub attribute: bool,
}

/// Errors are the profile's: a missing run, a damaged file.
pub type Result<T> = std::result::Result<T, coldstart_profile::Error>;

/// Analyses one run of a profile.
pub fn analyze(profile: &Profile, options: &Options) -> Result<(RunReport, Timeline)> {
    let loaded = LoadedRun::load(profile, options.run)?;
    let loader_spans = profile.loader_spans(loaded.id())?;
    Ok(report(profile, &loaded, &loader_spans, options))
}

/// The report and timeline of a run already loaded from `profile`, with
/// its loader spans.
pub fn report(
    profile: &Profile,
    loaded: &LoadedRun,
    loader_spans: &[LoaderSpan],
    options: &Options,
) -> (RunReport, Timeline) {
    let run = &loaded.run;
    let page_size = loaded.page_size();
    let names: HashMap<i32, &Process> = loaded.processes.iter().map(|p| (p.pid, p)).collect();
    let prefetcher = loaded.prefetcher_tasks();
    let ours = |pid: i32| loaded.in_tree(pid) || prefetcher.contains(&pid);
    let mut by_file: HashMap<FileId, Vec<&PageEvent>> = HashMap::new();
    for event in &loaded.events {
        by_file.entry(event.file_id).or_default().push(event);
    }
    let mut ra_by_file: HashMap<FileId, Vec<&Readahead>> = HashMap::new();
    for decision in &loaded.readahead {
        ra_by_file
            .entry(decision.file_id)
            .or_default()
            .push(decision);
    }

    let mut reports = Vec::new();
    let mut outside = Vec::new();
    let mut timelines = Vec::new();
    for file in &loaded.files {
        let label = label(file);
        if let Some(glob) = &options.file
            && !glob.is_match(&label)
        {
            continue;
        }
        let all = by_file.get(&file.id).map(Vec::as_slice).unwrap_or(&[]);
        let (tree, others): (Vec<&PageEvent>, Vec<&PageEvent>) =
            all.iter().partition(|e| ours(e.pid));
        if tree.is_empty() {
            let read = set_of(&others, |e| e.kind == PageEventKind::Read);
            if !read.is_empty() {
                outside.push(OutsideFile {
                    path: label,
                    pages_read: read.len(),
                    processes: process_names(others.iter().map(|e| e.pid), &names),
                });
            }
            continue;
        }
        let ra = ra_by_file.get(&file.id).map(Vec::as_slice).unwrap_or(&[]);
        let (report, timeline) = file_report(
            loaded,
            file,
            label,
            &tree,
            // Another process evicting pages (kswapd, DAMON) did not use them.
            others.iter().any(|e| e.kind != PageEventKind::Evict),
            ra,
            &names,
            options,
        );
        reports.push(report);
        timelines.push(timeline);
    }
    let (reports, timelines) = biggest_readers_first(reports, timelines);
    outside.sort_by(|a, b| b.pages_read.cmp(&a.pages_read).then(a.path.cmp(&b.path)));
    let ready_ns = loaded.ready_ns();
    let process_infos: Vec<ProcessInfo> = loaded
        .tree_processes()
        .chain(
            loaded
                .processes
                .iter()
                .filter(|p| !p.in_tree && prefetcher.contains(&p.pid)),
        )
        .cloned()
        .collect();
    let mut prefetcher_tasks: Vec<i32> = prefetcher.into_iter().collect();
    prefetcher_tasks.sort_unstable();
    let totals = totals(&reports);
    // A damaged cost leaves the corrected figures out; the run itself reads.
    let probe_hit_ns = profile.run_loader_hit_ns(loaded.id()).ok().flatten();
    let loader = analyze_loader(loaded, loader_spans, probe_hit_ns, options.attribute);
    let mut warnings = run_warnings(run);
    warnings.extend(loader.warnings);
    let report = RunReport {
        profile: profile.path().display().to_string(),
        run: run_info(loaded),
        totals,
        files: reports,
        outside_files: outside,
        processes: process_infos.clone(),
        warnings,
        loader: loader.report,
    };
    let timeline = Timeline {
        page_size,
        ready_ns,
        ended_ns: run.ended_ns,
        files: timelines,
        processes: process_infos,
        prefetcher_tasks,
        loader: loader.bands,
    };
    (report, timeline)
}

/// The files' reports biggest readers first (then most touched, then by
/// path), their timelines in the same order.
fn biggest_readers_first(
    reports: Vec<FileReport>,
    timelines: Vec<FileTimeline>,
) -> (Vec<FileReport>, Vec<FileTimeline>) {
    let mut order: Vec<usize> = (0..reports.len()).collect();
    order.sort_by(|&a, &b| {
        reports[b]
            .bytes_read
            .cmp(&reports[a].bytes_read)
            .then(reports[b].bytes_touched.cmp(&reports[a].bytes_touched))
            .then(reports[a].path.cmp(&reports[b].path))
    });
    let mut slots: Vec<Option<(FileReport, FileTimeline)>> =
        reports.into_iter().zip(timelines).map(Some).collect();
    order.iter().filter_map(|&i| slots[i].take()).unzip()
}

/// What the user should know about how the run was recorded.
fn run_warnings(run: &Run) -> Vec<String> {
    let mut warnings = Vec::new();
    if run.lost_events > 0 {
        warnings.push(format!(
            "the kernel dropped {} trace events: figures are lower bounds; trace again with a bigger --buffer-mb",
            run.lost_events
        ));
    }
    if !run.complete {
        warnings.push("this run was not completed (coldstart was killed while recording)".into());
    }
    warnings
}

fn run_info(loaded: &LoadedRun) -> RunInfo {
    let run = &loaded.run;
    RunInfo {
        id: run.id,
        argv: run.start.argv.clone(),
        cache_mode: run.start.cache_mode.as_str().to_string(),
        kernel: run.start.kernel.clone(),
        page_size: run.start.page_size,
        read_ahead_kb: run.start.read_ahead_kb,
        demand_reads: loaded.demand_reads(),
        end_reason: run.end_reason.map(|r| r.as_str().to_string()),
        exit_code: run.exit_code,
        exit_signal: run.exit_signal,
        ready_ns: loaded.ready_ns(),
        ended_ns: run.ended_ns,
        lost_events: run.lost_events,
        complete: run.complete,
    }
}

/// A file's label: its path, or, when it has none, what the recorder
/// found it holds (or why it has no path), or its identity.
pub fn label(file: &File) -> String {
    match &file.path {
        Some(path) => path.clone(),
        None if file.note.is_some() => format!("[{}]", file.note.as_deref().unwrap_or_default()),
        None if file.in_kernel() => format!(
            "[in-kernel file: metadata or shared memory, dev 0:{} inode {}]",
            file.dev_minor(),
            file.ino
        ),
        None => format!(
            "[dev {}:{} inode {}]",
            file.dev_major(),
            file.dev_minor(),
            file.ino
        ),
    }
}

fn process_names(pids: impl Iterator<Item = i32>, names: &HashMap<i32, &Process>) -> Vec<String> {
    let mut seen = Vec::new();
    for pid in pids {
        if !seen.contains(&pid) {
            seen.push(pid);
        }
    }
    seen.iter()
        .map(|pid| {
            let comm = names
                .get(pid)
                .and_then(|p| p.comm.as_deref())
                .unwrap_or("?");
            format!("{comm} ({pid})")
        })
        .collect()
}

/// The pages of the events `wanted` picks.
fn set_of(events: &[&PageEvent], wanted: impl Fn(&PageEvent) -> bool) -> PageSet {
    PageSet::from_ranges(
        events
            .iter()
            .filter(|e| wanted(e))
            .map(|e| {
                let pages = event_pages(e);
                (pages.start, pages.end - pages.start)
            })
            .collect(),
    )
}

#[allow(clippy::too_many_arguments)]
fn file_report(
    loaded: &LoadedRun,
    file: &File,
    label: String,
    tree: &[&PageEvent],
    touched_by_others: bool,
    readahead: &[&Readahead],
    names: &HashMap<i32, &Process>,
    options: &Options,
) -> (FileReport, FileTimeline) {
    let page_size = loaded.page_size();
    let read = set_of(tree, |e| e.kind == PageEventKind::Read);
    let faulted = set_of(tree, |e| e.kind == PageEventKind::Fault);
    let mapped = set_of(tree, |e| e.kind == PageEventKind::Map);
    let accessed = set_of(tree, |e| e.kind == PageEventKind::Access);
    let touched = set_of(tree, |e| loaded.touches(e));
    let touched_or_mapped = touched.union(&mapped);
    let reads: Vec<&PageEvent> = tree
        .iter()
        .copied()
        .filter(|e| e.kind == PageEventKind::Read)
        .collect();
    let requests = pages::read_requests(&reads, readahead);
    let (seek_forward_bytes, seek_backward_bytes) = pages::seeks(&requests, page_size);
    let used: Vec<&PageEvent> = tree
        .iter()
        .copied()
        .filter(|e| e.kind != PageEventKind::Evict)
        .collect();
    let size_bytes = |set: &PageSet| match file.size {
        Some(size) => set.bytes_overlapping(0, size, page_size),
        None => set.len() * page_size,
    };

    // A block device's cache (metadata) is addressed by disk offset, and
    // memory has no place on a disk: neither has a file size or a seek.
    let a_file = !file.in_kernel()
        && !matches!(
            file.kind,
            Some(coldstart_profile::FileKind::Metadata | coldstart_profile::FileKind::Memory)
        );
    let mut report = FileReport {
        path: label.clone(),
        opened_as: file.opened_as.clone(),
        kind: file.kind,
        resolved: file.path.is_some(),
        dev: file.dev,
        ino: file.ino,
        size: file.size.filter(|_| a_file),
        build_id: file.build_id.clone(),
        pages_read: read.len(),
        bytes_read: size_bytes(&read),
        pages_faulted: faulted.len(),
        pages_mapped: mapped.len(),
        pages_accessed: accessed.len(),
        pages_touched: touched.len(),
        bytes_touched: size_bytes(&touched),
        pages_touched_or_mapped: touched_or_mapped.len(),
        bytes_touched_or_mapped: size_bytes(&touched_or_mapped),
        read_amplification: ratio(read.len(), touched.len()),
        read_requests: requests.len() as u64,
        seek_forward_bytes: a_file.then_some(seek_forward_bytes),
        seek_backward_bytes: a_file.then_some(seek_backward_bytes),
        first_access_ns: used.iter().map(|e| e.t_ns).min(),
        last_access_ns: used.iter().map(|e| e.t_ns).max(),
        processes: process_names(tree.iter().map(|e| e.pid), names),
        touched_by_others,
        opened_by_tree: file.opened_by_tree,
        sections: None,
        attribution: None,
        symbols: Vec::new(),
        symbol_source: None,
        pages: options.pages.then(|| PageLists {
            read: read.inclusive(),
            faulted: faulted.inclusive(),
            mapped: mapped.inclusive(),
            accessed: accessed.inclusive(),
        }),
    };
    let sets = Sets {
        read: &read,
        faulted: &faulted,
        mapped: &mapped,
        touched: &touched,
    };
    let bands = if options.attribute {
        attribute_file(&mut report, loaded, file, tree, &sets)
    } else {
        Vec::new()
    };
    let timeline = file_timeline(file, label, tree, &requests, bands, page_size);
    (report, timeline)
}

/// One file's events, read requests and sections as the timeline draws
/// them; the file as long as its size or its highest event.
fn file_timeline(
    file: &File,
    label: String,
    tree: &[&PageEvent],
    requests: &[Request],
    sections: Vec<Band>,
    page_size: u64,
) -> FileTimeline {
    let highest = tree
        .iter()
        .map(|e| page_offset(event_pages(e).end, page_size))
        .max()
        .unwrap_or(0);
    FileTimeline {
        path: label,
        size: file.size.unwrap_or(0).max(highest),
        points: tree
            .iter()
            .map(|e| TimelinePoint {
                t_ns: e.t_ns,
                pid: e.pid,
                page: e.page,
                npages: e.npages,
                kind: e.kind,
            })
            .collect(),
        requests: requests.iter().map(request_of).collect(),
        sections,
    }
}

fn request_of(r: &Request) -> ReadRequest {
    ReadRequest {
        t_start_ns: r.t_start_ns,
        t_end_ns: r.t_end_ns,
        pid: r.pid,
        first_page: r.first,
        npages: r.npages,
    }
}

fn ratio(a: u64, b: u64) -> Option<f64> {
    (b > 0).then(|| a as f64 / b as f64)
}

/// The file's path, if the file there now is still the one that was traced
/// (same size and mtime); else why not.
pub(crate) fn unchanged_path(file: &File) -> std::result::Result<&Path, String> {
    let Some(path) = &file.path else {
        return Err("path unknown".into());
    };
    let now =
        FileIdentity::of_path(Path::new(path)).map_err(|e| format!("cannot read it now: {e}"))?;
    if let Some(traced) = file.identity()
        && now.change_since(&traced).is_some()
    {
        return Err("changed since the trace (size or mtime differ)".into());
    }
    Ok(Path::new(path))
}

/// The file's offset index, if it is still the file that was traced.
pub(crate) fn open_index(file: &File) -> std::result::Result<OffsetIndex, String> {
    let path = unchanged_path(file).map_err(|note| {
        if note.starts_with("changed") {
            format!("{note}: sections and symbols not attributed")
        } else {
            note
        }
    })?;
    let index = OffsetIndex::from_path(path).map_err(|e| {
        let text = e.to_string();
        if text.contains("not") && !text.contains("ELF") {
            format!("not ELF: {text}")
        } else {
            format!("not ELF or unreadable: {text}")
        }
    })?;
    Ok(index)
}

/// Attributes the file's pages to its ELF sections and symbols, when it is
/// still the file traced and can be read (else says why in the report);
/// the sections as timeline bands.
fn attribute_file(
    report: &mut FileReport,
    loaded: &LoadedRun,
    file: &File,
    tree: &[&PageEvent],
    sets: &Sets<'_>,
) -> Vec<Band> {
    let index = match open_index(file) {
        Ok(index) => index,
        Err(note) => {
            report.attribution = Some(note);
            return Vec::new();
        }
    };
    let touches: Vec<&PageEvent> = tree.iter().copied().filter(|e| loaded.touches(e)).collect();
    attribute(report, &index, sets, &touches, loaded.page_size());
    index
        .sections()
        .iter()
        .map(|s| Band {
            name: s.name.clone(),
            offset: s.offset,
            size: s.size,
        })
        .collect()
}

struct Sets<'a> {
    read: &'a PageSet,
    faulted: &'a PageSet,
    mapped: &'a PageSet,
    touched: &'a PageSet,
}

fn attribute(
    report: &mut FileReport,
    index: &OffsetIndex,
    sets: &Sets<'_>,
    touches: &[&PageEvent],
    page_size: u64,
) {
    report.symbol_source = Some(format!("{:?}", index.symbol_source()).to_lowercase());
    // Symbols in order of first touch: events come in time order.
    let symbols = index.symbols();
    // symbols_in yields references into symbols(); their position is the
    // symbol's index.
    let index_of = |s: &coldstart_binary::SymbolSpan| {
        (s as *const _ as usize - symbols.as_ptr() as usize)
            / std::mem::size_of::<coldstart_binary::SymbolSpan>()
    };
    let mut first_touch: HashMap<usize, i64> = HashMap::new();
    let mut order = Vec::new();
    for event in touches {
        let pages = event_pages(event);
        let (start, end) = (
            page_offset(pages.start, page_size),
            page_offset(pages.end, page_size),
        );
        for i in index.symbols_in(start, end).map(index_of) {
            if let std::collections::hash_map::Entry::Vacant(slot) = first_touch.entry(i) {
                slot.insert(event.t_ns);
                order.push(i);
            }
        }
    }
    let sections = index.sections();
    let mut per_section_symbols = vec![0u64; sections.len()];
    report.symbols = order
        .iter()
        .map(|&i| {
            let s = &symbols[i];
            if let Some(sec) = s.section {
                per_section_symbols[sec] += 1;
            }
            SymbolTouch {
                name: s.name().to_string(),
                offset: s.offset,
                size: s.size,
                section: s.section.map(|sec| sections[sec].name.clone()),
                first_touch_ns: first_touch[&i],
            }
        })
        .collect();

    report.sections = Some(section_rows(index, sets, &per_section_symbols, page_size));
}

/// One row per ELF section, and one for the bytes no section claims
/// (headers, padding, section tables), so the rows add up to the file.
fn section_rows(
    index: &OffsetIndex,
    sets: &Sets<'_>,
    per_section_symbols: &[u64],
    page_size: u64,
) -> Vec<SectionReport> {
    let sections = index.sections();
    let file_size = index.file_size();
    let row = |name: String, ranges: &[(u64, u64)], symbols: u64| {
        let bytes = |set: &PageSet| {
            ranges
                .iter()
                .map(|&(a, b)| set.bytes_overlapping(a, b, page_size))
                .sum()
        };
        let pages = |set: &PageSet| {
            ranges
                .iter()
                .map(|&(a, b)| set.pages_overlapping(a, b, page_size))
                .sum()
        };
        SectionReport {
            offset: ranges.first().map(|r| r.0).unwrap_or(0),
            size: ranges.iter().map(|(a, b)| b - a).sum(),
            name,
            bytes_read: bytes(sets.read),
            bytes_faulted: bytes(sets.faulted),
            bytes_mapped: bytes(sets.mapped),
            bytes_touched: bytes(sets.touched),
            pages_read: pages(sets.read),
            pages_touched: pages(sets.touched),
            symbols_touched: symbols,
        }
    };
    let mut rows: Vec<SectionReport> = sections
        .iter()
        .enumerate()
        .map(|(i, s)| {
            row(
                s.name.clone(),
                &[(s.offset, s.offset + s.size)],
                per_section_symbols[i],
            )
        })
        .collect();
    let mut gaps = Vec::new();
    let mut cursor = 0;
    let mut spans: Vec<(u64, u64)> = sections
        .iter()
        .map(|s| (s.offset, s.offset + s.size))
        .collect();
    spans.sort_unstable();
    for (a, b) in spans {
        if a > cursor {
            gaps.push((cursor, a));
        }
        cursor = cursor.max(b);
    }
    if file_size > cursor {
        gaps.push((cursor, file_size));
    }
    if !gaps.is_empty() {
        rows.push(row("[outside sections]".into(), &gaps, 0));
    }
    rows
}

fn totals(files: &[FileReport]) -> Totals {
    let mut t = Totals {
        files: files.len(),
        ..Totals::default()
    };
    for f in files {
        t.pages_read += f.pages_read;
        t.bytes_read += f.bytes_read;
        t.pages_faulted += f.pages_faulted;
        t.pages_mapped += f.pages_mapped;
        t.pages_accessed += f.pages_accessed;
        t.pages_touched += f.pages_touched;
        t.bytes_touched += f.bytes_touched;
        t.pages_touched_or_mapped += f.pages_touched_or_mapped;
        t.bytes_touched_or_mapped += f.bytes_touched_or_mapped;
        t.read_requests += f.read_requests;
        // Rows without a seek (metadata, memory) stay out of the sum.
        t.seek_forward_bytes += f.seek_forward_bytes.unwrap_or(0);
        t.seek_backward_bytes += f.seek_backward_bytes.unwrap_or(0);
    }
    t.read_amplification = ratio(t.pages_read, t.pages_touched);
    t
}

/// The files the traced program's own processes read or touched in a run
/// (the latest complete one when `run` is None), by path, largest reader
/// first: what selective-cold eviction drops. Files only other processes
/// used, and files whose path was never resolved, are left out.
pub fn files_used(profile: &Profile, run: Option<RunId>) -> Result<Vec<std::path::PathBuf>> {
    let (report, _) = analyze(
        profile,
        &Options {
            run,
            attribute: false,
            ..Default::default()
        },
    )?;
    Ok(report
        .files
        .into_iter()
        .filter(|f| f.resolved)
        .map(|f| std::path::PathBuf::from(f.path))
        .collect())
}
