//! The rows the plan room's tests build runs and plans from by hand: files
//! on a real disk, their plan entries, and page events.

use coldstart_prefetch::PlanFile;
use coldstart_profile::{File, FileId, PageEvent, PageEventKind};

pub const MS: i64 = 1_000_000;
pub const PAGE: u64 = 4096;
/// glibc's makedev(8, 1): a real disk.
pub const SDA1: u64 = (8 << 8) | 1;

/// A file of `pages` pages on SDA1, as a run saw it (modification time 7).
pub fn file(id: FileId, path: &str, pages: u64) -> File {
    File {
        id,
        dev: SDA1,
        ino: 1000 + id as u64,
        path: Some(path.into()),
        size: Some(pages * PAGE),
        mtime_ns: Some(7),
        build_id: None,
        opened_by_tree: true,
        kind: None,
        opened_as: None,
        note: None,
    }
}

/// The same file as a plan records it.
pub fn plan_file(path: &str, pages: u64) -> PlanFile {
    PlanFile {
        path: path.into(),
        size: pages * PAGE,
        mtime_ns: Some(7),
        build_id: None,
    }
}

/// `npages` pages of `file` from `page`, by `pid`, at `t_us` µs.
pub fn event(
    t_us: i64,
    pid: i32,
    file_id: FileId,
    page: u64,
    npages: u64,
    kind: PageEventKind,
) -> PageEvent {
    PageEvent {
        t_ns: t_us * 1000,
        pid,
        file_id,
        page,
        npages,
        kind,
    }
}
