//! `coldstart trace`'s one-screen summary of the run it just traced: when
//! it was ready, what it read and touched, and the files it read most.

use crate::millis::rounded_to_hundredths as ms;
use coldstart_analyze::RunReport;
use coldstart_binary::human_bytes;
use coldstart_profile::summary::{FunctionsSummary, LookupCounts, TraceSummary};
use serde::Serialize;
use std::fmt::Write as _;
use std::path::Path;

/// The traced run as the summary shows it (and --json writes it).
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub profile: String,
    pub run: i64,
    pub end_reason: &'static str,
    pub ready_ms: Option<f64>,
    pub ended_ms: f64,
    /// --cache warm: the untraced warm-up run, launched the same way.
    pub warmup_ms: Option<f64>,
    pub exit_code: Option<i32>,
    pub exit_signal: Option<i32>,
    pub processes: usize,
    pub files: usize,
    pub unresolved_files: usize,
    pub outside_files: usize,
    pub bytes_read: u64,
    pub bytes_touched: u64,
    pub read_requests: u64,
    pub read_amplification: Option<f64>,
    pub events: usize,
    pub lost_events: u64,
    /// The names the tree looked up; absent when they could not be recorded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lookups: Option<LookupCounts>,
    pub top_files: Vec<TopFile>,
    /// With --functions: what the instrumentation recorded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub functions: Option<FunctionsSummary>,
}

#[derive(Debug, Clone, Serialize)]
pub struct TopFile {
    pub path: String,
    pub bytes_read: u64,
    pub bytes_touched: u64,
}

impl Summary {
    /// The summary of the run `traced` wrote into the profile at `profile`,
    /// from the tracer's own counts and analyze's report of the run.
    pub fn new(
        profile: &Path,
        traced: &TraceSummary,
        report: &RunReport,
        functions: Option<FunctionsSummary>,
    ) -> Summary {
        Summary {
            profile: profile.display().to_string(),
            run: traced.run,
            end_reason: traced.reason.as_str(),
            ready_ms: report.run.ready_ns.map(ms),
            ended_ms: ms(traced.ended_ns),
            warmup_ms: traced.warmup_ns.map(ms),
            exit_code: traced.exit.code,
            exit_signal: traced.exit.signal,
            processes: traced.processes_in_tree,
            files: report.files.len(),
            unresolved_files: traced.unresolved_files,
            outside_files: report.outside_files.len(),
            bytes_read: report.totals.bytes_read,
            bytes_touched: report.totals.bytes_touched,
            read_requests: report.totals.read_requests,
            read_amplification: report.totals.read_amplification,
            events: traced.events,
            lost_events: traced.lost_events,
            lookups: traced.lookups,
            top_files: report
                .files
                .iter()
                .take(5)
                .map(|f| TopFile {
                    path: f.path.clone(),
                    bytes_read: f.bytes_read,
                    bytes_touched: f.bytes_touched,
                })
                .collect(),
            functions,
        }
    }
}

