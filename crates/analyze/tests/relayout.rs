//! `Relayout` on a library built here with gcc: where an order moves each
//! symbol is worked out from `nm` and `readelf` by the rule relayout.rs
//! documents (ordered symbols first in their section, in order, each at its
//! alignment, then the rest in their current order), not from coldstart's
//! ELF reader or a run of the code.
//!
//! On the machine this was written on (gcc 12.2, GNU ld 2.40) nm and readelf say:
//! .text at address 0x1040 = offset 0x1040 (Al 16), holding helper 0x1100
//! (0xd7 bytes), alpha 0x11e0 (0x233f), beta 0x3520 (0x2336), gamma_
//! 0x5860 (0x73), delta 0x58e0 (0x7df), helper 0x60c0 (0x13f), epsilon
//! 0x6200 (0x3ff); .data at address 0x9000, offset 0x8000, table at
//! address 0x9020 (0x1770). Every address is a multiple of 16, so each
//! keeps alignment 16. The order [gamma_, beta, no_such_function, table,
//! gamma_] then gives, each at round_up(end of the one before, 16):
//!
//! - gamma_ 0x1040 (ends 0x10b3), beta 0x10c0 (ends 0x33f6), then the rest
//!   in their old order: helper 0x3400 (ends 0x34d7), alpha 0x34e0 (ends
//!   0x581f), delta 0x5820 (ends 0x5fff), helper 0x6000 (ends 0x613f),
//!   epsilon 0x6140.
//! - table alone in .data: round_up(0x9000, 16) = 0x9000, offset 0x8000.
//! - Page 4 (0x4000-0x5000, inside beta from 0x3520) is beta's bytes
//!   0xae0-0x1ae0, now 0x1ba0-0x2ba0: pages 1 and 2. Page 2 (inside alpha
//!   from 0x11e0) is alpha's 0xe20-0x1e20, now 0x4300-0x5300: pages 4 and
//!   5. Page 8 holds table's 0x8020-0x9000, now 0x8000-0x8fe0: page 8.
//!
//! The test does the same sums on whatever addresses this machine's gcc
//! and ld give.

mod fixture;

use coldstart_analyze::relayout::{CalledFunction, Relayout};
use coldstart_binary::OffsetIndex;
use fixture::{Section, Symbol};
use std::collections::HashMap;

const PAGE: u64 = 4096;

/// The alignment a symbol keeps: the largest power of two dividing its
/// address, at most 16 (what gcc gives x86-64 functions).
fn alignment(symbol: &Symbol) -> u64 {
    (1u64 << symbol.address.trailing_zeros()).min(16)
}

/// New offsets of `section`'s symbols when `first` are laid out first:
/// old offset -> new offset.
fn lay_out(section: &Section, first: &[&Symbol], all: &[Symbol]) -> HashMap<u64, u64> {
    let in_section: Vec<&Symbol> = all
        .iter()
        .filter(|s| (section.offset..section.offset + section.size).contains(&s.offset))
        .collect();
    let rest = in_section
        .iter()
        .copied()
        .filter(|s| !first.iter().any(|f| f.offset == s.offset));
    let mut address = section.address;
    let mut new = HashMap::new();
    for symbol in first.iter().copied().chain(rest) {
        address = address.next_multiple_of(alignment(symbol));
        new.insert(symbol.offset, section.offset + (address - section.address));
        address += symbol.size;
    }
    new
}

/// The pages of `symbol`'s new place holding its old bytes in page `page`.
fn moved_pages(symbol: &Symbol, new_offset: u64, page: u64) -> Vec<u64> {
    let start = (page * PAGE).max(symbol.offset);
    let end = ((page + 1) * PAGE).min(symbol.end());
    let (a, b) = (
        new_offset + (start - symbol.offset),
        new_offset + (end - symbol.offset),
    );
    (a / PAGE..b.div_ceil(PAGE)).collect()
}

