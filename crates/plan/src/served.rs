//! The plan a traced run is accounted against: the one the user gave, else
//! the one the run's command line handed a prefetcher, read and parsed; or
//! why there is none to read.

use crate::misses::plan_of_run;
use coldstart_analyze::loaded::LoadedRun;
use coldstart_prefetch::Plan;
use coldstart_prefetch::format::{self, FormatError};
use std::path::{Path, PathBuf};

/// A plan file that could not be read or parsed.
#[derive(Debug, thiserror::Error)]
pub enum PlanFileError {
    #[error("cannot read the plan {}", .path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Format(#[from] FormatError),
}

/// Which plan served a run, as far as it can be found now.
#[derive(Debug)]
pub enum ServingPlan {
    /// The run was not served, and no plan was given.
    None,
    Plan(Plan),
    /// A prefetcher served the run, and nothing in the profile says with
    /// which plan: the system-wide service served it from outside the
    /// traced tree (`by_service`; the program's own command line names no
    /// plan), or the prefetcher in the tree was started by a command line
    /// that names none (a script around coldstart-run). The run can be
    /// accounted without the plan
    /// ([`crate::misses::account_without_plan`]), or given it again.
    NotRecorded {
        by_service: bool,
    },
    /// A prefetcher served the run with this plan, which cannot be read
    /// now (moved, removed): the run is accounted without it unless it is
    /// given again.
    Unreadable {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// The plan to account `loaded`'s reads against: `given`, else the one
/// its command line names when a prefetcher served the run. A given plan
/// that cannot be read is an error; a named one is `Unreadable`.
pub fn serving_plan(
    loaded: &LoadedRun,
    given: Option<&Path>,
) -> Result<ServingPlan, PlanFileError> {
    let path = match given {
        Some(path) => path.to_path_buf(),
        None => {
            let prefetcher = loaded.prefetcher_tasks();
            if prefetcher.is_empty() {
                return Ok(ServingPlan::None);
            }
            match plan_of_run(&loaded.run) {
                Some(path) => path,
                None => {
                    // Only the service's threads live outside the tree.
                    let by_service = prefetcher.iter().any(|&pid| !loaded.in_tree(pid));
                    return Ok(ServingPlan::NotRecorded { by_service });
                }
            }
        }
    };
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(source) if given.is_none() => return Ok(ServingPlan::Unreadable { path, source }),
        Err(source) => return Err(PlanFileError::Read { path, source }),
    };
    Ok(ServingPlan::Plan(format::parse(&text, &path)?))
}
