//! `coldstart bench`: builds the variants (commands × cache states), finds the
//! files selective-cold evicts, runs the benchmark with a progress bar that
//! shows the running medians, and writes the table, JSON and Markdown.

use crate::args::BenchArgs;
use anyhow::{Context, bail};
use coldstart_bench::{self as bench, BenchResult, Environment, Event, Variant};
use coldstart_pipeline::selective::{FilesFrom, selective_files};
use coldstart_profile::CacheMode;
use coldstart_report::table::Style;
use coldstart_system::launch::{self, Forward, LaunchSpec};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;

pub fn run(args: &BenchArgs) -> anyhow::Result<ExitCode> {
    if args.runs == 0 {
        bail!("--runs must be at least 1");
    }
    let argvs = command_lines(args)?;
    let caches = cache_states(args)?;
    let commands = launch_specs(args, &argvs)?;
    let interrupted = super::interrupt_flag()?;
    let evict = if caches.contains(&CacheMode::Selective) {
        let from = match &args.profile {
            Some(path) => FilesFrom::Profile {
                path,
                run: args.profile_run.run,
            },
            None => FilesFrom::ColdStarts(&commands),
        };
        selective_files(from, &interrupted, &mut |line| crate::output::step(line))?
    } else {
        Vec::new()
    };
    let names = coldstart_report::bench::command_labels(&args.name, &argvs);
    let options = bench::Options {
        commands,
        variants: Variant::each_in_each(names, &caches),
        runs: args.runs,
        warmup: args.warmup,
        evict,
        grace: launch::DEFAULT_GRACE,
    };
    let result = bench_with_progress(args, &options, &argvs, &interrupted)?;
    write_results(args, &result)?;
    Ok(if result.interrupted {
        ExitCode::from(130)
    } else if result.variants.iter().any(|v| v.runs_ok == 0) {
        eprintln!("coldstart: error: a variant has no counted run (see the warnings)");
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// The main command, then each `--vs` split as a shell would.
fn command_lines(args: &BenchArgs) -> anyhow::Result<Vec<Vec<OsString>>> {
    let mut argvs: Vec<Vec<OsString>> = vec![args.program.command.clone()];
    for other in &args.vs {
        let words = shlex::split(other)
            .filter(|w| !w.is_empty())
            .with_context(|| format!("--vs {other:?}: unbalanced quotes or an empty command"))?;
        argvs.push(words.into_iter().map(OsString::from).collect());
    }
    if args.name.len() > argvs.len() {
        bail!(
            "{} --name given for {} commands (the main command, then each --vs)",
            args.name.len(),
            argvs.len()
        );
    }
    Ok(argvs)
}

/// The cache states asked for, each once, in the order given; cold needs
/// root.
fn cache_states(args: &BenchArgs) -> anyhow::Result<Vec<CacheMode>> {
    let mut caches: Vec<CacheMode> = Vec::new();
    for cache in &args.cache {
        let mode = CacheMode::from(*cache);
        if !caches.contains(&mode) {
            caches.push(mode);
        }
    }
    if caches.contains(&CacheMode::Cold) && !launch::is_root() {
        bail!(
            "--cache cold drops the whole page cache, which needs root: run sudo coldstart bench ... \
             (the program still runs as you), or use --cache selective with --profile"
        );
    }
    Ok(caches)
}

/// How each command is started and when a run of it counts as ready.
fn launch_specs(args: &BenchArgs, argvs: &[Vec<OsString>]) -> anyhow::Result<Vec<LaunchSpec>> {
    let timeout = args.readiness.timeout()?;
    let ready_regex = args.readiness.regex()?;
    let identity = args.run_as.identity()?;
    Ok(argvs
        .iter()
        .map(|argv| LaunchSpec {
            argv: argv.clone(),
            identity: identity.clone(),
            ready_regex: ready_regex.clone(),
            ready_file: args.readiness.ready_file.clone(),
            timeout: Some(timeout),
            forward: if args.show_output {
                Forward::ToStderr
            } else {
                Forward::Discard
            },
            env: Vec::new(),
        })
        .collect())
}

/// Runs the benchmark with a progress bar showing the running medians and
/// naming each failed run as it happens.
fn bench_with_progress(
    args: &BenchArgs,
    options: &bench::Options,
    argvs: &[Vec<OsString>],
    interrupted: &AtomicBool,
) -> anyhow::Result<BenchResult> {
    let environment = Environment::detect(Path::new(&args.program.command[0]));
    let bar = crate::output::progress_with(
        (options.runs * options.variants.len()) as u64,
        "[{bar:24}] {pos}/{len} {elapsed} median: {msg}",
    );
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); options.variants.len()];
    let result = bench::bench(options, environment, interrupted, |event| match event {
        Event::Warmup { command, index } => {
            bar.set_message(format!(
                "warm-up {} of {}",
                index + 1,
                coldstart_report::bench::short_name(&argvs[command])
            ));
        }
        Event::Rewarm { variant } => {
            bar.set_message(format!("re-warming {}", options.variants[variant].name));
        }
        Event::Run(record) => {
            if record.ok {
                times[record.variant].push(record.wall_ms);
            } else if let Some(why) = &record.failure {
                bar.suspend(|| {
                    eprintln!(
                        "coldstart: {} run {}: {why}",
                        options.variants[record.variant].name,
                        record.round + 1
                    )
                });
            }
            bar.inc(1);
            bar.set_message(coldstart_report::bench::running_medians(
                &options.variants,
                &times,
            ));
        }
    })?;
    bar.finish_and_clear();
    Ok(result)
}

/// `--json` and `--markdown` where asked (`-` is stdout), and the table on
/// stdout unless one of them took it.
fn write_results(args: &BenchArgs, result: &BenchResult) -> anyhow::Result<()> {
    let to_stdout = |p: &Option<PathBuf>| p.as_deref() == Some(Path::new("-"));
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(result)? + "\n";
        write_out(path, &text)?;
    }
    if let Some(path) = &args.markdown {
        write_out(
            path,
            &coldstart_report::bench::render(result, Style::Markdown),
        )?;
    }
    if !to_stdout(&args.json) && !to_stdout(&args.markdown) {
        crate::output::print_text(&coldstart_report::bench::render(result, Style::Plain))?;
    }
    Ok(())
}

fn write_out(path: &Path, text: &str) -> anyhow::Result<()> {
    if path == Path::new("-") {
        crate::output::print_text(text)
    } else {
        std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))
    }
}
