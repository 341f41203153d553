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
//! - `server`: [`Server`], one running server and its client.

mod binary;
pub(crate) mod protocol;
mod server;

pub(crate) use binary::{is_server_file, llvm_major, ServerBinary, Unavailable, SERVER_CPP};
pub(crate) use server::{Limits, Reply, Request, Server, ServerError, MAX_SERVER_STDERR};

#[cfg(test)]
mod tests;
