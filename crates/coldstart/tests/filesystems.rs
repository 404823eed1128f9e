//! `coldstart trace` on every filesystem programs run from, end to end as
//! root, on images the tests make (coldstart-testkit's `filesystems`): a
//! program touches pages 1, 5 and 9 of each file through a mapping and
//! page 20 with pread, and says so on its output, the oracle. Every file it
//! touched must be named by its real path with exactly those pages, no two
//! files may share a row, and what the trace says was read must be what
//! mincore finds resident afterwards.

use coldstart_testkit::filesystems::{
    Btrfs, ImageFilesystem, Overlay, Squashfs, TestFile, Tmpfs, Xfs, build_touch_files,
    parse_touches,
};
use coldstart_testkit::{can_trace, copy_executable, run_ok as run, world_readable_temp_dir};
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Output};

const PAGES: u64 = 32;

fn coldstart() -> Command {
    Command::new(env!("CARGO_BIN_EXE_coldstart"))
}

fn json(output: &Output) -> Value {
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}",
            String::from_utf8_lossy(&output.stdout)
        )
    })
}

fn pages(extents: &Value) -> BTreeSet<u64> {
    extents
        .as_array()
        .expect("extent list")
        .iter()
        .flat_map(|e| e[0].as_u64().unwrap()..=e[1].as_u64().unwrap())
        .collect()
}

/// What one traced start of the touch program over `files` recorded.
struct Traced {
    /// The directory holding the profile, when this run owns it.
    _dir: Option<tempfile::TempDir>,
    /// The profile the run went into.
    db: std::path::PathBuf,
    /// What the trace printed on standard error (the program's output and
    /// coldstart's warnings).
    log: String,
    report: Value,
    /// The program's own record: (path, page, how).
    touches: Vec<(String, u64, String)>,
    /// Each file's pages resident right after the run (mincore), before
    /// `report` reads the files for their ELF sections.
    resident: Vec<BTreeSet<u64>>,
}

/// One traced or served start at a time. Traces set the devices'
/// readahead. And a served start's prefetcher, running while another test
/// traces, looks to that trace like the system-wide service serving its
/// program: threads of the prefetcher's name, created during the run by a
/// process that was running before it. `plan` then refuses the run as a
/// served start.
static ONE_TRACE: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Traces the touch program over `files` (each evicted first), readahead
/// off, as user nobody, and reports the run with its pages.
fn trace_touches(files: &[&Path]) -> Traced {
    trace_touches_with(files, &[])
}

/// [`trace_touches`] with more `coldstart trace` options.
fn trace_touches_with(files: &[&Path], options: &[&str]) -> Traced {
    let dir = world_readable_temp_dir("coldstart-fs-test");
    let program = build_touch_files(dir.path());
    let mut argv = vec![program.into_os_string()];
    argv.extend(files.iter().map(|f| f.as_os_str().to_owned()));
    let mut who = vec!["--as-user", "65534"];
    who.extend(options);
    let mut traced = trace_program(dir.path(), files, files, &argv, &who);
    traced._dir = Some(dir);
    traced
}

/// Traces `argv` (which runs the touch program over files it names as
/// `files` are named here), evicting `files` first, readahead off, and
/// reports the run with its pages. `who` says whom the program runs as.
fn trace_program(
    dir: &Path,
    files: &[&Path],
    named_as: &[&Path],
    argv: &[std::ffi::OsString],
    who: &[&str],
) -> Traced {
    let _one = ONE_TRACE.lock().unwrap_or_else(|e| e.into_inner());
    let db = dir.join("t.db");
    let mut command = coldstart();
    command
        .args(["trace", "--json", "--read-ahead-kb", "0", "-o"])
        .arg(&db);
    for file in files {
        command.arg("--evict").arg(file);
    }
    match who {
        ["--as-user", uid, options @ ..] => command
            .env("SUDO_UID", uid)
            .env("SUDO_GID", uid)
            .args(options),
        _ => command.args(who),
    };
    command.arg("--").args(argv);
    let out = run(&mut command);
    let summary = json(&out);
    assert_eq!(summary["exit_code"], 0, "{summary:#}");
    let log = String::from_utf8_lossy(&out.stderr).into_owned();
    let touches = parse_touches(&log);
    assert_eq!(touches.len(), 4 * named_as.len(), "{touches:?}");
    let resident = files
        .iter()
        .map(|f| coldstart_testkit::resident_pages(f).into_iter().collect())
        .collect();
    let report = json(&run(coldstart()
        .arg("report")
        .arg(&db)
        .args(["--json", "--pages"])));
    Traced {
        _dir: None,
        db,
        log,
        report,
        touches,
        resident,
    }
}

