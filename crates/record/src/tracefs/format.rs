//! Parsers for tracefs's self-description: an event's `format` file (its id
//! and where each field sits in a record) and `events/header_page` (where
//! the timestamp, commit word and data sit in a ring-buffer sub-buffer).
//!
//! Everything that reads binary trace data takes its offsets from here, so
//! a kernel that moves a field is followed rather than misread.

use std::fmt;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

/// One field of an event record, as a format file describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    /// The C identifier without array brackets: `comm` for `char comm[16]`.
    pub name: String,
    /// Byte offset from the start of the record (the `common_type` field).
    pub offset: usize,
    /// Size in bytes of the field itself (4 for a `__data_loc` descriptor).
    pub size: usize,
    pub signed: bool,
    /// The type starts with `__data_loc`: the field is a u32 whose low 16
    /// bits are the offset of the data from the record start and whose high
    /// 16 bits are its length.
    pub data_loc: bool,
}

/// An event's format file: its name, numeric id and record layout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventFormat {
    pub name: String,
    /// The value of `common_type` in this event's records.
    pub id: u16,
    /// Every field in file order, the `common_*` ones included.
    pub fields: Vec<Field>,
}

/// Layout of one ring-buffer sub-buffer, from `events/header_page`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeaderPage {
    pub timestamp_offset: usize,
    pub commit_offset: usize,
    /// Size of the commit word (`local_t`): 8 on 64-bit kernels, 4 on 32-bit.
    /// The missed-events count is an `unsigned long` of the same size.
    pub commit_size: usize,
    pub data_offset: usize,
    pub data_size: usize,
}

/// A format or header_page file that could not be read or understood.
#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    #[error("cannot read {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{}line {line}: {reason}: `{text}`", Origin(.file))]
    Line {
        file: Option<PathBuf>,
        line: usize,
        reason: String,
        text: String,
    },
    #[error("{}{reason}", Origin(.file))]
    Incomplete {
        file: Option<PathBuf>,
        reason: String,
    },
}

/// Prefixes a message with the file it is about, when known.
struct Origin<'a>(&'a Option<PathBuf>);

impl fmt::Display for Origin<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(path) => write!(f, "{}: ", path.display()),
            None => Ok(()),
        }
    }
}

impl FormatError {
    /// Names the file a text-level error came from.
    fn in_file(self, path: &Path) -> FormatError {
        match self {
            FormatError::Line {
                line, reason, text, ..
            } => FormatError::Line {
                file: Some(path.to_path_buf()),
                line,
                reason,
                text,
            },
            FormatError::Incomplete { reason, .. } => FormatError::Incomplete {
                file: Some(path.to_path_buf()),
                reason,
            },
            io @ FormatError::Io { .. } => io,
        }
    }
}

fn line_error(line: usize, reason: impl Into<String>, text: &str) -> FormatError {
    FormatError::Line {
        file: None,
        line,
        reason: reason.into(),
        text: text.trim().to_string(),
    }
}

fn incomplete(reason: impl Into<String>) -> FormatError {
    FormatError::Incomplete {
        file: None,
        reason: reason.into(),
    }
}

/// Reads a tracefs text file. `header_page` and `header_event` answer only
/// the first read() and report EOF on the next (the kernel's
/// `show_header_page_file` returns 0 once `*ppos` is non-zero), so the first
/// read must be large enough for the whole file; `read_to_string` starts
/// with a 32-byte probe and would see a truncated file.
fn read_text(path: &Path) -> Result<String, FormatError> {
    let io_error = |source| FormatError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut file = std::fs::File::open(path).map_err(io_error)?;
    let mut bytes = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        match file.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => bytes.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(io_error(e)),
        }
        // Format files are a few KiB; anything this large is not one.
        if bytes.len() > MAX_TEXT {
            return Err(FormatError::Incomplete {
                file: Some(path.to_path_buf()),
                reason: format!("larger than {MAX_TEXT} bytes, not a format file"),
            });
        }
    }
    String::from_utf8(bytes).map_err(|_| FormatError::Incomplete {
        file: Some(path.to_path_buf()),
        reason: "not UTF-8 text".to_string(),
    })
}

