//! Order files for linkers and BOLT: one emitter per tool, each checking
//! first which symbols it can place (and saying why not, in plain words),
//! then writing the file in that tool's own syntax.

mod bfd;
mod bolt;
mod gold;
mod ld64;
mod lld;
mod msvc;
mod sections;
#[cfg(test)]
mod tests;

pub use bfd::BfdTarget;

use crate::error::{Error, Result, parse_name};
use crate::model::{Kind, Order, OrderEntry};
use crate::objects::{Definition, ObjectIndex};
use coldstart_binary::{OffsetIndex, SymbolBinding, SymbolSpan};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;

/// The tool an order file is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Linker {
    Lld,
    Gold,
    Bfd,
    Ld64,
    Msvc,
    Bolt,
}

impl Linker {
    pub const ALL: [Linker; 6] = [
        Linker::Lld,
        Linker::Gold,
        Linker::Bfd,
        Linker::Ld64,
        Linker::Msvc,
        Linker::Bolt,
    ];

    /// The name `--linker` takes.
    pub fn name(self) -> &'static str {
        match self {
            Linker::Lld => "lld",
            Linker::Gold => "gold",
            Linker::Bfd => "bfd",
            Linker::Ld64 => "ld64",
            Linker::Msvc => "msvc",
            Linker::Bolt => "bolt",
        }
    }

    /// One line for `--help`.
    pub fn description(self) -> &'static str {
        match self {
            Linker::Lld => "LLVM lld: --symbol-ordering-file, one symbol a line",
            Linker::Gold => "GNU gold: --section-ordering-file, input section names",
            Linker::Bfd => {
                "GNU ld: --section-ordering-file (2.43 and later), else a full linker script \
                 for -T derived from ld's default one"
            }
            Linker::Ld64 => "Apple ld64 and ld64.lld: -order_file, Mach-O names",
            Linker::Msvc => "MSVC LINK and lld-link: /ORDER:@file, decorated COMDAT functions",
            Linker::Bolt => "llvm-bolt: --function-order with --reorder-functions=user",
        }
    }
}

impl fmt::Display for Linker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Linker {
    type Err = Error;

    fn from_str(given: &str) -> Result<Linker> {
        parse_name(given, &Linker::ALL, Linker::name, "linker")
    }
}

/// What an emitter may check the order against. Each part is optional;
/// without it, the checks that need it are not made.
#[derive(Debug, Clone, Copy, Default)]
pub struct EmitContext<'a> {
    /// The linked binary the traces came from: which symbols exist, which
    /// are local, whether BOLT will find relocations.
    pub binary: Option<&'a OffsetIndex>,
    /// Every object and archive the new link reads: exact input section
    /// names, and which symbols lack a section of their own.
    pub objects: Option<&'a ObjectIndex>,
    /// GNU ld's version and default script; required for [`Linker::Bfd`].
    pub bfd: Option<&'a BfdTarget>,
}

/// An order file and what went into it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Emitted {
    pub text: String,
    pub report: EmitReport,
}

/// What an emitter did with an order: one per emitted file, for the human
/// table and `--json` alike.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EmitReport {
    pub linker: Linker,
    /// How to hand the file to the tool, FILE standing for its path.
    pub usage: String,
    /// Symbols in the order.
    pub symbols: usize,
    /// Of those, in the file.
    pub ordered: usize,
    /// Bytes of the symbols in the file.
    pub ordered_bytes: u64,
    /// Bytes of every symbol in the order: all that startup used.
    pub traced_bytes: u64,
    /// Symbols left out, in order, each with the reason.
    pub unordered: Vec<Unordered>,
    /// Symbols in the file that may not land where the order says.
    pub caveats: Vec<Caveat>,
    /// About the file as a whole.
    pub warnings: Vec<String>,
}

impl EmitReport {
    /// Share of startup's bytes the file places, 0 to 1 (1 when nothing
    /// was traced).
    pub fn coverage(&self) -> f64 {
        if self.traced_bytes == 0 {
            1.0
        } else {
            self.ordered_bytes as f64 / self.traced_bytes as f64
        }
    }
}

/// A symbol the file leaves out.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Unordered {
    pub raw_name: String,
    pub kind: Kind,
    pub size: u64,
    #[serde(flatten)]
    pub reason: Reason,
}

