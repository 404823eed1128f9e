//! Which section and which symbols a byte of the file belongs to. Page-level
//! traces say "the page at file offset X was read"; this index turns that
//! offset into sections and symbols, with lookups in logarithmic time so a
//! trace of millions of pages over a 300 MB binary stays cheap.
//!
//! The index is format-neutral; each format's reader (only ELF so far) hands
//! over sections and symbol candidates already translated to file offsets,
//! and this module orders them, merges aliases and builds the lookups.

use crate::demangle::demangle;
use crate::error::{Error, Result};
use crate::file::MappedFile;
use crate::{Detected, detect, magic_bytes};
use serde::Serialize;
use std::path::Path;
use std::sync::OnceLock;

/// A run of file bytes that belongs to one section, or to one loadable
/// segment when the file has no section headers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SectionSpan {
    /// The section's name; `[LOAD #2 R E]` (program header index and
    /// flags) for a segment standing in for missing section headers.
    pub name: String,
    /// Offset of the first byte in the file.
    pub offset: u64,
    /// Bytes in the file; never zero (zero-filled sections such as .bss
    /// have no file bytes and are left out).
    pub size: u64,
    /// Virtual address of the first byte; 0 for sections that are not loaded.
    pub address: u64,
    /// Loaded into memory (SHF_ALLOC; always true for a segment).
    pub alloc: bool,
    pub writable: bool,
    pub executable: bool,
}

impl SectionSpan {
    /// One past the last byte in the file.
    pub fn end(&self) -> u64 {
        self.offset.saturating_add(self.size)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SymbolKind {
    /// Code: ELF STT_FUNC and STT_GNU_IFUNC (the resolver function).
    Function,
    /// Data: ELF STT_OBJECT.
    Object,
    /// A sized symbol without a type, as hand-written assembly leaves them.
    Other,
}

/// Who can see a symbol by name, from its symbol table entry. Ordered by
/// preference among aliases: a later variant names the same bytes better.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SymbolBinding {
    /// Only its own object file (ELF STB_LOCAL: C `static`, C++ anonymous
    /// namespaces). Several objects may define the same local name.
    Local,
    /// ELF STB_WEAK: global, but another definition may take its place
    /// (C++ inline functions and template instances).
    Weak,
    /// ELF STB_GNU_UNIQUE: global, and one definition per process even
    /// across libraries loaded with RTLD_LOCAL.
    Unique,
    /// ELF STB_GLOBAL.
    Global,
}

/// A run of file bytes that one symbol covers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SymbolSpan {
    /// The name in the symbol table; [`name`](Self::name) demangles it.
    pub raw_name: String,
    /// Virtual address (for a Thumb function, without the Thumb bit).
    pub address: u64,
    /// Offset of the first byte in the file.
    pub offset: u64,
    /// Bytes in the file; never zero. Shorter than the symbol's size only
    /// when its end runs into zero-filled memory.
    pub size: u64,
    pub kind: SymbolKind,
    /// Local, weak or global: a linker order file can only name a local
    /// symbol ambiguously, and some linkers not at all.
    pub binding: SymbolBinding,
    /// Index into [`OffsetIndex::sections`] of the section holding the
    /// first byte.
    pub section: Option<usize>,
    demangled: NameCache,
}

impl SymbolSpan {
    /// Demangled name, as [`demangle`](crate::demangle) gives it; the raw
    /// name when it is not mangled. Demangled on first use: demangling
    /// every C++ name of a big library costs more than building the whole
    /// index, and a trace only names the symbols it touched.
    pub fn name(&self) -> &str {
        self.demangled
            .0
            .get_or_init(|| demangle(&self.raw_name))
            .as_deref()
            .unwrap_or(&self.raw_name)
    }

    /// One past the last byte in the file.
    pub fn end(&self) -> u64 {
        self.offset.saturating_add(self.size)
    }
}

/// Equal for any two caches: the name is a function of `raw_name`, and
/// whether it was asked for yet is not part of a symbol's value.
#[derive(Debug, Clone, Default)]
struct NameCache(OnceLock<Option<String>>);

impl PartialEq for NameCache {
    fn eq(&self, _: &NameCache) -> bool {
        true
    }
}

impl Eq for NameCache {}

