//! Miss accounting: in a traced start a prefetcher served (through
//! `coldstart run` or `coldstart-run`, or by the system-wide service), what
//! the prefetcher read, what the program's own processes still read, and
//! why each page the program read was not already there.
//!
//! The prefetcher is every task named as the prefetcher
//! ([`coldstart_prefetch::replay::PREFETCHER_COMM`]) in the traced tree
//! (coldstart-run's detached prefetcher), and every task of that name
//! outside it that a long-running process created during the run (the
//! service creates the threads that replay a plan once told of the exec,
//! in its own process): [`LoadedRun::prefetcher_tasks`]. Its reads count
//! the same wherever it ran. The program is every other task of the traced
//! tree; other tasks outside the tree are left out. The name and those
//! times are all a trace knows: when the service serves a second start
//! that begins during this run, that start's prefetch reads count as the
//! prefetcher's too (they are never counted as the program's, and a page
//! they read that this program then used is a hit either way). The
//! recorder keeps only the tree's inode loads, so `prefetcher_inode_loads`
//! counts an in-tree prefetcher's only.
//!
//! Each page the program brought into the cache gets one reason, decided
//! in this order:
//! - it was read before the prefetcher's first task started (of the tasks
//!   whose start the trace saw): under a launcher, the launcher's own start
//!   (coldstart-run and its libraries); under the service, what the program
//!   read before the service's threads began. No plan can serve it;
//! - the file is not in the plan;
//! - the file is in the plan, but the run saw another file at its path
//!   (size, modification time or build-id differ), so the prefetcher
//!   skipped it as changed;
//! - the file is in the plan, but not that page;
//! - instead of "file not in the plan" or "page not in the plan": the page
//!   entered the cache during the program's own call asking the kernel to
//!   read ahead (readahead(2), or fadvise64 or madvise with WILLNEED). The
//!   program chose to read it, which no plan stops; a page it only asked
//!   for is no page it needed, and one it also demanded is learned as any
//!   other;
//! - the prefetcher had read the page earlier in the run and it was
//!   evicted before the program needed it;
//! - otherwise the page was planned and the program got there first (a
//!   race: the prefetcher had not reached it, or never did).
//!
//! A page the program read is *demanded* when a fault, a read() or a user
//! fault of the program named that very page; the others came in with a
//! readahead window around a demanded page. Refining a plan adds demanded
//! pages only.
//!
//! Without the plan (a start the service served: its plan is not in the
//! profile, and none was given) the accounting still counts what the
//! prefetcher read and what the program read itself, but of the reasons
//! only those that need no plan: before-prefetcher, evicted, and
//! not-prefetched for the rest (the plan would tell which of file not in
//! the plan, file changed, page not in the plan, asked, or race).

use crate::compile::plannable_path;
use coldstart_analyze::loaded::{LoadedRun, event_pages};
use coldstart_analyze::pages::PageSet;
use coldstart_analyze::run::label;
use coldstart_prefetch::Plan;
use coldstart_prefetch::flags::{self, Parsed};
use coldstart_profile::{FileId, FileIdentity, PageEvent, PageEventKind, ReadaheadKind, RunId};
use serde::Serialize;
use std::collections::{HashMap, HashSet};

/// Why the program read a page itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum MissReason {
    BeforePrefetcher,
    FileNotInPlan,
    FileChanged,
    PageNotInPlan,
    Asked,
    Evicted,
    Race,
    /// Only without the plan: the prefetcher had not read the page.
    NotPrefetched,
}

