//! The `coldstart` binary end to end: bad input gives one clear line naming
//! the file and a non-zero exit (never a panic or a hang), JSON has the
//! documented shape, and the help, completions and man page are generated.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn coldstart() -> Command {
    Command::new(env!("CARGO_BIN_EXE_coldstart"))
}

/// Runs with a deadline: a hang is a failure, not a stuck test suite.
fn run(mut command: Command) -> Output {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn coldstart");
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().expect("wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("coldstart did not finish within 60 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("output")
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// One error line naming `path`, exit status 1, nothing on stdout.
fn assert_one_error(output: &Output, path: &Path, problem: &str) {
    let text = stderr(output);
    assert_eq!(output.status.code(), Some(1), "exit status; stderr: {text}");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 1, "exactly one line: {text}");
    assert!(
        lines[0].starts_with("coldstart: error: ") && lines[0].contains(&*path.to_string_lossy()),
        "names the file: {text}"
    );
    assert!(lines[0].contains(problem), "says {problem:?}: {text}");
    assert!(!text.contains("panicked"), "{text}");
    assert!(output.stdout.is_empty());
}

fn inspect(path: &Path) -> Output {
    let mut command = coldstart();
    command.arg("inspect").arg(path);
    run(command)
}

#[test]
fn directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    assert_one_error(&inspect(dir.path()), dir.path(), "is a directory");
}

#[test]
fn missing_file_is_named() {
    let path = PathBuf::from("/nonexistent/coldstart-test/libnothing.so");
    assert_one_error(&inspect(&path), &path, "no such file");
}

#[test]
fn text_file_is_not_a_binary() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notes.txt");
    std::fs::write(&path, "hello\n").unwrap();
    assert_one_error(
        &inspect(&path),
        &path,
        "not an ELF, PE or Mach-O file (starts with bytes 68 65 6c 6c)",
    );
}

#[test]
fn empty_file_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("empty");
    std::fs::write(&path, "").unwrap();
    assert_one_error(&inspect(&path), &path, "empty file");
}

#[test]
fn truncated_elf_is_malformed() {
    let dir = tempfile::tempdir().unwrap();
    let original = std::fs::read(env!("CARGO_BIN_EXE_coldstart")).unwrap();
    for len in [4, 20, 64, 200, 5000] {
        let path = dir.path().join(format!("cut-{len}"));
        std::fs::write(&path, &original[..len]).unwrap();
        assert_one_error(&inspect(&path), &path, "malformed ELF file");
    }
}

#[test]
fn named_pipe_is_refused_without_hanging() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fifo");
    let status = Command::new("mkfifo").arg(&path).status().expect("mkfifo");
    assert!(status.success());
    assert_one_error(
        &inspect(&path),
        &path,
        "is a named pipe, not a regular file",
    );
}

#[test]
fn unreadable_file_explains_permission() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = dir.path().join("secret.so");
    std::fs::copy(env!("CARGO_BIN_EXE_coldstart"), &path).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o000)).unwrap();
    // Root reads anything; drop to nobody to see what a user sees.
    let is_root = real_uid() == 0;
    let mut command = if is_root {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .arg(env!("CARGO_BIN_EXE_coldstart"));
        c
    } else {
        coldstart()
    };
    command.arg("inspect").arg(&path);
    let output = run(command);
    if is_root && stderr(&output).contains("setpriv") {
        panic!("setpriv failed: {}", stderr(&output));
    }
    assert_one_error(&output, &path, "permission denied");
}

/// The real uid, from /proc (no libc call needed).
fn real_uid() -> u32 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|u| u.parse().ok())
        .expect("Uid line")
}

#[test]
fn one_bad_file_among_good_ones_still_reports_the_good() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad");
    std::fs::write(&bad, "not a binary").unwrap();
    let mut command = coldstart();
    command
        .args(["inspect", "--json"])
        .arg(env!("CARGO_BIN_EXE_coldstart"))
        .arg(&bad);
    let output = run(command);
    assert_eq!(output.status.code(), Some(1));
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert_eq!(json["files"].as_array().map(Vec::len), Some(1));
    assert_eq!(json["errors"][0]["path"], bad.to_string_lossy().as_ref());
    assert!(json["image_overlaps"].is_array());
    assert_eq!(stderr(&output).lines().count(), 1);
}

