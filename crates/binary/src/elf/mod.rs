//! ELF inspection: header, program headers, sections and the bytes between
//! them, then the dynamic section, relocations and initializers (each in its
//! own module), and the layout warnings that follow from them.
//!
//! Section headers are optional in ELF (the loader only reads program
//! headers), so everything the loader uses is also found through PT_DYNAMIC
//! when a file has no section headers.

mod dynamic;
mod init;
pub(crate) mod offsets;
mod reloc;
mod symbols;

use crate::InspectOptions;
use crate::error::{Error, Result};
use crate::model::{
    self, Format, Header, Inspection, Kind, Region, Section, Segment, Warning, human_bytes,
    pages_spanned, share,
};
use object::elf as e;
use object::read::elf::{FileHeader, ProgramHeader, SectionHeader, SectionTable};
use object::{Endianness, ReadRef};
use std::path::Path;

pub(crate) fn inspect(path: &Path, data: &[u8], options: &InspectOptions) -> Result<Inspection> {
    if data.len() < 16 {
        return Err(malformed(
            path,
            format!(
                "truncated: {} bytes, shorter than the 16-byte ELF identification",
                data.len()
            ),
        ));
    }
    // EI_CLASS, the fifth identification byte.
    match e::FileClass(data[4]) {
        e::ELFCLASS32 => inspect_elf::<e::FileHeader32<Endianness>>(path, data, options),
        e::ELFCLASS64 => inspect_elf::<e::FileHeader64<Endianness>>(path, data, options),
        class => Err(malformed(path, format!("unknown ELF class {}", class.0))),
    }
}

pub(crate) fn malformed(path: &Path, detail: impl Into<String>) -> Error {
    Error::malformed(path, Format::Elf, detail)
}

/// Everything the ELF sub-analyses share: the parsed headers and helpers to
/// go from addresses to file bytes.
pub(crate) struct Elf<'data, 'p, H: FileHeader<Endian = Endianness>> {
    pub path: &'p Path,
    pub data: &'data [u8],
    pub header: &'data H,
    pub endian: Endianness,
    pub phdrs: &'data [H::ProgramHeader],
    pub sections: SectionTable<'data, H, &'data [u8]>,
    pub machine: e::Machine,
    /// Bytes per address word: 4 or 8.
    pub word: u64,
    pub page_size: u64,
}

impl<'data, 'p, H: FileHeader<Endian = Endianness>> Elf<'data, 'p, H> {
    /// Parses the ELF header, program headers and section table.
    pub fn parse(path: &'p Path, data: &'data [u8], page_size: u64) -> Result<Self> {
        let fail = |err: object::Error| malformed(path, err.to_string());
        let header = H::parse(data).map_err(fail)?;
        let endian = header.endian().map_err(fail)?;
        Ok(Elf {
            path,
            data,
            header,
            endian,
            phdrs: header.program_headers(endian, data).map_err(fail)?,
            sections: header.sections(endian, data).map_err(fail)?,
            machine: header.e_machine(endian),
            word: if header.is_type_64() { 8 } else { 4 },
            page_size,
        })
    }

    pub fn fail(&self, err: object::Error) -> Error {
        malformed(self.path, err.to_string())
    }

    pub fn size(&self) -> u64 {
        self.data.len() as u64
    }

    /// File offset of virtual address `addr` and the bytes of its PT_LOAD's
    /// file image from there on, if a PT_LOAD maps it from the file.
    fn file_range_of(&self, addr: u64) -> Option<(u64, u64)> {
        self.phdrs
            .iter()
            .filter(|ph| ph.p_type(self.endian) == e::PT_LOAD)
            .find_map(|ph| {
                let vaddr: u64 = ph.p_vaddr(self.endian).into();
                let filesz: u64 = ph.p_filesz(self.endian).into();
                let offset: u64 = ph.p_offset(self.endian).into();
                let delta = addr.checked_sub(vaddr).filter(|&d| d < filesz)?;
                Some((offset.checked_add(delta)?, filesz - delta))
            })
    }

    /// File offset of virtual address `addr`, if a PT_LOAD maps it from the file.
    pub fn offset_of(&self, addr: u64) -> Option<u64> {
        self.file_range_of(addr).map(|(offset, _)| offset)
    }

