//! The kernel's /proc files, each read and parsed here and nowhere else:
//! process lists and names, parents, credentials, mappings, mounts, memory
//! figures.
//! The parsers take the text as the kernel prints it, so each is tested on
//! literal samples; the readers around them only open the file.
//!
//! Readers answer `None` or an empty list when the file cannot be read: a
//! process that exits between listing /proc and reading its files is
//! normal, not an error.

use crate::credentials::Credentials;
use std::ffi::OsString;
use std::fs;
use std::io;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};

/// Pids of the processes alive now (the numeric entries of /proc).
pub fn pids() -> Vec<i32> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse().ok())
        .collect()
}

/// Whether a process with this pid exists (zombies included).
pub fn process_exists(pid: i32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// The process name from /proc/PID/comm (at most 15 bytes), or `None` when
/// the process is gone.
pub fn comm(pid: i32) -> Option<String> {
    let bytes = fs::read(format!("/proc/{pid}/comm")).ok()?;
    Some(
        String::from_utf8_lossy(&bytes)
            .trim_end_matches('\n')
            .to_string(),
    )
}

/// The parent pid from /proc/PID/stat; zombies still have one.
pub fn parent_of(pid: i32) -> Option<i32> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat_ppid(&stat)
}

/// The fourth field of a stat line (`pid (comm) state ppid ...`).
fn parse_stat_ppid(stat: &str) -> Option<i32> {
    i32::try_from(parse_stat_field(stat, 4)?).ok()
}

/// The process group from /proc/PID/stat; zombies still have one.
pub fn process_group_of(pid: i32) -> Option<i32> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    i32::try_from(parse_stat_field(&stat, 5)?).ok()
}

/// The filesystem user and group ids and the supplementary groups of a
/// process (or of one thread, by its tid), from /proc/PID/status: what the
/// kernel checks that process's file accesses against.
pub fn filesystem_credentials(pid: i32) -> io::Result<Credentials> {
    let path = format!("/proc/{pid}/status");
    let status =
        fs::read_to_string(&path).map_err(|e| io::Error::new(e.kind(), format!("{path}: {e}")))?;
    parse_filesystem_credentials(&status).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{path}: no Uid, Gid or Groups line of the kernel's form"),
        )
    })
}

/// The fourth (filesystem) id of the `Uid:` and `Gid:` lines (real,
/// effective, saved, filesystem) and the ids of the `Groups:` line, which
/// may be empty.
fn parse_filesystem_credentials(status: &str) -> Option<Credentials> {
    let field = |name: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
    };
    let fourth =
        |name: &str| -> Option<u32> { field(name)?.split_whitespace().nth(3)?.parse().ok() };
    let groups = field("Groups")?
        .split_whitespace()
        .map(|id| id.parse().ok())
        .collect::<Option<Vec<u32>>>()?;
    Some(Credentials {
        uid: fourth("Uid")?,
        gid: fourth("Gid")?,
        groups,
    })
}

/// The children of every thread of this process, from
/// /proc/self/task/TID/children.
pub fn own_children() -> Vec<i32> {
    let Ok(tasks) = fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    let mut children = Vec::new();
    for task in tasks.flatten() {
        let Ok(text) = fs::read_to_string(task.path().join("children")) else {
            continue;
        };
        children.extend(
            text.split_whitespace()
                .filter_map(|p| p.parse::<i32>().ok()),
        );
    }
    children
}

/// This process's cgroup v2 path (the `0::` line of /proc/self/cgroup),
/// relative to the cgroup2 mount.
pub fn own_cgroup() -> Option<String> {
    cgroup_of_file("/proc/self/cgroup")
}

/// A process's cgroup v2 path, as [`own_cgroup`]; a zombie keeps naming
/// the group it died in.
pub fn cgroup_of(pid: i32) -> Option<String> {
    cgroup_of_file(&format!("/proc/{pid}/cgroup"))
}

fn cgroup_of_file(path: &str) -> Option<String> {
    let text = fs::read_to_string(path).ok()?;
    parse_cgroup_v2(&text).map(str::to_string)
}

fn parse_cgroup_v2(text: &str) -> Option<&str> {
    text.lines()
        .find_map(|line| line.strip_prefix("0::"))
        .map(|path| path.trim_start_matches('/'))
}

