//! Calling loaded code with a signature known only at run time, through libffi.
//!
//! A [`CallInterface`] is prepared once from the argument kinds and return type (libffi's
//! `ffi_prep_cif`) and can then call any function of that signature any number of times.

pub use crate::args::ArgKind;
use crate::args::{RetType, Scalar, ScalarType};
use crate::error::{Error, Result};
use libffi::middle::{arg, Arg, Cif, CodePtr, Type};
use std::ffi::c_void;

/// One argument value for [`CallInterface::call`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ArgValue {
    /// A by-value scalar.
    Scalar(Scalar),
    /// A data pointer.
    Pointer(*mut c_void),
}

impl ArgValue {
    /// The kind this value is passed as.
    pub fn kind(&self) -> ArgKind {
        match self {
            ArgValue::Scalar(s) => ArgKind::Scalar(s.ty()),
            ArgValue::Pointer(_) => ArgKind::Pointer,
        }
    }
}

fn ffi_type(kind: ArgKind) -> Type {
    match kind {
        ArgKind::Pointer => Type::pointer(),
        ArgKind::Scalar(t) => scalar_type(t),
    }
}

fn scalar_type(t: ScalarType) -> Type {
    match t {
        ScalarType::I8 => Type::i8(),
        ScalarType::U8 => Type::u8(),
        ScalarType::I16 => Type::i16(),
        ScalarType::U16 => Type::u16(),
        ScalarType::I32 => Type::i32(),
        ScalarType::U32 => Type::u32(),
        ScalarType::I64 => Type::i64(),
        ScalarType::U64 => Type::u64(),
        ScalarType::F32 => Type::f32(),
        ScalarType::F64 => Type::f64(),
    }
}

/// A prepared C calling interface: argument kinds, return type, the platform's default ABI.
#[derive(Debug)]
pub struct CallInterface {
    cif: Cif,
    args: Vec<ArgKind>,
    ret: RetType,
}

// SAFETY: the Cif is fully prepared in `new` and never mutated afterwards: `ffi_call` only
// reads it (the `*mut` in its signature is historical). The types it points to are either
// libffi's immutable built-in scalar/pointer descriptors (statics that `ffi_prep_cif` never
// writes, as only struct types get their size filled in) or the argument-type array owned
// by the Cif and freed with it. No struct types are ever built here. So moving the
// interface to another thread, or calling through `&CallInterface` from several threads at
// once, touches only read-only memory.
unsafe impl Send for CallInterface {}
// SAFETY: see `Send` above: every `&self` use is a read.
unsafe impl Sync for CallInterface {}

impl CallInterface {
    /// Prepares an interface for functions taking `args` and returning `ret`.
    pub fn new(args: &[ArgKind], ret: RetType) -> Result<CallInterface> {
        let ret_type = match ret.scalar_type() {
            None => Type::void(),
            Some(t) => scalar_type(t),
        };
        let cif = Cif::try_new(args.iter().map(|k| ffi_type(*k)), ret_type).map_err(|e| {
            Error::Unsupported(format!(
                "libffi cannot prepare a call with {} arguments returning {ret}: {e:?}",
                args.len()
            ))
        })?;
        Ok(CallInterface {
            cif,
            args: args.to_vec(),
            ret,
        })
    }

    /// The argument kinds, in call order.
    pub fn args(&self) -> &[ArgKind] {
        &self.args
    }

    /// The return type.
    pub fn ret(&self) -> RetType {
        self.ret
    }

