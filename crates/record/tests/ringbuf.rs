//! Tests of the tracefs readers against hand-built ring-buffer sub-buffers
//! (expected timestamps and payloads worked out by hand), real 6.18 format
//! files, this machine's live tracefs, and one end-to-end trace of
//! `/bin/true` in a private trace instance (root only).

use coldstart_testkit::skip;
use std::collections::{HashMap, HashSet};
use std::fs;
use std::io::{ErrorKind, Read};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use coldstart_record::tracefs::events::{
    Decoder, DecoderError, EventKind, FileKey, ReadaheadKind, Skip, TraceEvent, kernel_dev_to_user,
    user_dev_to_kernel,
};
use coldstart_record::tracefs::format::{EventFormat, HeaderPage};
use coldstart_record::tracefs::ringbuf::{
    MissedEvents, RingbufError, SubbufSummary, decode_stream, decode_subbuf,
};

// ---------------------------------------------------------------------------
// Sub-buffer construction. Encodings follow kernel/trace/ring_buffer.c:
// event header u32 = type_len (5 bits) | time_delta << 5.

const PAGE: HeaderPage = HeaderPage {
    timestamp_offset: 0,
    commit_offset: 8,
    commit_size: 8,
    data_offset: 16,
    data_size: 4080,
};

/// The data area of one sub-buffer, built event by event.
#[derive(Default)]
struct Data(Vec<u8>);

impl Data {
    fn word(&mut self, w: u32) -> &mut Self {
        self.0.extend_from_slice(&w.to_ne_bytes());
        self
    }

    /// type_len 1..=28: the length in words sits in the header.
    fn small(&mut self, delta: u32, payload: &[u8]) -> &mut Self {
        assert!(payload.len().is_multiple_of(4) && (4..=112).contains(&payload.len()));
        self.word((payload.len() / 4) as u32 | delta << 5);
        self.0.extend_from_slice(payload);
        self
    }

    /// type_len 0: array[0] holds the payload length plus its own 4 bytes.
    fn long(&mut self, delta: u32, payload: &[u8]) -> &mut Self {
        self.word(delta << 5).word(payload.len() as u32 + 4);
        self.0.extend_from_slice(payload);
        while !self.0.len().is_multiple_of(4) {
            self.0.push(0xee);
        }
        self
    }

    fn time_extend(&mut self, delta: u64) -> &mut Self {
        self.word(30 | ((delta & 0x7ff_ffff) as u32) << 5)
            .word((delta >> 27) as u32)
    }

    fn time_stamp(&mut self, low59: u64) -> &mut Self {
        self.word(31 | ((low59 & 0x7ff_ffff) as u32) << 5)
            .word((low59 >> 27) as u32)
    }

    /// A discarded event: padding whose array[0] counts itself and the
    /// bytes after it, so the event spans 4 + array[0] bytes.
    fn discarded(&mut self, delta: u32, array0: u32) -> &mut Self {
        assert!(array0 >= 4);
        self.word(29 | delta << 5).word(array0);
        self.0
            .extend(std::iter::repeat_n(0xdd, array0 as usize - 4));
        self
    }

    fn null_padding(&mut self) -> &mut Self {
        self.word(29)
    }

    /// A whole 4096-byte sub-buffer committing all the data built so far.
    fn page(&self, ts: u64) -> Vec<u8> {
        self.page_with(ts, self.0.len() as u64, None)
    }

    /// A sub-buffer of 4096 bytes, or 8192 if the data needs it.
    fn page_with(&self, ts: u64, commit: u64, missed_word: Option<u64>) -> Vec<u8> {
        let size = if 16 + self.0.len() + 8 <= 4096 {
            4096
        } else {
            8192
        };
        let mut buf = vec![0u8; size];
        buf[0..8].copy_from_slice(&ts.to_ne_bytes());
        buf[8..16].copy_from_slice(&commit.to_ne_bytes());
        buf[16..16 + self.0.len()].copy_from_slice(&self.0);
        if let Some(word) = missed_word {
            let at = 16 + self.0.len();
            buf[at..at + 8].copy_from_slice(&word.to_ne_bytes());
        }
        buf
    }
}

/// A sub-buffer's summary and the (timestamp, payload) pairs it yielded.
type Decoded = (Result<SubbufSummary, RingbufError>, Vec<(u64, Vec<u8>)>);

fn collect(buf: &[u8], header: &HeaderPage) -> Decoded {
    let mut seen = Vec::new();
    let result = decode_subbuf(buf, header, |ts, payload| seen.push((ts, payload.to_vec())));
    (result, seen)
}

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len).map(|i| seed.wrapping_add(i as u8)).collect()
}

#[test]
fn small_events_accumulate_deltas() {
    let a = pattern(0x10, 8);
    let b = pattern(0x20, 112);
    let c = pattern(0x30, 4);
    let buf = Data::default()
        .small(5, &a)
        .small(0, &b)
        .small((1 << 27) - 1, &c)
        .page(1_000_000);
    let (result, seen) = collect(&buf, &PAGE);
    let summary = result.expect("decodes");
    assert_eq!(
        seen,
        vec![(1_000_005, a), (1_000_005, b), (1_000_005 + 134_217_727, c),]
    );
    assert_eq!(
        summary,
        SubbufSummary {
            timestamp: 1_000_000,
            events: 3,
            discarded: 0,
            bytes_used: 12 + 116 + 8,
            missed: MissedEvents::None,
        }
    );
}

#[test]
fn long_events_use_the_length_word() {
    // 113 bytes is past what type_len can express; 200 needs no padding,
    // 113 needs 3 bytes of it, which must not reach the payload.
    let a = pattern(0x40, 200);
    let b = pattern(0x50, 113);
    let buf = Data::default()
        .long(7, &a)
        .long(3, &b)
        .small(1, &[9; 4])
        .page(50);
    let (result, seen) = collect(&buf, &PAGE);
    assert_eq!(result.expect("decodes").events, 3);
    assert_eq!(seen, vec![(57, a), (60, b), (61, vec![9; 4])]);
}

#[test]
fn literal_bytes() {
    // Written out by hand, native order assumed little-endian.
    if cfg!(target_endian = "big") {
        return;
    }
    #[rustfmt::skip]
    let mut buf = vec![
        0x10, 0, 0, 0, 0, 0, 0, 0,       // timestamp 16
        28, 0, 0, 0, 0, 0, 0, 0,         // commit: 28 bytes
        0x42, 0, 0, 0,                   // type_len 2, delta 2 (2<<5 | 2)
        0xaa, 0xbb, 0xcc, 0xdd, 1, 2, 3, 4,
        0x1e, 0, 0, 0, 1, 0, 0, 0,       // time extend: delta 0 | 1<<27
        0x21, 0, 0, 0,                   // type_len 1, delta 1
        5, 6, 7, 8,
    ];
    buf.resize(4096, 0);
    let (result, seen) = collect(&buf, &PAGE);
    assert_eq!(result.expect("decodes").bytes_used, 28);
    assert_eq!(
        seen,
        vec![
            (18, vec![0xaa, 0xbb, 0xcc, 0xdd, 1, 2, 3, 4]),
            (18 + (1 << 27) + 1, vec![5, 6, 7, 8]),
        ]
    );
}

#[test]
fn time_extend_adds_the_split_delta() {
    let delta = (3u64 << 27) + 17; // array[0] = 3, time_delta = 17
    let buf = Data::default()
        .time_extend(delta)
        .small(0, &[1; 4])
        .time_extend(1 << 40)
        .small(2, &[2; 4])
        .page(1000);
    let (_, seen) = collect(&buf, &PAGE);
    let first = 1000 + 3 * 134_217_728 + 17;
    assert_eq!(
        seen,
        vec![
            (first, vec![1; 4]),
            (first + 1_099_511_627_776 + 2, vec![2; 4])
        ]
    );
}

#[test]
fn absolute_time_stamp_replaces_low_59_bits() {
    let buf = Data::default()
        .small(10, &[1; 4])
        .time_stamp(5_000_000_123)
        .small(7, &[2; 4])
        .page(4_000_000_000);
    let (_, seen) = collect(&buf, &PAGE);
    assert_eq!(
        seen,
        vec![(4_000_000_010, vec![1; 4]), (5_000_000_130, vec![2; 4])]
    );

    // With bits above 59 in the page timestamp, those bits survive.
    let high = 0b10101u64 << 59;
    let buf = Data::default()
        .time_stamp(42)
        .small(1, &[3; 4])
        .page(high | 10);
    let (_, seen) = collect(&buf, &PAGE);
    assert_eq!(seen, vec![(high | 43, vec![3; 4])]);
}

