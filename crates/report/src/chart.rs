//! The page-access chart: one SVG panel per file, time across and file
//! offset down, so a reader sees in which order startup pulled each file
//! into the page cache, which of those pages it used, and when it was
//! waiting on other files instead.
//!
//! Encoding, per panel (all panels share the time scale):
//! - x: `MARGIN_LEFT + plot_width * clamp(t_ns, 0, t_max) / t_max`, with
//!   `plot_width = width - MARGIN_LEFT - MARGIN_RIGHT` and `t_max` from
//!   [`time_extent_ns`]. Ticks are labelled in ms.
//! - y: byte offset in the file, 0 at the top of the plot, the file's size
//!   (or the highest page seen, if larger) at the bottom; ticks in KiB/MiB.
//! - Events are binned into a grid of cells about `cell` pixels square.
//!   Each kind has its own grid; a mark is one vertical run of occupied
//!   cells in one column, drawn as one subpath (one `M` command) of the
//!   kind's `<path>`. Reads are filled blue bars, pages touched (faults and
//!   read() accesses) hollow red boxes on top, fault-around windows light
//!   green bars behind, drawn only in cells with neither a read nor a touch.
//!   In a start served by a prefetcher (`coldstart run`, `coldstart-run`,
//!   or the system-wide service from outside the traced tree), the reads
//!   of its tasks ([`Timeline::prefetcher_tasks`]) are orange bars
//!   under the program's own blue ones, so what the program still read
//!   itself stands out; only panels with such reads have their group, and
//!   the legend names them only when the chart shows some.
//!   Binning bounds the output by the grid, not by the event count; when
//!   the marks of all panels would still exceed [`MARK_BUDGET`] bytes (only
//!   for pathological scatter), the cell size doubles until they fit.
//! - Translucent bands for ELF sections, alternating in two tints; grey
//!   spans of time during which other files had read requests in flight;
//!   a dashed vertical line at the ready mark.
//!
//! - For a run traced with `--loader`, a lane under the last panel draws
//!   the dynamic loader's phases as bands on the same time axis, with its
//!   own legend (see [`loader`]); the ready line crosses it too. Without
//!   loader spans the chart is exactly what it was before the lane existed.
//!
//! Every group carries a class (`reads`, `prefetcher-reads`, `touches`,
//! `fault-around`, `sections`, `others-reading`, `ready`, `loader`) so
//! tools and tests can find it.

pub mod loader;

use coldstart_analyze::{Band, FileTimeline, Timeline};
use coldstart_profile::PageEventKind;
use std::collections::HashSet;
use std::fmt::Write;

/// Left of the plots: room for the offset labels.
const MARGIN_LEFT: f64 = 90.0;
/// Right of the plots: room for section labels.
const MARGIN_RIGHT: f64 = 150.0;
/// Title, legend and the ready label above the first panel.
const HEADER_HEIGHT: f64 = 64.0;
/// The file's name above each plot.
const PANEL_TITLE: f64 = 20.0;
/// Time labels under each plot, and the gap to the next panel.
const PANEL_FOOT: f64 = 34.0;
const MIN_PLOT_WIDTH: f64 = 100.0;
/// Bytes of mark path data for all panels together; with axes, sections
/// and spans the whole document stays under about 2 MB.
pub const MARK_BUDGET: usize = 1_000_000;
/// Coarsest cell the budget may force, in pixels.
const MAX_CELL: f64 = 64.0;

const READ_COLOR: &str = "#1f77b4";
const PREFETCHER_READ_COLOR: &str = "#ff7f0e";
const TOUCH_COLOR: &str = "#d62728";
const MAP_COLOR: &str = "#2ca02c";
const READY_COLOR: &str = "#7a1fa2";

#[derive(Debug, Clone)]
pub struct ChartOptions {
    /// Width of the whole SVG in pixels.
    pub width: u32,
    /// Height of each file's plot area in pixels.
    pub panel_height: u32,
    /// Files beyond this many are left out (and counted in a footnote).
    pub max_files: usize,
    /// Target size of a binning cell in pixels; cells are stretched a
    /// little so a whole number of them fills the plot.
    pub cell: u32,
}

impl Default for ChartOptions {
    fn default() -> Self {
        ChartOptions {
            width: 1200,
            panel_height: 160,
            max_files: 12,
            cell: 4,
        }
    }
}

