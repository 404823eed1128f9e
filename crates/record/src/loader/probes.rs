//! Where to put uprobes on the dynamic loader. ld.so is stripped: the
//! functions whose entries and returns mark its phases (_dl_map_object,
//! _dl_relocate_object, call_init, _dl_open...) are named only in its
//! detached debug file, found by the GNU build-id under
//! /usr/lib/debug/.build-id (Debian's libc6-dbg). The instructions that
//! call each initializer and jump to the program's entry are found by
//! decoding the functions that hold them, in ld.so's own bytes.
//!
//! Everything here is read before the page cache is dropped for a cold
//! trace, so none of it counts as the traced program's I/O.

use iced_x86::{Code, Decoder, DecoderOptions, Instruction, OpKind, Register};
use object::{Object, ObjectSection, ObjectSegment, ObjectSymbol};
use std::fmt;
use std::path::{Path, PathBuf};

/// Where x86-64 Debian puts the loader when a program does not say.
pub const DEFAULT_INTERPRETER: &str = "/lib64/ld-linux-x86-64.so.2";
/// The root under which detached debug files are named by build-id.
pub const DEBUG_ROOT: &str = "/usr/lib/debug/.build-id";

/// Most indirect call sites in call_init that get a probe of their own
/// (glibc 2.36 has two: DT_INIT and the DT_INIT_ARRAY loop).
pub const MAX_INIT_SITES: usize = 4;

/// One thing a probe marks. The names are the uprobe event names, so they
/// are static and a decoder can name them in errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Probe {
    /// `_dl_start_user`: rtld finished loading and relocating the initial
    /// set and is about to run initializers.
    RtldUser,
    /// The indirect jump in `_dl_start_user` to the program's entry.
    Entry,
    /// `_dl_map_object` entry: the name asked for (search and map).
    Load,
    LoadReturn,
    /// `_dl_map_object_from_fd` entry: the search chose this file.
    MapFile,
    /// The loader's own `open` (`__open64_nocancel`): one search attempt.
    Open,
    /// Just after one of its `syscall` instructions: the kernel's result,
    /// an fd or -errno (the function itself returns -1 and sets errno).
    OpenResult {
        site: u8,
    },
    /// `_dl_relocate_object` entry and return.
    Relocate,
    RelocateReturn,
    /// `_dl_lookup_symbol_x` entry: one symbol lookup.
    Lookup,
    /// `call_init` entry and return: one object's initializers.
    Init,
    InitReturn,
    /// An indirect call in `call_init`: one initializer starts. `array`
    /// says it calls through DT_INIT_ARRAY (a memory operand) rather than
    /// DT_INIT (a register).
    InitCall {
        site: u8,
        array: bool,
    },
    /// `_dl_open` entry and return (dlopen and friends).
    Dlopen,
    DlopenReturn,
}

const INIT_CALL_NAMES: [&str; MAX_INIT_SITES] =
    ["init_call_0", "init_call_1", "init_call_2", "init_call_3"];

/// Most `syscall` instructions in the loader's open that get a probe
/// (glibc 2.36 has two).
const MAX_OPEN_SITES: usize = 2;
const OPEN_RESULT_NAMES: [&str; MAX_OPEN_SITES] = ["open_result_0", "open_result_1"];

impl Probe {
    /// The uprobe event name.
    pub fn name(self) -> &'static str {
        match self {
            Probe::RtldUser => "rtld_user",
            Probe::Entry => "entry",
            Probe::Load => "load",
            Probe::LoadReturn => "load_ret",
            Probe::MapFile => "map_file",
            Probe::Open => "open",
            Probe::OpenResult { site } => OPEN_RESULT_NAMES[usize::from(site) % MAX_OPEN_SITES],
            Probe::Relocate => "relocate",
            Probe::RelocateReturn => "relocate_ret",
            Probe::Lookup => "lookup",
            Probe::Init => "init",
            Probe::InitReturn => "init_ret",
            Probe::InitCall { site, .. } => INIT_CALL_NAMES[usize::from(site) % MAX_INIT_SITES],
            Probe::Dlopen => "dlopen",
            Probe::DlopenReturn => "dlopen_ret",
        }
    }

    fn is_return(self) -> bool {
        matches!(
            self,
            Probe::LoadReturn | Probe::RelocateReturn | Probe::InitReturn | Probe::DlopenReturn
        )
    }

    /// Whether the hit enters a frame, so its stack pointer tells which
    /// open spans are gone. A point inside a function (the open's result)
    /// may share its entry's stack pointer.
    fn enters_frame(self) -> bool {
        !self.is_return() && !matches!(self, Probe::OpenResult { .. })
    }
}

