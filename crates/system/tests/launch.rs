//! Starting a measured program in two steps: its process made and put in
//! its group first, its exec later. The oracles are the kernel's own
//! account of the process (/proc/PID/exe and /proc/PID/cgroup) and what the
//! program itself wrote: its pid, from the shell's `$$`.

use coldstart_system::launch::{self, LaunchSpec};
use std::ffi::OsString;
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

/// A shell that writes its pid into `marker`.
fn spec(marker: &Path) -> LaunchSpec {
    let argv = ["sh", "-c", "echo $$ > \"$0\""]
        .into_iter()
        .map(OsString::from)
        .chain([marker.as_os_str().to_owned()])
        .collect();
    LaunchSpec::quiet(argv, Duration::from_secs(30)).unwrap()
}

/// Waits up to 10 s for `pid` to be gone (reaped).
fn gone(pid: i32) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Path::new(&format!("/proc/{pid}")).exists() {
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    true
}

#[test]
fn a_prepared_program_runs_only_once_started_and_keeps_its_pid() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");

    // Prepared, then dropped: the process was made and waited, not exec'd,
    // and it ends without running the program.
    let mut prepared = launch::prepare(&spec(&marker)).unwrap();
    let pid = prepared.pid().expect("the process is ready");
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap();
    assert_eq!(exe, std::env::current_exe().unwrap(), "exec'd before start");
    drop(prepared);
    assert!(
        gone(pid),
        "the prepared process {pid} outlived its Prepared"
    );
    assert!(!marker.exists(), "the program ran without being started");

    // Prepared, then started: the program runs in that very process, and
    // its time starts after the process was ready.
    let mut prepared = launch::prepare(&spec(&marker)).unwrap();
    let pid = prepared.pid().expect("the process is ready");
    let ready_ns = launch::monotonic_ns();
    let launched = prepared.start().unwrap();
    assert_eq!(launched.root_pid, pid);
    assert!(launched.t0_ns >= ready_ns);
    launched.wait_for_end(&AtomicBool::new(false), || {});
    let exit = launched.terminate(launch::DEFAULT_GRACE);
    assert_eq!(exit.code, Some(0));
    assert_eq!(
        std::fs::read_to_string(&marker).unwrap(),
        format!("{pid}\n")
    );
}

#[test]
fn a_program_that_cannot_start_is_an_error_from_start() {
    let dir = tempfile::tempdir().unwrap();
    let mut missing = spec(&dir.path().join("ran"));
    missing.argv[0] = dir.path().join("no-such-program").into_os_string();
    let prepared = launch::prepare(&missing).unwrap();
    let error = prepared.start().err().expect("no such program");
    assert_eq!(error.kind(), std::io::ErrorKind::NotFound);
    assert!(error.to_string().contains("no-such-program"), "{error}");
}

#[test]
fn a_prepared_program_is_in_its_group_before_it_starts() {
    // SAFETY: geteuid never fails.
    if unsafe { libc::geteuid() } != 0 {
        coldstart_testkit::skip("creating the program's cgroup takes root");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let mut prepared = launch::prepare(&spec(&marker)).unwrap();
    let pid = prepared.pid().expect("the process is ready");
    // cgroup v2: one line, "0::/path".
    let group = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    let tree = format!("/coldstart-{}-tree", std::process::id());
    let in_tree = |line: &str| {
        line.strip_prefix("0::")
            .and_then(|path| path.rsplit_once(&tree))
            .is_some_and(|(_, n)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    };
    assert!(group.lines().any(in_tree), "{group}");
    let launched = prepared.start().unwrap();
    launched.wait_for_end(&AtomicBool::new(false), || {});
    assert_eq!(launched.terminate(launch::DEFAULT_GRACE).code, Some(0));
}

/// A launch that reaps its tree's orphans leaves alone the children the
/// rest of the process makes and waits for itself: a compiler a test runs
/// beside a trace once had its exit status taken (its wait failed with
/// ECHILD). The oracle is std's own wait on each of those children.
#[test]
fn ending_a_launch_reaps_only_what_the_launch_made() {
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let spawner = {
        let stop = std::sync::Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut waited = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let status = std::process::Command::new("true")
                    .status()
                    .expect("std's wait on its own child succeeds");
                assert!(status.success());
                waited += 1;
            }
            waited
        })
    };
    // Programs that leave an orphan behind (a backgrounded sleep), each
    // ended while `true`s come and go beside it.
    for _ in 0..20 {
        let argv = ["sh", "-c", "sleep 0.01 & exit 0"]
            .into_iter()
            .map(OsString::from)
            .collect();
        let spec = LaunchSpec::quiet(argv, Duration::from_secs(30)).unwrap();
        let launched = launch::launch(&spec).unwrap();
        launched.wait_for_end(&AtomicBool::new(false), || {});
        assert_eq!(launched.terminate(launch::DEFAULT_GRACE).code, Some(0));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let waited = spawner.join().expect("no wait of the spawner failed");
    assert!(waited > 0);
    // And the orphans themselves were reaped: no zombie child is left.
    let zombies: Vec<i32> = coldstart_system::proc::own_children()
        .into_iter()
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
                stat.rsplit(')')
                    .next()
                    .unwrap_or("")
                    .trim_start()
                    .starts_with('Z')
            })
        })
        .collect();
    assert!(zombies.is_empty(), "orphans left unreaped: {zombies:?}");
}
