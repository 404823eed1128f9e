//! `coldstart trace --blocks` and `coldstart order --clusters` on C programs
//! built with clang's -fbasic-block-address-map. Oracles: valgrind's
//! instruction trace (lackey) for which blocks ran and in what order, the
//! program's source for what ran in which process, and nm and the relinked
//! build's own block map for the split layout.

use coldstart_binary::block_map::{BlockMap, discover_block_map_path, read_block_map_path};
use coldstart_profile::Profile;
use coldstart_testkit::{run_ok, skip};
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::Command;

fn coldstart() -> Command {
    Command::new(env!("CARGO_BIN_EXE_coldstart"))
}

fn have(tool: &str) -> bool {
    Command::new(tool)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// clang-19 (and the other tools named), or false after a skip.
fn tools(extra: &[&str]) -> bool {
    for tool in std::iter::once(&"clang-19").chain(extra) {
        if !have(tool) {
            skip(&format!("{tool} is not installed"));
            return false;
        }
    }
    true
}

fn temp_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("coldstart-blocks-test")
        .tempdir()
        .expect("temp dir")
}

/// The order main calls them in.
const CALLED: [&str; 5] = ["f3", "f0", "f4", "f2", "f1"];

/// A single-threaded program whose blocks depend only on its code: each
/// `fN` takes branches by its argument, and `never` is never called.
fn simple_source() -> String {
    let mut text = String::from(
        "#include <stdio.h>\n\
         volatile int sink;\n\
         __attribute__((noinline)) void never(int x) { for (int i = 0; i < x; i++) sink += i; puts(\"never\"); }\n",
    );
    for n in 0..CALLED.len() {
        text.push_str(&format!(
            "__attribute__((noinline)) int f{n}(int x) {{\n\
             \x20 int s = 0;\n\
             \x20 for (int i = 0; i < x; i++) {{ if (i % 3 == 0) s += i * {n}; else if (i > 1000000) {{ puts(\"big\"); s -= 1; }} else s ^= i; }}\n\
             \x20 if (x > 100000) never(x);\n\
             \x20 return s;\n\
             }}\n"
        ));
    }
    text.push_str("int main(int argc, char **argv) {\n  int s = 0;\n");
    for name in CALLED {
        text.push_str(&format!("  s += {name}(argc + 6);\n"));
    }
    text.push_str(
        "  if (argc > 50) never(argc);\n  printf(\"result %d\\n\", s);\n  return 0;\n}\n",
    );
    text
}

fn clang(dir: &Path, source: &str, out: &str, flags: &[&str]) -> PathBuf {
    let src = dir.join(format!("{out}.c"));
    std::fs::write(&src, source).unwrap();
    let path = dir.join(out);
    run_ok(
        Command::new("clang-19")
            .args(flags)
            .arg(&src)
            .arg("-o")
            .arg(&path),
    );
    path
}

/// `coldstart trace --blocks` of `program` into `db`; with `discover`, that
/// file's blocks are found by disassembly.
fn record_blocks(db: &Path, program: &Path, discover: Option<&Path>) {
    let mut command = coldstart();
    command.args(["trace", "--blocks", "-o"]).arg(db);
    if let Some(file) = discover {
        command.arg("--discover").arg(file);
    }
    run_ok(command.arg("--").arg(program));
}

/// `coldstart order --clusters` of `binary` for `linker`: the split file
/// and the order written, and the `--json` report returned.
fn split_order(db: &Path, binary: &Path, linker: &str, split: &Path, order: &Path) -> Value {
    let ordered = run_ok(
        coldstart()
            .arg("order")
            .arg(db)
            .arg("--binary")
            .arg(binary)
            .args(["--linker", linker, "--json", "--clusters"])
            .arg(split)
            .arg("-o")
            .arg(order),
    );
    serde_json::from_slice(&ordered.stdout).unwrap()
}

/// The lines of an order file.
fn order_lines(order: &Path) -> Vec<String> {
    std::fs::read_to_string(order)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

/// Block runs of `file_name` in the newest block run of `db`: (pid,
/// function symbol, bb id, address) in first-run order per process.
fn traced_blocks(db: &Path, file_name: &str) -> Vec<(i32, String, u32, u64)> {
    let profile = Profile::open(db).unwrap();
    let run = profile.block_run(None).unwrap();
    let files = profile.block_files(run.id).unwrap();
    let wanted: HashSet<u32> = files
        .iter()
        .filter(|f| f.path.file_name().is_some_and(|n| n == file_name))
        .map(|f| f.file)
        .collect();
    profile
        .blocks(run.id)
        .unwrap()
        .into_iter()
        .filter(|b| wanted.contains(&b.file))
        .map(|b| (b.pid, b.symbol.unwrap_or_default(), b.bb_id, b.address))
        .collect()
}

/// The first execution of each block start of `map`, in order, from
/// valgrind's instruction trace of `program`.
fn lackey_first_runs(program: &Path, map: &BlockMap, dir: &Path) -> Vec<u64> {
    let starts: HashSet<u64> = map
        .functions
        .iter()
        .flat_map(|f| &f.ranges)
        .flat_map(|r| &r.blocks)
        .filter(|b| b.size > 0)
        .map(|b| b.address)
        .collect();
    let log = dir.join("lackey.log");
    run_ok(
        Command::new("valgrind")
            .args(["--tool=lackey", "--trace-mem=yes"])
            .arg(format!("--log-file={}", log.display()))
            .arg(program),
    );
    let text = std::fs::read_to_string(&log).unwrap();
    let mut seen = HashSet::new();
    let mut order = Vec::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("I  ") else {
            continue;
        };
        let Some(address) = rest
            .split(',')
            .next()
            .and_then(|a| u64::from_str_radix(a.trim(), 16).ok())
        else {
            continue;
        };
        if starts.contains(&address) && seen.insert(address) {
            order.push(address);
        }
    }
    order
}

#[test]
fn blocks_and_their_order_match_valgrinds_instruction_trace() {
    if !tools(&["valgrind"]) {
        return;
    }
    let dir = temp_dir();
    // Not position-independent: valgrind runs it at its link addresses.
    let flags = ["-O2", "-fno-pie", "-no-pie", "-fbasic-block-address-map"];
    check_against_lackey(dir.path(), "simple", &flags);
}

