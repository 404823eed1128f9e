//! Builds small sample apps with the real compiler and checks them against
//! oracles outside this crate: `nm` and `readelf` for what the binaries
//! contain, and a `-finstrument-functions` hook for what startup runs.

use std::collections::{HashMap, HashSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use coldstart_sample::{
    BuildEvent, BuildOptions, BuiltApp, Compiler, GroundTruth, Module, SampleSpec, build, generate,
};
use tempfile::TempDir;

/// Generates `spec` and builds it with `options` in a fresh temp directory.
fn build_sample(spec: &SampleSpec, options: &BuildOptions) -> (TempDir, GroundTruth, BuiltApp) {
    let dir = tempfile::tempdir().expect("tmp");
    let truth = generate(spec, &dir.path().join("src")).expect("generate");
    let app = build(
        &dir.path().join("src"),
        &dir.path().join("build"),
        options,
        &mut |_| {},
    )
    .expect("build");
    (dir, truth, app)
}

fn tool(program: &str, args: &[&str]) -> String {
    let output = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running {program}: {e}"));
    assert!(
        output.status.success(),
        "{program} {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("utf-8 tool output")
}

/// `nm --defined-only` of a binary: symbol name to (address, type letter).
fn defined_symbols(binary: &Path, demangle: bool) -> HashMap<String, (u64, char)> {
    let path = binary.to_str().expect("utf-8 path");
    let args: &[&str] = if demangle {
        &["-C", "--defined-only", path]
    } else {
        &["--defined-only", path]
    };
    tool("nm", args)
        .lines()
        .filter_map(|line| {
            let mut fields = line.splitn(3, ' ');
            let address = u64::from_str_radix(fields.next()?, 16).ok()?;
            let kind = fields.next()?.chars().next()?;
            Some((fields.next()?.to_string(), (address, kind)))
        })
        .collect()
}

/// Size in bytes of a section, from `readelf -SW`.
fn section_size(binary: &Path, section: &str) -> Option<u64> {
    let listing = tool("readelf", &["-SW", binary.to_str().expect("utf-8 path")]);
    listing.lines().find_map(|line| {
        let fields: Vec<&str> = line.split(']').nth(1)?.split_whitespace().collect();
        // Name Type Address Off Size ...
        (fields.first() == Some(&section)).then(|| u64::from_str_radix(fields[4], 16).ok())?
    })
}

fn binary_of(app: &BuiltApp, module: Module) -> &Path {
    match module {
        Module::Library => &app.library,
        Module::Executable => &app.executable,
    }
}

#[test]
fn a_tiny_app_builds_and_prints_ready() {
    let (_dir, _truth, app) = build_sample(&SampleSpec::tiny(), &BuildOptions::default());
    let output = app.command().output().expect("run the sample");
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert_eq!(String::from_utf8_lossy(&output.stdout), "READY\n");
    app.run().expect("run helper agrees");
    // It finds its library through the rpath, with no LD_LIBRARY_PATH.
    let dynamic = tool("readelf", &["-dW", app.executable.to_str().expect("path")]);
    assert!(dynamic.contains("[$ORIGIN]"), "{dynamic}");
    assert!(dynamic.contains("Shared library: [libcssample.so]"));
}

#[test]
fn nm_and_readelf_agree_with_the_ground_truth() {
    let spec = SampleSpec {
        translation_units: 10,
        functions: 200,
        ..SampleSpec::tiny()
    };
    let (_dir, generated, app) = build_sample(&spec, &BuildOptions::default());
    assert!(
        generated
            .static_initializers
            .iter()
            .all(|i| i.init_function.is_none())
    );
    let truth = &app.ground_truth;

    for module in [Module::Library, Module::Executable] {
        let binary = binary_of(&app, module);
        let mangled = defined_symbols(binary, false);
        let demangled = defined_symbols(binary, true);
        let demangled_at: HashMap<u64, Vec<&str>> =
            demangled
                .iter()
                .fold(HashMap::new(), |mut at, (name, (address, _))| {
                    at.entry(*address).or_default().push(name.as_str());
                    at
                });
        let other = match module {
            Module::Library => defined_symbols(&app.executable, false),
            Module::Executable => defined_symbols(&app.library, false),
        };
        for function in &truth.functions {
            if function.module != module {
                continue;
            }
            let (address, kind) = mangled
                .get(&function.symbol)
                .unwrap_or_else(|| panic!("{} not defined in {binary:?}", function.symbol));
            assert_eq!(*kind, 'T', "{} is not global text", function.symbol);
            assert!(
                demangled_at[address].contains(&function.name.as_str()),
                "nm -C shows {:?} for {}",
                demangled_at[address],
                function.name
            );
            assert!(
                !other.contains_key(&function.symbol),
                "{} in both",
                function.symbol
            );
        }

        // One compiler-made initializer per unit with a static initializer.
        let expected: HashSet<&str> = truth
            .static_initializers
            .iter()
            .filter(|init| init.module == module)
            .map(|init| init.init_function.as_deref().expect("named after build"))
            .collect();
        let found: HashSet<&str> = mangled
            .keys()
            .map(String::as_str)
            .filter(|name| name.starts_with("_GLOBAL__sub_I_"))
            .collect();
        assert_eq!(found, expected, "initializers in {binary:?}");
        for init in truth
            .static_initializers
            .iter()
            .filter(|i| i.module == module)
        {
            assert!(
                mangled.contains_key(&init.constructor),
                "{}",
                init.constructor
            );
            assert!(demangled.contains_key(&init.constructor_name));
        }
        let init_array = section_size(binary, ".init_array").expect(".init_array");
        assert!(
            init_array / 8 >= expected.len() as u64,
            "{} .init_array entries for {} initializers",
            init_array / 8,
            expected.len()
        );
    }

    // Vtables in the library point at exported methods: symbolic relocations.
    let relocations = tool("readelf", &["-rW", app.library.to_str().expect("path")]);
    let library_methods: HashSet<&str> = truth
        .functions_in(Module::Library)
        .filter(|f| f.kind == coldstart_sample::FunctionKind::VirtualMethod)
        .map(|f| f.symbol.as_str())
        .collect();
    let symbolic_to_methods = relocations
        .lines()
        .filter(|line| line.contains("R_X86_64_64"))
        .filter(|line| {
            line.split_whitespace()
                .any(|word| library_methods.contains(word))
        })
        .count();
    assert!(symbolic_to_methods > 0, "no R_X86_64_64 against a method");
    assert!(relocations.contains("R_X86_64_RELATIVE"));
}

const TRACE_HOOK: &str = r#"
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* Records the first call of each function as "file offset", with the offset
   from the module's load base, so it can be matched against nm. */
#define SLOTS 65536
static void* seen[SLOTS];
static int trace_fd = -1;

__attribute__((no_instrument_function)) static int first_call(void* fn) {
    size_t slot = ((size_t)fn >> 4) & (SLOTS - 1);
    while (seen[slot]) {
        if (seen[slot] == fn) return 0;
        slot = (slot + 1) & (SLOTS - 1);
    }
    seen[slot] = fn;
    return 1;
}

__attribute__((no_instrument_function)) void __cyg_profile_func_enter(void* fn, void* site) {
    (void)site;
    if (!first_call(fn)) return;
    if (trace_fd < 0) {
        const char* path = getenv("CS_TRACE_FILE");
        if (!path) return;
        trace_fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0644);
        if (trace_fd < 0) return;
    }
    Dl_info info;
    if (!dladdr(fn, &info) || !info.dli_fname) return;
    char line[4096];
    int n = snprintf(line, sizeof line, "%s %lx\n", info.dli_fname,
                     (unsigned long)((char*)fn - (char*)info.dli_fbase));
    if (n > 0 && n < (int)sizeof line) (void)!write(trace_fd, line, (size_t)n);
}

__attribute__((no_instrument_function)) void __cyg_profile_func_exit(void* fn, void* site) {
    (void)fn;
    (void)site;
}
"#;

#[test]
fn the_startup_order_is_what_really_runs() {
    let spec = SampleSpec {
        seed: 11,
        translation_units: 10,
        functions: 200,
        startup_share: 0.25,
        library_share: 0.7,
        ..SampleSpec::tiny()
    };
    let options = BuildOptions {
        extra_cflags: vec!["-finstrument-functions".to_string()],
        ..BuildOptions::default()
    };
    let (dir, truth, app) = build_sample(&spec, &options);

    let hook_source = dir.path().join("hook.c");
    let hook = dir.path().join("hook.so");
    fs::write(&hook_source, TRACE_HOOK).expect("write hook");
    tool(
        "gcc",
        &[
            "-shared",
            "-fPIC",
            "-O1",
            "-o",
            hook.to_str().expect("path"),
            hook_source.to_str().expect("path"),
        ],
    );
    let trace_path = dir.path().join("trace.txt");
    let output = app
        .command()
        .env("LD_PRELOAD", &hook)
        .env("CS_TRACE_FILE", &trace_path)
        .output()
        .expect("run traced");
    assert!(output.status.success(), "{output:?}");
    assert_eq!(String::from_utf8_lossy(&output.stdout), "READY\n");

    // (module, offset) to ground-truth symbol, through nm.
    let ground_truth: HashSet<&str> = truth.functions.iter().map(|f| f.symbol.as_str()).collect();
    let mut symbol_at: HashMap<(Module, u64), String> = HashMap::new();
    for module in [Module::Library, Module::Executable] {
        for (name, (address, _)) in defined_symbols(binary_of(&app, module), false) {
            if ground_truth.contains(name.as_str()) {
                symbol_at.insert((module, address), name);
            }
        }
    }
    let trace = fs::read_to_string(&trace_path).expect("trace written");
    let library_name = app.library.file_name().expect("library name");
    let executable_name = app.executable.file_name().expect("executable name");
    let mut traced_modules = HashSet::new();
    let ran: Vec<&str> = trace
        .lines()
        .filter_map(|line| {
            let (file, offset) = line.rsplit_once(' ')?;
            let module = match PathBuf::from(file).file_name() {
                Some(name) if name == library_name => Module::Library,
                Some(name) if name == executable_name => Module::Executable,
                _ => return None,
            };
            traced_modules.insert(module);
            let offset = u64::from_str_radix(offset, 16).expect("hex offset");
            symbol_at.get(&(module, offset)).map(String::as_str)
        })
        .collect();
    assert_eq!(traced_modules.len(), 2, "trace:\n{trace}");

    let expected: Vec<&str> = truth
        .startup_functions()
        .map(|f| f.symbol.as_str())
        .collect();
    assert_eq!(expected.len(), 50);
    assert_eq!(ran, expected);
}

#[test]
fn rebuilds_only_what_changed() {
    let dir = tempfile::tempdir().expect("tmp");
    let (source, output) = (dir.path().join("src"), dir.path().join("build"));
    let truth = generate(&SampleSpec::tiny(), &source).expect("generate");
    let objects = truth.translation_units.len() + 2;
    let parts = truth.parts.len();
    assert!(parts > 0);

    let mut events = Vec::new();
    let mut build_with = |options: &BuildOptions| {
        events.clear();
        let app = build(&source, &output, options, &mut |event| events.push(event)).expect("build");
        app.run().expect("runs");
        let compiled = events
            .iter()
            .filter(|e| matches!(e, BuildEvent::Compiled { .. }))
            .count();
        let linked = events
            .iter()
            .filter(|e| matches!(e, BuildEvent::Linking { .. }))
            .count();
        (compiled, linked)
    };

    let options = BuildOptions::default();
    // A part is assembled and linked in one command, counted as compiled.
    assert_eq!(build_with(&options), (objects + parts, 2));
    assert_eq!(build_with(&options), (0, 0));
    let relinked = BuildOptions {
        extra_ldflags: vec!["-Wl,-O1".to_string()],
        ..options.clone()
    };
    assert_eq!(build_with(&relinked), (0, 2));
    let recompiled = BuildOptions {
        extra_cflags: vec!["-fno-omit-frame-pointer".to_string()],
        ..relinked.clone()
    };
    assert_eq!(build_with(&recompiled), (objects, 2));

    // Touching one unit recompiles only that unit.
    let unit = source.join(&truth.translation_units[2].source);
    let mut text = fs::read_to_string(&unit).expect("read unit");
    text.push_str("// edited\n");
    fs::write(&unit, text).expect("edit unit");
    assert_eq!(build_with(&recompiled), (1, 2));

    // Parts ignore the app's compile and link flags; an edited part is
    // rebuilt and only the executable, which needs it, is linked again.
    let part = source.join(&truth.parts[1].source);
    let mut text = fs::read_to_string(&part).expect("read part");
    text.push_str("# edited\n");
    fs::write(&part, text).expect("edit part");
    assert_eq!(build_with(&recompiled), (1, 1));
}

#[test]
fn a_build_reusing_another_compiles_only_what_differs() {
    let dir = tempfile::tempdir().expect("tmp");
    let source = dir.path().join("src");
    let truth = generate(&SampleSpec::tiny(), &source).expect("generate");
    let objects = truth.translation_units.len() + 2;
    let parts = truth.parts.len();
    let plain = build(
        &source,
        &dir.path().join("plain"),
        &BuildOptions::default(),
        &mut |_| {},
    )
    .expect("plain build");

    let build_counting = |into: &str, options: &BuildOptions| {
        let mut compiled = 0;
        let app = build(&source, &dir.path().join(into), options, &mut |event| {
            compiled += usize::from(matches!(event, BuildEvent::Compiled { .. }));
        })
        .expect("build");
        app.run().expect("runs");
        (app, compiled)
    };
    // Linked with other flags, from the plain build's objects and parts.
    let relinked = BuildOptions {
        extra_ldflags: vec!["-Wl,-O1".to_string()],
        reuse_from: Some(plain.build_dir.clone()),
        ..BuildOptions::default()
    };
    let (copy, compiled) = build_counting("relinked", &relinked);
    assert_eq!(compiled, 0);
    let mut copied = 0;
    for entry in fs::read_dir(plain.build_dir.join("obj")).expect("plain objects") {
        let other = entry.expect("entry").path();
        if other.extension().is_some_and(|e| e == "o") {
            let object = copy
                .build_dir
                .join("obj")
                .join(other.file_name().expect("name"));
            assert_eq!(
                fs::read(&object).expect("copied object"),
                fs::read(&other).expect("object")
            );
            copied += 1;
        }
    }
    assert_eq!(copied, objects);
    for (part, other) in copy.parts.iter().zip(&plain.parts) {
        assert_eq!(
            fs::read(part).expect("copied part"),
            fs::read(other).expect("part")
        );
    }
    // Other compile flags: every object is compiled, the parts still copied.
    let recompiled = BuildOptions {
        extra_cflags: vec!["-fno-omit-frame-pointer".to_string()],
        ..relinked.clone()
    };
    assert_eq!(build_counting("recompiled", &recompiled).1, objects);
    // Nothing to reuse from: everything is built.
    let fresh = BuildOptions {
        reuse_from: Some(dir.path().join("no-such-build")),
        ..BuildOptions::default()
    };
    assert_eq!(build_counting("fresh", &fresh).1, objects + parts);
}

#[test]
fn a_compile_error_names_the_unit_and_shows_the_compiler_output() {
    let dir = tempfile::tempdir().expect("tmp");
    let source = dir.path().join("src");
    let truth = generate(&SampleSpec::tiny(), &source).expect("generate");
    let broken = &truth.translation_units[3].source;
    fs::write(source.join(broken), "int broken( {\n").expect("break a unit");
    let error = build(
        &source,
        &dir.path().join("build"),
        &BuildOptions::default(),
        &mut |_| {},
    )
    .expect_err("must fail");
    let message = format!("{error:#}");
    assert!(
        message.contains(&format!("compiling {broken}")),
        "{message}"
    );
    assert!(message.contains("error:"), "{message}");
}

#[test]
fn pack_relative_relocs_gives_relr_and_still_runs() {
    let options = BuildOptions {
        pack_relative_relocs: true,
        ..BuildOptions::default()
    };
    let (_dir, _truth, app) = build_sample(&SampleSpec::tiny(), &options);
    app.run().expect("runs with RELR");
    for binary in [&app.library, &app.executable] {
        assert!(
            section_size(binary, ".relr.dyn").is_some(),
            "no .relr.dyn in {binary:?}"
        );
    }
}

#[test]
fn relinks_with_gold_and_a_section_order() {
    let dir = tempfile::tempdir().expect("tmp");
    let (source, output) = (dir.path().join("src"), dir.path().join("build"));
    let spec = SampleSpec {
        startup_share: 0.3,
        ..SampleSpec::tiny()
    };
    let truth = generate(&spec, &source).expect("generate");
    // With -ffunction-sections each function has its own `.text.<symbol>`.
    let startup_in_library: Vec<&str> = truth
        .startup_functions()
        .filter(|f| f.module == Module::Library)
        .map(|f| f.symbol.as_str())
        .collect();
    // Enough that address order matching by chance is out of the question.
    assert!(startup_in_library.len() >= 8, "{startup_in_library:?}");
    let order_file = dir.path().join("order.txt");
    let order: String = startup_in_library
        .iter()
        .map(|symbol| format!(".text.{symbol}\n"))
        .collect();
    fs::write(&order_file, order).expect("write order file");

    let options = BuildOptions {
        extra_ldflags: vec![
            "-fuse-ld=gold".to_string(),
            format!("-Wl,--section-ordering-file={}", order_file.display()),
        ],
        ..BuildOptions::default()
    };
    let app = build(&source, &output, &options, &mut |_| {}).expect("build with gold");
    app.run().expect("runs");
    assert!(section_size(&app.library, ".note.gnu.gold-version").is_some());
    let symbols = defined_symbols(&app.library, false);
    let addresses: Vec<u64> = startup_in_library.iter().map(|s| symbols[*s].0).collect();
    assert!(
        addresses.windows(2).all(|pair| pair[0] < pair[1]),
        "not laid out in startup order: {addresses:x?}"
    );
}

#[test]
fn builds_with_clang_when_installed() {
    let options = BuildOptions {
        compiler: Compiler::Clang,
        ..BuildOptions::default()
    };
    if !Compiler::Clang.is_installed() {
        let dir = tempfile::tempdir().expect("tmp");
        generate(&SampleSpec::tiny(), &dir.path().join("src")).expect("generate");
        let error = build(
            &dir.path().join("src"),
            &dir.path().join("build"),
            &options,
            &mut |_| {},
        )
        .expect_err("clang++ is missing");
        assert!(
            format!("{error:#}").contains("apt-get install clang"),
            "{error:#}"
        );
        // .ci/run installs clang; there a skip is a failure.
        return coldstart_testkit::skip("clang++ not installed (apt-get install clang)");
    }
    let (_dir, _generated, app) = build_sample(&SampleSpec::tiny(), &options);
    let truth = &app.ground_truth;
    let output = app.command().output().expect("run");
    assert_eq!(String::from_utf8_lossy(&output.stdout), "READY\n");
    for module in [Module::Library, Module::Executable] {
        let symbols = defined_symbols(binary_of(&app, module), false);
        for function in truth.functions_in(module) {
            assert!(
                symbols.contains_key(&function.symbol),
                "{}",
                function.symbol
            );
        }
        for init in truth
            .static_initializers
            .iter()
            .filter(|i| i.module == module)
        {
            let name = init.init_function.as_deref().expect("named after build");
            assert!(symbols.contains_key(name), "{name}");
        }
    }
}

/// `driver` runs another driver of the same family: clang++-19, whose
/// `.comment` (readelf) names it in every binary, and the manifest records
/// it. A driver that is not there is named in the error.
#[test]
fn builds_with_the_driver_it_is_given() {
    let dir = tempfile::tempdir().expect("tmp");
    generate(&SampleSpec::tiny(), &dir.path().join("src")).expect("generate");
    let missing = BuildOptions {
        compiler: Compiler::Clang,
        driver: Some("clang++-no-such-version".into()),
        ..BuildOptions::default()
    };
    let error = build(
        &dir.path().join("src"),
        &dir.path().join("missing"),
        &missing,
        &mut |_| {},
    )
    .expect_err("no such driver");
    assert!(
        format!("{error:#}").contains("`clang++-no-such-version` is not installed"),
        "{error:#}"
    );
    if !Path::new("/usr/bin/clang++-19").exists() {
        // .ci/run installs clang-19; there a skip is a failure.
        return coldstart_testkit::skip("clang++-19 not installed (apt-get install clang-19)");
    }
    let options = BuildOptions {
        compiler: Compiler::Clang,
        driver: Some("clang++-19".into()),
        extra_cflags: vec!["-fbasic-block-address-map".into()],
        ..BuildOptions::default()
    };
    let app = build(
        &dir.path().join("src"),
        &dir.path().join("build"),
        &options,
        &mut |_| {},
    )
    .expect("builds with clang++-19");
    app.run().expect("runs");
    let record = app.ground_truth.build.as_ref().expect("build record");
    assert_eq!(record.compiler, "clang++-19");
    assert!(
        record.compiler_version.contains("clang version 19"),
        "{}",
        record.compiler_version
    );
    for binary in [&app.executable, &app.library] {
        let path = binary.to_str().expect("utf-8 path");
        let comment = tool("readelf", &["-p", ".comment", path]);
        assert!(comment.contains("clang version 19"), "{path}: {comment}");
        let sections = tool("readelf", &["-SW", path]);
        assert!(
            sections.contains(".llvm_bb_addr_map"),
            "{path}: no block map"
        );
    }
}

/// The part libraries and the cold code, checked with readelf and nm: the
/// executable needs every part, each part's code, table and pointers have
/// the manifest's sizes at page-aligned addresses, its relocations are the
/// manifest's pointers plus its initializer's `.init_array` entry, and each
/// unit's cold code is a local function of the manifest's size.
#[test]
fn parts_and_cold_code_are_what_the_manifest_says() {
    let (_dir, truth, app) = build_sample(&SampleSpec::tiny(), &BuildOptions::default());
    app.run().expect("tiny app runs");
    assert_eq!(app.parts.len(), truth.parts.len());
    let needed = tool(
        "readelf",
        &["-dW", app.executable.to_str().expect("utf-8 path")],
    );
    for part in &truth.parts {
        assert!(
            needed.contains(&format!("Shared library: [{}]", part.output)),
            "{} not needed:\n{needed}",
            part.output
        );
    }
    let page = 4096;
    for (part, path) in truth.parts.iter().zip(&app.parts) {
        let sized = tool(
            "nm",
            &["-S", "--defined-only", path.to_str().expect("utf-8")],
        );
        let symbol = |name: &str| -> (u64, u64, char) {
            let line = sized
                .lines()
                .find(|line| line.ends_with(&format!(" {name}")))
                .unwrap_or_else(|| panic!("{name} not in nm -S of {path:?}:\n{sized}"));
            let fields: Vec<&str> = line.split_whitespace().collect();
            let hex = |s: &str| u64::from_str_radix(s, 16).expect("hex");
            (
                hex(fields[0]),
                hex(fields[1]),
                fields[2].chars().next().unwrap(),
            )
        };
        for (name, pages, kind) in [
            (&part.code_symbol, part.text_pages, 't'),
            (&part.table_symbol, part.rodata_pages, 'r'),
            (&part.pointers_symbol, part.relro_pages, 'd'),
        ] {
            let (address, size, found) = symbol(name);
            assert_eq!(address % page, 0, "{name} not page-aligned");
            assert_eq!(size, u64::from(pages) * page, "{name}");
            assert_eq!(found, kind, "{name}");
        }
        assert_eq!(symbol(&part.ready_symbol).2, 'T');
        let relocations = tool("readelf", &["-rW", path.to_str().expect("utf-8")]);
        let relative = relocations
            .lines()
            .filter(|line| line.contains("R_X86_64_RELATIVE"))
            .count();
        assert_eq!(relative, part.relative_relocations as usize + 1, "{path:?}");
    }
    for (module, binary) in [
        (Module::Library, &app.library),
        (Module::Executable, &app.executable),
    ] {
        let sized = tool(
            "nm",
            &["-S", "--defined-only", binary.to_str().expect("utf-8")],
        );
        for unit in truth
            .translation_units
            .iter()
            .filter(|u| u.module == module)
        {
            let name = format!("cs_cold_{}", unit.source.trim_end_matches(".cpp"));
            let line = sized
                .lines()
                .find(|line| line.ends_with(&format!(" {name}")))
                .unwrap_or_else(|| panic!("{name} not in {binary:?}"));
            let fields: Vec<&str> = line.split_whitespace().collect();
            assert_eq!(
                u64::from_str_radix(fields[1], 16).expect("hex"),
                u64::from(unit.cold_code_bytes)
            );
            assert_eq!(fields[2], "t", "{name} is not local text");
        }
    }
}