    /// File bytes from virtual address `addr` to the end of its segment's file image.
    pub fn bytes_at_address(&self, addr: u64) -> Option<&'data [u8]> {
        let (offset, len) = self.file_range_of(addr)?;
        self.data.read_bytes_at(offset, len).ok()
    }

    /// The address-sized word stored in the file at virtual address `addr`.
    pub fn word_at_address(&self, addr: u64) -> Option<u64> {
        let bytes = self.bytes_at_address(addr)?;
        read_word(bytes, 0, self.word, self.endian)
    }

    /// Index into `segments` of the PT_LOAD whose memory image holds
    /// [addr, addr + size).
    pub fn load_segment_of(&self, addr: u64, size: u64) -> Option<usize> {
        self.phdrs.iter().enumerate().find_map(|(index, ph)| {
            if ph.p_type(self.endian) != e::PT_LOAD {
                return None;
            }
            let vaddr: u64 = ph.p_vaddr(self.endian).into();
            let memsz: u64 = ph.p_memsz(self.endian).into();
            let inside = addr >= vaddr
                && addr - vaddr <= memsz
                && size <= memsz - (addr - vaddr)
                && (size > 0 || addr - vaddr < memsz);
            inside.then_some(index)
        })
    }

    /// Name of a section header, or a placeholder that says the name is bad.
    pub fn section_name(&self, sh: &H::SectionHeader) -> Result<String> {
        let name = self
            .sections
            .section_name(self.endian, sh)
            .map_err(|err| self.fail(err))?;
        Ok(String::from_utf8_lossy(name).into_owned())
    }

    /// Section headers of one type, with their index.
    pub fn sections_of_type(
        &self,
        sh_type: e::SectionType,
    ) -> impl Iterator<Item = (usize, &'data H::SectionHeader)> + '_ {
        self.sections
            .enumerate()
            .filter(move |(_, sh)| sh.sh_type(self.endian) == sh_type)
            .map(|(index, sh)| (index.0, sh))
    }

    pub fn section_named(&self, name: &[u8]) -> Option<&'data H::SectionHeader> {
        self.sections
            .section_by_name(self.endian, name)
            .map(|(_, sh)| sh)
    }
}

/// Reads a 4- or 8-byte word at `offset` of `bytes`.
pub(crate) fn read_word(bytes: &[u8], offset: usize, word: u64, endian: Endianness) -> Option<u64> {
    let end = offset.checked_add(word as usize)?;
    let raw = bytes.get(offset..end)?;
    Some(match (word, endian) {
        (8, Endianness::Little) => u64::from_le_bytes(raw.try_into().ok()?),
        (8, Endianness::Big) => u64::from_be_bytes(raw.try_into().ok()?),
        (_, Endianness::Little) => u32::from_le_bytes(raw.try_into().ok()?).into(),
        (_, Endianness::Big) => u32::from_be_bytes(raw.try_into().ok()?).into(),
    })
}

fn inspect_elf<H: FileHeader<Endian = Endianness>>(
    path: &Path,
    data: &[u8],
    options: &InspectOptions,
) -> Result<Inspection> {
    let elf = Elf::<H>::parse(path, data, options.page_size)?;

    let segments = segments(&elf);
    let section_list = section_list(&elf)?;
    let regions = regions(&elf, &section_list);
    let dynamic = dynamic::read(&elf)?;
    let watched = init::slot_ranges(&elf, dynamic.as_ref())?;
    let relocations = reloc::analyse(&elf, dynamic.as_ref(), watched)?;
    let initializers = init::analyse(&elf, dynamic.as_ref(), &relocations.slot_relocs)?;
    let header_model = header_model(&elf, dynamic.as_ref())?;

    let mut inspection = Inspection {
        path: path.display().to_string(),
        format: Format::Elf,
        size: elf.size(),
        page_size: options.page_size,
        header: header_model,
        segments,
        sections: section_list,
        regions,
        dynamic: dynamic.map(|d| d.model),
        relocations: relocations.model,
        init_array: initializers,
        pe: None,
        macho: None,
        warnings: Vec::new(),
    };
    inspection.warnings = warnings(&elf, &inspection);
    Ok(inspection)
}

fn segment_kind(machine: e::Machine, p_type: e::ProgramType) -> String {
    match e::machine_names(machine).pt.name(p_type) {
        Some(name) => name.trim_start_matches("PT_").to_string(),
        None => format!("0x{:x}", p_type.0),
    }
}

