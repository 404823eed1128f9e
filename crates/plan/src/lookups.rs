//! The plan's lookups: the paths whose inodes a start's own lookups had to
//! read from the disk (the profile's `inode_loads`) and every name its
//! tasks handed to a file system call (`path_lookups`, missing names
//! included: looking one up reads the directory that does not hold it),
//! which the prefetcher looks up first so the program finds the inode
//! tables and directories cached.

use coldstart_analyze::loaded::LoadedRun;
use coldstart_analyze::lower_median;
use coldstart_prefetch::Lookup;
use std::collections::HashMap;

/// What one run's program loaded or looked up: per path, the first time
/// before the run was ready (its end without a ready mark) and the inode
/// number the trace saw loaded (0 for a name only looked up).
pub fn program_loads(run: &LoadedRun) -> HashMap<String, (i64, u64)> {
    let until = run.ready_ns().or(run.run.ended_ns);
    let prefetcher = run.prefetcher_tasks();
    let files: HashMap<_, _> = run.files.iter().map(|f| (f.id, f)).collect();
    let mut out: HashMap<String, (i64, u64)> = HashMap::new();
    for load in &run.inode_loads {
        if !run.in_tree(load.pid)
            || prefetcher.contains(&load.pid)
            || until.is_some_and(|u| load.t_ns > u)
        {
            continue;
        }
        let Some(file) = files.get(&load.file_id) else {
            continue;
        };
        let Some(path) = file.path.as_deref().filter(|p| p.starts_with('/')) else {
            continue;
        };
        out.entry(path.to_string())
            .and_modify(|(t, _)| *t = (*t).min(load.t_ns))
            .or_insert((load.t_ns, file.ino));
    }
    for lookup in &run.path_lookups {
        let Ok(path) = &lookup.path else {
            continue;
        };
        if !run.in_tree(lookup.pid)
            || prefetcher.contains(&lookup.pid)
            || until.is_some_and(|u| lookup.t_ns > u)
        {
            continue;
        }
        out.entry(path.clone())
            .and_modify(|(t, _)| *t = (*t).min(lookup.t_ns))
            .or_insert((lookup.t_ns, 0));
    }
    out
}

/// Lookups pooled over runs, added one run at a time.
#[derive(Debug, Default)]
pub struct LookupPool {
    /// Per path: the first-load time of each run that loaded it, and the
    /// inode number the latest-added run saw.
    paths: HashMap<String, (Vec<i64>, u64)>,
}

impl LookupPool {
    pub fn add(&mut self, run: &LoadedRun) {
        for (path, (t_ns, ino)) in program_loads(run) {
            let entry = self.paths.entry(path).or_insert((Vec::new(), ino));
            entry.0.push(t_ns);
            if ino != 0 {
                entry.1 = ino;
            }
        }
    }

    /// The paths loaded or looked up in at least `min_runs` runs, each
    /// needed at the median of its first times, in the order the start
    /// needs them (then by inode number and path). A name only looked up takes its inode number from the disk
    /// now (names that do not exist come last); names on filesystems
    /// without a disk behind them (/proc, /sys, tmpfs, ...) or on network
    /// and FUSE filesystems (a lookup there may wait on a server) are left
    /// out.
    pub fn lookups(self, min_runs: usize) -> Vec<Lookup> {
        let mut out: Vec<Lookup> = self
            .paths
            .into_iter()
            .filter(|(_, (times, _))| times.len() >= min_runs.max(1))
            .filter_map(|(path, (mut times, ino))| {
                let ino = match ino {
                    0 => on_disk_inode(&path)?,
                    ino => ino,
                };
                times.sort_unstable();
                Some(Lookup {
                    path,
                    ino,
                    need_ns: lower_median(&times),
                })
            })
            .collect();
        sort(&mut out);
        out
    }
}

/// For a name only looked up: its inode number now, `u64::MAX` when it
/// does not exist; `None` when the name (or the nearest directory above it
/// that exists) is on a filesystem a lookup should not be replayed on.
fn on_disk_inode(path: &str) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    let mut at = std::path::Path::new(path);
    let found = std::fs::symlink_metadata(at).ok();
    while std::fs::symlink_metadata(at).is_err() {
        at = at.parent()?;
    }
    if !replayable_filesystem(at) {
        return None;
    }
    Some(found.map_or(u64::MAX, |m| m.ino()))
}

/// Whether `path` is on a filesystem with a disk behind it and no server.
fn replayable_filesystem(path: &std::path::Path) -> bool {
    let Ok(magic) = coldstart_system::filesystem::magic_of_path(path) else {
        return false;
    };
    // linux/magic.h: memory, network and FUSE filesystems, besides the
    // kernel's interfaces (/proc, /sys and their kin).
    const NOT_REPLAYED: &[u64] = &[
        0x0102_1994, // tmpfs (and devtmpfs)
        0x8584_58f6, // ramfs
        0x6969,      // nfs
        0xff53_4d42, // cifs
        0xfe53_4d42, // smb2
        0x6573_5546, // fuse
        0x0187,      // autofs
    ];
    coldstart_system::filesystem::kernel_interface(magic).is_none()
        && !NOT_REPLAYED.contains(&magic)
}

/// The order the start needs them, then inode number, then path: the
/// order the prefetcher looks them up in, so it stays ahead of the
/// program, which makes the same lookups in the same order.
pub fn sort(lookups: &mut [Lookup]) {
    lookups.sort_by(|a, b| {
        (a.need_ns, a.ino)
            .cmp(&(b.need_ns, b.ino))
            .then_with(|| a.path.cmp(&b.path))
    });
}
