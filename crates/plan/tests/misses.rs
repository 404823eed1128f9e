//! Miss accounting over hand-made served starts whose page events are
//! arranged so that each reason, each demanded page and each ignored read
//! occurs a number of times the test knows by construction; and finding
//! the plan in a run's command line.

mod common;

use coldstart_analyze::loaded::LoadedRun;
use coldstart_plan::misses::{
    ByReason, Count, DeviceMetadata, FileMisses, MissAccount, MissReason, account,
    account_without_plan, misses, misses_without_plan, plan_of_run,
};
use coldstart_prefetch::replay::PREFETCHER_COMM;
use coldstart_prefetch::{Extent, Plan, PlanFile, PlanSource};
use coldstart_profile::{
    EndReason, File, FileId, Mark, PageEvent, PageEventKind, Process, Readahead, ReadaheadKind,
    Run, RunId, handmade,
};
use common::{MS, PAGE, event, file, plan_file};
use std::path::PathBuf;

const RUN: RunId = 7;
/// The program: process 100, its thread 101, and a child process 200.
const APP: i32 = 100;
const APP_THREAD: i32 = 101;
const CHILD: i32 = 200;
/// Two threads of the prefetcher, in the traced tree as under
/// `coldstart-run`.
const PREFETCHER: i32 = 150;
const PREFETCHER_THREAD: i32 = 151;
/// Another program on the machine, not traced.
const OUTSIDER: i32 = 999;
/// makedev(0, 23): an in-kernel filesystem.
const SHM: u64 = 23;

/// File ids of the run.
const A: FileId = 1;
const NEW: FileId = 2;
const CHANGED: FileId = 3;
const IN_KERNEL: FileId = 4;
const B: FileId = 5;
const OTHER: FileId = 6;
/// The block device's own cache for SDA1 (filesystem metadata), and an
/// in-kernel file numbered like a device the run has no file on.
const METADATA: FileId = 7;
const DECOY: FileId = 8;
/// makedev(0, 3): the block device pseudo-filesystem.
const BDEV: u64 = 3;

fn extent(file: usize, page: u64, pages: u64) -> Extent {
    Extent {
        file,
        page,
        pages,
        need_ns: MS,
    }
}

fn plan(files: Vec<PlanFile>, extents: Vec<Extent>) -> Plan {
    Plan {
        page_size: PAGE,
        source: PlanSource {
            profile: "p.db".into(),
            runs: vec![1],
            min_runs: 1,
            merge_gap_pages: 4,
            max_extent_pages: 1024,
            max_bytes: None,
            pages_from: "demand".into(),
        },
        files,
        extents,
        lookups: Vec::new(),
    }
}

fn run_row(argv: &[&str], cwd: &str) -> Run {
    let mut start = handmade::run_start(PAGE, 128);
    start.argv = argv.iter().map(|a| a.to_string()).collect();
    start.cwd = cwd.into();
    Run {
        id: RUN,
        start,
        ended_ns: Some(100 * MS),
        end_reason: Some(EndReason::ReadyRegex),
        exit_code: None,
        exit_signal: Some(15),
        root_pid: Some(APP),
        lost_events: 0,
        complete: true,
        loader: None,
    }
}

fn processes() -> Vec<Process> {
    let mut prefetcher = handmade::process(PREFETCHER, Some(PREFETCHER), PREFETCHER_COMM, true);
    prefetcher.exe = Some("/usr/bin/coldstart-run".into());
    let mut app = handmade::process(APP, Some(APP), "app", true);
    app.exe = Some("/bin/app".into());
    vec![
        prefetcher,
        handmade::process(PREFETCHER_THREAD, Some(PREFETCHER), PREFETCHER_COMM, true),
        app,
        handmade::process(APP_THREAD, Some(APP), "app", true),
        handmade::process(CHILD, Some(CHILD), "app-child", true),
        handmade::process(OUTSIDER, Some(OUTSIDER), "other", false),
    ]
}

fn loaded(files: Vec<File>, events: Vec<PageEvent>) -> LoadedRun {
    LoadedRun::new(
        run_row(
            &["coldstart-run", "--plan", "/p/plan", "--", "/bin/app"],
            "/",
        ),
        files,
        events,
        Vec::new(),
        processes(),
        vec![Mark {
            t_ns: 50 * MS,
            name: "ready".into(),
        }],
    )
}

/// The plan: a.so pages 0-9 and 20-29, changed.so pages 0-2 (recorded at
/// 10 pages; the run sees 11), b.so pages 0-1 (never read). 25 pages.
/// [`processes`] with the prefetcher's tasks started at `t_start_ns`.
fn processes_with_prefetcher_from(t_start_ns: i64) -> Vec<Process> {
    let mut processes = processes();
    for p in processes
        .iter_mut()
        .filter(|p| p.comm.as_deref() == Some(PREFETCHER_COMM))
    {
        p.t_start_ns = Some(t_start_ns);
    }
    processes
}

/// Each miss of `run` against [`the_plan`]: its page and reason.
fn pages_and_reasons(run: &LoadedRun) -> Vec<(u64, MissReason)> {
    misses(run, &the_plan())
        .iter()
        .map(|m| (m.page, m.reason))
        .collect()
}

fn the_plan() -> Plan {
    plan(
        vec![
            plan_file("/lib/a.so", 100),
            plan_file("/lib/changed.so", 10),
            plan_file("/lib/b.so", 10),
        ],
        vec![
            extent(0, 0, 10),
            extent(0, 20, 10),
            extent(1, 0, 3),
            extent(2, 0, 2),
        ],
    )
}

