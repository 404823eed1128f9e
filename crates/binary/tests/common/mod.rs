//! Test support: readelf as the independent oracle, and the CI switch that
//! turns skipped checks into failures.

#![allow(dead_code)]

pub mod fixture;

use coldstart_binary::{InspectOptions, Inspection, inspect_path};
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

/// A check that cannot run here: SKIPPED, or a failure on CI.
#[allow(unused_imports)] // not every test binary skips
pub use coldstart_testkit::skip;

pub fn readelf(args: &[&str], file: &Path) -> String {
    let out = Command::new("readelf")
        .args(args)
        .arg(file)
        .env("LC_ALL", "C")
        .output()
        .expect("readelf runs (apt-get install binutils)");
    assert!(
        out.status.success(),
        "readelf {args:?} {} failed",
        file.display()
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn hex(text: &str) -> u64 {
    u64::from_str_radix(text.trim_start_matches("0x"), 16)
        .unwrap_or_else(|_| panic!("not hex: {text:?}"))
}

/// What `readelf -W -r` says.
#[derive(Debug, Default)]
pub struct ReadelfRelocs {
    /// Section name -> entry count as readelf states it.
    pub sections: BTreeMap<String, u64>,
    /// Type name -> count over all non-RELR sections.
    pub by_type: BTreeMap<String, u64>,
    /// Addresses listed under RELR sections.
    pub relr_offsets: Vec<u64>,
}

pub fn relocations(file: &Path) -> ReadelfRelocs {
    let text = readelf(&["-W", "-r"], file);
    let mut out = ReadelfRelocs::default();
    let mut in_relr = false;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("Relocation section '") {
            let (name, tail) = rest.split_once('\'').expect("section name");
            let count: u64 = tail
                .split_whitespace()
                .skip_while(|w| *w != "contains")
                .nth(1)
                .expect("entry count")
                .parse()
                .expect("number");
            out.sections.insert(name.to_string(), count);
            in_relr = name.starts_with(".relr");
            continue;
        }
        let fields: Vec<&str> = line.split_whitespace().collect();
        if in_relr {
            if fields.len() == 1 && fields[0].chars().all(|c| c.is_ascii_hexdigit()) {
                out.relr_offsets.push(hex(fields[0]));
            }
        } else if fields.len() >= 3
            && fields[0].chars().all(|c| c.is_ascii_hexdigit())
            && fields[2].starts_with("R_")
        {
            *out.by_type.entry(fields[2].to_string()).or_default() += 1;
        }
    }
    out
}

/// One row of `readelf -W -S`.
#[derive(Debug, Clone)]
pub struct ReadelfSection {
    pub name: String,
    pub kind: String,
    pub address: u64,
    pub offset: u64,
    pub size: u64,
    /// Flag letters ("AX", "WA"); empty when the section has none.
    pub flags: String,
}

pub fn sections(file: &Path) -> Vec<ReadelfSection> {
    let text = readelf(&["-W", "-S"], file);
    let mut out = Vec::new();
    for line in text.lines() {
        let Some(rest) = line.trim_start().strip_prefix('[') else {
            continue;
        };
        let Some((index, rest)) = rest.split_once(']') else {
            continue;
        };
        if index.trim() == "Nr" || index.trim() == "0" {
            continue;
        }
        let fields: Vec<&str> = rest.split_whitespace().collect();
        // A section with an empty name shifts the columns; none here has one.
        out.push(ReadelfSection {
            name: fields[0].to_string(),
            kind: fields[1].to_string(),
            address: hex(fields[2]),
            offset: hex(fields[3]),
            size: hex(fields[4]),
            // Name, type, address, offset, size, ES, [flags], Lk, Inf, Al.
            flags: if fields.len() == 10 {
                fields[6].to_string()
            } else {
                String::new()
            },
        });
    }
    out
}

/// One row of `readelf -W -l`'s program headers.
#[derive(Debug, Clone)]
pub struct ReadelfSegment {
    pub kind: String,
    pub offset: u64,
    pub address: u64,
    pub file_size: u64,
    pub memory_size: u64,
}

pub fn segments(file: &Path) -> Vec<ReadelfSegment> {
    let text = readelf(&["-W", "-l"], file);
    let mut out = Vec::new();
    let mut in_table = false;
    for line in text.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.first() == Some(&"Type") {
            in_table = true;
            continue;
        }
        if !in_table {
            continue;
        }
        if fields.is_empty() || line.contains("Section to Segment") {
            break;
        }
        if fields[0].starts_with('[') {
            continue; // "[Requesting program interpreter: ...]"
        }
        out.push(ReadelfSegment {
            kind: fields[0].to_string(),
            offset: hex(fields[1]),
            address: hex(fields[2]),
            file_size: hex(fields[4]),
            memory_size: hex(fields[5]),
        });
    }
    out
}

