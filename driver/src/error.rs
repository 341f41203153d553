//! The driver's error type: every failure a user can meet, with enough context to act on.

use std::fmt;

/// Everything that can go wrong between source text and a finished call.
#[derive(Debug)]
pub enum Error {
    /// Compiling failed: clang not found, failed, out of memory or time, a compile
    /// server that was asked for and is not there, the compile side's settings
    /// ([`elfjit_compile::Error`], with the same text).
    Compile(elfjit_compile::Error),
    /// An I/O failure (reading a file, the dlopen fallback's scratch directory).
    Io {
        /// What was being done.
        context: String,
        /// What the system said.
        source: std::io::Error,
    },
    /// The core linker rejected the object or a relocation.
    Link(elfjit_core::Error),
    /// The OS refused memory (mmap/mprotect).
    Memory(String),
    /// The code arena could not provide or publish memory: what ran out (the arena's
    /// limit, the address space, the map count), the size asked for and the limit.
    Arena(elfjit_os::ArenaError),
    /// Telling a profiler, debugger or unwinder about a module failed (`ELFJIT_PERF`,
    /// `ELFJIT_GDB`, [`elfjit_observe::enable`]).
    Observe(elfjit_observe::Error),
    /// `--entry NAME` (or a lookup by name) found no such function.
    UnknownEntry {
        /// The name asked for.
        name: String,
        /// The global functions there are.
        available: Vec<String>,
    },
    /// No `--entry` was given and the object does not have exactly one global function.
    AmbiguousEntry {
        /// The global functions there are.
        available: Vec<String>,
    },
    /// A malformed `--arg`, `--ret`, `--lang` or `--target` value.
    BadArgument {
        /// The value, named as the user wrote it (`--arg \`u8:300\``).
        what: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A request elfjit cannot serve (e.g. a foreign target for the native executor).
    Unsupported(String),
    /// An emulated run (`--target` a foreign architecture) failed outside the link: the
    /// runner could not be built, qemu is missing, the runner crashed or answered badly.
    Emulation {
        /// The architecture being emulated.
        target: elfjit_core::Arch,
        /// What went wrong.
        message: String,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Compile(e) => write!(f, "{e}"),
            Error::Io { context, source } => write!(f, "{context}: {source}"),
            Error::Link(elfjit_core::Error::Backend(b)) => backend(f, b),
            Error::Link(e) => write!(f, "{e}"),
            Error::Memory(m) => write!(f, "memory: {m}"),
            Error::Arena(e) => write!(f, "{e}"),
            Error::Observe(e) => write!(f, "{e}"),
            Error::UnknownEntry { name, available } => write!(
                f,
                "unknown entry `{name}`; global functions: {}",
                list_or_none(available)
            ),
            Error::AmbiguousEntry { available } => write!(
                f,
                "choose an entry with --entry; global functions: {}",
                list_or_none(available)
            ),
            Error::BadArgument { what, reason } => write!(f, "bad {what}: {reason}"),
            Error::Unsupported(m) => write!(f, "unsupported: {m}"),
            Error::Emulation { target, message } => {
                write!(f, "emulated run on {target}: {message}")
            }
        }
    }
}

/// A memory backend's failure with the OS's own words for its error number (the core
/// only carries the number).
fn backend(f: &mut fmt::Formatter<'_>, b: &elfjit_core::BackendError) -> fmt::Result {
    if b.code > 0 {
        let os = std::io::Error::from_raw_os_error(b.code);
        write!(f, "memory backend failed to {}", b.op)?;
        if b.size != 0 {
            write!(f, " ({} bytes)", b.size)?;
        }
        write!(f, ": {os}")
    } else {
        write!(f, "{b}")
    }
}

fn list_or_none(names: &[String]) -> String {
    if names.is_empty() {
        "(none)".to_string()
    } else {
        names.join(", ")
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Compile(e) => e.source(),
            Error::Io { source, .. } => Some(source),
            Error::Arena(e) => Some(e),
            Error::Observe(e) => Some(e),
            _ => None,
        }
    }
}

impl From<elfjit_observe::Error> for Error {
    fn from(e: elfjit_observe::Error) -> Self {
        Error::Observe(e)
    }
}

impl From<elfjit_compile::Error> for Error {
    fn from(e: elfjit_compile::Error) -> Self {
        Error::Compile(e)
    }
}

impl From<elfjit_core::Error> for Error {
    fn from(e: elfjit_core::Error) -> Self {
        Error::Link(e)
    }
}

/// Shorthand used across the driver.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backend_errors_say_what_the_os_said() {
        let e = Error::Link(elfjit_core::Error::Backend(elfjit_core::BackendError::new(
            "mmap", 8192, 12,
        )));
        let text = e.to_string();
        assert!(text.contains("mmap (8192 bytes)"), "{text}");
        // The OS's own words for error 12 (ENOMEM on Linux, "Invalid access" on Windows).
        let said = std::io::Error::from_raw_os_error(12).to_string();
        assert!(text.contains(&said), "{text} lacks {said}");
        let e = Error::Link(elfjit_core::Error::Backend(elfjit_core::BackendError::new(
            "address a range outside the mapping",
            0,
            0,
        )));
        assert!(e.to_string().contains("outside the mapping"), "{e}");
    }
}
