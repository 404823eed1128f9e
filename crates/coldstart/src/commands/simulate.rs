//! `coldstart simulate`: replay a traced run through the readahead model
//! for another read_ahead_kb or another layout, and print the prediction.

use crate::args::SimulateArgs;
use crate::output;
use anyhow::{Context, bail};
use coldstart_analyze::relayout::Relayout;
use coldstart_analyze::{SimulateOptions, simulate};
use coldstart_binary::OffsetIndex;
use coldstart_layout::traced;
use coldstart_profile::Profile;
use coldstart_report::Style;
use std::process::ExitCode;

pub fn run(args: &SimulateArgs) -> anyhow::Result<ExitCode> {
    let profile = Profile::open(&args.profile)?;
    let file = args
        .binary
        .as_deref()
        .map(|pattern| {
            // A plain path matches itself and any traced path ending in it.
            let glob = if pattern.contains(['*', '?', '[']) || pattern.starts_with('/') {
                pattern.to_string()
            } else {
                format!("*{pattern}")
            };
            globset::GlobBuilder::new(&glob)
                .literal_separator(false)
                .build()
                .map(|g| g.compile_matcher())
                .with_context(|| format!("--binary {pattern:?} is not a valid glob"))
        })
        .transpose()?;
    let mut relayouts = Vec::new();
    if let (Some(order), Some(binary)) = (&args.order, &args.binary) {
        let names = coldstart_layout::read_order_file(order)?;
        let traced = traced_path(&profile, args.run, file.as_ref(), binary)?;
        let index = OffsetIndex::from_path(traced.as_ref())
            .with_context(|| format!("reading the symbols of {traced}"))?;
        let mut relayout = Relayout::new(&traced, &index, &names);
        if let Some(run) = args.functions_run {
            let module = traced::module_glob(traced.as_ref(), None)?;
            let called = traced::called_functions(&profile, run, &index, &module)?;
            if called.is_empty() {
                bail!(
                    "run {run} of {} recorded no function of {traced} (was it traced with \
                     --functions from an instrumented build of it?)",
                    args.profile.display()
                );
            }
            relayout = relayout.with_functions(called);
        }
        if relayout.summary.placed == 0 {
            bail!(
                "none of the {} names in {} is a sized symbol of {traced} (first: {})",
                names.len(),
                order.display(),
                names.first().map_or("none", String::as_str)
            );
        }
        if relayout.summary.missing > 0 {
            output::step(&format!(
                "{} of {} names in {} are not symbols of {traced} and stay unordered (e.g. {})",
                relayout.summary.missing,
                relayout.summary.ordered,
                order.display(),
                relayout.summary.missing_examples.join(", ")
            ));
        }
        relayouts.push(relayout);
    }
    let report = simulate(
        &profile,
        &SimulateOptions {
            run: args.run,
            read_ahead_kb: args.read_ahead_kb,
            fault_around_bytes: args.fault_around_kb.map(|kb| kb * 1024),
            file,
            against: args.against,
            relayouts,
        },
    )?;
    if args.format.json {
        output::print_json(&report)?;
    } else {
        let style = if args.format.markdown {
            Style::Markdown
        } else {
            Style::Plain
        };
        output::print_text(&coldstart_report::simulate::render(
            &report,
            style,
            args.top.0.unwrap_or(usize::MAX),
        ))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The one traced file --binary names, as the profile spells its path.
fn traced_path(
    profile: &Profile,
    run: Option<i64>,
    glob: Option<&globset::GlobMatcher>,
    binary: &str,
) -> anyhow::Result<String> {
    // The run the simulation replays, so the path is the one it sees.
    let run = match run {
        Some(id) => profile.run(Some(id))?,
        None => coldstart_analyze::simulate::default_source(profile)?,
    };
    let paths: Vec<String> = profile
        .files(run.id)?
        .into_iter()
        .filter_map(|f| f.path)
        .filter(|p| glob.is_some_and(|g| g.is_match(p)))
        .collect();
    match paths.as_slice() {
        [one] => Ok(one.clone()),
        [] => bail!(
            "run {} of {} has no file matching --binary {binary:?}",
            run.id,
            profile.path().display()
        ),
        many => bail!(
            "--binary {binary:?} matches {} files of run {} ({}); give a longer path",
            many.len(),
            run.id,
            many.iter().take(3).cloned().collect::<Vec<_>>().join(", ")
        ),
    }
}
