//! Mach-O images in coldstart's common model: segments and sections with
//! every file byte accounted for, linked dylibs, dyld, the UUID, static
//! initializers, and the rebases and binds dyld applies at launch.

mod fixups;

use crate::model::{
    self, Format, Header, Initializer, Initializers, Inspection, Kind, MachoDetails, PagesWritten,
    Region, RelocationSection, Relocations, Section, Segment,
};
use crate::{Error, InspectOptions, Result};
use fixups::{Counted, SectionSpan, SegmentSpan, Tally};
use object::macho;
use object::read::macho::{LoadCommandData, MachHeader, Section as _, Segment as _};
use object::{Endianness, ReadRef};
use std::collections::BTreeSet;
use std::path::Path;

pub(crate) fn inspect(path: &Path, data: &[u8], options: &InspectOptions) -> Result<Inspection> {
    let ctx = Ctx { path };
    match data.get(..4) {
        Some([0xfe, 0xed, 0xfa, 0xce] | [0xce, 0xfa, 0xed, 0xfe]) => {
            inspect_image::<macho::MachHeader32<Endianness>>(&ctx, data, options)
        }
        Some([0xfe, 0xed, 0xfa, 0xcf] | [0xcf, 0xfa, 0xed, 0xfe]) => {
            inspect_image::<macho::MachHeader64<Endianness>>(&ctx, data, options)
        }
        _ => Err(ctx.malformed("no Mach-O magic number at the start of the file")),
    }
}

struct Ctx<'a> {
    path: &'a Path,
}

impl Ctx<'_> {
    fn malformed(&self, detail: impl Into<String>) -> Error {
        Error::malformed(self.path, Format::Macho, detail)
    }

    /// object says "Unsupported ..." for valid encodings it cannot decode
    /// (e.g. arm64e threaded binds): not the file's fault.
    fn object_error(&self, context: &str, err: object::read::Error) -> Error {
        self.parse_error(format!("{context}: {err}"))
    }

    fn parse_error(&self, detail: String) -> Error {
        if detail.contains("Unsupported") {
            Error::Unsupported {
                path: self.path.to_path_buf(),
                format: "Mach-O",
                detail,
            }
        } else {
            self.malformed(detail)
        }
    }

    /// Checks that [offset, offset + len) lies inside the file.
    fn in_file(&self, offset: u64, len: u64, size: u64, what: &str) -> Result<()> {
        match offset.checked_add(len) {
            Some(end) if end <= size => Ok(()),
            _ => Err(self.malformed(format!(
                "{what} [{offset:#x}, +{len:#x}) runs past the end of the file ({size:#x} bytes; \
                 truncated?)"
            ))),
        }
    }
}

/// A section's facts the later passes need beyond the model.
struct SectionFacts {
    typ: macho::SectionType,
    address: u64,
    size: u64,
    offset: u64,
}

/// Everything gathered from one walk over the load commands.
#[derive(Default)]
struct Commands<'data> {
    segments: Vec<Segment>,
    spans: Vec<SegmentSpan>,
    sections: Vec<Section>,
    facts: Vec<SectionFacts>,
    /// File ranges with a known meaning that no section claims.
    known: Vec<(u64, u64, String)>,
    symbols: Option<u32>,
    local_symbols: Option<u32>,
    uuid: Option<[u8; 16]>,
    dylinker: Option<String>,
    dylibs: Vec<String>,
    entry_offset: Option<u64>,
    thread_entry: Option<u64>,
    dyld_info: Option<&'data macho::DyldInfoCommand<Endianness>>,
    chained: Option<&'data macho::LinkeditDataCommand<Endianness>>,
}