/// One served start. What each read is, by construction:
/// - prefetcher: a.so 0-9 (10 pages), a.so 5 again after its eviction (1),
///   in-kernel shm 0-1 (2, in-kernel);
/// - evicted: a.so 2, 3 (evicted by the outsider) and 7 (by the program
///   itself), prefetched then read by the program; page 2 faulted: 3
///   pages, 1 demanded;
/// - race: a.so 5 (evicted, but prefetched again before the program read
///   it), 20-23 (planned, never prefetched; the eviction of 20-21 came
///   before any prefetch): 5 pages; page 21 faulted by the program's
///   thread, 22 by the outsider and 23 by the prefetcher, so 1 demanded;
/// - page-not-in-plan: a.so 50-53 read by the program's thread, 50-51
///   read() by the process: 4 pages, 2 demanded;
/// - file-not-in-plan: new.so 0-7 read by the child, page 5 touched: 8
///   pages, 1 demanded;
/// - file-changed: changed.so 0-2, page 0 faulted: 3 pages, 1 demanded;
/// - in-kernel: shm 4-6 read by the program: 3 pages, counted apart;
/// - metadata: SDA1's block device cache (inode 8 << 20 | 1), 3 pages read
///   by the prefetcher and 4 by the program; a decoy in-kernel file
///   numbered as device 9:0, which holds none of the run's files, 1 page
///   read by the child: in-kernel, not metadata;
/// - the outsider's reads of a.so 60-69 and other.so: ignored.
fn served() -> LoadedRun {
    let files = vec![
        file(A, "/lib/a.so", 100),
        file(NEW, "/lib/new.so", 20),
        file(CHANGED, "/lib/changed.so", 11),
        File {
            dev: SHM,
            ..file(IN_KERNEL, "/dev/shm/x", 10)
        },
        file(B, "/lib/b.so", 10),
        file(OTHER, "/lib/other.so", 10),
        File {
            dev: BDEV,
            ino: (8 << 20) | 1,
            path: None,
            ..file(METADATA, "", 1 << 20)
        },
        File {
            dev: BDEV,
            ino: 9 << 20,
            path: None,
            ..file(DECOY, "", 1 << 20)
        },
    ];
    use PageEventKind::*;
    let events = vec![
        event(10, PREFETCHER, A, 0, 10, Read),
        event(11, PREFETCHER_THREAD, IN_KERNEL, 0, 2, Read),
        event(20, OUTSIDER, A, 2, 2, Evict),
        event(21, APP, A, 7, 1, Evict),
        event(22, OUTSIDER, A, 5, 1, Evict),
        event(23, OUTSIDER, A, 20, 2, Evict),
        event(30, PREFETCHER_THREAD, A, 5, 1, Read),
        event(40, APP, A, 2, 1, Fault),
        event(41, APP, A, 2, 2, Read),
        event(42, APP, A, 7, 1, Read),
        event(43, APP, A, 5, 1, Read),
        event(50, APP, A, 20, 4, Read),
        event(51, APP_THREAD, A, 21, 1, Fault),
        event(52, OUTSIDER, A, 22, 1, Fault),
        event(53, PREFETCHER, A, 23, 1, Fault),
        event(60, APP, A, 50, 2, Access),
        event(61, APP_THREAD, A, 50, 4, Read),
        event(70, CHILD, NEW, 0, 8, Read),
        event(71, CHILD, NEW, 5, 1, Touch),
        event(80, APP, CHANGED, 0, 1, Fault),
        event(81, APP, CHANGED, 0, 3, Read),
        event(90, APP, IN_KERNEL, 4, 3, Read),
        event(91, APP, IN_KERNEL, 4, 1, Fault),
        event(92, PREFETCHER_THREAD, METADATA, 5000, 3, Read),
        event(93, APP, METADATA, 9000, 4, Read),
        event(94, CHILD, DECOY, 7, 1, Read),
        event(100, OUTSIDER, A, 60, 10, Read),
        event(101, OUTSIDER, OTHER, 0, 4, Read),
        event(102, OUTSIDER, OTHER, 1, 1, Fault),
    ];
    loaded(files, events)
}

fn count(pages: u64, demanded_pages: u64) -> Count {
    Count {
        pages,
        bytes: pages * PAGE,
        demanded_pages,
    }
}

fn reasons(list: &[(MissReason, u64, u64)]) -> ByReason {
    ByReason(
        list.iter()
            .map(|&(reason, pages, demanded)| (reason, count(pages, demanded)))
            .collect(),
    )
}

fn file_row<'a>(account: &'a MissAccount, path: &str) -> &'a FileMisses {
    account
        .files
        .iter()
        .find(|f| f.path == path)
        .unwrap_or_else(|| panic!("{path} not in {:?}", account.files))
}

