//! [`MmapBackend`]: an anonymous private mapping, written while read/write, then protected
//! segment by segment (never writable and executable at once), unmapped on drop.

use crate::icache;
use elfjit_core::{BackendError, MemoryBackend, Protection};
use rustix::mm::{mmap_anonymous, mprotect, munmap, MapFlags, MprotectFlags, ProtFlags};
use std::ptr::NonNull;

/// Memory for one image in this process. The target address is the mapping's address.
pub struct MmapBackend {
    mapping: Option<(NonNull<u8>, usize)>,
    page_size: u64,
}

// SAFETY: the backend exclusively owns its mapping (no aliasing handles exist outside the
// `&mut self` methods), so moving it or sharing `&MmapBackend` across threads is sound; the
// only `&self` accessors return plain integers.
unsafe impl Send for MmapBackend {}
// SAFETY: see `Send`: `&self` methods never touch the mapped bytes.
unsafe impl Sync for MmapBackend {}

fn error(op: &'static str, e: rustix::io::Errno) -> BackendError {
    BackendError {
        op,
        code: e.raw_os_error(),
    }
}

impl MmapBackend {
    /// A backend with no mapping yet, using the system page size.
    pub fn new() -> MmapBackend {
        MmapBackend {
            mapping: None,
            page_size: rustix::param::page_size() as u64,
        }
    }

    /// The address and length of the mapping, once allocated.
    pub fn region(&self) -> Option<(usize, usize)> {
        self.mapping.map(|(ptr, len)| (ptr.as_ptr() as usize, len))
    }

    fn check_range(&self, offset: u64, size: u64) -> Result<*mut u8, BackendError> {
        let (ptr, len) = self.mapping.ok_or(BackendError {
            op: "use memory before allocating it",
            code: 0,
        })?;
        let end = offset.checked_add(size);
        if end.is_none_or(|end| end > len as u64) || !offset.is_multiple_of(self.page_size) {
            return Err(BackendError {
                op: "address a range outside the mapping",
                code: 0,
            });
        }
        // SAFETY: `offset` is within the mapping (checked above), so the result stays in
        // the same allocation.
        Ok(unsafe { ptr.as_ptr().add(offset as usize) })
    }
}

impl Default for MmapBackend {
    fn default() -> Self {
        MmapBackend::new()
    }
}

impl MemoryBackend for MmapBackend {
    fn page_size(&self) -> u64 {
        self.page_size
    }

    fn allocate(&mut self, size: u64) -> Result<u64, BackendError> {
        if self.mapping.is_some() {
            return Err(BackendError {
                op: "allocate twice",
                code: 0,
            });
        }
        // An image with nothing in it still gets one page, so every module has an address.
        let len = usize::try_from(size.max(self.page_size)).map_err(|_| BackendError {
            op: "allocate (size)",
            code: 0,
        })?;
        // SAFETY: a fresh anonymous mapping at an address the kernel chooses aliases no
        // existing Rust object.
        let ptr = unsafe {
            mmap_anonymous(
                std::ptr::null_mut(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::PRIVATE,
            )
        }
        .map_err(|e| error("mmap", e))?;
        let ptr = NonNull::new(ptr.cast::<u8>()).ok_or(BackendError {
            op: "mmap",
            code: 0,
        })?;
        self.mapping = Some((ptr, len));
        Ok(ptr.as_ptr() as u64)
    }

    fn memory(&mut self) -> &mut [u8] {
        match self.mapping {
            // SAFETY: the mapping is `len` bytes, readable and writable until `protect` is
            // called (the core finishes writing before it protects), and `&mut self`
            // guarantees this is the only slice over it.
            Some((ptr, len)) => unsafe { std::slice::from_raw_parts_mut(ptr.as_ptr(), len) },
            None => &mut [],
        }
    }

    fn protect(
        &mut self,
        offset: u64,
        size: u64,
        protection: Protection,
    ) -> Result<(), BackendError> {
        let start = self.check_range(offset, size)?;
        let flags = match protection {
            Protection::ReadExecute => MprotectFlags::READ | MprotectFlags::EXEC,
            Protection::ReadOnly => MprotectFlags::READ,
            Protection::ReadWrite => MprotectFlags::READ | MprotectFlags::WRITE,
        };
        // SAFETY: the range lies in our own mapping (checked); no Rust reference into it
        // outlives `memory()`'s `&mut self` borrow, so changing its protection invalidates
        // nothing.
        unsafe { mprotect(start.cast(), size as usize, flags) }.map_err(|e| error("mprotect", e))
    }

    fn flush_icache(&mut self, offset: u64, size: u64) -> Result<(), BackendError> {
        let start = self.check_range(offset, size)? as usize;
        icache::flush(start, start + size as usize);
        Ok(())
    }
}

impl Drop for MmapBackend {
    fn drop(&mut self) {
        if let Some((ptr, len)) = self.mapping.take() {
            // SAFETY: the mapping was created by `allocate` with this length and is unmapped
            // exactly once; any code or data pointers handed out die with the owner.
            let _ = unsafe { munmap(ptr.as_ptr().cast(), len) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocate_write_protect_and_unmap() {
        let mut b = MmapBackend::new();
        let page = b.page_size();
        let base = b.allocate(3 * page).expect("mmap");
        assert_eq!(base % page, 0);
        let mem = b.memory();
        assert_eq!(mem.len() as u64, 3 * page);
        mem[0] = 0xc3;
        mem[(2 * page) as usize] = 7;
        b.protect(0, page, Protection::ReadExecute).expect("rx");
        b.protect(page, page, Protection::ReadOnly).expect("r");
        b.protect(2 * page, page, Protection::ReadWrite)
            .expect("rw");
        b.flush_icache(0, page).expect("flush");
        assert!(b.protect(page / 2, page, Protection::ReadOnly).is_err());
        assert!(b.protect(0, 4 * page, Protection::ReadOnly).is_err());
        assert!(b.allocate(page).is_err());
    }

    #[test]
    fn unallocated_backend_refuses_work() {
        let mut b = MmapBackend::new();
        assert!(b.memory().is_empty());
        assert!(b.protect(0, 4096, Protection::ReadOnly).is_err());
    }
}
