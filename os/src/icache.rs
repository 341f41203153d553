//! Instruction-cache maintenance after writing code, and (Linux, [`sync_all_threads`])
//! making it safe for other threads to run. x86_64 keeps instruction fetch
//! coherent with stores; aarch64, riscv64 and ppc64le need `__clear_cache` (libgcc /
//! compiler-rt, linked into every Rust program); loongarch64 needs `ibar 0`. Windows and
//! macOS have their own call, in their `arena::sys` file (`FlushInstructionCache`,
//! `sys_icache_invalidate`).

pub use crate::cross_thread::CrossThreadSync;

/// What this process does after publishing code so that other threads may run it
/// (decided, and registered with the kernel, once).
pub fn cross_thread_sync() -> CrossThreadSync {
    #[cfg(target_os = "linux")]
    return crate::icache_linux::cross_thread_sync();
    #[cfg(not(target_os = "linux"))]
    CrossThreadSync::NotNeeded
}

/// After code was published (written, protected and flushed): makes every thread of the
/// process fetch it afresh before it next runs (see [`CrossThreadSync`]). The arena and
/// [`crate::MmapBackend`] call it at the end of each publish, so from the return of
/// `publish` any thread may call the new code, including code put where another module
/// ran before. Returns what was done.
pub fn sync_all_threads() -> CrossThreadSync {
    #[cfg(target_os = "linux")]
    return crate::icache_linux::sync_all_threads();
    #[cfg(not(target_os = "linux"))]
    CrossThreadSync::NotNeeded
}

/// Makes instructions written to `[start, end)` visible to instruction fetch in this
/// process (on riscv64 Linux on every hart; on aarch64 Linux other threads also need
/// [`sync_all_threads`] once it returns). Nothing to do on x86_64 (instruction fetch is coherent with stores).
///
/// # Safety
///
/// `[start, end)` must be memory of this process that is mapped for the whole call: on
/// aarch64, riscv64 and ppc64le cache maintenance over an unmapped address faults.
pub unsafe fn flush(start: usize, end: usize) {
    if start >= end {
        return;
    }
    flush_impl(start, end);
}

#[cfg(any(windows, target_os = "macos"))]
fn flush_impl(start: usize, end: usize) {
    // SAFETY: `flush`'s caller guarantees the range is mapped memory of this process.
    unsafe { crate::arena::sys::flush_icache(start, end) };
}

#[cfg(all(
    not(any(windows, target_os = "macos")),
    any(target_arch = "x86_64", target_arch = "x86")
))]
fn flush_impl(_start: usize, _end: usize) {}

#[cfg(all(not(any(windows, target_os = "macos")), target_arch = "loongarch64"))]
fn flush_impl(_start: usize, _end: usize) {
    // SAFETY: `ibar 0` only orders instruction fetch after prior stores; it touches no
    // memory and no registers.
    unsafe { core::arch::asm!("ibar 0", options(nostack, preserves_flags)) };
}

/// compiler-rt's (or libgcc's) `__clear_cache`; on riscv64 Linux first the system call
/// that flushes every hart, not only this one (`__clear_cache` if the kernel refuses it).
#[cfg(not(any(
    windows,
    target_os = "macos",
    target_arch = "x86_64",
    target_arch = "x86",
    target_arch = "loongarch64"
)))]
fn flush_impl(start: usize, end: usize) {
    #[cfg(all(target_os = "linux", target_arch = "riscv64"))]
    if crate::icache_linux::riscv_flush_icache(start, end).is_ok() {
        return;
    }
    extern "C" {
        fn __clear_cache(start: *mut core::ffi::c_void, end: *mut core::ffi::c_void);
    }
    // SAFETY: `__clear_cache` only performs cache maintenance over the given range, which
    // the caller wrote and still owns.
    unsafe { __clear_cache(start as *mut _, end as *mut _) };
}

#[cfg(all(test, unix))]
pub(crate) mod tests {
    use super::*;
    use rustix::mm::{mmap_anonymous, mprotect, munmap, MapFlags, MprotectFlags, ProtFlags};

