//! elfjit: compile C or LLVM IR with `clang -c` on a pipe, link the object in memory,
//! and call it.

pub mod error;
pub mod inspect;
pub mod module;

pub use elfjit_core::Arch;
pub use error::{Error, Result};
pub use module::Module;
