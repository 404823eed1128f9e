//! The plan's text form: the documented lines exactly, an exact round trip
//! of awkward values, and errors that name the file, the line and the
//! problem.

use coldstart_prefetch::format::{parse, write};
use coldstart_prefetch::{Extent, Plan, PlanFile, PlanSource};
use std::path::Path;

fn plan() -> Plan {
    Plan {
        page_size: 4096,
        source: PlanSource {
            profile: "/tmp/my profiles/ff.db".into(),
            runs: vec![2, 3, 5],
            min_runs: 2,
            merge_gap_pages: 16,
            max_extent_pages: 1024,
            max_bytes: None,
            pages_from: "demand".into(),
        },
        files: vec![
            PlanFile {
                path: "/etc/fonts/fonts.conf".into(),
                size: 2_700,
                mtime_ns: Some(1_700_000_000_123_456_789),
                build_id: None,
            },
            PlanFile {
                path: "/usr/lib/firefox-esr/libxul.so".into(),
                size: 150_000_000,
                mtime_ns: Some(1_690_000_000_000_000_000),
                build_id: Some("1f2e3d".into()),
            },
        ],
        extents: vec![
            Extent {
                file: 1,
                page: 0,
                pages: 16,
                need_ns: 1_250_000,
            },
            Extent {
                file: 1,
                page: 4000,
                pages: 3,
                need_ns: 12_503_007,
            },
        ],
        lookups: Vec::new(),
    }
}

#[test]
fn the_text_is_as_documented() {
    assert_eq!(
        write(&plan()),
        "coldstart-plan 1\n\
         # 2 extents of 2 files, 77824 bytes, in the order the start needs them\n\
         page-size 4096\n\
         source profile=/tmp/my%20profiles/ff.db runs=2,3,5 min-runs=2 merge-gap-pages=16 max-extent-pages=1024 max-bytes=- pages-from=demand\n\
         file 0 size=2700 mtime=1700000000123456789 build-id=- /etc/fonts/fonts.conf\n\
         file 1 size=150000000 mtime=1690000000000000000 build-id=1f2e3d /usr/lib/firefox-esr/libxul.so\n\
         extent 1 0+16 need=1.250000ms\n\
         extent 1 4000+3 need=12.503007ms\n"
    );
}

#[test]
fn awkward_values_round_trip_exactly() {
    let mut plan = plan();
    plan.files[0].path = "/opt/a b/100%/tab\there/new\nline/ünï=code".into();
    plan.files[0].mtime_ns = None;
    plan.source.runs = vec![];
    plan.source.max_bytes = Some(1 << 30);
    plan.source.pages_from = "touched-or-mapped".into();
    plan.extents[0].need_ns = -42;
    plan.extents.push(Extent {
        file: 0,
        page: 0,
        pages: 1,
        need_ns: 0,
    });
    let text = write(&plan);
    assert_eq!(text.lines().count(), 9, "{text}");
    assert!(
        text.contains("/opt/a%20b/100%25/tab%09here/new%0Aline/ünï%3Dcode"),
        "{text}"
    );
    assert_eq!(parse(&text, Path::new("x.plan")).unwrap(), plan);
}

#[test]
fn comments_and_blank_lines_are_ignored() {
    let text = write(&plan()).replace("page-size", "\n# a note\n   \npage-size");
    assert_eq!(parse(&text, Path::new("x.plan")).unwrap(), plan());
}

/// The error for `text` with line `line` replaced by `with`.
fn error_with(line: usize, with: &str) -> String {
    let mut lines: Vec<String> = write(&plan()).lines().map(String::from).collect();
    lines[line - 1] = with.to_string();
    parse(&lines.join("\n"), Path::new("/plans/ff.plan"))
        .unwrap_err()
        .to_string()
}

