//! Turns the loader's probe hits into spans: each entry probe opens a span
//! on its task's stack, its return probe closes it. What a return closes
//! is found by phase, not by the top of the stack, because ld.so unwinds
//! with longjmp on errors (a missing library under dlopen): the spans it
//! skipped never returned and keep no end.

use crate::loader::probes::Probe;
use crate::tracefs::events::LoaderHit;
use coldstart_profile::{LoaderPhase, LoaderSpan};
use std::collections::HashMap;

/// A task's open spans, outermost first, as indexes into `spans`.
#[derive(Default)]
struct Task {
    open: Vec<usize>,
    /// When the task's process exec'd: rtld's own start begins there.
    exec_ns: Option<i64>,
    /// DT_INIT_ARRAY entries called so far by the innermost `init`.
    array_calls: u32,
}

/// Spans of one run, built from hits in time order.
#[derive(Default)]
pub struct SpanAssembly {
    spans: Vec<LoaderSpan>,
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

    /// Task `tid` exec'd at `t_ns`: the loader starts over in it.
    pub fn exec(&mut self, tid: i32, t_ns: i64) {
        let task = self.tasks.entry(tid).or_default();
        task.open.clear();
        task.exec_ns = Some(t_ns);
    }

    pub fn add(&mut self, tid: i32, t_ns: i64, hit: &LoaderHit) {
        match hit.probe {
            Probe::Load => {
                let mut span = self.span(tid, LoaderPhase::Load, t_ns);
                span.detail = hit.path.clone();
                self.open(tid, span);
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
                self.open(tid, span);
            }
            Probe::OpenReturn => {
                if let Some(i) = self.close(tid, LoaderPhase::Open, t_ns) {
                    self.spans[i].result = hit.value;
                }
            }
            Probe::Relocate => {
                let mut span = self.object_span(tid, LoaderPhase::Relocate, t_ns, hit);
                span.lookups = self.count_lookups.then_some(0);
                self.open(tid, span);
            }
            Probe::RelocateReturn => {
                self.close(tid, LoaderPhase::Relocate, t_ns);
            }
            Probe::Lookup => self.lookup(tid),
            Probe::Init => {
                let span = self.object_span(tid, LoaderPhase::Init, t_ns, hit);
                self.open(tid, span);
                self.task(tid).array_calls = 0;
            }
            Probe::InitCall { array, .. } => self.initializer(tid, t_ns, array, hit),
            Probe::InitReturn => {
                self.close(tid, LoaderPhase::Init, t_ns);
            }
            Probe::Dlopen => {
                let mut span = self.span(tid, LoaderPhase::Dlopen, t_ns);
                span.detail = hit.path.clone();
                self.open(tid, span);
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
                    let mut span = self.span(tid, LoaderPhase::Start, begin);
                    span.t_end_ns = Some(t_ns);
                    self.spans.push(span);
                }
            }
            Probe::Entry => {
                let mut span = self.span(tid, LoaderPhase::Entry, t_ns);
                span.t_end_ns = Some(t_ns);
                span.target = hit.target;
                self.spans.push(span);
            }
        }
    }

    /// The spans, in the order they began; those still open never ended.
    pub fn finish(self) -> Vec<LoaderSpan> {
        let mut spans = self.spans;
        spans.sort_by_key(|s| s.t_begin_ns);
        spans
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

    fn open(&mut self, tid: i32, span: LoaderSpan) {
        let index = self.spans.len();
        self.spans.push(span);
        self.task(tid).open.push(index);
    }

    /// Closes the innermost open span of `phase` on the task, and drops
    /// the spans above it (they were unwound, or never returned).
    fn close(&mut self, tid: i32, phase: LoaderPhase, t_ns: i64) -> Option<usize> {
        let task = self.tasks.get_mut(&tid)?;
        let at = task
            .open
            .iter()
            .rposition(|&i| self.spans[i].phase == phase)?;
        // Mapping ends with its load, an initializer with its object's
        // init: they are parts of the frame, not frames of their own.
        for &above in &task.open[at + 1..] {
            if matches!(
                self.spans[above].phase,
                LoaderPhase::Map | LoaderPhase::Initializer
            ) {
                self.spans[above].t_end_ns = Some(t_ns);
            }
        }
        let index = task.open[at];
        task.open.truncate(at);
        self.spans[index].t_end_ns = Some(t_ns);
        Some(index)
    }

    /// The search chose a file: what came before it in this load was the
    /// search, what follows is mapping it.
    fn map_file(&mut self, tid: i32, t_ns: i64, hit: &LoaderHit) {
        let Some(task) = self.tasks.get(&tid) else {
            return;
        };
        let Some(&load) = task
            .open
            .iter()
            .rev()
            .find(|&&i| self.spans[i].phase == LoaderPhase::Load)
        else {
            return;
        };
        let begin = self.spans[load].t_begin_ns;
        let mut search = self.span(tid, LoaderPhase::Search, begin);
        // The search's open attempts happened inside it, one level deeper.
        search.depth = self.spans[load].depth + 1;
        search.t_end_ns = Some(t_ns);
        search.object = hit.path.clone();
        search.detail = self.spans[load].detail.clone();
        for span in &mut self.spans[load + 1..] {
            if span.pid == tid && span.phase == LoaderPhase::Open {
                span.depth += 1;
            }
        }
        self.spans.push(search);
        let mut map = self.span(tid, LoaderPhase::Map, t_ns);
        map.object = hit.path.clone();
        self.open(tid, map);
        self.spans[load].object = hit.path.clone();
    }

    fn lookup(&mut self, tid: i32) {
        let Some(task) = self.tasks.get(&tid) else {
            return;
        };
        if let Some(&i) = task
            .open
            .iter()
            .rev()
            .find(|&&i| self.spans[i].phase == LoaderPhase::Relocate)
            && let Some(lookups) = &mut self.spans[i].lookups
        {
            *lookups += 1;
        }
    }

    /// One initializer starts: the previous one of the same object ended.
    fn initializer(&mut self, tid: i32, t_ns: i64, array: bool, hit: &LoaderHit) {
        let Some(task) = self.tasks.get_mut(&tid) else {
            return;
        };
        if let Some(&top) = task.open.last()
            && self.spans[top].phase == LoaderPhase::Initializer
        {
            self.spans[top].t_end_ns = Some(t_ns);
            task.open.pop();
        }
        let Some(&init) = task.open.last() else {
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
        self.open(tid, span);
    }
}
