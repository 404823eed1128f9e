//! `coldstart plan --refine` and the miss accounting of `coldstart report`
//! end to end, as root, with a C program (tests/fixtures/fast_slow.c)
//! whose child loads fast.dat in a start a prefetcher made fast and
//! slow.dat in a plain cold start. The oracles are the program's own
//! record of the pages it touched and of the mode it ran in, mincore, and
//! the plans the tests arrange by hand; never coldstart's own numbers.

use coldstart_prefetch::{PlanFile, format};
use coldstart_testkit::{can_trace, resident_pages, run_ok, skip};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The page the child polls to tell a fast start from a slow one.
const PROBE_PAGE: u64 = 700;
/// Pages the child touches in a fast start, of fast.dat: some within one
/// readahead window of each other, one far away.
const FAST_PAGES: [u64; 4] = [7, 90, 300, 3000];
/// ... and in a slow start, of slow.dat.
const SLOW_PAGES: [u64; 5] = [3, 50, 51, 200, 2600];
/// Sizes, in pages, of the files the program reads.
const PROBE_FILE_PAGES: u64 = 1024;
const WORK_FILE_PAGES: u64 = 4096;

/// Tests drop the page cache and trace: one at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn coldstart() -> Command {
    Command::new(env!("CARGO_BIN_EXE_coldstart"))
}

fn page_size() -> u64 {
    // SAFETY: sysconf has no preconditions.
    unsafe { libc::sysconf(libc::_SC_PAGESIZE) as u64 }
}

fn json(output: &Output) -> Value {
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}",
            String::from_utf8_lossy(&output.stdout)
        )
    })
}

/// A directory on a disk filesystem (tmpfs pages are never read from a
/// device) that every user can read: the program may run as the invoking
/// user. None, after [`skip`], when /var/tmp is tmpfs.
fn disk_tempdir() -> Option<tempfile::TempDir> {
    let dir = tempfile::Builder::new()
        .prefix("coldstart-refine-test")
        .tempdir_in("/var/tmp")
        .unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    if filesystem_type(dir.path()) == libc::TMPFS_MAGIC {
        skip("/var/tmp is tmpfs: its pages are never read from a device");
        return None;
    }
    Some(dir)
}

/// Where the program writes its record: tmpfs, so that writing it reads
/// nothing from a device and never enters a plan or a miss count.
fn record_dir() -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix("coldstart-refine-record")
        .tempdir_in("/dev/shm")
        .expect("/dev/shm for the program's record");
    assert_eq!(filesystem_type(dir.path()), libc::TMPFS_MAGIC);
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    dir
}

fn filesystem_type(path: &Path) -> libc::c_long {
    let name = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: statfs fills the struct we own from a NUL-terminated path.
    let mut stat: libc::statfs = unsafe { std::mem::zeroed() };
    assert_eq!(unsafe { libc::statfs(name.as_ptr(), &mut stat) }, 0);
    stat.f_type as libc::c_long
}

/// A written-back, evicted file of `pages` pages that everyone can read,
/// as a plan names it.
fn data_file(dir: &Path, name: &str, pages: u64) -> PlanFile {
    let path = dir.join(name);
    coldstart_testkit::cold_file(&path, pages, page_size());
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    coldstart_prefetch::handmade::file(&path).unwrap()
}

/// tests/fixtures/fast_slow.c, built by gcc into `dir`.
fn build_program(dir: &Path) -> PathBuf {
    let source = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/fast_slow.c");
    let binary = dir.join("fast_slow");
    run_ok(
        Command::new("gcc")
            .args(["-O1", "-Wall", "-Werror", "-o"])
            .arg(&binary)
            .arg(source),
    );
    binary
}

