//! A model of the Linux page cache's readahead, page by page, for one file:
//! given the order in which a start touches the file's pages, which pages
//! the kernel reads, in which requests. It follows mm/filemap.c and
//! mm/readahead.c of the kernels coldstart runs on (6.16 and later):
//!
//! - a fault on an uncached page of an executable mapping reads forward
//!   from the fault, `read_ahead_kb` worth, cut at the end of the mapping,
//!   with no asynchronous mark (the 6.16 "exec" read-around);
//! - a fault on any other mapping reads around the fault, half before and
//!   half after, and marks the page a quarter window from the end;
//! - after more than 100 faults that missed the cache (less the pages
//!   fault-around found cached), faults read only their page;
//! - read() starts a window of 4, 2 or 1 times the request and ramps it
//!   up on sequential reads; touching a marked page reads the next window;
//! - fault-around maps cached, unmarked neighbours without a fault, so
//!   they neither count a miss nor set off readahead.
//!
//! Each window reads only the pages not cached yet, and each run of
//! contiguous uncached pages in one window is one read request, as
//! [`crate::pages::read_requests`] counts them in traces.
//!
//! The model is checked against traces: `coldstart simulate --against RUN`
//! prints predicted next to measured pages read.

use serde::Serialize;

/// The kernel's `MMAP_LOTSAMISS`.
const LOTS_OF_MISSES: u32 = 100;

/// The device and kernel settings a prediction is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct KernelSettings {
    /// The device's read_ahead_kb in pages (0 turns readahead off).
    pub ra_pages: u64,
    /// fault_around_bytes in pages (1 turns fault-around off).
    pub fault_around_pages: u64,
    /// Executable mappings read forward from the fault with no mark
    /// (kernel 6.16 and later); older kernels read around them.
    pub exec_reads_forward: bool,
}

impl KernelSettings {
    /// Settings for a read_ahead_kb and fault_around_bytes, with 4 KiB pages.
    pub fn new(read_ahead_kb: u64, fault_around_bytes: u64, page_size: u64) -> KernelSettings {
        let page_size = page_size.max(1);
        KernelSettings {
            ra_pages: read_ahead_kb * 1024 / page_size,
            fault_around_pages: (fault_around_bytes / page_size).max(1),
            exec_reads_forward: true,
        }
    }
}

/// How a part of the file is mapped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Mapping {
    /// First file page of the mapping.
    pub first: u64,
    /// One past its last file page.
    pub end: u64,
    pub exec: bool,
    /// Written while starting (relocations): write faults on a private
    /// mapping copy the page and never map neighbours.
    pub write: bool,
    /// Virtual page minus file page, modulo nothing: fault-around windows
    /// are aligned in virtual addresses.
    pub virtual_delta: i64,
}

/// What a process did to a page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AccessKind {
    /// A page fault through a mapping.
    Fault,
    /// read() of `pages` pages starting here.
    Read { pages: u64 },
    /// An explicit readahead of `pages` pages from here (madvise
    /// MADV_WILLNEED, fadvise, readahead(2)): read whatever the settings.
    Prefetch { pages: u64 },
}

/// One touch of the file, in time order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Access {
    /// Process (thread group) that touched: mappings and the open file's
    /// readahead state belong to it.
    pub process: i32,
    pub page: u64,
    pub kind: AccessKind,
}

/// Which path read a window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Decision {
    /// Fault on an executable mapping: forward window.
    ExecFault,
    /// Fault on another mapping: read-around.
    AroundFault,
    /// Fault after too many misses, or with readahead off: one page.
    SinglePage,
    /// read() that missed the cache.
    SyncRead,
    /// A marked page was touched.
    Async,
    /// The program asked for it (madvise, fadvise, readahead(2)).
    Explicit,
}

/// One contiguous read the model issued.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct PredictedRequest {
    pub first: u64,
    pub npages: u64,
    pub decision: Decision,
}

/// What one file's accesses cost.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Prediction {
    pub pages_read: u64,
    pub requests: Vec<PredictedRequest>,
    /// Accesses that missed the cache (major faults and reads that waited).
    pub misses: u64,
    /// Distinct pages the accesses touched.
    pub pages_touched: u64,
}

