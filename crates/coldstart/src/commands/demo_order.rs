//! The order stage of `coldstart demo`: build the sample app instrumented
//! with coldstart's runtime, record which functions its start calls, write
//! an order file per binary, relink the plain objects with it, and trace
//! the relinked app to measure what the new layout saves.

use crate::commands::order::{called_functions, module_glob, traces};
use crate::output::step;
use anyhow::Context;
use coldstart_analyze::pages::PageSet;
use coldstart_analyze::relayout::{CalledFunction, Relayout};
use coldstart_analyze::{SimulateOptions, simulate};
use coldstart_binary::OffsetIndex;
use coldstart_layout::{BalancedOptions, EmitContext, Linker, OrderOptions, Strategy};
use coldstart_profile::{CacheMode, Profile, RunId};
use coldstart_record::trace::{TraceOptions, trace};
use coldstart_sample::{BuildOptions, BuiltApp, build};
use serde::Serialize;
use std::path::{Path, PathBuf};

/// Start-up I/O of the app's two binaries at one readahead setting.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct StartupIo {
    /// The device setting these were measured at.
    pub read_ahead_kb: u64,
    /// Pages of executable sections the start touched (readahead off).
    pub text_pages_touched: u64,
    /// Read requests at the device's readahead setting.
    pub read_requests: u64,
    pub bytes_read: u64,
    /// Median cold start from an interleaved bench.
    pub cold_ms: Option<f64>,
    /// What `coldstart simulate` predicted from the trace before the
    /// relink and the order files (only for the relinked app).
    pub predicted_bytes_read: Option<u64>,
}

/// Before and after at one setting.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Comparison {
    pub before: StartupIo,
    pub after: StartupIo,
}

/// The kernel's default read_ahead_kb, which most disks keep; the layout
/// matters there, as a window no longer covers a small binary whole.
pub const KERNEL_DEFAULT_READ_AHEAD_KB: u64 = 128;

/// The order stage's results.
#[derive(Debug, Clone, Serialize)]
pub struct OrderLoop {
    pub linker: Linker,
    pub strategy: &'static str,
    pub order_files: Vec<PathBuf>,
    /// Functions the instrumented start called (all processes).
    pub functions_recorded: usize,
    /// Functions placed by the order files, and their bytes.
    pub ordered: usize,
    pub ordered_bytes: u64,
    #[serde(skip)]
    pub ordered_app: BuiltApp,
    pub ordered_executable: PathBuf,
    pub ordered_library: PathBuf,
    /// At the kernel's default read_ahead_kb (128), timed here.
    pub at_default: Comparison,
    /// At this device's own setting, timed with the demo's main bench.
    pub at_device: Comparison,
}

/// The before/after tables.
pub fn render(order: &OrderLoop) -> String {
    let mut out = format!(
        "\nRelinked with {} order files ({} strategy, {} functions, {} KiB placed first; {}):\n",
        order.linker,
        order.strategy,
        order.ordered,
        order.ordered_bytes / 1024,
        order
            .order_files
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", "),
    );
    for (comparison, what) in [
        (&order.at_default, "the kernel's default"),
        (&order.at_device, "this device's setting"),
    ] {
        out.push_str(&format!(
            "  at read_ahead_kb {} ({what}):\n{}",
            comparison.before.read_ahead_kb,
            comparison_table(comparison)
        ));
    }
    out
}

fn comparison_table(c: &Comparison) -> String {
    use coldstart_report::table::{Table, human_bytes, thousands};
    let mut table = Table::new(&["", ">before", ">after", ">change", ">predicted after"]);
    let change = |before: f64, after: f64| {
        if before == 0.0 {
            "-".to_string()
        } else {
            format!("{:+.1}%", (after - before) / before * 100.0)
        }
    };
    let (b, a) = (&c.before, &c.after);
    table.row(vec![
        "text pages touched".into(),
        thousands(b.text_pages_touched),
        thousands(a.text_pages_touched),
        change(b.text_pages_touched as f64, a.text_pages_touched as f64),
        String::new(),
    ]);
    table.row(vec![
        "read requests".into(),
        thousands(b.read_requests),
        thousands(a.read_requests),
        change(b.read_requests as f64, a.read_requests as f64),
        String::new(),
    ]);
    table.row(vec![
        "bytes read".into(),
        human_bytes(b.bytes_read),
        human_bytes(a.bytes_read),
        change(b.bytes_read as f64, a.bytes_read as f64),
        a.predicted_bytes_read.map_or(String::new(), human_bytes),
    ]);
    if let (Some(before), Some(after)) = (b.cold_ms, a.cold_ms) {
        table.row(vec![
            "cold start (median)".into(),
            format!("{before:.1} ms"),
            format!("{after:.1} ms"),
            change(before, after),
            String::new(),
        ]);
    }
    table.render(coldstart_report::Style::Plain, "    ")
}

