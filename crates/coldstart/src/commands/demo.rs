//! `coldstart demo`: coldstart's whole loop on its built-in sample app, as a
//! list of library steps, each announced by one line on stderr. Generates
//! and builds the app, checks it starts (prints READY) and inspects its
//! binaries; as root, traces its cold start (report and chart), compiles
//! its prefetch plan, orders and relinks it; packs its relocations; then
//! times it warm against cold, with the plan, relinked and packed, at the
//! device's read_ahead_kb and the kernel's default. It prints a summary of a
//! screen, writes the full report to DIR/demo-report.txt (and prints it with
//! --verbose), or prints it all as JSON.

use crate::args::{CompilerArg, DemoArgs};
use crate::output;
use anyhow::Context;
use coldstart_binary::{InspectOptions, Inspection, inspect_path};
use coldstart_pipeline::bench::{PlanEffect, RUNS, Start, StartBench, bench_starts};
use coldstart_pipeline::cold_start::{ColdStart, Tracing, trace_cold_start};
use coldstart_pipeline::demo::{DemoReport, PackedApp, bench_at_kernel_default, pack_app};
use coldstart_pipeline::order::{KERNEL_DEFAULT_READ_AHEAD_KB, OrderLoop, Plain, order_loop};
use coldstart_pipeline::plan::compile_plan;
use coldstart_pipeline::summary::{self, DemoSummary, PackTables, RelinkPages, Setting};
use coldstart_prefetch::Plan;
use coldstart_prefetch::launcher::Wrapper;
use coldstart_report::chart::ChartOptions;
use coldstart_sample::{
    BuildEvent, BuildOptions, BuiltApp, Compiler, GroundTruth, SampleSpec, build, generate,
};
use indicatif::ProgressBar;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::Instant;

/// The steps every demo announces: build, run, inspect, trace, plan, order,
/// pack, bench (building coldstart-run first adds one).
const STEPS: usize = 8;

/// The full text report, in --dir.
const DETAIL_FILE: &str = "demo-report.txt";

pub fn run(args: &DemoArgs) -> anyhow::Result<ExitCode> {
    let spec = spec(args)?;
    let coldstart = std::env::current_exe().context("cannot find the coldstart binary")?;
    let cargo = CargoRun::without_launcher(&coldstart);
    let mut progress = Progress::new(STEPS + usize::from(cargo.is_some()), args.verbose);
    let launcher = launcher(&coldstart, cargo, &mut progress);
    let built = build_app(args, &spec, &mut progress)?;
    let app = &built.app;
    progress.step(
        "inspect",
        "reading its binaries: segments, relocations, initializers",
    );
    let inspections = [&app.executable, &app.library]
        .into_iter()
        .map(|path| inspect_path(path, &InspectOptions::default()))
        .collect::<Result<Vec<_>, _>>()?;
    let mut fixes = trace_plan_order(args, &built, &mut progress)?;
    progress.step("pack", "packing its relative relocations as DT_RELR");
    let packing = pack(app, &args.dir, &built.startup_output, &mut progress);
    let benches = benches(
        app,
        fixes.plan.is_some().then_some(fixes.plan_path.as_path()),
        &launcher.wrapper,
        fixes.order.as_ref(),
        packing.0.as_ref(),
        &mut progress,
    )?;
    if let Some(order) = &mut fixes.order {
        benches.time_order(order);
    }
    let detail_path = args.dir.join(DETAIL_FILE);
    let summary = summary(
        &spec,
        &built,
        &fixes,
        &packing,
        &benches,
        launcher,
        &detail_path,
    )?;
    let report = report(spec, built, inspections, fixes, packing, benches, summary);
    progress.finish();
    write_report(args, &report, &detail_path, &progress.log)?;
    Ok(ExitCode::SUCCESS)
}

/// What tracing the app leads to (as root): its traced start with a chart
/// and report page, its prefetch plan, and the order loop.
struct Fixes {
    tracing: Tracing,
    /// The chart (SVG) and report page (HTML).
    charts: Option<(PathBuf, PathBuf)>,
    plan_path: PathBuf,
    plan: Option<Plan>,
    order: Option<OrderLoop>,
}

