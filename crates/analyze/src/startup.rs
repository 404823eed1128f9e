//! The symbols a start used. From function records ([`called_symbols`]):
//! exactly the functions each process called, named in the plain build.
//! From a page-level trace alone ([`touched_symbols`]), for programs that
//! cannot be rebuilt with instrumentation: every sized symbol on a page the
//! traced tree touched, ranked by when its page was first touched.
//!
//! The page-level view is imprecise by construction: a page holds many functions and the
//! trace cannot tell which of them ran, so a touched page makes all its
//! symbols "used" (the report says how many bytes that is against the
//! bytes of the touched pages), and symbols on one page share a rank,
//! broken by file offset.

use crate::loaded::{LoadedRun, event_pages, page_offset};
use crate::plain::{Placement, PlainBuild};
use coldstart_binary::{OffsetIndex, SymbolKind};
use coldstart_profile::{Profile, RunId};
use serde::Serialize;
use std::collections::{BTreeMap, HashSet};

/// A symbol on a touched page.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TouchedSymbol {
    pub raw_name: String,
    pub kind: SymbolKind,
    pub size: u64,
    /// File offset in the traced binary.
    pub offset: u64,
    /// Rank of first use (0 first), by first touch of its first touched page.
    pub first_rank: u64,
    /// When its page was first touched, ns after the program started.
    pub first_t_ns: i64,
}

/// One run's touched symbols of one binary.
#[derive(Debug, Clone, Serialize)]
pub struct TouchedSymbols {
    pub run: RunId,
    pub path: String,
    /// Distinct pages of the file the tree touched.
    pub pages_touched: u64,
    pub symbols: Vec<TouchedSymbol>,
}

/// Pages of `path` the tree of `run` touched (see
/// [`LoadedRun::touches`]), in first-touch order, mapped to the symbols of
/// `index`.
pub fn touched_symbols(
    profile: &Profile,
    run: RunId,
    path: &str,
    index: &OffsetIndex,
) -> Result<TouchedSymbols, coldstart_profile::Error> {
    let loaded = LoadedRun::load(profile, Some(run))?;
    Ok(touched_symbols_of(&loaded, path, index))
}

/// [`touched_symbols`] of a run already loaded.
pub fn touched_symbols_of(loaded: &LoadedRun, path: &str, index: &OffsetIndex) -> TouchedSymbols {
    let page_size = loaded.page_size();
    let ids: HashSet<i64> = loaded.file_ids_at(path).collect();
    let mut seen_pages = HashSet::new();
    let mut seen_symbols = HashSet::new();
    let mut symbols = Vec::new();
    for event in loaded.tree_events() {
        if !ids.contains(&event.file_id) || !loaded.touches(event) {
            continue;
        }
        for page in event_pages(event) {
            if !seen_pages.insert(page) {
                continue;
            }
            let rank = seen_pages.len() as u64 - 1;
            let start = page_offset(page, page_size);
            let end = page_offset(page.saturating_add(1), page_size);
            for symbol in index.symbols_in(start, end) {
                if seen_symbols.insert(symbol.offset) {
                    symbols.push(TouchedSymbol {
                        raw_name: symbol.raw_name.clone(),
                        kind: symbol.kind,
                        size: symbol.size,
                        offset: symbol.offset,
                        first_rank: rank,
                        first_t_ns: event.t_ns,
                    });
                }
            }
        }
    }
    TouchedSymbols {
        run: loaded.id(),
        path: path.to_string(),
        pages_touched: seen_pages.len() as u64,
        symbols,
    }
}

/// A function a process called, placed in the plain build.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CalledSymbol {
    /// Its name in the plain build: the recorded name, or that name
    /// without a clone suffix when only that is in the plain build.
    pub raw_name: String,
    pub kind: SymbolKind,
    /// File offset and size in the plain build.
    pub offset: u64,
    pub size: u64,
    /// Rank of its first call in the process, from 1.
    pub first_seq: u64,
    /// First call, ns after the program started.
    pub first_t_ns: i64,
    pub calls: u64,
    /// Found only after dropping a gcc clone suffix (`.isra.0`,
    /// `.constprop.0`, `.part.0`...) from the recorded name.
    pub by_base_name: bool,
}

/// One run's function records for one binary.
#[derive(Debug, Clone, Default, Serialize)]
pub struct CalledSymbols {
    /// Per process (by pid), the functions in first-call order.
    pub processes: Vec<(i32, Vec<CalledSymbol>)>,
    /// Records whose name the plain build has no function of, not even
    /// without a clone suffix (inlined away in it, or instrumentation-only).
    pub not_in_binary: u64,
    /// Recorded names the plain build has several functions of (local
    /// symbols of different files), left unplaced; each name once.
    pub ambiguous: Vec<String>,
}

/// The functions `run`'s records say were called in traced files `module`
/// matches (an instrumented build of the binary), placed by name in
/// `index`, the plain build (see [`PlainBuild::place`]): instrumentation
/// changes code size and inlining, so only names carry over.
pub fn called_symbols(
    profile: &Profile,
    run: RunId,
    index: &OffsetIndex,
    module: &globset::GlobMatcher,
) -> Result<CalledSymbols, coldstart_profile::Error> {
    let plain = PlainBuild::new(index);
    let files: HashSet<i64> = profile
        .files(run)?
        .into_iter()
        .filter(|f| f.path.as_deref().is_some_and(|p| module.is_match(p)))
        .map(|f| f.id)
        .collect();
    let mut out = CalledSymbols::default();
    let mut by_pid: BTreeMap<i32, Vec<CalledSymbol>> = BTreeMap::new();
    for function in profile.functions(run)? {
        if !files.contains(&function.file_id) {
            continue;
        }
        let Some(name) = function.symbol else {
            continue;
        };
        let (symbol, by_base_name) = match plain.place(&name) {
            Placement::Exact(symbol) => (symbol, false),
            Placement::ByBaseName(symbol) => (symbol, true),
            Placement::Ambiguous => {
                if !out.ambiguous.contains(&name) {
                    out.ambiguous.push(name);
                }
                continue;
            }
            Placement::Missing => {
                out.not_in_binary += 1;
                continue;
            }
        };
        by_pid.entry(function.pid).or_default().push(CalledSymbol {
            raw_name: symbol.raw_name.clone(),
            kind: symbol.kind,
            offset: symbol.offset,
            size: symbol.size,
            first_seq: function.first_seq,
            first_t_ns: function.first_t_ns,
            calls: function.calls,
            by_base_name,
        });
    }
    out.processes = by_pid.into_iter().collect();
    Ok(out)
}
