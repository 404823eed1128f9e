//! The parts of an ELF64 file pack reads and writes back: the file header,
//! program and section headers, the dynamic entries and the relocation
//! table, read through `object` (which checks every size and bound) into
//! plain values the layout can change and the writer can serialise.

use crate::error::{Refusal, Refused};
use object::Endianness;
use object::elf as e;
use object::read::elf::{Dyn as _, FileHeader as _, ProgramHeader as _, SectionHeader as _};
use std::path::Path;

pub(crate) type FileHeader = e::FileHeader64<Endianness>;

/// Size of one program header, section header, dynamic entry, RELA entry.
pub(crate) const PHDR_SIZE: u64 = 56;
pub(crate) const SHDR_SIZE: u64 = 64;
pub(crate) const DYN_SIZE: u64 = 16;
pub(crate) const RELA_SIZE: u64 = 24;
pub(crate) const WORD: u64 = 8;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Segment {
    pub p_type: u32,
    pub p_flags: u32,
    pub p_offset: u64,
    pub p_vaddr: u64,
    pub p_paddr: u64,
    pub p_filesz: u64,
    pub p_memsz: u64,
    pub p_align: u64,
}

impl Segment {
    pub fn is_load(&self) -> bool {
        self.p_type == e::PT_LOAD.0
    }

    /// Whether `[address, address + len)` lies in the part backed by the file.
    pub fn holds_in_file(&self, address: u64, len: u64) -> bool {
        address >= self.p_vaddr
            && address
                .checked_add(len)
                .is_some_and(|end| end <= self.p_vaddr.saturating_add(self.p_filesz))
    }

    /// File offset of `address`, which must lie in the segment.
    pub fn offset_of(&self, address: u64) -> u64 {
        address - self.p_vaddr + self.p_offset
    }

    /// Physical address of `address`, which must lie in the segment. The
    /// loader ignores physical addresses, so any value wraps rather than
    /// overflows.
    pub fn paddr_of(&self, address: u64) -> u64 {
        self.p_paddr.wrapping_add(address - self.p_vaddr)
    }

