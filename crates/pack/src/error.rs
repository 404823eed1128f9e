//! Why a file was not packed. Every refusal names the file and says, in one
//! line, what is wrong or missing; `code` is the stable name JSON carries.

use std::path::{Path, PathBuf};

/// What stops pack from rewriting a file correctly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// Could not be read (missing, permissions, a directory).
    Unreadable(String),
    NotElf,
    Malformed(String),
    /// A machine or ELF class whose RELR rules pack does not test yet.
    Machine(String),
    /// No dynamic section: nothing at run time reads relocations.
    Static,
    /// Position-dependent (ET_EXEC) or static PIE: the loader does not apply its relative relocations, or it relocates itself.
    NotLoaderRelocated(String),
    AlreadyRelr,
    TextRel,
    /// No relative relocation RELR can express.
    NothingToPack,
    /// What grows does not fit in the space packing frees.
    NoRoom {
        needed: u64,
        free: u64,
    },
    /// Valid ELF that pack does not know how to rewrite safely.
    Unsupported(String),
}

impl Refusal {
    /// Stable name for JSON and scripts.
    pub fn code(&self) -> &'static str {
        match self {
            Refusal::Unreadable(_) => "unreadable",
            Refusal::NotElf => "not-elf",
            Refusal::Malformed(_) => "malformed",
            Refusal::Machine(_) => "machine-not-tested",
            Refusal::Static => "static",
            Refusal::NotLoaderRelocated(_) => "not-loader-relocated",
            Refusal::AlreadyRelr => "already-relr",
            Refusal::TextRel => "textrel",
            Refusal::NothingToPack => "nothing-to-pack",
            Refusal::NoRoom { .. } => "no-room",
            Refusal::Unsupported(_) => "unsupported",
        }
    }

    /// Whether the file is simply not a candidate (nothing wrong with it),
    /// as opposed to broken or not yet handled.
    pub fn is_not_a_candidate(&self) -> bool {
        matches!(
            self,
            Refusal::NotElf
                | Refusal::Static
                | Refusal::NotLoaderRelocated(_)
                | Refusal::AlreadyRelr
                | Refusal::NothingToPack
        )
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::Unreadable(detail) => write!(f, "{detail}"),
            Refusal::NotElf => write!(f, "not an ELF file"),
            Refusal::Malformed(detail) => write!(f, "malformed ELF file: {detail}"),
            Refusal::Machine(machine) => write!(
                f,
                "{machine}: pack only rewrites x86-64 files so far (its RELR rules are the only ones tested)"
            ),
            Refusal::Static => write!(
                f,
                "static executable (no dynamic section): no loader applies its relocations"
            ),
            Refusal::NotLoaderRelocated(why) => write!(f, "{why}"),
            Refusal::AlreadyRelr => write!(f, "already packed: it has a DT_RELR table"),
            Refusal::TextRel => write!(
                f,
                "text relocations (DT_TEXTREL): relocated words lie in read-only code; rebuild with -fPIC"
            ),
            Refusal::NothingToPack => write!(f, "no relative relocation to pack"),
            Refusal::NoRoom { needed, free } => write!(
                f,
                "no room: the packed tables, grown version need and headers take {needed} bytes \
                 but packing frees only {free}"
            ),
            Refusal::Unsupported(detail) => write!(f, "not supported yet: {detail}"),
        }
    }
}

/// A refusal about one file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {reason}", .path.display())]
pub struct Refused {
    pub path: PathBuf,
    pub reason: Refusal,
}

impl Refused {
    pub fn new(path: &Path, reason: Refusal) -> Refused {
        Refused {
            path: path.to_path_buf(),
            reason,
        }
    }
}

/// Writing the output failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Refused(#[from] Refused),
    #[error("{}: {what}: {source}", .path.display())]
    Io {
        path: PathBuf,
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: {detail}", .path.display())]
    Output { path: PathBuf, detail: String },
}
