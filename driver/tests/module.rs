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
