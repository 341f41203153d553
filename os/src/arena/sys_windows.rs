//! Windows: the arena's system calls, over `VirtualAlloc` and friends.
//!
//! Windows gives reservations without commit (`VirtualAlloc(MEM_RESERVE)`), commit on
//! demand (`MEM_COMMIT`), `VirtualProtect` to `PAGE_READWRITE`, `PAGE_EXECUTE_READ` and
//! `PAGE_READONLY` (never `PAGE_EXECUTE_READWRITE`), `MEM_DECOMMIT` to give pages back
//! (they read as zero when committed again) and `FlushInstructionCache`. Reserved pages
//! are committed when they are first made writable, and the data region's, which rest
//! writable and are handed out without a protection change, when they are handed out
//! ([`commit_writable`]); freed ones are decommitted. So an idle arena costs address
//! space, not commit charge (committed pages count against the system's commit limit
//! whether touched or not).
//!
//! It lacks: releasing part of a reservation (`MEM_RELEASE` frees a whole reservation, so
//! an aligned one is found by reserving, releasing and reserving again at the aligned
//! address), the packed arena's two views of one memory at chosen addresses (that needs
//! `VirtualAlloc2` placeholders and `MapViewOfFile3`, not written: packed mode is
//! [`ArenaError::Unsupported`](super::ArenaError::Unsupported)), advice (`MADV_*`: refused, best effort), `fork` (the fork
//! generation never changes), and map-count or address-space limits to report.
//!
//! Errors are `GetLastError` codes, which `std::io::Error::from_raw_os_error` names on
//! Windows.

use super::sys_api::{Advice, Prot};
use std::os::windows::io::OwnedHandle;
use windows_sys::Win32::Foundation::{
    GetLastError, ERROR_COMMITMENT_LIMIT, ERROR_NOT_ENOUGH_MEMORY, ERROR_NOT_SUPPORTED,
    ERROR_OUTOFMEMORY,
};
use windows_sys::Win32::System::Diagnostics::Debug::FlushInstructionCache;
use windows_sys::Win32::System::Memory::{
    VirtualAlloc, VirtualFree, VirtualProtect, VirtualQuery, MEMORY_BASIC_INFORMATION, MEM_COMMIT,
    MEM_DECOMMIT, MEM_RELEASE, MEM_RESERVE, PAGE_EXECUTE_READ, PAGE_NOACCESS,
    PAGE_PROTECTION_FLAGS, PAGE_READONLY, PAGE_READWRITE,
};
use windows_sys::Win32::System::SystemInformation::{GetSystemInfo, SYSTEM_INFO};
use windows_sys::Win32::System::Threading::GetCurrentProcess;

fn last_error() -> i32 {
    // SAFETY: GetLastError only reads the calling thread's last-error value.
    unsafe { GetLastError() as i32 }
}

/// The `PAGE_*` protection of `prot`.
fn page_flags(prot: Prot) -> PAGE_PROTECTION_FLAGS {
    match prot {
        Prot::Read => PAGE_READONLY,
        Prot::ReadWrite => PAGE_READWRITE,
        Prot::ReadExecute => PAGE_EXECUTE_READ,
    }
}

/// Reserves `len` bytes of address space (`MEM_RESERVE`, `PAGE_NOACCESS`): no commit
/// charge, no pages.
pub(crate) fn reserve(len: usize) -> Result<usize, i32> {
    // SAFETY: a fresh reservation at an address the system picks overlaps nothing.
    let p = unsafe { VirtualAlloc(std::ptr::null(), len, MEM_RESERVE, PAGE_NOACCESS) };
    if p.is_null() {
        Err(last_error())
    } else {
        Ok(p as usize)
    }
}

/// Reserves `len` bytes aligned to `align` (a power of two, at least a page) as one
/// reservation starting at the returned address: first exactly `len` (reservations are
/// 64 KiB-aligned, sometimes more), else a `len + align` reservation shows where an aligned
/// range is free; it is released and the aligned range reserved. Another thread may take
/// that range meanwhile: tried a few times. On failure, the size asked for and the error.
pub(crate) fn reserve_aligned(len: usize, align: usize) -> Result<usize, (usize, i32)> {
    let exact = reserve(len).map_err(|e| (len, e))?;
    if exact.is_multiple_of(align) {
        return Ok(exact);
    }
    // SAFETY: the reservation just made, which nothing uses.
    unsafe { unmap(exact, len) };
    let total = len
        .checked_add(align)
        .ok_or((len, ERROR_NOT_ENOUGH_MEMORY as i32))?;
    let mut error = ERROR_NOT_ENOUGH_MEMORY as i32;
    for _ in 0..8 {
        let raw = reserve(total).map_err(|e| (total, e))?;
        let start = raw.next_multiple_of(align);
        // SAFETY: the reservation just made, which nothing uses.
        unsafe { unmap(raw, total) };
        // SAFETY: a reservation at a range that was free a moment ago; if something took
        // it since, the call fails and changes nothing.
        let p = unsafe { VirtualAlloc(start as *const _, len, MEM_RESERVE, PAGE_NOACCESS) };
        if !p.is_null() {
            return Ok(start);
        }
        error = last_error();
    }
    Err((len, error))
}

