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
pub const MANIFEST_FORMAT: u32 = 1;

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
