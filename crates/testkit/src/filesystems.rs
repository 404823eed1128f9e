//! Mounted test filesystems of every kind programs are run from (btrfs
//! with subvolumes, xfs, squashfs, an overlay over ext4, tmpfs) holding
//! files of known bytes, a runner for a private mount namespace with a
//! bind mount, and a C program that touches known pages of files: what
//! root tests of coldstart's tracer need to check that it names the right
//! file wherever the file lives.
//!
//! Every builder returns None after [`skip`] when a tool or the kernel's
//! support is missing. Each owns a temporary directory in /var/tmp that
//! every user can read (the traced program runs as a non-root user):
//! mount points and directories are mode 755, files 644. Dropping a
//! builder, unwinding from a failed test included, unmounts what it
//! mounted, the upper mount first, before its directory is removed.

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::{LoopMount, ext4_image, run_ok, skip, unmount, world_readable_temp_dir};

/// A file a builder wrote: where a program finds it, how many pages it
/// holds and the seed of its bytes (see [`file_bytes`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestFile {
    pub path: PathBuf,
    pub pages: u64,
    pub seed: u8,
}

/// The system's page size, in bytes.
pub fn page_size() -> u64 {
    // SAFETY: sysconf has no preconditions.
    unsafe { libc::sysconf(libc::_SC_PAGESIZE) as u64 }
}

/// The bytes of a test file of `pages` pages with `seed`: byte `i` of page
/// `p` is `(101 * seed + 13 * p + i) % 251`. Pages of one file differ from
/// each other (at one page size, a page's bytes shift by 13 + the page
/// size per page, modulo the prime 251) and files of different seeds
/// (below 251) from each other.
pub fn file_bytes(seed: u8, pages: u64) -> Vec<u8> {
    let page = page_size();
    (0..pages * page)
        .map(|offset| ((101 * u64::from(seed) + 13 * (offset / page) + offset % page) % 251) as u8)
        .collect()
}

/// A filesystem on a loop-mounted image in a temporary directory, with the
/// files a builder wrote on it: what [`Btrfs`], [`Xfs`] and [`Squashfs`]
/// build.
pub struct ImageFilesystem {
    // Fields drop in order: the mount before the directory holding it.
    image: MountedImage,
    /// The files, in the order they were asked for.
    pub files: Vec<TestFile>,
    dir: tempfile::TempDir,
}

impl ImageFilesystem {
    /// Where the image is mounted.
    pub fn mount_point(&self) -> &Path {
        &self.image.point
    }

    /// The loop device behind the mount (possibly another one after each
    /// [`remount`](Self::remount)).
    pub fn loop_device(&self) -> PathBuf {
        self.image.loop_device()
    }

    /// The temporary directory holding the image and the mount point.
    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    /// Unmounts and mounts the image again, which drops every cached page
    /// of this filesystem: its files are cold again.
    pub fn remount(&mut self) {
        self.image.remount();
    }
}

/// Btrfs on a loop-mounted image of 300 MiB with the subvolumes `sub1`,
/// `sub2` and any other the files name. A subvolume numbers its inodes
/// from 257 on its own, so the first file written into each has inode 257:
/// two files, one inode number, told apart only by the device number each
/// subvolume gets.
pub struct Btrfs {
    filesystem: ImageFilesystem,
    /// The subvolumes' paths, `sub1` and `sub2` first.
    pub subvolumes: Vec<PathBuf>,
}

/// Each image filesystem is its [`ImageFilesystem`] to its users: its
/// files, mount point, loop device and remount.
macro_rules! an_image_filesystem {
    ($name:ident) => {
        impl std::ops::Deref for $name {
            type Target = ImageFilesystem;
            fn deref(&self) -> &ImageFilesystem {
                &self.filesystem
            }
        }

        impl std::ops::DerefMut for $name {
            fn deref_mut(&mut self) -> &mut ImageFilesystem {
                &mut self.filesystem
            }
        }
    };
}

