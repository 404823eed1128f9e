//! The loader analysis on profiles built by hand: spans and page events at
//! known instants on known tasks, so every time and page count below is
//! worked out from the comments, not taken from a run of the code.

use coldstart_analyze::{Options, analyze};
use coldstart_profile::handmade;
use coldstart_profile::{
    Batch, LoaderPhase, LoaderSpan, NewFile, PageEvent, PageEventKind, Profile,
};
use std::collections::BTreeMap;

const MS: i64 = 1_000_000;
/// The program's main thread and process.
const APP: i32 = 100;
/// A second thread of the program.
const THREAD: i32 = 101;
/// A child program the app started: its own exec, its own loader.
const CHILD: i32 = 200;
/// Another process on the machine.
const OTHER: i32 = 999;

const APP_FILE: usize = 0;
const LIBA: usize = 1;

fn file(path: &str, ino: u64) -> NewFile {
    NewFile {
        dev: (8 << 8) | 1,
        ino,
        path: Some(path.into()),
        size: Some(40960),
        mtime_ns: Some(1),
        build_id: None,
        opened_by_tree: true,
        kind: None,
        opened_as: None,
        note: None,
    }
}

fn span(pid: i32, phase: LoaderPhase, begin_ms: i64, end_ms: Option<i64>) -> LoaderSpan {
    LoaderSpan {
        pid,
        phase,
        object: None,
        file_id: None,
        t_begin_ns: begin_ms * MS,
        t_end_ns: end_ms.map(|e| e * MS),
        base: None,
        target: None,
        detail: None,
        result: None,
        lookups: None,
        depth: 0,
        probe_hits: None,
    }
}

fn hits(mut span: LoaderSpan, hits: u64) -> LoaderSpan {
    span.probe_hits = Some(hits);
    span
}

/// A span on the object `path`, whose file is batch file `file`.
fn on(mut span: LoaderSpan, path: &str, file: Option<usize>) -> LoaderSpan {
    span.object = Some(path.into());
    span.file_id = file.map(Batch::batch_file_id);
    span
}

fn detail(mut span: LoaderSpan, detail: &str) -> LoaderSpan {
    span.detail = Some(detail.into());
    span
}

fn depth(mut span: LoaderSpan, depth: u32) -> LoaderSpan {
    span.depth = depth;
    span
}

fn open(pid: i32, begin_ms: i64, end_ms: i64, path: &str, result: i64) -> LoaderSpan {
    let mut span = detail(
        depth(span(pid, LoaderPhase::Open, begin_ms, Some(end_ms)), 2),
        path,
    );
    span.result = Some(result);
    span
}

/// The app (tasks 100 and 101) and its child 200. Times in ms.
///
/// Task 100: start [0, 50) holds load liba.so [10, 30) (search [10, 20)
/// with opens [11, 12) failing and [13, 15) succeeding, map [20, 30)), a
/// second load of liba.so [31, 32) that finds it loaded, relocations of
/// liba [35, 40) with 7 lookups and of the main program [40, 45). Then
/// init liba [50, 60) with initializers [51, 55) and [55, 60), the entry
/// at 61, a dlopen("libc2.so") [70, 80) that fails: its load [71, -)
/// never returns (ld.so unwound it), with an open [72, 73) failing.
/// Task 101: a dlopen("libd.so") [85, -) still running when the run ends
/// at 100. Task 200: start [20, 40) holds its own load of liba [22, 30)
/// (search [22, 25), map [25, 30)).
fn spans() -> Vec<LoaderSpan> {
    use LoaderPhase::*;
    const A: &str = "/lib/liba.so";
    let initializer = |begin, end, slot: &str, target: u64| {
        let mut s = detail(
            depth(
                on(span(APP, Initializer, begin, Some(end)), A, Some(LIBA)),
                1,
            ),
            slot,
        );
        s.base = Some(0x7000_0000);
        s.target = Some(0x7000_0000 + target);
        s
    };
    let first = initializer(51, 55, "DT_INIT_ARRAY[0]", 0x1100);
    let second = initializer(55, 60, "DT_INIT_ARRAY[1]", 0x1200);
    let mut relocate_a = on(span(APP, Relocate, 35, Some(40)), A, Some(LIBA));
    relocate_a.lookups = Some(7);
    let mut failed_dlopen = detail(span(APP, Dlopen, 70, Some(80)), "libc2.so");
    failed_dlopen.result = Some(0);
    vec![
        span(APP, Start, 0, Some(50)),
        detail(on(span(APP, Load, 10, Some(30)), A, Some(LIBA)), "liba.so"),
        depth(on(span(APP, Search, 10, Some(20)), A, Some(LIBA)), 1),
        open(APP, 11, 12, "/usr/lib/liba.so", -2),
        open(APP, 13, 15, "/lib/liba.so", 3),
        depth(on(span(APP, Map, 20, Some(30)), A, Some(LIBA)), 1),
        detail(on(span(APP, Load, 31, Some(32)), A, Some(LIBA)), "liba.so"),
        relocate_a,
        on(span(APP, Relocate, 40, Some(45)), "", Some(APP_FILE)),
        on(span(APP, Init, 50, Some(60)), A, Some(LIBA)),
        first,
        second,
        span(APP, Entry, 61, Some(61)),
        failed_dlopen,
        depth(detail(span(APP, Load, 71, None), "libc2.so"), 1),
        open(APP, 72, 73, "/lib/libc2.so", -2),
        detail(span(THREAD, Dlopen, 85, None), "libd.so"),
        span(CHILD, Start, 20, Some(40)),
        detail(
            on(span(CHILD, Load, 22, Some(30)), A, Some(LIBA)),
            "liba.so",
        ),
        depth(on(span(CHILD, Search, 22, Some(25)), A, Some(LIBA)), 1),
        depth(on(span(CHILD, Map, 25, Some(30)), A, Some(LIBA)), 1),
    ]
}

