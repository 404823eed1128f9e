//! The dynamic loader's side of a traced start: uprobes on ld.so mark,
//! per object, the search for its file and each open tried, mapping it,
//! relocating it, each initializer, dlopen, and the jump to the program's
//! entry. `probes` finds where to put them (ld.so's debug file, by
//! build-id); `spans` turns the hits into the profile's loader spans.
//! Page events of a task fall into the spans open on it at their time, so
//! analysis can say which phase read which pages.

pub mod calibrate;
pub mod probes;
pub mod spans;

use coldstart_system::launch::{LaunchSpec, resolve_program};
use probes::{LoaderProbes, NoProbes};
use std::path::Path;

/// The loader probes for the program `launch` starts, or why there are
/// none. Reads ld.so and its debug file: call it before the page cache is
/// put in the state to trace from.
pub fn probes_for(launch: &LaunchSpec, lookups: bool) -> Result<LoaderProbes, NoProbes> {
    let program = launch
        .argv
        .first()
        .map(Path::new)
        .ok_or_else(|| NoProbes::Unreadable {
            path: Default::default(),
            detail: "no program to run".to_string(),
        })?;
    let resolved = resolve_program(program).unwrap_or_else(|| program.to_path_buf());
    let interpreter = probes::interpreter_of(&resolved)?;
    probes::plan_probes(&interpreter, lookups)
}
