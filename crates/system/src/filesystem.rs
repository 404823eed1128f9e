//! Which filesystem a file is on, by the magic number statfs(2) reports
//! (linux/magic.h): what decides whether a lookup is worth replaying and
//! whether ext4's extent-tree call applies.

use std::io;
use std::os::fd::AsFd;
use std::path::Path;

/// The magic number of the filesystem `path` is on.
pub fn magic_of_path(path: &Path) -> io::Result<u64> {
    let fs = rustix::fs::statfs(path)?;
    // f_type's width and signedness differ between architectures; the
    // magic numbers are 32-bit.
    Ok(fs.f_type as u64 & 0xffff_ffff)
}

/// The magic number of the filesystem an open file is on.
pub fn magic_of_file(file: impl AsFd) -> io::Result<u64> {
    let fs = rustix::fs::fstatfs(file)?;
    Ok(fs.f_type as u64 & 0xffff_ffff)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_is_procfs() {
        // linux/magic.h PROC_SUPER_MAGIC.
        assert_eq!(magic_of_path(Path::new("/proc/self")).unwrap(), 0x9fa0);
        let file = std::fs::File::open("/proc/self/stat").unwrap();
        assert_eq!(magic_of_file(&file).unwrap(), 0x9fa0);
        assert!(magic_of_path(Path::new("/no/such/path")).is_err());
    }
}
