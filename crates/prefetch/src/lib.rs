//! coldstart's prefetch room, replaying half: a plan of the file extents a
//! program's start needs, in the order it needs them (`model`), written as
//! diffable text (`format`), and replayed on background threads while the
//! program starts (`replay`, `launch`), through a wrapper or a launcher
//! script (`launcher`), whose flags are defined once (`flags`); `read_around`
//! gives the started program the audit module that makes data misses cost a
//! page. Plans are compiled from profiles by
//! `coldstart-plan`, kept apart so that this crate reads no profile.

pub mod calibrate;
pub mod flags;
pub mod format;
pub mod handmade;
pub mod launch;
pub mod launcher;
pub mod model;
pub mod read_around;
pub mod replay;

pub use model::*;
