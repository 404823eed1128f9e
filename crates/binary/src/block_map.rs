//! LLVM's basic-block address map (SHT_LLVM_BB_ADDR_MAP, the
//! `.llvm_bb_addr_map` section that `clang -fbasic-block-address-map`
//! emits and linkers keep): where each basic block of each function starts,
//! how long it is and how it ends, so page-level traces can be read at the
//! grain of blocks and a layout can move cold blocks apart from hot ones.
//!
//! Entries follow each other to the end of the section; each is:
//!
//! - u8 version (1 or 2), u8 feature bits (bit 0 function entry count,
//!   bit 1 block frequencies, bit 2 branch probabilities, bit 3 several
//!   address ranges; version 1 has the byte but no feature may be set);
//! - with bit 3, a ULEB128 number of ranges; each range (or the only one)
//!   is an address-sized base (the file's word size and byte order) and a
//!   ULEB128 number of blocks;
//! - per block, ULEB128s: the block's ID (version 2 only; in version 1 it
//!   is the block's index), its start as a distance from the end of the
//!   block before it in the same range (from the range's base for the
//!   first), its size, and its metadata bits;
//! - after all ranges, the profile-guided fields the feature bits ask for:
//!   a ULEB128 entry count, then per block of the function its ULEB128
//!   frequency and/or a ULEB128 successor count followed by that many
//!   ULEB128 (successor ID, probability) pairs. These are read past, not
//!   kept.
//!
//! LLVM's own reader (llvm/lib/Object/ELF.cpp, `decodeBBAddrMapImpl`)
//! bounds IDs, distances, sizes and metadata to 32 bits; so does this one.

use crate::elf::{Elf, malformed, read_word};
use crate::error::{Error, Result};
use crate::file::MappedFile;
use crate::model::{DEFAULT_PAGE_SIZE, Format};
use crate::offsets::SymbolBinding;
use crate::{Detected, detect, magic_bytes};
use object::Endianness;
use object::elf as e;
use object::read::elf::{FileHeader, ProgramHeader, SectionHeader, Sym};
use serde::Serialize;
use std::cmp::Reverse;
use std::fmt;
use std::path::Path;

/// ELF section type of the versioned map (LLVM's `SHT_LLVM_BB_ADDR_MAP`).
pub const SHT_LLVM_BB_ADDR_MAP: u32 = 0x6fff_4c0a;
/// The map's first format, before it had a version byte.
const SHT_LLVM_BB_ADDR_MAP_V0: u32 = 0x6fff_4c08;

/// Feature bits of an entry.
const FUNC_ENTRY_COUNT: u8 = 1 << 0;
const BB_FREQ: u8 = 1 << 1;
const BR_PROB: u8 = 1 << 2;
const MULTI_BB_RANGE: u8 = 1 << 3;
const KNOWN_FEATURES: u8 = FUNC_ENTRY_COUNT | BB_FREQ | BR_PROB | MULTI_BB_RANGE;

/// One basic block of a function.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Block {
    /// LLVM's ID of the block within its function (the machine basic
    /// block number); in a version 1 map, its index in its range.
    pub id: u32,
    /// Absolute link-time virtual address of its first byte.
    pub address: u64,
    /// File offset of its first byte, through the PT_LOAD that maps it
    /// (LLVM calls the distance from the range's base an "offset"; this
    /// is not that).
    pub offset: u64,
    /// Bytes of code, alignment padding before the next block excluded.
    pub size: u64,
    pub flags: BlockFlags,
}

/// How a block ends, from its metadata bits.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize)]
pub struct BlockFlags {
    /// Ends in a return.
    pub has_return: bool,
    /// Ends in a tail call (a jump to another function).
    pub has_tail_call: bool,
    /// An exception landing pad: entered only when something unwinds.
    pub is_eh_pad: bool,
    /// Control may run on into the block laid out after it.
    pub can_fall_through: bool,
    /// Ends in an indirect branch (a jump table, a computed goto).
    pub has_indirect_branch: bool,
}

impl BlockFlags {
    const KNOWN: u32 = 0x1f;

    /// The flags of metadata `bits`; None if bits LLVM does not define are set.
    fn from_metadata(bits: u32) -> Option<BlockFlags> {
        (bits & !Self::KNOWN == 0).then_some(BlockFlags {
            has_return: bits & (1 << 0) != 0,
            has_tail_call: bits & (1 << 1) != 0,
            is_eh_pad: bits & (1 << 2) != 0,
            can_fall_through: bits & (1 << 3) != 0,
            has_indirect_branch: bits & (1 << 4) != 0,
        })
    }
}

/// A contiguous range of a function's blocks (a function split by
/// -fbasic-block-sections has several).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BlockRange {
    /// Address of the range's first byte.
    pub base: u64,
    /// In address order.
    pub blocks: Vec<Block>,
}

/// One function of the map.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MappedFunction {
    /// The entry: the first range's base.
    pub address: u64,
    /// Raw (mangled) names of the STT_FUNC symbols at `address`, from the
    /// full symbol table, else the dynamic one: global ones first, then
    /// weak, then local, each group by name. Empty if no symbol names it.
    pub names: Vec<String>,
    /// The entry's range first, then the others as the map lists them.
    pub ranges: Vec<BlockRange>,
}

/// The basic-block address map of one linked ELF file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BlockMap {
    /// The map's format version: 1 or 2 (the highest, should objects built
    /// by different compilers mix them); 0 when the section is empty.
    pub version: u8,
    /// In the order of the map's sections and, within each, of its entries.
    pub functions: Vec<MappedFunction>,
    /// Every block's start, for [`block_at`](Self::block_at); built from
    /// `functions` as they were read.
    #[serde(skip)]
    index: Vec<BlockStart>,
}

/// Where one block of `functions` starts, ordered by address; a block of
/// zero bytes sorts after a real one starting at the same address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct BlockStart {
    address: u64,
    empty: bool,
    function: usize,
    range: usize,
    block: usize,
}

impl BlockMap {
    fn new(version: u8, functions: Vec<MappedFunction>) -> BlockMap {
        let mut index = Vec::new();
        for (function, f) in functions.iter().enumerate() {
            for (range, r) in f.ranges.iter().enumerate() {
                for (block, b) in r.blocks.iter().enumerate() {
                    index.push(BlockStart {
                        address: b.address,
                        empty: b.size == 0,
                        function,
                        range,
                        block,
                    });
                }
            }
        }
        index.sort_unstable();
        BlockMap {
            version,
            functions,
            index,
        }
    }

