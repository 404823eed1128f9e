//! The flags of `coldstart run` that the small coldstart-run wrapper takes
//! too. Their names, value names, help and default come from
//! `coldstart_prefetch::flags`, the table coldstart-run parses by hand, so the
//! two binaries cannot drift apart while coldstart-run links no clap.

use clap::Args;
use coldstart_prefetch::flags;
use coldstart_prefetch::launch::Launch;
use coldstart_prefetch::replay::Method;
use std::ffi::OsString;
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct PrefetchArgs {
    #[arg(long = flags::PLAN.long, value_name = flags::PLAN.value_name, help = flags::PLAN.help)]
    pub plan: PathBuf,

    #[arg(
        long = flags::THREADS.long,
        value_name = flags::THREADS.value_name,
        help = flags::THREADS.help
    )]
    pub threads: Option<usize>,

    #[arg(
        long = flags::METHOD.long,
        value_name = flags::METHOD.value_name,
        help = flags::METHOD.help,
        default_value = flags::METHOD.default,
        value_parser = method_parser()
    )]
    pub method: Method,

    #[arg(
        long = flags::LEAD.long,
        value_name = flags::LEAD.value_name,
        help = flags::LEAD.help,
        default_value = flags::LEAD.default,
        value_parser = clap::value_parser!(u64).range(0..=flags::MAX_LEAD_KB)
    )]
    pub lead_kb: u64,

    #[arg(
        long = flags::WINDOW.long,
        value_name = flags::WINDOW.value_name,
        help = flags::WINDOW.help,
        default_value = flags::WINDOW.default,
        value_parser = clap::value_parser!(u64).range(0..=flags::MAX_WINDOW_KB)
    )]
    pub window_kb: u64,

    #[arg(long = flags::NO_READ_AROUND.long, help = flags::NO_READ_AROUND.help)]
    pub no_read_around: bool,

    #[arg(long = flags::WAIT.long, help = flags::WAIT.help)]
    pub wait: bool,

    #[arg(long = flags::VERBOSE.long, short = flags::VERBOSE.short, help = flags::VERBOSE.help)]
    pub verbose: bool,
}

impl PrefetchArgs {
    /// The launch these flags ask for; threads beyond 1 to 256 are clamped.
    pub fn launch(&self) -> Launch {
        flags::LaunchFlags {
            plan: Some(self.plan.clone()),
            threads: self.threads,
            method: Some(self.method),
            lead_kb: Some(self.lead_kb),
            window_kb: Some(self.window_kb),
            wait: self.wait,
            verbose: self.verbose,
            no_read_around: self.no_read_around,
        }
        .launch()
        .expect("clap requires --plan")
    }
}

/// The program to start, after `--`.
#[derive(Debug, Args)]
pub struct TrailingCommand {
    #[arg(
        last = true,
        required = true,
        value_name = flags::COMMAND_VALUE_NAME,
        help = flags::COMMAND_HELP
    )]
    pub command: Vec<OsString>,
}

/// The prefetch methods by their names, listed in --help.
fn method_parser() -> impl clap::builder::TypedValueParser<Value = Method> {
    use clap::builder::{PossibleValuesParser, TypedValueParser};
    PossibleValuesParser::new(flags::METHOD.choices)
        .map(|name| Method::parse(&name).expect("a possible value names a method"))
}
