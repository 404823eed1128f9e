//! `--no-read-around` end to end: through coldstart-run, a fault on a data
//! page of a planned shared library that the plan does not hold reads that
//! one page (the program counts with mincore), where without the flag it
//! reads a readahead window; so does a fault on a planned file the program
//! maps itself with mmap, while a file not in the plan keeps its window and
//! a failing mmap its errno; the program's own readahead(2), WILLNEED
//! fadvise and WILLNEED madvise on a planned file read nothing, with the
//! answers (and errors) the kernel gives; the program's output and exit status are the
//! same with the module as without it; a static program, and a module that
//! cannot be installed, leave the program unchanged.

use coldstart_prefetch::{PlanFile, format};
use coldstart_testkit::run_ok;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const PAGE: u64 = 4096;

/// Pages of the library's read-only data; the program touches the middle of
/// COUNTED pages from FIRST. Those stay clear of what ld.so reads before any
/// audit module can act: the readahead of its read() of the ELF header (at
/// the start of the file) and the read-around of its first fault on the
/// writable segment that follows the data, for read_ahead_kb up to 16 MiB.
const BLOB_PAGES: u64 = 4096 + 512;
const FIRST: u64 = 1024;
const COUNTED: u64 = 256;

/// Runs evict files and count resident pages: one at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

const LIBRARY: &str = r#"
#include <sys/mman.h>
#include <time.h>
__asm__(".section .rodata\n.balign 4096\nblob:\n.incbin \"BLOB\"\n.previous");
extern const char blob[] __asm__("blob");
int touch(long page) { return ((volatile const char *)blob)[page * 4096]; }
/* Pages [first, first + pages) of blob in the page cache, once the read the
 * touch started has had time to finish (only the faulting page is waited
 * for). */
int resident(long first, long pages) {
    struct timespec pause = {0, 300 * 1000 * 1000};
    nanosleep(&pause, 0);
    unsigned char v[4096];
    if (pages > 4096 || mincore((void *)(blob + first * 4096), pages * 4096, v) != 0) return -1;
    int n = 0;
    for (long i = 0; i < pages; i++) n += v[i] & 1;
    return n;
}
"#;

const PROGRAM: &str = r#"
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
int touch(long page);
int resident(long first, long pages);
/* Maps a file itself, touches the middle of the counted pages and counts
 * them in the page cache once the read has had time to finish; first, a
 * mapping that fails must leave errno as libc set it. */
