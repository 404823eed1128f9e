//! The compiling half of coldstart's prefetch room: reads a profile's
//! traced runs and compiles the plan that `coldstart-prefetch` writes,
//! reads and replays. It lives apart from the replay so that the small
//! `coldstart-run` launcher, which only replays, links no profile reader
//! (SQLite). A plan also learns from the starts it serves: the miss
//! accounting of a served start (`misses`), one refinement from it
//! (`refine`), and the loop that traces served starts and refines until
//! nothing is left to learn (`refine_loop`); the plan that served a traced
//! run, found and read (`served`).

pub mod compile;
pub mod floor;
pub mod lookups;
pub mod misses;
pub mod refine;
pub mod refine_loop;
pub mod served;

pub use compile::{CompileError, CompileOptions, CompileStats, Compiled, RunStats, compile};
