//! What dyld writes into a Mach-O image at launch: rebases (slide added to
//! a stored pointer) and binds (a symbol looked up and stored), read from
//! the LC_DYLD_INFO opcode streams or the LC_DYLD_CHAINED_FIXUPS chains.
//!
//! Counted: every rebase, every non-lazy bind and every weak bind, with the
//! pages they land in. Not counted: lazy binds (applied on first call, not
//! at launch), and static relocations of MH_OBJECT files (the linker's
//! business, never dyld's).

use crate::model::SectionPages;
use object::macho;
use object::read::ReadRef;
use object::read::macho::{BindOperation, DyldChainedFixups, Fixup, RebaseOperation};
use std::collections::{BTreeMap, BTreeSet};

/// A segment as the fixup streams address it: by index, offset from vmaddr.
#[derive(Debug, Clone, Copy)]
pub(super) struct SegmentSpan {
    pub address: u64,
    pub memory_size: u64,
    pub offset: u64,
    pub file_size: u64,
}

/// A section's address range, to attribute written pages to it.
#[derive(Debug, Clone)]
pub(super) struct SectionSpan {
    pub name: String,
    pub address: u64,
    pub memory_size: u64,
}

/// The fixups of one source, counted.
#[derive(Debug, Default)]
pub(super) struct Counted {
    pub entries: u64,
    pub rebases: u64,
    pub binds: u64,
    pub by_type: BTreeMap<String, u64>,
}

/// Running totals over every source, plus the pages written.
pub(super) struct Tally<'a> {
    pointer_size: u64,
    page_size: u64,
    sections: Vec<(u64, u64, usize)>,
    section_names: &'a [SectionSpan],
    pub symbols: BTreeSet<Vec<u8>>,
    pub ordinals: BTreeSet<u32>,
    pages: BTreeSet<u64>,
    by_section: BTreeMap<Option<usize>, (u64, BTreeSet<u64>)>,
}

impl<'a> Tally<'a> {
    pub(super) fn new(pointer_size: u64, page_size: u64, sections: &'a [SectionSpan]) -> Self {
        let mut by_address: Vec<(u64, u64, usize)> = sections
            .iter()
            .enumerate()
            .map(|(index, s)| (s.address, s.memory_size, index))
            .collect();
        by_address.sort_unstable();
        Tally {
            pointer_size,
            page_size,
            sections: by_address,
            section_names: sections,
            symbols: BTreeSet::new(),
            ordinals: BTreeSet::new(),
            pages: BTreeSet::new(),
            by_section: BTreeMap::new(),
        }
    }

    fn write_at(&mut self, address: u64) {
        let section = self
            .sections
            .partition_point(|&(start, _, _)| start <= address)
            .checked_sub(1)
            .and_then(|i| self.sections.get(i))
            .filter(|&&(start, len, _)| address - start < len)
            .map(|&(_, _, index)| index);
        let first = address / self.page_size;
        let last = address.saturating_add(self.pointer_size - 1) / self.page_size;
        let entry = self.by_section.entry(section).or_default();
        entry.0 += 1;
        for page in first..=last {
            self.pages.insert(page);
            entry.1.insert(page);
        }
    }

    pub(super) fn pages_total(&self) -> u64 {
        self.pages.len() as u64
    }

    pub(super) fn pages_by_section(&self) -> Vec<SectionPages> {
        self.by_section
            .iter()
            .map(|(section, (count, pages))| SectionPages {
                section: section
                    .and_then(|index| self.section_names.get(index))
                    .map_or_else(|| "[outside sections]".to_string(), |s| s.name.clone()),
                relocations: *count,
                pages: pages.len() as u64,
            })
            .collect()
    }
}

/// A run of locations one opcode stands for: `count` pointers from
/// `start`, `stride` bytes apart, in segment `segment`.
struct Run {
    segment: usize,
    start: u64,
    stride: u64,
    count: u64,
}

/// Checks a run against its segment and the file, then records it. Runs
/// are expanded one location at a time, so the number of locations is
/// capped by the pointers the file could hold: each one is a pointer stored
/// in the file, and no legitimate stream rebases or binds a slot twice.
fn check_run(
    run: &Run,
    segments: &[SegmentSpan],
    pointer_size: u64,
    what: &str,
) -> Result<(), String> {
    let segment = segments.get(run.segment).ok_or_else(|| {
        format!(
            "{what} names segment {} but there are only {}",
            run.segment,
            segments.len()
        )
    })?;
    let last = run
        .stride
        .checked_mul(run.count - 1)
        .and_then(|span| span.checked_add(run.start))
        .and_then(|last| last.checked_add(pointer_size));
    match last {
        Some(end) if end <= segment.memory_size => Ok(()),
        _ => Err(format!(
            "{what} of {} pointers from offset {:#x} (stride {:#x}) runs outside segment {} \
             ({:#x} bytes)",
            run.count, run.start, run.stride, run.segment, segment.memory_size
        )),
    }
}

