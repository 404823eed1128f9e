//! How far apart two extents may be before reading the gap between them
//! costs more than a second request: measured on the device, the way
//! `coldstart run` reads. The replay asks for every extent with readahead(2)
//! on its threads and never waits for one, so the block layer holds as many
//! of its reads in flight as the queue takes (hundreds), not one per thread.
//! The calibration does the same twice, with scattered reads of one page and
//! with scattered reads of 128 KiB, waits for all of them, and fits the time
//! of a read to `request + bytes / bandwidth` through the two points. Reading
//! `gap = request × bandwidth` extra bytes takes as long as one more request,
//! so extents closer than that are merged.
//!
//! Timing small reads one or two at a time, as this did at first, measured
//! the device's latency instead (78 µs a read against 10 µs with the queue
//! full, on the virtio disk of BENCHMARKS.md) and merged gaps of 76 KiB:
//! plans 30% larger than the reads they save were worth.

use crate::replay::{Method, fetch};
use coldstart_system::cache;
use serde::Serialize;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

#[derive(Debug, Clone, Serialize)]
pub struct Calibration {
    /// The file read (it is evicted before each measurement).
    pub file: String,
    /// Median time of one cold 4 KiB read alone, in microseconds.
    pub latency_us: f64,
    /// Threads that asked for the reads, as the replay's.
    pub threads: usize,
    /// Scattered reads of one page timed together, and their time per read
    /// (median over the rounds), in microseconds.
    pub small_reads: usize,
    pub small_read_us: f64,
    /// Scattered reads of `large_read_bytes` timed together, and their time
    /// per read, in microseconds.
    pub large_reads: usize,
    pub large_read_bytes: u64,
    pub large_read_us: f64,
    /// The device time of one more request with the queue full: the fit's
    /// time of a read of no bytes, in microseconds (0 when the fit puts it
    /// below).
    pub request_us: f64,
    /// What one more byte of a read costs, as a rate: the fit's slope, in MB/s
    /// (10^6 bytes).
    pub bandwidth_mb_s: f64,
    /// request time × bandwidth, rounded down to whole pages.
    pub merge_gap_bytes: u64,
}

/// Small reads timed alone; their median is the latency.
const PROBES: u64 = 48;
/// Scattered one-page reads in flight together.
const SMALL_READS: u64 = 1024;
/// The size of the large reads: the kernel's default readahead window, and
/// about the size of a plan's extents.
const LARGE_READ_BYTES: u64 = 128 << 10;
/// At most this many large reads (32 MiB), each in a slot of the file at
/// least twice its size.
const LARGE_READS: u64 = 256;
/// Each set is timed this often, alternating; the medians are fitted.
const ROUNDS: usize = 3;

/// Measures on `path`, which should be large (tens of MB) and live on the
/// device the plan's files live on, asking for reads on `threads` threads as
/// the replay does. Evicts it before every measurement: it must not be
/// mapped by a running program, and the caller must own it or be root for
/// the eviction to be complete. Leaves the last large reads cached.
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
    // A page the reads below missed is then read alone, not with a window.
    cache::advise_random(&file)?;

    evict(path)?;
    let mut buffer = vec![0u8; page as usize];
    let mut times = Vec::with_capacity(PROBES as usize);
    for &(at, _) in &scattered(size, PROBES, page, page) {
        let started = Instant::now();
        file.read_exact_at(&mut buffer, at)?;
        times.push(started.elapsed().as_secs_f64());
    }
    let latency_s = median(&mut times);

    let large_reads = LARGE_READS.min(size / (2 * LARGE_READ_BYTES));
    let small = scattered(size, SMALL_READS, page, page);
    let large = scattered(size, large_reads, LARGE_READ_BYTES, page);
    let (mut small_s, mut large_s) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        evict(path)?;
        small_s.push(time_reads(&file, &small, threads)? / small.len() as f64);
        evict(path)?;
        large_s.push(time_reads(&file, &large, threads)? / large.len() as f64);
    }
    let (small_s, large_s) = (median(&mut small_s), median(&mut large_s));
    let (request_s, bandwidth) =
        fit(small_s, page, large_s, LARGE_READ_BYTES).ok_or_else(|| {
            io::Error::other(format!(
                "{}: reads of {} KiB took no longer than reads of one page ({:.1} against {:.1} µs \
             each): something else answered them (a cache below the page cache) or the device \
             was busy; calibrate again, or give --merge-gap-kb",
                path.display(),
                LARGE_READ_BYTES >> 10,
                large_s * 1e6,
                small_s * 1e6
            ))
        })?;
    Ok(Calibration {
        file: path.display().to_string(),
        latency_us: latency_s * 1e6,
        threads,
        small_reads: small.len(),
        small_read_us: small_s * 1e6,
        large_reads: large.len(),
        large_read_bytes: LARGE_READ_BYTES,
        large_read_us: large_s * 1e6,
        request_us: request_s * 1e6,
        bandwidth_mb_s: bandwidth / 1e6,
        merge_gap_bytes: (request_s * bandwidth) as u64 / page * page,
    })
}

