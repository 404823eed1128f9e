//! Deciding the packed file: which relocations move to RELR, where each
//! table that changes goes in the space the old RELA table frees, whether
//! the dynamic section stays, how many whole pages are cut out, and the new
//! program headers. Nothing is written here; `write` follows this plan.

use crate::Report;
use crate::elf::{DYN_SIZE, Elf, PHDR_SIZE, RELA_SIZE, Rela, Segment, WORD};
use crate::error::{Refusal, Refused};
use crate::version::{self, VersionNeed};
use coldstart_binary::relr;
use object::elf as e;
use std::path::Path;

const PAGE: u64 = 4096;

/// A table that changes, at its new place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Placed {
    pub address: u64,
    pub size: u64,
}

/// Everything the writer needs.
#[derive(Debug)]
pub(crate) struct Layout {
    /// The LOAD segment that held the RELA table (index in the original).
    pub host: usize,
    /// (address, addend, file offset of the word) of every packed
    /// relocation, by address.
    pub packed: Vec<(u64, u64, u64)>,
    pub kept: Vec<Rela>,
    pub kept_relative: u64,
    pub relr: Vec<u64>,
    pub rela: Placed,
    pub relr_at: Placed,
    pub version: Option<VersionNeed>,
    /// New places of the string table and version need, when they change.
    pub dynstr: Option<Placed>,
    pub verneed: Option<Placed>,
    /// Tables that slid forward unchanged to let the string table grow in
    /// place: (section index, dynamic tag, old place, new place).
    pub slid: Vec<(usize, i64, Placed, Placed)>,
    /// Where the program headers go when they move, and how many.
    pub phdrs: Option<Placed>,
    /// Where the dynamic section goes when it moves.
    pub dynamic_moved: Option<Placed>,
    /// The segment after all others, when anything had to go there.
    pub appended: Option<Appended>,
    /// Input offset where the bytes copied after the cut end: the old section
    /// header table is dropped when it ends the file (a new one is written).
    pub tail_end: u64,
    pub dynamic: Vec<(i64, u64)>,
    /// Rewritten region: from `region.address` to the old table's end,
    /// zeroed first, then the tables above written into it.
    pub region: Placed,
    /// First byte after the new tables.
    pub content_end: u64,
    /// Bytes cut out of the file at `cut_offset`.
    pub removed: u64,
    /// The new program headers, in file order.
    pub segments: Vec<Segment>,
    pub load_segments_added: u32,
    /// File offset (in the input) where the cut starts.
    pub cut_offset: u64,
    /// Old RELA table, for the report.
    pub old_rela: Placed,
}

impl Layout {
    /// The dynamic section in the appended segment, and its file offset.
    pub fn dynamic_appended(&self) -> Option<(Placed, u64)> {
        self.appended.as_ref().and_then(Appended::dynamic_at)
    }

    /// Where the dynamic section moved, if it did, and its file offset.
    pub fn dynamic_new_place(&self, host: Segment) -> Option<(Placed, u64)> {
        match self.dynamic_moved {
            Some(place) => Some((place, host.offset_of(place.address))),
            None => self.dynamic_appended(),
        }
    }

    /// Offset in the output file of a new table at `address`: in the
    /// appended segment, or before the cut (where offsets do not change).
    pub fn file_offset(&self, host: Segment, address: u64) -> u64 {
        match &self.appended {
            Some(appended) if appended.holds(address) => appended.file_offset_of(address),
            _ => host.offset_of(address),
        }
    }

    pub fn report(&self, path: &Path, before: u64, after: u64) -> Report {
        let tables_end = self.relr_at.address + self.relr_at.size;
        let tables_start = if self.rela.size > 0 {
            self.rela.address
        } else {
            self.relr_at.address
        };
        let hole = (self.region.address + self.region.size)
            .saturating_sub(self.content_end)
            .saturating_sub(self.removed);
        Report {
            input: path.to_path_buf(),
            output: None,
            relative_packed: self.packed.len() as u64,
            relocations_kept: self.kept.len() as u64,
            relative_kept: self.kept_relative,
            rela_bytes_before: self.old_rela.size,
            rela_bytes_after: self.rela.size,
            relr_bytes: self.relr_at.size,
            file_bytes_before: before,
            file_bytes_after: after,
            loader_pages_before: pages(self.old_rela.address, self.old_rela.size),
            loader_pages_after: pages(tables_start, tables_end - tables_start),
            compacted_bytes: self.removed,
            hole_bytes: hole,
            dynamic: if self.dynamic_appended().is_some() {
                "appended-segment"
            } else if self.dynamic_moved.is_some() {
                "writable-segment"
            } else {
                "in-place"
            },
            version_need_added: self.version.is_some(),
            load_segments_added: self.load_segments_added,
        }
    }
}

fn pages(address: u64, size: u64) -> u64 {
    if size == 0 {
        0
    } else {
        (address + size).div_ceil(PAGE) - address / PAGE
    }
}

