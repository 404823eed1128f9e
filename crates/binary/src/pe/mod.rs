//! PE (Windows) images in coldstart's common model: headers, section
//! layout with every file byte accounted for, imported DLLs, TLS callbacks,
//! and the base relocations a rebase would apply. Also finds images whose
//! preferred address ranges collide, since one of each pair gets rebased.

mod base_relocs;

use crate::model::{
    self, Format, Header, ImageOverlap, Initializer, Initializers, Inspection, Kind, PagesWritten,
    PeDetails, Region, RelocationSection, Relocations, Section, SectionPages, Warning,
};
use crate::{Error, InspectOptions, Result};
use object::LittleEndian as LE;
use object::pe;
use object::read::pe::{ImageNtHeaders, ImageOptionalHeader, PeFile, SectionTable};
use object::{Object, pod};
use std::collections::BTreeMap;
use std::path::Path;

/// Size of the COFF file header and of one section header, per the PE spec.
const FILE_HEADER_SIZE: u64 = 20;
const SECTION_HEADER_SIZE: u64 = 40;
/// Size of one COFF symbol table record.
const SYMBOL_SIZE: u64 = 18;

pub(crate) fn inspect(path: &Path, data: &[u8], options: &InspectOptions) -> Result<Inspection> {
    let ctx = Ctx { path };
    match object::read::pe::optional_header_magic(data) {
        Ok(pe::IMAGE_NT_OPTIONAL_HDR32_MAGIC) => {
            inspect_image::<pe::ImageNtHeaders32>(&ctx, data, options)
        }
        Ok(pe::IMAGE_NT_OPTIONAL_HDR64_MAGIC) => {
            inspect_image::<pe::ImageNtHeaders64>(&ctx, data, options)
        }
        Ok(magic) => Err(ctx.malformed(format!(
            "optional header magic {magic:#x} is neither PE32 (0x10b) nor PE32+ (0x20b)"
        ))),
        Err(err) => Err(ctx.malformed(err.to_string())),
    }
}

/// Every pair of PE images whose preferred ranges
/// [image_base, image_base + image_size) overlap. Only one of each pair can
/// load where it asked; the other is rebased and pays for all of its base
/// relocations. Non-PE inspections are ignored. So are pairs of two
/// executables, which never share a process, and a pair naming the same
/// path twice (one file is one image).
pub fn image_overlaps(files: &[Inspection]) -> Vec<ImageOverlap> {
    let images: Vec<(&str, bool, [u64; 2])> = files
        .iter()
        .filter(|file| file.format == Format::Pe)
        .filter_map(|file| {
            let pe = file.pe.as_ref()?;
            let end = pe.image_base.saturating_add(pe.image_size);
            let is_dll = file.header.kind == Kind::SharedObject;
            (end > pe.image_base).then_some((file.path.as_str(), is_dll, [pe.image_base, end]))
        })
        .collect();
    let mut overlaps = Vec::new();
    for (i, &(first, first_dll, first_range)) in images.iter().enumerate() {
        for &(second, second_dll, second_range) in images.iter().skip(i + 1) {
            if first == second || !(first_dll || second_dll) {
                continue;
            }
            if first_range[0] < second_range[1] && second_range[0] < first_range[1] {
                overlaps.push(ImageOverlap {
                    first: first.to_string(),
                    second: second.to_string(),
                    first_range,
                    second_range,
                });
            }
        }
    }
    overlaps
}

struct Ctx<'a> {
    path: &'a Path,
}

impl Ctx<'_> {
    fn malformed(&self, detail: impl Into<String>) -> Error {
        Error::malformed(self.path, Format::Pe, detail)
    }
}