fn event(pid: i32, t_ns: i64, npages: u64, kind: PageEventKind) -> PageEvent {
    PageEvent {
        t_ns,
        pid,
        file_id: Batch::batch_file_id(LIBA),
        page: 0,
        npages,
        kind,
    }
}

/// Page events, each commented with the span it falls in.
fn page_events() -> Vec<PageEvent> {
    use PageEventKind::*;
    vec![
        // start's own work (before any load): 2 read.
        event(APP, 5 * MS, 2, Read),
        // At 10 ms load and search begin: the search, the innermost.
        event(APP, 10 * MS, 1, Read),
        // Inside the first open: 1 read.
        event(APP, 11 * MS + 500_000, 1, Read),
        // Search, between the opens: 3 read.
        event(APP, 16 * MS, 3, Read),
        // The task's other thread at the same time: not in task 100's span.
        event(THREAD, 16 * MS, 1, Read),
        // At 20 ms the search ends and the map begins: 4 read.
        event(APP, 20 * MS, 4, Read),
        // Map: one fault (touched) and a fault-around window (neither).
        event(APP, 25 * MS, 1, Fault),
        event(APP, 25 * MS, 16, Map),
        // Task 200's map of its own liba: 7 read.
        event(CHILD, 26 * MS, 7, Read),
        // Relocation of liba: 1 touched.
        event(APP, 37 * MS, 1, Fault),
        // First initializer: 2 touched (a read() counts as touched).
        event(APP, 52 * MS, 2, Access),
        // After the entry, before the dlopen: outside.
        event(APP, 65 * MS, 1, Read),
        // The unwound load of libc2.so.
        event(APP, 75 * MS, 1, Read),
        // After the failed dlopen returned: the load it held ended with it.
        event(APP, 82 * MS, 1, Read),
        // The thread's dlopen, running to the run's end: 2 read.
        event(THREAD, 90 * MS, 2, Read),
        // Task 100 at the same time: outside (the span is the thread's).
        event(APP, 90 * MS, 1, Read),
        // Another process: counted nowhere.
        event(OTHER, 90 * MS, 5, Read),
    ]
}

fn write_run(profile: &mut Profile, spans: Vec<LoaderSpan>, loader: Option<&str>) {
    let run = profile.begin_run(&handmade::run_start(4096, 128)).unwrap();
    profile
        .write(
            run,
            &Batch {
                files: vec![file("/bin/app", 1), file("/lib/liba.so", 2)],
                processes: vec![
                    handmade::process(APP, Some(APP), "app", true),
                    handmade::process(THREAD, Some(APP), "app-worker", true),
                    handmade::process(CHILD, Some(CHILD), "child", true),
                    handmade::process(OTHER, Some(OTHER), "other", false),
                ],
                page_events: page_events(),
                loader_spans: spans,
                ..Default::default()
            },
        )
        .unwrap();
    if let Some(loader) = loader {
        profile.set_run_loader(run, loader).unwrap();
    }
    profile
        .end_run(run, &handmade::exited(100 * MS, APP))
        .unwrap();
}

