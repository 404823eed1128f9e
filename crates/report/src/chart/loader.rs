//! The dynamic loader's lane under the page plots: what ld.so was doing
//! (loading, relocating, running initializers, dlopen) as bands on the
//! chart's time axis, so "other libraries, then relocations, then static
//! initializers" reads at a glance under the page activity it caused.
//!
//! Rows, in one block per process with spans (a single unlabelled block
//! when only one process has any, else one block per process labelled
//! "comm (pid)", earliest first, at most [`MAX_PROCESSES`]): `start`
//! (exec until rtld has loaded and relocated the initial set), `load`
//! (each load, with its search, the open attempts inside the search and
//! the mapping on top), `relocate`, `init` (each object's init with its
//! initializers on top) and `dlopen`; only rows some block uses are drawn.
//! The jump to the program's entry is a vertical line across its block.
//!
//! A span at least `merge` pixels wide is one rect with its own tooltip.
//! Narrower spans of one phase in one block merge while they start less
//! than `merge` pixels after the previous one ended: one rect at least a
//! pixel wide from the first begin to the last end, whose tooltip and
//! `data-ns` give the time the spans cover and whose opacity says how
//! much of the rect that is. `merge` starts at a pixel and doubles while
//! the bands exceed [`LOADER_BUDGET`] bytes, so a run with thousands of
//! sub-millisecond spans stays small. Bands at least three pixels wide
//! have a thin white edge, so back-to-back spans (one object's relocation
//! right after another's) stay apart.
//!
//! Classes: `loader`, `loader-legend`, `loader-process` (`data-pid`, the
//! process), `loader-row` (`data-row`), `loader-phase` (`data-phase`),
//! `loader-entry`. Every band rect has `data-ns`, the ns it covers;
//! merged ones also `data-spans`.

use super::{Layout, PANEL_FOOT, escape, num, shorten, time_axis};
use coldstart_analyze::{LoaderBand, ProcessInfo, Timeline};
use coldstart_profile::LoaderPhase;
use std::cmp::Reverse;
use std::collections::HashMap;
use std::fmt::Write;

/// Blocks drawn at most; the rest are counted in the chart's footnote.
pub const MAX_PROCESSES: usize = 8;
/// Bytes of band rects for the whole lane: with the page marks'
/// [`MARK_BUDGET`](super::MARK_BUDGET) the document stays near 2 MB.
pub const LOADER_BUDGET: usize = 400_000;
/// Coarsest merge width the budget may force, in pixels.
const MAX_MERGE: f64 = 64.0;
/// Lane title and legend above the rows.
const LANE_HEADER: f64 = 40.0;
/// A block's "comm (pid)" line, when blocks are labelled.
const PROCESS_LABEL: f64 = 16.0;
const ROW_HEIGHT: f64 = 14.0;
const BAND_HEIGHT: f64 = 10.0;
const BLOCK_GAP: f64 = 8.0;
/// A merged rect is never drawn fainter than this, so it stays visible.
const MIN_OPACITY: f64 = 0.3;
/// Bands narrower than this (px) have no white edge.
const NARROW_BAND: f64 = 3.0;
/// Object names a merged rect's tooltip lists.
const NAMES_PER_MERGE: usize = 3;
const ENTRY_COLOR: &str = "#000";

/// The lane's rows, top to bottom.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Row {
    Start,
    Load,
    Relocate,
    Init,
    Dlopen,
}

impl Row {
    const ALL: [Row; 5] = [Row::Start, Row::Load, Row::Relocate, Row::Init, Row::Dlopen];

    /// The row a phase is drawn in; the entry is a marker, not a band.
    fn of(phase: LoaderPhase) -> Option<Row> {
        match phase {
            LoaderPhase::Start => Some(Row::Start),
            LoaderPhase::Load | LoaderPhase::Search | LoaderPhase::Map | LoaderPhase::Open => {
                Some(Row::Load)
            }
            LoaderPhase::Relocate => Some(Row::Relocate),
            LoaderPhase::Init | LoaderPhase::Initializer => Some(Row::Init),
            LoaderPhase::Dlopen => Some(Row::Dlopen),
            LoaderPhase::Entry => None,
        }
    }