fn inspect_image<Pe: ImageNtHeaders>(
    ctx: &Ctx,
    data: &[u8],
    options: &InspectOptions,
) -> Result<Inspection> {
    let file = PeFile::<Pe>::parse(data).map_err(|err| ctx.malformed(err.to_string()))?;
    let size = data.len() as u64;
    let page_size = options.page_size;
    let nt = file.nt_headers();
    let optional = nt.optional_header();
    let image_base = optional.image_base();
    let image_size = u64::from(optional.size_of_image());
    if image_base.checked_add(image_size).is_none() {
        return Err(ctx.malformed(format!(
            "image base {image_base:#x} plus image size {image_size:#x} overflows the address space"
        )));
    }
    let section_table = file.section_table();

    let sections = sections(ctx, data, nt, &section_table, image_base, page_size)?;
    let regions = regions(ctx, &file, size, &sections)?;
    let imports = imports(ctx, &file)?;
    let relocations = relocations(ctx, &file, &sections, size, page_size)?;
    let init_array = tls_callbacks(ctx, &file, page_size)?;
    let mut warnings = Vec::new();
    let build_id = pdb_identity(&file, &mut warnings);
    let loading = Loading::of(&file);
    loading.warn(&mut warnings);
    let header = header(ctx, &file, &sections, &loading, build_id)?;

    Ok(Inspection {
        path: ctx.path.display().to_string(),
        format: Format::Pe,
        size,
        page_size,
        header,
        segments: Vec::new(),
        sections,
        regions,
        dynamic: None,
        relocations,
        init_array,
        pe: Some(PeDetails {
            image_base,
            image_size,
            dynamic_base: loading.dynamic_base,
            high_entropy_va: loading.high_entropy_va,
            relocs_stripped: loading.relocs_stripped,
            imports,
        }),
        macho: None,
        warnings,
    })
}

/// The PDB identity (GUID and age) from the debug directory; a debug
/// directory that cannot be read is a warning, not an error.
fn pdb_identity<Pe: ImageNtHeaders>(
    file: &PeFile<Pe>,
    warnings: &mut Vec<Warning>,
) -> Option<String> {
    match file.pdb_info() {
        Ok(info) => info.map(|cv| codeview_id(cv.guid(), cv.age())),
        Err(err) => {
            warnings.push(Warning {
                code: "pe-debug-directory-unreadable",
                message: format!(
                    "the debug directory could not be read ({err}), so the PDB identity is \
                     unknown; relink to regenerate it if debuggers must find this image's symbols"
                ),
            });
            None
        }
    }
}

/// How the loader may place the image: from the file header's
/// characteristics and the optional header's DLL characteristics.
struct Loading {
    kind: Kind,
    is_dll: bool,
    dynamic_base: bool,
    high_entropy_va: bool,
    relocs_stripped: bool,
}

impl Loading {
    fn of<Pe: ImageNtHeaders>(file: &PeFile<Pe>) -> Loading {
        let nt = file.nt_headers();
        let characteristics = nt.file_header().characteristics.get(LE);
        let dll_characteristics = nt.optional_header().dll_characteristics();
        let dynamic_base = dll_characteristics.contains(pe::IMAGE_DLLCHARACTERISTICS_DYNAMIC_BASE);
        let is_dll = characteristics.contains(pe::IMAGE_FILE_DLL);
        let kind = if is_dll {
            Kind::SharedObject
        } else if dynamic_base {
            Kind::Pie
        } else {
            Kind::Executable
        };
        Loading {
            kind,
            is_dll,
            dynamic_base,
            high_entropy_va: dll_characteristics
                .contains(pe::IMAGE_DLLCHARACTERISTICS_HIGH_ENTROPY_VA),
            relocs_stripped: characteristics.contains(pe::IMAGE_FILE_RELOCS_STRIPPED),
        }
    }