/// lld packs the segments' pages: the first page of the code segment is
/// also mapped, read-only, as the end of the segment before it, at another
/// address. Breakpoints must go to the code's own mapping.
#[test]
fn blocks_of_an_lld_link_match_valgrinds_instruction_trace() {
    if !tools(&["valgrind"]) || lld().is_none() {
        return;
    }
    let dir = temp_dir();
    let flags = [
        "-O2",
        "-fno-pie",
        "-no-pie",
        "-fbasic-block-address-map",
        "-fuse-ld=lld",
    ];
    check_against_lackey(dir.path(), "simple-lld", &flags);
}

/// A gcc build has no block map: its blocks are found by disassembly
/// (`--discover`), and the breakpoints on them see what valgrind sees.
#[test]
fn discovered_blocks_of_a_gcc_build_match_valgrinds_instruction_trace() {
    if !tools(&["valgrind", "gcc"]) {
        return;
    }
    let dir = temp_dir();
    let program = gcc(
        dir.path(),
        &simple_source(),
        "simple-gcc",
        &["-O2", "-no-pie"],
    );
    check_program_against_lackey(dir.path(), &program, "simple-gcc", true);
}

fn gcc(dir: &Path, source: &str, out: &str, flags: &[&str]) -> PathBuf {
    let src = dir.join(format!("{out}.c"));
    std::fs::write(&src, source).unwrap();
    let path = dir.join(out);
    run_ok(
        Command::new("gcc")
            .args(flags)
            .arg(&src)
            .arg("-o")
            .arg(&path),
    );
    path
}

fn check_against_lackey(dir: &Path, name: &str, flags: &[&str]) {
    let program = clang(dir, &simple_source(), name, flags);
    check_program_against_lackey(dir, &program, name, false);
}

fn check_program_against_lackey(dir: &Path, program: &Path, name: &str, discover: bool) {
    let plain_output = run_ok(&mut Command::new(program)).stdout;
    let db = dir.join("b.db");
    let mut trace = coldstart();
    trace.args(["trace", "--blocks", "--json", "-o"]).arg(&db);
    if discover {
        trace.arg("--discover").arg(program);
    }
    let traced = run_ok(trace.arg("--").arg(program));
    let summary: Value = serde_json::from_slice(&traced.stdout).unwrap();
    assert_eq!(summary["end_reason"], "exited", "{summary:#}");
    assert_eq!(summary["exit_code"], 0, "{summary:#}");

    let map = if discover {
        discover_block_map_path(program).unwrap()
    } else {
        read_block_map_path(program).unwrap().expect("a block map")
    };
    let oracle = lackey_first_runs(program, &map, dir);
    let blocks = traced_blocks(&db, name);
    let ours: Vec<u64> = blocks.iter().map(|b| b.3).collect();
    assert!(oracle.len() > 20, "valgrind saw {} blocks", oracle.len());
    assert_eq!(ours, oracle, "first runs, in order");
    // `never` has blocks; none ran.
    assert!(blocks.iter().all(|b| b.1 != "never"));
    assert!(
        map.functions
            .iter()
            .any(|f| f.names.contains(&"never".to_string()))
    );
    // The program's own output went through unchanged (to stderr, beside
    // the JSON).
    assert!(
        String::from_utf8_lossy(&traced.stderr).contains(&*String::from_utf8_lossy(&plain_output)),
        "{}",
        String::from_utf8_lossy(&traced.stderr)
    );
}

/// A program whose start runs code in a library's constructor, a library
/// it opens with dlopen, a thread and a forked child.
const MAIN_SOURCE: &str = r#"
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>
extern int needed_value(int);
volatile int sink;
__attribute__((noinline)) int thread_only(int x) { for (int i = 0; i < x; i++) sink += i; return sink; }
__attribute__((noinline)) int child_only(int x) { int s = 0; for (int i = 0; i < x; i++) s += i & 1 ? i : -i; return s; }
__attribute__((noinline)) void never_called(void) { puts("never"); }
static void *thread_main(void *arg) { thread_only(5); return arg; }
int main(int argc, char **argv) {
  int s = needed_value(argc);
  pthread_t t;
  if (pthread_create(&t, 0, thread_main, 0) != 0 || pthread_join(t, 0) != 0) return 2;
  void *h = dlopen(argv[1], RTLD_NOW);
  if (!h) { fprintf(stderr, "%s\n", dlerror()); return 3; }
  int (*dl_value)(int) = (int (*)(int))dlsym(h, "dl_value");
  s += dl_value(3);
  pid_t child = fork();
  if (child == 0) _exit(child_only(9) & 0x7f);
  int status = 0;
  waitpid(child, &status, 0);
  s += WEXITSTATUS(status);
  if (argc > 50) never_called();
  printf("result %d\n", s);
  return 0;
}
"#;

const NEEDED_SOURCE: &str = r#"
volatile int needed_state;
__attribute__((noinline, constructor)) void needed_init(void) { needed_state = 41; }
__attribute__((noinline)) int needed_value(int x) { return needed_state + x; }
__attribute__((noinline)) int needed_unused(int x) { return x * needed_state; }
"#;

const DL_SOURCE: &str = r#"
__attribute__((noinline)) int dl_value(int x) { return x * 2; }
__attribute__((noinline)) int dl_unused(int x) { return x * 3; }
"#;

