//! `coldstart demo`: coldstart's main job on its built-in example. Generates
//! the sample app, builds it with a progress bar, checks it starts (prints
//! READY), inspects both binaries, and (as root) traces its cold start,
//! reports it with a chart and compiles its prefetch plan; then times it warm
//! against cold, and cold with the plan. Later stages of the loop (order,
//! verify) join here as they land.

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
    /// The traced cold start; None when not run as root (see trace_skipped).
    trace: Option<coldstart_analyze::RunReport>,
    trace_skipped: Option<String>,
    chart: Option<PathBuf>,
    html: Option<PathBuf>,
    /// The prefetch plan compiled from the traced run (root only).
    plan: Option<coldstart_prefetch::Plan>,
    /// Warm against cold (root) or selective-cold starts, and cold with the
    /// plan and relinked with the order files, interleaved.
    bench: Option<coldstart_bench::BenchResult>,
    /// The order loop (root only): order files from the instrumented start,
    /// the relinked app, and its start-up I/O before and after, at the
    /// kernel's default read_ahead_kb and at the device's own.
    order: Option<crate::commands::demo_order::OrderLoop>,
    order_skipped: Option<String>,
    /// At the kernel's default read_ahead_kb (128; `read_ahead_kb` says).
    before: Option<crate::commands::demo_order::StartupIo>,
    after: Option<crate::commands::demo_order::StartupIo>,
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

    let build_options = BuildOptions {
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
        &build_options,
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

    let traced = trace_cold_start(&app.executable, &args.dir)?;
    let plan = match &traced {
        Ok(t) => Some(plan_from_trace(&t.profile, t.demand_run, &args.dir)?),
        Err(_) => None,
    };
    let mut order = match &traced {
        Ok(t) => Some(crate::commands::demo_order::order_loop(
            &app,
            &source_dir,
            &args.dir,
            &build_options,
            &t.profile,
            t.report.run.id,
            t.demand_run,
        )?),
        Err(_) => None,
    };
    let benched = bench_warm_cold(
        &app.executable,
        &app.library,
        plan.as_ref().map(|(path, _)| path.as_path()),
        order.as_ref().map(|o| &o.ordered_app),
    )?;
    if let Some(order) = &mut order {
        let median = |name: &str| {
            benched
                .variants
                .iter()
                .find(|v| v.name == name)
                .and_then(|v| v.wall_ms.as_ref())
                .map(|s| s.median)
        };
        order.at_device.before.cold_ms = median(COLD_VARIANT);
        order.at_device.after.cold_ms = median(ORDERED_VARIANT);
    }
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
            trace: traced.as_ref().ok().map(|t| t.report.clone()),
            trace_skipped: traced.as_ref().err().cloned(),
            chart: traced.as_ref().ok().map(|t| t.svg.clone()),
            html: traced.as_ref().ok().map(|t| t.html.clone()),
            plan: plan.map(|(_, plan)| plan),
            bench: Some(benched),
            before: order.as_ref().map(|o| o.at_default.before),
            after: order.as_ref().map(|o| o.at_default.after),
            order_skipped: order
                .is_none()
                .then(|| traced.as_ref().err().cloned())
                .flatten(),
            order,
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
        match &traced {
            Ok(t) => {
                text.push_str("\nTraced cold start of the sample app:\n");
                text.push_str(&coldstart_report::run::render(
                    &t.report,
                    &coldstart_report::run::RunView {
                        style: coldstart_report::Style::Plain,
                        files: Some(5),
                        symbols: Some(10),
                        pages: false,
                    },
                ));
                text.push_str(&format!(
                    "\nChart: {}\nReport page: {}\nProfile: {} (coldstart report {} --file '*libcssample*')\n",
                    t.svg.display(),
                    t.html.display(),
                    t.profile.display(),
                    t.profile.display()
                ));
            }
            Err(reason) => text.push_str(&format!("\nNot traced: {reason}\n")),
        }
        if let Some((path, _)) = &plan {
            text.push_str(&format!("\nPrefetch plan: {}\n", path.display()));
        }
        if let Some(order) = &order {
            text.push_str(&crate::commands::demo_order::render(order));
        }
        text.push_str("\nStartup time, warm against cold (coldstart bench):\n");
        text.push_str(&coldstart_report::bench::render(
            &benched,
            coldstart_report::Style::Plain,
        ));
        output::print_text(&text)?;
    }
    Ok(ExitCode::SUCCESS)
}