fn list(pages: &[u64]) -> String {
    pages
        .iter()
        .map(u64::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// The program's arguments: DIR RECORD PROBE_PAGE FAST_PAGES SLOW_PAGES.
fn program_args(dir: &Path, record: &Path) -> Vec<String> {
    vec![
        dir.to_str().unwrap().to_string(),
        record.to_str().unwrap().to_string(),
        PROBE_PAGE.to_string(),
        list(&FAST_PAGES),
        list(&SLOW_PAGES),
    ]
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Fast,
    Slow,
}

/// One start as the program recorded it.
#[derive(Debug, Default)]
struct Start {
    parent: i32,
    child: i32,
    mode: Option<Mode>,
    /// file name -> pages touched.
    touched: BTreeMap<String, BTreeSet<u64>>,
    /// The evicted.dat line: "PAGE yes|no|never-resident".
    evicted: Option<String>,
    /// file name -> pages the program asked the kernel for.
    asked: BTreeMap<String, BTreeSet<u64>>,
    ended: bool,
}

impl Start {
    fn touched(&self, file: &str) -> BTreeSet<u64> {
        self.touched.get(file).cloned().unwrap_or_default()
    }

    fn asked(&self, file: &str) -> BTreeSet<u64> {
        self.asked.get(file).cloned().unwrap_or_default()
    }
}

/// The program's record, one entry per start, in order.
fn read_record(path: &Path) -> Vec<Start> {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("the program's record {}: {e}", path.display()));
    let mut starts: Vec<Start> = Vec::new();
    for line in text.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        if words.first() == Some(&"begin") {
            starts.push(Start {
                parent: words[1].parse().unwrap(),
                ..Start::default()
            });
            continue;
        }
        let start = starts.last_mut().expect("a record starts with begin");
        match words[..] {
            ["child", pid] => start.child = pid.parse().unwrap(),
            ["mode", "fast"] => start.mode = Some(Mode::Fast),
            ["mode", "slow"] => start.mode = Some(Mode::Slow),
            ["touch", file, page] => {
                start
                    .touched
                    .entry(file.to_string())
                    .or_default()
                    .insert(page.parse().unwrap());
            }
            ["evicted", page, outcome] => start.evicted = Some(format!("{page} {outcome}")),
            ["asked", file, first, count] => {
                let first: u64 = first.parse().unwrap();
                let count: u64 = count.parse().unwrap();
                start
                    .asked
                    .entry(file.to_string())
                    .or_default()
                    .extend(first..first + count);
            }
            ["end"] => start.ended = true,
            _ => panic!("unexpected line in the record: {line}\n{text}"),
        }
    }
    for start in &starts {
        assert!(start.ended, "a start did not finish: {text}");
    }
    starts
}

/// A plan's pages, by file name (its path's last component).
fn plan_pages(path: &Path) -> BTreeMap<String, BTreeSet<u64>> {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("plan {}: {e}", path.display()));
    let plan = format::parse(&text, path).unwrap_or_else(|e| panic!("{e}"));
    let mut out: BTreeMap<String, BTreeSet<u64>> = BTreeMap::new();
    for file in &plan.files {
        out.entry(file_name(&file.path)).or_default();
    }
    for e in &plan.extents {
        out.entry(file_name(&plan.files[e.file].path))
            .or_default()
            .extend(e.page..e.page + e.pages);
    }
    out
}

fn file_name(path: &str) -> String {
    Path::new(path)
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned()
}

/// read_ahead_kb of the device holding `path`, from sysfs (a partition's
/// queue is its disk's).
fn device_read_ahead_kb(path: &Path) -> u64 {
    let dev = std::fs::metadata(path).unwrap().dev();
    let block = PathBuf::from(format!(
        "/sys/dev/block/{}:{}",
        libc::major(dev),
        libc::minor(dev)
    ));
    let block = block.canonicalize().unwrap();
    let queue = [
        block.join("queue/read_ahead_kb"),
        block.join("../queue/read_ahead_kb"),
    ];
    let file = queue
        .iter()
        .find(|p| p.exists())
        .unwrap_or_else(|| panic!("no read_ahead_kb for {}", block.display()));
    std::fs::read_to_string(file)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// The fewest misses that can have brought `touched` in: pages at least a
/// readahead window apart are never read by one window, so each group of
/// pages closer than that took one miss at least.
fn fewest_misses(touched: &BTreeSet<u64>, read_ahead_pages: u64) -> u64 {
    let window = read_ahead_pages.max(1);
    let pages: Vec<u64> = touched.iter().copied().collect();
    let gaps = pages.windows(2).filter(|w| w[1] - w[0] >= window).count();
    if pages.is_empty() { 0 } else { gaps as u64 + 1 }
}

/// The entry of `misses.files` for the file named `name`, if any.
fn file_misses<'a>(misses: &'a Value, name: &str) -> Option<&'a Value> {
    misses["files"]
        .as_array()
        .expect("misses.files")
        .iter()
        .find(|f| f["path"].as_str().is_some_and(|p| file_name(p) == name))
}

