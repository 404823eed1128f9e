//! Input section names for the section-based linkers (gold, GNU ld): the
//! exact ones when the objects are known, else the names gcc and clang give
//! a symbol's own section under -ffunction-sections -fdata-sections.

use super::{Kept, Reason};
use crate::model::{Kind, OrderEntry};
use std::collections::HashSet;

pub(crate) const GUESS_WARNING: &str = "no objects given: input section names are guessed from \
     symbol names (.text.NAME and gcc's .text.hot., .text.unlikely. and .text.startup. variants; \
     .rodata., .data.rel.ro., .data.rel., .data., .bss. and TLS for data); give the link's objects to use \
     their exact section names and to find code built without -ffunction-sections";

/// A symbol with the input sections to list for it, none listed before.
pub(crate) struct Placed<'a> {
    pub entry: &'a OrderEntry,
    pub sections: Vec<String>,
    /// The names are guesses: any of them may not exist.
    pub guessed: bool,
}

pub(crate) struct Placement<'a> {
    pub symbols: Vec<Placed<'a>>,
    /// Symbols whose sections cannot be written, by raw name.
    pub refused: Vec<(String, Reason)>,
}

/// Each kept symbol's input sections, in order. A section goes to the first
/// symbol that names it: later mentions would move it (gold keeps the last
/// position a name gets) or do nothing (GNU ld's first statement wins).
pub(crate) fn place<'a>(kept: &[Kept<'a>]) -> Placement<'a> {
    // gcc moves the cold blocks of `f` to `f.cold` in section
    // .text.unlikely.f; when the order has `f.cold` itself, that section
    // belongs at its place, not at f's.
    let cold_bases: HashSet<&str> = kept
        .iter()
        .filter(|k| k.entry.kind == Kind::Function)
        .filter_map(|k| cold_base(&k.entry.raw_name))
        .collect();
    let mut claimed: HashSet<String> = HashSet::new();
    let mut symbols = Vec::new();
    let mut refused = Vec::new();
    for k in kept {
        let guessed = k.definitions.is_none();
        let names = match k.definitions {
            Some(definitions) => {
                let mut exact: Vec<String> = Vec::new();
                for d in definitions {
                    if !exact.contains(&d.section) {
                        exact.push(d.section.clone());
                    }
                }
                exact
            }
            None => guesses(k.entry, &cold_bases),
        };
        if let Some(bad) = names.iter().find(|n| !nameable(n)) {
            refused.push((
                k.entry.raw_name.clone(),
                Reason::Unnameable {
                    section: bad.clone(),
                },
            ));
            continue;
        }
        let sections: Vec<String> = names
            .into_iter()
            .filter(|n| claimed.insert(n.clone()))
            .collect();
        symbols.push(Placed {
            entry: k.entry,
            sections,
            guessed,
        });
    }
    Placement { symbols, refused }
}

/// `f` for gcc's `f.cold` and `f.cold.3`.
fn cold_base(name: &str) -> Option<&str> {
    let (base, rest) = name.split_once(".cold")?;
    let numbered = rest
        .strip_prefix('.')
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
    (!base.is_empty() && (rest.is_empty() || numbered)).then_some(base)
}

fn guesses(entry: &OrderEntry, cold_bases: &HashSet<&str>) -> Vec<String> {
    let name = entry.raw_name.as_str();
    match entry.kind {
        Kind::Function => {
            if let Some(base) = cold_base(name) {
                return vec![format!(".text.unlikely.{base}")];
            }
            // gcc names a function's section after what it knows of it:
            // hot, executed once at startup, or unlikely (cold).
            let mut names = vec![
                format!(".text.hot.{name}"),
                format!(".text.{name}"),
                format!(".text.startup.{name}"),
            ];
            if !cold_bases.contains(name) {
                names.push(format!(".text.unlikely.{name}"));
            }
            names
        }
        // -fPIC puts data holding addresses in .data.rel.*: .local. when
        // they point into the same module only, .ro. when read-only after
        // relocation.
        Kind::Data => [
            ".rodata.",
            ".data.rel.ro.local.",
            ".data.rel.ro.",
            ".data.rel.local.",
            ".data.rel.",
            ".data.",
            ".bss.",
            ".tdata.",
            ".tbss.",
        ]
        .iter()
        .map(|prefix| format!("{prefix}{name}"))
        .collect(),
    }
}

/// Characters both gold's list and a linker script take literally: no
/// wildcards (`*?[`), no separators or script punctuation.
fn nameable(section: &str) -> bool {
    !section.is_empty()
        && section
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._$".contains(&b))
}

/// Output sections of GNU ld's default scripts that hold code and data,
/// in the order the files list them. A longer family comes before a
/// shorter one it extends (.data.rel.ro before .data).
pub(crate) const OUTPUT_ORDER: [&str; 7] = [
    ".text",
    ".rodata",
    ".data.rel.ro",
    ".data",
    ".bss",
    ".tdata",
    ".tbss",
];

/// The output section GNU ld's default script (and gold) put an input
/// section in, by its name; None for names outside the usual families.
pub(crate) fn output_section(input: &str) -> Option<&'static str> {
    OUTPUT_ORDER.into_iter().find(|family| {
        input
            .strip_prefix(family)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('.'))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cold_parts_are_recognised() {
        assert_eq!(cold_base("f.cold"), Some("f"));
        assert_eq!(cold_base("_Z1fv.cold.12"), Some("_Z1fv"));
        assert_eq!(cold_base("f.colder"), None);
        assert_eq!(cold_base("f.cold."), None);
        assert_eq!(cold_base(".cold"), None);
    }

    #[test]
    fn output_sections_by_family() {
        assert_eq!(output_section(".text._Z1fv"), Some(".text"));
        assert_eq!(output_section(".text"), Some(".text"));
        assert_eq!(output_section(".textual"), None);
        assert_eq!(output_section(".data.rel.ro.local.x"), Some(".data.rel.ro"));
        assert_eq!(output_section(".data.x"), Some(".data"));
        assert_eq!(output_section(".tbss.x"), Some(".tbss"));
        assert_eq!(output_section(".init_array"), None);
    }
}
