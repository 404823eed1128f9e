//! A start of a planned script decided while its exec is under way: what
//! its interpreter will be given, read from the process held at the
//! execve's entry (PTRACE_SYSCALL), as the service finds a process at an
//! exec event. The oracle is the interpreter itself, which prints the
//! arguments the kernel gave it once the exec goes on.

use coldstart_serve::start::{
    Before, Interpreter, given_after_script_exec, given_to_script_exec, wait_for_script_exec,
};
use coldstart_system::identity::Inode;
use coldstart_testkit::held_exec::{
    EXECAT, EXECER, PRINT_ARGS, go_on, held_at_exec, printed_args, write_script,
};
use std::path::Path;

fn script(path: &Path, line: &str) {
    write_script(path, format!("{line}\n").as_bytes());
}

fn inode(path: &Path) -> Inode {
    Inode::of_path(path).unwrap()
}

/// Lets the held process go on with its exec, untraced; what it printed.
fn printed(child: std::process::Child) -> Vec<String> {
    let output = go_on(child);
    assert!(output.status.success(), "{output:?}");
    printed_args(&output.stdout)
        .into_iter()
        .map(|a| String::from_utf8(a).unwrap())
        .collect()
}

#[test]
fn a_scripts_start_is_decided_with_what_its_interpreter_is_given() {
    let dir = tempfile::tempdir().unwrap();
    let printer = coldstart_testkit::build_c(dir.path(), "printargs", PRINT_ARGS);
    let execer = coldstart_testkit::build_c(dir.path(), "execer", EXECER);
    let planned = dir.path().join("planned");
    script(&planned, &format!("#!{} --from-line", printer.display()));
    let path = planned.to_str().unwrap();

    let child = held_at_exec(&execer, &[path, "--writer", "a file.odt"]);
    let pid = child.id() as i32;
    let file = std::fs::File::open(&planned).unwrap();
    let given = given_to_script_exec(pid, inode(&planned), &file, None)
        .expect("the start is decided at the exec");
    assert!(given.opted_out);
    // Not a start of another file planned: the exec is of this script.
    assert!(given_to_script_exec(pid, inode(&printer), &file, None).is_none());
    // The interpreter as looked up when the plan was loaded gives the same.
    let known = Interpreter::of_script(&planned).unwrap();
    assert_eq!((known.inode, known.elf), (inode(&printer), true));
    let with_known = given_to_script_exec(pid, inode(&planned), &file, Some(&known)).unwrap();
    assert_eq!(with_known.argv, given.argv);
    // One known for another name is not taken for it.
    let other = Interpreter {
        named: b"/bin/other".to_vec(),
        elf: false,
        ..known
    };
    let with_other = given_to_script_exec(pid, inode(&planned), &file, Some(&other)).unwrap();
    assert_eq!(with_other.argv, given.argv);
    let printed = printed(child);
    assert_eq!(given.argv, printed);
    assert_eq!(
        printed[1..],
        ["--from-line", path, "--writer", "a file.odt"].map(String::from)
    );
}

#[test]
fn a_script_run_through_another_script_is_left_to_the_wait() {
    let dir = tempfile::tempdir().unwrap();
    let printer = coldstart_testkit::build_c(dir.path(), "printargs", PRINT_ARGS);
    let execer = coldstart_testkit::build_c(dir.path(), "execer", EXECER);
    let inner = dir.path().join("inner");
    script(&inner, &format!("#!{}", printer.display()));
    let outer = dir.path().join("outer");
    script(&outer, &format!("#!{}", inner.display()));

    let child = held_at_exec(&execer, &[outer.to_str().unwrap(), "x"]);
    let pid = child.id() as i32;
    // The outer script's interpreter is a script: the interpreter the exec
    // ends in is not the one its line names.
    let file = std::fs::File::open(&outer).unwrap();
    assert!(given_to_script_exec(pid, inode(&outer), &file, None).is_none());
    let known = Interpreter::of_script(&outer).unwrap();
    assert_eq!((known.inode, known.elf), (inode(&inner), false));
    assert!(given_to_script_exec(pid, inode(&outer), &file, Some(&known)).is_none());
    // The inner script is opened as the outer one's interpreter, in an exec
    // given the outer one.
    let file = std::fs::File::open(&inner).unwrap();
    assert!(given_to_script_exec(pid, inode(&inner), &file, None).is_none());
    // What the kernel did: both lines' interpreters in front.
    let printed = printed(child);
    assert_eq!(
        printed,
        [
            printer.to_str().unwrap(),
            inner.to_str().unwrap(),
            outer.to_str().unwrap(),
            "x"
        ]
        .map(String::from)
    );
}

