//! docs/architecture.md's crate graph is the real one: the dependencies
//! `cargo metadata` reports between the workspace's crates (normal
//! dependencies; tests' dev-dependencies are left out) must be exactly the
//! ones the document lists, so a dependency added without updating the map,
//! or a crate added without a room, fails here.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Crate -> the workspace crates it depends on, by their short names
/// (`coldstart-plan` is `plan`; the CLI package `coldstart` keeps its name).
type Graph = BTreeMap<String, BTreeSet<String>>;

/// The line that opens the document's machine-read graph; the fenced block
/// after it holds one `crate -> dep dep ...` line per crate.
const MARKER: &str = "<!-- crate graph: checked by crates/coldstart/tests/architecture.rs -->";

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn short(package: &str) -> String {
    package
        .strip_prefix("coldstart-")
        .unwrap_or(package)
        .to_string()
}

/// The graph as `cargo metadata` resolves it.
fn cargo_graph() -> Graph {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let output = Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(workspace_root())
        .output()
        .expect("run cargo metadata");
    assert!(
        output.status.success(),
        "cargo metadata: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let metadata: serde_json::Value =
        serde_json::from_slice(&output.stdout).expect("cargo metadata's JSON");
    let packages = metadata["packages"].as_array().expect("packages");
    let members: BTreeSet<String> = packages
        .iter()
        .map(|p| p["name"].as_str().expect("package name").to_string())
        .collect();
    packages
        .iter()
        .map(|package| {
            let deps = package["dependencies"]
                .as_array()
                .expect("dependencies")
                .iter()
                // A normal dependency has kind null; "dev" and "build" are not
                // part of the shipped graph.
                .filter(|d| d["kind"].is_null())
                .map(|d| d["name"].as_str().expect("dependency name"))
                .filter(|name| members.contains(*name))
                .map(short)
                .collect();
            (short(package["name"].as_str().unwrap()), deps)
        })
        .collect()
}

/// The graph the document states, or why it cannot be read.
fn documented_graph(document: &str) -> Result<Graph, String> {
    let after = document
        .split_once(MARKER)
        .ok_or_else(|| format!("no line {MARKER}"))?
        .1;
    let block = after
        .trim_start()
        .strip_prefix("```")
        .and_then(|rest| rest.split_once('\n'))
        .and_then(|(_, body)| body.split_once("```"))
        .ok_or("no fenced block after the marker")?
        .0;
    let mut graph = Graph::new();
    for line in block.lines().filter(|l| !l.trim().is_empty()) {
        let (name, deps) = line
            .split_once("->")
            .ok_or_else(|| format!("not `crate -> deps`: {line:?}"))?;
        let deps = deps.split_whitespace().map(str::to_string).collect();
        if graph.insert(name.trim().to_string(), deps).is_some() {
            return Err(format!("{} listed twice", name.trim()));
        }
    }
    Ok(graph)
}

/// Every difference between the two graphs, one line each.
fn differences(documented: &Graph, real: &Graph) -> Vec<String> {
    let mut lines = Vec::new();
    let names: BTreeSet<&String> = documented.keys().chain(real.keys()).collect();
    for name in names {
        match (documented.get(name), real.get(name)) {
            (None, Some(_)) => lines.push(format!("crate {name} is not in the document")),
            (Some(_), None) => lines.push(format!("the document lists {name}, which is no crate")),
            (Some(said), Some(is)) => {
                for dep in is.difference(said) {
                    lines.push(format!(
                        "{name} depends on {dep}, the document does not say so"
                    ));
                }
                for dep in said.difference(is) {
                    lines.push(format!(
                        "the document says {name} depends on {dep}; it does not"
                    ));
                }
            }
            (None, None) => unreachable!(),
        }
    }
    lines
}

#[test]
fn the_documented_crate_graph_is_the_real_one() {
    let path = workspace_root().join("docs/architecture.md");
    let document = std::fs::read_to_string(&path).expect("read docs/architecture.md");
    let documented =
        documented_graph(&document).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let diffs = differences(&documented, &cargo_graph());
    assert!(
        diffs.is_empty(),
        "docs/architecture.md's crate graph differs from cargo metadata:\n  {}",
        diffs.join("\n  ")
    );
}

/// The check itself can fail: an edge the document lacks, one it invents,
/// and a crate it leaves out are each reported.
#[test]
fn a_graph_that_differs_is_reported() {
    let document =
        format!("text\n{MARKER}\n\n```text\ncoldstart -> plan\nplan -> system binary\n```\n");
    let documented = documented_graph(&document).unwrap();
    let real: Graph = [
        ("coldstart", &["plan", "report"][..]),
        ("plan", &["system"][..]),
        ("report", &[][..]),
    ]
    .into_iter()
    .map(|(name, deps)| {
        (
            name.to_string(),
            deps.iter().map(|d| d.to_string()).collect(),
        )
    })
    .collect();
    assert_eq!(
        differences(&documented, &real),
        [
            "coldstart depends on report, the document does not say so",
            "the document says plan depends on binary; it does not",
            "crate report is not in the document",
        ]
    );
    assert!(documented_graph("no marker here").is_err());
    assert!(documented_graph(&format!("{MARKER}\n```\nplan\n```\n")).is_err());
}
