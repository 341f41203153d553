//! FreeBSD: the driver's OS-specific pieces. FreeBSD gives `pipe2(O_CLOEXEC)` and
//! `getentropy`; it lacks `pidfd_open` (the child runner polls in short slices; a
//! `kqueue` `EVFILT_PROC` watch would do what a pidfd does, not written) and, unless
//! procfs is mounted, `/proc/<pid>/fd/<n>` for the side channel clang writes its dependency
//! list to (child.rs): compiling with the cache's include tracking is untested there.
//! Without `prlimit`, a child's memory limit is set in the child between `fork` and
//! `exec` (`RLIMIT_AS`: FreeBSD bounds every mapping by it, while its `RLIMIT_DATA` bounds
//! only `brk`), so those children are started with `fork` + `exec`, not `posix_spawn`.
//!
//! Built (`cargo check --target x86_64-unknown-freebsd`), never run.

use std::os::fd::OwnedFd;

pub(crate) use crate::platform_bsd::{fill_random, limit_data_memory};

/// Sets the memory limit of the child `cmd` starts to `bytes`, in the child between `fork`
/// and `exec` (`RLIMIT_AS`, soft and hard, so neither it nor what it starts can raise
/// it): `true`, set there. It counts the child's address space: mapped libraries and
/// reservations as well as what it allocates.
pub(crate) fn limit_memory_at_exec(
    cmd: &mut std::process::Command,
    bytes: u64,
) -> std::io::Result<bool> {
    use std::os::unix::process::CommandExt;
    let limit = libc::rlimit {
        rlim_cur: libc::rlim_t::try_from(bytes).unwrap_or(libc::RLIM_INFINITY),
        rlim_max: libc::rlim_t::try_from(bytes).unwrap_or(libc::RLIM_INFINITY),
    };
    let set_limit = move || {
        // SAFETY: setrlimit is a system call (async-signal safe, as the time between
        // `fork` and `exec` needs); it reads the struct we pass.
        if unsafe { libc::setrlimit(libc::RLIMIT_AS, &limit) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    };
    // SAFETY: the closure makes one async-signal-safe system call and allocates nothing
    // (the error is a raw OS error, no allocation).
    unsafe { cmd.pre_exec(set_limit) };
    Ok(true)
}

/// The compiler memory limit applies when `ELFJIT_COMPILE_MEMORY` is unset.
pub(crate) const COMPILE_MEMORY_BY_DEFAULT: bool = true;

/// A pipe `(read, write)`, both ends close-on-exec from the start.
pub(crate) fn pipe_cloexec() -> std::io::Result<(OwnedFd, OwnedFd)> {
    Ok(rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?)
}

/// No pidfd on FreeBSD: the caller polls in slices.
pub(crate) fn exit_notifier(_pid: rustix::process::Pid) -> Option<OwnedFd> {
    None
}
