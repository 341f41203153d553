//! What a compile reports besides its object, the same on every OS (the Unix compile
//! side, cache.rs and route.rs, and the Windows one, compile_windows.rs, name these).

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

/// Whether a compile was served from the cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CacheStatus {
    /// Found (in memory or on disk); clang did not run.
    Hit,
    /// Not found (or found corrupted or stale): clang ran and the object was stored.
    Miss,
}

impl CacheStatus {
    /// `"hit"` or `"miss"`, as `elfjit run --cache --json` prints it.
    pub fn name(self) -> &'static str {
        match self {
            CacheStatus::Hit => "hit",
            CacheStatus::Miss => "miss",
        }
    }
}

impl fmt::Display for CacheStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What compiled a kernel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CompiledBy {
    /// A compile server of this process's pool.
    Server {
        /// Its process id.
        pid: u32,
        /// The server executable.
        binary: PathBuf,
    },
    /// A clang spawned for the compile.
    Spawned {
        /// Why no server compiled it.
        reason: String,
    },
}

impl fmt::Display for CompiledBy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CompiledBy::Server { pid, binary } => {
                write!(f, "compile server (pid {pid}, {})", binary.display())
            }
            CompiledBy::Spawned { reason } => write!(f, "spawned clang ({reason})"),
        }
    }
}

/// How a compile server's request took its time ([`crate::route::last_server_timing`]
/// reports the last one).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServerTiming {
    /// From the request's first byte written to the reply's last read, in this process.
    pub round_trip: Duration,
    /// What the server reports: from the request read in full to the reply ready.
    pub server: Duration,
}

impl ServerTiming {
    /// The protocol's share: the round trip less the server's own time.
    pub fn overhead(&self) -> Duration {
        self.round_trip.saturating_sub(self.server)
    }
}
