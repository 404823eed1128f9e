//! The chart, HTML and Perfetto exports over hand-built timelines whose
//! content is known exactly, with python's XML parser and serde_json as
//! oracles outside the code under test.

use coldstart_analyze::{
    Band, FileReport, FileTimeline, LoaderBand, ProcessInfo, ReadRequest, RunInfo, RunReport,
    SymbolTouch, Timeline, TimelinePoint, Totals,
};
use coldstart_profile::{LoaderPhase, PageEventKind};
use coldstart_report::chart::loader::MAX_PROCESSES;
use coldstart_report::chart::{self, ChartOptions};
use coldstart_report::html::html;
use coldstart_report::perfetto::{LANE_TID_BASE, perfetto_json};
use std::collections::BTreeMap;
use std::io::Write;
use std::process::{Command, Stdio};

const PAGE: u64 = 4096;
const MS: i64 = 1_000_000;
const NASTY: &str = r#"/tmp/a<b&c"d>/lib'x.so"#;

// The geometry of a default chart, written out by hand: 1200 px wide, 90
// px of offset labels left of each plot and 150 px of section labels right
// of it, so the time axis runs from x = 90 to x = 1200 − 150 = 1050: 960 px
// for t_max, 9.6 px per ms when t_max is 100 ms.
const PLOT_LEFT: f64 = 90.0;
const PLOT_WIDTH: f64 = 960.0;

fn process(pid: i32, tgid: i32, comm: &str) -> ProcessInfo {
    ProcessInfo {
        pid,
        ppid: None,
        tgid: Some(tgid),
        comm: Some(comm.into()),
        exe: Some(format!("/usr/bin/{comm}")),
        t_start_ns: Some(0),
        t_end_ns: None,
        in_tree: true,
    }
}

fn point(t_ns: i64, pid: i32, page: u64, npages: u64, kind: PageEventKind) -> TimelinePoint {
    TimelinePoint {
        t_ns,
        pid,
        page,
        npages,
        kind,
    }
}

fn request(t_start_ns: i64, t_end_ns: i64, pid: i32, first_page: u64, npages: u64) -> ReadRequest {
    ReadRequest {
        t_start_ns,
        t_end_ns,
        pid,
        first_page,
        npages,
    }
}

fn file(path: &str, pages: u64) -> FileTimeline {
    FileTimeline {
        path: path.into(),
        size: pages * PAGE,
        points: Vec::new(),
        requests: Vec::new(),
        sections: Vec::new(),
    }
}

fn timeline(files: Vec<FileTimeline>, ready_ns: Option<i64>, ended_ns: Option<i64>) -> Timeline {
    Timeline {
        page_size: PAGE,
        ready_ns,
        ended_ns,
        files,
        processes: vec![process(100, 100, "app"), process(101, 100, "worker")],
        prefetcher_tasks: Vec::new(),
        loader: Vec::new(),
    }
}

/// Two ELF-ish files and one nasty path, events in known places.
fn sample() -> Timeline {
    let mut app = file("/usr/bin/app", 100);
    app.sections = vec![
        Band {
            name: ".text".into(),
            offset: 0,
            size: 60 * PAGE,
        },
        Band {
            name: ".rodata<&>".into(),
            offset: 60 * PAGE,
            size: 40 * PAGE,
        },
    ];
    app.requests = vec![
        request(10 * MS, 12 * MS, 100, 0, 16),
        request(11 * MS, 15 * MS, 100, 32, 8),
    ];
    app.points = vec![
        point(10 * MS, 100, 0, 16, PageEventKind::Read),
        point(12 * MS, 100, 2, 1, PageEventKind::Fault),
        point(12 * MS, 100, 0, 16, PageEventKind::Map),
        point(11 * MS, 100, 32, 8, PageEventKind::Read),
        point(15 * MS, 101, 33, 1, PageEventKind::Fault),
    ];
    let mut libc = file("/usr/lib/libc.so.6", 500);
    libc.requests = vec![request(20 * MS, 40 * MS, 101, 100, 32)];
    libc.points = vec![
        point(20 * MS, 101, 100, 32, PageEventKind::Read),
        point(40 * MS, 101, 110, 1, PageEventKind::Access),
    ];
    let mut nasty = file(NASTY, 10);
    nasty.requests = vec![request(50 * MS, 51 * MS, 100, 0, 4)];
    nasty.points = vec![point(50 * MS, 100, 0, 4, PageEventKind::Read)];
    timeline(vec![app, libc, nasty], Some(80 * MS), Some(100 * MS))
}

fn file_report(path: &str) -> FileReport {
    FileReport {
        path: path.into(),
        opened_as: None,
        kind: None,
        resolved: true,
        dev: 2049,
        ino: 7,
        size: Some(100 * PAGE),
        build_id: None,
        pages_read: 24,
        bytes_read: 24 * PAGE,
        pages_faulted: 2,
        pages_mapped: 16,
        pages_accessed: 0,
        pages_touched: 2,
        bytes_touched: 2 * PAGE,
        pages_touched_or_mapped: 16,
        bytes_touched_or_mapped: 16 * PAGE,
        read_amplification: Some(12.0),
        read_requests: 2,
        seek_forward_bytes: Some(16 * PAGE),
        seek_backward_bytes: Some(0),
        first_access_ns: Some(10 * MS),
        last_access_ns: Some(15 * MS),
        processes: vec!["app (100)".into()],
        touched_by_others: false,
        opened_by_tree: true,
        sections: None,
        attribution: Some("not ELF <&>".into()),
        symbols: Vec::new(),
        symbol_source: None,
        pages: None,
    }
}

