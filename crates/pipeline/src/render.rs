//! `coldstart demo`'s text report, composed of the report room's renderers
//! and tables: both binaries' anatomy, the traced cold start, and the order
//! loop as before/after tables (what the relinked app touched, requested and
//! read at the kernel's default read_ahead_kb and at the device's own,
//! beside what the simulator predicted), then the bench.

use crate::bench::PlanEffect;
use crate::demo::DemoReport;
use crate::order::{Comparison, OrderLoop};
use coldstart_binary::human_bytes;
use coldstart_report::run::RunView;
use coldstart_report::table::{Style, Table, thousands};

pub fn render(demo: &DemoReport) -> String {
    let mut text = String::new();
    for inspection in &demo.inspections {
        text.push('\n');
        text.push_str(&coldstart_report::inspect::render_summary(inspection));
    }
    text.push_str(&format!(
        "\nFull anatomy: coldstart inspect {} {}\nGround truth (every function, the startup order): {}\n",
        demo.executable.display(),
        demo.library.display(),
        demo.source_dir.join(coldstart_sample::MANIFEST_FILE).display()
    ));
    match (&demo.trace, &demo.chart, &demo.html, &demo.profile) {
        (Some(report), Some(svg), Some(html), Some(profile)) => {
            text.push_str("\nTraced cold start of the sample app:\n");
            text.push_str(&coldstart_report::run::render(
                report,
                &RunView {
                    style: Style::Plain,
                    files: Some(5),
                    symbols: Some(10),
                    pages: false,
                },
            ));
            text.push_str(&format!(
                "\nChart: {}\nReport page: {}\nProfile: {} (coldstart report {} --file '*libcssample*')\n",
                svg.display(),
                html.display(),
                profile.display(),
                profile.display()
            ));
        }
        _ => text.push_str(&format!(
            "\nNot traced: {}\n",
            demo.trace_skipped.as_deref().unwrap_or_default()
        )),
    }
    if let Some(path) = &demo.plan_path {
        text.push_str(&format!("\nPrefetch plan: {}\n", path.display()));
        text.push_str(&render_plan_effects(&demo.plan_effects));
    }
    if let Some(order) = &demo.order {
        text.push_str(&render_order(order));
    }
    match (&demo.pack, &demo.pack_skipped) {
        (Some(packed), _) => {
            text.push_str(
                "\nRelative relocations packed as DT_RELR, no relink (coldstart pack):\n",
            );
            text.push_str(&coldstart_report::pack::render(&packed.reports, false));
            if !packed.output_matches {
                text.push_str("The packed program did NOT print what the original printed.\n");
            }
        }
        (None, Some(why)) => text.push_str(&format!("\nNot packed: {why}\n")),
        (None, None) => {}
    }
    if let Some(bench) = &demo.bench {
        text.push_str("\nStartup time, warm against cold (coldstart bench):\n");
        text.push_str(&coldstart_report::bench::render(bench, Style::Plain));
    }
    text
}

/// Cold starts with the plan against plain cold and warm, per setting.
pub fn render_plan_effects(effects: &[PlanEffect]) -> String {
    if effects.is_empty() {
        return String::new();
    }
    let mut table = Table::new(&[
        ">read_ahead_kb",
        ">warm",
        ">cold",
        ">cold + plan",
        ">gap closed",
        ">cold + empty plan",
        ">read cold",
        ">read with plan",
    ]);
    let ms = |t: Option<f64>| t.map_or("-".to_string(), |t| format!("{t:.1} ms"));
    let bytes = |b: Option<f64>| b.map_or("-".to_string(), |b| human_bytes(b as u64));
    for effect in effects {
        table.row(vec![
            effect.read_ahead_kb.to_string(),
            ms(effect.warm_ms),
            ms(effect.cold_ms),
            ms(effect.with_plan_ms),
            effect
                .gap_closed()
                .map_or("-".to_string(), |g| format!("{:.0}%", g * 100.0)),
            ms(effect.launcher_only_ms),
            bytes(effect.cold_read_bytes),
            bytes(effect.with_plan_read_bytes),
        ]);
    }
    let mut out = format!(
        "  cold starts served by it, medians of {} interleaved runs a setting \
         (gap closed: (cold - with plan) / (cold - warm)):\n{}  \
         With an empty plan the start pays the launcher alone (its binary read cold, the \
         prefetcher forked) and gains nothing: a plan wins only where the start waits on the \
         disk longer than that.\n",
        crate::bench::RUNS,
        table.render(Style::Plain, "    ")
    );
    for effect in effects {
        if let (Some(cold), Some(plan), Some(launcher)) =
            (effect.cold_ms, effect.with_plan_ms, effect.launcher_only_ms)
        {
            out.push_str(&format!(
                "  At read_ahead_kb {}: the launcher alone {:+.1} ms against plain cold; the \
                 plan's reads {:+.1} ms against the launcher alone.\n",
                effect.read_ahead_kb,
                launcher - cold,
                plan - launcher
            ));
        }
    }
    out
}

