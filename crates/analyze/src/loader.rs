//! The dynamic loader's anatomy: from a run's loader spans (`coldstart
//! trace --loader`), per program image and per object, how long ld.so
//! searched, mapped, relocated and initialised it, which opens it tried,
//! the relocations the object's file asks for, each initializer by name,
//! and which page I/O happened in which phase.
//!
//! Spans nest by time on their task: the innermost span open at an
//! instant is what the loader was doing then, so a page event falls into
//! the innermost span of its own task. A span that never returned (ld.so
//! unwound it with longjmp) ended right after the last span it held when a
//! later span of its task could not lie inside it (a dlopen after the
//! failed one), else when the span holding it did, else with the run.

use crate::loaded::{LoadedRun, event_pages};
use crate::model::*;
use crate::run::unchanged_path;
use coldstart_binary::{InspectOptions, Inspection, OffsetIndex, SymbolSpan};
use coldstart_profile::{File, FileId, LoaderPhase, LoaderSpan, PageEvent, PageEventKind};
use std::cmp::Reverse;
use std::collections::{BTreeMap, HashMap};

/// What the loader analysis adds to a run's report and timeline.
#[derive(Debug, Clone, Default)]
pub struct LoaderAnalysis {
    /// None when the run has no loader spans.
    pub report: Option<LoaderReport>,
    /// The spans as the chart draws them, outermost first.
    pub bands: Vec<LoaderBand>,
    /// For the report's warnings: why the loader was not seen.
    pub warnings: Vec<String>,
}

/// Analyses `spans`, the loader spans of `loaded`'s run. `probe_hit_ns`:
/// the run's calibrated cost of one probe hit, taken off each span per hit
/// it held for the `corrected_*` figures. `read_files`: read the objects'
/// files for relocations and initializer names.
pub fn analyze_loader(
    loaded: &LoadedRun,
    spans: &[LoaderSpan],
    probe_hit_ns: Option<u64>,
    read_files: bool,
) -> LoaderAnalysis {
    let mut analysis = LoaderAnalysis::default();
    let tree: Vec<&LoaderSpan> = spans.iter().filter(|s| loaded.in_tree(s.pid)).collect();
    if tree.len() < spans.len() {
        analysis.warnings.push(format!(
            "{} loader spans of tasks outside the traced tree were left out",
            spans.len() - tree.len()
        ));
    }
    if tree.is_empty() {
        analysis.warnings.extend(unseen_note(loaded));
        return analysis;
    }
    let nesting = Nesting::of(&tree, run_end(loaded, &tree));
    let images = Images::of(loaded, &tree);
    let owners = Owners::of(&tree, &nesting, &images);
    let (span_io, outside_loader) = attribute_io(loaded, &nesting);
    let facts = SpanFacts::new(&tree, &nesting, &span_io, probe_hit_ns);
    let mut files = ObjectFiles::new(loaded, read_files);
    let object_spans = owners.spans_of();
    let mut image_spans = vec![Vec::new(); images.list.len()];
    for (i, &image) in images.of_span.iter().enumerate() {
        image_spans[image].push(i);
    }
    let processes: Vec<LoaderProcess> = image_spans
        .iter()
        .enumerate()
        .map(|(image, spans)| {
            let superseded = images.superseded(image);
            let objects = owners
                .objects
                .iter()
                .enumerate()
                .filter(|(_, (of_image, _))| *of_image == image)
                .map(|(object, (_, key))| {
                    let main_unknown = superseded && key.is_empty();
                    let spans = &object_spans[object];
                    object_report(&facts, key, spans, main_unknown, &mut files)
                })
                .collect();
            let image = Image {
                pid: images.list[image].0,
                start: images.list[image].1,
                superseded,
            };
            process_report(loaded, &facts, image, spans, objects)
        })
        .collect();
    analysis.report = Some(LoaderReport {
        sight: loaded.run.loader.clone(),
        ready_ns: loaded.ready_ns(),
        probe_hit_ns,
        phases: sum_phases(processes.iter().map(|p| p.phases.as_slice())),
        outside_loader,
        processes,
    });
    analysis.bands = bands(&tree, &nesting);
    analysis
}

/// Why a run has no spans, when the loader was asked for.
fn unseen_note(loaded: &LoadedRun) -> Option<String> {
    let note = loaded.run.loader.as_deref()?;
    Some(if note.starts_with("not traced") {
        format!("the dynamic loader was {note}")
    } else {
        format!(
            "the dynamic loader was traced ({note}) but recorded no span: a static program, \
             or one whose loader the probes did not cover"
        )
    })
}

