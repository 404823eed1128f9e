//! `analyze::simulate` on hand-built profiles of plain data files: a data
//! file is one read-only mapping, so a fault on an uncached page reads
//! around it (mm/filemap.c do_sync_mmap_readahead, as readahead.rs models
//! it): read_ahead_kb 128 is ra_pages = 128 KiB / 4 KiB = 32, the window
//! starts ra_pages / 2 = 16 pages before the fault (not before page 0) and
//! is 32 pages long, cut at the end of the file. Each figure below is that
//! arithmetic, done by hand.

use coldstart_analyze::{SimulateOptions, simulate};
use coldstart_profile::handmade;
use coldstart_profile::{
    Batch, EndReason, NewFile, PageEvent, PageEventKind, Profile, ReadaheadKind, RunEnd,
};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

const MS: i64 = 1_000_000;
const PAGE: u64 = 4096;
const APP: i32 = 100;
/// Pages in each data file.
const PAGES: u64 = 100;

fn data_file(dir: &Path, name: &str) -> NewFile {
    let path = dir.join(name);
    std::fs::write(&path, vec![7u8; (PAGES * PAGE) as usize]).unwrap();
    let meta = std::fs::metadata(&path).unwrap();
    NewFile {
        dev: meta.dev(),
        ino: meta.ino(),
        path: Some(path.display().to_string()),
        size: Some(meta.size()),
        mtime_ns: Some(meta.mtime() * 1_000_000_000 + meta.mtime_nsec()),
        build_id: None,
        opened_by_tree: true,
        kind: None,
        opened_as: None,
        note: None,
    }
}

/// A run traced with readahead off in which the app faults once on page
/// `faults[i]` of file i (and reads exactly that page, as with readahead
/// off the kernel reads only what is demanded).
fn write_run(profile: &mut Profile, files: Vec<NewFile>, faults: &[u64]) -> i64 {
    let run = profile.begin_run(&handmade::run_start(PAGE, 0)).unwrap();
    let mut page_events = Vec::new();
    for (i, &page) in faults.iter().enumerate() {
        let at = (i as i64 + 1) * MS;
        for kind in [PageEventKind::Fault, PageEventKind::Read] {
            page_events.push(app_event(at, Batch::batch_file_id(i), page, kind));
        }
    }
    write_and_end(
        profile,
        run,
        Batch {
            files,
            page_events,
            ..Default::default()
        },
    );
    run
}

/// An event of the app on one page.
fn app_event(t_ns: i64, file_id: i64, page: u64, kind: PageEventKind) -> PageEvent {
    PageEvent {
        t_ns,
        pid: APP,
        file_id,
        page,
        npages: 1,
        kind,
    }
}

/// Writes `batch` into `run` with the app as its one process, and ends
/// the run: the app exited at 10 ms.
fn write_and_end(profile: &mut Profile, run: i64, batch: Batch) {
    let batch = Batch {
        processes: vec![handmade::process(APP, Some(APP), "app", true)],
        ..batch
    };
    profile.write(run, &batch).unwrap();
    profile
        .end_run(
            run,
            &RunEnd {
                ended_ns: 10 * MS,
                end_reason: EndReason::Exited,
                exit_code: Some(0),
                exit_signal: None,
                root_pid: Some(APP),
            },
        )
        .unwrap();
}

#[test]
fn one_fault_on_a_data_file_reads_around_it() {
    let dir = tempfile::tempdir().unwrap();
    let files = vec![
        data_file(dir.path(), "middle.dat"),
        data_file(dir.path(), "start.dat"),
        data_file(dir.path(), "end.dat"),
    ];
    let mut profile = Profile::create_or_open(&dir.path().join("p.db")).unwrap();
    let run = write_run(&mut profile, files, &[50, 5, 95]);
    let options = SimulateOptions {
        read_ahead_kb: Some(128),
        ..SimulateOptions::default()
    };
    let report = simulate(&profile, &options).unwrap();
    assert_eq!(report.source_run, run);
    assert_eq!(report.source_read_ahead_kb, Some(0));
    assert_eq!(
        (
            report.read_ahead_kb,
            report.fault_around_bytes,
            report.page_size
        ),
        (128, 65536, PAGE)
    );
    let by_name = |name: &str| {
        report
            .files
            .iter()
            .find(|f| f.path.ends_with(name))
            .unwrap_or_else(|| panic!("{name} in {:?}", report.files))
    };
    // Page 50: window [50 - 16, 50 - 16 + 32) = [34, 66), 32 pages.
    // Page 5: 5 - 16 is before the file, so [0, 32), 32 pages.
    // Page 95: [79, 111) cut at the file's 100 pages: [79, 100), 21 pages.
    for (name, pages_read) in [("middle.dat", 32), ("start.dat", 32), ("end.dat", 21)] {
        let f = by_name(name);
        assert_eq!(f.pages, PAGES, "{name}");
        assert_eq!(f.cached_at_start, 0, "{name}");
        assert_eq!(f.pages_touched, 1, "{name}");
        assert_eq!(f.misses, 1, "{name}");
        assert_eq!((f.pages_read, f.read_requests), (pages_read, 1), "{name}");
        assert!(!f.relaid);
    }
    let t = &report.totals;
    assert_eq!((t.files, t.pages_touched, t.misses), (3, 3, 3));
    assert_eq!((t.pages_read, t.read_requests), (32 + 32 + 21, 3));
    assert_eq!((t.cold.files, t.cold.pages_read), (3, 85));
}

