//! Credentials of a process, and taking them on one thread. The oracles are
//! outside the code under test: the ids setpriv(1) was told to give a
//! process, and the kernel's own account of a thread in
//! /proc/thread-self/status, read and split here.

use coldstart_system::credentials::Credentials;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// The user and group `nobody` on Debian and most distributions.
const NOBODY: u32 = 65534;

fn is_root() -> bool {
    // SAFETY: geteuid never fails.
    unsafe { libc::geteuid() == 0 }
}

/// A child process killed (by its pid) and reaped when dropped, even when
/// the test fails.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The kernel's filesystem uid and gid (the 4th of each line) and the
/// groups of the calling thread.
fn this_thread() -> (u32, u32, Vec<u32>) {
    let status = std::fs::read_to_string("/proc/thread-self/status").unwrap();
    let line = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("no {name} in {status}"))[name.len()..]
            .split_whitespace()
            .map(|n| n.parse::<u32>().unwrap())
            .collect::<Vec<u32>>()
    };
    (line("Uid:")[3], line("Gid:")[3], line("Groups:"))
}

#[test]
fn the_credentials_of_a_process_are_those_setpriv_gave_it() {
    if !is_root() {
        coldstart_testkit::skip("setpriv to another user takes root");
        return;
    }
    let child = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "sleep",
            "5",
        ])
        .spawn()
        .expect("setpriv runs (util-linux)");
    let child = Reaped(child);
    let pid = child.0.id() as i32;
    // setpriv takes the ids, then becomes sleep.
    let deadline = Instant::now() + Duration::from_secs(5);
    while std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap() != "sleep\n" {
        assert!(Instant::now() < deadline, "setpriv did not exec sleep");
        std::thread::sleep(Duration::from_millis(5));
    }
    let credentials = Credentials::of_process(pid).unwrap();
    assert_eq!(
        (credentials.uid, credentials.gid, credentials.groups),
        (NOBODY, NOBODY, vec![])
    );
    drop(child);
    assert!(
        Credentials::of_process(pid).is_err(),
        "a process that is gone has none"
    );
}

#[test]
fn credentials_taken_on_one_thread_are_that_threads_only() {
    if !is_root() {
        coldstart_testkit::skip("taking another user's credentials takes root");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("secret");
    std::fs::write(&secret, "root's").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    let before = this_thread();
    let nobody = Credentials {
        uid: NOBODY,
        gid: NOBODY,
        groups: vec![NOBODY, 100],
    };
    let (taken, readable) = std::thread::scope(|scope| {
        scope
            .spawn(|| {
                nobody.assume_on_this_thread().unwrap();
                // A thread it starts inherits them.
                let inherited = std::thread::spawn(this_thread).join().unwrap();
                assert_eq!(inherited, this_thread());
                (this_thread(), std::fs::File::open(&secret).map(|_| ()))
            })
            .join()
            .unwrap()
    });
    assert_eq!(taken, (NOBODY, NOBODY, vec![100, NOBODY]));
    // Root's 0600 file: root's DAC override is gone from the thread that
    // took nobody's ids.
    assert_eq!(
        readable.unwrap_err().kind(),
        std::io::ErrorKind::PermissionDenied
    );
    assert_eq!(this_thread(), before, "the other threads keep theirs");
    assert!(std::fs::File::open(&secret).is_ok());
}

#[test]
fn a_thread_may_take_credentials_it_has_without_privileges() {
    let own = Credentials::of_process(std::process::id() as i32).unwrap();
    let before = this_thread();
    assert_eq!((own.uid, own.gid, own.groups.clone()), before);
    std::thread::spawn(move || own.assume_on_this_thread())
        .join()
        .unwrap()
        .unwrap();
}

#[test]
fn an_id_that_does_not_take_is_an_error_and_changes_nothing() {
    let own = Credentials::of_process(std::process::id() as i32).unwrap();
    let before = this_thread();
    // uid -1 is no user: setfsuid(-1) changes nothing, whoever asks.
    let impossible = Credentials {
        uid: u32::MAX,
        ..own
    };
    let (error, after) = std::thread::spawn(move || {
        (
            impossible.assume_on_this_thread().unwrap_err(),
            this_thread(),
        )
    })
    .join()
    .unwrap();
    assert!(
        error.to_string().contains("setfsuid(4294967295)"),
        "{error}"
    );
    assert_eq!(after, before);
}