    /// A function returning `value` (0..=255), in the host's machine code.
    pub(crate) fn returns(value: u32) -> Vec<u8> {
        let words: Vec<u32> = if cfg!(target_arch = "x86_64") {
            // mov eax, imm32; ret
            let mut code = vec![0xb8];
            code.extend_from_slice(&value.to_le_bytes());
            code.push(0xc3);
            return code;
        } else if cfg!(target_arch = "aarch64") {
            vec![0x5280_0000 | (value << 5), 0xd65f_03c0] // mov w0, #value; ret
        } else if cfg!(target_arch = "riscv64") {
            vec![(value << 20) | (10 << 7) | 0x13, 0x0000_8067] // li a0, value; ret
        } else if cfg!(target_arch = "powerpc64") {
            vec![0x3860_0000 | value, 0x4e80_0020] // li r3, value; blr
        } else if cfg!(target_arch = "loongarch64") {
            // addi.w $a0, $zero, value; jirl $zero, $ra, 0
            vec![0x0280_0000 | (value << 10) | 4, 0x4c00_0020]
        } else {
            panic!("no test code for {}", std::env::consts::ARCH);
        };
        words.iter().flat_map(|w| w.to_le_bytes()).collect()
    }

    /// Writes `code` into the page (made read/write for it), then makes it read/execute,
    /// flushes and calls it.
    fn write_flush_call(page: *mut u8, len: usize, code: &[u8]) -> u32 {
        // SAFETY: `page` is our own `len`-byte anonymous mapping; no Rust reference into it
        // exists while its protection changes; `code` is shorter than a page and is a
        // complete function of type `extern "C" fn() -> u32` for this host.
        unsafe {
            mprotect(page.cast(), len, MprotectFlags::READ | MprotectFlags::WRITE).expect("rw");
            std::ptr::copy_nonoverlapping(code.as_ptr(), page, code.len());
            mprotect(page.cast(), len, MprotectFlags::READ | MprotectFlags::EXEC).expect("rx");
            flush(page as usize, page as usize + code.len());
            let f: extern "C" fn() -> u32 = std::mem::transmute(page);
            f()
        }
    }

    #[test]
    fn rewritten_code_runs_its_new_instructions_after_a_flush() {
        let len = rustix::param::page_size();
        // SAFETY: a fresh anonymous mapping aliases nothing.
        let page = unsafe {
            mmap_anonymous(
                std::ptr::null_mut(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::PRIVATE,
            )
        }
        .expect("mmap")
        .cast::<u8>();
        assert_eq!(write_flush_call(page, len, &returns(17)), 17);
        // The same address, new instructions: without the flush a CPU with split caches
        // may still run the old ones.
        assert_eq!(write_flush_call(page, len, &returns(42)), 42);
        // SAFETY: unmapping our own mapping; the function pointers above are dead.
        unsafe { munmap(page.cast(), len) }.expect("munmap");
    }

    #[test]
    fn other_threads_are_synchronised_as_the_architecture_needs() {
        let mode = cross_thread_sync();
        assert_eq!(sync_all_threads(), mode, "decided once");
        if cfg!(target_arch = "aarch64") {
            // Natively (Linux 4.16+) the membarrier; under qemu-user whatever the host
            // kernel and qemu give: either way one of the two, and said.
            assert!(
                matches!(
                    mode,
                    CrossThreadSync::Membarrier | CrossThreadSync::Unavailable { .. }
                ),
                "{mode:?}"
            );
            eprintln!("aarch64 cross-thread sync: {mode:?}");
        } else {
            assert_eq!(mode, CrossThreadSync::NotNeeded);
        }
    }

    /// The all-harts flush is the call `flush` makes on riscv64 Linux, and the kernel
    /// (or qemu-user) takes it.
    #[cfg(all(target_os = "linux", target_arch = "riscv64"))]
    #[test]
    fn riscv_flushes_every_hart_with_the_system_call() {
        let code = returns(7);
        let page = code.as_ptr() as usize;
        assert_eq!(
            crate::icache_linux::riscv_flush_icache(page, page + code.len()),
            Ok(())
        );
    }

    #[test]
    fn an_empty_range_is_nothing_to_do() {
        // SAFETY: an empty range touches no memory, whatever its address.
        unsafe { flush(0x1000, 0x1000) };
        // SAFETY: likewise: start past end is empty.
        unsafe { flush(0x2000, 0x1000) };
    }
}
