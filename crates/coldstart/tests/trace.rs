//! `coldstart trace` end to end, as root, against oracles outside the
//! tracer: a test program whose page touches are known by construction,
//! mincore for what ended up resident, /proc for leftover processes and
//! tracefs for leftover instances.

use serde_json::Value;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use coldstart_testkit::can_trace;

const PAGE: u64 = 4096;

fn coldstart() -> Command {
    Command::new(env!("CARGO_BIN_EXE_coldstart"))
}

fn run(command: &mut Command) -> Output {
    let output = command.output().expect("coldstart runs");
    if !output.status.success() {
        panic!(
            "{command:?} failed: {}\nstdout: {}\nstderr: {}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    output
}

fn json(output: &Output) -> Value {
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}",
            String::from_utf8_lossy(&output.stdout)
        )
    })
}

/// A directory every user can read (the program may run as nobody).
fn shared_tempdir() -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix("coldstart-trace-test")
        .tempdir_in("/var/tmp")
        .expect("temp dir");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

fn write_file(path: &Path, pages: u64) {
    // Distinct non-zero bytes so no filesystem can store holes.
    let data: Vec<u8> = (0..pages * PAGE).map(|i| (i % 251) as u8 + 1).collect();
    std::fs::write(path, data).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o644)).unwrap();
}

const TOUCHER: &str = r#"
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* Maps argv[1] and touches pages 0, 100 and 5000 with readahead off; a
   child pread()s argv[4] bytes at argv[3] from argv[2]. */
int main(int argc, char **argv) {
    if (argc != 5) return 2;
    printf("uid=%d\n", (int)getuid());
    fflush(stdout);
    int fd = open(argv[1], O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) return 3;
    volatile char *p = mmap(NULL, st.st_size, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) return 4;
    madvise((void *)p, st.st_size, MADV_RANDOM);
    char sum = p[0] + p[100 * 4096] + p[5000 * 4096];
    pid_t child = fork();
    if (child == 0) {
        int fb = open(argv[2], O_RDONLY);
        if (fb < 0) _exit(5);
        posix_fadvise(fb, 0, 0, POSIX_FADV_RANDOM);
        long off = atol(argv[3]), len = atol(argv[4]);
        char *buf = malloc(len);
        _exit(pread(fb, buf, len, off) == len ? 0 : 6);
    }
    int status = 0;
    waitpid(child, &status, 0);
    printf("done %d %d\n", sum, status);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 7;
}
"#;

use coldstart_testkit::build_c;

fn extents_to_pages(extents: &Value) -> Vec<u64> {
    extents
        .as_array()
        .expect("extent list")
        .iter()
        .flat_map(|e| e[0].as_u64().unwrap()..=e[1].as_u64().unwrap())
        .collect()
}

fn file_entry<'a>(report: &'a Value, path: &Path) -> &'a Value {
    report["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["path"] == path.to_str().unwrap())
        .unwrap_or_else(|| panic!("{} not in the report: {report:#}", path.display()))
}

fn no_instances_left() {
    let leftovers: Vec<String> = std::fs::read_dir("/sys/kernel/tracing/instances")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("coldstart-"))
                .collect()
        })
        .unwrap_or_default();
    // Other tests may be mid-trace: only instances of exited coldstarts count.
    let stale: Vec<&String> = leftovers
        .iter()
        .filter(|n| {
            let pid = n
                .trim_start_matches("coldstart-")
                .split('-')
                .next()
                .unwrap_or("");
            !Path::new(&format!("/proc/{pid}")).exists()
        })
        .collect();
    assert!(stale.is_empty(), "trace instances left behind: {stale:?}");
}

/// A test program and its inputs: a file it maps, one it read()s (64
/// pages), and where the profile goes.
struct Files {
    dir: tempfile::TempDir,
    program: PathBuf,
    mapped: PathBuf,
    readf: PathBuf,
    db: PathBuf,
}

fn files(name: &str, source: &str, mapped_pages: u64) -> Files {
    let dir = shared_tempdir();
    let program = build_c(dir.path(), name, source);
    let mapped = dir.path().join("mapped.bin");
    let readf = dir.path().join("read.bin");
    write_file(&mapped, mapped_pages);
    write_file(&readf, 64);
    let db = dir.path().join("t.db");
    Files {
        dir,
        program,
        mapped,
        readf,
        db,
    }
}

