//! The order loop on the sample app: build it instrumented with coldstart's
//! runtime, record which functions its start calls, write an order file
//! per binary, relink the plain objects with them, and trace and time the
//! relinked app to measure what the new layout saves, beside what the
//! simulator predicted from the plain build's trace alone.

use crate::{Step, cold_trace, sample_launch};
use anyhow::Context;
use coldstart_analyze::loaded::LoadedRun;
use coldstart_analyze::pages::PageSet;
use coldstart_analyze::relayout::{CalledFunction, Relayout};
use coldstart_analyze::{SimulateOptions, simulate};
use coldstart_binary::OffsetIndex;
use coldstart_layout::traced::{
    ProfileOrder, called_functions, module_glob, order_from_profile, symbols_of,
};
use coldstart_layout::{Linker, Strategy};
use coldstart_profile::{Profile, RunId};
use coldstart_record::function_records::{record_functions, records_dir_for};
use coldstart_record::trace::trace;
use coldstart_sample::{BuildOptions, BuiltApp, build};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

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

/// The order loop's results.
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

/// What the loop starts from: the plain build and the demo's own traces
/// of it (`default_run` at the device's readahead, `demand_run` with
/// readahead off, both in `profile`).
pub struct Plain<'a> {
    pub app: &'a BuiltApp,
    pub source_dir: &'a Path,
    pub options: &'a BuildOptions,
    pub profile: &'a Path,
    pub default_run: RunId,
    pub demand_run: RunId,
}

/// Runs the loop in `dir`: record, order, relink, measure, time.
pub fn order_loop(plain: &Plain<'_>, dir: &Path, step: Step<'_>) -> anyhow::Result<OrderLoop> {
    let first_calls = record_first_calls(plain, dir, step)?;
    let orders = write_order_files(plain.app, &first_calls, dir, step)?;
    let relinked = relink(plain, &orders, dir, step)?;
    let (at_default, at_device) = compare(plain, &relinked, &orders, step)?;
    Ok(OrderLoop {
        linker: orders.linker,
        strategy: STRATEGY.name(),
        order_files: orders.files,
        functions_recorded: first_calls.functions,
        ordered: orders.ordered,
        ordered_bytes: orders.ordered_bytes,
        ordered_executable: relinked.executable.clone(),
        ordered_library: relinked.library.clone(),
        ordered_app: relinked,
        at_default,
        at_device,
    })
}

const STRATEGY: Strategy = Strategy::FirstCall;

/// The first calls of the instrumented start, in a profile of their own.
struct FirstCalls {
    profile: Profile,
    run: RunId,
    functions: usize,
}

/// Builds the app instrumented with coldstart's runtime and traces its
/// start, recording the functions it calls.
fn record_first_calls(plain: &Plain<'_>, dir: &Path, step: Step<'_>) -> anyhow::Result<FirstCalls> {
    let runtime = coldstart_record::functions::build_runtime(&dir.join("runtime"))?;
    step("building the app again instrumented (-finstrument-functions) to record its calls");
    let instrumented = build(
        plain.source_dir,
        &dir.join("build-instrumented"),
        &BuildOptions {
            extra_cflags: vec!["-finstrument-functions".into()],
            executable_ldflags: vec![runtime.static_lib.display().to_string()],
            // Which functions a start calls first, and in what order, is the
            // source's; at -O0 every generated function is still its own
            // symbol (they are noipa), and the build takes half the time.
            opt_level: "0".into(),
            ..plain.options.clone()
        },
        &mut |_| {},
    )
    .context("building the instrumented sample app")?;

    let functions_db = dir.join("functions.db");
    let _ = std::fs::remove_file(&functions_db);
    let mut profile = Profile::create_or_open(&functions_db)?;
    let mut launch = sample_launch(&instrumented.executable)?;
    let records = records_dir_for(&mut launch)?;
    let summary = trace(
        &mut profile,
        &cold_trace(launch, None),
        &AtomicBool::new(false),
        |_| {},
        |_| {},
    )
    .context("tracing the instrumented sample app")?;
    let recorded = record_functions(&mut profile, &summary, records.path())?;
    recorded.warnings.iter().for_each(|w| step(w));
    step(&format!(
        "recorded the first calls of {} functions",
        recorded.functions
    ));
    Ok(FirstCalls {
        profile,
        run: summary.run,
        functions: recorded.functions,
    })
}