#[test]
fn padding_with_a_delta_is_a_discarded_event() {
    let buf = Data::default()
        .small(1, &[1; 8])
        .discarded(100, 20)
        .small(3, &[2; 4])
        .page(0);
    let (result, seen) = collect(&buf, &PAGE);
    let summary = result.expect("decodes");
    assert_eq!(seen, vec![(1, vec![1; 8]), (104, vec![2; 4])]);
    assert_eq!((summary.events, summary.discarded), (2, 1));
}

#[test]
fn null_padding_ends_the_page() {
    // Bytes after a null padding event are not events even if committed.
    let mut data = Data::default();
    data.small(1, &[1; 4])
        .null_padding()
        .word(0xffff_ffff)
        .word(7);
    let buf = data.page(0);
    let (result, seen) = collect(&buf, &PAGE);
    assert_eq!(result.expect("decodes").events, 1);
    assert_eq!(seen, vec![(1, vec![1; 4])]);
}

#[test]
fn page_tail_padding_reaches_the_end() {
    // The writer's end-of-page padding: delta 1, array[0] covering the rest.
    let mut data = Data::default();
    data.small(2, &[1; 4]);
    let rest = 4080 - data.0.len() as u32 - 4;
    data.discarded(1, rest);
    assert_eq!(data.0.len(), 4080);
    let (result, seen) = collect(&data.page(0), &PAGE);
    assert_eq!(result.expect("decodes").bytes_used, 4080);
    assert_eq!(seen, vec![(2, vec![1; 4])]);
}

#[test]
fn missed_events_flags() {
    let mut data = Data::default();
    data.small(1, &[1; 4]);
    let len = data.0.len() as u64;

    let (result, _) = collect(&data.page_with(0, len | 1 << 31, None), &PAGE);
    assert_eq!(result.expect("decodes").missed, MissedEvents::Unknown);

    let page = data.page_with(0, len | 1 << 31 | 1 << 30, Some(12345));
    let (result, seen) = collect(&page, &PAGE);
    let summary = result.expect("decodes");
    assert_eq!(summary.missed, MissedEvents::Count(12345));
    assert_eq!(summary.bytes_used, 8);
    assert_eq!(seen.len(), 1);

    // What a 64-bit kernel really writes: the `int` flags sign-extend.
    let page = data.page_with(0, 0xffff_ffff_c000_0000 | len, Some(7));
    let (result, seen) = collect(&page, &PAGE);
    let summary = result.expect("decodes");
    assert_eq!(
        (summary.missed, summary.bytes_used),
        (MissedEvents::Count(7), 8)
    );
    assert_eq!(seen.len(), 1);
    let page = data.page_with(0, 0xffff_ffff_8000_0000 | len, None);
    assert_eq!(
        collect(&page, &PAGE).0.map(|s| s.missed),
        Ok(MissedEvents::Unknown)
    );
    // Only sign-extension sets the upper half, so it alone means a loss.
    let page = data.page_with(0, 0xffff_ffff_0000_0000 | len, None);
    let (result, seen) = collect(&page, &PAGE);
    assert_eq!(result.map(|s| s.missed), Ok(MissedEvents::Unknown));
    assert_eq!(seen.len(), 1);

    // A stored count with no room for it after the data.
    let mut full = Data::default();
    full.discarded(1, 4080 - 4);
    let page = full.page_with(0, 4080 | 1 << 31 | 1 << 30, None);
    let (result, _) = collect(&page[..4096], &PAGE);
    assert_eq!(
        result,
        Err(RingbufError::MissedCountOutOfBounds { offset: 4096 })
    );
}

#[test]
fn thirty_two_bit_commit_word() {
    let header = HeaderPage {
        timestamp_offset: 0,
        commit_offset: 8,
        commit_size: 4,
        data_offset: 12,
        data_size: 4084,
    };
    let mut buf = vec![0u8; 4096];
    buf[0..8].copy_from_slice(&99u64.to_ne_bytes());
    buf[8..12].copy_from_slice(&(8u32 | 1 << 31 | 1 << 30).to_ne_bytes());
    buf[12..16].copy_from_slice(&(1u32 | 4 << 5).to_ne_bytes());
    buf[16..20].copy_from_slice(&[7; 4]);
    buf[20..24].copy_from_slice(&3u32.to_ne_bytes());
    let (result, seen) = collect(&buf, &header);
    assert_eq!(result.expect("decodes").missed, MissedEvents::Count(3));
    assert_eq!(seen, vec![(103, vec![7; 4])]);
}

#[test]
fn empty_page() {
    let (result, seen) = collect(&Data::default().page(77), &PAGE);
    let summary = result.expect("decodes");
    assert_eq!(
        (summary.events, summary.bytes_used, summary.timestamp),
        (0, 0, 77)
    );
    assert!(seen.is_empty());
}

#[test]
fn malformed_pages_are_errors_with_offsets() {
    // Commit larger than the data area.
    let page = Data::default().page_with(0, 4081, None);
    assert_eq!(
        collect(&page, &PAGE).0,
        Err(RingbufError::CommitTooLarge {
            offset: 0,
            commit: 4081,
            capacity: 4080
        })
    );
    // Commit larger than what was actually read.
    let page = Data::default().page_with(0, 100, None);
    assert!(matches!(
        collect(&page[..64], &PAGE).0,
        Err(RingbufError::CommitTooLarge { capacity: 48, .. })
    ));
    // Shorter than the header.
    assert!(matches!(
        collect(&page[..10], &PAGE).0,
        Err(RingbufError::ShortSubbuf {
            len: 10,
            need: 16,
            ..
        })
    ));

    // A small event claiming more bytes than are committed.
    let mut data = Data::default();
    data.small(1, &[0; 4]).word(28);
    let page = data.page(0);
    assert_eq!(
        collect(&page, &PAGE).0,
        Err(RingbufError::EventOverrun {
            offset: 24,
            type_len: 28,
            need: 116,
            left: 4
        })
    );

    // A long event whose length word is below 4, or huge.
    let mut data = Data::default();
    data.word(0).word(3);
    assert_eq!(
        collect(&data.page(0), &PAGE).0,
        Err(RingbufError::BadLength {
            offset: 16,
            length: 3
        })
    );
    let mut data = Data::default();
    data.word(0).word(u32::MAX);
    assert!(matches!(
        collect(&data.page(0), &PAGE).0,
        Err(RingbufError::EventOverrun {
            offset: 16,
            type_len: 0,
            ..
        })
    ));

    // Commit ends inside an event header or in the middle of a long event.
    let mut data = Data::default();
    data.small(1, &[0; 4]);
    assert_eq!(
        collect(&data.page_with(0, 6, None), &PAGE).0,
        Err(RingbufError::EventOverrun {
            offset: 16,
            type_len: 1,
            need: 8,
            left: 6
        })
    );
    assert_eq!(
        collect(&data.page_with(0, 2, None), &PAGE).0,
        Err(RingbufError::SplitHeader {
            offset: 16,
            left: 2
        })
    );
    let mut data = Data::default();
    data.time_extend(1 << 30);
    assert!(matches!(
        collect(&data.page_with(0, 4, None), &PAGE).0,
        Err(RingbufError::EventOverrun { type_len: 30, .. })
    ));
}