/// `readelf -W -d`: (tag name, value text) pairs and the stated entry count.
pub fn dynamic(file: &Path) -> (Vec<(String, String)>, Option<u64>) {
    let text = readelf(&["-W", "-d"], file);
    let mut entries = Vec::new();
    let mut count = None;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("Dynamic section at offset ") {
            count = rest
                .split_whitespace()
                .skip_while(|w| *w != "contains")
                .nth(1)
                .and_then(|n| n.parse().ok());
            continue;
        }
        let trimmed = line.trim_start();
        if !trimmed.starts_with("0x") {
            continue;
        }
        let Some(open) = trimmed.find('(') else {
            continue;
        };
        let Some(close) = trimmed.find(')') else {
            continue;
        };
        let tag = trimmed[open + 1..close].to_string();
        let value = trimmed[close + 1..].trim().to_string();
        entries.push((tag, value));
    }
    (entries, count)
}

/// The bracketed value readelf prints for NEEDED/SONAME/RUNPATH.
pub fn bracketed(value: &str) -> String {
    let start = value.find('[').expect("[");
    let end = value.rfind(']').expect("]");
    value[start + 1..end].to_string()
}

/// Entries of .dynsym as `readelf --dyn-syms` states them.
pub fn dynsym_count(file: &Path) -> u64 {
    let text = readelf(&["-W", "--dyn-syms"], file);
    text.lines()
        .find_map(|l| {
            let rest = l.strip_prefix("Symbol table '.dynsym' contains ")?;
            rest.split_whitespace().next()?.parse().ok()
        })
        .unwrap_or(0)
}

pub fn build_id(file: &Path) -> Option<String> {
    let text = readelf(&["-W", "-n"], file);
    text.lines().find_map(|l| {
        let (_, id) = l.split_once("Build ID: ")?;
        Some(id.trim().to_string())
    })
}

pub fn needs_version(file: &Path, version: &str) -> bool {
    let text = readelf(&["-W", "-V"], file);
    let Some(start) = text.find("Version needs section") else {
        return false;
    };
    text[start..].contains(&format!("Name: {version}"))
}

/// Inspects bytes labelled `name`; a failure names the input.
pub fn inspect_named(name: &str, bytes: &[u8]) -> Inspection {
    coldstart_binary::inspect_bytes(Path::new(name), bytes, &InspectOptions::default())
        .unwrap_or_else(|err| panic!("{name}: {err}"))
}

/// Bytes that sections and regions claim together; equal to the file size
/// when every byte is accounted for exactly once.
pub fn accounted(inspection: &Inspection) -> u64 {
    inspection.sections.iter().map(|s| s.file_size).sum::<u64>()
        + inspection.regions.iter().map(|r| r.size).sum::<u64>()
}

fn inspect(path: &Path) -> Inspection {
    inspect_path(path, &InspectOptions::default())
        .unwrap_or_else(|e| panic!("inspect {}: {e}", path.display()))
}