fn inspect_image<Mach: MachHeader<Endian = Endianness>>(
    ctx: &Ctx,
    data: &[u8],
    options: &InspectOptions,
) -> Result<Inspection> {
    let size = data.len() as u64;
    let page_size = options.page_size;
    let header = Mach::parse(data, 0).map_err(|err| ctx.object_error("header", err))?;
    let endian = header
        .endian()
        .map_err(|err| ctx.object_error("header", err))?;
    let header_size = std::mem::size_of::<Mach>() as u64;
    let commands_size = u64::from(header.sizeofcmds(endian));
    ctx.in_file(header_size, commands_size, size, "load commands")?;
    let filetype = header.filetype(endian);
    let pointer_size: u64 = if header.is_type_64() { 8 } else { 4 };

    let mut found = walk_commands::<Mach>(ctx, data, header, page_size)?;
    found
        .known
        .push((0, header_size, "[Mach-O header]".to_string()));
    found.known.push((
        header_size,
        header_size + commands_size,
        "[load commands]".to_string(),
    ));

    let text_address = found
        .segments
        .iter()
        .find(|segment| segment.name.as_deref() == Some("__TEXT"))
        .map_or(0, |segment| segment.address);
    let entry = entry_address(ctx, &found, text_address)?;
    let layout = Layout {
        endian,
        pointer_size,
        text_address,
        page_size,
    };
    let relocations = relocations(ctx, data, &found, &layout)?;
    let init_array = initializers(data, &found, &layout, filetype == macho::MH_OBJECT);
    let regions = regions(size, &found);
    let header_model = header_model(header, endian, &found, entry);

    Ok(Inspection {
        path: ctx.path.display().to_string(),
        format: Format::Macho,
        size,
        page_size,
        header: header_model,
        segments: found.segments,
        sections: found.sections,
        regions,
        dynamic: None,
        relocations,
        init_array,
        pe: None,
        macho: Some(MachoDetails {
            dylibs: found.dylibs,
            pie: header.flags(endian).contains(macho::MH_PIE),
        }),
        warnings: Vec::new(),
    })
}

/// Where the program starts: LC_MAIN's offset into __TEXT, else the pc of
/// LC_UNIXTHREAD, else nowhere (0).
fn entry_address(ctx: &Ctx, found: &Commands, text_address: u64) -> Result<u64> {
    Ok(match (found.entry_offset, found.thread_entry) {
        (Some(offset), _) => text_address.checked_add(offset).ok_or_else(|| {
            ctx.malformed(format!("LC_MAIN entry offset {offset:#x} overflows __TEXT"))
        })?,
        (None, Some(pc)) => pc,
        (None, None) => 0,
    })
}

/// The common header: kind, machine, entry, UUID, dyld, symbols and debug
/// information.
fn header_model<Mach: MachHeader<Endian = Endianness>>(
    header: &Mach,
    endian: Endianness,
    found: &Commands,
    entry: u64,
) -> Header {
    let filetype = header.filetype(endian);
    let kind = match filetype {
        macho::MH_EXECUTE if header.flags(endian).contains(macho::MH_PIE) => Kind::Pie,
        macho::MH_EXECUTE => Kind::Executable,
        macho::MH_DYLIB | macho::MH_BUNDLE => Kind::SharedObject,
        macho::MH_OBJECT => Kind::Relocatable,
        macho::MH_CORE => Kind::Core,
        _ => Kind::Other,
    };
    let symbols = found.symbols.unwrap_or(0);
    // A linked image keeps the external symbols dyld needs even after
    // `strip`; what strip removes are the local ones.
    let stripped = symbols == 0 || (filetype != macho::MH_OBJECT && found.local_symbols == Some(0));
    let debug_info = found
        .sections
        .iter()
        .any(|section| section.name.starts_with("__DWARF,"));
    Header {
        kind,
        machine: machine_name(header.cputype(endian)),
        bits: if header.is_type_64() { 64 } else { 32 },
        endian: if header.is_big_endian() {
            "big"
        } else {
            "little"
        },
        entry,
        // Upper-case like dwarfdump --uuid and crash reports, without dashes.
        build_id: found
            .uuid
            .map(|uuid| uuid.iter().map(|b| format!("{b:02X}")).collect()),
        interpreter: found.dylinker.clone(),
        stripped,
        debug_info,
        debug_link: None,
        symbols: u64::from(symbols),
    }
}

fn machine_name(cputype: macho::CpuType) -> String {
    match cputype {
        macho::CPU_TYPE_X86_64 => "x86_64".to_string(),
        macho::CPU_TYPE_ARM64 => "aarch64".to_string(),
        macho::CPU_TYPE_X86 => "i386".to_string(),
        macho::CPU_TYPE_ARM => "arm".to_string(),
        macho::CPU_TYPE_ARM64_32 => "arm64_32".to_string(),
        macho::CPU_TYPE_POWERPC => "powerpc".to_string(),
        macho::CPU_TYPE_POWERPC64 => "powerpc64".to_string(),
        other => format!("cputype {:#x}", other.0),
    }
}

