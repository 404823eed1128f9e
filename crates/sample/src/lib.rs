//! coldstart's built-in example: a synthetic C++ program, a shared library
//! and a PIE executable, generated deterministically from a seed and a size,
//! with the exact ground truth of what it contains and what its startup runs.
//!
//! [`generate`] writes the sources and `manifest.json`; [`build`] compiles
//! and links them; [`GroundTruth`] says which functions exist where, which
//! the startup path calls and in what order, and which units have static
//! initializers. Tests compare coldstart's traces, order files and ELF
//! analyses against it.
//!
//! ```no_run
//! use coldstart_sample::{BuildOptions, SampleSpec, build, generate};
//! # fn main() -> anyhow::Result<()> {
//! let truth = generate(&SampleSpec::tiny(), "sample/src".as_ref())?;
//! let app = build("sample/src".as_ref(), "sample/build".as_ref(), &BuildOptions::default(), &mut |_| {})?;
//! app.run()?;
//! println!("{} functions, {} on the startup path", truth.functions.len(), truth.startup_order.len());
//! # Ok(())
//! # }
//! ```

mod build;
mod design;
mod emit;
mod manifest;
mod parts;
mod rng;
mod spec;

use std::collections::HashSet;
use std::fs;
use std::io::ErrorKind;
use std::path::Path;

use anyhow::{Context, Result};

pub use build::{BuildEvent, BuildOptions, BuiltApp, Compiler, build};
pub use manifest::{
    BuildRecord, Function, FunctionKind, GroundTruth, MANIFEST_FILE, MANIFEST_FORMAT, Module,
    ModuleLayout, Part, PartSection, PartTouch, SizeClass, StartupCall, StaticInitializer,
    TranslationUnit,
};
pub use rng::Rng;
pub use spec::SampleSpec;

use design::{Design, HEADER, MAIN_SOURCE, RUNTIME_SOURCE, source_name};

/// The ground truth of the app `spec` describes, without writing anything.
pub fn plan(spec: &SampleSpec) -> Result<GroundTruth> {
    Ok(Design::new(spec)?.ground_truth())
}

/// Writes the sources of the app `spec` describes and its `manifest.json`
/// into `dir`, and returns the manifest.
///
/// Files whose content is already right are left untouched, so their
/// timestamps and the build's cached objects stay valid. Units left over
/// from a larger spec (`tu*.cpp` files not in this one) are removed.
pub fn generate(spec: &SampleSpec, dir: &Path) -> Result<GroundTruth> {
    let design = Design::new(spec)?;
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    write_if_changed(&dir.join(HEADER), &emit::header(&design))?;
    write_if_changed(&dir.join(RUNTIME_SOURCE), &emit::runtime(&design))?;
    write_if_changed(&dir.join(MAIN_SOURCE), &emit::main_source(&design))?;
    let mut current = HashSet::new();
    for unit in &design.units {
        let name = source_name(&unit.name);
        write_if_changed(&dir.join(&name), &emit::unit_source(&design, unit))?;
        current.insert(name);
    }
    for part in &design.parts {
        write_if_changed(&dir.join(&part.source), &parts::source(spec, part))?;
        current.insert(part.source.clone());
    }
    remove_stale_units(dir, &current)?;
    let truth = design.ground_truth();
    write_if_changed(&dir.join(MANIFEST_FILE), &truth.to_json()?)?;
    Ok(truth)
}

/// Generates the app `spec` describes into `dir/src` and builds it into
/// `dir/build` with the default options.
pub fn generate_and_build(spec: &SampleSpec, dir: &Path) -> Result<BuiltApp> {
    let source = dir.join("src");
    generate(spec, &source)?;
    build(
        &source,
        &dir.join("build"),
        &BuildOptions::default(),
        &mut |_| {},
    )
}

/// Writes `text` unless the file already holds exactly it.
pub(crate) fn write_if_changed(path: &Path, text: &str) -> Result<()> {
    match fs::read(path) {
        Ok(existing) if existing == text.as_bytes() => return Ok(()),
        Ok(_) => {}
        Err(error) if error.kind() == ErrorKind::NotFound => {}
        Err(error) => return Err(error).with_context(|| format!("reading {}", path.display())),
    }
    fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

/// Only names the generator itself could have written (`tu*.cpp`,
/// `part*.s`) are touched.
fn remove_stale_units(dir: &Path, current: &HashSet<String>) -> Result<()> {
    let entries = fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))?;
    for entry in entries {
        let entry = entry.with_context(|| format!("listing {}", dir.display()))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let numbered = |prefix: &str, suffix: &str| {
            name.strip_prefix(prefix)
                .and_then(|rest| rest.strip_suffix(suffix))
                .is_some_and(|digits| {
                    !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())
                })
        };
        let generated = numbered("tu", ".cpp") || numbered("part", ".s");
        if generated && !current.contains(name) {
            fs::remove_file(entry.path())
                .with_context(|| format!("removing the stale unit {}", entry.path().display()))?;
        }
    }
    Ok(())
}
