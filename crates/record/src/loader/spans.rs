//! Turns the loader's probe hits into spans: each entry probe opens a span
//! on its task's stack, its return probe closes it. What a return closes
//! is found by phase, not by the top of the stack, because ld.so unwinds
//! with longjmp on errors (a missing library under dlopen): the spans it
//! skipped never returned and keep no end.
//!
//! Every hit costs the traced task a trap, which lands in the spans open
//! around it: each span counts the hits on its task after its beginning up
//! to and including the one that ends it, so analysis can take the
//! calibrated cost of a hit off it.

use crate::loader::probes::Probe;
use crate::tracefs::events::LoaderHit;
use coldstart_profile::{LoaderPhase, LoaderSpan};
use std::collections::HashMap;

/// A span held open on its task's stack.
#[derive(Clone, Copy)]
struct Frame {
    /// Index into the assembly's spans.
    span: usize,
    /// The stack pointer at the entry probe.
    sp: Option<u64>,
}

/// A task's state: its open spans, outermost first.
#[derive(Default)]
struct Task {
    open: Vec<Frame>,
    /// When the task's process exec'd: rtld's own start begins there.
    exec_ns: Option<i64>,
    /// What it exec'd: the file of the main program ("" to the loader).
    exe: Option<String>,
    /// DT_INIT_ARRAY entries called so far by the innermost `init`.
    array_calls: u32,
    /// Probe hits on the task since its exec (or since first seen).
    hits: u64,
}

/// Spans of one run, built from hits in time order.
#[derive(Default)]
pub struct SpanAssembly {
    spans: Vec<LoaderSpan>,
    /// Per span, the file its object names: the path itself, or for the
    /// main program the file its task had exec'd when the span began.
    files: Vec<Option<String>>,
    /// Per span, its task's hit count when it began.
    begin_hits: Vec<u64>,
    tasks: HashMap<i32, Task>,
    count_lookups: bool,
}

impl SpanAssembly {
    /// `count_lookups`: lookups were probed, so a relocation without one
    /// counts zero rather than unknown.
    pub fn new(count_lookups: bool) -> SpanAssembly {
        SpanAssembly {
            count_lookups,
            ..SpanAssembly::default()
        }
    }

    /// Task `tid` exec'd `filename` at `t_ns`: the loader starts over in
    /// it, and "" names that file until the next exec.
    pub fn exec(&mut self, tid: i32, t_ns: i64, filename: &str) {
        let task = self.tasks.entry(tid).or_default();
        task.open.clear();
        task.exec_ns = Some(t_ns);
        task.exe = Some(filename.to_string());
        task.hits = 0;
    }

    pub fn add(&mut self, tid: i32, t_ns: i64, hit: &LoaderHit) {
        // Counted first: a span this hit ends holds it, one it begins not.
        self.task(tid).hits += 1;
        if let Some(sp) = hit.sp {
            self.unwind(tid, sp, t_ns);
        }
        match hit.probe {
            Probe::Load => {
                let mut span = self.span(tid, LoaderPhase::Load, t_ns);
                span.detail = hit.path.clone();
                self.open(tid, span, hit.sp);
            }
            Probe::MapFile => self.map_file(tid, t_ns, hit),
            Probe::LoadReturn => {
                if let Some(i) = self.close(tid, LoaderPhase::Load, t_ns) {
                    self.spans[i].object = hit.path.clone();
                    self.spans[i].base = hit.base;
                }
            }
            Probe::Open => {
                let mut span = self.span(tid, LoaderPhase::Open, t_ns);
                span.detail = hit.path.clone();
                self.open(tid, span, hit.sp);
            }
            Probe::OpenResult { .. } => {
                if let Some(i) = self.close(tid, LoaderPhase::Open, t_ns) {
                    self.spans[i].result = hit.value;
                }
            }
            Probe::Relocate => {
                let mut span = self.object_span(tid, LoaderPhase::Relocate, t_ns, hit);
                span.lookups = self.count_lookups.then_some(0);
                self.open(tid, span, hit.sp);
            }
            Probe::RelocateReturn => {
                self.close(tid, LoaderPhase::Relocate, t_ns);
            }
            Probe::Lookup => self.lookup(tid),
            Probe::Init => {
                let span = self.object_span(tid, LoaderPhase::Init, t_ns, hit);
                self.open(tid, span, hit.sp);
                self.task(tid).array_calls = 0;
            }
            Probe::InitCall { array, .. } => self.initializer(tid, t_ns, array, hit),
            Probe::InitReturn => {
                self.close(tid, LoaderPhase::Init, t_ns);
            }
            Probe::Dlopen => {
                let mut span = self.span(tid, LoaderPhase::Dlopen, t_ns);
                span.detail = hit.path.clone();
                self.open(tid, span, hit.sp);
            }
            Probe::DlopenReturn => {
                if let Some(i) = self.close(tid, LoaderPhase::Dlopen, t_ns) {
                    let returned = hit.value.is_some_and(|v| v != 0);
                    self.spans[i].result = Some(i64::from(returned));
                    self.spans[i].object = hit.path.clone().filter(|_| returned);
                }
            }
            Probe::RtldUser => {
                let exec_ns = self.task(tid).exec_ns;
                if let Some(begin) = exec_ns {
                    let span = self.span(tid, LoaderPhase::Start, begin);
                    let i = self.push(span);
                    // It began at the exec, before any hit.
                    self.begin_hits[i] = 0;
                    self.end(i, t_ns);
                }
            }
            Probe::Entry => {
                let mut span = self.span(tid, LoaderPhase::Entry, t_ns);
                span.t_end_ns = Some(t_ns);
                span.target = hit.target;
                // An instant: its hits are those since the exec, which
                // exec-to-entry holds.
                span.probe_hits = Some(self.task(tid).hits);
                self.push(span);
            }
        }
    }