fn protection_letters(prot: macho::VmProt) -> String {
    model::rwx(
        prot.contains(macho::VM_PROT_READ),
        prot.contains(macho::VM_PROT_WRITE),
        prot.contains(macho::VM_PROT_EXECUTE),
    )
}

/// Reads every load command: segments with their sections, and the
/// tables, names and entry point the other commands point at.
fn walk_commands<'data, Mach: MachHeader<Endian = Endianness>>(
    ctx: &Ctx,
    data: &'data [u8],
    header: &'data Mach,
    page_size: u64,
) -> Result<Commands<'data>> {
    let endian = header
        .endian()
        .map_err(|err| ctx.object_error("header", err))?;
    let size = data.len() as u64;
    let mut found = Commands::default();
    let mut commands = header
        .load_commands(endian, data, 0)
        .map_err(|err| ctx.object_error("load commands", err))?;
    let mut index = 0usize;
    loop {
        let context = format!("load command {index}");
        let bad = |err| ctx.object_error(&context, err);
        let Some(command) = commands.next().map_err(bad)? else {
            break;
        };
        index += 1;
        if let Some((segment, section_data)) = Mach::Segment::from_command(command).map_err(bad)? {
            add_segment::<Mach>(
                ctx,
                &mut found,
                endian,
                segment,
                section_data,
                size,
                page_size,
            )?;
            continue;
        }
        let reader = CommandReader {
            ctx,
            context: &context,
            endian,
            size,
        };
        reader.read::<Mach>(&mut found, command, header.cputype(endian))?;
    }
    Ok(found)
}

/// Reads one load command other than a segment, against the file's length
/// (every table it points at must lie in the file) and byte order.
struct CommandReader<'a> {
    ctx: &'a Ctx<'a>,
    /// Which load command this is, for error messages.
    context: &'a str,
    endian: Endianness,
    size: u64,
}

