//! The file-offset index against oracles outside it: section offsets and
//! sizes from `readelf -SW`, symbols from `readelf -sW` and `nm -S` moved to
//! file offsets through `readelf -lW`'s PT_LOADs, on this machine's libc,
//! the sample app (whose generator knows every function's name), a small
//! library whose aliases, overlaps and zero-filled data the test wrote, and
//! the hand-laid fixture; and malformed input that must not panic.

mod common;

use coldstart_binary::{OffsetIndex, SymbolBinding, SymbolKind, SymbolSource, SymbolSpan};
use coldstart_sample::{BuildOptions, BuiltApp, Module, SampleSpec, build, generate};
use common::fixture::{self, FUNC_A, FUNC_B, FUNC_C};
use common::{ReadelfSegment, readelf};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

fn index(path: &Path) -> OffsetIndex {
    OffsetIndex::from_path(path).unwrap_or_else(|err| panic!("index {}: {err}", path.display()))
}

fn system_libc() -> Option<PathBuf> {
    [
        "/lib/x86_64-linux-gnu",
        "/usr/lib/x86_64-linux-gnu",
        "/lib64",
    ]
    .iter()
    .map(|dir| Path::new(dir).join("libc.so.6"))
    .find(|p| p.exists())
}

fn number(text: &str) -> u64 {
    match text.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => text.parse(),
    }
    .unwrap_or_else(|_| panic!("not a number: {text:?}"))
}

/// One row of `readelf -sW`.
#[derive(Debug, Clone)]
struct ElfSymbol {
    value: u64,
    size: u64,
    kind: String,
    bind: String,
    ndx: String,
    name: String,
}

/// The rows of one symbol table (".symtab" or ".dynsym") of `readelf -sW`,
/// names without their version suffix.
fn readelf_symbols(file: &Path, table: &str) -> Vec<ElfSymbol> {
    let text = readelf(&["-W", "-s"], file);
    let mut out = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("Symbol table '") {
            current = rest.split('\'').next().unwrap_or_default().to_string();
            continue;
        }
        // Without ELFOSABI_GNU in the header readelf does not name STT_GNU_IFUNC.
        let line = line.replace("<OS specific>: 10", "IFUNC");
        let fields: Vec<&str> = line.split_whitespace().collect();
        if current != table || fields.len() < 7 || !fields[0].ends_with(':') {
            continue;
        }
        if fields[0].trim_end_matches(':').parse::<u64>().is_err() {
            continue;
        }
        let name = fields.get(7).copied().unwrap_or_default();
        out.push(ElfSymbol {
            value: number(&format!("0x{}", fields[1])),
            size: number(fields[2]),
            kind: fields[3].to_string(),
            bind: fields[4].to_string(),
            ndx: fields[6].to_string(),
            name: name.split('@').next().unwrap_or_default().to_string(),
        });
    }
    out
}

/// File offset and file-backed length of a symbol, worked out from the
/// PT_LOADs as the kernel maps them; None when no file bytes back it.
fn file_bytes(
    loads: &[ReadelfSegment],
    file_size: u64,
    value: u64,
    size: u64,
) -> Option<(u64, u64)> {
    let load = loads
        .iter()
        .filter(|s| s.kind == "LOAD")
        .find(|s| value >= s.address && value - s.address < s.file_size)?;
    let delta = value - load.address;
    let offset = load.offset + delta;
    let size = size.min(load.file_size - delta).min(file_size - offset);
    (size > 0).then_some((offset, size))
}

fn symbol_kind(readelf_type: &str) -> Option<SymbolKind> {
    match readelf_type {
        "FUNC" | "IFUNC" => Some(SymbolKind::Function),
        "OBJECT" => Some(SymbolKind::Object),
        "NOTYPE" => Some(SymbolKind::Other),
        _ => None,
    }
}

fn bind_rank(bind: &str) -> u8 {
    match bind {
        "GLOBAL" => 3,
        "UNIQUE" => 2,
        "WEAK" => 1,
        _ => 0,
    }
}

