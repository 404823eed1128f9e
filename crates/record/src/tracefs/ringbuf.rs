//! Decoder for the kernel's binary per-CPU ring buffer, as read from
//! `per_cpu/cpuN/trace_pipe_raw`: splits sub-buffers into timestamped event
//! payloads without copying, and reports events the kernel dropped.
//!
//! The layout is the kernel's `struct buffer_data_page` and `struct
//! ring_buffer_event` (kernel/trace/ring_buffer.c); offsets of the page
//! header come from `events/header_page` via [`HeaderPage`].

use super::format::HeaderPage;
use std::ops::Range;

/// Set in the commit word when events were lost before this sub-buffer.
/// The kernel's constant is an `int`, so on 64-bit kernels it arrives
/// sign-extended: bits 31 to 63 are all set.
pub const RB_MISSED_EVENTS: u64 = 1 << 31;
/// Set in the commit word when the number lost is stored after the data.
pub const RB_MISSED_STORED: u64 = 1 << 30;
/// The commit word's data length; everything above is loss flags.
const COMMIT_LENGTH_MASK: u64 = RB_MISSED_STORED - 1;

const TYPE_PADDING: u32 = 29;
const TYPE_TIME_EXTEND: u32 = 30;
const TYPE_TIME_STAMP: u32 = 31;
/// Bits of time_delta in the event header; extended deltas put the rest in
/// the following word.
const TS_SHIFT: u32 = 27;
/// Bits an absolute timestamp event cannot carry (kernel `TS_MSB`); they
/// come from the running timestamp.
const TS_MSB: u64 = 0xf8 << 56;

/// Whether, and how many, events the kernel dropped before a sub-buffer
/// because the reader fell behind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MissedEvents {
    /// Nothing was lost.
    #[default]
    None,
    /// Events were lost, but the sub-buffer had no room to say how many.
    Unknown,
    /// Exactly this many events were lost.
    Count(u64),
}

/// What one sub-buffer held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SubbufSummary {
    /// The sub-buffer's base timestamp, before any event delta.
    pub timestamp: u64,
    /// Data events handed to the callback.
    pub events: u64,
    /// Events the writer discarded after reserving them (padding that
    /// carries a time delta); not handed to the callback.
    pub discarded: u64,
    /// Committed data bytes (the commit word without its flag bits).
    pub bytes_used: usize,
    pub missed: MissedEvents,
}

/// What a run of sub-buffers held.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StreamSummary {
    pub subbufs: u64,
    pub events: u64,
    pub discarded: u64,
    /// Sum of the counted losses.
    pub missed_events: u64,
    /// Sub-buffers that reported a loss of unknown size.
    pub missed_unknown: u64,
    /// Sum of committed data bytes.
    pub bytes_used: u64,
}

/// Malformed ring-buffer data. Offsets count from the start of the slice
/// handed to [`decode_subbuf`] or [`decode_stream`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RingbufError {
    #[error("header_page layout is unusable: {0}")]
    BadHeader(&'static str),
    #[error("sub-buffer at byte {offset} has {len} bytes, fewer than its {need}-byte header")]
    ShortSubbuf {
        offset: usize,
        len: usize,
        need: usize,
    },
    #[error(
        "sub-buffer at byte {offset} commits {commit} data bytes, but holds at most {capacity}"
    )]
    CommitTooLarge {
        offset: usize,
        commit: u64,
        capacity: usize,
    },
    #[error("byte {offset}: the missed-events count lies past the end of the sub-buffer")]
    MissedCountOutOfBounds { offset: usize },
    #[error(
        "byte {offset}: event of type_len {type_len} needs {need} bytes but only {left} committed bytes remain"
    )]
    EventOverrun {
        offset: usize,
        type_len: u8,
        need: u64,
        left: usize,
    },
    #[error("byte {offset}: committed data ends {left} bytes into an event header")]
    SplitHeader { offset: usize, left: usize },
    #[error(
        "byte {offset}: long event's length word is {length}, less than the 4 bytes it occupies"
    )]
    BadLength { offset: usize, length: u32 },
    #[error(
        "byte {offset}: {len} trailing bytes do not make a whole {subbuf_size}-byte sub-buffer"
    )]
    TrailingBytes {
        offset: usize,
        len: usize,
        subbuf_size: usize,
    },
}

