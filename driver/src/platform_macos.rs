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

pub(crate) use crate::platform_bsd::{fill_random, limit_data_memory};

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
