//! elfjit-compile: the compile half of elfjit. It turns C or LLVM IR into a relocatable
//! ELF object with `clang -c` on pipes (no temporary files), bounded in time, memory and
//! output, and reaped; or, faster, with a warm compile server from the process's pool
//! that answers byte for byte as a spawned clang would. Objects go through a
//! content-addressed cache. The load half (the in-memory linker, typed symbols, calls) is
//! the `elfjit` crate, which re-exports all of this under the same names.
//!
//! ```
//! use elfjit_compile::{Arch, CompileOptions, Compiler, Lang};
//!
//! let clang = Compiler::find()?; // $ELFJIT_CLANG, `clang`, or a `clang-NN` in PATH
//! let opts = CompileOptions::new(Lang::C, Arch::host().ok_or("unsupported host")?);
//! let object = clang.compile(b"int add(int a, int b) { return a + b; }", &opts)?;
//! assert_eq!(&object[..4], b"\x7fELF");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![cfg_attr(
    not(unix),
    doc = "\n\n(On Windows every compile is an [`Error::Unsupported`]: see `compile_windows`.)"
)]
//!
//! The pieces, one job each:
//! - what to compile: [`flags`] (the target and the clang arguments that follow),
//!   [`memory_limit`] (how much memory a compiler process may take);
//! - compiling: [`clang`] (finding and running clang), [`route`] (whether a warm compile
//!   server of the process's pool or a spawned clang compiles: `ELFJIT_COMPILER`; the
//!   servers' C++ source and their protocol are in `src/compile_server/`), [`cache`] (a
//!   content-addressed object cache in memory and on disk), [`parallel`] (one clang per
//!   core);
//! - the ground under them: [`child`] (the one way a child process is run), [`orphans`]
//!   (what children leave behind, for programs), [`bounded`] (capped reads),
//!   [`private_dir`] (directories only this user can write), [`verified`] (files kept
//!   there and checked before use), [`error`].
// The modules that need POSIX are Unix-only: on Windows their links lead to the module
// that says so (compile_windows.rs).
#![cfg_attr(
    not(unix),
    doc = "\n\n[`memory_limit`]: compile_windows\n[`parallel`]: compile_windows\n\
           [`child`]: compile_windows\n[`orphans`]: compile_windows\n\
           [`private_dir`]: compile_windows\n[`verified`]: compile_windows"
)]

pub mod bounded;
#[cfg(unix)]
pub mod cache;
#[cfg(unix)]
pub mod child;
#[cfg(unix)]
pub mod clang;
// Windows: the compile side is not ported; the names the load-and-run side uses.
#[cfg(windows)]
pub mod compile_windows;
#[cfg(windows)]
pub use compile_windows as clang;
#[cfg(windows)]
pub use compile_windows as cache;
#[cfg(windows)]
pub use compile_windows as route;
// Until the pool and `Compiler::compile` use all of it (issue 27), only the tests do.
#[allow(dead_code, unused_imports)]
#[cfg(unix)]
mod compile_server;
pub mod error;
pub mod flags;
#[cfg(unix)]
pub mod memory_limit;
#[cfg(unix)]
#[cfg_attr(not(target_os = "linux"), path = "orphans_unsupported.rs")]
pub mod orphans;
mod outcome;
// One line on stderr per reason per process: owned by `elfjit-observe`, the lowest crate
// that says any. (Only the Unix modules say any.)
#[cfg(unix)]
use elfjit_observe::notes;
#[cfg(unix)]
pub mod parallel;
// The per-OS pieces, one file per OS (each opens with what its OS gives and lacks).
#[cfg_attr(target_os = "linux", path = "platform_linux.rs")]
#[cfg_attr(target_os = "macos", path = "platform_macos.rs")]
#[cfg_attr(target_os = "freebsd", path = "platform_freebsd.rs")]
#[cfg(unix)]
mod platform;
#[cfg(any(target_os = "macos", target_os = "freebsd"))]
mod platform_bsd;
#[cfg(unix)]
pub mod private_dir;
#[cfg(unix)]
pub mod route;
#[cfg(unix)]
pub mod verified;

pub use cache::{Cache, CacheStatus};
pub use clang::Compiler;
#[doc(hidden)]
#[cfg(unix)]
pub use compile_server::build_prebuilt_server;
#[cfg(unix)]
pub use compile_server::SERVER_DIR_ENV;
/// What to compile for (the loader's architectures).
pub use elfjit_core::Arch;
pub use error::{Error, Result};
pub use flags::{CompileOptions, Lang};
