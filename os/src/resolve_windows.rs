//! Windows: a symbol is looked up with `GetProcAddress` in every module the process has
//! loaded (`EnumProcessModules`: the program, kernel32, ntdll (which exports `__chkstk`),
//! the C runtime the program uses), then in the C runtime's DLLs, loaded once and kept:
//! `ucrtbase.dll` (the Universal CRT: `expf` and the rest of the C99 maths), then
//! `msvcrt.dll`. A program that exports nothing still gets `memcpy` and `expf` this way.
//!
//! Kernels for Windows are compiled for the Windows x64 calling convention
//! (`x86_64-pc-windows-elf`, see docs/os-support.md), so they call these functions
//! directly, and the program calls kernels as `extern "C"`.

use std::ffi::CStr;
use std::sync::OnceLock;
use windows_sys::Win32::Foundation::HMODULE;
use windows_sys::Win32::System::LibraryLoader::{GetProcAddress, LoadLibraryA};
use windows_sys::Win32::System::ProcessStatus::K32EnumProcessModules;
use windows_sys::Win32::System::Threading::GetCurrentProcess;

/// The most modules searched (a process has a few dozen).
const MAX_MODULES: usize = 1024;

/// A module handle that lives for the whole process.
#[derive(Clone, Copy)]
struct Module(HMODULE);
// SAFETY: a module handle is an opaque token any thread may pass to GetProcAddress.
unsafe impl Send for Module {}
// SAFETY: see `Send`.
unsafe impl Sync for Module {}

/// The C runtime's DLLs, loaded once; never freed, so addresses from them stay valid.
fn runtimes() -> &'static [Module] {
    static RUNTIMES: OnceLock<Vec<Module>> = OnceLock::new();
    RUNTIMES.get_or_init(|| {
        [c"ucrtbase.dll", c"msvcrt.dll"]
            .iter()
            // SAFETY: LoadLibraryA with a constant NUL-terminated name.
            .map(|name| Module(unsafe { LoadLibraryA(name.as_ptr().cast()) }))
            .filter(|m| !m.0.is_null())
            .collect()
    })
}

/// The modules loaded in the process now (up to [`MAX_MODULES`]).
fn loaded_modules() -> Vec<Module> {
    let mut modules: Vec<HMODULE> = vec![std::ptr::null_mut(); MAX_MODULES];
    let mut needed: u32 = 0;
    let bytes = u32::try_from(MAX_MODULES * std::mem::size_of::<HMODULE>()).unwrap_or(u32::MAX);
    // SAFETY: the call writes at most `bytes` bytes of handles into `modules`; the
    // pseudo-handle of the current process needs no closing.
    let ok = unsafe {
        K32EnumProcessModules(
            GetCurrentProcess(),
            modules.as_mut_ptr(),
            bytes,
            &mut needed,
        )
    };
    if ok == 0 {
        return Vec::new();
    }
    let count = (needed as usize / std::mem::size_of::<HMODULE>()).min(MAX_MODULES);
    modules.truncate(count);
    modules.into_iter().map(Module).collect()
}

fn proc_address(module: Module, name: &CStr) -> Option<u64> {
    // SAFETY: `module` is a loaded module's handle; `name` is NUL-terminated.
    let address = unsafe { GetProcAddress(module.0, name.as_ptr().cast()) }?;
    Some(address as usize as u64)
}

/// `name`'s address in the process's modules, then in the C runtime's DLLs.
pub(crate) fn lookup(name: &CStr) -> Option<u64> {
    loaded_modules()
        .into_iter()
        .chain(runtimes().iter().copied())
        .find_map(|m| proc_address(m, name))
}
