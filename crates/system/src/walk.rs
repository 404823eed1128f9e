//! Which files a path names for page-cache work: a file itself, or every
//! regular file under a directory, in name order. (Moves with cache.rs to
//! the page-cache room.)

use std::path::{Path, PathBuf};

/// A path that could not be walked, with a message naming it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WalkError {
    pub path: PathBuf,
    pub message: String,
}

/// Appends the regular files under `path` (itself, if it is not a
/// directory) to `files`. Symbolic links to files are followed; links to
/// directories are not, so a walk cannot loop. Sockets, fifos and devices
/// are skipped: they have no page cache to speak of.
pub fn files_under(path: &Path, files: &mut Vec<PathBuf>, errors: &mut Vec<WalkError>) {
    let meta = match std::fs::metadata(path) {
        Ok(meta) => meta,
        Err(e) => {
            errors.push(WalkError {
                path: path.to_path_buf(),
                message: format!("{}: {e}", path.display()),
            });
            return;
        }
    };
    if !meta.is_dir() {
        files.push(path.to_path_buf());
        return;
    }
    let entries = match std::fs::read_dir(path) {
        Ok(entries) => entries,
        Err(e) => {
            errors.push(WalkError {
                path: path.to_path_buf(),
                message: format!("cannot list {}: {e}", path.display()),
            });
            return;
        }
    };
    let mut children: Vec<_> = entries.flatten().collect();
    children.sort_by_key(|e| e.file_name());
    for entry in children {
        let child = entry.path();
        match entry.file_type() {
            Ok(t) if t.is_dir() => files_under(&child, files, errors),
            Ok(t) if t.is_file() => files.push(child),
            Ok(t) if t.is_symlink() && child.metadata().is_ok_and(|m| m.is_file()) => {
                files.push(child)
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_names_its_regular_files_in_name_order_and_links_to_files() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir(root.join("sub")).unwrap();
        std::fs::write(root.join("b"), b"b").unwrap();
        std::fs::write(root.join("sub/a"), b"a").unwrap();
        std::os::unix::fs::symlink(root.join("b"), root.join("c-link")).unwrap();
        // A link back to the directory would loop if it were followed.
        std::os::unix::fs::symlink(root, root.join("sub/loop")).unwrap();
        let (mut files, mut errors) = (Vec::new(), Vec::new());
        files_under(root, &mut files, &mut errors);
        assert_eq!(
            files,
            vec![root.join("b"), root.join("c-link"), root.join("sub/a")]
        );
        assert!(errors.is_empty());

        files_under(&root.join("missing"), &mut files, &mut errors);
        assert_eq!(files.len(), 3);
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].path, root.join("missing"));
        assert!(
            errors[0]
                .message
                .starts_with(&format!("{}: ", root.join("missing").display()))
        );
    }
}
