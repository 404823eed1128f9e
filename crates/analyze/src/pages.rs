//! Page sets as sorted extents, and the read requests and seeks a file's
//! page-cache insertions make.

use coldstart_profile::{PageEvent, Readahead};

/// A set of pages as sorted, disjoint, non-adjacent half-open extents.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PageSet {
    extents: Vec<(u64, u64)>,
}

impl PageSet {
    /// Builds the set from (first page, count) ranges in any order.
    pub fn from_ranges(mut ranges: Vec<(u64, u64)>) -> PageSet {
        ranges.retain(|&(_, n)| n > 0);
        ranges.sort_unstable();
        let mut extents: Vec<(u64, u64)> = Vec::with_capacity(ranges.len());
        for (first, n) in ranges {
            let end = first.saturating_add(n);
            match extents.last_mut() {
                Some(last) if first <= last.1 => last.1 = last.1.max(end),
                _ => extents.push((first, end)),
            }
        }
        PageSet { extents }
    }

    pub fn len(&self) -> u64 {
        self.extents.iter().map(|(a, b)| b - a).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.extents.is_empty()
    }

    /// Half-open [first, end) extents.
    pub fn extents(&self) -> &[(u64, u64)] {
        &self.extents
    }

    /// Inclusive [first, last] extents, the JSON form.
    pub fn inclusive(&self) -> Vec<[u64; 2]> {
        self.extents.iter().map(|&(a, b)| [a, b - 1]).collect()
    }

    pub fn union(&self, other: &PageSet) -> PageSet {
        let mut ranges: Vec<(u64, u64)> = self
            .extents
            .iter()
            .chain(&other.extents)
            .map(|&(a, b)| (a, b - a))
            .collect();
        ranges.shrink_to_fit();
        PageSet::from_ranges(ranges)
    }

    /// Pages of this set that are not in `other`.
    pub fn difference(&self, other: &PageSet) -> PageSet {
        let mut ranges = Vec::new();
        for &(a, b) in &self.extents {
            let mut from = a;
            for (x, y) in other.clip(a, b) {
                if x > from {
                    ranges.push((from, x - from));
                }
                from = y;
            }
            if from < b {
                ranges.push((from, b - from));
            }
        }
        PageSet::from_ranges(ranges)
    }

    /// Pages of the set overlapping the byte range [start, end).
    pub fn pages_overlapping(&self, start: u64, end: u64, page_size: u64) -> u64 {
        if end <= start {
            return 0;
        }
        let (first, last_end) = (start / page_size, end.div_ceil(page_size));
        self.clip(first, last_end).map(|(a, b)| b - a).sum()
    }

    /// Bytes of [start, end) that lie on pages of the set.
    pub fn bytes_overlapping(&self, start: u64, end: u64, page_size: u64) -> u64 {
        if end <= start {
            return 0;
        }
        self.clip(start / page_size, end.div_ceil(page_size))
            .map(|(a, b)| {
                b.saturating_mul(page_size).min(end) - a.saturating_mul(page_size).max(start)
            })
            .sum()
    }

    /// The set's extents cut to the page range [first, end).
    fn clip(&self, first: u64, end: u64) -> impl Iterator<Item = (u64, u64)> + '_ {
        let from = self.extents.partition_point(|&(_, b)| b <= first);
        self.extents[from..]
            .iter()
            .take_while(move |&&(a, _)| a < end)
            .map(move |&(a, b)| (a.max(first), b.min(end)))
    }
}

/// A run of contiguous pages that entered the cache together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    pub t_start_ns: i64,
    pub t_end_ns: i64,
    pub pid: i32,
    pub first: u64,
    pub npages: u64,
}

/// Groups one file's page-cache insertions (time order) into requests: an
/// insertion continues the current request when it starts where the last
/// one ended, comes from the same task, and no readahead decision for the
/// file came between them (each decision starts a batch of its own).
pub fn read_requests(reads: &[&PageEvent], readahead: &[&Readahead]) -> Vec<Request> {
    let mut requests: Vec<Request> = Vec::new();
    let mut ra = readahead.iter().map(|r| r.t_ns).peekable();
    for read in reads {
        let mut decision_between = false;
        while let Some(&t) = ra.peek() {
            if t > read.t_ns {
                break;
            }
            if requests.last().is_some_and(|r| t >= r.t_end_ns) {
                decision_between = true;
            }
            ra.next();
        }
        match requests.last_mut() {
            Some(current)
                if !decision_between
                    && current.pid == read.pid
                    && current.first.saturating_add(current.npages) == read.page =>
            {
                current.npages = current.npages.saturating_add(read.npages);
                current.t_end_ns = read.t_ns;
            }
            _ => requests.push(Request {
                t_start_ns: read.t_ns,
                t_end_ns: read.t_ns,
                pid: read.pid,
                first: read.page,
                npages: read.npages,
            }),
        }
    }
    requests
}