/// One uprobe to define: what it marks, the file offset in ld.so, and
/// the fetch arguments (named `path`, `base`, `target`, `value`, which is
/// what the decoder reads).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbePoint {
    pub probe: Probe,
    pub offset: u64,
    pub fetch: String,
}

impl ProbePoint {
    /// The line for `uprobe_events` defining this probe in `group`.
    /// Entry probes also fetch the stack pointer, which tells a frame
    /// that ld.so left by longjmp (an error) from one still running.
    pub fn definition(&self, group: &str, ld_so: &Path) -> String {
        let kind = if self.probe.is_return() { 'r' } else { 'p' };
        let mut line = format!(
            "{kind}:{group}/{} {}:{:#x}",
            self.probe.name(),
            ld_so.display(),
            self.offset
        );
        if !self.fetch.is_empty() {
            line.push(' ');
            line.push_str(&self.fetch);
        }
        if self.probe.enters_frame() {
            line.push_str(" sp=%sp:x64");
        }
        line
    }
}

/// The probes for one ld.so, and what could not be probed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoaderProbes {
    /// The loader's real path (uprobes attach to its inode).
    pub ld_so: PathBuf,
    pub debug_file: PathBuf,
    pub points: Vec<ProbePoint>,
    /// Phases left out, each with the reason.
    pub missing: Vec<String>,
}

impl LoaderProbes {
    /// Whether every symbol lookup has a probe.
    pub fn counts_lookups(&self) -> bool {
        self.points.iter().any(|p| p.probe == Probe::Lookup)
    }

    /// One line for the profile: where the probes came from and what they
    /// cannot see.
    pub fn sight(&self) -> String {
        let mut text = format!(
            "ld.so probes on {} from {}",
            self.ld_so.display(),
            self.debug_file.display()
        );
        for missing in &self.missing {
            text.push_str("; ");
            text.push_str(missing);
        }
        text
    }
}

/// Why the loader's phases cannot be probed at all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NoProbes {
    /// The program has no interpreter (static) or is not ELF we can read.
    NoInterpreter {
        program: PathBuf,
        detail: String,
    },
    Unreadable {
        path: PathBuf,
        detail: String,
    },
    NoBuildId {
        ld_so: PathBuf,
    },
    NoDebugFile {
        ld_so: PathBuf,
        expected: PathBuf,
    },
    /// The debug file lacks the functions that bound the phases.
    NoSymbol {
        debug_file: PathBuf,
        symbol: &'static str,
    },
}

impl fmt::Display for NoProbes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NoProbes::NoInterpreter { program, detail } => write!(
                f,
                "{}: no dynamic loader to probe ({detail})",
                program.display()
            ),
            NoProbes::Unreadable { path, detail } => write!(f, "{}: {detail}", path.display()),
            NoProbes::NoBuildId { ld_so } => write!(
                f,
                "{}: no GNU build-id, so its debug file cannot be found",
                ld_so.display()
            ),
            NoProbes::NoDebugFile { ld_so, expected } => write!(
                f,
                "no debug file for {} (looked for {}); install the loader's debug symbols (Debian: apt-get install libc6-dbg)",
                ld_so.display(),
                expected.display()
            ),
            NoProbes::NoSymbol { debug_file, symbol } => write!(
                f,
                "{}: no symbol {symbol}, which bounds a loader phase",
                debug_file.display()
            ),
        }
    }
}

/// The loader `program` runs under: its PT_INTERP when it is an ELF file
/// with one; the system's default loader when it is a script (the
/// interpreter it names is itself dynamically linked). A static program has
/// no loader to probe.
pub fn interpreter_of(program: &Path) -> Result<PathBuf, NoProbes> {
    let data = std::fs::read(program).map_err(|e| NoProbes::Unreadable {
        path: program.to_path_buf(),
        detail: e.to_string(),
    })?;
    if data.starts_with(b"#!") {
        return Ok(PathBuf::from(DEFAULT_INTERPRETER));
    }
    let file = object::File::parse(&*data).map_err(|e| NoProbes::NoInterpreter {
        program: program.to_path_buf(),
        detail: format!("not an ELF file coldstart can read: {e}"),
    })?;
    let interp = file
        .section_by_name(".interp")
        .and_then(|s| s.data().ok())
        .or_else(|| interp_segment(&data));
    match interp {
        Some(bytes) => {
            let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
            let text = String::from_utf8_lossy(&bytes[..end]).into_owned();
            Ok(PathBuf::from(text))
        }
        None => Err(NoProbes::NoInterpreter {
            program: program.to_path_buf(),
            detail: "it is statically linked".to_string(),
        }),
    }
}

