//! Metadata warming end to end as root, on a freshly mounted ext4 image (a
//! loop device, so none of its inode tables is cached): a cold start that
//! looks up directories whose inodes lie in different inode table blocks
//! records an inode load for each, with its path (the oracle: the inode
//! numbers stat gives); the plan lists them as lookups; and a start served
//! by that plan through `coldstart-run --wait` finds them cached, where
//! one served by the same plan without its lookups loads them itself.

use coldstart_analyze::loaded::LoadedRun;
use coldstart_prefetch::format;
use coldstart_profile::Profile;
use coldstart_testkit::{LoopMount, can_trace, ext4_image, run_ok, skip, world_readable_temp_dir};
use serde_json::Value;
use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Directories the program looks up, each after this many files, so that
/// no two share an inode table readahead (32 blocks of 16 inodes).
const TARGETS: usize = 5;
const FILLER: usize = 600;
const IMAGE_BYTES: u64 = 64 << 20;

fn coldstart(args: &[&std::ffi::OsStr]) -> Vec<u8> {
    run_ok(Command::new(env!("CARGO_BIN_EXE_coldstart")).args(args)).stdout
}

/// A cold traced start of `stat` on the targets, through `prefix` (the
/// launcher and its options) when given.
fn trace(db: &Path, prefix: &[&std::ffi::OsStr], targets: &[PathBuf]) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_coldstart"));
    command.arg("trace").arg("-o").arg(db).arg("--");
    command
        .args(prefix)
        .args(["stat", "-c", "%i"])
        .args(targets);
    run_ok(&mut command);
}

fn misses(db: &Path) -> Value {
    let out = coldstart(&["report".as_ref(), db.as_os_str(), "--json".as_ref()]);
    let report: Value = serde_json::from_slice(&out).unwrap();
    report["misses"].clone()
}

#[test]
fn a_plan_warms_the_inodes_a_cold_start_loaded() {
    if !can_trace() {
        return;
    }
    if !Path::new("/sys/kernel/tracing/events/ext4/ext4_load_inode").exists() {
        skip("this kernel has no ext4:ext4_load_inode tracepoint");
        return;
    }
    let dir = world_readable_temp_dir("coldstart-lookups-test");
    let Some((image, point)) = ext4_image(dir.path(), IMAGE_BYTES, &["-I", "256", "-N", "8192"])
    else {
        return;
    };
    let targets: Vec<PathBuf> = (0..TARGETS)
        .map(|k| point.join(format!("target{k}")))
        .collect();
    {
        let Some(_writable) = LoopMount::new(&image, &point, "rw") else {
            skip("cannot mount a loop device here");
            return;
        };
        std::fs::set_permissions(&point, std::fs::Permissions::from_mode(0o755)).unwrap();
        // One directory of fillers, then a target, so each target's inode
        // is FILLER numbers past the last.
        let fillers = point.join("fillers");
        std::fs::create_dir(&fillers).unwrap();
        for (k, target) in targets.iter().enumerate() {
            for f in 0..FILLER {
                std::fs::write(fillers.join(format!("{k}-{f}")), b"").unwrap();
            }
            std::fs::create_dir(target).unwrap();
        }
    }
    let remount = || LoopMount::new(&image, &point, "ro,noatime").expect("mount the image again");

    // The oracle: each target's inode number, from stat.
    let inodes: BTreeMap<String, u64> = {
        let _mounted = remount();
        targets
            .iter()
            .map(|t| {
                (
                    t.to_str().unwrap().to_string(),
                    std::fs::symlink_metadata(t).unwrap().ino(),
                )
            })
            .collect()
    };
    let mut sorted: Vec<u64> = inodes.values().copied().collect();
    sorted.sort_unstable();
    assert!(
        sorted.windows(2).all(|w| w[1] - w[0] >= 512),
        "targets share inode table readahead: {inodes:?}"
    );

    // A cold start records each target's inode load, with its path.
    let seed = dir.path().join("seed.db");
    {
        let _mounted = remount();
        trace(&seed, &[], &targets);
    }
    let profile = Profile::open(&seed).unwrap();
    let run = LoadedRun::load(&profile, None).unwrap();
    let files: BTreeMap<_, _> = run.files.iter().map(|f| (f.id, f)).collect();
    let loaded: BTreeMap<String, u64> = run
        .inode_loads
        .iter()
        .filter(|l| run.in_tree(l.pid))
        .filter_map(|l| {
            let file = files[&l.file_id];
            let path = file.path.clone()?;
            inodes.contains_key(&path).then_some((path, file.ino))
        })
        .collect();
    assert_eq!(
        loaded, inodes,
        "the targets' inode loads, by path and inode"
    );

    // The plan looks them up, in the order the start needed them.
    let plan_path = dir.path().join("stat.plan");
    coldstart(&[
        "plan".as_ref(),
        seed.as_os_str(),
        "-o".as_ref(),
        plan_path.as_os_str(),
    ]);
    let plan = format::parse(&std::fs::read_to_string(&plan_path).unwrap(), &plan_path).unwrap();
    let planned: BTreeMap<String, u64> = plan
        .lookups
        .iter()
        .filter(|l| inodes.contains_key(&l.path))
        .map(|l| (l.path.clone(), l.ino))
        .collect();
    assert_eq!(planned, inodes);
    assert!(
        plan.lookups
            .windows(2)
            .all(|w| (w[0].need_ns, w[0].ino) <= (w[1].need_ns, w[1].ino))
    );
    std::fs::set_permissions(&plan_path, std::fs::Permissions::from_mode(0o644)).unwrap();

    // The same plan without its lookups.
    let mut bare = plan.clone();
    bare.lookups.clear();
    let bare_path = dir.path().join("bare.plan");
    std::fs::write(&bare_path, format::write(&bare)).unwrap();
    std::fs::set_permissions(&bare_path, std::fs::Permissions::from_mode(0o644)).unwrap();

    let served = |plan: &Path, name: &str| -> Value {
        let db = dir.path().join(name);
        let _mounted = remount();
        trace(
            &db,
            &[
                env!("CARGO_BIN_EXE_coldstart-run").as_ref(),
                "--wait".as_ref(),
                "--plan".as_ref(),
                plan.as_os_str(),
                "--".as_ref(),
            ],
            &targets,
        );
        misses(&db)
    };
    let program_targets = |misses: &Value| -> usize {
        misses["program_inode_paths"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| inodes.contains_key(p.as_str().unwrap()))
            .count()
    };
    let warmed = served(&plan_path, "warmed.db");
    assert_eq!(
        program_targets(&warmed),
        0,
        "with the lookups warmed first, the program loads none of the targets: {warmed:#}"
    );
    assert!(
        warmed["prefetcher_inode_loads"].as_u64().unwrap() >= TARGETS as u64,
        "{warmed:#}"
    );
    let cold = served(&bare_path, "bare.db");
    assert_eq!(
        program_targets(&cold),
        TARGETS,
        "without lookups, the program loads every target itself: {cold:#}"
    );
}