/// The line `time = request + bytes / bandwidth` through a read of `small`
/// bytes taking `small_s` and one of `large` bytes taking `large_s`: the
/// request time in seconds (not below 0) and the bandwidth in bytes per
/// second. None when the larger read was not the slower one.
fn fit(small_s: f64, small: u64, large_s: f64, large: u64) -> Option<(f64, f64)> {
    let per_byte = (large_s - small_s) / large.checked_sub(small).filter(|&d| d > 0)? as f64;
    if !(per_byte > 0.0 && per_byte.is_finite()) {
        return None;
    }
    Some(((small_s - small as f64 * per_byte).max(0.0), 1.0 / per_byte))
}

/// `count` reads of `len` bytes spread over a file of `size` bytes: each in
/// its own slot of `size / count` bytes (page aligned), the slots visited
/// in a stride order (7919 is prime) so that no two reads in a row are
/// neighbours.
fn scattered(size: u64, count: u64, len: u64, page: u64) -> Vec<(u64, u64)> {
    let count = count.max(1);
    let slot = size / count / page * page;
    (0..count).map(|i| (i * 7919 % count * slot, len)).collect()
}

/// Asks for every read as the replay does (readahead(2), in order, on
/// `threads` threads pulling the next read), then waits for each by reading
/// its last byte: seconds from the first request until all are in.
fn time_reads(file: &File, reads: &[(u64, u64)], threads: usize) -> io::Result<f64> {
    let next = AtomicUsize::new(0);
    let started = Instant::now();
    let failed = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| -> io::Result<()> {
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(&(at, len)) = reads.get(i) else {
                            return Ok(());
                        };
                        fetch(Method::Readahead, file, at, len)?;
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| {
                w.join()
                    .unwrap_or_else(|_| Err(io::Error::other("a calibration thread panicked")))
            })
            .find(|r| r.is_err())
    });
    if let Some(Err(e)) = failed {
        return Err(e);
    }
    let mut byte = [0u8; 1];
    for &(at, len) in reads {
        file.read_exact_at(&mut byte, at + len - 1)?;
    }
    Ok(started.elapsed().as_secs_f64())
}

/// The middle of `values` (not empty), the upper one of the two for an even
/// count. Not coldstart_bench::stats::median, the statistics' one: prefetch
/// must not depend on bench, which links the profile's SQLite, since
/// coldstart-run links prefetch. For the odd count of rounds the two agree.
fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
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

#[cfg(test)]
mod tests {
    use super::fit;

    #[test]
    fn the_fit_recovers_the_request_time_and_bandwidth_of_its_two_points() {
        // 10 µs a request, 800 MB/s.
        let time = |bytes: u64| 10e-6 + bytes as f64 / 800e6;
        let (request, bandwidth) = fit(time(4096), 4096, time(131072), 131072).unwrap();
        assert!((request - 10e-6).abs() < 1e-12, "{request}");
        assert!((bandwidth - 800e6).abs() < 1e-3, "{bandwidth}");
    }

    #[test]
    fn a_request_time_below_zero_is_zero() {
        // Large reads slower per byte than small ones suggest: the line
        // crosses below the origin.
        let (request, _) = fit(1e-6, 4096, 200e-6, 131072).unwrap();
        assert_eq!(request, 0.0);
    }

    #[test]
    fn no_fit_when_the_larger_read_is_not_slower() {
        assert_eq!(fit(20e-6, 4096, 20e-6, 131072), None);
        assert_eq!(fit(20e-6, 4096, 10e-6, 131072), None);
        assert_eq!(fit(20e-6, 4096, 30e-6, 4096), None);
        assert_eq!(fit(20e-6, 131072, 30e-6, 4096), None);
    }
}