#[test]
fn with_readahead_off_a_fault_reads_its_page_only() {
    let dir = tempfile::tempdir().unwrap();
    let files = vec![data_file(dir.path(), "middle.dat")];
    let mut profile = Profile::create_or_open(&dir.path().join("p.db")).unwrap();
    write_run(&mut profile, files, &[50]);
    let options = SimulateOptions {
        read_ahead_kb: Some(0),
        ..SimulateOptions::default()
    };
    let report = simulate(&profile, &options).unwrap();
    let f = &report.files[0];
    assert_eq!((f.pages_read, f.read_requests, f.misses), (1, 1, 1));
}

/// A readahead-off run in which the kernel reads page 0 of each file for
/// the app (as an exec reads an ELF header: the page enters the cache, and
/// only then does the reader's access event come), then the app faults on
/// page 1. `sync_rows[i]` says whether the trace has the synchronous
/// readahead call (page_cache_sync_ra, one page asked) that read file i's
/// page 0; without it the page reads as one the app asked for explicitly.
fn write_read_then_fault_run(profile: &mut Profile, files: Vec<NewFile>, sync_rows: &[bool]) {
    let run = profile.begin_run(&handmade::run_start(PAGE, 0)).unwrap();
    let mut page_events = Vec::new();
    let mut readahead = Vec::new();
    for (i, &sync_row) in sync_rows.iter().enumerate() {
        let file_id = Batch::batch_file_id(i);
        let at = (i as i64 + 1) * MS;
        if sync_row {
            let mut row = handmade::readahead(ReadaheadKind::Sync, at, APP, file_id, 0, 0);
            row.req_count = Some(1);
            readahead.push(row);
        }
        for (t_ns, page, kind) in [
            (at + 1_000, 0, PageEventKind::Read),
            (at + 2_000, 0, PageEventKind::Access),
            (at + 500_000, 1, PageEventKind::Fault),
            (at + 500_000, 1, PageEventKind::Read),
        ] {
            page_events.push(app_event(t_ns, file_id, page, kind));
        }
    }
    write_and_end(
        profile,
        run,
        Batch {
            files,
            page_events,
            readahead,
            ..Default::default()
        },
    );
}

#[test]
fn a_page_the_kernel_read_for_the_task_opens_a_read_window_with_its_mark() {
    let dir = tempfile::tempdir().unwrap();
    let files = vec![
        data_file(dir.path(), "read.dat"),
        data_file(dir.path(), "asked.dat"),
    ];
    let mut profile = Profile::create_or_open(&dir.path().join("p.db")).unwrap();
    write_read_then_fault_run(&mut profile, files, &[true, false]);
    let options = SimulateOptions {
        read_ahead_kb: Some(128),
        ..SimulateOptions::default()
    };
    let report = simulate(&profile, &options).unwrap();
    let by_name = |name: &str| {
        report
            .files
            .iter()
            .find(|f| f.path.ends_with(name))
            .unwrap_or_else(|| panic!("{name} in {:?}", report.files))
    };
    // A read of 1 page from a cold file (mm/readahead.c): the initial
    // window is 4 pages (1 rounded up, times 4 while at most ra_pages / 32
    // = 1), [0, 4), async_size 4 - 1 = 3 marks page 0 + 4 - 3 = 1. The
    // fault on page 1 finds it cached but marked (fault-around leaves it
    // unmapped): an asynchronous readahead of the next window, from 4 and
    // twice as long (4 <= ra_pages / 2 = 16): [4, 12). 12 pages in 2
    // requests, one miss (the read).
    let read = by_name("read.dat");
    assert_eq!(
        (read.pages_read, read.read_requests, read.misses),
        (12, 2, 1)
    );
    assert_eq!(read.requests_by_decision.get("sync-read"), Some(&1));
    assert_eq!(read.requests_by_decision.get("async"), Some(&1));
    // Asked for explicitly: page 0 alone, no mark. The fault on page 1
    // misses and reads around it: [1 - 16 -> 0, 32) less the cached page
    // 0, 31 pages. 32 pages in 2 requests, one miss (the fault).
    let asked = by_name("asked.dat");
    assert_eq!(
        (asked.pages_read, asked.read_requests, asked.misses),
        (32, 2, 1)
    );
    assert_eq!(asked.requests_by_decision.get("explicit"), Some(&1));
}
