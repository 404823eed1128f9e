//! `trace --loader` against oracles outside coldstart: a program built
//! here with a known search path, known initializers and a dlopen, traced
//! with the loader probes; the spans must agree with what ld.so itself
//! prints (LD_DEBUG=libs), with readelf and nm, and with the order the
//! initializers saw themselves run in.

use coldstart_profile::{CacheMode, LoaderPhase, LoaderSpan, Profile};
use coldstart_record::trace::{TraceOptions, trace};
use coldstart_system::launch::LaunchSpec;
use coldstart_testkit::{can_trace, run_ok, skip};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

const LIB_A: &str = r#"
#include <stdio.h>
#include <stdlib.h>
static void note(const char *what) {
    FILE *f = fopen(getenv("CS_INIT_LOG"), "a");
    if (f) { fprintf(f, "%s\n", what); fclose(f); }
}
void a_dt_init(void) { note("a_dt_init"); }
__attribute__((constructor(101))) static void a_first(void) { note("a_first"); }
__attribute__((constructor(102))) static void a_second(void) { note("a_second"); }
__attribute__((constructor)) static void a_third(void) { note("a_third"); }
int a_value(void) { return 1; }
"#;

const LIB_B: &str = r#"
extern int a_value(void);
int b_value(void) { return a_value() + 1; }
"#;

const LIB_C: &str = r#"
int c_value(void) { return 3; }
"#;

const MAIN: &str = r#"
#include <dlfcn.h>
#include <stdio.h>
extern int b_value(void);
int main(int argc, char **argv) {
    if (dlopen("libcs_missing_for_test.so", RTLD_NOW) != NULL) return 2;
    void *c = dlopen(argv[1], RTLD_NOW);
    if (c == NULL) return 3;
    printf("READY %d\n", b_value());
    return 0;
}
"#;

struct Built {
    dir: tempfile::TempDir,
    main: PathBuf,
    lib_a: PathBuf,
    lib_c: PathBuf,
    /// RUNPATH entries in order: two that do not exist, then the real one.
    runpath: Vec<PathBuf>,
}

fn cc(args: &[&str]) {
    run_ok(Command::new("cc").args(args));
}

fn build() -> Built {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let libs = root.join("libs");
    std::fs::create_dir(&libs).unwrap();
    for (name, text) in [
        ("a.c", LIB_A),
        ("b.c", LIB_B),
        ("c.c", LIB_C),
        ("main.c", MAIN),
    ] {
        std::fs::write(root.join(name), text).unwrap();
    }
    let p = |p: PathBuf| p.to_str().unwrap().to_string();
    let lib_a = libs.join("libcsa.so");
    let lib_b = libs.join("libcsb.so");
    let lib_c = root.join("libcsc.so");
    cc(&[
        "-shared",
        "-fPIC",
        "-O1",
        "-Wl,-init,a_dt_init",
        "-o",
        &p(lib_a.clone()),
        &p(root.join("a.c")),
    ]);
    cc(&[
        "-shared",
        "-fPIC",
        "-O1",
        "-o",
        &p(lib_b.clone()),
        &p(root.join("b.c")),
        &format!("-L{}", p(libs.clone())),
        "-lcsa",
        &format!("-Wl,-rpath,{}", p(libs.clone())),
    ]);
    cc(&[
        "-shared",
        "-fPIC",
        "-O1",
        "-o",
        &p(lib_c.clone()),
        &p(root.join("c.c")),
    ]);
    let runpath = vec![root.join("nope1"), root.join("nope2"), libs.clone()];
    let runpath_text: Vec<String> = runpath.iter().map(|d| p(d.clone())).collect();
    let main = root.join("main");
    cc(&[
        "-O1",
        "-o",
        &p(main.clone()),
        &p(root.join("main.c")),
        &format!("-L{}", p(libs.clone())),
        "-lcsb",
        "-lcsa",
        "-ldl",
        "-Wl,--enable-new-dtags",
        &format!("-Wl,-rpath,{}", runpath_text.join(":")),
    ]);
    Built {
        dir,
        main,
        lib_a,
        lib_c,
        runpath,
    }
}

fn launch(built: &Built, log: &Path) -> LaunchSpec {
    let argv = vec![built.main.clone().into(), built.lib_c.clone().into()];
    LaunchSpec {
        env: vec![("CS_INIT_LOG".into(), log.as_os_str().to_owned())],
        ..LaunchSpec::quiet(argv, Duration::from_secs(30)).unwrap()
    }
}