    /// Number of blocks over all functions and ranges.
    pub fn block_count(&self) -> usize {
        self.functions
            .iter()
            .flat_map(|f| &f.ranges)
            .map(|r| r.blocks.len())
            .sum()
    }

    /// The block that starts exactly at `address`, with the index of its
    /// function in `functions`. A block with bytes wins over an empty one
    /// at the same address. Looks in the index built when the map was read,
    /// so it finds nothing new after `functions` is changed.
    pub fn block_at(&self, address: u64) -> Option<(usize, &Block)> {
        let first = self.index.partition_point(|s| s.address < address);
        let start = self.index.get(first).filter(|s| s.address == address)?;
        let block = self
            .functions
            .get(start.function)?
            .ranges
            .get(start.range)?
            .blocks
            .get(start.block)?;
        Some((start.function, block))
    }
}

/// Reads the map of an ELF file already in memory; `path` only labels
/// errors. Ok(None) when the file has no such section (a build without
/// -fbasic-block-address-map, or one stripped of it).
///
/// Refuses what is not ELF, relocatable objects (their map addresses are
/// zeros that relocations fill in at link time), map versions other than 1
/// and 2, compressed map sections, truncated or overlong entries, and
/// blocks outside the file images of the PT_LOAD segments.
pub fn read_block_map(path: &Path, data: &[u8]) -> Result<Option<BlockMap>> {
    let not_elf = |format: Format| Error::Unsupported {
        path: path.to_path_buf(),
        format: format.name(),
        detail: "basic-block address maps are only read from ELF files".to_string(),
    };
    match detect(data) {
        Some(Detected::Elf) => {}
        Some(Detected::Pe) => return Err(not_elf(Format::Pe)),
        Some(Detected::Macho | Detected::MachoFat) => return Err(not_elf(Format::Macho)),
        None => {
            return Err(Error::UnknownFormat {
                path: path.to_path_buf(),
                magic: magic_bytes(data),
            });
        }
    }
    // EI_CLASS, the fifth identification byte.
    match data.get(4).map(|&class| e::FileClass(class)) {
        Some(e::ELFCLASS32) => read_elf::<e::FileHeader32<Endianness>>(path, data),
        Some(e::ELFCLASS64) => read_elf::<e::FileHeader64<Endianness>>(path, data),
        Some(class) => Err(malformed(path, format!("unknown ELF class {}", class.0))),
        None => Err(malformed(
            path,
            format!(
                "truncated: {} bytes, shorter than the 16-byte ELF identification",
                data.len()
            ),
        )),
    }
}

/// Maps one file and reads its map, as [`read_block_map`].
pub fn read_block_map_path(path: &Path) -> Result<Option<BlockMap>> {
    let file = MappedFile::open(path)?;
    read_block_map(file.path(), file.bytes())
}

fn unsupported(path: &Path, detail: impl Into<String>) -> Error {
    Error::Unsupported {
        path: path.to_path_buf(),
        format: Format::Elf.name(),
        detail: detail.into(),
    }
}

/// The phases: check the file is linked, decode every map section, place
/// the blocks in the file, name the functions.
fn read_elf<H: FileHeader<Endian = Endianness>>(
    path: &Path,
    data: &[u8],
) -> Result<Option<BlockMap>> {
    let elf = Elf::<H>::parse(path, data, DEFAULT_PAGE_SIZE)?;
    check_linked(&elf)?;
    let mut sections = Vec::new();
    for (index, sh) in elf.sections.enumerate() {
        match sh.sh_type(elf.endian).0 {
            SHT_LLVM_BB_ADDR_MAP => sections.push((index.0, sh)),
            SHT_LLVM_BB_ADDR_MAP_V0 => {
                return Err(unsupported(
                    path,
                    format!(
                        "{}: a map in LLVM's first, unversioned format \
                         (SHT_LLVM_BB_ADDR_MAP_V0); only versions 1 and 2 are read",
                        section_label(&elf, index.0, sh)
                    ),
                ));
            }
            _ => {}
        }
    }
    if sections.is_empty() {
        return Ok(None);
    }
    let mut version = 0;
    let mut functions = Vec::new();
    for (index, sh) in sections {
        let (v, mut found) = decode_section(&elf, index, sh)?;
        version = version.max(v);
        functions.append(&mut found);
    }
    place_blocks(&elf, &mut functions)?;
    name_functions(&elf, &mut functions)?;
    Ok(Some(BlockMap::new(version, functions)))
}

/// Executables and shared objects only: in a relocatable object every
/// function address in the map is a placeholder for a relocation.
fn check_linked<H: FileHeader<Endian = Endianness>>(elf: &Elf<'_, '_, H>) -> Result<()> {
    match elf.header.e_type(elf.endian) {
        e::ET_EXEC | e::ET_DYN => Ok(()),
        e::ET_REL => Err(unsupported(
            elf.path,
            "relocatable object (ET_REL): the function addresses in its basic-block map \
             are only filled in by relocations when it is linked; read the linked \
             executable or shared object instead",
        )),
        other => Err(unsupported(
            elf.path,
            format!(
                "ELF type {} is not a linked executable or shared object, so it has no \
                 basic-block map to read",
                other.0
            ),
        )),
    }
}

fn section_label<H: FileHeader<Endian = Endianness>>(
    elf: &Elf<'_, '_, H>,
    index: usize,
    sh: &H::SectionHeader,
) -> String {
    let name = elf
        .section_name(sh)
        .unwrap_or_else(|_| "[bad name]".to_string());
    format!("{name} (section {index})")
}

/// The entries of one map section, with the highest version among them.
fn decode_section<H: FileHeader<Endian = Endianness>>(
    elf: &Elf<'_, '_, H>,
    index: usize,
    sh: &H::SectionHeader,
) -> Result<(u8, Vec<MappedFunction>)> {
    let label = section_label(elf, index, sh);
    if sh.sh_flags(elf.endian).0 & e::SHF_COMPRESSED.0 != 0 {
        return Err(unsupported(
            elf.path,
            format!(
                "{label} is compressed (SHF_COMPRESSED); decompress it first with \
                 llvm-objcopy --compress-sections '.llvm_bb_addr_map=none'"
            ),
        ));
    }
    let bytes = sh.data(elf.endian, elf.data).map_err(|_| {
        let offset: u64 = sh.sh_offset(elf.endian).into();
        let size: u64 = sh.sh_size(elf.endian).into();
        malformed(
            elf.path,
            format!(
                "{label} at offset 0x{offset:x} with size 0x{size:x} runs past the end of \
                 the {}-byte file",
                elf.size()
            ),
        )
    })?;
    let word = if elf.word == 8 { Word::U64 } else { Word::U32 };
    decode_entries(bytes, word, elf.endian).map_err(|problem| match problem {
        Problem::Malformed(detail) => malformed(elf.path, format!("{label}: {detail}")),
        Problem::Unsupported(detail) => unsupported(elf.path, format!("{label}: {detail}")),
    })
}