/// One mounted filesystem, from /proc/self/mounts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    /// Where it is mounted, with the kernel's octal escapes decoded.
    pub target: PathBuf,
    /// The filesystem type, e.g. "ext4", "tracefs", "cgroup2".
    pub fstype: String,
}

/// The filesystems mounted in this process's mount namespace, in mount
/// order.
pub fn mounts() -> Vec<Mount> {
    fs::read_to_string("/proc/self/mounts")
        .map(|text| parse_mounts(&text))
        .unwrap_or_default()
}

/// Mounts tracefs at `target`.
pub fn mount_tracefs(target: &Path) -> io::Result<()> {
    rustix::mount::mount(
        "tracefs",
        target,
        "tracefs",
        rustix::mount::MountFlags::empty(),
        None,
    )?;
    Ok(())
}

/// The first mount of a filesystem type.
pub fn mount_of_type(fstype: &str) -> Option<PathBuf> {
    mounts()
        .into_iter()
        .find(|mount| mount.fstype == fstype)
        .map(|mount| mount.target)
}

/// One mount, from /proc/PID/mountinfo: what /proc/self/mounts says and
/// what only mountinfo has, the superblock's device number (which is not
/// what stat() reports on btrfs, where each subvolume has its own) and the
/// directory of the filesystem the mount shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountInfo {
    /// The superblock's device, as `st_dev` encodes one (libc's makedev).
    pub dev: u64,
    /// The directory of the filesystem mounted here ("/" for its root,
    /// "/sub1" for a btrfs subvolume or a bind mount of a directory).
    pub root: PathBuf,
    /// Where it is mounted, in the namespace of the process read.
    pub target: PathBuf,
    pub fstype: String,
    /// The mount source: a block device, or what the filesystem took.
    pub source: String,
    /// The filesystem's own options (an overlay's `lowerdir=...`).
    pub super_options: String,
}

/// The mounts of process `pid`'s mount namespace, in mount order, as that
/// process sees them (its root, not ours, is "/").
pub fn mountinfo(pid: Option<i32>) -> Vec<MountInfo> {
    let path = match pid {
        Some(pid) => format!("/proc/{pid}/mountinfo"),
        None => "/proc/self/mountinfo".to_string(),
    };
    fs::read_to_string(path)
        .map(|text| parse_mountinfo(&text))
        .unwrap_or_default()
}

/// Lines of `id parent major:minor root target options [optional...] -
/// fstype source super_options`.
fn parse_mountinfo(text: &str) -> Vec<MountInfo> {
    let path = |field: &str| PathBuf::from(OsString::from_vec(unescape_octal(field)));
    text.lines()
        .filter_map(|line| {
            let (before, after) = line.split_once(" - ")?;
            let mut fields = before.split(' ');
            let (_id, _parent) = (fields.next()?, fields.next()?);
            let (major, minor) = fields.next()?.split_once(':')?;
            let (root, target) = (fields.next()?, fields.next()?);
            let mut rest = after.split(' ');
            let fstype = rest.next()?;
            let source = rest.next().unwrap_or("");
            let super_options = rest.next().unwrap_or("");
            Some(MountInfo {
                dev: libc::makedev(major.parse().ok()?, minor.parse().ok()?),
                root: path(root),
                target: path(target),
                fstype: fstype.to_string(),
                source: String::from_utf8_lossy(&unescape_octal(source)).into_owned(),
                super_options: super_options.to_string(),
            })
        })
        .collect()
}

/// Lines of `source target fstype options dump pass`.
fn parse_mounts(text: &str) -> Vec<Mount> {
    text.lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let (_source, target, fstype) = (fields.next()?, fields.next()?, fields.next()?);
            Some(Mount {
                target: PathBuf::from(OsString::from_vec(unescape_octal(target))),
                fstype: fstype.to_string(),
            })
        })
        .collect()
}

/// /proc/self/mounts writes space, tab, newline and backslash in a path
/// as a backslash and three octal digits (`\040` for a space).
fn unescape_octal(text: &str) -> Vec<u8> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\'
            && let Some(digits) = bytes.get(i + 1..i + 4)
            && digits.iter().all(|d| (b'0'..=b'7').contains(d))
        {
            let value = digits.iter().fold(0u32, |v, d| v * 8 + u32::from(d - b'0'));
            out.push(value as u8);
            i += 4;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    out
}

