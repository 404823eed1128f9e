//! Reading what a process passed to the exec it is in. A C program stops
//! itself under ptrace and then calls execve with arguments and an
//! environment of its own making; the test holds it at the execve's entry
//! (PTRACE_SYSCALL), where the process is inside the exec with its old
//! memory, as the service finds a process at an exec event. The oracle is
//! what the program passed.

use coldstart_system::exec_args::{self, ExecArgs, SCRIPT_HEAD, Shebang};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};

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

/// Writes its arguments to standard output, each ended by a NUL: the
/// interpreter of the scripts below, and so the oracle of what the kernel
/// handed it.
const PRINT_ARGS: &str = r#"
#include <stdio.h>
#include <string.h>
int main(int argc, char **argv) {
    for (int i = 0; i < argc; i++) fwrite(argv[i], 1, strlen(argv[i]) + 1, stdout);
    return 0;
}
"#;

/// Stops under its parent's ptrace, then execs argv[2] in directory argv[1]
/// with execveat, from a descriptor of that directory, its arguments from
/// argv[2] on.
const EXECAT: &str = r#"
#define _GNU_SOURCE
#include <fcntl.h>
#include <signal.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <unistd.h>
int main(int argc, char **argv) {
    char *envp[] = {"COLDSTART_SERVE=1", 0};
    if (argc < 3) return 2;
    int dir = open(argv[1], O_RDONLY | O_DIRECTORY);
    if (dir < 0) return 5;
    if (ptrace(PTRACE_TRACEME, 0, 0, 0) != 0) return 3;
    raise(SIGSTOP);
    syscall(SYS_execveat, dir, argv[2], argv + 2, envp, 0);
    return 4;
}
"#;

