//! `coldstart trace --loader` then `coldstart report` on the sample app, as
//! root, against oracles outside coldstart: `ldd` for the objects ld.so
//! relocates, `readelf -W -r` for each object's relocations by kind, and
//! for the library's initializers, in order, `readelf` (DT_INIT and the
//! relocations that fill `.init_array`) with `nm` naming their targets,
//! and the generator's manifest for the units that have one. And the
//! loader's totals of a start against what ld.so itself counted during that
//! same start (`LD_DEBUG=statistics`).

use coldstart_sample::{Module, SampleSpec, generate_and_build};
use coldstart_testkit::{can_trace, run_ok, skip, world_readable_temp_dir};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

fn coldstart() -> Command {
    Command::new(env!("CARGO_BIN_EXE_coldstart"))
}

fn text(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn hex(field: &str) -> Option<u64> {
    u64::from_str_radix(field.trim_start_matches("0x"), 16).ok()
}

/// One relocation `readelf -W -r` lists.
struct Relocation {
    offset: u64,
    /// None for an address a DT_RELR table relocates (readelf decodes
    /// them, one address a line).
    kind: Option<String>,
    /// r_info's symbol index is not 0.
    symbolic: bool,
    /// The last field: the addend (what a relative relocation stores).
    addend: Option<u64>,
}

fn readelf_relocations(path: &Path) -> Vec<Relocation> {
    let out = text(&run_ok(Command::new("readelf").arg("-Wr").arg(path)));
    let mut in_relr = false;
    let mut relocations = Vec::new();
    for line in out.lines() {
        if line.starts_with("Relocation section") {
            in_relr = line.contains(".relr");
            continue;
        }
        let f: Vec<&str> = line.split_whitespace().collect();
        match f[..] {
            [offset] if in_relr && offset.len() == 16 => relocations.push(Relocation {
                offset: hex(offset).unwrap(),
                kind: None,
                symbolic: false,
                addend: None,
            }),
            [offset, info, kind, ..] if offset.len() == 16 && info.len() == 16 => {
                let (Some(offset), Some(info)) = (hex(offset), hex(info)) else {
                    continue;
                };
                relocations.push(Relocation {
                    offset,
                    kind: Some(kind.to_string()),
                    symbolic: info >> 32 != 0,
                    addend: f.last().and_then(|a| hex(a)),
                });
            }
            _ => {}
        }
    }
    relocations
}

/// The relocation figures `report --json` gives, from readelf.
fn expected_relocations(path: &Path) -> Value {
    let relocations = readelf_relocations(path);
    let count =
        |wanted: &dyn Fn(&Relocation) -> bool| relocations.iter().filter(|r| wanted(r)).count();
    let kind = |r: &Relocation, name: &str| r.kind.as_deref() == Some(name);
    let relr = count(&|r| r.kind.is_none());
    let relative = relr + count(&|r| kind(r, "R_X86_64_RELATIVE"));
    let symbolic = count(&|r| r.symbolic);
    let mut by_type = BTreeMap::new();
    for kind in relocations.iter().filter_map(|r| r.kind.clone()) {
        *by_type.entry(kind).or_insert(0u64) += 1;
    }
    serde_json::json!({
        "total": relocations.len(),
        "relative": relative,
        "symbolic": symbolic,
        "other": relocations.len() - relative - symbolic,
        "plt": count(&|r| kind(r, "R_X86_64_JUMP_SLOT")),
        "relr": relr,
        "by_type": by_type,
    })
}

/// The objects ld.so loads for `program`, as `ldd` names them (the vdso,
/// which has no file, left out).
fn ldd_objects(program: &Path) -> BTreeSet<String> {
    text(&run_ok(Command::new("ldd").arg(program)))
        .lines()
        .filter_map(|line| {
            let line = line.trim();
            let name = match line.split_once(" => ") {
                Some((_, path)) => path,
                None => line,
            };
            let path = name.split(" (").next()?.trim();
            path.starts_with('/').then(|| path.to_string())
        })
        .collect()
}

/// Function names at each address of `library`, raw and as `nm -C` gives
/// them: the same symbols in the same order.
fn nm_functions(library: &Path) -> HashMap<u64, Vec<(String, String)>> {
    let raw = text(&run_ok(
        Command::new("nm").arg("--defined-only").arg(library),
    ));
    let demangled = text(&run_ok(
        Command::new("nm")
            .args(["--defined-only", "-C"])
            .arg(library),
    ));
    let mut by_address: HashMap<u64, Vec<(String, String)>> = HashMap::new();
    for (raw, demangled) in raw.lines().zip(demangled.lines()) {
        let [address, kind, name] = raw.splitn(3, ' ').collect::<Vec<_>>()[..] else {
            continue;
        };
        if !matches!(kind, "T" | "t") {
            continue;
        }
        let shown = demangled.splitn(3, ' ').nth(2).unwrap_or("").to_string();
        by_address
            .entry(hex(address).unwrap())
            .or_default()
            .push((name.to_string(), shown));
    }
    by_address
}

/// The initializers ld.so runs for `library`, in order, from readelf:
/// DT_INIT, then each `.init_array` slot's relocation by slot address.
fn expected_initializers(library: &Path) -> Vec<(String, u64)> {
    let dynamic = text(&run_ok(Command::new("readelf").arg("-dW").arg(library)));
    let init = dynamic
        .lines()
        .find(|l| l.contains("(INIT)"))
        .and_then(|l| l.split_whitespace().last())
        .and_then(hex);
    let sections = text(&run_ok(Command::new("readelf").arg("-SW").arg(library)));
    let array = sections
        .lines()
        .find_map(|l| {
            let (_, rest) = l.split_once(']')?;
            let f: Vec<&str> = rest.split_whitespace().collect();
            (f.first() == Some(&".init_array")).then(|| (hex(f[2]).unwrap(), hex(f[4]).unwrap()))
        })
        .expect(".init_array");
    let mut slots: Vec<Relocation> = readelf_relocations(library)
        .into_iter()
        .filter(|r| (array.0..array.0 + array.1).contains(&r.offset))
        .collect();
    slots.sort_by_key(|r| r.offset);
    assert_eq!(slots.len() as u64, array.1 / 8, "a relocation per slot");
    init.map(|a| ("DT_INIT".to_string(), a))
        .into_iter()
        .chain(slots.iter().enumerate().map(|(i, r)| {
            assert_eq!(r.kind.as_deref(), Some("R_X86_64_RELATIVE"));
            (format!("DT_INIT_ARRAY[{i}]"), r.addend.unwrap())
        }))
        .collect()
}

fn tools_missing() -> Option<&'static str> {
    ["readelf", "nm", "ldd", "g++"].into_iter().find(|tool| {
        !Command::new(tool)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    })
}

