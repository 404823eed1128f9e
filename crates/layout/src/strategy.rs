//! Ordering strategies: from the traces of several starts to one order of
//! the symbols they used. Functions and data are ordered separately, each by
//! the same strategy.

use crate::balanced::{self, BalancedOptions};
use crate::error::{Error, Result, parse_name};
use crate::model::{Kind, Order, OrderEntry, Trace};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;

/// How to order the symbols the traces used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Strategy {
    FirstCall,
    CallCount,
    Balanced,
}

impl Strategy {
    pub const ALL: [Strategy; 3] = [Strategy::FirstCall, Strategy::CallCount, Strategy::Balanced];

    /// The name `--strategy` takes.
    pub fn name(self) -> &'static str {
        match self {
            Strategy::FirstCall => "first-call",
            Strategy::CallCount => "call-count",
            Strategy::Balanced => "balanced",
        }
    }

    /// One line for `--help`.
    pub fn description(self) -> &'static str {
        match self {
            Strategy::FirstCall => {
                "by first use during startup (median over the traces), so the start reads \
                 forward through one block"
            }
            Strategy::CallCount => {
                "by calls during startup, most first (needs function-level traces that count \
                 calls)"
            }
            Strategy::Balanced => {
                "balanced partitioning (as lld's --bp-startup-sort): fewest pages touched by \
                 every prefix of every trace"
            }
        }
    }
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Strategy {
    type Err = Error;

    fn from_str(given: &str) -> Result<Strategy> {
        parse_name(given, &Strategy::ALL, Strategy::name, "strategy")
    }
}

/// How to order.
#[derive(Debug, Clone, PartialEq)]
pub struct OrderOptions {
    pub strategy: Strategy,
    /// Only read by [`Strategy::Balanced`].
    pub balanced: BalancedOptions,
}

impl Default for OrderOptions {
    fn default() -> Self {
        OrderOptions {
            strategy: Strategy::FirstCall,
            balanced: BalancedOptions::default(),
        }
    }
}

/// Orders the symbols `traces` used: functions first, then data.
///
/// A symbol is its (raw name, kind); listed twice in one trace, it counts
/// once, with its earliest `first_seq`, its calls summed and its largest size.
pub fn order(traces: &[Trace], options: &OrderOptions) -> Result<Order> {
    if traces.is_empty() {
        return Err(Error::NoTraces);
    }
    let mut entries = Vec::new();
    let mut warnings = Vec::new();
    for kind in [Kind::Function, Kind::Data] {
        let used = Used::collect(traces, kind)?;
        if used.symbols.is_empty() {
            continue;
        }
        let sequence = match options.strategy {
            Strategy::FirstCall => used.by_first_use(),
            Strategy::CallCount => match used.by_calls() {
                Some(sequence) => sequence,
                None if kind == Kind::Data => {
                    // Data is read, not called; no trace counts its uses.
                    warnings.push(format!(
                        "call-count: the {} data symbols have no counts (data is read, not \
                         called); they are ordered by first use",
                        used.symbols.len()
                    ));
                    used.by_first_use()
                }
                None => {
                    return Err(Error::NoCallCounts {
                        traces: traces.len(),
                    });
                }
            },
            Strategy::Balanced => used.balanced(&options.balanced),
        };
        entries.extend(sequence.into_iter().map(|i| used.symbols[i].entry(kind)));
    }
    Ok(Order {
        strategy: options.strategy,
        traces: traces.len(),
        entries,
        warnings,
    })
}

/// One symbol as all traces together saw it.
#[derive(Debug, Clone)]
pub(crate) struct UsedSymbol {
    pub raw_name: String,
    pub size: u64,
    pub used_by: usize,
    pub median_rank: u64,
    pub calls: Option<u64>,
}

impl UsedSymbol {
    fn entry(&self, kind: Kind) -> OrderEntry {
        OrderEntry {
            raw_name: self.raw_name.clone(),
            kind,
            size: self.size,
            used_by: self.used_by,
            median_rank: self.median_rank,
            calls: self.calls,
        }
    }
}

/// The symbols of one kind the traces used, and each trace's sequence.
pub(crate) struct Used {
    pub symbols: Vec<UsedSymbol>,
    /// Per trace, indices into `symbols` in the order that trace first used
    /// them.
    pub sequences: Vec<Vec<u32>>,
}