/// `by_reason` as reason -> (pages, demanded pages).
fn reasons(by_reason: &Value) -> BTreeMap<String, (u64, u64)> {
    by_reason
        .as_array()
        .expect("by_reason")
        .iter()
        .map(|pair| {
            (
                pair[0].as_str().unwrap().to_string(),
                (
                    pair[1]["pages"].as_u64().unwrap(),
                    pair[1]["demanded_pages"].as_u64().unwrap(),
                ),
            )
        })
        .collect()
}

/// `coldstart plan DATA/refine.db -o DATA/app.plan --refine --json FLAGS --
/// fast_slow ...` over fresh data files in `data`, the program appending
/// to `record`; its JSON report.
fn refine(data: &Path, record: &Path, flags: &[&str]) -> Value {
    data_file(data, "probe.dat", PROBE_FILE_PAGES);
    data_file(data, "slow.dat", WORK_FILE_PAGES);
    data_file(data, "fast.dat", WORK_FILE_PAGES);
    let program = build_program(data);
    json(&run_ok(
        coldstart()
            .arg("plan")
            .arg(data.join("refine.db"))
            .arg("-o")
            .arg(data.join("app.plan"))
            .args(["--refine", "--json"])
            .args(flags)
            .arg("--")
            .arg(&program)
            .args(program_args(data, record)),
    ))
}

