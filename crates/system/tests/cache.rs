//! Page cache control against the real page cache of a real disk, checked
//! with oracles outside the code under test: util-linux `fincore` and a
//! mincore written here.
//!
//! The tests share one page cache, and `drop_all` empties it for everyone,
//! so each test holds `CACHE` while it runs.

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard};

use coldstart_system::cache::{
    self, CacheError, Operation, ResidencyMethod, drop_all, evict, mapping_processes, residency,
    resident_pages,
};

static CACHE: Mutex<()> = Mutex::new(());

fn lock() -> MutexGuard<'static, ()> {
    // A failed test poisons the lock; the cache is still usable.
    CACHE
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

const SIZE: u64 = 8 << 20;

fn page() -> u64 {
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    assert!(size > 0);
    size as u64
}

/// /tmp is ext4 on a real disk here, so eviction really evicts (tmpfs
/// pages could not be dropped at all).
fn tempdir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("coldstart-cache-")
        .tempdir_in("/tmp")
        .expect("create tempdir in /tmp")
}

/// A file of `size` non-zero bytes, written back so no page is dirty.
fn data_file(dir: &Path, name: &str, size: u64) -> PathBuf {
    let path = dir.join(name);
    let mut file = File::create(&path).expect("create data file");
    let chunk: Vec<u8> = (0..1 << 16).map(|i| (i % 251) as u8 + 1).collect();
    let mut left = size;
    while left > 0 {
        let n = left.min(chunk.len() as u64) as usize;
        file.write_all(&chunk[..n]).expect("write data file");
        left -= n as u64;
    }
    file.sync_all().expect("fsync data file");
    path
}

fn read_all(path: &Path) {
    let mut bytes = Vec::new();
    File::open(path)
        .and_then(|mut f| f.read_to_end(&mut bytes))
        .expect("read file");
}

/// Evict without the code under test.
fn dontneed(path: &Path) {
    let file = File::open(path).expect("open for fadvise");
    let rc = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    assert_eq!(rc, 0, "posix_fadvise DONTNEED");
}

/// Our own oracle: one flag per page from mmap + mincore.
fn oracle_pages(path: &Path) -> Vec<bool> {
    let file = File::open(path).expect("open for mincore");
    let size = file.metadata().expect("fstat").len() as usize;
    if size == 0 {
        return Vec::new();
    }
    let addr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            size,
            libc::PROT_READ,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        )
    };
    assert_ne!(addr, libc::MAP_FAILED, "mmap for mincore");
    let mut vec = vec![0u8; size.div_ceil(page() as usize)];
    let rc = unsafe { libc::mincore(addr, size, vec.as_mut_ptr()) };
    unsafe { libc::munmap(addr, size) };
    assert_eq!(rc, 0, "mincore");
    vec.iter().map(|b| b & 1 != 0).collect()
}

fn oracle_resident(path: &Path) -> u64 {
    oracle_pages(path).iter().filter(|&&r| r).count() as u64
}

/// util-linux fincore: (resident bytes, resident pages), or None when it is
/// not installed.
fn fincore(path: &Path) -> Option<(u64, u64)> {
    let output = match Command::new("fincore")
        .args(["--bytes", "--noheadings", "--raw", "--output", "RES,PAGES"])
        .arg(path)
        .output()
    {
        Ok(output) => output,
        Err(e) => {
            eprintln!("SKIPPED: fincore oracle: {e}");
            return None;
        }
    };
    assert!(output.status.success(), "fincore failed: {output:?}");
    let text = String::from_utf8(output.stdout).expect("fincore output is UTF-8");
    let fields: Vec<u64> = text
        .split_whitespace()
        .map(|f| f.parse().expect("fincore prints numbers"))
        .collect();
    assert_eq!(fields.len(), 2, "fincore output {text:?}");
    Some((fields[0], fields[1]))
}

