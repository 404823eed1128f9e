//! The layout an order file would give a binary, predicted without a
//! relink: within each section that holds ordered symbols, the ordered
//! ones are packed first, in order, each at its alignment, then the rest in
//! their current order, as lld, gold and GNU ld place ordered input
//! sections. A byte of the old file then maps to a byte of the new one, so
//! a traced access to an old page becomes accesses to the pages its
//! symbols move to.

use coldstart_binary::{OffsetIndex, SymbolSpan};
use serde::Serialize;
use std::collections::HashMap;

/// Functions are aligned to at most this in the prediction: what gcc and
/// clang give x86-64 functions at -O2 (`-falign-functions=16`).
const MAX_ALIGN: u64 = 16;

/// A predicted new layout of one file.
#[derive(Debug, Clone)]
pub struct Relayout {
    /// The file, as the profile names it.
    pub path: String,
    /// Byte ranges that move: (old start, old end, new start), sorted by
    /// old start, disjoint.
    moves: Vec<(u64, u64, u64)>,
    /// Sections laid out anew: (start, end) in the file. Bytes of them
    /// that no symbol covers (padding) go nowhere.
    sections: Vec<(u64, u64)>,
    /// Those of them that hold code.
    code_sections: Vec<(u64, u64)>,
    /// Code a split layout moves but no replayed trace covers (startup
    /// files' code, functions built without block maps): (old start, old
    /// end, new start), sorted. An access to an old page holding such code
    /// is replayed at its new place.
    untraced_code: Vec<(u64, u64, u64)>,
    pub summary: RelayoutSummary,
    /// The functions a start called, when a function trace says: then the
    /// prediction replays exactly them instead of whole touched pages.
    pub functions: Option<Vec<CalledFunction>>,
}

/// A function a start called, in the binary as it is now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CalledFunction {
    /// File offset of its symbol now.
    pub offset: u64,
    pub size: u64,
    /// First call, ns after the program started.
    pub t_ns: i64,
}

/// How much of an order the binary could place.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RelayoutSummary {
    /// Names in the order.
    pub ordered: u64,
    /// Of those, found as sized symbols of the binary.
    pub placed: u64,
    /// Names the binary has no sized symbol for (first few kept).
    pub missing: u64,
    pub missing_examples: Vec<String>,
    /// Bytes of the placed symbols.
    pub placed_bytes: u64,
    /// Sections reordered.
    pub sections: Vec<String>,
}

impl Relayout {
    /// Predicts the layout of `index`'s file when linked with `order`
    /// (raw symbol names, first first).
    pub fn new(path: &str, index: &OffsetIndex, order: &[String]) -> Relayout {
        let symbols = index.symbols();
        let mut by_name: HashMap<&str, usize> = HashMap::with_capacity(symbols.len());
        for (i, symbol) in symbols.iter().enumerate() {
            by_name.entry(symbol.raw_name.as_str()).or_insert(i);
        }
        let mut summary = RelayoutSummary {
            ordered: order.len() as u64,
            ..RelayoutSummary::default()
        };
        // Ordered symbols per section, in order, each once.
        let mut chosen: Vec<bool> = vec![false; symbols.len()];
        let mut per_section: HashMap<usize, Vec<usize>> = HashMap::new();
        for name in order {
            match by_name.get(name.as_str()) {
                Some(&i) => {
                    if chosen[i] {
                        continue;
                    }
                    let Some(section) = symbols[i].section else {
                        continue;
                    };
                    chosen[i] = true;
                    summary.placed += 1;
                    summary.placed_bytes += symbols[i].size;
                    per_section.entry(section).or_default().push(i);
                }
                None => {
                    summary.missing += 1;
                    if summary.missing_examples.len() < 5 {
                        summary.missing_examples.push(name.clone());
                    }
                }
            }
        }
        let mut moves = Vec::new();
        let mut sections = Vec::new();
        let mut code_sections = Vec::new();
        let mut section_ids: Vec<usize> = per_section.keys().copied().collect();
        section_ids.sort_unstable();
        for section_id in section_ids {
            let section = &index.sections()[section_id];
            sections.push((section.offset, section.end()));
            if section.executable {
                code_sections.push((section.offset, section.end()));
            }
            summary.sections.push(section.name.clone());
            let first = &per_section[&section_id];
            let rest = symbols
                .iter()
                .enumerate()
                .filter(|(i, s)| s.section == Some(section_id) && !chosen[*i])
                .map(|(i, _)| i);
            // Addresses and offsets of a loaded section differ by a constant.
            let mut address = section.address;
            for i in first.iter().copied().chain(rest) {
                let symbol = &symbols[i];
                address = address.next_multiple_of(alignment(symbol));
                let new_offset = section.offset + (address - section.address);
                moves.push((symbol.offset, symbol.end(), new_offset));
                address += symbol.size;
            }
        }
        moves.sort_unstable();
        sections.sort_unstable();
        Relayout {
            path: path.to_string(),
            moves,
            sections,
            code_sections,
            untraced_code: Vec::new(),
            summary,
            functions: None,
        }
    }

