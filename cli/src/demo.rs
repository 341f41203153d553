//! `elfjit demo`: a few built-in kernels compiled, loaded and run, each checked against the
//! same computation in Rust.

use crate::crash::REPORTER;
use elfjit::args::{ArgOutcome, ArgSpec, BufferInit, RetType, Scalar, ScalarType};
use elfjit::run::{run_on, Executor, RunOutcome, RunRequest, Timings};
use elfjit::{Compiler, Error, Lang, Native, Result};
use std::time::{Duration, Instant};

/// `y = a*x + y` over `f32` buffers.
pub const SAXPY_C: &str = r#"
void saxpy(int n, float a, const float *restrict x, float *restrict y) {
    for (int i = 0; i < n; i++)
        y[i] = a * x[i] + y[i];
}
"#;

/// A dot product reduced to one `f32`.
pub const DOT_C: &str = r#"
float dot(const float *x, const float *y, int n) {
    float s = 0.0f;
    for (int i = 0; i < n; i++)
        s += x[i] * y[i];
    return s;
}
"#;

/// Numerically stable softmax in place; the exponential is a libm call (`expf`) the
/// loader resolves through the process.
pub const SOFTMAX_C: &str = r#"
void softmax(float *x, int n) {
    float m = x[0];
    for (int i = 1; i < n; i++)
        m = x[i] > m ? x[i] : m;
    float s = 0.0f;
    for (int i = 0; i < n; i++) {
        x[i] = __builtin_expf(x[i] - m);
        s += x[i];
    }
    float inv = 1.0f / s;
    for (int i = 0; i < n; i++)
        x[i] *= inv;
}
"#;

/// `c = a * b` for square row-major matrices, 4 columns at a time with clang vector types.
pub const MATMUL_C: &str = r#"
typedef float float4 __attribute__((ext_vector_type(4)));

void matmul(const float *a, const float *b, float *c, int n) {
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j += 4) {
            float4 acc = 0.0f;
            for (int k = 0; k < n; k++)
                acc += a[i * n + k] * *(const float4 *)&b[k * n + j];
            *(float4 *)&c[i * n + j] = acc;
        }
}
"#;

/// Sum of an `i64` buffer, in LLVM IR.
pub const SUM_IR: &str = r#"
define i64 @sum_i64(ptr nocapture readonly %x, i32 %n) {
entry:
  %empty = icmp sle i32 %n, 0
  br i1 %empty, label %done, label %loop

loop:
  %i = phi i32 [ 0, %entry ], [ %next, %loop ]
  %acc = phi i64 [ 0, %entry ], [ %acc.next, %loop ]
  %idx = sext i32 %i to i64
  %p = getelementptr inbounds i64, ptr %x, i64 %idx
  %v = load i64, ptr %p, align 8
  %acc.next = add i64 %acc, %v
  %next = add nsw i32 %i, 1
  %more = icmp slt i32 %next, %n
  br i1 %more, label %loop, label %done

done:
  %r = phi i64 [ 0, %entry ], [ %acc.next, %loop ]
  ret i64 %r
}
"#;

/// One kernel's result.
#[derive(Clone, Debug)]
pub struct DemoResult {
    /// The kernel's name.
    pub name: &'static str,
    /// What it computed, in a few words.
    pub what: String,
    /// Whether the result matched the Rust computation (`Err`: it did not run at all).
    pub outcome: std::result::Result<(), String>,
    /// Per-stage times (zero when the kernel did not run).
    pub timings: Timings,
}

impl DemoResult {
    /// Whether the kernel ran and its result was right.
    pub fn ok(&self) -> bool {
        self.outcome.is_ok()
    }

    /// One line for the terminal: status, name, description, times in µs.
    pub fn line(&self) -> String {
        let t = &self.timings;
        match &self.outcome {
            Ok(()) => format!(
                "ok    {:<8} {:<46} compile {:>7.0} µs  load {:>6.1} µs  call {:>7.1} µs",
                self.name,
                self.what,
                t.compile.as_secs_f64() * 1e6,
                t.load.as_secs_f64() * 1e6,
                t.call.as_secs_f64() * 1e6
            ),
            Err(e) => format!("FAIL  {:<8} {:<46} {e}", self.name, self.what),
        }
    }
}

fn f32s(values: &[f32]) -> ArgSpec {
    ArgSpec::Buffer {
        ty: ScalarType::F32,
        init: BufferInit::Values(values.iter().map(|v| Scalar::F32(*v)).collect()),
    }
}