/// `value` rounded up to a multiple of `to`; u64::MAX when that overflows,
/// which no table fits below, so an absurd alignment is refused as no room.
fn align(value: u64, to: u64) -> u64 {
    value.div_ceil(to).saturating_mul(to)
}

/// Works out the packed file, or says why it cannot be done.
pub(crate) fn plan(elf: &Elf<'_>) -> Result<Layout, Refused> {
    check_candidate(elf)?;
    let old_rela = rela_table(elf)?;
    let host = elf
        .load_holding(old_rela.address, old_rela.size)
        .ok_or_else(|| {
            elf.malformed(format!(
                "DT_RELA table at 0x{:x} is not inside one loaded segment's file bytes",
                old_rela.address
            ))
        })?;
    let relocations = elf.relas(old_rela.address, old_rela.size)?;
    let split = split_relocations(elf, host, &relocations)?;
    if split.packed.is_empty() {
        return Err(elf.refused(Refusal::NothingToPack));
    }
    let offsets: Vec<u64> = split.packed.iter().map(|&(o, _, _)| o).collect();
    let relr = relr::encode(&offsets, WORD);

    let strsz = elf.dyn_value(e::DT_STRSZ.0).unwrap_or(0);
    let version = version::relr_version_need(elf, strsz)?;
    let tables = Tables::new(
        elf,
        host,
        old_rela,
        &split,
        relr.len() as u64 * WORD,
        version.as_ref(),
    );

    // First without moving the program headers; if the file is split (a cut
    // or a writable page for the dynamic section), again with room for them.
    let mut fit = tables.fit(elf, None)?;
    if fit.moves_headers() {
        let wanted = elf.segments.len() as u64 + fit.new_loads();
        match tables.fit(elf, Some(wanted)) {
            // Room for the headers can only shrink the cut: a slot left
            // over stays PT_NULL.
            Ok(with_headers) if with_headers.moves_headers() => fit = with_headers,
            // The headers would take the only page there was to cut, or
            // more room than is free: when only the cut needed them, leave
            // the freed bytes as a hole and the headers where they are.
            Ok(_) => fit.removed = 0,
            Err(_) if !fit.moves_dynamic() && !fit.appends() => fit.removed = 0,
            Err(no_room) => return Err(no_room),
        }
    }
    // With nothing cut, the empty cut sits at the end of the tables, which
    // the file holds (the page after them may lie past its end).
    let cut_offset =
        elf.segments[host].offset_of(if fit.removed > 0 { fit.cut_at } else { fit.end });
    let tail_end = tail_end(elf, cut_offset + fit.removed);
    let copied = tail_end - fit.removed;
    let appended = fit
        .appends()
        .then(|| append(elf, &tables, &mut fit, copied));
    let segments = new_segments(elf, host, &fit, appended.as_ref())?;
    let load_segments_added = (segments.iter().filter(|s| s.is_load()).count()
        - elf.segments.iter().filter(|s| s.is_load()).count()) as u32;
    let dynamic = new_dynamic(elf, &tables, &fit, &split, version.as_ref());
    Ok(Layout {
        host,
        kept_relative: split.kept_relative,
        packed: split.packed,
        kept: split.kept,
        relr,
        rela: fit.rela,
        relr_at: fit.relr,
        version,
        dynstr: fit.dynstr,
        verneed: fit.verneed,
        slid: fit.slid.clone(),
        phdrs: fit.phdrs,
        dynamic_moved: fit.dynamic,
        appended,
        tail_end,
        dynamic,
        region: Placed {
            address: fit.region_start,
            size: old_rela.address + old_rela.size - fit.region_start,
        },
        content_end: fit.end,
        removed: fit.removed,
        segments,
        load_segments_added,
        cut_offset,
        old_rela,
    })
}

/// Where the copy of the input after the cut stops: at the section header
/// table when it ends the file (the writer puts a new one at the end),
/// else at the end of the file.
fn tail_end(elf: &Elf<'_>, cut_end: u64) -> u64 {
    let len = elf.data.len() as u64;
    let table_end = elf.e_shoff + elf.sections.len() as u64 * crate::elf::SHDR_SIZE;
    if !elf.sections.is_empty() && table_end == len && elf.e_shoff >= cut_end {
        elf.e_shoff
    } else {
        len
    }
}

/// A segment after every other, for what the freed space cannot hold: in
/// memory after the end of every segment, in the file after the copied
/// bytes, address and offset congruent modulo the largest alignment.
/// Writable when it holds the dynamic section.
#[derive(Debug, Clone)]
pub(crate) struct Appended {
    pub place: Placed,
    pub file_offset: u64,
    pub writable: bool,
    pub dynamic: Option<Placed>,
}

impl Appended {
    pub fn holds(&self, address: u64) -> bool {
        address >= self.place.address && address < self.place.address + self.place.size
    }

    pub fn file_offset_of(&self, address: u64) -> u64 {
        self.file_offset + (address - self.place.address)
    }

    /// The dynamic section, when it is here, and its offset in the file.
    pub fn dynamic_at(&self) -> Option<(Placed, u64)> {
        self.dynamic.map(|d| (d, self.file_offset_of(d.address)))
    }
}