#[test]
fn the_refined_plan_covers_what_fast_and_slow_starts_load() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !can_trace() {
        return;
    }
    let Some(dir) = disk_tempdir() else {
        return;
    };
    let records = record_dir();
    let data = dir.path();
    let record = records.path().join("record");
    let (db, plan) = (data.join("refine.db"), data.join("app.plan"));
    let report = refine(data, &record, &["--iterations", "4", "--seeds", "2"]);
    let starts = read_record(&record);
    let iterations = report["iterations"].as_array().expect("iterations");
    assert!(!iterations.is_empty(), "{report:#}");
    // Served plainly: coldstart-run with the plan and no other flag.
    for argv in served_argvs(&db) {
        assert_eq!(wrapper_flags(&argv).len(), 2, "{argv:?}");
        assert_eq!(wrapper_flags(&argv)[0], "--plan", "{argv:?}");
    }
    assert_eq!(
        starts.len(),
        2 + 2 + iterations.len(),
        "two seeds, a warm start (an untraced warm-up, then the traced start whose order of use \
         the plans take), then one start per iteration: {starts:?}\n{report:#}"
    );

    // The seeds: plain cold starts, readahead off, so the child ran slow,
    // and the seed plan holds exactly what it needs for that.
    let (seeds, rest) = starts.split_at(2);
    let (warm, served) = rest.split_at(2);
    // Warm, the probe page is cached: the child runs fast.
    for start in warm {
        assert_eq!(start.mode, Some(Mode::Fast), "{start:?}");
    }
    for seed in seeds {
        assert_eq!(seed.mode, Some(Mode::Slow), "{seed:?}");
        assert!(seed.touched("fast.dat").is_empty());
    }
    let slow_touched: BTreeSet<u64> = seeds.iter().flat_map(|s| s.touched("slow.dat")).collect();
    let seed_plan = plan_pages(&data.join("app.plan.start1"));
    assert!(
        seed_plan["slow.dat"].is_superset(&slow_touched),
        "seed plan {:?}, the program touched {slow_touched:?}",
        seed_plan["slow.dat"]
    );
    assert!(
        seed_plan["probe.dat"].contains(&PROBE_PAGE),
        "{seed_plan:?}"
    );
    assert!(!seed_plan.contains_key("fast.dat"), "{seed_plan:?}");

    // The first start with the seed plan: the prefetcher made the probe
    // page resident, so the child ran fast and loaded a file no seed
    // opened.
    let first = &served[0];
    assert_eq!(first.mode, Some(Mode::Fast), "{first:?}");
    let fast_touched = first.touched("fast.dat");
    assert_eq!(fast_touched, FAST_PAGES.into_iter().collect());
    let misses = &iterations[0]["misses"];
    let fast = file_misses(misses, "fast.dat")
        .unwrap_or_else(|| panic!("fast.dat not among the misses: {misses:#}"));
    assert_eq!(fast["in_plan"], false);
    let fast_reasons = reasons(&fast["by_reason"]);
    assert_eq!(
        fast_reasons.keys().collect::<Vec<_>>(),
        ["file-not-in-plan"],
        "{fast:#}"
    );
    let (read, demanded) = fast_reasons["file-not-in-plan"];
    let read_ahead_pages = device_read_ahead_kb(data) * 1024 / page_size();
    let misses_needed = fewest_misses(&fast_touched, read_ahead_pages);
    assert!(
        demanded >= misses_needed,
        "{demanded} demanded pages; the child touched {fast_touched:?}, which at \
         {read_ahead_pages} pages of readahead need {misses_needed} misses at least"
    );
    if read_ahead_pages > 0 {
        assert!(
            read > fast_touched.len() as u64,
            "at a normal readahead each miss reads a window: {read} pages for {fast_touched:?}"
        );
    }

    // The loop learns, start by start, until a start served by its plan
    // demands nothing of the data files that its plan lacks.
    let data_files = ["probe.dat", "slow.dat", "fast.dat"];
    let mut converged = false;
    for (i, start) in served.iter().enumerate() {
        let planned = plan_pages(&data.join(format!("app.plan.start{}", i + 1)));
        let covered = data_files.iter().all(|file| {
            planned
                .get(*file)
                .is_some_and(|p| p.is_superset(&start.touched(file)))
        });
        if !covered {
            continue;
        }
        converged = true;
        for file in data_files {
            let Some(entry) = file_misses(&iterations[i]["misses"], file) else {
                continue;
            };
            let reasons = reasons(&entry["by_reason"]);
            for reason in ["file-not-in-plan", "page-not-in-plan"] {
                assert_eq!(
                    reasons.get(reason).map_or(0, |r| r.1),
                    0,
                    "start {}: its plan covers what it touched, yet {reason}: {entry:#}",
                    i + 1
                );
            }
        }
    }
    assert!(
        converged,
        "no plan covered what its start touched: {starts:?}\n{report:#}"
    );

    // The plan written covers both kinds of start, and little more: the
    // issue's bound of 1.2x the pages touched, over the data files.
    let final_plan = plan_pages(&plan);
    let touched_by_all =
        |file: &str| -> BTreeSet<u64> { starts.iter().flat_map(|s| s.touched(file)).collect() };
    let mut planned_total = 0;
    let mut touched_total = 0;
    for file in data_files {
        let touched = touched_by_all(file);
        let planned = final_plan.get(file).cloned().unwrap_or_default();
        assert!(
            planned.is_superset(&touched),
            "{file}: planned {planned:?}, touched {touched:?}"
        );
        planned_total += planned.len();
        touched_total += touched.len();
    }
    assert!(
        planned_total as f64 <= 1.2 * touched_total as f64,
        "{planned_total} pages planned for {touched_total} touched: {final_plan:?}"
    );
}