/// Sections: exactly readelf's file-backed ones, with its offsets, sizes,
/// addresses and flags, and each found by `section_at` at both ends.
fn assert_sections_match_readelf(path: &Path, index: &OffsetIndex) {
    let what = path.display();
    let mut expected: Vec<_> = common::sections(path)
        .into_iter()
        .filter(|s| s.kind != "NOBITS" && s.kind != "NULL" && s.size > 0)
        .collect();
    expected.sort_by_key(|s| (s.offset, std::cmp::Reverse(s.size)));
    let got: Vec<(&str, u64, u64, u64)> = index
        .sections()
        .iter()
        .map(|s| (s.name.as_str(), s.offset, s.size, s.address))
        .collect();
    let want: Vec<(&str, u64, u64, u64)> = expected
        .iter()
        .map(|s| (s.name.as_str(), s.offset, s.size, s.address))
        .collect();
    assert_eq!(got, want, "{what}: sections");
    for (span, theirs) in index.sections().iter().zip(&expected) {
        assert_eq!(
            (span.alloc, span.writable, span.executable),
            (
                theirs.flags.contains('A'),
                theirs.flags.contains('W'),
                theirs.flags.contains('X')
            ),
            "{what}: flags of {}",
            span.name
        );
        for byte in [span.offset, span.end() - 1] {
            let at = index.section_at(byte).map(|i| &index.sections()[i].name);
            assert_eq!(at, Some(&span.name), "{what}: section_at(0x{byte:x})");
        }
    }
}

/// Symbols: readelf's defined, sized code and data symbols, moved to file
/// offsets through readelf's PT_LOADs, one per (offset, size) with the
/// best-bound name, each found by `symbols_in` at its first byte.
fn assert_symbols_match_readelf(path: &Path, index: &OffsetIndex) {
    let what = path.display();
    let table = match index.symbol_source() {
        SymbolSource::Symtab => ".symtab",
        SymbolSource::Dynsym => ".dynsym",
        SymbolSource::None => panic!("{what}: no symbol table found"),
    };
    let loads = common::segments(path);
    let sections = common::sections(path);
    let mut read = 0u64;
    let mut not_in_file = 0u64;
    let mut groups: BTreeMap<(u64, u64), Vec<ElfSymbol>> = BTreeMap::new();
    for sym in readelf_symbols(path, table) {
        if ["UND", "ABS", "COM"].contains(&sym.ndx.as_str())
            || symbol_kind(&sym.kind).is_none()
            || sym.size == 0
        {
            continue;
        }
        read += 1;
        match file_bytes(&loads, index.file_size(), sym.value, sym.size) {
            Some(span) => groups.entry(span).or_default().push(sym),
            None => not_in_file += 1,
        }
    }
    assert!(
        !groups.is_empty(),
        "{what}: readelf lists no symbols to check"
    );
    let counts = index.symbol_counts();
    assert_eq!(counts.read, read, "{what}: symbols read");
    assert_eq!(
        counts.not_in_file, not_in_file,
        "{what}: symbols not in file"
    );
    assert_eq!(
        counts.aliases,
        read - not_in_file - groups.len() as u64,
        "{what}: aliases"
    );
    let got: BTreeSet<(u64, u64)> = index.symbols().iter().map(|s| (s.offset, s.size)).collect();
    let want: BTreeSet<(u64, u64)> = groups.keys().copied().collect();
    assert_eq!(index.symbols().len(), want.len(), "{what}: symbol count");
    assert_eq!(got, want, "{what}: symbol spans");

    for (&(offset, size), rows) in &groups {
        let found: Vec<&SymbolSpan> = index
            .symbols_in(offset, offset + 1)
            .filter(|s| s.offset == offset && s.size == size)
            .collect();
        assert_eq!(found.len(), 1, "{what}: symbols_in(0x{offset:x}) {rows:?}");
        let sym = found[0];
        let row = rows
            .iter()
            .find(|r| r.name == sym.raw_name)
            .unwrap_or_else(|| panic!("{what}: {} is none of {rows:?}", sym.raw_name));
        let best = rows.iter().map(|r| bind_rank(&r.bind)).max();
        assert_eq!(
            Some(bind_rank(&row.bind)),
            best,
            "{what}: {} kept",
            sym.raw_name
        );
        assert_eq!(
            Some(sym.kind),
            symbol_kind(&row.kind),
            "{what}: kind of {}",
            sym.raw_name
        );
        let binding = match row.bind.as_str() {
            "GLOBAL" => SymbolBinding::Global,
            "UNIQUE" => SymbolBinding::Unique,
            "WEAK" => SymbolBinding::Weak,
            _ => SymbolBinding::Local,
        };
        assert_eq!(sym.binding, binding, "{what}: binding of {}", sym.raw_name);
        let address = row.value;
        assert_eq!(sym.address, address, "{what}: address of {}", sym.raw_name);
        // The section header the symbol names is the section found for it.
        if let Ok(ndx) = row.ndx.parse::<usize>() {
            let named = &sections[ndx - 1].name;
            let found = sym.section.map(|i| &index.sections()[i].name);
            assert_eq!(found, Some(named), "{what}: section of {}", sym.raw_name);
        }
    }
}

