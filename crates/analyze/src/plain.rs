//! Placing functions recorded in an instrumented build in the
//! uninstrumented ("plain") build of the same program. Instrumentation
//! changes code size and inlining, so only names carry over from one build
//! to the other, not offsets; and gcc may clone a function differently in
//! each build (`parse.isra.0` in one, `parse` in the other).

use coldstart_binary::{OffsetIndex, SymbolKind, SymbolSpan};
use std::collections::HashMap;

/// The plain build's functions by raw (mangled) name.
pub struct PlainBuild<'a> {
    by_name: HashMap<&'a str, Vec<&'a SymbolSpan>>,
}

/// Where a recorded name lands in the plain build.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement<'a> {
    /// One function of that very name.
    Exact(&'a SymbolSpan),
    /// No function of that name, but one of its name without gcc's clone
    /// suffix: the builds cloned it differently.
    ByBaseName(&'a SymbolSpan),
    /// Several functions of the name (local symbols of different files):
    /// which one ran cannot be told.
    Ambiguous,
    /// Neither: inlined away in the plain build, or only in the
    /// instrumented one.
    Missing,
}

impl<'a> PlainBuild<'a> {
    /// The code symbols of `index`. Data symbols are left out: a recorded
    /// function is code, and a data symbol of its name is another thing.
    pub fn new(index: &'a OffsetIndex) -> PlainBuild<'a> {
        let mut by_name: HashMap<&str, Vec<&SymbolSpan>> = HashMap::new();
        for s in index.symbols() {
            if s.kind != SymbolKind::Object {
                by_name.entry(s.raw_name.as_str()).or_default().push(s);
            }
        }
        PlainBuild { by_name }
    }

    /// Places the function the instrumented build calls `raw_name`: by its
    /// exact name, else by its name without clone suffixes.
    pub fn place(&self, raw_name: &str) -> Placement<'a> {
        let (candidates, by_base_name) = match self.by_name.get(raw_name) {
            Some(found) => (Some(found), false),
            None => (self.by_name.get(base_name(raw_name)), true),
        };
        match candidates.map(Vec::as_slice) {
            Some([only]) if by_base_name => Placement::ByBaseName(only),
            Some([only]) => Placement::Exact(only),
            Some([_, _, ..]) => Placement::Ambiguous,
            _ => Placement::Missing,
        }
    }
}

/// `foo.isra.0` -> `foo`: the name before gcc's clone and split suffixes
/// (and LTO's and LLVM's renaming suffixes).
pub fn base_name(raw: &str) -> &str {
    const CLONES: [&str; 6] = [
        ".isra.",
        ".constprop.",
        ".part.",
        ".cold",
        ".lto_priv.",
        ".llvm.",
    ];
    CLONES
        .iter()
        .filter_map(|suffix| raw.find(suffix))
        .min()
        .map_or(raw, |at| &raw[..at])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gcc_clone_suffixes_are_dropped_for_base_names() {
        assert_eq!(base_name("parse.isra.0"), "parse");
        assert_eq!(base_name("f.constprop.0.isra.0"), "f");
        assert_eq!(base_name("g.part.3"), "g");
        assert_eq!(base_name("main.cold"), "main");
        assert_eq!(base_name("_ZN3foo3barEv"), "_ZN3foo3barEv");
    }
}
