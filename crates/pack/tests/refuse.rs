//! What pack refuses, each built for the purpose by gcc (or hand-edited
//! from a gcc build where no compiler makes it): one line naming the file
//! and the reason, the input untouched, no output and no temporary file
//! left behind.

use coldstart_pack::{Error, Refusal, pack_file};
use coldstart_testkit::skip;
use std::path::{Path, PathBuf};
use std::process::Command;

fn gcc() -> bool {
    let ok = Command::new("gcc")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        skip("gcc is not installed (apt-get install gcc)");
    }
    ok
}

const SOURCE: &str = "static int x; int *p = &x; int *get(void) { return p; }\n\
                      int main(void) { return get() != &x; }\n";

fn compile(dir: &Path, name: &str, flags: &[&str]) -> Option<PathBuf> {
    let source = dir.join("program.c");
    std::fs::write(&source, SOURCE).unwrap();
    let out = dir.join(name);
    let status = Command::new("gcc")
        .args(flags)
        .arg("-o")
        .arg(&out)
        .arg(&source)
        .status()
        .unwrap();
    status.success().then_some(out)
}

/// Packs `input` into a fresh directory and expects `reason`.
fn refused(input: &Path, reason: fn(&Refusal) -> bool) {
    let before = std::fs::read(input).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    match pack_file(input, Some(&out)) {
        Err(Error::Refused(refusal)) => {
            assert!(reason(&refusal.reason), "{}: {refusal}", input.display());
            let line = refusal.to_string();
            assert!(
                line.starts_with(&format!("{}: ", input.display())),
                "{line}"
            );
            assert!(!line.contains('\n'), "one line: {line}");
        }
        Err(other) => panic!("{}: {other}", input.display()),
        Ok(report) => panic!("{} was packed: {report:?}", input.display()),
    }
    assert_eq!(std::fs::read(input).unwrap(), before, "input untouched");
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert!(left.is_empty(), "nothing left behind: {left:?}");
}

#[test]
fn static_executables_are_refused() {
    if !gcc() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    match compile(dir.path(), "static", &["-static", "-O1"]) {
        Some(binary) => refused(&binary, |r| matches!(r, Refusal::Static)),
        None => skip("gcc -static failed (libc6-dev's static libc missing)"),
    }
    if let Some(binary) = compile(dir.path(), "static-pie", &["-static-pie", "-O1"]) {
        refused(&binary, |r| matches!(r, Refusal::NotLoaderRelocated(_)));
    }
}

#[test]
fn position_dependent_executables_are_refused() {
    if !gcc() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let binary = compile(dir.path(), "nopie", &["-no-pie", "-O1"]).expect("gcc -no-pie");
    refused(&binary, |r| matches!(r, Refusal::NotLoaderRelocated(_)));
}

#[test]
fn linker_packed_files_are_refused() {
    if !gcc() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let binary = compile(dir.path(), "relr", &["-O1", "-Wl,-z,pack-relative-relocs"]).expect("gcc");
    refused(&binary, |r| *r == Refusal::AlreadyRelr);
}

#[test]
fn text_relocations_are_refused() {
    if !gcc() {
        return;
    }
    // A word in .text that holds an address: position-independent only
    // through a relative relocation of code, which -z notext allows.
    let dir = tempfile::tempdir().unwrap();
    let asm = dir.path().join("textrel.s");
    std::fs::write(&asm, ".text\n.globl f\nf: ret\n.p2align 3\nslot: .quad f\n").unwrap();
    let out = dir.path().join("libtextrel.so");
    let ok = Command::new("gcc")
        .args(["-shared", "-nostdlib", "-Wl,-z,notext", "-o"])
        .arg(&out)
        .arg(&asm)
        .status()
        .unwrap()
        .success();
    assert!(ok, "gcc -shared -z notext");
    refused(&out, |r| *r == Refusal::TextRel);
}

#[test]
fn untested_machines_and_classes_are_refused() {
    if !gcc() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let binary = compile(dir.path(), "pie", &["-O1"]).expect("gcc");
    let bytes = std::fs::read(&binary).unwrap();
    // e_machine at 0x12: AArch64 (183).
    let mut aarch64 = bytes.clone();
    aarch64[0x12..0x14].copy_from_slice(&183u16.to_le_bytes());
    let path = dir.path().join("aarch64");
    std::fs::write(&path, &aarch64).unwrap();
    refused(
        &path,
        |r| matches!(r, Refusal::Machine(m) if m.contains("AArch64")),
    );
    // EI_CLASS at 4: 32-bit.
    let mut elf32 = bytes.clone();
    elf32[4] = 1;
    let path = dir.path().join("elf32");
    std::fs::write(&path, &elf32).unwrap();
    refused(
        &path,
        |r| matches!(r, Refusal::Machine(m) if m.contains("32-bit")),
    );
    let path = dir.path().join("text");
    std::fs::write(&path, b"#!/bin/sh\necho not an ELF file\n").unwrap();
    refused(&path, |r| *r == Refusal::NotElf);
}

#[test]
fn the_input_itself_is_never_the_output() {
    if !gcc() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let binary = compile(dir.path(), "pie", &["-O1"]).expect("gcc");
    let before = std::fs::read(&binary).unwrap();
    let link = dir.path().join("same");
    std::fs::hard_link(&binary, &link).unwrap();
    let err = pack_file(&binary, Some(&link)).expect_err("same file");
    assert!(matches!(err, Error::Output { .. }), "{err}");
    assert_eq!(std::fs::read(&binary).unwrap(), before);
}

#[test]
fn missing_and_unreadable_inputs_name_the_file() {
    let missing = Path::new("/nonexistent/libnothing.so");
    let err = pack_file(missing, None).expect_err("missing");
    assert_eq!(err.to_string(), "/nonexistent/libnothing.so: no such file");
    let dir = tempfile::tempdir().unwrap();
    let err = pack_file(dir.path(), None).expect_err("directory");
    assert!(
        err.to_string().ends_with("is a directory, not an ELF file"),
        "{err}"
    );
}
