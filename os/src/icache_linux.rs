//! Linux: making published code visible to *other* threads, on the architectures where
//! flushing from the writing core is not enough.
//!
//! - aarch64: `__clear_cache` cleans the data cache and invalidates the instruction cache
//!   by address (`dc cvau`/`ic ivau`, broadcast to every core), but a core that already
//!   fetched the old instructions (a thread that ran the module that used the range
//!   before) may still execute them until it takes a context synchronisation event.
//!   `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE)` (Linux 4.16) makes every
//!   core running a thread of this process take one before the call returns; the process
//!   registers for it once. Where the kernel lacks it (older kernels, some emulators), the
//!   fallback is what the architecture gives: a thread synchronises at its next exception
//!   return (a system call, an interrupt, being scheduled), so code published into a reused
//!   range is safe to call from another thread once that thread has made a system call or
//!   been rescheduled after the publish (an uncontended lock handing the pointer over
//!   makes none: docs/os-support.md).
//! - riscv64: `fence.i` orders only the calling hart; `riscv_flush_icache(start, end, 0)`
//!   (flags 0: every hart of the process) is what `flush` calls there.
//!
//! x86_64 needs nothing more (coherent fetch); ppc64le is not handled beyond the flush
//! (docs/os-support.md).

use crate::cross_thread::CrossThreadSync;
use std::sync::OnceLock;

/// `MEMBARRIER_CMD_QUERY` and the two commands used, from the kernel's
/// `include/uapi/linux/membarrier.h`. (Built for the unit tests on every architecture: the
/// decision and the probe are tested natively too.)
#[cfg(any(target_arch = "aarch64", test))]
#[cfg_attr(not(target_arch = "aarch64"), allow(dead_code))] // tests: x86_64's seccomp one
const MEMBARRIER_CMD_QUERY: libc::c_int = 0;
#[cfg(any(target_arch = "aarch64", test))]
const MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE: libc::c_int = 1 << 5;
#[cfg(any(target_arch = "aarch64", test))]
#[cfg_attr(not(target_arch = "aarch64"), allow(dead_code))] // tests: x86_64's seccomp one
const MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_SYNC_CORE: libc::c_int = 1 << 6;

#[cfg(any(target_arch = "aarch64", test))]
#[cfg_attr(not(target_arch = "aarch64"), allow(dead_code))] // tests: x86_64's seccomp one
fn membarrier(cmd: libc::c_int) -> Result<libc::c_long, i32> {
    // SAFETY: membarrier takes a command and flags (0) and touches no memory of ours.
    let r = unsafe { libc::syscall(libc::SYS_membarrier, cmd, 0 as libc::c_uint) };
    if r < 0 {
        Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
    } else {
        Ok(r)
    }
}

/// What this process does after publishing code (decided, and registered, once).
pub(crate) fn cross_thread_sync() -> CrossThreadSync {
    static MODE: OnceLock<CrossThreadSync> = OnceLock::new();
    *MODE.get_or_init(decide)
}

#[cfg(target_arch = "aarch64")]
fn decide() -> CrossThreadSync {
    probe_membarrier()
}

#[cfg(not(target_arch = "aarch64"))]
fn decide() -> CrossThreadSync {
    CrossThreadSync::NotNeeded
}

/// Asks the kernel for the membarrier command and registers for it.
#[cfg(any(target_arch = "aarch64", test))]
#[cfg_attr(not(target_arch = "aarch64"), allow(dead_code))] // tests: x86_64's seccomp one
fn probe_membarrier() -> CrossThreadSync {
    mode_from_probes(membarrier(MEMBARRIER_CMD_QUERY), || {
        membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_SYNC_CORE)
    })
}

/// The mode from the kernel's answers: `query` to `MEMBARRIER_CMD_QUERY` (the mask of the
/// commands it has, or the errno), then `register` (called only if the mask has
/// SYNC_CORE). Kept apart from the calls so that every fallback is tested on any host.
#[cfg(any(target_arch = "aarch64", test))]
fn mode_from_probes(
    query: Result<libc::c_long, i32>,
    register: impl FnOnce() -> Result<libc::c_long, i32>,
) -> CrossThreadSync {
    let supported = match query {
        Ok(mask) => mask,
        Err(errno) => return CrossThreadSync::Unavailable { errno },
    };
    if supported & libc::c_long::from(MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE) == 0 {
        return CrossThreadSync::Unavailable { errno: 0 };
    }
    match register() {
        Ok(_) => CrossThreadSync::Membarrier,
        Err(errno) => CrossThreadSync::Unavailable { errno },
    }
}

/// After code was published (written, protected and flushed): makes every thread of the
/// process fetch it afresh before it next runs code (aarch64: the membarrier; nothing
/// elsewhere, or where the kernel lacks it). Returns what was done.
pub(crate) fn sync_all_threads() -> CrossThreadSync {
    let mode = cross_thread_sync();
    #[cfg(target_arch = "aarch64")]
    if mode == CrossThreadSync::Membarrier {
        // Registered above, so the command cannot be refused short of a kernel bug; a
        // failure leaves the fallback's guarantee.
        let _ = membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE);
    }
    mode
}