impl CommandReader<'_> {
    fn bad(&self, err: object::read::Error) -> Error {
        self.ctx.object_error(self.context, err)
    }

    /// Records the commands this model uses, each by its kind: the symbol
    /// tables, what the image names and where it starts, and the linkedit
    /// data dyld reads.
    fn read<'data, Mach: MachHeader<Endian = Endianness>>(
        &self,
        found: &mut Commands<'data>,
        command: LoadCommandData<'data, Endianness>,
        cputype: macho::CpuType,
    ) -> Result<()> {
        let endian = self.endian;
        let bad = |err| self.bad(err);
        match command.cmd() {
            macho::LC_SYMTAB => self.symbol_table::<Mach>(found, command)?,
            macho::LC_DYSYMTAB => self.dynamic_symbol_tables(found, command)?,
            macho::LC_UUID => {
                if let Some(uuid) = command.uuid().map_err(bad)? {
                    found.uuid = Some(uuid.uuid);
                }
            }
            macho::LC_LOAD_DYLINKER => {
                let dylinker = command
                    .data::<macho::DylinkerCommand<Endianness>>()
                    .map_err(bad)?;
                let name = command.string(endian, dylinker.name).map_err(bad)?;
                found.dylinker = Some(String::from_utf8_lossy(name).into_owned());
            }
            macho::LC_LOAD_DYLIB
            | macho::LC_LOAD_WEAK_DYLIB
            | macho::LC_REEXPORT_DYLIB
            | macho::LC_LAZY_LOAD_DYLIB
            | macho::LC_LOAD_UPWARD_DYLIB => {
                if let Some(dylib) = command.dylib().map_err(bad)? {
                    let name = command.string(endian, dylib.dylib.name).map_err(bad)?;
                    found
                        .dylibs
                        .push(String::from_utf8_lossy(name).into_owned());
                }
            }
            macho::LC_MAIN => {
                if let Some(main) = command.entry_point().map_err(bad)? {
                    found.entry_offset = Some(main.entryoff.get(endian));
                }
            }
            macho::LC_UNIXTHREAD => {
                if let Some((_, state)) = command.unix_thread().map_err(bad)? {
                    found.thread_entry = thread_pc(cputype, endian, state);
                }
            }
            macho::LC_DYLD_INFO | macho::LC_DYLD_INFO_ONLY => self.dyld_info(found, command)?,
            macho::LC_CODE_SIGNATURE
            | macho::LC_SEGMENT_SPLIT_INFO
            | macho::LC_FUNCTION_STARTS
            | macho::LC_DATA_IN_CODE
            | macho::LC_DYLIB_CODE_SIGN_DRS
            | macho::LC_LINKER_OPTIMIZATION_HINT
            | macho::LC_DYLD_EXPORTS_TRIE
            | macho::LC_DYLD_CHAINED_FIXUPS => self.linkedit_data(found, command)?,
            _ => {}
        }
        Ok(())
    }

    /// A table the command points at: it must lie in the file, and its
    /// bytes are then accounted for under `label`.
    fn table(&self, found: &mut Commands, offset: u64, len: u64, label: &str) -> Result<()> {
        self.ctx.in_file(offset, len, self.size, label)?;
        push_known(found, offset, len, label);
        Ok(())
    }

    /// LC_SYMTAB: the symbols and their strings.
    fn symbol_table<Mach: MachHeader<Endian = Endianness>>(
        &self,
        found: &mut Commands,
        command: LoadCommandData<Endianness>,
    ) -> Result<()> {
        let Some(symtab) = command.symtab().map_err(|err| self.bad(err))? else {
            return Ok(());
        };
        let endian = self.endian;
        let nlist_size = std::mem::size_of::<Mach::Nlist>() as u64;
        let symoff = u64::from(symtab.symoff.get(endian));
        let nsyms = symtab.nsyms.get(endian);
        let symbols_len = nlist_size * u64::from(nsyms);
        let stroff = u64::from(symtab.stroff.get(endian));
        let strsize = u64::from(symtab.strsize.get(endian));
        self.table(found, symoff, symbols_len, "[symbol table]")?;
        self.table(found, stroff, strsize, "[string table]")?;
        found.symbols = Some(nsyms);
        Ok(())
    }

    /// LC_DYSYMTAB: the count of local symbols, and the indirect symbol
    /// and relocation tables.
    fn dynamic_symbol_tables(
        &self,
        found: &mut Commands,
        command: LoadCommandData<Endianness>,
    ) -> Result<()> {
        let Some(dysymtab) = command.dysymtab().map_err(|err| self.bad(err))? else {
            return Ok(());
        };
        let endian = self.endian;
        found.local_symbols = Some(dysymtab.nlocalsym.get(endian));
        let tables = [
            (
                dysymtab.indirectsymoff.get(endian),
                4 * u64::from(dysymtab.nindirectsyms.get(endian)),
                "[indirect symbols]",
            ),
            (
                dysymtab.extreloff.get(endian),
                8 * u64::from(dysymtab.nextrel.get(endian)),
                "[external relocations]",
            ),
            (
                dysymtab.locreloff.get(endian),
                8 * u64::from(dysymtab.nlocrel.get(endian)),
                "[local relocations]",
            ),
        ];
        for (offset, len, label) in tables {
            self.table(found, u64::from(offset), len, label)?;
        }
        Ok(())
    }

    /// LC_DYLD_INFO(_ONLY): the opcode streams dyld runs to rebase, bind
    /// and export.
    fn dyld_info<'data>(
        &self,
        found: &mut Commands<'data>,
        command: LoadCommandData<'data, Endianness>,
    ) -> Result<()> {
        let Some(info) = command.dyld_info().map_err(|err| self.bad(err))? else {
            return Ok(());
        };
        let streams = [
            (info.rebase_off, info.rebase_size, "[rebase info]"),
            (info.bind_off, info.bind_size, "[bind info]"),
            (info.weak_bind_off, info.weak_bind_size, "[weak bind info]"),
            (info.lazy_bind_off, info.lazy_bind_size, "[lazy bind info]"),
            (info.export_off, info.export_size, "[export info]"),
        ];
        for (offset, len, label) in streams {
            let (offset, len) = (
                u64::from(offset.get(self.endian)),
                u64::from(len.get(self.endian)),
            );
            self.table(found, offset, len, label)?;
        }
        found.dyld_info = Some(info);
        Ok(())
    }

    /// The commands that point at one blob of __LINKEDIT data; chained
    /// fixups are kept to be decoded later.
    fn linkedit_data<'data>(
        &self,
        found: &mut Commands<'data>,
        command: LoadCommandData<'data, Endianness>,
    ) -> Result<()> {
        let cmd = command.cmd();
        let linkedit = command
            .data::<macho::LinkeditDataCommand<Endianness>>()
            .map_err(|err| self.bad(err))?;
        let offset = u64::from(linkedit.dataoff.get(self.endian));
        let len = u64::from(linkedit.datasize.get(self.endian));
        let label = match cmd {
            macho::LC_CODE_SIGNATURE => "[code signature]",
            macho::LC_SEGMENT_SPLIT_INFO => "[split info]",
            macho::LC_FUNCTION_STARTS => "[function starts]",
            macho::LC_DATA_IN_CODE => "[data in code]",
            macho::LC_DYLD_EXPORTS_TRIE => "[exports trie]",
            macho::LC_DYLD_CHAINED_FIXUPS => "[chained fixups]",
            _ => "[linkedit data]",
        };
        self.table(found, offset, len, label)?;
        if cmd == macho::LC_DYLD_CHAINED_FIXUPS {
            found.chained = Some(linkedit);
        }
        Ok(())
    }
}

