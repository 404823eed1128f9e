//! The basic-block address map reader
//! (`coldstart_binary::block_map::read_block_map`) and the discovery of
//! blocks by disassembly (`discover_block_map`, with its jump tables and
//! landing pads): any bytes must give a map, no map, or an error naming the
//! file; never a panic, a hang or an allocation sized by a count the input
//! claims.

#![no_main]

use coldstart_binary::block_map::{discover_block_map, read_block_map};
use libfuzzer_sys::fuzz_target;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    match read_block_map(Path::new("fuzz.bin"), data) {
        Ok(Some(map)) => {
            for function in &map.functions {
                if let Some((index, _)) = map.block_at(function.address) {
                    assert!(index < map.functions.len());
                }
            }
            let _ = map.block_count();
        }
        Ok(None) => {}
        Err(err) => assert!(err.to_string().starts_with("fuzz.bin: "), "{err}"),
    }
    if let Err(err) = discover_block_map(Path::new("fuzz.bin"), data) {
        assert!(err.to_string().starts_with("fuzz.bin: "), "{err}");
    }
});