fn report(lost_events: u64) -> RunReport {
    let mut app = file_report("/usr/bin/app");
    app.sections = Some(vec![coldstart_analyze::SectionReport {
        name: ".text".into(),
        offset: 0x1000,
        size: 60 * PAGE,
        bytes_read: 16 * PAGE,
        bytes_faulted: PAGE,
        bytes_mapped: 16 * PAGE,
        bytes_touched: PAGE,
        pages_read: 16,
        pages_touched: 1,
        symbols_touched: 70,
    }]);
    app.symbols = (0..70)
        .map(|i| SymbolTouch {
            name: format!("fn_{i}<T>"),
            offset: 0x1000 + i * 16,
            size: 16,
            section: Some(".text".into()),
            first_touch_ns: 12 * MS + i as i64,
        })
        .collect();
    RunReport {
        profile: "/tmp/p.coldstart".into(),
        run: RunInfo {
            id: 1,
            argv: vec![
                "/usr/bin/app".into(),
                "--url=https://example.com/?a=1&b=<2>".into(),
            ],
            cache_mode: "cold".into(),
            kernel: "6.8.0".into(),
            page_size: PAGE,
            read_ahead_kb: Some(128),
            demand_reads: false,
            end_reason: Some("exited".into()),
            exit_code: Some(0),
            exit_signal: None,
            ready_ns: Some(80 * MS),
            ended_ns: Some(100 * MS),
            lost_events,
            complete: true,
        },
        totals: Totals {
            files: 3,
            ..Totals::default()
        },
        files: vec![app, file_report("/usr/lib/libc.so.6"), file_report(NASTY)],
        outside_files: Vec::new(),
        processes: vec![process(100, 100, "app"), process(101, 100, "worker")],
        warnings: vec!["a <warning> & more".into()],
        loader: None,
    }
}

/// Python's minidom as a parser that owes nothing to this crate. When
/// python3 is missing the structural check below still runs.
fn python_parses_xml(text: &str) -> Option<Result<(), String>> {
    let mut child = Command::new("python3")
        .args([
            "-c",
            "import sys,xml.dom.minidom; xml.dom.minidom.parseString(sys.stdin.buffer.read())",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .ok()?;
    let mut stdin = child.stdin.take()?;
    stdin.write_all(text.as_bytes()).ok()?;
    drop(stdin);
    let output = child.wait_with_output().ok()?;
    Some(if output.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&output.stderr).into_owned())
    })
}

/// Tags balance and no raw '<' or '&' is left in text or attributes.
fn balanced(text: &str) -> Result<(), String> {
    let mut stack: Vec<&str> = Vec::new();
    let mut rest = text;
    while let Some(open) = rest.find('<') {
        check_text(&rest[..open])?;
        let close = rest[open..].find('>').ok_or("unterminated tag")? + open;
        let tag = &rest[open + 1..close];
        if tag.contains('<') {
            return Err(format!("'<' inside tag {tag}"));
        }
        if let Some(name) = tag.strip_prefix('/') {
            match stack.pop() {
                Some(top) if top == name.trim() => {}
                other => return Err(format!("</{name}> closes {other:?}")),
            }
        } else if !tag.starts_with('!') && !tag.starts_with('?') {
            let name = tag.split_whitespace().next().ok_or("empty tag")?;
            check_text(tag)?;
            if !tag.ends_with('/') {
                stack.push(name);
            }
        }
        rest = &rest[close + 1..];
    }
    check_text(rest)?;
    if stack.is_empty() {
        Ok(())
    } else {
        Err(format!("unclosed {stack:?}"))
    }
}

fn check_text(text: &str) -> Result<(), String> {
    for (i, _) in text.match_indices('&') {
        let entity = &text[i..text.len().min(i + 8)];
        if !["&amp;", "&lt;", "&gt;", "&quot;", "&#39;"]
            .iter()
            .any(|e| entity.starts_with(e))
        {
            return Err(format!("bare & at {entity:?}"));
        }
    }
    Ok(())
}

fn assert_well_formed(svg: &str) {
    balanced(svg).expect("tags balance");
    match python_parses_xml(svg) {
        Some(result) => result.expect("python's XML parser accepts the SVG"),
        None => eprintln!("python3 not found: only the structural check ran"),
    }
}

