//! `coldstart-run`: `coldstart run` as a small binary to install in front of
//! a program (as OpenOffice's soffice script once ran its pagein helper).
//! It links only clap, the plan reader and the replay, so that its own cold
//! start reads a fraction of what the whole coldstart binary does. Its flags
//! are `coldstart run`'s own definitions (args/prefetch.rs).

#[path = "../args/prefetch.rs"]
mod prefetch;

use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::{Args, FromArgMatches};
use coldstart_prefetch::launch;
use prefetch::{PrefetchArgs, TrailingCommand};
use std::process::ExitCode;

const ABOUT: &str = "\
Starts CMD by exec (same pid, streams, exit status and signals) while a detached
prefetcher reads what its start needs, from a plan written by `coldstart plan`.
A missing or broken plan, or a changed file, never keeps CMD from starting.";

fn main() -> ExitCode {
    let mut command = command();
    let parsed = command
        .try_get_matches_from_mut(std::env::args_os())
        .and_then(|m| {
            Ok((
                PrefetchArgs::from_arg_matches(&m)?,
                TrailingCommand::from_arg_matches(&m)?,
            ))
        });
    match parsed {
        Ok((prefetch, program)) => {
            ExitCode::from(launch::exec_with_plan(&prefetch.launch(), &program.command))
        }
        // --help and --version.
        Err(err) if !err.use_stderr() => {
            let _ = err.print();
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!(
                "coldstart-run: {}\n\n{}\n\nFor more information, try '--help'.",
                usage_error(&err),
                command.render_usage()
            );
            ExitCode::from(2)
        }
    }
}

fn command() -> clap::Command {
    let command = clap::Command::new("coldstart-run").version(env!("CARGO_PKG_VERSION"));
    TrailingCommand::augment_args(PrefetchArgs::augment_args(command))
        // After the groups, whose doc comments would otherwise be the about.
        .about(ABOUT)
        // A wrapper refuses what `coldstart run` would clamp: a typo here
        // would otherwise go unnoticed in an installed launcher.
        .mut_arg("threads", |a| a.value_parser(parse_threads))
}

fn parse_threads(text: &str) -> Result<usize, String> {
    text.parse()
        .ok()
        .filter(|n| (1..=256).contains(n))
        .ok_or_else(|| "not a number from 1 to 256".to_string())
}

/// clap's error in one line that names the flag and what was wrong with it.
fn usage_error(err: &clap::Error) -> String {
    let context = |kind| match err.get(kind) {
        Some(ContextValue::String(text)) => text.clone(),
        Some(ContextValue::Strings(texts)) => texts.join(", "),
        _ => String::new(),
    };
    let argument = context(ContextKind::InvalidArg);
    // "--threads <N>" names the flag --threads.
    let flag = argument.split(' ').next().unwrap_or_default();
    let value = context(ContextKind::InvalidValue);
    match err.kind() {
        ErrorKind::UnknownArgument => {
            format!("unknown option {argument} (the command goes after --)")
        }
        ErrorKind::InvalidValue if value.is_empty() => format!("{flag} needs a value"),
        ErrorKind::InvalidValue => format!(
            "{flag} {value}: unknown method, one of {}",
            context(ContextKind::ValidValue)
        ),
        ErrorKind::ValueValidation => match std::error::Error::source(err) {
            Some(why) => format!("{flag} {value}: {why}"),
            None => format!("{flag} {value}: invalid"),
        },
        ErrorKind::MissingRequiredArgument if argument.starts_with("--plan") => {
            "--plan APP.plan is required".to_string()
        }
        ErrorKind::MissingRequiredArgument => "no command: give it after --".to_string(),
        // clap's own first line, without its "error: ".
        _ => err
            .render()
            .to_string()
            .lines()
            .next()
            .unwrap_or_default()
            .trim_start_matches("error: ")
            .to_string(),
    }
}
