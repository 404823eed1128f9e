//! A prefetch plan as Rust values: the files a start opens, with the
//! identity they had when traced, the extents of them it needs, in the
//! order it first needs them, and the paths whose inodes it read from disk.

use coldstart_system::identity::FileIdentity;
use serde::Serialize;

/// The plan format version written in the header. A reader also reads
/// the older versions from [`OLDEST_FORMAT_VERSION`] and refuses others.
pub const FORMAT_VERSION: u32 = 2;

/// The oldest plan format a reader reads: version 1, the same lines
/// without lookups.
pub const OLDEST_FORMAT_VERSION: u32 = 1;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Plan {
    /// Page size of the traced runs; extents count pages of this size.
    pub page_size: u64,
    /// How the plan was compiled, for the header and for `plan --json`.
    pub source: PlanSource,
    /// Files in the order the start first needs them; extents refer to them
    /// by index. Files with no extent are only opened (warming the path
    /// lookup and inode).
    pub files: Vec<PlanFile>,
    /// Extents in prefetch order: by pooled first-need time.
    pub extents: Vec<Extent>,
    /// Paths whose inodes (or directories) the start had to read from the
    /// disk, or names it looked up, in the order the start needs them: the
    /// prefetcher looks each up, warming the inode tables and directories
    /// the program's lookups need.
    pub lookups: Vec<Lookup>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlanSource {
    /// The profile's path as given to `plan`.
    pub profile: String,
    /// The runs pooled.
    pub runs: Vec<i64>,
    /// A page is planned when at least this many of the runs touched it.
    pub min_runs: usize,
    /// Extents of one file at most this many pages apart were merged.
    pub merge_gap_pages: u64,
    /// Extents longer than this were split.
    pub max_extent_pages: u64,
    /// The cap on the plan's total bytes, if one was given.
    pub max_bytes: Option<u64>,
    /// "demand" when every run had readahead off (pages read = pages
    /// touched), else "touched-or-mapped" (fault-around windows included).
    pub pages_from: String,
}

/// A file as it was when traced. A file whose size, mtime or build-id no
/// longer match is skipped at replay, never prefetched blindly.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PlanFile {
    pub path: String,
    pub size: u64,
    pub mtime_ns: Option<i64>,
    pub build_id: Option<String>,
}

impl PlanFile {
    /// The file at `path` with the identity a run saw.
    pub fn new(path: String, identity: FileIdentity) -> PlanFile {
        PlanFile {
            path,
            size: identity.size,
            mtime_ns: identity.mtime_ns,
            build_id: identity.build_id,
        }
    }

    /// The identity the plan recorded for the file.
    pub fn identity(&self) -> FileIdentity {
        FileIdentity {
            size: self.size,
            mtime_ns: self.mtime_ns,
            build_id: self.build_id.clone(),
        }
    }
}

/// `pages` pages of `files[file]` from page `page`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Extent {
    pub file: usize,
    pub page: u64,
    pub pages: u64,
    /// When the start first needs the extent: ns after launch, the median
    /// over the runs that touched it of its earliest touch.
    pub need_ns: i64,
}

/// A path the start looked up while its inode was not cached.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Lookup {
    pub path: String,
    /// The inode number when traced (for a name only looked up, when the
    /// plan was compiled): the order among lookups needed at one time.
    pub ino: u64,
    /// When the start first needed it, ns after launch: lookups are made
    /// in this order.
    pub need_ns: i64,
}

impl Plan {
    /// Bytes the extents cover (the last page of a file counts whole).
    pub fn bytes(&self) -> u64 {
        self.extents.iter().map(|e| e.pages * self.page_size).sum()
    }

    /// The file with the most planned pages among those of at least
    /// `min_size` bytes: where a calibration measures the device.
    pub fn most_planned_file(&self, min_size: u64) -> Option<&PlanFile> {
        let mut pages = vec![0u64; self.files.len()];
        for e in &self.extents {
            if let Some(count) = pages.get_mut(e.file) {
                *count += e.pages;
            }
        }
        (0..self.files.len())
            .filter(|&i| self.files[i].size >= min_size)
            .max_by_key(|&i| pages[i])
            .map(|i| &self.files[i])
    }
}