an_image_filesystem!(Btrfs);
an_image_filesystem!(Xfs);
an_image_filesystem!(Squashfs);

impl Btrfs {
    /// Makes the filesystem and writes each (subvolume, relative file
    /// name, pages) in order, with seeds 1, 2, ...; then unmounts and
    /// mounts it again, so that none of the files' pages is in the cache.
    pub fn new(files: &[(&str, &str, u64)]) -> Option<Btrfs> {
        or_skip(Btrfs::build(files))
    }

    fn build(files: &[(&str, &str, u64)]) -> Result<Btrfs, String> {
        require_root()?;
        let dir = world_readable_temp_dir("coldstart-btrfs-");
        let image = sized_image(dir.path(), "btrfs.img", 300 << 20);
        run_tool(
            Command::new("mkfs.btrfs").args(["-f", "-q"]).arg(&image),
            "btrfs-progs",
        )?;
        let mut image = MountedImage::mount(&image, &dir.path().join("mnt"), "noatime", "btrfs")?;
        let mut names: Vec<&str> = vec!["sub1", "sub2"];
        for (subvolume, _, _) in files {
            if !names.contains(subvolume) {
                names.push(subvolume);
            }
        }
        let mut subvolumes = Vec::new();
        for name in names {
            let path = image.point.join(relative(name));
            run_tool(
                Command::new("btrfs")
                    .args(["subvolume", "create"])
                    .arg(&path),
                "btrfs-progs",
            )?;
            open_to_all(&path);
            subvolumes.push(path);
        }
        let written = write_files(
            &image.point,
            files
                .iter()
                .map(|&(subvolume, name, pages)| (Path::new(subvolume).join(name), pages)),
        );
        image.remount();
        Ok(Btrfs {
            filesystem: ImageFilesystem {
                image,
                files: written,
                dir,
            },
            subvolumes,
        })
    }
}

/// Xfs on a loop-mounted image of 300 MiB (mkfs.xfs refuses smaller).
pub struct Xfs {
    filesystem: ImageFilesystem,
}

impl Xfs {
    /// Makes the filesystem and writes each (relative file name, pages)
    /// with seeds 1, 2, ...; then unmounts and mounts it again, so that
    /// none of the files' pages is in the cache.
    pub fn new(files: &[(&str, u64)]) -> Option<Xfs> {
        or_skip(Xfs::build(files))
    }

    fn build(files: &[(&str, u64)]) -> Result<Xfs, String> {
        require_root()?;
        let dir = world_readable_temp_dir("coldstart-xfs-");
        let image = sized_image(dir.path(), "xfs.img", 300 << 20);
        run_tool(
            Command::new("mkfs.xfs").args(["-f", "-q"]).arg(&image),
            "xfsprogs",
        )?;
        let mut image = MountedImage::mount(&image, &dir.path().join("mnt"), "noatime", "xfs")?;
        let written = write_files(&image.point, named(files));
        image.remount();
        Ok(Xfs {
            filesystem: ImageFilesystem {
                image,
                files: written,
                dir,
            },
        })
    }
}

/// A squashfs image packed by mksquashfs (default 128 KiB blocks) from a
/// directory of files, loop-mounted read-only.
pub struct Squashfs {
    filesystem: ImageFilesystem,
}

impl Squashfs {
    /// Writes each (relative file name, pages) with seeds 1, 2, ... into a
    /// directory, packs it and mounts the image: a fresh mount, so none of
    /// the files' pages is in the cache.
    pub fn new(files: &[(&str, u64)]) -> Option<Squashfs> {
        or_skip(Squashfs::build(files))
    }

