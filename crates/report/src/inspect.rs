//! `coldstart inspect` as text: one screen per binary that answers "what
//! will the loader read and do before main?", most important first.

use crate::table::{Style, Table, heading, percent, thousands};
use coldstart_binary::{Format, ImageOverlap, Inspection, human_bytes, share};
use std::fmt::Write;

/// What to show beyond the summary.
#[derive(Debug, Clone, Copy)]
pub struct InspectView {
    pub style: Style,
    /// How many initializers to list (all when None).
    pub initializers: Option<usize>,
    /// Show every section (else only loaded ones plus a line for the rest).
    pub all_sections: bool,
}

impl Default for InspectView {
    fn default() -> Self {
        InspectView {
            style: Style::Plain,
            initializers: Some(12),
            all_sections: false,
        }
    }
}

fn hex(v: u64) -> String {
    format!("0x{v:x}")
}

fn yes(b: bool) -> &'static str {
    if b { "yes" } else { "no" }
}

pub fn render(ins: &Inspection, view: &InspectView) -> String {
    let mut out = String::new();
    let style = view.style;
    let h = &ins.header;
    let title = format!(
        "{}: {} {}-bit {} {}, {} ({} bytes)",
        ins.path,
        ins.format.name(),
        h.bits,
        h.machine,
        h.kind.describe(),
        human_bytes(ins.size),
        thousands(ins.size)
    );
    if style == Style::Markdown {
        let _ = writeln!(out, "## {title}");
    } else {
        let _ = writeln!(out, "{title}");
    }
    let mut facts = Vec::new();
    facts.push(format!(
        "build-id {}",
        h.build_id.as_deref().unwrap_or("none")
    ));
    if let Some(interp) = &h.interpreter {
        facts.push(format!("interpreter {interp}"));
    }
    facts.push(if h.stripped {
        "stripped (dynamic symbols only)".to_string()
    } else {
        format!("{} symbols", thousands(h.symbols))
    });
    facts.push(match (&h.debug_link, h.debug_info) {
        (_, true) => "debug info in file".to_string(),
        (Some(link), false) => format!("debug info in {link}"),
        (None, false) => "no debug info".to_string(),
    });
    facts.push(format!("entry {}", hex(h.entry)));
    let _ = writeln!(out, "  {}", facts.join(", "));
    if let Some(pe) = &ins.pe {
        let _ = writeln!(
            out,
            "  image base {} size {}, DYNAMICBASE {}, high-entropy VA {}, relocations stripped {}",
            hex(pe.image_base),
            human_bytes(pe.image_size),
            yes(pe.dynamic_base),
            yes(pe.high_entropy_va),
            yes(pe.relocs_stripped)
        );
        if !pe.imports.is_empty() {
            let _ = writeln!(out, "  imports {}", pe.imports.join(", "));
        }
    }
    if let Some(macho) = &ins.macho
        && !macho.dylibs.is_empty()
    {
        let _ = writeln!(out, "  dylibs {}", macho.dylibs.join(", "));
    }

    segments(&mut out, ins, style);
    sections(&mut out, ins, view);
    dynamic(&mut out, ins, style);
    relocations(&mut out, ins, style);
    initializers(&mut out, ins, view);

    if !ins.warnings.is_empty() {
        heading(&mut out, style, "Warnings");
        for w in &ins.warnings {
            let _ = writeln!(out, "  warning[{}]: {}", w.code, w.message);
        }
    }
    out
}

fn segments(out: &mut String, ins: &Inspection, style: Style) {
    if ins.segments.is_empty() {
        return;
    }
    heading(out, style, "Segments");
    let mut t = Table::new(&[
        ">#",
        "type",
        ">offset",
        ">file size",
        ">address",
        ">mem size",
        "flags",
        ">share",
        ">pages",
    ]);
    for s in &ins.segments {
        t.row(vec![
            s.index.to_string(),
            segment_label(ins, s.index),
            hex(s.offset),
            human_bytes(s.file_size),
            hex(s.address),
            human_bytes(s.memory_size),
            s.flags.clone(),
            percent(s.share_of_file),
            thousands(s.pages),
        ]);
    }
    out.push_str(&t.render(style, "  "));
}

/// "LOAD #3" for ELF, the segment name for Mach-O ("__TEXT"), else kind and index.
fn segment_label(ins: &Inspection, index: usize) -> String {
    match ins.segments.get(index) {
        Some(s) => match s.name.as_deref() {
            Some(name) if !name.is_empty() => name.to_string(),
            _ => format!("{} #{index}", s.kind),
        },
        None => format!("#{index}"),
    }
}

