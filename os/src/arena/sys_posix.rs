//! The POSIX memory calls that Linux, macOS and FreeBSD share: `mmap`, `mprotect`,
//! `munmap`, `sysconf`, `getrlimit`. Each OS's own file (`sys.rs`, `sys_macos.rs`,
//! `sys_freebsd.rs`) adds what differs (reservation flags, advice, releasing pages, the
//! packed arena's shared memory) and re-exports these.

use super::sys_api::Prot;
use std::os::fd::{AsRawFd, OwnedFd};

/// The `PROT_*` bits of `prot`.
pub(crate) fn bits(prot: Prot) -> libc::c_int {
    match prot {
        Prot::Read => libc::PROT_READ,
        Prot::ReadWrite => libc::PROT_READ | libc::PROT_WRITE,
        Prot::ReadExecute => libc::PROT_READ | libc::PROT_EXEC,
    }
}

/// The calling thread's last OS error.
pub(crate) fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// Reserves `len` bytes of inaccessible address space, private and anonymous, with the
/// OS's `extra` map flags.
pub(crate) fn reserve_with(len: usize, extra: libc::c_int) -> Result<usize, i32> {
    // SAFETY: a fresh private anonymous PROT_NONE mapping at an address the kernel picks
    // overlaps nothing that exists.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANON | extra,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        Err(errno())
    } else {
        Ok(p as usize)
    }
}

/// Reserves `len` bytes aligned to `align` (a power of two, at least a page) with
/// `reserve`: first exactly `len` (Linux 6.7 and later place a mapping whose length is a
/// multiple of the huge-page size on a huge-page boundary, the 2 MiB chunks ask for), else
/// `len + align`, trimmed. On failure, the size asked for and the errno.
pub(crate) fn reserve_aligned(
    reserve: fn(usize) -> Result<usize, i32>,
    len: usize,
    align: usize,
) -> Result<usize, (usize, i32)> {
    let exact = reserve(len).map_err(|e| (len, e))?;
    if exact.is_multiple_of(align) {
        return Ok(exact);
    }
    // SAFETY: the reservation just made, which nothing uses.
    unsafe { unmap(exact, len) };
    let total = len.checked_add(align).ok_or((len, libc::ENOMEM))?;
    let raw = reserve(total).map_err(|e| (total, e))?;
    // SAFETY: the reservation just made, which nothing uses.
    Ok(unsafe { trim_to_aligned(raw, total, len, align) })
}

/// Unmaps what lies before and after the first `align`-aligned `len` bytes of the mapping
/// `[raw, raw + total)` (`total >= len + align - page`), and returns their start.
///
/// # Safety
/// The mapping is the caller's, just made, and nothing uses it; `align` and `len` are
/// page multiples.
unsafe fn trim_to_aligned(raw: usize, total: usize, len: usize, align: usize) -> usize {
    let start = raw.next_multiple_of(align);
    let head = start - raw;
    let tail = total - head - len;
    // SAFETY: both ranges lie inside the mapping, page-aligned (see the contract).
    unsafe {
        if head != 0 {
            unmap(raw, head);
        }
        if tail != 0 {
            unmap(start + len, tail);
        }
    }
    start
}

/// Maps `len` bytes of `fd` from `offset`, shared, at `addr` with protection `prot`.
///
/// # Safety
/// The range must lie in a reservation the caller owns, with nothing in it in use.
#[cfg_attr(target_os = "macos", allow(dead_code))]
pub(crate) unsafe fn map_file_at(
    addr: usize,
    len: usize,
    prot: Prot,
    fd: &OwnedFd,
    offset: usize,
) -> Result<(), i32> {
    let offset = libc::off_t::try_from(offset).map_err(|_| libc::EOVERFLOW)?;
    // SAFETY: the caller owns the range (MAP_FIXED replaces only it); `fd` is open.
    let p = unsafe {
        libc::mmap(
            addr as *mut libc::c_void,
            len,
            bits(prot),
            libc::MAP_SHARED | libc::MAP_FIXED,
            fd.as_raw_fd(),
            offset,
        )
    };
    if p == libc::MAP_FAILED {
        Err(errno())
    } else {
        Ok(())
    }
}

