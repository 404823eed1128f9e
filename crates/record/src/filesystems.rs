//! What the filesystems a run's files live on say about them: which rows
//! hold a filesystem's metadata or pages that live only in memory, and,
//! on an overlay, which layer's file holds the pages of a file the
//! program opened through the overlay.
//!
//! An overlay passes reads to the file of the layer that holds it, so the
//! page cache, and every trace event, names that file (its filesystem's
//! device and inode), never the overlay's. The program opened the overlay
//! path; the open watcher sees that open, and (opened by the overlay
//! itself, through a private mount of the layer) the layer file's open,
//! which the watcher names by its handle through a mount here. The layer
//! file keeps the overlay path the program opened as `opened_as`.

use crate::paths::{Inode, SeenFile};
use coldstart_profile::FileKind;
use coldstart_system::filesystem::Overlays;
use coldstart_system::proc::{self, MountInfo};
use std::collections::{HashMap, HashSet};
use std::fs;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

/// Filesystem types whose pages live in memory only.
const MEMORY_FILESYSTEMS: &[&str] = &[
    "tmpfs",
    "ramfs",
    "devtmpfs",
    "proc",
    "sysfs",
    "shm",
    "hugetlbfs",
    "mqueue",
    "bpf",
];

/// The mounts of this mount namespace, read once.
#[derive(Debug, Clone, Default)]
pub struct Filesystems {
    mounts: Vec<MountInfo>,
    overlays: Overlays,
    /// Devices of btrfs subvolumes files were placed in (stat's encoding):
    /// no mount lists them, since mountinfo gives the superblock's.
    subvolumes: HashSet<u64>,
}

impl Filesystems {
    /// This process's mounts.
    pub fn here() -> Filesystems {
        Filesystems::new(proc::mountinfo(None))
    }

    pub fn new(mounts: Vec<MountInfo>) -> Filesystems {
        let overlays = Overlays::of(&mounts);
        Filesystems {
            mounts,
            overlays,
            subvolumes: HashSet::new(),
        }
    }

    /// Knows `devices` for btrfs subvolumes' (stat's encoding).
    pub fn with_subvolumes(mut self, devices: HashSet<u64>) -> Filesystems {
        self.subvolumes = devices;
        self
    }

    /// What the row of the file `identity` (as stat() encodes it) holds,
    /// and, for one without a path, what names it.
    pub fn classify(&self, identity: Inode, has_path: bool) -> (FileKind, Option<String>) {
        let Inode { dev, ino } = identity;
        if let Some(mount) = self.metadata_of(identity) {
            return (
                FileKind::Metadata,
                Some(format!(
                    "{} metadata on {} (mounted at {})",
                    mount.fstype,
                    mount.source,
                    mount.target.display()
                )),
            );
        }
        let mount = self.mounts.iter().find(|m| m.dev == dev);
        if let Some(mount) = mount
            && MEMORY_FILESYSTEMS.contains(&mount.fstype.as_str())
        {
            let note = (!has_path).then(|| {
                format!(
                    "a {} file at {}, inode {ino}, no longer open",
                    mount.fstype,
                    mount.target.display()
                )
            });
            return (FileKind::Memory, note);
        }
        if has_path {
            return (FileKind::File, None);
        }
        if let Some(mount) = mount.filter(|m| m.fstype == "btrfs") {
            return (
                FileKind::File,
                Some(format!(
                    "btrfs inode {ino} on {} in a subvolume the trace could not tell",
                    mount.source
                )),
            );
        }
        if self.subvolumes.contains(&dev) {
            return (
                FileKind::File,
                Some(format!(
                    "btrfs inode {ino} in the subvolume of device 0:{}: neither opened \
                     nor mapped by a process while traced (a directory, say)",
                    libc::minor(dev)
                )),
            );
        }
        if libc::major(dev) == 0 && mount.is_none() {
            return (
                FileKind::Memory,
                Some(format!(
                    "an in-kernel file (shared memory, memfd, a pipe), dev 0:{} inode {ino}",
                    libc::minor(dev)
                )),
            );
        }
        (
            FileKind::File,
            Some(format!(
                "dev {}:{} inode {ino}: neither opened nor mapped by a process while traced",
                libc::major(dev),
                libc::minor(dev)
            )),
        )
    }

    /// Filesystems among `devices` (stat's encoding) that read their
    /// metadata into caches of their own, outside the page cache, where
    /// no page-cache tracepoint sees it: xfs (its buffer cache) and
    /// squashfs (its block caches). One line each, for the trace's
    /// warnings.
    pub fn unseen_metadata(&self, devices: impl IntoIterator<Item = u64>) -> Vec<String> {
        let mut said = Vec::new();
        for dev in devices {
            let Some(mount) = self
                .mounts
                .iter()
                .find(|m| m.dev == dev && matches!(m.fstype.as_str(), "xfs" | "squashfs"))
            else {
                continue;
            };
            let line = format!(
                "{} on {} (mounted at {}) reads its metadata into a cache of its own, outside \
                 the page cache: this trace does not see those reads",
                mount.fstype,
                mount.source,
                mount.target.display()
            );
            if !said.contains(&line) {
                said.push(line);
            }
        }
        said
    }

    /// The mount whose filesystem's metadata the file `identity` holds: a
    /// block device's own cache (the kernel's block device filesystem
    /// numbers each device's inode with the device's number, major << 20 |
    /// minor) or btrfs's tree inode (inode 1 on the superblock's device).
    fn metadata_of(&self, Inode { dev, ino }: Inode) -> Option<&MountInfo> {
        if libc::major(dev) != 0 {
            return None;
        }
        if ino == 1
            && let Some(mount) = self
                .mounts
                .iter()
                .find(|m| m.fstype == "btrfs" && m.dev == dev)
        {
            return Some(mount);
        }
        self.mounts.iter().find(|m| {
            m.source.starts_with('/')
                && fs::metadata(&m.source).is_ok_and(|meta| {
                    meta.file_type().is_block_device() && kernel_devt(meta.rdev()) == ino
                })
        })
    }

