//! Relocations: what the loader must do before the program runs. Counts per
//! table and per type, relative versus symbolic (symbol lookups), RELR
//! decoded, the exact RELR size of the relative ones, and the distinct pages
//! the loader writes (each is read from the file and becomes private memory).
//!
//! This is the hot path of `inspect` on big binaries (a million entries in
//! chromium), so it makes one pass per table, counts types in a flat array,
//! and finds the target section through a cursor that rarely moves.

use super::dynamic::DynamicInfo;
use super::{Elf, malformed};
use crate::error::{Error, Result};
use crate::model::{RelocationSection, Relocations, RelrEstimate, SectionPages, share};
use crate::relr;
use object::elf as e;
use object::read::elf::{FileHeader, Rel, Rela, RelrIterator, SectionHeader};
use object::{Endianness, ReadRef};
use std::collections::{BTreeMap, HashSet};
use std::ops::Range;

/// What the relocation pass found, with the relocations that initializer
/// slots need to be resolved.
pub(crate) struct RelocAnalysis {
    pub model: Relocations,
    pub slot_relocs: Vec<SlotReloc>,
}

/// A loader relocation that writes into an initializer array slot.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SlotReloc {
    pub offset: u64,
    /// Relative: the slot becomes base + addend (addend None: the value
    /// already stored in the slot). Symbolic: the symbol's address + addend.
    pub symbol: Option<u32>,
    pub addend: Option<i64>,
    pub relative: bool,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum TableFormat {
    Rel,
    Rela,
    Relr,
    Crel,
}

impl TableFormat {
    fn name(self) -> &'static str {
        match self {
            TableFormat::Rel => "rel",
            TableFormat::Rela => "rela",
            TableFormat::Relr => "relr",
            TableFormat::Crel => "crel",
        }
    }
}

struct Table {
    name: String,
    format: TableFormat,
    offset: u64,
    size: u64,
    dynamic: bool,
    /// Section header index, for CREL which object parses from the header.
    section: Option<usize>,
}

/// The type a machine uses for "add the load base" relocations, which RELR
/// can replace. Facts from each psABI.
fn relative_type(machine: e::Machine) -> Option<u32> {
    Some(match machine {
        e::EM_X86_64 => e::R_X86_64_RELATIVE.0,
        e::EM_386 => e::R_386_RELATIVE.0,
        e::EM_AARCH64 => e::R_AARCH64_RELATIVE.0,
        e::EM_ARM => e::R_ARM_RELATIVE.0,
        e::EM_RISCV => e::R_RISCV_RELATIVE.0,
        e::EM_PPC64 => e::R_PPC64_RELATIVE.0,
        e::EM_PPC => e::R_PPC_RELATIVE.0,
        e::EM_S390 => e::R_390_RELATIVE.0,
        e::EM_LOONGARCH => e::R_LARCH_RELATIVE.0,
        e::EM_SPARCV9 | e::EM_SPARC => e::R_SPARC_RELATIVE.0,
        _ => return None,
    })
}

pub(crate) fn type_name(machine: e::Machine, r_type: u32) -> String {
    match e::machine_names(machine).r.name(e::RelocationType(r_type)) {
        Some(name) => name.to_string(),
        None => format!("R_UNKNOWN_{r_type}"),
    }
}

/// Per-type counts: a flat array for the small type numbers every psABI
/// uses, a map for the rest.
#[derive(Default)]
struct TypeCounts {
    small: Vec<u64>,
    large: BTreeMap<u32, u64>,
}

impl TypeCounts {
    fn new() -> Self {
        TypeCounts {
            small: vec![0; 1024],
            large: BTreeMap::new(),
        }
    }

    #[inline]
    fn add(&mut self, r_type: u32) {
        match self.small.get_mut(r_type as usize) {
            Some(count) => *count += 1,
            None => *self.large.entry(r_type).or_default() += 1,
        }
    }

    fn named(&self, machine: e::Machine) -> BTreeMap<String, u64> {
        let mut out = BTreeMap::new();
        let small = self
            .small
            .iter()
            .enumerate()
            .filter(|(_, c)| **c > 0)
            .map(|(t, &c)| (t as u32, c));
        for (r_type, count) in small.chain(self.large.iter().map(|(&t, &c)| (t, c))) {
            *out.entry(type_name(machine, r_type)).or_default() += count;
        }
        out
    }

    fn merge(&mut self, other: &TypeCounts) {
        for (mine, theirs) in self.small.iter_mut().zip(&other.small) {
            *mine += theirs;
        }
        for (&t, &c) in &other.large {
            *self.large.entry(t).or_default() += c;
        }
    }
}

