//! `coldstart report`: analyse one run of a profile and print it as text,
//! Markdown or JSON, and write the charts asked for.

use crate::args::ReportArgs;
use crate::output;
use anyhow::Context;
use coldstart_analyze as analyze;
use coldstart_analyze::loaded::LoadedRun;
use coldstart_plan::misses::{MissAccount, account, plan_of_run, prefetcher_tasks};
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
    let misses = misses(&profile, report.run.id, args)?;
    if args.format.json {
        output::print_json(&WithMisses {
            report: &report,
            misses: misses.as_ref(),
        })?;
    } else {
        let view = RunView {
            style: args.format.style(),
            files: args.top.0,
            symbols: args.symbols.0,
            pages: args.pages,
        };
        let mut text = coldstart_report::run::render(&report, &view);
        if let Some(account) = &misses {
            text.push('\n');
            text.push_str(&coldstart_report::misses::render(
                account,
                args.top.0.unwrap_or(usize::MAX),
            ));
        }
        output::print_text(&text)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The report's JSON, with the miss accounting when there is one.
#[derive(serde::Serialize)]
struct WithMisses<'a> {
    #[serde(flatten)]
    report: &'a analyze::RunReport,
    misses: Option<&'a MissAccount>,
}

/// The run's reads against its plan: the one given, else the one its
/// command line names when the run was served by a prefetcher.
fn misses(
    profile: &Profile,
    run: coldstart_profile::RunId,
    args: &ReportArgs,
) -> anyhow::Result<Option<MissAccount>> {
    let loaded = LoadedRun::load(profile, Some(run))?;
    let served = !prefetcher_tasks(&loaded).is_empty();
    let path = match &args.plan {
        Some(path) => path.clone(),
        None if served => match plan_of_run(&loaded.run) {
            Some(path) => path,
            None => return Ok(None),
        },
        None => return Ok(None),
    };
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if args.plan.is_none() => {
            output::step(&format!(
                "coldstart report: run {run} was served by the plan {}, which cannot be read now ({e}); \
                 give the plan with --plan for the miss accounting",
                path.display()
            ));
            return Ok(None);
        }
        Err(e) => {
            return Err(e).with_context(|| format!("cannot read the plan {}", path.display()));
        }
    };
    let plan = coldstart_prefetch::format::parse(&text, &path)?;
    Ok(Some(account(&loaded, &plan)))
}
