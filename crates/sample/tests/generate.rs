//! Generator tests that need no compiler: determinism, incremental writes,
//! and the shape of the startup path at the default size.

use std::collections::{BTreeMap, HashSet};
use std::fs;
use std::path::Path;

use coldstart_sample::{
    FunctionKind, GroundTruth, MANIFEST_FILE, Module, SampleSpec, generate, plan,
};

fn read_tree(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    fs::read_dir(dir)
        .expect("list generated dir")
        .map(|entry| {
            let entry = entry.expect("dir entry");
            let name = entry.file_name().to_string_lossy().into_owned();
            (name, fs::read(entry.path()).expect("read generated file"))
        })
        .collect()
}

fn small_spec(seed: u64) -> SampleSpec {
    SampleSpec {
        seed,
        translation_units: 12,
        functions: 300,
        parts: 3,
        part_kib: 128,
        ..SampleSpec::default_size()
    }
}

#[test]
fn same_seed_gives_byte_identical_files() {
    let (one, two) = (
        tempfile::tempdir().expect("tmp"),
        tempfile::tempdir().expect("tmp"),
    );
    generate(&small_spec(7), one.path()).expect("generate");
    generate(&small_spec(7), two.path()).expect("generate");
    let (first, second) = (read_tree(one.path()), read_tree(two.path()));
    // 12 units, 3 parts, the header, runtime.cpp, main.cpp and the manifest.
    assert_eq!(first.len(), 19);
    assert_eq!(first, second);
}

#[test]
fn another_seed_gives_another_program() {
    let (one, two) = (
        tempfile::tempdir().expect("tmp"),
        tempfile::tempdir().expect("tmp"),
    );
    generate(&small_spec(7), one.path()).expect("generate");
    generate(&small_spec(8), two.path()).expect("generate");
    let (first, second) = (read_tree(one.path()), read_tree(two.path()));
    assert_eq!(
        first.keys().collect::<Vec<_>>(),
        second.keys().collect::<Vec<_>>()
    );
    assert_ne!(first[MANIFEST_FILE], second[MANIFEST_FILE]);
    // Every file names its seed on the first line; the code after it differs too.
    let code = |bytes: &[u8]| bytes.splitn(2, |&b| b == b'\n').nth(1).map(<[u8]>::to_vec);
    let differing_units = first
        .iter()
        .filter(|(name, bytes)| name.starts_with("tu") && code(bytes) != code(&second[*name]))
        .count();
    assert_eq!(differing_units, 12);
    let differing_parts = first
        .iter()
        .filter(|(name, bytes)| name.starts_with("part") && code(bytes) != code(&second[*name]))
        .count();
    assert_eq!(differing_parts, 3);
}

#[test]
fn the_manifest_on_disk_is_the_returned_ground_truth() {
    let dir = tempfile::tempdir().expect("tmp");
    let returned = generate(&small_spec(3), dir.path()).expect("generate");
    let text = fs::read_to_string(dir.path().join(MANIFEST_FILE)).expect("manifest");
    let parsed: GroundTruth = serde_json::from_str(&text).expect("parse manifest");
    assert_eq!(parsed, returned);
    assert_eq!(plan(&small_spec(3)).expect("plan"), returned);
    assert!(returned.build.is_none());
    assert!(!text.contains("\"build\""));
}

#[test]
fn regenerating_leaves_unchanged_files_alone_and_drops_stale_units() {
    let dir = tempfile::tempdir().expect("tmp");
    generate(&small_spec(5), dir.path()).expect("generate");
    let header = dir.path().join("cs_sample.h");
    let before = fs::metadata(&header)
        .and_then(|m| m.modified())
        .expect("mtime");
    // Make any rewrite visible in the timestamp, whatever its resolution.
    std::thread::sleep(std::time::Duration::from_millis(20));
    generate(&small_spec(5), dir.path()).expect("generate again");
    let after = fs::metadata(&header)
        .and_then(|m| m.modified())
        .expect("mtime");
    assert_eq!(before, after);

    let fewer = SampleSpec {
        translation_units: 6,
        parts: 1,
        ..small_spec(5)
    };
    generate(&fewer, dir.path()).expect("generate smaller");
    assert!(dir.path().join("tu0005.cpp").exists());
    assert!(!dir.path().join("tu0006.cpp").exists());
    assert!(!dir.path().join("tu0011.cpp").exists());
    assert!(dir.path().join("part00.s").exists());
    assert!(!dir.path().join("part01.s").exists());
}

#[test]
fn an_invalid_spec_is_refused_before_writing() {
    let dir = tempfile::tempdir().expect("tmp");
    let target = dir.path().join("never");
    let spec = SampleSpec {
        functions: 3,
        ..SampleSpec::tiny()
    };
    let error = generate(&spec, &target).expect_err("invalid spec");
    assert!(format!("{error:#}").contains("must be at least translation_units"));
    assert!(!target.exists());
}