/// Check resident pages against both oracles.
fn assert_resident(path: &Path, expected: u64) {
    assert_eq!(oracle_resident(path), expected, "own mincore oracle");
    if let Some((bytes, pages)) = fincore(path) {
        assert_eq!(pages, expected, "fincore pages");
        assert_eq!(bytes, expected * page(), "fincore bytes");
    }
}

fn is_root() -> bool {
    unsafe { libc::geteuid() == 0 }
}

/// Tests that need root skip without it, unless COLDSTART_REQUIRE_ROOT=1.
fn require_root(test: &str) -> bool {
    if is_root() {
        return true;
    }
    coldstart_testkit::skip(&format!("{test} needs root"));
    false
}

#[test]
fn residency_of_read_file_is_complete() {
    let _guard = lock();
    let dir = tempdir();
    let path = data_file(dir.path(), "data", SIZE);
    let pages = SIZE / page();
    dontneed(&path);
    assert_resident(&path, 0);
    read_all(&path);
    assert_resident(&path, pages);

    let r = residency(&path).expect("residency");
    eprintln!("residency method: {:?}", r.method);
    assert_eq!(r.pages, pages);
    assert_eq!(r.resident, pages);
    match r.method {
        ResidencyMethod::Cachestat => assert_eq!(r.dirty, Some(0), "file was fsynced"),
        ResidencyMethod::Mincore => assert_eq!(r.dirty, None),
    }

    let file = File::open(&path).expect("open");
    assert_eq!(cache::residency_fd(&file, &path).expect("residency_fd"), r);

    let rp = resident_pages(&path).expect("resident_pages");
    assert_eq!(rp.page_size, page());
    assert_eq!(rp.pages, pages);
    assert_eq!(rp.resident, pages);
    assert_eq!(rp.runs, vec![0..pages]);
}

#[test]
fn cachestat_reports_dirty_pages() {
    let _guard = lock();
    let dir = tempdir();
    let path = dir.path().join("dirty");
    let mut file = File::create(&path).expect("create");
    file.write_all(&vec![7u8; 16 * page() as usize])
        .expect("write");
    let r = residency(&path).expect("residency");
    if r.method == ResidencyMethod::Cachestat {
        // Writeback may already have started, so only an upper bound holds.
        assert!(r.dirty.is_some_and(|d| d <= 16), "{r:?}");
    }
    file.sync_all().expect("fsync");
    let r = residency(&path).expect("residency");
    assert_eq!(r.resident, 16);
    if r.method == ResidencyMethod::Cachestat {
        assert_eq!(r.dirty, Some(0));
    }
}

#[test]
fn evict_empties_the_cache() {
    let _guard = lock();
    let dir = tempdir();
    let path = data_file(dir.path(), "data", SIZE);
    let pages = SIZE / page();
    read_all(&path);
    assert_resident(&path, pages);

    let e = evict(&path).expect("evict");
    assert_eq!(e.path, path);
    assert_eq!(e.size, SIZE);
    assert_eq!(e.pages, pages);
    assert_eq!(e.resident_before, pages);
    assert_eq!(e.resident_after, 0);
    assert!(e.mapped_by.is_empty());
    assert_resident(&path, 0);
    assert_eq!(residency(&path).expect("residency").resident, 0);
    assert!(
        resident_pages(&path)
            .expect("resident_pages")
            .runs
            .is_empty()
    );
}

#[test]
fn evict_writes_back_dirty_pages_first() {
    let _guard = lock();
    let dir = tempdir();
    let path = dir.path().join("dirty");
    let mut file = File::create(&path).expect("create");
    file.write_all(&vec![9u8; 64 * page() as usize])
        .expect("write");
    let e = evict(&path).expect("evict");
    assert_eq!(e.pages, 64);
    assert_eq!(e.resident_after, 0, "{e:?}");
    assert_resident(&path, 0);
    drop(file);
    // The data reached the disk: read it back from there.
    let mut bytes = Vec::new();
    File::open(&path)
        .and_then(|mut f| f.read_to_end(&mut bytes))
        .expect("read back");
    assert!(bytes.len() == 64 * page() as usize && bytes.iter().all(|&b| b == 9));
}

