//! Windows: the observers' OS calls. Windows has no perf (its profilers read PDBs and ETW
//! events, not perf maps or jitdumps) and no `__register_frame` unwinder (x64 unwinding
//! uses `RtlAddFunctionTable` with `.pdata`, which ELF kernels do not carry): the perf map
//! and jitdump files are refused with `Unsupported` (safe_file_windows.rs), no unwinder
//! is found, and the GDB JIT interface (a plain symbol in this process) still works.

use std::ffi::{c_void, CStr};
use std::fs::File;
use std::io;
use std::time::{SystemTime, UNIX_EPOCH};

/// Nanoseconds since the Unix epoch (no jitdump is written here: only for the types).
pub(crate) fn monotonic_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// perf's mmap marker: none on Windows.
pub(crate) struct ExecMarker;

impl ExecMarker {
    /// Refused: there is no perf on Windows to see the mapping.
    pub(crate) fn map(_file: &File) -> io::Result<ExecMarker> {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "jitdump files are for Linux perf; not on Windows",
        ))
    }
}

/// No `dlsym` scope to search on Windows: the unwinder is not looked for.
pub(crate) fn global_symbol(_name: &CStr) -> Option<*mut c_void> {
    None
}

/// See [`global_symbol`].
pub(crate) fn object_base(_address: *mut c_void) -> Option<usize> {
    None
}