/// An allocated section (or, without section headers, a PT_LOAD) that
/// relocation targets are attributed to.
struct Span {
    start: u64,
    end: u64,
    label: usize,
}

/// Running totals over the loader's relocations.
struct Tally {
    page_shift: u32,
    word: u64,
    relative_type: Option<u32>,
    total: u64,
    relative: u64,
    symbolic: u64,
    symbols_seen: Vec<u64>,
    symbols_overflow: HashSet<u32>,
    spans: Vec<Span>,
    labels: Vec<String>,
    cursor: usize,
    span_relocs: Vec<u64>,
    /// (span, page) pairs, consecutive duplicates dropped on the way in.
    touched: Vec<(usize, u64)>,
    last_touched: Option<(usize, u64)>,
    packable: Vec<u64>,
    relative_in_tables: u64,
    relative_table_bytes: u64,
    relr_offsets: Vec<u64>,
    watch: Vec<Range<u64>>,
    watch_hull: Range<u64>,
    slot_relocs: Vec<SlotReloc>,
}

const NO_SPAN: usize = usize::MAX;

impl Tally {
    #[inline]
    fn span_of(&mut self, addr: u64) -> usize {
        if let Some(span) = self.spans.get(self.cursor)
            && span.start <= addr
            && addr < span.end
        {
            return self.cursor;
        }
        let after = self.spans.partition_point(|s| s.start <= addr);
        if after > 0 && addr < self.spans[after - 1].end {
            self.cursor = after - 1;
            return self.cursor;
        }
        NO_SPAN
    }

    /// One relocation the loader applies.
    #[inline]
    fn record(&mut self, offset: u64, r_type: Option<u32>, symbol: u32, addend: Option<i64>) {
        self.total += 1;
        let relative = r_type.is_none() || r_type == self.relative_type;
        if relative {
            self.relative += 1;
        }
        if symbol != 0 {
            self.symbolic += 1;
            let (word, bit) = ((symbol / 64) as usize, symbol % 64);
            match self.symbols_seen.get_mut(word) {
                Some(bits) => *bits |= 1 << bit,
                None => {
                    self.symbols_overflow.insert(symbol);
                }
            }
        }
        let span = self.span_of(offset);
        if let Some(count) = self.span_relocs.get_mut(span) {
            *count += 1;
        }
        let key = (span, offset >> self.page_shift);
        if self.last_touched != Some(key) {
            self.touched.push(key);
            self.last_touched = Some(key);
        }
        if self.watch_hull.contains(&offset) && self.watch.iter().any(|w| w.contains(&offset)) {
            self.slot_relocs.push(SlotReloc {
                offset,
                symbol: (symbol != 0).then_some(symbol),
                addend,
                relative,
            });
        }
    }

    /// A relative relocation stored as a REL/RELA entry of `entsize` bytes.
    #[inline]
    fn table_relative(&mut self, offset: u64, entsize: u64) {
        self.relative_in_tables += 1;
        self.relative_table_bytes += entsize;
        if offset.is_multiple_of(self.word) {
            self.packable.push(offset);
        }
    }
}

