//! How fast a recorded trace becomes a profile: builds synthetic ring-buffer
//! data for two CPUs in the kernel's layout (a process tree, then a cold
//! start's mix of page-cache insertions, fault-around ranges, faults and
//! read() ranges over 97 files), then times each stage coldstart runs after
//! tracing stops: the sub-buffer walk, decoding, assembling rows (process
//! tree, paths, page events) and writing them to a SQLite profile on disk.
//!
//! The target (BENCHMARKS.md, issue 3) is 1 million events per second or
//! more for the whole pipeline; the program exits 1 below that.
//!
//! Run with `cargo run --release -p coldstart-record --example ingest_bench
//! [-- EVENTS]` (default 2,000,000).

use std::collections::HashMap;
use std::hint::black_box;
use std::time::{Duration, Instant};

use coldstart_profile::{CacheMode, Profile, RunStart};
use coldstart_record::paths::{Inode, SeenFile};
use coldstart_record::trace::{Assembled, Mappings, assemble, decode_buffers};
use coldstart_record::tracefs::clock::Placement;
use coldstart_record::tracefs::events::{Decoder, EventKind, TraceEvent, kernel_dev_to_user};
use coldstart_record::tracefs::format::{EventFormat, HeaderPage};
use coldstart_record::tracefs::ringbuf::decode_stream;

const DEFAULT_EVENTS: usize = 2_000_000;
const ROUNDS: usize = 5;
const TARGET_EVENTS_PER_SEC: f64 = 1e6;
const ROOT_PID: i32 = 1000;
const TASKS: u64 = 7;
const FILES: u64 = 97;
const DEV: u32 = (8 << 20) | 1;

const HEADER: HeaderPage = HeaderPage {
    timestamp_offset: 0,
    commit_offset: 8,
    commit_size: 8,
    data_offset: 16,
    data_size: 4080,
};

/// A format file in the kernel's layout, for the fields given as
/// (declaration, offset, size, signed).
fn format(name: &str, id: u16, fields: &[(&str, usize, usize, bool)]) -> EventFormat {
    let mut text = format!(
        "name: {name}\nID: {id}\nformat:\n\
         \tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
         \tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n\
         \tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n\
         \tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\n"
    );
    for (decl, offset, size, signed) in fields {
        text += &format!(
            "\tfield:{decl};\toffset:{offset};\tsize:{size};\tsigned:{};\n",
            u8::from(*signed)
        );
    }
    text += "\nprint fmt: \"\"\n";
    match EventFormat::parse(&text) {
        Ok(format) => format,
        Err(e) => panic!("synthetic format for {name}: {e}"),
    }
}

/// The 6.18 x86-64 layouts of the events coldstart requires.
fn formats() -> Vec<EventFormat> {
    let page = [
        ("unsigned long pfn", 8, 8, false),
        ("unsigned long i_ino", 16, 8, false),
        ("unsigned long index", 24, 8, false),
        ("dev_t s_dev", 32, 4, false),
        ("unsigned char order", 36, 1, false),
    ];
    let range = [
        ("unsigned long i_ino", 8, 8, false),
        ("dev_t s_dev", 16, 4, false),
        ("unsigned long index", 24, 8, false),
        ("unsigned long last_index", 32, 8, false),
    ];
    vec![
        format("mm_filemap_add_to_page_cache", 600, &page),
        format("mm_filemap_delete_from_page_cache", 601, &page),
        format("mm_filemap_fault", 597, &range[..3]),
        format("mm_filemap_map_pages", 598, &range),
        format("mm_filemap_get_pages", 599, &range),
        format(
            "task_newtask",
            205,
            &[
                ("pid_t pid", 8, 4, true),
                ("char comm[16]", 12, 16, false),
                ("u64 clone_flags", 32, 8, false),
            ],
        ),
        format(
            "sched_process_exec",
            365,
            &[
                ("__data_loc char[] filename", 8, 4, false),
                ("pid_t pid", 12, 4, true),
                ("pid_t old_pid", 16, 4, true),
            ],
        ),
        format(
            "sched_process_exit",
            369,
            &[
                ("char comm[16]", 8, 16, false),
                ("pid_t pid", 24, 4, true),
                ("int prio", 28, 4, true),
            ],
        ),
    ]
}

/// A cold start's mix: mostly insertions, mapped ranges and faults, by the
/// tree's tasks, over `FILES` files.
fn record(i: u64) -> Vec<u8> {
    let (id, len): (u16, usize) = match i % 20 {
        0..=7 => (600, 40),
        8..=13 => (598, 40),
        14..=18 => (597, 32),
        _ => (599, 40),
    };
    let mut r = header(id, ROOT_PID + (i % TASKS) as i32, len);
    let (ino, dev, index) = if id == 600 { (16, 32, 24) } else { (8, 16, 24) };
    r[ino..ino + 8].copy_from_slice(&(i % FILES).to_ne_bytes());
    r[dev..dev + 4].copy_from_slice(&DEV.to_ne_bytes());
    r[index..index + 8].copy_from_slice(&i.to_ne_bytes());
    if len == 40 && id != 600 {
        r[32..40].copy_from_slice(&(i + 15).to_ne_bytes());
    }
    r
}

