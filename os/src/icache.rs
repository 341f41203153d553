//! Instruction-cache maintenance after writing code. x86_64 keeps instruction fetch
//! coherent with stores; aarch64, riscv64 and ppc64le need `__clear_cache` (libgcc /
//! compiler-rt, linked into every Rust program); loongarch64 needs `ibar 0`.

/// The way this host makes freshly written code visible to instruction fetch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlushMethod {
    /// Nothing to do: the caches are coherent (x86_64).
    Coherent,
    /// Call `__clear_cache(start, end)`.
    ClearCache,
    /// Execute `ibar 0`.
    Ibar,
}

/// The method for the host architecture.
pub const fn method() -> FlushMethod {
    if cfg!(target_arch = "x86_64") || cfg!(target_arch = "x86") {
        FlushMethod::Coherent
    } else if cfg!(target_arch = "loongarch64") {
        FlushMethod::Ibar
    } else {
        FlushMethod::ClearCache
    }
}

/// Makes instructions in `[start, end)` visible to instruction fetch in this process.
pub fn flush(start: usize, end: usize) {
    if start >= end {
        return;
    }
    flush_impl(start, end);
}

#[cfg(any(target_arch = "x86_64", target_arch = "x86"))]
fn flush_impl(_start: usize, _end: usize) {}

#[cfg(target_arch = "loongarch64")]
fn flush_impl(_start: usize, _end: usize) {
    // SAFETY: `ibar 0` only orders instruction fetch after prior stores; it touches no
    // memory and no registers.
    unsafe { core::arch::asm!("ibar 0", options(nostack, preserves_flags)) };
}

#[cfg(not(any(
    target_arch = "x86_64",
    target_arch = "x86",
    target_arch = "loongarch64"
)))]
fn flush_impl(start: usize, end: usize) {
    extern "C" {
        fn __clear_cache(start: *mut core::ffi::c_void, end: *mut core::ffi::c_void);
    }
    // SAFETY: `__clear_cache` only performs cache maintenance over the given range, which
    // the caller wrote and still owns.
    unsafe { __clear_cache(start as *mut _, end as *mut _) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn method_matches_the_host() {
        let expected = match std::env::consts::ARCH {
            "x86_64" => FlushMethod::Coherent,
            "loongarch64" => FlushMethod::Ibar,
            _ => FlushMethod::ClearCache,
        };
        assert_eq!(method(), expected);
    }

    #[test]
    fn flushing_a_written_range_returns() {
        let buf = vec![0u8; 256];
        let start = buf.as_ptr() as usize;
        flush(start, start + buf.len());
        flush(start, start); // empty range: nothing to do
    }
}
