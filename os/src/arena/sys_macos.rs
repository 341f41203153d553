//! macOS (aarch64 and x86_64): the arena's system calls.
//!
//! macOS gives `mmap`/`mprotect`/`munmap` (shared with Linux and FreeBSD in
//! `sys_posix.rs`), and on arm64 `MAP_JIT` memory with a per-thread switch
//! (`pthread_jit_write_protect_np`). It lacks `memfd_create` (packed mode is
//! [`ArenaError::Unsupported`](super::ArenaError::Unsupported)), `MADV_DONTFORK`,
//! `MADV_NOHUGEPAGE`, `MADV_POPULATE_*` (refused: best effort), an `madvise` that discards
//! contents (released pages are replaced by fresh anonymous ones) and `/proc` (no map count
//! to report).
//!
//! **arm64: `MAP_JIT`.** Every arena reservation (and every `MmapBackend` image, through
//! [`reserve_aligned`] and the same [`JIT`]) is one `MAP_JIT` mapping, made
//! inaccessible (`PROT_NONE`) as any reservation is; `MAP_JIT` cannot be placed inside an
//! existing reservation (`MAP_FIXED` is refused with it), so the whole chunk is one. A new
//! chunk's code region is then made read/write/execute once ([`PerThreadJit::open_region`]);
//! XNU's `vm_map_enter` says a `MAP_JIT` range once read/write/execute may not be downgraded
//! (osfmk/vm/vm_map.c:2945-2968; the page-table monitor's rule, not in the public source),
//! so it never is again, and freed code pages are given back with
//! `MADV_FREE` (a staged publish writes every byte of the pages it takes). The read-only and
//! data regions are ordinary protections of the same mapping and change as on Linux. Each
//! thread sees the code region either writable or executable, never both
//! (`pthread_jit_write_protect_np`): the arena stages code in a heap buffer and copies it
//! into the pages on the publishing thread inside a write bracket (`code_write.rs`), then
//! `sys_icache_invalidate`. Under the hardened runtime this needs the
//! `com.apple.security.cs.allow-jit` entitlement; without the hardened runtime, none.
//!
//! **A refused `MAP_JIT`.** Without the entitlement the reservation fails (XNU's `mmap`:
//! `EPERM` where the code-signing monitor denies it, `EINVAL` where the MAC policy does;
//! with `com.apple.security.cs.single-jit`, `EINVAL` from the second `MAP_JIT` mapping on,
//! which the arena's second chunk is). The load then fails with
//! [`ArenaError::JitUnavailable`](super::ArenaError::JitUnavailable) naming the call and the
//! entitlement ([`PerThreadJit::reserve_step`]); out of memory stays
//! [`ArenaError::Exhausted`](super::ArenaError::Exhausted). No fallback to the `mprotect`
//! scheme: the hardened runtime's entitlements are a cascade (`allow-jit`, then
//! `allow-unsigned-executable-memory`, then `disable-executable-page-protection`, each
//! allowing what the one before it does), so a process refused `MAP_JIT` is refused
//! unsigned executable pages too (as an `mprotect` error or a code-signing kill when the
//! page first runs: not checked, no Mac here).
//!
//! **Releasing read-only and data pages** replaces them with a fresh anonymous mapping
//! (`mmap(MAP_FIXED)` without `MAP_JIT`) inside the chunk's `MAP_JIT` reservation. XNU
//! allows it (read in xnu-11417.101.15): `mmap` refuses `MAP_FIXED` only together with
//! `MAP_JIT` (bsd/kern/kern_mman.c:399-408, `if (flags & MAP_JIT) { if ((flags &
//! MAP_FIXED) || ... return EINVAL;`); `MAP_FIXED` becomes `vmf_overwrite` (:705-719),
//! which `vm_map_enter` serves by `vm_map_delete(..., VM_MAP_REMOVE_TO_OVERWRITE ...)` of
//! the old entries (osfmk/vm/vm_map.c:2476-2499), and `vm_map_delete` refuses only
//! permanent submap entries (:8344), never `used_for_jit` ones; the `used_for_jit` refusal
//! in `vm_map_entry_is_overwritable` (:9212) serves only `vm_map_copy_overwrite*`
//! (`mach_vm_write`/`vm_copy`), not `mmap`. The new pages are never executable, so the
//! W^X check (:2907-2925) does not concern them. Not run on a Mac.
//!
//! **x86_64: `mprotect`.** `pthread_jit_write_protect_np` switches nothing on Intel Macs,
//! so `MAP_JIT` pages would be writable and executable for every thread: the page-granular
//! arena's read/write-then-read/execute scheme is used instead (never both at once), which
//! under the hardened runtime needs `com.apple.security.cs.allow-unsigned-executable-memory`.
//!
//! Built (`cargo clippy --target aarch64-apple-darwin` and `x86_64-apple-darwin`), never
//! run: no Mac ran this code.

