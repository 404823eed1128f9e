//! pack on broken files: every truncation of a real gcc-built library and
//! byte flips in its tables and a PIE's, every truncation of the binary
//! crate's hand-laid-out fixture, and every input the fuzzers ever crashed
//! on. Each must either pack into a file that coldstart's ELF model reads
//! with the input's relocation totals, or be refused with a message naming
//! the input, leaving nothing behind: no output and no temporary file.

#[path = "../../binary/tests/common/fixture.rs"]
mod fixture;

use coldstart_binary::{InspectOptions, inspect_path};
use coldstart_pack::pack_file;
use object::{Object as _, ObjectSection as _};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A scratch directory holding one input at a time, where pack writes its
/// output.
struct Scratch {
    dir: tempfile::TempDir,
    input: PathBuf,
    output: PathBuf,
}

impl Scratch {
    fn new(input_name: &str) -> Scratch {
        // Memory-backed when the system has one: pack flushes every output
        // it writes, which on a disk would make thousands of cases slow.
        let shm = Path::new("/dev/shm");
        let dir = if shm.is_dir() {
            tempfile::tempdir_in(shm)
        } else {
            tempfile::tempdir()
        }
        .expect("temp dir");
        let input = dir.path().join(input_name);
        let output = dir.path().join("packed.out");
        Scratch { dir, input, output }
    }

    /// Packs `bytes` as the input; `case` says which variant, for failures.
    /// Returns whether it packed.
    fn check(&self, bytes: &[u8], case: &str) -> bool {
        std::fs::write(&self.input, bytes).expect("write input");
        let result = std::panic::catch_unwind(|| pack_file(&self.input, Some(&self.output)))
            .unwrap_or_else(|_| panic!("{case}: pack panicked (message above)"));
        let packed = match result {
            Ok(report) => {
                assert_eq!(
                    report.output.as_deref(),
                    Some(self.output.as_path()),
                    "{case}"
                );
                let options = InspectOptions::default();
                let before = inspect_path(&self.input, &options)
                    .unwrap_or_else(|err| panic!("{case}: packed, but the input reads as: {err}"));
                let after = inspect_path(&self.output, &options)
                    .unwrap_or_else(|err| panic!("{case}: the packed file does not read: {err}"));
                let (b, a) = (&before.relocations, &after.relocations);
                assert_eq!(
                    (a.total, a.relative, a.symbolic),
                    (b.total, b.relative, b.symbolic),
                    "{case}: relocation totals (total, relative, symbolic) changed"
                );
                true
            }
            Err(err) => {
                let text = err.to_string();
                let named = format!("{}: ", self.input.display());
                assert!(
                    text.starts_with(&named),
                    "{case}: does not name the input: {text}"
                );
                false
            }
        };
        let mut left = self.leftovers();
        if packed {
            assert_eq!(
                left,
                std::slice::from_ref(&self.output),
                "{case}: files beside the output"
            );
            std::fs::remove_file(&self.output).expect("remove output");
            left = self.leftovers();
        }
        assert!(left.is_empty(), "{case}: refused but left {left:?} behind");
        packed
    }

    /// Every file in the directory but the input.
    fn leftovers(&self) -> Vec<PathBuf> {
        let mut files: Vec<PathBuf> = std::fs::read_dir(self.dir.path())
            .expect("list temp dir")
            .map(|entry| entry.expect("entry").path())
            .filter(|path| *path != self.input)
            .collect();
        files.sort();
        files
    }
}

/// What gcc builds for these tests: a shared library or a PIE.
#[derive(Clone, Copy)]
enum Build {
    Library,
    Pie,
}

/// A library or PIE with relative relocations (a pointer table) and a libc
/// symbol (so packing adds the GLIBC_ABI_DT_RELR version need), linked
/// without -z pack-relative-relocs. None, after a SKIPPED line, when gcc
/// cannot build it.
fn gcc_build(kind: Build) -> Option<Vec<u8>> {
    let dir = tempfile::tempdir().expect("temp dir");
    let source = dir.path().join("corrupt.c");
    std::fs::write(
        &source,
        r#"
#include <stdio.h>
static int a, b, c;
int *table[] = { &a, &b, &c, &a };
int shown(int i) { return puts("shown") + *table[i % 4]; }
int main(void) { return shown(1) > 0 ? 0 : 1; }
"#,
    )
    .expect("write source");
    let (flags, name): (&[&str], _) = match kind {
        Build::Library => (&["-fPIC", "-shared"], "libcorrupt.so"),
        Build::Pie => (&["-fPIE", "-pie"], "corrupt-pie"),
    };
    let path = dir.path().join(name);
    let built = Command::new("gcc")
        // Older linkers ignore the -z keyword they do not know, with a
        // warning; newer distributions may pack by default.
        .args(["-O1", "-Wl,-z,nopack-relative-relocs"])
        .args(flags)
        .arg(&source)
        .arg("-o")
        .arg(&path)
        .status()
        .is_ok_and(|status| status.success());
    if !built {
        coldstart_testkit::skip(&format!("gcc cannot build {name} here"));
        return None;
    }
    let bytes = std::fs::read(&path).expect("read gcc output");
    let scratch = Scratch::new(name);
    assert!(scratch.check(&bytes, name), "the intact {name} packs");
    Some(bytes)
}

