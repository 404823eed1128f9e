//! A cgroup v2 group per measured program: every descendant stays in it
//! whatever it does (double fork, setsid), so the whole tree can be listed
//! and killed exactly. Removed when dropped; groups left by a coldstart
//! that was killed are removed by the next one.

use crate::proc;
use std::fs;
use std::io;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

pub(crate) const PREFIX: &str = "coldstart-";

pub struct Cgroup {
    path: PathBuf,
}

impl Cgroup {
    /// Creates a group below coldstart's own cgroup. `None` when cgroup v2
    /// is not mounted or coldstart may not create groups (not root).
    pub fn create(tag: &str) -> Option<Cgroup> {
        let mount = proc::mount_of_type("cgroup2")?;
        let parent = mount.join(proc::own_cgroup()?);
        remove_stale(&parent);
        let path = parent.join(format!("{PREFIX}{}-{tag}", std::process::id()));
        let _ = fs::remove_dir(&path);
        fs::create_dir(&path).ok()?;
        Some(Cgroup { path })
    }

    /// An open `cgroup.procs`: a child writes "0" to it (between fork and
    /// exec) to move itself in before it runs anything.
    pub fn procs_file(&self) -> io::Result<OwnedFd> {
        let file = fs::OpenOptions::new()
            .write(true)
            .open(self.path.join("cgroup.procs"))?;
        Ok(file.into())
    }

    /// Processes in the group now.
    pub fn members(&self) -> Vec<i32> {
        fs::read_to_string(self.path.join("cgroup.procs"))
            .map(|text| text.lines().filter_map(|l| l.trim().parse().ok()).collect())
            .unwrap_or_default()
    }

    /// SIGKILL to every member at once (kernel 5.14+); false if unsupported.
    pub fn kill_all(&self) -> bool {
        fs::write(self.path.join("cgroup.kill"), "1").is_ok()
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        for _ in 0..100 {
            if fs::remove_dir(&self.path).is_ok() || !self.path.exists() {
                return;
            }
            // Members that were just killed leave the group asynchronously.
            self.kill_all();
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
}

fn remove_stale(parent: &Path) {
    let Ok(entries) = fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(owner) = name
            .strip_prefix(PREFIX)
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        let alive = i32::try_from(owner).is_ok_and(proc::process_exists);
        if owner != std::process::id() && !alive {
            let _ = fs::write(entry.path().join("cgroup.kill"), "1");
            let _ = fs::remove_dir(entry.path());
        }
    }
}