    /// What keeps the image from loading anywhere, and how to relink it.
    fn warn(&self, warnings: &mut Vec<Warning>) {
        if !self.dynamic_base {
            warnings.push(Warning {
                code: "pe-no-dynamic-base",
                message: "the image is not ASLR-capable (no DYNAMICBASE): it always asks for its \
                          preferred base; link with /DYNAMICBASE (MSVC) or -Wl,--dynamicbase (MinGW)"
                    .to_string(),
            });
        }
        if self.relocs_stripped {
            warnings.push(Warning {
                code: "pe-relocs-stripped",
                message: if self.is_dll {
                    "base relocations are stripped: the DLL fails to load whenever its preferred \
                     range is taken; relink without /FIXED (MSVC) or with --enable-reloc-section (GNU ld)"
                } else {
                    "base relocations are stripped: the image can only load at its preferred base \
                     and cannot use ASLR; relink without /FIXED (MSVC) or with --enable-reloc-section (GNU ld)"
                }
                .to_string(),
            });
        }
    }
}

/// The common header: kind, machine, entry, identity, symbols and debug
/// information.
fn header<Pe: ImageNtHeaders>(
    ctx: &Ctx,
    file: &PeFile<Pe>,
    sections: &[Section],
    loading: &Loading,
    build_id: Option<String>,
) -> Result<Header> {
    let nt = file.nt_headers();
    let file_header = nt.file_header();
    let optional = nt.optional_header();
    let image_base = optional.image_base();
    let symbol_pointer = file_header.pointer_to_symbol_table.get(LE);
    let symbol_count = file_header.number_of_symbols.get(LE);
    let stripped = symbol_pointer == 0 || symbol_count == 0;
    let debug_directory = file
        .data_directory(pe::IMAGE_DIRECTORY_ENTRY_DEBUG)
        .is_some_and(|dir| dir.size.get(LE) != 0);
    let dwarf = sections.iter().any(|section| section.name == ".debug_info");
    let entry_rva = u64::from(optional.address_of_entry_point());
    // A DLL without DllMain has entry RVA 0: report no entry rather than
    // the image base.
    let entry = if entry_rva == 0 {
        0
    } else {
        image_base.checked_add(entry_rva).ok_or_else(|| {
            ctx.malformed(format!(
                "entry point RVA {entry_rva:#x} overflows the image base"
            ))
        })?
    };
    Ok(Header {
        kind: loading.kind,
        machine: machine_name(file_header.machine.get(LE)),
        bits: if nt.is_type_64() { 64 } else { 32 },
        endian: "little",
        entry,
        build_id,
        interpreter: None,
        stripped,
        debug_info: debug_directory || dwarf,
        debug_link: None,
        symbols: if stripped { 0 } else { u64::from(symbol_count) },
    })
}

fn machine_name(machine: pe::Machine) -> String {
    match machine {
        pe::IMAGE_FILE_MACHINE_AMD64 => "x86_64".to_string(),
        pe::IMAGE_FILE_MACHINE_I386 => "i386".to_string(),
        pe::IMAGE_FILE_MACHINE_ARM64 => "aarch64".to_string(),
        pe::IMAGE_FILE_MACHINE_ARM
        | pe::IMAGE_FILE_MACHINE_ARMNT
        | pe::IMAGE_FILE_MACHINE_THUMB => "arm".to_string(),
        other => match other.name() {
            Some(name) => name
                .trim_start_matches("IMAGE_FILE_MACHINE_")
                .to_ascii_lowercase(),
            None => format!("{:#06x}", other.0),
        },
    }
}

/// The CodeView identity as symbol servers spell it: the GUID's fields in
/// their textual order, then the age, upper-case hex.
fn codeview_id(guid: [u8; 16], age: u32) -> String {
    let data1 = u32::from_le_bytes([guid[0], guid[1], guid[2], guid[3]]);
    let data2 = u16::from_le_bytes([guid[4], guid[5]]);
    let data3 = u16::from_le_bytes([guid[6], guid[7]]);
    let mut id = format!("{data1:08X}{data2:04X}{data3:04X}");
    for byte in &guid[8..] {
        id.push_str(&format!("{byte:02X}"));
    }
    id.push_str(&format!("{age:X}"));
    id
}

