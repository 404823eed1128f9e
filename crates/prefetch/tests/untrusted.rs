//! Replaying plans someone else wrote: what is not a regular file on a
//! disk (a FIFO, a socket, a device, /proc) is skipped with its reason and
//! never opened, so the replay returns (each bounded here by a timeout, not
//! timed); paths through symbolic links are refused when asked; and a
//! replay as another user reads only what that user may read (mincore, by
//! the test itself, says what was read).

use coldstart_prefetch::replay::{Method, ReplayOptions, ReplayReport, replay};
use coldstart_prefetch::{Lookup, Plan, PlanFile};
use coldstart_system::credentials::Credentials;
use std::collections::BTreeMap;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::time::Duration;

const PAGE: u64 = 4096;

/// The longest a replay of these small plans may take before the test
/// calls it stuck: far beyond what it needs (milliseconds).
const STUCK: Duration = Duration::from_secs(30);

/// Tests evict and check files' pages; one at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The user `nobody` on Debian and most distributions.
const NOBODY: u32 = 65534;

fn is_root() -> bool {
    // SAFETY: geteuid never fails.
    unsafe { libc::geteuid() == 0 }
}

fn options(method: Method, no_symlinks: bool, open_as: Option<Credentials>) -> ReplayOptions {
    ReplayOptions {
        threads: 2,
        method,
        window_bytes: 0,
        no_symlinks,
        open_as,
    }
}

/// Replays `plan` on a thread of its own and returns its report, or fails
/// the test when it has not returned within [`STUCK`].
fn replay_or_fail(plan: &Plan, options: &ReplayOptions) -> ReplayReport {
    let (send, receive) = std::sync::mpsc::channel();
    let (plan, options) = (plan.clone(), options.clone());
    std::thread::spawn(move || {
        let _ = send.send(replay(&plan, &options, &AtomicBool::new(false)));
    });
    receive
        .recv_timeout(STUCK)
        .unwrap_or_else(|_| panic!("the replay did not return within {STUCK:?}"))
}

/// Skip reasons by path.
fn reasons(report: &ReplayReport) -> BTreeMap<String, String> {
    report
        .files_skipped
        .iter()
        .map(|s| (s.path.clone(), s.reason.clone()))
        .collect()
}

fn text(path: &Path) -> String {
    path.to_str().unwrap().to_string()
}

/// The file at `path` as a plan records it now (following symbolic links).
fn planned(path: &Path) -> PlanFile {
    coldstart_prefetch::handmade::file(path).unwrap()
}

/// A written-back, evicted file of `pages` pages, as planned.
fn cold_file(path: &Path, pages: u64) -> PlanFile {
    coldstart_testkit::cold_file(path, pages, PAGE);
    planned(path)
}

/// Drops the file's pages from the page cache (they are clean: written
/// back by [`cold_file`], or read since), leaving the file as it is.
fn evict(path: &Path) {
    let file = std::fs::File::open(path).unwrap();
    // SAFETY: plain fadvise on our own descriptor.
    let rc = unsafe {
        libc::posix_fadvise(
            std::os::fd::AsRawFd::as_raw_fd(&file),
            0,
            0,
            libc::POSIX_FADV_DONTNEED,
        )
    };
    assert_eq!(rc, 0, "fadvise DONTNEED {}", path.display());
    assert!(resident(path).is_empty(), "{} evicted", path.display());
}

/// Pages of `path` resident now (mincore), once reads in flight are done.
fn resident(path: &Path) -> Vec<u64> {
    coldstart_testkit::resident_pages(path)
}

fn lookup(path: &Path) -> Lookup {
    Lookup {
        path: text(path),
        ino: 1,
        need_ns: 0,
    }
}

fn run(command: &mut std::process::Command) {
    coldstart_testkit::run_ok(command);
}

/// A FIFO that, when dropped, opens its write end once without waiting:
/// were a reader stuck opening it (the bug this guards against), that
/// releases it, so a failing test leaves no thread blocked behind it.
struct Fifo(PathBuf);