/// `coldstart trace --json -o DB --evict F... OPTIONS --`, for the program
/// and its arguments to follow.
fn trace_cold(db: &Path, evict: &[&Path], options: &[&str]) -> Command {
    let mut command = coldstart();
    command.args(["trace", "--json", "-o"]).arg(db);
    for file in evict {
        command.arg("--evict").arg(file);
    }
    command.args(options).arg("--");
    command
}

#[test]
fn pages_touched_and_read_are_exact_and_match_residency() {
    if !can_trace() {
        return;
    }
    let Files {
        dir: _dir,
        program: toucher,
        mapped,
        readf,
        db,
    } = files("toucher", TOUCHER, 6000);
    let (offset, len) = (10 * PAGE + 100, 3 * PAGE);

    let out = run(trace_cold(&db, &[&mapped, &readf], &[])
        .arg(&toucher)
        .arg(&mapped)
        .arg(&readf)
        .arg(offset.to_string())
        .arg(len.to_string())
        // As if started by `sudo` from user nobody: the program must not run as root.
        .env("SUDO_UID", "65534")
        .env("SUDO_GID", "65534"));
    let summary = json(&out);
    assert_eq!(summary["end_reason"], "exited", "{summary:#}");
    assert_eq!(summary["exit_code"], 0, "{summary:#}");
    assert_eq!(summary["lost_events"], 0);
    let program_output = String::from_utf8_lossy(&out.stderr);
    assert!(
        program_output.contains("uid=65534"),
        "program ran as: {program_output}"
    );
    no_instances_left();
    // Before `report`, which reads the files to find their ELF sections.
    let resident_after = coldstart_testkit::resident_pages(&mapped);
    let resident_after_b = coldstart_testkit::resident_pages(&readf);

    let out = run(coldstart()
        .arg("report")
        .arg(&db)
        .arg("--json")
        .arg("--pages"));
    let report = json(&out);
    let m = file_entry(&report, &mapped);
    let pages = &m["pages"];
    assert_eq!(extents_to_pages(&pages["faulted"]), vec![0, 100, 5000]);
    assert_eq!(m["pages_faulted"], 3);
    let read = extents_to_pages(&pages["read"]);
    for page in [0, 100, 5000] {
        assert!(
            read.contains(&page),
            "page {page} faulted but not read: {read:?}"
        );
    }
    assert_eq!(
        read, resident_after,
        "pages the trace says were read equal the pages resident afterwards (mincore)"
    );
    assert_eq!(m["read_requests"], read_runs(&read));
    assert_eq!(m["opened_by_tree"], true);

    let r = file_entry(&report, &readf);
    let first = offset / PAGE;
    let last = (offset + len - 1) / PAGE;
    assert_eq!(
        extents_to_pages(&r["pages"]["accessed"]),
        (first..=last).collect::<Vec<_>>()
    );
    let read_b = extents_to_pages(&r["pages"]["read"]);
    assert!((first..=last).all(|p| read_b.contains(&p)), "{read_b:?}");
    assert_eq!(read_b, resident_after_b);

    // The child that read the second file was followed.
    let processes = report["processes"].as_array().unwrap();
    assert_eq!(processes.len(), 2, "{processes:#?}");
    let parent = processes
        .iter()
        .find(|p| p["exe"] == toucher.to_str().unwrap())
        .expect("the program is in the tree");
    let child = processes
        .iter()
        .find(|p| p["pid"] != parent["pid"])
        .unwrap();
    assert_eq!(child["ppid"], parent["pid"]);
    assert!(
        r["processes"][0]
            .as_str()
            .unwrap()
            .ends_with(&format!("({})", child["pid"])),
        "{r:#}"
    );

    // Runs are listed.
    let runs = json(&run(coldstart().arg("runs").arg(&db).arg("--json")));
    assert_eq!(runs["runs"].as_array().unwrap().len(), 1);
    assert_eq!(runs["runs"][0]["cache_mode"], "selective");
}

const STAMPER: &str = r#"
#include <fcntl.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

