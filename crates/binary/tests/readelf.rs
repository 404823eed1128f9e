//! inspect's counts against readelf's, on this machine's libc and libstdc++,
//! on Firefox's libxul.so and Chromium (installed by .ci/run), and on the
//! sample app built with and without packed relative relocations.

mod common;

use common::assert_matches_readelf;
use std::path::Path;

fn system_library(name: &str) -> Option<std::path::PathBuf> {
    [
        "/lib/x86_64-linux-gnu",
        "/usr/lib/x86_64-linux-gnu",
        "/lib64",
        "/usr/lib64",
    ]
    .iter()
    .map(|dir| Path::new(dir).join(name))
    .find(|p| p.exists())
}

#[test]
fn libc_matches_readelf() {
    let Some(path) = system_library("libc.so.6") else {
        return common::skip("libc.so.6 not found in the usual library directories");
    };
    let ins = assert_matches_readelf(&path);
    // glibc defines the version it asks others to need.
    let dynamic = ins.dynamic.expect("dynamic");
    if dynamic.relr {
        assert!(dynamic.relr_version_defined);
        assert!(
            ins.warnings
                .iter()
                .all(|w| w.code != "relr-without-version-need")
        );
    }
}

#[test]
fn libstdcxx_matches_readelf() {
    let Some(path) = system_library("libstdc++.so.6") else {
        return common::skip("libstdc++.so.6 not found (apt-get install libstdc++6)");
    };
    assert_matches_readelf(&path);
}

#[test]
fn libxul_matches_readelf() {
    let path = Path::new("/usr/lib/firefox-esr/libxul.so");
    if !path.exists() {
        return common::skip("Firefox ESR not installed (apt-get install firefox-esr)");
    }
    let ins = assert_matches_readelf(path);
    // libxul is linked with RELR: re-encoding its offsets must give back the
    // size of the table it has, which checks the encoder on real data.
    let relr_table = ins
        .relocations
        .sections
        .iter()
        .find(|s| s.format == "relr")
        .expect("libxul has a RELR table");
    let estimate = ins.relocations.relr_estimate.expect("estimate");
    assert_eq!(estimate.relative_in_tables, 0);
    assert_eq!(estimate.relr_bytes, relr_table.size);
}

#[test]
fn chromium_matches_readelf() {
    let path = Path::new("/usr/lib/chromium/chromium");
    if !path.exists() {
        return common::skip("Chromium not installed (apt-get install chromium)");
    }
    assert_matches_readelf(path);
}
