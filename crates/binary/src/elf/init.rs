//! Static initializers: the functions the loader calls before main
//! (.preinit_array, DT_INIT, .init_array, and the legacy .ctors, which runs
//! backwards). Each slot is resolved to the function it will hold once
//! relocations are applied, then named from the symbol table, so a user sees
//! which code startup runs before main and how many pages it starts on.

use super::dynamic::DynamicInfo;
use super::reloc::SlotReloc;
use super::{Elf, malformed, symbols};
use crate::error::Result;
use crate::model::{Initializer, Initializers};
use object::Endianness;
use object::elf as e;
use object::read::elf::{FileHeader, ProgramHeader, SectionHeader};
use std::collections::HashSet;
use std::ops::Range;

/// Address ranges of the arrays whose slots get named (init, preinit, ctors),
/// and of fini (counted only).
struct Arrays {
    init: Vec<Range<u64>>,
    preinit: Vec<Range<u64>>,
    fini: Vec<Range<u64>>,
    ctors: Option<Range<u64>>,
}

fn arrays<H: FileHeader<Endian = Endianness>>(
    elf: &Elf<'_, '_, H>,
    dynamic: Option<&DynamicInfo>,
) -> Result<Arrays> {
    let endian = elf.endian;
    let has_loads = elf.phdrs.iter().any(|ph| ph.p_type(endian) == e::PT_LOAD);
    // Sizes come from the file: an array must lie inside what the loader
    // maps and be no larger than the file (a segment's memory size is as
    // untrusted as the array's), else a corrupt size would make us walk
    // billions of slots.
    let checked = |what: &str, addr: u64, size: u64| -> Result<Range<u64>> {
        let fits = size <= elf.size()
            && (!has_loads || size == 0 || elf.load_segment_of(addr, size).is_some());
        if !fits {
            return Err(malformed(
                elf.path,
                format!(
                    "{what} at 0x{addr:x} with size 0x{size:x} lies outside every loaded segment"
                ),
            ));
        }
        Ok(addr..addr.saturating_add(size))
    };
    let from_dynamic = |name: &str, addr_tag, size_tag| -> Result<Option<Vec<Range<u64>>>> {
        let Some(d) = dynamic else { return Ok(None) };
        let Some(addr) = d.value(addr_tag) else {
            return Ok(None);
        };
        let size = d.value(size_tag).unwrap_or(0);
        Ok(Some(vec![checked(name, addr, size)?]))
    };
    // The loader uses the DT_ tags; section headers are the fallback for
    // objects without a dynamic section (static executables, .o files).
    let from_sections = |sh_type| -> Result<Vec<Range<u64>>> {
        elf.sections_of_type(sh_type)
            .map(|(_, sh)| {
                let name = elf.section_name(sh)?;
                checked(&name, sh.sh_addr(endian).into(), sh.sh_size(endian).into())
            })
            .collect()
    };
    let ctors = match elf.section_named(b".ctors") {
        Some(sh) => Some(checked(
            ".ctors",
            sh.sh_addr(endian).into(),
            sh.sh_size(endian).into(),
        )?),
        None => None,
    };
    Ok(Arrays {
        init: match from_dynamic("DT_INIT_ARRAY", e::DT_INIT_ARRAY, e::DT_INIT_ARRAYSZ)? {
            Some(ranges) => ranges,
            None => from_sections(e::SHT_INIT_ARRAY)?,
        },
        preinit: match from_dynamic(
            "DT_PREINIT_ARRAY",
            e::DT_PREINIT_ARRAY,
            e::DT_PREINIT_ARRAYSZ,
        )? {
            Some(ranges) => ranges,
            None => from_sections(e::SHT_PREINIT_ARRAY)?,
        },
        fini: match from_dynamic("DT_FINI_ARRAY", e::DT_FINI_ARRAY, e::DT_FINI_ARRAYSZ)? {
            Some(ranges) => ranges,
            None => from_sections(e::SHT_FINI_ARRAY)?,
        },
        ctors,
    })
}

/// The slot ranges whose relocations the relocation pass should keep.
pub(crate) fn slot_ranges<H: FileHeader<Endian = Endianness>>(
    elf: &Elf<'_, '_, H>,
    dynamic: Option<&DynamicInfo>,
) -> Result<Vec<Range<u64>>> {
    let arrays = arrays(elf, dynamic)?;
    Ok(arrays
        .init
        .into_iter()
        .chain(arrays.preinit)
        .chain(arrays.ctors)
        .filter(|r| !r.is_empty())
        .collect())
}

fn slots(ranges: &[Range<u64>], word: u64) -> Vec<u64> {
    ranges
        .iter()
        .flat_map(|r| (0..(r.end - r.start) / word).map(move |i| r.start + i * word))
        .collect()
}

