//! The command line as the user types it: subcommands, flags and their help
//! text. One source for --help, the man page and shell completions. This
//! layer only validates; the command modules turn it into work.

use anyhow::Context;
use clap::{Args, Parser, Subcommand, ValueEnum};
use coldstart_system::cache::CacheMode;
use std::path::PathBuf;

mod prefetch;
pub use prefetch::{PrefetchArgs, TrailingCommand};

const ABOUT: &str = "Measure, explain and fix the cold start of large native programs";

const LONG_ABOUT: &str = "\
coldstart finds out why a big program (a browser, an office suite, an IDE) waits \
for the disk when it starts from a cold page cache, and fixes it: prefetch plans, \
linker order files and loader-friendly ELF.

Today it inspects binaries (what the dynamic loader must read and do before main), \
traces a program's start page by page into a profile database and reports what it \
read versus what it touched, per file, ELF section and symbol, with charts.";

const EXAMPLES: &str = "\
Examples:
  coldstart demo                                  build the sample app and inspect it
  coldstart inspect /usr/lib/firefox-esr/libxul.so
  sudo coldstart trace -o ff.db -- firefox-esr --headless --screenshot /tmp/x.png about:blank
  coldstart report ff.db --html ff.html
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
    /// Trace a program's start page by page into a profile
    #[command(after_help = TRACE_EXAMPLES, long_about = TRACE_LONG)]
    Trace(TraceArgs),
    /// List the runs in a profile
    Runs(RunsArgs),
    /// Explain a traced run: per file, section and symbol, read versus touched
    #[command(after_help = REPORT_EXAMPLES, long_about = REPORT_LONG)]
    Report(ReportArgs),
    /// Time a program's start over repeated runs: warm, cold or selective-cold
    #[command(after_help = BENCH_EXAMPLES, long_about = BENCH_LONG)]
    Bench(BenchArgs),
    /// Compile a prefetch plan from traced runs: the extents startup needs, in order
    #[command(after_help = PLAN_EXAMPLES, long_about = PLAN_LONG)]
    Plan(PlanArgs),
    /// Start a program while prefetching its plan on background threads
    #[command(after_help = RUN_EXAMPLES, long_about = RUN_LONG)]
    Run(RunArgs),
    /// Write a linker order file that makes startup's code and data contiguous
    #[command(after_help = ORDER_EXAMPLES, long_about = ORDER_LONG)]
    Order(OrderArgs),
    /// Rewrite an installed binary's relative relocations as DT_RELR, without a relink
    #[command(after_help = PACK_EXAMPLES, long_about = PACK_LONG)]
    Pack(PackArgs),
    /// Build the function-tracing runtime to link into an instrumented build
    #[command(after_help = RUNTIME_EXAMPLES, long_about = RUNTIME_LONG)]
    Runtime(RuntimeArgs),
    /// Predict the pages a start reads under another readahead setting or layout
    #[command(after_help = SIMULATE_EXAMPLES, long_about = SIMULATE_LONG)]
    Simulate(SimulateArgs),
    /// Measure what the dynamic loader charges per relocation, symbol, initializer, library
    #[command(after_help = LOADCOST_EXAMPLES, long_about = LOADCOST_LONG)]
    Loadcost(LoadcostArgs),
    /// Drop files from the page cache, or check how much of them is resident
    #[command(after_help = EVICT_EXAMPLES, long_about = EVICT_LONG)]
    Evict(EvictArgs),
    /// Build the bundled sample application and run coldstart on it
    #[command(after_help = DEMO_EXAMPLES, long_about = DEMO_LONG)]
    Demo(DemoArgs),
    /// Run the system-wide service that prefetches every start of a planned program
    #[command(after_help = SERVE_EXAMPLES, long_about = SERVE_LONG)]
    Serve(ServeArgs),
    /// What the service knows: programs, plans, starts, measured gain
    #[command(after_help = STATUS_EXAMPLES, long_about = STATUS_LONG)]
    Status(StatusArgs),
    /// Print a shell completion script
    Completions {
        /// Shell to complete for
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff) to standard output
    Manpage,
}

/// When a start is over: a line of the program's output, a file appearing,
/// or the time limit. Trace's wording and default; bench rewords
/// --ready-file and --timeout and waits 60 seconds.
#[derive(Debug, Args)]
pub struct Readiness {
    /// Startup is over when a line of the program's output matches this regex
    #[arg(long, value_name = "RE", conflicts_with = "ready_file")]
    pub ready_regex: Option<String>,

    /// Startup is over when this file exists
    #[arg(long, value_name = "PATH")]
    pub ready_file: Option<PathBuf>,

    /// Give up after this many seconds (the run is kept, marked timeout)
    #[arg(long, default_value_t = 120.0, value_name = "SECS")]
    pub timeout: f64,
}

impl Readiness {
    /// --timeout as typed: a positive, finite number of seconds.
    pub fn timeout(&self) -> anyhow::Result<std::time::Duration> {
        if !(self.timeout > 0.0 && self.timeout.is_finite()) {
            anyhow::bail!("--timeout must be a positive number of seconds");
        }
        Ok(std::time::Duration::from_secs_f64(self.timeout))
    }

    /// --ready-regex compiled, with an error that names the option.
    pub fn regex(&self) -> anyhow::Result<Option<regex::Regex>> {
        self.ready_regex
            .as_deref()
            .map(regex::Regex::new)
            .transpose()
            .context("--ready-regex is not a valid regular expression")
    }
}

/// How a report is printed: text tables, Markdown or JSON.
#[derive(Debug, Args)]
pub struct OutputFormat {
    /// Print JSON
    #[arg(long, conflicts_with = "markdown")]
    pub json: bool,

    /// Print Markdown tables
    #[arg(long)]
    pub markdown: bool,
}

impl OutputFormat {
    /// The table style of the text output (--json aside).
    pub fn style(&self) -> coldstart_report::Style {
        if self.markdown {
            coldstart_report::Style::Markdown
        } else {
            coldstart_report::Style::Plain
        }
    }
}

/// Who the measured program runs as when coldstart was started through sudo.
#[derive(Debug, Args)]
pub struct RunAs {
    /// Run the program as root even when started through sudo
    #[arg(long)]
    pub as_root: bool,
}

impl RunAs {
    pub fn identity(&self) -> anyhow::Result<coldstart_system::launch::Identity> {
        coldstart_system::launch::Identity::invoking_user(self.as_root)
            .context("cannot look up the invoking user")
    }
}