/// Decodes one sub-buffer, calling `on_event(timestamp, payload)` for each
/// data event in order. The payload starts at the record's `common_type`
/// and may carry up to 3 bytes of alignment padding at its end.
pub fn decode_subbuf(
    buf: &[u8],
    header: &HeaderPage,
    mut on_event: impl FnMut(u64, &[u8]),
) -> Result<SubbufSummary, RingbufError> {
    check_header(header)?;
    decode_at(buf, 0, header, &mut on_event)
}

/// Decodes consecutive whole sub-buffers, as produced by appending the
/// reads of one CPU's `trace_pipe_raw`. Each sub-buffer carries its own base
/// timestamp, so no state crosses a boundary.
pub fn decode_stream(
    bytes: &[u8],
    header: &HeaderPage,
    mut on_event: impl FnMut(u64, &[u8]),
) -> Result<StreamSummary, RingbufError> {
    check_header(header)?;
    let size = header.subbuf_size();
    let mut summary = StreamSummary::default();
    let mut offset = 0;
    while offset < bytes.len() {
        let left = bytes.len() - offset;
        if left < size {
            return Err(RingbufError::TrailingBytes {
                offset,
                len: left,
                subbuf_size: size,
            });
        }
        let page = decode_at(&bytes[offset..offset + size], offset, header, &mut on_event)?;
        summary.subbufs += 1;
        summary.events += page.events;
        summary.discarded += page.discarded;
        summary.bytes_used += page.bytes_used as u64;
        match page.missed {
            MissedEvents::None => {}
            MissedEvents::Unknown => summary.missed_unknown += 1,
            MissedEvents::Count(n) => {
                summary.missed_events = summary.missed_events.saturating_add(n)
            }
        }
        offset += size;
    }
    Ok(summary)
}

/// Rejects layouts the decoder cannot follow, since [`HeaderPage`]'s fields
/// are public and need not come from `HeaderPage::parse`.
fn check_header(header: &HeaderPage) -> Result<(), RingbufError> {
    if header.commit_size != 4 && header.commit_size != 8 {
        return Err(RingbufError::BadHeader(
            "commit word is neither 4 nor 8 bytes",
        ));
    }
    if header.data_size == 0 || header.data_offset.checked_add(header.data_size).is_none() {
        return Err(RingbufError::BadHeader("data size is zero or overflows"));
    }
    let header_end = header
        .timestamp_offset
        .checked_add(8)
        .zip(header.commit_offset.checked_add(header.commit_size))
        .map(|(timestamp_end, commit_end)| timestamp_end.max(commit_end));
    match header_end {
        Some(end) if end <= header.data_offset => Ok(()),
        _ => Err(RingbufError::BadHeader(
            "timestamp or commit overlaps the data",
        )),
    }
}

fn u32_at(buf: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(
        buf.get(at..at.checked_add(4)?)?.try_into().ok()?,
    ))
}

fn u64_at(buf: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_ne_bytes(
        buf.get(at..at.checked_add(8)?)?.try_into().ok()?,
    ))
}

/// Reads an `unsigned long`/`local_t`, whose size the header gives.
fn word_at(buf: &[u8], at: usize, size: usize) -> Option<u64> {
    if size == 8 {
        u64_at(buf, at)
    } else {
        u32_at(buf, at).map(u64::from)
    }
}

/// An absolute timestamp event holds only the low 59 bits; take the rest
/// from the running clock and, like the kernel's `rb_fix_abs_ts`, assume a
/// wrap of those 59 bits if the result would go backwards.
fn absolute_timestamp(abs: u64, running: u64) -> u64 {
    let msb = running & TS_MSB;
    if msb == 0 {
        return abs;
    }
    let ts = abs | msb;
    if ts < running {
        ts.wrapping_add(1 << 59)
    } else {
        ts
    }
}

/// Decodes the sub-buffer `buf`, which starts at byte `base` of the caller's
/// input (for error offsets). `header` has been checked.
fn decode_at(
    buf: &[u8],
    base: usize,
    header: &HeaderPage,
    on_event: &mut impl FnMut(u64, &[u8]),
) -> Result<SubbufSummary, RingbufError> {
    let commit = read_commit(buf, base, header)?;
    let mut summary = SubbufSummary {
        timestamp: commit.timestamp,
        events: 0,
        discarded: 0,
        bytes_used: commit.length,
        missed: commit.missed,
    };
    let data = header.data_offset..header.data_offset + commit.length;
    decode_records(buf, base, data, &mut summary, on_event)?;
    Ok(summary)
}

