//! Plans written by hand, for tests that arrange exactly which extents a
//! replay is asked for (as `coldstart_profile::handmade` does for runs).

use crate::model::{Extent, Plan, PlanFile, PlanSource};
use coldstart_system::identity::FileIdentity;
use std::path::Path;

/// The file at `path` as a plan records it now: its size and modification
/// time, no build-id.
pub fn file(path: &Path) -> std::io::Result<PlanFile> {
    Ok(PlanFile::new(
        path.to_string_lossy().into_owned(),
        FileIdentity::of_path(path)?,
    ))
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