static int map(const char *path, long first, long counted) {
    errno = 0;
    void *refused = mmap(0, 4096, PROT_READ, MAP_SHARED, -5, 0);
    int error = errno;
    int fd = open(path, O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || counted > 4096) return 2;
    char *data = mmap(0, st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (data == MAP_FAILED) return 3;
    (void)((volatile char *)data)[(first + counted / 2) * 4096];
    struct timespec pause = {0, 300 * 1000 * 1000};
    nanosleep(&pause, 0);
    unsigned char v[4096];
    if (mincore(data + first * 4096, counted * 4096, v) != 0) return 4;
    int n = 0;
    for (long i = 0; i < counted; i++) n += v[i] & 1;
    printf("resident %d refused %d errno %d\n", n, refused == MAP_FAILED, error);
    return 0;
}
/* Asks the kernel for three ranges of a file without touching them:
 * readahead(2), posix_fadvise(WILLNEED) and madvise(WILLNEED) on a mapping
 * of it, 8 pages each from the pages given; then makes the calls the module
 * must pass to the kernel because they fail there, and prints every answer
 * with its errno. */
static int ask(const char *path, long first, long second, long third) {
    int fd = open(path, O_RDONLY);
    int writer = open(path, O_WRONLY);
    struct stat st;
    if (fd < 0 || writer < 0 || fstat(fd, &st) != 0) return 2;
    errno = 0;
    long ra = readahead(fd, first * 4096, 8 * 4096);
    int ra_errno = errno;
    int fa = posix_fadvise(fd, second * 4096, 8 * 4096, POSIX_FADV_WILLNEED);
    char *data = mmap(0, st.st_size, PROT_READ, MAP_SHARED, fd, 0);
    if (data == MAP_FAILED) return 3;
    errno = 0;
    int ma = madvise(data + third * 4096, 8 * 4096, MADV_WILLNEED);
    int ma_errno = errno;
    printf("readahead %ld %d fadvise %d madvise %d %d\n", ra, ra_errno, fa, ma, ma_errno);
    errno = 0;
    long bad_ra = readahead(writer, first * 4096, 4096);
    int bad_ra_errno = errno;
    int bad_fa = posix_fadvise(fd, 0, -4096, POSIX_FADV_WILLNEED);
    errno = 0;
    int unaligned = madvise(data + third * 4096 + 1, 4096, MADV_WILLNEED);
    int unaligned_errno = errno;
    if (munmap(data, st.st_size) != 0) return 4;
    errno = 0;
    int unmapped = madvise(data + third * 4096, 4096, MADV_WILLNEED);
    int unmapped_errno = errno;
    printf("refused %ld %d %d %d %d %d %d\n", bad_ra, bad_ra_errno, bad_fa, unaligned,
           unaligned_errno, unmapped, unmapped_errno);
    return 0;
}
int main(int argc, char **argv) {
    if (argc > 5 && strcmp(argv[1], "ask") == 0)
        return ask(argv[2], atol(argv[3]), atol(argv[4]), atol(argv[5]));
    if (argc > 4 && strcmp(argv[1], "map") == 0)
        return map(argv[2], atol(argv[3]), atol(argv[4]));
    if (argc > 1 && strcmp(argv[1], "echo") == 0) {
        printf("out %s\n", argc > 2 ? argv[2] : "-");
        fprintf(stderr, "err line\n");
        return 7;
    }
    long first = atol(argv[1]), counted = atol(argv[2]);
    touch(first + counted / 2);
    printf("resident %d\n", resident(first, counted));
    return 0;
}
"#;

struct Fixture {
    dir: tempfile::TempDir,
    library: PathBuf,
    program: PathBuf,
    plan: PathBuf,
}

/// The library, a program linked to it, and a plan that lists the library
/// (its first page) but none of its data; None after a skip.
fn fixture() -> Option<Fixture> {
    let dir = tempfile::Builder::new()
        .prefix("coldstart-audit-test")
        .tempdir_in("/var/tmp")
        .unwrap();
    let blob = dir.path().join("blob.bin");
    let bytes: Vec<u8> = (0..BLOB_PAGES * PAGE)
        .map(|i| (i % 251) as u8 | 1)
        .collect();
    std::fs::write(&blob, bytes).unwrap();
    let library_source = dir.path().join("libdata.c");
    std::fs::write(
        &library_source,
        LIBRARY.replace("BLOB", blob.to_str().unwrap()),
    )
    .unwrap();
    let library = dir.path().join("libdata.so");
    let built = Command::new("cc")
        .args(["-O2", "-shared", "-fPIC", "-o"])
        .arg(&library)
        .arg(&library_source)
        .status();
    if !matches!(built, Ok(status) if status.success()) {
        coldstart_testkit::skip("no C compiler (cc) to build the test library");
        return None;
    }
    let program_source = dir.path().join("prog.c");
    std::fs::write(&program_source, PROGRAM).unwrap();
    let program = dir.path().join("prog");
    link_program(dir.path(), &program, &[]);
    // The plan names the file by the path the module reads back from /proc.
    let canonical = std::fs::canonicalize(&library).unwrap();
    let meta = std::fs::metadata(&library).unwrap();
    let file = PlanFile {
        path: canonical.to_str().unwrap().to_string(),
        size: meta.size(),
        mtime_ns: Some(meta.mtime() * 1_000_000_000 + meta.mtime_nsec()),
        build_id: None,
    };
    let plan = dir.path().join("lib.plan");
    let handmade = coldstart_prefetch::handmade::plan(PAGE, vec![file], &[(0, 0, 1)]);
    std::fs::write(&plan, format::write(&handmade)).unwrap();
    Some(Fixture {
        dir,
        library,
        program,
        plan,
    })
}

/// Evicts `path`, retrying while pages stay: pages still being read by the
/// previous run's readahead window are locked and survive one fadvise, and
/// a library not cold would let the read-around go unseen.
fn evict(path: &Path) {
    let mut left = 0;
    for _ in 0..50 {
        let eviction = coldstart_system::cache::evict(path).unwrap();
        left = eviction.resident_after;
        if left == 0 {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    panic!(
        "{} kept {left} pages in the page cache after 50 evictions",
        path.display()
    );
}

/// Reads the library's first pages as the plan's prefetcher would, by a
/// forced read that leaves no readahead marker. When ld.so's own read() of
/// the headers misses instead, the kernel marks a page of that first window
/// for async readahead, and the first fault on it through the text mapping
/// (which no advice reaches) reads a read_ahead_kb window from there on,
/// over the data as well: a race the test must not depend on (see
/// docs/no-read-around.md).
fn read_headers(path: &Path) {
    use std::os::fd::AsRawFd;
    let file = std::fs::File::open(path).unwrap();
    // SAFETY: readahead on our own descriptor.
    let rc = unsafe { libc::readahead(file.as_raw_fd(), 0, (HEADER_PAGES * PAGE) as usize) };
    assert_eq!(rc, 0, "readahead {}", path.display());
}

/// The library's pages before its data: ELF header, text, up to the blob.
const HEADER_PAGES: u64 = 2;

/// coldstart-run with the fixture's plan and a private cache directory for
/// the module.
fn wrapper(fixture: &Fixture, no_read_around: bool) -> Command {
    wrapper_with(fixture, &fixture.plan, no_read_around)
}

/// coldstart-run with `plan`.
fn wrapper_with(fixture: &Fixture, plan: &Path, no_read_around: bool) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_coldstart-run"));
    command.env("XDG_CACHE_HOME", fixture.dir.path().join("cache"));
    command.env_remove("LD_AUDIT");
    command.arg("--plan").arg(plan);
    if no_read_around {
        command.arg("--no-read-around");
    }
    command.arg("--");
    command
}

/// Pages of the counted range resident after the program touched one, with
/// the library cold at the start.
fn resident_after_one_touch(fixture: &Fixture, no_read_around: bool) -> u64 {
    evict(&fixture.library);
    read_headers(&fixture.library);
    let out = run_ok(
        wrapper(fixture, no_read_around)
            .arg(&fixture.program)
            .arg(FIRST.to_string())
            .arg(COUNTED.to_string()),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    stdout
        .trim()
        .strip_prefix("resident ")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("unexpected output: {stdout} {out:?}"))
}

/// The read_ahead_kb of the test directory's device and the pages of the
/// counted range a read-around window covers; None after a skip, where a
/// miss costs a page either way.
fn read_around(fixture: &Fixture) -> Option<(u64, u64)> {
    let device_kb =
        coldstart_system::readahead::read_ahead_kb_for(&fixture.library).unwrap_or_default();
    if device_kb < 8 {
        coldstart_testkit::skip(
            "the test directory's device reads ahead less than two pages: a miss costs a page either way",
        );
        return None;
    }
    Some((device_kb, (device_kb * 1024 / PAGE).min(COUNTED)))
}

#[test]
fn a_data_fault_reads_its_page_with_the_module_and_a_window_without() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(fixture) = fixture() else { return };
    let Some((device_kb, window)) = read_around(&fixture) else {
        return;
    };
    for _ in 0..2 {
        let without = resident_after_one_touch(&fixture, false);
        let with = resident_after_one_touch(&fixture, true);
        // The kernel's read-around around the touched page (the range is
        // clipped to the counted pages)…
        assert!(
            without >= window / 2 && without > 1,
            "without the module {without} of {COUNTED} pages resident, read_ahead_kb {device_kb}"
        );
        // …and with the module only the touched page itself.
        assert_eq!(with, 1, "with the module");
    }
}

/// After a cold start through coldstart-run of `program map FILE FIRST
/// COUNTED`: the counted pages of FILE resident, and whether the program
/// saw its failing mmap fail with EBADF.
fn resident_after_mapping(
    fixture: &Fixture,
    plan: &Path,
    program: &Path,
    file: &Path,
    no_read_around: bool,
) -> (u64, bool) {
    evict(file);
    let out = run_ok(
        wrapper_with(fixture, plan, no_read_around)
            .arg(program)
            .arg("map")
            .arg(file)
            .arg(FIRST.to_string())
            .arg(COUNTED.to_string()),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let words: Vec<&str> = stdout.split_whitespace().collect();
    match words[..] {
        ["resident", n, "refused", refused, "errno", errno] => (
            n.parse().unwrap(),
            refused == "1" && errno.parse() == Ok(libc::EBADF),
        ),
        _ => panic!("unexpected output: {stdout} {out:?}"),
    }
}

/// Two cold data files of BLOB_PAGES pages, `PREFIX-planned.bin` and
/// `PREFIX-unplanned.bin` (canonical paths), and a plan, `PREFIX.plan`, that
/// lists the first (its first page).
fn planned_and_unplanned(fixture: &Fixture, prefix: &str) -> (PathBuf, PathBuf, PathBuf) {
    let data = |name: String| {
        let path = fixture.dir.path().join(name);
        coldstart_testkit::cold_file(&path, BLOB_PAGES, PAGE);
        std::fs::canonicalize(path).unwrap()
    };
    let planned = data(format!("{prefix}-planned.bin"));
    let unplanned = data(format!("{prefix}-unplanned.bin"));
    let plan = fixture.dir.path().join(format!("{prefix}.plan"));
    let listed = coldstart_prefetch::handmade::file(&planned).unwrap();
    let handmade = coldstart_prefetch::handmade::plan(PAGE, vec![listed], &[(0, 0, 1)]);
    std::fs::write(&plan, format::write(&handmade)).unwrap();
    (planned, unplanned, plan)
}

/// The fixture's program linked with `-z now`: with the fixture's own
/// (lazy) one, ld.so shows the module both kinds of binding, at the PLT's
/// first call and at load.
fn bind_now(fixture: &Fixture) -> PathBuf {
    let program = fixture.dir.path().join("prog-now");
    if !program.exists() {
        link_program(fixture.dir.path(), &program, &["-Wl,-z,now"]);
    }
    program
}

/// Builds `dir`/prog.c into `program`, linked to `dir`/libdata.so (found
/// there at run time too), with `flags`.
fn link_program(dir: &Path, program: &Path, flags: &[&str]) {
    run_ok(
        Command::new("cc")
            .arg("-O2")
            .args(flags)
            .arg("-o")
            .arg(program)
            .arg(dir.join("prog.c"))
            .arg(format!("-L{}", dir.display()))
            .arg(format!("-Wl,-rpath,{}", dir.display()))
            .arg("-ldata"),
    );
}

#[test]
fn a_planned_file_the_program_maps_itself_reads_its_page_with_the_module() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(fixture) = fixture() else { return };
    let Some((device_kb, window)) = read_around(&fixture) else {
        return;
    };
    let (planned, unplanned, plan) = planned_and_unplanned(&fixture, "mapped");
    for program in [&fixture.program, &bind_now(&fixture)] {
        let run = |file: &Path, no_read_around| {
            resident_after_mapping(&fixture, &plan, program, file, no_read_around)
        };
        let (without, errno_kept) = run(&planned, false);
        assert!(errno_kept);
        assert!(
            without >= window / 2 && without > 1,
            "{}: without the module {without} of {COUNTED} pages resident, read_ahead_kb {device_kb}",
            program.display()
        );
        let (with, errno_kept) = run(&planned, true);
        assert_eq!(with, 1, "{}: with the module", program.display());
        assert!(
            errno_kept,
            "{}: errno after a failing mmap",
            program.display()
        );
        // A file the plan does not name keeps its read-around.
        let (unlisted, _) = run(&unplanned, true);
        assert!(
            unlisted >= window / 2 && unlisted > 1,
            "{}: a file not in the plan, with the module: {unlisted} of {COUNTED} pages",
            program.display()
        );
    }
}

/// Where the program asks for 8 pages each: by readahead(2), by
/// posix_fadvise and by madvise. Far from the first pages, which the plan's
/// prefetcher reads (with whatever window the kernel adds).
const ASKED: [u64; 3] = [1024, 2048, 3072];

/// After a cold start through coldstart-run of `program ask FILE …`: the
/// pages of FILE from page 512 on in the page cache (settled, by mincore),
/// and what the program printed.
fn resident_after_asking(
    fixture: &Fixture,
    plan: &Path,
    program: &Path,
    file: &Path,
    no_read_around: bool,
) -> (Vec<u64>, String) {
    evict(file);
    let out = run_ok(
        wrapper_with(fixture, plan, no_read_around)
            .arg(program)
            .arg("ask")
            .arg(file)
            .args(ASKED.map(|page| page.to_string())),
    );
    let resident = coldstart_testkit::resident_pages(file)
        .into_iter()
        .filter(|&page| page >= 512)
        .collect();
    (resident, String::from_utf8_lossy(&out.stdout).into_owned())
}

#[test]
fn a_planned_file_the_program_asks_to_read_ahead_is_left_to_the_plan() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(fixture) = fixture() else { return };
    let (planned, unplanned, plan) = planned_and_unplanned(&fixture, "asked");
    let all_asked: Vec<u64> = ASKED.iter().flat_map(|&first| first..first + 8).collect();
    // Success for the three asks, and the kernel's own errors for a
    // write-only descriptor (EBADF), a negative length (EINVAL), an
    // unaligned address (EINVAL) and an unmapped one (ENOMEM).
    let expected_output = format!(
        "readahead 0 0 fadvise 0 madvise 0 0\nrefused -1 {} {} -1 {} -1 {}\n",
        libc::EBADF,
        libc::EINVAL,
        libc::EINVAL,
        libc::ENOMEM
    );
    for program in [&fixture.program, &bind_now(&fixture)] {
        let run = |file: &Path, no_read_around| {
            resident_after_asking(&fixture, &plan, program, file, no_read_around)
        };
        let name = program.display();
        let (without, output) = run(&planned, false);
        assert_eq!(without, all_asked, "{name}: without the module");
        assert_eq!(output, expected_output, "{name}: without the module");
        let (with, output) = run(&planned, true);
        assert_eq!(with, Vec::<u64>::new(), "{name}: with the module");
        assert_eq!(output, expected_output, "{name}: with the module");
        // A file the plan does not name is read as the program asked.
        let (unlisted, output) = run(&unplanned, true);
        assert_eq!(unlisted, all_asked, "{name}: a file not in the plan");
        assert_eq!(output, expected_output, "{name}: a file not in the plan");
    }
}