const MAX_TEXT: usize = 1 << 20;

impl EventFormat {
    /// Parses the text of a format file.
    pub fn parse(text: &str) -> Result<EventFormat, FormatError> {
        let mut name = None;
        let mut id = None;
        let mut fields: Vec<Field> = Vec::new();
        for (index, line) in text.lines().enumerate() {
            let number = index + 1;
            let trimmed = line.trim();
            if let Some(value) = trimmed.strip_prefix("name:") {
                if name.is_some() {
                    return Err(line_error(number, "second `name:` line", line));
                }
                let value = value.trim();
                if value.is_empty() {
                    return Err(line_error(number, "empty event name", line));
                }
                name = Some(value.to_string());
            } else if let Some(value) = trimmed.strip_prefix("ID:") {
                if id.is_some() {
                    return Err(line_error(number, "second `ID:` line", line));
                }
                let value = value.trim();
                id = Some(value.parse::<u16>().map_err(|_| {
                    line_error(number, "event ID is not a number from 0 to 65535", line)
                })?);
            } else if is_field_line(trimmed) {
                let field = parse_field_line(trimmed).map_err(|r| line_error(number, r, line))?;
                if fields.iter().any(|f| f.name == field.name) {
                    return Err(line_error(number, "field declared twice", line));
                }
                fields.push(field);
            } else if trimmed.starts_with("print fmt:") {
                // The print format may continue over several lines and is C,
                // not layout; nothing after it describes the record.
                break;
            }
            // `format:` and blank lines separate sections; anything else is
            // left alone so a kernel adding a header line does not break us.
        }
        let name = name.ok_or_else(|| incomplete("no `name:` line"))?;
        let id = id.ok_or_else(|| incomplete(format!("event {name}: no `ID:` line")))?;
        if fields.is_empty() {
            return Err(incomplete(format!("event {name}: no fields")));
        }
        Ok(EventFormat { name, id, fields })
    }

    /// Reads and parses `dir/format`, where `dir` is an event's directory
    /// such as `/sys/kernel/tracing/events/sched/sched_process_exec`.
    pub fn read(dir: &Path) -> Result<EventFormat, FormatError> {
        let path = dir.join("format");
        let text = read_text(&path)?;
        EventFormat::parse(&text).map_err(|e| e.in_file(&path))
    }

    /// The field called `name`, if the event has one.
    pub fn field(&self, name: &str) -> Option<&Field> {
        self.fields.iter().find(|f| f.name == name)
    }
}

/// Upper bound on a sub-buffer; callers allocate read buffers of this size,
/// so a corrupt header must not ask for gigabytes. The kernel's own
/// libtraceevent masks commit to 27 bits, i.e. 128 MiB.
const MAX_SUBBUF_SIZE: usize = 1 << 27;

impl HeaderPage {
    /// Parses the text of `events/header_page`.
    pub fn parse(text: &str) -> Result<HeaderPage, FormatError> {
        let mut timestamp = None;
        let mut commit = None;
        let mut data = None;
        for (index, line) in text.lines().enumerate() {
            let number = index + 1;
            let trimmed = line.trim();
            if !is_field_line(trimmed) {
                continue;
            }
            let field = parse_field_line(trimmed).map_err(|r| line_error(number, r, line))?;
            let slot = match field.name.as_str() {
                "timestamp" => &mut timestamp,
                "commit" => &mut commit,
                "data" => &mut data,
                // `overwrite` aliases the commit word's low byte; the
                // flag it names is not part of the layout we need.
                _ => continue,
            };
            if slot.is_some() {
                return Err(line_error(number, "field declared twice", line));
            }
            *slot = Some((number, field));
        }
        let (ts_line, timestamp) = timestamp.ok_or_else(|| incomplete("no `timestamp` field"))?;
        let (commit_line, commit) = commit.ok_or_else(|| incomplete("no `commit` field"))?;
        let (data_line, data) = data.ok_or_else(|| incomplete("no `data` field"))?;
        if timestamp.size != 8 {
            return Err(incomplete(format!(
                "line {ts_line}: timestamp is {} bytes, expected 8",
                timestamp.size
            )));
        }
        if commit.size != 4 && commit.size != 8 {
            return Err(incomplete(format!(
                "line {commit_line}: commit is {} bytes, expected 4 or 8",
                commit.size
            )));
        }
        let header_end = (timestamp.offset + timestamp.size).max(commit.offset + commit.size);
        if data.offset < header_end {
            return Err(incomplete(format!(
                "line {data_line}: data at offset {} overlaps the header, which ends at {header_end}",
                data.offset
            )));
        }
        match data.offset.checked_add(data.size) {
            Some(total) if total <= MAX_SUBBUF_SIZE && data.size > 0 => {}
            _ => {
                return Err(incomplete(format!(
                    "line {data_line}: data size {} is not between 1 and {MAX_SUBBUF_SIZE} bytes",
                    data.size
                )));
            }
        }
        Ok(HeaderPage {
            timestamp_offset: timestamp.offset,
            commit_offset: commit.offset,
            commit_size: commit.size,
            data_offset: data.offset,
            data_size: data.size,
        })
    }

