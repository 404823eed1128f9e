//! Checks on values read back from a profile. A profile is a file anyone
//! can edit, so its rows are untrusted input: a negative page or a page
//! count near 2^64 would panic or loop for ever in the analyses
//! (`page..page + npages`, `(page + npages) * page_size`). Each row is
//! checked once, where the profile reads it; past that the values are safe
//! to use as they are.

/// Smallest and largest page size a run may declare: 512 B to 2 MiB,
/// a power of two (Linux base pages are 4, 16 or 64 KiB).
pub const MIN_PAGE_SIZE: u64 = 512;
pub const MAX_PAGE_SIZE: u64 = 2 << 20;

/// Pages of a file never reach past this index: 2^41 pages is 8 PiB in
/// 4 KiB pages, beyond any file a start-up reads, and 2^41 times the
/// largest page size (2^21) still fits an i64 byte offset, so
/// `(page + npages) * page_size` cannot overflow.
pub const MAX_PAGE_END: u64 = 1 << 41;

/// Largest task id Linux hands out (PID_MAX_LIMIT, 2^22). 0 is the idle
/// task, which the kernel names in events raised from interrupts.
pub const MAX_PID: i64 = 1 << 22;

/// A value that must be zero or more.
pub fn non_negative(name: &str, value: i64) -> Result<u64, String> {
    u64::try_from(value).map_err(|_| format!("{name} {value} is negative"))
}

/// A u64 a row stores as SQLite's signed INTEGER: it must fit 63 bits.
/// User-space addresses and counts always do; a larger value is a tracer
/// bug, refused before it is stored (it would read back negative).
pub fn stored_u64(name: &str, value: u64) -> Result<i64, String> {
    i64::try_from(value).map_err(|_| format!("{name} {value:#x} does not fit 63 bits"))
}

/// An optional value that must be zero or more when present.
pub fn non_negative_opt(name: &str, value: Option<i64>) -> Result<Option<u64>, String> {
    value.map(|v| non_negative(name, v)).transpose()
}

/// A task id in 0..=PID_MAX_LIMIT.
pub fn pid(name: &str, value: i64) -> Result<i32, String> {
    if (0..=MAX_PID).contains(&value) {
        Ok(value as i32)
    } else {
        Err(format!("{name} {value} is not a task id (0 to {MAX_PID})"))
    }
}

pub fn pid_opt(name: &str, value: Option<i64>) -> Result<Option<i32>, String> {
    value.map(|v| pid(name, v)).transpose()
}

/// A range of `npages` pages from `page`: at least one page, none past
/// [`MAX_PAGE_END`].
pub fn page_range(page: i64, npages: i64) -> Result<(u64, u64), String> {
    let first = non_negative("page", page)?;
    if npages < 1 {
        return Err(format!("npages {npages} is not at least 1"));
    }
    let count = npages as u64;
    match first.checked_add(count) {
        Some(end) if end <= MAX_PAGE_END => Ok((first, count)),
        _ => Err(format!(
            "pages {page}..{page}+{npages} reach past page {MAX_PAGE_END}, the largest file a profile describes"
        )),
    }
}

/// A readahead window: `page` and its `size` pages (0 when the kernel
/// decided to read nothing) within [`MAX_PAGE_END`].
pub fn window(page: i64, size: i64) -> Result<(u64, u64), String> {
    let first = non_negative("page", page)?;
    let count = non_negative("size", size)?;
    match first.checked_add(count) {
        Some(end) if end <= MAX_PAGE_END => Ok((first, count)),
        _ => Err(format!(
            "pages {page}..{page}+{size} reach past page {MAX_PAGE_END}, the largest file a profile describes"
        )),
    }
}

/// A page size: a power of two from [`MIN_PAGE_SIZE`] to [`MAX_PAGE_SIZE`].
pub fn page_size(value: i64) -> Result<u64, String> {
    match u64::try_from(value) {
        Ok(size) if size.is_power_of_two() && (MIN_PAGE_SIZE..=MAX_PAGE_SIZE).contains(&size) => {
            Ok(size)
        }
        _ => Err(format!(
            "page_size {value} is not a power of two from {MIN_PAGE_SIZE} to {MAX_PAGE_SIZE}"
        )),
    }
}

/// A file size in bytes: zero or more.
pub fn file_size(value: Option<i64>) -> Result<Option<u64>, String> {
    non_negative_opt("size", value)
}

/// 0 or 1, as SQLite stores booleans.
pub fn flag(name: &str, value: i64) -> Result<bool, String> {
    match value {
        0 => Ok(false),
        1 => Ok(true),
        _ => Err(format!("{name} {value} is neither 0 nor 1")),
    }
}

/// A value that must fit 32 unsigned bits (uid, gid, cpu).
pub fn u32_value(name: &str, value: i64) -> Result<u32, String> {
    u32::try_from(value).map_err(|_| format!("{name} {value} is not between 0 and {}", u32::MAX))
}

/// A value that must fit 32 signed bits (exit code, signal number).
pub fn i32_opt(name: &str, value: Option<i64>) -> Result<Option<i32>, String> {
    value
        .map(|v| i32::try_from(v).map_err(|_| format!("{name} {v} does not fit 32 bits")))
        .transpose()
}
