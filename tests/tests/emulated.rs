//! Emulated runs: the whole corpus, a far call, and the failure paths, through elfjit's own
//! runner under qemu-user (`elfjit::emulate`).
//!
//! x86_64 runs here through the runner under qemu-x86_64 (forced emulation), which checks
//! the machinery itself against the native results. Every other architecture runs once its
//! relocator has landed in the core.
//!
//! **To enable an architecture**: when it passes the whole corpus at -O0..-O3 through the
//! runner (`cargo test -p elfjit-tests --test emulated -- --ignored <arch>` runs the disabled
//! ones), move its line in `emulated_arches!` below from `disabled` to `enabled`. That gives
//! it a `corpus::<arch>` test (every kernel at every level, compared with the Rust reference
//! within the corpus tolerances) and a `far_call::<arch>` test (a real call through a
//! stub/veneer to a function linked more than 4 GiB away) and a `support::<arch>` test (the
//! runner's libm, 128-bit division and half/bfloat16 conversions against Rust references).

use elfjit::args::{ArgOutcome, ArgSpec, BufferInit, RetType, Scalar, ScalarType};
use elfjit::clang::Lang;
use elfjit::run::{run, RunRequest};
use elfjit::{Arch, Error};
use elfjit_tests::{check_case_emulated, corpus};

