//! The plan as text: one line per file, per extent and per lookup, so
//! plans read well and diff well. docs/plan-format.md describes it; `write`
//! and `parse` round-trip exactly.

use crate::model::{
    Extent, FORMAT_VERSION, Lookup, OLDEST_FORMAT_VERSION, Plan, PlanFile, PlanSource,
};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// A plan that cannot be read, with where and why.
#[derive(Debug, thiserror::Error)]
#[error("{}:{line}: {message}", path.display())]
pub struct FormatError {
    pub path: PathBuf,
    /// 1-based; 0 for the file as a whole.
    pub line: usize,
    pub message: String,
}

/// The plan as text.
pub fn write(plan: &Plan) -> String {
    let mut out = String::new();
    let s = &plan.source;
    let _ = writeln!(out, "coldstart-plan {FORMAT_VERSION}");
    let _ = writeln!(
        out,
        "# {} extents of {} files, {} bytes, in the order the start needs them{}",
        plan.extents.len(),
        plan.files.len(),
        plan.bytes(),
        match plan.lookups.len() {
            0 => String::new(),
            n => format!("; {n} lookups in need order"),
        }
    );
    let _ = writeln!(out, "page-size {}", plan.page_size);
    let _ = writeln!(
        out,
        "source profile={} runs={} min-runs={} merge-gap-pages={} max-extent-pages={} max-bytes={} pages-from={}",
        escape(&s.profile),
        if s.runs.is_empty() {
            "-".to_string()
        } else {
            s.runs
                .iter()
                .map(|r| r.to_string())
                .collect::<Vec<_>>()
                .join(",")
        },
        s.min_runs,
        s.merge_gap_pages,
        s.max_extent_pages,
        optional(s.max_bytes),
        escape(&s.pages_from),
    );
    for (i, f) in plan.files.iter().enumerate() {
        let _ = writeln!(
            out,
            "file {i} size={} mtime={} build-id={} {}",
            f.size,
            optional(f.mtime_ns),
            f.build_id
                .as_deref()
                .map(escape)
                .unwrap_or_else(|| "-".into()),
            escape(&f.path)
        );
    }
    for e in &plan.extents {
        let _ = writeln!(
            out,
            "extent {} {}+{} need={}",
            e.file,
            e.page,
            e.pages,
            milliseconds(e.need_ns)
        );
    }
    for l in &plan.lookups {
        let _ = writeln!(
            out,
            "lookup ino={} need={} {}",
            l.ino,
            milliseconds(l.need_ns),
            escape(&l.path)
        );
    }
    out
}

/// Writes `plan` to `path` whole or not at all: into a temporary file
/// beside it, flushed to the device, then renamed over `path`. A reader
/// (a `coldstart-run` starting now) sees the old plan or the new one,
/// never part of one, and an interrupted writer leaves the old one.
pub fn save(plan: &Plan, path: &Path) -> std::io::Result<()> {
    use std::io::Write as _;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "plan".to_string());
    let temporary = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let result = (|| {
        let mut file = std::fs::File::create(&temporary)?;
        file.write_all(write(plan).as_bytes())?;
        file.sync_all()?;
        std::fs::rename(&temporary, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&temporary);
    }
    result
}

/// Reads a plan written by `write` (or by hand); `origin` names it in
/// errors.
pub fn parse(text: &str, origin: &Path) -> Result<Plan, FormatError> {
    let error = |line: usize, message: String| FormatError {
        path: origin.to_path_buf(),
        line,
        message,
    };
    let mut lines = text
        .lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim_end_matches('\r')))
        .filter(|(_, l)| !l.trim().is_empty() && !l.trim_start().starts_with('#'));

    let Some((n, header)) = lines.next() else {
        return Err(error(0, "empty: not a coldstart plan".into()));
    };
    let version = parse_version(header).map_err(|m| error(n, m))?;

    let mut page_size = None;
    let mut source = None;
    let mut files: Vec<PlanFile> = Vec::new();
    let mut extents: Vec<Extent> = Vec::new();
    let mut lookups: Vec<Lookup> = Vec::new();
    for (n, line) in lines {
        let (keyword, rest) = line.split_once(' ').unwrap_or((line, ""));
        match keyword {
            "page-size" => {
                let size: u64 =
                    number(rest.trim()).map_err(|m| error(n, format!("page-size: {m}")))?;
                if !size.is_power_of_two() || size < 512 {
                    return Err(error(n, format!("page-size {size} is not a page size")));
                }
                page_size = Some(size);
            }
            "source" => source = Some(parse_source(rest).map_err(|m| error(n, m))?),
            "file" => {
                let file = parse_file(rest, files.len()).map_err(|m| error(n, m))?;
                files.push(file);
            }
            "extent" => {
                if page_size.is_none() {
                    return Err(error(n, "extent before page-size".into()));
                }
                let extent = parse_extent(rest).map_err(|m| error(n, m))?;
                let Some(file) = files.get(extent.file) else {
                    return Err(error(
                        n,
                        format!(
                            "extent of file {}, which is not declared above",
                            extent.file
                        ),
                    ));
                };
                let file_pages = file.size.div_ceil(page_size.unwrap_or(1));
                if extent.page + extent.pages > file_pages {
                    return Err(error(
                        n,
                        format!(
                            "extent {}+{} runs past the end of file {} ({} pages)",
                            extent.page, extent.pages, extent.file, file_pages
                        ),
                    ));
                }
                extents.push(extent);
            }
            "lookup" if version < 2 => {
                return Err(error(
                    n,
                    format!(
                        "a lookup line in a format {version} plan (lookups came with format 2)"
                    ),
                ));
            }
            "lookup" => lookups.push(parse_lookup(rest).map_err(|m| error(n, m))?),
            other => return Err(error(n, format!("unknown line `{other}`"))),
        }
    }
    Ok(Plan {
        page_size: page_size.ok_or_else(|| error(0, "no page-size line".into()))?,
        source: source.ok_or_else(|| error(0, "no source line".into()))?,
        files,
        extents,
        lookups,
    })
}

