//! Compile the prefetch plan of a traced start and write it beside the
//! profile; and the empty plan that times the launcher alone.

use crate::Step;
use anyhow::Context;
use coldstart_plan::compile::{CompileOptions, compile};
use coldstart_prefetch::Plan;
use coldstart_profile::{Profile, RunId};
use std::path::{Path, PathBuf};

/// Compiles `run` of the profile at `profile` into a plan written to `path`.
pub fn compile_plan(
    profile: &Path,
    run: RunId,
    path: &Path,
    step: Step<'_>,
) -> anyhow::Result<Plan> {
    let opened = Profile::open(profile)?;
    let page_size = opened.run(Some(run))?.start.page_size;
    let compiled = compile(
        &opened,
        &profile.display().to_string(),
        &CompileOptions {
            runs: Some(vec![run]),
            ..CompileOptions::for_page_size(page_size)
        },
    )
    .context("compiling the sample app's prefetch plan")?;
    coldstart_prefetch::format::save(&compiled.plan, path)
        .with_context(|| format!("cannot write {}", path.display()))?;
    step(&format!(
        "compiled its prefetch plan: {} extents of {} files, {} KiB ({})",
        compiled.plan.extents.len(),
        compiled.plan.files.len(),
        compiled.plan.bytes() / 1024,
        path.display()
    ));
    Ok(compiled.plan)
}

/// Writes beside `path` (a plan) a plan of no files, no extents and no
/// lookups, and returns its path: served by it, a start pays the launcher's
/// own start (its binary read and run, the prefetcher forked) and nothing
/// is prefetched, which tells that cost apart from the plan's effect.
pub fn empty_plan_beside(path: &Path) -> anyhow::Result<PathBuf> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let plan = coldstart_prefetch::format::parse(&text, path)?;
    let empty = Plan {
        files: Vec::new(),
        extents: Vec::new(),
        lookups: Vec::new(),
        ..plan
    };
    let out = path.with_extension("empty.plan");
    coldstart_prefetch::format::save(&empty, &out)
        .with_context(|| format!("cannot write {}", out.display()))?;
    Ok(out)
}