/// The `d` of the path inside `<g class="{class}"`, for one-panel charts.
fn path_data<'a>(svg: &'a str, class: &str) -> &'a str {
    let group = svg
        .find(&format!(r#"<g class="{class}""#))
        .unwrap_or_else(|| panic!("no {class} group"));
    let start = svg[group..].find(r#"d=""#).expect("path d") + group + 3;
    let end = svg[start..].find('"').expect("end of d") + start;
    &svg[start..end]
}

/// The contents of every `<g class="{class}" ...>` group, in order.
fn groups<'a>(svg: &'a str, class: &str) -> Vec<&'a str> {
    let open = format!(r#"<g class="{class}""#);
    svg.match_indices(&open)
        .map(|(i, _)| {
            let body = svg[i..].find('>').expect("end of tag") + i + 1;
            let end = svg[body..].find("</g>").expect("closing tag") + body;
            &svg[body..end]
        })
        .collect()
}

/// Marks are subpaths: one `M` each.
fn marks(svg: &str, class: &str) -> usize {
    path_data(svg, class).matches('M').count()
}

fn attribute(element: &str, name: &str) -> f64 {
    let key = format!(r#" {name}=""#);
    let start = element.find(&key).expect("attribute") + key.len();
    let end = element[start..].find('"').expect("end") + start;
    element[start..end].parse().expect("number")
}

fn ready_line(svg: &str) -> &str {
    let start = svg.find(r#"<line class="ready""#).expect("ready line");
    let end = svg[start..].find("/>").expect("end") + start;
    &svg[start..end]
}

#[test]
fn svg_is_well_formed_and_has_every_group() {
    let svg = chart::svg(&sample(), &ChartOptions::default());
    assert_well_formed(&svg);
    for class in [
        "reads",
        "touches",
        "fault-around",
        "sections",
        "others-reading",
        "legend",
    ] {
        assert_eq!(
            svg.matches(&format!(r#"<g class="{class}""#)).count(),
            if class == "legend" { 1 } else { 3 },
            "{class}"
        );
    }
    assert_eq!(svg.matches(r#"<line class="ready""#).count(), 1);
    // Every file sees the other two files' requests as two grey spans;
    // app's two overlapping requests (10-15 ms) merge into one.
    let spans: Vec<Vec<&str>> = groups(&svg, "others-reading")
        .iter()
        .map(|g| g.split("<rect").skip(1).collect())
        .collect();
    assert_eq!(spans.iter().map(Vec::len).collect::<Vec<_>>(), [2, 2, 2]);
    // libc's 20-40 ms of a 100 ms axis, seen from app's panel: pixel
    // columns 192 to 383 of the 960 px plot.
    let libc = format!(" {}", spans[0][0]);
    // 90 + 960 · 20/100 = 90 + 192.
    assert_eq!(attribute(&libc, "x"), 282.0);
    assert_eq!(attribute(&libc, "width"), 192.0);
}

#[test]
fn svg_escapes_paths_and_section_names() {
    let svg = chart::svg(&sample(), &ChartOptions::default());
    assert!(!svg.contains(NASTY));
    assert!(svg.contains("/tmp/a&lt;b&amp;c&quot;d&gt;/lib&#39;x.so"));
    assert!(svg.contains(".rodata&lt;&amp;&gt;"));
    assert_well_formed(&svg);
}

#[test]
fn control_characters_in_paths_stay_parseable() {
    let mut t = sample();
    t.files[0].path = "/tmp/bell\u{7}\u{1b}[0m".into();
    assert_well_formed(&chart::svg(&t, &ChartOptions::default()));
}

/// Default options: plot 960 px wide (240 cells) and 160 px high (40
/// cells); with t_max 1 s and 100 pages, an event at k*100 ms on page k*10
/// lands in column 24k and row 4k.
#[test]
fn one_touch_mark_per_occupied_cell() {
    let mut f = file("/lib/x.so", 100);
    for k in 0..10u64 {
        let t = k as i64 * 100 * MS;
        let kind = if k % 2 == 0 {
            PageEventKind::Fault
        } else {
            PageEventKind::Access
        };
        f.points.push(point(t, 100, k * 10, 1, kind));
        // A second touch in the same cell is the same mark.
        f.points.push(point(t + 1000, 100, k * 10, 1, kind));
    }
    // Reads in cells of their own, one of them four cells tall (10 pages).
    f.points
        .push(point(50 * MS, 100, 5, 1, PageEventKind::Read));
    f.points
        .push(point(250 * MS, 100, 50, 10, PageEventKind::Read));
    // Fault-around: one mark alone, one hidden under the touch at 0 ms.
    f.points
        .push(point(950 * MS, 100, 95, 1, PageEventKind::Map));
    f.points.push(point(0, 100, 0, 1, PageEventKind::Map));
    let t = timeline(vec![f], None, Some(1000 * MS));
    let svg = chart::svg(&t, &ChartOptions::default());
    assert_well_formed(&svg);
    assert_eq!(marks(&svg, "touches"), 10);
    assert_eq!(marks(&svg, "reads"), 2);
    assert_eq!(marks(&svg, "fault-around"), 1);
    assert!(
        path_data(&svg, "reads").contains("M60.5 20v4"),
        "10 pages from page 50 fill rows 20..24 of column 60: {}",
        path_data(&svg, "reads")
    );
    assert!(!svg.contains(r#"<line class="ready""#));
}

#[test]
fn ready_line_sits_on_the_documented_time_scale() {
    let options = ChartOptions::default();

    // sample() is ready at 80 ms and ends at 100 ms, after its last event
    // (libc's touch at 40 ms, the nasty file's read ending at 51 ms), so
    // t_max is 100 ms: x = 90 + 960 · 80/100 = 90 + 768.
    let svg = chart::svg(&sample(), &options);
    let line = ready_line(&svg);
    assert!((attribute(line, "x1") - 858.0).abs() < 0.01, "{line}");
    assert_eq!(attribute(line, "x1"), attribute(line, "x2"));

    // An event after the end stretches the axis: t_max is the latest time.
    let mut late = sample();
    late.files[1]
        .points
        .push(point(400 * MS, 101, 1, 1, PageEventKind::Fault));
    let svg = chart::svg(&late, &options);
    // x = 90 + 960 · 80/400 = 90 + 192; within 0.01 px this pins t_max to
    // 400 ms ± 0.002 ms.
    assert!((attribute(ready_line(&svg), "x1") - 282.0).abs() < 0.01);
}

#[test]
fn max_files_limits_panels_and_says_so() {
    let mut t = sample();
    for i in 0..20 {
        t.files.push(file(&format!("/lib/extra{i}.so"), 3));
    }
    let svg = chart::svg(&t, &ChartOptions::default());
    assert_eq!(svg.matches(r#"<g class="panel""#).count(), 12);
    assert!(svg.contains("11 more file(s) not shown"));
    let empty = chart::svg(&timeline(Vec::new(), None, None), &ChartOptions::default());
    assert_well_formed(&empty);
    assert!(empty.contains("no file had page events"));
}

/// A deterministic generator, so the size check sees the same events each run.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, bound: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % bound.max(1)
    }
}

fn big_timeline(events: usize, files: usize) -> Timeline {
    let mut rng = Lcg(42);
    let pages = 150 * 1024 * 1024 / PAGE;
    let span = 3000 * MS;
    let mut out: Vec<FileTimeline> = (0..files)
        .map(|i| file(&format!("/opt/big/lib{i}.so"), pages))
        .collect();
    let kinds = [
        PageEventKind::Read,
        PageEventKind::Fault,
        PageEventKind::Map,
        PageEventKind::Access,
    ];
    for _ in 0..events {
        let f = rng.next(files as u64) as usize;
        let t = rng.next(span as u64) as i64;
        let kind = kinds[rng.next(4) as usize];
        let npages = if kind == PageEventKind::Read {
            1 + rng.next(32)
        } else {
            1
        };
        out[f]
            .points
            .push(point(t, 100, rng.next(pages), npages, kind));
        if kind == PageEventKind::Read && rng.next(10) == 0 {
            out[f]
                .requests
                .push(request(t, t + 50_000, 100, rng.next(pages), npages));
        }
    }
    for f in &mut out {
        f.points.sort_by_key(|p| p.t_ns);
    }
    timeline(out, Some(2500 * MS), Some(span))
}

#[test]
fn size_is_bounded_for_a_million_events() {
    let t = big_timeline(1_000_000, 12);
    let svg = chart::svg(&t, &ChartOptions::default());
    eprintln!("1,000,000 events over 12 files: {} bytes of SVG", svg.len());
    assert!(svg.len() < 2_000_000, "{} bytes", svg.len());
    balanced(&svg).expect("tags balance");

    let small = big_timeline(100_000, 1);
    let svg = chart::svg(&small, &ChartOptions::default());
    eprintln!(
        "100,000 events in one 150 MiB file: {} bytes of SVG",
        svg.len()
    );
    assert!(svg.len() < 2_000_000);
}

/// The worst case for run merging: every other cell of every panel holds
/// each kind, so no two marks merge; other files read in every other pixel
/// column; a section a pixel tall with a long name on every pixel row.
/// Bounded by the grid and the budget, not by the events.
#[test]
fn size_is_bounded_in_the_worst_case() {
    let options = ChartOptions::default();
    let (cols, rows) = (240u64, 40u64);
    let pages = rows * 10;
    let mut files = Vec::new();
    for i in 0..12 {
        let mut f = file(&format!("/lib/worst{i}.so"), pages);
        for col in 0..cols {
            let t = (col as i64 * 1000 + 500) * MS / cols as i64;
            for row in (0..rows).step_by(2) {
                let page = row * 10 + (col % 2) * 10;
                if page >= pages {
                    continue;
                }
                f.points.push(point(t, 100, page, 1, PageEventKind::Read));
                f.points.push(point(t, 100, page, 1, PageEventKind::Fault));
            }
            for row in (1..rows).step_by(2) {
                let page = row * 10 - (col % 2) * 10;
                f.points.push(point(t, 100, page, 1, PageEventKind::Map));
            }
        }
        // 960 px over 1 s: a request in every other pixel column.
        for column in (0..960i64).step_by(2) {
            let t = column * 1000 * MS / 960 + 1000;
            f.requests.push(request(t, t + 1000, 100, 0, 1));
        }
        // 160 px over 400 pages of 4 KiB: 10 KiB is a pixel.
        f.sections = (0..160u64)
            .map(|i| Band {
                name: format!(".text.{}_{i}", "very_long_function_name".repeat(10)),
                offset: i * 10 * 1024,
                size: 10 * 1024,
            })
            .collect();
        files.push(f);
    }
    let t = timeline(files, None, Some(1000 * MS));
    let svg = chart::svg(&t, &options);
    eprintln!("checkerboard, 12 panels: {} bytes of SVG", svg.len());
    assert!(svg.len() < 2_000_000, "{} bytes", svg.len());
    assert!(svg.contains("events binned into 8 px cells (not 4)"));
    balanced(&svg).expect("tags balance");
}

fn network_references(html: &str) -> Vec<String> {
    let lowered = html.to_ascii_lowercase();
    let mut found = Vec::new();
    for attribute in ["src=", "href=", "url(", "@import", "action="] {
        for (i, _) in lowered.match_indices(attribute) {
            found.push(html[i..html.len().min(i + 60)].to_string());
        }
    }
    found
}

#[test]
fn html_is_self_contained_and_escaped() {
    let page = html(&report(3), &sample(), &ChartOptions::default());
    assert!(page.starts_with("<!DOCTYPE html>"));
    assert_eq!(network_references(&page), Vec::<String>::new());
    // The only URLs are the SVG namespace and the argv text, escaped.
    let without_namespace = page.replace(r#"xmlns="http://www.w3.org/2000/svg""#, "");
    let urls: Vec<_> = without_namespace.match_indices("http").collect();
    assert_eq!(urls.len(), 2, "the argv, in the title and the header");
    assert!(page.contains("--url=https://example.com/?a=1&amp;b=&lt;2&gt;"));

    assert!(page.contains(&chart::svg(&sample(), &ChartOptions::default())));
    assert!(!page.contains(NASTY));
    assert!(page.contains("/tmp/a&lt;b&amp;c&quot;d&gt;/lib&#39;x.so"));
    assert!(page.contains("a &lt;warning&gt; &amp; more"));
    assert!(page.contains("not ELF &lt;&amp;&gt;"));
    assert!(page.contains(r#"<span class="warning">3 lost"#));
    // 70 symbols: 50 listed, the rest counted.
    assert!(page.contains("fn_49&lt;T&gt;"));
    assert!(!page.contains("fn_50&lt;T&gt;"));
    assert!(page.contains("and 20 more symbols"));
    assert_eq!(page.matches("<details").count(), 3);
    balanced(
        page.trim_start_matches("<!DOCTYPE html>")
            .replace(r#"<meta charset="utf-8">"#, r#"<meta charset="utf-8"/>"#)
            .replace(
                r#"<meta name="generator" content="coldstart">"#,
                r#"<meta name="generator" content="coldstart"/>"#,
            )
            .as_str(),
    )
    .expect("HTML tags balance");

    let quiet = html(&report(0), &sample(), &ChartOptions::default());
    assert!(!quiet.contains(r#"<span class="warning">"#));
}

fn parse_trace(t: &Timeline) -> Vec<serde_json::Value> {
    let text = perfetto_json(&report(0), t);
    let value: serde_json::Value = serde_json::from_str(&text).expect("JSON parses");
    assert_eq!(value["displayTimeUnit"], "ms");
    value["traceEvents"]
        .as_array()
        .expect("traceEvents is an array")
        .clone()
}

#[test]
fn perfetto_trace_has_the_required_fields() {
    let t = sample();
    let events = parse_trace(&t);
    for event in &events {
        for key in ["ph", "ts", "pid"] {
            assert!(event.get(key).is_some(), "{key} missing in {event}");
        }
        if event["ph"] == "X" {
            assert!(event["dur"].as_f64().is_some(), "{event}");
        }
    }
    let of = |ph: &str| events.iter().filter(|e| e["ph"] == ph).collect::<Vec<_>>();
    let requests: usize = t.files.iter().map(|f| f.requests.len()).sum();
    assert_eq!(of("X").len(), requests);
    let faults = t
        .files
        .iter()
        .flat_map(|f| &f.points)
        .filter(|p| p.kind == PageEventKind::Fault)
        .count();
    let instants = of("i");
    assert_eq!(instants.iter().filter(|e| e["s"] == "t").count(), faults);
    let ready: Vec<_> = instants.iter().filter(|e| e["name"] == "ready").collect();
    assert_eq!(ready.len(), 1);
    assert_eq!(ready[0]["ts"].as_f64(), Some(80_000.0));

    // The libc request: 20 ms to 40 ms by the worker thread of process 100.
    let libc = of("X")
        .into_iter()
        .find(|e| e["name"] == "libc.so.6")
        .expect("libc slice");
    assert_eq!(libc["ts"].as_f64(), Some(20_000.0));
    assert_eq!(libc["dur"].as_f64(), Some(20_000.0));
    assert_eq!(
        (libc["pid"].as_i64(), libc["tid"].as_i64()),
        (Some(100), Some(101))
    );
    assert_eq!(libc["args"]["bytes"].as_u64(), Some(32 * PAGE));
    assert_eq!(libc["args"]["path"], "/usr/lib/libc.so.6");

    let names: Vec<_> = of("M").iter().map(|e| e["args"]["name"].clone()).collect();
    assert!(names.contains(&"app".into()));
    assert!(names.contains(&"worker".into()));

    // The last counter of process 100 is every byte it read.
    let total: u64 = t
        .files
        .iter()
        .flat_map(|f| &f.requests)
        .map(|r| r.npages * PAGE)
        .sum();
    let last = of("C").last().map(|e| e["args"]["MiB"].as_f64());
    assert_eq!(last, Some(Some(total as f64 / 1048576.0)));
}

#[test]
fn overlapping_reads_of_one_task_get_their_own_tracks() {
    let t = sample();
    let events = parse_trace(&t);
    let mut slices: Vec<(i64, i64, f64, f64)> = events
        .iter()
        .filter(|e| e["ph"] == "X")
        .map(|e| {
            (
                e["pid"].as_i64().unwrap_or(-1),
                e["tid"].as_i64().unwrap_or(-1),
                e["ts"].as_f64().unwrap_or(-1.0),
                e["dur"].as_f64().unwrap_or(-1.0),
            )
        })
        .collect();
    slices.sort_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)).then(a.2.total_cmp(&b.2)));
    for pair in slices.windows(2) {
        if (pair[0].0, pair[0].1) == (pair[1].0, pair[1].1) {
            assert!(pair[0].2 + pair[0].3 <= pair[1].2, "{pair:?} overlap");
        }
    }
    // app's two requests overlap (10-12 ms and 11-15 ms): two tracks.
    let app_tids: std::collections::BTreeSet<i64> = slices
        .iter()
        .filter(|s| s.0 == 100 && s.1 != 101)
        .map(|s| s.1)
        .collect();
    assert_eq!(app_tids.len(), 2);
    assert!(app_tids.contains(&100));
}

#[test]
fn perfetto_trace_of_a_big_run_parses() {
    let t = big_timeline(200_000, 4);
    let events = parse_trace(&t);
    let requests: usize = t.files.iter().map(|f| f.requests.len()).sum();
    assert_eq!(events.iter().filter(|e| e["ph"] == "X").count(), requests);
}

// The dynamic loader's lane and slices.

const US: i64 = 1_000;
const LIB_A: &str = "/usr/lib/x86_64-linux-gnu/libA.so.1";
/// An object whose file name part itself needs escaping.
const HOSTILE: &str = r#"/opt/a"b/li<b&"x'>.so"#;
const HOSTILE_ESCAPED: &str = "li&lt;b&amp;&quot;x&#39;&gt;.so";

fn band(
    phase: LoaderPhase,
    pid: i32,
    object: Option<&str>,
    begin_us: i64,
    end_us: i64,
    depth: u32,
) -> LoaderBand {
    LoaderBand {
        phase,
        pid,
        object: object.map(str::to_string),
        t_begin_ns: begin_us * US,
        t_end_ns: end_us * US,
        depth,
    }
}

/// ld.so in app (task 100): start 0-10 ms with libA's load (search with
/// two opens, then map) and the relocations inside it, libA's init with
/// one initializer, the entry at 14 ms; then its worker thread 101
/// dlopens the hostile object at 50 ms.
fn loader_bands() -> Vec<LoaderBand> {
    use LoaderPhase::*;
    let main = Some("");
    vec![
        band(Start, 100, None, 0, 10_000, 0),
        band(Load, 100, Some(LIB_A), 1_000, 3_000, 0),
        band(Search, 100, Some(LIB_A), 1_000, 2_000, 1),
        band(Open, 100, None, 1_200, 1_500, 2),
        band(Open, 100, Some(LIB_A), 1_500, 1_800, 2),
        band(Map, 100, Some(LIB_A), 2_000, 3_000, 1),
        band(Relocate, 100, Some(LIB_A), 4_000, 6_000, 0),
        band(Relocate, 100, main, 6_000, 7_000, 0),
        band(Init, 100, Some(LIB_A), 11_000, 13_000, 0),
        band(Initializer, 100, Some(LIB_A), 11_500, 12_500, 1),
        band(Entry, 100, main, 14_000, 14_000, 0),
        band(Dlopen, 101, Some(HOSTILE), 50_000, 60_000, 0),
        band(Load, 101, Some(HOSTILE), 51_000, 52_000, 1),
        band(Relocate, 101, Some(HOSTILE), 53_000, 55_000, 1),
        band(Init, 101, Some(HOSTILE), 56_000, 58_000, 1),
    ]
}

fn loader_sample() -> Timeline {
    let mut t = sample();
    t.loader = loader_bands();
    t
}

/// A band rect of the loader's lane.
#[derive(Debug)]
struct LaneRect {
    x: f64,
    width: f64,
    covered_ns: i64,
    spans: Option<usize>,
    opacity: Option<f64>,
    title: String,
}

fn optional_attribute(element: &str, name: &str) -> Option<String> {
    let key = format!(r#" {name}=""#);
    let start = element.find(&key)? + key.len();
    let end = element[start..].find('"')? + start;
    Some(element[start..end].to_string())
}

/// The rects of `phase` in every block, in document order.
fn lane_rects(svg: &str, phase: &str) -> Vec<LaneRect> {
    let open = format!(r#"<g class="loader-phase" data-phase="{phase}""#);
    let mut rects = Vec::new();
    for (i, _) in svg.match_indices(&open) {
        let body = svg[i..].find('>').expect("end of tag") + i + 1;
        let end = svg[body..].find("</g>").expect("closing tag") + body;
        for rect in svg[body..end].split("<rect").skip(1) {
            let title_start = rect.find("<title>").expect("title") + "<title>".len();
            let title_end = rect.find("</title>").expect("end of title");
            rects.push(LaneRect {
                x: attribute(rect, "x"),
                width: attribute(rect, "width"),
                covered_ns: attribute(rect, "data-ns") as i64,
                spans: optional_attribute(rect, "data-spans").map(|s| s.parse().expect("count")),
                opacity: optional_attribute(rect, "fill-opacity").map(|s| s.parse().expect("f64")),
                title: rect[title_start..title_end].to_string(),
            });
        }
    }
    rects
}

/// The x of `t_ns` on the documented axis, for a chart of default width.
fn axis_x(t_ns: i64, t_max_ns: i64) -> f64 {
    PLOT_LEFT + PLOT_WIDTH * t_ns as f64 / t_max_ns as f64
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 0.006
}

fn svg_height(svg: &str) -> f64 {
    attribute(&svg[..svg.find('>').expect("svg tag")], "height")
}

#[test]
fn loader_lane_draws_each_phase_where_the_axis_puts_it() {
    let t = loader_sample();
    let svg = chart::svg(&t, &ChartOptions::default());
    assert_well_formed(&svg);
    assert_eq!(svg.matches(r#"<g class="loader""#).count(), 1);
    // Tasks 100 and 101 are one process: one block, not labelled.
    assert_eq!(svg.matches(r#"<g class="loader-process""#).count(), 1);
    assert!(svg.contains(r#"<g class="loader-process" data-pid="100">"#));
    assert!(!svg.contains(r#"<text class="process""#));
    let rows: Vec<&str> = svg
        .match_indices(r#"<g class="loader-row" data-row=""#)
        .map(|(i, m)| {
            let start = i + m.len();
            &svg[start..start + svg[start..].find('"').expect("end")]
        })
        .collect();
    assert_eq!(rows, ["start", "load", "relocate", "init", "dlopen"]);

    // Every span wide enough is one rect, where the axis puts it.
    // The run ends at 100 ms, after the last loader span (the dlopen,
    // 50-60 ms) and the last page event (51 ms).
    let t_max = 100 * MS;
    for phase in LoaderPhase::ALL
        .into_iter()
        .filter(|&p| p != LoaderPhase::Entry)
    {
        let mut expected: Vec<&LoaderBand> = t.loader.iter().filter(|b| b.phase == phase).collect();
        expected.sort_by_key(|b| (b.t_begin_ns, std::cmp::Reverse(b.t_end_ns)));
        let rects = lane_rects(&svg, phase.as_str());
        assert_eq!(rects.len(), expected.len(), "{phase:?}");
        for (rect, band) in rects.iter().zip(expected) {
            let x0 = axis_x(band.t_begin_ns, t_max);
            let x1 = axis_x(band.t_end_ns, t_max);
            assert!(
                close(rect.x, x0),
                "{phase:?}: {rect:?} should start at {x0}"
            );
            assert!(
                close(rect.width, x1 - x0),
                "{phase:?}: {rect:?} should be {} wide",
                x1 - x0
            );
            assert_eq!(rect.covered_ns, band.t_end_ns - band.t_begin_ns);
            assert_eq!(rect.spans, None);
        }
    }
    // 9.6 px per ms: libA's relocation from 4 to 6 ms.
    let relocations = lane_rects(&svg, "relocate");
    assert_eq!((relocations[0].x, relocations[0].width), (128.4, 19.2));
    assert_eq!(
        relocations[0].title,
        "libA.so.1 · relocate · 2.00 ms (4.000–6.000 ms)"
    );
    assert_eq!(
        relocations[1].title,
        "main program · relocate · 1.00 ms (6.000–7.000 ms)"
    );
    assert_eq!(
        lane_rects(&svg, "start")[0].title,
        "start · 10.00 ms (0.000–10.000 ms)"
    );
    // The worker's dlopen names its task.
    assert_eq!(
        lane_rects(&svg, "dlopen")[0].title,
        format!("{HOSTILE_ESCAPED} · dlopen · 10.00 ms (50.000–60.000 ms) · task 101")
    );

    // The entry: a line at 14 ms across the block.
    let entry = groups(&svg, "loader-entry");
    assert_eq!(entry.len(), 1);
    assert_eq!(attribute(entry[0], "x1"), 224.4);
    assert_eq!(attribute(entry[0], "x2"), 224.4);
    assert!(
        entry[0].contains("<title>entry: the jump to the program's entry at 14.000 ms</title>")
    );

    // The legend names every phase present, with its colour.
    let legend = groups(&svg, "loader-legend")[0];
    for phase in LoaderPhase::ALL {
        assert!(
            legend.contains(&format!(">{}</text>", phase.as_str())),
            "{phase:?}"
        );
    }
    assert_eq!(legend.matches("<rect").count(), 9);
    assert_eq!(legend.matches("<line").count(), 1);

    // The ready line crosses the lane; everything fits the document.
    let plain = chart::svg(&sample(), &ChartOptions::default());
    let height = svg_height(&svg);
    assert!(height > svg_height(&plain));
    let lane_bottom = attribute(entry[0], "y2") - 2.0;
    assert_eq!(attribute(ready_line(&svg), "y2"), lane_bottom);
    assert!(lane_bottom < height);
    assert!(attribute(ready_line(&plain), "y2") < attribute(entry[0], "y1"));
}

#[test]
fn a_lane_with_only_some_phases_has_only_their_rows_and_legend() {
    let mut t = sample();
    t.loader = vec![
        band(LoaderPhase::Relocate, 100, Some(LIB_A), 4_000, 6_000, 0),
        band(LoaderPhase::Init, 100, Some(LIB_A), 7_000, 8_000, 0),
    ];
    let svg = chart::svg(&t, &ChartOptions::default());
    assert_well_formed(&svg);
    assert_eq!(svg.matches(r#"<g class="loader-row""#).count(), 2);
    let legend = groups(&svg, "loader-legend")[0];
    assert_eq!(legend.matches("<text").count(), 2);
    assert!(!svg.contains(r#"<g class="loader-entry""#));
}

/// 2,000 relocations of 50 µs in four clusters 250 ms apart on a 1 s axis
/// (a pixel is 1.04 ms): each cluster is 500 spans 25 µs apart, so it
/// merges into one rect; a 5 ms relocation in the last one stays alone.
#[test]
fn sub_pixel_loader_spans_merge_and_keep_their_time() {
    let mut t = timeline(vec![file("/lib/x.so", 10)], None, Some(1000 * MS));
    for cluster in 0..4i64 {
        for i in 0..500i64 {
            let begin = cluster * 250_000 + i * 75;
            t.loader.push(band(
                LoaderPhase::Relocate,
                100,
                Some(&format!("/usr/lib/lib{cluster}_{i}.so")),
                begin,
                begin + 50,
                0,
            ));
        }
    }
    t.loader.push(band(
        LoaderPhase::Relocate,
        100,
        Some(LIB_A),
        800_000,
        805_000,
        0,
    ));
    let svg = chart::svg(&t, &ChartOptions::default());
    assert_well_formed(&svg);
    let rects = lane_rects(&svg, "relocate");
    assert_eq!(rects.len(), 5, "{rects:?}");
    // Covered time is preserved: the rects' ns add up to the spans'.
    let covered: i64 = rects.iter().map(|r| r.covered_ns).sum();
    assert_eq!(covered, 2000 * 50 * US + 5 * MS);
    for (cluster, rect) in rects[..4].iter().enumerate() {
        let begin = cluster as i64 * 250 * MS;
        let end = begin + (499 * 75 + 50) * US;
        assert_eq!(rect.spans, Some(500));
        assert_eq!(rect.covered_ns, 500 * 50 * US);
        assert!(close(rect.x, axis_x(begin, 1000 * MS)), "{rect:?}");
        assert!(close(
            rect.width,
            axis_x(end, 1000 * MS) - axis_x(begin, 1000 * MS)
        ));
        // Busy two thirds of the time it spans.
        assert_eq!(rect.opacity, Some(0.67));
        assert!(rect.title.starts_with(
            "relocate · 500 spans under 1 px each, merged: 25.00 ms busy in 37.48 ms"
        ));
        assert!(rect.title.ends_with(&format!(
            "lib{cluster}_0.so, lib{cluster}_1.so, lib{cluster}_2.so, …"
        )));
    }
    let alone = &rects[4];
    assert_eq!((alone.spans, alone.covered_ns), (None, 5 * MS));
    assert!(alone.title.starts_with("libA.so.1 · relocate · 5.00 ms"));
    assert!(svg.len() < 30_000, "{} bytes", svg.len());
}

/// Ten processes, each with 8 phases of 0.1 ms spans 1.2 ms apart (over a
/// pixel, so a pixel's merging leaves them apart): the lane doubles its
/// merge width until the bands fit, and draws at most MAX_PROCESSES blocks.
#[test]
fn the_loader_lane_stays_small_for_pathological_spans() {
    use LoaderPhase::*;
    let mut t = timeline(vec![file("/lib/x.so", 10)], Some(900 * MS), Some(1000 * MS));
    let phases = [Start, Load, Search, Open, Map, Relocate, Init, Initializer];
    for p in 0..10 {
        let pid = 1000 + p;
        t.processes.push(process(pid, pid, &format!("proc{p}")));
        for (k, &phase) in phases.iter().enumerate() {
            for i in 0..830 {
                let begin = i * 1_200 + k as i64 * 10;
                t.loader.push(band(
                    phase,
                    pid,
                    Some(&format!(
                        "/usr/lib/a/very/long/path/to/lib{i}_with_a_long_name.so"
                    )),
                    begin,
                    begin + 100,
                    0,
                ));
            }
        }
    }
    let svg = chart::svg(&t, &ChartOptions::default());
    eprintln!(
        "{} loader spans: {} bytes of SVG",
        t.loader.len(),
        svg.len()
    );
    assert!(svg.len() < 2_000_000, "{} bytes", svg.len());
    assert_well_formed(&svg);
    assert_eq!(
        svg.matches(r#"<g class="loader-process""#).count(),
        MAX_PROCESSES
    );
    assert!(svg.contains(r#"<text class="process" "#));
    assert!(svg.contains(">proc0 (1000)</text>"));
    assert!(svg.contains("2 more process(es) with loader spans not shown"));
    assert!(svg.contains("loader spans under 2 px merged (not 1) to keep this file small"));
    // Merged or not, no time is lost: per phase, the 8 blocks' rects cover
    // 830 spans of 0.1 ms each.
    for phase in phases {
        let covered: i64 = lane_rects(&svg, phase.as_str())
            .iter()
            .map(|r| r.covered_ns)
            .sum();
        assert_eq!(covered, MAX_PROCESSES as i64 * 830 * 100 * US, "{phase:?}");
    }
}

#[test]
fn a_block_per_process_only_when_several_processes_have_spans() {
    let mut t = loader_sample();
    t.processes.push(process(200, 200, "helper"));
    t.processes.push(process(201, 200, "helper-io"));
    // The helper starts later, so its block comes second.
    t.loader
        .push(band(LoaderPhase::Start, 201, None, 30_000, 35_000, 0));
    let svg = chart::svg(&t, &ChartOptions::default());
    assert_well_formed(&svg);
    assert!(svg.contains(r#"<g class="loader" data-processes="2">"#));
    let blocks: Vec<&str> = svg
        .match_indices(r#"<g class="loader-process" data-pid=""#)
        .map(|(i, m)| &svg[i + m.len()..i + m.len() + 3])
        .collect();
    assert_eq!(blocks, ["100", "200"]);
    let labels: Vec<&str> = svg
        .match_indices(r#"<text class="process" "#)
        .map(|(i, _)| {
            let start = svg[i..].find('>').expect("tag end") + i + 1;
            &svg[start..start + svg[start..].find('<').expect("text end")]
        })
        .collect();
    assert_eq!(labels, ["app (100)", "helper (200)"]);
    // Each block has the same rows; the helper's start names its task.
    assert_eq!(svg.matches(r#"<g class="loader-row""#).count(), 10);
    let starts = lane_rects(&svg, "start");
    assert_eq!(starts.len(), 2);
    assert!(starts[1].title.ends_with("· task 201"));
    assert!(close(starts[1].x, axis_x(30 * MS, 100 * MS)));
}

/// FNV-1a: a fingerprint of the chart as it was before the loader lane.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &b| {
        (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[test]
fn no_lane_without_loader_spans() {
    let svg = chart::svg(&sample(), &ChartOptions::default());
    assert!(!svg.contains("loader"));
    // Byte for byte the chart of commit 3bb2335, before the lane existed.
    // A deliberate change to the page plots changes these: check the new
    // output by eye, then update them.
    assert_eq!(
        (svg.len(), fnv1a(svg.as_bytes())),
        (8728, 0xb9dd_f672_d9bf_1790)
    );
    let empty = chart::svg(&timeline(Vec::new(), None, None), &ChartOptions::default());
    assert_eq!(
        (empty.len(), fnv1a(empty.as_bytes())),
        (1302, 0xf1c2_ae71_93ad_dbf7)
    );
    assert_eq!(
        svg_height(&empty),
        // A 64 px header (title, legend, ready label), one empty panel of
        // 20 px title + 160 px plot + 34 px time labels, 20 px of footnote.
        64.0 + (20.0 + 160.0 + 34.0) + 20.0
    );
    let page = html(&report(0), &sample(), &ChartOptions::default());
    assert!(!page.contains("loader-note"));
}

#[test]
fn hostile_object_names_are_escaped() {
    let svg = chart::svg(&loader_sample(), &ChartOptions::default());
    assert_well_formed(&svg);
    assert!(!svg.contains(r#"li<b&"x'>.so"#));
    // dlopen, load, relocate, init of the hostile object.
    assert_eq!(svg.matches(HOSTILE_ESCAPED).count(), 4);

    let page = html(&report(0), &loader_sample(), &ChartOptions::default());
    assert!(!page.contains(r#"li<b&"x'>.so"#));
    assert!(page.contains(&svg));
    assert!(page.contains(r#"<p class="note loader-note">"#));

    let events = parse_trace(&loader_sample());
    let dlopen = events
        .iter()
        .find(|e| e["cat"] == "loader" && e["args"]["depth"] == 0 && e["tid"] == 101)
        .expect("the dlopen slice");
    assert_eq!(dlopen["name"], r#"dlopen li<b&"x'>.so"#);
    assert_eq!(dlopen["args"]["object"], HOSTILE);
}

/// An "X" slice as [begin, end) in ns, and its name.
type Slice = (i64, i64, String);

/// (pid, tid) -> every "X" slice on that track.
fn tracks(events: &[serde_json::Value]) -> BTreeMap<(i64, i64), Vec<Slice>> {
    let ns = |v: &serde_json::Value| (v.as_f64().expect("number") * 1000.0).round() as i64;
    let mut tracks: BTreeMap<(i64, i64), Vec<Slice>> = BTreeMap::new();
    for e in events.iter().filter(|e| e["ph"] == "X") {
        let key = (
            e["pid"].as_i64().expect("pid"),
            e["tid"].as_i64().expect("tid"),
        );
        let begin = ns(&e["ts"]);
        tracks.entry(key).or_default().push((
            begin,
            begin + ns(&e["dur"]),
            e["name"].as_str().unwrap_or_default().to_string(),
        ));
    }
    tracks
}

#[test]
fn perfetto_has_the_loader_spans_nested_on_their_tasks() {
    let mut t = loader_sample();
    // A load under the dlopen that never returned: it ends with the run.
    t.loader.push(band(
        LoaderPhase::Load,
        101,
        Some("libgone.so"),
        59_000,
        100_000,
        1,
    ));
    let events = parse_trace(&t);
    let loader: Vec<&serde_json::Value> = events.iter().filter(|e| e["cat"] == "loader").collect();
    let slices: Vec<_> = loader.iter().filter(|e| e["ph"] == "X").collect();
    assert_eq!(slices.len(), t.loader.len() - 1);
    let find = |name: &str| {
        slices
            .iter()
            .find(|e| e["name"] == name)
            .unwrap_or_else(|| panic!("no slice {name}"))
    };
    let relocate = find("relocate libA.so.1");
    assert_eq!(relocate["ts"].as_f64(), Some(4_000.0));
    assert_eq!(relocate["dur"].as_f64(), Some(2_000.0));
    assert_eq!(
        (relocate["pid"].as_i64(), relocate["tid"].as_i64()),
        (Some(100), Some(100))
    );
    assert_eq!(relocate["args"]["object"], LIB_A);
    assert_eq!(find("relocate main program")["ts"].as_f64(), Some(6_000.0));
    assert_eq!(find("start")["dur"].as_f64(), Some(10_000.0));
    assert_eq!(find("open")["ts"].as_f64(), Some(1_200.0));
    let initializer = find("initializer libA.so.1");
    assert_eq!(initializer["args"]["depth"], 1);
    // The worker's spans are on its own thread of process 100.
    let init = find(&format!("init {}", r#"li<b&"x'>.so"#));
    assert_eq!(
        (init["pid"].as_i64(), init["tid"].as_i64()),
        (Some(100), Some(101))
    );
    assert_eq!(
        (init["ts"].as_f64(), init["dur"].as_f64()),
        (Some(56_000.0), Some(2_000.0))
    );
    // The load that never returned is cut at its dlopen's end, and says so.
    let gone = find("load libgone.so");
    assert_eq!(
        (gone["ts"].as_f64(), gone["dur"].as_f64()),
        (Some(59_000.0), Some(1_000.0))
    );
    assert!(
        gone["args"]["ended"]
            .as_str()
            .is_some_and(|s| s.contains("never returned"))
    );
    assert!(find("relocate libA.so.1")["args"].get("ended").is_none());

    let entries: Vec<_> = loader.iter().filter(|e| e["ph"] == "i").collect();
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0]["name"], "entry main program");
    assert_eq!(entries[0]["s"], "t");
    assert_eq!(entries[0]["ts"].as_f64(), Some(14_000.0));
    assert_eq!(entries[0]["tid"].as_i64(), Some(100));

    // Every track nests: two slices are apart or one holds the other.
    let tracks = tracks(&events);
    for (track, slices) in &tracks {
        for (i, a) in slices.iter().enumerate() {
            for b in &slices[i + 1..] {
                let apart = a.1 <= b.0 || b.1 <= a.0;
                let nested = (a.0 <= b.0 && b.1 <= a.1) || (b.0 <= a.0 && a.1 <= b.1);
                assert!(apart || nested, "{track:?}: {a:?} and {b:?} overlap");
            }
        }
    }
    // app's reads at 10-12 and 11-15 ms straddle libA's init (11-13 ms):
    // both leave the task's track; the worker's 20-40 ms read and app's
    // 50-51 ms read cross no loader span and stay on theirs.
    let on_app: Vec<&String> = tracks[&(100, 100)].iter().map(|s| &s.2).collect();
    assert!(!on_app.contains(&&"app".to_string()), "{on_app:?}");
    let lanes: Vec<i64> = tracks
        .keys()
        .filter(|(pid, tid)| *pid == 100 && *tid >= LANE_TID_BASE)
        .map(|&(_, tid)| tid)
        .collect();
    assert_eq!(lanes.len(), 2, "{tracks:?}");
    for tid in &lanes {
        assert_eq!(
            tracks[&(100, *tid)]
                .iter()
                .map(|s| s.2.as_str())
                .collect::<Vec<_>>(),
            ["app"]
        );
    }
    assert!(on_app.iter().any(|name| name.contains("lib'x.so")));
    // The worker's track: its read and the five slices of its dlopen.
    assert_eq!(tracks[&(100, 101)].len(), 6);
    assert!(
        tracks[&(100, 101)]
            .iter()
            .any(|s| s.2 == "libc.so.6" && s.0 == 20 * MS)
    );
}

#[test]
fn perfetto_without_loader_spans_has_no_loader_events() {
    let events = parse_trace(&sample());
    assert!(events.iter().all(|e| e["cat"] != "loader"));
    // app's overlapping reads still take one extra track.
    let tracks = tracks(&events);
    assert!(tracks.contains_key(&(100, LANE_TID_BASE)));
    assert!(!tracks.contains_key(&(100, LANE_TID_BASE + 1)));
}
