//! The dynamic section as the loader sees it: PT_DYNAMIC, its string table
//! found through DT_STRTAB, libraries, search paths, binding flags, hash
//! tables, and whether DT_RELR comes with the version need glibc insists on.

use super::{Elf, malformed};
use crate::error::Result;
use crate::model::{self, share};
use object::elf as e;
use object::read::elf::{Dyn, FileHeader, ProgramHeader, SectionHeader};
use object::{Endianness, ReadRef};

/// The NUL-terminated name at `offset` of a string table; None when the
/// offset is outside it.
fn name_at(strtab: &[u8], offset: u64) -> Option<&[u8]> {
    let rest = strtab.get(usize::try_from(offset).ok()?..)?;
    Some(rest.split(|&b| b == 0).next().unwrap_or(rest))
}

/// The dynamic section, with the raw tag values other analyses need.
pub(crate) struct DynamicInfo {
    pub model: model::Dynamic,
    pub flags_1: u64,
    /// (tag, value) of every entry before DT_NULL.
    pub entries: Vec<(e::DynamicTag, u64)>,
}

impl DynamicInfo {
    pub fn value(&self, tag: e::DynamicTag) -> Option<u64> {
        self.entries
            .iter()
            .find(|(t, _)| *t == tag)
            .map(|&(_, v)| v)
    }
}

const DF_NAMES: [(u64, &str); 5] = [
    (0x1, "ORIGIN"),
    (0x2, "SYMBOLIC"),
    (0x4, "TEXTREL"),
    (0x8, "BIND_NOW"),
    (0x10, "STATIC_TLS"),
];

const DF_1_NAMES: [(u64, &str); 28] = [
    (0x1, "NOW"),
    (0x2, "GLOBAL"),
    (0x4, "GROUP"),
    (0x8, "NODELETE"),
    (0x10, "LOADFLTR"),
    (0x20, "INITFIRST"),
    (0x40, "NOOPEN"),
    (0x80, "ORIGIN"),
    (0x100, "DIRECT"),
    (0x200, "TRANS"),
    (0x400, "INTERPOSE"),
    (0x800, "NODEFLIB"),
    (0x1000, "NODUMP"),
    (0x2000, "CONFALT"),
    (0x4000, "ENDFILTEE"),
    (0x8000, "DISPRELDNE"),
    (0x10000, "DISPRELPND"),
    (0x20000, "NODIRECT"),
    (0x40000, "IGNMULDEF"),
    (0x80000, "NOKSYMS"),
    (0x100000, "NOHDR"),
    (0x200000, "EDITED"),
    (0x400000, "NORELOC"),
    (0x800000, "SYMINTPOSE"),
    (0x1000000, "GLOBAUDIT"),
    (0x2000000, "SINGLETON"),
    (0x4000000, "STUB"),
    (0x8000000, "PIE"),
];

fn flag_names(value: u64, table: &[(u64, &str)]) -> Vec<String> {
    let mut names: Vec<String> = table
        .iter()
        .filter(|(bit, _)| value & bit != 0)
        .map(|(_, name)| name.to_string())
        .collect();
    let known: u64 = table.iter().map(|(bit, _)| bit).fold(0, |a, b| a | b);
    if value & !known != 0 {
        names.push(format!("0x{:x}", value & !known));
    }
    names
}

