//! Where the image goes: the [`MemoryBackend`] trait, and [`SliceBackend`] over a caller's
//! buffer (for sandboxes, unikernels, tests and cross-target links that only produce bytes).

use crate::error::BackendError;

/// The permissions of one segment once linking is done. No segment is ever both writable
/// and executable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protection {
    ReadExecute,
    ReadOnly,
    ReadWrite,
}

/// Memory for one image. The linker asks for the whole image at once, writes it through
/// [`memory`](MemoryBackend::memory), then sets each segment's protection and flushes the
/// instruction cache over the code. The bytes written and the address they execute at may
/// differ (cross-target and out-of-process installs): relocations use the target address.
pub trait MemoryBackend {
    /// The page size segments are aligned to (a power of two).
    fn page_size(&self) -> u64;

    /// Provides `size` writable bytes (a multiple of the page size) and returns the target
    /// address of the first byte, aligned to the page size.
    fn allocate(&mut self, size: u64) -> Result<u64, BackendError>;

    /// The writable bytes of the allocation (at least `size` long).
    fn memory(&mut self) -> &mut [u8];

    /// Sets the protection of `[offset, offset + size)` of the allocation (page-aligned).
    fn protect(
        &mut self,
        offset: u64,
        size: u64,
        protection: Protection,
    ) -> Result<(), BackendError>;

    /// Makes instructions written to `[offset, offset + size)` visible to instruction fetch
    /// at the target address.
    fn flush_icache(&mut self, offset: u64, size: u64) -> Result<(), BackendError>;
}

/// A backend over a buffer the caller owns: the image is written into `buffer` as if it ran
/// at `target_base`. Protection and cache flushes are left to the caller (they are no-ops).
pub struct SliceBackend<'b> {
    buffer: &'b mut [u8],
    target_base: u64,
    page_size: u64,
    size: u64,
}

impl<'b> SliceBackend<'b> {
    /// `target_base` must be aligned to `page_size`, a power of two.
    pub fn new(buffer: &'b mut [u8], target_base: u64, page_size: u64) -> SliceBackend<'b> {
        SliceBackend {
            buffer,
            target_base,
            page_size,
            size: 0,
        }
    }

    /// The image bytes written so far (the first `size` bytes of the buffer).
    pub fn image(&self) -> &[u8] {
        let n = usize::try_from(self.size).unwrap_or(usize::MAX);
        self.buffer.get(..n).unwrap_or(self.buffer)
    }
}

impl MemoryBackend for SliceBackend<'_> {
    fn page_size(&self) -> u64 {
        self.page_size
    }

    fn allocate(&mut self, size: u64) -> Result<u64, BackendError> {
        if size > self.buffer.len() as u64 {
            return Err(BackendError {
                op: "allocate (buffer too small)",
                code: 0,
            });
        }
        self.size = size;
        Ok(self.target_base)
    }

    fn memory(&mut self) -> &mut [u8] {
        self.buffer
    }

    fn protect(&mut self, _: u64, _: u64, _: Protection) -> Result<(), BackendError> {
        Ok(())
    }

    fn flush_icache(&mut self, _: u64, _: u64) -> Result<(), BackendError> {
        Ok(())
    }
}

/// Resolves undefined symbols (by their raw ELF name) to target addresses.
pub trait SymbolResolver {
    /// The address of `name`, or `None` if this resolver does not provide it.
    fn resolve(&mut self, name: &[u8]) -> Option<u64>;
}

impl<F: FnMut(&[u8]) -> Option<u64> + ?Sized> SymbolResolver for F {
    fn resolve(&mut self, name: &[u8]) -> Option<u64> {
        self(name)
    }
}

/// A resolver that provides nothing: every external reference is an error.
pub struct NoSymbols;

impl SymbolResolver for NoSymbols {
    fn resolve(&mut self, _: &[u8]) -> Option<u64> {
        None
    }
}
