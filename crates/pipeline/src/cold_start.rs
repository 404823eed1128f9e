//! Trace the app's cold start twice into one profile: once at the device's
//! readahead for the report and chart, once with readahead off for the
//! exact pages the start needs (what the plan is compiled from and the
//! order loop's "before").

use crate::{Step, cold_trace, sample_launch};
use anyhow::Context;
use coldstart_analyze::{RunReport, Timeline};
use coldstart_profile::{Profile, RunId};
use coldstart_record::trace::{TraceOptions, trace};
use coldstart_system::launch::is_root;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

/// The traced cold start.
pub struct ColdStart {
    /// The run at the device's readahead, analyzed with attribution.
    pub report: RunReport,
    pub timeline: Timeline,
    pub profile: PathBuf,
    /// A second cold run traced with readahead off: the exact pages the
    /// start needs, which the plan is compiled from.
    pub demand_run: RunId,
}

/// Whether the start could be traced here.
pub enum Tracing {
    Traced(Box<ColdStart>),
    /// Tracing needs root; the reason says how to get it.
    NotRoot(String),
}

impl Tracing {
    pub fn traced(&self) -> Option<&ColdStart> {
        match self {
            Tracing::Traced(start) => Some(start),
            Tracing::NotRoot(_) => None,
        }
    }

    pub fn skipped(&self) -> Option<&str> {
        match self {
            Tracing::Traced(_) => None,
            Tracing::NotRoot(reason) => Some(reason),
        }
    }
}

/// Traces `executable` from a cold page cache into `profile_path`.
pub fn trace_cold_start(
    executable: &Path,
    profile_path: &Path,
    step: Step<'_>,
) -> anyhow::Result<Tracing> {
    if !is_root() {
        let reason = "tracing needs root: run `sudo coldstart demo` to trace the cold start too";
        step(&format!("skipping the trace: {reason}"));
        return Ok(Tracing::NotRoot(reason.to_string()));
    }
    step("tracing its cold start (the page cache is dropped first)");
    let mut profile = Profile::create_or_open(profile_path)?;
    let interrupted = AtomicBool::new(false);
    let options = TraceOptions {
        user_faults: true,
        ..cold_trace(sample_launch(executable)?, None)
    };
    let summary = trace(&mut profile, &options, &interrupted, |_| {}, |_| {})
        .context("tracing the sample app")?;
    let (report, timeline) = coldstart_analyze::analyze(
        &profile,
        &coldstart_analyze::Options {
            run: Some(summary.run),
            attribute: true,
            ..Default::default()
        },
    )?;

    step("tracing it cold again with readahead off, for its prefetch plan");
    let demand = trace(
        &mut profile,
        &cold_trace(sample_launch(executable)?, Some(0)),
        &interrupted,
        |_| {},
        |_| {},
    )
    .context("tracing the sample app with readahead off")?;
    Ok(Tracing::Traced(Box::new(ColdStart {
        report,
        timeline,
        profile: profile_path.to_path_buf(),
        demand_run: demand.run,
    })))
}