/// The sections and the bytes between them, adding up to the file size.
fn sections(out: &mut String, ins: &Inspection, view: &InspectView) {
    heading(
        out,
        view.style,
        &format!(
            "Sections and other bytes, in file order (they add up to the {} file)",
            human_bytes(ins.size)
        ),
    );
    let mut t = Table::new(&[
        "name", "type", "flags", ">offset", ">size", ">address", ">share", ">pages", "segment",
    ]);
    // The default view folds what does not matter at startup into two rows,
    // so the table stays short and still adds up to the file size.
    let mut folded = Folded::default();
    for piece in file_order(ins) {
        match piece {
            FilePiece::Section(s) => {
                folded.total += s.file_size;
                if !view.all_sections && s.segment.is_none() && ins.format == Format::Elf {
                    folded.not_loaded.0 += 1;
                    folded.not_loaded.1 += s.file_size;
                    continue;
                }
                t.row(section_row(ins, s));
            }
            FilePiece::Region(r) => {
                folded.total += r.size;
                if !view.all_sections && r.label.starts_with("[padding") {
                    folded.padding.0 += 1;
                    folded.padding.1 += r.size;
                    continue;
                }
                if !view.all_sections && r.label == "[not loaded]" {
                    folded.not_loaded.1 += r.size;
                    continue;
                }
                t.row(region_row(ins, r));
            }
        }
    }
    summary_rows(&mut t, ins, &folded);
    out.push_str(&t.render(view.style, "  "));
}

/// A part of the file: a section, or bytes no section claims.
enum FilePiece<'a> {
    Section(&'a coldstart_binary::Section),
    Region(&'a coldstart_binary::Region),
}

/// The sections with bytes or memory, and the regions, in file order.
fn file_order(ins: &Inspection) -> Vec<FilePiece<'_>> {
    let mut pieces: Vec<(u64, FilePiece)> = ins
        .sections
        .iter()
        .filter(|s| s.file_size > 0 || s.memory_size > 0)
        .map(|s| (s.offset, FilePiece::Section(s)))
        .chain(ins.regions.iter().map(|r| (r.offset, FilePiece::Region(r))))
        .collect();
    pieces.sort_by_key(|(offset, _)| *offset);
    pieces.into_iter().map(|(_, piece)| piece).collect()
}

/// What the default view folded, (count, bytes) each, and the bytes of
/// every piece.
#[derive(Default)]
struct Folded {
    not_loaded: (usize, u64),
    padding: (usize, u64),
    total: u64,
}

fn section_row(ins: &Inspection, s: &coldstart_binary::Section) -> Vec<String> {
    vec![
        s.name.clone(),
        s.kind.clone(),
        s.flags.clone(),
        hex(s.offset),
        human_bytes(s.file_size.max(s.memory_size)),
        hex(s.address),
        percent(s.share_of_file),
        thousands(s.pages),
        s.segment.map(|i| segment_label(ins, i)).unwrap_or_default(),
    ]
}

fn region_row(ins: &Inspection, r: &coldstart_binary::Region) -> Vec<String> {
    vec![
        r.label.clone(),
        String::new(),
        String::new(),
        hex(r.offset),
        human_bytes(r.size),
        String::new(),
        percent(share(r.size, ins.size)),
        String::new(),
        String::new(),
    ]
}

/// The folded padding and unloaded bytes, then the total.
fn summary_rows(t: &mut Table, ins: &Inspection, folded: &Folded) {
    let mut summary = |label: String, bytes: u64| {
        t.row(vec![
            label,
            String::new(),
            String::new(),
            String::new(),
            human_bytes(bytes),
            String::new(),
            percent(share(bytes, ins.size)),
            String::new(),
            String::new(),
        ]);
    };
    let (gaps, padding) = folded.padding;
    if padding > 0 {
        summary(format!("[alignment padding, {gaps} gaps]"), padding);
    }
    let (pieces, not_loaded) = folded.not_loaded;
    if not_loaded > 0 {
        summary(
            format!("[not loaded: {pieces} sections and gaps]"),
            not_loaded,
        );
    }
    summary("total".to_string(), folded.total);
}

