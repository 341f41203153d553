//! macOS (aarch64 and x86_64): the arena's system calls.
//!
//! macOS gives `mmap`/`mprotect`/`munmap` (shared with Linux and FreeBSD in
//! `sys_posix.rs`); a process without the hardened runtime may turn its own read/write
//! pages read/execute with `mprotect`, which is what the page-granular arena does (never
//! writable and executable at once). It lacks `memfd_create` (packed mode is
//! [`ArenaError::Unsupported`](super::ArenaError::Unsupported): its two views would need
//! `mach_vm_remap` of `MAP_JIT` memory, not written), `MADV_DONTFORK`, `MADV_NOHUGEPAGE`,
//! `MADV_POPULATE_*` (refused: best effort), an `madvise` that discards contents (released
//! pages are replaced by fresh anonymous ones) and `/proc` (no map count to report).
//!
//! Under the hardened runtime, executable memory needs an entitlement: either
//! `com.apple.security.cs.allow-unsigned-executable-memory` for this `mprotect` scheme, or
//! `com.apple.security.cs.allow-jit` for `MAP_JIT` memory, which is writable and
//! executable at once but each thread sees it one way at a time
//! (`pthread_jit_write_protect_np`): W^X is per thread there. The `MAP_JIT` scheme is not
//! implemented yet (see docs/os-support.md).
//!
//! Built (`cargo check --target aarch64-apple-darwin` and `x86_64-apple-darwin`), never
//! run: no Mac ran this code.

use super::error::ArenaError;
use super::sys_api::{Advice, Prot};
pub(crate) use super::sys_posix::{
    address_space_limit, fork_generation, forks_begun, is_out_of_memory, map_private_aligned,
    page_size, protect, register_fork_hooks, unmap,
};
pub(crate) use super::sys_posix::{commit_writable, rest_writable};
use crate::Platform;
use std::os::fd::OwnedFd;

/// Reserves `len` bytes of inaccessible address space.
pub(crate) fn reserve(len: usize) -> Result<usize, i32> {
    super::sys_posix::reserve_with(len, 0)
}

/// Reserves `len` bytes aligned to `align` (a power of two, at least a page); on failure,
/// the size asked for and the errno.
pub(crate) fn reserve_aligned(len: usize, align: usize) -> Result<usize, (usize, i32)> {
    super::sys_posix::reserve_aligned(reserve, len, align)
}

/// macOS has none of the advice the arena gives: refused (`EINVAL`), best effort.
///
/// # Safety
/// The caller owns the range.
pub(crate) unsafe fn advise(_addr: usize, _len: usize, _advice: Advice) -> Result<(), i32> {
    Err(libc::EINVAL)
}

/// Returns `[addr, addr + len)` to the OS: replaced by fresh anonymous pages at protection
/// `rest` (they read as zero). `shared` never holds on macOS (no packed mode).
///
/// # Safety
/// The caller owns the range and nothing needs its contents any more.
pub(crate) unsafe fn release(
    addr: usize,
    len: usize,
    _shared: bool,
    rest: Prot,
) -> Result<(), i32> {
    // SAFETY: see the function's contract.
    unsafe { super::sys_posix::remap_zero(addr, len, rest, 0) }
}

/// Packed mode needs a shared-memory object mapped twice, one view executable: not on
/// macOS.
pub(crate) fn check_packed() -> Result<(), ArenaError> {
    Err(ArenaError::Unsupported {
        feature: "packed mode (code mapped twice, writable and executable views)",
        platform: Platform::MacOs,
    })
}

/// Never called: [`check_packed`] refuses packed mode first.
pub(crate) fn memfd(_len: usize) -> Result<OwnedFd, (&'static str, i32)> {
    Err(("memfd_create (macOS has none)", libc::ENOSYS))
}

/// Never called: [`check_packed`] refuses packed mode first.
///
/// # Safety
/// As Linux's `map_file_at`.
pub(crate) unsafe fn map_file_at(
    _addr: usize,
    _len: usize,
    _prot: Prot,
    _fd: &OwnedFd,
    _offset: usize,
) -> Result<(), i32> {
    Err(libc::ENOSYS)
}

pub(crate) use super::sys_posix::without_proc::*;

/// Makes instructions written to `[start, end)` visible to instruction fetch:
/// `sys_icache_invalidate` (libSystem), which also covers Apple's x86_64 (a no-op there).
///
/// # Safety
/// `[start, end)` is mapped memory of this process.
pub(crate) unsafe fn flush_icache(start: usize, end: usize) {
    extern "C" {
        fn sys_icache_invalidate(start: *mut libc::c_void, len: libc::size_t);
    }
    // SAFETY: cache maintenance over a range the caller says is mapped.
    unsafe { sys_icache_invalidate(start as *mut libc::c_void, end - start) };
}
