//! Reading what a process passed to the exec it is in. A C program stops
//! itself under ptrace and then calls execve with arguments and an
//! environment of its own making; the test holds it at the execve's entry
//! (PTRACE_SYSCALL), where the process is inside the exec with its old
//! memory, as the service finds a process at an exec event. The oracle is
//! what the program passed.

use coldstart_system::exec_args;
use std::process::Command;

const EXECER: &str = r#"
#include <signal.h>
#include <sys/ptrace.h>
#include <unistd.h>

/* Stops under its parent's ptrace, then execs argv[1] with the rest of its
   arguments and a fixed environment. */
int main(int argc, char **argv) {
    char *envp[] = {"OTHER=x", "COLDSTART_SERVE=0", "LAST=y", 0};
    if (argc < 2) return 2;
    if (ptrace(PTRACE_TRACEME, 0, 0, 0) != 0) return 3;
    raise(SIGSTOP);
    execve(argv[1], argv + 1, envp);
    return 4;
}
"#;

/// Waits for a stop of traced child `pid`; its stop signal.
fn stopped(pid: i32) -> i32 {
    let mut status = 0;
    // SAFETY: waiting on our own traced child.
    let waited = unsafe { libc::waitpid(pid, &mut status, libc::__WALL) };
    assert_eq!(waited, pid);
    assert!(libc::WIFSTOPPED(status), "not stopped: {status:#x}");
    libc::WSTOPSIG(status)
}

#[test]
fn the_arguments_and_environment_given_to_an_exec_under_way_are_read() {
    let dir = tempfile::tempdir().unwrap();
    let execer = coldstart_testkit::build_c(dir.path(), "execer", EXECER);
    // Spawned from this thread, which is then its tracer.
    let mut child = Command::new(&execer)
        .args(["/bin/true", "--writer", "a file.odt"])
        .spawn()
        .unwrap();
    let pid = child.id() as i32;
    assert_eq!(stopped(pid), libc::SIGSTOP);

    // Stopped by its signal, not in an exec: nothing to read.
    assert_eq!(exec_args::read(pid, || true), None);

    // At the execve's entry.
    // SAFETY: ptrace requests on our own stopped tracee.
    unsafe { libc::ptrace(libc::PTRACE_SYSCALL, pid, 0, 0) };
    assert_eq!(stopped(pid), libc::SIGTRAP);
    let args = exec_args::read(pid, || true).expect("the exec's arguments are read");
    assert_eq!(
        args.argv,
        vec![
            b"/bin/true".to_vec(),
            b"--writer".to_vec(),
            b"a file.odt".to_vec()
        ]
    );
    assert_eq!(args.envp.len(), 3);
    assert_eq!(args.variable("COLDSTART_SERVE"), Some(&b"0"[..]));
    assert_eq!(args.variable("LAST"), Some(&b"y"[..]));
    // The caller saw the process change: nothing is read.
    assert_eq!(exec_args::read(pid, || false), None);

    // SAFETY: ending our own tracee.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    // Reaped here (std's wait takes a traced child's stops as well).
    let mut status = 0;
    // SAFETY: waiting on our own child.
    unsafe { libc::waitpid(pid, &mut status, libc::__WALL) };
    // Already reaped: std's own wait has nothing left to take.
    let _ = child.try_wait();
}