fn sections<Pe: ImageNtHeaders>(
    ctx: &Ctx,
    data: &[u8],
    nt: &Pe,
    table: &SectionTable<'_>,
    image_base: u64,
    page_size: u64,
) -> Result<Vec<Section>> {
    let size = data.len() as u64;
    // Long section names ("/4") live in the COFF string table; a missing or
    // broken table only costs the readable name.
    let strings = nt.symbols(data).ok().map(|symbols| symbols.strings());
    let mut sections = Vec::new();
    for (index, header) in table.iter().enumerate() {
        let name_bytes = strings
            .and_then(|strings| header.name(strings).ok())
            .unwrap_or_else(|| header.raw_name());
        let name = String::from_utf8_lossy(name_bytes).into_owned();
        let flags = header.characteristics.get(LE);
        let offset = u64::from(header.pointer_to_raw_data.get(LE));
        let file_size = u64::from(header.size_of_raw_data.get(LE));
        if file_size != 0 && offset.checked_add(file_size).is_none_or(|end| end > size) {
            return Err(ctx.malformed(format!(
                "section {name} claims file bytes [{offset:#x}, {:#x}) but the file is only \
                 {size:#x} bytes (truncated?)",
                offset.saturating_add(file_size)
            )));
        }
        let virtual_size = u64::from(header.virtual_size.get(LE));
        // The loader maps SizeOfRawData bytes when VirtualSize is zero.
        let memory_size = if virtual_size == 0 {
            file_size
        } else {
            virtual_size
        };
        let rva = u64::from(header.virtual_address.get(LE));
        let address = image_base.checked_add(rva).ok_or_else(|| {
            ctx.malformed(format!(
                "section {name} address {rva:#x} overflows the image base"
            ))
        })?;
        sections.push(Section {
            index,
            name,
            kind: section_kind(flags).to_string(),
            flags: access_letters(flags),
            offset,
            file_size,
            address,
            memory_size,
            share_of_file: model::share(file_size, size),
            pages: model::pages_spanned(offset, file_size, page_size),
            segment: None,
        });
    }
    Ok(sections)
}

fn section_kind(flags: pe::SectionFlags) -> &'static str {
    if flags.contains(pe::IMAGE_SCN_CNT_CODE) {
        "code"
    } else if flags.contains(pe::IMAGE_SCN_CNT_INITIALIZED_DATA) {
        "data"
    } else if flags.contains(pe::IMAGE_SCN_CNT_UNINITIALIZED_DATA) {
        "bss"
    } else {
        "other"
    }
}

fn access_letters(flags: pe::SectionFlags) -> String {
    model::rwx(
        flags.contains(pe::IMAGE_SCN_MEM_READ),
        flags.contains(pe::IMAGE_SCN_MEM_WRITE),
        flags.contains(pe::IMAGE_SCN_MEM_EXECUTE),
    )
}