/// A process's /proc/PID/maps, read at once.
pub struct Maps {
    text: Vec<u8>,
}

/// The mappings of process `pid` now; fails when the process is gone or
/// its maps may not be read.
pub fn maps(pid: i32) -> io::Result<Maps> {
    fs::read(format!("/proc/{pid}/maps")).map(|text| Maps { text })
}

impl Maps {
    /// Every mapping, in address order; lines that do not parse are left
    /// out.
    pub fn lines(&self) -> impl Iterator<Item = MapsLine<'_>> {
        self.text.split(|&b| b == b'\n').filter_map(MapsLine::parse)
    }
}

/// One line of /proc/PID/maps:
/// `start-end perms offset major:minor inode pathname`, addresses, offset
/// and device numbers in hex, the inode in decimal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MapsLine<'a> {
    pub start: u64,
    pub end: u64,
    pub perms: &'a [u8],
    /// Offset in the file of `start`.
    pub offset: u64,
    pub major: u32,
    pub minor: u32,
    /// 0 for anonymous mappings.
    pub inode: u64,
    /// The file's path as the kernel printed it (a newline in it shows as
    /// `\012`; nothing else is escaped, so nothing is decoded), a pseudo
    /// name such as `[heap]`, or empty. Deleted files end in " (deleted)".
    pub pathname: &'a [u8],
}

impl<'a> MapsLine<'a> {
    pub fn parse(line: &'a [u8]) -> Option<MapsLine<'a>> {
        let mut rest = line;
        let range = next_field(&mut rest)?;
        let perms = next_field(&mut rest)?;
        let offset = next_field(&mut rest)?;
        let device = next_field(&mut rest)?;
        let inode = next_field(&mut rest)?;
        let hex = |bytes: &[u8]| u64::from_str_radix(std::str::from_utf8(bytes).ok()?, 16).ok();
        let dash = range.iter().position(|&b| b == b'-')?;
        let colon = device.iter().position(|&b| b == b':')?;
        Some(MapsLine {
            start: hex(&range[..dash])?,
            end: hex(&range[dash + 1..])?,
            perms,
            offset: hex(offset)?,
            major: u32::try_from(hex(&device[..colon])?).ok()?,
            minor: u32::try_from(hex(&device[colon + 1..])?).ok()?,
            inode: std::str::from_utf8(inode).ok()?.parse().ok()?,
            // Padding separates the inode from the path; the path itself
            // may contain spaces.
            pathname: trim_leading_spaces(rest),
        })
    }

    /// The device as in `st_dev`.
    pub fn device(&self) -> u64 {
        libc::makedev(self.major, self.minor)
    }

    /// The path of the mapped file when it names a file on disk: not an
    /// anonymous or pseudo mapping, not a file deleted since.
    pub fn file_path(&self) -> Option<&'a [u8]> {
        (self.inode != 0
            && self.pathname.starts_with(b"/")
            && !self.pathname.ends_with(b" (deleted)"))
        .then_some(self.pathname)
    }
}

/// The next space-separated field of `rest`, advancing past it.
fn next_field<'a>(rest: &mut &'a [u8]) -> Option<&'a [u8]> {
    let text = trim_leading_spaces(rest);
    let end = text.iter().position(|&b| b == b' ').unwrap_or(text.len());
    let (field, after) = text.split_at(end);
    *rest = after;
    (!field.is_empty()).then_some(field)
}

fn trim_leading_spaces(bytes: &[u8]) -> &[u8] {
    let start = bytes.iter().position(|&b| b != b' ').unwrap_or(bytes.len());
    &bytes[start..]
}