    const fn label(self) -> &'static str {
        match self {
            Row::Start => "start",
            Row::Load => "load",
            Row::Relocate => "relocate",
            Row::Init => "init",
            Row::Dlopen => "dlopen",
        }
    }

    /// The row's phases, bottom first: a phase's parts are drawn over it.
    const fn phases(self) -> &'static [LoaderPhase] {
        match self {
            Row::Start => &[LoaderPhase::Start],
            Row::Load => &[
                LoaderPhase::Load,
                LoaderPhase::Search,
                LoaderPhase::Open,
                LoaderPhase::Map,
            ],
            Row::Relocate => &[LoaderPhase::Relocate],
            Row::Init => &[LoaderPhase::Init, LoaderPhase::Initializer],
            Row::Dlopen => &[LoaderPhase::Dlopen],
        }
    }
}

/// One colour per phase; parts drawn over their phase are darker or
/// warmer so they stand out on it.
pub(crate) const fn phase_color(phase: LoaderPhase) -> &'static str {
    match phase {
        LoaderPhase::Start => "#c7c7c7",
        LoaderPhase::Load => "#9ecae1",
        LoaderPhase::Search => "#fdd0a2",
        LoaderPhase::Open => "#e6550d",
        LoaderPhase::Map => "#3182bd",
        LoaderPhase::Relocate => "#31a354",
        LoaderPhase::Init => "#bcbddc",
        LoaderPhase::Initializer => "#54278f",
        LoaderPhase::Dlopen => "#8c6d31",
        LoaderPhase::Entry => ENTRY_COLOR,
    }
}

/// The object's file name, as tooltips and Perfetto name it: "main
/// program" for the loader's "" and nothing when the span has no object.
pub(crate) fn object_name(object: Option<&str>) -> Option<&str> {
    let object = object?;
    if object.is_empty() {
        return Some("main program");
    }
    Some(object.rsplit('/').find(|s| !s.is_empty()).unwrap_or(object))
}

/// A duration as people read it: ms, µs or ns.
fn duration(ns: i64) -> String {
    if ns >= 1_000_000 {
        format!("{:.2} ms", ns as f64 / 1e6)
    } else if ns >= 1_000 {
        format!("{:.1} µs", ns as f64 / 1e3)
    } else {
        format!("{ns} ns")
    }
}

fn at_ms(t_ns: i64) -> String {
    format!("{:.3}", t_ns as f64 / 1e6)
}

/// One process's spans.
struct Block<'a> {
    tgid: i32,
    label: String,
    bands: Vec<&'a LoaderBand>,
}

/// What the lane draws, decided before the SVG's height is known.
pub(super) struct Lane<'a> {
    blocks: Vec<Block<'a>>,
    rows: Vec<Row>,
    /// Phases the shown blocks have, for the legend.
    phases: Vec<LoaderPhase>,
    /// Processes with spans that are not drawn.
    hidden: usize,
}

/// A process is named after its leader's comm (else its executable).
fn process_label(processes: &[ProcessInfo], tgid: i32) -> String {
    let leader = processes.iter().find(|p| p.pid == tgid);
    let name = leader.and_then(|p| {
        p.comm.clone().or_else(|| {
            p.exe
                .as_deref()
                .and_then(|e| object_name(Some(e)))
                .map(str::to_string)
        })
    });
    match name {
        Some(name) => format!("{name} ({tgid})"),
        None => format!("pid {tgid}"),
    }
}

