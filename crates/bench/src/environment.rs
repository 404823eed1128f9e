//! The machine facts recorded with every benchmark, so a figure can be
//! judged (and compared) knowing what it was measured on.

use coldstart_system::cache;
use coldstart_system::launch::resolve_program;
use coldstart_system::proc;
use coldstart_system::readahead::read_ahead_kb_for;
use serde::Serialize;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

#[derive(Debug, Clone, Serialize)]
pub struct Environment {
    pub kernel: String,
    pub cpus: usize,
    pub cpu_model: Option<String>,
    pub memory_bytes: Option<u64>,
    /// cpufreq governor of CPU 0; None where cpufreq is not exposed (VMs).
    pub cpu_governor: Option<String>,
    /// The first command's program, resolved through PATH.
    pub program: Option<String>,
    /// The block device holding the program, as "major:minor".
    pub device: Option<String>,
    /// The read_ahead_kb the program is read ahead by: its device's, or
    /// its btrfs filesystem's own.
    pub read_ahead_kb: Option<u64>,
    pub page_size: u64,
    /// A DAMON context pages out memory it finds idle, which can turn a
    /// warm cache partly cold between runs.
    pub damon_reclaim: bool,
    pub coldstart_version: String,
    /// Seconds since the Unix epoch when the benchmark started.
    pub started_at_unix_s: u64,
}

impl Environment {
    /// Facts about this machine and the device holding `program`.
    pub fn detect(program: &Path) -> Environment {
        let resolved = resolve_program(program);
        let dev = resolved
            .as_ref()
            .and_then(|p| std::fs::metadata(p).ok())
            .map(|m| m.dev());
        Environment {
            kernel: proc::kernel_release(),
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            cpu_model: proc::cpu_model(),
            memory_bytes: proc::meminfo_bytes("MemTotal"),
            cpu_governor: read_trimmed("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor"),
            program: resolved.as_ref().map(|p| p.display().to_string()),
            device: dev.map(|d| format!("{}:{}", libc::major(d), libc::minor(d))),
            read_ahead_kb: read_ahead_kb_for(program),
            page_size: cache::page_size(),
            damon_reclaim: damon_reclaim(),
            coldstart_version: env!("CARGO_PKG_VERSION").to_string(),
            started_at_unix_s: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
        }
    }
}

fn read_trimmed(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

/// A running kdamond with a pageout scheme (DAMON sysfs interface), or the
/// DAMON_RECLAIM module enabled.
fn damon_reclaim() -> bool {
    if read_trimmed("/sys/module/damon_reclaim/parameters/enabled").as_deref() == Some("Y") {
        return true;
    }
    let Ok(kdamonds) = std::fs::read_dir("/sys/kernel/mm/damon/admin/kdamonds") else {
        return false;
    };
    kdamonds.flatten().any(|kdamond| {
        let on =
            std::fs::read_to_string(kdamond.path().join("state")).is_ok_and(|s| s.trim() == "on");
        on && std::fs::read_dir(kdamond.path().join("contexts"))
            .into_iter()
            .flatten()
            .flatten()
            .any(|context| {
                std::fs::read_dir(context.path().join("schemes"))
                    .into_iter()
                    .flatten()
                    .flatten()
                    .any(|scheme| {
                        std::fs::read_to_string(scheme.path().join("action"))
                            .is_ok_and(|a| a.trim() == "pageout")
                    })
            })
    })
}
