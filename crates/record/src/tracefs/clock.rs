//! The clock a trace's events are placed on.
//!
//! Profiles time everything from the launch on CLOCK_MONOTONIC, so every
//! event must end up on that clock. An instance can be switched to the
//! kernel's `mono` trace clock, but the switch empties its buffers behind
//! an RCU grace period: 15-35 ms at every trace on this machine kind, all
//! of it before the program may start.
//!
//! Where the instance's default clock, `local` (sched_clock), is one clock
//! on every CPU, the instance keeps it: on x86 when the kernel made the TSC
//! its clocksource (which it does only once it found the TSC in step on
//! every CPU), on arm64 with the architected counter. Marks written to the
//! instance's `trace_marker_raw` at known CLOCK_MONOTONIC times, one when
//! tracing starts and one when it stops, then map the trace's timestamps
//! onto CLOCK_MONOTONIC. Anywhere else the instance is switched to `mono`
//! as before.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;
use std::sync::Mutex;

use coldstart_system::launch::monotonic_ns;

use super::format::EventFormat;
use super::instance::{Instance, TraceError};

/// Marks carry this in the raw_data event's `id`, their sequence number in
/// the low byte, so nothing else in the buffer can pass for one.
const MARK_ID: u32 = 0xc01d_5700;

/// Clocksources that make the `local` trace clock one clock on all CPUs.
const SYNCHRONIZED_CLOCKSOURCES: &[&str] = &["tsc", "arch_sys_counter"];

/// A span between the first and the last mark long enough to measure the
/// local clock's rate against CLOCK_MONOTONIC by (shorter spans keep the
/// offset alone: at the 100 ppm an NTP-slewed clock may differ by, that
/// errs by under 0.1 ms).
const RATE_SPAN_NS: i64 = 1_000_000_000;

/// How an instance's timestamps get onto CLOCK_MONOTONIC.
pub struct TraceClock {
    marks: Option<Marks>,
}

struct Marks {
    raw_data_id: u16,
    /// Where the raw_data event keeps `id` (4 bytes).
    id_offset: usize,
    file: File,
    /// Each mark written: its sequence number and the CLOCK_MONOTONIC time
    /// it was written at (the middle of the write).
    written: Mutex<Vec<(u8, i64)>>,
}

impl TraceClock {
    /// Readies `instance`'s clock: keeps `local` and opens its marker where
    /// `local` is one clock on all CPUs, sets `mono` otherwise.
    pub fn set_up(instance: &Instance) -> Result<TraceClock, TraceError> {
        if local_clock_is_synchronized()
            && let Some(marks) = Marks::open(instance)
        {
            return Ok(TraceClock { marks: Some(marks) });
        }
        instance.set("trace_clock", "mono")?;
        Ok(TraceClock::mono())
    }

    /// An instance whose clock is `mono` already.
    fn mono() -> TraceClock {
        TraceClock { marks: None }
    }

    /// Writes a mark (with tracing on). Without `mono`, a trace needs at
    /// least one mark in its buffers to be placed in time.
    pub fn mark(&self) -> Result<(), TraceError> {
        let Some(marks) = &self.marks else {
            return Ok(());
        };
        let mut written = marks.written.lock().unwrap_or_else(|e| e.into_inner());
        let seq = written.len() as u8;
        let before = monotonic_ns();
        (&marks.file)
            .write_all(&(MARK_ID | u32::from(seq)).to_ne_bytes())
            .map_err(|source| TraceError::Clock(format!("cannot write a clock mark: {source}")))?;
        let after = monotonic_ns();
        written.push((seq, before + (after - before) / 2));
        Ok(())
    }

    /// What [`crate::trace::decode_buffers`] needs to find the marks and
    /// place the events.
    pub fn placement(&self) -> Placement {
        match &self.marks {
            None => Placement::Mono,
            Some(marks) => Placement::Marked {
                raw_data_id: marks.raw_data_id,
                id_offset: marks.id_offset,
                written: marks
                    .written
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .clone(),
            },
        }
    }
}

