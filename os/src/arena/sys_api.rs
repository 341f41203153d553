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
