//! Reads an order file back into symbol names, for the simulator that
//! predicts the layout a file produces: every file the emitters write, and
//! plain lld, gold, ld64 and BOLT order files written by other tools.

use crate::error::{Error, Result};
use std::collections::HashSet;
use std::path::Path;

/// Reads the order file at `path`; see [`read_order`].
pub fn read_order_file(path: &Path) -> Result<Vec<String>> {
    let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
        path: path.to_path_buf(),
        source,
    })?;
    Ok(read_order(&text))
}

/// The symbols an order file names, in order, each once, spelled as an ELF
/// symbol table spells them.
///
/// The syntax is recognised from the text: a linker script or GNU ld
/// ordering fragment (statements `*(...)`), a gold list of input section
/// names (every line starts with `.`), or one name a line (lld, ld64, MSVC,
/// BOLT). Section names become symbols by dropping the prefix
/// -ffunction-sections and -fdata-sections put before them; statements with
/// wildcards name no symbol and are skipped. ld64 `arch:` and `file.o:`
/// prefixes and BOLT's `/N` suffixes for local functions are dropped; the
/// leading underscore of Mach-O names only for files this crate wrote (in a
/// file from elsewhere it cannot be told from a name's own underscore).
pub fn read_order(text: &str) -> Vec<String> {
    let first = text
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or_default();
    let names = if first.contains("coldstart order file for ld64") {
        name_lines(text, true)
    } else if text.contains("*(") || text.contains("SECTIONS") {
        script_statements(text)
    } else if text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .all(|l| l.starts_with('.'))
    {
        text.lines()
            .map(str::trim)
            .filter(|l| !l.starts_with('#') && !has_wildcard(l))
            .filter_map(symbol_of_section)
            .collect()
    } else {
        name_lines(text, false)
    };
    let mut seen = HashSet::new();
    names
        .into_iter()
        .filter(|n| seen.insert(n.clone()))
        .collect()
}

/// Prefixes -ffunction-sections and -fdata-sections put before a symbol
/// name, longest of each family first.
const SECTION_PREFIXES: [&str; 13] = [
    ".text.unlikely.",
    ".text.startup.",
    ".text.hot.",
    ".text.",
    ".data.rel.ro.local.",
    ".data.rel.ro.",
    ".data.rel.local.",
    ".data.rel.",
    ".rodata.",
    ".data.",
    ".bss.",
    ".tdata.",
    ".tbss.",
];

fn symbol_of_section(section: &str) -> Option<String> {
    SECTION_PREFIXES.iter().find_map(|prefix| {
        section
            .strip_prefix(prefix)
            .filter(|rest| !rest.is_empty())
            .map(str::to_string)
    })
}

fn has_wildcard(s: &str) -> bool {
    s.contains(['*', '?', '['])
}

/// One name a line, `#` comments.
fn name_lines(text: &str, mach_o: bool) -> Vec<String> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|line| {
            // ld64: `arch:` and `file.o:` prefixes; no symbol spelling
            // this crate reads has a colon.
            let name = line.rsplit(':').next().unwrap_or(line);
            let name = strip_bolt_suffix(name);
            if mach_o {
                name.strip_prefix('_').unwrap_or(name)
            } else {
                name
            }
            .to_string()
        })
        .filter(|n| !n.is_empty())
        .collect()
}

/// BOLT names local functions `name/N` or `name/file/N`.
fn strip_bolt_suffix(name: &str) -> &str {
    match name.rsplit_once('/') {
        Some((_, last)) if !last.is_empty() && last.bytes().all(|b| b.is_ascii_digit()) => {
            name.split('/').next().unwrap_or(name)
        }
        _ => name,
    }
}

/// The symbols of every `*(...)` statement without wildcards, comments
/// skipped.
fn script_statements(text: &str) -> Vec<String> {
    let text = without_comments(text);
    let mut names = Vec::new();
    let mut rest = text.as_str();
    while let Some(start) = rest.find("*(") {
        rest = &rest[start + 2..];
        let Some(end) = rest.find(')') else { break };
        let inside = &rest[..end];
        rest = &rest[end + 1..];
        // `*(SORT(.text.sorted.*))` and friends: nested, never one symbol.
        if inside.contains('(') || has_wildcard(inside) {
            continue;
        }
        names.extend(inside.split_whitespace().filter_map(symbol_of_section));
    }
    names
}

fn without_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("/*") {
        out.push_str(&rest[..start]);
        match rest[start + 2..].find("*/") {
            Some(end) => rest = &rest[start + 2 + end + 2..],
            None => return out,
        }
    }
    out.push_str(rest);
    out.lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_lists_of_names() {
        let text = "# from somewhere\n_Z3foov\n\nmain\n_Z3foov\n";
        assert_eq!(read_order(text), ["_Z3foov", "main"]);
    }

    #[test]
    fn bolt_local_suffixes_and_ld64_prefixes() {
        let bolt = "main\nhelper/1\nhelper/tu.c/2\nfoo/bar\n";
        assert_eq!(read_order(bolt), ["main", "helper", "foo/bar"]);
        let ld64 = "x86_64:_main\ntu.o:_helper\n";
        assert_eq!(read_order(ld64), ["_main", "_helper"]);
        let ours = "# coldstart order file for ld64: -Wl,-order_file,FILE\n__Z3foov\n_main\n";
        assert_eq!(read_order(ours), ["_Z3foov", "main"]);
    }

    #[test]
    fn gold_section_lists() {
        let text =
            "# c\n.text.hot.f\n.text.f\n.text.unlikely.f\n.rodata.table\n.text.[a]\n.text*\n";
        assert_eq!(read_order(text), ["f", "table"]);
    }

    #[test]
    fn scripts_and_fragments() {
        let fragment = "/* c */\n.text : {\n  *(.text.hot.g .text.g)\n  *(.text.f)\n}\n\
            .data : { *(.data.rel.ro.local.v .data.v) }\n\
            .data : { *(.data.rel.local.w .data.rel.x .data.rel.ro.y) }\n";
        assert_eq!(read_order(fragment), ["g", "f", "v", "w", "x", "y"]);
        let script = "SECTIONS {\n .text : {\n  /* *(.text.commented) */\n  *(.text.b)\n  \
            *(.text.unlikely .text.*_unlikely .text.unlikely.*)\n  *(.text.exit .text.exit.*)\n  \
            *(SORT(.text.sorted.*))\n  KEEP (*(SORT_NONE(.init)))\n  *(.text .stub .text.*)\n }\n}\n";
        assert_eq!(read_order(script), ["b"]);
    }
}
