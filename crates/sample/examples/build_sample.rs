//! Generates and builds a sample app and reports how long each step took;
//! the benchmarks build their variants of the app with it.
//!
//! ```text
//! cargo run --release -p coldstart-sample --example build_sample -- DIR [UNITS FUNCTIONS [SEED]]
//!     [--tiny] [--build NAME] [--compiler gcc|clang] [--driver CMD] [-O LEVEL]
//!     [--cflag FLAG]... [--ldflag FLAG]... [--library-ldflag FLAG]...
//!     [--executable-ldflag FLAG]... [--reuse-from BUILD_DIR] [--json]
//! ```
//!
//! Without sizes it builds the default size (`--tiny`: the tests' size).
//! Sources go to `DIR/src`, binaries to `DIR/NAME` (default `build`). Each
//! `--cflag` and `--ldflag` is one argument, added after the generator's own
//! (`--ldflag` to both links, the others to one). `--driver clang++-19` runs
//! that driver with clang's flags. `--json` prints the built binaries as
//! JSON (`executable`, `library`, `parts`, `build_dir`) instead of timings.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use coldstart_sample::{BuildEvent, BuildOptions, Compiler, SampleSpec, build, generate};

const USAGE: &str = "usage: build_sample DIR [UNITS FUNCTIONS [SEED]] [--tiny] [--build NAME] \
                     [--compiler gcc|clang] [--driver CMD] [-O LEVEL] [--cflag FLAG]... \
                     [--ldflag FLAG]... [--library-ldflag FLAG]... [--executable-ldflag FLAG]... \
                     [--reuse-from BUILD_DIR] [--json]";

struct Args {
    dir: PathBuf,
    spec: SampleSpec,
    build_name: String,
    options: BuildOptions,
    json: bool,
}

fn parse() -> Result<Args> {
    let mut args = std::env::args().skip(1);
    let mut positional = Vec::new();
    let mut spec = SampleSpec::default_size();
    let mut options = BuildOptions::default();
    let mut build_name = "build".to_string();
    let mut json = false;
    while let Some(arg) = args.next() {
        let mut value = |name: &str| {
            args.next()
                .with_context(|| format!("{name} needs a value\n{USAGE}"))
        };
        match arg.as_str() {
            "--tiny" => spec = SampleSpec::tiny(),
            "--json" => json = true,
            "--build" => build_name = value("--build")?,
            "--compiler" => {
                options.compiler = match value("--compiler")?.as_str() {
                    "gcc" => Compiler::Gcc,
                    "clang" => Compiler::Clang,
                    other => bail!("--compiler is gcc or clang, not `{other}`"),
                }
            }
            "--driver" => options.driver = Some(value("--driver")?),
            "-O" => options.opt_level = value("-O")?,
            "--cflag" => options.extra_cflags.push(value("--cflag")?),
            "--ldflag" => options.extra_ldflags.push(value("--ldflag")?),
            "--library-ldflag" => options.library_ldflags.push(value("--library-ldflag")?),
            "--executable-ldflag" => options
                .executable_ldflags
                .push(value("--executable-ldflag")?),
            "--reuse-from" => options.reuse_from = Some(value("--reuse-from")?.into()),
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            flag if flag.starts_with('-') => bail!("unknown option `{flag}`\n{USAGE}"),
            _ => positional.push(arg),
        }
    }
    let Some(dir) = positional.first().map(PathBuf::from) else {
        bail!("{USAGE}");
    };
    if let [_, units, functions, rest @ ..] = positional.as_slice() {
        spec.translation_units = units.parse().context("UNITS")?;
        spec.functions = functions.parse().context("FUNCTIONS")?;
        if let Some(seed) = rest.first() {
            spec.seed = seed.parse().context("SEED")?;
        }
    }
    Ok(Args {
        dir,
        spec,
        build_name,
        options,
        json,
    })
}

fn main() -> Result<()> {
    let args = parse()?;
    let say = |line: String| {
        if args.json {
            eprintln!("{line}");
        } else {
            println!("{line}");
        }
    };
    let started = Instant::now();
    let truth = generate(&args.spec, &args.dir.join("src"))?;
    say(format!(
        "generated {} units, {} functions in {:.2?}",
        truth.translation_units.len(),
        truth.functions.len(),
        started.elapsed()
    ));

    let started = Instant::now();
    let app = build(
        &args.dir.join("src"),
        &args.dir.join(&args.build_name),
        &args.options,
        &mut |event| match event {
            BuildEvent::Planned {
                objects,
                to_compile,
            } => say(format!("{to_compile} of {objects} objects to compile")),
            BuildEvent::Linking { output } => say(format!("linking {}", output.display())),
            BuildEvent::Compiled { .. } => {}
        },
    )?;
    say(format!("built in {:.2?}", started.elapsed()));
    app.run()?;
    if args.json {
        let built = serde_json::json!({
            "executable": app.executable,
            "library": app.library,
            "parts": app.parts,
            "build_dir": app.build_dir,
        });
        println!("{}", serde_json::to_string_pretty(&built)?);
        return Ok(());
    }
    for path in [&app.library, &app.executable] {
        let size = std::fs::metadata(path)
            .with_context(|| format!("reading {}", path.display()))?
            .len();
        println!("{}: {size} bytes", path.display());
    }
    Ok(())
}
