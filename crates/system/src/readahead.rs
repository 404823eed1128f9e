//! A temporary readahead setting for every backing device, for a traced run
//! that should read only what the program demands.
//!
//! With `read_ahead_kb` at 0 the kernel reads exactly the page a fault needs
//! and exactly the range a `read()` asks for, so the pages a cold start reads
//! are the pages it touches (fault-around still maps neighbours, but only
//! ones already cached, which something demanded). That is the "touched"
//! figure BENCHMARKS.md measures, and what a prefetch plan should read.
//!
//! The setting is per device (backing device info, `/sys/class/bdi`), so it
//! affects every process while the run lasts. The original values are
//! written to `/run/coldstart/readahead-<pid>` before anything changes and
//! put back when the [`ReadaheadOverride`] is dropped; a coldstart that was
//! killed before it could do that has its values restored by the next one
//! ([`restore_stale`]).
//!
//! Also reads one device's setting, which profiles and benchmarks record.

use crate::proc;
use std::fmt::Write as _;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

const BDI_DIR: &str = "/sys/class/bdi";
const STATE_DIR: &str = "/run/coldstart";
const STATE_PREFIX: &str = "readahead-";

/// Changing or restoring readahead failed.
#[derive(Debug, thiserror::Error)]
pub enum ReadaheadError {
    #[error("{}: {what}: {source}", path.display())]
    Io {
        path: PathBuf,
        what: &'static str,
        source: io::Error,
    },
    #[error(
        "another coldstart (pid {pid}) is overriding readahead right now; run one --readahead trace at a time"
    )]
    Busy { pid: i32 },
    #[error("{}: no backing devices with a read_ahead_kb setting", BDI_DIR)]
    NoDevices,
}

fn io_err<'a>(path: &'a Path, what: &'static str) -> impl FnOnce(io::Error) -> ReadaheadError + 'a {
    move |source| ReadaheadError::Io {
        path: path.to_path_buf(),
        what,
        source,
    }
}

/// One device's setting as it was before the override.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Saved {
    /// `/sys/class/bdi/<major:minor>/read_ahead_kb`.
    pub path: PathBuf,
    pub read_ahead_kb: u64,
}

/// Every device set to one readahead size until this is dropped.
#[derive(Debug)]
pub struct ReadaheadOverride {
    saved: Vec<Saved>,
    state: PathBuf,
    read_ahead_kb: u64,
}

impl ReadaheadOverride {
    /// Sets `read_ahead_kb` of every backing device to `kb`.
    pub fn set_all(kb: u64) -> Result<ReadaheadOverride, ReadaheadError> {
        Self::set_all_in(Path::new(BDI_DIR), Path::new(STATE_DIR), kb)
    }

    /// [`ReadaheadOverride::set_all`] with other directories (for tests).
    pub fn set_all_in(
        bdi_dir: &Path,
        state_dir: &Path,
        kb: u64,
    ) -> Result<ReadaheadOverride, ReadaheadError> {
        restore_stale_in(state_dir);
        if let Some(pid) = live_owner(state_dir) {
            return Err(ReadaheadError::Busy { pid });
        }
        let mut saved = Vec::new();
        let entries = fs::read_dir(bdi_dir).map_err(io_err(bdi_dir, "list devices"))?;
        for entry in entries.flatten() {
            let path = entry.path().join("read_ahead_kb");
            let Ok(text) = fs::read_to_string(&path) else {
                continue;
            };
            let Ok(read_ahead_kb) = text.trim().parse() else {
                continue;
            };
            saved.push(Saved {
                path,
                read_ahead_kb,
            });
        }
        if saved.is_empty() {
            return Err(ReadaheadError::NoDevices);
        }
        saved.sort_by(|a, b| a.path.cmp(&b.path));

        fs::create_dir_all(state_dir).map_err(io_err(state_dir, "create"))?;
        let state = state_dir.join(format!("{STATE_PREFIX}{}", std::process::id()));
        fs::write(&state, encode(&saved)).map_err(io_err(&state, "write"))?;
        let over = ReadaheadOverride {
            saved,
            state,
            read_ahead_kb: kb,
        };
        for device in &over.saved {
            // On failure, drop restores what was already changed.
            fs::write(&device.path, kb.to_string()).map_err(io_err(&device.path, "write"))?;
        }
        Ok(over)
    }

    /// The value every device has while this lives.
    pub fn read_ahead_kb(&self) -> u64 {
        self.read_ahead_kb
    }

    /// The settings that will be put back.
    pub fn saved(&self) -> &[Saved] {
        &self.saved
    }
}