/// stdout, stderr and exit status of the program.
fn observed(out: &Output) -> (Vec<u8>, Vec<u8>, Option<i32>) {
    (out.stdout.clone(), out.stderr.clone(), out.status.code())
}

#[test]
fn the_program_behaves_the_same_with_the_module() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(fixture) = fixture() else { return };
    let run = |no_read_around| {
        wrapper(&fixture, no_read_around)
            .args([fixture.program.as_os_str(), "echo".as_ref(), "x y".as_ref()])
            .output()
            .unwrap()
    };
    let direct = Command::new(&fixture.program)
        .args(["echo", "x y"])
        .output()
        .unwrap();
    let expected = (b"out x y\n".to_vec(), b"err line\n".to_vec(), Some(7));
    assert_eq!(observed(&direct), expected);
    assert_eq!(observed(&run(false)), expected);
    assert_eq!(observed(&run(true)), expected);
    // An LD_AUDIT the caller set is kept: here one that cannot load, so
    // glibc says so, the same with the module as without.
    let with_other = |no_read_around| {
        let mut command = wrapper(&fixture, no_read_around);
        command
            .env("LD_AUDIT", "/nonexistent/other-audit.so")
            .args([fixture.program.as_os_str(), "echo".as_ref()]);
        command.output().unwrap()
    };
    let (plain, advised) = (with_other(false), with_other(true));
    assert_eq!(observed(&plain), observed(&advised));
    assert!(
        String::from_utf8_lossy(&plain.stderr).contains("/nonexistent/other-audit.so"),
        "{plain:?}"
    );
}

