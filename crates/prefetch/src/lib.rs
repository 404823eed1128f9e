//! coldstart's prefetch room: a plan of the file extents a program's start
//! needs, in the order it needs them, compiled from one or more traced runs
//! (`compile`), written as diffable text (`format`), and replayed on
//! background threads while the program starts (`replay`, `launch`).

pub mod calibrate;
pub mod compile;
pub mod format;
pub mod launch;
pub mod model;
pub mod replay;

pub use model::*;
