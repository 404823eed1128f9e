//! `coldstart run` and the coldstart-run wrapper end to end: the planned
//! pages are resident before the program touches them (checked by the
//! program itself with mincore), the program keeps its pid, streams, exit
//! status and signals, and a broken plan never keeps it from starting.

use coldstart_prefetch::{PlanFile, format};
use coldstart_testkit::run_ok;
use std::io::Write;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

const PAGE: u64 = 4096;

/// Tests evict files and watch residency: one at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn coldstart() -> Command {
    Command::new(env!("CARGO_BIN_EXE_coldstart"))
}

fn disk_tempdir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("coldstart-run-test")
        .tempdir_in("/var/tmp")
        .unwrap()
}

/// A written-back, evicted file of `pages` pages.
fn cold_file(path: &Path, pages: u64) -> PlanFile {
    coldstart_testkit::cold_file(path, pages, PAGE);
    coldstart_prefetch::handmade::file(path).unwrap()
}

fn write_plan(path: &Path, files: Vec<PlanFile>, extents: &[(usize, u64, u64)]) {
    let plan = coldstart_prefetch::handmade::plan(PAGE, files, extents);
    std::fs::write(path, format::write(&plan)).unwrap();
}

/// Maps FILE without touching it and reports, by mincore, how many of pages
/// [FIRST, FIRST+COUNT) are resident: once at start, then (with a 4th
/// argument) again every 10 ms until all are, for at most 5 s.
const WATCHER: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
static int count(unsigned char *v, long first, long n) {
    int c = 0; for (long i = first; i < first + n; i++) c += v[i] & 1; return c;
}
int main(int argc, char **argv) {
    int fd = open(argv[1], O_RDONLY);
    struct stat st; fstat(fd, &st);
    void *p = mmap(0, st.st_size, PROT_READ, MAP_SHARED, fd, 0);
    long pages = st.st_size / 4096, first = atol(argv[2]), n = atol(argv[3]);
    unsigned char *v = malloc(pages);
    mincore(p, st.st_size, v);
    printf("at start %d of %ld\n", count(v, first, n), n);
    if (argc > 4) {
        for (int i = 0; i < 500; i++) {
            mincore(p, st.st_size, v);
            if (count(v, first, n) == n) { printf("all after %d ms\n", i * 10); return 0; }
            usleep(10000);
        }
        printf("not all after 5 s\n");
        return 1;
    }
    return 0;
}
"#;

fn watcher(dir: &Path) -> PathBuf {
    coldstart_testkit::build_c(dir, "watcher", WATCHER)
}

#[test]
fn with_wait_the_planned_pages_are_resident_when_the_program_starts() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = disk_tempdir();
    let program = watcher(dir.path());
    // coldstart run, and the small wrapper with its own argument parsing.
    let launchers = [
        (
            env!("CARGO_BIN_EXE_coldstart"),
            &["run", "--wait", "--method", "pread"][..],
        ),
        (
            env!("CARGO_BIN_EXE_coldstart-run"),
            &["--wait", "--method=pread", "--threads", "2"][..],
        ),
    ];
    for (launcher, options) in launchers {
        let data = cold_file(&dir.path().join("data"), 512);
        let plan = dir.path().join("p.plan");
        write_plan(&plan, vec![data.clone()], &[(0, 100, 64)]);
        // pread waits for each read, so --wait leaves everything read.
        let out = run_ok(
            Command::new(launcher)
                .args(options)
                .arg("--plan")
                .arg(&plan)
                .arg("--")
                .arg(&program)
                .args([&data.path, "100", "64"]),
        );
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "at start 64 of 64\n",
            "{launcher}"
        );
    }
}

#[test]
fn without_wait_the_prefetch_runs_beside_the_program() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = disk_tempdir();
    let program = watcher(dir.path());
    let data = cold_file(&dir.path().join("data"), 4096);
    let plan = dir.path().join("p.plan");
    write_plan(&plan, vec![data.clone()], &[(0, 1000, 256), (0, 3000, 256)]);
    let out = run_ok(
        coldstart()
            .args(["run", "--plan"])
            .arg(&plan)
            .arg("--")
            .arg(&program)
            .args([&data.path, "3000", "256", "wait"]),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("all after"), "{stdout}");
    // The program never touched the file: the pages came from the prefetcher,
    // and only the planned ones (reads in flight settle within 5 s).
    let expected: Vec<u64> = (1000..1256).chain(3000..3256).collect();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let mut pages = resident(&data.path);
    while pages != expected && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
        pages = resident(&data.path);
    }
    assert_eq!(pages, expected);
}

/// Pages of `path` resident now, by mincore.
fn resident(path: &str) -> Vec<u64> {
    coldstart_testkit::resident_pages(Path::new(path))
}

