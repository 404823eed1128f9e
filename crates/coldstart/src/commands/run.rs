//! `coldstart run`: start a program by exec while a detached prefetcher
//! replays its plan. The program keeps coldstart's pid, streams, exit status
//! and signals; nothing about the plan can keep it from starting.

use crate::args::RunArgs;
use anyhow::Context;
use coldstart_prefetch::launch;
use coldstart_prefetch::replay::Method;
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
    let quote = |text: &str| -> anyhow::Result<String> {
        Ok(shlex::try_quote(text)
            .with_context(|| format!("{text:?} cannot be quoted for the shell"))?
            .into_owned())
    };
    let launcher = wrapper()?;
    let plan = std::path::absolute(&args.prefetch.plan)
        .with_context(|| format!("cannot resolve {}", args.prefetch.plan.display()))?;
    let command = args
        .program
        .command
        .iter()
        .map(|a| quote(&a.to_string_lossy()))
        .collect::<anyhow::Result<Vec<_>>>()?
        .join(" ");
    let mut options = String::new();
    if let Some(threads) = args.prefetch.threads {
        options.push_str(&format!(" --threads {threads}"));
    }
    if args.prefetch.method != Method::Readahead {
        options.push_str(&format!(" --method {}", args.prefetch.method.as_str()));
    }
    let script = format!(
        "#!/bin/sh\n\
         # Starts {program} while coldstart prefetches what its start needs\n\
         # (written by coldstart {version}). Without coldstart or the plan, the\n\
         # program starts unchanged.\n\
         launcher={launcher}\n\
         plan={plan}\n\
         if [ -x \"$launcher\" ] && [ -r \"$plan\" ]; then\n\
         \x20   exec \"$launcher\"{subcommand} --plan \"$plan\"{options} -- {command} \"$@\"\n\
         fi\n\
         exec {command} \"$@\"\n",
        program = args.program.command[0].to_string_lossy(),
        version = env!("CARGO_PKG_VERSION"),
        launcher = quote(&launcher.path.to_string_lossy())?,
        subcommand = launcher.subcommand,
        plan = quote(&plan.to_string_lossy())?,
    );
    std::fs::write(path, script).with_context(|| format!("cannot write {}", path.display()))?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
        .with_context(|| format!("cannot make {} executable", path.display()))?;
    eprintln!("coldstart run: wrote the launcher {}", path.display());
    Ok(ExitCode::SUCCESS)
}

/// What starts a program with a plan: the small coldstart-run wrapper beside
/// this binary when it is there (it reads about 1.7 MiB cold where coldstart
/// reads about 17 MiB), else `coldstart run`.
pub struct Wrapper {
    pub path: std::path::PathBuf,
    /// " run" for coldstart itself, "" for coldstart-run.
    pub subcommand: &'static str,
}

pub fn wrapper() -> anyhow::Result<Wrapper> {
    let coldstart = std::env::current_exe().context("cannot find the coldstart binary")?;
    let small = coldstart.with_file_name("coldstart-run");
    Ok(if small.is_file() {
        Wrapper {
            path: small,
            subcommand: "",
        }
    } else {
        Wrapper {
            path: coldstart,
            subcommand: " run",
        }
    })
}