#[test]
fn the_sample_apps_loader_phases_match_readelf_nm_and_ldd() {
    if !can_trace() {
        return;
    }
    if let Some(tool) = tools_missing() {
        skip(&format!(
            "{tool} not installed (apt-get install g++ binutils libc-bin)"
        ));
        return;
    }
    let dir = world_readable_temp_dir("coldstart-loader-test");
    let spec = SampleSpec {
        translation_units: 12,
        functions: 240,
        ..SampleSpec::tiny()
    };
    let app = generate_and_build(&spec, dir.path()).expect("generate and build");
    let db = dir.path().join("app.db");
    run_ok(
        coldstart()
            .args(["trace", "--loader", "--ready-regex", "^READY$", "-o"])
            .arg(&db)
            .arg("--")
            .arg(&app.executable),
    );
    let report: Value =
        serde_json::from_slice(&run_ok(coldstart().arg("report").arg(&db).arg("--json")).stdout)
            .expect("JSON");
    if report["loader"].is_null() {
        skip(&format!(
            "the loader was not traced here: {}",
            report["warnings"]
        ));
        return;
    }
    let process = report["loader"]["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["program"] == app.executable.to_str().unwrap())
        .unwrap_or_else(|| panic!("no loader process for the app: {:#}", report["loader"]));
    let objects = process["objects"].as_array().unwrap();

    // ld.so relocated exactly the objects ldd lists, and the program.
    let relocated: BTreeSet<String> = objects
        .iter()
        .filter(|o| o["relocated"] == true)
        .map(|o| o["object"].as_str().unwrap().to_string())
        .collect();
    let mut expected = ldd_objects(&app.executable);
    expected.insert(String::new());
    assert_eq!(relocated, expected);

    // Each relocated object's relocations by kind, as readelf lists them.
    for object in objects.iter().filter(|o| o["relocated"] == true) {
        let path = object["path"].as_str().expect("the file of each object");
        let counted = &object["relocations"];
        let expected = expected_relocations(Path::new(path));
        for field in [
            "total", "relative", "symbolic", "other", "plt", "relr", "by_type",
        ] {
            assert_eq!(counted[field], expected[field], "{path}: {field}");
        }
        assert_eq!(object["origin"], "initial", "{path}");
    }

    check_library_initializers(objects, &app);
    check_library_search(objects, &app);

    let shown = text(&run_ok(coldstart().arg("report").arg(&db)));
    assert!(shown.contains("\nDynamic loader\n"), "{shown}");
    assert!(shown.contains("_GLOBAL__sub_I_"), "{shown}");
}

fn object<'a>(objects: &'a [Value], path: &Path) -> &'a Value {
    objects
        .iter()
        .find(|o| o["object"] == path.to_str().unwrap())
        .unwrap_or_else(|| panic!("{} not among {objects:#?}", path.display()))
}

