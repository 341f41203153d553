//! The `--arg SPEC` / `--ret TYPE` grammar, typed values, and the aligned buffers that
//! pointer arguments point into.
//!
//! ```text
//! TYPE:VALUE          scalar, e.g. i32:1024  f32:2.5  f64:-inf
//! TYPE[N]             buffer of N zeros
//! TYPE[N]=v0,v1,...   exactly N values
//! TYPE[N]=iota        0, 1, ..., N-1
//! TYPE[N]=fill:V      N copies of V
//! TYPE: i8 u8 i16 u16 i32 u32 i64 u64 f32 f64
//! ```

use crate::error::{Error, Result};
use crate::ffi::ArgKind;
use std::alloc::Layout;
use std::fmt;
use std::ptr::NonNull;

/// The largest buffer `--arg` accepts, in elements (2^28: 1 GiB of `f32`).
pub const MAX_BUFFER_ELEMENTS: usize = 1 << 28;

/// The most bytes all of a run's `--arg` buffers may hold together (2 GiB: one `f64`
/// buffer of [`MAX_BUFFER_ELEMENTS`]). Checked before anything is compiled or allocated.
pub const MAX_TOTAL_BUFFER_BYTES: u64 = 2 << 30;

/// Alignment of every argument buffer, in bytes (a cache line; enough for any vector ISA
/// elfjit targets).
pub const BUFFER_ALIGN: usize = 64;

/// The element or value types of `--arg`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ScalarType {
    /// `int8_t`
    I8,
    /// `uint8_t`
    U8,
    /// `int16_t`
    I16,
    /// `uint16_t`
    U16,
    /// `int32_t`
    I32,
    /// `uint32_t`
    U32,
    /// `int64_t`
    I64,
    /// `uint64_t`
    U64,
    /// `float`
    F32,
    /// `double`
    F64,
}

const TYPE_NAMES: &str = "i8 u8 i16 u16 i32 u32 i64 u64 f32 f64";

impl ScalarType {
    /// Every scalar type, in the order the grammar lists them.
    pub const ALL: [ScalarType; 10] = [
        ScalarType::I8,
        ScalarType::U8,
        ScalarType::I16,
        ScalarType::U16,
        ScalarType::I32,
        ScalarType::U32,
        ScalarType::I64,
        ScalarType::U64,
        ScalarType::F32,
        ScalarType::F64,
    ];

    /// Parses a type name (`i8` ... `f64`).
    pub fn from_name(name: &str) -> Option<ScalarType> {
        ScalarType::ALL.into_iter().find(|t| t.name() == name)
    }

    /// The grammar's name of the type.
    pub const fn name(self) -> &'static str {
        match self {
            ScalarType::I8 => "i8",
            ScalarType::U8 => "u8",
            ScalarType::I16 => "i16",
            ScalarType::U16 => "u16",
            ScalarType::I32 => "i32",
            ScalarType::U32 => "u32",
            ScalarType::I64 => "i64",
            ScalarType::U64 => "u64",
            ScalarType::F32 => "f32",
            ScalarType::F64 => "f64",
        }
    }

    /// Size in bytes.
    pub const fn size(self) -> usize {
        match self {
            ScalarType::I8 | ScalarType::U8 => 1,
            ScalarType::I16 | ScalarType::U16 => 2,
            ScalarType::I32 | ScalarType::U32 | ScalarType::F32 => 4,
            ScalarType::I64 | ScalarType::U64 | ScalarType::F64 => 8,
        }
    }

    /// Whether this is `f32` or `f64`.
    pub const fn is_float(self) -> bool {
        matches!(self, ScalarType::F32 | ScalarType::F64)
    }

    /// The inclusive range of an integer type (`None` for floats).
    pub fn int_range(self) -> Option<(i128, i128)> {
        Some(match self {
            ScalarType::I8 => (i8::MIN.into(), i8::MAX.into()),
            ScalarType::U8 => (0, u8::MAX.into()),
            ScalarType::I16 => (i16::MIN.into(), i16::MAX.into()),
            ScalarType::U16 => (0, u16::MAX.into()),
            ScalarType::I32 => (i32::MIN.into(), i32::MAX.into()),
            ScalarType::U32 => (0, u32::MAX.into()),
            ScalarType::I64 => (i64::MIN.into(), i64::MAX.into()),
            ScalarType::U64 => (0, u64::MAX.into()),
            ScalarType::F32 | ScalarType::F64 => return None,
        })
    }

    /// The zero of this type.
    pub fn zero(self) -> Scalar {
        match self {
            ScalarType::F32 => Scalar::F32(0.0),
            ScalarType::F64 => Scalar::F64(0.0),
            // In range for every integer type.
            _ => self.from_i128(0).unwrap_or(Scalar::I32(0)),
        }
    }

    /// An integer converted to this type, `None` if it does not fit an integer type.
    /// Float types take the nearest representable value.
    pub fn from_i128(self, v: i128) -> Option<Scalar> {
        Some(match self {
            ScalarType::I8 => Scalar::I8(i8::try_from(v).ok()?),
            ScalarType::U8 => Scalar::U8(u8::try_from(v).ok()?),
            ScalarType::I16 => Scalar::I16(i16::try_from(v).ok()?),
            ScalarType::U16 => Scalar::U16(u16::try_from(v).ok()?),
            ScalarType::I32 => Scalar::I32(i32::try_from(v).ok()?),
            ScalarType::U32 => Scalar::U32(u32::try_from(v).ok()?),
            ScalarType::I64 => Scalar::I64(i64::try_from(v).ok()?),
            ScalarType::U64 => Scalar::U64(u64::try_from(v).ok()?),
            ScalarType::F32 => Scalar::F32(v as f32),
            ScalarType::F64 => Scalar::F64(v as f64),
        })
    }

    /// Parses one value of this type; the error is a sentence saying what is wrong.
    pub fn parse_value(self, text: &str) -> std::result::Result<Scalar, String> {
        let t = text.trim();
        if t.is_empty() {
            return Err(format!("missing {} value", self.name()));
        }
        match self {
            ScalarType::F32 => {
                let v: f32 = t
                    .parse()
                    .map_err(|_| format!("`{t}` is not a number (f32)"))?;
                check_float_range(t, v.is_infinite(), v == 0.0, "f32")?;
                Ok(Scalar::F32(v))
            }
            ScalarType::F64 => {
                let v: f64 = t
                    .parse()
                    .map_err(|_| format!("`{t}` is not a number (f64)"))?;
                check_float_range(t, v.is_infinite(), v == 0.0, "f64")?;
                Ok(Scalar::F64(v))
            }
            _ => {
                let v = parse_int(t).ok_or_else(|| format!("`{t}` is not an integer"))?;
                self.from_i128(v).ok_or_else(|| {
                    let (lo, hi) = self.int_range().unwrap_or((0, 0));
                    format!("{t} is out of range for {} ({lo}..={hi})", self.name())
                })
            }
        }
    }
}

