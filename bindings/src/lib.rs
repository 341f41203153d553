//! What elfjit's foreign-language bindings share, so the C ABI (`elfjit-capi`) and the
//! Python package (`elfjit-python`) behave alike: one clang and one compile cache per
//! process, the same compile request, the same error categories and messages.
//!
//! Nothing here is foreign-facing: each binding turns these types into its own (status
//! codes and a thread-local message in C, an exception hierarchy in Python).

use elfjit::{Arch, Cache, CompileError, CompileOptions, Compiler, Lang, Module};
use std::fmt;
use std::sync::OnceLock;

/// A failure the bindings report: the library's own errors with their messages
/// unchanged, plus the few that exist only at a language boundary.
#[derive(Debug)]
pub enum Failure {
    /// An error from the elfjit library.
    Elfjit(elfjit::Error),
    /// A symbol looked up by name is not defined by the module.
    NoSymbol {
        /// The name looked up.
        name: String,
        /// The global functions the module does define.
        functions: Vec<String>,
    },
    /// A required pointer argument was null (C only).
    NullPointer {
        /// The parameter's name in the C signature.
        argument: &'static str,
    },
    /// A panic inside elfjit, caught at the boundary (a bug: please report it).
    Panic(String),
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Elfjit(e) => write!(f, "{e}"),
            Failure::NoSymbol { name, functions } => {
                let list = if functions.is_empty() {
                    "(none)".to_string()
                } else {
                    functions.join(", ")
                };
                write!(
                    f,
                    "no symbol `{name}` in the module; its global functions: {list}"
                )
            }
            Failure::NullPointer { argument } => write!(f, "`{argument}` is a null pointer"),
            Failure::Panic(message) => write!(f, "internal error (a panic in elfjit): {message}"),
        }
    }
}

impl std::error::Error for Failure {}

impl From<elfjit::Error> for Failure {
    fn from(e: elfjit::Error) -> Self {
        Failure::Elfjit(e)
    }
}

impl From<CompileError> for Failure {
    fn from(e: CompileError) -> Self {
        Failure::Elfjit(e.into())
    }
}

/// Shorthand for the bindings' results.
pub type Result<T, E = Failure> = std::result::Result<T, E>;

/// The categories both bindings report failures in (C status codes, Python exception
/// classes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// A null pointer where one is required (C only).
    NullPointer,
    /// A malformed argument: unknown target or language, opt level out of range, a name
    /// that is not UTF-8.
    Argument,
    /// No clang could be found.
    ClangNotFound,
    /// clang ran and failed, or overran its deadline, or the compile server failed a
    /// request twice (or `ELFJIT_COMPILER=server` found none).
    Compile,
    /// The loader rejected an object: malformed ELF, an unsupported or out-of-range
    /// relocation, an undefined symbol.
    Link,
    /// A symbol looked up by name does not exist.
    NotFound,
    /// A request elfjit cannot serve, e.g. loading an object for another architecture.
    Unsupported,
    /// The operating system refused: memory, pipes, starting clang.
    System,
    /// A bug in elfjit (a caught panic) or a failure outside these categories.
    Internal,
}

impl Failure {
    /// The category the failure is reported in.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Failure::Elfjit(e) => match e {
                elfjit::Error::Compile(e) => match e {
                    CompileError::ClangNotFound { .. } => ErrorKind::ClangNotFound,
                    CompileError::ClangFailed { .. }
                    | CompileError::ClangTimeout { .. }
                    | CompileError::ClangMemoryLimit { .. }
                    | CompileError::CompileServer { .. } => ErrorKind::Compile,
                    // Spawning clang, its pipes, the cache's files; or clang's output
                    // too large to hold.
                    CompileError::Io { .. } | CompileError::Memory(_) => ErrorKind::System,
                    // ELFJIT_COMPILE_MEMORY, ELFJIT_COMPILER or the pool's size malformed.
                    CompileError::BadArgument { .. } => ErrorKind::Argument,
                    CompileError::Unsupported(_) => ErrorKind::Unsupported,
                },
                // The code arena ran out (its limit, the address space, the map count) or
                // the OS refused it memory.
                elfjit::Error::Io { .. } | elfjit::Error::Memory(_) | elfjit::Error::Arena(_) => {
                    ErrorKind::System
                }
                elfjit::Error::Link(_) => ErrorKind::Link,
                elfjit::Error::UnknownEntry { .. } | elfjit::Error::AmbiguousEntry { .. } => {
                    ErrorKind::NotFound
                }
                elfjit::Error::BadArgument { .. } => ErrorKind::Argument,
                elfjit::Error::Unsupported(_) => ErrorKind::Unsupported,
                elfjit::Error::Emulation { .. } => ErrorKind::Internal,
                // A profiler or debugger file that could not be written, or a bad
                // ELFJIT_PERF / ELFJIT_GDB value.
                elfjit::Error::Observe(_) => ErrorKind::System,
            },
            Failure::NoSymbol { .. } => ErrorKind::NotFound,
            Failure::NullPointer { .. } => ErrorKind::NullPointer,
            Failure::Panic(_) => ErrorKind::Internal,
        }
    }
}

