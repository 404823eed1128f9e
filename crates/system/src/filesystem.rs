//! Which filesystem a file is on, by the magic number statfs(2) reports
//! (linux/magic.h): what decides whether a lookup is worth replaying and
//! whether ext4's extent-tree call applies. And, for a file on an overlay,
//! the layer's file that holds its pages.

use crate::proc::MountInfo;
use std::fs;
use std::io;
use std::os::fd::AsFd;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

/// The magic number of the filesystem `path` is on.
pub fn magic_of_path(path: &Path) -> io::Result<u64> {
    let fs = rustix::fs::statfs(path)?;
    // f_type's width and signedness differ between architectures; the
    // magic numbers are 32-bit.
    Ok(fs.f_type as u64 & 0xffff_ffff)
}

/// The magic number of the filesystem an open file is on.
pub fn magic_of_file(file: impl AsFd) -> io::Result<u64> {
    let fs = rustix::fs::fstatfs(file)?;
    Ok(fs.f_type as u64 & 0xffff_ffff)
}

/// The kernel interface a filesystem is, by its magic number (linux/magic.h):
/// procfs, sysfs and their kin, whose files are the kernel's state, not data
/// on a disk, and whose reads may block (tracefs's trace_pipe) or have side
/// effects. None for every other filesystem.
pub fn kernel_interface(magic: u64) -> Option<&'static str> {
    const INTERFACES: &[(u64, &str)] = &[
        (0x9fa0, "procfs"),
        (0x6265_6572, "sysfs"),
        (0x1cd1, "devpts"),
        (0x0027_e0eb, "cgroupfs"),
        (0x6367_7270, "cgroup2fs"),
        (0x6462_6720, "debugfs"),
        (0x7472_6163, "tracefs"),
        (0x7363_6673, "securityfs"),
        (0xcafe_4a11, "bpffs"),
        (0x6265_6570, "configfs"),
        (0x6165_676c, "pstorefs"),
        (0xde5e_81e4, "efivarfs"),
    ];
    INTERFACES
        .iter()
        .find(|&&(m, _)| m == magic)
        .map(|&(_, name)| name)
}

/// The overlay mounts of a mount namespace, each with its layers'
/// directories, upper first, in the order the overlay looks files up.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Overlays {
    mounts: Vec<(PathBuf, Vec<PathBuf>)>,
}

impl Overlays {
    /// The overlays among `mounts`.
    pub fn of(mounts: &[MountInfo]) -> Overlays {
        Overlays {
            mounts: mounts
                .iter()
                .filter(|m| m.fstype == "overlay")
                .filter_map(|m| Some((m.target.clone(), overlay_layers(&m.super_options)?)))
                .collect(),
        }
    }

    /// The overlays of this process's mount namespace.
    pub fn here() -> Overlays {
        Overlays::of(&crate::proc::mountinfo(None))
    }

    /// The deepest overlay mount `path` is under, with its layers.
    fn of_path(&self, path: &Path) -> Option<&(PathBuf, Vec<PathBuf>)> {
        self.mounts
            .iter()
            .filter(|(target, _)| path.starts_with(target))
            .max_by_key(|(target, _)| target.as_os_str().len())
    }

    /// Whether there is no overlay.
    pub fn is_empty(&self) -> bool {
        self.mounts.is_empty()
    }

    /// Whether `path` is on one of the overlays.
    pub fn holds(&self, path: &Path) -> bool {
        self.of_path(path).is_some()
    }

    /// The file of the layer that holds the overlay file at `path`: the
    /// first layer, upper first, with an entry there; None when the file is
    /// on no overlay, in no layer, or deleted (a whiteout, a character
    /// device 0:0, above every lower layer).
    pub fn layer_file(&self, path: &Path) -> Option<PathBuf> {
        let (target, layers) = self.of_path(path)?;
        let relative = path.strip_prefix(target).ok()?;
        for layer in layers {
            let candidate = layer.join(relative);
            let Ok(meta) = fs::symlink_metadata(&candidate) else {
                continue;
            };
            if meta.file_type().is_char_device() && meta.rdev() == 0 {
                return None;
            }
            return Some(candidate);
        }
        None
    }
}

/// An overlay's layer directories from its mount options, upper first:
/// `upperdir=`, then `lowerdir=` (colon-separated, `\:` escaping a colon
/// in a name) or one `lowerdir+=` per layer, and `datadir+=` last. Commas
/// in paths come escaped as `\,`.
fn overlay_layers(options: &str) -> Option<Vec<PathBuf>> {
    let mut upper = None;
    let mut lowers = Vec::new();
    let mut data = Vec::new();
    for option in split_unescaped(options, ',') {
        if let Some(dir) = option.strip_prefix("upperdir=") {
            upper = Some(PathBuf::from(unescape(dir)));
        } else if let Some(dirs) = option.strip_prefix("lowerdir=") {
            lowers.extend(
                split_unescaped(dirs, ':')
                    .iter()
                    .filter(|d| !d.is_empty())
                    .map(|d| PathBuf::from(unescape(d))),
            );
        } else if let Some(dir) = option.strip_prefix("lowerdir+=") {
            lowers.push(PathBuf::from(unescape(dir)));
        } else if let Some(dir) = option.strip_prefix("datadir+=") {
            data.push(PathBuf::from(unescape(dir)));
        }
    }
    if lowers.is_empty() {
        return None;
    }
    Some(upper.into_iter().chain(lowers).chain(data).collect())
}

/// Splits at `separator` where it is not escaped by a backslash.
fn split_unescaped(text: &str, separator: char) -> Vec<String> {
    let mut parts = vec![String::new()];
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            let last = parts.last_mut().expect("one part at least");
            last.push(c);
            if let Some(next) = chars.next() {
                last.push(next);
            }
        } else if c == separator {
            parts.push(String::new());
        } else {
            parts.last_mut().expect("one part at least").push(c);
        }
    }
    parts
}

/// Drops the backslashes escaping a character.
fn unescape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            if let Some(next) = chars.next() {
                out.push(next);
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlay_layers_come_upper_first_then_lowers_in_lookup_order() {
        assert_eq!(
            overlay_layers("rw,lowerdir=/l1:/l\\:2,upperdir=/u,workdir=/w,uuid=on"),
            Some(vec!["/u".into(), "/l1".into(), "/l:2".into()])
        );
        assert_eq!(
            overlay_layers("ro,lowerdir+=/a,lowerdir+=/b\\,c,datadir+=/d"),
            Some(vec!["/a".into(), "/b,c".into(), "/d".into()])
        );
        assert_eq!(overlay_layers("rw,upperdir=/u"), None);
    }

    #[test]
    fn proc_is_procfs() {
        // linux/magic.h PROC_SUPER_MAGIC.
        assert_eq!(magic_of_path(Path::new("/proc/self")).unwrap(), 0x9fa0);
        let file = std::fs::File::open("/proc/self/stat").unwrap();
        assert_eq!(magic_of_file(&file).unwrap(), 0x9fa0);
        assert!(magic_of_path(Path::new("/no/such/path")).is_err());
        assert_eq!(kernel_interface(0x9fa0), Some("procfs"));
        assert_eq!(
            kernel_interface(magic_of_path(Path::new("/sys/kernel")).unwrap()),
            Some("sysfs")
        );
        // ext4 is data on a disk.
        assert_eq!(kernel_interface(0xef53), None);
    }
}