/// The command lines of the profile's runs that went through coldstart-run,
/// by `coldstart runs --json`.
fn served_argvs(db: &Path) -> Vec<Vec<String>> {
    let runs = json(&run_ok(coldstart().arg("runs").arg(db).arg("--json")));
    runs["runs"]
        .as_array()
        .expect("runs")
        .iter()
        .map(|run| {
            run["argv"]
                .as_array()
                .expect("argv")
                .iter()
                .map(|word| word.as_str().unwrap().to_string())
                .collect::<Vec<_>>()
        })
        .filter(|argv| argv[0].ends_with("/coldstart-run"))
        .collect()
}

/// coldstart-run's own flags in a served command line (the words before
/// `--`).
fn wrapper_flags(argv: &[String]) -> Vec<&str> {
    argv[1..]
        .iter()
        .take_while(|word| *word != "--")
        .map(String::as_str)
        .collect()
}

#[test]
fn refine_serves_its_starts_with_no_read_around_when_asked() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !can_trace() {
        return;
    }
    let Some(dir) = disk_tempdir() else {
        return;
    };
    let records = record_dir();
    let data = dir.path();
    let record = records.path().join("record");
    let db = data.join("refine.db");
    let report = refine(
        data,
        &record,
        &["--iterations", "1", "--seeds", "1", "--no-read-around"],
    );
    let iterations = report["iterations"].as_array().expect("iterations");
    assert_eq!(iterations.len(), 1, "{report:#}");
    assert!(iterations[0]["misses"].is_object(), "{report:#}");
    // The program's own record: a seed, the warm start (and its warm-up),
    // and the one served start, which the seed plan's probe page made fast.
    let starts = read_record(&record);
    assert_eq!(starts.len(), 4, "{starts:?}");
    assert_eq!(starts[3].mode, Some(Mode::Fast), "{starts:?}");
    // The served start went through coldstart-run with the flag, the plan
    // after it; the trace recorded the command line as it was run.
    let served = served_argvs(&db);
    assert_eq!(served.len(), 1, "{served:?}");
    let plan_start = data.join("app.plan.start1");
    assert_eq!(
        wrapper_flags(&served[0]),
        ["--no-read-around", "--plan", plan_start.to_str().unwrap()],
        "{served:?}"
    );
}

/// A hand-made plan: `extents` are (file index, first page, pages), in
/// prefetch order.
fn write_plan(path: &Path, files: Vec<PlanFile>, extents: &[(usize, u64, u64)]) {
    let plan = coldstart_prefetch::handmade::plan(page_size(), files, extents);
    std::fs::write(path, format::write(&plan)).unwrap();
}