/// The file bytes outside every section: headers, alignment padding, and
/// what follows the last section (certificate table, COFF symbols, other
/// overlay data). Only bytes no section claims become regions, so sections
/// plus regions add up to the file size when sections do not overlap.
fn regions<Pe: ImageNtHeaders>(
    ctx: &Ctx,
    file: &PeFile<'_, Pe>,
    size: u64,
    sections: &[Section],
) -> Result<Vec<Region>> {
    let file_header = file.nt_headers().file_header();
    let headers_end = u64::from(file.dos_header().nt_headers_offset())
        + 4
        + FILE_HEADER_SIZE
        + u64::from(file_header.size_of_optional_header.get(LE))
        + SECTION_HEADER_SIZE * u64::from(file_header.number_of_sections.get(LE));
    let mut known = vec![(0, headers_end, "[headers]")];

    if let Some(dir) = file
        .data_directories()
        .get(pe::IMAGE_DIRECTORY_ENTRY_SECURITY)
    {
        // The certificate table's "address" is a file offset, not an RVA.
        let offset = u64::from(dir.virtual_address.get(LE));
        let len = u64::from(dir.size.get(LE));
        let end = offset + len;
        if end > size {
            return Err(ctx.malformed(format!(
                "certificate table [{offset:#x}, {end:#x}) runs past the end of the file \
                 ({size:#x} bytes; truncated?)"
            )));
        }
        known.push((offset, end, "[certificate table]"));
    }

    let symbol_offset = u64::from(file_header.pointer_to_symbol_table.get(LE));
    if symbol_offset != 0 {
        let symbols_end =
            symbol_offset + SYMBOL_SIZE * u64::from(file_header.number_of_symbols.get(LE));
        if symbols_end > size {
            return Err(ctx.malformed(format!(
                "COFF symbol table [{symbol_offset:#x}, {symbols_end:#x}) runs past the end of \
                 the file ({size:#x} bytes; truncated?)"
            )));
        }
        // The string table follows the symbols and starts with its own length.
        let strings_len = file
            .data()
            .get(symbols_end as usize..)
            .and_then(|rest| rest.get(..4))
            .map(|len| u64::from(u32::from_le_bytes([len[0], len[1], len[2], len[3]])))
            .filter(|&len| len >= 4)
            .unwrap_or(0);
        let end = symbols_end.saturating_add(strings_len).min(size);
        known.push((symbol_offset, end, "[COFF symbol table]"));
    }
    known.sort_unstable();

    let mut claimed: Vec<(u64, u64)> = sections
        .iter()
        .filter(|section| section.file_size != 0)
        .map(|section| (section.offset, section.file_size))
        .collect();
    let sections_end = claimed
        .iter()
        .map(|&(offset, len)| offset + len)
        .max()
        .unwrap_or(0)
        .max(headers_end);

    let mut regions = Vec::new();
    for gap in model::unclaimed_regions(size, &mut claimed) {
        let gap_end = gap.offset + gap.size;
        let mut cursor = gap.offset;
        for &(start, end, label) in &known {
            let start = start.max(cursor);
            let end = end.min(gap_end);
            if start >= end {
                continue;
            }
            push_filler(&mut regions, cursor, start, sections_end);
            regions.push(Region {
                label: label.to_string(),
                offset: start,
                size: end - start,
            });
            cursor = end;
        }
        push_filler(&mut regions, cursor, gap_end, sections_end);
    }
    Ok(regions)
}

/// Unlabelled bytes: padding between headers and sections, or overlay data
/// appended after the last section.
fn push_filler(regions: &mut Vec<Region>, start: u64, end: u64, sections_end: u64) {
    if start >= end {
        return;
    }
    let mut piece = |from: u64, to: u64, label: &str| {
        if from < to {
            regions.push(Region {
                label: label.to_string(),
                offset: from,
                size: to - from,
            });
        }
    };
    let split = sections_end.clamp(start, end);
    piece(start, split, "[padding]");
    piece(split, end, "[overlay]");
}

fn imports<Pe: ImageNtHeaders>(ctx: &Ctx, file: &PeFile<'_, Pe>) -> Result<Vec<String>> {
    let bad = |err: object::read::Error| ctx.malformed(format!("import table: {err}"));
    let Some(table) = file.import_table().map_err(bad)? else {
        return Ok(Vec::new());
    };
    let mut names = Vec::new();
    let mut descriptors = table.descriptors().map_err(bad)?;
    while let Some(descriptor) = descriptors.next().map_err(bad)? {
        let name = table.name(descriptor.name.get(LE)).map_err(bad)?;
        names.push(String::from_utf8_lossy(name).into_owned());
    }
    Ok(names)
}

