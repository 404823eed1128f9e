//! The service's state directory, /var/lib/coldstart by default:
//!
//! ```text
//! STATE/lock                    held (flock) by the running service
//! STATE/programs/ID/program.json  the program: executable, identity, state
//! STATE/programs/ID/plan          its plan, in the plan format
//! STATE/programs/ID/starts.json   the starts it saw, newest last
//! STATE/programs/ID/profile.db    the starts it traced to learn the plan
//!                                 (a coldstart profile, newest runs kept)
//! ```
//!
//! Every file is written whole to a temporary file beside it, synced and
//! renamed over the old one, so a crash or a full disk leaves the old file
//! or the new one, never half of one. Files and directories are root's
//! and not writable by others (the service reads what they name as root).
//! Reading checks every value: a file that does not parse is refused with
//! its path and the problem, and nothing else of the state is lost.

use coldstart_prefetch::Plan;
use coldstart_prefetch::format;
use coldstart_system::identity::FileIdentity;
use serde::{Deserialize, Serialize};
use std::fs::{self, File};
use std::io::{self, Write as _};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Where the service keeps its state unless told.
pub const DEFAULT_STATE_DIR: &str = "/var/lib/coldstart";

/// The version of program.json and starts.json this build writes and reads.
pub const STATE_FORMAT: u32 = 1;

/// How many starts a program keeps: the newest.
pub const KEPT_STARTS: usize = 1000;

#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("{path}: {error}")]
    Io { path: PathBuf, error: io::Error },
    #[error("{path}: {problem}")]
    Invalid { path: PathBuf, problem: String },
    #[error(
        "{path}: another coldstart serve uses this state directory (it holds {path}); stop it first"
    )]
    Busy { path: PathBuf },
}

fn io_error(path: &Path) -> impl FnOnce(io::Error) -> StateError + '_ {
    move |error| StateError::Io {
        path: path.to_path_buf(),
        error,
    }
}

/// A state directory.
#[derive(Debug, Clone)]
pub struct State {
    dir: PathBuf,
}

/// What the service does for a program.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ProgramState {
    /// Its plan is replayed at each start (but the held-out ones).
    Serving,
    /// Its plan is not replayed: served starts were not faster than
    /// held-out ones, or it was switched off by hand.
    Off,
    /// The executable changed since the plan was made: the plan is not
    /// replayed until a new one is installed (when the service does not
    /// learn; else the program is learned again).
    Stale,
    /// No plan yet: its next start is traced and a plan compiled from it.
    Learning,
}

impl ProgramState {
    pub fn as_str(self) -> &'static str {
        match self {
            ProgramState::Serving => "serving",
            ProgramState::Off => "off",
            ProgramState::Stale => "stale",
            ProgramState::Learning => "learning",
        }
    }
}

/// The identity the executable had when its plan was made: a start of a
/// file that is no longer this one is not served.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExeIdentity {
    pub size: u64,
    pub mtime_ns: Option<i64>,
    pub build_id: Option<String>,
}

impl ExeIdentity {
    pub fn file_identity(&self) -> FileIdentity {
        FileIdentity {
            size: self.size,
            mtime_ns: self.mtime_ns,
            build_id: self.build_id.clone(),
        }
    }

    pub fn of(identity: FileIdentity) -> ExeIdentity {
        ExeIdentity {
            size: identity.size,
            mtime_ns: identity.mtime_ns,
            build_id: identity.build_id,
        }
    }
}

