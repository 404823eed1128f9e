//! The function-record parser (the `functions.<pid>.tsv` files the
//! instrumentation runtime writes): any bytes must give a record or an
//! error naming the file and line, never a panic or a hang.

#![no_main]

use coldstart_record::functions::parse_dump;
use libfuzzer_sys::fuzz_target;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    if let Err(err) = parse_dump(Path::new("fuzz.tsv"), data) {
        assert!(err.to_string().starts_with("fuzz.tsv:"), "{err}");
    }
});