/// What was wrong with a section's bytes, before the file is named.
#[derive(Debug, PartialEq, Eq)]
enum Problem {
    Malformed(String),
    Unsupported(String),
}

/// The size of an address in the map: the ELF class's.
#[derive(Debug, Clone, Copy)]
enum Word {
    U32,
    U64,
}

/// The field being read, to say where a problem is.
#[derive(Debug, Clone, Copy)]
enum Field {
    Version,
    Features,
    RangeCount,
    Base { range: usize },
    BlockCount { range: usize },
    Id { range: usize, block: usize },
    Distance { range: usize, block: usize },
    Size { range: usize, block: usize },
    Metadata { range: usize, block: usize },
    EntryCount,
    Frequency { block: usize },
    SuccessorCount { block: usize },
    Successor { block: usize, successor: u64 },
}

impl fmt::Display for Field {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Field::Version => write!(f, "the version"),
            Field::Features => write!(f, "the feature bits"),
            Field::RangeCount => write!(f, "the number of ranges"),
            Field::Base { range } => write!(f, "the base address of range {range}"),
            Field::BlockCount { range } => write!(f, "the number of blocks of range {range}"),
            Field::Id { range, block } => write!(f, "the ID of block {block} of range {range}"),
            Field::Distance { range, block } => {
                write!(f, "the start of block {block} of range {range}")
            }
            Field::Size { range, block } => {
                write!(f, "the size of block {block} of range {range}")
            }
            Field::Metadata { range, block } => {
                write!(f, "the metadata of block {block} of range {range}")
            }
            Field::EntryCount => write!(f, "the function entry count"),
            Field::Frequency { block } => write!(f, "the frequency of block {block}"),
            Field::SuccessorCount { block } => {
                write!(f, "the number of successors of block {block}")
            }
            Field::Successor { block, successor } => {
                write!(f, "successor {successor} of block {block}")
            }
        }
    }
}

/// A read position in a section's bytes.
struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
    endian: Endianness,
}

impl Reader<'_> {
    fn at_end(&self) -> bool {
        self.pos >= self.bytes.len()
    }

    fn remaining(&self) -> usize {
        self.bytes.len().saturating_sub(self.pos)
    }

    fn truncated(&self, field: Field) -> Problem {
        Problem::Malformed(format!(
            "truncated: the section ends at byte 0x{:x}, inside {field}",
            self.bytes.len()
        ))
    }

    fn u8(&mut self, field: Field) -> Result<u8, Problem> {
        let byte = *self
            .bytes
            .get(self.pos)
            .ok_or_else(|| self.truncated(field))?;
        self.pos += 1;
        Ok(byte)
    }

    fn address(&mut self, word: Word, field: Field) -> Result<u64, Problem> {
        let size = match word {
            Word::U32 => 4,
            Word::U64 => 8,
        };
        let value = read_word(self.bytes, self.pos, size, self.endian)
            .ok_or_else(|| self.truncated(field))?;
        self.pos += size as usize;
        Ok(value)
    }

    /// An unsigned LEB128. Like LLVM's decoder, it takes padding bytes past
    /// the 64th bit as long as they add nothing.
    fn uleb(&mut self, field: Field) -> Result<u64, Problem> {
        let start = self.pos;
        let mut value: u64 = 0;
        let mut shift: u32 = 0;
        loop {
            let byte = self.u8(field)?;
            let slice = u64::from(byte & 0x7f);
            let fits = match shift {
                0..63 => true,
                63 => slice <= 1,
                _ => slice == 0,
            };
            if !fits {
                return Err(Problem::Malformed(format!(
                    "{field} at byte 0x{start:x} is a ULEB128 too big for 64 bits"
                )));
            }
            if shift < 64 {
                value |= slice << shift;
            }
            shift = shift.saturating_add(7);
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
    }

    /// A ULEB128 that LLVM bounds to 32 bits.
    fn uleb32(&mut self, field: Field) -> Result<u32, Problem> {
        let start = self.pos;
        let value = self.uleb(field)?;
        u32::try_from(value).map_err(|_| {
            Problem::Malformed(format!(
                "{field} at byte 0x{start:x} is {value}, more than the 32 bits LLVM allows"
            ))
        })
    }
}

/// Every entry of a section's bytes, and the highest version among them.
/// Blocks get their addresses; their file offsets and the functions'
/// names come later.
fn decode_entries(
    bytes: &[u8],
    word: Word,
    endian: Endianness,
) -> Result<(u8, Vec<MappedFunction>), Problem> {
    let mut reader = Reader {
        bytes,
        pos: 0,
        endian,
    };
    let mut version = 0;
    let mut functions = Vec::new();
    while !reader.at_end() {
        let start = reader.pos;
        let (v, function) = decode_entry(&mut reader, word).map_err(|problem| {
            let place = format!("function entry {} at byte 0x{start:x}", functions.len());
            match problem {
                Problem::Malformed(d) => Problem::Malformed(format!("{place}: {d}")),
                Problem::Unsupported(d) => Problem::Unsupported(format!("{place}: {d}")),
            }
        })?;
        version = version.max(v);
        functions.push(function);
    }
    Ok((version, functions))
}