/// The check as the task states it, with nm as the oracle: every function
/// nm lists with a size inside .text is found at its file offset.
fn assert_nm_text_functions_found(path: &Path, index: &OffsetIndex) {
    let what = path.display();
    let mut nm = Command::new("nm");
    nm.args(["--defined-only", "-S"]).env("LC_ALL", "C");
    if index.symbol_source() == SymbolSource::Dynsym {
        nm.arg("-D");
    }
    let out = nm
        .arg(path)
        .output()
        .expect("nm runs (apt-get install binutils)");
    assert!(out.status.success(), "nm {what} failed");
    let sections = common::sections(path);
    let text = sections.iter().find(|s| s.name == ".text").expect(".text");
    let loads = common::segments(path);
    let mut checked = 0;
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [address, size, letter, name, ..] = fields[..] else {
            continue;
        };
        if !["T", "t", "W", "w", "i"].contains(&letter) {
            continue;
        }
        let (address, size) = (
            number(&format!("0x{address}")),
            number(&format!("0x{size}")),
        );
        if size == 0 || address < text.address || address >= text.address + text.size {
            continue;
        }
        let (offset, size) = file_bytes(&loads, index.file_size(), address, size)
            .unwrap_or_else(|| panic!("{what}: {name} in .text is not in the file"));
        assert!(
            index
                .symbols_in(offset, offset + 1)
                .any(|s| s.offset == offset && s.size == size),
            "{what}: nm's {name} at 0x{offset:x}"
        );
        checked += 1;
    }
    assert!(checked > 0, "{what}: nm lists no functions in .text");
}

/// Range queries agree with a scan of all symbols, page by page and at
/// every symbol's last byte.
fn assert_queries_match_scan(index: &OffsetIndex) {
    let symbols = index.symbols();
    let scan = |start: u64, end: u64| -> Vec<&SymbolSpan> {
        symbols
            .iter()
            .filter(|s| s.offset < end && s.end() > start)
            .collect()
    };
    for page in (0..index.file_size()).step_by(4096) {
        let got: Vec<&SymbolSpan> = index.symbols_in(page, page + 4096).collect();
        assert_eq!(got, scan(page, page + 4096), "page 0x{page:x}");
        let sections: Vec<usize> = index.sections_in(page, page + 4096).collect();
        let want: Vec<usize> = (0..index.sections().len())
            .filter(|&i| {
                let s = &index.sections()[i];
                s.offset < page + 4096 && s.end() > page
            })
            .collect();
        assert_eq!(sections, want, "sections of page 0x{page:x}");
    }
    for s in symbols {
        let last = s.end() - 1;
        assert_eq!(
            index.symbols_in(last, last + 1).collect::<Vec<_>>(),
            scan(last, last + 1)
        );
    }
}

fn assert_matches_oracles(path: &Path) -> OffsetIndex {
    let index = index(path);
    assert_eq!(index.file_size(), std::fs::metadata(path).unwrap().len());
    assert_sections_match_readelf(path, &index);
    assert_symbols_match_readelf(path, &index);
    assert_nm_text_functions_found(path, &index);
    assert_queries_match_scan(&index);
    index
}