impl Fifo {
    fn new(path: PathBuf) -> Fifo {
        run(std::process::Command::new("mkfifo").arg(&path));
        Fifo(path)
    }
}

impl Drop for Fifo {
    fn drop(&mut self) {
        let _ = std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&self.0);
    }
}

#[test]
fn what_is_not_a_regular_file_on_a_disk_is_skipped_with_its_reason_and_never_opened() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let at = |name: &str| dir.path().join(name);
    let good = cold_file(&at("good"), 16);
    let fifo = Fifo::new(at("fifo"));
    let _socket = std::os::unix::net::UnixListener::bind(at("socket")).unwrap();
    std::fs::create_dir(at("directory")).unwrap();
    std::os::unix::fs::symlink("/proc/self/status", at("proc-link")).unwrap();
    let mut expected: BTreeMap<String, String> = [
        (text(&fifo.0), "not a regular file (FIFO)"),
        (text(&at("socket")), "not a regular file (socket)"),
        (text(&at("directory")), "not a regular file (directory)"),
        (
            "/dev/zero".to_string(),
            "under /dev: not a file a start reads from disk",
        ),
        (
            "/proc/self/status".to_string(),
            "under /proc: not a file a start reads from disk",
        ),
        (
            text(&at("proc-link")),
            "on procfs: not a file a start reads from disk",
        ),
    ]
    .into_iter()
    .map(|(path, reason)| (path, reason.to_string()))
    .collect();
    let mut files = vec![good.clone()];
    files.extend(expected.keys().map(|path| planned(Path::new(path))));
    // A device node outside /dev: only root may make one.
    if is_root() {
        run(std::process::Command::new("mknod")
            .arg(at("zero"))
            .args(["c", "1", "5"]));
        files.push(planned(&at("zero")));
        expected.insert(
            text(&at("zero")),
            "not a regular file (character device)".to_string(),
        );
    } else {
        coldstart_testkit::skip("a character device outside /dev needs root (mknod)");
    }
    let mut plan = coldstart_prefetch::handmade::plan(PAGE, files, &[(0, 0, 4), (0, 8, 4)]);
    plan.lookups = vec![
        lookup(&fifo.0),
        lookup(&at("socket")),
        lookup(&at("directory")),
        lookup(Path::new("/proc/self")),
        lookup(Path::new("/dev/null")),
    ];
    // pread reads through each descriptor: the method that would block on
    // anything opened that can block.
    for method in [Method::Readahead, Method::Pread] {
        evict(Path::new(&good.path));
        let report = replay_or_fail(&plan, &options(method, false, None));
        assert_eq!(reasons(&report), expected, "{method:?}");
        assert_eq!(report.files_opened, 1, "{method:?}");
        assert_eq!(
            resident(Path::new(&good.path)),
            [0, 1, 2, 3, 8, 9, 10, 11],
            "{method:?}: the regular file is still read"
        );
        // The FIFO, socket and directory exist; /proc and /dev are refused.
        assert_eq!(
            (report.lookups_done, report.lookups_missing),
            (3, 2),
            "{method:?}"
        );
        assert!(report.errors.is_empty(), "{:?}", report.errors);
    }
    // Refusing symbolic links, the link into /proc is refused as a link.
    let report = replay_or_fail(&plan, &options(Method::Readahead, true, None));
    expected.insert(
        text(&at("proc-link")),
        "path goes through a symbolic link".to_string(),
    );
    assert_eq!(reasons(&report), expected);
}

