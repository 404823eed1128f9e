//! Function-level startup traces from compiler instrumentation. A small C
//! runtime (runtime/coldstart_functions.c, built by [`build_runtime`]) is
//! linked into a program compiled with `-finstrument-functions` (or clang's
//! `-finstrument-function-entry-bare`); each process then writes which
//! functions it called, first call first, as file offsets within the files
//! they sit in. This module reads those records, names the functions with
//! the symbols of their files, and turns the result into profile rows;
//! placing the names in an uninstrumented build of the same program is
//! analysis (`coldstart_analyze::plain`).
//! docs/functions-format.md describes the record.

use coldstart_binary::{OffsetIndex, SymbolKind};
use coldstart_profile::{Batch, FunctionEvent, NewFile};
use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::ffi::OsStr;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The runtime's C source, as built by [`build_runtime`].
pub const RUNTIME_SOURCE: &str = include_str!("../runtime/coldstart_functions.c");
/// The header declaring `coldstart_functions_dump()`.
pub const RUNTIME_HEADER: &str = include_str!("../runtime/coldstart_functions.h");
/// The newest record format this build reads (the runtime's FORMAT_VERSION).
pub const FORMAT_VERSION: u32 = 1;
/// The environment variable naming the directory the runtime writes to.
pub const DIR_ENV: &str = "COLDSTART_FUNCTIONS_DIR";

/// What can go wrong building the runtime or reading its records.
#[derive(Debug, thiserror::Error)]
pub enum FunctionsError {
    #[error("{}: {source}", .path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// A record that is not what the runtime writes.
    #[error("{}:{line}: {detail}", .path.display())]
    Format {
        path: PathBuf,
        line: usize,
        detail: String,
    },
    /// The runtime could not be built; the message says what to install.
    #[error("building the function-tracing runtime: {0}")]
    Build(String),
}

pub type Result<T, E = FunctionsError> = std::result::Result<T, E>;

fn io_error(path: &Path) -> impl FnOnce(io::Error) -> FunctionsError + '_ {
    move |source| FunctionsError::Io {
        path: path.to_path_buf(),
        source,
    }
}

// ---- Building the runtime ----

/// The runtime built for linking: the shared library to LD_PRELOAD (for
/// instrumented shared libraries loaded by a plain program), the static
/// archive to link into an instrumented executable, and the header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeFiles {
    /// `libcoldstart_functions.so`.
    pub shared: PathBuf,
    /// `libcoldstart_functions.a`.
    pub static_lib: PathBuf,
    /// `coldstart_functions.h`.
    pub header: PathBuf,
}

/// Writes the runtime's source into `out_dir` and builds it there with the
/// system C compiler (`$CC`, else `cc`) at -O2 -fPIC, and `$AR` (else `ar`)
/// for the archive. An executable linking the archive must export the hooks
/// (`-rdynamic`) when instrumented shared libraries should find them too.
pub fn build_runtime(out_dir: &Path) -> Result<RuntimeFiles> {
    let cc = std::env::var_os("CC").unwrap_or_else(|| "cc".into());
    let ar = std::env::var_os("AR").unwrap_or_else(|| "ar".into());
    build_with(out_dir, &cc, &ar)
}

fn build_with(out_dir: &Path, cc: &OsStr, ar: &OsStr) -> Result<RuntimeFiles> {
    std::fs::create_dir_all(out_dir).map_err(io_error(out_dir))?;
    let source = out_dir.join("coldstart_functions.c");
    let header = out_dir.join("coldstart_functions.h");
    let object = out_dir.join("coldstart_functions.o");
    let shared = out_dir.join("libcoldstart_functions.so");
    let static_lib = out_dir.join("libcoldstart_functions.a");
    std::fs::write(&source, RUNTIME_SOURCE).map_err(io_error(&source))?;
    std::fs::write(&header, RUNTIME_HEADER).map_err(io_error(&header))?;

    let install_cc = "install a C compiler (Debian/Ubuntu: apt-get install gcc) or point CC at one";
    let mut compile = Command::new(cc);
    compile
        .args(["-std=gnu11", "-O2", "-fPIC", "-pthread", "-c", "-I"])
        .arg(out_dir)
        .arg(&source)
        .arg("-o")
        .arg(&object);
    run_tool(&mut compile, install_cc)?;
    let mut link = Command::new(cc);
    link.args(["-shared", "-O2", "-fPIC", "-pthread", "-o"])
        .arg(&shared)
        .arg(&object);
    run_tool(&mut link, install_cc)?;
    // ar appends to an existing archive; start from nothing.
    match std::fs::remove_file(&static_lib) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => {
            return Err(io_error(&static_lib)(e));
        }
        _ => {}
    }
    let mut archive = Command::new(ar);
    archive.arg("rcs").arg(&static_lib).arg(&object);
    run_tool(
        &mut archive,
        "install binutils (Debian/Ubuntu: apt-get install binutils) or point AR at an archiver",
    )?;
    Ok(RuntimeFiles {
        shared,
        static_lib,
        header,
    })
}

