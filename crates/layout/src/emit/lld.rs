//! LLVM lld's --symbol-ordering-file: one symbol a line, `#` comments. lld
//! moves the input section holding each listed symbol (local symbols too)
//! to the front of its output section, in the order listed, and warns about
//! names it cannot find.

use super::{Kept, Linker, header, name_list};
use crate::model::Order;

pub(crate) const USAGE: &str = "-Wl,--symbol-ordering-file=FILE";

pub(crate) fn write(kept: &[Kept<'_>], order: &Order) -> String {
    let header = header("#", Linker::Lld, USAGE, order, kept.len());
    name_list(kept, Some(&header), "")
}
