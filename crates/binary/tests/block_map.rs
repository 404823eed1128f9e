//! The basic-block address map reader against LLVM's own: small C programs
//! built here with clang-19 -fbasic-block-address-map, read by
//! coldstart_binary::block_map and by llvm-readobj-19 --bb-addr-map, must
//! agree on every function and block; names agree with nm, file offsets
//! with readelf's section table. Then maps cut short or corrupted by hand
//! must give errors naming the file and the problem.

mod common;

use coldstart_binary::block_map::{BlockMap, read_block_map, read_block_map_path};
use object::{Object, ObjectSection};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

const CLANG: &str = "clang-19";
const READOBJ: &str = "llvm-readobj-19";
const OBJCOPY: &str = "llvm-objcopy-19";
const MAP: &str = ".llvm_bb_addr_map";
const BB_ADDR_MAP: &[&str] = &["-O2", "-fbasic-block-address-map"];
/// The profile-guided fields of the map, from static estimates: no
/// profile run needed.
const PGO_FIELDS: &str = "-pgo-analysis-map=func-entry-count,bb-freq,br-prob";

/// Every kind of block ending LLVM records, and three names for one function.
const ENDINGS_C: &str = r#"
#include <stdio.h>

__attribute__((noinline)) int step(int x) {
  if (x > 3)
    return x * 2;
  return x + 1;
}

/* Three names for step: two global, one weak. */
int step_alias(int x) __attribute__((alias("step")));
int step_weak(int x) __attribute__((weak, alias("step")));

/* A tail call: ends in a jump to step. */
__attribute__((noinline)) int forward(int x) { return step(x + 1); }

/* An indirect branch: a computed goto. */
__attribute__((noinline)) int dispatch(int op) {
  static void *targets[] = {&&add, &&sub, &&mul};
  int acc = op;
  goto *targets[op % 3];
add:
  return acc + 7;
sub:
  return acc - 3;
mul:
  return acc * 5;
}

int (*volatile hook)(int) = step;

/* A landing pad: the cleanup runs if hook unwinds (-fexceptions). */
static void release(int *token) {
  if (*token)
    puts("release");
}
__attribute__((noinline)) int guarded(int x) {
  int token __attribute__((cleanup(release))) = x;
  return hook(x);
}

static int sum(int n) {
  int s = 0;
  for (int i = 0; i < n; i++)
    s += step(i);
  return s;
}

int main(int argc, char **argv) {
  (void)argv;
  return (sum(argc) + forward(argc) + dispatch(argc) + guarded(argc)) & 1;
}
"#;

/// A function whose unlikely path the cluster file below leaves out of its
/// section, so clang moves it to `work.cold`: a function of two ranges.
const SPLIT_C: &str = r#"
#include <stdio.h>
#include <stdlib.h>

__attribute__((noinline)) int work(int x) {
  if (__builtin_expect(x < 0, 0)) {
    fprintf(stderr, "negative %d\n", x);
    abort();
  }
  int s = 0;
  for (int i = 0; i < x; i++)
    s += i * x;
  return s;
}

int main(int argc, char **argv) {
  (void)argv;
  return work(argc) & 1;
}
"#;

/// Blocks 0, 1 and 2 of work (the entry, the loop's preheader and the
/// return) in its section; the rest go to work.cold.
const SPLIT_CLUSTERS: &str = "v1\nf work\nc 0 1 2\n";

/// No libc: builds for any target clang has, linked by lld.
const BARE_C: &str = r#"
__attribute__((noinline)) int pick(int x) { return x > 2 ? x * 3 : x - 1; }
void _start(void) {
  volatile int v = pick(5);
  (void)v;
  for (;;) {
  }
}
"#;

/// clang-19 and llvm-readobj-19, or false after saying which is missing.
fn have_llvm() -> bool {
    for tool in [CLANG, READOBJ] {
        if !runs(tool) {
            common::skip(&format!(
                "{tool} not found (apt-get install clang-19 llvm-19)"
            ));
            return false;
        }
    }
    true
}

