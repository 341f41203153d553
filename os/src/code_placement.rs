//! Where kernel code may not start.
//!
//! libgcc's unwinder (what Rust and C programs on GNU/Linux unwind with) reads the function
//! address of each registered FDE in the FDE's own encoding, and where that encoding is
//! narrower than a pointer (clang's `.eh_frame` uses 4-byte pc-relative addresses) it takes
//! an address whose low 32 bits are all zero for a discarded link-once function and skips
//! the FDE (`unwind-dw2-fde.c`: "Assume 0 in the representable bits is NULL"). A kernel
//! whose function started at such an address could not be unwound through: a panic in a
//! callback aborted the process, in about one run in 40 of `driver/tests/observe.rs`,
//! wherever the address space layout happened to put the memory. So no code range the
//! arena or the mmap backend maps holds such an address: a mapping whose code range would
//! is kept while another is made (the OS then puts it elsewhere) and unmapped after.

/// Tries before the last mapping is kept whatever it holds. The OS places a mapping made
/// while the refused ones stay next to them, past the address they held: two tries do in
/// practice.
const TRIES: usize = 8;

/// Whether `[start, start + len)` holds an address whose low 32 bits are all zero (a range
/// that wraps does).
pub fn holds_unwind_blind_address(start: usize, len: usize) -> bool {
    if len == 0 {
        return false;
    }
    let (start, len) = (start as u64, len as u64);
    let Some(end) = start.checked_add(len) else {
        return true;
    };
    match start.checked_next_multiple_of(1 << 32) {
        Some(next) => next < end,
        None => true,
    }
}

/// Maps with `map` (which returns the mapping's start) until the `code_len` bytes at
/// `code_offset` in it hold no address [`holds_unwind_blind_address`] refuses, at most
/// [`TRIES`] times; the refused mappings stay mapped meanwhile, so that `map` is given
/// other addresses, and are given to `unmap` after. An error of `map` is returned once the
/// refused mappings are unmapped.
pub(crate) fn map_clear_of_blind_addresses<E>(
    mut map: impl FnMut() -> Result<usize, E>,
    mut unmap: impl FnMut(usize),
    code_offset: usize,
    code_len: usize,
) -> Result<usize, E> {
    let mut refused = Vec::new();
    let result = loop {
        match map() {
            Ok(start)
                if refused.len() + 1 < TRIES
                    && holds_unwind_blind_address(start.wrapping_add(code_offset), code_len) =>
            {
                refused.push(start);
            }
            other => break other,
        }
    };
    for start in refused {
        unmap(start);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    const G4: usize = 1 << 32;

    #[test]
    fn ranges_holding_an_address_with_zero_low_bits() {
        assert!(holds_unwind_blind_address(0x7f88_0000_0000, 1));
        assert!(holds_unwind_blind_address(0x7f87_ffff_f000, 0x2000));
        assert!(!holds_unwind_blind_address(0x7f87_ffff_f000, 0x1000));
        assert!(!holds_unwind_blind_address(0x7f88_0000_1000, 0x1000_0000));
        assert!(!holds_unwind_blind_address(0x7f88_0000_0000, 0));
        assert!(holds_unwind_blind_address(usize::MAX - 10, 100));
    }

    #[test]
    fn a_refused_mapping_is_kept_until_one_is_clear_then_unmapped() {
        // A top-down OS: each mapping just below the ones still mapped.
        let mut next = 3 * G4 + 0x2000;
        let mut mapped = Vec::new();
        let mut unmapped = Vec::new();
        let start = map_clear_of_blind_addresses::<()>(
            || {
                next -= 0x1000;
                mapped.push(next);
                Ok(next)
            },
            |s| unmapped.push(s),
            0x800,
            0x1000,
        )
        .unwrap();
        // The first mapping's code, [3G + 0x1800, 3G + 0x2800), is clear: kept.
        assert_eq!(start, 3 * G4 + 0x1000);
        assert_eq!(mapped, vec![3 * G4 + 0x1000]);
        assert!(unmapped.is_empty());

        let mut next = 3 * G4 + 0x1000;
        let mut unmapped = Vec::new();
        let start = map_clear_of_blind_addresses::<()>(
            || {
                next -= 0x1000;
                Ok(next)
            },
            |s| unmapped.push(s),
            0,
            0x1000,
        )
        .unwrap();
        // 3G exactly is refused; the next, below it, is clear.
        assert_eq!(start, 3 * G4 - 0x1000);
        assert_eq!(unmapped, vec![3 * G4]);
    }

    #[test]
    fn an_error_unmaps_what_was_refused_and_is_returned() {
        let mut calls = 0;
        let mut unmapped = Vec::new();
        let r = map_clear_of_blind_addresses(
            || {
                calls += 1;
                if calls == 1 {
                    Ok(G4)
                } else {
                    Err("no memory")
                }
            },
            |s| unmapped.push(s),
            0,
            16,
        );
        assert_eq!(r, Err("no memory"));
        assert_eq!(unmapped, vec![G4]);
    }

    #[test]
    fn after_every_try_the_last_mapping_is_kept() {
        let mut unmapped = Vec::new();
        let r = map_clear_of_blind_addresses::<()>(|| Ok(G4), |s| unmapped.push(s), 0, 1);
        assert_eq!(r, Ok(G4));
        assert_eq!(unmapped.len(), TRIES - 1);
    }
}