fn profile_with(spans: Vec<LoaderSpan>, loader: Option<&str>) -> (tempfile::TempDir, Profile) {
    let dir = tempfile::tempdir().unwrap();
    let mut profile = Profile::create_or_open(&dir.path().join("p.db")).unwrap();
    write_run(&mut profile, spans, loader);
    (dir, profile)
}

fn io(read: u64, touched: u64) -> coldstart_analyze::PagesIo {
    coldstart_analyze::PagesIo {
        pages_read: read,
        pages_touched: touched,
    }
}

/// As `coldstart report` analyses by default: reading the files.
fn reading_files() -> Options {
    Options {
        attribute: true,
        ..Options::default()
    }
}

#[test]
fn phases_objects_and_io_per_process() {
    let (_dir, profile) = profile_with(spans(), Some("ld.so probes on /lib/ld.so from x.debug"));
    let (report, _) = analyze(&profile, &reading_files()).unwrap();
    let loader = report.loader.expect("a loader report");
    assert_eq!(
        loader.sight.as_deref(),
        Some("ld.so probes on /lib/ld.so from x.debug")
    );
    let pids: Vec<i32> = loader.processes.iter().map(|p| p.pid).collect();
    assert_eq!(pids, [APP, CHILD], "one image each, in order of start");
    let app = &loader.processes[0];
    assert_eq!(app.program.as_deref(), Some("/bin/app"));
    assert_eq!(
        (app.exec_ns, app.start_ns, app.entry_ns),
        (Some(0), Some(50 * MS), Some(61 * MS))
    );
    // To the entry, and the dlopens' 10 and 15 ms.
    assert_eq!(app.loader_ns, 86 * MS);
    assert_eq!((app.initializers, app.initializers_ns), (2, 9 * MS));

    // liba: most loader time (10 + 10 + 5 + 10 ms), then the main program
    // (5 ms of relocation), then libc2.so, which was never found.
    let names: Vec<&str> = app.objects.iter().map(|o| o.object.as_str()).collect();
    assert_eq!(names, ["/lib/liba.so", "", "libc2.so", "libd.so"]);
    let liba = &app.objects[0];
    assert_eq!(
        (liba.search_ns, liba.map_ns, liba.relocate_ns, liba.init_ns),
        (10 * MS, 10 * MS, 5 * MS, 10 * MS)
    );
    assert_eq!(liba.loader_ns, 35 * MS);
    assert_eq!((liba.references, liba.failed_loads), (1, 0));
    assert_eq!(liba.names, ["liba.so"]);
    assert_eq!(liba.origin, coldstart_analyze::ObjectOrigin::Initial);
    assert_eq!((liba.opens_tried, liba.opens_failed), (2, 1));
    let opens: Vec<(Option<&str>, Option<i64>, i64)> = liba
        .opens
        .iter()
        .map(|o| (o.path.as_deref(), o.result, o.duration_ns))
        .collect();
    assert_eq!(
        opens,
        [
            (Some("/usr/lib/liba.so"), Some(-2), MS),
            (Some("/lib/liba.so"), Some(3), 2 * MS)
        ]
    );
    assert_eq!(liba.lookups, Some(7));
    assert_eq!(liba.base, Some(0x7000_0000));
    let calls: Vec<(Option<&str>, Option<u64>, i64, bool)> = liba
        .initializers
        .iter()
        .map(|c| (c.slot.as_deref(), c.address, c.duration_ns, c.finished))
        .collect();
    assert_eq!(
        calls,
        [
            (Some("DT_INIT_ARRAY[0]"), Some(0x1100), 4 * MS, true),
            (Some("DT_INIT_ARRAY[1]"), Some(0x1200), 5 * MS, true)
        ]
    );
    // /lib/liba.so does not exist here: no relocations, said why.
    assert!(liba.relocations.is_none());
    let note = liba.relocations_note.as_deref().unwrap();
    assert!(note.contains("cannot read it now"), "{note}");
    // Its I/O by innermost phase: search 1 (at 10 ms) + 3, open 1, map 4
    // read and 1 touched, relocate 1 touched, initializer 2 touched.
    let phases: Vec<(LoaderPhase, coldstart_analyze::PagesIo)> =
        liba.io.iter().map(|p| (p.phase, p.io)).collect();
    assert_eq!(
        phases,
        [
            (LoaderPhase::Search, io(4, 0)),
            (LoaderPhase::Map, io(4, 1)),
            (LoaderPhase::Open, io(1, 0)),
            (LoaderPhase::Relocate, io(0, 1)),
            (LoaderPhase::Initializer, io(0, 2)),
        ]
    );
    assert_eq!(liba.pages, io(9, 4));

    let main = &app.objects[1];
    assert!(main.main_program);
    assert_eq!(main.path.as_deref(), Some("/bin/app"));
    assert_eq!(main.relocate_ns, 5 * MS);

    // libc2.so: the dlopen asked for it, its load never returned and was
    // unwound when the dlopen returned at 80 ms: 9 ms of load, one
    // failed open, the read at 75 ms.
    let libc2 = &app.objects[2];
    assert_eq!(libc2.origin, coldstart_analyze::ObjectOrigin::Dlopen);
    assert_eq!(libc2.dlopen.as_deref(), Some("libc2.so"));
    assert_eq!((libc2.failed_loads, libc2.references), (1, 0));
    assert_eq!((libc2.opens_tried, libc2.opens_failed), (1, 1));
    assert_eq!(libc2.pages, io(1, 0));

    let dlopens: Vec<(i32, Option<&str>, Option<bool>, i64)> = app
        .dlopens
        .iter()
        .map(|d| (d.pid, d.name.as_deref(), d.succeeded, d.duration_ns))
        .collect();
    assert_eq!(
        dlopens,
        [
            (APP, Some("libc2.so"), Some(false), 10 * MS),
            // Never returned: it runs to the run's end at 100 ms.
            (THREAD, Some("libd.so"), None, 15 * MS)
        ]
    );

    let phase = |phases: &[coldstart_analyze::PhaseTotal], which: LoaderPhase| {
        phases
            .iter()
            .find(|p| p.phase == which)
            .map(|p| (p.spans, p.unfinished, p.total_ns, p.self_ns, p.io))
            .unwrap()
    };
    // start: 50 ms, less the loads (20 + 1) and relocations (5 + 5) in it;
    // its own 2 pages at 5 ms.
    assert_eq!(
        phase(&app.phases, LoaderPhase::Start),
        (1, 0, 50 * MS, 19 * MS, io(2, 0))
    );
    // The unwound load of libc2.so: 9 ms (71 to 80), the read at 75 ms;
    // the two others 20 and 1 ms, all their time in search and map.
    assert_eq!(
        phase(&app.phases, LoaderPhase::Load),
        (3, 1, 30 * MS, 8 * MS + MS, io(1, 0))
    );
    assert_eq!(
        phase(&app.phases, LoaderPhase::Dlopen),
        (2, 1, 25 * MS, MS + 15 * MS, io(2, 0))
    );
    // Both processes' searches and maps in the run's totals.
    assert_eq!(
        phase(&loader.phases, LoaderPhase::Map),
        (2, 0, 15 * MS, 15 * MS, io(11, 1))
    );

    // The child's liba is its own object, with its own map's 7 pages.
    let child = &loader.processes[1];
    assert_eq!(child.objects.len(), 1);
    assert_eq!(
        (child.objects[0].search_ns, child.objects[0].map_ns),
        (3 * MS, 5 * MS)
    );
    assert_eq!(child.objects[0].pages, io(7, 0));
    assert_eq!(child.entry_ns, None);

    // Outside: the thread at 16 ms, task 100 at 65, 82 and 90 ms; the
    // other process's 5 pages nowhere.
    assert_eq!(loader.outside_loader, io(4, 0));
}

