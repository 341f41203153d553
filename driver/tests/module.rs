//! The loader on real clang output: link, look up, call through typed pointers.
//!
//! Loading, calling and sharing a module run on every host. The far-call and code-model
//! tests are x86_64's: they hand-assemble an x86_64 callee and name x86_64 relocations
//! and code models (each other architecture's far calls run under qemu in
//! `tests/tests/emulated.rs`), so they are compiled only there.

use elfjit::{Module, Symbol};

#[path = "common/objects.rs"]
mod objects;

/// Compiles C for this machine with the bare-metal flags, bypassing the driver's flags
/// table so these tests isolate the loader (on Windows: read from what a Linux run stored,
/// `common/objects.rs`).
fn compile(source: &str, extra: &[&str]) -> Vec<u8> {
    objects::loader_object(source, extra)
}

#[test]
fn typed_symbols_borrow_the_module() {
    let module = Module::load(&compile(KERNEL, &["-O2"])).expect("load");
    let add: Symbol<'_, unsafe extern "C" fn(i32, i32) -> i32> = module.get("add").unwrap();
    assert_eq!(add.address(), module.symbol("add").unwrap());
    // SAFETY: `add` is `int add(int, int)`, and `module` outlives the call.
    assert_eq!(unsafe { add(2, 40) }, 42);
    // Data is a raw pointer; a function type for data, or an unknown name, is an error.
    let calls = module.get::<*const i32>("calls").unwrap();
    // SAFETY: `calls` is an `int` in the module's data, zero before any call.
    assert_eq!(unsafe { **calls }, 0);
    let e = module
        .get::<unsafe extern "C" fn() -> i32>("calls")
        .unwrap_err();
    assert!(e.to_string().contains("unknown entry `calls`"), "{e}");
    assert!(module.get::<*const u8>("nope").is_err());
}

const KERNEL: &str = r#"
int add(int a, int b) { return a + b; }
static const float lut[4] = {1, 2, 3, 4};
float weighted(const float *x, int n) {
    float s = 0;
    for (int i = 0; i < n; i++) s += __builtin_sqrtf(x[i]) * lut[i & 3];
    return s;
}
extern float expf(float);
int calls;
float count_exp(float x) { calls++; return expf(x); }
int get_calls(void) { return calls; }
"#;

#[test]
fn loads_and_calls_at_every_opt_level() {
    for opt in ["-O0", "-O1", "-O2", "-O3"] {
        let object = compile(KERNEL, &[opt]);
        let module = Module::load(&object).expect("load");
        assert_eq!(
            module.functions(),
            ["add", "weighted", "count_exp", "get_calls"]
        );
        // SAFETY: the signatures match the C definitions above.
        unsafe {
            let add: extern "C" fn(i32, i32) -> i32 =
                std::mem::transmute(module.symbol("add").unwrap());
            assert_eq!(add(2, 40), 42, "{opt}");
            let weighted: extern "C" fn(*const f32, i32) -> f32 =
                std::mem::transmute(module.symbol("weighted").unwrap());
            let x: Vec<f32> = (0..37).map(|i| i as f32).collect();
            let expect: f32 = x
                .iter()
                .enumerate()
                .map(|(i, v)| v.sqrt() * [1., 2., 3., 4.][i & 3])
                .sum();
            let got = weighted(x.as_ptr(), x.len() as i32);
            assert!(
                (got - expect).abs() <= expect.abs() * 1e-5,
                "{opt}: {got} vs {expect}"
            );
            let count_exp: extern "C" fn(f32) -> f32 =
                std::mem::transmute(module.symbol("count_exp").unwrap());
            let get_calls: extern "C" fn() -> i32 =
                std::mem::transmute(module.symbol("get_calls").unwrap());
            assert!((count_exp(1.0) - std::f32::consts::E).abs() < 1e-6);
            count_exp(0.0);
            assert_eq!(get_calls(), 2, "{opt}");
        }
    }
}

/// A page of machine code mapped read/execute at least 8 GiB away from `near`.
#[cfg(target_arch = "x86_64")]
struct FarCode {
    address: usize,
    len: usize,
}