/// The linker to relink with, and the flags that select it: lld when
/// found (on PATH or in an LLVM install), else gold.
fn linker() -> (Linker, Vec<String>) {
    let on_path = std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join("ld.lld").exists()));
    if on_path {
        return (Linker::Lld, vec!["-fuse-ld=lld".into()]);
    }
    for version in (14..=21).rev() {
        let dir = format!("/usr/lib/llvm-{version}/bin");
        if Path::new(&dir).join("ld.lld").exists() {
            return (Linker::Lld, vec![format!("-B{dir}"), "-fuse-ld=lld".into()]);
        }
    }
    (Linker::Gold, vec!["-fuse-ld=gold".into()])
}

/// Runs the loop; `before` comes from the demo's own traces of the plain
/// build (`default_run` at the device's readahead, `demand_run` with
/// readahead off, both in `profile_path`).
pub fn order_loop(
    plain: &BuiltApp,
    source_dir: &Path,
    dir: &Path,
    options: &BuildOptions,
    profile_path: &Path,
    default_run: RunId,
    demand_run: RunId,
) -> anyhow::Result<OrderLoop> {
    let runtime = coldstart_record::functions::build_runtime(&dir.join("runtime"))?;
    step("building the app again instrumented (-finstrument-functions) to record its calls");
    let instrumented = build(
        source_dir,
        &dir.join("build-instrumented"),
        &BuildOptions {
            extra_cflags: vec!["-finstrument-functions".into()],
            executable_ldflags: vec![runtime.static_lib.display().to_string()],
            ..options.clone()
        },
        &mut |_| {},
    )
    .context("building the instrumented sample app")?;

    let functions_db = dir.join("functions.db");
    let _ = std::fs::remove_file(&functions_db);
    let mut profile = Profile::create_or_open(&functions_db)?;
    let mut launch = crate::commands::demo::sample_launch(&instrumented.executable)?;
    let records = crate::commands::trace::records_dir_for(&mut launch)?;
    let interrupted = std::sync::atomic::AtomicBool::new(false);
    let summary = trace(
        &mut profile,
        &trace_options(launch, None),
        &interrupted,
        |_| {},
        |_| {},
    )
    .context("tracing the instrumented sample app")?;
    let recorded =
        crate::commands::trace::record_functions(&mut profile, &summary, records.path())?;
    step(&format!(
        "recorded the first calls of {} functions",
        recorded.functions
    ));

    let (linker, linker_flags) = linker();
    let strategy = Strategy::FirstCall;
    let mut order_files = Vec::new();
    let (mut ordered, mut ordered_bytes) = (0, 0);
    let mut module_flags = Vec::new();
    // Per binary [library, executable]: the functions the start called.
    let mut called = Vec::new();
    for binary in [&plain.library, &plain.executable] {
        let index = OffsetIndex::from_path(binary)?;
        let name = binary.file_name().unwrap_or_default().to_string_lossy();
        let module = module_glob(binary, None)?;
        let (traces, _) = traces(&profile, &[summary.run], binary, &index, &module, false)?;
        called.push(called_functions(&profile, summary.run, &index, &module)?);
        let order = coldstart_layout::order(
            &traces,
            &OrderOptions {
                strategy,
                balanced: BalancedOptions::default(),
            },
        )?;
        let emitted = coldstart_layout::emit(
            &order,
            linker,
            &EmitContext {
                binary: Some(&index),
                objects: None,
                bfd: None,
            },
        )?;
        let path = dir.join(format!("{name}.order"));
        std::fs::write(&path, &emitted.text)
            .with_context(|| format!("writing {}", path.display()))?;
        ordered += emitted.report.ordered;
        ordered_bytes += emitted.report.ordered_bytes;
        module_flags.push(
            emitted
                .report
                .usage
                .replace("FILE", &path.display().to_string()),
        );
        order_files.push(path);
    }
    step(&format!(
        "wrote {linker} order files placing {ordered} functions ({} KiB) first",
        ordered_bytes / 1024
    ));
    let mut extra_ldflags = options.extra_ldflags.clone();
    extra_ldflags.extend(linker_flags);
    let ordered_app = build(
        source_dir,
        &dir.join("build-ordered"),
        &BuildOptions {
            extra_ldflags,
            library_ldflags: vec![module_flags[0].clone()],
            executable_ldflags: vec![module_flags[1].clone()],
            ..options.clone()
        },
        &mut |_| {},
    )
    .context("relinking the sample app with its order files")?;
    step(&format!(
        "relinked it with the order files into {}",
        ordered_app.build_dir.display()
    ));

    step(&format!(
        "tracing the relinked app cold with readahead off and at the device's setting, and \
         both builds at read_ahead_kb {KERNEL_DEFAULT_READ_AHEAD_KB}"
    ));
    let mut measured = Profile::create_or_open(profile_path)?;
    let mut trace_app = |executable: &Path, read_ahead_kb: Option<u64>| -> anyhow::Result<RunId> {
        let launch = crate::commands::demo::sample_launch(executable)?;
        Ok(trace(
            &mut measured,
            &trace_options(launch, read_ahead_kb),
            &interrupted,
            |_| {},
            |_| {},
        )
        .with_context(|| format!("tracing {}", executable.display()))?
        .run)
    };
    let after_device = trace_app(&ordered_app.executable, None)?;
    let after_demand = trace_app(&ordered_app.executable, Some(0))?;
    let default_kb = KERNEL_DEFAULT_READ_AHEAD_KB;
    let before_default = trace_app(&plain.executable, Some(default_kb))?;
    let after_default = trace_app(&ordered_app.executable, Some(default_kb))?;
    let device_kb = measured
        .run(Some(default_run))?
        .start
        .read_ahead_kb
        .unwrap_or_default();
    let predicted =
        |kb| predicted_bytes_read(&measured, demand_run, plain, &order_files, &called, kb);
    let at_device = Comparison {
        before: startup_io(&measured, default_run, demand_run, plain, device_kb)?,
        after: StartupIo {
            predicted_bytes_read: Some(predicted(device_kb)?),
            ..startup_io(
                &measured,
                after_device,
                after_demand,
                &ordered_app,
                device_kb,
            )?
        },
    };
    let mut at_default = Comparison {
        before: startup_io(&measured, before_default, demand_run, plain, default_kb)?,
        after: StartupIo {
            predicted_bytes_read: Some(predicted(default_kb)?),
            ..startup_io(
                &measured,
                after_default,
                after_demand,
                &ordered_app,
                default_kb,
            )?
        },
    };
    let (before_ms, after_ms) = bench_at(plain, &ordered_app, default_kb)?;
    at_default.before.cold_ms = before_ms;
    at_default.after.cold_ms = after_ms;
    Ok(OrderLoop {
        linker,
        strategy: strategy.name(),
        order_files,
        functions_recorded: recorded.functions,
        ordered,
        ordered_bytes,
        ordered_executable: ordered_app.executable.clone(),
        ordered_library: ordered_app.library.clone(),
        ordered_app,
        at_default,
        at_device,
    })
}

