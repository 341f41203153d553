//! elfjit: compile C or LLVM IR with `clang -c` on a pipe, link the object in memory,
//! and call it.

// `Error` carries the core's error by value (about 180 bytes), which trips clippy's
// `result_large_err` on every fallible function. Failures are rare and never on a hot
// path, so the size costs nothing that matters; boxing `Error::Link` would be the fix if
// it ever does.
#![allow(clippy::result_large_err)]

pub mod args;
pub mod clang;
pub mod demo;
pub mod error;
pub mod ffi;
pub mod flags;
pub mod inspect;
pub mod json;
pub mod module;
pub mod run;

pub use args::{ArgOutcome, ArgSpec, BufferInit, RetType, Scalar, ScalarType};
pub use clang::{CompileOptions, Compiler, Lang};
pub use elfjit_core::Arch;
pub use error::{Error, Result};
pub use ffi::{ArgKind, ArgValue, CallInterface};
pub use module::Module;
pub use run::{run, run_with, RunOutcome, RunRequest, Timings};
