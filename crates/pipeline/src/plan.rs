//! Compile the prefetch plan of a traced start and write it beside the
//! profile.

use crate::Step;
use anyhow::Context;
use coldstart_plan::compile::{CompileOptions, compile};
use coldstart_prefetch::Plan;
use coldstart_profile::{Profile, RunId};
use std::path::Path;

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
