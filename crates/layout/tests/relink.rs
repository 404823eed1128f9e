//! Relinks the sample app's library with each ELF linker's order file and
//! checks, with nm as the oracle, that the ordered functions come out in
//! exactly the order given, contiguous and first in .text, that the linker
//! said nothing about them, and that the app still runs. BOLT rewrites the
//! executable, linked with --emit-relocs, the same way.

mod common;

use coldstart_binary::{OffsetIndex, SymbolBinding};
use coldstart_layout::{
    BfdTarget, EmitContext, EmitReport, Kind, Linker, ObjectIndex, Order, emit, read_order,
};
use coldstart_sample::{BuildOptions, BuiltApp, Compiler, Module, SampleSpec, build, generate};
use common::{
    assert_contiguous, code_symbols, nm_symbols, path_with_llvm, run, section_address,
    section_range, skip, stderr, tool, used_in_order,
};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// A name no object defines, traced along with the real ones: the emitters
/// must leave it out, and a linker must then have nothing to warn about.
const NOT_LINKED: &str = "_ZN9cs_sample13not_linked_inEv";

struct Sample {
    dir: PathBuf,
    app: BuiltApp,
    library_objects: Vec<PathBuf>,
    executable_objects: Vec<PathBuf>,
}

/// The sample app, built once for every test here; None without g++. It
/// lives in cargo's scratch directory for tests, not a temporary one: a
/// static is never dropped, and the next run reuses the objects.
fn sample() -> Option<&'static Sample> {
    static SAMPLE: OnceLock<Option<Sample>> = OnceLock::new();
    SAMPLE
        .get_or_init(|| {
            if !Compiler::Gcc.is_installed() {
                return None;
            }
            let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("layout-relink");
            let spec = SampleSpec {
                seed: 7,
                translation_units: 8,
                functions: 320,
                startup_share: 0.3,
                library_share: 0.5,
                // These tests link the executable by hand from its objects.
                parts: 0,
                ..SampleSpec::tiny()
            };
            let src = dir.join("src");
            generate(&spec, &src).expect("generate");
            let app = build(
                &src,
                &dir.join("build"),
                &BuildOptions::default(),
                &mut |_| {},
            )
            .expect("build");
            // build() keeps each object as obj/<source stem>.o.
            let object = |source: &str| {
                let stem = source.strip_suffix(".cpp").unwrap_or(source);
                let path = app.build_dir.join("obj").join(format!("{stem}.o"));
                assert!(path.is_file(), "{} missing", path.display());
                path
            };
            let truth = &app.ground_truth;
            let objects_of = |module: Module, support: &str| -> Vec<PathBuf> {
                std::iter::once(object(support))
                    .chain(
                        truth
                            .translation_units
                            .iter()
                            .filter(|u| u.module == module)
                            .map(|u| object(&u.source)),
                    )
                    .collect()
            };
            let library_objects = objects_of(Module::Library, &truth.library.support_source);
            let executable_objects =
                objects_of(Module::Executable, &truth.executable.support_source);
            Some(Sample {
                dir,
                app,
                library_objects,
                executable_objects,
            })
        })
        .as_ref()
}

fn sample_or_skip() -> Option<&'static Sample> {
    let sample = sample();
    if sample.is_none() {
        skip("g++ is not installed (apt-get install g++)");
    }
    sample
}

