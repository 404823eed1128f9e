//! `coldstart report` and `coldstart runs` as text: the run, the totals,
//! one row per file, then per ELF file its sections and first symbols, then
//! the dynamic loader's phases when the run traced them.

use crate::millis::tenths as ms;
use crate::ratio::amplification;
use crate::table::{Style, Table, heading, thousands};
use coldstart_analyze::{FileReport, RunReport, SectionReport};
use coldstart_binary::human_bytes;
use coldstart_profile::Run;
use std::fmt::Write;

/// What to show.
#[derive(Debug, Clone, Copy)]
pub struct RunView {
    pub style: Style,
    /// Files to list (all when None).
    pub files: Option<usize>,
    /// Symbols to list per file (all when None).
    pub symbols: Option<usize>,
    /// Show page extents.
    pub pages: bool,
}

/// `coldstart report` as text: the run, its totals, its files, each file's
/// detail, then the loader's phases.
pub fn render(report: &RunReport, view: &RunView) -> String {
    let mut out = String::new();
    run_header(&mut out, report);
    totals(&mut out, report, view.style);
    files(&mut out, report, view);
    for f in report.files.iter().take(shown_files(view)) {
        render_file(&mut out, f, view);
    }
    if let Some(loader) = &report.loader {
        out.push_str(&crate::loader::render(loader, view.style, view.files));
    }
    out
}

fn shown_files(view: &RunView) -> usize {
    view.files.unwrap_or(usize::MAX)
}

/// Which run of which command, how it was set up, how it ended.
fn run_header(out: &mut String, report: &RunReport) {
    let run = &report.run;
    let _ = writeln!(
        out,
        "run {} of {}: {}",
        run.id,
        report.profile,
        run.argv.join(" ")
    );
    let _ = writeln!(
        out,
        "cache {}, kernel {}, read_ahead_kb {}, page size {}",
        run.cache_mode,
        run.kernel,
        run.read_ahead_kb
            .map(|k| k.to_string())
            .unwrap_or_else(|| "unknown".into()),
        run.page_size
    );
    let end = run.end_reason.as_deref().unwrap_or("incomplete");
    match run.ready_ns {
        Some(ready) => {
            let _ = writeln!(out, "ready after {} ms ({end})", ms(ready));
        }
        None => {
            let _ = writeln!(
                out,
                "never ready ({end}{})",
                run.ended_ns
                    .map(|e| format!(" after {} ms", ms(e)))
                    .unwrap_or_default()
            );
        }
    }
    for warning in &report.warnings {
        let _ = writeln!(out, "warning: {warning}");
    }
}

/// The run's pages by how they were used, and its requests and seeks.
fn totals(out: &mut String, report: &RunReport, style: Style) {
    let (run, t) = (&report.run, &report.totals);
    heading(out, style, "Totals");
    let mut totals = Table::new(&["", ">pages", ">bytes"]);
    totals
        .row(vec![
            "read into the page cache".into(),
            thousands(t.pages_read),
            human_bytes(t.bytes_read),
        ])
        .row(vec![
            if run.demand_reads {
                "touched (read with readahead off)".into()
            } else {
                "touched (faulted or read())".into()
            },
            thousands(t.pages_touched),
            human_bytes(t.bytes_touched),
        ])
        .row(vec![
            "touched or fault-around mapped".into(),
            thousands(t.pages_touched_or_mapped),
            human_bytes(t.bytes_touched_or_mapped),
        ])
        .row(vec![
            "faulted".into(),
            thousands(t.pages_faulted),
            String::new(),
        ])
        .row(vec![
            "in fault-around windows".into(),
            thousands(t.pages_mapped),
            String::new(),
        ])
        .row(vec![
            "accessed by read()".into(),
            thousands(t.pages_accessed),
            String::new(),
        ]);
    out.push_str(&totals.render(style, "  "));
    let _ = writeln!(
        out,
        "  {} files, {} read requests, read amplification {}, seeks {} forward, {} backward, {} lost events",
        t.files,
        thousands(t.read_requests),
        amplification(t.read_amplification),
        human_bytes(t.seek_forward_bytes),
        human_bytes(t.seek_backward_bytes),
        run.lost_events
    );
}

/// One row per file, most read first, then what was left out: files past
/// --top and files only other processes read.
fn files(out: &mut String, report: &RunReport, view: &RunView) {
    heading(out, view.style, "Files (most read first)");
    let mut files = Table::new(&[
        ">read",
        ">touched",
        ">ampl.",
        ">requests",
        ">seek fwd",
        ">seek back",
        ">first ms",
        ">last ms",
        "file",
    ]);
    let shown = shown_files(view);
    for f in report.files.iter().take(shown) {
        files.row(vec![
            human_bytes(f.bytes_read),
            human_bytes(f.bytes_touched),
            amplification(f.read_amplification),
            thousands(f.read_requests),
            f.seek_forward_bytes
                .map(human_bytes)
                .unwrap_or_else(|| "-".into()),
            f.seek_backward_bytes
                .map(human_bytes)
                .unwrap_or_else(|| "-".into()),
            f.first_access_ns.map(ms).unwrap_or_default(),
            f.last_access_ns.map(ms).unwrap_or_default(),
            format!(
                "{}{}",
                match &f.opened_as {
                    Some(opened) => format!("{opened} (its pages: {})", f.path),
                    None => f.path.clone(),
                },
                if f.touched_by_others {
                    " (also used by other processes)"
                } else {
                    ""
                }
            ),
        ]);
    }
    out.push_str(&files.render(view.style, "  "));
    if report.files.len() > shown {
        let _ = writeln!(
            out,
            "  ... {} more files (--top all shows them)",
            report.files.len() - shown
        );
    }
    if !report.outside_files.is_empty() {
        let pages: u64 = report.outside_files.iter().map(|f| f.pages_read).sum();
        let _ = writeln!(
            out,
            "  not counted: {} files read only by other processes ({} pages), e.g. {}",
            report.outside_files.len(),
            thousands(pages),
            report
                .outside_files
                .iter()
                .take(3)
                .map(|f| format!("{} by {}", f.path, f.processes.join(", ")))
                .collect::<Vec<_>>()
                .join("; ")
        );
    }
}