impl fmt::Display for ScalarType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A float literal that overflows to infinity or underflows to zero is out of range, the
/// same way on both sides (a subnormal result is kept: it is not zero).
fn check_float_range(
    t: &str,
    infinite: bool,
    zero: bool,
    ty: &str,
) -> std::result::Result<(), String> {
    let lower = t.to_ascii_lowercase();
    let mantissa = lower.split('e').next().unwrap_or("");
    let nonzero_literal = mantissa.bytes().any(|b| (b'1'..=b'9').contains(&b));
    if infinite && !lower.contains("inf") {
        return Err(format!("`{t}` is out of range for {ty} (too large)"));
    }
    if zero && nonzero_literal {
        return Err(format!(
            "`{t}` is out of range for {ty} (too small: it would be 0)"
        ));
    }
    Ok(())
}

/// Decimal, or `0x`/`0o`/`0b` prefixed, with an optional sign; `None` if malformed or
/// beyond `i128`.
fn parse_int(t: &str) -> Option<i128> {
    let (neg, body) = match t.as_bytes().first()? {
        b'-' => (true, &t[1..]),
        b'+' => (false, &t[1..]),
        _ => (false, t),
    };
    let lower = body.to_ascii_lowercase();
    let (radix, digits) = if let Some(d) = lower.strip_prefix("0x") {
        (16, d)
    } else if let Some(d) = lower.strip_prefix("0o") {
        (8, d)
    } else if let Some(d) = lower.strip_prefix("0b") {
        (2, d)
    } else {
        (10, lower.as_str())
    };
    // from_str_radix accepts a sign of its own; the sign was handled above.
    if digits.is_empty() || digits.starts_with(['+', '-']) {
        return None;
    }
    let magnitude = i128::from_str_radix(digits, radix).ok()?;
    Some(if neg { -magnitude } else { magnitude })
}

/// The return types `--ret` accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RetType {
    /// No return value.
    Void,
    /// `int32_t`
    I32,
    /// `int64_t`
    I64,
    /// `uint32_t`
    U32,
    /// `uint64_t`
    U64,
    /// `float`
    F32,
    /// `double`
    F64,
}

impl RetType {
    /// Parses a `--ret` value (`void`, `i32`, `i64`, `u32`, `u64`, `f32`, `f64`).
    pub fn from_name(name: &str) -> Option<RetType> {
        Some(match name {
            "void" => RetType::Void,
            "i32" => RetType::I32,
            "i64" => RetType::I64,
            "u32" => RetType::U32,
            "u64" => RetType::U64,
            "f32" => RetType::F32,
            "f64" => RetType::F64,
            _ => return None,
        })
    }

    /// Parses a `--ret` value with a [`Error::BadArgument`] naming the choices.
    pub fn parse(name: &str) -> Result<RetType> {
        RetType::from_name(name).ok_or_else(|| Error::BadArgument {
            what: format!("--ret `{name}`"),
            reason: "expected one of void i32 i64 u32 u64 f32 f64".into(),
        })
    }

    /// The name `--ret` uses.
    pub fn name(self) -> &'static str {
        match self.scalar_type() {
            None => "void",
            Some(t) => t.name(),
        }
    }

    /// The returned value's type (`None` for `void`).
    pub fn scalar_type(self) -> Option<ScalarType> {
        match self {
            RetType::Void => None,
            RetType::I32 => Some(ScalarType::I32),
            RetType::I64 => Some(ScalarType::I64),
            RetType::U32 => Some(ScalarType::U32),
            RetType::U64 => Some(ScalarType::U64),
            RetType::F32 => Some(ScalarType::F32),
            RetType::F64 => Some(ScalarType::F64),
        }
    }
}