impl MissReason {
    pub const ALL: [MissReason; 8] = [
        MissReason::BeforePrefetcher,
        MissReason::FileNotInPlan,
        MissReason::FileChanged,
        MissReason::PageNotInPlan,
        MissReason::Asked,
        MissReason::Evicted,
        MissReason::Race,
        MissReason::NotPrefetched,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            MissReason::BeforePrefetcher => "before-prefetcher",
            MissReason::FileNotInPlan => "file-not-in-plan",
            MissReason::FileChanged => "file-changed",
            MissReason::PageNotInPlan => "page-not-in-plan",
            MissReason::Asked => "asked",
            MissReason::Evicted => "evicted",
            MissReason::Race => "race",
            MissReason::NotPrefetched => "not-prefetched",
        }
    }

    /// The reason in words, for tables.
    pub const fn describe(self) -> &'static str {
        match self {
            MissReason::BeforePrefetcher => "read before the prefetcher started",
            MissReason::FileNotInPlan => "file not in the plan",
            MissReason::FileChanged => "file changed since planned (skipped)",
            MissReason::PageNotInPlan => "page not in the plan",
            MissReason::Asked => "the program asked (readahead, WILLNEED)",
            MissReason::Evicted => "prefetched, then evicted",
            MissReason::Race => "planned, program got there first",
            MissReason::NotPrefetched => "not prefetched (plan unknown)",
        }
    }
}

/// Pages and bytes, and how many of the pages were demanded.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Count {
    pub pages: u64,
    pub bytes: u64,
    /// Pages a fault, read() or user fault of the program named.
    pub demanded_pages: u64,
}

impl Count {
    fn add(&mut self, page_size: u64, demanded: bool) {
        self.pages += 1;
        self.bytes += page_size;
        self.demanded_pages += u64::from(demanded);
    }
}

/// A count per reason, in [`MissReason::ALL`]'s order, reasons with no
/// page left out.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ByReason(pub Vec<(MissReason, Count)>);

impl ByReason {
    fn add(&mut self, reason: MissReason, page_size: u64, demanded: bool) {
        match self.0.iter_mut().find(|(r, _)| *r == reason) {
            Some((_, count)) => count.add(page_size, demanded),
            None => {
                let mut count = Count::default();
                count.add(page_size, demanded);
                self.0.push((reason, count));
                self.0.sort_by_key(|(r, _)| *r);
            }
        }
    }

    pub fn get(&self, reason: MissReason) -> Count {
        self.0
            .iter()
            .find(|(r, _)| *r == reason)
            .map(|(_, c)| *c)
            .unwrap_or_default()
    }
}

/// Filesystem metadata read from one block device's own cache.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeviceMetadata {
    /// The device's number, `major:minor`.
    pub device: String,
    pub prefetcher: Count,
    pub program: Count,
}

/// What the program read anyway, in one process (thread group) of it.
#[derive(Debug, Clone, Serialize)]
pub struct ProcessMisses {
    /// The process id (thread group id).
    pub pid: i32,
    pub comm: Option<String>,
    pub exe: Option<String>,
    pub read: Count,
    pub by_reason: ByReason,
}

/// One file: what the plan asked of it, what the prefetcher and the
/// program read of it.
#[derive(Debug, Clone, Serialize)]
pub struct FileMisses {
    pub path: String,
    /// Pages of it in the plan (0 when it is not planned).
    pub planned_pages: u64,
    pub in_plan: bool,
    pub prefetched: Count,
    pub program_read: Count,
    pub by_reason: ByReason,
}