/// Why a symbol cannot be ordered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum Reason {
    /// Not among the linked binary's file-backed symbols.
    NotInBinary,
    /// Defined by none of the objects given.
    NotInObjects,
    /// Shares its input section with other symbols, so the linker would
    /// move all of them or none.
    SharedSection {
        object: String,
        section: String,
        neighbours: usize,
    },
    /// A COFF function outside a COMDAT: LINK orders COMDATs only.
    NotComdat { object: String, section: String },
    /// The tool orders functions only.
    DataNotOrderable,
    /// Local (C `static`): not a public name LINK can find.
    Static,
    /// In an anonymous namespace: local, and named differently per compile.
    AnonymousNamespace,
    /// An Itanium C++ name (`_Z...`): MSVC decorates C++ names its own way.
    ItaniumName,
    /// Over MSVC's limit for decorated names, beyond which the compiler
    /// shortens them to a hash.
    NameTooLong { length: usize },
    /// Its section name holds characters the file's syntax would read as
    /// a wildcard or a separator.
    Unnameable { section: String },
    /// GNU ld's script has no output section to put its section in.
    NoOutputSection { section: String },
}

/// MSVC decorated names longer than this are truncated and hashed.
pub(crate) const MSVC_NAME_LIMIT: usize = 4096;

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::NotInBinary => f.write_str(
                "not in the binary's symbol table: renamed, inlined everywhere or removed since \
                 the trace; trace the binary you relink",
            ),
            Reason::NotInObjects => f.write_str(
                "defined by none of the objects given: give every object and archive of the link",
            ),
            Reason::SharedSection {
                object,
                section,
                neighbours,
            } => write!(
                f,
                "shares section {section} of {object} with {neighbours} other symbols; compile \
                 with -ffunction-sections -fdata-sections so each has its own"
            ),
            Reason::NotComdat { object, section } => write!(
                f,
                "section {section} of {object} is not a COMDAT; compile with /Gy"
            ),
            Reason::DataNotOrderable => f.write_str("data: this tool orders functions only"),
            Reason::Static => f.write_str(
                "static: LINK /ORDER cannot place functions that are not public symbols",
            ),
            Reason::AnonymousNamespace => f.write_str(
                "in an anonymous namespace: local, and its decorated name changes per compile",
            ),
            Reason::ItaniumName => f.write_str(
                "an Itanium C++ name; MSVC decorates C++ names differently (?name@@...): order \
                 names from a trace of the Windows build",
            ),
            Reason::NameTooLong { length } => write!(
                f,
                "{length} characters, over MSVC's {MSVC_NAME_LIMIT}: the compiler replaces such \
                 names with a hash"
            ),
            Reason::Unnameable { section } => write!(
                f,
                "section name {section} holds characters the file would read as a wildcard or \
                 a separator"
            ),
            Reason::NoOutputSection { section } => {
                write!(f, "the linker script has no output section for {section}")
            }
        }
    }
}

/// A symbol in the file that may not land exactly where the order says.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Caveat {
    pub raw_name: String,
    #[serde(flatten)]
    pub caveat: CaveatKind,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "caveat", rename_all = "snake_case")]
pub enum CaveatKind {
    /// Local, and defined under this name more than once: the linker
    /// places every definition here, not only the one traced.
    SameLocalName { definitions: usize },
}

impl fmt::Display for CaveatKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CaveatKind::SameLocalName { definitions } => write!(
                f,
                "local name defined {definitions} times; every definition moves here, not only \
                 the one traced"
            ),
        }
    }
}

impl fmt::Display for EmitReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} order file: {} of {} symbols, {} of {} traced bytes ({:.1}%)",
            self.linker,
            self.ordered,
            self.symbols,
            self.ordered_bytes,
            self.traced_bytes,
            self.coverage() * 100.0
        )?;
        writeln!(f, "use it with: {}", self.usage)?;
        for warning in &self.warnings {
            writeln!(f, "warning: {warning}")?;
        }
        if !self.unordered.is_empty() {
            writeln!(f, "not ordered ({}):", self.unordered.len())?;
            for u in &self.unordered {
                writeln!(f, "  {} ({} bytes): {}", u.raw_name, u.size, u.reason)?;
            }
        }
        if !self.caveats.is_empty() {
            writeln!(f, "ordered, with a caveat ({}):", self.caveats.len())?;
            for c in &self.caveats {
                writeln!(f, "  {}: {}", c.raw_name, c.caveat)?;
            }
        }
        Ok(())
    }
}