#[test]
fn an_order_moves_its_symbols_first_in_their_sections() {
    let Some(fx) = fixture::build() else {
        return;
    };
    let index = OffsetIndex::from_path(&fx.lib).unwrap();
    let order: Vec<String> = ["gamma_", "beta", "no_such_function", "table", "gamma_"]
        .map(String::from)
        .to_vec();
    let relayout = Relayout::new("/lib/libfixture.so", &index, &order);
    assert_eq!(relayout.path, "/lib/libfixture.so");

    let (text, data) = (fx.section(".text"), fx.section(".data"));
    let (alpha, beta, gamma, table) = (
        fx.symbol("alpha"),
        fx.symbol("beta"),
        fx.symbol("gamma_"),
        fx.symbol("table"),
    );
    // Four names found (gamma_ twice, placed once), one not in the binary.
    let summary = &relayout.summary;
    assert_eq!(summary.ordered, 5);
    assert_eq!(summary.placed, 3);
    assert_eq!(summary.missing, 1);
    assert_eq!(summary.missing_examples, ["no_such_function"]);
    assert_eq!(summary.placed_bytes, gamma.size + beta.size + table.size);
    // .text comes before .data in the file (readelf).
    assert!(text.offset < data.offset);
    assert_eq!(summary.sections, [".text", ".data"]);

    // By hand: .text starts 16-aligned (its functions are), so gamma_
    // lands on its first byte and beta right after it, rounded up to 16.
    assert_eq!(text.address % 16, 0);
    assert_eq!(relayout.new_offset(gamma.offset), Some(text.offset));
    assert_eq!(
        relayout.new_offset(beta.offset),
        Some(text.offset + gamma.size.next_multiple_of(16))
    );
    // Every symbol of .text and .data, ordered or not, moves as the rule says.
    let mut expected = lay_out(text, &[gamma, beta], &fx.symbols);
    expected.extend(lay_out(data, &[table], &fx.symbols));
    assert_eq!(expected.len(), 8, "seven functions and table: {expected:?}");
    for symbol in &fx.symbols {
        assert_eq!(
            relayout.new_offset(symbol.offset),
            expected.get(&symbol.offset).copied(),
            "{symbol:?}"
        );
    }
    // Only a symbol's first byte names it.
    assert_eq!(relayout.new_offset(gamma.offset + 1), None);
    assert_eq!(relayout.new_offset(0), None);

    // A page wholly inside beta (9000 bytes hold one whatever the start)
    // goes where beta's bytes go.
    let in_beta = beta.offset.div_ceil(PAGE);
    assert!((in_beta + 1) * PAGE <= beta.end());
    assert_eq!(
        relayout.pages_for(in_beta, PAGE),
        moved_pages(beta, expected[&beta.offset], in_beta)
    );
    assert!(relayout.is_relaid(in_beta, PAGE));
    assert!(relayout.is_relaid_code(in_beta, PAGE));
    // A page wholly inside alpha, which the order leaves out: it moves too,
    // behind the ordered ones.
    let in_alpha = alpha.offset.div_ceil(PAGE);
    assert!((in_alpha + 1) * PAGE <= alpha.end());
    let alpha_pages = relayout.pages_for(in_alpha, PAGE);
    assert_eq!(
        alpha_pages,
        moved_pages(alpha, expected[&alpha.offset], in_alpha)
    );
    assert!(relayout.is_relaid_code(in_alpha, PAGE));
    // Page 0 (ELF header, dynamic symbols) is in no section laid out anew.
    assert_eq!(relayout.pages_for(0, PAGE), [0]);
    assert!(!relayout.is_relaid(0, PAGE));
    assert!(!relayout.is_relaid_code(0, PAGE));
    // table's first page: data laid out anew, not code.
    let table_page = table.offset / PAGE;
    assert_eq!(
        fx.symbols_in(table_page * PAGE, (table_page + 1) * PAGE),
        [table]
    );
    assert!(text.offset + text.size <= table_page * PAGE);
    assert_eq!(
        relayout.pages_for(table_page, PAGE),
        moved_pages(table, expected[&table.offset], table_page)
    );
    assert!(relayout.is_relaid(table_page, PAGE));
    assert!(!relayout.is_relaid_code(table_page, PAGE));

    // The worked example of the module comment, literally, where this
    // toolchain lays the library out as the one it was worked out on.
    let worked_example = [
        ("helper", 0x1100),
        ("alpha", 0x11e0),
        ("beta", 0x3520),
        ("gamma_", 0x5860),
        ("delta", 0x58e0),
        ("epsilon", 0x6200),
        ("table", 0x9020),
    ]
    .iter()
    .all(|&(name, address)| {
        fx.symbols
            .iter()
            .any(|s| s.name == name && s.address == address)
    }) && (text.address, text.offset, data.address, data.offset)
        == (0x1040, 0x1040, 0x9000, 0x8000);
    if worked_example {
        let moved: Vec<Option<u64>> = [
            0x1100, 0x11e0, 0x3520, 0x5860, 0x58e0, 0x60c0, 0x6200, 0x8020,
        ]
        .map(|old| relayout.new_offset(old))
        .to_vec();
        let new = [
            0x3400, 0x34e0, 0x10c0, 0x1040, 0x5820, 0x6000, 0x6140, 0x8000,
        ];
        assert_eq!(moved, new.map(Some));
        assert_eq!(relayout.pages_for(4, PAGE), [1, 2]);
        assert_eq!(relayout.pages_for(2, PAGE), [4, 5]);
        assert_eq!(relayout.pages_for(8, PAGE), [8]);
    } else {
        eprintln!("this toolchain lays the fixture out otherwise: only the rule checked");
    }

    // Function records ride along untouched.
    assert_eq!(relayout.functions, None);
    let called = vec![CalledFunction {
        offset: gamma.offset,
        size: gamma.size,
        t_ns: 7,
    }];
    let relayout = relayout.with_functions(called.clone());
    assert_eq!(relayout.functions, Some(called));
}

#[test]
fn an_order_of_names_the_binary_lacks_moves_nothing() {
    let Some(fx) = fixture::build() else {
        return;
    };
    let index = OffsetIndex::from_path(&fx.lib).unwrap();
    let order = vec!["nowhere".to_string(), "nor_here".to_string()];
    let relayout = Relayout::new("lib", &index, &order);
    assert_eq!(
        (
            relayout.summary.ordered,
            relayout.summary.placed,
            relayout.summary.missing
        ),
        (2, 0, 2)
    );
    assert_eq!(relayout.summary.placed_bytes, 0);
    assert!(relayout.summary.sections.is_empty());
    let beta = fx.symbol("beta");
    let page = beta.offset.div_ceil(PAGE);
    assert_eq!(relayout.pages_for(page, PAGE), [page]);
    assert!(!relayout.is_relaid(page, PAGE));
    assert_eq!(relayout.new_offset(beta.offset), None);
}