/// libcssample.so's initializers: DT_INIT then every `.init_array` entry,
/// in order, named as nm names their targets; the manifest's initializers
/// of library units among them.
fn check_library_initializers(objects: &[Value], app: &coldstart_sample::BuiltApp) {
    let library = object(objects, &app.library);
    let functions = nm_functions(&app.library);
    let expected: Vec<(String, String, String)> = expected_initializers(&app.library)
        .into_iter()
        .map(|(slot, address)| {
            let names = &functions[&address];
            assert_eq!(names.len(), 1, "one function at 0x{address:x}: {names:?}");
            (slot, names[0].0.clone(), names[0].1.clone())
        })
        .collect();
    let recorded: Vec<(String, String, String)> = library["initializers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let field = |name: &str| c[name].as_str().unwrap_or("?").to_string();
            (field("slot"), field("raw_name"), field("name"))
        })
        .collect();
    assert_eq!(recorded, expected);
    let names: BTreeSet<&str> = recorded.iter().map(|c| c.1.as_str()).collect();
    let from_manifest: Vec<&str> = app
        .ground_truth
        .static_initializers
        .iter()
        .filter(|s| s.module == Module::Library)
        .map(|s| s.init_function.as_deref().expect("built"))
        .collect();
    assert!(!from_manifest.is_empty());
    for name in from_manifest {
        assert!(names.contains(name), "{name} not run: {recorded:?}");
    }
}

/// The library was found where the executable's RUNPATH ($ORIGIN) points:
/// the last open of its search is that file, and succeeded.
fn check_library_search(objects: &[Value], app: &coldstart_sample::BuiltApp) {
    let library = object(objects, &app.library);
    let opens = library["opens"].as_array().unwrap();
    let last = opens.last().expect("an open");
    assert_eq!(last["path"], app.library.to_str().unwrap());
    assert!(last["result"].as_i64().unwrap() >= 0, "{last}");
    let failed = opens
        .iter()
        .filter(|o| o["result"].as_i64().is_some_and(|r| r < 0))
        .count();
    assert_eq!(library["opens_failed"], failed);
    assert_eq!(library["opens_tried"], opens.len());
}

