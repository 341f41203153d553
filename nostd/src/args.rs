//! Kernel arguments from the corpus's spellings (`i32:13`, `f32[16]=iota`,
//! `f32[8]=fill:0.5`, `u8[4]=1,2,3,4`, `f64[19]`), placed in the registers of the LP64D
//! calling convention.

/// An element or scalar type.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Ty {
    I8,
    U8,
    I16,
    U16,
    I32,
    U32,
    I64,
    U64,
    F32,
    F64,
}

impl Ty {
    pub fn parse(name: &str) -> Option<Ty> {
        Some(match name {
            "i8" => Ty::I8,
            "u8" => Ty::U8,
            "i16" => Ty::I16,
            "u16" => Ty::U16,
            "i32" => Ty::I32,
            "u32" => Ty::U32,
            "i64" => Ty::I64,
            "u64" => Ty::U64,
            "f32" => Ty::F32,
            "f64" => Ty::F64,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Ty::I8 => "i8",
            Ty::U8 => "u8",
            Ty::I16 => "i16",
            Ty::U16 => "u16",
            Ty::I32 => "i32",
            Ty::U32 => "u32",
            Ty::I64 => "i64",
            Ty::U64 => "u64",
            Ty::F32 => "f32",
            Ty::F64 => "f64",
        }
    }

    pub fn size(self) -> usize {
        match self {
            Ty::I8 | Ty::U8 => 1,
            Ty::I16 | Ty::U16 => 2,
            Ty::I32 | Ty::U32 | Ty::F32 => 4,
            Ty::I64 | Ty::U64 | Ty::F64 => 8,
        }
    }

    fn is_float(self) -> bool {
        matches!(self, Ty::F32 | Ty::F64)
    }

    /// The value's bit pattern (low `size` bytes), or `None` if it is malformed or out of
    /// range for the type.
    pub fn parse_value(self, text: &str) -> Option<u64> {
        match self {
            Ty::F32 => text.parse::<f32>().ok().map(|v| u64::from(v.to_bits())),
            Ty::F64 => text.parse::<f64>().ok().map(f64::to_bits),
            _ => {
                let (neg, digits) = match text.strip_prefix('-') {
                    Some(rest) => (true, rest),
                    None => (false, text),
                };
                let (radix, digits) = match digits.strip_prefix("0x") {
                    Some(hex) => (16, hex),
                    None => (10, digits),
                };
                let magnitude = i128::from_str_radix(digits, radix).ok()?;
                let v = if neg { -magnitude } else { magnitude };
                let (lo, hi): (i128, i128) = match self {
                    Ty::I8 => (i8::MIN.into(), i8::MAX.into()),
                    Ty::U8 => (0, u8::MAX.into()),
                    Ty::I16 => (i16::MIN.into(), i16::MAX.into()),
                    Ty::U16 => (0, u16::MAX.into()),
                    Ty::I32 => (i32::MIN.into(), i32::MAX.into()),
                    Ty::U32 => (0, u32::MAX.into()),
                    Ty::I64 => (i64::MIN.into(), i64::MAX.into()),
                    _ => (0, u64::MAX.into()),
                };
                (lo..=hi)
                    .contains(&v)
                    .then_some(v as u64 & mask(self.size()))
            }
        }
    }

    /// The 64-bit register image of a scalar: LP64D sign-extends signed types *and* u32
    /// (32-bit values are kept sign-extended in 64-bit registers), zero-extends u8/u16.
    /// An f32 sits in the low 32 bits of its floating-point register.
    fn register(self, bits: u64) -> u64 {
        match self {
            Ty::I8 => bits as u8 as i8 as i64 as u64,
            Ty::I16 => bits as u16 as i16 as i64 as u64,
            Ty::I32 | Ty::U32 => bits as u32 as i32 as i64 as u64,
            _ => bits,
        }
    }
}

fn mask(bytes: usize) -> u64 {
    if bytes >= 8 {
        u64::MAX
    } else {
        (1u64 << (8 * bytes)) - 1
    }
}

/// One argument, after parsing.
#[derive(Clone, Copy)]
pub enum Arg {
    Scalar { ty: Ty, bits: u64 },
    Buffer { ty: Ty, len: usize, ptr: *mut u8 },
}

impl Arg {
    /// Element `i` of a buffer, as bits.
    pub fn element(&self, i: usize) -> u64 {
        match *self {
            Arg::Buffer { ty, len, ptr } if i < len => {
                let mut bytes = [0u8; 8];
                // SAFETY: `ptr` holds `len` elements of `ty` (see `Arena::take`).
                let src = unsafe { core::slice::from_raw_parts(ptr.add(i * ty.size()), ty.size()) };
                bytes[..ty.size()].copy_from_slice(src);
                u64::from_le_bytes(bytes)
            }
            _ => 0,
        }
    }
}

/// Memory for the buffers of one call: a bump allocator over one mapping.
pub struct Arena {
    base: *mut u8,
    size: usize,
    used: usize,
}

impl Arena {
    pub fn new(base: *mut u8, size: usize) -> Arena {
        Arena {
            base,
            size,
            used: 0,
        }
    }