/// One trace at a time: a process's traces share its instance and uprobe
/// group names, and the tests of this file run in one process.
static TRACING: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The loader's spans of one traced run of the built program.
fn traced(
    built: &Built,
    options: impl FnOnce(&mut TraceOptions),
) -> (Vec<LoaderSpan>, Option<String>) {
    let db = built.dir.path().join("t.db");
    let _ = std::fs::remove_file(&db);
    let mut profile = Profile::create_or_open(&db).unwrap();
    let log = built.dir.path().join("init.log");
    let mut trace_options = TraceOptions {
        // Nothing to evict: the loader's phases do not need a cold cache.
        cache: CacheMode::Selective,
        loader: true,
        ..TraceOptions::cold(launch(built, &log))
    };
    options(&mut trace_options);
    let interrupted = AtomicBool::new(false);
    let _one = TRACING.lock().unwrap_or_else(|e| e.into_inner());
    let summary = trace(&mut profile, &trace_options, &interrupted, |_| {}, |_| {}).unwrap();
    assert_eq!(
        summary.exit.code,
        Some(0),
        "the program failed: {summary:?}"
    );
    let run = profile.run(Some(summary.run)).unwrap();
    (profile.loader_spans(summary.run).unwrap(), run.loader)
}

/// "trying file=PATH" lines per library asked for, from ld.so itself.
fn ld_debug_attempts(built: &Built) -> BTreeMap<String, Vec<String>> {
    let log = built.dir.path().join("ld-debug-init.log");
    let output = run_ok(
        Command::new(&built.main)
            .arg(&built.lib_c)
            .env("CS_INIT_LOG", &log)
            .env("LD_DEBUG", "libs"),
    );
    let text = String::from_utf8_lossy(&output.stderr);
    let mut attempts: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        let line = line
            .split_once(':')
            .map(|(_, rest)| rest.trim())
            .unwrap_or("");
        if let Some(rest) = line.strip_prefix("find library=") {
            // "find library=libcsa.so [0]; searching"
            current = rest.split_whitespace().next().map(str::to_string);
        } else if let Some(path) = line.strip_prefix("trying file=")
            && let Some(name) = &current
        {
            attempts
                .entry(name.clone())
                .or_default()
                .push(path.to_string());
        }
    }
    attempts
}

#[test]
fn search_attempts_are_what_ld_so_reports_it_tried() {
    if !can_trace() {
        return;
    }
    let built = build();
    let (spans, sight) = traced(&built, |_| {});
    let sight = sight.expect("the run says what the loader trace saw");
    if sight.starts_with("not traced") {
        skip(&format!("the loader could not be probed here: {sight}"));
        return;
    }
    let expected = ld_debug_attempts(&built);
    for name in ["libcsa.so", "libcsb.so"] {
        let want = &expected[name];
        // The program's RUNPATH is tried in order, the missing directories
        // first (after LD_LIBRARY_PATH, which the test harness sets).
        if name == "libcsb.so" {
            let at = |dir: &Path| {
                want.iter()
                    .position(|p| p.starts_with(dir.to_str().unwrap()))
            };
            let order: Vec<Option<usize>> = built.runpath.iter().map(|d| at(d)).collect();
            assert!(order.iter().all(Option::is_some), "{want:?}");
            assert!(order.windows(2).all(|w| w[0] < w[1]), "{want:?}");
        }
        let search = spans
            .iter()
            .find(|s| s.phase == LoaderPhase::Search && s.detail.as_deref() == Some(name))
            .unwrap_or_else(|| panic!("no search span for {name}: {spans:#?}"));
        let tried: Vec<&LoaderSpan> = spans
            .iter()
            .filter(|s| {
                s.phase == LoaderPhase::Open
                    && s.pid == search.pid
                    && s.t_begin_ns >= search.t_begin_ns
                    && s.t_end_ns.unwrap() <= search.t_end_ns.unwrap()
            })
            .collect();
        let paths: Vec<&str> = tried.iter().map(|s| s.detail.as_deref().unwrap()).collect();
        let want: Vec<&str> = want.iter().map(String::as_str).collect();
        assert_eq!(paths, want, "open attempts for {name}");
        // Every attempt but the last failed with ENOENT; the last opened it.
        for attempt in &tried[..tried.len() - 1] {
            assert_eq!(
                attempt.result,
                Some(-i64::from(libc::ENOENT)),
                "{attempt:?}"
            );
            assert_eq!(attempt.depth, search.depth + 1);
        }
        assert!(tried.last().unwrap().result.unwrap() >= 0);
        assert_eq!(
            search.object.as_deref(),
            Some(built.lib_a.with_file_name(name).to_str().unwrap())
        );
    }
}

