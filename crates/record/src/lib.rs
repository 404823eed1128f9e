//! coldstart's record room: runs a program under kernel tracepoints in a
//! private tracefs instance and writes what it read and touched, page by
//! page, into a profile. Function-level traces come from a
//! compiler-instrumentation runtime (`functions`), collected per run by
//! `function_records`. Launching the program and controlling the page cache
//! belong to coldstart-system.

pub mod attach;
pub mod blocks;
mod bpf_asm;
pub mod filesystems;
pub mod function_records;
pub mod functions;
pub mod loader;
pub mod names;
pub mod paths;
pub mod subvolumes;
pub mod trace;
pub mod tracefs;
