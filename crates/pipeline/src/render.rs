//! `coldstart demo`'s text: the summary (a screen: what the cold start
//! reads, what each fix changed with its interval, where to look next), and
//! the full report, composed of the report room's renderers and tables: the
//! binaries' anatomy, the traced cold start, and the order loop as
//! before/after tables (what the relinked app touched, requested and read
//! at the kernel's default read_ahead_kb and at the device's own, beside
//! what the simulator predicted), then the bench.

use crate::bench::PlanEffect;
use crate::demo::DemoReport;
use crate::order::{Comparison, OrderLoop};
use crate::summary::{DemoSummary, Estimate, Reads, Setting};
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
    if let Some(bench) = &demo.bench_at_default {
        text.push_str(&format!(
            "\nStartup time at read_ahead_kb {}, the kernel's default (coldstart bench):\n",
            crate::order::KERNEL_DEFAULT_READ_AHEAD_KB
        ));
        text.push_str(&coldstart_report::bench::render(bench, Style::Plain));
    }
    text
}

/// The summary: a screen or less, at most 100 columns but for long paths.
pub fn render_summary(summary: &DemoSummary) -> String {
    let app = &summary.app;
    let mut out = format!(
        "Sample app: {} translation units, {} functions, built in {:.1} s; its start calls {}.\n",
        app.translation_units, app.functions, app.build_seconds, app.startup_calls
    );
    match &summary.reads {
        Some(reads) => out.push_str(&render_reads(reads)),
        None => out
            .push_str("Its cold start was not traced: tracing needs root (sudo coldstart demo).\n"),
    }
    out.push_str(&render_settings(summary));
    out.push_str(&render_fixes(summary));
    out.push_str(&render_next(summary));
    out
}

/// What the traced start read against what it used, and where.
fn render_reads(reads: &Reads) -> String {
    let setting = reads
        .read_ahead_kb
        .map_or("the device's readahead".to_string(), |kb| {
            format!("read_ahead_kb {kb}")
        });
    let ready = reads
        .ready_ms
        .map_or(String::new(), |ms| format!(", ready in {ms:.1} ms"));
    let used = if reads.bytes_touched > 0 {
        format!(
            "{:.1}x the {} it uses",
            reads.bytes_read as f64 / reads.bytes_touched as f64,
            human_bytes(reads.bytes_touched)
        )
    } else {
        "none of which it uses".to_string()
    };
    let mut out = format!(
        "Its cold start ({setting}{ready}) reads {} from {} files:\n\
         {used} (what it reads with readahead off). Most read:\n",
        human_bytes(reads.bytes_read),
        reads.files,
    );
    for file in &reads.top_files {
        let name = if file.path.starts_with('/') {
            std::path::Path::new(&file.path)
                .file_name()
                .map_or(file.path.clone(), |n| n.to_string_lossy().into_owned())
        } else {
            file.path.clone()
        };
        let used = if file.kind == "file" {
            format!(" ({} used)", human_bytes(file.bytes_touched))
        } else {
            String::new()
        };
        out.push_str(&format!(
            "  {:>10}  {name}{used}\n",
            human_bytes(file.bytes_read)
        ));
    }
    // As many sections as fit on the line.
    let mut line = "  Read, never used:".to_string();
    for (i, section) in reads.untouched_sections.iter().enumerate() {
        let item = format!(
            "{} {} {}",
            if i == 0 { "" } else { "," },
            section.name,
            human_bytes(section.bytes_read - section.bytes_touched)
        );
        if line.len() + item.len() > 100 {
            break;
        }
        line.push_str(&item);
    }
    if !reads.untouched_sections.is_empty() {
        out.push_str(&line);
        out.push('\n');
    }
    out
}

/// "read_ahead_kb 128", padded to line up the settings' figures.
fn setting_label(setting: &Setting) -> String {
    let label = setting
        .read_ahead_kb
        .map_or("device setting".to_string(), |kb| {
            format!("read_ahead_kb {kb}")
        });
    format!("  {label:<20}")
}