#[test]
fn streams_walk_whole_subbufs() {
    let first = Data::default()
        .small(1, &[1; 4])
        .small(1, &[2; 4])
        .page(100);
    let second = Data::default()
        .small(5, &[3; 4])
        .page_with(200, 8 | 1 << 31, None);
    let mut bytes = first.clone();
    bytes.extend_from_slice(&second);
    let mut seen = Vec::new();
    let summary =
        decode_stream(&bytes, &PAGE, |ts, p| seen.push((ts, p.to_vec()))).expect("decodes");
    assert_eq!(
        seen,
        vec![(101, vec![1; 4]), (102, vec![2; 4]), (205, vec![3; 4])]
    );
    assert_eq!(
        (summary.subbufs, summary.events, summary.missed_unknown),
        (2, 3, 1)
    );
    assert_eq!(summary.bytes_used, 16 + 8);

    // A stray partial sub-buffer at the end is reported where it starts.
    bytes.extend_from_slice(&[0; 100]);
    assert_eq!(
        decode_stream(&bytes, &PAGE, |_, _| {}),
        Err(RingbufError::TrailingBytes {
            offset: 8192,
            len: 100,
            subbuf_size: 4096
        })
    );

    // An error in the second sub-buffer names its offset in the stream.
    let mut bytes = first;
    bytes.extend_from_slice(&Data::default().word(0).word(1).page(0));
    assert_eq!(
        decode_stream(&bytes, &PAGE, |_, _| {}),
        Err(RingbufError::BadLength {
            offset: 4096 + 16,
            length: 1
        })
    );

    assert_eq!(
        decode_stream(&[], &PAGE, |_, _| {}).map(|s| s.subbufs),
        Ok(0)
    );
}

#[test]
fn larger_subbufs_from_header() {
    // buffer_subbuf_size_kb = 8 makes 8192-byte sub-buffers.
    let header = HeaderPage {
        data_size: 8192 - 16,
        ..PAGE
    };
    let mut data = Data::default();
    for i in 0..90u8 {
        data.long(1, &[i; 76]);
    }
    assert!(data.0.len() > 4080);
    let page = data.page(0);
    assert_eq!(page.len(), 8192);
    let mut count = 0;
    let summary = decode_stream(&page, &header, |ts, p| {
        count += 1;
        assert_eq!(ts, count);
        assert_eq!(p, &[(count - 1) as u8; 76][..]);
    })
    .expect("decodes");
    assert_eq!(summary.events, 90);
}