    /// Reads and parses `events_dir/header_page`, where `events_dir` is a
    /// trace instance's `events` directory (each instance has its own, and
    /// its sub-buffer size may differ from the top-level buffer's).
    pub fn read(events_dir: &Path) -> Result<HeaderPage, FormatError> {
        let path = events_dir.join("header_page");
        let text = read_text(&path)?;
        HeaderPage::parse(&text).map_err(|e| e.in_file(&path))
    }

    /// Bytes in one sub-buffer, header included: what one read of
    /// `trace_pipe_raw` returns.
    pub fn subbuf_size(&self) -> usize {
        self.data_offset.saturating_add(self.data_size)
    }
}

fn is_field_line(trimmed: &str) -> bool {
    trimmed.starts_with("field:") || trimmed.starts_with("field special:")
}

/// Parses `field:TYPE NAME;\toffset:N;\tsize:N;\tsigned:N;`. Returns the
/// reason on failure; the caller adds the line.
fn parse_field_line(trimmed: &str) -> Result<Field, String> {
    let rest = trimmed
        .strip_prefix("field special:")
        .or_else(|| trimmed.strip_prefix("field:"))
        .ok_or("not a field line")?;
    let mut parts = rest.split(';');
    let decl = parts.next().unwrap_or("").trim();
    let (type_part, name) = split_declaration(decl)?;
    let mut offset = None;
    let mut size = None;
    let mut signed = false;
    for part in parts {
        let part = part.trim();
        if part.is_empty() {
            continue;
        }
        let Some((key, value)) = part.split_once(':') else {
            return Err(format!("`{part}` is not `key:value`"));
        };
        let value = value.trim();
        match key.trim() {
            "offset" => offset = Some(parse_number(value, "offset")?),
            "size" => size = Some(parse_number(value, "size")?),
            "signed" => {
                signed = match value {
                    "0" => false,
                    "1" => true,
                    _ => return Err(format!("signed is `{value}`, expected 0 or 1")),
                }
            }
            // Unknown attributes are a kernel addition we can live without.
            _ => {}
        }
    }
    let offset = offset.ok_or("no offset")?;
    let size = size.ok_or("no size")?;
    if offset.checked_add(size).is_none() {
        return Err("offset plus size overflows".to_string());
    }
    Ok(Field {
        name: name.to_string(),
        offset,
        size,
        signed,
        data_loc: type_part.starts_with("__data_loc"),
    })
}

fn parse_number(value: &str, what: &str) -> Result<usize, String> {
    value
        .parse::<usize>()
        .map_err(|_| format!("{what} `{value}` is not a number"))
}

/// Splits `unsigned long i_ino`, `char comm[16]`, `__data_loc char[] name`
/// or `void *ptr` into the type text and the bare identifier.
fn split_declaration(decl: &str) -> Result<(&str, &str), String> {
    let start = decl
        .rfind(|c: char| c.is_whitespace() || c == '*')
        .map_or(0, |i| i + 1);
    let last = &decl[start..];
    let name = match last.find('[') {
        Some(bracket) => &last[..bracket],
        None => last,
    };
    let is_identifier = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !is_identifier {
        return Err(format!("no field name in declaration `{decl}`"));
    }
    Ok((decl[..start].trim(), name))
}

