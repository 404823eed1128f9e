//! Orders that split functions: from a block-level startup trace (`coldstart
//! trace --blocks`), the blocks each function ran during the start go into
//! one cluster that clang places in the function's own section, and the
//! rest of the function goes to a `.cold` part elsewhere; the linker then
//! places the functions' startup clusters together, in first-run order.
//!
//! Two files come out: clang's basic-block cluster file (version 1, for
//! `-fbasic-block-sections=list=FILE`) and the symbol order lld takes
//! (`--symbol-ordering-file`). Block ids are those of the traced build's
//! `.llvm_bb_addr_map`; they hold for a build of the same sources with the
//! same compiler and flags, which is what the cluster file is for.

use coldstart_binary::block_map::BlockMap;
use coldstart_binary::{OffsetIndex, SymbolKind};
use serde::Serialize;
use std::collections::HashMap;
use std::fmt::Write as _;

/// One block's first run in a traced start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RanBlock {
    /// Link-time address of the function's entry.
    pub function: u64,
    pub bb_id: u32,
    pub size: u64,
    /// When it first ran, ns after the program was started.
    pub first_t_ns: i64,
    /// The process, and the block's rank among its first runs: they order
    /// blocks that ran at the same time.
    pub pid: i32,
    pub seq: u64,
}

/// A function whose startup blocks get a cluster of their own.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SplitFunction {
    /// The name the cluster file and the order give; `aliases` are the
    /// other symbols at its address.
    pub name: String,
    pub aliases: Vec<String>,
    pub address: u64,
    /// Block ids in the order the cluster lists them: the entry block,
    /// then the others in first-run order.
    pub blocks: Vec<u32>,
    /// Bytes of the blocks that ran, and of the whole function.
    pub startup_bytes: u64,
    pub function_bytes: u64,
    /// Blocks of the function in the map.
    pub function_blocks: usize,
    /// The cluster's blocks where they are now, in cluster order: what the
    /// simulator places for the split layout.
    #[serde(skip)]
    pub placed: Vec<PlacedBlock>,
    /// Placed whole by the symbol order, not split: the cluster file cannot
    /// name it (see [`Unsplit`]). `placed` then holds all its blocks.
    pub whole: bool,
}

/// A block of a cluster in the traced build.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlacedBlock {
    pub bb_id: u32,
    /// Link-time address now.
    pub address: u64,
    /// File offset and bytes now.
    pub offset: u64,
    pub size: u64,
    /// Its first run, ns after the program started; None for an entry
    /// block listed first without having run.
    pub first_t_ns: Option<i64>,
}

/// A function the start ran that the files cannot split, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Unsplit {
    pub address: u64,
    pub name: Option<String>,
    pub startup_bytes: u64,
    pub reason: String,
}

/// What a block trace gives for one binary.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SplitOrder {
    /// In the order of their first run.
    pub functions: Vec<SplitFunction>,
    pub unsplit: Vec<Unsplit>,
    /// Distinct blocks the trace ran in this binary.
    pub blocks_ran: usize,
    /// The data symbols the start used, to place after the code in the
    /// symbol order: first those its code referenced, in the order of
    /// first reference, then those on data pages page traces saw touched.
    pub data: Vec<StartupData>,
}

/// A data symbol a start used.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StartupData {
    pub name: String,
    pub size: u64,
    /// `code`: an instruction of a block that ran addresses it
    /// (RIP-relative); `pages`: it lies on a page a page trace saw touched.
    pub source: &'static str,
}

impl SplitOrder {
    /// Bytes of the startup clusters: what the start runs, placed together
    /// (and the functions placed whole, whole).
    pub fn startup_bytes(&self) -> u64 {
        self.functions
            .iter()
            .map(|f| {
                if f.whole {
                    f.function_bytes
                } else {
                    f.startup_bytes
                }
            })
            .sum()
    }

    /// The functions split, without those placed whole.
    pub fn split(&self) -> impl Iterator<Item = &SplitFunction> {
        self.functions.iter().filter(|f| !f.whole)
    }

