//! Test support: finding the toolchains, running them with their output
//! captured, nm as the oracle for where a link put each symbol, and the
//! CI switch that turns skipped checks into failures.

#![allow(dead_code)]

use coldstart_layout::{Kind, Order, OrderOptions, Trace, TracedSymbol, order};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Where Debian's LLVM 19 packages put their tools.
pub const LLVM_BIN: &str = "/usr/lib/llvm-19/bin";

/// A check that cannot run here: SKIPPED, or a failure on CI.
#[allow(unused_imports)] // not every test binary skips
pub use coldstart_testkit::skip;

/// `name` on PATH, else in LLVM_BIN.
pub fn tool(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from(LLVM_BIN)])
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}

/// PATH with LLVM_BIN in front, so `-fuse-ld=lld` finds ld.lld.
pub fn path_with_llvm() -> std::ffi::OsString {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::join_paths(
        [PathBuf::from(LLVM_BIN)]
            .into_iter()
            .chain(std::env::split_paths(&path)),
    )
    .expect("PATH joins")
}

/// The first-call order of one trace that used `symbols` (name, kind,
/// size) in this order.
pub fn used_in_order<'a>(symbols: impl IntoIterator<Item = (&'a str, Kind, u64)>) -> Order {
    let trace = Trace::new(
        symbols
            .into_iter()
            .enumerate()
            .map(|(i, (name, kind, size))| TracedSymbol {
                raw_name: name.to_string(),
                kind,
                first_seq: i as u64,
                calls: None,
                size,
            })
            .collect(),
    );
    order(&[trace], &OrderOptions::default()).expect("orders")
}

/// Runs a command that must succeed; returns its output.
pub fn run(command: &mut Command) -> Output {
    let shown = format!("{command:?}");
    let output = command
        .env("LC_ALL", "C")
        .output()
        .unwrap_or_else(|e| panic!("{shown}: {e}"));
    assert!(
        output.status.success(),
        "{shown} failed ({}):\n{}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

pub fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Sized code symbols of a linked file by address; see [`nm_symbols`].
pub fn code_symbols(nm: &Path, file: &Path) -> Vec<(u64, String)> {
    nm_symbols(nm, file, "TtWi")
}

/// Sized symbols of the nm types in `kinds` (say "Dd" for data) by
/// address, as `nm` prints them: the oracle for the order a link produced.
/// Symbols without a size are markers (BOLT's `__hot_start`), not code or
/// data. `nm` is GNU nm for ELF and llvm-nm for other formats.
pub fn nm_symbols(nm: &Path, file: &Path, kinds: &str) -> Vec<(u64, String)> {
    let output = run(Command::new(nm)
        .args(["-n", "-S", "--defined-only"])
        .arg(file));
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let &[address, _size, kind, name] = fields.as_slice() else {
                return None;
            };
            let address = u64::from_str_radix(address, 16).ok()?;
            kinds.contains(kind).then(|| (address, name.to_string()))
        })
        .collect()
}

/// Checks that `expected` names a run of consecutive code symbols in
/// `symbols` (nothing else placed between them), starting at `start`
/// when given.
pub fn assert_contiguous(
    symbols: &[(u64, String)],
    expected: &[String],
    start: Option<u64>,
    what: &str,
) {
    assert!(!expected.is_empty(), "{what}: nothing to check");
    let first = symbols
        .iter()
        .position(|(_, name)| name == &expected[0])
        .unwrap_or_else(|| panic!("{what}: {} is not in the output", expected[0]));
    let found: Vec<&str> = symbols[first..]
        .iter()
        .take(expected.len())
        .map(|(_, name)| name.as_str())
        .collect();
    assert_eq!(
        found, expected,
        "{what}: the ordered symbols, in order, contiguous"
    );
    if let Some(start) = start {
        assert_eq!(
            symbols[first].0, start,
            "{what}: {} is at 0x{:x}, not at the start of the section, 0x{start:x}",
            expected[0], symbols[first].0
        );
    }
}

/// Address of section `name` in an ELF file, by readelf.
pub fn section_address(file: &Path, name: &str) -> u64 {
    section_range(file, name).0
}

/// Start and end address of section `name` in an ELF file, by readelf.
pub fn section_range(file: &Path, name: &str) -> (u64, u64) {
    let output = run(Command::new("readelf").args(["-W", "-S"]).arg(file));
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .find_map(|line| {
            let rest = line.trim_start().strip_prefix('[')?.split_once(']')?.1;
            let fields: Vec<&str> = rest.split_whitespace().collect();
            // Name, type, address, offset, size.
            (fields.first() == Some(&name)).then_some(())?;
            let address = u64::from_str_radix(fields.get(2)?, 16).ok()?;
            let size = u64::from_str_radix(fields.get(4)?, 16).ok()?;
            Some((address, address + size))
        })
        .unwrap_or_else(|| panic!("{}: no section {name}", file.display()))
}