impl Drop for ReadaheadOverride {
    fn drop(&mut self) {
        if restore(&self.saved).is_empty() {
            let _ = fs::remove_file(&self.state);
        }
    }
}

/// Writes the saved values back; returns the devices that failed.
fn restore(saved: &[Saved]) -> Vec<PathBuf> {
    saved
        .iter()
        .filter(|d| {
            // A device that went away needs nothing restored.
            d.path.parent().is_some_and(Path::exists)
                && fs::write(&d.path, d.read_ahead_kb.to_string()).is_err()
        })
        .map(|d| d.path.clone())
        .collect()
}

fn encode(saved: &[Saved]) -> String {
    let mut out = String::new();
    for device in saved {
        let _ = writeln!(out, "{}\t{}", device.read_ahead_kb, device.path.display());
    }
    out
}

fn decode(text: &str) -> Vec<Saved> {
    text.lines()
        .filter_map(|line| {
            let (kb, path) = line.split_once('\t')?;
            Some(Saved {
                path: PathBuf::from(path),
                read_ahead_kb: kb.parse().ok()?,
            })
        })
        .collect()
}

fn owners(state_dir: &Path) -> Vec<(i32, PathBuf)> {
    let Ok(entries) = fs::read_dir(state_dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name();
            let pid = name.to_str()?.strip_prefix(STATE_PREFIX)?.parse().ok()?;
            Some((pid, entry.path()))
        })
        .collect()
}

fn alive(pid: i32) -> bool {
    pid as u32 == std::process::id() || proc::process_exists(pid)
}

fn live_owner(state_dir: &Path) -> Option<i32> {
    owners(state_dir)
        .into_iter()
        .map(|(pid, _)| pid)
        .find(|&pid| alive(pid))
}

/// Restores readahead settings a dead coldstart left changed; returns the
/// devices restored.
pub fn restore_stale() -> Vec<PathBuf> {
    restore_stale_in(Path::new(STATE_DIR))
}

/// [`restore_stale`] with another state directory (for tests).
pub fn restore_stale_in(state_dir: &Path) -> Vec<PathBuf> {
    let mut restored = Vec::new();
    for (pid, state) in owners(state_dir) {
        if alive(pid) {
            continue;
        }
        let Ok(text) = fs::read_to_string(&state) else {
            continue;
        };
        let saved = decode(&text);
        if restore(&saved).is_empty() {
            let _ = fs::remove_file(&state);
            restored.extend(saved.into_iter().map(|d| d.path));
        }
    }
    restored
}

/// The read_ahead_kb the kernel reads `program` (looked up in PATH when it
/// has no slash) ahead by: its block device's; on btrfs (whose files carry
/// a subvolume's device, no block device's) the filesystem's own setting;
/// on an overlay, that of the layer file holding its pages.
pub fn read_ahead_kb_for(program: &Path) -> Option<u64> {
    let path = fs::canonicalize(crate::launch::resolve_program(program)?).ok()?;
    read_ahead_kb_of_file(&path).or_else(|| {
        let layer = crate::filesystem::Overlays::here().layer_file(&path)?;
        read_ahead_kb_of_file(&layer)
    })
}

/// The read_ahead_kb a file on a block device or on btrfs is read ahead by.
fn read_ahead_kb_of_file(path: &Path) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    let dev = fs::metadata(path).ok()?.dev();
    read_ahead_kb_of_device(dev).or_else(|| btrfs_read_ahead_kb(path))
}

/// btrfs reads a file ahead by its filesystem's own backing device info
/// (/sys/fs/btrfs/UUID/bdi, 4 MiB unless set), not by a device's: found
/// through the filesystem whose devices include the mount's source.
fn btrfs_read_ahead_kb(path: &Path) -> Option<u64> {
    let canonical = fs::canonicalize(path).ok()?;
    let mount = crate::proc::mountinfo(None)
        .into_iter()
        .filter(|m| canonical.starts_with(&m.target))
        .max_by_key(|m| m.target.as_os_str().len())?;
    if mount.fstype != "btrfs" {
        return None;
    }
    let device = fs::canonicalize(&mount.source).ok()?;
    let name = device.file_name()?;
    fs::read_dir("/sys/fs/btrfs")
        .ok()?
        .flatten()
        .find(|fs| fs.path().join("devices").join(name).exists())
        .and_then(|fs| fs::read_to_string(fs.path().join("bdi/read_ahead_kb")).ok())
        .and_then(|text| text.trim().parse().ok())
}

