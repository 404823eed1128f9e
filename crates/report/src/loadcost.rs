//! What `coldstart loadcost` prints and draws: the cost-per-unit table,
//! the direct check, the level medians, and an SVG of small multiples (one
//! panel per factor, one line per mode and cache state).

use crate::chart::escape;
use coldstart_loadcost::design::{Cache, Factor, Mode};
use coldstart_loadcost::fit::Fit;
use coldstart_loadcost::{LoadCost, Series};
use std::fmt::Write as _;

const COLUMNS: [(Mode, Cache); 4] = [
    (Mode::Dlopen, Cache::Warm),
    (Mode::Dlopen, Cache::Cold),
    (Mode::Needed, Cache::Warm),
    (Mode::Needed, Cache::Cold),
];

/// The text report.
pub fn text(result: &LoadCost) -> String {
    let mut out = String::new();
    let env = &result.environment;
    let _ = writeln!(
        out,
        "coldstart loadcost: {} factors, {} rounds{}, dlopen and DT_NEEDED, warm and cold{}",
        result.design.factors.len(),
        result.rounds,
        if result.interrupted {
            " (interrupted)"
        } else {
            ""
        },
        if result.design.quick {
            ", quick design"
        } else {
            ""
        },
    );
    let _ = writeln!(
        out,
        "machine: kernel {}, {} CPUs, {} read_ahead_kb {}; {}",
        env.kernel,
        env.cpus,
        env.device.as_deref().unwrap_or("unknown device"),
        env.read_ahead_kb
            .map_or_else(|| "unknown".to_string(), |kb| kb.to_string()),
        result.compiler
    );
    let _ = writeln!(out, "work directory: {}", result.work_dir.display());
    out.push('\n');

    let _ = writeln!(
        out,
        "Cost per unit: slope of the level medians, 95% bootstrap interval; * = interval excludes 0"
    );
    let mut rows = vec![vec![
        "factor".to_string(),
        "per".to_string(),
        "dlopen warm".to_string(),
        "dlopen cold".to_string(),
        "needed warm".to_string(),
        "needed cold".to_string(),
    ]];
    for &factor in &result.design.factors {
        let mut row = vec![factor.name().to_string(), factor.unit().to_string()];
        for (mode, cache) in COLUMNS {
            row.push(
                result
                    .series(factor, mode, cache)
                    .and_then(|s| s.fit.as_ref())
                    .map_or_else(|| "-".to_string(), cost),
            );
        }
        rows.push(row);
    }
    table(&mut out, &rows);

    if let Some(direct) = &result.direct {
        out.push('\n');
        let _ = writeln!(
            out,
            "Check: applying relative relocations by hand costs {} per relocation; the fit for a \
             warm dlopen says {}: {}.",
            cost(&direct.fit),
            cost(&direct.dlopen_warm),
            if direct.agrees {
                "the intervals overlap"
            } else {
                "the intervals do NOT overlap"
            }
        );
    }

    out.push_str("\nMedians per level, with each level's 95% interval in the JSON\n");
    for &factor in &result.design.factors {
        let _ = writeln!(out, "\n{} ({})", factor.name(), factor.description());
        let mut rows = vec![vec![
            "level".to_string(),
            "dlopen warm".to_string(),
            "dlopen cold".to_string(),
            "needed warm".to_string(),
            "needed cold".to_string(),
        ]];
        let levels = result
            .design
            .factors
            .iter()
            .position(|f| *f == factor)
            .map(|i| result.design.levels[i].clone())
            .unwrap_or_default();
        for level in levels {
            let mut row = vec![level.to_string()];
            for (mode, cache) in COLUMNS {
                row.push(
                    result
                        .series(factor, mode, cache)
                        .and_then(|s| s.levels.iter().find(|l| l.level == level))
                        .map_or_else(|| "-".to_string(), |l| duration(l.median_ns)),
                );
            }
            rows.push(row);
        }
        table(&mut out, &rows);
    }
    out
}