/// The end of the time axis in ns: the latest of the run's end, the ready
/// mark, every page event, every read request's end and every loader
/// span's end (at least 1).
fn time_extent_ns(timeline: &Timeline) -> i64 {
    let mut t_max = timeline
        .ended_ns
        .unwrap_or(0)
        .max(timeline.ready_ns.unwrap_or(0));
    if let Some(last) = timeline.loader.iter().map(|b| b.t_end_ns).max() {
        t_max = t_max.max(last);
    }
    for file in &timeline.files {
        if let Some(last) = file.points.iter().map(|p| p.t_ns).max() {
            t_max = t_max.max(last);
        }
        if let Some(last) = file.requests.iter().map(|r| r.t_end_ns).max() {
            t_max = t_max.max(last);
        }
    }
    t_max.max(1)
}

/// The bottom of a file's offset axis in bytes: its size, or the end of
/// the highest page an event names when that is beyond it (at least a page).
pub fn offset_extent(file: &FileTimeline, page_size: u64) -> u64 {
    let page_size = page_size.max(1);
    let points = file
        .points
        .iter()
        .map(|p| p.page.saturating_add(p.npages).saturating_mul(page_size));
    let requests = file.requests.iter().map(|r| {
        r.first_page
            .saturating_add(r.npages)
            .saturating_mul(page_size)
    });
    points
        .chain(requests)
        .fold(file.size, u64::max)
        .max(page_size)
}

/// Escapes text for XML and HTML, and replaces the control characters XML
/// 1.0 cannot carry even as references (paths may contain any byte).
pub(crate) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            '\t' | '\n' | '\r' => out.push(c),
            c if (c as u32) < 0x20 || c == '\u{fffe}' || c == '\u{ffff}' => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    out
}

/// A coordinate with at most two decimals and no trailing zeros: small
/// output, and stable text for tests to parse.
pub(crate) fn num(v: f64) -> String {
    if !v.is_finite() {
        return "0".into();
    }
    let text = format!("{v:.2}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    if text == "-0" || text.is_empty() {
        "0".into()
    } else {
        text.to_string()
    }
}

/// Keeps the end of a long path (the file name is what tells files apart).
fn shorten(text: &str, max_chars: usize) -> String {
    let count = text.chars().count();
    if count <= max_chars || max_chars < 2 {
        return text.to_string();
    }
    let tail: String = text.chars().skip(count - (max_chars - 1)).collect();
    format!("…{tail}")
}

/// Offsets as axis labels: power-of-two steps make these round.
fn offset_label(bytes: u64) -> String {
    const KIB: u64 = 1024;
    const MIB: u64 = 1024 * 1024;
    const GIB: u64 = 1024 * 1024 * 1024;
    if bytes == 0 {
        "0".into()
    } else if bytes >= GIB {
        format!("{} GiB", num(bytes as f64 / GIB as f64))
    } else if bytes >= MIB {
        format!("{} MiB", num(bytes as f64 / MIB as f64))
    } else if bytes >= KIB {
        format!("{} KiB", num(bytes as f64 / KIB as f64))
    } else {
        format!("{bytes} B")
    }
}

fn ms_label(t_ns: f64, step_ns: f64) -> String {
    let step_ms = step_ns / 1e6;
    let decimals = if step_ms >= 1.0 {
        0
    } else {
        (-step_ms.log10().floor()).clamp(0.0, 6.0) as usize
    };
    format!("{:.*}", decimals, t_ns / 1e6)
}

/// A 1, 2 or 5 times a power of ten step giving about `count` ticks.
fn nice_step(extent: f64, count: f64) -> f64 {
    let raw = (extent / count).max(1.0);
    let magnitude = 10f64.powf(raw.log10().floor());
    let fraction = raw / magnitude;
    let nice = if fraction <= 1.0 {
        1.0
    } else if fraction <= 2.0 {
        2.0
    } else if fraction <= 5.0 {
        5.0
    } else {
        10.0
    };
    nice * magnitude
}

/// One kind's occupied cells in one panel.
struct Grid {
    cols: usize,
    rows: usize,
    cells: Vec<bool>,
}

impl Grid {
    fn new(cols: usize, rows: usize) -> Grid {
        Grid {
            cols,
            rows,
            cells: vec![false; cols * rows],
        }
    }

    fn mark(&mut self, col: usize, first_row: usize, last_row: usize) {
        for row in first_row..=last_row {
            self.cells[row * self.cols + col] = true;
        }
    }

    fn get(&self, col: usize, row: usize) -> bool {
        self.cells[row * self.cols + col]
    }