fn runs(tool: &str) -> bool {
    Command::new(tool)
        .arg("--version")
        .output()
        .is_ok_and(|out| out.status.success())
}

/// Compiles `source` in `dir` with clang-19 and `args`; the output path.
fn build(dir: &Path, name: &str, source: &str, args: &[&str]) -> PathBuf {
    let c = dir.join(format!("{name}.c"));
    std::fs::write(&c, source).expect("write the C source");
    let out = dir.join(name);
    let result = Command::new(CLANG)
        .args(args)
        .arg(&c)
        .arg("-o")
        .arg(&out)
        .output()
        .expect("clang-19 runs");
    assert!(
        result.status.success(),
        "{CLANG} {args:?} {name}.c failed:\n{}",
        String::from_utf8_lossy(&result.stderr)
    );
    out
}

fn read(path: &Path) -> BlockMap {
    read_block_map_path(path)
        .unwrap_or_else(|err| panic!("{err}"))
        .unwrap_or_else(|| panic!("{}: no basic-block map", path.display()))
}

/// A block as both readers can state it: ID, address, size and the five
/// flags in LLVM's order.
type ExpectedBlock = (u32, u64, u64, [bool; 5]);
/// A function: its address and each range's base and blocks.
type ExpectedFunction = (u64, Vec<(u64, Vec<ExpectedBlock>)>);

const FLAG_NAMES: [&str; 5] = [
    "HasReturn",
    "HasTailCall",
    "IsEHPad",
    "CanFallThrough",
    "HasIndirectBranch",
];

fn number(value: &Value, key: &str) -> u64 {
    value[key]
        .as_u64()
        .unwrap_or_else(|| panic!("llvm-readobj JSON: no number {key} in {value}"))
}

/// What llvm-readobj-19 --bb-addr-map reads.
fn readobj(path: &Path) -> Vec<ExpectedFunction> {
    let out = Command::new(READOBJ)
        .args(["--bb-addr-map", "--elf-output-style=JSON"])
        .arg(path)
        .output()
        .expect("llvm-readobj-19 runs");
    assert!(out.status.success(), "{READOBJ} {} failed", path.display());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("unable to"),
        "{READOBJ} could not read the map of {}: {stderr}",
        path.display()
    );
    let json: Value = serde_json::from_slice(&out.stdout).expect("llvm-readobj JSON");
    let functions = json[0]["BBAddrMap"].as_array().expect("a BBAddrMap array");
    functions
        .iter()
        .map(|f| {
            let f = &f["Function"];
            let ranges = f["BB Ranges"].as_array().expect("BB Ranges");
            let ranges = ranges
                .iter()
                .map(|r| {
                    let base = number(r, "Base Address");
                    let blocks = r["BB Entries"].as_array().expect("BB Entries");
                    let blocks = blocks
                        .iter()
                        .map(|b| {
                            let id = u32::try_from(number(b, "ID")).expect("32-bit ID");
                            // LLVM's "Offset" is from the range's base.
                            let address = base + number(b, "Offset");
                            let flags = FLAG_NAMES.map(|name| b[name].as_bool().expect(name));
                            (id, address, number(b, "Size"), flags)
                        })
                        .collect();
                    (base, blocks)
                })
                .collect();
            (number(f, "At"), ranges)
        })
        .collect()
}

fn ours(map: &BlockMap) -> Vec<ExpectedFunction> {
    map.functions
        .iter()
        .map(|f| {
            let ranges = f
                .ranges
                .iter()
                .map(|r| {
                    let blocks = r
                        .blocks
                        .iter()
                        .map(|b| {
                            let flags = [
                                b.flags.has_return,
                                b.flags.has_tail_call,
                                b.flags.is_eh_pad,
                                b.flags.can_fall_through,
                                b.flags.has_indirect_branch,
                            ];
                            (b.id, b.address, b.size, flags)
                        })
                        .collect();
                    (r.base, blocks)
                })
                .collect();
            (f.address, ranges)
        })
        .collect()
}

