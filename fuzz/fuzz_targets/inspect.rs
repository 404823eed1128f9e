//! One fuzz target for the whole binary model: any bytes go through format
//! detection, every analysis inspect runs, the text report and the JSON
//! writer. It must return (Ok or an error naming the file), never panic,
//! hang or allocate without bound.

#![no_main]

use coldstart_binary::{InspectOptions, inspect_bytes};
use coldstart_report::inspect::{InspectView, render};
use libfuzzer_sys::fuzz_target;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    let path = Path::new("fuzz.bin");
    match inspect_bytes(path, data, &InspectOptions::default()) {
        Ok(inspection) => {
            let _ = render(&inspection, &InspectView::default());
            let _ = serde_json::to_vec(&inspection);
        }
        Err(err) => assert!(err.to_string().starts_with("fuzz.bin: ")),
    }
});