/// The accounting of one run against one plan.
#[derive(Debug, Clone, Serialize)]
pub struct MissAccount {
    pub run: RunId,
    pub page_size: u64,
    pub read_ahead_kb: Option<u64>,
    /// Whether the run was accounted against a plan. Without one (the
    /// system-wide service served the start, and the profile does not
    /// record its plan) `plan_bytes`, each file's `planned_pages` and
    /// `in_plan` say nothing, and a page the program read that the
    /// prefetcher had not is [`MissReason::NotPrefetched`].
    pub plan_known: bool,
    /// Bytes the plan's extents cover (0 without the plan).
    pub plan_bytes: u64,
    /// The prefetcher's tasks ([`LoadedRun::prefetcher_tasks`]); 0 when no
    /// prefetcher served the run.
    pub prefetcher_tasks: usize,
    /// Those of them outside the traced tree: the system-wide service's.
    pub prefetcher_tasks_outside_tree: usize,
    /// Pages the prefetcher brought into the cache.
    pub prefetcher: Count,
    /// Pages the program's processes brought into the cache themselves,
    /// from files on devices.
    pub program: Count,
    /// Pages of in-kernel files (device 0: filesystem metadata the block
    /// device's cache holds, shared memory) that entered the cache, by the
    /// prefetcher and by the program; not in the counts above.
    pub prefetcher_in_kernel: Count,
    pub program_in_kernel: Count,
    /// The part of each in-kernel count that is filesystem metadata read
    /// from a device holding the run's files (inode tables, directories,
    /// extent and bitmap blocks): what a start still reads from the block
    /// device besides file pages.
    pub prefetcher_metadata: Count,
    pub program_metadata: Count,
    /// The metadata counts per block device, most pages first.
    pub metadata_devices: Vec<DeviceMetadata>,
    /// Lookups that had to read an inode table block from the disk
    /// (ext4's inode loads; 0 where the kernel does not report them), by
    /// the prefetcher and by the program.
    pub prefetcher_inode_loads: u64,
    pub program_inode_loads: u64,
    /// The paths of the program's inode loads, first loaded first (a
    /// path counted once): what the plan's lookups did not warm.
    pub program_inode_paths: Vec<String>,
    pub by_reason: ByReason,
    /// Processes that read anything, most bytes first.
    pub processes: Vec<ProcessMisses>,
    /// Files the plan or the run read, the program's reads first, then
    /// the prefetcher's, most first.
    pub files: Vec<FileMisses>,
}

impl MissAccount {
    /// The program's own reads over the plan's bytes: the issue's "under
    /// 5%" target. None for an empty or unknown plan.
    pub fn program_over_plan(&self) -> Option<f64> {
        (self.plan_bytes > 0).then(|| self.program.bytes as f64 / self.plan_bytes as f64)
    }
}

/// A page the program read itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Miss {
    pub file: FileId,
    pub page: u64,
    pub reason: MissReason,
    /// The reading task.
    pub pid: i32,
    pub t_ns: i64,
    /// When the program first demanded the page (fault, read(), user
    /// fault), if it did.
    pub demanded_ns: Option<i64>,
}

/// The plan's files as the run knows them.
struct PlanView {
    /// Planned pages by path.
    pages: HashMap<String, PageSet>,
    identity: HashMap<String, FileIdentity>,
}

impl PlanView {
    fn new(plan: &Plan) -> PlanView {
        let mut ranges: HashMap<usize, Vec<(u64, u64)>> = HashMap::new();
        for e in &plan.extents {
            ranges.entry(e.file).or_default().push((e.page, e.pages));
        }
        let mut pages = HashMap::new();
        let mut identity = HashMap::new();
        for (index, file) in plan.files.iter().enumerate() {
            pages.insert(
                file.path.clone(),
                PageSet::from_ranges(ranges.remove(&index).unwrap_or_default()),
            );
            identity.insert(file.path.clone(), file.identity());
        }
        PlanView { pages, identity }
    }
}

/// Every page the program's processes read themselves in `run`, with its
/// reason against `plan`, in the order they were read.
pub fn misses(run: &LoadedRun, plan: &Plan) -> Vec<Miss> {
    misses_against(run, Some(&PlanView::new(plan)))
}

/// [`misses`] when the plan is unknown: each page's reason is one of
/// before-prefetcher, evicted and not-prefetched.
pub fn misses_without_plan(run: &LoadedRun) -> Vec<Miss> {
    misses_against(run, None)
}

