//! An ELF file's sections and symbols as runs of file bytes, for the
//! file-offset index ([`crate::OffsetIndex`]).
//!
//! Symbol values are virtual addresses; they become file offsets through
//! the PT_LOAD that maps them, because that is what the kernel pages in
//! (section headers are optional and may disagree with it).

use super::{Elf, dynamic, malformed};
use crate::error::Result;
use crate::model::DEFAULT_PAGE_SIZE;
use crate::offsets::{Candidate, Parts, SectionSpan, SymbolBinding, SymbolKind, SymbolSource};
use object::elf as e;
use object::read::StringTable;
use object::read::elf::{FileHeader, ProgramHeader, SectionHeader, Sym};
use object::{Endianness, ReadRef};
use std::path::Path;

pub(crate) fn read<'data>(path: &Path, data: &'data [u8]) -> Result<Parts<'data>> {
    // EI_CLASS, the fifth identification byte.
    match data.get(4).map(|&class| e::FileClass(class)) {
        Some(e::ELFCLASS32) => read_elf::<e::FileHeader32<Endianness>>(path, data),
        Some(e::ELFCLASS64) => read_elf::<e::FileHeader64<Endianness>>(path, data),
        Some(class) => Err(malformed(path, format!("unknown ELF class {}", class.0))),
        None => Err(malformed(
            path,
            format!(
                "truncated: {} bytes, shorter than the 16-byte ELF identification",
                data.len()
            ),
        )),
    }
}

fn read_elf<'data, H: FileHeader<Endian = Endianness>>(
    path: &Path,
    data: &'data [u8],
) -> Result<Parts<'data>> {
    let elf = Elf::<H>::parse(path, data, DEFAULT_PAGE_SIZE)?;
    let sections = if elf.sections.is_empty() {
        segment_spans(&elf)
    } else {
        section_spans(&elf)?
    };
    let (source, symbols, not_in_file) = symbols(&elf)?;
    Ok(Parts {
        file_size: elf.size(),
        sections,
        symbols,
        source,
        not_in_file,
    })
}

/// Sections with bytes in the file. A section claiming bytes past the end
/// of the file is an error, as in inspect.
fn section_spans<H: FileHeader<Endian = Endianness>>(
    elf: &Elf<'_, '_, H>,
) -> Result<Vec<SectionSpan>> {
    let endian = elf.endian;
    let mut out = Vec::with_capacity(elf.sections.len());
    for (index, sh) in elf.sections.enumerate() {
        let sh_type = sh.sh_type(endian);
        let size: u64 = sh.sh_size(endian).into();
        if sh_type == e::SHT_NULL || sh_type == e::SHT_NOBITS || size == 0 {
            continue;
        }
        let offset: u64 = sh.sh_offset(endian).into();
        let name = elf.section_name(sh)?;
        if offset.checked_add(size).is_none_or(|end| end > elf.size()) {
            return Err(malformed(
                elf.path,
                format!(
                    "section {} ({name}) at offset 0x{offset:x} with size 0x{size:x} runs past \
                     the end of the {}-byte file",
                    index.0,
                    elf.size()
                ),
            ));
        }
        let flags: u64 = sh.sh_flags(endian).0;
        out.push(SectionSpan {
            name,
            offset,
            size,
            address: sh.sh_addr(endian).into(),
            alloc: flags & e::SHF_ALLOC.0 != 0,
            writable: flags & e::SHF_WRITE.0 != 0,
            executable: flags & e::SHF_EXECINSTR.0 != 0,
        });
    }
    Ok(out)
}

/// Without section headers, the loadable segments are the finest labels
/// there are; named like bloaty's, with readelf's flag letters.
fn segment_spans<H: FileHeader<Endian = Endianness>>(elf: &Elf<'_, '_, H>) -> Vec<SectionSpan> {
    let endian = elf.endian;
    let mut out = Vec::new();
    for (index, ph) in elf.phdrs.iter().enumerate() {
        if ph.p_type(endian) != e::PT_LOAD {
            continue;
        }
        let offset: u64 = ph.p_offset(endian).into();
        let filesz: u64 = ph.p_filesz(endian).into();
        // Bytes past the end of the file cannot be read, so nothing in a
        // trace can land on them.
        let size = filesz.min(elf.size().saturating_sub(offset));
        if size == 0 {
            continue;
        }
        let flags = ph.p_flags(endian).0;
        let (r, w, x) = (
            flags & e::PF_R.0 != 0,
            flags & e::PF_W.0 != 0,
            flags & e::PF_X.0 != 0,
        );
        let letters: String = [(r, 'R'), (w, 'W'), (x, 'E')]
            .iter()
            .map(|&(set, letter)| if set { letter } else { ' ' })
            .collect();
        let letters = letters.trim_end();
        out.push(SectionSpan {
            name: if letters.is_empty() {
                format!("[LOAD #{index}]")
            } else {
                format!("[LOAD #{index} {letters}]")
            },
            offset,
            size,
            address: ph.p_vaddr(endian).into(),
            alloc: true,
            writable: w,
            executable: x,
        });
    }
    out
}

type SymbolsRead<'data> = (SymbolSource, Vec<Candidate<'data>>, u64);
type Strings<'data> = StringTable<'data, &'data [u8]>;
type DynamicTable<'data, H> = (&'data [<H as FileHeader>::Sym], Strings<'data>);

