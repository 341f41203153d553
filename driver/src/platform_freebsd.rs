//! FreeBSD: the driver's OS-specific pieces. FreeBSD gives `pipe2(O_CLOEXEC)` and
//! `getentropy`; it lacks `pidfd_open` (the child runner polls in short slices; a
//! `kqueue` `EVFILT_PROC` watch would do what a pidfd does, not written) and, unless
//! procfs is mounted, `/proc/<pid>/fd/<n>` for the side channel clang writes its dependency
//! list to (child.rs): compiling with the cache's include tracking is untested there.
//!
//! Built (`cargo check --target x86_64-unknown-freebsd`), never run.

use std::os::fd::OwnedFd;

pub(crate) use crate::platform_bsd::{fill_random, limit_data_memory};

/// A pipe `(read, write)`, both ends close-on-exec from the start.
pub(crate) fn pipe_cloexec() -> std::io::Result<(OwnedFd, OwnedFd)> {
    Ok(rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?)
}

/// No pidfd on FreeBSD: the caller polls in slices.
pub(crate) fn exit_notifier(_pid: rustix::process::Pid) -> Option<OwnedFd> {
    None
}
