//! The order-file reader: any text (linker script, gold section list, one
//! name a line, ld64 or BOLT) gives a list of distinct symbol names,
//! never a panic or a hang.

#![no_main]

use coldstart_layout::read_order;
use libfuzzer_sys::fuzz_target;
use std::collections::HashSet;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let names = read_order(text);
    let distinct: HashSet<&String> = names.iter().collect();
    assert_eq!(distinct.len(), names.len(), "a name twice: {names:?}");
});
