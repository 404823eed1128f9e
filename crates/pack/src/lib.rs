//! coldstart's pack room: rewrites an already-linked ELF file so that its
//! relative relocations are a DT_RELR table, as `-z pack-relative-relocs`
//! would have linked them, without the build.
//!
//! What changes, and what does not:
//! - The relative relocations RELR can express (x86-64 R_X86_64_RELATIVE at
//!   a word-aligned address in a writable segment's file bytes) leave the
//!   RELA table; their addends are written into the relocated words, which
//!   RELR adds the load base to. Every other relocation stays, in order.
//! - The kept RELA table, the RELR table and whatever has to grow (the
//!   version need glibc insists on, the string naming it, the program
//!   headers, the dynamic section when it has no spare slot) go into the
//!   space the old RELA table took, in the same read-only segment. No code
//!   or data address moves.
//! - The freed bytes are given back: whole pages are cut out of the file and
//!   every later file offset shifts by a multiple of the segment alignment,
//!   so each segment's offset and address stay congruent; the segment that
//!   held the table is split around the cut. What is smaller than that stays
//!   as zeros nothing reads.
//! - The dynamic section stays in place when the new entries fit. When they
//!   do not, it moves to its own writable page in the freed space: ld.so
//!   writes DT_DEBUG into an executable's dynamic section, so it must stay
//!   writable.

mod elf;
mod error;
mod layout;
mod version;
mod write;

pub use error::{Error, Refusal, Refused};

use serde::Serialize;
use std::fs;
use std::io::Write as _;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// What packing did, or would do, to one file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Report {
    pub input: PathBuf,
    /// None for a dry run.
    pub output: Option<PathBuf>,
    /// Relative relocations moved into the RELR table.
    pub relative_packed: u64,
    /// Relocations left in the RELA table (relative ones RELR cannot
    /// express, then every other kind).
    pub relocations_kept: u64,
    /// Of those, relative ones (DT_RELACOUNT).
    pub relative_kept: u64,
    pub rela_bytes_before: u64,
    pub rela_bytes_after: u64,
    pub relr_bytes: u64,
    pub file_bytes_before: u64,
    pub file_bytes_after: u64,
    /// Pages the relocation tables span, which the loader reads at every
    /// start (the PLT table, unchanged, is not counted).
    pub loader_pages_before: u64,
    pub loader_pages_after: u64,
    /// Bytes cut out of the file.
    pub compacted_bytes: u64,
    /// Freed bytes left in the file as zeros nothing reads (less than a
    /// segment alignment, or between the tables and the cut).
    pub hole_bytes: u64,
    /// `in-place` or `writable-segment`.
    pub dynamic: &'static str,
    pub version_need_added: bool,
    /// LOAD segments added by splitting the one that held the tables.
    pub load_segments_added: u32,
}

/// Packs `data` (the contents of `path`), returning the new file's bytes.
/// The result is checked by reading it back with coldstart's ELF model: the
/// relocations it lists must be the original's.
pub fn pack_bytes(path: &Path, data: &[u8]) -> Result<(Vec<u8>, Report), Refused> {
    let elf = elf::Elf::parse(path, data)?;
    let layout = layout::plan(&elf)?;
    let bytes = write::write(&elf, &layout);
    let report = layout.report(path, data.len() as u64, bytes.len() as u64);
    check::read_back(path, data, &bytes, &report)?;
    Ok((bytes, report))
}

/// Packs the file at `input` into `output` (a temporary file beside it,
/// renamed when complete, with the input's mode); with `output` None, only
/// reports. The input is never written.
pub fn pack_file(input: &Path, output: Option<&Path>) -> Result<Report, Error> {
    let data = read_input(input)?;
    if let Some(output) = output {
        refuse_same_file(input, output)?;
    }
    let (bytes, mut report) = pack_bytes(input, &data)?;
    let Some(output) = output else {
        return Ok(report);
    };
    let mode = fs::metadata(input)
        .map_err(|source| Error::Io {
            path: input.to_path_buf(),
            what: "reading its mode",
            source,
        })?
        .permissions()
        .mode();
    write_atomically(output, &bytes, mode)?;
    report.output = Some(output.to_path_buf());
    Ok(report)
}