impl<'a> Lane<'a> {
    /// The lane for the timeline's loader spans; None when it has none.
    pub(super) fn plan(timeline: &'a Timeline) -> Option<Lane<'a>> {
        if timeline.loader.is_empty() {
            return None;
        }
        let tgid_of: HashMap<i32, i32> = timeline
            .processes
            .iter()
            .map(|p| (p.pid, p.tgid.unwrap_or(p.pid)))
            .collect();
        let mut by_process: HashMap<i32, Vec<&LoaderBand>> = HashMap::new();
        for band in &timeline.loader {
            let tgid = tgid_of.get(&band.pid).copied().unwrap_or(band.pid);
            by_process.entry(tgid).or_default().push(band);
        }
        let mut blocks: Vec<Block> = by_process
            .into_iter()
            .map(|(tgid, bands)| Block {
                tgid,
                label: process_label(&timeline.processes, tgid),
                bands,
            })
            .collect();
        blocks.sort_by_key(|b| {
            let first = b.bands.iter().map(|band| band.t_begin_ns).min();
            (first, b.tgid)
        });
        let hidden = blocks.len().saturating_sub(MAX_PROCESSES);
        blocks.truncate(MAX_PROCESSES);

        let shown = || blocks.iter().flat_map(|b| &b.bands);
        let mut rows: Vec<Row> = Row::ALL
            .into_iter()
            .filter(|&row| shown().any(|band| Row::of(band.phase) == Some(row)))
            .collect();
        // Spans that are all entries still need a row to mark them on.
        if rows.is_empty() {
            rows.push(Row::Start);
        }
        let phases = LoaderPhase::ALL
            .into_iter()
            .filter(|&phase| shown().any(|band| band.phase == phase))
            .collect();
        Some(Lane {
            blocks,
            rows,
            phases,
            hidden,
        })
    }

    fn labelled(&self) -> bool {
        self.blocks.len() + self.hidden > 1
    }

    fn block_height(&self) -> f64 {
        let label = if self.labelled() { PROCESS_LABEL } else { 0.0 };
        label + self.rows.len() as f64 * ROW_HEIGHT
    }

    /// Top of block `index`'s first row, the lane starting at `top`.
    fn rows_top(&self, top: f64, index: usize) -> f64 {
        let label = if self.labelled() { PROCESS_LABEL } else { 0.0 };
        top + LANE_HEADER + index as f64 * (self.block_height() + BLOCK_GAP) + label
    }

    /// The bottom of the last block's rows, the lane starting at `top`.
    pub(super) fn rows_bottom(&self, top: f64) -> f64 {
        let blocks = self.blocks.len() as f64;
        top + LANE_HEADER + blocks * self.block_height() + (blocks - 1.0).max(0.0) * BLOCK_GAP
    }

    /// The lane's whole height, time labels included.
    pub(super) fn height(&self) -> f64 {
        self.rows_bottom(0.0) + PANEL_FOOT
    }

    /// Draws the lane from `top`; returns what the chart's footnote should
    /// say about it.
    pub(super) fn write(&self, out: &mut String, layout: &Layout, top: f64) -> Vec<String> {
        let mut merge = 1.0;
        let bands = loop {
            let bands = self.bands(layout, top, merge);
            if bands.len() <= LOADER_BUDGET || merge >= MAX_MERGE {
                break bands;
            }
            merge *= 2.0;
        };
        let _ = writeln!(
            out,
            r#"<g class="loader" data-processes="{}">"#,
            self.blocks.len() + self.hidden
        );
        let _ = writeln!(
            out,
            r#"<text class="loader-title" x="{}" y="{}" font-size="13" font-weight="bold">Dynamic loader (ld.so): its phases per object on the same time axis</text>"#,
            num(layout.plot_left),
            num(top + 14.0)
        );
        self.legend(out, layout, top + 22.0);
        time_axis(
            out,
            layout,
            self.rows_top(top, 0) - if self.labelled() { PROCESS_LABEL } else { 0.0 },
            self.rows_bottom(top),
        );
        out.push_str(&bands);
        out.push_str("</g>\n");

        let mut notes = Vec::new();
        if self.hidden > 0 {
            notes.push(format!(
                "{} more process(es) with loader spans not shown",
                self.hidden
            ));
        }
        if merge > 1.0 {
            notes.push(format!(
                "loader spans under {} px merged (not 1) to keep this file small",
                num(merge)
            ));
        }
        notes
    }

    fn legend(&self, out: &mut String, layout: &Layout, swatch_top: f64) {
        let mut x = layout.plot_left;
        let text_y = num(swatch_top + 9.0);
        out.push_str("<g class=\"loader-legend\">\n");
        for &phase in &self.phases {
            let color = phase_color(phase);
            let swatch = if phase == LoaderPhase::Entry {
                let xm = num(x + 5.0);
                format!(
                    r#"<line x1="{xm}" y1="{}" x2="{xm}" y2="{}" stroke="{color}" stroke-width="2"/>"#,
                    num(swatch_top),
                    num(swatch_top + 10.0)
                )
            } else {
                format!(
                    r#"<rect x="{}" y="{}" width="10" height="10" fill="{color}"/>"#,
                    num(x),
                    num(swatch_top)
                )
            };
            let label = phase.as_str();
            let _ = writeln!(
                out,
                r#"{swatch}<text x="{}" y="{text_y}">{label}</text>"#,
                num(x + 15.0)
            );
            x += 15.0 + label.chars().count() as f64 * 6.2 + 18.0;
        }
        out.push_str("</g>\n");
    }

    /// Every block's frame, labels, band rects and entry markers.
    fn bands(&self, layout: &Layout, top: f64, merge: f64) -> String {
        let mut out = String::new();
        for (index, block) in self.blocks.iter().enumerate() {
            let rows_top = self.rows_top(top, index);
            let rows_bottom = rows_top + self.rows.len() as f64 * ROW_HEIGHT;
            let _ = writeln!(
                out,
                r#"<g class="loader-process" data-pid="{}">"#,
                block.tgid
            );
            if self.labelled() {
                let _ = writeln!(
                    out,
                    r#"<text class="process" x="{}" y="{}" font-weight="bold">{}</text>"#,
                    num(layout.plot_left),
                    num(rows_top - 4.0),
                    escape(&block.label)
                );
            }
            let _ = writeln!(
                out,
                r##"<rect class="frame" x="{}" y="{}" width="{}" height="{}" fill="none" stroke="#888"/>"##,
                num(layout.plot_left),
                num(rows_top),
                num(layout.plot_width),
                num(rows_bottom - rows_top)
            );
            for (r, &row) in self.rows.iter().enumerate() {
                let row_top = rows_top + r as f64 * ROW_HEIGHT;
                let _ = write!(
                    out,
                    r##"<g class="loader-row" data-row="{label}"><text x="{}" y="{}" text-anchor="end" fill="#444" font-size="10">{label}</text>"##,
                    num(layout.plot_left - 6.0),
                    num(row_top + 10.5),
                    label = row.label()
                );
                for &phase in row.phases() {
                    let bands: Vec<&LoaderBand> = block
                        .bands
                        .iter()
                        .copied()
                        .filter(|band| band.phase == phase)
                        .collect();
                    if bands.is_empty() {
                        continue;
                    }
                    // A thin white edge tells back-to-back spans apart.
                    let _ = write!(
                        out,
                        r##"<g class="loader-phase" data-phase="{}" fill="{}" stroke="#fff" stroke-width="0.5">"##,
                        phase.as_str(),
                        phase_color(phase)
                    );
                    for piece in pieces(&bands, layout, merge) {
                        piece.write(&mut out, layout, block.tgid, row_top + 2.0, merge);
                    }
                    out.push_str("</g>");
                }
                out.push_str("</g>\n");
            }
            entries(&mut out, layout, block, rows_top, rows_bottom);
            out.push_str("</g>\n");
        }
        out
    }
}

/// The jumps to the program's entry, as lines across the block.
fn entries(out: &mut String, layout: &Layout, block: &Block, top: f64, bottom: f64) {
    let mut entries: Vec<&LoaderBand> = block
        .bands
        .iter()
        .copied()
        .filter(|band| band.phase == LoaderPhase::Entry)
        .collect();
    if entries.is_empty() {
        return;
    }
    entries.sort_by_key(|band| band.t_begin_ns);
    let _ = write!(
        out,
        r#"<g class="loader-entry" stroke="{ENTRY_COLOR}" stroke-width="2">"#
    );
    for band in entries {
        let x = num(layout.x(band.t_begin_ns));
        let task = if band.pid == block.tgid {
            String::new()
        } else {
            format!(" · task {}", band.pid)
        };
        let _ = write!(
            out,
            r#"<line x1="{x}" y1="{}" x2="{x}" y2="{}"><title>entry: the jump to the program's entry at {} ms{}</title></line>"#,
            num(top - 2.0),
            num(bottom + 2.0),
            at_ms(band.t_begin_ns),
            escape(&task)
        );
    }
    out.push_str("</g>\n");
}

/// What one rect draws: a span, or spans under the merge width merged.
struct Piece<'a> {
    begin: i64,
    end: i64,
    spans: usize,
    /// ns inside at least one of the spans.
    covered_ns: i64,
    first: &'a LoaderBand,
    /// Distinct object names of merged spans, first few.
    names: Vec<&'a str>,
}

