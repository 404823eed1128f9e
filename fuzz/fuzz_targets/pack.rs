//! The relocation packer on any bytes: it must refuse with a message naming
//! the file, or return a file that coldstart's ELF model reads and that pack
//! itself then refuses as already packed. Never a panic (overflow included,
//! fuzz builds check it), a hang or an unbounded allocation.

#![no_main]

use coldstart_binary::{InspectOptions, inspect_bytes};
use coldstart_pack::{Refusal, pack_bytes};
use libfuzzer_sys::fuzz_target;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    let path = Path::new("fuzz.so");
    match pack_bytes(path, data) {
        Ok((packed, _report)) => {
            if let Err(err) = inspect_bytes(path, &packed, &InspectOptions::default()) {
                panic!("the packed file does not read back: {err}");
            }
            match pack_bytes(path, &packed) {
                Err(refused) => assert_eq!(
                    refused.reason,
                    Refusal::AlreadyRelr,
                    "packing the output again: {refused}"
                ),
                Ok(_) => panic!("the packed file was packed a second time"),
            }
        }
        Err(refused) => {
            let text = refused.to_string();
            assert!(text.starts_with("fuzz.so: "), "{text}");
        }
    }
});