#[test]
fn objects_initializers_dlopen_and_entry_match_the_build() {
    if !can_trace() {
        return;
    }
    let built = build();
    let log = built.dir.path().join("init.log");
    let (spans, sight) = traced(&built, |_| {});
    if sight.as_deref().is_none_or(|s| s.starts_with("not traced")) {
        skip(&format!("the loader could not be probed here: {sight:?}"));
        return;
    }
    let main_pid = spans
        .iter()
        .find(|s| s.phase == LoaderPhase::Entry)
        .unwrap()
        .pid;
    let mine: Vec<&LoaderSpan> = spans.iter().filter(|s| s.pid == main_pid).collect();

    // Relocated: the program, each library ldd lists, and the dlopen'd one.
    let ldd = run_ok(Command::new("ldd").arg(&built.main));
    let mut expected: BTreeSet<PathBuf> = String::from_utf8_lossy(&ldd.stdout)
        .lines()
        .filter_map(|l| {
            let path = l.split("=>").last()?.split_whitespace().next()?;
            path.starts_with('/')
                .then(|| std::fs::canonicalize(path).unwrap())
        })
        .collect();
    expected.insert(std::fs::canonicalize(&built.lib_c).unwrap());
    let relocated: BTreeSet<PathBuf> = mine
        .iter()
        .filter(|s| s.phase == LoaderPhase::Relocate)
        .filter_map(|s| s.object.as_deref().filter(|o| !o.is_empty()))
        .map(|o| std::fs::canonicalize(o).unwrap())
        .collect();
    assert_eq!(relocated, expected);
    let main_relocations = mine
        .iter()
        .filter(|s| s.phase == LoaderPhase::Relocate && s.object.as_deref() == Some(""))
        .count();
    assert_eq!(main_relocations, 1);

    // libcsa's initializers: DT_INIT first, then every DT_INIT_ARRAY entry
    // (readelf's count), named by nm, in the order they logged themselves.
    let lib_a = built.lib_a.to_str().unwrap();
    let initializers: Vec<&&LoaderSpan> = mine
        .iter()
        .filter(|s| s.phase == LoaderPhase::Initializer && s.object.as_deref() == Some(lib_a))
        .collect();
    let array_entries = init_array_entries(&built.lib_a);
    assert_eq!(initializers.len(), 1 + array_entries);
    assert_eq!(initializers[0].detail.as_deref(), Some("DT_INIT"));
    for (i, span) in initializers[1..].iter().enumerate() {
        assert_eq!(
            span.detail.as_deref(),
            Some(format!("DT_INIT_ARRAY[{i}]").as_str())
        );
    }
    let names = nm_addresses(&built.lib_a);
    let called: Vec<String> = initializers
        .iter()
        .filter_map(|s| names.get(&(s.target.unwrap() - s.base.unwrap())).cloned())
        .filter(|n| n.starts_with("a_"))
        .collect();
    let logged: Vec<String> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    assert_eq!(called, logged);
    assert_eq!(logged, ["a_dt_init", "a_first", "a_second", "a_third"]);

    // The failed dlopen returned nothing; the other one returned libcsc.
    let dlopens: Vec<&&LoaderSpan> = mine
        .iter()
        .filter(|s| s.phase == LoaderPhase::Dlopen)
        .collect();
    assert_eq!(dlopens.len(), 2, "{dlopens:#?}");
    assert_eq!(
        dlopens[0].detail.as_deref(),
        Some("libcs_missing_for_test.so")
    );
    assert_eq!(dlopens[0].result, Some(0));
    assert_eq!(dlopens[1].result, Some(1));
    assert_eq!(dlopens[1].object.as_deref(), built.lib_c.to_str());

    // The entry is the program's e_entry, moved by its load bias.
    let entry = mine.iter().find(|s| s.phase == LoaderPhase::Entry).unwrap();
    let bias = mine
        .iter()
        .find(|s| s.phase == LoaderPhase::Relocate && s.object.as_deref() == Some(""))
        .and_then(|s| s.base)
        .unwrap();
    assert_eq!(entry.target.unwrap() - bias, elf_entry(&built.main));
    // rtld's start ends before the entry and after the initial loads.
    let start = mine.iter().find(|s| s.phase == LoaderPhase::Start).unwrap();
    assert!(start.t_end_ns.unwrap() <= entry.t_begin_ns);
    let first_load = mine.iter().find(|s| s.phase == LoaderPhase::Load).unwrap();
    assert!(start.t_begin_ns <= first_load.t_begin_ns);
}