/// What a relink must produce.
struct Expected {
    order: Order,
    /// The functions, in order.
    functions: Vec<String>,
    /// Data objects by the output section they must lead, in order.
    data: Vec<(&'static str, Vec<String>)>,
}

impl Expected {
    /// Every name the order file must hold, in its order.
    fn names(&self) -> Vec<String> {
        let data = self
            .data
            .iter()
            .flat_map(|(_, names)| names.iter().cloned());
        self.functions.iter().cloned().chain(data).collect()
    }
}

/// One trace: the module's startup functions in reverse call order, so
/// the order differs from what the linker does by itself, then NOT_LINKED;
/// with `data`, then the global objects of .rodata and .data, each in
/// reverse address order.
fn reversed_startup(sample: &Sample, module: Module, binary: &OffsetIndex, data: bool) -> Expected {
    let mut functions: Vec<String> = sample
        .app
        .ground_truth
        .startup_functions()
        .filter(|f| f.module == module)
        .map(|f| f.symbol.clone())
        .collect();
    functions.reverse();
    assert!(
        functions.len() >= 10,
        "too few startup functions to test: {}",
        functions.len()
    );
    let objects_in = |section: &str| -> Vec<String> {
        let mut names: Vec<String> = binary
            .symbols()
            .iter()
            .filter(|s| {
                s.kind == coldstart_binary::SymbolKind::Object
                    && s.binding == SymbolBinding::Global
                    && s.section.map(|i| binary.sections()[i].name.as_str()) == Some(section)
            })
            .map(|s| s.raw_name.clone())
            .collect();
        names.reverse();
        assert!(names.len() >= 3, "too few objects in {section}: {names:?}");
        names
    };
    let data = if data {
        vec![
            (".rodata", objects_in(".rodata")),
            (".data", objects_in(".data")),
        ]
    } else {
        Vec::new()
    };
    let size_of = |name: &str| {
        binary
            .symbols()
            .iter()
            .find(|s| s.raw_name == name)
            .map_or(0, |s| s.size)
    };
    let traced = functions
        .iter()
        .map(|name| (name.as_str(), Kind::Function))
        .chain([(NOT_LINKED, Kind::Function)])
        .chain(
            data.iter()
                .flat_map(|(_, names)| names.iter().map(|n| (n.as_str(), Kind::Data))),
        );
    let order = used_in_order(traced.map(|(name, kind)| (name, kind, size_of(name))));
    Expected {
        order,
        functions,
        data,
    }
}

fn index(path: &Path) -> OffsetIndex {
    OffsetIndex::from_path(path).unwrap_or_else(|e| panic!("{e}"))
}

/// The file holds the expected names, NOT_LINKED was left out for the
/// right reason, and reading the file back gives the order.
fn check_report(report: &EmitReport, text: &str, expected: &[String]) {
    assert_eq!(report.ordered, expected.len(), "{report}");
    assert_eq!(report.unordered.len(), 1, "{report}");
    assert_eq!(report.unordered[0].raw_name, NOT_LINKED);
    assert!(
        report
            .to_string()
            .contains("not in the binary's symbol table")
    );
    assert!(!text.contains(NOT_LINKED));
    let mut read = read_order(text);
    if report.linker == Linker::Ld64 {
        read.iter_mut().for_each(|n| n.insert(0, '_'));
    }
    assert_eq!(read, expected, "read back");
}

/// Links the library from the sample's objects with `extra` flags.
fn relink_library(
    sample: &Sample,
    out: &Path,
    extra: &[String],
    path: Option<&std::ffi::OsStr>,
) -> Output {
    let mut command = Command::new("g++");
    command
        .args(["-shared", "-Wl,-soname,libcssample.so", "-o"])
        .arg(out)
        .args(&sample.library_objects)
        .args(extra);
    if let Some(path) = path {
        command.env("PATH", path);
    }
    run(&mut command)
}

/// The sample's executable runs against `library` and reaches READY.
fn assert_runs_with(sample: &Sample, library: &Path, what: &str) {
    let dir = tempfile::tempdir_in(&sample.dir).expect("temp dir");
    let executable = dir.path().join("cssample");
    coldstart_testkit::copy_executable(&sample.app.executable, &executable);
    std::fs::copy(library, dir.path().join("libcssample.so")).expect("copy library");
    let output = run(Command::new(&executable).current_dir(dir.path()));
    assert!(
        String::from_utf8_lossy(&output.stdout)
            .lines()
            .any(|l| l == "READY"),
        "{what}: the app did not reach READY"
    );
}

/// Emits for `linker` against the original library, relinks with the
/// flags `link_flags` makes from the file's path, and checks the result.
fn relink_and_check(
    linker: Linker,
    objects: Option<&ObjectIndex>,
    bfd: Option<&BfdTarget>,
    link_flags: impl Fn(&Path) -> Vec<String>,
    path: Option<&std::ffi::OsStr>,
    what: &str,
) {
    let Some(sample) = sample_or_skip() else {
        return;
    };
    let original = index(&sample.app.library);
    let expected = reversed_startup(sample, Module::Library, &original, true);
    let context = EmitContext {
        binary: Some(&original),
        objects,
        bfd,
    };
    let emitted = emit(&expected.order, linker, &context).expect("emits");
    check_report(&emitted.report, &emitted.text, &expected.names());
    let dir = tempfile::tempdir_in(&sample.dir).expect("temp dir");
    let file = dir.path().join("order.txt");
    std::fs::write(&file, &emitted.text).expect("write order");
    let out = dir.path().join("libcssample.so");
    let output = relink_library(sample, &out, &link_flags(&file), path);
    let said = stderr(&output);
    assert!(
        !said.contains("warning") && !said.contains(".text."),
        "{what}: the link warned:\n{said}"
    );
    let nm = Path::new("nm");
    let text_start = section_address(&out, ".text");
    assert_contiguous(
        &code_symbols(nm, &out),
        &expected.functions,
        Some(text_start),
        what,
    );
    // Data leads its output section's symbols. Not always its bytes: gold
    // puts the strings and constants it merges (SHF_MERGE, no symbols)
    // first, and no ordering file can move them.
    for (section, names) in &expected.data {
        let kinds = if *section == ".rodata" { "Rr" } else { "Dd" };
        let (start, end) = section_range(&out, section);
        let inside: Vec<(u64, String)> = nm_symbols(nm, &out, kinds)
            .into_iter()
            .filter(|(address, _)| (start..end).contains(address))
            .collect();
        let first = inside.first().map(|(address, _)| *address);
        assert_contiguous(&inside, names, first, &format!("{what}, {section}"));
    }
    assert_runs_with(sample, &out, what);
}

#[test]
fn lld_places_the_order_first_in_text() {
    if tool("ld.lld").is_none() {
        return skip("ld.lld is not installed (apt-get install lld-19)");
    }
    let path = path_with_llvm();
    relink_and_check(
        Linker::Lld,
        None,
        None,
        |file| {
            vec![
                "-fuse-ld=lld".into(),
                format!("-Wl,--symbol-ordering-file={}", file.display()),
            ]
        },
        Some(&path),
        "lld",
    );

    // The control: lld does warn about a name it cannot find, so the check
    // above that it printed nothing is a real one.
    let Some(sample) = sample() else { return };
    let dir = tempfile::tempdir_in(&sample.dir).expect("temp dir");
    let file = dir.path().join("order.txt");
    std::fs::write(&file, format!("{NOT_LINKED}\n")).expect("write");
    let output = relink_library(
        sample,
        &dir.path().join("lib.so"),
        &[
            "-fuse-ld=lld".into(),
            format!("-Wl,--symbol-ordering-file={}", file.display()),
        ],
        Some(&path),
    );
    assert!(stderr(&output).contains(&format!("no such symbol: {NOT_LINKED}")));
}

#[test]
fn gold_places_the_order_first_in_text_with_guessed_and_exact_names() {
    if tool("ld.gold").is_none() {
        return skip("ld.gold is not installed (apt-get install binutils-gold)");
    }
    let flags = |file: &Path| {
        vec![
            "-fuse-ld=gold".into(),
            format!("-Wl,--section-ordering-file={}", file.display()),
        ]
    };
    relink_and_check(
        Linker::Gold,
        None,
        None,
        flags,
        None,
        "gold, guessed section names",
    );
    let Some(sample) = sample() else { return };
    let objects = ObjectIndex::from_paths(&sample.library_objects).expect("objects");
    relink_and_check(
        Linker::Gold,
        Some(&objects),
        None,
        flags,
        None,
        "gold, exact section names",
    );
}

#[test]
fn gnu_ld_places_the_order_first_in_text() {
    let Some(ld) = tool("ld") else {
        return skip("GNU ld is not installed (apt-get install binutils)");
    };
    let target = BfdTarget::probe(&ld, &["-shared"]).expect("probes ld");
    let flags = |file: &Path| {
        if target.has_ordering_file() {
            vec![format!("-Wl,--section-ordering-file={}", file.display())]
        } else {
            vec![format!("-Wl,-T,{}", file.display())]
        }
    };
    relink_and_check(
        Linker::Bfd,
        None,
        Some(&target),
        flags,
        None,
        "GNU ld, guessed section names",
    );
    let Some(sample) = sample() else { return };
    let objects = ObjectIndex::from_paths(&sample.library_objects).expect("objects");
    relink_and_check(
        Linker::Bfd,
        Some(&objects),
        Some(&target),
        flags,
        None,
        "GNU ld, exact section names",
    );
}

#[test]
fn bolt_moves_the_order_to_the_front_of_its_text() {
    let Some(bolt) = tool("llvm-bolt") else {
        return skip("llvm-bolt is not installed (apt-get install bolt-19)");
    };
    let Some(sample) = sample_or_skip() else {
        return;
    };
    let dir = tempfile::tempdir_in(&sample.dir).expect("temp dir");
    // BOLT moves functions only with the link's relocations kept (-q); the
    // executable sits next to the library so it runs as built.
    let linked = sample.app.build_dir.join("cssample-relocs");
    run(Command::new("g++")
        .arg("-pie")
        .arg("-o")
        .arg(&linked)
        .args(&sample.executable_objects)
        .arg(&sample.app.library)
        .args(["-Wl,-rpath,$ORIGIN", "-Wl,-q"]));
    let original = index(&linked);
    let expected = reversed_startup(sample, Module::Executable, &original, false);
    let context = EmitContext {
        binary: Some(&original),
        ..EmitContext::default()
    };
    let emitted = emit(&expected.order, Linker::Bolt, &context).expect("emits");
    check_report(&emitted.report, &emitted.text, &expected.functions);
    assert!(emitted.report.warnings.is_empty(), "{}", emitted.report);

    let file = dir.path().join("order.txt");
    std::fs::write(&file, &emitted.text).expect("write order");
    let bolted = sample.app.build_dir.join("cssample-bolted");
    let output = run(Command::new(&bolt)
        .arg(&linked)
        .arg("-o")
        .arg(&bolted)
        .args(["--reorder-functions=user"])
        .arg(format!("--function-order={}", file.display())));
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        stderr(&output)
    );
    assert!(!said.contains("can't find"), "BOLT missed names:\n{said}");
    let text_start = section_address(&bolted, ".text");
    assert_contiguous(
        &code_symbols(Path::new("nm"), &bolted),
        &expected.functions,
        Some(text_start),
        "BOLT",
    );
    let ran = run(Command::new(&bolted).current_dir(&sample.app.build_dir));
    assert!(
        String::from_utf8_lossy(&ran.stdout)
            .lines()
            .any(|l| l == "READY")
    );

    // Without --emit-relocs, the emitter says BOLT cannot reorder.
    let plain = index(&sample.app.executable);
    let emitted = emit(
        &expected.order,
        Linker::Bolt,
        &EmitContext {
            binary: Some(&plain),
            ..EmitContext::default()
        },
    )
    .expect("emits");
    assert_eq!(emitted.report.warnings.len(), 1);
    assert!(emitted.report.warnings[0].contains("-Wl,-q"));
}