/// FUNC symbols by address as nm lists them (the dynamic table with
/// `dynamic`), ordered the way MappedFunction::names promises: global,
/// unique, weak, local, then by name.
fn nm_functions(path: &Path, dynamic: bool) -> Vec<(u64, Vec<String>)> {
    let mut command = Command::new("nm");
    command.args(["-f", "sysv", "--defined-only"]);
    if dynamic {
        command.arg("--dynamic");
    }
    let out = command
        .arg(path)
        .env("LC_ALL", "C")
        .output()
        .expect("nm runs (apt-get install binutils)");
    assert!(out.status.success(), "nm {}", path.display());
    let text = String::from_utf8_lossy(&out.stdout);
    let mut symbols: Vec<(u64, u8, String)> = Vec::new();
    for line in text.lines() {
        let fields: Vec<&str> = line.split('|').map(str::trim).collect();
        if fields.len() != 7 || fields[3] != "FUNC" || fields[1].is_empty() {
            continue;
        }
        let value = u64::from_str_radix(fields[1], 16).expect("nm value in hex");
        let class = fields[2].chars().next().expect("nm class letter");
        let rank = match class {
            'u' => 1,
            'W' => 2,
            c if c.is_ascii_lowercase() => 3,
            _ => 0,
        };
        symbols.push((value, rank, fields[0].to_string()));
    }
    symbols.sort();
    let mut out: Vec<(u64, Vec<String>)> = Vec::new();
    for (value, _, name) in symbols {
        match out.last_mut() {
            Some((last, names)) if *last == value => names.push(name),
            _ => out.push((value, vec![name])),
        }
    }
    out
}

/// Our map equals llvm-readobj's; every block's file offset is where
/// readelf's section table puts its address; names equal nm's; block_at
/// finds every block. Returns the map for further checks.
fn assert_matches_llvm(path: &Path) -> BlockMap {
    let map = read(path);
    assert_eq!(ours(&map), readobj(path), "{}", path.display());
    assert!(!map.functions.is_empty());
    assert_eq!(
        map.block_count(),
        map.functions
            .iter()
            .flat_map(|f| &f.ranges)
            .map(|r| r.blocks.len())
            .sum::<usize>()
    );

    let sections = common::sections(path);
    for (index, function) in map.functions.iter().enumerate() {
        for block in function.ranges.iter().flat_map(|r| &r.blocks) {
            let code = sections
                .iter()
                .find(|s| {
                    s.flags.contains('X')
                        && block.address >= s.address
                        && block.address + block.size <= s.address + s.size
                })
                .unwrap_or_else(|| panic!("no code section holds block {block:?}"));
            assert_eq!(
                block.offset,
                code.offset + (block.address - code.address),
                "{block:?}"
            );
            if block.size > 0 {
                assert_eq!(map.block_at(block.address), Some((index, block)));
            }
        }
        assert_eq!(map.block_at(function.address).map(|(i, _)| i), Some(index));
    }

    let has_symtab = sections.iter().any(|s| s.name == ".symtab");
    let nm = nm_functions(path, !has_symtab);
    for function in &map.functions {
        let expected = nm
            .iter()
            .find(|(address, _)| *address == function.address)
            .map(|(_, names)| names.clone())
            .unwrap_or_default();
        assert_eq!(function.names, expected, "0x{:x}", function.address);
    }
    map
}

fn function<'a>(map: &'a BlockMap, name: &str) -> &'a coldstart_binary::block_map::MappedFunction {
    map.functions
        .iter()
        .find(|f| f.names.iter().any(|n| n == name))
        .unwrap_or_else(|| panic!("no function named {name}"))
}

/// Offset in the file and size of the map section, and where its section
/// header's sh_offset and sh_size fields are (ELF64 little-endian).
struct MapSection {
    offset: usize,
    size: usize,
    header: usize,
}

