//! [`ProcessResolver`]: undefined symbols of a kernel, looked up in the running process.
//! Order: the OS's own search (Unix, `resolve_unix.rs`: `dlsym(RTLD_DEFAULT)`, then libm;
//! Windows, `resolve_windows.rs`: the process's modules, then the C runtime's DLLs), then
//! the compiler-rt helpers of the Rust runtime ([`crate::builtins`]).
//!
//! Found addresses are remembered for the life of the process (`dlsym` walks every loaded
//! library, which would otherwise dominate loading a small kernel). Misses are not
//! remembered, so a library the program loads later still counts. A library unloaded with
//! `dlclose` after one of its symbols was used here leaves that cached address stale, just
//! as it leaves any kernel that called it pointing at unmapped code.

use crate::builtins;
#[cfg_attr(windows, path = "resolve_windows.rs")]
#[cfg_attr(unix, path = "resolve_unix.rs")]
mod os;
use elfjit_core::SymbolResolver;
use std::collections::BTreeMap;
use std::ffi::CStr;
use std::sync::RwLock;

/// Resolves names through the process. Cheap to create; libraries it opens (libm, the C
/// runtime's DLLs) are opened once per process.
#[derive(Clone, Copy, Debug, Default)]
pub struct ProcessResolver;

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

    /// Takes a first lookup's one-time costs off it: opens the libraries the search
    /// opens, and looks up a name no library defines (symbol names have no `.`) through
    /// all of them, which maps the pages of their symbol tables that a search reads first.
    /// For a fresh process, before its first load ([`crate::Arena::prepare`] does the
    /// arena's part).
    pub fn prepare() {
        let nowhere = c"elfjit.prepare";
        let _ = os::lookup(nowhere);
        let _ = builtins::lookup(nowhere.to_bytes());
    }

    /// The uncached search: the OS's, then the compiler-rt helpers.
    fn search(name: &[u8]) -> Option<u64> {
        let mut owned = Vec::with_capacity(name.len() + 1);
        owned.extend_from_slice(name);
        owned.push(0);
        let c_name = CStr::from_bytes_with_nul(&owned).ok()?;
        os::lookup(c_name).or_else(|| builtins::lookup(name).map(|a| a as u64))
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
