//! Oracles the tests check coldstart against. They use the kernel directly
//! (mincore, fadvise), never coldstart's own code, so a bug there cannot
//! make a test pass.

use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

pub mod filesystems;
pub mod held_exec;

/// Indices of the pages of `path` resident in the page cache, by mincore(2)
/// on a fresh read-only mapping that is never read. Pages are the system's
/// page size.
///
/// mincore counts a page only once its read has completed, so a page that
/// readahead(2), WILLNEED or a readahead window has put in the cache may be
/// missing for a moment after the program that asked for it exits. This
/// waits (up to five seconds) until mincore sees as many pages as
/// cachestat(2) counts in the cache, reads in flight included, and returns
/// what mincore then sees.
pub fn resident_pages(path: &Path) -> Vec<u64> {
    let file = std::fs::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let len = file.metadata().unwrap().len() as usize;
    if len == 0 {
        return Vec::new();
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let resident = mincore_pages(&file, len, path);
        // Offset 0, length 0: the whole file.
        match cached_pages(&file, 0, 0) {
            Some(cached) if cached > resident.len() as u64 => {}
            _ => return resident,
        }
        if std::time::Instant::now() >= deadline {
            return resident;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

fn mincore_pages(file: &std::fs::File, len: usize, path: &Path) -> Vec<u64> {
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
    // SAFETY: read-only shared map of a file we opened, only given to
    // mincore and unmapped below.
    let map = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        )
    };
    assert_ne!(map, libc::MAP_FAILED, "mmap {}", path.display());
    let mut vec = vec![0u8; len.div_ceil(page)];
    // SAFETY: one byte per page of the mapping.
    assert_eq!(unsafe { libc::mincore(map, len, vec.as_mut_ptr()) }, 0);
    // SAFETY: our own mapping.
    unsafe { libc::munmap(map, len) };
    (0..vec.len() as u64)
        .filter(|&i| vec[i as usize] & 1 == 1)
        .collect()
}

/// Pages of `file` in the page cache from byte `offset` for `len` bytes (0:
/// to the end), by cachestat(2) (Linux 6.5). It counts a page from the
/// moment its read starts, and pages read as buffers (a block device's
/// metadata), which mincore does not; None where the kernel has no
/// cachestat. Any open file, a block device's too.
pub fn cached_pages(file: &std::fs::File, offset: u64, len: u64) -> Option<u64> {
    #[repr(C)]
    struct Range {
        off: u64,
        len: u64,
    }
    #[repr(C)]
    #[derive(Default)]
    struct Stat {
        nr_cache: u64,
        nr_dirty: u64,
        nr_writeback: u64,
        nr_evicted: u64,
        nr_recently_evicted: u64,
    }
    // The same number on x86_64 and aarch64 (the syscall table new calls
    // share since Linux 5.1).
    const SYS_CACHESTAT: libc::c_long = 451;
    let range = Range { off: offset, len };
    let mut stat = Stat::default();
    // SAFETY: cachestat reads `range` and writes one struct cachestat into
    // `stat`; both live across the call.
    let rc = unsafe {
        libc::syscall(
            SYS_CACHESTAT,
            file.as_raw_fd(),
            &range as *const Range,
            &mut stat as *mut Stat,
            0u32,
        )
    };
    (rc == 0).then_some(stat.nr_cache)
}

/// Writes `pages` pages of `page_size` bytes to `path` (byte `i % 241` of
/// each page), writes them back and drops them from the page cache, so
/// none is resident. The file must be on a disk filesystem: tmpfs pages
/// cannot be dropped.
pub fn cold_file(path: &Path, pages: u64, page_size: u64) {
    let mut file =
        std::fs::File::create(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let block: Vec<u8> = (0..page_size).map(|i| (i % 241) as u8).collect();
    for _ in 0..pages {
        file.write_all(&block).unwrap();
    }
    file.sync_all().unwrap();
    // SAFETY: plain fadvise on our own descriptor.
    let rc = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    assert_eq!(rc, 0, "fadvise DONTNEED {}", path.display());
}

/// Reads pages `pages` of `path` (of `page_size` bytes) into the page
/// cache and no others: the descriptor is advised POSIX_FADV_RANDOM, so
/// the kernel reads no window around them.
pub fn read_pages(path: &Path, pages: std::ops::Range<u64>, page_size: u64) {
    use std::os::unix::fs::FileExt;
    let file = std::fs::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    // SAFETY: plain fadvise on our own descriptor.
    let rc = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_RANDOM) };
    assert_eq!(rc, 0, "fadvise RANDOM {}", path.display());
    let mut page = vec![0u8; page_size as usize];
    for index in pages {
        file.read_exact_at(&mut page, index * page_size).unwrap();
    }
}

