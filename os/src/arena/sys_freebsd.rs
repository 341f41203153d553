//! FreeBSD (13 and later): the arena's system calls.
//!
//! FreeBSD gives `mmap`/`mprotect`/`munmap` as Linux does (the shared calls are in
//! `sys_posix.rs`), `memfd_create` (13.0) for the packed arena's two views, and
//! `minherit(INHERIT_NONE)` in place of `MADV_DONTFORK`. It lacks `MAP_NORESERVE` (a
//! `PROT_NONE` reservation carries no swap charge there anyway), `MADV_NOHUGEPAGE` and
//! `MADV_POPULATE_*` (refused: best effort), an `madvise` that discards contents (its
//! `MADV_DONTNEED`/`MADV_FREE` are hints), so released private pages are replaced by fresh
//! anonymous ones, and released pages of the memfd are zeroed by the arena itself (this
//! file's `release` refuses them), and `/proc/self/maps` (no map-count limit to report).
//!
//! Built (`cargo check --target x86_64-unknown-freebsd`), not run: no FreeBSD machine or
//! emulator runs the tests.

use super::sys_api::{Advice, Prot};
use super::sys_posix::errno;
pub(crate) use super::sys_posix::{
    address_space_limit, is_out_of_memory, map_file_at, map_private_aligned, page_size, protect,
    unmap,
};
pub(crate) use super::sys_posix::{commit_writable, rest_writable};
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

/// Gives `advice` for `[addr, addr + len)`; what FreeBSD lacks is refused (`EINVAL`).
///
/// # Safety
/// The caller owns the range. (No advice here discards contents.)
pub(crate) unsafe fn advise(addr: usize, len: usize, advice: Advice) -> Result<(), i32> {
    match advice {
        Advice::DontFork => {
            // SAFETY: changes only what a child inherits of a range the caller owns.
            let r = unsafe { libc::minherit(addr as *mut libc::c_void, len, libc::INHERIT_NONE) };
            if r != 0 {
                Err(errno())
            } else {
                Ok(())
            }
        }
        Advice::NoHugePages | Advice::PopulateRead | Advice::PopulateWrite => Err(libc::EINVAL),
    }
}

/// Returns `[addr, addr + len)` to the OS: private pages are replaced by fresh anonymous
/// ones at protection `rest` (they read as zero); a memfd's pages (`shared`) are refused
/// (`EINVAL`), and the arena zeroes them through the writable view instead.
///
/// # Safety
/// The caller owns the range and nothing needs its contents any more.
pub(crate) unsafe fn release(addr: usize, len: usize, shared: bool, rest: Prot) -> Result<(), i32> {
    if shared {
        return Err(libc::EINVAL);
    }
    // SAFETY: see the function's contract.
    unsafe { super::sys_posix::remap_zero(addr, len, rest, 0) }
}

/// Packed mode is available (memfd_create, FreeBSD 13).
pub(crate) fn check_packed() -> Result<(), super::error::ArenaError> {
    Ok(())
}

/// A memfd of `len` bytes, to be mapped twice.
pub(crate) fn memfd(len: usize) -> Result<OwnedFd, (&'static str, i32)> {
    super::sys_posix::memfd_of_len(len, &[libc::MFD_CLOEXEC])
}

/// Code pages are protected in place (`mprotect`): no per-thread JIT memory.
pub(crate) const JIT: Option<super::sys_api::PerThreadJit> = None;

pub(crate) use super::sys_posix::without_proc::*;
pub(crate) use super::sys_posix::{fork_generation, forks_begun, register_fork_hooks};