pub(crate) fn read<H: FileHeader<Endian = Endianness>>(
    elf: &Elf<'_, '_, H>,
) -> Result<Option<DynamicInfo>> {
    let endian = elf.endian;
    let Some(ph) = elf
        .phdrs
        .iter()
        .find(|ph| ph.p_type(endian) == e::PT_DYNAMIC)
    else {
        return Ok(None);
    };
    let dyns = ph
        .dynamic(endian, elf.data)
        .map_err(|err| elf.fail(err))?
        .unwrap_or(&[]);
    let offset: u64 = ph.p_offset(endian).into();
    let size: u64 = ph.p_filesz(endian).into();
    let address: u64 = ph.p_vaddr(endian).into();

    let mut entries = Vec::new();
    for d in dyns {
        let tag = d.tag(endian);
        if tag == e::DT_NULL {
            break;
        }
        entries.push((tag, d.val(endian)));
    }
    // readelf counts the terminating DT_NULL as an entry; so do we.
    let entry_count = (entries.len() + usize::from(entries.len() < dyns.len())) as u64;

    let find = |tag: e::DynamicTag| entries.iter().find(|(t, _)| *t == tag).map(|&(_, v)| v);
    let strtab = match find(e::DT_STRTAB) {
        Some(addr) => {
            let bytes = elf.bytes_at_address(addr).ok_or_else(|| {
                malformed(
                    elf.path,
                    format!("DT_STRTAB 0x{addr:x} is not inside any loaded part of the file"),
                )
            })?;
            let len = find(e::DT_STRSZ).unwrap_or(bytes.len() as u64);
            bytes
                .get(..len.min(bytes.len() as u64) as usize)
                .unwrap_or(bytes)
        }
        None => &[],
    };
    let string = |value: u64| -> Result<String> {
        match name_at(strtab, value).filter(|_| value < strtab.len() as u64) {
            Some(name) => Ok(String::from_utf8_lossy(name).into_owned()),
            None => Err(malformed(
                elf.path,
                format!("dynamic string offset 0x{value:x} is outside DT_STRTAB"),
            )),
        }
    };
    let split_paths = |value: u64| -> Result<Vec<String>> {
        Ok(string(value)?.split(':').map(str::to_string).collect())
    };

    let mut dynamic = model::Dynamic {
        offset,
        size,
        address,
        position_in_file: share(offset, elf.size()),
        segment: elf.load_segment_of(address, 0),
        entries: entry_count,
        ..Default::default()
    };
    let mut flags = 0u64;
    let mut flags_1 = 0u64;
    for &(tag, value) in &entries {
        match tag {
            e::DT_NEEDED => dynamic.needed.push(string(value)?),
            e::DT_SONAME => dynamic.soname = Some(string(value)?),
            e::DT_RPATH => dynamic.rpath.extend(split_paths(value)?),
            e::DT_RUNPATH => dynamic.runpath.extend(split_paths(value)?),
            e::DT_FLAGS => flags |= value,
            e::DT_FLAGS_1 => flags_1 |= value,
            e::DT_BIND_NOW => dynamic.bind_now = true,
            e::DT_TEXTREL => dynamic.textrel = true,
            e::DT_GNU_HASH => dynamic.gnu_hash = true,
            e::DT_HASH => dynamic.sysv_hash = true,
            e::DT_RELR => dynamic.relr = true,
            _ => {}
        }
    }
    dynamic.flags = flag_names(flags, &DF_NAMES);
    dynamic.flags_1 = flag_names(flags_1, &DF_1_NAMES);
    dynamic.bind_now |= flags & e::DF_BIND_NOW.0 != 0 || flags_1 & e::DF_1_NOW.0 != 0;
    dynamic.textrel |= flags & e::DF_TEXTREL.0 != 0;
    dynamic.dynamic_symbols = dynamic_symbol_count(elf, &entries)?;
    dynamic.relr_version_need = needs_version(elf, &entries, strtab, b"GLIBC_ABI_DT_RELR")?;
    dynamic.relr_version_defined = defines_version(elf, &entries, strtab, b"GLIBC_ABI_DT_RELR")?;

    Ok(Some(DynamicInfo {
        model: dynamic,
        flags_1,
        entries,
    }))
}

/// Entries of the dynamic symbol table: from the .dynsym section header
/// when there is one, else from the hash tables as the loader would.
fn dynamic_symbol_count<H: FileHeader<Endian = Endianness>>(
    elf: &Elf<'_, '_, H>,
    entries: &[(e::DynamicTag, u64)],
) -> Result<u64> {
    let endian = elf.endian;
    if let Some((_, sh)) = elf.sections_of_type(e::SHT_DYNSYM).next() {
        let entsize: u64 = sh.sh_entsize(endian).into();
        let size: u64 = sh.sh_size(endian).into();
        return Ok(size.checked_div(entsize).unwrap_or(0));
    }
    let find = |tag: e::DynamicTag| entries.iter().find(|(t, _)| *t == tag).map(|&(_, v)| v);
    if let Some(bytes) = find(e::DT_HASH).and_then(|a| elf.bytes_at_address(a)) {
        let table =
            object::read::elf::HashTable::<H>::parse(endian, bytes).map_err(|err| elf.fail(err))?;
        return Ok(table.symbol_table_length().into());
    }
    if let Some(bytes) = find(e::DT_GNU_HASH).and_then(|a| elf.bytes_at_address(a)) {
        let table = object::read::elf::GnuHashTable::<H>::parse(endian, bytes)
            .map_err(|err| elf.fail(err))?;
        return Ok(table.symbol_table_length(endian).unwrap_or(0).into());
    }
    Ok(0)
}

