//! Root tests of the test filesystems of `coldstart_testkit::filesystems`:
//! each builder's files read back with the bytes and sizes asked for, on
//! the filesystem asked for (coreutils' `stat -f` says which), cold where
//! the filesystem can drop pages (mincore says); btrfs subvolumes give two
//! files one inode number; an overlay reads its lower layer's files; a
//! bind mount in a private namespace is seen inside only; touch_files
//! touches, as a non-root user, the pages it says on every filesystem.
//! Each test ends checking that nothing it mounted stays mounted.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use coldstart_testkit::filesystems::{
    Btrfs, Overlay, Squashfs, TestFile, Tmpfs, Xfs, build_touch_files, in_mount_namespace,
    loop_devices_under, mounts_under, page_size, parse_touches,
};
use coldstart_testkit::{resident_pages, run_ok, skip, world_readable_temp_dir};

/// The user touch_files runs as: coldstart traces programs as a non-root
/// user, who must reach everything the builders make.
const NOBODY: u32 = 65534;

/// The inode number btrfs gives the first object made in a subvolume
/// (BTRFS_FIRST_FREE_OBJECTID); the subvolume's own root is 256.
const BTRFS_FIRST_FREE_INODE: u64 = 257;
const BTRFS_SUBVOLUME_ROOT_INODE: u64 = 256;

/// The bytes a file of `seed` and `pages` must read back as, from the rule
/// `file_bytes` documents, written out again here: byte `i` of page `p` is
/// `(101 * seed + 13 * p + i) % 251`.
fn expected_bytes(seed: u8, pages: u64) -> Vec<u8> {
    let page = page_size();
    let mut bytes = Vec::new();
    for p in 0..pages {
        for i in 0..page {
            bytes.push(((101 * u64::from(seed) + 13 * p + i) % 251) as u8);
        }
    }
    bytes
}

/// Reads `path` back: the size and every byte asked for, mode 644.
fn assert_reads_back(path: &Path, seed: u8, pages: u64) {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(
        bytes.len() as u64,
        pages * page_size(),
        "{}",
        path.display()
    );
    assert!(
        bytes == expected_bytes(seed, pages),
        "{}: bytes differ from seed {seed}",
        path.display()
    );
    assert_eq!(mode(path), 0o644, "{}", path.display());
}

fn assert_files_read_back(files: &[TestFile], asked: &[(&str, u64)], under: &Path) {
    assert_eq!(files.len(), asked.len());
    for (index, (file, (name, pages))) in files.iter().zip(asked).enumerate() {
        assert_eq!(file.path, under.join(name));
        assert_eq!(file.pages, *pages);
        assert_eq!(usize::from(file.seed), index + 1);
        assert_reads_back(&file.path, file.seed, file.pages);
    }
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o7777
}

/// The filesystem type coreutils names for `path` (`stat -f -c %T`).
fn filesystem_type(path: &Path) -> String {
    let out = run_ok(Command::new("stat").args(["-f", "-c", "%T"]).arg(path));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn assert_cold(paths: &[&Path]) {
    for path in paths {
        assert_eq!(
            resident_pages(path),
            Vec::<u64>::new(),
            "{}",
            path.display()
        );
    }
}

/// Nothing mounted at or under `root`, no loop device backed by a file
/// under it (given a moment to be released), and `root` itself gone.
fn assert_nothing_left(root: &Path) {
    assert_eq!(mounts_under(root), Vec::<PathBuf>::new(), "still mounted");
    let deadline = Instant::now() + Duration::from_secs(5);
    while !loop_devices_under(root).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        loop_devices_under(root),
        Vec::<PathBuf>::new(),
        "loop devices left"
    );
    assert!(!root.exists(), "{} left behind", root.display());
}

fn is_root() -> bool {
    // SAFETY: geteuid never fails.
    unsafe { libc::geteuid() == 0 }
}

