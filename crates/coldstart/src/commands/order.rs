//! `coldstart order`: turn a profile's startup traces of one binary into an
//! order file for a linker or BOLT, and say what could not be ordered.

use crate::args::OrderArgs;
use crate::output;
use anyhow::{Context, bail};
use coldstart_analyze::relayout::CalledFunction;
use coldstart_analyze::startup::{called_symbols, touched_symbols};
use coldstart_binary::{OffsetIndex, SymbolKind};
use coldstart_layout::{
    BalancedOptions, BfdTarget, EmitContext, Kind, Linker, ObjectIndex, OrderOptions, Trace,
    TracedSymbol,
};
use coldstart_profile::{Profile, RunId};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::ExitCode;

/// Where the traces came from, for the report.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Source {
    /// "functions" or "pages".
    kind: &'static str,
    runs: Vec<RunId>,
    /// One per process (functions) or per run (pages).
    traces: usize,
    /// Traced names the binary does not have (inlined away in the plain
    /// build, or from another module).
    not_in_binary: u64,
    /// Pages touched in the page-level traces read.
    pages_touched: u64,
    /// With function traces: page-level traces of the binary itself that
    /// gave the data symbols startup touched.
    data_traces: usize,
}

#[derive(Serialize)]
struct OrderReport<'a> {
    binary: String,
    output: String,
    source: Source,
    strategy: &'static str,
    emitted: &'a coldstart_layout::EmitReport,
    warnings: Vec<String>,
}

pub fn run(args: &OrderArgs) -> anyhow::Result<ExitCode> {
    if args.json && args.output.as_os_str() == "-" {
        bail!("--json prints the diagnostics to stdout; give the order file a path with -o");
    }
    let profile = Profile::open(&args.profile)?;
    let index = OffsetIndex::from_path(&args.binary)
        .with_context(|| format!("reading the symbols of {}", args.binary.display()))?;
    let runs = select_runs(&profile, &args.runs)?;
    let module = module_glob(&args.binary, args.module.as_deref())?;
    let (traces, source) = traces(&profile, &runs, &args.binary, &index, &module, args.pages)?;
    if traces.iter().all(|t| t.symbols.is_empty()) {
        bail!(
            "the runs {runs:?} of {} used no symbol of {}: was the binary traced (check \
             `coldstart report --file`), and is --module right?",
            args.profile.display(),
            args.binary.display()
        );
    }
    let order = coldstart_layout::order(
        &traces,
        &OrderOptions {
            strategy: args.strategy,
            balanced: BalancedOptions::default(),
        },
    )?;
    let objects = if args.objects.is_empty() {
        None
    } else {
        Some(ObjectIndex::from_paths(&args.objects)?)
    };
    let bfd = if args.linker == Linker::Bfd {
        Some(BfdTarget::probe(&args.ld, bfd_mode(&args.binary)?)?)
    } else {
        None
    };
    let emitted = coldstart_layout::emit(
        &order,
        args.linker,
        &EmitContext {
            binary: Some(&index),
            objects: objects.as_ref(),
            bfd: bfd.as_ref(),
        },
    )?;
    if args.output.as_os_str() == "-" {
        output::print_text(&emitted.text)?;
    } else {
        std::fs::write(&args.output, &emitted.text)
            .with_context(|| format!("writing {}", args.output.display()))?;
    }
    let mut warnings = order.warnings.clone();
    if index.symbol_source() != coldstart_binary::SymbolSource::Symtab {
        warnings.push(format!(
            "{} has no full symbol table (stripped): only its exported symbols have names, so \
             most of its code cannot be ordered; order a build with symbols",
            args.binary.display()
        ));
    }
    if source.kind == "pages" {
        warnings.push(format!(
            "ordered from page-level traces: every symbol on a touched page counts as used \
             ({} pages touched), so the order holds more than startup ran; a build instrumented \
             with `coldstart runtime` and traced with --functions gives the exact functions",
            source.pages_touched
        ));
    }
    let report = OrderReport {
        binary: args.binary.display().to_string(),
        output: args.output.display().to_string(),
        source,
        strategy: args.strategy.name(),
        emitted: &emitted.report,
        warnings,
    };
    if args.json {
        output::print_json(&report)?;
    } else {
        eprint!("{}", render(&report));
    }
    Ok(ExitCode::SUCCESS)
}

