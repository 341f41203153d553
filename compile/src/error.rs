//! The compile side's error type: finding clang, running it (or a compile server), the
//! cache and the settings that steer them. `elfjit::Error::Compile` carries it unchanged,
//! with the same text.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

/// Everything that can go wrong between source text and an object.
#[derive(Debug)]
pub enum Error {
    /// No clang was found (`ELFJIT_CLANG`, `clang`, `clang-NN` in PATH).
    ClangNotFound {
        /// What was looked for, and where.
        tried: Vec<String>,
    },
    /// clang ran and failed; `stderr` holds its diagnostics.
    ClangFailed {
        /// The clang that ran.
        clang: PathBuf,
        /// How it ended.
        status: String,
        /// What it said.
        stderr: String,
    },
    /// clang ran out of memory under the compiler memory limit
    /// ([`Compiler::with_memory_limit`], `ELFJIT_COMPILE_MEMORY`).
    #[cfg_attr(
        unix,
        doc = "\n\n[`Compiler::with_memory_limit`]: crate::Compiler::with_memory_limit"
    )]
    // Windows compiles nothing: its `Compiler` says so (compile_windows.rs).
    #[cfg_attr(
        not(unix),
        doc = "\n\n[`Compiler::with_memory_limit`]: crate::Compiler"
    )]
    ClangMemoryLimit {
        /// The clang that ran.
        clang: PathBuf,
        /// The limit, in bytes.
        limit: u64,
        /// What it said.
        stderr: String,
    },
    /// clang did not finish within the timeout and was killed.
    ClangTimeout {
        /// The clang that ran.
        clang: PathBuf,
        /// The limit it overran.
        timeout: Duration,
    },
    /// `ELFJIT_COMPILER=server` asked for a compile server where there is none, or a
    /// prebuilt server could not be built (packaging). (A
    /// request a server fails twice, dying or breaking the protocol, is compiled by a
    /// spawned clang instead, whose result it gets.)
    CompileServer {
        /// The clang the server stands for.
        clang: PathBuf,
        /// What happened.
        message: String,
    },
    /// An I/O failure (spawning clang, pipes, the cache's files).
    Io {
        /// What was being done.
        context: String,
        /// What the system said.
        source: std::io::Error,
    },
    /// This process could not allocate the memory to hold what clang wrote.
    Memory(String),
    /// A malformed setting: `ELFJIT_COMPILE_MEMORY`, `ELFJIT_COMPILER`, the server pool's
    /// size.
    BadArgument {
        /// The value, named as the user wrote it.
        what: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A request the compile side cannot serve (compiling on Windows, where it is not
    /// ported).
    Unsupported(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::ClangNotFound { tried } => write!(
                f,
                "no clang found (tried {}); install one (Debian/Ubuntu: `apt-get install clang-19`) \
                 or set ELFJIT_CLANG to its path",
                tried.join(", ")
            ),
            Error::ClangFailed { clang, status, stderr } => write!(
                f,
                "{} failed ({status}):\n{}",
                clang.display(),
                stderr.trim_end()
            ),
            Error::ClangMemoryLimit {
                clang,
                limit,
                stderr,
            } => write!(
                f,
                "{} exceeded the compiler memory limit of {} (ELFJIT_COMPILE_MEMORY); raise it \
                 (e.g. ELFJIT_COMPILE_MEMORY=8G, 0 for none) if the source really needs more:\n{}",
                clang.display(),
                crate::bounded::describe_size(*limit),
                first_lines(stderr, 3)
            ),
            Error::ClangTimeout { clang, timeout } => write!(
                f,
                "{} did not finish within {:.1} s and was killed",
                clang.display(),
                timeout.as_secs_f64()
            ),
            Error::CompileServer { clang, message } => {
                write!(f, "compiling for {}: {message}", clang.display())
            }
            Error::Io { context, source } => write!(f, "{context}: {source}"),
            Error::Memory(m) => write!(f, "memory: {m}"),
            Error::BadArgument { what, reason } => write!(f, "bad {what}: {reason}"),
            Error::Unsupported(m) => write!(f, "unsupported: {m}"),
        }
    }
}

/// The first `n` lines of `text`, and how many more there were: clang's crash report
/// after an out-of-memory abort is a long stack dump that says nothing more.
fn first_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let mut head = lines.iter().take(n).copied().collect::<Vec<_>>().join("\n");
    if lines.len() > n {
        head.push_str(&format!(
            "\n({} more lines of clang's crash report)",
            lines.len() - n
        ));
    }
    head
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// Shorthand used across the compile side.
pub type Result<T, E = Error> = std::result::Result<T, E>;