pub fn render(s: &Summary) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "\nrun {} in {}: {}", s.run, s.profile, s.end_reason);
    match s.ready_ms {
        Some(ready) => {
            let _ = writeln!(out, "  ready after      {ready:.1} ms");
        }
        None => {
            let _ = writeln!(out, "  ended after      {:.1} ms (never ready)", s.ended_ms);
        }
    }
    if let Some(warmup) = s.warmup_ms {
        let _ = writeln!(
            out,
            "  untraced run     {warmup:.1} ms (the warm-up, launched the same way)"
        );
    }
    if let Some(code) = s.exit_code {
        let _ = writeln!(out, "  exit status      {code}");
    }
    if let Some(signal) = s.exit_signal {
        let _ = writeln!(out, "  killed by signal {signal}");
    }
    let _ = writeln!(out, "  processes        {}", s.processes);
    if let Some(f) = &s.functions {
        let _ = writeln!(
            out,
            "  functions        {} first calls from {} processes ({} unnamed, {} calls dropped)",
            f.functions, f.processes, f.unnamed, f.dropped
        );
    }
    let _ = writeln!(
        out,
        "  files            {} ({} without a path, {} read only by other processes)",
        s.files, s.unresolved_files, s.outside_files
    );
    if let Some(l) = &s.lookups {
        let missed = l.unreadable + l.unresolved + l.other;
        let _ = write!(out, "  names looked up  {}", l.recorded);
        if missed > 0 || l.dropped > 0 {
            let mut parts = Vec::new();
            for (n, what) in [
                (l.unreadable, "in pages not yet present"),
                (l.unresolved, "relative to an unknown directory"),
                (l.other, "too long or not UTF-8"),
            ] {
                if n > 0 {
                    parts.push(format!("{n} {what}"));
                }
            }
            if l.dropped > 0 {
                parts.push(format!("{} dropped machine-wide (buffer full)", l.dropped));
            }
            let _ = write!(out, " ({missed} not recorded: {})", parts.join(", "));
        }
        let _ = writeln!(out);
    }
    let _ = writeln!(out, "  read into cache  {}", human_bytes(s.bytes_read));
    let _ = writeln!(
        out,
        "  touched          {}{}",
        human_bytes(s.bytes_touched),
        s.read_amplification
            .map(|a| format!(
                "   (read amplification {})",
                crate::ratio::amplification(Some(a))
            ))
            .unwrap_or_default()
    );
    let _ = writeln!(out, "  read requests    {}", s.read_requests);
    let _ = writeln!(out, "  trace events     {}", s.events);
    if s.lost_events > 0 {
        let _ = writeln!(
            out,
            "  LOST EVENTS      {} (figures are lower bounds; use a bigger --buffer-mb)",
            s.lost_events
        );
    }
    if !s.top_files.is_empty() {
        let _ = writeln!(out, "\n  most read:");
        for f in &s.top_files {
            let _ = writeln!(
                out,
                "  {:>10} read {:>10} touched  {}",
                human_bytes(f.bytes_read),
                human_bytes(f.bytes_touched),
                f.path
            );
        }
    }
    let _ = writeln!(out, "\nnext: coldstart report {}", s.profile);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_shows_what_the_run_had_and_skips_what_it_did_not() {
        let summary = Summary {
            profile: "app.db".into(),
            run: 4,
            end_reason: "ready",
            ready_ms: Some(12.34),
            ended_ms: 20.0,
            warmup_ms: None,
            exit_code: None,
            exit_signal: Some(15),
            processes: 2,
            files: 3,
            unresolved_files: 1,
            outside_files: 0,
            bytes_read: 2048,
            bytes_touched: 512,
            read_requests: 7,
            read_amplification: Some(4.0),
            events: 99,
            lost_events: 0,
            lookups: Some(LookupCounts {
                recorded: 843,
                unreadable: 10,
                unresolved: 2,
                other: 0,
                dropped: 0,
            }),
            top_files: vec![TopFile {
                path: "/bin/app".into(),
                bytes_read: 2048,
                bytes_touched: 512,
            }],
            functions: Some(FunctionsSummary {
                processes: 2,
                functions: 30,
                unnamed: 1,
                dropped: 0,
                warnings: Vec::new(),
            }),
        };
        assert_eq!(
            render(&summary),
            "\nrun 4 in app.db: ready\n\
             \x20 ready after      12.3 ms\n\
             \x20 killed by signal 15\n\
             \x20 processes        2\n\
             \x20 functions        30 first calls from 2 processes (1 unnamed, 0 calls dropped)\n\
             \x20 files            3 (1 without a path, 0 read only by other processes)\n\
             \x20 names looked up  843 (12 not recorded: 10 in pages not yet present, 2 relative to an unknown directory)\n\
             \x20 read into cache  2.0 KiB\n\
             \x20 touched          512 B   (read amplification 4.0x)\n\
             \x20 read requests    7\n\
             \x20 trace events     99\n\
             \n  most read:\n\
             \x20    2.0 KiB read      512 B touched  /bin/app\n\
             \nnext: coldstart report app.db\n"
        );
    }

    #[test]
    fn milliseconds_keep_two_decimals() {
        assert_eq!(ms(12_345_678), 12.35);
        assert_eq!(ms(-5_000), -0.01);
    }
}