#[test]
fn block_traces_follow_libraries_threads_and_forked_children() {
    if !tools(&[]) {
        return;
    }
    let dir = temp_dir();
    let flags = ["-O2", "-fbasic-block-address-map"];
    for (name, source) in [
        ("libneeded.so", NEEDED_SOURCE),
        ("libdlopened.so", DL_SOURCE),
    ] {
        std::fs::write(dir.path().join(format!("{name}.c")), source).unwrap();
        run_ok(
            Command::new("clang-19")
                .args(flags)
                .args(["-shared", "-fPIC"])
                .arg(dir.path().join(format!("{name}.c")))
                .arg("-o")
                .arg(dir.path().join(name)),
        );
    }
    std::fs::write(dir.path().join("main.c"), MAIN_SOURCE).unwrap();
    let program = dir.path().join("main");
    run_ok(
        Command::new("clang-19")
            .args(flags)
            .arg(dir.path().join("main.c"))
            .arg(format!("-L{}", dir.path().display()))
            .args(["-lneeded", "-pthread", "-ldl"])
            .arg(format!("-Wl,-rpath,{}", dir.path().display()))
            .arg("-o")
            .arg(&program),
    );
    let dl = dir.path().join("libdlopened.so");
    let plain = run_ok(Command::new(&program).arg(&dl)).stdout;
    let plain = String::from_utf8_lossy(&plain).into_owned();
    assert!(plain.starts_with("result "), "{plain}");

    let db = dir.path().join("b.db");
    let traced = run_ok(
        coldstart()
            .args(["trace", "--blocks", "--json", "-o"])
            .arg(&db)
            .arg("--")
            .arg(&program)
            .arg(&dl),
    );
    // The program's output passes through, unchanged by the breakpoints.
    let summary: Value = serde_json::from_slice(&traced.stdout).unwrap();
    assert_eq!(summary["exit_code"], 0, "{summary:#}");
    assert!(
        String::from_utf8_lossy(&traced.stderr).contains(&plain),
        "{}",
        String::from_utf8_lossy(&traced.stderr)
    );

    let main = traced_blocks(&db, "main");
    let needed = traced_blocks(&db, "libneeded.so");
    let dlopened = traced_blocks(&db, "libdlopened.so");
    let root = summary_root(&db);
    let functions = |blocks: &[(i32, String, u32, u64)], pid: Option<i32>| -> HashSet<String> {
        blocks
            .iter()
            .filter(|b| pid.is_none_or(|p| b.0 == p))
            .map(|b| b.1.clone())
            .collect()
    };
    // The constructor ran, before main, in the first process: the library
    // was armed when ld.so had mapped it, before its initializers.
    let needed_root = functions(&needed, Some(root));
    assert!(needed_root.contains("needed_init"), "{needed:?}");
    assert!(needed_root.contains("needed_value"), "{needed:?}");
    assert!(!needed_root.contains("needed_unused"), "{needed:?}");
    let profile = Profile::open(&db).unwrap();
    let run = profile.block_run(None).unwrap();
    let all = profile.blocks(run.id).unwrap();
    let first_t = |symbol: &str| {
        all.iter()
            .filter(|b| b.pid == root && b.symbol.as_deref() == Some(symbol))
            .map(|b| b.first_t_ns)
            .min()
            .unwrap()
    };
    assert!(first_t("needed_init") < first_t("main"));
    // dlopen's library was armed when it was mapped.
    assert_eq!(
        functions(&dlopened, None),
        HashSet::from(["dl_value".to_string()])
    );
    // The thread is the process's; the forked child is another process.
    let main_root = functions(&main, Some(root));
    assert!(main_root.contains("thread_only"), "{main_root:?}");
    assert!(!main_root.contains("child_only"), "{main_root:?}");
    let children: HashSet<i32> = main.iter().map(|b| b.0).filter(|&p| p != root).collect();
    assert_eq!(children.len(), 1, "{main:?}");
    let child = *children.iter().next().unwrap();
    // The child ran what the parent had not run before the fork: its side
    // of main's branch on fork's result, and child_only.
    let in_child = functions(&main, Some(child));
    assert!(in_child.contains("child_only"), "{in_child:?}");
    assert!(
        in_child.is_subset(&HashSet::from([
            "main".to_string(),
            "child_only".to_string()
        ])),
        "{in_child:?}"
    );
    assert!(!functions(&main, None).contains("never_called"));
    // Ranks are 1, 2, ... in each process.
    let mut seqs: HashMap<i32, Vec<u64>> = HashMap::new();
    for b in &all {
        seqs.entry(b.pid).or_default().push(b.first_seq);
    }
    for (pid, seq) in seqs {
        assert_eq!(seq, (1..=seq.len() as u64).collect::<Vec<_>>(), "pid {pid}");
    }
}

fn summary_root(db: &Path) -> i32 {
    Profile::open(db).unwrap().block_run(None).unwrap().root_pid
}

#[test]
fn a_block_trace_that_times_out_keeps_what_ran_and_leaves_no_process() {
    if !tools(&[]) {
        return;
    }
    let dir = temp_dir();
    let program = clang(
        dir.path(),
        "#include <stdio.h>\n#include <unistd.h>\n\
         __attribute__((noinline)) int before(int x) { return x + 1; }\n\
         int main(void) { printf(\"pid %d\\n\", before((int)getpid()) - 1); fflush(stdout); for (;;) pause(); }\n",
        "hang",
        &["-O2", "-fbasic-block-address-map"],
    );
    let db = dir.path().join("b.db");
    let traced = run_ok(
        coldstart()
            .args(["trace", "--blocks", "--json", "--timeout", "1", "-o"])
            .arg(&db)
            .arg("--")
            .arg(&program),
    );
    let summary: Value = serde_json::from_slice(&traced.stdout).unwrap();
    assert_eq!(summary["end_reason"], "timeout", "{summary:#}");
    let functions: HashSet<String> = traced_blocks(&db, "hang")
        .into_iter()
        .map(|b| b.1)
        .collect();
    assert!(
        functions.contains("before") && functions.contains("main"),
        "{functions:?}"
    );
    let stderr = String::from_utf8_lossy(&traced.stderr);
    let pid: i32 = stderr
        .lines()
        .find_map(|l| l.strip_prefix("pid "))
        .and_then(|p| p.trim().parse().ok())
        .unwrap_or_else(|| panic!("{stderr}"));
    assert!(
        !Path::new(&format!("/proc/{pid}")).exists(),
        "the traced program {pid} is still running"
    );
}

/// lld, or None after a skip.
fn lld() -> Option<&'static str> {
    ["ld.lld-19", "ld.lld"]
        .into_iter()
        .find(|t| have(t))
        .or_else(|| {
            skip("ld.lld is not installed");
            None
        })
}

