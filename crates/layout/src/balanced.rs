//! Balanced partitioning for startup, after "Optimizing Function Layout for
//! Mobile Applications" (Hoag, Ellis et al., 2023), the idea behind lld's
//! --bp-startup-sort.
//!
//! The symbols are vertices. Each trace gives utility sets: for each cut
//! point k (2, 4, 8, ... and the trace's length), the symbols it used among
//! its first k. A start that has got as far as k touches every page holding
//! one of them, so a good layout keeps each set on few pages. Recursive
//! bisection gets there: split the symbols in two halves, move symbols
//! across so each utility set sits more on one side than both, and recurse
//! into each half until a group fits a page.
//!
//! A set with d_L members on the left and d_R on the right costs
//! -(f(d_L) + f(d_R)), f(d) = d·log2(d + 1): convex, so the cost falls as a
//! set gathers on one side (the log-gap cost of Dhulipala et al., "Compressing
//! graphs and indexes with recursive graph bisection", 2016, for halves of
//! equal size). Refinement swaps pairs of symbols whose moves gain most; each
//! swap is checked against the counts as they are at that moment, so moves
//! that only looked good together (the whole group crossing over, leaving
//! the split as it was) are not made.

use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::thread;

/// How to partition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BalancedOptions {
    /// Bytes per page: bisection stops at groups that fit in one.
    pub page_size: u64,
    /// Refinement passes per bisection, at most; a pass that swaps nothing
    /// ends them early.
    pub iterations: u32,
    /// Seed of the tie-breaking among symbols whose moves gain the same.
    /// The same seed and input always give the same order.
    pub seed: u64,
}

impl Default for BalancedOptions {
    fn default() -> Self {
        BalancedOptions {
            page_size: 4096,
            iterations: 20,
            seed: 0x636f_6c64_7374_6172,
        }
    }
}

/// Orders vertices `0..sizes.len()`, numbered in first-use order; each of
/// `sequences` is one trace's vertices in the order it used them. Returns
/// the vertices in layout order.
pub(crate) fn partition(
    sizes: &[u64],
    sequences: &[Vec<u32>],
    options: &BalancedOptions,
) -> Vec<u32> {
    let graph = Graph::new(sizes.len(), sequences);
    let mut vertices: Vec<u32> = (0..sizes.len() as u32).collect();
    let mut scratch = Scratch::new(graph.weights.len());
    let job = Job {
        graph: &graph,
        sizes,
        options,
        parallel_depth: parallel_depth(),
    };
    job.bisect(&mut vertices, options.seed, 0, &mut scratch);
    vertices
}

/// Levels of the recursion that hand one half to another thread: enough
/// threads for every core, no more.
fn parallel_depth() -> u32 {
    let cores = thread::available_parallelism().map_or(1, |n| n.get());
    usize::BITS - cores.saturating_sub(1).leading_zeros()
}

/// Smaller halves are not worth a thread.
const PARALLEL_MIN: usize = 8192;

/// Gains this close to zero are rounding, not improvement.
const EPSILON: f64 = 1e-9;

/// Utility sets and which vertices belong to each, both ways round.
struct Graph {
    /// Utilities of vertex v: `members_of[offsets[v]..offsets[v + 1]]`.
    offsets: Vec<usize>,
    utilities: Vec<u32>,
    /// How many traces gave the same set.
    weights: Vec<f64>,
    /// f(d) = d·log2(d + 1) for every count a set can have.
    f: Vec<f64>,
}