/// When spans that never ended stop: the run's end, or the last thing seen.
fn run_end(loaded: &LoadedRun, spans: &[&LoaderSpan]) -> i64 {
    let seen = spans
        .iter()
        .map(|s| s.t_end_ns.unwrap_or(s.t_begin_ns))
        .chain(loaded.events.last().map(|e| e.t_ns))
        .max()
        .unwrap_or(0);
    loaded.run.ended_ns.map_or(seen, |end| end.max(seen))
}

/// How the spans nest on their tasks.
struct Nesting {
    /// Per span: its end (see the module comment for spans never ended).
    end: Vec<i64>,
    begin: Vec<i64>,
    parent: Vec<Option<usize>>,
    level: Vec<u32>,
    /// Per task, its spans by beginning, a holder before what it holds.
    by_task: BTreeMap<i32, Vec<usize>>,
}

impl Nesting {
    fn of(spans: &[&LoaderSpan], run_end: i64) -> Nesting {
        let mut by_task: BTreeMap<i32, Vec<usize>> = BTreeMap::new();
        for (i, span) in spans.iter().enumerate() {
            by_task.entry(span.pid).or_default().push(i);
        }
        for order in by_task.values_mut() {
            // At one instant the span ending later holds the other (a load
            // and its search begin together); the recorded depth breaks ties.
            order.sort_by_key(|&i| {
                let s = spans[i];
                (
                    s.t_begin_ns,
                    Reverse(s.t_end_ns.unwrap_or(i64::MAX)),
                    s.depth,
                )
            });
        }
        let mut nesting = Nesting {
            end: vec![0; spans.len()],
            begin: spans.iter().map(|s| s.t_begin_ns).collect(),
            parent: vec![None; spans.len()],
            level: vec![0; spans.len()],
            by_task,
        };
        // Per span, the latest end of the spans it holds that are known.
        let mut inner_end: Vec<Option<i64>> = vec![None; spans.len()];
        for order in nesting.by_task.values() {
            let mut open: Vec<usize> = Vec::new();
            for &i in order {
                let begin = spans[i].t_begin_ns;
                close_ended(&mut open, &nesting.end, begin);
                // A span that never returned, open where this one could not
                // be (a dlopen after a dlopen that failed): ld.so had unwound
                // it, right after the last thing it did.
                while let Some(&top) = open.last()
                    && spans[top].t_end_ns.is_none()
                    && !can_hold(spans[top].phase, spans[i].phase)
                {
                    let end = inner_end[top].unwrap_or(nesting.begin[top]);
                    nesting.end[top] = end;
                    open.pop();
                    if let Some(&holder) = open.last() {
                        inner_end[holder] = inner_end[holder].max(Some(end));
                    }
                }
                let parent = open.last().copied();
                let limit = parent.map_or(run_end, |p| nesting.end[p]);
                let end = spans[i].t_end_ns.unwrap_or(limit).min(limit).max(begin);
                nesting.end[i] = end;
                nesting.parent[i] = parent;
                nesting.level[i] = open.len() as u32;
                if let Some(p) = parent
                    && spans[i].t_end_ns.is_some()
                {
                    inner_end[p] = inner_end[p].max(Some(end));
                }
                open.push(i);
            }
        }
        nesting
    }

    fn duration(&self, i: usize) -> i64 {
        self.end[i] - self.begin[i]
    }
}

/// Whether ld.so can be doing `inner` inside `outer` on one task: a load
/// searches, opens and maps; a dlopen does all but another dlopen (unless
/// an initializer, which is any code, calls it); an init runs initializers.
fn can_hold(outer: LoaderPhase, inner: LoaderPhase) -> bool {
    use LoaderPhase::*;
    match outer {
        Start | Initializer => true,
        Load => matches!(inner, Search | Open | Map),
        Search => inner == Open,
        Init => inner == Initializer,
        Dlopen => !matches!(inner, Dlopen | Start | Entry),
        Map | Open | Relocate | Entry => false,
    }
}

/// Drops the spans that ended by `t` from a task's stack of open spans.
fn close_ended(open: &mut Vec<usize>, end: &[i64], t: i64) {
    while let Some(&top) = open.last() {
        if end[top] > t {
            break;
        }
        open.pop();
    }
}

/// Program images: a process from one exec (its `start` span), or the
/// spans of a process before any exec was seen (a fork that dlopens).
struct Images {
    /// (tgid, its start span).
    list: Vec<(i32, Option<usize>)>,
    /// Per span, its image.
    of_span: Vec<usize>,
}