/// riscv64: `riscv_flush_icache(start, end, 0)`, every hart of the process (`fence.i`
/// alone orders only this one). Returns the errno if the kernel refused it.
#[cfg(target_arch = "riscv64")]
pub(crate) fn riscv_flush_icache(start: usize, end: usize) -> Result<(), i32> {
    /// `__NR_riscv_flush_icache` (arch-specific syscall base 244, + 15).
    const SYS_RISCV_FLUSH_ICACHE: libc::c_long = 259;
    // SAFETY: cache maintenance over a range the caller says is mapped; flags 0.
    let r = unsafe { libc::syscall(SYS_RISCV_FLUSH_ICACHE, start, end, 0 as libc::c_ulong) };
    if r < 0 {
        Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SYNC_CORE: libc::c_long = MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE as libc::c_long;

    fn registered() -> Result<libc::c_long, i32> {
        Ok(0)
    }

    #[test]
    fn a_kernel_with_the_command_is_registered_with() {
        assert_eq!(
            mode_from_probes(Ok(0x3ff), registered),
            CrossThreadSync::Membarrier
        );
        assert_eq!(
            mode_from_probes(Ok(SYNC_CORE), registered),
            CrossThreadSync::Membarrier
        );
    }

    #[test]
    fn each_refusal_is_the_fallback_with_its_errno() {
        let not_called = || -> Result<libc::c_long, i32> { panic!("registered without SYNC_CORE") };
        // No membarrier at all (before Linux 4.3, or filtered).
        assert_eq!(
            mode_from_probes(Err(libc::ENOSYS), not_called),
            CrossThreadSync::Unavailable {
                errno: libc::ENOSYS
            }
        );
        // membarrier without SYNC_CORE (Linux 4.3 to 4.15): said with errno 0.
        assert_eq!(
            mode_from_probes(Ok(0x1f), not_called),
            CrossThreadSync::Unavailable { errno: 0 }
        );
        // SYNC_CORE listed, the registration refused (a sandbox, an emulator).
        for errno in [libc::EPERM, libc::EINVAL] {
            assert_eq!(
                mode_from_probes(Ok(SYNC_CORE), || Err(errno)),
                CrossThreadSync::Unavailable { errno }
            );
        }
    }

    /// The environment variable that makes [`seccomp_child`] a child: which membarrier
    /// calls its filter refuses, `all` (ENOSYS) or `register` (EPERM).
    #[cfg(target_arch = "x86_64")]
    const REFUSE: &str = "ELFJIT_TEST_MEMBARRIER_REFUSE";

    /// Runs [`seccomp_child`] in a new process of this test binary refusing `refuse`, and
    /// returns what it printed; it must succeed.
    #[cfg(target_arch = "x86_64")]
    fn run_seccomp_child(refuse: &str) -> String {
        crate::test_seccomp::run_child("icache_linux::tests::seccomp_child", REFUSE, refuse)
    }

    /// The real probe, with the kernel refusing through a seccomp filter: the fallback is
    /// taken with the errno the kernel gave. Native only: qemu-user refuses seccomp (its
    /// `prctl(PR_SET_SECCOMP)` fails with EINVAL, `seccomp(2)` with ENOSYS: checked with
    /// qemu 7.2), so aarch64's own probe is refused under `strace` injection instead, in
    /// os/tests/cross_thread.rs.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn the_probe_falls_back_when_the_kernel_refuses() {
        let all = run_seccomp_child("all");
        assert!(all.contains("probe: Unavailable { errno: 38 }"), "{all}");
        let register = run_seccomp_child("register");
        assert!(
            register.contains("probe: Unavailable { errno: 1 }"),
            "{register}"
        );
    }

    /// The child of [`the_probe_falls_back_when_the_kernel_refuses`]: installs a seccomp
    /// filter refusing membarrier (every command with ENOSYS, or only the registration
    /// with EPERM) and prints what the probe decides.
    #[cfg(target_arch = "x86_64")]
    #[test]
    #[ignore = "a child process of the_probe_falls_back_when_the_kernel_refuses"]
    fn seccomp_child() {
        let refuse = std::env::var(REFUSE).expect("run by its parent test, which sets it");
        let (command, errno) = match refuse.as_str() {
            "all" => (None, libc::ENOSYS),
            "register" => (
                Some(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_SYNC_CORE),
                libc::EPERM,
            ),
            other => panic!("{REFUSE}={other}: want all or register"),
        };
        refuse_membarrier(command, errno);
        println!("probe: {:?}", probe_membarrier());
    }

    /// Installs a seccomp filter on this process (and its future threads) that makes
    /// membarrier with `command` (any command if `None`) fail with `errno`.
    #[cfg(target_arch = "x86_64")]
    fn refuse_membarrier(command: Option<libc::c_int>, errno: i32) {
        use crate::test_seccomp::{install, jump_unless, load_word, stmt};
        // seccomp_data: nr at 0, args[0] at 16 (its low half first on little-endian x86_64).
        let mut program = vec![load_word(0)];
        match command {
            None => program.push(jump_unless(libc::SYS_membarrier as u32, 1)),
            Some(command) => program.extend([
                jump_unless(libc::SYS_membarrier as u32, 3),
                load_word(16),
                jump_unless(command as u32, 1),
            ]),
        }
        program.push(stmt(
            libc::BPF_RET | libc::BPF_K,
            libc::SECCOMP_RET_ERRNO | errno as u32,
        ));
        program.push(stmt(libc::BPF_RET | libc::BPF_K, libc::SECCOMP_RET_ALLOW));
        install(program);
    }
}
