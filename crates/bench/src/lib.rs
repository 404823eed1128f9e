//! coldstart's bench room: a program's startup timed over repeated runs, each
//! from a chosen page cache state (warm, cold, selective-cold), variants
//! interleaved run by run, with the statistics that say whether a difference
//! is real.

pub mod environment;
pub mod run;
pub mod stats;

pub use environment::Environment;
pub use run::{
    BenchError, BenchResult, Event, Executor, FileEviction, Launcher, Measurement, Options,
    RunRecord, Variant, VariantResult, bench,
};
