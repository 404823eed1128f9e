//! One run of a profile, read once, and the definitions every analysis of
//! it shares: which processes belong to the traced tree, which tasks are
//! the prefetcher's (in the tree or outside it), when the program was
//! ready, and which page events count as touched. The report, the
//! simulator, the symbol views and the plan compiler all ask a
//! [`LoadedRun`] rather than each deciding these again.

use crate::pages::PageSet;
use crate::run::label;
use coldstart_profile::{
    File, FileId, InodeLoad, Mark, PageEvent, PageEventKind, PathLookup, Process, Profile,
    Readahead, Run, RunId,
};
use std::collections::{HashMap, HashSet};
use std::ops::Range;

/// The most pages one event the recorder writes can cover: a folio's order
/// is capped at 20, and one read() moves at most MAX_RW_COUNT (just under
/// 2 GiB, 2^19 pages of 4 KiB). Loops over an event's pages stop there, so
/// a damaged profile cannot make them run for ever.
pub const MAX_EVENT_PAGES: u64 = 1 << 20;

/// The pages an event covers: `npages` from `page`. The recorder writes one
/// page for a fault and for a user fault (touch), the folio for a read or
/// an eviction, the window for fault-around and the range of a read() call.
/// Clipped to [`MAX_EVENT_PAGES`] and to the largest page number, so a
/// damaged value neither overflows nor loops for ever.
pub fn event_pages(event: &PageEvent) -> Range<u64> {
    event.page..event.page.saturating_add(event.npages.min(MAX_EVENT_PAGES))
}

/// The byte offset of `page`, saturating instead of overflowing on a
/// damaged page number.
pub fn page_offset(page: u64, page_size: u64) -> u64 {
    page.saturating_mul(page_size)
}

/// Whether an event of `kind` says the program touched its pages: a fault,
/// a read() (access) or a user fault (touch) always does; with readahead
/// off (`demand_reads`) the kernel reads only what a fault or read()
/// demands, so a page entering the cache was touched too. Fault-around
/// mappings and evictions are not touches.
pub fn is_touch(kind: PageEventKind, demand_reads: bool) -> bool {
    kind.is_demand() || (kind == PageEventKind::Read && demand_reads)
}

/// Whether `run` was traced with readahead off (`read_ahead_kb` 0): then
/// the kernel read only the pages faults and read() demanded.
pub fn demand_reads(run: &Run) -> bool {
    run.start.read_ahead_kb == Some(0)
}

/// The tasks of `run` that are the prefetcher's, among its `processes`
/// (the run's rows): the tasks named as the prefetcher
/// ([`Process::named_prefetcher`]) in the traced tree, and those outside
/// it that a long-running process created during the run.
///
/// `coldstart run` and `coldstart-run` fork their prefetcher before the
/// program's exec, so its tasks are in the tree. The system-wide service
/// runs outside it: told of the exec (fanotify), it creates the threads
/// that replay the plan in its own process, which was running before the
/// trace began. So a task of that name outside the tree counts when the
/// trace saw it created between the program's start and the run's end,
/// and saw no creation of its process (thread group). Left out are a
/// prefetcher still finishing an earlier start (its tasks were there
/// before the program started) and another launcher's prefetcher that
/// started during the run (its process was created during the trace).
///
/// The name and those times are all a trace knows of whose the threads
/// are: when the service serves a second start that begins during this
/// run, that start's prefetch reads count as this run's prefetcher's too,
/// and so do the threads of another launcher (`coldstart run --wait`)
/// that started just before the run and created its threads during it.
pub fn prefetcher_tasks(run: &Run, processes: &[Process]) -> HashSet<i32> {
    let created_during_run = |p: &Process| {
        p.t_start_ns
            .is_some_and(|start| start >= 0 && run.ended_ns.is_none_or(|ended| start <= ended))
    };
    // A process whose leader has no row, or a row with no start, was
    // there before the trace.
    let started: HashMap<i32, Option<i64>> =
        processes.iter().map(|p| (p.pid, p.t_start_ns)).collect();
    let long_running = |p: &Process| {
        started
            .get(&p.tgid.unwrap_or(p.pid))
            .copied()
            .flatten()
            .is_none()
    };
    processes
        .iter()
        .filter(|p| {
            p.named_prefetcher() && (p.in_tree || (created_during_run(p) && long_running(p)))
        })
        .map(|p| p.pid)
        .collect()
}