/// The default app is shaped like a big native program: its start touches
/// at least 20 shared libraries and tens of MiB of them, sparsely.
#[test]
fn the_default_start_touches_twenty_libraries_and_tens_of_mib_sparsely() {
    let truth = plan(&SampleSpec::default_size()).expect("plan");
    let page = 4096;
    let touching: Vec<_> = truth
        .parts
        .iter()
        .filter(|p| p.touched_pages() > 0)
        .collect();
    // The part libraries, the library and the executable.
    assert!(touching.len() + 2 >= 20, "{} libraries", touching.len() + 2);
    let touched = truth.part_bytes_touched(page);
    assert!(touched >= 20 << 20, "{} MiB touched", touched >> 20);
    let footprint: u64 = truth.parts.iter().map(|p| p.pages() * page).sum();
    assert!(
        touched * 4 < footprint,
        "{touched} of {footprint} bytes: not sparse"
    );
    // Among 120 MiB of code no start runs in the C++ modules.
    let cold: u64 = truth
        .translation_units
        .iter()
        .map(|u| u64::from(u.cold_code_bytes))
        .sum();
    assert!((120 << 20) - cold < 16 * 200, "{cold} bytes of cold code");
}

#[test]
fn default_size_has_the_requested_shape() {
    let truth = plan(&SampleSpec::default_size()).expect("plan");
    assert_eq!(truth.translation_units.len(), 200);
    assert_eq!(truth.functions.len(), 10_000);
    let library_units = truth
        .translation_units
        .iter()
        .filter(|u| u.module == Module::Library)
        .count();
    assert_eq!(library_units, 150);
    let methods = truth
        .functions
        .iter()
        .filter(|f| f.kind == FunctionKind::VirtualMethod)
        .count();
    assert!((1500..2500).contains(&methods), "{methods} virtual methods");
    // Static initializers in many units of both modules.
    let inits = &truth.static_initializers;
    assert!(inits.len() > 75, "{} static initializers", inits.len());
    assert!(inits.iter().any(|i| i.module == Module::Executable));
    // Names are unique, so a symbol identifies its function.
    let symbols: HashSet<&str> = truth.functions.iter().map(|f| f.symbol.as_str()).collect();
    assert_eq!(symbols.len(), truth.functions.len());
}

#[test]
fn startup_path_is_a_scattered_five_percent_of_both_modules() {
    let truth = plan(&SampleSpec::default_size()).expect("plan");
    let order = &truth.startup_order;
    let share = order.len() as f64 / truth.functions.len() as f64;
    assert!((0.045..=0.055).contains(&share), "startup share {share}");

    let ids: Vec<u32> = order.iter().map(|c| c.function).collect();
    assert_eq!(
        ids.iter().collect::<HashSet<_>>().len(),
        ids.len(),
        "a function repeats"
    );

    let in_library = truth
        .startup_functions()
        .filter(|f| f.module == Module::Library)
        .count();
    assert!(
        (order.len() / 2..order.len() * 9 / 10).contains(&in_library),
        "{in_library} of {} startup functions in the library",
        order.len()
    );
    let units: HashSet<u32> = truth.startup_functions().map(|f| f.tu).collect();
    assert!(
        units.len() >= 175,
        "startup touches only {} units",
        units.len()
    );

    // A random permutation, not address order: about half the neighbours ascend.
    let ascending = ids.windows(2).filter(|pair| pair[0] < pair[1]).count();
    assert!(
        (200..300).contains(&ascending),
        "{ascending} ascending neighbours"
    );

    let virtual_calls = order.iter().filter(|c| c.virtual_call).count();
    assert!(virtual_calls >= 50, "{virtual_calls} virtual calls");
    let from_executable_into_library = order
        .iter()
        .filter(|c| {
            let caller_module = c
                .caller
                .map_or(Module::Executable, |id| truth.functions[id as usize].module);
            caller_module == Module::Executable
                && truth.functions[c.function as usize].module == Module::Library
        })
        .count();
    assert!(from_executable_into_library >= 25);
    // Library code cannot call into the executable.
    for call in order {
        if let Some(caller) = call.caller
            && truth.functions[caller as usize].module == Module::Library
        {
            assert_eq!(
                truth.functions[call.function as usize].module,
                Module::Library
            );
        }
    }
}

#[test]
fn tiny_still_reaches_both_modules_and_a_virtual_method() {
    let truth = plan(&SampleSpec::tiny()).expect("plan");
    assert_eq!(truth.startup_order.len(), 3);
    let modules: HashSet<Module> = truth.startup_functions().map(|f| f.module).collect();
    assert_eq!(modules.len(), 2);
    assert!(truth.startup_order.iter().any(|c| c.virtual_call));
}