/// The trace, plan and order steps.
fn trace_plan_order(
    args: &DemoArgs,
    built: &Built,
    progress: &mut Progress,
) -> anyhow::Result<Fixes> {
    let app = &built.app;
    if coldstart_system::launch::is_root() {
        progress.step(
            "trace",
            "tracing its cold start, then again with readahead off",
        );
    } else {
        progress.step("trace", "skipped: tracing needs root (sudo coldstart demo)");
    }
    let tracing = trace_cold_start(&app.executable, &args.dir.join("demo.db"), &mut |s| {
        progress.say(s)
    })?;
    let traced = tracing.traced();
    let charts = traced.map(|t| write_charts(t, &args.dir)).transpose()?;
    let plan_path = args.dir.join("demo.plan");
    progress.step_unless_skipped("plan", "compiling its prefetch plan", traced.is_some());
    let plan = traced
        .map(|t| {
            compile_plan(&t.profile, t.demand_run, &plan_path, &mut |s| {
                progress.say(s)
            })
        })
        .transpose()?;
    progress.step_unless_skipped(
        "order",
        "recording its first calls, writing order files, relinking, tracing again",
        traced.is_some(),
    );
    let order = match traced {
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
            &mut |s| progress.say(s),
        )?),
        None => None,
    };
    Ok(Fixes {
        tracing,
        charts,
        plan_path,
        plan,
        order,
    })
}

/// `coldstart pack`'s result, or why it refused.
type Packing = (Option<PackedApp>, Option<String>);

/// The figures the summary shows.
fn summary(
    spec: &SampleSpec,
    built: &Built,
    fixes: &Fixes,
    packing: &Packing,
    benches: &Benches,
    launcher: Launcher,
    detail_path: &Path,
) -> anyhow::Result<DemoSummary> {
    let traced = fixes.tracing.traced();
    Ok(DemoSummary {
        app: summary::App {
            translation_units: spec.translation_units,
            functions: built.truth.functions.len(),
            startup_calls: built.truth.startup_order.len(),
            build_seconds: built.seconds,
        },
        runs: RUNS,
        launcher: summary::Launcher {
            path: launcher.wrapper.path.clone(),
            coldstart_run: launcher.wrapper.is_small(),
            note: launcher.note,
        },
        reads: traced.map(summary::traced_reads).transpose()?,
        settings: benches.settings(),
        relink: fixes.order.as_ref().map(RelinkPages::of),
        pack: packing.0.as_ref().map(PackTables::of),
        files: summary::files(
            fixes.charts.as_ref().map(|(_, html)| html.as_path()),
            fixes.plan.is_some().then_some(fixes.plan_path.as_path()),
            fixes.order.as_ref(),
            detail_path,
        ),
    })
}

/// Everything the demo found, for --json and the full report.
fn report(
    spec: SampleSpec,
    built: Built,
    inspections: Vec<Inspection>,
    fixes: Fixes,
    (pack, pack_skipped): Packing,
    benches: Benches,
    summary: DemoSummary,
) -> DemoReport {
    let traced = fixes.tracing.traced();
    let skipped = fixes.tracing.skipped().map(str::to_string);
    let order = fixes.order;
    DemoReport {
        spec,
        executable: built.app.executable.clone(),
        library: built.app.library.clone(),
        functions: built.truth.functions.len(),
        startup_calls: built.truth.startup_order.len(),
        static_initializers: built.truth.static_initializers.len(),
        build_seconds: built.seconds,
        inspections,
        trace: traced.map(|t| t.report.clone()),
        chart: fixes.charts.as_ref().map(|(svg, _)| svg.clone()),
        html: fixes.charts.map(|(_, html)| html),
        profile: traced.map(|t| t.profile.clone()),
        plan_path: fixes.plan.is_some().then_some(fixes.plan_path),
        plan: fixes.plan,
        plan_effects: benches.plan_effects(),
        bench_at_default: benches.at_default.map(|b| b.result),
        bench: Some(benches.main.result),
        before: order.as_ref().map(|o| o.at_default.before),
        after: order.as_ref().map(|o| o.at_default.after),
        order_skipped: order.is_none().then(|| skipped.clone()).flatten(),
        trace_skipped: skipped,
        order,
        pack,
        pack_skipped,
        source_dir: built.source_dir,
        startup_output: built.startup_output,
        summary,
    }
}

