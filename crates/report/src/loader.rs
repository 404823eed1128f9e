//! `coldstart report`'s "dynamic loader" section: per program image, its
//! objects by loader time (search, map, relocate, init, opens tried,
//! relocations, pages read in their phases), the phase totals, and the
//! slowest initializers by name.

use crate::millis::hundredths as ms;
use crate::table::{Style, Table, heading, percent, thousands};
use coldstart_analyze::{LoaderObject, LoaderProcess, LoaderReport, ObjectOrigin, PhaseTotal};
use std::fmt::Write;

/// The section; `top` processes, objects and initializers per process
/// (all when None). Processes are detailed when their loader time is at
/// least a tenth of the busiest one's (all of them with `top` None): a
/// start that runs a dozen small helpers is read from its main program.
pub fn render(report: &LoaderReport, style: Style, top: Option<usize>) -> String {
    let mut out = String::new();
    heading(&mut out, style, "Dynamic loader");
    if let Some(sight) = &report.sight {
        let _ = writeln!(out, "  {sight}");
    }
    if let Some(hit_ns) = report.probe_hit_ns {
        let _ = writeln!(
            out,
            "  probe cost: {:.1} µs per hit, calibrated at trace time; \"without probes\" \
             figures take it off each span per hit it held",
            hit_ns as f64 / 1e3
        );
    }
    let shown = top.unwrap_or(usize::MAX);
    let mut busiest: Vec<&LoaderProcess> = report.processes.iter().collect();
    busiest.sort_by_key(|p| std::cmp::Reverse(p.loader_ns));
    if report.processes.len() > 1 {
        out.push_str(&process_table(&busiest, shown).render(style, "  "));
        if busiest.len() > shown {
            let _ = writeln!(
                out,
                "  ... {} more processes (--top all shows them)",
                busiest.len() - shown
            );
        }
    }
    let most = busiest.first().map_or(0, |p| p.loader_ns);
    for process in busiest
        .iter()
        .filter(|p| top.is_none() || p.loader_ns * 10 >= most)
        .take(shown)
    {
        render_process(&mut out, process, report.ready_ns, style, shown);
    }
    if report.processes.len() > 1 {
        let _ = writeln!(out, "\n  all {} processes:", report.processes.len());
        out.push_str(&phase_table(&report.phases).render(style, "  "));
    }
    let outside = &report.outside_loader;
    let _ = writeln!(
        out,
        "  outside the loader: {} pages read, {} touched",
        thousands(outside.pages_read),
        thousands(outside.pages_touched)
    );
    out
}

/// One row per process image, most loader time first.
fn process_table(processes: &[&LoaderProcess], shown: usize) -> Table {
    let mut table = Table::new(&[
        ">loader ms",
        ">exec ms",
        ">to entry ms",
        ">objects",
        ">initializers ms",
        ">dlopens",
        ">pages read",
        "process",
    ]);
    for p in processes.iter().take(shown) {
        let pages: u64 = p.phases.iter().map(|t| t.io.pages_read).sum();
        table.row(vec![
            ms(p.loader_ns),
            p.exec_ns.map(ms).unwrap_or_default(),
            p.entry_ns.map(ms).unwrap_or_default(),
            thousands(p.objects.len() as u64),
            ms(p.initializers_ns),
            thousands(p.dlopens.len() as u64),
            thousands(pages),
            process_label(p),
        ]);
    }
    table
}

fn process_label(p: &LoaderProcess) -> String {
    format!(
        "{} ({}){}",
        p.comm.as_deref().unwrap_or("?"),
        p.pid,
        p.program
            .as_deref()
            .map(|path| format!(" {path}"))
            .unwrap_or_default()
    )
}

fn render_process(
    out: &mut String,
    process: &LoaderProcess,
    ready_ns: Option<i64>,
    style: Style,
    shown: usize,
) {
    let _ = writeln!(out, "\n  {}", process_label(process));
    let _ = writeln!(out, "  {}", process_summary(process, ready_ns));
    let mut objects = Table::new(&[
        ">search ms",
        ">map ms",
        ">relocate ms",
        ">init ms",
        ">opens",
        ">failed",
        ">relative",
        ">symbolic",
        ">pages read",
        "object",
    ]);
    for object in process.objects.iter().take(shown) {
        objects.row(object_row(object));
    }
    out.push_str(&objects.render(style, "  "));
    if process.objects.len() > shown {
        let _ = writeln!(
            out,
            "  ... {} more objects (--top all shows them)",
            process.objects.len() - shown
        );
    }
    let _ = writeln!(out);
    out.push_str(&phase_table(&process.phases).render(style, "  "));
    render_initializers(out, process, style, shown);
}