fn push_known(found: &mut Commands, offset: u64, len: u64, label: &str) {
    if len != 0 {
        found.known.push((offset, offset + len, label.to_string()));
    }
}

/// The program counter a LC_UNIXTHREAD starts at, for the thread-state
/// flavors of x86 and ARM. Older executables use it instead of LC_MAIN.
fn thread_pc(cputype: macho::CpuType, endian: Endianness, state: &[u8]) -> Option<u64> {
    // (flavor, index of the pc register, register width) per
    // <mach/i386/thread_status.h> and <mach/arm/thread_status.h>.
    let (flavor, pc_index, width) = match cputype {
        macho::CPU_TYPE_X86_64 => (4u32, 16u64, 8u64),
        macho::CPU_TYPE_ARM64 => (6, 32, 8),
        macho::CPU_TYPE_X86 => (1, 10, 4),
        macho::CPU_TYPE_ARM => (1, 15, 4),
        _ => return None,
    };
    let read = |at: u64, width: u64| -> Option<u64> {
        let bytes = state.get(at as usize..)?.get(..width as usize)?;
        let fold = |value: u64, &byte: &u8| (value << 8) | u64::from(byte);
        Some(match endian {
            Endianness::Little => bytes.iter().rev().fold(0, fold),
            Endianness::Big => bytes.iter().fold(0, fold),
        })
    };
    // The state follows a (flavor, count) pair.
    if read(0, 4)? != u64::from(flavor) {
        return None;
    }
    read(8 + pc_index * width, width)
}

/// One LC_SEGMENT(_64): the segment's row and span, then its sections'.
fn add_segment<'data, Mach: MachHeader<Endian = Endianness>>(
    ctx: &Ctx,
    found: &mut Commands<'data>,
    endian: Endianness,
    segment: &'data Mach::Segment,
    section_data: &'data [u8],
    size: u64,
    page_size: u64,
) -> Result<()> {
    let index = found.segments.len();
    let name = String::from_utf8_lossy(segment.name()).into_owned();
    let (offset, file_size) = segment.file_range(endian);
    ctx.in_file(offset, file_size, size, &format!("segment {name}"))?;
    let address: u64 = segment.vmaddr(endian).into();
    let memory_size: u64 = segment.vmsize(endian).into();
    let flags = protection_letters(segment.initprot(endian));
    found.segments.push(Segment {
        index,
        kind: "SEGMENT".to_string(),
        name: Some(name.clone()),
        offset,
        file_size,
        address,
        memory_size,
        flags: flags.clone(),
        // Mach-O segments carry no alignment field; they start on pages.
        align: 0,
        share_of_file: model::share(file_size, size),
        pages: model::pages_spanned(offset, file_size, page_size),
    });
    found.spans.push(SegmentSpan {
        address,
        memory_size,
        offset,
        file_size,
    });

    let host = SectionHost {
        ctx,
        endian,
        segment: index,
        flags: &flags,
        size,
        page_size,
    };
    let headers = segment
        .sections(endian, section_data)
        .map_err(|err| ctx.object_error(&format!("segment {name}"), err))?;
    for item in segment.section_offsets(endian, headers) {
        let (section, section_offset) =
            item.map_err(|err| ctx.object_error(&format!("segment {name}"), err))?;
        host.add_section::<Mach>(found, section, section_offset)?;
    }
    Ok(())
}