/// xorshift, so garbage is reproducible without a dependency.
fn garbage(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

#[test]
fn garbage_never_panics_or_hangs() {
    for seed in 0..2000u64 {
        let mut bytes = garbage(seed, 4096 * 2);
        // Plausible commits reach the event parser more often.
        let commit = (seed * 37) % 4200;
        bytes[8..16].copy_from_slice(&commit.to_ne_bytes());
        let mut events = 0u64;
        let _ = decode_stream(&bytes, &PAGE, |_, p| {
            events += 1;
            assert!(p.len() <= 4080);
        });
        let _ = decode_subbuf(&bytes[..(seed as usize % 4200)], &PAGE, |_, _| {});
    }
}

// ---------------------------------------------------------------------------
// Event formats, copied from a 6.18 x86-64 kernel.

const ADD: &str = "name: mm_filemap_add_to_page_cache\n\
ID: 600\n\
format:\n\
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n\
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n\
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\
\n\
\tfield:unsigned long pfn;\toffset:8;\tsize:8;\tsigned:0;\n\
\tfield:unsigned long i_ino;\toffset:16;\tsize:8;\tsigned:0;\n\
\tfield:unsigned long index;\toffset:24;\tsize:8;\tsigned:0;\n\
\tfield:dev_t s_dev;\toffset:32;\tsize:4;\tsigned:0;\n\
\tfield:unsigned char order;\toffset:36;\tsize:1;\tsigned:0;\n\
\n\
print fmt: \"dev %d:%d ino %lx pfn=0x%lx ofs=%lu order=%u\", ((unsigned int) ((REC->s_dev) >> 20)), ((unsigned int) ((REC->s_dev) & ((1U << 20) - 1))), REC->i_ino, REC->pfn, REC->index << 12, REC->order\n\
";

const DELETE: &str = "name: mm_filemap_delete_from_page_cache\n\
ID: 601\n\
format:\n\
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n\
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n\
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\
\n\
\tfield:unsigned long pfn;\toffset:8;\tsize:8;\tsigned:0;\n\
\tfield:unsigned long i_ino;\toffset:16;\tsize:8;\tsigned:0;\n\
\tfield:unsigned long index;\toffset:24;\tsize:8;\tsigned:0;\n\
\tfield:dev_t s_dev;\toffset:32;\tsize:4;\tsigned:0;\n\
\tfield:unsigned char order;\toffset:36;\tsize:1;\tsigned:0;\n\
\n\
print fmt: \"dev %d:%d ino %lx pfn=0x%lx ofs=%lu order=%u\", ((unsigned int) ((REC->s_dev) >> 20)), ((unsigned int) ((REC->s_dev) & ((1U << 20) - 1))), REC->i_ino, REC->pfn, REC->index << 12, REC->order\n\
";

const FAULT: &str = "name: mm_filemap_fault\n\
ID: 597\n\
format:\n\
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n\
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n\
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\
\n\
\tfield:unsigned long i_ino;\toffset:8;\tsize:8;\tsigned:0;\n\
\tfield:dev_t s_dev;\toffset:16;\tsize:4;\tsigned:0;\n\
\tfield:unsigned long index;\toffset:24;\tsize:8;\tsigned:0;\n\
\n\
print fmt: \"dev=%d:%d ino=%lx ofs=%lld\", ((unsigned int) ((REC->s_dev) >> 20)), ((unsigned int) ((REC->s_dev) & ((1U << 20) - 1))), REC->i_ino, ((loff_t)REC->index) << 12\n\
";

const MAP_PAGES: &str = "name: mm_filemap_map_pages\n\
ID: 598\n\
format:\n\
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n\
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n\
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\
\n\
\tfield:unsigned long i_ino;\toffset:8;\tsize:8;\tsigned:0;\n\
\tfield:dev_t s_dev;\toffset:16;\tsize:4;\tsigned:0;\n\
\tfield:unsigned long index;\toffset:24;\tsize:8;\tsigned:0;\n\
\tfield:unsigned long last_index;\toffset:32;\tsize:8;\tsigned:0;\n\
\n\
print fmt: \"dev=%d:%d ino=%lx ofs=%lld-%lld\", ((unsigned int) ((REC->s_dev) >> 20)), ((unsigned int) ((REC->s_dev) & ((1U << 20) - 1))), REC->i_ino, ((loff_t)REC->index) << 12, ((((loff_t)REC->last_index + 1) << 12) - 1)\n\
";

const GET_PAGES: &str = "name: mm_filemap_get_pages\n\
ID: 599\n\
format:\n\
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n\
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n\
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\
\n\
\tfield:unsigned long i_ino;\toffset:8;\tsize:8;\tsigned:0;\n\
\tfield:dev_t s_dev;\toffset:16;\tsize:4;\tsigned:0;\n\
\tfield:unsigned long index;\toffset:24;\tsize:8;\tsigned:0;\n\
\tfield:unsigned long last_index;\toffset:32;\tsize:8;\tsigned:0;\n\
\n\
print fmt: \"dev=%d:%d ino=%lx ofs=%lld-%lld\", ((unsigned int) ((REC->s_dev) >> 20)), ((unsigned int) ((REC->s_dev) & ((1U << 20) - 1))), REC->i_ino, ((loff_t)REC->index) << 12, ((((loff_t)REC->last_index + 1) << 12) - 1)\n\
";

const SYNC_RA: &str = "name: page_cache_sync_ra\n\
ID: 617\n\
format:\n\
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n\
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n\
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\
\n\
\tfield:unsigned long i_ino;\toffset:8;\tsize:8;\tsigned:0;\n\
\tfield:dev_t s_dev;\toffset:16;\tsize:4;\tsigned:0;\n\
\tfield:unsigned long index;\toffset:24;\tsize:8;\tsigned:0;\n\
\tfield:unsigned int order;\toffset:32;\tsize:4;\tsigned:0;\n\
\tfield:unsigned int size;\toffset:36;\tsize:4;\tsigned:0;\n\
\tfield:unsigned int async_size;\toffset:40;\tsize:4;\tsigned:0;\n\
\tfield:unsigned int ra_pages;\toffset:44;\tsize:4;\tsigned:0;\n\
\tfield:unsigned int mmap_miss;\toffset:48;\tsize:4;\tsigned:0;\n\
\tfield:loff_t prev_pos;\toffset:56;\tsize:8;\tsigned:1;\n\
\tfield:unsigned long req_count;\toffset:64;\tsize:8;\tsigned:0;\n\
\n\
print fmt: \"dev=%d:%d ino=%lx index=%lu req_count=%lu order=%u size=%u async_size=%u ra_pages=%u mmap_miss=%u prev_pos=%lld\", ((unsigned int) ((REC->s_dev) >> 20)), ((unsigned int) ((REC->s_dev) & ((1U << 20) - 1))), REC->i_ino, REC->index, REC->req_count, REC->order, REC->size, REC->async_size, REC->ra_pages, REC->mmap_miss, REC->prev_pos\n\
";

const ASYNC_RA: &str = "name: page_cache_async_ra\n\
ID: 616\n\
format:\n\
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n\
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n\
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\
\n\
\tfield:unsigned long i_ino;\toffset:8;\tsize:8;\tsigned:0;\n\
\tfield:dev_t s_dev;\toffset:16;\tsize:4;\tsigned:0;\n\
\tfield:unsigned long index;\toffset:24;\tsize:8;\tsigned:0;\n\
\tfield:unsigned int order;\toffset:32;\tsize:4;\tsigned:0;\n\
\tfield:unsigned int size;\toffset:36;\tsize:4;\tsigned:0;\n\
\tfield:unsigned int async_size;\toffset:40;\tsize:4;\tsigned:0;\n\
\tfield:unsigned int ra_pages;\toffset:44;\tsize:4;\tsigned:0;\n\
\tfield:unsigned int mmap_miss;\toffset:48;\tsize:4;\tsigned:0;\n\
\tfield:loff_t prev_pos;\toffset:56;\tsize:8;\tsigned:1;\n\
\tfield:unsigned long req_count;\toffset:64;\tsize:8;\tsigned:0;\n\
\n\
print fmt: \"dev=%d:%d ino=%lx index=%lu req_count=%lu order=%u size=%u async_size=%u ra_pages=%u mmap_miss=%u prev_pos=%lld\", ((unsigned int) ((REC->s_dev) >> 20)), ((unsigned int) ((REC->s_dev) & ((1U << 20) - 1))), REC->i_ino, REC->index, REC->req_count, REC->order, REC->size, REC->async_size, REC->ra_pages, REC->mmap_miss, REC->prev_pos\n\
";

const RA_ORDER: &str = "name: page_cache_ra_order\n\
ID: 618\n\
format:\n\
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n\
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n\
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\
\n\
\tfield:unsigned long i_ino;\toffset:8;\tsize:8;\tsigned:0;\n\
\tfield:dev_t s_dev;\toffset:16;\tsize:4;\tsigned:0;\n\
\tfield:unsigned long index;\toffset:24;\tsize:8;\tsigned:0;\n\
\tfield:unsigned int order;\toffset:32;\tsize:4;\tsigned:0;\n\
\tfield:unsigned int size;\toffset:36;\tsize:4;\tsigned:0;\n\
\tfield:unsigned int async_size;\toffset:40;\tsize:4;\tsigned:0;\n\
\tfield:unsigned int ra_pages;\toffset:44;\tsize:4;\tsigned:0;\n\
\n\
print fmt: \"dev=%d:%d ino=%lx index=%lu order=%u size=%u async_size=%u ra_pages=%u\", ((unsigned int) ((REC->s_dev) >> 20)), ((unsigned int) ((REC->s_dev) & ((1U << 20) - 1))), REC->i_ino, REC->index, REC->order, REC->size, REC->async_size, REC->ra_pages\n\
";

const NEWTASK: &str = "name: task_newtask\n\
ID: 205\n\
format:\n\
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n\
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n\
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\
\n\
\tfield:pid_t pid;\toffset:8;\tsize:4;\tsigned:1;\n\
\tfield:char comm[16];\toffset:12;\tsize:16;\tsigned:0;\n\
\tfield:u64 clone_flags;\toffset:32;\tsize:8;\tsigned:0;\n\
\tfield:short oom_score_adj;\toffset:40;\tsize:2;\tsigned:1;\n\
\n\
print fmt: \"pid=%d comm=%s clone_flags=%llx oom_score_adj=%hd\", REC->pid, REC->comm, REC->clone_flags, REC->oom_score_adj\n\
";

const EXEC: &str = "name: sched_process_exec\n\
ID: 365\n\
format:\n\
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n\
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n\
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\
\n\
\tfield:__data_loc char[] filename;\toffset:8;\tsize:4;\tsigned:0;\n\
\tfield:pid_t pid;\toffset:12;\tsize:4;\tsigned:1;\n\
\tfield:pid_t old_pid;\toffset:16;\tsize:4;\tsigned:1;\n\
\n\
print fmt: \"filename=%s pid=%d old_pid=%d\", __get_str(filename), REC->pid, REC->old_pid\n\
";

const EXIT: &str = "name: sched_process_exit\n\
ID: 369\n\
format:\n\
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n\
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n\
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\
\n\
\tfield:char comm[16];\toffset:8;\tsize:16;\tsigned:0;\n\
\tfield:pid_t pid;\toffset:24;\tsize:4;\tsigned:1;\n\
\tfield:int prio;\toffset:28;\tsize:4;\tsigned:1;\n\
\tfield:bool group_dead;\toffset:32;\tsize:1;\tsigned:0;\n\
\n\
print fmt: \"comm=%s pid=%d prio=%d group_dead=%s\", REC->comm, REC->pid, REC->prio, REC->group_dead ? \"true\" : \"false\"\n\
";

const LOAD_INODE: &str = "name: ext4_load_inode\n\
ID: 1201\n\
format:\n\
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n\
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n\
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\
\n\
\tfield:dev_t dev;\toffset:8;\tsize:4;\tsigned:0;\n\
\tfield:ino_t ino;\toffset:16;\tsize:8;\tsigned:0;\n\
\n\
print fmt: \"dev %d,%d ino %ld\", ((unsigned int) ((REC->dev) >> 20)), ((unsigned int) ((REC->dev) & ((1U << 20) - 1))), (unsigned long) REC->ino\n\
";

/// A syscall tracepoint's format as 6.18 writes it: the common fields,
/// `__syscall_nr`, then `fields` ("type name"), 8 bytes each from offset 16.
fn syscall_format(name: &str, id: u16, fields: &[&str]) -> EventFormat {
    let mut text = format!(
        "name: {name}\nID: {id}\nformat:\n\
         \tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
         \tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n\
         \tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n\
         \tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\n\
         \tfield:int __syscall_nr;\toffset:8;\tsize:4;\tsigned:1;\n"
    );
    for (i, field) in fields.iter().enumerate() {
        let signed = u8::from(field.starts_with("long"));
        text.push_str(&format!(
            "\tfield:{field};\toffset:{};\tsize:8;\tsigned:{signed};\n",
            16 + 8 * i
        ));
    }
    text.push_str("\nprint fmt: \"%lx\", REC->__syscall_nr\n");
    EventFormat::parse(&text).expect("syscall format parses")
}

const HEADER_PAGE: &str = "\tfield: u64 timestamp;\toffset:0;\tsize:8;\tsigned:0;\n\
\tfield: local_t commit;\toffset:8;\tsize:8;\tsigned:1;\n\
\tfield: int overwrite;\toffset:8;\tsize:1;\tsigned:1;\n\
\tfield: char data;\toffset:16;\tsize:4080;\tsigned:0;\n\
";

const ALL: [&str; 11] = [
    ADD, DELETE, FAULT, MAP_PAGES, GET_PAGES, SYNC_RA, ASYNC_RA, RA_ORDER, NEWTASK, EXEC, EXIT,
];

fn parse_all(texts: &[&str]) -> Vec<EventFormat> {
    texts
        .iter()
        .map(|t| EventFormat::parse(t).expect("6.18 format parses"))
        .collect()
}

fn decoder() -> Decoder {
    Decoder::from_formats(parse_all(&ALL)).expect("decoder from 6.18 formats")
}

/// A record of `len` bytes with the common header filled in; offsets below
/// are the 6.18 ones, written out rather than taken from the parser.
fn record(id: u16, tid: i32, len: usize) -> Vec<u8> {
    let mut r = vec![0u8; len];
    put(&mut r, 0, &id.to_ne_bytes());
    put(&mut r, 2, &[0x5a, 0x01]); // common_flags, common_preempt_count
    put(&mut r, 4, &tid.to_ne_bytes());
    r
}

fn put(record: &mut [u8], at: usize, bytes: &[u8]) {
    record[at..at + bytes.len()].copy_from_slice(bytes);
}

const DEV: u32 = (259 << 20) | 3;

fn file() -> FileKey {
    FileKey {
        dev: DEV,
        ino: 0x1234_5678_9abc,
    }
}

#[test]
fn parses_real_formats() {
    let formats = parse_all(&ALL);
    let add = &formats[0];
    assert_eq!(
        (add.name.as_str(), add.id),
        ("mm_filemap_add_to_page_cache", 600)
    );
    let names: Vec<_> = add.fields.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "common_type",
            "common_flags",
            "common_preempt_count",
            "common_pid",
            "pfn",
            "i_ino",
            "index",
            "s_dev",
            "order"
        ]
    );
    let order = add.field("order").expect("order");
    assert_eq!((order.offset, order.size, order.signed), (36, 1, false));
    let prev_pos = formats[5].field("prev_pos").expect("prev_pos");
    assert_eq!(
        (prev_pos.offset, prev_pos.size, prev_pos.signed),
        (56, 8, true)
    );
    let comm = formats[8].field("comm").expect("comm");
    assert_eq!((comm.offset, comm.size, comm.data_loc), (12, 16, false));
    let filename = formats[9].field("filename").expect("filename");
    assert!(filename.data_loc);

    let header = HeaderPage::parse(HEADER_PAGE).expect("header_page");
    assert_eq!(
        (
            header.timestamp_offset,
            header.commit_offset,
            header.commit_size
        ),
        (0, 8, 8)
    );
    assert_eq!((header.data_offset, header.data_size), (16, 4080));
}