/// Reserves and commits `len` bytes read/write starting at a multiple of `align` (a power
/// of two, at least a page), as one reservation starting there. On failure, the size asked
/// for and the error.
pub(crate) fn map_private_aligned(len: usize, align: usize) -> Result<usize, (usize, i32)> {
    let start = reserve_aligned(len, align)?;
    // SAFETY: commits the reservation just made, which nothing uses.
    let p = unsafe { VirtualAlloc(start as *const _, len, MEM_COMMIT, PAGE_READWRITE) };
    if p.is_null() {
        let error = last_error();
        // SAFETY: the reservation just made, which nothing uses.
        unsafe { unmap(start, len) };
        return Err((len, error));
    }
    Ok(start)
}

/// Gives `[addr, addr + len)` protection `prot`, committing reserved pages that are made
/// writable. Reserved pages asked to be read-only or executable stay reserved: they hold
/// nothing, and the arena makes pages writable before it puts anything in them.
///
/// # Safety
/// The caller owns the range (it lies in a reservation of this arena), and no reference
/// into it outlives a change that makes it unreadable or unwritable.
pub(crate) unsafe fn protect(addr: usize, len: usize, prot: Prot) -> Result<(), i32> {
    let end = addr
        .checked_add(len)
        .ok_or(ERROR_NOT_ENOUGH_MEMORY as i32)?;
    let mut at = addr;
    while at < end {
        let mut info = MEMORY_BASIC_INFORMATION {
            BaseAddress: std::ptr::null_mut(),
            AllocationBase: std::ptr::null_mut(),
            AllocationProtect: 0,
            PartitionId: 0,
            RegionSize: 0,
            State: 0,
            Protect: 0,
            Type: 0,
        };
        let size = std::mem::size_of::<MEMORY_BASIC_INFORMATION>();
        // SAFETY: VirtualQuery writes at most `size` bytes into `info`.
        if unsafe { VirtualQuery(at as *const _, &mut info, size) } == 0 {
            return Err(last_error());
        }
        // The run of pages from `at` in one state and protection, cut at `end`.
        let run_end = (info.BaseAddress as usize)
            .saturating_add(info.RegionSize)
            .min(end);
        if run_end <= at {
            return Err(ERROR_NOT_SUPPORTED as i32);
        }
        let run = run_end - at;
        if info.State == MEM_RESERVE {
            if prot == Prot::ReadWrite {
                // SAFETY: commits reserved pages of the caller's range.
                let p = unsafe { VirtualAlloc(at as *const _, run, MEM_COMMIT, PAGE_READWRITE) };
                if p.is_null() {
                    return Err(last_error());
                }
            }
        } else {
            let mut old: PAGE_PROTECTION_FLAGS = 0;
            // SAFETY: committed pages of the caller's range (see the contract).
            if unsafe { VirtualProtect(at as *const _, run, page_flags(prot), &mut old) } == 0 {
                return Err(last_error());
            }
        }
        at = run_end;
    }
    Ok(())
}

/// A new region whose free pages rest writable (the data region): left reserved, no
/// commit charge; each run is committed when the arena hands it out ([`commit_writable`]).
///
/// # Safety
/// The caller owns the range.
pub(crate) unsafe fn rest_writable(_addr: usize, _len: usize) -> Result<(), i32> {
    Ok(())
}

/// Commits `[addr, addr + len)` read/write (the pages containing it): pages of a region
/// that rests writable, about to be handed out. Pages already committed stay as they are
/// (they are read/write: nothing else is asked of such a region).
///
/// # Safety
/// The caller owns the range, which lies in a reservation of this arena whose pages are
/// reserved or committed read/write.
pub(crate) unsafe fn commit_writable(addr: usize, len: usize) -> Result<(), i32> {
    // SAFETY: commits pages of the caller's range (see the contract); committing
    // committed pages with their own protection changes nothing.
    let p = unsafe { VirtualAlloc(addr as *const _, len, MEM_COMMIT, PAGE_READWRITE) };
    if p.is_null() {
        Err(last_error())
    } else {
        Ok(())
    }
}

/// Windows has none of the advice the arena gives: refused, best effort.
///
/// # Safety
/// The caller owns the range.
pub(crate) unsafe fn advise(_addr: usize, _len: usize, _advice: Advice) -> Result<(), i32> {
    Err(ERROR_NOT_SUPPORTED as i32)
}