impl Serialize for SymbolSpan {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut s = serializer.serialize_struct("SymbolSpan", 8)?;
        s.serialize_field("name", self.name())?;
        s.serialize_field("raw_name", &self.raw_name)?;
        s.serialize_field("address", &self.address)?;
        s.serialize_field("offset", &self.offset)?;
        s.serialize_field("size", &self.size)?;
        s.serialize_field("kind", &self.kind)?;
        s.serialize_field("binding", &self.binding)?;
        s.serialize_field("section", &self.section)?;
        s.end()
    }
}

/// Which symbol table the symbols came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SymbolSource {
    /// The full symbol table (ELF .symtab).
    Symtab,
    /// Only the dynamic symbol table was there (ELF .dynsym, or the table
    /// DT_SYMTAB points at when there are no section headers): exported
    /// symbols only, so most of the code has no name.
    Dynsym,
    /// No symbol table.
    None,
}

/// What happened to the symbols read, so a caller can say how much of the
/// file has names.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct SymbolCounts {
    /// Defined function, object and untyped symbols with a nonzero size.
    /// Thread-local ones are not counted: their values are offsets into
    /// each thread's block, not addresses in the file.
    pub read: u64,
    /// Of those, dropped because no file bytes back them: they live in
    /// zero-filled memory (.bss) or outside every loadable segment.
    pub not_in_file: u64,
    /// Of those, dropped as an alias of the one kept: same offset and size.
    pub aliases: u64,
}

/// Sections and symbols of one file, ordered by file offset.
#[derive(Debug, Clone)]
pub struct OffsetIndex {
    file_size: u64,
    sections: Vec<SectionSpan>,
    section_tree: SpanTree,
    symbols: Vec<SymbolSpan>,
    symbol_tree: SpanTree,
    symbol_source: SymbolSource,
    symbol_counts: SymbolCounts,
}

impl OffsetIndex {
    /// Maps and indexes one file.
    pub fn from_path(path: &Path) -> Result<OffsetIndex> {
        let file = MappedFile::open(path)?;
        OffsetIndex::from_bytes(file.path(), file.bytes())
    }