impl Images {
    fn of(loaded: &LoadedRun, spans: &[&LoaderSpan]) -> Images {
        let tgid = |pid: i32| loaded.tree_process(pid).unwrap_or(pid);
        let mut starts: HashMap<i32, Vec<(i64, usize)>> = HashMap::new();
        for (i, span) in spans.iter().enumerate() {
            if span.phase == LoaderPhase::Start {
                starts
                    .entry(tgid(span.pid))
                    .or_default()
                    .push((span.t_begin_ns, i));
            }
        }
        let mut index: HashMap<(i32, Option<usize>), usize> = HashMap::new();
        let mut images = Images {
            list: Vec::new(),
            of_span: Vec::with_capacity(spans.len()),
        };
        // Spans come by beginning, so images come in order of their first.
        for span in spans {
            let process = tgid(span.pid);
            let start = starts.get(&process).and_then(|list| {
                let after = list.partition_point(|&(begin, _)| begin <= span.t_begin_ns);
                after.checked_sub(1).map(|k| list[k].1)
            });
            let next = images.list.len();
            let image = *index.entry((process, start)).or_insert(next);
            if image == next {
                images.list.push((process, start));
            }
            images.of_span.push(image);
        }
        images
    }

    /// Whether the image's process exec'd again later: the trace names
    /// the main program's file of its last exec only.
    fn superseded(&self, image: usize) -> bool {
        let (pid, start) = self.list[image];
        start.is_some()
            && self.list[image + 1..]
                .iter()
                .any(|&(p, s)| p == pid && s.is_some())
    }
}

/// One program image as the report assembles it.
struct Image {
    pid: i32,
    start: Option<usize>,
    superseded: bool,
}

/// Which object each span worked for: its own, or the one of the span
/// holding it (an open attempt belongs to the search it is part of).
struct Owners {
    /// (image, object as the loader names it), in order of first span.
    objects: Vec<(usize, String)>,
    of_span: Vec<Option<usize>>,
}

impl Owners {
    fn of(spans: &[&LoaderSpan], nesting: &Nesting, images: &Images) -> Owners {
        let mut owners = Owners {
            objects: Vec::new(),
            of_span: vec![None; spans.len()],
        };
        let mut index: HashMap<(usize, &str), usize> = HashMap::new();
        // Objects numbered by first span over all tasks, owners filled task
        // by task with holders before what they hold.
        for (i, span) in spans.iter().enumerate() {
            if let Some(key) = own_object(span) {
                let image = images.of_span[i];
                let next = owners.objects.len();
                let object = *index.entry((image, key)).or_insert(next);
                if object == next {
                    owners.objects.push((image, key.to_string()));
                }
                owners.of_span[i] = Some(object);
            }
        }
        for order in nesting.by_task.values() {
            for &i in order {
                if owners.of_span[i].is_none() {
                    owners.of_span[i] = nesting.parent[i].and_then(|p| owners.of_span[p]);
                }
            }
        }
        owners
    }

    /// The spans of each object, in order of beginning.
    fn spans_of(&self) -> Vec<Vec<usize>> {
        let mut out = vec![Vec::new(); self.objects.len()];
        for (i, owner) in self.of_span.iter().enumerate() {
            if let Some(object) = owner {
                out[*object].push(i);
            }
        }
        out
    }
}

/// The object a span names itself: the loader's name for it, or for a
/// load or dlopen that never returned one, the name asked for.
fn own_object(span: &LoaderSpan) -> Option<&str> {
    match (&span.object, span.phase) {
        (Some(object), _) => Some(object),
        (None, LoaderPhase::Load | LoaderPhase::Dlopen) => span.detail.as_deref(),
        _ => None,
    }
}

/// Pages the tree read and touched per span (events in the innermost span
/// of their task), and those outside every span.
fn attribute_io(loaded: &LoadedRun, nesting: &Nesting) -> (Vec<PagesIo>, PagesIo) {
    let mut per_span = vec![PagesIo::default(); nesting.end.len()];
    let mut outside = PagesIo::default();
    let mut by_task: HashMap<i32, Vec<&PageEvent>> = nesting
        .by_task
        .keys()
        .map(|&task| (task, Vec::new()))
        .collect();
    for event in loaded.tree_events() {
        if io_of(loaded, event) == PagesIo::default() {
            continue;
        }
        match by_task.get_mut(&event.pid) {
            Some(events) => events.push(event),
            None => add_io(&mut outside, io_of(loaded, event)),
        }
    }
    for (task, events) in &by_task {
        let order = &nesting.by_task[task];
        let mut next = 0;
        let mut open: Vec<usize> = Vec::new();
        for event in events {
            while let Some(&i) = order.get(next)
                && nesting.begin[i] <= event.t_ns
            {
                close_ended(&mut open, &nesting.end, nesting.begin[i]);
                open.push(i);
                next += 1;
            }
            close_ended(&mut open, &nesting.end, event.t_ns);
            let io = io_of(loaded, event);
            match open.last() {
                Some(&i) => add_io(&mut per_span[i], io),
                None => add_io(&mut outside, io),
            }
        }
    }
    (per_span, outside)
}

