//! coldstart's binary room: reads ELF (and PE and Mach-O) files into one
//! model of what a cold start has to load: segments and sections with their
//! place in the file, dynamic entries, relocations by type and the pages
//! they write, static initializers, and layout problems worth fixing; and,
//! in [`block_map`], where the basic blocks of each function lie, from the
//! map clang's -fbasic-block-address-map leaves in a linked ELF file.
//!
//! Parsing is zero-copy over a read-only map and panic-free: malformed input
//! becomes an [`Error`] that names the file.

pub mod block_map;
mod demangle;
mod elf;
mod error;
mod file;
mod macho;
pub mod model;
mod offsets;
mod pe;
pub mod relr;

pub use demangle::demangle;
pub use error::{Error, Result};
pub use file::MappedFile;
pub use model::*;
pub use offsets::{
    OffsetIndex, SectionSpan, SymbolBinding, SymbolCounts, SymbolKind, SymbolSource, SymbolSpan,
};
pub use pe::image_overlaps;

use std::path::Path;

/// How to inspect.
#[derive(Debug, Clone)]
pub struct InspectOptions {
    /// Page size for page counts; 4096 unless the target uses another.
    pub page_size: u64,
}

impl Default for InspectOptions {
    fn default() -> Self {
        InspectOptions {
            page_size: DEFAULT_PAGE_SIZE,
        }
    }
}

/// Opens, maps and inspects one file.
pub fn inspect_path(path: &Path, options: &InspectOptions) -> Result<Inspection> {
    let file = MappedFile::open(path)?;
    inspect_bytes(file.path(), file.bytes(), options)
}

/// Inspects a file already in memory; `path` only labels the result and errors.
pub fn inspect_bytes(path: &Path, data: &[u8], options: &InspectOptions) -> Result<Inspection> {
    if options.page_size == 0 || !options.page_size.is_power_of_two() {
        return Err(Error::Unsupported {
            path: path.to_path_buf(),
            format: "any",
            detail: format!("page size {} is not a power of two", options.page_size),
        });
    }
    match detect(data) {
        Some(Detected::Elf) => elf::inspect(path, data, options),
        Some(Detected::Pe) => pe::inspect(path, data, options),
        Some(Detected::Macho) => macho::inspect(path, data, options),
        Some(Detected::MachoFat) => Err(Error::Unsupported {
            path: path.to_path_buf(),
            format: "Mach-O",
            detail: "universal (fat) binary: extract one architecture with lipo -thin first"
                .to_string(),
        }),
        None => Err(Error::UnknownFormat {
            path: path.to_path_buf(),
            magic: magic_bytes(data),
        }),
    }
}

enum Detected {
    Elf,
    Pe,
    Macho,
    MachoFat,
}

fn detect(data: &[u8]) -> Option<Detected> {
    use object::FileKind;
    let kind = match FileKind::parse(data) {
        Ok(kind) => kind,
        Err(_) => return by_magic(data),
    };
    match kind {
        FileKind::Elf32 | FileKind::Elf64 => Some(Detected::Elf),
        FileKind::Pe32 | FileKind::Pe64 => Some(Detected::Pe),
        FileKind::MachO32 | FileKind::MachO64 => Some(Detected::Macho),
        FileKind::MachOFat32 | FileKind::MachOFat64 => Some(Detected::MachoFat),
        _ => None,
    }
    .or_else(|| by_magic(data))
}

/// object only names a format once enough of its header is there; a file
/// that starts with a format's magic but is cut short or broken is a
/// malformed file of that format, not an unknown one.
fn by_magic(data: &[u8]) -> Option<Detected> {
    const MACHO: [[u8; 4]; 4] = [
        [0xfe, 0xed, 0xfa, 0xce],
        [0xfe, 0xed, 0xfa, 0xcf],
        [0xce, 0xfa, 0xed, 0xfe],
        [0xcf, 0xfa, 0xed, 0xfe],
    ];
    if data.starts_with(b"\x7fELF") {
        Some(Detected::Elf)
    } else if data.starts_with(b"MZ") {
        Some(Detected::Pe)
    } else if MACHO.iter().any(|m| data.starts_with(m)) {
        Some(Detected::Macho)
    } else {
        None
    }
}

fn magic_bytes(data: &[u8]) -> String {
    let head: Vec<String> = data.iter().take(4).map(|b| format!("{b:02x}")).collect();
    if head.is_empty() {
        "nothing".to_string()
    } else {
        format!("bytes {}", head.join(" "))
    }
}