#[test]
fn decodes_page_cache_events() {
    let d = decoder();
    let mut r = record(600, 77, 40);
    put(&mut r, 8, &0xdead_beef_u64.to_ne_bytes()); // pfn
    put(&mut r, 16, &0x1234_5678_9abc_u64.to_ne_bytes());
    put(&mut r, 24, &4096_u64.to_ne_bytes());
    put(&mut r, 32, &DEV.to_ne_bytes());
    put(&mut r, 36, &[4]);
    let add = TraceEvent {
        ts: 9,
        tid: 77,
        kind: EventKind::PageCacheAdd {
            file: file(),
            index: 4096,
            order: 4,
        },
    };
    assert_eq!(d.decode(9, &r), Some(add));
    put(&mut r, 0, &601_u16.to_ne_bytes());
    assert_eq!(
        d.try_decode(10, &r).map(|e| e.kind),
        Ok(EventKind::PageCacheDelete {
            file: file(),
            index: 4096,
            order: 4
        })
    );

    let mut r = record(597, -1, 32);
    put(&mut r, 8, &0x1234_5678_9abc_u64.to_ne_bytes());
    put(&mut r, 16, &DEV.to_ne_bytes());
    put(&mut r, 24, &u64::MAX.to_ne_bytes());
    assert_eq!(
        d.try_decode(1, &r),
        Ok(TraceEvent {
            ts: 1,
            tid: -1,
            kind: EventKind::Fault {
                file: file(),
                index: u64::MAX
            }
        })
    );

    for (id, get) in [(598u16, false), (599, true)] {
        let mut r = record(id, 5, 40);
        put(&mut r, 8, &0x1234_5678_9abc_u64.to_ne_bytes());
        put(&mut r, 16, &DEV.to_ne_bytes());
        put(&mut r, 24, &16_u64.to_ne_bytes());
        put(&mut r, 32, &31_u64.to_ne_bytes());
        let kind = d.try_decode(0, &r).expect("decodes").kind;
        let (first, last) = (16, 31);
        let expected = if get {
            EventKind::GetPages {
                file: file(),
                first,
                last,
            }
        } else {
            EventKind::MapPages {
                file: file(),
                first,
                last,
            }
        };
        assert_eq!(kind, expected);
    }
}

#[test]
fn decodes_readahead_events() {
    let d = decoder();
    for (id, kind) in [(617u16, ReadaheadKind::Sync), (616, ReadaheadKind::Async)] {
        let mut r = record(id, 3, 72);
        put(&mut r, 8, &0x1234_5678_9abc_u64.to_ne_bytes());
        put(&mut r, 16, &DEV.to_ne_bytes());
        put(&mut r, 24, &100_u64.to_ne_bytes());
        put(&mut r, 32, &2_u32.to_ne_bytes());
        put(&mut r, 36, &64_u32.to_ne_bytes());
        put(&mut r, 40, &32_u32.to_ne_bytes());
        put(&mut r, 44, &128_u32.to_ne_bytes());
        put(&mut r, 48, &7_u32.to_ne_bytes());
        put(&mut r, 56, &(-1_i64).to_ne_bytes());
        put(&mut r, 64, &3_u64.to_ne_bytes());
        assert_eq!(
            d.try_decode(0, &r).expect("decodes").kind,
            EventKind::Readahead {
                kind,
                file: file(),
                index: 100,
                order: 2,
                size: 64,
                async_size: 32,
                ra_pages: 128,
                mmap_miss: Some(7),
                prev_pos: Some(-1),
                req_count: Some(3),
            }
        );
    }
    let mut r = record(618, 3, 48);
    put(&mut r, 8, &0x1234_5678_9abc_u64.to_ne_bytes());
    put(&mut r, 16, &DEV.to_ne_bytes());
    put(&mut r, 24, &100_u64.to_ne_bytes());
    put(&mut r, 32, &2_u32.to_ne_bytes());
    put(&mut r, 36, &64_u32.to_ne_bytes());
    put(&mut r, 40, &32_u32.to_ne_bytes());
    put(&mut r, 44, &128_u32.to_ne_bytes());
    assert_eq!(
        d.try_decode(0, &r).expect("decodes").kind,
        EventKind::Readahead {
            kind: ReadaheadKind::Order,
            file: file(),
            index: 100,
            order: 2,
            size: 64,
            async_size: 32,
            ra_pages: 128,
            mmap_miss: None,
            prev_pos: None,
            req_count: None,
        }
    );
}

#[test]
fn decodes_inode_loads_when_the_kernel_has_the_tracepoint() {
    assert_eq!(decoder().id("ext4/ext4_load_inode"), None, "optional");
    let mut formats = parse_all(&ALL);
    formats.extend(parse_all(&[LOAD_INODE]));
    let d = Decoder::from_formats(formats).expect("decoder with ext4_load_inode");
    assert!(d.enabled_events().contains(&"ext4/ext4_load_inode"));
    let mut r = record(1201, 300, 24);
    put(&mut r, 8, &DEV.to_ne_bytes());
    put(&mut r, 16, &0x1234_5678_9abc_u64.to_ne_bytes());
    assert_eq!(
        d.try_decode(0, &r).expect("decodes"),
        TraceEvent {
            ts: 0,
            tid: 300,
            kind: EventKind::InodeLoad { file: file() }
        }
    );
    assert_eq!(
        d.try_decode(0, &r[..20]),
        Err(Skip::Malformed {
            event: "ext4/ext4_load_inode",
            field: "ino"
        })
    );
}

#[test]
fn decodes_the_calls_that_ask_for_readahead() {
    assert_eq!(
        decoder().id("syscalls/sys_enter_readahead"),
        None,
        "optional"
    );
    let mut formats = parse_all(&ALL);
    let exit = ["long ret"];
    formats.extend([
        syscall_format(
            "sys_enter_readahead",
            615,
            &["int fd", "loff_t offset", "size_t count"],
        ),
        syscall_format("sys_exit_readahead", 614, &exit),
        syscall_format(
            "sys_enter_fadvise64",
            613,
            &["int fd", "loff_t offset", "size_t len", "int advice"],
        ),
        syscall_format("sys_exit_fadvise64", 612, &exit),
        syscall_format(
            "sys_enter_madvise",
            726,
            &["unsigned long start", "size_t len_in", "int behavior"],
        ),
        syscall_format("sys_exit_madvise", 725, &exit),
        // arm64's name for fadvise: both lengths 64-bit.
        syscall_format(
            "sys_enter_fadvise64_64",
            611,
            &["int fd", "loff_t offset", "loff_t len", "int advice"],
        ),
        syscall_format("sys_exit_fadvise64_64", 610, &exit),
    ]);
    let d = Decoder::from_formats(formats).expect("decoder with the syscall events");
    let kind = |id: u16, advice_at: Option<(usize, u64)>| {
        let mut r = record(id, 300, 48);
        put(&mut r, 8, &221_i32.to_ne_bytes());
        if let Some((at, advice)) = advice_at {
            put(&mut r, at, &advice.to_ne_bytes());
        }
        d.try_decode(0, &r).expect("decodes").kind
    };
    // readahead(2) always asks; fadvise64 and madvise only with WILLNEED
    // (3): any other advice ends nothing and starts nothing.
    assert_eq!(kind(615, None), EventKind::AskStart);
    assert_eq!(kind(613, Some((40, 3))), EventKind::AskStart);
    assert_eq!(kind(613, Some((40, 4))), EventKind::AskEnd);
    assert_eq!(kind(613, Some((40, 1))), EventKind::AskEnd);
    assert_eq!(kind(726, Some((32, 3))), EventKind::AskStart);
    assert_eq!(kind(726, Some((32, 22))), EventKind::AskEnd);
    assert_eq!(kind(611, Some((40, 3))), EventKind::AskStart);
    assert_eq!(kind(611, Some((40, 2))), EventKind::AskEnd);
    for exit in [614, 612, 725, 610] {
        assert_eq!(kind(exit, None), EventKind::AskEnd);
    }
    let mut r = record(613, 300, 48);
    put(&mut r, 40, &3_u64.to_ne_bytes());
    assert_eq!(
        d.try_decode(0, &r[..44]),
        Err(Skip::Malformed {
            event: "syscalls/sys_enter_fadvise64",
            field: "advice"
        })
    );
}