/// Runs one build step; a missing tool says what to install, a failing one
/// shows its output.
fn run_tool(command: &mut Command, install: &str) -> Result<()> {
    let program = command.get_program().to_string_lossy().into_owned();
    let output = command.output().map_err(|e| {
        FunctionsError::Build(if e.kind() == io::ErrorKind::NotFound {
            format!("`{program}` was not found: {install}")
        } else {
            format!("cannot run `{program}`: {e}")
        })
    })?;
    if output.status.success() {
        return Ok(());
    }
    let args: Vec<String> = command
        .get_args()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    Err(FunctionsError::Build(format!(
        "`{program} {}` failed ({}): {}",
        args.join(" "),
        output.status,
        String::from_utf8_lossy(&output.stderr).trim()
    )))
}

// ---- Reading records ----

/// A file (or memory region) holding recorded functions, as
/// /proc/PID/maps named it when the process dumped its record.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Module {
    /// The path; `[anonymous]`, `[unmapped]` or a maps pseudo-name such as
    /// `[heap]` for code outside any file. A file deleted or replaced while
    /// the process ran ends in ` (deleted)`.
    pub path: PathBuf,
    /// st_dev as stat(2) gives it; 0 outside files.
    pub dev: u64,
    /// 0 outside files.
    pub ino: u64,
}

impl Module {
    /// True for a module backed by a file: offsets are file offsets.
    pub fn is_file(&self) -> bool {
        self.ino != 0
    }
}

/// One function as a process recorded it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordedFunction {
    /// Index into [`Dump::modules`].
    pub module: usize,
    /// File offset of the recorded address within the module (the address
    /// itself outside files). gcc's hook gets the function's start; clang's
    /// bare hook an address in its prologue.
    pub offset: u64,
    /// Rank of the first call among the process's first calls, from 1.
    pub first_seq: u64,
    /// CLOCK_MONOTONIC of the first call, ns.
    pub first_t_ns: i64,
    /// Entries counted until the dump.
    pub calls: u64,
}

/// One process's record, as one dump file holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dump {
    /// The file it was read from.
    pub path: PathBuf,
    pub version: u32,
    pub pid: i32,
    pub ppid: i32,
    /// CLOCK_MONOTONIC when the runtime started in this process (at its
    /// start, or at the fork for a forked child), ns.
    pub start_ns: i64,
    /// Functions the table could hold.
    pub capacity: u64,
    /// Calls not recorded because the table was full (each call of a
    /// function that found no room counts).
    pub dropped: u64,
    /// Calls that came while another thread was setting the runtime up.
    pub missed: u64,
    pub modules: Vec<Module>,
    /// In first-call order.
    pub functions: Vec<RecordedFunction>,
}

/// Reads one record.
pub fn read_dump(path: &Path) -> Result<Dump> {
    let text = std::fs::read(path).map_err(io_error(path))?;
    parse_dump(path, &text)
}

/// Reads every record of a directory the runtime wrote into (one
/// `functions.<pid>.tsv` per process), by pid. Records still being
/// written (`.tmp`) and other files are left alone.
pub fn read_dump_dir(dir: &Path) -> Result<Vec<Dump>> {
    let mut dumps = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io_error(dir))? {
        let entry = entry.map_err(io_error(dir))?;
        let name = entry.file_name();
        let is_record = name
            .to_str()
            .and_then(|n| n.strip_prefix("functions."))
            .and_then(|n| n.strip_suffix(".tsv"))
            .is_some_and(|pid| !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()));
        if is_record {
            dumps.push(read_dump(&entry.path())?);
        }
    }
    dumps.sort_by_key(|d| d.pid);
    Ok(dumps)
}