/// Base relocations as the loader would apply them on a rebase. All are
/// image-relative, so `relative == total` and nothing is symbolic.
/// IMAGE_REL_BASED_ABSOLUTE entries only pad blocks to 32-bit alignment and
/// are left out of `total` and `by_type` alike.
fn relocations<Pe: ImageNtHeaders>(
    ctx: &Ctx,
    file: &PeFile<'_, Pe>,
    sections: &[Section],
    size: u64,
    page_size: u64,
) -> Result<Relocations> {
    let Some(dir) = file
        .data_directories()
        .get(pe::IMAGE_DIRECTORY_ENTRY_BASERELOC)
    else {
        return Ok(Relocations::default());
    };
    let rva = dir.virtual_address.get(LE);
    let dir_size = dir.size.get(LE);
    let table = file.section_table();
    let (holder, offset, bytes) =
        base_relocs::locate(file.data(), &table, rva, dir_size).map_err(|e| ctx.malformed(e))?;
    let parsed = base_relocs::parse(bytes).map_err(|e| ctx.malformed(e))?;

    let machine = file.nt_headers().file_header().machine.get(LE);
    let image_base = file.nt_headers().optional_header().image_base();
    let spread = spread_fixups(
        ctx,
        &parsed.fixups,
        sections,
        machine,
        image_base,
        page_size,
    )?;

    let by_type: BTreeMap<String, u64> = spread
        .type_counts
        .into_iter()
        .map(|(typ, count)| (base_relocs::type_name(machine, typ), count))
        .collect();
    let total = parsed.fixups.len() as u64;
    let bytes_len = u64::from(dir_size);
    let name = holder
        .and_then(|index| sections.get(index))
        .map_or_else(|| "[base relocations]".to_string(), |s| s.name.clone());
    Ok(Relocations {
        total,
        relative: total,
        symbolic: 0,
        distinct_symbols: 0,
        bytes: bytes_len,
        share_of_file: model::share(bytes_len, size),
        by_type: by_type.clone(),
        sections: vec![RelocationSection {
            name,
            format: "pe_base".to_string(),
            offset,
            size: bytes_len,
            entries: parsed.blocks,
            relocations: total,
            share_of_file: model::share(bytes_len, size),
            dynamic: true,
            by_type,
        }],
        relr_offsets: Vec::new(),
        relr_estimate: None,
        pages_written: pages_written(&spread.pages, sections),
    })
}

/// The fixups counted by type and spread over the sections and pages
/// they write.
struct FixupSpread {
    type_counts: BTreeMap<u16, u64>,
    pages: base_relocs::PageSpread,
}

fn spread_fixups(
    ctx: &Ctx,
    fixups: &[base_relocs::Fixup],
    sections: &[Section],
    machine: pe::Machine,
    image_base: u64,
    page_size: u64,
) -> Result<FixupSpread> {
    let mut type_counts: BTreeMap<u16, u64> = BTreeMap::new();
    let mut pages = base_relocs::PageSpread::default();
    // Sorted by address so each fixup finds its section by binary search: a
    // large image has millions of fixups.
    let mut by_address: Vec<(u64, u64, usize)> = sections
        .iter()
        .map(|section| (section.address, section.memory_size, section.index))
        .collect();
    by_address.sort_unstable();
    for fixup in fixups {
        *type_counts.entry(fixup.typ).or_default() += 1;
        let address = image_base.checked_add(fixup.rva).ok_or_else(|| {
            ctx.malformed(format!(
                "base relocation at RVA {:#x} overflows the image base",
                fixup.rva
            ))
        })?;
        let candidate = by_address
            .partition_point(|&(start, _, _)| start <= address)
            .checked_sub(1)
            .and_then(|i| by_address.get(i));
        let section = candidate
            .filter(|&&(start, len, _)| address - start < len)
            .map(|&(_, _, index)| index);
        pages.add(
            section,
            address,
            base_relocs::width(machine, fixup.typ),
            page_size,
        );
    }
    Ok(FixupSpread { type_counts, pages })
}