fn misses_against(run: &LoadedRun, view: Option<&PlanView>) -> Vec<Miss> {
    let prefetcher = run.prefetcher_tasks();
    let mut walk = MissWalk {
        membership: view.map(|view| plan_membership(run, view)),
        prefetcher_start: prefetcher_start(run, &prefetcher),
        asked: asked_pages(run, &prefetcher),
        prefetcher: &prefetcher,
        prefetched: HashSet::new(),
        evicted: HashSet::new(),
        read: HashMap::new(),
        demanded: HashMap::new(),
        misses: Vec::new(),
    };
    let in_kernel = in_kernel_files(run);
    for e in run
        .events
        .iter()
        .filter(|e| !in_kernel.contains(&e.file_id))
    {
        walk.event(run, e);
    }
    walk.finish()
}

/// How the plan knows one file of the run: its planned pages (None when
/// the file is not in the plan), and whether the run saw the file the plan
/// recorded.
#[derive(Clone, Copy)]
struct PlanMembership<'a> {
    planned: Option<&'a PageSet>,
    same: bool,
}

const NOT_PLANNED: PlanMembership<'static> = PlanMembership {
    planned: None,
    same: false,
};

/// Each file id of the run with the plan's view of it, by the path the
/// plan would know it by.
fn plan_membership<'a>(run: &LoadedRun, view: &'a PlanView) -> HashMap<FileId, PlanMembership<'a>> {
    run.files
        .iter()
        .map(|file| {
            let path = plannable_path(file)
                .map(str::to_string)
                .unwrap_or_else(|| label(file));
            let same = match (view.identity.get(&path), file.identity()) {
                (Some(want), Some(seen)) => want.same_as(&seen),
                // A size the run could not learn says nothing against the plan.
                (Some(_), None) => true,
                (None, _) => false,
            };
            let planned = view.pages.get(&path);
            (file.id, PlanMembership { planned, same })
        })
        .collect()
}

/// When the prefetcher's first task started, in the tree or outside it
/// (tasks whose start the trace did not see are left out). The launcher
/// starts the prefetcher, then becomes the program; the service starts its
/// threads once told of the exec: what the program read before that,
/// nothing could have prefetched.
fn prefetcher_start(run: &LoadedRun, prefetcher: &HashSet<i32>) -> Option<i64> {
    run.processes
        .iter()
        .filter(|p| prefetcher.contains(&p.pid))
        .filter_map(|p| p.t_start_ns)
        .min()
}

/// Pages the program's own calls asked the kernel for, with the asking
/// task and when the call's run of pages began to enter the cache: the
/// first read of such a page by that task from then on is the call's.
fn asked_pages(run: &LoadedRun, prefetcher: &HashSet<i32>) -> HashMap<(FileId, u64), (i32, i64)> {
    run.readahead
        .iter()
        .filter(|r| r.kind == ReadaheadKind::Asked)
        .filter(|r| run.in_tree(r.pid) && !prefetcher.contains(&r.pid))
        .flat_map(|r| {
            (r.page..r.page.saturating_add(r.size))
                .map(move |page| ((r.file_id, page), (r.pid, r.t_ns)))
        })
        .collect()
}

/// The run's page events in order, and what they have left: which pages
/// the prefetcher read and which of those were evicted since, which the
/// program read (as misses) and when it first demanded each.
struct MissWalk<'a> {
    /// None without the plan.
    membership: Option<HashMap<FileId, PlanMembership<'a>>>,
    prefetcher_start: Option<i64>,
    asked: HashMap<(FileId, u64), (i32, i64)>,
    prefetcher: &'a HashSet<i32>,
    prefetched: HashSet<(FileId, u64)>,
    evicted: HashSet<(FileId, u64)>,
    /// Each page the program read, by its index in `misses`.
    read: HashMap<(FileId, u64), usize>,
    demanded: HashMap<(FileId, u64), i64>,
    misses: Vec<Miss>,
}