/// PT_INTERP's bytes, for files whose section headers were stripped.
fn interp_segment(data: &[u8]) -> Option<&[u8]> {
    use object::elf::{FileHeader64, PT_INTERP};
    use object::read::elf::{FileHeader, ProgramHeader};
    let header = FileHeader64::<object::Endianness>::parse(data).ok()?;
    let endian = header.endian().ok()?;
    let phdrs = header.program_headers(endian, data).ok()?;
    let interp = phdrs.iter().find(|p| p.p_type(endian) == PT_INTERP)?;
    interp.data(endian, data).ok()
}

/// The detached debug file's path for a build-id given as hex.
pub fn debug_file_for(build_id: &str) -> Option<PathBuf> {
    if build_id.len() < 3 || !build_id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    Some(Path::new(DEBUG_ROOT).join(format!("{}/{}.debug", &build_id[..2], &build_id[2..])))
}

/// The probes for the loader at `interpreter`. `lookups` adds a probe on
/// every symbol lookup, which costs a trap per lookup, lazy binding after
/// startup included.
pub fn plan_probes(interpreter: &Path, lookups: bool) -> Result<LoaderProbes, NoProbes> {
    let ld_so = std::fs::canonicalize(interpreter).map_err(|e| NoProbes::Unreadable {
        path: interpreter.to_path_buf(),
        detail: e.to_string(),
    })?;
    let unreadable = |path: &Path, e: &dyn fmt::Display| NoProbes::Unreadable {
        path: path.to_path_buf(),
        detail: e.to_string(),
    };
    let code = std::fs::read(&ld_so).map_err(|e| unreadable(&ld_so, &e))?;
    let loader = object::File::parse(&*code).map_err(|e| unreadable(&ld_so, &e))?;
    let build_id = match loader.build_id() {
        Ok(Some(id)) => hex(id),
        _ => return Err(NoProbes::NoBuildId { ld_so }),
    };
    let debug_file = debug_file_for(&build_id).ok_or(NoProbes::NoBuildId {
        ld_so: ld_so.clone(),
    })?;
    let debug_data = match std::fs::read(&debug_file) {
        Ok(data) => data,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(NoProbes::NoDebugFile {
                ld_so,
                expected: debug_file,
            });
        }
        Err(e) => return Err(unreadable(&debug_file, &e)),
    };
    let debug = object::File::parse(&*debug_data).map_err(|e| unreadable(&debug_file, &e))?;
    let symbols = Symbols::read(&debug);
    let text = Text {
        file: &loader,
        data: &code,
    };
    let mut plan = Planner {
        symbols: &symbols,
        text: &text,
        debug_file: &debug_file,
        points: Vec::new(),
        missing: Vec::new(),
    };
    plan.required()?;
    plan.optional();
    if lookups {
        match symbols.get("_dl_lookup_symbol_x") {
            Some((address, _)) => plan.add(Probe::Lookup, address, "")?,
            None => plan
                .missing
                .push("no symbol _dl_lookup_symbol_x: lookups are not counted".to_string()),
        }
    }
    let (points, missing) = (plan.points, plan.missing);
    Ok(LoaderProbes {
        ld_so,
        debug_file,
        points,
        missing,
    })
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Function symbols of the debug file: name to (address, size).
struct Symbols(Vec<(String, u64, u64)>);

impl Symbols {
    fn read(debug: &object::File<'_>) -> Symbols {
        let mut all: Vec<(String, u64, u64)> = debug
            .symbols()
            // _dl_start_user is an assembler label: no type, no size.
            .filter(|s| {
                matches!(
                    s.kind(),
                    object::SymbolKind::Text | object::SymbolKind::Unknown
                ) && s.address() != 0
            })
            .filter_map(|s| Some((s.name().ok()?.to_string(), s.address(), s.size())))
            .collect();
        all.sort();
        Symbols(all)
    }