#[test]
fn resident_pages_after_random_pread() {
    let _guard = lock();
    let dir = tempdir();
    let path = data_file(dir.path(), "data", SIZE);
    let ps = page();
    dontneed(&path);
    assert_resident(&path, 0);

    // FADV_RANDOM turns readahead off for this open file, so pread brings in
    // the pages it reads; the assertions still allow a superset.
    let file = File::open(&path).expect("open");
    let rc = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_RANDOM) };
    assert_eq!(rc, 0);
    let mut buf = vec![0u8; 2 * ps as usize];
    let n = unsafe {
        libc::pread(
            file.as_raw_fd(),
            buf.as_mut_ptr().cast(),
            buf.len(),
            (3 * ps) as libc::off_t,
        )
    };
    assert_eq!(n, buf.len() as isize);

    let rp = resident_pages(&path).expect("resident_pages");
    let oracle: Vec<u64> = oracle_pages(&path)
        .iter()
        .enumerate()
        .filter_map(|(i, &r)| r.then_some(i as u64))
        .collect();
    eprintln!("after pread of pages 3..5: resident runs {:?}", rp.runs);
    assert_eq!(
        rp.iter().collect::<Vec<_>>(),
        oracle,
        "page set vs own mincore"
    );
    assert!(rp.contains(3) && rp.contains(4), "{:?}", rp.runs);
    assert!(rp.resident < rp.pages, "readahead pulled in the whole file");
    assert_eq!(
        rp.resident,
        rp.runs.iter().map(|r| r.end - r.start).sum::<u64>()
    );
    if let Some((_, pages)) = fincore(&path) {
        assert_eq!(pages, rp.resident, "fincore");
    }
    assert_eq!(residency(&path).expect("residency").resident, rp.resident);
}

#[test]
fn resident_pages_after_touching_one_mapped_page() {
    let _guard = lock();
    let dir = tempdir();
    let path = data_file(dir.path(), "data", SIZE);
    let ps = page();
    dontneed(&path);
    assert_resident(&path, 0);

    let file = File::open(&path).expect("open");
    let len = SIZE as usize;
    let addr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        )
    };
    assert_ne!(addr, libc::MAP_FAILED);
    // Mapping alone faults nothing in.
    assert_eq!(resident_pages(&path).expect("resident_pages").resident, 0);
    assert_eq!(unsafe { libc::madvise(addr, len, libc::MADV_RANDOM) }, 0);
    let byte = unsafe { std::ptr::read_volatile(addr.cast::<u8>().add(100 * ps as usize)) };
    assert_eq!(byte, ((100 * ps) % (1 << 16) % 251) as u8 + 1);
    unsafe { libc::munmap(addr, len) };

    let rp = resident_pages(&path).expect("resident_pages");
    eprintln!("after touching page 100: resident runs {:?}", rp.runs);
    assert!(rp.contains(100), "{:?}", rp.runs);
    assert!(rp.resident < rp.pages, "readahead pulled in the whole file");
    let oracle = oracle_pages(&path);
    assert_eq!(
        rp.iter().collect::<Vec<_>>(),
        (0..oracle.len() as u64)
            .filter(|&i| oracle[i as usize])
            .collect::<Vec<_>>()
    );
}