/// What one trace said about one symbol, duplicates merged.
struct Seen {
    first_seq: u64,
    calls: Option<u64>,
    size: u64,
}

impl Used {
    pub(crate) fn collect(traces: &[Trace], kind: Kind) -> Result<Used> {
        let longest = traces.iter().map(|t| t.symbols.len()).max().unwrap_or(0);
        let mut ids: HashMap<&str, u32> = HashMap::with_capacity(longest);
        let mut names: Vec<&str> = Vec::with_capacity(longest);
        // slot_of[id]: 1 + trace and the symbol's place in that trace's
        // `seen`, so one array serves every trace without clearing.
        let mut slot_of: Vec<(usize, usize)> = Vec::with_capacity(longest);
        // Per trace, (id, what it said) once per symbol.
        let mut per_trace: Vec<Vec<(u32, Seen)>> = Vec::with_capacity(traces.len());
        for (t, trace) in traces.iter().enumerate() {
            let mut seen: Vec<(u32, Seen)> = Vec::with_capacity(trace.symbols.len());
            for (index, symbol) in trace.symbols.iter().enumerate() {
                if symbol.raw_name.is_empty() {
                    return Err(Error::EmptyName { trace: t, index });
                }
                if symbol.kind != kind {
                    continue;
                }
                let next = names.len() as u32;
                let id = *ids.entry(symbol.raw_name.as_str()).or_insert(next);
                if id == next {
                    names.push(&symbol.raw_name);
                    slot_of.push((0, 0));
                }
                match slot_of[id as usize] {
                    (trace, slot) if trace == t + 1 => {
                        let s = &mut seen[slot].1;
                        s.first_seq = s.first_seq.min(symbol.first_seq);
                        s.calls = add_calls(s.calls, symbol.calls);
                        s.size = s.size.max(symbol.size);
                    }
                    _ => {
                        slot_of[id as usize] = (t + 1, seen.len());
                        seen.push((
                            id,
                            Seen {
                                first_seq: symbol.first_seq,
                                calls: symbol.calls,
                                size: symbol.size,
                            },
                        ));
                    }
                }
            }
            per_trace.push(seen);
        }

        let n = names.len();
        let traces_n = traces.len();
        // ranks[id * traces + t]: place in trace t, or that trace's symbol
        // count when it did not use the symbol.
        let mut ranks = vec![0u64; n * traces_n];
        let mut sequences = Vec::with_capacity(traces_n);
        let mut symbols: Vec<UsedSymbol> = names
            .iter()
            .map(|name| UsedSymbol {
                raw_name: (*name).to_string(),
                size: 0,
                used_by: 0,
                median_rank: 0,
                calls: None,
            })
            .collect();
        for (t, mut seen) in per_trace.into_iter().enumerate() {
            seen.sort_unstable_by(|(a, sa), (b, sb)| {
                sa.first_seq
                    .cmp(&sb.first_seq)
                    .then_with(|| names[*a as usize].cmp(names[*b as usize]))
            });
            for id in 0..n {
                ranks[id * traces_n + t] = seen.len() as u64;
            }
            for (rank, (id, s)) in seen.iter().enumerate() {
                ranks[*id as usize * traces_n + t] = rank as u64;
                let symbol = &mut symbols[*id as usize];
                symbol.size = symbol.size.max(s.size);
                symbol.used_by += 1;
                symbol.calls = add_calls(symbol.calls, s.calls);
            }
            sequences.push(seen.into_iter().map(|(id, _)| id).collect());
        }
        for (id, symbol) in symbols.iter_mut().enumerate() {
            let own = &mut ranks[id * traces_n..(id + 1) * traces_n];
            own.sort_unstable();
            symbol.median_rank = coldstart_analyze::lower_median(own);
        }
        Ok(Used { symbols, sequences })
    }

    /// Indices in first-use order: median rank, then used by more traces,
    /// then name, so equal inputs give equal orders.
    pub(crate) fn by_first_use(&self) -> Vec<usize> {
        let mut sequence: Vec<usize> = (0..self.symbols.len()).collect();
        sequence.sort_unstable_by(|&a, &b| {
            let (a, b) = (&self.symbols[a], &self.symbols[b]);
            a.median_rank
                .cmp(&b.median_rank)
                .then(b.used_by.cmp(&a.used_by))
                .then_with(|| a.raw_name.cmp(&b.raw_name))
        });
        sequence
    }