fn expand(tally: &mut Tally, segments: &[SegmentSpan], runs: &[Run]) {
    for run in runs {
        let Some(segment) = segments.get(run.segment) else {
            continue;
        };
        let mut offset = run.start;
        for _ in 0..run.count {
            tally.write_at(segment.address.saturating_add(offset));
            offset = offset.saturating_add(run.stride);
        }
    }
}

fn add_count(total: &mut u64, count: u64, cap: u64, what: &str) -> Result<(), String> {
    *total = total
        .checked_add(count)
        .filter(|&total| total <= cap)
        .ok_or_else(|| {
            format!(
                "{what} describe more locations than the {cap} pointers the file can hold \
                 (a count is corrupt)"
            )
        })?;
    Ok(())
}

/// Decodes an LC_DYLD_INFO rebase stream.
pub(super) fn rebases(
    operations: impl Iterator<Item = object::read::Result<(macho::RebaseOpcode, RebaseOperation)>>,
    segments: &[SegmentSpan],
    tally: &mut Tally,
    cap: u64,
) -> Result<Counted, String> {
    let ptr = tally.pointer_size;
    let mut counted = Counted::default();
    let mut runs = Vec::new();
    let mut segment = None;
    let mut offset = 0u64;
    let mut kind = None;
    for operation in operations {
        let (_, operation) = operation.map_err(|err| format!("rebase info: {err}"))?;
        if operation == RebaseOperation::Done {
            break;
        }
        counted.entries += 1;
        let (count, stride, advance) = match operation {
            RebaseOperation::Done => break,
            RebaseOperation::SetType { kind: k } => {
                kind = Some(k);
                continue;
            }
            RebaseOperation::SetSegmentAndOffset { index, offset: o } => {
                segment = Some(usize::from(index));
                offset = o;
                continue;
            }
            // dyld adds with wraparound: a huge ULEB is a step backwards.
            RebaseOperation::AddAddr { offset: o } => {
                offset = offset.wrapping_add(o);
                continue;
            }
            RebaseOperation::AddAddrScaled { count } => {
                offset = offset.wrapping_add(u64::from(count) * ptr);
                continue;
            }
            RebaseOperation::DoRebaseTimes { count } => (count, ptr, ptr),
            RebaseOperation::DoRebaseAddAddr { offset: o } => (1, ptr, ptr.wrapping_add(o)),
            RebaseOperation::DoRebaseTimesSkipping { count, skip } => {
                let stride = ptr.wrapping_add(skip);
                (count, stride, stride)
            }
        };
        if count == 0 {
            continue;
        }
        let (Some(segment), Some(kind)) = (segment, kind) else {
            return Err("rebase info rebases before setting a segment and a type".to_string());
        };
        let run = Run {
            segment,
            start: offset,
            stride,
            count,
        };
        check_run(&run, segments, ptr, "rebase info")?;
        add_count(&mut counted.rebases, count, cap, "rebase info")?;
        *counted
            .by_type
            .entry(
                kind.name()
                    .map_or_else(|| format!("REBASE_TYPE_{}", kind.0), str::to_string),
            )
            .or_default() += count;
        offset = offset.wrapping_add(advance.wrapping_mul(count));
        runs.push(run);
    }
    expand(tally, segments, &runs);
    Ok(counted)
}

