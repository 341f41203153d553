//! The call shim: a few lines of C, generated from the `--arg`/`--ret` types, that the
//! runner calls instead of the entry (the runner has no libffi).
//!
//! ```c
//! extern float elfjit_entry(void *, int, float) __asm__("saxpy");
//! void __elfjit_shim(const unsigned char *a, void *r) {
//!     void *a0; __builtin_memcpy(&a0, a + 0, sizeof a0);
//!     ...
//!     float v = elfjit_entry(a0, a1, a2);
//!     __builtin_memcpy(r, &v, sizeof v);
//! }
//! ```
//!
//! The argument block holds one 8-byte little-endian slot per argument: a scalar's value
//! in its first bytes, or a pointer (a buffer's target address). The shim is compiled by
//! the same clang, with the same flags, for the same target as the kernel, so the call
//! follows the target's C ABI exactly. The asm label lets the entry have any symbol name,
//! C identifier or not.

use crate::args::{RetType, Scalar, ScalarType};
use crate::error::{Error, Result};
use crate::ffi::ArgKind;
use std::fmt::Write;

/// The shim's symbol.
pub const SHIM_SYMBOL: &str = "__elfjit_shim";

/// Bytes per argument in the block.
pub const SLOT: usize = 8;

/// The C type of a scalar.
pub fn c_type(ty: ScalarType) -> &'static str {
    match ty {
        ScalarType::I8 => "signed char",
        ScalarType::U8 => "unsigned char",
        ScalarType::I16 => "short",
        ScalarType::U16 => "unsigned short",
        ScalarType::I32 => "int",
        ScalarType::U32 => "unsigned int",
        ScalarType::I64 => "long long",
        ScalarType::U64 => "unsigned long long",
        ScalarType::F32 => "float",
        ScalarType::F64 => "double",
    }
}

fn arg_type(kind: ArgKind) -> &'static str {
    match kind {
        ArgKind::Scalar(t) => c_type(t),
        ArgKind::Pointer => "void *",
    }
}

/// The C source of the shim calling `entry` with arguments of `kinds`, returning `ret`.
pub fn source(entry: &str, kinds: &[ArgKind], ret: RetType) -> Result<String> {
    if entry.is_empty()
        || entry
            .bytes()
            .any(|b| b == b'"' || b == b'\\' || !(0x21..0x7f).contains(&b))
    {
        return Err(Error::Unsupported(format!(
            "entry name {entry:?} cannot be called through the emulated runner's shim"
        )));
    }
    let ret_c = ret.scalar_type().map_or("void", c_type);
    let params = if kinds.is_empty() {
        "void".to_string()
    } else {
        kinds
            .iter()
            .map(|k| arg_type(*k))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut s = String::new();
    // The entry's name goes only into the asm label's string literal (checked above),
    // never into a comment: a name may contain `*/`.
    let _ = writeln!(
        s,
        "/* elfjit call shim: unpack the argument block, call the entry, store the result. */"
    );
    let _ = writeln!(
        s,
        "extern {ret_c} elfjit_entry({params}) __asm__(\"{entry}\");"
    );
    let _ = writeln!(s, "void {SHIM_SYMBOL}(const unsigned char *a, void *r) {{");
    for (i, k) in kinds.iter().enumerate() {
        let _ = writeln!(
            s,
            "    {} a{i}; __builtin_memcpy(&a{i}, a + {}, sizeof a{i});",
            arg_type(*k),
            i * SLOT
        );
    }
    let call_args = (0..kinds.len())
        .map(|i| format!("a{i}"))
        .collect::<Vec<_>>()
        .join(", ");
    if ret == RetType::Void {
        let _ = writeln!(s, "    (void)r;");
        let _ = writeln!(s, "    elfjit_entry({call_args});");
    } else {
        let _ = writeln!(s, "    {ret_c} v = elfjit_entry({call_args});");
        let _ = writeln!(s, "    __builtin_memcpy(r, &v, sizeof v);");
    }
    s.push_str("}\n");
    Ok(s)
}

/// One argument's slot value.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Slot {
    /// A scalar by value.
    Scalar(Scalar),
    /// A pointer: a target address.
    Pointer(u64),
}

/// `v`'s bytes, little-endian, in an 8-byte slot.
pub fn scalar_le(v: Scalar) -> [u8; 8] {
    let mut b = v.to_ne_bytes();
    if cfg!(target_endian = "big") {
        b[..v.ty().size()].reverse();
    }
    b
}

