//! The plan's text form: the documented lines exactly, an exact round trip
//! of awkward values, and errors that name the file, the line and the
//! problem.

use coldstart_prefetch::format::{parse, write};
use coldstart_prefetch::{Extent, Lookup, Plan, PlanFile, PlanSource};
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
        "coldstart-plan 2\n\
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

/// The plan with three lookups, in need order.
fn plan_with_lookups() -> Plan {
    let mut plan = plan();
    plan.lookups = vec![
        Lookup {
            path: "/home/me/.mozilla/my profile=1/prefs.js".into(),
            ino: 2_883_590,
            need_ns: -3,
        },
        Lookup {
            path: "/usr/lib/firefox-esr".into(),
            ino: 1_310_721,
            need_ns: 400_000,
        },
        Lookup {
            path: "/usr/lib/firefox-esr/libxul.so".into(),
            ino: 1_310_740,
            need_ns: 1_250_000,
        },
    ];
    plan
}

#[test]
fn lookups_follow_the_extents_and_round_trip_exactly() {
    let plan = plan_with_lookups();
    let text = write(&plan);
    assert_eq!(
        text,
        "coldstart-plan 2\n\
         # 2 extents of 2 files, 77824 bytes, in the order the start needs them; 3 lookups in need order\n\
         page-size 4096\n\
         source profile=/tmp/my%20profiles/ff.db runs=2,3,5 min-runs=2 merge-gap-pages=16 max-extent-pages=1024 max-bytes=- pages-from=demand\n\
         file 0 size=2700 mtime=1700000000123456789 build-id=- /etc/fonts/fonts.conf\n\
         file 1 size=150000000 mtime=1690000000000000000 build-id=1f2e3d /usr/lib/firefox-esr/libxul.so\n\
         extent 1 0+16 need=1.250000ms\n\
         extent 1 4000+3 need=12.503007ms\n\
         lookup ino=2883590 need=-0.000003ms /home/me/.mozilla/my%20profile%3D1/prefs.js\n\
         lookup ino=1310721 need=0.400000ms /usr/lib/firefox-esr\n\
         lookup ino=1310740 need=1.250000ms /usr/lib/firefox-esr/libxul.so\n"
    );
    assert_eq!(parse(&text, Path::new("x.plan")).unwrap(), plan);
}

#[test]
fn a_version_1_plan_still_parses_with_no_lookups() {
    let text = write(&plan()).replace("coldstart-plan 2", "coldstart-plan 1");
    let parsed = parse(&text, Path::new("x.plan")).unwrap();
    assert!(parsed.lookups.is_empty());
    assert_eq!(parsed, plan());
}

#[test]
fn a_bad_lookup_line_is_refused_with_its_line_number() {
    // Lines 1-8 are the header, files and extents; the lookups are 9-11.
    let text = write(&plan_with_lookups());
    let with = |line: usize, replacement: &str| {
        let mut lines: Vec<&str> = text.lines().collect();
        lines[line - 1] = replacement;
        parse(&lines.join("\n"), Path::new("/plans/ff.plan"))
            .unwrap_err()
            .to_string()
    };
    let cases = [
        (
            10,
            "lookup ino=many need=1ms /a",
            "/plans/ff.plan:10: lookup ino: `many` is not a number",
        ),
        (
            10,
            "lookup need=1ms ino=7 /a",
            "/plans/ff.plan:10: lookup: expected ino=, found `need=1ms`",
        ),
        (
            9,
            "lookup ino=7 need=soon /a",
            "/plans/ff.plan:9: `soon` is not a time like 12.503007ms",
        ),
        (
            11,
            "lookup ino=7 need=1ms",
            "/plans/ff.plan:11: lookup: no path",
        ),
        (
            11,
            "lookup ino=7 need=1ms usr/lib",
            "/plans/ff.plan:11: lookup: the path `usr/lib` is not absolute",
        ),
        (
            11,
            "lookup ino=7 need=1ms /a%zz",
            "/plans/ff.plan:11: lookup path: bad escape at `%zz`",
        ),
    ];
    for (line, replacement, expected) in cases {
        let error = with(line, replacement);
        assert!(error.contains(expected), "{replacement:?}: {error}");
    }
    // Format 1 had no lookups: a lookup line there is a mistake, not news.
    let old = text.replace("coldstart-plan 2", "coldstart-plan 1");
    assert!(
        parse(&old, Path::new("/plans/ff.plan"))
            .unwrap_err()
            .to_string()
            .starts_with("/plans/ff.plan:9: a lookup line in a format 1 plan"),
    );
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
        (
            1,
            "coldstart-plan 3",
            "/plans/ff.plan:1: plan format 3 (this coldstart reads formats 1 to 2)",
        ),
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
