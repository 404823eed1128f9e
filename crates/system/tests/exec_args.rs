//! Reading what a process passed to the exec it is in. A C program stops
//! itself under ptrace and then calls execve with arguments and an
//! environment of its own making; the test holds it at the execve's entry
//! (PTRACE_SYSCALL), where the process is inside the exec with its old
//! memory, as the service finds a process at an exec event. The oracle is
//! what the program passed.

use coldstart_system::exec_args::{self, ExecArgs, SCRIPT_HEAD, Shebang};
use coldstart_testkit::held_exec::{
    EXECAT, EXECER, PRINT_ARGS, go_on, held_at_exec, printed_args, stopped, write_script,
};
use std::os::unix::ffi::OsStrExt;
use std::process::{Command, Stdio};

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
            printed_args(&output.stdout),
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
    let child = held_at_exec(
        &execat,
        &[
            dir.path().to_str().unwrap(),
            "keep",
            "script",
            "--writer",
            "a file.odt",
        ],
    );
    let pid = child.id() as i32;
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
    let output = go_on(child);
    assert!(output.status.success(), "{output:?}");
    let printed = printed_args(&output.stdout);
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
