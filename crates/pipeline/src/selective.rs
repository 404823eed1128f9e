//! The files selective-cold eviction drops before each start: the ones a
//! given profile's run used, or, without one, the ones a traced cold start
//! of each command uses. Learning them takes the tracer and the analysis
//! of what a run used, so it lives here, where the rooms meet.

use crate::Step;
use anyhow::{Context, bail};
use coldstart_analyze as analyze;
use coldstart_profile::{Profile, RunId};
use coldstart_record::trace::{self, TraceOptions};
use coldstart_system::launch::{self, Forward, LaunchSpec};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

/// Where the files to evict come from.
pub enum FilesFrom<'a> {
    /// The files `run` (None: the latest complete run) of this profile used.
    Profile { path: &'a Path, run: Option<RunId> },
    /// The files a traced cold start of each command uses (needs root).
    ColdStarts(&'a [LaunchSpec]),
}

/// The files selective-cold evicts, each once, in the order first found.
pub fn selective_files(
    from: FilesFrom<'_>,
    interrupted: &AtomicBool,
    step: Step<'_>,
) -> anyhow::Result<Vec<PathBuf>> {
    match from {
        FilesFrom::Profile { path, run } => files_of_profile(path, run),
        FilesFrom::ColdStarts(commands) => files_of_cold_starts(commands, interrupted, step),
    }
}

fn files_of_profile(path: &Path, run: Option<RunId>) -> anyhow::Result<Vec<PathBuf>> {
    let profile = Profile::open(path)?;
    let files = analyze::files_used(&profile, run)
        .with_context(|| format!("cannot read the files of {}", path.display()))?;
    if files.is_empty() {
        bail!("{}: the run names no file to evict", path.display());
    }
    Ok(files)
}

/// Traces one cold start of each command into a scratch profile, removed
/// afterwards, and collects the files each used.
fn files_of_cold_starts(
    commands: &[LaunchSpec],
    interrupted: &AtomicBool,
    step: Step<'_>,
) -> anyhow::Result<Vec<PathBuf>> {
    if !launch::is_root() {
        bail!(
            "--cache selective evicts the files the program uses: give --profile PROFILE.db \
             (from coldstart trace), or run as root so that bench traces a first cold start"
        );
    }
    let dir = scratch_dir()?;
    let mut files: Vec<PathBuf> = Vec::new();
    for (index, spec) in commands.iter().enumerate() {
        step(&format!(
            "coldstart: tracing a cold start of {} to learn the files it uses",
            coldstart_report::bench::short_name(&spec.argv)
        ));
        let db = dir.join(format!("first-{index}.db"));
        let mut profile = Profile::create_or_open(&db)?;
        let options = TraceOptions::cold(LaunchSpec {
            forward: Forward::Discard,
            ..spec.clone()
        });
        trace::trace(&mut profile, &options, interrupted, |_| {}, |_| {})
            .context("the first traced run failed")?;
        for file in analyze::files_used(&profile, None)? {
            if !files.contains(&file) {
                files.push(file);
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(files)
}

fn scratch_dir() -> anyhow::Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("coldstart-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    Ok(dir)
}
