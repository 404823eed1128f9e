//! The inspection result: one serialisable description of a binary as it
//! matters for a cold start. Every format (ELF, PE, Mach-O) fills the same
//! structure so reports, JSON and later analyses read one shape.
//!
//! Field names are part of coldstart's stable JSON output; docs/inspect-json.md
//! documents them. Add fields, never rename them.

use serde::Serialize;
use std::collections::BTreeMap;

/// The page size used for page counts unless the caller asks for another.
pub const DEFAULT_PAGE_SIZE: u64 = 4096;

/// What coldstart knows about one binary file.
#[derive(Debug, Clone, Serialize)]
pub struct Inspection {
    pub path: String,
    pub format: Format,
    /// File size in bytes.
    pub size: u64,
    /// Page size the `pages` counts below are expressed in.
    pub page_size: u64,
    pub header: Header,
    /// Program headers (ELF), segments (Mach-O); empty for PE.
    pub segments: Vec<Segment>,
    pub sections: Vec<Section>,
    /// Byte ranges of the file that no section claims (headers, padding,
    /// trailing data), so that sections plus regions add up to `size`.
    pub regions: Vec<Region>,
    /// ELF dynamic section, absent for static or non-ELF files.
    pub dynamic: Option<Dynamic>,
    pub relocations: Relocations,
    pub init_array: Initializers,
    /// PE-only facts (image base, ASLR, imports).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pe: Option<PeDetails>,
    /// Mach-O-only facts (dylibs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub macho: Option<MachoDetails>,
    pub warnings: Vec<Warning>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Format {
    Elf,
    Pe,
    Macho,
}

impl Format {
    pub fn name(self) -> &'static str {
        match self {
            Format::Elf => "ELF",
            Format::Pe => "PE",
            Format::Macho => "Mach-O",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// Position-dependent executable (ELF ET_EXEC, PE EXE without DYNAMICBASE).
    Executable,
    /// Position-independent executable.
    Pie,
    /// Shared object / DLL / dylib.
    SharedObject,
    /// Relocatable object file (.o).
    Relocatable,
    Core,
    Other,
}

impl Kind {
    pub fn describe(self) -> &'static str {
        match self {
            Kind::Executable => "executable",
            Kind::Pie => "position-independent executable",
            Kind::SharedObject => "shared object",
            Kind::Relocatable => "relocatable object",
            Kind::Core => "core dump",
            Kind::Other => "other",
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Header {
    pub kind: Kind,
    /// Machine name as the format spells it, e.g. "x86_64", "aarch64", "i386".
    pub machine: String,
    /// 32 or 64.
    pub bits: u8,
    /// "little" or "big".
    pub endian: &'static str,
    pub entry: u64,
    /// Hex build-id (ELF NT_GNU_BUILD_ID, Mach-O LC_UUID, PE CodeView GUID+age).
    pub build_id: Option<String>,
    /// ELF PT_INTERP (the dynamic loader), Mach-O LC_LOAD_DYLINKER.
    pub interpreter: Option<String>,
    /// No full symbol table (.symtab / COFF symbols); only dynamic symbols remain.
    pub stripped: bool,
    /// DWARF (or PDB reference) present in the file.
    pub debug_info: bool,
    /// ELF .gnu_debuglink file name: debug info lives in a separate file.
    pub debug_link: Option<String>,
    /// Number of entries in the full symbol table (ELF .symtab, including the
    /// null entry, as readelf counts), 0 when stripped.
    pub symbols: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Segment {
    pub index: usize,
    /// ELF: "LOAD", "DYNAMIC", "GNU_RELRO", ...; Mach-O: "SEGMENT".
    pub kind: String,
    /// Mach-O segment name; None for ELF.
    pub name: Option<String>,
    pub offset: u64,
    pub file_size: u64,
    pub address: u64,
    pub memory_size: u64,
    /// "R", "W", "X" or "-" in that order, e.g. "R-X".
    pub flags: String,
    pub align: u64,
    /// file_size / file size.
    pub share_of_file: f64,
    /// Pages of the file that [offset, offset + file_size) overlaps.
    pub pages: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Section {
    pub index: usize,
    pub name: String,
    /// ELF sh_type without the SHT_ prefix ("PROGBITS", "NOBITS", "RELA", ...);
    /// PE "code", "data", "bss", "other"; Mach-O the section type.
    pub kind: String,
    /// ELF flag letters as readelf prints them ("WAX"); PE "RWX" access.
    pub flags: String,
    pub offset: u64,
    /// Bytes the section occupies in the file (0 for NOBITS / uninitialised).
    pub file_size: u64,
    pub address: u64,
    /// Bytes the section occupies in memory once loaded (0 if not allocated).
    pub memory_size: u64,
    pub share_of_file: f64,
    pub pages: u64,
    /// Index (into `segments`) of the loadable segment that maps this section.
    pub segment: Option<usize>,
}

/// Bytes of the file outside every section.
#[derive(Debug, Clone, Serialize)]
pub struct Region {
    /// "[ELF header]", "[program headers]", "[section headers]", "[padding]", ...
    pub label: String,
    pub offset: u64,
    pub size: u64,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Dynamic {
    /// File offset and size of PT_DYNAMIC.
    pub offset: u64,
    pub size: u64,
    pub address: u64,
    /// offset / file size: where in the file the loader's first read lands.
    pub position_in_file: f64,
    /// The loadable segment holding it.
    pub segment: Option<usize>,
    pub entries: u64,
    pub soname: Option<String>,
    pub needed: Vec<String>,
    pub rpath: Vec<String>,
    pub runpath: Vec<String>,
    /// DT_FLAGS names (ORIGIN, SYMBOLIC, TEXTREL, BIND_NOW, STATIC_TLS).
    pub flags: Vec<String>,
    /// DT_FLAGS_1 names (NOW, PIE, NODELETE, ...).
    pub flags_1: Vec<String>,
    /// All symbols bound at load time (DT_BIND_NOW, DF_BIND_NOW or DF_1_NOW).
    pub bind_now: bool,
    /// Text relocations: the loader must write into code pages.
    pub textrel: bool,
    pub gnu_hash: bool,
    pub sysv_hash: bool,
    /// Entries of the dynamic symbol table, including the null entry.
    pub dynamic_symbols: u64,
    /// DT_RELR is used.
    pub relr: bool,
    /// The object needs the GLIBC_ABI_DT_RELR version.
    pub relr_version_need: bool,
    /// The object defines GLIBC_ABI_DT_RELR itself (glibc's libc.so.6).
    pub relr_version_defined: bool,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Relocations {
    /// Every relocation the loader applies, RELR entries decoded.
    pub total: u64,
    /// Relative relocations (R_*_RELATIVE plus decoded RELR).
    pub relative: u64,
    /// Relocations that name a symbol: each is a symbol lookup for the loader.
    pub symbolic: u64,
    /// Distinct symbols those lookups name.
    pub distinct_symbols: u64,
    /// File bytes of the relocation sections counted here.
    pub bytes: u64,
    pub share_of_file: f64,
    /// Standard type name -> count, RELR excluded (it has no type).
    pub by_type: BTreeMap<String, u64>,
    pub sections: Vec<RelocationSection>,
    /// Addresses .relr.dyn relocates, in table order.
    pub relr_offsets: Vec<u64>,
    /// What packing the relative relocations as RELR would give.
    pub relr_estimate: Option<RelrEstimate>,
    pub pages_written: PagesWritten,
}

#[derive(Debug, Clone, Serialize)]
pub struct RelocationSection {
    pub name: String,
    /// "rela", "rel", "relr", "crel" (ELF); "pe_base" (PE); "macho_rebase",
    /// "macho_bind", "macho_chained" (Mach-O).
    pub format: String,
    pub offset: u64,
    pub size: u64,
    /// Table entries (RELR: words; PE: blocks).
    pub entries: u64,
    /// Relocations those entries stand for (RELR decoded, PE fixups).
    pub relocations: u64,
    pub share_of_file: f64,
    /// Applied by the loader (ELF SHF_ALLOC); static-link relocations are not.
    pub dynamic: bool,
    pub by_type: BTreeMap<String, u64>,
}

/// Exact size of the relative relocations when encoded as RELR.
#[derive(Debug, Clone, Serialize)]
pub struct RelrEstimate {
    /// Relative relocations still stored as REL/RELA entries.
    pub relative_in_tables: u64,
    /// Of those, the ones RELR can express (word-aligned offsets).
    pub packable: u64,
    /// Bytes these take now (table entries) plus any existing RELR words.
    pub current_bytes: u64,
    /// Bytes of one RELR table encoding every relative relocation that can be.
    pub relr_bytes: u64,
    pub saving_bytes: u64,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct PagesWritten {
    /// Distinct pages (of `page_size`) that loader relocations write.
    pub total: u64,
    pub by_section: Vec<SectionPages>,
}

#[derive(Debug, Clone, Serialize)]
pub struct SectionPages {
    pub section: String,
    pub relocations: u64,
    pub pages: u64,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Initializers {
    /// Entries of .init_array (ELF), __mod_init_func (Mach-O).
    pub count: u64,
    pub entries: Vec<Initializer>,
    /// .preinit_array entries.
    pub preinit_count: u64,
    /// .fini_array entries.
    pub fini_count: u64,
    /// DT_INIT function, run before .init_array.
    pub init_function: Option<Initializer>,
    /// Legacy .ctors entries (sentinels excluded); they run last to first.
    pub ctors_count: u64,
    pub ctors: Vec<Initializer>,
    /// Distinct pages that the initializer functions start on.
    pub code_pages: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Initializer {
    /// Address of the slot in the array (0 for DT_INIT, which has none).
    pub slot: u64,
    /// Function address, once relocations are applied (None if unknown).
    pub target: Option<u64>,
    pub symbol: Option<String>,
    pub demangled: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct PeDetails {
    pub image_base: u64,
    pub image_size: u64,
    /// IMAGE_DLLCHARACTERISTICS_DYNAMIC_BASE: ASLR may move the image.
    pub dynamic_base: bool,
    pub high_entropy_va: bool,
    /// Base relocations were stripped (IMAGE_FILE_RELOCS_STRIPPED).
    pub relocs_stripped: bool,
    /// Imported DLL names, in import table order.
    pub imports: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct MachoDetails {
    /// LC_LOAD_DYLIB and friends, in load-command order.
    pub dylibs: Vec<String>,
    /// MH_PIE.
    pub pie: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct Warning {
    /// Stable kebab-case identifier, e.g. "bss-shares-file-page".
    pub code: &'static str,
    pub message: String,
}

/// Preferred address ranges of two PE images that overlap: one of them
/// would be rebased at load time.
#[derive(Debug, Clone, Serialize)]
pub struct ImageOverlap {
    pub first: String,
    pub second: String,
    pub first_range: [u64; 2],
    pub second_range: [u64; 2],
}

/// Pages of `page_size` that the byte range [start, start + len) overlaps.
pub fn pages_spanned(start: u64, len: u64, page_size: u64) -> u64 {
    if len == 0 {
        return 0;
    }
    let end = start.saturating_add(len);
    end.div_ceil(page_size) - start / page_size
}

/// Access as "R", "W", "X" or "-" in that order, e.g. "R-X".
pub fn rwx(read: bool, write: bool, execute: bool) -> String {
    [(read, 'R'), (write, 'W'), (execute, 'X')]
        .iter()
        .map(|&(on, letter)| if on { letter } else { '-' })
        .collect()
}

/// `part / whole` as a fraction, 0 when `whole` is 0.
pub fn share(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}

/// Fills `regions` with the byte ranges of [0, size) not covered by any of
/// `claimed` (label, offset, size), so that every byte is accounted for.
/// `claimed` ranges may overlap and come in any order.
pub fn unclaimed_regions(size: u64, claimed: &mut [(u64, u64)]) -> Vec<Region> {
    claimed.sort_unstable();
    let mut regions = Vec::new();
    let mut cursor = 0u64;
    for &(offset, len) in claimed.iter() {
        let offset = offset.min(size);
        let end = offset.saturating_add(len).min(size);
        if offset > cursor {
            regions.push(Region {
                label: "[unclaimed]".to_string(),
                offset: cursor,
                size: offset - cursor,
            });
        }
        cursor = cursor.max(end);
    }
    if cursor < size {
        regions.push(Region {
            label: "[unclaimed]".to_string(),
            offset: cursor,
            size: size - cursor,
        });
    }
    regions
}

/// Bytes in the largest binary unit that keeps the number readable.
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_bytes_picks_the_unit() {
        assert_eq!(human_bytes(0), "0 B");
        assert_eq!(human_bytes(1023), "1023 B");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(178_468_864), "170.2 MiB");
        assert_eq!(human_bytes(3 << 30), "3.0 GiB");
        assert_eq!(human_bytes(5 << 40), "5.0 TiB");
        assert_eq!(human_bytes(3 << 50), "3.0 PiB");
        // 2^64 - 1 bytes is just under 2^14 PiB.
        assert_eq!(human_bytes(u64::MAX), "16384.0 PiB");
    }

    #[test]
    fn pages_spanned_counts_partial_pages() {
        assert_eq!(pages_spanned(0, 0, 4096), 0);
        assert_eq!(pages_spanned(0, 1, 4096), 1);
        assert_eq!(pages_spanned(0, 4096, 4096), 1);
        assert_eq!(pages_spanned(0, 4097, 4096), 2);
        assert_eq!(pages_spanned(4095, 2, 4096), 2);
        assert_eq!(pages_spanned(8192, 4096, 4096), 1);
    }

    #[test]
    fn unclaimed_regions_fill_gaps_only() {
        let mut claimed = vec![(100, 50), (0, 64), (120, 100)];
        let regions = unclaimed_regions(300, &mut claimed);
        let spans: Vec<(u64, u64)> = regions.iter().map(|r| (r.offset, r.size)).collect();
        assert_eq!(spans, vec![(64, 36), (220, 80)]);
    }
}