#[test]
fn each_page_the_program_read_gets_its_reason_and_demand() {
    let run = served();
    let list = misses(&run, &the_plan());
    let mut got: Vec<(FileId, u64, MissReason, i32, bool)> = list
        .iter()
        .map(|m| (m.file, m.page, m.reason, m.pid, m.demanded_ns.is_some()))
        .collect();
    got.sort();
    use MissReason::*;
    let mut want = vec![
        (A, 2, Evicted, APP, true),
        (A, 3, Evicted, APP, false),
        (A, 7, Evicted, APP, false),
        (A, 5, Race, APP, false),
        (A, 20, Race, APP, false),
        (A, 21, Race, APP, true),
        (A, 22, Race, APP, false),
        (A, 23, Race, APP, false),
        (A, 50, PageNotInPlan, APP_THREAD, true),
        (A, 51, PageNotInPlan, APP_THREAD, true),
        (A, 52, PageNotInPlan, APP_THREAD, false),
        (A, 53, PageNotInPlan, APP_THREAD, false),
        (CHANGED, 0, FileChanged, APP, true),
        (CHANGED, 1, FileChanged, APP, false),
        (CHANGED, 2, FileChanged, APP, false),
    ];
    want.extend((0..8).map(|page| (NEW, page, FileNotInPlan, CHILD, page == 5)));
    want.sort();
    assert_eq!(got, want);
    // In the order they were read, each with its read's time and its first
    // demand's.
    let times: Vec<i64> = list.iter().map(|m| m.t_ns).collect();
    assert!(times.is_sorted(), "{times:?}");
    let page_2 = list.iter().find(|m| m.file == A && m.page == 2).unwrap();
    assert_eq!((page_2.t_ns, page_2.demanded_ns), (41_000, Some(40_000)));
    let page_21 = list.iter().find(|m| m.file == A && m.page == 21).unwrap();
    assert_eq!((page_21.t_ns, page_21.demanded_ns), (50_000, Some(51_000)));
}

/// A row of pages that entered the cache during task `pid`'s own
/// readahead(2) or WILLNEED call, from `t_us`.
fn asked_row(t_us: i64, pid: i32, file_id: FileId, page: u64, size: u64) -> Readahead {
    handmade::readahead(ReadaheadKind::Asked, t_us * 1000, pid, file_id, page, size)
}

#[test]
fn pages_read_in_the_programs_own_calls_are_asked_unless_planned_or_read_again() {
    const ASKED: FileId = 9;
    use PageEventKind::{Evict, Fault, Read};
    let files = vec![file(A, "/lib/a.so", 100), file(ASKED, "/lib/asked.so", 20)];
    let events = vec![
        // The program's call: asked.so 0-3, then a.so 0 (planned) and
        // 40-41 (not) in another call of its thread.
        event(10_000, APP, ASKED, 0, 4, Read),
        event(12_000, APP_THREAD, A, 0, 1, Read),
        event(12_000, APP_THREAD, A, 40, 2, Read),
        // The child reads a.so 42, in a row its sibling thread asked for.
        event(13_000, CHILD, A, 42, 1, Read),
        // asked.so 1 is evicted and faulted in again by the program.
        event(20_000, OUTSIDER, ASKED, 1, 1, Evict),
        event(30_000, APP, ASKED, 1, 1, Fault),
        event(30_000, APP, ASKED, 1, 1, Read),
        // The prefetcher's own call on asked.so 10-11; the program reads
        // page 10 after it was evicted.
        event(31_000, PREFETCHER, ASKED, 10, 2, Read),
        event(32_000, OUTSIDER, ASKED, 10, 1, Evict),
        event(40_000, APP, ASKED, 10, 1, Read),
    ];
    let readahead = vec![
        asked_row(10_000, APP, ASKED, 0, 4),
        asked_row(12_000, APP_THREAD, A, 0, 1),
        asked_row(12_000, APP_THREAD, A, 40, 3),
        asked_row(31_000, PREFETCHER, ASKED, 10, 2),
    ];
    let run = LoadedRun::new(
        run_row(
            &["coldstart-run", "--plan", "/p/plan", "--", "/bin/app"],
            "/",
        ),
        files,
        events,
        readahead,
        processes(),
        Vec::new(),
    );
    let mut got: Vec<(FileId, u64, MissReason, bool)> = misses(&run, &the_plan())
        .iter()
        .map(|m| (m.file, m.page, m.reason, m.demanded_ns.is_some()))
        .collect();
    got.sort();
    use MissReason::*;
    let mut want = vec![
        (A, 0, Race, false),
        (A, 40, Asked, false),
        (A, 41, Asked, false),
        (A, 42, PageNotInPlan, false),
        (ASKED, 0, Asked, false),
        (ASKED, 1, Asked, false),
        (ASKED, 1, FileNotInPlan, true),
        (ASKED, 2, Asked, false),
        (ASKED, 3, Asked, false),
        (ASKED, 10, FileNotInPlan, false),
    ];
    want.sort();
    assert_eq!(got, want);
}