/// The pages an event read and touched.
fn io_of(loaded: &LoadedRun, event: &PageEvent) -> PagesIo {
    let pages = event_pages(event);
    let count = pages.end - pages.start;
    PagesIo {
        pages_read: if event.kind == PageEventKind::Read {
            count
        } else {
            0
        },
        pages_touched: if loaded.touches(event) { count } else { 0 },
    }
}

fn add_io(sum: &mut PagesIo, io: PagesIo) {
    sum.pages_read += io.pages_read;
    sum.pages_touched += io.pages_touched;
}

/// What the per-process and per-object figures are computed from.
struct SpanFacts<'a> {
    spans: &'a [&'a LoaderSpan],
    nesting: &'a Nesting,
    io: &'a [PagesIo],
    /// Per span: its length less what the spans it holds took.
    self_ns: Vec<i64>,
    /// Per span: it holds a search or a mapping (a load that found a file).
    holds_file: Vec<bool>,
    /// With a calibrated cost per probe hit: per span, its length and its
    /// self time less the cost of the hits they held.
    corrected: Option<Corrected>,
}

/// Span lengths without the probes' cost (see `LoaderSpan::probe_hits`).
/// Each hit costs the same (the calibrated mean of entry and return
/// probes); a span that never ended has no count and is left as traced.
struct Corrected {
    hit_ns: i64,
    duration: Vec<i64>,
    self_ns: Vec<i64>,
}

impl<'a> SpanFacts<'a> {
    fn new(
        spans: &'a [&'a LoaderSpan],
        nesting: &'a Nesting,
        io: &'a [PagesIo],
        probe_hit_ns: Option<u64>,
    ) -> Self {
        let mut self_ns: Vec<i64> = (0..spans.len()).map(|i| nesting.duration(i)).collect();
        let mut holds_file = vec![false; spans.len()];
        for (i, parent) in nesting.parent.iter().enumerate() {
            if let Some(p) = *parent {
                self_ns[p] -= nesting.duration(i);
                if matches!(spans[i].phase, LoaderPhase::Search | LoaderPhase::Map) {
                    holds_file[p] = true;
                }
            }
        }
        let corrected = probe_hit_ns
            .and_then(|ns| i64::try_from(ns).ok())
            .map(|hit_ns| Corrected::of(spans, nesting, hit_ns));
        SpanFacts {
            spans,
            nesting,
            io,
            self_ns,
            holds_file,
            corrected,
        }
    }

    /// The probe hits span `i` held; 0 when not counted.
    fn hits(&self, i: usize) -> u64 {
        self.spans[i].probe_hits.unwrap_or(0)
    }

    /// Whether a span of `phase` holds span `i`.
    fn inside(&self, i: usize, phase: LoaderPhase) -> bool {
        let mut at = self.nesting.parent[i];
        while let Some(p) = at {
            if self.spans[p].phase == phase {
                return true;
            }
            at = self.nesting.parent[p];
        }
        false
    }
}

impl Corrected {
    fn of(spans: &[&LoaderSpan], nesting: &Nesting, hit_ns: i64) -> Corrected {
        let less_hits = |ns: i64, hits: u64| {
            let cost = i64::try_from(hits)
                .unwrap_or(i64::MAX)
                .saturating_mul(hit_ns);
            ns.saturating_sub(cost).max(0)
        };
        let hits = |i: usize| spans[i].probe_hits.unwrap_or(0);
        let duration: Vec<i64> = (0..spans.len())
            .map(|i| less_hits(nesting.duration(i), hits(i)))
            .collect();
        let mut self_ns = duration.clone();
        for (i, parent) in nesting.parent.iter().enumerate() {
            if let Some(p) = *parent {
                self_ns[p] -= duration[i];
            }
        }
        for ns in &mut self_ns {
            *ns = (*ns).max(0);
        }
        Corrected {
            hit_ns,
            duration,
            self_ns,
        }
    }
}

fn phase_slot(phase: LoaderPhase) -> usize {
    LoaderPhase::ALL
        .iter()
        .position(|&p| p == phase)
        .unwrap_or(0)
}

fn empty_phases() -> Vec<PhaseTotal> {
    LoaderPhase::ALL
        .iter()
        .map(|&phase| PhaseTotal::empty(phase))
        .collect()
}