/// "2.10 ns [1.90, 2.30]*", scaled to a readable unit.
fn cost(fit: &Fit) -> String {
    let (scale, unit) = scale_of(fit.slope_ns.abs().max(fit.slope_ci_ns.1.abs()));
    format!(
        "{:.2} {unit} [{:.2}, {:.2}]{}",
        fit.slope_ns / scale,
        fit.slope_ci_ns.0 / scale,
        fit.slope_ci_ns.1 / scale,
        if fit.is_significant() { "*" } else { "" }
    )
}

fn duration(ns: f64) -> String {
    let (scale, unit) = scale_of(ns.abs());
    format!("{:.1} {unit}", ns / scale)
}

fn scale_of(ns: f64) -> (f64, &'static str) {
    if ns >= 1e6 {
        (1e6, "ms")
    } else if ns >= 1e3 {
        (1e3, "µs")
    } else {
        (1.0, "ns")
    }
}

/// Left-aligned first columns, right-aligned numbers.
fn table(out: &mut String, rows: &[Vec<String>]) {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    for row in rows {
        let mut line = String::new();
        for (c, cell) in row.iter().enumerate() {
            let pad = widths[c] - cell.chars().count();
            if c > 0 {
                line.push_str("  ");
            }
            let text_column = c == 0 || (c == 1 && rows[0].get(1).is_some_and(|h| h == "per"));
            if text_column {
                line.push_str(cell);
                line.push_str(&" ".repeat(pad));
            } else {
                line.push_str(&" ".repeat(pad));
                line.push_str(cell);
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
}

const PANEL_W: f64 = 330.0;
const PANEL_H: f64 = 210.0;
const MARGIN_L: f64 = 62.0;
const MARGIN_B: f64 = 34.0;
const MARGIN_T: f64 = 26.0;
const MARGIN_R: f64 = 12.0;
const PANELS_PER_ROW: usize = 3;
const COLORS: [&str; 4] = ["#1f77b4", "#aec7e8", "#d62728", "#ff9896"];

/// Small multiples: one panel per factor, the level medians of the four
/// mode and cache states with their intervals, and the fitted lines.
pub fn svg(result: &LoadCost) -> String {
    let factors = &result.design.factors;
    let rows = factors.len().div_ceil(PANELS_PER_ROW).max(1);
    let width = PANEL_W * PANELS_PER_ROW as f64;
    let legend_h = 30.0;
    let height = legend_h + PANEL_H * rows as f64;
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="10">"#
    );
    let _ = writeln!(
        out,
        r#"<rect width="{width}" height="{height}" fill="white"/>"#
    );
    for (index, (mode, cache)) in COLUMNS.iter().enumerate() {
        let x = 10.0 + index as f64 * 150.0;
        let _ = writeln!(
            out,
            r#"<rect x="{x}" y="10" width="12" height="12" fill="{}"/><text x="{}" y="20">{} {}</text>"#,
            COLORS[index],
            x + 16.0,
            mode.name(),
            cache.name()
        );
    }
    for (index, &factor) in factors.iter().enumerate() {
        let x0 = (index % PANELS_PER_ROW) as f64 * PANEL_W;
        let y0 = legend_h + (index / PANELS_PER_ROW) as f64 * PANEL_H;
        panel(&mut out, result, factor, x0, y0);
    }
    out.push_str("</svg>\n");
    out
}

fn panel(out: &mut String, result: &LoadCost, factor: Factor, x0: f64, y0: f64) {
    let series: Vec<(usize, &Series)> = COLUMNS
        .iter()
        .enumerate()
        .filter_map(|(i, (mode, cache))| result.series(factor, *mode, *cache).map(|s| (i, s)))
        .collect();
    let points = series.iter().flat_map(|(_, s)| s.levels.iter());
    let (mut x_max, mut x_min, mut y_max) = (0f64, f64::MAX, 0f64);
    for level in points {
        x_max = x_max.max(level.level as f64);
        x_min = x_min.min(level.level as f64);
        y_max = y_max.max(level.median_ci_ns.1);
    }
    let _ = writeln!(
        out,
        r#"<text x="{}" y="{}" font-weight="bold">{} ({})</text>"#,
        x0 + MARGIN_L,
        y0 + 16.0,
        factor.name(),
        escape(factor.unit())
    );
    if x_min == f64::MAX || x_max <= x_min || y_max <= 0.0 {
        let _ = writeln!(
            out,
            r#"<text x="{}" y="{}">not measured</text>"#,
            x0 + MARGIN_L,
            y0 + PANEL_H / 2.0
        );
        return;
    }
    let (scale, unit) = scale_of(y_max);
    let plot_w = PANEL_W - MARGIN_L - MARGIN_R;
    let plot_h = PANEL_H - MARGIN_T - MARGIN_B;
    let px = |x: f64| x0 + MARGIN_L + (x - x_min) / (x_max - x_min) * plot_w;
    let py = |y: f64| y0 + MARGIN_T + plot_h - (y / y_max).clamp(0.0, 1.0) * plot_h;
    let _ = writeln!(
        out,
        r##"<rect x="{}" y="{}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#999"/>"##,
        x0 + MARGIN_L,
        y0 + MARGIN_T
    );
    for tick in 0..=4 {
        let value = y_max * tick as f64 / 4.0;
        let _ = writeln!(
            out,
            r#"<text x="{}" y="{}" text-anchor="end">{:.1} {unit}</text>"#,
            x0 + MARGIN_L - 4.0,
            py(value) + 3.0,
            value / scale
        );
    }
    let levels: Vec<u64> = series
        .first()
        .map(|(_, s)| s.levels.iter().map(|l| l.level).collect())
        .unwrap_or_default();
    for level in levels {
        let _ = writeln!(
            out,
            r#"<text x="{}" y="{}" text-anchor="middle">{level}</text>"#,
            px(level as f64),
            y0 + MARGIN_T + plot_h + 13.0
        );
    }
    for (color, s) in &series {
        let color = COLORS[*color];
        for level in &s.levels {
            let x = px(level.level as f64);
            let _ = writeln!(
                out,
                r#"<line x1="{x:.1}" x2="{x:.1}" y1="{:.1}" y2="{:.1}" stroke="{color}"/><circle cx="{x:.1}" cy="{:.1}" r="2.5" fill="{color}"/>"#,
                py(level.median_ci_ns.0),
                py(level.median_ci_ns.1),
                py(level.median_ns)
            );
        }
        if let Some(fit) = &s.fit {
            let line = |x: f64| fit.intercept_ns + fit.slope_ns * x;
            let _ = writeln!(
                out,
                r#"<line x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="{color}" stroke-dasharray="3,2"/>"#,
                px(x_min),
                py(line(x_min)),
                px(x_max),
                py(line(x_max))
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn costs_scale_to_a_readable_unit_and_mark_significance() {
        let fit = |slope: f64, low: f64, high: f64| Fit {
            slope_ns: slope,
            slope_ci_ns: (low, high),
            intercept_ns: 0.0,
            r_squared: 1.0,
        };
        assert_eq!(cost(&fit(2.1, 1.9, 2.3)), "2.10 ns [1.90, 2.30]*");
        assert_eq!(cost(&fit(1500.0, 1200.0, 1800.0)), "1.50 µs [1.20, 1.80]*");
        assert_eq!(cost(&fit(0.5, -1.0, 2.0)), "0.50 ns [-1.00, 2.00]");
    }

    #[test]
    fn tables_align_numbers_right() {
        let mut out = String::new();
        table(
            &mut out,
            &[
                vec!["level".into(), "a".into()],
                vec!["0".into(), "10.0 µs".into()],
                vec!["200000".into(), "9.5 µs".into()],
            ],
        );
        assert_eq!(out, "level         a\n0       10.0 µs\n200000   9.5 µs\n");
    }
}