    fn get(&self, name: &str) -> Option<(u64, u64)> {
        let i = self
            .0
            .binary_search_by(|(n, _, _)| n.as_str().cmp(name))
            .ok()?;
        Some((self.0[i].1, self.0[i].2))
    }
}

/// ld.so's code, addressed by virtual address.
struct Text<'a> {
    file: &'a object::File<'a>,
    data: &'a [u8],
}

impl Text<'_> {
    /// The file offset of virtual address `address` in an executable
    /// segment: what a uprobe definition names.
    fn offset(&self, address: u64) -> Option<u64> {
        self.file.segments().find_map(|segment| {
            let (file_offset, file_size) = segment.file_range();
            let start = segment.address();
            (address >= start && address - start < file_size)
                .then(|| file_offset + (address - start))
        })
    }

    /// The code bytes of `size` bytes from `address`.
    fn bytes(&self, address: u64, size: u64) -> Option<&[u8]> {
        let start = usize::try_from(self.offset(address)?).ok()?;
        let end = start.checked_add(usize::try_from(size).ok()?)?;
        self.data.get(start..end.min(self.data.len()))
    }
}

struct Planner<'a> {
    symbols: &'a Symbols,
    text: &'a Text<'a>,
    debug_file: &'a Path,
    points: Vec<ProbePoint>,
    missing: Vec<String>,
}

impl Planner<'_> {
    fn symbol(&self, name: &'static str) -> Result<(u64, u64), NoProbes> {
        self.symbols.get(name).ok_or(NoProbes::NoSymbol {
            debug_file: self.debug_file.to_path_buf(),
            symbol: name,
        })
    }

    fn add(&mut self, probe: Probe, address: u64, fetch: &str) -> Result<(), NoProbes> {
        let offset = self.text.offset(address).ok_or(NoProbes::Unreadable {
            path: self.debug_file.to_path_buf(),
            detail: format!(
                "{}'s address {address:#x} lies in no segment of the loader",
                probe.name()
            ),
        })?;
        self.points.push(ProbePoint {
            probe,
            offset,
            fetch: fetch.to_string(),
        });
        Ok(())
    }

    /// The phases a loader trace is not worth having without: loading,
    /// relocating and initialising objects.
    fn required(&mut self) -> Result<(), NoProbes> {
        // struct link_map starts with l_addr then l_name, in every glibc;
        // a string fetch reads at the address its expression yields, so
        // l_name takes one dereference more than l_addr.
        const MAP: &str = "base=+0(%ax):x64 path=+0(+8(%ax)):string";
        const ARG: &str = "base=+0(%di):x64 path=+0(+8(%di)):string";
        let (load, _) = self.symbol("_dl_map_object")?;
        self.add(Probe::Load, load, "path=+0(%si):string")?;
        self.add(Probe::LoadReturn, load, MAP)?;
        let (relocate, _) = self.symbol("_dl_relocate_object")?;
        self.add(Probe::Relocate, relocate, ARG)?;
        self.add(Probe::RelocateReturn, relocate, "")?;
        let (init, init_size) = self.symbol("call_init")?;
        self.add(Probe::Init, init, ARG)?;
        self.add(Probe::InitReturn, init, "")?;
        self.init_calls(init, init_size);
        Ok(())
    }

    /// Search attempts, mapping, dlopen, the hand-over to the program and
    /// lookups: each one the trace can do without, said so when missing.
    fn optional(&mut self) {
        let optional: [OptionalProbes; 4] = [
            (
                "_dl_map_object_from_fd",
                // realname, the chosen file, is the fifth argument.
                &[(Probe::MapFile, "path=+0(%r8):string")],
                "search and map are not told apart",
            ),
            (
                "__open64_nocancel",
                &[(Probe::Open, "path=+0(%di):string")],
                "search attempts are not traced",
            ),
            (
                "_dl_open",
                &[
                    (Probe::Dlopen, "path=+0(%di):string"),
                    (Probe::DlopenReturn, "value=%ax:s64 path=+0(+8(%ax)):string"),
                ],
                "dlopen is not traced",
            ),
            (
                "_dl_start_user",
                &[(Probe::RtldUser, "")],
                "the end of rtld's own start is not traced",
            ),
        ];
        for (symbol, probes, without) in optional {
            match self.symbols.get(symbol) {
                Some((address, _)) => {
                    for &(probe, fetch) in probes {
                        if let Err(e) = self.add(probe, address, fetch) {
                            self.missing.push(format!("{e}: {without}"));
                        }
                    }
                }
                None => self.missing.push(format!("no symbol {symbol}: {without}")),
            }
        }
        self.entry_jump();
        self.open_results();
    }

    /// Probes just after the loader's open's system calls, where %rax
    /// holds the kernel's answer.
    fn open_results(&mut self) {
        let Some((address, size)) = self.symbols.get("__open64_nocancel") else {
            return;
        };
        let code = self.text.bytes(address, size).unwrap_or_default();
        let mut decoder = Decoder::with_ip(64, code, address, DecoderOptions::NONE);
        let mut site = 0u8;
        for instruction in &mut decoder {
            if instruction.code() != Code::Syscall || usize::from(site) == MAX_OPEN_SITES {
                continue;
            }
            let probe = Probe::OpenResult { site };
            if self
                .add(probe, instruction.next_ip(), "value=%ax:s64")
                .is_ok()
            {
                site += 1;
            }
        }
        if site == 0 {
            self.missing.push(
                "no system call found in the loader's open: open results are not traced"
                    .to_string(),
            );
        }
    }

    /// Probes on call_init's indirect calls: each hit starts one
    /// initializer, and its fetch reads the function called.
    fn init_calls(&mut self, address: u64, size: u64) {
        let sites = self
            .text
            .bytes(address, size)
            .map(|code| indirect_sites(code, address, Flow::Call))
            .unwrap_or_default();
        let mut site = 0u8;
        for (ip, operand) in sites {
            let Some(fetch) = operand.fetch() else {
                self.missing.push(format!(
                    "call_init's call at {ip:#x} uses an operand a uprobe cannot read"
                ));
                continue;
            };
            if usize::from(site) == MAX_INIT_SITES {
                self.missing.push(format!(
                    "call_init has more than {MAX_INIT_SITES} indirect calls"
                ));
                break;
            }
            let probe = Probe::InitCall {
                site,
                array: operand.is_memory(),
            };
            if self.add(probe, ip, &format!("target={fetch}:x64")).is_ok() {
                site += 1;
            }
        }
        if site == 0 {
            self.missing.push(
                "no indirect call found in call_init: initializers are timed per object, not one by one"
                    .to_string(),
            );
        }
    }

    /// The jump from `_dl_start_user` to the program's entry. The label
    /// has no size, so decode a little past it up to the first indirect
    /// jump.
    fn entry_jump(&mut self) {
        const SEARCH: u64 = 96;
        let found = self.symbols.get("_dl_start_user").and_then(|(address, _)| {
            let code = self.text.bytes(address, SEARCH)?;
            indirect_sites(code, address, Flow::Jump).into_iter().next()
        });
        match found.and_then(|(ip, operand)| Some((ip, operand.fetch()?))) {
            Some((ip, fetch)) => {
                if let Err(e) = self.add(Probe::Entry, ip, &format!("target={fetch}:x64")) {
                    self.missing.push(e.to_string());
                }
            }
            None => self
                .missing
                .push("no jump to the program's entry found in _dl_start_user".to_string()),
        }
    }
}