#[test]
fn bands_nest_by_time_and_unfinished_spans_end_with_their_holder() {
    let (_dir, profile) = profile_with(spans(), Some("ld.so probes"));
    let (_, timeline) = analyze(&profile, &reading_files()).unwrap();
    assert_eq!(timeline.loader.len(), spans().len());
    let band = |pid: i32, phase: LoaderPhase, begin_ms: i64| {
        timeline
            .loader
            .iter()
            .find(|b| b.pid == pid && b.phase == phase && b.t_begin_ns == begin_ms * MS)
            .map(|b| (b.depth, b.t_end_ns))
            .unwrap()
    };
    assert_eq!(band(APP, LoaderPhase::Start, 0), (0, 50 * MS));
    assert_eq!(band(APP, LoaderPhase::Load, 10), (1, 30 * MS));
    assert_eq!(band(APP, LoaderPhase::Search, 10), (2, 20 * MS));
    assert_eq!(band(APP, LoaderPhase::Open, 13), (3, 15 * MS));
    assert_eq!(band(APP, LoaderPhase::Map, 20), (2, 30 * MS));
    assert_eq!(band(APP, LoaderPhase::Initializer, 55), (1, 60 * MS));
    // Unwound with the dlopen holding it.
    assert_eq!(band(APP, LoaderPhase::Load, 71), (1, 80 * MS));
    // Nothing holds it: the run's end.
    assert_eq!(band(THREAD, LoaderPhase::Dlopen, 85), (0, 100 * MS));
    // Outermost first.
    let depths: Vec<u32> = timeline.loader.iter().map(|b| b.depth).collect();
    assert!(depths.windows(2).all(|w| w[0] <= w[1]), "{depths:?}");
}

