//! Mach-O inspection against files whose contents the test itself decides:
//! a relocatable object from object's writer, and two linked images laid
//! out byte by byte here (one with LC_DYLD_INFO opcodes, one with chained
//! fixups), so every expected count is known before the code under test
//! runs. llvm-objdump serves as an outside oracle when installed. Then
//! truncated and corrupted files.

mod common;

use coldstart_binary::{Error, Format, InspectOptions, Kind, inspect_bytes};
use object::write::{Object, Relocation, StandardSection, Symbol, SymbolSection};
use object::{
    Architecture, BinaryFormat, Endianness, RelocationEncoding, RelocationFlags, RelocationKind,
    SymbolFlags, SymbolKind, SymbolScope,
};
use std::path::Path;
use std::process::Command;

// Load command and header constants from <mach-o/loader.h>.
const MH_MAGIC_64: u32 = 0xfeed_facf;
const CPU_TYPE_X86_64: u32 = 0x0100_0007;
const CPU_TYPE_ARM64: u32 = 0x0100_000c;
const MH_EXECUTE: u32 = 2;
const MH_PIE_FLAGS: u32 = 0x1 | 0x4 | 0x80 | 0x20_0000;
const LC_SEGMENT_64: u32 = 0x19;
const LC_SYMTAB: u32 = 0x2;
const LC_DYSYMTAB: u32 = 0xb;
const LC_LOAD_DYLIB: u32 = 0xc;
const LC_LOAD_DYLINKER: u32 = 0xe;
const LC_UUID: u32 = 0x1b;
const LC_LOAD_WEAK_DYLIB: u32 = 0x8000_0018;
const LC_DYLD_INFO_ONLY: u32 = 0x8000_0022;
const LC_MAIN: u32 = 0x8000_0028;
const LC_DYLD_CHAINED_FIXUPS: u32 = 0x8000_0034;
const HEADER_64: u64 = 32;
const BASE: u64 = 0x1_0000_0000;

struct Sect {
    name: &'static str,
    addr: u64,
    size: u64,
    offset: u32,
    flags: u32,
}

/// Assembles load commands and places content at chosen file offsets.
struct Image {
    commands: Vec<Vec<u8>>,
    body: Vec<u8>,
}