    fn build(files: &[(&str, u64)]) -> Result<Squashfs, String> {
        require_root()?;
        let dir = world_readable_temp_dir("coldstart-squashfs-");
        let source = dir.path().join("source");
        make_dir(&source);
        let packed = write_files(&source, named(files));
        let image = dir.path().join("squashfs.img");
        run_tool(
            Command::new("mksquashfs").arg(&source).arg(&image).args([
                "-noappend",
                "-no-progress",
                "-quiet",
            ]),
            "squashfs-tools",
        )?;
        let image = MountedImage::mount(&image, &dir.path().join("mnt"), "ro", "squashfs")?;
        let files = packed
            .into_iter()
            .map(|file| TestFile {
                path: moved(&file.path, &source, &image.point),
                ..file
            })
            .collect();
        Ok(Squashfs {
            filesystem: ImageFilesystem { image, files, dir },
        })
    }
}

/// A file seen through an overlay mount, and the lower-layer file behind
/// it: the inode whose page cache a read of the merged file uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OverlayFile {
    /// Its path in the merged directory.
    pub merged: PathBuf,
    /// Its path on the lower layer's own mount.
    pub lower: PathBuf,
    pub pages: u64,
    pub seed: u8,
}

/// An overlay mount: the lower layer an ext4 image (mounted read-only)
/// holding the files, the upper and work directories on a second ext4
/// image (a disk filesystem, so that a file copied up can be evicted too),
/// merged on a directory of its own.
pub struct Overlay {
    // Fields drop in order: the overlay before its layers, the layers
    // before the directory holding them.
    overlay: Option<Mounted>,
    lower: MountedImage,
    upper: MountedImage,
    /// The files, in the order they were asked for.
    pub files: Vec<OverlayFile>,
    merged: PathBuf,
    dir: tempfile::TempDir,
}

impl Overlay {
    /// Bytes of each ext4 layer image.
    const LAYER_BYTES: u64 = 64 << 20;

    /// Makes both layers, writes each (relative file name, pages) with
    /// seeds 1, 2, ... into the lower one and mounts the overlay over
    /// freshly mounted layers, so that none of the files' pages is in the
    /// cache.
    pub fn new(files: &[(&str, u64)]) -> Option<Overlay> {
        if let Err(why) = require_root() {
            skip(&why);
            return None;
        }
        let dir = world_readable_temp_dir("coldstart-overlay-");
        let layer = |name: &str| {
            let layer_dir = dir.path().join(name);
            make_dir(&layer_dir);
            // ext4_image says why itself when it cannot.
            ext4_image(&layer_dir, Overlay::LAYER_BYTES, &[])
        };
        let lower = layer("lower")?;
        let upper = layer("upper")?;
        or_skip(Overlay::assemble(dir, lower, upper, files))
    }

    fn assemble(
        dir: tempfile::TempDir,
        (lower_image, lower_point): (PathBuf, PathBuf),
        (upper_image, upper_point): (PathBuf, PathBuf),
        files: &[(&str, u64)],
    ) -> Result<Overlay, String> {
        let mut lower = MountedImage::mount(&lower_image, &lower_point, "noatime", "ext4")?;
        let written = write_files(&lower.point, named(files));
        lower.options = "ro,noatime".to_string();
        lower.remount();
        let upper = MountedImage::mount(&upper_image, &upper_point, "noatime", "ext4")?;
        make_dir(&upper.point.join("upper"));
        make_dir(&upper.point.join("work"));
        let merged = dir.path().join("merged");
        make_dir(&merged);
        let mut overlay = Overlay {
            overlay: None,
            lower,
            upper,
            files: Vec::new(),
            merged,
            dir,
        };
        overlay.mount_overlay()?;
        overlay.files = written
            .into_iter()
            .map(|file| OverlayFile {
                merged: moved(&file.path, &overlay.lower.point, &overlay.merged),
                lower: file.path,
                pages: file.pages,
                seed: file.seed,
            })
            .collect();
        Ok(overlay)
    }

