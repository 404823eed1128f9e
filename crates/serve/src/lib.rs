//! coldstart's service room: `coldstart serve`, which notices every start
//! of a program it holds a plan for and replays the plan beside it, with no
//! wrapper and no change to how the program is started.
//!
//! - `state`: the state directory (programs, their plans, their starts),
//!   written atomically, read with every value checked;
//! - `admit`: the checks a plan passes before the service follows it;
//! - `install`: a plan made by hand, given to the service;
//! - `service`: the loop: exec events of the planned executables, the
//!   state directory's changes, signals;
//! - `start`: one start: waiting for its exec to complete, deciding
//!   whether to serve it (held out at random, opted out, memory short),
//!   replaying the plan as the user who started it, and finding the end
//!   of the start by its process tree falling quiet;
//! - `verdict`: whether served starts are faster than held-out ones;
//! - `status`: what `coldstart status` prints.
//!
//! The service never blocks an exec (fanotify notification events only, on
//! the planned executables' inodes: an unplanned program's exec costs
//! nothing), never changes a setting, never evicts or locks pages.

pub mod admit;
pub mod install;
pub mod learn;
pub mod service;
pub mod start;
pub mod state;
pub mod status;
pub mod verdict;

pub use service::{ServeError, ServeOptions, serve};
pub use state::{State, StateError};
