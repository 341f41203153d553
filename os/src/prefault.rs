//! Faulting in the loader's own code before a fresh process's first load.
//!
//! A first load runs the parser, the planner, the linker and the arena for the first time,
//! and each of their text pages not yet in the process's page tables costs a page fault
//! (the kernel maps up to sixteen neighbouring pages at each; on a VM each fault is several
//! microseconds). `MADV_POPULATE_READ` (Linux 5.14) maps them all in one call. The pages
//! are the executable file's, already in the page cache once the process has started:
//! nothing is copied, and no memory is changed.

use crate::arena::coalesce;
use std::io::Read;

/// How far each way around each given address the pages are populated. The loader's
/// functions lie within a few hundred KiB of each other in a binary (its crates' code is
/// laid out together); this bounds the cost in a large binary to a few MiB.
pub const REACH: usize = 1 << 20;

/// The most of `/proc/self/maps` read (a process with many mappings has a long one).
const MAPS_LIMIT: u64 = 4 << 20;

/// Maps into the page tables the pages of the executable file mappings within [`REACH`] of
/// each of `addresses` (functions the caller is about to run for the first time). Returns
/// the ranges populated, `(start, len)`, sorted: none where `/proc/self/maps` cannot be
/// read, an address is in no readable, executable mapping of a file, or the kernel refuses
/// the advice (before 5.14; qemu-user accepts it and does nothing). Best effort: a failure
/// only leaves the faults to the first load.
pub fn code_around(addresses: &[usize]) -> Vec<(usize, usize)> {
    let Some(maps) = read_maps() else {
        return Vec::new();
    };
    let mut windows: Vec<(usize, usize)> = addresses
        .iter()
        .filter_map(|&address| {
            let (lo, hi) = maps
                .lines()
                .filter_map(executable_mapping)
                .find(|&(lo, hi)| lo <= address && address < hi)?;
            let page = crate::arena::sys::page_size();
            let start = address.saturating_sub(REACH).max(lo) & !(page - 1);
            let end = address.saturating_add(REACH).min(hi);
            Some((start, end - start))
        })
        .collect();
    coalesce(&mut windows);
    windows.retain(|&(start, len)| {
        // SAFETY: the range lies in a readable mapping of a file. `MADV_POPULATE_READ`
        // only faults its pages in, as reading them would, and writes no byte and changes
        // no protection; a range unmapped since `/proc/self/maps` was read makes the call
        // fail (ENOMEM), nothing more.
        unsafe {
            crate::arena::sys::advise(start, len, crate::arena::sys_api::Advice::PopulateRead)
        }
        .is_ok()
    });
    windows
}

/// `/proc/self/maps`, at most [`MAPS_LIMIT`] bytes of it.
fn read_maps() -> Option<String> {
    let file = std::fs::File::open("/proc/self/maps").ok()?;
    let mut text = String::new();
    file.take(MAPS_LIMIT).read_to_string(&mut text).ok()?;
    Some(text)
}

/// The range `[lo, hi)` of a `/proc/self/maps` line (`lo-hi perms offset dev inode path`,
/// in hex) if the mapping is readable, executable and of a file (its path is absolute: not
/// anonymous memory, nor `[vdso]`).
fn executable_mapping(line: &str) -> Option<(usize, usize)> {
    let mut fields = line.split_ascii_whitespace();
    let (lo, hi) = fields.next()?.split_once('-')?;
    let perms = fields.next()?.as_bytes();
    if perms.first() != Some(&b'r') || perms.get(2) != Some(&b'x') {
        return None;
    }
    if !fields.nth(3).is_some_and(|path| path.starts_with('/')) {
        return None;
    }
    let lo = usize::from_str_radix(lo, 16).ok()?;
    let hi = usize::from_str_radix(hi, 16).ok()?;
    (lo < hi).then_some((lo, hi))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_lines_give_readable_executable_file_ranges_only() {
        let line = "55d400000000-55d400848000 r-xp 00045000 fe:00 10027395   /usr/bin/x";
        assert_eq!(
            executable_mapping(line),
            Some((0x55d4_0000_0000, 0x55d4_0084_8000))
        );
        let file = |range: &str, perms: &str| format!("{range} {perms} 0 fe:00 7   /lib/x.so");
        assert_eq!(executable_mapping(&file("1000-3000", "--xp")), None);
        assert_eq!(executable_mapping(&file("1000-3000", "rw-p")), None);
        assert_eq!(executable_mapping(&file("3000-1000", "r-xp")), None);
        // Anonymous executable memory (a JIT's) and the vDSO are no file's.
        assert_eq!(executable_mapping("1000-3000 r-xp 0 00:00 0"), None);
        assert_eq!(
            executable_mapping("1000-3000 r-xp 0 00:00 0   [vdso]"),
            None
        );
        for bad in [
            "",
            "xyz",
            "1000 r-xp",
            "1000- r-xp",
            "g000-h000 r-xp",
            "1000-2000 r",
            "1000-2000 r-xp 0 fe:00",
        ] {
            assert_eq!(executable_mapping(bad), None, "{bad:?}");
        }
    }
}
