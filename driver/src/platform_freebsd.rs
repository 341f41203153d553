//! FreeBSD: the driver's OS-specific pieces. FreeBSD gives `pipe2(O_CLOEXEC)` and
//! `getentropy`; it lacks `pidfd_open` (the child runner polls in short slices; a
//! `kqueue` `EVFILT_PROC` watch would do what a pidfd does, not written) and, unless
//! procfs is mounted, `/proc/<pid>/fd/<n>` for the side channel clang writes its dependency
//! list to (child.rs): compiling with the cache's include tracking is untested there.
//!
//! Built (`cargo check --target x86_64-unknown-freebsd`), never run.

use std::os::fd::OwnedFd;

/// A pipe `(read, write)`, both ends close-on-exec from the start.
pub(crate) fn pipe_cloexec() -> std::io::Result<(OwnedFd, OwnedFd)> {
    Ok(rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?)
}

/// No pidfd on FreeBSD: the caller polls in slices.
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
