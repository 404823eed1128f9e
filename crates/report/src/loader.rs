//! `coldstart report`'s "dynamic loader" section: per program image, its
//! objects by loader time (search, map, relocate, init, opens tried,
//! relocations, pages read in their phases), the phase totals, and the
//! slowest initializers by name.

use crate::table::{Style, Table, heading, percent, thousands};
use coldstart_analyze::{LoaderObject, LoaderProcess, LoaderReport, ObjectOrigin, PhaseTotal};
use std::fmt::Write;

fn ms(ns: i64) -> String {
    format!("{:.2}", ns as f64 / 1e6)
}

/// The section; `top` objects and initializers per process (all when None).
pub fn render(report: &LoaderReport, style: Style, top: Option<usize>) -> String {
    let mut out = String::new();
    heading(&mut out, style, "Dynamic loader");
    if let Some(sight) = &report.sight {
        let _ = writeln!(out, "  {sight}");
    }
    let shown = top.unwrap_or(usize::MAX);
    for process in &report.processes {
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

fn render_process(
    out: &mut String,
    process: &LoaderProcess,
    ready_ns: Option<i64>,
    style: Style,
    shown: usize,
) {
    let _ = writeln!(
        out,
        "\n  {} ({}) {}",
        process.comm.as_deref().unwrap_or("?"),
        process.pid,
        process.program.as_deref().unwrap_or("")
    );
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
        parts.push(format!("exec to entry {} ms{share}", ms(entry)));
    }
    if let Some(start) = process.start_ns {
        parts.push(format!("loading and relocating {} ms", ms(start)));
    }
    parts.push(format!(
        "{} initializers {} ms",
        process.initializers,
        ms(process.initializers_ns)
    ));
    if !process.dlopens.is_empty() {
        let ns: i64 = process.dlopens.iter().map(|d| d.duration_ns).sum();
        let failed = process
            .dlopens
            .iter()
            .filter(|d| d.succeeded != Some(true))
            .count();
        parts.push(format!(
            "{} dlopen calls {} ms ({failed} failed)",
            process.dlopens.len(),
            ms(ns)
        ));
    }
    parts.join(", ")
}

fn object_row(object: &LoaderObject) -> Vec<String> {
    let count = |n: Option<u64>| n.map(thousands).unwrap_or_else(|| "-".into());
    let relocations = object.relocations.as_ref();
    let mut label = if object.main_program {
        format!(
            "{} (main program)",
            object.path.as_deref().unwrap_or("main program")
        )
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
    let mut table = Table::new(&[
        "phase",
        ">spans",
        ">total ms",
        ">self ms",
        ">pages read",
        ">pages touched",
    ]);
    for phase in phases {
        let unfinished = if phase.unfinished > 0 {
            format!(" ({} unfinished)", phase.unfinished)
        } else {
            String::new()
        };
        table.row(vec![
            format!("{}{unfinished}", phase.phase.as_str()),
            thousands(phase.spans),
            ms(phase.total_ns),
            ms(phase.self_ns),
            thousands(phase.io.pages_read),
            thousands(phase.io.pages_touched),
        ]);
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