/// Says why a check could not run: `SKIPPED: reason` on stderr, or a panic
/// when COLDSTART_REQUIRE_ROOT=1 (CI, where every check must run).
pub fn skip(reason: &str) {
    if std::env::var_os("COLDSTART_REQUIRE_ROOT").is_some_and(|v| v == "1") {
        panic!("required check could not run (COLDSTART_REQUIRE_ROOT=1): {reason}");
    }
    eprintln!("SKIPPED: {reason}");
}

/// Root and a tracefs with the filemap events, or false after [`skip`].
pub fn can_trace() -> bool {
    // SAFETY: geteuid never fails.
    if unsafe { libc::geteuid() } != 0 {
        skip("coldstart trace needs root");
        return false;
    }
    let events = [
        "/sys/kernel/tracing/events/filemap",
        "/sys/kernel/debug/tracing/events/filemap",
    ];
    if !events.iter().any(|p| Path::new(p).exists()) {
        // coldstart mounts tracefs itself; only a kernel without it skips.
        let mounted = std::process::Command::new("mount")
            .args(["-t", "tracefs", "nodev", "/sys/kernel/tracing"])
            .status()
            .is_ok_and(|s| s.success());
        if !mounted || !Path::new(events[0]).exists() {
            skip("this kernel has no tracefs filemap events");
            return false;
        }
    }
    true
}

/// A new temporary directory on a disk filesystem (/var/tmp, not tmpfs, so
/// its files' pages can be evicted and read back from a device) that every
/// user can read: started through sudo, `coldstart trace` runs the program
/// as the invoking user, who must reach what the test builds there.
pub fn world_readable_temp_dir(prefix: &str) -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in("/var/tmp")
        .expect("a temporary directory in /var/tmp");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))
        .expect("chmod 755 the temporary directory");
    dir
}

/// Copies an executable that the test then runs, through `cp`, so that no
/// descriptor open for writing on it ever lives in the test process: a
/// sibling test thread that forks while `std::fs::copy` holds one hands it
/// to its child until that child execs, and exec of the copy meanwhile
/// fails with ETXTBSY ("Text file busy").
pub fn copy_executable(from: &Path, to: &Path) {
    run_ok(std::process::Command::new("cp").arg("--").arg(from).arg(to));
}

/// Compiles the one-file C program `source` into `dir/name` (`cc -O1`);
/// panics with the compiler's output when it fails.
pub fn build_c(dir: &Path, name: &str, source: &str) -> std::path::PathBuf {
    let file = dir.join(format!("{name}.c"));
    std::fs::write(&file, source).expect("the C source is written");
    let binary = dir.join(name);
    run_ok(
        std::process::Command::new("cc")
            .arg("-O1")
            .arg("-o")
            .arg(&binary)
            .arg(&file),
    );
    binary
}

/// Runs a command to the end and panics, with its output, unless it
/// succeeded.
pub fn run_ok(command: &mut std::process::Command) -> std::process::Output {
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("{command:?} could not start: {e}"));
    assert!(
        output.status.success(),
        "{command:?} failed: {}\nstdout: {}\nstderr: {}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// A defined symbol as binutils sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NmSymbol {
    pub name: String,
    /// nm's type letter (`T`, `t`, `D`, ...).
    pub kind: char,
    /// Its file offset: nm's address moved by the LOAD segment that holds
    /// it (from `readelf -lW`).
    pub offset: u64,
    /// nm's size, when it prints one.
    pub size: Option<u64>,
}