    /// The spans, in the order they began (those still open never
    /// ended), each with the path of its object's file when known.
    pub fn finish(self) -> Vec<(LoaderSpan, Option<String>)> {
        let mut spans: Vec<(LoaderSpan, Option<String>)> = self
            .spans
            .into_iter()
            .zip(self.files)
            .map(|(span, exe)| {
                let file = match span.object.as_deref() {
                    Some("") => exe,
                    Some(path) => Some(path.to_string()),
                    None => None,
                };
                (span, file)
            })
            .collect();
        spans.sort_by_key(|(s, _)| s.t_begin_ns);
        spans
    }

    /// Adds a span that is not held open, noting its task's program.
    fn push(&mut self, span: LoaderSpan) -> usize {
        let task = self.tasks.get(&span.pid);
        let exe = task.and_then(|t| t.exe.clone());
        self.begin_hits.push(task.map_or(0, |t| t.hits));
        self.spans.push(span);
        self.files.push(exe);
        self.spans.len() - 1
    }

    /// Ends span `i` at `t_ns`, with the hits its task took since it began.
    fn end(&mut self, i: usize, t_ns: i64) {
        let hits = self.tasks.get(&self.spans[i].pid).map_or(0, |t| t.hits);
        let span = &mut self.spans[i];
        span.t_end_ns = Some(t_ns);
        span.probe_hits = Some(hits.saturating_sub(self.begin_hits[i]));
    }

    fn task(&mut self, tid: i32) -> &mut Task {
        self.tasks.entry(tid).or_default()
    }

    fn span(&mut self, tid: i32, phase: LoaderPhase, t_ns: i64) -> LoaderSpan {
        let depth = self.task(tid).open.len() as u32;
        LoaderSpan {
            pid: tid,
            phase,
            object: None,
            file_id: None,
            t_begin_ns: t_ns,
            t_end_ns: None,
            base: None,
            target: None,
            detail: None,
            result: None,
            lookups: None,
            depth,
            probe_hits: None,
        }
    }

    fn object_span(
        &mut self,
        tid: i32,
        phase: LoaderPhase,
        t_ns: i64,
        hit: &LoaderHit,
    ) -> LoaderSpan {
        let mut span = self.span(tid, phase, t_ns);
        span.object = hit.path.clone();
        span.base = hit.base;
        span
    }

    /// Holds `span` open on its task; `sp` is the entry's stack pointer.
    fn open(&mut self, tid: i32, span: LoaderSpan, sp: Option<u64>) {
        let span = self.push(span);
        self.task(tid).open.push(Frame { span, sp });
    }

    /// The innermost open span of `phase` on task `tid`: its position on
    /// the task's stack.
    fn innermost(&self, tid: i32, phase: LoaderPhase) -> Option<usize> {
        let task = self.tasks.get(&tid)?;
        task.open
            .iter()
            .rposition(|f| self.spans[f.span].phase == phase)
    }