impl Field {
    /// The field's bytes in `record`, or None if the record is too short.
    fn bytes<'r>(&self, record: &'r [u8]) -> Option<&'r [u8]> {
        record.get(self.offset..self.offset.checked_add(self.size)?)
    }

    /// Reads a 1, 2, 4 or 8-byte field zero-extended, in the kernel's (and
    /// so this machine's) byte order. None for other sizes or short records.
    pub fn read_u64(&self, record: &[u8]) -> Option<u64> {
        let b = self.bytes(record)?;
        Some(match self.size {
            1 => u64::from(u8::from_ne_bytes(b.try_into().ok()?)),
            2 => u64::from(u16::from_ne_bytes(b.try_into().ok()?)),
            4 => u64::from(u32::from_ne_bytes(b.try_into().ok()?)),
            8 => u64::from_ne_bytes(b.try_into().ok()?),
            _ => return None,
        })
    }

    /// Like [`Field::read_u64`] but sign-extends fields marked signed.
    pub fn read_i64(&self, record: &[u8]) -> Option<i64> {
        let b = self.bytes(record)?;
        if !self.signed {
            return self.read_u64(record).map(|v| v as i64);
        }
        Some(match self.size {
            1 => i64::from(i8::from_ne_bytes(b.try_into().ok()?)),
            2 => i64::from(i16::from_ne_bytes(b.try_into().ok()?)),
            4 => i64::from(i32::from_ne_bytes(b.try_into().ok()?)),
            8 => i64::from_ne_bytes(b.try_into().ok()?),
            _ => return None,
        })
    }

    /// The raw bytes of a string field, up to (not including) the first
    /// NUL: the whole char array, or for `__data_loc` the bytes its
    /// descriptor points at. None if anything lies outside the record.
    pub fn read_bytes<'r>(&self, record: &'r [u8]) -> Option<&'r [u8]> {
        let raw = if self.data_loc {
            if self.size != 4 {
                return None;
            }
            let loc = self.read_u64(record)?;
            let start = (loc & 0xffff) as usize;
            let len = (loc >> 16) as usize;
            record.get(start..start + len)?
        } else {
            self.bytes(record)?
        };
        let end = raw.iter().position(|&b| b == 0).unwrap_or(raw.len());
        Some(&raw[..end])
    }

    /// A string field as UTF-8 (see [`Field::read_bytes`]); None if it is
    /// out of bounds or not valid UTF-8.
    pub fn read_str<'r>(&self, record: &'r [u8]) -> Option<&'r str> {
        std::str::from_utf8(self.read_bytes(record)?).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Copied from a 6.18 x86-64 kernel.
    const EXEC: &str = "name: sched_process_exec
ID: 365
format:
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;

\tfield:__data_loc char[] filename;\toffset:8;\tsize:4;\tsigned:0;
\tfield:pid_t pid;\toffset:12;\tsize:4;\tsigned:1;
\tfield:pid_t old_pid;\toffset:16;\tsize:4;\tsigned:1;

print fmt: \"filename=%s pid=%d old_pid=%d\", __get_str(filename), REC->pid, REC->old_pid
";

    const HEADER_PAGE: &str = "\tfield: u64 timestamp;\toffset:0;\tsize:8;\tsigned:0;