impl PhaseTotal {
    /// A phase with no spans yet.
    pub fn empty(phase: LoaderPhase) -> PhaseTotal {
        PhaseTotal {
            phase,
            spans: 0,
            unfinished: 0,
            total_ns: 0,
            self_ns: 0,
            probe_hits: 0,
            corrected_total_ns: None,
            corrected_self_ns: None,
            io: PagesIo::default(),
        }
    }
}

/// Adds `value` to a corrected figure that is known for all or none.
fn add_corrected(sum: &mut Option<i64>, value: Option<i64>) {
    if let Some(value) = value {
        *sum = Some(sum.unwrap_or(0) + value);
    }
}

/// Per phase over `spans`, phases without spans left out.
fn phase_totals(facts: &SpanFacts<'_>, spans: &[usize]) -> Vec<PhaseTotal> {
    let mut totals = empty_phases();
    for &i in spans {
        let span = facts.spans[i];
        let total = &mut totals[phase_slot(span.phase)];
        total.spans += 1;
        total.unfinished += u64::from(span.t_end_ns.is_none());
        total.total_ns += facts.nesting.duration(i);
        total.self_ns += facts.self_ns[i];
        total.probe_hits += facts.hits(i);
        if let Some(corrected) = &facts.corrected {
            add_corrected(&mut total.corrected_total_ns, Some(corrected.duration[i]));
            add_corrected(&mut total.corrected_self_ns, Some(corrected.self_ns[i]));
        }
        add_io(&mut total.io, facts.io[i]);
    }
    totals.retain(|t| t.spans > 0);
    totals
}

/// Phase totals added up over processes.
fn sum_phases<'a>(lists: impl Iterator<Item = &'a [PhaseTotal]>) -> Vec<PhaseTotal> {
    let mut totals = empty_phases();
    for list in lists {
        for t in list {
            let sum = &mut totals[phase_slot(t.phase)];
            sum.spans += t.spans;
            sum.unfinished += t.unfinished;
            sum.total_ns += t.total_ns;
            sum.self_ns += t.self_ns;
            sum.probe_hits += t.probe_hits;
            add_corrected(&mut sum.corrected_total_ns, t.corrected_total_ns);
            add_corrected(&mut sum.corrected_self_ns, t.corrected_self_ns);
            add_io(&mut sum.io, t.io);
        }
    }
    totals.retain(|t| t.spans > 0);
    totals
}

/// One program image's report, from its spans and its objects' reports.
fn process_report(
    loaded: &LoadedRun,
    facts: &SpanFacts<'_>,
    Image {
        pid,
        start,
        superseded,
    }: Image,
    spans: &[usize],
    mut objects: Vec<LoaderObject>,
) -> LoaderProcess {
    let of_phase = |phase: LoaderPhase| {
        spans
            .iter()
            .copied()
            .filter(move |&i| facts.spans[i].phase == phase)
    };
    let exec_ns = start.map(|s| facts.spans[s].t_begin_ns);
    let entry = of_phase(LoaderPhase::Entry)
        .next()
        .filter(|_| exec_ns.is_some());
    let entry_ns = entry
        .zip(exec_ns)
        .map(|(entry, exec)| facts.spans[entry].t_begin_ns - exec);
    let entry_probe_hits = entry.and_then(|e| facts.spans[e].probe_hits);
    let corrected_entry_ns = facts.corrected.as_ref().and_then(|c| {
        let cost = i64::try_from(entry_probe_hits?)
            .ok()?
            .saturating_mul(c.hit_ns);
        Some((entry_ns? - cost).max(0))
    });
    let corrected_start_ns = facts
        .corrected
        .as_ref()
        .zip(start)
        .map(|(c, s)| c.duration[s]);
    objects.sort_by(|a, b| {
        b.loader_ns
            .cmp(&a.loader_ns)
            .then(a.first_ns.cmp(&b.first_ns))
    });
    let process = loaded.processes.iter().find(|p| p.pid == pid);
    let program = objects
        .iter()
        .find(|o| o.main_program)
        .and_then(|o| o.path.clone())
        .or_else(|| process.and_then(|p| p.exe.clone()))
        .filter(|_| !superseded);
    let dlopens: Vec<DlopenCall> = of_phase(LoaderPhase::Dlopen)
        .map(|i| dlopen_call(facts, i))
        .collect();
    let start_ns = start.map(|s| facts.nesting.duration(s));
    let dlopen_ns = of_phase(LoaderPhase::Dlopen)
        .filter(|&i| !facts.inside(i, LoaderPhase::Dlopen))
        .map(|i| facts.nesting.duration(i))
        .sum::<i64>();
    LoaderProcess {
        pid,
        comm: process.and_then(|p| p.comm.clone()),
        program,
        exec_ns,
        start_ns,
        entry_ns,
        corrected_start_ns,
        corrected_entry_ns,
        entry_probe_hits,
        dlopen_ns,
        loader_ns: entry_ns.or(start_ns).unwrap_or(0) + dlopen_ns,
        initializers: of_phase(LoaderPhase::Initializer).count() as u64,
        initializers_ns: of_phase(LoaderPhase::Initializer)
            .map(|i| facts.nesting.duration(i))
            .sum(),
        phases: phase_totals(facts, spans),
        objects,
        dlopens,
    }
}

