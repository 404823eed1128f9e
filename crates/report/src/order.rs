//! `coldstart order`'s diagnostics: where the traces came from, how much of
//! startup the order covers, and what could not be ordered and why.

use coldstart_layout::traced::OrderReport;
use std::collections::BTreeMap;
use std::fmt::Write as _;

pub fn render(report: &OrderReport) -> String {
    let e = &report.emitted;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "order for {} ({}, {} strategy, from {} {}-level traces of runs {:?})",
        report.binary,
        e.linker,
        report.strategy,
        report.source.traces,
        if report.source.is_pages() {
            "page"
        } else {
            "function"
        },
        report.source.runs,
    );
    if report.source.data_traces > 0 {
        let _ = writeln!(
            out,
            "  data symbols from {} page-level traces of the binary itself",
            report.source.data_traces
        );
    }
    let _ = writeln!(
        out,
        "  {} of {} symbols ordered: {} of startup's {} ({:.1}%)",
        e.ordered,
        e.symbols,
        coldstart_binary::human_bytes(e.ordered_bytes),
        coldstart_binary::human_bytes(e.traced_bytes),
        e.coverage() * 100.0
    );
    if report.source.not_in_binary > 0 {
        let _ = writeln!(
            out,
            "  {} traced functions are not in {} (inlined away in the plain build, or \
             instrumentation-only) and are left out",
            report.source.not_in_binary, report.binary
        );
    }
    let mut reasons: BTreeMap<String, (usize, Vec<&str>)> = BTreeMap::new();
    for unordered in &e.unordered {
        let entry = reasons.entry(unordered.reason.to_string()).or_default();
        entry.0 += 1;
        if entry.1.len() < 3 {
            entry.1.push(&unordered.raw_name);
        }
    }
    for (reason, (count, examples)) in &reasons {
        let _ = writeln!(
            out,
            "  not ordered ({count}): {reason} (e.g. {})",
            examples.join(", ")
        );
    }
    if !e.caveats.is_empty() {
        let _ = writeln!(
            out,
            "  {} symbols may not land where the order says (see --json for each)",
            e.caveats.len()
        );
    }
    for warning in e.warnings.iter().chain(&report.warnings) {
        let _ = writeln!(out, "  warning: {warning}");
    }
    let _ = writeln!(out, "  use it: {}", e.usage.replace("FILE", &report.output));
    out
}
