//! Generates and builds a sample app and reports how long each step took,
//! for measuring build times by hand:
//!
//! `cargo run --release -p coldstart-sample --example build_sample -- DIR [UNITS FUNCTIONS [SEED]]`
//!
//! Without sizes it builds the default size. Sources go to `DIR/src`,
//! binaries to `DIR/build`.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use coldstart_sample::{BuildEvent, BuildOptions, SampleSpec, build, generate};

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(dir) = args.first().map(PathBuf::from) else {
        bail!("usage: build_sample DIR [UNITS FUNCTIONS [SEED]]");
    };
    let mut spec = SampleSpec::default_size();
    if let [_, units, functions, rest @ ..] = args.as_slice() {
        spec.translation_units = units.parse().context("UNITS")?;
        spec.functions = functions.parse().context("FUNCTIONS")?;
        if let Some(seed) = rest.first() {
            spec.seed = seed.parse().context("SEED")?;
        }
    }

    let started = Instant::now();
    let truth = generate(&spec, &dir.join("src"))?;
    println!(
        "generated {} units, {} functions in {:.2?}",
        truth.translation_units.len(),
        truth.functions.len(),
        started.elapsed()
    );

    let started = Instant::now();
    let app = build(
        &dir.join("src"),
        &dir.join("build"),
        &BuildOptions::default(),
        &mut |event| match event {
            BuildEvent::Planned {
                objects,
                to_compile,
            } => println!("{to_compile} of {objects} objects to compile"),
            BuildEvent::Linking { output } => println!("linking {}", output.display()),
            BuildEvent::Compiled { .. } => {}
        },
    )?;
    println!("built in {:.2?}", started.elapsed());
    app.run()?;
    for path in [&app.library, &app.executable] {
        let size = std::fs::metadata(path)
            .with_context(|| format!("reading {}", path.display()))?
            .len();
        println!("{}: {size} bytes", path.display());
    }
    Ok(())
}