#[test]
fn decodes_task_events() {
    let d = decoder();
    let mut r = record(205, 100, 44);
    put(&mut r, 8, &101_i32.to_ne_bytes());
    put(&mut r, 12, b"worker\0garbage\0\0");
    put(&mut r, 32, &0x3d0f00_u64.to_ne_bytes());
    assert_eq!(
        d.try_decode(0, &r).expect("decodes"),
        TraceEvent {
            ts: 0,
            tid: 100,
            kind: EventKind::NewTask {
                pid: 101,
                comm: "worker".into(),
                clone_flags: 0x3d0f00
            }
        }
    );

    // __data_loc: offset 20, length 10 including the NUL.
    let mut r = record(365, 101, 32);
    put(&mut r, 8, &(20u32 | 10 << 16).to_ne_bytes());
    put(&mut r, 12, &101_i32.to_ne_bytes());
    put(&mut r, 16, &100_i32.to_ne_bytes());
    put(&mut r, 20, b"/bin/true\0");
    assert_eq!(
        d.try_decode(0, &r).expect("decodes").kind,
        EventKind::Exec {
            pid: 101,
            old_pid: 100,
            filename: "/bin/true".into()
        }
    );
    // The same descriptor pointing past the record end.
    put(&mut r, 8, &(28u32 | 10 << 16).to_ne_bytes());
    assert_eq!(
        d.try_decode(0, &r),
        Err(Skip::Malformed {
            event: "sched/sched_process_exec",
            field: "filename"
        })
    );

    // A full 16-byte comm has no NUL; invalid UTF-8 is replaced.
    let mut r = record(369, 101, 36);
    put(&mut r, 8, b"abcdefghijklm\xffop");
    put(&mut r, 24, &101_i32.to_ne_bytes());
    put(&mut r, 28, &120_i32.to_ne_bytes());
    put(&mut r, 32, &[1]);
    assert_eq!(
        d.try_decode(0, &r).expect("decodes").kind,
        EventKind::Exit {
            pid: 101,
            comm: "abcdefghijklm\u{fffd}op".into(),
            group_dead: Some(true)
        }
    );
}

#[test]
fn skips_are_counted_with_reasons() {
    let d = decoder();
    assert_eq!(d.try_decode(0, &[1]), Err(Skip::NoHeader { len: 1 }));
    assert_eq!(d.try_decode(0, &record(1, 0, 32)), Err(Skip::UnknownId(1)));
    assert_eq!(
        d.try_decode(0, &record(65535, 0, 32)),
        Err(Skip::UnknownId(65535))
    );
    // A fault record cut before its index.
    assert_eq!(
        d.try_decode(0, &record(597, 0, 28)),
        Err(Skip::Malformed {
            event: "filemap/mm_filemap_fault",
            field: "index"
        })
    );
    // A common header with no pid.
    assert!(matches!(
        d.try_decode(0, &record(597, 0, 32)[..6]),
        Err(Skip::Malformed {
            field: "common_pid",
            ..
        })
    ));
    // An order that does not fit u8 cannot happen with a 1-byte field, but
    // a dev_t wider than 32 bits in a future format must not wrap.
    assert_eq!(d.skipped().total(), 0, "try_decode counts nothing");
    assert_eq!(d.decode(0, &[1]), None);
    assert_eq!(d.decode(0, &record(1, 0, 32)), None);
    assert_eq!(d.decode(0, &record(597, 0, 28)), None);
    let skipped = d.skipped();
    assert_eq!(
        (skipped.no_header, skipped.unknown_id, skipped.malformed),
        (1, 1, 1)
    );
}

#[test]
fn offsets_come_from_the_format() {
    // Swap where i_ino and index live; the decoder must follow.
    let moved = FAULT
        .replace("i_ino;\toffset:8;", "i_ino;\toffset:24;")
        .replace("index;\toffset:24;", "index;\toffset:8;");
    assert_ne!(moved, FAULT);
    let mut texts: Vec<String> = ALL.iter().map(|s| s.to_string()).collect();
    texts[2] = moved;
    let d = Decoder::from_formats(texts.iter().map(|t| EventFormat::parse(t).expect("parses")))
        .expect("decoder");
    let mut r = record(597, 1, 32);
    put(&mut r, 8, &5_u64.to_ne_bytes());
    put(&mut r, 16, &DEV.to_ne_bytes());
    put(&mut r, 24, &0x1234_5678_9abc_u64.to_ne_bytes());
    assert_eq!(
        d.try_decode(0, &r).expect("decodes").kind,
        EventKind::Fault {
            file: file(),
            index: 5
        }
    );
}

#[test]
fn unusable_formats_are_errors() {
    let without = |skip: usize| {
        let texts: Vec<&str> = ALL
            .iter()
            .enumerate()
            .filter(|&(i, _)| i != skip)
            .map(|(_, t)| *t)
            .collect();
        Decoder::from_formats(parse_all(&texts))
    };
    assert!(matches!(
        without(9),
        Err(DecoderError::MissingEvent {
            event: "sched/sched_process_exec"
        })
    ));
    // Readahead tracepoints are optional.
    let d = without(5).expect("no sync_ra is fine");
    assert_eq!(d.enabled_events().len(), 10);
    assert!(!d.enabled_events().contains(&"readahead/page_cache_sync_ra"));
    assert_eq!(d.id("readahead/page_cache_sync_ra"), None);

    let mut texts: Vec<String> = ALL.iter().map(|s| s.to_string()).collect();
    texts[2] = FAULT.replace("dev_t s_dev;", "dev_t dev;");
    let err = Decoder::from_formats(texts.iter().map(|t| EventFormat::parse(t).expect("parses")))
        .expect_err("no s_dev");
    assert_eq!(
        err.to_string(),
        "tracepoint filemap/mm_filemap_fault: its format has no field `s_dev`"
    );

    texts[2] = FAULT.replace(
        "index;\toffset:24;\tsize:8;",
        "index;\toffset:24;\tsize:16;",
    );
    let err = Decoder::from_formats(texts.iter().map(|t| EventFormat::parse(t).expect("parses")))
        .expect_err("16-byte index");
    assert!(
        matches!(err, DecoderError::FieldShape { field: "index", .. }),
        "{err}"
    );

    texts[2] = FAULT.replace("ID: 597", "ID: 600");
    let err = Decoder::from_formats(texts.iter().map(|t| EventFormat::parse(t).expect("parses")))
        .expect_err("duplicate id");
    assert!(
        matches!(err, DecoderError::DuplicateId { id: 600, .. }),
        "{err}"
    );
}