/// An argument error with the library's wording (`bad {what}: {reason}`).
pub fn bad_argument(what: &str, reason: impl Into<String>) -> Failure {
    Failure::Elfjit(elfjit::Error::BadArgument {
        what: what.to_string(),
        reason: reason.into(),
    })
}

/// Parses a target name (`x86_64`, `aarch64`, ... and the aliases [`Arch::from_name`]
/// accepts).
pub fn parse_target(name: &str) -> Result<Arch> {
    Arch::from_name(name).ok_or_else(|| {
        let known: Vec<&str> = Arch::ALL.iter().map(|a| a.name()).collect();
        bad_argument(
            "target",
            format!("unknown architecture `{name}`; one of {}", known.join(", ")),
        )
    })
}

/// Parses a language name: `c`, or `ir` (also `ll`, `llvm`).
pub fn parse_lang(name: &str) -> Result<Lang> {
    Lang::from_name(name).ok_or_else(|| {
        bad_argument(
            "lang",
            format!("unknown language `{name}`; `c` or `ir` (LLVM IR text)"),
        )
    })
}

/// The host architecture, as an error where elfjit does not support it.
pub fn host() -> Result<Arch> {
    Arch::host().ok_or_else(|| {
        Failure::Elfjit(elfjit::Error::Unsupported(format!(
            "host architecture {}",
            std::env::consts::ARCH
        )))
    })
}

/// The highest `-O` level.
pub const MAX_OPT_LEVEL: u32 = 3;

/// One compile, as both bindings accept it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompileRequest {
    /// Source language.
    pub lang: Lang,
    /// The architecture to compile for; `None` is the host.
    pub target: Option<Arch>,
    /// `-O` level, 0 to [`MAX_OPT_LEVEL`].
    pub opt_level: u32,
    /// Use the process-wide cache ([`cache`]): in memory, and on disk in elfjit's cache
    /// directory (`$ELFJIT_CACHE_DIR/objects`, ...).
    pub cache: bool,
    /// Extra clang arguments, appended after elfjit's own (e.g. `-DN=16`).
    pub flags: Vec<String>,
    /// The compiler memory limit for this compile: `None` is the process's
    /// (`ELFJIT_COMPILE_MEMORY`, else 4 GiB), `Some(None)` no limit, `Some(Some(n))` `n`
    /// bytes.
    pub memory_limit: Option<Option<u64>>,
}

impl CompileRequest {
    /// C for the host at `-O2`, no cache, no extra flags.
    pub fn new(lang: Lang) -> CompileRequest {
        CompileRequest {
            lang,
            target: None,
            opt_level: 2,
            cache: false,
            flags: Vec::new(),
            memory_limit: None,
        }
    }

    /// The library's options for this request (checks the opt level; resolves the host).
    pub fn options(&self) -> Result<CompileOptions> {
        if self.opt_level > MAX_OPT_LEVEL {
            return Err(bad_argument(
                "opt level",
                format!("{} (0 to {MAX_OPT_LEVEL})", self.opt_level),
            ));
        }
        let target = match self.target {
            Some(t) => t,
            None => host()?,
        };
        let mut options = CompileOptions::new(self.lang, target);
        // Checked above: at most 3.
        options.opt_level = self.opt_level as u8;
        options.extra_flags = self.flags.clone();
        Ok(options)
    }
}