fn dlopen_call(facts: &SpanFacts<'_>, i: usize) -> DlopenCall {
    let span = facts.spans[i];
    DlopenCall {
        pid: span.pid,
        name: span.detail.clone(),
        object: span.object.clone(),
        succeeded: span.t_end_ns.and(span.result).map(|r| r != 0),
        t_begin_ns: span.t_begin_ns,
        duration_ns: facts.nesting.duration(i),
    }
}

/// One object's report from its spans. `main_unknown`: it is the main
/// program of an exec the process replaced, whose file the trace did not
/// name (the spans name the last one's).
fn object_report(
    facts: &SpanFacts<'_>,
    key: &str,
    spans: &[usize],
    main_unknown: bool,
    files: &mut ObjectFiles<'_>,
) -> LoaderObject {
    let span = |i: usize| facts.spans[i];
    let time_in = |phase: LoaderPhase| -> i64 {
        spans
            .iter()
            .filter(|&&i| span(i).phase == phase)
            .map(|&i| facts.nesting.duration(i))
            .sum()
    };
    let (search_ns, map_ns, relocate_ns, init_ns) = (
        time_in(LoaderPhase::Search),
        time_in(LoaderPhase::Map),
        time_in(LoaderPhase::Relocate),
        time_in(LoaderPhase::Init),
    );
    let file_id = spans
        .iter()
        .find_map(|&i| span(i).file_id)
        .filter(|_| !main_unknown);
    let base = spans.iter().find_map(|&i| span(i).base);
    let loads = load_outcomes(facts, spans);
    let (origin, dlopen) = origin(facts, spans);
    let opens = open_attempts(facts, spans);
    let lookups = spans
        .iter()
        .filter(|&&i| span(i).phase == LoaderPhase::Relocate)
        .filter_map(|&i| span(i).lookups)
        .reduce(|a, b| a + b);
    let file = file_id.and_then(|id| files.file(id));
    let (relocations, relocations_note) = match files.relocations(file, key) {
        Ok(relocations) => (Some(relocations), None),
        Err(_) if main_unknown => (None, Some(REPLACED_PROGRAM.into())),
        Err(note) => (None, Some(note)),
    };
    let initializers = spans
        .iter()
        .filter(|&&i| span(i).phase == LoaderPhase::Initializer)
        .map(|&i| initializer_call(facts, i, file, files))
        .collect();
    let io = object_io(facts, spans);
    LoaderObject {
        object: key.to_string(),
        path: file.and_then(|f| f.path.clone()),
        main_program: key.is_empty(),
        origin,
        dlopen,
        names: loads.names,
        base,
        first_ns: spans.first().map_or(0, |&i| span(i).t_begin_ns),
        loader_ns: search_ns + map_ns + relocate_ns + init_ns,
        relocated: spans
            .iter()
            .any(|&i| span(i).phase == LoaderPhase::Relocate),
        search_ns,
        map_ns,
        relocate_ns,
        init_ns,
        references: loads.references,
        failed_loads: loads.failed,
        opens_tried: opens.len() as u64,
        opens_failed: opens
            .iter()
            .filter(|o| o.result.is_some_and(|r| r < 0))
            .count() as u64,
        opens,
        relocations,
        relocations_note,
        lookups,
        initializers,
        pages: io.iter().fold(PagesIo::default(), |mut sum, p| {
            add_io(&mut sum, p.io);
            sum
        }),
        io,
    }
}

/// Why a main program replaced by a later exec has no relocations.
const REPLACED_PROGRAM: &str =
    "the process exec'd another program later: the trace named only that one's file";