struct Traced {
    report: coldstart_analyze::RunReport,
    profile: PathBuf,
    /// A second cold run traced with readahead off: the exact pages the
    /// start needs, which the plan is compiled from.
    demand_run: coldstart_profile::RunId,
    svg: PathBuf,
    html: PathBuf,
}

/// Traces the sample app from a cold page cache into DIR/demo.db and draws
/// it. Err(reason) when tracing is not possible here (not root).
fn trace_cold_start(
    executable: &std::path::Path,
    dir: &std::path::Path,
) -> anyhow::Result<Result<Traced, String>> {
    use coldstart_profile::{CacheMode, Profile};

    use coldstart_record::trace::{TraceOptions, trace};
    // SAFETY: geteuid never fails.
    if unsafe { libc::geteuid() } != 0 {
        let reason = "tracing needs root: run `sudo coldstart demo` to trace the cold start too";
        step(&format!("skipping the trace: {reason}"));
        return Ok(Err(reason.to_string()));
    }
    step("tracing its cold start (the page cache is dropped first)");
    let profile_path = dir.join("demo.db");
    let mut profile = Profile::create_or_open(&profile_path)?;
    let options = TraceOptions {
        launch: sample_launch(executable)?,
        cache: CacheMode::Cold,
        evict: Vec::new(),
        buffer_kb_per_cpu: 64 * 1024,
        grace: std::time::Duration::from_millis(500),
        user_faults: true,
        read_ahead_kb: None,
    };
    let interrupted = std::sync::atomic::AtomicBool::new(false);
    let summary = trace(&mut profile, &options, &interrupted, |_| {}, |_| {})
        .context("tracing the sample app")?;
    let (report, timeline) = coldstart_analyze::analyze(
        &profile,
        &coldstart_analyze::Options {
            run: Some(summary.run),
            attribute: true,
            ..Default::default()
        },
    )?;
    let chart_options = coldstart_report::chart::ChartOptions::default();
    let svg = dir.join("demo-trace.svg");
    let html = dir.join("demo-trace.html");
    std::fs::write(
        &svg,
        coldstart_report::chart::svg(&timeline, &chart_options),
    )
    .with_context(|| format!("cannot write {}", svg.display()))?;
    std::fs::write(
        &html,
        coldstart_report::html::html(&report, &timeline, &chart_options),
    )
    .with_context(|| format!("cannot write {}", html.display()))?;

    step("tracing it cold again with readahead off, for its prefetch plan");
    let demand = trace(
        &mut profile,
        &TraceOptions {
            launch: sample_launch(executable)?,
            user_faults: false,
            read_ahead_kb: Some(0),
            ..options
        },
        &interrupted,
        |_| {},
        |_| {},
    )
    .context("tracing the sample app with readahead off")?;
    Ok(Ok(Traced {
        report,
        profile: profile_path,
        demand_run: demand.run,
        svg,
        html,
    }))
}

/// Times the sample app warm against cold, interleaved: cold drops the whole
/// page cache (root); without root, selective-cold evicts the app's own two
/// files, which any user may do.
/// Bench variant names the demo reads its before/after times from.
const COLD_VARIANT: &str = "sample app (cold)";
const ORDERED_VARIANT: &str = "sample app relinked with its order (cold)";