#[test]
fn the_account_sums_the_reasons_per_run_process_and_file() {
    let run = served();
    let account = account(&run, &the_plan());
    use MissReason::*;

    assert_eq!(account.run, RUN);
    assert_eq!(account.page_size, PAGE);
    assert_eq!(account.read_ahead_kb, Some(128));
    assert_eq!(account.plan_bytes, 25 * PAGE);
    assert_eq!(account.prefetcher_tasks, 2);
    // 10 pages, then page 5 again; the prefetcher demands nothing.
    assert_eq!(account.prefetcher, count(11, 0));
    // shm 2 + metadata 3; the metadata alone.
    assert_eq!(account.prefetcher_in_kernel, count(5, 0));
    assert_eq!(account.prefetcher_metadata, count(3, 0));
    // 3 evicted + 5 race + 4 page + 8 file + 3 changed; 1+1+2+1+1 demanded.
    assert_eq!(account.program, count(23, 6));
    // shm 3 + metadata 4 + decoy 1; the metadata alone.
    assert_eq!(account.program_in_kernel, count(8, 0));
    assert_eq!(account.program_metadata, count(4, 0));
    // All of it from sda1's cache; the decoy names no device of the run.
    assert_eq!(
        account.metadata_devices,
        [DeviceMetadata {
            device: "8:1".into(),
            prefetcher: count(3, 0),
            program: count(4, 0),
        }]
    );
    assert_eq!(
        account.by_reason,
        reasons(&[
            (FileNotInPlan, 8, 1),
            (FileChanged, 3, 1),
            (PageNotInPlan, 4, 2),
            (Evicted, 3, 1),
            (Race, 5, 1),
        ])
    );
    assert_eq!(account.by_reason.get(Race), count(5, 1));
    assert_eq!(
        account.program_over_plan(),
        Some(23.0 / 25.0),
        "the program's bytes over the plan's"
    );

    // The thread's reads fold into process 100; the prefetcher and the
    // outsider are not the program.
    let processes: Vec<(i32, Option<&str>, Option<&str>, Count)> = account
        .processes
        .iter()
        .map(|p| (p.pid, p.comm.as_deref(), p.exe.as_deref(), p.read))
        .collect();
    assert_eq!(
        processes,
        [
            (APP, Some("app"), Some("/bin/app"), count(15, 5)),
            (CHILD, Some("app-child"), None, count(8, 1)),
        ]
    );
    assert_eq!(
        account.processes[0].by_reason,
        reasons(&[
            (FileChanged, 3, 1),
            (PageNotInPlan, 4, 2),
            (Evicted, 3, 1),
            (Race, 5, 1),
        ])
    );
    assert_eq!(
        account.processes[1].by_reason,
        reasons(&[(FileNotInPlan, 8, 1)])
    );

    // Files the program read, most first, then the plan's unread b.so;
    // the in-kernel file and the outsider's other.so are not there.
    let paths: Vec<&str> = account.files.iter().map(|f| f.path.as_str()).collect();
    assert_eq!(
        paths,
        ["/lib/a.so", "/lib/new.so", "/lib/changed.so", "/lib/b.so"]
    );
    let a = file_row(&account, "/lib/a.so");
    assert_eq!((a.in_plan, a.planned_pages), (true, 20));
    assert_eq!(a.prefetched, count(11, 0));
    assert_eq!(a.program_read, count(12, 4));
    assert_eq!(
        a.by_reason,
        reasons(&[(PageNotInPlan, 4, 2), (Evicted, 3, 1), (Race, 5, 1)])
    );
    let new = file_row(&account, "/lib/new.so");
    assert_eq!((new.in_plan, new.planned_pages), (false, 0));
    assert_eq!(new.prefetched, count(0, 0));
    assert_eq!(new.program_read, count(8, 1));
    assert_eq!(new.by_reason, reasons(&[(FileNotInPlan, 8, 1)]));
    let changed = file_row(&account, "/lib/changed.so");
    assert_eq!((changed.in_plan, changed.planned_pages), (true, 3));
    assert_eq!(changed.program_read, count(3, 1));
    assert_eq!(changed.by_reason, reasons(&[(FileChanged, 3, 1)]));
    let b = file_row(&account, "/lib/b.so");
    assert_eq!((b.in_plan, b.planned_pages), (true, 2));
    assert_eq!(b.prefetched, count(0, 0));
    assert_eq!(b.program_read, count(0, 0));
    assert_eq!(b.by_reason, ByReason::default());
}

#[test]
fn a_run_without_the_prefetcher_puts_every_read_on_the_program() {
    // The same start with the prefetcher's tasks renamed: their reads are
    // the program's, and nothing was prefetched, so nothing was evicted.
    let mut run = served();
    for process in &mut run.processes {
        if process.comm.as_deref() == Some(PREFETCHER_COMM) {
            process.comm = Some("app".into());
        }
    }
    let account = account(&run, &the_plan());
    assert_eq!(account.prefetcher_tasks, 0);
    assert_eq!(account.prefetcher, count(0, 0));
    assert_eq!(account.prefetcher_in_kernel, count(0, 0));
    assert_eq!(account.prefetcher_metadata, count(0, 0));
    // Its 11 reads of a.so join the program's 23; shm 0-1 and its 3
    // metadata pages join the program's in-kernel pages. Page 23's fault is
    // now the program's.
    assert_eq!(account.program, count(34, 7));
    assert_eq!(account.program_in_kernel, count(13, 0));
    assert_eq!(account.program_metadata, count(7, 0));
    assert_eq!(
        account.metadata_devices,
        [DeviceMetadata {
            device: "8:1".into(),
            prefetcher: count(0, 0),
            program: count(7, 0),
        }]
    );
    assert_eq!(account.by_reason.get(MissReason::Evicted), count(0, 0));
}

#[test]
fn a_size_the_run_did_not_learn_is_not_a_change_and_a_build_id_only_one_side_knows_neither() {
    // a.so: the run could not stat it. b.so: the run read its build-id,
    // the plan has none. c.so: both have build-ids, and they differ.
    let mut a = file(A, "/lib/a.so", 100);
    a.size = None;
    let mut b = file(B, "/lib/b.so", 10);
    b.build_id = Some("feed".into());
    let mut c = file(OTHER, "/lib/c.so", 10);
    c.build_id = Some("beef".into());
    let mut planned_c = plan_file("/lib/c.so", 10);
    planned_c.build_id = Some("dead".into());
    let plan = plan(
        vec![
            plan_file("/lib/a.so", 100),
            plan_file("/lib/b.so", 10),
            planned_c,
        ],
        vec![extent(0, 0, 1), extent(1, 0, 1), extent(2, 0, 1)],
    );
    use PageEventKind::Read;
    let run = loaded(
        vec![a, b, c],
        vec![
            event(1, APP, A, 0, 1, Read),
            event(2, APP, B, 0, 1, Read),
            event(3, APP, OTHER, 0, 1, Read),
        ],
    );
    let reasons: Vec<(FileId, MissReason)> = misses(&run, &plan)
        .iter()
        .map(|m| (m.file, m.reason))
        .collect();
    assert_eq!(
        reasons,
        [
            (A, MissReason::Race),
            (B, MissReason::Race),
            (OTHER, MissReason::FileChanged)
        ]
    );
}

