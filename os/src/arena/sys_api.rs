//! The OS-neutral words the arena speaks to its per-OS system layer (`sys`: `sys.rs` for
//! Linux, `sys_windows.rs`, `sys_macos.rs`, `sys_freebsd.rs`), which each translate them
//! to their own calls. Every `sys` file provides the same functions; what an OS cannot do
//! is an error there, never a missing function.

/// Page protections the arena uses (never writable and executable at once).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Prot {
    Read,
    ReadWrite,
    ReadExecute,
}

/// Best-effort advice about a range: an OS without the matching call refuses it, and the
/// arena goes on without it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Advice {
    /// No transparent huge pages: a huge page would commit 2 MiB for one small module.
    NoHugePages,
    /// Not inherited by a forked child (a packed arena's writable view).
    DontFork,
    /// Fault the pages in for reading (the loader's own code, before a first load).
    PopulateRead,
    /// Fault the pages in for writing (free pages the next loads will write).
    PopulateWrite,
}

/// Code memory that each thread sees one way at a time, writable or executable (macOS on
/// arm64, `MAP_JIT`): the mapping is made writable and executable once, and a thread
/// switches its own view. Where a `sys` file gives one, the arena stages code
/// (`code_write.rs`): the linker writes a heap buffer, and publishing copies it into the
/// pages inside a write bracket on the publishing thread. Elsewhere code pages are
/// protected in place (`sys::protect`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct PerThreadJit {
    /// Makes a new chunk's code region writable and executable in the mapping: once, when
    /// the chunk is made; never changed afterwards.
    pub open_region: unsafe fn(usize, usize) -> Result<(), i32>,
    /// Makes `[addr, addr + len)` writable, and not executable, for the calling thread.
    pub begin_write: unsafe fn(usize, usize) -> Result<(), i32>,
    /// Makes it executable, and not writable, for the calling thread again.
    pub end_write: unsafe fn(usize, usize) -> Result<(), i32>,
    /// Lets the OS take back freed code pages, keeping the mapping: their contents may stay
    /// (a staged publish writes every byte of the pages it holds).
    pub discard: unsafe fn(usize, usize) -> Result<(), i32>,
    /// What reserving such memory is, said as the step that failed when the OS refuses it
    /// ([`ArenaError::JitUnavailable`](super::ArenaError::JitUnavailable)): the call, and
    /// what a process needs for it to be allowed.
    pub reserve_step: &'static str,
    /// The same for [`open_region`](Self::open_region).
    pub open_step: &'static str,
}

/// What an OS layer without a dual-mapping primitive (Windows, macOS) says to packed mode.
#[cfg(any(windows, target_os = "macos"))]
pub(crate) fn packed_mode_unsupported() -> Result<(), super::error::ArenaError> {
    Err(super::error::ArenaError::Unsupported {
        feature: "packed mode (code mapped twice, writable and executable views)",
        platform: crate::Platform::current(),
    })
}