/// Places the overflowing tables of `fit` in the appended segment and
/// points `fit` at them.
fn append(elf: &Elf<'_>, tables: &Tables, fit: &mut Fit, copied: u64) -> Appended {
    let memory_end = elf
        .segments
        .iter()
        .filter(|s| s.is_load())
        .map(|s| s.p_vaddr + s.p_memsz)
        .max()
        .unwrap_or(0);
    let file_offset = align(copied, PAGE);
    let start = align(memory_end, tables.granule) + file_offset % tables.granule;
    let mut cursor = start;
    let mut place = |size: u64, alignment: u64| {
        let address = align(cursor, alignment);
        cursor = address + size;
        Placed { address, size }
    };
    if fit.verneed_at_end {
        fit.verneed = tables.verneed.map(|(_, _, new)| place(new, WORD));
    }
    if fit.dynstr_at_end {
        fit.dynstr = tables.dynstr.map(|(_, _, new)| place(new, 1));
    }
    let dynamic = fit
        .dynamic_at_end
        .then(|| place(tables.dynamic_bytes, WORD));
    Appended {
        place: Placed {
            address: start,
            size: cursor - start,
        },
        file_offset,
        writable: dynamic.is_some(),
        dynamic,
    }
}

/// Refuses what pack cannot rewrite correctly, before any work.
fn check_candidate(elf: &Elf<'_>) -> Result<(), Refused> {
    match e::FileType(elf.e_type) {
        e::ET_DYN => {}
        e::ET_EXEC => {
            return Err(elf.refused(Refusal::NotLoaderRelocated(
                "position-dependent executable (ET_EXEC): it loads at its link address, so it has \
                 no relative relocations worth packing"
                    .into(),
            )));
        }
        other => {
            return Err(elf.refused(Refusal::NotLoaderRelocated(format!(
                "ELF type {other} is neither a shared object nor a position-independent executable"
            ))));
        }
    }
    let flags = elf.dyn_value(e::DT_FLAGS.0).unwrap_or(0);
    let flags_1 = elf.dyn_value(e::DT_FLAGS_1.0).unwrap_or(0);
    let has_interp = elf.segments.iter().any(|s| s.p_type == e::PT_INTERP.0);
    if !has_interp && flags_1 & e::DF_1_PIE.0 != 0 {
        return Err(elf.refused(Refusal::NotLoaderRelocated(
            "static PIE: it relocates itself before any loader runs".into(),
        )));
    }
    if elf.has_tag(e::DT_RELR.0)
        || elf.has_tag(e::DT_RELRSZ.0)
        || elf.sections.iter().any(|s| s.sh_type == e::SHT_RELR.0)
    {
        return Err(elf.refused(Refusal::AlreadyRelr));
    }
    if elf.has_tag(e::DT_TEXTREL.0) || flags & e::DF_TEXTREL.0 != 0 {
        return Err(elf.refused(Refusal::TextRel));
    }
    if elf.has_tag(e::DT_REL.0) {
        return Err(elf.refused(Refusal::Unsupported(
            "a REL table (DT_REL) in an x86-64 file".into(),
        )));
    }
    if !elf.has_tag(e::DT_RELA.0) {
        return Err(elf.refused(Refusal::NothingToPack));
    }
    Ok(())
}

fn rela_table(elf: &Elf<'_>) -> Result<Placed, Refused> {
    // glibc takes the last of a repeated tag, pack reads the first and
    // rewrites each once: a repeat is refused rather than guessed at.
    for (tag, name) in [
        (e::DT_RELA, "DT_RELA"),
        (e::DT_RELASZ, "DT_RELASZ"),
        (e::DT_RELAENT, "DT_RELAENT"),
        (e::DT_RELACOUNT, "DT_RELACOUNT"),
    ] {
        if elf.dynamic.iter().filter(|&&(t, _)| t == tag.0).count() > 1 {
            return Err(elf.malformed(format!("the dynamic section has more than one {name}")));
        }
    }
    let address = elf.dyn_value(e::DT_RELA.0).unwrap_or(0);
    let size = elf
        .dyn_value(e::DT_RELASZ.0)
        .ok_or_else(|| elf.malformed("DT_RELA without DT_RELASZ"))?;
    match elf.dyn_value(e::DT_RELAENT.0) {
        Some(RELA_SIZE) => {}
        Some(other) => return Err(elf.malformed(format!("DT_RELAENT is {other}, not {RELA_SIZE}"))),
        None => return Err(elf.malformed("DT_RELA without DT_RELAENT")),
    }
    if !size.is_multiple_of(RELA_SIZE) {
        return Err(elf.malformed(format!("DT_RELASZ {size} is not a multiple of {RELA_SIZE}")));
    }
    if let (Some(jmprel), Some(pltsz)) = (
        elf.dyn_value(e::DT_JMPREL.0),
        elf.dyn_value(e::DT_PLTRELSZ.0),
    ) && jmprel < address.saturating_add(size)
        && address < jmprel.saturating_add(pltsz)
    {
        return Err(elf.refused(Refusal::Unsupported(
            "the PLT relocations (DT_JMPREL) lie inside the DT_RELA table".into(),
        )));
    }
    Ok(Placed { address, size })
}

