//! A file's identity, in its two senses.
//!
//! [`Inode`]: which file, while the system runs: the device and inode
//! number stat() reports. The recorder keys every page event and file row
//! by it, and it is unique on every filesystem coldstart traces: on btrfs,
//! where subvolumes share one superblock and repeat inode numbers, the
//! device is the subvolume's (the recorder places each page-cache event
//! there); on an overlay a file's pages are its layer file's, which is the
//! row. Devices of btrfs subvolumes and overlays are numbered at mount
//! time, so an `Inode` does not outlive a mount.
//!
//! [`FileIdentity`]: what tells the file a run traced from another file at
//! the same path later (a rebuilt library, an updated package). A plan
//! records it per file with the path that opens the file, a profile per
//! file row; replay, the plan compiler and the analyses compare against it
//! before trusting a file's offsets. That pair, path and identity, is what
//! is kept across mounts and boots.

use std::fs::Metadata;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// Which file, while the system runs (see the module's documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Inode {
    /// `st_dev`, in libc's encoding.
    pub dev: u64,
    pub ino: u64,
}

impl Inode {
    /// The inode `meta` describes.
    pub fn of(meta: &Metadata) -> Inode {
        Inode {
            dev: meta.dev(),
            ino: meta.ino(),
        }
    }

    /// The inode `path` names now, following symbolic links.
    pub fn of_path(path: &Path) -> Option<Inode> {
        std::fs::metadata(path).ok().map(|meta| Inode::of(&meta))
    }
}

/// The size, modification time and build-id a file had when it was
/// recorded. The modification time is absent where it could not be read;
/// the build-id where the file is no ELF file or its note was not resident
/// (the recorder reads it without disturbing the cache).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileIdentity {
    pub size: u64,
    pub mtime_ns: Option<i64>,
    pub build_id: Option<String>,
}

/// How a file differs from its recorded identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// Its size is `now` bytes; `recorded` when recorded.
    Size {
        now: u64,
        recorded: u64,
    },
    ModificationTime,
    BuildId,
}

impl FileIdentity {
    /// The identity of the file `meta` describes now: its size and
    /// modification time. Reading a build-id is the caller's choice (it
    /// reads the file), so it is left out.
    pub fn of_metadata(meta: &Metadata) -> FileIdentity {
        FileIdentity {
            size: meta.size(),
            mtime_ns: Some(mtime_ns(meta)),
            build_id: None,
        }
    }

    /// The identity of the file at `path` now, following symbolic links,
    /// without a build-id (see [`FileIdentity::of_metadata`]).
    pub fn of_path(path: &Path) -> std::io::Result<FileIdentity> {
        std::fs::metadata(path).map(|meta| FileIdentity::of_metadata(&meta))
    }

    /// Whether two records saw the same file: same size and modification
    /// time (both absent counts as the same). A build-id only one of them
    /// could read says nothing.
    pub fn same_as(&self, other: &FileIdentity) -> bool {
        self.size == other.size
            && self.mtime_ns == other.mtime_ns
            && match (&self.build_id, &other.build_id) {
                (Some(a), Some(b)) => a == b,
                _ => true,
            }
    }

    /// How the file, whose identity is `self` now, differs from `recorded`,
    /// or None when it is still that file. Only what both know is compared:
    /// a modification time or build-id the record lacks is no change.
    pub fn change_since(&self, recorded: &FileIdentity) -> Option<Change> {
        if self.size != recorded.size {
            return Some(Change::Size {
                now: self.size,
                recorded: recorded.size,
            });
        }
        if recorded.mtime_ns.is_some() && self.mtime_ns != recorded.mtime_ns {
            return Some(Change::ModificationTime);
        }
        match (&self.build_id, &recorded.build_id) {
            (Some(now), Some(then)) if now != then => Some(Change::BuildId),
            _ => None,
        }
    }
}

/// The modification time in `meta` as nanoseconds since the epoch, the unit
/// profiles and plans record it in.
pub fn mtime_ns(meta: &Metadata) -> i64 {
    meta.mtime() * 1_000_000_000 + meta.mtime_nsec()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    fn identity(size: u64, mtime_ns: Option<i64>, build_id: Option<&str>) -> FileIdentity {
        FileIdentity {
            size,
            mtime_ns,
            build_id: build_id.map(str::to_string),
        }
    }

    #[test]
    fn the_identity_of_a_path_is_its_size_and_modification_time_in_nanoseconds() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"12345").unwrap();
        let when = UNIX_EPOCH + Duration::new(1_700_000_000, 123_456_789);
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(when)
            .unwrap();
        assert_eq!(
            FileIdentity::of_path(&path).unwrap(),
            identity(5, Some(1_700_000_000_123_456_789), None)
        );
        assert!(FileIdentity::of_path(&dir.path().join("missing")).is_err());
    }

    #[test]
    fn two_records_agree_unless_size_time_or_a_known_build_id_differ() {
        let a = identity(10, Some(1), Some("ab"));
        assert!(a.same_as(&identity(10, Some(1), None)));
        assert!(identity(10, None, None).same_as(&identity(10, None, Some("cd"))));
        assert!(!a.same_as(&identity(11, Some(1), Some("ab"))));
        assert!(!a.same_as(&identity(10, Some(2), Some("ab"))));
        assert!(!a.same_as(&identity(10, None, Some("ab"))));
        assert!(!a.same_as(&identity(10, Some(1), Some("cd"))));
    }

    #[test]
    fn a_change_is_only_found_in_what_the_record_knows() {
        let now = identity(10, Some(5), Some("ab"));
        assert_eq!(now.change_since(&identity(10, Some(5), Some("ab"))), None);
        assert_eq!(now.change_since(&identity(10, None, None)), None);
        assert_eq!(
            now.change_since(&identity(12, Some(5), None)),
            Some(Change::Size {
                now: 10,
                recorded: 12
            })
        );
        assert_eq!(
            now.change_since(&identity(10, Some(4), None)),
            Some(Change::ModificationTime)
        );
        assert_eq!(
            now.change_since(&identity(10, Some(5), Some("cd"))),
            Some(Change::BuildId)
        );
        assert_eq!(
            identity(10, Some(5), None).change_since(&identity(10, Some(5), Some("cd"))),
            None
        );
    }
}