impl Graph {
    fn new(n: usize, sequences: &[Vec<u32>]) -> Graph {
        // Sets as (trace, length of its prefix); identical sets from
        // different traces (two runs that used the same symbols first) are
        // one utility with more weight, found by an order-independent hash
        // of the members and confirmed by comparing them.
        let mut sets: Vec<(usize, usize)> = Vec::new();
        let mut weights: Vec<f64> = Vec::new();
        let mut by_hash: HashMap<(usize, u64), Vec<usize>> = HashMap::new();
        for (t, sequence) in sequences.iter().enumerate() {
            let mut hash = 0u64;
            let mut cut = 2;
            for (i, &v) in sequence.iter().enumerate() {
                hash = hash.wrapping_add(mix(u64::from(v)));
                let len = i + 1;
                let last = len == sequence.len();
                if len != cut && !last {
                    continue;
                }
                while cut <= len {
                    cut *= 2;
                }
                // One member is always on one page; all of them say nothing
                // about where anything goes.
                if len < 2 || len >= n {
                    continue;
                }
                let same = by_hash.entry((len, hash)).or_default();
                let found = same.iter().copied().find(|&u| {
                    let (other, other_len) = sets[u];
                    same_members(&sequences[other][..other_len], &sequence[..len])
                });
                match found {
                    Some(u) => weights[u] += 1.0,
                    None => {
                        same.push(sets.len());
                        sets.push((t, len));
                        weights.push(1.0);
                    }
                }
            }
        }

        let mut offsets = vec![0usize; n + 1];
        for &(t, len) in &sets {
            for &v in &sequences[t][..len] {
                offsets[v as usize + 1] += 1;
            }
        }
        for v in 0..n {
            offsets[v + 1] += offsets[v];
        }
        let mut fill = offsets.clone();
        let mut utilities = vec![0u32; offsets[n]];
        for (u, &(t, len)) in sets.iter().enumerate() {
            for &v in &sequences[t][..len] {
                utilities[fill[v as usize]] = u as u32;
                fill[v as usize] += 1;
            }
        }
        let f = (0..n + 2)
            .map(|d| {
                let d = d as f64;
                d * (d + 1.0).log2()
            })
            .collect();
        Graph {
            offsets,
            utilities,
            weights,
            f,
        }
    }

    fn utilities_of(&self, v: u32) -> &[u32] {
        &self.utilities[self.offsets[v as usize]..self.offsets[v as usize + 1]]
    }
}

fn same_members(a: &[u32], b: &[u32]) -> bool {
    let mut a = a.to_vec();
    let mut b = b.to_vec();
    a.sort_unstable();
    b.sort_unstable();
    a == b
}

/// Spreads vertex numbers over 64 bits: splitmix64's first output for the
/// state `x` (one step of the published generator; the same values the
/// sample app's `Rng::new(x).next_u64()` gives, so orders are unchanged).
fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Per-thread buffers indexed by global utility, reset after each use so a
/// deep recursion with thousands of small groups does not clear them whole.
struct Scratch {
    local_of: Vec<u32>,
}

const NONE: u32 = u32::MAX;

impl Scratch {
    fn new(utilities: usize) -> Scratch {
        Scratch {
            local_of: vec![NONE; utilities],
        }
    }
}

struct Job<'a> {
    graph: &'a Graph,
    sizes: &'a [u64],
    options: &'a BalancedOptions,
    parallel_depth: u32,
}

/// One bisection's view: the utilities that can tell its two halves apart,
/// numbered locally, and each vertex's list of them.
struct Split {
    offsets: Vec<usize>,
    utilities: Vec<u32>,
    weights: Vec<f64>,
    left: Vec<u32>,
    right: Vec<u32>,
    /// Whether each local vertex is on the right.
    on_right: Vec<bool>,
}

