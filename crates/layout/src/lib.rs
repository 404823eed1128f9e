//! coldstart's layout room: turns startup traces into a symbol order
//! (`strategy`, `balanced`) and the order into the file a linker or BOLT
//! reads (`emit`), with a report of what could not be ordered and why,
//! checked against the link's objects where given (`objects`); and reads
//! such files back (`read`) for the layout simulator. `traced` reads the
//! traces of one binary out of a profile, as analyze gives them.

mod balanced;
pub mod emit;
mod error;
pub mod model;
pub mod objects;
pub mod read;
pub mod split;
mod strategy;
pub mod traced;

pub use balanced::BalancedOptions;
pub use emit::{BfdTarget, EmitContext, EmitReport, Emitted, Linker, emit};
pub use error::{Error, Result};
pub use model::*;
pub use objects::ObjectIndex;
pub use read::{read_order, read_order_file};
pub use strategy::{OrderOptions, Strategy, order};
