//! Function traces end to end: C programs with a known call sequence
//! (tests/functions/*.c) are built with the instrumentation runtime, run,
//! and their records read back and named. The expected first-call order
//! and counts come from the programs' fixed structure; `nm` and `readelf`
//! place the symbols independently of coldstart's own ELF reader.

use coldstart_analyze::startup::called_symbols;
use coldstart_binary::OffsetIndex;
use coldstart_profile::{CacheMode, Profile, RunStart};
use coldstart_record::functions::{
    Dump, FunctionTrace, RuntimeFiles, Symbolizer, build_runtime, read_dump, read_dump_dir,
};
use coldstart_testkit::skip;
use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const SOURCES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/functions");
const CLANG: &str = "/usr/lib/llvm-19/bin/clang";

fn runs(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// A way of instrumenting: compiler and flags.
struct Toolchain {
    cc: &'static str,
    flags: &'static [&'static str],
    /// The hook gets the function's start (gcc's), not an address inside
    /// it (clang's bare hook).
    exact_starts: bool,
}

/// gcc -finstrument-functions, and clang-19's bare entry hook where it is
/// installed. None (after saying SKIPPED) without the tools the tests need.
fn toolchains() -> Option<Vec<Toolchain>> {
    for tool in ["gcc", "ar", "nm", "readelf"] {
        if !runs(tool) {
            skip(&format!(
                "{tool} not installed (apt-get install gcc binutils)"
            ));
            return None;
        }
    }
    let mut chains = vec![Toolchain {
        cc: "gcc",
        flags: &["-finstrument-functions"],
        exact_starts: true,
    }];
    if Path::new(CLANG).exists() {
        chains.push(Toolchain {
            cc: CLANG,
            flags: &["-finstrument-function-entry-bare"],
            exact_starts: false,
        });
    } else {
        skip(&format!(
            "{CLANG} not installed (apt-get install clang-19): the bare-hook half"
        ));
    }
    Some(chains)
}

fn runtime(dir: &Path) -> RuntimeFiles {
    build_runtime(&dir.join("runtime")).unwrap_or_else(|e| panic!("{e}"))
}

