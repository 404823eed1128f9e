//! llvm-bolt's --function-order file, read with --reorder-functions=user:
//! one function name a line. BOLT takes every line as a name (no comments,
//! so no header); for a local function it also tries `name/1`, `name/2`,
//! ..., its own names for same-named locals, so plain names reach them.

use super::{Kept, Reason, name_list};
use crate::model::{Kind, OrderEntry};
use coldstart_binary::OffsetIndex;

pub(crate) const USAGE: &str = "llvm-bolt BINARY -o OUTPUT --reorder-functions=user \
     --function-order=FILE (BINARY linked with -Wl,--emit-relocs)";

pub(crate) fn check(entry: &OrderEntry) -> Option<Reason> {
    (entry.kind == Kind::Data).then_some(Reason::DataNotOrderable)
}

/// BOLT moves functions only in a binary that kept its relocations.
pub(crate) fn relocation_warning(binary: &OffsetIndex) -> Option<String> {
    let kept = binary
        .sections()
        .iter()
        .any(|s| s.name.starts_with(".rela.text") || s.name.starts_with(".rel.text"));
    (!kept).then(|| {
        "the binary has no relocations for its code (.rela.text): BOLT reorders functions only \
         in a binary linked with --emit-relocs; relink with -Wl,-q"
            .to_string()
    })
}

pub(crate) fn write(kept: &[Kept<'_>]) -> String {
    name_list(kept, None, "")
}
