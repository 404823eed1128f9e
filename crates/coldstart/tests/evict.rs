//! `coldstart evict` end to end on temporary files, with residency checked by
//! the test's own mincore(2), independently of the code under test.

use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::AsRawFd;
use std::path::Path;
use std::process::{Command, Output, Stdio};

const PAGE: u64 = 4096;

fn coldstart() -> Command {
    Command::new(env!("CARGO_BIN_EXE_coldstart"))
}

fn json(output: &Output) -> Value {
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}\nstderr: {}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

/// `evict --all` empties the whole cache: the other tests, which check what
/// is resident, must not run meanwhile.
static WHOLE_CACHE: std::sync::RwLock<()> = std::sync::RwLock::new(());

/// On the disk, not tmpfs: tmpfs pages cannot be evicted.
fn tempdir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("coldstart-evict-test")
        .tempdir_in("/var/tmp")
        .expect("temp dir")
}

/// A file of `pages` pages, written back to disk and read into the cache.
fn cached_file(path: &Path, pages: u64) {
    let mut file = std::fs::File::create(path).unwrap();
    let block: Vec<u8> = (0..PAGE).map(|i| (i % 251) as u8).collect();
    for _ in 0..pages {
        file.write_all(&block).unwrap();
    }
    file.sync_all().unwrap();
    let mut sink = Vec::new();
    std::fs::File::open(path)
        .unwrap()
        .read_to_end(&mut sink)
        .unwrap();
}

/// How many pages of `path` are resident, by mincore.
fn resident(path: &Path) -> u64 {
    coldstart_testkit::resident_pages(path).len() as u64
}

#[test]
fn evicting_a_file_empties_its_cache_pages() {
    let _cache = WHOLE_CACHE.read().unwrap_or_else(|e| e.into_inner());
    let dir = tempdir();
    let path = dir.path().join("data");
    cached_file(&path, 300);
    assert_eq!(resident(&path), 300, "the file was read into the cache");

    let out = coldstart()
        .arg("evict")
        .arg("--json")
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        resident(&path),
        0,
        "nothing of the file is resident after evict"
    );
    let report = json(&out);
    assert_eq!(report["mode"], "evict");
    let file = &report["files"][0];
    assert_eq!(file["path"], path.to_str().unwrap());
    assert_eq!(file["pages"], 300);
    assert_eq!(file["size"], 300 * PAGE);
    assert_eq!(file["resident_before"], 300);
    assert_eq!(file["resident_after"], 0);
    assert_eq!(file["mapped_by"], Value::Array(vec![]));
}

#[test]
fn check_reports_residency_and_evicts_nothing() {
    let _cache = WHOLE_CACHE.read().unwrap_or_else(|e| e.into_inner());
    let dir = tempdir();
    let path = dir.path().join("data");
    cached_file(&path, 64);
    // Drop the file, then read back pages 8..24 only.
    assert!(
        coldstart()
            .arg("evict")
            .arg(&path)
            .output()
            .unwrap()
            .status
            .success()
    );
    let mut file = std::fs::File::open(&path).unwrap();
    let mut buf = vec![0u8; 16 * PAGE as usize];
    // SAFETY: fadvise RANDOM keeps the kernel from reading around.
    unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_RANDOM) };
    std::io::Seek::seek(&mut file, std::io::SeekFrom::Start(8 * PAGE)).unwrap();
    file.read_exact(&mut buf).unwrap();
    let expected = resident(&path);
    assert!(expected >= 16, "the read pages are resident");

    let out = coldstart()
        .args(["evict", "--check", "--pages", "--json"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(out.status.success());
    let report = json(&out);
    assert_eq!(report["mode"], "check");
    let file = &report["files"][0];
    assert_eq!(file["resident_before"], expected);
    assert_eq!(file["resident_after"], Value::Null);
    let runs = file["resident_pages"].as_array().unwrap();
    let listed: u64 = runs
        .iter()
        .map(|r| r[1].as_u64().unwrap() - r[0].as_u64().unwrap() + 1)
        .sum();
    assert_eq!(listed, expected);
    assert!(
        runs.iter()
            .any(|r| r[0].as_u64().unwrap() <= 8 && r[1].as_u64().unwrap() >= 23),
        "pages 8-23 in one run: {runs:?}"
    );
    assert_eq!(resident(&path), expected, "--check evicted nothing");
}

#[test]
fn a_mapped_file_names_the_process_that_maps_it() {
    let _cache = WHOLE_CACHE.read().unwrap_or_else(|e| e.into_inner());
    let dir = tempdir();
    let path = dir.path().join("mapped");
    cached_file(&path, 64);
    // A process that maps the file, touches every page, says so and waits.
    let script = "import mmap,sys\n\
        f=open(sys.argv[1],'rb'); m=mmap.mmap(f.fileno(),0,prot=mmap.PROT_READ)\n\
        s=sum(m[i] for i in range(0,len(m),4096)); print('mapped',flush=True); sys.stdin.read()";
    let mut holder = Command::new("python3")
        .args(["-c", script])
        .arg(&path)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 runs");
    let mut line = String::new();
    BufReader::new(holder.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "mapped");

    let out = coldstart()
        .args(["evict", "--json"])
        .arg(&path)
        .output()
        .unwrap();
    let still = resident(&path);
    drop(holder.stdin.take());
    holder.wait().unwrap();

    assert!(out.status.success());
    let file = &json(&out)["files"][0];
    assert!(still > 0, "mapped pages stay resident");
    assert_eq!(file["resident_after"], still);
    let pids: Vec<u64> = file["mapped_by"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["pid"].as_u64().unwrap())
        .collect();
    assert_eq!(pids, vec![u64::from(holder.id())]);
    assert_eq!(file["mapped_by"][0]["comm"], "python3");
}

#[test]
fn directories_are_walked_and_bad_paths_are_errors_that_lose_nothing() {
    let _cache = WHOLE_CACHE.read().unwrap_or_else(|e| e.into_inner());
    let dir = tempdir();
    let nested = dir.path().join("a/b");
    std::fs::create_dir_all(&nested).unwrap();
    cached_file(&dir.path().join("one"), 10);
    cached_file(&nested.join("two"), 20);
    // A link back up must not make the walk loop.
    std::os::unix::fs::symlink(dir.path(), nested.join("loop")).unwrap();
    let missing = dir.path().join("missing");

    let out = coldstart()
        .args(["evict", "--json"])
        .arg(dir.path())
        .arg(&missing)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "a missing path fails the command"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(missing.to_str().unwrap()), "{stderr}");
    let report = json(&out);
    let mut paths: Vec<&str> = report["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    paths.sort();
    let one = dir.path().join("one");
    let two = nested.join("two");
    assert_eq!(paths, vec![two.to_str().unwrap(), one.to_str().unwrap()]);
    assert_eq!(report["totals"]["resident_before"], 30);
    assert_eq!(resident(&one), 0);
    assert_eq!(resident(&two), 0);
}

#[test]
fn evict_all_drops_the_whole_cache_or_explains_root() {
    let _cache = WHOLE_CACHE.write().unwrap_or_else(|e| e.into_inner());
    let dir = tempdir();
    let path = dir.path().join("data");
    cached_file(&path, 32);
    let out = coldstart().args(["evict", "--all"]).output().unwrap();
    // SAFETY: never fails.
    if unsafe { libc::geteuid() } == 0 {
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(resident(&path), 0);
    } else {
        assert_eq!(out.status.code(), Some(1));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("/proc/sys/vm/drop_caches"), "{stderr}");
        assert!(stderr.contains("root"), "{stderr}");
    }
}
