//! The ground truth: what the generator put in the sample app, written as
//! `manifest.json`. Traces, order files and ELF analyses are checked against
//! it, so it records names exactly as they appear in the built binaries.

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

use crate::spec::SampleSpec;

/// File name of the ground truth, next to the sources and next to the binaries.
pub const MANIFEST_FILE: &str = "manifest.json";

/// Raised whenever the manifest's meaning changes, so a build never trusts a
/// manifest written by another version of the generator.
pub const MANIFEST_FORMAT: u32 = 2;

/// Everything known about one generated sample app.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GroundTruth {
    /// [`MANIFEST_FORMAT`] of the generator that wrote it.
    pub format: u32,
    pub spec: SampleSpec,
    /// The header every source includes.
    pub header: String,
    pub library: ModuleLayout,
    pub executable: ModuleLayout,
    /// Generated units in index order; `translation_units[i].index == i`.
    pub translation_units: Vec<TranslationUnit>,
    /// Generated functions in id order; `functions[i].id == i`.
    pub functions: Vec<Function>,
    /// The functions the startup path calls, in the order of their first
    /// (and only) call. Static initializers run before and call none of them.
    pub startup_order: Vec<StartupCall>,
    /// Units with a global object whose constructor runs before `main`.
    pub static_initializers: Vec<StaticInitializer>,
    /// The part libraries in index order (`parts[i].index == i`): shared
    /// libraries of generated assembly the executable needs, whose start
    /// touches known pages of their code and tables.
    #[serde(default)]
    pub parts: Vec<Part>,
    /// Filled in by [`crate::build`]: how and where the app was built.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub build: Option<BuildRecord>,
}

/// One of the two binaries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Module {
    /// The shared library `libcssample.so`, built with `-fPIC`.
    Library,
    /// The PIE executable `cssample`, linked against the library.
    Executable,
}

/// The fixed parts of one binary.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModuleLayout {
    /// File name of the linked binary.
    pub output: String,
    /// The hand-written support source linked first (`runtime.cpp` holds the
    /// base class and the registry; `main.cpp` holds `main`).
    pub support_source: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TranslationUnit {
    pub index: u32,
    /// Source file name, relative to the source directory.
    pub source: String,
    pub module: Module,
    /// Ids of this unit's functions are `first_function..first_function + function_count`.
    pub first_function: u32,
    pub function_count: u32,
    pub static_initializer: bool,
    /// Bytes of code no start runs that the unit places among its
    /// functions' code (in section `.text.cs_cold_<unit>`, the local
    /// function symbol `cs_cold_<unit>`), as real programs keep startup code
    /// apart among code that never runs.
    #[serde(default)]
    pub cold_code_bytes: u32,
}

/// One part library: `output` is assembled from `source` and linked as a
/// shared library the executable needs. Its static initializer
/// (`init_symbol`, in `.init_array`) touches the pages in `touches`, in
/// that order, and nothing else of its code and tables; the loader writes
/// every pointer of its relocated table (`relative_relocations` of them).
/// `main` checks through `ready_symbol` that the initializer ran and
/// touched `touched_pages()` pages.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Part {
    pub index: u32,
    pub source: String,
    pub output: String,
    pub init_symbol: String,
    pub ready_symbol: String,
    /// The code the start touches sparsely: `text_pages` pages from the
    /// page-aligned local symbol `code_symbol`, in the output's `.text`.
    pub code_symbol: String,
    pub text_pages: u32,
    /// The read-only table, `rodata_pages` pages from the page-aligned local
    /// symbol `table_symbol`, in the output's `.rodata`.
    pub table_symbol: String,
    pub rodata_pages: u32,
    /// The table of pointers into `table_symbol` that the loader relocates,
    /// `relro_pages` pages from `pointers_symbol` in `.data.rel.ro`.
    pub pointers_symbol: String,
    pub relro_pages: u32,
    pub relative_relocations: u32,
    /// Runs of pages the initializer touches, in the order it touches them.
    pub touches: Vec<PartTouch>,
}