/// The open attempts among an object's spans, in order.
fn open_attempts(facts: &SpanFacts<'_>, spans: &[usize]) -> Vec<OpenAttempt> {
    spans
        .iter()
        .map(|&i| (i, facts.spans[i]))
        .filter(|(_, span)| span.phase == LoaderPhase::Open)
        .map(|(i, span)| OpenAttempt {
            path: span.detail.clone(),
            result: span.t_end_ns.and(span.result),
            t_begin_ns: span.t_begin_ns,
            duration_ns: facts.nesting.duration(i),
        })
        .collect()
}

/// What an object's loads found.
struct LoadOutcomes {
    names: Vec<String>,
    /// Returned without a search or a mapping: it was loaded already.
    references: u64,
    /// Never returned.
    failed: u64,
}

fn load_outcomes(facts: &SpanFacts<'_>, spans: &[usize]) -> LoadOutcomes {
    let mut outcomes = LoadOutcomes {
        names: Vec::new(),
        references: 0,
        failed: 0,
    };
    let loads = spans
        .iter()
        .copied()
        .filter(|&i| facts.spans[i].phase == LoaderPhase::Load);
    for load in loads {
        let span = facts.spans[load];
        if let Some(name) = &span.detail
            && !outcomes.names.contains(name)
        {
            outcomes.names.push(name.clone());
        }
        if span.t_end_ns.is_none() {
            outcomes.failed += 1;
            continue;
        }
        if !facts.holds_file[load] {
            outcomes.references += 1;
        }
    }
    outcomes
}

/// Whether the object came with the program or through a dlopen, and then
/// the name that dlopen asked for: what held its first load.
fn origin(facts: &SpanFacts<'_>, spans: &[usize]) -> (ObjectOrigin, Option<String>) {
    let loading = |i: &&usize| {
        matches!(
            facts.spans[**i].phase,
            LoaderPhase::Load | LoaderPhase::Search | LoaderPhase::Map
        )
    };
    let Some(&first) = spans.iter().find(loading).or(spans.first()) else {
        return (ObjectOrigin::Initial, None);
    };
    let mut at = Some(first);
    while let Some(i) = at {
        if facts.spans[i].phase == LoaderPhase::Dlopen {
            return (ObjectOrigin::Dlopen, facts.spans[i].detail.clone());
        }
        at = facts.nesting.parent[i];
    }
    (ObjectOrigin::Initial, None)
}

/// The object's I/O per phase, phases without any left out.
fn object_io(facts: &SpanFacts<'_>, spans: &[usize]) -> Vec<PhaseIo> {
    let mut per_phase = vec![PagesIo::default(); LoaderPhase::ALL.len()];
    for &i in spans {
        add_io(
            &mut per_phase[phase_slot(facts.spans[i].phase)],
            facts.io[i],
        );
    }
    LoaderPhase::ALL
        .iter()
        .zip(per_phase)
        .filter(|(_, io)| *io != PagesIo::default())
        .map(|(&phase, io)| PhaseIo { phase, io })
        .collect()
}

fn initializer_call(
    facts: &SpanFacts<'_>,
    i: usize,
    file: Option<&File>,
    files: &mut ObjectFiles<'_>,
) -> InitializerCall {
    let span = facts.spans[i];
    let address = span
        .target
        .zip(span.base)
        .and_then(|(target, base)| target.checked_sub(base));
    let symbol = address.and_then(|a| files.function_name(file, a));
    InitializerCall {
        slot: span.detail.clone(),
        target: span.target,
        address,
        name: symbol.as_ref().map(|s| s.name.clone()),
        raw_name: symbol.map(|s| s.raw_name),
        t_begin_ns: span.t_begin_ns,
        duration_ns: facts.nesting.duration(i),
        finished: span.t_end_ns.is_some(),
    }
}

/// The objects' files, each read once: relocations and named
/// initializers from `inspect`, and symbols for naming other addresses.
struct ObjectFiles<'a> {
    by_id: HashMap<FileId, &'a File>,
    read: bool,
    inspected: HashMap<FileId, Result<Inspected, String>>,
    indexes: HashMap<FileId, Result<OffsetIndex, String>>,
}

/// What `inspect` says about one object's file.
#[derive(Clone)]
struct Inspected {
    relocations: ObjectRelocations,
    /// DT_INIT's, .init_array's and .ctors' functions by address.
    initializers: HashMap<u64, FunctionName>,
}

/// A function's name in a file.
#[derive(Clone)]
struct FunctionName {
    raw_name: String,
    /// Demangled; the raw name when it is not mangled.
    name: String,
}

impl<'a> ObjectFiles<'a> {
    fn new(loaded: &'a LoadedRun, read: bool) -> ObjectFiles<'a> {
        ObjectFiles {
            by_id: loaded.files.iter().map(|f| (f.id, f)).collect(),
            read,
            inspected: HashMap::new(),
            indexes: HashMap::new(),
        }
    }

    fn file(&self, id: FileId) -> Option<&'a File> {
        self.by_id.get(&id).copied()
    }