/// The bytes a version table starts at, its declared entry count and its
/// address, from its address and count tags; None when there is no table.
fn version_table<'data, H: FileHeader<Endian = Endianness>>(
    elf: &Elf<'data, '_, H>,
    entries: &[(e::DynamicTag, u64)],
    (addr_tag, count_tag, what): (e::DynamicTag, e::DynamicTag, &str),
) -> Result<Option<(&'data [u8], u64, u64)>> {
    let find = |tag: e::DynamicTag| entries.iter().find(|(t, _)| *t == tag).map(|&(_, v)| v);
    let (Some(addr), Some(count)) = (find(addr_tag), find(count_tag)) else {
        return Ok(None);
    };
    match elf.bytes_at_address(addr) {
        Some(bytes) => Ok(Some((bytes, count, addr))),
        None => Err(malformed(
            elf.path,
            format!("{what} 0x{addr:x} is not inside any loaded part of the file"),
        )),
    }
}

/// Whether the version-need table (DT_VERNEED) asks for version `name`.
fn needs_version<H: FileHeader<Endian = Endianness>>(
    elf: &Elf<'_, '_, H>,
    entries: &[(e::DynamicTag, u64)],
    strtab: &[u8],
    name: &[u8],
) -> Result<bool> {
    let endian = elf.endian;
    let tags = (e::DT_VERNEED, e::DT_VERNEEDNUM, "DT_VERNEED");
    let Some((bytes, count, addr)) = version_table(elf, entries, tags)? else {
        return Ok(false);
    };
    let bad = |what: &str| {
        malformed(
            elf.path,
            format!("version-need table at 0x{addr:x}: {what}"),
        )
    };
    // Offsets and counts come from the file: the walk is bounded by the
    // counts it declares and every read is checked, so it cannot spin or
    // read out of bounds.
    let mut need_offset = 0u64;
    for _ in 0..count {
        let need: &e::Verneed<Endianness> = bytes
            .read_at(need_offset)
            .map_err(|_| bad("entry runs past the end of its segment"))?;
        let mut aux_offset = need_offset + u64::from(need.vn_aux.get(endian));
        for _ in 0..need.vn_cnt.get(endian) {
            let aux: &e::Vernaux<Endianness> = bytes
                .read_at(aux_offset)
                .map_err(|_| bad("auxiliary entry runs past the end of its segment"))?;
            if name_at(strtab, aux.vna_name.get(endian).into()) == Some(name) {
                return Ok(true);
            }
            match aux.vna_next.get(endian) {
                0 => break,
                next => aux_offset += u64::from(next),
            }
        }
        match need.vn_next.get(endian) {
            0 => break,
            next => need_offset += u64::from(next),
        }
    }
    Ok(false)
}

/// Whether the version-definition table (DT_VERDEF) defines version `name`.
fn defines_version<H: FileHeader<Endian = Endianness>>(
    elf: &Elf<'_, '_, H>,
    entries: &[(e::DynamicTag, u64)],
    strtab: &[u8],
    name: &[u8],
) -> Result<bool> {
    let endian = elf.endian;
    let tags = (e::DT_VERDEF, e::DT_VERDEFNUM, "DT_VERDEF");
    let Some((bytes, count, addr)) = version_table(elf, entries, tags)? else {
        return Ok(false);
    };
    let bad = |what: &str| {
        malformed(
            elf.path,
            format!("version definitions at 0x{addr:x}: {what}"),
        )
    };
    let mut offset = 0u64;
    for _ in 0..count {
        let def: &e::Verdef<Endianness> = bytes
            .read_at(offset)
            .map_err(|_| bad("entry runs past the end of its segment"))?;
        // The first auxiliary entry names the version being defined.
        let aux: &e::Verdaux<Endianness> = bytes
            .read_at(offset + u64::from(def.vd_aux.get(endian)))
            .map_err(|_| bad("auxiliary entry runs past the end of its segment"))?;
        if name_at(strtab, aux.vda_name.get(endian).into()) == Some(name) {
            return Ok(true);
        }
        match def.vd_next.get(endian) {
            0 => break,
            next => offset += u64::from(next),
        }
    }
    Ok(false)
}