#[test]
fn the_program_keeps_its_pid_streams_status_and_signals() {
    let dir = disk_tempdir();
    let data = cold_file(&dir.path().join("data"), 8);
    let plan = dir.path().join("p.plan");
    write_plan(&plan, vec![data], &[(0, 0, 8)]);
    let run = |script: &str, input: &[u8]| {
        let mut child = coldstart()
            .args(["run", "--plan"])
            .arg(&plan)
            .args(["--", "sh", "-c", script])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let pid = child.id();
        child.stdin.take().unwrap().write_all(input).unwrap();
        (pid, child.wait_with_output().unwrap())
    };
    let (pid, out) = run("echo $$; cat", b"from stdin\n");
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("{pid}\nfrom stdin\n"),
        "the program is exec'd in place and reads coldstart's stdin"
    );
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (_, out) = run("echo oops >&2; exit 7", b"");
    assert_eq!(out.status.code(), Some(7));
    assert_eq!(String::from_utf8_lossy(&out.stderr), "oops\n");
    let (_, out) = run("kill -TERM $$", b"");
    assert_eq!(out.status.signal(), Some(libc::SIGTERM));
}

#[test]
fn a_broken_plan_or_changed_file_never_stops_the_program() {
    let dir = disk_tempdir();
    let out = run_ok(
        coldstart()
            .args(["run", "--plan"])
            .arg(dir.path().join("no-such.plan"))
            .args(["--", "echo", "started"]),
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "started\n");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no-such.plan"), "{stderr}");
    assert!(stderr.contains("without prefetching"), "{stderr}");

    // A FIFO at the plan's path: opening it would wait for a writer. The
    // program starts, and the prefetcher (which reads the plan) ends at
    // once: `output` waits for it too, as it holds stderr.
    let fifo = dir.path().join("fifo.plan");
    let name = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o600) }, 0);
    let out = run_ok(
        coldstart()
            .args(["run", "--plan"])
            .arg(&fifo)
            .args(["--", "echo", "started"]),
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "started\n");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("fifo.plan: not a regular file"), "{stderr}");

    // A file that changed since the plan was made is named once, and skipped.
    let data = dir.path().join("data");
    let mut planned = cold_file(&data, 8);
    planned.size += 1;
    let plan = dir.path().join("p.plan");
    write_plan(&plan, vec![planned], &[(0, 0, 8)]);
    let out = run_ok(
        coldstart()
            .args(["run", "--wait", "--plan"])
            .arg(&plan)
            .args(["--", "echo", "started"]),
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "started\n");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("1 of 1 files"), "{stderr}");

    let out = coldstart()
        .args(["run", "--plan"])
        .arg(&plan)
        .args(["--", "/no/such/program"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(127));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/no/such/program"));
}

/// The processes of process group `group` that have not exited (zombies
/// have), from /proc/PID/stat.
fn live_members(group: i32) -> Vec<i32> {
    let mut live = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // After the name, which may hold anything: state, ppid, pgrp.
        let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 1..]
            .split_whitespace()
            .collect();
        if fields[2] == group.to_string() && fields[0] != "Z" {
            live.push(pid);
        }
    }
    live
}

#[test]
fn a_plan_naming_a_fifo_leaves_no_prefetcher_behind() {
    let dir = disk_tempdir();
    let fifo = dir.path().join("fifo");
    run_ok(Command::new("mkfifo").arg(&fifo));
    // Were a reader stuck opening the FIFO, opening its write end releases it.
    struct Release<'a>(&'a Path);
    impl Drop for Release<'_> {
        fn drop(&mut self) {
            use std::os::unix::fs::OpenOptionsExt;
            let _ = std::fs::OpenOptions::new()
                .write(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(self.0);
        }
    }
    let _release = Release(&fifo);
    let plan = dir.path().join("p.plan");
    write_plan(
        &plan,
        vec![coldstart_prefetch::handmade::file(&fifo).unwrap()],
        &[],
    );
    let stderr = dir.path().join("stderr");
    // In a process group of its own, which the detached prefetcher keeps:
    // that is how the prefetcher is found, having no parent here.
    use std::os::unix::process::CommandExt;
    let mut launcher = Command::new(env!("CARGO_BIN_EXE_coldstart-run"))
        .args(["--verbose", "--plan"])
        .arg(&plan)
        .args(["--", "sleep", "0.3"])
        .process_group(0)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&stderr).unwrap())
        .spawn()
        .unwrap();
    let group = launcher.id() as i32;
    assert!(launcher.wait().unwrap().success());
    // The program has exited; the prefetcher must follow, having said why
    // it skipped the FIFO.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let told = std::fs::read_to_string(&stderr).unwrap();
        let left = live_members(group);
        if left.is_empty() {
            let skipped = format!("skipped {}: not a regular file (FIFO)", fifo.display());
            assert!(told.contains(&skipped), "{told}");
            break;
        }
        if std::time::Instant::now() > deadline {
            for &pid in &left {
                // SAFETY: kill(2) of a process this test started, by pid.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
            panic!("prefetcher {left:?} still there 10 s after the program exited; stderr: {told}");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[test]
fn the_launcher_script_runs_the_program_through_the_plan() {
    let dir = disk_tempdir();
    let data = cold_file(&dir.path().join("data"), 8);
    let plan = dir.path().join("p.plan");
    write_plan(&plan, vec![data], &[(0, 0, 8)]);
    let launcher = dir.path().join("launch");
    run_ok(
        coldstart()
            .args(["run", "--plan"])
            .arg(&plan)
            .arg("--write-launcher")
            .arg(&launcher)
            .args(["--", "sh", "-c", "echo \"args: $*\"", "it's"]),
    );
    // The small wrapper, built beside coldstart, is the one installed.
    let script = std::fs::read_to_string(&launcher).unwrap();
    assert!(
        script
            .lines()
            .any(|l| l.starts_with("launcher=")
                && l.trim_end_matches('\'').ends_with("/coldstart-run")),
        "{script}"
    );
    assert!(script.contains("\" --plan \"$plan\" -- "), "{script}");
    let out = run_ok(Command::new(&launcher).args(["a b", "c"]));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "args: a b c\n");
    // Without the plan, the program still starts.
    std::fs::remove_file(&plan).unwrap();
    let out = Command::new(&launcher).arg("x").output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "args: x\n");
}

