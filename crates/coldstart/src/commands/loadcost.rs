//! `coldstart loadcost`: build the generated libraries, time them, fit the
//! cost per unit of each factor and print it as text or JSON (and an SVG).

use crate::args::LoadcostArgs;
use crate::output;
use anyhow::Context;
use coldstart_loadcost::design::{Design, Factor};
use coldstart_loadcost::{Options, Progress};
use std::process::ExitCode;
use std::sync::Mutex;
use std::sync::atomic::Ordering;

pub fn run(args: &LoadcostArgs) -> anyhow::Result<ExitCode> {
    let interrupted = super::interrupt_flag()?;
    let factors = if args.factors.is_empty() {
        Factor::ALL.to_vec()
    } else {
        let mut factors = args.factors.clone();
        factors.sort();
        factors.dedup();
        factors
    };
    let rounds = args
        .rounds
        .map_or(if args.quick { 5 } else { 30 }, |r| r as usize);
    let design = if args.quick {
        Design::quick(&factors, rounds)
    } else {
        Design::full(&factors, rounds)
    };

    // A temporary directory unless the user wants the libraries kept; it
    // must be searchable by the invoking user when running under sudo.
    let temporary = match &args.dir {
        Some(_) => None,
        None => Some(
            tempfile::Builder::new()
                .prefix("coldstart-loadcost-")
                .tempdir_in(std::env::temp_dir())
                .context("cannot create a temporary work directory")?,
        ),
    };
    let work_dir = match (&args.dir, &temporary) {
        (Some(dir), _) => dir.clone(),
        (None, Some(temp)) => temp.path().to_path_buf(),
        (None, None) => unreachable!("a temporary directory exists when --dir is absent"),
    };
    let options = Options {
        design,
        work_dir,
        seed: args.seed,
        jobs: std::thread::available_parallelism().map_or(2, usize::from),
    };

    let bar = Mutex::new(None::<(&'static str, indicatif::ProgressBar)>);
    let progress = |event: Progress| {
        let (label, done, total) = match event {
            Progress::Building { done, total } => ("building", done, total),
            Progress::Timing { done, total } => ("timing", done, total),
        };
        let mut bar = bar.lock().expect("the progress callback does not panic");
        if bar.as_ref().is_none_or(|(current, _)| *current != label) {
            if let Some((_, old)) = bar.take() {
                old.finish_and_clear();
            }
            *bar = Some((label, output::progress(total as u64, label)));
        }
        if let Some((_, current)) = bar.as_ref() {
            current.set_position(done as u64);
        }
    };
    let result = coldstart_loadcost::run(&options, &interrupted, &progress);
    if let Some((_, old)) = bar.lock().expect("no panic").take() {
        old.finish_and_clear();
    }
    let result = result?;

    if let Some(path) = &args.svg {
        std::fs::write(path, coldstart_report::loadcost::svg(&result))
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    if args.json {
        output::print_json(&result)?;
    } else {
        output::print_text(&coldstart_report::loadcost::text(&result))?;
    }
    if result.interrupted || interrupted.load(Ordering::Relaxed) {
        output::step("coldstart: interrupted: the figures cover the rounds completed");
        return Ok(ExitCode::from(130));
    }
    Ok(ExitCode::SUCCESS)
}