/// One file's page cache and the readahead state of every process that
/// opened it.
pub struct FileSimulation<'a> {
    settings: KernelSettings,
    pages: u64,
    mappings: &'a [Mapping],
    cached: Bits,
    marked: Bits,
    touched: Bits,
    states: Vec<(i32, RaState, Bits)>,
    prediction: Prediction,
}

#[derive(Debug, Clone, Copy, Default)]
struct RaState {
    start: u64,
    size: u64,
    async_size: u64,
    mmap_miss: u32,
    /// Page after the last read(), the kernel's prev_pos in pages.
    prev_end: Option<u64>,
}

impl<'a> FileSimulation<'a> {
    /// A cold file of `pages` pages; `mappings` sorted by first page (a
    /// page no mapping covers counts as mapped read-only).
    pub fn new(settings: KernelSettings, pages: u64, mappings: &'a [Mapping]) -> Self {
        FileSimulation {
            settings,
            pages,
            mappings,
            cached: Bits::new(pages),
            marked: Bits::new(pages),
            touched: Bits::new(pages),
            states: Vec::new(),
            prediction: Prediction::default(),
        }
    }

    /// Marks pages as already cached (a warm library, a prefetch).
    pub fn preload(&mut self, first: u64, npages: u64) {
        for page in first..first.saturating_add(npages).min(self.pages) {
            self.cached.set(page);
        }
    }

    pub fn access(&mut self, access: Access) {
        if access.page >= self.pages {
            return;
        }
        let slot = self.state_of(access.process);
        match access.kind {
            AccessKind::Fault => self.fault(slot, access.page),
            AccessKind::Read { pages } => self.read(slot, access.page, pages.max(1)),
            AccessKind::Prefetch { pages } => {
                self.read_window(access.page, pages, None, Decision::Explicit);
            }
        }
    }

    pub fn finish(mut self) -> Prediction {
        self.prediction.pages_touched = self.touched.count();
        self.prediction
    }

    fn state_of(&mut self, process: i32) -> usize {
        if let Some(i) = self.states.iter().position(|(p, _, _)| *p == process) {
            return i;
        }
        self.states
            .push((process, RaState::default(), Bits::new(self.pages)));
        self.states.len() - 1
    }

    fn mapping_of(&self, page: u64) -> Mapping {
        let i = self.mappings.partition_point(|m| m.end <= page);
        match self.mappings.get(i) {
            Some(m) if m.first <= page => *m,
            _ => Mapping {
                first: 0,
                end: self.pages,
                exec: false,
                write: false,
                virtual_delta: 0,
            },
        }
    }

    fn fault(&mut self, slot: usize, page: u64) {
        self.touched.set(page);
        if self.states[slot].2.get(page) {
            return; // already mapped in this process: no fault at all
        }
        let mapping = self.mapping_of(page);
        if !mapping.write && self.settings.fault_around_pages > 1 {
            self.fault_around(slot, page, &mapping);
            if self.states[slot].2.get(page) {
                return;
            }
        }
        if self.cached.get(page) {
            // do_async_mmap_readahead
            if self.settings.ra_pages > 0 {
                let state = &mut self.states[slot].1;
                state.mmap_miss = state.mmap_miss.saturating_sub(1);
                if self.marked.get(page) {
                    self.async_readahead(slot, page, self.settings.ra_pages);
                }
            }
        } else {
            self.prediction.misses += 1;
            self.sync_mmap_readahead(slot, page, &mapping);
            if !self.cached.get(page) {
                self.read_window(page, 1, None, Decision::SinglePage);
            }
        }
        self.states[slot].2.set(page);
    }

    /// filemap_map_pages: maps cached, unmarked pages of the aligned window
    /// around the fault and takes the count off the miss counter.
    fn fault_around(&mut self, slot: usize, page: u64, mapping: &Mapping) {
        let n = self.settings.fault_around_pages;
        let virtual_page = page as i64 + mapping.virtual_delta;
        let window = virtual_page - virtual_page.rem_euclid(n as i64) - mapping.virtual_delta;
        let first = (window.max(0) as u64).max(mapping.first);
        let end = (window.max(0) as u64 + n).min(mapping.end).min(self.pages);
        let mut mapped = 0u32;
        for p in first..end {
            if self.cached.get(p) && !self.marked.get(p) && !self.states[slot].2.get(p) {
                self.states[slot].2.set(p);
                mapped += 1;
            }
        }
        let state = &mut self.states[slot].1;
        state.mmap_miss = state.mmap_miss.saturating_sub(mapped);
    }

