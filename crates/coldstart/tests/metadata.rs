//! Filesystem metadata in the miss accounting, end to end as root: on a
//! freshly mounted ext4 image (a loop device, so nothing of its inode
//! tables and directories is cached), a traced start through coldstart-run
//! reads metadata; the report's `prefetcher_metadata` and
//! `program_metadata` pages must add up to what the loop device's own page
//! cache gained over the start, counted by cachestat on the device itself.

use coldstart_prefetch::{PlanFile, format};
use coldstart_testkit::{LoopMount, can_trace, ext4_image, run_ok, skip, world_readable_temp_dir};
use serde_json::Value;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

const DIRECTORIES: usize = 16;
const FILES_PER_DIRECTORY: usize = 40;
const PAGE: u64 = 4096;
const IMAGE_BYTES: u64 = 64 << 20;

fn cached_pages(device: &Path) -> u64 {
    let file = std::fs::File::open(device).unwrap();
    coldstart_testkit::cached_pages(&file, 0, IMAGE_BYTES).expect("cachestat on the loop device")
}

fn files(point: &Path) -> Vec<PathBuf> {
    (0..DIRECTORIES)
        .flat_map(|d| {
            (0..FILES_PER_DIRECTORY).map(move |f| point.join(format!("d{d}")).join(format!("f{f}")))
        })
        .collect()
}

#[test]
fn metadata_pages_add_up_to_what_the_block_device_cache_gained() {
    if !can_trace() {
        return;
    }
    let dir = world_readable_temp_dir("coldstart-metadata-test");
    let Some((image, point)) = ext4_image(dir.path(), IMAGE_BYTES, &[]) else {
        return;
    };
    // The plan: the first file of each directory, its one page.
    let planned: Vec<PlanFile>;
    {
        let Some(_writable) = LoopMount::new(&image, &point, "rw") else {
            skip("cannot mount a loop device here");
            return;
        };
        std::fs::set_permissions(&point, std::fs::Permissions::from_mode(0o755)).unwrap();
        for d in 0..DIRECTORIES {
            std::fs::create_dir(point.join(format!("d{d}"))).unwrap();
        }
        for path in files(&point) {
            std::fs::write(&path, vec![b'x'; PAGE as usize]).unwrap();
        }
        // The plan, from this mount: looking the files up after the next
        // would read the metadata the start is to read.
        planned = files(&point)
            .iter()
            .step_by(FILES_PER_DIRECTORY)
            .map(|path| coldstart_prefetch::handmade::file(path).unwrap())
            .collect();
    }
    // Mounted again, read-only (no atime or journal writes): nothing of its
    // metadata beyond what mounting reads is cached, and nothing here looks
    // at its files before the start.
    let mounted = LoopMount::new(&image, &point, "ro,noatime").expect("mount the image again");
    let device = mounted.device();
    let all = files(&point);
    let extents: Vec<(usize, u64, u64)> = (0..planned.len()).map(|i| (i, 0, 1)).collect();
    let plan = dir.path().join("meta.plan");
    std::fs::write(
        &plan,
        format::write(&coldstart_prefetch::handmade::plan(PAGE, planned, &extents)),
    )
    .unwrap();
    std::fs::set_permissions(&plan, std::fs::Permissions::from_mode(0o644)).unwrap();

    let db = dir.path().join("served.db");
    let before = cached_pages(&device);
    run_ok(
        Command::new(env!("CARGO_BIN_EXE_coldstart"))
            .arg("trace")
            .arg("-o")
            .arg(&db)
            // Not the default cold cache: dropping the whole cache would
            // drop the device's cache too, under the count taken before.
            // The image's files are cold anyway, freshly mounted; evicting
            // one of them would look it up before the start, so the plan
            // (outside the image) is what is evicted.
            .arg("--evict")
            .arg(&plan)
            .arg("--")
            .arg(env!("CARGO_BIN_EXE_coldstart-run"))
            .arg("--plan")
            .arg(&plan)
            .args(["--", "cat"])
            .args(&all),
    );
    let gained = cached_pages(&device) - before;
    assert!(
        gained > 0,
        "the start read no metadata of {}",
        device.display()
    );

    let out = run_ok(
        Command::new(env!("CARGO_BIN_EXE_coldstart"))
            .arg("report")
            .arg(&db)
            .arg("--json"),
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let misses = &report["misses"];
    let pages = |key: &str| {
        misses[key]["pages"]
            .as_u64()
            .unwrap_or_else(|| panic!("{key}: {misses:#}"))
    };
    // The loop device's own row: the start may also have read metadata of
    // the filesystem holding the programs and the plan, when something
    // (an earlier cold start) dropped it from the cache.
    let number = {
        use std::os::unix::fs::MetadataExt;
        let rdev = std::fs::metadata(&device).unwrap().rdev();
        format!("{}:{}", libc::major(rdev), libc::minor(rdev))
    };
    let row = misses["metadata_devices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["device"] == number.as_str())
        .unwrap_or_else(|| panic!("no metadata of {number}: {misses:#}"));
    let (prefetcher, program) = (
        row["prefetcher"]["pages"].as_u64().unwrap(),
        row["program"]["pages"].as_u64().unwrap(),
    );
    assert_eq!(
        prefetcher + program,
        gained,
        "metadata pages of {number} in the report (prefetcher {prefetcher}, program {program}) \
         against the pages {} gained in its own cache",
        device.display()
    );
    // The devices' rows add up to the totals.
    for side in ["prefetcher", "program"] {
        let sum: u64 = misses["metadata_devices"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d[side]["pages"].as_u64().unwrap())
            .sum();
        assert_eq!(sum, pages(&format!("{side}_metadata")), "{misses:#}");
    }
    // The prefetcher opened one file per directory before the program got
    // far: it read metadata too.
    assert!(prefetcher > 0, "{misses:#}");
    // Metadata is apart from the file pages and within the in-kernel pages.
    for side in ["prefetcher", "program"] {
        assert!(
            pages(&format!("{side}_in_kernel")) >= pages(&format!("{side}_metadata")),
            "{misses:#}"
        );
    }
}