/// The initializers: each init array and .ctors slot resolved to the
/// function it will hold, then named.
pub(crate) fn analyse<H: FileHeader<Endian = Endianness>>(
    elf: &Elf<'_, '_, H>,
    dynamic: Option<&DynamicInfo>,
    slot_relocs: &[SlotReloc],
) -> Result<Initializers> {
    let arrays = arrays(elf, dynamic)?;
    let word = elf.word;
    let count = |ranges: &[Range<u64>]| ranges.iter().map(|r| (r.end - r.start) / word).sum();
    let resolver = SlotResolver::new(elf, slot_relocs);
    let init_function = dynamic.and_then(|d| d.value(e::DT_INIT));
    let mut resolved_init = Vec::new();
    for slot in slots(&arrays.init, word) {
        resolved_init.push((slot, resolver.resolve(slot)?));
    }
    let ctors_range = arrays.ctors.clone().into_iter().collect::<Vec<_>>();
    let resolved_ctors = resolver.constructors(&slots(&ctors_range, word))?;

    let targets: Vec<u64> = resolved_init
        .iter()
        .chain(&resolved_ctors)
        .filter_map(|(_, (target, _))| *target)
        .chain(init_function)
        .collect();
    let names = symbols::names_for(elf, &targets)?;
    let initializer = |slot: u64, target: Option<u64>, known: Option<String>| {
        let symbol = known.or_else(|| target.and_then(|t| names.get(&t).cloned()));
        Initializer {
            slot,
            target,
            demangled: symbol.as_deref().and_then(crate::demangle),
            symbol,
        }
    };
    let code_pages = targets
        .iter()
        .map(|t| t / elf.page_size)
        .collect::<HashSet<_>>()
        .len() as u64;

    Ok(Initializers {
        count: count(&arrays.init),
        entries: resolved_init
            .into_iter()
            .map(|(slot, (target, name))| initializer(slot, target, name))
            .collect(),
        preinit_count: count(&arrays.preinit),
        fini_count: count(&arrays.fini),
        init_function: init_function.map(|addr| initializer(0, Some(addr), None)),
        ctors_count: resolved_ctors.len() as u64,
        ctors: resolved_ctors
            .into_iter()
            .map(|(slot, (target, name))| initializer(slot, target, name))
            .collect(),
        code_pages,
    })
}

/// What a slot holds: the target address, and the symbol a symbolic
/// relocation names.
type Resolved = (Option<u64>, Option<String>);

/// What each slot will hold once the loader has applied the relocations
/// that write into slots.
struct SlotResolver<'e, 'data, 'p, H: FileHeader<Endian = Endianness>> {
    elf: &'e Elf<'data, 'p, H>,
    /// By offset, for binary search.
    relocs: Vec<SlotReloc>,
}

impl<'e, 'data, 'p, H: FileHeader<Endian = Endianness>> SlotResolver<'e, 'data, 'p, H> {
    fn new(elf: &'e Elf<'data, 'p, H>, slot_relocs: &[SlotReloc]) -> Self {
        let mut relocs = slot_relocs.to_vec();
        relocs.sort_by_key(|r| r.offset);
        SlotResolver { elf, relocs }
    }

    fn reloc_at(&self, slot: u64) -> Option<SlotReloc> {
        let i = self.relocs.partition_point(|r| r.offset < slot);
        self.relocs.get(i).filter(|r| r.offset == slot).copied()
    }

    /// A relocation's result, or the stored word (which RELR and REL
    /// relocations add the load base to).
    fn resolve(&self, slot: u64) -> Result<Resolved> {
        let stored = self.elf.word_at_address(slot);
        match self.reloc_at(slot) {
            Some(SlotReloc {
                symbol: Some(index),
                addend,
                ..
            }) => {
                let Some((name, value)) = symbols::dynamic_symbol(self.elf, index)? else {
                    return Ok((None, None));
                };
                let target = value.map(|v| v.wrapping_add(addend.unwrap_or(0) as u64));
                Ok((target, Some(name)))
            }
            Some(SlotReloc {
                relative: true,
                addend: Some(addend),
                ..
            }) => Ok((Some(addend as u64), None)),
            _ => Ok((stored.filter(|&v| v != 0), None)),
        }
    }

    /// The .ctors slots that hold constructors, resolved. .ctors starts
    /// with -1 and ends with 0 (crtbegin/crtend); those are markers, not
    /// constructors.
    fn constructors(&self, slots: &[u64]) -> Result<Vec<(u64, Resolved)>> {
        let all_ones = if self.elf.word == 8 {
            u64::MAX
        } else {
            u64::from(u32::MAX)
        };
        let mut resolved = Vec::new();
        for &slot in slots {
            let has_reloc = self.reloc_at(slot).is_some();
            let stored = self.elf.word_at_address(slot);
            if !has_reloc && matches!(stored, Some(0) | None) || stored == Some(all_ones) {
                continue;
            }
            resolved.push((slot, self.resolve(slot)?));
        }
        Ok(resolved)
    }
}