#[test]
fn without_reading_files_relocations_say_why() {
    let (_dir, profile) = profile_with(spans(), Some("ld.so probes"));
    let (report, _) = analyze(&profile, &Options::default()).unwrap();
    let liba = &report.loader.unwrap().processes[0].objects[0];
    assert_eq!(
        liba.relocations_note.as_deref(),
        Some("files not read (attribution off)")
    );
    assert!(liba.initializers.iter().all(|c| c.name.is_none()));
}

#[test]
fn a_run_without_spans_has_no_loader_report_and_says_why_when_asked_for() {
    let (_dir, profile) = profile_with(Vec::new(), None);
    let (report, timeline) = analyze(&profile, &reading_files()).unwrap();
    assert!(report.loader.is_none());
    assert!(timeline.loader.is_empty());
    assert!(report.warnings.is_empty(), "{:?}", report.warnings);

    let note = "not traced: no debug file for /lib64/ld-linux-x86-64.so.2";
    let (_dir, profile) = profile_with(Vec::new(), Some(note));
    let (report, _) = analyze(&profile, &reading_files()).unwrap();
    assert!(report.loader.is_none());
    assert_eq!(
        report.warnings,
        [format!("the dynamic loader was {note}")],
        "the note, as a warning"
    );
}

mod fixture;

/// `readelf -W -r`'s relocations of `path`: (all, R_*_RELATIVE, naming a
/// symbol (the symbol index in r_info is not 0), R_*_JUMP_SLOT), per type.
fn readelf_relocations(path: &std::path::Path) -> ((u64, u64, u64, u64), BTreeMap<String, u64>) {
    let out = coldstart_testkit::run_ok(std::process::Command::new("readelf").arg("-Wr").arg(path));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!text.contains(".relr"), "this oracle does not decode RELR");
    let hex = |f: &str| u64::from_str_radix(f, 16).ok();
    let (mut counts, mut by_type) = ((0, 0, 0, 0), BTreeMap::new());
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let [offset, info, kind, ..] = f[..] else {
            continue;
        };
        let (Some(_), Some(info)) = (hex(offset), hex(info)) else {
            continue;
        };
        counts.0 += 1;
        counts.1 += u64::from(kind.ends_with("_RELATIVE") && !kind.ends_with("_IRELATIVE"));
        counts.2 += u64::from(info >> 32 != 0);
        counts.3 += u64::from(kind.ends_with("_JUMP_SLOT"));
        *by_type.entry(kind.to_string()).or_default() += 1;
    }
    (counts, by_type)
}

/// The fixture library's file row, as the trace records it.
fn traced_file(path: &std::path::Path, build_id: Option<&str>) -> NewFile {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path).unwrap();
    NewFile {
        size: Some(meta.size()),
        mtime_ns: Some(meta.mtime() * 1_000_000_000 + meta.mtime_nsec()),
        build_id: build_id.map(str::to_string),
        ..file(path.to_str().unwrap(), 3)
    }
}