    /// Bytes of the functions split: what a function-level order would
    /// place together.
    pub fn function_bytes(&self) -> u64 {
        self.functions.iter().map(|f| f.function_bytes).sum()
    }

    /// clang's cluster file (`-fbasic-block-sections=list=FILE`).
    pub fn cluster_file(&self) -> String {
        let mut out = String::from(
            "v1\n# Written by coldstart from a block trace: each function's startup blocks in one\n\
             # cluster, in first-run order; the blocks not listed go to its .cold part.\n",
        );
        for function in self.split() {
            out.push_str("f ");
            out.push_str(&function.name);
            for alias in &function.aliases {
                out.push(' ');
                out.push_str(alias);
            }
            out.push_str("\nc");
            for id in &function.blocks {
                let _ = write!(out, " {id}");
            }
            out.push('\n');
        }
        out
    }

    /// BOLT's profile of the start, in its format for samples without
    /// branch records (`no_lbr`): one sample in each block that ran, so
    /// that `llvm-bolt -split-functions` moves every other block of those
    /// functions to their cold parts.
    pub fn bolt_profile(&self) -> String {
        let mut out = String::from("no_lbr\n");
        for function in self.split() {
            for block in function.placed.iter().filter(|b| b.first_t_ns.is_some()) {
                let _ = writeln!(
                    out,
                    "1 {} {:x} 1",
                    function.name,
                    block.address - function.address
                );
            }
        }
        out
    }

    /// BOLT's `-function-order` file: the functions in first-run order
    /// (not those whose name several local functions share: BOLT tells
    /// them apart by suffixes of its own).
    pub fn function_order(&self) -> String {
        let mut out = String::new();
        for function in self.split() {
            out.push_str(&function.name);
            out.push('\n');
        }
        out
    }

    /// lld's `--symbol-ordering-file`: the functions, whose first cluster
    /// their own symbol names, in first-run order, then the data.
    pub fn symbol_order(&self) -> String {
        let mut out = String::new();
        let mut listed = std::collections::HashSet::new();
        for name in self
            .functions
            .iter()
            .map(|f| &f.name)
            .chain(self.data.iter().map(|d| &d.name))
        {
            // Functions placed whole that share a name are one line: lld
            // places every symbol of that name there.
            if listed.insert(name) {
                out.push_str(name);
                out.push('\n');
            }
        }
        out
    }
}