/// Returns `[addr, addr + len)` to the OS (`MEM_DECOMMIT`): the pages stay reserved until
/// they are made writable, or, in the region that rests writable (the data region), until
/// the arena hands them out again ([`commit_writable`]); they read as zero then. `shared`
/// never holds on Windows (no packed mode).
///
/// # Safety
/// The caller owns the range and nothing needs its contents any more.
pub(crate) unsafe fn release(
    addr: usize,
    len: usize,
    _shared: bool,
    _rest: Prot,
) -> Result<(), i32> {
    // SAFETY: decommits pages of the caller's range (see the contract).
    if unsafe { VirtualFree(addr as *mut _, len, MEM_DECOMMIT) } == 0 {
        return Err(last_error());
    }
    Ok(())
}

/// Frees the whole reservation that starts at `addr` (`MEM_RELEASE`; `len` is its length,
/// which Windows does not take).
///
/// # Safety
/// `addr` is the start of a reservation the caller made and nothing refers to it any more.
pub(crate) unsafe fn unmap(addr: usize, _len: usize) {
    // SAFETY: see the function's contract.
    let _ = unsafe { VirtualFree(addr as *mut _, 0, MEM_RELEASE) };
}

/// Packed mode needs one memory mapped twice at chosen addresses: not written for Windows.
pub(crate) use super::sys_api::packed_mode_unsupported as check_packed;

/// Code pages are protected in place (`VirtualProtect`): no per-thread JIT memory.
pub(crate) const JIT: Option<super::sys_api::PerThreadJit> = None;

/// Never called: [`check_packed`] refuses packed mode first.
pub(crate) fn memfd(_len: usize) -> Result<OwnedHandle, (&'static str, i32)> {
    Err((
        "CreateFileMapping (not written for Windows)",
        ERROR_NOT_SUPPORTED as i32,
    ))
}

/// Never called: [`check_packed`] refuses packed mode first.
///
/// # Safety
/// As Linux's `map_file_at`.
pub(crate) unsafe fn map_file_at(
    _addr: usize,
    _len: usize,
    _prot: Prot,
    _memory: &OwnedHandle,
    _offset: usize,
) -> Result<(), i32> {
    Err(ERROR_NOT_SUPPORTED as i32)
}

/// The system page size (`GetSystemInfo`).
pub(crate) fn page_size() -> usize {
    // SAFETY: SYSTEM_INFO is plain data, all-zero is a valid value.
    let mut info: SYSTEM_INFO = unsafe { std::mem::zeroed() };
    // SAFETY: GetSystemInfo fills the struct we pass.
    unsafe { GetSystemInfo(&mut info) };
    match usize::try_from(info.dwPageSize) {
        Ok(size) if size.is_power_of_two() => size,
        _ => 4096,
    }
}

/// Windows has no map-count limit.
pub(crate) fn max_map_count() -> Option<u64> {
    None
}

/// Not counted.
pub(crate) fn map_count() -> Option<u64> {
    None
}

/// No address-space limit to report (the commit limit is the system's).
pub(crate) fn address_space_limit() -> Option<u64> {
    None
}

/// Whether a failed call's error means memory, commit or address space ran out.
pub(crate) fn is_out_of_memory(error: i32) -> bool {
    [
        ERROR_NOT_ENOUGH_MEMORY,
        ERROR_OUTOFMEMORY,
        ERROR_COMMITMENT_LIMIT,
    ]
    .iter()
    .any(|&e| e as i32 == error)
}

/// No `fork` on Windows: always generation 0.
pub(crate) fn fork_generation() -> u64 {
    0
}

/// No `fork` on Windows: nothing to register.
pub(crate) fn register_fork_hooks() -> Result<(), i32> {
    Ok(())
}

/// No `fork` on Windows: no memory is ever shared with a child.
pub(crate) fn forks_begun() -> u64 {
    0
}

/// Decommitted pages read as zero when committed again: free pages always do.
pub(crate) fn free_pages_read_zero(_shared: bool) -> bool {
    true
}

/// Probes made so far: none on Windows (nothing to probe).
#[cfg(test)]
pub(crate) static PROBES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Makes instructions written to `[start, end)` visible to instruction fetch
/// (`FlushInstructionCache`; required by Windows on every architecture).
///
/// # Safety
/// `[start, end)` is mapped memory of this process.
pub(crate) unsafe fn flush_icache(start: usize, end: usize) {
    // SAFETY: cache maintenance over a range of this process the caller says is mapped;
    // GetCurrentProcess returns a pseudo-handle that needs no closing.
    let _ = unsafe { FlushInstructionCache(GetCurrentProcess(), start as *const _, end - start) };
}
