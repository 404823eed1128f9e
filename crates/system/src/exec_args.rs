//! What a process passed to the execve it is in: its arguments and its
//! environment, read from the memory it had before the exec, while the
//! exec is still under way.
//!
//! An exec event (fanotify's FAN_OPEN_EXEC) arrives as the kernel opens the
//! new executable, about a millisecond before the exec completes on a cold
//! disk (it still reads the binary's headers and its interpreter's). Until
//! then the process keeps its old memory, and in it the argument and
//! environment arrays it handed execve. /proc/PID/syscall names those
//! arrays while the process waits in the syscall; /proc/PID/mem, opened
//! while the old memory is the process's, reads that memory and no other
//! (the file holds on to the memory it was opened on, and reads fail once
//! the exec has torn it down). Anything less than sure is `None`: the
//! process runs on a CPU at that moment, is in another syscall, or its exec
//! already replaced its memory; the caller then waits for the exec.
//!
//! A script's exec starts its interpreter with other arguments: the ones
//! [`Shebang::interpreter_argv`] makes of the script's "#!" line, as the
//! kernel reads it, and of what the exec was given.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

/// The system call numbers of execve and execveat, and which argument holds
/// the argument array (the environment follows it), on this architecture.
#[cfg(target_arch = "x86_64")]
const EXEC_CALLS: [(i64, usize); 2] = [(59, 1), (322, 2)];
#[cfg(target_arch = "aarch64")]
const EXEC_CALLS: [(i64, usize); 2] = [(221, 1), (281, 2)];
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
const EXEC_CALLS: [(i64, usize); 0] = [];

/// At most this many arguments or variables are read: the kernel takes at
/// most a quarter of the stack limit of them, and a start with more is
/// left to the wait.
const MAX_STRINGS: usize = 8192;

/// At most this many bytes of one argument or variable.
const MAX_STRING: usize = 128 << 10;

/// What the process passed to its exec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecArgs {
    /// The name the kernel gives the new program (fs/exec.c, the bprm's
    /// filename), which a script's interpreter is handed as the script's
    /// path: the path execve or execveat was given, but for execveat of a
    /// relative path from a directory descriptor N, `/dev/fd/N/path`
    /// (`/dev/fd/N` for an empty path).
    pub filename: Vec<u8>,
    /// The descriptor N of a `/dev/fd/N...` filename the kernel made.
    pub from_descriptor: Option<i32>,
    pub argv: Vec<Vec<u8>>,
    pub envp: Vec<Vec<u8>>,
}

impl ExecArgs {
    /// The value of environment variable `name`, if set (the first one,
    /// as getenv finds it).
    pub fn variable(&self, name: &str) -> Option<&[u8]> {
        self.envp.iter().find_map(|entry| {
            entry
                .strip_prefix(name.as_bytes())
                .and_then(|rest| rest.strip_prefix(b"="))
        })
    }
}

/// How long a process on a CPU is waited for to stop in its exec (it waits
/// for the disk there) before its exec is left to complete.
const RUNNING_WAIT: Duration = Duration::from_micros(250);

/// The arguments and environment process `pid` passed to the exec it is in
/// now. `old_memory` is asked once /proc/PID/mem is open, and again before
/// each look at the system call: true while the process still has the
/// memory it had before the exec (its executable is still the old one), so
/// that the memory file was opened on that memory.
pub fn read(pid: i32, old_memory: impl Fn() -> bool) -> Option<ExecArgs> {
    let memory = File::open(format!("/proc/{pid}/mem")).ok()?;
    let deadline = Instant::now() + RUNNING_WAIT;
    let (number, args) = loop {
        if !old_memory() {
            return None;
        }
        // "running" while the process is on a CPU: only a process waiting
        // in a system call shows which.
        let call = std::fs::read_to_string(format!("/proc/{pid}/syscall")).ok()?;
        if let Some(call) = parse_syscall(&call) {
            break call;
        }
        if !call.starts_with("running") || Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_micros(20));
    };
    let &(_, argv_index) = EXEC_CALLS.iter().find(|(n, _)| *n == number)?;
    let path = args[argv_index - 1];
    // execveat's directory descriptor, an int.
    let dirfd = (argv_index == 2).then_some(args[0] as u32 as i32);
    let argv = read_pointers(&memory, args[argv_index]).ok()?;
    let envp = read_pointers(&memory, args[argv_index + 1]).ok()?;
    let mut strings = read_strings_at(&memory, [path].iter().chain(&argv).chain(&envp)).ok()?;
    let envp = strings.split_off(1 + argv.len());
    let argv = strings.split_off(1);
    let path = strings.pop()?;
    let from_descriptor = dirfd.filter(|&fd| fd != libc::AT_FDCWD && path.first() != Some(&b'/'));
    Some(ExecArgs {
        filename: kernel_filename(from_descriptor, path),
        from_descriptor,
        argv,
        envp,
    })
}