fn select_runs(profile: &Profile, wanted: &[i64]) -> anyhow::Result<Vec<RunId>> {
    if !wanted.is_empty() {
        for &id in wanted {
            profile.run(Some(id))?;
        }
        return Ok(wanted.to_vec());
    }
    let runs: Vec<RunId> = profile
        .runs()?
        .iter()
        .filter(|r| r.complete)
        .map(|r| r.id)
        .collect();
    if runs.is_empty() {
        bail!("{} holds no complete run", profile.path().display());
    }
    Ok(runs)
}

/// One trace per traced process from function records when the runs have
/// them for the module (unless --pages), else one per run from its pages.
pub(crate) fn traces(
    profile: &Profile,
    runs: &[RunId],
    binary: &Path,
    index: &OffsetIndex,
    module: &globset::GlobMatcher,
    pages_only: bool,
) -> anyhow::Result<(Vec<Trace>, Source)> {
    let mut source = Source {
        kind: "functions",
        runs: runs.to_vec(),
        traces: 0,
        not_in_binary: 0,
        pages_touched: 0,
        data_traces: 0,
    };
    let mut traces = Vec::new();
    if !pages_only {
        for &run in runs {
            let called = called_symbols(profile, run, index, module)?;
            source.not_in_binary += called.not_in_binary;
            traces.extend(called.processes.into_iter().map(|(_, symbols)| {
                Trace::new(
                    symbols
                        .into_iter()
                        .map(|s| TracedSymbol {
                            kind: kind_of(s.kind),
                            raw_name: s.raw_name,
                            first_seq: s.first_seq,
                            calls: Some(s.calls),
                            size: s.size,
                        })
                        .collect(),
                )
            }));
        }
    }
    // Function records name no data. Page traces of this very file (not of
    // an instrumented build, whose offsets differ) say which data startup
    // touched; without function records they give the functions too.
    let data_only = !traces.is_empty();
    if !data_only {
        source.kind = "pages";
        source.not_in_binary = 0;
    }
    let own_path = std::fs::canonicalize(binary).ok();
    for &run in runs {
        let paths: Vec<String> = profile
            .files(run)?
            .into_iter()
            .filter_map(|f| f.path)
            .filter(|p| {
                if data_only {
                    own_path.as_deref() == Some(Path::new(p))
                } else {
                    module.is_match(p)
                }
            })
            .collect();
        for path in paths {
            let touched = touched_symbols(profile, run, &path, index)?;
            source.pages_touched += touched.pages_touched;
            let symbols: Vec<TracedSymbol> = touched
                .symbols
                .into_iter()
                .filter(|s| !data_only || kind_of(s.kind) == Kind::Data)
                .map(|s| TracedSymbol {
                    raw_name: s.raw_name,
                    kind: kind_of(s.kind),
                    first_seq: s.first_rank,
                    calls: None,
                    size: s.size,
                })
                .collect();
            if !symbols.is_empty() {
                traces.push(Trace::new(symbols));
                if data_only {
                    source.data_traces += 1;
                }
            }
        }
    }
    source.traces = traces.len() - source.data_traces;
    Ok((traces, source))
}

/// The functions `run` recorded for `index`'s binary, placed in it, with
/// their first calls: what the simulator replays for a new layout.
pub(crate) fn called_functions(
    profile: &Profile,
    run: RunId,
    index: &OffsetIndex,
    module: &globset::GlobMatcher,
) -> anyhow::Result<Vec<CalledFunction>> {
    Ok(called_symbols(profile, run, index, module)?
        .processes
        .into_iter()
        .flat_map(|(_, symbols)| symbols)
        .map(|s| CalledFunction {
            offset: s.offset,
            size: s.size,
            t_ns: s.first_t_ns,
        })
        .collect())
}