/// One function's entry: header, ranges, then the profile fields read past.
fn decode_entry(reader: &mut Reader<'_>, word: Word) -> Result<(u8, MappedFunction), Problem> {
    let version = reader.u8(Field::Version)?;
    if !(1..=2).contains(&version) {
        return Err(Problem::Unsupported(format!(
            "map version {version}; only versions 1 and 2 are read"
        )));
    }
    let features = reader.u8(Field::Features)?;
    if features & !KNOWN_FEATURES != 0 {
        return Err(Problem::Unsupported(format!(
            "feature bits 0x{features:02x}: bits 0x{:02x} are ones LLVM 19 does not define \
             (a newer LLVM's map)",
            features & !KNOWN_FEATURES
        )));
    }
    if version < 2 && features != 0 {
        return Err(Problem::Malformed(format!(
            "version {version} with feature bits 0x{features:02x}: features need version 2"
        )));
    }
    let range_count = if features & MULTI_BB_RANGE != 0 {
        let count = reader.uleb32(Field::RangeCount)?;
        if count == 0 {
            return Err(Problem::Malformed(
                "zero ranges: a function needs at least its entry's".to_string(),
            ));
        }
        count as usize
    } else {
        1
    };
    // Capacity from what the bytes can hold, not from what they claim.
    let mut ranges = Vec::with_capacity(range_count.min(reader.remaining() / 2));
    for range in 0..range_count {
        ranges.push(decode_range(reader, word, version, range)?);
    }
    let blocks: usize = ranges.iter().map(|r: &BlockRange| r.blocks.len()).sum();
    skip_profile(reader, features, blocks)?;
    let address = ranges.first().map_or(0, |r| r.base);
    Ok((
        version,
        MappedFunction {
            address,
            names: Vec::new(),
            ranges,
        },
    ))
}

fn decode_range(
    reader: &mut Reader<'_>,
    word: Word,
    version: u8,
    range: usize,
) -> Result<BlockRange, Problem> {
    let base = reader.address(word, Field::Base { range })?;
    let count = reader.uleb32(Field::BlockCount { range })? as usize;
    let mut blocks = Vec::with_capacity(count.min(reader.remaining() / 3));
    // Each block starts this far from the end of the one before.
    let mut previous_end: u64 = 0;
    for block in 0..count {
        let id = if version >= 2 {
            reader.uleb32(Field::Id { range, block })?
        } else {
            u32::try_from(block).map_err(|_| {
                Problem::Malformed(format!("range {range} has more than 2^32 blocks"))
            })?
        };
        let distance = reader.uleb32(Field::Distance { range, block })?;
        let size = reader.uleb32(Field::Size { range, block })?;
        let metadata = reader.uleb32(Field::Metadata { range, block })?;
        let flags = BlockFlags::from_metadata(metadata).ok_or_else(|| {
            Problem::Malformed(format!(
                "block {block} of range {range} has metadata 0x{metadata:x}, with bits LLVM \
                 does not define"
            ))
        })?;
        let start = previous_end.checked_add(distance.into());
        let address = start.and_then(|start| base.checked_add(start));
        let end = start.and_then(|start| start.checked_add(size.into()));
        let end_address = end.and_then(|end| base.checked_add(end));
        let (Some(address), Some(end), Some(_)) = (address, end, end_address) else {
            return Err(Problem::Malformed(format!(
                "block {block} of range {range} ends past the end of the address space"
            )));
        };
        previous_end = end;
        blocks.push(Block {
            id,
            address,
            offset: 0,
            size: size.into(),
            flags,
        });
    }
    Ok(BlockRange { base, blocks })
}

/// Reads past the profile-guided fields; their values are not kept.
fn skip_profile(reader: &mut Reader<'_>, features: u8, blocks: usize) -> Result<(), Problem> {
    if features & FUNC_ENTRY_COUNT != 0 {
        reader.uleb(Field::EntryCount)?;
    }
    if features & (BB_FREQ | BR_PROB) == 0 {
        return Ok(());
    }
    for block in 0..blocks {
        if features & BB_FREQ != 0 {
            reader.uleb(Field::Frequency { block })?;
        }
        if features & BR_PROB != 0 {
            // Each successor takes two bytes at least, so a huge count
            // runs into the end of the section, not into a long loop.
            let count = reader.uleb(Field::SuccessorCount { block })?;
            for successor in 0..count {
                reader.uleb32(Field::Successor { block, successor })?;
                reader.uleb32(Field::Successor { block, successor })?;
            }
        }
    }
    Ok(())
}

/// Gives every block its file offset; a block the PT_LOAD segments do not
/// map from the file is an error.
fn place_blocks<H: FileHeader<Endian = Endianness>>(
    elf: &Elf<'_, '_, H>,
    functions: &mut [MappedFunction],
) -> Result<()> {
    for function in functions {
        let entry = function.address;
        for block in function.ranges.iter_mut().flat_map(|r| &mut r.blocks) {
            block.offset = file_offset(elf, block.address, block.size).ok_or_else(|| {
                malformed(
                    elf.path,
                    format!(
                        "basic-block map: block {} of the function at 0x{entry:x} (0x{:x}, {} \
                         bytes) is outside the file's loaded segments",
                        block.id, block.address, block.size
                    ),
                )
            })?;
        }
    }
    Ok(())
}

/// File offset of [address, address + size) if one PT_LOAD maps all of it
/// from bytes the file has.
fn file_offset<H: FileHeader<Endian = Endianness>>(
    elf: &Elf<'_, '_, H>,
    address: u64,
    size: u64,
) -> Option<u64> {
    elf.phdrs
        .iter()
        .filter(|ph| ph.p_type(elf.endian) == e::PT_LOAD)
        .find_map(|ph| {
            let vaddr: u64 = ph.p_vaddr(elf.endian).into();
            let filesz: u64 = ph.p_filesz(elf.endian).into();
            let offset: u64 = ph.p_offset(elf.endian).into();
            let delta = address.checked_sub(vaddr)?;
            let in_image = delta <= filesz && size <= filesz - delta;
            let start = offset.checked_add(delta).filter(|_| in_image)?;
            let in_file = start.checked_add(size)? <= elf.size();
            in_file.then_some(start)
        })
}