    /// do_sync_mmap_readahead.
    fn sync_mmap_readahead(&mut self, slot: usize, page: u64, mapping: &Mapping) {
        let ra_pages = self.settings.ra_pages;
        if ra_pages == 0 {
            return;
        }
        let state = &mut self.states[slot].1;
        if state.mmap_miss < LOTS_OF_MISSES * 10 {
            state.mmap_miss += 1;
        }
        if state.mmap_miss > LOTS_OF_MISSES {
            return;
        }
        if mapping.exec && self.settings.exec_reads_forward {
            let start = page.max(mapping.first);
            let end = (start + ra_pages).min(mapping.end);
            state.start = start;
            state.size = end.saturating_sub(start);
            state.async_size = 0;
            let (start, size) = (state.start, state.size);
            self.read_window(start, size, None, Decision::ExecFault);
        } else {
            state.start = page.saturating_sub(ra_pages / 2);
            state.size = ra_pages;
            state.async_size = ra_pages / 4;
            let (start, size, async_size) = (state.start, state.size, state.async_size);
            let mark = (start + size).checked_sub(async_size);
            self.read_window(start, size, mark, Decision::AroundFault);
        }
    }

    /// page_cache_async_ra: a marked page was touched.
    fn async_readahead(&mut self, slot: usize, page: u64, request: u64) {
        self.marked.clear(page);
        let max = self.settings.ra_pages;
        let state = &mut self.states[slot].1;
        let expected = (state.start + state.size).saturating_sub(state.async_size);
        if page == expected {
            state.start += state.size;
            state.size = state.size.max(next_window(state.size, max));
            state.async_size = state.size;
        } else {
            // A mark from another window: size the next one from what is
            // cached after the page.
            let Some(start) = self.cached.next_clear(page + 1, self.pages) else {
                return;
            };
            if start - page > max {
                return;
            }
            let state = &mut self.states[slot].1;
            state.start = start;
            state.size = next_window(start - page + request, max);
            state.async_size = state.size;
        }
        let state = self.states[slot].1;
        let mark = (state.start + state.size).checked_sub(state.async_size);
        self.read_window(state.start, state.size, mark, Decision::Async);
    }

    /// filemap_get_pages over one read() request.
    fn read(&mut self, slot: usize, first: u64, npages: u64) {
        let end = first.saturating_add(npages).min(self.pages);
        let mut page = first;
        while page < end {
            self.touched.set(page);
            if !self.cached.get(page) {
                self.prediction.misses += 1;
                self.sync_read(slot, page, end - page);
                if !self.cached.get(page) {
                    self.read_window(page, 1, None, Decision::SinglePage);
                }
            }
            // A batch of cached pages ends after the first marked one.
            while page < end && self.cached.get(page) {
                self.touched.set(page);
                if self.marked.get(page) {
                    if self.settings.ra_pages > 0 {
                        self.async_readahead(slot, page, end - page);
                    } else {
                        self.marked.clear(page);
                    }
                    page += 1;
                    break;
                }
                page += 1;
            }
        }
        self.states[slot].1.prev_end = Some(end);
    }