    /// Indices by calls, most first, ties in first-use order; `None` when no
    /// trace counted calls of any of these symbols. Symbols no counting
    /// trace used count as 0 calls.
    fn by_calls(&self) -> Option<Vec<usize>> {
        if self.symbols.iter().all(|s| s.calls.is_none()) {
            return None;
        }
        let mut sequence = self.by_first_use();
        // Stable: equal counts keep first-use order.
        sequence.sort_by_key(|&i| std::cmp::Reverse(self.symbols[i].calls.unwrap_or(0)));
        Some(sequence)
    }

    fn balanced(&self, options: &BalancedOptions) -> Vec<usize> {
        let first_use = self.by_first_use();
        let sizes: Vec<u64> = first_use.iter().map(|&i| self.symbols[i].size).collect();
        // The partitioner numbers vertices in first-use order.
        let mut vertex_of = vec![0u32; first_use.len()];
        for (vertex, &i) in first_use.iter().enumerate() {
            vertex_of[i] = vertex as u32;
        }
        let sequences: Vec<Vec<u32>> = self
            .sequences
            .iter()
            .map(|s| s.iter().map(|&i| vertex_of[i as usize]).collect())
            .collect();
        balanced::partition(&sizes, &sequences, options)
            .into_iter()
            .map(|vertex| first_use[vertex as usize])
            .collect()
    }
}

