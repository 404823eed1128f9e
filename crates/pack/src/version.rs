//! The GLIBC_ABI_DT_RELR version need. glibc 2.36 and later refuse an object
//! that uses DT_RELR and needs `libc.so.*` unless its version-need table asks
//! libc for GLIBC_ABI_DT_RELR (elf/dl-version.c), so a packed file gets
//! that entry: added to libc's existing need, or as a new need of libc.

use crate::elf::{Elf, get16, get32, put16, put32};
use crate::error::Refused;
use object::elf as e;

pub(crate) const RELR_VERSION: &[u8] = b"GLIBC_ABI_DT_RELR";

const VERNEED_SIZE: usize = 16;
const VERNAUX_SIZE: usize = 16;

#[derive(Debug, Clone)]
pub(crate) struct Need {
    pub version: u16,
    pub file: u32,
    pub aux: Vec<Aux>,
}

#[derive(Debug, Clone)]
pub(crate) struct Aux {
    pub hash: u32,
    pub flags: u16,
    pub other: u16,
    pub name: u32,
}

/// What adding the version need takes.
#[derive(Debug, Clone)]
pub(crate) struct VersionNeed {
    /// The whole new version-need table.
    pub table: Vec<u8>,
    pub needs: u32,
    /// The string to append to `.dynstr`, if it is not there already.
    pub new_string: Option<Vec<u8>>,
    /// Whether DT_VERNEED/DT_VERNEEDNUM must be added (no table before).
    pub adds_tags: bool,
    /// Bytes of the table before (0 without one).
    pub old_size: u64,
}

/// The SysV ELF hash, which version entries carry and glibc compares.
pub(crate) fn elf_hash(name: &[u8]) -> u32 {
    let mut h: u32 = 0;
    for &byte in name {
        h = (h << 4).wrapping_add(u32::from(byte));
        let g = h & 0xf000_0000;
        if g != 0 {
            h ^= g >> 24;
        }
        h &= !g;
    }
    h
}

/// The libc this object needs (`libc.so.6`): the DT_NEEDED string offset.
fn needed_libc(elf: &Elf<'_>) -> Option<u32> {
    elf.dynamic
        .iter()
        .filter(|(tag, _)| *tag == e::DT_NEEDED.0)
        .find(|&&(_, value)| {
            elf.dynstr(value)
                .is_some_and(|name| name.starts_with(b"libc.so."))
        })
        .map(|&(_, value)| value as u32)
}

/// The version need to write, or None when none is required (no libc
/// needed, or GLIBC_ABI_DT_RELR already needed or defined).
pub(crate) fn relr_version_need(
    elf: &Elf<'_>,
    dynstr_size: u64,
) -> Result<Option<VersionNeed>, Refused> {
    let Some(libc) = needed_libc(elf) else {
        return Ok(None);
    };
    let mut needs = read_needs(elf)?;
    let defined = read_defined_indexes(elf)?;
    let names_relr = |name: u32| elf.dynstr(name.into()) == Some(RELR_VERSION);
    if needs
        .iter()
        .flat_map(|n| &n.aux)
        .any(|a| names_relr(a.name))
        || defined.iter().any(|&(_, name)| names_relr(name))
    {
        return Ok(None);
    }
    let highest = needs
        .iter()
        .flat_map(|n| n.aux.iter().map(|a| a.other & 0x7fff))
        .chain(defined.iter().map(|&(index, _)| index & 0x7fff))
        .max()
        .unwrap_or(1);
    let index = highest
        .checked_add(1)
        .filter(|&i| i < 0x7fff)
        .ok_or_else(|| {
            elf.malformed("version indexes are exhausted: no index is left for GLIBC_ABI_DT_RELR")
        })?;
    let (name, new_string) = match find_string(elf, RELR_VERSION) {
        Some(offset) => (offset, None),
        None => {
            let offset = u32::try_from(dynstr_size)
                .map_err(|_| elf.malformed("dynamic string table larger than 4 GiB"))?;
            let mut string = RELR_VERSION.to_vec();
            string.push(0);
            (offset, Some(string))
        }
    };
    let aux = Aux {
        hash: elf_hash(RELR_VERSION),
        flags: 0,
        other: index,
        name,
    };
    let libc_name = elf.dynstr(libc.into());
    match needs
        .iter_mut()
        .find(|n| elf.dynstr(n.file.into()) == libc_name)
    {
        Some(need) => need.aux.push(aux),
        None => needs.push(Need {
            version: 1,
            file: libc,
            aux: vec![aux],
        }),
    }
    let old_size = match (
        elf.dyn_value(e::DT_VERNEED.0),
        elf.dyn_value(e::DT_VERNEEDNUM.0),
    ) {
        (Some(_), Some(_)) => serialised_size(&read_needs(elf)?),
        _ => 0,
    };
    Ok(Some(VersionNeed {
        table: serialise(&needs),
        needs: needs.len() as u32,
        new_string,
        adds_tags: elf.dyn_value(e::DT_VERNEED.0).is_none(),
        old_size,
    }))
}

fn serialised_size(needs: &[Need]) -> u64 {
    needs
        .iter()
        .map(|n| (VERNEED_SIZE + VERNAUX_SIZE * n.aux.len()) as u64)
        .sum()
}