struct Split {
    packed: Vec<(u64, u64, u64)>,
    kept: Vec<Rela>,
    kept_relative: u64,
}

/// Which relocations RELR takes: R_X86_64_RELATIVE without a symbol, at a
/// word-aligned address whose word the file holds in a writable segment
/// (RELR adds the base to the word, so the addend must live there). The
/// rest keep their order, relative ones first for DT_RELACOUNT.
fn split_relocations(elf: &Elf<'_>, host: usize, relocations: &[Rela]) -> Result<Split, Refused> {
    // The file offset of the word, when RELR can relocate it.
    let packable = |r: &Rela| {
        if r.kind() != e::R_X86_64_RELATIVE.0 || r.symbol() != 0 || !r.offset.is_multiple_of(WORD) {
            return None;
        }
        let i = elf.load_holding(r.offset, WORD)?;
        let segment = elf.segments[i];
        (i != host && segment.p_flags & e::PF_W.0 != 0).then(|| segment.offset_of(r.offset))
    };
    let mut packed = Vec::new();
    let mut kept_relative = Vec::new();
    let mut kept_other = Vec::new();
    for r in relocations {
        if let Some(file_offset) = packable(r) {
            packed.push((r.offset, r.addend as u64, file_offset));
        } else if r.kind() == e::R_X86_64_RELATIVE.0 {
            kept_relative.push(*r);
        } else {
            kept_other.push(*r);
        }
    }
    packed.sort_unstable();
    // Two relocations of one word: RELA applies them in table order, RELR
    // before RELA; rather than reason about which wins, refuse.
    let mut written: Vec<u64> = kept_relative
        .iter()
        .chain(&kept_other)
        .map(|r| r.offset)
        .collect();
    written.sort_unstable();
    for pair in packed.windows(2) {
        if pair[0].0 == pair[1].0 {
            return Err(elf.refused(Refusal::Unsupported(format!(
                "two relative relocations write the word at 0x{:x}",
                pair[0].0
            ))));
        }
    }
    if let Some(&(offset, _, _)) = packed
        .iter()
        .find(|(o, _, _)| written.binary_search(o).is_ok())
    {
        return Err(elf.refused(Refusal::Unsupported(format!(
            "a relative and another relocation both write the word at 0x{offset:x}"
        ))));
    }
    let kept_relative_count = kept_relative.len() as u64;
    kept_relative.extend(kept_other);
    Ok(Split {
        packed,
        kept: kept_relative,
        kept_relative: kept_relative_count,
    })
}

/// Sizes of what is written into the freed region.
struct Tables {
    rela_start: u64,
    rela_end: u64,
    kept_bytes: u64,
    relr_bytes: u64,
    /// (old address, old size, new size) of a table that grows.
    dynstr: Option<(u64, u64, u64)>,
    verneed: Option<(u64, u64, u64)>,
    /// The growing table that can grow where it is, and the tables between
    /// it and the RELA table, which slide forward to make room.
    slide: Option<Slide>,
    dynamic_bytes: u64,
    dynamic_slots: u64,
    granule: u64,
}

impl Tables {
    fn new(
        elf: &Elf<'_>,
        host: usize,
        old_rela: Placed,
        split: &Split,
        relr_bytes: u64,
        version: Option<&VersionNeed>,
    ) -> Tables {
        let dynstr = version.and_then(|v| v.new_string.as_ref()).map(|string| {
            let old = elf.dyn_value(e::DT_STRSZ.0).unwrap_or(0);
            (
                elf.dyn_value(e::DT_STRTAB.0).unwrap_or(0),
                old,
                old + string.len() as u64,
            )
        });
        let verneed = version.map(|v| {
            (
                elf.dyn_value(e::DT_VERNEED.0).unwrap_or(0),
                v.old_size,
                v.table.len() as u64,
            )
        });
        let granule = elf
            .segments
            .iter()
            .filter(|s| s.is_load())
            .map(|s| s.p_align)
            .max()
            .unwrap_or(PAGE)
            .max(PAGE);
        let slide = Slide::find(elf, host, old_rela.address, dynstr.or(verneed));
        Tables {
            slide,
            rela_start: old_rela.address,
            rela_end: old_rela.address + old_rela.size,
            kept_bytes: split.kept.len() as u64 * RELA_SIZE,
            relr_bytes,
            dynstr,
            verneed,
            dynamic_bytes: (dynamic_entry_count(elf, split, version) + 1) * DYN_SIZE,
            dynamic_slots: elf.dynamic_slots,
            granule,
        }
    }