fn plan_of(argv: &[&str], cwd: &str) -> Option<PathBuf> {
    plan_of_run(&run_row(argv, cwd))
}

#[test]
fn the_plan_is_found_in_the_launchers_command_line_only() {
    let some = |p: &str| Some(PathBuf::from(p));
    assert_eq!(
        plan_of(&["coldstart-run", "--plan", "/p/plan", "--", "app"], "/w"),
        some("/p/plan")
    );
    assert_eq!(
        plan_of(
            &[
                "/usr/local/bin/coldstart-run",
                "--plan=/p/plan",
                "--",
                "app"
            ],
            "/w"
        ),
        some("/p/plan")
    );
    assert_eq!(
        plan_of(
            &[
                "/usr/bin/coldstart",
                "run",
                "--threads",
                "2",
                "--plan",
                "rel/plan",
                "--",
                "app"
            ],
            "/home/u"
        ),
        some("/home/u/rel/plan")
    );
    assert_eq!(
        plan_of(&["coldstart", "run", "--plan=p.plan", "--", "app"], "/w"),
        some("/w/p.plan")
    );
    // Another coldstart command, or the program itself.
    assert_eq!(
        plan_of(&["coldstart", "plan", "--plan", "/p/plan"], "/w"),
        None
    );
    assert_eq!(plan_of(&["/bin/app", "--plan", "/p/plan"], "/w"), None);
    assert_eq!(plan_of(&["app", "--plan=/p/plan"], "/w"), None);
    // After `--` the words are the program's.
    assert_eq!(
        plan_of(&["coldstart-run", "--", "app", "--plan", "/p/plan"], "/w"),
        None
    );
    assert_eq!(
        plan_of(&["coldstart", "run", "--", "app", "--plan=/p/plan"], "/w"),
        None
    );
    // No plan given.
    assert_eq!(plan_of(&["coldstart-run", "--", "app"], "/w"), None);
    assert_eq!(plan_of(&[], "/w"), None);
}

#[test]
fn reads_before_the_prefetcher_started_are_the_launchers_and_refining_leaves_them_out() {
    // The launcher (the program's pid before its exec) reads its own
    // executable and a page of a.so at 1 and 2 µs; the prefetcher's first
    // task starts at 3 µs; the program then demands a.so page 40 (not
    // planned) at 10 µs.
    let processes = processes_with_prefetcher_from(3_000);
    let files = vec![
        file(A, "/lib/a.so", 100),
        file(NEW, "/usr/bin/coldstart-run", 20),
    ];
    let events = vec![
        event(1, APP, NEW, 0, 2, PageEventKind::Read),
        event(1, APP, NEW, 0, 1, PageEventKind::Fault),
        event(2, APP, A, 30, 1, PageEventKind::Read),
        event(2, APP, A, 30, 1, PageEventKind::Fault),
        event(10, APP, A, 40, 1, PageEventKind::Read),
        event(10, APP, A, 40, 1, PageEventKind::Fault),
    ];
    let run = LoadedRun::new(
        run_row(
            &["coldstart-run", "--plan", "/p/plan", "--", "/bin/app"],
            "/",
        ),
        files,
        events,
        Vec::new(),
        processes,
        Vec::new(),
    );
    let plan = the_plan();
    let got: Vec<(FileId, u64, MissReason)> = misses(&run, &plan)
        .iter()
        .map(|m| (m.file, m.page, m.reason))
        .collect();
    assert_eq!(
        got,
        vec![
            (NEW, 0, MissReason::BeforePrefetcher),
            (NEW, 1, MissReason::BeforePrefetcher),
            (A, 30, MissReason::BeforePrefetcher),
            (A, 40, MissReason::PageNotInPlan),
        ]
    );
    let account = account(&run, &plan);
    assert_eq!(
        account.by_reason.get(MissReason::BeforePrefetcher),
        count(3, 2)
    );
    // Refining adds the program's demand, not the launcher's.
    let refined = coldstart_plan::refine::refine(
        &plan,
        &plan,
        std::slice::from_ref(&run),
        &coldstart_plan::compile::CompileOptions {
            merge_gap_pages: 0,
            ..coldstart_plan::compile::CompileOptions::default()
        },
    );
    assert_eq!(refined.stats.added_pages, 1);
    assert!(
        !refined
            .plan
            .files
            .iter()
            .any(|f| f.path == "/usr/bin/coldstart-run"),
        "{:?}",
        refined.plan.files
    );
}