    /// Puts right what the open watcher saw of files on overlays: each
    /// layer file gets the path that opens it here and the overlay path
    /// the program opened; a layer file whose own open was not seen is
    /// added from the overlay open.
    pub fn resolve_overlay_opens(&self, opens: &mut HashMap<Inode, SeenFile>) {
        if self.overlays.is_empty() {
            return;
        }
        // The overlay opens: find the layer file behind each.
        let overlay_opens: Vec<(Inode, SeenFile)> = opens
            .iter()
            .filter(|(_, seen)| self.overlays.holds(Path::new(&seen.path)))
            .map(|(&identity, seen)| (identity, seen.clone()))
            .collect();
        for (overlay_identity, seen) in overlay_opens {
            let Some((layer_identity, layer_path)) = self.layer_file(Path::new(&seen.path)) else {
                continue;
            };
            if layer_identity == overlay_identity {
                continue;
            }
            let entry = opens.entry(layer_identity).or_insert_with(|| SeenFile {
                path: layer_path.clone(),
                opened_as: None,
                unreachable: false,
                ..seen.clone()
            });
            entry.opened_as = Some(seen.path.clone());
            for pid in &seen.openers {
                if !entry.openers.contains(pid) {
                    entry.openers.push(*pid);
                }
            }
        }
    }

    /// The file of the layer that holds the overlay file at `path`, and
    /// its identity.
    pub fn layer_file(&self, path: &Path) -> Option<(Inode, String)> {
        let layer = self.overlays.layer_file(path)?;
        let meta = fs::metadata(&layer).ok()?;
        Some((Inode::of(&meta), layer.to_str()?.to_string()))
    }
}

/// The kernel's internal encoding of a device number (major << 20 |
/// minor), which its block device filesystem uses as the inode number.
fn kernel_devt(dev: u64) -> u64 {
    (u64::from(libc::major(dev)) << 20) | u64::from(libc::minor(dev))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mount(dev: u64, fstype: &str, source: &str, target: &str) -> MountInfo {
        MountInfo {
            dev,
            root: "/".into(),
            target: target.into(),
            fstype: fstype.into(),
            source: source.into(),
            super_options: String::new(),
        }
    }

    #[test]
    fn rows_are_told_apart_by_what_their_filesystem_is() {
        let btrfs = libc::makedev(0, 39);
        let tmpfs = libc::makedev(0, 25);
        let fs = Filesystems::new(vec![
            mount(btrfs, "btrfs", "/dev/loop0", "/mnt"),
            mount(tmpfs, "tmpfs", "tmpfs", "/dev/shm"),
        ]);
        let (kind, note) = fs.classify(Inode { dev: btrfs, ino: 1 }, false);
        assert_eq!(kind, FileKind::Metadata);
        assert_eq!(
            note.unwrap(),
            "btrfs metadata on /dev/loop0 (mounted at /mnt)"
        );
        let (kind, note) = fs.classify(
            Inode {
                dev: btrfs,
                ino: 257,
            },
            false,
        );
        assert_eq!(kind, FileKind::File);
        assert!(note.unwrap().contains("could not tell"));
        assert_eq!(
            fs.classify(Inode { dev: tmpfs, ino: 5 }, true),
            (FileKind::Memory, None)
        );
        let (kind, _) = fs.classify(
            Inode {
                dev: libc::makedev(0, 1),
                ino: 77,
            },
            false,
        );
        assert_eq!(kind, FileKind::Memory);
        assert_eq!(
            fs.classify(
                Inode {
                    dev: libc::makedev(254, 0),
                    ino: 9
                },
                true
            ),
            (FileKind::File, None)
        );
        let (kind, note) = fs.classify(
            Inode {
                dev: libc::makedev(254, 0),
                ino: 9,
            },
            false,
        );
        assert_eq!(kind, FileKind::File);
        assert!(note.unwrap().contains("neither opened nor mapped"));
    }

    #[test]
    fn filesystems_keeping_metadata_outside_the_page_cache_are_said_once() {
        let xfs = libc::makedev(7, 1);
        let fs = Filesystems::new(vec![
            mount(xfs, "xfs", "/dev/loop1", "/x"),
            mount(libc::makedev(254, 0), "ext4", "/dev/vda", "/"),
        ]);
        let said = fs.unseen_metadata([xfs, xfs, libc::makedev(254, 0)]);
        assert_eq!(said.len(), 1);
        assert!(said[0].starts_with("xfs on /dev/loop1 (mounted at /x) reads its metadata"));
    }

    #[test]
    fn a_block_devices_own_cache_is_its_filesystems_metadata() {
        // The root filesystem's device, when it is a block device here.
        let Some(root) = proc::mountinfo(None)
            .into_iter()
            .rev()
            .find(|m| m.target == Path::new("/"))
        else {
            return;
        };
        let Ok(meta) = fs::metadata(&root.source) else {
            eprintln!("SKIPPED: the root filesystem's source is no device here");
            return;
        };
        if !meta.file_type().is_block_device() {
            return;
        }
        let fs = Filesystems::new(vec![root.clone()]);
        let bdev = Inode {
            dev: libc::makedev(0, 3),
            ino: kernel_devt(meta.rdev()),
        };
        let (kind, note) = fs.classify(bdev, false);
        assert_eq!(kind, FileKind::Metadata);
        assert!(
            note.unwrap()
                .starts_with(&format!("{} metadata on {}", root.fstype, root.source))
        );
    }
}
