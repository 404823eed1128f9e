//! Rows with neutral values for profiles built by hand in tests and
//! examples, so each test states only what it is about (its pages, pids,
//! readahead) instead of writing a whole run header again.

use crate::{CacheMode, EndReason, FileId, Process, Readahead, ReadaheadKind, RunEnd, RunStart};

/// A cold run of `/bin/app` by uid 1000 on kernel 6.18.0, fault-around 64
/// KiB, with the page size and the read_ahead_kb the test is about.
pub fn run_start(page_size: u64, read_ahead_kb: u64) -> RunStart {
    RunStart {
        argv: vec!["/bin/app".into()],
        cwd: "/".into(),
        cache_mode: CacheMode::Cold,
        started_at_unix_ns: 1_700_000_000_000_000_000,
        kernel: "6.18.0".into(),
        page_size,
        read_ahead_kb: Some(read_ahead_kb),
        fault_around_bytes: Some(65536),
        uid: 1000,
        gid: 1000,
        tool_version: "test".into(),
    }
}

/// Task `pid` of thread group `tgid`, named `comm`, a child of pid 1
/// started with the run; `in_tree` says whether it belongs to the traced
/// program.
pub fn process(pid: i32, tgid: Option<i32>, comm: &str, in_tree: bool) -> Process {
    Process {
        pid,
        ppid: Some(1),
        tgid,
        comm: Some(comm.into()),
        exe: None,
        t_start_ns: Some(0),
        t_end_ns: None,
        in_tree,
    }
}

/// The end of a run whose program `root_pid` exited with 0 at `ended_ns`.
pub fn exited(ended_ns: i64, root_pid: i32) -> RunEnd {
    RunEnd {
        ended_ns,
        end_reason: EndReason::Exited,
        exit_code: Some(0),
        exit_signal: None,
        root_pid: Some(root_pid),
    }
}

/// A readahead row of `kind` by task `pid` for pages `page .. page + size`
/// of `file_id` at `t_ns`, the kernel's other figures 0 or absent.
pub fn readahead(
    kind: ReadaheadKind,
    t_ns: i64,
    pid: i32,
    file_id: FileId,
    page: u64,
    size: u64,
) -> Readahead {
    Readahead {
        t_ns,
        pid,
        file_id,
        kind,
        page,
        size,
        async_size: 0,
        ra_pages: 0,
        mmap_miss: None,
        prev_pos: None,
        req_count: None,
    }
}