fn dynamic(out: &mut String, ins: &Inspection, style: Style) {
    let Some(d) = &ins.dynamic else {
        return;
    };
    heading(out, style, "Dynamic section");
    let list = |v: &[String]| {
        if v.is_empty() {
            "-".to_string()
        } else {
            v.join(", ")
        }
    };
    if let Some(soname) = &d.soname {
        let _ = writeln!(out, "  soname          {soname}");
    }
    let _ = writeln!(out, "  needed          {}", list(&d.needed));
    if !d.rpath.is_empty() {
        let _ = writeln!(out, "  rpath           {}", list(&d.rpath));
    }
    if !d.runpath.is_empty() {
        let _ = writeln!(out, "  runpath         {}", list(&d.runpath));
    }
    let mut flags = d.flags.clone();
    flags.extend(d.flags_1.iter().map(|f| format!("{f} (FLAGS_1)")));
    let _ = writeln!(out, "  flags           {}", list(&flags));
    let _ = writeln!(
        out,
        "  binding         {}",
        if d.bind_now {
            "all symbols at load (BIND_NOW)"
        } else {
            "lazy (PLT resolved on first call)"
        }
    );
    let hash = match (d.gnu_hash, d.sysv_hash) {
        (true, true) => "GNU and SysV",
        (true, false) => "GNU",
        (false, true) => "SysV only",
        (false, false) => "none",
    };
    let _ = writeln!(
        out,
        "  symbols         {} dynamic, hash {hash}",
        thousands(d.dynamic_symbols)
    );
    let _ = writeln!(
        out,
        "  TEXTREL         {}; DT_RELR {}{}",
        yes(d.textrel),
        yes(d.relr),
        if d.relr {
            format!(" (GLIBC_ABI_DT_RELR needed: {})", yes(d.relr_version_need))
        } else {
            String::new()
        }
    );
    let _ = writeln!(
        out,
        "  PT_DYNAMIC      offset {} ({} into the file){}, {} entries",
        hex(d.offset),
        percent(d.position_in_file),
        d.segment
            .map(|s| format!(", LOAD #{s}"))
            .unwrap_or_default(),
        d.entries
    );
}

fn relocations(out: &mut String, ins: &Inspection, style: Style) {
    let r = &ins.relocations;
    if r.sections.is_empty() && r.total == 0 {
        return;
    }
    heading(
        out,
        style,
        &format!(
            "Relocations: {} applied at load, {} of the file ({})",
            thousands(r.total),
            human_bytes(r.bytes),
            percent(r.share_of_file)
        ),
    );
    let _ = writeln!(
        out,
        "  {} relative, {} symbolic ({} symbol lookups naming {} distinct symbols)",
        thousands(r.relative),
        thousands(r.symbolic),
        thousands(r.symbolic),
        thousands(r.distinct_symbols)
    );
    let mut t = Table::new(&[
        "table",
        "format",
        ">entries",
        ">relocations",
        ">bytes",
        ">share",
        "loader",
    ]);
    for s in &r.sections {
        t.row(vec![
            s.name.clone(),
            s.format.clone(),
            thousands(s.entries),
            thousands(s.relocations),
            human_bytes(s.size),
            percent(s.share_of_file),
            if s.dynamic { "yes" } else { "no (static)" }.to_string(),
        ]);
    }
    out.push('\n');
    out.push_str(&t.render(style, "  "));
    if !r.by_type.is_empty() {
        let mut types: Vec<(&String, &u64)> = r.by_type.iter().collect();
        types.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        let mut t = Table::new(&["type", ">count"]);
        for (name, count) in types {
            t.row(vec![name.clone(), thousands(*count)]);
        }
        if !r.relr_offsets.is_empty() {
            t.row(vec![
                "(RELR, decoded)".to_string(),
                thousands(r.relr_offsets.len() as u64),
            ]);
        }
        out.push('\n');
        out.push_str(&t.render(style, "  "));
    }
    if let Some(e) = &r.relr_estimate {
        let _ = writeln!(
            out,
            "\n  As RELR: {} relative relocations in tables ({} packable) take {}; one RELR table for all relative relocations takes {} (saving {})",
            thousands(e.relative_in_tables),
            thousands(e.packable),
            human_bytes(e.current_bytes),
            human_bytes(e.relr_bytes),
            human_bytes(e.saving_bytes)
        );
    }
    let p = &r.pages_written;
    if p.total > 0 {
        let _ = writeln!(
            out,
            "\n  Pages the loader writes: {} ({}), each read at startup and made private \
             (a page shared by two sections counts under both below)",
            thousands(p.total),
            human_bytes(p.total * ins.page_size)
        );
        let mut t = Table::new(&["section", ">relocations", ">pages"]);
        for s in &p.by_section {
            t.row(vec![
                s.section.clone(),
                thousands(s.relocations),
                thousands(s.pages),
            ]);
        }
        out.push_str(&t.render(style, "  "));
    }
}