/// Everything a profile holds about one run.
#[derive(Debug, Clone)]
pub struct LoadedRun {
    pub run: Run,
    /// Files whose pages appear in the run, by id.
    pub files: Vec<File>,
    /// Page events in time order.
    pub events: Vec<PageEvent>,
    /// The kernel's readahead decisions, in time order.
    pub readahead: Vec<Readahead>,
    pub processes: Vec<Process>,
    /// Named instants, in time order.
    pub marks: Vec<Mark>,
    /// The tree's lookups that read an inode table block, in time order
    /// (empty unless loaded with [`LoadedRun::load_rows`]).
    pub inode_loads: Vec<InodeLoad>,
    /// Every name the run's tasks handed to a file system call, in time
    /// order (empty unless loaded with [`LoadedRun::load_rows`]).
    pub path_lookups: Vec<PathLookup>,
    /// Traced-tree task -> its process (thread group).
    tree: HashMap<i32, i32>,
    ready_ns: Option<i64>,
}

impl LoadedRun {
    /// Reads run `run` of `profile`, the latest complete run when None.
    pub fn load(
        profile: &Profile,
        run: Option<RunId>,
    ) -> Result<LoadedRun, coldstart_profile::Error> {
        let run = profile.run(run)?;
        LoadedRun::load_rows(profile, run)
    }

    /// Reads the rows of a run whose own row the caller already has.
    pub fn load_rows(profile: &Profile, run: Run) -> Result<LoadedRun, coldstart_profile::Error> {
        let id = run.id;
        let mut loaded = LoadedRun::new(
            run,
            profile.files(id)?,
            profile.page_events(id)?,
            profile.readahead(id)?,
            profile.processes(id)?,
            profile.marks(id)?,
        );
        loaded.inode_loads = profile.inode_loads(id)?;
        loaded.path_lookups = profile.path_lookups(id)?;
        Ok(loaded)
    }

    /// A run from its rows (events and marks in time order, as the profile
    /// gives them).
    pub fn new(
        run: Run,
        files: Vec<File>,
        events: Vec<PageEvent>,
        readahead: Vec<Readahead>,
        processes: Vec<Process>,
        marks: Vec<Mark>,
    ) -> LoadedRun {
        let tree = processes
            .iter()
            .filter(|p| p.in_tree)
            .map(|p| (p.pid, p.tgid.unwrap_or(p.pid)))
            .collect();
        // The earliest ready mark: a program may say it is ready more than
        // once (a --ready-regex line printed twice), and readiness is the
        // first time. Marks come in time order, so it is also the first.
        let ready_ns = marks
            .iter()
            .filter(|m| m.name == "ready")
            .map(|m| m.t_ns)
            .min();
        LoadedRun {
            run,
            files,
            events,
            readahead,
            processes,
            marks,
            inode_loads: Vec::new(),
            path_lookups: Vec::new(),
            tree,
            ready_ns,
        }
    }

    pub fn id(&self) -> RunId {
        self.run.id
    }

    /// The run's page size in bytes (at least 1, so it can divide).
    pub fn page_size(&self) -> u64 {
        self.run.start.page_size.max(1)
    }

    /// Whether the run was traced with readahead off ([`demand_reads`]).
    pub fn demand_reads(&self) -> bool {
        demand_reads(&self.run)
    }

    /// When the program said it was ready (the earliest `ready` mark), ns
    /// after it started; None without a mark.
    pub fn ready_ns(&self) -> Option<i64> {
        self.ready_ns
    }

    /// Whether task `pid` belongs to the traced process tree.
    pub fn in_tree(&self, pid: i32) -> bool {
        self.tree.contains_key(&pid)
    }

