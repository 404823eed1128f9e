//! The command line as the user types it: subcommands, flags and their help
//! text. One source for --help, the man page and shell completions. This
//! layer only validates; the command modules turn it into work.

use clap::{Args, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;

const ABOUT: &str = "Measure, explain and fix the cold start of large native programs";

const LONG_ABOUT: &str = "\
coldstart finds out why a big program (a browser, an office suite, an IDE) waits \
for the disk when it starts from a cold page cache, and fixes it: prefetch plans, \
linker order files and loader-friendly ELF.

Today it inspects binaries (what the dynamic loader must read and do before main) \
and builds its own sample application to demonstrate on.";

const EXAMPLES: &str = "\
Examples:
  coldstart demo                                  build the sample app and inspect it
  coldstart inspect /usr/lib/firefox-esr/libxul.so
  coldstart inspect --json /usr/bin/python3 | jq .relocations.by_type
  coldstart completions bash > /etc/bash_completion.d/coldstart";

#[derive(Debug, Parser)]
#[command(
    name = "coldstart",
    version,
    about = ABOUT,
    long_about = LONG_ABOUT,
    after_help = EXAMPLES,
    propagate_version = true,
    arg_required_else_help = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Show what a binary makes the loader read and do at startup
    #[command(after_help = INSPECT_EXAMPLES, long_about = INSPECT_LONG)]
    Inspect(InspectArgs),
    /// Build the bundled sample application and run coldstart on it
    #[command(after_help = DEMO_EXAMPLES, long_about = DEMO_LONG)]
    Demo(DemoArgs),
    /// Print a shell completion script
    Completions {
        /// Shell to complete for
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff) to standard output
    Manpage,
}

const INSPECT_LONG: &str = "\
Show the anatomy of ELF (and PE or Mach-O) binaries as it matters for a cold start: \
segments and sections with their share of the file and pages, the dynamic section, \
relocations by table and type with the pages the loader writes, what packing relative \
relocations as RELR would save, static initializers resolved to function names, and \
layout problems with what to do about them.

With --json, one object per file (a single FILE prints that object; several print \
{\"files\": [...], \"errors\": [...], \"image_overlaps\": [...]}). Field names are \
stable and documented in docs/inspect-json.md.";

const INSPECT_EXAMPLES: &str = "\
Examples:
  coldstart inspect /usr/lib/x86_64-linux-gnu/libc.so.6
  coldstart inspect --json libxul.so | jq '.relocations.by_type'
  coldstart inspect --markdown app lib*.so > anatomy.md
  coldstart inspect a.dll b.dll c.dll          (reports overlapping image bases)";

#[derive(Debug, Args)]
pub struct InspectArgs {
    /// Binaries to inspect (ELF, PE, Mach-O)
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,

    /// Print JSON instead of tables
    #[arg(long, conflicts_with = "markdown")]
    pub json: bool,

    /// Print Markdown tables instead of plain text
    #[arg(long)]
    pub markdown: bool,

    /// Page size for page counts, in bytes (a power of two)
    #[arg(long, default_value_t = 4096, value_name = "BYTES")]
    pub page_size: u64,

    /// How many static initializers to list: a number or "all"
    #[arg(long, default_value = "12", value_name = "N|all", value_parser = parse_limit)]
    pub initializers: Limit,

    /// List sections that are not loaded (debug info, symbol tables) one by one
    #[arg(long)]
    pub all_sections: bool,
}

/// A row limit: a count, or no limit.
#[derive(Debug, Clone, Copy)]
pub struct Limit(pub Option<usize>);

fn parse_limit(text: &str) -> Result<Limit, String> {
    if text.eq_ignore_ascii_case("all") {
        return Ok(Limit(None));
    }
    text.parse::<usize>()
        .map(|n| Limit(Some(n)))
        .map_err(|_| format!("expected a number or \"all\", not {text:?}"))
}

const DEMO_LONG: &str = "\
Generate coldstart's sample application (a C++ program and shared library with \
hundreds of translation units, vtables, static initializers and a startup path that \
calls a known, scattered 5% of its functions), build it, check that it runs, and \
inspect both binaries. Later releases extend the demo to the whole loop: trace, \
report, plan, order, verify.

Sources and binaries go to --dir; a second run reuses what is up to date.";

const DEMO_EXAMPLES: &str = "\
Examples:
  coldstart demo
  coldstart demo --tiny --json | jq '.inspections[0].relocations.by_type'
  coldstart demo --pack-relative-relocs --dir /tmp/demo-relr";

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Where to generate and build the sample app
    #[arg(long, default_value = "coldstart-demo", value_name = "DIR")]
    pub dir: PathBuf,

    /// Seed of the generator (same seed, same program)
    #[arg(long, default_value_t = 1)]
    pub seed: u64,

    /// Number of translation units [default: 400, or 6 with --tiny]
    #[arg(long, value_name = "N")]
    pub translation_units: Option<u32>,

    /// Number of functions [default: 20000, or 60 with --tiny]
    #[arg(long, value_name = "N")]
    pub functions: Option<u32>,

    /// Build a tiny sample app (seconds instead of a minute)
    #[arg(long)]
    pub tiny: bool,

    /// C++ compiler
    #[arg(long, value_enum, default_value_t = CompilerArg::Gcc)]
    pub compiler: CompilerArg,

    /// Link with -z pack-relative-relocs (RELR relative relocations)
    #[arg(long)]
    pub pack_relative_relocs: bool,

    /// Parallel compile jobs [default: number of CPUs]
    #[arg(long, short = 'j', value_name = "N")]
    pub jobs: Option<usize>,

    /// Print the results as JSON
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum CompilerArg {
    Gcc,
    Clang,
}

pub fn command() -> clap::Command {
    <Cli as clap::CommandFactory>::command()
}
