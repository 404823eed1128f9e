//! `coldstart runs`: the runs a profile holds.

use crate::args::RunsArgs;
use crate::output;
use coldstart_profile::Profile;
use coldstart_report::{Style, run::render_runs};
use std::process::ExitCode;

pub fn run(args: &RunsArgs) -> anyhow::Result<ExitCode> {
    let profile = Profile::open(&args.profile)?;
    let runs = profile.runs()?;
    if args.json {
        output::print_json(&serde_json::json!({ "profile": args.profile, "runs": runs }))?;
    } else if runs.is_empty() {
        output::print_text(&format!("{}: no runs yet\n", args.profile.display()))?;
    } else {
        output::print_text(&render_runs(&runs, Style::Plain))?;
    }
    Ok(ExitCode::SUCCESS)
}
