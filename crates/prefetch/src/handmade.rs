//! Plans written by hand, for tests that arrange exactly which extents a
//! replay is asked for (as `coldstart_profile::handmade` does for runs).

use crate::model::{Extent, Plan, PlanFile, PlanSource};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// The file at `path` as a plan records it now: its size and modification
/// time, no build-id.
pub fn file(path: &Path) -> std::io::Result<PlanFile> {
    let meta = std::fs::metadata(path)?;
    Ok(PlanFile {
        path: path.to_string_lossy().into_owned(),
        size: meta.size(),
        mtime_ns: Some(meta.mtime() * 1_000_000_000 + meta.mtime_nsec()),
        build_id: None,
    })
}

/// A plan of `files` whose `extents` are (file index, first page, pages),
/// in prefetch order, needed 1 ms apart; no extent merged or split.
pub fn plan(page_size: u64, files: Vec<PlanFile>, extents: &[(usize, u64, u64)]) -> Plan {
    Plan {
        page_size,
        source: PlanSource {
            profile: "hand-made".to_string(),
            runs: vec![1],
            min_runs: 1,
            merge_gap_pages: 0,
            max_extent_pages: 1024,
            max_bytes: None,
            pages_from: "demand".to_string(),
        },
        files,
        extents: extents
            .iter()
            .enumerate()
            .map(|(i, &(file, page, pages))| Extent {
                file,
                page,
                pages,
                need_ns: i as i64 * 1_000_000,
            })
            .collect(),
        lookups: Vec::new(),
    }
}