/// Parses one record; `path` labels errors.
pub fn parse_dump(path: &Path, text: &[u8]) -> Result<Dump> {
    let fail = |line: usize, detail: String| FunctionsError::Format {
        path: path.to_path_buf(),
        line,
        detail,
    };
    if text.is_empty() {
        return Err(fail(
            1,
            "empty: no header (the process may have died while writing its record)".into(),
        ));
    }
    // A whole record ends in a newline; what follows it is no line.
    let body = text.strip_suffix(b"\n").unwrap_or(text);
    let mut lines = body.split(|&b| b == b'\n').enumerate();
    let (_, header) = lines.next().unwrap_or_default();
    let mut dump = parse_header(header).map_err(|detail| fail(1, detail))?;
    dump.path = path.to_path_buf();

    let mut modules: HashMap<Module, usize> = HashMap::new();
    let mut seq_lines: HashMap<u64, usize> = HashMap::new();
    let mut end: Option<(usize, u64)> = None;
    let unterminated = !text.ends_with(b"\n");
    let last_line = body.split(|&b| b == b'\n').count();
    for (index, line) in lines {
        let number = index + 1;
        if unterminated && number == last_line && end.is_none() && !line.starts_with(b"end\t") {
            return Err(fail(
                number,
                format!(
                    "cut short in the middle of a line after {} functions (the process may have died while writing its record)",
                    dump.functions.len()
                ),
            ));
        }
        if let Some((end_line, _)) = end {
            return Err(fail(
                number,
                format!("text after the end line (line {end_line})"),
            ));
        }
        let fields: Vec<&[u8]> = line.split(|&b| b == b'\t').collect();
        match fields.as_slice() {
            [b"end", count] => {
                let count = number_field(count, "function count").map_err(|d| fail(number, d))?;
                if count != dump.functions.len() as u64 {
                    return Err(fail(
                        number,
                        format!(
                            "the end line counts {count} functions, the record holds {}",
                            dump.functions.len()
                        ),
                    ));
                }
                end = Some((number, count));
            }
            [module_path, dev, ino, offset, seq, t_ns, calls] => {
                let (module, mut recorded) =
                    parse_function([module_path, dev, ino, offset, seq, t_ns, calls])
                        .map_err(|d| fail(number, d))?;
                if let Some(earlier) = seq_lines.insert(recorded.first_seq, number) {
                    return Err(fail(
                        number,
                        format!(
                            "first call number {} again (line {earlier} has it)",
                            recorded.first_seq
                        ),
                    ));
                }
                let next = dump.modules.len();
                recorded.module = match modules.entry(module) {
                    Entry::Occupied(e) => *e.get(),
                    Entry::Vacant(e) => {
                        dump.modules.push(e.key().clone());
                        e.insert(next);
                        next
                    }
                };
                dump.functions.push(recorded);
            }
            [b""] => {
                return Err(fail(number, "empty line before the end line".into()));
            }
            other => {
                return Err(fail(
                    number,
                    format!(
                        "{} tab-separated fields; a function line has 7 (module, dev, inode, offset, first call number, first call time, calls)",
                        other.len()
                    ),
                ));
            }
        }
    }
    if end.is_none() {
        return Err(fail(
            last_line,
            format!(
                "cut short: no end line after {} functions (the process may have died while writing its record)",
                dump.functions.len()
            ),
        ));
    }
    // The runtime writes in hash-table order.
    dump.functions.sort_unstable_by_key(|f| f.first_seq);
    Ok(dump)
}

/// A function line's seven fields; the module index is left to the caller.
fn parse_function(fields: [&[u8]; 7]) -> Result<(Module, RecordedFunction), String> {
    let [module_path, dev, ino, offset, seq, t_ns, calls] = fields;
    let module = Module {
        path: unescape_path(module_path)?,
        dev: number_field(dev, "device")?,
        ino: number_field(ino, "inode")?,
    };
    let first_seq = number_field(seq, "first call number")?;
    if first_seq == 0 {
        return Err("first call number 0 (they start at 1)".into());
    }
    let first_t_ns = i64::try_from(number_field(t_ns, "first call time")?)
        .map_err(|_| "first call time out of range".to_string())?;
    let recorded = RecordedFunction {
        module: 0,
        offset: hex_field(offset)?,
        first_seq,
        first_t_ns,
        calls: number_field(calls, "call count")?,
    };
    Ok((module, recorded))
}