    /// A probe was entered with stack pointer `sp`: every open span
    /// entered at or below that address is no longer on the stack. An
    /// initializer's sibling starting ends it; anything else was left by
    /// longjmp (ld.so reports errors that way) and never returned: a
    /// dlopen that did so failed.
    fn unwind(&mut self, tid: i32, sp: u64, t_ns: i64) {
        while let Some(task) = self.tasks.get_mut(&tid)
            && let Some(&Frame {
                span: index,
                sp: Some(entered),
            }) = task.open.last()
        {
            if entered > sp {
                break;
            }
            task.open.pop();
            match self.spans[index].phase {
                LoaderPhase::Initializer => self.end(index, t_ns),
                LoaderPhase::Dlopen => self.spans[index].result = Some(0),
                _ => {}
            }
        }
    }

    /// Closes the innermost open span of `phase` on the task, and drops
    /// the spans above it (they were unwound, or never returned).
    fn close(&mut self, tid: i32, phase: LoaderPhase, t_ns: i64) -> Option<usize> {
        let at = self.innermost(tid, phase)?;
        let task = self.tasks.get_mut(&tid)?;
        let above: Vec<Frame> = task.open.drain(at + 1..).collect();
        let index = task.open.pop()?.span;
        // Mapping ends with its load, an initializer with its object's
        // init: they are parts of the frame, not frames of their own.
        for frame in above {
            if matches!(
                self.spans[frame.span].phase,
                LoaderPhase::Map | LoaderPhase::Initializer
            ) {
                self.end(frame.span, t_ns);
            }
        }
        self.end(index, t_ns);
        Some(index)
    }

    /// The search chose a file: what came before it in this load was the
    /// search, what follows is mapping it.
    fn map_file(&mut self, tid: i32, t_ns: i64, hit: &LoaderHit) {
        let Some(at) = self.innermost(tid, LoaderPhase::Load) else {
            return;
        };
        let load = self.tasks[&tid].open[at].span;
        let begin = self.spans[load].t_begin_ns;
        let mut search = self.span(tid, LoaderPhase::Search, begin);
        // The search's open attempts happened inside it, one level deeper.
        search.depth = self.spans[load].depth + 1;
        search.object = hit.path.clone();
        search.detail = self.spans[load].detail.clone();
        for span in &mut self.spans[load + 1..] {
            if span.pid == tid && span.phase == LoaderPhase::Open {
                span.depth += 1;
            }
        }
        let search = self.push(search);
        // It began with its load, and holds the same hits from there.
        self.begin_hits[search] = self.begin_hits[load];
        self.end(search, t_ns);
        let mut map = self.span(tid, LoaderPhase::Map, t_ns);
        map.object = hit.path.clone();
        self.open(tid, map, hit.sp);
        self.spans[load].object = hit.path.clone();
    }

    fn lookup(&mut self, tid: i32) {
        if let Some(at) = self.innermost(tid, LoaderPhase::Relocate) {
            let span = self.tasks[&tid].open[at].span;
            if let Some(lookups) = &mut self.spans[span].lookups {
                *lookups += 1;
            }
        }
    }