impl MissWalk<'_> {
    fn event(&mut self, run: &LoadedRun, e: &PageEvent) {
        // The prefetcher's tasks may be outside the tree (the service).
        let by_prefetcher = self.prefetcher.contains(&e.pid);
        let by_program = !by_prefetcher && run.in_tree(e.pid);
        match e.kind {
            PageEventKind::Evict => {
                for page in event_pages(e) {
                    if self.prefetched.contains(&(e.file_id, page)) {
                        self.evicted.insert((e.file_id, page));
                    }
                }
            }
            PageEventKind::Read if by_prefetcher => {
                for page in event_pages(e) {
                    self.prefetched.insert((e.file_id, page));
                    self.evicted.remove(&(e.file_id, page));
                }
            }
            PageEventKind::Read if by_program => self.program_read(e),
            kind if kind.is_demand() && by_program => {
                for page in event_pages(e) {
                    self.demanded.entry((e.file_id, page)).or_insert(e.t_ns);
                }
            }
            _ => {}
        }
    }

    /// Each page of a read by the program is a miss, with its reason.
    fn program_read(&mut self, e: &PageEvent) {
        let membership = self
            .membership
            .as_ref()
            .map(|m| m.get(&e.file_id).copied().unwrap_or(NOT_PLANNED));
        for page in event_pages(e) {
            let key = (e.file_id, page);
            let reason = self.reason(e, membership, page);
            self.read.insert(key, self.misses.len());
            self.misses.push(Miss {
                file: e.file_id,
                page,
                reason,
                pid: e.pid,
                t_ns: e.t_ns,
                demanded_ns: None,
            });
        }
    }

    /// Why the program read `page` itself, in the order the module
    /// describes; `membership` is None without the plan.
    fn reason(
        &mut self,
        e: &PageEvent,
        membership: Option<PlanMembership>,
        page: u64,
    ) -> MissReason {
        let key = (e.file_id, page);
        // A read again after an eviction is not the call's.
        let by_call = match self.asked.get(&key) {
            Some(&(pid, since)) if pid == e.pid && e.t_ns >= since => {
                self.asked.remove(&key);
                true
            }
            _ => false,
        };
        if self.prefetcher_start.is_some_and(|t| e.t_ns < t) {
            return MissReason::BeforePrefetcher;
        }
        let Some(membership) = membership else {
            return if self.evicted.contains(&key) {
                MissReason::Evicted
            } else {
                MissReason::NotPrefetched
            };
        };
        match membership.planned {
            None if by_call => MissReason::Asked,
            None => MissReason::FileNotInPlan,
            Some(_) if !membership.same => MissReason::FileChanged,
            Some(set) if !contains(set, page) && by_call => MissReason::Asked,
            Some(set) if !contains(set, page) => MissReason::PageNotInPlan,
            Some(_) if self.evicted.contains(&key) => MissReason::Evicted,
            Some(_) => MissReason::Race,
        }
    }

    /// The misses, each with when the program first demanded its page.
    fn finish(mut self) -> Vec<Miss> {
        for (key, index) in self.read {
            self.misses[index].demanded_ns = self.demanded.get(&key).copied();
        }
        self.misses
    }
}

/// Files of device 0 (filesystem metadata, shared memory, memfd): their
/// pages enter the cache without a read of a file on a device, so they are
/// counted apart, never as misses.
fn in_kernel_files(run: &LoadedRun) -> HashSet<FileId> {
    run.files
        .iter()
        .filter(|f| f.in_kernel())
        .map(|f| f.id)
        .collect()
}

/// The in-kernel files that are a block device's own cache, where
/// filesystems keep their metadata. The kernel's block device
/// pseudo-filesystem numbers each device's inode with the device's own
/// number in its internal encoding (major << 20 | minor), so a device-0
/// file whose inode is that number for a device holding one of the run's
/// files is the metadata of the filesystem on it. Shared memory and other
/// in-kernel files are numbered otherwise. Each such file maps to its
/// device, `major:minor`.
pub fn metadata_files(run: &LoadedRun) -> HashMap<FileId, String> {
    let devices: HashMap<u64, String> = run
        .files
        .iter()
        .filter(|f| !f.in_kernel())
        .map(|f| {
            let (major, minor) = (f.dev_major(), f.dev_minor());
            (
                (u64::from(major) << 20) | u64::from(minor),
                format!("{major}:{minor}"),
            )
        })
        .collect();
    run.files
        .iter()
        .filter(|f| f.in_kernel())
        .filter_map(|f| devices.get(&f.ino).map(|device| (f.id, device.clone())))
        .collect()
}

