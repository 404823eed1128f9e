//! coldstart's analyze room: metrics over a profile's runs. Per file, ELF
//! section and symbol: bytes read into the page cache versus bytes startup
//! touched, read requests and seeks; the timeline charts draw; and the
//! readahead model that predicts what another setting or layout would read;
//! and the dynamic loader's phases per object.

pub mod loaded;
pub mod loader;
pub mod model;
pub mod pages;
pub mod plain;
pub mod readahead;
pub mod relayout;
pub mod run;
pub mod simulate;
pub mod startup;

pub use loaded::LoadedRun;
pub use loader::{LoaderAnalysis, analyze_loader};
pub use model::*;
pub use run::{Options, analyze, files_used};
pub use simulate::{SimulateOptions, SimulationReport, simulate};

/// The lower median of `sorted` (not empty): a value one of the runs or
/// traces really had, leaning early when they split evenly. Plans give a
/// page or a lookup the lower median of its first-need times, orders give
/// a symbol the lower median of its ranks. The statistical median, which
/// averages the middle two, is `coldstart_bench::stats::median`.
pub fn lower_median<T: Copy>(sorted: &[T]) -> T {
    sorted[(sorted.len() - 1) / 2]
}