#[test]
fn refusing_symlinks_skips_a_path_through_one_and_reads_nothing_of_its_file() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let real = dir.path().join("real");
    std::fs::create_dir(&real).unwrap();
    let data = real.join("data");
    coldstart_testkit::cold_file(&data, 8, PAGE);
    std::os::unix::fs::symlink("data", real.join("final-link")).unwrap();
    std::os::unix::fs::symlink("real", dir.path().join("directory-link")).unwrap();
    let through = [
        real.join("final-link"),
        dir.path().join("directory-link/data"),
    ];
    let mut plan = coldstart_prefetch::handmade::plan(
        PAGE,
        through.iter().map(|path| planned(path)).collect(),
        &[(0, 0, 2), (1, 4, 2)],
    );
    plan.lookups = vec![
        lookup(&real),
        // The link itself is looked up, not followed.
        lookup(&real.join("final-link")),
        lookup(&dir.path().join("directory-link/data")),
    ];
    let report = replay_or_fail(&plan, &options(Method::Readahead, true, None));
    let refused = "path goes through a symbolic link".to_string();
    assert_eq!(
        reasons(&report),
        through.iter().map(|p| (text(p), refused.clone())).collect()
    );
    assert!(resident(&data).is_empty(), "nothing of the file is read");
    assert_eq!((report.lookups_done, report.lookups_missing), (2, 1));

    // Followed, as plans are replayed unless told otherwise.
    evict(&data);
    let report = replay_or_fail(&plan, &options(Method::Readahead, false, None));
    assert!(
        report.files_skipped.is_empty(),
        "{:?}",
        report.files_skipped
    );
    assert_eq!(resident(&data), [0, 1, 4, 5]);
    assert_eq!((report.lookups_done, report.lookups_missing), (3, 0));
}

#[test]
fn a_magic_link_of_proc_is_refused_even_when_symlinks_are_followed() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let data = dir.path().join("data");
    let target = cold_file(&data, 8);
    // This process holds it open; the replay runs in this process, so
    // /proc/self/fd/N is this very file.
    let open = std::fs::File::open(&data).unwrap();
    let link = dir.path().join("magic");
    let fd = std::os::fd::AsRawFd::as_raw_fd(&open);
    std::os::unix::fs::symlink(format!("/proc/self/fd/{fd}"), &link).unwrap();
    let mut through = target;
    through.path = text(&link);
    let plan = coldstart_prefetch::handmade::plan(PAGE, vec![through], &[(0, 0, 4)]);
    let report = replay_or_fail(&plan, &options(Method::Readahead, false, None));
    assert_eq!(
        reasons(&report),
        [(
            text(&link),
            "path goes through a /proc magic link, or too many symbolic links".to_string()
        )]
        .into_iter()
        .collect()
    );
    assert!(resident(&data).is_empty());
}

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn nobody() -> Credentials {
    Credentials {
        uid: NOBODY,
        gid: NOBODY,
        groups: Vec::new(),
    }
}