/// Traced files with `binary`'s file name (an instrumented build of it
/// lives elsewhere), or those `glob` matches.
pub(crate) fn module_glob(
    binary: &Path,
    glob: Option<&str>,
) -> anyhow::Result<globset::GlobMatcher> {
    let pattern = match glob {
        Some(glob) => glob.to_string(),
        None => {
            let name = binary
                .file_name()
                .with_context(|| format!("{} names no file", binary.display()))?;
            format!("*/{}", globset::escape(&name.to_string_lossy()))
        }
    };
    Ok(globset::GlobBuilder::new(&pattern)
        .literal_separator(false)
        .build()
        .with_context(|| format!("{pattern:?} is not a valid glob"))?
        .compile_matcher())
}

fn kind_of(kind: SymbolKind) -> Kind {
    match kind {
        SymbolKind::Object => Kind::Data,
        SymbolKind::Function | SymbolKind::Other => Kind::Function,
    }
}

/// The ld options that choose the default script GNU ld would use for
/// this binary: a shared library, a PIE or a fixed-address executable.
fn bfd_mode(binary: &Path) -> anyhow::Result<&'static [&'static str]> {
    let inspection =
        coldstart_binary::inspect_path(binary, &coldstart_binary::InspectOptions::default())?;
    Ok(match inspection.header.kind {
        coldstart_binary::Kind::SharedObject => &["-shared"],
        coldstart_binary::Kind::Pie => &["-pie"],
        _ => &[],
    })
}

fn render(report: &OrderReport<'_>) -> String {
    use std::fmt::Write as _;
    let e = report.emitted;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "order for {} ({}, {} strategy, from {} {}-level traces of runs {:?})",
        report.binary,
        e.linker,
        report.strategy,
        report.source.traces,
        if report.source.kind == "pages" {
            "page"
        } else {
            "function"
        },
        report.source.runs,
    );
    if report.source.data_traces > 0 {
        let _ = writeln!(
            out,
            "  data symbols from {} page-level traces of the binary itself",
            report.source.data_traces
        );
    }
    let _ = writeln!(
        out,
        "  {} of {} symbols ordered: {} of startup's {} ({:.1}%)",
        e.ordered,
        e.symbols,
        coldstart_binary::human_bytes(e.ordered_bytes),
        coldstart_binary::human_bytes(e.traced_bytes),
        e.coverage() * 100.0
    );
    if report.source.not_in_binary > 0 {
        let _ = writeln!(
            out,
            "  {} traced functions are not in {} (inlined away in the plain build, or \
             instrumentation-only) and are left out",
            report.source.not_in_binary, report.binary
        );
    }
    let mut reasons: BTreeMap<String, (usize, Vec<&str>)> = BTreeMap::new();
    for unordered in &e.unordered {
        let entry = reasons.entry(unordered.reason.to_string()).or_default();
        entry.0 += 1;
        if entry.1.len() < 3 {
            entry.1.push(&unordered.raw_name);
        }
    }
    for (reason, (count, examples)) in &reasons {
        let _ = writeln!(
            out,
            "  not ordered ({count}): {reason} (e.g. {})",
            examples.join(", ")
        );
    }
    if !e.caveats.is_empty() {
        let _ = writeln!(
            out,
            "  {} symbols may not land where the order says (see --json for each)",
            e.caveats.len()
        );
    }
    for warning in e.warnings.iter().chain(&report.warnings) {
        let _ = writeln!(out, "  warning: {warning}");
    }
    let _ = writeln!(out, "  use it: {}", e.usage.replace("FILE", &report.output));
    out
}
