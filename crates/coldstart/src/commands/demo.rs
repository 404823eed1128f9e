//! `coldstart demo`: coldstart's main job on its built-in example. Generates
//! the sample app, builds it with a progress bar, checks it starts (prints
//! READY), and inspects both binaries. Later stages of the loop (trace,
//! report, plan, order, verify) join here as they land.

use crate::args::{CompilerArg, DemoArgs};
use crate::output::{self, step};
use anyhow::Context;
use coldstart_binary::{InspectOptions, Inspection, inspect_path};
use coldstart_report::inspect::render_summary;
use coldstart_sample::{BuildEvent, BuildOptions, Compiler, SampleSpec, build, generate};
use serde::Serialize;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

#[derive(Serialize)]
struct DemoReport {
    spec: SampleSpec,
    source_dir: PathBuf,
    executable: PathBuf,
    library: PathBuf,
    functions: usize,
    startup_calls: usize,
    static_initializers: usize,
    build_seconds: f64,
    startup_output: String,
    inspections: Vec<Inspection>,
}

fn spec(args: &DemoArgs) -> anyhow::Result<SampleSpec> {
    let mut spec = if args.tiny {
        SampleSpec::tiny()
    } else {
        SampleSpec::default_size()
    };
    spec.seed = args.seed;
    if let Some(units) = args.translation_units {
        spec.translation_units = units;
    }
    if let Some(functions) = args.functions {
        spec.functions = functions;
    }
    spec.validate().context("invalid sample app size")?;
    Ok(spec)
}

pub fn run(args: &DemoArgs) -> anyhow::Result<ExitCode> {
    let spec = spec(args)?;
    let source_dir = args.dir.join("src");
    let build_dir = args.dir.join(if args.pack_relative_relocs {
        "build-relr"
    } else {
        "build"
    });

    step(&format!(
        "coldstart demo: sample app with {} translation units and {} functions (seed {})",
        spec.translation_units, spec.functions, spec.seed
    ));
    let truth = generate(&spec, &source_dir)
        .with_context(|| format!("generating the sample app in {}", source_dir.display()))?;

    let options = BuildOptions {
        compiler: match args.compiler {
            CompilerArg::Gcc => Compiler::Gcc,
            CompilerArg::Clang => Compiler::Clang,
        },
        pack_relative_relocs: args.pack_relative_relocs,
        jobs: args.jobs.unwrap_or(BuildOptions::default().jobs),
        ..BuildOptions::default()
    };
    let started = Instant::now();
    let bar = output::progress(0, "compiling");
    let app = build(
        &source_dir,
        &build_dir,
        &options,
        &mut |event| match event {
            BuildEvent::Planned { to_compile, .. } => bar.set_length(to_compile as u64),
            BuildEvent::Compiled { done, .. } => bar.set_position(done as u64),
            BuildEvent::Linking { output } => bar.set_message(format!(
                "linking {}",
                output.file_name().unwrap_or_default().to_string_lossy()
            )),
        },
    );
    bar.finish_and_clear();
    let app = app.with_context(|| format!("building the sample app in {}", build_dir.display()))?;
    let build_seconds = started.elapsed().as_secs_f64();
    step(&format!(
        "built {} and {} in {build_seconds:.1} s",
        app.executable.display(),
        app.library.display()
    ));

    let run = app.run()?;
    let startup_output = String::from_utf8_lossy(&run.stdout).trim().to_string();
    step(&format!(
        "ran it: it printed READY after calling {} of its {} functions",
        truth.startup_order.len(),
        truth.functions.len()
    ));

    let options = InspectOptions::default();
    let inspections = [&app.executable, &app.library]
        .into_iter()
        .map(|path| inspect_path(path, &options))
        .collect::<Result<Vec<_>, _>>()?;

    if args.json {
        output::print_json(&DemoReport {
            spec,
            source_dir,
            executable: app.executable.clone(),
            library: app.library.clone(),
            functions: truth.functions.len(),
            startup_calls: truth.startup_order.len(),
            static_initializers: truth.static_initializers.len(),
            build_seconds,
            startup_output,
            inspections,
        })?;
    } else {
        let mut text = String::new();
        for inspection in &inspections {
            text.push('\n');
            text.push_str(&render_summary(inspection));
        }
        text.push_str(&format!(
            "\nFull anatomy: coldstart inspect {} {}\nGround truth (every function, the startup order): {}\n",
            app.executable.display(),
            app.library.display(),
            source_dir.join(coldstart_sample::MANIFEST_FILE).display()
        ));
        output::print_text(&text)?;
    }
    Ok(ExitCode::SUCCESS)
}