#[test]
fn a_static_program_and_an_uninstallable_module_change_nothing() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(fixture) = fixture() else { return };
    let source = fixture.dir.path().join("static.c");
    std::fs::write(
        &source,
        "#include <stdio.h>\nint main(void) { puts(\"static\"); fputs(\"e\\n\", stderr); return 5; }\n",
    )
    .unwrap();
    let program = fixture.dir.path().join("static");
    let built = Command::new("cc")
        .args(["-static", "-o"])
        .arg(&program)
        .arg(&source)
        .status();
    if !matches!(built, Ok(status) if status.success()) {
        return coldstart_testkit::skip("no static libc to link a static test program");
    }
    let expected = (b"static\n".to_vec(), b"e\n".to_vec(), Some(5));
    let out = wrapper(&fixture, true).arg(&program).output().unwrap();
    assert_eq!(observed(&out), expected);

    // A cache directory others may write to is refused: the program runs
    // without the module, and coldstart-run says why in one line.
    let open = fixture.dir.path().join("open-cache");
    std::fs::create_dir_all(open.join("coldstart")).unwrap();
    std::fs::set_permissions(
        open.join("coldstart"),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    let out = wrapper(&fixture, true)
        .env("XDG_CACHE_HOME", &open)
        .args([fixture.program.as_os_str(), "echo".as_ref()])
        .output()
        .unwrap();
    assert_eq!(out.stdout, b"out -\n");
    assert_eq!(out.status.code(), Some(7));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let (ours, program): (Vec<&str>, Vec<&str>) = stderr
        .lines()
        .partition(|line| line.starts_with("coldstart run:"));
    assert_eq!(program, ["err line"], "{stderr}");
    assert_eq!(ours.len(), 1, "{stderr}");
    assert!(ours[0].contains("--no-read-around"), "{stderr}");
    assert!(!stderr.contains("ld.so"), "{stderr}");
}
