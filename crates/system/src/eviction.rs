//! Evicting a set of files from the page cache, or only measuring how much
//! of them is resident: one result per file, the files that failed, and
//! totals. The serialisable result of `coldstart evict` (field names in
//! docs/evict-json.md); the report room renders it. (Moves with cache.rs to
//! the page-cache room.)

use crate::cache::{self, CacheError, Eviction, MappingProcess, ResidencyMethod};
use crate::walk::WalkError;
use serde::Serialize;
use std::ops::Range;
use std::path::{Path, PathBuf};

#[derive(Debug, Serialize)]
pub struct EvictReport {
    /// "evict", "check" or "all".
    pub mode: &'static str,
    pub page_size: u64,
    pub files: Vec<FileResult>,
    /// Files that could not be opened, measured or evicted.
    pub errors: Vec<FileError>,
    pub totals: Totals,
    /// --all: the kernel's "Cached" figure from /proc/meminfo, in bytes.
    pub cached_before: Option<u64>,
    pub cached_after: Option<u64>,
}

#[derive(Debug, Serialize)]
pub struct FileResult {
    pub path: String,
    pub size: u64,
    pub pages: u64,
    /// Resident pages before eviction (evict) or now (check).
    pub resident_before: u64,
    /// Resident pages after eviction; absent with --check.
    pub resident_after: Option<u64>,
    /// --check with cachestat: resident pages not yet written back.
    pub dirty: Option<u64>,
    /// Processes mapping the file, when pages stayed resident.
    pub mapped_by: Vec<MappingProcess>,
    /// --check --pages: resident pages as [first, last] inclusive ranges.
    pub resident_pages: Option<Vec<[u64; 2]>>,
    pub method: Option<ResidencyMethod>,
}

#[derive(Debug, Serialize)]
pub struct FileError {
    pub path: String,
    pub error: String,
}

impl From<WalkError> for FileError {
    fn from(e: WalkError) -> Self {
        FileError {
            path: e.path.display().to_string(),
            error: e.message,
        }
    }
}

#[derive(Debug, Serialize, Default)]
pub struct Totals {
    pub files: usize,
    pub pages: u64,
    pub resident_before: u64,
    pub resident_after: Option<u64>,
}

/// What to do with each file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Evict,
    /// Only measure residency; with `pages`, list the resident page ranges.
    Check {
        pages: bool,
    },
}

/// Evicts (or checks) `targets` in order, calling `on_file` after each;
/// `errors` are failures met before (naming the files), kept in front.
pub fn evict_files(
    targets: &[PathBuf],
    mode: Mode,
    mut errors: Vec<FileError>,
    mut on_file: impl FnMut(),
) -> EvictReport {
    let mut files = Vec::with_capacity(targets.len());
    for path in targets {
        let result = match mode {
            Mode::Check { pages } => check(path, pages),
            Mode::Evict => cache::evict(path).map(from_eviction),
        };
        match result {
            Ok(file) => files.push(file),
            Err(e) => errors.push(FileError {
                path: path.display().to_string(),
                error: e.to_string(),
            }),
        }
        on_file();
    }
    let check = matches!(mode, Mode::Check { .. });
    let totals = Totals {
        files: files.len(),
        pages: files.iter().map(|f| f.pages).sum(),
        resident_before: files.iter().map(|f| f.resident_before).sum(),
        resident_after: (!check).then(|| files.iter().filter_map(|f| f.resident_after).sum()),
    };
    EvictReport {
        mode: if check { "check" } else { "evict" },
        page_size: cache::page_size(),
        files,
        errors,
        totals,
        cached_before: None,
        cached_after: None,
    }
}

/// The report of dropping the whole page cache, with the kernel's Cached
/// figure before and after when it could be read.
pub fn dropped_all(cached_before: Option<u64>, cached_after: Option<u64>) -> EvictReport {
    EvictReport {
        mode: "all",
        page_size: cache::page_size(),
        files: Vec::new(),
        errors: Vec::new(),
        totals: Totals::default(),
        cached_before,
        cached_after,
    }
}

fn from_eviction(e: Eviction) -> FileResult {
    FileResult {
        path: e.path.display().to_string(),
        size: e.size,
        pages: e.pages,
        resident_before: e.resident_before,
        resident_after: Some(e.resident_after),
        dirty: None,
        mapped_by: e.mapped_by,
        resident_pages: None,
        method: None,
    }
}

fn check(path: &Path, pages: bool) -> Result<FileResult, CacheError> {
    let residency = cache::residency(path)?;
    let resident_pages = if pages {
        let resident = cache::resident_pages(path)?;
        Some(resident.runs.iter().map(inclusive).collect())
    } else {
        None
    };
    Ok(FileResult {
        path: path.display().to_string(),
        size: std::fs::metadata(path).map(|m| m.len()).unwrap_or(0),
        pages: residency.pages,
        resident_before: residency.resident,
        resident_after: None,
        dirty: residency.dirty,
        mapped_by: Vec::new(),
        resident_pages,
        method: Some(residency.method),
    })
}

fn inclusive(run: &Range<u64>) -> [u64; 2] {
    [run.start, run.end - 1]
}