/// The name fs/exec.c gives a program exec'd by `path`, relative to
/// descriptor `from` when execveat was given one and a relative path.
fn kernel_filename(from: Option<i32>, path: Vec<u8>) -> Vec<u8> {
    let Some(fd) = from else { return path };
    let mut name = format!("/dev/fd/{fd}").into_bytes();
    if !path.is_empty() {
        name.push(b'/');
        name.extend_from_slice(&path);
    }
    name
}

/// Whether descriptor `fd` of process `pid` is closed at an exec: a script
/// exec'd from one cannot be opened by its interpreter, and the kernel
/// fails the exec (fs/binfmt_script.c). `None` when that cannot be read.
pub fn closes_on_exec(pid: i32, fd: i32) -> Option<bool> {
    let info = std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{fd}")).ok()?;
    let flags = info
        .lines()
        .find_map(|line| line.strip_prefix("flags:"))
        .and_then(|octal| u64::from_str_radix(octal.trim(), 8).ok())?;
    Some(flags & libc::O_CLOEXEC as u64 != 0)
}

/// Where a path a process `pid` names is seen from outside it: under its
/// root directory when absolute, its working directory when relative, and
/// `/dev/fd/N` as its descriptor N.
pub fn seen_from_outside(pid: i32, path: &[u8]) -> std::path::PathBuf {
    use std::os::unix::ffi::OsStrExt;
    let (base, rest) = if let Some(rest) = path.strip_prefix(b"/dev/fd/") {
        ("fd", rest)
    } else if let Some(rest) = path.strip_prefix(b"/") {
        ("root", rest)
    } else {
        ("cwd", path)
    };
    std::path::Path::new(&format!("/proc/{pid}/{base}")).join(std::ffi::OsStr::from_bytes(rest))
}

/// What the kernel reads of a file to find how to run it, and so the most
/// of a script's "#!" line it reads (BINPRM_BUF_SIZE, linux/binfmts.h).
pub const SCRIPT_HEAD: usize = 256;

/// A script's "#!" line as the kernel reads it (fs/binfmt_script.c): the
/// interpreter, and the rest of the line as its one optional argument.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shebang {
    pub interpreter: Vec<u8>,
    /// Spaces inside kept, as the kernel passes it.
    pub argument: Option<Vec<u8>>,
}

impl Shebang {
    /// The "#!" line of a script whose first bytes are `head` (the first
    /// [`SCRIPT_HEAD`], or the whole file when shorter); `None` where the
    /// kernel would not run it as a script (no "#!", no interpreter named,
    /// or a line longer than the kernel reads, cut inside the interpreter).
    pub fn parse(head: &[u8]) -> Option<Shebang> {
        // The kernel reads into a zeroed buffer; its helpers take
        // inclusive ranges, and a NUL ends its strings.
        let mut buf = [0u8; SCRIPT_HEAD];
        let n = head.len().min(SCRIPT_HEAD);
        buf[..n].copy_from_slice(&head[..n]);
        if !buf.starts_with(b"#!") {
            return None;
        }
        let last = SCRIPT_HEAD - 1;
        let newline = buf
            .iter()
            .take_while(|&&c| c != 0)
            .position(|&c| c == b'\n');
        let mut end = match newline {
            Some(at) => at,
            None => {
                // No newline: the interpreter's name must end within what
                // was read, else it may be cut.
                let first = next_non_spacetab(&buf, 2, last)?;
                next_terminator(&buf, first, last)?;
                last
            }
        };
        while spacetab(buf[end - 1]) {
            end -= 1;
        }
        let name = next_non_spacetab(&buf, 2, end).filter(|&at| at != end)?;
        let separator = next_terminator(&buf, name, end);
        let argument = separator
            .filter(|&at| buf[at] != 0)
            .and_then(|at| next_non_spacetab(&buf, at, end));
        buf[end] = 0;
        if let (Some(_), Some(at)) = (argument, separator) {
            buf[at] = 0;
        }
        let string = |at: usize| buf[at..].iter().take_while(|&&c| c != 0).copied().collect();
        Some(Shebang {
            interpreter: string(name),
            argument: argument.map(string),
        })
    }