#[test]
fn errors_name_the_file_the_line_and_the_problem() {
    let cases = [
        (1, "#!/bin/sh", "/plans/ff.plan:3: not a coldstart plan"),
        (1, "coldstart-plan 2", "/plans/ff.plan:1: plan format 2"),
        (
            3,
            "page-size 1000",
            "/plans/ff.plan:3: page-size 1000 is not a page size",
        ),
        (
            3,
            "page-size many",
            "/plans/ff.plan:3: page-size: `many` is not a number",
        ),
        (
            4,
            "source profile=x runs=1",
            "/plans/ff.plan:4: source: no min-runs= field",
        ),
        (
            4,
            "source colour=blue",
            "/plans/ff.plan:4: source: unknown field `colour`",
        ),
        (
            5,
            "file 1 size=1 mtime=- build-id=- /a",
            "/plans/ff.plan:5: file 1 where file 0 was expected",
        ),
        (
            5,
            "file 0 size=1 mtime=- build-id=- a",
            "/plans/ff.plan:5: file 0: the path `a` is not absolute",
        ),
        (
            5,
            "file 0 size=1 mtime=soon build-id=- /a",
            "/plans/ff.plan:5: file 0 mtime: `soon` is not a number",
        ),
        (
            5,
            "file 0 size=1 mtime=-",
            "/plans/ff.plan:5: file 0: expected build-id=, found ``",
        ),
        (
            5,
            "file 0 size=1 mtime=- build-id=- /a%2",
            "/plans/ff.plan:5: file 0 path: bad escape at `%2`",
        ),
        (
            7,
            "extent 7 0+1 need=1ms",
            "/plans/ff.plan:7: extent of file 7, which is not declared above",
        ),
        (
            7,
            "extent 1 36621+2 need=1ms",
            "/plans/ff.plan:7: extent 36621+2 runs past the end of file 1 (36622 pages)",
        ),
        (
            7,
            "extent 1 0+0 need=1ms",
            "/plans/ff.plan:7: extent of 0 pages",
        ),
        (
            7,
            "extent 1 0+1 need=1s",
            "/plans/ff.plan:7: `1s` is not a time like 12.503007ms",
        ),
        (7, "extent 1 0+1 need=1.0000001ms", "is not a time"),
        (
            7,
            "extent 1 0-1 need=1ms",
            "/plans/ff.plan:7: extent: `0-1` is not PAGE+COUNT",
        ),
        (
            8,
            "prefetch everything",
            "/plans/ff.plan:8: unknown line `prefetch`",
        ),
    ];
    for (line, with, expected) in cases {
        let error = error_with(line, with);
        assert!(error.contains(expected), "{with:?}: {error}");
    }
    let missing = parse("coldstart-plan 1\npage-size 4096\n", Path::new("p")).unwrap_err();
    assert_eq!(missing.to_string(), "p:0: no source line");
    let empty = parse("# nothing\n", Path::new("p")).unwrap_err();
    assert_eq!(empty.to_string(), "p:0: empty: not a coldstart plan");
}

#[test]
fn the_most_planned_large_file_is_where_calibration_measures() {
    let mut plan = plan();
    // libxul: 16 + 3 planned pages, 150 MB; fonts.conf: none, 2,700 bytes.
    assert_eq!(
        plan.most_planned_file(16 << 20).map(|f| f.path.as_str()),
        Some("/usr/lib/firefox-esr/libxul.so")
    );
    // With 40 planned pages, fonts.conf leads among files of any size, and
    // is still no candidate above its size.
    plan.extents.push(Extent {
        file: 0,
        page: 0,
        pages: 40,
        need_ns: 0,
    });
    assert_eq!(
        plan.most_planned_file(0).map(|f| f.path.as_str()),
        Some("/etc/fonts/fonts.conf")
    );
    assert_eq!(
        plan.most_planned_file(16 << 20).map(|f| f.path.as_str()),
        Some("/usr/lib/firefox-esr/libxul.so")
    );
    assert_eq!(plan.most_planned_file(200 << 20), None);
}