/// ld.so's own figures for one start, from `LD_DEBUG=statistics`, in CPU
/// cycles as counted (the printed counts times 10: glibc's HP_TIMING_PRINT
/// writes its NUL over the last digit; docs/loader.md).
#[derive(Debug, Clone, Copy)]
struct LoaderStatistics {
    total: u64,
    relocation: u64,
    load: u64,
}

/// The first block of `LD_DEBUG=statistics` in `text` (lines `PID:\tLABEL:
/// VALUE cycles (P%)`); the block printed at exit has other labels.
fn loader_statistics(text: &str) -> Option<LoaderStatistics> {
    let cycles = |wanted: &str| {
        text.lines().find_map(|line| {
            let (_pid, rest) = line.split_once(':')?;
            let (label, value) = rest.split_once(':')?;
            let printed: u64 = value.split_whitespace().next()?.parse().ok()?;
            (label.trim() == wanted).then_some(printed * 10)
        })
    };
    Some(LoaderStatistics {
        total: cycles("total startup time in dynamic loader")?,
        relocation: cycles("time needed for relocation")?,
        load: cycles("time needed to load objects")?,
    })
}

/// TSC ticks per ns, the clock ld.so's HP_TIMING_NOW reads (rdtsc on
/// x86-64), against CLOCK_MONOTONIC over 50 ms.
#[cfg(target_arch = "x86_64")]
fn tsc_ticks_per_ns() -> Option<f64> {
    fn monotonic_ns() -> i128 {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: valid out-pointer; CLOCK_MONOTONIC always exists.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
        i128::from(ts.tv_sec) * 1_000_000_000 + i128::from(ts.tv_nsec)
    }
    // SAFETY: rdtsc has no preconditions on x86-64.
    let tsc = || unsafe { core::arch::x86_64::_rdtsc() };
    let (t0, c0) = (monotonic_ns(), tsc());
    std::thread::sleep(std::time::Duration::from_millis(50));
    let (c1, t1) = (tsc(), monotonic_ns());
    Some((c1 - c0) as f64 / (t1 - t0) as f64)
}

#[cfg(not(target_arch = "x86_64"))]
fn tsc_ticks_per_ns() -> Option<f64> {
    None
}

/// A program with 20 libraries holding 40,000 relative relocations between
/// them (loadcost's `libraries` factor at level 20), so that ld.so's
/// loading and relocation take milliseconds.
fn many_libraries_program(root: &Path) -> coldstart_loadcost::generate::BuiltConfig {
    use coldstart_loadcost::design::{Cache, Design, Factor, Mode, SplitBody};
    let design = Design {
        factors: vec![Factor::Libraries],
        levels: vec![vec![20]],
        rounds: 1,
        modes: vec![Mode::Needed],
        caches: vec![Cache::Warm],
        split: SplitBody {
            relative: 40_000,
            functions: 400,
        },
        quick: false,
    };
    let mut built = coldstart_loadcost::generate::build(&design, root, 2, &|_, _| {})
        .expect("build the test program");
    built.configs.pop().expect("one configuration")
}