    /// Vertical runs of occupied cells: (column, first row, length).
    fn runs(&self) -> Vec<(usize, usize, usize)> {
        let mut runs = Vec::new();
        for col in 0..self.cols {
            let mut row = 0;
            while row < self.rows {
                if self.get(col, row) {
                    let start = row;
                    while row < self.rows && self.get(col, row) {
                        row += 1;
                    }
                    runs.push((col, start, row - start));
                } else {
                    row += 1;
                }
            }
        }
        runs
    }
}

/// Where things go: shared by every panel.
struct Layout {
    width: f64,
    plot_left: f64,
    plot_width: f64,
    plot_height: f64,
    t_max: f64,
    cols: usize,
    rows: usize,
}

impl Layout {
    fn new(timeline: &Timeline, options: &ChartOptions, cell: f64) -> Layout {
        let width = (options.width as f64).max(MARGIN_LEFT + MARGIN_RIGHT + MIN_PLOT_WIDTH);
        let plot_width = width - MARGIN_LEFT - MARGIN_RIGHT;
        let plot_height = (options.panel_height as f64).max(20.0);
        let cell = cell.max(1.0);
        Layout {
            width,
            plot_left: MARGIN_LEFT,
            plot_width,
            plot_height,
            t_max: time_extent_ns(timeline) as f64,
            cols: ((plot_width / cell).floor() as usize).max(1),
            rows: ((plot_height / cell).floor() as usize).max(1),
        }
    }

    /// Fraction of the time axis, clamped: events before the program
    /// started (or after the end) sit on the edge rather than off the plot.
    fn time_fraction(&self, t_ns: i64) -> f64 {
        (t_ns as f64 / self.t_max).clamp(0.0, 1.0)
    }

    fn x(&self, t_ns: i64) -> f64 {
        self.plot_left + self.plot_width * self.time_fraction(t_ns)
    }

    fn col(&self, t_ns: i64) -> usize {
        ((self.time_fraction(t_ns) * self.cols as f64).floor() as usize).min(self.cols - 1)
    }

    /// Rows covered by the byte range [start, end) of a file `extent` long.
    fn row_span(&self, start: u64, end: u64, extent: u64) -> (usize, usize) {
        let rows = self.rows as f64;
        let extent = extent.max(1) as f64;
        let first = ((start as f64 / extent * rows).floor() as usize).min(self.rows - 1);
        let last = ((end as f64 / extent * rows).ceil() as usize)
            .saturating_sub(1)
            .clamp(first, self.rows - 1);
        (first, last)
    }

    fn panel_stride(&self) -> f64 {
        PANEL_TITLE + self.plot_height + PANEL_FOOT
    }

    /// Top of panel `index`'s plot area.
    fn plot_top(&self, index: usize) -> f64 {
        HEADER_HEIGHT + PANEL_TITLE + index as f64 * self.panel_stride()
    }

    /// Pixel columns (1 px wide) of the plot, for the others-reading spans.
    fn pixel_columns(&self) -> usize {
        (self.plot_width.ceil() as usize).max(1)
    }

    fn pixel_span(&self, t_start: i64, t_end: i64) -> (usize, usize) {
        let columns = self.pixel_columns();
        let first =
            ((self.time_fraction(t_start) * self.plot_width).floor() as usize).min(columns - 1);
        let last = ((self.time_fraction(t_end) * self.plot_width).ceil() as usize)
            .saturating_sub(1)
            .clamp(first, columns - 1);
        (first, last)
    }
}

