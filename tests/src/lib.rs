//! The kernel corpus as data, and the helpers the integration tests share.
//!
//! Every kernel in `tests/kernels/` has one [`Case`]: how to call it (return type and
//! argument specs in the same syntax as `elfjit run --arg`), the architectures it cannot
//! be built for (with the reason), and a `check` that recomputes the expected result in
//! Rust and compares *everything* the call can change: the return value, every element
//! of every output buffer, and the input buffers, which must come back unmodified.
//!
//! # Tolerances
//!
//! Integer results, bit patterns and buffers the kernel must not touch are compared
//! exactly. Floating-point results use `|got - want| <= abs + rel * |want|`:
//!
//! * [`FLOAT`] (rel 1e-5, abs 1e-6): plain f32 arithmetic. The Rust side does the same
//!   operations in the same order in f32; the slack covers clang contracting `a * b + c`
//!   into an FMA (`-ffp-contract=on` is clang's default for C, and `-march=native` has FMA)
//!   and `sqrt`/division implementations, i.e. an ulp or two.
//! * [`LIBM`] (rel 2e-5, abs 1e-6): results through `expf` from whatever libm the process
//!   (or the emulated runner) has; glibc's `expf` is within 1 ulp, others may be a few.
//! * [`REASSOC`] (rel 1e-4, abs 1e-5): reductions the compiler may reassociate
//!   (`reassoc` in IR, vectorised into partial sums); the order changes the rounding.
//! * [`DOUBLE`] (rel 1e-12, abs 1e-12): f64 arithmetic, again allowing FMA contraction.

use elfjit::args::{ArgOutcome, ArgSpec, RetType, Scalar};
use elfjit::clang::Lang;
use elfjit::run::{RunOutcome, RunRequest};
use elfjit::Arch;
use std::path::{Path, PathBuf};

/// One kernel of the corpus and how to run and check it.
pub struct Case {
    /// Unique name (used in test names and failure messages).
    pub name: &'static str,
    /// The source file, relative to `tests/kernels/`. `.c` is C, `.ll` is LLVM IR.
    pub file: &'static str,
    /// The entry to call; `None` lets elfjit pick the object's only global function.
    pub entry: Option<&'static str>,
    /// Return type as `--ret` spells it: `void`, `i32`, `u32`, `i64`, `u64`, `f32`, `f64`.
    pub ret: &'static str,
    /// Arguments as `--arg` spells them, in call order.
    pub args: &'static [&'static str],
    /// Recomputes the expected outputs and compares them with the outcome.
    pub check: fn(&RunOutcome) -> Result<(), String>,
    /// Architectures this case cannot be built for, each with the reason.
    pub not_on: &'static [(Arch, &'static str)],
}

impl Case {
    /// Why this case cannot run on `arch`, if it cannot.
    pub fn not_valid_on(&self, arch: Arch) -> Option<&'static str> {
        self.not_on
            .iter()
            .find(|(a, _)| *a == arch)
            .map(|(_, why)| *why)
    }

    /// The language of the kernel, from its file extension.
    pub fn lang(&self) -> Lang {
        if self.file.ends_with(".ll") {
            Lang::Ir
        } else {
            Lang::C
        }
    }
}

/// The directory holding the kernel sources.
pub fn kernels_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("kernels")
}

/// The full path of a kernel source file named relative to `tests/kernels/`.
pub fn kernel_path(file: &str) -> PathBuf {
    kernels_dir().join(file)
}