pub(crate) fn analyse<H: FileHeader<Endian = Endianness>>(
    elf: &Elf<'_, '_, H>,
    dynamic: Option<&DynamicInfo>,
    watch: Vec<Range<u64>>,
) -> Result<RelocAnalysis> {
    let tables = tables(elf, dynamic)?;
    let (spans, labels) = spans(elf);
    let dynsym_entries = dynamic.map_or(0, |d| d.model.dynamic_symbols);
    let watch_hull = match (
        watch.iter().map(|w| w.start).min(),
        watch.iter().map(|w| w.end).max(),
    ) {
        (Some(lo), Some(hi)) => lo..hi,
        _ => 0..0,
    };
    let mut tally = Tally {
        page_shift: elf.page_size.trailing_zeros(),
        word: elf.word,
        relative_type: relative_type(elf.machine),
        total: 0,
        relative: 0,
        symbolic: 0,
        symbols_seen: vec![0; (dynsym_entries as usize).div_ceil(64).min(1 << 20)],
        symbols_overflow: HashSet::new(),
        span_relocs: vec![0; spans.len()],
        spans,
        labels,
        cursor: 0,
        touched: Vec::new(),
        last_touched: None,
        packable: Vec::new(),
        relative_in_tables: 0,
        relative_table_bytes: 0,
        relr_offsets: Vec::new(),
        watch,
        watch_hull,
        slot_relocs: Vec::new(),
    };

    let mut by_type = TypeCounts::new();
    let mut sections = Vec::with_capacity(tables.len());
    let mut bytes = 0u64;
    let mut relr_words = 0u64;
    for table in &tables {
        let mut counts = TypeCounts::new();
        let (entries, relocations) = walk_table(elf, table, &mut tally, &mut counts)?;
        if table.format == TableFormat::Relr {
            relr_words += entries;
        }
        if table.dynamic {
            by_type.merge(&counts);
            bytes += table.size;
        }
        sections.push(RelocationSection {
            name: table.name.clone(),
            format: table.format.name().to_string(),
            offset: table.offset,
            size: table.size,
            entries,
            relocations,
            share_of_file: share(table.size, elf.size()),
            dynamic: table.dynamic,
            by_type: counts.named(elf.machine),
        });
    }

    let relr_estimate = relr_estimate(&mut tally, relr_words, elf.word);
    let pages_written = pages_written(&mut tally);
    let distinct_symbols = tally
        .symbols_seen
        .iter()
        .map(|w| u64::from(w.count_ones()))
        .sum::<u64>()
        + tally.symbols_overflow.len() as u64;

    Ok(RelocAnalysis {
        model: Relocations {
            total: tally.total,
            relative: tally.relative,
            symbolic: tally.symbolic,
            distinct_symbols,
            bytes,
            share_of_file: share(bytes, elf.size()),
            by_type: by_type.named(elf.machine),
            sections,
            relr_offsets: tally.relr_offsets,
            relr_estimate,
            pages_written,
        },
        slot_relocs: tally.slot_relocs,
    })
}

/// Walks one table; returns (table entries, relocations they stand for).
fn walk_table<H: FileHeader<Endian = Endianness>>(
    elf: &Elf<'_, '_, H>,
    table: &Table,
    tally: &mut Tally,
    counts: &mut TypeCounts,
) -> Result<(u64, u64)> {
    match table.format {
        TableFormat::Rela => walk_rela(elf, table, tally, counts),
        TableFormat::Rel => walk_rel(elf, table, tally, counts),
        TableFormat::Relr => walk_relr(elf, table, tally),
        TableFormat::Crel => walk_crel(elf, table, tally, counts),
    }
}

/// The error for a table whose entries run past the end of the file.
fn table_past_end<H: FileHeader<Endian = Endianness>>(
    elf: &Elf<'_, '_, H>,
    table: &Table,
) -> Error {
    malformed(
        elf.path,
        format!(
            "relocation table {} at offset 0x{:x} with size 0x{:x} runs past the end of the file",
            table.name, table.offset, table.size
        ),
    )
}

/// SHT_RELA: one entry per relocation, each with its addend.
fn walk_rela<H: FileHeader<Endian = Endianness>>(
    elf: &Elf<'_, '_, H>,
    table: &Table,
    tally: &mut Tally,
    counts: &mut TypeCounts,
) -> Result<(u64, u64)> {
    let endian = elf.endian;
    let mips64el = elf.header.is_mips64el(endian);
    let entsize = size_of::<H::Rela>() as u64;
    let count = (table.size / entsize) as usize;
    let entries: &[H::Rela] = elf
        .data
        .read_slice_at(table.offset, count)
        .map_err(|_| table_past_end(elf, table))?;
    for rela in entries {
        let r_type = rela.r_type(endian, mips64el).0;
        counts.add(r_type);
        if table.dynamic {
            let offset: u64 = rela.r_offset(endian).into();
            let addend: i64 = rela.r_addend(endian).into();
            let symbol = rela.r_sym(endian, mips64el);
            tally.record(offset, Some(r_type), symbol, Some(addend));
            if Some(r_type) == tally.relative_type {
                tally.table_relative(offset, entsize);
            }
        }
    }
    Ok((count as u64, count as u64))
}

/// SHT_REL: one entry per relocation, the addend in the place it patches.
fn walk_rel<H: FileHeader<Endian = Endianness>>(
    elf: &Elf<'_, '_, H>,
    table: &Table,
    tally: &mut Tally,
    counts: &mut TypeCounts,
) -> Result<(u64, u64)> {
    let endian = elf.endian;
    let entsize = size_of::<H::Rel>() as u64;
    let count = (table.size / entsize) as usize;
    let entries: &[H::Rel] = elf
        .data
        .read_slice_at(table.offset, count)
        .map_err(|_| table_past_end(elf, table))?;
    for rel in entries {
        let r_type = rel.r_type(endian).0;
        counts.add(r_type);
        if table.dynamic {
            let offset: u64 = rel.r_offset(endian).into();
            tally.record(offset, Some(r_type), rel.r_sym(endian), None);
            if Some(r_type) == tally.relative_type {
                tally.table_relative(offset, entsize);
            }
        }
    }
    Ok((count as u64, count as u64))
}