/// What a sub-buffer's header says: the time its data starts from, how
/// many bytes of data were committed, and the events lost before it.
struct Commit {
    timestamp: u64,
    length: usize,
    missed: MissedEvents,
}

fn read_commit(buf: &[u8], base: usize, header: &HeaderPage) -> Result<Commit, RingbufError> {
    let short = || RingbufError::ShortSubbuf {
        offset: base,
        len: buf.len(),
        need: header.data_offset,
    };
    if buf.len() < header.data_offset {
        return Err(short());
    }
    let timestamp = u64_at(buf, header.timestamp_offset).ok_or_else(short)?;
    let commit = word_at(buf, header.commit_offset, header.commit_size).ok_or_else(short)?;
    // The kernel adds RB_MISSED_EVENTS, an `int` 1 << 31, to a 64-bit
    // local_t, so it sign-extends: a flagged commit reads 0xffffffff_c0000fd4,
    // not 0xc0000fd4. The length is only ever in the low 30 bits.
    let length = commit & COMMIT_LENGTH_MASK;
    let capacity = header.data_size.min(buf.len() - header.data_offset);
    if length > capacity as u64 {
        return Err(RingbufError::CommitTooLarge {
            offset: base,
            commit: length,
            capacity,
        });
    }
    let length = length as usize;
    let end = header.data_offset + length;

    // The kernel sets STORED only together with EVENTS; a count without the
    // EVENTS flag is still a count, so trust the more specific bit. Bits
    // above 31 only ever come from the sign-extended EVENTS flag, so they
    // mean a loss even if bit 31 itself were clear.
    let missed = if commit & RB_MISSED_STORED != 0 {
        let count = word_at(buf, end, header.commit_size)
            .ok_or(RingbufError::MissedCountOutOfBounds { offset: base + end })?;
        MissedEvents::Count(count)
    } else if commit & !COMMIT_LENGTH_MASK != 0 {
        MissedEvents::Unknown
    } else {
        MissedEvents::None
    };
    Ok(Commit {
        timestamp,
        length,
        missed,
    })
}

/// Walks the records of `data`, a range of `buf`, keeping the clock that
/// their deltas and time stamps move, and hands each event with its time
/// to `on_event`.
fn decode_records(
    buf: &[u8],
    base: usize,
    data: Range<usize>,
    summary: &mut SubbufSummary,
    on_event: &mut impl FnMut(u64, &[u8]),
) -> Result<(), RingbufError> {
    let mut ts = summary.timestamp;
    let mut pos = data.start;
    // Every record but the null one is at least 4 bytes long, and the null
    // one stops, so garbage cannot make this loop forever.
    while pos < data.end {
        let (record, size) = record_at(buf, base, pos, data.end)?;
        match record {
            Record::Event { delta, payload } => {
                ts = ts.wrapping_add(delta);
                on_event(ts, &buf[payload]);
                summary.events += 1;
            }
            // Its delta still counts: the writer measured the next event's
            // delta from the discarded one's time, which is what
            // libtraceevent's kbuffer assumes too.
            Record::Discarded { delta } => {
                ts = ts.wrapping_add(delta);
                summary.discarded += 1;
            }
            Record::Null => break,
            Record::TimeExtend(delta) => ts = ts.wrapping_add(delta),
            Record::TimeStamp(abs) => ts = absolute_timestamp(abs, ts),
        }
        pos += size;
    }
    Ok(())
}

/// One record of a sub-buffer's data, as its header says.
enum Record {
    /// An event, with where its payload lies in the sub-buffer.
    Event { delta: u64, payload: Range<usize> },
    /// A discarded event, or the page-tail padding (marked with a delta of 1).
    Discarded { delta: u64 },
    /// A null event: the writer left the rest of the page empty.
    Null,
    /// TYPE_TIME_EXTEND: a delta too large for the record header.
    TimeExtend(u64),
    /// TYPE_TIME_STAMP: the low 59 bits of an absolute time.
    TimeStamp(u64),
}

