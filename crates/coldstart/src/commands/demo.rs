//! `coldstart demo`: coldstart's whole loop on its built-in sample app, as a
//! list of library steps. Generates and builds the app with a progress bar,
//! checks it starts (prints READY) and inspects both binaries; as root,
//! traces its cold start (report and chart), compiles its prefetch plan,
//! orders and relinks it and measures what the new layout saves; then times
//! it warm against cold, with the plan and relinked, and the plan again at
//! the kernel's default read_ahead_kb.

use crate::args::{CompilerArg, DemoArgs};
use crate::output::{self, step};
use anyhow::Context;
use coldstart_binary::{InspectOptions, inspect_path};
use coldstart_pipeline::bench::{Start, StartBench, bench_starts, plan_effects};
use coldstart_pipeline::cold_start::{ColdStart, trace_cold_start};
use coldstart_pipeline::demo::{DemoReport, PackedApp, pack_app};
use coldstart_pipeline::order::{Plain, order_loop};
use coldstart_pipeline::plan::compile_plan;
use coldstart_prefetch::launcher::Wrapper;
use coldstart_report::chart::ChartOptions;
use coldstart_sample::{
    BuildEvent, BuildOptions, BuiltApp, Compiler, GroundTruth, SampleSpec, build, generate,
};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

