//! coldstart's layout room: turns startup traces into a symbol order
//! (`strategy`, `balanced`).

mod balanced;
mod error;
pub mod model;
mod strategy;

pub use balanced::BalancedOptions;
pub use error::{Error, Result};
pub use model::*;
pub use strategy::{OrderOptions, Strategy, order};