#[test]
fn each_miss_gets_the_reason_the_test_arranged() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !can_trace() {
        return;
    }
    let Some(dir) = disk_tempdir() else {
        return;
    };
    let records = record_dir();
    let data = dir.path();
    let program = build_program(data);
    let probe = data_file(data, "probe.dat", PROBE_FILE_PAGES);
    let fast = data_file(data, "fast.dat", WORK_FILE_PAGES);
    data_file(data, "slow.dat", WORK_FILE_PAGES);
    data_file(data, "extra.dat", 256);
    data_file(data, "asked.dat", 256);
    let mut changed = data_file(data, "changed.dat", 256);
    let evict = data_file(data, "evict.dat", 256);
    let (extra_page, changed_page, evict_page) = (5, 10, 20);
    // The plan lists fast.dat's first two touched pages (A), not the others
    // (B); changed.dat with another size than it has; evict.dat's page; and
    // the probe page last, so that when the child sees it resident (one
    // prefetch thread, in order) everything before it was read.
    let (planned_fast, unplanned_fast) = FAST_PAGES.split_at(2);
    changed.size += page_size();
    let plan = data.join("arranged.plan");
    write_plan(
        &plan,
        vec![fast, changed, evict, probe],
        &[
            (0, planned_fast[0], 1),
            (0, planned_fast[1], 1),
            (1, changed_page, 16),
            (2, evict_page, 1),
            (3, PROBE_PAGE, 1),
        ],
    );
    std::fs::set_permissions(&plan, std::fs::Permissions::from_mode(0o644)).unwrap();
    let record = records.path().join("record");
    let db = data.join("served.db");
    run_ok(
        coldstart()
            .arg("trace")
            .arg("-o")
            .arg(&db)
            .arg("--")
            .arg(env!("CARGO_BIN_EXE_coldstart-run"))
            .args(["--threads", "1", "--plan"])
            .arg(&plan)
            .arg("--")
            .arg(&program)
            .args(program_args(data, &record))
            .args([extra_page, changed_page, evict_page].map(|p| p.to_string())),
    );
    let starts = read_record(&record);
    assert_eq!(starts.len(), 1, "{starts:?}");
    let start = &starts[0];
    assert_eq!(
        start.mode,
        Some(Mode::Fast),
        "the prefetcher read the probe page"
    );
    assert_eq!(
        start.evicted.as_deref(),
        Some(format!("{evict_page} yes").as_str()),
        "the child saw the prefetched page of evict.dat and evicted it"
    );
    // Residency after the start: the prefetcher skipped changed.dat (only
    // the page the child touched is there, not the 16 planned), and the
    // child read the evicted page again.
    assert_eq!(
        resident_pages(&data.join("changed.dat")),
        vec![changed_page]
    );
    assert_eq!(resident_pages(&data.join("evict.dat")), vec![evict_page]);
    // asked.dat: what the child's readahead(2) and WILLNEED brought in, and
    // nothing else (by mincore; the child touched none of it).
    let asked: Vec<u64> = start.asked("asked.dat").into_iter().collect();
    assert_eq!(asked.len(), 16, "{start:?}");
    assert_eq!(resident_pages(&data.join("asked.dat")), asked);
    assert!(start.touched("asked.dat").is_empty());

    // The plan is found from the run's command line.
    let report = json(&run_ok(coldstart().arg("report").arg(&db).arg("--json")));
    let misses = &report["misses"];
    assert!(misses.is_object(), "no miss accounting: {report:#}");
    assert!(
        misses["prefetcher"]["pages"].as_u64().unwrap() > 0,
        "{misses:#}"
    );

    let by_file = |name: &str| {
        let entry = file_misses(misses, name)
            .unwrap_or_else(|| panic!("{name} not among the misses: {misses:#}"));
        (entry.clone(), reasons(&entry["by_reason"]))
    };
    let touched = |name: &str| start.touched(name).len() as u64;

    // fast.dat: the pages B the child touched are the page-not-in-plan
    // misses it demanded (plus the windows read around them); the planned
    // pages A were all read by the prefetcher first.
    let (entry, reasons_of) = by_file("fast.dat");
    let unplanned: BTreeSet<u64> = start
        .touched("fast.dat")
        .into_iter()
        .filter(|p| !planned_fast.contains(p))
        .collect();
    assert_eq!(unplanned, unplanned_fast.iter().copied().collect());
    assert_eq!(
        reasons_of.keys().collect::<Vec<_>>(),
        ["page-not-in-plan"],
        "{entry:#}"
    );
    assert_eq!(
        reasons_of["page-not-in-plan"].1,
        unplanned.len() as u64,
        "{entry:#}"
    );
    assert!(entry["prefetched"]["pages"].as_u64().unwrap() >= planned_fast.len() as u64);
    // extra.dat: one page, read without a window, in no plan.
    let (entry, reasons_of) = by_file("extra.dat");
    assert_eq!(entry["in_plan"], false);
    assert_eq!(
        reasons_of,
        BTreeMap::from([("file-not-in-plan".to_string(), (1, touched("extra.dat")))])
    );
    // changed.dat: skipped by the prefetcher, read by the child.
    let (entry, reasons_of) = by_file("changed.dat");
    assert_eq!(entry["prefetched"]["pages"], 0, "{entry:#}");
    assert_eq!(
        reasons_of,
        BTreeMap::from([("file-changed".to_string(), (1, touched("changed.dat")))])
    );
    // evict.dat: prefetched, evicted, demanded again.
    let (entry, reasons_of) = by_file("evict.dat");
    assert!(
        entry["prefetched"]["pages"].as_u64().unwrap() >= 1,
        "{entry:#}"
    );
    assert_eq!(
        reasons_of,
        BTreeMap::from([("evicted".to_string(), (1, touched("evict.dat")))])
    );
    // asked.dat: in no plan, every page read was asked for, none demanded.
    let (entry, reasons_of) = by_file("asked.dat");
    assert_eq!(entry["in_plan"], false);
    assert_eq!(
        reasons_of,
        BTreeMap::from([("asked".to_string(), (asked.len() as u64, 0))]),
        "{entry:#}"
    );
    // probe.dat: the child touched it only once it was resident.
    let (entry, _) = by_file("probe.dat");
    assert_eq!(entry["program_read"]["pages"], 0, "{entry:#}");
    // slow.dat: a fast start never opens it.
    assert!(file_misses(misses, "slow.dat").is_none(), "{misses:#}");

    // The child, by the pid it recorded, is one of the processes, with the
    // reasons of the pages it read.
    let child = misses["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["pid"] == start.child)
        .unwrap_or_else(|| panic!("child {} not among the processes: {misses:#}", start.child));
    let child_reasons = reasons(&child["by_reason"]);
    for reason in [
        "page-not-in-plan",
        "file-not-in-plan",
        "file-changed",
        "evicted",
        "asked",
    ] {
        assert!(child_reasons.contains_key(reason), "{reason}: {child:#}");
    }
    assert!(
        misses["processes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["pid"] == start.parent),
        "the parent ({}) read its own executable and libraries: {misses:#}",
        start.parent
    );
}

/// Every file in `dir` whose name starts with the plan's (or its
/// temporary's, `.NAME.PID.tmp`).
fn plan_litter(dir: &Path, plan: &Path) -> Vec<String> {
    let name = plan.file_name().unwrap().to_string_lossy().into_owned();
    let temporary = format!(".{name}");
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(&name) || n.starts_with(&temporary))
        .collect()
}