fn bench_warm_cold(
    executable: &std::path::Path,
    library: &std::path::Path,
    plan: Option<&std::path::Path>,
    ordered: Option<&coldstart_sample::BuiltApp>,
) -> anyhow::Result<coldstart_bench::BenchResult> {
    use coldstart_bench::{Environment, Options, Variant};
    use coldstart_profile::CacheMode;

    // SAFETY: geteuid never fails.
    let cold = if unsafe { libc::geteuid() } == 0 {
        CacheMode::Cold
    } else {
        CacheMode::Selective
    };
    const RUNS: usize = 10;
    let mut commands = vec![sample_launch(executable)?];
    let mut variants: Vec<Variant> = [CacheMode::Warm, cold]
        .into_iter()
        .map(|cache| Variant {
            name: format!("sample app ({})", cache.as_str()),
            command: 0,
            cache,
        })
        .collect();
    if let Some(plan) = plan {
        let mut with_plan = sample_launch(executable)?;
        let wrapper = crate::commands::run::wrapper()?;
        with_plan.argv = vec![wrapper.path.into_os_string()];
        if !wrapper.subcommand.is_empty() {
            with_plan.argv.push("run".into());
        }
        with_plan.argv.extend([
            "--plan".into(),
            plan.as_os_str().to_owned(),
            "--".into(),
            executable.as_os_str().to_owned(),
        ]);
        commands.push(with_plan);
        variants.push(Variant {
            name: format!("sample app + plan ({})", cold.as_str()),
            command: 1,
            cache: cold,
        });
    }
    let mut evict = vec![executable.to_path_buf(), library.to_path_buf()];
    if let Some(app) = ordered {
        commands.push(sample_launch(&app.executable)?);
        variants.push(Variant {
            name: if cold == CacheMode::Cold {
                ORDERED_VARIANT.to_string()
            } else {
                format!("sample app relinked with its order ({})", cold.as_str())
            },
            command: commands.len() - 1,
            cache: cold,
        });
        evict.extend([app.executable.clone(), app.library.clone()]);
    }
    step(&format!(
        "timing its start warm against {}{} ({RUNS} interleaved runs each)",
        cold.as_str(),
        match plan {
            Some(_) if crate::commands::run::wrapper()?.subcommand.is_empty() =>
                ", and with its prefetch plan through coldstart-run",
            Some(_) => {
                ", and with its prefetch plan through `coldstart run` (the smaller coldstart-run \
                 is not built beside this binary: `cargo build --release` builds it)"
            }
            None => "",
        }
    ));
    let total = (variants.len() * RUNS) as u64;
    let options = Options {
        commands,
        variants,
        runs: RUNS,
        warmup: 1,
        evict,
        grace: std::time::Duration::from_millis(500),
    };
    let interrupted = std::sync::atomic::AtomicBool::new(false);
    let bar = output::progress(total, "benchmark");
    let result = coldstart_bench::bench(
        &options,
        Environment::detect(executable),
        &interrupted,
        |event| {
            if let coldstart_bench::Event::Run(_) = event {
                bar.inc(1);
            }
        },
    )
    .context("benchmarking the sample app")?;
    bar.finish_and_clear();
    Ok(result)
}

/// Compiles the readahead-off run into DIR/demo.plan.
fn plan_from_trace(
    profile: &std::path::Path,
    run: coldstart_profile::RunId,
    dir: &std::path::Path,
) -> anyhow::Result<(PathBuf, coldstart_prefetch::Plan)> {
    use coldstart_plan::compile::{CompileOptions, compile};
    let opened = coldstart_profile::Profile::open(profile)?;
    let compiled = compile(
        &opened,
        &profile.display().to_string(),
        &CompileOptions {
            runs: Some(vec![run]),
            ..CompileOptions::default()
        },
    )
    .context("compiling the sample app's prefetch plan")?;
    let path = dir.join("demo.plan");
    std::fs::write(&path, coldstart_prefetch::format::write(&compiled.plan))
        .with_context(|| format!("cannot write {}", path.display()))?;
    step(&format!(
        "compiled its prefetch plan: {} extents of {} files, {} KiB ({})",
        compiled.plan.extents.len(),
        compiled.plan.files.len(),
        compiled.plan.bytes() / 1024,
        path.display()
    ));
    Ok((path, compiled.plan))
}

/// The sample app started as the invoking user, ready when it prints READY.
pub(crate) fn sample_launch(
    executable: &std::path::Path,
) -> anyhow::Result<coldstart_system::launch::LaunchSpec> {
    use coldstart_system::launch::{Forward, Identity, LaunchSpec};

    Ok(LaunchSpec {
        argv: vec![executable.as_os_str().to_owned()],
        identity: Identity::invoking_user(false)?,
        ready_regex: Some(regex::Regex::new("^READY")?),
        ready_file: None,
        timeout: Some(std::time::Duration::from_secs(60)),
        forward: Forward::Discard,
        env: Vec::new(),
    })
}