/// The version a `coldstart-plan N` header names, if this reader reads it.
fn parse_version(header: &str) -> Result<u32, String> {
    let version = header
        .strip_prefix("coldstart-plan ")
        .ok_or_else(|| {
            format!(
                "not a coldstart plan (the first line is not `coldstart-plan {FORMAT_VERSION}`)"
            )
        })?
        .trim();
    match version.parse::<u32>() {
        Ok(v) if (OLDEST_FORMAT_VERSION..=FORMAT_VERSION).contains(&v) => Ok(v),
        _ => Err(format!(
            "plan format {version} (this coldstart reads formats {OLDEST_FORMAT_VERSION} to {FORMAT_VERSION})"
        )),
    }
}

fn parse_source(rest: &str) -> Result<PlanSource, String> {
    let mut source = PlanSource {
        profile: String::new(),
        runs: Vec::new(),
        min_runs: 0,
        merge_gap_pages: 0,
        max_extent_pages: 0,
        max_bytes: None,
        pages_from: String::new(),
    };
    let mut seen = Vec::new();
    for field in rest.split_whitespace() {
        let (key, value) = field
            .split_once('=')
            .ok_or_else(|| format!("source: `{field}` is not key=value"))?;
        let bad = |m: String| format!("source {key}: {m}");
        match key {
            "profile" => source.profile = unescape(value).map_err(bad)?,
            "runs" if value == "-" => {}
            "runs" => {
                source.runs = value
                    .split(',')
                    .map(|r| {
                        r.parse::<i64>()
                            .map_err(|_| bad(format!("`{r}` is not a run id")))
                    })
                    .collect::<Result<_, _>>()?
            }
            "min-runs" => source.min_runs = number(value).map_err(bad)?,
            "merge-gap-pages" => source.merge_gap_pages = number(value).map_err(bad)?,
            "max-extent-pages" => source.max_extent_pages = number(value).map_err(bad)?,
            "max-bytes" if value == "-" => {}
            "max-bytes" => source.max_bytes = Some(number(value).map_err(bad)?),
            "pages-from" => source.pages_from = unescape(value).map_err(bad)?,
            _ => return Err(format!("source: unknown field `{key}`")),
        }
        seen.push(key);
    }
    for required in [
        "profile",
        "runs",
        "min-runs",
        "merge-gap-pages",
        "max-extent-pages",
        "max-bytes",
        "pages-from",
    ] {
        if !seen.contains(&required) {
            return Err(format!("source: no {required}= field"));
        }
    }
    Ok(source)
}

fn parse_file(rest: &str, expected: usize) -> Result<PlanFile, String> {
    let mut fields = rest.splitn(5, ' ');
    let index: usize = number(fields.next().unwrap_or(""))?;
    if index != expected {
        return Err(format!(
            "file {index} where file {expected} was expected (files are numbered from 0 in order)"
        ));
    }
    let what = format!("file {index}");
    let mut field = |key: &str| keyed(fields.next(), key, &what);
    let size = number(field("size")?).map_err(|m| format!("file {index} size: {m}"))?;
    let mtime = field("mtime")?;
    let mtime_ns = if mtime == "-" {
        None
    } else {
        Some(number(mtime).map_err(|m| format!("file {index} mtime: {m}"))?)
    };
    let build_id = field("build-id")?;
    let build_id = if build_id == "-" {
        None
    } else {
        Some(unescape(build_id).map_err(|m| format!("file {index} build-id: {m}"))?)
    };
    let path = absolute_path(fields.next(), &what)?;
    Ok(PlanFile {
        path,
        size,
        mtime_ns,
        build_id,
    })
}