/// A run of pages of one part's code or table, counted from its symbol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartTouch {
    pub section: PartSection,
    pub first_page: u32,
    pub pages: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PartSection {
    /// From `code_symbol`; each page is touched by running an instruction on it.
    Text,
    /// From `table_symbol`; each page is touched by a load.
    Rodata,
}

impl Part {
    /// Pages of code and table the initializer touches.
    pub fn touched_pages(&self) -> u64 {
        self.touches.iter().map(|t| u64::from(t.pages)).sum()
    }

    /// Pages of code, table and relocated pointers in the file.
    pub fn pages(&self) -> u64 {
        u64::from(self.text_pages) + u64::from(self.rodata_pages) + u64::from(self.relro_pages)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Function {
    pub id: u32,
    /// Mangled name, as `nm` prints it.
    pub symbol: String,
    /// Demangled name, as `nm -C` or `c++filt` prints it.
    pub name: String,
    /// Index of the defining translation unit.
    pub tu: u32,
    pub module: Module,
    pub kind: FunctionKind,
    pub size_class: SizeClass,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FunctionKind {
    /// A namespace-scope function.
    Free,
    /// An override of a `cs_sample::Component` virtual method; it is only
    /// ever called through a `Component*`, so through its vtable.
    VirtualMethod,
}

/// Rough machine-code size of a function: the ranges measured with g++ 12
/// at `-O2` on x86_64. Other compilers, versions and flags move them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SizeClass {
    /// About 50 to 170 bytes, most under 100; half the functions.
    Tiny,
    /// About 70 to 320 bytes; 30% of the functions.
    Small,
    /// About 190 to 950 bytes; 15% of the functions.
    Medium,
    /// About 0.9 to 3 KiB; 5% of the functions.
    Large,
}

/// One call on the startup path.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StartupCall {
    /// Id of the called function.
    pub function: u32,
    /// Id of the calling function, or `None` when `main` calls it.
    pub caller: Option<u32>,
    /// The call goes through a `cs_sample::Component*` and its vtable.
    pub virtual_call: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StaticInitializer {
    pub tu: u32,
    pub module: Module,
    /// Mangled name of the global object's constructor, the same whatever
    /// the compiler.
    pub constructor: String,
    /// Demangled name of that constructor.
    pub constructor_name: String,
    /// The compiler-made function `.init_array` points at, which calls the
    /// constructor. Its name depends on the compiler, so it is only known
    /// after [`crate::build`]: clang, and gcc with `-fPIC`, name it after the
    /// source file (`_GLOBAL__sub_I_tu0042.cpp`); gcc without `-fPIC` (the
    /// executable) after the unit's first global definition, which the
    /// generator makes `unit_table`
    /// (`_GLOBAL__sub_I__ZN9cs_sample6tu004210unit_tableE`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub init_function: Option<String>,
}

/// How and where the app was built.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BuildRecord {
    /// The compiler driver that was run (`g++` or `clang++`).
    pub compiler: String,
    /// First line of `--version`.
    pub compiler_version: String,
    /// Every compile flag but `-c`, `-o` and the file names, in order.
    pub compile_flags: Vec<String>,
    /// Link flags given to both links, in order.
    pub link_flags: Vec<String>,
    pub library: PathBuf,
    pub executable: PathBuf,
    /// The part libraries, in index order.
    #[serde(default)]
    pub parts: Vec<PathBuf>,
}

impl GroundTruth {
    /// The functions the startup path calls, in first-call order.
    pub fn startup_functions(&self) -> impl Iterator<Item = &Function> + '_ {
        self.startup_order
            .iter()
            .map(|call| &self.functions[call.function as usize])
    }