#[test]
fn a_split_relink_places_startup_blocks_together_in_first_run_order() {
    if !tools(&[]) {
        return;
    }
    if lld().is_none() {
        return;
    }
    let dir = temp_dir();
    let source = simple_source();
    let base_flags = ["-O2", "-ffunction-sections", "-fbasic-block-address-map"];
    let traced_build = clang(dir.path(), &source, "app", &base_flags);
    let expected_output = run_ok(&mut Command::new(&traced_build)).stdout;

    let db = dir.path().join("b.db");
    record_blocks(&db, &traced_build, None);
    let clusters = dir.path().join("app.clusters");
    let order = dir.path().join("app.order");
    let report = split_order(&db, &traced_build, "lld", &clusters, &order);
    // The order is main, then the functions in the order main calls them.
    let names = order_lines(&order);
    let expected: Vec<&str> = std::iter::once("main").chain(CALLED).collect();
    assert_eq!(names, expected, "{report:#}");

    // The split build: same sources and flags, with the cluster file.
    let split_flag = format!("-fbasic-block-sections=list={}", clusters.display());
    let order_flag = format!("-Wl,--symbol-ordering-file={}", order.display());
    let mut flags: Vec<&str> = base_flags.to_vec();
    flags.extend([split_flag.as_str(), order_flag.as_str(), "-fuse-ld=lld"]);
    let split = clang(dir.path(), &source, "app-split", &flags);
    assert_eq!(run_ok(&mut Command::new(&split)).stdout, expected_output);

    // nm: the startup clusters (the functions' own symbols) lie together,
    // in the order's order, with no other code between them; each fN's
    // blocks that never ran went to its .cold part.
    let nm = run_ok(Command::new("nm").args(["-n", "-S"]).arg(&split));
    let text: Vec<(u64, u64, String)> = String::from_utf8_lossy(&nm.stdout)
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            match f[..] {
                [a, s, "T" | "t", n] => Some((
                    u64::from_str_radix(a, 16).ok()?,
                    u64::from_str_radix(s, 16).ok()?,
                    n.to_string(),
                )),
                _ => None,
            }
        })
        .collect();
    let position = |name: &str| text.iter().position(|t| t.2 == name).unwrap();
    let placed: Vec<usize> = expected.iter().map(|n| position(n)).collect();
    for pair in placed.windows(2) {
        assert_eq!(pair[1], pair[0] + 1, "{text:?}");
        let (a, b) = (&text[pair[0]], &text[pair[1]]);
        assert!(
            b.0 - (a.0 + a.1) < 16,
            "padding only between {} and {}",
            a.2,
            b.2
        );
    }
    for name in CALLED {
        assert!(
            text.iter().any(|t| t.2 == format!("{name}.cold")),
            "{name}.cold in {text:?}"
        );
    }
    // The split build's own block map: every block that ran is in the
    // function's first range, and that range holds nothing else.
    let split_map = read_block_map_path(&split).unwrap().unwrap();
    let ran = traced_blocks(&db, "app");
    for name in CALLED {
        let function = split_map
            .functions
            .iter()
            .find(|f| f.names.iter().any(|n| n == name))
            .unwrap();
        let first: HashSet<u32> = function.ranges[0]
            .blocks
            .iter()
            .filter(|b| b.size > 0)
            .map(|b| b.id)
            .collect();
        let ran_here: HashSet<u32> = ran.iter().filter(|b| b.1 == name).map(|b| b.2).collect();
        assert_eq!(first, ran_here, "{name}: {function:?}");
        assert!(
            function.ranges.len() >= 2,
            "{name} was not split: {function:?}"
        );
    }
}

#[test]
fn clusters_need_a_binary_with_a_block_map() {
    if !tools(&[]) {
        return;
    }
    let dir = temp_dir();
    let plain = clang(
        dir.path(),
        "int main(void) { return 0; }\n",
        "plain",
        &["-O2"],
    );
    let db = dir.path().join("b.db");
    Profile::create_or_open(&db).unwrap();
    let output = coldstart()
        .arg("order")
        .arg(&db)
        .arg("--binary")
        .arg(&plain)
        .args(["--linker", "lld", "--clusters"])
        .arg(dir.path().join("c"))
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("plain") && stderr.contains("-fbasic-block-address-map"),
        "{stderr}"
    );
    assert!(!dir.path().join("c").exists());
}

/// Functions whose start runs a hundred bytes or so each and whose unlikely
/// paths hold a kilobyte and more: the split build packs the startup parts
/// into a few dozen pages where the base build spreads them over the whole
/// text. Between them lies code no block map covers and no start runs
/// (1.5 KiB of `int3` each, in sections of their own, as a large program's
/// assembly or code built without block maps), so that most pages the start
/// touches hold some of it.
fn spread_source(functions: usize) -> String {
    let mut text = String::from("#include <stdio.h>\nvolatile int sink;\n");
    for n in 0..functions {
        // Emitted while g{n} is, so that its section follows g{n}'s in the
        // object and the link.
        text.push_str(&format!(
            "__attribute__((noinline)) int g{n}(int x) {{\n\
             \x20 __asm__ volatile(\".pushsection .text.untraced{n},\\\"ax\\\",@progbits\\n\
             .fill 1536, 1, 0xcc\\n.popsection\");\n\
             \x20 if (x == 123456789) {{ {} return sink; }}\n\
             \x20 {}\n\
             \x20 return x + {n};\n\
             }}\n",
            "sink = sink * 3 + x; sink ^= x; ".repeat(40),
            format!("sink += x * {n}; sink ^= sink >> 3; ").repeat(6)
        ));
    }
    text.push_str("int main(int argc, char **argv) {\n  int s = 0;\n");
    for n in 0..functions {
        text.push_str(&format!("  s += g{n}(argc);\n"));
    }
    text.push_str("  printf(\"result %d\\n\", s);\n  return 0;\n}\n");
    text
}

/// Pages of `file_name` a readahead-off trace of `program` read, and the
/// run's id.
fn demand_trace(db: &Path, program: &Path, file_name: &str) -> (i64, u64) {
    let traced = run_ok(
        coldstart()
            .args(["trace", "--read-ahead-kb", "0", "--json", "-o"])
            .arg(db)
            .arg("--")
            .arg(program),
    );
    let summary: Value = serde_json::from_slice(&traced.stdout).unwrap();
    let run = summary["run"].as_i64().unwrap();
    let report = run_ok(
        coldstart()
            .arg("report")
            .arg(db)
            .args(["--run", &run.to_string(), "--json", "--file"])
            .arg(format!("*/{file_name}")),
    );
    let report: Value = serde_json::from_slice(&report.stdout).unwrap();
    let pages = report["files"][0]["pages_read"].as_u64().unwrap();
    (run, pages)
}

