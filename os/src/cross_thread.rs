//! What a process does so that code one thread published is safe for the others to run:
//! decided by `icache` (and its Linux file), apart so that both can name it.

/// How code published by one thread is made safe for the others to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CrossThreadSync {
    /// Nothing is done beyond the flush: x86_64 (coherent instruction fetch), riscv64
    /// Linux (the flush reaches every hart), Windows (`FlushInstructionCache` covers every
    /// processor). On ppc64le and macOS nothing more is done either, without that
    /// guarantee: another thread is safe once it has taken an exception return after the
    /// publish (docs/os-support.md).
    NotNeeded,
    /// aarch64 Linux: `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE)` after each
    /// publish (registered once).
    Membarrier,
    /// aarch64 Linux, where the kernel refused the membarrier command or its registration
    /// (`errno`, 0 if its query said it lacks it): other threads synchronise at their next
    /// exception return (a system call, an interrupt, being rescheduled).
    Unavailable {
        /// The OS error of the refused call, 0 if none.
        errno: i32,
    },
}
