//! `coldstart report`: analyse one run of a profile and print it as text,
//! Markdown or JSON, and write the charts asked for.

use crate::args::ReportArgs;
use crate::output;
use anyhow::Context;
use coldstart_analyze as analyze;
use coldstart_profile::Profile;
use coldstart_report::run::RunView;
use std::process::ExitCode;

pub fn run(args: &ReportArgs) -> anyhow::Result<ExitCode> {
    let file = args
        .file
        .as_deref()
        .map(|glob| {
            globset::GlobBuilder::new(glob)
                .literal_separator(false)
                .build()
                .map(|g| g.compile_matcher())
                .with_context(|| format!("--file {glob:?} is not a valid glob"))
        })
        .transpose()?;
    let profile = Profile::open(&args.profile)?;
    let (report, timeline) = analyze::analyze(
        &profile,
        &analyze::Options {
            run: args.run,
            file,
            pages: args.pages,
            attribute: !args.no_attribution,
        },
    )?;
    let options = coldstart_report::chart::ChartOptions::default();
    if let Some(path) = &args.svg {
        std::fs::write(path, coldstart_report::chart::svg(&timeline, &options))
            .with_context(|| format!("cannot write {}", path.display()))?;
        output::step(&format!("chart written to {}", path.display()));
    }
    if let Some(path) = &args.html {
        std::fs::write(
            path,
            coldstart_report::html::html(&report, &timeline, &options),
        )
        .with_context(|| format!("cannot write {}", path.display()))?;
        output::step(&format!("report page written to {}", path.display()));
    }
    if let Some(path) = &args.perfetto {
        std::fs::write(
            path,
            coldstart_report::perfetto::perfetto_json(&report, &timeline),
        )
        .with_context(|| format!("cannot write {}", path.display()))?;
        output::step(&format!(
            "timeline written to {} (open it in https://ui.perfetto.dev)",
            path.display()
        ));
    }
    if args.format.json {
        output::print_json(&report)?;
    } else {
        let view = RunView {
            style: args.format.style(),
            files: args.top.0,
            symbols: args.symbols.0,
            pages: args.pages,
        };
        output::print_text(&coldstart_report::run::render(&report, &view))?;
    }
    Ok(ExitCode::SUCCESS)
}