#[test]
fn simulate_predicts_the_pages_a_split_build_reads() {
    if !tools(&[]) || lld().is_none() || !coldstart_testkit::can_trace() {
        return;
    }
    let dir = coldstart_testkit::world_readable_temp_dir("coldstart-blocks-test");
    let source = spread_source(600);
    let base_flags = [
        "-O2",
        "-ffunction-sections",
        "-fbasic-block-address-map",
        "-fuse-ld=lld",
    ];
    std::fs::create_dir_all(dir.path().join("base")).unwrap();
    std::fs::create_dir_all(dir.path().join("split")).unwrap();
    let base = clang(&dir.path().join("base"), &source, "app", &base_flags);
    let db = dir.path().join("b.db");
    let (base_run, base_pages) = demand_trace(&db, &base, "base/app");
    record_blocks(&db, &base, None);
    let clusters = dir.path().join("app.clusters");
    let order = dir.path().join("app.order");
    split_order(&db, &base, "lld", &clusters, &order);
    // `simulate --split --json` of base/app from the base run: its row.
    let simulate_split = |extra: &[&str]| -> Value {
        let simulated = run_ok(
            coldstart()
                .arg("simulate")
                .arg(&db)
                .args(["--run", &base_run.to_string(), "--binary", "base/app"])
                .args(["--split", "--json"])
                .args(extra),
        );
        let report: Value = serde_json::from_slice(&simulated.stdout).unwrap();
        report["files"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["path"].as_str().is_some_and(|p| p.ends_with("base/app")))
            .unwrap_or_else(|| panic!("{report:#}"))
            .clone()
    };
    let predicted = simulate_split(&["--read-ahead-kb", "0"])["pages_read"]
        .as_u64()
        .unwrap();

    let split_flag = format!("-fbasic-block-sections=list={}", clusters.display());
    let order_flag = format!("-Wl,--symbol-ordering-file={}", order.display());
    let mut flags = base_flags.to_vec();
    flags.extend([split_flag.as_str(), order_flag.as_str()]);
    let split = clang(&dir.path().join("split"), &source, "app", &flags);
    let (split_run, split_pages) = demand_trace(&db, &split, "split/app");
    // --against finds the relinked copy under its own directory by name.
    let file = simulate_split(&["--against", &split_run.to_string()]);
    assert_eq!(
        file["measured"]["pages_read"].as_u64(),
        Some(split_pages),
        "{file:#}"
    );

    eprintln!(
        "predicted {predicted} pages, the split build read {split_pages}, the base {base_pages}"
    );
    // The split build reads far less of itself, and the prediction made
    // before the relink is within 10% of what it read.
    assert!(
        split_pages * 3 < base_pages,
        "split {split_pages} pages, base {base_pages}"
    );
    let error = predicted.abs_diff(split_pages) as f64 / split_pages as f64;
    assert!(
        error <= 0.10,
        "predicted {predicted} pages, the split build read {split_pages} (base {base_pages})"
    );
}

/// The order main reads its tables in; the others are never read.
const TABLES_READ: [&str; 4] = ["table7", "table2", "state5", "table4"];

fn data_source() -> String {
    let mut text = String::from("#include <stdio.h>\n");
    for n in 0..8 {
        text.push_str(&format!("const int table{n}[2048] = {{ {n}, 1, 2, 3 }};\n"));
        text.push_str(&format!("int state{n}[2048] = {{ {n}, 4, 5, 6 }};\n"));
    }
    text.push_str("int main(int argc, char **argv) {\n  int s = 0;\n  (void)argv;\n");
    for name in TABLES_READ {
        text.push_str(&format!("  s += {name}[argc];\n"));
    }
    text.push_str("  printf(\"result %d\\n\", s);\n  return 0;\n}\n");
    text
}

#[test]
fn the_data_a_start_reads_follows_its_code_in_the_split_order() {
    if !tools(&[]) || lld().is_none() {
        return;
    }
    let dir = temp_dir();
    let flags = [
        "-O2",
        "-ffunction-sections",
        "-fdata-sections",
        "-fbasic-block-address-map",
        "-fuse-ld=lld",
    ];
    let program = clang(dir.path(), &data_source(), "data", &flags);
    let expected_output = run_ok(&mut Command::new(&program)).stdout;
    let db = dir.path().join("b.db");
    record_blocks(&db, &program, None);
    let clusters = dir.path().join("data.clusters");
    let order = dir.path().join("data.order");
    let report = split_order(&db, &program, "lld", &clusters, &order);
    let names = order_lines(&order);
    let expected: Vec<&str> = std::iter::once("main").chain(TABLES_READ).collect();
    assert_eq!(names, expected, "{report:#}");

    // Relinked in that order, the tables main reads lie first in their
    // sections, in the order read (nm).
    let split_flag = format!("-fbasic-block-sections=list={}", clusters.display());
    let order_flag = format!("-Wl,--symbol-ordering-file={}", order.display());
    let mut relink = flags.to_vec();
    relink.extend([split_flag.as_str(), order_flag.as_str()]);
    let split = clang(dir.path(), &data_source(), "data-split", &relink);
    assert_eq!(run_ok(&mut Command::new(&split)).stdout, expected_output);
    let nm = run_ok(Command::new("nm").args(["-n"]).arg(&split));
    let symbols: Vec<(u64, char, String)> = String::from_utf8_lossy(&nm.stdout)
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            match f[..] {
                [a, k, n] => Some((
                    u64::from_str_radix(a, 16).ok()?,
                    k.chars().next()?,
                    n.to_string(),
                )),
                _ => None,
            }
        })
        .collect();
    for kind in ['R', 'D'] {
        let in_section: Vec<&str> = symbols
            .iter()
            .filter(|s| s.1 == kind && (s.2.starts_with("table") || s.2.starts_with("state")))
            .map(|s| s.2.as_str())
            .collect();
        let read: Vec<&str> = TABLES_READ
            .iter()
            .copied()
            .filter(|n| in_section.contains(n))
            .collect();
        assert!(!read.is_empty(), "{kind}: {in_section:?}");
        assert_eq!(
            &in_section[..read.len()],
            &read[..],
            "{kind}: {in_section:?}"
        );
    }
}

/// A shared library built with -fPIC reaches its exported data through the
/// GOT: the order names the data the slots point to.
#[test]
fn data_reached_through_the_got_is_named_in_the_split_order() {
    if !tools(&["readelf"]) {
        return;
    }
    let dir = temp_dir();
    let mut library = String::new();
    for n in 0..4 {
        library.push_str(&format!("int shared{n}[1024] = {{ {n}, 1 }};\n"));
    }
    library.push_str(
        "__attribute__((noinline)) int read_shared(int i) { return shared3[i] + shared1[i]; }\n",
    );
    let lib = clang(
        dir.path(),
        &library,
        "libshared.so",
        &[
            "-O2",
            "-fPIC",
            "-shared",
            "-fdata-sections",
            "-fbasic-block-address-map",
        ],
    );
    // The library's code loads shared3's address from a GOT slot.
    let relocations = run_ok(Command::new("readelf").arg("-rW").arg(&lib));
    assert!(
        String::from_utf8_lossy(&relocations.stdout)
            .lines()
            .any(|l| l.contains("R_X86_64_GLOB_DAT") && l.ends_with("shared3 + 0")),
        "{}",
        String::from_utf8_lossy(&relocations.stdout)
    );
    let program = dir.path().join("main");
    std::fs::write(
        dir.path().join("main.c"),
        "#include <stdio.h>\nint read_shared(int);\nint main(int argc, char **argv) { (void)argv; printf(\"%d\\n\", read_shared(argc)); return 0; }\n",
    )
    .unwrap();
    run_ok(
        Command::new("clang-19")
            .arg("-O2")
            .arg(dir.path().join("main.c"))
            .arg(&lib)
            .arg(format!("-Wl,-rpath,{}", dir.path().display()))
            .arg("-o")
            .arg(&program),
    );
    let db = dir.path().join("b.db");
    record_blocks(&db, &program, None);
    let order = dir.path().join("lib.order");
    split_order(&db, &lib, "lld", &dir.path().join("lib.clusters"), &order);
    let names = order_lines(&order);
    assert_eq!(names, ["read_shared", "shared3", "shared1"]);
}