/// `coldstart-functions VERSION key=value...`; unknown keys are skipped so
/// a version-1 reader keeps reading records that gain fields.
fn parse_header(line: &[u8]) -> Result<Dump, String> {
    let line = std::str::from_utf8(line).map_err(|_| "header is not text".to_string())?;
    let mut words = line.split(' ');
    if words.next() != Some("coldstart-functions") {
        return Err("not a coldstart function record (no `coldstart-functions` header)".into());
    }
    let version: u32 = words
        .next()
        .and_then(|v| v.parse().ok())
        .ok_or("header has no format version")?;
    if version == 0 || version > FORMAT_VERSION {
        return Err(format!(
            "format version {version}; this coldstart reads up to {FORMAT_VERSION} (upgrade coldstart)"
        ));
    }
    let fields: HashMap<&str, &str> = words.filter_map(|w| w.split_once('=')).collect();
    let get = |key: &str| -> Result<u64, String> {
        let value = fields
            .get(key)
            .ok_or_else(|| format!("header lacks {key}="))?;
        value
            .parse()
            .map_err(|_| format!("header {key}={value} is not a number"))
    };
    let narrow = |key: &str| -> Result<i32, String> {
        i32::try_from(get(key)?).map_err(|_| format!("header {key} out of range"))
    };
    Ok(Dump {
        path: PathBuf::new(),
        version,
        pid: narrow("pid")?,
        ppid: narrow("ppid")?,
        start_ns: i64::try_from(get("start_ns")?).map_err(|_| "header start_ns out of range")?,
        capacity: get("capacity")?,
        dropped: get("dropped")?,
        missed: get("missed")?,
        modules: Vec::new(),
        functions: Vec::new(),
    })
}

fn number_field(field: &[u8], what: &str) -> Result<u64, String> {
    std::str::from_utf8(field)
        .ok()
        .filter(|s| !s.starts_with('+'))
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| {
            format!(
                "{what} {:?} is not a number",
                String::from_utf8_lossy(field)
            )
        })
}

fn hex_field(field: &[u8]) -> Result<u64, String> {
    std::str::from_utf8(field)
        .ok()
        .and_then(|s| s.strip_prefix("0x"))
        .filter(|s| !s.starts_with('+'))
        .and_then(|s| u64::from_str_radix(s, 16).ok())
        .ok_or_else(|| {
            format!(
                "offset {:?} is not a 0x hexadecimal number",
                String::from_utf8_lossy(field)
            )
        })
}

/// Undoes the runtime's escapes of tab, newline and backslash.
fn unescape_path(field: &[u8]) -> Result<PathBuf, String> {
    if field.is_empty() {
        return Err("empty module path".into());
    }
    let mut bytes = Vec::with_capacity(field.len());
    let mut iter = field.iter();
    while let Some(&b) = iter.next() {
        if b != b'\\' {
            bytes.push(b);
            continue;
        }
        bytes.push(match iter.next() {
            Some(b't') => b'\t',
            Some(b'n') => b'\n',
            Some(b'\\') => b'\\',
            _ => return Err("module path has a stray backslash".into()),
        });
    }
    Ok(PathBuf::from(OsStr::from_bytes(&bytes)))
}

// ---- Naming functions ----

/// The symbol a recorded address falls in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FunctionSymbol {
    /// As in the symbol table (mangled).
    pub raw_name: String,
    /// Demangled.
    pub name: String,
    /// File offset of the symbol's first byte.
    pub offset: u64,
    pub size: u64,
}

/// A function a process called, named where its module's symbols allow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TracedFunction {
    pub pid: i32,
    /// Index into [`FunctionTrace::modules`].
    pub module: usize,
    /// The recorded file offset (see [`RecordedFunction::offset`]).
    pub recorded_offset: u64,
    pub symbol: Option<FunctionSymbol>,
    pub first_seq: u64,
    /// CLOCK_MONOTONIC, ns.
    pub first_t_ns: i64,
    pub calls: u64,
}

/// A module of a trace and how well its functions could be named.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TracedModule {
    pub module: Module,
    /// Why its symbols could not be read (not a file, gone or replaced
    /// since the run, not ELF); None when they were.
    pub unreadable: Option<String>,
    /// Recorded functions no symbol covers (none are when unreadable).
    pub unnamed: u64,
}

