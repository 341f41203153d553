//! `prefault::code_around` on a fresh executable mapping of a real file (this test's own
//! binary, mapped again read/execute): none of its pages is in the page tables before, and
//! every page of the window around the given address is after, and no page far from it.
//! Native only: qemu-user accepts `MADV_POPULATE_READ` and does nothing, and its
//! `/proc/self/pagemap` is the host process's. Linux only (`/proc`, `MADV_POPULATE_READ`).
#![cfg(target_os = "linux")]

mod common;

use elfjit_os::prefault::{code_around, REACH};
use std::os::fd::AsRawFd;

/// `len` bytes of `file` mapped private, read/execute, none of them touched yet.
struct Mapped {
    start: usize,
    len: usize,
}

impl Mapped {
    fn new(file: &std::fs::File, len: usize) -> Mapped {
        // SAFETY: a fresh private mapping of an open file; nothing else refers to it.
        let start = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_EXEC,
                libc::MAP_PRIVATE,
                file.as_raw_fd(),
                0,
            )
        };
        assert_ne!(start, libc::MAP_FAILED, "mmap of the test binary");
        Mapped {
            start: start as usize,
            len,
        }
    }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        // SAFETY: our own mapping, no longer used.
        unsafe { libc::munmap(self.start as *mut libc::c_void, self.len) };
    }
}

#[cfg_attr(
    not(target_arch = "x86_64"),
    ignore = "qemu-user ignores the advice, and its /proc/self/pagemap is the host's"
)]
#[test]
fn maps_every_page_of_the_window_and_nothing_far_from_it() {
    let file = std::fs::File::open("/proc/self/exe").expect("our executable");
    let size = file.metadata().expect("metadata").len() as usize;
    let page = 4096;
    // Larger than the window, so that both of its ends are inside the mapping.
    let len = (4 * REACH).min(size & !(page - 1));
    assert!(len > 2 * REACH, "the test binary is {size} bytes");
    let mapped = Mapped::new(&file, len);
    assert_eq!(
        common::present_pages(mapped.start, mapped.len),
        0,
        "untouched"
    );

    let address = mapped.start + len / 2 + 123;
    let windows = code_around(&[address, address + 64]);
    let start = (address - REACH) & !(page - 1);
    let end = address + 64 + REACH;
    assert_eq!(
        windows,
        [(start, end - start)],
        "one window, both addresses in it"
    );
    let pages = (end - start).div_ceil(page);
    assert_eq!(common::present_pages(start, end - start), pages);
    // The kernel maps the neighbours of each page it faults in, within an aligned 64 KiB
    // block (`fault_around_bytes`); beyond those blocks nothing is mapped.
    let around = 64 << 10;
    let (before, after) = (start - around, (end + around).next_multiple_of(around));
    assert!(before > mapped.start && after < mapped.start + mapped.len);
    assert_eq!(
        common::present_pages(mapped.start, before - mapped.start),
        0
    );
    assert_eq!(
        common::present_pages(after, mapped.start + mapped.len - after),
        0
    );
}

#[test]
fn addresses_in_no_executable_mapping_populate_nothing() {
    let data = Box::new([0u8; 64]);
    let stack = 0u64;
    let windows = code_around(&[data.as_ptr() as usize, &stack as *const u64 as usize, 0]);
    assert_eq!(windows, []);
    assert_eq!(code_around(&[]), []);
}
