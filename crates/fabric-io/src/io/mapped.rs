//! A memory region an application shares with its RNIC: its memfd mapped into the agent's address space.
//!
//! The application keeps writing and reading its side of the mapping; the RNIC reads and writes its side for
//! the QPs, as a NIC's DMA does. The caller checked the descriptor first (a memfd of ordinary pages, sealed
//! against shrinking, at least as long as the mapping: `emulator.agents.memory.check_memfd`), so no access
//! within the mapping can fault.
use std::io;
use std::os::fd::RawFd;
use std::ptr::NonNull;

/// `len` bytes of a file, mapped shared, read and write; unmapped when dropped.
pub struct MappedFile {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain memory owned by this value alone in this process (no other MappedFile points
// to it), so moving it to another thread moves all access with it.
unsafe impl Send for MappedFile {}

impl MappedFile {
    /// The first `len` bytes of the file open as `fd`, mapped shared for reading and writing (`len` above 0;
    /// a descriptor that is not open is refused by the kernel, EBADF).
    pub fn map(fd: RawFd, len: usize) -> io::Result<MappedFile> {
        if len == 0 {
            return Err(io::Error::from(io::ErrorKind::InvalidInput));
        }
        // SAFETY: a new mapping at an address the kernel picks overlaps nothing of ours; mmap only reads the
        // descriptor's number (any number is safe to pass); the result is checked before it is used.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(ptr.cast::<u8>()).ok_or_else(io::Error::last_os_error)?;
        Ok(MappedFile { ptr, len })
    }
}

impl AsRef<[u8]> for MappedFile {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: `ptr` is a live mapping of `len` readable bytes until drop, and bytes have no invalid values.
        // The application may write its side meanwhile, as it may under a real NIC's DMA: what a QP then reads
        // is torn bytes, never undefined values.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl AsMut<[u8]> for MappedFile {
    fn as_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `as_ref`, and the mapping is writable; `&mut self` keeps this process's other views of
        // it (there are none outside this value) from overlapping the slice.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for MappedFile {
    fn drop(&mut self) {
        // SAFETY: `ptr` and `len` are exactly the mapping made in `map`, unmapped once, here; no slice of it
        // outlives `self` (they borrow it).
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Seek, SeekFrom, Write};
    use std::os::fd::AsRawFd;

    #[test]
    fn writes_through_the_mapping_reach_the_file_and_back() {
        let mut file = tempfile();
        file.write_all(&[0u8; 4096]).unwrap();
        let mut mapped = MappedFile::map(file.as_raw_fd(), 4096).unwrap();
        mapped.as_mut()[10] = 42;
        let mut back = [0u8; 16];
        file.seek(SeekFrom::Start(0)).unwrap();
        file.read_exact(&mut back).unwrap();
        assert_eq!(back[10], 42);
        assert!(MappedFile::map(file.as_raw_fd(), 0).is_err());
    }

    fn tempfile() -> std::fs::File {
        let path = std::env::temp_dir().join(format!("fabric-io-mapped-{}", std::process::id()));
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        std::fs::remove_file(&path).unwrap();
        file
    }
}
