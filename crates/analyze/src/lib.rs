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