/// Every count inspect shares with readelf must be equal.
pub fn assert_matches_readelf(path: &Path) -> Inspection {
    let ins = inspect(path);
    let what = path.display();

    let oracle = relocations(path);
    assert_eq!(
        ins.relocations.by_type, oracle.by_type,
        "{what}: relocations by type"
    );
    assert_eq!(
        ins.relocations.relr_offsets, oracle.relr_offsets,
        "{what}: RELR offsets"
    );
    for table in &ins.relocations.sections {
        assert_eq!(
            Some(&table.entries),
            oracle.sections.get(&table.name),
            "{what}: entries of {}",
            table.name
        );
    }
    assert_eq!(
        ins.relocations.sections.len(),
        oracle.sections.len(),
        "{what}: relocation tables"
    );
    let loader_total: u64 = oracle.by_type.values().sum::<u64>() + oracle.relr_offsets.len() as u64;
    assert_eq!(
        ins.relocations.total, loader_total,
        "{what}: total relocations"
    );

    let sections = sections(path);
    assert_eq!(ins.sections.len(), sections.len(), "{what}: section count");
    for (mine, theirs) in ins.sections.iter().zip(&sections) {
        assert_eq!(mine.name, theirs.name, "{what}: section order");
        assert_eq!(mine.kind, theirs.kind, "{what}: type of {}", mine.name);
        assert_eq!(
            mine.offset, theirs.offset,
            "{what}: offset of {}",
            mine.name
        );
        assert_eq!(
            mine.address, theirs.address,
            "{what}: address of {}",
            mine.name
        );
        let size = mine.file_size.max(mine.memory_size);
        if theirs.kind != "NOBITS" {
            assert_eq!(mine.file_size, theirs.size, "{what}: size of {}", mine.name);
        } else {
            assert_eq!(size, theirs.size, "{what}: size of {}", mine.name);
        }
    }
    let init_bytes = sections
        .iter()
        .filter(|s| s.kind == "INIT_ARRAY")
        .map(|s| s.size)
        .sum::<u64>();
    assert_eq!(
        ins.init_array.count,
        init_bytes / u64::from(ins.header.bits / 8),
        "{what}: init_array.count"
    );

    let segments = segments(path);
    assert_eq!(ins.segments.len(), segments.len(), "{what}: segment count");
    for (mine, theirs) in ins.segments.iter().zip(&segments) {
        assert_eq!(mine.kind, theirs.kind, "{what}: segment type");
        assert_eq!(mine.offset, theirs.offset, "{what}: segment offset");
        assert_eq!(mine.address, theirs.address, "{what}: segment address");
        assert_eq!(
            mine.file_size, theirs.file_size,
            "{what}: segment file size"
        );
        assert_eq!(
            mine.memory_size, theirs.memory_size,
            "{what}: segment memory size"
        );
    }

    let (entries, count) = dynamic(path);
    let dynamic = ins.dynamic.as_ref().expect("dynamic section");
    assert_eq!(Some(dynamic.entries), count, "{what}: dynamic entries");
    let needed: Vec<String> = entries
        .iter()
        .filter(|(tag, _)| tag == "NEEDED")
        .map(|(_, v)| bracketed(v))
        .collect();
    assert_eq!(dynamic.needed, needed, "{what}: DT_NEEDED");
    let soname = entries
        .iter()
        .find(|(tag, _)| tag == "SONAME")
        .map(|(_, v)| bracketed(v));
    assert_eq!(dynamic.soname, soname, "{what}: soname");
    let runpath: Vec<String> = entries
        .iter()
        .filter(|(tag, _)| tag == "RUNPATH")
        .flat_map(|(_, v)| {
            bracketed(v)
                .split(':')
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect();
    assert_eq!(dynamic.runpath, runpath, "{what}: runpath");
    let has = |tag: &str| entries.iter().any(|(t, _)| t == tag);
    assert_eq!(dynamic.gnu_hash, has("GNU_HASH"), "{what}: GNU hash");
    assert_eq!(dynamic.sysv_hash, has("HASH"), "{what}: SysV hash");
    assert_eq!(dynamic.relr, has("RELR"), "{what}: DT_RELR");
    assert_eq!(dynamic.textrel, has("TEXTREL"), "{what}: TEXTREL");
    assert_eq!(
        dynamic.dynamic_symbols,
        dynsym_count(path),
        "{what}: dynamic symbols"
    );
    assert_eq!(
        dynamic.relr_version_need,
        needs_version(path, "GLIBC_ABI_DT_RELR"),
        "{what}: GLIBC_ABI_DT_RELR need"
    );
    assert_eq!(ins.header.build_id, build_id(path), "{what}: build-id");
    assert_eq!(ins.size, std::fs::metadata(path).unwrap().len());
    // Every byte is accounted for.
    assert!(
        accounted(&ins) >= ins.size,
        "{what}: sections and regions cover the file"
    );
    ins
}