/// Splits the functions of `map`'s binary that `blocks` (one traced start,
/// or several pooled: the earliest first run of each block counts) ran.
pub fn split_order(blocks: &[RanBlock], map: &BlockMap) -> SplitOrder {
    let mut ran: Vec<&RanBlock> = blocks.iter().collect();
    ran.sort_by_key(|b| (b.first_t_ns, b.pid, b.seq));

    let by_address: HashMap<u64, usize> = map
        .functions
        .iter()
        .enumerate()
        .map(|(i, f)| (f.address, i))
        .collect();
    let mut named: HashMap<&str, usize> = HashMap::new();
    for function in &map.functions {
        if let Some(name) = function.names.first() {
            *named.entry(name.as_str()).or_insert(0) += 1;
        }
    }

    // Functions in first-run order, with their blocks in first-run order.
    let mut order: Vec<u64> = Vec::new();
    let mut ran_blocks: HashMap<u64, Vec<(u32, u64)>> = HashMap::new();
    let mut first_run: HashMap<(u64, u32), i64> = HashMap::new();
    for block in ran {
        let list = ran_blocks.entry(block.function).or_insert_with(|| {
            order.push(block.function);
            Vec::new()
        });
        if !list.iter().any(|&(id, _)| id == block.bb_id) {
            list.push((block.bb_id, block.size));
            first_run.insert((block.function, block.bb_id), block.first_t_ns);
        }
    }

    // A block where it is now, with its first run if it ran.
    let place = |function: u64, block: &coldstart_binary::block_map::Block| PlacedBlock {
        bb_id: block.id,
        address: block.address,
        offset: block.offset,
        size: block.size,
        first_t_ns: first_run.get(&(function, block.id)).copied(),
    };
    let mut functions = Vec::new();
    let mut unsplit = Vec::new();
    let mut whole_placed = std::collections::HashSet::new();
    let mut blocks_ran = 0;
    for address in order {
        let list = &ran_blocks[&address];
        blocks_ran += list.len();
        let startup_bytes: u64 = list.iter().map(|&(_, size)| size).sum();
        let refuse = |name: Option<&String>, reason: String| Unsplit {
            address,
            name: name.cloned(),
            startup_bytes,
            reason,
        };
        let Some(&index) = by_address.get(&address) else {
            unsplit.push(refuse(
                None,
                "no function of the binary's block map starts there: was another build traced?"
                    .into(),
            ));
            continue;
        };
        let function = &map.functions[index];
        let Some(name) = function.names.first() else {
            unsplit.push(refuse(
                None,
                "no symbol names it (a stripped binary?): the cluster file names functions".into(),
            ));
            continue;
        };
        let all: Vec<&coldstart_binary::block_map::Block> =
            function.ranges.iter().flat_map(|r| &r.blocks).collect();
        let same_name = named.get(name.as_str()).copied().unwrap_or(0);
        if same_name > 1 {
            unsplit.push(refuse(
                Some(name),
                format!(
                    "{same_name} functions of the binary have this name (local symbols of several \
                     sources), and the cluster file names functions by name only: placed whole, \
                     with the others of its name (lld orders every symbol of a name it is given)"
                ),
            ));
            if !whole_placed.insert(name.as_str()) {
                continue;
            }
            // In the order's place of the first of them to run, each
            // function of that name whole, in address order (the link's
            // input order, as lld breaks the tie).
            for other in map
                .functions
                .iter()
                .filter(|f| f.names.first() == Some(name))
            {
                let blocks: Vec<&coldstart_binary::block_map::Block> =
                    other.ranges.iter().flat_map(|r| &r.blocks).collect();
                let ran_here = ran_blocks.get(&other.address);
                functions.push(SplitFunction {
                    name: name.clone(),
                    aliases: Vec::new(),
                    address: other.address,
                    blocks: Vec::new(),
                    startup_bytes: ran_here.map_or(0, |l| l.iter().map(|&(_, size)| size).sum()),
                    function_bytes: blocks.iter().map(|b| b.size).sum(),
                    function_blocks: blocks.len(),
                    placed: blocks.iter().map(|b| place(other.address, b)).collect(),
                    whole: true,
                });
            }
            continue;
        }
        let entry = all.first().map(|b| b.id).unwrap_or(0);
        let mut ids = vec![entry];
        ids.extend(list.iter().map(|&(id, _)| id).filter(|&id| id != entry));
        let placed = ids
            .iter()
            .filter_map(|&id| Some(place(address, all.iter().find(|b| b.id == id)?)))
            .collect();
        functions.push(SplitFunction {
            name: name.clone(),
            aliases: function.names[1..].to_vec(),
            address,
            blocks: ids,
            startup_bytes,
            function_bytes: all.iter().map(|b| b.size).sum(),
            function_blocks: all.len(),
            placed,
            whole: false,
        });
    }
    SplitOrder {
        functions,
        unsplit,
        blocks_ran,
        data: Vec::new(),
    }
}

/// The address each GOT slot (any word the dynamic relocations fill) will
/// hold, where the file says: the addend of a relative relocation, or the
/// address of a symbol the file defines.
fn got_targets(data: &[u8]) -> HashMap<u64, u64> {
    use object::{Object, ObjectSymbol, ObjectSymbolTable, RelocationFlags, RelocationTarget};
    let mut targets = HashMap::new();
    let Ok(file) = object::File::parse(data) else {
        return targets;
    };
    let Some(relocations) = file.dynamic_relocations() else {
        return targets;
    };
    for (slot, relocation) in relocations {
        let RelocationFlags::Elf { r_type } = relocation.flags() else {
            continue;
        };
        let target = match (r_type, relocation.target()) {
            (object::elf::R_X86_64_RELATIVE, _) => Some(relocation.addend() as u64),
            (
                object::elf::R_X86_64_GLOB_DAT | object::elf::R_X86_64_64,
                RelocationTarget::Symbol(index),
            ) => file
                .dynamic_symbol_table()
                .and_then(|table| table.symbol_by_index(index).ok())
                .filter(|symbol| !symbol.is_undefined())
                .map(|symbol| symbol.address() + relocation.addend() as u64),
            _ => None,
        };
        if let Some(target) = target {
            targets.insert(slot, target);
        }
    }
    targets
}