/// What the sections of one segment share: the segment's index and
/// protection, and the file's size and page size.
struct SectionHost<'a> {
    ctx: &'a Ctx<'a>,
    endian: Endianness,
    segment: usize,
    flags: &'a str,
    size: u64,
    page_size: u64,
}

impl SectionHost<'_> {
    /// One section: its bytes and its relocation entries checked to lie in
    /// the file, its row, and the facts the initializer walk needs.
    fn add_section<Mach: MachHeader<Endian = Endianness>>(
        &self,
        found: &mut Commands,
        section: &Mach::Section,
        section_offset: u64,
    ) -> Result<()> {
        let (endian, size) = (self.endian, self.size);
        let full_name = format!(
            "{},{}",
            String::from_utf8_lossy(section.segment_name()),
            String::from_utf8_lossy(section.name())
        );
        let typ = section.section_type(endian);
        let memory_size: u64 = section.size(endian).into();
        let file_size = section.file_size(endian).unwrap_or(0);
        if file_size != 0 {
            self.ctx.in_file(
                section_offset,
                file_size,
                size,
                &format!("section {full_name}"),
            )?;
        }
        let address: u64 = section.addr(endian).into();
        let reloff = u64::from(section.reloff(endian));
        let relocs_len = 8 * u64::from(section.nreloc(endian));
        if relocs_len != 0 {
            self.ctx.in_file(
                reloff,
                relocs_len,
                size,
                &format!("relocations of {full_name}"),
            )?;
            push_known(found, reloff, relocs_len, "[relocations]");
        }
        let kind = typ.name().map_or_else(
            || format!("{:#x}", typ.0),
            |name| name.trim_start_matches("S_").to_string(),
        );
        found.facts.push(SectionFacts {
            typ,
            address,
            size: memory_size,
            offset: section_offset,
        });
        found.sections.push(Section {
            index: found.sections.len(),
            name: full_name,
            kind,
            // Sections have no protection of their own; the segment's applies.
            flags: self.flags.to_string(),
            offset: section_offset,
            file_size,
            address,
            memory_size,
            share_of_file: model::share(file_size, size),
            pages: model::pages_spanned(section_offset, file_size, self.page_size),
            segment: Some(self.segment),
        });
        Ok(())
    }
}

/// Bytes outside every section: header, load commands, __LINKEDIT tables,
/// padding. Known ranges get their own label; what is left is padding
/// inside a segment with sections, the segment's own name in one without
/// (its unlabelled __LINKEDIT data), or unmapped outside every segment.
fn regions(size: u64, found: &Commands) -> Vec<Region> {
    let mut claimed: Vec<(u64, u64)> = found
        .sections
        .iter()
        .filter(|section| section.file_size != 0)
        .map(|section| (section.offset, section.file_size))
        .collect();
    let mut known = found.known.clone();
    known.sort_unstable();
    let with_sections: BTreeSet<usize> = found.sections.iter().filter_map(|s| s.segment).collect();
    let mut segment_labels: Vec<(u64, u64, String)> = found
        .segments
        .iter()
        .filter(|segment| segment.file_size != 0)
        .map(|segment| {
            let label = if with_sections.contains(&segment.index) {
                "[padding]".to_string()
            } else {
                format!("[{}]", segment.name.as_deref().unwrap_or("segment"))
            };
            (segment.offset, segment.offset + segment.file_size, label)
        })
        .collect();
    segment_labels.sort_unstable();

    let mut regions = Vec::new();
    for gap in model::unclaimed_regions(size, &mut claimed) {
        for (start, end, label) in carve(gap.offset, gap.offset + gap.size, &known) {
            if let Some(label) = label {
                regions.push(Region {
                    label: label.to_string(),
                    offset: start,
                    size: end - start,
                });
                continue;
            }
            for (start, end, label) in carve(start, end, &segment_labels) {
                regions.push(Region {
                    label: label.unwrap_or("[unmapped]").to_string(),
                    offset: start,
                    size: end - start,
                });
            }
        }
    }
    regions
}

