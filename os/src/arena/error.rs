//! [`ArenaError`]: what went wrong getting or publishing arena memory, with what ran out,
//! the size asked for and the limit.

use elfjit_core::BackendError;
use std::fmt;

/// A limit the arena can run into.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resource {
    /// The arena's own reservation limit ([`ArenaConfig::max_reserved`](super::ArenaConfig)).
    ArenaLimit,
    /// The process's address space (`RLIMIT_AS`, or no free range of that size).
    AddressSpace,
    /// The number of mappings a process may have (`vm.max_map_count`).
    MapCount,
}

impl fmt::Display for Resource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Resource::ArenaLimit => "the arena's reservation limit",
            Resource::AddressSpace => "the address space",
            Resource::MapCount => "the map count (vm.max_map_count)",
        })
    }
}

/// Why the arena could not provide or publish memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArenaError {
    /// A limit was reached: `resource` ran out while a module asked for `requested` bytes
    /// (its segments' sizes) and the arena was reserving or protecting `reserving` bytes
    /// for it (a new chunk, or the module's pages; 0 if nothing was reserved); `limit` is
    /// that limit in its unit (bytes, or mappings for [`Resource::MapCount`]), 0 if
    /// unknown; `errno` is the OS error, 0 if none.
    Exhausted {
        resource: Resource,
        requested: u64,
        reserving: u64,
        limit: u64,
        errno: i32,
    },
    /// A packed arena needs an executable memfd mapped twice, and the system refused:
    /// `step` names the call that failed (`memfd_create`, `ftruncate`, `mmap` of the
    /// executable view, ...).
    PackedUnavailable { step: &'static str, errno: i32 },
    /// A packed arena made before `fork` cannot load in the child: its writable view is
    /// not inherited. Create a new arena in the child.
    UsedAfterFork,
    /// This operating system cannot do what was asked: `feature` names it (packed mode
    /// where the OS layer has no shared memory to map twice).
    Unsupported {
        feature: &'static str,
        platform: crate::Platform,
    },
    /// The OS refused the per-thread JIT memory code runs from where the arena needs it
    /// (macOS on arm64: `MAP_JIT`, which the hardened runtime allows only with the
    /// `com.apple.security.cs.allow-jit` entitlement): `step` names the call that failed and
    /// what the process needs for it, `errno` is the OS error. No other scheme is tried
    /// (docs/os-support.md says why).
    JitUnavailable { step: &'static str, errno: i32 },
    /// A system call failed for a reason other than a limit.
    Os {
        op: &'static str,
        size: u64,
        errno: i32,
    },
    /// The request itself is unusable (an alignment that is not a power of two, a layout
    /// that does not match the one a batch reserved, a second allocation).
    BadRequest { what: &'static str, size: u64 },
    /// A request larger than the arena can ever hold, refused before anything is reserved:
    /// `what` names the value (a segment's size or alignment, a module's or a batch's
    /// pages), `size` is it in bytes (`u64::MAX` if it overflows) and `limit` the most the
    /// arena takes ([`Arena::request_limit`](super::Arena::request_limit)).
    TooLarge {
        what: &'static str,
        size: u64,
        limit: u64,
    },
}

impl fmt::Display for ArenaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            ArenaError::Exhausted {
                resource,
                requested,
                reserving,
                limit,
                errno,
            } => {
                write!(
                    f,
                    "code arena: {resource} is exhausted asking for {requested} bytes"
                )?;
                if reserving != 0 {
                    write!(f, " (while mapping {reserving} bytes for them)")?;
                }
                match resource {
                    Resource::MapCount if limit != 0 => write!(f, "; limit {limit} mappings")?,
                    _ if limit != 0 => write!(f, "; limit {limit} bytes")?,
                    _ => {}
                }
                if errno != 0 {
                    write!(f, ": {}", std::io::Error::from_raw_os_error(errno))?;
                }
                Ok(())
            }
            ArenaError::PackedUnavailable { step, errno: 0 } => write!(
                f,
                "code arena: packed mode is unavailable: {step}; use a page-granular arena"
            ),
            ArenaError::PackedUnavailable { step, errno } => write!(
                f,
                "code arena: packed mode needs an executable memfd mapped twice, and {step} \
                 failed ({}); use a page-granular arena",
                std::io::Error::from_raw_os_error(errno)
            ),
            ArenaError::UsedAfterFork => f.write_str(
                "code arena: a packed arena created before fork cannot load in the child \
                 (its writable view is not inherited); create a new arena in the child",
            ),
            ArenaError::Unsupported { feature, platform } => {
                write!(f, "code arena: {feature} is not supported on {platform}")
            }
            ArenaError::JitUnavailable { step, errno } => write!(
                f,
                "code arena: executable memory is refused: failed to {step}: {}",
                std::io::Error::from_raw_os_error(errno)
            ),
            ArenaError::Os { op, size, errno } => {
                write!(
                    f,
                    "code arena: {op} of {size} bytes failed: {}",
                    std::io::Error::from_raw_os_error(errno)
                )
            }
            ArenaError::BadRequest { what, size } => {
                write!(f, "code arena: bad request ({what}, {size} bytes)")
            }
            ArenaError::TooLarge { what, size, limit } => write!(
                f,
                "code arena: {what} of {size} bytes is above the arena's limit of {limit} bytes"
            ),
        }
    }
}

impl std::error::Error for ArenaError {}

impl From<ArenaError> for BackendError {
    fn from(e: ArenaError) -> BackendError {
        match e {
            ArenaError::Exhausted {
                resource,
                requested,
                errno,
                ..
            } => BackendError::new(
                match resource {
                    Resource::ArenaLimit => "allocate (the arena's reservation limit is reached)",
                    Resource::AddressSpace => "allocate (the address space is exhausted)",
                    Resource::MapCount => "allocate (the map count, vm.max_map_count, is reached)",
                },
                requested,
                errno,
            ),
            ArenaError::PackedUnavailable { errno, .. } => {
                BackendError::new("map the packed arena's memfd", 0, errno)
            }
            ArenaError::UsedAfterFork => {
                BackendError::new("allocate (packed arena used after fork)", 0, 0)
            }
            ArenaError::Unsupported { feature, .. } => BackendError::new(feature, 0, 0),
            ArenaError::JitUnavailable { step, errno } => BackendError::new(step, 0, errno),
            ArenaError::Os { op, size, errno } => BackendError::new(op, size, errno),
            ArenaError::BadRequest { what, size } => BackendError::new(what, size, 0),
            ArenaError::TooLarge { size, .. } => {
                BackendError::new("allocate (above the arena's size limit)", size, 0)
            }
        }
    }
}

impl ArenaError {
    /// This error, for a module that asked for `requested` bytes.
    pub(crate) fn for_request(self, requested: u64) -> ArenaError {
        match self {
            ArenaError::Exhausted {
                resource,
                requested: reserving,
                limit,
                errno,
                ..
            } => ArenaError::Exhausted {
                resource,
                requested,
                reserving,
                limit,
                errno,
            },
            other => other,
        }
    }
}
