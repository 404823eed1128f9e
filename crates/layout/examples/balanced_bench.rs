//! Times the balanced strategy on synthetic traces the size of a large
//! program's start, and compares the pages its prefixes touch with those of
//! first-call order.
//!
//! cargo run --release -p coldstart-layout --example balanced_bench [FUNCTIONS] [TRACES]

use coldstart_layout::{Kind, Order, OrderOptions, Strategy, Trace, TracedSymbol, order};
use std::collections::HashMap;
use std::time::Instant;

fn main() {
    let mut args = std::env::args().skip(1);
    let functions: usize = parse(args.next(), 200_000, "FUNCTIONS");
    let traces_n: usize = parse(args.next(), 10, "TRACES");
    let traces = synthetic(functions, traces_n);
    println!("{functions} functions, {traces_n} traces");

    let mut orders = Vec::new();
    for strategy in [Strategy::FirstCall, Strategy::Balanced] {
        let options = OrderOptions {
            strategy,
            ..OrderOptions::default()
        };
        let start = Instant::now();
        let made = match order(&traces, &options) {
            Ok(made) => made,
            Err(error) => {
                eprintln!("{strategy}: {error}");
                std::process::exit(1);
            }
        };
        println!("{strategy:>10}: {:.2} s", start.elapsed().as_secs_f64());
        orders.push((strategy, made));
    }
    for (strategy, made) in &orders {
        println!(
            "{strategy:>10}: prefixes touch {} pages in all",
            prefix_pages(made, &traces, 4096)
        );
    }
}

fn parse(arg: Option<String>, default: usize, what: &str) -> usize {
    match arg.map(|a| a.parse::<usize>()) {
        None => default,
        Some(Ok(n)) if n > 0 => n,
        Some(_) => {
            eprintln!("{what} must be a positive number");
            std::process::exit(2);
        }
    }
}

/// xorshift64: a fixed stream, so every run times the same input.
struct Rng(u64);

impl Rng {
    fn next(&mut self, limit: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % limit
    }
}

/// Each run uses about nine in ten functions, in an order that follows one
/// common plan with local jitter, as repeated starts of one program do.
fn synthetic(functions: usize, traces: usize) -> Vec<Trace> {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let sizes: Vec<u64> = (0..functions)
        .map(|_| 16 + rng.next(64) * rng.next(32))
        .collect();
    (0..traces)
        .map(|_| {
            let mut used: Vec<(u64, usize)> = Vec::new();
            for f in 0..functions {
                if rng.next(10) != 0 {
                    used.push((f as u64 * 16 + rng.next(32_000), f));
                }
            }
            used.sort_unstable();
            Trace::new(
                used.into_iter()
                    .enumerate()
                    .map(|(seq, (_, f))| TracedSymbol {
                        raw_name: format!("f{f}"),
                        kind: Kind::Function,
                        first_seq: seq as u64,
                        calls: None,
                        size: sizes[f],
                    })
                    .collect(),
            )
        })
        .collect()
}

/// Pages touched by each trace's log-spaced prefixes, summed: what the
/// balanced strategy minimises.
fn prefix_pages(order: &Order, traces: &[Trace], page: u64) -> u64 {
    let mut offset = 0;
    let mut page_of: HashMap<&str, u64> = HashMap::new();
    for entry in &order.entries {
        page_of.insert(&entry.raw_name, offset / page);
        offset += entry.size;
    }
    let mut total = 0;
    for trace in traces {
        let mut symbols: Vec<&TracedSymbol> = trace.symbols.iter().collect();
        symbols.sort_by_key(|s| s.first_seq);
        let mut touched = std::collections::HashSet::new();
        let mut cut = 2;
        for (i, symbol) in symbols.iter().enumerate() {
            touched.insert(page_of[symbol.raw_name.as_str()]);
            if i + 1 == cut || i + 1 == symbols.len() {
                total += touched.len() as u64;
                cut *= 2;
            }
        }
    }
    total
}