    /// The functions defined in one module, in id order.
    pub fn functions_in(&self, module: Module) -> impl Iterator<Item = &Function> + '_ {
        self.functions.iter().filter(move |f| f.module == module)
    }

    /// Bytes of the part libraries' code, tables and relocated pointers a
    /// start touches: the pages the initializers touch and every relocated
    /// page, which the loader writes.
    pub fn part_bytes_touched(&self, page_size: u64) -> u64 {
        self.parts
            .iter()
            .map(|p| (p.touched_pages() + u64::from(p.relro_pages)) * page_size)
            .sum()
    }

    /// Reads a manifest and checks that its cross references hold, so that
    /// indexing `functions` and `translation_units` by id cannot go wrong.
    pub fn read(path: &Path) -> Result<GroundTruth> {
        let text = fs::read_to_string(path)
            .with_context(|| format!("reading the sample app manifest {}", path.display()))?;
        let truth: GroundTruth = serde_json::from_str(&text)
            .with_context(|| format!("parsing the sample app manifest {}", path.display()))?;
        truth
            .check()
            .with_context(|| format!("in the sample app manifest {}", path.display()))?;
        Ok(truth)
    }

    /// The manifest's bytes: pretty JSON with a final newline, identical for
    /// identical ground truth.
    pub fn to_json(&self) -> Result<String> {
        let mut text = serde_json::to_string_pretty(self).context("serialising the manifest")?;
        text.push('\n');
        Ok(text)
    }

    fn check(&self) -> Result<()> {
        if self.format != MANIFEST_FORMAT {
            bail!(
                "manifest format {} is not the supported format {MANIFEST_FORMAT}; generate the \
                 sources again",
                self.format
            );
        }
        for (i, unit) in self.translation_units.iter().enumerate() {
            let end = u64::from(unit.first_function) + u64::from(unit.function_count);
            if unit.index as usize != i || end > self.functions.len() as u64 {
                bail!("translation unit entry {i} is inconsistent");
            }
        }
        for (i, function) in self.functions.iter().enumerate() {
            if function.id as usize != i || function.tu as usize >= self.translation_units.len() {
                bail!("function entry {i} is inconsistent");
            }
        }
        let known = |id: u32| (id as usize) < self.functions.len();
        for call in &self.startup_order {
            if !known(call.function) || !call.caller.is_none_or(known) {
                bail!("startup call to function {} is inconsistent", call.function);
            }
        }
        for (i, part) in self.parts.iter().enumerate() {
            let in_bounds = part.touches.iter().all(|t| {
                let pages = match t.section {
                    PartSection::Text => part.text_pages,
                    PartSection::Rodata => part.rodata_pages,
                };
                t.pages > 0 && u64::from(t.first_page) + u64::from(t.pages) <= u64::from(pages)
            });
            if part.index as usize != i || !in_bounds {
                bail!("part entry {i} is inconsistent");
            }
        }
        for init in &self.static_initializers {
            if init.tu as usize >= self.translation_units.len() {
                bail!("static initializer of unit {} is inconsistent", init.tu);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn written(truth: &GroundTruth) -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join(MANIFEST_FILE);
        fs::write(&path, truth.to_json().expect("json")).expect("write");
        (dir, path)
    }

    #[test]
    fn reads_back_what_it_wrote() {
        let truth = crate::plan(&SampleSpec::tiny()).expect("plan");
        let (_dir, path) = written(&truth);
        assert_eq!(GroundTruth::read(&path).expect("read"), truth);
    }

    #[test]
    fn refuses_another_format() {
        let mut truth = crate::plan(&SampleSpec::tiny()).expect("plan");
        truth.format = MANIFEST_FORMAT + 1;
        let (_dir, path) = written(&truth);
        let error = GroundTruth::read(&path).expect_err("future format");
        assert!(format!("{error:#}").contains("generate the sources again"));
    }

    #[test]
    fn refuses_a_dangling_startup_call() {
        let mut truth = crate::plan(&SampleSpec::tiny()).expect("plan");
        truth.startup_order[0].function = 10_000;
        let (_dir, path) = written(&truth);
        let error = GroundTruth::read(&path).expect_err("dangling id");
        assert!(format!("{error:#}").contains("startup call to function 10000"));
    }
}
