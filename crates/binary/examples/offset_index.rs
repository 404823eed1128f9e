//! Builds the file-offset index of each file named on the command line and
//! prints its counts and how long building took, to check that indexing a
//! 300 MB binary stays well under a second:
//! `cargo run --release -p coldstart-binary --example offset_index -- FILE...`

use coldstart_binary::OffsetIndex;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

fn main() -> ExitCode {
    let paths: Vec<PathBuf> = std::env::args_os().skip(1).map(PathBuf::from).collect();
    if paths.is_empty() {
        eprintln!("usage: offset_index FILE...");
        return ExitCode::FAILURE;
    }
    let mut status = ExitCode::SUCCESS;
    for path in paths {
        let started = Instant::now();
        let index = match OffsetIndex::from_path(&path) {
            Ok(index) => index,
            Err(err) => {
                eprintln!("{err}");
                status = ExitCode::FAILURE;
                continue;
            }
        };
        let built = started.elapsed();
        // One lookup per 4 KiB page of the file, as a page trace would ask.
        let started = Instant::now();
        let mut hits = 0usize;
        for page in (0..index.file_size()).step_by(4096) {
            hits += index.symbols_in(page, page + 4096).count();
            hits += usize::from(index.section_at(page).is_some());
        }
        let queried = started.elapsed();
        // Names are demangled on first use; this is what naming them all costs.
        let started = Instant::now();
        let name_bytes: usize = index.symbols().iter().map(|s| s.name().len()).sum();
        let named = started.elapsed();
        let counts = index.symbol_counts();
        println!(
            "{}: {} bytes, {} sections, {} symbols from {:?} ({} read, {} not in the file, \
             {} aliases merged); built in {:.1} ms; {} page lookups ({hits} hits) in {:.1} ms; \
             all {name_bytes} bytes of names demangled in {:.1} ms",
            path.display(),
            index.file_size(),
            index.sections().len(),
            index.symbols().len(),
            index.symbol_source(),
            counts.read,
            counts.not_in_file,
            counts.aliases,
            built.as_secs_f64() * 1e3,
            index.file_size().div_ceil(4096),
            queried.as_secs_f64() * 1e3,
            named.as_secs_f64() * 1e3,
        );
    }
    status
}
