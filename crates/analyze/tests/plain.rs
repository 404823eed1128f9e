//! Placing recorded names in a plain build: a small shared library built
//! here with gcc, whose symbols `nm` and `readelf` place independently of
//! coldstart's ELF reader.

use coldstart_analyze::plain::{Placement, PlainBuild};
use coldstart_binary::OffsetIndex;
use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

/// Two files each with a local `helper` (ambiguous by name), a global
/// `parse`, and a data table.
const ONE: &str = "
__attribute__((noinline, noclone)) static int helper(int x) { return x * 3 + 1; }
__attribute__((noinline, noclone)) int parse(int x) { return helper(x) + 7; }
int table[64] = {1};
int one(int x) { return helper(x) + table[x & 63]; }
";
const TWO: &str = "
__attribute__((noinline, noclone)) static int helper(int x) { return x * 5 - 2; }
int two(int x) { return helper(x) * 2; }
";

fn tool_runs(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Each defined symbol's file offset from nm and readelf, by name; local
/// duplicates all kept.
fn nm_offsets(binary: &Path) -> HashMap<String, Vec<u64>> {
    let mut symbols: HashMap<String, Vec<u64>> = HashMap::new();
    for symbol in coldstart_testkit::nm_symbols(binary) {
        symbols.entry(symbol.name).or_default().push(symbol.offset);
    }
    symbols
}

#[test]
fn names_place_exactly_by_base_name_or_not_at_all() {
    if !(tool_runs("gcc") && tool_runs("nm") && tool_runs("readelf")) {
        coldstart_testkit::skip("gcc, nm or readelf not installed (apt-get install gcc binutils)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (one, two) = (dir.path().join("one.c"), dir.path().join("two.c"));
    std::fs::write(&one, ONE).unwrap();
    std::fs::write(&two, TWO).unwrap();
    let lib = dir.path().join("libplain.so");
    coldstart_testkit::run_ok(
        Command::new("gcc")
            .args(["-O2", "-fPIC", "-shared", "-o"])
            .arg(&lib)
            .arg(&one)
            .arg(&two),
    );
    let truth = nm_offsets(&lib);
    assert_eq!(truth["helper"].len(), 2, "two local helpers: {truth:?}");
    let index = OffsetIndex::from_path(&lib).unwrap();
    let plain = PlainBuild::new(&index);

    let Placement::Exact(parse) = plain.place("parse") else {
        panic!("parse: {:?}", plain.place("parse"));
    };
    assert_eq!(
        (parse.raw_name.as_str(), parse.offset),
        ("parse", truth["parse"][0])
    );
    // The instrumented build cloned it; the plain one did not.
    let Placement::ByBaseName(clone) = plain.place("parse.isra.0") else {
        panic!("parse.isra.0: {:?}", plain.place("parse.isra.0"));
    };
    assert_eq!(clone.offset, truth["parse"][0]);
    assert_eq!(plain.place("two.constprop.0.isra.0"), {
        let Placement::Exact(two) = plain.place("two") else {
            panic!("two")
        };
        assert_eq!(two.offset, truth["two"][0]);
        Placement::ByBaseName(two)
    });
    assert_eq!(plain.place("helper"), Placement::Ambiguous);
    assert_eq!(plain.place("helper.part.0"), Placement::Ambiguous);
    // A data symbol is not a function.
    assert!(truth.contains_key("table"));
    assert_eq!(plain.place("table"), Placement::Missing);
    assert_eq!(plain.place("inlined_away"), Placement::Missing);
}
