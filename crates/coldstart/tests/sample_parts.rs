//! The sample app's part libraries traced as root with readahead off: the
//! pages of each part's code and table that the start reads are exactly the
//! runs the generator's manifest says its initializer touches. The oracle
//! is the manifest, placed in the file by `nm` (symbol addresses) and
//! `readelf -l` (where each LOAD segment's addresses sit in the file).

use coldstart_sample::{PartSection, SampleSpec, generate_and_build};
use coldstart_testkit::{can_trace, run_ok, skip, world_readable_temp_dir};
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

fn coldstart() -> Command {
    Command::new(env!("CARGO_BIN_EXE_coldstart"))
}

fn stdout(command: &mut Command) -> String {
    String::from_utf8_lossy(&run_ok(command).stdout).into_owned()
}

fn hex(field: &str) -> u64 {
    u64::from_str_radix(field.trim_start_matches("0x"), 16).expect("hex field")
}

/// The file offset of virtual address `address`, from `readelf -lW`.
fn file_offset(binary: &Path, address: u64) -> u64 {
    let listing = stdout(Command::new("readelf").arg("-lW").arg(binary));
    listing
        .lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            // LOAD Offset VirtAddr PhysAddr FileSiz MemSiz Flg Align
            (f.first() == Some(&"LOAD")).then(|| (hex(f[1]), hex(f[2]), hex(f[4])))
        })
        .find(|&(_, vaddr, filesz)| (vaddr..vaddr + filesz).contains(&address))
        .map(|(offset, vaddr, _)| address - vaddr + offset)
        .unwrap_or_else(|| panic!("{address:#x} is in no LOAD segment of {binary:?}"))
}

/// The address of `symbol` in `binary`, from `nm`.
fn symbol_address(binary: &Path, symbol: &str) -> u64 {
    stdout(Command::new("nm").arg("--defined-only").arg(binary))
        .lines()
        .find_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            (f.len() == 3 && f[2] == symbol).then(|| hex(f[0]))
        })
        .unwrap_or_else(|| panic!("{symbol} not in nm of {binary:?}"))
}

/// Pages in the report's inclusive `[first, last]` extents.
fn pages_of(extents: &Value) -> BTreeSet<u64> {
    extents
        .as_array()
        .expect("page extents")
        .iter()
        .flat_map(|e| e[0].as_u64().unwrap()..=e[1].as_u64().unwrap())
        .collect()
}

#[test]
fn a_traced_start_reads_exactly_the_part_pages_the_manifest_names() {
    if !can_trace() {
        return;
    }
    if Command::new("readelf").arg("--version").output().is_err() {
        skip("readelf and nm are not installed (apt-get install binutils)");
        return;
    }
    let dir = world_readable_temp_dir("coldstart-parts-test");
    let spec = SampleSpec {
        parts: 3,
        part_kib: 1024,
        ..SampleSpec::tiny()
    };
    let app = generate_and_build(&spec, dir.path()).expect("generate and build");
    let truth = &app.ground_truth;
    let db = dir.path().join("parts.db");
    let mut trace = coldstart();
    trace.args([
        "trace",
        "--read-ahead-kb",
        "0",
        "--ready-regex",
        "^READY$",
        "-o",
    ]);
    trace.arg(&db);
    // Only the parts are made cold: the other tests' files stay cached.
    for part in &app.parts {
        trace.arg("--evict").arg(part);
    }
    run_ok(trace.arg("--").arg(&app.executable));
    let report: Value = serde_json::from_str(&stdout(
        coldstart()
            .arg("report")
            .arg(&db)
            .args(["--json", "--pages", "--top", "all"]),
    ))
    .expect("report JSON");
    let files = report["files"].as_array().expect("files");
    let page = 4096;
    for (part, path) in truth.parts.iter().zip(&app.parts) {
        let file = files
            .iter()
            .find(|f| f["path"] == path.to_str().unwrap())
            .unwrap_or_else(|| panic!("{path:?} not in the report"));
        let read = pages_of(&file["pages"]["read"]);
        for (section, symbol, pages) in [
            (PartSection::Text, &part.code_symbol, part.text_pages),
            (PartSection::Rodata, &part.table_symbol, part.rodata_pages),
        ] {
            let first = file_offset(path, symbol_address(path, symbol)) / page;
            let expected: BTreeSet<u64> = part
                .touches
                .iter()
                .filter(|t| t.section == section)
                .flat_map(|t| {
                    first + u64::from(t.first_page)..first + u64::from(t.first_page + t.pages)
                })
                .collect();
            let within: BTreeSet<u64> = read
                .range(first..first + u64::from(pages))
                .copied()
                .collect();
            assert_eq!(within, expected, "{path:?} {symbol}");
        }
    }
}