    /// The process (thread group) of tree task `pid`; None outside the tree.
    pub fn tree_process(&self, pid: i32) -> Option<i32> {
        self.tree.get(&pid).copied()
    }

    /// The prefetcher's tasks in this run, in the tree or outside it
    /// ([`prefetcher_tasks`]). Worked out from the rows on each call, so
    /// hold on to the set.
    pub fn prefetcher_tasks(&self) -> HashSet<i32> {
        prefetcher_tasks(&self.run, &self.processes)
    }

    /// The tree's processes and threads, in the profile's order.
    pub fn tree_processes(&self) -> impl Iterator<Item = &Process> {
        self.processes.iter().filter(|p| p.in_tree)
    }

    /// Whether `event` says the program touched its pages in this run
    /// (see [`is_touch`]; reads count when readahead was off).
    pub fn touches(&self, event: &PageEvent) -> bool {
        is_touch(event.kind, self.demand_reads())
    }

    /// Events of the traced tree, in time order.
    pub fn tree_events(&self) -> impl Iterator<Item = &PageEvent> {
        self.events.iter().filter(|e| self.in_tree(e.pid))
    }

    /// The ids of the run's files labelled `path` (several when the path
    /// named another inode during the run).
    pub fn file_ids_at<'a>(&'a self, path: &'a str) -> impl Iterator<Item = FileId> + 'a {
        self.files
            .iter()
            .filter(move |f| label(f) == path)
            .map(|f| f.id)
    }