/// What a process's stat and io files say of its work so far, its reaped
/// descendants' included (the kernel adds a child's figures to its parent
/// when the parent reaps it): the figures a service compares between
/// starts without tracing them. Summed over the live processes of a tree,
/// each exited and reaped member is counted once, in its parent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// User and system CPU time of every thread and reaped descendant, in
    /// clock ticks (utime + stime + cutime + cstime of /proc/PID/stat).
    pub cpu_ticks: u64,
    /// Page faults that had to wait for a read (majflt + cmajflt).
    pub major_faults: u64,
    /// Bytes this process had fetched from storage (read_bytes of
    /// /proc/PID/io; 0 when that file is not readable).
    pub read_bytes: u64,
}

/// The usage of process `pid` so far, or `None` when it is gone.
pub fn usage(pid: i32) -> Option<Usage> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let mut usage = parse_stat_usage(&stat)?;
    if let Ok(io) = fs::read_to_string(format!("/proc/{pid}/io")) {
        usage.read_bytes = parse_io_read_bytes(&io).unwrap_or(0);
    }
    Some(usage)
}

/// majflt and cmajflt (fields 12, 13), utime, stime, cutime and cstime
/// (14-17) of a stat line.
fn parse_stat_usage(stat: &str) -> Option<Usage> {
    let field = |n: usize| parse_stat_field(stat, n);
    Some(Usage {
        cpu_ticks: field(14)? + field(15)? + field(16)? + field(17)?,
        major_faults: field(12)? + field(13)?,
        read_bytes: 0,
    })
}

fn parse_io_read_bytes(io: &str) -> Option<u64> {
    io.lines()
        .find_map(|l| l.strip_prefix("read_bytes:"))?
        .trim()
        .parse()
        .ok()
}

/// Where process `pid`'s environment starts in its memory (field 50 of
/// /proc/PID/stat; shown to a reader that may trace the process, as root
/// may): a new value once an exec installed the new program's memory,
/// with the stack's address randomized; 0 between the new memory and its
/// environment being set up. `None` when the process is gone.
pub fn environment_start(pid: i32) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat_field(&stat, 50)
}

/// Field `n` (numbered from 1, as proc(5) does; from 3 on) of a stat line.
fn parse_stat_field(stat: &str, n: usize) -> Option<u64> {
    // comm may contain spaces and parentheses: fields start after the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(n.checked_sub(3)?)?.parse().ok()
}

/// The children of every thread of process `pid` (/proc/PID/task/TID/children).
pub fn children_of(pid: i32) -> Vec<i32> {
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    let mut children = Vec::new();
    for task in tasks.flatten() {
        if let Ok(text) = fs::read_to_string(task.path().join("children")) {
            children.extend(
                text.split_whitespace()
                    .filter_map(|p| p.parse::<i32>().ok()),
            );
        }
    }
    children
}

/// The value of variable `name` in the environment process `pid` has now
/// (/proc/PID/environ: what the program was started with, set once exec
/// completed). `Ok(None)` when it is not set; an error when the file is
/// unreadable or still empty (the process is mid-exec, or a kernel thread).
pub fn environment_variable(pid: i32, name: &str) -> io::Result<Option<String>> {
    let bytes = fs::read(format!("/proc/{pid}/environ"))?;
    if bytes.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::WouldBlock,
            "the environment is empty (mid-exec)",
        ));
    }
    Ok(find_variable(&bytes, name))
}

fn find_variable(environ: &[u8], name: &str) -> Option<String> {
    environ.split(|&b| b == 0).find_map(|entry| {
        let value = entry.strip_prefix(name.as_bytes())?.strip_prefix(b"=")?;
        Some(String::from_utf8_lossy(value).into_owned())
    })
}

/// Memory pressure: the share of the last 10 seconds in which some task
/// waited for memory (the `some avg10` of /proc/pressure/memory), in
/// percent; `None` without PSI.
pub fn memory_pressure_avg10() -> Option<f64> {
    let text = fs::read_to_string("/proc/pressure/memory").ok()?;
    parse_pressure_some_avg10(&text)
}

fn parse_pressure_some_avg10(text: &str) -> Option<f64> {
    let line = text.lines().find(|l| l.starts_with("some "))?;
    line.split_whitespace()
        .find_map(|f| f.strip_prefix("avg10="))?
        .parse()
        .ok()
}

/// A /proc/meminfo figure in bytes, e.g. `meminfo_bytes("MemTotal")`.
pub fn meminfo_bytes(field: &str) -> Option<u64> {
    let text = fs::read_to_string("/proc/meminfo").ok()?;
    parse_meminfo_kb(&text, field).map(|kb| kb * 1024)
}