fn compile(cc: &str, args: &[&str], out: &Path) {
    let output = Command::new(cc)
        .args(args)
        .arg("-o")
        .arg(out)
        .output()
        .unwrap_or_else(|e| panic!("{cc}: {e}"));
    assert!(
        output.status.success(),
        "{cc} {args:?} failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

fn s(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// program.c linked with the runtime's archive.
fn build_program(chain: &Toolchain, rt: &RuntimeFiles, dir: &Path) -> PathBuf {
    let exe = dir.join(format!("program-{}", chain.exact_starts));
    let source = format!("{SOURCES}/program.c");
    let include = s(rt.header.parent().unwrap());
    let mut args = vec![
        "-O2",
        "-g",
        "-I",
        include,
        &source,
        s(&rt.static_lib),
        "-pthread",
    ];
    args.extend(chain.flags);
    compile(chain.cc, &args, &exe);
    exe
}

/// The ground truth from `nm` and `readelf`: each defined function's file
/// offset (its address moved by its LOAD segment) and size.
fn nm_offsets(binary: &Path) -> HashMap<String, (u64, u64)> {
    coldstart_testkit::nm_symbols(binary)
        .into_iter()
        .filter(|s| matches!(s.kind, 'T' | 't'))
        // Unsized crt stubs (__do_global_dtors_aux) are no functions to place.
        .filter_map(|s| Some((s.name, (s.offset, s.size?))))
        .collect()
}

/// (name, calls) of one process, in first-call order.
fn sequence(trace: &FunctionTrace, pid: i32) -> Vec<(String, u64)> {
    trace
        .functions
        .iter()
        .filter(|f| f.pid == pid)
        .map(|f| {
            let name = f.symbol.as_ref().map_or("?", |s| s.raw_name.as_str());
            (name.to_string(), f.calls)
        })
        .collect()
}

fn expected(pairs: &[(&str, u64)]) -> Vec<(String, u64)> {
    pairs.iter().map(|(n, c)| (n.to_string(), *c)).collect()
}

/// main and the f0..f9 loop every mode of program.c starts with.
fn prologue(run_leaves_calls: u64) -> Vec<(String, u64)> {
    let mut v = expected(&[("main", 1), ("run_leaves", run_leaves_calls)]);
    v.extend((0..10).map(|i| (format!("f{i}"), i + 1)));
    v
}

/// Every named function of `binary` in the trace sits where nm says:
/// the symbol exactly, the recorded address at its start (gcc) or inside.
fn check_against_nm(trace: &FunctionTrace, binary: &Path, chain: &Toolchain) {
    let truth = nm_offsets(binary);
    let module = trace.module_by_path(binary).expect("module recorded");
    assert_eq!(trace.modules[module].unreadable, None);
    assert_eq!(trace.modules[module].unnamed, 0);
    for f in trace.functions.iter().filter(|f| f.module == module) {
        let symbol = f.symbol.as_ref().unwrap();
        let (offset, size) = truth[&symbol.raw_name];
        assert_eq!((symbol.offset, symbol.size), (offset, size), "{symbol:?}");
        if chain.exact_starts {
            assert_eq!(f.recorded_offset, offset, "{}", symbol.raw_name);
        } else {
            assert!(
                (offset..offset + size).contains(&f.recorded_offset),
                "{}",
                symbol.raw_name
            );
        }
    }
}

fn run_ok(command: &mut Command) {
    let output = command.output().unwrap();
    assert!(
        output.status.success(),
        "{command:?}: {}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Builds program.c with each toolchain and hands it over with an empty
/// record directory; nothing when a tool is missing (after SKIPPED).
fn for_each_program(test: impl Fn(&Toolchain, &Path, &Path)) {
    let Some(chains) = toolchains() else { return };
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime(dir.path());
    for chain in &chains {
        let exe = build_program(chain, &rt, dir.path());
        let out = dir.path().join(format!("out-{}", chain.exact_starts));
        std::fs::create_dir(&out).unwrap();
        test(chain, &exe, &out);
    }
}

#[test]
fn threads_and_a_forked_child_record_their_own_first_calls() {
    for_each_program(|chain, exe, out| {
        run_ok(Command::new(exe).env("COLDSTART_FUNCTIONS_DIR", out));

        let dumps = read_dump_dir(out).unwrap();
        assert_eq!(dumps.len(), 2, "{}: parent and child", chain.cc);
        let child = dumps
            .iter()
            .find(|d| dumps.iter().any(|p| p.pid == d.ppid))
            .expect("one record is the other's child");
        let parent = dumps.iter().find(|d| d.pid != child.pid).unwrap();
        let trace = Symbolizer::new().symbolize(&dumps);

        let mut parent_calls = prologue(2);
        parent_calls.extend(expected(&[
            ("thread_main", 1),
            ("t0", 1),
            ("t1", 2),
            ("t2", 3),
            ("p0", 1),
        ]));
        assert_eq!(sequence(&trace, parent.pid), parent_calls, "{}", chain.cc);
        assert_eq!(
            sequence(&trace, child.pid),
            expected(&[("c0", 2), ("c1", 1)]),
            "{}: the child records only what it called after the fork",
            chain.cc
        );
        assert!(child.start_ns >= parent.start_ns);
        for dump in &dumps {
            assert_eq!((dump.dropped, dump.missed), (0, 0));
            let seqs: Vec<u64> = dump.functions.iter().map(|f| f.first_seq).collect();
            assert_eq!(seqs, (1..=dump.functions.len() as u64).collect::<Vec<_>>());
            let times: Vec<i64> = dump.functions.iter().map(|f| f.first_t_ns).collect();
            assert!(times.is_sorted(), "first calls in time order: {times:?}");
            assert!(times[0] >= dump.start_ns);
        }
        check_against_nm(&trace, exe, chain);
        round_trip_through_a_profile(&trace, parent, out);
    });
}

/// The trace as profile rows: the program's file, and the same sequence.
fn round_trip_through_a_profile(trace: &FunctionTrace, parent: &Dump, dir: &Path) {
    let path = dir.join("profile.db");
    let mut profile = Profile::create_or_open(&path).unwrap();
    let run = profile
        .begin_run(&RunStart {
            argv: vec!["program".into()],
            cwd: "/".into(),
            cache_mode: CacheMode::Warm,
            started_at_unix_ns: 0,
            kernel: String::new(),
            page_size: 4096,
            read_ahead_kb: None,
            fault_around_bytes: None,
            uid: 0,
            gid: 0,
            tool_version: "test".into(),
        })
        .unwrap();
    let rows = trace.profile_rows(parent.start_ns);
    assert_eq!(rows.left_out, 0);
    let ids = profile
        .write_functions(run, &rows.files, &rows.functions)
        .unwrap();
    let stored = profile.functions(run).unwrap();
    let names: Vec<(String, u64)> = stored
        .iter()
        .filter(|f| f.pid == parent.pid)
        .map(|f| (f.symbol.clone().unwrap(), f.calls))
        .collect();
    assert_eq!(names, sequence(trace, parent.pid));
    assert!(
        stored
            .iter()
            .all(|f| f.file_id == ids[0] && f.first_t_ns >= 0)
    );
}

#[test]
fn a_dump_on_request_holds_the_calls_made_so_far() {
    for_each_program(|chain, exe, out| {
        run_ok(
            Command::new(exe)
                .arg("dump")
                .env("COLDSTART_FUNCTIONS_DIR", out),
        );
        let mid = read_dump(&out.join("mid.tsv")).unwrap();
        let at_exit = read_dump_dir(out).unwrap();
        assert_eq!(at_exit.len(), 1);
        assert_eq!(mid.pid, at_exit[0].pid);
        let trace = Symbolizer::new().symbolize(std::slice::from_ref(&mid));
        assert_eq!(sequence(&trace, mid.pid), prologue(1), "{}", chain.cc);
        let trace = Symbolizer::new().symbolize(&at_exit);
        let mut all = prologue(1);
        all.extend(expected(&[("g0", 1), ("g1", 2)]));
        assert_eq!(sequence(&trace, mid.pid), all, "{}", chain.cc);
        assert_eq!(
            mid.functions[..],
            at_exit[0].functions[..mid.functions.len()],
            "the earlier calls are unchanged"
        );
    });
}

#[test]
fn the_chosen_signal_dumps_a_running_program() {
    for_each_program(|chain, exe, out| {
        let mut child = Command::new(exe)
            .arg("signal")
            .env("COLDSTART_FUNCTIONS_DIR", out)
            .env("COLDSTART_FUNCTIONS_SIGNAL", "USR2")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line, "ready\n");
        let pid = child.id() as i32;
        // SAFETY: a signal to our own child.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGUSR2) }, 0);
        let record = out.join(format!("functions.{pid}.tsv"));
        let deadline = Instant::now() + Duration::from_secs(20);
        while !record.exists() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(
            child.try_wait().unwrap().is_none(),
            "the signal must not stop the program"
        );
        // No exit dump: the record can only have come from the signal.
        child.kill().unwrap();
        child.wait().unwrap();
        let dump = read_dump(&record).unwrap();
        let trace = Symbolizer::new().symbolize(&[dump]);
        assert_eq!(sequence(&trace, pid), prologue(1), "{}", chain.cc);
    });
}

#[test]
fn an_instrumented_library_in_a_plain_program_maps_onto_its_plain_build() {
    let Some(chains) = toolchains() else { return };
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime(dir.path());
    let source = format!("{SOURCES}/library.c");
    let plain_dir = dir.path().join("plain");
    std::fs::create_dir(&plain_dir).unwrap();
    let plain = plain_dir.join("libcalls.so");
    compile("gcc", &["-O2", "-fPIC", "-shared", &source], &plain);
    let plain_index = OffsetIndex::from_path(&plain).unwrap();
    let plain_truth = nm_offsets(&plain);
    for chain in &chains {
        let lib_dir = dir.path().join(format!("inst-{}", chain.exact_starts));
        std::fs::create_dir(&lib_dir).unwrap();
        let lib = lib_dir.join("libcalls.so");
        let mut args = vec!["-O2", "-fPIC", "-shared", &source];
        args.extend(chain.flags);
        compile(chain.cc, &args, &lib);
        let host = lib_dir.join("host");
        let rpath = format!("-Wl,-rpath,{}", s(&lib_dir));
        let host_source = format!("{SOURCES}/host.c");
        // glibc has no-op gcc hooks but no bare one: the link must leave it
        // to the preloaded runtime.
        let host_args = [
            "-O2",
            &host_source,
            "-L",
            s(&lib_dir),
            "-lcalls",
            &rpath,
            "-Wl,--allow-shlib-undefined",
        ];
        compile("gcc", &host_args, &host);
        let out = lib_dir.join("out");
        std::fs::create_dir(&out).unwrap();
        run_ok(
            Command::new(&host)
                .env("LD_PRELOAD", &rt.shared)
                .env("COLDSTART_FUNCTIONS_DIR", &out),
        );
        let dumps = read_dump_dir(&out).unwrap();
        assert_eq!(dumps.len(), 1);
        let trace = Symbolizer::new().symbolize(&dumps);
        // gcc records an inlined function under its out-of-line copy;
        // clang's bare hook is placed after inlining.
        let mut calls = expected(&[("lib_entry", 1), ("l0", 1)]);
        if chain.exact_starts {
            calls.push(("helper".into(), 1));
        }
        calls.extend((1..5).map(|i| (format!("l{i}"), i + 1)));
        assert_eq!(sequence(&trace, dumps[0].pid), calls, "{}", chain.cc);
        check_against_nm(&trace, &lib, chain);

        // Placed in the plain build the way `coldstart order` places them:
        // through a profile, by name.
        let (profile, run) = profile_of(&trace, &dumps[0], &lib_dir);
        // The traced copy: the plain one never ran.
        let module = globset::Glob::new("**/libcalls.so")
            .unwrap()
            .compile_matcher();
        let called = called_symbols(&profile, run, &plain_index, &module).unwrap();
        assert_eq!(called.processes.len(), 1);
        let placed: Vec<(&str, u64)> = called.processes[0]
            .1
            .iter()
            .map(|c| (c.raw_name.as_str(), c.offset))
            .collect();
        let want: Vec<(&str, u64)> = ["lib_entry", "l0", "l1", "l2", "l3", "l4"]
            .into_iter()
            .map(|name| (name, plain_truth[name].0))
            .collect();
        assert_eq!(placed, want, "{}: plain offsets from nm", chain.cc);
        // helper is inlined away in the plain build.
        let missing = u64::from(chain.exact_starts);
        assert_eq!(called.not_in_binary, missing, "{}", chain.cc);
        assert!(called.ambiguous.is_empty());
        assert!(called.processes[0].1.iter().all(|c| !c.by_base_name));
    }
}

/// The trace written into a new profile in `dir`, as `coldstart trace`
/// writes it; the profile and its run.
fn profile_of(trace: &FunctionTrace, dump: &Dump, dir: &Path) -> (Profile, i64) {
    let mut profile = Profile::create_or_open(&dir.join("profile.db")).unwrap();
    let run = profile
        .begin_run(&RunStart {
            argv: vec!["host".into()],
            cwd: "/".into(),
            cache_mode: CacheMode::Warm,
            started_at_unix_ns: 0,
            kernel: String::new(),
            page_size: 4096,
            read_ahead_kb: None,
            fault_around_bytes: None,
            uid: 0,
            gid: 0,
            tool_version: "test".into(),
        })
        .unwrap();
    let rows = trace.profile_rows(dump.start_ns);
    profile
        .write_functions(run, &rows.files, &rows.functions)
        .unwrap();
    (profile, run)
}

#[test]
fn a_full_table_counts_the_calls_it_could_not_record() {
    let Some(chains) = toolchains() else { return };
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime(dir.path());
    // More functions than the smallest table holds (1024 slots, filled to
    // three quarters): main, then f0..f999, each called twice.
    let mut c = String::from("static volatile int sink;\n");
    for i in 0..1000 {
        c += &format!("__attribute__((noinline)) void f{i}(void) {{ sink += {i}; }}\n");
    }
    c += "int main(void) {\n";
    for i in 0..1000 {
        c += &format!("f{i}(); f{i}();\n");
    }
    c += "return 0;\n}\n";
    let source = dir.path().join("many.c");
    std::fs::write(&source, c).unwrap();
    let chain = &chains[0];
    let exe = dir.path().join("many");
    let mut args = vec!["-O1", s(&source), s(&rt.static_lib), "-pthread"];
    args.extend(chain.flags);
    compile(chain.cc, &args, &exe);
    let out = dir.path().join("out");
    std::fs::create_dir(&out).unwrap();
    run_ok(
        Command::new(&exe)
            .env("COLDSTART_FUNCTIONS_DIR", &out)
            .env("COLDSTART_FUNCTIONS_CAPACITY", "1000"),
    );
    let dumps = read_dump_dir(&out).unwrap();
    let dump = &dumps[0];
    assert_eq!(dump.capacity, 768);
    assert_eq!(dump.functions.len(), 768, "main and f0..f766");
    // f767..f999 found no room, on each of their two calls.
    assert_eq!(dump.dropped, (1000 - 767) * 2);
    let trace = Symbolizer::new().symbolize(&dumps);
    let last = trace.functions.last().unwrap().symbol.as_ref().unwrap();
    assert_eq!((last.raw_name.as_str(), trace.dropped()), ("f766", 466));
}