/// Which run of --profile names the files to evict.
#[derive(Debug, Args)]
pub struct RunOfProfile {
    /// Run of --profile [default: the latest complete run]
    #[arg(long, value_name = "N", requires = "profile")]
    pub run: Option<i64>,
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
#[command(
    mut_arg("json", |a| a.help("Print JSON instead of tables")),
    mut_arg("markdown", |a| a.help("Print Markdown tables instead of plain text"))
)]
pub struct InspectArgs {
    /// Binaries to inspect (ELF, PE, Mach-O)
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,

    #[command(flatten)]
    pub format: OutputFormat,

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

const PACK_LONG: &str = "\
Rewrite an already-linked ELF file (x86-64 shared library or PIE) so that its relative \
relocations are a DT_RELR table, as linking with -z pack-relative-relocs would have made \
them, without the build. Every other relocation is kept; no code or data address moves; \
the GLIBC_ABI_DT_RELR version need glibc 2.36+ insists on is added. The bytes the old RELA \
table took are cut out of the file (later file offsets shift by whole pages) or, where less \
than a page is freed, left as zeros nothing reads.

The input is never modified: the output is written to a temporary file beside it and \
renamed when complete, with the input's mode. Files pack cannot rewrite correctly \
(already RELR, text relocations, static, not x86-64, no room) are refused with one line \
naming the file and the reason.

Exit status: 0 when every input was packed or is simply not a candidate (not ELF, nothing \
to pack, already packed) and at least one was packed; 1 otherwise.

Packed files need glibc 2.36 or later to run.";

const PACK_EXAMPLES: &str = "\
Examples:
  coldstart pack /usr/lib/chromium/chromium -o /tmp/chromium --dry-run
  coldstart pack app -o app.packed && ./app.packed
  coldstart pack /opt/office/program/*.so --out-dir /tmp/packed --json | jq '.packed[].compacted_bytes'";

#[derive(Debug, Args)]
pub struct PackArgs {
    /// ELF files to pack
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,

    /// Where to write the packed file (one input)
    #[arg(
        short = 'o',
        long = "output",
        value_name = "OUT",
        conflicts_with = "out_dir"
    )]
    pub output: Option<PathBuf>,

    /// Write each packed file under its own name into this directory (created if missing)
    #[arg(long, value_name = "DIR")]
    pub out_dir: Option<PathBuf>,

    /// Only report what would change; write nothing
    #[arg(long)]
    pub dry_run: bool,

    /// Print JSON instead of a table
    #[arg(long)]
    pub json: bool,
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

const TRACE_LONG: &str = "\
Run a program under kernel tracepoints (in a private tracefs instance that is always \
removed afterwards) and record, page by page, what entered the page cache, which \
pages were faulted, mapped by fault-around or read(), by which process and when, and \
which pages entered during the program's own readahead(2) or WILLNEED calls. \
Paths are resolved exactly from the files the program opens. The run is appended to \
the profile database (SQLite), which can hold many runs.

Needs root. Started through sudo, the program runs as the invoking user (SUDO_UID), \
never as root, unless --as-root is given.

The run ends when the program exits, when a line of its output matches --ready-regex, \
when --ready-file appears, or at --timeout; then its whole process tree is terminated. \
The program's standard input is /dev/null (it runs in its own process group, where \
reading the terminal would stop it); its output is passed through. \
Ctrl-C stops the run, keeps what was recorded and cleans up.

With --blocks the run records basic blocks instead of pages (docs/order.md, \
\"Splitting functions\"): no kernel tracing, no cache dropped, no root needed; the \
run ends when every process it started exited, or at --timeout.";

const TRACE_EXAMPLES: &str = "\
Examples:
  sudo coldstart trace -- /usr/bin/python3 -c 'import json'
  sudo coldstart trace -o ff.db --ready-regex . -- firefox-esr --headless --screenshot /tmp/x.png about:blank
  sudo coldstart trace --cache selective -o ff.db -- firefox-esr ...   (evicts the files of the previous run)
  sudo coldstart trace --cache warm --json -o app.db -- ./app
  sudo coldstart trace --loader -o lo.db --ready-file /tmp/x.pdf -- soffice --headless --convert-to pdf --outdir /tmp x.odt
  coldstart trace --blocks -o app.db -- ./build-bbmap/app   (clang -fbasic-block-address-map; no root needed)";

#[derive(Debug, Args)]
#[command(mut_arg("command", |a| a.help("The program and its arguments")))]
pub struct TraceArgs {
    /// Profile database to append the run to (created if missing)
    #[arg(short, long, default_value = "coldstart.db", value_name = "PROFILE.db")]
    pub output: PathBuf,

    /// Page cache state before the start: cold drops the whole cache, selective evicts
    /// only the files the program used (from a previous run), warm runs it once first
    #[arg(long, value_enum, default_value_t = CacheArg::Cold)]
    pub cache: CacheArg,

    /// File to evict before the start (repeatable); implies --cache selective and
    /// replaces the files of a previous run
    #[arg(long, value_name = "PATH")]
    pub evict: Vec<PathBuf>,

    /// Profile whose latest run names the files to evict for --cache selective
    /// [default: the output profile]
    #[arg(long, value_name = "PROFILE.db")]
    pub evict_from: Option<PathBuf>,

    #[command(flatten)]
    pub readiness: Readiness,

    /// Trace buffer per CPU, in MiB
    #[arg(long, default_value_t = coldstart_record::trace::DEFAULT_BUFFER_KB_PER_CPU / 1024, value_name = "MIB")]
    pub buffer_mb: u64,

    /// Also trace every user page fault to find touched pages that fault-around had
    /// mapped (more complete touched figures; slows the traced start down)
    #[arg(long)]
    pub user_faults: bool,

    /// Also record function first calls from a program built with coldstart's
    /// instrumentation runtime (see `coldstart runtime`), for `coldstart order`
    #[arg(long)]
    pub functions: bool,

    /// Record which basic blocks the start runs, in first-run order, instead of pages:
    /// the program runs under ptrace with a one-shot breakpoint on every block of the
    /// files built with clang -fbasic-block-address-map (needs no root), for
    /// `coldstart order --clusters`
    #[arg(long, conflicts_with_all = ["functions", "user_faults", "loader", "read_ahead_kb", "evict", "evict_from", "ready_regex", "ready_file"])]
    pub blocks: bool,

    /// With --blocks: also trace this file, which has no block map, by finding its
    /// blocks by disassembly (x86-64; a gcc build, or a binary for BOLT) (repeatable)
    #[arg(long, value_name = "PATH", requires = "blocks")]
    pub discover: Vec<PathBuf>,

    /// Set every device's read_ahead_kb to this for the run, restored after. With 0
    /// the kernel reads only the pages the program demands, so pages read are pages
    /// touched: the exact input for a prefetch plan (affects all processes meanwhile)
    #[arg(long, value_name = "KB")]
    pub read_ahead_kb: Option<u64>,

    /// Also trace the dynamic loader's phases per object (search and each open tried,
    /// map, relocate, each initializer, dlopen, the jump to the program's entry) with
    /// uprobes on ld.so; needs its debug symbols (Debian: libc6-dbg)
    #[arg(long)]
    pub loader: bool,

    /// With --loader: also count symbol lookups per relocated object (one trap per
    /// lookup, lazy binding after startup included)
    #[arg(long, requires = "loader")]
    pub loader_lookups: bool,

    #[command(flatten)]
    pub run_as: RunAs,

    /// Print the run summary as JSON (the program's output goes to stderr)
    #[arg(long)]
    pub json: bool,

    #[command(flatten)]
    pub program: TrailingCommand,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum CacheArg {
    Cold,
    Selective,
    Warm,
}

impl From<CacheArg> for CacheMode {
    fn from(cache: CacheArg) -> CacheMode {
        match cache {
            CacheArg::Cold => CacheMode::Cold,
            CacheArg::Selective => CacheMode::Selective,
            CacheArg::Warm => CacheMode::Warm,
        }
    }
}

#[derive(Debug, Args)]
pub struct RunsArgs {
    /// Profile database
    #[arg(value_name = "PROFILE.db")]
    pub profile: PathBuf,

    /// Print JSON
    #[arg(long)]
    pub json: bool,
}

const REPORT_LONG: &str = "\
Explain one traced run: per file, the bytes and pages read into the page cache, pages \
faulted, pages mapped by fault-around, pages accessed by read(), read amplification \
(read / touched), read requests, forward and backward seek distance, first and last \
access and which processes; for ELF files the same per section and the symbols on \
touched pages. Only the traced process tree counts; files only other processes read \
are listed apart.

--svg and --html draw, per file, time against file offset: a dot per page read, a \
cross per page touched, bands for ELF sections. --perfetto writes a timeline for \
ui.perfetto.dev. JSON field names are documented in docs/report-json.md.";

const REPORT_EXAMPLES: &str = "\
Examples:
  coldstart report ff.db
  coldstart report ff.db --file '*libxul*' --json | jq '.files[0].sections'
  coldstart report ff.db --run 2 --html ff.html --svg ff.svg --perfetto ff.json";

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// Profile database
    #[arg(value_name = "PROFILE.db")]
    pub profile: PathBuf,

    /// Run to report [default: the latest complete run]
    #[arg(long, value_name = "N")]
    pub run: Option<i64>,

    /// Only files whose path matches this glob (e.g. '*libxul*')
    #[arg(long, value_name = "GLOB")]
    pub file: Option<String>,

    #[command(flatten)]
    pub format: OutputFormat,

    /// Include the page lists (JSON) or page extents (text)
    #[arg(long)]
    pub pages: bool,

    /// Rows of the text report's per-file and per-loaded-object tables: a number or "all"
    #[arg(long, default_value = "25", value_name = "N|all", value_parser = parse_limit)]
    pub top: Limit,

    /// Symbols to list per file in the text report: a number or "all"
    #[arg(long, default_value = "10", value_name = "N|all", value_parser = parse_limit)]
    pub symbols: Limit,

    /// Do not read the traced files for ELF sections and symbols
    #[arg(long)]
    pub no_attribution: bool,

    /// For a start a prefetcher served (coldstart run, coldstart-run, the system-wide
    /// service): account its reads against this plan (what the prefetcher read, what the
    /// program read itself and why) [default: the plan the run's command line names, when
    /// it still reads; else, when a prefetcher served the run, an accounting without the
    /// plan]
    #[arg(long, value_name = "APP.plan")]
    pub plan: Option<PathBuf>,

    /// With --plan and --request-us: predict the floor, the best cold start a perfect
    /// prefetch of the plan could reach on a device streaming this many MB/s, with this
    /// run (best a warm start, `trace --cache warm`) giving when each extent is first
    /// used (`plan --calibrate` measures both figures)
    #[arg(long, value_name = "MB_S", requires_all = ["plan", "request_us"])]
    pub bandwidth_mb_s: Option<f64>,

    /// The device's time per request with the prefetcher's reads in flight, for the floor
    #[arg(long, value_name = "US", requires_all = ["plan", "bandwidth_mb_s"])]
    pub request_us: Option<f64>,

    /// Write the chart as SVG
    #[arg(long, value_name = "OUT.svg")]
    pub svg: Option<PathBuf>,

    /// Write one self-contained HTML page with tables and charts
    #[arg(long, value_name = "OUT.html")]
    pub html: Option<PathBuf>,

    /// Write a timeline for ui.perfetto.dev (Chrome trace JSON)
    #[arg(long, value_name = "OUT.json")]
    pub perfetto: Option<PathBuf>,
}

const ORDER_LONG: &str = "\
Write an order file for a linker (or BOLT) that places the functions and data a start \
used next to each other, so a cold start reads a few contiguous stretches of the binary \
instead of most of it. The traces come from the profile's runs:

- function-level, when the runs were traced with --functions from a build instrumented \
with coldstart's runtime (`coldstart runtime`): exact first-call order and call counts. \
Names are looked up in --binary, the plain (uninstrumented) build you will relink, since \
instrumentation changes code size and inlining.
- page-level otherwise (programs that cannot be rebuilt): every symbol on a page startup \
touched, by first touch. This is imprecise: a touched page makes all its symbols count, \
so the order holds more than startup ran; trace with --read-ahead-kb 0 for exact pages.

Diagnostics say which symbols cannot be ordered for the chosen linker and why, and how \
much of startup's bytes the file covers. Give the objects of the link (--objects) to \
check that each symbol has a section of its own (-ffunction-sections -fdata-sections).

With --clusters the order splits functions: from a block trace of --binary (`coldstart \
trace --blocks`), each function's startup blocks go into one cluster of clang's \
-fbasic-block-sections=list file, the rest of it into its .cold part, and the order \
places the clusters in first-run order, then the data symbols the start's code \
addresses and, with --runs, those on data pages those page-level runs touched \
(docs/order.md, \"Splitting functions\").";

const ORDER_EXAMPLES: &str = "\
Examples:
  sudo coldstart trace --functions -o app.db -- ./build-instrumented/app
  coldstart order app.db --binary build/app --linker lld -o app.order
  clang++ ... -fuse-ld=lld -Wl,--symbol-ordering-file=app.order
  coldstart order ff.db --binary /usr/lib/firefox-esr/libxul.so --linker bolt -o xul.order
  coldstart order app.db --binary build/app --linker bfd --strategy balanced -o app.ld   (then -T app.ld)
  coldstart trace --blocks -o app.db -- ./bbmap/app   (built with clang -fbasic-block-address-map)
  coldstart order app.db --binary bbmap/app --linker lld --clusters app.clusters -o app.order
  clang ... -ffunction-sections -fbasic-block-sections=list=app.clusters -fuse-ld=lld -Wl,--symbol-ordering-file=app.order
  coldstart trace --blocks --discover app -o app.db -- ./app   (no block map: blocks found by disassembly)
  coldstart order app.db --binary app --linker bolt --clusters app.fdata -o app.order   (for llvm-bolt -data= -function-order=)";

#[derive(Debug, Args)]
pub struct OrderArgs {
    /// Profile database
    #[arg(value_name = "PROFILE.db")]
    pub profile: PathBuf,

    /// The binary to relink, as built without instrumentation
    #[arg(long, value_name = "BIN")]
    pub binary: PathBuf,

    /// The tool the file is for
    #[arg(long, value_parser = parse_linker)]
    pub linker: coldstart_layout::Linker,

    /// How to order
    #[arg(long, default_value = "first-call", value_parser = parse_strategy)]
    pub strategy: coldstart_layout::Strategy,

    /// Where to write the order file ("-" for stdout)
    #[arg(short, long, default_value = "-", value_name = "FILE")]
    pub output: PathBuf,

    /// Runs to take traces from [default: every complete run]. With --clusters: page-level
    /// runs of --binary whose touched data symbols follow those the start's code addresses
    /// [default: none]
    #[arg(long, value_delimiter = ',', value_name = "N,N,...")]
    pub runs: Vec<i64>,

    /// Which traced file holds --binary's code: for function traces, the instrumented
    /// build's path (a glob) [default: the traced file with --binary's file name]
    #[arg(long, value_name = "GLOB")]
    pub module: Option<String>,

    /// Use the page-level trace even when function traces exist
    #[arg(long)]
    pub pages: bool,

    /// Objects and archives of the link, to check sections (repeatable)
    #[arg(long, value_name = "PATH")]
    pub objects: Vec<PathBuf>,

    /// Split functions: from a block trace (`coldstart trace --blocks` of --binary), write
    /// here clang's cluster file (--linker lld, for -fbasic-block-sections=list=FILE; -o
    /// gets lld's symbol order) or BOLT's profile of the blocks that ran (--linker bolt,
    /// for llvm-bolt -data=FILE -split-functions; -o gets the function order)
    #[arg(long, value_name = "FILE", conflicts_with_all = ["pages", "module", "objects"])]
    pub clusters: Option<PathBuf>,

    /// With --clusters: the block runs to take, pooled (several starts see more of the
    /// paths a start can take) [default: the newest]
    #[arg(
        long,
        value_name = "N,..",
        value_delimiter = ',',
        requires = "clusters"
    )]
    pub block_run: Vec<i64>,

    /// GNU ld to ask for its version and default script (--linker bfd)
    #[arg(long, default_value = "ld", value_name = "LD")]
    pub ld: PathBuf,

    /// Print the diagnostics as JSON
    #[arg(long)]
    pub json: bool,
}

fn parse_linker(text: &str) -> Result<coldstart_layout::Linker, String> {
    text.parse()
        .map_err(|e: coldstart_layout::Error| e.to_string())
}

fn parse_strategy(text: &str) -> Result<coldstart_layout::Strategy, String> {
    text.parse()
        .map_err(|e: coldstart_layout::Error| e.to_string())
}

const RUNTIME_LONG: &str = "\
Build coldstart's function-tracing runtime into a directory: a static library, a shared \
library and a header. Compile the program with gcc -finstrument-functions or clang \
-finstrument-function-entry-bare, link the static library into the executable (or \
LD_PRELOAD the shared one for instrumented shared libraries), then trace it with \
`coldstart trace --functions`: the run records, per process, the order in which \
functions were first called and how often, for `coldstart order`. The record format is \
documented in docs/functions-format.md; a program can dump early by calling \
coldstart_functions_dump() or on the signal named in COLDSTART_FUNCTIONS_SIGNAL.";

const RUNTIME_EXAMPLES: &str = "\
Examples:
  coldstart runtime --out rt
  g++ -O2 -finstrument-functions -c app.cpp && g++ app.o rt/libcoldstart_functions.a -o app-instrumented
  sudo coldstart trace --functions -o app.db -- ./app-instrumented";

#[derive(Debug, Args)]
pub struct RuntimeArgs {
    /// Directory to write the runtime to (created if missing)
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
}

const SIMULATE_LONG: &str = "\
Predict what a traced start would read from disk under another read_ahead_kb, or with \
a binary laid out by an order file, without running it again or relinking: the pages \
one run touched are replayed in time order through a model of the kernel's readahead \
(read-around of read_ahead_kb on a fault, forward windows on executable mappings, \
asynchronous readahead marks, the mmap miss counter, fault-around). The best run to \
replay is one traced with readahead off (`trace --read-ahead-kb 0`), whose faults are \
exactly the pages the program demanded; it is chosen by default.

With --against RUN the prediction is set next to what a run traced at that setting \
measured, file by file, to check the model.";

const SIMULATE_EXAMPLES: &str = "\
Examples:
  sudo coldstart trace --read-ahead-kb 0 -o ff.db -- firefox-esr ...
  sudo coldstart trace --read-ahead-kb 128 -o ff.db -- firefox-esr ...
  coldstart simulate ff.db --read-ahead-kb 8192
  coldstart simulate ff.db --run 1 --against 2 --file '*libxul*'
  coldstart simulate ff.db --binary libxul.so --order startup.order --read-ahead-kb 128";

#[derive(Debug, Args)]
pub struct SimulateArgs {
    /// Profile database
    #[arg(value_name = "PROFILE.db")]
    pub profile: PathBuf,

    /// Run to replay [default: the latest complete run traced with readahead off, else
    /// the latest complete run]
    #[arg(long, value_name = "N")]
    pub run: Option<i64>,

    /// Device read_ahead_kb to predict for [default: that of --against, else of the run]
    #[arg(long, value_name = "KB")]
    pub read_ahead_kb: Option<u64>,

    /// fault_around_bytes in KiB [default: the run's]
    #[arg(long, value_name = "KB")]
    pub fault_around_kb: Option<u64>,

    /// A run traced at the predicted setting: show what it measured next to the prediction
    #[arg(long, value_name = "N")]
    pub against: Option<i64>,

    /// Only this binary (its path as traced, or a glob); with --order, the one laid out anew
    #[arg(long, value_name = "BIN")]
    pub binary: Option<String>,

    /// Predict the layout this order file gives --binary (any file `coldstart order`
    /// writes, or an lld, gold or BOLT order file)
    #[arg(long, value_name = "FILE", requires = "binary")]
    pub order: Option<PathBuf>,

    /// With --order: a run traced with --functions (an instrumented build); its
    /// called functions are replayed at their new places instead of whole touched
    /// pages, which count every symbol on a touched page as used
    #[arg(long, value_name = "N", requires = "order")]
    pub functions_run: Option<i64>,

    /// Predict the split layout `coldstart order --clusters` gives --binary (the build
    /// traced with --blocks, with its block map): the blocks the block run ran are
    /// replayed at their places in the split build
    #[arg(long, requires = "binary", conflicts_with = "order")]
    pub split: bool,

    /// With --split: the block runs to take, pooled as `order --clusters --block-run` pools
    /// them [default: the newest]
    #[arg(long, value_name = "N,..", value_delimiter = ',', requires = "split")]
    pub block_run: Vec<i64>,

    #[command(flatten)]
    pub format: OutputFormat,

    /// Files to show: a number or "all"
    #[arg(long, default_value = "15", value_name = "N|all", value_parser = parse_limit)]
    pub top: Limit,
}

const LOADCOST_LONG: &str = "\
Measure what the dynamic loader costs on this machine, one factor at a time: relative \
relocations (RELA and RELR), symbolic relocations (one symbol, or one distinct symbol \
each), exported symbols, PLT slots bound lazily or at load, static initializers, empty \
search-path entries before the library, the same code split over more libraries, and \
untouched size. For each factor and level it generates a C library that differs from a \
small base library in that factor only (built with the system's cc), a host that \
dlopen()s it by name and a program that has it as DT_NEEDED; it times both, warm and \
cold (the library's files evicted from the page cache), over --rounds rounds in a new \
shuffled order each round, and fits a line through the level medians: its slope is the \
cost per unit, with a 95% bootstrap interval. A direct measurement (applying the \
relative relocations of the same libraries by hand, once a round among the timed runs) \
checks the fit.

No root is needed; under sudo the programs run as the invoking user. The full \
experiment takes about ten minutes here; --quick (three small levels per factor) a \
minute. docs/loadcost.md explains the factors and what the figures say.";

const LOADCOST_EXAMPLES: &str = "\
Examples:
  coldstart loadcost --quick
  coldstart loadcost --rounds 40 --svg loadcost.svg > loadcost.txt
  coldstart loadcost --factors relative,relr,initializers --json > loadcost.json
  coldstart loadcost --dir /var/tmp/lc --quick     (keep the generated libraries)";

#[derive(Debug, Args)]
pub struct LoadcostArgs {
    /// Factors to vary [default: all]: relative, relr, symbolic, distinct, exported,
    /// plt_lazy, plt_now, initializers, search, libraries, size
    #[arg(long, value_delimiter = ',', value_name = "F,F,...", value_parser = parse_factor)]
    pub factors: Vec<coldstart_loadcost::design::Factor>,

    /// Timed rounds: each times every configuration once in every mode and cache state
    /// [default: 30, or 5 with --quick]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(2..))]
    pub rounds: Option<u64>,

    /// Three small levels per factor instead of five large ones: the shape in a minute
    #[arg(long)]
    pub quick: bool,

    /// Build the libraries here and keep them [default: a temporary directory, removed]
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,

    /// Also draw the level medians and fitted lines as an SVG
    #[arg(long, value_name = "FILE")]
    pub svg: Option<PathBuf>,

    /// Orders the runs and seeds the bootstrap
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub seed: u64,

    /// Print JSON
    #[arg(long)]
    pub json: bool,
}

fn parse_factor(text: &str) -> Result<coldstart_loadcost::design::Factor, String> {
    coldstart_loadcost::design::Factor::from_name(text).ok_or_else(|| {
        let names: Vec<&str> = coldstart_loadcost::design::Factor::ALL
            .iter()
            .map(|f| f.name())
            .collect();
        format!(
            "unknown factor {text:?}; the factors are {}",
            names.join(", ")
        )
    })
}

const PLAN_LONG: &str = "\
Compile a prefetch plan from one or more traced runs of a profile: for each file, the \
pages startup needed before it was ready (with readahead off, `trace --read-ahead-kb 0`, \
exactly the pages it demanded; otherwise the pages it faulted, read or had mapped by \
fault-around), pooled over the runs so that a page enters the plan only when at least \
--min-fraction of them needed it. Extents are ordered by when startup first needed them \
(the median over runs), merged when the gap between two is smaller than what one more \
request costs on the device (--merge-gap-kb, or measured with --calibrate), and split \
at --max-extent-kb. Each file keeps the size, modification time and build-id it had, so \
a changed file is skipped at replay. The plan is text, documented in \
docs/plan-format.md.

--refine makes the plan learn from the starts it serves (needs root, like trace): it \
seeds the plan from the profile's readahead-off runs (tracing --seeds of them first when \
there are none), then traces cold starts of the program through coldstart-run with the \
plan at the device's readahead, adds the pages the program still had to read itself (the \
page each fault or read() demanded, not the readahead window around it), drops pages an \
earlier refinement added that the program no longer uses, and repeats until a start \
leaves nothing to learn or --iterations have run. The plan file is replaced, atomically, \
only by a plan that did better than every one before it. The served starts are kept in the profile \
(`coldstart report --plan` explains each) and never seed a plan. With --no-read-around \
they are served the way `coldstart run --no-read-around` serves the plan, so that what \
the plan learns is what the program still reads that way.";

const PLAN_EXAMPLES: &str = "\
Examples:
  sudo coldstart trace --read-ahead-kb 0 -o ff.db -- firefox-esr ...   (three times)
  coldstart plan ff.db -o firefox.plan
  coldstart plan ff.db --runs 2,3 --min-fraction 0.6 --max-mb 100 -o firefox.plan
  sudo coldstart plan ff.db --calibrate -o firefox.plan
  sudo coldstart plan ff.db -o firefox.plan --refine -- firefox-esr --headless ...
  sudo coldstart plan ff.db -o firefox.plan --refine --no-read-around -- firefox-esr ...";

#[derive(Debug, Args)]
pub struct PlanArgs {
    /// Profile database
    #[arg(value_name = "PROFILE.db")]
    pub profile: PathBuf,

    /// Where to write the plan ("-" for stdout)
    #[arg(short, long, default_value = "-", value_name = "APP.plan")]
    pub output: PathBuf,

    /// Runs to pool [default: every complete run]
    #[arg(long, value_delimiter = ',', value_name = "N,N,...")]
    pub runs: Vec<i64>,

    /// A page is planned when at least this fraction of the runs needed it. Low by
    /// default: a page the plan misses costs the program a synchronous read and the
    /// kernel's readahead window around it, a page too many costs one page of reading
    #[arg(long, default_value_t = coldstart_plan::compile::DEFAULT_MIN_FRACTION, value_name = "F")]
    pub min_fraction: f64,

    /// Merge extents of a file whose gap is at most this [default: 8, or measured
    /// with --calibrate]
    #[arg(long, value_name = "KB")]
    pub merge_gap_kb: Option<u64>,

    /// Measure the device's cost of one more request against its bandwidth, on the
    /// plan's largest file, reading as `coldstart run` does (evicts it; root or the
    /// file's owner), and merge by that
    #[arg(long, conflicts_with = "merge_gap_kb")]
    pub calibrate: bool,

    /// Threads asking for the reads of --calibrate: the --threads `coldstart run` will use
    /// [default: the CPUs, from 2 to 8]
    #[arg(long, value_name = "N", requires = "calibrate")]
    pub threads: Option<usize>,

    /// Split extents longer than this
    #[arg(long, default_value_t = coldstart_plan::compile::DEFAULT_MAX_EXTENT_BYTES / 1024, value_name = "KB")]
    pub max_extent_kb: u64,

    /// Cap the plan's total size; the extents needed last are dropped
    #[arg(long, value_name = "MB")]
    pub max_mb: Option<u64>,

    /// Print a JSON summary (and the plan itself) on stdout instead of text
    #[arg(long)]
    pub json: bool,

    /// Refine the plan from traced starts of the program (after --) through the
    /// prefetcher, until a start leaves nothing to learn (root)
    #[arg(long, requires = "command")]
    pub refine: bool,

    /// --refine: cold starts with a plan to trace, at most
    #[arg(long, default_value_t = 4, value_name = "N", requires = "refine")]
    pub iterations: usize,

    /// --refine: readahead-off starts to trace first when the profile has none
    #[arg(long, default_value_t = 3, value_name = "N", requires = "refine")]
    pub seeds: usize,

    /// --refine: read_ahead_kb for the starts with a plan [default: the device's own]
    #[arg(long, value_name = "KB", requires = "refine")]
    pub read_ahead_kb: Option<u64>,

    /// --refine: serve the starts with a plan with --no-read-around, as the plan
    /// will be served, so that what the program still reads under it is what the
    /// plan learns
    #[arg(long, requires = "refine")]
    pub no_read_around: bool,

    #[command(flatten)]
    pub readiness: Readiness,

    #[command(flatten)]
    pub run_as: RunAs,

    /// --refine: the program to start, and its arguments
    #[arg(last = true, value_name = "COMMAND", requires = "refine")]
    pub command: Vec<std::ffi::OsString>,
}

const RUN_LONG: &str = "\
Start a program while a background process prefetches its plan: worker threads take \
the plan's files and extents in order, skip what is already resident, and ask the \
kernel for the rest, staying ahead of the program; one more thread first looks up the \
plan's lookups, the paths whose inodes the traced start read from disk. The program is \
started by exec, so its pid, standard streams, exit status and signals are its own; the \
prefetcher stops when it exits. A missing, unreadable or changed file never stops the program: such \
files are skipped and named once on standard error (each of them with --verbose). So is anything \
but a regular file on a disk (a FIFO, a device, a socket, a path under /proc, /sys or /dev), \
which is never opened.

--wait prefetches everything first, then starts the program. --method chooses how pages \
are brought in; whole-file and touch-whole are the peers (readahead of every planned \
file whole, as the old ld.so readahead patch did; vmtouch -t) for side-by-side \
benchmarks. --write-launcher writes a shell script that runs the program with this plan, \
for installing in front of the program; it uses the small coldstart-run binary (this \
command without the rest of coldstart, installed beside it) when it is there.";

const RUN_EXAMPLES: &str = "\
Examples:
  coldstart run --plan firefox.plan -- firefox-esr
  coldstart run --plan firefox.plan --wait --method pread -- firefox-esr
  coldstart bench --cache cold --vs 'coldstart run --plan ff.plan -- firefox-esr ...' -- firefox-esr ...
  coldstart run --plan firefox.plan --write-launcher /usr/local/bin/firefox -- /usr/bin/firefox-esr";

#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub prefetch: PrefetchArgs,

    /// Write a launcher script for this plan and command instead of running it
    #[arg(long, value_name = "PATH")]
    pub write_launcher: Option<PathBuf>,

    #[command(flatten)]
    pub program: TrailingCommand,
}

const EVICT_LONG: &str = "\
Drop files from the page cache (dirty data is written back first, then \
posix_fadvise DONTNEED) and verify with cachestat(2), or mincore(2) on kernels \
before 6.5, how many pages stayed resident. Pages that running processes map \
cannot be dropped: those files name the processes that map them (from \
/proc/PID/maps). Directories are walked; symbolic links to files are followed.

--check only measures residency, like vmtouch. --all drops the whole page cache, \
dentries and inodes (root). --profile evicts the files the traced program used in \
a run of a profile: the selective-cold state of `coldstart trace` and `bench`.

Exits 1 when a file could not be opened or evicted; pages held by mappings are \
reported, not an error.";

const EVICT_EXAMPLES: &str = "\
Examples:
  coldstart evict /usr/lib/firefox-esr
  coldstart evict --check /usr/lib/firefox-esr/libxul.so
  coldstart evict --profile ff.db --json
  sudo coldstart evict --all";

#[derive(Debug, Args)]
pub struct EvictArgs {
    /// Files or directories
    #[arg(value_name = "PATH", required_unless_present_any = ["profile", "all"])]
    pub paths: Vec<PathBuf>,

    /// Evict the files the program used in a run of this profile
    #[arg(long, value_name = "PROFILE.db", conflicts_with = "all")]
    pub profile: Option<PathBuf>,

    #[command(flatten)]
    pub profile_run: RunOfProfile,

    /// Only report how much of each file is resident; evict nothing
    #[arg(long, conflicts_with = "all")]
    pub check: bool,

    /// Drop the whole page cache, dentries and inodes (needs root)
    #[arg(long, conflicts_with = "paths")]
    pub all: bool,

    /// With --check: list the resident page ranges of each file
    #[arg(long, requires = "check")]
    pub pages: bool,

    /// Print JSON (field names in docs/evict-json.md)
    #[arg(long)]
    pub json: bool,
}

const BENCH_LONG: &str = "\
Run a command many times and time its start: from launch until it exits, prints a \
line matching --ready-regex or creates --ready-file (then its whole process tree is \
terminated). Before every run the page cache is put in the chosen state: warm (as \
the previous runs left it), cold (the whole page cache, dentries and inodes dropped; \
root), or selective (only the files the program uses are evicted, as after a reboot \
that kept shared libraries cached: the files come from --profile or from a first \
traced run).

Variants are interleaved run by run (A B A B ...), never run in blocks: every \
command of --vs in every --cache state given. A warm run whose files an eviction may \
have dropped since it last ran is preceded by an untimed run. Beside the time, each \
run counts the major and minor page faults and the bytes read from storage by the \
whole process tree (getrusage of the reaped tree).

Prints per variant the median, mean with its 95% confidence interval (Student t), \
standard deviation, min, max, outliers (median absolute deviation), and the ratio of \
each variant to the first with its 95% confidence interval (Fieller). Runs that time \
out or fail are listed and not counted. Started through sudo, the program runs as \
the invoking user. JSON field names are documented in docs/bench-json.md.";

const BENCH_EXAMPLES: &str = "\
Examples:
  coldstart bench -- python3 -c 'import json'
  sudo coldstart bench --cache warm,cold -n 10 --ready-regex . -- firefox-esr --headless --screenshot /tmp/x.png about:blank
  sudo coldstart bench --cache selective --profile ff.db -- firefox-esr ...
  coldstart bench --vs './app-ordered --quit' --markdown table.md -- ./app --quit";

#[derive(Debug, Args)]
#[command(
    mut_arg("ready_file", |a| a.help("Startup is over when this file exists (removed before every run)")),
    mut_arg("timeout", |a| a
        .help("A run not ready after this many seconds is killed and marked failed")
        .default_value("60"))
)]
pub struct BenchArgs {
    /// Page cache state before every run; several (warm,cold,selective) are
    /// interleaved as variants
    #[arg(long, value_enum, value_delimiter = ',', default_value = "warm")]
    pub cache: Vec<CacheArg>,

    /// Timed runs per variant
    #[arg(short = 'n', long, default_value_t = 10, value_name = "RUNS")]
    pub runs: usize,

    /// Untimed runs of each variant before the first timed one
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub warmup: usize,

    /// Another command to compare, split into words like a shell would (no shell
    /// runs it); repeatable
    #[arg(long, value_name = "COMMAND")]
    pub vs: Vec<String>,

    /// Names of the commands in tables (the main command first, then each --vs)
    #[arg(long, value_name = "NAME")]
    pub name: Vec<String>,

    #[command(flatten)]
    pub readiness: Readiness,

    /// Profile whose run names the files --cache selective evicts
    #[arg(long, value_name = "PROFILE.db")]
    pub profile: Option<PathBuf>,

    #[command(flatten)]
    pub profile_run: RunOfProfile,

    /// Write the results as JSON to this file ("-" for stdout)
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,

    /// Write the table as Markdown to this file ("-" for stdout)
    #[arg(long, value_name = "FILE")]
    pub markdown: Option<PathBuf>,

    /// Show the program's output (by default it is discarded)
    #[arg(long)]
    pub show_output: bool,

    #[command(flatten)]
    pub run_as: RunAs,

    #[command(flatten)]
    pub program: TrailingCommand,
}

const DEMO_LONG: &str = "\
Run coldstart's whole loop on its built-in sample application, shaped like a big \
native program whose cold start waits on the disk: a generated C++ program and its \
library (vtables, static initializers, relocation tables, a startup path that calls \
a known, scattered share of its functions among 120 MiB of code no start runs) and \
24 part libraries of 8 MiB whose initializers touch a sparse eighth of them; about \
320 MiB on disk, and 1.3 GiB in DIR with the builds the demo compares \
(DIR/src/manifest.json records what the start runs and touches).

It builds the app into --dir, checks that it starts (it prints READY) and inspects \
its binaries. As root it then traces its cold start (a report page with a chart), \
traces it again with readahead off and compiles its prefetch plan from that, \
builds it instrumented to record the functions its start calls, writes an order \
file per binary, relinks with them and traces the relinked app. It packs the \
app's relative relocations as DT_RELR (coldstart pack). Last it times the app's \
start, 10 interleaved runs each: warm, cold, cold with the plan, cold with an \
empty plan (what the launcher alone costs), relinked and packed, at the device's \
read_ahead_kb, and again at the kernel's default (128). Without root it skips the \
trace, the plan and the order files, and times warm against selective-cold (the \
app's own files evicted).

The plan's starts go through coldstart-run, the small launcher, when it is beside \
this binary. `cargo run` builds only the binary it runs: when cargo started the \
demo without coldstart-run, the demo builds it first; when it cannot, it says so \
and times `coldstart run`.

While it runs it prints one line per step on standard error. Then it prints a \
summary of a screen: what the cold start reads against what it uses, what each \
fix changed with its 95% interval (\"within the noise\" when the interval holds \
zero), and where to look next. The full report goes to DIR/demo-report.txt, and \
to standard output too with --verbose; --json prints all of it, with a summary \
object (docs/demo-json.md). A second run reuses what is up to date.";

const DEMO_EXAMPLES: &str = "\
Examples:
  sudo coldstart demo                   # the whole loop, a summary at the end
  sudo coldstart demo --tiny            # a small app: about a minute
  sudo coldstart demo --verbose         # the full report too
  coldstart demo --tiny                 # without root: build, inspect, pack, time
  coldstart demo --tiny --json | jq '.summary.settings[] | {read_ahead_kb, plan_gap_closed}'
  coldstart demo --tiny --json | jq '.inspections[0].relocations.by_type'
  coldstart demo --pack-relative-relocs --dir /tmp/demo-relr
  cargo run --release -p coldstart -- demo   # builds coldstart-run too";

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Where to generate and build the sample app
    #[arg(long, default_value = "coldstart-demo", value_name = "DIR")]
    pub dir: PathBuf,

    /// Seed of the generator (same seed, same program)
    #[arg(long, default_value_t = 1)]
    pub seed: u64,

    /// Number of translation units [default: 200, or 6 with --tiny]
    #[arg(long, value_name = "N")]
    pub translation_units: Option<u32>,

    /// Number of functions [default: 10000, or 60 with --tiny]
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

    /// Print the results as JSON (with a `summary` object: docs/demo-json.md)
    #[arg(long)]
    pub json: bool,

    /// Print the full report before the summary (it is always written to
    /// DIR/demo-report.txt), and every step's messages on stderr
    #[arg(long, short = 'v', conflicts_with = "json")]
    pub verbose: bool,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum CompilerArg {
    Gcc,
    Clang,
}

pub fn command() -> clap::Command {
    <Cli as clap::CommandFactory>::command()
}

#[cfg(test)]
mod tests {
    /// The demo's help says how many runs it times and at which
    /// read_ahead_kb, as the pipeline does.
    #[test]
    fn demo_help_names_the_pipelines_runs_and_setting() {
        let runs = coldstart_pipeline::bench::RUNS;
        let kb = coldstart_pipeline::order::KERNEL_DEFAULT_READ_AHEAD_KB;
        assert!(
            super::DEMO_LONG.contains(&format!("start, {runs} interleaved runs each")),
            "{}",
            super::DEMO_LONG
        );
        assert!(
            super::DEMO_LONG.contains(&format!("the kernel's default ({kb})")),
            "{}",
            super::DEMO_LONG
        );
    }

    /// Help text that names a library default in words must say the
    /// library's value.
    #[test]
    fn plan_help_names_the_library_merge_gap() {
        let mut command = super::command();
        let plan = command.find_subcommand_mut("plan").expect("plan");
        let help = plan.render_long_help().to_string();
        let default = coldstart_plan::compile::DEFAULT_MERGE_GAP_BYTES / 1024;
        assert!(
            help.contains(&format!("[default: {default}, or measured")),
            "{help}"
        );
    }
}

const SERVE_LONG: &str = "\
Run the service that notices every start of a program it holds a plan for and \
replays the plan beside it, with no wrapper and no change to how the program is \
started. It runs in the foreground (the systemd unit runs it) as root, and keeps \
its state (programs, plans, the starts it saw) in --state.

It is told of an exec of a planned executable by fanotify (notification events on \
those files only: other programs' execs cost nothing and no exec ever waits for \
it), waits for the exec to complete, and then replays the plan as the user who \
started the program, so a file that user cannot read is not read. A start whose \
environment has COLDSTART_SERVE=0 is never served, and a share of starts \
(--hold-out) is held out at random: the service compares the time to the end of \
served and held-out cold starts, and switches a plan off when its served starts \
are not faster. The end of a start is when its process tree falls quiet (less \
than a fifth of a CPU, little read) for the program's quiet time, its first \
process exits, or the cap.

It learns plans by itself (unless --no-learn): told of every exec on the \
machine's filesystems, it watches the start of a program it does not know, and \
when the start read --learn-min-read-mb from storage it traces the program's \
next start (its process tree only, nothing changed: no cache drop, no readahead \
setting), compiles a plan from it and serves the starts after; the first served \
starts are traced too and the plan compiled again from them. An executable that \
changes (a package upgrade) is learned again.

`coldstart serve install PLAN --program EXE` gives the service a plan made with \
`coldstart plan`; a running service picks it up at once. `coldstart serve forget \
EXE` removes a program.";

const SERVE_EXAMPLES: &str = "\
Examples:
  sudo coldstart plan ff.db -o ff.plan
  sudo coldstart serve install ff.plan --program /usr/bin/firefox-esr
  sudo coldstart serve
  sudo coldstart serve --state /tmp/cs-state --hold-out 20
  sudo coldstart serve --no-learn
  coldstart status";

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct ServeArgs {
    #[command(subcommand)]
    pub action: Option<ServeAction>,

    /// The service's state directory
    #[arg(long, value_name = "DIR", default_value = coldstart_serve::state::DEFAULT_STATE_DIR, global = true)]
    pub state: PathBuf,

    /// Percent of starts held out at random (not served), to measure plans against
    #[arg(long, value_name = "PERCENT", default_value_t = coldstart_serve::service::DEFAULT_HOLD_OUT_PERCENT,
          value_parser = clap::value_parser!(u32).range(0..=100))]
    pub hold_out: u32,

    /// Refuse plans larger than this many MiB
    #[arg(long, value_name = "MIB", default_value_t = coldstart_serve::admit::DEFAULT_MAX_PLAN_BYTES >> 20, global = true)]
    pub max_plan_mb: u64,

    /// Starts followed at once; a start beyond them is not served
    #[arg(long, value_name = "N", default_value_t = coldstart_serve::service::DEFAULT_MAX_STARTS)]
    pub max_starts: usize,

    /// Do not learn plans: serve only the plans installed by hand, and hear
    /// of no exec but theirs
    #[arg(long)]
    pub no_learn: bool,

    /// Learn a program once a start of it read this many MiB from storage
    #[arg(long, value_name = "MIB", default_value_t = (coldstart_serve::learn::DEFAULT_MIN_READ_BYTES >> 20) as f64)]
    pub learn_min_read_mb: f64,
}

#[derive(Debug, clap::Subcommand)]
pub enum ServeAction {
    /// Give the service a plan for an executable (replacing its plan and record)
    Install {
        /// The plan, from `coldstart plan`
        #[arg(value_name = "PLAN")]
        plan: PathBuf,
        /// The executable it is for (symbolic links are resolved)
        #[arg(long, value_name = "EXE")]
        program: PathBuf,
        /// A start is over when its process tree was quiet this long
        #[arg(long, value_name = "MS", default_value_t = coldstart_serve::install::DEFAULT_QUIET_MS)]
        quiet_ms: u64,
        /// A start is over this long after its exec at the latest
        #[arg(long, value_name = "MS", default_value_t = coldstart_serve::install::DEFAULT_CAP_MS)]
        cap_ms: u64,
    },
    /// Remove a program, its plan and its record
    Forget {
        /// The executable, or the program's id as `coldstart status` shows it
        #[arg(value_name = "EXE|ID")]
        program: String,
    },
}

const STATUS_LONG: &str = "\
Show what the service knows, per program: the executable, whether it is served, \
switched off or stale (the executable changed since its plan was made), the plan's \
size, the starts seen, served, held out and opted out, the median time to the end \
of a cold served and held-out start, and the gain with its 95% interval. Read from \
the state directory: it answers whether the service runs or not. docs/serve.md \
documents every field of --json.";

const STATUS_EXAMPLES: &str = "\
Examples:
  coldstart status
  coldstart status --json | jq '.programs[] | {exe, state, starts_served}'
  coldstart status --state /tmp/cs-state";

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// The service's state directory
    #[arg(long, value_name = "DIR", default_value = coldstart_serve::state::DEFAULT_STATE_DIR)]
    pub state: PathBuf,

    /// Print JSON instead of a table
    #[arg(long)]
    pub json: bool,
}
