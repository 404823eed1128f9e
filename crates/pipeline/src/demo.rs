//! The result of `coldstart demo`: every step's output on the sample app,
//! for its --json and its text report alike.

use crate::Step;
use crate::bench::{StartBench, bench_starts};
use crate::order::{KERNEL_DEFAULT_READ_AHEAD_KB, OrderLoop, StartupIo};
use crate::summary::DemoSummary;
use coldstart_binary::Inspection;
use coldstart_prefetch::launcher::Wrapper;
use coldstart_sample::{BuiltApp, SampleSpec};
use serde::Serialize;
use std::path::{Path, PathBuf};

/// The sample app's executable, library and parts packed side by side (the
/// executable finds the libraries through RUNPATH $ORIGIN).
#[derive(Debug, Serialize)]
pub struct PackedApp {
    pub executable: PathBuf,
    pub library: PathBuf,
    pub parts: Vec<PathBuf>,
    /// One per binary, in the order of [`PackedApp::binaries`].
    pub reports: Vec<coldstart_pack::Report>,
    /// What the packed executable printed: the same as the original.
    pub output_matches: bool,
}

impl PackedApp {
    /// The executable first, then the library and the parts.
    pub fn binaries(&self) -> Vec<PathBuf> {
        let mut binaries = vec![self.executable.clone(), self.library.clone()];
        binaries.extend(self.parts.iter().cloned());
        binaries
    }
}

/// Packs every binary of `app` into `dir`, runs the packed program and
/// compares its output with `expected`. A file pack refuses (say, a build
/// already linked with -z pack-relative-relocs) is the Err.
pub fn pack_app(
    app: &coldstart_sample::BuiltApp,
    dir: &Path,
    expected: &str,
) -> anyhow::Result<PackedApp> {
    use anyhow::Context;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut reports = Vec::new();
    let mut outputs = Vec::new();
    for input in app.binaries() {
        let input = input.as_path();
        let output = dir.join(input.file_name().unwrap_or_default());
        reports.push(coldstart_pack::pack_file(input, Some(&output))?);
        outputs.push(output);
    }
    // It runs in its own directory, and exec resolves a relative path with
    // a slash against the new working directory: made absolute first (the
    // demo's default directory is relative, and this step always failed).
    let program = std::path::absolute(&outputs[0])
        .with_context(|| format!("finding {}", outputs[0].display()))?;
    let ran = std::process::Command::new(&program)
        .current_dir(dir)
        .output()
        .with_context(|| format!("running {}", outputs[0].display()))?;
    let printed = String::from_utf8_lossy(&ran.stdout).trim().to_string();
    Ok(PackedApp {
        executable: outputs[0].clone(),
        library: outputs[1].clone(),
        parts: outputs[2..].to_vec(),
        reports,
        output_matches: ran.status.success() && printed == expected,
    })
}

/// Times `plain` again with every device's read_ahead_kb held at the
/// kernel's default (restored after): warm, cold, cold with `plan` and with
/// an empty plan, and `relinked` cold, interleaved. None when the device
/// holding the app is at that setting already, where the demo's main bench
/// timed it. The whole bench is kept, for the summary's intervals. Root
/// only, as cold starts are.
pub fn bench_at_kernel_default(
    plain: &BuiltApp,
    plan: &Path,
    wrapper: &Wrapper,
    relinked: Option<&BuiltApp>,
    step: Step<'_>,
    progress: impl FnMut(usize, usize),
) -> anyhow::Result<Option<StartBench>> {
    let kb = KERNEL_DEFAULT_READ_AHEAD_KB;
    if coldstart_system::readahead::read_ahead_kb_for(&plain.executable) == Some(kb) {
        return Ok(None);
    }
    let _readahead = coldstart_system::readahead::ReadaheadOverride::set_all(kb)?;
    let bench = bench_starts(plain, Some(plan), wrapper, relinked, None, step, progress)?;
    Ok(Some(bench))
}

#[derive(Debug, Serialize)]
pub struct DemoReport {
    pub spec: SampleSpec,
    pub source_dir: PathBuf,
    pub executable: PathBuf,
    pub library: PathBuf,
    pub functions: usize,
    pub startup_calls: usize,
    pub static_initializers: usize,
    pub build_seconds: f64,
    pub startup_output: String,
    pub inspections: Vec<Inspection>,
    /// The traced cold start; None when not run as root (see trace_skipped).
    pub trace: Option<coldstart_analyze::RunReport>,
    pub trace_skipped: Option<String>,
    pub chart: Option<PathBuf>,
    pub html: Option<PathBuf>,
    /// The profile the start was traced into (root only).
    #[serde(skip)]
    pub profile: Option<PathBuf>,
    /// The prefetch plan compiled from the traced run (root only).
    pub plan: Option<coldstart_prefetch::Plan>,
    /// What the plan did to cold starts: at the kernel's default
    /// read_ahead_kb, then at the device's own (one entry when they are
    /// the same; none without a plan).
    pub plan_effects: Vec<crate::bench::PlanEffect>,
    #[serde(skip)]
    pub plan_path: Option<PathBuf>,
    /// Warm against cold (root) or selective-cold starts, and cold with the
    /// plan and relinked with the order files, interleaved.
    pub bench: Option<coldstart_bench::BenchResult>,
    /// As root, when the device is not at the kernel's default
    /// read_ahead_kb: warm, cold, with the plan and an empty plan, and
    /// relinked, timed again at the default (`bench_at_kernel_default`).
    pub bench_at_default: Option<coldstart_bench::BenchResult>,
    /// The order loop (root only): order files from the instrumented start,
    /// the relinked app, and its start-up I/O before and after, at the
    /// kernel's default read_ahead_kb and at the device's own.
    pub order: Option<OrderLoop>,
    pub order_skipped: Option<String>,
    /// `coldstart pack` of the executable and the library (built without
    /// -z pack-relative-relocs), or why not.
    pub pack: Option<PackedApp>,
    pub pack_skipped: Option<String>,
    /// At the kernel's default read_ahead_kb (128; `read_ahead_kb` says).
    pub before: Option<StartupIo>,
    pub after: Option<StartupIo>,
    /// The figures the demo's summary shows (docs/demo-json.md).
    pub summary: DemoSummary,
}
