//! Linux: the driver's OS-specific pieces. Linux gives everything the driver uses:
//! `pipe2(O_CLOEXEC)`, `pidfd_open` (5.3) to wake `poll` when a child exits,
//! `getrandom`, and `/proc/<pid>/fd/<n>` by which a child opens the parent's side-channel
//! pipe (child.rs).

use std::os::fd::OwnedFd;

/// A pipe `(read, write)`, both ends close-on-exec from the start.
pub(crate) fn pipe_cloexec() -> std::io::Result<(OwnedFd, OwnedFd)> {
    Ok(rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?)
}

/// A descriptor that becomes readable when process `pid` exits (`None`: before Linux 5.3,
/// and the caller polls in slices).
pub(crate) fn exit_notifier(pid: rustix::process::Pid) -> Option<OwnedFd> {
    rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).ok()
}

/// Fills `bytes` from the kernel's random source; returns how many were filled.
pub(crate) fn fill_random(bytes: &mut [u8]) -> std::io::Result<usize> {
    Ok(rustix::rand::getrandom(
        bytes,
        rustix::rand::GetRandomFlags::empty(),
    )?)
}

/// A child's memory limit is put on with `prlimit` once it exists (so the standard library
/// may start it with `posix_spawn`): nothing to do before the spawn, the caller calls
/// [`limit_data_memory`] with its pid.
pub(crate) fn limit_memory_at_exec(
    _cmd: &mut std::process::Command,
    _bytes: u64,
) -> std::io::Result<bool> {
    Ok(false)
}

/// The compiler memory limit applies when `ELFJIT_COMPILE_MEMORY` is unset.
pub(crate) const COMPILE_MEMORY_BY_DEFAULT: bool = true;

/// Sets `RLIMIT_DATA` (soft and hard) of `pid`, this process with `None` (`prlimit`).
pub(crate) fn limit_data_memory(
    pid: Option<rustix::process::Pid>,
    bytes: u64,
) -> std::io::Result<()> {
    let limit = rustix::process::Rlimit {
        current: Some(bytes),
        maximum: Some(bytes),
    };
    rustix::process::prlimit(pid, rustix::process::Resource::Data, limit)?;
    Ok(())
}
