//! Naming addresses: the symbol that starts at (or contains) an address,
//! from the full symbol table when there is one, else the dynamic one.
//! One pass over the symbols for any number of addresses, so naming a
//! thousand initializers in a binary with a million symbols stays linear.

use super::Elf;
use crate::error::Result;
use object::Endianness;
use object::elf as e;
use object::read::elf::{FileHeader, Sym, SymbolTable};
use std::collections::HashMap;

/// How well a symbol names an address; higher wins.
fn score(exact: bool, st_type: e::SymbolType, st_bind: e::SymbolBind) -> u8 {
    let mut s = 0;
    if exact {
        s += 4;
    }
    if st_type == e::STT_FUNC {
        s += 2;
    }
    if st_bind != e::STB_LOCAL {
        s += 1;
    }
    s
}

fn table<'data, H: FileHeader<Endian = Endianness>>(
    elf: &Elf<'data, '_, H>,
) -> Result<Option<SymbolTable<'data, H, &'data [u8]>>> {
    for kind in [e::SHT_SYMTAB, e::SHT_DYNSYM] {
        let table = elf
            .sections
            .symbols(elf.endian, elf.data, kind)
            .map_err(|err| elf.fail(err))?;
        if !table.is_empty() {
            return Ok(Some(table));
        }
    }
    Ok(None)
}

/// Names for as many of `addresses` as a symbol covers.
pub(crate) fn names_for<H: FileHeader<Endian = Endianness>>(
    elf: &Elf<'_, '_, H>,
    addresses: &[u64],
) -> Result<HashMap<u64, String>> {
    let mut targets: Vec<u64> = addresses.iter().copied().filter(|&a| a != 0).collect();
    targets.sort_unstable();
    targets.dedup();
    let mut named = HashMap::new();
    if targets.is_empty() {
        return Ok(named);
    }
    let Some(table) = table(elf)? else {
        return Ok(named);
    };
    let endian = elf.endian;
    let mut best: Vec<Option<(u8, usize)>> = vec![None; targets.len()];
    for (index, sym) in table.iter().enumerate() {
        let st_type = sym.st_type();
        if sym.is_undefined(endian) || matches!(st_type, e::STT_SECTION | e::STT_FILE | e::STT_TLS)
        {
            continue;
        }
        let value: u64 = sym.st_value(endian).into();
        let size: u64 = sym.st_size(endian).into();
        let end = value.saturating_add(size.max(1));
        let first = targets.partition_point(|&t| t < value);
        for (slot, &target) in targets[first..].iter().enumerate() {
            if target >= end {
                break;
            }
            let candidate = score(target == value, st_type, sym.st_bind());
            let slot = &mut best[first + slot];
            if slot.is_none_or(|(s, _)| candidate > s) {
                *slot = Some((candidate, index));
            }
        }
    }
    let strings = table.strings();
    for (target, choice) in targets.iter().zip(best) {
        let Some((_, index)) = choice else { continue };
        let sym = table
            .symbol(object::SymbolIndex(index))
            .map_err(|err| elf.fail(err))?;
        let name = sym.name(endian, strings).map_err(|err| elf.fail(err))?;
        let value: u64 = sym.st_value(endian).into();
        let mut text = String::from_utf8_lossy(name).into_owned();
        if *target != value {
            text = format!("{text}+0x{:x}", target - value);
        }
        named.insert(*target, text);
    }
    Ok(named)
}

/// Name, address and whether it is defined, of dynamic symbol `index`.
pub(crate) fn dynamic_symbol<H: FileHeader<Endian = Endianness>>(
    elf: &Elf<'_, '_, H>,
    index: u32,
) -> Result<Option<(String, Option<u64>)>> {
    let table = elf
        .sections
        .symbols(elf.endian, elf.data, e::SHT_DYNSYM)
        .map_err(|err| elf.fail(err))?;
    let Ok(sym) = table.symbol(object::SymbolIndex(index as usize)) else {
        return Ok(None);
    };
    let endian = elf.endian;
    let name = sym
        .name(endian, table.strings())
        .map_err(|err| elf.fail(err))?;
    let value: u64 = sym.st_value(endian).into();
    let defined = !sym.is_undefined(endian);
    Ok(Some((
        String::from_utf8_lossy(name).into_owned(),
        defined.then_some(value),
    )))
}