    /// Mounts the overlay on the merged directory; Err says why not.
    fn mount_overlay(&mut self) -> Result<(), String> {
        let lower = option_path(&self.lower.point);
        let upper = option_path(&self.upper.point.join("upper"));
        let work = option_path(&self.upper.point.join("work"));
        let options = format!("lowerdir={lower},upperdir={upper},workdir={work}");
        let mounted = Mounted::new("overlay", "overlay", &self.merged, &options)?;
        self.overlay = Some(mounted);
        Ok(())
    }

    /// The merged directory, where a program sees the files.
    pub fn merged_dir(&self) -> &Path {
        &self.merged
    }

    /// Where the lower layer's image is mounted.
    pub fn lower_dir(&self) -> &Path {
        &self.lower.point
    }

    /// Where the upper layer's image is mounted (it holds `upper/` and
    /// `work/`).
    pub fn upper_mount(&self) -> &Path {
        &self.upper.point
    }

    /// The temporary directory holding the images and mount points.
    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    /// Unmounts the overlay and both layers and mounts them again, which
    /// drops every cached page of the layers: the files are cold again.
    pub fn remount(&mut self) {
        drop(self.overlay.take());
        self.lower.unmount();
        self.upper.unmount();
        self.lower.mount_again();
        self.upper.mount_again();
        if let Err(why) = self.mount_overlay() {
            panic!("mount the overlay again: {why}");
        }
    }
}

/// A tmpfs of 64 MiB holding files. Its pages cannot be dropped: its
/// files are always resident.
pub struct Tmpfs {
    // Held to be unmounted on drop, before the directory goes.
    _mount: Mounted,
    point: PathBuf,
    /// The files, in the order they were asked for.
    pub files: Vec<TestFile>,
    dir: tempfile::TempDir,
}

impl Tmpfs {
    /// Mounts the tmpfs and writes each (relative file name, pages) with
    /// seeds 1, 2, ...
    pub fn new(files: &[(&str, u64)]) -> Option<Tmpfs> {
        or_skip(Tmpfs::build(files))
    }

    fn build(files: &[(&str, u64)]) -> Result<Tmpfs, String> {
        require_root()?;
        let dir = world_readable_temp_dir("coldstart-tmpfs-");
        let point = dir.path().join("mnt");
        make_dir(&point);
        let mount = Mounted::new("tmpfs", "tmpfs", &point, "size=64m,mode=755")?;
        let files = write_files(&point, named(files));
        Ok(Tmpfs {
            _mount: mount,
            point,
            files,
            dir,
        })
    }

    /// Where the tmpfs is mounted.
    pub fn mount_point(&self) -> &Path {
        &self.point
    }

    /// The temporary directory holding the mount point.
    pub fn root(&self) -> &Path {
        self.dir.path()
    }
}

/// The script run by [`in_mount_namespace`]: the paths and the command
/// come in as arguments, never as script text, so no character in them
/// can be taken for shell syntax.
const BIND_THEN_EXEC: &str = r#"mount --bind "$1" "$2" && shift 2 && exec "$@""#;

/// A command that runs `command` (program, then arguments) in a new
/// private mount namespace where `bind_source` is bind-mounted on
/// `bind_target`: the program sees the source's files under a path that,
/// outside, shows whatever `bind_target` holds on the host (an empty
/// directory, say). `unshare -m --propagation private sh -c 'mount --bind
/// "$1" "$2" && shift 2 && exec "$@"' sh SOURCE TARGET COMMAND...`. It
/// needs root (unshare and mount) and runs the program as root; the bind
/// mount goes with the namespace when the program exits.
pub fn in_mount_namespace(bind_source: &Path, bind_target: &Path, command: &[String]) -> Command {
    let mut unshare = Command::new("unshare");
    unshare
        .args(["--mount", "--propagation", "private"])
        .args(["sh", "-c", BIND_THEN_EXEC, "sh"])
        .arg(bind_source)
        .arg(bind_target)
        .args(command);
    unshare
}

