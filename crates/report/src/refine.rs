//! `coldstart plan --refine` as text: one row per start traced with a
//! plan, and which plan was written.

use crate::table::{Style, Table, thousands};
use coldstart_binary::human_bytes;
use coldstart_plan::refine_loop::{RefineReport, plannable_misses};
use std::fmt::Write as _;

pub fn render(report: &RefineReport) -> String {
    let mut out = String::new();
    let mut table = Table::new(&[
        ">start",
        ">run",
        ">plan",
        ">prefetcher read",
        ">program read",
        ">% of plan",
        ">demanded, not planned",
        ">added",
        ">dropped",
        "kept",
    ]);
    for (i, it) in report.iterations.iter().enumerate() {
        let m = &it.misses;
        table.row(vec![
            (i + 1).to_string(),
            it.run.to_string(),
            human_bytes(it.plan_bytes),
            human_bytes(m.prefetcher.bytes),
            human_bytes(m.program.bytes),
            m.program_over_plan()
                .map(|r| format!("{:.1}", r * 100.0))
                .unwrap_or_else(|| "-".to_string()),
            thousands(plannable_misses(m)),
            it.refined
                .as_ref()
                .map_or("-".to_string(), |r| thousands(r.added_pages)),
            it.refined
                .as_ref()
                .map_or("-".to_string(), |r| thousands(r.dropped_pages)),
            if Some(i) == report.best {
                "written".to_string()
            } else if it.kept {
                "bettered".to_string()
            } else {
                "no".to_string()
            },
        ]);
    }
    let _ = writeln!(
        out,
        "seed: runs {:?}, {}{}",
        report.seed_runs,
        human_bytes(report.seed_bytes),
        if report.seeds_traced.is_empty() {
            String::new()
        } else {
            format!(" (traced now: runs {:?})", report.seeds_traced)
        }
    );
    out.push_str(&table.render(Style::Plain, ""));
    match report.best {
        Some(best) => {
            let it = &report.iterations[best];
            let _ = writeln!(
                out,
                "wrote {}: the plan of start {} ({}, {} extents); stopped: {}",
                report.plan_path,
                best + 1,
                human_bytes(it.plan_bytes),
                thousands(it.plan_extents as u64),
                report.stopped
            );
        }
        None => {
            let _ = writeln!(out, "no plan written; stopped: {}", report.stopped);
        }
    }
    for it in &report.iterations {
        if let Some(r) = &it.refined
            && !r.changed_files.is_empty()
        {
            let _ = writeln!(
                out,
                "run {}: {} files changed since the seed was traced (trace new seeds): {}",
                it.run,
                r.changed_files.len(),
                r.changed_files.join(", ")
            );
        }
    }
    out
}