impl fmt::Display for RetType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One typed value.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Scalar {
    /// `int8_t`
    I8(i8),
    /// `uint8_t`
    U8(u8),
    /// `int16_t`
    I16(i16),
    /// `uint16_t`
    U16(u16),
    /// `int32_t`
    I32(i32),
    /// `uint32_t`
    U32(u32),
    /// `int64_t`
    I64(i64),
    /// `uint64_t`
    U64(u64),
    /// `float`
    F32(f32),
    /// `double`
    F64(f64),
}

impl Scalar {
    /// The value's type.
    pub fn ty(self) -> ScalarType {
        match self {
            Scalar::I8(_) => ScalarType::I8,
            Scalar::U8(_) => ScalarType::U8,
            Scalar::I16(_) => ScalarType::I16,
            Scalar::U16(_) => ScalarType::U16,
            Scalar::I32(_) => ScalarType::I32,
            Scalar::U32(_) => ScalarType::U32,
            Scalar::I64(_) => ScalarType::I64,
            Scalar::U64(_) => ScalarType::U64,
            Scalar::F32(_) => ScalarType::F32,
            Scalar::F64(_) => ScalarType::F64,
        }
    }

    /// The value as `f64` (exact for everything but 64-bit integers beyond 2^53).
    pub fn as_f64(self) -> f64 {
        match self {
            Scalar::I8(v) => v.into(),
            Scalar::U8(v) => v.into(),
            Scalar::I16(v) => v.into(),
            Scalar::U16(v) => v.into(),
            Scalar::I32(v) => v.into(),
            Scalar::U32(v) => v.into(),
            Scalar::I64(v) => v as f64,
            Scalar::U64(v) => v as f64,
            Scalar::F32(v) => v.into(),
            Scalar::F64(v) => v,
        }
    }

    /// The value as `i128`: exact for integers; floats are truncated toward zero
    /// (saturating, NaN gives 0).
    pub fn as_i128(self) -> i128 {
        match self {
            Scalar::I8(v) => v.into(),
            Scalar::U8(v) => v.into(),
            Scalar::I16(v) => v.into(),
            Scalar::U16(v) => v.into(),
            Scalar::I32(v) => v.into(),
            Scalar::U32(v) => v.into(),
            Scalar::I64(v) => v.into(),
            Scalar::U64(v) => v.into(),
            Scalar::F32(v) => v as i128,
            Scalar::F64(v) => v as i128,
        }
    }

    /// The value's bytes in native byte order (the first `ty().size()` bytes are used).
    pub fn to_ne_bytes(self) -> [u8; 8] {
        let mut out = [0u8; 8];
        let n = self.ty().size();
        let bytes: [u8; 8] = match self {
            Scalar::I8(v) => pad(&v.to_ne_bytes()),
            Scalar::U8(v) => pad(&v.to_ne_bytes()),
            Scalar::I16(v) => pad(&v.to_ne_bytes()),
            Scalar::U16(v) => pad(&v.to_ne_bytes()),
            Scalar::I32(v) => pad(&v.to_ne_bytes()),
            Scalar::U32(v) => pad(&v.to_ne_bytes()),
            Scalar::I64(v) => v.to_ne_bytes(),
            Scalar::U64(v) => v.to_ne_bytes(),
            Scalar::F32(v) => pad(&v.to_ne_bytes()),
            Scalar::F64(v) => v.to_ne_bytes(),
        };
        out[..n].copy_from_slice(&bytes[..n]);
        out
    }

    /// Reads a value of type `ty` from the first `ty.size()` bytes of `bytes` (native
    /// order); `None` if `bytes` is too short.
    pub fn from_ne_bytes(ty: ScalarType, bytes: &[u8]) -> Option<Scalar> {
        let b = bytes.get(..ty.size())?;
        let mut w = [0u8; 8];
        w[..b.len()].copy_from_slice(b);
        let a1 = [w[0]];
        let a2 = [w[0], w[1]];
        let a4 = [w[0], w[1], w[2], w[3]];
        Some(match ty {
            ScalarType::I8 => Scalar::I8(i8::from_ne_bytes(a1)),
            ScalarType::U8 => Scalar::U8(u8::from_ne_bytes(a1)),
            ScalarType::I16 => Scalar::I16(i16::from_ne_bytes(a2)),
            ScalarType::U16 => Scalar::U16(u16::from_ne_bytes(a2)),
            ScalarType::I32 => Scalar::I32(i32::from_ne_bytes(a4)),
            ScalarType::U32 => Scalar::U32(u32::from_ne_bytes(a4)),
            ScalarType::I64 => Scalar::I64(i64::from_ne_bytes(w)),
            ScalarType::U64 => Scalar::U64(u64::from_ne_bytes(w)),
            ScalarType::F32 => Scalar::F32(f32::from_ne_bytes(a4)),
            ScalarType::F64 => Scalar::F64(f64::from_ne_bytes(w)),
        })
    }
}

fn pad(b: &[u8]) -> [u8; 8] {
    let mut out = [0u8; 8];
    out[..b.len()].copy_from_slice(b);
    out
}

