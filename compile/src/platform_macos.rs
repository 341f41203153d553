//! macOS: the driver's OS-specific pieces. macOS gives `getentropy`; it lacks `pipe2`
//! (a pipe is made, then marked close-on-exec: a `fork` by another thread in between
//! could inherit it, a window the driver's own children never hit since it spawns under
//! its child lock, but another library's could), `pidfd_open` (the child runner polls in
//! short slices; `kqueue` `EVFILT_PROC` would do, not written) and `/proc/<pid>/fd/<n>`
//! for the side channel clang writes its dependency list to (child.rs): compiling with
//! the cache's include tracking does not work there yet.
//!
//! It lacks a memory limit a parent can put on a child that bounds what the child
//! allocates: `RLIMIT_AS` and `RLIMIT_DATA` both bound the whole address space there (the
//! dyld shared region of several GiB included), and between `fork` and `exec` they are
//! refused below what the forked copy of the parent already maps (XNU's
//! `vm_map_set_size_limit`/`vm_map_set_data_limit`). So compiles run without a memory limit
//! by default, and an explicit `ELFJIT_COMPILE_MEMORY` is an `Unsupported` error.
//!
//! Built (`cargo check --target aarch64-apple-darwin` and `x86_64-apple-darwin`), never
//! run: no Mac ran this code.

use std::os::fd::OwnedFd;

pub(crate) use crate::platform_bsd::{fill_random, limit_data_memory};

/// A child's memory limit cannot be enforced on macOS (see the file's opening): an
/// `Unsupported` error saying so.
pub(crate) fn limit_memory_at_exec(
    _cmd: &mut std::process::Command,
    _bytes: u64,
) -> std::io::Result<bool> {
    Err(std::io::Error::new(
        std::io::ErrorKind::Unsupported,
        "a child's memory limit cannot be enforced on macOS (RLIMIT_AS and RLIMIT_DATA \
         bound the whole address space there, dyld's shared region included); \
         unset ELFJIT_COMPILE_MEMORY or set it to 0",
    ))
}

/// No compiler memory limit unless one is asked for (and then refused).
pub(crate) const COMPILE_MEMORY_BY_DEFAULT: bool = false;

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
