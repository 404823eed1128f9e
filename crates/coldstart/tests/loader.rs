//! `coldstart trace --loader` then `coldstart report` on the sample app, as
//! root, against oracles outside coldstart: `ldd` for the objects ld.so
//! relocates, `readelf -W -r` for each object's relocations by kind, and
//! for the library's initializers, in order, `readelf` (DT_INIT and the
//! relocations that fill `.init_array`) with `nm` naming their targets,
//! and the generator's manifest for the units that have one.

use coldstart_sample::{BuildOptions, Module, SampleSpec, build, generate};
use coldstart_testkit::{can_trace, run_ok, skip};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

fn coldstart() -> Command {
    Command::new(env!("CARGO_BIN_EXE_coldstart"))
}

fn text(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn hex(field: &str) -> Option<u64> {
    u64::from_str_radix(field.trim_start_matches("0x"), 16).ok()
}

/// One relocation `readelf -W -r` lists.
struct Relocation {
    offset: u64,
    /// None for an address a DT_RELR table relocates (readelf decodes
    /// them, one address a line).
    kind: Option<String>,
    /// r_info's symbol index is not 0.
    symbolic: bool,
    /// The last field: the addend (what a relative relocation stores).
    addend: Option<u64>,
}

fn readelf_relocations(path: &Path) -> Vec<Relocation> {
    let out = text(&run_ok(Command::new("readelf").arg("-Wr").arg(path)));
    let mut in_relr = false;
    let mut relocations = Vec::new();
    for line in out.lines() {
        if line.starts_with("Relocation section") {
            in_relr = line.contains(".relr");
            continue;
        }
        let f: Vec<&str> = line.split_whitespace().collect();
        match f[..] {
            [offset] if in_relr && offset.len() == 16 => relocations.push(Relocation {
                offset: hex(offset).unwrap(),
                kind: None,
                symbolic: false,
                addend: None,
            }),
            [offset, info, kind, ..] if offset.len() == 16 && info.len() == 16 => {
                let (Some(offset), Some(info)) = (hex(offset), hex(info)) else {
                    continue;
                };
                relocations.push(Relocation {
                    offset,
                    kind: Some(kind.to_string()),
                    symbolic: info >> 32 != 0,
                    addend: f.last().and_then(|a| hex(a)),
                });
            }
            _ => {}
        }
    }
    relocations
}

/// The relocation figures `report --json` gives, from readelf.
fn expected_relocations(path: &Path) -> Value {
    let relocations = readelf_relocations(path);
    let count =
        |wanted: &dyn Fn(&Relocation) -> bool| relocations.iter().filter(|r| wanted(r)).count();
    let kind = |r: &Relocation, name: &str| r.kind.as_deref() == Some(name);
    let relr = count(&|r| r.kind.is_none());
    let relative = relr + count(&|r| kind(r, "R_X86_64_RELATIVE"));
    let symbolic = count(&|r| r.symbolic);
    let mut by_type = BTreeMap::new();
    for kind in relocations.iter().filter_map(|r| r.kind.clone()) {
        *by_type.entry(kind).or_insert(0u64) += 1;
    }
    serde_json::json!({
        "total": relocations.len(),
        "relative": relative,
        "symbolic": symbolic,
        "other": relocations.len() - relative - symbolic,
        "plt": count(&|r| kind(r, "R_X86_64_JUMP_SLOT")),
        "relr": relr,
        "by_type": by_type,
    })
}

/// The objects ld.so loads for `program`, as `ldd` names them (the vdso,
/// which has no file, left out).
fn ldd_objects(program: &Path) -> BTreeSet<String> {
    text(&run_ok(Command::new("ldd").arg(program)))
        .lines()
        .filter_map(|line| {
            let line = line.trim();
            let name = match line.split_once(" => ") {
                Some((_, path)) => path,
                None => line,
            };
            let path = name.split(" (").next()?.trim();
            path.starts_with('/').then(|| path.to_string())
        })
        .collect()
}

/// Function names at each address of `library`, raw and as `nm -C` gives
/// them: the same symbols in the same order.
fn nm_functions(library: &Path) -> HashMap<u64, Vec<(String, String)>> {
    let raw = text(&run_ok(
        Command::new("nm").arg("--defined-only").arg(library),
    ));
    let demangled = text(&run_ok(
        Command::new("nm")
            .args(["--defined-only", "-C"])
            .arg(library),
    ));
    let mut by_address: HashMap<u64, Vec<(String, String)>> = HashMap::new();
    for (raw, demangled) in raw.lines().zip(demangled.lines()) {
        let [address, kind, name] = raw.splitn(3, ' ').collect::<Vec<_>>()[..] else {
            continue;
        };
        if !matches!(kind, "T" | "t") {
            continue;
        }
        let shown = demangled.splitn(3, ' ').nth(2).unwrap_or("").to_string();
        by_address
            .entry(hex(address).unwrap())
            .or_default()
            .push((name.to_string(), shown));
    }
    by_address
}

/// The initializers ld.so runs for `library`, in order, from readelf:
/// DT_INIT, then each `.init_array` slot's relocation by slot address.
fn expected_initializers(library: &Path) -> Vec<(String, u64)> {
    let dynamic = text(&run_ok(Command::new("readelf").arg("-dW").arg(library)));
    let init = dynamic
        .lines()
        .find(|l| l.contains("(INIT)"))
        .and_then(|l| l.split_whitespace().last())
        .and_then(hex);
    let sections = text(&run_ok(Command::new("readelf").arg("-SW").arg(library)));
    let array = sections
        .lines()
        .find_map(|l| {
            let (_, rest) = l.split_once(']')?;
            let f: Vec<&str> = rest.split_whitespace().collect();
            (f.first() == Some(&".init_array")).then(|| (hex(f[2]).unwrap(), hex(f[4]).unwrap()))
        })
        .expect(".init_array");
    let mut slots: Vec<Relocation> = readelf_relocations(library)
        .into_iter()
        .filter(|r| (array.0..array.0 + array.1).contains(&r.offset))
        .collect();
    slots.sort_by_key(|r| r.offset);
    assert_eq!(slots.len() as u64, array.1 / 8, "a relocation per slot");
    init.map(|a| ("DT_INIT".to_string(), a))
        .into_iter()
        .chain(slots.iter().enumerate().map(|(i, r)| {
            assert_eq!(r.kind.as_deref(), Some("R_X86_64_RELATIVE"));
            (format!("DT_INIT_ARRAY[{i}]"), r.addend.unwrap())
        }))
        .collect()
}

fn tools_missing() -> Option<&'static str> {
    ["readelf", "nm", "ldd", "g++"].into_iter().find(|tool| {
        !Command::new(tool)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    })
}