    /// Lays the tables out; when the version need or string table do not
    /// fit in the freed space, again with them in a segment after
    /// everything else.
    fn fit(&self, elf: &Elf<'_>, phdrs: Option<u64>) -> Result<Fit, Refused> {
        match self.fit_with(elf, phdrs, false) {
            Err(_) if self.verneed.is_some() || self.dynstr.is_some() => {
                self.fit_with(elf, phdrs, true)
            }
            fitted => fitted,
        }
    }

    /// Lays the tables out from the start of the region; with `phdrs`, room
    /// for that many program headers too; with `overflow`, a growing version
    /// need or string table that did not slide goes after everything else.
    fn fit_with(&self, elf: &Elf<'_>, phdrs: Option<u64>, overflow: bool) -> Result<Fit, Refused> {
        let (region_start, mut cursor, slid) = match &self.slide {
            // The growing table keeps its start; what followed it moves up.
            Some(slide) => {
                let mut cursor = Cursor(slide.address);
                let slid = self.slide_tables(slide, &mut cursor);
                (slide.address, cursor, slid)
            }
            None => (self.rela_start, Cursor(self.rela_start), Slid::default()),
        };
        let Slid {
            mut dynstr,
            mut verneed,
            tables: slid,
        } = slid;
        let rela = cursor.place(self.kept_bytes, WORD);
        let relr = cursor.place(self.relr_bytes, WORD);
        let verneed_at_end = overflow && verneed.is_none() && self.verneed.is_some();
        let dynstr_at_end = overflow && dynstr.is_none() && self.dynstr.is_some();
        if verneed.is_none()
            && !verneed_at_end
            && let Some((_, _, new)) = self.verneed
        {
            verneed = Some(cursor.place(new, WORD));
        }
        if dynstr.is_none()
            && !dynstr_at_end
            && let Some((_, _, new)) = self.dynstr
        {
            dynstr = Some(cursor.place(new, 1));
        }
        let phdrs = phdrs.map(|count| cursor.place(count * PHDR_SIZE, WORD));
        let before_dynamic = cursor.0;
        let (dynamic, dynamic_at_end) =
            self.place_dynamic(&mut cursor, verneed_at_end || dynstr_at_end);
        let end = cursor.0;
        if end > self.rela_end {
            return Err(elf.refused(Refusal::NoRoom {
                needed: end - region_start,
                free: self.rela_end - region_start,
            }));
        }
        let (cut_at, removed) = self.cut(end);
        Ok(Fit {
            region_start,
            slid,
            rela,
            relr,
            dynstr,
            verneed,
            phdrs,
            before_dynamic,
            dynamic,
            dynamic_at_end,
            verneed_at_end,
            dynstr_at_end,
            end,
            cut_at,
            removed,
        })
    }

    /// The growing table at the slide's start, then the tables between it
    /// and the RELA table, each at its new place.
    fn slide_tables(&self, slide: &Slide, cursor: &mut Cursor) -> Slid {
        let mut slid = Slid::default();
        if slide.address == self.dynstr.map_or(u64::MAX, |d| d.0) {
            slid.dynstr = self.dynstr.map(|(_, _, new)| cursor.place(new, 1));
        } else {
            slid.verneed = self.verneed.map(|(_, _, new)| cursor.place(new, 1));
        }
        for table in &slide.between {
            match (table.tag == e::DT_VERNEED.0, self.verneed) {
                (true, Some((_, _, new))) => {
                    slid.verneed = Some(cursor.place(new, table.align.max(4)))
                }
                _ => slid.tables.push((
                    table.section,
                    table.tag,
                    table.old,
                    cursor.place(table.old.size, table.align),
                )),
            }
        }
        slid
    }

    /// Where a dynamic section with no spare slot goes: to a writable page
    /// of the freed space when a whole one is free (and nothing is
    /// `appending` after everything else), else after everything (true).
    fn place_dynamic(&self, cursor: &mut Cursor, appending: bool) -> (Option<Placed>, bool) {
        if self.dynamic_bytes <= self.dynamic_slots * DYN_SIZE {
            return (None, false);
        }
        let last_page = self.rela_end / PAGE * PAGE;
        let start = align(cursor.0, PAGE);
        if !appending && align(start + self.dynamic_bytes, PAGE) <= last_page {
            (Some(cursor.place(self.dynamic_bytes, PAGE)), false)
        } else {
            (None, true)
        }
    }

    /// Where the cut starts after the tables ending at `end`, and how much
    /// it removes: whole pages between the tables and the next section, in
    /// multiples of the largest segment alignment.
    fn cut(&self, end: u64) -> (u64, u64) {
        let last_page = self.rela_end / PAGE * PAGE;
        let cut_at = align(end, PAGE);
        let removed = if last_page > cut_at {
            (last_page - cut_at) / self.granule * self.granule
        } else {
            0
        };
        (cut_at, removed)
    }
}

/// An address running through the freed region as tables are placed.
struct Cursor(u64);

impl Cursor {
    /// Saturating: a corrupt size or alignment ends past the region and
    /// is refused as no room.
    fn place(&mut self, size: u64, alignment: u64) -> Placed {
        let address = align(self.0, alignment);
        self.0 = address.saturating_add(size);
        Placed { address, size }
    }
}