/// The full report to `detail_path` (with every line the steps said), then
/// to stdout: JSON, or the summary (after the full report with --verbose).
fn write_report(
    args: &DemoArgs,
    report: &DemoReport,
    detail_path: &Path,
    log: &[String],
) -> anyhow::Result<()> {
    let detail = coldstart_pipeline::render::render(report);
    let mut file_text = format!("{}\nWhat each step said:\n", detail.trim_start());
    log.iter().for_each(|line| {
        file_text.push_str(line);
        file_text.push('\n');
    });
    std::fs::write(detail_path, file_text)
        .with_context(|| format!("cannot write {}", detail_path.display()))?;
    if args.json {
        return output::print_json(report);
    }
    let summary = coldstart_pipeline::render::render_summary(&report.summary);
    if args.verbose {
        output::print_text(&format!("{detail}\n{summary}"))
    } else {
        output::print_text(&summary)
    }
}

/// The demo's progress on stderr: one numbered line per step. What a
/// library step says within it shows on the step's spinner (on a
/// terminal), is kept for the detail file, and is printed with --verbose.
struct Progress {
    done: usize,
    total: usize,
    verbose: bool,
    /// Every line, for the detail file.
    log: Vec<String>,
    /// The running step's spinner or progress bar.
    current: Option<ProgressBar>,
    /// `current` is a spinner, which shows what the step says.
    spinning: bool,
}

impl Progress {
    fn new(total: usize, verbose: bool) -> Progress {
        Progress {
            done: 0,
            total,
            verbose,
            log: Vec::new(),
            current: None,
            spinning: false,
        }
    }

    /// Announces the next step, with a spinner until the next one.
    fn step(&mut self, name: &str, what: &str) {
        self.finish();
        self.done += 1;
        let line = format!("[{}/{}] {name:<8} {what}", self.done, self.total);
        eprintln!("{line}");
        self.log.push(line);
        self.current = Some(output::spinner());
        self.spinning = true;
    }

    /// Announces the next step, or that it needs the trace the demo could
    /// not make.
    fn step_unless_skipped(&mut self, name: &str, what: &str, traced: bool) {
        if traced {
            self.step(name, what);
        } else {
            self.step(name, "skipped: it needs the trace, which needs root");
        }
    }

    /// A progress bar for the running step, in place of its spinner.
    fn bar(&mut self, message: &str) -> ProgressBar {
        self.finish();
        let bar = output::progress(0, message);
        self.current = Some(bar.clone());
        self.spinning = false;
        bar
    }

    /// A line a library step says: on the spinner, in the log, and with
    /// --verbose on stderr.
    fn say(&mut self, text: &str) {
        self.log.push(format!("         {text}"));
        match &self.current {
            Some(bar) => {
                if self.spinning {
                    bar.set_message(text.chars().take(76).collect::<String>());
                }
                if self.verbose {
                    output::say(bar, format!("         {text}"));
                }
            }
            None if self.verbose => eprintln!("         {text}"),
            None => {}
        }
    }

    /// A line the user must see: a fallback taken, a step that failed.
    fn note(&mut self, text: &str) {
        let line = format!("         {text}");
        match &self.current {
            Some(bar) => output::say(bar, line.clone()),
            None => eprintln!("{line}"),
        }
        self.log.push(line);
    }

    fn finish(&mut self) {
        if let Some(bar) = self.current.take() {
            bar.finish_and_clear();
        }
    }
}

/// What the starts with a plan go through, and why it is not coldstart-run
/// when it is not.
struct Launcher {
    wrapper: Wrapper,
    note: Option<String>,
}

/// Cargo, when it started this binary without coldstart-run beside it:
/// `cargo run -p coldstart` builds only the binary it runs. Cargo sets
/// CARGO and CARGO_MANIFEST_DIR for the program it runs.
struct CargoRun {
    cargo: OsString,
    manifest_dir: PathBuf,
}

impl CargoRun {
    fn without_launcher(coldstart: &Path) -> Option<CargoRun> {
        if Wrapper::beside(coldstart.to_path_buf()).is_small() {
            return None;
        }
        Some(CargoRun {
            cargo: std::env::var_os("CARGO")?,
            manifest_dir: std::env::var_os("CARGO_MANIFEST_DIR")?.into(),
        })
    }