impl fmt::Display for Scalar {
    /// Integers in decimal; floats as Rust's shortest round-trip decimal (`NaN`, `inf`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scalar::I8(v) => write!(f, "{v}"),
            Scalar::U8(v) => write!(f, "{v}"),
            Scalar::I16(v) => write!(f, "{v}"),
            Scalar::U16(v) => write!(f, "{v}"),
            Scalar::I32(v) => write!(f, "{v}"),
            Scalar::U32(v) => write!(f, "{v}"),
            Scalar::I64(v) => write!(f, "{v}"),
            Scalar::U64(v) => write!(f, "{v}"),
            Scalar::F32(v) => write!(f, "{v}"),
            Scalar::F64(v) => write!(f, "{v}"),
        }
    }
}

/// How a buffer argument starts out.
#[derive(Clone, Debug, PartialEq)]
pub enum BufferInit {
    /// `TYPE[N]`: N zeros.
    Zeros(usize),
    /// `TYPE[N]=v0,v1,...`: exactly these values.
    Values(Vec<Scalar>),
    /// `TYPE[N]=iota`: 0, 1, ..., N-1.
    Iota(usize),
    /// `TYPE[N]=fill:V`: N copies of V.
    Fill(usize, Scalar),
}

impl BufferInit {
    /// The number of elements.
    pub fn len(&self) -> usize {
        match self {
            BufferInit::Zeros(n) | BufferInit::Iota(n) | BufferInit::Fill(n, _) => *n,
            BufferInit::Values(v) => v.len(),
        }
    }

    /// Whether the buffer has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One parsed `--arg`.
#[derive(Clone, Debug, PartialEq)]
pub enum ArgSpec {
    /// Passed by value.
    Scalar(Scalar),
    /// Passed as a pointer to 64-byte-aligned memory holding the elements.
    Buffer {
        /// Element type.
        ty: ScalarType,
        /// Initial contents.
        init: BufferInit,
    },
}

impl ArgSpec {
    /// Parses one `--arg` value; errors are [`Error::BadArgument`] saying exactly what is
    /// wrong (unknown type, value out of range, wrong number of values, N too large, ...).
    pub fn parse(spec: &str) -> Result<ArgSpec> {
        parse_spec(spec).map_err(|reason| Error::BadArgument {
            what: format!("--arg `{spec}`"),
            reason,
        })
    }

    /// How the argument is passed.
    pub fn kind(&self) -> ArgKind {
        match self {
            ArgSpec::Scalar(s) => ArgKind::Scalar(s.ty()),
            ArgSpec::Buffer { .. } => ArgKind::Pointer,
        }
    }

    /// The bytes a buffer argument holds (0 for a scalar).
    pub fn buffer_bytes(&self) -> u64 {
        match self {
            ArgSpec::Scalar(_) => 0,
            ArgSpec::Buffer { ty, init } => (init.len() as u64).saturating_mul(ty.size() as u64),
        }
    }
}

/// Checks that `args`' buffers hold at most [`MAX_TOTAL_BUFFER_BYTES`] together.
pub fn check_buffer_total(args: &[ArgSpec]) -> Result<()> {
    let total = args
        .iter()
        .map(ArgSpec::buffer_bytes)
        .fold(0u64, u64::saturating_add);
    if total > MAX_TOTAL_BUFFER_BYTES {
        return Err(Error::BadArgument {
            what: "--arg buffers".to_string(),
            reason: format!(
                "they hold {total} bytes in total; at most {MAX_TOTAL_BUFFER_BYTES} (2 GiB) are \
                 allowed"
            ),
        });
    }
    Ok(())
}

fn parse_type(name: &str) -> std::result::Result<ScalarType, String> {
    let name = name.trim();
    if name.is_empty() {
        return Err(format!("missing type (expected one of {TYPE_NAMES})"));
    }
    ScalarType::from_name(name)
        .ok_or_else(|| format!("unknown type `{name}` (expected one of {TYPE_NAMES})"))
}

fn parse_spec(spec: &str) -> std::result::Result<ArgSpec, String> {
    let bracket = spec.find('[');
    let colon = spec.find(':');
    match (bracket, colon) {
        (Some(b), None) => parse_buffer(&spec[..b], &spec[b + 1..]),
        (Some(b), Some(c)) if b < c => parse_buffer(&spec[..b], &spec[b + 1..]),
        (_, Some(c)) => {
            let ty = parse_type(&spec[..c])?;
            Ok(ArgSpec::Scalar(ty.parse_value(&spec[c + 1..])?))
        }
        (None, None) => Err(format!(
            "expected TYPE:VALUE or TYPE[N][=...] (e.g. i32:7, f32[16]=iota); TYPE is one of {TYPE_NAMES}"
        )),
    }
}

fn parse_buffer(ty: &str, rest: &str) -> std::result::Result<ArgSpec, String> {
    let ty = parse_type(ty)?;
    let close = rest
        .find(']')
        .ok_or_else(|| "missing `]` after the element count".to_string())?;
    let count_text = rest[..close].trim();
    let n = parse_count(count_text)?;
    let after = &rest[close + 1..];
    let init = if after.is_empty() {
        BufferInit::Zeros(n)
    } else if let Some(body) = after.strip_prefix('=') {
        let body = body.trim();
        if body == "iota" {
            if let Some((_, hi)) = ty.int_range() {
                if n > 0 && (n - 1) as i128 > hi {
                    return Err(format!(
                        "iota over {n} elements reaches {}, out of range for {ty} (max {hi})",
                        n - 1
                    ));
                }
            }
            BufferInit::Iota(n)
        } else if let Some(v) = body.strip_prefix("fill:") {
            BufferInit::Fill(n, ty.parse_value(v)?)
        } else {
            let values: Vec<&str> = if body.is_empty() {
                Vec::new()
            } else {
                body.split(',').collect()
            };
            if values.len() != n {
                return Err(format!(
                    "{ty}[{n}] needs exactly {n} value{}, got {}",
                    if n == 1 { "" } else { "s" },
                    values.len()
                ));
            }
            let parsed = values
                .iter()
                .enumerate()
                .map(|(i, v)| ty.parse_value(v).map_err(|e| format!("value {i}: {e}")))
                .collect::<std::result::Result<Vec<_>, _>>()?;
            BufferInit::Values(parsed)
        }
    } else {
        return Err(format!(
            "unexpected `{after}` after `]` (expected nothing, `=v0,v1,...`, `=iota` or `=fill:V`)"
        ));
    };
    Ok(ArgSpec::Buffer { ty, init })
}

fn parse_count(t: &str) -> std::result::Result<usize, String> {
    if t.is_empty() {
        return Err("missing element count between `[` and `]`".into());
    }
    if !t.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("element count `{t}` is not a non-negative integer"));
    }
    match t.parse::<usize>() {
        Ok(n) if n <= MAX_BUFFER_ELEMENTS => Ok(n),
        _ => Err(format!(
            "element count {t} is too large (at most {MAX_BUFFER_ELEMENTS})"
        )),
    }
}