fn contains(set: &PageSet, page: u64) -> bool {
    set.pages_overlapping(page, page + 1, 1) > 0
}

/// The accounting of `run` against `plan`: [`misses`] summed per reason,
/// process and file, and the prefetcher's reads.
pub fn account(run: &LoadedRun, plan: &Plan) -> MissAccount {
    account_against(run, Some(plan))
}

/// The accounting of `run` when its plan is unknown (the system-wide
/// service served it and none was given): what the prefetcher read and
/// what the program read itself, each page with the reasons
/// [`misses_without_plan`] gives.
pub fn account_without_plan(run: &LoadedRun) -> MissAccount {
    account_against(run, None)
}

fn account_against(run: &LoadedRun, plan: Option<&Plan>) -> MissAccount {
    let page_size = run.page_size();
    let prefetcher = run.prefetcher_tasks();
    let view = plan.map(PlanView::new);
    let path_of = paths_by_file(run);
    let mut reads = run_reads(run, &prefetcher, &path_of);
    let misses = program_misses(run, view.as_ref(), &path_of);
    let files = file_rows(view.as_ref(), misses.by_file, &mut reads.prefetched_by_file);
    let loads = inode_loads(run, &prefetcher, &path_of);
    MissAccount {
        run: run.id(),
        page_size,
        read_ahead_kb: run.run.start.read_ahead_kb,
        plan_known: plan.is_some(),
        plan_bytes: plan.map_or(0, Plan::bytes),
        prefetcher_tasks: prefetcher.len(),
        prefetcher_tasks_outside_tree: prefetcher.iter().filter(|&&pid| !run.in_tree(pid)).count(),
        prefetcher: reads.prefetched,
        program: misses.program,
        prefetcher_in_kernel: reads.prefetcher_in_kernel,
        program_in_kernel: reads.program_in_kernel,
        prefetcher_metadata: reads.prefetcher_metadata,
        program_metadata: reads.program_metadata,
        metadata_devices: reads.metadata_devices,
        prefetcher_inode_loads: loads.prefetcher,
        program_inode_loads: loads.program,
        program_inode_paths: loads.program_paths,
        by_reason: misses.by_reason,
        processes: process_rows(run, misses.by_process),
        files,
    }
}

/// Each file's row name: its plannable path, else its label.
fn paths_by_file(run: &LoadedRun) -> HashMap<FileId, String> {
    run.files
        .iter()
        .map(|f| {
            let path = plannable_path(f)
                .map(str::to_string)
                .unwrap_or_else(|| label(f));
            (f.id, path)
        })
        .collect()
}

/// The run's reads that are not the program's misses: in-kernel files'
/// (metadata by device among them), and the prefetcher's (in the tree or
/// outside it).
struct RunReads {
    prefetcher_in_kernel: Count,
    program_in_kernel: Count,
    prefetcher_metadata: Count,
    program_metadata: Count,
    /// Most metadata pages first.
    metadata_devices: Vec<DeviceMetadata>,
    prefetched: Count,
    prefetched_by_file: HashMap<String, Count>,
}