    fn relocations(
        &mut self,
        file: Option<&File>,
        object: &str,
    ) -> Result<ObjectRelocations, String> {
        if !self.read {
            return Err("files not read (attribution off)".into());
        }
        let Some(file) = file else {
            return Err(format!("the trace did not resolve the file of {object:?}"));
        };
        self.inspected(file).map(|i| i.relocations.clone())
    }

    fn inspected(&mut self, file: &File) -> Result<&Inspected, String> {
        self.inspected
            .entry(file.id)
            .or_insert_with(|| inspect(file).map(|i| inspected(&i)))
            .as_ref()
            .map_err(String::clone)
    }

    /// The function at `address` of the file, when it can be read: as
    /// `inspect` names the object's initializers (a symbol starting there,
    /// sized or not, else the one holding it), else the sized symbol
    /// holding it.
    fn function_name(&mut self, file: Option<&File>, address: u64) -> Option<FunctionName> {
        let file = file.filter(|_| self.read)?;
        if let Ok(inspected) = self.inspected(file)
            && let Some(name) = inspected.initializers.get(&address)
        {
            return Some(name.clone());
        }
        let index = self
            .indexes
            .entry(file.id)
            .or_insert_with(|| {
                let path = unchanged_path(file)?;
                OffsetIndex::from_path(path).map_err(|e| e.to_string())
            })
            .as_ref()
            .ok()?;
        symbol_at_address(index, address).map(|symbol| FunctionName {
            raw_name: symbol.raw_name.clone(),
            name: symbol.name().to_string(),
        })
    }
}

/// The file inspected, if it is still the one traced.
fn inspect(file: &File) -> Result<Inspection, String> {
    let path = unchanged_path(file)?;
    let inspection = coldstart_binary::inspect_path(path, &InspectOptions::default())
        .map_err(|e| e.to_string())?;
    if let (Some(traced), Some(now)) = (&file.build_id, &inspection.header.build_id)
        && traced != now
    {
        return Err(format!(
            "changed since the trace (build-id {traced} then, {now} now)"
        ));
    }
    Ok(inspection)
}

fn inspected(inspection: &Inspection) -> Inspected {
    let init = &inspection.init_array;
    let initializers = init
        .init_function
        .iter()
        .chain(&init.entries)
        .chain(&init.ctors)
        .filter_map(|i| {
            let name = FunctionName {
                raw_name: i.symbol.clone()?,
                name: i.demangled.clone().or_else(|| i.symbol.clone())?,
            };
            Some((i.target?, name))
        })
        .collect();
    Inspected {
        relocations: relocations_of(inspection),
        initializers,
    }
}

fn relocations_of(inspection: &Inspection) -> ObjectRelocations {
    let r = &inspection.relocations;
    ObjectRelocations {
        total: r.total,
        relative: r.relative,
        symbolic: r.symbolic,
        other: r.total.saturating_sub(r.relative + r.symbolic),
        plt: r
            .by_type
            .iter()
            .filter(|(name, _)| name.ends_with("_JUMP_SLOT") || name.ends_with("_JMP_SLOT"))
            .map(|(_, count)| count)
            .sum(),
        relr: r
            .sections
            .iter()
            .filter(|s| s.dynamic && s.format == "relr")
            .map(|s| s.relocations)
            .sum(),
        bind_now: inspection.dynamic.as_ref().is_some_and(|d| d.bind_now),
        by_type: r.by_type.clone(),
    }
}

/// The symbol covering a virtual address of the file: the address moved to
/// a file offset through the loaded section holding it.
fn symbol_at_address(index: &OffsetIndex, address: u64) -> Option<&SymbolSpan> {
    let section = index
        .sections()
        .iter()
        .find(|s| s.alloc && s.address <= address && address - s.address < s.size)?;
    index.symbol_at(section.offset + (address - section.address))
}

/// The spans as chart bands, outermost first.
fn bands(spans: &[&LoaderSpan], nesting: &Nesting) -> Vec<LoaderBand> {
    let mut bands: Vec<LoaderBand> = spans
        .iter()
        .enumerate()
        .map(|(i, span)| LoaderBand {
            phase: span.phase,
            pid: span.pid,
            object: span.object.clone(),
            t_begin_ns: span.t_begin_ns,
            t_end_ns: nesting.end[i],
            depth: nesting.level[i],
        })
        .collect();
    bands.sort_by_key(|b| (b.depth, b.t_begin_ns, b.pid));
    bands
}