fn u32s(out: &mut Vec<u8>, values: &[u32]) {
    for v in values {
        out.extend_from_slice(&v.to_le_bytes());
    }
}
fn u64s(out: &mut Vec<u8>, values: &[u64]) {
    for v in values {
        out.extend_from_slice(&v.to_le_bytes());
    }
}
fn name16(out: &mut Vec<u8>, name: &str) {
    let mut field = [0u8; 16];
    field[..name.len()].copy_from_slice(name.as_bytes());
    out.extend_from_slice(&field);
}
fn uleb(out: &mut Vec<u8>, mut value: u64) {
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

impl Image {
    fn new(file_size: usize) -> Image {
        Image {
            commands: Vec::new(),
            body: vec![0; file_size],
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn segment(
        &mut self,
        name: &str,
        vmaddr: u64,
        vmsize: u64,
        fileoff: u64,
        filesize: u64,
        prot: u32,
        sections: &[Sect],
    ) {
        let mut cmd = Vec::new();
        let size = 72 + 80 * sections.len() as u32;
        u32s(&mut cmd, &[LC_SEGMENT_64, size]);
        name16(&mut cmd, name);
        u64s(&mut cmd, &[vmaddr, vmsize, fileoff, filesize]);
        u32s(&mut cmd, &[prot, prot, sections.len() as u32, 0]);
        for s in sections {
            name16(&mut cmd, s.name);
            name16(&mut cmd, name);
            u64s(&mut cmd, &[s.addr, s.size]);
            u32s(&mut cmd, &[s.offset, 3, 0, 0, s.flags, 0, 0, 0]);
        }
        self.commands.push(cmd);
    }

    fn raw(&mut self, words: &[u32]) {
        let mut cmd = Vec::new();
        u32s(&mut cmd, words);
        self.commands.push(cmd);
    }

    /// A command whose fixed part is `words` (cmd and cmdsize excluded)
    /// followed by a string, padded to 8 bytes.
    fn with_string(&mut self, cmd: u32, words: &[u32], text: &str) {
        let fixed = 8 + 4 * words.len();
        let size = (fixed + text.len() + 1).div_ceil(8) * 8;
        let mut out = Vec::new();
        u32s(&mut out, &[cmd, size as u32]);
        u32s(&mut out, words);
        out.extend_from_slice(text.as_bytes());
        out.resize(size, 0);
        self.commands.push(out);
    }

    fn dylib(&mut self, cmd: u32, path: &str) {
        self.with_string(cmd, &[24, 2, 0x1_0000, 0x1_0000], path);
    }

    fn put(&mut self, offset: u64, bytes: &[u8]) {
        let at = offset as usize;
        self.body[at..at + bytes.len()].copy_from_slice(bytes);
    }

    fn sizeofcmds(&self) -> u64 {
        self.commands.iter().map(|c| c.len() as u64).sum()
    }

    fn finish(mut self, cputype: u32) -> Vec<u8> {
        let mut head = Vec::new();
        u32s(
            &mut head,
            &[
                MH_MAGIC_64,
                cputype,
                if cputype == CPU_TYPE_X86_64 { 3 } else { 0 },
                MH_EXECUTE,
                self.commands.len() as u32,
                self.sizeofcmds() as u32,
                MH_PIE_FLAGS,
                0,
            ],
        );
        for cmd in &self.commands {
            head.extend_from_slice(cmd);
        }
        self.body[..head.len()].copy_from_slice(&head);
        self.body
    }
}

/// Where the dyld-info fixture put its __LINKEDIT tables.
struct DyldInfoLayout {
    rebase: (u64, u64),
    bind: (u64, u64),
    lazy_bind: (u64, u64),
    symbols: (u64, u64),
    strings: (u64, u64),
    linkedit_end: u64,
    sizeofcmds: u64,
}

fn align8(n: u64) -> u64 {
    n.div_ceil(8) * 8
}

/// x86_64 PIE: __PAGEZERO, __TEXT (__text), __DATA (__mod_init_func with
/// two pointers, __data, __bss), __LINKEDIT with rebase, bind and lazy bind
/// opcodes and a three-entry symbol table.
///
/// Rebases: __DATA+0x0, +0x8 (the init pointers), +0x1000, +0x1800.
/// Binds: _printf at +0x20, _malloc at +0x28, _printf at +0x30 and +0x40.
/// One lazy bind (_puts) that must not be counted.
fn dyld_info_image() -> (Vec<u8>, DyldInfoLayout) {
    let mut rebase = vec![
        0x11, // SET_TYPE_IMM pointer
        0x22, 0x00, // SET_SEGMENT_AND_OFFSET_ULEB segment 2, offset 0
        0x52, // DO_REBASE_IMM_TIMES 2
        0x30, // ADD_ADDR_ULEB
    ];
    uleb(&mut rebase, 0xff0);
    rebase.extend([0x80, 0x02]); // DO_REBASE_ULEB_TIMES_SKIPPING_ULEB 2, skip:
    uleb(&mut rebase, 0x7f8);
    rebase.push(0x00); // DONE

    let mut bind = vec![0x11, 0x40]; // SET_DYLIB_ORDINAL_IMM 1, SET_SYMBOL
    bind.extend(b"_printf\0");
    bind.extend([0x51, 0x72, 0x20, 0x90, 0x40]); // type pointer; seg 2 +0x20; DO_BIND; SET_SYMBOL
    bind.extend(b"_malloc\0");
    bind.extend([0x90, 0x40]); // DO_BIND; SET_SYMBOL
    bind.extend(b"_printf\0");
    bind.extend([0xc0, 0x02, 0x08, 0x00]); // DO_BIND_ULEB_TIMES_SKIPPING_ULEB 2, 8; DONE

    let mut lazy = vec![0x72, 0x48, 0x11, 0x40];
    lazy.extend(b"_puts\0");
    lazy.extend([0x90, 0x00]);

    let strings = b"\0_helper\0_main\0_printf\0".to_vec();

    let linkedit = 0x4000u64;
    let rebase_at = linkedit;
    let bind_at = rebase_at + align8(rebase.len() as u64);
    let lazy_at = bind_at + align8(bind.len() as u64);
    let symbols_at = lazy_at + align8(lazy.len() as u64);
    let strings_at = symbols_at + 3 * 16;
    let linkedit_end = align8(strings_at + strings.len() as u64);

    let mut image = Image::new(linkedit_end as usize);
    image.segment("__PAGEZERO", 0, BASE, 0, 0, 0, &[]);
    image.segment(
        "__TEXT",
        BASE,
        0x2000,
        0,
        0x2000,
        5,
        &[Sect {
            name: "__text",
            addr: BASE + 0x1000,
            size: 0x100,
            offset: 0x1000,
            flags: 0x8000_0400,
        }],
    );
    image.segment(
        "__DATA",
        BASE + 0x2000,
        0x3000,
        0x2000,
        0x2000,
        3,
        &[
            Sect {
                name: "__mod_init_func",
                addr: BASE + 0x2000,
                size: 0x10,
                offset: 0x2000,
                flags: 0x9,
            },
            Sect {
                name: "__data",
                addr: BASE + 0x2010,
                size: 0x1ff0,
                offset: 0x2010,
                flags: 0,
            },
            Sect {
                name: "__bss",
                addr: BASE + 0x4000,
                size: 0x1000,
                offset: 0,
                flags: 0x1,
            },
        ],
    );
    image.segment(
        "__LINKEDIT",
        BASE + 0x5000,
        0x1000,
        linkedit,
        linkedit_end - linkedit,
        1,
        &[],
    );
    image.raw(&[
        LC_DYLD_INFO_ONLY,
        48,
        rebase_at as u32,
        align8(rebase.len() as u64) as u32,
        bind_at as u32,
        align8(bind.len() as u64) as u32,
        0,
        0,
        lazy_at as u32,
        align8(lazy.len() as u64) as u32,
        0,
        0,
    ]);
    image.raw(&[
        LC_SYMTAB,
        24,
        symbols_at as u32,
        3,
        strings_at as u32,
        strings.len() as u32,
    ]);
    let mut dysymtab = vec![LC_DYSYMTAB, 80, 0, 1, 1, 1, 2, 1];
    dysymtab.resize(20, 0);
    image.raw(&dysymtab);
    image.with_string(LC_LOAD_DYLINKER, &[12], "/usr/lib/dyld");
    image.raw(&[
        LC_UUID,
        24,
        0x0302_0100,
        0x0706_0504,
        0x0b0a_0908,
        0x0f0e_0d0c,
    ]);
    image.raw(&[LC_MAIN, 24, 0x1000, 0, 0, 0]);
    image.dylib(LC_LOAD_DYLIB, "/usr/lib/libSystem.B.dylib");
    image.dylib(LC_LOAD_WEAK_DYLIB, "/usr/lib/libc++.1.dylib");

    image.put(0x1000, &[0x55, 0x48, 0x89, 0xe5, 0x5d, 0xc3]);
    let mut init = Vec::new();
    u64s(&mut init, &[BASE + 0x1000, BASE + 0x1010]);
    image.put(0x2000, &init);
    image.put(rebase_at, &rebase);
    image.put(bind_at, &bind);
    image.put(lazy_at, &lazy);
    let mut symbols = Vec::new();
    for (strx, typ, sect, value) in [
        (1u32, 0x0eu8, 1u8, BASE + 0x1010),
        (9, 0x0f, 1, BASE + 0x1000),
        (15, 0x01, 0, 0),
    ] {
        u32s(&mut symbols, &[strx]);
        symbols.extend([typ, sect, 0, 0]);
        u64s(&mut symbols, &[value]);
    }
    image.put(symbols_at, &symbols);
    image.put(strings_at, &strings);

    let layout = DyldInfoLayout {
        rebase: (rebase_at, align8(rebase.len() as u64)),
        bind: (bind_at, align8(bind.len() as u64)),
        lazy_bind: (lazy_at, align8(lazy.len() as u64)),
        symbols: (symbols_at, 48),
        strings: (strings_at, strings.len() as u64),
        linkedit_end,
        sizeofcmds: image.sizeofcmds(),
    };
    (image.finish(CPU_TYPE_X86_64), layout)
}

/// arm64 PIE with LC_DYLD_CHAINED_FIXUPS (DYLD_CHAINED_PTR_64_OFFSET):
/// two binds in __DATA_CONST,__got (ordinals 0 and 1), three rebases in
/// __DATA,__data at +0x0, +0x10 (page 0) and +0x1008 (page 1); and
/// __TEXT,__init_offsets with offsets 0x1000 and 0x1010. No symbol table.
fn chained_image() -> Vec<u8> {
    let mut blob = Vec::new();
    let starts = 32u32;
    let starts_in_image_len = 4 + 5 * 4;
    let got_starts = starts_in_image_len; // relative to starts_in_image
    let data_starts = got_starts + 24;
    let imports = starts + data_starts + 26 + 2;
    let symbols = imports + 8;
    u32s(&mut blob, &[0, starts, imports, symbols, 2, 1, 0]);
    blob.resize(starts as usize, 0);
    u32s(&mut blob, &[5, 0, 0, got_starts, data_starts, 0]);
    // __DATA_CONST: one page, chain starts at 0.
    u32s(&mut blob, &[24]);
    blob.extend(0x1000u16.to_le_bytes());
    blob.extend(6u16.to_le_bytes());
    u64s(&mut blob, &[0x4000]);
    u32s(&mut blob, &[0]);
    blob.extend(1u16.to_le_bytes());
    blob.extend(0u16.to_le_bytes());
    // __DATA: two pages, chains start at 0 and 8.
    u32s(&mut blob, &[26]);
    blob.extend(0x1000u16.to_le_bytes());
    blob.extend(6u16.to_le_bytes());
    u64s(&mut blob, &[0x5000]);
    u32s(&mut blob, &[0]);
    blob.extend(2u16.to_le_bytes());
    blob.extend(0u16.to_le_bytes());
    blob.extend(8u16.to_le_bytes());
    blob.resize(imports as usize, 0);
    // DYLD_CHAINED_IMPORT: lib_ordinal:8, weak_import:1, name_offset:23.
    u32s(&mut blob, &[1 | (1 << 9), 1 | (9 << 9)]);
    blob.extend(b"\0_printf\0_malloc\0");

    let linkedit = 0x7000u64;
    let linkedit_end = align8(linkedit + blob.len() as u64);
    let mut image = Image::new(linkedit_end as usize);
    image.segment("__PAGEZERO", 0, BASE, 0, 0, 0, &[]);
    image.segment(
        "__TEXT",
        BASE,
        0x4000,
        0,
        0x4000,
        5,
        &[
            Sect {
                name: "__text",
                addr: BASE + 0x1000,
                size: 0x20,
                offset: 0x1000,
                flags: 0x8000_0400,
            },
            Sect {
                name: "__init_offsets",
                addr: BASE + 0x1020,
                size: 8,
                offset: 0x1020,
                flags: 0x16,
            },
        ],
    );
    image.segment(
        "__DATA_CONST",
        BASE + 0x4000,
        0x1000,
        0x4000,
        0x1000,
        3,
        &[Sect {
            name: "__got",
            addr: BASE + 0x4000,
            size: 0x10,
            offset: 0x4000,
            flags: 0x6,
        }],
    );
    image.segment(
        "__DATA",
        BASE + 0x5000,
        0x2000,
        0x5000,
        0x2000,
        3,
        &[Sect {
            name: "__data",
            addr: BASE + 0x5000,
            size: 0x2000,
            offset: 0x5000,
            flags: 0,
        }],
    );
    image.segment(
        "__LINKEDIT",
        BASE + 0x7000,
        0x1000,
        linkedit,
        linkedit_end - linkedit,
        1,
        &[],
    );
    image.raw(&[
        LC_DYLD_CHAINED_FIXUPS,
        16,
        linkedit as u32,
        blob.len() as u32,
    ]);
    image.with_string(LC_LOAD_DYLINKER, &[12], "/usr/lib/dyld");
    image.raw(&[LC_MAIN, 24, 0x1000, 0, 0, 0]);
    image.dylib(LC_LOAD_DYLIB, "/usr/lib/libSystem.B.dylib");

    let mut offsets = Vec::new();
    u32s(&mut offsets, &[0x1000, 0x1010]);
    image.put(0x1020, &offsets);
    // DYLD_CHAINED_PTR_64: next (in 4-byte strides) at bit 51, bind at 63.
    let bind = |ordinal: u64, next: u64| (1u64 << 63) | (next << 51) | ordinal;
    let rebase = |target: u64, next: u64| (next << 51) | target;
    let mut got = Vec::new();
    u64s(&mut got, &[bind(0, 2), bind(1, 0)]);
    image.put(0x4000, &got);
    let mut data0 = Vec::new();
    u64s(&mut data0, &[rebase(0x1000, 4), 0, rebase(0x1010, 0)]);
    image.put(0x5000, &data0);
    image.put(0x6008, &rebase(0x1000, 0).to_le_bytes());
    image.put(linkedit, &blob);
    image.finish(CPU_TYPE_ARM64)
}

/// A relocatable x86_64 object with code, data, bss, two symbols and one
/// relocation, written by object's Mach-O writer.
fn object_file() -> Vec<u8> {
    let mut obj = Object::new(
        BinaryFormat::MachO,
        Architecture::X86_64,
        Endianness::Little,
    );
    let text = obj.section_id(StandardSection::Text);
    let data = obj.section_id(StandardSection::Data);
    let bss = obj.section_id(StandardSection::UninitializedData);
    obj.append_section_data(text, &[0x55, 0xe8, 0, 0, 0, 0, 0x5d, 0xc3], 16);
    obj.append_section_data(data, &[1, 2, 3, 4, 5, 6, 7, 8], 8);
    obj.append_section_bss(bss, 64, 8);
    let main = obj.add_symbol(Symbol {
        name: b"_main".to_vec(),
        value: 0,
        size: 8,
        kind: SymbolKind::Text,
        scope: SymbolScope::Linkage,
        weak: false,
        section: SymbolSection::Section(text),
        flags: SymbolFlags::None,
    });
    let helper = obj.add_symbol(Symbol {
        name: b"_helper".to_vec(),
        value: 0,
        size: 0,
        kind: SymbolKind::Text,
        scope: SymbolScope::Unknown,
        weak: false,
        section: SymbolSection::Undefined,
        flags: SymbolFlags::None,
    });
    let _ = main;
    obj.add_relocation(
        text,
        Relocation {
            offset: 2,
            symbol: helper,
            addend: -4,
            flags: RelocationFlags::Generic {
                kind: RelocationKind::Relative,
                encoding: RelocationEncoding::X86Branch,
                size: 32,
            },
        },
    )
    .unwrap();
    obj.write().unwrap()
}

#[test]
fn relocatable_object_sections_and_symbols() {
    let bytes = object_file();
    let got = common::inspect_named("unit.o", &bytes);
    assert_eq!(got.format, Format::Macho);
    assert_eq!(got.header.kind, Kind::Relocatable);
    assert_eq!(got.header.machine, "x86_64");
    assert_eq!(got.header.bits, 64);
    assert_eq!(got.header.endian, "little");
    assert_eq!(got.header.entry, 0);
    assert_eq!(got.header.symbols, 2);
    assert!(!got.header.stripped);
    assert_eq!(got.header.interpreter, None);
    let sections: Vec<(&str, &str, u64, u64)> = got
        .sections
        .iter()
        .map(|s| (s.name.as_str(), s.kind.as_str(), s.file_size, s.memory_size))
        .collect();
    assert_eq!(
        sections,
        vec![
            ("__TEXT,__text", "REGULAR", 8, 8),
            ("__DATA,__data", "REGULAR", 8, 8),
            ("__DATA,__bss", "ZEROFILL", 0, 64),
        ]
    );
    // An object file has one unnamed segment holding every section.
    assert_eq!(got.segments.len(), 1);
    assert!(got.sections.iter().all(|s| s.segment == Some(0)));
    // Static relocations are the linker's, not dyld's.
    assert_eq!(got.relocations.total, 0);
    assert!(got.relocations.sections.is_empty());
    let labels: Vec<&str> = got.regions.iter().map(|r| r.label.as_str()).collect();
    for label in [
        "[Mach-O header]",
        "[load commands]",
        "[relocations]",
        "[symbol table]",
        "[string table]",
    ] {
        assert!(labels.contains(&label), "{label} missing from {labels:?}");
    }
    let relocs = got
        .regions
        .iter()
        .find(|r| r.label == "[relocations]")
        .unwrap();
    assert_eq!(relocs.size, 8, "one relocation_info is 8 bytes");
    let symtab = got
        .regions
        .iter()
        .find(|r| r.label == "[symbol table]")
        .unwrap();
    assert_eq!(symtab.size, 2 * 16);
    assert_eq!(got.regions[0].size, HEADER_64);
    assert_eq!(common::accounted(&got), got.size);
    assert_eq!(got.macho.as_ref().unwrap().dylibs, Vec::<String>::new());
}

#[test]
fn dyld_info_image_header_segments_and_sections() {
    let (bytes, layout) = dyld_info_image();
    let got = common::inspect_named("app", &bytes);
    assert_eq!(got.header.kind, Kind::Pie);
    assert_eq!(got.header.machine, "x86_64");
    assert_eq!(got.header.entry, BASE + 0x1000);
    assert_eq!(got.header.interpreter.as_deref(), Some("/usr/lib/dyld"));
    assert_eq!(
        got.header.build_id.as_deref(),
        Some("000102030405060708090A0B0C0D0E0F")
    );
    assert_eq!(got.header.symbols, 3);
    assert!(!got.header.stripped, "one local symbol is left");
    assert!(!got.header.debug_info);
    let macho = got.macho.as_ref().unwrap();
    assert!(macho.pie);
    assert_eq!(
        macho.dylibs,
        vec!["/usr/lib/libSystem.B.dylib", "/usr/lib/libc++.1.dylib"]
    );

    let segments: Vec<(&str, &str, u64, u64, u64, u64)> = got
        .segments
        .iter()
        .map(|s| {
            (
                s.name.as_deref().unwrap(),
                s.flags.as_str(),
                s.offset,
                s.file_size,
                s.address,
                s.memory_size,
            )
        })
        .collect();
    assert_eq!(
        segments,
        vec![
            ("__PAGEZERO", "---", 0, 0, 0, BASE),
            ("__TEXT", "R-X", 0, 0x2000, BASE, 0x2000),
            ("__DATA", "RW-", 0x2000, 0x2000, BASE + 0x2000, 0x3000),
            (
                "__LINKEDIT",
                "R--",
                0x4000,
                layout.linkedit_end - 0x4000,
                BASE + 0x5000,
                0x1000
            ),
        ]
    );
    assert!(got.segments.iter().all(|s| s.kind == "SEGMENT"));
    assert_eq!(got.segments[2].pages, 2);

    type Row<'a> = (&'a str, &'a str, u64, u64, u64, Option<usize>);
    let sections: Vec<Row> = got
        .sections
        .iter()
        .map(|s| {
            (
                s.name.as_str(),
                s.kind.as_str(),
                s.offset,
                s.file_size,
                s.address,
                s.segment,
            )
        })
        .collect();
    assert_eq!(
        sections,
        vec![
            (
                "__TEXT,__text",
                "REGULAR",
                0x1000,
                0x100,
                BASE + 0x1000,
                Some(1)
            ),
            (
                "__DATA,__mod_init_func",
                "MOD_INIT_FUNC_POINTERS",
                0x2000,
                0x10,
                BASE + 0x2000,
                Some(2)
            ),
            (
                "__DATA,__data",
                "REGULAR",
                0x2010,
                0x1ff0,
                BASE + 0x2010,
                Some(2)
            ),
            ("__DATA,__bss", "ZEROFILL", 0, 0, BASE + 0x4000, Some(2)),
        ]
    );

    assert_eq!(got.init_array.count, 2);
    let targets: Vec<Option<u64>> = got.init_array.entries.iter().map(|e| e.target).collect();
    assert_eq!(targets, vec![Some(BASE + 0x1000), Some(BASE + 0x1010)]);
    let slots: Vec<u64> = got.init_array.entries.iter().map(|e| e.slot).collect();
    assert_eq!(slots, vec![BASE + 0x2000, BASE + 0x2008]);
    assert_eq!(got.init_array.code_pages, 1);
}

#[test]
fn dyld_info_image_regions_account_for_every_byte() {
    let (bytes, layout) = dyld_info_image();
    let got = common::inspect_named("app", &bytes);
    let regions: Vec<(&str, u64, u64)> = got
        .regions
        .iter()
        .map(|r| (r.label.as_str(), r.offset, r.size))
        .collect();
    let commands_end = HEADER_64 + layout.sizeofcmds;
    let mut expected = vec![
        ("[Mach-O header]", 0, HEADER_64),
        ("[load commands]", HEADER_64, layout.sizeofcmds),
        ("[padding]", commands_end, 0x1000 - commands_end),
        ("[padding]", 0x1100, 0x2000 - 0x1100),
        ("[rebase info]", layout.rebase.0, layout.rebase.1),
        ("[bind info]", layout.bind.0, layout.bind.1),
        ("[lazy bind info]", layout.lazy_bind.0, layout.lazy_bind.1),
        ("[symbol table]", layout.symbols.0, layout.symbols.1),
        ("[string table]", layout.strings.0, layout.strings.1),
    ];
    let strings_end = layout.strings.0 + layout.strings.1;
    if strings_end < layout.linkedit_end {
        expected.push((
            "[__LINKEDIT]",
            strings_end,
            layout.linkedit_end - strings_end,
        ));
    }
    assert_eq!(regions, expected);
    assert_eq!(common::accounted(&got), got.size);
}

#[test]
fn dyld_info_rebases_and_binds_match_the_opcodes() {
    let (bytes, layout) = dyld_info_image();
    let got = common::inspect_named("app", &bytes);
    let relocs = &got.relocations;
    assert_eq!(relocs.total, 8);
    assert_eq!(relocs.relative, 4);
    assert_eq!(relocs.symbolic, 4, "the lazy bind is not counted");
    assert_eq!(relocs.distinct_symbols, 2);
    assert_eq!(relocs.by_type.get("REBASE_TYPE_POINTER"), Some(&4));
    assert_eq!(relocs.by_type.get("BIND_TYPE_POINTER"), Some(&4));
    assert_eq!(relocs.bytes, layout.rebase.1 + layout.bind.1);
    let tables: Vec<(&str, &str, u64, u64, u64, u64)> = relocs
        .sections
        .iter()
        .map(|t| {
            (
                t.name.as_str(),
                t.format.as_str(),
                t.offset,
                t.size,
                t.entries,
                t.relocations,
            )
        })
        .collect();
    assert_eq!(
        tables,
        vec![
            (
                "LC_DYLD_INFO rebase",
                "macho_rebase",
                layout.rebase.0,
                layout.rebase.1,
                5,
                4
            ),
            (
                "LC_DYLD_INFO bind",
                "macho_bind",
                layout.bind.0,
                layout.bind.1,
                9,
                4
            ),
        ]
    );
    // Pages 0x100002000 (init pointers, all binds) and 0x100003000.
    assert_eq!(relocs.pages_written.total, 2);
    let by_section: Vec<(&str, u64, u64)> = relocs
        .pages_written
        .by_section
        .iter()
        .map(|s| (s.section.as_str(), s.relocations, s.pages))
        .collect();
    assert_eq!(
        by_section,
        vec![("__DATA,__mod_init_func", 2, 1), ("__DATA,__data", 6, 2)]
    );
}

#[test]
fn chained_fixups_match_the_chains() {
    let bytes = chained_image();
    let got = common::inspect_named("chained", &bytes);
    assert_eq!(got.header.machine, "aarch64");
    assert_eq!(got.header.kind, Kind::Pie);
    assert_eq!(got.header.entry, BASE + 0x1000);
    assert!(got.header.stripped, "no LC_SYMTAB at all");
    assert_eq!(got.header.symbols, 0);
    assert_eq!(got.header.build_id, None);
    let relocs = &got.relocations;
    assert_eq!(relocs.total, 5);
    assert_eq!(relocs.relative, 3);
    assert_eq!(relocs.symbolic, 2);
    assert_eq!(relocs.distinct_symbols, 2);
    assert_eq!(relocs.by_type.get("CHAINED_REBASE"), Some(&3));
    assert_eq!(relocs.by_type.get("CHAINED_BIND"), Some(&2));
    assert_eq!(relocs.sections.len(), 1);
    let table = &relocs.sections[0];
    assert_eq!(
        (
            table.format.as_str(),
            table.offset,
            table.entries,
            table.relocations
        ),
        ("macho_chained", 0x7000, 5, 5)
    );
    assert_eq!(relocs.pages_written.total, 3);
    let by_section: Vec<(&str, u64, u64)> = relocs
        .pages_written
        .by_section
        .iter()
        .map(|s| (s.section.as_str(), s.relocations, s.pages))
        .collect();
    assert_eq!(
        by_section,
        vec![("__DATA_CONST,__got", 2, 1), ("__DATA,__data", 3, 2)]
    );
    let init = &got.init_array;
    assert_eq!(init.count, 2);
    let targets: Vec<Option<u64>> = init.entries.iter().map(|e| e.target).collect();
    assert_eq!(targets, vec![Some(BASE + 0x1000), Some(BASE + 0x1010)]);
    assert_eq!(common::accounted(&got), got.size);
}

/// llvm-objdump --macho prints one line per rebase and per bind; compare
/// the counts (and, for binds, the symbols) with it.
#[test]
fn dyld_info_counts_agree_with_llvm_objdump() {
    let tool = ["llvm-objdump", "llvm-objdump-14", "llvm-objdump-18"]
        .into_iter()
        .find(|tool| Command::new(tool).arg("--version").output().is_ok());
    let Some(tool) = tool else {
        return common::skip("llvm-objdump not installed (apt-get install llvm)");
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app");
    let (bytes, _) = dyld_info_image();
    std::fs::write(&path, &bytes).unwrap();
    let table = |flag: &str| -> Vec<String> {
        let output = Command::new(tool)
            .args(["--macho", flag])
            .arg(&path)
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        // Rows start with the segment name; headings do not.
        String::from_utf8_lossy(&output.stdout)
            .lines()
            .filter(|line| line.starts_with("__"))
            .map(str::to_string)
            .collect()
    };
    let rebases = table("--rebase");
    let binds = table("--bind");
    let lazy = table("--lazy-bind");
    let got = inspect_bytes(&path, &bytes, &InspectOptions::default()).unwrap();
    assert_eq!(rebases.len() as u64, got.relocations.relative);
    assert_eq!(binds.len() as u64, got.relocations.symbolic);
    assert_eq!(lazy.len(), 1, "the lazy bind exists and is left out");
    let symbols: std::collections::BTreeSet<&str> = binds
        .iter()
        .filter_map(|line| line.split_whitespace().last())
        .collect();
    assert_eq!(symbols.len() as u64, got.relocations.distinct_symbols);
}

fn expect_error(name: &str, bytes: &[u8]) -> String {
    match inspect_bytes(Path::new(name), bytes, &InspectOptions::default()) {
        Err(
            err @ Error::Malformed {
                format: "Mach-O", ..
            },
        ) => {
            let message = err.to_string();
            assert!(message.contains(name), "{message}");
            message
        }
        other => panic!("{name}: expected a malformed Mach-O error, got {other:?}"),
    }
}

#[test]
fn truncated_files_are_errors_that_name_the_file() {
    let fixtures = [
        ("unit.o", object_file()),
        ("app", dyld_info_image().0),
        ("chained", chained_image()),
    ];
    for (name, bytes) in fixtures {
        let mut lengths: Vec<usize> = (0..bytes.len()).step_by(61).collect();
        lengths.extend([20, 31, 32, 33, 100, bytes.len() - 1]);
        for len in lengths {
            let label = format!("{name}-cut-{len}");
            match inspect_bytes(Path::new(&label), &bytes[..len], &InspectOptions::default()) {
                Err(
                    err @ Error::Malformed {
                        format: "Mach-O", ..
                    },
                ) => {
                    assert!(err.to_string().contains(&label), "{err}")
                }
                // Under 16 bytes object cannot even read a magic number,
                // so lib.rs does not recognise the format.
                Err(Error::UnknownFormat { .. }) if len < 16 => {}
                other => panic!("{label}: expected an error, got {other:?}"),
            }
        }
    }
}

/// Offset of the first load command's cmdsize.
const FIRST_CMDSIZE: usize = 32 + 4;

#[test]
fn corrupt_load_command_sizes_are_errors() {
    let (good, _) = dyld_info_image();
    for (cmdsize, expect) in [
        (0u32, "load command"),
        (4, "load command"),
        (7, "load command"),
        (0xffff_fff0, "load command"),
    ] {
        let mut bytes = good.clone();
        bytes[FIRST_CMDSIZE..FIRST_CMDSIZE + 4].copy_from_slice(&cmdsize.to_le_bytes());
        let message = expect_error(&format!("cmdsize-{cmdsize}"), &bytes);
        assert!(message.contains(expect), "{message}");
    }
    // More commands claimed than sizeofcmds holds.
    let mut bytes = good.clone();
    bytes[16..20].copy_from_slice(&1000u32.to_le_bytes());
    expect_error("ncmds", &bytes);
    // sizeofcmds beyond the end of the file.
    let mut bytes = good.clone();
    bytes[20..24].copy_from_slice(&0x7fff_0000u32.to_le_bytes());
    assert!(expect_error("sizeofcmds", &bytes).contains("load commands"));
}

#[test]
fn corrupt_fixup_streams_are_errors() {
    let (good, layout) = dyld_info_image();
    let rebase = layout.rebase.0 as usize;

    // DO_REBASE_ULEB_TIMES with a count far beyond the segment.
    let mut bytes = good.clone();
    bytes[rebase + 3..rebase + 8].copy_from_slice(&[0x60, 0xff, 0xff, 0xff, 0x0f]);
    assert!(expect_error("rebase-count", &bytes).contains("outside segment"));

    // Rebasing before any SET_SEGMENT_AND_OFFSET.
    let mut bytes = good.clone();
    bytes[rebase + 1..rebase + 3].copy_from_slice(&[0x30, 0x00]);
    assert!(expect_error("rebase-no-segment", &bytes).contains("before setting"));

    // A segment index past the last segment.
    let mut bytes = good.clone();
    bytes[rebase + 1] = 0x29;
    assert!(expect_error("rebase-segment", &bytes).contains("segment 9"));

    // A count that fits a (corrupt) huge __DATA but not the file: the
    // locations would be walked one by one, so it must be refused first.
    let mut bytes = good.clone();
    let data_vmsize = 32 + 72 + 152 + 32; // header, __PAGEZERO, __TEXT, then vmsize
    bytes[data_vmsize..data_vmsize + 8].copy_from_slice(&(1u64 << 40).to_le_bytes());
    bytes[rebase + 3..rebase + 8].copy_from_slice(&[0x60, 0xff, 0xff, 0xff, 0x7f]);
    assert!(expect_error("rebase-cap", &bytes).contains("the file can hold"));

    // Chained fixups naming a segment index that does not exist.
    let good = chained_image();
    let mut bytes = good.clone();
    // seg_count in dyld_chained_starts_in_image (blob offset 32).
    bytes[0x7000 + 32..0x7000 + 36].copy_from_slice(&9u32.to_le_bytes());
    expect_error("chained-seg-count", &bytes);
}

#[test]
fn corrupted_files_never_panic() {
    let fixtures = [object_file(), dyld_info_image().0, chained_image()];
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for (which, good) in fixtures.iter().enumerate() {
        for round in 0..1500 {
            let mut bytes = good.clone();
            for _ in 0..1 + round % 4 {
                // Mostly the header and load commands, where structure lives.
                let at = if next() % 2 == 0 {
                    (next() % 0x300.min(bytes.len() as u64)) as usize
                } else {
                    (next() % bytes.len() as u64) as usize
                };
                bytes[at] = next() as u8;
            }
            let name = format!("mutant-{which}-{round}");
            if let Err(err) = inspect_bytes(Path::new(&name), &bytes, &InspectOptions::default()) {
                assert!(err.to_string().contains(&name), "{err}");
            }
        }
    }
}