/// A memfd of `len` bytes (Linux, FreeBSD 13): `memfd_create` with the first of
/// `flag_choices` the kernel accepts (a later one is tried when an older kernel rejects a
/// flag with `EINVAL`), sized with `ftruncate`. On failure, the step and the errno.
#[cfg(not(target_os = "macos"))]
pub(crate) fn memfd_of_len(
    len: usize,
    flag_choices: &[libc::c_uint],
) -> Result<OwnedFd, (&'static str, i32)> {
    use std::os::fd::FromRawFd;
    let mut fd = -1;
    for &flags in flag_choices {
        // SAFETY: memfd_create with a constant NUL-terminated name creates a new descriptor.
        fd = unsafe { libc::memfd_create(c"elfjit-arena".as_ptr(), flags) };
        if fd >= 0 || errno() != libc::EINVAL {
            break;
        }
    }
    if fd < 0 {
        return Err(("memfd_create", errno()));
    }
    // SAFETY: `fd` is a fresh descriptor nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let size = libc::off_t::try_from(len).map_err(|_| ("ftruncate", libc::EOVERFLOW))?;
    // SAFETY: sizing our own memfd.
    if unsafe { libc::ftruncate(fd.as_raw_fd(), size) } != 0 {
        return Err(("ftruncate", errno()));
    }
    Ok(fd)
}

/// Replaces `[addr, addr + len)` with fresh private anonymous pages (they read as zero)
/// of protection `prot`, with the OS's `extra` map flags: how an OS whose `madvise` does
/// not discard contents releases pages (Linux's does: unused there).
///
/// # Safety
/// The caller owns the range and nothing uses its contents any more.
#[cfg_attr(target_os = "linux", allow(dead_code))]
pub(crate) unsafe fn remap_zero(
    addr: usize,
    len: usize,
    prot: Prot,
    extra: libc::c_int,
) -> Result<(), i32> {
    // SAFETY: the caller owns the range; MAP_FIXED replaces only it.
    let p = unsafe {
        libc::mmap(
            addr as *mut libc::c_void,
            len,
            bits(prot),
            libc::MAP_PRIVATE | libc::MAP_ANON | libc::MAP_FIXED | extra,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        Err(errno())
    } else {
        Ok(())
    }
}

/// Makes a new region whose free pages rest writable (the data region) writable: pages
/// are backed when first written, so nothing more is needed when they are handed out.
///
/// # Safety
/// As [`protect`].
pub(crate) unsafe fn rest_writable(addr: usize, len: usize) -> Result<(), i32> {
    // SAFETY: the caller upholds `protect`'s contract.
    unsafe { protect(addr, len, Prot::ReadWrite) }
}

/// Nothing to do: writable pages are backed when first written ([`rest_writable`]).
///
/// # Safety
/// The caller owns the range.
pub(crate) unsafe fn commit_writable(_addr: usize, _len: usize) -> Result<(), i32> {
    Ok(())
}

/// Changes the protection of `[addr, addr + len)`.
///
/// # Safety
/// The caller owns the range, and no reference into it outlives a change that makes it
/// unreadable or unwritable in a way the reference relies on.
pub(crate) unsafe fn protect(addr: usize, len: usize, prot: Prot) -> Result<(), i32> {
    // SAFETY: see the function's contract.
    if unsafe { libc::mprotect(addr as *mut libc::c_void, len, bits(prot)) } != 0 {
        Err(errno())
    } else {
        Ok(())
    }
}

/// `madvise(addr, len, advice)`.
///
/// # Safety
/// The caller owns the range; advice that discards contents leaves it reading as zero (or,
/// on some systems, unchanged), so nothing may still need them.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
pub(crate) unsafe fn madvise(addr: usize, len: usize, advice: libc::c_int) -> Result<(), i32> {
    // SAFETY: see the function's contract.
    if unsafe { libc::madvise(addr as *mut libc::c_void, len, advice) } != 0 {
        Err(errno())
    } else {
        Ok(())
    }
}

/// Unmaps `[addr, addr + len)`.
///
/// # Safety
/// The caller owns the range and nothing refers to it any more.
pub(crate) unsafe fn unmap(addr: usize, len: usize) {
    // SAFETY: see the function's contract.
    let _ = unsafe { libc::munmap(addr as *mut libc::c_void, len) };
}

/// The system page size, from the C library (`sysconf`).
pub(crate) fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    match usize::try_from(size) {
        Ok(size) if size.is_power_of_two() => size,
        _ => rustix::param::page_size(),
    }
}

/// The soft `RLIMIT_AS` in bytes (`None`: unlimited or unreadable).
pub(crate) fn address_space_limit() -> Option<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we pass.
    if unsafe { libc::getrlimit(libc::RLIMIT_AS, &mut limit) } != 0 {
        return None;
    }
    // `rlim_t` is unsigned on Linux and macOS, signed on FreeBSD.
    #[allow(clippy::useless_conversion)]
    let current = u64::try_from(limit.rlim_cur).ok()?;
    (limit.rlim_cur != libc::RLIM_INFINITY).then_some(current)
}