/// One start that relocates and initialises the fixture library `lib`
/// loaded at `BASE`, whose initializers call `targets` (addresses in it).
fn fixture_run(lib: NewFile, targets: [u64; 3]) -> (tempfile::TempDir, Profile) {
    use LoaderPhase::*;
    let path = lib.path.clone().unwrap();
    let on_lib = |s: LoaderSpan| {
        let mut s = on(s, &path, Some(LIBA));
        s.base = Some(BASE);
        s
    };
    let call = |begin, target: u64| {
        let mut s = on_lib(span(APP, Initializer, begin, Some(begin + 1)));
        s.target = Some(BASE + target);
        s
    };
    let spans = vec![
        span(APP, Start, 0, Some(20)),
        on_lib(span(APP, Relocate, 5, Some(10))),
        on_lib(span(APP, Init, 20, Some(30))),
        call(21, targets[0]),
        call(22, targets[1]),
        call(23, targets[2]),
    ];
    let dir = tempfile::tempdir().unwrap();
    let mut profile = Profile::create_or_open(&dir.path().join("p.db")).unwrap();
    let run = profile.begin_run(&handmade::run_start(4096, 128)).unwrap();
    profile
        .write(
            run,
            &Batch {
                files: vec![file("/bin/app", 1), lib],
                processes: vec![handmade::process(APP, Some(APP), "app", true)],
                loader_spans: spans,
                ..Default::default()
            },
        )
        .unwrap();
    profile
        .end_run(run, &handmade::exited(40 * MS, APP))
        .unwrap();
    (dir, profile)
}

const BASE: u64 = 0x7f00_0000_0000;

#[test]
fn initializers_are_named_and_relocations_counted_from_the_objects_file() {
    let Some(fx) = fixture::build() else {
        return;
    };
    // alpha's first byte, 16 bytes into beta, and the ELF header, which
    // no symbol covers.
    let targets = [
        fx.symbol("alpha").address,
        fx.symbol("beta").address + 16,
        0,
    ];
    let (_dir, profile) = fixture_run(traced_file(&fx.lib, None), targets);
    let (report, _) = analyze(&profile, &reading_files()).unwrap();
    let lib = &report.loader.unwrap().processes[0].objects[0];
    let names: Vec<Option<&str>> = lib.initializers.iter().map(|c| c.name.as_deref()).collect();
    assert_eq!(names, [Some("alpha"), Some("beta"), None]);
    let addresses: Vec<Option<u64>> = lib.initializers.iter().map(|c| c.address).collect();
    assert_eq!(addresses, targets.map(Some));

    let ((total, relative, symbolic, plt), by_type) = readelf_relocations(&fx.lib);
    let counted = lib.relocations.as_ref().expect("relocations");
    assert_eq!(
        (
            counted.total,
            counted.relative,
            counted.symbolic,
            counted.plt
        ),
        (total, relative, symbolic, plt)
    );
    assert_eq!(counted.by_type, by_type);
    assert!(total > 0, "the fixture has relocations");
}

#[test]
fn a_file_rebuilt_since_the_trace_is_said_to_have_changed() {
    let Some(fx) = fixture::build() else {
        return;
    };
    let then = "00".repeat(20);
    let (_dir, profile) = fixture_run(traced_file(&fx.lib, Some(&then)), [0; 3]);
    let (report, _) = analyze(&profile, &reading_files()).unwrap();
    let lib = &report.loader.unwrap().processes[0].objects[0];
    assert!(lib.relocations.is_none());
    let note = lib.relocations_note.as_deref().unwrap();
    assert!(
        note.starts_with(&format!("changed since the trace (build-id {then} then, ")),
        "{note}"
    );
}

#[test]
fn a_process_that_execs_twice_has_two_images_and_only_the_last_names_its_program() {
    use LoaderPhase::*;
    // A shell script (exec 0 ms) that execs the program (exec 20 ms) in
    // the same process: the trace names the main program of the last.
    let spans = vec![
        span(APP, Start, 0, Some(10)),
        on(span(APP, Relocate, 2, Some(3)), "", Some(APP_FILE)),
        span(APP, Entry, 11, Some(11)),
        span(APP, Start, 20, Some(30)),
        on(span(APP, Relocate, 22, Some(24)), "", Some(APP_FILE)),
        span(APP, Entry, 33, Some(33)),
    ];
    let (_dir, profile) = profile_with(spans, Some("ld.so probes"));
    let (report, _) = analyze(&profile, &reading_files()).unwrap();
    let loader = report.loader.unwrap();
    type Image<'a> = (i32, Option<i64>, Option<i64>, i64, Option<&'a str>);
    let images: Vec<Image> = loader
        .processes
        .iter()
        .map(|p| {
            (
                p.pid,
                p.exec_ns,
                p.entry_ns,
                p.loader_ns,
                p.program.as_deref(),
            )
        })
        .collect();
    assert_eq!(
        images,
        [
            (APP, Some(0), Some(11 * MS), 11 * MS, None),
            (APP, Some(20 * MS), Some(13 * MS), 13 * MS, Some("/bin/app"))
        ]
    );
    let first = &loader.processes[0].objects[0];
    assert!(first.main_program && first.path.is_none());
    assert_eq!(first.relocate_ns, MS);
    let note = first.relocations_note.as_deref().unwrap();
    assert!(note.contains("exec'd another program later"), "{note}");
    let last = &loader.processes[1].objects[0];
    assert_eq!(last.path.as_deref(), Some("/bin/app"));
    assert_eq!(last.relocate_ns, 2 * MS);
}