/// What the trace says of one start, from its spans (ns), each the
/// counterpart of one of ld.so's clocks.
#[derive(Debug, Clone, Copy)]
struct TracedStart {
    /// The process, whose `LD_DEBUG_OUTPUT` file ends in `.PID`.
    pid: i32,
    /// The `start` span: from the exec to `_dl_start_user`. It also holds
    /// what comes before ld.so starts its clock (the exec's return, ld.so's
    /// bootstrap relocation of itself) and the printing of the statistics
    /// after ld.so stops it.
    start: i64,
    /// From the first `relocate` span's beginning to the last one's end:
    /// ld.so times its relocation loop as one interval (glibc rtld.c), so
    /// the probe traps between the objects count in both. The spans' sum
    /// leaves those out (8% less here).
    relocation: i64,
    /// From the first `load` span's beginning to the last one's end: ld.so
    /// times `_dl_map_object_deps`, which makes all the loads.
    load: i64,
    /// The parts of `start` outside both windows: from the exec to the
    /// first load, and from the last relocation to `_dl_start_user`. What
    /// the span holds beyond ld.so's clock is in these.
    before_first_load: i64,
    after_last_relocation: i64,
    /// `start` less the calibrated probe cost: printed for comparison only.
    /// ld.so's clock runs under the probes too, so for the same start the
    /// traced figures, not these, are the ones that must agree.
    corrected_start: Option<i64>,
}

/// The one `start` of the latest run in `db` and the loads and relocations
/// within it, on its task.
fn traced_start(db: &Path) -> TracedStart {
    use coldstart_profile::{LoaderPhase, LoaderSpan, Profile};
    let profile = Profile::open(db).expect("the profile");
    let run = profile.run(None).expect("a complete run");
    let spans = profile.loader_spans(run.id).expect("loader spans");
    let starts: Vec<&LoaderSpan> = spans
        .iter()
        .filter(|s| s.phase == LoaderPhase::Start)
        .collect();
    let [start] = starts[..] else {
        panic!("one start span expected: {starts:#?}");
    };
    let start_end = start.t_end_ns.expect("the start span ended");
    let bounds = |phase: LoaderPhase| {
        let inside: Vec<(i64, i64)> = spans
            .iter()
            .filter(|s| s.phase == phase && s.pid == start.pid)
            .map(|s| (s.t_begin_ns, s.t_end_ns.expect("every span ended")))
            .filter(|&(begin, end)| start.t_begin_ns <= begin && end <= start_end)
            .collect();
        assert!(inside.len() > 20, "too few {phase:?} spans: {inside:?}");
        let first = inside.iter().map(|s| s.0).min().unwrap();
        (first, inside.iter().map(|s| s.1).max().unwrap())
    };
    let (relocation, load) = (bounds(LoaderPhase::Relocate), bounds(LoaderPhase::Load));
    let length = start_end - start.t_begin_ns;
    TracedStart {
        pid: start.pid,
        start: length,
        relocation: relocation.1 - relocation.0,
        load: load.1 - load.0,
        before_first_load: load.0 - start.t_begin_ns,
        after_last_relocation: start_end - relocation.1,
        corrected_start: profile
            .run_loader_hit_ns(run.id)
            .expect("the probe cost")
            .zip(start.probe_hits)
            .map(|(cost, hits)| length - (cost * hits) as i64),
    }
}

/// Traces `program` once with `LD_DEBUG=statistics` passed through
/// `coldstart trace` (its own environment is the program's), and returns
/// the trace's figures and ld.so's for that same start. None, after
/// [`skip`], when the loader could not be traced here.
fn trace_with_ld_statistics(
    program: &coldstart_loadcost::generate::BuiltConfig,
    db: &Path,
    statistics_dir: &Path,
) -> Option<(TracedStart, LoaderStatistics)> {
    run_ok(
        coldstart()
            // Warm: only the loader's work and the trace's own cost vary
            // from start to start, not what a disk happens to do.
            .args(["trace", "--loader", "--cache", "warm", "-o"])
            .arg(db)
            .arg("--")
            .arg(&program.needed_program)
            .env("LD_DEBUG", "statistics")
            .env("LD_DEBUG_OUTPUT", statistics_dir.join("statistics"))
            // The program prints its time since a launcher's stamp; this
            // test does not use it.
            .env(coldstart_loadcost::generate::T0_VAR, "0"),
    );
    let run = coldstart_profile::Profile::open(db)
        .and_then(|p| p.run(None))
        .expect("the run");
    let sight = run.loader.unwrap_or_default();
    if sight.is_empty() || sight.starts_with("not traced") {
        skip(&format!("the loader was not traced here: {sight}"));
        return None;
    }
    let traced = traced_start(db);
    let file = statistics_dir.join(format!("statistics.{}", traced.pid));
    let text = std::fs::read_to_string(&file).unwrap_or_else(|e| {
        panic!(
            "{}: {e}: LD_DEBUG did not reach the traced program",
            file.display()
        )
    });
    let statistics = loader_statistics(&text).unwrap_or_else(|| panic!("no statistics in {text}"));
    Some((traced, statistics))
}

