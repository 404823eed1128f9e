//! `coldstart pack` as text: one row per packed file (relocations moved to
//! RELR and kept, the tables and the file before and after, what was cut),
//! then a line of notes per file. Refusals go to stderr, from the command.

use crate::table::{Style, Table, thousands};
use coldstart_binary::human_bytes;
use coldstart_pack::Report;
use std::fmt::Write as _;

/// The table of packed files and a line of notes on each.
pub fn render(packed: &[Report], dry_run: bool) -> String {
    let mut out = String::new();
    if !packed.is_empty() {
        let mut table = Table::new(&[
            "file",
            ">packed",
            ">kept",
            ">tables",
            ">tables after",
            ">loader pages",
            ">file",
            ">file after",
            ">cut",
            ">left as hole",
        ]);
        for r in packed {
            table.row(vec![
                r.input.display().to_string(),
                thousands(r.relative_packed),
                thousands(r.relocations_kept),
                human_bytes(r.rela_bytes_before),
                human_bytes(r.rela_bytes_after + r.relr_bytes),
                format!(
                    "{} -> {}",
                    thousands(r.loader_pages_before),
                    thousands(r.loader_pages_after)
                ),
                human_bytes(r.file_bytes_before),
                human_bytes(r.file_bytes_after),
                human_bytes(r.compacted_bytes),
                human_bytes(r.hole_bytes),
            ]);
        }
        out.push_str(&table.render(Style::Plain, ""));
        for r in packed {
            let mut notes = Vec::new();
            if r.dynamic == "writable-segment" {
                notes.push(
                    "dynamic section moved to its own writable page (no spare slot)".to_string(),
                );
            }
            if r.version_need_added {
                notes.push("GLIBC_ABI_DT_RELR version need added".to_string());
            }
            if r.load_segments_added > 0 {
                notes.push(format!("{} LOAD segment(s) added", r.load_segments_added));
            }
            let target = match (&r.output, dry_run) {
                (Some(path), _) => format!("written to {}", path.display()),
                (None, true) => "dry run: nothing written".to_string(),
                (None, false) => String::new(),
            };
            if !target.is_empty() {
                notes.insert(0, target);
            }
            let _ = writeln!(out, "{}: {}", r.input.display(), notes.join("; "));
        }
        if packed.len() > 1 {
            let before: u64 = packed.iter().map(|r| r.file_bytes_before).sum();
            let after: u64 = packed.iter().map(|r| r.file_bytes_after).sum();
            let relocations: u64 = packed.iter().map(|r| r.relative_packed).sum();
            let _ = writeln!(
                out,
                "{} files: {} relative relocations packed, {} -> {}",
                packed.len(),
                thousands(relocations),
                human_bytes(before),
                human_bytes(after)
            );
        }
    }
    out
}
