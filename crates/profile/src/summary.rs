//! What a trace wrote into the profile, as the tracer hands it back: the
//! run it added and what that run holds. The tracer builds these and the
//! report renders them, so they live below both.

use crate::{EndReason, RunId};
use coldstart_system::launch::Exit;
use serde::Serialize;

/// The one-screen summary of a traced run.
#[derive(Debug, Clone)]
pub struct TraceSummary {
    pub run: RunId,
    pub reason: EndReason,
    pub ended_ns: i64,
    pub exit: Exit,
    pub lost_events: u64,
    pub trace_bytes: u64,
    pub events: usize,
    pub files: usize,
    pub unresolved_files: usize,
    pub processes_in_tree: usize,
    pub pages_read: u64,
    pub pages_read_by_tree: u64,
    /// With `CacheMode::Warm`: how long the untraced warm-up run took, from
    /// launch to its end, measured the same way as the traced run.
    pub warmup_ns: Option<i64>,
    /// CLOCK_MONOTONIC just before the program started: run times are
    /// relative to it.
    pub start_monotonic_ns: i64,
    /// The names the tree looked up, when they could be recorded.
    pub lookups: Option<LookupCounts>,
}

/// How many names the traced tree looked up, and how many of them the
/// recorder could not record.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct LookupCounts {
    pub recorded: usize,
    /// The kernel could not copy the name (its page was not present yet).
    pub unreadable: usize,
    /// Relative to a directory that could not be told.
    pub unresolved: usize,
    /// Too long, or not UTF-8.
    pub other: usize,
    /// Machine-wide: records the ring buffer had no room for.
    pub dropped: u64,
}

/// What the instrumentation recorded in one run.
#[derive(Debug, Clone, Serialize)]
pub struct FunctionsSummary {
    pub processes: usize,
    pub functions: usize,
    pub unnamed: u64,
    pub dropped: u64,
    /// What the user should know about the records (none written, calls
    /// dropped), each saying what to do.
    #[serde(skip)]
    pub warnings: Vec<String>,
}