impl Job<'_> {
    fn bisect(&self, vertices: &mut [u32], seed: u64, depth: u32, scratch: &mut Scratch) {
        // Vertex numbers are first-use positions: sorting restores first-use
        // order, the starting split and the order inside a page.
        vertices.sort_unstable();
        let bytes: u64 = vertices.iter().map(|&v| self.sizes[v as usize]).sum();
        if vertices.len() <= 1 || bytes <= self.options.page_size {
            return;
        }
        let mut mid = vertices.len().div_ceil(2);
        if let Some(mut split) = self.split(vertices, mid, scratch) {
            self.refine(&mut split, vertices, seed);
            let (mut left, mut right): (Vec<u32>, Vec<u32>) = (Vec::new(), Vec::new());
            for (i, &v) in vertices.iter().enumerate() {
                if split.on_right[i] {
                    right.push(v);
                } else {
                    left.push(v);
                }
            }
            // The half used earlier on average goes first, so the start
            // still reads mostly forward.
            let sum = |half: &[u32]| half.iter().map(|&v| u128::from(v)).sum::<u128>();
            if sum(&right) * (left.len() as u128) < sum(&left) * (right.len() as u128) {
                std::mem::swap(&mut left, &mut right);
            }
            mid = left.len();
            vertices[..mid].copy_from_slice(&left);
            vertices[mid..].copy_from_slice(&right);
        }
        self.recurse(vertices, mid, seed, depth, scratch);
    }

    fn recurse(
        &self,
        vertices: &mut [u32],
        mid: usize,
        seed: u64,
        depth: u32,
        scratch: &mut Scratch,
    ) {
        let (left, right) = vertices.split_at_mut(mid);
        let (left_seed, right_seed) = (mix(seed ^ 1), mix(seed ^ 2));
        if depth < self.parallel_depth && right.len() >= PARALLEL_MIN {
            let utilities = scratch.local_of.len();
            thread::scope(|s| {
                s.spawn(|| {
                    let mut own = Scratch::new(utilities);
                    self.bisect(right, right_seed, depth + 1, &mut own);
                });
                self.bisect(left, left_seed, depth + 1, scratch);
            });
        } else {
            self.bisect(left, left_seed, depth + 1, scratch);
            self.bisect(right, right_seed, depth + 1, scratch);
        }
    }

    /// The utilities with at least two members here and not all of them
    /// (only those can gain from a move), or None when there are none.
    fn split(&self, vertices: &[u32], mid: usize, scratch: &mut Scratch) -> Option<Split> {
        let graph = self.graph;
        let mut counts: Vec<u32> = Vec::new();
        let mut global: Vec<u32> = Vec::new();
        for &v in vertices {
            for &u in graph.utilities_of(v) {
                let local = &mut scratch.local_of[u as usize];
                if *local == NONE {
                    *local = counts.len() as u32;
                    counts.push(0);
                    global.push(u);
                }
                counts[*local as usize] += 1;
            }
        }
        let n = vertices.len() as u32;
        let mut keep = vec![NONE; counts.len()];
        let mut weights = Vec::new();
        for (local, &count) in counts.iter().enumerate() {
            if count >= 2 && count < n {
                keep[local] = weights.len() as u32;
                weights.push(graph.weights[global[local] as usize]);
            }
        }
        let mut offsets = Vec::with_capacity(vertices.len() + 1);
        let mut utilities = Vec::new();
        offsets.push(0);
        for &v in vertices {
            for &u in graph.utilities_of(v) {
                let kept = keep[scratch.local_of[u as usize] as usize];
                if kept != NONE {
                    utilities.push(kept);
                }
            }
            offsets.push(utilities.len());
        }
        for &u in &global {
            scratch.local_of[u as usize] = NONE;
        }
        if weights.is_empty() {
            return None;
        }
        let mut left = vec![0u32; weights.len()];
        let mut right = vec![0u32; weights.len()];
        let on_right: Vec<bool> = (0..vertices.len()).map(|i| i >= mid).collect();
        for (i, &r) in on_right.iter().enumerate() {
            for &u in &utilities[offsets[i]..offsets[i + 1]] {
                if r {
                    right[u as usize] += 1;
                } else {
                    left[u as usize] += 1;
                }
            }
        }
        Some(Split {
            offsets,
            utilities,
            weights,
            left,
            right,
            on_right,
        })
    }

    fn refine(&self, split: &mut Split, vertices: &[u32], seed: u64) {
        let n = vertices.len();
        let mut gains = vec![0f64; n];
        let mut from_left: Vec<(f64, u64, usize)> = Vec::with_capacity(n);
        let mut from_right: Vec<(f64, u64, usize)> = Vec::with_capacity(n);
        for pass in 0..self.options.iterations {
            for (i, gain) in gains.iter_mut().enumerate() {
                *gain = self.gain(split, i);
            }
            from_left.clear();
            from_right.clear();
            let pass_seed = mix(seed ^ u64::from(pass));
            for (i, &gain) in gains.iter().enumerate() {
                let tie = mix(pass_seed ^ u64::from(vertices[i]));
                if split.on_right[i] {
                    from_right.push((gain, tie, i));
                } else {
                    from_left.push((gain, tie, i));
                }
            }
            let best_first = |a: &(f64, u64, usize), b: &(f64, u64, usize)| {
                b.0.total_cmp(&a.0).then(a.1.cmp(&b.1))
            };
            from_left.sort_unstable_by(best_first);
            from_right.sort_unstable_by(best_first);
            let mut swapped = 0usize;
            for (&(gain_a, _, a), &(gain_b, _, b)) in from_left.iter().zip(&from_right) {
                if gain_a + gain_b <= EPSILON {
                    break;
                }
                // The estimates assumed no other move; check with the counts
                // as they are now, and undo the first move if the pair loses.
                let now_a = self.gain(split, a);
                self.apply(split, a);
                let now_b = self.gain(split, b);
                if now_a + now_b > EPSILON {
                    self.apply(split, b);
                    swapped += 1;
                } else {
                    self.apply(split, a);
                }
            }
            if swapped == 0 {
                break;
            }
        }
    }

    /// Cost saved by moving local vertex `i` to the other side.
    fn gain(&self, split: &Split, i: usize) -> f64 {
        let f = &self.graph.f;
        let mut gain = 0.0;
        for &u in &split.utilities[split.offsets[i]..split.offsets[i + 1]] {
            let u = u as usize;
            let (from, to) = if split.on_right[i] {
                (split.right[u] as usize, split.left[u] as usize)
            } else {
                (split.left[u] as usize, split.right[u] as usize)
            };
            gain += split.weights[u] * (f[from - 1] + f[to + 1] - f[from] - f[to]);
        }
        gain
    }

    fn apply(&self, split: &mut Split, i: usize) {
        let to_right = !split.on_right[i];
        for &u in &split.utilities[split.offsets[i]..split.offsets[i + 1]] {
            let u = u as usize;
            if to_right {
                split.left[u] -= 1;
                split.right[u] += 1;
            } else {
                split.right[u] -= 1;
                split.left[u] += 1;
            }
        }
        split.on_right[i] = to_right;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mix_is_splitmix64s_first_output() {
        // The reference C implementation's first output for seed 1234567
        // (Vigna, prng.di.unimi.it/splitmix64.c), as the orders were built on.
        assert_eq!(mix(1_234_567), 6_457_827_717_110_365_317);
    }

    fn options(page_size: u64) -> BalancedOptions {
        BalancedOptions {
            page_size,
            ..BalancedOptions::default()
        }
    }

    #[test]
    fn one_trace_keeps_its_own_order() {
        // A single trace's prefixes are already as compact as can be in
        // first-use order; nothing may move.
        let sizes = vec![1000; 16];
        let sequence: Vec<u32> = (0..16).collect();
        let order = partition(&sizes, std::slice::from_ref(&sequence), &options(4096));
        assert_eq!(order, sequence);
    }

    #[test]
    fn identical_traces_are_one_weighted_utility() {
        let sequence: Vec<u32> = vec![3, 1, 2, 0];
        let graph = Graph::new(5, &[sequence, vec![1, 3, 0, 2]]);
        // Prefixes of length 2 ({1,3} twice) and 4 ({0,1,2,3} twice).
        assert_eq!(graph.weights, vec![2.0, 2.0]);
        assert_eq!(graph.utilities_of(3), &[0, 1]);
        assert_eq!(graph.utilities_of(0), &[1]);
        assert!(graph.utilities_of(4).is_empty());
    }
}
