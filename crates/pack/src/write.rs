//! Producing the packed file from a layout: a copy of the input with the
//! relocated words, the rewritten region and the headers changed, the cut
//! pages left out, and the section headers (with `.relr.dyn`) at the end.

use crate::elf::{DYN_SIZE, Elf, Section, get32, put16, put64};
use crate::layout::Layout;
use crate::version::RELR_VERSION;
use object::elf as e;

const SYMBOL_SIZE: usize = 24;

pub(crate) fn write(elf: &Elf<'_>, layout: &Layout) -> Vec<u8> {
    let data = elf.data;
    let host = elf.segments[layout.host];
    let at = |address: u64| host.offset_of(address) as usize;
    let mut buf = data.to_vec();

    for &(_, addend, file_offset) in &layout.packed {
        put64(&mut buf, file_offset as usize, addend);
    }
    let region = at(layout.region.address)..at(layout.region.address + layout.region.size);
    buf[region].fill(0);
    // The segment after all others, when the freed space was too small.
    let mut appended = layout
        .appended
        .as_ref()
        .map(|a| vec![0u8; a.place.size as usize]);
    let mut put = |buf: &mut [u8], address: u64, bytes: &[u8]| {
        let target = match (&layout.appended, appended.as_mut()) {
            (Some(a), Some(tail)) if a.holds(address) => {
                let start = (address - a.place.address) as usize;
                &mut tail[start..start + bytes.len()]
            }
            _ => {
                let start = at(address);
                &mut buf[start..start + bytes.len()]
            }
        };
        target.copy_from_slice(bytes);
    };
    if let Some(place) = layout.dynstr {
        let mut table = elf
            .bytes_at(
                elf.dyn_value(e::DT_STRTAB.0).unwrap_or(0),
                elf.dyn_value(e::DT_STRSZ.0).unwrap_or(0),
            )
            .unwrap_or_default()
            .to_vec();
        table.extend_from_slice(RELR_VERSION);
        table.resize(place.size as usize, 0);
        put(&mut buf, place.address, &table);
    }
    if let (Some(place), Some(version)) = (layout.verneed, &layout.version) {
        put(&mut buf, place.address, &version.table);
    }
    if let Some((place, _)) = layout.dynamic_appended() {
        let mut bytes = vec![0u8; place.size as usize];
        fill_dynamic(&mut bytes, &layout.dynamic);
        put(&mut buf, place.address, &bytes);
    }
    for &(_, _, from, to) in &layout.slid {
        let old = elf.bytes_at(from.address, from.size).unwrap_or_default();
        let start = at(to.address);
        buf[start..start + old.len()].copy_from_slice(old);
    }
    let mut cursor = at(layout.rela.address);
    for rela in &layout.kept {
        buf[cursor..cursor + 24].copy_from_slice(&rela.to_bytes());
        cursor += 24;
    }
    let mut cursor = at(layout.relr_at.address);
    for word in &layout.relr {
        put64(&mut buf, cursor, *word);
        cursor += 8;
    }
    write_dynamic(elf, layout, &mut buf);
    let phdr_offset = layout.phdrs.map_or(elf.e_phoff as usize, |p| at(p.address));
    for (i, segment) in layout.segments.iter().enumerate() {
        let start = phdr_offset + i * 56;
        buf[start..start + 56].copy_from_slice(&segment.to_bytes());
    }
    let moved = layout.dynamic_new_place(host).map(|(place, _)| place);
    if let Some(moved) = moved {
        let old = elf.segments[elf.dynamic_segment].p_vaddr;
        move_dynamic_symbol(elf, &mut buf, old, moved.address);
    }

    let cut_start = layout.cut_offset as usize;
    let cut_end = cut_start + layout.removed as usize;
    let tail_end = layout.tail_end as usize;
    let mut out = Vec::with_capacity(data.len() - layout.removed as usize + 4096);
    out.extend_from_slice(&buf[..cut_start]);
    out.extend_from_slice(&buf[cut_end..tail_end]);
    if let (Some(a), Some(tail)) = (&layout.appended, &appended) {
        out.resize(a.file_offset as usize, 0);
        out.extend_from_slice(tail);
    }
    if !elf.sections.is_empty() {
        let sections = new_sections(elf, layout, &mut out);
        out.resize(out.len().next_multiple_of(8), 0);
        let shoff = out.len() as u64;
        for section in &sections {
            out.extend_from_slice(&section.to_bytes());
        }
        put64(&mut out, 0x28, shoff);
        put16(&mut out, 0x3c, sections.len() as u16);
    }
    put64(&mut out, 0x20, phdr_offset as u64);
    put16(&mut out, 0x38, layout.segments.len() as u16);
    out
}