/// A binary that can only be rewritten: its blocks found by disassembly,
/// traced, and handed to BOLT as a profile of the blocks that ran, which
/// BOLT splits the functions by and places in first-run order.
#[test]
fn bolt_splits_and_orders_functions_by_a_block_trace() {
    if !tools(&["gcc", "llvm-bolt-19"]) {
        return;
    }
    let dir = temp_dir();
    // BOLT rewrites a link that kept its relocations (-q).
    let program = gcc(
        dir.path(),
        &simple_source(),
        "app",
        &["-O2", "-no-pie", "-fno-inline", "-Wl,-q"],
    );
    let expected_output = run_ok(&mut Command::new(&program)).stdout;
    let db = dir.path().join("b.db");
    record_blocks(&db, &program, Some(&program));
    let profile = dir.path().join("app.fdata");
    let order = dir.path().join("app.order");
    split_order(&db, &program, "bolt", &profile, &order);
    let names = order_lines(&order);
    let ours: Vec<&str> = names
        .iter()
        .map(String::as_str)
        .filter(|n| *n == "main" || CALLED.contains(n))
        .collect();
    let expected: Vec<&str> = std::iter::once("main").chain(CALLED).collect();
    assert_eq!(ours, expected, "{names:?}");
    assert!(!names.iter().any(|n| n == "never"), "{names:?}");

    let bolted = dir.path().join("app.bolt");
    run_ok(
        Command::new("llvm-bolt-19")
            .arg(&program)
            .arg("-o")
            .arg(&bolted)
            .arg(format!("-data={}", profile.display()))
            .args([
                "-split-functions",
                "-reorder-blocks=ext-tsp",
                "-reorder-functions=user",
            ])
            .arg(format!("-function-order={}", order.display())),
    );
    assert_eq!(run_ok(&mut Command::new(&bolted)).stdout, expected_output);
    // nm: main and the fN in first-run order in BOLT's hot text, each fN's
    // unlikely path in a cold fragment, and `never` left where it was.
    let nm = run_ok(Command::new("nm").arg("-n").arg(&bolted));
    let text: Vec<(u64, String)> = String::from_utf8_lossy(&nm.stdout)
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            match f[..] {
                [a, "T" | "t", n] => Some((u64::from_str_radix(a, 16).ok()?, n.to_string())),
                _ => None,
            }
        })
        .collect();
    let address = |name: &str| {
        text.iter()
            .find(|t| t.1 == name)
            .unwrap_or_else(|| panic!("{name} in {text:?}"))
            .0
    };
    let placed: Vec<u64> = expected.iter().map(|n| address(n)).collect();
    assert!(placed.windows(2).all(|w| w[0] < w[1]), "{text:?}");
    for name in CALLED {
        assert!(
            text.iter()
                .any(|t| t.1.starts_with(&format!("{name}.cold"))),
            "{name}'s cold part in {text:?}"
        );
    }
    assert!(address("never") < placed[0], "{text:?}");
}

/// Two starts that take different paths (by their arguments), pooled with
/// `--block-run 1,2`: the clusters and the order hold the functions of both
/// paths, each start alone only its own (the source says which runs when);
/// a block run that is not there is named in the error.
#[test]
fn pooled_block_runs_cluster_the_paths_of_every_start() {
    if !tools(&[]) {
        return;
    }
    let dir = temp_dir();
    let source = "#include <stdio.h>\n\
                  volatile int sink;\n\
                  __attribute__((noinline)) void common(void) { sink += 1; }\n\
                  __attribute__((noinline)) void alone(void) { sink += 2; }\n\
                  __attribute__((noinline)) void with_argument(void) { sink += 3; }\n\
                  int main(int argc, char **argv) {\n\
                  \x20 (void)argv;\n\
                  \x20 if (argc > 1) with_argument(); else alone();\n\
                  \x20 common();\n\
                  \x20 printf(\"%d\\n\", sink);\n\
                  \x20 return 0;\n\
                  }\n";
    let program = clang(
        dir.path(),
        source,
        "paths",
        &["-O2", "-ffunction-sections", "-fbasic-block-address-map"],
    );
    let db = dir.path().join("b.db");
    record_blocks(&db, &program, None);
    run_ok(
        coldstart()
            .args(["trace", "--blocks", "-o"])
            .arg(&db)
            .arg("--")
            .arg(&program)
            .arg("x"),
    );
    let order_of = |runs: &str| {
        let clusters = dir.path().join(format!("{runs}.clusters"));
        let order = dir.path().join(format!("{runs}.order"));
        let report = run_ok(
            coldstart()
                .arg("order")
                .arg(&db)
                .arg("--binary")
                .arg(&program)
                .args([
                    "--linker",
                    "lld",
                    "--json",
                    "--block-run",
                    runs,
                    "--clusters",
                ])
                .arg(&clusters)
                .arg("-o")
                .arg(&order),
        );
        let report: Value = serde_json::from_slice(&report.stdout).unwrap();
        let clustered: HashSet<String> = std::fs::read_to_string(&clusters)
            .unwrap()
            .lines()
            .filter_map(|line| line.strip_prefix("f "))
            .map(str::to_string)
            .collect();
        (report, clustered, order_lines(&order))
    };
    let (report, clustered, order) = order_of("1,2");
    assert_eq!(
        report["block_runs"],
        serde_json::json!([1, 2]),
        "{report:#}"
    );
    for name in ["main", "alone", "with_argument", "common"] {
        assert!(clustered.contains(name), "{name} not in {clustered:?}");
        assert!(order.iter().any(|l| l == name), "{name} not in {order:?}");
    }
    let (_, first, _) = order_of("1");
    assert!(
        first.contains("alone") && !first.contains("with_argument"),
        "{first:?}"
    );
    let (_, second, _) = order_of("2");
    assert!(
        second.contains("with_argument") && !second.contains("alone"),
        "{second:?}"
    );

    let missing = coldstart()
        .arg("order")
        .arg(&db)
        .arg("--binary")
        .arg(&program)
        .args(["--linker", "lld", "--block-run", "1,9", "--clusters"])
        .arg(dir.path().join("missing.clusters"))
        .output()
        .unwrap();
    assert!(!missing.status.success());
    let stderr = String::from_utf8_lossy(&missing.stderr);
    assert!(stderr.contains("no block run 9"), "{stderr}");
    assert!(!dir.path().join("missing.clusters").exists());
}