/// The pages the fixups write, in all and per section by name.
fn pages_written(spread: &base_relocs::PageSpread, sections: &[Section]) -> PagesWritten {
    let by_section = spread
        .by_section
        .iter()
        .map(|(section, (count, pages))| SectionPages {
            section: section
                .and_then(|index| sections.get(index))
                .map_or_else(|| "[outside sections]".to_string(), |s| s.name.clone()),
            relocations: *count,
            pages: pages.len() as u64,
        })
        .collect();
    PagesWritten {
        total: spread.total.len() as u64,
        by_section,
    }
}

/// TLS callbacks: the loader calls each before the entry point (and on
/// every thread start), so they are the PE counterpart of .init_array.
/// Targets are the stored addresses, valid at the preferred image base.
fn tls_callbacks<Pe: ImageNtHeaders>(
    ctx: &Ctx,
    file: &PeFile<'_, Pe>,
    page_size: u64,
) -> Result<Initializers> {
    let Some(dir) = file.data_directories().get(pe::IMAGE_DIRECTORY_ENTRY_TLS) else {
        return Ok(Initializers::default());
    };
    let data = file.data();
    let table = file.section_table();
    let is_64 = file.nt_headers().is_type_64();
    let image_base = file.nt_headers().optional_header().image_base();
    let dir_rva = dir.virtual_address.get(LE);
    let Some(dir_data) = readable_at(ctx, &table, data, dir_rva, "TLS directory")? else {
        return Ok(Initializers::default());
    };
    let array_va = if is_64 {
        pod::from_bytes::<pe::ImageTlsDirectory64>(dir_data)
            .map(|(tls, _)| tls.address_of_call_backs.get(LE))
    } else {
        pod::from_bytes::<pe::ImageTlsDirectory32>(dir_data)
            .map(|(tls, _)| u64::from(tls.address_of_call_backs.get(LE)))
    }
    .map_err(|()| {
        ctx.malformed(format!(
            "TLS directory at RVA {dir_rva:#x} is cut off by the end of its section"
        ))
    })?;
    if array_va == 0 {
        return Ok(Initializers::default());
    }
    let array_rva = array_va
        .checked_sub(image_base)
        .and_then(|rva| u32::try_from(rva).ok())
        .ok_or_else(|| {
            ctx.malformed(format!(
                "TLS callback array address {array_va:#x} is outside the image at {image_base:#x}"
            ))
        })?;
    let Some(array) = readable_at(ctx, &table, data, array_rva, "TLS callback array")? else {
        return Ok(Initializers::default());
    };
    let width = if is_64 { 8 } else { 4 };
    let mut entries = Vec::new();
    for (slot_index, slot) in array.chunks_exact(width).enumerate() {
        let target = slot
            .iter()
            .rev()
            .fold(0u64, |value, &byte| (value << 8) | u64::from(byte));
        if target == 0 {
            break;
        }
        entries.push(Initializer {
            slot: array_va.saturating_add((slot_index * width) as u64),
            target: Some(target),
            symbol: None,
            demangled: None,
        });
    }
    let code_pages = entries
        .iter()
        .filter_map(|entry| entry.target.map(|target| target / page_size))
        .collect::<std::collections::BTreeSet<u64>>()
        .len() as u64;
    Ok(Initializers {
        count: entries.len() as u64,
        entries,
        code_pages,
        ..Initializers::default()
    })
}

/// File data from `rva` to the end of its section's file data. `None` when
/// the address lies in a section's zero-filled tail (nothing stored there),
/// an error when no section holds it at all.
fn readable_at<'data>(
    ctx: &Ctx,
    table: &SectionTable<'data>,
    data: &'data [u8],
    rva: u32,
    what: &str,
) -> Result<Option<&'data [u8]>> {
    if let Some(bytes) = table.pe_data_at(data, rva) {
        return Ok(Some(bytes));
    }
    if table.section_containing(rva).is_some() {
        return Ok(None);
    }
    Err(ctx.malformed(format!("{what} at RVA {rva:#x} is not inside any section")))
}