/// Reads a kernel source file.
pub fn kernel_source(file: &str) -> Vec<u8> {
    let path = kernel_path(file);
    std::fs::read(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// Parses a `--ret` spelling.
pub fn ret_type(name: &str) -> Result<RetType, String> {
    Ok(match name {
        "void" => RetType::Void,
        "i32" => RetType::I32,
        "u32" => RetType::U32,
        "i64" => RetType::I64,
        "u64" => RetType::U64,
        "f32" => RetType::F32,
        "f64" => RetType::F64,
        other => return Err(format!("unknown return type `{other}`")),
    })
}

/// Builds the request for `case` on `target` at `-O{opt_level}`.
pub fn request(case: &Case, target: Arch, opt_level: u8) -> Result<RunRequest, String> {
    let mut req = RunRequest::new(kernel_source(case.file), case.lang());
    req.entry = case.entry.map(str::to_string);
    req.target = target;
    req.opt_level = opt_level;
    req.ret = ret_type(case.ret)?;
    req.args = case
        .args
        .iter()
        .map(|a| ArgSpec::parse(a).map_err(|e| format!("argument `{a}`: {e}")))
        .collect::<Result<_, _>>()?;
    Ok(req)
}

/// Compiles, links and calls `case` on `target` at `-O{opt_level}`; the outcome is not
/// checked (see [`check_case`]).
pub fn run_case(case: &Case, target: Arch, opt_level: u8) -> Result<RunOutcome, String> {
    let req = request(case, target, opt_level)?;
    // SAFETY: every corpus case declares its kernel's exact C signature and buffers of
    // the sizes the kernel touches (kernels/README.md).
    unsafe { elfjit::run::run(&req) }.map_err(|e| format!("run failed: {e}"))
}

/// Runs `case` and checks its outcome; the error names the case, target and level.
/// A foreign `target` runs through the emulated runner under qemu.
pub fn check_case(case: &Case, target: Arch, opt_level: u8) -> Result<(), String> {
    check_case_with(case, target, opt_level, false)
}

/// [`check_case`] through the emulated runner under qemu, even when `target` is the host.
pub fn check_case_emulated(case: &Case, target: Arch, opt_level: u8) -> Result<(), String> {
    check_case_with(case, target, opt_level, true)
}

fn check_case_with(case: &Case, target: Arch, opt_level: u8, emulate: bool) -> Result<(), String> {
    let tag = format!(
        "{} ({target}{}, -O{opt_level})",
        case.name,
        if emulate { ", emulated" } else { "" }
    );
    if let Some(why) = case.not_valid_on(target) {
        return Err(format!("{tag}: not valid on {target}: {why}"));
    }
    let mut req = request(case, target, opt_level).map_err(|e| format!("{tag}: {e}"))?;
    req.emulate = emulate;
    // SAFETY: as in `run_case`.
    let out = unsafe { elfjit::run::run(&req) }.map_err(|e| format!("{tag}: run failed: {e}"))?;
    if out.target != target {
        return Err(format!("{tag}: outcome says target {}", out.target));
    }
    if out.args.len() != case.args.len() {
        return Err(format!(
            "{tag}: {} arguments in the outcome, {} given",
            out.args.len(),
            case.args.len()
        ));
    }
    if case.ret == "void" && out.ret.is_some() {
        return Err(format!("{tag}: void kernel returned {:?}", out.ret));
    }
    if let Some(entry) = case.entry {
        if out.entry != entry {
            return Err(format!(
                "{tag}: called `{}`, asked for `{entry}`",
                out.entry
            ));
        }
    }
    (case.check)(&out).map_err(|e| format!("{tag}: {e}"))
}

/// Looks a case up by name.
pub fn case(name: &str) -> Case {
    corpus()
        .into_iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no corpus case named `{name}`"))
}

// ---------------------------------------------------------------------------------------
// Comparison helpers
// ---------------------------------------------------------------------------------------

/// A floating-point tolerance: `|got - want| <= abs + rel * |want|`.
#[derive(Clone, Copy, Debug)]
pub struct Tol {
    pub rel: f64,
    pub abs: f64,
}

/// Plain f32 arithmetic (allows FMA contraction and an ulp or two).
pub const FLOAT: Tol = Tol {
    rel: 1e-5,
    abs: 1e-6,
};
/// Results through libm's `expf`.
pub const LIBM: Tol = Tol {
    rel: 2e-5,
    abs: 1e-6,
};
/// Reductions the compiler may reassociate.
pub const REASSOC: Tol = Tol {
    rel: 1e-4,
    abs: 1e-5,
};
/// f64 arithmetic.
pub const DOUBLE: Tol = Tol {
    rel: 1e-12,
    abs: 1e-12,
};

fn close(got: f64, want: f64, tol: Tol) -> bool {
    if want.is_nan() {
        return got.is_nan();
    }
    if want.is_infinite() {
        return got == want;
    }
    (got - want).abs() <= tol.abs + tol.rel * want.abs()
}

/// Compares two float slices element by element (lengths must match).
pub fn expect_close<T: Copy + Into<f64>>(
    what: &str,
    got: &[T],
    want: &[T],
    tol: Tol,
) -> Result<(), String> {
    if got.len() != want.len() {
        return Err(format!(
            "{what}: {} elements, expected {}",
            got.len(),
            want.len()
        ));
    }
    let bad: Vec<String> = got
        .iter()
        .zip(want)
        .enumerate()
        .filter(|(_, (g, w))| !close((**g).into(), (**w).into(), tol))
        .map(|(i, (g, w))| format!("[{i}] got {:e} want {:e}", (*g).into(), (*w).into()))
        .collect();
    if bad.is_empty() {
        Ok(())
    } else {
        Err(format!("{what} (tolerance {tol:?}): {}", bad.join(", ")))
    }
}

/// Compares one float value.
pub fn expect_close1<T: Copy + Into<f64>>(
    what: &str,
    got: T,
    want: T,
    tol: Tol,
) -> Result<(), String> {
    expect_close(what, &[got], &[want], tol)
}

/// Compares two slices exactly.
pub fn expect_eq<T: PartialEq + std::fmt::Debug>(
    what: &str,
    got: &[T],
    want: &[T],
) -> Result<(), String> {
    if got.len() != want.len() {
        return Err(format!(
            "{what}: {} elements, expected {}",
            got.len(),
            want.len()
        ));
    }
    let bad: Vec<String> = got
        .iter()
        .zip(want)
        .enumerate()
        .filter(|(_, (g, w))| g != w)
        .map(|(i, (g, w))| format!("[{i}] got {g:?} want {w:?}"))
        .collect();
    if bad.is_empty() {
        Ok(())
    } else {
        Err(format!("{what}: {}", bad.join(", ")))
    }
}

/// Compares one value exactly.
pub fn expect_eq1<T: PartialEq + std::fmt::Debug>(
    what: &str,
    got: T,
    want: T,
) -> Result<(), String> {
    if got == want {
        Ok(())
    } else {
        Err(format!("{what}: got {got:?} want {want:?}"))
    }
}

fn arg(out: &RunOutcome, i: usize) -> Result<&ArgOutcome, String> {
    out.args.get(i).ok_or_else(|| {
        format!(
            "no argument {i} in the outcome ({} present)",
            out.args.len()
        )
    })
}

fn buffer(out: &RunOutcome, i: usize) -> Result<Vec<Scalar>, String> {
    match arg(out, i)? {
        ArgOutcome::Buffer(v) => Ok(v.values()),
        other => Err(format!("argument {i}: expected a buffer, got {other:?}")),
    }
}

macro_rules! typed_access {
    ($buf:ident, $scalar:ident, $ret:ident, $variant:ident, $t:ty) => {
        /// The elements of buffer argument `i`, which must have this element type.
        pub fn $buf(out: &RunOutcome, i: usize) -> Result<Vec<$t>, String> {
            buffer(out, i)?
                .iter()
                .enumerate()
                .map(|(k, s)| match s {
                    Scalar::$variant(v) => Ok(*v),
                    other => Err(format!(
                        "argument {i}[{k}]: expected {}, got {other:?}",
                        stringify!($variant)
                    )),
                })
                .collect()
        }

        /// Scalar argument `i` after the call, which must have this type.
        pub fn $scalar(out: &RunOutcome, i: usize) -> Result<$t, String> {
            match arg(out, i)? {
                ArgOutcome::Scalar(Scalar::$variant(v)) => Ok(*v),
                other => Err(format!(
                    "argument {i}: expected a {} scalar, got {other:?}",
                    stringify!($variant)
                )),
            }
        }

        /// The return value, which must have this type.
        pub fn $ret(out: &RunOutcome) -> Result<$t, String> {
            match &out.ret {
                Some(Scalar::$variant(v)) => Ok(*v),
                other => Err(format!(
                    "return value: expected {}, got {other:?}",
                    stringify!($variant)
                )),
            }
        }
    };
}

typed_access!(buf_i8, scalar_i8, ret_i8, I8, i8);
typed_access!(buf_u8, scalar_u8, ret_u8, U8, u8);
typed_access!(buf_u16, scalar_u16, ret_u16, U16, u16);
typed_access!(buf_i32, scalar_i32, ret_i32, I32, i32);
typed_access!(buf_u32, scalar_u32, ret_u32, U32, u32);
typed_access!(buf_i64, scalar_i64, ret_i64, I64, i64);
typed_access!(buf_u64, scalar_u64, ret_u64, U64, u64);
typed_access!(buf_f32, scalar_f32, ret_f32, F32, f32);
typed_access!(buf_f64, scalar_f64, ret_f64, F64, f64);

/// `0, 1, 2, ...` as f32 (what `=iota` fills a buffer with).
pub fn iota_f32(n: usize) -> Vec<f32> {
    (0..n).map(|i| i as f32).collect()
}

// ---------------------------------------------------------------------------------------
// Reference conversions for the half-precision kernels
// ---------------------------------------------------------------------------------------

/// Rounds a finite or infinite `v` to a binary format with `mant` fraction bits and
/// `exp` exponent bits (round to nearest, ties to even, subnormals and overflow to
/// infinity handled), returning the bit pattern. Rounds from the exact f64 value, so
/// there is no double rounding.
pub fn round_to_small_float(v: f64, mant: u32, exp: u32) -> u16 {
    let sign: u16 = if v.is_sign_negative() {
        1 << (mant + exp)
    } else {
        0
    };
    let bias = (1i32 << (exp - 1)) - 1;
    let inf = (((1u32 << exp) - 1) << mant) as u16;
    if v.is_nan() {
        return inf | (1 << (mant - 1));
    }
    let a = v.abs();
    if a == 0.0 {
        return sign;
    }
    if a.is_infinite() {
        return sign | inf;
    }
    let emin = 1 - bias;
    // floor(log2(a)) from the f64 exponent (inputs are normal f64 values).
    let e_raw = ((a.to_bits() >> 52) & 0x7ff) as i32 - 1023;
    let mut e = e_raw.max(emin);
    let quantum = 2f64.powi(e - mant as i32);
    let mut m = (a / quantum).round_ties_even() as u32;
    if m == 1 << (mant + 1) {
        e += 1;
        m = 1 << mant;
    }
    if e > bias {
        return sign | inf;
    }
    if m < 1 << mant {
        sign | m as u16 // subnormal (or zero)
    } else {
        sign | ((((e + bias) as u32) << mant) | (m - (1 << mant))) as u16
    }
}

/// Decodes a bit pattern of the format [`round_to_small_float`] produces.
pub fn small_float_value(bits: u16, mant: u32, exp: u32) -> f64 {
    let sign = if bits >> (mant + exp) & 1 == 1 {
        -1.0
    } else {
        1.0
    };
    let bias = (1i32 << (exp - 1)) - 1;
    let e = ((bits >> mant) as u32 & ((1 << exp) - 1)) as i32;
    let m = (bits as u32) & ((1 << mant) - 1);
    if e == (1 << exp) - 1 {
        return if m == 0 {
            sign * f64::INFINITY
        } else {
            f64::NAN
        };
    }
    if e == 0 {
        sign * m as f64 * 2f64.powi(1 - bias - mant as i32)
    } else {
        sign * (1.0 + m as f64 / (1u32 << mant) as f64) * 2f64.powi(e - bias)
    }
}

/// IEEE binary16 bits of `v`.
pub fn f16_bits(v: f64) -> u16 {
    round_to_small_float(v, 10, 5)
}

/// bfloat16 bits of `v`.
pub fn bf16_bits(v: f64) -> u16 {
    round_to_small_float(v, 7, 8)
}

// ---------------------------------------------------------------------------------------
// The corpus
// ---------------------------------------------------------------------------------------

const NO_F16: &str =
    "clang 19 rejects `_Float16` for this target (\"_Float16 is not supported on this target\")";
const NO_BF16: &str =
    "clang 19 rejects `__bf16` for this target (\"__bf16 is not supported on this target\")";

/// Every kernel of the corpus.
pub fn corpus() -> Vec<Case> {
    vec![
        Case {
            name: "elementwise_sqrt_fma",
            file: "elementwise_sqrt_fma.c",
            entry: None,
            ret: "void",
            args: &["f32[16]=iota", "f32[16]=fill:0.25", "f32[16]", "i32:13"],
            check: check_elementwise_sqrt_fma,
            not_on: &[],
        },
        Case {
            name: "softmax_expf",
            file: "softmax_expf.c",
            entry: None,
            ret: "void",
            args: &["f32[10]=0.5,-1,2,3.25,0,-4,1.5,2,-0.75,6", "f32[10]", "i32:10"],
            check: check_softmax_expf,
            not_on: &[],
        },
        Case {
            name: "reduce_sumsq",
            file: "reduce_sumsq.c",
            entry: None,
            ret: "f32",
            args: &["f32[12]=0.5,-1.25,2,3.75,-0.125,10,7.5,-3.3,0.01,4,-9.5,1.1", "i32:12"],
            check: check_reduce_sumsq,
            not_on: &[],
        },
        Case {
            name: "matmul_vec4",
            file: "matmul_vec4.c",
            entry: Some("matmul_vec4"),
            ret: "void",
            args: &[
                "f32[15]=1,0.5,-2,3,0.25,-1,2,0.75,-0.5,4,0,1.5,-3,2.5,1",
                "f32[40]=iota",
                "f32[24]",
                "i32:3",
                "i32:5",
                "i32:8",
            ],
            check: check_matmul_vec4,
            not_on: &[],
        },
        Case {
            name: "crc32_lut",
            file: "crc32_lut.c",
            entry: None,
            ret: "u32",
            args: &["u8[9]=49,50,51,52,53,54,55,56,57", "i32:9"],
            check: check_crc32_lut,
            not_on: &[],
        },
        Case {
            name: "string_table",
            file: "string_table.c",
            entry: None,
            ret: "i32",
            args: &["i32:4", "u8[64]", "i32:40", "i32:107", "i32[2]"],
            check: check_string_table,
            not_on: &[],
        },
        Case {
            name: "data_bss_state",
            file: "data_bss_state.c",
            entry: None,
            ret: "i32",
            args: &["f32[8]=0.5,1.5,-2,3,4.25,5,-6.5,7", "f32[8]", "i32:8"],
            check: check_data_bss_state,
            not_on: &[],
        },
        Case {
            name: "static_helpers",
            file: "static_helpers.c",
            entry: None,
            ret: "i32",
            args: &["f32[6]=-2,-0.5,0,0.5,1.5,3", "f32[6]", "i32:6", "i32:15"],
            check: check_static_helpers,
            not_on: &[],
        },
        Case {
            name: "switch_jumptable",
            file: "switch_jumptable.c",
            entry: None,
            ret: "void",
            args: &[
                "i32[12]=0,1,2,3,4,5,6,7,8,9,10,-3",
                "i32[12]=5,-7,100,3,9,-50,-13,-9,12,42,1,2",
                "i32[12]",
                "i32:12",
            ],
            check: check_switch_jumptable,
            not_on: &[],
        },
        Case {
            name: "struct_memcpy",
            file: "struct_memcpy.c",
            entry: None,
            ret: "i32",
            args: &["f32[20]=iota", "f32[24]", "i32:20", "f32:1.5"],
            check: check_struct_memcpy,
            not_on: &[],
        },
        Case {
            name: "many_args",
            file: "many_args.c",
            entry: None,
            ret: "f64",
            args: MANY_ARGS,
            check: check_many_args,
            not_on: &[],
        },
        Case {
            name: "ret_i64",
            file: "ret_i64.c",
            entry: None,
            ret: "i64",
            args: &["i64[5]=1,-2,3000000000,-4000000000000,5", "i32:5", "i64:12345"],
            check: check_ret_i64,
            not_on: &[],
        },
        Case {
            name: "ret_f64",
            file: "ret_f64.c",
            entry: None,
            ret: "f64",
            args: &[
                "f64[12]=1,1e-16,1e-16,1e-16,1e-16,1e-16,1e-16,1e-16,1e-16,1e-16,1e-16,3",
                "i32:12",
                "f64:2",
            ],
            check: check_ret_f64,
            not_on: &[],
        },
        Case {
            name: "int128_div",
            file: "int128_div.c",
            entry: None,
            ret: "void",
            args: &[
                "u64[8]=0,1,18446744073709551615,18446744073709551615,12345,9223372036854775808,1000,0",
                "u64[8]=3,0,4886718345,0,0,7,18446744073709551609,18446744073709551615",
                "u64[32]",
                "i32:4",
            ],
            check: check_int128_div,
            not_on: &[],
        },
        Case {
            name: "f16_convert",
            file: "f16_convert.c",
            entry: None,
            ret: "void",
            args: &[
                "f32[7]=1,0.1,65504,-70000,-2.5,0.000001,1.000488281250931322574615478515625",
                "f64[7]=0.1,1e-8,3.14159,-65520,1e5,0.333333,1.000488281250931322574615478515625",
                "f32[7]",
                "u16[14]",
                "i32:7",
            ],
            check: check_f16_convert,
            not_on: &[(Arch::Loongarch64, NO_F16), (Arch::Ppc64le, NO_F16)],
        },
        Case {
            name: "bf16_convert",
            file: "bf16_convert.c",
            entry: None,
            ret: "void",
            args: &[
                "f32[7]=1,0.1,3.14159,-1e30,65504,1e-30,1.003906250931322574615478515625",
                "f64[7]=0.1,1e-8,3.14159,-65520,1e5,1e39,1.003906250931322574615478515625",
                "f32[7]",
                "u16[14]",
                "i32:7",
            ],
            // No f32 subnormal inputs: CPUs with AVX512-BF16 convert with VCVTNEPS2BF16,
            // which flushes subnormal inputs to zero (seen on this x86_64 host).
            check: check_bf16_convert,
            not_on: &[(Arch::Loongarch64, NO_BF16), (Arch::Ppc64le, NO_BF16)],
        },
        Case {
            name: "layernorm",
            file: "layernorm.c",
            entry: None,
            ret: "f32",
            args: &[
                "f32[8]=1,2,3,4,5,6,7,9",
                "f32[8]=fill:1.5",
                "f32[8]=fill:-0.25",
                "f32[8]",
                "i32:8",
                "f32:0.00001",
            ],
            check: check_layernorm,
            not_on: &[],
        },
        Case {
            name: "quantize_i8",
            file: "quantize_i8.c",
            entry: None,
            ret: "i32",
            args: &[
                "f32[10]=0.05,-0.05,1.3,-1.3,0.25,0.35,100,-100,12.7,-12.85",
                "i8[10]",
                "f32[10]",
                "i32:10",
                "f32:0.1",
            ],
            check: check_quantize_i8,
            not_on: &[],
        },
        Case {
            name: "dispatch_table",
            file: "dispatch_table.c",
            entry: None,
            ret: "i32",
            args: &[
                "i32[8]=0,1,2,3,4,5,-1,7",
                "f32[8]=-2,3,1.5,-4,0.5,-0.25,2.5,8",
                "f32[8]",
                "i32:8",
            ],
            check: check_dispatch_table,
            not_on: &[],
        },
        Case {
            name: "global_data_got",
            file: "global_data_got.c",
            entry: Some("global_data_got"),
            ret: "i32",
            args: &["f32[6]=1,2,3,4,5,6", "f32[6]", "i32:6"],
            check: check_global_data_got,
            not_on: &[],
        },
        Case {
            name: "ir_saxpy",
            file: "ir_saxpy.ll",
            entry: None,
            ret: "void",
            args: &["f32:2.5", "f32[19]=iota", "f32[19]=fill:1", "i64:19"],
            check: check_ir_saxpy,
            not_on: &[],
        },
        Case {
            name: "ir_vec4_bias_relu",
            file: "ir_vec4_bias_relu.ll",
            entry: None,
            ret: "void",
            args: &[
                "f32[12]=-3,-2,-1,0,1,2,3,4,5,-6,7,-8",
                "f32[12]=0.5,0.5,0.5,0.5,-1,-1,-1,-1,2,2,2,2",
                "f32[12]",
                "f32:0.75",
                "i64:12",
            ],
            check: check_ir_vec4_bias_relu,
            not_on: &[],
        },
        Case {
            name: "ir_sigmoid_expf",
            file: "ir_sigmoid_expf.ll",
            entry: None,
            ret: "void",
            args: &["f32[9]=-4,-2,-1,-0.5,0,0.5,1,2,4", "f32[9]", "i64:9"],
            check: check_ir_sigmoid_expf,
            not_on: &[],
        },
        Case {
            name: "ir_dot_reassoc",
            file: "ir_dot_reassoc.ll",
            entry: None,
            ret: "f32",
            args: &["f32[37]=iota", "f32[37]=fill:0.1", "i64:37"],
            check: check_ir_dot_reassoc,
            not_on: &[],
        },
        Case {
            name: "ir_globals_i64",
            file: "ir_globals_i64.ll",
            entry: Some("ir_globals_i64"),
            ret: "i64",
            args: &[
                "i64[20]=0,1,2,3,4,5,6,7,15,23,9,10,11,12,13,14,6,7,0,-1",
                "i64[20]",
                "i64:20",
            ],
            check: check_ir_globals_i64,
            not_on: &[],
        },
    ]
}

const MANY_ARGS: &[&str] = &[
    "i8:-7",
    "u16:65000",
    "i32:-123456",
    "i64:-9876543210",
    "f32:1.5",
    "f64:-2.25",
    "i32[2]=1000,-24",
    "f32:0.125",
    "i8:100",
    "u16:7",
    "f64:3.5",
    "i64:1099511627781",
    "f64[19]",
    "i32:-42",
    "f64:12345.678",
    "f32:-0.0625",
    "i64:-1",
    "f64:0.001",
    "f32:256",
    "f64:-0.001",
];

// ---------------------------------------------------------------------------------------
// Checks: each recomputes the kernel in Rust (f32 where the kernel uses float).
// ---------------------------------------------------------------------------------------

fn check_elementwise_sqrt_fma(o: &RunOutcome) -> Result<(), String> {
    let x = iota_f32(16);
    let y = vec![0.25f32; 16];
    expect_eq("x (input, must be unchanged; iota)", &buf_f32(o, 0)?, &x)?;
    expect_eq("y (input, must be unchanged)", &buf_f32(o, 1)?, &y)?;
    expect_eq1("n", scalar_i32(o, 3)?, 13)?;
    let mut want = vec![0.0f32; 16]; // n = 13: the last three stay zero
    for i in 0..13 {
        want[i] = x[i].mul_add(x[i], y[i]).sqrt() * 0.5 + 1.0;
    }
    expect_close("out", &buf_f32(o, 2)?, &want, FLOAT)
}

fn check_softmax_expf(o: &RunOutcome) -> Result<(), String> {
    let x = [0.5f32, -1.0, 2.0, 3.25, 0.0, -4.0, 1.5, 2.0, -0.75, 6.0];
    expect_eq("x (input)", &buf_f32(o, 0)?, &x)?;
    let m = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let e: Vec<f32> = x.iter().map(|v| (v - m).exp()).collect();
    let sum: f32 = e.iter().sum();
    let want: Vec<f32> = e.iter().map(|v| v * (1.0 / sum)).collect();
    let got = buf_f32(o, 1)?;
    expect_close("out", &got, &want, LIBM)?;
    expect_close1("sum(out)", got.iter().sum::<f32>(), 1.0, LIBM)
}

fn check_reduce_sumsq(o: &RunOutcome) -> Result<(), String> {
    let x = [
        0.5f32, -1.25, 2.0, 3.75, -0.125, 10.0, 7.5, -3.3, 0.01, 4.0, -9.5, 1.1,
    ];
    expect_eq("x (input)", &buf_f32(o, 0)?, &x)?;
    let want = x.iter().fold(0.0f32, |acc, v| acc + v * v);
    expect_close1("return", ret_f32(o)?, want, FLOAT)
}

fn check_matmul_vec4(o: &RunOutcome) -> Result<(), String> {
    let a = [
        1.0f32, 0.5, -2.0, 3.0, 0.25, -1.0, 2.0, 0.75, -0.5, 4.0, 0.0, 1.5, -3.0, 2.5, 1.0,
    ];
    let b = iota_f32(40);
    expect_eq("a (input)", &buf_f32(o, 0)?, &a)?;
    expect_eq("b (input)", &buf_f32(o, 1)?, &b)?;
    let (m, k, n) = (3, 5, 8);
    let mut c = vec![0.0f32; m * n];
    for i in 0..m {
        for j in 0..n {
            let mut acc = 0.0f32;
            for p in 0..k {
                acc += a[i * k + p] * b[p * n + j];
            }
            c[i * n + j] = acc;
        }
    }
    expect_close("c", &buf_f32(o, 2)?, &c, FLOAT)
}

fn crc32_bitwise(data: &[u8]) -> u32 {
    let mut c = 0xffff_ffffu32;
    for &b in data {
        c ^= b as u32;
        for _ in 0..8 {
            c = if c & 1 != 0 {
                0xedb8_8320 ^ (c >> 1)
            } else {
                c >> 1
            };
        }
    }
    !c
}

fn check_crc32_lut(o: &RunOutcome) -> Result<(), String> {
    let data = b"123456789";
    expect_eq("p (input)", &buf_u8(o, 0)?, data)?;
    // 0xCBF43926 is the published check value of CRC-32/ISO-HDLC for "123456789".
    expect_eq1("reference crc", crc32_bitwise(data), 0xcbf4_3926)?;
    expect_eq1("return", ret_u32(o)?, 0xcbf4_3926)
}

fn check_string_table(o: &RunOutcome) -> Result<(), String> {
    let banner = b"elfjit: kernels loaded from memory, not from disk";
    let name = b"layernorm"; // names[4]
    let mut want = vec![0u8; 64];
    want[..name.len()].copy_from_slice(name); // NUL follows (buffer was zero anyway)
    want[16..56].copy_from_slice(&banner[..40]); // cap = 40 < strlen: no NUL
    expect_eq("out", &buf_u8(o, 1)?, &want)?;
    expect_eq("lens", &buf_i32(o, 4)?, &[name.len() as i32, 40])?;
    let count = banner.iter().filter(|&&c| c == b'k').count() as i32;
    expect_eq1("return (count of 'k')", ret_i32(o)?, count)
}

fn check_data_bss_state(o: &RunOutcome) -> Result<(), String> {
    let x = [0.5f32, 1.5, -2.0, 3.0, 4.25, 5.0, -6.5, 7.0];
    expect_eq("x (input)", &buf_f32(o, 0)?, &x)?;
    let calls = 42; // .data initialiser 41, incremented once on a fresh module
    let mut weights = [3i32, -5, 7, 11];
    let mut total = 0i64;
    let mut out = vec![0.0f32; 8];
    for i in 0..8 {
        let old = 0.0f32; // .bss scratch starts zeroed
        let s = x[i] * calls as f32;
        weights[i & 3] += 1;
        out[i] = old + weights[i & 3] as f32;
        total += s as i64;
    }
    expect_eq(
        "out (bss zero + updated .data table)",
        &buf_f32(o, 1)?,
        &out,
    )?;
    expect_eq1("return", ret_i32(o)?, calls + (total & 0xffff) as i32)
}

fn check_static_helpers(o: &RunOutcome) -> Result<(), String> {
    let x = [-2.0f32, -0.5, 0.0, 0.5, 1.5, 3.0];
    expect_eq("x (input)", &buf_f32(o, 0)?, &x)?;
    let poly = |v: f32| (0.25f32 * v + 0.5) * v + 1.0;
    let act = |v: f32| if v > 0.0 { poly(v) } else { 0.5 * poly(-v) };
    let want: Vec<f32> = x.iter().map(|&v| act(v)).collect();
    expect_close("out", &buf_f32(o, 1)?, &want, FLOAT)?;
    expect_eq1("return fib(15)", ret_i32(o)?, 610)
}

fn check_switch_jumptable(o: &RunOutcome) -> Result<(), String> {
    let ops = [0i32, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, -3];
    let vals = [5i32, -7, 100, 3, 9, -50, -13, -9, 12, 42, 1, 2];
    expect_eq("ops (input)", &buf_i32(o, 0)?, &ops)?;
    expect_eq("vals (input)", &buf_i32(o, 1)?, &vals)?;
    let want: Vec<i32> = ops
        .iter()
        .zip(vals)
        .map(|(&op, v)| match op {
            0 => v + 1,
            1 => v * 3,
            2 => v ^ 0x55,
            3 => v << 2,
            4 => -v,
            5 => v / 7,
            6 => v % 5,
            7 => (v >> 1) | 1,
            8 => v * v - 2,
            9 => v.min(10),
            _ => -1000,
        })
        .collect();
    expect_eq("out", &buf_i32(o, 2)?, &want)
}

fn check_struct_memcpy(o: &RunOutcome) -> Result<(), String> {
    let x = iota_f32(20);
    expect_eq("in (input)", &buf_f32(o, 0)?, &x)?;
    let mut want = vec![0.0f32; 24];
    for i in 0..20 {
        want[i] = x[i] * 1.5;
    }
    expect_eq("out (exact: one multiply by 1.5)", &buf_f32(o, 1)?, &want)?;
    expect_eq1("return (tag + 1 + unchanged original)", ret_i32(o)?, 102)
}

fn check_many_args(o: &RunOutcome) -> Result<(), String> {
    let (a, b, c, d) = (-7i8, 65000u16, -123456i32, -9876543210i64);
    let (e, f, p, g, h) = (1.5f32, -2.25f64, [1000i32, -24], 0.125f32, 100i8);
    let (i, j, k, l, m) = (7u16, 3.5f64, 1099511627781i64, -42i32, 12345.678f64);
    let (oo, q, r, s, t) = (-0.0625f32, -1i64, 0.001f64, 256f32, -0.001f64);
    // Every scalar must come back as given (the call cannot change them).
    expect_eq1("arg a", scalar_i8(o, 0)?, a)?;
    expect_eq1("arg b", scalar_u16(o, 1)?, b)?;
    expect_eq1("arg c", scalar_i32(o, 2)?, c)?;
    expect_eq1("arg d", scalar_i64(o, 3)?, d)?;
    expect_eq1("arg e", scalar_f32(o, 4)?, e)?;
    expect_eq1("arg f", scalar_f64(o, 5)?, f)?;
    expect_eq("p (input)", &buf_i32(o, 6)?, &p)?;
    expect_eq1("arg h", scalar_i8(o, 8)?, h)?;
    expect_eq1("arg i", scalar_u16(o, 9)?, i)?;
    expect_eq1("arg k", scalar_i64(o, 11)?, k)?;
    expect_eq1("arg t", scalar_f64(o, 19)?, t)?;
    // Every value here is exact in f64, so the copies must be bit-exact.
    let want_out = [
        a as f64,
        b as f64,
        c as f64,
        d as f64,
        e as f64,
        f,
        (p[0] + p[1]) as f64,
        g as f64,
        h as f64,
        i as f64,
        j,
        k as f64,
        l as f64,
        m,
        oo as f64,
        q as f64,
        r,
        s as f64,
        t,
    ];
    expect_eq(
        "out (each argument as seen by the callee)",
        &buf_f64(o, 12)?,
        &want_out,
    )?;
    let want = a as f64
        + 2.0 * b as f64
        + 3.0 * c as f64
        + 4.0 * (d % 65536) as f64
        + 5.0 * e as f64
        + 6.0 * f
        + 7.0 * (p[0] - p[1]) as f64
        + 8.0 * g as f64
        + 9.0 * h as f64
        + 10.0 * i as f64
        + 11.0 * j
        + 12.0 * (k % 65536) as f64
        + 13.0 * l as f64
        + 14.0 * m
        + 15.0 * oo as f64
        + 16.0 * q as f64
        + 17.0 * r
        + 18.0 * s as f64
        + 19.0 * t;
    expect_close1("return", ret_f64(o)?, want, DOUBLE)
}

fn check_ret_i64(o: &RunOutcome) -> Result<(), String> {
    let x = [1i64, -2, 3_000_000_000, -4_000_000_000_000, 5];
    expect_eq("x (input)", &buf_i64(o, 0)?, &x)?;
    let mut h = 0xcbf2_9ce4_8422_2325u64 ^ 12345u64;
    for v in x {
        h ^= v as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
        h ^= h >> 29;
    }
    expect_eq1("return", ret_i64(o)?, h as i64)
}

fn check_ret_f64(o: &RunOutcome) -> Result<(), String> {
    let mut x = vec![1e-16f64; 12];
    x[0] = 1.0;
    x[11] = 3.0;
    expect_eq("x (input)", &buf_f64(o, 0)?, &x)?;
    let (mut sum, mut comp) = (0.0f64, 0.0f64);
    for &v in &x {
        let y = v * 2.0 - comp;
        let t = sum + y;
        comp = (t - sum) - y;
        sum = t;
    }
    // The data are chosen so that compensation matters: a naive sum loses every 2e-16.
    let naive: f64 = x.iter().map(|v| v * 2.0).sum();
    expect_eq1("naive reference", naive, 8.0)?;
    expect_eq1(
        "Kahan reference (8 + 1 ulp)",
        sum,
        f64::from_bits(8f64.to_bits() + 1),
    )?;
    // Bit-exact: no multiply can be contracted inexactly (x * 2 is exact).
    expect_eq1("return (bits)", ret_f64(o)?.to_bits(), sum.to_bits())
}

fn check_int128_div(o: &RunOutcome) -> Result<(), String> {
    let num = [0u64, 1, u64::MAX, u64::MAX, 12345, 1 << 63, 1000, 0];
    let den = [3u64, 0, 4886718345, 0, 0, 7, u64::MAX - 6, u64::MAX];
    expect_eq("num (input)", &buf_u64(o, 0)?, &num)?;
    expect_eq("den (input)", &buf_u64(o, 1)?, &den)?;
    let join = |w: &[u64]| (w[1] as u128) << 64 | w[0] as u128;
    let mut want = Vec::new();
    for i in 0..4 {
        let a = join(&num[2 * i..]);
        let b = join(&den[2 * i..]);
        let (sa, sb) = (a as i128, b as i128);
        for v in [a / b, a % b, (sa / sb) as u128, (sa % sb) as u128] {
            want.push(v as u64);
            want.push((v >> 64) as u64);
        }
    }
    expect_eq(
        "out (uq, ur, sq, sr as lo/hi words)",
        &buf_u64(o, 2)?,
        &want,
    )
}

fn check_f16_convert(o: &RunOutcome) -> Result<(), String> {
    check_small_float(
        o,
        f16_bits,
        |b| small_float_value(b, 10, 5),
        |a, b| a + b,
        "f16",
    )
}

fn check_bf16_convert(o: &RunOutcome) -> Result<(), String> {
    check_small_float(
        o,
        bf16_bits,
        |b| small_float_value(b, 7, 8),
        |a, b| a - b,
        "bf16",
    )
}

fn check_small_float(
    o: &RunOutcome,
    to_bits: fn(f64) -> u16,
    value: fn(u16) -> f64,
    combine: fn(f32, f32) -> f32,
    fmt: &str,
) -> Result<(), String> {
    let x = buf_f32(o, 0)?;
    let d = buf_f64(o, 1)?;
    // The inputs are parsed by elfjit; check the first few against what the spec says so
    // a parsing change cannot make this check vacuous.
    expect_eq1("x[0] (input)", x[0], 1.0f32)?;
    expect_eq1("d[0] (input)", d[0], 0.1f64)?;
    let mut bits = Vec::new();
    let mut out = Vec::new();
    for (&xv, &dv) in x.iter().zip(&d) {
        let hb = to_bits(xv as f64);
        let db = to_bits(dv);
        bits.push(hb);
        bits.push(db);
        out.push(combine(value(hb) as f32, value(db) as f32));
    }
    expect_eq(
        &format!("bits ({fmt}: x, d interleaved)"),
        &buf_u16(o, 3)?,
        &bits,
    )?;
    expect_eq("out", &buf_f32(o, 2)?, &out)
}

fn check_layernorm(o: &RunOutcome) -> Result<(), String> {
    let x = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 9.0];
    expect_eq("x (input)", &buf_f32(o, 0)?, &x)?;
    expect_eq("gamma (input)", &buf_f32(o, 1)?, &[1.5f32; 8])?;
    expect_eq("beta (input)", &buf_f32(o, 2)?, &[-0.25f32; 8])?;
    let n = 8.0f32;
    let mean = x.iter().fold(0.0f32, |a, v| a + v) / n;
    let var = x.iter().fold(0.0f32, |a, v| a + (v - mean) * (v - mean)) / n;
    let inv = 1.0 / (var + 0.00001f32).sqrt();
    let want: Vec<f32> = x.iter().map(|v| (v - mean) * inv * 1.5 - 0.25).collect();
    expect_close("out", &buf_f32(o, 3)?, &want, FLOAT)?;
    expect_close1("return (variance)", ret_f32(o)?, var, FLOAT)
}

fn check_quantize_i8(o: &RunOutcome) -> Result<(), String> {
    let x = [
        0.05f32, -0.05, 1.3, -1.3, 0.25, 0.35, 100.0, -100.0, 12.7, -12.85,
    ];
    expect_eq("x (input)", &buf_f32(o, 0)?, &x)?;
    let scale = 0.1f32;
    let inv = 1.0f32 / scale;
    let mut q = Vec::new();
    let mut deq = Vec::new();
    let mut clipped = 0;
    for v in x {
        let r = (v * inv).round_ties_even();
        clipped += (!(-128.0..=127.0).contains(&r)) as i32;
        let qi = r.clamp(-128.0, 127.0) as i8;
        q.push(qi);
        deq.push(qi as f32 * scale);
    }
    expect_eq("q", &buf_i8(o, 1)?, &q)?;
    expect_eq("deq", &buf_f32(o, 2)?, &deq)?;
    expect_eq1("return (clipped)", ret_i32(o)?, clipped)
}

fn check_dispatch_table(o: &RunOutcome) -> Result<(), String> {
    let codes = [0i32, 1, 2, 3, 4, 5, -1, 7];
    let x = [-2.0f32, 3.0, 1.5, -4.0, 0.5, -0.25, 2.5, 8.0];
    expect_eq("codes (input)", &buf_i32(o, 0)?, &codes)?;
    expect_eq("x (input)", &buf_f32(o, 1)?, &x)?;
    let ops: [fn(f32) -> f32; 4] = [|v| v.max(0.0), |v| -v, |v| v * v, |v| 0.5 * v];
    let want: Vec<f32> = codes
        .iter()
        .zip(x)
        .map(|(&c, v)| ops[(c & 3) as usize](v))
        .collect();
    expect_eq("out (exact)", &buf_f32(o, 2)?, &want)?;
    // After one rotation: [negate, square, halve, relu] -> 1 + 4 + 2.
    expect_eq1("return (table rotated in .data)", ret_i32(o)?, 7)
}

fn check_global_data_got(o: &RunOutcome) -> Result<(), String> {
    let x = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0];
    expect_eq("x (input)", &buf_f32(o, 0)?, &x)?;
    let mut scale = [1.0f32, 2.0, 0.5, -1.0];
    let offsets = [100i32, 200, 300, 400];
    let calls = 11; // initialiser 10, one call
    let mut accum = 0i64; // .bss
    let mut out = Vec::new();
    for (i, v) in x.iter().enumerate() {
        out.push(v * scale[i & 3] + offsets[i & 3] as f32);
        accum += offsets[i & 3] as i64;
        scale[i & 3] += 1.0;
    }
    expect_eq("out (exact)", &buf_f32(o, 1)?, &out)?;
    expect_eq1("return", ret_i32(o)?, calls * 1000 + (accum % 1000) as i32)
}