#[test]
fn evict_names_this_process_when_it_maps_the_file() {
    let _guard = lock();
    let dir = tempdir();
    let path = data_file(dir.path(), "mapped", SIZE);
    let pages = SIZE / page();
    let file = File::open(&path).expect("open");
    let len = SIZE as usize;
    let addr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        )
    };
    assert_ne!(addr, libc::MAP_FAILED);
    // Fault every page into our page tables: mapped pages cannot be evicted.
    let mut sum = 0u64;
    for offset in (0..len).step_by(page() as usize) {
        sum += u64::from(unsafe { std::ptr::read_volatile(addr.cast::<u8>().add(offset)) });
    }
    assert!(sum > 0);

    let result = evict(&path);
    let own = mapping_processes(
        file.metadata().expect("fstat").dev(),
        file.metadata().expect("fstat").ino(),
    );
    unsafe { libc::munmap(addr, len) };
    let e = result.expect("evict");

    assert_eq!(e.resident_before, pages);
    assert_eq!(e.resident_after, pages, "mapped pages stayed");
    assert_resident(&path, pages);
    let comm = std::fs::read_to_string("/proc/self/comm").expect("own comm");
    let me = e
        .mapped_by
        .iter()
        .find(|p| p.pid == std::process::id())
        .unwrap_or_else(|| panic!("own pid missing from {:?}", e.mapped_by));
    assert_eq!(me.comm, comm.trim_end());
    assert_eq!(own, e.mapped_by);

    // Unmapped, the same pages go.
    let e = evict(&path).expect("evict after munmap");
    assert_eq!(e.resident_after, 0);
    assert!(e.mapped_by.is_empty());
    assert_resident(&path, 0);
}

/// Kills the helper process even when an assertion fails.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn evict_names_another_process_that_maps_the_file() {
    let _guard = lock();
    let python = Path::new("/usr/bin/python3");
    if !python.exists() {
        eprintln!("SKIPPED: {} not installed", python.display());
        return;
    }
    let dir = tempdir();
    let path = data_file(dir.path(), "mapped", 64 * page());
    let script = "import mmap, sys, time\n\
                  f = open(sys.argv[1], 'rb')\n\
                  m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)\n\
                  s = sum(m[i] for i in range(0, len(m), mmap.PAGESIZE))\n\
                  print('ready', s, flush=True)\n\
                  time.sleep(60)\n";
    let child = Command::new(python)
        .args(["-c", script])
        .arg(&path)
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn python3");
    let mut child = KillOnDrop(child);
    let mut line = String::new();
    BufReader::new(child.0.stdout.take().expect("child stdout"))
        .read_line(&mut line)
        .expect("read child");
    assert!(line.starts_with("ready"), "child said {line:?}");

    let e = evict(&path).expect("evict");
    assert_eq!(e.resident_after, 64, "{e:?}");
    let child_pid = child.0.id();
    let holder = e
        .mapped_by
        .iter()
        .find(|p| p.pid == child_pid)
        .unwrap_or_else(|| panic!("child {child_pid} missing from {:?}", e.mapped_by));
    eprintln!("mapped by {:?}", e.mapped_by);
    assert!(holder.comm.starts_with("python3"), "{holder:?}");
    assert!(!e.mapped_by.iter().any(|p| p.pid == std::process::id()));
    drop(child);

    let e = evict(&path).expect("evict after child exit");
    assert_eq!(e.resident_after, 0);
    assert_resident(&path, 0);
}

#[test]
fn unmapped_file_has_no_mapping_processes() {
    let _guard = lock();
    let dir = tempdir();
    let path = data_file(dir.path(), "data", page());
    let meta = std::fs::metadata(&path).expect("stat");
    assert!(mapping_processes(meta.dev(), meta.ino()).is_empty());
}

#[test]
fn mapping_processes_finds_shared_libraries() {
    let _guard = lock();
    // Every dynamically linked process maps libc; this one does for sure.
    let maps = std::fs::read_to_string("/proc/self/maps").expect("own maps");
    let Some(lib) = maps
        .lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .find(|p| p.contains("/libc.so") || p.contains("/libc-"))
    else {
        eprintln!("SKIPPED: this test binary does not map libc");
        return;
    };
    let meta = std::fs::metadata(lib).expect("stat libc");
    let found = mapping_processes(meta.dev(), meta.ino());
    assert!(
        found.iter().any(|p| p.pid == std::process::id()),
        "{lib}: {found:?}"
    );
}