    /// page_cache_sync_ra for read().
    fn sync_read(&mut self, slot: usize, page: u64, request: u64) {
        let max = self.settings.ra_pages;
        if max == 0 {
            self.read_window(page, request, None, Decision::SyncRead);
            return;
        }
        let state = &mut self.states[slot].1;
        let prev = state.prev_end.map(|end| end.saturating_sub(1));
        let sequential = prev.is_some_and(|prev| page.wrapping_sub(prev) <= 1);
        if page == 0 || request > max || sequential {
            state.start = page;
            state.size = initial_window(request, max);
            state.async_size = if state.size > request {
                state.size - request
            } else {
                state.size / 2
            };
        } else {
            // Pages cached just before: a stream this read continues.
            let behind = self.cached.contiguous_before(page, max);
            if behind <= request {
                self.read_window(page, request, None, Decision::SyncRead);
                return;
            }
            let state = &mut self.states[slot].1;
            let behind = if behind == page { behind * 2 } else { behind };
            state.start = page;
            state.size = (behind + request).min(max);
            state.async_size = 1;
        }
        let state = self.states[slot].1;
        let mark = (state.start + state.size).checked_sub(state.async_size);
        self.read_window(state.start, state.size, mark, Decision::SyncRead);
    }

    /// Reads the uncached pages of [start, start + size), cut at the end of
    /// the file, and marks `mark` when the window reads it.
    fn read_window(&mut self, start: u64, size: u64, mark: Option<u64>, decision: Decision) {
        let end = start.saturating_add(size).min(self.pages);
        let mut page = start;
        while page < end {
            if self.cached.get(page) {
                page += 1;
                continue;
            }
            let first = page;
            while page < end && !self.cached.get(page) {
                self.cached.set(page);
                page += 1;
            }
            self.prediction.pages_read += page - first;
            self.prediction.requests.push(PredictedRequest {
                first,
                npages: page - first,
                decision,
            });
            if let Some(mark) = mark
                && (first..page).contains(&mark)
            {
                self.marked.set(mark);
            }
        }
    }
}

/// get_init_ra_size.
fn initial_window(request: u64, max: u64) -> u64 {
    let size = request.max(1).next_power_of_two();
    if size <= max / 32 {
        size * 4
    } else if size <= max / 4 {
        size * 2
    } else {
        max
    }
}

/// get_next_ra_size.
fn next_window(current: u64, max: u64) -> u64 {
    if current < max / 16 {
        current * 4
    } else if current <= max / 2 {
        current * 2
    } else {
        max
    }
}

/// A fixed-size bit set over a file's pages.
#[derive(Clone)]
struct Bits(Vec<u64>);

impl Bits {
    fn new(len: u64) -> Bits {
        Bits(vec![0; len.div_ceil(64) as usize])
    }

    fn get(&self, i: u64) -> bool {
        self.0
            .get((i / 64) as usize)
            .is_some_and(|w| w & (1 << (i % 64)) != 0)
    }

    fn set(&mut self, i: u64) {
        if let Some(w) = self.0.get_mut((i / 64) as usize) {
            *w |= 1 << (i % 64);
        }
    }

    fn clear(&mut self, i: u64) {
        if let Some(w) = self.0.get_mut((i / 64) as usize) {
            *w &= !(1 << (i % 64));
        }
    }

    fn count(&self) -> u64 {
        self.0.iter().map(|w| u64::from(w.count_ones())).sum()
    }

    /// First clear bit in [from, end), if any.
    fn next_clear(&self, from: u64, end: u64) -> Option<u64> {
        (from..end).find(|&i| !self.get(i))
    }