/// [`served_start_warms`] on the image's own files, made cold by mounting
/// the image again.
fn served_after_remount(
    traced: &Traced,
    mut fs: impl std::ops::DerefMut<Target = ImageFilesystem>,
) {
    let paths: Vec<std::path::PathBuf> = fs.files.iter().map(|f| f.path.clone()).collect();
    let paths: Vec<&Path> = paths.iter().map(|p| p.as_path()).collect();
    served_start_warms(traced, &paths, || fs.remount());
}

/// Compiles a plan from the traced run and serves a cold start of a
/// program that touches nothing (`true`) with it, prefetching before the
/// start (`--wait`): afterwards every page the traced program touched in
/// each file (as the file's path here names it) must be resident, brought
/// in by the prefetcher alone. `make_cold` takes every page of the files
/// out of the cache first.
fn served_start_warms(traced: &Traced, files: &[&Path], make_cold: impl FnOnce()) {
    let _one = ONE_TRACE.lock().unwrap_or_else(|e| e.into_inner());
    let plan = traced.db.with_extension("plan");
    run(coldstart().arg("plan").arg(&traced.db).arg("-o").arg(&plan));
    make_cold();
    for file in files {
        assert_eq!(
            coldstart_testkit::resident_pages(file),
            Vec::<u64>::new(),
            "{} is cold before the served start",
            file.display()
        );
    }
    let out = run(coldstart()
        .args(["run", "--wait", "--plan"])
        .arg(&plan)
        .args(["--", "true"]));
    for file in files {
        let resident: BTreeSet<u64> = coldstart_testkit::resident_pages(file)
            .into_iter()
            .collect();
        for page in [1, 5, 9, 20] {
            assert!(
                resident.contains(&page),
                "page {page} of {} not prefetched: {resident:?}\n{}",
                file.display(),
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}

/// The report's row of the file at `path`: exactly one.
fn row<'a>(report: &'a Value, path: &Path) -> &'a Value {
    let rows: Vec<&Value> = report["files"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["path"].as_str() == path.to_str())
        .collect();
    assert_eq!(rows.len(), 1, "rows named {}: {rows:#?}", path.display());
    rows[0]
}

/// The pages the program says it touched in `path`, by how.
fn touched(traced: &Traced, path: &Path, how: &str) -> BTreeSet<u64> {
    traced
        .touches
        .iter()
        .filter(|(p, _, h)| Path::new(p) == path && h == how)
        .map(|(_, page, _)| *page)
        .collect()
}

/// Every file is named by its path with the pages the program touched,
/// accessed by pread and faulted through the mapping, and read exactly
/// what mincore finds resident. With `whole_blocks` (squashfs), a first
/// fault brings in the block around it and fault-around maps the other
/// touched pages without a fault: those are mapped, not faulted. Without,
/// each touched page is read and faulted alone.
fn check_files(traced: &Traced, files: &[TestFile], whole_blocks: bool) {
    for (file, resident) in files.iter().zip(&traced.resident) {
        let r = row(&traced.report, &file.path);
        assert_eq!(r["resolved"], true, "{r:#}");
        let p = &r["pages"];
        let mapped_touches = touched(traced, &file.path, "mmap");
        let faulted = pages(&p["faulted"]);
        if whole_blocks {
            assert!(!faulted.is_empty() && faulted.is_subset(&mapped_touches));
            let mapped: BTreeSet<u64> = pages(&p["mapped"]).union(&faulted).copied().collect();
            assert!(mapped.is_superset(&mapped_touches), "{mapped:?}");
        } else {
            assert_eq!(faulted, mapped_touches, "{}", file.path.display());
        }
        assert_eq!(
            pages(&p["accessed"]),
            touched(traced, &file.path, "pread"),
            "{}",
            file.path.display()
        );
        let read = pages(&p["read"]);
        assert_eq!(
            &read, resident,
            "read per the trace vs resident per mincore"
        );
        if !whole_blocks {
            let all: BTreeSet<u64> = traced
                .touches
                .iter()
                .filter(|(p, _, _)| Path::new(p) == file.path)
                .map(|(_, page, _)| *page)
                .collect();
            assert_eq!(read, all, "{}", file.path.display());
        }
    }
    // No two files share a row: each row's (dev, ino) is its own.
    let keys: Vec<(u64, u64)> = traced.report["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f["dev"].as_u64().unwrap(), f["ino"].as_u64().unwrap()))
        .collect();
    let unique: BTreeSet<&(u64, u64)> = keys.iter().collect();
    assert_eq!(unique.len(), keys.len(), "rows sharing a file: {keys:?}");
}

/// A btrfs image whose subvolumes sub1 and sub2 each hold one file, the
/// first of each (so both are inode 257); None after a skip.
fn two_subvolume_files() -> Option<Btrfs> {
    if !can_trace() {
        return None;
    }
    Btrfs::new(&[("sub1", "a.bin", PAGES), ("sub2", "b.bin", PAGES)])
}

#[test]
fn btrfs_subvolumes_files_of_the_same_inode_number_are_two_named_files() {
    let Some(fs) = two_subvolume_files() else {
        return;
    };
    use std::os::unix::fs::MetadataExt;
    let (a, b) = (&fs.files[0].path, &fs.files[1].path);
    let (ma, mb) = (std::fs::metadata(a).unwrap(), std::fs::metadata(b).unwrap());
    assert_eq!(
        ma.ino(),
        mb.ino(),
        "the image gives both the same inode number"
    );
    let traced = trace_touches(&[a, b]);
    check_files(&traced, &fs.files, false);
    assert_eq!(row(&traced.report, a)["dev"].as_u64(), Some(ma.dev()));
    assert_eq!(row(&traced.report, b)["dev"].as_u64(), Some(mb.dev()));
    served_after_remount(&traced, fs);
}

#[test]
fn user_faults_on_btrfs_land_on_the_subvolume_files() {
    let Some(fs) = two_subvolume_files() else {
        return;
    };
    let paths: Vec<&Path> = fs.files.iter().map(|f| f.path.as_path()).collect();
    // /proc/PID/maps gives btrfs's superblock device, not the subvolume's:
    // the touches must still join the files' own rows.
    let traced = trace_touches_with(&paths, &["--user-faults"]);
    check_files(&traced, &fs.files, false);
    for file in &fs.files {
        assert_eq!(row(&traced.report, &file.path)["pages_touched"], 4);
    }
    let unplaced: Vec<&Value> = traced.report["files"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| {
            f["path"]
                .as_str()
                .is_some_and(|p| p.contains("could not tell"))
        })
        .collect();
    assert!(unplaced.is_empty(), "{unplaced:#?}");
}

#[test]
fn xfs_files_are_named_with_their_pages() {
    if !can_trace() {
        return;
    }
    let Some(fs) = Xfs::new(&[("a.bin", PAGES), ("b.bin", PAGES)]) else {
        return;
    };
    let paths: Vec<&Path> = fs.files.iter().map(|f| f.path.as_path()).collect();
    let traced = trace_touches(&paths);
    check_files(&traced, &fs.files, false);
    // xfs's metadata is in its own buffer cache: the trace says it cannot
    // see it.
    assert!(
        traced.log.contains("xfs on ")
            && traced.log.contains("this trace does not see those reads"),
        "{}",
        traced.log
    );
    served_after_remount(&traced, fs);
}

#[test]
fn squashfs_files_are_named_and_read_in_whole_blocks() {
    if !can_trace() {
        return;
    }
    let Some(fs) = Squashfs::new(&[("a.bin", PAGES), ("b.bin", PAGES)]) else {
        return;
    };
    let paths: Vec<&Path> = fs.files.iter().map(|f| f.path.as_path()).collect();
    let traced = trace_touches(&paths);
    // squashfs decompresses a whole 128 KiB block into the page cache.
    check_files(&traced, &fs.files, true);
    for file in &fs.files {
        let read = pages(&row(&traced.report, &file.path)["pages"]["read"]);
        assert_eq!(read, (0..PAGES).collect(), "{}", file.path.display());
    }
    served_after_remount(&traced, fs);
}

#[test]
fn overlay_files_are_their_layer_files_opened_through_the_overlay() {
    if !can_trace() {
        return;
    }
    let Some(fs) = Overlay::new(&[("a.bin", PAGES), ("b.bin", PAGES)]) else {
        return;
    };
    let merged: Vec<&Path> = fs.files.iter().map(|f| f.merged.as_path()).collect();
    let traced = trace_touches(&merged);
    // The pages are the lower layer's: its files are the rows, each
    // keeping the overlay path the program opened.
    let lower: Vec<TestFile> = fs
        .files
        .iter()
        .map(|f| TestFile {
            path: f.lower.clone(),
            pages: f.pages,
            seed: f.seed,
        })
        .collect();
    // The program touched the merged paths; the oracle's paths are the
    // layer files behind them.
    // mincore through the overlay path sees the layer file's pages: what
    // the run left resident, taken before `report` read the files.
    let by_layer = Traced {
        _dir: None,
        db: traced.db.clone(),
        log: traced.log.clone(),
        report: traced.report.clone(),
        touches: traced
            .touches
            .iter()
            .map(|(path, page, how)| {
                let file = fs
                    .files
                    .iter()
                    .find(|f| f.merged == Path::new(path))
                    .unwrap();
                (file.lower.display().to_string(), *page, how.clone())
            })
            .collect(),
        resident: traced.resident.clone(),
    };
    check_files(&by_layer, &lower, false);
    for file in &fs.files {
        let r = row(&traced.report, &file.lower);
        assert_eq!(r["opened_as"].as_str(), file.merged.to_str(), "{r:#}");
        assert_eq!(r["kind"], "file");
    }
    // Served: the plan names the layer files; the program reads their pages
    // through the overlay.
    let merged: Vec<std::path::PathBuf> = fs.files.iter().map(|f| f.merged.clone()).collect();
    let mut fs = fs;
    let paths: Vec<&Path> = merged.iter().map(|p| p.as_path()).collect();
    served_start_warms(&traced, &paths, || fs.remount());
}

#[test]
fn a_file_opened_in_another_mount_namespace_is_named_by_its_path_here() {
    if !can_trace() {
        return;
    }
    use coldstart_testkit::filesystems::in_mount_namespace;
    let dir = world_readable_temp_dir("coldstart-fs-ns-test");
    let program = build_touch_files(dir.path());
    // The file, on the disk filesystem of /var/tmp, and an empty directory
    // where only the program's namespace shows it.
    let source = dir.path().join("source");
    let inside = dir.path().join("inside");
    for d in [&source, &inside] {
        std::fs::create_dir(d).unwrap();
        std::fs::set_permissions(d, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    }
    let here = source.join("data.bin");
    coldstart_testkit::cold_file(&here, PAGES, 4096);
    std::fs::set_permissions(&here, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    let there = inside.join("data.bin");
    assert!(!there.exists(), "the namespace's path names nothing here");
    // unshare and mount need root; the program drops to nobody inside.
    let command = in_mount_namespace(
        &source,
        &inside,
        &[
            "setpriv".into(),
            "--reuid=65534".into(),
            "--regid=65534".into(),
            "--clear-groups".into(),
            program.display().to_string(),
            there.display().to_string(),
        ],
    );
    let mut argv = vec![command.get_program().to_owned()];
    argv.extend(command.get_args().map(|a| a.to_owned()));
    let traced = trace_program(dir.path(), &[&here], &[&there], &argv, &["--as-root"]);
    // The oracle's record names the namespace's path; the row is the file here.
    let by_path_here = Traced {
        _dir: None,
        db: traced.db.clone(),
        log: traced.log.clone(),
        report: traced.report.clone(),
        touches: traced
            .touches
            .iter()
            .map(|(_, page, how)| (here.display().to_string(), *page, how.clone()))
            .collect(),
        resident: traced.resident.clone(),
    };
    let file = TestFile {
        path: here.clone(),
        pages: PAGES,
        seed: 0,
    };
    check_files(&by_path_here, std::slice::from_ref(&file), false);
    let r = row(&traced.report, &here);
    assert_eq!(r["opened_as"].as_str(), there.to_str(), "{r:#}");
    let named_there = traced.report["files"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["path"].as_str() == there.to_str())
        .count();
    assert_eq!(named_there, 0, "no row names the namespace's path");
    // The plan names the path here, which the prefetcher can open.
    served_start_warms(&traced, &[&here], || {
        run(coldstart().arg("evict").arg(&here));
    });
}

#[test]
fn tmpfs_files_are_named_as_memory_and_never_planned() {
    if !can_trace() {
        return;
    }
    let Some(fs) = Tmpfs::new(&[("a.bin", PAGES)]) else {
        return;
    };
    let path = fs.files[0].path.clone();
    // tmpfs pages are never read from a device, and its faults and reads
    // pass the page-cache tracepoints by; only fault-around, which maps
    // the pages around the first fault, is seen.
    let traced = trace_touches(&[&path]);
    let r = row(&traced.report, &path);
    assert_eq!(r["kind"], "memory", "{r:#}");
    assert_eq!(r["pages_read"], 0);
    let mapped = pages(&r["pages"]["mapped"]);
    assert!(
        mapped.is_superset(&touched(&traced, &path, "mmap")),
        "{mapped:?}"
    );
    let plan = traced.db.with_extension("plan");
    run(coldstart().arg("plan").arg(&traced.db).arg("-o").arg(&plan));
    let text = std::fs::read_to_string(&plan).unwrap();
    assert!(!text.contains(path.to_str().unwrap()), "{text}");
}

#[test]
fn a_program_on_btrfs_is_recorded_with_its_filesystems_own_read_ahead() {
    let Some(fs) = two_subvolume_files() else {
        return;
    };
    // The oracle: btrfs's own backing device info, found by the image's
    // UUID, set to a value no device here has. The UUID is probed from
    // the device (-p): blkid's cache can still hold the UUID of an earlier
    // image on the same loop device.
    let uuid = String::from_utf8(
        coldstart_testkit::run_ok(
            Command::new("blkid")
                .args(["-p", "-s", "UUID", "-o", "value"])
                .arg(fs.loop_device()),
        )
        .stdout,
    )
    .unwrap();
    let setting = format!("/sys/fs/btrfs/{}/bdi/read_ahead_kb", uuid.trim());
    // Another test's trace sets every device's readahead and puts it back
    // when it ends: set this one only while no other trace runs.
    let _one = ONE_TRACE.lock().unwrap_or_else(|e| e.into_inner());
    // A multiple of the page: the kernel keeps it in pages.
    std::fs::write(&setting, "1232").unwrap();
    let dir = world_readable_temp_dir("coldstart-fs-ra-test");
    let program = fs.subvolumes[0].join("touch_files");
    copy_executable(&build_touch_files(dir.path()), &program);
    let db = dir.path().join("t.db");
    run(coldstart()
        .args(["trace", "--json", "--cache", "warm", "-o"])
        .arg(&db)
        .arg("--")
        .arg(&program)
        .env("SUDO_UID", "65534")
        .env("SUDO_GID", "65534"));
    let report = json(&run(coldstart().arg("report").arg(&db).arg("--json")));
    assert_eq!(report["run"]["read_ahead_kb"], 1232, "{:#}", report["run"]);
}

#[test]
fn a_program_on_an_overlay_is_recorded_with_its_layers_read_ahead() {
    if !can_trace() {
        return;
    }
    let Some(fs) = Overlay::new(&[("a.bin", PAGES)]) else {
        return;
    };
    // Written through the overlay, the program is copied up: its pages are
    // the upper layer's, on the upper image's loop device.
    let dir = world_readable_temp_dir("coldstart-fs-ra-test");
    let program = fs.merged_dir().join("touch_files");
    copy_executable(&build_touch_files(dir.path()), &program);
    let layer = fs.upper_mount().join("upper/touch_files");
    assert!(layer.exists(), "copied up to {}", layer.display());
    let device = coldstart_testkit::run_ok(
        Command::new("findmnt")
            .args(["-n", "-o", "MAJ:MIN", "--target"])
            .arg(fs.upper_mount()),
    );
    let device = String::from_utf8(device.stdout).unwrap();
    let setting = format!("/sys/dev/block/{}/queue/read_ahead_kb", device.trim());
    let _one = ONE_TRACE.lock().unwrap_or_else(|e| e.into_inner());
    let before = std::fs::read_to_string(&setting).unwrap();
    std::fs::write(&setting, "1232").unwrap();
    let db = dir.path().join("t.db");
    let traced = coldstart()
        .args(["trace", "--json", "--cache", "warm", "-o"])
        .arg(&db)
        .arg("--")
        .arg(&program)
        .env("SUDO_UID", "65534")
        .env("SUDO_GID", "65534")
        .output();
    std::fs::write(&setting, before.trim()).unwrap();
    assert!(traced.unwrap().status.success());
    let report = json(&run(coldstart().arg("report").arg(&db).arg("--json")));
    assert_eq!(report["run"]["read_ahead_kb"], 1232, "{:#}", report["run"]);
}