#[test]
fn empty_file_has_no_pages() {
    let _guard = lock();
    let dir = tempdir();
    let path = dir.path().join("empty");
    File::create(&path).expect("create");
    let r = residency(&path).expect("residency");
    assert_eq!((r.pages, r.resident), (0, 0));
    let rp = resident_pages(&path).expect("resident_pages");
    assert_eq!((rp.pages, rp.resident), (0, 0));
    assert!(rp.runs.is_empty());
    let e = evict(&path).expect("evict");
    assert_eq!(
        (e.size, e.pages, e.resident_before, e.resident_after),
        (0, 0, 0, 0)
    );
}

#[test]
fn partial_last_page_counts_as_a_page() {
    let _guard = lock();
    let dir = tempdir();
    let path = data_file(dir.path(), "odd", 3 * page() + 1);
    read_all(&path);
    let r = residency(&path).expect("residency");
    assert_eq!((r.pages, r.resident), (4, 4));
    assert_eq!(
        resident_pages(&path).expect("resident_pages").runs,
        vec![0..4]
    );
    assert_resident(&path, 4);
}

fn assert_names(error: &CacheError, path: &Path, op: Operation, words: &[&str]) {
    let message = error.to_string();
    assert_eq!(error.path(), path, "{message}");
    assert_eq!(error.operation(), op, "{message}");
    assert!(message.contains(&path.display().to_string()), "{message}");
    assert!(message.contains(&op.to_string()), "{message}");
    for word in words {
        assert!(message.contains(word), "{word:?} missing from {message}");
    }
}

#[test]
fn missing_file_is_an_open_error_naming_the_path() {
    let _guard = lock();
    let dir = tempdir();
    let path = dir.path().join("missing");
    let e = residency(&path).expect_err("residency of a missing file");
    assert_names(&e, &path, Operation::Open, &["No such file"]);
    assert_eq!(
        e.io_error().and_then(|e| e.raw_os_error()),
        Some(libc::ENOENT)
    );
    let e = resident_pages(&path).expect_err("resident_pages of a missing file");
    assert_names(&e, &path, Operation::Open, &["No such file"]);
    let e = evict(&path).expect_err("evict of a missing file");
    assert_names(&e, &path, Operation::Open, &["No such file"]);
}

#[test]
fn directory_is_not_a_regular_file() {
    let _guard = lock();
    let dir = tempdir();
    let path = dir.path().to_path_buf();
    let e = residency(&path).expect_err("residency of a directory");
    assert!(matches!(e, CacheError::NotRegularFile { .. }));
    assert_names(&e, &path, Operation::Cachestat, &["directory"]);
    let e = resident_pages(&path).expect_err("resident_pages of a directory");
    assert_names(&e, &path, Operation::Mincore, &["directory"]);
    let e = evict(&path).expect_err("evict of a directory");
    assert_names(&e, &path, Operation::Evict, &["directory"]);
}

#[test]
fn fifo_is_refused_without_blocking() {
    let _guard = lock();
    let dir = tempdir();
    let path = dir.path().join("fifo");
    let cpath = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).expect("path");
    assert_eq!(unsafe { libc::mkfifo(cpath.as_ptr(), 0o600) }, 0);
    // Without O_NONBLOCK this open would wait for a writer forever.
    let e = residency(&path).expect_err("residency of a FIFO");
    assert_names(&e, &path, Operation::Cachestat, &["FIFO"]);
}

#[test]
fn mode_000_file_is_readable_by_root_only() {
    let _guard = lock();
    let dir = tempdir();
    let path = data_file(dir.path(), "locked", page());
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o000)).expect("chmod");
    match residency(&path) {
        // Root bypasses file permissions (CAP_DAC_OVERRIDE).
        Ok(r) => {
            assert!(is_root());
            assert_eq!(r.pages, 1);
        }
        Err(e) => {
            assert!(!is_root());
            assert_names(
                &e,
                &path,
                Operation::Open,
                &["Permission denied", "read permission"],
            );
        }
    }
}