fn run_reads(
    run: &LoadedRun,
    prefetcher: &HashSet<i32>,
    path_of: &HashMap<FileId, String>,
) -> RunReads {
    let page_size = run.page_size();
    let in_kernel = in_kernel_files(run);
    let metadata = metadata_files(run);
    let mut out = RunReads {
        prefetcher_in_kernel: Count::default(),
        program_in_kernel: Count::default(),
        prefetcher_metadata: Count::default(),
        program_metadata: Count::default(),
        metadata_devices: Vec::new(),
        prefetched: Count::default(),
        prefetched_by_file: HashMap::new(),
    };
    let mut by_device: HashMap<&str, DeviceMetadata> = HashMap::new();
    for e in run.events.iter().filter(|e| {
        e.kind == PageEventKind::Read && (run.in_tree(e.pid) || prefetcher.contains(&e.pid))
    }) {
        let pages = event_pages(e);
        let n = pages.end - pages.start;
        if in_kernel.contains(&e.file_id) {
            let by_prefetcher = prefetcher.contains(&e.pid);
            let (in_kernel_count, metadata_count) = if by_prefetcher {
                (&mut out.prefetcher_in_kernel, &mut out.prefetcher_metadata)
            } else {
                (&mut out.program_in_kernel, &mut out.program_metadata)
            };
            in_kernel_count.pages += n;
            in_kernel_count.bytes += n * page_size;
            if let Some(device) = metadata.get(&e.file_id) {
                let row = by_device.entry(device).or_insert_with(|| DeviceMetadata {
                    device: device.clone(),
                    prefetcher: Count::default(),
                    program: Count::default(),
                });
                for count in [
                    metadata_count,
                    if by_prefetcher {
                        &mut row.prefetcher
                    } else {
                        &mut row.program
                    },
                ] {
                    count.pages += n;
                    count.bytes += n * page_size;
                }
            }
            continue;
        }
        if !prefetcher.contains(&e.pid) {
            continue;
        }
        out.prefetched.pages += n;
        out.prefetched.bytes += n * page_size;
        let count = out
            .prefetched_by_file
            .entry(path_of.get(&e.file_id).cloned().unwrap_or_default())
            .or_default();
        count.pages += n;
        count.bytes += n * page_size;
    }
    out.metadata_devices = by_device.into_values().collect();
    out.metadata_devices.sort_by(|a, b| {
        (b.prefetcher.pages + b.program.pages)
            .cmp(&(a.prefetcher.pages + a.program.pages))
            .then_with(|| a.device.cmp(&b.device))
    });
    out
}

/// The program's misses summed: in all, by reason, by process and by file.
struct ProgramMisses {
    program: Count,
    by_reason: ByReason,
    by_process: HashMap<i32, (Count, ByReason)>,
    by_file: HashMap<String, (Count, ByReason)>,
}

fn program_misses(
    run: &LoadedRun,
    view: Option<&PlanView>,
    path_of: &HashMap<FileId, String>,
) -> ProgramMisses {
    let page_size = run.page_size();
    let mut out = ProgramMisses {
        program: Count::default(),
        by_reason: ByReason::default(),
        by_process: HashMap::new(),
        by_file: HashMap::new(),
    };
    for miss in misses_against(run, view) {
        let demanded = miss.demanded_ns.is_some();
        out.program.add(page_size, demanded);
        out.by_reason.add(miss.reason, page_size, demanded);
        let process = run.tree_process(miss.pid).unwrap_or(miss.pid);
        let (count, reasons) = out.by_process.entry(process).or_default();
        count.add(page_size, demanded);
        reasons.add(miss.reason, page_size, demanded);
        let (count, reasons) = out
            .by_file
            .entry(path_of.get(&miss.file).cloned().unwrap_or_default())
            .or_default();
        count.add(page_size, demanded);
        reasons.add(miss.reason, page_size, demanded);
    }
    out
}

/// One row per process that missed, most bytes first.
fn process_rows(
    run: &LoadedRun,
    by_process: HashMap<i32, (Count, ByReason)>,
) -> Vec<ProcessMisses> {
    let mut rows: Vec<ProcessMisses> = by_process
        .into_iter()
        .map(|(pid, (read, by_reason))| {
            let row = run.processes.iter().find(|p| p.pid == pid);
            ProcessMisses {
                pid,
                comm: row.and_then(|p| p.comm.clone()),
                exe: row.and_then(|p| p.exe.clone()),
                read,
                by_reason,
            }
        })
        .collect();
    rows.sort_by(|a, b| b.read.bytes.cmp(&a.read.bytes).then(a.pid.cmp(&b.pid)));
    rows
}