/// A record of event `id` by task `pid`, zeroed after the common fields.
fn header(id: u16, pid: i32, len: usize) -> Vec<u8> {
    let mut r = vec![0u8; len];
    r[0..2].copy_from_slice(&id.to_ne_bytes());
    r[4..8].copy_from_slice(&pid.to_ne_bytes());
    r
}

/// The root's exec, then the root creating the other tasks as processes.
fn tree() -> Vec<Vec<u8>> {
    let filename = b"/usr/bin/app\0";
    let mut exec = header(365, ROOT_PID, 20 + filename.len().next_multiple_of(4));
    let data_loc = ((filename.len() as u32) << 16) | 20;
    exec[8..12].copy_from_slice(&data_loc.to_ne_bytes());
    exec[12..16].copy_from_slice(&ROOT_PID.to_ne_bytes());
    exec[16..20].copy_from_slice(&ROOT_PID.to_ne_bytes());
    exec[20..20 + filename.len()].copy_from_slice(filename);
    let mut records = vec![exec];
    for task in 1..TASKS as i32 {
        let mut fork = header(205, ROOT_PID, 40);
        fork[8..12].copy_from_slice(&(ROOT_PID + task).to_ne_bytes());
        fork[12..15].copy_from_slice(b"app");
        records.push(fork);
    }
    records
}

/// Packs records into whole sub-buffers, as trace_pipe_raw would hand them
/// over, starting at trace time `start_ts`.
fn build_stream(records: impl Iterator<Item = Vec<u8>>, start_ts: u64) -> Vec<u8> {
    let size = HEADER.subbuf_size();
    let mut stream = Vec::new();
    let mut page = vec![0u8; size];
    let mut used = 0;
    // Time only moves forward within a CPU's buffer, as in the kernel's.
    let mut ts = start_ts;
    for (i, payload) in records.enumerate() {
        let need = 4 + payload.len();
        if used + need > HEADER.data_size {
            page[8..16].copy_from_slice(&(used as u64).to_ne_bytes());
            stream.extend_from_slice(&page);
            page.fill(0);
            used = 0;
        }
        let delta = 1 + (i % 50) as u32;
        if used == 0 {
            // A sub-buffer's first event is at its page timestamp.
            page[0..8].copy_from_slice(&ts.to_ne_bytes());
        }
        ts += u64::from(delta);
        let delta = if used == 0 { 0 } else { delta };
        let at = HEADER.data_offset + used;
        let header = (payload.len() / 4) as u32 | (delta << 5);
        page[at..at + 4].copy_from_slice(&header.to_ne_bytes());
        page[at + 4..at + need].copy_from_slice(&payload);
        used += need;
    }
    page[8..16].copy_from_slice(&(used as u64).to_ne_bytes());
    stream.extend_from_slice(&page);
    stream
}

/// Two CPUs' streams: the tree and even events on CPU 0, odd ones on CPU 1.
fn build_buffers(events: usize) -> Vec<(u32, Vec<u8>)> {
    let even = (0..events as u64).step_by(2).map(record);
    let odd = (1..events as u64).step_by(2).map(record);
    vec![
        (0, build_stream(tree().into_iter().chain(even), 1_000_000)),
        (1, build_stream(odd, 2_000_000)),
    ]
}

/// What the open watcher would have seen: every file with its path.
fn opens() -> HashMap<Inode, SeenFile> {
    (0..FILES)
        .map(|ino| {
            let file = SeenFile {
                path: format!("/usr/lib/app/lib{ino}.so"),
                size: 64 << 20,
                mtime_ns: 0,
                openers: vec![ROOT_PID],
                opened_as: None,
                unreachable: false,
            };
            (
                Inode {
                    dev: kernel_dev_to_user(DEV),
                    ino,
                },
                file,
            )
        })
        .collect()
}

fn best_of(rounds: usize, mut run: impl FnMut() -> u64) -> (Duration, u64) {
    let mut best = Duration::MAX;
    let mut result = 0;
    for _ in 0..rounds {
        let start = Instant::now();
        result = black_box(run());
        best = best.min(start.elapsed());
    }
    (best, result)
}

fn report(what: &str, events: u64, bytes: usize, time: Duration) {
    let secs = time.as_secs_f64();
    println!(
        "{what:<28} {:>7.1} M events/s  {:>7.0} MiB/s  ({:.1} ms)",
        events as f64 / secs / 1e6,
        bytes as f64 / secs / (1024.0 * 1024.0),
        secs * 1e3
    );
}

fn rate(events: usize, time: Duration) -> f64 {
    events as f64 / time.as_secs_f64()
}