/// exec -> entry, the start span, initializers, against readiness.
fn process_summary(process: &LoaderProcess, ready_ns: Option<i64>) -> String {
    let mut parts = Vec::new();
    if let Some(entry) = process.entry_ns {
        let share = ready_ns
            .filter(|&r| r > 0)
            .map(|ready| {
                format!(
                    " ({} of the {} ms to ready)",
                    percent(entry as f64 / ready as f64),
                    ms(ready)
                )
            })
            .unwrap_or_default();
        let corrected = process
            .corrected_entry_ns
            .map(|c| format!(" ({} ms without probes)", ms(c)))
            .unwrap_or_default();
        parts.push(format!("exec to entry {} ms{corrected}{share}", ms(entry)));
    }
    if let Some(start) = process.start_ns {
        let corrected = process
            .corrected_start_ns
            .map(|c| format!(" ({} ms without probes)", ms(c)))
            .unwrap_or_default();
        parts.push(format!(
            "loading and relocating {} ms{corrected}",
            ms(start)
        ));
    }
    parts.push(format!(
        "{} initializers {} ms",
        process.initializers,
        ms(process.initializers_ns)
    ));
    if !process.dlopens.is_empty() {
        let failed = process
            .dlopens
            .iter()
            .filter(|d| d.succeeded != Some(true))
            .count();
        parts.push(format!(
            "{} dlopen calls {} ms ({failed} failed)",
            process.dlopens.len(),
            ms(process.dlopen_ns)
        ));
    }
    parts.join(", ")
}

fn object_row(object: &LoaderObject) -> Vec<String> {
    let count = |n: Option<u64>| n.map(thousands).unwrap_or_else(|| "-".into());
    let relocations = object.relocations.as_ref();
    let mut label = if object.main_program {
        match &object.path {
            Some(path) => format!("{path} (main program)"),
            None => "(main program, file unknown)".into(),
        }
    } else {
        object.object.clone()
    };
    if object.origin == ObjectOrigin::Dlopen {
        match &object.dlopen {
            Some(name) if *name != object.object => {
                let _ = write!(label, " (dlopen {name})");
            }
            _ => label.push_str(" (dlopen)"),
        }
    }
    if object.failed_loads > 0 {
        label.push_str(" (not found)");
    }
    vec![
        ms(object.search_ns),
        ms(object.map_ns),
        ms(object.relocate_ns),
        ms(object.init_ns),
        thousands(object.opens_tried),
        thousands(object.opens_failed),
        count(relocations.map(|r| r.relative)),
        count(relocations.map(|r| r.symbolic)),
        thousands(object.pages.pages_read),
        label,
    ]
}

fn phase_table(phases: &[PhaseTotal]) -> Table {
    let corrected = phases.iter().any(|p| p.corrected_total_ns.is_some());
    let mut columns = vec!["phase", ">spans", ">total ms", ">self ms"];
    if corrected {
        columns.extend([">probe hits", ">total w/o probes", ">self w/o probes"]);
    }
    columns.extend([">pages read", ">pages touched"]);
    let mut table = Table::new(&columns);
    for phase in phases {
        let unfinished = if phase.unfinished > 0 {
            format!(" ({} unfinished)", phase.unfinished)
        } else {
            String::new()
        };
        let mut row = vec![
            format!("{}{unfinished}", phase.phase.as_str()),
            thousands(phase.spans),
            ms(phase.total_ns),
            ms(phase.self_ns),
        ];
        if corrected {
            row.extend([
                thousands(phase.probe_hits),
                phase.corrected_total_ns.map(ms).unwrap_or_default(),
                phase.corrected_self_ns.map(ms).unwrap_or_default(),
            ]);
        }
        row.extend([
            thousands(phase.io.pages_read),
            thousands(phase.io.pages_touched),
        ]);
        table.row(row);
    }
    table
}