/// Names each function after the STT_FUNC symbols at its entry, from the
/// full symbol table, else the dynamic one: one pass over the symbols.
fn name_functions<H: FileHeader<Endian = Endianness>>(
    elf: &Elf<'_, '_, H>,
    functions: &mut [MappedFunction],
) -> Result<()> {
    let mut entries: Vec<u64> = functions.iter().map(|f| f.address).collect();
    entries.sort_unstable();
    entries.dedup();
    let mut found: Vec<Vec<(SymbolBinding, String)>> = vec![Vec::new(); entries.len()];
    for sh_type in [e::SHT_SYMTAB, e::SHT_DYNSYM] {
        let table = elf
            .sections
            .symbols(elf.endian, elf.data, sh_type)
            .map_err(|err| elf.fail(err))?;
        if table.is_empty() {
            continue;
        }
        for sym in table.symbols() {
            if sym.st_type() != e::STT_FUNC || sym.is_undefined(elf.endian) {
                continue;
            }
            let mut value: u64 = sym.st_value(elf.endian).into();
            // Bit 0 of an ARM function's value selects Thumb.
            if elf.machine == e::EM_ARM {
                value &= !1;
            }
            let Ok(slot) = entries.binary_search(&value) else {
                continue;
            };
            let name = sym
                .name(elf.endian, table.strings())
                .map_err(|err| elf.fail(err))?;
            let binding = match sym.st_bind() {
                e::STB_GLOBAL => SymbolBinding::Global,
                e::STB_GNU_UNIQUE => SymbolBinding::Unique,
                e::STB_WEAK => SymbolBinding::Weak,
                _ => SymbolBinding::Local,
            };
            found[slot].push((binding, String::from_utf8_lossy(name).into_owned()));
        }
        break;
    }
    for names in &mut found {
        names.sort_unstable_by(|a, b| (Reverse(a.0), &a.1).cmp(&(Reverse(b.0), &b.1)));
        names.dedup_by(|a, b| a.1 == b.1);
    }
    for function in functions {
        if let Ok(slot) = entries.binary_search(&function.address) {
            function.names = found[slot].iter().map(|(_, name)| name.clone()).collect();
        }
    }
    Ok(())
}

/// A block map found by disassembling the functions of an x86-64 ELF file
/// built without one (gcc, or clang without -fbasic-block-address-map):
/// each function's symbol gives its bytes, and its blocks start at its
/// entry, at the targets of its direct jumps and branches, and after each
/// jump, branch, return or trap. Calls do not end a block (as in LLVM and
/// BOLT).
///
/// A `switch`'s jump table is found when the link kept its relocations
/// (`-Wl,-q`, as BOLT needs): each entry's relocation names its target,
/// absolutely (`R_X86_64_64`) or relative to the table (`R_X86_64_PC32`,
/// whose table starts at the address the function's code loads with a
/// RIP-relative `lea`). Without them such blocks are not found: they stay
/// inside the block before them. Exception landing pads start blocks too,
/// as the call-site tables of the language-specific data areas `.eh_frame`
/// points to name them (one may follow a call to `__cxa_throw`, which does
/// not end a block). Ids are the blocks' indices within their function;
/// `version` is 0.
pub fn discover_block_map(path: &Path, data: &[u8]) -> Result<BlockMap> {
    match detect(data) {
        Some(Detected::Elf) => {}
        _ => {
            return Err(Error::Unsupported {
                path: path.to_path_buf(),
                format: Format::Elf.name(),
                detail: "blocks are found by disassembly in x86-64 ELF files only".to_string(),
            });
        }
    }
    if data.get(4).map(|&class| e::FileClass(class)) != Some(e::ELFCLASS64) {
        return Err(unsupported(
            path,
            "blocks are found in 64-bit (x86-64) files only",
        ));
    }
    discover_elf::<e::FileHeader64<Endianness>>(path, data)
}

/// Maps one file and finds its blocks, as [`discover_block_map`].
pub fn discover_block_map_path(path: &Path) -> Result<BlockMap> {
    let file = MappedFile::open(path)?;
    discover_block_map(file.path(), file.bytes())
}

fn discover_elf<H: FileHeader<Endian = Endianness>>(path: &Path, data: &[u8]) -> Result<BlockMap> {
    use object::{Object, ObjectSection, ObjectSymbol, SymbolKind};
    let elf = Elf::<H>::parse(path, data, DEFAULT_PAGE_SIZE)?;
    check_linked(&elf)?;
    if elf.header.e_machine(elf.endian) != e::EM_X86_64 {
        return Err(unsupported(
            path,
            "blocks are found by disassembly in x86-64 files only",
        ));
    }
    let file = object::File::parse(data).map_err(|err| malformed(path, err.to_string()))?;
    let mut entries: Vec<(u64, u64, object::SectionIndex)> = file
        .symbols()
        .chain(file.dynamic_symbols())
        .filter(|s| s.kind() == SymbolKind::Text && s.size() > 0 && !s.is_undefined())
        .filter_map(|s| Some((s.address(), s.size(), s.section_index()?)))
        .collect();
    entries.sort_unstable_by_key(|e| (e.0, e.1));
    entries.dedup_by_key(|e| e.0);
    let code_of = |address: u64, size: u64, section: object::SectionIndex| {
        let section = file.section_by_index(section).ok()?;
        let bytes = section.data().ok()?;
        let start = usize::try_from(address.checked_sub(section.address())?).ok()?;
        bytes.get(start..start.checked_add(usize::try_from(size).ok()?)?)
    };
    // Jump tables are read from the relocations a `-q` link keeps; without
    // any in the data, the code need not be decoded for its `lea`s.
    let kept_relocations = file.sections().any(|section| {
        section.kind() != object::SectionKind::Text && section.relocations().next().is_some()
    });
    let mut known_starts = if kept_relocations {
        let table_bases = entries
            .iter()
            .filter_map(|&(address, size, section)| {
                Some(lea_targets(address, code_of(address, size, section)?))
            })
            .flatten()
            .collect();
        jump_table_targets(&file, table_bases)
    } else {
        Vec::new()
    };
    known_starts.extend(landing_pads(&file));
    known_starts.sort_unstable();
    known_starts.dedup();
    let mut functions = Vec::with_capacity(entries.len());
    for (address, size, section) in entries {
        let Some(code) = code_of(address, size, section) else {
            continue;
        };
        let end = address.saturating_add(size);
        let from = known_starts.partition_point(|&t| t < address);
        let to = known_starts.partition_point(|&t| t < end);
        let blocks = discover_blocks(address, code, &known_starts[from..to]);
        if !blocks.is_empty() {
            functions.push(MappedFunction {
                address,
                names: Vec::new(),
                ranges: vec![BlockRange {
                    base: address,
                    blocks,
                }],
            });
        }
    }
    place_blocks(&elf, &mut functions)?;
    name_functions(&elf, &mut functions)?;
    Ok(BlockMap::new(0, functions))
}

