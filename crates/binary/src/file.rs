//! Opening an input binary: refuse what is not a regular file before
//! touching it (a FIFO or device would hang or never end), then map it
//! read-only. The file is never written.

use crate::error::{Error, Result};
use memmap2::Mmap;
use std::fs::File;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

/// A read-only view of a whole input file.
pub struct MappedFile {
    path: PathBuf,
    map: Mmap,
}

impl MappedFile {
    pub fn open(path: &Path) -> Result<MappedFile> {
        let io = |source| Error::Io {
            path: path.to_path_buf(),
            source,
        };
        let meta = std::fs::metadata(path).map_err(io)?;
        let kind = meta.file_type();
        if kind.is_dir() {
            return Err(Error::Directory {
                path: path.to_path_buf(),
            });
        }
        if !kind.is_file() {
            let what = if kind.is_fifo() {
                "named pipe"
            } else if kind.is_socket() {
                "socket"
            } else if kind.is_char_device() {
                "character device"
            } else if kind.is_block_device() {
                "block device"
            } else {
                "special file"
            };
            return Err(Error::NotRegular {
                path: path.to_path_buf(),
                what,
            });
        }
        if meta.len() == 0 {
            return Err(Error::Empty {
                path: path.to_path_buf(),
            });
        }
        let file = File::open(path).map_err(io)?;
        // SAFETY: the map is read-only and private to this process. Another
        // process truncating the file while it is mapped would raise SIGBUS;
        // that is the accepted cost of not copying 300 MB inputs.
        let map = unsafe { Mmap::map(&file) }.map_err(io)?;
        Ok(MappedFile {
            path: path.to_path_buf(),
            map,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn bytes(&self) -> &[u8] {
        &self.map
    }
}
