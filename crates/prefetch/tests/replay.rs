//! Replaying plans on temporary files: after a replay exactly the planned
//! pages are resident (mincore, by the test itself), for every method;
//! changed and missing files are skipped; resident extents are left alone;
//! lookups are counted, missing ones never stop the replay.

use coldstart_prefetch::replay::{Method, ReplayOptions, replay};
use coldstart_prefetch::{Lookup, Plan, PlanFile};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::atomic::AtomicBool;

const PAGE: u64 = 4096;

/// Tests evict and check the same files' pages; run them one at a time so
/// that none sees another's readahead.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// On the disk (tmpfs pages cannot be evicted), written back and evicted.
fn cold_file(dir: &Path, name: &str, pages: u64) -> PlanFile {
    let path = dir.join(name);
    coldstart_testkit::cold_file(&path, pages, PAGE);
    coldstart_prefetch::handmade::file(&path).unwrap()
}

/// Pages of `path` resident now, by mincore.
fn resident(path: &str) -> Vec<u64> {
    coldstart_testkit::resident_pages(Path::new(path))
}

/// readahead(2) and fadvise only start the reads, and mincore counts a page
/// once its read completed: wait (at most 5 s) for the expected pages, then
/// return what is resident.
fn settled(path: &str, expected: &[u64]) -> Vec<u64> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let now = resident(path);
        if expected.iter().all(|p| now.contains(p)) || std::time::Instant::now() > deadline {
            return now;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

fn plan(files: Vec<PlanFile>, extents: &[(usize, u64, u64)]) -> Plan {
    coldstart_prefetch::handmade::plan(PAGE, files, extents)
}

fn options(method: Method) -> ReplayOptions {
    ReplayOptions {
        threads: 4,
        method,
        window_bytes: 0,
        no_symlinks: false,
        open_as: None,
    }
}

#[test]
fn each_extent_method_makes_exactly_the_planned_pages_resident() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    for method in [
        Method::Readahead,
        Method::Fadvise,
        Method::Pread,
        Method::Populate,
    ] {
        let a = cold_file(dir.path(), "a", 256);
        let b = cold_file(dir.path(), "b", 64);
        assert!(resident(&a.path).is_empty() && resident(&b.path).is_empty());
        let plan = plan(
            vec![a.clone(), b.clone()],
            &[(0, 10, 5), (1, 0, 3), (0, 200, 20), (1, 63, 1)],
        );
        let report = replay(&plan, &options(method), &AtomicBool::new(false));
        let expected_a: Vec<u64> = (10..15).chain(200..220).collect();
        assert_eq!(settled(&a.path, &expected_a), expected_a, "{method:?}");
        assert_eq!(
            settled(&b.path, &[0, 1, 2, 63]),
            vec![0, 1, 2, 63],
            "{method:?}"
        );
        assert_eq!(report.files_opened, 2);
        assert!(report.files_skipped.is_empty());
        assert_eq!(report.extents_requested, 4);
        assert_eq!(report.bytes_requested, 29 * PAGE);
        assert!(report.errors.is_empty(), "{:?}", report.errors);
    }
}

#[test]
fn a_window_waits_for_its_oldest_reads_and_reads_nothing_beyond_the_plan() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    for method in [Method::Readahead, Method::Fadvise] {
        let a = cold_file(dir.path(), "a", 2048);
        // 64 extents of 4 pages, 32 pages apart; a window of two of them on
        // one thread.
        let extents: Vec<(usize, u64, u64)> = (0..64).map(|i| (0, i * 32, 4)).collect();
        let plan = plan(vec![a.clone()], &extents);
        let options = ReplayOptions {
            threads: 1,
            method,
            window_bytes: 8 * PAGE,
            no_symlinks: false,
            open_as: None,
        };
        let report = replay(&plan, &options, &AtomicBool::new(false));
        // Each request beyond the first two waited for the oldest, so when
        // the replay returns every extent but the last two has been read,
        // with no settling.
        let now = resident(&a.path);
        let waited: Vec<u64> = (0..62).flat_map(|i| i * 32..i * 32 + 4).collect();
        assert!(
            waited.iter().all(|p| now.contains(p)),
            "{method:?}: not yet resident: {:?}",
            waited
                .iter()
                .filter(|p| !now.contains(p))
                .collect::<Vec<_>>()
        );
        assert_eq!(report.waits, 62, "{method:?}");
        assert_eq!(report.window_bytes, 8 * PAGE);
        // Waiting read nothing the plan does not name.
        let planned: Vec<u64> = (0..64).flat_map(|i| i * 32..i * 32 + 4).collect();
        assert_eq!(settled(&a.path, &planned), planned, "{method:?}");
    }
}