/// Whether a failed call's errno means memory or address space ran out.
pub(crate) fn is_out_of_memory(errno: i32) -> bool {
    errno == libc::ENOMEM
}

/// Bumped in every child right after `fork`: a packed arena's writable view is not
/// inherited (Linux: `MADV_DONTFORK`), so a child must not write through it.
static FORK_GENERATION: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Bumped in the forking process twice per `fork`: just before it, and once it returned.
/// Memory a packed arena held when this count was read is shared with every child forked
/// since the count changed (their code views map the same memfd): see [`forks_begun`].
static FORKS_BEGUN: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

extern "C" fn before_fork() {
    FORKS_BEGUN.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
}

extern "C" fn after_fork_in_parent() {
    FORKS_BEGUN.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
}

extern "C" fn after_fork_in_child() {
    FORK_GENERATION.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
}

/// Registers the fork hooks (once); the error number if `pthread_atfork` refused (a
/// packed arena is then unavailable: it could not tell a forked child). Only `fork` runs
/// them: `vfork` and `posix_spawn` need none (the child shares the memory or only
/// `exec`s), but a child made with a raw `clone`/`clone3` system call that goes on running
/// this process's code is not seen (documented in SECURITY.md).
pub(crate) fn register_fork_hooks() -> Result<(), i32> {
    static HOOK: std::sync::OnceLock<i32> = std::sync::OnceLock::new();
    let code = *HOOK.get_or_init(|| {
        // SAFETY: registers handlers that only increment atomics (async-signal safe, as a
        // post-fork child handler must be; none takes a lock).
        unsafe {
            libc::pthread_atfork(
                Some(before_fork),
                Some(after_fork_in_parent),
                Some(after_fork_in_child),
            )
        }
    });
    if code == 0 {
        Ok(())
    } else {
        Err(code)
    }
}

/// The current fork generation (0 in the original process), registering the fork hooks
/// on first use.
pub(crate) fn fork_generation() -> u64 {
    let _ = register_fork_hooks();
    FORK_GENERATION.load(std::sync::atomic::Ordering::Relaxed)
}

/// How many times this process has begun or finished a `fork` (two per fork), registering
/// the fork hooks on first use. A packed arena reads it when it hands out memory; if it
/// differs when that memory is given back, a child may still run the code there (the
/// child's views share the memfd's pages), so the parent must never write or release it.
/// Reading it between the two increments of one fork counts that fork: a module being
/// allocated while the process forks is treated as inherited.
pub(crate) fn forks_begun() -> u64 {
    let _ = register_fork_hooks();
    FORKS_BEGUN.load(std::sync::atomic::Ordering::SeqCst)
}

/// Maps `len` bytes read/write, private and anonymous, starting at a multiple of `align`
/// (a power of two, at least the page size): over-maps by `align - page` and returns the
/// rest to the OS. On failure, the size asked for and the errno.
pub(crate) fn map_private_aligned(len: usize, align: usize) -> Result<usize, (usize, i32)> {
    let slack = align.saturating_sub(page_size());
    let total = len.checked_add(slack).ok_or((len, libc::ENOMEM))?;
    // SAFETY: a fresh anonymous mapping at an address the kernel chooses aliases no
    // existing Rust object.
    let raw = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            total,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANON,
            -1,
            0,
        )
    };
    if raw == libc::MAP_FAILED {
        return Err((total, errno()));
    }
    // SAFETY: the mapping just created, which nothing else uses; `align` and `len` are
    // page multiples (the caller's layout).
    Ok(unsafe { trim_to_aligned(raw as usize, total, len, align) })
}

/// What an OS without `/proc` or release probes (macOS, FreeBSD) says about its limits and
/// released pages.
#[cfg(not(target_os = "linux"))]
pub(crate) mod without_proc {
    /// No `vm.max_map_count`.
    pub(crate) fn max_map_count() -> Option<u64> {
        None
    }

    /// Not counted (no `/proc/self/maps`).
    pub(crate) fn map_count() -> Option<u64> {
        None
    }

    /// Released private pages are fresh mappings, released shared pages are zeroed by the
    /// arena (`release` refuses them): free pages always read as zero.
    pub(crate) fn free_pages_read_zero(_shared: bool) -> bool {
        true
    }

    /// Probes made so far: none (nothing to probe).
    #[cfg(test)]
    pub(crate) static PROBES: std::sync::atomic::AtomicUsize =
        std::sync::atomic::AtomicUsize::new(0);
}
