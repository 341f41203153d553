//! Registering a loaded `.eh_frame` with the process's unwinder, so that a panic or a
//! backtrace in a callback unwinds through kernel frames to their callers.
//!
//! The two unwinders a Linux process can have disagree on what `__register_frame` takes:
//! libgcc (`libgcc_s`, what Rust and C++ programs use on GNU/Linux) takes a whole
//! `.eh_frame` section, which it walks to a 4-byte zero terminator (the core leaves one
//! after every loaded `.eh_frame`); LLVM's libunwind takes one FDE per call. Which one
//! this process unwinds with is told by where `_Unwind_RaiseException` comes from: the
//! registration functions are taken from that same library, and it is libunwind when that
//! library also exports `__unw_add_dynamic_fde`.

use crate::platform::{global_symbol, object_base};
use crate::published::EhFrame;
use crate::Error;
use std::ffi::{c_void, CStr};
use std::sync::OnceLock;

type FrameFn = unsafe extern "C" fn(*const c_void);

/// The process's unwinder and its registration functions.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Unwinder {
    register: FrameFn,
    deregister: FrameFn,
    /// LLVM libunwind (one FDE per call) rather than libgcc (whole sections).
    per_fde: bool,
}

/// Which unwinder a process has (see [`unwinder_kind`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnwinderKind {
    /// libgcc's (`__register_frame` takes a terminated `.eh_frame`).
    Libgcc,
    /// LLVM's libunwind (`__register_frame` takes one FDE).
    LlvmLibunwind,
}

fn detect() -> Option<Unwinder> {
    let raise = global_symbol(c"_Unwind_RaiseException")?;
    let base = object_base(raise);
    // The registration functions of the library that unwinds, not of another one that
    // happens to come first in the search order.
    let same_library = |name: &CStr| {
        let address = global_symbol(name)?;
        (object_base(address) == base).then_some(address)
    };
    let register = same_library(c"__register_frame")?;
    let deregister = same_library(c"__deregister_frame")?;
    let per_fde = same_library(c"__unw_add_dynamic_fde").is_some();
    // SAFETY: both symbols are the unwinder's `void f(const void *)` functions.
    let (register, deregister) = unsafe {
        (
            std::mem::transmute::<*mut c_void, FrameFn>(register),
            std::mem::transmute::<*mut c_void, FrameFn>(deregister),
        )
    };
    Some(Unwinder {
        register,
        deregister,
        per_fde,
    })
}

/// The process's unwinder, found once.
pub(crate) fn unwinder() -> Option<Unwinder> {
    static FOUND: OnceLock<Option<Unwinder>> = OnceLock::new();
    *FOUND.get_or_init(detect)
}

/// Which unwinder this process has, if `__register_frame` could be found in it.
pub fn unwinder_kind() -> Option<UnwinderKind> {
    unwinder().map(|u| {
        if u.per_fde {
            UnwinderKind::LlvmLibunwind
        } else {
            UnwinderKind::Libgcc
        }
    })
}

/// The offsets of the FDEs in an `.eh_frame` of `bytes` (CIEs skipped), up to the
/// terminator or the end. `None` if a record runs past the end.
pub(crate) fn fde_offsets(bytes: &[u8]) -> Option<Vec<usize>> {
    let word = |at: usize| -> Option<u32> {
        Some(u32::from_ne_bytes(
            bytes.get(at..at.checked_add(4)?)?.try_into().ok()?,
        ))
    };
    let mut fdes = Vec::new();
    let mut at = 0usize;
    while at < bytes.len() {
        let length = word(at)?;
        if length == 0 {
            break; // terminator
        }
        let (header, length) = if length == u32::MAX {
            let high = bytes.get(at + 4..at + 12)?;
            (
                12usize,
                usize::try_from(u64::from_ne_bytes(high.try_into().ok()?)).ok()?,
            )
        } else {
            (4usize, length as usize)
        };
        let id = word(at + header)?;
        let end = at.checked_add(header)?.checked_add(length)?;
        if end > bytes.len() {
            return None;
        }
        if id != 0 {
            fdes.push(at);
        }
        at = end;
    }
    Some(fdes)
}

/// Frames registered with the unwinder; deregistered when dropped.
pub(crate) struct Frames {
    unwinder: Unwinder,
    /// What was passed to `__register_frame`: section starts (libgcc) or FDEs (libunwind).
    registered: Vec<usize>,
}

/// Registers `frames` (loaded, relocated, each followed by a zero terminator).
///
/// # Safety
/// Each frame's `size` bytes and the 4 after them are mapped readable in this process and
/// stay so, unchanged, until the returned value is dropped.
pub(crate) unsafe fn register(module: &str, frames: &[EhFrame]) -> Result<Option<Frames>, Error> {
    if frames.is_empty() {
        return Ok(None);
    }
    let Some(unwinder) = unwinder() else {
        return Ok(None);
    };
    let mut registered = Vec::new();
    for frame in frames {
        let Ok(size) = usize::try_from(frame.size) else {
            continue;
        };
        let start = frame.address as usize;
        if unwinder.per_fde {
            // SAFETY: the caller guarantees the section's bytes are mapped and readable.
            let bytes = unsafe { std::slice::from_raw_parts(start as *const u8, size) };
            let offsets = fde_offsets(bytes).ok_or_else(|| Error::Object {
                module: module.to_string(),
                what: "a record of .eh_frame runs past the section's end".to_string(),
            })?;
            registered.extend(offsets.into_iter().map(|o| start + o));
        } else if size >= 4 {
            registered.push(start);
        }
    }
    for &address in &registered {
        // SAFETY: `address` is a relocated .eh_frame (or one of its FDEs) that the caller
        // keeps mapped until `Frames` is dropped, which deregisters it first.
        unsafe { (unwinder.register)(address as *const c_void) };
    }
    Ok(Some(Frames {
        unwinder,
        registered,
    }))
}

impl Drop for Frames {
    fn drop(&mut self) {
        for &address in self.registered.iter().rev() {
            // SAFETY: registered by `register` with the same unwinder, still mapped.
            unsafe { (self.unwinder.deregister)(address as *const c_void) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(id: u32, body: usize) -> Vec<u8> {
        let mut r = ((4 + body) as u32).to_ne_bytes().to_vec();
        r.extend_from_slice(&id.to_ne_bytes());
        r.resize(8 + body, 0);
        r
    }

    #[test]
    fn fdes_are_found_and_cies_skipped() {
        let mut section = record(0, 12); // CIE
        section.extend(record(28, 16)); // FDE at 20
        section.extend(record(52, 16)); // FDE at 44
        section.extend([0; 4]); // terminator
        assert_eq!(fde_offsets(&section), Some(vec![20, 44]));
        // Without the terminator the walk stops at the end.
        assert_eq!(
            fde_offsets(&section[..section.len() - 4]),
            Some(vec![20, 44])
        );
        // A record longer than the section is refused.
        let mut bad = record(0, 12);
        bad[0] = 200;
        assert_eq!(fde_offsets(&bad), None);
    }

    #[test]
    fn this_process_unwinds_with_libgcc() {
        // Rust on GNU/Linux links libgcc_s.
        assert_eq!(unwinder_kind(), Some(UnwinderKind::Libgcc));
    }
}