/// What an argument looked like after the call: scalars as given, buffers as the kernel
/// left them.
#[derive(Clone, Debug, PartialEq)]
pub enum ArgOutcome {
    /// A by-value argument, as it was passed.
    Scalar(Scalar),
    /// A buffer's elements after the call, typed and packed as the kernel saw them (one
    /// byte per `u8`; see [`Buffer::iter`] for the values).
    Buffer(Buffer),
}

/// Typed elements in 64-byte-aligned heap memory, freed on drop.
pub struct Buffer {
    ptr: NonNull<u8>,
    layout: Layout,
    ty: ScalarType,
    len: usize,
}

impl Buffer {
    /// A zeroed buffer of `len` elements of `ty`. At least one cache line is always
    /// allocated, so even an empty buffer has a valid, aligned address.
    pub fn zeroed(ty: ScalarType, len: usize) -> Result<Buffer> {
        let too_big = || Error::Memory(format!("a {ty}[{len}] buffer is too large"));
        let bytes = len.checked_mul(ty.size()).ok_or_else(too_big)?;
        let size = bytes
            .checked_next_multiple_of(BUFFER_ALIGN)
            .ok_or_else(too_big)?
            .max(BUFFER_ALIGN);
        let layout = Layout::from_size_align(size, BUFFER_ALIGN).map_err(|_| too_big())?;
        // SAFETY: `layout` has a non-zero size (at least BUFFER_ALIGN bytes).
        let raw = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).ok_or_else(|| {
            Error::Memory(format!("cannot allocate {size} bytes for {ty}[{len}]"))
        })?;
        Ok(Buffer {
            ptr,
            layout,
            ty,
            len,
        })
    }

    /// A buffer laid out as `init` says.
    pub fn new(ty: ScalarType, init: &BufferInit) -> Result<Buffer> {
        let mut buf = Buffer::zeroed(ty, init.len())?;
        let mismatch = |v: &Scalar| Error::BadArgument {
            what: format!("{ty} buffer"),
            reason: format!("value {v} has type {}", v.ty()),
        };
        match init {
            BufferInit::Zeros(_) => {}
            BufferInit::Values(values) => {
                for (i, v) in values.iter().enumerate() {
                    if v.ty() != ty {
                        return Err(mismatch(v));
                    }
                    buf.set(i, *v);
                }
            }
            BufferInit::Iota(n) => {
                for i in 0..*n {
                    let v = ty.from_i128(i as i128).ok_or_else(|| Error::BadArgument {
                        what: format!("{ty}[{n}]=iota"),
                        reason: format!("{i} is out of range for {ty}"),
                    })?;
                    buf.set(i, v);
                }
            }
            BufferInit::Fill(n, v) => {
                if v.ty() != ty {
                    return Err(mismatch(v));
                }
                for i in 0..*n {
                    buf.set(i, *v);
                }
            }
        }
        Ok(buf)
    }

    /// Element type.
    pub fn ty(&self) -> ScalarType {
        self.ty
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The address of the first element (64-byte aligned).
    pub fn as_ptr(&self) -> *const u8 {
        self.ptr.as_ptr()
    }

    /// The mutable address of the first element (64-byte aligned), for passing to code.
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// The elements' bytes.
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: the allocation holds at least `len * size` initialised (zeroed at
        // allocation) bytes and lives as long as `self`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len * self.ty.size()) }
    }

    /// The elements' bytes, writable.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `bytes`, and `&mut self` makes this the only reference.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len * self.ty.size()) }
    }

    /// Element `index`, `None` past the end.
    pub fn get(&self, index: usize) -> Option<Scalar> {
        let size = self.ty.size();
        let start = index.checked_mul(size)?;
        Scalar::from_ne_bytes(self.ty, self.bytes().get(start..start + size)?)
    }

    /// Stores element `index`.
    ///
    /// # Panics
    /// If `index >= len()` or `value` is not of the buffer's type (like slice indexing,
    /// these are caller bugs).
    pub fn set(&mut self, index: usize, value: Scalar) {
        assert_eq!(value.ty(), self.ty, "Buffer::set: element type mismatch");
        let size = self.ty.size();
        let bytes = value.to_ne_bytes();
        self.bytes_mut()[index * size..(index + 1) * size].copy_from_slice(&bytes[..size]);
    }

    /// All elements, in order (16 bytes each: [`Buffer::iter`] reads them one at a time).
    pub fn values(&self) -> Vec<Scalar> {
        self.iter().collect()
    }

    /// The elements, in order, read as they are needed.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = Scalar> + '_ {
        let ty = self.ty;
        self.bytes()
            .chunks_exact(ty.size())
            .map(move |c| Scalar::from_ne_bytes(ty, c).unwrap_or_else(|| ty.zero()))
    }

    /// A buffer of `ty` holding `values` (each must be of `ty`).
    pub fn from_values(ty: ScalarType, values: &[Scalar]) -> Result<Buffer> {
        Buffer::new(ty, &BufferInit::Values(values.to_vec()))
    }

    /// A buffer of `ty` from little-endian element bytes (an emulated target's memory);
    /// a trailing partial element is ignored.
    pub fn from_le_bytes(ty: ScalarType, bytes: &[u8]) -> Result<Buffer> {
        let size = ty.size();
        let mut buf = Buffer::zeroed(ty, bytes.len() / size)?;
        let dst = buf.bytes_mut();
        let src = bytes.get(..dst.len()).unwrap_or_default();
        dst.copy_from_slice(src);
        if cfg!(target_endian = "big") {
            for element in dst.chunks_exact_mut(size) {
                element.reverse();
            }
        }
        Ok(buf)
    }

    /// The element bytes in little-endian order (as an emulated target stores them).
    pub fn to_le_bytes(&self) -> std::borrow::Cow<'_, [u8]> {
        if cfg!(target_endian = "little") {
            return std::borrow::Cow::Borrowed(self.bytes());
        }
        let mut v = self.bytes().to_vec();
        for element in v.chunks_exact_mut(self.ty.size()) {
            element.reverse();
        }
        std::borrow::Cow::Owned(v)
    }
}

