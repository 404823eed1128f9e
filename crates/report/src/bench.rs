//! `coldstart bench` results as a table (plain or Markdown): per variant the
//! time statistics, the ratio to the first variant, and the counts that back
//! the times up; then the environment and the warnings.

use crate::table::{Style, Table, thousands};
use coldstart_bench::{BenchResult, Variant, VariantResult};
use coldstart_binary::human_bytes;
use std::ffi::OsString;
use std::fmt::Write as _;
use std::path::Path;

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

/// The progress line of a running benchmark: each variant's median so far,
/// over the times of its counted runs (variants without one yet are left out).
pub fn running_medians(variants: &[Variant], times: &[Vec<f64>]) -> String {
    variants
        .iter()
        .zip(times)
        .filter_map(|(v, t)| {
            coldstart_bench::stats::summarize(t).map(|s| format!("{} {:.0} ms", v.name, s.median))
        })
        .collect::<Vec<_>>()
        .join(" | ")
}

/// The command as a table label: in full when short, else the program's name.
pub fn short_name(argv: &[OsString]) -> String {
    let mut words: Vec<String> = argv
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    if let Some(first) = words.first_mut()
        && let Some(base) = Path::new(first.as_str()).file_name()
    {
        *first = base.to_string_lossy().into_owned();
    }
    let text = words.join(" ");
    if text.chars().count() <= 32 || words.len() < 2 {
        text
    } else {
        format!("{} …", words[0])
    }
}

/// Labels for the commands: --name, else short names, made unique by their
/// position when two commands would read the same.
pub fn command_labels(names: &[String], argvs: &[Vec<OsString>]) -> Vec<String> {
    let labels: Vec<String> = argvs
        .iter()
        .enumerate()
        .map(|(i, argv)| names.get(i).cloned().unwrap_or_else(|| short_name(argv)))
        .collect();
    labels
        .iter()
        .enumerate()
        .map(|(i, label)| {
            let repeated = labels.iter().filter(|l| *l == label).count() > 1;
            if repeated && names.get(i).is_none() {
                format!("{label} #{}", i + 1)
            } else {
                label.clone()
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use coldstart_profile::CacheMode;

    #[test]
    fn running_medians_name_each_variant_with_runs_so_far() {
        let variant = |name: &str| Variant {
            name: name.into(),
            command: 0,
            cache: CacheMode::Warm,
        };
        let variants = [variant("a"), variant("b"), variant("c")];
        // Medians by hand: 30, 10, 20 -> 20; none yet; 4, 8 -> 6.
        let times = [vec![30.0, 10.0, 20.0], vec![], vec![4.0, 8.0]];
        assert_eq!(running_medians(&variants, &times), "a 20 ms | c 6 ms");
    }

    #[test]
    fn commands_are_labelled_by_name_or_short_form_and_kept_apart() {
        let argv = |words: &[&str]| words.iter().map(OsString::from).collect::<Vec<_>>();
        let long = argv(&[
            "/usr/bin/firefox-esr",
            "--headless",
            "--screenshot",
            "/tmp/x.png",
        ]);
        // 46 characters with the directory dropped, over 32: the program's name stays.
        assert_eq!(short_name(&long), "firefox-esr …");
        assert_eq!(short_name(&argv(&["./app", "--quit"])), "app --quit");
        let argvs = [argv(&["./app"]), argv(&["/other/app"]), argv(&["./app"])];
        assert_eq!(command_labels(&[], &argvs), ["app #1", "app #2", "app #3"]);
        // A name given is kept as given; only unnamed repeats get a number.
        assert_eq!(
            command_labels(&["app".to_string()], &argvs),
            ["app", "app #2", "app #3"]
        );
    }
}