/// What a slide moved: the growing table and the tables it pushed forward,
/// each (section, dynamic tag, old place, new place).
#[derive(Default)]
struct Slid {
    dynstr: Option<Placed>,
    verneed: Option<Placed>,
    tables: Vec<(usize, i64, Placed, Placed)>,
}

/// A table that slides forward: found by its section header, and moved by
/// changing the dynamic tag that points at it.
#[derive(Debug, Clone)]
struct Movable {
    section: usize,
    tag: i64,
    old: Placed,
    align: u64,
}

#[derive(Debug, Clone)]
struct Slide {
    address: u64,
    between: Vec<Movable>,
}

impl Slide {
    /// The growing table `table` (address, size, new size) can grow in place
    /// when everything between its end and the RELA table is a table the
    /// loader finds through a dynamic tag (symbol versions, hash tables),
    /// which can move. GNU ld puts the version tables there; lld puts
    /// nothing.
    fn find(
        elf: &Elf<'_>,
        host: usize,
        rela_start: u64,
        table: Option<(u64, u64, u64)>,
    ) -> Option<Slide> {
        let (address, size, _) = table?;
        let end = address.checked_add(size)?;
        if size == 0 || end > rela_start || !elf.segments[host].holds_in_file(address, size) {
            return None;
        }
        let movable_tag = |sh_type: u32| match sh_type {
            t if t == e::SHT_GNU_VERSYM.0 => Some(e::DT_VERSYM.0),
            t if t == e::SHT_GNU_VERNEED.0 => Some(e::DT_VERNEED.0),
            t if t == e::SHT_GNU_VERDEF.0 => Some(e::DT_VERDEF.0),
            t if t == e::SHT_GNU_HASH.0 => Some(e::DT_GNU_HASH.0),
            t if t == e::SHT_HASH.0 => Some(e::DT_HASH.0),
            _ => None,
        };
        let mut between = Vec::new();
        for (i, section) in elf.sections.iter().enumerate() {
            let allocated = section.sh_flags & e::SHF_ALLOC.0 != 0;
            if !allocated || section.sh_size == 0 {
                continue;
            }
            // Saturating: a section that wraps ends past the RELA table and
            // stops the slide.
            let (start, stop) = (
                section.sh_addr,
                section.sh_addr.saturating_add(section.sh_size),
            );
            if stop <= end || start >= rela_start {
                continue;
            }
            let tag = movable_tag(section.sh_type)?;
            if start < end || stop > rela_start || elf.dyn_value(tag) != Some(start) {
                return None;
            }
            between.push(Movable {
                section: i,
                tag,
                old: Placed {
                    address: start,
                    size: section.sh_size,
                },
                align: section.sh_addralign.max(1),
            });
        }
        if between.is_empty() && rela_start - end >= WORD {
            // A gap nothing explains (no section headers, or bytes no
            // section claims): leave it alone.
            return None;
        }
        between.sort_by_key(|m| m.old.address);
        Some(Slide { address, between })
    }
}

/// Where everything landed.
struct Fit {
    region_start: u64,
    slid: Vec<(usize, i64, Placed, Placed)>,
    rela: Placed,
    relr: Placed,
    dynstr: Option<Placed>,
    verneed: Option<Placed>,
    phdrs: Option<Placed>,
    before_dynamic: u64,
    dynamic: Option<Placed>,
    dynamic_at_end: bool,
    verneed_at_end: bool,
    dynstr_at_end: bool,
    end: u64,
    cut_at: u64,
    removed: u64,
}

impl Fit {
    /// Whether the segment holding the tables is split in two.
    fn splits_host(&self) -> bool {
        self.removed > 0 || self.dynamic.is_some()
    }

    fn moves_dynamic(&self) -> bool {
        self.dynamic.is_some() || self.dynamic_at_end
    }

    /// Whether anything goes into a segment after all the others.
    fn appends(&self) -> bool {
        self.dynamic_at_end || self.verneed_at_end || self.dynstr_at_end
    }

    /// Whether the program headers change in number, so move.
    fn moves_headers(&self) -> bool {
        self.splits_host() || self.appends()
    }

    fn new_loads(&self) -> u64 {
        u64::from(self.splits_host())
            + u64::from(self.dynamic.is_some())
            + u64::from(self.appends())
    }
}

/// The program headers after the cut: the host split into the part before
/// the cut (and the dynamic section's writable page) and the part after it;
/// everything after the cut shifted back by the bytes removed.
fn new_segments(
    elf: &Elf<'_>,
    host: usize,
    fit: &Fit,
    appended: Option<&Appended>,
) -> Result<Vec<Segment>, Refused> {
    if !fit.moves_headers() {
        return Ok(elf.segments.clone());
    }
    let rewrite = HeaderRewrite {
        elf,
        original: elf.segments[host],
        fit,
        appended,
    };
    rewrite.check_moved_headers_are_mapped()?;
    let pieces = rewrite.host_pieces()?;
    let mut segments = Vec::new();
    for (i, segment) in elf.segments.iter().enumerate() {
        if i == host {
            segments.extend(pieces.iter().copied());
        } else {
            segments.push(rewrite.shifted(i, *segment)?);
        }
    }
    if let Some(appended) = appended {
        rewrite.insert_appended_load(&mut segments, appended);
    }
    if let Some(phdrs) = fit.phdrs {
        rewrite.fill_header_slots(&mut segments, phdrs)?;
    }
    Ok(segments)
}

