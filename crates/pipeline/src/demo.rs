//! The result of `coldstart demo`: every step's output on the sample app,
//! for its --json and its text report alike.

use crate::order::{OrderLoop, StartupIo};
use coldstart_binary::Inspection;
use coldstart_sample::SampleSpec;
use serde::Serialize;
use std::path::PathBuf;

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
    #[serde(skip)]
    pub plan_path: Option<PathBuf>,
    /// Warm against cold (root) or selective-cold starts, and cold with the
    /// plan and relinked with the order files, interleaved.
    pub bench: Option<coldstart_bench::BenchResult>,
    /// The order loop (root only): order files from the instrumented start,
    /// the relinked app, and its start-up I/O before and after, at the
    /// kernel's default read_ahead_kb and at the device's own.
    pub order: Option<OrderLoop>,
    pub order_skipped: Option<String>,
    /// At the kernel's default read_ahead_kb (128; `read_ahead_kb` says).
    pub before: Option<StartupIo>,
    pub after: Option<StartupIo>,
}