#[test]
fn libc_matches_readelf_and_nm() {
    let Some(path) = system_libc() else {
        return common::skip("libc.so.6 not found in the usual library directories");
    };
    let index = assert_matches_oracles(&path);
    // Debian's libc is stripped: only exported symbols have names.
    if common::sections(&path).iter().all(|s| s.kind != "SYMTAB") {
        assert_eq!(index.symbol_source(), SymbolSource::Dynsym);
    }
    let memcpy = index
        .symbols()
        .iter()
        .find(|s| s.raw_name == "memcpy")
        .expect("memcpy");
    assert_eq!(memcpy.kind, SymbolKind::Function, "memcpy is an IFUNC");
}

/// One sample app build, shared by the tests of this file.
fn sample() -> &'static (tempfile::TempDir, BuiltApp) {
    static BUILT: OnceLock<(tempfile::TempDir, BuiltApp)> = OnceLock::new();
    BUILT.get_or_init(|| {
        let dir = tempfile::tempdir().expect("temp dir");
        let spec = SampleSpec {
            translation_units: 16,
            functions: 400,
            ..SampleSpec::tiny()
        };
        let src = dir.path().join("src");
        generate(&spec, &src).expect("generate");
        let app = build(
            &src,
            &dir.path().join("out"),
            &BuildOptions::default(),
            &mut |_| {},
        )
        .expect("build");
        (dir, app)
    })
}

#[test]
fn sample_app_matches_readelf_and_nm() {
    let (_, app) = sample();
    for path in [&app.executable, &app.library] {
        let index = assert_matches_oracles(path);
        assert_eq!(
            index.symbol_source(),
            SymbolSource::Symtab,
            "{}",
            path.display()
        );
    }
}

/// Every function the generator wrote is in the module it put it in, named
/// as c++filt names it, inside .text.
#[test]
fn sample_app_functions_have_their_generated_names() {
    let (_, app) = sample();
    for (module, path) in [
        (Module::Executable, &app.executable),
        (Module::Library, &app.library),
    ] {
        let index = index(path);
        let by_raw: BTreeMap<&str, &SymbolSpan> = index
            .symbols()
            .iter()
            .map(|s| (s.raw_name.as_str(), s))
            .collect();
        let functions: Vec<_> = app
            .ground_truth
            .functions
            .iter()
            .filter(|f| f.module == module)
            .collect();
        assert!(!functions.is_empty());
        for function in functions {
            let sym = by_raw
                .get(function.symbol.as_str())
                .unwrap_or_else(|| panic!("{}: {} missing", path.display(), function.symbol));
            assert_eq!(sym.name(), function.name);
            assert_eq!(sym.kind, SymbolKind::Function);
            let section = sym.section.map(|i| index.sections()[i].name.as_str());
            assert_eq!(section, Some(".text"), "{}", function.name);
        }
    }
}

/// Aliases, nesting, zero-filled and thread-local data, an IFUNC and an
/// untyped assembly symbol, each written here so the answer is known.
const ALIASES: &str = r#"
int zeroed[64];
__thread int per_thread = 3;
int table[16] = {1, 2, 3};
int real_function(int x) { return x * 3 + table[x & 15] + zeroed[x & 63] + per_thread; }
int global_alias(int) __attribute__((alias("real_function")));
int weak_alias(int) __attribute__((weak, alias("real_function")));
static int (*resolve_pick(void))(int) { return real_function; }
int picked(int) __attribute__((ifunc("resolve_pick")));
__asm__(".pushsection .text\n"
        ".globl outer\n.type outer, @function\nouter:\n nop\n"
        ".globl inner\n.type inner, @function\ninner:\n nop\n ret\n"
        ".size inner, .-inner\n.size outer, .-outer\n"
        ".globl untyped\nuntyped:\n ret\n.size untyped, 1\n"
        ".popsection\n");
"#;

fn build_aliases(dir: &Path, name: &str, flags: &[&str]) -> Option<PathBuf> {
    let source = dir.join("aliases.c");
    std::fs::write(&source, ALIASES).unwrap();
    let out = dir.join(name);
    let status = Command::new("gcc")
        .args(["-O2", "-fPIC", "-shared", "-nostdlib"])
        .args(flags)
        .arg(&source)
        .arg("-o")
        .arg(&out)
        .status()
        .ok()?;
    status.success().then_some(out)
}