fn parse_extent(rest: &str) -> Result<Extent, String> {
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let [file, range, need] = fields[..] else {
        return Err(format!(
            "extent: expected `FILE PAGE+COUNT need=T`, found `{rest}`"
        ));
    };
    let file = number(file).map_err(|m| format!("extent file: {m}"))?;
    let (page, pages) = range
        .split_once('+')
        .ok_or_else(|| format!("extent: `{range}` is not PAGE+COUNT"))?;
    let page: u64 = number(page).map_err(|m| format!("extent page: {m}"))?;
    let pages: u64 = number(pages).map_err(|m| format!("extent count: {m}"))?;
    if pages == 0 {
        return Err("extent of 0 pages".into());
    }
    page.checked_add(pages)
        .ok_or_else(|| format!("extent {page}+{pages} overflows"))?;
    let need = need
        .strip_prefix("need=")
        .ok_or_else(|| format!("extent: expected need=T, found `{need}`"))?;
    Ok(Extent {
        file,
        page,
        pages,
        need_ns: parse_milliseconds(need)?,
    })
}

fn parse_lookup(rest: &str) -> Result<Lookup, String> {
    let mut fields = rest.splitn(3, ' ');
    let mut field = |key: &str| keyed(fields.next(), key, "lookup");
    let ino = number(field("ino")?).map_err(|m| format!("lookup ino: {m}"))?;
    let need_ns = parse_milliseconds(field("need")?)?;
    let path = absolute_path(fields.next(), "lookup")?;
    Ok(Lookup { path, ino, need_ns })
}

/// The value of a `key=value` field of the line describing `what`.
fn keyed<'a>(field: Option<&'a str>, key: &str, what: &str) -> Result<&'a str, String> {
    let f = field.unwrap_or("");
    f.strip_prefix(key)
        .and_then(|f| f.strip_prefix('='))
        .ok_or_else(|| format!("{what}: expected {key}=, found `{f}`"))
}

/// The escaped absolute path that ends the line describing `what`.
fn absolute_path(field: Option<&str>, what: &str) -> Result<String, String> {
    let path = field.unwrap_or("");
    if path.is_empty() {
        return Err(format!("{what}: no path"));
    }
    let path = unescape(path).map_err(|m| format!("{what} path: {m}"))?;
    if !path.starts_with('/') {
        return Err(format!("{what}: the path `{path}` is not absolute"));
    }
    Ok(path)
}

fn number<T: std::str::FromStr>(text: &str) -> Result<T, String> {
    text.parse()
        .map_err(|_| format!("`{text}` is not a number"))
}

fn optional<T: ToString>(value: Option<T>) -> String {
    value.map(|v| v.to_string()).unwrap_or_else(|| "-".into())
}

/// Nanoseconds as milliseconds with all nine digits kept: `12.503007ms`.
fn milliseconds(ns: i64) -> String {
    let sign = if ns < 0 { "-" } else { "" };
    let abs = ns.unsigned_abs();
    format!("{sign}{}.{:06}ms", abs / 1_000_000, abs % 1_000_000)
}

fn parse_milliseconds(text: &str) -> Result<i64, String> {
    let bad = || format!("`{text}` is not a time like 12.503007ms");
    let value = text.strip_suffix("ms").ok_or_else(bad)?;
    let (negative, value) = match value.strip_prefix('-') {
        Some(v) => (true, v),
        None => (false, value),
    };
    let (whole, fraction) = value.split_once('.').unwrap_or((value, ""));
    if whole.is_empty()
        || fraction.len() > 6
        || !whole.bytes().all(|b| b.is_ascii_digit())
        || !fraction.bytes().all(|b| b.is_ascii_digit())
    {
        return Err(bad());
    }
    let whole: i64 = whole.parse().map_err(|_| bad())?;
    let fraction: i64 = format!("{fraction:0<6}").parse().map_err(|_| bad())?;
    let ns = whole
        .checked_mul(1_000_000)
        .and_then(|w| w.checked_add(fraction))
        .ok_or_else(bad)?;
    Ok(if negative { -ns } else { ns })
}

/// `%`, whitespace, `=` and control characters as `%XX`, so every field is
/// one word.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c == '%' || c == '=' || c.is_whitespace() || c.is_control() {
            let mut buf = [0u8; 4];
            for b in c.encode_utf8(&mut buf).bytes() {
                let _ = write!(out, "%{b:02X}");
            }
        } else {
            out.push(c);
        }
    }
    out
}

fn unescape(text: &str) -> Result<String, String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = text
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| format!("bad escape at `{}`", &text[i..]))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| format!("`{text}` does not unescape to UTF-8"))
}