/// Splits [start, end) into pieces covered by `labelled` (sorted by start;
/// the first range wins where two overlap) and unlabelled rest.
fn carve(start: u64, end: u64, labelled: &[(u64, u64, String)]) -> Vec<(u64, u64, Option<&str>)> {
    let mut pieces = Vec::new();
    let mut cursor = start;
    for (from, to, label) in labelled {
        let from = (*from).max(cursor);
        let to = (*to).min(end);
        if from >= to {
            continue;
        }
        if from > cursor {
            pieces.push((cursor, from, None));
        }
        pieces.push((from, to, Some(label.as_str())));
        cursor = to;
    }
    if cursor < end {
        pieces.push((cursor, end, None));
    }
    pieces
}

/// The LC_DYLD_INFO streams dyld applies at launch (lazy binds wait for
/// the first call).
#[derive(Clone, Copy)]
enum Stream {
    Rebase,
    Bind,
    WeakBind,
}

impl Stream {
    fn name(self) -> &'static str {
        match self {
            Stream::Rebase => "rebase",
            Stream::Bind => "bind",
            Stream::WeakBind => "weak bind",
        }
    }
}

/// Facts about the image the fixup decoders need.
#[derive(Clone, Copy)]
struct Layout {
    endian: Endianness,
    pointer_size: u64,
    /// __TEXT's address: the image base that chained and init offsets count from.
    text_address: u64,
    page_size: u64,
}

/// One table of fixups dyld applies, counted.
struct FixupTable {
    name: String,
    format: &'static str,
    offset: u64,
    size: u64,
    counted: Counted,
}

/// The fixups dyld applies at launch: the LC_DYLD_INFO streams and the
/// chained fixups, each table counted, then summed.
fn relocations(ctx: &Ctx, data: &[u8], found: &Commands, layout: &Layout) -> Result<Relocations> {
    let spans: Vec<SectionSpan> = found
        .sections
        .iter()
        .map(|section| SectionSpan {
            name: section.name.clone(),
            address: section.address,
            memory_size: section.memory_size,
        })
        .collect();
    let mut tally = Tally::new(layout.pointer_size, layout.page_size, &spans);
    let mut tables = Vec::new();
    if let Some(info) = found.dyld_info {
        tables.extend(dyld_info_tables(
            ctx, data, found, info, layout, &mut tally,
        )?);
    }
    if let Some(command) = found.chained {
        tables.push(chained_table(
            ctx, data, found, command, layout, &mut tally,
        )?);
    }
    Ok(summed(tables, &tally, data.len() as u64))
}

/// The rebase, bind and weak bind streams of LC_DYLD_INFO that are not
/// empty.
fn dyld_info_tables(
    ctx: &Ctx,
    data: &[u8],
    found: &Commands,
    info: &macho::DyldInfoCommand<Endianness>,
    layout: &Layout,
    tally: &mut Tally,
) -> Result<Vec<FixupTable>> {
    let endian = layout.endian;
    let cap = data.len() as u64 / layout.pointer_size + 1;
    let streams = [
        (Stream::Rebase, info.rebase_off, info.rebase_size),
        (Stream::Bind, info.bind_off, info.bind_size),
        (Stream::WeakBind, info.weak_bind_off, info.weak_bind_size),
    ];
    let mut tables = Vec::new();
    for (stream, offset, len) in streams {
        let (offset, len) = (u64::from(offset.get(endian)), u64::from(len.get(endian)));
        if len == 0 {
            continue;
        }
        let opened = |err| ctx.object_error(stream.name(), err);
        let counted = match stream {
            Stream::Rebase => {
                let operations = info.rebase_operations(endian, data).map_err(opened)?;
                fixups::rebases(operations, &found.spans, tally, cap)
            }
            Stream::Bind => {
                let operations = info.bind_operations(endian, data).map_err(opened)?;
                fixups::binds(operations, false, &found.spans, tally, cap)
            }
            Stream::WeakBind => {
                let operations = info.weak_bind_operations(endian, data).map_err(opened)?;
                fixups::binds(operations, true, &found.spans, tally, cap)
            }
        }
        .map_err(|detail| ctx.parse_error(detail))?;
        let format = match stream {
            Stream::Rebase => "macho_rebase",
            Stream::Bind | Stream::WeakBind => "macho_bind",
        };
        tables.push(FixupTable {
            name: format!("LC_DYLD_INFO {}", stream.name()),
            format,
            offset,
            size: len,
            counted,
        });
    }
    Ok(tables)
}