/// Which indirect branches [`indirect_sites`] looks for.
/// A function whose probes the trace can do without: its symbol, the
/// probes with their fetch arguments, and what is lost without them.
type OptionalProbes = (&'static str, &'static [(Probe, &'static str)], &'static str);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    Call,
    Jump,
}

/// Where an indirect call or jump takes its target from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operand {
    Register(Register),
    /// `[base + displacement]`, no index register.
    Memory {
        base: Register,
        displacement: i64,
    },
    /// Anything a uprobe fetch argument cannot express.
    Other,
}

impl Operand {
    fn is_memory(self) -> bool {
        matches!(self, Operand::Memory { .. })
    }

    /// The uprobe fetch expression for the target address.
    pub fn fetch(self) -> Option<String> {
        match self {
            Operand::Register(r) => Some(format!("%{}", register_name(r)?)),
            Operand::Memory { base, displacement } => {
                Some(format!("{displacement:+}(%{})", register_name(base)?))
            }
            Operand::Other => None,
        }
    }
}

/// The pt_regs name uprobe fetch arguments use for a 64-bit register.
fn register_name(register: Register) -> Option<&'static str> {
    Some(match register {
        Register::RAX => "ax",
        Register::RBX => "bx",
        Register::RCX => "cx",
        Register::RDX => "dx",
        Register::RSI => "si",
        Register::RDI => "di",
        Register::RBP => "bp",
        Register::R8 => "r8",
        Register::R9 => "r9",
        Register::R10 => "r10",
        Register::R11 => "r11",
        Register::R12 => "r12",
        Register::R13 => "r13",
        Register::R14 => "r14",
        Register::R15 => "r15",
        _ => return None,
    })
}

