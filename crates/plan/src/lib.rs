//! The compiling half of coldstart's prefetch room: reads a profile's
//! traced runs and compiles the plan that `coldstart-prefetch` writes,
//! reads and replays. It lives apart from the replay so that the small
//! `coldstart-run` launcher, which only replays, links no profile reader
//! (SQLite).

pub mod compile;
pub mod floor;
pub mod lookups;
pub mod misses;
pub mod refine;

pub use compile::{CompileError, CompileOptions, CompileStats, Compiled, RunStats, compile};