/// The LC_DYLD_CHAINED_FIXUPS table.
fn chained_table(
    ctx: &Ctx,
    data: &[u8],
    found: &Commands,
    command: &macho::LinkeditDataCommand<Endianness>,
    layout: &Layout,
    tally: &mut Tally,
) -> Result<FixupTable> {
    let endian = layout.endian;
    let fixups = command
        .chained_fixups(endian, data)
        .map_err(|err| ctx.object_error("chained fixups", err))?;
    let counted = fixups::chained(
        endian,
        &fixups,
        data,
        &found.spans,
        layout.text_address,
        tally,
    )
    .map_err(|detail| ctx.parse_error(detail))?;
    Ok(FixupTable {
        name: "LC_DYLD_CHAINED_FIXUPS".to_string(),
        format: "macho_chained",
        offset: u64::from(command.dataoff.get(endian)),
        size: u64::from(command.datasize.get(endian)),
        counted,
    })
}

/// The tables in the common model: one row each, their totals, and the
/// pages they write.
fn summed(tables: Vec<FixupTable>, tally: &Tally, size: u64) -> Relocations {
    let mut relocations = Relocations::default();
    for table in tables {
        let counted = table.counted;
        let count = counted.rebases + counted.binds;
        relocations.total += count;
        relocations.relative += counted.rebases;
        relocations.symbolic += counted.binds;
        relocations.bytes += table.size;
        for (typ, n) in &counted.by_type {
            *relocations.by_type.entry(typ.clone()).or_default() += n;
        }
        relocations.sections.push(RelocationSection {
            name: table.name,
            format: table.format.to_string(),
            offset: table.offset,
            size: table.size,
            entries: counted.entries,
            relocations: count,
            share_of_file: model::share(table.size, size),
            dynamic: true,
            by_type: counted.by_type,
        });
    }
    relocations.distinct_symbols = (tally.symbols.len() + tally.ordinals.len()) as u64;
    relocations.share_of_file = model::share(relocations.bytes, size);
    relocations.pages_written = PagesWritten {
        total: tally.pages_total(),
        by_section: tally.pages_by_section(),
    };
    relocations
}

/// __mod_init_func and __init_offsets entries (run by dyld before main),
/// and the __mod_term_func count. A stored init pointer is the target only
/// in a linked image without chained fixups (elsewhere it is a chain entry
/// or a relocation's placeholder); __init_offsets hold plain offsets from
/// the image base, known in any linked image.
fn initializers(data: &[u8], found: &Commands, layout: &Layout, is_object: bool) -> Initializers {
    let mut result = Initializers::default();
    let read = |offset: u64, width: u64| -> Option<u64> {
        let bytes = data.read_bytes_at(offset, width).ok()?;
        let fold = |value: u64, &byte: &u8| (value << 8) | u64::from(byte);
        Some(match layout.endian {
            Endianness::Little => bytes.iter().rev().fold(0, fold),
            Endianness::Big => bytes.iter().fold(0, fold),
        })
    };
    let pointers_known = !is_object && found.chained.is_none();
    for facts in &found.facts {
        let (width, offsets) = match facts.typ {
            macho::S_MOD_INIT_FUNC_POINTERS => (layout.pointer_size, false),
            macho::S_INIT_FUNC_OFFSETS => (4, true),
            macho::S_MOD_TERM_FUNC_POINTERS => {
                result.fini_count += facts.size / layout.pointer_size;
                continue;
            }
            _ => continue,
        };
        let count = facts.size / width;
        result.count += count;
        for i in 0..count {
            let target = if offsets && !is_object {
                read(facts.offset + i * width, width)
                    .and_then(|offset| layout.text_address.checked_add(offset))
            } else if !offsets && pointers_known {
                read(facts.offset + i * width, width)
            } else {
                None
            };
            result.entries.push(Initializer {
                slot: facts.address.saturating_add(i * width),
                target,
                symbol: None,
                demangled: None,
            });
        }
    }
    result.code_pages = result
        .entries
        .iter()
        .filter_map(|entry| entry.target.map(|target| target / layout.page_size))
        .collect::<BTreeSet<u64>>()
        .len() as u64;
    result
}
