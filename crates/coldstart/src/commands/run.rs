//! `coldstart run`: start a program by exec while a detached prefetcher
//! replays its plan. The program keeps coldstart's pid, streams, exit status
//! and signals; nothing about the plan can keep it from starting.

use crate::args::RunArgs;
use anyhow::Context;
use coldstart_prefetch::launch;
use coldstart_prefetch::launcher::{LauncherScript, Wrapper, launcher_script};
use std::path::Path;
use std::process::ExitCode;

pub fn run(args: &RunArgs) -> anyhow::Result<ExitCode> {
    if let Some(path) = &args.write_launcher {
        return write_launcher(args, path);
    }
    Ok(ExitCode::from(launch::exec_with_plan(
        &args.prefetch.launch(),
        &args.program.command,
    )))
}

fn write_launcher(args: &RunArgs, path: &Path) -> anyhow::Result<ExitCode> {
    let coldstart = std::env::current_exe().context("cannot find the coldstart binary")?;
    let plan = std::path::absolute(&args.prefetch.plan)
        .with_context(|| format!("cannot resolve {}", args.prefetch.plan.display()))?;
    let script = launcher_script(&LauncherScript {
        wrapper: &Wrapper::beside(coldstart),
        plan: &plan,
        command: &args.program.command,
        threads: args.prefetch.threads,
        method: args.prefetch.method,
        lead_kb: args.prefetch.lead_kb,
        window_kb: args.prefetch.window_kb,
        no_read_around: args.prefetch.no_read_around,
    })?;
    std::fs::write(path, script).with_context(|| format!("cannot write {}", path.display()))?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
        .with_context(|| format!("cannot make {} executable", path.display()))?;
    eprintln!("coldstart run: wrote the launcher {}", path.display());
    Ok(ExitCode::SUCCESS)
}
