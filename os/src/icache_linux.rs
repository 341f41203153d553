//! Linux: making published code visible to *other* threads, on the architectures where
//! flushing from the writing core is not enough.
//!
//! - aarch64: `__clear_cache` cleans the data cache and invalidates the instruction cache
//!   by address (`dc cvau`/`ic ivau`, broadcast to every core), but a core that already
//!   fetched the old instructions (a thread that ran the module that used the range
//!   before) may still execute them until it takes a context synchronisation event.
//!   `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE)` (Linux 4.16) makes every
//!   core running a thread of this process take one before the call returns; the process
//!   registers for it once. Where the kernel lacks it (older kernels, some emulators), the
//!   fallback is what the architecture gives: a thread synchronises at its next exception
//!   return (a system call, an interrupt, being scheduled), so code published into a reused
//!   range is safe to call from another thread once that thread has made a system call or
//!   been rescheduled after the publish (a lock handing the pointer over usually does).
//! - riscv64: `fence.i` orders only the calling hart; `riscv_flush_icache(start, end, 0)`
//!   (flags 0: every hart of the process) is what `flush` calls there.
//!
//! x86_64 needs nothing more (coherent fetch); ppc64le is not handled beyond the flush
//! (docs/os-support.md).

use crate::cross_thread::CrossThreadSync;
use std::sync::OnceLock;

/// `MEMBARRIER_CMD_QUERY` and the two commands used, from the kernel's
/// `include/uapi/linux/membarrier.h`.
#[cfg(target_arch = "aarch64")]
const MEMBARRIER_CMD_QUERY: libc::c_int = 0;
#[cfg(target_arch = "aarch64")]
const MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE: libc::c_int = 1 << 5;
#[cfg(target_arch = "aarch64")]
const MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_SYNC_CORE: libc::c_int = 1 << 6;

#[cfg(target_arch = "aarch64")]
fn membarrier(cmd: libc::c_int) -> Result<libc::c_long, i32> {
    // SAFETY: membarrier takes a command and flags (0) and touches no memory of ours.
    let r = unsafe { libc::syscall(libc::SYS_membarrier, cmd, 0 as libc::c_uint) };
    if r < 0 {
        Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
    } else {
        Ok(r)
    }
}

/// What this process does after publishing code (decided, and registered, once).
pub(crate) fn cross_thread_sync() -> CrossThreadSync {
    static MODE: OnceLock<CrossThreadSync> = OnceLock::new();
    *MODE.get_or_init(decide)
}

#[cfg(target_arch = "aarch64")]
fn decide() -> CrossThreadSync {
    let supported = match membarrier(MEMBARRIER_CMD_QUERY) {
        Ok(mask) => mask,
        Err(errno) => return CrossThreadSync::Unavailable { errno },
    };
    if supported & libc::c_long::from(MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE) == 0 {
        return CrossThreadSync::Unavailable { errno: 0 };
    }
    match membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_SYNC_CORE) {
        Ok(_) => CrossThreadSync::Membarrier,
        Err(errno) => CrossThreadSync::Unavailable { errno },
    }
}

#[cfg(not(target_arch = "aarch64"))]
fn decide() -> CrossThreadSync {
    CrossThreadSync::NotNeeded
}

/// After code was published (written, protected and flushed): makes every thread of the
/// process fetch it afresh before it next runs code (aarch64: the membarrier; nothing
/// elsewhere, or where the kernel lacks it). Returns what was done.
pub(crate) fn sync_all_threads() -> CrossThreadSync {
    let mode = cross_thread_sync();
    #[cfg(target_arch = "aarch64")]
    if mode == CrossThreadSync::Membarrier {
        // Registered above, so the command cannot be refused short of a kernel bug; a
        // failure leaves the fallback's guarantee.
        let _ = membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE);
    }
    mode
}

/// riscv64: `riscv_flush_icache(start, end, 0)`, every hart of the process (`fence.i`
/// alone orders only this one). Returns the errno if the kernel refused it.
#[cfg(target_arch = "riscv64")]
pub(crate) fn riscv_flush_icache(start: usize, end: usize) -> Result<(), i32> {
    /// `__NR_riscv_flush_icache` (arch-specific syscall base 244, + 15).
    const SYS_RISCV_FLUSH_ICACHE: libc::c_long = 259;
    // SAFETY: cache maintenance over a range the caller says is mapped; flags 0.
    let r = unsafe { libc::syscall(SYS_RISCV_FLUSH_ICACHE, start, end, 0 as libc::c_ulong) };
    if r < 0 {
        Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
    } else {
        Ok(())
    }
}