fn add_calls(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.saturating_add(b)),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::TracedSymbol;

    fn symbol(name: &str, kind: Kind, first_seq: u64, calls: Option<u64>) -> TracedSymbol {
        TracedSymbol {
            raw_name: name.to_string(),
            kind,
            first_seq,
            calls,
            size: 16,
        }
    }

    fn function(name: &str, first_seq: u64) -> TracedSymbol {
        symbol(name, Kind::Function, first_seq, None)
    }

    fn counted(name: &str, first_seq: u64, calls: u64) -> TracedSymbol {
        symbol(name, Kind::Function, first_seq, Some(calls))
    }

    fn names(order: &Order) -> Vec<&str> {
        order.entries.iter().map(|e| e.raw_name.as_str()).collect()
    }

    fn run(strategy: Strategy, traces: &[Trace]) -> Result<Order> {
        order(
            traces,
            &OrderOptions {
                strategy,
                ..OrderOptions::default()
            },
        )
    }

    #[test]
    fn first_call_takes_the_median_rank_then_coverage_then_name() {
        // Ranks of functions: trace 1 v0 x1 y2 z3 (w absent: 4);
        // trace 2 w0 y1 x2 (v, z absent: 3). Lower medians: v 0, w 0, x 1,
        // y 1, z 3. v and w tie and are each in one trace: by name. x and
        // y tie and are both in two: by name.
        let traces = [
            Trace::new(vec![
                function("z", 30),
                function("x", 10),
                function("v", 5),
                function("y", 20),
                symbol("d1", Kind::Data, 1, None),
                symbol("d2", Kind::Data, 50, None),
            ]),
            Trace::new(vec![
                function("x", 2),
                function("w", 0),
                function("y", 1),
                symbol("d2", Kind::Data, 0, None),
            ]),
        ];
        let order = run(Strategy::FirstCall, &traces).expect("orders");
        // Data ranks: d1 [0, 1], d2 [1, 0]; both median 0, d2 in more traces.
        assert_eq!(names(&order), ["v", "w", "x", "y", "z", "d2", "d1"]);
        let x = &order.entries[2];
        assert_eq!((x.median_rank, x.used_by, x.kind), (1, 2, Kind::Function));
        assert_eq!(order.traces, 2);
        assert!(order.warnings.is_empty());
    }

    #[test]
    fn duplicates_in_one_trace_count_once_with_the_earliest_use() {
        let traces = [Trace::new(vec![
            counted("b", 5, 1),
            counted("a", 7, 2),
            TracedSymbol {
                size: 40,
                ..counted("a", 3, 4)
            },
        ])];
        let order = run(Strategy::FirstCall, &traces).expect("orders");
        assert_eq!(names(&order), ["a", "b"]);
        assert_eq!(order.entries[0].calls, Some(6));
        assert_eq!(order.entries[0].size, 40);
        assert_eq!(order.entries[0].used_by, 1);
    }

    #[test]
    fn call_count_sums_counting_traces_and_breaks_ties_by_first_use() {
        let traces = [
            Trace::new(vec![
                counted("a", 0, 5),
                counted("c", 1, 5),
                counted("b", 2, 1),
                counted("d", 3, 5),
            ]),
            Trace::new(vec![counted("b", 0, 10), counted("a", 1, 1)]),
            // A page-level trace: no counts, adds nothing to them.
            Trace::new(vec![function("e", 0), function("d", 1)]),
        ];
        let order = run(Strategy::CallCount, &traces).expect("orders");
        // b 11, a 6, then d and c with 5 each in first-use order (ranks
        // c [1, 2, 2] and d [3, 2, 1]: both median 2, d used by more
        // traces), then e with none.
        assert_eq!(names(&order), ["b", "a", "d", "c", "e"]);
        assert_eq!(order.entries[4].calls, None);
    }

    #[test]
    fn call_count_without_counts_is_an_error_for_code_and_a_fallback_for_data() {
        let traces = [Trace::new(vec![function("f", 0), function("g", 1)])];
        let error = run(Strategy::CallCount, &traces).expect_err("no counts");
        assert!(matches!(error, Error::NoCallCounts { traces: 1 }));
        assert!(
            error
                .to_string()
                .contains("use --strategy first-call or balanced")
        );

        let traces = [Trace::new(vec![
            counted("f", 1, 1),
            counted("g", 0, 3),
            symbol("late", Kind::Data, 9, None),
            symbol("early", Kind::Data, 2, None),
        ])];
        let order = run(Strategy::CallCount, &traces).expect("orders");
        assert_eq!(names(&order), ["g", "f", "early", "late"]);
        assert_eq!(order.warnings.len(), 1);
        assert!(order.warnings[0].contains("ordered by first use"));
    }

    #[test]
    fn balanced_groups_what_each_trace_uses_together() {
        // Two starts using the same eight functions in opposite halves.
        // First use interleaves them (A E B F C G D H: each prefix of four
        // spans four pages of two); balanced partitioning keeps each
        // start's first four on two pages.
        let traces = [
            Trace::new(
                ("ABCDEFGH".chars().enumerate())
                    .map(|(i, c)| TracedSymbol {
                        size: 2048,
                        ..function(&c.to_string(), i as u64)
                    })
                    .collect(),
            ),
            Trace::new(
                ("EFGHABCD".chars().enumerate())
                    .map(|(i, c)| TracedSymbol {
                        size: 2048,
                        ..function(&c.to_string(), i as u64)
                    })
                    .collect(),
            ),
        ];
        let first = run(Strategy::FirstCall, &traces).expect("orders");
        assert_eq!(names(&first), ["A", "E", "B", "F", "C", "G", "D", "H"]);
        let balanced = run(Strategy::Balanced, &traces).expect("orders");
        assert_eq!(names(&balanced), ["A", "B", "C", "D", "E", "F", "G", "H"]);
        assert_eq!(balanced.strategy, Strategy::Balanced);
    }

    #[test]
    fn an_empty_name_or_no_trace_is_refused() {
        assert!(matches!(
            run(Strategy::FirstCall, &[]),
            Err(Error::NoTraces)
        ));
        let traces = [Trace::new(vec![function("ok", 0), function("", 1)])];
        assert!(matches!(
            run(Strategy::FirstCall, &traces),
            Err(Error::EmptyName { trace: 0, index: 1 })
        ));
    }

    #[test]
    fn strategy_names_round_trip() {
        for strategy in Strategy::ALL {
            assert_eq!(strategy.name().parse::<Strategy>().ok(), Some(strategy));
            assert!(!strategy.description().is_empty());
        }
        let error = "hfsort".parse::<Strategy>().expect_err("unknown");
        assert!(
            error
                .to_string()
                .contains("first-call, call-count, balanced")
        );
    }
}
