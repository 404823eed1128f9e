//! `coldstart simulate` against the kernel: the sample app is traced with
//! readahead off and then at 128 and 8192 KiB, and the model's prediction
//! of the pages read from the first trace must come within 10% of what
//! the kernel really read in the others, for the app's own two binaries.

use coldstart_sample::{SampleSpec, generate_and_build};
use coldstart_testkit::{can_trace, run_ok};
use serde_json::Value;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

fn coldstart() -> Command {
    Command::new(env!("CARGO_BIN_EXE_coldstart"))
}

fn trace(db: &Path, app: &coldstart_sample::BuiltApp, read_ahead_kb: &str) {
    run_ok(
        coldstart()
            .args([
                "trace",
                "--json",
                "--ready-regex",
                "^READY$",
                "--read-ahead-kb",
                read_ahead_kb,
            ])
            .arg("--evict")
            .arg(&app.executable)
            .arg("--evict")
            .arg(&app.library)
            .arg("-o")
            .arg(db)
            .arg("--")
            .arg(&app.executable),
    );
}

fn simulate(db: &Path, against: u32) -> Value {
    let output = run_ok(coldstart().arg("simulate").arg(db).args([
        "--run",
        "1",
        "--against",
        &against.to_string(),
        "--json",
    ]));
    serde_json::from_slice(&output.stdout).expect("JSON")
}

#[test]
fn predicted_reads_are_within_ten_percent_of_measured() {
    if !can_trace() {
        return;
    }
    let dir = tempfile::Builder::new()
        .prefix("coldstart-simulate-test")
        .tempdir_in("/var/tmp")
        .expect("temp dir");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    // Big enough that a 128 KiB window covers a small part of the library.
    let spec = SampleSpec {
        translation_units: 24,
        functions: 2400,
        startup_share: 0.1,
        ..SampleSpec::tiny()
    };
    let app = generate_and_build(&spec, dir.path()).expect("generate and build");
    let db = dir.path().join("app.db");
    for read_ahead_kb in ["0", "128", "8192"] {
        trace(&db, &app, read_ahead_kb);
    }
    for (against, read_ahead_kb) in [(2, 128), (3, 8192)] {
        let report = simulate(&db, against);
        assert_eq!(report["read_ahead_kb"], read_ahead_kb);
        for binary in [&app.executable, &app.library] {
            let path = binary.to_str().unwrap();
            let file = report["files"]
                .as_array()
                .unwrap()
                .iter()
                .find(|f| f["path"] == path)
                .unwrap_or_else(|| panic!("{path} not in {report:#}"));
            let predicted = file["pages_read"].as_u64().unwrap();
            let measured = file["measured"]["pages_read"].as_u64().unwrap();
            let touched = file["pages_touched"].as_u64().unwrap();
            assert!(touched > 0 && measured >= touched, "{file:#}");
            let error = (predicted as f64 - measured as f64).abs() / measured as f64;
            assert!(
                error <= 0.10,
                "{path} at read_ahead_kb {read_ahead_kb}: predicted {predicted} pages, \
                 measured {measured}: {file:#}"
            );
        }
    }
}
