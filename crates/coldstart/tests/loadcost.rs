//! `coldstart loadcost` from the command line: a short quick experiment's
//! JSON has one series per factor, mode and cache state, each level the
//! design names timed in every round, the SVG has a panel per factor, and a
//! factor that does not exist is one clear error. (The generated libraries
//! themselves are checked against readelf in crates/loadcost/tests.)

use serde_json::Value;
use std::process::Command;

fn coldstart() -> Command {
    Command::new(env!("CARGO_BIN_EXE_coldstart"))
}

#[test]
fn a_quick_experiment_reports_every_series_and_the_direct_check() {
    if Command::new("cc").arg("--version").output().is_err() {
        coldstart_testkit::skip("needs a C compiler (apt-get install gcc)");
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
