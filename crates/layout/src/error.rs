//! Errors of the layout room, each saying what was wrong with which input
//! and, where there is one, what to do instead.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("no traces to order: give at least one startup trace")]
    NoTraces,
    #[error("trace {trace}, symbol {index}: the name is empty")]
    EmptyName { trace: usize, index: usize },
    #[error(
        "the call-count strategy needs call counts, and none of the {traces} traces has any \
         (page-level traces cannot count calls): use --strategy first-call or balanced, or \
         trace with function-level instrumentation"
    )]
    NoCallCounts { traces: usize },
    #[error("unknown {what} `{given}`; expected one of: {expected}")]
    UnknownName {
        what: &'static str,
        given: String,
        expected: String,
    },
    #[error(
        "the GNU ld (bfd) emitter needs to know the linker: probe it with BfdTarget::probe \
         (runs `ld --version` and `ld --verbose`) or give its default script"
    )]
    BfdTargetMissing,
    #[error("running `{command}`: {detail}")]
    Tool { command: String, detail: String },
    #[error("GNU ld's default linker script: {detail}")]
    Script { detail: String },
    #[error("{}: {detail}", .path.display())]
    Object { path: PathBuf, detail: String },
    /// Reading the traces out of a profile (`traced`).
    #[error(transparent)]
    Profile(#[from] coldstart_profile::Error),
    #[error("reading the symbols of {}", .path.display())]
    Symbols {
        path: PathBuf,
        #[source]
        source: coldstart_binary::Error,
    },
    #[error(transparent)]
    Binary(#[from] coldstart_binary::Error),
    #[error("{} names no file", .path.display())]
    NoFileName { path: PathBuf },
    #[error("{pattern:?} is not a valid glob")]
    Glob {
        pattern: String,
        #[source]
        source: globset::Error,
    },
    #[error("{} holds no complete run", .profile.display())]
    NoCompleteRun { profile: PathBuf },
    #[error(
        "the runs {runs:?} of {} used no symbol of {}: was the binary traced (check \
         `coldstart report --file`), and is --module right?",
        .profile.display(),
        .binary.display()
    )]
    NothingTraced {
        runs: Vec<i64>,
        profile: PathBuf,
        binary: PathBuf,
    },
    #[error("{}: {source}", .path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The one of `all` whose `name` is `given`, for the names of command-line
/// choices (strategies, linkers); the error lists the valid ones.
pub(crate) fn parse_name<T: Copy>(
    given: &str,
    all: &[T],
    name: fn(T) -> &'static str,
    what: &'static str,
) -> Result<T> {
    all.iter()
        .copied()
        .find(|&choice| name(choice) == given)
        .ok_or_else(|| Error::UnknownName {
            what,
            given: given.to_string(),
            expected: all.iter().map(|&c| name(c)).collect::<Vec<_>>().join(", "),
        })
}
