//! An address range reserved for mapping a shared library's segments the
//! way ld.so does (one PROT_NONE reservation, each PT_LOAD mapped over it
//! with MAP_FIXED, RELRO made read-only afterwards), for measurements that
//! repeat the loader's work by hand. Everything is unmapped on drop.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

/// A private reservation of `span` bytes; every mapping this makes lies
/// inside it, so MAP_FIXED can never replace anything else.
pub struct Reservation {
    base: *mut u8,
    span: usize,
}

impl Reservation {
    /// Reserves `span` bytes of address space, inaccessible until mapped.
    pub fn new(span: usize) -> io::Result<Reservation> {
        // SAFETY: a fresh anonymous mapping at an address the kernel picks;
        // nothing else refers to it.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                span,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Reservation {
            base: base.cast(),
            span,
        })
    }

    /// The reservation's first byte: the library's load bias.
    pub fn base(&self) -> *mut u8 {
        self.base
    }

    /// Maps `len` bytes of `file` from `offset` at `address` (relative to
    /// the base), private, readable and, if asked, writable.
    pub fn map_file(
        &self,
        address: u64,
        len: u64,
        file: &File,
        offset: u64,
        writable: bool,
    ) -> io::Result<()> {
        self.check(address, len)?;
        let protection = if writable {
            libc::PROT_READ | libc::PROT_WRITE
        } else {
            libc::PROT_READ
        };
        let offset = libc::off_t::try_from(offset)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "file offset too large"))?;
        // SAFETY: MAP_FIXED over part of our own reservation (checked above),
        // which nothing outside this struct refers to.
        let placed = unsafe {
            libc::mmap(
                self.base.add(address as usize).cast(),
                len as usize,
                protection,
                libc::MAP_PRIVATE | libc::MAP_FIXED,
                file.as_raw_fd(),
                offset,
            )
        };
        if placed == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Makes `[low, high)` (relative to the base, page-aligned) read-only,
    /// as ld.so does to RELRO once relocations are applied.
    pub fn protect_read_only(&self, low: u64, high: u64) -> io::Result<()> {
        self.check(low, high.saturating_sub(low))?;
        // SAFETY: a range inside our own reservation (checked above).
        let done = unsafe {
            libc::mprotect(
                self.base.add(low as usize).cast(),
                (high - low) as usize,
                libc::PROT_READ,
            )
        };
        if done != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    fn check(&self, address: u64, len: u64) -> io::Result<()> {
        match address.checked_add(len) {
            Some(end) if end <= self.span as u64 => Ok(()),
            _ => Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{len} bytes at {address:#x} do not fit a {}-byte reservation",
                    self.span
                ),
            )),
        }
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        // SAFETY: the reservation made in `new`, with everything mapped in it.
        unsafe { libc::munmap(self.base.cast(), self.span) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn maps_a_file_inside_the_reservation_and_refuses_outside() {
        let page = crate::cache::page_size() as usize;
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(&vec![7u8; page]).unwrap();
        let reservation = Reservation::new(4 * page).unwrap();
        reservation
            .map_file(page as u64, page as u64, &file, 0, true)
            .unwrap();
        // SAFETY: the page just mapped, readable and writable.
        let byte = unsafe { reservation.base().add(page).read() };
        assert_eq!(byte, 7);
        reservation
            .protect_read_only(page as u64, 2 * page as u64)
            .unwrap();
        assert!(
            reservation
                .map_file(3 * page as u64, 2 * page as u64, &file, 0, false)
                .is_err()
        );
        assert!(reservation.protect_read_only(0, 5 * page as u64).is_err());
    }
}