#[cfg(target_arch = "x86_64")]
impl FarCode {
    fn new(near: usize, code: &[u8]) -> FarCode {
        let len = 4096;
        for step in 1..64usize {
            // 64 KiB-aligned: Windows places allocations at that granularity.
            let hint = (near & !0xffff).wrapping_add(step << 33);
            let Some(address) = far_page::map_writable_at(hint, len) else {
                continue;
            };
            // SAFETY: the page is ours, writable and `len` ≥ code.len() bytes long; then it
            // becomes read/execute (never both writable and executable).
            unsafe {
                std::ptr::copy_nonoverlapping(code.as_ptr(), address as *mut u8, code.len());
                far_page::make_executable(address, len);
            }
            return FarCode { address, len };
        }
        panic!("no free address 8 GiB or more away from {near:#x}");
    }
}

#[cfg(target_arch = "x86_64")]
impl Drop for FarCode {
    fn drop(&mut self) {
        // SAFETY: unmapping the page this value mapped, once.
        unsafe { far_page::unmap(self.address, self.len) };
    }
}

/// The far page's memory calls, per OS.
#[cfg(all(target_arch = "x86_64", unix))]
mod far_page {
    /// A fresh read/write page at exactly `hint`, or `None` if that is taken.
    pub fn map_writable_at(hint: usize, len: usize) -> Option<usize> {
        // SAFETY: MAP_FIXED_NOREPLACE never replaces an existing mapping; on success we
        // own the fresh page.
        let address = unsafe {
            libc::mmap(
                hint as *mut _,
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE,
                -1,
                0,
            )
        };
        (address != libc::MAP_FAILED && address as usize == hint).then_some(hint)
    }

    /// # Safety
    /// `[address, address + len)` is a page `map_writable_at` gave.
    pub unsafe fn make_executable(address: usize, len: usize) {
        // SAFETY: see the contract.
        let r =
            unsafe { libc::mprotect(address as *mut _, len, libc::PROT_READ | libc::PROT_EXEC) };
        assert_eq!(r, 0);
    }

    /// # Safety
    /// As `make_executable`, and nothing uses the page any more.
    pub unsafe fn unmap(address: usize, len: usize) {
        // SAFETY: see the contract.
        unsafe { libc::munmap(address as *mut _, len) };
    }
}

/// The far page's memory calls, per OS.
#[cfg(all(target_arch = "x86_64", windows))]
mod far_page {
    use windows_sys::Win32::System::Memory::{
        VirtualAlloc, VirtualFree, VirtualProtect, MEM_COMMIT, MEM_RELEASE, MEM_RESERVE,
        PAGE_EXECUTE_READ, PAGE_READWRITE,
    };

    /// A fresh read/write page at exactly `hint` (64 KiB-aligned), or `None` if taken.
    pub fn map_writable_at(hint: usize, len: usize) -> Option<usize> {
        // SAFETY: VirtualAlloc at an address fails rather than replace anything there.
        let address = unsafe {
            VirtualAlloc(
                hint as *const _,
                len,
                MEM_RESERVE | MEM_COMMIT,
                PAGE_READWRITE,
            )
        };
        (address as usize == hint).then_some(hint)
    }

    /// # Safety
    /// `[address, address + len)` is a page `map_writable_at` gave.
    pub unsafe fn make_executable(address: usize, len: usize) {
        let mut old = 0;
        // SAFETY: see the contract.
        let r = unsafe { VirtualProtect(address as *const _, len, PAGE_EXECUTE_READ, &mut old) };
        assert_ne!(r, 0);
    }

    /// # Safety
    /// As `make_executable`, and nothing uses the page any more.
    pub unsafe fn unmap(address: usize, _len: usize) {
        // SAFETY: see the contract.
        unsafe { VirtualFree(address as *mut _, 0, MEM_RELEASE) };
    }
}

