//! `coldstart run`: start a program by exec while a detached prefetcher
//! replays its plan. The program keeps coldstart's pid, streams, exit status
//! and signals; nothing about the plan can keep it from starting.

use crate::args::RunArgs;
use anyhow::Context;
use coldstart_prefetch::launch::{self, Launch};
use coldstart_prefetch::launcher::{LauncherScript, Wrapper, launcher_script};
use coldstart_prefetch::replay::{self, ReplayOptions};
use std::path::Path;
use std::process::ExitCode;

pub fn run(args: &RunArgs) -> anyhow::Result<ExitCode> {
    if let Some(path) = &args.write_launcher {
        return write_launcher(args, path);
    }
    let launch = Launch {
        plan: args.plan.clone(),
        replay: ReplayOptions {
            threads: args
                .threads
                .unwrap_or_else(replay::default_threads)
                .clamp(1, 256),
            method: args.method,
        },
        wait: args.wait,
        verbose: args.verbose,
    };
    Ok(ExitCode::from(launch::exec_with_plan(
        &launch,
        &args.command,
    )))
}

fn write_launcher(args: &RunArgs, path: &Path) -> anyhow::Result<ExitCode> {
    let coldstart = std::env::current_exe().context("cannot find the coldstart binary")?;
    let plan = std::path::absolute(&args.plan)
        .with_context(|| format!("cannot resolve {}", args.plan.display()))?;
    let script = launcher_script(&LauncherScript {
        wrapper: &Wrapper::beside(coldstart),
        plan: &plan,
        command: &args.command,
        threads: args.threads,
        method: args.method,
    })?;
    std::fs::write(path, script).with_context(|| format!("cannot write {}", path.display()))?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
        .with_context(|| format!("cannot make {} executable", path.display()))?;
    eprintln!("coldstart run: wrote the launcher {}", path.display());
    Ok(ExitCode::SUCCESS)
}
