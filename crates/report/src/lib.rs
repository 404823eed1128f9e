//! coldstart's report room: renders the result types of the other rooms as
//! human tables or Markdown. JSON is serde over the same types, written by
//! the CLI, so every format shows the same numbers.

pub mod bench;
pub mod chart;
pub mod evict;
pub mod html;
pub mod inspect;
pub mod loadcost;
pub mod loader;
pub mod millis;
pub mod misses;
pub mod order;
pub mod pack;
pub mod perfetto;
pub mod ratio;
pub mod refine;
pub mod run;
pub mod simulate;
pub mod table;
pub mod trace;

pub use table::Style;