    /// Set bits right before `page`, counting down, at most `max`.
    fn contiguous_before(&self, page: u64, max: u64) -> u64 {
        let mut n = 0;
        while n < max && n < page && self.get(page - 1 - n) {
            n += 1;
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(ra_pages: u64) -> KernelSettings {
        KernelSettings {
            ra_pages,
            fault_around_pages: 16,
            exec_reads_forward: true,
        }
    }

    fn mapping(first: u64, end: u64, exec: bool) -> Mapping {
        Mapping {
            first,
            end,
            exec,
            write: false,
            virtual_delta: 0,
        }
    }

    fn fault(page: u64) -> Access {
        Access {
            process: 1,
            page,
            kind: AccessKind::Fault,
        }
    }

    fn shape(prediction: &Prediction) -> Vec<(u64, u64, Decision)> {
        prediction
            .requests
            .iter()
            .map(|r| (r.first, r.npages, r.decision))
            .collect()
    }

    #[test]
    fn exec_faults_read_forward_to_the_end_of_the_mapping() {
        let mappings = [mapping(0, 100, false), mapping(100, 1000, true)];
        let mut sim = FileSimulation::new(settings(32), 1200, &mappings);
        sim.access(fault(500));
        sim.access(fault(990));
        sim.access(fault(490)); // reads 490..500, then stops at cached pages
        let p = sim.finish();
        assert_eq!(
            shape(&p),
            vec![
                (500, 32, Decision::ExecFault),
                (990, 10, Decision::ExecFault),
                (490, 10, Decision::ExecFault),
            ]
        );
        assert_eq!(p.pages_read, 52);
        assert_eq!(p.misses, 3);
    }

    #[test]
    fn other_faults_read_around_and_the_mark_reads_the_next_window() {
        let mappings = [mapping(0, 1000, false)];
        let mut sim = FileSimulation::new(settings(32), 1000, &mappings);
        sim.access(fault(100)); // window 84..116, mark at 108
        sim.access(fault(108)); // cached, marked: not mapped by fault-around, async
        let p = sim.finish();
        assert_eq!(
            shape(&p),
            vec![
                (84, 32, Decision::AroundFault),
                // expected index 84 + 32 - 8 = 108: the window moves on to
                // 116 and doubles (32 > 32/16, <= 32/2 fails: max 32).
                (116, 32, Decision::Async),
            ]
        );
    }

    #[test]
    fn many_misses_turn_read_around_off() {
        let mappings = [mapping(0, 1_000_000, false)];
        let mut sim = FileSimulation::new(settings(2), 1_000_000, &mappings);
        for i in 0..150 {
            sim.access(fault(i * 1000));
        }
        let p = sim.finish();
        let windows = p
            .requests
            .iter()
            .filter(|r| r.decision == Decision::AroundFault)
            .count();
        assert_eq!(windows, 100);
        assert_eq!(
            p.requests
                .iter()
                .filter(|r| r.decision == Decision::SinglePage)
                .count(),
            50
        );
    }

    #[test]
    fn fault_around_maps_cached_neighbours_without_a_fault() {
        let mappings = [mapping(0, 100, true)];
        let mut sim = FileSimulation::new(settings(8), 100, &mappings);
        sim.access(fault(16)); // reads 16..24
        sim.access(fault(20)); // mapped by fault-around of the first fault
        sim.access(fault(24)); // uncached: reads 24..32
        let p = sim.finish();
        assert_eq!(p.misses, 2);
        assert_eq!(p.pages_read, 16);
        assert_eq!(p.pages_touched, 3);
    }

    #[test]
    fn reads_start_small_and_ramp_up_when_sequential() {
        let mut sim = FileSimulation::new(settings(64), 1000, &[]);
        let read = |page, pages| Access {
            process: 1,
            page,
            kind: AccessKind::Read { pages },
        };
        sim.access(read(0, 1)); // initial window 4, mark at 1
        sim.access(read(1, 1)); // marked, the expected index 0+4-3: next window 2*4 from 4
        let p = sim.finish();
        assert_eq!(
            shape(&p),
            vec![(0, 4, Decision::SyncRead), (4, 8, Decision::Async)]
        );
    }

    #[test]
    fn readahead_off_reads_exactly_what_is_touched() {
        let mappings = [mapping(0, 100, true)];
        let mut sim = FileSimulation::new(settings(0), 100, &mappings);
        for page in [5, 6, 50] {
            sim.access(fault(page));
        }
        sim.access(Access {
            process: 2,
            page: 70,
            kind: AccessKind::Read { pages: 3 },
        });
        let p = sim.finish();
        assert_eq!(p.pages_read, 6);
        assert_eq!(p.pages_touched, 6);
    }

    #[test]
    fn windows_stop_at_the_end_of_the_file() {
        assert_eq!(initial_window(1, 2048), 4);
        assert_eq!(initial_window(100, 2048), 256);
        assert_eq!(initial_window(1000, 2048), 2048);
        assert_eq!(next_window(4, 2048), 16);
        assert_eq!(next_window(512, 2048), 1024);
        assert_eq!(next_window(1500, 2048), 2048);
        let mut sim = FileSimulation::new(settings(32), 10, &[]);
        sim.access(fault(9));
        assert_eq!(sim.finish().pages_read, 10);
    }
}