/// File ranges of the tables pack reads and rewrites: the ELF header, the
/// program headers, the dynamic segment (from its program header), and,
/// when there are section headers, the relocation and version tables
/// (found by name through `object`, not through the code under test).
fn table_ranges(bytes: &[u8]) -> Vec<(&'static str, Range<usize>)> {
    let u16_at = |at: usize| usize::from(u16::from_le_bytes([bytes[at], bytes[at + 1]]));
    let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap());
    let u64_at = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap()) as usize;
    let (phoff, phentsize, phnum) = (u64_at(0x20), u16_at(0x36), u16_at(0x38));
    let mut ranges = vec![
        ("ELF header", 0..64),
        ("program headers", phoff..phoff + phentsize * phnum),
    ];
    for ph in (0..phnum).map(|i| phoff + i * phentsize) {
        if u32_at(ph) == 2 {
            // PT_DYNAMIC: p_offset, p_filesz.
            ranges.push((
                "dynamic section",
                u64_at(ph + 8)..u64_at(ph + 8) + u64_at(ph + 32),
            ));
        }
    }
    let file = object::File::parse(bytes).expect("the intact file parses");
    for name in [
        ".rela.dyn",
        ".gnu.version",
        ".gnu.version_r",
        ".gnu.version_d",
    ] {
        if let Some((start, size)) = file.section_by_name(name).and_then(|s| s.file_range()) {
            ranges.push((name, start as usize..(start + size) as usize));
        }
    }
    ranges
}

/// 0x00, 0xff and 0x7f at every offset of the named tables.
fn flip_bytes(bytes: &[u8], label: &str, tables: &[&str]) {
    let ranges = table_ranges(bytes);
    for wanted in tables {
        assert!(
            ranges.iter().any(|(name, _)| name == wanted),
            "{label} has no {wanted}"
        );
    }
    let scratch = Scratch::new(label);
    for (name, range) in ranges.into_iter().filter(|(n, _)| tables.contains(n)) {
        for at in range {
            for value in [0x00u8, 0xff, 0x7f] {
                if bytes[at] == value {
                    continue;
                }
                let mut bad = bytes.to_vec();
                bad[at] = value;
                scratch.check(&bad, &format!("{label}, {name}: 0x{value:02x} at 0x{at:x}"));
            }
        }
    }
}

#[test]
fn every_cut_of_a_gcc_library_is_refused_cleanly() {
    let Some(library) = gcc_build(Build::Library) else {
        return;
    };
    let scratch = Scratch::new("libcorrupt.so");
    for len in 0..=library.len() {
        let packed = scratch.check(
            &library[..len],
            &format!("libcorrupt.so cut to {len} bytes"),
        );
        assert!(
            !packed || len == library.len(),
            "packed a cut file ({len} bytes)"
        );
    }
}

#[test]
fn byte_flips_in_a_gcc_library_pack_or_are_refused_cleanly() {
    let Some(library) = gcc_build(Build::Library) else {
        return;
    };
    let tables = [
        "ELF header",
        "program headers",
        "dynamic section",
        ".rela.dyn",
        ".gnu.version",
        ".gnu.version_r",
    ];
    flip_bytes(&library, "libcorrupt.so", &tables);
}

/// The PIE's relocation and version tables are laid out as the library's;
/// what makes it a PIE is in its headers and dynamic section (PT_INTERP,
/// DF_1_PIE, DT_DEBUG), so those are what is flipped.
#[test]
fn byte_flips_in_a_gcc_pie_pack_or_are_refused_cleanly() {
    let Some(pie) = gcc_build(Build::Pie) else {
        return;
    };
    let tables = ["ELF header", "program headers", "dynamic section"];
    flip_bytes(&pie, "corrupt-pie", &tables);
}

#[test]
fn the_hand_built_fixture_and_its_cuts_are_refused_cleanly() {
    let scratch = Scratch::new("fixture.so");
    for section_headers in [true, false] {
        let bytes = fixture::build(section_headers);
        for len in 0..=bytes.len() {
            scratch.check(
                &bytes[..len],
                &format!("fixture (section headers: {section_headers}) cut to {len} bytes"),
            );
        }
    }
}

#[test]
fn every_fuzz_crash_input_is_refused_or_packed_cleanly() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let scratch = Scratch::new("regression.so");
    let mut replayed = 0;
    for dir in [
        root.join("../binary/tests/fuzz-regressions"),
        root.join("tests/fuzz-regressions"),
    ] {
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.expect("entry").path();
            let bytes = std::fs::read(&path).expect("read regression input");
            scratch.check(&bytes, &path.display().to_string());
            replayed += 1;
        }
    }
    assert!(
        replayed > 1,
        "the regression inputs of both crates were found"
    );
}
