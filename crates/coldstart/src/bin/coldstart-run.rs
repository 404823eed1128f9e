//! `coldstart-run`: `coldstart run` as a small binary to install in front of
//! a program (as OpenOffice's soffice script once ran its pagein helper).
//! It links only the plan reader and the replay, so that its own cold start
//! reads a fraction of what the whole coldstart binary does. Its flags are
//! `coldstart run`'s (coldstart_prefetch::flags), parsed by hand over that
//! table (`flags::parse`): clap would more than double the binary.

use coldstart_prefetch::flags::{self, Parsed};
use coldstart_prefetch::launch;
use std::process::ExitCode;

const ABOUT: &str = "\
Starts CMD by exec (same pid, streams, exit status and signals) while a detached
prefetcher reads what its start needs, from a plan written by `coldstart plan`.
A missing or broken plan, or a changed file, never keeps CMD from starting.";

fn main() -> ExitCode {
    match flags::parse(std::env::args_os().skip(1)) {
        Ok(Parsed::Run(launch, command)) => {
            ExitCode::from(launch::exec_with_plan(&launch, &command))
        }
        Ok(Parsed::Help) => {
            print!("{}", help());
            ExitCode::SUCCESS
        }
        Ok(Parsed::Version) => {
            println!("coldstart-run {}", env!("CARGO_PKG_VERSION"));
            ExitCode::SUCCESS
        }
        Err(message) => {
            eprintln!(
                "coldstart-run: {message}\n\n{}\n\nFor more information, try '--help'.",
                usage()
            );
            ExitCode::from(2)
        }
    }
}

fn usage() -> String {
    let plan = &flags::PLAN;
    format!(
        "Usage: coldstart-run [OPTIONS] --{} <{}> -- <{}>...",
        plan.long,
        plan.value_name.unwrap_or_default(),
        flags::COMMAND_VALUE_NAME
    )
}

/// The help, laid out as `coldstart run --help` lays out the same flags.
fn help() -> String {
    let mut options: Vec<(String, String)> = flags::ALL
        .into_iter()
        .map(|flag| {
            let short = flag.short.map_or("    ".to_string(), |c| format!("-{c}, "));
            let value = flag
                .value_name
                .map(|v| format!(" <{v}>"))
                .unwrap_or_default();
            let mut line = flag.help.to_string();
            if let Some(default) = flag.default {
                line += &format!(" [default: {default}]");
            }
            if !flag.choices.is_empty() {
                line += &format!(" [possible values: {}]", flag.choices.join(", "));
            }
            (format!("{short}--{}{value}", flag.long), line)
        })
        .collect();
    options.push(("-h, --help".into(), "Print help".into()));
    options.push(("-V, --version".into(), "Print version".into()));
    let width = options
        .iter()
        .map(|(name, _)| name.len())
        .max()
        .unwrap_or(0);
    let options: String = options
        .iter()
        .map(|(name, line)| format!("  {name:width$}  {line}\n"))
        .collect();
    format!(
        "{ABOUT}\n\n{}\n\nArguments:\n  <{}>...  {}\n\nOptions:\n{options}",
        usage(),
        flags::COMMAND_VALUE_NAME,
        flags::COMMAND_HELP
    )
}