static long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* For each file named: prints its own CLOCK_MONOTONIC time, then reads
   the file's first page; 30 ms apart. Prints the time again as it exits. */
int main(int argc, char **argv) {
    char page[4096];
    for (int i = 1; i < argc; i++) {
        int fd = open(argv[i], O_RDONLY);
        if (fd < 0) return 2;
        posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);
        printf("read %d %lld\n", i, now_ns());
        fflush(stdout);
        if (pread(fd, page, sizeof page, 0) != sizeof page) return 3;
        close(fd);
        usleep(30000);
    }
    printf("exit %lld\n", now_ns());
    fflush(stdout);
    return 0;
}
"#;

/// The trace clock is put on CLOCK_MONOTONIC, where the run's start and
/// end are timed: the times the program itself took just before each read
/// and just before it exited (its own clock_gettime) match when the trace
/// saw the reads and when coldstart saw the exit. Without the marks that
/// place a kept `local` clock, the reads are off by the distance between
/// sched_clock and CLOCK_MONOTONIC (23 ms on this machine kind).
#[test]
fn event_times_are_on_the_clock_the_program_reads() {
    if !can_trace() {
        return;
    }
    let dir = shared_tempdir();
    let program = build_c(dir.path(), "stamper", STAMPER);
    let inputs: Vec<PathBuf> = (1..=3)
        .map(|i| dir.path().join(format!("in{i}.bin")))
        .collect();
    for input in &inputs {
        write_file(input, 4);
    }
    let db = dir.path().join("t.db");
    let evict: Vec<&Path> = inputs.iter().map(PathBuf::as_path).collect();
    let out = run(trace_cold(&db, &evict, &[]).arg(&program).args(&inputs));
    let summary = json(&out);
    assert_eq!(summary["exit_code"], 0, "{summary:#}");
    let said = String::from_utf8_lossy(&out.stderr);
    let stamp = |prefix: &str| -> i64 {
        said.lines()
            .find_map(|l| l.strip_prefix(prefix))
            .and_then(|rest| rest.trim().parse().ok())
            .unwrap_or_else(|| panic!("no `{prefix}` in the program's output: {said}"))
    };
    let exit = stamp("exit ");
    let runs = json(&run(coldstart().arg("runs").arg(&db).arg("--json")));
    let ended_ns = runs["runs"][0]["ended_ns"].as_i64().unwrap();
    let report = json(&run(coldstart().arg("report").arg(&db).arg("--json")));
    for (i, input) in inputs.iter().enumerate() {
        let before_read = stamp(&format!("read {} ", i + 1));
        let first_ns = file_entry(&report, input)["first_access_ns"]
            .as_i64()
            .unwrap();
        // How long before the exit each side puts the read: the trace and
        // coldstart's exit time against the program's two stamps. The read
        // follows its stamp by microseconds; coldstart sees the exit up to
        // a few milliseconds after the program's last stamp.
        let traced = ended_ns - first_ns;
        let own = exit - before_read;
        assert!(
            (-1_000_000..=8_000_000).contains(&(traced - own)),
            "{}: the trace puts its first read {:.3} ms before the end, the program {:.3} ms",
            input.display(),
            traced as f64 / 1e6,
            own as f64 / 1e6
        );
    }
}

/// Pages entering the cache in separate runs; with readahead off each
/// discontiguous run is its own request.
fn read_runs(pages: &[u64]) -> u64 {
    pages.windows(2).filter(|w| w[1] != w[0] + 1).count() as u64 + u64::from(!pages.is_empty())
}

fn alive(pid: i64) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // Zombies are dead for this purpose.
    !stat
        .rsplit(')')
        .next()
        .unwrap_or("")
        .trim_start()
        .starts_with('Z')
}

const HANGER: &str = "echo $$; sleep 1000 & echo $!; setsid sleep 1000 & echo $!; wait";

fn pids_from(text: &str) -> Vec<i64> {
    text.lines().filter_map(|l| l.trim().parse().ok()).collect()
}

