//! Producing the packed file from a layout: a copy of the input with the
//! relocated words, the rewritten region and the headers changed, the cut
//! pages left out, and the section headers (with `.relr.dyn`) at the end.

use crate::elf::{DYN_SIZE, Elf, Section, Segment, get32, put16, put64};
use crate::layout::Layout;
use crate::version::RELR_VERSION;
use object::elf as e;

const SYMBOL_SIZE: usize = 24;

/// The packed file: the input rewritten in place, then copied out without
/// the cut pages, with the appended segment and the new section headers.
pub(crate) fn write(elf: &Elf<'_>, layout: &Layout) -> Vec<u8> {
    let mut image = Rewrite::new(elf, layout);
    image.write_tables(elf);
    write_dynamic(elf, layout, &mut image.buf);
    let phdr_offset = layout
        .phdrs
        .map_or(elf.e_phoff as usize, |p| image.at(p.address));
    for (i, segment) in layout.segments.iter().enumerate() {
        let start = phdr_offset + i * 56;
        image.buf[start..start + 56].copy_from_slice(&segment.to_bytes());
    }
    let host = elf.segments[layout.host];
    if let Some((moved, _)) = layout.dynamic_new_place(host) {
        let old = elf.segments[elf.dynamic_segment].p_vaddr;
        move_dynamic_symbol(elf, &mut image.buf, old, moved.address);
    }
    image.packed_file(elf, phdr_offset)
}

/// The input's bytes rewritten in place, and the segment after all others
/// when the freed space was too small.
struct Rewrite<'a> {
    layout: &'a Layout,
    host: Segment,
    buf: Vec<u8>,
    appended: Option<Vec<u8>>,
}

impl<'a> Rewrite<'a> {
    /// The input with the packed relocations' addends in the words they
    /// relocate, and the region the tables are rewritten into cleared.
    fn new(elf: &Elf<'_>, layout: &'a Layout) -> Rewrite<'a> {
        let mut image = Rewrite {
            layout,
            host: elf.segments[layout.host],
            buf: elf.data.to_vec(),
            appended: layout
                .appended
                .as_ref()
                .map(|a| vec![0u8; a.place.size as usize]),
        };
        for &(_, addend, file_offset) in &layout.packed {
            put64(&mut image.buf, file_offset as usize, addend);
        }
        let region =
            image.at(layout.region.address)..image.at(layout.region.address + layout.region.size);
        image.buf[region].fill(0);
        image
    }

    /// The file offset of an address in the host segment.
    fn at(&self, address: u64) -> usize {
        self.host.offset_of(address) as usize
    }

    /// `bytes` at `address`, in the appended segment when it holds the
    /// address, else in place.
    fn put(&mut self, address: u64, bytes: &[u8]) {
        let target = match (&self.layout.appended, self.appended.as_mut()) {
            (Some(a), Some(tail)) if a.holds(address) => {
                let start = (address - a.place.address) as usize;
                &mut tail[start..start + bytes.len()]
            }
            _ => {
                let start = self.host.offset_of(address) as usize;
                &mut self.buf[start..start + bytes.len()]
            }
        };
        target.copy_from_slice(bytes);
    }

    /// The tables at their new places: the grown string table and version
    /// need, an appended dynamic section, the slid tables, the RELA entries
    /// kept and the RELR words.
    fn write_tables(&mut self, elf: &Elf<'_>) {
        let layout = self.layout;
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
            self.put(place.address, &table);
        }
        if let (Some(place), Some(version)) = (layout.verneed, &layout.version) {
            self.put(place.address, &version.table);
        }
        if let Some((place, _)) = layout.dynamic_appended() {
            let mut bytes = vec![0u8; place.size as usize];
            fill_dynamic(&mut bytes, &layout.dynamic);
            self.put(place.address, &bytes);
        }
        for &(_, _, from, to) in &layout.slid {
            let old = elf.bytes_at(from.address, from.size).unwrap_or_default();
            let start = self.at(to.address);
            self.buf[start..start + old.len()].copy_from_slice(old);
        }
        let mut cursor = self.at(layout.rela.address);
        for rela in &layout.kept {
            self.buf[cursor..cursor + 24].copy_from_slice(&rela.to_bytes());
            cursor += 24;
        }
        let mut cursor = self.at(layout.relr_at.address);
        for word in &layout.relr {
            put64(&mut self.buf, cursor, *word);
            cursor += 8;
        }
    }

    /// The rewritten bytes without the cut, the appended segment, the
    /// section headers, and the ELF header pointing at both header tables.
    fn packed_file(self, elf: &Elf<'_>, phdr_offset: usize) -> Vec<u8> {
        let layout = self.layout;
        let cut_start = layout.cut_offset as usize;
        let cut_end = cut_start + layout.removed as usize;
        let tail_end = layout.tail_end as usize;
        let mut out = Vec::with_capacity(elf.data.len() - layout.removed as usize + 4096);
        out.extend_from_slice(&self.buf[..cut_start]);
        out.extend_from_slice(&self.buf[cut_end..tail_end]);
        if let (Some(a), Some(tail)) = (&layout.appended, &self.appended) {
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
    let moves = SectionMoves::new(elf, layout);
    let mut sections: Vec<Section> = Vec::with_capacity(elf.sections.len() + 2);
    for (i, original) in elf.sections.iter().enumerate() {
        sections.push(if i == 0 {
            *original
        } else {
            moves.moved(i, *original)
        });
    }
    let dynstr_index = elf
        .sections
        .iter()
        .rposition(|s| moves.is_dynstr(s))
        .unwrap_or(0) as u32;
    let mut names = NameTable::new(elf);
    sections.extend(added_sections(layout, &moves, dynstr_index, &mut names));
    if let Some(grown) = names.grown().filter(|_| usize::from(elf.e_shstrndx) != 0) {
        let index = usize::from(elf.e_shstrndx);
        sections[index].sh_offset = out.len() as u64;
        sections[index].sh_size = grown.len() as u64;
        out.extend_from_slice(&grown);
    }
    sections
}

/// Where the layout moved each table a section header describes, known by
/// the table's old address.
struct SectionMoves<'a> {
    layout: &'a Layout,
    host: Segment,
    cut_start: u64,
    cut_end: u64,
    old_strtab: u64,
    old_verneed: Option<u64>,
    old_dynamic: u64,
}

