//! From a profile to the layout room's traces: the startup traces of one
//! binary that analyze reads out of a profile (function records where the
//! runs have them, else touched pages), ordered and emitted for a linker,
//! with a report of where they came from and what could not be ordered.
//! `coldstart order`, `coldstart simulate` and the demo all go through here.

use crate::emit::{BfdTarget, EmitContext, EmitReport, Linker};
use crate::model::{Kind, Trace, TracedSymbol};
use crate::objects::ObjectIndex;
use crate::strategy::{OrderOptions, Strategy};
use crate::{BalancedOptions, Error, Result};
use coldstart_analyze::relayout::CalledFunction;
use coldstart_analyze::startup::{called_symbols, touched_symbols};
use coldstart_binary::{OffsetIndex, SymbolKind};
use coldstart_profile::{Profile, RunId};
use serde::Serialize;
use std::path::{Path, PathBuf};

/// Where the traces came from, for the report.
#[derive(Debug, Clone, Serialize)]
pub struct Source {
    /// "functions" or "pages".
    pub kind: &'static str,
    pub runs: Vec<RunId>,
    /// One per process (functions) or per run (pages).
    pub traces: usize,
    /// Traced names the binary does not have (inlined away in the plain
    /// build, or from another module).
    pub not_in_binary: u64,
    /// Pages touched in the page-level traces read.
    pub pages_touched: u64,
    /// With function traces: page-level traces of the binary itself that
    /// gave the data symbols startup touched.
    pub data_traces: usize,
}

impl Source {
    pub fn is_pages(&self) -> bool {
        self.kind == "pages"
    }
}

/// What to order: one binary from a profile's runs, for one linker.
#[derive(Debug, Clone)]
pub struct ProfileOrder<'a> {
    pub binary: &'a Path,
    /// Runs to take traces from; empty: every complete run.
    pub runs: &'a [RunId],
    /// Which traced files are this binary (a glob); None: those with its
    /// file name.
    pub module: Option<&'a str>,
    /// Order from page-level traces even where function records exist.
    pub pages_only: bool,
    pub strategy: Strategy,
    pub linker: Linker,
    /// The link's object files, to check the order against.
    pub objects: &'a [PathBuf],
    /// GNU ld to probe (--linker bfd).
    pub ld: &'a Path,
    /// Where the order file goes, for the report's usage line.
    pub output: &'a Path,
}

/// The order of one binary: what `coldstart order` prints and --json
/// writes, and the order file's text.
#[derive(Debug, Clone, Serialize)]
pub struct OrderReport {
    pub binary: String,
    pub output: String,
    pub source: Source,
    pub strategy: &'static str,
    pub emitted: EmitReport,
    pub warnings: Vec<String>,
    /// The order file itself.
    #[serde(skip)]
    pub text: String,
}

/// Orders `request.binary` from the startup traces `profile` holds of it.
pub fn order_from_profile(profile: &Profile, request: &ProfileOrder<'_>) -> Result<OrderReport> {
    let index = symbols_of(request.binary)?;
    let runs = select_runs(profile, request.runs)?;
    let module = module_glob(request.binary, request.module)?;
    let (traces, source) = traces(
        profile,
        &runs,
        request.binary,
        &index,
        &module,
        request.pages_only,
    )?;
    if traces.iter().all(|t| t.symbols.is_empty()) {
        return Err(Error::NothingTraced {
            runs,
            profile: profile.path().to_path_buf(),
            binary: request.binary.to_path_buf(),
        });
    }
    let order = crate::order(
        &traces,
        &OrderOptions {
            strategy: request.strategy,
            balanced: BalancedOptions::default(),
        },
    )?;
    let objects = if request.objects.is_empty() {
        None
    } else {
        Some(ObjectIndex::from_paths(request.objects)?)
    };
    let bfd = if request.linker == Linker::Bfd {
        Some(BfdTarget::probe(request.ld, bfd_mode(request.binary)?)?)
    } else {
        None
    };
    let emitted = crate::emit(
        &order,
        request.linker,
        &EmitContext {
            binary: Some(&index),
            objects: objects.as_ref(),
            bfd: bfd.as_ref(),
        },
    )?;
    let mut warnings = order.warnings.clone();
    if index.symbol_source() != coldstart_binary::SymbolSource::Symtab {
        warnings.push(format!(
            "{} has no full symbol table (stripped): only its exported symbols have names, so \
             most of its code cannot be ordered; order a build with symbols",
            request.binary.display()
        ));
    }
    if source.is_pages() {
        warnings.push(format!(
            "ordered from page-level traces: every symbol on a touched page counts as used \
             ({} pages touched), so the order holds more than startup ran; a build instrumented \
             with `coldstart runtime` and traced with --functions gives the exact functions",
            source.pages_touched
        ));
    }
    Ok(OrderReport {
        binary: request.binary.display().to_string(),
        output: request.output.display().to_string(),
        source,
        strategy: request.strategy.name(),
        emitted: emitted.report,
        warnings,
        text: emitted.text,
    })
}

/// The symbols of `binary`, with an error that names it.
pub fn symbols_of(binary: &Path) -> Result<OffsetIndex> {
    OffsetIndex::from_path(binary).map_err(|source| Error::Symbols {
        path: binary.to_path_buf(),
        source,
    })
}

/// `wanted` after checking each is in the profile, or every complete run.
pub fn select_runs(profile: &Profile, wanted: &[RunId]) -> Result<Vec<RunId>> {
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
        return Err(Error::NoCompleteRun {
            profile: profile.path().to_path_buf(),
        });
    }
    Ok(runs)
}

/// One trace per traced process from function records when the runs have
/// them for the module (unless `pages_only`), else one per run from its
/// pages.
pub fn traces(
    profile: &Profile,
    runs: &[RunId],
    binary: &Path,
    index: &OffsetIndex,
    module: &globset::GlobMatcher,
    pages_only: bool,
) -> Result<(Vec<Trace>, Source)> {
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
pub fn called_functions(
    profile: &Profile,
    run: RunId,
    index: &OffsetIndex,
    module: &globset::GlobMatcher,
) -> Result<Vec<CalledFunction>> {
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
pub fn module_glob(binary: &Path, glob: Option<&str>) -> Result<globset::GlobMatcher> {
    let pattern = match glob {
        Some(glob) => glob.to_string(),
        None => {
            let name = binary.file_name().ok_or_else(|| Error::NoFileName {
                path: binary.to_path_buf(),
            })?;
            format!("*/{}", globset::escape(&name.to_string_lossy()))
        }
    };
    Ok(globset::GlobBuilder::new(&pattern)
        .literal_separator(false)
        .build()
        .map_err(|source| Error::Glob {
            pattern: pattern.clone(),
            source,
        })?
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
fn bfd_mode(binary: &Path) -> Result<&'static [&'static str]> {
    let inspection =
        coldstart_binary::inspect_path(binary, &coldstart_binary::InspectOptions::default())?;
    Ok(match inspection.header.kind {
        coldstart_binary::Kind::SharedObject => &["-shared"],
        coldstart_binary::Kind::Pie => &["-pie"],
        _ => &[],
    })
}
