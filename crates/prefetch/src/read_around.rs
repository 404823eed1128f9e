//! `--no-read-around`: a fault on a data page of a planned file reads that
//! page, not a readahead window around it. The kernel allows this for
//! non-executable file mappings only (MADV_RANDOM sets VM_RAND_READ, which
//! mm/filemap.c do_sync_mmap_readahead honours unless the mapping is VM_EXEC),
//! and only the process that owns the mapping can ask (process_madvise takes
//! no MADV_RANDOM). So the started program carries a small LD_AUDIT module
//! (audit/no_read_around.c) that advises each planned shared object's
//! non-executable segments as the loader maps them, before relocation, and
//! binds the program's calls of libc's mmap to a wrapper that advises the
//! non-executable mappings it makes of planned files (archives, fonts).
//!
//! This file installs the module and the list of planned files in a per-user
//! directory, named by content, and gives the environment that loads them.

use crate::model::Plan;
use std::ffi::{OsStr, OsString};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The module's bytes, built by build.rs; empty when it could not be built.
pub const MODULE: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/no_read_around.so"));

/// Names the file of planned paths the module reads (one per line).
pub const LIST_VARIABLE: &str = "COLDSTART_NO_READ_AROUND_FILES";

/// The variable glibc's loader takes audit modules from, colon-separated.
pub const AUDIT_VARIABLE: &str = "LD_AUDIT";

/// The variables to add to the program's environment, given the LD_AUDIT it
/// already has: the module goes after any the caller set.
pub fn environment(
    plan: &Plan,
    existing_audit: Option<&OsStr>,
) -> Result<Vec<(&'static str, OsString)>, String> {
    if MODULE.is_empty() {
        return Err("this build has no audit module (it was built without a C compiler)".into());
    }
    let directory = private_directory()?;
    let module = install(&directory, "no-read-around", ".so", MODULE)?;
    let list = install(&directory, "no-read-around-files", "", &planned_paths(plan))?;
    let mut audit = OsString::new();
    if let Some(existing) = existing_audit.filter(|value| !value.is_empty()) {
        audit.push(existing);
        audit.push(":");
    }
    audit.push(&module);
    Ok(vec![
        (AUDIT_VARIABLE, audit),
        (LIST_VARIABLE, list.into_os_string()),
    ])
}

/// The plan's paths as the module compares them: the canonical path of each
/// object ld.so maps (read back from /proc/self/fd), one per line.
fn planned_paths(plan: &Plan) -> Vec<u8> {
    let mut paths: Vec<&str> = plan
        .files
        .iter()
        .map(|file| file.path.as_str())
        .filter(|path| path.starts_with('/') && !path.contains('\n'))
        .collect();
    paths.sort_unstable();
    paths.dedup();
    paths
        .iter()
        .flat_map(|path| [path.as_bytes(), b"\n"])
        .flatten()
        .copied()
        .collect()
}

/// `$XDG_CACHE_HOME/coldstart`, `~/.cache/coldstart` or `/tmp/coldstart-UID`,
/// created if missing, and refused unless this user owns it and no one else
/// may write to it: the program will load code from it.
fn private_directory() -> Result<PathBuf, String> {
    let uid = coldstart_system::process::effective_uid();
    let nonempty = |name| std::env::var_os(name).filter(|value| !value.is_empty());
    let directory = nonempty("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| nonempty("HOME").map(|home| PathBuf::from(home).join(".cache")))
        .map(|cache| cache.join("coldstart"))
        .unwrap_or_else(|| PathBuf::from(format!("/tmp/coldstart-{uid}")));
    if let Err(e) = std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&directory)
    {
        return Err(format!("cannot create {}: {e}", directory.display()));
    }
    let meta = std::fs::symlink_metadata(&directory)
        .map_err(|e| format!("cannot read {}: {e}", directory.display()))?;
    if !meta.is_dir() || meta.uid() != uid || meta.mode() & 0o022 != 0 {
        return Err(format!(
            "{} is not a directory that only this user (uid {uid}) can write to",
            directory.display()
        ));
    }
    Ok(directory)
}

