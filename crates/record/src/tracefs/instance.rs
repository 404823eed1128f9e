//! A private tracefs instance: coldstart never touches the global trace
//! buffer, so it cannot disturb another tracer, and everything it turned on
//! goes away with one rmdir. The instance is removed when this value drops
//! (normal end, error, Ctrl-C); instances left by a coldstart that was
//! killed are removed by the next run once their owner is gone.

use coldstart_system::proc;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

const PREFIX: &str = "coldstart-";

/// What can go wrong while setting up or reading tracing.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error(
        "tracefs is not available ({detail}); coldstart trace needs root (or CAP_SYS_ADMIN) and a kernel with tracefs; try: sudo coldstart trace ..."
    )]
    NoTracefs { detail: String },
    #[error("{path}: {what}: {source}{hint}")]
    Io {
        path: PathBuf,
        what: &'static str,
        source: io::Error,
        hint: &'static str,
    },
    #[error("this kernel has no tracepoint {0}, which coldstart trace needs")]
    MissingEvent(String),
    #[error("tracefs event formats: {0}")]
    Decoder(#[from] crate::tracefs::events::DecoderError),
    #[error("tracefs header_page: {0}")]
    Header(#[from] crate::tracefs::format::FormatError),
    #[error("trace buffer of CPU {cpu}: {source}")]
    Buffer {
        cpu: u32,
        source: crate::tracefs::ringbuf::RingbufError,
    },
    #[error(transparent)]
    Cache(#[from] coldstart_system::cache::CacheError),
    #[error(transparent)]
    Readahead(#[from] coldstart_system::readahead::ReadaheadError),
    #[error("profile: {0}")]
    Profile(#[from] coldstart_profile::Error),
    /// The launcher's error names the program already.
    #[error("{error}")]
    Launch { program: String, error: io::Error },
    #[error("trace clock: {0}")]
    Clock(String),
    #[error("cannot start a trace reader thread: {0}")]
    Thread(io::Error),
    #[error("interrupted before the program started")]
    Interrupted,
    #[error("the kernel refused the uprobe `{definition}`: {source}{}", if .detail.is_empty() { String::new() } else { format!(" ({})", .detail) })]
    Uprobe {
        definition: String,
        source: io::Error,
        detail: String,
    },
}

fn io_error(path: &Path, what: &'static str, source: io::Error) -> TraceError {
    let hint = match source.kind() {
        io::ErrorKind::PermissionDenied => " (tracing needs root: run coldstart through sudo)",
        _ => "",
    };
    TraceError::Io {
        path: path.to_path_buf(),
        what,
        source,
        hint,
    }
}

/// Finds the tracefs mount, mounting it at /sys/kernel/tracing when it is
/// not mounted anywhere.
pub fn tracefs_root() -> Result<PathBuf, TraceError> {
    if let Some(target) = proc::mount_of_type("tracefs") {
        return Ok(target);
    }
    let target = Path::new("/sys/kernel/tracing");
    if let Err(e) = proc::mount_tracefs(target) {
        return Err(TraceError::NoTracefs {
            detail: format!(
                "not mounted, and mounting it at {} failed: {e}",
                target.display()
            ),
        });
    }
    Ok(target.to_path_buf())
}

/// Removes instances left by coldstart processes that no longer exist.
/// Returns their names.
pub fn remove_stale_instances(root: &Path) -> Vec<String> {
    let mut removed = Vec::new();
    let Ok(entries) = fs::read_dir(root.join("instances")) else {
        return removed;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(owner) = name
            .strip_prefix(PREFIX)
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<i32>().ok())
        else {
            continue;
        };
        if proc::process_exists(owner) {
            continue;
        }
        let path = entry.path();
        let _ = write_file(&path.join("tracing_on"), "0");
        if fs::remove_dir(&path).is_ok() {
            removed.push(name);
        }
    }
    removed
}

/// A private trace instance; removed on drop.
pub struct Instance {
    path: PathBuf,
    cpus: Vec<u32>,
}

impl Instance {
    /// Creates `instances/coldstart-<pid>[-<tag>]` under `root`.
    pub fn create(root: &Path, tag: &str) -> Result<Instance, TraceError> {
        let name = if tag.is_empty() {
            format!("{PREFIX}{}", std::process::id())
        } else {
            format!("{PREFIX}{}-{tag}", std::process::id())
        };
        let path = root.join("instances").join(name);
        if path.exists() {
            // Our own pid: only a previous use in this process left it.
            let _ = fs::remove_dir(&path);
        }
        fs::create_dir(&path).map_err(|e| io_error(&path, "cannot create trace instance", e))?;
        let mut instance = Instance {
            path,
            cpus: Vec::new(),
        };
        instance.cpus = instance.list_cpus()?;
        Ok(instance)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// CPUs that have a buffer in this instance.
    pub fn cpus(&self) -> &[u32] {
        &self.cpus
    }

    fn list_cpus(&self) -> Result<Vec<u32>, TraceError> {
        let dir = self.path.join("per_cpu");
        let entries = fs::read_dir(&dir).map_err(|e| io_error(&dir, "cannot list CPUs", e))?;
        let mut cpus: Vec<u32> = entries
            .flatten()
            .filter_map(|e| {
                e.file_name()
                    .to_str()
                    .and_then(|n| n.strip_prefix("cpu"))
                    .and_then(|n| n.parse().ok())
            })
            .collect();
        cpus.sort_unstable();
        Ok(cpus)
    }

    /// Writes a control file of the instance.
    pub fn set(&self, file: &str, value: &str) -> Result<(), TraceError> {
        let path = self.path.join(file);
        write_file(&path, value).map_err(|e| io_error(&path, "cannot write", e))
    }

    pub fn get(&self, file: &str) -> Result<String, TraceError> {
        let path = self.path.join(file);
        read_control(&path).map_err(|e| io_error(&path, "cannot read", e))
    }

    /// Enables one event, given as "system/event".
    pub fn enable(&self, event: &str) -> Result<(), TraceError> {
        let dir = self.path.join("events").join(event);
        if !dir.is_dir() {
            return Err(TraceError::MissingEvent(event.to_string()));
        }
        self.set(&format!("events/{event}/enable"), "1")
    }

    /// The events directory, whose format files describe the records.
    pub fn events_dir(&self) -> PathBuf {
        self.path.join("events")
    }

    /// Opens one CPU's binary buffer for non-blocking reads.
    pub fn open_cpu(&self, cpu: u32) -> Result<File, TraceError> {
        let path = self.path.join(format!("per_cpu/cpu{cpu}/trace_pipe_raw"));
        OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&path)
            .map_err(|e| io_error(&path, "cannot open", e))
    }

    /// Events one CPU's buffer could not keep: dropped (buffer full, no
    /// overwrite) plus overrun (overwritten).
    pub fn lost_events(&self, cpu: u32) -> Result<u64, TraceError> {
        let stats = self.get(&format!("per_cpu/cpu{cpu}/stats"))?;
        Ok(stats
            .lines()
            .filter_map(|line| {
                let (key, value) = line.split_once(':')?;
                matches!(key.trim(), "overrun" | "dropped events")
                    .then(|| value.trim().parse::<u64>().ok())
                    .flatten()
            })
            .sum())
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        let _ = write_file(&self.path.join("tracing_on"), "0");
        // rmdir fails with EBUSY while a buffer file is open; the owner
        // closes its readers before dropping, but retry briefly in case a
        // reader thread is still on its way out.
        for _ in 0..50 {
            match fs::remove_dir(&self.path) {
                Ok(()) => return,
                Err(e) if e.kind() == io::ErrorKind::NotFound => return,
                Err(_) => std::thread::sleep(std::time::Duration::from_millis(20)),
            }
        }
        eprintln!(
            "coldstart: could not remove trace instance {}; remove it with: rmdir {}",
            self.path.display(),
            self.path.display()
        );
    }
}

/// Some tracefs files answer only the first read and then report end of
/// file (std's read_to_string probes with a small first read and would get
/// a truncated text), so read with a buffer big enough for the whole file
/// (which also spares the kernel making the text again for each small read).
pub(crate) fn read_control(path: &Path) -> io::Result<String> {
    let mut file = File::open(path)?;
    let mut bytes = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        match file.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => bytes.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

fn write_file(path: &Path, value: &str) -> io::Result<()> {
    let mut file = OpenOptions::new().write(true).truncate(true).open(path)?;
    file.write_all(value.as_bytes())
}

/// Reads what one CPU buffer holds now into `out`; returns bytes read.
/// Each read returns one sub-buffer (a page by default).
pub fn drain(file: &mut File, subbuf_size: usize, out: &mut Vec<u8>) -> io::Result<usize> {
    let mut total = 0;
    let mut page = vec![0u8; subbuf_size];
    loop {
        match file.read(&mut page) {
            Ok(0) => return Ok(total),
            Ok(n) => {
                // A short read is still a whole sub-buffer header plus
                // data; pad to keep sub-buffers at fixed strides.
                out.extend_from_slice(&page[..n]);
                out.resize(out.len() + (subbuf_size - n), 0);
                total += n;
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(total),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
}
