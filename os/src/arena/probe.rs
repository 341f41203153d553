//! A packed arena's one-time check that code written through the writable view is what
//! runs at the executable view, rewritten in place. Real CPUs fetch it once the
//! instruction cache is maintained; qemu-user does not: it caches its translation of guest
//! code per page and learns of writes only through the mapping that runs, so a reused slot
//! would keep running the module that was there before. Such a system gets a clear error
//! instead of wrong results.

use super::chunk::Chunk;
use super::ArenaError;

/// A function `extern "C" fn() -> u32` returning `value` (below 256), for the host.
fn returning(value: u32) -> Vec<u8> {
    let words: &[u32] = match std::env::consts::ARCH {
        // mov eax, imm32 / ret, written out byte by byte below.
        "x86_64" | "x86" => return [0xb8, value as u8, 0, 0, 0, 0xc3].to_vec(),
        "aarch64" => &[0x5280_0000 | (value << 5), 0xd65f_03c0],
        "riscv64" => &[(value << 20) | (10 << 7) | 0x13, 0x0000_8067],
        "powerpc64" => &[0x3860_0000 | value, 0x4e80_0020],
        "loongarch64" => &[0x0280_0000 | (value << 10) | 4, 0x4c00_0020],
        _ => &[],
    };
    words.iter().flat_map(|w| w.to_le_bytes()).collect()
}

/// Writes a function returning 1 through `chunk`'s writable view, runs it from the
/// executable view, rewrites it to return 2 and runs it again.
pub(crate) fn check_aliased_code(chunk: &Chunk) -> Result<(), ArenaError> {
    let Some(code) = chunk.regions.first() else {
        return Ok(());
    };
    for value in [1, 2] {
        let bytes = returning(value);
        if bytes.is_empty() {
            // No encoding for this architecture: nothing to check with.
            return Ok(());
        }
        // SAFETY: the chunk is a fresh probe chunk nothing else uses; its code region is
        // writable at `writer` and at least a page long; `bytes` is a complete function of
        // type `extern "C" fn() -> u32` for this host, visible at `target` (the same memfd
        // page) after the flush, which covers exactly the bytes written.
        let got = unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), code.writer as *mut u8, bytes.len());
            std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
            crate::icache::flush(code.target, code.target + bytes.len());
            let f: extern "C" fn() -> u32 = std::mem::transmute(code.target);
            f()
        };
        if got != value {
            return Err(ArenaError::PackedUnavailable {
                step: "running rewritten code: instruction fetch at the executable view kept \
                       code replaced through the writable view (an emulator such as \
                       qemu-user caches translated code)",
                errno: 0,
            });
        }
    }
    Ok(())
}
