//! The flags of `coldstart run` that the small coldstart-run wrapper takes
//! too: one definition for both binaries (coldstart-run includes this file
//! by path), so their names, help and defaults cannot drift apart. Only clap
//! and coldstart-prefetch are used here, to keep coldstart-run small.

use clap::Args;
use coldstart_prefetch::launch::Launch;
use coldstart_prefetch::replay::{self, Method, ReplayOptions};
use std::ffi::OsString;
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct PrefetchArgs {
    /// The plan to prefetch
    #[arg(long, value_name = "APP.plan")]
    pub plan: PathBuf,

    /// Prefetch threads [default: the CPUs, from 2 to 8]
    #[arg(long, value_name = "N")]
    pub threads: Option<usize>,

    /// How pages are brought in
    #[arg(long, default_value = "readahead", value_parser = method_parser())]
    pub method: Method,

    /// Finish the prefetch before starting the program
    #[arg(long)]
    pub wait: bool,

    /// Report every skipped file and a summary of the prefetch on stderr
    #[arg(long, short)]
    pub verbose: bool,
}

impl PrefetchArgs {
    /// The launch these flags ask for; threads beyond 1 to 256 are clamped.
    pub fn launch(&self) -> Launch {
        Launch {
            plan: self.plan.clone(),
            replay: ReplayOptions {
                threads: self
                    .threads
                    .unwrap_or_else(replay::default_threads)
                    .clamp(1, 256),
                method: self.method,
            },
            wait: self.wait,
            verbose: self.verbose,
        }
    }
}

/// The program to start, after `--`.
#[derive(Debug, Args)]
pub struct TrailingCommand {
    /// The command and its arguments
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<OsString>,
}

/// The prefetch methods by their names, listed in --help.
fn method_parser() -> impl clap::builder::TypedValueParser<Value = Method> {
    use clap::builder::{PossibleValuesParser, TypedValueParser};
    PossibleValuesParser::new(Method::ALL.map(Method::as_str))
        .map(|name| Method::parse(&name).expect("a possible value names a method"))
}