#[test]
fn the_sample_apps_loader_phases_match_readelf_nm_and_ldd() {
    if !can_trace() {
        return;
    }
    if let Some(tool) = tools_missing() {
        skip(&format!(
            "{tool} not installed (apt-get install g++ binutils libc-bin)"
        ));
        return;
    }
    let dir = tempfile::Builder::new()
        .prefix("coldstart-loader-test")
        .tempdir_in("/var/tmp")
        .expect("temp dir");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let spec = SampleSpec {
        translation_units: 12,
        functions: 240,
        ..SampleSpec::tiny()
    };
    generate(&spec, &dir.path().join("src")).expect("generate");
    let app = build(
        &dir.path().join("src"),
        &dir.path().join("build"),
        &BuildOptions::default(),
        &mut |_| {},
    )
    .expect("build");
    let db = dir.path().join("app.db");
    run_ok(
        coldstart()
            .args(["trace", "--loader", "--ready-regex", "^READY$", "-o"])
            .arg(&db)
            .arg("--")
            .arg(&app.executable),
    );
    let report: Value =
        serde_json::from_slice(&run_ok(coldstart().arg("report").arg(&db).arg("--json")).stdout)
            .expect("JSON");
    if report["loader"].is_null() {
        skip(&format!(
            "the loader was not traced here: {}",
            report["warnings"]
        ));
        return;
    }
    let process = report["loader"]["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["program"] == app.executable.to_str().unwrap())
        .unwrap_or_else(|| panic!("no loader process for the app: {:#}", report["loader"]));
    let objects = process["objects"].as_array().unwrap();

    // ld.so relocated exactly the objects ldd lists, and the program.
    let relocated: BTreeSet<String> = objects
        .iter()
        .filter(|o| o["relocated"] == true)
        .map(|o| o["object"].as_str().unwrap().to_string())
        .collect();
    let mut expected = ldd_objects(&app.executable);
    expected.insert(String::new());
    assert_eq!(relocated, expected);

    // Each relocated object's relocations by kind, as readelf lists them.
    for object in objects.iter().filter(|o| o["relocated"] == true) {
        let path = object["path"].as_str().expect("the file of each object");
        let counted = &object["relocations"];
        let expected = expected_relocations(Path::new(path));
        for field in [
            "total", "relative", "symbolic", "other", "plt", "relr", "by_type",
        ] {
            assert_eq!(counted[field], expected[field], "{path}: {field}");
        }
        assert_eq!(object["origin"], "initial", "{path}");
    }

    check_library_initializers(objects, &app);
    check_library_search(objects, &app);

    let shown = text(&run_ok(coldstart().arg("report").arg(&db)));
    assert!(shown.contains("\nDynamic loader\n"), "{shown}");
    assert!(shown.contains("_GLOBAL__sub_I_"), "{shown}");
}

fn object<'a>(objects: &'a [Value], path: &Path) -> &'a Value {
    objects
        .iter()
        .find(|o| o["object"] == path.to_str().unwrap())
        .unwrap_or_else(|| panic!("{} not among {objects:#?}", path.display()))
}

