//! `coldstart demo`'s text report: both binaries' anatomy, the traced cold
//! start, and the order loop as before/after tables (what the relinked app
//! touched, requested and read at the kernel's default read_ahead_kb and at
//! the device's own, beside what the simulator predicted), then the bench.

use crate::table::{Table, thousands};
use coldstart_binary::human_bytes;
use coldstart_pipeline::demo::DemoReport;
use coldstart_pipeline::order::{Comparison, OrderLoop};

pub fn render(demo: &DemoReport) -> String {
    let mut text = String::new();
    for inspection in &demo.inspections {
        text.push('\n');
        text.push_str(&crate::inspect::render_summary(inspection));
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
            text.push_str(&crate::run::render(
                report,
                &crate::run::RunView {
                    style: crate::Style::Plain,
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
    }
    if let Some(order) = &demo.order {
        text.push_str(&render_order(order));
    }
    match (&demo.pack, &demo.pack_skipped) {
        (Some(packed), _) => {
            text.push_str(
                "\nRelative relocations packed as DT_RELR, no relink (coldstart pack):\n",
            );
            text.push_str(&crate::pack::render(&packed.reports, false));
            if !packed.output_matches {
                text.push_str("The packed program did NOT print what the original printed.\n");
            }
        }
        (None, Some(why)) => text.push_str(&format!("\nNot packed: {why}\n")),
        (None, None) => {}
    }
    if let Some(bench) = &demo.bench {
        text.push_str("\nStartup time, warm against cold (coldstart bench):\n");
        text.push_str(&crate::bench::render(bench, crate::Style::Plain));
    }
    text
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
    table.render(crate::Style::Plain, "    ")
}
