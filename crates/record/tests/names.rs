//! The name recorder against a program's own record of the names it
//! passed (tests/names/lookups.c): absolute, relative to the working
//! directory and to a directory descriptor, missing ones, both names of a
//! rename, and one in a page the program never touched.

use coldstart_profile::LookupMissed;
use coldstart_record::names::{Attachment, NameRecorder};
use coldstart_testkit::{can_trace, run_ok, skip};
use std::path::Path;
use std::process::Command;

#[test]
fn records_every_name_a_program_passes_as_the_program_says_it_passed_them() {
    if !can_trace() {
        return;
    }
    // Both ways of attaching, where this architecture has the raw one.
    let attachments: &[Attachment] = if cfg!(target_arch = "x86_64") {
        &[Attachment::Raw, Attachment::PerCall]
    } else {
        &[Attachment::PerCall]
    };
    for &attachment in attachments {
        records_every_name_as_the_program_says(attachment);
    }
}

fn records_every_name_as_the_program_says(attachment: Attachment) {
    let work = tempfile::tempdir().unwrap();
    let fixture = work.path().join("lookups");
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/names/lookups.c");
    run_ok(
        Command::new("cc")
            .arg("-O1")
            .arg("-o")
            .arg(&fixture)
            .arg(&source),
    );
    let dir = work.path().join("d");
    std::fs::create_dir(&dir).unwrap();
    let dir = dir.canonicalize().unwrap();

    let recorder = match NameRecorder::start_with(Path::new("/sys/kernel/tracing"), attachment) {
        Ok(r) => r,
        Err(e) => {
            skip(&format!("BPF programs cannot be attached here: {e}"));
            return;
        }
    };
    let output = Command::new(&fixture).arg(&dir).output().unwrap();
    let recorded = recorder.finish();
    assert!(output.status.success(), "{output:?}");
    let pid = output_pid(&recorded, &fixture);

    let said: Vec<String> = String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    let (expected, unreadable): (Vec<_>, Vec<_>) =
        said.iter().cloned().partition(|l| l != "unreadable");
    let dir = dir.to_str().unwrap();
    let seen: Vec<String> = recorded
        .names
        .iter()
        .filter(|n| n.tgid == pid && (n.path == dir || n.path.starts_with(&format!("{dir}/"))))
        .map(|n| n.path.clone())
        .collect();
    assert_eq!(seen, expected, "attached {attachment:?}");
    // The loader's own names may sit in pages it has not touched yet; the
    // program's, after its first, are all readable but one.
    let own_start = recorded
        .names
        .iter()
        .find(|n| n.tgid == pid && n.path == expected[0])
        .unwrap()
        .t_ns;
    let missed: Vec<LookupMissed> = recorded
        .missed
        .iter()
        .filter(|m| m.tgid == pid && m.t_ns > own_start)
        .map(|m| m.why)
        .collect();
    assert_eq!(missed, vec![LookupMissed::Unreadable; unreadable.len()]);
    assert_eq!(recorded.dropped, 0);
    // Its exec and the loader's opens are there too, before its own.
    let first = recorded.names.iter().position(|n| n.tgid == pid).unwrap();
    assert_eq!(recorded.names[first].call, "execve");
    assert_eq!(Path::new(&recorded.names[first].path), fixture);
    // Nothing of this process's own lookups (the test's compiler run
    // ended before the recorder started; the drain's /proc reads are its own).
    let own = std::process::id() as i32;
    assert!(recorded.names.iter().all(|n| n.tgid != own));
}

/// The process that executed `fixture`.
fn output_pid(recorded: &coldstart_record::names::Recorded, fixture: &Path) -> i32 {
    recorded
        .names
        .iter()
        .find(|n| n.call == "execve" && Path::new(&n.path) == fixture)
        .map(|n| n.tgid)
        .expect("the fixture's execve was recorded")
}
