//! The environment a compile depends on, so that a server compiles as a clang spawned now
//! would.
//!
//! A server keeps the environment it was started with, while a spawned clang sees the
//! calling process's current one. Two kinds of variables matter:
//! - **Read by clang's libraries** during a compile ([`SERVER_READS`]: include paths,
//!   `SOURCE_DATE_EPOCH`, the temporary directory, ...; found with `strings` in
//!   `libclang-cpp` and `libLLVM` and clang's `Driver`/`ToolChains` sources). Their values
//!   are part of a pool's key: a change gives a new pool whose servers are started with
//!   the new values (the old pool's servers idle out).
//! - **Read only by the `clang` executable's `main`** ([`ONLY_CLANG_MAIN_READS`]:
//!   `CCC_OVERRIDE_OPTIONS`, the `CC_PRINT_*`/`CC_LOG_*` back doors), which a server does
//!   not apply: while one is set, compiles spawn clang.

use std::ffi::OsString;

/// Variables clang's driver and frontend libraries (and LLVM's) read during a compile.
pub(crate) const SERVER_READS: [&str; 24] = [
    // Header search (clang's ToolChains: `-I`/`-isystem` lists).
    "CPATH",
    "C_INCLUDE_PATH",
    "CPLUS_INCLUDE_PATH",
    "OBJC_INCLUDE_PATH",
    "OBJCPLUS_INCLUDE_PATH",
    "INCLUDE",
    "EXTERNAL_INCLUDE",
    // `__DATE__`, `__TIME__`, `__TIMESTAMP__`.
    "SOURCE_DATE_EPOCH",
    // Where the driver looks for programs and configuration files.
    "COMPILER_PATH",
    "PATH",
    "CLANG_NO_DEFAULT_CONFIG",
    "CLANG_MODULE_CACHE_PATH",
    "CLANG_CRASH_DIAGNOSTICS_DIR",
    // Target SDKs and deployment targets.
    "SDKROOT",
    "MACOSX_DEPLOYMENT_TARGET",
    "IPHONEOS_DEPLOYMENT_TARGET",
    "SCE_ORBIS_SDK_DIR",
    "SCE_PROSPERO_SDK_DIR",
    // Temporary files (LLVM's `system_temp_directory`).
    "TMPDIR",
    "TMP",
    "TEMP",
    "TEMPDIR",
    // Colours of forced-colour diagnostics, and the producer string of bitcode.
    "TERM",
    "LLVM_OVERRIDE_PRODUCER",
];

/// Variables only the `clang` executable's `main` reads: a server cannot honour them.
const ONLY_CLANG_MAIN_READS: [&str; 14] = [
    "CCC_OVERRIDE_OPTIONS",
    "CC_PRINT_OPTIONS",
    "CC_PRINT_OPTIONS_FILE",
    "CC_PRINT_HEADERS",
    "CC_PRINT_HEADERS_FILE",
    "CC_PRINT_HEADERS_FORMAT",
    "CC_PRINT_HEADERS_FILTERING",
    "CC_LOG_DIAGNOSTICS",
    "CC_LOG_DIAGNOSTICS_FILE",
    "CC_PRINT_PROC_STAT",
    "CC_PRINT_PROC_STAT_FILE",
    "CC_PRINT_INTERNAL_STAT",
    "CC_PRINT_INTERNAL_STAT_FILE",
    "FORCE_CLANG_DIAGNOSTICS_CRASH",
];

/// The values of [`SERVER_READS`] (`None`: unset), in that order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Environment(Vec<Option<OsString>>);

impl Environment {
    /// The calling process's values now.
    pub(crate) fn current() -> Environment {
        Environment(SERVER_READS.iter().map(std::env::var_os).collect())
    }

    /// The variables with their values, to set (or remove) in a server's environment.
    pub(crate) fn vars(&self) -> impl Iterator<Item = (&'static str, Option<&OsString>)> {
        SERVER_READS
            .iter()
            .copied()
            .zip(self.0.iter().map(Option::as_ref))
    }
}

/// Why a compile now must spawn clang: a variable only clang's `main` reads is set.
pub(crate) fn needs_spawn() -> Option<String> {
    ONLY_CLANG_MAIN_READS
        .iter()
        .find(|name| std::env::var_os(name).is_some_and(|v| !v.is_empty()))
        .map(|name| format!("{name} is set, which only a spawned clang applies"))
}
