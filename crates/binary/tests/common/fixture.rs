//! A hand-laid-out ELF64 shared object whose every byte the test chose, so
//! its relocations, pages, initializers and layout problems are known
//! without asking the code under test.
//!
//! Layout (vaddr = file offset in LOAD #0, file offset + 0x1000 in LOAD #1):
//!   0x0000 ELF header, 0x40 program headers (LOAD R-X, LOAD RW-, DYNAMIC)
//!   0x0100 .dynstr   0x0180 .dynsym (2)   0x01c0 .hash (SysV only)
//!   0x0200 .rela.dyn (5 entries)          0x0300 .relr.dyn (4 words)
//!   0x1000 .text: func_a 0x1000, func_b 0x1100, func_c 0x1800
//!   0x3000 .init_array (3 slots)          0x3040 .ctors (-1, a, c, 0)
//!   0x3100 .dynamic   0x3800 .data (to 0x4100)   0x4100 .bss (to 0x5000)
//!   then .symtab, .strtab, .shstrtab and the section headers (not loaded).

#![allow(dead_code)]

pub const FUNC_A: u64 = 0x1000;
pub const FUNC_B: u64 = 0x1100;
pub const FUNC_C: u64 = 0x1800;

const R_X86_64_64: u64 = 1;
const R_X86_64_GLOB_DAT: u64 = 6;
const R_X86_64_RELATIVE: u64 = 8;

/// (offset, type, symbol, addend) of .rela.dyn.
pub const RELA: [(u64, u64, u64, i64); 5] = [
    (0x3000, R_X86_64_RELATIVE, 0, FUNC_A as i64),
    (0x3008, R_X86_64_64, 1, 0),
    (0x3800, R_X86_64_GLOB_DAT, 1, 0),
    (0x4008, R_X86_64_RELATIVE, 0, FUNC_B as i64),
    // Not word-aligned: RELR cannot express it.
    (0x4011, R_X86_64_RELATIVE, 0, FUNC_A as i64),
];

/// What the RELR words below relocate.
pub const RELR_OFFSETS: [u64; 5] = [0x3010, 0x3048, 0x3050, 0x3808, 0x3810];

/// RELR words encoding RELR_OFFSETS, by hand: an address, then a bitmap of
/// the 63 words after it (bit n+1 = word n), then a second address/bitmap.
const RELR_WORDS: [u64; 4] = [
    0x3010,
    // 0x3048 and 0x3050 are words 6 and 7 after 0x3018.
    (1 << 7) | (1 << 8) | 1,
    0x3808,
    // 0x3810 is word 0 after 0x3810.
    (1 << 1) | 1,
];

struct Image(Vec<u8>);

impl Image {
    fn put(&mut self, offset: usize, bytes: &[u8]) {
        if self.0.len() < offset + bytes.len() {
            self.0.resize(offset + bytes.len(), 0);
        }
        self.0[offset..offset + bytes.len()].copy_from_slice(bytes);
    }
    fn u16(&mut self, offset: usize, v: u16) {
        self.put(offset, &v.to_le_bytes());
    }
    fn u32(&mut self, offset: usize, v: u32) {
        self.put(offset, &v.to_le_bytes());
    }
    fn u64(&mut self, offset: usize, v: u64) {
        self.put(offset, &v.to_le_bytes());
    }
}

struct Shdr {
    name: &'static str,
    kind: u32,
    flags: u64,
    addr: u64,
    offset: u64,
    size: u64,
    link: u32,
    info: u32,
    align: u64,
    entsize: u64,
}