/// Milliseconds and an interval: "31.7 ms [28.0, 35.1]".
fn ms_with_interval(estimate: &Estimate) -> String {
    match estimate.ci95 {
        Some((low, high)) => format!("{:.1} ms [{low:.1}, {high:.1}]", estimate.median),
        None => format!("{:.1} ms", estimate.median),
    }
}

/// A change and its interval, said plainly when the interval holds zero:
/// "+2.8 ms [-1.0, +6.0], within the noise", "-12% [-40%, +20%]".
fn change(estimate: &Estimate, unit: Unit) -> String {
    let (scale, decimals, after, within) = match unit {
        Unit::Ms => (1.0, 1, " ms", ""),
        Unit::Percent => (100.0, 0, "%", "%"),
    };
    let value = |v: f64, unit: &str| format!("{:+.*}{unit}", decimals, v * scale);
    let interval = match estimate.ci95 {
        Some((low, high)) => format!(" [{}, {}]", value(low, within), value(high, within)),
        None => " (no interval)".to_string(),
    };
    let noise = match estimate.within_noise() {
        Some(true) => ", within the noise",
        _ => "",
    };
    format!("{}{interval}{noise}", value(estimate.median, after))
}

#[derive(Clone, Copy)]
enum Unit {
    Ms,
    Percent,
}

/// Cold against warm at each setting.
fn render_settings(summary: &DemoSummary) -> String {
    let Some(first) = summary.settings.first() else {
        return "Not timed.\n".to_string();
    };
    let mut out = if first.cache == "cold" {
        format!(
            "\nCold start against warm, medians of {} interleaved runs [95% interval]:\n",
            summary.runs
        )
    } else {
        format!(
            "\nStart with its own files evicted ({}; a cold start needs root) against warm,\n\
             medians of {} interleaved runs [95% interval]:\n",
            first.cache, summary.runs
        )
    };
    for setting in &summary.settings {
        let (Some(cold), Some(warm)) = (&setting.cold_ms, &setting.warm_ms) else {
            out.push_str(&format!("{}not timed\n", setting_label(setting)));
            continue;
        };
        let ratio = setting
            .cold_warm_ratio
            .as_ref()
            .map_or(String::new(), |r| match r.ci95 {
                Some((low, high)) => format!(": {:.1}x [{low:.1}, {high:.1}]", r.median),
                None => format!(": {:.1}x", r.median),
            });
        out.push_str(&format!(
            "{}{} {}, warm {:.1} ms{ratio}{}\n",
            setting_label(setting),
            setting.cache,
            ms_with_interval(cold),
            warm.median,
            if setting.device { " (this device)" } else { "" }
        ));
    }
    out
}

/// Each fix: what it changed, per setting, with its interval.
fn render_fixes(summary: &DemoSummary) -> String {
    let settings = &summary.settings;
    let mut out = "\n".to_string();
    let per_setting = |out: &mut String, line: &dyn Fn(&Setting) -> Option<String>| {
        for setting in settings {
            if let Some(text) = line(setting) {
                out.push_str(&format!("{}{text}\n", setting_label(setting)));
            }
        }
    };
    if settings.iter().any(|s| s.with_plan_ms.is_some()) {
        out.push_str("Prefetch plan, share of the cold-warm gap it closes:\n");
        per_setting(&mut out, &|s| {
            s.with_plan_ms.map(|plan| match &s.plan_gap_closed {
                Some(gap) => change(gap, Unit::Percent),
                None => format!(
                    "none to close: cold was not slower than warm (with the plan {:.1} ms)",
                    plan.median
                ),
            })
        });
        let launcher = &summary.launcher;
        out.push_str(&if launcher.coldstart_run {
            "Launcher alone (coldstart-run, empty plan), added to a plain cold start:\n".to_string()
        } else {
            "Launcher alone (`coldstart run`: coldstart-run was not available), added to a plain \
             cold start:\n"
                .to_string()
        });
        per_setting(&mut out, &|s| {
            s.launcher_alone_ms.map(|cost| change(&cost, Unit::Ms))
        });
    } else {
        out.push_str(
            "Not measured without root: the prefetch plan, the launcher's cost, the relinked \
             build.\n",
        );
    }
    if let Some(pages) = &summary.relink {
        let (before, after) = (
            pages.text_pages_touched_before,
            pages.text_pages_touched_after,
        );
        let share = if before > 0 {
            format!(
                " ({:+.0}%)",
                (after as f64 - before as f64) / before as f64 * 100.0
            )
        } else {
            String::new()
        };
        out.push_str(&format!(
            "Relinked with its order files: text pages touched {} -> {}{share}; cold start:\n",
            thousands(before),
            thousands(after)
        ));
        per_setting(&mut out, &|s| {
            before_after(s.cache, s.cold_ms, s.relinked_cold_ms, s.relink_change_ms)
        });
    }
    if let Some(pack) = &summary.pack {
        out.push_str(&format!(
            "Packed relocations (DT_RELR): the loader's tables {} -> {}, on {} -> {} pages{}\n",
            human_bytes(pack.table_bytes_before),
            human_bytes(pack.table_bytes_after),
            thousands(pack.loader_pages_before),
            thousands(pack.loader_pages_after),
            if pack.output_matches {
                ";"
            } else {
                "; the packed app did NOT print what the original printed;"
            }
        ));
        per_setting(&mut out, &|s| {
            before_after(s.cache, s.cold_ms, s.packed_cold_ms, s.pack_change_ms)
        });
    }
    out
}