#[test]
fn inode_loads_are_counted_per_side_and_become_lookups_of_the_programs_paths() {
    use coldstart_plan::lookups::{LookupPool, program_loads};
    use coldstart_prefetch::Lookup;
    use coldstart_profile::InodeLoad;
    let load = |t_us: i64, pid: i32, file_id: FileId| InodeLoad {
        t_ns: t_us * 1000,
        pid,
        file_id,
    };
    let mut run = served();
    run.inode_loads = vec![
        load(5, PREFETCHER_THREAD, B),
        load(6, APP, NEW),
        load(7, APP_THREAD, NEW),
        load(8, CHILD, CHANGED),
        load(9, OUTSIDER, A),
        // Unresolved: counted, labelled, never a lookup.
        load(10, APP, METADATA),
        // After the ready mark (50 ms): counted, not planned.
        load(60_000, CHILD, A),
    ];
    let account = account(&run, &the_plan());
    assert_eq!(account.prefetcher_inode_loads, 1);
    assert_eq!(account.program_inode_loads, 5);
    assert_eq!(account.program_inode_paths.len(), 4);
    assert_eq!(
        &account.program_inode_paths[..2],
        ["/lib/new.so", "/lib/changed.so"]
    );
    assert_eq!(account.program_inode_paths[3], "/lib/a.so");

    let loads = program_loads(&run);
    assert_eq!(
        loads
            .into_iter()
            .collect::<std::collections::BTreeMap<_, _>>(),
        [
            (
                "/lib/changed.so".to_string(),
                (8_000, 1000 + CHANGED as u64)
            ),
            ("/lib/new.so".to_string(), (6_000, 1000 + NEW as u64)),
        ]
        .into()
    );

    // Pooled: a path in fewer runs than asked for is left out; the need
    // is the median of the runs' first loads; the order is by need.
    let mut later = run.clone();
    later.inode_loads = vec![load(30, APP, NEW), load(40, APP, NEW)];
    let mut third = run.clone();
    third.inode_loads = vec![load(20, CHILD, NEW)];
    let mut pool = LookupPool::default();
    for r in [&run, &later, &third] {
        pool.add(r);
    }
    assert_eq!(
        pool.lookups(2),
        [Lookup {
            path: "/lib/new.so".into(),
            ino: 1000 + NEW as u64,
            need_ns: 20_000,
        }]
    );
    let mut pool = LookupPool::default();
    pool.add(&run);
    let inodes: Vec<u64> = pool.lookups(1).iter().map(|l| l.ino).collect();
    assert_eq!(inodes, [1000 + NEW as u64, 1000 + CHANGED as u64]);
    // Needed first, looked up first, whatever the inode numbers.
    let mut reversed = run.clone();
    reversed.inode_loads = vec![load(6, CHILD, CHANGED), load(8, APP, NEW)];
    let mut pool = LookupPool::default();
    pool.add(&reversed);
    let inodes: Vec<u64> = pool.lookups(1).iter().map(|l| l.ino).collect();
    assert_eq!(inodes, [1000 + CHANGED as u64, 1000 + NEW as u64]);
}

/// The system-wide service, outside the traced tree: its main thread (not
/// the prefetcher's, running before the trace began), two replay threads
/// named as the prefetcher, created at 5 µs, a replay thread of an earlier
/// start that ended before this one began, and one still finishing an
/// earlier start (created before the trace, so its start is unknown) until
/// 15 µs.
const SERVICE: i32 = 300;
const SERVICE_WORKER: i32 = 301;
const SERVICE_THREAD: i32 = 302;
const STALE_WORKER: i32 = 303;
const LINGERING_WORKER: i32 = 304;
/// Another program's launcher, outside the tree, forked its detached
/// prefetcher process at 2 µs; its replay thread was created at 6 µs.
const LAUNCHER: i32 = 400;
const LAUNCHER_WORKER: i32 = 401;

fn service_processes() -> Vec<Process> {
    let replay = |pid: i32| Process {
        t_start_ns: Some(5_000),
        ..handmade::process(pid, Some(SERVICE), PREFETCHER_COMM, false)
    };
    vec![
        Process {
            t_start_ns: None,
            ..handmade::process(SERVICE, Some(SERVICE), "coldstart", false)
        },
        replay(SERVICE_WORKER),
        replay(SERVICE_THREAD),
        Process {
            t_start_ns: Some(-9_000_000),
            t_end_ns: Some(-1_000_000),
            ..handmade::process(STALE_WORKER, Some(SERVICE), PREFETCHER_COMM, false)
        },
        Process {
            t_start_ns: None,
            t_end_ns: Some(15_000),
            ..handmade::process(LINGERING_WORKER, Some(SERVICE), PREFETCHER_COMM, false)
        },
        Process {
            t_start_ns: Some(2_000),
            ..handmade::process(LAUNCHER, Some(LAUNCHER), "coldstart-run", false)
        },
        Process {
            t_start_ns: Some(6_000),
            ..handmade::process(LAUNCHER_WORKER, Some(LAUNCHER), PREFETCHER_COMM, false)
        },
    ]
}

