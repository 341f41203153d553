//! elfjit-os: what the core needs from an operating system, for Linux (and other Unix)
//! hosts: executable memory (an [`Arena`] that many modules share, or one [`MmapBackend`]
//! mapping per module, over `rustix`), the instruction-cache flush
//! ([`icache`]), and undefined-symbol lookup in the running process
//! ([`ProcessResolver`]: `dlsym`, libm, and the compiler-rt helpers Rust links in).

pub mod arena;
pub mod builtins;
pub mod icache;
#[cfg(target_os = "linux")]
mod icache_linux;
pub mod mmap;
pub mod platform;
pub mod prefault;
pub mod resolve;

pub use arena::{Arena, ArenaBackend, ArenaConfig, ArenaError, ArenaStats, Mode, Resource};
pub use mmap::MmapBackend;
pub use platform::Platform;
pub use resolve::ProcessResolver;
