//! Float and double arguments and returns, called from Rust into kernels clang compiled for
//! the test's own architecture: proves the compile flags pick the platform's calling
//! convention (on riscv64, LP64D: `-march=rv64gc -mabi=lp64d`, FP arguments in fa0-fa7,
//! then in integer registers, then on the stack; small float structs flattened into FP
//! registers). Runs natively on x86_64 and under qemu-user for the cross targets.

use elfjit_core::Plan;
use elfjit_os::{MmapBackend, ProcessResolver};
mod common;

use common::compile;

const KERNELS: &str = r#"
double mixd(double a, float b, int c, double d) { return a * b + c - d; }
float mixf(float a, double b, float c) { return a + (float)b * c; }
/* Ten doubles: eight in FP registers, the rest in integer registers or on the stack. */
double many(double a0, double a1, double a2, double a3, double a4, double a5, double a6,
            double a7, double a8, double a9, float f, int i) {
    return a0 + 2 * a1 + 3 * a2 + 4 * a3 + 5 * a4 + 6 * a5 + 7 * a6 + 8 * a7 + 9 * a8
           + 10 * a9 + 100 * f + 1000 * i;
}
struct pair { float x; double y; };
struct pair swap_pair(struct pair p) { struct pair r = { (float)p.y, (double)p.x }; return r; }
double dot3(const double *v, const float *w) { return v[0] * w[0] + v[1] * w[1] + v[2] * w[2]; }
"#;

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
struct Pair {
    x: f32,
    y: f64,
}

#[test]
fn float_and_double_arguments_and_returns() {
    for opt in ["-O0", "-O1", "-O2", "-O3"] {
        let object = compile(KERNELS, opt);
        let mut memory = MmapBackend::new();
        let page = memory.page_size();
        let plan = Plan::new(&[&object], page).expect("plan");
        let image = plan.link(&mut memory, &mut ProcessResolver).expect("link");
        let get = |name: &str| image.symbol(name).unwrap_or_else(|| panic!("no {name}")) as usize;
        // SAFETY (all transmutes below): each signature matches its C definition above, and
        // `memory` keeps the code mapped until the end of the iteration.
        unsafe {
            let mixd: extern "C" fn(f64, f32, i32, f64) -> f64 = std::mem::transmute(get("mixd"));
            assert_eq!(mixd(1.5, 4.0, 3, 0.25), 8.75, "{opt}");
            let mixf: extern "C" fn(f32, f64, f32) -> f32 = std::mem::transmute(get("mixf"));
            assert_eq!(mixf(0.5, 3.0, -2.0), -5.5, "{opt}");
            type Many =
                extern "C" fn(f64, f64, f64, f64, f64, f64, f64, f64, f64, f64, f32, i32) -> f64;
            let many: Many = std::mem::transmute(get("many"));
            let a: Vec<f64> = (1..=10).map(|i| i as f64 / 8.0).collect();
            let want: f64 = a
                .iter()
                .enumerate()
                .map(|(i, v)| (i + 1) as f64 * v)
                .sum::<f64>()
                + 100.0 * 0.5
                + 1000.0 * -3.0;
            let got = many(
                a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], 0.5, -3,
            );
            assert_eq!(got, want, "{opt}");
            let swap_pair: extern "C" fn(Pair) -> Pair = std::mem::transmute(get("swap_pair"));
            assert_eq!(
                swap_pair(Pair { x: 1.25, y: -7.5 }),
                Pair { x: -7.5, y: 1.25 },
                "{opt}"
            );
            let dot3: extern "C" fn(*const f64, *const f32) -> f64 =
                std::mem::transmute(get("dot3"));
            let (v, w) = ([1.0f64, 2.0, 3.0], [0.5f32, 0.25, 2.0]);
            assert_eq!(dot3(v.as_ptr(), w.as_ptr()), 7.0, "{opt}");
        }
    }
}