use super::sys_api::{Advice, PerThreadJit, Prot};
pub(crate) use super::sys_posix::{
    address_space_limit, fork_generation, forks_begun, is_out_of_memory, map_private_aligned,
    page_size, protect, register_fork_hooks, unmap,
};
pub(crate) use super::sys_posix::{commit_writable, rest_writable};
use std::os::fd::OwnedFd;

/// Reserves `len` bytes of inaccessible address space (on arm64 a `MAP_JIT` mapping).
pub(crate) fn reserve(len: usize) -> Result<usize, i32> {
    super::sys_posix::reserve_with(len, RESERVE_FLAGS)
}

#[cfg(target_arch = "aarch64")]
const RESERVE_FLAGS: libc::c_int = libc::MAP_JIT;
#[cfg(not(target_arch = "aarch64"))]
const RESERVE_FLAGS: libc::c_int = 0;

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
pub(crate) use super::sys_api::packed_mode_unsupported as check_packed;

/// arm64: the code region is `MAP_JIT` memory, written on the publishing thread only.
#[cfg(target_arch = "aarch64")]
pub(crate) const JIT: Option<PerThreadJit> = Some(PerThreadJit {
    open_region: jit::open_region,
    begin_write: jit::begin_write,
    end_write: jit::end_write,
    discard: jit::discard,
    reserve_step: "reserve code memory with mmap(MAP_JIT), which the hardened runtime allows \
        only with the com.apple.security.cs.allow-jit entitlement (and, with \
        com.apple.security.cs.single-jit, once per process: elfjit maps one MAP_JIT region \
        per 2 MiB-aligned chunk and per MmapBackend image)",
    open_step: "make MAP_JIT code memory read/write/execute with mprotect (ENOTSUP: \
        pthread_jit_write_protect_supported_np says this Mac has no per-thread write switch)",
});

/// x86_64: code pages are protected in place (`mprotect`).
#[cfg(not(target_arch = "aarch64"))]
pub(crate) const JIT: Option<PerThreadJit> = None;

/// The calls behind [`JIT`] on arm64.
#[cfg(target_arch = "aarch64")]
mod jit {
    /// Makes `[addr, addr + len)` (part of a `MAP_JIT` reservation, inaccessible until now)
    /// read/write/execute; `ENOTSUP` where the per-thread switch is missing.
    ///
    /// # Safety
    /// The range is a new chunk's code region, which nothing uses.
    pub(super) unsafe fn open_region(addr: usize, len: usize) -> Result<(), i32> {
        // SAFETY: a query without arguments.
        if unsafe { libc::pthread_jit_write_protect_supported_np() } == 0 {
            return Err(libc::ENOTSUP);
        }
        let prot = libc::PROT_READ | libc::PROT_WRITE | libc::PROT_EXEC;
        // SAFETY: the caller owns the range; it is `MAP_JIT` memory, where read/write/execute
        // is allowed (and seen one way at a time per thread).
        if unsafe { libc::mprotect(addr as *mut libc::c_void, len, prot) } != 0 {
            return Err(super::super::sys_posix::errno());
        }
        Ok(())
    }

    /// The calling thread sees `MAP_JIT` memory writable, not executable (all of it: the
    /// switch is per thread, not per range).
    ///
    /// # Safety
    /// Until [`end_write`], this thread runs no code from `MAP_JIT` memory.
    pub(super) unsafe fn begin_write(_addr: usize, _len: usize) -> Result<(), i32> {
        // SAFETY: changes only this thread's view of MAP_JIT memory (the caller's contract).
        unsafe { libc::pthread_jit_write_protect_np(0) };
        Ok(())
    }

    /// The calling thread sees `MAP_JIT` memory executable, not writable, again.
    ///
    /// # Safety
    /// No reference into `MAP_JIT` memory that this thread writes through outlives it.
    pub(super) unsafe fn end_write(_addr: usize, _len: usize) -> Result<(), i32> {
        // SAFETY: changes only this thread's view of MAP_JIT memory.
        unsafe { libc::pthread_jit_write_protect_np(1) };
        Ok(())
    }

    /// `MADV_FREE`: the OS may take the pages back; they read as before or as zero.
    ///
    /// # Safety
    /// The caller owns the range and nothing needs its contents.
    pub(super) unsafe fn discard(addr: usize, len: usize) -> Result<(), i32> {
        // SAFETY: see the function's contract.
        unsafe { super::super::sys_posix::madvise(addr, len, libc::MADV_FREE) }
    }
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