/// At most six names, so a browser's dozens of processes fit one line;
/// --json has them all.
fn process_list(processes: &[String]) -> String {
    const SHOWN: usize = 6;
    if processes.len() <= SHOWN {
        return processes.join(", ");
    }
    format!(
        "{} and {} more",
        processes[..SHOWN].join(", "),
        processes.len() - SHOWN
    )
}

/// One file's detail: its page counts, then its sections, first symbols
/// and page extents when known or asked for.
fn render_file(out: &mut String, f: &FileReport, view: &RunView) {
    let style = view.style;
    let has_detail = f.sections.is_some() || view.pages;
    if !has_detail {
        return;
    }
    heading(out, style, &f.path);
    let _ = writeln!(
        out,
        "  {} pages read, {} faulted, {} in fault-around windows, {} by read(); processes: {}",
        thousands(f.pages_read),
        thousands(f.pages_faulted),
        thousands(f.pages_mapped),
        thousands(f.pages_accessed),
        process_list(&f.processes)
    );
    if let Some(sections) = &f.sections {
        file_sections(out, sections, style);
    }
    if !f.symbols.is_empty() {
        file_symbols(out, f, view);
    }
    if let Some(note) = &f.attribution {
        let _ = writeln!(out, "  no sections: {note}");
    }
    if let Some(pages) = &f.pages {
        page_extents(out, "read", &pages.read);
        page_extents(out, "faulted", &pages.faulted);
        page_extents(out, "fault-around", &pages.mapped);
        page_extents(out, "read()", &pages.accessed);
    }
}

/// The sections that were read or touched.
fn file_sections(out: &mut String, sections: &[SectionReport], style: Style) {
    let mut table = Table::new(&[
        "section",
        ">size",
        ">read",
        ">touched",
        ">faulted",
        ">pages read",
        ">pages touched",
        ">symbols",
    ]);
    for s in sections
        .iter()
        .filter(|s| s.bytes_read > 0 || s.bytes_touched > 0)
    {
        table.row(vec![
            s.name.clone(),
            human_bytes(s.size),
            human_bytes(s.bytes_read),
            human_bytes(s.bytes_touched),
            human_bytes(s.bytes_faulted),
            thousands(s.pages_read),
            thousands(s.pages_touched),
            thousands(s.symbols_touched),
        ]);
    }
    out.push_str(&table.render(style, "  "));
}

/// The symbols on touched pages, first touched first, up to --symbols.
fn file_symbols(out: &mut String, f: &FileReport, view: &RunView) {
    let limit = view.symbols.unwrap_or(usize::MAX);
    let _ = writeln!(
        out,
        "  {} symbols on touched pages ({}), first touched:",
        thousands(f.symbols.len() as u64),
        f.symbol_source.as_deref().unwrap_or("?")
    );
    let mut table = Table::new(&[">ms", ">offset", ">size", "section", "symbol"]);
    for s in f.symbols.iter().take(limit) {
        table.row(vec![
            ms(s.first_touch_ns),
            format!("0x{:x}", s.offset),
            thousands(s.size),
            s.section.clone().unwrap_or_default(),
            s.name.clone(),
        ]);
    }
    out.push_str(&table.render(view.style, "  "));
}

/// One line of page extents, a single page as `n`, a run as `a-b`.
fn page_extents(out: &mut String, name: &str, extents: &[[u64; 2]]) {
    let text: Vec<String> = extents
        .iter()
        .map(|&run| crate::table::page_run(run))
        .collect();
    let _ = writeln!(out, "  {name}: {}", text.join(" "));
}

/// `coldstart runs`: one row per run.
pub fn render_runs(runs: &[Run], style: Style) -> String {
    let mut table = Table::new(&[
        ">run",
        "cache",
        "end",
        ">ended ms",
        ">lost",
        "kernel",
        "command",
    ]);
    for r in runs {
        table.row(vec![
            r.id.to_string(),
            r.start.cache_mode.as_str().to_string(),
            match (r.complete, r.end_reason) {
                (true, Some(reason)) => reason.as_str().to_string(),
                _ => "incomplete".to_string(),
            },
            r.ended_ns.map(ms).unwrap_or_default(),
            r.lost_events.to_string(),
            r.start.kernel.clone(),
            r.start.argv.join(" "),
        ]);
    }
    table.render(style, "")
}
