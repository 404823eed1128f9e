//! `coldstart bench` results as a table (plain or Markdown): per variant the
//! time statistics, the ratio to the first variant, and the counts that back
//! the times up; then the environment and the warnings.

use crate::table::{Style, Table, thousands};
use coldstart_bench::{BenchResult, VariantResult};
use coldstart_binary::human_bytes;
use std::fmt::Write as _;

pub fn render(result: &BenchResult, style: Style) -> String {
    let mut out = String::new();
    let rounds = result.runs.iter().map(|r| r.round + 1).max().unwrap_or(0);
    let mut table = Table::new(&[
        "variant",
        ">runs",
        ">median",
        ">mean ± 95% CI",
        ">sd",
        ">min",
        ">max",
        ">ratio [95% CI]",
        ">major faults",
        ">read from disk",
    ]);
    for (index, v) in result.variants.iter().enumerate() {
        table.row(row(index, v));
    }
    let e = &result.environment;
    let heading = format!(
        "{rounds} round(s), variants interleaved; kernel {}, {} CPUs, {} read_ahead_kb {}{}",
        e.kernel,
        e.cpus,
        e.device
            .as_deref()
            .map_or("device ?".to_string(), |d| format!("device {d}")),
        e.read_ahead_kb
            .map_or("unknown".to_string(), |kb| kb.to_string()),
        e.cpu_governor
            .as_deref()
            .map_or(String::new(), |g| format!(", governor {g}")),
    ) + if e.damon_reclaim {
        ", DAMON reclaim on"
    } else {
        ""
    };
    match style {
        Style::Markdown => {
            let _ = writeln!(out, "{heading}\n");
            out.push_str(&table.render(style, ""));
        }
        Style::Plain => {
            let _ = writeln!(out, "{heading}");
            out.push_str(&table.render(style, ""));
        }
    }
    if result.rewarm_runs > 0 {
        let _ = writeln!(
            out,
            "{}{} untimed run(s) warmed the cache for warm variants (first run, or after an eviction)",
            if style == Style::Markdown { "\n" } else { "" },
            result.rewarm_runs
        );
    }
    if result.interrupted {
        let _ = writeln!(out, "interrupted: the figures cover the runs done");
    }
    if !result.warnings.is_empty() {
        let _ = writeln!(
            out,
            "{}warnings:",
            if style == Style::Markdown { "\n" } else { "" }
        );
        for w in &result.warnings {
            let _ = writeln!(
                out,
                "{}{w}",
                if style == Style::Markdown { "- " } else { "  " }
            );
        }
    }
    out
}

fn row(index: usize, v: &VariantResult) -> Vec<String> {
    let runs = format!("{}/{}", v.runs_ok, v.runs_ok + v.runs_failed);
    let Some(s) = &v.wall_ms else {
        let mut cells = vec![v.name.clone(), runs];
        cells.extend(std::iter::repeat_n("-".to_string(), 8));
        return cells;
    };
    let mean = match s.ci95 {
        Some((low, high)) => format!("{:.1} ± {:.1} ms", s.mean, (high - low) / 2.0),
        None => format!("{:.1} ms", s.mean),
    };
    let ratio = if index == 0 {
        "1".to_string()
    } else {
        match &v.ratio {
            Some(r) => match r.ci95 {
                Some((low, high)) => format!("{:.3} [{:.3}, {:.3}]", r.ratio, low, high),
                None => format!("{:.3}", r.ratio),
            },
            None => "-".to_string(),
        }
    };
    vec![
        v.name.clone(),
        runs,
        format!("{:.1} ms", s.median),
        mean,
        s.std_dev
            .map_or("-".to_string(), |sd| format!("{sd:.1} ms")),
        format!("{:.1}", s.min),
        format!("{:.1}", s.max),
        ratio,
        v.major_faults_median
            .map_or("-".to_string(), |m| thousands(m.round() as u64)),
        v.read_bytes_median
            .map_or("-".to_string(), |b| human_bytes(b.round() as u64)),
    ]
}
