//! inspect on a hand-laid-out ELF whose every relocation, page and
//! initializer the test chose (tests/common/fixture.rs), with and without
//! section headers; and malformed variants of it that must give a clear
//! error, never a panic.

mod common;

use coldstart_binary::{InspectOptions, Inspection, Kind, inspect_bytes, inspect_path};
use common::fixture::{self, FUNC_A, FUNC_B, FUNC_C, RELR_OFFSETS};
use std::collections::BTreeMap;
use std::path::Path;

fn inspect(bytes: &[u8]) -> Inspection {
    common::inspect_named("fixture.so", bytes)
}

fn by_type(pairs: &[(&str, u64)]) -> BTreeMap<String, u64> {
    pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

#[test]
fn relocations_are_counted_exactly() {
    let ins = inspect(&fixture::build(true));
    let r = &ins.relocations;
    assert_eq!(
        r.by_type,
        by_type(&[
            ("R_X86_64_64", 1),
            ("R_X86_64_GLOB_DAT", 1),
            ("R_X86_64_RELATIVE", 3)
        ])
    );
    assert_eq!(r.relr_offsets, RELR_OFFSETS);
    assert_eq!(r.total, 10);
    assert_eq!(r.relative, 8);
    assert_eq!(r.symbolic, 2);
    assert_eq!(r.distinct_symbols, 1);
    assert_eq!(r.bytes, 0x78 + 32);
    let tables: Vec<(&str, &str, u64, u64)> = r
        .sections
        .iter()
        .map(|s| (s.name.as_str(), s.format.as_str(), s.entries, s.relocations))
        .collect();
    assert_eq!(
        tables,
        vec![(".rela.dyn", "rela", 5, 5), (".relr.dyn", "relr", 4, 5)]
    );

    // Pages 0x3000 and 0x4000 are written; .data spans both.
    assert_eq!(r.pages_written.total, 2);
    let pages: Vec<(&str, u64, u64)> = r
        .pages_written
        .by_section
        .iter()
        .map(|s| (s.section.as_str(), s.relocations, s.pages))
        .collect();
    assert_eq!(
        pages,
        vec![(".data", 5, 2), (".ctors", 2, 1), (".init_array", 3, 1)]
    );

    // Three relative relocations sit in .rela.dyn, two of them word-aligned.
    // All word-aligned relative offsets, sorted, encoded by hand:
    // 0x3000 address; bitmap over 0x3008.. (0x3010, 0x3048, 0x3050);
    // 0x3808 address; bitmap (0x3810); 0x4008 address = 5 words.
    let estimate = r.relr_estimate.as_ref().expect("estimate");
    assert_eq!(estimate.relative_in_tables, 3);
    assert_eq!(estimate.packable, 2);
    assert_eq!(estimate.current_bytes, 3 * 24 + 4 * 8);
    assert_eq!(estimate.relr_bytes, 5 * 8);
    assert_eq!(estimate.saving_bytes, 3 * 24 + 4 * 8 - 5 * 8);
}

#[test]
fn initializers_resolve_through_each_kind_of_relocation() {
    let ins = inspect(&fixture::build(true));
    let init = &ins.init_array;
    assert_eq!(init.count, 3);
    let entries: Vec<(u64, Option<u64>, Option<&str>)> = init
        .entries
        .iter()
        .map(|e| (e.slot, e.target, e.symbol.as_deref()))
        .collect();
    assert_eq!(
        entries,
        vec![
            (0x3000, Some(FUNC_A), Some("func_a")), // RELA relative: addend
            (0x3008, Some(FUNC_C), Some("func_c")), // RELA symbolic: dynsym
            (0x3010, Some(FUNC_B), Some("func_b")), // RELR: value in place
        ]
    );
    assert_eq!(init.ctors_count, 2);
    let ctors: Vec<Option<&str>> = init.ctors.iter().map(|c| c.symbol.as_deref()).collect();
    assert_eq!(ctors, vec![Some("func_a"), Some("func_c")]);
    assert_eq!(init.code_pages, 1);
    assert!(init.init_function.is_none());
}

#[test]
fn header_and_dynamic_section() {
    let ins = inspect(&fixture::build(true));
    assert_eq!(ins.header.kind, Kind::SharedObject);
    assert_eq!(ins.header.machine, "x86_64");
    assert_eq!(ins.header.symbols, 4);
    assert!(!ins.header.stripped);
    assert_eq!(ins.header.build_id, None);
    let d = ins.dynamic.as_ref().expect("dynamic");
    assert_eq!(d.needed, vec!["libc.so.6"]);
    assert_eq!(d.soname.as_deref(), Some("libfixture.so"));
    assert_eq!(d.entries, 17);
    assert_eq!(d.dynamic_symbols, 2);
    assert!(d.textrel && d.relr && d.sysv_hash && !d.gnu_hash);
    assert!(!d.relr_version_need && !d.bind_now);
    assert_eq!((d.offset, d.segment), (0x2100, Some(1)));
}

#[test]
fn layout_warnings_name_the_problem() {
    let ins = inspect(&fixture::build(true));
    let mut codes: Vec<&str> = ins.warnings.iter().map(|w| w.code).collect();
    codes.sort_unstable();
    assert_eq!(
        codes,
        vec![
            "bss-shares-file-page",
            "ctors-used",
            "relr-without-version-need",
            "sysv-hash-only",
            "textrel"
        ]
    );
    let bss = ins
        .warnings
        .iter()
        .find(|w| w.code == "bss-shares-file-page")
        .expect("bss warning");
    assert!(bss.message.contains(".bss") && bss.message.contains("0x4100"));
}

#[test]
fn every_byte_is_accounted_for() {
    let bytes = fixture::build(true);
    let ins = inspect(&bytes);
    let mut ranges: Vec<(u64, u64)> = ins
        .sections
        .iter()
        .filter(|s| s.file_size > 0)
        .map(|s| (s.offset, s.file_size))
        .chain(ins.regions.iter().map(|r| (r.offset, r.size)))
        .collect();
    ranges.sort_unstable();
    let mut cursor = 0;
    for (offset, size) in ranges {
        assert_eq!(offset, cursor, "no gap or overlap at 0x{cursor:x}");
        cursor = offset + size;
    }
    assert_eq!(cursor, bytes.len() as u64);
}

#[test]
fn without_section_headers_the_loader_view_gives_the_same_counts() {
    let ins = inspect(&fixture::build(false));
    let r = &ins.relocations;
    assert_eq!(r.relr_offsets, RELR_OFFSETS);
    assert_eq!(r.total, 10);
    assert_eq!(r.by_type.values().sum::<u64>(), 5);
    let names: Vec<&str> = r.sections.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, vec!["DT_RELA", "DT_RELR"]);
    assert_eq!(r.pages_written.total, 2);
    assert_eq!(ins.init_array.count, 3);
    let targets: Vec<Option<u64>> = ins.init_array.entries.iter().map(|e| e.target).collect();
    // Without symbol tables the symbolic slot cannot be resolved.
    assert_eq!(targets, vec![Some(FUNC_A), None, Some(FUNC_B)]);
    assert_eq!(ins.dynamic.as_ref().map(|d| d.dynamic_symbols), Some(2));
    assert!(ins.sections.is_empty());
}