    pub fn to_bytes(self) -> [u8; PHDR_SIZE as usize] {
        let mut out = [0u8; PHDR_SIZE as usize];
        put32(&mut out, 0, self.p_type);
        put32(&mut out, 4, self.p_flags);
        put64(&mut out, 8, self.p_offset);
        put64(&mut out, 16, self.p_vaddr);
        put64(&mut out, 24, self.p_paddr);
        put64(&mut out, 32, self.p_filesz);
        put64(&mut out, 40, self.p_memsz);
        put64(&mut out, 48, self.p_align);
        out
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Section {
    pub sh_name: u32,
    pub sh_type: u32,
    pub sh_flags: u64,
    pub sh_addr: u64,
    pub sh_offset: u64,
    pub sh_size: u64,
    pub sh_link: u32,
    pub sh_info: u32,
    pub sh_addralign: u64,
    pub sh_entsize: u64,
}

impl Section {
    /// Bytes the section takes in the file (none for NOBITS).
    pub fn file_size(&self) -> u64 {
        if self.sh_type == e::SHT_NOBITS.0 {
            0
        } else {
            self.sh_size
        }
    }

    pub fn to_bytes(self) -> [u8; SHDR_SIZE as usize] {
        let mut out = [0u8; SHDR_SIZE as usize];
        put32(&mut out, 0, self.sh_name);
        put32(&mut out, 4, self.sh_type);
        put64(&mut out, 8, self.sh_flags);
        put64(&mut out, 16, self.sh_addr);
        put64(&mut out, 24, self.sh_offset);
        put64(&mut out, 32, self.sh_size);
        put32(&mut out, 40, self.sh_link);
        put32(&mut out, 44, self.sh_info);
        put64(&mut out, 48, self.sh_addralign);
        put64(&mut out, 56, self.sh_entsize);
        out
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Rela {
    pub offset: u64,
    pub info: u64,
    pub addend: i64,
}

impl Rela {
    pub fn kind(&self) -> u32 {
        (self.info & 0xffff_ffff) as u32
    }

    pub fn symbol(&self) -> u32 {
        (self.info >> 32) as u32
    }

    pub fn to_bytes(self) -> [u8; RELA_SIZE as usize] {
        let mut out = [0u8; RELA_SIZE as usize];
        put64(&mut out, 0, self.offset);
        put64(&mut out, 8, self.info);
        put64(&mut out, 16, self.addend as u64);
        out
    }
}

/// An ELF64 little-endian file as pack sees it.
pub(crate) struct Elf<'data> {
    pub path: &'data Path,
    pub data: &'data [u8],
    pub e_type: u16,
    pub e_phoff: u64,
    pub e_shoff: u64,
    pub e_shstrndx: u16,
    pub segments: Vec<Segment>,
    pub sections: Vec<Section>,
    /// Index of PT_DYNAMIC in `segments`.
    pub dynamic_segment: usize,
    /// Entries before the first DT_NULL.
    pub dynamic: Vec<(i64, u64)>,
    /// Entries the dynamic segment has room for, DT_NULL included.
    pub dynamic_slots: u64,
}

impl<'data> Elf<'data> {
    pub fn parse(path: &'data Path, data: &'data [u8]) -> Result<Elf<'data>, Refused> {
        check_identification(path, data)?;
        let malformed =
            |err: object::read::Error| Refused::new(path, Refusal::Malformed(err.to_string()));
        let header = FileHeader::parse(data).map_err(malformed)?;
        let endian = header.endian().map_err(malformed)?;
        let file = HeaderReader {
            path,
            data,
            header,
            endian,
        };
        let e_machine = header.e_machine(endian).0;
        if e_machine != e::EM_X86_64.0 {
            return Err(file.refuse(Refusal::Machine(machine_name(e_machine))));
        }
        let segments = file.segments()?;
        let sections = file.sections()?;
        let e_shstrndx = header.e_shstrndx(endian).0;
        file.check_sections(&sections, e_shstrndx)?;
        file.check_segments(&segments)?;
        let Some(dynamic_segment) = segments.iter().position(|s| s.p_type == e::PT_DYNAMIC.0)
        else {
            return Err(file.refuse(Refusal::Static));
        };
        let dyn_seg = segments[dynamic_segment];
        let dynamic = file.dynamic_entries(dyn_seg)?;
        Ok(Elf {
            path,
            data,
            e_type: header.e_type(endian).0,
            e_phoff: header.e_phoff(endian),
            e_shoff: header.e_shoff(endian),
            e_shstrndx,
            segments,
            sections,
            dynamic_segment,
            dynamic,
            dynamic_slots: dyn_seg.p_filesz / DYN_SIZE,
        })
    }

    pub fn refused(&self, reason: Refusal) -> Refused {
        Refused::new(self.path, reason)
    }

    pub fn malformed(&self, detail: impl Into<String>) -> Refused {
        self.refused(Refusal::Malformed(detail.into()))
    }

    /// The first value of dynamic tag `tag`.
    pub fn dyn_value(&self, tag: i64) -> Option<u64> {
        self.dynamic
            .iter()
            .find(|(t, _)| *t == tag)
            .map(|&(_, v)| v)
    }

    pub fn has_tag(&self, tag: i64) -> bool {
        self.dyn_value(tag).is_some()
    }

    /// Index of the LOAD segment whose file part holds `[address, address + len)`.
    pub fn load_holding(&self, address: u64, len: u64) -> Option<usize> {
        self.segments
            .iter()
            .position(|s| s.is_load() && s.holds_in_file(address, len))
    }

    /// File bytes at `[address, address + len)`, if one LOAD segment holds them.
    pub fn bytes_at(&self, address: u64, len: u64) -> Option<&'data [u8]> {
        let segment = self.segments[self.load_holding(address, len)?];
        let start = segment.offset_of(address) as usize;
        self.data.get(start..start + len as usize)
    }

    /// The NUL-terminated string at `offset` in the dynamic string table.
    pub fn dynstr(&self, offset: u64) -> Option<&'data [u8]> {
        let table = self.bytes_at(
            self.dyn_value(e::DT_STRTAB.0)?,
            self.dyn_value(e::DT_STRSZ.0)?,
        )?;
        let rest = table.get(offset as usize..)?;
        let end = rest.iter().position(|&b| b == 0)?;
        Some(&rest[..end])
    }