/// One row per file the program missed in, the prefetcher read or the plan
/// holds: most program bytes first, then most prefetched.
fn file_rows(
    view: Option<&PlanView>,
    mut program_reads: HashMap<String, (Count, ByReason)>,
    prefetched_by_file: &mut HashMap<String, Count>,
) -> Vec<FileMisses> {
    let mut paths: HashSet<String> = program_reads.keys().cloned().collect();
    paths.extend(prefetched_by_file.keys().cloned());
    if let Some(view) = view {
        paths.extend(view.pages.keys().cloned());
    }
    let mut rows: Vec<FileMisses> = paths
        .into_iter()
        .map(|path| {
            let (program_read, by_reason) = program_reads.remove(&path).unwrap_or_default();
            FileMisses {
                planned_pages: view
                    .and_then(|v| v.pages.get(&path))
                    .map_or(0, PageSet::len),
                in_plan: view.is_some_and(|v| v.pages.contains_key(&path)),
                prefetched: prefetched_by_file.remove(&path).unwrap_or_default(),
                program_read,
                by_reason,
                path,
            }
        })
        .collect();
    rows.sort_by(|a, b| {
        b.program_read
            .bytes
            .cmp(&a.program_read.bytes)
            .then(b.prefetched.bytes.cmp(&a.prefetched.bytes))
            .then(a.path.cmp(&b.path))
    });
    rows
}

/// The run's lookups that read an inode table block, by whose they were.
struct InodeLoads {
    prefetcher: u64,
    program: u64,
    /// The program's, first loaded first, each path once.
    program_paths: Vec<String>,
}

fn inode_loads(
    run: &LoadedRun,
    prefetcher: &HashSet<i32>,
    path_of: &HashMap<FileId, String>,
) -> InodeLoads {
    let mut out = InodeLoads {
        prefetcher: 0,
        program: 0,
        program_paths: Vec::new(),
    };
    // The recorder keeps the tree's only; a prefetcher's outside it would
    // count as the prefetcher's.
    for load in run
        .inode_loads
        .iter()
        .filter(|l| run.in_tree(l.pid) || prefetcher.contains(&l.pid))
    {
        if prefetcher.contains(&load.pid) {
            out.prefetcher += 1;
            continue;
        }
        out.program += 1;
        let path = path_of.get(&load.file_id).cloned().unwrap_or_default();
        if !out.program_paths.contains(&path) {
            out.program_paths.push(path);
        }
    }
    out
}

/// The plan a run's command line gave the prefetcher: `--plan PATH` (or
/// `--plan=PATH`) of a `coldstart-run ... -- PROGRAM` or `coldstart run
/// ... -- PROGRAM` command line, read by the launcher's own parser
/// ([`flags::parse`]), so a command line it would refuse gives none.
/// Relative paths are the run's working directory's. A start the
/// system-wide service served is traced with the program's own command
/// line, which names no plan: None (see
/// [`crate::served::ServingPlan::NotRecorded`]).
pub fn plan_of_run(run: &coldstart_profile::Run) -> Option<std::path::PathBuf> {
    let argv = &run.start.argv;
    let name = |s: &str| {
        std::path::Path::new(s)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    };
    let options = match argv.first().map(|a| name(a)).as_deref() {
        Some("coldstart-run") => &argv[1..],
        Some("coldstart") if argv.get(1).map(String::as_str) == Some("run") => &argv[2..],
        _ => return None,
    };
    let words = options.iter().map(std::ffi::OsString::from);
    let Ok(Parsed::Run(launch, _)) = flags::parse(words) else {
        return None;
    };
    let path = launch.plan;
    Some(if path.is_absolute() {
        path
    } else {
        std::path::Path::new(&run.start.cwd).join(path)
    })
}