/// What the simulator predicts the relinked binaries read at
/// `read_ahead_kb`, from the plain build's readahead-off trace and the
/// order files alone.
fn predicted_bytes_read(
    profile: &Profile,
    demand_run: RunId,
    plain: &BuiltApp,
    order_files: &[PathBuf],
    called: &[Vec<CalledFunction>],
    read_ahead_kb: u64,
) -> anyhow::Result<u64> {
    let mut relayouts = Vec::new();
    // order_files follow [library, executable].
    let binaries = [&plain.library, &plain.executable];
    for ((binary, order), called) in binaries.into_iter().zip(order_files).zip(called) {
        let index = OffsetIndex::from_path(binary)?;
        let names = coldstart_layout::read_order_file(order)?;
        relayouts.push(
            Relayout::new(&binary.display().to_string(), &index, &names)
                .with_functions(called.clone()),
        );
    }
    let report = simulate(
        profile,
        &SimulateOptions {
            run: Some(demand_run),
            read_ahead_kb: Some(read_ahead_kb),
            relayouts,
            ..SimulateOptions::default()
        },
    )?;
    let paths = [
        plain.library.display().to_string(),
        plain.executable.display().to_string(),
    ];
    Ok(report
        .files
        .iter()
        .filter(|f| paths.contains(&f.path))
        .map(|f| f.pages_read * report.page_size)
        .sum())
}