/// The stretches of `map`'s file's code that no function of the map covers
/// (gaps of at least 16 bytes between functions: startup files' code,
/// functions built without block maps), as (file offset, bytes), within
/// the executable section holding the map's functions.
pub fn untraced_code(map: &BlockMap, index: &OffsetIndex) -> Vec<(u64, u64)> {
    const PADDING: u64 = 16;
    let mut covered: Vec<(u64, u64)> = map
        .functions
        .iter()
        .flat_map(|f| &f.ranges)
        .filter_map(|r| {
            let first = r.blocks.first()?;
            let last = r.blocks.last()?;
            Some((first.offset, last.offset + last.size))
        })
        .collect();
    covered.sort_unstable();
    let Some(&(first, _)) = covered.first() else {
        return Vec::new();
    };
    let Some(section) = index
        .sections()
        .iter()
        .find(|s| s.executable && s.offset <= first && first < s.end())
    else {
        return Vec::new();
    };
    let mut gaps = Vec::new();
    let mut at = section.offset;
    for (start, end) in covered {
        if start >= section.end() {
            break;
        }
        if start >= at + PADDING {
            gaps.push((at, start - at));
        }
        at = at.max(end);
    }
    if section.end() >= at + PADDING {
        gaps.push((at, section.end() - at));
    }
    gaps
}

/// The data symbols the blocks that ran address RIP-relative (loads,
/// stores and `lea`), in the order of the blocks' first runs: what the
/// start's code itself reaches. `data` is the binary's contents.
pub fn referenced_data(order: &SplitOrder, data: &[u8], index: &OffsetIndex) -> Vec<StartupData> {
    use iced_x86::{Decoder, DecoderOptions, Instruction};
    let mut blocks: Vec<&PlacedBlock> = order
        .functions
        .iter()
        .flat_map(|f| &f.placed)
        .filter(|b| b.first_t_ns.is_some())
        .collect();
    blocks.sort_by_key(|b| b.first_t_ns);
    // Address -> file offset through the sections with file bytes.
    let sections = index.sections();
    let offset_of = |address: u64| {
        sections
            .iter()
            .find(|s| s.alloc && s.address <= address && address < s.address + s.size)
            .map(|s| s.offset + (address - s.address))
    };
    let got = got_targets(data);
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::new();
    let mut instruction = Instruction::default();
    for block in blocks {
        let (Ok(start), Ok(size)) = (usize::try_from(block.offset), usize::try_from(block.size))
        else {
            continue;
        };
        let Some(bytes) = data.get(start..start.saturating_add(size)) else {
            continue;
        };
        let Some(section) = sections
            .iter()
            .find(|s| s.offset <= block.offset && block.offset < s.end())
        else {
            continue;
        };
        let address = section.address + (block.offset - section.offset);
        let mut decoder = Decoder::with_ip(64, bytes, address, DecoderOptions::NONE);
        while decoder.can_decode() {
            decoder.decode_out(&mut instruction);
            if !instruction.is_ip_rel_memory_operand() {
                continue;
            }
            // A GOT slot stands for the data it will point to.
            let address = instruction.ip_rel_memory_address();
            let address = got.get(&address).copied().unwrap_or(address);
            let Some(target) = offset_of(address) else {
                continue;
            };
            for symbol in index.symbols_in(target, target + 1) {
                if symbol.kind == SymbolKind::Object && seen.insert(symbol.offset) {
                    out.push(StartupData {
                        name: symbol.raw_name.clone(),
                        size: symbol.size,
                        source: "code",
                    });
                }
            }
        }
    }
    out
}

