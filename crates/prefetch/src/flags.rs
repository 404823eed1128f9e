//! The flags that start a program with a plan, defined once as data:
//! `coldstart run` takes its clap names, value names, help and default from
//! here, and the small coldstart-run wrapper parses and documents itself over
//! the same table without linking clap, which would more than double its size.
//! [`parse`] is that parser; it also reads back a traced launcher's command
//! line, to find the plan it was given.

use crate::launch::Launch;
use crate::replay::{self, Method, ReplayOptions};
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

/// One flag of the launcher.
pub struct Flag {
    /// `--long`, without the dashes.
    pub long: &'static str,
    pub short: Option<char>,
    /// What the value is called in help; a flag without one is a switch.
    pub value_name: Option<&'static str>,
    pub help: &'static str,
    pub default: Option<&'static str>,
    /// The only values accepted, when there is such a list.
    pub choices: &'static [&'static str],
    /// Records the flag as coldstart-run takes it (given "" for a switch);
    /// the error says what is wrong with the value.
    pub set: fn(&mut LaunchFlags, &OsStr) -> Result<(), String>,
}

/// The method when none is given.
pub const DEFAULT_METHOD: Method = Method::Readahead;

/// coldstart-run refuses thread counts beyond these, which `coldstart run`
/// clamps: a typo in an installed launcher would otherwise go unnoticed.
pub const THREAD_COUNTS: std::ops::RangeInclusive<usize> = 1..=256;

pub const PLAN: Flag = Flag {
    long: "plan",
    short: None,
    value_name: Some("APP.plan"),
    help: "The plan to prefetch",
    default: None,
    choices: &[],
    set: |flags, value| {
        flags.plan = Some(PathBuf::from(value));
        Ok(())
    },
};

pub const THREADS: Flag = Flag {
    long: "threads",
    short: None,
    value_name: Some("N"),
    help: "Prefetch threads [default: the CPUs, from 2 to 8]",
    default: None,
    choices: &[],
    set: |flags, value| {
        let threads = value.to_str().and_then(|text| text.parse().ok());
        flags.threads = Some(
            threads
                .filter(|n| THREAD_COUNTS.contains(n))
                .ok_or(format!(
                    "not a number from {} to {}",
                    THREAD_COUNTS.start(),
                    THREAD_COUNTS.end()
                ))?,
        );
        Ok(())
    },
};

pub const METHOD: Flag = Flag {
    long: "method",
    short: None,
    value_name: Some("METHOD"),
    help: "How pages are brought in",
    default: Some(DEFAULT_METHOD.as_str()),
    choices: &METHOD_NAMES,
    set: |flags, value| {
        let method = value.to_str().and_then(Method::parse);
        flags.method = Some(method.ok_or(format!(
            "unknown method, one of {}",
            METHOD_NAMES.join(", ")
        ))?);
        Ok(())
    },
};

pub const WAIT: Flag = Flag {
    long: "wait",
    short: None,
    value_name: None,
    help: "Finish the prefetch before starting the program",
    default: None,
    choices: &[],
    set: |flags, _| {
        flags.wait = true;
        Ok(())
    },
};

pub const VERBOSE: Flag = Flag {
    long: "verbose",
    short: Some('v'),
    value_name: None,
    help: "Report every skipped file and a summary of the prefetch on stderr",
    default: None,
    choices: &[],
    set: |flags, _| {
        flags.verbose = true;
        Ok(())
    },
};

/// A size in KiB from 0 to `max`, or what is wrong with it.
fn kilobytes(value: &OsStr, max: u64) -> Result<u64, String> {
    value
        .to_str()
        .and_then(|text| text.parse().ok())
        .filter(|n| *n <= max)
        .ok_or(format!("not a number from 0 to {max}"))
}

/// The most --lead-kb accepts: 1 GiB.
pub const MAX_LEAD_KB: u64 = 1 << 20;

pub const LEAD: Flag = Flag {
    long: "lead-kb",
    short: None,
    value_name: Some("KB"),
    help: "Start the program once the prefetcher has requested this much of the plan (at most 100 ms later)",
    default: Some("0"),
    choices: &[],
    set: |flags, value| {
        flags.lead_kb = Some(kilobytes(value, MAX_LEAD_KB)?);
        Ok(())
    },
};

/// The most --window-kb accepts: 1 GiB.
pub const MAX_WINDOW_KB: u64 = 1 << 20;

/// --window-kb's default, as its help text shows it.
pub const DEFAULT_WINDOW_KB: &str = "2048";