    /// `cargo build -p coldstart --bin coldstart-run` in the profile and
    /// target directory `coldstart` was built in, so that it lands beside
    /// it; Err is one line saying why not.
    fn build_launcher(&self, coldstart: &Path) -> Result<(), String> {
        let profile_dir = coldstart.parent().unwrap_or(Path::new("."));
        let (Some(profile), Some(target_dir)) = (
            profile_dir.file_name().and_then(|p| p.to_str()),
            profile_dir.parent(),
        ) else {
            return Err(format!(
                "{} is not in a cargo target directory",
                coldstart.display()
            ));
        };
        let mut command = Command::new(&self.cargo);
        command.arg("build");
        match profile {
            "release" => {
                command.arg("--release");
            }
            "debug" => {}
            other => {
                command.args(["--profile", other]);
            }
        }
        command
            .args(["-p", "coldstart", "--bin", "coldstart-run", "--target-dir"])
            .arg(target_dir)
            .current_dir(&self.manifest_dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        let built = command
            .output()
            .map_err(|err| format!("cannot run {}: {err}", self.cargo.to_string_lossy()))?;
        if built.status.success() {
            return Ok(());
        }
        let stderr = String::from_utf8_lossy(&built.stderr);
        let last = stderr.lines().rev().find(|l| !l.trim().is_empty());
        Err(format!(
            "`cargo build --bin coldstart-run` failed ({}){}",
            built.status,
            last.map_or(String::new(), |l| format!(": {}", l.trim()))
        ))
    }
}

/// coldstart-run beside this binary, built first when cargo started the
/// demo without it; else `coldstart run`, said in one line.
fn launcher(coldstart: &Path, cargo: Option<CargoRun>, progress: &mut Progress) -> Launcher {
    let beside = Wrapper::beside(coldstart.to_path_buf());
    if beside.is_small() {
        return Launcher {
            wrapper: beside,
            note: None,
        };
    }
    let why = match cargo {
        None => format!(
            "coldstart-run is not beside {} (`cargo build --release` builds it)",
            coldstart.display()
        ),
        Some(cargo) => {
            progress.step(
                "launcher",
                "building coldstart-run, the small launcher that starts the app with its plan",
            );
            match cargo.build_launcher(coldstart) {
                Ok(()) => {
                    let built = Wrapper::beside(coldstart.to_path_buf());
                    if built.is_small() {
                        return Launcher {
                            wrapper: built,
                            note: None,
                        };
                    }
                    format!(
                        "cargo built coldstart-run, but not beside {}",
                        coldstart.display()
                    )
                }
                Err(why) => why,
            }
        }
    };
    progress.note(&format!(
        "launcher: {why}; timing `coldstart run` instead, which reads more cold"
    ));
    Launcher {
        wrapper: beside,
        note: Some(why),
    }
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
fn build_app(args: &DemoArgs, spec: &SampleSpec, progress: &mut Progress) -> anyhow::Result<Built> {
    let source_dir = args.dir.join("src");
    let build_dir = args.dir.join(if args.pack_relative_relocs {
        "build-relr"
    } else {
        "build"
    });
    progress.step(
        "build",
        &format!(
            "generating and compiling the sample app: {} translation units, {} functions",
            spec.translation_units, spec.functions
        ),
    );
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
    let bar = progress.bar("compiling");
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
    let app = app.with_context(|| format!("building the sample app in {}", build_dir.display()))?;
    let seconds = started.elapsed().as_secs_f64();
    progress.say(&format!(
        "built {} in {seconds:.1} s",
        app.build_dir.display()
    ));
    progress.step("run", "starting it once: it must print READY");
    let startup_output = String::from_utf8_lossy(&app.run()?.stdout)
        .trim()
        .to_string();
    progress.say(&format!(
        "it printed READY after calling {} of its {} functions",
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
fn pack(app: &BuiltApp, dir: &Path, startup_output: &str, progress: &mut Progress) -> Packing {
    match pack_app(app, &dir.join("packed"), startup_output) {
        Ok(packed) => {
            if packed.output_matches {
                progress.say(&format!("packed into {}", dir.join("packed").display()));
            } else {
                progress.note("the packed app does NOT print what the original prints");
            }
            (Some(packed), None)
        }
        Err(err) => {
            progress.note(&format!("not packed: {err:#}"));
            (None, Some(format!("{err:#}")))
        }
    }
}

/// The demo's benches: at the device's read_ahead_kb every start, and (as
/// root, when the device is not at it) at the kernel's default the plain,
/// planned and relinked ones.
struct Benches {
    main: StartBench,
    at_default: Option<StartBench>,
    device_kb: Option<u64>,
}

impl Benches {
    /// The plan's effect at the kernel's default, then at the device's.
    fn plan_effects(&self) -> Vec<PlanEffect> {
        let at_default = self
            .at_default
            .as_ref()
            .and_then(|b| PlanEffect::of(b, KERNEL_DEFAULT_READ_AHEAD_KB));
        let at_device = self.device_kb.and_then(|kb| PlanEffect::of(&self.main, kb));
        at_default.into_iter().chain(at_device).collect()
    }

    /// The order loop's cold starts, from these benches where they timed
    /// them.
    fn time_order(&self, order: &mut OrderLoop) {
        order.at_device.before.cold_ms = self.main.median_ms(Start::Cold);
        order.at_device.after.cold_ms = self.main.median_ms(Start::Relinked);
        // No bench at the kernel's default when the device is at it already.
        let at_default = self.at_default.as_ref().or_else(|| {
            (self.device_kb == Some(KERNEL_DEFAULT_READ_AHEAD_KB)).then_some(&self.main)
        });
        if let Some(bench) = at_default {
            order.at_default.before.cold_ms = bench.median_ms(Start::Cold);
            order.at_default.after.cold_ms = bench.median_ms(Start::Relinked);
        }
    }

    /// The summary's figures, the kernel's default first.
    fn settings(&self) -> Vec<Setting> {
        let at_default = self
            .at_default
            .as_ref()
            .map(|b| Setting::of(b, Some(KERNEL_DEFAULT_READ_AHEAD_KB), false));
        at_default
            .into_iter()
            .chain([Setting::of(&self.main, self.device_kb, true)])
            .collect()
    }
}

/// Times the app's starts with a progress bar: warm, cold, with the plan,
/// relinked and packed at the device's setting, then again at the kernel's
/// default.
fn benches(
    app: &BuiltApp,
    plan: Option<&Path>,
    wrapper: &Wrapper,
    order: Option<&OrderLoop>,
    packed: Option<&PackedApp>,
    progress: &mut Progress,
) -> anyhow::Result<Benches> {
    let device_kb = coldstart_system::readahead::read_ahead_kb_for(&app.executable);
    let again = plan.is_some() && device_kb != Some(KERNEL_DEFAULT_READ_AHEAD_KB);
    progress.step(
        "bench",
        &format!(
            "timing its starts, {RUNS} interleaved runs each{}",
            if again {
                format!(", at read_ahead_kb {KERNEL_DEFAULT_READ_AHEAD_KB} too")
            } else {
                String::new()
            }
        ),
    );
    let ordered = order.map(|o| &o.ordered_app);
    let main = bench(app, plan, wrapper, ordered, packed, progress)?;
    let at_default = match plan {
        Some(plan) => {
            let bar = progress.bar(&format!("at {KERNEL_DEFAULT_READ_AHEAD_KB} KiB"));
            let timed =
                bench_at_kernel_default(app, plan, wrapper, ordered, &mut |_| {}, |done, total| {
                    bar.set_length(total as u64);
                    bar.set_position(done as u64);
                });
            timed.unwrap_or_else(|err| {
                progress.note(&format!(
                    "not timed at read_ahead_kb {KERNEL_DEFAULT_READ_AHEAD_KB}: {err:#}"
                ));
                None
            })
        }
        None => None,
    };
    Ok(Benches {
        main,
        at_default,
        device_kb,
    })
}

/// Times the app's starts (warm, cold, with the plan, relinked, packed)
/// with a progress bar.
fn bench(
    app: &BuiltApp,
    plan: Option<&Path>,
    wrapper: &Wrapper,
    ordered: Option<&BuiltApp>,
    packed: Option<&PackedApp>,
    progress: &mut Progress,
) -> anyhow::Result<StartBench> {
    let bar = progress.bar("benchmark");
    bench_starts(
        app,
        plan,
        wrapper,
        ordered,
        packed.map(|p| p.binaries()).as_deref(),
        &mut |s| progress.say(s),
        |done, total| {
            bar.set_length(total as u64);
            bar.set_position(done as u64);
        },
    )
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