/// The process's initializers, slowest first.
fn render_initializers(out: &mut String, process: &LoaderProcess, style: Style, shown: usize) {
    let mut calls: Vec<(&LoaderObject, &coldstart_analyze::InitializerCall)> = process
        .objects
        .iter()
        .flat_map(|o| o.initializers.iter().map(move |c| (o, c)))
        .collect();
    if calls.is_empty() {
        return;
    }
    calls.sort_by(|a, b| {
        b.1.duration_ns
            .cmp(&a.1.duration_ns)
            .then(a.1.t_begin_ns.cmp(&b.1.t_begin_ns))
    });
    let _ = writeln!(out, "\n  slowest initializers:");
    let mut table = Table::new(&[">ms", "slot", "function", "object"]);
    for (object, call) in calls.iter().take(shown) {
        let function = match (&call.name, call.address) {
            (Some(name), _) => name.clone(),
            (None, Some(address)) => format!("0x{address:x}"),
            (None, None) => "?".into(),
        };
        table.row(vec![
            ms(call.duration_ns),
            call.slot.clone().unwrap_or_default(),
            function,
            object.path.clone().unwrap_or_else(|| object.object.clone()),
        ]);
    }
    out.push_str(&table.render(style, "  "));
    if calls.len() > shown {
        let _ = writeln!(
            out,
            "  ... {} more initializers (--top all shows them)",
            calls.len() - shown
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use coldstart_analyze::{InitializerCall, PagesIo};
    use coldstart_profile::LoaderPhase;

    fn object(name: &str, search_ms: i64, initializer: Option<(&str, i64)>) -> LoaderObject {
        LoaderObject {
            object: name.into(),
            path: Some(name.into()),
            main_program: false,
            origin: ObjectOrigin::Initial,
            dlopen: None,
            names: Vec::new(),
            base: None,
            first_ns: 0,
            loader_ns: search_ms * 1_000_000,
            relocated: true,
            search_ns: search_ms * 1_000_000,
            map_ns: 0,
            relocate_ns: 0,
            init_ns: 0,
            references: 0,
            failed_loads: 0,
            opens_tried: 3,
            opens_failed: 2,
            opens: Vec::new(),
            relocations: None,
            relocations_note: Some("gone".into()),
            lookups: None,
            initializers: initializer
                .into_iter()
                .map(|(name, ms)| InitializerCall {
                    slot: Some("DT_INIT".into()),
                    target: None,
                    address: Some(0x10),
                    name: Some(name.into()),
                    raw_name: Some(name.into()),
                    t_begin_ns: 0,
                    duration_ns: ms * 1_000_000,
                    finished: true,
                })
                .collect(),
            pages: PagesIo::default(),
            io: Vec::new(),
        }
    }

    fn process(pid: i32, loader_ms: i64, objects: Vec<LoaderObject>) -> LoaderProcess {
        LoaderProcess {
            pid,
            comm: Some(format!("p{pid}")),
            program: None,
            exec_ns: Some(0),
            start_ns: None,
            entry_ns: Some(loader_ms * 1_000_000),
            corrected_start_ns: None,
            corrected_entry_ns: None,
            entry_probe_hits: None,
            dlopen_ns: 0,
            loader_ns: loader_ms * 1_000_000,
            initializers: 0,
            initializers_ns: 0,
            phases: vec![PhaseTotal {
                spans: 1,
                ..PhaseTotal::empty(LoaderPhase::Start)
            }],
            objects,
            dlopens: Vec::new(),
        }
    }

    #[test]
    fn busy_processes_are_detailed_with_their_top_objects_and_initializers() {
        let report = LoaderReport {
            sight: Some("ld.so probes".into()),
            ready_ns: Some(100_000_000),
            probe_hit_ns: None,
            phases: Vec::new(),
            outside_loader: PagesIo::default(),
            processes: vec![
                process(1, 5, vec![object("/lib/helper.so", 5, None)]),
                process(
                    2,
                    60,
                    vec![
                        object("/lib/big.so", 40, Some(("big_init", 3))),
                        object("/lib/small.so", 20, Some(("small_init", 1))),
                    ],
                ),
            ],
        };
        let text = render(&report, Style::Plain, Some(1));
        // The busiest first in the process table, then only it detailed
        // (the helper's 5 ms is under a tenth of 60).
        assert!(text.contains("  ... 1 more processes"), "{text}");
        assert!(
            text.contains("p2 (2)\n  exec to entry 60.00 ms (60.0% of the 100.00 ms to ready)")
        );
        assert!(!text.contains("helper.so"), "{text}");
        assert!(text.contains("40.00    0.00         0.00     0.00      3       2         -         -           0  /lib/big.so"), "{text}");
        assert!(
            text.contains("  ... 1 more objects (--top all shows them)"),
            "{text}"
        );
        assert!(
            text.contains("3.00  DT_INIT  big_init  /lib/big.so"),
            "{text}"
        );
        assert!(!text.contains("small_init"), "{text}");
        // All of it without a limit.
        let all = render(&report, Style::Plain, None);
        for shown in ["helper.so", "small.so", "small_init"] {
            assert!(all.contains(shown), "{shown}: {all}");
        }
    }
}