fn map_section(bytes: &[u8]) -> MapSection {
    let file = object::File::parse(bytes).expect("ELF");
    let section = file.section_by_name(MAP).expect("a map section");
    let (offset, size) = section.file_range().expect("map bytes in the file");
    let shoff = u64::from_le_bytes(bytes[0x28..0x30].try_into().unwrap());
    let shentsize = u16::from_le_bytes(bytes[0x3a..0x3c].try_into().unwrap());
    MapSection {
        offset: offset as usize,
        size: size as usize,
        header: shoff as usize + section.index().0 * usize::from(shentsize),
    }
}

/// `bytes` with the map section's contents replaced by `map`, appended at
/// the end of the file.
fn with_map(bytes: &[u8], map: &[u8]) -> Vec<u8> {
    let section = map_section(bytes);
    let mut out = bytes.to_vec();
    let offset = out.len() as u64;
    out.extend_from_slice(map);
    out[section.header + 24..section.header + 32].copy_from_slice(&offset.to_le_bytes());
    out[section.header + 32..section.header + 40]
        .copy_from_slice(&(map.len() as u64).to_le_bytes());
    out
}

fn uleb(mut value: u64, out: &mut Vec<u8>) {
    loop {
        let byte = (value & 0x7f) as u8;
        value >>= 7;
        if value == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

/// `map` written back in version 1: no IDs, no features, one range each.
fn encode_version_1(map: &BlockMap) -> Vec<u8> {
    let mut out = Vec::new();
    for function in &map.functions {
        let [range] = function.ranges.as_slice() else {
            panic!("version 1 has one range per function");
        };
        out.extend_from_slice(&[1, 0]);
        out.extend_from_slice(&range.base.to_le_bytes());
        uleb(range.blocks.len() as u64, &mut out);
        let mut end = range.base;
        for block in &range.blocks {
            let f = block.flags;
            let metadata = u64::from(f.has_return)
                | u64::from(f.has_tail_call) << 1
                | u64::from(f.is_eh_pad) << 2
                | u64::from(f.can_fall_through) << 3
                | u64::from(f.has_indirect_branch) << 4;
            for value in [block.address - end, block.size, metadata] {
                uleb(value, &mut out);
            }
            end = block.address + block.size;
        }
    }
    out
}

fn error_of(label: &str, bytes: &[u8]) -> String {
    let err = read_block_map(Path::new(label), bytes).expect_err("refused");
    let text = err.to_string();
    assert!(text.starts_with(&format!("{label}: ")), "{text}");
    text
}

/// The PIE of ENDINGS_C, built once per test that needs it.
fn endings_pie(dir: &Path, extra: &[&str]) -> PathBuf {
    let mut args = BB_ADDR_MAP.to_vec();
    args.extend(["-fexceptions", "-fPIE", "-pie"]);
    args.extend(extra);
    build(dir, "endings", ENDINGS_C, &args)
}

#[test]
fn pie_matches_llvm_readobj() {
    if !have_llvm() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = endings_pie(dir.path(), &[]);
    let map = assert_matches_llvm(&path);
    assert_eq!(map.version, 2);
    assert_eq!(
        function(&map, "step").names,
        ["step", "step_alias", "step_weak"]
    );
    // Every ending occurs at least once, so each flag was compared set.
    let blocks: Vec<_> = map
        .functions
        .iter()
        .flat_map(|f| &f.ranges)
        .flat_map(|r| &r.blocks)
        .collect();
    assert!(blocks.iter().any(|b| b.flags.has_return));
    assert!(blocks.iter().any(|b| b.flags.has_tail_call));
    assert!(blocks.iter().any(|b| b.flags.is_eh_pad));
    assert!(blocks.iter().any(|b| b.flags.can_fall_through));
    assert!(blocks.iter().any(|b| b.flags.has_indirect_branch));
    // Alignment padding between blocks: a start past the previous end.
    assert!(
        map.functions.iter().flat_map(|f| &f.ranges).any(|r| r
            .blocks
            .windows(2)
            .any(|w| w[1].address > w[0].address + w[0].size)),
        "no padding between blocks: the relative starts were not tested"
    );
}

#[test]
fn non_pie_executable_matches_llvm_readobj() {
    if !have_llvm() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut args = BB_ADDR_MAP.to_vec();
    args.extend(["-fexceptions", "-fno-pie", "-no-pie"]);
    let path = build(dir.path(), "endings", ENDINGS_C, &args);
    let map = assert_matches_llvm(&path);
    assert!(function(&map, "main").address >= 0x40_0000);
}

#[test]
fn shared_object_matches_llvm_readobj() {
    if !have_llvm() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut args = BB_ADDR_MAP.to_vec();
    args.extend(["-fexceptions", "-fPIC", "-shared", "-fuse-ld=lld"]);
    let path = build(dir.path(), "libendings.so", ENDINGS_C, &args);
    let map = assert_matches_llvm(&path);
    assert!(map.functions.iter().all(|f| !f.names.is_empty()));

    // Stripped, only the dynamic symbols name functions.
    let stripped = dir.path().join("libendings-stripped.so");
    let status = Command::new("strip")
        .arg("-o")
        .arg(&stripped)
        .arg(&path)
        .status()
        .expect("strip runs (apt-get install binutils)");
    assert!(status.success());
    let map = assert_matches_llvm(&stripped);
    assert_eq!(
        function(&map, "step").names,
        ["step", "step_alias", "step_weak"]
    );
}

#[test]
fn split_function_has_a_range_per_section() {
    if !have_llvm() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let clusters = dir.path().join("clusters.txt");
    std::fs::write(&clusters, SPLIT_CLUSTERS).unwrap();
    let list = format!("-fbasic-block-sections=list={}", clusters.display());
    let mut args = BB_ADDR_MAP.to_vec();
    args.extend(["-ffunction-sections", &list, "-mllvm", PGO_FIELDS]);
    let path = build(dir.path(), "split", SPLIT_C, &args);

    // All four feature bits: ranges and the three profile fields.
    let bytes = std::fs::read(&path).unwrap();
    let section = map_section(&bytes);
    assert_eq!(bytes[section.offset..][..2], [2, 0x0f]);

    let map = assert_matches_llvm(&path);
    let work = function(&map, "work");
    assert_eq!(work.ranges.len(), 2);
    assert_eq!(work.address, work.ranges[0].base);
    let cold = nm_local(&path, "work.cold");
    assert_eq!(work.ranges[1].base, cold);
    assert_eq!(function(&map, "main").ranges.len(), 1);
}

/// The address of symbol `name` as `nm` lists it, whatever its type.
fn nm_local(path: &Path, name: &str) -> u64 {
    let out = Command::new("nm").arg(path).output().expect("nm runs");
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|line| {
            let mut fields = line.split_whitespace();
            let value = fields.next()?;
            let _class = fields.next()?;
            (fields.next()? == name).then(|| u64::from_str_radix(value, 16).expect("hex"))
        })
        .unwrap_or_else(|| panic!("nm lists no {name}"))
}

#[test]
fn profile_fields_are_read_past() {
    if !have_llvm() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = endings_pie(dir.path(), &["-mllvm", PGO_FIELDS]);
    let bytes = std::fs::read(&path).unwrap();
    let section = map_section(&bytes);
    assert_eq!(bytes[section.offset..][..2], [2, 0x07]);
    let map = assert_matches_llvm(&path);
    assert!(map.functions.len() >= 5);
}

#[test]
fn version_1_map_matches_llvm_readobj() {
    if !have_llvm() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = endings_pie(dir.path(), &[]);
    let v2 = read(&path);
    let bytes = std::fs::read(&path).unwrap();
    let v1_path = dir.path().join("endings-v1");
    std::fs::write(&v1_path, with_map(&bytes, &encode_version_1(&v2))).unwrap();
    let v1 = assert_matches_llvm(&v1_path);
    assert_eq!(v1.version, 1);
    for (old, new) in v2.functions.iter().zip(&v1.functions) {
        assert_eq!(old.names, new.names);
        for (index, (a, b)) in old.ranges[0]
            .blocks
            .iter()
            .zip(&new.ranges[0].blocks)
            .enumerate()
        {
            // Version 1 has no IDs: a block's is its index.
            assert_eq!(b.id as usize, index);
            assert_eq!(
                (a.address, a.offset, a.size, a.flags),
                (b.address, b.offset, b.size, b.flags)
            );
        }
    }
}

/// A bare program for another target, linked by lld; None after a skip
/// when this clang cannot build it.
fn bare(dir: &Path, target: &str) -> Option<PathBuf> {
    let out = dir.join(format!("bare-{target}"));
    let c = dir.join("bare.c");
    std::fs::write(&c, BARE_C).unwrap();
    let result = Command::new(CLANG)
        .args(BB_ADDR_MAP)
        .args([
            &format!("--target={target}"),
            "-nostdlib",
            "-static",
            "-fuse-ld=lld",
        ])
        .arg(&c)
        .arg("-o")
        .arg(&out)
        .output()
        .expect("clang-19 runs");
    if !result.status.success() {
        common::skip(&format!(
            "{CLANG} cannot build for {target} with lld (apt-get install lld-19): {}",
            String::from_utf8_lossy(&result.stderr).trim()
        ));
        return None;
    }
    Some(out)
}

#[test]
fn thirty_two_bit_map_matches_llvm_readobj() {
    if !have_llvm() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let Some(path) = bare(dir.path(), "i386-linux-gnu") else {
        return;
    };
    let map = assert_matches_llvm(&path);
    assert_eq!(function(&map, "pick").names, ["pick"]);
}

#[test]
fn big_endian_map_matches_llvm_readobj() {
    if !have_llvm() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let Some(path) = bare(dir.path(), "aarch64_be-linux-gnu") else {
        return;
    };
    let map = assert_matches_llvm(&path);
    assert_eq!(function(&map, "pick").names, ["pick"]);
}

#[test]
fn build_without_the_flag_has_no_map() {
    if !have_llvm() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = build(dir.path(), "plain", SPLIT_C, &["-O2"]);
    assert_eq!(read_block_map_path(&path).unwrap(), None);
}

#[test]
fn relocatable_object_is_refused() {
    if !have_llvm() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut args = BB_ADDR_MAP.to_vec();
    args.push("-c");
    let path = build(dir.path(), "endings.o", ENDINGS_C, &args);
    let err = read_block_map_path(&path).expect_err("ET_REL refused");
    let text = err.to_string();
    assert!(text.starts_with(&format!("{}: ", path.display())), "{text}");
    assert!(text.contains("relocatable object (ET_REL)"), "{text}");
}

#[test]
fn truncated_map_names_the_file_and_the_field() {
    if !have_llvm() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = endings_pie(dir.path(), &[]);
    let bytes = std::fs::read(&path).unwrap();
    let section = map_section(&bytes);
    let map = &bytes[section.offset..][..section.size];
    let text = error_of("endings", &with_map(&bytes, &map[..map.len() - 2]));
    assert!(
        text.contains("malformed ELF file: .llvm_bb_addr_map (section ")
            && text.contains("truncated: the section ends at byte"),
        "{text}"
    );
}

#[test]
fn unknown_version_is_refused_like_llvm_does() {
    if !have_llvm() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = endings_pie(dir.path(), &[]);
    let bytes = std::fs::read(&path).unwrap();
    let section = map_section(&bytes);
    let mut corrupt = bytes.clone();
    corrupt[section.offset] = 3;
    let text = error_of("endings", &corrupt);
    assert!(
        text.contains("not supported")
            && text.contains("function entry 0 at byte 0x0: map version 3"),
        "{text}"
    );
    // LLVM 19 refuses it too.
    let corrupt_path = dir.path().join("endings-v3");
    std::fs::write(&corrupt_path, &corrupt).unwrap();
    let out = Command::new(READOBJ)
        .arg("--bb-addr-map")
        .arg(&corrupt_path)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("unsupported SHT_LLVM_BB_ADDR_MAP version: 3"),
        "{stderr}"
    );

    // A feature bit LLVM 19 does not know (a newer LLVM's map).
    let mut corrupt = bytes.clone();
    corrupt[section.offset + 1] = 0x10;
    let text = error_of("endings", &corrupt);
    assert!(text.contains("feature bits 0x10"), "{text}");
}