/// The order files, one per binary in [library, executable] order.
struct OrderFiles {
    linker: Linker,
    /// Flags that select the linker.
    linker_flags: Vec<String>,
    files: Vec<PathBuf>,
    /// The flags that hand each file to the linker (gold's are two words).
    usage: Vec<Vec<String>>,
    /// The functions each binary's start called, for the simulator.
    called: Vec<Vec<CalledFunction>>,
    ordered: usize,
    ordered_bytes: u64,
}

fn write_order_files(
    plain: &BuiltApp,
    first_calls: &FirstCalls,
    dir: &Path,
    step: Step<'_>,
) -> anyhow::Result<OrderFiles> {
    let (linker, linker_flags) = linker();
    let mut orders = OrderFiles {
        linker,
        linker_flags,
        files: Vec::new(),
        usage: Vec::new(),
        called: Vec::new(),
        ordered: 0,
        ordered_bytes: 0,
    };
    for binary in [&plain.library, &plain.executable] {
        let name = binary.file_name().unwrap_or_default().to_string_lossy();
        let path = dir.join(format!("{name}.order"));
        let report = order_from_profile(
            &first_calls.profile,
            &ProfileOrder {
                binary,
                runs: &[first_calls.run],
                module: None,
                pages_only: false,
                strategy: STRATEGY,
                linker,
                objects: &[],
                ld: Path::new("ld"),
                output: &path,
            },
        )?;
        let index = symbols_of(binary)?;
        let module = module_glob(binary, None)?;
        orders.called.push(called_functions(
            &first_calls.profile,
            first_calls.run,
            &index,
            &module,
        )?);
        std::fs::write(&path, &report.text)
            .with_context(|| format!("writing {}", path.display()))?;
        orders.ordered += report.emitted.ordered;
        orders.ordered_bytes += report.emitted.ordered_bytes;
        orders.usage.push(
            report
                .emitted
                .usage
                .split_whitespace()
                .map(|word| word.replace("FILE", &report.output))
                .collect(),
        );
        orders.files.push(path);
    }
    step(&format!(
        "wrote {linker} order files placing {} functions ({} KiB) first",
        orders.ordered,
        orders.ordered_bytes / 1024
    ));
    Ok(orders)
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

/// Links the plain objects again with the order files (copied from the
/// plain build, not compiled again).
fn relink(
    plain: &Plain<'_>,
    orders: &OrderFiles,
    dir: &Path,
    step: Step<'_>,
) -> anyhow::Result<BuiltApp> {
    let mut extra_ldflags = plain.options.extra_ldflags.clone();
    extra_ldflags.extend(orders.linker_flags.iter().cloned());
    let relinked = build(
        plain.source_dir,
        &dir.join("build-ordered"),
        &BuildOptions {
            extra_ldflags,
            library_ldflags: orders.usage[0].clone(),
            executable_ldflags: orders.usage[1].clone(),
            // The same objects, linked again: none is compiled twice.
            reuse_from: Some(plain.app.build_dir.clone()),
            ..plain.options.clone()
        },
        &mut |_| {},
    )
    .context("relinking the sample app with its order files")?;
    step(&format!(
        "relinked it with the order files into {}",
        relinked.build_dir.display()
    ));
    Ok(relinked)
}

/// Traces the relinked app (and the plain one at the kernel's default),
/// and sets before against after at the kernel's default read_ahead_kb and
/// at the device's own; the caller's benches time their cold starts.
fn compare(
    plain: &Plain<'_>,
    relinked: &BuiltApp,
    orders: &OrderFiles,
    step: Step<'_>,
) -> anyhow::Result<(Comparison, Comparison)> {
    let default_kb = KERNEL_DEFAULT_READ_AHEAD_KB;
    step(&format!(
        "tracing the relinked app cold with readahead off and at the device's setting, and \
         both builds at read_ahead_kb {default_kb}"
    ));
    let mut measured = Profile::create_or_open(plain.profile)?;
    let interrupted = AtomicBool::new(false);
    let mut trace_app = |executable: &Path, read_ahead_kb: Option<u64>| -> anyhow::Result<RunId> {
        Ok(trace(
            &mut measured,
            &cold_trace(sample_launch(executable)?, read_ahead_kb),
            &interrupted,
            |_| {},
            |_| {},
        )
        .with_context(|| format!("tracing {}", executable.display()))?
        .run)
    };
    let after_device = trace_app(&relinked.executable, None)?;
    let after_demand = trace_app(&relinked.executable, Some(0))?;
    let before_default = trace_app(&plain.app.executable, Some(default_kb))?;
    let after_default = trace_app(&relinked.executable, Some(default_kb))?;
    let device_kb = measured
        .run(Some(plain.default_run))?
        .start
        .read_ahead_kb
        .unwrap_or_default();
    let predicted = |kb| predicted_bytes_read(&measured, plain, orders, kb);
    let at = |before: RunId, after: RunId, kb: u64| -> anyhow::Result<Comparison> {
        Ok(Comparison {
            before: startup_io(&measured, before, plain.demand_run, plain.app, kb)?,
            after: StartupIo {
                predicted_bytes_read: Some(predicted(kb)?),
                ..startup_io(&measured, after, after_demand, relinked, kb)?
            },
        })
    };
    let at_device = at(plain.default_run, after_device, device_kb)?;
    let at_default = at(before_default, after_default, default_kb)?;
    Ok((at_default, at_device))
}

/// What the simulator predicts the relinked binaries read at
/// `read_ahead_kb`, from the plain build's readahead-off trace and the
/// order files alone.
fn predicted_bytes_read(
    profile: &Profile,
    plain: &Plain<'_>,
    orders: &OrderFiles,
    read_ahead_kb: u64,
) -> anyhow::Result<u64> {
    let mut relayouts = Vec::new();
    // The order files follow [library, executable].
    let binaries = [&plain.app.library, &plain.app.executable];
    for ((binary, order), called) in binaries.into_iter().zip(&orders.files).zip(&orders.called) {
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
            run: Some(plain.demand_run),
            read_ahead_kb: Some(read_ahead_kb),
            relayouts,
            ..SimulateOptions::default()
        },
    )?;
    let paths = binaries.map(|b| b.display().to_string());
    Ok(report
        .files
        .iter()
        .filter(|f| paths.contains(&f.path))
        .map(|f| f.pages_read * report.page_size)
        .sum())
}