impl Clone for Buffer {
    /// A copy in fresh aligned memory.
    ///
    /// # Panics
    /// Aborts, like `Vec::clone`, if the memory cannot be allocated.
    fn clone(&self) -> Buffer {
        let mut copy = Buffer::zeroed(self.ty, self.len).unwrap_or_else(|_| {
            std::alloc::handle_alloc_error(self.layout);
        });
        copy.bytes_mut().copy_from_slice(self.bytes());
        copy
    }
}

impl PartialEq for Buffer {
    /// Element by element, as `Vec<Scalar>` compares (so a NaN element is unequal).
    fn eq(&self, other: &Buffer) -> bool {
        self.ty == other.ty && self.len == other.len && self.iter().eq(other.iter())
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from `alloc_zeroed(self.layout)` and is freed only here.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

impl fmt::Debug for Buffer {
    /// The type, length and the first 16 values.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let head: Vec<Scalar> = self.iter().take(16).collect();
        f.debug_struct("Buffer")
            .field("ty", &self.ty)
            .field("len", &self.len)
            .field("head", &head)
            .finish()
    }
}

// SAFETY: a Buffer exclusively owns its allocation (like a Vec<u8>); nothing about it is
// tied to a thread.
unsafe impl Send for Buffer {}
// SAFETY: shared access only reads the bytes (`&self` methods never write).
unsafe impl Sync for Buffer {}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn err(spec: &str) -> String {
        match ArgSpec::parse(spec) {
            Ok(a) => panic!("`{spec}` parsed as {a:?}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn scalars() {
        assert_eq!(
            ArgSpec::parse("i32:1024").unwrap(),
            ArgSpec::Scalar(Scalar::I32(1024))
        );
        assert_eq!(
            ArgSpec::parse("f32:2.5").unwrap(),
            ArgSpec::Scalar(Scalar::F32(2.5))
        );
        assert_eq!(
            ArgSpec::parse("u8:255").unwrap(),
            ArgSpec::Scalar(Scalar::U8(255))
        );
        assert_eq!(
            ArgSpec::parse("i8:-128").unwrap(),
            ArgSpec::Scalar(Scalar::I8(-128))
        );
        assert_eq!(
            ArgSpec::parse("u64:0xff").unwrap(),
            ArgSpec::Scalar(Scalar::U64(255))
        );
        assert_eq!(
            ArgSpec::parse("u64:18446744073709551615").unwrap(),
            ArgSpec::Scalar(Scalar::U64(u64::MAX))
        );
        assert_eq!(
            ArgSpec::parse("f64:-inf").unwrap(),
            ArgSpec::Scalar(Scalar::F64(f64::NEG_INFINITY))
        );
        assert_eq!(
            ArgSpec::parse("f32:inf").unwrap(),
            ArgSpec::Scalar(Scalar::F32(f32::INFINITY))
        );
        match ArgSpec::parse("f32:nan").unwrap() {
            ArgSpec::Scalar(Scalar::F32(v)) => assert!(v.is_nan()),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            ArgSpec::parse("f64:3").unwrap(),
            ArgSpec::Scalar(Scalar::F64(3.0))
        );
    }

    #[test]
    fn buffers() {
        assert_eq!(
            ArgSpec::parse("f32[4]").unwrap(),
            ArgSpec::Buffer {
                ty: ScalarType::F32,
                init: BufferInit::Zeros(4)
            }
        );
        assert_eq!(
            ArgSpec::parse("i32[3]=1,-2,3").unwrap(),
            ArgSpec::Buffer {
                ty: ScalarType::I32,
                init: BufferInit::Values(vec![Scalar::I32(1), Scalar::I32(-2), Scalar::I32(3)])
            }
        );
        assert_eq!(
            ArgSpec::parse("u8[256]=iota").unwrap(),
            ArgSpec::Buffer {
                ty: ScalarType::U8,
                init: BufferInit::Iota(256)
            }
        );
        assert_eq!(
            ArgSpec::parse("f64[2]=fill:-1.5").unwrap(),
            ArgSpec::Buffer {
                ty: ScalarType::F64,
                init: BufferInit::Fill(2, Scalar::F64(-1.5))
            }
        );
        assert_eq!(
            ArgSpec::parse("f32[0]").unwrap(),
            ArgSpec::Buffer {
                ty: ScalarType::F32,
                init: BufferInit::Zeros(0)
            }
        );
        assert_eq!(
            ArgSpec::parse("f32[0]=").unwrap(),
            ArgSpec::Buffer {
                ty: ScalarType::F32,
                init: BufferInit::Values(vec![])
            }
        );
        assert!(matches!(
            ArgSpec::parse("f32[1]=fill:nan").unwrap(),
            ArgSpec::Buffer { .. }
        ));
    }

    #[test]
    fn precise_errors() {
        assert!(err("u8:300").contains("300 is out of range for u8 (0..=255)"));
        assert!(err("i8:-129").contains("out of range for i8"));
        assert!(err("u32:-1").contains("out of range for u32"));
        assert!(err("f32:1e40").contains("out of range for f32"));
        assert!(err("i31:4").contains("unknown type `i31`"));
        assert!(err("i32[3]=1,2").contains("needs exactly 3 values, got 2"));
        assert!(err("i32[1]=1,2").contains("needs exactly 1 value, got 2"));
        assert!(err("i32[2]=").contains("got 0"));
        assert!(err("f32[999999999999]").contains("too large"));
        assert!(err("f32[268435457]").contains("too large"));
        assert!(err("f32[-1]").contains("not a non-negative integer"));
        assert!(err("f32[]").contains("missing element count"));
        assert!(err("f32[4").contains("missing `]`"));
        assert!(err("f32[4]x").contains("unexpected `x`"));
        assert!(err("i8[200]=iota").contains("out of range for i8"));
        assert!(err("i32:abc").contains("`abc` is not an integer"));
        assert!(err("i32:").contains("missing i32 value"));
        assert!(err("f32:x").contains("not a number"));
        assert!(err("i32[2]=1,zz").contains("value 1: `zz` is not an integer"));
        assert!(err("1024").contains("expected TYPE:VALUE"));
        assert!(err(":5").contains("missing type"));
        assert!(err("i32:0x").contains("not an integer"));
        assert!(err("i32:--5").contains("not an integer"));
        assert!(err("i32[2]=fill:1.5").contains("not an integer"));
        assert!(err("u8:300").starts_with("bad --arg `u8:300`"));
    }

    #[test]
    fn floats_out_of_range_on_either_side() {
        for bad in [
            "f32:1e-50",
            "f32:-1e-46",
            "f64:1e-400",
            "f32:1e40",
            "f64:-1e309",
        ] {
            assert!(err(bad).contains("out of range"), "{bad}");
        }
        for good in [
            "f32:1e-40",
            "f32:1e-45",
            "f32:0",
            "f32:-0.0",
            "f32:0e-99",
            "f64:5e-324",
            "f32:inf",
        ] {
            assert!(ArgSpec::parse(good).is_ok(), "{good}");
        }
    }

    #[test]
    fn buffer_totals_are_capped_before_allocation() {
        let big = ArgSpec::parse("f64[268435456]").unwrap();
        assert_eq!(big.buffer_bytes(), MAX_TOTAL_BUFFER_BYTES);
        assert!(check_buffer_total(std::slice::from_ref(&big)).is_ok());
        let e = check_buffer_total(&[big.clone(), big]).unwrap_err();
        assert!(e.to_string().contains("in total"), "{e}");
    }

    #[test]
    fn typed_buffers_compare_clone_and_convert() {
        let b = Buffer::from_values(ScalarType::U8, &[Scalar::U8(1), Scalar::U8(200)]).unwrap();
        assert_eq!(b.bytes(), &[1, 200]);
        assert_eq!(b.clone(), b);
        assert_eq!(b.iter().len(), 2);
        let le = Buffer::from_le_bytes(ScalarType::I16, &[1, 0, 0xff, 0xff, 9]).unwrap();
        assert_eq!(le.values(), vec![Scalar::I16(1), Scalar::I16(-1)]);
        assert_eq!(&*le.to_le_bytes(), &[1, 0, 0xff, 0xff]);
        let nan = Buffer::from_values(ScalarType::F32, &[Scalar::F32(f32::NAN)]).unwrap();
        assert_ne!(
            nan,
            nan.clone(),
            "NaN elements compare unequal, as in Vec<Scalar>"
        );
        assert!(Buffer::from_values(ScalarType::F32, &[Scalar::I32(1)]).is_err());
        assert!(format!("{b:?}").contains("head: [U8(1), U8(200)]"));
    }

    #[test]
    fn ret_types() {
        for n in ["void", "i32", "i64", "u32", "u64", "f32", "f64"] {
            assert_eq!(RetType::parse(n).unwrap().name(), n);
        }
        assert!(RetType::parse("i8")
            .unwrap_err()
            .to_string()
            .contains("void i32"));
    }

    #[test]
    fn aligned_buffers() {
        for n in [0usize, 1, 3, 17, 1000] {
            let mut b = Buffer::new(ScalarType::F32, &BufferInit::Iota(n)).unwrap();
            assert_eq!(b.as_mut_ptr() as usize % BUFFER_ALIGN, 0);
            assert_eq!(b.len(), n);
            let v = b.values();
            assert_eq!(v.len(), n);
            for (i, x) in v.iter().enumerate() {
                assert_eq!(*x, Scalar::F32(i as f32));
            }
        }
        let b = Buffer::new(ScalarType::I16, &BufferInit::Fill(5, Scalar::I16(-7))).unwrap();
        assert_eq!(b.values(), vec![Scalar::I16(-7); 5]);
        assert_eq!(b.get(4), Some(Scalar::I16(-7)));
        assert_eq!(b.get(5), None);
        let b = Buffer::new(ScalarType::U8, &BufferInit::Zeros(3)).unwrap();
        assert_eq!(b.values(), vec![Scalar::U8(0); 3]);
    }

    fn arb_scalar() -> impl Strategy<Value = Scalar> {
        prop_oneof![
            any::<i8>().prop_map(Scalar::I8),
            any::<u8>().prop_map(Scalar::U8),
            any::<i16>().prop_map(Scalar::I16),
            any::<u16>().prop_map(Scalar::U16),
            any::<i32>().prop_map(Scalar::I32),
            any::<u32>().prop_map(Scalar::U32),
            any::<i64>().prop_map(Scalar::I64),
            any::<u64>().prop_map(Scalar::U64),
            any::<f32>().prop_map(Scalar::F32),
            any::<f64>().prop_map(Scalar::F64),
        ]
    }

    fn same(a: Scalar, b: Scalar) -> bool {
        match (a, b) {
            (Scalar::F32(x), Scalar::F32(y)) => {
                x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan())
            }
            (Scalar::F64(x), Scalar::F64(y)) => {
                x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan())
            }
            _ => a == b,
        }
    }

