//! macOS: the driver's OS-specific pieces. macOS gives `getentropy`; it lacks `pipe2`
//! (a pipe is made, then marked close-on-exec: a `fork` by another thread in between
//! could inherit it, a window the driver's own children never hit since it spawns under
//! its child lock, but another library's could), `pidfd_open` (the child runner polls in
//! short slices; `kqueue` `EVFILT_PROC` would do, not written) and `/proc/<pid>/fd/<n>`
//! for the side channel clang writes its dependency list to (child.rs): compiling with
//! the cache's include tracking does not work there yet.
//!
//! Built (`cargo check --target aarch64-apple-darwin` and `x86_64-apple-darwin`), never
//! run: no Mac ran this code.

use std::os::fd::OwnedFd;

/// A pipe `(read, write)`, both ends marked close-on-exec right after they are made.
pub(crate) fn pipe_cloexec() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let (read, write) = rustix::pipe::pipe()?;
    for fd in [&read, &write] {
        rustix::io::fcntl_setfd(fd, rustix::io::FdFlags::CLOEXEC)?;
    }
    Ok((read, write))
}

/// No pidfd on macOS: the caller polls in slices.
pub(crate) fn exit_notifier(_pid: rustix::process::Pid) -> Option<OwnedFd> {
    None
}

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
/// `Unsupported` error and a compile under a memory limit fails saying so (set
/// `ELFJIT_COMPILE_MEMORY=0` to compile without one).
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
