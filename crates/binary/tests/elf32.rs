//! 32-bit ELF (i386): REL tables with addends stored in place, 4-byte
//! words, RELR bitmaps of 31 words. Built with gcc -m32 -nostdlib, which
//! needs no 32-bit libc, and compared with readelf.

mod common;

use std::path::Path;
use std::process::Command;

const SOURCE: &str = r#"
static int a, b, c;
int *table[] = { &a, &b, &c, &a, &b };
extern int external_value;
int *ext = &external_value;
__attribute__((constructor)) static void init_one(void) { a = 1; }
__attribute__((constructor)) static void init_two(void) { b = 2; }
int get(int i) { return *table[i] + *ext; }
"#;

/// Builds the i386 shared object, or None when gcc cannot target i386.
fn build(dir: &Path, name: &str, extra: &[&str]) -> Option<std::path::PathBuf> {
    let source = dir.join("m32.c");
    std::fs::write(&source, SOURCE).unwrap();
    let out = dir.join(name);
    let status = Command::new("gcc")
        .args(["-m32", "-O1", "-fPIC", "-shared", "-nostdlib"])
        .args(extra)
        .arg(&source)
        .arg("-o")
        .arg(&out)
        .status()
        .ok()?;
    status.success().then_some(out)
}

#[test]
fn i386_shared_object_matches_readelf() {
    let dir = tempfile::tempdir().unwrap();
    let (Some(plain), Some(packed)) = (
        build(dir.path(), "plain.so", &[]),
        build(dir.path(), "packed.so", &["-Wl,-z,pack-relative-relocs"]),
    ) else {
        return common::skip("gcc cannot build i386 objects here");
    };
    let before = common::assert_matches_readelf(&plain);
    let after = common::assert_matches_readelf(&packed);
    assert_eq!(
        (before.header.bits, before.header.machine.as_str()),
        (32, "i386")
    );
    assert_eq!(before.relocations.sections[0].format, "rel");

    // REL keeps addends in place: the initializers resolve through them.
    let names: Vec<Option<&str>> = before
        .init_array
        .entries
        .iter()
        .map(|e| e.symbol.as_deref())
        .collect();
    assert_eq!(names, vec![Some("init_one"), Some("init_two")]);

    // The RELR size predicted for the plain build is what ld produced.
    let estimate = before
        .relocations
        .relr_estimate
        .expect("relative relocations");
    let relr_size: u64 = common::sections(&packed)
        .iter()
        .filter(|s| s.kind == "RELR")
        .map(|s| s.size)
        .sum();
    assert_eq!(estimate.relr_bytes, relr_size);
    assert_eq!(
        estimate.packable,
        after.relocations.relr_offsets.len() as u64
    );
    // In the packed build the slots are RELR-relocated: same names.
    let packed_names: Vec<Option<&str>> = after
        .init_array
        .entries
        .iter()
        .map(|e| e.symbol.as_deref())
        .collect();
    assert_eq!(packed_names, names);
}
