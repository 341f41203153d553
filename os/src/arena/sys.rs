//! Linux: the system calls the arena makes, each a thin wrapper that turns `-1` into an
//! errno. Every function is `unsafe` where the range it changes could be memory someone
//! else uses: the callers own the ranges they pass (they came from a reservation this
//! arena made).
//!
//! Linux gives everything the arena uses: `MAP_NORESERVE` reservations, `madvise` that
//! discards contents (`MADV_DONTNEED` for private pages, `MADV_REMOVE` for a memfd's),
//! `memfd_create` for the packed arena's two views, `MADV_DONTFORK`, `MADV_POPULATE_*`
//! (5.14), and `/proc` for the map count. It lacks nothing the arena needs; the POSIX
//! calls it shares with macOS and FreeBSD are in `sys_posix.rs`.

use super::sys_api::{Advice, Prot};
use super::sys_posix::errno;
pub(crate) use super::sys_posix::{
    address_space_limit, fork_generation, forks_begun, is_out_of_memory, map_file_at,
    map_private_aligned, page_size, protect, register_fork_hooks, unmap,
};
pub(crate) use super::sys_posix::{commit_writable, rest_writable};
use std::os::fd::{AsRawFd, OwnedFd};

/// Reserves `len` bytes of address space: inaccessible, no commit charge, no pages.
pub(crate) fn reserve(len: usize) -> Result<usize, i32> {
    super::sys_posix::reserve_with(len, libc::MAP_NORESERVE)
}

/// Reserves `len` bytes aligned to `align` (a power of two, at least a page); on failure,
/// the size asked for and the errno.
pub(crate) fn reserve_aligned(len: usize, align: usize) -> Result<usize, (usize, i32)> {
    super::sys_posix::reserve_aligned(reserve, len, align)
}

/// Gives `advice` for `[addr, addr + len)`.
///
/// # Safety
/// The caller owns the range. (No advice here discards contents.)
pub(crate) unsafe fn advise(addr: usize, len: usize, advice: Advice) -> Result<(), i32> {
    let advice = match advice {
        Advice::NoHugePages => libc::MADV_NOHUGEPAGE,
        Advice::DontFork => libc::MADV_DONTFORK,
        Advice::PopulateRead => libc::MADV_POPULATE_READ,
        Advice::PopulateWrite => libc::MADV_POPULATE_WRITE,
    };
    // SAFETY: see the function's contract.
    unsafe { super::sys_posix::madvise(addr, len, advice) }
}

/// Returns `[addr, addr + len)` to the OS: afterwards it reads as zero (checked once per
/// kind, see [`released_pages_read_zero`]) and keeps its protection. `shared`: the pages
/// are a memfd's (`MADV_REMOVE`), else private (`MADV_DONTNEED`).
///
/// # Safety
/// The caller owns the range and nothing needs its contents any more.
pub(crate) unsafe fn release(
    addr: usize,
    len: usize,
    shared: bool,
    _rest: Prot,
) -> Result<(), i32> {
    let advice = if shared {
        libc::MADV_REMOVE
    } else {
        libc::MADV_DONTNEED
    };
    note_release(shared);
    // SAFETY: see the function's contract.
    unsafe { super::sys_posix::madvise(addr, len, advice) }
}

/// Packed mode is available (whether the memfd can be mapped executable is found out when
/// it is tried).
pub(crate) fn check_packed() -> Result<(), super::error::ArenaError> {
    Ok(())
}

/// Code pages are protected in place (`mprotect`): no per-thread JIT memory.
pub(crate) const JIT: Option<super::sys_api::PerThreadJit> = None;

/// A memfd of `len` bytes (sparse: no memory until written), that may be mapped executable,
/// sealed at that size: no one (another process reaching it through `/proc/PID/fd` or
/// `/proc/PID/map_files`, included) can shrink it under its mappings, which would kill the
/// process with `SIGBUS`, or grow it, and no further seal can be added.
///
/// Not sealed against writes (`F_SEAL_FUTURE_WRITE`): that seal also refuses the hole
/// punch (`MADV_REMOVE`) the arena releases freed pages with. The caller closes the
/// descriptor once its views are mapped instead, so no descriptor to reopen for writing
/// remains (see `Chunk::new`).
pub(crate) fn memfd(len: usize) -> Result<OwnedFd, (&'static str, i32)> {
    // MFD_EXEC (Linux 6.3) asks for an executable memfd where `vm.memfd_noexec` would
    // otherwise make it non-executable; older kernels reject the flag (EINVAL): then
    // without it.
    const MFD_EXEC: libc::c_uint = 0x0010;
    let flags = libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING;
    let fd = super::sys_posix::memfd_of_len(len, &[flags | MFD_EXEC, flags])?;
    let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
    // SAFETY: adding seals to our own memfd (created with MFD_ALLOW_SEALING).
    if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, seals) } != 0 {
        return Err(("fcntl(F_ADD_SEALS) sealing the memfd's size", errno()));
    }
    Ok(fd)
}