fn write_script(path: &Path, contents: &[u8]) {
    std::fs::write(path, contents).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

fn nul_separated(output: &[u8]) -> Vec<Vec<u8>> {
    let mut strings: Vec<Vec<u8>> = output.split(|&b| b == 0).map(<[u8]>::to_vec).collect();
    assert_eq!(strings.pop(), Some(Vec::new()), "ends with a NUL");
    strings
}

/// "#!" lines of every shape the kernel reads differently, each run by the
/// kernel: the interpreter's arguments as it printed them are the oracle of
/// what `Shebang` makes of the line.
#[test]
fn a_scripts_interpreter_is_given_what_the_kernel_gives_it() {
    let dir = tempfile::tempdir().unwrap();
    let printer = coldstart_testkit::build_c(dir.path(), "printargs", PRINT_ARGS);
    let p = printer.as_os_str().as_bytes();
    let line = |parts: &[&[u8]]| parts.concat();
    let long_argument = vec![b'a'; 300];
    let cases: Vec<Vec<u8>> = vec![
        line(&[b"#!", p, b"\necho\n"]),
        line(&[b"#!", p, b" -x\n"]),
        line(&[b"#!  \t", p, b"  -x  y \tz \t \n"]),
        line(&[b"#!", p, b"\t-a\tb\n"]),
        // No newline: the file ends.
        line(&[b"#!", p, b" -e"]),
        // A NUL ends the argument, and a NUL before the newline hides it.
        line(&[b"#!", p, b" -a\0junk\n"]),
        line(&[b"#!", p, b" \0junk\n"]),
        // Longer than the kernel reads: the argument is cut.
        line(&[b"#!", p, b" ", &long_argument, b"\n"]),
    ];
    for (i, contents) in cases.iter().enumerate() {
        let script = dir.path().join(format!("script{i}"));
        write_script(&script, contents);
        let argv: Vec<&[u8]> = vec![script.as_os_str().as_bytes(), b"one", b"-two"];
        let output = Command::new(&script)
            .args(["one", "-two"])
            .stderr(Stdio::inherit())
            .output();
        let shebang = Shebang::parse(&contents[..contents.len().min(SCRIPT_HEAD)]);
        let contents_shown = String::from_utf8_lossy(contents);
        let Some(shebang) = shebang else {
            panic!("{contents_shown:?}: not parsed, but run: {output:?}");
        };
        let output = output.unwrap_or_else(|e| panic!("{contents_shown:?}: {e}"));
        assert!(output.status.success(), "{contents_shown:?}: {output:?}");
        let exec = ExecArgs {
            filename: argv[0].to_vec(),
            from_descriptor: None,
            argv: argv.iter().map(|a| a.to_vec()).collect(),
            envp: Vec::new(),
        };
        assert_eq!(
            shebang.interpreter_argv(&exec),
            nul_separated(&output.stdout),
            "{contents_shown:?}"
        );
    }

    // A carriage return is part of the name: the kernel looks for a
    // program whose name ends in one.
    let script = dir.path().join("crlf");
    let contents = line(&[b"#!", p, b"\r\n"]);
    write_script(&script, &contents);
    let error = Command::new(&script).output().unwrap_err();
    assert_eq!(error.raw_os_error(), Some(libc::ENOENT));
    assert_eq!(
        Shebang::parse(&contents).unwrap().interpreter,
        line(&[p, b"\r"])
    );

    // A file of just "#!" names the empty interpreter, which the kernel
    // then fails to open.
    let script = dir.path().join("bare");
    write_script(&script, b"#!");
    let error = Command::new(&script).output().unwrap_err();
    assert_ne!(error.raw_os_error(), Some(libc::ENOEXEC));
    assert_eq!(Shebang::parse(b"#!").unwrap().interpreter, b"");

    // Lines the kernel refuses to run (ENOEXEC) are not parsed.
    let cut_name = line(&[b"#!/", &vec![b'x'; 300]]);
    for contents in [&b"#!\n"[..], b"#!   \t \n", &cut_name, b"echo\n"] {
        let script = dir.path().join("refused");
        write_script(&script, contents);
        let error = Command::new(&script).output().unwrap_err();
        assert_eq!(error.raw_os_error(), Some(libc::ENOEXEC), "{contents:?}");
        assert_eq!(Shebang::parse(contents), None, "{contents:?}");
    }
}

/// A script exec'd with execveat from a directory descriptor, held at the
/// exec's entry: the name the kernel gives it (/dev/fd/N/script) and the
/// interpreter's arguments made from what was read match what the
/// interpreter then printed.
#[test]
fn a_scripts_exec_under_way_gives_its_interpreters_arguments() {
    let dir = tempfile::tempdir().unwrap();
    let printer = coldstart_testkit::build_c(dir.path(), "printargs", PRINT_ARGS);
    let execat = coldstart_testkit::build_c(dir.path(), "execat", EXECAT);
    let contents = [
        b"#!".as_slice(),
        printer.as_os_str().as_bytes(),
        b" --from-line\n",
    ]
    .concat();
    write_script(&dir.path().join("script"), &contents);
    let child = Command::new(&execat)
        .arg(dir.path())
        .args(["script", "--writer", "a file.odt"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id() as i32;
    assert_eq!(stopped(pid), libc::SIGSTOP);
    // SAFETY: ptrace requests on our own stopped tracee.
    unsafe { libc::ptrace(libc::PTRACE_SYSCALL, pid, 0, 0) };
    assert_eq!(stopped(pid), libc::SIGTRAP);
    let args = exec_args::read(pid, || true).expect("the exec's arguments are read");
    let fd_name = String::from_utf8(args.filename.clone()).unwrap();
    let descriptor = fd_name
        .strip_prefix("/dev/fd/")
        .and_then(|rest| rest.strip_suffix("/script"))
        .unwrap_or_else(|| panic!("{fd_name}"));
    assert_eq!(args.from_descriptor, descriptor.parse().ok());
    assert_eq!(
        exec_args::closes_on_exec(pid, args.from_descriptor.unwrap()),
        Some(false)
    );
    // The name, seen from outside the process, is the script.
    let outside = exec_args::seen_from_outside(pid, &args.filename);
    assert_eq!(
        std::fs::read(&outside).unwrap(),
        contents,
        "{}",
        outside.display()
    );
    assert_eq!(args.variable("COLDSTART_SERVE"), Some(&b"1"[..]));
    let expected = Shebang::parse(&contents).unwrap().interpreter_argv(&args);
    // SAFETY: letting our own tracee go on with its exec, untraced.
    unsafe { libc::ptrace(libc::PTRACE_DETACH, pid, 0, 0) };
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success(), "{output:?}");
    let printed = nul_separated(&output.stdout);
    assert_eq!(printed, expected);
    assert_eq!(
        printed[1..],
        [
            b"--from-line".to_vec(),
            format!("/dev/fd/{descriptor}/script").into_bytes(),
            b"--writer".to_vec(),
            b"a file.odt".to_vec()
        ]
    );
}