#[test]
fn btrfs_subvolumes_give_their_first_files_one_inode_number() {
    let asked = [
        ("sub1", "first.dat", 24),
        ("sub2", "first.dat", 24),
        ("sub1", "second.dat", 32),
    ];
    let Some(mut btrfs) = Btrfs::new(&asked) else {
        return;
    };
    let root = btrfs.root().to_path_buf();
    let point = btrfs.mount_point().to_path_buf();
    assert_eq!(filesystem_type(&point), "btrfs");
    assert_eq!(mode(&point), 0o755);
    assert_eq!(btrfs.subvolumes, [point.join("sub1"), point.join("sub2")]);
    for subvolume in &btrfs.subvolumes {
        assert_eq!(mode(subvolume), 0o755);
        assert_eq!(
            std::fs::metadata(subvolume).unwrap().ino(),
            BTRFS_SUBVOLUME_ROOT_INODE
        );
    }
    for (index, (file, (subvolume, name, pages))) in btrfs.files.iter().zip(&asked).enumerate() {
        assert_eq!(file.path, point.join(subvolume).join(name));
        assert_eq!((file.pages, usize::from(file.seed)), (*pages, index + 1));
        assert_reads_back(&file.path, file.seed, file.pages);
    }
    let stat = |file: &TestFile| std::fs::metadata(&file.path).unwrap();
    let (first, other, second) = (
        stat(&btrfs.files[0]),
        stat(&btrfs.files[1]),
        stat(&btrfs.files[2]),
    );
    assert_eq!(first.ino(), BTRFS_FIRST_FREE_INODE);
    assert_eq!(other.ino(), BTRFS_FIRST_FREE_INODE);
    assert_ne!(
        first.dev(),
        other.dev(),
        "each subvolume has its own device number"
    );
    assert_eq!(second.dev(), first.dev());
    assert_ne!(second.ino(), first.ino());

    let device = btrfs.loop_device();
    assert!(
        device.to_string_lossy().starts_with("/dev/loop"),
        "{device:?}"
    );
    let backing = std::fs::read_to_string(
        Path::new("/sys/block")
            .join(device.file_name().unwrap())
            .join("loop/backing_file"),
    )
    .unwrap();
    assert!(
        Path::new(backing.trim_end()).starts_with(&root),
        "{backing}"
    );

    // Read back above, so resident now; a remount makes them cold again.
    btrfs.remount();
    let paths: Vec<&Path> = btrfs.files.iter().map(|f| f.path.as_path()).collect();
    assert_cold(&paths);
    drop(btrfs);
    assert_nothing_left(&root);
}

#[test]
fn xfs_files_read_back_cold() {
    let asked = [("a.dat", 32), ("dir/b.dat", 21)];
    let Some(mut xfs) = Xfs::new(&asked) else {
        return;
    };
    let root = xfs.root().to_path_buf();
    assert_eq!(filesystem_type(xfs.mount_point()), "xfs");
    assert_eq!(mode(xfs.mount_point()), 0o755);
    assert_eq!(mode(&xfs.mount_point().join("dir")), 0o755);
    let paths: Vec<PathBuf> = xfs.files.iter().map(|f| f.path.clone()).collect();
    let paths: Vec<&Path> = paths.iter().map(PathBuf::as_path).collect();
    assert_cold(&paths);
    assert_files_read_back(&xfs.files, &asked, xfs.mount_point());
    assert!(xfs.loop_device().to_string_lossy().starts_with("/dev/loop"));
    xfs.remount();
    assert_cold(&paths);
    drop(xfs);
    assert_nothing_left(&root);
}

#[test]
fn squashfs_files_read_back_from_a_read_only_image() {
    let asked = [("a.dat", 40), ("lib/b.so", 33)];
    let Some(squashfs) = Squashfs::new(&asked) else {
        return;
    };
    let root = squashfs.root().to_path_buf();
    let point = squashfs.mount_point().to_path_buf();
    assert_eq!(filesystem_type(&point), "squashfs");
    assert_eq!(mode(&point), 0o755);
    let paths: Vec<&Path> = squashfs.files.iter().map(|f| f.path.as_path()).collect();
    assert_cold(&paths);
    assert_files_read_back(&squashfs.files, &asked, &point);
    let write = std::fs::File::create(point.join("new"));
    assert_eq!(
        write.err().and_then(|e| e.raw_os_error()),
        Some(libc::EROFS)
    );
    drop(squashfs);
    assert_nothing_left(&root);
}