/// Medians of cold starts of the plain and the relinked app, interleaved,
/// with every device's read_ahead_kb held at `read_ahead_kb` meanwhile.
fn bench_at(
    plain: &BuiltApp,
    ordered: &BuiltApp,
    read_ahead_kb: u64,
) -> anyhow::Result<(Option<f64>, Option<f64>)> {
    use coldstart_bench::{Environment, Options, Variant};
    const RUNS: usize = 10;
    step(&format!(
        "timing both builds cold at read_ahead_kb {read_ahead_kb} ({RUNS} interleaved runs each)"
    ));
    let _readahead = coldstart_system::readahead::ReadaheadOverride::set_all(read_ahead_kb)?;
    let commands = vec![
        crate::commands::demo::sample_launch(&plain.executable)?,
        crate::commands::demo::sample_launch(&ordered.executable)?,
    ];
    let variants = ["sample app (cold)", "relinked with its order (cold)"]
        .iter()
        .enumerate()
        .map(|(command, name)| Variant {
            name: name.to_string(),
            command,
            cache: CacheMode::Cold,
        })
        .collect();
    let options = Options {
        commands,
        variants,
        runs: RUNS,
        warmup: 1,
        evict: Vec::new(),
        grace: std::time::Duration::from_millis(500),
    };
    let interrupted = std::sync::atomic::AtomicBool::new(false);
    let result = coldstart_bench::bench(
        &options,
        Environment::detect(&plain.executable),
        &interrupted,
        |_| {},
    )
    .context("timing the plain and the relinked sample app")?;
    let median = |i: usize| {
        result
            .variants
            .get(i)
            .and_then(|v| v.wall_ms.as_ref())
            .map(|s| s.median)
    };
    Ok((median(0), median(1)))
}

fn trace_options(
    launch: coldstart_system::launch::LaunchSpec,
    read_ahead_kb: Option<u64>,
) -> TraceOptions {
    TraceOptions {
        launch,
        cache: CacheMode::Cold,
        evict: Vec::new(),
        buffer_kb_per_cpu: 64 * 1024,
        grace: std::time::Duration::from_millis(500),
        user_faults: false,
        read_ahead_kb,
    }
}

/// The two binaries' start-up I/O: executable-section pages read with
/// readahead off (exactly the pages touched), and what the start read at
/// the device's setting.
fn startup_io(
    profile: &Profile,
    default_run: RunId,
    demand_run: RunId,
    app: &BuiltApp,
    read_ahead_kb: u64,
) -> anyhow::Result<StartupIo> {
    let binaries = [&app.executable, &app.library];
    let report_of = |run, pages| {
        coldstart_analyze::analyze(
            profile,
            &coldstart_analyze::Options {
                run: Some(run),
                pages,
                ..Default::default()
            },
        )
        .map(|(report, _)| report)
    };
    let ours = |file: &&coldstart_analyze::FileReport| {
        binaries
            .iter()
            .any(|b| b.to_str() == Some(file.path.as_str()))
    };
    // With readahead off the pages read are the pages touched.
    let page_size = profile.run(Some(demand_run))?.start.page_size.max(1);
    let mut text_pages_touched = 0;
    for file in report_of(demand_run, true)?.files.iter().filter(ours) {
        let Some(lists) = &file.pages else { continue };
        let read = PageSet::from_ranges(lists.read.iter().map(|&[a, b]| (a, b - a + 1)).collect());
        let text = PageSet::from_ranges(
            OffsetIndex::from_path(Path::new(&file.path))?
                .sections()
                .iter()
                .filter(|s| s.executable)
                .map(|s| {
                    let first = s.offset / page_size;
                    (first, s.end().div_ceil(page_size) - first)
                })
                .collect(),
        );
        text_pages_touched += text
            .extents()
            .iter()
            .map(|&(a, b)| read.pages_overlapping(a * page_size, b * page_size, page_size))
            .sum::<u64>();
    }
    let (mut read_requests, mut bytes_read) = (0, 0);
    for file in report_of(default_run, false)?.files.iter().filter(ours) {
        read_requests += file.read_requests;
        bytes_read += file.bytes_read;
    }
    Ok(StartupIo {
        read_ahead_kb,
        text_pages_touched,
        read_requests,
        bytes_read,
        cold_ms: None,
        predicted_bytes_read: None,
    })
}
