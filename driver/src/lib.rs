//! elfjit: compile C or LLVM IR with `clang -c` on a pipe, link the object in memory, and
//! call it.
//!
//! ```
//! use elfjit::{Arch, CompileOptions, Compiler, Lang, Module, Symbol};
//!
//! let clang = Compiler::find()?; // $ELFJIT_CLANG, `clang`, or a `clang-NN` in PATH
//! let opts = CompileOptions::new(Lang::C, Arch::host().ok_or("unsupported host")?);
//! let object = clang.compile(b"int add(int a, int b) { return a + b; }", &opts)?;
//! let module = Module::load(&object)?; // owns the memory; unmapped on drop
//! let add: Symbol<'_, unsafe extern "C" fn(i32, i32) -> i32> = module.get("add")?;
//! // SAFETY: `add` is `int add(int, int)`; `add` borrows `module`, which stays loaded.
//! assert_eq!(unsafe { add(2, 40) }, 42);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! The compile half is its own crate, `elfjit-compile` (clang on pipes, flags, the cache,
//! the compile servers), re-exported here under the same names; this crate is the load
//! half and what joins them. The pieces, one job each:
//! - compiling (from `elfjit-compile`): [`clang`] (finding and running clang, bounded, on
//!   pipes), [`flags`] (what to compile for and the clang arguments that follow),
//!   [`memory_limit`] (how much memory a compiler process may take), [`cache`] (a
//!   content-addressed object cache in memory and on disk), [`parallel`] (one clang per
//!   core), [`route`] (whether a warm compile server of the process's pool or a spawned
//!   clang compiles: `ELFJIT_COMPILER`); and here [`batch`] (many kernels in one
//!   translation unit);
//! - loading and calling: [`module`] (the loaded image), [`symbol`] (typed symbols that
//!   borrow it), [`ffi`] (calls whose signature is known at run time, through libffi);
//! - running a kernel described by `elfjit run`'s options: [`args`] (the `--arg`/`--ret`
//!   grammar, typed values and aligned buffers), [`run`](mod@run) (compile → link → execute →
//!   outcome, one [`run::Executor`] interface) and [`native`] (the executor for this
//!   process; `elfjit-emulate` has the one for other architectures);
//! - seeing them run: [`observe`] (perf's symbol files, the GDB JIT interface and unwind
//!   registration, the `elfjit-observe` crate), told about every module [`Module::load`]
//!   links in memory;
//! - the ground under them (from `elfjit-compile`): [`child`] (the one way a child process
//!   is run), [`orphans`] (what children leave behind, for programs), [`bounded`] (capped
//!   reads), [`private_dir`] (directories only this user can write), [`verified`] (files
//!   kept there and checked before use); [`notes`] (one line on stderr per reason); and
//!   [`error`] (this crate's, which carries the compile side's as [`Error::Compile`]).
//!
//! With the `dlopen-fallback` feature, [`Module::load`] links through `clang -shared`
//! and `dlopen` instead of the in-memory loader, behind the same API.
// The compile side's modules are Unix-only: on Windows their links lead to the module
// that says so (elfjit-compile's compile_windows.rs, the Windows `clang`).
#![cfg_attr(
    not(unix),
    doc = "\n\n[`memory_limit`]: clang\n[`batch`]: clang\n\
           [`parallel`]: clang\n[`child`]: clang\n\
           [`orphans`]: clang\n[`private_dir`]: clang\n[`verified`]: clang"
)]

pub mod args;
#[cfg(unix)]
pub mod batch;
pub mod error;
#[cfg(all(unix, feature = "dlopen-fallback"))]
pub mod fallback;
pub mod ffi;
pub mod module;
pub mod native;
/// Profilers, debuggers and unwinding for loaded modules: [`elfjit_observe`].
pub use elfjit_observe as observe;
/// One line on stderr per reason per process (owned by `elfjit-observe`, which says
/// its own notes too).
pub use elfjit_observe::notes;
pub mod run;
pub mod symbol;
mod symbols;
#[cfg(not(feature = "dlopen-fallback"))]
mod warmup;

// The compile half, under the paths it had when it was part of this crate.
pub use elfjit_compile::{bounded, cache, clang, flags, route};
#[cfg(unix)]
pub use elfjit_compile::{child, memory_limit, orphans, parallel, private_dir, verified};

pub use args::{ArgKind, ArgOutcome, ArgSpec, BufferInit, RetType, Scalar, ScalarType};
#[cfg(unix)]
pub use batch::Batch;
#[doc(hidden)]
#[cfg(unix)]
pub use elfjit_compile::build_prebuilt_server;
pub use elfjit_compile::Error as CompileError;
#[cfg(unix)]
pub use elfjit_compile::SERVER_DIR_ENV;
pub use elfjit_compile::{Cache, CacheStatus, Compiler};
pub use elfjit_core::Arch;
/// The code arenas modules are loaded into ([`Module::load_in`]), so a dependent needs no
/// direct dependency on `elfjit-os` to choose one.
pub use elfjit_os::{Arena, ArenaConfig, ArenaError, Mode};
pub use error::{Error, Result};
pub use ffi::{ArgValue, CallInterface};
pub use flags::{CompileOptions, Lang};
pub use module::{prepare, Module};
pub use native::{run, run_cached, run_with, Native};
pub use run::{run_on, Executor, RunOutcome, RunRequest, Timings};
pub use symbol::Symbol;

// The unit tests' kernel objects, shared with the integration tests (which name the crate
// `elfjit`): compiled on Unix, read from what a Linux run stored on Windows.
#[cfg(test)]
extern crate self as elfjit;
#[cfg(test)]
#[path = "../tests/common/objects.rs"]
mod test_objects;

/// The README's Rust examples, compiled and run as doctests so they stay true.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;

/// The Rust examples of the longer docs the README links to, tested the same way.
#[cfg(doctest)]
#[doc = include_str!("../../docs/compile.md")]
#[doc = include_str!("../../docs/arena.md")]
#[doc = include_str!("../../docs/core.md")]
pub struct DocsDoctests;