#[test]
fn readelf_agrees_with_the_fixture() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("libfixture.so");
    std::fs::write(&path, fixture::build(true)).unwrap();
    let oracle = common::relocations(&path);
    assert_eq!(
        oracle.relr_offsets, RELR_OFFSETS,
        "the hand encoding is right"
    );
    let ins = inspect_path(&path, &InspectOptions::default()).unwrap();
    assert_eq!(ins.relocations.by_type, oracle.by_type);
    assert_eq!(
        ins.dynamic.unwrap().dynamic_symbols,
        common::dynsym_count(&path)
    );
}

#[test]
fn every_truncation_is_a_clear_error() {
    let bytes = fixture::build(true);
    for len in 0..bytes.len() {
        match inspect_bytes(
            Path::new("cut.so"),
            &bytes[..len],
            &InspectOptions::default(),
        ) {
            Err(err) => {
                let text = err.to_string();
                assert!(text.starts_with("cut.so: "), "names the file: {text}");
            }
            Ok(ins) => panic!("{len} bytes of {} accepted: {:?}", bytes.len(), ins.size),
        }
    }
}

#[test]
fn corrupt_bytes_never_panic() {
    let bytes = fixture::build(true);
    for at in 0..bytes.len() {
        for value in [0x00u8, 0xff, 0x7f] {
            let mut bad = bytes.clone();
            bad[at] = value;
            // Ok or a clear error; the point is that it returns.
            if let Err(err) = inspect_bytes(Path::new("bad.so"), &bad, &InspectOptions::default()) {
                assert!(err.to_string().starts_with("bad.so: "));
            }
        }
    }
}
