//! How far apart two extents may be before reading the gap between them
//! costs more than a second request: measured on the device. One more
//! request costs the device's time per small read with as many reads in
//! flight as `coldstart run` keeps (its threads), since that is how the plan
//! is replayed; reading the gap costs its size over the device's streaming
//! bandwidth. Reading `gap = request time × bandwidth` extra bytes takes as
//! long as one more request, so extents closer than that are merged.

use coldstart_system::cache;
use serde::Serialize;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

#[derive(Debug, Clone, Serialize)]
pub struct Calibration {
    /// The file read (it is evicted before each measurement).
    pub file: String,
    /// Median time of one cold 4 KiB read alone, in microseconds.
    pub latency_us: f64,
    /// Reads in flight for `request_us`.
    pub threads: usize,
    /// Device time per cold 4 KiB read with `threads` reads in flight: the
    /// cost of one more request of a replay, in microseconds.
    pub request_us: f64,
    /// Cold sequential read bandwidth, in MB/s (10^6 bytes).
    pub bandwidth_mb_s: f64,
    /// request time × bandwidth, rounded down to whole pages.
    pub merge_gap_bytes: u64,
}

/// Small reads timed alone; their median is the latency.
const PROBES: u64 = 48;
/// Small reads timed in parallel, in all.
const PARALLEL_PROBES: u64 = 512;
/// At most this much is read sequentially for the bandwidth.
const SEQUENTIAL_BYTES: u64 = 64 << 20;

/// Measures on `path`, which should be large (tens of MB) and live on the
/// device the plan's files live on, with `threads` reads in flight. Evicts
/// it (three times): it must not be mapped by a running program, and the
/// caller must own it or be root for the eviction to be complete.
pub fn calibrate(path: &Path, threads: usize) -> io::Result<Calibration> {
    let threads = threads.max(1);
    let file = File::open(path)?;
    let size = file.metadata()?.len();
    let page = cache::page_size();
    if size < 16 << 20 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{} is {} bytes; calibration needs a file of at least 16 MiB",
                path.display(),
                size
            ),
        ));
    }
    let pages = size / page;
    // Page `i` of `n` probes: spread over the file, jumping back and forth.
    let probe = |i: u64, n: u64| {
        let slot = (i * 7919) % n;
        (pages * slot / n + i % 3).min(pages - 1) * page
    };

    evict(path)?;
    advise(&file, libc::POSIX_FADV_RANDOM)?;
    let mut buffer = vec![0u8; page as usize];
    let mut times = Vec::with_capacity(PROBES as usize);
    for i in 0..PROBES {
        let at = probe(i, PROBES);
        let started = Instant::now();
        file.read_exact_at(&mut buffer, at)?;
        times.push(started.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    let latency_s = times[times.len() / 2];

    evict(path)?;
    let next = AtomicU64::new(0);
    let started = Instant::now();
    let failed = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| -> io::Result<()> {
                    let mut buffer = vec![0u8; page as usize];
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= PARALLEL_PROBES {
                            return Ok(());
                        }
                        file.read_exact_at(&mut buffer, probe(i, PARALLEL_PROBES))?;
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| {
                w.join()
                    .unwrap_or_else(|_| Err(io::Error::other("a probe thread panicked")))
            })
            .find(|r| r.is_err())
    });
    if let Some(Err(e)) = failed {
        return Err(e);
    }
    let request_s = started.elapsed().as_secs_f64() / PARALLEL_PROBES as f64;

    evict(path)?;
    advise(&file, libc::POSIX_FADV_SEQUENTIAL)?;
    let length = size.min(SEQUENTIAL_BYTES);
    let mut chunk = vec![0u8; 1 << 20];
    let started = Instant::now();
    let mut at = 0;
    while at < length {
        let want = ((length - at) as usize).min(chunk.len());
        file.read_exact_at(&mut chunk[..want], at)?;
        at += want as u64;
    }
    let bandwidth = length as f64 / started.elapsed().as_secs_f64();
    let gap = (request_s * bandwidth) as u64 / page * page;
    Ok(Calibration {
        file: path.display().to_string(),
        latency_us: latency_s * 1e6,
        threads,
        request_us: request_s * 1e6,
        bandwidth_mb_s: bandwidth / 1e6,
        merge_gap_bytes: gap,
    })
}

fn evict(path: &Path) -> io::Result<()> {
    let eviction = cache::evict(path).map_err(|e| io::Error::other(e.to_string()))?;
    if eviction.resident_after > 0 {
        return Err(io::Error::other(format!(
            "{}: {} pages stay resident after eviction (mapped by running processes, \
             or not evictable by this user): calibrate on a file nothing maps",
            path.display(),
            eviction.resident_after
        )));
    }
    Ok(())
}

fn advise(file: &File, advice: libc::c_int) -> io::Result<()> {
    // SAFETY: plain fadvise on an open descriptor; returns the error number.
    let rc = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, advice) };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    Ok(())
}