const _: () = assert!(replay::DEFAULT_WINDOW_BYTES == 2048 * 1024);

pub const WINDOW: Flag = Flag {
    long: "window-kb",
    short: None,
    value_name: Some("KB"),
    help: "Keep at most this much of the plan requested from the device and not yet read, so that a page the program misses is not read after the rest of the plan (0: no bound)",
    default: Some(DEFAULT_WINDOW_KB),
    choices: &[],
    set: |flags, value| {
        flags.window_kb = Some(kilobytes(value, MAX_WINDOW_KB)?);
        Ok(())
    },
};

pub const NO_READ_AROUND: Flag = Flag {
    long: "no-read-around",
    short: None,
    value_name: None,
    help: "Make a fault on a data (non-executable) mapping of a planned file read its own page instead of a readahead window around it: a shared library's data segments, and files the program maps itself with libc's mmap (archives, fonts), through an LD_AUDIT module given to the program (glibc, dynamically linked programs; the kernel still reads ahead on executable mappings)",
    default: None,
    choices: &[],
    set: |flags, _| {
        flags.no_read_around = true;
        Ok(())
    },
};

/// Every flag, in the order help lists them.
pub const ALL: [&Flag; 8] = [
    &PLAN,
    &THREADS,
    &METHOD,
    &LEAD,
    &WINDOW,
    &NO_READ_AROUND,
    &WAIT,
    &VERBOSE,
];

/// The program to start, after `--`: its name in help, and its help line.
pub const COMMAND_VALUE_NAME: &str = "CMD";
pub const COMMAND_HELP: &str = "The command and its arguments";

const METHOD_NAMES: [&str; Method::ALL.len()] = {
    let mut names = [""; Method::ALL.len()];
    let mut i = 0;
    while i < names.len() {
        names[i] = Method::ALL[i].as_str();
        i += 1;
    }
    names
};

/// The flags as coldstart-run parsed them, before defaults.
#[derive(Debug, Default)]
pub struct LaunchFlags {
    pub plan: Option<PathBuf>,
    pub threads: Option<usize>,
    pub method: Option<Method>,
    pub lead_kb: Option<u64>,
    pub window_kb: Option<u64>,
    pub wait: bool,
    pub verbose: bool,
    pub no_read_around: bool,
}

impl LaunchFlags {
    /// The launch that both binaries start, or the message for a missing
    /// --plan. Threads default to the CPUs (`replay::default_threads`);
    /// values beyond what coldstart-run accepts, which `coldstart run`
    /// clamps, are clamped here too.
    pub fn launch(self) -> Result<Launch, String> {
        let plan = self.plan.ok_or(format!(
            "--{} {} is required",
            PLAN.long,
            PLAN.value_name.unwrap_or_default()
        ))?;
        let window_bytes = match self.window_kb {
            Some(kb) => kb.min(MAX_WINDOW_KB) * 1024,
            None => replay::DEFAULT_WINDOW_BYTES,
        };
        Ok(Launch {
            plan,
            lead_bytes: self.lead_kb.unwrap_or(0).min(MAX_LEAD_KB) * 1024,
            replay: ReplayOptions {
                threads: self
                    .threads
                    .unwrap_or_else(replay::default_threads)
                    .clamp(*THREAD_COUNTS.start(), *THREAD_COUNTS.end()),
                method: self.method.unwrap_or(DEFAULT_METHOD),
                window_bytes,
                no_symlinks: false,
                open_as: None,
            },
            wait: self.wait,
            verbose: self.verbose,
            no_read_around: self.no_read_around,
        })
    }
}

/// What a launcher's command line asks for.
#[derive(Debug)]
pub enum Parsed {
    /// Start the command (after `--`) with the launch.
    Run(Launch, Vec<OsString>),
    Help,
    Version,
}

