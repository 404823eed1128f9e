//! Measures how fast recorded ring-buffer data turns into events: builds
//! about two million synthetic page-cache records in 4 KiB sub-buffers, then
//! times the sub-buffer walk alone and the walk plus event decoding.
//!
//! Run with `cargo run --release -p coldstart-record --example decode_bench`.

use std::hint::black_box;
use std::time::{Duration, Instant};

use coldstart_record::tracefs::events::{Decoder, EventKind};
use coldstart_record::tracefs::format::{EventFormat, HeaderPage};
use coldstart_record::tracefs::ringbuf::decode_stream;

const EVENTS: usize = 2_000_000;
const ROUNDS: usize = 5;

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

/// A cold start's mix: mostly insertions, mapped ranges and faults.
fn record(i: u64) -> Vec<u8> {
    let (id, len): (u16, usize) = match i % 20 {
        0..=7 => (600, 40),
        8..=13 => (598, 40),
        14..=18 => (597, 32),
        _ => (599, 40),
    };
    let mut r = vec![0u8; len];
    r[0..2].copy_from_slice(&id.to_ne_bytes());
    r[4..8].copy_from_slice(&((1000 + i % 7) as i32).to_ne_bytes());
    let (ino, dev, index) = if id == 600 { (16, 32, 24) } else { (8, 16, 24) };
    r[ino..ino + 8].copy_from_slice(&(i % 97).to_ne_bytes());
    r[dev..dev + 4].copy_from_slice(&((8u32 << 20) | 1).to_ne_bytes());
    r[index..index + 8].copy_from_slice(&i.to_ne_bytes());
    if len == 40 && id != 600 {
        r[32..40].copy_from_slice(&(i + 15).to_ne_bytes());
    }
    r
}

/// Packs `count` records into whole sub-buffers, as trace_pipe_raw would
/// hand them over.
fn build_stream(count: usize) -> Vec<u8> {
    let size = HEADER.subbuf_size();
    let mut stream = Vec::new();
    let mut page = vec![0u8; size];
    let mut used = 0;
    let mut page_ts = 1_000_000u64;
    for i in 0..count as u64 {
        let payload = record(i);
        let need = 4 + payload.len();
        if used + need > HEADER.data_size {
            page[8..16].copy_from_slice(&(used as u64).to_ne_bytes());
            stream.extend_from_slice(&page);
            page.fill(0);
            used = 0;
        }
        if used == 0 {
            page_ts += 1_000;
            page[0..8].copy_from_slice(&page_ts.to_ne_bytes());
        }
        let at = HEADER.data_offset + used;
        let delta = 1 + (i % 50) as u32;
        let header = (payload.len() / 4) as u32 | (delta << 5);
        page[at..at + 4].copy_from_slice(&header.to_ne_bytes());
        page[at + 4..at + need].copy_from_slice(&payload);
        used += need;
    }
    page[8..16].copy_from_slice(&(used as u64).to_ne_bytes());
    stream.extend_from_slice(&page);
    stream
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

fn main() {
    let decoder = match Decoder::from_formats(formats()) {
        Ok(decoder) => decoder,
        Err(e) => panic!("decoder: {e}"),
    };
    let stream = build_stream(EVENTS);
    println!(
        "{EVENTS} events in {} sub-buffers ({:.1} MiB)",
        stream.len() / HEADER.subbuf_size(),
        stream.len() as f64 / (1024.0 * 1024.0)
    );

    let (time, events) = best_of(ROUNDS, || {
        let mut sum = 0u64;
        match decode_stream(&stream, &HEADER, |ts, payload| {
            sum = sum.wrapping_add(ts ^ payload.len() as u64);
        }) {
            Ok(summary) => {
                black_box(sum);
                summary.events
            }
            Err(e) => panic!("walk: {e}"),
        }
    });
    report("sub-buffer walk", events, stream.len(), time);

    let (time, pages) = best_of(ROUNDS, || {
        let mut pages = 0u64;
        let result = decode_stream(&stream, &HEADER, |ts, payload| {
            if let Some(event) = decoder.decode(ts, payload) {
                pages += match event.kind {
                    EventKind::PageCacheAdd { order, .. } => 1 << order,
                    EventKind::MapPages { first, last, .. }
                    | EventKind::GetPages { first, last, .. } => last - first + 1,
                    EventKind::Fault { .. } => 1,
                    _ => 0,
                };
            }
        });
        if let Err(e) = result {
            panic!("decode: {e}");
        }
        pages
    });
    report("walk + decode", EVENTS as u64, stream.len(), time);
    assert_eq!(decoder.skipped().total(), 0);
    black_box(pages);
}