    /// Calls the function at `code` with `args`; the result is `None` for `void`.
    ///
    /// # Safety
    /// `code` must be the address of executable code of a function whose C signature is
    /// exactly this interface's, and every pointer argument must be valid for whatever the
    /// function does with it (the kernel can read and write through it).
    ///
    /// # Panics
    /// If `args` does not match the interface's argument kinds (count or types): a caller
    /// bug, checked because a mismatch would make libffi read the wrong bytes.
    pub unsafe fn call(&self, code: *const u8, args: &[ArgValue]) -> Option<Scalar> {
        assert_eq!(
            args.len(),
            self.args.len(),
            "CallInterface::call: wrong number of arguments"
        );
        for (i, (a, k)) in args.iter().zip(&self.args).enumerate() {
            assert_eq!(
                a.kind(),
                *k,
                "CallInterface::call: argument {i} has the wrong type"
            );
        }
        // libffi wants a pointer to each argument's storage; point into `args` itself,
        // which outlives the call.
        let ffi_args: Vec<Arg> = args
            .iter()
            .map(|a| match a {
                ArgValue::Pointer(p) => arg(p),
                ArgValue::Scalar(Scalar::I8(v)) => arg(v),
                ArgValue::Scalar(Scalar::U8(v)) => arg(v),
                ArgValue::Scalar(Scalar::I16(v)) => arg(v),
                ArgValue::Scalar(Scalar::U16(v)) => arg(v),
                ArgValue::Scalar(Scalar::I32(v)) => arg(v),
                ArgValue::Scalar(Scalar::U32(v)) => arg(v),
                ArgValue::Scalar(Scalar::I64(v)) => arg(v),
                ArgValue::Scalar(Scalar::U64(v)) => arg(v),
                ArgValue::Scalar(Scalar::F32(v)) => arg(v),
                ArgValue::Scalar(Scalar::F64(v)) => arg(v),
            })
            .collect();
        let f = CodePtr::from_ptr(code.cast::<c_void>());
        // SAFETY: the caller guarantees `code` has this interface's signature and that the
        // pointer arguments are valid; the argument storage matches the Cif's types (checked
        // above) and lives until the call returns; `call::<R>` is instantiated with the Rust
        // type matching the Cif's return type (libffi's widened small-integer returns are
        // handled inside `call`).
        unsafe {
            match self.ret {
                RetType::Void => {
                    self.cif.call::<()>(f, &ffi_args);
                    None
                }
                RetType::I32 => Some(Scalar::I32(self.cif.call::<i32>(f, &ffi_args))),
                RetType::I64 => Some(Scalar::I64(self.cif.call::<i64>(f, &ffi_args))),
                RetType::U32 => Some(Scalar::U32(self.cif.call::<u32>(f, &ffi_args))),
                RetType::U64 => Some(Scalar::U64(self.cif.call::<u64>(f, &ffi_args))),
                RetType::F32 => Some(Scalar::F32(self.cif.call::<f32>(f, &ffi_args))),
                RetType::F64 => Some(Scalar::F64(self.cif.call::<f64>(f, &ffi_args))),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    extern "C" fn mixed(
        a: i8,
        b: u8,
        c: i16,
        d: u16,
        e: i32,
        f: u32,
        g: i64,
        h: u64,
        x: f32,
        y: f64,
        out: *mut f64,
    ) -> f64 {
        let s = a as f64
            + b as f64
            + c as f64
            + d as f64
            + e as f64
            + f as f64
            + g as f64
            + h as f64
            + x as f64
            + y;
        // SAFETY: the test passes a valid, exclusive pointer to an f64.
        unsafe { *out = s * 2.0 };
        s
    }

    extern "C" fn ret_i32(a: i32, b: i32) -> i32 {
        a.wrapping_mul(b)
    }
    extern "C" fn ret_u32(a: u32) -> u32 {
        a.wrapping_add(1)
    }
    extern "C" fn ret_i64(a: i64) -> i64 {
        a.wrapping_sub(1)
    }
    extern "C" fn ret_u64(a: u64) -> u64 {
        a ^ 0xffff_0000_ffff_0000
    }
    extern "C" fn ret_f32(a: f32, b: f32) -> f32 {
        a * b
    }
    extern "C" fn ret_void(p: *mut i32, n: i32) {
        for i in 0..n as usize {
            // SAFETY: the test passes a buffer of at least n i32s.
            unsafe { *p.add(i) = i as i32 * 3 };
        }
    }
    extern "C" fn many_floats(
        a: f32,
        b: f64,
        c: f32,
        d: f64,
        e: f32,
        f: f64,
        g: f32,
        h: f64,
        i: f32,
        j: f64,
    ) -> f32 {
        (a as f64 + b + c as f64 + d + e as f64 + f + g as f64 + h + i as f64 + j) as f32
    }

    #[test]
    fn mixed_arguments_and_pointer() {
        let kinds = [
            ArgKind::Scalar(ScalarType::I8),
            ArgKind::Scalar(ScalarType::U8),
            ArgKind::Scalar(ScalarType::I16),
            ArgKind::Scalar(ScalarType::U16),
            ArgKind::Scalar(ScalarType::I32),
            ArgKind::Scalar(ScalarType::U32),
            ArgKind::Scalar(ScalarType::I64),
            ArgKind::Scalar(ScalarType::U64),
            ArgKind::Scalar(ScalarType::F32),
            ArgKind::Scalar(ScalarType::F64),
            ArgKind::Pointer,
        ];
        let ci = CallInterface::new(&kinds, RetType::F64).unwrap();
        let mut out = 0f64;
        let args = [
            ArgValue::Scalar(Scalar::I8(-3)),
            ArgValue::Scalar(Scalar::U8(250)),
            ArgValue::Scalar(Scalar::I16(-300)),
            ArgValue::Scalar(Scalar::U16(60000)),
            ArgValue::Scalar(Scalar::I32(-70000)),
            ArgValue::Scalar(Scalar::U32(4_000_000_000)),
            ArgValue::Scalar(Scalar::I64(-5_000_000_000)),
            ArgValue::Scalar(Scalar::U64(7_000_000_000)),
            ArgValue::Scalar(Scalar::F32(0.5)),
            ArgValue::Scalar(Scalar::F64(0.25)),
            ArgValue::Pointer((&mut out as *mut f64).cast()),
        ];
        let want = -3.0 + 250.0 - 300.0 + 60000.0 - 70000.0 + 4e9 - 5e9 + 7e9 + 0.5 + 0.25;
        // SAFETY: `mixed` has exactly this signature; `out` is a valid f64.
        let r = unsafe { ci.call(mixed as *const u8, &args) };
        assert_eq!(r, Some(Scalar::F64(want)));
        assert_eq!(out, want * 2.0);
    }

    #[test]
    fn every_return_type() {
        let i32k = ArgKind::Scalar(ScalarType::I32);
        // SAFETY: (all calls below) each function has exactly the interface's signature.
        unsafe {
            let ci = CallInterface::new(&[i32k, i32k], RetType::I32).unwrap();
            let r = ci.call(
                ret_i32 as *const u8,
                &[
                    ArgValue::Scalar(Scalar::I32(-6)),
                    ArgValue::Scalar(Scalar::I32(7)),
                ],
            );
            assert_eq!(r, Some(Scalar::I32(-42)));

            let ci = CallInterface::new(&[ArgKind::Scalar(ScalarType::U32)], RetType::U32).unwrap();
            let r = ci.call(
                ret_u32 as *const u8,
                &[ArgValue::Scalar(Scalar::U32(u32::MAX - 1))],
            );
            assert_eq!(r, Some(Scalar::U32(u32::MAX)));

            let ci = CallInterface::new(&[ArgKind::Scalar(ScalarType::I64)], RetType::I64).unwrap();
            let r = ci.call(
                ret_i64 as *const u8,
                &[ArgValue::Scalar(Scalar::I64(i64::MIN + 1))],
            );
            assert_eq!(r, Some(Scalar::I64(i64::MIN)));

            let ci = CallInterface::new(&[ArgKind::Scalar(ScalarType::U64)], RetType::U64).unwrap();
            let r = ci.call(
                ret_u64 as *const u8,
                &[ArgValue::Scalar(Scalar::U64(u64::MAX))],
            );
            assert_eq!(r, Some(Scalar::U64(0x0000_ffff_0000_ffff)));

            let f32k = ArgKind::Scalar(ScalarType::F32);
            let ci = CallInterface::new(&[f32k, f32k], RetType::F32).unwrap();
            let r = ci.call(
                ret_f32 as *const u8,
                &[
                    ArgValue::Scalar(Scalar::F32(1.5)),
                    ArgValue::Scalar(Scalar::F32(-4.0)),
                ],
            );
            assert_eq!(r, Some(Scalar::F32(-6.0)));

            let mut buf = [0i32; 5];
            let ci = CallInterface::new(&[ArgKind::Pointer, i32k], RetType::Void).unwrap();
            let r = ci.call(
                ret_void as *const u8,
                &[
                    ArgValue::Pointer(buf.as_mut_ptr().cast()),
                    ArgValue::Scalar(Scalar::I32(5)),
                ],
            );
            assert_eq!(r, None);
            assert_eq!(buf, [0, 3, 6, 9, 12]);
        }
    }

    #[test]
    fn more_float_args_than_registers_and_threads() {
        let f = ArgKind::Scalar(ScalarType::F32);
        let d = ArgKind::Scalar(ScalarType::F64);
        let ci = CallInterface::new(&[f, d, f, d, f, d, f, d, f, d], RetType::F32).unwrap();
        let args = || -> Vec<ArgValue> {
            (1..=10)
                .map(|i| {
                    if i % 2 == 1 {
                        ArgValue::Scalar(Scalar::F32(i as f32))
                    } else {
                        ArgValue::Scalar(Scalar::F64(i as f64))
                    }
                })
                .collect()
        };
        // The interface is shared across threads (Sync) and moved (Send).
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    // SAFETY: `many_floats` has exactly this signature.
                    let r = unsafe { ci.call(many_floats as *const u8, &args()) };
                    assert_eq!(r, Some(Scalar::F32(55.0)));
                });
            }
        });
        let moved = std::thread::spawn(move || ci.args().len()).join().unwrap();
        assert_eq!(moved, 10);
    }

    #[test]
    #[should_panic(expected = "wrong type")]
    fn mismatched_arguments_panic_before_calling() {
        let ci = CallInterface::new(&[ArgKind::Scalar(ScalarType::I32)], RetType::I32).unwrap();
        // SAFETY: the call is rejected before any code runs.
        unsafe {
            ci.call(ret_u32 as *const u8, &[ArgValue::Scalar(Scalar::F32(1.0))]);
        }
    }
}
