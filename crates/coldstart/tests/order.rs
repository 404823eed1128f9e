//! `coldstart runtime`, `trace --functions`, `order` and `simulate --order`
//! end to end on a C program whose call order is known by construction:
//! the order file must list its functions in that order, and lld must lay
//! the plain build out that way (nm is the oracle).

use coldstart_testkit::{can_trace, run_ok, skip};
use serde_json::Value;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The order `main` calls them in; each is called `index + 1` times.
const CALLED: [&str; 6] = ["f4", "f1", "f5", "f0", "f3", "f2"];
/// Defined but never called, each before a called one and bigger than a
/// page, so that the called ones are scattered over the file.
const UNCALLED: [&str; 6] = ["g0", "g1", "g2", "g3", "g4", "g5"];

fn function(name: &str, statements: usize) -> String {
    format!(
        "__attribute__((noinline)) void {name}(int x) {{ \
         for (int i = 0; i < x; i++) {{ {} }} }}\n",
        "sink += i * 7; sink ^= i; ".repeat(statements)
    )
}

fn source() -> String {
    let mut text = String::from("#include <stdio.h>\nvolatile int sink;\n");
    for (called, uncalled) in CALLED.iter().zip(&UNCALLED) {
        text.push_str(&function(uncalled, 400));
        text.push_str(&function(called, 20));
    }
    text.push_str("int main(void) {\n");
    for (i, name) in CALLED.iter().enumerate() {
        text.push_str(&format!("  for (int n = 0; n <= {i}; n++) {name}(n);\n"));
    }
    text.push_str("  puts(\"READY\");\n  return 0;\n}\n");
    text
}

fn coldstart() -> Command {
    Command::new(env!("CARGO_BIN_EXE_coldstart"))
}

/// Builds DIR/OUT/program: the builds share a file name, as a plain and
/// an instrumented build of one program do.
fn cc(dir: &Path, out: &str, extra: &[&str]) -> PathBuf {
    std::fs::create_dir_all(dir.join(out)).unwrap();
    let path = dir.join(out).join("program");
    run_ok(
        Command::new("gcc")
            .args(["-O1", "-ffunction-sections", "-fno-inline"])
            .arg(dir.join("program.c"))
            // After the source: an archive only serves symbols already wanted.
            .args(extra)
            .arg("-o")
            .arg(&path),
    );
    path
}

/// Function names in address order, as nm prints them.
fn nm_order(binary: &Path) -> Vec<String> {
    let output = run_ok(Command::new("nm").arg("-n").arg(binary));
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let (_, kind, name) = (fields.next()?, fields.next()?, fields.next()?);
            (kind == "T" || kind == "t").then(|| name.to_string())
        })
        .filter(|name| CALLED.contains(&name.as_str()) || UNCALLED.contains(&name.as_str()))
        .collect()
}

/// A directory with an `ld.lld` for gcc's -B.
fn lld_dir() -> Option<PathBuf> {
    ["/usr/bin", "/usr/lib/llvm-19/bin"]
        .iter()
        .map(PathBuf::from)
        .find(|dir| dir.join("ld.lld").exists())
}

#[test]
fn function_traces_give_an_order_lld_follows() {
    if !can_trace() {
        return;
    }
    let dir = tempfile::Builder::new()
        .prefix("coldstart-order-test")
        .tempdir_in("/var/tmp")
        .expect("temp dir");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(dir.path().join("program.c"), source()).unwrap();
    let runtime = dir.path().join("rt");
    run_ok(coldstart().arg("runtime").arg("--out").arg(&runtime));
    let plain = cc(dir.path(), "plain", &[]);
    let instrumented = cc(
        dir.path(),
        "instrumented",
        &[
            "-finstrument-functions",
            runtime.join("libcoldstart_functions.a").to_str().unwrap(),
        ],
    );
    let db = dir.path().join("p.db");
    let traced = run_ok(
        coldstart()
            .args(["trace", "--functions", "--json", "-o"])
            .arg(&db)
            .arg("--")
            .arg(&instrumented),
    );
    let summary: Value = serde_json::from_slice(&traced.stdout).unwrap();
    assert_eq!(
        summary["functions"]["functions"],
        CALLED.len() + 1,
        "{summary:#}"
    );

    let order_file = dir.path().join("p.order");
    let ordered = run_ok(
        coldstart()
            .arg("order")
            .arg(&db)
            .arg("--binary")
            .arg(&plain)
            .args(["--linker", "lld", "--json", "-o"])
            .arg(&order_file),
    );
    let report: Value = serde_json::from_slice(&ordered.stdout).unwrap();
    assert_eq!(report["source"]["kind"], "functions", "{report:#}");
    let names = coldstart_layout::read_order_file(&order_file).unwrap();
    let expected: Vec<&str> = std::iter::once("main").chain(CALLED).collect();
    assert_eq!(names, expected);

    // By count: f2 is called 6 times, f4 once; main, once too, was called first.
    let by_count = dir.path().join("count.order");
    run_ok(
        coldstart()
            .arg("order")
            .arg(&db)
            .arg("--binary")
            .arg(&plain)
            .args(["--linker", "bolt", "--strategy", "call-count", "-o"])
            .arg(&by_count),
    );
    let names = coldstart_layout::read_order_file(&by_count).unwrap();
    assert_eq!(names, ["f2", "f3", "f0", "f5", "f1", "main", "f4"]);

    let Some(lld) = lld_dir() else {
        skip("lld is not installed (apt-get install lld-19): the relink is not checked");
        return;
    };
    let relinked = cc(
        dir.path(),
        "relinked",
        &[
            &format!("-B{}", lld.display()),
            "-fuse-ld=lld",
            &format!("-Wl,--symbol-ordering-file={}", order_file.display()),
        ],
    );
    let laid_out = nm_order(&relinked);
    assert_eq!(&laid_out[..CALLED.len()], CALLED, "nm -n: {laid_out:?}");
    run_ok(&mut Command::new(&relinked));

    // The simulator reads the same file and predicts the new layout.
    let predicted = run_ok(
        coldstart()
            .arg("simulate")
            .arg(&db)
            .arg("--binary")
            .arg(&instrumented)
            .arg("--order")
            .arg(&order_file)
            .args(["--read-ahead-kb", "0", "--json"]),
    );
    let report: Value = serde_json::from_slice(&predicted.stdout).unwrap();
    assert_eq!(report["files"][0]["relaid"], true, "{report:#}");
}