impl<'a> SectionMoves<'a> {
    fn new(elf: &Elf<'_>, layout: &'a Layout) -> SectionMoves<'a> {
        SectionMoves {
            layout,
            host: elf.segments[layout.host],
            cut_start: layout.cut_offset,
            cut_end: layout.cut_offset + layout.removed,
            old_strtab: elf.dyn_value(e::DT_STRTAB.0).unwrap_or(0),
            old_verneed: elf.dyn_value(e::DT_VERNEED.0),
            old_dynamic: elf.segments[elf.dynamic_segment].p_vaddr,
        }
    }

    fn at(&self, address: u64) -> u64 {
        self.host.offset_of(address)
    }

    /// The dynamic string table's header.
    fn is_dynstr(&self, s: &Section) -> bool {
        s.sh_flags & e::SHF_ALLOC.0 != 0
            && s.sh_type == e::SHT_STRTAB.0
            && s.sh_addr == self.old_strtab
    }

    /// Section `i`'s header with its table where the layout put it, or its
    /// offset shifted past the cut.
    fn moved(&self, i: usize, mut s: Section) -> Section {
        let layout = self.layout;
        let allocated = s.sh_flags & e::SHF_ALLOC.0 != 0;
        if allocated && s.sh_type == e::SHT_RELA.0 && s.sh_addr == layout.old_rela.address {
            s.sh_addr = layout.rela.address;
            s.sh_offset = self.at(layout.rela.address);
            s.sh_size = layout.rela.size;
        } else if let (true, Some(place)) = (self.is_dynstr(&s), layout.dynstr) {
            s.sh_addr = place.address;
            s.sh_offset = layout.file_offset(self.host, place.address);
            s.sh_size = place.size;
        } else if let (true, Some(place), Some(version)) = (
            allocated && s.sh_type == e::SHT_GNU_VERNEED.0 && Some(s.sh_addr) == self.old_verneed,
            layout.verneed,
            &layout.version,
        ) {
            s.sh_addr = place.address;
            s.sh_offset = layout.file_offset(self.host, place.address);
            s.sh_size = place.size;
            s.sh_info = version.needs;
        } else if let (true, Some((place, file_offset))) = (
            s.sh_type == e::SHT_DYNAMIC.0 && s.sh_addr == self.old_dynamic,
            layout.dynamic_new_place(self.host),
        ) {
            s.sh_addr = place.address;
            s.sh_offset = file_offset;
            s.sh_size = place.size;
        } else if let Some(&(_, _, _, to)) = layout.slid.iter().find(|m| m.0 == i) {
            s.sh_addr = to.address;
            s.sh_offset = self.at(to.address);
        } else if layout.removed > 0 && s.sh_offset >= self.cut_end {
            s.sh_offset -= layout.removed;
        } else if layout.removed > 0 && s.sh_offset >= self.cut_start && s.file_size() == 0 {
            s.sh_offset = self.cut_start;
        }
        s
    }
}

/// The headers added at the end: `.relr.dyn`, and `.gnu.version_r` when
/// the version need is new (linked to the dynamic string table).
fn added_sections(
    layout: &Layout,
    moves: &SectionMoves,
    dynstr_index: u32,
    names: &mut NameTable,
) -> Vec<Section> {
    let alloc = e::SHF_ALLOC.0;
    let relr_name = names.offset_of(b".relr.dyn");
    let verneed_name = layout
        .version
        .as_ref()
        .filter(|v| v.adds_tags)
        .map(|_| names.offset_of(b".gnu.version_r"));
    let mut added = vec![Section {
        sh_name: relr_name,
        sh_type: e::SHT_RELR.0,
        sh_flags: alloc,
        sh_addr: layout.relr_at.address,
        sh_offset: moves.at(layout.relr_at.address),
        sh_size: layout.relr_at.size,
        sh_link: 0,
        sh_info: 0,
        sh_addralign: 8,
        sh_entsize: 8,
    }];
    if let (Some(name), Some(place), Some(version)) =
        (verneed_name, layout.verneed, &layout.version)
    {
        added.push(Section {
            sh_name: name,
            sh_type: e::SHT_GNU_VERNEED.0,
            sh_flags: alloc,
            sh_addr: place.address,
            sh_offset: layout.file_offset(moves.host, place.address),
            sh_size: place.size,
            sh_link: dynstr_index,
            sh_info: version.needs,
            sh_addralign: 8,
            sh_entsize: 0,
        });
    }
    added
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
