//! GNU build-ids read from ELF files without disturbing the page cache:
//! recording a run names each file's build, and replaying a plan checks
//! that a file is still the build the plan was made from.

use crate::cache;
use crate::path_handle::{self, Symlinks};
use std::fs::File;
use std::path::Path;

/// Whether the file at `path` is an ELF file: its first four bytes, read
/// plainly (the page is read from the disk when not cached). Only a regular
/// file is opened ([`path_handle::open_regular`]): a FIFO put where a
/// program was never blocks the caller.
pub fn is_elf_file(path: &Path) -> bool {
    let mut magic = [0u8; 4];
    path_handle::open_regular(path, Symlinks::Follow)
        .is_ok_and(|mut f| std::io::Read::read_exact(&mut f, &mut magic).is_ok())
        && magic == *b"\x7fELF"
}

/// The GNU build-id of an ELF file, as hex, read without disturbing the
/// page cache: only from the ELF header and PT_NOTE segments, and only when
/// the pages holding them are already resident (the traced program read
/// them), so recording a run never makes more of a file resident.
pub fn build_id(path: &Path) -> Option<String> {
    let file = File::open(path).ok()?;
    let cached = cache::resident_pages_fd(&file, path).ok()?;
    let page = cached.page_size as usize;
    read_build_id(&file, &|start: usize, end: usize| {
        (start / page..end.div_ceil(page)).all(|p| cached.contains(p as u64))
    })
}

/// The GNU build-id of an open ELF file, as hex, reading the pages that hold
/// its ELF header, program headers and notes if they are not resident, and
/// nothing around them (no readahead: a readahead window would also leave a
/// mark whose first touch by another reader starts a larger window).
pub fn build_id_of_open(file: &File) -> Option<String> {
    read_build_id(file, &|_, _| true)
}

/// The build-id from the parts of `file` for which `readable(start, end)`
/// holds (byte ranges, already clamped to the file).
fn read_build_id(file: &File, readable: &dyn Fn(usize, usize) -> bool) -> Option<String> {
    // SAFETY: read-only map; a concurrent truncation would SIGBUS, the
    // same risk every ELF reader takes.
    let map = unsafe { memmap2::Mmap::map(file) }.ok()?;
    // No readahead around what we do read.
    let _ = map.advise(memmap2::Advice::Random);
    let data: &[u8] = &map;
    let resident = |start: usize, end: usize| {
        let end = end.min(data.len());
        start <= end && readable(start, end)
    };
    if !resident(0, 64.min(data.len())) || data.get(..4)? != b"\x7fELF" {
        return None;
    }
    match data.get(4)? {
        1 => build_id_of::<object::elf::FileHeader32<object::Endianness>>(data, &resident),
        2 => build_id_of::<object::elf::FileHeader64<object::Endianness>>(data, &resident),
        _ => None,
    }
}

fn build_id_of<H: object::read::elf::FileHeader<Endian = object::Endianness>>(
    data: &[u8],
    resident: &dyn Fn(usize, usize) -> bool,
) -> Option<String> {
    use object::read::elf::ProgramHeader;
    let header = H::parse(data).ok()?;
    let endian = header.endian().ok()?;
    let phoff: u64 = header.e_phoff(endian).into();
    let phsize = usize::from(header.e_phentsize(endian)) * usize::from(header.e_phnum(endian));
    if !resident(phoff as usize, (phoff as usize).checked_add(phsize)?) {
        return None;
    }
    for segment in header.program_headers(endian, data).ok()? {
        if segment.p_type(endian) != object::elf::PT_NOTE {
            continue;
        }
        let (offset, size) = segment.file_range(endian);
        if !resident(
            offset as usize,
            (offset as usize).checked_add(size as usize)?,
        ) {
            continue;
        }
        let Ok(Some(mut notes)) = segment.notes(endian, data) else {
            continue;
        };
        while let Ok(Some(note)) = notes.next() {
            if note.name() == b"GNU" && note.n_type(endian) == object::elf::NT_GNU_BUILD_ID {
                return Some(note.desc().iter().map(|b| format!("{b:02x}")).collect());
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// The answer of `is_elf_file(path)`, or `None` when it did not come
    /// within 5 s (the call blocked).
    fn answer_of(path: &Path) -> Option<bool> {
        let (tx, rx) = std::sync::mpsc::channel();
        let path = path.to_path_buf();
        std::thread::spawn(move || tx.send(is_elf_file(&path)));
        rx.recv_timeout(Duration::from_secs(5)).ok()
    }

    #[test]
    fn only_a_regular_file_that_starts_as_elf_is_one_and_nothing_blocks() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        coldstart_testkit::run_ok(std::process::Command::new("mkfifo").arg(&fifo));
        // Opened for reading, a FIFO with no writer would block for ever.
        assert_eq!(answer_of(&fifo), Some(false));
        assert_eq!(answer_of(Path::new("/dev/null")), Some(false));
        assert_eq!(answer_of(dir.path()), Some(false));
        let elf = dir.path().join("elf");
        std::fs::write(&elf, b"\x7fELF\x02\x01").unwrap();
        assert_eq!(answer_of(&elf), Some(true));
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&elf, &link).unwrap();
        assert_eq!(answer_of(&link), Some(true));
        std::fs::write(&elf, b"#!/bin/sh\n").unwrap();
        assert_eq!(answer_of(&elf), Some(false));
    }
}
