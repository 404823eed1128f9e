//! `coldstart report`: analyse one run of a profile and print it as text,
//! Markdown or JSON, and write the charts asked for.

use crate::args::ReportArgs;
use crate::output;
use anyhow::Context;
use coldstart_analyze as analyze;
use coldstart_analyze::loaded::LoadedRun;
use coldstart_plan::floor::{Device, Floor};
use coldstart_plan::misses::{MissAccount, account, account_without_plan};
use coldstart_plan::served::{ServingPlan, serving_plan};
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
    let loaded = LoadedRun::load(&profile, Some(report.run.id))?;
    let (plan, misses) = match serving_plan(&loaded, args.plan.as_deref())? {
        ServingPlan::Plan(plan) => {
            let misses = account(&loaded, &plan);
            (Some(plan), Some(misses))
        }
        ServingPlan::None => (None, None),
        ServingPlan::NotRecorded { by_service } => {
            output::step(&format!(
                "coldstart report: run {} was served by {}, and the profile does not record the plan; \
                 its misses are accounted without it (give the plan with --plan for every reason)",
                loaded.id(),
                if by_service {
                    "the system-wide service"
                } else {
                    "a prefetcher whose command line names no plan"
                }
            ));
            (None, Some(account_without_plan(&loaded)))
        }
        ServingPlan::Unreadable { path, source } => {
            output::step(&format!(
                "coldstart report: run {} was served by the plan {}, which cannot be read now ({source}); \
                 its misses are accounted without it (give the plan with --plan for every reason)",
                loaded.id(),
                path.display()
            ));
            (None, Some(account_without_plan(&loaded)))
        }
    };
    let floor = match (&plan, args.bandwidth_mb_s, args.request_us) {
        (Some(plan), Some(mb_s), Some(us)) => {
            if !(mb_s > 0.0 && mb_s.is_finite() && us >= 0.0 && us.is_finite()) {
                anyhow::bail!("--bandwidth-mb-s must be above 0 and --request-us at least 0");
            }
            let device = Device {
                bandwidth_bytes_s: mb_s * 1e6,
                request_s: us / 1e6,
            };
            Some(coldstart_plan::floor::predict(plan, &loaded, device))
        }
        _ => None,
    };
    if args.format.json {
        output::print_json(&WithMisses {
            report: &report,
            misses: misses.as_ref(),
            floor: floor.as_ref(),
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
        if let Some(floor) = &floor {
            text.push('\n');
            text.push_str(&coldstart_report::misses::render_floor(floor));
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
    /// With --bandwidth-mb-s and --request-us.
    #[serde(skip_serializing_if = "Option::is_none")]
    floor: Option<&'a Floor>,
}