    /// The arguments the interpreter starts with when the script is exec'd
    /// as `args` says: its name, the line's argument, the script's name as
    /// the kernel has it, then the exec's arguments but the first.
    pub fn interpreter_argv(&self, args: &ExecArgs) -> Vec<Vec<u8>> {
        let mut argv = vec![self.interpreter.clone()];
        argv.extend(self.argument.clone());
        argv.push(args.filename.clone());
        argv.extend(args.argv.iter().skip(1).cloned());
        argv
    }
}

fn spacetab(c: u8) -> bool {
    c == b' ' || c == b'\t'
}

/// The first index in `first..=last` that is not a space or a tab.
fn next_non_spacetab(buf: &[u8], first: usize, last: usize) -> Option<usize> {
    (first..=last).find(|&at| !spacetab(buf[at]))
}

/// The first index in `first..=last` that is a space, a tab or a NUL.
fn next_terminator(buf: &[u8], first: usize, last: usize) -> Option<usize> {
    (first..=last).find(|&at| spacetab(buf[at]) || buf[at] == 0)
}

/// The number and the six arguments of the system call a /proc/PID/syscall
/// line shows; `None` for "running" or a task outside any system call
/// ("-1 sp pc").
fn parse_syscall(line: &str) -> Option<(i64, [u64; 6])> {
    let mut fields = line.split_whitespace();
    let number: i64 = fields.next()?.parse().ok()?;
    if number < 0 {
        return None;
    }
    let mut args = [0u64; 6];
    for arg in &mut args {
        *arg = u64::from_str_radix(fields.next()?.strip_prefix("0x")?, 16).ok()?;
    }
    Some((number, args))
}

/// The NUL-terminated strings at `pointers` in `memory`. Each read of
/// another process's memory costs some microseconds, and the strings an
/// exec is given mostly share pages (on the caller's stack, or near each
/// other on its heap): each page is read once, whole. Only the pages that
/// hold the strings are read (a wider read could make the kernel fault in
/// pages of the old program from the disk).
fn read_strings_at<'a>(
    memory: &impl FileExt,
    pointers: impl IntoIterator<Item = &'a u64>,
) -> io::Result<Vec<Vec<u8>>> {
    let mut pages: std::collections::HashMap<u64, Box<[u8; 4096]>> = Default::default();
    pointers
        .into_iter()
        .map(|&pointer| {
            let mut string = Vec::new();
            let mut at = pointer;
            loop {
                let page_at = at - at % 4096;
                let page = match pages.entry(page_at) {
                    std::collections::hash_map::Entry::Occupied(page) => page.into_mut(),
                    std::collections::hash_map::Entry::Vacant(slot) => {
                        let mut page = Box::new([0u8; 4096]);
                        read_exact_at(memory, &mut page[..], page_at)?;
                        slot.insert(page)
                    }
                };
                let rest = &page[(at - page_at) as usize..];
                if let Some(end) = rest.iter().position(|&b| b == 0) {
                    string.extend_from_slice(&rest[..end]);
                    return Ok(string);
                }
                string.extend_from_slice(rest);
                if string.len() > MAX_STRING {
                    return Err(io::ErrorKind::InvalidData.into());
                }
                at = page_at + 4096;
            }
        })
        .collect()
}

