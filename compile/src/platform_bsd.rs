//! What macOS and FreeBSD share of the driver's OS-specific pieces (both BSD-derived):
//! `getentropy` for random names, and no way to set another process's resource limits
//! (`prlimit` is Linux's: a child's limit is set by the child itself between `fork` and
//! `exec`, in each OS's `limit_memory_at_exec`). Each OS's own file (`platform_macos.rs`,
//! `platform_freebsd.rs`) re-exports these. Built, never run: no Mac or FreeBSD machine
//! ran this code.

/// Fills `bytes` from the kernel's random source (`getentropy`, at most 256 bytes a call);
/// returns how many were filled.
pub(crate) fn fill_random(bytes: &mut [u8]) -> std::io::Result<usize> {
    let len = bytes.len().min(256);
    // SAFETY: getentropy writes `len` bytes into the buffer, which has at least that many.
    if unsafe { libc::getentropy(bytes.as_mut_ptr().cast(), len) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(len)
}

/// Sets `RLIMIT_DATA` (soft and hard) of this process with `None`; another process's
/// limit cannot be set from outside here (no `prlimit`), so `Some(pid)` is an
/// `Unsupported` error (the driver limits its children with `limit_memory_at_exec`).
pub(crate) fn limit_data_memory(
    pid: Option<rustix::process::Pid>,
    bytes: u64,
) -> std::io::Result<()> {
    if pid.is_some() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            "setting another process's memory limit is implemented on Linux only \
             (ELFJIT_COMPILE_MEMORY=0 compiles without one)",
        ));
    }
    let limit = rustix::process::Rlimit {
        current: Some(bytes),
        maximum: Some(bytes),
    };
    rustix::process::setrlimit(rustix::process::Resource::Data, limit)?;
    Ok(())
}