    /// The RELA entries at `[address, address + size)`.
    pub fn relas(&self, address: u64, size: u64) -> Result<Vec<Rela>, Refused> {
        let bytes = self.bytes_at(address, size).ok_or_else(|| {
            self.malformed(format!(
                "relocation table at 0x{address:x} ({size} bytes) is not inside any loaded part of the file"
            ))
        })?;
        let entries: &[e::Rela64<Endianness>] =
            object::pod::slice_from_bytes(bytes, (size / RELA_SIZE) as usize)
                .map(|(entries, _)| entries)
                .map_err(|()| self.malformed("relocation table is not aligned"))?;
        let endian = Endianness::Little;
        Ok(entries
            .iter()
            .map(|r| Rela {
                offset: r.r_offset.get(endian),
                info: r.r_info.get(endian),
                addend: r.r_addend.get(endian),
            })
            .collect())
    }
}

/// Refuses all but 64-bit little-endian ELF, saying which it is.
fn check_identification(path: &Path, data: &[u8]) -> Result<(), Refused> {
    let refuse = |reason| Err(Refused::new(path, reason));
    if !data.starts_with(&e::ELFMAG) {
        return refuse(Refusal::NotElf);
    }
    match (data.get(4), data.get(5)) {
        (Some(&2), Some(&1)) => Ok(()), // ELFCLASS64, ELFDATA2LSB
        // ELFCLASS32
        (Some(&1), _) => refuse(Refusal::Machine("32-bit ELF".to_string())),
        // ELFDATA2MSB
        (Some(_), Some(&2)) => refuse(Refusal::Machine("big-endian ELF".to_string())),
        _ => refuse(Refusal::Malformed(
            "ELF identification is cut short or unknown".into(),
        )),
    }
}

/// Reads the headers of a file whose identification checked out, and
/// checks that what they describe lies in the file.
struct HeaderReader<'data> {
    path: &'data Path,
    data: &'data [u8],
    header: &'data FileHeader,
    endian: Endianness,
}