/// Writes `order` as `linker` reads it.
pub fn emit(order: &Order, linker: Linker, context: &EmitContext<'_>) -> Result<Emitted> {
    let lookup = Lookup::new(context, linker);
    let mut unordered = Vec::new();
    let mut caveats = Vec::new();
    let mut kept: Vec<Kept<'_>> = Vec::new();
    for entry in &order.entries {
        let facts = lookup.facts(&entry.raw_name);
        let checked = facts.common_check(linker).or_else(|| match linker {
            Linker::Msvc => msvc::check(entry, &facts),
            Linker::Bolt => bolt::check(entry),
            Linker::Lld | Linker::Gold | Linker::Bfd | Linker::Ld64 => None,
        });
        if let Some(reason) = checked {
            unordered.push(Unordered {
                raw_name: entry.raw_name.clone(),
                kind: entry.kind,
                size: entry.size,
                reason,
            });
            continue;
        }
        let definitions = facts.local_definitions();
        if definitions > 1 {
            caveats.push(Caveat {
                raw_name: entry.raw_name.clone(),
                caveat: CaveatKind::SameLocalName { definitions },
            });
        }
        kept.push(Kept {
            entry,
            definitions: facts.definitions,
        });
    }

    let mut warnings = Vec::new();
    let (text, usage) = match linker {
        Linker::Lld => (lld::write(&kept, order), lld::USAGE.to_string()),
        Linker::Ld64 => (ld64::write(&kept, order), ld64::USAGE.to_string()),
        Linker::Msvc => {
            warnings.push(msvc::NAMES_WARNING.to_string());
            (msvc::write(&kept), msvc::USAGE.to_string())
        }
        Linker::Bolt => {
            if let Some(warning) = context.binary.and_then(bolt::relocation_warning) {
                warnings.push(warning);
            }
            (bolt::write(&kept), bolt::USAGE.to_string())
        }
        Linker::Gold | Linker::Bfd => {
            if context.objects.is_none() {
                warnings.push(sections::GUESS_WARNING.to_string());
            }
            let placed = sections::place(&kept);
            let mut refused = placed.refused;
            let (text, usage) = if linker == Linker::Gold {
                (gold::write(&placed.symbols, order), gold::USAGE.to_string())
            } else {
                let target = context.bfd.ok_or(Error::BfdTargetMissing)?;
                let written = bfd::write(&placed.symbols, order, target)?;
                refused.extend(written.refused);
                (written.text, written.usage)
            };
            // Symbols none of whose sections could be named leave the file;
            // report them like the others, in order.
            let gone: HashMap<String, Reason> = refused.into_iter().collect();
            kept.retain(|k| !gone.contains_key(k.entry.raw_name.as_str()));
            for entry in &order.entries {
                if let Some(reason) = gone.get(entry.raw_name.as_str()) {
                    unordered.push(Unordered {
                        raw_name: entry.raw_name.clone(),
                        kind: entry.kind,
                        size: entry.size,
                        reason: reason.clone(),
                    });
                }
            }
            caveats.retain(|c| !gone.contains_key(c.raw_name.as_str()));
            (text, usage)
        }
    };
    let report = EmitReport {
        linker,
        usage,
        symbols: order.entries.len(),
        ordered: kept.len(),
        ordered_bytes: kept.iter().map(|k| k.entry.size).sum(),
        traced_bytes: order.bytes(),
        unordered,
        caveats,
        warnings,
    };
    Ok(Emitted { text, report })
}

/// A symbol that passed the checks, with its definitions if objects were given.
pub(crate) struct Kept<'a> {
    pub entry: &'a OrderEntry,
    pub definitions: Option<&'a [Definition]>,
}

/// The first line of files whose syntax has comments: what the file is,
/// how to use it and what it holds, so it explains itself when found later.
pub(crate) fn header(
    comment: &str,
    linker: Linker,
    usage: &str,
    order: &Order,
    kept: usize,
) -> String {
    format!(
        "{comment} coldstart order file for {linker}: {usage}; strategy {}, {kept} of {} traced \
         symbols",
        order.strategy,
        order.entries.len()
    )
}