#[test]
fn reads_an_events_directory() {
    let dir = tempfile::tempdir().expect("tempdir");
    let paths = [
        "filemap/mm_filemap_add_to_page_cache",
        "filemap/mm_filemap_delete_from_page_cache",
        "filemap/mm_filemap_fault",
        "filemap/mm_filemap_map_pages",
        "filemap/mm_filemap_get_pages",
        "readahead/page_cache_sync_ra",
        "readahead/page_cache_async_ra",
        "readahead/page_cache_ra_order",
        "task/task_newtask",
        "sched/sched_process_exec",
        "sched/sched_process_exit",
    ];
    // An older kernel: no readahead system at all.
    for (path, text) in paths.iter().zip(ALL) {
        if path.starts_with("readahead/") {
            continue;
        }
        let event_dir = dir.path().join(path);
        fs::create_dir_all(&event_dir).expect("mkdir");
        fs::write(event_dir.join("format"), text).expect("write");
    }
    fs::write(dir.path().join("header_page"), HEADER_PAGE).expect("write");
    let d = Decoder::from_events_dir(dir.path()).expect("decoder");
    let expected: Vec<&str> = paths
        .iter()
        .copied()
        .filter(|p| !p.starts_with("readahead/"))
        .collect();
    assert_eq!(d.enabled_events(), expected);
    assert_eq!(d.id("sched/sched_process_exec"), Some(365));
    assert_eq!(
        HeaderPage::read(dir.path()).expect("header").subbuf_size(),
        4096
    );

    fs::write(
        dir.path().join("sched/sched_process_exit/format"),
        EXIT.replace("offset:24;", "offset:x;"),
    )
    .expect("write");
    let err = Decoder::from_events_dir(dir.path()).expect_err("bad exit format");
    let message = err.to_string();
    assert!(
        message.contains("sched_process_exit/format: line 10: offset `x` is not a number"),
        "{message}"
    );

    fs::remove_dir_all(dir.path().join("sched/sched_process_exit")).expect("rm");
    assert!(matches!(
        Decoder::from_events_dir(dir.path()),
        Err(DecoderError::MissingEvent {
            event: "sched/sched_process_exit"
        })
    ));
}

#[test]
fn garbage_payloads_never_panic() {
    let d = decoder();
    let ids = [600u16, 601, 597, 598, 599, 617, 616, 618, 205, 365, 369];
    for seed in 0..5000u64 {
        let len = (seed % 90) as usize;
        let mut r = garbage(seed, len);
        if len >= 2 {
            put(&mut r, 0, &ids[seed as usize % ids.len()].to_ne_bytes());
        }
        let _ = d.decode(seed, &r);
    }
}

#[test]
fn dev_numbers_match_stat() {
    // The root filesystem's st_dev, through both conversions.
    let meta = fs::metadata("/").expect("stat /");
    let user = meta.dev();
    let kernel = user_dev_to_kernel(user);
    assert_eq!(kernel >> 20, libc::major(user));
    assert_eq!(kernel & 0xf_ffff, libc::minor(user));
    assert_eq!(kernel_dev_to_user(kernel), user);
}

// ---------------------------------------------------------------------------
// This machine's tracefs.

const TRACEFS: &str = "/sys/kernel/tracing";

#[test]
fn live_formats_parse() {
    let events = Path::new(TRACEFS).join("events");
    let systems = match fs::read_dir(&events) {
        Ok(systems) => systems,
        Err(e) => return skip(&format!("cannot list {}: {e}", events.display())),
    };
    let mut count = 0;
    let mut ids = HashSet::new();
    for system in systems.flatten() {
        let Ok(entries) = fs::read_dir(system.path()) else {
            continue;
        };
        for event in entries.flatten() {
            let path = event.path();
            if !path.join("format").is_file() {
                continue;
            }
            let format = EventFormat::read(&path).unwrap_or_else(|e| panic!("{e}"));
            assert!(format.field("common_type").is_some(), "{}", path.display());
            assert!(
                ids.insert(format.id),
                "{}: id {} reused",
                path.display(),
                format.id
            );
            count += 1;
        }
    }
    assert!(count > 0, "no format files under {}", events.display());
    eprintln!("parsed {count} live format files");

    let header = HeaderPage::read(&events).expect("live header_page");
    if let Ok(kb) = fs::read_to_string(Path::new(TRACEFS).join("buffer_subbuf_size_kb")) {
        let kb: usize = kb.trim().parse().expect("buffer_subbuf_size_kb");
        assert_eq!(header.subbuf_size(), kb * 1024);
    }
    let decoder = Decoder::from_events_dir(&events).expect("live decoder");
    eprintln!("live decoder: {:?}", decoder.enabled_events());
}

/// A private trace instance, disabled and removed on drop, panics included.
struct Instance {
    dir: PathBuf,
}

impl Instance {
    fn create(root: &Path) -> std::io::Result<Instance> {
        let dir = root
            .join("instances")
            .join(format!("coldstart-test-ringbuf-{}", std::process::id()));
        fs::create_dir(&dir)?;
        Ok(Instance { dir })
    }

    fn write(&self, file: &str, value: &str) {
        if let Err(e) = self.try_write(file, value) {
            panic!(
                "cannot write {value:?} to {}: {e}",
                self.dir.join(file).display()
            );
        }
    }

    fn try_write(&self, file: &str, value: &str) -> std::io::Result<()> {
        // No O_TRUNC: tracefs files take a write, not a truncate.
        fs::OpenOptions::new()
            .write(true)
            .open(self.dir.join(file))
            .and_then(|mut f| std::io::Write::write_all(&mut f, value.as_bytes()))
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        for (file, value) in [("tracing_on", "0"), ("events/enable", "0")] {
            let _ = fs::write(self.dir.join(file), value);
        }
        if let Err(e) = fs::remove_dir(&self.dir) {
            eprintln!("cannot remove {}: {e}", self.dir.display());
        }
    }
}

fn page_size() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(size).expect("page size")
}

fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid, writable timespec.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime");
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Everything one CPU's trace_pipe_raw holds now: whole sub-buffers.
fn drain(path: &Path, subbuf_size: usize) -> Vec<u8> {
    let mut file = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
    let mut bytes = Vec::new();
    let mut buf = vec![0u8; subbuf_size];
    loop {
        match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => bytes.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => panic!("read {}: {e}", path.display()),
        }
    }
    bytes
}

/// Files a dynamically linked /bin/true maps (itself, the loader's cache,
/// and the shared libraries this test process also maps: ld.so, libc),
/// with their sizes in pages.
fn true_files() -> HashMap<FileKey, u64> {
    let mut paths = vec![
        PathBuf::from("/bin/true"),
        PathBuf::from("/etc/ld.so.cache"),
    ];
    let maps = fs::read_to_string("/proc/self/maps").unwrap_or_default();
    for line in maps.lines() {
        if let Some(path) = line.split_whitespace().nth(5)
            && path.contains(".so")
        {
            paths.push(PathBuf::from(path));
        }
    }
    paths
        .iter()
        .filter_map(|p| fs::metadata(p).ok())
        .map(|m| {
            let key = FileKey {
                dev: user_dev_to_kernel(m.dev()),
                ino: m.ino(),
            };
            (key, m.len().div_ceil(page_size()))
        })
        .collect()
}

/// A file on a disk filesystem that the test maps privately and writes to:
/// each first write to a page is a copy-on-write fault that goes through
/// filemap_fault, so the trace must hold exactly one fault per page.
struct FaultFile {
    file: fs::File,
    key: FileKey,
    pages: u64,
    _dir: tempfile::TempDir,
}

impl FaultFile {
    fn new(pages: u64) -> FaultFile {
        // Not tmpfs: shmem has its own fault handler and no such tracepoint.
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir");
        let path = dir.path().join("faults");
        fs::write(&path, vec![0x11u8; (pages * page_size()) as usize]).expect("write");
        let file = fs::File::open(&path).expect("open");
        let meta = file.metadata().expect("stat");
        FaultFile {
            file,
            key: FileKey {
                dev: user_dev_to_kernel(meta.dev()),
                ino: meta.ino(),
            },
            pages,
            _dir: dir,
        }
    }

    fn fault_every_page(&self) {
        use std::os::fd::AsRawFd;
        let len = (self.pages * page_size()) as usize;
        // SAFETY: a fresh private mapping of our own file, written only
        // within its length and unmapped before returning.
        unsafe {
            let map = libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE,
                self.file.as_raw_fd(),
                0,
            );
            assert_ne!(map, libc::MAP_FAILED, "mmap");
            for page in 0..self.pages as usize {
                std::ptr::write_volatile((map as *mut u8).add(page * page_size() as usize), 1);
            }
            libc::munmap(map, len);
        }
    }
}

fn gettid() -> i32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::syscall(libc::SYS_gettid) as i32 }
}