/// Reads a scalar of `ty` from little-endian bytes (`None` if too short).
pub fn scalar_from_le(ty: ScalarType, bytes: &[u8]) -> Option<Scalar> {
    let mut b = bytes.get(..ty.size())?.to_vec();
    if cfg!(target_endian = "big") {
        b.reverse();
    }
    Scalar::from_ne_bytes(ty, &b)
}

/// The argument block for `slots`.
pub fn pack_args(slots: &[Slot]) -> Vec<u8> {
    let mut block = Vec::with_capacity(slots.len() * SLOT);
    for s in slots {
        let bytes = match s {
            Slot::Scalar(v) => scalar_le(*v),
            Slot::Pointer(addr) => addr.to_le_bytes(),
        };
        block.extend_from_slice(&bytes);
    }
    block
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shim_for_a_typical_kernel() {
        let s = source(
            "saxpy",
            &[
                ArgKind::Scalar(ScalarType::I32),
                ArgKind::Scalar(ScalarType::F32),
                ArgKind::Pointer,
                ArgKind::Pointer,
            ],
            RetType::F64,
        )
        .unwrap();
        assert!(s.contains(
            "extern double elfjit_entry(int, float, void *, void *) __asm__(\"saxpy\");"
        ));
        assert!(s.contains("void __elfjit_shim(const unsigned char *a, void *r) {"));
        assert!(s.contains("int a0; __builtin_memcpy(&a0, a + 0, sizeof a0);"));
        assert!(s.contains("float a1; __builtin_memcpy(&a1, a + 8, sizeof a1);"));
        assert!(s.contains("void * a3; __builtin_memcpy(&a3, a + 24, sizeof a3);"));
        assert!(s.contains("double v = elfjit_entry(a0, a1, a2, a3);"));
        assert!(s.contains("__builtin_memcpy(r, &v, sizeof v);"));
    }

    #[test]
    fn void_and_no_arguments() {
        let s = source("k.1", &[], RetType::Void).unwrap();
        assert!(s.contains("extern void elfjit_entry(void) __asm__(\"k.1\");"));
        assert!(s.contains("    elfjit_entry();"));
        assert!(!s.contains("v ="));
        for t in ScalarType::ALL {
            let s = source("f", &[ArgKind::Scalar(t)], RetType::U64).unwrap();
            assert!(s.contains(&format!("elfjit_entry({})", c_type(t))), "{s}");
            assert!(s.contains("unsigned long long v ="));
        }
    }

    #[test]
    fn an_entry_name_closing_a_comment_stays_in_its_string() {
        let s = source("k*/x", &[], RetType::I32).unwrap();
        assert!(s.contains("__asm__(\"k*/x\")"), "{s}");
        assert_eq!(
            s.matches("*/").count(),
            2,
            "the comment's end and the name's: {s}"
        );
        assert!(s.lines().next().unwrap().ends_with("*/"), "{s}");
    }

    #[test]
    fn hostile_entry_names_are_refused() {
        for bad in ["", "a\"b", "a\\b", "a b", "a\nb", "é"] {
            assert!(
                matches!(source(bad, &[], RetType::Void), Err(Error::Unsupported(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn argument_block_is_little_endian_slots() {
        let block = pack_args(&[
            Slot::Scalar(Scalar::I8(-2)),
            Slot::Scalar(Scalar::F32(1.5)),
            Slot::Pointer(0x4_0000_0040),
            Slot::Scalar(Scalar::U64(u64::MAX - 1)),
        ]);
        assert_eq!(block.len(), 32);
        assert_eq!(block[0], 0xfe);
        assert_eq!(&block[1..8], &[0; 7]);
        assert_eq!(&block[8..12], &1.5f32.to_le_bytes());
        assert_eq!(&block[16..24], &0x4_0000_0040u64.to_le_bytes());
        assert_eq!(&block[24..32], &(u64::MAX - 1).to_le_bytes());
        for t in ScalarType::ALL {
            let v = t.from_i128(5).unwrap();
            assert_eq!(scalar_from_le(t, &scalar_le(v)), Some(v));
        }
        assert_eq!(scalar_from_le(ScalarType::F64, &[0; 4]), None);
    }
}