fn segments<H: FileHeader<Endian = Endianness>>(elf: &Elf<'_, '_, H>) -> Vec<Segment> {
    let endian = elf.endian;
    elf.phdrs
        .iter()
        .enumerate()
        .map(|(index, ph)| {
            let offset: u64 = ph.p_offset(endian).into();
            let file_size: u64 = ph.p_filesz(endian).into();
            let flags = ph.p_flags(endian).0;
            Segment {
                index,
                kind: segment_kind(elf.machine, ph.p_type(endian)),
                name: None,
                offset,
                file_size,
                address: ph.p_vaddr(endian).into(),
                memory_size: ph.p_memsz(endian).into(),
                flags: model::rwx(
                    flags & e::PF_R.0 != 0,
                    flags & e::PF_W.0 != 0,
                    flags & e::PF_X.0 != 0,
                ),
                align: ph.p_align(endian).into(),
                share_of_file: share(file_size, elf.size()),
                pages: pages_spanned(offset, file_size, elf.page_size),
            }
        })
        .collect()
}

/// Section flag letters in the order readelf prints them.
fn section_flags(flags: u64) -> String {
    const LETTERS: [(u64, char); 13] = [
        (0x1, 'W'),
        (0x2, 'A'),
        (0x4, 'X'),
        (0x10, 'M'),
        (0x20, 'S'),
        (0x40, 'I'),
        (0x80, 'L'),
        (0x100, 'O'),
        (0x200, 'G'),
        (0x400, 'T'),
        (0x800, 'C'),
        (0x20_0000, 'R'),
        (0x8000_0000, 'E'),
    ];
    LETTERS
        .iter()
        .filter(|(bit, _)| flags & bit != 0)
        .map(|&(_, letter)| letter)
        .collect()
}

fn section_kind(machine: e::Machine, sh_type: e::SectionType) -> String {
    // readelf's spelling, so the two can be read side by side.
    match sh_type {
        e::SHT_GNU_VERSYM => return "VERSYM".to_string(),
        e::SHT_GNU_VERDEF => return "VERDEF".to_string(),
        e::SHT_GNU_VERNEED => return "VERNEED".to_string(),
        _ => {}
    }
    match e::machine_names(machine).sht.name(sh_type) {
        Some(name) => name.trim_start_matches("SHT_").to_string(),
        None => format!("0x{:x}", sh_type.0),
    }
}

fn section_list<H: FileHeader<Endian = Endianness>>(elf: &Elf<'_, '_, H>) -> Result<Vec<Section>> {
    let endian = elf.endian;
    let mut out = Vec::with_capacity(elf.sections.len());
    for (index, sh) in elf.sections.enumerate() {
        let sh_type = sh.sh_type(endian);
        if index.0 == 0 && sh_type == e::SHT_NULL {
            continue;
        }
        let flags: u64 = sh.sh_flags(endian).0;
        let size: u64 = sh.sh_size(endian).into();
        let address: u64 = sh.sh_addr(endian).into();
        let offset: u64 = sh.sh_offset(endian).into();
        let in_file = sh_type != e::SHT_NOBITS && sh_type != e::SHT_NULL;
        let file_size = if in_file { size } else { 0 };
        let allocated = flags & e::SHF_ALLOC.0 != 0;
        if in_file && offset.checked_add(size).is_none_or(|end| end > elf.size()) {
            return Err(malformed(
                elf.path,
                format!(
                    "section {} ({}) at offset 0x{offset:x} with size 0x{size:x} runs past the end of the {}-byte file",
                    index.0,
                    elf.section_name(sh).unwrap_or_default(),
                    elf.size()
                ),
            ));
        }
        out.push(Section {
            index: index.0,
            name: elf.section_name(sh)?,
            kind: section_kind(elf.machine, sh_type),
            flags: section_flags(flags),
            offset,
            file_size,
            address,
            memory_size: if allocated { size } else { 0 },
            share_of_file: share(file_size, elf.size()),
            pages: pages_spanned(offset, file_size, elf.page_size),
            segment: if allocated {
                elf.load_segment_of(address, size)
            } else {
                None
            },
        });
    }
    Ok(out)
}

