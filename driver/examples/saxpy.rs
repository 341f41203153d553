//! Compile a C kernel with clang, link it in memory, and call it two ways: through a typed
//! function pointer, and through a CallInterface built at run time.
//!
//! `cargo run -p elfjit --example saxpy`

use elfjit::args::{Buffer, BufferInit, RetType, Scalar, ScalarType};
use elfjit::ffi::{ArgKind, ArgValue, CallInterface};
use elfjit::{Arch, CompileOptions, Compiler, Lang, Module};

const SAXPY: &str = "
void saxpy(int n, float a, const float *restrict x, float *restrict y) {
    for (int i = 0; i < n; i++)
        y[i] = a * x[i] + y[i];
}
";

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let host = Arch::host().ok_or("elfjit does not run on this architecture")?;
    let clang = Compiler::find()?;
    println!("clang: {}", clang.version()?);

    let object = clang.compile(SAXPY.as_bytes(), &CompileOptions::new(Lang::C, host))?;
    let module = Module::load(&object)?;
    let code = module.symbol("saxpy").ok_or("saxpy not found")?;

    // 1. A typed function pointer, when the signature is known when writing Rust.
    type Saxpy = unsafe extern "C" fn(i32, f32, *const f32, *mut f32);
    // SAFETY: `code` is the address of `saxpy` in `module`, compiled from the C above whose
    // signature is exactly `Saxpy`; the module outlives every call below.
    let saxpy: Saxpy = unsafe { std::mem::transmute::<*const u8, Saxpy>(code) };
    let x: Vec<f32> = (0..8).map(|i| i as f32).collect();
    let mut y = vec![1.0f32; 8];
    // SAFETY: both slices hold 8 floats, as `n` says; `y` is not aliased.
    unsafe { saxpy(8, 2.0, x.as_ptr(), y.as_mut_ptr()) };
    println!("typed pointer:   y = {y:?}");

    // 2. A CallInterface, when the signature is only known at run time (what `elfjit run`
    // does); buffers in 64-byte-aligned memory.
    let ci = CallInterface::new(
        &[
            ArgKind::Scalar(ScalarType::I32),
            ArgKind::Scalar(ScalarType::F32),
            ArgKind::Pointer,
            ArgKind::Pointer,
        ],
        RetType::Void,
    )?;
    let mut xb = Buffer::new(ScalarType::F32, &BufferInit::Iota(8))?;
    let mut yb = Buffer::new(ScalarType::F32, &BufferInit::Fill(8, Scalar::F32(1.0)))?;
    let args = [
        ArgValue::Scalar(Scalar::I32(8)),
        ArgValue::Scalar(Scalar::F32(2.0)),
        ArgValue::Pointer(xb.as_mut_ptr().cast()),
        ArgValue::Pointer(yb.as_mut_ptr().cast()),
    ];
    // SAFETY: the interface matches saxpy's C signature and both buffers hold 8 floats.
    unsafe { ci.call(code, &args) };
    let values: Vec<String> = yb.values().iter().map(|v| v.to_string()).collect();
    println!("CallInterface:   y = [{}]", values.join(", "));
    Ok(())
}
