//! coldstart's analyze room: metrics over a profile's runs. Per file, ELF
//! section and symbol: bytes read into the page cache versus bytes startup
//! touched, read requests and seeks; and the timeline charts draw.

pub mod model;
pub mod pages;
pub mod run;

pub use model::*;
pub use run::{Options, analyze, files_used};