impl Marks {
    fn open(instance: &Instance) -> Option<Marks> {
        let format = EventFormat::read(&instance.events_dir().join("ftrace/raw_data")).ok()?;
        let id = format.field("id").filter(|f| f.size == 4 && !f.data_loc)?;
        let file = OpenOptions::new()
            .write(true)
            .open(instance.path().join("trace_marker_raw"))
            .ok()?;
        Some(Marks {
            raw_data_id: format.id,
            id_offset: id.offset,
            file,
            written: Mutex::new(Vec::new()),
        })
    }
}

fn local_clock_is_synchronized() -> bool {
    clocksource_keeps_local_in_step(Path::new(
        "/sys/devices/system/clocksource/clocksource0/current_clocksource",
    ))
}

fn clocksource_keeps_local_in_step(path: &Path) -> bool {
    std::fs::read_to_string(path).is_ok_and(|name| SYNCHRONIZED_CLOCKSOURCES.contains(&name.trim()))
}

/// How decoded timestamps become CLOCK_MONOTONIC nanoseconds.
#[derive(Debug, Clone)]
pub enum Placement {
    /// The instance's clock was `mono`: timestamps are kept as they are.
    Mono,
    /// The instance kept `local`: raw_data records of id `raw_data_id`
    /// carrying a mark are the marks `written` at known monotonic times.
    Marked {
        raw_data_id: u16,
        id_offset: usize,
        written: Vec<(u8, i64)>,
    },
}

impl Placement {
    /// The mark `payload` (a record with its common fields) carries, if it
    /// is one.
    pub fn mark_in(&self, payload: &[u8]) -> Option<u8> {
        let Placement::Marked {
            raw_data_id,
            id_offset,
            ..
        } = self
        else {
            return None;
        };
        let kind = u16::from_ne_bytes(payload.get(..2)?.try_into().ok()?);
        if kind != *raw_data_id {
            return None;
        }
        let id = u32::from_ne_bytes(payload.get(*id_offset..id_offset + 4)?.try_into().ok()?);
        (id & !0xff == MARK_ID).then_some(id as u8)
    }

    /// The map from trace timestamps to CLOCK_MONOTONIC, given the marks
    /// found in the buffers (sequence number, trace timestamp).
    pub fn map(&self, found: &[(u8, u64)]) -> Result<ClockMap, TraceError> {
        let Placement::Marked { written, .. } = self else {
            return Ok(ClockMap::IDENTITY);
        };
        // (trace time, monotonic time) of each mark both written and found.
        let mut pairs: Vec<(i64, i64)> = written
            .iter()
            .filter_map(|&(seq, mono)| {
                let &(_, ts) = found.iter().find(|(s, _)| *s == seq)?;
                Some((i64::try_from(ts).ok()?, mono))
            })
            .collect();
        pairs.sort_unstable();
        let (Some(&first), Some(&last)) = (pairs.first(), pairs.last()) else {
            return Err(TraceError::Clock(format!(
                "none of the {} clock marks written reached the trace buffers, so its \
                 events cannot be placed in time",
                written.len()
            )));
        };
        let span = last.0 - first.0;
        let rate = if span >= RATE_SPAN_NS {
            let rate = (last.1 - first.1) as f64 / span as f64;
            // Two clocks of one machine: anything else is a broken mark.
            if !(0.999..=1.001).contains(&rate) {
                return Err(TraceError::Clock(format!(
                    "the trace clock ran at {rate:.6} times CLOCK_MONOTONIC between its marks"
                )));
            }
            rate
        } else {
            1.0
        };
        Ok(ClockMap {
            trace_at: first.0,
            mono_at: first.1,
            rate,
        })
    }
}

/// A linear map from a trace clock onto CLOCK_MONOTONIC.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ClockMap {
    trace_at: i64,
    mono_at: i64,
    rate: f64,
}

impl ClockMap {
    /// Timestamps kept as they are.
    pub const IDENTITY: ClockMap = ClockMap {
        trace_at: 0,
        mono_at: 0,
        rate: 1.0,
    };