/// A program the service knows: program.json.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Program {
    pub format: u32,
    /// The directory name under programs/.
    pub id: String,
    /// The executable's path, as installed.
    pub exe: PathBuf,
    pub identity: ExeIdentity,
    pub state: ProgramState,
    /// Why it is off or stale, in a sentence.
    pub why: Option<String>,
    /// Where the plan came from: the plan file `coldstart serve install`
    /// was given.
    pub plan_from: String,
    /// When the plan was installed, seconds since the epoch.
    pub installed_unix_s: u64,
    /// When a start is over: its process tree used less than a tenth of a
    /// CPU and read less than 1 MiB for this long.
    pub quiet_ms: u64,
    /// When a start is over at the latest, counted from its exec.
    pub cap_ms: u64,
    /// Starts traced since the executable became what it is: the plan is
    /// compiled from the newest of them.
    #[serde(default)]
    pub traced_starts: u32,
    /// The starts it is for: those whose arguments have this class
    /// ([`crate::learn::argument_class`]); None for every start of the
    /// executable (a plan installed by hand).
    #[serde(default)]
    pub class: Option<String>,
}

/// What the service did with one start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    /// The plan was replayed.
    Served,
    /// Held out at random, to measure the plan against.
    HeldOut,
    /// Its environment had COLDSTART_SERVE=0.
    OptedOut,
    /// Not served because memory was short.
    MemoryShort,
    /// Not served because as many starts were being served already.
    Busy,
    /// The program had no plan yet: the start was traced to learn one.
    Learning,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Served => "served",
            Outcome::HeldOut => "held-out",
            Outcome::OptedOut => "opted-out",
            Outcome::MemoryShort => "memory-short",
            Outcome::Busy => "busy",
            Outcome::Learning => "learning",
        }
    }
}

/// How a start's end was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EndedBy {
    /// Its process tree fell quiet.
    Quiet,
    /// Its first process exited.
    Exited,
    /// The cap was reached.
    Cap,
    /// The service stopped first.
    Stopped,
}

/// One start, as starts.json keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StartRecord {
    /// When the exec was seen, milliseconds since the epoch.
    pub at_unix_ms: u64,
    pub pid: i32,
    /// The user the program ran as (its filesystem uid).
    pub uid: Option<u32>,
    pub outcome: Outcome,
    pub ended_by: EndedBy,
    /// From the exec to the end of the start (the last moment its tree was
    /// busy), milliseconds.
    pub end_ms: f64,
    /// The share of the plan's sampled pages resident when the exec was
    /// seen: a start that found its pages cached says nothing of the plan.
    pub resident_share: f64,
    /// Bytes the program's tree had fetched from storage by the end.
    pub program_read_bytes: u64,
    /// Bytes of the plan the service asked the kernel for.
    pub prefetch_bytes: u64,
    /// From the exec event to the replay's first request, microseconds.
    pub first_request_us: Option<f64>,
    /// Files of the plan the replay did not open, and why (the first few).
    pub skipped_files: Vec<String>,
    /// Whether the start was traced to learn or refine the plan.
    #[serde(default)]
    pub traced: bool,
    /// Whether the start was decided from what its exec was given, read
    /// while the exec was under way, rather than once it completed.
    #[serde(default)]
    pub decided_at_exec: bool,
}

/// starts.json.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Starts {
    format: u32,
    starts: Vec<StartRecord>,
}