fn check_ir_saxpy(o: &RunOutcome) -> Result<(), String> {
    let x = iota_f32(19);
    expect_eq("x (input)", &buf_f32(o, 1)?, &x)?;
    let want: Vec<f32> = x.iter().map(|v| 2.5 * v + 1.0).collect();
    expect_close("y", &buf_f32(o, 2)?, &want, FLOAT)
}

fn check_ir_vec4_bias_relu(o: &RunOutcome) -> Result<(), String> {
    let x = [
        -3.0f32, -2.0, -1.0, 0.0, 1.0, 2.0, 3.0, 4.0, 5.0, -6.0, 7.0, -8.0,
    ];
    let bias = [
        0.5f32, 0.5, 0.5, 0.5, -1.0, -1.0, -1.0, -1.0, 2.0, 2.0, 2.0, 2.0,
    ];
    expect_eq("x (input)", &buf_f32(o, 0)?, &x)?;
    expect_eq("bias (input)", &buf_f32(o, 1)?, &bias)?;
    let want: Vec<f32> = x
        .iter()
        .zip(bias)
        .map(|(v, b)| (v * 0.75 + b).max(0.0))
        .collect();
    expect_close("out", &buf_f32(o, 2)?, &want, FLOAT)
}

fn check_ir_sigmoid_expf(o: &RunOutcome) -> Result<(), String> {
    let x = [-4.0f32, -2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0, 4.0];
    expect_eq("x (input)", &buf_f32(o, 0)?, &x)?;
    let want: Vec<f32> = x.iter().map(|v| 1.0 / (1.0 + (-v).exp())).collect();
    expect_close("out", &buf_f32(o, 1)?, &want, LIBM)
}