#[test]
fn single_file_json_is_the_inspection_itself() {
    let mut command = coldstart();
    command
        .args(["inspect", "--json"])
        .arg(env!("CARGO_BIN_EXE_coldstart"));
    let output = run(command);
    assert!(output.status.success(), "{}", stderr(&output));
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
    for field in [
        "path",
        "format",
        "size",
        "header",
        "segments",
        "sections",
        "regions",
        "dynamic",
        "relocations",
        "init_array",
        "warnings",
    ] {
        assert!(json.get(field).is_some(), "field {field}");
    }
    assert!(json["relocations"]["by_type"].is_object());
    assert!(json["relocations"]["relr_offsets"].is_array());
    assert!(json["init_array"]["count"].is_u64());
    assert_eq!(json["format"], "elf");
}

#[test]
fn text_and_markdown_reports_render() {
    for flag in [None, Some("--markdown")] {
        let mut command = coldstart();
        command.arg("inspect");
        if let Some(flag) = flag {
            command.arg(flag);
        }
        command.arg(env!("CARGO_BIN_EXE_coldstart"));
        let output = run(command);
        assert!(output.status.success(), "{}", stderr(&output));
        let text = String::from_utf8_lossy(&output.stdout);
        assert!(text.contains("Relocations:"), "{text}");
        assert!(text.contains("total"), "{text}");
        if flag.is_some() {
            assert!(text.contains("| ---"), "{text}");
        }
    }
}

#[test]
fn bad_page_size_is_a_usage_error() {
    let mut command = coldstart();
    command
        .args(["inspect", "--page-size", "3000"])
        .arg(env!("CARGO_BIN_EXE_coldstart"));
    let output = run(command);
    assert_eq!(output.status.code(), Some(1));
    assert!(stderr(&output).contains("not a power of two"));
}

#[test]
fn help_completions_and_man_page_are_generated() {
    let mut help = coldstart();
    help.args(["inspect", "--help"]);
    let output = run(help);
    assert!(output.status.success());
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        text.contains("Examples:") && text.contains("--json"),
        "{text}"
    );

    let mut bash = coldstart();
    bash.args(["completions", "bash"]);
    let output = run(bash);
    assert!(output.status.success());
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        text.contains("complete") && text.contains("inspect"),
        "{text}"
    );

    let mut man = coldstart();
    man.arg("manpage");
    let output = run(man);
    assert!(output.status.success());
    assert!(String::from_utf8_lossy(&output.stdout).contains(".TH coldstart"));
}

#[test]
fn closed_pipe_is_not_an_error() {
    // Far more output than a pipe buffers, so the write must hit EPIPE.
    let mut child = coldstart()
        .args(["inspect", "--all-sections"])
        .args(std::iter::repeat_n(env!("CARGO_BIN_EXE_coldstart"), 60))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "exit {:?}: {}",
        output.status,
        stderr(&output)
    );
}

#[test]
fn the_demos_help_says_what_it_prints_and_verbose_excludes_json() {
    let mut help = coldstart();
    help.args(["demo", "--help"]);
    let output = run(help);
    assert!(output.status.success());
    // clap wraps the text to the terminal's width.
    let text = String::from_utf8_lossy(&output.stdout)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    for said in [
        "--verbose",
        "demo-report.txt",
        "within the noise",
        "coldstart-run",
        "docs/demo-json.md",
        "Examples:",
    ] {
        assert!(text.contains(said), "{said:?} in\n{text}");
    }
    assert!(!text.contains("Later releases"), "{text}");

    // Both would print to stdout: refused before anything is built.
    let dir = tempfile::tempdir().unwrap();
    let mut both = coldstart();
    both.args(["demo", "--tiny", "--json", "--verbose", "--dir"])
        .arg(dir.path());
    let output = run(both);
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("cannot be used with"),
        "{}",
        stderr(&output)
    );
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}
