//! MSVC LINK's /ORDER:@file (also read by lld-link): one decorated name a
//! line, no comment syntax, so no header. LINK places COMDAT functions only
//! (objects built with /Gy) and finds them by public name, which rules out
//! static functions and anonymous namespaces.

use super::{Facts, Kept, MSVC_NAME_LIMIT, Reason, name_list};
use crate::model::{Kind, OrderEntry};

pub(crate) const USAGE: &str = "/ORDER:@FILE (objects compiled with /Gy)";

pub(crate) const NAMES_WARNING: &str = "names are written as given (decorated C++ names such as \
     ?f@@YAXXZ, plain C names); on 32-bit x86, LINK adds the leading underscore itself to names \
     that do not start with ? or @";

pub(crate) fn check(entry: &OrderEntry, facts: &Facts<'_>) -> Option<Reason> {
    let name = entry.raw_name.as_str();
    if entry.kind == Kind::Data {
        return Some(Reason::DataNotOrderable);
    }
    // Itanium's and MSVC's spellings of an anonymous namespace.
    if name.contains("_GLOBAL__N_") || name.contains("?A0x") {
        return Some(Reason::AnonymousNamespace);
    }
    if facts.is_local() {
        return Some(Reason::Static);
    }
    if name.starts_with("_Z") {
        return Some(Reason::ItaniumName);
    }
    if name.len() > MSVC_NAME_LIMIT {
        return Some(Reason::NameTooLong { length: name.len() });
    }
    let definitions = facts.definitions()?;
    definitions
        .iter()
        .find(|d| d.comdat == Some(false))
        .map(|d| Reason::NotComdat {
            object: d.object.clone(),
            section: d.section.clone(),
        })
}

pub(crate) fn write(kept: &[Kept<'_>]) -> String {
    name_list(kept, None, "")
}