impl State {
    /// The state directory `dir`, created (mode 0700) with its programs/
    /// directory when missing.
    pub fn open(dir: &Path) -> Result<State, StateError> {
        let programs = dir.join("programs");
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&programs)
            .map_err(io_error(&programs))?;
        Ok(State {
            dir: dir.to_path_buf(),
        })
    }

    /// The state directory `dir` as it is, for reading: no directory is
    /// created.
    pub fn at(dir: &Path) -> State {
        State {
            dir: dir.to_path_buf(),
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn programs_dir(&self) -> PathBuf {
        self.dir.join("programs")
    }

    fn program_dir(&self, id: &str) -> PathBuf {
        self.programs_dir().join(id)
    }

    pub fn plan_path(&self, id: &str) -> PathBuf {
        self.program_dir(id).join("plan")
    }

    /// The profile holding the starts traced to learn the plan of `id`.
    pub fn profile_path(&self, id: &str) -> PathBuf {
        self.program_dir(id).join("profile.db")
    }

    /// Removes the plan of `id` and the starts it was learned from (the
    /// profile and SQLite's files beside it): an executable that changed
    /// is learned afresh.
    pub fn remove_learned(&self, id: &str) -> Result<(), StateError> {
        let profile = self.profile_path(id);
        let mut paths = vec![self.plan_path(id), profile.clone()];
        for suffix in ["-wal", "-shm"] {
            let mut name = profile.clone().into_os_string();
            name.push(suffix);
            paths.push(PathBuf::from(name));
        }
        for path in paths {
            match fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(io_error(&path)(e)),
            }
        }
        Ok(())
    }

    /// Takes the lock the running service holds; fails when another holds it.
    pub fn lock(&self) -> Result<File, StateError> {
        let path = self.dir.join("lock");
        let file = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(&path)
            .map_err(io_error(&path))?;
        match rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => Ok(file),
            Err(rustix::io::Errno::WOULDBLOCK) => Err(StateError::Busy { path }),
            Err(e) => Err(StateError::Io {
                path,
                error: e.into(),
            }),
        }
    }

    /// Whether a service holds the lock now.
    pub fn is_served(&self) -> bool {
        let Ok(file) = File::open(self.dir.join("lock")) else {
            return false;
        };
        matches!(
            rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockShared),
            Err(rustix::io::Errno::WOULDBLOCK)
        )
    }

    /// The ids of the programs in the state, sorted.
    pub fn program_ids(&self) -> Result<Vec<String>, StateError> {
        let dir = self.programs_dir();
        let entries = match fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io_error(&dir)(e)),
        };
        let mut ids: Vec<String> = entries
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .filter_map(|e| e.file_name().to_str().map(str::to_string))
            .filter(|name| is_valid_id(name))
            .collect();
        ids.sort();
        Ok(ids)
    }

    /// Reads program.json of `id`.
    pub fn program(&self, id: &str) -> Result<Program, StateError> {
        let path = self.program_dir(id).join("program.json");
        let text = fs::read_to_string(&path).map_err(io_error(&path))?;
        let program: Program = serde_json::from_str(&text).map_err(|e| StateError::Invalid {
            path: path.clone(),
            problem: format!("not a program record: {e}"),
        })?;
        let problem = if program.format != STATE_FORMAT {
            Some(format!(
                "format {} (this coldstart reads {STATE_FORMAT})",
                program.format
            ))
        } else if program.id != id {
            Some(format!("names program {:?}, not {id:?}", program.id))
        } else if !program.exe.is_absolute() {
            Some(format!(
                "executable {} is not absolute",
                program.exe.display()
            ))
        } else if program.quiet_ms == 0 || program.cap_ms < program.quiet_ms {
            Some("quiet_ms must be above 0 and at most cap_ms".to_string())
        } else {
            None
        };
        match problem {
            Some(problem) => Err(StateError::Invalid { path, problem }),
            None => Ok(program),
        }
    }

    /// Reads the plan of `id`, unchecked (see [`crate::admit`]).
    pub fn plan(&self, id: &str) -> Result<Plan, StateError> {
        let path = self.plan_path(id);
        let text = fs::read_to_string(&path).map_err(io_error(&path))?;
        format::parse(&text, &path).map_err(|e| StateError::Invalid {
            path: path.clone(),
            problem: e.to_string(),
        })
    }

    /// The starts of `id`, oldest first; none when it has no starts file.
    pub fn starts(&self, id: &str) -> Result<Vec<StartRecord>, StateError> {
        let path = self.program_dir(id).join("starts.json");
        let text = match fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io_error(&path)(e)),
        };
        let starts: Starts = serde_json::from_str(&text).map_err(|e| StateError::Invalid {
            path: path.clone(),
            problem: format!("not a starts record: {e}"),
        })?;
        if starts.format != STATE_FORMAT {
            return Err(StateError::Invalid {
                path,
                problem: format!(
                    "format {} (this coldstart reads {STATE_FORMAT})",
                    starts.format
                ),
            });
        }
        Ok(starts.starts)
    }

    /// Creates the directory of program `id` (mode 0700) when missing.
    pub fn save_program_dir(&self, id: &str) -> Result<(), StateError> {
        let dir = self.program_dir(id);
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .map_err(io_error(&dir))
    }

    /// Writes program.json (and creates the program's directory).
    pub fn save_program(&self, program: &Program) -> Result<(), StateError> {
        self.save_program_dir(&program.id)?;
        let dir = self.program_dir(&program.id);
        let text = serde_json::to_string_pretty(program).expect("a program serializes");
        write_atomically(&dir.join("program.json"), text.as_bytes())
    }

    /// Writes the plan of `id`.
    pub fn save_plan(&self, id: &str, plan: &Plan) -> Result<(), StateError> {
        write_atomically(&self.plan_path(id), format::write(plan).as_bytes())
    }

    /// Writes the starts of `id`, keeping the newest [`KEPT_STARTS`].
    pub fn save_starts(&self, id: &str, starts: &[StartRecord]) -> Result<(), StateError> {
        let kept = &starts[starts.len().saturating_sub(KEPT_STARTS)..];
        let record = Starts {
            format: STATE_FORMAT,
            starts: kept.to_vec(),
        };
        let text = serde_json::to_string(&record).expect("starts serialize");
        write_atomically(&self.program_dir(id).join("starts.json"), text.as_bytes())
    }

    /// Removes program `id` and everything kept of it.
    pub fn forget(&self, id: &str) -> Result<(), StateError> {
        let dir = self.program_dir(id);
        fs::remove_dir_all(&dir).map_err(io_error(&dir))
    }
}