/// What the new program headers are made from: the segment that held the
/// tables as it was, where everything landed, and what was appended.
struct HeaderRewrite<'a, 'data> {
    elf: &'a Elf<'data>,
    original: Segment,
    fit: &'a Fit,
    appended: Option<&'a Appended>,
}

impl HeaderRewrite<'_, '_> {
    /// Moved program headers go where the first LOAD segment maps them, so
    /// the host must be mapped the same way.
    fn check_moved_headers_are_mapped(&self) -> Result<(), Refused> {
        if self.fit.phdrs.is_none() {
            return Ok(());
        }
        let first = self.elf.segments.iter().find(|s| s.is_load()).copied();
        let delta = |s: Segment| s.p_vaddr.wrapping_sub(s.p_offset);
        if first.is_some_and(|f| delta(f) != delta(self.original)) {
            return Err(self.elf.refused(Refusal::Unsupported(
                "the relocation table is not in a segment mapped like the first one, where the \
                 moved program headers must go"
                    .into(),
            )));
        }
        Ok(())
    }

    /// The host segment's replacements: itself, or its part before the
    /// cut, the dynamic section's own writable segment, and its part after
    /// the cut.
    fn host_pieces(&self) -> Result<Vec<Segment>, Refused> {
        let (original, fit) = (self.original, self.fit);
        let host_end = original.p_vaddr + original.p_filesz;
        let resume = fit.cut_at + fit.removed;
        if fit.splits_host() && original.p_memsz != original.p_filesz && resume >= host_end {
            return Err(self.elf.refused(Refusal::Unsupported(
                "the relocation table ends a segment that has zero-filled memory after it".into(),
            )));
        }
        let mut pieces = Vec::new();
        if !fit.splits_host() {
            pieces.push(original);
        }
        let first_end = if fit.dynamic.is_some() {
            fit.before_dynamic
        } else {
            fit.end
        };
        if fit.splits_host() {
            pieces.push(Segment {
                p_filesz: first_end - original.p_vaddr,
                p_memsz: first_end - original.p_vaddr,
                ..original
            });
        }
        if let Some(dynamic) = fit.dynamic {
            pieces.push(Segment {
                p_type: e::PT_LOAD.0,
                p_flags: e::PF_R.0 | e::PF_W.0,
                p_offset: original.offset_of(dynamic.address),
                p_vaddr: dynamic.address,
                p_paddr: original.paddr_of(dynamic.address),
                p_filesz: dynamic.size,
                p_memsz: dynamic.size,
                p_align: original.p_align,
            });
        }
        if fit.splits_host() && resume < original.p_vaddr + original.p_memsz {
            pieces.push(Segment {
                p_offset: original.offset_of(resume) - fit.removed,
                p_vaddr: resume,
                p_paddr: original.paddr_of(resume),
                p_filesz: host_end.saturating_sub(resume),
                p_memsz: original.p_vaddr + original.p_memsz - resume,
                ..original
            });
        }
        Ok(pieces)
    }

    /// Program header `i`, not the host: moved back by the bytes removed
    /// if it lies after the cut, and the program headers' and dynamic
    /// section's entries pointed at where those now are.
    fn shifted(&self, i: usize, mut segment: Segment) -> Result<Segment, Refused> {
        let (original, fit) = (self.original, self.fit);
        let cut_start = original.offset_of(fit.cut_at);
        let cut_end = cut_start + fit.removed;
        let end = segment.p_offset + segment.p_filesz;
        if fit.removed > 0
            && segment.p_filesz > 0
            && segment.p_offset < cut_end
            && end > cut_start
            && segment.p_type != e::PT_PHDR.0
        {
            return Err(self.elf.refused(Refusal::Unsupported(format!(
                "program header {i} overlaps the freed relocation table"
            ))));
        }
        if fit.removed > 0 && segment.p_offset >= cut_end {
            segment.p_offset -= fit.removed;
        }
        match e::ProgramType(segment.p_type) {
            e::PT_PHDR => {
                if let Some(phdrs) = fit.phdrs {
                    cover(
                        &mut segment,
                        phdrs,
                        original.offset_of(phdrs.address),
                        original.paddr_of(phdrs.address),
                    );
                }
            }
            e::PT_DYNAMIC => {
                if let Some(dynamic) = fit.dynamic {
                    cover(
                        &mut segment,
                        dynamic,
                        original.offset_of(dynamic.address),
                        original.paddr_of(dynamic.address),
                    );
                } else if let Some((dynamic, file_offset)) =
                    self.appended.and_then(Appended::dynamic_at)
                {
                    cover(&mut segment, dynamic, file_offset, dynamic.address);
                }
            }
            _ => {}
        }
        Ok(segment)
    }