/// Every defined symbol of `binary` that a LOAD segment holds, from `nm
/// --defined-only -S` and `readelf -lW`, in nm's order; local symbols that
/// share a name are all kept. Panics when either tool fails.
pub fn nm_symbols(binary: &Path) -> Vec<NmSymbol> {
    let hex = |text: &str| u64::from_str_radix(text.trim_start_matches("0x"), 16).unwrap();
    let readelf = run_ok(std::process::Command::new("readelf").arg("-lW").arg(binary));
    // (offset, vaddr, filesz) of each LOAD segment.
    let loads: Vec<(u64, u64, u64)> = String::from_utf8_lossy(&readelf.stdout)
        .lines()
        .filter(|l| l.trim_start().starts_with("LOAD"))
        .map(|l| {
            let f: Vec<u64> = l.split_whitespace().skip(1).take(4).map(hex).collect();
            (f[0], f[1], f[3])
        })
        .collect();
    let nm = run_ok(
        std::process::Command::new("nm")
            .args(["--defined-only", "-S"])
            .arg(binary),
    );
    let mut symbols = Vec::new();
    for line in String::from_utf8_lossy(&nm.stdout).lines() {
        let (address, size, kind, name) = match line.split_whitespace().collect::<Vec<_>>()[..] {
            [address, size, kind, name] => (address, Some(hex(size)), kind, name),
            [address, kind, name] => (address, None, kind, name),
            _ => continue,
        };
        let address = hex(address);
        let Some((offset, vaddr, _)) = loads
            .iter()
            .find(|(_, vaddr, filesz)| (*vaddr..vaddr + filesz).contains(&address))
        else {
            continue;
        };
        symbols.push(NmSymbol {
            name: name.to_string(),
            kind: kind.chars().next().unwrap_or('?'),
            offset: address - vaddr + offset,
            size,
        });
    }
    symbols
}

/// An empty ext4 image of `bytes` at `dir/fs.img` (4 KiB blocks, `options`
/// for mkfs.ext4) and an empty directory `dir/mnt` to mount it on; None
/// after a [`skip`] saying why not (e2fsprogs missing, say).
pub fn ext4_image(
    dir: &Path,
    bytes: u64,
    options: &[&str],
) -> Option<(std::path::PathBuf, std::path::PathBuf)> {
    let image = dir.join("fs.img");
    if let Err(why) = make_ext4_image(&image, bytes, options) {
        skip(&why);
        return None;
    }
    let point = dir.join("mnt");
    std::fs::create_dir(&point).unwrap_or_else(|e| panic!("{}: {e}", point.display()));
    Some((image, point))
}

/// Makes an empty ext4 image of `bytes` at `image` with 4 KiB blocks and
/// `options` for mkfs.ext4; Err says why not (e2fsprogs missing, say).
fn make_ext4_image(image: &Path, bytes: u64, options: &[&str]) -> Result<(), String> {
    std::fs::File::create(image)
        .and_then(|f| f.set_len(bytes))
        .map_err(|e| format!("{}: {e}", image.display()))?;
    let made = std::process::Command::new("mkfs.ext4")
        .args(["-q", "-F", "-b", "4096"])
        .args(options)
        .arg(image)
        .output();
    match made {
        Ok(out) if out.status.success() => Ok(()),
        _ => Err("mkfs.ext4 (e2fsprogs) could not make a test filesystem".to_string()),
    }
}

/// A filesystem image mounted through a loop device, unmounted when
/// dropped (the loop device goes with it: `mount -o loop` sets it to clear
/// itself). A fresh mount has none of the image's metadata cached beyond
/// what mounting reads.
pub struct LoopMount {
    point: std::path::PathBuf,
}

impl LoopMount {
    /// Mounts `image` on `point` with `-o loop,OPTIONS`; None when this
    /// machine cannot (no loop devices, not root).
    pub fn new(image: &Path, point: &Path, options: &str) -> Option<LoopMount> {
        let status = std::process::Command::new("mount")
            .args(["-o", &format!("loop,{options}")])
            .arg(image)
            .arg(point)
            .status();
        matches!(status, Ok(s) if s.success()).then(|| LoopMount {
            point: point.to_path_buf(),
        })
    }

    /// The block device behind the mount.
    pub fn device(&self) -> std::path::PathBuf {
        let out = run_ok(
            std::process::Command::new("findmnt")
                .args(["-n", "-o", "SOURCE", "--target"])
                .arg(&self.point),
        );
        std::path::PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
    }
}

impl Drop for LoopMount {
    fn drop(&mut self) {
        unmount(&self.point);
    }
}

/// Unmounts what is mounted on `point`; when it is busy (a test failed
/// with a program still holding a file there), detaches it lazily, so
/// that nothing stays mounted and the directory under it can be removed.
fn unmount(point: &Path) {
    let unmounted = std::process::Command::new("umount")
        .arg(point)
        .status()
        .is_ok_and(|s| s.success());
    if !unmounted {
        let _ = std::process::Command::new("umount")
            .arg("--lazy")
            .arg(point)
            .status();
    }
}