#[test]
#[cfg(target_arch = "x86_64")] // an x86_64 callee, assembled by hand
fn far_external_call_runs_through_the_stub() {
    let object = compile(
        "extern int far_add(int); int call_far(int x) { return far_add(x) + far_add(1); }",
        &["-O2"],
    );
    // The kernel's mapping lands near other anonymous mappings; place the callee far away
    // from a fresh one.
    let probe = Module::load(&compile("int probe(void) { return 0; }", &["-O2"])).unwrap();
    // lea eax, [rdi + 1000] (rcx on Windows, whose x64 convention the kernels use); ret
    let first_argument = if cfg!(windows) { 0x81 } else { 0x87 };
    let far = FarCode::new(
        probe.region().0,
        &[0x8d, first_argument, 0xe8, 0x03, 0x00, 0x00, 0xc3],
    );
    let far_address = far.address as u64;
    let module = Module::load_objects(&[&object], &mut |name| {
        (name == "far_add").then_some(far_address)
    })
    .expect("load");
    let code = module.symbol("call_far").unwrap() as u64;
    assert!(
        code.abs_diff(far_address) > 1 << 31,
        "the callee is beyond rel32 reach"
    );
    // SAFETY: matches `int call_far(int)`.
    let call_far: extern "C" fn(i32) -> i32 = unsafe { std::mem::transmute(code as usize) };
    assert_eq!(call_far(5), 1005 + 1001);
}

#[cfg(target_arch = "x86_64")]
const CODE_MODEL_KERNEL: &str = r#"
extern float expf(float);
static const float lut[4] = {1, 2, 3, 4};
int counter;
static const char *msg = "hello";
float k(float x, int i) { counter++; return expf(x) * lut[i & 3] + msg[i % 5]; }
"#;

/// Every code model clang offers, PIC or not: the GOT-relative large-model forms
/// (GOT64, GOTOFF64, GOTPC64 against `_GLOBAL_OFFSET_TABLE_`) and absolute 64-bit
/// addresses run; 32-bit absolute addresses to an image above 2 GiB are refused by name.
/// With the dlopen-fallback, absolute addresses in code would be text relocations (code
/// mapped writable while glibc patches it): refused, so W^X holds there too (issue 12).
#[test]
#[cfg(target_arch = "x86_64")] // x86_64's code models and relocations
fn every_code_model_loads_or_is_refused_clearly() {
    let fallback = cfg!(feature = "dlopen-fallback");
    // Windows targets reject -fPIC (their code is RIP-relative anyway).
    let pics: &[&str] = if cfg!(windows) {
        &["-fno-pic"]
    } else {
        &["-fPIC", "-fno-pic"]
    };
    for model in ["small", "medium", "large"] {
        for &pic in pics {
            let object = compile(
                CODE_MODEL_KERNEL,
                &["-O2", pic, &format!("-mcmodel={model}")],
            );
            let text_relocations = fallback && pic == "-fno-pic" && model == "large";
            match Module::load(&object) {
                Ok(_) if text_relocations => {
                    panic!("{model} {pic}: linked with text relocations (writable code)")
                }
                Err(e) if text_relocations => {
                    let text = e.to_string();
                    assert!(text.contains("text relocations"), "{model} {pic}: {text}");
                    assert!(text.contains("R_X86_64_64"), "{model} {pic}: {text}");
                }
                Ok(module) => {
                    // SAFETY: matches `float k(float, int)`.
                    let k: extern "C" fn(f32, i32) -> f32 =
                        unsafe { std::mem::transmute(module.symbol("k").unwrap()) };
                    let expect = 1f32.exp() * 3.0 + b'l' as f32;
                    assert!((k(1.0, 2) - expect).abs() < 1e-4, "{model} {pic}");
                }
                Err(e) => {
                    let text = e.to_string();
                    assert!(
                        pic == "-fno-pic" && model != "large" && text.contains("R_X86_64_32S"),
                        "{model} {pic}: {text}"
                    );
                    assert!(
                        module_is_above_2gib(),
                        "32-bit absolute addresses only fail for high images"
                    );
                }
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
fn module_is_above_2gib() -> bool {
    let probe = Module::load(&compile("int probe(void) { return 0; }", &["-O2"])).unwrap();
    probe.region().0 as u64 > u32::MAX as u64 / 2
}

#[test]
fn modules_are_send_and_sync_and_callable_from_other_threads() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Module>();
    let module = std::sync::Arc::new(Module::load(&compile(KERNEL, &["-O2"])).unwrap());
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let module = module.clone();
            std::thread::spawn(move || {
                // SAFETY: matches `int add(int, int)`; the Arc keeps the module alive.
                let add: extern "C" fn(i32, i32) -> i32 =
                    unsafe { std::mem::transmute(module.symbol("add").unwrap()) };
                (0..1000).all(|i| add(i, t) == i + t)
            })
        })
        .collect();
    assert!(threads.into_iter().all(|t| t.join().unwrap()));
}