/// Puts `bytes` at `directory/STEM-HASH SUFFIX`, readable by all, unless an
/// identical file is already there: written to a temporary name and renamed,
/// so a reader never sees half a file.
fn install(directory: &Path, stem: &str, suffix: &str, bytes: &[u8]) -> Result<PathBuf, String> {
    let path = directory.join(format!("{stem}-{:016x}{suffix}", fnv1a(bytes)));
    if let Ok(existing) = std::fs::read(&path)
        && existing == bytes
        && std::fs::symlink_metadata(&path).is_ok_and(|meta| meta.file_type().is_file())
    {
        return Ok(path);
    }
    let temporary = directory.join(format!(".{stem}.{}.tmp", std::process::id()));
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o644)
        .open(&temporary)
        .and_then(|mut file| {
            file.set_permissions(std::fs::Permissions::from_mode(0o644))?;
            file.write_all(bytes)
        })
        .and_then(|()| std::fs::rename(&temporary, &path));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&temporary);
        return Err(format!("cannot write {}: {e}", path.display()));
    }
    Ok(path)
}

/// A content hash for file names (FNV-1a, 64 bits); the bytes are compared
/// before reuse, so a collision costs a rewrite, never a wrong file.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{PlanFile, PlanSource};

    fn plan(paths: &[&str]) -> Plan {
        Plan {
            page_size: 4096,
            source: PlanSource {
                profile: String::new(),
                runs: Vec::new(),
                min_runs: 1,
                merge_gap_pages: 0,
                max_extent_pages: 1,
                max_bytes: None,
                pages_from: String::new(),
            },
            files: paths
                .iter()
                .map(|path| PlanFile {
                    path: path.to_string(),
                    size: 1,
                    mtime_ns: None,
                    build_id: None,
                })
                .collect(),
            extents: Vec::new(),
            lookups: Vec::new(),
        }
    }

    #[test]
    fn the_list_holds_each_absolute_path_once_per_line() {
        let listed = planned_paths(&plan(&["/b", "/a", "relative", "/a", "/new\nline"]));
        assert_eq!(listed, b"/a\n/b\n");
    }

    #[test]
    fn installing_twice_reuses_the_file_and_other_bytes_get_another_name() {
        let directory = tempfile::tempdir().unwrap();
        let first = install(directory.path(), "x", ".so", b"one").unwrap();
        let modified = std::fs::metadata(&first).unwrap().modified().unwrap();
        assert_eq!(
            install(directory.path(), "x", ".so", b"one").unwrap(),
            first
        );
        assert_eq!(
            std::fs::metadata(&first).unwrap().modified().unwrap(),
            modified
        );
        let second = install(directory.path(), "x", ".so", b"two").unwrap();
        assert_ne!(second, first);
        assert_eq!(std::fs::read(&second).unwrap(), b"two");
        assert_eq!(std::fs::metadata(&second).unwrap().mode() & 0o777, 0o644);
        // A file changed in place is rewritten, not trusted.
        std::fs::write(&first, b"tampered").unwrap();
        assert_eq!(
            install(directory.path(), "x", ".so", b"one").unwrap(),
            first
        );
        assert_eq!(std::fs::read(&first).unwrap(), b"one");
    }

    #[test]
    fn the_module_is_built_and_needs_no_library() {
        // The ELF magic, and no DT_NEEDED: ld.so must not load a second libc.
        assert_eq!(&MODULE[..4], b"\x7fELF");
        let directory = tempfile::tempdir().unwrap();
        let module = directory.path().join("m.so");
        std::fs::write(&module, MODULE).unwrap();
        let dynamic = std::process::Command::new("readelf")
            .arg("-dW")
            .arg(&module)
            .output();
        let Ok(dynamic) = dynamic else {
            return coldstart_testkit::skip("no readelf");
        };
        let text = String::from_utf8_lossy(&dynamic.stdout);
        assert!(text.contains("(SONAME)"), "{text}");
        assert!(!text.contains("(NEEDED)"), "{text}");
    }

    #[test]
    fn an_existing_audit_list_is_kept_first() {
        let home = tempfile::tempdir().unwrap();
        // SAFETY: only this test reads XDG_CACHE_HOME in this process.
        unsafe { std::env::set_var("XDG_CACHE_HOME", home.path()) };
        let env = environment(&plan(&["/lib/a.so"]), Some(OsStr::new("/x/other.so"))).unwrap();
        let audit = env[0].1.to_str().unwrap();
        assert_eq!(env[0].0, AUDIT_VARIABLE);
        let (first, ours) = audit.split_once(':').unwrap();
        assert_eq!(first, "/x/other.so");
        assert_eq!(std::fs::read(ours).unwrap(), MODULE);
        assert_eq!(env[1].0, LIST_VARIABLE);
        assert_eq!(std::fs::read(&env[1].1).unwrap(), b"/lib/a.so\n");
    }
}