/// The value of a `Field:   1234 kB` line.
fn parse_meminfo_kb(text: &str, field: &str) -> Option<u64> {
    let line = text
        .lines()
        .find(|l| l.strip_prefix(field).is_some_and(|r| r.starts_with(':')))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// The "model name" of the first CPU in /proc/cpuinfo (x86 and some
/// others; absent on many ARM kernels).
pub fn cpu_model() -> Option<String> {
    let text = fs::read_to_string("/proc/cpuinfo").ok()?;
    parse_cpu_model(&text)
}

fn parse_cpu_model(text: &str) -> Option<String> {
    text.lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_string())
}

/// The running kernel's release (`uname -r`), empty if unreadable.
pub fn kernel_release() -> String {
    fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_are_the_filesystem_ids_and_the_groups_of_a_status() {
        let status = "Name:\tsleep\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t71\n\
                      Uid:\t1000\t1001\t1002\t1003\nGid:\t2000\t2001\t2002\t2003\n\
                      FDSize:\t64\nGroups:\t4 24 27 \nNStgid:\t71\n";
        assert_eq!(
            parse_filesystem_credentials(status),
            Some(Credentials {
                uid: 1003,
                gid: 2003,
                groups: vec![4, 24, 27],
            })
        );
        // No supplementary groups: the line is there, empty.
        let none =
            "Uid:\t65534\t65534\t65534\t65534\nGid:\t65534\t65534\t65534\t65534\nGroups:\t\n";
        assert_eq!(
            parse_filesystem_credentials(none),
            Some(Credentials {
                uid: 65534,
                gid: 65534,
                groups: vec![],
            })
        );
        // A line cut short, or a missing one, is no answer.
        assert_eq!(
            parse_filesystem_credentials("Uid:\t1\t1\t1\nGid:\t1\t1\t1\t1\nGroups:\n"),
            None
        );
        assert_eq!(
            parse_filesystem_credentials("Uid:\t1\t1\t1\t1\nGid:\t1\t1\t1\t1\n"),
            None
        );
    }

    #[test]
    fn stat_usage_adds_the_reaped_children_after_a_comm_with_spaces() {
        // A line of a process named "a) b" (fields 12-17: 7, 1, 30, 12, 5, 3).
        let stat =
            "4242 (a) b) S 1 4242 4242 0 -1 4194304 900 0 7 1 30 12 5 3 20 0 1 0 123 1000 50";
        assert_eq!(
            parse_stat_usage(stat),
            Some(Usage {
                cpu_ticks: 50,
                major_faults: 8,
                read_bytes: 0
            })
        );
        assert_eq!(parse_stat_usage("4242 (x) S 1"), None);
        // A whole line: arg_start, arg_end, env_start, env_end are 48-51.
        let line = "7 (sh) S 1 7 7 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 50 2000 100 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0 94000 94100 95000 140720000 140720100 140720100 140720200 0";
        assert_eq!(parse_stat_field(line, 48), Some(140720000));
        assert_eq!(parse_stat_field(line, 50), Some(140720100));
        assert_eq!(parse_stat_field(line, 2), None);
    }

    #[test]
    fn io_environ_and_pressure_lines_parse() {
        let io = "rchar: 10\nwchar: 0\nsyscr: 1\nsyscw: 0\nread_bytes: 8192\nwrite_bytes: 0\n";
        assert_eq!(parse_io_read_bytes(io), Some(8192));
        let environ = b"PATH=/bin\0COLDSTART_SERVE=0\0COLDSTART_SERVED=1\0";
        assert_eq!(
            find_variable(environ, "COLDSTART_SERVE").as_deref(),
            Some("0")
        );
        assert_eq!(find_variable(environ, "HOME"), None);
        let pressure = "some avg10=1.50 avg60=0.20 avg300=0.00 total=123\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n";
        assert_eq!(parse_pressure_some_avg10(pressure), Some(1.5));
    }

    #[test]
    fn mountinfo_lines_give_the_superblock_device_root_and_options() {
        let text = "44 27 0:39 /sub1 /var/tmp/a\\040b rw,relatime shared:1 - btrfs /dev/loop0 rw,subvolid=256,subvol=/sub1\n\
                    45 27 0:42 / /merged rw - overlay overlay rw,lowerdir=/l1:/l2,upperdir=/u,workdir=/w\n";
        let mounts = parse_mountinfo(text);
        assert_eq!(mounts.len(), 2);
        assert_eq!(mounts[0].dev, libc::makedev(0, 39));
        assert_eq!(mounts[0].root, PathBuf::from("/sub1"));
        assert_eq!(
            mounts[0].target,
            PathBuf::from("/var/tmp/a\\040b".replace("\\040", " "))
        );
        assert_eq!(mounts[0].fstype, "btrfs");
        assert_eq!(mounts[0].source, "/dev/loop0");
        assert_eq!(
            mounts[1].super_options,
            "rw,lowerdir=/l1:/l2,upperdir=/u,workdir=/w"
        );
    }

    #[test]
    fn the_root_mounts_device_is_what_stat_says_on_a_plain_filesystem() {
        use std::os::unix::fs::MetadataExt;
        let root = mountinfo(None)
            .into_iter()
            .rev()
            .find(|m| m.target == Path::new("/"))
            .expect("a mount on /");
        if root.fstype != "btrfs" {
            assert_eq!(root.dev, fs::metadata("/").unwrap().dev());
        }
    }

    #[test]
    fn maps_line_fields() {
        let line = b"7f1c2a000000-7f1c2a022000 r--p 00001000 fe:00 811083                     /usr/lib/firefox-esr/libxul.so";
        let m = MapsLine::parse(line).unwrap();
        assert_eq!(m.start, 0x7f1c_2a00_0000);
        assert_eq!(m.end, 0x7f1c_2a02_2000);
        assert_eq!(m.perms, b"r--p");
        assert_eq!(m.offset, 0x1000);
        assert_eq!((m.major, m.minor), (0xfe, 0));
        assert_eq!(m.device(), libc::makedev(0xfe, 0));
        assert_eq!(m.inode, 811083);
        assert_eq!(m.file_path(), Some(&b"/usr/lib/firefox-esr/libxul.so"[..]));
    }

    #[test]
    fn maps_path_keeps_spaces_and_deleted_files_have_no_file_path() {
        let line = b"00400000-00452000 r-xp 00000000 103:02 42       /home/a b/my  app (deleted)";
        let m = MapsLine::parse(line).unwrap();
        assert_eq!((m.major, m.minor, m.inode), (0x103, 2, 42));
        assert_eq!(m.pathname, b"/home/a b/my  app (deleted)");
        assert_eq!(m.file_path(), None);
        let live = b"00400000-00452000 r-xp 00000000 103:02 42       /home/a b/my  app";
        assert_eq!(
            MapsLine::parse(live).unwrap().file_path(),
            Some(&b"/home/a b/my  app"[..])
        );
    }

    #[test]
    fn anonymous_and_pseudo_maps_lines_have_no_file_path() {
        let heap = MapsLine::parse(b"5581a000-5583b000 rw-p 00000000 00:00 0   [heap]").unwrap();
        assert_eq!((heap.inode, heap.pathname), (0, &b"[heap]"[..]));
        assert_eq!(heap.file_path(), None);
        let anon = MapsLine::parse(b"7ffd1e5d6000-7ffd1e5f7000 rw-p 00000000 00:00 0 ").unwrap();
        assert_eq!((anon.major, anon.minor, anon.inode), (0, 0, 0));
        assert_eq!(anon.pathname, b"");
        let bare = MapsLine::parse(b"7ffd1e5d6000-7ffd1e5f7000 rw-p 00000000 00:00 0").unwrap();
        assert_eq!(bare.pathname, b"");
    }

    #[test]
    fn malformed_maps_lines_are_rejected() {
        assert_eq!(MapsLine::parse(b""), None);
        assert_eq!(MapsLine::parse(b"garbage"), None);
        assert_eq!(MapsLine::parse(b"a b c nocolon 42 /x"), None);
        assert_eq!(
            MapsLine::parse(b"1000-2000 r--p 0 fd:01 notanumber /x"),
            None
        );
        assert_eq!(MapsLine::parse(b"1000 r--p 0 fd:01 7 /x"), None);
    }

    #[test]
    fn maps_lines_skip_what_does_not_parse() {
        let maps = Maps {
            text: b"1000-2000 r--p 00000000 08:01 5 /bin/x\nnonsense\n3000-4000 rw-p 00000000 00:00 0\n"
                .to_vec(),
        };
        let starts: Vec<u64> = maps.lines().map(|m| m.start).collect();
        assert_eq!(starts, vec![0x1000, 0x3000]);
    }

    #[test]
    fn mount_points_are_unescaped() {
        let text = "sysfs /sys sysfs rw,nosuid 0 0\n\
                    /dev/sdb1 /mnt/my\\040disk\\011x ext4 rw,relatime 0 0\n\
                    tracefs /sys/kernel/tracing tracefs rw 0 0\n\
                    back\\134slash /a\\134b xfs rw 0 0\n\
                    short line\n";
        let mounts = parse_mounts(text);
        let got: Vec<(&Path, &str)> = mounts
            .iter()
            .map(|m| (m.target.as_path(), m.fstype.as_str()))
            .collect();
        assert_eq!(
            got,
            vec![
                (Path::new("/sys"), "sysfs"),
                (Path::new("/mnt/my disk\tx"), "ext4"),
                (Path::new("/sys/kernel/tracing"), "tracefs"),
                (Path::new("/a\\b"), "xfs"),
            ]
        );
        // Not an escape: a backslash without three octal digits stays.
        assert_eq!(unescape_octal("/x\\09y\\"), b"/x\\09y\\");
    }

    #[test]
    fn stat_parent_skips_a_comm_with_spaces_and_parentheses() {
        assert_eq!(
            parse_stat_ppid("4242 (my (odd) name) S 77 4242 4242 0 -1 4194560"),
            Some(77)
        );
        assert_eq!(parse_stat_ppid("1 (init) S 0 1 1"), Some(0));
        assert_eq!(parse_stat_ppid("4242 no parenthesis"), None);
        assert_eq!(
            parse_stat_field("4242 (my (odd) name) Z 77 4100 4242 0 -1 4194560", 5),
            Some(4100)
        );
    }

    #[test]
    fn cgroup_v2_line() {
        let text = "12:cpuset:/\n0::/user.slice/user-1000.slice/session-2.scope\n";
        assert_eq!(
            parse_cgroup_v2(text),
            Some("user.slice/user-1000.slice/session-2.scope")
        );
        assert_eq!(parse_cgroup_v2("0::/\n"), Some(""));
        assert_eq!(parse_cgroup_v2("4:memory:/x\n"), None);
    }

    #[test]
    fn meminfo_fields_in_kb() {
        let text = "MemTotal:        8029808 kB\n\
                    MemFree:          412300 kB\n\
                    SwapCached:          128 kB\n\
                    Cached:          3141592 kB\n";
        assert_eq!(parse_meminfo_kb(text, "MemTotal"), Some(8029808));
        // "SwapCached:" is another field, not "Cached:".
        assert_eq!(parse_meminfo_kb(text, "Cached"), Some(3141592));
        assert_eq!(parse_meminfo_kb(text, "Mem"), None);
        assert_eq!(parse_meminfo_kb(text, "Buffers"), None);
    }

    #[test]
    fn cpu_model_of_the_first_cpu() {
        let text = "processor\t: 0\nvendor_id\t: GenuineIntel\n\
                    model name\t: Intel(R) Xeon(R) CPU @ 2.20GHz\nprocessor\t: 1\n\
                    model name\t: Other\n";
        assert_eq!(
            parse_cpu_model(text).as_deref(),
            Some("Intel(R) Xeon(R) CPU @ 2.20GHz")
        );
        assert_eq!(parse_cpu_model("processor\t: 0\n"), None);
    }

    #[test]
    fn own_process_is_readable() {
        // Facts checked against std, not against this module.
        let me = std::process::id() as i32;
        assert!(process_exists(me));
        assert!(pids().contains(&me));
        let parent = std::os::unix::process::parent_id() as i32;
        assert_eq!(parent_of(me), Some(parent));
    }
}