#[test]
fn overlay_merged_files_read_the_lower_layer() {
    let asked = [("a.dat", 32), ("bin/b", 24)];
    let Some(mut overlay) = Overlay::new(&asked) else {
        return;
    };
    let root = overlay.root().to_path_buf();
    let merged = overlay.merged_dir().to_path_buf();
    let lower = overlay.lower_dir().to_path_buf();
    assert_eq!(filesystem_type(&merged), "overlayfs");
    assert_eq!(filesystem_type(&lower), "ext2/ext3");
    assert_eq!(filesystem_type(overlay.upper_mount()), "ext2/ext3");
    assert_eq!(mode(&merged), 0o755);
    let lowers: Vec<&Path> = overlay.files.iter().map(|f| f.lower.as_path()).collect();
    assert_cold(&lowers);
    for (index, (file, (name, pages))) in overlay.files.iter().zip(&asked).enumerate() {
        assert_eq!(file.merged, merged.join(name));
        assert_eq!(file.lower, lower.join(name));
        assert_eq!((file.pages, usize::from(file.seed)), (*pages, index + 1));
        assert_reads_back(&file.merged, file.seed, file.pages);
        assert_eq!(
            std::fs::read(&file.merged).unwrap(),
            std::fs::read(&file.lower).unwrap()
        );
    }
    // Reading through the overlay filled the lower files' cache (the
    // overlay has none of its own); a remount empties it.
    assert!(!resident_pages(&overlay.files[0].lower).is_empty());
    overlay.remount();
    let lowers: Vec<&Path> = overlay.files.iter().map(|f| f.lower.as_path()).collect();
    assert_cold(&lowers);
    assert_reads_back(&overlay.files[1].merged, 2, 24);
    // The lower layer is mounted read-only: nothing the test does through
    // the overlay can change it.
    let write = std::fs::File::create(lower.join("new"));
    assert_eq!(
        write.err().and_then(|e| e.raw_os_error()),
        Some(libc::EROFS)
    );
    drop(overlay);
    assert_nothing_left(&root);
}

#[test]
fn tmpfs_files_read_back_resident() {
    let asked = [("a.dat", 16), ("b.dat", 25)];
    let Some(tmpfs) = Tmpfs::new(&asked) else {
        return;
    };
    let root = tmpfs.root().to_path_buf();
    assert_eq!(filesystem_type(tmpfs.mount_point()), "tmpfs");
    assert_eq!(mode(tmpfs.mount_point()), 0o755);
    assert_files_read_back(&tmpfs.files, &asked, tmpfs.mount_point());
    for file in &tmpfs.files {
        // tmpfs pages live only in the cache.
        assert_eq!(
            resident_pages(&file.path),
            (0..file.pages).collect::<Vec<_>>()
        );
    }
    drop(tmpfs);
    assert_nothing_left(&root);
}

#[test]
fn a_namespace_bind_mount_is_seen_inside_only() {
    if !is_root() {
        skip("a mount namespace needs root");
        return;
    }
    if Command::new("unshare").arg("--version").output().is_err() {
        skip("unshare (util-linux) is not installed");
        return;
    }
    let dir = world_readable_temp_dir("coldstart-namespace-");
    let source = dir.path().join("source");
    std::fs::create_dir(&source).unwrap();
    let bytes = expected_bytes(7, 3);
    std::fs::write(source.join("file"), &bytes).unwrap();
    // A space and shell syntax in the path: both must reach mount as they are.
    let target = dir.path().join("seen here;$(false)");
    std::fs::create_dir(&target).unwrap();
    let inside = target.join("file");
    let command = ["cat".to_string(), inside.to_string_lossy().into_owned()];
    let out = run_ok(&mut in_mount_namespace(&source, &target, &command));
    assert!(out.stdout == bytes, "cat inside read other bytes");
    assert!(!inside.exists(), "the bind mount leaked to the host");
    assert_eq!(std::fs::read_dir(&target).unwrap().count(), 0);

    // Arguments reach the program as they are, not as shell text.
    let marker = dir.path().join("injected");
    let tricky = [
        "printf".to_string(),
        "%s\\n".to_string(),
        "a b".to_string(),
        format!("$(touch {})", marker.display()),
        ";".to_string(),
    ];
    let out = run_ok(&mut in_mount_namespace(&source, &target, &tricky));
    let expected = format!("a b\n$(touch {})\n;\n", marker.display());
    assert_eq!(String::from_utf8_lossy(&out.stdout), expected);
    assert!(!marker.exists());

    let root = dir.path().to_path_buf();
    assert_eq!(mounts_under(&root), Vec::<PathBuf>::new());
    drop(dir);
    assert_nothing_left(&root);
}

/// The touches touch_files makes of each file, in order.
fn expected_touches(files: &[String]) -> Vec<(String, u64, String)> {
    files
        .iter()
        .flat_map(|file| {
            [(1, "mmap"), (5, "mmap"), (9, "mmap"), (20, "pread")]
                .map(|(page, kind)| (file.clone(), page, kind.to_string()))
        })
        .collect()
}

