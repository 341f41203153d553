//! The compile server: a warm clang in a process of its own, so a kernel costs clang's
//! real work and not clang's start (loading libclang-cpp and libLLVM, option and target
//! set-up), paid again for every spawned clang.
//!
//! - [`protocol`]: the frames between elfjit and the server, and their caps, defined once
//!   (the C++ server gets them as `-D` macros).
//! - `server.cpp`: the server. It runs each request through clang's own driver and cc1
//!   code, in-process, with the source on its stdin as a spawned clang has it, so objects
//!   and diagnostics are byte-identical to a spawned clang's for the same arguments; all
//!   of a request's state is freed before the next, LLVM's scalar options are put back
//!   to their start values, and it runs in elfjit's current directory. A request that
//!   would change the server's global state (`-mllvm`, plugins), prints or writes more
//!   than an object and diagnostics (`-v`, `-###`, `-ftime-report`, ...) or is not one
//!   object from stdin is refused ([`ServerError::NeedsSpawn`]): spawn clang for it. A
//!   backend's fatal error is replied as clang reports it (status 1), then the server
//!   exits.
//! - `binary`: [`ServerBinary`], the server built for one clang, cached and verified like
//!   the emulated runners, or [`Unavailable`] saying why not.
//! - [`prebuilt`]: servers built elsewhere and installed with elfjit (the Python wheel's),
//!   named by `ELFJIT_SERVER_DIR`, and the checks before one is used.
//! - `server`: [`Server`], one running server and its client.
//! - [`pool`]: the process's servers, per clang, shared by every thread that compiles.
//! - `environment`: the variables clang reads, whose values a pool's servers are started
//!   with (a change gets new servers), and those only a spawned clang applies.

mod binary;
mod environment;
pub(crate) mod pool;
pub(crate) mod prebuilt;
pub(crate) mod protocol;
mod server;

pub(crate) use binary::{is_server_file, llvm_major, ServerBinary, Unavailable, SERVER_CPP};
pub(crate) use server::{Limits, Reply, Request, Server, ServerError, MAX_SERVER_STDERR};

pub use prebuilt::SERVER_DIR_ENV;

/// Builds the compile server for the clang found ([`Compiler::find`]) into the directory
/// `out` as a prebuilt server with its manifest (`compile-server-llvmNN` and
/// `compile-server-llvmNN.json`), which the library uses when `ELFJIT_SERVER_DIR` names
/// that directory and the clang it finds has LLVM major `NN`. Returns the server's path.
/// For packaging (`scripts/dist`, through the `build_compile_server` example).
#[doc(hidden)]
pub fn build_prebuilt_server(out: &std::path::Path) -> crate::Result<std::path::PathBuf> {
    let compiler = Compiler::find()?;
    binary::build_to(&compiler, &crate::cache::root_dir(), out).map_err(|u| {
        crate::Error::CompileServer {
            clang: compiler.path().to_path_buf(),
            message: format!("cannot build the compile server: {u}"),
        }
    })
}

use crate::clang::Compiler;

#[cfg(test)]
mod fault_tests;
#[cfg(test)]
mod tests;