fn write_dynamic(elf: &Elf<'_>, layout: &Layout, buf: &mut [u8]) {
    let segment = elf.segments[elf.dynamic_segment];
    if layout.dynamic_appended().is_some() {
        return;
    }
    let (start, slots) = match layout.dynamic_moved {
        Some(place) => (
            elf.segments[layout.host].offset_of(place.address) as usize,
            place.size / DYN_SIZE,
        ),
        None => (segment.p_offset as usize, elf.dynamic_slots),
    };
    fill_dynamic(
        &mut buf[start..start + (slots * DYN_SIZE) as usize],
        &layout.dynamic,
    );
}

/// Entries, then DT_NULL to the end of `area`.
fn fill_dynamic(area: &mut [u8], entries: &[(i64, u64)]) {
    area.fill(0);
    for (i, &(tag, value)) in entries.iter().enumerate() {
        put64(area, i * 16, tag as u64);
        put64(area, i * 16 + 8, value);
    }
}

/// Points `_DYNAMIC` in the symbol tables at the moved dynamic section, as
/// the linker defines it.
fn move_dynamic_symbol(elf: &Elf<'_>, buf: &mut [u8], old: u64, new: u64) {
    for section in &elf.sections {
        if section.sh_type != e::SHT_SYMTAB.0 && section.sh_type != e::SHT_DYNSYM.0 {
            continue;
        }
        let Some(strings) = elf.sections.get(section.sh_link as usize) else {
            continue;
        };
        let names = strings.sh_offset as usize..(strings.sh_offset + strings.file_size()) as usize;
        let start = section.sh_offset as usize;
        let count = section.sh_size as usize / SYMBOL_SIZE;
        for i in 0..count {
            let entry = start + i * SYMBOL_SIZE;
            let Some(name) = get32(elf.data, entry) else {
                break;
            };
            let name_at = names.start + name as usize;
            let is_dynamic =
                name_at < names.end && elf.data[name_at..names.end].starts_with(b"_DYNAMIC\0");
            let value = u64::from_le_bytes(
                elf.data[entry + 8..entry + 16]
                    .try_into()
                    .unwrap_or_default(),
            );
            if is_dynamic && value == old {
                put64(buf, entry + 8, new);
            }
        }
    }
}