/// Renders the chart as a standalone SVG document (no XML declaration, so
/// the same text can be inlined in HTML).
pub fn svg(timeline: &Timeline, options: &ChartOptions) -> String {
    let shown = &timeline.files[..timeline.files.len().min(options.max_files)];
    let hidden = timeline.files.len() - shown.len();
    let requested_cell = f64::from(options.cell.max(1));
    let mut cell = requested_cell;
    let prefetcher: HashSet<i32> = timeline.prefetcher_tasks.iter().copied().collect();
    let (layout, marks) = loop {
        let layout = Layout::new(timeline, options, cell);
        let marks: Vec<Marks> = shown
            .iter()
            .map(|file| Marks::bin(&layout, file, timeline.page_size, &prefetcher))
            .collect();
        let bytes: usize = marks.iter().map(Marks::len).sum();
        if bytes <= MARK_BUDGET || cell >= MAX_CELL {
            break (layout, marks);
        }
        cell *= 2.0;
    };
    let panels = shown.len().max(1);
    let lane = loader::Lane::plan(timeline);
    let lane_top = HEADER_HEIGHT + panels as f64 * layout.panel_stride();
    let height = lane_top + lane.as_ref().map_or(0.0, loader::Lane::height) + 20.0;

    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" class="coldstart-chart" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="11">"#,
        w = num(layout.width),
        h = num(height)
    );
    out.push_str("<title>coldstart: page cache activity per file</title>\n");
    let _ = writeln!(
        out,
        r##"<rect class="background" x="0" y="0" width="{}" height="{}" fill="#fff"/>"##,
        num(layout.width),
        num(height)
    );
    let _ = writeln!(
        out,
        r#"<text x="{}" y="18" font-size="14" font-weight="bold">Page cache activity per file (time since program start × offset in file)</text>"#,
        num(layout.plot_left)
    );
    // Only a chart that shows the prefetcher's reads names them.
    let prefetched = marks.iter().any(|m| !m.prefetcher_reads.is_empty());
    legend(&mut out, &layout, prefetched);

    if timeline.files.is_empty() {
        let _ = writeln!(
            out,
            r#"<text class="empty" x="{}" y="{}">no file had page events in this run</text>"#,
            num(layout.plot_left),
            num(layout.plot_top(0) + 20.0)
        );
    }

    let others = others_reading(timeline, &layout);
    for (index, file) in shown.iter().enumerate() {
        panel(
            &mut out,
            &layout,
            timeline,
            file,
            index,
            others.get(index).map(Vec::as_slice).unwrap_or(&[]),
            &marks[index],
        );
    }

    let lane_notes = match &lane {
        Some(lane) => lane.write(&mut out, &layout, lane_top),
        None => Vec::new(),
    };

    if let Some(ready) = timeline.ready_ns {
        let x = num(layout.x(ready));
        let top = HEADER_HEIGHT - 6.0;
        let bottom = match &lane {
            Some(lane) => lane.rows_bottom(lane_top),
            None => layout.plot_top(panels - 1) + layout.plot_height,
        };
        let _ = writeln!(
            out,
            r#"<line class="ready" x1="{x}" y1="{}" x2="{x}" y2="{}" stroke="{READY_COLOR}" stroke-width="1.5" stroke-dasharray="5 3"/>"#,
            num(top),
            num(bottom)
        );
        let _ = writeln!(
            out,
            r#"<text class="ready-label" x="{x}" y="{}" dx="3" fill="{READY_COLOR}" font-weight="bold">ready {} ms</text>"#,
            num(top + 2.0),
            ms_label(ready as f64, 1e5)
        );
    }

    let mut notes = Vec::new();
    if hidden > 0 {
        notes.push(format!("{hidden} more file(s) not shown"));
    }
    if cell > requested_cell {
        notes.push(format!(
            "events binned into {} px cells (not {}) to keep this file small",
            num(cell),
            num(requested_cell)
        ));
    }
    notes.extend(lane_notes);
    if !notes.is_empty() {
        let _ = writeln!(
            out,
            r#"<text class="more" x="{}" y="{}">{}</text>"#,
            num(layout.plot_left),
            num(height - 6.0),
            escape(&notes.join("; "))
        );
    }
    out.push_str("</svg>\n");
    out
}

/// The legend's entries, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Key {
    Read,
    PrefetcherRead,
    Touch,
    FaultAround,
    OthersReading,
    Section,
    Ready,
}

impl Key {
    const fn label(self) -> &'static str {
        match self {
            Key::Read => "read from disk",
            Key::PrefetcherRead => "read by the prefetcher",
            Key::Touch => "touched (fault or read())",
            Key::FaultAround => "fault-around window",
            Key::OthersReading => "other files being read",
            Key::Section => "ELF section",
            Key::Ready => "ready",
        }
    }
}