#[test]
fn drop_all_empties_the_cache() {
    let _guard = lock();
    if !require_root("drop_all_empties_the_cache") {
        return;
    }
    let dir = tempdir();
    let path = data_file(dir.path(), "data", SIZE);
    read_all(&path);
    assert_resident(&path, SIZE / page());
    drop_all().expect("drop_all");
    assert_resident(&path, 0);
    assert_eq!(residency(&path).expect("residency").resident, 0);
}

const CHILD_DIR: &str = "COLDSTART_CACHE_TEST_NOBODY_DIR";

/// Re-runs `as_nobody_child` in this test binary as user nobody, to see the
/// permission errors an unprivileged user gets.
#[test]
fn permission_errors_explain_what_to_do() {
    let _guard = lock();
    if !require_root("permission_errors_explain_what_to_do") {
        return;
    }
    let dir = tempdir();
    // nobody must reach the files: the tempdir is 0700.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let readable = data_file(dir.path(), "readable", 16 * page());
    std::fs::set_permissions(&readable, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    read_all(&readable);
    let locked = data_file(dir.path(), "locked", page());
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o000)).expect("chmod");

    let exe = std::env::current_exe().expect("test binary path");
    let output = Command::new(exe)
        .args(["--exact", "as_nobody_child", "--ignored", "--nocapture"])
        .env(CHILD_DIR, dir.path())
        .uid(65534)
        .gid(65534)
        .output()
        .expect("run test binary as nobody");
    let stderr = String::from_utf8_lossy(&output.stderr);
    eprintln!("--- child as nobody ---\n{stderr}--- end child ---");
    assert!(output.status.success(), "child failed: {output:?}");
    assert!(
        stderr.contains("CHILD CHECKED"),
        "child did not run its checks"
    );
}

/// Runs only when started by `permission_errors_explain_what_to_do`.
#[test]
#[ignore = "run as user nobody by permission_errors_explain_what_to_do"]
fn as_nobody_child() {
    let Some(dir) = std::env::var_os(CHILD_DIR).map(PathBuf::from) else {
        return;
    };
    assert!(!is_root());

    let e = drop_all().expect_err("drop_all as nobody");
    eprintln!("drop_all: {e}");
    assert_names(
        &e,
        Path::new("/proc/sys/vm/drop_caches"),
        Operation::DropCaches,
        &["root"],
    );

    let readable = dir.join("readable");
    // Linux hides page cache state of files we neither own nor may write:
    // cachestat refuses (since the side-channel fix), mincore would claim
    // every page resident. Either way we must not report a made-up number.
    match residency(&readable) {
        Ok(r) => {
            eprintln!("residency of another user's file: {r:?}");
            assert_eq!(r.method, ResidencyMethod::Cachestat);
        }
        Err(e) => {
            eprintln!("residency: {e}");
            // Not owner, so O_NOATIME gave EPERM: the open must have retried.
            assert_ne!(e.operation(), Operation::Open, "{e}");
            assert!(e.to_string().contains("root"), "{e}");
            assert!(e.to_string().contains(&readable.display().to_string()));
        }
    }
    let e = resident_pages(&readable).expect_err("mincore would lie");
    eprintln!("resident_pages: {e}");
    assert_names(&e, &readable, Operation::Mincore, &["root"]);

    let locked = dir.join("locked");
    let e = residency(&locked).expect_err("residency of a mode 000 file");
    eprintln!("residency of mode 000: {e}");
    assert_names(
        &e,
        &locked,
        Operation::Open,
        &["Permission denied", "read permission"],
    );

    eprintln!("CHILD CHECKED");
}

const FALLBACK_FILE: &str = "COLDSTART_CACHE_TEST_FALLBACK_FILE";
const FALLBACK_RESIDENT: &str = "COLDSTART_CACHE_TEST_FALLBACK_RESIDENT";

