//! Plans written by hand, for tests that arrange exactly which extents a
//! replay is asked for (as `coldstart_profile::handmade` does for runs).

use crate::model::{Extent, Plan, PlanFile, PlanSource};

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
    }
}
