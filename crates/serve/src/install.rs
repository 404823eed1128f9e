//! `coldstart serve install`: a plan made by hand (`coldstart plan`) given
//! to the service for an executable. The plan is checked as the service
//! checks it before following it, and written into the state directory
//! atomically; a running service sees the new files and marks the
//! executable.

use crate::admit::admit;
use crate::state::{
    ExeIdentity, Program, ProgramState, STATE_FORMAT, State, StateError, program_id,
};
use coldstart_prefetch::format;
use coldstart_system::build_id::build_id;
use coldstart_system::identity::FileIdentity;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// When a start is over unless told: its tree quiet for a second, or a
/// minute after the exec.
pub const DEFAULT_QUIET_MS: u64 = 1000;
pub const DEFAULT_CAP_MS: u64 = 60_000;

#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    #[error("{path}: {error}")]
    Read {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("{0}")]
    Plan(String),
    #[error("{path}: {problem}")]
    Executable { path: PathBuf, problem: String },
    #[error(transparent)]
    State(#[from] StateError),
}

/// What to install.
#[derive(Debug, Clone)]
pub struct Install {
    pub plan: PathBuf,
    pub exe: PathBuf,
    pub max_plan_bytes: u64,
    pub quiet_ms: u64,
    pub cap_ms: u64,
}

/// Installs the plan for the executable (replacing the program's plan and
/// starting its record afresh when it had one); the program as recorded.
pub fn install(state: &State, what: &Install) -> Result<Program, InstallError> {
    let text = std::fs::read_to_string(&what.plan).map_err(|error| InstallError::Read {
        path: what.plan.clone(),
        error,
    })?;
    let mut plan =
        format::parse(&text, &what.plan).map_err(|e| InstallError::Plan(e.to_string()))?;
    admit(&mut plan, what.max_plan_bytes)
        .map_err(|why| InstallError::Plan(format!("{}: {why}", what.plan.display())))?;
    let exe = canonical_executable(&what.exe)?;
    let identity = FileIdentity::of_path(&exe).map_err(|error| InstallError::Read {
        path: exe.clone(),
        error,
    })?;
    let identity = FileIdentity {
        build_id: build_id(&exe),
        ..identity
    };
    if what.quiet_ms == 0 || what.cap_ms < what.quiet_ms {
        return Err(InstallError::Plan(
            "the quiet time must be above 0 and at most the cap".into(),
        ));
    }
    let id = program_id(&exe);
    let program = Program {
        format: STATE_FORMAT,
        id: id.clone(),
        exe,
        identity: ExeIdentity::of(identity),
        state: ProgramState::Serving,
        why: None,
        plan_from: what.plan.display().to_string(),
        installed_unix_s: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
        quiet_ms: what.quiet_ms,
        cap_ms: what.cap_ms,
        traced_starts: 0,
        class: None,
    };
    // The plan first: a service that sees program.json finds its plan.
    state.save_program_dir(&id)?;
    // Starts traced for an earlier plan are not refined into this one.
    state.remove_learned(&id)?;
    state.save_plan(&id, &plan)?;
    state.save_starts(&id, &[])?;
    state.save_program(&program)?;
    Ok(program)
}

/// The executable's path with every symbolic link resolved (the service
/// marks the file itself), checked to be an executable regular file.
fn canonical_executable(path: &Path) -> Result<PathBuf, InstallError> {
    let problem = |problem: String| InstallError::Executable {
        path: path.to_path_buf(),
        problem,
    };
    let exe = std::fs::canonicalize(path).map_err(|e| problem(e.to_string()))?;
    let meta = std::fs::metadata(&exe).map_err(|e| problem(e.to_string()))?;
    if !meta.is_file() {
        return Err(problem("not a regular file".into()));
    }
    if meta.permissions().mode() & 0o111 == 0 {
        return Err(problem("not executable".into()));
    }
    Ok(exe)
}