/// SHT_RELR: packed relative relocations, an address word then bitmaps,
/// so one entry stands for many relocations.
fn walk_relr<H: FileHeader<Endian = Endianness>>(
    elf: &Elf<'_, '_, H>,
    table: &Table,
    tally: &mut Tally,
) -> Result<(u64, u64)> {
    let count = (table.size / elf.word) as usize;
    let words: &[H::Relr] = elf
        .data
        .read_slice_at(table.offset, count)
        .map_err(|_| table_past_end(elf, table))?;
    let mut decoded = 0u64;
    let mut previous: Option<u64> = None;
    tally
        .relr_offsets
        .reserve(count.saturating_mul(8).min(1 << 22));
    for offset in RelrIterator::<H>::new(elf.endian, words) {
        let offset: u64 = offset.into();
        // Linkers emit RELR in ascending order. Insisting on it also
        // bounds what a hostile table (repeated bitmaps) can decode to.
        if previous.is_some_and(|p| offset <= p) {
            return Err(malformed(
                elf.path,
                format!(
                    "{}: RELR entries are not in ascending address order (0x{offset:x} after 0x{:x})",
                    table.name,
                    previous.unwrap_or_default()
                ),
            ));
        }
        previous = Some(offset);
        decoded += 1;
        if table.dynamic {
            tally.record(offset, None, 0, None);
            tally.relr_offsets.push(offset);
        }
    }
    Ok((count as u64, decoded))
}

/// SHT_CREL: compact relocations, decoded through the section header.
fn walk_crel<H: FileHeader<Endian = Endianness>>(
    elf: &Elf<'_, '_, H>,
    table: &Table,
    tally: &mut Tally,
    counts: &mut TypeCounts,
) -> Result<(u64, u64)> {
    let Some(index) = table.section else {
        return Ok((0, 0));
    };
    let sh = elf
        .sections
        .section(object::SectionIndex(index))
        .map_err(|err| elf.fail(err))?;
    let Some((iter, _)) = sh.crel(elf.endian, elf.data).map_err(|err| elf.fail(err))? else {
        return Ok((0, 0));
    };
    let mut count = 0u64;
    for crel in iter {
        let crel = crel.map_err(|err| elf.fail(err))?;
        count += 1;
        counts.add(crel.r_type.0);
        if table.dynamic {
            tally.record(
                crel.r_offset,
                Some(crel.r_type.0),
                crel.r_sym,
                Some(crel.r_addend),
            );
        }
    }
    Ok((count, count))
}

/// The relocation tables: from section headers, or from the dynamic
/// section when a file has none (the loader only needs the latter).
fn tables<H: FileHeader<Endian = Endianness>>(
    elf: &Elf<'_, '_, H>,
    dynamic: Option<&DynamicInfo>,
) -> Result<Vec<Table>> {
    let endian = elf.endian;
    let mut tables = Vec::new();
    for (index, sh) in elf.sections.enumerate() {
        let format = match sh.sh_type(endian) {
            e::SHT_REL => TableFormat::Rel,
            e::SHT_RELA => TableFormat::Rela,
            e::SHT_RELR => TableFormat::Relr,
            e::SHT_CREL => TableFormat::Crel,
            _ => continue,
        };
        let flags: u64 = sh.sh_flags(endian).0;
        tables.push(Table {
            name: elf.section_name(sh)?,
            format,
            offset: sh.sh_offset(endian).into(),
            size: sh.sh_size(endian).into(),
            dynamic: flags & e::SHF_ALLOC.0 != 0,
            section: Some(index.0),
        });
    }
    if !elf.sections.is_empty() {
        return Ok(tables);
    }
    let Some(dynamic) = dynamic else {
        return Ok(tables);
    };
    let plt_format = match dynamic.value(e::DT_PLTREL) {
        Some(v) if v == u64::from(e::DT_REL.0 as u32) => TableFormat::Rel,
        _ => TableFormat::Rela,
    };
    let candidates = [
        ("DT_RELA", e::DT_RELA, e::DT_RELASZ, TableFormat::Rela),
        ("DT_REL", e::DT_REL, e::DT_RELSZ, TableFormat::Rel),
        ("DT_JMPREL", e::DT_JMPREL, e::DT_PLTRELSZ, plt_format),
        ("DT_RELR", e::DT_RELR, e::DT_RELRSZ, TableFormat::Relr),
    ];
    for (name, addr_tag, size_tag, format) in candidates {
        let (Some(addr), Some(size)) = (dynamic.value(addr_tag), dynamic.value(size_tag)) else {
            continue;
        };
        let offset = elf.offset_of(addr).ok_or_else(|| {
            malformed(
                elf.path,
                format!("{name} 0x{addr:x} is not inside any loaded part of the file"),
            )
        })?;
        tables.push(Table {
            name: name.to_string(),
            format,
            offset,
            size,
            dynamic: true,
            section: None,
        });
    }
    Ok(tables)
}

