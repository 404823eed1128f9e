//! `coldstart report --html`: one self-contained page (inline CSS and SVG,
//! nothing fetched from the network) that can be mailed or attached to a
//! bug: the run, its totals, the per-file table, sections and first
//! symbols per file, and the page-access chart with, for a run traced with
//! `--loader`, the dynamic loader's lane under it.

use crate::chart::{self, ChartOptions, escape};
use crate::millis::tenths_or_dash as ms;
use crate::ratio::amplification;
use crate::table::thousands;
use coldstart_analyze::{FileReport, RunReport, Timeline};
use coldstart_binary::human_bytes;
use std::fmt::Write;

/// Symbols listed per file; the rest are counted, so the page stays light.
pub const SYMBOLS_PER_FILE: usize = 50;

const STYLE: &str = r#"
body { font-family: sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.4em; margin-bottom: 0.2em; }
h2 { font-size: 1.15em; margin-top: 1.6em; }
code, .path { font-family: monospace; }
table { border-collapse: collapse; margin: 0.5em 0; }
th, td { padding: 0.2em 0.6em; border-bottom: 1px solid #ddd; text-align: left; vertical-align: top; }
th { background: #f3f3f3; }
td.n, th.n { text-align: right; font-variant-numeric: tabular-nums; }
dl.run { display: grid; grid-template-columns: max-content auto; gap: 0.2em 1em; }
dl.run dt { font-weight: bold; }
dl.run dd { margin: 0; }
.warning { background: #fff3cd; border: 1px solid #e0b200; padding: 0.4em 0.7em; margin: 0.4em 0; }
dd .warning { display: inline-block; padding: 0 0.4em; margin: 0; }
details { margin: 0.4em 0; }
summary { cursor: pointer; }
.chart { overflow-x: auto; }
.chart .loader rect[data-ns]:hover { stroke: #000; stroke-width: 1; }
.note { color: #666; }
"#;

/// How to read the loader's lane; the legend in the chart names the colours.
const LOADER_NOTE: &str = "<p class=\"note loader-note\">Under the page plots, the dynamic \
loader's phases on the same time axis: <code>start</code> from exec until ld.so has loaded and \
relocated the program's libraries, then per object its <code>load</code> (the <code>search</code> \
with each <code>open</code> tried, then <code>map</code>), <code>relocate</code>, <code>init</code> \
(each <code>initializer</code>) and any <code>dlopen</code>; the black line is the jump to the \
program's entry. Hover a band for its object, phase and duration. Spans narrower than a pixel \
are merged into one band, paler the less of it they cover; its tooltip gives how many and the \
time they cover.</p>\n";

fn mib(bytes: u64) -> String {
    format!("{:.2}", bytes as f64 / (1024.0 * 1024.0))
}

/// argv as a shell would need it, so it can be copied and re-run.
fn command_line(argv: &[String]) -> String {
    argv.iter()
        .map(|arg| {
            let plain = !arg.is_empty()
                && arg
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c));
            if plain {
                arg.clone()
            } else {
                format!("'{}'", arg.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// A table whose headers starting with '>' are numeric (right-aligned).
fn table(out: &mut String, class: &str, headers: &[&str], rows: &[Vec<String>]) {
    let numeric: Vec<bool> = headers.iter().map(|h| h.starts_with('>')).collect();
    let _ = write!(out, r#"<table class="{class}"><thead><tr>"#);
    for (header, &n) in headers.iter().zip(&numeric) {
        let _ = write!(
            out,
            "<th{}>{}</th>",
            if n { r#" class="n""# } else { "" },
            escape(header.trim_start_matches('>'))
        );
    }
    out.push_str("</tr></thead>\n<tbody>\n");
    for row in rows {
        out.push_str("<tr>");
        for (i, cell) in row.iter().enumerate() {
            let n = numeric.get(i).copied().unwrap_or(false);
            let _ = write!(
                out,
                "<td{}>{}</td>",
                if n { r#" class="n""# } else { "" },
                escape(cell)
            );
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</tbody></table>\n");
}

/// Renders the whole page.
pub fn html(report: &RunReport, timeline: &Timeline, options: &ChartOptions) -> String {
    let run = &report.run;
    let command = command_line(&run.argv);
    let mut out = String::new();
    out.push_str("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n");
    out.push_str("<meta name=\"generator\" content=\"coldstart\">\n");
    let _ = writeln!(out, "<title>coldstart: {}</title>", escape(&command));
    let _ = writeln!(out, "<style>{STYLE}</style>\n</head>\n<body>");

    let _ = writeln!(
        out,
        "<h1>coldstart cold-start report</h1>\n<p><code>{}</code></p>",
        escape(&command)
    );
    header(&mut out, report);
    totals(&mut out, report);
    files(&mut out, report);

    out.push_str("<h2>Timeline</h2>\n<div class=\"chart\">\n");
    out.push_str(&chart::svg(timeline, options));
    out.push_str("</div>\n");
    if !timeline.loader.is_empty() {
        out.push_str(LOADER_NOTE);
    }

    details(&mut out, report);
    outside(&mut out, report);
    processes(&mut out, report);
    out.push_str("</body>\n</html>\n");
    out
}

fn header(out: &mut String, report: &RunReport) {
    let run = &report.run;
    let mut facts: Vec<(&str, String)> = vec![
        ("profile", report.profile.clone()),
        ("run", run.id.to_string()),
        ("cache mode", run.cache_mode.clone()),
        ("kernel", run.kernel.clone()),
        ("page size", format!("{} bytes", run.page_size)),
        (
            "read-ahead",
            run.read_ahead_kb
                .map(|kb| format!("{kb} KiB"))
                .unwrap_or_else(|| "unknown".into()),
        ),
    ];
    let mut end = run
        .end_reason
        .clone()
        .unwrap_or_else(|| "unknown (recording did not finish)".into());
    if let Some(code) = run.exit_code {
        let _ = write!(end, ", exit code {code}");
    }
    if let Some(signal) = run.exit_signal {
        let _ = write!(end, ", signal {signal}");
    }
    facts.push(("end", end));
    facts.push((
        "ready",
        match run.ready_ns {
            Some(_) => format!("{} ms", ms(run.ready_ns)),
            None => "no ready mark".into(),
        },
    ));
    facts.push(("ended", format!("{} ms", ms(run.ended_ns))));
    out.push_str("<dl class=\"run\">\n");
    for (name, value) in facts {
        let _ = writeln!(out, "<dt>{}</dt><dd>{}</dd>", escape(name), escape(&value));
    }
    let lost = if run.lost_events > 0 {
        format!(
            r#"<span class="warning">{} lost: every figure is a lower bound; trace again with a bigger --buffer-mb</span>"#,
            thousands(run.lost_events)
        )
    } else {
        "0".into()
    };
    let _ = writeln!(out, "<dt>lost events</dt><dd class=\"lost\">{lost}</dd>");
    out.push_str("</dl>\n");
    for warning in &report.warnings {
        let _ = writeln!(out, "<p class=\"warning\">warning: {}</p>", escape(warning));
    }
}

fn totals(out: &mut String, report: &RunReport) {
    let t = &report.totals;
    out.push_str("<h2>Totals</h2>\n");
    let rows = vec![
        vec!["files".into(), thousands(t.files as u64), String::new()],
        vec![
            "read from disk".into(),
            human_bytes(t.bytes_read),
            format!("{} pages", thousands(t.pages_read)),
        ],
        vec![
            "touched (faulted or read())".into(),
            human_bytes(t.bytes_touched),
            format!("{} pages", thousands(t.pages_touched)),
        ],
        vec![
            "faulted".into(),
            String::new(),
            format!("{} pages", thousands(t.pages_faulted)),
        ],
        vec![
            "in fault-around windows".into(),
            String::new(),
            format!("{} pages", thousands(t.pages_mapped)),
        ],
        vec![
            "accessed through read()".into(),
            String::new(),
            format!("{} pages", thousands(t.pages_accessed)),
        ],
        vec![
            "read amplification".into(),
            amplification(t.read_amplification),
            "read / touched".into(),
        ],
        vec![
            "read requests".into(),
            thousands(t.read_requests),
            String::new(),
        ],
        vec![
            "seeks forward".into(),
            human_bytes(t.seek_forward_bytes),
            String::new(),
        ],
        vec![
            "seeks backward".into(),
            human_bytes(t.seek_backward_bytes),
            String::new(),
        ],
    ];
    table(out, "totals", &["", ">value", ""], &rows);
}

fn files(out: &mut String, report: &RunReport) {
    let _ = writeln!(
        out,
        "<h2>Files ({}), most bytes read first</h2>",
        report.files.len()
    );
    if report.files.is_empty() {
        out.push_str("<p class=\"note\">The traced programs read no file pages.</p>\n");
        return;
    }
    let rows: Vec<Vec<String>> = report
        .files
        .iter()
        .map(|f| {
            vec![
                f.path.clone(),
                mib(f.bytes_read),
                mib(f.bytes_touched),
                amplification(f.read_amplification),
                thousands(f.read_requests),
                f.seek_forward_bytes.map(mib).unwrap_or_else(|| "-".into()),
                f.seek_backward_bytes.map(mib).unwrap_or_else(|| "-".into()),
                ms(f.first_access_ns),
                ms(f.last_access_ns),
            ]
        })
        .collect();
    table(
        out,
        "files",
        &[
            "path",
            ">read MiB",
            ">touched MiB",
            ">amplification",
            ">read requests",
            ">seek fwd MiB",
            ">seek back MiB",
            ">first access ms",
            ">last access ms",
        ],
        &rows,
    );
}

fn details(out: &mut String, report: &RunReport) {
    if report.files.is_empty() {
        return;
    }
    out.push_str("<h2>Sections and symbols per file</h2>\n");
    for file in &report.files {
        file_details(out, file);
    }
}

fn file_details(out: &mut String, file: &FileReport) {
    let _ = writeln!(
        out,
        "<details class=\"file\"><summary><span class=\"path\">{}</span> — {} read, {} touched</summary>",
        escape(&file.path),
        human_bytes(file.bytes_read),
        human_bytes(file.bytes_touched)
    );
    match &file.sections {
        Some(sections) if !sections.is_empty() => {
            let rows: Vec<Vec<String>> = sections
                .iter()
                .map(|s| {
                    vec![
                        s.name.clone(),
                        format!("0x{:x}", s.offset),
                        human_bytes(s.size),
                        human_bytes(s.bytes_read),
                        human_bytes(s.bytes_touched),
                        thousands(s.pages_read),
                        thousands(s.pages_touched),
                        thousands(s.symbols_touched),
                    ]
                })
                .collect();
            table(
                out,
                "sections",
                &[
                    "section",
                    ">offset",
                    ">size",
                    ">read",
                    ">touched",
                    ">pages read",
                    ">pages touched",
                    ">symbols touched",
                ],
                &rows,
            );
        }
        _ => {
            let why = file
                .attribution
                .as_deref()
                .unwrap_or("no section information");
            let _ = writeln!(out, "<p class=\"note\">No sections: {}</p>", escape(why));
        }
    }
    if !file.symbols.is_empty() {
        let shown = &file.symbols[..file.symbols.len().min(SYMBOLS_PER_FILE)];
        let source = file
            .symbol_source
            .as_deref()
            .map(|s| format!(" (from {s})"))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "<p>First symbols touched, in order{}:</p>",
            escape(&source)
        );
        let rows: Vec<Vec<String>> = shown
            .iter()
            .enumerate()
            .map(|(i, s)| {
                vec![
                    (i + 1).to_string(),
                    s.name.clone(),
                    s.section.clone().unwrap_or_default(),
                    format!("0x{:x}", s.offset),
                    thousands(s.size),
                    ms(Some(s.first_touch_ns)),
                ]
            })
            .collect();
        table(
            out,
            "symbols",
            &[
                ">#",
                "symbol",
                "section",
                ">offset",
                ">size",
                ">first touch ms",
            ],
            &rows,
        );
        let more = file.symbols.len() - shown.len();
        if more > 0 {
            let _ = writeln!(
                out,
                "<p class=\"note more-symbols\">and {} more symbols (see the JSON report for all)</p>",
                thousands(more as u64)
            );
        }
    }
    out.push_str("</details>\n");
}

fn outside(out: &mut String, report: &RunReport) {
    if report.outside_files.is_empty() {
        return;
    }
    out.push_str(
        "<h2>Files only other processes read during the run</h2>\n\
         <p class=\"note\">Not counted above; they competed for the disk.</p>\n",
    );
    let rows: Vec<Vec<String>> = report
        .outside_files
        .iter()
        .map(|f| {
            vec![
                f.path.clone(),
                thousands(f.pages_read),
                f.processes.join(", "),
            ]
        })
        .collect();
    table(out, "outside", &["path", ">pages read", "processes"], &rows);
}

fn processes(out: &mut String, report: &RunReport) {
    if report.processes.is_empty() {
        return;
    }
    out.push_str("<h2>Processes</h2>\n");
    let id = |v: Option<i32>| v.map(|v| v.to_string()).unwrap_or_default();
    let rows: Vec<Vec<String>> = report
        .processes
        .iter()
        .map(|p| {
            vec![
                p.pid.to_string(),
                id(p.ppid),
                id(p.tgid),
                p.comm.clone().unwrap_or_default(),
                p.exe.clone().unwrap_or_default(),
                ms(p.t_start_ns),
                ms(p.t_end_ns),
            ]
        })
        .collect();
    table(
        out,
        "processes",
        &[
            ">pid",
            ">ppid",
            ">tgid",
            "comm",
            "exe",
            ">start ms",
            ">end ms",
        ],
        &rows,
    );
}