    /// Pages of file `file` the traced tree touched.
    pub fn touched_pages(&self, file: FileId) -> PageSet {
        PageSet::from_ranges(
            self.tree_events()
                .filter(|e| e.file_id == file && self.touches(e))
                .map(|e| {
                    let pages = event_pages(e);
                    (pages.start, pages.end - pages.start)
                })
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use coldstart_profile::{Batch, EndReason, NewFile, RunEnd, RunStart, handmade};

    const TREE: i32 = 100;
    const THREAD: i32 = 101;
    const CHILD: i32 = 102;
    const STRANGER: i32 = 999;

    fn start(read_ahead_kb: u64) -> RunStart {
        handmade::run_start(4096, read_ahead_kb)
    }

    fn process(pid: i32, tgid: Option<i32>, in_tree: bool) -> Process {
        handmade::process(pid, tgid, "app", in_tree)
    }

    fn event(t_ns: i64, pid: i32, page: u64, npages: u64, kind: PageEventKind) -> PageEvent {
        PageEvent {
            t_ns,
            pid,
            file_id: Batch::batch_file_id(0),
            page,
            npages,
            kind,
        }
    }

    fn mark(t_ns: i64, name: &str) -> Mark {
        Mark {
            t_ns,
            name: name.into(),
        }
    }

    /// A profile with one run of one file: the tree is process 100, its
    /// thread 101 (tgid 100) and a child 102 with no tgid recorded; 999 is
    /// another program. Every kind of event, by tree and stranger.
    fn one_run(read_ahead_kb: u64) -> (tempfile::TempDir, Profile, RunId) {
        let dir = tempfile::tempdir().unwrap();
        let mut profile = Profile::create_or_open(&dir.path().join("p.db")).unwrap();
        let run = profile.begin_run(&start(read_ahead_kb)).unwrap();
        profile
            .write(
                run,
                &Batch {
                    files: vec![NewFile {
                        dev: (8 << 8) | 1,
                        ino: 12,
                        path: Some("/lib/a.so".into()),
                        size: Some(100 * 4096),
                        mtime_ns: Some(1),
                        build_id: None,
                        opened_by_tree: true,
                        kind: None,
                        opened_as: None,
                        note: None,
                    }],
                    processes: vec![
                        process(TREE, Some(TREE), true),
                        process(THREAD, Some(TREE), true),
                        process(CHILD, None, true),
                        process(STRANGER, Some(STRANGER), false),
                    ],
                    page_events: vec![
                        event(10, TREE, 0, 4, PageEventKind::Read),
                        event(11, TREE, 1, 1, PageEventKind::Fault),
                        event(12, THREAD, 8, 16, PageEventKind::Map),
                        event(13, THREAD, 30, 3, PageEventKind::Access),
                        event(14, CHILD, 50, 1, PageEventKind::Touch),
                        event(15, TREE, 60, 2, PageEventKind::Evict),
                        event(16, STRANGER, 70, 5, PageEventKind::Fault),
                        event(17, STRANGER, 80, 8, PageEventKind::Read),
                    ],
                    // Out of order on purpose: the profile sorts marks by time.
                    marks: vec![mark(40, "ready"), mark(5, "exec"), mark(25, "ready")],
                    ..Default::default()
                },
            )
            .unwrap();
        profile
            .end_run(
                run,
                &RunEnd {
                    ended_ns: 100,
                    end_reason: EndReason::ReadyRegex,
                    exit_code: None,
                    exit_signal: Some(15),
                    root_pid: Some(TREE),
                },
            )
            .unwrap();
        (dir, profile, run)
    }

    #[test]
    fn the_tree_maps_tasks_to_their_processes_and_leaves_strangers_out() {
        let (_dir, profile, run) = one_run(0);
        let loaded = LoadedRun::load(&profile, Some(run)).unwrap();
        assert_eq!(loaded.tree_process(TREE), Some(TREE));
        assert_eq!(loaded.tree_process(THREAD), Some(TREE));
        // No tgid recorded: its own process.
        assert_eq!(loaded.tree_process(CHILD), Some(CHILD));
        assert_eq!(loaded.tree_process(STRANGER), None);
        assert!(!loaded.in_tree(STRANGER));
        let tree: Vec<i32> = loaded.tree_processes().map(|p| p.pid).collect();
        assert_eq!(tree.len(), 3);
        assert!(tree.contains(&TREE) && tree.contains(&THREAD) && tree.contains(&CHILD));
        let times: Vec<i64> = loaded.tree_events().map(|e| e.t_ns).collect();
        assert_eq!(times, [10, 11, 12, 13, 14, 15]);
        let ids: Vec<FileId> = loaded.file_ids_at("/lib/a.so").collect();
        assert_eq!(ids, [loaded.files[0].id]);
        assert_eq!(loaded.file_ids_at("/lib/b.so").count(), 0);
    }

    #[test]
    fn the_prefetcher_is_its_name_in_the_tree_and_the_services_threads_created_during_the_run() {
        // The name the replay gives its threads, as a trace shows it.
        const COMM: &str = "cs-prefetch";
        /// The service's process, with no row (it did nothing the trace
        /// saw), and another of its threads, seen without a start.
        const SERVICE: i32 = 20;
        const SERVICE_MAIN: i32 = 21;
        /// Another launcher's detached prefetcher, forked during the run.
        const LAUNCHER: i32 = 30;
        let (_dir, profile, run) = one_run(0);
        let row = profile.run(Some(run)).unwrap();
        // The run ends at 100 ns.
        let task =
            |pid: i32, tgid: i32, in_tree: bool, start: Option<i64>, end: Option<i64>| Process {
                t_start_ns: start,
                t_end_ns: end,
                ..handmade::process(pid, Some(tgid), COMM, in_tree)
            };
        let processes = [
            Process {
                t_start_ns: None,
                ..handmade::process(SERVICE_MAIN, Some(SERVICE_MAIN), "coldstart", false)
            },
            Process {
                t_start_ns: Some(2),
                ..handmade::process(LAUNCHER, Some(LAUNCHER), "coldstart-run", false)
            },
            // In the tree, as under coldstart-run, whatever the times.
            task(1, 1, true, Some(3), None),
            task(2, 1, true, None, None),
            // The service's, created during the run (ended during it or
            // not, at its very start or end).
            task(3, SERVICE, false, Some(4), None),
            task(4, SERVICE_MAIN, false, Some(10), Some(90)),
            task(5, SERVICE, false, Some(0), None),
            task(6, SERVICE, false, Some(100), None),
            // The service's, there before the program started (created
            // before it, or before the trace: no start seen), or created
            // after the run.
            task(7, SERVICE, false, Some(-50), Some(-1)),
            task(8, SERVICE, false, Some(-1), Some(50)),
            task(9, SERVICE, false, None, None),
            task(10, SERVICE, false, None, Some(20)),
            task(11, SERVICE, false, Some(101), None),
            // Created during the run in a process created during the
            // trace: another launcher's prefetcher, or a process of its
            // own.
            task(12, LAUNCHER, false, Some(5), None),
            task(13, 13, false, Some(5), None),
            // Another name, in the tree or not.
            handmade::process(14, Some(14), "app", true),
            Process {
                t_start_ns: Some(6),
                ..handmade::process(15, Some(SERVICE), "cs-prefetch2", false)
            },
        ];
        let mut got: Vec<i32> = prefetcher_tasks(&row, &processes).into_iter().collect();
        got.sort_unstable();
        assert_eq!(got, [1, 2, 3, 4, 5, 6]);
        // A run whose end was not recorded has no bound after.
        let unended = Run {
            ended_ns: None,
            ..row
        };
        let mut got: Vec<i32> = prefetcher_tasks(&unended, &processes).into_iter().collect();
        got.sort_unstable();
        assert_eq!(got, [1, 2, 3, 4, 5, 6, 11]);
    }

    #[test]
    fn ready_is_the_earliest_ready_mark() {
        let (_dir, profile, run) = one_run(0);
        let loaded = LoadedRun::load(&profile, None).unwrap();
        assert_eq!(loaded.id(), run);
        assert_eq!(loaded.ready_ns(), Some(25));
        // Built from rows whatever their order.
        let unordered = LoadedRun::new(
            loaded.run.clone(),
            Vec::new(),
            Vec::new(),
            Vec::new(),
            Vec::new(),
            vec![mark(40, "ready"), mark(25, "ready"), mark(1, "exec")],
        );
        assert_eq!(unordered.ready_ns(), Some(25));
        let none = LoadedRun::new(
            loaded.run.clone(),
            Vec::new(),
            Vec::new(),
            Vec::new(),
            Vec::new(),
            vec![mark(1, "exec")],
        );
        assert_eq!(none.ready_ns(), None);
    }

    #[test]
    fn with_readahead_off_reads_are_touches_and_with_it_on_they_are_not() {
        // Tree events: read 0-3, fault 1, map 8-23, access 30-32, touch 50,
        // evict 60-61. Touched: fault {1}, access {30, 31, 32}, touch {50},
        // plus with readahead off the reads {0..3}.
        let (_dir, profile, run) = one_run(0);
        let off = LoadedRun::load(&profile, Some(run)).unwrap();
        assert!(off.demand_reads());
        let file = off.files[0].id;
        assert_eq!(
            off.touched_pages(file).extents(),
            &[(0, 4), (30, 33), (50, 51)]
        );
        let (_dir, profile, run) = one_run(128);
        let on = LoadedRun::load(&profile, Some(run)).unwrap();
        assert!(!on.demand_reads());
        let file = on.files[0].id;
        assert_eq!(
            on.touched_pages(file).extents(),
            &[(1, 2), (30, 33), (50, 51)]
        );
        for kind in PageEventKind::ALL {
            let always = matches!(
                kind,
                PageEventKind::Fault | PageEventKind::Access | PageEventKind::Touch
            );
            assert_eq!(is_touch(kind, false), always, "{kind:?}");
            assert_eq!(
                is_touch(kind, true),
                always || kind == PageEventKind::Read,
                "{kind:?}"
            );
        }
    }

    #[test]
    fn damaged_page_numbers_neither_overflow_nor_run_for_ever() {
        let huge = event(0, TREE, u64::MAX - 2, 10, PageEventKind::Read);
        assert_eq!(event_pages(&huge), u64::MAX - 2..u64::MAX);
        let long = event(0, TREE, 5, u64::MAX, PageEventKind::Access);
        assert_eq!(event_pages(&long), 5..5 + (1 << 20));
        assert_eq!(page_offset(u64::MAX / 2, 4096), u64::MAX);
        assert_eq!(page_offset(3, 4096), 12288);
    }
}