/// read_ahead_kb of a device (a partition reports its disk's).
pub fn read_ahead_kb_of_device(dev: u64) -> Option<u64> {
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    let base = PathBuf::from(format!("/sys/dev/block/{major}:{minor}"));
    [
        base.join("queue/read_ahead_kb"),
        base.join("../queue/read_ahead_kb"),
    ]
    .iter()
    .find_map(|p| fs::read_to_string(p).ok())
    .and_then(|t| t.trim().parse().ok())
}

/// The most bytes one readahead(2) or fadvise(WILLNEED) call reads on a
/// device: the kernel clips each call to the larger of the device's
/// largest request (max_sectors_kb) and its read_ahead_kb
/// (force_page_cache_ra), silently. None when sysfs does not say (a
/// filesystem without a block device of its own).
pub fn call_cap_bytes_of_device(dev: u64) -> Option<u64> {
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    let base = PathBuf::from(format!("/sys/dev/block/{major}:{minor}"));
    let read = |name: &str| -> Option<u64> {
        [
            base.join("queue").join(name),
            base.join("../queue").join(name),
        ]
        .iter()
        .find_map(|p| fs::read_to_string(p).ok())
        .and_then(|t| t.trim().parse().ok())
    };
    let largest = read("max_sectors_kb")
        .unwrap_or(0)
        .max(read("read_ahead_kb").unwrap_or(0));
    (largest > 0).then_some(largest * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake_bdi(dir: &Path, devices: &[(&str, &str)]) {
        for (name, value) in devices {
            fs::create_dir_all(dir.join(name)).unwrap();
            fs::write(dir.join(name).join("read_ahead_kb"), value).unwrap();
        }
    }

    fn value(dir: &Path, name: &str) -> String {
        fs::read_to_string(dir.join(name).join("read_ahead_kb")).unwrap()
    }

    #[test]
    fn sets_every_device_and_restores_on_drop() {
        let tmp = tempfile::tempdir().unwrap();
        let (bdi, state) = (tmp.path().join("bdi"), tmp.path().join("state"));
        fake_bdi(&bdi, &[("254:0", "8192\n"), ("7:0", "128\n")]);
        fs::create_dir_all(bdi.join("no-setting")).unwrap();
        let over = ReadaheadOverride::set_all_in(&bdi, &state, 0).unwrap();
        assert_eq!(over.saved().len(), 2);
        assert_eq!(value(&bdi, "254:0"), "0");
        assert_eq!(value(&bdi, "7:0"), "0");
        let state_file = state.join(format!("readahead-{}", std::process::id()));
        assert!(state_file.exists());
        drop(over);
        assert_eq!(value(&bdi, "254:0"), "8192");
        assert_eq!(value(&bdi, "7:0"), "128");
        assert!(!state_file.exists());
    }

    #[test]
    fn a_dead_owner_is_restored_and_a_live_one_refuses() {
        let tmp = tempfile::tempdir().unwrap();
        let (bdi, state) = (tmp.path().join("bdi"), tmp.path().join("state"));
        fake_bdi(&bdi, &[("254:0", "0")]);
        fs::create_dir_all(&state).unwrap();
        // pid_max is at most 2^22, so this pid cannot be alive.
        let dead = state.join("readahead-99999999");
        let device = bdi.join("254:0/read_ahead_kb");
        fs::write(&dead, format!("4096\t{}\n", device.display())).unwrap();
        assert_eq!(restore_stale_in(&state), vec![device.clone()]);
        assert_eq!(value(&bdi, "254:0"), "4096");
        assert!(!dead.exists());

        // pid 1 is alive: its override is left alone, and a second refused.
        let live = state.join("readahead-1");
        fs::write(&live, format!("8192\t{}\n", device.display())).unwrap();
        assert!(restore_stale_in(&state).is_empty());
        match ReadaheadOverride::set_all_in(&bdi, &state, 0) {
            Err(ReadaheadError::Busy { pid: 1 }) => {}
            other => panic!("expected Busy, got {other:?}"),
        }
        assert_eq!(value(&bdi, "254:0"), "4096");
    }

    #[test]
    fn no_devices_is_an_error() {
        let tmp = tempfile::tempdir().unwrap();
        fs::create_dir_all(tmp.path().join("bdi")).unwrap();
        let err =
            ReadaheadOverride::set_all_in(&tmp.path().join("bdi"), tmp.path(), 0).unwrap_err();
        assert!(matches!(err, ReadaheadError::NoDevices), "{err}");
    }
}