#[test]
fn a_failed_refine_leaves_the_plan_as_it_was_and_a_missing_plan_is_named() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !can_trace() {
        return;
    }
    let Some(dir) = disk_tempdir() else {
        return;
    };
    let data = dir.path();
    let db = data.join("broken.db");
    let plan = data.join("app.plan");
    let refine = || {
        coldstart()
            .arg("plan")
            .arg(&db)
            .arg("-o")
            .arg(&plan)
            .args(["--refine", "--iterations", "1", "--seeds", "1", "--"])
            .arg("/nonexistent/prog")
            .output()
            .unwrap()
    };
    let check_failure = |out: &Output| {
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{stderr}");
        assert!(stderr.contains("/nonexistent/prog"), "{stderr}");
        assert_eq!(
            stderr.lines().filter(|l| l.contains("error")).count(),
            1,
            "one error: {stderr}"
        );
    };

    // No plan before: none after, nor a start plan or a temporary.
    check_failure(&refine());
    assert_eq!(plan_litter(data, &plan), Vec::<String>::new());

    // A plan before: the same bytes after.
    let file = data_file(data, "data.dat", 8);
    write_plan(&plan, vec![file], &[(0, 0, 8)]);
    let before = std::fs::read(&plan).unwrap();
    check_failure(&refine());
    assert_eq!(std::fs::read(&plan).unwrap(), before);
    assert_eq!(plan_litter(data, &plan), vec!["app.plan".to_string()]);

    // A start served by that plan, explained against a plan that is not
    // there: an error naming it.
    let served = data.join("served.db");
    run_ok(
        coldstart()
            .arg("trace")
            .arg("-o")
            .arg(&served)
            .arg("--")
            .arg(env!("CARGO_BIN_EXE_coldstart-run"))
            .arg("--plan")
            .arg(&plan)
            .args(["--", "true"]),
    );
    let out = coldstart()
        .arg("report")
        .arg(&served)
        .args(["--plan", "/nonexistent.plan", "--json"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("/nonexistent.plan"), "{stderr}");
    assert!(out.stdout.is_empty(), "no half report on stdout");
}
