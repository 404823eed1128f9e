//! Apple ld64's -order_file (also read by ld64.lld): one symbol a line, `#`
//! comments. Mach-O symbol names carry a leading underscore that ELF names
//! do not (C `main` is `_main`, C++ `_Z3fooi` is `__Z3fooi`), so the ELF
//! names of a trace get one. ld64 cuts sections into atoms at symbols, so
//! -ffunction-sections does not matter there.

use super::{Kept, Linker, header, name_list};
use crate::model::Order;

pub(crate) const USAGE: &str = "-Wl,-order_file,FILE";

pub(crate) fn write(kept: &[Kept<'_>], order: &Order) -> String {
    let header = header("#", Linker::Ld64, USAGE, order, kept.len());
    name_list(kept, Some(&header), "_")
}
