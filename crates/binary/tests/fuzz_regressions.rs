//! Every input the fuzzer (fuzz/) ever crashed on, kept so the bug stays
//! fixed: each must give an inspection or an error naming the file.

use coldstart_binary::{InspectOptions, inspect_bytes};
use std::path::Path;

#[test]
fn crash_inputs_return_cleanly() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz-regressions");
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).expect("regression directory") {
        let path = entry.expect("entry").path();
        let bytes = std::fs::read(&path).expect("read regression input");
        let label = Path::new("regression.bin");
        if let Err(err) = inspect_bytes(label, &bytes, &InspectOptions::default()) {
            assert!(
                err.to_string().starts_with("regression.bin: "),
                "{}: {err}",
                path.display()
            );
        }
        checked += 1;
    }
    assert!(
        checked > 0,
        "no regression inputs found in {}",
        dir.display()
    );
}
