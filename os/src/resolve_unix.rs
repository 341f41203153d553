//! Unix (Linux, macOS, FreeBSD): a symbol is looked up with `dlsym(RTLD_DEFAULT)` (libc's
//! `memcpy`, anything the program exports), then in libm, opened once, since a program
//! that uses no libm function may not have it loaded. macOS has no separate libm (its
//! math is in libSystem, which `RTLD_DEFAULT` searches).

use std::ffi::CStr;
use std::sync::OnceLock;

/// The maths library to open, if the OS has one apart from its C library.
#[cfg(target_os = "linux")]
const LIBM: Option<&CStr> = Some(c"libm.so.6");
#[cfg(target_os = "freebsd")]
const LIBM: Option<&CStr> = Some(c"libm.so.5");
#[cfg(not(any(target_os = "linux", target_os = "freebsd")))]
const LIBM: Option<&CStr> = None;

/// A `dlopen` handle that lives for the whole process.
struct Handle(*mut libc::c_void);
// SAFETY: a dlopen handle is an opaque token that the C library lets any thread use with
// dlsym.
unsafe impl Send for Handle {}
// SAFETY: see `Send`.
unsafe impl Sync for Handle {}

fn libm() -> Option<*mut libc::c_void> {
    static HANDLE: OnceLock<Handle> = OnceLock::new();
    let handle = HANDLE.get_or_init(|| match LIBM {
        // SAFETY: dlopen with a constant NUL-terminated name; the handle is never closed,
        // so addresses from it stay valid for the life of the process.
        Some(name) => {
            Handle(unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) })
        }
        None => Handle(std::ptr::null_mut()),
    });
    (!handle.0.is_null()).then_some(handle.0)
}

fn dlsym(handle: *mut libc::c_void, name: &CStr) -> Option<u64> {
    // SAFETY: `name` is NUL-terminated; `handle` is RTLD_DEFAULT or a live dlopen handle.
    let address = unsafe { libc::dlsym(handle, name.as_ptr()) };
    (!address.is_null()).then_some(address as u64)
}

/// `name`'s address through `dlsym(RTLD_DEFAULT)`, then libm.
pub(crate) fn lookup(name: &CStr) -> Option<u64> {
    dlsym(libc::RTLD_DEFAULT, name).or_else(|| libm().and_then(|h| dlsym(h, name)))
}