#[test]
fn block_outside_the_loaded_segments_is_refused() {
    if !have_llvm() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = endings_pie(dir.path(), &[]);
    let mut bytes = std::fs::read(&path).unwrap();
    let section = map_section(&bytes);
    // The first entry's address, after its version and feature bytes.
    bytes[section.offset + 2..][..8].copy_from_slice(&0x7fff_0000_0000u64.to_le_bytes());
    let text = error_of("endings", &bytes);
    assert!(
        text.contains("of the function at 0x7fff00000000")
            && text.contains("is outside the file's loaded segments"),
        "{text}"
    );
}

#[test]
fn compressed_map_is_refused() {
    if !have_llvm() {
        return;
    }
    if !runs(OBJCOPY) {
        return common::skip(&format!("{OBJCOPY} not found (apt-get install llvm-19)"));
    }
    let dir = tempfile::tempdir().unwrap();
    let path = endings_pie(dir.path(), &[]);
    let compressed = dir.path().join("endings-compressed");
    let status = Command::new(OBJCOPY)
        .arg(format!("--compress-sections={MAP}=zlib"))
        .arg(&path)
        .arg(&compressed)
        .status()
        .unwrap();
    assert!(status.success());
    let text = error_of("endings", &std::fs::read(&compressed).unwrap());
    assert!(text.contains("is compressed (SHF_COMPRESSED)"), "{text}");
}