/// The pointers of the NULL-terminated array at `address`.
fn read_pointers(memory: &impl FileExt, address: u64) -> io::Result<Vec<u64>> {
    let mut pointers = Vec::new();
    if address == 0 {
        return Ok(pointers);
    }
    let mut page = [0u8; 4096];
    let mut at = address;
    loop {
        // Up to the page's end at most: the array may end just before an
        // unmapped page.
        let to_page_end = 4096 - (at % 4096) as usize;
        if !to_page_end.is_multiple_of(8) {
            return Err(io::ErrorKind::InvalidData.into());
        }
        let chunk = &mut page[..to_page_end];
        read_exact_at(memory, chunk, at)?;
        for bytes in chunk.chunks_exact(8) {
            let pointer = u64::from_ne_bytes(bytes.try_into().expect("8 bytes"));
            if pointer == 0 {
                return Ok(pointers);
            }
            if pointers.len() == MAX_STRINGS {
                return Err(io::ErrorKind::InvalidData.into());
            }
            pointers.push(pointer);
        }
        at = at
            .checked_add(to_page_end as u64)
            .ok_or(io::ErrorKind::InvalidData)?;
    }
}

/// A whole read at `address`; /proc/PID/mem answers a read of memory that
/// is gone (or an address beyond what an offset can say) with an error or
/// a short count, both errors here.
fn read_exact_at(memory: &impl FileExt, buffer: &mut [u8], address: u64) -> io::Result<()> {
    if address > i64::MAX as u64 {
        return Err(io::ErrorKind::InvalidData.into());
    }
    memory.read_exact_at(buffer, address)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_syscall_line_gives_its_number_and_arguments() {
        let line = "59 0x55d0c0a0 0x7ffd10 0x7ffd50 0x0 0x8 0x1 0x7ffd00 0x7f00aa\n";
        assert_eq!(
            parse_syscall(line),
            Some((59, [0x55d0c0a0, 0x7ffd10, 0x7ffd50, 0, 8, 1]))
        );
        assert_eq!(parse_syscall("running\n"), None);
        assert_eq!(parse_syscall("-1 0x7ffd00 0x7f00aa\n"), None);
        assert_eq!(parse_syscall("59 0x1 0x2\n"), None);
    }

    /// A fake memory: strings and pointer arrays laid out at known
    /// addresses of a byte vector, read the way /proc/PID/mem is.
    struct Memory(Vec<u8>);

    impl FileExt for Memory {
        fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
            let start = offset as usize;
            if start >= self.0.len() {
                return Err(io::ErrorKind::InvalidInput.into());
            }
            let n = buf.len().min(self.0.len() - start);
            buf[..n].copy_from_slice(&self.0[start..start + n]);
            Ok(n)
        }
        fn write_at(&self, _: &[u8], _: u64) -> io::Result<usize> {
            Err(io::ErrorKind::Unsupported.into())
        }
    }

    #[test]
    fn pointer_arrays_and_strings_are_read_across_pages() {
        let mut bytes = vec![0xaau8; 3 * 4096];
        // A string that crosses the first page's end.
        let long_at = 4096 - 3;
        bytes[long_at..long_at + 7].copy_from_slice(b"abcdef\0");
        let short_at = 5000;
        bytes[short_at..short_at + 4].copy_from_slice(b"-x=\0");
        let array_at = 8192;
        for (i, pointer) in [long_at as u64, short_at as u64, 0].into_iter().enumerate() {
            bytes[array_at + 8 * i..array_at + 8 * i + 8].copy_from_slice(&pointer.to_ne_bytes());
        }
        let memory = Memory(bytes);
        let strings = |address: u64| {
            read_pointers(&memory, address).and_then(|p| read_strings_at(&memory, &p))
        };
        assert_eq!(
            strings(array_at as u64).unwrap(),
            vec![b"abcdef".to_vec(), b"-x=".to_vec()]
        );
        assert!(strings(0).unwrap().is_empty());
        // An array or a string running off the memory is an error.
        assert!(strings(3 * 4096 - 8).is_err());
        assert!(read_strings_at(&memory, &[3 * 4096 - 1]).is_err());
        let args = ExecArgs {
            filename: Vec::new(),
            from_descriptor: None,
            argv: Vec::new(),
            envp: vec![b"A=1".to_vec(), b"AB=2".to_vec(), b"A=3".to_vec()],
        };
        assert_eq!(args.variable("A"), Some(&b"1"[..]));
        assert_eq!(args.variable("AB"), Some(&b"2"[..]));
        assert_eq!(args.variable("B"), None);
    }
}