/// "31.4 -> 30.4 ms, -1.0 ms [-3.0, +1.0], within the noise", when timed.
fn before_after(
    cache: &str,
    before: Option<Estimate>,
    after: Option<Estimate>,
    change_ms: Option<Estimate>,
) -> Option<String> {
    let (before, after) = (before?, after?);
    let change_ms = change_ms.map_or(String::new(), |c| format!(": {}", change(&c, Unit::Ms)));
    Some(format!(
        "{cache} {:.1} -> {:.1} ms{change_ms}",
        before.median, after.median
    ))
}

/// Where to look next.
fn render_next(summary: &DemoSummary) -> String {
    let files = &summary.files;
    let mut out = "\nWhere to look next:\n".to_string();
    let mut row = |what: &str, text: String| out.push_str(&format!("  {what:<14} {text}\n"));
    if let Some(page) = &files.report_page {
        row("report page", page.display().to_string());
    }
    if let Some(plan) = &files.plan {
        row("prefetch plan", plan.display().to_string());
    }
    match files.order_files.as_slice() {
        [] => {}
        [one] => row("order file", one.display().to_string()),
        [a, b] => row("order files", format!("{}, {}", a.display(), b.display())),
        [first, rest @ ..] => row(
            "order files",
            format!(
                "{} files: {} and {} more beside it",
                rest.len() + 1,
                first.display(),
                rest.len()
            ),
        ),
    }
    row(
        "full detail",
        format!("{} (--verbose prints it too)", files.detail.display()),
    );
    out
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
    use crate::summary::{App, FileReads, Files, Launcher, PackTables, RelinkPages, SectionReads};
    use std::path::PathBuf;

    const MIB: u64 = 1 << 20;

    fn estimate(median: f64, ci95: Option<(f64, f64)>) -> Option<Estimate> {
        Some(Estimate { median, ci95 })
    }

    /// A setting that timed nothing, for the tests to fill in.
    fn untimed(read_ahead_kb: u64, device: bool, cache: &'static str) -> Setting {
        Setting {
            read_ahead_kb: Some(read_ahead_kb),
            device,
            cache,
            warm_ms: None,
            cold_ms: None,
            cold_warm_ratio: None,
            with_plan_ms: None,
            plan_gap_closed: None,
            launcher_alone_ms: None,
            relinked_cold_ms: None,
            relink_change_ms: None,
            packed_cold_ms: None,
            pack_change_ms: None,
            cold_read_bytes: None,
            packed_cold_read_bytes: None,
        }
    }

    fn app() -> App {
        App {
            translation_units: 400,
            functions: 20000,
            startup_calls: 1000,
            build_seconds: 61.24,
        }
    }

    fn pack() -> PackTables {
        PackTables {
            table_bytes_before: 3 * MIB,
            table_bytes_after: 96 * 1024,
            loader_pages_before: 768,
            loader_pages_after: 24,
            output_matches: true,
        }
    }

    /// A demo run as root at read_ahead_kb 128 and 8192.
    fn as_root() -> DemoSummary {
        DemoSummary {
            app: app(),
            runs: 10,
            launcher: Launcher {
                path: PathBuf::from("/opt/coldstart/coldstart-run"),
                coldstart_run: true,
                note: None,
            },
            reads: Some(Reads {
                read_ahead_kb: Some(8192),
                ready_ms: Some(412.34),
                files: 31,
                read_requests: 1234,
                bytes_read: 40 * MIB,
                bytes_touched: 10 * MIB,
                top_files: vec![
                    FileReads {
                        path: "/demo/build/libcssample00.so".into(),
                        kind: "file",
                        bytes_read: 20 * MIB,
                        bytes_touched: 5 * MIB,
                    },
                    FileReads {
                        path: "[ext4 metadata on /dev/vda (mounted at /)]".into(),
                        kind: "metadata",
                        bytes_read: 2 * MIB,
                        bytes_touched: 2 * MIB,
                    },
                ],
                untouched_sections: [
                    ".text",
                    ".gcc_except_table",
                    ".a_section_with_a_name_too_long_to_fit",
                ]
                .into_iter()
                .map(|name| SectionReads {
                    name: name.into(),
                    bytes_read: 14 * MIB,
                    bytes_touched: 2 * MIB,
                })
                .collect(),
            }),
            settings: vec![
                Setting {
                    warm_ms: estimate(10.0, Some((9.5, 11.0))),
                    cold_ms: estimate(60.0, Some((55.0, 66.0))),
                    cold_warm_ratio: estimate(6.0, Some((5.2, 6.9))),
                    with_plan_ms: estimate(20.0, Some((18.0, 23.0))),
                    plan_gap_closed: estimate(0.8, Some((0.7, 0.9))),
                    launcher_alone_ms: estimate(1.2, Some((-0.5, 2.9))),
                    relinked_cold_ms: estimate(45.0, Some((41.0, 50.0))),
                    relink_change_ms: estimate(-15.0, Some((-20.0, -10.0))),
                    ..untimed(128, false, "cold")
                },
                Setting {
                    warm_ms: estimate(10.0, Some((9.0, 12.0))),
                    cold_ms: estimate(30.0, None),
                    cold_warm_ratio: estimate(3.0, None),
                    with_plan_ms: estimate(33.8, Some((25.0, 41.0))),
                    plan_gap_closed: estimate(-0.19, Some((-0.5, 0.1))),
                    launcher_alone_ms: estimate(3.0, Some((2.0, 4.0))),
                    relinked_cold_ms: estimate(29.0, Some((26.0, 33.0))),
                    relink_change_ms: estimate(-1.0, None),
                    packed_cold_ms: estimate(28.0, Some((26.0, 31.0))),
                    pack_change_ms: estimate(-2.0, Some((-4.5, 0.4))),
                    ..untimed(8192, true, "cold")
                },
            ],
            relink: Some(RelinkPages {
                text_pages_touched_before: 1500,
                text_pages_touched_after: 420,
            }),
            pack: Some(pack()),
            files: Files {
                report_page: Some("demo/demo-trace.html".into()),
                plan: Some("demo/demo.plan".into()),
                order_files: (0..25)
                    .map(|i| PathBuf::from(format!("demo/lib{i:02}.so.order")))
                    .collect(),
                detail: "demo/demo-report.txt".into(),
            },
        }
    }

    /// A demo run without root: selective-cold at the device's setting.
    fn without_root() -> DemoSummary {
        DemoSummary {
            launcher: Launcher {
                path: PathBuf::from("/opt/coldstart/coldstart"),
                coldstart_run: false,
                note: Some("coldstart-run is not beside /opt/coldstart/coldstart".into()),
            },
            reads: None,
            settings: vec![Setting {
                warm_ms: estimate(4.0, Some((3.9, 4.4))),
                cold_ms: estimate(12.0, Some((11.0, 13.5))),
                cold_warm_ratio: estimate(3.0, Some((2.6, 3.4))),
                packed_cold_ms: estimate(11.5, Some((10.0, 13.0))),
                pack_change_ms: estimate(-0.5, Some((-1.5, 0.5))),
                ..untimed(8192, true, "selective")
            }],
            relink: None,
            files: Files {
                report_page: None,
                plan: None,
                order_files: Vec::new(),
                detail: "demo/demo-report.txt".into(),
            },
            ..as_root()
        }
    }

    /// The whole report around `summary`, as the demo prints it with --json.
    fn report(summary: DemoSummary) -> DemoReport {
        DemoReport {
            spec: coldstart_sample::SampleSpec::tiny(),
            source_dir: "demo/src".into(),
            executable: "demo/build/cssample".into(),
            library: "demo/build/libcssample.so".into(),
            functions: summary.app.functions,
            startup_calls: summary.app.startup_calls,
            static_initializers: 6,
            build_seconds: summary.app.build_seconds,
            startup_output: "READY".into(),
            inspections: Vec::new(),
            trace: None,
            trace_skipped: None,
            chart: None,
            html: None,
            profile: None,
            plan: None,
            plan_effects: Vec::new(),
            plan_path: None,
            bench: None,
            bench_at_default: None,
            order: None,
            order_skipped: None,
            pack: None,
            pack_skipped: None,
            before: None,
            after: None,
            summary,
        }
    }

    fn fits_a_screen(text: &str) {
        assert!(text.lines().count() <= 30, "{text}");
        for line in text.lines() {
            assert!(
                line.chars().count() <= 100,
                "{} columns: {line}",
                line.len()
            );
        }
    }

    #[test]
    fn the_summary_says_what_each_fix_changed_and_when_it_is_within_the_noise() {
        let demo = report(as_root());
        let text = render_summary(&demo.summary);
        fits_a_screen(&text);
        let lines: Vec<&str> = text.lines().collect();
        for expected in [
            "Sample app: 400 translation units, 20000 functions, built in 61.2 s; its start calls 1000.",
            "Its cold start (read_ahead_kb 8192, ready in 412.3 ms) reads 40.0 MiB from 31 files:",
            "4.0x the 10.0 MiB it uses (what it reads with readahead off). Most read:",
            "    20.0 MiB  libcssample00.so (5.0 MiB used)",
            "     2.0 MiB  [ext4 metadata on /dev/vda (mounted at /)]",
            "  Read, never used: .text 12.0 MiB, .gcc_except_table 12.0 MiB",
            "Cold start against warm, medians of 10 interleaved runs [95% interval]:",
            "  read_ahead_kb 128   cold 60.0 ms [55.0, 66.0], warm 10.0 ms: 6.0x [5.2, 6.9]",
            "  read_ahead_kb 8192  cold 30.0 ms, warm 10.0 ms: 3.0x (this device)",
            "Prefetch plan, share of the cold-warm gap it closes:",
            "  read_ahead_kb 128   +80% [+70%, +90%]",
            "  read_ahead_kb 8192  -19% [-50%, +10%], within the noise",
            "Launcher alone (coldstart-run, empty plan), added to a plain cold start:",
            "  read_ahead_kb 128   +1.2 ms [-0.5, +2.9], within the noise",
            "  read_ahead_kb 8192  +3.0 ms [+2.0, +4.0]",
            "Relinked with its order files: text pages touched 1,500 -> 420 (-72%); cold start:",
            "  read_ahead_kb 128   cold 60.0 -> 45.0 ms: -15.0 ms [-20.0, -10.0]",
            "  read_ahead_kb 8192  cold 30.0 -> 29.0 ms: -1.0 ms (no interval)",
            "Packed relocations (DT_RELR): the loader's tables 3.0 MiB -> 96.0 KiB, on 768 -> 24 pages;",
            "  read_ahead_kb 8192  cold 30.0 -> 28.0 ms: -2.0 ms [-4.5, +0.4], within the noise",
            "  report page    demo/demo-trace.html",
            "  prefetch plan  demo/demo.plan",
            "  order files    25 files: demo/lib00.so.order and 24 more beside it",
            "  full detail    demo/demo-report.txt (--verbose prints it too)",
        ] {
            assert!(lines.contains(&expected), "no line {expected:?} in\n{text}");
        }
        // The packed build was timed at the device's setting only.
        assert!(
            !text.contains("read_ahead_kb 128   cold 60.0 -> 28.0"),
            "{text}"
        );
    }

    #[test]
    fn without_root_the_summary_says_what_was_not_measured() {
        let text = render_summary(&without_root());
        fits_a_screen(&text);
        let lines: Vec<&str> = text.lines().collect();
        for expected in [
            "Its cold start was not traced: tracing needs root (sudo coldstart demo).",
            "Start with its own files evicted (selective; a cold start needs root) against warm,",
            "  read_ahead_kb 8192  selective 12.0 ms [11.0, 13.5], warm 4.0 ms: 3.0x [2.6, 3.4] (this device)",
            "Not measured without root: the prefetch plan, the launcher's cost, the relinked build.",
            "  read_ahead_kb 8192  selective 12.0 -> 11.5 ms: -0.5 ms [-1.5, +0.5], within the noise",
            "  full detail    demo/demo-report.txt (--verbose prints it too)",
        ] {
            assert!(lines.contains(&expected), "no line {expected:?} in\n{text}");
        }
        for absent in [
            "Prefetch plan",
            "Launcher alone",
            "Relinked",
            "report page",
            "order file",
        ] {
            assert!(!text.contains(absent), "{absent:?} in\n{text}");
        }
    }

    #[test]
    fn the_json_summary_carries_each_figure_or_null_where_it_was_not_measured() {
        let json = serde_json::to_value(report(as_root())).unwrap();
        // What --json had before the summary is all still there.
        for key in [
            "spec",
            "inspections",
            "trace",
            "plan_effects",
            "bench",
            "order",
            "pack",
        ] {
            assert!(json.get(key).is_some(), "{key}");
        }
        let summary = &json["summary"];
        let at_default = &summary["settings"][0];
        assert_eq!(at_default["read_ahead_kb"], 128);
        assert_eq!(at_default["device"], false);
        assert_eq!(at_default["cold_warm_ratio"]["median"], 6.0);
        assert_eq!(
            at_default["cold_warm_ratio"]["ci95"],
            serde_json::json!([5.2, 6.9])
        );
        assert_eq!(at_default["plan_gap_closed"]["median"], 0.8);
        assert_eq!(
            at_default["launcher_alone_ms"]["ci95"],
            serde_json::json!([-0.5, 2.9])
        );
        assert_eq!(at_default["relink_change_ms"]["median"], -15.0);
        assert!(at_default["packed_cold_ms"].is_null());
        let at_device = &summary["settings"][1];
        assert_eq!(at_device["read_ahead_kb"], 8192);
        assert_eq!(at_device["device"], true);
        assert!(at_device["cold_ms"]["ci95"].is_null());
        assert_eq!(at_device["pack_change_ms"]["median"], -2.0);
        assert_eq!(summary["relink"]["text_pages_touched_before"], 1500);
        assert_eq!(summary["relink"]["text_pages_touched_after"], 420);
        assert_eq!(summary["pack"]["table_bytes_before"], 3 * MIB);
        assert_eq!(summary["pack"]["loader_pages_after"], 24);
        assert_eq!(summary["launcher"]["coldstart_run"], true);
        assert!(summary["launcher"]["note"].is_null());
        assert_eq!(summary["reads"]["bytes_touched"], 10 * MIB);
        assert_eq!(summary["reads"]["top_files"][1]["kind"], "metadata");
        assert_eq!(
            summary["files"]["order_files"].as_array().unwrap().len(),
            25
        );
        assert_eq!(summary["runs"], 10);

        let json = serde_json::to_value(report(without_root())).unwrap();
        let summary = &json["summary"];
        assert!(summary["reads"].is_null());
        assert!(summary["relink"].is_null());
        assert_eq!(summary["launcher"]["coldstart_run"], false);
        let only = summary["settings"].as_array().unwrap();
        assert_eq!(only.len(), 1);
        assert_eq!(only[0]["cache"], "selective");
        for unmeasured in [
            "plan_gap_closed",
            "launcher_alone_ms",
            "with_plan_ms",
            "relinked_cold_ms",
        ] {
            assert!(only[0][unmeasured].is_null(), "{unmeasured}");
        }
        assert!(summary["files"]["report_page"].is_null());
    }

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
