//! `coldstart simulate` results as a table: per file the pages the model
//! predicts a start reads, in how many requests, and, when a measured run
//! was given, what it really read and how far off the prediction is.

use crate::table::{Style, Table, thousands};
use coldstart_analyze::SimulationReport;
use coldstart_analyze::simulate::{FilePrediction, SimulationTotals};
use coldstart_binary::human_bytes;
use std::fmt::Write as _;

/// `coldstart simulate` as text: what was replayed how, a row per file
/// (the `top` first) and the totals, then the warnings.
pub fn render(report: &SimulationReport, style: Style, top: usize) -> String {
    let mut out = String::new();
    replay_line(&mut out, report);
    let measured = report.against_run.is_some();
    let mut headers = vec![
        "file",
        ">pages",
        ">touched",
        ">predicted read",
        ">requests",
        ">major faults",
    ];
    if measured {
        headers.extend([">measured read", ">requests ", ">error"]);
    }
    let mut table = Table::new(&headers);
    for file in report.files.iter().take(top) {
        table.row(file_row(file, report.page_size, measured));
    }
    total_rows(&mut table, &report.totals, report.page_size);
    out.push_str(&table.render(style, ""));
    if report.files.len() > top {
        let _ = writeln!(
            out,
            "({} more files; --top all shows them)",
            report.files.len() - top
        );
    }
    for warning in &report.warnings {
        let _ = writeln!(out, "warning: {warning}");
    }
    out
}

/// Which run is replayed at which settings, and against which run.
fn replay_line(out: &mut String, report: &SimulationReport) {
    let _ = writeln!(
        out,
        "Replaying run {} (traced with read_ahead_kb {}) at read_ahead_kb {}, fault-around {} KiB{}",
        report.source_run,
        report
            .source_read_ahead_kb
            .map_or("unknown".to_string(), |kb| kb.to_string()),
        report.read_ahead_kb,
        report.fault_around_bytes / 1024,
        report
            .against_run
            .map_or(String::new(), |run| format!(", against run {run}")),
    );
}

/// One file's prediction, and with `measured` what the other run read.
fn file_row(file: &FilePrediction, page: u64, measured: bool) -> Vec<String> {
    let mut row = vec![
        format!(
            "{}{}",
            file.path,
            if file.relaid { " (new layout)" } else { "" }
        ),
        thousands(file.pages),
        thousands(file.pages_touched),
        human_bytes(file.pages_read * page),
        thousands(file.read_requests),
        thousands(file.misses),
    ];
    if let Some(m) = file.measured {
        row.extend([
            human_bytes(m.pages_read * page),
            thousands(m.read_requests),
            if file.cached_at_start > 0 {
                "warm at start".to_string()
            } else {
                error(file.pages_read, m.pages_read)
            },
        ]);
    } else if measured {
        row.extend(["-".into(), "-".into(), "-".into()]);
    }
    row
}

/// The total over all files, and over the files cold at start when the
/// other run measured them.
fn total_rows(table: &mut Table, t: &SimulationTotals, page: u64) {
    let mut row = vec![
        format!("total ({} files)", t.files),
        String::new(),
        thousands(t.pages_touched),
        human_bytes(t.pages_read * page),
        thousands(t.read_requests),
        thousands(t.misses),
    ];
    if let (Some(pages), Some(requests)) = (t.measured_pages_read, t.measured_read_requests) {
        row.extend([
            human_bytes(pages * page),
            thousands(requests),
            error(t.pages_read, pages),
        ]);
    }
    table.row(row);
    if let Some(measured) = t.cold.measured_pages_read {
        table.row(vec![
            format!("cold at start ({} files)", t.cold.files),
            String::new(),
            String::new(),
            human_bytes(t.cold.pages_read * page),
            String::new(),
            String::new(),
            human_bytes(measured * page),
            String::new(),
            error(t.cold.pages_read, measured),
        ]);
    }
}

/// Signed relative error of a prediction, "+4.2%".
fn error(predicted: u64, measured: u64) -> String {
    if measured == 0 {
        return if predicted == 0 {
            "0%".into()
        } else {
            "n/a".into()
        };
    }
    format!(
        "{:+.1}%",
        (predicted as f64 - measured as f64) / measured as f64 * 100.0
    )
}