/// The before/after tables.
pub fn render_order(order: &OrderLoop) -> String {
    let mut out = format!(
        "\nRelinked with {} order files ({} strategy, {} functions, {} KiB placed first; {}):\n",
        order.linker,
        order.strategy,
        order.ordered,
        order.ordered_bytes / 1024,
        order
            .order_files
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", "),
    );
    for (comparison, what) in [
        (&order.at_default, "the kernel's default"),
        (&order.at_device, "this device's setting"),
    ] {
        out.push_str(&format!(
            "  at read_ahead_kb {} ({what}):\n{}",
            comparison.before.read_ahead_kb,
            comparison_table(comparison)
        ));
    }
    out
}

fn comparison_table(c: &Comparison) -> String {
    let mut table = Table::new(&["", ">before", ">after", ">change", ">predicted after"]);
    let change = |before: f64, after: f64| {
        if before == 0.0 {
            "-".to_string()
        } else {
            format!("{:+.1}%", (after - before) / before * 100.0)
        }
    };
    let (b, a) = (&c.before, &c.after);
    table.row(vec![
        "text pages touched".into(),
        thousands(b.text_pages_touched),
        thousands(a.text_pages_touched),
        change(b.text_pages_touched as f64, a.text_pages_touched as f64),
        String::new(),
    ]);
    table.row(vec![
        "read requests".into(),
        thousands(b.read_requests),
        thousands(a.read_requests),
        change(b.read_requests as f64, a.read_requests as f64),
        String::new(),
    ]);
    table.row(vec![
        "bytes read".into(),
        human_bytes(b.bytes_read),
        human_bytes(a.bytes_read),
        change(b.bytes_read as f64, a.bytes_read as f64),
        a.predicted_bytes_read.map_or(String::new(), human_bytes),
    ]);
    if let (Some(before), Some(after)) = (b.cold_ms, a.cold_ms) {
        table.row(vec![
            "cold start (median)".into(),
            format!("{before:.1} ms"),
            format!("{after:.1} ms"),
            change(before, after),
            String::new(),
        ]);
    }
    table.render(Style::Plain, "    ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plans_effect_is_a_row_a_setting_with_its_gap_closed() {
        let at_default = PlanEffect {
            read_ahead_kb: 128,
            warm_ms: Some(11.0),
            cold_ms: Some(51.0),
            with_plan_ms: Some(21.0),
            launcher_only_ms: Some(54.0),
            cold_read_bytes: Some(8.0 * 1048576.0),
            with_plan_read_bytes: Some(3.0 * 1048576.0),
        };
        let at_device = PlanEffect {
            read_ahead_kb: 8192,
            with_plan_ms: Some(61.0),
            with_plan_read_bytes: None,
            ..at_default
        };
        let text = render_plan_effects(&[at_default, at_device]);
        let rows: Vec<Vec<&str>> = text
            .lines()
            .skip(2)
            .take(2)
            .map(|line| line.split_whitespace().collect())
            .collect();
        assert_eq!(rows[0][0], "128");
        assert_eq!(rows[0][7], "75%", "(51 - 21) / (51 - 11): {text}");
        assert_eq!(rows[1][0], "8192");
        assert_eq!(rows[1][7], "-25%", "slower than cold, said so: {text}");
        assert_eq!(rows[0][8..10], ["54.0", "ms"], "the empty plan: {text}");
        assert_eq!(rows[1].last(), Some(&"-"), "{text}");
        // 54 - 51 and 21 - 54.
        assert!(
            text.contains(
                "At read_ahead_kb 128: the launcher alone +3.0 ms against plain cold; the plan's \
                 reads -33.0 ms against the launcher alone."
            ),
            "{text}"
        );
        assert_eq!(render_plan_effects(&[]), "");
    }
}
