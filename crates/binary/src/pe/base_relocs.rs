//! The base relocation directory of a PE image: the fixups the loader
//! applies when the image cannot sit at its preferred base. Every page a
//! fixup lands in is read and dirtied by a rebase, so their spread is what a
//! rebase costs at startup.

use object::LittleEndian as LE;
use object::pe;
use object::read::pe::SectionTable;
use std::collections::{BTreeMap, BTreeSet};

/// Size of an IMAGE_BASE_RELOCATION block header (page RVA, block size).
const BLOCK_HEADER: usize = 8;

/// One fixup: where it writes and how.
#[derive(Debug, Clone, Copy)]
pub(super) struct Fixup {
    pub rva: u64,
    pub typ: u16,
}

/// The decoded directory.
#[derive(Debug, Default)]
pub(super) struct BaseRelocations {
    pub blocks: u64,
    /// IMAGE_REL_BASED_ABSOLUTE entries: padding that keeps blocks 32-bit
    /// aligned. The loader skips them, so they are counted apart.
    pub padding: u64,
    pub fixups: Vec<Fixup>,
}

/// Decodes the blocks of a base relocation directory. Stops at the end of
/// the directory or at an all-zero block header (some linkers end the table
/// with one); a block whose size is smaller than its header or runs past the
/// directory is an error rather than something to step over, since there is
/// no way to find the next block.
pub(super) fn parse(directory: &[u8]) -> Result<BaseRelocations, String> {
    let mut result = BaseRelocations::default();
    let mut cursor = 0usize;
    while cursor < directory.len() {
        let rest = directory.get(cursor..).unwrap_or_default();
        let Some(header) = rest.get(..BLOCK_HEADER) else {
            if rest.iter().all(|&b| b == 0) {
                break;
            }
            return Err(format!(
                "base relocation block at directory offset {cursor} is cut off: \
                 {} bytes left, a block header needs {BLOCK_HEADER}",
                rest.len()
            ));
        };
        let page_rva = read_u32(header, 0);
        let size = read_u32(header, 4) as usize;
        if page_rva == 0 && size == 0 {
            break;
        }
        if size < BLOCK_HEADER {
            return Err(format!(
                "base relocation block at directory offset {cursor} (page RVA {page_rva:#x}) \
                 has size {size}, smaller than its {BLOCK_HEADER}-byte header"
            ));
        }
        let Some(block) = rest.get(..size) else {
            return Err(format!(
                "base relocation block at directory offset {cursor} (page RVA {page_rva:#x}) \
                 has size {size} but only {} bytes of the directory are left",
                rest.len()
            ));
        };
        result.blocks += 1;
        let entries = block.get(BLOCK_HEADER..).unwrap_or_default();
        let mut words = entries
            .chunks_exact(2)
            .map(|pair| u16::from_le_bytes([pair[0], pair[1]]));
        while let Some(word) = words.next() {
            let typ = word >> 12;
            let rva = u64::from(page_rva) + u64::from(word & 0x0fff);
            if typ == pe::IMAGE_REL_BASED_ABSOLUTE.0 {
                result.padding += 1;
                continue;
            }
            if typ == pe::IMAGE_REL_BASED_HIGHADJ.0 {
                // HIGHADJ carries the low 16 bits of the target in the next
                // slot; that slot is a parameter, not a fixup of its own.
                if words.next().is_none() {
                    return Err(format!(
                        "base relocation block at directory offset {cursor} ends with a \
                         HIGHADJ fixup that lacks its parameter slot"
                    ));
                }
            }
            result.fixups.push(Fixup { rva, typ });
        }
        cursor += size;
    }
    Ok(result)
}

fn read_u32(bytes: &[u8], at: usize) -> u32 {
    let mut word = [0u8; 4];
    if let Some(src) = bytes.get(at..at + 4) {
        word.copy_from_slice(src);
    }
    u32::from_le_bytes(word)
}

/// The standard name of a base relocation type on `machine`.
pub(super) fn type_name(machine: pe::Machine, typ: u16) -> String {
    // object keys the ARM names to IMAGE_FILE_MACHINE_ARM only; Thumb-2
    // images (ARMNT) use the same relocation types.
    let names_machine = match machine {
        pe::IMAGE_FILE_MACHINE_ARMNT | pe::IMAGE_FILE_MACHINE_THUMB => pe::IMAGE_FILE_MACHINE_ARM,
        other => other,
    };
    pe::machine_names(names_machine)
        .rel_based
        .name(pe::BaseRelocationType(typ))
        .map(str::to_string)
        .unwrap_or_else(|| format!("IMAGE_REL_BASED_{typ}"))
}

/// Bytes a fixup of `typ` writes, so a fixup straddling a page boundary
/// dirties both pages. Types whose width is not known count one byte: the
/// page holding the fixup's address.
pub(super) fn width(machine: pe::Machine, typ: u16) -> u64 {
    let arm = matches!(
        machine,
        pe::IMAGE_FILE_MACHINE_ARM | pe::IMAGE_FILE_MACHINE_ARMNT | pe::IMAGE_FILE_MACHINE_THUMB
    );
    match pe::BaseRelocationType(typ) {
        pe::IMAGE_REL_BASED_DIR64 => 8,
        pe::IMAGE_REL_BASED_HIGHLOW => 4,
        pe::IMAGE_REL_BASED_HIGH | pe::IMAGE_REL_BASED_LOW | pe::IMAGE_REL_BASED_HIGHADJ => 2,
        // MOVW/MOVT pair: two 4-byte instructions.
        pe::IMAGE_REL_BASED_ARM_MOV32 | pe::IMAGE_REL_BASED_THUMB_MOV32 if arm => 8,
        _ => 1,
    }
}