/// Where relocation targets are attributed: allocated sections, or PT_LOAD
/// segments when there are no section headers.
fn spans<H: FileHeader<Endian = Endianness>>(elf: &Elf<'_, '_, H>) -> (Vec<Span>, Vec<String>) {
    use object::read::elf::ProgramHeader;
    let endian = elf.endian;
    let mut spans = Vec::new();
    let mut labels = Vec::new();
    for sh in elf.sections.iter() {
        let flags: u64 = sh.sh_flags(endian).0;
        let size: u64 = sh.sh_size(endian).into();
        let tls_bss = sh.sh_type(endian) == e::SHT_NOBITS && flags & e::SHF_TLS.0 != 0;
        if flags & e::SHF_ALLOC.0 == 0 || size == 0 || tls_bss {
            continue;
        }
        let start: u64 = sh.sh_addr(endian).into();
        spans.push(Span {
            start,
            end: start.saturating_add(size),
            label: labels.len(),
        });
        labels.push(
            elf.section_name(sh)
                .unwrap_or_else(|_| "[bad name]".to_string()),
        );
    }
    if spans.is_empty() {
        for (index, ph) in elf.phdrs.iter().enumerate() {
            if ph.p_type(endian) != e::PT_LOAD {
                continue;
            }
            let start: u64 = ph.p_vaddr(endian).into();
            let size: u64 = ph.p_memsz(endian).into();
            spans.push(Span {
                start,
                end: start.saturating_add(size),
                label: labels.len(),
            });
            labels.push(format!("[LOAD #{index}]"));
        }
    }
    spans.sort_by_key(|s| s.start);
    // Overlapping sections (only in odd files) would make the binary search
    // ambiguous: clip each to where the next begins.
    for i in 1..spans.len() {
        let next_start = spans[i].start;
        if spans[i - 1].end > next_start {
            spans[i - 1].end = next_start;
        }
    }
    (spans, labels)
}

fn relr_estimate(tally: &mut Tally, relr_words: u64, word: u64) -> Option<RelrEstimate> {
    tally.relative_type?;
    if tally.relative == 0 {
        return None;
    }
    let mut all = std::mem::take(&mut tally.packable);
    let packable = all.len() as u64;
    all.extend_from_slice(&tally.relr_offsets);
    all.sort_unstable();
    all.dedup();
    let relr_bytes = relr::encoded_words(&all, word) * word;
    let current_bytes = tally.relative_table_bytes + relr_words * word;
    Some(RelrEstimate {
        relative_in_tables: tally.relative_in_tables,
        packable,
        current_bytes,
        relr_bytes,
        saving_bytes: current_bytes.saturating_sub(relr_bytes),
    })
}

fn pages_written(tally: &mut Tally) -> crate::model::PagesWritten {
    let mut touched = std::mem::take(&mut tally.touched);
    touched.sort_unstable();
    touched.dedup();
    let mut pages: Vec<u64> = touched.iter().map(|&(_, page)| page).collect();
    pages.sort_unstable();
    pages.dedup();

    let mut by_section: Vec<SectionPages> = Vec::new();
    let mut i = 0;
    while i < touched.len() {
        let span = touched[i].0;
        let run = touched[i..].iter().take_while(|t| t.0 == span).count();
        let (section, relocations) = match tally.spans.get(span) {
            Some(s) => (tally.labels[s.label].clone(), tally.span_relocs[span]),
            None => ("[no section]".to_string(), 0),
        };
        by_section.push(SectionPages {
            section,
            relocations,
            pages: run as u64,
        });
        i += run;
    }
    if let Some(outside) = by_section.iter_mut().find(|s| s.section == "[no section]") {
        let attributed: u64 = tally.span_relocs.iter().sum();
        outside.relocations = tally.total - attributed;
    }
    by_section.sort_by(|a, b| {
        b.pages
            .cmp(&a.pages)
            .then_with(|| a.section.cmp(&b.section))
    });
    crate::model::PagesWritten {
        total: pages.len() as u64,
        by_section,
    }
}