    /// `bytes` zeroed bytes, 64-byte aligned (the mapping is fresh, so already zero).
    fn take(&mut self, bytes: usize) -> Option<*mut u8> {
        let start = self.used.checked_add(63)? & !63;
        let end = start.checked_add(bytes)?;
        if end > self.size {
            return None;
        }
        self.used = end;
        // SAFETY: `start..end` lies inside the arena's mapping.
        Some(unsafe { self.base.add(start) })
    }
}

/// Parses one spelling, allocating and filling its buffer in `arena`.
pub fn parse(spec: &str, arena: &mut Arena) -> Option<Arg> {
    if let Some((head, rest)) = spec.split_once('[') {
        let ty = Ty::parse(head)?;
        let (len, init) = rest.split_once(']')?;
        let len: usize = len.parse().ok()?;
        let ptr = arena.take(len.checked_mul(ty.size())?)?;
        let put = |i: usize, bits: u64| {
            let bytes = bits.to_le_bytes();
            // SAFETY: `i < len`, and the buffer holds `len` elements.
            unsafe {
                core::ptr::copy_nonoverlapping(bytes.as_ptr(), ptr.add(i * ty.size()), ty.size())
            };
        };
        match init.strip_prefix('=') {
            None if init.is_empty() => {} // zeros
            None => return None,
            Some("iota") => {
                for i in 0..len {
                    let mut text = Digits::new();
                    put(i, ty.parse_value(text.format(i))?);
                }
            }
            Some(fill) if fill.starts_with("fill:") => {
                let bits = ty.parse_value(&fill[5..])?;
                (0..len).for_each(|i| put(i, bits));
            }
            Some(list) => {
                let mut n = 0;
                for (i, item) in list.split(',').enumerate() {
                    if i >= len {
                        return None;
                    }
                    put(i, ty.parse_value(item)?);
                    n += 1;
                }
                if n != len {
                    return None;
                }
            }
        }
        Some(Arg::Buffer { ty, len, ptr })
    } else {
        let (name, value) = spec.split_once(':')?;
        let ty = Ty::parse(name)?;
        Some(Arg::Scalar {
            ty,
            bits: ty.parse_value(value)?,
        })
    }
}

/// A number as decimal text (for `iota`, which goes through the same parser as literals).
struct Digits {
    buf: [u8; 20],
}

impl Digits {
    fn new() -> Digits {
        Digits { buf: [0; 20] }
    }

    fn format(&mut self, mut v: usize) -> &str {
        let mut i = self.buf.len();
        loop {
            i -= 1;
            self.buf[i] = b'0' + (v % 10) as u8;
            v /= 10;
            if v == 0 {
                break;
            }
        }
        core::str::from_utf8(&self.buf[i..]).unwrap_or("0")
    }
}

/// The argument registers of one call: `$a0..$a7` and `$fa0..$fa7`.
#[derive(Default)]
pub struct Registers {
    pub int: [u64; 8],
    pub float: [u64; 8],
    ints: usize,
    floats: usize,
}

impl Registers {
    /// Assigns the arguments in order, as LP64D does for a non-variadic call: integers and
    /// pointers to the next `$aN`, floating-point values to the next `$faN`. `None` when
    /// one would go on the stack (more than eight of a kind), which this program does not do.
    pub fn assign(args: &[Arg]) -> Option<Registers> {
        let mut regs = Registers::default();
        for arg in args {
            match *arg {
                Arg::Scalar { ty, bits } if ty.is_float() => {
                    *regs.float.get_mut(regs.floats)? = bits;
                    regs.floats += 1;
                }
                Arg::Scalar { ty, bits } => {
                    *regs.int.get_mut(regs.ints)? = ty.register(bits);
                    regs.ints += 1;
                }
                Arg::Buffer { ptr, .. } => {
                    *regs.int.get_mut(regs.ints)? = ptr as u64;
                    regs.ints += 1;
                }
            }
        }
        Some(regs)
    }
}