#[test]
fn the_peers_and_the_waiting_methods_keep_no_window() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let a = cold_file(dir.path(), "a", 64);
    let plan = plan(vec![a.clone()], &[(0, 0, 4), (0, 8, 4), (0, 16, 4)]);
    for method in [Method::Pread, Method::Populate, Method::WholeFile] {
        let options = ReplayOptions {
            threads: 1,
            method,
            window_bytes: PAGE,
            no_symlinks: false,
            open_as: None,
        };
        let report = replay(&plan, &options, &AtomicBool::new(false));
        assert_eq!((report.waits, report.window_bytes), (0, 0), "{method:?}");
    }
}

#[test]
fn whole_file_peers_read_every_planned_file_whole() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    for method in [Method::WholeFile, Method::TouchWhole] {
        let a = cold_file(dir.path(), "a", 100);
        let plan = plan(vec![a.clone()], &[(0, 5, 1)]);
        let report = replay(&plan, &options(method), &AtomicBool::new(false));
        let all: Vec<u64> = (0..100).collect();
        assert_eq!(settled(&a.path, &all), all, "{method:?}");
        assert_eq!(report.bytes_requested, 100 * PAGE);
    }
}

#[test]
fn changed_and_missing_files_are_skipped_and_the_rest_is_fetched() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let good = cold_file(dir.path(), "good", 32);
    let mut grown = cold_file(dir.path(), "grown", 32);
    grown.size -= PAGE;
    let mut touched = cold_file(dir.path(), "touched", 32);
    touched.mtime_ns = touched.mtime_ns.map(|t| t - 1);
    let mut missing = good.clone();
    missing.path = dir.path().join("missing").to_str().unwrap().to_string();
    let plan = plan(
        vec![
            good.clone(),
            grown.clone(),
            touched.clone(),
            missing.clone(),
        ],
        &[(0, 0, 4), (1, 0, 4), (2, 0, 4), (3, 0, 4)],
    );
    let report = replay(&plan, &options(Method::Readahead), &AtomicBool::new(false));
    assert_eq!(settled(&good.path, &[0, 1, 2, 3]), vec![0, 1, 2, 3]);
    assert!(
        resident(&grown.path).is_empty(),
        "a changed file is never read"
    );
    assert!(resident(&touched.path).is_empty());
    let mut reasons: Vec<(String, String)> = report
        .files_skipped
        .iter()
        .map(|s| (s.path.clone(), s.reason.clone()))
        .collect();
    reasons.sort();
    assert_eq!(reasons.len(), 3, "{reasons:?}");
    assert_eq!(reasons[0].0, grown.path);
    assert!(reasons[0].1.contains("changed since traced"), "{reasons:?}");
    assert_eq!(reasons[1].0, missing.path);
    assert_eq!(reasons[1].1, "missing");
    assert_eq!(reasons[2].0, touched.path);
    assert!(reasons[2].1.contains("modification time"), "{reasons:?}");
    assert_eq!(report.files_opened, 1);
    assert_eq!(report.extents_requested, 1);
}

