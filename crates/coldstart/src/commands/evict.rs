//! `coldstart evict`: drop files from the page cache and say what stayed
//! resident and who holds it; `--check` only measures residency (like
//! vmtouch); `--all` drops the whole cache.

use crate::args::EvictArgs;
use crate::output;
use anyhow::Context;
use coldstart_analyze as analyze;
use coldstart_profile::Profile;
use coldstart_report::table::{Style, Table, human_bytes, percent, thousands};
use coldstart_system::cache::{self, Eviction, MappingProcess, ResidencyMethod};
use serde::Serialize;
use std::fmt::Write as _;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Serialize)]
struct EvictReport {
    /// "evict", "check" or "all".
    mode: &'static str,
    page_size: u64,
    files: Vec<FileResult>,
    /// Files that could not be opened, measured or evicted.
    errors: Vec<FileError>,
    totals: Totals,
    /// --all: the kernel's "Cached" figure from /proc/meminfo, in bytes.
    cached_before: Option<u64>,
    cached_after: Option<u64>,
}

#[derive(Serialize)]
struct FileResult {
    path: String,
    size: u64,
    pages: u64,
    /// Resident pages before eviction (evict) or now (check).
    resident_before: u64,
    /// Resident pages after eviction; absent with --check.
    resident_after: Option<u64>,
    /// --check with cachestat: resident pages not yet written back.
    dirty: Option<u64>,
    /// Processes mapping the file, when pages stayed resident.
    mapped_by: Vec<MappingProcess>,
    /// --check --pages: resident pages as [first, last] inclusive ranges.
    resident_pages: Option<Vec<[u64; 2]>>,
    method: Option<ResidencyMethod>,
}

#[derive(Serialize)]
struct FileError {
    path: String,
    error: String,
}

#[derive(Serialize, Default)]
struct Totals {
    files: usize,
    pages: u64,
    resident_before: u64,
    resident_after: Option<u64>,
}