#[test]
fn the_loader_totals_agree_with_ld_debug_statistics_of_the_same_start() {
    let Some(ticks_per_ns) = tsc_ticks_per_ns() else {
        skip("LD_DEBUG=statistics is read as TSC cycles, which this test knows on x86-64 only");
        return;
    };
    if !can_trace() {
        return;
    }
    if !Command::new("cc")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        skip("cc not installed (apt-get install gcc)");
        return;
    }
    let dir = world_readable_temp_dir("coldstart-ld-statistics-test");
    let program = many_libraries_program(&dir.path().join("program"));
    // Written by the program, as the invoking user under sudo, on tmpfs:
    // ld.so prints inside the `start` span, and a write to a disk
    // filesystem can wait on another process's I/O. coldstart's own start
    // and the warm-up run write theirs here too, each under its own pid.
    let statistics_dir = tempfile::Builder::new()
        .prefix("coldstart-ld-statistics")
        .tempdir_in("/dev/shm")
        .expect("/dev/shm for ld.so's statistics");
    std::fs::set_permissions(
        statistics_dir.path(),
        std::fs::Permissions::from_mode(0o777),
    )
    .unwrap();

    const STARTS: usize = 4;
    let mut starts = Vec::new();
    for start in 0..STARTS {
        let db = dir.path().join(format!("start{start}.db"));
        let Some(measured) = trace_with_ld_statistics(&program, &db, statistics_dir.path()) else {
            return;
        };
        starts.push(measured);
    }
    check_agreement(&starts, ticks_per_ns);
}

/// How far a traced figure may lie from ld.so's: a share of ld.so's
/// figure plus a constant.
#[derive(Clone, Copy)]
struct Bound {
    percent: i64,
    ns: i64,
}

impl Bound {
    fn of(self, ld: i64) -> i64 {
        ld * self.percent / 100 + self.ns
    }
}

/// One of ld.so's figures and the trace's counterpart, with how far the
/// trace's may lie below it (`short`) and above it, in every start
/// (`over_each`; None: only the spread) and in the start where they lie
/// closest (`over_best`). Every difference also lies within the spread
/// (largest less smallest) of ld.so's own figure over the starts.
struct Figure {
    name: &'static str,
    traced: fn(&TracedStart) -> i64,
    ld: fn(&LoaderStatistics) -> u64,
    short: Bound,
    over_each: Option<Bound>,
    over_best: Bound,
}

