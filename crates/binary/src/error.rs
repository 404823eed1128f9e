//! Errors of the binary room. Every error names the file it is about, so the
//! CLI can print one line that tells the user which input is wrong and why.

use crate::model::Format;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{}: {}", .path.display(), describe_io(.source))]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: is a directory, not a binary file", .path.display())]
    Directory { path: PathBuf },
    #[error("{}: is a {what}, not a regular file", .path.display())]
    NotRegular { path: PathBuf, what: &'static str },
    #[error("{}: empty file", .path.display())]
    Empty { path: PathBuf },
    #[error("{}: not an ELF, PE or Mach-O file (starts with {magic})", .path.display())]
    UnknownFormat { path: PathBuf, magic: String },
    #[error("{}: malformed {format} file: {detail}", .path.display())]
    Malformed {
        path: PathBuf,
        format: &'static str,
        detail: String,
    },
    #[error("{}: {format} files of this kind are not supported: {detail}", .path.display())]
    Unsupported {
        path: PathBuf,
        format: &'static str,
        detail: String,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// `path` is a file of `format` whose contents are wrong in the way
    /// `detail` says.
    pub(crate) fn malformed(path: &Path, format: Format, detail: impl Into<String>) -> Error {
        Error::Malformed {
            path: path.to_path_buf(),
            format: format.name(),
            detail: detail.into(),
        }
    }
}

fn describe_io(err: &std::io::Error) -> String {
    match err.kind() {
        std::io::ErrorKind::NotFound => "no such file".to_string(),
        std::io::ErrorKind::PermissionDenied => {
            "permission denied (run as a user who may read it, or fix its mode)".to_string()
        }
        _ => err.to_string(),
    }
}