\tfield: local_t commit;\toffset:8;\tsize:8;\tsigned:1;
\tfield: int overwrite;\toffset:8;\tsize:1;\tsigned:1;
\tfield: char data;\toffset:16;\tsize:4080;\tsigned:0;
";

    #[test]
    fn parses_exec_format() {
        let format = EventFormat::parse(EXEC).expect("parse");
        assert_eq!(format.name, "sched_process_exec");
        assert_eq!(format.id, 365);
        assert_eq!(format.fields.len(), 7);
        let filename = format.field("filename").expect("filename");
        assert!(filename.data_loc);
        assert_eq!((filename.offset, filename.size), (8, 4));
        let pid = format.field("common_pid").expect("common_pid");
        assert!(pid.signed && !pid.data_loc);
        assert!(format.field("print").is_none());
    }

    #[test]
    fn parses_header_page() {
        let header = HeaderPage::parse(HEADER_PAGE).expect("parse");
        assert_eq!(
            header,
            HeaderPage {
                timestamp_offset: 0,
                commit_offset: 8,
                commit_size: 8,
                data_offset: 16,
                data_size: 4080,
            }
        );
        assert_eq!(header.subbuf_size(), 4096);
    }

    #[test]
    fn declarations() {
        assert_eq!(split_declaration("char comm[16]"), Ok(("char", "comm")));
        assert_eq!(
            split_declaration("__data_loc char[] filename"),
            Ok(("__data_loc char[]", "filename"))
        );
        assert_eq!(split_declaration("void *ptr"), Ok(("void *", "ptr")));
        assert_eq!(
            split_declaration("unsigned long args[]"),
            Ok(("unsigned long", "args"))
        );
        assert!(split_declaration("").is_err());
        assert!(split_declaration("int 3x").is_err());
    }

    #[test]
    fn errors_name_the_line() {
        let bad = EXEC.replace("offset:12;", "offset:twelve;");
        let err = EventFormat::parse(&bad).expect_err("bad offset");
        let message = err.to_string();
        assert!(message.starts_with("line 10: offset `twelve`"), "{message}");

        let err = EventFormat::parse("name: x\nformat:\n").expect_err("no id");
        assert_eq!(err.to_string(), "event x: no `ID:` line");

        let err = EventFormat::parse(&EXEC.replace("ID: 365", "ID: 70000")).expect_err("id");
        assert!(err.to_string().starts_with("line 2: event ID"), "{err}");

        let err =
            HeaderPage::parse(&HEADER_PAGE.replace("size:4080", "size:0")).expect_err("empty data");
        assert!(err.to_string().starts_with("line 4: data size 0"), "{err}");

        let err = EventFormat::parse(&EXEC.replace("name: sched_process_exec\n", ""))
            .expect_err("no name")
            .in_file(Path::new("/x/format"));
        assert_eq!(err.to_string(), "/x/format: no `name:` line");
    }

    #[test]
    fn readers_stay_in_bounds() {
        let field = |offset, size, signed, data_loc| Field {
            name: "f".into(),
            offset,
            size,
            signed,
            data_loc,
        };
        let record = [0xfe, 0xff, 0xff, 0xff, b'a', b'b', 0, b'c'];
        assert_eq!(field(0, 4, true, false).read_i64(&record), Some(-2));
        assert_eq!(
            field(0, 4, true, false).read_u64(&record),
            Some(0xffff_fffe)
        );
        assert_eq!(field(0, 2, false, false).read_i64(&record), Some(0xfffe));
        assert_eq!(field(0, 1, true, false).read_i64(&record), Some(-2));
        assert_eq!(field(4, 8, false, false).read_u64(&record), None);
        assert_eq!(field(0, 3, false, false).read_u64(&record), None);
        assert_eq!(field(usize::MAX, 8, false, false).read_u64(&record), None);
        assert_eq!(field(4, 4, false, false).read_str(&record), Some("ab"));
        assert_eq!(field(7, 1, false, false).read_str(&record), Some("c"));
        assert_eq!(field(8, 1, false, false).read_str(&record), None);

        // __data_loc: offset 8, length 3 ("xy\0"), relative to record start.
        let mut record = vec![0u8; 8];
        record[..4].copy_from_slice(&(8u32 | (3 << 16)).to_ne_bytes());
        record.extend_from_slice(b"xy\0");
        let loc = field(0, 4, false, true);
        assert_eq!(loc.read_str(&record), Some("xy"));
        assert_eq!(loc.read_str(&record[..10]), None);
        record[..4].copy_from_slice(&u32::MAX.to_ne_bytes());
        assert_eq!(loc.read_str(&record), None);
        record[8] = 0xff;
        record[..4].copy_from_slice(&(8u32 | (3 << 16)).to_ne_bytes());
        assert_eq!(loc.read_str(&record), None);
        assert_eq!(loc.read_bytes(&record), Some(&[0xff, b'y'][..]));
    }
}