/// A seccomp filter that fails cachestat (451) with ENOSYS, as an older
/// kernel would, and allows everything else.
fn no_cachestat_filter() -> [libc::sock_filter; 4] {
    let stmt = |code: u32, k: u32| libc::sock_filter {
        code: code as u16,
        jt: 0,
        jf: 0,
        k,
    };
    [
        // seccomp_data.nr is at offset 0.
        stmt(libc::BPF_LD | libc::BPF_W | libc::BPF_ABS, 0),
        libc::sock_filter {
            code: (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16,
            jt: 0,
            jf: 1,
            k: 451,
        },
        stmt(
            libc::BPF_RET | libc::BPF_K,
            libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32,
        ),
        stmt(libc::BPF_RET | libc::BPF_K, libc::SECCOMP_RET_ALLOW),
    ]
}

/// Re-runs `without_cachestat_child` in this test binary with cachestat
/// failing as ENOSYS, so the mincore fallback measures and evicts.
#[test]
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn falls_back_to_mincore_without_cachestat() {
    let _guard = lock();
    let dir = tempdir();
    let path = data_file(dir.path(), "data", SIZE);
    dontneed(&path);
    let file = File::open(&path).expect("open");
    let rc = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_RANDOM) };
    assert_eq!(rc, 0);
    let mut buf = vec![0u8; 4 * page() as usize];
    let n = unsafe {
        libc::pread(
            file.as_raw_fd(),
            buf.as_mut_ptr().cast(),
            buf.len(),
            (10 * page()) as libc::off_t,
        )
    };
    assert_eq!(n, buf.len() as isize);
    let resident = oracle_resident(&path);
    assert!(resident >= 4);

    let filter = no_cachestat_filter();
    let exe = std::env::current_exe().expect("test binary path");
    let mut command = Command::new(exe);
    command
        .args([
            "--exact",
            "without_cachestat_child",
            "--ignored",
            "--nocapture",
        ])
        .env(FALLBACK_FILE, &path)
        .env(FALLBACK_RESIDENT, resident.to_string());
    // SAFETY: only prctl between fork and exec; the filter was built before.
    unsafe {
        command.pre_exec(move || {
            let prog = libc::sock_fprog {
                len: filter.len() as u16,
                filter: filter.as_ptr().cast_mut(),
            };
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
                || libc::prctl(
                    libc::PR_SET_SECCOMP,
                    libc::SECCOMP_MODE_FILTER,
                    &prog as *const libc::sock_fprog,
                ) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let output = command.output().expect("run test binary without cachestat");
    let stderr = String::from_utf8_lossy(&output.stderr);
    eprintln!("--- child without cachestat ---\n{stderr}--- end child ---");
    assert!(output.status.success(), "child failed: {output:?}");
    assert!(
        stderr.contains("CHILD CHECKED"),
        "child did not run its checks"
    );
    assert_resident(&path, 0);
}

/// Runs only when started by `falls_back_to_mincore_without_cachestat`.
#[test]
#[ignore = "run under a seccomp filter by falls_back_to_mincore_without_cachestat"]
fn without_cachestat_child() {
    let Some(path) = std::env::var_os(FALLBACK_FILE).map(PathBuf::from) else {
        return;
    };
    let resident: u64 = std::env::var(FALLBACK_RESIDENT)
        .expect("expected resident pages")
        .parse()
        .expect("a number");
    let pages = SIZE / page();

    let r = residency(&path).expect("residency");
    eprintln!("residency without cachestat: {r:?}");
    assert_eq!(r.method, ResidencyMethod::Mincore);
    assert_eq!((r.pages, r.resident, r.dirty), (pages, resident, None));
    // Later calls remember that cachestat is missing and still work.
    assert_eq!(residency(&path).expect("residency again"), r);

    let e = evict(&path).expect("evict");
    eprintln!("evict without cachestat: {e:?}");
    assert_eq!(
        (e.pages, e.resident_before, e.resident_after),
        (pages, resident, 0)
    );
    eprintln!("CHILD CHECKED");
}
