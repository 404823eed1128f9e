//! One module per subcommand: each turns validated arguments into calls on
//! the library crates and prints the result.

pub mod demo;
pub mod evict;
pub mod inspect;
pub mod report;
pub mod runs;
pub mod trace;

use std::process::ExitCode;

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