#[test]
fn no_uprobe_or_instance_is_left_behind() {
    if !can_trace() {
        return;
    }
    let built = build();
    let (spans, _) = traced(&built, |o| o.loader_lookups = true);
    let _one = TRACING.lock().unwrap_or_else(|e| e.into_inner());
    let group = format!("coldstart_{}", std::process::id());
    let defined = std::fs::read_to_string("/sys/kernel/tracing/uprobe_events").unwrap_or_default();
    assert!(!defined.contains(&group), "left behind: {defined}");
    let instances = std::fs::read_dir("/sys/kernel/tracing/instances").unwrap();
    for entry in instances.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        assert!(
            !name.starts_with(&format!("coldstart-{}", std::process::id())),
            "instance {name} left behind"
        );
    }
    // With lookups counted, libcsb's relocation looked its symbols up.
    let lib_b = built.lib_a.with_file_name("libcsb.so");
    let lookups = spans
        .iter()
        .find(|s| s.phase == LoaderPhase::Relocate && s.object.as_deref() == lib_b.to_str())
        .and_then(|s| s.lookups);
    assert!(lookups.is_some_and(|n| n >= 1), "{lookups:?}");
}

#[test]
fn a_static_program_is_traced_and_says_the_loader_was_not() {
    if !can_trace() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("s.c");
    std::fs::write(&source, "int main(void) { return 0; }\n").unwrap();
    let program = dir.path().join("s");
    let built = Command::new("cc")
        .args(["-static", "-o"])
        .arg(&program)
        .arg(&source)
        .status()
        .is_ok_and(|s| s.success());
    if !built {
        skip("cc -static failed (no static libc here)");
        return;
    }
    let db = dir.path().join("s.db");
    let mut profile = Profile::create_or_open(&db).unwrap();
    let options = TraceOptions {
        cache: CacheMode::Selective,
        loader: true,
        ..TraceOptions::cold(
            LaunchSpec::quiet(vec![program.clone().into()], Duration::from_secs(30)).unwrap(),
        )
    };
    let mut warnings = Vec::new();
    let _one = TRACING.lock().unwrap_or_else(|e| e.into_inner());
    let summary = trace(
        &mut profile,
        &options,
        &AtomicBool::new(false),
        |stage| {
            if let coldstart_record::trace::Stage::Warning(w) = stage {
                warnings.push(w)
            }
        },
        |_| {},
    )
    .unwrap();
    assert_eq!(summary.exit.code, Some(0));
    assert!(summary.events > 0);
    let run = profile.run(Some(summary.run)).unwrap();
    let sight = run.loader.unwrap();
    assert!(
        sight.starts_with("not traced") && sight.contains("statically linked"),
        "{sight}"
    );
    assert!(
        warnings.iter().any(|w| w.contains("statically linked")),
        "{warnings:?}"
    );
    assert!(profile.loader_spans(summary.run).unwrap().is_empty());
}

/// Virtual address to name of every symbol nm lists as defined.
fn nm_addresses(path: &Path) -> BTreeMap<u64, String> {
    let output = run_ok(Command::new("nm").arg("--defined-only").arg(path));
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|l| {
            let mut fields = l.split_whitespace();
            let address = u64::from_str_radix(fields.next()?, 16).ok()?;
            let name = fields.nth(1)?;
            Some((address, name.to_string()))
        })
        .collect()
}

/// DT_INIT_ARRAYSZ / 8, from readelf.
fn init_array_entries(path: &Path) -> usize {
    let output = run_ok(Command::new("readelf").args(["-W", "-d"]).arg(path));
    let text = String::from_utf8_lossy(&output.stdout);
    let line = text.lines().find(|l| l.contains("(INIT_ARRAYSZ)")).unwrap();
    let bytes: usize = line
        .split_whitespace()
        .rev()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    bytes / 8
}

/// The ELF header's entry point, from readelf.
fn elf_entry(path: &Path) -> u64 {
    let output = run_ok(Command::new("readelf").arg("-h").arg(path));
    let text = String::from_utf8_lossy(&output.stdout);
    let line = text
        .lines()
        .find(|l| l.contains("Entry point address"))
        .unwrap();
    let hex = line.rsplit("0x").next().unwrap().trim();
    u64::from_str_radix(hex, 16).unwrap()
}
