//! `coldstart-run`: `coldstart run` as a small binary to install in front of
//! a program (as OpenOffice's soffice script once ran its pagein helper).
//! It links only the plan reader and the replay, and parses its arguments by
//! hand, so that its own cold start reads a fraction of what the whole
//! coldstart binary does.

use coldstart_prefetch::launch::{self, Launch};
use coldstart_prefetch::replay::{self, Method, ReplayOptions};
use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

const USAGE: &str = "\
Usage: coldstart-run [--threads N] [--method METHOD] [--wait] [--verbose] --plan APP.plan -- CMD [ARGS]...

Starts CMD by exec (same pid, streams, exit status and signals) while a detached
prefetcher reads what its start needs, from a plan written by `coldstart plan`.
A missing or broken plan, or a changed file, never keeps CMD from starting.

Options:
  --plan APP.plan   the plan to prefetch
  --threads N       prefetch threads [default: the CPUs, from 2 to 8]
  --method METHOD   readahead, fadvise, pread, populate, whole-file or touch-whole
                    [default: readahead]
  --wait            prefetch everything first, then start CMD
  --verbose         name every skipped file and say what the prefetch did
  -h, --help        this text
  -V, --version     the version";

fn main() -> ExitCode {
    match parse(std::env::args_os().skip(1).collect()) {
        Ok(Parsed::Run(launch, command)) => {
            ExitCode::from(launch::exec_with_plan(&launch, &command))
        }
        Ok(Parsed::Help) => {
            println!("{USAGE}");
            ExitCode::SUCCESS
        }
        Ok(Parsed::Version) => {
            println!("coldstart-run {}", env!("CARGO_PKG_VERSION"));
            ExitCode::SUCCESS
        }
        Err(message) => {
            eprintln!("coldstart-run: {message}\n\n{USAGE}");
            ExitCode::from(2)
        }
    }
}

enum Parsed {
    Run(Launch, Vec<OsString>),
    Help,
    Version,
}

fn parse(args: Vec<OsString>) -> Result<Parsed, String> {
    let mut plan = None;
    let mut threads = replay::default_threads();
    let mut method = Method::Readahead;
    let mut wait = false;
    let mut verbose = false;
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        let text = arg.to_string_lossy().into_owned();
        if text == "--" {
            let command: Vec<OsString> = args.collect();
            if command.is_empty() {
                return Err("no command after --".into());
            }
            let plan = plan.ok_or("--plan APP.plan is required")?;
            return Ok(Parsed::Run(
                Launch {
                    plan,
                    replay: ReplayOptions { threads, method },
                    wait,
                    verbose,
                },
                command,
            ));
        }
        // `--name value` or `--name=value`.
        let (name, inline) = match text.split_once('=') {
            Some((name, value)) if name.starts_with("--") => {
                (name.to_string(), Some(value.to_string()))
            }
            _ => (text.clone(), None),
        };
        let mut value = |name: &str| -> Result<OsString, String> {
            match &inline {
                Some(v) => Ok(OsString::from(v)),
                None => args.next().ok_or(format!("{name} needs a value")),
            }
        };
        match name.as_str() {
            "--plan" => plan = Some(PathBuf::from(value("--plan")?)),
            "--threads" => {
                let v = value("--threads")?;
                threads = v
                    .to_str()
                    .and_then(|t| t.parse().ok())
                    .filter(|&n: &usize| (1..=256).contains(&n))
                    .ok_or(format!(
                        "--threads {}: not a number from 1 to 256",
                        v.to_string_lossy()
                    ))?;
            }
            "--method" => {
                let v = value("--method")?;
                method = v
                    .to_str()
                    .and_then(Method::parse)
                    .ok_or(format!("--method {}: unknown method", v.to_string_lossy()))?;
            }
            "--wait" if inline.is_none() => wait = true,
            "--verbose" if inline.is_none() => verbose = true,
            "-h" | "--help" => return Ok(Parsed::Help),
            "-V" | "--version" => return Ok(Parsed::Version),
            _ => return Err(format!("unknown option {text} (the command goes after --)")),
        }
    }
    Err("no command: give it after --".into())
}
