//! What the function-tracing runtime costs a program per call: builds a C
//! program of many small functions with and without instrumentation, runs
//! each, and reports ns per call for first calls (a slot claimed, a
//! sequence number and a timestamp taken) and repeated calls (one atomic
//! increment), over the uninstrumented build. Run with
//! `cargo run -p coldstart-record --example function_hook_cost` (the C
//! programs are built -O2 whatever the cargo profile).

use coldstart_record::functions::build_runtime;
use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;

/// Distinct functions: enough that first calls spread over many table pages,
/// as in a large program's startup.
const FUNCTIONS: usize = 20_000;
/// Passes over all of them after the first.
const ROUNDS: usize = 200;
/// Runs of each build; the fastest counts, as the least disturbed.
const REPEATS: usize = 5;

fn main() {
    if let Err(e) = run() {
        eprintln!("function_hook_cost: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), String> {
    let dir = std::env::temp_dir().join(format!("coldstart-hook-cost-{}", std::process::id()));
    let result = measure(&dir);
    let _ = std::fs::remove_dir_all(&dir);
    result
}

fn measure(dir: &Path) -> Result<(), String> {
    let rt = build_runtime(&dir.join("runtime")).map_err(|e| e.to_string())?;
    let source = dir.join("bench.c");
    std::fs::write(&source, program()).map_err(|e| format!("{}: {e}", source.display()))?;

    println!(
        "{FUNCTIONS} functions, {ROUNDS} repeated passes, best of {REPEATS} runs; cost over the uninstrumented build"
    );
    println!(
        "{:<44} {:>14} {:>16}",
        "build", "first call ns", "repeated call ns"
    );
    let clang = "/usr/lib/llvm-19/bin/clang";
    let mut builds = vec![(
        "gcc -finstrument-functions",
        "gcc",
        "-finstrument-functions",
    )];
    if Path::new(clang).exists() {
        builds.push((
            "clang-19 -finstrument-function-entry-bare",
            clang,
            "-finstrument-function-entry-bare",
        ));
    }
    for (label, cc, flag) in builds {
        // Each compiler against its own uninstrumented build.
        let plain = dir.join(format!("plain-{}", label.len()));
        compile(cc, &[], &source, None, &plain)?;
        let plain_cost = fastest(&plain, dir)?;
        let exe = dir.join(format!("instrumented-{}", label.len()));
        compile(cc, &[flag], &source, Some(&rt.static_lib), &exe)?;
        let cost = fastest(&exe, dir)?;
        let first = (cost.0 - plain_cost.0) / FUNCTIONS as f64;
        let repeated = (cost.1 - plain_cost.1) / (FUNCTIONS * ROUNDS) as f64;
        println!("{label:<44} {first:>14.1} {repeated:>16.2}");
    }
    Ok(())
}

/// The benchmark: FUNCTIONS tiny functions behind a table (so none is
/// inlined away), timed once for the first pass and once for the rest.
fn program() -> String {
    let mut c = String::from(
        "#include <stdio.h>\n#include <time.h>\nstatic volatile int sink;\n\
         static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); \
         return t.tv_sec * 1e9 + t.tv_nsec; }\n",
    );
    for i in 0..FUNCTIONS {
        let _ = writeln!(
            c,
            "__attribute__((noinline)) void f{i}(void) {{ sink += {i}; }}"
        );
    }
    c.push_str("static void (*const table[])(void) = {\n");
    for i in 0..FUNCTIONS {
        let _ = write!(c, "f{i},");
    }
    let _ = write!(
        c,
        "}};\nint main(void) {{\n\
         double t0 = now();\n\
         for (int i = 0; i < {FUNCTIONS}; i++) table[i]();\n\
         double t1 = now();\n\
         for (int r = 0; r < {ROUNDS}; r++) for (int i = 0; i < {FUNCTIONS}; i++) table[i]();\n\
         double t2 = now();\n\
         printf(\"%.0f %.0f\\n\", t1 - t0, t2 - t1);\n\
         return 0;\n}}\n"
    );
    c
}

fn compile(
    cc: &str,
    flags: &[&str],
    source: &Path,
    runtime: Option<&Path>,
    out: &Path,
) -> Result<(), String> {
    let mut command = Command::new(cc);
    command.args(["-O2"]).args(flags).arg(source);
    if let Some(lib) = runtime {
        command.arg(lib).arg("-pthread");
    }
    let output = command
        .arg("-o")
        .arg(out)
        .output()
        .map_err(|e| format!("{cc}: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "{cc} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    Ok(())
}

/// The fastest (first pass, repeated passes) times in ns over REPEATS runs.
fn fastest(exe: &Path, dir: &Path) -> Result<(f64, f64), String> {
    let mut best = (f64::MAX, f64::MAX);
    for _ in 0..REPEATS {
        // The record is written at exit, outside the timed passes.
        let output = Command::new(exe)
            .env("COLDSTART_FUNCTIONS_DIR", dir)
            .output()
            .map_err(|e| format!("{}: {e}", exe.display()))?;
        let text = String::from_utf8_lossy(&output.stdout);
        let mut fields = text.split_whitespace().map(str::parse::<f64>);
        match (fields.next(), fields.next()) {
            (Some(Ok(first)), Some(Ok(rest))) => {
                best = (best.0.min(first), best.1.min(rest));
            }
            _ => return Err(format!("{}: unexpected output {text:?}", exe.display())),
        }
    }
    Ok(best)
}