fn check_aliases(path: &Path) {
    let index = assert_matches_oracles(path);
    let what = path.display();
    let named = |name: &str| index.symbols().iter().find(|s| s.raw_name == name);
    // Three names for one function: the global ones win over the weak,
    // and of those the name that sorts first.
    assert!(named("global_alias").is_some(), "{what}");
    assert!(named("real_function").is_none() && named("weak_alias").is_none());
    // The IFUNC and its local resolver share their bytes: the global name
    // stays, as a function.
    assert_eq!(named("picked").map(|s| s.kind), Some(SymbolKind::Function));
    assert!(named("resolve_pick").is_none());
    assert_eq!(named("untyped").map(|s| s.kind), Some(SymbolKind::Other));
    assert_eq!(named("table").map(|s| s.kind), Some(SymbolKind::Object));
    // .bss has no file bytes; thread-local values are not addresses.
    assert!(named("zeroed").is_none() && named("per_thread").is_none());
    assert!(index.symbol_counts().not_in_file >= 1);
    assert!(index.symbol_counts().aliases >= 3);

    let outer = named("outer").expect("outer");
    let inner = named("inner").expect("inner");
    assert_eq!(
        (inner.offset, outer.size, inner.size),
        (outer.offset + 1, 3, 2)
    );
    let at_inner: Vec<&str> = index
        .symbols_in(inner.offset, inner.offset + 1)
        .map(|s| s.raw_name.as_str())
        .collect();
    assert_eq!(at_inner, ["outer", "inner"]);
    assert_eq!(
        index.symbol_at(inner.offset).map(|s| s.raw_name.as_str()),
        Some("inner")
    );
    assert_eq!(
        index.symbol_at(outer.offset).map(|s| s.raw_name.as_str()),
        Some("outer")
    );
}

#[test]
fn aliases_overlaps_and_zero_filled_data() {
    let dir = tempfile::tempdir().unwrap();
    let Some(plain) = build_aliases(dir.path(), "libaliases.so", &[]) else {
        return common::skip("gcc cannot build the aliases library");
    };
    check_aliases(&plain);
    // Without .symtab the dynamic table names the same exported symbols.
    let stripped = build_aliases(dir.path(), "libstripped.so", &["-s"]).expect("gcc -s");
    let index = assert_matches_oracles(&stripped);
    assert_eq!(index.symbol_source(), SymbolSource::Dynsym);
}

#[test]
fn i386_aliases() {
    let dir = tempfile::tempdir().unwrap();
    let Some(path) = build_aliases(dir.path(), "libaliases32.so", &["-m32"]) else {
        return common::skip("gcc cannot build i386 objects here");
    };
    check_aliases(&path);
}

/// With the section headers cut off, as sstrip leaves a file, sections
/// become the PT_LOADs and the symbols come through DT_SYMTAB.
#[test]
fn without_section_headers_segments_and_dynamic_symbols_remain() {
    let dir = tempfile::tempdir().unwrap();
    let Some(path) = build_aliases(dir.path(), "libaliases.so", &[]) else {
        return common::skip("gcc cannot build the aliases library");
    };
    let full = index(&path);
    let mut bytes = std::fs::read(&path).unwrap();
    // e_shoff, e_shnum and e_shstrndx of an ELF64 header.
    bytes[0x28..0x30].fill(0);
    bytes[0x3c..0x40].fill(0);
    let cut = OffsetIndex::from_bytes(Path::new("cut.so"), &bytes).expect("index without sections");

    let want: Vec<(String, u64, u64)> = common::segments(&path)
        .iter()
        .enumerate()
        .filter(|(_, s)| s.kind == "LOAD" && s.file_size > 0)
        .map(|(i, s)| (i, s.offset, s.file_size))
        .map(|(i, offset, size)| (format!("[LOAD #{i}"), offset, size))
        .collect();
    let got: Vec<(String, u64, u64)> = cut
        .sections()
        .iter()
        .map(|s| (s.name.clone(), s.offset, s.size))
        .collect();
    assert_eq!(got.len(), want.len());
    for ((name, offset, size), (prefix, o, s)) in got.iter().zip(&want) {
        assert!(name.starts_with(prefix.as_str()), "{name} for {prefix}");
        assert_eq!((offset, size), (o, s), "{name}");
    }
    let names: Vec<&str> = cut.sections().iter().map(|s| s.name.as_str()).collect();
    assert!(names.contains(&"[LOAD #1 R E]"), "{names:?}");

    assert_eq!(cut.symbol_source(), SymbolSource::Dynsym);
    let loads = common::segments(&path);
    let dynsym: BTreeSet<(String, u64, u64)> = readelf_symbols(&path, ".dynsym")
        .into_iter()
        .filter(|s| s.ndx != "UND" && s.size > 0 && symbol_kind(&s.kind).is_some())
        .filter_map(|s| {
            let (offset, size) = file_bytes(&loads, full.file_size(), s.value, s.size)?;
            Some((s.name, offset, size))
        })
        .collect();
    for s in cut.symbols() {
        assert!(
            dynsym.contains(&(s.raw_name.clone(), s.offset, s.size)),
            "{} is not in .dynsym",
            s.raw_name
        );
        // Same bytes, same symbol as with section headers.
        assert!(
            full.symbols_in(s.offset, s.offset + 1)
                .any(|f| f.offset == s.offset && f.size == s.size)
        );
    }
    assert!(cut.symbols().iter().any(|s| s.raw_name == "outer"));
}