#[test]
fn resident_extents_are_left_alone() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let a = cold_file(dir.path(), "a", 64);
    let plan = plan(vec![a.clone()], &[(0, 0, 8), (0, 32, 8)]);
    let first = replay(&plan, &options(Method::Pread), &AtomicBool::new(false));
    assert_eq!(first.extents_requested, 2);
    // The test owns the file, so cachestat may tell what is resident.
    let second = replay(&plan, &options(Method::Pread), &AtomicBool::new(false));
    assert_eq!(second.extents_requested, 0);
    assert_eq!(second.extents_resident, 2);
    assert_eq!(second.bytes_requested, 0);
}

#[test]
fn a_raised_stop_ends_the_replay_before_any_request() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let a = cold_file(dir.path(), "a", 16);
    let mut plan = plan(vec![a.clone()], &[(0, 0, 16)]);
    plan.lookups = vec![Lookup {
        path: a.path.clone(),
        ino: 1,
        need_ns: 0,
    }];
    let report = replay(&plan, &options(Method::Readahead), &AtomicBool::new(true));
    assert!(report.stopped);
    assert_eq!(report.extents_requested, 0);
    assert_eq!((report.lookups_done, report.lookups_missing), (0, 0));
    assert!(resident(&a.path).is_empty());
}

#[test]
fn lookups_are_made_and_counted_and_the_extents_still_fetched() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let a = cold_file(dir.path(), "a", 16);
    let subdirectory = dir.path().join("lib");
    std::fs::create_dir(&subdirectory).unwrap();
    std::fs::write(subdirectory.join("libx.so"), b"x").unwrap();
    let lookup = |path: &Path| Lookup {
        path: path.to_str().unwrap().to_string(),
        ino: std::fs::symlink_metadata(path).map_or(u64::MAX, |m| m.ino()),
        need_ns: 0,
    };
    // Read three days ago: relatime would mark a read of its entries now.
    let long_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(3 * 86_400);
    std::fs::File::open(&subdirectory)
        .unwrap()
        .set_times(std::fs::FileTimes::new().set_accessed(long_ago))
        .unwrap();
    let accessed = || {
        std::fs::metadata(&subdirectory)
            .unwrap()
            .accessed()
            .unwrap()
    };
    assert_eq!(accessed(), long_ago);
    let mut plan = plan(vec![a.clone()], &[(0, 0, 4), (0, 8, 2)]);
    plan.lookups = vec![
        lookup(&subdirectory),
        lookup(Path::new(&a.path)),
        lookup(&dir.path().join("gone")),
    ];
    let report = replay(&plan, &options(Method::Readahead), &AtomicBool::new(false));
    assert_eq!(report.lookups_done, 2);
    assert_eq!(report.lookups_missing, 1);
    assert_eq!(
        accessed(),
        long_ago,
        "the directory's entries are read without touching its access time"
    );
    assert!(!report.stopped);
    let expected = [0, 1, 2, 3, 8, 9];
    assert_eq!(settled(&a.path, &expected), expected);
    assert_eq!(report.files_opened, 1);
    assert_eq!(report.extents_requested, 2);
    assert!(report.errors.is_empty(), "{:?}", report.errors);

    // The whole-file peers make no lookups.
    let peer = replay(&plan, &options(Method::WholeFile), &AtomicBool::new(false));
    assert_eq!((peer.lookups_done, peer.lookups_missing), (0, 0));
}

#[test]
fn many_lookups_on_several_threads_are_each_counted_once() {
    let dir = tempfile::tempdir().unwrap();
    let mut lookups = Vec::new();
    for i in 0..300u32 {
        let path = dir.path().join(format!("f{i}"));
        // Every seventh name is never created.
        if i % 7 != 0 {
            std::fs::write(&path, b"x").unwrap();
        }
        lookups.push(Lookup {
            path: path.to_str().unwrap().to_string(),
            ino: u64::from(i),
            need_ns: i64::from(i % 13),
        });
    }
    let mut plan = plan(Vec::new(), &[]);
    plan.lookups = lookups;
    let report = replay(&plan, &options(Method::Readahead), &AtomicBool::new(false));
    assert_eq!(report.lookups_missing, 43, "0, 7, ..., 294");
    assert_eq!(report.lookups_done, 257);
    assert!(!report.stopped);

    // Stopped before it begins: nothing is looked up, and it says so.
    let stopped = replay(&plan, &options(Method::Readahead), &AtomicBool::new(true));
    assert_eq!((stopped.lookups_done, stopped.lookups_missing), (0, 0));
    assert!(stopped.stopped);
}