/// Runs touch_files as [`NOBODY`] on `files`: its touches, or a panic
/// with its output.
fn touch_as_nobody(program: &Path, files: &[String]) -> Vec<(String, u64, String)> {
    let out = run_ok(Command::new(program).args(files).uid(NOBODY).gid(NOBODY));
    parse_touches(&String::from_utf8_lossy(&out.stdout))
}

/// Cold before, touched by a non-root user, each touched page resident
/// after in `cache_paths` (where the pages live: the lower file for an
/// overlay).
fn assert_touched(program: &Path, files: &[String], cache_paths: &[&Path]) {
    assert_cold(cache_paths);
    assert_eq!(touch_as_nobody(program, files), expected_touches(files));
    for path in cache_paths {
        let resident = resident_pages(path);
        for page in [1, 5, 9, 20] {
            assert!(
                resident.contains(&page),
                "{}: page {page} not resident: {resident:?}",
                path.display()
            );
        }
    }
}

fn strings(files: &[TestFile]) -> Vec<String> {
    files
        .iter()
        .map(|f| f.path.to_string_lossy().into_owned())
        .collect()
}

#[test]
fn touch_files_touches_its_pages_on_every_filesystem() {
    if !is_root() {
        skip("the test filesystems need root");
        return;
    }
    let tools = world_readable_temp_dir("coldstart-touch-");
    let program = build_touch_files(tools.path());
    let files = [("app.dat", 32)];

    let Some(btrfs) = Btrfs::new(&[("sub1", "app.dat", 32), ("sub2", "app.dat", 32)]) else {
        return;
    };
    let paths: Vec<&Path> = btrfs.files.iter().map(|f| f.path.as_path()).collect();
    assert_touched(&program, &strings(&btrfs.files), &paths);

    let Some(mut xfs) = Xfs::new(&files) else {
        return;
    };
    assert_touched(&program, &strings(&xfs.files), &[&xfs.files[0].path]);

    let Some(squashfs) = Squashfs::new(&files) else {
        return;
    };
    assert_touched(
        &program,
        &strings(&squashfs.files),
        &[&squashfs.files[0].path],
    );

    let Some(overlay) = Overlay::new(&files) else {
        return;
    };
    let merged = [overlay.files[0].merged.to_string_lossy().into_owned()];
    assert_touched(&program, &merged, &[&overlay.files[0].lower]);

    let Some(tmpfs) = Tmpfs::new(&[("app.dat", 32), ("small.dat", 4)]) else {
        return;
    };
    let on_tmpfs = strings(&tmpfs.files[..1]);
    assert_eq!(
        touch_as_nobody(&program, &on_tmpfs),
        expected_touches(&on_tmpfs)
    );

    // In a namespace the file is at a path the host does not have.
    xfs.remount();
    let target = tools.path().join("seen");
    std::fs::create_dir(&target).unwrap();
    let inside = target.join("app.dat").to_string_lossy().into_owned();
    let command = [program.to_string_lossy().into_owned(), inside.clone()];
    let out = run_ok(&mut in_mount_namespace(
        xfs.mount_point(),
        &target,
        &command,
    ));
    let touches = parse_touches(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(touches, expected_touches(std::slice::from_ref(&inside)));
    assert!(resident_pages(&xfs.files[0].path).contains(&20));

    // Errors name the file: the touches of the files before it are out.
    let small = tmpfs.files[1].path.to_string_lossy().into_owned();
    let missing = tools.path().join("missing").to_string_lossy().into_owned();
    for bad in [small, missing] {
        let out = Command::new(&program)
            .args([on_tmpfs[0].clone(), bad.clone()])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{bad}");
        assert!(String::from_utf8_lossy(&out.stderr).contains(&bad), "{bad}");
        let printed = parse_touches(&String::from_utf8_lossy(&out.stdout));
        assert_eq!(printed, expected_touches(&on_tmpfs));
    }

    let roots: Vec<PathBuf> = [
        btrfs.root(),
        xfs.root(),
        squashfs.root(),
        overlay.root(),
        tmpfs.root(),
        tools.path(),
    ]
    .map(Path::to_path_buf)
    .to_vec();
    drop((btrfs, xfs, squashfs, overlay, tmpfs, tools));
    for root in &roots {
        assert_nothing_left(root);
    }
}

#[test]
fn parse_touches_reads_paths_with_spaces_and_skips_other_lines() {
    let stdout = "touch /a b/c 1 mmap\nnot a touch\ntouch /d 20 pread\n";
    assert_eq!(
        parse_touches(stdout),
        [
            ("/a b/c".to_string(), 1, "mmap".to_string()),
            ("/d".to_string(), 20, "pread".to_string()),
        ]
    );
}