    /// The LOAD segment for what was appended. LOAD segments stay sorted
    /// by address: the new one, highest, goes after the last of them.
    fn insert_appended_load(&self, segments: &mut Vec<Segment>, appended: &Appended) {
        let last_load = segments.iter().rposition(|s| s.is_load()).unwrap_or(0);
        let flags = if appended.writable {
            e::PF_R.0 | e::PF_W.0
        } else {
            e::PF_R.0
        };
        segments.insert(
            last_load + 1,
            Segment {
                p_type: e::PT_LOAD.0,
                p_flags: flags,
                p_offset: appended.file_offset,
                p_vaddr: appended.place.address,
                p_paddr: appended.place.address,
                p_filesz: appended.place.size,
                p_memsz: appended.place.size,
                p_align: self.original.p_align,
            },
        );
    }

    /// The moved program headers were given room for a number of entries;
    /// the ones not used are PT_NULL.
    fn fill_header_slots(&self, segments: &mut Vec<Segment>, phdrs: Placed) -> Result<(), Refused> {
        let slots = phdrs.size / PHDR_SIZE;
        if (segments.len() as u64) > slots {
            return Err(self.elf.refused(Refusal::Unsupported(
                "program header count changed between layouts".into(),
            )));
        }
        segments.resize(
            slots as usize,
            Segment {
                p_type: e::PT_NULL.0,
                p_flags: 0,
                p_offset: 0,
                p_vaddr: 0,
                p_paddr: 0,
                p_filesz: 0,
                p_memsz: 0,
                p_align: 0,
            },
        );
        Ok(())
    }
}

/// Points `segment` at exactly `place`, found at `file_offset` in the file.
fn cover(segment: &mut Segment, place: Placed, file_offset: u64, paddr: u64) {
    segment.p_offset = file_offset;
    segment.p_vaddr = place.address;
    segment.p_paddr = paddr;
    segment.p_filesz = place.size;
    segment.p_memsz = place.size;
}

/// Entries the new dynamic section holds, DT_NULL not counted.
fn dynamic_entry_count(elf: &Elf<'_>, split: &Split, version: Option<&VersionNeed>) -> u64 {
    let mut count = elf.dynamic.len() as u64 + 3;
    if split.kept.is_empty() {
        count -= 3; // DT_RELA, DT_RELASZ, DT_RELAENT
    }
    if split.kept_relative == 0 && elf.has_tag(e::DT_RELACOUNT.0) {
        count -= 1;
    }
    if version.is_some_and(|v| v.adds_tags) {
        count += 2;
    }
    count
}

/// The new dynamic entries: RELA sizes and counts for what is kept, the
/// three RELR tags after them, string table and version need where they
/// now are.
fn new_dynamic(
    elf: &Elf<'_>,
    tables: &Tables,
    fit: &Fit,
    split: &Split,
    version: Option<&VersionNeed>,
) -> Vec<(i64, u64)> {
    let kept = !split.kept.is_empty();
    let relr_tags = [
        (e::DT_RELR.0, fit.relr.address),
        (e::DT_RELRSZ.0, fit.relr.size),
        (e::DT_RELRENT.0, WORD),
    ];
    let mut out = Vec::new();
    let mut relr_done = false;
    for &(tag, value) in &elf.dynamic {
        match e::DynamicTag(tag) {
            e::DT_RELA if kept => out.push((tag, fit.rela.address)),
            e::DT_RELASZ if kept => out.push((tag, fit.rela.size)),
            e::DT_RELA | e::DT_RELASZ => {}
            e::DT_RELAENT => {
                if kept {
                    out.push((tag, value));
                }
                out.extend(relr_tags);
                relr_done = true;
            }
            e::DT_RELACOUNT => {
                if split.kept_relative > 0 {
                    out.push((tag, split.kept_relative));
                }
            }
            e::DT_STRTAB => out.push((tag, fit.dynstr.map_or(value, |p| p.address))),
            e::DT_STRSZ => out.push((tag, fit.dynstr.map_or(value, |p| p.size))),
            e::DT_VERNEED => out.push((tag, fit.verneed.map_or(value, |p| p.address))),
            e::DT_VERNEEDNUM => out.push((tag, version.map_or(value, |v| u64::from(v.needs)))),
            _ => match fit.slid.iter().find(|m| m.1 == tag && m.2.address == value) {
                Some(moved) => out.push((tag, moved.3.address)),
                None => out.push((tag, value)),
            },
        }
    }
    if !relr_done {
        out.extend(relr_tags);
    }
    if let (Some(v), Some(place)) = (version, fit.verneed)
        && v.adds_tags
    {
        out.push((e::DT_VERNEED.0, place.address));
        out.push((e::DT_VERNEEDNUM.0, u64::from(v.needs)));
    }
    debug_assert_eq!((out.len() as u64 + 1) * DYN_SIZE, tables.dynamic_bytes);
    out
}