/// The fixture; with `section_headers` false the file has none, and
/// everything must be found through PT_DYNAMIC as the loader does.
pub fn shared_object(section_headers: bool) -> Vec<u8> {
    let mut f = Image(vec![0; 0x3100]);

    // Program headers: type, flags, offset, vaddr, filesz, memsz, align.
    let phdrs: [(u32, u32, u64, u64, u64, u64, u64); 3] = [
        (1, 5, 0, 0, 0x2000, 0x2000, 0x1000),
        (1, 6, 0x2000, 0x3000, 0x1100, 0x2000, 0x1000),
        (2, 6, 0x2100, 0x3100, 0x110, 0x110, 8),
    ];
    for (i, &(kind, flags, offset, vaddr, filesz, memsz, align)) in phdrs.iter().enumerate() {
        let at = 0x40 + i * 56;
        f.u32(at, kind);
        f.u32(at + 4, flags);
        f.u64(at + 8, offset);
        f.u64(at + 16, vaddr);
        f.u64(at + 24, vaddr);
        f.u64(at + 32, filesz);
        f.u64(at + 40, memsz);
        f.u64(at + 48, align);
    }

    // .dynstr: 1 libc.so.6, 11 libfixture.so, 25 func_c
    f.put(0x100, b"\0libc.so.6\0libfixture.so\0func_c\0");
    // .dynsym: null, func_c (global function in .text, section 6)
    f.u32(0x180 + 24, 25);
    f.put(0x180 + 24 + 4, &[0x12, 0]);
    f.u16(0x180 + 24 + 6, 6);
    f.u64(0x180 + 24 + 8, FUNC_C);
    f.u64(0x180 + 24 + 16, 0x100);
    // .hash: nbucket 1, nchain 2, bucket [1], chain [0, 0]
    for (i, v) in [1u32, 2, 1, 0, 0].iter().enumerate() {
        f.u32(0x1c0 + i * 4, *v);
    }
    for (i, &(offset, kind, sym, addend)) in RELA.iter().enumerate() {
        let at = 0x200 + i * 24;
        f.u64(at, offset);
        f.u64(at + 8, (sym << 32) | kind);
        f.u64(at + 16, addend as u64);
    }
    for (i, word) in RELR_WORDS.iter().enumerate() {
        f.u64(0x300 + i * 8, *word);
    }
    f.put(0x1000, &[0xc3; 0x1000]);

    // .init_array slots: RELA relative, RELA symbolic, RELR (value in place)
    f.u64(0x2000 + 16, FUNC_B);
    // .ctors: start marker, two constructors (RELR adds the base), end marker
    f.u64(0x2040, u64::MAX);
    f.u64(0x2048, FUNC_A);
    f.u64(0x2050, FUNC_C);
    f.u64(0x2058, 0);
    let dynamic: [(u64, u64); 17] = [
        (1, 1),       // DT_NEEDED libc.so.6
        (14, 11),     // DT_SONAME libfixture.so
        (4, 0x1c0),   // DT_HASH
        (5, 0x100),   // DT_STRTAB
        (6, 0x180),   // DT_SYMTAB
        (10, 32),     // DT_STRSZ
        (11, 24),     // DT_SYMENT
        (7, 0x200),   // DT_RELA
        (8, 0x78),    // DT_RELASZ
        (9, 24),      // DT_RELAENT
        (36, 0x300),  // DT_RELR
        (35, 32),     // DT_RELRSZ
        (37, 8),      // DT_RELRENT
        (25, 0x3000), // DT_INIT_ARRAY
        (27, 24),     // DT_INIT_ARRAYSZ
        (22, 0),      // DT_TEXTREL
        (0, 0),       // DT_NULL
    ];
    for (i, (tag, value)) in dynamic.iter().enumerate() {
        f.u64(0x2100 + i * 16, *tag);
        f.u64(0x2100 + i * 16 + 8, *value);
    }
    // .data: values RELR relocates in place
    f.u64(0x2808, FUNC_A);
    f.u64(0x2810, FUNC_B);

    if !section_headers {
        return f.0;
    }

    // .symtab at 0x3100: null, func_a, func_b, func_c (global functions)
    let strtab = b"\0func_a\0func_b\0func_c\0";
    for (i, (name, value)) in [(1u32, FUNC_A), (8, FUNC_B), (15, FUNC_C)]
        .iter()
        .enumerate()
    {
        let at = 0x3100 + (i + 1) * 24;
        f.u32(at, *name);
        f.put(at + 4, &[0x12, 0]);
        f.u16(at + 6, 6);
        f.u64(at + 8, *value);
        f.u64(at + 16, 0x100);
    }
    f.put(0x3160, strtab);

    let shdrs = [
        Shdr {
            name: ".dynstr",
            kind: 3,
            flags: 2,
            addr: 0x100,
            offset: 0x100,
            size: 32,
            link: 0,
            info: 0,
            align: 1,
            entsize: 0,
        },
        Shdr {
            name: ".dynsym",
            kind: 11,
            flags: 2,
            addr: 0x180,
            offset: 0x180,
            size: 48,
            link: 1,
            info: 1,
            align: 8,
            entsize: 24,
        },
        Shdr {
            name: ".hash",
            kind: 5,
            flags: 2,
            addr: 0x1c0,
            offset: 0x1c0,
            size: 20,
            link: 2,
            info: 0,
            align: 4,
            entsize: 4,
        },
        Shdr {
            name: ".rela.dyn",
            kind: 4,
            flags: 2,
            addr: 0x200,
            offset: 0x200,
            size: 0x78,
            link: 2,
            info: 0,
            align: 8,
            entsize: 24,
        },
        Shdr {
            name: ".relr.dyn",
            kind: 19,
            flags: 2,
            addr: 0x300,
            offset: 0x300,
            size: 32,
            link: 0,
            info: 0,
            align: 8,
            entsize: 8,
        },
        Shdr {
            name: ".text",
            kind: 1,
            flags: 6,
            addr: 0x1000,
            offset: 0x1000,
            size: 0x1000,
            link: 0,
            info: 0,
            align: 16,
            entsize: 0,
        },
        Shdr {
            name: ".init_array",
            kind: 14,
            flags: 3,
            addr: 0x3000,
            offset: 0x2000,
            size: 24,
            link: 0,
            info: 0,
            align: 8,
            entsize: 8,
        },
        Shdr {
            name: ".ctors",
            kind: 1,
            flags: 3,
            addr: 0x3040,
            offset: 0x2040,
            size: 32,
            link: 0,
            info: 0,
            align: 8,
            entsize: 0,
        },
        Shdr {
            name: ".dynamic",
            kind: 6,
            flags: 3,
            addr: 0x3100,
            offset: 0x2100,
            size: 0x110,
            link: 1,
            info: 0,
            align: 8,
            entsize: 16,
        },
        Shdr {
            name: ".data",
            kind: 1,
            flags: 3,
            addr: 0x3800,
            offset: 0x2800,
            size: 0x900,
            link: 0,
            info: 0,
            align: 8,
            entsize: 0,
        },
        Shdr {
            name: ".bss",
            kind: 8,
            flags: 3,
            addr: 0x4100,
            offset: 0x3100,
            size: 0xf00,
            link: 0,
            info: 0,
            align: 8,
            entsize: 0,
        },
        Shdr {
            name: ".symtab",
            kind: 2,
            flags: 0,
            addr: 0,
            offset: 0x3100,
            size: 96,
            link: 13,
            info: 1,
            align: 8,
            entsize: 24,
        },
        Shdr {
            name: ".strtab",
            kind: 3,
            flags: 0,
            addr: 0,
            offset: 0x3160,
            size: strtab.len() as u64,
            link: 0,
            info: 0,
            align: 1,
            entsize: 0,
        },
        Shdr {
            name: ".shstrtab",
            kind: 3,
            flags: 0,
            addr: 0,
            offset: 0,
            size: 0,
            link: 0,
            info: 0,
            align: 1,
            entsize: 0,
        },
    ];
    let mut shstrtab = vec![0u8];
    let mut names = Vec::new();
    for s in &shdrs {
        names.push(shstrtab.len() as u32);
        shstrtab.extend_from_slice(s.name.as_bytes());
        shstrtab.push(0);
    }
    let shstrtab_offset = 0x3180usize;
    f.put(shstrtab_offset, &shstrtab);
    let shoff = (shstrtab_offset + shstrtab.len()).next_multiple_of(8);
    for (i, s) in shdrs.iter().enumerate() {
        let at = shoff + (i + 1) * 64;
        let (offset, size) = if s.name == ".shstrtab" {
            (shstrtab_offset as u64, shstrtab.len() as u64)
        } else {
            (s.offset, s.size)
        };
        f.u32(at, names[i]);
        f.u32(at + 4, s.kind);
        f.u64(at + 8, s.flags);
        f.u64(at + 16, s.addr);
        f.u64(at + 24, offset);
        f.u64(at + 32, size);
        f.u32(at + 40, s.link);
        f.u32(at + 44, s.info);
        f.u64(at + 48, s.align);
        f.u64(at + 56, s.entsize);
    }
    f.put(shoff, &[0; 64]);
    f.u64(0x28, shoff as u64);
    f.u16(0x3c, shdrs.len() as u16 + 1);
    f.u16(0x3e, shdrs.len() as u16);
    f.0
}

/// Writes the ELF header (done last: it points at the section headers).
pub fn finish(mut bytes: Vec<u8>) -> Vec<u8> {
    let mut f = Image(std::mem::take(&mut bytes));
    f.put(0, b"\x7fELF\x02\x01\x01\0");
    f.u16(0x10, 3); // ET_DYN
    f.u16(0x12, 62); // EM_X86_64
    f.u32(0x14, 1);
    f.u64(0x18, FUNC_A);
    f.u64(0x20, 0x40);
    f.u16(0x34, 64);
    f.u16(0x36, 56);
    f.u16(0x38, 3);
    f.u16(0x3a, 64);
    f.0
}

/// The fixture as a complete file.
pub fn build(section_headers: bool) -> Vec<u8> {
    finish(shared_object(section_headers))
}