/// A split order made from a profile's block run, with what was traced.
#[derive(Debug, Clone, Serialize)]
pub struct SplitReport {
    /// The block runs whose blocks were pooled, as given (the newest when
    /// none was).
    pub block_runs: Vec<i64>,
    /// The traced file taken for the binary.
    pub traced_file: std::path::PathBuf,
    pub binary: std::path::PathBuf,
    #[serde(flatten)]
    pub order: SplitOrder,
    pub warnings: Vec<String>,
    /// The code no function of the block map covers ([`untraced_code`]).
    #[serde(skip)]
    pub untraced: Vec<(u64, u64)>,
    /// The binary's sections and symbols, as read for the order.
    #[serde(skip)]
    pub index: OffsetIndex,
}

impl SplitReport {
    /// The layout the split build gives the binary, for the simulator:
    /// the clusters packed in order, and the blocks that ran replayed at
    /// their new places at the time of their first runs. `path` names the
    /// binary as the replayed run traced it.
    pub fn relayout(&self, path: &str) -> coldstart_analyze::relayout::Relayout {
        use coldstart_analyze::relayout::{CalledFunction, Relayout};
        let functions = &self.order.functions;
        let clusters: Vec<Vec<(u64, u64)>> = functions
            .iter()
            .map(|f| f.placed.iter().map(|b| (b.offset, b.size)).collect())
            .collect();
        let ran = functions
            .iter()
            .flat_map(|f| &f.placed)
            .filter_map(|b| {
                Some(CalledFunction {
                    offset: b.offset,
                    size: b.size,
                    t_ns: b.first_t_ns?,
                })
            })
            .collect();
        Relayout::split(path, &self.index, &clusters, &self.untraced).with_functions(ran)
    }
}

/// The file of a block run's that is `binary`: the traced file with a block
/// map and the same build-id, else the same path, else the same file name.
fn traced_file_of<'a>(
    files: &'a [coldstart_profile::BlockFile],
    binary: &std::path::Path,
    build_id: Option<&str>,
    canonical: Option<&std::path::Path>,
) -> Option<&'a coldstart_profile::BlockFile> {
    let traced: Vec<&coldstart_profile::BlockFile> = files.iter().filter(|f| f.has_map).collect();
    traced
        .iter()
        .find(|f| build_id.is_some() && f.build_id.as_deref() == build_id)
        .or_else(|| traced.iter().find(|f| canonical == Some(f.path.as_path())))
        .or_else(|| {
            traced
                .iter()
                .find(|f| f.path.file_name() == binary.file_name())
        })
        .copied()
}

