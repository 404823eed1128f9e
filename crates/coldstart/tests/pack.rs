//! `coldstart pack` end to end: the built binary on gcc-built programs in a
//! temp directory. The relocation counts are readelf's; the packed program
//! must run; exit codes and error lines are what the help text promises.

use coldstart_testkit::skip;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn coldstart() -> Command {
    Command::new(env!("CARGO_BIN_EXE_coldstart"))
}

const SOURCE: &str = "#include <stdio.h>\nstatic const char *words[] = {\"alpha\", \"beta\", \"gamma\"};\n\
                      int main(void) { for (int i = 0; i < 3; i++) puts(words[i]); return 0; }\n";

/// A PIE with relative relocations, or None after a skip.
fn program(dir: &Path, name: &str, flags: &[&str]) -> Option<PathBuf> {
    let source = dir.join(format!("{name}.c"));
    std::fs::write(&source, SOURCE).unwrap();
    let out = dir.join(name);
    match Command::new("gcc")
        .args(["-O1"])
        .args(flags)
        .arg("-o")
        .arg(&out)
        .arg(&source)
        .status()
    {
        Ok(status) if status.success() => Some(out),
        _ => {
            skip("gcc is not installed (apt-get install gcc)");
            None
        }
    }
}

/// R_X86_64_RELATIVE entries readelf lists in the file's .rela.dyn.
fn readelf_relative(path: &Path) -> u64 {
    let out = Command::new("readelf")
        .args(["-W", "-r"])
        .arg(path)
        .output()
        .expect("readelf");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains("R_X86_64_RELATIVE"))
        .count() as u64
}

fn text(output: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn packs_a_program_that_still_runs() {
    let dir = tempfile::tempdir().unwrap();
    let Some(input) = program(dir.path(), "words", &[]) else {
        return;
    };
    let out = dir.path().join("words.packed");
    let result = coldstart()
        .arg("pack")
        .arg(&input)
        .arg("-o")
        .arg(&out)
        .arg("--json")
        .output()
        .unwrap();
    let (stdout, stderr) = text(&result);
    assert!(result.status.success(), "{stderr}");
    let json: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let report = &json["packed"][0];
    assert_eq!(
        report["relative_packed"].as_u64(),
        Some(readelf_relative(&input))
    );
    assert_eq!(
        readelf_relative(&out),
        0,
        "no RELA relative relocation left"
    );
    assert_eq!(
        report["file_bytes_after"].as_u64(),
        Some(std::fs::metadata(&out).unwrap().len())
    );
    assert_eq!(json["dry_run"], false);
    let ran = Command::new(&out).output().unwrap();
    assert!(ran.status.success());
    assert_eq!(String::from_utf8_lossy(&ran.stdout), "alpha\nbeta\ngamma\n");
}

#[test]
fn dry_run_reports_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let Some(input) = program(dir.path(), "words", &[]) else {
        return;
    };
    let result = coldstart()
        .arg("pack")
        .arg(&input)
        .arg("--dry-run")
        .output()
        .unwrap();
    let (stdout, stderr) = text(&result);
    assert!(result.status.success(), "{stderr}");
    assert!(stdout.contains("dry run: nothing written"), "{stdout}");
    let entries: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(
        entries.len(),
        2,
        "only the source and the program: {entries:?}"
    );
}

#[test]
fn several_inputs_need_an_output_directory() {
    let dir = tempfile::tempdir().unwrap();
    let Some(a) = program(dir.path(), "a", &[]) else {
        return;
    };
    let b = program(dir.path(), "b", &["-Wl,-z,pack-relative-relocs"]).unwrap();
    let result = coldstart()
        .arg("pack")
        .arg(&a)
        .arg(&b)
        .arg("-o")
        .arg(dir.path().join("x"))
        .output()
        .unwrap();
    assert!(!result.status.success());
    assert!(text(&result).1.contains("--out-dir"), "{}", text(&result).1);
    let result = coldstart().arg("pack").arg(&a).output().unwrap();
    assert!(!result.status.success());
    assert!(
        text(&result).1.contains("say where to write"),
        "{}",
        text(&result).1
    );

    // One packed, one already packed (not a candidate): success, and the
    // refusal is one line naming the file.
    let out_dir = dir.path().join("packed");
    let result = coldstart()
        .arg("pack")
        .arg(&a)
        .arg(&b)
        .arg("--out-dir")
        .arg(&out_dir)
        .output()
        .unwrap();
    let (_, stderr) = text(&result);
    assert!(result.status.success(), "{stderr}");
    assert_eq!(
        stderr.trim(),
        format!(
            "coldstart: {}: already packed: it has a DT_RELR table",
            b.display()
        )
    );
    assert!(out_dir.join("a").exists() && !out_dir.join("b").exists());

    // A file pack cannot rewrite (a machine it does not test) fails the run.
    let mut bytes = std::fs::read(&a).unwrap();
    bytes[0x12..0x14].copy_from_slice(&183u16.to_le_bytes());
    let arm = dir.path().join("arm");
    std::fs::write(&arm, &bytes).unwrap();
    let result = coldstart()
        .arg("pack")
        .arg(&a)
        .arg(&arm)
        .arg("--out-dir")
        .arg(&out_dir)
        .arg("--json")
        .output()
        .unwrap();
    let (stdout, _) = text(&result);
    assert!(!result.status.success());
    let json: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(json["refused"][0]["code"], "machine-not-tested");
    assert_eq!(json["packed"].as_array().map(Vec::len), Some(1));
}