fn main() {
    let events: usize = match std::env::args().nth(1) {
        Some(n) => n
            .parse()
            .unwrap_or_else(|_| panic!("EVENTS must be a number, not {n}")),
        None => DEFAULT_EVENTS,
    };
    let decoder = match Decoder::from_formats(formats()) {
        Ok(decoder) => decoder,
        Err(e) => panic!("decoder: {e}"),
    };
    let buffers = build_buffers(events);
    let bytes: usize = buffers.iter().map(|(_, b)| b.len()).sum();
    println!(
        "{events} events on {} CPUs, {:.1} MiB of sub-buffers; best of {ROUNDS} rounds",
        buffers.len(),
        bytes as f64 / (1024.0 * 1024.0)
    );

    let (time, walked) = best_of(ROUNDS, || {
        let mut n = 0;
        for (_, stream) in &buffers {
            match decode_stream(stream, &HEADER, |ts, payload| {
                black_box((ts, payload.len()));
            }) {
                Ok(summary) => n += summary.events,
                Err(e) => panic!("walk: {e}"),
            }
        }
        n
    });
    report("sub-buffer walk", walked, bytes, time);

    let (time, pages) = best_of(ROUNDS, || {
        let decoded = match decode_buffers(&buffers, &HEADER, &decoder, None, &Placement::Mono)
            .map(|(events, _)| events)
        {
            Ok(decoded) => decoded,
            Err(e) => panic!("decode: {e}"),
        };
        decoded
            .iter()
            .map(|event| match event.kind {
                EventKind::PageCacheAdd { order, .. } => 1 << order,
                EventKind::MapPages { first, last, .. }
                | EventKind::GetPages { first, last, .. } => last - first + 1,
                EventKind::Fault { .. } => 1,
                _ => 0,
            })
            .sum::<u64>()
    });
    report("walk + decode + merge", walked, bytes, time);
    assert_eq!(decoder.skipped().total(), 0);
    black_box(pages);

    let decoded = decode_buffers(&buffers, &HEADER, &decoder, None, &Placement::Mono)
        .map(|(events, _)| events)
        .expect("decoded above");
    let opens = opens();
    let (time, rows) = best_of(ROUNDS, || {
        let assembled = assemble_rows(&decoded, &opens);
        assembled.batch.page_events.len() as u64
    });
    report("assemble rows", walked, bytes, time);
    let assembled = assemble_rows(&decoded, &opens);
    let in_tree = assembled
        .batch
        .processes
        .iter()
        .filter(|p| p.in_tree)
        .count();
    assert_eq!(in_tree, TASKS as usize, "the synthetic tree is followed");
    assert_eq!(assembled.batch.files.len(), FILES as usize);
    assert!(assembled.batch.files.iter().all(|f| f.path.is_some()));
    black_box(rows);

    // On the real disk, as a profile is: /var/tmp, not a tmpfs.
    let dir = tempfile::Builder::new()
        .prefix("coldstart-ingest-bench")
        .tempdir_in("/var/tmp")
        .expect("a temporary directory in /var/tmp");
    let mut round = 0;
    let (time, written) = best_of(ROUNDS, || {
        round += 1;
        write_profile(&dir.path().join(format!("{round}.db")), &assembled);
        assembled.batch.page_events.len() as u64
    });
    report("write SQLite profile", walked, bytes, time);
    println!("  ({written} page-event rows per profile)");

    // The whole pipeline in one go, as `coldstart trace` runs it.
    let (time, _) = best_of(ROUNDS, || {
        round += 1;
        let decoded = decode_buffers(&buffers, &HEADER, &decoder, None, &Placement::Mono)
            .map(|(events, _)| events)
            .expect("decode");
        let assembled = assemble_rows(&decoded, &opens);
        write_profile(&dir.path().join(format!("{round}.db")), &assembled);
        decoded.len() as u64
    });
    report("whole ingest", walked, bytes, time);
    let whole = rate(events, time);
    if whole < TARGET_EVENTS_PER_SEC {
        println!(
            "FAIL: {:.2} M events/s is below the target of {:.1} M/s",
            whole / 1e6,
            TARGET_EVENTS_PER_SEC / 1e6
        );
        std::process::exit(1);
    }
    println!(
        "ok: {:.2} M events/s, target {:.1} M/s",
        whole / 1e6,
        TARGET_EVENTS_PER_SEC / 1e6
    );
}

fn assemble_rows(decoded: &[TraceEvent], opens: &HashMap<Inode, SeenFile>) -> Assembled {
    let no_maps = HashMap::new();
    assemble(
        decoded,
        1_000_000,
        ROOT_PID,
        &coldstart_record::filesystems::Filesystems::here(),
        opens,
        &no_maps,
        &Mappings::default(),
        4096,
        None,
    )
}

/// A new profile at `path` holding one run with the assembled rows.
fn write_profile(path: &std::path::Path, assembled: &Assembled) {
    let mut profile = Profile::create_or_open(path).expect("a new profile");
    let run = profile.begin_run(&run_start()).expect("begin run");
    profile.write(run, &assembled.batch).expect("write rows");
}

fn run_start() -> RunStart {
    RunStart {
        argv: vec!["/usr/bin/app".into()],
        cwd: "/".into(),
        cache_mode: CacheMode::Cold,
        started_at_unix_ns: 0,
        kernel: "bench".into(),
        page_size: 4096,
        read_ahead_kb: None,
        fault_around_bytes: None,
        uid: 0,
        gid: 0,
        tool_version: env!("CARGO_PKG_VERSION").into(),
    }
}