/// One process of a trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TracedProcess {
    pub pid: i32,
    pub ppid: i32,
    pub start_ns: i64,
    pub dropped: u64,
    pub missed: u64,
    pub dump: PathBuf,
}

/// Every process's functions, named, in one place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FunctionTrace {
    pub processes: Vec<TracedProcess>,
    pub modules: Vec<TracedModule>,
    /// By pid, then first call.
    pub functions: Vec<TracedFunction>,
}

impl FunctionTrace {
    /// Calls lost to a full table, over all processes.
    pub fn dropped(&self) -> u64 {
        self.processes.iter().map(|p| p.dropped).sum()
    }

    /// Index into [`modules`](Self::modules) of the module at `path`.
    pub fn module_by_path(&self, path: &Path) -> Option<usize> {
        self.modules.iter().position(|m| m.module.path == path)
    }
}

/// Names recorded functions with the symbols of their modules. Each module
/// is read once, from the path the record names, unless an index was given
/// for it.
#[derive(Debug, Default)]
pub struct Symbolizer {
    indexes: HashMap<(u64, u64), Result<OffsetIndex, String>>,
}

impl Symbolizer {
    pub fn new() -> Symbolizer {
        Symbolizer::default()
    }

    /// Uses `index` for the module with this device and inode, for a file
    /// whose recorded path cannot be read now.
    pub fn add_index(&mut self, dev: u64, ino: u64, index: OffsetIndex) {
        self.indexes.insert((dev, ino), Ok(index));
    }

    /// Names the functions of `dumps`. Two addresses of one process in the
    /// same symbol (a function entered at two instrumented points) become
    /// one function: the earlier first call, the calls added up.
    pub fn symbolize(&mut self, dumps: &[Dump]) -> FunctionTrace {
        let mut trace = FunctionTrace {
            processes: Vec::new(),
            modules: Vec::new(),
            functions: Vec::new(),
        };
        let mut module_ids: HashMap<&Module, usize> = HashMap::new();
        for dump in dumps {
            trace.processes.push(TracedProcess {
                pid: dump.pid,
                ppid: dump.ppid,
                start_ns: dump.start_ns,
                dropped: dump.dropped,
                missed: dump.missed,
                dump: dump.path.clone(),
            });
            let ids: Vec<usize> = dump
                .modules
                .iter()
                .map(|module| {
                    *module_ids.entry(module).or_insert_with(|| {
                        trace.modules.push(TracedModule {
                            module: module.clone(),
                            unreadable: None,
                            unnamed: 0,
                        });
                        trace.modules.len() - 1
                    })
                })
                .collect();
            // (module, symbol offset) -> position in trace.functions
            let mut named: HashMap<(usize, u64), usize> = HashMap::new();
            for recorded in &dump.functions {
                let module_id = ids[recorded.module];
                let traced = &mut trace.modules[module_id];
                let symbol = match self.index_of(&traced.module) {
                    Ok(index) => {
                        let symbol = function_at(index, recorded.offset);
                        traced.unnamed += u64::from(symbol.is_none());
                        symbol
                    }
                    Err(why) => {
                        traced.unreadable = Some(why.clone());
                        None
                    }
                };
                if let Some(s) = &symbol
                    && let Some(&earlier) = named.get(&(module_id, s.offset))
                {
                    // Sorted by first call, so the one seen first stays first.
                    trace.functions[earlier].calls += recorded.calls;
                    continue;
                }
                if let Some(s) = &symbol {
                    named.insert((module_id, s.offset), trace.functions.len());
                }
                trace.functions.push(TracedFunction {
                    pid: dump.pid,
                    module: module_id,
                    recorded_offset: recorded.offset,
                    symbol,
                    first_seq: recorded.first_seq,
                    first_t_ns: recorded.first_t_ns,
                    calls: recorded.calls,
                });
            }
        }
        trace.functions.sort_by_key(|f| (f.pid, f.first_seq));
        trace
    }

    fn index_of(&mut self, module: &Module) -> &Result<OffsetIndex, String> {
        self.indexes
            .entry((module.dev, module.ino))
            .or_insert_with(|| load_index(module))
    }
}