fn check_ir_dot_reassoc(o: &RunOutcome) -> Result<(), String> {
    let a = iota_f32(37);
    let b = vec![0.1f32; 37];
    expect_eq("a (input)", &buf_f32(o, 0)?, &a)?;
    expect_eq("b (input)", &buf_f32(o, 1)?, &b)?;
    let want = a.iter().zip(&b).fold(0.0f32, |acc, (x, y)| acc + x * y);
    expect_close1("return", ret_f32(o)?, want, REASSOC)
}

fn check_ir_globals_i64(o: &RunOutcome) -> Result<(), String> {
    let idx = [
        0i64, 1, 2, 3, 4, 5, 6, 7, 15, 23, 9, 10, 11, 12, 13, 14, 6, 7, 0, -1,
    ];
    expect_eq("idx (input)", &buf_i64(o, 0)?, &idx)?;
    let table = [1i64, 10, 100, 1000, 10000, 100000, 1000000, 4294967296];
    let counter = 7i64; // initialiser 6, incremented once on a fresh module
    let mut history = [0i64; 16]; // .bss starts zeroed
    let mut out = Vec::new();
    let mut sum = 0i64;
    for (i, &k) in idx.iter().enumerate() {
        let t = table[(k & 7) as usize];
        let old = history[i & 15];
        history[i & 15] = t;
        out.push(t * counter + old);
        sum += t;
    }
    expect_eq("out", &buf_i64(o, 1)?, &out)?;
    expect_eq1("return", ret_i64(o)?, sum + (counter << 40))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_float_reference_conversions() {
        assert_eq!(f16_bits(1.0), 0x3c00);
        assert_eq!(f16_bits(65504.0), 0x7bff);
        assert_eq!(f16_bits(65520.0), 0x7c00); // rounds up to infinity
        assert_eq!(f16_bits(-2.0), 0xc000);
        assert_eq!(f16_bits(2f64.powi(-24)), 0x0001); // smallest subnormal
        assert_eq!(f16_bits(2f64.powi(-25)), 0x0000); // tie to even: zero
        assert_eq!(f16_bits(0.1), 0x2e66);
        assert_eq!(bf16_bits(1.0), 0x3f80);
        assert_eq!(bf16_bits(3.140625), 0x4049); // exactly representable
                                                 // Direct rounding, no double rounding through f32.
        assert_eq!(f16_bits(1.0 + 2f64.powi(-11) + 2f64.powi(-30)), 0x3c01);
        assert_eq!(bf16_bits(1.0 + 2f64.powi(-8) + 2f64.powi(-30)), 0x3f81);
        for bits in [0x3c00u16, 0x0001, 0x7bff, 0xc000, 0x3555] {
            assert_eq!(f16_bits(small_float_value(bits, 10, 5)), bits);
        }
    }

    #[test]
    fn corpus_is_consistent() {
        let cases = corpus();
        assert!(cases.len() >= 18);
        let mut names: Vec<_> = cases.iter().map(|c| c.name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), cases.len(), "duplicate case names");
        for c in &cases {
            assert!(
                kernel_path(c.file).is_file(),
                "{}: missing {}",
                c.name,
                c.file
            );
            ret_type(c.ret).unwrap();
        }
        // Every kernel file is in the corpus.
        for entry in std::fs::read_dir(kernels_dir()).unwrap() {
            let name = entry.unwrap().file_name().into_string().unwrap();
            if name.ends_with(".c") || name.ends_with(".ll") {
                assert!(cases.iter().any(|c| c.file == name), "{name} has no case");
            }
        }
    }
}