fn read_input(input: &Path) -> Result<Vec<u8>, Error> {
    let meta = fs::metadata(input).map_err(|source| unreadable(input, &source))?;
    if meta.is_dir() {
        return Err(Refused::new(
            input,
            Refusal::Unreadable("is a directory, not an ELF file".into()),
        )
        .into());
    }
    if !meta.is_file() {
        return Err(
            Refused::new(input, Refusal::Unreadable("is not a regular file".into())).into(),
        );
    }
    fs::read(input).map_err(|source| unreadable(input, &source))
}

fn unreadable(path: &Path, source: &std::io::Error) -> Error {
    let detail = match source.kind() {
        std::io::ErrorKind::NotFound => "no such file".to_string(),
        std::io::ErrorKind::PermissionDenied => {
            "permission denied (run as a user who may read it, or fix its mode)".to_string()
        }
        _ => source.to_string(),
    };
    Refused::new(path, Refusal::Unreadable(detail)).into()
}

/// The output must not be the input under another name: pack never
/// rewrites its input in place.
fn refuse_same_file(input: &Path, output: &Path) -> Result<(), Error> {
    use std::os::unix::fs::MetadataExt;
    let (Ok(a), Ok(b)) = (fs::metadata(input), fs::metadata(output)) else {
        return Ok(());
    };
    if a.dev() == b.dev() && a.ino() == b.ino() {
        return Err(Error::Output {
            path: output.to_path_buf(),
            detail: format!(
                "is the input {} itself: pack never rewrites its input; write elsewhere and rename",
                input.display()
            ),
        });
    }
    Ok(())
}

/// Writes `bytes` to a temporary file in `output`'s directory and renames it
/// over `output` once it is complete and flushed.
fn write_atomically(output: &Path, bytes: &[u8], mode: u32) -> Result<(), Error> {
    let dir = match output.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let io = |what: &'static str| {
        move |source| Error::Io {
            path: output.to_path_buf(),
            what,
            source,
        }
    };
    let name = output
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut temp = tempfile::Builder::new()
        .prefix(&format!(".{name}."))
        .suffix(".cs-pack")
        .tempfile_in(&dir)
        .map_err(io("creating a temporary file beside it"))?;
    temp.write_all(bytes).map_err(io("writing"))?;
    temp.as_file()
        .set_permissions(fs::Permissions::from_mode(mode & 0o7777))
        .map_err(io("setting its mode"))?;
    temp.as_file().sync_all().map_err(io("flushing"))?;
    temp.persist(output)
        .map_err(|err| io("renaming the finished file into place")(err.error))?;
    Ok(())
}

mod check {
    //! Reads the packed bytes back through coldstart's ELF model (the same
    //! reader `inspect` uses) and insists that they relocate exactly what the
    //! original did: a mistake in the writer is caught here, before anything
    //! is written.

    use super::Report;
    use crate::error::{Refusal, Refused};
    use coldstart_binary::{InspectOptions, inspect_bytes};
    use std::path::Path;

    pub(super) fn read_back(
        path: &Path,
        original: &[u8],
        packed: &[u8],
        report: &Report,
    ) -> Result<(), Refused> {
        let options = InspectOptions::default();
        let fail = |detail: String| {
            Refused::new(
                path,
                Refusal::Unsupported(format!(
                    "the rewritten file did not read back as the original ({detail}); nothing was written"
                )),
            )
        };
        let before =
            inspect_bytes(path, original, &options).map_err(|err| fail(err.to_string()))?;
        let after = inspect_bytes(path, packed, &options).map_err(|err| fail(err.to_string()))?;
        let (b, a) = (&before.relocations, &after.relocations);
        if a.relr_offsets.len() as u64 != report.relative_packed {
            return Err(fail(format!(
                "{} RELR addresses instead of {}",
                a.relr_offsets.len(),
                report.relative_packed
            )));
        }
        if a.total != b.total {
            return Err(fail(format!(
                "{} relocations instead of {}",
                a.total, b.total
            )));
        }
        if a.relative != b.relative || a.symbolic != b.symbolic {
            return Err(fail("the relative and symbolic counts changed".to_string()));
        }
        let dynamic = after
            .dynamic
            .as_ref()
            .ok_or_else(|| fail("no dynamic section".into()))?;
        if !dynamic.relr {
            return Err(fail("no DT_RELR".into()));
        }
        if report.version_need_added && !dynamic.relr_version_need {
            return Err(fail("no GLIBC_ABI_DT_RELR version need".into()));
        }
        Ok(())
    }
}
