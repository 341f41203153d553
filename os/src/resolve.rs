//! [`ProcessResolver`]: undefined symbols of a kernel, looked up in the running process.
//! Order: `dlsym(RTLD_DEFAULT)` (libc's memcpy, anything the program exports), then libm
//! (opened once, since a program that uses no libm function may not have it loaded), then
//! the compiler-rt helpers of the Rust runtime ([`crate::builtins`]).
//!
//! Found addresses are remembered for the life of the process (`dlsym` walks every loaded
//! library, which would otherwise dominate loading a small kernel). Misses are not
//! remembered, so a library the program loads later still counts. A library unloaded with
//! `dlclose` after one of its symbols was used here leaves that cached address stale, just
//! as it leaves any kernel that called it pointing at unmapped code.

use crate::builtins;
use elfjit_core::SymbolResolver;
use std::collections::BTreeMap;
use std::ffi::CStr;
use std::sync::{OnceLock, RwLock};

/// Resolves names through the process. Cheap to create; libm is opened once per process.
#[derive(Clone, Copy, Debug, Default)]
pub struct ProcessResolver;

/// A `dlopen` handle that lives for the whole process.
struct Handle(*mut libc::c_void);
// SAFETY: a dlopen handle is an opaque token that glibc lets any thread use with dlsym.
unsafe impl Send for Handle {}
// SAFETY: see `Send`.
unsafe impl Sync for Handle {}

fn libm() -> Option<*mut libc::c_void> {
    static LIBM: OnceLock<Handle> = OnceLock::new();
    let handle = LIBM.get_or_init(|| {
        // SAFETY: dlopen with a constant NUL-terminated name; the handle is never closed,
        // so addresses from it stay valid for the life of the process.
        Handle(unsafe { libc::dlopen(c"libm.so.6".as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) })
    });
    (!handle.0.is_null()).then_some(handle.0)
}

fn dlsym(handle: *mut libc::c_void, name: &CStr) -> Option<u64> {
    // SAFETY: `name` is NUL-terminated; `handle` is RTLD_DEFAULT or a live dlopen handle.
    let address = unsafe { libc::dlsym(handle, name.as_ptr()) };
    (!address.is_null()).then_some(address as u64)
}

/// Addresses already found, by name. An ordered map rather than a `HashMap`: it needs
/// no initialisation (a `HashMap`'s random keys cost a fresh process a `getrandom` call
/// on its first load), and it holds only names something defines, a few hundred at most.
fn found() -> &'static RwLock<BTreeMap<Box<[u8]>, u64>> {
    static FOUND: RwLock<BTreeMap<Box<[u8]>, u64>> = RwLock::new(BTreeMap::new());
    &FOUND
}

impl ProcessResolver {
    /// The address of `name` in this process, if anything provides it.
    pub fn lookup(name: &[u8]) -> Option<u64> {
        if name.is_empty() || name.contains(&0) {
            return None;
        }
        let cached = found().read().ok().and_then(|c| c.get(name).copied());
        if cached.is_some() {
            return cached;
        }
        let address = Self::search(name)?;
        if let Ok(mut cache) = found().write() {
            cache.insert(name.into(), address);
        }
        Some(address)
    }

    /// Takes a first lookup's one-time costs off it: opens libm, and looks up a name no
    /// library defines (symbol names have no `.`) through every loaded library and libm,
    /// which maps the pages of their symbol tables that a search reads first. For a fresh
    /// process, before its first load ([`crate::Arena::prepare`] does the arena's part).
    pub fn prepare() {
        let nowhere = c"elfjit.prepare";
        let _ = dlsym(libc::RTLD_DEFAULT, nowhere);
        let _ = libm().and_then(|h| dlsym(h, nowhere));
        let _ = builtins::lookup(nowhere.to_bytes());
    }

    /// The uncached search: dlsym, then libm, then the compiler-rt helpers.
    fn search(name: &[u8]) -> Option<u64> {
        let mut owned = Vec::with_capacity(name.len() + 1);
        owned.extend_from_slice(name);
        owned.push(0);
        let c_name = CStr::from_bytes_with_nul(&owned).ok()?;
        dlsym(libc::RTLD_DEFAULT, c_name)
            .or_else(|| libm().and_then(|h| dlsym(h, c_name)))
            .or_else(|| builtins::lookup(name).map(|a| a as u64))
    }
}

impl SymbolResolver for ProcessResolver {
    fn resolve(&mut self, name: &[u8]) -> Option<u64> {
        ProcessResolver::lookup(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_libc_libm_and_helpers() {
        assert!(ProcessResolver::lookup(b"memcpy").is_some());
        assert!(ProcessResolver::lookup(b"expf").is_some());
        assert!(ProcessResolver::lookup(b"tanhf").is_some());
        assert!(ProcessResolver::lookup(b"__udivti3").is_some());
        assert!(ProcessResolver::lookup(b"__extendhfsf2").is_some());
        assert_eq!(ProcessResolver::lookup(b"no_such_symbol_elfjit"), None);
        assert_eq!(ProcessResolver::lookup(b""), None);
        assert_eq!(ProcessResolver::lookup(b"mem\0cpy"), None);
    }

    #[test]
    fn prepare_finds_nothing_and_changes_no_answer() {
        let before = ProcessResolver::lookup(b"expf");
        ProcessResolver::prepare();
        ProcessResolver::prepare();
        assert_eq!(ProcessResolver::lookup(b"elfjit.prepare"), None);
        assert_eq!(ProcessResolver::lookup(b"expf"), before);
        assert!(before.is_some());
    }

    #[test]
    fn cached_answers_match_fresh_ones() {
        for name in [&b"memcpy"[..], b"expf", b"__udivti3"] {
            let first = ProcessResolver::lookup(name);
            assert_eq!(first, ProcessResolver::search(name));
            assert_eq!(ProcessResolver::lookup(name), first);
        }
        // A miss is not remembered as a miss.
        assert_eq!(ProcessResolver::lookup(b"elfjit_not_yet_defined"), None);
        assert!(!found()
            .read()
            .unwrap()
            .contains_key(&b"elfjit_not_yet_defined"[..]));
    }

    #[test]
    fn resolved_expf_is_callable() {
        let address = ProcessResolver::lookup(b"expf").expect("expf");
        // SAFETY: libm's expf has exactly this signature.
        let expf: extern "C" fn(f32) -> f32 = unsafe { std::mem::transmute(address as usize) };
        assert!((expf(1.0) - std::f32::consts::E).abs() < 1e-6);
    }
}