#[test]
fn as_another_user_only_what_that_user_may_read_is_read() {
    if !is_root() {
        coldstart_testkit::skip("reading as another user takes root");
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // On the disk, and open to every user: 0755.
    let dir = coldstart_testkit::world_readable_temp_dir("coldstart-open-as");
    let public = dir.path().join("public");
    let secret = dir.path().join("secret");
    let closed = dir.path().join("closed");
    std::fs::create_dir(&closed).unwrap();
    chmod(&closed, 0o700);
    let inside = closed.join("inside");
    let paths = [&public, &secret, &inside];
    let files: Vec<PlanFile> = paths.iter().map(|path| cold_file(path, 16)).collect();
    chmod(&public, 0o644);
    chmod(&secret, 0o600);
    chmod(&inside, 0o644);
    let mut plan =
        coldstart_prefetch::handmade::plan(PAGE, files, &[(0, 0, 4), (1, 0, 4), (2, 0, 4)]);
    plan.lookups = vec![lookup(&public), lookup(&closed), lookup(&inside)];
    let evict_all = || paths.iter().for_each(|path| evict(path));

    evict_all();
    let report = replay_or_fail(&plan, &options(Method::Readahead, false, Some(nobody())));
    let unreadable = "not readable by this user".to_string();
    assert_eq!(
        reasons(&report),
        [
            (text(&secret), unreadable.clone()),
            (text(&inside), unreadable.clone())
        ]
        .into_iter()
        .collect()
    );
    assert_eq!(resident(&public), [0, 1, 2, 3]);
    assert!(resident(&secret).is_empty(), "a 0600 file of root's");
    assert!(
        resident(&inside).is_empty(),
        "a 0644 file in a 0700 directory"
    );
    // The closed directory's own entry is in a directory nobody may search;
    // what is inside it is not.
    assert_eq!((report.lookups_done, report.lookups_missing), (2, 1));
    assert!(report.errors.is_empty(), "{:?}", report.errors);

    // As root (the replaying process itself) all three are read: it was the
    // user's permissions that kept them out.
    evict_all();
    let report = replay_or_fail(&plan, &options(Method::Readahead, false, None));
    assert!(
        report.files_skipped.is_empty(),
        "{:?}",
        report.files_skipped
    );
    for path in paths {
        assert_eq!(resident(path), [0, 1, 2, 3], "{}", path.display());
    }
    assert_eq!((report.lookups_done, report.lookups_missing), (3, 0));
}

#[test]
fn threads_that_cannot_take_the_users_credentials_stop_and_read_nothing() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let data = dir.path().join("data");
    let mut plan =
        coldstart_prefetch::handmade::plan(PAGE, vec![cold_file(&data, 8)], &[(0, 0, 4)]);
    plan.lookups = vec![lookup(&data)];
    // uid -1 is no user: setfsuid(-1) changes nothing, whoever asks.
    let impossible = Credentials {
        uid: u32::MAX,
        ..nobody()
    };
    let report = replay_or_fail(&plan, &options(Method::Readahead, false, Some(impossible)));
    // Two workers, the opener and one lookup thread (one lookup).
    assert_eq!(report.errors.len(), 4, "{:?}", report.errors);
    assert!(
        report
            .errors
            .iter()
            .all(|e| e.contains("cannot read as uid 4294967295")),
        "{:?}",
        report.errors
    );
    assert_eq!(report.files_opened, 0);
    assert_eq!(report.extents_requested, 0);
    assert_eq!((report.lookups_done, report.lookups_missing), (0, 0));
    assert!(resident(&data).is_empty());
}

#[test]
fn a_file_under_a_lease_is_skipped_without_waiting_for_the_lease() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let data = dir.path().join("data");
    let plan = coldstart_prefetch::handmade::plan(PAGE, vec![cold_file(&data, 8)], &[(0, 0, 4)]);
    // A write lease: any other open of the file waits for it to be broken,
    // up to lease-break-time (45 s by default) when the holder keeps it.
    let holder = std::fs::File::open(&data).unwrap();
    let fd = std::os::fd::AsRawFd::as_raw_fd(&holder);
    // The break is told to the holder, this process, by a signal: SIGIO by
    // default, which would end it; SIGURG is ignored unless handled.
    // asm-generic/fcntl.h; the libc crate does not name it.
    const F_SETSIG: libc::c_int = 10;
    // SAFETY: fcntl on our own descriptor with integer arguments.
    let rc = unsafe {
        libc::fcntl(fd, F_SETSIG, libc::SIGURG);
        libc::fcntl(fd, libc::F_SETLEASE, libc::F_WRLCK)
    };
    if rc != 0 {
        let error = std::io::Error::last_os_error();
        coldstart_testkit::skip(&format!("cannot take a lease here: {error}"));
        return;
    }
    let report = replay_or_fail(&plan, &options(Method::Readahead, false, None));
    assert_eq!(
        reasons(&report),
        [(
            text(&data),
            "cannot open: another process holds a lease on it".to_string()
        )]
        .into_iter()
        .collect()
    );
    // The oracle's own open would wait for the lease too.
    drop(holder);
    assert!(resident(&data).is_empty());
}