/// The split order of `binary` (the build that was traced, with its
/// `.llvm_bb_addr_map`) from block runs `runs` of `profile` (the newest
/// when empty). Several runs are pooled: a block is placed by the earliest
/// first run any of them saw, so code that only some starts run (another
/// path through the same start) is in the clusters too.
///
/// With `discover`, a binary without a block map has its blocks found by
/// disassembly, as `coldstart trace --blocks --discover` found them: for
/// BOLT's profile, not for clang's cluster file, whose block ids are the
/// compiler's.
pub fn split_from_profile(
    profile: &coldstart_profile::Profile,
    binary: &std::path::Path,
    runs: &[i64],
    page_runs: &[coldstart_profile::RunId],
    discover: bool,
) -> crate::Result<SplitReport> {
    let fail = |detail: String| crate::Error::Object {
        path: binary.to_path_buf(),
        detail,
    };
    let map = match coldstart_binary::block_map::read_block_map_path(binary)? {
        Some(map) => map,
        None if discover => coldstart_binary::block_map::discover_block_map_path(binary)?,
        None => {
            return Err(fail(
                "has no .llvm_bb_addr_map: build it with clang -fbasic-block-address-map and \
                 trace that build with `coldstart trace --blocks` (or, for BOLT, trace it with \
                 --discover and give --linker bolt)"
                    .to_string(),
            ));
        }
    };
    let block_runs = match runs {
        [] => vec![profile.block_run(None)?],
        runs => runs
            .iter()
            .map(|&run| profile.block_run(Some(run)))
            .collect::<Result<Vec<_>, _>>()?,
    };
    let build_id = std::fs::File::open(binary)
        .ok()
        .and_then(|file| coldstart_system::build_id::build_id_of_open(&file));
    let canonical = std::fs::canonicalize(binary).ok();
    let mut warnings = Vec::new();
    let mut ran: Vec<RanBlock> = Vec::new();
    let mut traced_file = None;
    for block_run in &block_runs {
        let files = profile.block_files(block_run.id)?;
        let chosen = traced_file_of(&files, binary, build_id.as_deref(), canonical.as_deref())
            .ok_or_else(|| {
                let names: Vec<String> = files
                    .iter()
                    .filter(|f| f.has_map)
                    .map(|f| f.path.display().to_string())
                    .collect();
                fail(format!(
                    "block run {} of {} traced no such file (it traced: {})",
                    block_run.id,
                    profile.path().display(),
                    if names.is_empty() {
                        "no file with a block map".to_string()
                    } else {
                        names.join(", ")
                    }
                ))
            })?;
        if let (Some(traced), Some(given)) = (&chosen.build_id, &build_id)
            && traced != given
        {
            warnings.push(format!(
                "{} (build-id {given}) is not the build block run {} traced ({}, build-id \
                 {traced}): block ids may not match",
                binary.display(),
                block_run.id,
                chosen.path.display()
            ));
        }
        if block_run.end_reason != coldstart_profile::BlockEndReason::Exited {
            warnings.push(format!(
                "block run {} ended by {}: the blocks of the start after that are missing",
                block_run.id,
                block_run.end_reason.as_str()
            ));
        }
        let before = ran.len();
        ran.extend(
            profile
                .blocks(block_run.id)?
                .iter()
                .filter(|b| b.file == chosen.file)
                .map(|b| RanBlock {
                    function: b.function,
                    bb_id: b.bb_id,
                    size: b.size,
                    first_t_ns: b.first_t_ns,
                    pid: b.pid,
                    seq: b.first_seq,
                }),
        );
        if ran.len() == before {
            warnings.push(format!(
                "block run {} ran no block of {}",
                block_run.id,
                chosen.path.display()
            ));
        }
        traced_file.get_or_insert_with(|| chosen.path.clone());
    }
    let mut order = split_order(&ran, &map);
    let file = coldstart_binary::MappedFile::open(binary)?;
    let index = OffsetIndex::from_path(binary).map_err(|source| crate::Error::Symbols {
        path: binary.to_path_buf(),
        source,
    })?;
    order.data = referenced_data(&order, file.bytes(), &index);
    // Data the code reaches through pointers shows only in page traces.
    let mut listed: std::collections::HashSet<String> =
        order.data.iter().map(|d| d.name.clone()).collect();
    let path = canonical.as_deref().unwrap_or(binary).to_string_lossy();
    for &page_run in page_runs {
        let touched =
            coldstart_analyze::startup::touched_symbols(profile, page_run, &path, &index)?;
        if touched.pages_touched == 0 {
            warnings.push(format!(
                "run {page_run} of {} touched no page of {path}",
                profile.path().display()
            ));
        }
        let mut symbols = touched.symbols;
        symbols.sort_by_key(|s| s.first_rank);
        for symbol in symbols {
            if symbol.kind == SymbolKind::Object && listed.insert(symbol.raw_name.clone()) {
                order.data.push(StartupData {
                    name: symbol.raw_name,
                    size: symbol.size,
                    source: "pages",
                });
            }
        }
    }
    Ok(SplitReport {
        block_runs: block_runs.iter().map(|run| run.id).collect(),
        traced_file: traced_file.unwrap_or_default(),
        binary: binary.to_path_buf(),
        order,
        warnings,
        untraced: untraced_code(&map, &index),
        index,
    })
}
