//! coldstart's record room: runs a program under kernel tracepoints in a
//! private tracefs instance and writes what it read and touched, page by
//! page, into a profile. Function-level traces come from a
//! compiler-instrumentation runtime (`functions`). Launching the program
//! and controlling the page cache belong to coldstart-system.

pub mod functions;
pub mod paths;
pub mod trace;
pub mod tracefs;