/// Two sources with a local function of the same name, both run at
/// startup: the cluster file cannot tell them apart, so neither is split,
/// and both are placed whole where the first of them ran. nm of the relink
/// shows main, fb, both `helper`s, then fa, back to back (the source's
/// call order), and `cold_filler` (never run) after them.
#[test]
fn functions_sharing_a_name_are_placed_whole_in_the_order() {
    if !tools(&[]) || lld().is_none() {
        return;
    }
    let dir = temp_dir();
    let a = dir.path().join("a.c");
    let b = dir.path().join("b.c");
    std::fs::write(
        &a,
        "volatile int sink;\n\
         __attribute__((noinline)) void cold_filler(int x) { for (int i = 0; i < x; i++) sink += i * 7; }\n\
         __attribute__((noinline)) static int helper(int x) { return x > 1000 ? x / 3 : x + 1; }\n\
         __attribute__((noinline)) int fa(int x) { return helper(x) + 1; }\n",
    )
    .unwrap();
    std::fs::write(
        &b,
        "#include <stdio.h>\n\
         int fa(int);\n\
         __attribute__((noinline)) static int helper(int x) { return x > 1000 ? x / 5 : x + 2; }\n\
         __attribute__((noinline)) int fb(int x) { return helper(x) + 2; }\n\
         int main(int argc, char **argv) { (void)argv; int s = fb(argc); s += fa(argc); printf(\"%d\\n\", s); return 0; }\n",
    )
    .unwrap();
    let flags = ["-O2", "-ffunction-sections", "-fbasic-block-address-map"];
    let build = |out: &str, extra: &[&str]| {
        let path = dir.path().join(out);
        run_ok(
            Command::new("clang-19")
                .args(flags)
                .args(extra)
                .arg(&a)
                .arg(&b)
                .arg("-o")
                .arg(&path),
        );
        path
    };
    let traced = build("app", &["-fuse-ld=lld"]);
    let db = dir.path().join("b.db");
    record_blocks(&db, &traced, None);
    let clusters = dir.path().join("app.clusters");
    let order = dir.path().join("app.order");
    let report = split_order(&db, &traced, "lld", &clusters, &order);

    let unsplit: Vec<&str> = report["unsplit"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u["name"].as_str().unwrap())
        .collect();
    assert_eq!(unsplit, ["helper", "helper"], "{report:#}");
    let whole: Vec<&Value> = report["functions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["whole"] == true)
        .collect();
    assert_eq!(whole.len(), 2, "{report:#}");
    assert!(whole.iter().all(|f| f["name"] == "helper"));
    let cluster_text = std::fs::read_to_string(&clusters).unwrap();
    assert!(!cluster_text.contains("helper"), "{cluster_text}");
    assert_eq!(order_lines(&order), ["main", "fb", "helper", "fa"]);

    let order_flag = format!("-Wl,--symbol-ordering-file={}", order.display());
    let relinked = build("relinked", &["-fuse-ld=lld", order_flag.as_str()]);
    assert_eq!(
        run_ok(&mut Command::new(&relinked)).stdout,
        run_ok(&mut Command::new(&traced)).stdout
    );
    let nm = run_ok(Command::new("nm").arg("-n").arg(&relinked));
    let names: Vec<String> = String::from_utf8_lossy(&nm.stdout)
        .lines()
        .filter_map(|l| match l.split_whitespace().collect::<Vec<_>>()[..] {
            [_, "T" | "t", name] => Some(name.to_string()),
            _ => None,
        })
        .filter(|n| ["main", "fb", "helper", "fa", "cold_filler"].contains(&n.as_str()))
        .collect();
    assert_eq!(
        names,
        ["main", "fb", "helper", "helper", "fa", "cold_filler"]
    );
}

/// Every symbol of `program` by name, with its address (nm): with `-Wa,-L`
/// and `--discard-none`, the compiler's local labels too.
fn symbol_addresses(program: &Path) -> HashMap<String, u64> {
    let nm = run_ok(Command::new("nm").arg(program));
    String::from_utf8_lossy(&nm.stdout)
        .lines()
        .filter_map(|l| match l.split_whitespace().collect::<Vec<_>>()[..] {
            [a, _, n] => Some((n.to_string(), u64::from_str_radix(a, 16).ok()?)),
            _ => None,
        })
        .collect()
}

/// A `switch` whose cases fall through into each other: gcc jumps into the
/// middle of straight-line code through a jump table. In a link that kept
/// its relocations (`-Wl,-q`, as BOLT needs), discovery finds every entry
/// of the table as a block start, for a relative table (PIE:
/// `.long .Lcase - .Ltable`) and an absolute one (`.quad .Lcase`). Oracle: the table in
/// gcc's own assembly, and the labels' addresses (kept with `-Wa,-L`) by nm.
/// The non-PIE build's first runs then match valgrind's.
#[test]
fn discovery_finds_the_targets_of_jump_tables() {
    if !tools(&["valgrind", "gcc"]) {
        return;
    }
    let dir = temp_dir();
    let source = "#include <stdio.h>\n\
        volatile int sink;\n\
        __attribute__((noinline)) int dispatch(int k) {\n\
        \x20 int r = 0;\n\
        \x20 switch (k) {\n\
        \x20 case 0: sink += 3; r += 1; /* fall through */\n\
        \x20 case 1: sink ^= 5; r += 2; /* fall through */\n\
        \x20 case 2: sink -= 7; r += 3; break;\n\
        \x20 case 3: sink *= 3; r += 4; /* fall through */\n\
        \x20 case 4: sink += 9; r += 5; /* fall through */\n\
        \x20 case 5: sink |= 6; r += 6; break;\n\
        \x20 case 6: sink &= 0x77; r += 7; /* fall through */\n\
        \x20 case 7: sink += 1; r += 8; break;\n\
        \x20 default: r = -1;\n\
        \x20 }\n\
        \x20 return r * 3 + sink;\n\
        }\n\
        int main(int argc, char **argv) {\n\
        \x20 (void)argv;\n\
        \x20 int s = 0;\n\
        \x20 static const int order[] = {5, 2, 7, 0, 3, 4};\n\
        \x20 for (int i = 0; i < 6; i++) s += dispatch(order[i] + argc - 1);\n\
        \x20 printf(\"%d\\n\", s);\n\
        \x20 return 0;\n\
        }\n";
    for (name, pic) in [
        ("switch-pie", &[][..]),
        ("switch", &["-no-pie", "-fno-pie"][..]),
    ] {
        let mut flags = vec!["-O2"];
        flags.extend(pic);
        let assembly = {
            let src = dir.path().join(format!("{name}.c"));
            std::fs::write(&src, source).unwrap();
            let out = run_ok(
                Command::new("gcc")
                    .args(&flags)
                    .arg("-S")
                    .arg("-o")
                    .arg("-")
                    .arg(&src),
            );
            String::from_utf8(out.stdout).unwrap()
        };
        let cases: Vec<String> = assembly
            .lines()
            .filter_map(|l| {
                let l = l.trim();
                let entry = l
                    .strip_prefix(".long")
                    .or_else(|| l.strip_prefix(".quad"))?;
                let label = entry.trim().split('-').next()?;
                label.starts_with(".L").then(|| label.to_string())
            })
            .collect();
        assert_eq!(cases.len(), 8, "{name}: a table of 8 cases in:\n{assembly}");
        let mut linked = flags.clone();
        linked.extend(["-Wa,-L", "-Wl,--discard-none"]);
        let with_relocations = [linked.clone(), vec!["-Wl,-q"]].concat();
        let program = gcc(dir.path(), source, name, &with_relocations);
        let plain = gcc(dir.path(), source, &format!("{name}-plain"), &linked);
        let labels = symbol_addresses(&program);
        let starts = |path: &Path| -> HashSet<u64> {
            discover_block_map_path(path)
                .unwrap()
                .functions
                .iter()
                .filter(|f| f.names.iter().any(|n| n == "dispatch"))
                .flat_map(|f| &f.ranges)
                .flat_map(|r| &r.blocks)
                .map(|b| b.address)
                .collect()
        };
        let found = starts(&program);
        for case in &cases {
            let address = labels[case];
            assert!(
                found.contains(&address),
                "{name}: {case} at {address:#x} not in {found:x?}"
            );
        }
        // Without the relocations some of them are not found: the cases
        // that fall through are inside straight-line code.
        let blind = starts(&plain);
        assert!(
            blind.len() < found.len(),
            "{name}: {} vs {}",
            blind.len(),
            found.len()
        );
        if pic.is_empty() {
            continue;
        }
        // The breakpoints on the cases see what valgrind sees (valgrind
        // runs a non-PIE at its link addresses).
        let db = dir.path().join("switch.db");
        record_blocks(&db, &program, Some(&program));
        let map = discover_block_map_path(&program).unwrap();
        let oracle = lackey_first_runs(&program, &map, dir.path());
        let ours: Vec<u64> = traced_blocks(&db, name).iter().map(|b| b.3).collect();
        assert_eq!(ours, oracle, "first runs, in order");
        let ran: HashSet<u64> = ours.into_iter().collect();
        let ran_cases = cases.iter().filter(|c| ran.contains(&labels[*c])).count();
        assert!(ran_cases >= 6, "{ran_cases} cases ran");
    }
}

/// C++ exception landing pads start blocks: each call-site entry of the
/// language-specific data area (`.gcc_except_table`) an FDE of `.eh_frame`
/// points to names one. g++ places the first after a call to `__cxa_throw`,
/// which does not end a block, so disassembly alone misses it. Oracle: the
/// call-site tables in g++'s own assembly, and the labels' addresses (kept
/// with `-Wa,-L`) by nm.
#[test]
fn discovery_finds_exception_landing_pads() {
    if !tools(&["g++"]) {
        return;
    }
    let dir = temp_dir();
    let source = "#include <cstdio>\n\
        #include <stdexcept>\n\
        volatile int sink;\n\
        struct Guard { int k; ~Guard() { sink += k; } };\n\
        __attribute__((noinline)) void may_throw(int k) { if (k > 0) throw std::runtime_error(\"startup\"); sink += 1; }\n\
        __attribute__((noinline)) int guarded(int k) {\n\
        \x20 int r = 0;\n\
        \x20 try { Guard a{1}; may_throw(k); Guard b{2}; may_throw(k - 5); r = 1; }\n\
        \x20 catch (const std::runtime_error &) { r = 2; sink += 5; }\n\
        \x20 catch (...) { r = 3; }\n\
        \x20 return r;\n\
        }\n\
        int main(int argc, char **) { int s = guarded(argc) + guarded(argc - 1); std::printf(\"%d\\n\", s); return 0; }\n";
    let src = dir.path().join("eh.cpp");
    std::fs::write(&src, source).unwrap();
    let assembly = run_ok(Command::new("g++").args(["-O2", "-S", "-o", "-"]).arg(&src));
    let assembly = String::from_utf8(assembly.stdout).unwrap();
    // Call-site entries: start (.LEHBn - base), length, landing pad
    // (.Ln - base, or 0), action.
    let pads: Vec<String> = assembly
        .lines()
        .filter_map(|l| {
            let value = l.trim().strip_prefix(".uleb128")?.trim();
            let label = value.split('-').next()?;
            let digits = label.strip_prefix(".L")?;
            (value.contains('-') && digits.chars().all(|c| c.is_ascii_digit()))
                .then(|| label.to_string())
        })
        .collect();
    assert!(pads.len() >= 3, "landing pads in:\n{assembly}");
    let program = dir.path().join("eh");
    run_ok(
        Command::new("g++")
            .args(["-O2", "-Wa,-L", "-Wl,--discard-none"])
            .arg(&src)
            .arg("-o")
            .arg(&program),
    );
    assert_eq!(run_ok(&mut Command::new(&program)).stdout, b"3\n");
    let labels = symbol_addresses(&program);
    let starts: HashSet<u64> = discover_block_map_path(&program)
        .unwrap()
        .functions
        .iter()
        .flat_map(|f| &f.ranges)
        .flat_map(|r| &r.blocks)
        .map(|b| b.address)
        .collect();
    for pad in &pads {
        let address = labels[pad];
        assert!(
            starts.contains(&address),
            "landing pad {pad} at {address:#x} is no block start"
        );
    }
}
