//! The generated libraries are what the design says, by the toolchain's own
//! account: readelf (and llvm-readelf for RELR, nm for exported symbols)
//! counts each factor in each built file. Then two rounds of the quick
//! design run, every program reporting the initializers it saw, and the
//! direct check applies the relative relocations readelf counted.

use coldstart_loadcost::design::{Config, Design, Factor};
use coldstart_loadcost::direct::RelativeTable;
use coldstart_loadcost::generate::{self, Built, BuiltConfig};
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};

fn tool(program: &str, args: &[&str], file: &Path) -> String {
    let output = Command::new(program)
        .args(args)
        .arg(file)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {program}: {e}"));
    assert!(
        output.status.success(),
        "{program} {args:?} {}: {}",
        file.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn have(program: &str) -> bool {
    Command::new(program).arg("--version").output().is_ok()
}

/// Relocations of one type, as readelf lists them, with the symbol column.
fn relocations(file: &Path, kind: &str) -> Vec<String> {
    tool("readelf", &["-W", "-r"], file)
        .lines()
        .filter(|line| line.split_whitespace().nth(2) == Some(kind))
        .map(|line| line.split_whitespace().nth(4).unwrap_or("").to_string())
        .collect()
}

fn dynamic(file: &Path, tag: &str) -> Option<String> {
    tool("readelf", &["-W", "-d"], file)
        .lines()
        .find(|line| line.contains(&format!("({tag})")))
        .map(|line| line.split_once(')').unwrap().1.trim().to_string())
}

fn init_array_slots(file: &Path) -> u64 {
    let size = dynamic(file, "INIT_ARRAYSZ").expect("INIT_ARRAYSZ");
    size.split_whitespace()
        .next()
        .unwrap()
        .parse::<u64>()
        .unwrap()
        / 8
}

fn exported(file: &Path) -> usize {
    tool("nm", &["-D", "--defined-only"], file).lines().count()
}

fn built_for(built: &Built, factor: Factor) -> Vec<&BuiltConfig> {
    built
        .configs
        .iter()
        .filter(|c| c.config.factor == factor)
        .collect()
}

fn library(config: &BuiltConfig) -> &Path {
    &config.libraries[0]
}

#[test]
fn the_built_libraries_hold_exactly_what_the_design_varies_and_every_run_reports_back() {
    if !have("cc") || !have("readelf") || !have("nm") {
        assert!(
            std::env::var_os("COLDSTART_REQUIRE_ROOT").is_none(),
            "cc, readelf and nm are required"
        );
        eprintln!("SKIPPED: needs cc, readelf and nm (apt-get install gcc binutils)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let design = Design::quick(&Factor::ALL, 2);
    let built = generate::build(&design, dir.path(), 2, &|_, _| {}).unwrap();
    assert_eq!(built.configs.len(), design.configs().len());

    // Each factor against its base level, as counted by the toolchain.
    let base = |factor| built_for(&built, factor)[0];
    for factor in Factor::ALL {
        let configs = built_for(&built, factor);
        assert_eq!(configs.len(), 3, "{factor}");
        for config in &configs {
            let Config { level, .. } = config.config;
            let (file, base_file) = (library(config), library(base(factor)));
            match factor {
                Factor::Relative => {
                    let added = relocations(file, "R_X86_64_RELATIVE").len()
                        - relocations(base_file, "R_X86_64_RELATIVE").len();
                    assert_eq!(added as u64, level, "{}", file.display());
                    let table = RelativeTable::read(file).unwrap();
                    assert_eq!(table.relative, relocations(file, "R_X86_64_RELATIVE").len());
                    // Applying them by hand works and takes time.
                    assert!(table.apply(file).unwrap() > 0.0);
                }
                Factor::Relr => {
                    // No relative relocation is left in RELA, and RELR holds
                    // as many as the RELA build of the same level.
                    assert!(relocations(file, "R_X86_64_RELATIVE").is_empty());
                    if level > 0 {
                        assert!(dynamic(file, "RELR").is_some(), "{}", file.display());
                    }
                    if have("llvm-readelf-19") {
                        let listing = tool("llvm-readelf-19", &["-r"], file);
                        let relr: u64 = listing
                            .lines()
                            .find(|l| l.contains("'.relr.dyn'"))
                            .and_then(|l| l.split_whitespace().rev().nth(1))
                            .map_or(0, |n| n.parse().unwrap());
                        let rela_twin = built_for(&built, Factor::Relative)
                            .into_iter()
                            .find(|c| c.config.level == level)
                            .unwrap();
                        assert_eq!(
                            relr as usize,
                            relocations(library(rela_twin), "R_X86_64_RELATIVE").len(),
                            "{}",
                            file.display()
                        );
                    }
                }
                Factor::Symbolic => {
                    let symbols = relocations(file, "R_X86_64_64");
                    assert_eq!(symbols.len() as u64, level, "{}", file.display());
                    assert!(symbols.iter().all(|s| s == "cs_lc_symbol"), "{symbols:?}");
                }
                Factor::Distinct => {
                    let mut symbols = relocations(file, "R_X86_64_64");
                    assert_eq!(symbols.len() as u64, level);
                    symbols.sort();
                    symbols.dedup();
                    assert_eq!(symbols.len() as u64, level, "{}", file.display());
                }
                Factor::Exported => {
                    assert_eq!((exported(file) - exported(base_file)) as u64, level);
                    assert!(relocations(file, "R_X86_64_64").is_empty());
                }
                Factor::PltLazy | Factor::PltNow => {
                    let slots = relocations(file, "R_X86_64_JUMP_SLOT").len()
                        - relocations(base_file, "R_X86_64_JUMP_SLOT").len();
                    assert_eq!(slots as u64, level, "{}", file.display());
                    let flags = dynamic(file, "FLAGS").unwrap_or_default();
                    assert_eq!(
                        flags.contains("BIND_NOW"),
                        factor == Factor::PltNow,
                        "{}: FLAGS {flags}",
                        file.display()
                    );
                }
                Factor::Initializers => {
                    let added = init_array_slots(file) - init_array_slots(base_file);
                    assert_eq!(added, level, "{}", file.display());
                    assert_eq!(config.expected_ready, level);
                }
                Factor::Search => {
                    for program in [&config.dlopen_host, &config.needed_program] {
                        let runpath = dynamic(program, "RUNPATH").unwrap();
                        let entries: Vec<&str> = runpath
                            .trim_start_matches("Library runpath: [")
                            .trim_end_matches(']')
                            .split(':')
                            .collect();
                        assert_eq!(entries.len() as u64, level + 1, "{runpath}");
                        assert!(entries.last().unwrap().ends_with("/lib"), "{runpath}");
                        for empty in &entries[..entries.len() - 1] {
                            assert_eq!(std::fs::read_dir(empty).unwrap().count(), 0, "{empty}");
                        }
                    }
                }
                Factor::Libraries => {
                    let needed = tool("readelf", &["-W", "-d"], file)
                        .lines()
                        .filter(|l| l.contains("(NEEDED)") && l.contains("libcslc_part"))
                        .count();
                    assert_eq!(needed as u64, level, "{}", file.display());
                    assert_eq!(config.libraries.len() as u64, level + 1);
                    // The parts share the same body between them.
                    let base_relative =
                        relocations(library(base(Factor::Relative)), "R_X86_64_RELATIVE").len();
                    let total: usize = config.libraries[1..]
                        .iter()
                        .map(|part| relocations(part, "R_X86_64_RELATIVE").len() - base_relative)
                        .sum();
                    assert_eq!(total as u64, design.split.relative);
                }
                Factor::Size => {
                    let grown = std::fs::metadata(file).unwrap().len()
                        - std::fs::metadata(base_file).unwrap().len();
                    assert!(grown >= level << 20, "{}: {grown}", file.display());
                    assert!(grown < (level << 20) + 8192, "{}: {grown}", file.display());
                }
            }
        }
    }

    // Two rounds of every cell: each run checked its initializer count.
    let measurements = coldstart_loadcost::run::measure(
        &built,
        &design,
        &[],
        9,
        &AtomicBool::new(false),
        &|_, _| {},
    )
    .unwrap();
    assert_eq!(measurements.rounds, 2);
    assert!(!measurements.interrupted);
    assert_eq!(measurements.cells.len(), design.configs().len() * 4);
    for cell in &measurements.cells {
        assert_eq!(cell.samples_ns.len(), 2, "{:?}", cell.config);
        assert!(cell.samples_ns.iter().all(|&ns| ns > 0.0 && ns < 5e9));
    }

    // Ctrl-C in the second round: the first round is kept whole, the
    // partial second one is dropped.
    let per_round = measurements.cells.len();
    let stop = AtomicBool::new(false);
    let partial = coldstart_loadcost::run::measure(&built, &design, &[], 9, &stop, &|done, _| {
        if done == per_round + 3 {
            stop.store(true, Ordering::Relaxed);
        }
    })
    .unwrap();
    assert!(partial.interrupted);
    assert_eq!(partial.rounds, 1);
    assert!(partial.cells.iter().all(|c| c.samples_ns.len() == 1));

    // A library that does not run what it should is caught by the run
    // itself, naming the program.
    let mut wrong = built.clone();
    let initializers = wrong
        .configs
        .iter_mut()
        .find(|c| c.config.factor == Factor::Initializers && c.config.level > 0)
        .unwrap();
    initializers.expected_ready += 1;
    let program = initializers.dlopen_host.display().to_string();
    wrong
        .configs
        .retain(|c| c.config.factor == Factor::Initializers && c.config.level > 0);
    let error = coldstart_loadcost::run::measure(
        &wrong,
        &design,
        &[],
        9,
        &AtomicBool::new(false),
        &|_, _| {},
    )
    .unwrap_err()
    .to_string();
    assert!(
        error.contains("initializers ran, the library has"),
        "{error}"
    );
    assert!(
        error.contains(&program) || error.contains("needed-program"),
        "{error}"
    );
}