/// Builds crates/coldstart/tests/fixtures/touch_files.c with `cc -O1`
/// into `out_dir/touch_files` (mode 755, for a traced non-root user) and
/// returns its path. Panics, with the compiler's output, when it cannot.
pub fn build_touch_files(out_dir: &Path) -> PathBuf {
    let source = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../coldstart/tests/fixtures/touch_files.c"
    );
    let binary = out_dir.join("touch_files");
    run_ok(
        Command::new("cc")
            .args(["-O1", "-Wall", "-Werror", "-o"])
            .arg(&binary)
            .arg(source),
    );
    set_mode(&binary, 0o755);
    binary
}

/// The touches touch_files printed, in order: (file as given, page,
/// `mmap` or `pread`). Other lines are not touches and are left out; a
/// `touch` line without a page number panics, naming it.
pub fn parse_touches(stdout: &str) -> Vec<(String, u64, String)> {
    stdout
        .lines()
        .filter_map(|line| line.strip_prefix("touch "))
        .map(|touch| {
            // The file may hold spaces; the page and the kind cannot.
            let mut fields = touch.rsplitn(3, ' ');
            let (Some(kind), Some(page), Some(path)) =
                (fields.next(), fields.next(), fields.next())
            else {
                panic!("touch_files line without a file, page and kind: touch {touch}");
            };
            let page = page.parse().unwrap_or_else(|e| {
                panic!("touch_files line with a bad page ({e}): touch {touch}")
            });
            (path.to_string(), page, kind.to_string())
        })
        .collect()
}

/// Mount points at or under `dir` in this process's mount namespace, from
/// /proc/self/mountinfo: what a test must have left none of.
pub fn mounts_under(dir: &Path) -> Vec<PathBuf> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_else(|e| panic!("/proc/self/mountinfo: {e}"));
    mountinfo
        .lines()
        // Field 5 is the mount point, with spaces and such octal-escaped.
        .filter_map(|line| line.split(' ').nth(4))
        .map(|escaped| PathBuf::from(unescape_octal(escaped)))
        .filter(|point| point.starts_with(dir))
        .collect()
}

/// Loop devices whose backing file is at or under `dir`, from
/// /sys/block/loop*/loop/backing_file: what a test must have left none of.
/// A device lingers for a moment after its last unmount, or while a mount
/// namespace still holds a copy of the mount.
pub fn loop_devices_under(dir: &Path) -> Vec<PathBuf> {
    let Ok(blocks) = std::fs::read_dir("/sys/block") else {
        return Vec::new();
    };
    blocks
        .filter_map(Result::ok)
        .filter(|entry| entry.file_name().to_string_lossy().starts_with("loop"))
        .filter(|entry| {
            std::fs::read_to_string(entry.path().join("loop/backing_file"))
                .is_ok_and(|backing| Path::new(backing.trim_end()).starts_with(dir))
        })
        .map(|entry| Path::new("/dev").join(entry.file_name()))
        .collect()
}

