//! The check on the fitted cost of a relative relocation: apply a
//! library's relative relocations by hand, the way ld.so does, and time
//! it. The library is mapped as ld.so maps it (an address range reserved,
//! each PT_LOAD mapped privately at its address with its protection), then
//! the timed part walks `.rela.dyn` in that mapping, stores `load bias +
//! addend` at `load bias + offset` for each R_X86_64_RELATIVE entry, and
//! makes the PT_GNU_RELRO range read-only, as ld.so does at the end of its
//! relocation step. The copy-on-write faults on `.data.rel.ro` and the
//! faults reading the table are paid here as in the loader; the mapping
//! itself (the loader's map phase) is not timed.

use anyhow::{Context, bail};
use coldstart_system::image::Reservation;
use object::elf;
use object::read::elf::{ElfFile64, ProgramHeader as _};
use object::{Endianness, Object, ObjectSection};
use std::fs::File;
use std::path::Path;

const RELA_ENTRY: u64 = 24;
const R_X86_64_RELATIVE: u32 = 8;
const PAGE: u64 = 4096;

/// One PT_LOAD, page-aligned as it is mapped.
#[derive(Debug, Clone, Copy)]
struct Load {
    /// Page-aligned address and file offset, and the mapped length.
    address: u64,
    offset: u64,
    len: u64,
    writable: bool,
}

/// A library's relative relocations and what it takes to map it.
#[derive(Debug, Clone)]
pub struct RelativeTable {
    loads: Vec<Load>,
    /// Bytes from the first mapped address to the end of the last segment.
    span: u64,
    /// Address and size of `.rela.dyn`.
    rela: (u64, u64),
    /// The page-aligned address range made read-only after relocation.
    relro: Option<(u64, u64)>,
    /// R_X86_64_RELATIVE entries in the table.
    pub relative: usize,
}

fn page_down(x: u64) -> u64 {
    x / PAGE * PAGE
}

fn page_up(x: u64) -> u64 {
    x.div_ceil(PAGE) * PAGE
}

impl RelativeTable {
    /// Reads the program headers and `.rela.dyn`, and checks that every
    /// relative relocation's target lies in the file-backed part of a
    /// writable segment, so the timed loop needs no checks.
    pub fn read(path: &Path) -> anyhow::Result<RelativeTable> {
        let data =
            std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
        let file = ElfFile64::<Endianness>::parse(&*data)
            .with_context(|| format!("{} is not a 64-bit ELF file", path.display()))?;
        let endian = file.endian();
        let headers = file.elf_program_headers();
        let mut loads = Vec::new();
        let mut file_parts = Vec::new();
        for header in headers.iter().filter(|h| h.p_type(endian) == elf::PT_LOAD) {
            let (vaddr, offset) = (header.p_vaddr(endian), header.p_offset(endian));
            let filesz = header.p_filesz(endian);
            if vaddr % PAGE != offset % PAGE || offset + filesz > data.len() as u64 {
                bail!("{}: a PT_LOAD cannot be mapped as it says", path.display());
            }
            let writable = header.p_flags(endian).0 & elf::PF_W.0 != 0;
            loads.push(Load {
                address: page_down(vaddr),
                offset: page_down(offset),
                len: page_up(vaddr + filesz) - page_down(vaddr),
                writable,
            });
            file_parts.push((vaddr, vaddr + filesz, writable));
        }
        let span = loads.iter().map(|l| l.address + l.len).max().unwrap_or(0);
        if loads.first().is_none_or(|l| l.address != 0) {
            bail!("{}: not a shared object based at address 0", path.display());
        }
        let relro = headers
            .iter()
            .find(|h| h.p_type(endian) == elf::PT_GNU_RELRO)
            .map(|h| {
                let (vaddr, size) = (h.p_vaddr(endian), h.p_memsz(endian));
                (page_down(vaddr), page_down(vaddr + size))
            })
            .filter(|(start, end)| end > start && *end <= span);
        let (rela, table) = match file.section_by_name(".rela.dyn") {
            Some(section) => {
                let (offset, size) = section
                    .file_range()
                    .with_context(|| format!("{}: .rela.dyn has no file data", path.display()))?;
                let bytes = data
                    .get(offset as usize..(offset + size) as usize)
                    .filter(|_| size % RELA_ENTRY == 0)
                    .with_context(|| {
                        format!("{}: .rela.dyn lies outside the file", path.display())
                    })?;
                ((section.address(), size), bytes)
            }
            None => ((0, 0), &[][..]),
        };
        let mut relative = 0;
        for entry in table.chunks_exact(RELA_ENTRY as usize) {
            let word = |i: usize| u64::from_le_bytes(entry[i * 8..i * 8 + 8].try_into().unwrap());
            if word(1) as u32 != R_X86_64_RELATIVE {
                continue;
            }
            let target = word(0);
            if !file_parts
                .iter()
                .any(|&(low, high, writable)| writable && low <= target && target + 8 <= high)
            {
                bail!(
                    "{}: a relative relocation at {target:#x} is outside the writable file data",
                    path.display()
                );
            }
            relative += 1;
        }
        if rela.0 + rela.1 > span {
            bail!("{}: .rela.dyn is not mapped by a PT_LOAD", path.display());
        }
        Ok(RelativeTable {
            loads,
            span,
            rela,
            relro,
            relative,
        })
    }

    /// Maps `path` as ld.so would and applies every relative relocation;
    /// returns the nanoseconds the application and the RELRO protection
    /// took.
    pub fn apply(&self, path: &Path) -> anyhow::Result<f64> {
        let file = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
        let mapping = map_like_ld_so(&file, self)
            .with_context(|| format!("cannot map {}", path.display()))?;
        let start = coldstart_system::launch::monotonic_ns();
        // SAFETY: `read` checked that the table lies in a mapped segment and
        // that every relative target lies in a writable one.
        unsafe { self.apply_at(mapping.base()) };
        if let Some((low, high)) = self.relro {
            mapping
                .protect_read_only(low, high)
                .with_context(|| format!("cannot protect RELRO of {}", path.display()))?;
        }
        let end = coldstart_system::launch::monotonic_ns();
        drop(mapping);
        Ok((end - start) as f64)
    }

    /// ld.so's loop for relative relocations.
    ///
    /// # Safety
    /// `base` must be this table's library mapped by [`map_like_ld_so`].
    unsafe fn apply_at(&self, base: *mut u8) {
        let load_bias = base as u64;
        // SAFETY: the table lies in a mapped segment (checked in `read`).
        let table = unsafe { base.add(self.rela.0 as usize) }.cast::<u64>();
        for index in 0..(self.rela.1 / RELA_ENTRY) as usize {
            // SAFETY: the entry's three words lie in the table.
            let (offset, info, addend) = unsafe {
                let entry = table.add(index * 3);
                (
                    entry.read_unaligned(),
                    entry.add(1).read_unaligned(),
                    entry.add(2).read_unaligned(),
                )
            };
            if info as u32 == R_X86_64_RELATIVE {
                // SAFETY: every relative target lies in a writable segment.
                unsafe {
                    base.add(offset as usize)
                        .cast::<u64>()
                        .write_unaligned(load_bias.wrapping_add(addend))
                };
            }
        }
    }
}

/// The library's segments mapped the way ld.so maps them, in a reservation
/// of the table's span; unmapped on drop.
fn map_like_ld_so(file: &File, table: &RelativeTable) -> std::io::Result<Reservation> {
    let reservation = Reservation::new(table.span as usize)?;
    for load in &table.loads {
        reservation.map_file(load.address, load.len, file, load.offset, load.writable)?;
    }
    Ok(reservation)
}