/// The per-CPU `overrun` counters: events the kernel overwrote.
fn overruns(instance: &Instance) -> u64 {
    let mut total = 0;
    for cpu in fs::read_dir(instance.dir.join("per_cpu"))
        .expect("per_cpu")
        .flatten()
    {
        let stats = fs::read_to_string(cpu.path().join("stats")).expect("stats");
        for line in stats.lines() {
            if let Some(n) = line.strip_prefix("overrun:") {
                total += n.trim().parse::<u64>().expect("overrun count");
            }
        }
    }
    total
}

/// Everything the instance recorded, decoded, with losses summed.
struct Recorded {
    events: Vec<TraceEvent>,
    subbufs: u64,
    missed_counted: u64,
    missed_unknown: u64,
}

fn drain_instance(instance: &Instance, header: &HeaderPage, decoder: &Decoder) -> Recorded {
    let mut recorded = Recorded {
        events: Vec::new(),
        subbufs: 0,
        missed_counted: 0,
        missed_unknown: 0,
    };
    let mut cpus = fs::read_dir(instance.dir.join("per_cpu"))
        .expect("per_cpu")
        .flatten()
        .map(|e| e.path())
        .collect::<Vec<_>>();
    cpus.sort();
    for cpu in cpus {
        let bytes = drain(&cpu.join("trace_pipe_raw"), header.subbuf_size());
        let mut last_ts = 0;
        let summary = decode_stream(&bytes, header, |ts, payload| {
            assert!(ts >= last_ts, "{}: time went back", cpu.display());
            last_ts = ts;
            if let Some(event) = decoder.decode(ts, payload) {
                recorded.events.push(event);
            }
        })
        .unwrap_or_else(|e| panic!("{}: {e}", cpu.display()));
        recorded.subbufs += summary.subbufs;
        recorded.missed_counted += summary.missed_events;
        recorded.missed_unknown += summary.missed_unknown;
    }
    assert_eq!(decoder.skipped().total(), 0, "{:?}", decoder.skipped());
    recorded
}

#[test]
fn traces_an_exec_end_to_end() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return skip("not root");
    }
    let root = Path::new(TRACEFS);
    if !root.join("instances").is_dir() {
        return skip(&format!("no tracefs at {TRACEFS}"));
    }
    let instance = Instance::create(root).expect("mkdir trace instance");
    instance.write("tracing_on", "0");
    instance.write("trace_clock", "mono");
    instance.write("events/filemap/mm_filemap_fault/enable", "1");
    instance.write("events/sched/sched_process_exec/enable", "1");
    let faults = FaultFile::new(2048);

    trace_true(&instance, &faults, 4096);
    // Larger sub-buffers (6.8+) change the layout header_page reports.
    // Some kernels (6.18.44-fc here, 2026-12-05) have the file and refuse
    // every write to it with EPERM, the top-level buffer's too; the 8 KiB
    // layout is then checked only on the hand-built buffer above.
    if instance.dir.join("buffer_subbuf_size_kb").exists() {
        match instance.try_write("buffer_subbuf_size_kb", "8") {
            Ok(()) => {
                trace_true(&instance, &faults, 8192);
                instance.write("buffer_subbuf_size_kb", "4");
            }
            Err(e) if e.raw_os_error() == Some(libc::EPERM) => {
                eprintln!("this kernel refuses to resize sub-buffers ({e}): 8 KiB not traced live");
            }
            Err(e) => panic!("cannot write 8 to buffer_subbuf_size_kb: {e}"),
        }
    }
    trace_losses(&instance, &faults);
}

/// Runs /bin/true and faults every page of `faults` with tracing on, and
/// checks what the instance recorded against what happened.
fn trace_true(instance: &Instance, faults: &FaultFile, subbuf_size: usize) {
    let events = instance.dir.join("events");
    let header = HeaderPage::read(&events).expect("instance header_page");
    assert_eq!(header.subbuf_size(), subbuf_size);
    let decoder = Decoder::from_events_dir(&events).expect("instance decoder");

    instance.write("tracing_on", "1");
    let before = monotonic_ns();
    let mut child = std::process::Command::new("/bin/true")
        .spawn()
        .expect("spawn /bin/true");
    let pid = child.id() as i32;
    let status = child.wait().expect("wait");
    faults.fault_every_page();
    let after = monotonic_ns();
    instance.write("tracing_on", "0");
    assert!(status.success());

    let recorded = drain_instance(instance, &header, &decoder);
    let decoded = recorded.events;
    eprintln!(
        "{subbuf_size}-byte sub-buffers: {} events in {}",
        decoded.len(),
        recorded.subbufs
    );
    assert_eq!(recorded.missed_counted + recorded.missed_unknown, 0);

    let exec = decoded
        .iter()
        .find(|e| matches!(&e.kind, EventKind::Exec { pid: p, .. } if *p == pid))
        .unwrap_or_else(|| panic!("no exec event for pid {pid} among {decoded:?}"));
    let EventKind::Exec {
        old_pid, filename, ..
    } = &exec.kind
    else {
        unreachable!()
    };
    assert_eq!((exec.tid, *old_pid), (pid, pid));
    assert!(filename.ends_with("/true"), "{filename}");
    // The trace clock is CLOCK_MONOTONIC: an independent check of the
    // timestamp arithmetic.
    assert!(
        (before..=after).contains(&exec.ts),
        "exec at {} outside [{before}, {after}]",
        exec.ts
    );

    // The child's page faults land in files it maps, at pages inside them.
    let files = true_files();
    let child_faults: Vec<_> = decoded
        .iter()
        .filter(|e| e.tid == pid)
        .filter_map(|e| match e.kind {
            EventKind::Fault { file, index } => Some((e.ts, file, index)),
            _ => None,
        })
        .collect();
    assert!(!child_faults.is_empty(), "no faults from pid {pid}");
    let mut known = 0;
    for (ts, file, index) in &child_faults {
        assert!((before..=after).contains(ts));
        if let Some(pages) = files.get(file) {
            assert!(
                index < pages,
                "fault at page {index} of a {pages}-page file"
            );
            known += 1;
        }
    }
    assert!(
        known > 0,
        "no fault of pid {pid} in {files:?}: {child_faults:?}"
    );

    // Our own copy-on-write faults: each page exactly once, in order. The
    // drain returns each CPU's buffer in turn, so a thread that moved to
    // another CPU midway shows its faults there: time orders them.
    let tid = gettid();
    let mut ours: Vec<(u64, u64)> = decoded
        .iter()
        .filter(|e| e.tid == tid)
        .filter_map(|e| match e.kind {
            EventKind::Fault { file, index } if file == faults.key => Some((e.ts, index)),
            _ => None,
        })
        .collect();
    ours.sort_by_key(|&(ts, _)| ts);
    let ours: Vec<u64> = ours.into_iter().map(|(_, index)| index).collect();
    assert_eq!(ours, (0..faults.pages).collect::<Vec<_>>());
}

/// Overflows a tiny buffer and checks the losses the sub-buffers report
/// against the kernel's own overrun counters.
fn trace_losses(instance: &Instance, faults: &FaultFile) {
    instance.write("buffer_size_kb", "16");
    let events = instance.dir.join("events");
    let header = HeaderPage::read(&events).expect("instance header_page");
    let decoder = Decoder::from_events_dir(&events).expect("instance decoder");
    let overrun_before = overruns(instance);

    instance.write("tracing_on", "1");
    faults.fault_every_page();
    instance.write("tracing_on", "0");

    let recorded = drain_instance(instance, &header, &decoder);
    let overrun = overruns(instance) - overrun_before;
    let tid = gettid();
    let kept = recorded
        .events
        .iter()
        .filter(|e| {
            e.tid == tid && matches!(e.kind, EventKind::Fault { file, .. } if file == faults.key)
        })
        .count() as u64;
    eprintln!(
        "16 KiB buffer: kept {kept} of {} faults, {} lost (counted), {} pages with unknown loss, overrun {overrun}",
        faults.pages, recorded.missed_counted, recorded.missed_unknown
    );
    assert!(overrun > 0, "a 16 KiB buffer held {} faults", faults.pages);
    assert!(recorded.missed_counted + recorded.missed_unknown > 0);
    if recorded.missed_unknown == 0 {
        assert_eq!(recorded.missed_counted, overrun);
    }
    assert!(kept < faults.pages);
    assert!(kept + recorded.missed_counted >= faults.pages || recorded.missed_unknown > 0);
}
