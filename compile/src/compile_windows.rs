//! Windows: the compile side is not ported. Compiling means running clang as a child
//! process with a deadline, on pipes, with private cache directories checked for owner
//! and mode and a pool of compile servers (child.rs, private_dir.rs, verified.rs,
//! compile_server/): all POSIX (fork/exec, poll, process groups, `openat`, modes and
//! owners). On Windows a [`Compiler`] only names a clang, and every compile returns
//! [`Error::Unsupported`] naming Windows; there is no cache ([`Cache`] cannot be made).
//! A Windows program loads and calls objects compiled elsewhere:
//! `elfjit compile k.c -o k.o --target x86_64-windows` on Linux, then
//! `elfjit.exe run k.o`. (Under Wine a Windows process can start Linux's clang but gets
//! no handle to wait for it, read its exit status or kill it: docs/os-support.md. Driving
//! a real Windows `clang.exe` is work for later.)
//!
//! This file is the Windows `clang`, `cache` and `route` modules at once, the three
//! pieces of the compile side the load-and-run side names.

use crate::error::{Error, Result};
use crate::flags::HostInfo;
pub use crate::flags::{CompileOptions, Lang};
use std::path::{Path, PathBuf};

/// The bound on an object's size (what a compile would accept from clang).
pub const MAX_OBJECT_SIZE: usize = (elfjit_core::plan::MAX_IMAGE_SIZE as usize) + (64 << 20);

pub(crate) fn unsupported() -> Error {
    Error::Unsupported(
        "compiling (clang as a child process) is not ported to Windows: compile on Linux \
         with `elfjit compile FILE -o FILE.o --target x86_64-windows` and load the object"
            .to_string(),
    )
}

/// `source` unchanged: the file name is for clang's debug information, and nothing
/// compiles on Windows.
pub fn with_file_name(source: &[u8], _path: &Path) -> Vec<u8> {
    source.to_vec()
}

/// A clang named for compiling; on Windows it is never started.
#[derive(Clone, Debug)]
pub struct Compiler {
    path: PathBuf,
}

impl Compiler {
    /// The clang named by `ELFJIT_CLANG`, else `clang.exe` (not looked for: nothing
    /// compiles on Windows, every compile returns [`Error::Unsupported`]).
    pub fn find() -> Result<Compiler> {
        let path = std::env::var_os("ELFJIT_CLANG").map_or_else(|| "clang.exe".into(), Into::into);
        Ok(Compiler { path })
    }

    /// A clang at `path` (not checked on Windows).
    pub fn at(path: impl Into<PathBuf>) -> Result<Compiler> {
        Ok(Compiler { path: path.into() })
    }

    /// The clang's path, as named.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// [`Error::Unsupported`]: compiling is not ported to Windows.
    pub fn version(&self) -> Result<String> {
        Err(unsupported())
    }

    /// [`Error::Unsupported`]: compiling is not ported to Windows.
    pub fn compile(&self, _source: &[u8], _opts: &CompileOptions) -> Result<Vec<u8>> {
        Err(unsupported())
    }

    /// [`Error::Unsupported`]: compiling is not ported to Windows.
    pub fn compile_for_host(
        &self,
        _source: &[u8],
        _opts: &CompileOptions,
        _host: HostInfo,
    ) -> Result<Vec<u8>> {
        Err(unsupported())
    }
}

/// The object cache: it holds nothing on Windows (nothing compiles there).
#[derive(Debug)]
pub struct Cache;

impl Cache {
    /// The (empty) cache.
    pub fn from_env() -> Cache {
        Cache
    }

    /// [`Error::Unsupported`]: compiling is not ported to Windows.
    pub fn compile_for_host(
        &self,
        _compiler: &Compiler,
        _source: &[u8],
        _opts: &CompileOptions,
        _host: HostInfo,
    ) -> Result<(Vec<u8>, CacheStatus)> {
        Err(unsupported())
    }
}

pub use crate::outcome::{CacheStatus, CompiledBy, ServerTiming};

/// [`Error::Unsupported`]: nothing compiles on Windows.
pub fn describe(_compiler: &Compiler) -> Result<CompiledBy> {
    Err(unsupported())
}

/// What compiled this thread's last kernel: always `None` on Windows.
pub fn last_compile() -> Option<CompiledBy> {
    None
}

/// No compile server replies on Windows: always `None`.
pub fn last_server_timing() -> Option<ServerTiming> {
    None
}

/// No compile server to warm on Windows.
pub fn warm_in_background() {}