/// The exception landing pads of the file's code: for each FDE of
/// `.eh_frame` with a language-specific data area (C++'s `.gcc_except_table`),
/// the landing pad of each entry of its call-site table, relative to the
/// FDE's start. Whatever does not parse, and an area with a base of its
/// own, is skipped: these only add block starts.
fn landing_pads(file: &object::File<'_>) -> Vec<u64> {
    use gimli::{BaseAddresses, CieOrFde, EhFrame, LittleEndian, Pointer, UnwindSection};
    use object::{Object, ObjectSection};
    let Some(eh_frame) = file.section_by_name(".eh_frame") else {
        return Vec::new();
    };
    let Ok(eh_data) = eh_frame.data() else {
        return Vec::new();
    };
    let section_address = |name: &str| file.section_by_name(name).map(|s| s.address());
    let mut bases = BaseAddresses::default().set_eh_frame(eh_frame.address());
    if let Some(text) = section_address(".text") {
        bases = bases.set_text(text);
    }
    if let Some(got) = section_address(".got") {
        bases = bases.set_got(got);
    }
    let frames = EhFrame::new(eh_data, LittleEndian);
    let mut pads = Vec::new();
    let mut entries = frames.entries(&bases);
    while let Ok(Some(entry)) = entries.next() {
        let CieOrFde::Fde(partial) = entry else {
            continue;
        };
        let Ok(fde) =
            partial.parse(|section, bases, offset| section.cie_from_offset(bases, offset))
        else {
            continue;
        };
        if let Some(Pointer::Direct(lsda)) = fde.lsda() {
            let bytes = file.sections().find_map(|s| {
                let start = lsda.checked_sub(s.address())?;
                (start < s.size()).then(|| s.data().ok()?.get(usize::try_from(start).ok()?..))?
            });
            if let Some(bytes) = bytes {
                pads.extend(call_site_pads(bytes, fde.initial_address()));
            }
        }
    }
    pads
}

/// The landing pads one language-specific data area names (its header,
/// then the call-site table: start, length, landing pad, action), relative
/// to `function`. Empty when it does not parse, or gives a base of its own
/// (neither gcc nor clang writes one).
fn call_site_pads(bytes: &[u8], function: u64) -> Vec<u64> {
    const OMIT: u8 = 0xff;
    let parse = || -> Option<Vec<u64>> {
        let mut cursor = Cursor { bytes, at: 0 };
        if cursor.byte()? != OMIT {
            return None;
        }
        if cursor.byte()? != OMIT {
            cursor.uleb()?; // the type table's offset
        }
        let encoding = cursor.byte()?;
        let length = usize::try_from(cursor.uleb()?).ok()?;
        let end = cursor.at.checked_add(length)?;
        let mut pads = Vec::new();
        while cursor.at < end {
            cursor.encoded(encoding)?; // start
            cursor.encoded(encoding)?; // length
            let pad = cursor.encoded(encoding)?;
            cursor.uleb()?; // action
            if pad != 0 {
                pads.push(function.checked_add(pad)?);
            }
        }
        Some(pads)
    };
    parse().unwrap_or_default()
}

/// Reads the DWARF-encoded values of a language-specific data area.
struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Cursor<'_> {
    fn byte(&mut self) -> Option<u8> {
        let b = *self.bytes.get(self.at)?;
        self.at += 1;
        Some(b)
    }

    fn uleb(&mut self) -> Option<u64> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.byte()?;
            value |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Some(value);
            }
        }
        None
    }

    fn fixed(&mut self, size: usize) -> Option<u64> {
        let mut value = 0u64;
        for i in 0..size {
            value |= u64::from(self.byte()?) << (8 * i);
        }
        Some(value)
    }

    /// A value in `encoding`'s format (DW_EH_PE_*; the application part,
    /// relative to the function, is the caller's).
    fn encoded(&mut self, encoding: u8) -> Option<u64> {
        match encoding & 0x0f {
            0x01 => self.uleb(),
            0x02 | 0x0a => self.fixed(2),
            0x03 | 0x0b => self.fixed(4),
            0x04 | 0x0c => self.fixed(8),
            _ => None,
        }
    }
}

/// The addresses a function's code loads with a RIP-relative `lea`: where
/// its jump tables start, among other data.
fn lea_targets(address: u64, code: &[u8]) -> Vec<u64> {
    use iced_x86::{Decoder, DecoderOptions, Instruction, Mnemonic, Register};
    let mut decoder = Decoder::with_ip(64, code, address, DecoderOptions::NONE);
    let mut instruction = Instruction::default();
    let mut targets = Vec::new();
    while decoder.can_decode() {
        decoder.decode_out(&mut instruction);
        if instruction.is_invalid() {
            break;
        }
        if instruction.mnemonic() == Mnemonic::Lea && instruction.memory_base() == Register::RIP {
            targets.push(instruction.memory_displacement64());
        }
    }
    targets
}

/// The code addresses the entries of jump tables in the file's data name,
/// sorted, from the relocations a `-q` link keeps in loaded sections: an
/// absolute entry's target is its symbol plus addend; a relative one
/// (`.long .Lcase - .Ltable`) holds symbol + addend - (entry - table), where
/// the table is the run of such entries it belongs to, and starts at a
/// `lea` target (`bases`).
fn jump_table_targets(file: &object::File<'_>, mut bases: Vec<u64>) -> Vec<u64> {
    use object::{Object, ObjectSection, ObjectSymbol, RelocationFlags, RelocationTarget};
    bases.sort_unstable();
    bases.dedup();
    let mut targets = Vec::new();
    for section in file.sections() {
        let loaded = matches!(section.flags(), object::SectionFlags::Elf { sh_flags, .. }
            if sh_flags.0 & e::SHF_ALLOC.0 != 0);
        if !loaded || section.kind() == object::SectionKind::Text {
            continue;
        }
        // A linked file's relocations are at addresses. A relative table is
        // a run of 4-byte PC32 entries that starts where a `lea` points.
        let relative: std::collections::HashSet<u64> = section
            .relocations()
            .filter(|(_, r)| {
                r.flags()
                    == (RelocationFlags::Elf {
                        r_type: e::R_X86_64_PC32,
                    })
            })
            .map(|(at, _)| at)
            .collect();
        let table_of = |place: u64| {
            let mut start = place;
            while start >= 4 && relative.contains(&(start - 4)) {
                start -= 4;
            }
            bases.binary_search(&start).is_ok().then_some(start)
        };
        for (place, relocation) in section.relocations() {
            let RelocationFlags::Elf { r_type } = relocation.flags() else {
                continue;
            };
            let symbol = match relocation.target() {
                RelocationTarget::Symbol(index) => file.symbol_by_index(index).ok(),
                _ => None,
            };
            let Some(symbol) = symbol else { continue };
            let Some(value) = symbol.address().checked_add_signed(relocation.addend()) else {
                continue;
            };
            let target = match r_type {
                e::R_X86_64_64 => Some(value),
                e::R_X86_64_PC32 => {
                    table_of(place).and_then(|table| value.checked_sub(place - table))
                }
                _ => None,
            };
            targets.extend(target);
        }
    }
    targets.sort_unstable();
    targets.dedup();
    targets
}

