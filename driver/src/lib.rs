//! elfjit: compile C or LLVM IR with `clang -c` on a pipe, link the object in memory,
//! and call it.

pub mod args;
pub mod batch;
pub mod bounded;
pub mod cache;
pub mod child;
pub mod clang;
pub mod crash;
pub mod demo;
pub mod emulate;
pub mod error;
#[cfg(feature = "dlopen-fallback")]
pub mod fallback;
pub mod ffi;
pub mod flags;
pub mod inspect;
pub mod json;
pub mod module;
pub mod notes;
/// Profilers, debuggers and unwinding for loaded modules: [`elfjit_observe`].
pub use elfjit_observe as observe;
pub mod parallel;
pub mod private_dir;
pub mod run;
mod symbols;

pub use args::{ArgOutcome, ArgSpec, BufferInit, RetType, Scalar, ScalarType};
pub use batch::Batch;
pub use cache::{Cache, CacheStatus};
pub use clang::{CompileOptions, Compiler, Lang};
pub use elfjit_core::Arch;
pub use error::{Error, Result};
pub use ffi::{ArgKind, ArgValue, CallInterface};
pub use module::Module;
pub use run::{run, run_with, RunOutcome, RunRequest, Timings};

/// The README's Rust examples, compiled and run as doctests so they stay true.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;