fn buffer_f32(o: &RunOutcome, index: usize) -> std::result::Result<Vec<f32>, String> {
    match o.args.get(index) {
        Some(ArgOutcome::Buffer(v)) => v
            .iter()
            .map(|s| match s {
                Scalar::F32(x) => Ok(x),
                other => Err(format!("unexpected element {other:?}")),
            })
            .collect(),
        other => Err(format!("argument {index} is not a buffer: {other:?}")),
    }
}

/// Compares with a relative tolerance (FMA contraction and vectorised sums reorder
/// rounding, so bit-exact equality is not expected).
fn close(got: &[f32], want: &[f32], rel: f32) -> std::result::Result<(), String> {
    if got.len() != want.len() {
        return Err(format!("{} values, expected {}", got.len(), want.len()));
    }
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let tol = rel * w.abs().max(1.0);
        let within = (g - w).abs() <= tol; // false for NaN
        if !within {
            return Err(format!("element {i}: got {g}, expected {w}"));
        }
    }
    Ok(())
}

/// A small deterministic pseudo-random sequence in [-1, 1).
fn noise(n: usize, seed: u32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(2_654_435_761).max(1);
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            (s >> 8) as f32 / (1u32 << 23) as f32 - 1.0
        })
        .collect()
}

type Check = Box<dyn Fn(&RunOutcome) -> std::result::Result<(), String>>;

struct Kernel {
    name: &'static str,
    what: String,
    req: RunRequest,
    check: Check,
}

/// How many kernels the demo compiles at once.
pub fn kernel_count() -> usize {
    kernels().len()
}

fn kernels() -> Vec<Kernel> {
    let mut out = Vec::new();

    let n = 1000;
    let a = 2.5f32;
    let x = noise(n, 1);
    let y = noise(n, 2);
    let mut req = RunRequest::new(SAXPY_C, Lang::C);
    req.args = vec![
        ArgSpec::Scalar(Scalar::I32(n as i32)),
        ArgSpec::Scalar(Scalar::F32(a)),
        f32s(&x),
        f32s(&y),
    ];
    let want: Vec<f32> = x.iter().zip(&y).map(|(x, y)| a * x + y).collect();
    out.push(Kernel {
        name: "saxpy",
        what: format!("y = {a}*x + y over f32[{n}]"),
        req,
        check: Box::new(move |o| close(&buffer_f32(o, 3)?, &want, 1e-6)),
    });

    let n = 4096;
    let x = noise(n, 3);
    let y = noise(n, 4);
    let mut req = RunRequest::new(DOT_C, Lang::C);
    req.ret = RetType::F32;
    req.args = vec![f32s(&x), f32s(&y), ArgSpec::Scalar(Scalar::I32(n as i32))];
    let want: f32 = x.iter().zip(&y).map(|(x, y)| x * y).sum();
    out.push(Kernel {
        name: "dot",
        what: format!("sum of x*y over f32[{n}] -> f32"),
        req,
        check: Box::new(move |o| match o.ret {
            Some(Scalar::F32(got)) => close(&[got], &[want], 1e-4),
            other => Err(format!("returned {other:?}")),
        }),
    });

    let n = 64;
    let x: Vec<f32> = noise(n, 5).iter().map(|v| v * 8.0).collect();
    let mut req = RunRequest::new(SOFTMAX_C, Lang::C);
    req.args = vec![f32s(&x), ArgSpec::Scalar(Scalar::I32(n as i32))];
    let m = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let e: Vec<f32> = x.iter().map(|v| (v - m).exp()).collect();
    let s: f32 = e.iter().sum();
    let want: Vec<f32> = e.iter().map(|v| v / s).collect();
    out.push(Kernel {
        name: "softmax",
        what: format!("softmax in place over f32[{n}], calls expf"),
        req,
        check: Box::new(move |o| close(&buffer_f32(o, 0)?, &want, 1e-5)),
    });

    let n = 16;
    let a = noise(n * n, 6);
    let b = noise(n * n, 7);
    let mut req = RunRequest::new(MATMUL_C, Lang::C);
    req.args = vec![
        f32s(&a),
        f32s(&b),
        ArgSpec::Buffer {
            ty: ScalarType::F32,
            init: BufferInit::Zeros(n * n),
        },
        ArgSpec::Scalar(Scalar::I32(n as i32)),
    ];
    let mut want = vec![0f32; n * n];
    for i in 0..n {
        for j in 0..n {
            want[i * n + j] = (0..n).map(|k| a[i * n + k] * b[k * n + j]).sum();
        }
    }
    out.push(Kernel {
        name: "matmul",
        what: format!("{n}x{n} f32 matmul with float4 vectors"),
        req,
        check: Box::new(move |o| close(&buffer_f32(o, 2)?, &want, 1e-5)),
    });

    let n = 1000i64;
    let mut req = RunRequest::new(SUM_IR, Lang::Ir);
    req.ret = RetType::I64;
    req.args = vec![
        ArgSpec::Buffer {
            ty: ScalarType::I64,
            init: BufferInit::Iota(n as usize),
        },
        ArgSpec::Scalar(Scalar::I32(n as i32)),
    ];
    let want = n * (n - 1) / 2;
    out.push(Kernel {
        name: "sum_ir",
        what: format!("LLVM IR: sum of i64[{n}]=iota -> i64"),
        req,
        check: Box::new(move |o| match o.ret {
            Some(Scalar::I64(got)) if got == want => Ok(()),
            other => Err(format!("returned {other:?}, expected {want}")),
        }),
    });
    out
}