/// The record at `pos`, with the data ending at `end`, and its size in
/// bytes (0 for the null record, after which nothing is read).
fn record_at(
    buf: &[u8],
    base: usize,
    pos: usize,
    end: usize,
) -> Result<(Record, usize), RingbufError> {
    let left = end - pos;
    let overrun = |type_len: u32, need: u64| RingbufError::EventOverrun {
        offset: base + pos,
        type_len: type_len as u8,
        need,
        left,
    };
    let event_header = u32_at(buf, pos)
        .filter(|_| left >= 4)
        .ok_or(RingbufError::SplitHeader {
            offset: base + pos,
            left,
        })?;
    let type_len = event_header & 0x1f;
    let delta = u64::from(event_header >> 5);
    match type_len {
        1..=28 => {
            let len = type_len as usize * 4;
            if 4 + len > left {
                return Err(overrun(type_len, 4 + len as u64));
            }
            let payload = pos + 4..pos + 4 + len;
            Ok((Record::Event { delta, payload }, 4 + len))
        }
        0 => {
            // array[0] counts itself plus the payload.
            let length = u32_at(buf, pos + 4)
                .filter(|_| left >= 8)
                .ok_or_else(|| overrun(0, 8))?;
            if length < 4 {
                return Err(RingbufError::BadLength {
                    offset: base + pos,
                    length,
                });
            }
            let step = 4 + u64::from(length).next_multiple_of(4);
            if step > left as u64 {
                return Err(overrun(0, step));
            }
            let payload = pos + 8..pos + 8 + (length as usize - 4);
            Ok((Record::Event { delta, payload }, step as usize))
        }
        TYPE_PADDING => {
            if delta == 0 {
                return Ok((Record::Null, 0));
            }
            let length = u32_at(buf, pos + 4)
                .filter(|_| left >= 8)
                .ok_or_else(|| overrun(type_len, 8))?;
            let step = 4 + u64::from(length).next_multiple_of(4);
            if step > left as u64 {
                return Err(overrun(type_len, step));
            }
            Ok((Record::Discarded { delta }, step as usize))
        }
        // TYPE_TIME_EXTEND or TYPE_TIME_STAMP: the last two of 5 bits.
        _ => {
            let high = u32_at(buf, pos + 4)
                .filter(|_| left >= 8)
                .ok_or_else(|| overrun(type_len, 8))?;
            let value = (u64::from(high) << TS_SHIFT) | delta;
            if type_len == TYPE_TIME_STAMP {
                Ok((Record::TimeStamp(value), 8))
            } else {
                debug_assert_eq!(type_len, TYPE_TIME_EXTEND);
                Ok((Record::TimeExtend(value), 8))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: HeaderPage = HeaderPage {
        timestamp_offset: 0,
        commit_offset: 8,
        commit_size: 8,
        data_offset: 16,
        data_size: 48,
    };

    #[test]
    fn absolute_timestamps_keep_upper_bits() {
        assert_eq!(absolute_timestamp(5, 100), 5);
        let running = (1u64 << 60) | 1000;
        assert_eq!(absolute_timestamp(2000, running), (1 << 60) | 2000);
        // Going backwards within the 59 bits means they wrapped.
        assert_eq!(absolute_timestamp(10, running), (1 << 60) + (1 << 59) + 10);
    }

    #[test]
    fn rejects_bad_headers() {
        let buf = [0u8; 64];
        let bad = HeaderPage {
            commit_size: 2,
            ..HEADER
        };
        assert!(matches!(
            decode_subbuf(&buf, &bad, |_, _| {}),
            Err(RingbufError::BadHeader(_))
        ));
        let overlapping = HeaderPage {
            data_offset: 8,
            ..HEADER
        };
        assert!(matches!(
            decode_stream(&buf, &overlapping, |_, _| {}),
            Err(RingbufError::BadHeader(_))
        ));
        let huge = HeaderPage {
            data_size: usize::MAX,
            ..HEADER
        };
        assert!(decode_stream(&buf, &huge, |_, _| {}).is_err());
    }

    #[test]
    fn every_short_prefix_fails_cleanly() {
        // One small event, committed.
        let mut buf = [0u8; 64];
        buf[8..16].copy_from_slice(&8u64.to_ne_bytes());
        buf[16..20].copy_from_slice(&(1u32 | (7 << 5)).to_ne_bytes());
        buf[20..24].copy_from_slice(&[1, 2, 3, 4]);
        for len in 0..buf.len() {
            let result = decode_subbuf(&buf[..len], &HEADER, |_, _| {});
            assert_eq!(result.is_ok(), len >= 24, "len {len}: {result:?}");
        }
    }
}
