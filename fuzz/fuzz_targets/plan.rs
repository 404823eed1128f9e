//! The prefetch plan parser: any text must give a plan or an error naming
//! the file and line, never a panic (overflow included) or a hang.

#![no_main]

use coldstart_prefetch::format::parse;
use libfuzzer_sys::fuzz_target;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Err(err) = parse(text, Path::new("fuzz.plan")) {
        assert!(err.to_string().starts_with("fuzz.plan:"), "{err}");
    }
});