#[test]
fn a_dlopen_that_never_returned_ended_with_its_last_open_when_another_dlopen_follows() {
    use LoaderPhase::*;
    // dlopen("libe.so") at 10 ms: its load's one open fails at 14 ms and
    // ld.so unwinds both with longjmp (no return). A dlopen("libf.so")
    // from 20 to 30 ms on the same task shows they had ended: dlopens do
    // not nest, unless an initializer makes one: libf's runs from 26 to
    // 29 ms and dlopens libg.so from 27 to 28. Task 100 reads at 13 ms
    // (the open), 16 ms (outside) and 25 ms (the second dlopen).
    let mut second = on(span(APP, Dlopen, 20, Some(30)), "/lib/libf.so", None);
    second.detail = Some("libf.so".into());
    second.result = Some(1);
    let spans = vec![
        span(APP, Start, 0, Some(5)),
        detail(span(APP, Dlopen, 10, None), "libe.so"),
        depth(detail(span(APP, Load, 11, None), "libe.so"), 1),
        open(APP, 12, 14, "/lib/libe.so", -2),
        second,
        depth(on(span(APP, Init, 26, Some(29)), "/lib/libf.so", None), 1),
        depth(
            on(span(APP, Initializer, 26, Some(29)), "/lib/libf.so", None),
            2,
        ),
        depth(detail(span(APP, Dlopen, 27, Some(28)), "libg.so"), 3),
    ];
    let dir = tempfile::tempdir().unwrap();
    let mut profile = Profile::create_or_open(&dir.path().join("p.db")).unwrap();
    let run = profile.begin_run(&handmade::run_start(4096, 128)).unwrap();
    use PageEventKind::Read;
    profile
        .write(
            run,
            &Batch {
                files: vec![file("/bin/app", 1), file("/lib/liba.so", 2)],
                processes: vec![handmade::process(APP, Some(APP), "app", true)],
                page_events: vec![
                    event(APP, 13 * MS, 1, Read),
                    event(APP, 16 * MS, 1, Read),
                    event(APP, 25 * MS, 2, Read),
                ],
                loader_spans: spans,
                ..Default::default()
            },
        )
        .unwrap();
    profile
        .end_run(run, &handmade::exited(100 * MS, APP))
        .unwrap();
    let (report, timeline) = analyze(&profile, &reading_files()).unwrap();
    let ends: Vec<(LoaderPhase, i64, i64, u32)> = timeline
        .loader
        .iter()
        .filter(|b| b.t_begin_ns >= 10 * MS)
        .map(|b| (b.phase, b.t_begin_ns / MS, b.t_end_ns / MS, b.depth))
        .collect();
    assert_eq!(
        ends,
        [
            (Dlopen, 10, 14, 0),
            (Dlopen, 20, 30, 0),
            (Load, 11, 14, 1),
            (Init, 26, 29, 1),
            (Open, 12, 14, 2),
            (Initializer, 26, 29, 2),
            (Dlopen, 27, 28, 3),
        ]
    );
    let loader = report.loader.unwrap();
    let app = &loader.processes[0];
    let dlopens: Vec<(Option<&str>, Option<bool>, i64)> = app
        .dlopens
        .iter()
        .map(|d| (d.name.as_deref(), d.succeeded, d.duration_ns))
        .collect();
    assert_eq!(
        dlopens,
        [
            (Some("libe.so"), None, 4 * MS),
            (Some("libf.so"), Some(true), 10 * MS),
            (Some("libg.so"), None, MS),
        ]
    );
    // libg's dlopen lies inside libf's: counted once. No entry: the start.
    assert_eq!(app.dlopen_ns, 14 * MS);
    assert_eq!(app.loader_ns, 5 * MS + 14 * MS);
    let libe = app.objects.iter().find(|o| o.object == "libe.so").unwrap();
    assert_eq!((libe.failed_loads, libe.opens_failed), (1, 1));
    assert_eq!(libe.pages, io(1, 0));
    let libf = app
        .objects
        .iter()
        .find(|o| o.object == "/lib/libf.so")
        .unwrap();
    assert_eq!(libf.pages, io(2, 0));
    assert_eq!(loader.outside_loader, io(1, 0));
}