/// One name a line, each after `prefix`, under `header` when the syntax
/// has comments.
pub(crate) fn name_list(kept: &[Kept<'_>], header: Option<&str>, prefix: &str) -> String {
    let mut text = String::new();
    if let Some(header) = header {
        text.push_str(header);
        text.push('\n');
    }
    for k in kept {
        text.push_str(prefix);
        text.push_str(&k.entry.raw_name);
        text.push('\n');
    }
    text
}

/// Symbol lookups over whatever the context offers.
struct Lookup<'a> {
    binary: Option<HashMap<&'a str, Vec<&'a SymbolSpan>>>,
    objects: Option<&'a ObjectIndex>,
    /// Mach-O objects spell ELF's `f` as `_f`.
    object_prefix: &'static str,
}

impl<'a> Lookup<'a> {
    fn new(context: &EmitContext<'a>, linker: Linker) -> Lookup<'a> {
        let binary = context.binary.map(|index| {
            let mut by_name: HashMap<&str, Vec<&SymbolSpan>> = HashMap::new();
            for span in index.symbols() {
                by_name
                    .entry(span.raw_name.as_str())
                    .or_default()
                    .push(span);
            }
            by_name
        });
        Lookup {
            binary,
            objects: context.objects,
            object_prefix: if linker == Linker::Ld64 { "_" } else { "" },
        }
    }

    fn facts(&self, raw_name: &str) -> Facts<'a> {
        Facts {
            spans: self
                .binary
                .as_ref()
                .map(|b| b.get(raw_name).cloned().unwrap_or_default()),
            definitions: self.objects.map(|o| {
                if self.object_prefix.is_empty() {
                    o.definitions(raw_name)
                } else {
                    o.definitions(&format!("{}{raw_name}", self.object_prefix))
                }
            }),
        }
    }
}

/// What the binary and the objects say about one name.
pub(crate) struct Facts<'a> {
    /// None when no binary was given.
    spans: Option<Vec<&'a SymbolSpan>>,
    /// None when no objects were given.
    definitions: Option<&'a [Definition]>,
}

impl Facts<'_> {
    /// Checks every emitter makes: the symbol exists, and section-based
    /// linkers can move it alone.
    fn common_check(&self, linker: Linker) -> Option<Reason> {
        if self.spans.as_ref().is_some_and(Vec::is_empty) {
            return Some(Reason::NotInBinary);
        }
        let definitions = self.definitions?;
        if definitions.is_empty() {
            return Some(Reason::NotInObjects);
        }
        // ld64 works on atoms (subsections via symbols), BOLT on the
        // linked functions, MSVC on COMDATs (checked in its own module).
        if matches!(linker, Linker::Lld | Linker::Gold | Linker::Bfd)
            && let Some(shared) = definitions.iter().find(|d| d.neighbours > 0)
        {
            return Some(Reason::SharedSection {
                object: shared.object.clone(),
                section: shared.section.clone(),
                neighbours: shared.neighbours,
            });
        }
        None
    }

    /// True when every known definition is local (a global one elsewhere
    /// would be the one a public-name linker finds).
    pub(crate) fn is_local(&self) -> bool {
        let bindings: Vec<SymbolBinding> = self
            .spans
            .iter()
            .flatten()
            .map(|s| s.binding)
            .chain(
                self.definitions
                    .iter()
                    .flat_map(|d| d.iter().map(|d| d.binding)),
            )
            .collect();
        !bindings.is_empty() && bindings.iter().all(|&b| b == SymbolBinding::Local)
    }

    /// Local definitions under this name, by the larger count of the binary
    /// and the objects.
    fn local_definitions(&self) -> usize {
        let in_binary = self
            .spans
            .iter()
            .flatten()
            .filter(|s| s.binding == SymbolBinding::Local)
            .count();
        let in_objects = self
            .definitions
            .iter()
            .flat_map(|d| d.iter())
            .filter(|d| d.binding == SymbolBinding::Local)
            .count();
        in_binary.max(in_objects)
    }

    pub(crate) fn definitions(&self) -> Option<&[Definition]> {
        self.definitions
    }
}