    proptest! {
        #[test]
        fn display_round_trips(s in arb_scalar()) {
            let spec = format!("{}:{}", s.ty(), s);
            match ArgSpec::parse(&spec) {
                Ok(ArgSpec::Scalar(back)) => prop_assert!(same(s, back), "{spec} -> {back:?}"),
                other => prop_assert!(false, "{spec} -> {other:?}"),
            }
        }

        #[test]
        fn value_lists_round_trip(values in prop::collection::vec(any::<i16>(), 0..40)) {
            let text: Vec<String> = values.iter().map(|v| v.to_string()).collect();
            let spec = format!("i16[{}]={}", values.len(), text.join(","));
            let parsed = ArgSpec::parse(&spec).unwrap();
            let ArgSpec::Buffer { ty, init } = parsed else { panic!() };
            let buf = Buffer::new(ty, &init).unwrap();
            let want: Vec<Scalar> = values.iter().map(|v| Scalar::I16(*v)).collect();
            prop_assert_eq!(buf.values(), want);
        }

        #[test]
        fn integers_out_of_range_are_rejected(v in any::<i64>(), t in 0usize..8) {
            let ty = ScalarType::ALL[t];
            let (lo, hi) = ty.int_range().unwrap();
            let r = ArgSpec::parse(&format!("{ty}:{v}"));
            let fits = (lo..=hi).contains(&(v as i128));
            prop_assert_eq!(r.is_ok(), fits);
            if let Ok(ArgSpec::Scalar(s)) = r {
                prop_assert_eq!(s.as_i128(), v as i128);
            }
        }

        #[test]
        fn parser_never_panics(s in "\\PC{0,40}") {
            let _ = ArgSpec::parse(&s);
        }

        #[test]
        fn bytes_round_trip(s in arb_scalar()) {
            let back = Scalar::from_ne_bytes(s.ty(), &s.to_ne_bytes()).unwrap();
            prop_assert!(same(s, back));
        }
    }
}