/// The blocks of one function's `code`, which starts at `address`; `also`
/// are other addresses known to start blocks (jump tables' targets).
fn discover_blocks(address: u64, code: &[u8], also: &[u64]) -> Vec<Block> {
    use iced_x86::{Decoder, DecoderOptions, FlowControl, Instruction};
    let end = address + code.len() as u64;
    let mut decoder = Decoder::with_ip(64, code, address, DecoderOptions::NONE);
    let mut instruction = Instruction::default();
    // Each instruction's start and how it ends a block, if it does.
    let mut instructions: Vec<(u64, FlowControl)> = Vec::new();
    let mut leaders = std::collections::BTreeSet::from([address]);
    leaders.extend(also.iter().copied().filter(|t| (address..end).contains(t)));
    while decoder.can_decode() {
        decoder.decode_out(&mut instruction);
        if instruction.is_invalid() {
            // Data or padding the decoder cannot read: no block starts
            // inside it but at a target found elsewhere.
            break;
        }
        let flow = instruction.flow_control();
        instructions.push((instruction.ip(), flow));
        match flow {
            FlowControl::ConditionalBranch | FlowControl::UnconditionalBranch => {
                let target = instruction.near_branch_target();
                if (address..end).contains(&target) {
                    leaders.insert(target);
                }
                leaders.insert(instruction.next_ip());
            }
            FlowControl::Return
            | FlowControl::IndirectBranch
            | FlowControl::Interrupt
            | FlowControl::Exception => {
                leaders.insert(instruction.next_ip());
            }
            _ => {}
        }
    }
    // Only leaders at instruction starts (a target inside an instruction
    // is not code this decoding sees).
    let starts: std::collections::HashSet<u64> = instructions.iter().map(|i| i.0).collect();
    let leaders: Vec<u64> = leaders.into_iter().filter(|l| starts.contains(l)).collect();
    let last_flow = |from: u64, to: u64| {
        instructions
            .iter()
            .rev()
            .find(|i| i.0 >= from && i.0 < to)
            .map(|i| i.1)
    };
    leaders
        .iter()
        .enumerate()
        .map(|(i, &start)| {
            let stop = leaders.get(i + 1).copied().unwrap_or(end);
            let flow = last_flow(start, stop);
            Block {
                id: i as u32,
                address: start,
                offset: 0,
                size: stop - start,
                flags: BlockFlags {
                    has_return: flow == Some(FlowControl::Return),
                    has_tail_call: false,
                    is_eh_pad: false,
                    can_fall_through: !matches!(
                        flow,
                        Some(
                            FlowControl::Return
                                | FlowControl::UnconditionalBranch
                                | FlowControl::IndirectBranch
                        )
                    ),
                    has_indirect_branch: flow == Some(FlowControl::IndirectBranch),
                },
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uleb(mut value: u64, out: &mut Vec<u8>) {
        loop {
            let byte = (value & 0x7f) as u8;
            value >>= 7;
            if value == 0 {
                out.push(byte);
                return;
            }
            out.push(byte | 0x80);
        }
    }

    fn decode(bytes: &[u8]) -> Result<(u8, Vec<MappedFunction>), Problem> {
        decode_entries(bytes, Word::U64, Endianness::Little)
    }

    /// (id, distance, size, metadata) of one block.
    type RawBlock = (u32, u32, u32, u32);

    fn entry(version: u8, features: u8, ranges: &[(u64, &[RawBlock])]) -> Vec<u8> {
        let mut out = vec![version, features];
        if features & MULTI_BB_RANGE != 0 {
            uleb(ranges.len() as u64, &mut out);
        }
        for (base, blocks) in ranges {
            out.extend_from_slice(&base.to_le_bytes());
            uleb(blocks.len() as u64, &mut out);
            for &(id, distance, size, metadata) in *blocks {
                if version >= 2 {
                    uleb(id.into(), &mut out);
                }
                for v in [distance, size, metadata] {
                    uleb(v.into(), &mut out);
                }
            }
        }
        out
    }

    #[test]
    fn starts_are_relative_to_the_end_of_the_previous_block() {
        let bytes = entry(
            2,
            0,
            &[(0x1000, &[(0, 0, 4, 8), (3, 2, 5, 1), (1, 0, 0, 0)])],
        );
        let (version, functions) = decode(&bytes).unwrap();
        assert_eq!(version, 2);
        let blocks = &functions[0].ranges[0].blocks;
        let starts: Vec<(u32, u64, u64)> =
            blocks.iter().map(|b| (b.id, b.address, b.size)).collect();
        assert_eq!(starts, [(0, 0x1000, 4), (3, 0x1006, 5), (1, 0x100b, 0)]);
        assert!(blocks[0].flags.can_fall_through);
        assert!(blocks[1].flags.has_return);
    }

    #[test]
    fn version_1_ids_are_indices() {
        let bytes = entry(1, 0, &[(0x2000, &[(9, 0, 2, 0), (9, 1, 2, 0)])]);
        let (version, functions) = decode(&bytes).unwrap();
        assert_eq!(version, 1);
        let ids: Vec<u32> = functions[0].ranges[0].blocks.iter().map(|b| b.id).collect();
        assert_eq!(ids, [0, 1]);
        assert_eq!(functions[0].ranges[0].blocks[1].address, 0x2003);
    }

    #[test]
    fn ranges_and_profile_fields() {
        let features = FUNC_ENTRY_COUNT | BB_FREQ | BR_PROB | MULTI_BB_RANGE;
        let mut bytes = entry(
            2,
            features,
            &[(0x1000, &[(0, 0, 4, 8)]), (0x5000, &[(2, 0, 3, 1)])],
        );
        uleb(1000, &mut bytes); // entry count
        uleb(1 << 60, &mut bytes); // block 0: frequency
        uleb(1, &mut bytes); // one successor
        uleb(2, &mut bytes);
        uleb(0x8000_0000, &mut bytes);
        uleb(7, &mut bytes); // block 1: frequency
        uleb(0, &mut bytes); // no successors
        // A second function after it, to show the fields were read past.
        bytes.extend(entry(2, 0, &[(0x3000, &[(0, 0, 1, 1)])]));
        let (_, functions) = decode(&bytes).unwrap();
        assert_eq!(functions.len(), 2);
        assert_eq!(functions[0].address, 0x1000);
        assert_eq!(functions[0].ranges[1].base, 0x5000);
        assert_eq!(functions[0].ranges[1].blocks[0].id, 2);
        assert_eq!(functions[1].address, 0x3000);
    }

    #[test]
    fn padded_uleb_is_read_and_overlong_is_refused() {
        let mut reader = Reader {
            bytes: &[
                0x85, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00,
            ],
            pos: 0,
            endian: Endianness::Little,
        };
        assert_eq!(reader.uleb(Field::EntryCount), Ok(5));
        let mut reader = Reader {
            bytes: &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02],
            pos: 0,
            endian: Endianness::Little,
        };
        let Err(Problem::Malformed(detail)) = reader.uleb(Field::EntryCount) else {
            panic!("a 65-bit value was accepted");
        };
        assert!(detail.contains("too big for 64 bits"), "{detail}");
        let mut reader = Reader {
            bytes: &[0x80, 0x80, 0x80, 0x80, 0x10],
            pos: 0,
            endian: Endianness::Little,
        };
        let Err(Problem::Malformed(detail)) = reader.uleb32(Field::RangeCount) else {
            panic!("a 33-bit count was accepted");
        };
        assert!(detail.contains("more than the 32 bits"), "{detail}");
    }

    #[test]
    fn bad_entries_say_what_is_wrong() {
        let problem = |bytes: &[u8]| decode(bytes).expect_err("refused");
        let good = entry(2, 0, &[(0x1000, &[(0, 0, 4, 8), (1, 0, 4, 1)])]);
        let Problem::Malformed(d) = problem(&good[..good.len() - 2]) else {
            panic!()
        };
        assert!(
            d.contains("function entry 0 at byte 0x0: truncated")
                && d.contains("the size of block 1 of range 0"),
            "{d}"
        );
        let mut v3 = good.clone();
        v3[0] = 3;
        assert!(matches!(problem(&v3), Problem::Unsupported(d) if d.contains("map version 3")));
        let mut new_feature = good.clone();
        new_feature[1] = 0x10;
        assert!(
            matches!(problem(&new_feature), Problem::Unsupported(d) if d.contains("bits 0x10"))
        );
        let v1_features = entry(1, BB_FREQ, &[(0x1000, &[])]);
        assert!(
            matches!(problem(&v1_features), Problem::Malformed(d) if d.contains("need version 2"))
        );
        let no_ranges = [2, MULTI_BB_RANGE, 0];
        assert!(matches!(problem(&no_ranges), Problem::Malformed(d) if d.contains("zero ranges")));
        let bad_metadata = entry(2, 0, &[(0x1000, &[(0, 0, 4, 0x20)])]);
        assert!(
            matches!(problem(&bad_metadata), Problem::Malformed(d) if d.contains("metadata 0x20"))
        );
        let wraps = entry(2, 0, &[(u64::MAX - 2, &[(0, 0, 4, 0)])]);
        assert!(matches!(problem(&wraps), Problem::Malformed(d) if d.contains("address space")));
    }

    #[test]
    fn a_huge_claimed_count_fails_without_allocating_it() {
        let mut bytes = vec![2, MULTI_BB_RANGE];
        uleb(u32::MAX.into(), &mut bytes);
        bytes.extend_from_slice(&0x1000u64.to_le_bytes());
        uleb(u32::MAX.into(), &mut bytes);
        assert!(matches!(decode(&bytes), Err(Problem::Malformed(d)) if d.contains("truncated")));
    }

    #[test]
    fn block_at_prefers_a_block_with_bytes() {
        let block = |id, address, size| Block {
            id,
            address,
            offset: address,
            size,
            flags: BlockFlags::default(),
        };
        let map = BlockMap::new(
            2,
            vec![
                MappedFunction {
                    address: 0x10,
                    names: Vec::new(),
                    ranges: vec![BlockRange {
                        base: 0x10,
                        blocks: vec![block(0, 0x10, 4), block(1, 0x14, 0)],
                    }],
                },
                MappedFunction {
                    address: 0x14,
                    names: Vec::new(),
                    ranges: vec![BlockRange {
                        base: 0x14,
                        blocks: vec![block(0, 0x14, 8)],
                    }],
                },
            ],
        );
        assert_eq!(map.block_count(), 3);
        assert_eq!(map.block_at(0x10).map(|(f, b)| (f, b.id)), Some((0, 0)));
        assert_eq!(map.block_at(0x14).map(|(f, b)| (f, b.size)), Some((1, 8)));
        assert_eq!(map.block_at(0x12), None);
        assert_eq!(map.block_at(0x1c), None);
    }

    /// A call-site table as g++ writes it (no base of its own, a type
    /// table, uleb128 entries): the landing pads it names, relative to the
    /// function; every truncation of it gives none (a table is read whole
    /// or not at all), and
    /// a base of its own or an unknown encoding gives none.
    #[test]
    fn call_site_tables_name_their_landing_pads() {
        let mut table = Vec::new();
        for (start, length, pad, action) in [(4, 8, 0x40, 1), (16, 4, 0, 0), (24, 12, 0x58, 3)] {
            for value in [start, length, pad, action] {
                uleb(value, &mut table);
            }
        }
        let mut area = vec![0xff, 0x9b];
        uleb(0x20, &mut area); // the type table's offset
        area.push(0x01); // uleb128 call sites
        uleb(table.len() as u64, &mut area);
        area.extend(&table);
        assert_eq!(call_site_pads(&area, 0x1000), [0x1040, 0x1058]);
        for cut in 0..area.len() {
            let pads = call_site_pads(&area[..cut], 0x1000);
            assert!(pads.is_empty(), "cut at {cut}: {pads:x?}");
        }
        let mut own_base = area.clone();
        own_base[0] = 0x00;
        assert!(call_site_pads(&own_base, 0x1000).is_empty());
        let mut unknown = area.clone();
        unknown[3] = 0x07;
        assert!(call_site_pads(&unknown, 0x1000).is_empty());
        // A length that claims more than there is.
        let mut long = vec![0xff, 0xff, 0x01];
        uleb(u64::MAX, &mut long);
        assert!(call_site_pads(&long, 0x1000).is_empty());
        assert!(call_site_pads(&area, u64::MAX).is_empty());
    }
}