    /// `ts` on CLOCK_MONOTONIC.
    pub fn place(&self, ts: u64) -> u64 {
        let since = ts as i64 - self.trace_at;
        let scaled = if self.rate == 1.0 {
            since
        } else {
            (since as f64 * self.rate).round() as i64
        };
        (self.mono_at + scaled).max(0) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn marked(written: Vec<(u8, i64)>) -> Placement {
        Placement::Marked {
            raw_data_id: 19,
            id_offset: 8,
            written,
        }
    }

    fn record(kind: u16, id: u32) -> Vec<u8> {
        let mut payload = kind.to_ne_bytes().to_vec();
        payload.extend([0, 0]);
        payload.extend(1234i32.to_ne_bytes());
        payload.extend(id.to_ne_bytes());
        payload
    }

    #[test]
    fn only_raw_data_records_carrying_a_mark_are_marks() {
        let placement = marked(Vec::new());
        assert_eq!(placement.mark_in(&record(19, MARK_ID | 1)), Some(1));
        assert_eq!(placement.mark_in(&record(19, 0x1234_5601)), None);
        assert_eq!(placement.mark_in(&record(20, MARK_ID)), None);
        assert_eq!(placement.mark_in(&record(19, MARK_ID)[..10]), None);
        assert_eq!(Placement::Mono.mark_in(&record(19, MARK_ID)), None);
    }

    #[test]
    fn one_mark_gives_the_offset_two_far_apart_the_rate_too() {
        // Trace clock 5 s behind CLOCK_MONOTONIC.
        let map = marked(vec![(0, 105_000_000_000)])
            .map(&[(0, 100_000_000_000)])
            .unwrap();
        assert_eq!(map.place(100_000_000_123), 105_000_000_123);
        assert_eq!(map.place(99_999_999_000), 104_999_999_000);

        // 10 s apart on the trace clock, 10.001 s on CLOCK_MONOTONIC: 100 ppm.
        let map = marked(vec![(0, 105_000_000_000), (1, 115_001_000_000)])
            .map(&[(1, 110_000_000_000), (0, 100_000_000_000)])
            .unwrap();
        assert_eq!(map.place(100_000_000_000), 105_000_000_000);
        assert_eq!(map.place(105_000_000_000), 110_000_500_000);
        assert_eq!(map.place(110_000_000_000), 115_001_000_000);

        // Close together: the offset alone.
        let map = marked(vec![(0, 5_000), (1, 6_100)])
            .map(&[(0, 1_000), (1, 2_000)])
            .unwrap();
        assert_eq!(map.place(1_500), 5_500);
    }

    #[test]
    fn marks_missing_or_at_an_impossible_rate_are_errors() {
        assert!(
            marked(vec![(0, 5_000)])
                .map(&[])
                .unwrap_err()
                .to_string()
                .contains("none of the 1 clock marks")
        );
        let fast = marked(vec![(0, 0), (1, 3_000_000_000)]).map(&[(0, 0), (1, 2_000_000_000)]);
        assert!(fast.unwrap_err().to_string().contains("ran at 1.5"));
        // A mark found but never written (a stray record) is ignored.
        let map = marked(vec![(0, 50)]).map(&[(7, 1), (0, 10)]).unwrap();
        assert_eq!(map.place(10), 50);
        assert_eq!(Placement::Mono.map(&[]).unwrap(), ClockMap::IDENTITY);
        assert_eq!(
            ClockMap::IDENTITY.place(1_796_514_370_920_059),
            1_796_514_370_920_059
        );
    }

    #[test]
    fn only_the_synchronized_clocksources_keep_the_local_clock() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("current_clocksource");
        for (name, kept) in [
            ("tsc\n", true),
            ("arch_sys_counter\n", true),
            ("hpet\n", false),
            ("kvm-clock\n", false),
        ] {
            std::fs::write(&path, name).unwrap();
            assert_eq!(clocksource_keeps_local_in_step(&path), kept, "{name}");
        }
        assert!(!clocksource_keeps_local_in_step(&dir.path().join("absent")));
    }
}