/// The full symbol table if there is one, else the dynamic one: from its
/// section header, or through DT_SYMTAB as the loader finds it.
fn symbols<'data, H: FileHeader<Endian = Endianness>>(
    elf: &Elf<'data, '_, H>,
) -> Result<SymbolsRead<'data>> {
    for (sh_type, source) in [
        (e::SHT_SYMTAB, SymbolSource::Symtab),
        (e::SHT_DYNSYM, SymbolSource::Dynsym),
    ] {
        let table = elf
            .sections
            .symbols(elf.endian, elf.data, sh_type)
            .map_err(|err| elf.fail(err))?;
        if !table.is_empty() {
            let (symbols, not_in_file) = candidates(elf, table.symbols(), table.strings())?;
            return Ok((source, symbols, not_in_file));
        }
    }
    if let Some((table, strings)) = dynamic_table(elf)? {
        let (symbols, not_in_file) = candidates(elf, table, strings)?;
        return Ok((SymbolSource::Dynsym, symbols, not_in_file));
    }
    Ok((SymbolSource::None, Vec::new(), 0))
}

/// The dynamic symbol table found through PT_DYNAMIC, its length through
/// the hash tables (what a file without section headers still has).
fn dynamic_table<'data, H: FileHeader<Endian = Endianness>>(
    elf: &Elf<'data, '_, H>,
) -> Result<Option<DynamicTable<'data, H>>> {
    let Some(dynamic) = dynamic::read(elf)? else {
        return Ok(None);
    };
    let (Some(symtab), Some(strtab)) = (dynamic.value(e::DT_SYMTAB), dynamic.value(e::DT_STRTAB))
    else {
        return Ok(None);
    };
    let count = dynamic.model.dynamic_symbols;
    let bytes = elf.bytes_at_address(symtab).ok_or_else(|| {
        malformed(
            elf.path,
            format!("DT_SYMTAB 0x{symtab:x} is not inside any loaded part of the file"),
        )
    })?;
    let table = usize::try_from(count)
        .ok()
        .and_then(|count| bytes.read_slice_at::<H::Sym>(0, count).ok())
        .ok_or_else(|| {
            malformed(
                elf.path,
                format!(
                    "DT_SYMTAB 0x{symtab:x}: the hash table counts {count} symbols, more than \
                     its segment holds from there"
                ),
            )
        })?;
    // dynamic::read has already checked that DT_STRTAB is loaded.
    let strings = elf.bytes_at_address(strtab).unwrap_or_default();
    let len = dynamic
        .value(e::DT_STRSZ)
        .map_or(strings.len() as u64, |size| size.min(strings.len() as u64));
    Ok(Some((table, StringTable::new(strings, 0, len))))
}

/// Defined symbols with a size and a type that names code or data, moved
/// to file offsets; and how many had no file bytes.
fn candidates<'data, H: FileHeader<Endian = Endianness>>(
    elf: &Elf<'data, '_, H>,
    table: &'data [H::Sym],
    strings: Strings<'data>,
) -> Result<(Vec<Candidate<'data>>, u64)> {
    let endian = elf.endian;
    let mut out = Vec::new();
    let mut not_in_file = 0;
    for sym in table {
        let shndx = sym.st_shndx(endian);
        // Absolute values are not addresses in the file; common symbols
        // only exist in relocatable objects, with no place yet.
        if shndx == e::SHN_UNDEF || shndx == e::SHN_ABS || shndx == e::SHN_COMMON {
            continue;
        }
        let kind = match sym.st_type() {
            e::STT_FUNC | e::STT_GNU_IFUNC => SymbolKind::Function,
            e::STT_OBJECT => SymbolKind::Object,
            e::STT_NOTYPE => SymbolKind::Other,
            _ => continue,
        };
        let size: u64 = sym.st_size(endian).into();
        if size == 0 {
            continue;
        }
        let mut address: u64 = sym.st_value(endian).into();
        // Bit 0 of an ARM function's value selects Thumb; the code starts
        // at the even address.
        if elf.machine == e::EM_ARM && kind == SymbolKind::Function {
            address &= !1;
        }
        let Some((offset, size)) = file_bytes(elf, address, size) else {
            not_in_file += 1;
            continue;
        };
        let name = sym.name(endian, strings).map_err(|err| elf.fail(err))?;
        let binding = match sym.st_bind() {
            e::STB_GLOBAL => SymbolBinding::Global,
            e::STB_GNU_UNIQUE => SymbolBinding::Unique,
            e::STB_WEAK => SymbolBinding::Weak,
            _ => SymbolBinding::Local,
        };
        out.push(Candidate {
            name,
            address,
            offset,
            size,
            kind,
            binding,
        });
    }
    Ok((out, not_in_file))
}

/// File offset and file-backed length of [address, address + size): the
/// start must be in a PT_LOAD's file image, and the length stops where the
/// image (or the file) does.
fn file_bytes<H: FileHeader<Endian = Endianness>>(
    elf: &Elf<'_, '_, H>,
    address: u64,
    size: u64,
) -> Option<(u64, u64)> {
    let (offset, in_segment) = elf.file_range_of(address)?;
    let in_file = elf.size().checked_sub(offset)?;
    let size = size.min(in_segment).min(in_file);
    (size > 0).then_some((offset, size))
}