/// A script's owner may name anything on its line: a FIFO named there is
/// never opened (it would block the service's loop for ever), and the
/// start is left to the wait.
#[test]
fn a_line_naming_a_fifo_blocks_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo");
    coldstart_testkit::run_ok(std::process::Command::new("mkfifo").arg(&fifo));
    let planned = dir.path().join("planned");
    script(&planned, &format!("#!{}", fifo.display()));
    let (tx, rx) = std::sync::mpsc::channel();
    let looked_up = planned.clone();
    std::thread::spawn(move || {
        let known = Interpreter::of_script(&looked_up);
        let file = std::fs::File::open(&looked_up).unwrap();
        // This process, not in an exec: the line is looked at first.
        let given = given_to_script_exec(std::process::id() as i32, inode(&looked_up), &file, None);
        tx.send((known, given.is_none())).unwrap();
    });
    let (known, none) = rx
        .recv_timeout(std::time::Duration::from_secs(5))
        .expect("looking the line's FIFO up blocked");
    let known = known.unwrap();
    assert_eq!((known.inode, known.elf), (inode(&fifo), false));
    assert!(none);
}

/// A script exec'd from a directory descriptor: decided at the exec with
/// the name its interpreter is given (/dev/fd/N/script), unless the
/// descriptor is closed at the exec, when the kernel fails the exec.
#[test]
fn a_script_exec_from_a_descriptor_is_decided_unless_it_will_fail() {
    let dir = tempfile::tempdir().unwrap();
    let printer = coldstart_testkit::build_c(dir.path(), "printargs", PRINT_ARGS);
    let execat = coldstart_testkit::build_c(dir.path(), "execat", EXECAT);
    let planned = dir.path().join("planned");
    script(&planned, &format!("#!{}", printer.display()));
    let file = std::fs::File::open(&planned).unwrap();
    let directory = dir.path().to_str().unwrap();

    let child = held_at_exec(&execat, &[directory, "keep", "planned", "x"]);
    let given = given_to_script_exec(child.id() as i32, inode(&planned), &file, None)
        .expect("decided at the exec");
    assert!(!given.opted_out);
    let printed = printed(child);
    assert_eq!(given.argv, printed);
    assert!(printed[1].starts_with("/dev/fd/"), "{printed:?}");

    let child = held_at_exec(&execat, &[directory, "cloexec", "planned", "x"]);
    assert!(given_to_script_exec(child.id() as i32, inode(&planned), &file, None).is_none());
    let output = go_on(child);
    // The exec failed: the execer went on to its own exit status.
    assert_eq!(output.status.code(), Some(4), "{output:?}");
}

/// Polls until process `pid` runs the file of inode `image`, its exec
/// complete: /proc/PID/exe names the new file before the exec has set the
/// new program's arguments and environment up (its environment's address
/// is 0 until then).
fn runs(pid: i32, image: Inode) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while Inode::of_path(Path::new(&format!("/proc/{pid}/exe"))) != Some(image)
        || coldstart_system::proc::environment_start(pid).is_none_or(|start| start == 0)
    {
        assert!(std::time::Instant::now() < deadline, "{pid} never ran it");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// An exec heard of once it completed is read while the interpreter runs:
/// its arguments name the script. Once the script has run on to an exec of
/// its own, nothing is read, as the arguments are another program's.
#[test]
fn a_scripts_completed_exec_is_read_while_its_interpreter_runs_and_not_after() {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let dir = tempfile::tempdir().unwrap();
    let planned = dir.path().join("planned");
    // Waits for a line, then runs on to a program of its own.
    write_script(&planned, b"#!/bin/sh\nread line\nexec /bin/sleep 30\n");
    let shell = Interpreter::of_script(&planned).unwrap();
    assert!(!shell.argument);
    let mut child = Command::new(&planned)
        .args(["--writer", "a file.odt"])
        .env("COLDSTART_SERVE", "0")
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id() as i32;
    runs(pid, shell.inode);

    let given = given_after_script_exec(pid, inode(&planned), &shell)
        .expect("read while the interpreter runs");
    let path = planned.to_str().unwrap();
    assert_eq!(given.argv, ["/bin/sh", path, "--writer", "a file.odt"]);
    assert!(given.opted_out);
    assert!(!given.under_way);
    // Another script's start is not this one's.
    let other = dir.path().join("other");
    write_script(&other, b"#!/bin/sh\n");
    assert!(given_after_script_exec(pid, inode(&other), &shell).is_none());

    // Waited for from the interpreter on, it is read at once, not once
    // the script has run on (which a wait for any change of program would).
    let waited = wait_for_script_exec(&Before::snapshot(pid), inode(&planned), &shell, pid)
        .expect("read while the interpreter runs");
    assert_eq!(waited.argv, given.argv);

    child.stdin.take().unwrap().write_all(b"go\n").unwrap();
    runs(pid, inode(Path::new("/bin/sleep")));
    assert!(given_after_script_exec(pid, inode(&planned), &shell).is_none());
    // Past the script already: what the program it ran on to was given.
    let ran_on = wait_for_script_exec(&Before::snapshot(pid), inode(&planned), &shell, pid)
        .expect("the program's arguments");
    assert_eq!(ran_on.argv, ["/bin/sleep", "30"]);
    assert!(ran_on.opted_out);
    // SAFETY: a signal to our own child, by its pid.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    let _ = child.wait();
}
