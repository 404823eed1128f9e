//! `coldstart-run`: `coldstart run` as a small binary to install in front of
//! a program (as OpenOffice's soffice script once ran its pagein helper).
//! It links only the plan reader and the replay, so that its own cold start
//! reads a fraction of what the whole coldstart binary does. Its flags are
//! `coldstart run`'s (coldstart_prefetch::flags), parsed here by hand over
//! that table: clap would more than double the binary.

use coldstart_prefetch::flags::{self, Flag, LaunchFlags};
use coldstart_prefetch::launch::{self, Launch};
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::process::ExitCode;

const ABOUT: &str = "\
Starts CMD by exec (same pid, streams, exit status and signals) while a detached
prefetcher reads what its start needs, from a plan written by `coldstart plan`.
A missing or broken plan, or a changed file, never keeps CMD from starting.";

fn main() -> ExitCode {
    match parse(std::env::args_os().skip(1)) {
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

enum Parsed {
    Run(Launch, Vec<OsString>),
    Help,
    Version,
}

/// One pass over the arguments: `--name value`, `--name=value`, a short
/// switch, then `--` and the command.
fn parse(mut args: impl Iterator<Item = OsString>) -> Result<Parsed, String> {
    let mut typed = LaunchFlags::default();
    let mut seen = Vec::new();
    while let Some(arg) = args.next() {
        let text = arg.to_string_lossy();
        match text.as_ref() {
            "--" => {
                let command: Vec<OsString> = args.collect();
                if command.is_empty() {
                    break;
                }
                return Ok(Parsed::Run(typed.launch()?, command));
            }
            "-h" | "--help" => return Ok(Parsed::Help),
            "-V" | "--version" => return Ok(Parsed::Version),
            _ => {}
        }
        // Split as bytes: a plan's path need not be UTF-8.
        let bytes = arg.as_bytes();
        let (name, inline) = match bytes.iter().position(|&b| b == b'=') {
            Some(at) if bytes.starts_with(b"--") => (
                String::from_utf8_lossy(&bytes[..at]),
                Some(OsStr::from_bytes(&bytes[at + 1..]).to_os_string()),
            ),
            _ => (text.clone(), None),
        };
        let flag = flags::ALL
            .into_iter()
            .find(|flag| named(flag, &name))
            .ok_or(format!("unknown option {text} (the command goes after --)"))?;
        let long = flag.long;
        if seen.contains(&long) {
            return Err(format!("--{long} is given more than once"));
        }
        seen.push(long);
        let value = match (flag.value_name, inline) {
            (None, None) => OsString::new(),
            (None, Some(_)) => return Err(format!("--{long} takes no value")),
            (Some(_), inline) => inline
                .or_else(|| args.next())
                .filter(|value| !value.is_empty())
                .ok_or(format!("--{long} needs a value"))?,
        };
        (flag.set)(&mut typed, &value)
            .map_err(|why| format!("--{long} {}: {why}", value.to_string_lossy()))?;
    }
    Err("no command: give it after --".to_string())
}

/// Whether `name`, as typed, is `flag`: `--long` or `-s`.
fn named(flag: &Flag, name: &str) -> bool {
    name.strip_prefix("--") == Some(flag.long)
        || flag.short.is_some_and(|short| name == format!("-{short}"))
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