/// A start the service served: the program runs by its own command line
/// (no launcher, no plan named), its tree holds no prefetcher. By
/// construction, against [`the_plan`] (a.so 0-9 and 20-29 planned):
/// - the service's threads read a.so 0-9 (10 pages) and 20-23 (4), and 3
///   metadata pages: 14 pages prefetched, 3 of metadata;
/// - the stale thread read a.so 95 at -2 ms, the lingering one a.so 90-91
///   at 3 µs, the other launcher's prefetcher a.so 80-81 at 7 µs, the
///   service's main thread other.so 0-1, the outsider a.so 60-69: none of
///   them the prefetcher's or the program's;
/// - the program faults a.so 0-3 and its thread 21: prefetched, cached, no
///   read of its own, so no miss;
/// - the program read a.so 40 at 1 µs, before the service's threads
///   started (5 µs): before-prefetcher, demanded;
/// - a.so 5 is evicted by the outsider, then faulted and read by the
///   program: evicted, demanded;
/// - a.so 24-25 read by the program, 24 faulted: planned, not prefetched:
///   race, 1 demanded;
/// - a.so 50 read and faulted by the program: page-not-in-plan, demanded.
fn served_by_service() -> LoadedRun {
    let files = vec![
        file(A, "/lib/a.so", 100),
        file(OTHER, "/lib/other.so", 10),
        File {
            dev: BDEV,
            ino: (8 << 20) | 1,
            path: None,
            ..file(METADATA, "", 1 << 20)
        },
    ];
    use PageEventKind::*;
    let events = vec![
        event(-2_000, STALE_WORKER, A, 95, 1, Read),
        event(1, APP, A, 40, 1, Read),
        event(1, APP, A, 40, 1, Fault),
        event(3, LINGERING_WORKER, A, 90, 2, Read),
        event(7, LAUNCHER_WORKER, A, 80, 2, Read),
        event(10, SERVICE_WORKER, A, 0, 10, Read),
        event(11, SERVICE_THREAD, A, 20, 4, Read),
        event(12, SERVICE_WORKER, METADATA, 7000, 3, Read),
        event(13, SERVICE, OTHER, 0, 2, Read),
        event(20, APP, A, 0, 1, Fault),
        event(20, APP, A, 1, 1, Fault),
        event(20, APP, A, 2, 1, Fault),
        event(20, APP, A, 3, 1, Fault),
        event(21, APP_THREAD, A, 21, 1, Fault),
        event(30, OUTSIDER, A, 5, 1, Evict),
        event(31, APP, A, 5, 1, Fault),
        event(31, APP, A, 5, 1, Read),
        event(40, APP, A, 24, 2, Read),
        event(40, APP, A, 24, 1, Fault),
        event(50, APP, A, 50, 1, Read),
        event(50, APP, A, 50, 1, Fault),
        event(60, OUTSIDER, A, 60, 10, Read),
    ];
    let mut processes: Vec<Process> = processes()
        .into_iter()
        .filter(|p| p.comm.as_deref() != Some(PREFETCHER_COMM))
        .collect();
    processes.extend(service_processes());
    LoadedRun::new(
        run_row(&["/bin/app"], "/"),
        files,
        events,
        Vec::new(),
        processes,
        Vec::new(),
    )
}

#[test]
fn the_services_reads_from_outside_the_tree_are_the_prefetchers() {
    let run = served_by_service();
    let mut got: Vec<(FileId, u64, MissReason, i32, bool)> = misses(&run, &the_plan())
        .iter()
        .map(|m| (m.file, m.page, m.reason, m.pid, m.demanded_ns.is_some()))
        .collect();
    got.sort();
    use MissReason::*;
    // Pages 0-3 and 21, which the program faulted after the service read
    // them, are hits: not here.
    assert_eq!(
        got,
        [
            (A, 5, Evicted, APP, true),
            (A, 24, Race, APP, true),
            (A, 25, Race, APP, false),
            (A, 40, BeforePrefetcher, APP, true),
            (A, 50, PageNotInPlan, APP, true),
        ]
    );

    let account = account(&run, &the_plan());
    assert!(account.plan_known);
    assert_eq!(account.plan_bytes, 25 * PAGE);
    assert_eq!(
        (
            account.prefetcher_tasks,
            account.prefetcher_tasks_outside_tree
        ),
        (2, 2)
    );
    assert_eq!(account.prefetcher, count(14, 0));
    assert_eq!(account.prefetcher_metadata, count(3, 0));
    assert_eq!(account.prefetcher_in_kernel, count(3, 0));
    assert_eq!(account.program, count(5, 4));
    assert_eq!(account.program_in_kernel, count(0, 0));
    assert_eq!(
        account.by_reason,
        reasons(&[
            (BeforePrefetcher, 1, 1),
            (PageNotInPlan, 1, 1),
            (Evicted, 1, 1),
            (Race, 2, 1),
        ])
    );
    let processes: Vec<(i32, Count)> = account.processes.iter().map(|p| (p.pid, p.read)).collect();
    assert_eq!(processes, [(APP, count(5, 4))]);
    let a = file_row(&account, "/lib/a.so");
    assert_eq!(a.prefetched, count(14, 0));
    assert_eq!(a.program_read, count(5, 4));
    // The service's main thread is not the prefetcher: other.so is no row.
    assert!(account.files.iter().all(|f| f.path != "/lib/other.so"));

    // Were the service's inode loads in the trace, they would be the
    // prefetcher's, and no lookup of the program's.
    let mut run = run;
    run.inode_loads = vec![
        coldstart_profile::InodeLoad {
            t_ns: 10_000,
            pid: SERVICE_WORKER,
            file_id: A,
        },
        coldstart_profile::InodeLoad {
            t_ns: 40_000,
            pid: APP,
            file_id: OTHER,
        },
    ];
    let account = coldstart_plan::misses::account(&run, &the_plan());
    assert_eq!(
        (account.prefetcher_inode_loads, account.program_inode_loads),
        (1, 1)
    );
    assert_eq!(account.program_inode_paths, ["/lib/other.so"]);
    let loads: Vec<String> = coldstart_plan::lookups::program_loads(&run)
        .into_keys()
        .collect();
    assert_eq!(loads, ["/lib/other.so"]);
}

