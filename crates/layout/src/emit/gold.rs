//! GNU gold's --section-ordering-file: one input section name a line, `#`
//! comments. gold looks exact names up in a hash table and tries wildcard
//! lines one by one on every section that missed, so the file names each
//! section exactly and keeps wildcards to one catch-all line per output
//! section: without it, gold would put every unlisted section before the
//! listed ones (they sort by position, and unlisted ones have none).
//! Strings and constants gold merges (SHF_MERGE sections) are not input
//! sections by then and stay first in .rodata whatever the file says.

use super::sections::{OUTPUT_ORDER, Placed, output_section};
use super::{Linker, header};
use crate::model::Order;

pub(crate) const USAGE: &str = "-fuse-ld=gold -Wl,--section-ordering-file=FILE";

pub(crate) fn write(symbols: &[Placed<'_>], order: &Order) -> String {
    let mut text = header("#", Linker::Gold, USAGE, order, symbols.len());
    text.push('\n');
    let mut outputs: Vec<&str> = Vec::new();
    for symbol in symbols {
        for section in &symbol.sections {
            text.push_str(section);
            text.push('\n');
            if let Some(output) = output_section(section)
                && !outputs.contains(&output)
            {
                outputs.push(output);
            }
        }
    }
    if !outputs.is_empty() {
        text.push_str("# every other section keeps its input order, after the ones above\n");
    }
    // `.data*` also catches .data.rel.ro; one line serves both.
    let mut globs: Vec<String> = Vec::new();
    for output in OUTPUT_ORDER.iter().filter(|o| outputs.contains(o)) {
        let glob = if *output == ".data.rel.ro" {
            ".data*".to_string()
        } else {
            format!("{output}*")
        };
        if !globs.contains(&glob) {
            text.push_str(&glob);
            text.push('\n');
            globs.push(glob);
        }
    }
    text
}