#[test]
fn the_small_wrapper_passes_the_status_through_and_refuses_bad_usage() {
    let dir = disk_tempdir();
    let data = cold_file(&dir.path().join("data"), 8);
    let plan = dir.path().join("p.plan");
    write_plan(&plan, vec![data], &[(0, 0, 8)]);
    let wrapper = || Command::new(env!("CARGO_BIN_EXE_coldstart-run"));

    let out = wrapper()
        .arg("--plan")
        .arg(&plan)
        .args(["--", "sh", "-c", "exit 9"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(9));

    for (args, expected) in [
        (&["--plan", "x"][..], "no command"),
        (
            &["--method", "magic", "--plan", "x", "--", "true"][..],
            "--method magic",
        ),
        (
            &["--threads", "0", "--plan", "x", "--", "true"][..],
            "--threads 0",
        ),
        (&["--", "true"][..], "--plan APP.plan is required"),
        (&["--colour", "--", "true"][..], "unknown option --colour"),
    ] {
        let out = wrapper().args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
        assert!(stderr.contains("Usage: coldstart-run"), "{stderr}");
    }
}

#[test]
fn the_small_wrapper_documents_the_flags_of_coldstart_run() {
    let help = |args: &[&str]| {
        let out = run_ok(Command::new(env!("CARGO_BIN_EXE_coldstart-run")).args(args));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let wrapper = help(&["--help"]);
    assert_eq!(help(&["-h"]), wrapper);
    assert!(
        wrapper.contains("Usage: coldstart-run [OPTIONS] --plan <APP.plan> -- <CMD>...\n"),
        "{wrapper}"
    );
    let run = String::from_utf8_lossy(&run_ok(coldstart().args(["run", "-h"])).stdout).into_owned();
    // Each flag's name, value and help line reads the same in both.
    for line in [
        "--plan <APP.plan>",
        "The plan to prefetch",
        "--threads <N>",
        "Prefetch threads [default: the CPUs, from 2 to 8]",
        "--method <METHOD>",
        "How pages are brought in [default: readahead] [possible values:",
        "--wait",
        "Finish the prefetch before starting the program",
        "-v, --verbose",
        "Report every skipped file and a summary of the prefetch on stderr",
    ] {
        assert!(wrapper.contains(line), "{line}: {wrapper}");
        assert!(run.contains(line), "{line}: {run}");
    }
    assert_eq!(help(&["--version"]), "coldstart-run 0.1.0\n");
}

/// The small wrapper carries its unwinder instead of loading libgcc_s.so.1
/// in front of every program it starts (build.rs), wherever the C compiler
/// has the static one: its dynamic section, as readelf shows it, asks for
/// no libgcc_s, and it is still the stripped file its build links.
#[test]
fn the_small_wrapper_loads_no_unwinder_library() {
    let static_unwinder = Command::new("cc")
        .arg("-print-file-name=libgcc_eh.a")
        .output()
        .is_ok_and(|out| Path::new(String::from_utf8_lossy(&out.stdout).trim()).is_absolute());
    if !static_unwinder {
        coldstart_testkit::skip("the C compiler has no libgcc_eh.a to link the unwinder from");
        return;
    }
    let wrapper = env!("CARGO_BIN_EXE_coldstart-run");
    let dynamic = run_ok(Command::new("readelf").args(["--dynamic", "--wide", wrapper]));
    let dynamic = String::from_utf8_lossy(&dynamic.stdout);
    let needed: Vec<&str> = dynamic.lines().filter(|l| l.contains("(NEEDED)")).collect();
    assert!(
        needed.iter().any(|l| l.contains("libc.so")),
        "readelf shows no NEEDED entries: {dynamic}"
    );
    assert!(
        !needed.iter().any(|l| l.contains("libgcc_s")),
        "coldstart-run still loads libgcc_s: {needed:#?}"
    );
    let symbols = run_ok(Command::new("readelf").args(["--section-headers", "--wide", wrapper]));
    assert!(
        !String::from_utf8_lossy(&symbols.stdout).contains(".symtab"),
        "coldstart-run has a symbol table"
    );
    // And it runs: the status of what it starts passes through.
    let status = Command::new(wrapper)
        .args(["--plan", "/nonexistent.plan", "--", "sh", "-c", "exit 7"])
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(7));
}