#[test]
fn without_the_plan_the_service_served_start_keeps_the_reasons_that_need_none() {
    let run = served_by_service();
    // The program's command line names no plan, and a prefetcher outside
    // the tree served it.
    assert_eq!(plan_of_run(&run.run), None);
    match coldstart_plan::served::serving_plan(&run, None).unwrap() {
        coldstart_plan::served::ServingPlan::NotRecorded { by_service } => assert!(by_service),
        other => panic!("{other:?}"),
    }

    let mut got: Vec<(FileId, u64, MissReason, bool)> = misses_without_plan(&run)
        .iter()
        .map(|m| (m.file, m.page, m.reason, m.demanded_ns.is_some()))
        .collect();
    got.sort();
    use MissReason::*;
    assert_eq!(
        got,
        [
            (A, 5, Evicted, true),
            (A, 24, NotPrefetched, true),
            (A, 25, NotPrefetched, false),
            (A, 40, BeforePrefetcher, true),
            (A, 50, NotPrefetched, true),
        ]
    );

    let account = account_without_plan(&run);
    assert!(!account.plan_known);
    assert_eq!(account.plan_bytes, 0);
    assert_eq!(account.program_over_plan(), None);
    assert_eq!(
        (
            account.prefetcher_tasks,
            account.prefetcher_tasks_outside_tree
        ),
        (2, 2)
    );
    assert_eq!(account.prefetcher, count(14, 0));
    assert_eq!(account.program, count(5, 4));
    assert_eq!(
        account.by_reason,
        reasons(&[
            (BeforePrefetcher, 1, 1),
            (Evicted, 1, 1),
            (NotPrefetched, 3, 2)
        ])
    );
    // Only the file read: no plan names others.
    let paths: Vec<&str> = account.files.iter().map(|f| f.path.as_str()).collect();
    assert_eq!(paths, ["/lib/a.so"]);
    let a = file_row(&account, "/lib/a.so");
    assert_eq!((a.in_plan, a.planned_pages), (false, 0));
    assert_eq!(a.prefetched, count(14, 0));
}

#[test]
fn a_prefetcher_in_the_tree_and_one_outside_it_count_as_one() {
    // coldstart-run's prefetcher (tasks 150 and 151) starts at 8 µs, the
    // service's threads at 5 µs: the prefetcher started at 5 µs. The
    // program reads a.so 50 at 2 µs (before it) and 51 at 6 µs (after).
    // The launcher's prefetcher reads a.so 0-4, the service's 5-9 and
    // 20-22; the program faults 0, 7 and 21 (hits) and reads 23 (race).
    let mut processes = processes_with_prefetcher_from(8_000);
    processes.extend(service_processes());
    use PageEventKind::*;
    let events = vec![
        event(2, APP, A, 50, 1, Read),
        event(6, APP, A, 51, 1, Read),
        event(10, PREFETCHER, A, 0, 5, Read),
        event(11, SERVICE_WORKER, A, 5, 5, Read),
        event(12, SERVICE_THREAD, A, 20, 3, Read),
        event(20, APP, A, 0, 1, Fault),
        event(20, APP, A, 7, 1, Fault),
        event(21, APP_THREAD, A, 21, 1, Fault),
        event(30, APP, A, 23, 1, Read),
    ];
    let both = LoadedRun::new(
        run_row(
            &["coldstart-run", "--plan", "/p/plan", "--", "/bin/app"],
            "/",
        ),
        vec![file(A, "/lib/a.so", 100)],
        events.clone(),
        Vec::new(),
        processes.clone(),
        Vec::new(),
    );
    let got = pages_and_reasons(&both);
    assert_eq!(
        got,
        [
            (50, MissReason::BeforePrefetcher),
            (51, MissReason::PageNotInPlan),
            (23, MissReason::Race),
        ]
    );
    let together = account(&both, &the_plan());
    assert_eq!(
        (
            together.prefetcher_tasks,
            together.prefetcher_tasks_outside_tree
        ),
        (4, 2)
    );
    assert_eq!(together.prefetcher, count(13, 0));
    assert_eq!(together.program, count(3, 0));

    // Without the service's rows its reads are nobody's, and the
    // prefetcher started at 8 µs: page 51 was read before it, and the
    // pages the service read are no longer prefetched.
    let launcher_only = LoadedRun::new(
        both.run.clone(),
        both.files.clone(),
        events,
        Vec::new(),
        processes.into_iter().filter(|p| p.in_tree).collect(),
        Vec::new(),
    );
    let got = pages_and_reasons(&launcher_only);
    assert_eq!(
        got,
        [
            (50, MissReason::BeforePrefetcher),
            (51, MissReason::BeforePrefetcher),
            (23, MissReason::Race),
        ]
    );
    let alone = account(&launcher_only, &the_plan());
    assert_eq!(
        (alone.prefetcher_tasks, alone.prefetcher_tasks_outside_tree),
        (2, 0)
    );
    assert_eq!(alone.prefetcher, count(5, 0));
}

#[test]
fn a_start_the_service_served_seeds_no_plan() {
    use coldstart_plan::compile::served_by_prefetcher;
    let run = served_by_service();
    assert!(served_by_prefetcher(&run.run, &run.processes));
    // Only the stale thread, gone before the start, the lingering one,
    // there before it, and another launcher's prefetcher: not served.
    let stale: Vec<Process> = run
        .processes
        .iter()
        .filter(|p| p.pid != SERVICE_WORKER && p.pid != SERVICE_THREAD)
        .cloned()
        .collect();
    assert!(!served_by_prefetcher(&run.run, &stale));
}