impl HeaderReader<'_> {
    fn refuse(&self, reason: Refusal) -> Refused {
        Refused::new(self.path, reason)
    }

    fn malformed(&self, detail: impl Into<String>) -> Refused {
        self.refuse(Refusal::Malformed(detail.into()))
    }

    fn segments(&self) -> Result<Vec<Segment>, Refused> {
        let endian = self.endian;
        Ok(self
            .header
            .program_headers(endian, self.data)
            .map_err(|err| self.malformed(err.to_string()))?
            .iter()
            .map(|ph| Segment {
                p_type: ph.p_type(endian).0,
                p_flags: ph.p_flags(endian).0,
                p_offset: ph.p_offset(endian),
                p_vaddr: ph.p_vaddr(endian),
                p_paddr: ph.p_paddr(endian),
                p_filesz: ph.p_filesz(endian),
                p_memsz: ph.p_memsz(endian),
                p_align: ph.p_align(endian),
            })
            .collect())
    }

    /// The section headers; extended section numbering is refused.
    fn sections(&self) -> Result<Vec<Section>, Refused> {
        let (header, endian) = (self.header, self.endian);
        let shnum = header
            .shnum(endian, self.data)
            .map_err(|err| self.malformed(err.to_string()))?;
        if header.e_shnum(endian) == 0 && shnum != 0 {
            return Err(self.refuse(Refusal::Unsupported(
                "more than 65,279 sections (extended section numbering)".into(),
            )));
        }
        if header.e_shstrndx(endian).0 == e::SHN_XINDEX.0 {
            return Err(self.refuse(Refusal::Unsupported(
                "section name table index in extended numbering".into(),
            )));
        }
        Ok(header
            .section_headers(endian, self.data)
            .map_err(|err| self.malformed(err.to_string()))?
            .iter()
            .map(|sh| Section {
                sh_name: sh.sh_name(endian),
                sh_type: sh.sh_type(endian).0,
                sh_flags: sh.sh_flags(endian).0,
                sh_addr: sh.sh_addr(endian),
                sh_offset: sh.sh_offset(endian),
                sh_size: sh.sh_size(endian),
                sh_link: sh.sh_link(endian),
                sh_info: sh.sh_info(endian),
                sh_addralign: sh.sh_addralign(endian),
                sh_entsize: sh.sh_entsize(endian),
            })
            .collect())
    }

    /// The name table is one of the sections, and every section's bytes
    /// lie in the file.
    fn check_sections(&self, sections: &[Section], e_shstrndx: u16) -> Result<(), Refused> {
        if !sections.is_empty() && usize::from(e_shstrndx) >= sections.len() {
            return Err(self.malformed(format!(
                "section name table index {e_shstrndx} is past the {} section headers",
                sections.len()
            )));
        }
        for (i, section) in sections.iter().enumerate() {
            let end = section.sh_offset.checked_add(section.file_size());
            if end.is_none_or(|end| end > self.data.len() as u64) {
                return Err(self.malformed(format!(
                    "section {i} (offset 0x{:x}, size 0x{:x}) runs past the end of the file",
                    section.sh_offset, section.sh_size
                )));
            }
        }
        Ok(())
    }

    /// Every segment's bytes lie in the file, and each LOAD segment fits
    /// its memory and the address space.
    fn check_segments(&self, segments: &[Segment]) -> Result<(), Refused> {
        for (i, segment) in segments.iter().enumerate() {
            let end = segment.p_offset.checked_add(segment.p_filesz);
            if end.is_none_or(|end| end > self.data.len() as u64) {
                return Err(self.malformed(format!(
                    "program header {i} (offset 0x{:x}, size 0x{:x}) runs past the end of the file",
                    segment.p_offset, segment.p_filesz
                )));
            }
            if segment.is_load() && segment.p_filesz > segment.p_memsz {
                return Err(self.malformed(format!(
                    "LOAD segment {i} has more bytes in the file than in memory"
                )));
            }
            if segment.is_load() && segment.p_vaddr.checked_add(segment.p_memsz).is_none() {
                return Err(self.malformed(format!(
                    "LOAD segment {i} (address 0x{:x}, size 0x{:x}) runs past the end of the address space",
                    segment.p_vaddr, segment.p_memsz
                )));
            }
        }
        Ok(())
    }

    /// The dynamic segment's entries before its DT_NULL, which it must
    /// have. The segment was checked to lie in the file.
    fn dynamic_entries(&self, dyn_seg: Segment) -> Result<Vec<(i64, u64)>, Refused> {
        let dyn_bytes =
            &self.data[dyn_seg.p_offset as usize..(dyn_seg.p_offset + dyn_seg.p_filesz) as usize];
        let entries: &[e::Dyn64<Endianness>] =
            object::pod::slice_from_bytes(dyn_bytes, dyn_bytes.len() / DYN_SIZE as usize)
                .map(|(entries, _)| entries)
                .map_err(|()| self.malformed("dynamic segment is not aligned"))?;
        let mut dynamic = Vec::new();
        for entry in entries {
            let tag = entry.d_tag(self.endian).0;
            if tag == e::DT_NULL.0 {
                return Ok(dynamic);
            }
            dynamic.push((tag, entry.d_val(self.endian)));
        }
        Err(self.malformed("dynamic section has no DT_NULL terminator"))
    }
}

fn machine_name(machine: u16) -> String {
    match e::Machine(machine) {
        e::EM_386 => "i386".to_string(),
        e::EM_AARCH64 => "AArch64".to_string(),
        e::EM_ARM => "ARM".to_string(),
        e::EM_RISCV => "RISC-V".to_string(),
        e::EM_PPC64 => "PowerPC64".to_string(),
        e::EM_S390 => "s390".to_string(),
        e::EM_LOONGARCH => "LoongArch".to_string(),
        other => format!("machine {other}"),
    }
}

pub(crate) fn put16(out: &mut [u8], at: usize, value: u16) {
    out[at..at + 2].copy_from_slice(&value.to_le_bytes());
}

pub(crate) fn put32(out: &mut [u8], at: usize, value: u32) {
    out[at..at + 4].copy_from_slice(&value.to_le_bytes());
}

pub(crate) fn put64(out: &mut [u8], at: usize, value: u64) {
    out[at..at + 8].copy_from_slice(&value.to_le_bytes());
}

pub(crate) fn get16(data: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(data.get(at..at + 2)?.try_into().ok()?))
}

pub(crate) fn get32(data: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(data.get(at..at + 4)?.try_into().ok()?))
}