#[test]
fn hand_laid_fixture_with_section_headers() {
    let index = OffsetIndex::from_bytes(Path::new("fixture.so"), &fixture::build(true))
        .expect("fixture indexes");
    let sections: Vec<(&str, u64, u64)> = index
        .sections()
        .iter()
        .map(|s| (s.name.as_str(), s.offset, s.size))
        .collect();
    // The fixture's layout (tests/common/fixture.rs); .bss has no bytes.
    let shstrtab = &sections.last().expect("sections").0;
    assert_eq!(*shstrtab, ".shstrtab");
    assert_eq!(
        sections[..sections.len() - 1],
        [
            (".dynstr", 0x100, 32),
            (".dynsym", 0x180, 48),
            (".hash", 0x1c0, 20),
            (".rela.dyn", 0x200, 0x78),
            (".relr.dyn", 0x300, 32),
            (".text", 0x1000, 0x1000),
            (".init_array", 0x2000, 24),
            (".ctors", 0x2040, 32),
            (".dynamic", 0x2100, 0x110),
            (".data", 0x2800, 0x900),
            (".symtab", 0x3100, 96),
            (".strtab", 0x3160, 22),
        ]
    );
    let text = &index.sections()[5];
    assert!(text.alloc && text.executable && !text.writable);
    assert_eq!(index.section_at(0), None, "the ELF header is no section");
    assert_eq!(index.section_at(0x1fff), Some(5));
    assert_eq!(index.section_at(0x2000), Some(6));
    assert_eq!(index.section_at(0x2030), None, "padding");

    assert_eq!(index.symbol_source(), SymbolSource::Symtab);
    // LOAD #0 maps the file at its own offsets: address = offset.
    let symbols: Vec<(&str, u64, u64, Option<usize>)> = index
        .symbols()
        .iter()
        .map(|s| (s.name(), s.offset, s.size, s.section))
        .collect();
    assert_eq!(
        symbols,
        [
            ("func_a", FUNC_A, 0x100, Some(5)),
            ("func_b", FUNC_B, 0x100, Some(5)),
            ("func_c", FUNC_C, 0x100, Some(5)),
        ]
    );
    let names = |start: u64, end: u64| -> Vec<&str> {
        index.symbols_in(start, end).map(|s| s.name()).collect()
    };
    assert_eq!(names(0x1000, 0x2000), ["func_a", "func_b", "func_c"]);
    assert_eq!(names(0x10ff, 0x1101), ["func_a", "func_b"]);
    assert!(names(0x1200, 0x1800).is_empty());
    assert!(names(0x1800, 0x1800).is_empty(), "an empty range");
}