    /// Indexes a file already in memory; `path` only labels errors.
    pub fn from_bytes(path: &Path, data: &[u8]) -> Result<OffsetIndex> {
        let unsupported = |format: &'static str| Error::Unsupported {
            path: path.to_path_buf(),
            format,
            detail: "the file-offset index reads only ELF files so far".to_string(),
        };
        match detect(data) {
            Some(Detected::Elf) => Ok(OffsetIndex::assemble(crate::elf::offsets::read(
                path, data,
            )?)),
            Some(Detected::Pe) => Err(unsupported("PE")),
            Some(Detected::Macho | Detected::MachoFat) => Err(unsupported("Mach-O")),
            None => Err(Error::UnknownFormat {
                path: path.to_path_buf(),
                magic: magic_bytes(data),
            }),
        }
    }

    fn assemble(parts: Parts<'_>) -> OffsetIndex {
        let mut sections = parts.sections;
        // Stable: equal spans keep header order. Larger first, so that at a
        // shared start the smaller, more specific one is found last.
        sections.sort_by(|a, b| a.offset.cmp(&b.offset).then(b.size.cmp(&a.size)));
        let section_tree = SpanTree::new(sections.iter().map(|s| (s.offset, s.end())));

        let mut candidates = parts.symbols;
        let in_file = candidates.len() as u64;
        // Within a run of aliases the preferred name sorts first; the name
        // itself breaks the last ties, so the choice does not depend on
        // symbol table order.
        candidates.sort_unstable_by(|a, b| {
            a.offset
                .cmp(&b.offset)
                .then(b.size.cmp(&a.size))
                .then(b.binding.cmp(&a.binding))
                .then(leading_underscores(a.name).cmp(&leading_underscores(b.name)))
                .then(a.name.cmp(b.name))
                .then(a.kind.cmp(&b.kind))
                .then(a.address.cmp(&b.address))
        });
        candidates.dedup_by(|later, kept| later.offset == kept.offset && later.size == kept.size);
        let aliases = in_file - candidates.len() as u64;

        let mut index = OffsetIndex {
            file_size: parts.file_size,
            sections,
            section_tree,
            symbols: Vec::new(),
            symbol_tree: SpanTree::default(),
            symbol_source: parts.source,
            symbol_counts: SymbolCounts {
                read: in_file + parts.not_in_file,
                not_in_file: parts.not_in_file,
                aliases,
            },
        };
        let symbols: Vec<SymbolSpan> = candidates
            .iter()
            .map(|c| SymbolSpan {
                raw_name: String::from_utf8_lossy(c.name).into_owned(),
                address: c.address,
                offset: c.offset,
                size: c.size,
                kind: c.kind,
                binding: c.binding,
                section: index.section_at(c.offset),
                demangled: NameCache::default(),
            })
            .collect();
        index.symbol_tree = SpanTree::new(symbols.iter().map(|s| (s.offset, s.end())));
        index.symbols = symbols;
        index
    }

    /// Size of the indexed file in bytes.
    pub fn file_size(&self) -> u64 {
        self.file_size
    }

    /// File-backed sections by offset (then larger first).
    pub fn sections(&self) -> &[SectionSpan] {
        &self.sections
    }

    /// Index into [`sections`](Self::sections) of the section holding the
    /// byte at `offset`; None for bytes no section claims (ELF header,
    /// program headers, padding). Where sections overlap, the one starting
    /// nearest before `offset`.
    pub fn section_at(&self, offset: u64) -> Option<usize> {
        self.section_tree
            .overlapping(offset, offset.saturating_add(1))
            .last()
    }

    /// Indices into [`sections`](Self::sections) of the sections with bytes
    /// in [start, end), in offset order.
    pub fn sections_in(&self, start: u64, end: u64) -> impl Iterator<Item = usize> + '_ {
        self.section_tree.overlapping(start, end)
    }

    /// File-backed symbols by offset (then larger first), aliases merged.
    pub fn symbols(&self) -> &[SymbolSpan] {
        &self.symbols
    }

    /// Symbols with bytes in [start, end), overlapping ones included, in
    /// the order of [`symbols`](Self::symbols). Runs in O(log n + k) for k
    /// results while symbols nest no deeper than a few levels; each result
    /// costs at most O(log n) more however they overlap.
    pub fn symbols_in(&self, start: u64, end: u64) -> impl Iterator<Item = &SymbolSpan> + '_ {
        self.symbol_tree
            .overlapping(start, end)
            .filter_map(|i| self.symbols.get(i))
    }

    /// The symbol holding the byte at `offset`; where symbols overlap, the
    /// one starting nearest before it.
    pub fn symbol_at(&self, offset: u64) -> Option<&SymbolSpan> {
        self.symbols_in(offset, offset.saturating_add(1)).last()
    }

    pub fn symbol_source(&self) -> SymbolSource {
        self.symbol_source
    }

    pub fn symbol_counts(&self) -> SymbolCounts {
        self.symbol_counts
    }
}

/// What a format reader hands over: file-backed sections, and symbols
/// already moved to file offsets but not yet ordered or merged.
pub(crate) struct Parts<'data> {
    pub file_size: u64,
    pub sections: Vec<SectionSpan>,
    pub symbols: Vec<Candidate<'data>>,
    pub source: SymbolSource,
    /// Symbols read but dropped for having no file bytes.
    pub not_in_file: u64,
}

pub(crate) struct Candidate<'data> {
    pub name: &'data [u8],
    pub address: u64,
    pub offset: u64,
    /// Nonzero, and offset + size is within the file.
    pub size: u64,
    pub kind: SymbolKind,
    /// Preference among aliases; higher wins (global over weak over local).
    pub binding: SymbolBinding,
}

/// Among equally bound aliases, `puts` reads better than `_IO_puts`.
fn leading_underscores(name: &[u8]) -> usize {
    name.iter().take_while(|&&b| b == b'_').count()
}

/// Spans sorted by start, seen as an implicit balanced binary tree: the
/// node of the range [lo, hi) is its middle element, and `max_end` holds
/// for each node the largest end in its subtree. A query skips every
/// subtree that ends before it, so one long span (a huge object among
/// small functions) costs its ancestors a visit, not every query a scan.
#[derive(Debug, Clone, Default)]
struct SpanTree {
    starts: Vec<u64>,
    ends: Vec<u64>,
    max_end: Vec<u64>,
}

impl SpanTree {
    /// `spans` must come sorted by start.
    fn new(spans: impl Iterator<Item = (u64, u64)>) -> SpanTree {
        let (starts, ends): (Vec<u64>, Vec<u64>) = spans.unzip();
        debug_assert!(starts.is_sorted());
        let mut tree = SpanTree {
            max_end: vec![0; ends.len()],
            starts,
            ends,
        };
        tree.fill(0, tree.ends.len());
        tree
    }