/// Reads a module's symbols, if the file at its path is still the one the
/// process ran.
fn load_index(module: &Module) -> Result<OffsetIndex, String> {
    if !module.is_file() {
        return Err("not a file".into());
    }
    let meta = std::fs::metadata(&module.path).map_err(|e| format!("cannot read it: {e}"))?;
    if (meta.dev(), meta.ino()) != (module.dev, module.ino) {
        return Err(format!(
            "replaced since the run (device {} inode {} now, {} {} then)",
            meta.dev(),
            meta.ino(),
            module.dev,
            module.ino
        ));
    }
    OffsetIndex::from_path(&module.path).map_err(|e| e.to_string())
}

/// The code symbol holding `offset`. Data symbols are passed over: an
/// instrumented address is code, and a data symbol overlapping it would be
/// a mislabelled table in the text section.
fn function_at(index: &OffsetIndex, offset: u64) -> Option<FunctionSymbol> {
    index
        .symbols_in(offset, offset.saturating_add(1))
        .filter(|s| s.kind != SymbolKind::Object)
        .last()
        .map(|s| FunctionSymbol {
            raw_name: s.raw_name.clone(),
            name: s.name().to_string(),
            offset: s.offset,
            size: s.size,
        })
}

// ---- Profile rows ----

/// What [`FunctionTrace::profile_rows`] gives `Profile::write_functions`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProfileRows {
    pub files: Vec<NewFile>,
    pub functions: Vec<FunctionEvent>,
    /// Functions outside files (JIT code, unloaded modules): a profile row
    /// needs a file.
    pub left_out: u64,
}

impl FunctionTrace {
    /// The trace as profile rows, with times relative to
    /// `program_start_ns` (CLOCK_MONOTONIC when the program was started,
    /// the zero of every profile time). Named functions are stored at
    /// their symbol's offset, unnamed ones at the recorded offset.
    pub fn profile_rows(&self, program_start_ns: i64) -> ProfileRows {
        let mut rows = ProfileRows::default();
        let mut file_of_module: Vec<Option<i64>> = Vec::with_capacity(self.modules.len());
        for m in &self.modules {
            if m.module.is_file() {
                file_of_module.push(Some(Batch::batch_file_id(rows.files.len())));
                rows.files.push(new_file(&m.module));
            } else {
                file_of_module.push(None);
            }
        }
        for f in &self.functions {
            let Some(file_id) = file_of_module[f.module] else {
                rows.left_out += 1;
                continue;
            };
            rows.functions.push(FunctionEvent {
                pid: f.pid,
                first_seq: f.first_seq,
                file_id,
                offset: f.symbol.as_ref().map_or(f.recorded_offset, |s| s.offset),
                size: f.symbol.as_ref().map(|s| s.size),
                symbol: f.symbol.as_ref().map(|s| s.raw_name.clone()),
                first_t_ns: f.first_t_ns - program_start_ns,
                calls: f.calls,
            });
        }
        rows
    }
}