/// Needs, each followed by its auxiliary entries, linked by offsets.
fn serialise(needs: &[Need]) -> Vec<u8> {
    let mut out = Vec::new();
    for (i, need) in needs.iter().enumerate() {
        let start = out.len();
        out.resize(start + VERNEED_SIZE, 0);
        let next = if i + 1 == needs.len() {
            0
        } else {
            (VERNEED_SIZE + VERNAUX_SIZE * need.aux.len()) as u32
        };
        put16(&mut out, start, need.version);
        put16(&mut out, start + 2, need.aux.len() as u16);
        put32(&mut out, start + 4, need.file);
        put32(&mut out, start + 8, VERNEED_SIZE as u32);
        put32(&mut out, start + 12, next);
        for (j, aux) in need.aux.iter().enumerate() {
            let at = out.len();
            out.resize(at + VERNAUX_SIZE, 0);
            put32(&mut out, at, aux.hash);
            put16(&mut out, at + 4, aux.flags);
            put16(&mut out, at + 6, aux.other);
            put32(&mut out, at + 8, aux.name);
            let next = if j + 1 == need.aux.len() {
                0
            } else {
                VERNAUX_SIZE as u32
            };
            put32(&mut out, at + 12, next);
        }
    }
    out
}

/// The version-need table as the loader walks it: bounded by its declared
/// counts, every read checked.
fn read_needs(elf: &Elf<'_>) -> Result<Vec<Need>, Refused> {
    let (Some(address), Some(count)) = (
        elf.dyn_value(e::DT_VERNEED.0),
        elf.dyn_value(e::DT_VERNEEDNUM.0),
    ) else {
        return Ok(Vec::new());
    };
    let bytes = table_bytes(elf, address, "DT_VERNEED")?;
    let bad = |what: &str| elf.malformed(format!("version-need table at 0x{address:x}: {what}"));
    let mut needs = Vec::new();
    let mut at = 0usize;
    for _ in 0..count {
        let read = |offset: usize, f: fn(&[u8], usize) -> Option<u32>| {
            f(bytes, offset).ok_or_else(|| bad("entry runs past the end of its segment"))
        };
        let version =
            get16(bytes, at).ok_or_else(|| bad("entry runs past the end of its segment"))?;
        let cnt =
            get16(bytes, at + 2).ok_or_else(|| bad("entry runs past the end of its segment"))?;
        let file = read(at + 4, get32)?;
        let aux_offset = read(at + 8, get32)?;
        let next = read(at + 12, get32)?;
        let mut aux = Vec::new();
        let mut aux_at = at + aux_offset as usize;
        for _ in 0..cnt {
            let get = |offset: usize| {
                get32(bytes, aux_at + offset)
                    .ok_or_else(|| bad("auxiliary entry runs past the end of its segment"))
            };
            let hash = get(0)?;
            let flags_other = get(4)?;
            aux.push(Aux {
                hash,
                flags: (flags_other & 0xffff) as u16,
                other: (flags_other >> 16) as u16,
                name: get(8)?,
            });
            match get(12)? {
                0 => break,
                n => aux_at += n as usize,
            }
        }
        if aux.len() != usize::from(cnt) {
            return Err(bad("a need lists fewer auxiliary entries than it counts"));
        }
        needs.push(Need { version, file, aux });
        if next == 0 {
            break;
        }
        at += next as usize;
    }
    if needs.len() as u64 != count {
        return Err(bad("fewer entries than DT_VERNEEDNUM says"));
    }
    Ok(needs)
}

/// (index, name) of every version this object defines.
fn read_defined_indexes(elf: &Elf<'_>) -> Result<Vec<(u16, u32)>, Refused> {
    let (Some(address), Some(count)) = (
        elf.dyn_value(e::DT_VERDEF.0),
        elf.dyn_value(e::DT_VERDEFNUM.0),
    ) else {
        return Ok(Vec::new());
    };
    let bytes = table_bytes(elf, address, "DT_VERDEF")?;
    let bad = || {
        elf.malformed(format!(
            "version definitions at 0x{address:x}: entry runs past the end of its segment"
        ))
    };
    let mut out = Vec::new();
    let mut at = 0usize;
    for _ in 0..count {
        let index = get16(bytes, at + 4).ok_or_else(bad)?;
        let aux = get32(bytes, at + 12).ok_or_else(bad)?;
        let name = get32(bytes, at + aux as usize).ok_or_else(bad)?;
        out.push((index, name));
        match get32(bytes, at + 16).ok_or_else(bad)? {
            0 => break,
            next => at += next as usize,
        }
    }
    Ok(out)
}

/// From `address` to the end of the LOAD segment's file part holding it.
fn table_bytes<'data>(elf: &Elf<'data>, address: u64, what: &str) -> Result<&'data [u8], Refused> {
    let segment = elf
        .load_holding(address, 1)
        .map(|i| elf.segments[i])
        .ok_or_else(|| {
            elf.malformed(format!(
                "{what} 0x{address:x} is not inside any loaded part of the file"
            ))
        })?;
    let start = segment.offset_of(address) as usize;
    let end = (segment.p_offset + segment.p_filesz) as usize;
    Ok(&elf.data[start..end])
}

/// Offset of `name` as a whole NUL-terminated string (or the tail of one)
/// in the dynamic string table.
fn find_string(elf: &Elf<'_>, name: &[u8]) -> Option<u32> {
    let table = elf.bytes_at(
        elf.dyn_value(e::DT_STRTAB.0)?,
        elf.dyn_value(e::DT_STRSZ.0)?,
    )?;
    let mut wanted = name.to_vec();
    wanted.push(0);
    table
        .windows(wanted.len())
        .position(|w| w == wanted.as_slice())
        .map(|p| p as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn elf_hash_matches_the_values_glibc_ships() {
        // Hashes of version names as binutils writes them into libc's own
        // version definitions (readelf -V shows them).
        assert_eq!(elf_hash(b"GLIBC_2.2.5"), 0x09691a75);
        assert_eq!(elf_hash(b"GLIBC_2.34"), 0x069691b4);
        assert_eq!(elf_hash(b""), 0);
    }
}
