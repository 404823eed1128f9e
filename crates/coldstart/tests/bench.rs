//! `coldstart bench` end to end: interleaving, readiness, timeouts that kill
//! the whole tree, and the per-run counts checked against files of known
//! size (root only: dropping the page cache needs it).

use serde_json::Value;
use std::path::Path;
use std::process::{Command, Output};

fn coldstart() -> Command {
    Command::new(env!("CARGO_BIN_EXE_coldstart"))
}

fn bench(args: &[&str]) -> (Output, Value) {
    let out = coldstart()
        .arg("bench")
        .args(["--json", "-"])
        .args(args)
        .output()
        .expect("coldstart runs");
    let value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out, value)
}

/// Tests that drop or evict page cache contents run one at a time: one
/// test's cold run would otherwise cool another's warm run.
static CACHE: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn is_root() -> bool {
    // SAFETY: never fails.
    let root = unsafe { libc::geteuid() } == 0;
    if !root {
        coldstart_testkit::skip("needs root to drop the page cache");
    }
    root
}

fn alive(pid: i64) -> bool {
    // A zombie is dead for our purposes.
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit(')')
            .next()
            .is_some_and(|r| !r.trim_start().starts_with('Z'))
    })
}

#[test]
fn variants_are_interleaved_and_timed() {
    let (out, result) = bench(&[
        "-n",
        "3",
        "--vs",
        "sh -c 'sleep 0.05'",
        "--name",
        "slow",
        "--name",
        "fast",
        "--",
        "sh",
        "-c",
        "sleep 0.2",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let order: Vec<u64> = result["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["variant"].as_u64().unwrap())
        .collect();
    assert_eq!(order, [0, 1, 0, 1, 0, 1], "A B A B, never blocks");
    let variants = result["variants"].as_array().unwrap();
    assert_eq!(variants[0]["name"], "slow");
    assert_eq!(
        variants[1]["command"],
        serde_json::json!(["sh", "-c", "sleep 0.05"])
    );
    for run in result["runs"].as_array().unwrap() {
        assert_eq!(run["ok"], true);
        assert_eq!(run["end_reason"], "exited");
        let ms = run["wall_ms"].as_f64().unwrap();
        let floor = if run["variant"] == 0 { 200.0 } else { 50.0 };
        assert!((floor..floor + 1000.0).contains(&ms), "{ms} ms");
    }
    let slow = variants[0]["wall_ms"]["median"].as_f64().unwrap();
    let fast = variants[1]["wall_ms"]["median"].as_f64().unwrap();
    assert!(slow > fast + 100.0, "{slow} vs {fast}");
    assert_eq!(variants[0]["ratio"], Value::Null);
    let ratio = variants[1]["ratio"]["ratio"].as_f64().unwrap();
    let mean = |v: &Value| v["wall_ms"]["mean"].as_f64().unwrap();
    assert!((ratio - mean(&variants[1]) / mean(&variants[0])).abs() < 1e-12);
    assert_eq!(variants[0]["runs_ok"], 3);
    assert_eq!(variants[0]["wall_ms"]["n"], 3);
}

#[test]
fn a_ready_line_ends_the_run_and_kills_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let pids = dir.path().join("pids");
    let script = format!(
        "echo $$ >> {0}; sleep 1000 & echo $! >> {0}; sleep 0.2; echo READY; wait",
        pids.display()
    );
    let (out, result) = bench(&[
        "-n",
        "2",
        "--warmup",
        "0",
        "--ready-regex",
        "^READY$",
        "--",
        "sh",
        "-c",
        &script,
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for run in result["runs"].as_array().unwrap() {
        assert_eq!(run["end_reason"], "ready-regex");
        assert_eq!(run["ok"], true);
        let ms = run["wall_ms"].as_f64().unwrap();
        assert!((200.0..1500.0).contains(&ms), "ready after {ms} ms");
    }
    let pids: Vec<i64> = std::fs::read_to_string(&pids)
        .unwrap()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    // Two timed runs plus the untimed run that warms the cache.
    assert_eq!(pids.len(), 6, "{pids:?}");
    for pid in pids {
        assert!(!alive(pid), "process {pid} outlived its run");
    }
}

#[test]
fn a_run_that_is_never_ready_is_killed_at_the_timeout_and_not_counted() {
    let dir = tempfile::tempdir().unwrap();
    let pids = dir.path().join("pids");
    let script = format!(
        "echo $$ >> {0}; sleep 1000 & echo $! >> {0}; wait",
        pids.display()
    );
    let started = std::time::Instant::now();
    let (out, result) = bench(&[
        "-n",
        "2",
        "--warmup",
        "0",
        "--timeout",
        "0.5",
        "--ready-regex",
        "never printed",
        "--",
        "sh",
        "-c",
        &script,
    ]);
    assert!(started.elapsed() < std::time::Duration::from_secs(30));
    assert_eq!(out.status.code(), Some(1), "no counted run is a failure");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("not ready after 0.5 s"), "{stderr}");
    let runs = result["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2);
    for run in runs {
        assert_eq!(run["ok"], false);
        assert_eq!(run["end_reason"], "timeout");
        assert!(run["wall_ms"].as_f64().unwrap() >= 500.0);
    }
    let variant = &result["variants"][0];
    assert_eq!(variant["runs_ok"], 0);
    assert_eq!(variant["runs_failed"], 2);
    assert_eq!(variant["wall_ms"], Value::Null);
    for pid in std::fs::read_to_string(&pids).unwrap().lines() {
        let pid: i64 = pid.parse().unwrap();
        assert!(!alive(pid), "process {pid} survived the timeout");
    }
}

#[test]
fn failing_runs_are_listed_not_counted() {
    let dir = tempfile::tempdir().unwrap();
    let count = dir.path().join("count");
    // Every other run exits 3: the first untimed run, then timed 1 and 3 fail.
    let script = format!(
        "n=$(cat {0} 2>/dev/null || echo 0); echo $((n+1)) > {0}; [ $((n % 2)) -eq 1 ] || exit 3",
        count.display()
    );
    let (out, result) = bench(&["-n", "4", "--", "sh", "-c", &script]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ok: Vec<bool> = result["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["ok"].as_bool().unwrap())
        .collect();
    assert_eq!(ok, [true, false, true, false]);
    assert_eq!(result["runs"][1]["failure"], "exited with status 3");
    assert_eq!(result["variants"][0]["runs_ok"], 2);
    assert_eq!(result["variants"][0]["wall_ms"]["n"], 2);
    let warnings = result["warnings"].as_array().unwrap();
    assert!(
        warnings
            .iter()
            .any(|w| w.as_str().unwrap().contains("2 of 4 runs failed")),
        "{warnings:?}"
    );
}

/// A file of `mib` MiB on the disk (not tmpfs, whose pages cannot be
/// evicted), written back, in a directory removed on drop.
fn data_file(mib: usize) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::Builder::new()
        .prefix("coldstart-bench-test")
        .tempdir_in("/var/tmp")
        .unwrap();
    let path = dir.path().join("data");
    let chunk: Vec<u8> = (0..1 << 20).map(|i: u32| (i % 253) as u8).collect();
    let mut bytes = Vec::with_capacity(mib << 20);
    for _ in 0..mib {
        bytes.extend_from_slice(&chunk);
    }
    std::fs::write(&path, bytes).unwrap();
    std::fs::File::open(&path).unwrap().sync_all().unwrap();
    (dir, path)
}

/// `coldstart bench -n 2 --cache CACHE -- cat DATA`, which must succeed.
/// cat is a private copy next to DATA, so no other process on the machine
/// keeps its pages cached across the drop.
fn bench_cat(cache: &str, data: &Path) -> (String, Value) {
    let cat = data.with_file_name("cat");
    coldstart_testkit::copy_executable(Path::new("/bin/cat"), &cat);
    let (out, result) = bench(&[
        "-n",
        "2",
        "--cache",
        cache,
        "--",
        cat.to_str().unwrap(),
        data.to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    (stderr, result)
}

#[test]
fn cold_runs_read_the_file_from_disk_and_warm_runs_do_not() {
    if !is_root() {
        return;
    }
    let _cache = CACHE.lock().unwrap_or_else(|e| e.into_inner());
    let (_dir, data) = data_file(16);
    let (_, result) = bench_cat("warm,cold", &data);
    let variants = result["variants"].as_array().unwrap();
    assert_eq!(variants[0]["cache"], "warm");
    assert_eq!(variants[1]["cache"], "cold");
    for run in result["runs"].as_array().unwrap() {
        let read = run["read_bytes"].as_u64().unwrap();
        if run["variant"] == 1 {
            // The whole file, plus cat and libc, from a dropped cache.
            assert!(read >= 16 << 20, "cold run read only {read} bytes");
            assert!(run["major_faults"].as_u64().unwrap() >= 1);
        } else {
            assert!(read < 1 << 20, "warm run read {read} bytes");
        }
    }
    // A warm run follows a cold run of the same command, which left the
    // cache warm: no re-warming was needed after the first warm-up.
    assert_eq!(result["rewarm_runs"], 0);
}

#[test]
fn selective_runs_evict_the_files_of_a_first_traced_run() {
    if !is_root() {
        return;
    }
    let _cache = CACHE.lock().unwrap_or_else(|e| e.into_inner());
    let (_dir, data) = data_file(8);
    let (stderr, result) = bench_cat("selective", &data);
    assert!(stderr.contains("tracing a cold start"), "{stderr}");
    for run in result["runs"].as_array().unwrap() {
        let read = run["read_bytes"].as_u64().unwrap();
        assert!(read >= 8 << 20, "selective run read only {read} bytes");
        assert!(run["still_resident_pages"].is_u64());
    }
}