/// A module as a profile file row: what the record says, plus size and
/// mtime when the file is still the one that ran.
fn new_file(module: &Module) -> NewFile {
    let meta = std::fs::metadata(&module.path)
        .ok()
        .filter(|m| (m.dev(), m.ino()) == (module.dev, module.ino));
    let path = module.path.to_string_lossy();
    NewFile {
        dev: module.dev,
        ino: module.ino,
        path: (!path.ends_with(" (deleted)")).then(|| path.into_owned()),
        size: meta.as_ref().map(|m| m.len()),
        mtime_ns: meta.as_ref().map(coldstart_system::identity::mtime_ns),
        build_id: None,
        opened_by_tree: true,
        kind: None,
        opened_as: None,
        note: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: &str =
        "coldstart-functions 1 pid=42 ppid=1 start_ns=1000 capacity=393216 dropped=2 missed=0\n";

    fn parse(text: &str) -> Result<Dump> {
        parse_dump(Path::new("functions.42.tsv"), text.as_bytes())
    }

    fn error(text: &str) -> String {
        match parse(text) {
            Ok(dump) => panic!("parsed {dump:?}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn a_record_parses_in_first_call_order() {
        let text = format!(
            "{HEADER}/usr/lib/libx.so\t65024\t17\t0x1a40\t2\t1500\t7\n\
             /opt/a\\tb\\\\c\t65024\t18\t0x10\t1\t1200\t1\n\
             [anonymous]\t0\t0\t0x7f0000001000\t3\t1700\t1\n\
             /usr/lib/libx.so\t65024\t17\t0x2000\t4\t1800\t9\n\
             end\t4\n"
        );
        let dump = parse(&text).unwrap();
        assert_eq!((dump.pid, dump.ppid, dump.start_ns), (42, 1, 1000));
        assert_eq!((dump.capacity, dump.dropped, dump.missed), (393216, 2, 0));
        let seqs: Vec<u64> = dump.functions.iter().map(|f| f.first_seq).collect();
        assert_eq!(seqs, [1, 2, 3, 4]);
        let first = dump.functions[0];
        assert_eq!(dump.modules[first.module].path, Path::new("/opt/a\tb\\c"));
        assert_eq!(
            (first.offset, first.first_t_ns, first.calls),
            (0x10, 1200, 1)
        );
        assert_eq!(
            dump.functions[1].module, dump.functions[3].module,
            "one module"
        );
        assert_eq!(dump.modules.len(), 3);
        assert!(!dump.modules[dump.functions[2].module].is_file());
    }

    #[test]
    fn unknown_header_fields_are_skipped_and_newer_formats_refused() {
        let newer_field = HEADER.replace("missed=0", "missed=0 threads=3");
        assert!(parse(&format!("{newer_field}end\t0\n")).is_ok());
        let err = error("coldstart-functions 2 pid=1\nend\t0\n");
        assert!(
            err.contains("format version 2") && err.contains("upgrade"),
            "{err}"
        );
        let err = error(&format!("{}end\t0\n", HEADER.replace(" ppid=1", "")));
        assert!(err.contains(":1: header lacks ppid="), "{err}");
        assert!(error("pid\tcomm\n").contains("not a coldstart function record"));
    }

    #[test]
    fn cut_short_records_say_so() {
        assert!(error("").contains("empty"));
        let whole = format!("{HEADER}/a\t1\t2\t0x10\t1\t5\t1\nend\t1\n");
        for cut in [
            HEADER.len() - 3,
            HEADER.len(),
            HEADER.len() + 9,
            whole.len() - 4,
        ] {
            let err = error(&whole[..cut]);
            assert!(
                err.contains("cut short") || err.contains("header lacks"),
                "cut at {cut}: {err}"
            );
        }
        let err = error(&format!("{HEADER}/a\t1\t2\t0x10\t1\t5\t1\nend\t2\n"));
        assert!(err.contains(":3: the end line counts 2"), "{err}");
    }

    #[test]
    fn bad_lines_are_named_with_their_problem() {
        let cases = [
            ("/a\t1\t2\t10\t1\t5\t1", "not a 0x hexadecimal"),
            ("/a\t1\t2\t0x10\t0\t5\t1", "first call number 0"),
            ("/a\t1\tx\t0x10\t1\t5\t1", "inode \"x\" is not a number"),
            ("/a\t1\t2\t0x10\t1\t-5\t1", "first call time"),
            ("/a\\q\t1\t2\t0x10\t1\t5\t1", "stray backslash"),
            ("/a\t1\t2\t0x10\t1", "5 tab-separated fields"),
            ("", "empty line"),
        ];
        for (line, expected) in cases {
            let err = error(&format!("{HEADER}{line}\nend\t1\n"));
            assert!(
                err.contains(":2: ") && err.contains(expected),
                "{line:?}: {err}"
            );
        }
        let err = error(&format!(
            "{HEADER}/a\t1\t2\t0x10\t1\t5\t1\n/a\t1\t2\t0x20\t1\t6\t1\nend\t2\n"
        ));
        assert!(
            err.contains(":3: first call number 1 again (line 2"),
            "{err}"
        );
        let err = error(&format!("{HEADER}end\t0\n/a\t1\t2\t0x10\t1\t5\t1\n"));
        assert!(err.contains(":3: text after the end line"), "{err}");
    }

    #[test]
    fn a_missing_build_tool_says_what_to_install() {
        let dir = tempfile::tempdir().unwrap();
        let missing = OsStr::new("/nonexistent/coldstart-test-cc");
        let err = build_with(dir.path(), missing, OsStr::new("ar"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("was not found") && err.contains("apt-get install gcc"),
            "{err}"
        );
        if Command::new("cc").arg("--version").output().is_ok() {
            let err = build_with(dir.path(), OsStr::new("cc"), missing)
                .unwrap_err()
                .to_string();
            assert!(err.contains("apt-get install binutils"), "{err}");
        }
    }
}
