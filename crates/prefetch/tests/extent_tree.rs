//! The extent tree of a planned file is read ahead of its extents, as root
//! on a freshly mounted ext4 image (a loop device, so none of its metadata
//! is cached): a file of 1,200 one-page extents has its tree in four leaf
//! blocks, which debugfs names; reading the file's first page reads only
//! the first leaf, and a replay of a plan holding that one page leaves all
//! four in the loop device's page cache (cachestat on the device itself).

use coldstart_prefetch::replay::{Method, ReplayOptions, replay};
use coldstart_testkit::{LoopMount, ext4_image, run_ok, skip};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::AtomicBool;

const PAGE: u64 = 4096;
const IMAGE_BYTES: u64 = 64 << 20;
/// Every other page written: each one its own extent.
const EXTENTS: u64 = 1200;

/// The physical blocks of the file's leaf extent blocks, from
/// `debugfs -R "dump_extents PATH"`: the entries of level 0 of a tree of
/// depth 1 ("0/ 1   2/  4   680 - 1359  4114   680").
fn leaf_blocks(image: &Path, path_in_image: &str) -> Vec<u64> {
    let out = run_ok(
        Command::new("debugfs")
            .arg("-R")
            .arg(format!("dump_extents {path_in_image}"))
            .arg(image),
    );
    let text = String::from_utf8(out.stdout).unwrap();
    text.lines()
        .filter_map(|line| {
            let words: Vec<&str> = line.split_whitespace().collect();
            // "0/", "1", "2/", "4", "680", "-", "1359", "4114", "680"
            (words.len() >= 8 && words[0] == "0/" && words[1] == "1")
                .then(|| words[7].parse().ok())
                .flatten()
        })
        .collect()
}

/// Whether `block` (4 KiB, the image's block size) is in the loop device's
/// page cache, by cachestat(2). Not mincore: ext4 reads tree blocks as
/// buffers, which leaves their pages present but not marked up to date,
/// and mincore counts only up-to-date pages (it found none here).
fn block_cached(device: &std::fs::File, block: u64) -> bool {
    coldstart_testkit::cached_pages(device, block * PAGE, PAGE)
        .expect("cachestat on the loop device")
        == 1
}

#[test]
fn a_replay_reads_the_whole_extent_tree_of_a_planned_file() {
    // SAFETY: geteuid never fails.
    if unsafe { libc::geteuid() } != 0 {
        skip("mounting a test filesystem needs root");
        return;
    }
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let Some((image, point)) = ext4_image(dir.path(), IMAGE_BYTES, &[]) else {
        return;
    };
    {
        let Some(_writable) = LoopMount::new(&image, &point, "rw") else {
            skip("cannot mount a loop device here");
            return;
        };
        let file = std::fs::File::create(point.join("f")).unwrap();
        for extent in 0..EXTENTS {
            file.write_at(&[b'x'; PAGE as usize], 2 * extent * PAGE)
                .unwrap();
        }
        file.sync_all().unwrap();
    }
    let leaves = leaf_blocks(&image, "/f");
    assert_eq!(
        leaves.len(),
        4,
        "{EXTENTS} extents, 340 a leaf block: debugfs says {leaves:?}"
    );
    let path = point.join("f");

    // The oracle tells the two apart: on a fresh mount, reading the first
    // page reads the first leaf and none of the others.
    {
        let mounted = LoopMount::new(&image, &point, "ro,noatime").expect("mount again");
        let device = std::fs::File::open(mounted.device()).unwrap();
        assert!(leaves.iter().all(|&b| !block_cached(&device, b)));
        let file = std::fs::File::open(&path).unwrap();
        // SAFETY: plain fadvise on our own descriptor: one page, no window.
        unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_RANDOM) };
        file.read_at(&mut [0u8; 1], 0).unwrap();
        let cached: Vec<bool> = leaves.iter().map(|&b| block_cached(&device, b)).collect();
        assert_eq!(cached, [true, false, false, false], "leaves {leaves:?}");
    }

    // A replay of that one page reads them all.
    let mounted = LoopMount::new(&image, &point, "ro,noatime").expect("mount again");
    let device = std::fs::File::open(mounted.device()).unwrap();
    assert!(leaves.iter().all(|&b| !block_cached(&device, b)));
    let planned = coldstart_prefetch::handmade::file(&path).unwrap();
    let plan = coldstart_prefetch::handmade::plan(PAGE, vec![planned], &[(0, 0, 1)]);
    let options = ReplayOptions {
        threads: 2,
        method: Method::Readahead,
        window_bytes: 0,
        no_symlinks: false,
        open_as: None,
    };
    let report = replay(&plan, &options, &AtomicBool::new(false));
    assert_eq!(report.extent_trees, 1, "{report:?}");
    let cached: Vec<u64> = leaves
        .iter()
        .copied()
        .filter(|&b| block_cached(&device, b))
        .collect();
    assert_eq!(cached, leaves, "leaf blocks cached after the replay");
}