/// Parses the arguments after the launcher's name in one pass:
/// `--name value`, `--name=value`, a short switch, then `--` and the
/// command. The error says what is wrong, as coldstart-run prints it.
pub fn parse(mut args: impl Iterator<Item = OsString>) -> Result<Parsed, String> {
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
        let flag = ALL
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

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(flag: &Flag, value: &str) -> Result<LaunchFlags, String> {
        let mut flags = LaunchFlags::default();
        (flag.set)(&mut flags, OsStr::new(value)).map(|()| flags)
    }

    #[test]
    fn each_flag_sets_its_own_value() {
        let flags = parsed(&PLAN, "/p/app.plan").unwrap();
        assert_eq!(flags.plan, Some(PathBuf::from("/p/app.plan")));
        assert_eq!(parsed(&THREADS, "256").unwrap().threads, Some(256));
        assert_eq!(
            parsed(&METHOD, "whole-file").unwrap().method,
            Some(Method::WholeFile)
        );
        assert_eq!(parsed(&LEAD, "8192").unwrap().lead_kb, Some(8192));
        assert_eq!(parsed(&WINDOW, "0").unwrap().window_kb, Some(0));
        assert!(parsed(&WAIT, "").unwrap().wait);
        assert!(parsed(&VERBOSE, "").unwrap().verbose);
        assert!(parsed(&NO_READ_AROUND, "").unwrap().no_read_around);
    }

    fn parse_words(words: &[&str]) -> Result<Parsed, String> {
        parse(words.iter().map(OsString::from))
    }

    #[test]
    fn a_command_line_is_parsed_up_to_the_command() {
        let Ok(Parsed::Run(launch, command)) = parse_words(&[
            "--threads",
            "3",
            "--plan=/p/app.plan",
            "-v",
            "--",
            "app",
            "--plan",
            "x",
        ]) else {
            panic!("not a run");
        };
        assert_eq!(launch.plan, PathBuf::from("/p/app.plan"));
        assert_eq!(launch.replay.threads, 3);
        assert!(launch.verbose);
        assert_eq!(command, ["app", "--plan", "x"]);
        assert!(matches!(parse_words(&["--help"]), Ok(Parsed::Help)));
        assert!(matches!(parse_words(&["-V"]), Ok(Parsed::Version)));
        for (words, error) in [
            (
                &["--plan", "a", "--plan", "b", "--", "app"][..],
                "--plan is given more than once",
            ),
            (
                &["--fast", "--", "app"],
                "unknown option --fast (the command goes after --)",
            ),
            (&["--wait=yes", "--", "app"], "--wait takes no value"),
            (&["--plan", "a", "--"], "no command: give it after --"),
            (&["--", "app"], "--plan APP.plan is required"),
        ] {
            assert_eq!(parse_words(words).unwrap_err(), error, "{words:?}");
        }
    }

    #[test]
    fn bad_values_say_what_is_accepted() {
        for threads in ["0", "257", "-1", "two", ""] {
            assert_eq!(
                parsed(&THREADS, threads).unwrap_err(),
                "not a number from 1 to 256"
            );
        }
        for lead in ["-1", "1048577", "lots", ""] {
            assert_eq!(
                parsed(&LEAD, lead).unwrap_err(),
                "not a number from 0 to 1048576"
            );
            assert_eq!(
                parsed(&WINDOW, lead).unwrap_err(),
                "not a number from 0 to 1048576"
            );
        }
        assert_eq!(
            parsed(&METHOD, "magic").unwrap_err(),
            "unknown method, one of readahead, fadvise, pread, populate, whole-file, touch-whole"
        );
    }

    #[test]
    fn the_launch_fills_in_the_defaults_and_needs_a_plan() {
        assert_eq!(
            LaunchFlags::default().launch().unwrap_err(),
            "--plan APP.plan is required"
        );
        let defaults = LaunchFlags {
            plan: Some("a.plan".into()),
            ..LaunchFlags::default()
        }
        .launch()
        .unwrap();
        assert_eq!(defaults.plan, PathBuf::from("a.plan"));
        assert_eq!(defaults.replay.method, Method::Readahead);
        let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
        assert_eq!(defaults.replay.threads, cpus.clamp(2, 8));
        assert!(!defaults.wait && !defaults.verbose && !defaults.no_read_around);
        assert_eq!(defaults.lead_bytes, 0);
        assert_eq!(defaults.replay.window_bytes, 2 << 20);
        assert_eq!(WINDOW.default, Some("2048"));
        // `coldstart run` clamps what coldstart-run refuses.
        let clamped = LaunchFlags {
            plan: Some("a.plan".into()),
            threads: Some(1000),
            method: Some(Method::Pread),
            lead_kb: Some(4096),
            window_kb: Some(u64::MAX),
            wait: true,
            verbose: false,
            no_read_around: true,
        }
        .launch()
        .unwrap();
        assert_eq!(clamped.replay.threads, 256);
        assert_eq!(clamped.lead_bytes, 4 << 20);
        assert_eq!(clamped.replay.window_bytes, 1 << 30);
    }
}
