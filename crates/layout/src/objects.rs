//! Where the relocatable objects of a link define each symbol: the section
//! it sits in and whether it has that section to itself. Section-based
//! linkers (gold, GNU ld) can only move whole input sections, so a function
//! compiled without -ffunction-sections cannot be ordered, and knowing the
//! exact section names beats guessing them.

use crate::error::{Error, Result};
use crate::model::Kind;
use coldstart_binary::SymbolBinding;
use object::read::archive::ArchiveFile;
use object::{
    FileKind, Object, ObjectKind, ObjectSection, ObjectSymbol, SectionFlags, SectionIndex,
    SymbolFlags, SymbolKind, SymbolSection,
};
use serde::Serialize;
use std::collections::HashMap;
use std::path::Path;

/// One definition of a symbol in one object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Definition {
    /// The object's path, or `archive.a(member.o)`.
    pub object: String,
    /// The input section holding it.
    pub section: String,
    pub kind: Kind,
    pub binding: SymbolBinding,
    /// Other code and data symbols at other offsets of the same section:
    /// 0 when the symbol has its section to itself, as -ffunction-sections
    /// and -fdata-sections give.
    pub neighbours: usize,
    /// Whether the section is a COMDAT (MSVC /Gy), the only kind LINK's
    /// /ORDER can place; `None` for formats without the notion (ELF,
    /// Mach-O).
    pub comdat: Option<bool>,
}

/// Definitions by symbol name over a set of relocatable objects.
#[derive(Debug, Clone, Default)]
pub struct ObjectIndex {
    definitions: HashMap<String, Vec<Definition>>,
    objects: usize,
}

impl ObjectIndex {
    pub fn new() -> ObjectIndex {
        ObjectIndex::default()
    }

    /// Reads relocatable objects and archives of them.
    pub fn from_paths<P: AsRef<Path>>(paths: &[P]) -> Result<ObjectIndex> {
        let mut index = ObjectIndex::new();
        for path in paths {
            index.add_file(path.as_ref())?;
        }
        Ok(index)
    }

    /// Adds one relocatable object, or every member of an archive.
    pub fn add_file(&mut self, path: &Path) -> Result<()> {
        let data = std::fs::read(path).map_err(|source| Error::Io {
            path: path.to_path_buf(),
            source,
        })?;
        self.add_bytes(path, &data)
    }

    /// Adds a file already in memory; `path` names it in errors and in
    /// [`Definition::object`].
    pub fn add_bytes(&mut self, path: &Path, data: &[u8]) -> Result<()> {
        let fail = |detail: String| Error::Object {
            path: path.to_path_buf(),
            detail,
        };
        match FileKind::parse(data) {
            Ok(FileKind::Archive) => {
                let archive = ArchiveFile::parse(data)
                    .map_err(|e| fail(format!("malformed archive: {e}")))?;
                for member in archive.members() {
                    let member = member.map_err(|e| fail(format!("malformed archive: {e}")))?;
                    let name = String::from_utf8_lossy(member.name()).into_owned();
                    let bytes = member
                        .data(data)
                        .map_err(|e| fail(format!("member {name}: {e}")))?;
                    let label = format!("{}({name})", path.display());
                    // Archives may hold non-object members (a symbol index
                    // under another name, text files); only objects count.
                    if FileKind::parse(bytes).is_ok_and(|kind| kind != FileKind::Archive) {
                        self.add_object(&label, bytes)
                            .map_err(|detail| fail(format!("member {name}: {detail}")))?;
                    }
                }
                Ok(())
            }
            Ok(_) => self
                .add_object(&path.display().to_string(), data)
                .map_err(fail),
            Err(e) => Err(fail(format!("not an object file or archive: {e}"))),
        }
    }

    fn add_object(&mut self, label: &str, data: &[u8]) -> Result<(), String> {
        let file = object::File::parse(data).map_err(|e| format!("malformed object: {e}"))?;
        if file.kind() != ObjectKind::Relocatable {
            return Err(format!(
                "not a relocatable object but {:?}: give the .o files and archives the link \
                 reads, not its output",
                file.kind()
            ));
        }
        self.objects += 1;
        // Distinct symbol offsets per section, to tell a section of one
        // function from .text holding a whole file's worth.
        let mut starts: HashMap<SectionIndex, Vec<u64>> = HashMap::new();
        let mut found = Vec::new();
        for symbol in file.symbols() {
            let kind = match symbol.kind() {
                SymbolKind::Text => Kind::Function,
                SymbolKind::Data | SymbolKind::Tls => Kind::Data,
                _ => continue,
            };
            let SymbolSection::Section(index) = symbol.section() else {
                continue;
            };
            let Ok(name) = symbol.name() else { continue };
            if name.is_empty() {
                continue;
            }
            starts.entry(index).or_default().push(symbol.address());
            found.push((name, index, symbol.address(), kind, binding(&symbol)));
        }
        for offsets in starts.values_mut() {
            offsets.sort_unstable();
            offsets.dedup();
        }
        for (name, index, address, kind, binding) in found {
            let section = file
                .section_by_index(index)
                .map_err(|e| format!("symbol {name}: {e}"))?;
            let section_name = section
                .name()
                .map_err(|e| format!("symbol {name}: section name: {e}"))?;
            let comdat = match section.flags() {
                SectionFlags::Coff { characteristics } => {
                    Some(characteristics.0 & object::pe::IMAGE_SCN_LNK_COMDAT.0 != 0)
                }
                _ => None,
            };
            let others = starts
                .get(&index)
                .map_or(0, |o| o.iter().filter(|&&a| a != address).count());
            self.definitions
                .entry(name.to_string())
                .or_default()
                .push(Definition {
                    object: label.to_string(),
                    section: section_name.to_string(),
                    kind,
                    binding,
                    neighbours: others,
                    comdat,
                });
        }
        Ok(())
    }

    /// Every definition of `raw_name`, in the order the objects were added.
    pub fn definitions(&self, raw_name: &str) -> &[Definition] {
        self.definitions.get(raw_name).map_or(&[], Vec::as_slice)
    }

    /// Objects read (archive members count one each).
    pub fn objects(&self) -> usize {
        self.objects
    }
}

fn binding<'a>(symbol: &impl ObjectSymbol<'a>) -> SymbolBinding {
    if let SymbolFlags::Elf { st_info, .. } = symbol.flags()
        && st_info.st_bind() == object::elf::STB_GNU_UNIQUE
    {
        return SymbolBinding::Unique;
    }
    if symbol.is_local() {
        SymbolBinding::Local
    } else if symbol.is_weak() {
        SymbolBinding::Weak
    } else {
        SymbolBinding::Global
    }
}