/// Labels the bytes no section claims, so sections and regions sum to the
/// file size: the ELF header, program and section header tables, and gaps.
fn regions<H: FileHeader<Endian = Endianness>>(
    elf: &Elf<'_, '_, H>,
    sections: &[Section],
) -> Vec<Region> {
    let endian = elf.endian;
    let size = elf.size();
    let header = elf.header;
    let ph_bytes = u64::from(header.e_phentsize(endian)) * elf.phdrs.len() as u64;
    let sh_bytes = u64::from(header.e_shentsize(endian)) * elf.sections.len() as u64;
    let labelled = [
        ("[ELF header]", 0, u64::from(header.e_ehsize(endian))),
        ("[program headers]", header.e_phoff(endian).into(), ph_bytes),
        ("[section headers]", header.e_shoff(endian).into(), sh_bytes),
    ];
    let mut claimed: Vec<(u64, u64)> = sections
        .iter()
        .filter(|s| s.file_size > 0)
        .map(|s| (s.offset, s.file_size))
        .collect();
    let mut regions = Vec::new();
    for (label, offset, len) in labelled {
        if len > 0 && offset < size {
            let len = len.min(size - offset);
            // Headers inside a section's range (rare) are already counted.
            let covered = claimed
                .iter()
                .any(|&(o, l)| offset >= o && offset.saturating_add(len) <= o.saturating_add(l));
            if !covered {
                regions.push(Region {
                    label: label.to_string(),
                    offset,
                    size: len,
                });
                claimed.push((offset, len));
            }
        }
    }
    let loads: Vec<(usize, u64, u64)> = elf
        .phdrs
        .iter()
        .enumerate()
        .filter(|(_, ph)| ph.p_type(endian) == e::PT_LOAD)
        .map(|(i, ph)| (i, ph.p_offset(endian).into(), ph.p_filesz(endian).into()))
        .collect();
    let loaded_end = loads
        .iter()
        .map(|&(_, o, l)| o.saturating_add(l))
        .max()
        .unwrap_or(0);
    for mut gap in model::unclaimed_regions(size, &mut claimed) {
        let load = loads
            .iter()
            .find(|&&(_, off, len)| gap.offset >= off && gap.offset - off < len);
        gap.label = match load {
            Some((index, _, _)) => format!("[padding in LOAD #{index}]"),
            None if gap.offset < loaded_end => "[padding between segments]".to_string(),
            None => "[not loaded]".to_string(),
        };
        regions.push(gap);
    }
    regions.sort_by_key(|r| r.offset);
    regions
}

fn machine_name(machine: e::Machine) -> String {
    let name = match machine {
        e::EM_X86_64 => "x86_64",
        e::EM_386 => "i386",
        e::EM_AARCH64 => "aarch64",
        e::EM_ARM => "arm",
        e::EM_RISCV => "riscv",
        e::EM_PPC64 => "ppc64",
        e::EM_PPC => "ppc",
        e::EM_S390 => "s390",
        e::EM_MIPS => "mips",
        e::EM_LOONGARCH => "loongarch",
        e::EM_SPARCV9 => "sparcv9",
        _ => return format!("machine {}", machine.0),
    };
    name.to_string()
}