/// Every corpus case valid on `arch`, at -O0..-O3, through the runner; every failure is
/// reported before the test fails. The cases run on two threads (qemu start-up and clang
/// dominate, and there are two cores).
fn corpus_on(arch: Arch) {
    let cases = corpus();
    let jobs: Vec<(usize, u8)> = (0..cases.len())
        .filter(|&i| cases[i].not_valid_on(arch).is_none())
        .flat_map(|i| (0..=3u8).map(move |opt| (i, opt)))
        .collect();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let failures = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| loop {
                let n = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(&(i, opt)) = jobs.get(n) else { break };
                if let Err(e) = check_case_emulated(&cases[i], arch, opt) {
                    failures.lock().unwrap().push(e);
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap();
    assert!(
        failures.is_empty(),
        "\n{} of {} runs failed:\n{}\n",
        failures.len(),
        jobs.len(),
        failures.join("\n")
    );
}

/// A kernel calling the runner's `elfjit_far_add`, linked about 8 GiB from the image: the
/// call must go through a stub (x86_64, ppc64le, ...) or veneer (aarch64) and come back.
const FAR_KERNEL: &str = "
extern int elfjit_far_add(int);
int far_twice(int x) { return elfjit_far_add(x) + elfjit_far_add(2 * x); }
";

fn far_call_on(arch: Arch) {
    for opt in [0, 2] {
        let mut req = RunRequest::new(FAR_KERNEL, Lang::C);
        req.target = arch;
        req.emulate = true;
        req.opt_level = opt;
        req.ret = RetType::I32;
        req.args = vec![ArgSpec::Scalar(Scalar::I32(21))];
        // SAFETY: `far` is `int far(int)` as declared.
        let out = unsafe { run(&req) }.unwrap_or_else(|e| panic!("{arch} -O{opt}: {e}"));
        assert_eq!(
            out.ret,
            Some(Scalar::I32(21 + 1000 + 42 + 1000)),
            "{arch} -O{opt}"
        );
    }
}

/// ppc64le: the far function has its own TOC, so the stub saves r2 in the caller's frame
/// and the `nop` after the `bl` became `ld r2,24(r1)`. The caller then reads TOC-relative
/// data (a `.data` table through its `.toc` entry, a `.rodata` table directly), which is
/// only right if r2 was restored.
const FAR_TOC_KERNEL: &str = "
extern int elfjit_far_add(int);
int some_global_table[4] = {10, 20, 30, 40};
static const int lut[4] = {1, 2, 3, 4};
int k(int x) { int r = elfjit_far_add(x); return r + some_global_table[x & 3] + lut[(x + 1) & 3]; }
";

#[test]
fn ppc64le_far_call_restores_the_toc_pointer() {
    for opt in 0..=3 {
        let mut req = RunRequest::new(FAR_TOC_KERNEL, Lang::C);
        req.target = Arch::Ppc64le;
        req.emulate = true;
        req.opt_level = opt;
        req.ret = RetType::I32;
        req.args = vec![ArgSpec::Scalar(Scalar::I32(6))];
        // SAFETY: the kernel is `int f(int)` as declared.
        let out = unsafe { run(&req) }.unwrap_or_else(|e| panic!("ppc64le -O{opt}: {e}"));
        assert_eq!(out.ret, Some(Scalar::I32(6 + 1000 + 30 + 4)), "-O{opt}");
    }
}

// ---------------------------------------------------------------------------------------
// The runner's support library, called for real
// ---------------------------------------------------------------------------------------

const SUPPORT_KERNEL: &str = include_str!("../kernels/emulated/support_check.c");

fn support_run(arch: Arch, entry: &str, args: Vec<ArgSpec>) -> elfjit::RunOutcome {
    let mut req = RunRequest::new(SUPPORT_KERNEL, Lang::C);
    req.target = arch;
    req.emulate = true;
    req.entry = Some(entry.to_string());
    req.args = args;
    // SAFETY: emulated (the kernel runs under qemu), with the support kernel's signature.
    unsafe { run(&req) }.unwrap_or_else(|e| panic!("{arch} {entry}: {e}"))
}

fn buffer(values: Vec<Scalar>) -> ArgSpec {
    ArgSpec::Buffer {
        ty: values.first().map_or(ScalarType::F64, |v| v.ty()),
        init: BufferInit::Values(values),
    }
}

fn zeros(ty: ScalarType, n: usize) -> ArgSpec {
    ArgSpec::Buffer {
        ty,
        init: BufferInit::Zeros(n),
    }
}

fn out_buffer(o: &elfjit::RunOutcome, i: usize) -> Vec<Scalar> {
    match &o.args[i] {
        ArgOutcome::Buffer(v) => v.values(),
        other => panic!("argument {i} is {other:?}"),
    }
}

/// The functions `support_check.c` applies, in its order, with Rust's (glibc's) result
/// and the largest relative difference allowed for the double version.
type F64Fn = fn(f64) -> f64;
const LIBM: [(&str, F64Fn, f64); 28] = [
    ("exp", f64::exp, 4e-16),
    ("exp2", f64::exp2, 4e-16),
    ("expm1", f64::exp_m1, 6e-16),
    ("log", f64::ln, 4e-16),
    ("log2", f64::log2, 6e-16),
    ("log10", f64::log10, 6e-16),
    ("log1p", f64::ln_1p, 6e-16),
    ("pow3", |x| x.powf(3.0), 6e-16),
    // exp(y log x): about |y log x| * 2^-53 (255 * 1.1e-16 at x = 1e300).
    ("pow037", |x| x.abs().powf(0.37), 1e-14),
    ("sin", f64::sin, 6e-16),
    ("cos", f64::cos, 6e-16),
    ("tan", f64::tan, 1e-15),
    ("sinh", f64::sinh, 6e-16),
    ("cosh", f64::cosh, 6e-16),
    ("tanh", f64::tanh, 6e-16),
    ("atan", f64::atan, 6e-16),
    ("atan2", |x| x.atan2(-0.75), 6e-16),
    ("asin", f64::asin, 6e-16),
    ("acos", f64::acos, 6e-16),
    ("cbrt", f64::cbrt, 4e-16),
    ("fmod", |x| x % 0.3, 0.0),
    ("floor", f64::floor, 0.0),
    ("ceil", f64::ceil, 0.0),
    ("trunc", f64::trunc, 0.0),
    ("round", f64::round, 0.0),
    ("rint", f64::round_ties_even, 0.0),
    ("fma", |x| x.mul_add(1.25, -0.5), 0.0),
    ("sqrt", f64::sqrt, 0.0),
];

/// Relative difference, 0 for equal values (NaNs included, and infinities of one sign).
fn rel_diff(got: f64, want: f64) -> f64 {
    if got == want || (got.is_nan() && want.is_nan()) {
        return 0.0;
    }
    if want == 0.0 || !want.is_finite() || !got.is_finite() {
        return f64::INFINITY;
    }
    ((got - want) / want).abs()
}

fn libm_inputs() -> Vec<f64> {
    let mut x: Vec<f64> = (0..=160).map(|i| -20.0 + 0.25 * i as f64 + 0.013).collect();
    x.extend([
        0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 0.999, 1e-300, 5e-324, 3.0, 1e5, -1e5, 700.0, -740.0,
        1e-8, 2.5, -2.5, 0.75, 1e300,
    ]);
    x.extend([f64::INFINITY, f64::NEG_INFINITY, f64::NAN]);
    x
}

fn support_on(arch: Arch) {
    let mut failures = Vec::new();

    // libm, double: within a few ulp of glibc (exact where the function is exact).
    let x = libm_inputs();
    let n = x.len();
    let o = support_run(
        arch,
        "libm64",
        vec![
            buffer(x.iter().map(|v| Scalar::F64(*v)).collect()),
            zeros(ScalarType::F64, n * LIBM.len()),
            ArgSpec::Scalar(Scalar::I32(n as i32)),
        ],
    );
    let got = out_buffer(&o, 1);
    for (i, xi) in x.iter().enumerate() {
        for (k, (name, f, tol)) in LIBM.iter().enumerate() {
            let g = got[i * LIBM.len() + k].as_f64();
            let w = f(*xi);
            // Tolerances are relative; results that should be 0 may be off by an ulp of
            // the reduction (sin(k pi) and the like): allow 1e-15 absolute there.
            let d = rel_diff(g, w);
            if matches!(*name, "sin" | "cos" | "tan") && xi.abs() > 1e6 && xi.is_finite() {
                // Documented: no accurate reduction there, only bounded results.
                if *name != "tan" && (g.is_nan() || g.abs() > 1.0) {
                    failures.push(format!("{name}({xi:e}) = {g:e}: not in [-1, 1]"));
                }
                continue;
            }
            if d > *tol && !(w.abs() < 1e-10 && (g - w).abs() < 1e-15) {
                failures.push(format!("{name}({xi:e}) = {g:e}, glibc {w:e} (rel {d:e})"));
            }
        }
    }

    // libm, float: within 1 ulp of glibc (both are almost always correctly rounded).
    let xf: Vec<f32> = x.iter().map(|v| *v as f32).collect();
    let o = support_run(
        arch,
        "libm32",
        vec![
            buffer(xf.iter().map(|v| Scalar::F32(*v)).collect()),
            zeros(ScalarType::F32, n * LIBM.len()),
            ArgSpec::Scalar(Scalar::I32(n as i32)),
        ],
    );
    let got = out_buffer(&o, 1);
    for (i, xi) in xf.iter().enumerate() {
        for (k, (name, f, _)) in LIBM.iter().enumerate() {
            let Scalar::F32(g) = got[i * LIBM.len() + k] else {
                panic!("not f32");
            };
            let w = match *name {
                // Single-rounding references where the f32 result is not f64's rounded.
                "fmod" => xi % 0.3f32,
                "fma" => xi.mul_add(1.25, -0.5),
                "pow037" => (f64::from(xi.abs())).powf(f64::from(0.37f32)) as f32,
                "atan2" => f64::from(*xi).atan2(-0.75) as f32,
                _ => f(f64::from(*xi)) as f32,
            };
            if matches!(*name, "sin" | "cos" | "tan") && xi.abs() > 1e6 && xi.is_finite() {
                continue; // see the double check
            }
            let ulps = if g.is_nan() && w.is_nan() {
                0
            } else {
                (g.to_bits() as i64 - w.to_bits() as i64).abs()
            };
            let tiny = w.abs() < 1e-7 && (g - w).abs() < 1e-7;
            if ulps > 1 && !tiny {
                failures.push(format!(
                    "{name}f({xi:e}) = {g:e}, expected {w:e} ({ulps} ulp)"
                ));
            }
        }
    }

    // 128-bit division and modulo, signed and unsigned, exactly.
    let mut pairs: Vec<(u128, u128)> = vec![
        (u128::MAX, 1),
        (u128::MAX, u128::MAX),
        (1, u128::MAX),
        (1u128 << 127, 3),
        (i128::MIN as u128, u128::MAX), // i128::MIN / -1 wraps: skip the signed check below
        (0, 7),
        (12345678901234567890123456789, 987654321987654321),
        (u128::MAX / 3, (1u128 << 64) + 1),
        (1u128 << 64, 1u128 << 64),
        ((1u128 << 64) - 1, 10),
    ];
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut rng = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for _ in 0..200 {
        let a = (u128::from(rng()) << 64) | u128::from(rng());
        let shift = rng() % 127;
        let b = (((u128::from(rng()) << 64) | u128::from(rng())) >> shift).max(1);
        pairs.push((a, b));
    }
    let words = |v: &[u128]| -> ArgSpec {
        buffer(
            v.iter()
                .flat_map(|x| [Scalar::U64(*x as u64), Scalar::U64((*x >> 64) as u64)])
                .collect(),
        )
    };
    let np = pairs.len();
    let o = support_run(
        arch,
        "div128",
        vec![
            words(&pairs.iter().map(|p| p.0).collect::<Vec<_>>()),
            words(&pairs.iter().map(|p| p.1).collect::<Vec<_>>()),
            zeros(ScalarType::U64, 4 * np),
            zeros(ScalarType::U64, 4 * np),
            ArgSpec::Scalar(Scalar::I32(np as i32)),
        ],
    );
    let word128 = |v: &[Scalar], at: usize| -> u128 {
        let w = |i: usize| match v[i] {
            Scalar::U64(x) => u128::from(x),
            other => panic!("{other:?}"),
        };
        w(at) | (w(at + 1) << 64)
    };
    let (q, r) = (&out_buffer(&o, 2), &out_buffer(&o, 3));
    for (i, &(a, b)) in pairs.iter().enumerate() {
        let (sa, sb) = (a as i128, b as i128);
        let signed_ok = !(sa == i128::MIN && sb == -1);
        let checks = [
            ("udiv", word128(q, 4 * i), Some(a / b)),
            ("umod", word128(r, 4 * i), Some(a % b)),
            (
                "sdiv",
                word128(q, 4 * i + 2),
                signed_ok.then(|| (sa / sb) as u128),
            ),
            (
                "smod",
                word128(r, 4 * i + 2),
                signed_ok.then(|| (sa % sb) as u128),
            ),
        ];
        for (what, got, want) in checks {
            if let Some(want) = want {
                if got != want {
                    failures.push(format!("{what}({a:#x}, {b:#x}) = {got:#x}, want {want:#x}"));
                }
            }
        }
    }

    // Half precision and bfloat16, where clang has the types for the target.
    if matches!(arch, Arch::X86_64 | Arch::Aarch64 | Arch::Riscv64) {
        let mut d: Vec<f64> = Vec::new();
        for e in -30..20 {
            for m in [
                1.0,
                1.0009765625,
                1.00048828125,
                1.5,
                1.999,
                1.0000001,
                1.00390625,
            ] {
                let v = m * 2f64.powi(e);
                d.extend([v, -v, v * (1.0 + 2f64.powi(-40))]);
            }
        }
        d.extend([
            65504.0,
            65519.99,
            65520.0,
            2f64.powi(-25),
            2f64.powi(-24) * 1.5,
            3.0e38,
        ]);
        d.extend([
            3.4e38,
            1e300,
            0.0,
            -0.0,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
        ]);
        let f: Vec<f32> = d.iter().map(|v| *v as f32).collect();
        let nd = d.len();
        let o = support_run(
            arch,
            "halves",
            vec![
                buffer(f.iter().map(|v| Scalar::F32(*v)).collect()),
                buffer(d.iter().map(|v| Scalar::F64(*v)).collect()),
                zeros(ScalarType::U16, 4 * nd),
                zeros(ScalarType::F32, 65536),
                ArgSpec::Scalar(Scalar::I32(nd as i32)),
            ],
        );
        let bits = out_buffer(&o, 2);
        let is_nan16 = |b: u16, mant: u32| {
            let exp_mask = (0x7fffu16 >> mant) << mant;
            b & exp_mask == exp_mask && b & ((1 << mant) - 1) != 0
        };
        for i in 0..nd {
            let Scalar::U16(hf) = bits[4 * i] else {
                panic!()
            };
            let Scalar::U16(hd) = bits[4 * i + 1] else {
                panic!()
            };
            let Scalar::U16(bf) = bits[4 * i + 2] else {
                panic!()
            };
            let Scalar::U16(bd) = bits[4 * i + 3] else {
                panic!()
            };
            let cases = [
                ("f32->f16", hf, elfjit_tests::f16_bits(f64::from(f[i])), 10),
                ("f64->f16", hd, elfjit_tests::f16_bits(d[i]), 10),
                ("f32->bf16", bf, elfjit_tests::bf16_bits(f64::from(f[i])), 7),
                ("f64->bf16", bd, elfjit_tests::bf16_bits(d[i]), 7),
            ];
            for (what, got, want, mant) in cases {
                let ok = got == want || (is_nan16(got, mant) && is_nan16(want, mant));
                if !ok {
                    failures.push(format!("{what}({:e}) = {got:#06x}, want {want:#06x}", d[i]));
                }
            }
        }
        let widened = out_buffer(&o, 3);
        for (h, v) in widened.iter().enumerate() {
            let Scalar::F32(g) = *v else { panic!() };
            let want = elfjit_tests::small_float_value(h as u16, 10, 5);
            if !(f64::from(g) == want || (g.is_nan() && want.is_nan())) {
                failures.push(format!("f16 {h:#06x} -> {g:e}, want {want:e}"));
            }
        }
    }

    assert!(
        failures.is_empty(),
        "\n{} mismatches on {arch}:\n{}\n",
        failures.len(),
        failures
            .iter()
            .take(60)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}

macro_rules! emulated_arches {
    (enabled: [$($on:ident => $on_arch:expr,)*] disabled: [$($off:ident => $off_arch:expr,)*]) => {
        mod corpus {
            use super::*;
            $(#[test] fn $on() { corpus_on($on_arch) })*
            $(#[test] #[ignore = "relocator not enabled for emulated runs yet"]
              fn $off() { corpus_on($off_arch) })*
        }
        mod far_call {
            use super::*;
            $(#[test] fn $on() { far_call_on($on_arch) })*
            $(#[test] #[ignore = "relocator not enabled for emulated runs yet"]
              fn $off() { far_call_on($off_arch) })*
        }
        mod support {
            use super::*;
            $(#[test] fn $on() { support_on($on_arch) })*
            $(#[test] #[ignore = "relocator not enabled for emulated runs yet"]
              fn $off() { support_on($off_arch) })*
        }
    };
}

emulated_arches! {
    enabled: [
        x86_64 => Arch::X86_64,
        ppc64le => Arch::Ppc64le,
        aarch64 => Arch::Aarch64,
        loongarch64 => Arch::Loongarch64,
        riscv64 => Arch::Riscv64,
    ]
    disabled: [
    ]
}

fn emulated_x86_64(source: &str, ret: RetType) -> Result<elfjit::RunOutcome, Error> {
    let mut req = RunRequest::new(source, Lang::C);
    req.target = Arch::X86_64;
    req.emulate = true;
    req.ret = ret;
    // SAFETY: emulated: the kernel runs under qemu, in another process.
    unsafe { run(&req) }
}

/// A symbol neither the image nor the runner provides is a link error naming it.
#[test]
fn unknown_symbol_is_named() {
    let e = emulated_x86_64(
        "extern int nobody_provides_this(int); int f(void) { return nobody_provides_this(1); }",
        RetType::I32,
    )
    .unwrap_err();
    assert!(matches!(e, Error::Link(_)), "{e}");
    assert!(e.to_string().contains("`nobody_provides_this`"), "{e}");
}

/// A kernel that crashes the runner is an error saying how it died, not a panic.
#[test]
fn runner_crash_is_an_error() {
    let e =
        emulated_x86_64("int f(void) { return *(volatile int *)16; }", RetType::I32).unwrap_err();
    assert!(matches!(e, Error::Emulation { .. }), "{e}");
    assert!(e.to_string().contains("SIGSEGV"), "{e}");
}

/// A kernel that writes to the runner's stdout corrupts the reply: an error, not a panic.
#[test]
fn malformed_reply_is_an_error() {
    let writes = r#"
        int f(void) {
            long ret;
            __asm__ volatile("syscall" : "=a"(ret) : "a"(1L), "D"(1L), "S"("junk"), "d"(4L)
                             : "rcx", "r11", "memory");
            return (int)ret;
        }"#;
    let e = emulated_x86_64(writes, RetType::I32).unwrap_err();
    assert!(matches!(e, Error::Emulation { .. }), "{e}");
    assert!(e.to_string().contains("reply"), "{e}");
    // exit_group(0) before the reply: a clean exit with nothing said.
    let exits = r#"
        int f(void) {
            __asm__ volatile("syscall" :: "a"(231L), "D"(0L) : "rcx", "r11", "memory");
            return 0;
        }"#;
    let e = emulated_x86_64(exits, RetType::I32).unwrap_err();
    assert!(e.to_string().contains("no reply"), "{e}");
}

/// Through the runner, a state-changing kernel starts fresh each run, and the outcome has
/// the same shape as a native one.
#[test]
fn outcome_matches_native() {
    let src = "static int calls; int bump(int *out, int n) { for (int i = 0; i < n; i++) out[i] += ++calls; return calls; }";
    let mut req = RunRequest::new(src, Lang::C);
    req.ret = RetType::I32;
    req.args = vec![
        ArgSpec::parse("i32[5]=iota").unwrap(),
        ArgSpec::parse("i32:5").unwrap(),
    ];
    // SAFETY: `bump` is `int bump(int *, int)` with a 5-element buffer, as declared.
    let native = unsafe { run(&req) }.unwrap();
    req.target = Arch::X86_64;
    req.emulate = true;
    for _ in 0..2 {
        // SAFETY: as above (and emulated).
        let emulated = unsafe { run(&req) }.unwrap();
        assert_eq!(emulated.ret, native.ret);
        assert_eq!(emulated.args, native.args);
        assert_eq!(emulated.entry, native.entry);
    }
}