/// The process's clang: found on first use ([`Compiler::find`]: `$ELFJIT_CLANG`,
/// `clang`, the newest `clang-NN` in `PATH`) and kept. A failed search is not kept, so
/// installing clang (or setting `ELFJIT_CLANG`) and retrying works.
pub fn compiler() -> Result<&'static Compiler> {
    static COMPILER: OnceLock<Compiler> = OnceLock::new();
    if let Some(found) = COMPILER.get() {
        return Ok(found);
    }
    let found = Compiler::find()?;
    Ok(COMPILER.get_or_init(|| found))
}

/// The process's compile cache: in memory, backed by elfjit's cache directory
/// ([`Cache::from_env`], read when first used).
pub fn cache() -> &'static Cache {
    static CACHE: OnceLock<Cache> = OnceLock::new();
    CACHE.get_or_init(Cache::from_env)
}

/// Compiles `source` as `request` says, with the process's clang (and cache, if asked).
pub fn compile(source: &[u8], request: &CompileRequest) -> Result<Vec<u8>> {
    let options = request.options()?;
    let process_clang = compiler()?;
    let limited;
    let clang = match request.memory_limit {
        None => process_clang,
        Some(bytes) => {
            limited = process_clang.clone().with_memory_limit(bytes);
            &limited
        }
    };
    if request.cache {
        let (object, _status) = cache().compile(clang, source, &options)?;
        Ok(object)
    } else {
        Ok(clang.compile(source, &options)?)
    }
}

/// A module's symbol, or [`Failure::NoSymbol`] naming what it does define.
pub fn symbol(module: &Module, name: &str) -> Result<usize> {
    module
        .symbol(name)
        .map(|address| address as usize)
        .ok_or_else(|| Failure::NoSymbol {
            name: name.to_string(),
            functions: module.functions().to_vec(),
        })
}

/// The message of a caught panic's payload.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "(a panic without a message)".to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_and_unknown_ones_list_the_choices() {
        assert_eq!(parse_target("aarch64").unwrap(), Arch::Aarch64);
        assert_eq!(parse_target("amd64").unwrap(), Arch::X86_64);
        let err = parse_target("vax").unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Argument);
        let msg = err.to_string();
        assert!(msg.contains("`vax`") && msg.contains("ppc64le"), "{msg}");
        assert_eq!(parse_lang("ir").unwrap(), Lang::Ir);
        assert_eq!(parse_lang("c").unwrap(), Lang::C);
        let msg = parse_lang("rust").unwrap_err().to_string();
        assert!(msg.contains("`rust`"), "{msg}");
    }

    #[test]
    fn opt_level_above_three_is_an_argument_error() {
        let mut request = CompileRequest::new(Lang::C);
        request.opt_level = 3;
        assert_eq!(request.options().unwrap().opt_level, 3);
        request.opt_level = 4;
        let err = request.options().unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Argument);
        assert!(err.to_string().contains("opt level"), "{err}");
    }

    #[test]
    fn kinds_follow_the_library_errors() {
        let not_found = Failure::from(CompileError::ClangNotFound { tried: vec![] });
        assert_eq!(not_found.kind(), ErrorKind::ClangNotFound);
        let unsupported = Failure::from(elfjit::Error::Unsupported("x".into()));
        assert_eq!(unsupported.kind(), ErrorKind::Unsupported);
        assert_eq!(unsupported.to_string(), "unsupported: x");
        let missing = Failure::NoSymbol {
            name: "f".into(),
            functions: vec!["g".into(), "h".into()],
        };
        assert_eq!(missing.kind(), ErrorKind::NotFound);
        assert_eq!(
            missing.to_string(),
            "no symbol `f` in the module; its global functions: g, h"
        );
    }

    #[test]
    fn panic_payloads_become_messages() {
        let caught = std::panic::catch_unwind(|| panic!("boom {}", 7)).unwrap_err();
        assert_eq!(panic_message(caught.as_ref()), "boom 7");
        let caught = std::panic::catch_unwind(|| std::panic::panic_any(3u8)).unwrap_err();
        assert!(panic_message(caught.as_ref()).contains("without a message"));
    }
}
