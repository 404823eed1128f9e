//! The device calibration on a temporary file: it reads what it times (the
//! pages resident afterwards, by mincore, are exactly its last set of large
//! reads, with no readahead around them), and the figures it reports follow
//! from its own timings by the stated fit.

use coldstart_prefetch::calibrate::calibrate;
use std::path::Path;

const PAGE: u64 = 4096;

/// Runs of consecutive pages in a sorted list: (first page, length).
fn runs(pages: &[u64]) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = Vec::new();
    for &p in pages {
        match out.last_mut() {
            Some((first, len)) if *first + *len == p => *len += 1,
            _ => out.push((p, 1)),
        }
    }
    out
}

#[test]
fn calibration_reads_exactly_the_reads_it_times_and_fits_them() {
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let path = dir.path().join("big");
    let pages = 6144; // 24 MiB
    coldstart_testkit::cold_file(&path, pages, PAGE);
    let calibration = match calibrate(&path, 2) {
        Ok(c) => c,
        Err(e) if e.to_string().contains("stay resident") => {
            coldstart_testkit::skip(&format!("cannot evict a file in /var/tmp here: {e}"));
            return;
        }
        Err(e) => panic!("calibrate {}: {e}", path.display()),
    };

    // The last set timed was the large reads: 128 KiB each, as many as fit
    // in slots of twice their size (24 MiB / 256 KiB = 96), nothing else.
    let resident = coldstart_testkit::resident_pages(Path::new(&path));
    let read = runs(&resident);
    assert_eq!(calibration.large_read_bytes, 128 << 10);
    assert_eq!(calibration.large_reads, 96);
    assert_eq!(read.len(), 96, "resident runs: {read:?}");
    assert!(read.iter().all(|&(_, len)| len == 32), "{read:?}");
    assert!(
        read.windows(2).all(|w| w[1].0 >= w[0].0 + 64),
        "reads closer than their slots: {read:?}"
    );
    assert_eq!(calibration.small_reads, 1024);

    // The fit, redone from the reported times of a read of 4 KiB and of
    // 128 KiB: time = request + bytes / bandwidth.
    let per_byte = (calibration.large_read_us - calibration.small_read_us) / (131072.0 - 4096.0);
    assert!(per_byte > 0.0, "{calibration:?}");
    let bandwidth_mb_s = 1.0 / per_byte;
    assert!((calibration.bandwidth_mb_s - bandwidth_mb_s).abs() <= 1e-9 * bandwidth_mb_s);
    let request_us = (calibration.small_read_us - 4096.0 * per_byte).max(0.0);
    assert!((calibration.request_us - request_us).abs() <= 1e-9 * request_us.max(1.0));
    let gap = (request_us * bandwidth_mb_s) as u64 / PAGE * PAGE;
    assert!(
        calibration.merge_gap_bytes.abs_diff(gap) <= PAGE,
        "{calibration:?}"
    );
    assert!(calibration.latency_us > 0.0 && calibration.threads == 2);
}

#[test]
fn a_file_under_16_mib_is_refused_by_name() {
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let path = dir.path().join("small");
    coldstart_testkit::cold_file(&path, 2048, PAGE);
    let e = calibrate(&path, 2).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
    assert!(e.to_string().contains(&path.display().to_string()), "{e}");
}