fn header_model<H: FileHeader<Endian = Endianness>>(
    elf: &Elf<'_, '_, H>,
    dynamic: Option<&dynamic::DynamicInfo>,
) -> Result<Header> {
    let endian = elf.endian;
    let has_interp = elf.phdrs.iter().any(|ph| ph.p_type(endian) == e::PT_INTERP);
    let kind = match elf.header.e_type(endian) {
        e::ET_EXEC => Kind::Executable,
        e::ET_DYN => {
            let pie_flag = dynamic.is_some_and(|d| d.flags_1 & e::DF_1_PIE.0 != 0);
            let soname = dynamic.is_some_and(|d| d.model.soname.is_some());
            // Older linkers do not set DF_1_PIE; a PT_INTERP without a
            // soname is then the best sign of an executable. libc.so.6 has
            // PT_INTERP and a soname, and is a shared object.
            if pie_flag || (has_interp && !soname) {
                Kind::Pie
            } else {
                Kind::SharedObject
            }
        }
        e::ET_REL => Kind::Relocatable,
        e::ET_CORE => Kind::Core,
        _ => Kind::Other,
    };

    let mut interpreter = None;
    for ph in elf.phdrs {
        if let Some(interp) = ph
            .interpreter(endian, elf.data)
            .map_err(|err| elf.fail(err))?
        {
            interpreter = Some(String::from_utf8_lossy(interp).into_owned());
        }
    }

    let symtab = elf.sections_of_type(e::SHT_SYMTAB).next();
    let symbols = match symtab {
        Some((_, sh)) => {
            let entsize: u64 = sh.sh_entsize(endian).into();
            let size: u64 = sh.sh_size(endian).into();
            size.checked_div(entsize).unwrap_or(0)
        }
        None => 0,
    };
    let debug_info =
        elf.section_named(b".debug_info").is_some() || elf.section_named(b".zdebug_info").is_some();
    let debug_link = match elf.section_named(b".gnu_debuglink") {
        Some(sh) => {
            let bytes = sh.data(endian, elf.data).map_err(|err| elf.fail(err))?;
            let name = bytes.split(|&b| b == 0).next().unwrap_or_default();
            Some(String::from_utf8_lossy(name).into_owned())
        }
        None => None,
    };

    Ok(Header {
        kind,
        machine: machine_name(elf.machine),
        bits: if elf.word == 8 { 64 } else { 32 },
        endian: match endian {
            Endianness::Little => "little",
            Endianness::Big => "big",
        },
        entry: elf.header.e_entry(endian).into(),
        build_id: build_id(elf)?,
        interpreter,
        stripped: symtab.is_none(),
        debug_info,
        debug_link,
        symbols,
    })
}

/// The GNU build-id note, from note sections or, without sections, PT_NOTE.
fn build_id<H: FileHeader<Endian = Endianness>>(elf: &Elf<'_, '_, H>) -> Result<Option<String>> {
    let endian = elf.endian;
    let hex = |desc: &[u8]| desc.iter().map(|b| format!("{b:02x}")).collect::<String>();
    for (_, sh) in elf.sections_of_type(e::SHT_NOTE) {
        if let Some(mut notes) = sh.notes(endian, elf.data).map_err(|err| elf.fail(err))? {
            while let Some(note) = notes.next().map_err(|err| elf.fail(err))? {
                if note.name() == e::ELF_NOTE_GNU && note.n_type(endian) == e::NT_GNU_BUILD_ID {
                    return Ok(Some(hex(note.desc())));
                }
            }
        }
    }
    for ph in elf.phdrs {
        if let Some(mut notes) = ph.notes(endian, elf.data).map_err(|err| elf.fail(err))? {
            while let Some(note) = notes.next().map_err(|err| elf.fail(err))? {
                if note.name() == e::ELF_NOTE_GNU && note.n_type(endian) == e::NT_GNU_BUILD_ID {
                    return Ok(Some(hex(note.desc())));
                }
            }
        }
    }
    Ok(None)
}

/// Layout problems that cost pages at startup, each with what to do.
fn warnings<H: FileHeader<Endian = Endianness>>(
    elf: &Elf<'_, '_, H>,
    inspection: &Inspection,
) -> Vec<Warning> {
    let mut out = Vec::new();
    let page = elf.page_size;
    bss_page_warnings(&mut out, inspection, page);
    if let Some(dynamic) = &inspection.dynamic {
        dynamic_warnings(&mut out, dynamic, page);
    }
    unpacked_relocations_warning(&mut out, inspection);
    ctors_warning(&mut out, inspection);
    out
}

/// LOAD segments whose zero-filled memory begins inside a file page.
fn bss_page_warnings(out: &mut Vec<Warning>, inspection: &Inspection, page: u64) {
    for segment in inspection.segments.iter().filter(|s| s.kind == "LOAD") {
        if segment.memory_size <= segment.file_size || segment.file_size == 0 {
            continue;
        }
        // Values straight from the file: a segment that wraps the address
        // space is not one the loader would map, so it gets no advice.
        let Some(zero_from) = segment.address.checked_add(segment.file_size) else {
            continue;
        };
        if zero_from % page == 0 {
            continue;
        }
        let bss = inspection
            .sections
            .iter()
            .filter(|s| {
                // .tbss is a template for each thread, not memory the loader clears.
                s.kind == "NOBITS" && !s.flags.contains('T') && s.segment == Some(segment.index)
            })
            .min_by_key(|s| s.address)
            .map(|s| s.name.as_str())
            .unwrap_or("the zero-filled tail");
        let file_end = segment.offset.saturating_add(segment.file_size);
        let file_page_offset = (file_end - 1) / page * page;
        out.push(Warning {
            code: "bss-shares-file-page",
            message: format!(
                "LOAD #{}: zero-filled memory ({bss}) begins at 0x{zero_from:x}, inside a page \
                 backed by the file: the loader clears the rest of that page, which reads the \
                 file page at offset 0x{file_page_offset:x} at startup and makes it private; it \
                 costs a read only if nothing else on that page is used at startup, otherwise \
                 page-align {bss} in the linker script",
                segment.index
            ),
        });
    }
}