/// Indirect calls (or jumps) in `code`, which starts at `address`: each
/// instruction's address and where its target comes from.
pub fn indirect_sites(code: &[u8], address: u64, flow: Flow) -> Vec<(u64, Operand)> {
    let mut decoder = Decoder::with_ip(64, code, address, DecoderOptions::NONE);
    let mut instruction = Instruction::default();
    let mut sites = Vec::new();
    while decoder.can_decode() {
        decoder.decode_out(&mut instruction);
        let wanted = match flow {
            Flow::Call => matches!(instruction.code(), Code::Call_rm64),
            Flow::Jump => matches!(instruction.code(), Code::Jmp_rm64),
        };
        if !wanted {
            continue;
        }
        let operand = match instruction.op0_kind() {
            OpKind::Register => Operand::Register(instruction.op0_register()),
            OpKind::Memory
                if instruction.memory_index() == Register::None
                    && instruction.memory_base() != Register::RIP
                    && instruction.memory_base() != Register::None =>
            {
                Operand::Memory {
                    base: instruction.memory_base(),
                    displacement: instruction.memory_displacement64() as i64,
                }
            }
            _ => Operand::Other,
        };
        sites.push((instruction.ip(), operand));
    }
    sites
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indirect_calls_are_found_with_their_operands() {
        // mov rax,[rbx+8]; call rax; call qword [rax]; call [rip+0]; call [rax+rcx*8]; ret
        let code = [
            0x48, 0x8b, 0x43, 0x08, 0xff, 0xd0, 0xff, 0x10, 0xff, 0x15, 0, 0, 0, 0, 0xff, 0x14,
            0xc8, 0xc3,
        ];
        let sites = indirect_sites(&code, 0x1000, Flow::Call);
        assert_eq!(
            sites,
            vec![
                (0x1004, Operand::Register(Register::RAX)),
                (
                    0x1006,
                    Operand::Memory {
                        base: Register::RAX,
                        displacement: 0
                    }
                ),
                (0x1008, Operand::Other),
                (0x100e, Operand::Other),
            ]
        );
        assert_eq!(sites[0].1.fetch().as_deref(), Some("%ax"));
        assert_eq!(sites[1].1.fetch().as_deref(), Some("+0(%ax)"));
        assert_eq!(sites[2].1.fetch(), None);
    }

    #[test]
    fn jumps_through_r12_are_found() {
        // mov r12,rax; jmp r12
        let code = [0x49, 0x89, 0xc4, 0x41, 0xff, 0xe4];
        let sites = indirect_sites(&code, 0x2000, Flow::Jump);
        assert_eq!(sites, vec![(0x2003, Operand::Register(Register::R12))]);
        assert_eq!(sites[0].1.fetch().as_deref(), Some("%r12"));
        assert!(indirect_sites(&code, 0x2000, Flow::Call).is_empty());
    }

    #[test]
    fn debug_files_are_named_by_build_id() {
        assert_eq!(
            debug_file_for("7ebc65e5").unwrap(),
            Path::new("/usr/lib/debug/.build-id/7e/bc65e5.debug")
        );
        assert_eq!(debug_file_for("../x"), None);
        assert_eq!(debug_file_for("ab"), None);
    }

    #[test]
    fn definitions_follow_uprobe_syntax() {
        let point = ProbePoint {
            probe: Probe::LoadReturn,
            offset: 0x7eb0,
            fetch: "base=+0(%ax):x64".to_string(),
        };
        assert_eq!(
            point.definition("coldstart_12", Path::new("/lib/ld.so")),
            "r:coldstart_12/load_ret /lib/ld.so:0x7eb0 base=+0(%ax):x64"
        );
        let point = ProbePoint {
            probe: Probe::Load,
            offset: 0x7eb0,
            fetch: "path=+0(%si):string".to_string(),
        };
        assert_eq!(
            point.definition("g", Path::new("/lib/ld.so")),
            "p:g/load /lib/ld.so:0x7eb0 path=+0(%si):string sp=%sp:x64"
        );
    }
}