/// Forward and backward distance in bytes between consecutive requests:
/// from where one ended to where the next began.
pub fn seeks(requests: &[Request], page_size: u64) -> (u64, u64) {
    let (mut forward, mut backward) = (0u64, 0u64);
    for pair in requests.windows(2) {
        // Saturating: a damaged page number must not overflow.
        let end = pair[0]
            .first
            .saturating_add(pair[0].npages)
            .saturating_mul(page_size);
        let start = pair[1].first.saturating_mul(page_size);
        if start >= end {
            forward = forward.saturating_add(start - end);
        } else {
            backward = backward.saturating_add(end - start);
        }
    }
    (forward, backward)
}

#[cfg(test)]
mod tests {
    use super::*;
    use coldstart_profile::{PageEventKind, ReadaheadKind, handmade};

    fn read(t_ns: i64, page: u64, npages: u64) -> PageEvent {
        PageEvent {
            t_ns,
            pid: 7,
            file_id: 1,
            page,
            npages,
            kind: PageEventKind::Read,
        }
    }

    fn ra(t_ns: i64) -> Readahead {
        handmade::readahead(ReadaheadKind::Sync, t_ns, 7, 1, 0, 0)
    }

    #[test]
    fn sets_merge_overlapping_and_adjacent_ranges() {
        let set = PageSet::from_ranges(vec![(10, 2), (0, 1), (11, 5), (16, 1), (30, 0)]);
        assert_eq!(set.extents(), &[(0, 1), (10, 17)]);
        assert_eq!(set.len(), 8);
        assert_eq!(set.inclusive(), vec![[0, 0], [10, 16]]);
        let other = PageSet::from_ranges(vec![(1, 1), (20, 2)]);
        assert_eq!(set.union(&other).extents(), &[(0, 2), (10, 17), (20, 22)]);
        // {0} ∪ [10, 17) minus [12, 14) and {16}, {30}.
        let holes = PageSet::from_ranges(vec![(12, 2), (16, 1), (30, 1)]);
        assert_eq!(
            set.difference(&holes).extents(),
            &[(0, 1), (10, 12), (14, 16)]
        );
        assert_eq!(set.difference(&set).extents(), &[]);
        assert_eq!(set.difference(&PageSet::default()), set);
    }

    #[test]
    fn overlap_counts_pages_and_bytes() {
        let set = PageSet::from_ranges(vec![(1, 2)]); // bytes 4096..12288
        assert_eq!(set.pages_overlapping(0, 4096, 4096), 0);
        assert_eq!(set.pages_overlapping(4000, 4100, 4096), 1);
        assert_eq!(set.bytes_overlapping(4000, 4100, 4096), 4);
        assert_eq!(set.bytes_overlapping(0, 20_000, 4096), 8192);
        assert_eq!(set.bytes_overlapping(5000, 5000, 4096), 0);
    }

    #[test]
    fn requests_split_on_gaps_tasks_and_readahead_decisions() {
        let events = [
            read(0, 0, 4),
            read(1, 4, 4),  // continues
            read(2, 20, 1), // gap: new request
            read(3, 21, 1), // continues
            read(10, 22, 2),
        ];
        let decisions = [ra(0), ra(5)]; // the second splits before t=10
        let events: Vec<&PageEvent> = events.iter().collect();
        let decisions: Vec<&Readahead> = decisions.iter().collect();
        let requests = read_requests(&events, &decisions);
        let shape: Vec<(u64, u64)> = requests.iter().map(|r| (r.first, r.npages)).collect();
        assert_eq!(shape, vec![(0, 8), (20, 2), (22, 2)]);
        // 8 pages end at 32768; 20*4096 = 81920 forward 49152; then 22 starts at its end.
        assert_eq!(seeks(&requests, 4096), (49152, 0));
        let back = [
            Request {
                t_start_ns: 0,
                t_end_ns: 0,
                pid: 1,
                first: 10,
                npages: 2,
            },
            Request {
                t_start_ns: 1,
                t_end_ns: 1,
                pid: 1,
                first: 3,
                npages: 1,
            },
        ];
        assert_eq!(seeks(&back, 4096), (0, 9 * 4096));
    }
}