    /// One initializer starts: the previous one of the same object ended.
    fn initializer(&mut self, tid: i32, t_ns: i64, array: bool, hit: &LoaderHit) {
        let Some(task) = self.tasks.get_mut(&tid) else {
            return;
        };
        if let Some(&top) = task.open.last()
            && self.spans[top.span].phase == LoaderPhase::Initializer
        {
            task.open.pop();
            self.end(top.span, t_ns);
        }
        let Some(task) = self.tasks.get_mut(&tid) else {
            return;
        };
        let Some(init) = task.open.last().map(|f| f.span) else {
            return;
        };
        if self.spans[init].phase != LoaderPhase::Init {
            return;
        }
        let detail = if array {
            let index = task.array_calls;
            task.array_calls += 1;
            format!("DT_INIT_ARRAY[{index}]")
        } else {
            "DT_INIT".to_string()
        };
        let (object, base) = (self.spans[init].object.clone(), self.spans[init].base);
        let mut span = self.span(tid, LoaderPhase::Initializer, t_ns);
        span.object = object;
        span.base = base;
        span.target = hit.target;
        span.detail = Some(detail);
        self.open(tid, span, hit.sp);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hit(probe: Probe, path: Option<&str>, sp: Option<u64>) -> LoaderHit {
        LoaderHit {
            probe,
            path: path.map(str::to_string),
            base: None,
            target: None,
            value: None,
            sp,
        }
    }

    fn phases(spans: &[LoaderSpan]) -> Vec<(LoaderPhase, i64, Option<i64>, u32)> {
        spans
            .iter()
            .map(|s| (s.phase, s.t_begin_ns, s.t_end_ns, s.depth))
            .collect()
    }

    #[test]
    fn a_load_splits_into_search_with_its_opens_then_map() {
        let mut a = SpanAssembly::new(false);
        a.add(7, 10, &hit(Probe::Load, Some("liba.so"), Some(1000)));
        a.add(7, 11, &hit(Probe::Open, Some("/x/liba.so"), Some(900)));
        let mut failed = hit(Probe::OpenResult { site: 0 }, None, None);
        failed.value = Some(-2);
        a.add(7, 12, &failed);
        a.add(7, 13, &hit(Probe::Open, Some("/y/liba.so"), Some(900)));
        let mut opened = hit(Probe::OpenResult { site: 1 }, None, None);
        opened.value = Some(3);
        a.add(7, 14, &opened);
        a.add(7, 15, &hit(Probe::MapFile, Some("/y/liba.so"), Some(950)));
        a.add(7, 20, &hit(Probe::LoadReturn, Some("/y/liba.so"), None));
        let spans: Vec<LoaderSpan> = a.finish().into_iter().map(|(s, _)| s).collect();
        assert_eq!(
            phases(&spans),
            vec![
                (LoaderPhase::Load, 10, Some(20), 0),
                (LoaderPhase::Search, 10, Some(15), 1),
                (LoaderPhase::Open, 11, Some(12), 2),
                (LoaderPhase::Open, 13, Some(14), 2),
                (LoaderPhase::Map, 15, Some(20), 1),
            ]
        );
        assert_eq!(spans[2].result, Some(-2));
        assert_eq!(spans[3].result, Some(3));
        // Each span holds the hits after its own first one, its last
        // included: the load all six, its search the two opens, their
        // results and the map_file that ended it.
        let hits: Vec<Option<u64>> = spans.iter().map(|s| s.probe_hits).collect();
        assert_eq!(hits, [Some(6), Some(5), Some(1), Some(1), Some(1)]);
        assert_eq!(spans[0].object.as_deref(), Some("/y/liba.so"));
        assert_eq!(spans[0].detail.as_deref(), Some("liba.so"));
    }

    #[test]
    fn a_dlopen_left_by_longjmp_failed_and_does_not_nest_the_next() {
        let mut a = SpanAssembly::new(false);
        a.add(7, 10, &hit(Probe::Dlopen, Some("libmissing.so"), Some(800)));
        a.add(7, 11, &hit(Probe::Load, Some("libmissing.so"), Some(700)));
        // ld.so signals the error with longjmp: no returns; the next
        // dlopen enters from the same caller, at the same stack pointer.
        a.add(7, 30, &hit(Probe::Dlopen, Some("libc2.so"), Some(800)));
        let mut returned = hit(Probe::DlopenReturn, Some("/l/libc2.so"), None);
        returned.value = Some(0x5555_0000);
        a.add(7, 40, &returned);
        let spans: Vec<LoaderSpan> = a.finish().into_iter().map(|(s, _)| s).collect();
        assert_eq!(
            phases(&spans),
            vec![
                (LoaderPhase::Dlopen, 10, None, 0),
                (LoaderPhase::Load, 11, None, 1),
                (LoaderPhase::Dlopen, 30, Some(40), 0),
            ]
        );
        assert_eq!(spans[0].result, Some(0));
        assert_eq!(spans[2].result, Some(1));
        assert_eq!(spans[2].object.as_deref(), Some("/l/libc2.so"));
    }

    #[test]
    fn initializers_are_numbered_and_end_at_the_next_or_at_init_return() {
        let mut a = SpanAssembly::new(false);
        let mut init = hit(Probe::Init, Some("/l/liba.so"), Some(500));
        init.base = Some(0x7000);
        a.add(9, 100, &init);
        let call = |array: bool, target: u64| {
            let mut h = hit(Probe::InitCall { site: 0, array }, None, Some(400));
            h.target = Some(target);
            h
        };
        a.add(9, 101, &call(false, 0x7100));
        a.add(9, 110, &call(true, 0x7200));
        a.add(9, 120, &call(true, 0x7300));
        a.add(9, 125, &hit(Probe::InitReturn, None, None));
        let spans: Vec<LoaderSpan> = a.finish().into_iter().map(|(s, _)| s).collect();
        assert_eq!(
            phases(&spans),
            vec![
                (LoaderPhase::Init, 100, Some(125), 0),
                (LoaderPhase::Initializer, 101, Some(110), 1),
                (LoaderPhase::Initializer, 110, Some(120), 1),
                (LoaderPhase::Initializer, 120, Some(125), 1),
            ]
        );
        let hits: Vec<Option<u64>> = spans.iter().map(|s| s.probe_hits).collect();
        assert_eq!(hits, [Some(4), Some(1), Some(1), Some(1)]);
        let details: Vec<_> = spans[1..]
            .iter()
            .map(|s| s.detail.clone().unwrap())
            .collect();
        assert_eq!(details, ["DT_INIT", "DT_INIT_ARRAY[0]", "DT_INIT_ARRAY[1]"]);
        assert!(spans[1..].iter().all(|s| s.base == Some(0x7000)));
        assert_eq!(spans[3].target, Some(0x7300));
    }

    #[test]
    fn start_holds_every_hit_since_the_exec_and_entry_counts_them_all() {
        let mut a = SpanAssembly::new(true);
        // Hits before the exec belong to the old program.
        a.add(5, 1, &hit(Probe::Lookup, None, Some(500)));
        a.exec(5, 10, "/bin/prog");
        a.add(5, 20, &hit(Probe::Relocate, Some("/l/libb.so"), Some(600)));
        a.add(5, 21, &hit(Probe::Lookup, None, Some(500)));
        a.add(6, 22, &hit(Probe::Lookup, None, Some(500)));
        a.add(5, 23, &hit(Probe::RelocateReturn, None, None));
        a.add(5, 30, &hit(Probe::RtldUser, None, Some(700)));
        a.add(5, 40, &hit(Probe::Entry, None, Some(700)));
        let spans: Vec<LoaderSpan> = a.finish().into_iter().map(|(s, _)| s).collect();
        let hits: Vec<(LoaderPhase, Option<u64>)> =
            spans.iter().map(|s| (s.phase, s.probe_hits)).collect();
        assert_eq!(
            hits,
            [
                (LoaderPhase::Start, Some(4)),
                (LoaderPhase::Relocate, Some(2)),
                (LoaderPhase::Entry, Some(5)),
            ]
        );
    }

    #[test]
    fn a_span_that_never_ended_has_no_hit_count() {
        let mut a = SpanAssembly::new(false);
        a.add(7, 10, &hit(Probe::Dlopen, Some("libmissing.so"), Some(800)));
        a.add(7, 11, &hit(Probe::Load, Some("libmissing.so"), Some(700)));
        let spans: Vec<LoaderSpan> = a.finish().into_iter().map(|(s, _)| s).collect();
        assert!(spans.iter().all(|s| s.probe_hits.is_none()));
    }

    #[test]
    fn lookups_count_into_the_relocation_running_on_the_task() {
        let mut a = SpanAssembly::new(true);
        a.add(3, 1, &hit(Probe::Relocate, Some("/l/libb.so"), Some(600)));
        a.add(3, 2, &hit(Probe::Lookup, None, Some(500)));
        a.add(4, 2, &hit(Probe::Lookup, None, Some(500)));
        a.add(3, 3, &hit(Probe::Lookup, None, Some(500)));
        a.add(3, 4, &hit(Probe::RelocateReturn, None, None));
        a.add(3, 5, &hit(Probe::Relocate, Some("/l/libc.so"), Some(600)));
        a.add(3, 6, &hit(Probe::RelocateReturn, None, None));
        let spans: Vec<LoaderSpan> = a.finish().into_iter().map(|(s, _)| s).collect();
        assert_eq!(spans[0].lookups, Some(2));
        assert_eq!(spans[1].lookups, Some(0));
    }
}