pub fn run(args: &DemoArgs) -> anyhow::Result<ExitCode> {
    let spec = spec(args)?;
    let built = build_app(args, &spec)?;
    let app = &built.app;
    let inspections = [&app.executable, &app.library]
        .into_iter()
        .map(|path| inspect_path(path, &InspectOptions::default()))
        .collect::<Result<Vec<_>, _>>()?;

    let tracing = trace_cold_start(&app.executable, &args.dir.join("demo.db"), &mut |s| step(s))?;
    let traced = tracing.traced();
    let charts = traced.map(|t| write_charts(t, &args.dir)).transpose()?;
    let plan_path = args.dir.join("demo.plan");
    let plan = traced
        .map(|t| compile_plan(&t.profile, t.demand_run, &plan_path, &mut |s| step(s)))
        .transpose()?;
    let mut order = match traced {
        Some(t) => Some(order_loop(
            &Plain {
                app,
                source_dir: &built.source_dir,
                options: &built.options,
                profile: &t.profile,
                default_run: t.report.run.id,
                demand_run: t.demand_run,
            },
            &args.dir,
            &mut |s| step(s),
        )?),
        None => None,
    };
    let (pack, pack_skipped) = pack(app, &args.dir, &built.startup_output);
    let wrapper =
        Wrapper::beside(std::env::current_exe().context("cannot find the coldstart binary")?);
    let benched = bench(
        app,
        plan.is_some().then_some(plan_path.as_path()),
        &wrapper,
        order.as_ref().map(|o| &o.ordered_app),
        pack.as_ref(),
    )?;
    let plan_effects = if plan.is_some() {
        plan_effects(app, &plan_path, &wrapper, &benched, &mut |s| step(s))
    } else {
        Vec::new()
    };
    if let Some(order) = &mut order {
        order.at_device.before.cold_ms = benched.median_ms(Start::Cold);
        order.at_device.after.cold_ms = benched.median_ms(Start::Relinked);
    }
    let report = DemoReport {
        spec,
        executable: app.executable.clone(),
        library: app.library.clone(),
        functions: built.truth.functions.len(),
        startup_calls: built.truth.startup_order.len(),
        static_initializers: built.truth.static_initializers.len(),
        build_seconds: built.seconds,
        inspections,
        trace: traced.map(|t| t.report.clone()),
        trace_skipped: tracing.skipped().map(str::to_string),
        chart: charts.as_ref().map(|(svg, _)| svg.clone()),
        html: charts.map(|(_, html)| html),
        profile: traced.map(|t| t.profile.clone()),
        plan_path: plan.is_some().then_some(plan_path),
        plan,
        plan_effects,
        bench: Some(benched.result),
        before: order.as_ref().map(|o| o.at_default.before),
        after: order.as_ref().map(|o| o.at_default.after),
        order_skipped: order
            .is_none()
            .then(|| tracing.skipped().map(str::to_string))
            .flatten(),
        order,
        pack,
        pack_skipped,
        source_dir: built.source_dir,
        startup_output: built.startup_output,
    };
    if args.json {
        output::print_json(&report)?;
    } else {
        output::print_text(&coldstart_pipeline::render::render(&report))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The sample app generated, built and run once, with what the demo says
/// about it.
struct Built {
    source_dir: PathBuf,
    truth: GroundTruth,
    options: BuildOptions,
    app: BuiltApp,
    seconds: f64,
    /// What the app printed when it ran (READY).
    startup_output: String,
}

/// Generates the sample app, builds it with a progress bar and runs it.
fn build_app(args: &DemoArgs, spec: &SampleSpec) -> anyhow::Result<Built> {
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
    let truth = generate(spec, &source_dir)
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
    let seconds = started.elapsed().as_secs_f64();
    step(&format!(
        "built {} and {} in {seconds:.1} s",
        app.executable.display(),
        app.library.display()
    ));
    let startup_output = String::from_utf8_lossy(&app.run()?.stdout)
        .trim()
        .to_string();
    step(&format!(
        "ran it: it printed READY after calling {} of its {} functions",
        truth.startup_order.len(),
        truth.functions.len()
    ));
    Ok(Built {
        source_dir,
        truth,
        options,
        app,
        seconds,
        startup_output,
    })
}

/// The app's relative relocations packed as DT_RELR into `dir/packed`, or
/// why not.
fn pack(app: &BuiltApp, dir: &Path, startup_output: &str) -> (Option<PackedApp>, Option<String>) {
    match pack_app(app, &dir.join("packed"), startup_output) {
        Ok(packed) => {
            step(&format!(
                "packed its relative relocations as DT_RELR (coldstart pack): {} and {}, which {}",
                packed.executable.display(),
                packed.library.display(),
                if packed.output_matches {
                    "print the same"
                } else {
                    "DO NOT print the same"
                }
            ));
            (Some(packed), None)
        }
        Err(err) => {
            step(&format!("not packed: {err:#}"));
            (None, Some(format!("{err:#}")))
        }
    }
}

/// Times the app's starts (warm, cold, with the plan, relinked, packed)
/// with a progress bar.
fn bench(
    app: &BuiltApp,
    plan: Option<&Path>,
    wrapper: &Wrapper,
    ordered: Option<&BuiltApp>,
    packed: Option<&PackedApp>,
) -> anyhow::Result<StartBench> {
    let bar = output::progress(0, "benchmark");
    let benched = bench_starts(
        app,
        plan,
        wrapper,
        ordered,
        packed.map(|p| p.binaries()).as_deref(),
        &mut |s| bar.suspend(|| step(s)),
        |done, total| {
            bar.set_length(total as u64);
            bar.set_position(done as u64);
        },
    );
    bar.finish_and_clear();
    benched
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

/// Draws the traced start as DIR/demo-trace.svg and a report page beside it.
fn write_charts(traced: &ColdStart, dir: &Path) -> anyhow::Result<(PathBuf, PathBuf)> {
    let options = ChartOptions::default();
    let svg = dir.join("demo-trace.svg");
    let html = dir.join("demo-trace.html");
    std::fs::write(
        &svg,
        coldstart_report::chart::svg(&traced.timeline, &options),
    )
    .with_context(|| format!("cannot write {}", svg.display()))?;
    std::fs::write(
        &html,
        coldstart_report::html::html(&traced.report, &traced.timeline, &options),
    )
    .with_context(|| format!("cannot write {}", html.display()))?;
    Ok((svg, html))
}