impl<'a> Piece<'a> {
    fn new(band: &'a LoaderBand) -> Piece<'a> {
        let end = band.t_end_ns.max(band.t_begin_ns);
        Piece {
            begin: band.t_begin_ns,
            end,
            spans: 1,
            covered_ns: end - band.t_begin_ns,
            first: band,
            names: object_name(band.object.as_deref()).into_iter().collect(),
        }
    }

    /// Adds a span that begins no earlier than every span already in.
    fn absorb(&mut self, band: &'a LoaderBand) {
        let end = band.t_end_ns.max(band.t_begin_ns);
        self.covered_ns += (end - band.t_begin_ns.max(self.end)).max(0);
        self.end = self.end.max(end);
        self.spans += 1;
        if let Some(name) = object_name(band.object.as_deref())
            && self.names.len() < NAMES_PER_MERGE
            && !self.names.contains(&name)
        {
            self.names.push(name);
        }
    }

    fn write(&self, out: &mut String, layout: &Layout, tgid: i32, y: f64, merge: f64) {
        let right = layout.plot_left + layout.plot_width;
        let x0 = layout.x(self.begin);
        let width = (layout.x(self.end) - x0).max(1.0);
        // A pixel-wide rect at the axis' end stays inside the plot.
        let x = x0.min(right - width);
        let phase = self.first.phase.as_str();
        let interval = format!("{}–{} ms", at_ms(self.begin), at_ms(self.end));
        let mut attributes = format!(
            r#"x="{}" y="{}" width="{}" height="{}" data-ns="{}""#,
            num(x),
            num(y),
            num(width),
            num(BAND_HEIGHT),
            self.covered_ns
        );
        // On a band a few pixels wide the edge would hide the colour.
        if width < NARROW_BAND {
            attributes.push_str(r#" stroke="none""#);
        }
        let title = if self.spans == 1 {
            let band = self.first;
            let mut title = match object_name(band.object.as_deref()) {
                Some(name) => format!("{} · {phase}", shorten(name, 120)),
                None => phase.to_string(),
            };
            let _ = write!(title, " · {} ({interval})", duration(self.covered_ns));
            if band.pid != tgid {
                let _ = write!(title, " · task {}", band.pid);
            }
            title
        } else {
            let _ = write!(attributes, r#" data-spans="{}""#, self.spans);
            let busy = layout.plot_width * self.covered_ns as f64 / layout.t_max / width;
            if busy < 0.995 {
                let _ = write!(
                    attributes,
                    r#" fill-opacity="{}""#,
                    num(busy.max(MIN_OPACITY))
                );
            }
            let mut title = format!(
                "{phase} · {} spans under {} px each, merged: {} busy in {} ({interval})",
                self.spans,
                num(merge),
                duration(self.covered_ns),
                duration(self.end - self.begin)
            );
            if !self.names.is_empty() {
                let names: Vec<String> = self.names.iter().map(|n| shorten(n, 60)).collect();
                let _ = write!(title, " · {}", names.join(", "));
                if self.spans > self.names.len() {
                    title.push_str(", …");
                }
            }
            title
        };
        let _ = write!(
            out,
            "<rect {attributes}><title>{}</title></rect>",
            escape(&title)
        );
    }
}

/// The rects of one phase in one block: spans at least `merge` pixels
/// wide alone, narrower ones merged while less than `merge` pixels apart.
fn pieces<'a>(bands: &[&'a LoaderBand], layout: &Layout, merge: f64) -> Vec<Piece<'a>> {
    let mut sorted = bands.to_vec();
    sorted.sort_by_key(|band| (band.t_begin_ns, Reverse(band.t_end_ns)));
    let mut out = Vec::new();
    let mut group: Option<Piece> = None;
    for band in sorted {
        let end = band.t_end_ns.max(band.t_begin_ns);
        let x0 = layout.x(band.t_begin_ns);
        if layout.x(end) - x0 >= merge {
            out.push(Piece::new(band));
            continue;
        }
        match &mut group {
            Some(open) if x0 < layout.x(open.end) + merge => open.absorb(band),
            _ => out.extend(group.replace(Piece::new(band))),
        }
    }
    out.extend(group);
    // Outer spans first, so a span nested in another is drawn over it.
    out.sort_by_key(|piece| (piece.begin, Reverse(piece.end)));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn band(phase: LoaderPhase, begin: i64, end: i64, object: &str) -> LoaderBand {
        LoaderBand {
            phase,
            pid: 1,
            object: Some(object.into()),
            t_begin_ns: begin,
            t_end_ns: end,
            depth: 0,
        }
    }

