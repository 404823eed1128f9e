//! inspect on the sample app, built with and without
//! -z pack-relative-relocs: every count equals readelf's, the static
//! initializers are the generator's, and the RELR size inspect predicts for
//! the unpacked build is the size the linker produces for the packed one.

mod common;

use coldstart_binary::{InspectOptions, Inspection, inspect_path};
use coldstart_sample::{BuildOptions, BuiltApp, Module, SampleSpec, build, generate};
use common::assert_matches_readelf;
use std::path::Path;
use std::sync::OnceLock;

struct Builds {
    _dir: tempfile::TempDir,
    plain: BuiltApp,
    packed: BuiltApp,
}

/// One generation, two links, shared by the tests of this file.
fn builds() -> &'static Builds {
    static BUILDS: OnceLock<Builds> = OnceLock::new();
    BUILDS.get_or_init(|| {
        let dir = tempfile::tempdir().expect("temp dir");
        let spec = SampleSpec {
            translation_units: 16,
            functions: 400,
            ..SampleSpec::tiny()
        };
        let src = dir.path().join("src");
        generate(&spec, &src).expect("generate");
        let plain = build(
            &src,
            &dir.path().join("plain"),
            &BuildOptions::default(),
            &mut |_| {},
        )
        .expect("build");
        let packed_options = BuildOptions {
            pack_relative_relocs: true,
            ..BuildOptions::default()
        };
        let packed = build(
            &src,
            &dir.path().join("packed"),
            &packed_options,
            &mut |_| {},
        )
        .expect("build with -z pack-relative-relocs");
        plain.run().expect("plain build runs");
        packed.run().expect("packed build runs");
        Builds {
            _dir: dir,
            plain,
            packed,
        }
    })
}

fn inspect(path: &Path) -> Inspection {
    inspect_path(path, &InspectOptions::default()).expect("inspect")
}

#[test]
fn plain_build_matches_readelf() {
    let b = builds();
    for path in [&b.plain.executable, &b.plain.library] {
        let ins = assert_matches_readelf(path);
        assert!(ins.relocations.relr_offsets.is_empty());
        assert!(!ins.dynamic.as_ref().unwrap().relr);
    }
}

#[test]
fn packed_build_matches_readelf() {
    let b = builds();
    for path in [&b.packed.executable, &b.packed.library] {
        let ins = assert_matches_readelf(path);
        let dynamic = ins.dynamic.as_ref().unwrap();
        assert!(dynamic.relr, "{}: DT_RELR", path.display());
        // ld adds the version need where glibc asks for it: in objects
        // that need libc.so (the library only needs libstdc++).
        let needs_libc = dynamic.needed.iter().any(|n| n.starts_with("libc.so."));
        assert_eq!(dynamic.relr_version_need, needs_libc, "{}", path.display());
        assert!(!ins.relocations.relr_offsets.is_empty());
        assert!(
            ins.warnings
                .iter()
                .all(|w| w.code != "relr-without-version-need"),
            "{:?}",
            ins.warnings
        );
    }
}

#[test]
fn relr_prediction_equals_what_the_linker_produces() {
    let b = builds();
    for (plain, packed) in [
        (&b.plain.executable, &b.packed.executable),
        (&b.plain.library, &b.packed.library),
    ] {
        let before = inspect(plain);
        let after = inspect(packed);
        let estimate = before
            .relocations
            .relr_estimate
            .expect("relative relocations");
        // The oracle: readelf's section table of the packed build.
        let relr_size: u64 = common::sections(packed)
            .iter()
            .filter(|s| s.kind == "RELR")
            .map(|s| s.size)
            .sum();
        assert_eq!(estimate.relr_bytes, relr_size, "{}", plain.display());
        // Packing moves every packable relative relocation and no other.
        let decoded = common::relocations(packed).relr_offsets.len() as u64;
        assert_eq!(estimate.packable, decoded, "{}", plain.display());
        assert_eq!(before.relocations.total, after.relocations.total);
        assert_eq!(before.relocations.relative, after.relocations.relative);
    }
}

#[test]
fn initializers_are_the_generators() {
    let b = builds();
    let truth = &b.plain.ground_truth;
    for (path, module) in [
        (&b.plain.library, Module::Library),
        (&b.plain.executable, Module::Executable),
    ] {
        let ins = inspect(path);
        let names: Vec<&str> = ins
            .init_array
            .entries
            .iter()
            .filter_map(|e| e.symbol.as_deref())
            .collect();
        for init in truth
            .static_initializers
            .iter()
            .filter(|i| i.module == module)
        {
            let expected = init
                .init_function
                .as_deref()
                .expect("the build names each initializer function");
            assert!(
                names.contains(&expected),
                "{}: initializer {expected} of TU {} not found in {names:?}",
                path.display(),
                init.tu
            );
        }
        // Every slot resolved to a function the symbol table names.
        assert!(
            ins.init_array.entries.iter().all(|e| e.symbol.is_some()),
            "{:?}",
            ins.init_array.entries
        );
    }
}
