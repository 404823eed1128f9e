//! `coldstart loadcost` from the command line: a short quick experiment's
//! JSON has one series per factor, mode and cache state, each level the
//! design names timed in every round, the SVG has a panel per factor, and a
//! factor that does not exist is one clear error. The libraries the command
//! built and kept are counted with readelf and nm: each level it reports is
//! what the toolchain finds added to the base library, and nothing else
//! changed. (Every factor's libraries are checked the same way, built
//! through the library, in crates/loadcost/tests.)

use serde_json::Value;
use std::path::Path;
use std::process::Command;

fn coldstart() -> Command {
    Command::new(env!("CARGO_BIN_EXE_coldstart"))
}

/// What a load costs in, per library, as binutils counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Counts {
    /// R_X86_64_RELATIVE entries in the relocation tables.
    relative: u64,
    /// R_X86_64_64 entries: symbolic relocations.
    symbolic: u64,
    /// R_X86_64_JUMP_SLOT entries: PLT slots.
    plt_slots: u64,
    /// DT_INIT_ARRAYSZ / 8: initializer slots.
    initializers: u64,
    /// Defined dynamic symbols, by nm -D.
    exported: u64,
}

fn tool_output(program: &str, args: &[&str], file: &Path) -> String {
    let output = coldstart_testkit::run_ok(Command::new(program).args(args).arg(file));
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn counts(library: &Path) -> Counts {
    let relocations = tool_output("readelf", &["-W", "-r"], library);
    let of_type = |kind: &str| {
        relocations
            .lines()
            .filter(|line| line.split_whitespace().nth(2) == Some(kind))
            .count() as u64
    };
    let dynamic = tool_output("readelf", &["-W", "-d"], library);
    let init_array_bytes: u64 = dynamic
        .lines()
        .find(|line| line.contains("(INIT_ARRAYSZ)"))
        .and_then(|line| {
            line.split(')')
                .nth(1)?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .unwrap_or(0);
    Counts {
        relative: of_type("R_X86_64_RELATIVE"),
        symbolic: of_type("R_X86_64_64"),
        plt_slots: of_type("R_X86_64_JUMP_SLOT"),
        initializers: init_array_bytes / 8,
        exported: tool_output("nm", &["-D", "--defined-only"], library)
            .lines()
            .count() as u64,
    }
}

/// The library the command kept for one configuration.
fn kept_library(work: &Path, factor: &str, level: u64) -> Counts {
    counts(&work.join(format!("{factor}-{level}/lib/libcslc.so")))
}

/// Each kept library against the base one, counted by the toolchain: a
/// `relative` level adds exactly that many relative relocations, an
/// `initializers` level that many .init_array slots and, since each slot
/// is a pointer into the library, as many relative relocations; nothing
/// else moves.
fn assert_levels_are_what_the_toolchain_counts(work: &Path, json: &Value) {
    let base = kept_library(work, "relative", 0);
    assert_eq!(kept_library(work, "initializers", 0), base, "the two bases");
    for series in json["series"].as_array().unwrap() {
        let factor = series["factor"].as_str().unwrap();
        for level in series["levels"].as_array().unwrap() {
            let level = level["level"].as_u64().unwrap();
            let built = kept_library(work, factor, level);
            let expected = match factor {
                "relative" => Counts {
                    relative: base.relative + level,
                    ..base
                },
                "initializers" => Counts {
                    relative: base.relative + level,
                    initializers: base.initializers + level,
                    ..base
                },
                other => panic!("unasked factor {other}"),
            };
            assert_eq!(built, expected, "{factor}-{level}");
        }
    }
    // The direct check timed the relative factor's libraries: its levels
    // are their relocation counts above the base's.
    for level in json["direct"]["levels"].as_array().unwrap() {
        let level = level["level"].as_u64().unwrap();
        assert_eq!(
            kept_library(work, "relative", level).relative - base.relative,
            level
        );
    }
}

#[test]
fn a_quick_experiment_reports_every_series_and_the_direct_check() {
    let have = |program: &str| Command::new(program).arg("--version").output().is_ok();
    if !have("cc") || !have("readelf") || !have("nm") {
        coldstart_testkit::skip("needs cc, readelf and nm (apt-get install gcc binutils)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("loadcost.svg");
    let output = coldstart_testkit::run_ok(
        coldstart()
            .args(["loadcost", "--quick", "--rounds", "3"])
            .args(["--factors", "initializers,relative", "--json", "--dir"])
            .arg(dir.path().join("work"))
            .arg("--svg")
            .arg(&svg),
    );
    let json: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(json["rounds"], 3);
    assert_eq!(json["interrupted"], false);
    let series = json["series"].as_array().unwrap();
    assert_eq!(series.len(), 2 * 2 * 2);
    for s in series {
        let levels: Vec<u64> = s["levels"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| {
                assert_eq!(l["runs"], 3);
                l["level"].as_u64().unwrap()
            })
            .collect();
        let expected = match s["factor"].as_str().unwrap() {
            "relative" => vec![0, 5_000, 10_000],
            "initializers" => vec![0, 200, 400],
            other => panic!("unasked factor {other}"),
        };
        assert_eq!(levels, expected);
        let fit = &s["fit"];
        assert!(fit["slope_ci_ns"][0].as_f64().unwrap() <= fit["slope_ci_ns"][1].as_f64().unwrap());
    }
    let direct = &json["direct"];
    assert_eq!(direct["levels"].as_array().unwrap().len(), 3);
    assert!(direct["agrees"].is_boolean());
    // The work directory was kept because --dir named it.
    assert!(
        dir.path()
            .join("work/relative-10000/lib/libcslc.so")
            .exists()
    );
    assert_levels_are_what_the_toolchain_counts(&dir.path().join("work"), &json);
    let drawing = std::fs::read_to_string(&svg).unwrap();
    assert!(drawing.starts_with("<svg"));
    assert!(
        drawing.contains(">relative (relocation)<")
            && drawing.contains(">initializers (initializer)<")
    );
}

#[test]
fn an_unknown_factor_is_one_clear_error() {
    let output = coldstart()
        .args(["loadcost", "--factors", "relative,speed"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("unknown factor \"speed\""), "{stderr}");
    assert!(stderr.contains("plt_lazy"), "{stderr}");
}
