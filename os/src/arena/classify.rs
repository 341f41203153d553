//! What a failed system call of the arena ran out of: the system layer's facts (errno
//! meanings, the map count, the address-space limit) turned into an [`ArenaError`]. Apart
//! from `error.rs` so that the error type does not depend on the OS files, which return it.

use super::error::{ArenaError, Resource};
use super::sys;

/// Classifies a failed `mmap`/`mprotect` of `size` bytes: `ENOMEM` is the map count when
/// the process is at `vm.max_map_count`, otherwise the address space. (The caller names
/// the module's request with [`ArenaError::for_request`].)
pub(crate) fn classify(op: &'static str, size: u64, errno: i32) -> ArenaError {
    if !sys::is_out_of_memory(errno) {
        return ArenaError::Os { op, size, errno };
    }
    let max = sys::max_map_count();
    let now = sys::map_count();
    // A split needs up to two more mappings; within a few of the limit it is the map count.
    if let (Some(max), Some(now)) = (max, now) {
        if now + 4 >= max {
            return ArenaError::Exhausted {
                resource: Resource::MapCount,
                requested: size,
                reserving: size,
                limit: max,
                errno,
            };
        }
    }
    ArenaError::Exhausted {
        resource: Resource::AddressSpace,
        requested: size,
        reserving: size,
        limit: sys::address_space_limit().unwrap_or(0),
        errno,
    }
}
