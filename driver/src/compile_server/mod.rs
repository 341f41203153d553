//! TEMPORARY skeleton of the compile server's interface (branch h27 owns this file): it lets
//! the pool and the integration compile before the real server lands. Every server is
//! unavailable here.

use crate::clang::Compiler;
use std::fmt;
use std::path::Path;
use std::time::Instant;

pub(crate) mod pool;

/// A verified server for one clang.
#[derive(Debug)]
pub(crate) struct ServerBinary {
    path: std::path::PathBuf,
}

impl ServerBinary {
    pub(crate) fn for_compiler(_c: &Compiler) -> Result<ServerBinary, Unavailable> {
        Err(Unavailable {
            reason: "the compile server is not built in this skeleton".into(),
        })
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
}

/// Why there is no server.
#[derive(Debug, Clone)]
pub(crate) struct Unavailable {
    pub reason: String,
}

impl fmt::Display for Unavailable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.reason)
    }
}

/// Limits a server runs under.
#[derive(Debug, Clone, Default)]
pub(crate) struct Limits {
    pub memory_limit: Option<u64>,
}

/// One running server.
#[derive(Debug)]
pub(crate) struct Server {
    pid: u32,
}

impl Server {
    pub(crate) fn start(_bin: &ServerBinary, _limits: &Limits) -> Result<Server, ServerError> {
        Err(ServerError::Io {
            message: "skeleton".into(),
        })
    }

    pub(crate) fn compile(
        &mut self,
        _req: &Request<'_>,
        _deadline: Instant,
    ) -> Result<Reply, ServerError> {
        Err(ServerError::Io {
            message: "skeleton".into(),
        })
    }

    pub(crate) fn pid(&self) -> u32 {
        self.pid
    }
}

/// One compile.
pub(crate) struct Request<'a> {
    pub args: &'a [String],
    pub source: &'a [u8],
    pub want_dependencies: bool,
}

/// A server's answer.
#[derive(Debug)]
pub(crate) struct Reply {
    pub status: i32,
    pub object: Vec<u8>,
    pub diagnostics: Vec<u8>,
    pub dependencies: Option<Vec<u8>>,
}

/// What went wrong with a server.
#[derive(Debug)]
pub(crate) enum ServerError {
    Died { message: String },
    Timeout { message: String },
    Protocol { message: String },
    NeedsSpawn { message: String },
    Io { message: String },
}

impl fmt::Display for ServerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ServerError::Died { message }
            | ServerError::Timeout { message }
            | ServerError::Protocol { message }
            | ServerError::NeedsSpawn { message }
            | ServerError::Io { message } => f.write_str(message),
        }
    }
}