/// Each start's traced figures against ld.so's of the same start.
///
/// The tolerances, from 72 starts here (20 libraries, 40,000 relocations,
/// warm, traced, on a machine also running other benchmarks and builds:
/// ld.so's total 8 to 141 ms, relocation 0.6 to 5.0 ms, loading 6.8 to
/// 139 ms). Relocation and loading: both clocks hold the same interval but
/// for the probe traps at its ends; the windows were always within 18 µs
/// of ld.so's figures, so 2% + 20 µs either way. (The spans' sum instead
/// of the relocation window, 8% short, fails.) Total: the `start` span
/// holds ld.so's interval, so it may not be shorter (20 µs for rounding);
/// it also holds the exec's return and ld.so's bootstrap before ld.so
/// starts its clock, and the printing after it stops: 50 to 150 µs more in
/// 62 of the 72 starts, hence 2% + 150 µs in the closest start. But a
/// start that waits there (10 of the 72: 0.35 to 4.4 ms more, nearly all
/// of it before the first load, while the relocation and load figures of
/// those starts agreed as closely as ever) exceeds that, so every start is
/// held only to ld.so's own spread above. The corrected start is not the
/// figure to compare (up to 7% short here): ld.so's clock counts the
/// probes' cost too. A probe trap that waits (an interrupt, the host)
/// only lengthens a traced window, and did so once in a later suite run:
/// relocation +63 µs in one of 4 starts, the others within 2 µs. So no
/// start may be short by more than its bound, but one start may be long up
/// to ld.so's own spread; a traced window that is wrong lies out in every
/// start.
fn check_agreement(starts: &[(TracedStart, LoaderStatistics)], ticks_per_ns: f64) {
    let ns = |cycles: u64| (cycles as f64 / ticks_per_ns) as i64;
    let phase = Bound {
        percent: 2,
        ns: 20_000,
    };
    let figures = [
        Figure {
            name: "total (start span)",
            traced: |t| t.start,
            ld: |l| l.total,
            short: Bound {
                percent: 0,
                ns: 20_000,
            },
            over_each: None,
            over_best: Bound {
                percent: 2,
                ns: 150_000,
            },
        },
        Figure {
            name: "relocation",
            traced: |t| t.relocation,
            ld: |l| l.relocation,
            short: phase,
            over_each: Some(phase),
            over_best: phase,
        },
        Figure {
            name: "loading",
            traced: |t| t.load,
            ld: |l| l.load,
            short: phase,
            over_each: Some(phase),
            over_best: phase,
        },
    ];
    let mut shown = format!("TSC {ticks_per_ns:.4} ticks/ns\n");
    for (traced, ld) in starts {
        shown += &format!(
            "pid {}: ld.so total {} ns, relocation {} ns, loading {} ns; traced {} ns \
             (corrected {:?}), {} ns, {} ns; before the first load {} ns, after the last \
             relocation {} ns\n",
            traced.pid,
            ns(ld.total),
            ns(ld.relocation),
            ns(ld.load),
            traced.start,
            traced.corrected_start,
            traced.relocation,
            traced.load,
            traced.before_first_load,
            traced.after_last_relocation
        );
    }
    eprint!("{shown}");
    for figure in figures {
        let from_ld: Vec<i64> = starts.iter().map(|(_, l)| ns((figure.ld)(l))).collect();
        let spread = from_ld.iter().max().unwrap() - from_ld.iter().min().unwrap();
        let mut closest_excess = i64::MAX;
        let mut over = Vec::new();
        for ((traced, _), &ld) in starts.iter().zip(&from_ld) {
            let difference = (figure.traced)(traced) - ld;
            let low = -figure.short.of(ld).min(spread);
            let high = figure.over_each.map_or(spread, |b| b.of(ld).min(spread));
            assert!(
                (low..=spread).contains(&difference),
                "{} of pid {}: traced {} ns, ld.so {ld} ns: {difference:+} ns, outside \
                 {low:+} to {spread:+} ns (ld.so's own spread)\n{shown}",
                figure.name,
                traced.pid,
                (figure.traced)(traced)
            );
            if difference > high {
                over.push(format!(
                    "pid {}: {difference:+} ns, over {high:+} ns",
                    traced.pid
                ));
            }
            closest_excess = closest_excess.min(difference - figure.over_best.of(ld));
        }
        assert!(
            over.len() <= 1,
            "{} longer than ld.so's in {} starts (spread of ld.so's figure {spread} ns): {}\n{shown}",
            figure.name,
            over.len(),
            over.join("; ")
        );
        assert!(
            closest_excess <= 0,
            "{}: in no start within {}% + {} ns of ld.so's figure\n{shown}",
            figure.name,
            figure.over_best.percent,
            figure.over_best.ns
        );
    }
}