pub fn run(args: &EvictArgs) -> anyhow::Result<ExitCode> {
    if args.all {
        return drop_all(args);
    }
    let mut errors = Vec::new();
    let mut targets = Vec::new();
    for path in &args.paths {
        collect(path, &mut targets, &mut errors);
    }
    if let Some(profile_path) = &args.profile {
        let profile = Profile::open(profile_path)?;
        let files = analyze::files_used(&profile, args.run)
            .with_context(|| format!("cannot read the files of {}", profile_path.display()))?;
        targets.extend(files);
    }
    // The same file named twice (a path and its directory) is done once.
    let mut seen = std::collections::HashSet::new();
    targets.retain(|p| seen.insert(p.clone()));

    let bar = output::progress(
        targets.len() as u64,
        if args.check { "checking" } else { "evicting" },
    );
    let mut files = Vec::with_capacity(targets.len());
    for path in &targets {
        let result = if args.check {
            check(path, args.pages)
        } else {
            cache::evict(path).map(from_eviction)
        };
        match result {
            Ok(file) => files.push(file),
            Err(e) => errors.push(FileError {
                path: path.display().to_string(),
                error: e.to_string(),
            }),
        }
        bar.inc(1);
    }
    bar.finish_and_clear();

    let totals = Totals {
        files: files.len(),
        pages: files.iter().map(|f| f.pages).sum(),
        resident_before: files.iter().map(|f| f.resident_before).sum(),
        resident_after: (!args.check).then(|| files.iter().filter_map(|f| f.resident_after).sum()),
    };
    let report = EvictReport {
        mode: if args.check { "check" } else { "evict" },
        page_size: cache::page_size(),
        files,
        errors,
        totals,
        cached_before: None,
        cached_after: None,
    };
    if args.json {
        output::print_json(&report)?;
    } else {
        output::print_text(&render(&report))?;
    }
    for error in &report.errors {
        eprintln!("coldstart: error: {}", error.error);
    }
    Ok(if report.errors.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Regular files under `path` (itself, if it is one). Symbolic links to
/// files are followed; links to directories are not, so a walk cannot loop.
fn collect(path: &Path, out: &mut Vec<PathBuf>, errors: &mut Vec<FileError>) {
    let meta = match std::fs::metadata(path) {
        Ok(meta) => meta,
        Err(e) => {
            errors.push(FileError {
                path: path.display().to_string(),
                error: format!("{}: {e}", path.display()),
            });
            return;
        }
    };
    if !meta.is_dir() {
        out.push(path.to_path_buf());
        return;
    }
    let entries = match std::fs::read_dir(path) {
        Ok(entries) => entries,
        Err(e) => {
            errors.push(FileError {
                path: path.display().to_string(),
                error: format!("cannot list {}: {e}", path.display()),
            });
            return;
        }
    };
    let mut children: Vec<_> = entries.flatten().collect();
    children.sort_by_key(|e| e.file_name());
    for entry in children {
        let child = entry.path();
        match entry.file_type() {
            Ok(t) if t.is_dir() => collect(&child, out, errors),
            Ok(t) if t.is_file() => out.push(child),
            Ok(t) if t.is_symlink() && child.metadata().is_ok_and(|m| m.is_file()) => {
                out.push(child)
            }
            // Sockets, fifos and devices have no page cache to speak of.
            _ => {}
        }
    }
}

fn from_eviction(e: Eviction) -> FileResult {
    FileResult {
        path: e.path.display().to_string(),
        size: e.size,
        pages: e.pages,
        resident_before: e.resident_before,
        resident_after: Some(e.resident_after),
        dirty: None,
        mapped_by: e.mapped_by,
        resident_pages: None,
        method: None,
    }
}

fn check(path: &Path, pages: bool) -> Result<FileResult, cache::CacheError> {
    let residency = cache::residency(path)?;
    let resident_pages = if pages {
        let resident = cache::resident_pages(path)?;
        Some(resident.runs.iter().map(inclusive).collect())
    } else {
        None
    };
    Ok(FileResult {
        path: path.display().to_string(),
        size: std::fs::metadata(path).map(|m| m.len()).unwrap_or(0),
        pages: residency.pages,
        resident_before: residency.resident,
        resident_after: None,
        dirty: residency.dirty,
        mapped_by: Vec::new(),
        resident_pages,
        method: Some(residency.method),
    })
}

fn inclusive(run: &Range<u64>) -> [u64; 2] {
    [run.start, run.end - 1]
}

fn drop_all(args: &EvictArgs) -> anyhow::Result<ExitCode> {
    let before = meminfo_cached();
    cache::drop_all()?;
    let after = meminfo_cached();
    let report = EvictReport {
        mode: "all",
        page_size: cache::page_size(),
        files: Vec::new(),
        errors: Vec::new(),
        totals: Totals::default(),
        cached_before: before,
        cached_after: after,
    };
    if args.json {
        output::print_json(&report)?;
    } else {
        let mut text = String::from("dropped the page cache, dentries and inodes");
        if let (Some(b), Some(a)) = (before, after) {
            let _ = write!(
                text,
                ": cached {} before, {} after (what stays is mapped, dirty, shmem or tmpfs)",
                human_bytes(b),
                human_bytes(a)
            );
        }
        text.push('\n');
        output::print_text(&text)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// "Cached:" from /proc/meminfo, in bytes.
fn meminfo_cached() -> Option<u64> {
    coldstart_system::proc::meminfo_bytes("Cached")
}

fn render(report: &EvictReport) -> String {
    let mut out = String::new();
    let check = report.mode == "check";
    let mut table = if check {
        Table::new(&[">size", ">resident", ">of pages", ">%", "file"])
    } else {
        Table::new(&[">size", ">before", ">after", "file"])
    };
    for f in &report.files {
        let row = if check {
            vec![
                human_bytes(f.size),
                thousands(f.resident_before),
                thousands(f.pages),
                fraction(f.resident_before, f.pages),
                f.path.clone(),
            ]
        } else {
            vec![
                human_bytes(f.size),
                thousands(f.resident_before),
                thousands(f.resident_after.unwrap_or(0)),
                f.path.clone(),
            ]
        };
        table.row(row);
        if let Some(runs) = &f.resident_pages {
            for chunk in runs.chunks(8) {
                let list: Vec<String> = chunk
                    .iter()
                    .map(|[a, b]| {
                        if a == b {
                            a.to_string()
                        } else {
                            format!("{a}-{b}")
                        }
                    })
                    .collect();
                let blanks = vec![String::new(); 4];
                table.row([blanks, vec![format!("  pages {}", list.join(" "))]].concat());
            }
        }
    }
    if !table.is_empty() {
        out.push_str(&table.render(Style::Plain, ""));
    }
    let t = &report.totals;
    let page = report.page_size;
    if check {
        let _ = writeln!(
            out,
            "{} files: {} of {} resident ({})",
            thousands(t.files as u64),
            human_bytes(t.resident_before * page),
            human_bytes(t.pages * page),
            fraction(t.resident_before, t.pages),
        );
    } else {
        let after = t.resident_after.unwrap_or(0);
        let _ = writeln!(
            out,
            "{} files evicted: {} resident before, {} after",
            thousands(t.files as u64),
            human_bytes(t.resident_before * page),
            human_bytes(after * page),
        );
        for f in report
            .files
            .iter()
            .filter(|f| f.resident_after.unwrap_or(0) > 0)
        {
            let holders = if f.mapped_by.is_empty() {
                "no process maps it now (pages may be locked, dirty again, or read back meanwhile)"
                    .to_string()
            } else {
                let names: Vec<String> = f
                    .mapped_by
                    .iter()
                    .map(|p| format!("{} ({})", p.comm, p.pid))
                    .collect();
                format!("mapped by {}", names.join(", "))
            };
            let _ = writeln!(
                out,
                "  {}: {} pages stay resident: {holders}",
                f.path,
                thousands(f.resident_after.unwrap_or(0)),
            );
        }
    }
    out
}

fn fraction(part: u64, whole: u64) -> String {
    if whole == 0 {
        "-".to_string()
    } else {
        percent(part as f64 / whole as f64)
    }
}