/// Every cut of the map and three corruptions of each of its bytes give a
/// map or an error naming the file: no panic, no hang.
#[test]
fn every_cut_and_corruption_returns_cleanly() {
    if !have_llvm() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let clusters = dir.path().join("clusters.txt");
    std::fs::write(&clusters, SPLIT_CLUSTERS).unwrap();
    let list = format!("-fbasic-block-sections=list={}", clusters.display());
    let mut args = BB_ADDR_MAP.to_vec();
    args.extend(["-ffunction-sections", &list, "-mllvm", PGO_FIELDS]);
    let path = build(dir.path(), "split", SPLIT_C, &args);
    let bytes = std::fs::read(&path).unwrap();
    let section = map_section(&bytes);
    let label = Path::new("split");
    let check = |candidate: &[u8]| {
        if let Err(err) = read_block_map(label, candidate) {
            assert!(err.to_string().starts_with("split: "), "{err}");
        }
    };
    for cut in 0..section.size {
        let mut cut_short = bytes.clone();
        cut_short[section.header + 32..][..8].copy_from_slice(&(cut as u64).to_le_bytes());
        check(&cut_short);
    }
    for at in section.offset..section.offset + section.size {
        for value in [0x00, 0xff, bytes[at] ^ 0x80] {
            let mut corrupt = bytes.clone();
            corrupt[at] = value;
            check(&corrupt);
        }
    }
}

#[test]
fn fuzz_regression_inputs_return_cleanly() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz-regressions");
    for entry in std::fs::read_dir(&dir).expect("regression directory") {
        let bytes = std::fs::read(entry.expect("entry").path()).expect("read input");
        if let Err(err) = read_block_map(Path::new("regression.bin"), &bytes) {
            assert!(err.to_string().starts_with("regression.bin: "), "{err}");
        }
    }
}

#[test]
fn other_files_are_refused_by_name() {
    let text = error_of("notes.txt", b"hello, world");
    assert!(text.contains("not an ELF, PE or Mach-O file"), "{text}");
    let text = error_of("short.elf", b"\x7fELF\x02");
    assert!(text.contains("malformed ELF file"), "{text}");
    let missing = Path::new("/nonexistent/coldstart/block-map");
    let err = read_block_map_path(missing).expect_err("no such file");
    assert!(
        err.to_string()
            .starts_with("/nonexistent/coldstart/block-map: ")
    );
}