#[test]
fn hand_laid_fixture_without_section_headers() {
    let index = OffsetIndex::from_bytes(Path::new("fixture.so"), &fixture::build(false))
        .expect("fixture indexes");
    let sections: Vec<(&str, u64, u64)> = index
        .sections()
        .iter()
        .map(|s| (s.name.as_str(), s.offset, s.size))
        .collect();
    assert_eq!(
        sections,
        [
            ("[LOAD #0 R E]", 0, 0x2000),
            ("[LOAD #1 RW]", 0x2000, 0x1100)
        ]
    );
    // .dynsym, found through DT_SYMTAB and sized by DT_HASH, has func_c.
    assert_eq!(index.symbol_source(), SymbolSource::Dynsym);
    let symbols: Vec<(&str, u64, u64, Option<usize>)> = index
        .symbols()
        .iter()
        .map(|s| (s.name(), s.offset, s.size, s.section))
        .collect();
    assert_eq!(symbols, [("func_c", FUNC_C, 0x100, Some(0))]);
}

#[test]
fn other_formats_are_refused_with_the_file_named() {
    let err = OffsetIndex::from_bytes(Path::new("app.exe"), b"MZ\x90\0 not really a PE file")
        .expect_err("PE is not indexed");
    assert!(err.to_string().starts_with("app.exe: "), "{err}");
    assert!(err.to_string().contains("PE"), "{err}");
    let err = OffsetIndex::from_bytes(Path::new("notes.txt"), b"hello").expect_err("text");
    assert!(err.to_string().starts_with("notes.txt: "), "{err}");
}

/// Every input the fuzzer kept, and every truncation and byte flip of the
/// fixture: an index or an error naming the file, never a panic.
#[test]
fn malformed_input_gives_an_error_not_a_panic() {
    let label = Path::new("broken.so");
    let check = |bytes: &[u8]| {
        if let Err(err) = OffsetIndex::from_bytes(label, bytes) {
            assert!(err.to_string().starts_with("broken.so: "), "{err}");
        }
    };
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz-regressions");
    for entry in std::fs::read_dir(&dir).expect("regression directory") {
        check(&std::fs::read(entry.expect("entry").path()).expect("read"));
    }
    for section_headers in [true, false] {
        let good = fixture::build(section_headers);
        for len in (0..good.len()).step_by(7) {
            check(&good[..len]);
        }
        for at in 0..good.len() {
            for value in [0x00, 0xff, 0x80] {
                let mut bad = good.clone();
                bad[at] = value;
                check(&bad);
            }
        }
    }
}

/// A symbol whose end runs into .bss keeps only its file bytes; one wholly
/// in .bss is dropped and counted. The fixture's func_b and func_c are
/// rewritten as objects in LOAD #1, whose file image ends at 0x4100 (file
/// offset 0x3100) and whose memory runs on, zero-filled, to 0x5000.
#[test]
fn symbols_running_into_zero_filled_memory_are_cut_there() {
    let mut bytes = fixture::build(true);
    // .symtab entries 2 and 3: st_info GLOBAL OBJECT, st_shndx .data then
    // .bss, st_value, st_size.
    for (entry, shndx, value, size) in [(2usize, 10u16, 0x4000u64, 0x200u64), (3, 11, 0x4800, 0x10)]
    {
        let at = 0x3100 + entry * 24;
        bytes[at + 4] = 0x11;
        bytes[at + 6..at + 8].copy_from_slice(&shndx.to_le_bytes());
        bytes[at + 8..at + 16].copy_from_slice(&value.to_le_bytes());
        bytes[at + 16..at + 24].copy_from_slice(&size.to_le_bytes());
    }
    let index = OffsetIndex::from_bytes(Path::new("fixture.so"), &bytes).expect("indexes");
    let symbols: Vec<(&str, u64, u64, u64, SymbolKind)> = index
        .symbols()
        .iter()
        .map(|s| (s.name(), s.address, s.offset, s.size, s.kind))
        .collect();
    assert_eq!(
        symbols,
        [
            ("func_a", FUNC_A, FUNC_A, 0x100, SymbolKind::Function),
            ("func_b", 0x4000, 0x3000, 0x100, SymbolKind::Object),
        ]
    );
    let data = index.symbols()[1]
        .section
        .map(|i| index.sections()[i].name.as_str());
    assert_eq!(data, Some(".data"));
    let counts = index.symbol_counts();
    assert_eq!((counts.read, counts.not_in_file, counts.aliases), (3, 1, 0));
}
