//! Processes held at the entry of an exec, as `coldstart serve` finds a
//! process at an exec event: a C program stops itself under its parent's
//! ptrace, then calls execve or execveat; the test lets it run to the
//! exec's entry (PTRACE_SYSCALL), looks, and lets it go on untraced. The
//! exec'd program can be [`PRINT_ARGS`], whose output says what the kernel
//! handed it.

use std::path::Path;
use std::process::{Child, Command, Stdio};

/// Writes its arguments to standard output, each ended by a NUL.
pub const PRINT_ARGS: &str = r#"
#include <stdio.h>
#include <string.h>
int main(int argc, char **argv) {
    for (int i = 0; i < argc; i++) fwrite(argv[i], 1, strlen(argv[i]) + 1, stdout);
    return 0;
}
"#;

/// Stops under its parent's ptrace, then execs argv[1] with the rest of its
/// arguments and the environment OTHER=x COLDSTART_SERVE=0 LAST=y; exits 4
/// when the exec fails.
pub const EXECER: &str = r#"
#include <signal.h>
#include <sys/ptrace.h>
#include <unistd.h>
int main(int argc, char **argv) {
    char *envp[] = {"OTHER=x", "COLDSTART_SERVE=0", "LAST=y", 0};
    if (argc < 2) return 2;
    if (ptrace(PTRACE_TRACEME, 0, 0, 0) != 0) return 3;
    raise(SIGSTOP);
    execve(argv[1], argv + 1, envp);
    return 4;
}
"#;

/// The same through execveat, from a descriptor of directory argv[1]
/// (opened close-on-exec when argv[2] is "cloexec"), of the file named
/// argv[3] in it, with the arguments from argv[3] on and the environment
/// COLDSTART_SERVE=1; exits 4 when the exec fails.
pub const EXECAT: &str = r#"
#define _GNU_SOURCE
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <unistd.h>
int main(int argc, char **argv) {
    char *envp[] = {"COLDSTART_SERVE=1", 0};
    if (argc < 4) return 2;
    int flags = O_RDONLY | O_DIRECTORY | (strcmp(argv[2], "cloexec") == 0 ? O_CLOEXEC : 0);
    int dir = open(argv[1], flags);
    if (dir < 0) return 5;
    if (ptrace(PTRACE_TRACEME, 0, 0, 0) != 0) return 3;
    raise(SIGSTOP);
    syscall(SYS_execveat, dir, argv[3], argv + 3, envp, 0);
    return 4;
}
"#;

/// Waits for a stop of traced child `pid`; its stop signal.
pub fn stopped(pid: i32) -> i32 {
    let mut status = 0;
    // SAFETY: waiting on our own traced child.
    let waited = unsafe { libc::waitpid(pid, &mut status, libc::__WALL) };
    assert_eq!(waited, pid);
    assert!(libc::WIFSTOPPED(status), "not stopped: {status:#x}");
    libc::WSTOPSIG(status)
}

/// Starts `execer` (built from [`EXECER`] or [`EXECAT`]) with `args`, its
/// output piped, and holds it at its exec's entry. Call from the thread
/// that will let it go: that thread is its tracer.
pub fn held_at_exec(execer: &Path, args: &[&str]) -> Child {
    let child = Command::new(execer)
        .args(args)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id() as i32;
    assert_eq!(stopped(pid), libc::SIGSTOP);
    // SAFETY: ptrace requests on our own stopped tracee.
    unsafe { libc::ptrace(libc::PTRACE_SYSCALL, pid, 0, 0) };
    assert_eq!(stopped(pid), libc::SIGTRAP);
    child
}

/// Lets a held process go on with its exec, untraced; its output.
pub fn go_on(child: Child) -> std::process::Output {
    // SAFETY: detaching from our own tracee in its syscall stop.
    unsafe { libc::ptrace(libc::PTRACE_DETACH, child.id() as i32, 0, 0) };
    child.wait_with_output().unwrap()
}

/// What [`PRINT_ARGS`] printed: its arguments.
pub fn printed_args(output: &[u8]) -> Vec<Vec<u8>> {
    let mut strings: Vec<Vec<u8>> = output.split(|&b| b == 0).map(<[u8]>::to_vec).collect();
    assert_eq!(strings.pop(), Some(Vec::new()), "ends with a NUL");
    strings
}

/// A script of `contents`, executable.
pub fn write_script(path: &Path, contents: &[u8]) {
    std::fs::write(path, contents).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}