/// Where the directory sits in the file: the section holding it and the
/// file range, or an explanation of why it cannot be read.
pub(super) fn locate<'data>(
    data: &'data [u8],
    sections: &SectionTable<'data>,
    rva: u32,
    size: u32,
) -> Result<(Option<usize>, u64, &'data [u8]), String> {
    let (offset, available) = sections.pe_file_range_at(rva).ok_or_else(|| {
        format!("base relocation directory at RVA {rva:#x} is not inside any section's file data")
    })?;
    if size > available {
        return Err(format!(
            "base relocation directory at RVA {rva:#x} is {size} bytes but its section \
             holds only {available} bytes from there"
        ));
    }
    let start = offset as usize;
    let bytes = data
        .get(start..start.saturating_add(size as usize))
        .ok_or_else(|| {
            format!(
                "base relocation directory at file offset {offset:#x} ({size} bytes) runs \
                 past the end of the file"
            )
        })?;
    let section = sections.iter().position(|header| {
        let va = header.virtual_address.get(LE);
        rva.checked_sub(va)
            .is_some_and(|delta| delta < header.pe_file_range().1)
    });
    Ok((section, u64::from(offset), bytes))
}

/// Distinct pages (numbered by address / page_size) each group of fixups
/// touches, keyed by section index (None: outside every section).
#[derive(Debug, Default)]
pub(super) struct PageSpread {
    pub total: BTreeSet<u64>,
    pub by_section: BTreeMap<Option<usize>, (u64, BTreeSet<u64>)>,
}

impl PageSpread {
    pub(super) fn add(&mut self, section: Option<usize>, address: u64, width: u64, page_size: u64) {
        let first = address / page_size;
        let last = address.saturating_add(width.max(1) - 1) / page_size;
        let entry = self.by_section.entry(section).or_default();
        entry.0 += 1;
        for page in first..=last {
            self.total.insert(page);
            entry.1.insert(page);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(page: u32, entries: &[u16]) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&page.to_le_bytes());
        out.extend_from_slice(&((8 + 2 * entries.len()) as u32).to_le_bytes());
        for entry in entries {
            out.extend_from_slice(&entry.to_le_bytes());
        }
        out
    }

    #[test]
    fn padding_entries_are_not_fixups() {
        let mut dir = block(0x1000, &[0xa008, 0xa010, 0xa018, 0x0000]);
        dir.extend(block(0x3000, &[0x3ffc, 0x0000]));
        let parsed = parse(&dir).unwrap();
        assert_eq!(parsed.blocks, 2);
        assert_eq!(parsed.padding, 2);
        let rvas: Vec<u64> = parsed.fixups.iter().map(|f| f.rva).collect();
        assert_eq!(rvas, vec![0x1008, 0x1010, 0x1018, 0x3ffc]);
    }

    #[test]
    fn highadj_consumes_its_parameter_slot() {
        let dir = block(0x2000, &[0x4010, 0x1234]);
        let parsed = parse(&dir).unwrap();
        assert_eq!(parsed.fixups.len(), 1);
        let dangling = block(0x2000, &[0x0000, 0x4010]);
        assert!(parse(&dangling).unwrap_err().contains("HIGHADJ"));
    }

    #[test]
    fn zero_terminator_and_zero_tail_end_the_table() {
        let mut dir = block(0x1000, &[0xa000, 0x0000]);
        dir.extend([0u8; 8]);
        dir.extend(block(0x5000, &[0xa000, 0x0000]));
        assert_eq!(parse(&dir).unwrap().blocks, 1);
        let mut tail = block(0x1000, &[0xa000, 0x0000]);
        tail.extend([0u8; 4]);
        assert_eq!(parse(&tail).unwrap().blocks, 1);
    }

    #[test]
    fn bad_block_sizes_are_errors_not_loops() {
        let mut small = block(0x1000, &[]);
        small[4..8].copy_from_slice(&4u32.to_le_bytes());
        assert!(parse(&small).unwrap_err().contains("smaller than"));
        let mut zero = block(0x1000, &[]);
        zero[4..8].copy_from_slice(&0u32.to_le_bytes());
        assert!(parse(&zero).unwrap_err().contains("smaller than"));
        let mut long = block(0x1000, &[0xa000, 0x0000]);
        long[4..8].copy_from_slice(&0x1000u32.to_le_bytes());
        assert!(parse(&long).unwrap_err().contains("left"));
        let cut = [1u8, 0, 0];
        assert!(parse(&cut).unwrap_err().contains("cut off"));
    }

    #[test]
    fn straddling_fixup_dirties_both_pages() {
        let mut spread = PageSpread::default();
        spread.add(Some(0), 0x1ffc, 8, 4096);
        spread.add(Some(0), 0x1000, 8, 4096);
        assert_eq!(spread.total.len(), 2);
        assert_eq!(spread.by_section[&Some(0)].0, 2);
    }
}
