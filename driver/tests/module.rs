//! The loader on real clang output: link, look up, call through typed pointers.

use elfjit::Module;
use std::io::Write;
use std::process::{Command, Stdio};

/// Compiles C for the host with the bare-metal flags, bypassing the driver's flags table so
/// these tests isolate the loader.
fn compile(source: &str, extra: &[&str]) -> Vec<u8> {
    let clang = std::env::var("ELFJIT_CLANG").unwrap_or_else(|_| "clang-19".into());
    let mut child = Command::new(clang)
        .args([
            "--target=x86_64-none-unknown-elf",
            "-c",
            "-fPIC",
            "-ffreestanding",
        ])
        .args([
            "-fno-math-errno",
            "-fno-stack-protector",
            "-x",
            "c",
            "-",
            "-o",
            "-",
        ])
        .args(extra)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("clang");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(source.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    out.stdout
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
struct FarCode {
    address: *mut libc::c_void,
    len: usize,
}

impl FarCode {
    fn new(near: usize, code: &[u8]) -> FarCode {
        let len = 4096;
        for step in 1..64usize {
            let hint = (near & !0xfff).wrapping_add(step << 33);
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
            if address == libc::MAP_FAILED || address as usize != hint {
                continue;
            }
            // SAFETY: the page is ours, writable and `len` ≥ code.len() bytes long; then it
            // becomes read/execute (never both writable and executable).
            unsafe {
                std::ptr::copy_nonoverlapping(code.as_ptr(), address.cast::<u8>(), code.len());
                assert_eq!(
                    libc::mprotect(address, len, libc::PROT_READ | libc::PROT_EXEC),
                    0
                );
            }
            return FarCode { address, len };
        }
        panic!("no free address 8 GiB or more away from {near:#x}");
    }
}

impl Drop for FarCode {
    fn drop(&mut self) {
        // SAFETY: unmapping the page this value mapped, once.
        unsafe { libc::munmap(self.address, self.len) };
    }
}

#[test]
fn far_external_call_runs_through_the_stub() {
    let object = compile(
        "extern int far_add(int); int call_far(int x) { return far_add(x) + far_add(1); }",
        &["-O2"],
    );
    // The kernel's mapping lands near other anonymous mappings; place the callee far away
    // from a fresh one.
    let probe = Module::load(&compile("int probe(void) { return 0; }", &["-O2"])).unwrap();
    // lea eax, [rdi + 1000]; ret
    let far = FarCode::new(
        probe.region().0,
        &[0x8d, 0x87, 0xe8, 0x03, 0x00, 0x00, 0xc3],
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
fn every_code_model_loads_or_is_refused_clearly() {
    let fallback = cfg!(feature = "dlopen-fallback");
    for model in ["small", "medium", "large"] {
        for pic in ["-fPIC", "-fno-pic"] {
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
