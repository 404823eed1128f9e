//! One module per subcommand: each turns validated arguments into calls on
//! the library crates and prints the result.

pub mod bench;
mod blocks;
pub mod demo;
pub mod evict;
pub mod inspect;
pub mod loadcost;
pub mod order;
pub mod pack;
pub mod plan;
pub mod report;
pub mod run;
pub mod runs;
pub mod runtime;
pub mod serve;
pub mod simulate;
pub mod trace;

use anyhow::Context;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

pub fn completions(shell: clap_complete::Shell) -> anyhow::Result<ExitCode> {
    let mut command = crate::args::command();
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut command, "coldstart", &mut out);
    crate::output::print_text(&String::from_utf8_lossy(&out))?;
    Ok(ExitCode::SUCCESS)
}

pub fn manpage() -> anyhow::Result<ExitCode> {
    let mut out = Vec::new();
    clap_mangen::Man::new(crate::args::command()).render(&mut out)?;
    crate::output::print_text(&String::from_utf8_lossy(&out))?;
    Ok(ExitCode::SUCCESS)
}

/// A flag raised by Ctrl-C (and SIGTERM, SIGHUP): the measuring commands stop
/// cleanly, keeping what they recorded, instead of dying mid-run.
pub fn interrupt_flag() -> anyhow::Result<Arc<AtomicBool>> {
    let interrupted = Arc::new(AtomicBool::new(false));
    for signal in [
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
    ] {
        signal_hook::flag::register(signal, Arc::clone(&interrupted))
            .context("cannot install the Ctrl-C handler")?;
    }
    Ok(interrupted)
}