/// The section headers of the packed file: moved tables where they now
/// are, offsets after the cut shifted, `.relr.dyn` (and `.gnu.version_r`
/// when the file had none) added at the end so no index changes. A grown
/// section name table is appended to `out`.
fn new_sections(elf: &Elf<'_>, layout: &Layout, out: &mut Vec<u8>) -> Vec<Section> {
    let host = elf.segments[layout.host];
    let at = |address: u64| host.offset_of(address);
    let cut_start = layout.cut_offset;
    let cut_end = cut_start + layout.removed;
    let old_strtab = elf.dyn_value(e::DT_STRTAB.0).unwrap_or(0);
    let old_verneed = elf.dyn_value(e::DT_VERNEED.0);
    let old_dynamic = elf.segments[elf.dynamic_segment].p_vaddr;
    let alloc = e::SHF_ALLOC.0;
    let mut dynstr_index = 0u32;
    let mut sections: Vec<Section> = Vec::with_capacity(elf.sections.len() + 2);
    for (i, original) in elf.sections.iter().enumerate() {
        let mut s = *original;
        let allocated = s.sh_flags & alloc != 0;
        if allocated && s.sh_type == e::SHT_STRTAB.0 && s.sh_addr == old_strtab {
            dynstr_index = i as u32;
        }
        if i == 0 {
            sections.push(s);
            continue;
        }
        if allocated && s.sh_type == e::SHT_RELA.0 && s.sh_addr == layout.old_rela.address {
            s.sh_addr = layout.rela.address;
            s.sh_offset = at(layout.rela.address);
            s.sh_size = layout.rela.size;
        } else if let (true, Some(place)) = (
            allocated && s.sh_type == e::SHT_STRTAB.0 && s.sh_addr == old_strtab,
            layout.dynstr,
        ) {
            s.sh_addr = place.address;
            s.sh_offset = layout.file_offset(host, place.address);
            s.sh_size = place.size;
        } else if let (true, Some(place), Some(version)) = (
            allocated && s.sh_type == e::SHT_GNU_VERNEED.0 && Some(s.sh_addr) == old_verneed,
            layout.verneed,
            &layout.version,
        ) {
            s.sh_addr = place.address;
            s.sh_offset = layout.file_offset(host, place.address);
            s.sh_size = place.size;
            s.sh_info = version.needs;
        } else if let (true, Some((place, file_offset))) = (
            s.sh_type == e::SHT_DYNAMIC.0 && s.sh_addr == old_dynamic,
            layout.dynamic_new_place(host),
        ) {
            s.sh_addr = place.address;
            s.sh_offset = file_offset;
            s.sh_size = place.size;
        } else if let Some(&(_, _, _, to)) = layout.slid.iter().find(|m| m.0 == i) {
            s.sh_addr = to.address;
            s.sh_offset = at(to.address);
        } else if layout.removed > 0 && s.sh_offset >= cut_end {
            s.sh_offset -= layout.removed;
        } else if layout.removed > 0 && s.sh_offset >= cut_start && s.file_size() == 0 {
            s.sh_offset = cut_start;
        }
        sections.push(s);
    }

    let mut names = NameTable::new(elf);
    let relr_name = names.offset_of(b".relr.dyn");
    let verneed_name = layout
        .version
        .as_ref()
        .filter(|v| v.adds_tags)
        .map(|_| names.offset_of(b".gnu.version_r"));
    sections.push(Section {
        sh_name: relr_name,
        sh_type: e::SHT_RELR.0,
        sh_flags: alloc,
        sh_addr: layout.relr_at.address,
        sh_offset: at(layout.relr_at.address),
        sh_size: layout.relr_at.size,
        sh_link: 0,
        sh_info: 0,
        sh_addralign: 8,
        sh_entsize: 8,
    });
    if let (Some(name), Some(place), Some(version)) =
        (verneed_name, layout.verneed, &layout.version)
    {
        sections.push(Section {
            sh_name: name,
            sh_type: e::SHT_GNU_VERNEED.0,
            sh_flags: alloc,
            sh_addr: place.address,
            sh_offset: layout.file_offset(host, place.address),
            sh_size: place.size,
            sh_link: dynstr_index,
            sh_info: version.needs,
            sh_addralign: 8,
            sh_entsize: 0,
        });
    }
    if let Some(grown) = names.grown().filter(|_| usize::from(elf.e_shstrndx) != 0) {
        let index = usize::from(elf.e_shstrndx);
        sections[index].sh_offset = out.len() as u64;
        sections[index].sh_size = grown.len() as u64;
        out.extend_from_slice(&grown);
    }
    sections
}

/// The section name table, grown by names it lacks.
struct NameTable {
    table: Vec<u8>,
    original_len: usize,
}

impl NameTable {
    fn new(elf: &Elf<'_>) -> NameTable {
        let table = elf
            .sections
            .get(usize::from(elf.e_shstrndx))
            .and_then(|s| {
                elf.data
                    .get(s.sh_offset as usize..(s.sh_offset + s.file_size()) as usize)
            })
            .unwrap_or_default()
            .to_vec();
        let original_len = table.len();
        NameTable {
            table,
            original_len,
        }
    }

    fn offset_of(&mut self, name: &[u8]) -> u32 {
        let mut wanted = name.to_vec();
        wanted.push(0);
        if let Some(found) = self
            .table
            .windows(wanted.len())
            .position(|w| w == wanted.as_slice())
        {
            return found as u32;
        }
        if self.table.is_empty() {
            self.table.push(0);
        }
        let offset = self.table.len() as u32;
        self.table.extend_from_slice(&wanted);
        offset
    }

    fn grown(self) -> Option<Vec<u8>> {
        (self.table.len() != self.original_len).then_some(self.table)
    }
}