#[test]
fn a_hanging_program_is_killed_at_the_timeout_with_its_children() {
    if !can_trace() {
        return;
    }
    let dir = shared_tempdir();
    let db = dir.path().join("t.db");
    let started = Instant::now();
    let out = run(coldstart()
        .args(["trace", "--json", "--timeout", "1.5", "-o"])
        .arg(&db)
        .arg("--evict")
        .arg(&db)
        .args(["--", "sh", "-c", HANGER]));
    assert!(started.elapsed() < Duration::from_secs(30));
    let summary = json(&out);
    assert_eq!(summary["end_reason"], "timeout");
    let pids = pids_from(&String::from_utf8_lossy(&out.stderr));
    assert_eq!(pids.len(), 3, "the shell and its two sleeps: {pids:?}");
    for pid in pids {
        assert!(!alive(pid), "process {pid} survived the trace");
    }
    no_instances_left();
    let report = json(&run(coldstart().arg("report").arg(&db).arg("--json")));
    assert_eq!(report["run"]["end_reason"], "timeout");
    assert_eq!(report["run"]["ready_ns"], Value::Null);
    assert_eq!(report["run"]["complete"], true);
}

#[test]
fn ctrl_c_keeps_the_profile_and_cleans_up() {
    if !can_trace() {
        return;
    }
    let dir = shared_tempdir();
    let db = dir.path().join("t.db");
    let child = coldstart()
        .args(["trace", "--json", "--timeout", "60", "-o"])
        .arg(&db)
        .arg("--evict")
        .arg(dir.path())
        .args(["--", "sh", "-c", HANGER])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until the traced run has started.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        assert!(
            Instant::now() < deadline,
            "the traced program never started"
        );
        let runs = coldstart()
            .arg("runs")
            .arg(&db)
            .arg("--json")
            .output()
            .unwrap();
        if runs.status.success()
            && json(&runs)["runs"]
                .as_array()
                .is_some_and(|r| !r.is_empty())
        {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(300));
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let out = child.wait_with_output().unwrap();
    // The whole status: a signal's number says who ended coldstart.
    assert_eq!(
        out.status.code(),
        Some(130),
        "{:?}; stdout: {}; stderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let summary = json(&out);
    assert_eq!(summary["end_reason"], "interrupted");
    for pid in pids_from(&String::from_utf8_lossy(&out.stderr)) {
        assert!(!alive(pid), "process {pid} survived Ctrl-C");
    }
    no_instances_left();
    let report = json(&run(coldstart().arg("report").arg(&db).arg("--json")));
    assert_eq!(report["run"]["end_reason"], "interrupted");
}

#[test]
fn a_ready_line_ends_the_run_and_is_marked() {
    if !can_trace() {
        return;
    }
    let dir = shared_tempdir();
    let db = dir.path().join("t.db");
    let out = run(coldstart()
        .args(["trace", "--json", "--ready-regex", "^READY$", "-o"])
        .arg(&db)
        .arg("--evict")
        .arg(&db)
        .args(["--", "sh", "-c", "sleep 0.2; echo READY; exec sleep 1000"]));
    let summary = json(&out);
    assert_eq!(summary["end_reason"], "ready-regex");
    let ready = summary["ready_ms"].as_f64().unwrap();
    assert!((150.0..5000.0).contains(&ready), "ready after {ready} ms");
    no_instances_left();
}

#[test]
fn the_program_reads_end_of_file_not_coldstarts_open_stdin() {
    if !can_trace() {
        return;
    }
    let dir = shared_tempdir();
    let db = dir.path().join("t.db");
    // coldstart's own stdin is a pipe that stays open: a program that
    // inherited it would wait on it until the timeout.
    let mut child = coldstart()
        .args(["trace", "--json", "--timeout", "20", "-o"])
        .arg(&db)
        .arg("--evict")
        .arg(&db)
        .args(["--", "cat"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("coldstart starts");
    let held_open = child.stdin.take();
    let out = child.wait_with_output().expect("coldstart runs");
    drop(held_open);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let summary = json(&out);
    assert_eq!(summary["end_reason"], "exited");
    assert_eq!(summary["exit_code"], 0);
    no_instances_left();
}

#[test]
fn a_program_that_cannot_start_is_a_clear_error() {
    if !can_trace() {
        return;
    }
    let dir = shared_tempdir();
    let db = dir.path().join("t.db");
    let out = coldstart()
        .args(["trace", "--cache", "warm", "-o"])
        .arg(&db)
        .args(["--", "/nonexistent/program"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("/nonexistent/program"), "{err}");
    no_instances_left();
}

const DEMANDER: &str = r#"
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* No madvise, no fadvise: only the device's readahead setting decides what
   is read. Touches pages 0-7 and 3000 of argv[1] through a mapping and
   read()s pages 20-21 of argv[2]. */
int main(int argc, char **argv) {
    if (argc != 3) return 2;
    int fd = open(argv[1], O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) return 3;
    volatile char *p = mmap(NULL, st.st_size, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) return 4;
    char sum = 0;
    for (int i = 0; i < 8; i++) sum += p[i * 4096];
    sum += p[3000 * 4096];
    int fb = open(argv[2], O_RDONLY);
    char buf[2 * 4096];
    if (fb < 0 || pread(fb, buf, sizeof buf, 20 * 4096) != sizeof buf) return 5;
    printf("done %d\n", sum);
    return 0;
}
"#;

fn device_read_ahead_kb(path: &Path) -> String {
    use std::os::unix::fs::MetadataExt;
    let dev = std::fs::metadata(path).unwrap().dev();
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    std::fs::read_to_string(format!("/sys/class/bdi/{major}:{minor}/read_ahead_kb"))
        .or_else(|_| {
            // A partition's readahead is its disk's.
            std::fs::read_to_string(format!(
                "/sys/dev/block/{major}:{minor}/../queue/read_ahead_kb"
            ))
        })
        .unwrap()
}

#[test]
fn readahead_off_reads_exactly_the_demanded_pages_and_is_restored() {
    if !can_trace() {
        return;
    }
    let Files {
        dir: _dir,
        program,
        mapped,
        readf,
        db,
    } = files("demander", DEMANDER, 4000);
    let before = device_read_ahead_kb(&mapped);
    let demanded: Vec<u64> = (0..8).chain([3000]).collect();
    let demanded_b: Vec<u64> = vec![20, 21];

    // A page read and then reclaimed before mincore looks (a DAMON pageout
    // scheme does that on this project's machines, within milliseconds of
    // the read) is missing from mincore's answer without anything being
    // wrong; a page resident beyond the demanded ones is always a failure.
    // So a start that left only fewer pages resident is traced again, at
    // most twice more, into a fresh profile.
    let mut attempts = 0;
    let (resident, resident_b) = loop {
        attempts += 1;
        for stale in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{stale}", db.display()));
        }
        let out = run(
            trace_cold(&db, &[&mapped, &readf], &["--read-ahead-kb", "0"])
                .arg(&program)
                .arg(&mapped)
                .arg(&readf),
        );
        assert_eq!(json(&out)["exit_code"], 0);
        assert_eq!(
            device_read_ahead_kb(&mapped),
            before,
            "read_ahead_kb is restored"
        );
        let resident = coldstart_testkit::resident_pages(&mapped);
        let resident_b = coldstart_testkit::resident_pages(&readf);
        no_instances_left();
        let beyond = resident.iter().any(|p| !demanded.contains(p))
            || resident_b.iter().any(|p| !demanded_b.contains(p));
        let fewer = resident.len() < demanded.len() || resident_b.len() < demanded_b.len();
        if attempts == 3 || beyond || !fewer {
            break (resident, resident_b);
        }
    };

    let report = json(&run(coldstart()
        .arg("report")
        .arg(&db)
        .arg("--json")
        .arg("--pages")));
    assert_eq!(report["run"]["read_ahead_kb"], 0);
    assert_eq!(report["run"]["demand_reads"], true);
    let m = file_entry(&report, &mapped);
    assert_eq!(extents_to_pages(&m["pages"]["read"]), demanded);
    assert_eq!(resident, demanded, "mincore agrees");
    assert_eq!(m["pages_touched"], 9);
    assert_eq!(m["read_amplification"], 1.0);
    let r = file_entry(&report, &readf);
    assert_eq!(extents_to_pages(&r["pages"]["read"]), demanded_b);
    assert_eq!(resident_b, demanded_b, "mincore agrees");
}