/// The id a program's directory has: the executable's file name (letters,
/// digits, '.', '-', '_' kept, others '_') and a hash of its whole path,
/// so two programs of one name in two places stay apart.
pub fn program_id(exe: &Path) -> String {
    let name: String = exe
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') {
                c
            } else {
                '_'
            }
        })
        .take(40)
        .collect();
    let name = name.trim_start_matches('.');
    format!(
        "{}-{:08x}",
        if name.is_empty() { "program" } else { name },
        fnv1a(exe.as_os_str().as_encoded_bytes()) as u32
    )
}

/// The id of the program of `exe`'s starts of argument class `class`: the
/// executable's own id for the class without options (or none), else with
/// a hash of the class after it.
pub fn program_id_for(exe: &Path, class: Option<&str>) -> String {
    match class {
        None | Some("") => program_id(exe),
        Some(class) => format!("{}-{:08x}", program_id(exe), fnv1a(class.as_bytes()) as u32),
    }
}

/// Whether `name` can be a program's id: what [`program_id`] makes.
fn is_valid_id(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with('.')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
}

/// 64-bit FNV-1a: a stable hash (std's is seeded per process).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &b| {
        (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Writes `bytes` to a temporary file beside `path` (mode 0600), syncs it,
/// renames it over `path` and syncs the directory: readers see the old file
/// or the new one. The temporary file is removed when anything fails.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), StateError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let temporary = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let result = (|| {
        let mut file = fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&temporary)?;
        file.set_permissions(fs::Permissions::from_mode(0o600))?;
        file.write_all(bytes)?;
        file.sync_all()?;
        fs::rename(&temporary, path)?;
        File::open(dir)?.sync_all()
    })();
    if result.is_err() {
        let _ = fs::remove_file(&temporary);
    }
    result.map_err(io_error(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_keep_the_name_and_tell_two_paths_apart() {
        let a = program_id(Path::new("/usr/bin/firefox-esr"));
        let b = program_id(Path::new("/opt/firefox-esr"));
        assert!(a.starts_with("firefox-esr-"), "{a}");
        assert_ne!(a, b);
        assert_eq!(a, program_id(Path::new("/usr/bin/firefox-esr")));
        assert!(is_valid_id(&a));
        let odd = program_id(Path::new("/x/..a b$"));
        assert!(is_valid_id(&odd), "{odd}");
        assert!(!is_valid_id(".hidden"));
        assert!(!is_valid_id("a/b"));
    }
}