/// Runs every built-in kernel with `compiler`: all compiled at once (a spawned clang, or
/// a server of the pool, each), then each loaded and called in turn. Failures are
/// reported per kernel, not as an `Err`; the outer `Result` is for future setup errors.
pub fn run_all(compiler: &Compiler) -> Result<Vec<DemoResult>> {
    let kernels = kernels();
    let objects: Vec<Result<(Vec<u8>, Duration)>> = std::thread::scope(|s| {
        let compiling: Vec<_> = kernels
            .iter()
            .map(|k| {
                let req = &k.req;
                s.spawn(move || compile(compiler, req))
            })
            .collect();
        compiling
            .into_iter()
            .map(|t| {
                t.join().unwrap_or_else(|_| {
                    Err(Error::Unsupported("a demo compile thread panicked".into()))
                })
            })
            .collect()
    });
    Ok(kernels
        .into_iter()
        .zip(objects)
        .map(|(k, object)| {
            let native = Native::with_observer(&REPORTER);
            let ran = object.and_then(|(object, compile)| {
                let req = RunRequest {
                    object: Some(object),
                    ..k.req
                };
                // SAFETY: the demo kernels are elfjit's own, each request declaring exactly
                // its kernel's C signature and buffers of the sizes the kernel touches.
                let (mut o, _) = unsafe { run_on(&native, compiler, None, &req) }?;
                o.timings.compile = compile;
                Ok(o)
            });
            let (outcome, timings) = match ran {
                Ok(o) => ((k.check)(&o), o.timings),
                Err(e) => (Err(e.to_string()), Timings::default()),
            };
            DemoResult {
                name: k.name,
                what: k.what,
                outcome,
                timings,
            }
        })
        .collect())
}

/// Compiles `req`'s kernel for this host as running it would, and how long that took.
fn compile(compiler: &Compiler, req: &RunRequest) -> Result<(Vec<u8>, Duration)> {
    let host = Native::with_observer(&REPORTER).prepare(req)?;
    let started = Instant::now();
    let object = compiler.compile_for_host(&req.source, &req.compile_options(), host)?;
    Ok((object, started.elapsed()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use elfjit::{Arch, CompileOptions};

    #[test]
    fn kernels_compile() {
        let c = Compiler::find().expect("clang (./scripts/setup installs clang-19)");
        let host = Arch::host().unwrap_or(Arch::X86_64);
        for k in kernels() {
            let obj = c
                .compile(&k.req.source, &CompileOptions::new(k.req.lang, host))
                .unwrap_or_else(|e| panic!("{}: {e}", k.name));
            assert_eq!(&obj[..4], b"\x7fELF");
        }
    }

    #[test]
    fn reference_helpers() {
        assert!(close(&[1.0, 2.0], &[1.0, 2.0 + 1e-7], 1e-6).is_ok());
        assert!(close(&[1.0], &[1.1], 1e-6).is_err());
        assert!(close(&[f32::NAN], &[1.0], 1e-6).is_err());
        let v = noise(1000, 9);
        assert!(v.iter().all(|x| (-1.0..1.0).contains(x)));
    }
}