    /// Predicts the layout a split build gives `index`'s file: each
    /// function's startup blocks (`clusters`, each a list of (file offset,
    /// bytes) now, in cluster order) packed back to back, the clusters in
    /// order from the start of the code section that holds them, each at a
    /// function's alignment, as clang's cluster file and lld's symbol order
    /// place them. The rest of each function moves out of the way (to its
    /// `.cold` part), which matters to no start replayed from the blocks
    /// it ran ([`Relayout::with_functions`]).
    ///
    /// `untraced` are the code section's stretches that no cluster's
    /// function covers (as (file offset, bytes)): the linker places them
    /// after the ordered code, in their order, and a start that touched
    /// them touches them there.
    pub fn split(
        path: &str,
        index: &OffsetIndex,
        clusters: &[Vec<(u64, u64)>],
        untraced: &[(u64, u64)],
    ) -> Relayout {
        let mut summary = RelayoutSummary {
            ordered: clusters.len() as u64,
            ..RelayoutSummary::default()
        };
        let section = clusters.iter().flatten().next().and_then(|&(offset, _)| {
            index
                .sections()
                .iter()
                .find(|s| s.executable && s.offset <= offset && offset < s.end())
        });
        let mut moves = Vec::new();
        let mut sections = Vec::new();
        let mut untraced_code = Vec::new();
        if let Some(section) = section {
            sections.push((section.offset, section.end()));
            summary.sections.push(section.name.clone());
            let mut address = section.address;
            for cluster in clusters {
                address = address.next_multiple_of(MAX_ALIGN);
                let mut placed = false;
                for &(offset, size) in cluster {
                    if offset < section.offset || offset + size > section.end() {
                        continue;
                    }
                    moves.push((
                        offset,
                        offset + size,
                        section.offset + (address - section.address),
                    ));
                    address += size;
                    summary.placed_bytes += size;
                    placed = true;
                }
                if placed {
                    summary.placed += 1;
                } else {
                    summary.missing += 1;
                }
            }
            for &(offset, size) in untraced {
                if offset < section.offset || offset + size > section.end() {
                    continue;
                }
                address = address.next_multiple_of(MAX_ALIGN);
                untraced_code.push((
                    offset,
                    offset + size,
                    section.offset + (address - section.address),
                ));
                address += size;
            }
        }
        moves.sort_unstable();
        untraced_code.sort_unstable();
        Relayout {
            path: path.to_string(),
            moves,
            code_sections: sections.clone(),
            sections,
            untraced_code,
            summary,
            functions: None,
        }
    }

    /// The new pages of the untraced code (see [`Relayout::split`]) that
    /// old page `page` holds; empty for other layouts.
    pub fn untraced_pages_for(&self, page: u64, page_size: u64) -> Vec<u64> {
        let (start, end) = (page * page_size, (page + 1) * page_size);
        let mut pages = Vec::new();
        for &(old_start, old_end, new_start) in &self.untraced_code {
            if old_start < end && start < old_end {
                let (a, b) = (old_start.max(start), old_end.min(end));
                let (new_a, new_b) = (new_start + (a - old_start), new_start + (b - old_start));
                pages.extend(new_a / page_size..new_b.div_ceil(page_size));
            }
        }
        pages.dedup();
        pages
    }

    /// Predicts from the functions a start called instead of whole pages.
    pub fn with_functions(mut self, functions: Vec<CalledFunction>) -> Relayout {
        self.functions = Some(functions);
        self
    }

    /// Whether old page `page` lies in a section laid out anew.
    pub fn is_relaid(&self, page: u64, page_size: u64) -> bool {
        overlaps(&self.sections, page, page_size)
    }

    /// Whether old page `page` lies in a code section laid out anew.
    pub fn is_relaid_code(&self, page: u64, page_size: u64) -> bool {
        overlaps(&self.code_sections, page, page_size)
    }

    /// Pages of the new layout holding the bytes of old page `page`.
    pub fn pages_for(&self, page: u64, page_size: u64) -> Vec<u64> {
        let (start, end) = (page * page_size, (page + 1) * page_size);
        let in_section = self.sections.iter().any(|&(a, b)| a < end && start < b);
        if !in_section {
            return vec![page];
        }
        let from = self
            .moves
            .partition_point(|&(_, old_end, _)| old_end <= start);
        let mut pages = Vec::new();
        for &(old_start, old_end, new_start) in &self.moves[from..] {
            if old_start >= end {
                break;
            }
            let (a, b) = (old_start.max(start), old_end.min(end));
            let (new_a, new_b) = (new_start + (a - old_start), new_start + (b - old_start));
            pages.extend(new_a / page_size..new_b.div_ceil(page_size));
        }
        if pages.is_empty() {
            // Code no symbol names (startup stubs): it stays where it is.
            return vec![page];
        }
        pages.sort_unstable();
        pages.dedup();
        pages
    }

    /// Whether old page `page` holds bytes outside the code sections laid
    /// out anew (the end of the section before, the start of the one
    /// after): those stay where they are.
    pub fn holds_other_bytes(&self, page: u64, page_size: u64) -> bool {
        let (start, end) = (page * page_size, (page + 1) * page_size);
        let inside: u64 = self
            .code_sections
            .iter()
            .map(|&(a, b)| b.min(end).saturating_sub(a.max(start)))
            .sum();
        inside < end - start
    }

    /// New file offset of the symbol now at `offset`, if it moves.
    pub fn new_offset(&self, offset: u64) -> Option<u64> {
        let i = self
            .moves
            .partition_point(|&(old_start, _, _)| old_start < offset);
        self.moves
            .get(i)
            .filter(|m| m.0 == offset)
            .map(|&(_, _, new_start)| new_start)
    }
}

fn overlaps(ranges: &[(u64, u64)], page: u64, page_size: u64) -> bool {
    let (start, end) = (page * page_size, (page + 1) * page_size);
    ranges.iter().any(|&(a, b)| a < end && start < b)
}

/// The alignment a symbol keeps: the largest power of two its address is
/// a multiple of, at most [`MAX_ALIGN`].
fn alignment(symbol: &SymbolSpan) -> u64 {
    if symbol.address == 0 {
        return MAX_ALIGN;
    }
    (1u64 << symbol.address.trailing_zeros()).min(MAX_ALIGN)
}
