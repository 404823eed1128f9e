//! The chart, HTML and Perfetto exports over hand-built timelines whose
//! content is known exactly, with python's XML parser and serde_json as
//! oracles outside the code under test.

use coldstart_analyze::{
    Band, FileReport, FileTimeline, ProcessInfo, ReadRequest, RunInfo, RunReport, SymbolTouch,
    Timeline, TimelinePoint, Totals,
};
use coldstart_profile::PageEventKind;
use coldstart_report::chart::{self, ChartOptions, MARGIN_LEFT, MARGIN_RIGHT};
use coldstart_report::html::html;
use coldstart_report::perfetto::perfetto_json;
use std::io::Write;
use std::process::{Command, Stdio};

const PAGE: u64 = 4096;
const MS: i64 = 1_000_000;
const NASTY: &str = r#"/tmp/a<b&c"d>/lib'x.so"#;

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
        seek_forward_bytes: 16 * PAGE,
        seek_backward_bytes: 0,
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
    assert_eq!(attribute(&libc, "x"), MARGIN_LEFT + 192.0);
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
    let plot_width = options.width as f64 - MARGIN_LEFT - MARGIN_RIGHT;

    let svg = chart::svg(&sample(), &options);
    let line = ready_line(&svg);
    let expected = MARGIN_LEFT + plot_width * (80.0 / 100.0);
    assert!((attribute(line, "x1") - expected).abs() < 0.01, "{line}");
    assert_eq!(attribute(line, "x1"), attribute(line, "x2"));

    // An event after the end stretches the axis: t_max is the latest time.
    let mut late = sample();
    late.files[1]
        .points
        .push(point(400 * MS, 101, 1, 1, PageEventKind::Fault));
    let svg = chart::svg(&late, &options);
    let expected = MARGIN_LEFT + plot_width * (80.0 / 400.0);
    assert!((attribute(ready_line(&svg), "x1") - expected).abs() < 0.01);
    assert_eq!(chart::time_extent_ns(&late), 400 * MS);
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