/// Undoes mountinfo's escapes (`\040` for a space, `\134` for a
/// backslash, ...).
fn unescape_octal(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let digits = bytes.get(i + 1..i + 4);
        match digits {
            Some(d) if bytes[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)) => {
                let value = d.iter().fold(0u32, |v, c| v * 8 + u32::from(c - b'0'));
                out.push(value as u8);
                i += 4;
            }
            _ => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A loop-mounted image that can be unmounted and mounted again on the
/// same point with the same options.
struct MountedImage {
    mount: Option<LoopMount>,
    image: PathBuf,
    point: PathBuf,
    options: String,
}

impl MountedImage {
    /// Makes the mount point (mode 755) and mounts `image` of `fstype` on
    /// it; Err says why not (no loop device, the kernel lacks `fstype`).
    fn mount(
        image: &Path,
        point: &Path,
        options: &str,
        fstype: &str,
    ) -> Result<MountedImage, String> {
        if !point.exists() {
            make_dir(point);
        }
        let Some(mount) = LoopMount::new(image, point, options) else {
            return Err(mount_failure(fstype, image));
        };
        open_to_all(point);
        Ok(MountedImage {
            mount: Some(mount),
            image: image.to_path_buf(),
            point: point.to_path_buf(),
            options: options.to_string(),
        })
    }

    fn unmount(&mut self) {
        drop(self.mount.take());
    }

    /// Mounts the image again after [`unmount`](Self::unmount); it did
    /// mount before, so failing now is a test failure.
    fn mount_again(&mut self) {
        let mount = LoopMount::new(&self.image, &self.point, &self.options)
            .unwrap_or_else(|| panic!("mount {} again", self.image.display()));
        self.mount = Some(mount);
    }

    /// Unmounts and mounts again, which writes back and then drops every
    /// cached page of the filesystem.
    fn remount(&mut self) {
        self.unmount();
        self.mount_again();
    }

    fn loop_device(&self) -> PathBuf {
        let mount = self
            .mount
            .as_ref()
            .unwrap_or_else(|| panic!("{} is not mounted", self.image.display()));
        let device = mount.device();
        // findmnt names a btrfs subvolume mount `/dev/loopN[/subvolume]`.
        match device.to_string_lossy().split_once('[') {
            Some((device, _)) => PathBuf::from(device),
            None => device,
        }
    }
}

/// A mount without a loop device (tmpfs, overlay), unmounted when
/// dropped.
struct Mounted {
    point: PathBuf,
}

impl Mounted {
    /// `mount -t FSTYPE -o OPTIONS SOURCE POINT`; Err says why not.
    fn new(fstype: &str, source: &str, point: &Path, options: &str) -> Result<Mounted, String> {
        let output = Command::new("mount")
            .args(["-t", fstype, "-o", options, source])
            .arg(point)
            .output()
            .map_err(|e| format!("mount (util-linux) could not start: {e}"))?;
        if !output.status.success() {
            return Err(format!(
                "could not mount {fstype} on {}: {}{}",
                point.display(),
                String::from_utf8_lossy(&output.stderr).trim(),
                kernel_support(fstype)
            ));
        }
        Ok(Mounted {
            point: point.to_path_buf(),
        })
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        unmount(&self.point);
    }
}

/// Why mounting an image of `fstype` failed, as far as this machine says.
fn mount_failure(fstype: &str, image: &Path) -> String {
    format!(
        "could not loop-mount the {fstype} image {} (no free loop device?){}",
        image.display(),
        kernel_support(fstype)
    )
}

/// ", and this kernel has no FSTYPE" when /proc/filesystems lacks it
/// after a failed mount (which would have loaded its module); else empty.
fn kernel_support(fstype: &str) -> String {
    let known = std::fs::read_to_string("/proc/filesystems").is_ok_and(|list| {
        list.lines()
            .any(|line| line.split_whitespace().last() == Some(fstype))
    });
    if known {
        String::new()
    } else {
        format!(", and this kernel has no {fstype} (not in /proc/filesystems)")
    }
}

/// Err unless this process is root, which mounting needs.
fn require_root() -> Result<(), String> {
    // SAFETY: geteuid never fails.
    if unsafe { libc::geteuid() } == 0 {
        Ok(())
    } else {
        Err("mounting a test filesystem needs root".to_string())
    }
}

/// Some when built, None after [`skip`] with the reason it was not.
fn or_skip<T>(built: Result<T, String>) -> Option<T> {
    built.map_err(|why| skip(&why)).ok()
}

/// Runs a tool a builder needs: Err (a reason to skip) when it is not
/// installed; a panic, with its output, when it fails.
fn run_tool(command: &mut Command, package: &str) -> Result<Output, String> {
    let program = command.get_program().to_string_lossy().into_owned();
    match command.output() {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            Err(format!("{program} is not installed (package {package})"))
        }
        Err(e) => panic!("{command:?} could not start: {e}"),
        Ok(output) if output.status.success() => Ok(output),
        Ok(output) => panic!(
            "{command:?} failed: {}\nstdout: {}\nstderr: {}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ),
    }
}

/// A sparse file of `bytes` named `name` in `dir`, for mkfs to fill.
fn sized_image(dir: &Path, name: &str, bytes: u64) -> PathBuf {
    let image = dir.join(name);
    std::fs::File::create(&image)
        .and_then(|file| file.set_len(bytes))
        .unwrap_or_else(|e| panic!("{}: {e}", image.display()));
    image
}

/// (relative name, pages) as paths.
fn named<'a>(files: &'a [(&'a str, u64)]) -> impl Iterator<Item = (PathBuf, u64)> + 'a {
    files
        .iter()
        .map(|&(name, pages)| (relative(name).to_path_buf(), pages))
}

/// `name` as a path that stays under the directory it is joined to; a
/// test asking for anything else is a mistake in the test.
fn relative(name: &str) -> &Path {
    let path = Path::new(name);
    let plain = path
        .components()
        .all(|part| matches!(part, std::path::Component::Normal(_)));
    assert!(
        plain && !name.is_empty(),
        "test file name {name:?} must be a relative path without `..`"
    );
    path
}

/// Writes each (relative path, pages) under `root`, in order, with seeds
/// 1, 2, ...: the bytes of [`file_bytes`], mode 644, written back to the
/// device; missing directories are made mode 755.
fn write_files(root: &Path, files: impl Iterator<Item = (PathBuf, u64)>) -> Vec<TestFile> {
    files
        .enumerate()
        .map(|(index, (name, pages))| {
            let seed = u8::try_from(index + 1)
                .ok()
                .filter(|&seed| seed < 251)
                .unwrap_or_else(|| panic!("at most 250 test files, one seed each"));
            let path = root.join(relative(&name.to_string_lossy()));
            write_file(&path, seed, pages);
            TestFile { path, pages, seed }
        })
        .collect()
}

fn write_file(path: &Path, seed: u8, pages: u64) {
    if let Some(parent) = path.parent().filter(|parent| !parent.exists()) {
        make_dir(parent);
    }
    let mut file =
        std::fs::File::create(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    file.write_all(&file_bytes(seed, pages))
        .and_then(|()| file.sync_all())
        .unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    set_mode(path, 0o644);
}

/// Makes `dir` and any missing parent, each mode 755.
fn make_dir(dir: &Path) {
    if let Some(parent) = dir.parent().filter(|parent| !parent.exists()) {
        make_dir(parent);
    }
    std::fs::create_dir(dir).unwrap_or_else(|e| panic!("mkdir {}: {e}", dir.display()));
    open_to_all(dir);
}

/// Mode 755 on a directory, so that a traced non-root user reaches what
/// is under it.
fn open_to_all(dir: &Path) {
    set_mode(dir, 0o755);
}

/// Sets `mode` on `path` unless it has it already (a read-only
/// filesystem's root may, and cannot be changed).
fn set_mode(path: &Path, mode: u32) {
    let current = std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode();
    if current & 0o7777 == mode {
        return;
    }
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .unwrap_or_else(|e| panic!("chmod {mode:o} {}: {e}", path.display()));
}

/// `path`, which is under `from`, at the same place under `to`.
fn moved(path: &Path, from: &Path, to: &Path) -> PathBuf {
    let rest = path
        .strip_prefix(from)
        .unwrap_or_else(|_| panic!("{} is not under {}", path.display(), from.display()));
    to.join(rest)
}

/// `path` as a value in overlay's mount options, where a comma would end
/// the option and a colon separate lower layers.
fn option_path(path: &Path) -> String {
    let text = path
        .to_str()
        .filter(|text| !text.contains([',', ':', '\\']));
    match text {
        Some(text) => text.to_string(),
        None => panic!("{} cannot go in overlay's mount options", path.display()),
    }
}
