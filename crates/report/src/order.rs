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

#[cfg(test)]
mod tests {
    use super::*;
    use coldstart_layout::emit::{Caveat, CaveatKind, Reason, Unordered};
    use coldstart_layout::traced::Source;
    use coldstart_layout::{EmitReport, Kind, Linker};

    fn unordered(name: &str) -> Unordered {
        Unordered {
            raw_name: name.to_string(),
            kind: Kind::Function,
            size: 16,
            reason: Reason::NotInBinary,
        }
    }

    #[test]
    fn page_level_orders_name_the_reasons_with_three_examples_and_the_usage() {
        let report = OrderReport {
            binary: "/bin/app".into(),
            output: "app.order".into(),
            source: Source {
                kind: "pages",
                runs: vec![2, 3],
                traces: 2,
                not_in_binary: 0,
                pages_touched: 40,
                data_traces: 0,
            },
            strategy: "first-call",
            emitted: EmitReport {
                linker: Linker::Lld,
                usage: "-Wl,--symbol-ordering-file=FILE".into(),
                symbols: 10,
                ordered: 6,
                ordered_bytes: 3 * 1024,
                traced_bytes: 4 * 1024,
                unordered: ["a", "b", "c", "d"].map(unordered).to_vec(),
                caveats: vec![Caveat {
                    raw_name: "helper".into(),
                    caveat: CaveatKind::SameLocalName { definitions: 2 },
                }],
                warnings: vec!["from the emitter".into()],
            },
            warnings: vec!["from the order".into()],
            text: String::new(),
        };
        let not_in_binary = Reason::NotInBinary.to_string();
        assert_eq!(
            render(&report),
            format!(
                "order for /bin/app (lld, first-call strategy, from 2 page-level traces of runs [2, 3])\n\
                 \x20 6 of 10 symbols ordered: 3.0 KiB of startup's 4.0 KiB (75.0%)\n\
                 \x20 not ordered (4): {not_in_binary} (e.g. a, b, c)\n\
                 \x20 1 symbols may not land where the order says (see --json for each)\n\
                 \x20 warning: from the emitter\n\
                 \x20 warning: from the order\n\
                 \x20 use it: -Wl,--symbol-ordering-file=app.order\n"
            )
        );
    }

    #[test]
    fn function_level_orders_say_where_data_came_from_and_what_the_binary_lacks() {
        let report = OrderReport {
            binary: "/bin/app".into(),
            output: "-".into(),
            source: Source {
                kind: "functions",
                runs: vec![1],
                traces: 3,
                not_in_binary: 5,
                pages_touched: 0,
                data_traces: 1,
            },
            strategy: "call-count",
            emitted: EmitReport {
                linker: Linker::Gold,
                usage: "-Wl,--section-ordering-file=FILE".into(),
                symbols: 0,
                ordered: 0,
                ordered_bytes: 0,
                traced_bytes: 0,
                unordered: Vec::new(),
                caveats: Vec::new(),
                warnings: Vec::new(),
            },
            warnings: Vec::new(),
            text: String::new(),
        };
        assert_eq!(
            render(&report),
            "order for /bin/app (gold, call-count strategy, from 3 function-level traces of runs [1])\n\
             \x20 data symbols from 1 page-level traces of the binary itself\n\
             \x20 0 of 0 symbols ordered: 0 B of startup's 0 B (100.0%)\n\
             \x20 5 traced functions are not in /bin/app (inlined away in the plain build, or \
             instrumentation-only) and are left out\n\
             \x20 use it: -Wl,--section-ordering-file=-\n"
        );
    }
}
