//! coldstart's record room: runs a program under kernel tracepoints in a
//! private tracefs instance and writes what it read and touched, page by
//! page, into a profile. Also controls the page cache (drop, evict, check
//! residency) so runs start from a known cache state. Function-level
//! traces come from a compiler-instrumentation runtime (`functions`).

pub mod cache;
mod cgroup;
pub mod eviction;
pub mod functions;
pub mod launch;
pub mod paths;
pub mod readahead;
pub mod trace;
pub mod tracefs;
pub mod walk;