/// The build-id `readelf -n` prints for `path`.
fn readelf_build_id(path: &str) -> String {
    let out = std::process::Command::new("readelf")
        .args(["-n", path])
        .output()
        .expect("readelf (binutils) runs");
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|l| l.trim().strip_prefix("Build ID: "))
        .unwrap_or_else(|| panic!("{path} has no build-id: {text}"))
        .to_string()
}

#[test]
fn build_ids_are_read_as_readelf_reads_them() {
    for path in ["/bin/ls", "/usr/lib/x86_64-linux-gnu/libc.so.6"] {
        let file = std::fs::File::open(path).unwrap();
        assert_eq!(
            coldstart_system::build_id::build_id_of_open(&file),
            Some(readelf_build_id(path)),
            "{path}"
        );
    }
    let text = std::fs::File::open("/etc/passwd").unwrap();
    assert_eq!(coldstart_system::build_id::build_id_of_open(&text), None);
}

#[test]
fn a_file_with_another_build_id_is_skipped() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    // A copy of /bin/ls, keeping its size and mtime; the plan claims a build-id
    // one digit off.
    let copy = dir.path().join("ls");
    std::fs::copy("/bin/ls", &copy).unwrap();
    let meta = std::fs::metadata(&copy).unwrap();
    let real = readelf_build_id("/bin/ls");
    let mut wrong = real.clone();
    wrong.replace_range(0..1, if real.starts_with('0') { "1" } else { "0" });
    let file = |build_id: &str| PlanFile {
        path: copy.to_str().unwrap().to_string(),
        size: meta.size(),
        mtime_ns: Some(meta.mtime() * 1_000_000_000 + meta.mtime_nsec()),
        build_id: Some(build_id.to_string()),
    };
    let stop = AtomicBool::new(false);
    let good = replay(
        &plan(vec![file(&real)], &[(0, 0, 1)]),
        &options(Method::Readahead),
        &stop,
    );
    assert!(good.files_skipped.is_empty(), "{:?}", good.files_skipped);
    // The build-id is checked beside the workers, so the first extent may
    // already have been requested; the file is still reported as changed.
    let bad = replay(
        &plan(vec![file(&wrong)], &[(0, 0, 1)]),
        &options(Method::Readahead),
        &stop,
    );
    assert_eq!(bad.files_skipped.len(), 1);
    assert_eq!(bad.files_opened, 0);
    assert!(
        bad.files_skipped[0]
            .reason
            .contains(&format!("the plan says {wrong}")),
        "{:?}",
        bad.files_skipped
    );
}

#[test]
fn an_extent_larger_than_one_readahead_call_reads_is_read_whole() {
    // The kernel reads at most max(max_sectors_kb, read_ahead_kb) per
    // readahead(2) or fadvise(WILLNEED) call and drops the rest; an extent
    // half as large again must still come in whole, by mincore.
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let dev = std::fs::metadata(dir.path()).unwrap().dev();
    let cap = coldstart_system::readahead::call_cap_bytes_of_device(dev).unwrap_or(8 << 20);
    let pages = cap / PAGE * 3 / 2;
    for method in [Method::Readahead, Method::Fadvise] {
        let big = cold_file(dir.path(), &format!("big-{}", method.as_str()), pages);
        let plan = plan(vec![big.clone()], &[(0, 0, pages)]);
        let report = replay(&plan, &options(method), &AtomicBool::new(false));
        assert_eq!(report.extents_requested, 1, "{method:?}");
        let all: Vec<u64> = (0..pages).collect();
        assert_eq!(settled(&big.path, &all).len() as u64, pages, "{method:?}");
    }
}