/// libcssample.so's initializers: DT_INIT then every `.init_array` entry,
/// in order, named as nm names their targets; the manifest's initializers
/// of library units among them.
fn check_library_initializers(objects: &[Value], app: &coldstart_sample::BuiltApp) {
    let library = object(objects, &app.library);
    let functions = nm_functions(&app.library);
    let expected: Vec<(String, String, String)> = expected_initializers(&app.library)
        .into_iter()
        .map(|(slot, address)| {
            let names = &functions[&address];
            assert_eq!(names.len(), 1, "one function at 0x{address:x}: {names:?}");
            (slot, names[0].0.clone(), names[0].1.clone())
        })
        .collect();
    let recorded: Vec<(String, String, String)> = library["initializers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let field = |name: &str| c[name].as_str().unwrap_or("?").to_string();
            (field("slot"), field("raw_name"), field("name"))
        })
        .collect();
    assert_eq!(recorded, expected);
    let names: BTreeSet<&str> = recorded.iter().map(|c| c.1.as_str()).collect();
    let from_manifest: Vec<&str> = app
        .ground_truth
        .static_initializers
        .iter()
        .filter(|s| s.module == Module::Library)
        .map(|s| s.init_function.as_deref().expect("built"))
        .collect();
    assert!(!from_manifest.is_empty());
    for name in from_manifest {
        assert!(names.contains(name), "{name} not run: {recorded:?}");
    }
}

/// The library was found where the executable's RUNPATH ($ORIGIN) points:
/// the last open of its search is that file, and succeeded.
fn check_library_search(objects: &[Value], app: &coldstart_sample::BuiltApp) {
    let library = object(objects, &app.library);
    let opens = library["opens"].as_array().unwrap();
    let last = opens.last().expect("an open");
    assert_eq!(last["path"], app.library.to_str().unwrap());
    assert!(last["result"].as_i64().unwrap() >= 0, "{last}");
    let failed = opens
        .iter()
        .filter(|o| o["result"].as_i64().is_some_and(|r| r < 0))
        .count();
    assert_eq!(library["opens_failed"], failed);
    assert_eq!(library["opens_tried"], opens.len());
}