/// The two binaries' start-up I/O: executable-section pages read with
/// readahead off (exactly the pages touched), and what the start read at
/// `default_run`'s setting.
fn startup_io(
    profile: &Profile,
    default_run: RunId,
    demand_run: RunId,
    app: &BuiltApp,
    read_ahead_kb: u64,
) -> anyhow::Result<StartupIo> {
    let binaries = [&app.executable, &app.library];
    let text_pages_touched = text_pages_touched(profile, demand_run, &binaries)?;
    let (report, _) = coldstart_analyze::analyze(
        profile,
        &coldstart_analyze::Options {
            run: Some(default_run),
            ..Default::default()
        },
    )?;
    let (mut read_requests, mut bytes_read) = (0, 0);
    let ours = |file: &&coldstart_analyze::FileReport| {
        binaries
            .iter()
            .any(|b| b.to_str() == Some(file.path.as_str()))
    };
    for file in report.files.iter().filter(ours) {
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

/// Pages of the binaries' executable sections that `run` touched, by the
/// loaded run's one definition of touched (with readahead off, as the demo
/// traces it, every page read was demanded).
fn text_pages_touched(profile: &Profile, run: RunId, binaries: &[&PathBuf]) -> anyhow::Result<u64> {
    let loaded = LoadedRun::load(profile, Some(run))?;
    let page_size = loaded.page_size();
    let mut pages = 0;
    for binary in binaries {
        let Some(path) = binary.to_str() else {
            continue;
        };
        let mut touched = PageSet::default();
        for id in loaded.file_ids_at(path) {
            touched = touched.union(&loaded.touched_pages(id));
        }
        let text = PageSet::from_ranges(
            OffsetIndex::from_path(binary)?
                .sections()
                .iter()
                .filter(|s| s.executable)
                .map(|s| {
                    let first = s.offset / page_size;
                    (first, s.end().div_ceil(page_size) - first)
                })
                .collect(),
        );
        pages += text
            .extents()
            .iter()
            .map(|&(a, b)| touched.pages_overlapping(a * page_size, b * page_size, page_size))
            .sum::<u64>();
    }
    Ok(pages)
}