    /// A 1000 px plot over 1000 ns: a pixel per ns.
    fn layout() -> Layout {
        Layout {
            width: 1240.0,
            plot_left: 90.0,
            plot_width: 1000.0,
            plot_height: 160.0,
            t_max: 1000.0,
            cols: 250,
            rows: 40,
        }
    }

    #[test]
    fn narrow_spans_merge_while_less_than_the_width_apart() {
        let bands = [
            band(LoaderPhase::Relocate, 100, 100, "/a/liba.so"),
            band(LoaderPhase::Relocate, 100, 100, "/a/libb.so"),
            // The same instant again: merges, names liba.so once.
            band(LoaderPhase::Relocate, 100, 100, "/a/liba.so"),
            // Wide: alone, and does not close the group.
            band(LoaderPhase::Relocate, 50, 400, "/a/libw.so"),
            // A pixel after the group's end is not less than a pixel apart.
            band(LoaderPhase::Relocate, 101, 101, "/a/libc.so"),
        ];
        let refs: Vec<&LoaderBand> = bands.iter().collect();
        let pieces = pieces(&refs, &layout(), 1.0);
        let shape: Vec<(i64, i64, usize, i64)> = pieces
            .iter()
            .map(|p| (p.begin, p.end, p.spans, p.covered_ns))
            .collect();
        assert_eq!(
            shape,
            [(50, 400, 1, 350), (100, 100, 3, 0), (101, 101, 1, 0)]
        );
        assert_eq!(pieces[1].names, ["liba.so", "libb.so"]);
    }