fn initializers(out: &mut String, ins: &Inspection, view: &InspectView) {
    let i = &ins.init_array;
    if i.count == 0 && i.ctors_count == 0 && i.init_function.is_none() && i.preinit_count == 0 {
        return;
    }
    heading(
        out,
        view.style,
        &format!(
            "Static initializers: {} in .init_array, starting on {} code pages",
            thousands(i.count),
            thousands(i.code_pages)
        ),
    );
    let name = |init: &coldstart_binary::Initializer| {
        init.demangled
            .clone()
            .or_else(|| init.symbol.clone())
            .unwrap_or_else(|| "?".to_string())
    };
    if let Some(f) = &i.init_function {
        let _ = writeln!(
            out,
            "  DT_INIT {} {}",
            f.target.map(hex).unwrap_or_default(),
            name(f)
        );
    }
    let _ = writeln!(
        out,
        "  .preinit_array {}, .fini_array {}, .ctors {}",
        i.preinit_count, i.fini_count, i.ctors_count
    );
    let limit = view.initializers.unwrap_or(usize::MAX);
    let mut t = Table::new(&[">#", ">slot", ">function", "name"]);
    for (n, entry) in i.entries.iter().chain(&i.ctors).enumerate().take(limit) {
        t.row(vec![
            n.to_string(),
            hex(entry.slot),
            entry.target.map(hex).unwrap_or_else(|| "?".to_string()),
            name(entry),
        ]);
    }
    if !t.is_empty() {
        out.push_str(&t.render(view.style, "  "));
    }
    let shown = (i.entries.len() + i.ctors.len()).min(limit);
    let all = i.entries.len() + i.ctors.len();
    if shown < all {
        let _ = writeln!(
            out,
            "  ... {} more (--initializers all lists them)",
            all - shown
        );
    }
}

/// PE images whose preferred ranges overlap: one of each pair is rebased.
pub fn render_overlaps(overlaps: &[ImageOverlap], style: Style) -> String {
    let mut out = String::new();
    if overlaps.is_empty() {
        return out;
    }
    heading(
        &mut out,
        style,
        "Overlapping preferred image ranges (one of each pair will be rebased)",
    );
    let mut t = Table::new(&["image", "range", "image", "range"]);
    for o in overlaps {
        t.row(vec![
            o.first.clone(),
            format!("{}-{}", hex(o.first_range[0]), hex(o.first_range[1])),
            o.second.clone(),
            format!("{}-{}", hex(o.second_range[0]), hex(o.second_range[1])),
        ]);
    }
    out.push_str(&t.render(style, "  "));
    out
}

/// A few lines per binary: the startup-relevant totals and the warnings.
pub fn render_summary(ins: &Inspection) -> String {
    let mut out = String::new();
    let h = &ins.header;
    let r = &ins.relocations;
    let _ = writeln!(
        out,
        "{}: {} {}, {}",
        ins.path,
        h.machine,
        h.kind.describe(),
        human_bytes(ins.size)
    );
    if let Some(d) = &ins.dynamic {
        let _ = writeln!(
            out,
            "  needs {}; {} dynamic symbols",
            if d.needed.is_empty() {
                "nothing".to_string()
            } else {
                d.needed.join(", ")
            },
            thousands(d.dynamic_symbols)
        );
    }
    let _ = writeln!(
        out,
        "  relocations: {} ({} relative, {} symbolic naming {} symbols) in {}; they write {} pages",
        thousands(r.total),
        thousands(r.relative),
        thousands(r.symbolic),
        thousands(r.distinct_symbols),
        human_bytes(r.bytes),
        thousands(r.pages_written.total)
    );
    if let Some(e) = &r.relr_estimate
        && e.saving_bytes > 0
    {
        let _ = writeln!(
            out,
            "  as RELR the relative relocations would take {} instead of {}",
            human_bytes(e.relr_bytes),
            human_bytes(e.current_bytes)
        );
    }
    let i = &ins.init_array;
    let _ = writeln!(
        out,
        "  static initializers: {} in .init_array, starting on {} code pages",
        thousands(i.count),
        thousands(i.code_pages)
    );
    for w in &ins.warnings {
        let _ = writeln!(out, "  warning[{}]: {}", w.code, w.message);
    }
    out
}
