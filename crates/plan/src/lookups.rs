//! The plan's lookups: the paths whose inodes a start's own lookups had to
//! read from the disk (the profile's `inode_loads`), which the prefetcher
//! looks up first so the program finds the inode tables and directories
//! cached.

use crate::misses::prefetcher_tasks;
use coldstart_analyze::loaded::LoadedRun;
use coldstart_prefetch::Lookup;
use std::collections::HashMap;

/// What one run's program loaded: per path, the first load before the run
/// was ready (its end without a ready mark) and the inode number.
pub fn program_loads(run: &LoadedRun) -> HashMap<String, (i64, u64)> {
    let until = run.ready_ns().or(run.run.ended_ns);
    let prefetcher = prefetcher_tasks(run);
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
            entry.1 = ino;
        }
    }

    /// The paths loaded in at least `min_runs` runs, each needed at the
    /// median of its first loads, in inode-number order (neighbours in one
    /// inode table block come in with one read), then by path.
    pub fn lookups(self, min_runs: usize) -> Vec<Lookup> {
        let mut out: Vec<Lookup> = self
            .paths
            .into_iter()
            .filter(|(_, (times, _))| times.len() >= min_runs.max(1))
            .map(|(path, (mut times, ino))| {
                times.sort_unstable();
                Lookup {
                    path,
                    ino,
                    need_ns: times[(times.len() - 1) / 2],
                }
            })
            .collect();
        sort(&mut out);
        out
    }
}

/// Inode-number order, then by path.
pub fn sort(lookups: &mut [Lookup]) {
    lookups.sort_by(|a, b| a.ino.cmp(&b.ino).then_with(|| a.path.cmp(&b.path)));
}
