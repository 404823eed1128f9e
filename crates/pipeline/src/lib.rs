//! coldstart's loop on a built app, as steps a script calls in turn (the
//! demo is one): start it as the user (`sample_launch`), trace its cold
//! start (`cold_start`), compile its prefetch plan (`plan`), order and
//! relink it and measure what the new layout saves (`order`), and time it
//! warm, cold, with the plan and relinked (`bench`); `demo` holds what the
//! demo reports of them all, `summary` the figures it shows first, and
//! `render` turns both into text with the report room's renderers;
//! `selective` learns the files selective-cold eviction drops. Each step
//! tells its progress through a `Step` callback and returns its result;
//! printing is the caller's.

pub mod bench;
pub mod cold_start;
pub mod demo;
pub mod order;
pub mod plan;
pub mod render;
pub mod selective;
pub mod summary;

use coldstart_record::trace::TraceOptions;
use coldstart_system::launch::LaunchSpec;
use std::path::Path;
use std::time::Duration;

/// Where a step says what it is doing, one line at a time.
pub type Step<'a> = &'a mut dyn FnMut(&str);

/// The sample app started as the invoking user, ready when it prints READY.
pub fn sample_launch(executable: &Path) -> anyhow::Result<LaunchSpec> {
    let argv = vec![executable.as_os_str().to_owned()];
    Ok(LaunchSpec {
        ready_regex: Some(regex::Regex::new("^READY")?),
        ..LaunchSpec::quiet(argv, Duration::from_secs(60))?
    })
}

/// How the loop traces a start: from a cold page cache, with the default
/// buffer per CPU, at `read_ahead_kb` (None: the device's own setting),
/// without user-space faults (the report's chart sets `user_faults`).
pub fn cold_trace(launch: LaunchSpec, read_ahead_kb: Option<u64>) -> TraceOptions {
    TraceOptions {
        read_ahead_kb,
        ..TraceOptions::cold(launch)
    }
}