    #[test]
    fn covered_time_is_the_union() {
        // Four 1 ns spans on a 1000 ns axis drawn 0.25 px per ns.
        let mut wide = layout();
        wide.plot_width = 250.0;
        let bands = [
            band(LoaderPhase::Open, 10, 11, "x"),
            band(LoaderPhase::Open, 10, 11, "x"),
            band(LoaderPhase::Open, 12, 13, "x"),
            band(LoaderPhase::Open, 14, 15, "x"),
        ];
        let refs: Vec<&LoaderBand> = bands.iter().collect();
        let pieces = pieces(&refs, &wide, 1.0);
        assert_eq!(pieces.len(), 1);
        assert_eq!((pieces[0].spans, pieces[0].covered_ns), (4, 3));
    }

    #[test]
    fn object_names() {
        assert_eq!(object_name(None), None);
        assert_eq!(object_name(Some("")), Some("main program"));
        assert_eq!(object_name(Some("/usr/lib/libc.so.6")), Some("libc.so.6"));
        assert_eq!(object_name(Some("libm.so.6")), Some("libm.so.6"));
    }

    #[test]
    fn durations() {
        assert_eq!(duration(2_500_000), "2.50 ms");
        assert_eq!(duration(12_340), "12.3 µs");
        assert_eq!(duration(999), "999 ns");
    }
}