/// What the dynamic section says about the loader's work: where it sits,
/// text relocations, RELR without its version, the hash table's style.
fn dynamic_warnings(out: &mut Vec<Warning>, dynamic: &model::Dynamic, page: u64) {
    let headers_end = pages_spanned(0, 1, page) * page;
    if dynamic.offset > headers_end.max(1 << 20) {
        out.push(Warning {
            code: "dynamic-far-from-headers",
            message: format!(
                "PT_DYNAMIC sits at offset 0x{:x} ({:.0}% into the file){}: right after the \
                 headers the loader reads it, a {} jump; a prefetch plan (coldstart plan) \
                 should read both pages early",
                dynamic.offset,
                dynamic.position_in_file * 100.0,
                dynamic
                    .segment
                    .map(|s| format!(", in LOAD #{s}"))
                    .unwrap_or_default(),
                human_bytes(dynamic.offset),
            ),
        });
    }
    if dynamic.textrel {
        out.push(Warning {
            code: "textrel",
            message: "text relocations: the loader writes into code pages, which reads \
                      them all at startup and makes them private; rebuild every object \
                      with -fPIC"
                .to_string(),
        });
    }
    if dynamic.relr
        && !dynamic.relr_version_need
        && !dynamic.relr_version_defined
        && needs_glibc(dynamic)
    {
        out.push(Warning {
            code: "relr-without-version-need",
            message: "DT_RELR is used but the GLIBC_ABI_DT_RELR version is not needed: \
                      glibc 2.36 and later refuse to load this object; relink with \
                      -z pack-relative-relocs (ld.bfd 2.38+, lld 15+) instead of a \
                      post-link packer"
                .to_string(),
        });
    }
    if dynamic.sysv_hash && !dynamic.gnu_hash {
        out.push(Warning {
            code: "sysv-hash-only",
            message: "only the SysV hash table is present: every symbol lookup walks \
                      longer chains; link with -Wl,--hash-style=gnu"
                .to_string(),
        });
    }
}

/// Relative relocations that RELR would pack into a much smaller table.
fn unpacked_relocations_warning(out: &mut Vec<Warning>, inspection: &Inspection) {
    if let Some(estimate) = &inspection.relocations.relr_estimate {
        let worth = estimate.saving_bytes >= 64 * 1024
            || share(estimate.saving_bytes, inspection.size) >= 0.01;
        if worth {
            out.push(Warning {
                code: "relative-relocations-unpacked",
                message: format!(
                    "{} relative relocations take {} as table entries; packed as RELR they \
                     would take {} ({:.1}% of the file saved, read at every start): link with \
                     -Wl,-z,pack-relative-relocs (binutils 2.38+, lld 15+; glibc 2.36+)",
                    estimate.packable,
                    human_bytes(estimate.current_bytes),
                    human_bytes(estimate.relr_bytes),
                    share(estimate.saving_bytes, inspection.size) * 100.0
                ),
            });
        }
    }
}

/// Constructors in .ctors, run against the file order.
fn ctors_warning(out: &mut Vec<Warning>, inspection: &Inspection) {
    if inspection.init_array.ctors_count > 0 {
        out.push(Warning {
            code: "ctors-used",
            message: format!(
                ".ctors holds {} constructors: they run from the end of the section backwards, \
                 so startup walks their code against the file order; build with a toolchain \
                 that uses .init_array (GCC configured with --enable-initfini-array, binutils \
                 2.21+)",
                inspection.init_array.ctors_count
            ),
        });
    }
}

/// glibc's own test (elf/dl-version.c since 2.36): it only refuses DT_RELR
/// without GLIBC_ABI_DT_RELR in objects that list a `libc.so.` as needed.
fn needs_glibc(dynamic: &model::Dynamic) -> bool {
    dynamic.needed.iter().any(|n| n.starts_with("libc.so."))
}
