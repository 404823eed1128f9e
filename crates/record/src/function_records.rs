//! The function records of one traced run: a directory the instrumented
//! program writes them to, and what it wrote, named from each binary's
//! symbols and added to the run in the profile. `coldstart trace
//! --functions` and the demo's order loop both go through here.

use crate::functions::{self, FunctionsError};
use coldstart_profile::Profile;
use coldstart_profile::summary::{FunctionsSummary, TraceSummary};
use coldstart_system::launch::LaunchSpec;
use std::path::{Path, PathBuf};

/// What can go wrong collecting a run's function records.
#[derive(Debug, thiserror::Error)]
pub enum RecordsError {
    #[error("creating a directory for the function records")]
    CreateDir(#[source] std::io::Error),
    #[error("giving {} to the traced user", .path.display())]
    GiveDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Read(#[from] FunctionsError),
    #[error(transparent)]
    Profile(#[from] coldstart_profile::Error),
}

/// A fresh directory the instrumented program writes its function records
/// to, as itself, handed to it through its environment.
pub fn records_dir_for(launch: &mut LaunchSpec) -> Result<tempfile::TempDir, RecordsError> {
    let dir = tempfile::Builder::new()
        .prefix("coldstart-functions")
        .tempdir()
        .map_err(RecordsError::CreateDir)?;
    if launch.identity.switches() {
        std::os::unix::fs::chown(
            dir.path(),
            Some(launch.identity.uid),
            Some(launch.identity.gid),
        )
        .map_err(|source| RecordsError::GiveDir {
            path: dir.path().to_path_buf(),
            source,
        })?;
    }
    launch
        .env
        .push((functions::DIR_ENV.into(), dir.path().as_os_str().to_owned()));
    Ok(dir)
}

/// Reads the function records the instrumented program left in `dir`,
/// names the functions from each binary's symbols and adds them to the run.
pub fn record_functions(
    profile: &mut Profile,
    summary: &TraceSummary,
    dir: &Path,
) -> Result<FunctionsSummary, RecordsError> {
    let mut warnings = Vec::new();
    let dumps = functions::read_dump_dir(dir)?;
    if dumps.is_empty() {
        warnings.push(
            "warning: --functions: the program wrote no function records; was it compiled with \
             -finstrument-functions (gcc) or -finstrument-function-entry-bare (clang) and linked \
             with coldstart's runtime (coldstart runtime --help)? Did it exit normally?"
                .to_string(),
        );
    }
    let trace = functions::Symbolizer::new().symbolize(&dumps);
    let rows = trace.profile_rows(summary.start_monotonic_ns);
    profile.write_functions(summary.run, &rows.files, &rows.functions)?;
    let unnamed: u64 = trace.modules.iter().map(|m| m.unnamed).sum();
    let dropped = trace.dropped();
    if dropped > 0 {
        warnings.push(format!(
            "warning: --functions: the runtime's table was full and {dropped} calls went \
             unrecorded; raise COLDSTART_FUNCTIONS_CAPACITY"
        ));
    }
    Ok(FunctionsSummary {
        processes: dumps.len(),
        functions: rows.functions.len(),
        unnamed,
        dropped,
        warnings,
    })
}