/// Decodes a non-lazy or weak LC_DYLD_INFO bind stream. Weak streams may
/// leave the type unset: it is always a pointer there.
pub(super) fn binds<'data>(
    operations: impl Iterator<Item = object::read::Result<(macho::BindOpcode, BindOperation<'data>)>>,
    weak: bool,
    segments: &[SegmentSpan],
    tally: &mut Tally,
    cap: u64,
) -> Result<Counted, String> {
    let ptr = tally.pointer_size;
    let what = if weak { "weak bind info" } else { "bind info" };
    let mut counted = Counted::default();
    let mut runs = Vec::new();
    let mut segment = None;
    let mut offset = 0u64;
    let mut kind = weak.then_some(macho::BIND_TYPE_POINTER);
    let mut symbol: Option<&[u8]> = None;
    for operation in operations {
        let (_, operation) = operation.map_err(|err| format!("{what}: {err}"))?;
        if operation == BindOperation::Done {
            break;
        }
        counted.entries += 1;
        let (count, stride, advance) = match operation {
            BindOperation::Done => break,
            BindOperation::SetType { kind: k } => {
                kind = Some(k);
                continue;
            }
            BindOperation::SetSymbol { name, .. } => {
                symbol = Some(name);
                continue;
            }
            BindOperation::SetSegmentAndOffset {
                segment_index,
                offset: o,
            } => {
                segment = Some(usize::from(segment_index));
                offset = o;
                continue;
            }
            BindOperation::AddAddr { offset: o } => {
                offset = offset.wrapping_add(o);
                continue;
            }
            BindOperation::SetDylibOrdinal { .. }
            | BindOperation::SetDylibSpecial { .. }
            | BindOperation::SetAddend { .. } => continue,
            BindOperation::DoBind => (1, ptr, ptr),
            BindOperation::DoBindAddAddr { offset: o } => (1, ptr, ptr.wrapping_add(o)),
            BindOperation::DoBindAddAddrScaled { count } => {
                (1, ptr, ptr.wrapping_add(u64::from(count) * ptr))
            }
            BindOperation::DoBindTimesSkipping { count, skip } => {
                let stride = ptr.wrapping_add(skip);
                (count, stride, stride)
            }
        };
        if count == 0 {
            continue;
        }
        let (Some(segment), Some(kind), Some(symbol)) = (segment, kind, symbol) else {
            return Err(format!(
                "{what} binds before setting a segment, a type and a symbol"
            ));
        };
        let run = Run {
            segment,
            start: offset,
            stride,
            count,
        };
        check_run(&run, segments, ptr, what)?;
        add_count(&mut counted.binds, count, cap, what)?;
        *counted
            .by_type
            .entry(
                kind.name()
                    .map_or_else(|| format!("BIND_TYPE_{}", kind.0), str::to_string),
            )
            .or_default() += count;
        tally.symbols.insert(symbol.to_vec());
        offset = offset.wrapping_add(advance.wrapping_mul(count));
        runs.push(run);
    }
    expand(tally, segments, &runs);
    Ok(counted)
}

/// Walks every fixup chain of LC_DYLD_CHAINED_FIXUPS. Each chain only moves
/// forward, and chains never share a slot in a well-formed file, so more
/// fixups in a segment than 4-byte slots means overlapping chains: an
/// error, not a loop that could run for hours.
pub(super) fn chained<'data, E: object::Endian>(
    endian: E,
    fixups: &DyldChainedFixups<'data, E>,
    data: &'data [u8],
    segments: &[SegmentSpan],
    preferred_load_address: u64,
    tally: &mut Tally,
) -> Result<Counted, String> {
    let context = |err: object::read::Error| format!("chained fixups: {err}");
    let mut counted = Counted::default();
    let mut chains = fixups.segments(endian).map_err(context)?;
    while let Some(chain) = chains.next().map_err(context)? {
        let index = chain.index() as usize;
        let segment = segments.get(index).ok_or_else(|| {
            format!(
                "chained fixups name segment {index} but there are only {}",
                segments.len()
            )
        })?;
        let segment_data = data
            .read_bytes_at(segment.offset, segment.file_size)
            .map_err(|()| format!("segment {index} data lies outside the file"))?;
        let cap = segment.file_size / 4 + 1;
        let mut walked = 0u64;
        let mut iter = chain.fixups(endian, preferred_load_address, segment_data);
        while let Some((offset, fixup)) = iter.next().map_err(context)? {
            walked += 1;
            if walked > cap {
                return Err(format!(
                    "chained fixups in segment {index} revisit slots (overlapping chains)"
                ));
            }
            let (name, is_bind) = match fixup {
                Fixup::Rebase(rebase) => {
                    (auth_name("CHAINED_REBASE", rebase.auth.is_some()), false)
                }
                Fixup::KernelCacheRebase(rebase) => {
                    (auth_name("CHAINED_REBASE", rebase.auth.is_some()), false)
                }
                Fixup::SegmentedRebase(rebase) => {
                    (auth_name("CHAINED_REBASE", rebase.auth.is_some()), false)
                }
                Fixup::Bind(bind) => {
                    tally.ordinals.insert(bind.ordinal);
                    (auth_name("CHAINED_BIND", bind.auth.is_some()), true)
                }
            };
            if is_bind {
                counted.binds += 1;
            } else {
                counted.rebases += 1;
            }
            counted.entries += 1;
            *counted.by_type.entry(name).or_default() += 1;
            tally.write_at(segment.address.saturating_add(offset));
        }
    }
    Ok(counted)
}

fn auth_name(base: &str, auth: bool) -> String {
    if auth {
        format!("{base}_AUTH")
    } else {
        base.to_string()
    }
}