/// Without a calibrated cost nothing is corrected; with 0.5 ms a hit, each
/// span loses its own hits' cost and a phase's self time the hits its
/// nested spans did not hold.
///
/// Task 100: start [0, 50) held 40 hits; in it load [10, 30) held 6, its
/// search [10, 20) 5 (an open [11, 12) 1, an open [13, 15) 1) and its map
/// [20, 30) 1; relocate [35, 40) held 4 (lookups), which is more than its
/// length: it counts 0. The entry at 61 came 60 hits after the exec.
#[test]
fn probe_hits_are_taken_off_at_the_calibrated_cost() {
    use LoaderPhase::*;
    const A: &str = "/lib/liba.so";
    let spans = vec![
        hits(span(APP, Start, 0, Some(50)), 40),
        hits(
            detail(on(span(APP, Load, 10, Some(30)), A, Some(LIBA)), "liba.so"),
            6,
        ),
        hits(
            depth(on(span(APP, Search, 10, Some(20)), A, Some(LIBA)), 1),
            5,
        ),
        hits(open(APP, 11, 12, "/usr/lib/liba.so", -2), 1),
        hits(open(APP, 13, 15, "/lib/liba.so", 3), 1),
        hits(depth(on(span(APP, Map, 20, Some(30)), A, Some(LIBA)), 1), 1),
        hits(on(span(APP, Relocate, 35, Some(36)), A, Some(LIBA)), 4),
        hits(span(APP, Entry, 61, Some(61)), 60),
    ];
    let (_dir, mut profile) = profile_with(spans, Some("ld.so probes"));
    let (plain, _) = analyze(&profile, &reading_files()).unwrap();
    let plain = plain.loader.unwrap();
    assert_eq!(plain.probe_hit_ns, None);
    assert!(plain.phases.iter().all(|p| p.corrected_total_ns.is_none()));
    assert_eq!(plain.processes[0].corrected_entry_ns, None);
    let phase = |phases: &[coldstart_analyze::PhaseTotal], phase: LoaderPhase| {
        phases.iter().find(|p| p.phase == phase).unwrap().clone()
    };
    assert_eq!(phase(&plain.phases, Load).probe_hits, 6);

    let run = profile.runs().unwrap()[0].id;
    profile.set_run_loader_hit_ns(run, (MS / 2) as u64).unwrap();
    let (report, _) = analyze(&profile, &reading_files()).unwrap();
    let loader = report.loader.unwrap();
    assert_eq!(loader.probe_hit_ns, Some((MS / 2) as u64));
    let app = &loader.processes[0];
    assert_eq!(app.start_ns, Some(50 * MS));
    assert_eq!(app.corrected_start_ns, Some(50 * MS - 20 * MS));
    assert_eq!(app.entry_ns, Some(61 * MS));
    assert_eq!(app.entry_probe_hits, Some(60));
    assert_eq!(app.corrected_entry_ns, Some(61 * MS - 30 * MS));
    let corrected = |p: LoaderPhase| {
        let t = phase(&app.phases, p);
        (t.corrected_total_ns.unwrap(), t.corrected_self_ns.unwrap())
    };
    // load 20 - 3 = 17; its search 10 - 2.5 = 7.5 and map 10 - 0.5 = 9.5
    // leave it 0 of its own.
    assert_eq!(corrected(Load), (17 * MS, 0));
    // search: opens 0.5 and 1.5 leave it 7.5 - 2 = 5.5.
    assert_eq!(corrected(Search), (15 * MS / 2, 11 * MS / 2));
    assert_eq!(corrected(Open), (2 * MS, 2 * MS));
    assert_eq!(corrected(Map), (19 * MS / 2, 19 * MS / 2));
    assert_eq!(corrected(Relocate), (0, 0));
    // start: 30 less load 17 and relocate 0.
    assert_eq!(corrected(Start), (30 * MS, 13 * MS));
}
