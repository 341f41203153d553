//! Unix (Linux, macOS, FreeBSD): the observers' OS calls. perf exists on Linux only, but the
//! calls below are POSIX: a monotonic clock for jitdump timestamps, a `PROT_EXEC` file
//! mapping for perf's mmap event, and `dlsym`/`dladdr` to find the process's unwinder.

use std::ffi::{c_void, CStr};
use std::fs::File;
use std::io;

/// Nanoseconds of `CLOCK_MONOTONIC` (the clock `perf record -k mono` uses).
pub(crate) fn monotonic_ns() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid timespec to write; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    (now.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(now.tv_nsec as u64)
}

/// A private read/exec mapping of a file's first page, kept only so that perf records an
/// mmap event naming the file; unmapped on drop.
pub(crate) struct ExecMarker {
    address: *mut c_void,
    len: usize,
}

// SAFETY: nothing reads through the mapping; it is unmapped once, in drop.
unsafe impl Send for ExecMarker {}

impl ExecMarker {
    /// Maps the first page of `file` readable and executable.
    pub(crate) fn map(file: &File) -> io::Result<ExecMarker> {
        use std::os::fd::AsRawFd;
        // SAFETY: sysconf has no memory arguments.
        let len = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as usize;
        // SAFETY: a new private read/exec mapping of an open file; nothing is ever read or
        // executed through it, and it is unmapped in drop.
        let address = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_EXEC,
                libc::MAP_PRIVATE,
                file.as_raw_fd(),
                0,
            )
        };
        if address == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(ExecMarker { address, len })
    }
}

impl Drop for ExecMarker {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`, unmapped once.
        unsafe { libc::munmap(self.address, self.len) };
    }
}

/// The address of `name` in the process's global scope (`dlsym(RTLD_DEFAULT)`).
pub(crate) fn global_symbol(name: &CStr) -> Option<*mut c_void> {
    // SAFETY: `name` is NUL-terminated; RTLD_DEFAULT is always a valid handle.
    let address = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
    (!address.is_null()).then_some(address)
}

/// The base address of the loaded object that contains `address`.
pub(crate) fn object_base(address: *mut c_void) -> Option<usize> {
    // SAFETY: dladdr only reads the dynamic linker's tables; `info` is a valid out value.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: see above.
    let found = unsafe { libc::dladdr(address, &mut info) };
    (found != 0).then_some(info.dli_fbase as usize)
}
