//! The `coldstart` command: parse the command line, run one command, turn
//! its errors into one line on stderr and an exit code. All the work lives
//! in the library crates (one per room); this binary only wires them up.

mod args;
mod commands;
mod output;

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = args::Cli::parse();
    let result = match cli.command {
        args::Command::Inspect(a) => commands::inspect::run(&a),
        args::Command::Trace(a) => commands::trace::run(&a),
        args::Command::Runs(a) => commands::runs::run(&a),
        args::Command::Report(a) => commands::report::run(&a),
        args::Command::Order(a) => commands::order::run(&a),
        args::Command::Runtime(a) => commands::runtime::run(&a),
        args::Command::Pack(a) => commands::pack::run(&a),
        args::Command::Simulate(a) => commands::simulate::run(&a),
        args::Command::Loadcost(a) => commands::loadcost::run(&a),
        args::Command::Evict(a) => commands::evict::run(&a),
        args::Command::Plan(a) => commands::plan::run(&a),
        args::Command::Run(a) => commands::run::run(&a),
        args::Command::Bench(a) => commands::bench::run(&a),
        args::Command::Demo(a) => commands::demo::run(&a),
        args::Command::Serve(a) => commands::serve::run(&a),
        args::Command::Status(a) => commands::serve::status(&a),
        args::Command::Completions { shell } => commands::completions(shell),
        args::Command::Manpage => commands::manpage(),
    };
    match result {
        Ok(code) => code,
        Err(err) if output::is_broken_pipe(&err) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("coldstart: error: {err:#}");
            ExitCode::FAILURE
        }
    }
}