    /// Sets `max_end` for the subtree of [lo, hi) and returns it. Recursion
    /// depth is the tree height, at most 64.
    fn fill(&mut self, lo: usize, hi: usize) -> u64 {
        if lo >= hi {
            return 0;
        }
        let mid = lo + (hi - lo) / 2;
        let left = self.fill(lo, mid);
        let right = self.fill(mid + 1, hi);
        let max = self.ends[mid].max(left).max(right);
        self.max_end[mid] = max;
        max
    }

    fn overlapping(&self, start: u64, end: u64) -> Overlaps<'_> {
        let mut overlaps = Overlaps {
            tree: self,
            start,
            end,
            stack: [Frame::default(); STACK],
            depth: 0,
        };
        if start < end {
            overlaps.push(Frame {
                lo: 0,
                hi: self.starts.len(),
                expanded: false,
            });
        }
        overlaps
    }
}

/// The traversal holds one frame per tree level plus one; a tree over
/// at most usize::MAX spans is at most 64 levels high.
const STACK: usize = 66;

#[derive(Debug, Clone, Copy, Default)]
struct Frame {
    lo: usize,
    hi: usize,
    /// The left subtree has been queued; next come the node and the right.
    expanded: bool,
}

/// In-order walk of the spans overlapping [start, end), without allocating.
struct Overlaps<'a> {
    tree: &'a SpanTree,
    start: u64,
    end: u64,
    stack: [Frame; STACK],
    depth: usize,
}

impl Overlaps<'_> {
    fn push(&mut self, frame: Frame) {
        if let Some(slot) = self.stack.get_mut(self.depth) {
            *slot = frame;
            self.depth += 1;
        } else {
            debug_assert!(false, "span tree deeper than {STACK} levels");
        }
    }
}

impl Iterator for Overlaps<'_> {
    type Item = usize;

    fn next(&mut self) -> Option<usize> {
        while self.depth > 0 {
            self.depth -= 1;
            let Frame { lo, hi, expanded } = self.stack[self.depth];
            if lo >= hi {
                continue;
            }
            let mid = lo + (hi - lo) / 2;
            if !expanded {
                if self.tree.max_end[mid] <= self.start {
                    continue;
                }
                self.push(Frame {
                    lo,
                    hi,
                    expanded: true,
                });
                self.push(Frame {
                    lo,
                    hi: mid,
                    expanded: false,
                });
            } else if self.tree.starts[mid] < self.end {
                // Spans right of mid start no earlier; only then can they overlap.
                self.push(Frame {
                    lo: mid + 1,
                    hi,
                    expanded: false,
                });
                if self.tree.ends[mid] > self.start {
                    return Some(mid);
                }
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::SpanTree;

    /// Every span overlapping [start, end), by brute force.
    fn scan(spans: &[(u64, u64)], start: u64, end: u64) -> Vec<usize> {
        (0..spans.len())
            .filter(|&i| start < end && spans[i].0 < end && spans[i].1 > start)
            .collect()
    }

    #[test]
    fn overlap_queries_match_a_scan() {
        // Nested, overlapping, touching, one long span and gaps, from a
        // fixed pseudo-random sequence so failures reproduce.
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = |limit: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % limit
        };
        for n in [0usize, 1, 2, 3, 7, 8, 100, 1000] {
            let mut spans: Vec<(u64, u64)> = (0..n)
                .map(|_| {
                    let start = next(10_000);
                    let longest = if next(20) == 0 { 5000 } else { 50 };
                    (start, start + 1 + next(longest))
                })
                .collect();
            spans.sort();
            let tree = SpanTree::new(spans.iter().copied());
            for _ in 0..500 {
                let start = next(11_000);
                let end = start + next(300);
                let found: Vec<usize> = tree.overlapping(start, end).collect();
                assert_eq!(found, scan(&spans, start, end), "n {n} [{start}, {end})");
            }
        }
    }

    #[test]
    fn empty_and_inverted_ranges_find_nothing() {
        let tree = SpanTree::new([(0, 10), (5, 20)].into_iter());
        assert_eq!(tree.overlapping(7, 7).count(), 0);
        assert_eq!(tree.overlapping(9, 3).count(), 0);
        assert_eq!(tree.overlapping(u64::MAX, u64::MAX).count(), 0);
    }
}
