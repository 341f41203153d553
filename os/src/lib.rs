//! elfjit-os: what the core needs from an operating system: executable memory (an
//! [`Arena`] that many modules share, or one [`MmapBackend`] mapping per module), the
//! instruction-cache flush and publication to other threads ([`icache`]), and
//! undefined-symbol lookup in the running process ([`ProcessResolver`]: `dlsym` and libm,
//! or the process's modules and the C runtime's DLLs on Windows, and the compiler-rt
//! helpers Rust links in). One file per OS holds what differs (`arena/sys*.rs`,
//! `resolve_*.rs`, `icache_linux.rs`): Linux, Windows (run under Wine), macOS and FreeBSD
//! (built only); what an OS cannot do is an [`ArenaError::Unsupported`] naming its
//! [`Platform`]. See docs/os-support.md.

pub mod arena;
pub mod builtins;
pub mod code_placement;
mod cross_thread;
pub mod icache;
#[cfg(target_os = "linux")]
mod icache_linux;
pub mod mmap;
pub mod platform;
pub mod prefault;
pub mod resolve;
#[cfg(all(test, target_os = "linux"))]
mod test_maps;
#[cfg(all(test, target_os = "linux", target_arch = "x86_64"))]
mod test_seccomp;

pub use arena::{Arena, ArenaBackend, ArenaConfig, ArenaError, ArenaStats, Mode, Resource};
pub use mmap::MmapBackend;
pub use platform::Platform;
pub use resolve::ProcessResolver;