/// `vm.max_map_count`, if readable.
pub(crate) fn max_map_count() -> Option<u64> {
    std::fs::read_to_string("/proc/sys/vm/max_map_count")
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// How many mappings the process has now (lines of `/proc/self/maps`), if readable.
pub(crate) fn map_count() -> Option<u64> {
    let maps = std::fs::read("/proc/self/maps").ok()?;
    Some(maps.iter().filter(|&&b| b == b'\n').count() as u64)
}

/// Whether any arena of this process has released written pages to the OS, private
/// (`MADV_DONTNEED`) and shared (memfd, `MADV_REMOVE`). Until one has, every page in an
/// arena's free extents is one the kernel has never handed out, and reads as zero whatever
/// the advice does: the probe below is needed only from then on.
static RELEASED: [std::sync::atomic::AtomicBool; 2] = [
    std::sync::atomic::AtomicBool::new(false),
    std::sync::atomic::AtomicBool::new(false),
];

/// Records that written pages of the kind `shared` (memfd) or private are being released.
/// Called before the advice, so that whoever takes the pages next (after the arena's lock
/// that orders the two) sees it.
fn note_release(shared: bool) {
    if let Some(flag) = RELEASED.get(usize::from(shared)) {
        flag.store(true, std::sync::atomic::Ordering::Release);
    }
}

/// Whether pages from an arena's free extents of the kind `shared` (memfd) or private read
/// as zero: always, until such pages were released (they were never written), then as
/// [`released_pages_read_zero`] says. A first load in a process thus pays for no probe.
pub(crate) fn free_pages_read_zero(shared: bool) -> bool {
    let released = RELEASED
        .get(usize::from(shared))
        .is_none_or(|f| f.load(std::sync::atomic::Ordering::Acquire));
    !released || released_pages_read_zero(shared)
}

/// Whether pages released with `MADV_DONTNEED` (private anonymous; `shared` false) or
/// `MADV_REMOVE` (memfd; `shared` true) read as zero afterwards, as Linux documents.
/// Checked once per kind on a page: emulators such as qemu-user may treat the advice as a
/// hint and keep the contents, and then the arena zeroes released pages itself before
/// handing them out.
pub(crate) fn released_pages_read_zero(shared: bool) -> bool {
    static PRIVATE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    static SHARED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    if shared {
        *SHARED.get_or_init(|| memfd(page_size()).map_or(true, |fd| probe_release(Some(&fd))))
    } else {
        *PRIVATE.get_or_init(|| probe_release(None))
    }
}

/// Probes made so far (for the test that a first load makes none).
#[cfg(test)]
pub(crate) static PROBES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Writes a page, releases it, and reads it back: whether it reads as zero.
fn probe_release(fd: Option<&OwnedFd>) -> bool {
    #[cfg(test)]
    PROBES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let len = page_size();
    let Ok(base) = reserve(len) else {
        return false;
    };
    // SAFETY: the page is the reservation just made; it is mapped read/write (a private
    // page, or the memfd's first page), written, released, read and unmapped here.
    unsafe {
        let mapped = match fd {
            None => protect(base, len, Prot::ReadWrite),
            Some(fd) => map_file_at(base, len, Prot::ReadWrite, fd, 0),
        };
        let advice = if fd.is_some() {
            libc::MADV_REMOVE
        } else {
            libc::MADV_DONTNEED
        };
        let zero = mapped.is_ok() && {
            std::ptr::write_volatile(base as *mut u8, 0xa5);
            super::sys_posix::madvise(base, len, advice).is_ok()
                && std::ptr::read_volatile(base as *const u8) == 0
        };
        unmap(base, len);
        zero
    }
}