fn legend(out: &mut String, layout: &Layout, prefetched: bool) {
    let keys = [
        Key::Read,
        Key::PrefetcherRead,
        Key::Touch,
        Key::FaultAround,
        Key::OthersReading,
        Key::Section,
        Key::Ready,
    ];
    let (top, bottom) = (num(35.0), num(45.0));
    let mut x = layout.plot_left;
    out.push_str("<g class=\"legend\">\n");
    for key in keys {
        if key == Key::PrefetcherRead && !prefetched {
            continue;
        }
        let (x0, x1, xm) = (num(x), num(x + 1.0), num(x + 5.0));
        let swatch = match key {
            Key::Read => {
                format!(r#"<rect x="{x0}" y="{top}" width="8" height="10" fill="{READ_COLOR}"/>"#)
            }
            Key::PrefetcherRead => format!(
                r#"<rect x="{x0}" y="{top}" width="8" height="10" fill="{PREFETCHER_READ_COLOR}"/>"#
            ),
            Key::Touch => format!(
                r#"<rect x="{x1}" y="36" width="8" height="8" stroke="{TOUCH_COLOR}" stroke-width="1.5" fill="none"/>"#
            ),
            Key::FaultAround => format!(
                r#"<rect x="{x0}" y="{top}" width="10" height="10" fill="{MAP_COLOR}" fill-opacity="0.35"/>"#
            ),
            Key::OthersReading => format!(
                r##"<rect x="{x0}" y="{top}" width="10" height="10" fill="#000" fill-opacity="0.1"/>"##
            ),
            Key::Section => format!(
                r##"<rect x="{x0}" y="{top}" width="10" height="10" fill="#9467bd" fill-opacity="0.2"/>"##
            ),
            Key::Ready => format!(
                r#"<line x1="{xm}" y1="{top}" x2="{xm}" y2="{bottom}" stroke="{READY_COLOR}" stroke-width="1.5" stroke-dasharray="3 2"/>"#
            ),
        };
        let label = key.label();
        let _ = writeln!(
            out,
            r#"{swatch}<text x="{}" y="44">{}</text>"#,
            num(x + 15.0),
            escape(label)
        );
        // About 6 px per character at 11 px sans-serif.
        x += 15.0 + label.chars().count() as f64 * 6.2 + 18.0;
    }
    out.push_str("</g>\n");
}

/// Per shown file, the pixel columns during which any other file (shown or
/// not) had a read request in flight, as [first, last] column runs.
fn others_reading(timeline: &Timeline, layout: &Layout) -> Vec<Vec<(usize, usize)>> {
    let columns = layout.pixel_columns();
    // Per file, which columns it covers; summed, so "others" is the total
    // minus the file's own coverage (linear in files × columns).
    let mut covered: Vec<Vec<bool>> = Vec::with_capacity(timeline.files.len());
    let mut total = vec![0u32; columns];
    for file in &timeline.files {
        let mut delta = vec![0i64; columns + 1];
        for request in &file.requests {
            let (first, last) = layout.pixel_span(request.t_start_ns, request.t_end_ns);
            delta[first] += 1;
            delta[last + 1] -= 1;
        }
        let mut depth = 0i64;
        let mut own = vec![false; columns];
        for (column, slot) in own.iter_mut().enumerate() {
            depth += delta[column];
            *slot = depth > 0;
            if *slot {
                total[column] += 1;
            }
        }
        covered.push(own);
    }
    covered
        .iter()
        .map(|own| {
            let mut runs = Vec::new();
            let mut start: Option<usize> = None;
            for column in 0..=columns {
                let busy = column < columns && total[column] > u32::from(own[column]);
                match (busy, start) {
                    (true, None) => start = Some(column),
                    (false, Some(s)) => {
                        runs.push((s, column - 1));
                        start = None;
                    }
                    _ => {}
                }
            }
            runs
        })
        .collect()
}

fn panel(
    out: &mut String,
    layout: &Layout,
    timeline: &Timeline,
    file: &FileTimeline,
    index: usize,
    others: &[(usize, usize)],
    marks: &Marks,
) {
    let top = layout.plot_top(index);
    let left = layout.plot_left;
    let right = left + layout.plot_width;
    let bottom = top + layout.plot_height;
    let extent = offset_extent(file, timeline.page_size);

    let _ = writeln!(out, r#"<g class="panel" data-index="{index}">"#);

    // Title: the path's tail, and the full path as a tooltip.
    let summary = format!(
        "{} · {} read requests",
        offset_label(file.size),
        file.requests.len()
    );
    let max_chars =
        ((layout.plot_width / 6.5) as usize).saturating_sub(summary.chars().count() + 3);
    let _ = writeln!(
        out,
        r#"<text class="file" x="{}" y="{}"><title>{}</title><tspan font-weight="bold">{}</tspan>  {}</text>"#,
        num(left),
        num(top - 6.0),
        escape(&file.path),
        escape(&shorten(&file.path, max_chars.max(12))),
        escape(&summary)
    );

    // Other files being read: grey time spans behind everything.
    out.push_str(r##"<g class="others-reading" fill="#000" fill-opacity="0.08">"##);
    for &(first, last) in others {
        let _ = write!(
            out,
            r#"<rect x="{}" y="{}" width="{}" height="{}"/>"#,
            num(left + first as f64),
            num(top),
            num((last - first + 1) as f64),
            num(layout.plot_height)
        );
    }
    out.push_str("</g>\n");

    sections(out, layout, file, extent, top, right);

    // Frame and time grid.
    let _ = writeln!(
        out,
        r##"<rect class="frame" x="{}" y="{}" width="{}" height="{}" fill="none" stroke="#888"/>"##,
        num(left),
        num(top),
        num(layout.plot_width),
        num(layout.plot_height)
    );
    time_axis(out, layout, top, bottom);
    offset_axis(out, layout, extent, top);

    marks.write(out, layout, top);
    out.push_str("</g>\n");
}

fn sections(
    out: &mut String,
    layout: &Layout,
    file: &FileTimeline,
    extent: u64,
    top: f64,
    right: f64,
) {
    let y_of = |offset: u64| top + layout.plot_height * (offset.min(extent) as f64 / extent as f64);
    // Bands under a pixel tall cannot be seen or hovered; leaving them out
    // bounds the group by the panel's height, however many sections exist.
    let mut bands: Vec<(f64, f64, &Band)> = file
        .sections
        .iter()
        .map(|b| (y_of(b.offset), y_of(b.offset.saturating_add(b.size)), b))
        .filter(|(y0, y1, _)| y1 - y0 >= 1.0)
        .collect();
    bands.sort_by(|a, b| a.0.total_cmp(&b.0));
    bands.truncate(layout.plot_height as usize);
    out.push_str(r#"<g class="sections">"#);
    let mut last_label_y = f64::NEG_INFINITY;
    for (i, &(y0, y1, band)) in bands.iter().enumerate() {
        // Two tints in turn, so neighbouring sections stay apart.
        let (fill, opacity) = if i % 2 == 0 {
            ("#9467bd", "0.13")
        } else {
            ("#8c564b", "0.07")
        };
        let _ = write!(
            out,
            r#"<rect x="{}" y="{}" width="{}" height="{}" fill="{fill}" fill-opacity="{opacity}"><title>{} (offset {}, {})</title></rect>"#,
            num(layout.plot_left),
            num(y0),
            num(layout.plot_width),
            num(y1 - y0),
            escape(&shorten(&band.name, 120)),
            band.offset,
            offset_label(band.size)
        );
        // Label the sections tall enough to carry text, without overlaps.
        let middle = (y0 + y1) / 2.0 + 3.5;
        if y1 - y0 >= 9.0 && middle - last_label_y >= 11.0 {
            let _ = write!(
                out,
                r##"<text x="{}" y="{}" font-size="10" fill="#5b3d7a">{}</text>"##,
                num(right + 4.0),
                num(middle),
                escape(&shorten(&band.name, 22))
            );
            last_label_y = middle;
        }
    }
    out.push_str("</g>\n");
}

fn time_axis(out: &mut String, layout: &Layout, top: f64, bottom: f64) {
    let step = nice_step(layout.t_max, 8.0);
    out.push_str(r##"<g class="time-axis" stroke="#ddd">"##);
    let mut t = 0.0;
    let mut labels = String::new();
    while t <= layout.t_max * 1.000_001 {
        let x = layout.plot_left + layout.plot_width * (t / layout.t_max);
        let _ = write!(
            out,
            r#"<line x1="{x}" y1="{}" x2="{x}" y2="{}"/>"#,
            num(top),
            num(bottom + 4.0),
            x = num(x)
        );
        let _ = write!(
            labels,
            r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
            num(x),
            num(bottom + 15.0),
            ms_label(t, step)
        );
        t += step;
    }
    out.push_str("</g>\n");
    let _ = writeln!(
        out,
        r##"<g class="time-labels" fill="#444">{labels}<text x="{}" y="{}" text-anchor="end">ms since start</text></g>"##,
        num(layout.plot_left + layout.plot_width),
        num(bottom + 27.0)
    );
}

fn offset_axis(out: &mut String, layout: &Layout, extent: u64, top: f64) {
    // Power-of-two steps give round KiB/MiB labels.
    let step = (extent / 5).max(1).next_power_of_two();
    out.push_str(r##"<g class="offset-axis" fill="#444" stroke="#888">"##);
    let mut offset = 0u64;
    while offset <= extent {
        let y = top + layout.plot_height * (offset as f64 / extent as f64);
        let _ = write!(
            out,
            r#"<line x1="{}" y1="{y}" x2="{}" y2="{y}"/><text x="{}" y="{}" text-anchor="end" stroke="none">{}</text>"#,
            num(layout.plot_left - 4.0),
            num(layout.plot_left),
            num(layout.plot_left - 6.0),
            num(y + 3.5),
            offset_label(offset),
            y = num(y)
        );
        offset = match offset.checked_add(step) {
            Some(next) => next,
            None => break,
        };
    }
    let middle = top + layout.plot_height / 2.0;
    let x = num(14.0);
    let _ = writeln!(
        out,
        r#"<text x="{x}" y="{y}" transform="rotate(-90 {x} {y})" text-anchor="middle" stroke="none">offset</text></g>"#,
        y = num(middle)
    );
}

/// One panel's marks as path data in cell units, one string per kind.
struct Marks {
    /// Reads by the program's own tasks.
    reads: String,
    /// Reads by the prefetcher's tasks.
    prefetcher_reads: String,
    touches: String,
    fault_around: String,
}

impl Marks {
    /// Bins the file's events into the layout's grid; reads by a task of
    /// `prefetcher` go to their own grid.
    fn bin(
        layout: &Layout,
        file: &FileTimeline,
        page_size: u64,
        prefetcher: &HashSet<i32>,
    ) -> Marks {
        let extent = offset_extent(file, page_size);
        let page_size = page_size.max(1);
        let mut reads = Grid::new(layout.cols, layout.rows);
        let mut prefetcher_reads = Grid::new(layout.cols, layout.rows);
        let mut touches = Grid::new(layout.cols, layout.rows);
        let mut mapped = Grid::new(layout.cols, layout.rows);
        for point in &file.points {
            let grid = match point.kind {
                kind if kind.is_demand() => &mut touches,
                PageEventKind::Read if prefetcher.contains(&point.pid) => &mut prefetcher_reads,
                PageEventKind::Read => &mut reads,
                PageEventKind::Map => &mut mapped,
                // Evictions are rare during a start and not part of the picture.
                _ => continue,
            };
            let start = point.page.saturating_mul(page_size);
            let end = point
                .page
                .saturating_add(point.npages.max(1))
                .saturating_mul(page_size);
            let (first, last) = layout.row_span(start, end, extent);
            grid.mark(layout.col(point.t_ns), first, last);
        }
        // A fault-around mark says less than a read or a touch in the same cell.
        for (cell, map) in mapped.cells.iter_mut().enumerate() {
            *map =
                *map && !reads.cells[cell] && !prefetcher_reads.cells[cell] && !touches.cells[cell];
        }
        let bars = |grid: &Grid| -> String {
            let mut d = String::new();
            for (col, row, len) in grid.runs() {
                let _ = write!(d, "M{col}.5 {row}v{len}");
            }
            d
        };
        // A hollow box per run, inset a fifth of a cell: over a read bar it
        // frames the blue, so "read and used" and "read, unused" differ.
        let mut boxes = String::new();
        for (col, row, len) in touches.runs() {
            let l = len - 1;
            let _ = write!(boxes, "M{col}.2 {row}.2h.6v{l}.6h-.6z");
        }
        Marks {
            reads: bars(&reads),
            prefetcher_reads: bars(&prefetcher_reads),
            touches: boxes,
            fault_around: bars(&mapped),
        }
    }

    fn len(&self) -> usize {
        self.reads.len()
            + self.prefetcher_reads.len()
            + self.touches.len()
            + self.fault_around.len()
    }

    /// Writes the panel's groups; the prefetcher's reads, in a panel that
    /// has some, go under the program's.
    fn write(&self, out: &mut String, layout: &Layout, top: f64) {
        // Marks are drawn in cell units; the transform stretches them to pixels.
        let transform = format!(
            "translate({} {}) scale({} {})",
            num(layout.plot_left),
            num(top),
            layout.plot_width / layout.cols as f64,
            layout.plot_height / layout.rows as f64
        );
        let _ = writeln!(
            out,
            r#"<g class="fault-around" transform="{transform}"><path d="{}" stroke="{MAP_COLOR}" stroke-opacity="0.35" stroke-width="1" fill="none"/></g>"#,
            self.fault_around
        );
        if !self.prefetcher_reads.is_empty() {
            let _ = writeln!(
                out,
                r#"<g class="prefetcher-reads" transform="{transform}"><path d="{}" stroke="{PREFETCHER_READ_COLOR}" stroke-width="0.8" fill="none"/></g>"#,
                self.prefetcher_reads
            );
        }
        let _ = writeln!(
            out,
            r#"<g class="reads" transform="{transform}"><path d="{}" stroke="{READ_COLOR}" stroke-width="0.8" fill="none"/></g>"#,
            self.reads
        );
        let _ = writeln!(
            out,
            r#"<g class="touches" transform="{transform}"><path d="{}" stroke="{TOUCH_COLOR}" stroke-width="0.25" fill="none"/></g>"#,
            self.touches
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_handles_markup_and_controls() {
        assert_eq!(escape(r#"a<b&c>"d'"#), "a&lt;b&amp;c&gt;&quot;d&#39;");
        assert_eq!(escape("x\u{1}y"), "x\u{fffd}y");
    }

    #[test]
    fn num_trims() {
        assert_eq!(num(1.0), "1");
        assert_eq!(num(1.5), "1.5");
        assert_eq!(num(1.257), "1.26");
        assert_eq!(num(-0.001), "0");
        assert_eq!(num(f64::NAN), "0");
    }

    #[test]
    fn nice_steps() {
        assert_eq!(nice_step(1e9, 8.0), 2e8);
        assert_eq!(nice_step(70e6, 8.0), 1e7);
        assert_eq!(nice_step(3.0, 8.0), 1.0);
    }

    #[test]
    fn offset_labels() {
        assert_eq!(offset_label(0), "0");
        assert_eq!(offset_label(32 * 1024 * 1024), "32 MiB");
        assert_eq!(offset_label(4096), "4 KiB");
        assert_eq!(offset_label(1536), "1.5 KiB");
    }

    /// One file of 100 pages on a 100 ms axis (default options: 240 x 40
    /// cells): task 150 reads pages 0-15 at 10 ms (column 24, rows 0-6),
    /// the program's 100 pages 40-47 at 50 ms (column 120, rows 16-19);
    /// `prefetcher_tasks` says whose task 150 is.
    fn served(prefetcher_tasks: Vec<i32>) -> Timeline {
        use coldstart_analyze::TimelinePoint;
        use coldstart_profile::handmade::process;
        let point = |t_ms: i64, pid, page, npages| TimelinePoint {
            t_ns: t_ms * 1_000_000,
            pid,
            page,
            npages,
            kind: PageEventKind::Read,
        };
        Timeline {
            page_size: 4096,
            ready_ns: None,
            ended_ns: Some(100_000_000),
            files: vec![FileTimeline {
                path: "/lib/a.so".into(),
                size: 100 * 4096,
                points: vec![point(10, 150, 0, 16), point(50, 100, 40, 8)],
                requests: Vec::new(),
                sections: Vec::new(),
            }],
            processes: vec![
                process(100, Some(100), "app", true),
                process(150, Some(150), "cs-prefetch", false),
            ],
            prefetcher_tasks,
            loader: Vec::new(),
        }
    }

    /// The `d` of the path in the group of `class`.
    fn path_data<'a>(svg: &'a str, class: &str) -> Option<&'a str> {
        let group = svg.find(&format!(r#"<g class="{class}""#))?;
        let start = svg[group..].find(r#"d=""#)? + group + 3;
        let end = svg[start..].find('"')? + start;
        Some(&svg[start..end])
    }

    #[test]
    fn the_prefetchers_reads_have_their_own_colour_and_legend() {
        let chart = svg(&served(vec![150]), &ChartOptions::default());
        assert_eq!(path_data(&chart, "prefetcher-reads"), Some("M24.5 0v7"));
        assert_eq!(path_data(&chart, "reads"), Some("M120.5 16v4"));
        assert!(chart.contains(&format!(
            r#"<path d="M24.5 0v7" stroke="{PREFETCHER_READ_COLOR}""#
        )));
        assert_eq!(chart.matches("read by the prefetcher").count(), 1);
        assert_eq!(
            chart.matches(PREFETCHER_READ_COLOR).count(),
            2,
            "legend and marks"
        );

        // The same reads by a task not named the prefetcher's are the
        // program's.
        let chart = svg(&served(Vec::new()), &ChartOptions::default());
        assert_eq!(path_data(&chart, "prefetcher-reads"), None);
        assert_eq!(path_data(&chart, "reads"), Some("M24.5 0v7M120.5 16v4"));
        assert!(!chart.contains("read by the prefetcher"));
        assert!(!chart.contains(PREFETCHER_READ_COLOR));

        // A prefetcher that read nothing shown is not in the legend.
        let mut idle = served(vec![150]);
        idle.files[0].points.remove(0);
        let chart = svg(&idle, &ChartOptions::default());
        assert_eq!(path_data(&chart, "reads"), Some("M120.5 16v4"));
        assert!(!chart.contains("read by the prefetcher"));
        assert!(!chart.contains(PREFETCHER_READ_COLOR));
    }

    #[test]
    fn grid_runs_merge_vertically() {
        let mut grid = Grid::new(3, 5);
        grid.mark(1, 0, 1);
        grid.mark(1, 3, 3);
        grid.mark(2, 4, 4);
        assert_eq!(grid.runs(), vec![(1, 0, 2), (1, 3, 1), (2, 4, 1)]);
    }
}
