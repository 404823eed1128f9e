//! `coldstart runtime`: build the function-tracing runtime and say how to
//! link it.

use crate::args::RuntimeArgs;
use crate::output;
use std::process::ExitCode;

pub fn run(args: &RuntimeArgs) -> anyhow::Result<ExitCode> {
    let files = coldstart_record::functions::build_runtime(&args.out)?;
    output::print_text(&format!(
        "built {}\n      {}\n      {}\n\
         Compile with -finstrument-functions (gcc) or -finstrument-function-entry-bare (clang),\n\
         link {} into the executable, then: sudo coldstart trace --functions -o APP.db -- ./APP\n",
        files.static_lib.display(),
        files.shared.display(),
        files.header.display(),
        files.static_lib.display(),
    ))?;
    Ok(ExitCode::SUCCESS)
}
