//! x86_64 (System V AMD64 psABI): RELA relocations, little-endian. Every field is a plain
//! 8/16/32/64-bit integer at the place, so there is no instruction encoding to do: each
//! relocation computes X, checks its range and writes it.
//!
//! psABI: <https://gitlab.com/x86-psABIs/x86-64-ABI> (§4.4 "Relocation").
//! Notation: S symbol, A addend, P place, G the address of the symbol's GOT slot, GOT the
//! GOT's first byte, L the call target (S, or the stub when S is out of reach), Z the
//! symbol's size (`st_size`).
//!
//! Calls are `call rel32` (±2 GiB): an external target further away goes through a stub
//! `jmp *0(%rip); .quad target`, one per target, reserved by the pre-scan. A is -4 there
//! (the field is the instruction's last four bytes), so the stub takes it too: L + A - P.
//! GOT-relative loads get a real GOT slot holding S; `GOTPCRELX` forms, which a static
//! linker may relax to `lea`, keep their load (always valid).
//!
//! The table below ([`RELOCATIONS`], whose documentation lists every row) is the single
//! source of what is linked: the pre-scan's classification, the names and `apply` all come
//! from it. Types not in it (TLS, `GOT32`, `GOTPLT64`, dynamic relocations) are refused by
//! name before memory is allocated.

use super::reloc::{
    call_target, datum, relocations, write_data, Applied, Failure, RelocInput, StubAddend,
    StubInput,
};
use crate::error::Range;
use object::elf::*;

relocations! {
    R_X86_64_NONE: skip(), "—", "nothing written", |_, _| Ok(Applied::NOTHING);
    R_X86_64_64: data(8), "S + A", "any 64-bit value", |r, at| datum(at, 8, r.sa(), None);
    R_X86_64_PC32: data(4), "S + A - P", "signed 32 bits", |r, at| {
        datum(at, 4, r.sap(), Some(Range::signed(32)))
    };
    R_X86_64_PC16: data(2), "S + A - P", "signed 16 bits", |r, at| {
        datum(at, 2, r.sap(), Some(Range::signed(16)))
    };
    R_X86_64_PC8: data(1), "S + A - P", "signed 8 bits", |r, at| {
        datum(at, 1, r.sap(), Some(Range::signed(8)))
    };
    R_X86_64_PC64: data(8), "S + A - P", "any 64-bit value", |r, at| datum(at, 8, r.sap(), None);
    // Zero-extended to 64 bits by the instruction that uses it.
    R_X86_64_32: data(4), "S + A", "unsigned 32 bits", |r, at| {
        datum(at, 4, r.sa(), Some(Range::unsigned(32)))
    };
    // Sign-extended to 64 bits by the instruction that uses it.
    R_X86_64_32S: data(4), "S + A", "signed 32 bits", |r, at| {
        datum(at, 4, r.sa(), Some(Range::signed(32)))
    };
    R_X86_64_16: data(2), "S + A", "16 bits, signed or unsigned", |r, at| {
        datum(at, 2, r.sa(), Some(Range::either(16)))
    };
    R_X86_64_8: data(1), "S + A", "8 bits, signed or unsigned", |r, at| {
        datum(at, 1, r.sa(), Some(Range::either(8)))
    };
    R_X86_64_PLT32: call(4), "L + A - P", "signed 32 bits (the stub when S is out of reach)",
        |r, at| call32(r, at);
    // The large code model's calls through the GOT base.
    R_X86_64_PLTOFF64: data(8), "L + A - GOT", "any 64-bit value", |r, at| {
        datum(at, 8, r.sa() - got_base(r), None)
    };
    R_X86_64_GOTPCREL: got(4), "G + A - P", "signed 32 bits", |r, at| got_pcrel32(r, at);
    R_X86_64_GOTPCRELX: got(4), "G + A - P", "signed 32 bits", |r, at| got_pcrel32(r, at);
    R_X86_64_REX_GOTPCRELX: got(4), "G + A - P", "signed 32 bits", |r, at| got_pcrel32(r, at);
    R_X86_64_GOTPCREL64: got(8), "G + A - P", "any 64-bit value", |r, at| {
        let v = r.got()? + i128::from(r.a) - i128::from(r.p);
        write_data(at, 8, v, None).map(|()| Applied::got(v))
    };
    // The slot's offset in the GOT.
    R_X86_64_GOT64: got(8), "G - GOT + A", "any 64-bit value", |r, at| {
        let v = r.got()? - got_base(r) + i128::from(r.a);
        write_data(at, 8, v, None).map(|()| Applied::got(v))
    };
    R_X86_64_GOTOFF64: data(8), "S + A - GOT", "any 64-bit value", |r, at| {
        datum(at, 8, r.sa() - got_base(r), None)
    };
    R_X86_64_GOTPC32: data(4), "GOT + A - P", "signed 32 bits", |r, at| {
        datum(at, 4, got_base(r) + i128::from(r.a) - i128::from(r.p), Some(Range::signed(32)))
    };
    R_X86_64_GOTPC64: data(8), "GOT + A - P", "any 64-bit value", |r, at| {
        datum(at, 8, got_base(r) + i128::from(r.a) - i128::from(r.p), None)
    };
    R_X86_64_SIZE32: data(4), "Z + A", "32 bits, signed or unsigned", |r, at| {
        datum(at, 4, i128::from(r.size) + i128::from(r.a), Some(Range::either(32)))
    };
    R_X86_64_SIZE64: data(8), "Z + A", "any 64-bit value", |r, at| {
        datum(at, 8, i128::from(r.size) + i128::from(r.a), None)
    };
}

/// GOT.
fn got_base(r: &RelocInput) -> i128 {
    i128::from(r.got_base)
}

/// `call rel32`: L + A - P, L = S when it is in reach, else the stub.
fn call32(r: &RelocInput, place: &mut [u8]) -> Result<Applied, Failure> {
    let (value, via) = call_target(r, Range::signed(32), StubAddend::Kept);
    write_data(place, 4, value, Some(Range::signed(32))).map(|()| Applied { value, via })
}

/// G + A - P in a 32-bit signed field.
fn got_pcrel32(r: &RelocInput, place: &mut [u8]) -> Result<Applied, Failure> {
    let v = r.got()? + i128::from(r.a) - i128::from(r.p);
    write_data(place, 4, v, Some(Range::signed(32))).map(|()| Applied::got(v))
}

/// `jmp *0(%rip)` (6 bytes) + the 8-byte target, padded with `int3` to 16.
pub(crate) const STUB_SIZE: u64 = 16;
/// Stubs carry their target inline.
pub(crate) const STUB_USES_GOT: bool = false;

pub(crate) fn write_stub(buf: &mut [u8], stub: &StubInput) -> Option<()> {
    let out = buf.get_mut(..16)?;
    out.copy_from_slice(&[0xff, 0x25, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xcc, 0xcc]);
    out.get_mut(6..14)?
        .copy_from_slice(&stub.target.to_le_bytes());
    Some(())
}

#[cfg(test)]
mod tests {
    use super::super::reloc::testing::{input, row_input};
    use super::super::reloc::Via;
    use super::*;
    use crate::bits::{fits_signed, read_u32, read_u64};
    use crate::error::RelocProblem;
    use proptest::prelude::*;

    /// Applies into a 12-byte buffer of 0xAA with the field at offset 4.
    fn run(r: &RelocInput) -> (Result<Applied, Failure>, [u8; 12]) {
        let mut buf = [0xAAu8; 12];
        let result = apply(r, &mut buf[4..]);
        (result, buf)
    }

    #[test]
    fn pc32_boundaries() {
        let p = 0x1_0000_0000;
        let max = (p as i128 + i32::MAX as i128) as u64;
        let (ok, buf) = run(&input(R_X86_64_PC32, max, 0, p));
        assert_eq!(ok.map(|a| a.value), Ok(i32::MAX as i128));
        assert_eq!(read_u32(&buf[4..]), Some(i32::MAX as u32));
        let (ok, _) = run(&input(R_X86_64_PC32, p - 0x8000_0000, 0, p));
        assert_eq!(ok.map(|a| a.value), Ok(i32::MIN as i128));
        for s in [max + 1, p - 0x8000_0001] {
            let (err, buf) = run(&input(R_X86_64_PC32, s, 0, p));
            assert!(matches!(
                err,
                Err(Failure {
                    problem: RelocProblem::Overflow { range },
                    ..
                }) if range == Range::signed(32)
            ));
            assert_eq!(buf, [0xAA; 12], "nothing written on overflow");
        }
    }

    #[test]
    fn abs32_is_unsigned_and_abs32s_is_signed() {
        let (ok, _) = run(&input(R_X86_64_32, u32::MAX as u64, 0, 0));
        assert!(ok.is_ok());
        let (err, _) = run(&input(R_X86_64_32, u32::MAX as u64 + 1, 0, 0));
        assert!(err.is_err());
        let (err, _) = run(&input(R_X86_64_32, 0, -1, 0));
        assert!(err.is_err());
        let (ok, buf) = run(&input(R_X86_64_32S, 0, -1, 0));
        assert!(ok.is_ok());
        assert_eq!(read_u32(&buf[4..]), Some(u32::MAX));
        let (err, _) = run(&input(R_X86_64_32S, 0x8000_0000, 0, 0));
        assert!(err.is_err());
    }

    #[test]
    fn plt32_uses_the_stub_only_when_the_target_is_far() {
        let p = 0x10_0000;
        let near = input(R_X86_64_PLT32, p + 0x100, -4, p);
        let (ok, _) = run(&RelocInput {
            stub: Some(p + 0x40),
            ..near
        });
        assert_eq!(ok.map(|a| a.via), Ok(Via::Direct));
        let far = input(R_X86_64_PLT32, 0x7fff_0000_0000, -4, p);
        let (ok, buf) = run(&RelocInput {
            stub: Some(p + 0x40),
            ..far
        });
        assert_eq!(
            ok,
            Ok(Applied {
                value: 0x40 - 4,
                via: Via::Stub
            })
        );
        assert_eq!(read_u32(&buf[4..]), Some(0x3c));
        let (err, _) = run(&far);
        assert!(
            err.is_err(),
            "a far call without a stub is an error, not truncated"
        );
    }

    #[test]
    fn got_forms_need_and_use_the_slot() {
        let r = RelocInput {
            got_slot: Some(0x2000),
            got_base: 0x1ff0,
            ..input(R_X86_64_REX_GOTPCRELX, 0xdead_0000, -4, 0x1000)
        };
        let (ok, _) = run(&r);
        assert_eq!(
            ok,
            Ok(Applied {
                value: 0x2000 - 4 - 0x1000,
                via: Via::Got
            })
        );
        let (ok, buf) = run(&RelocInput {
            r_type: R_X86_64_GOT64,
            a: 0,
            ..r
        });
        assert_eq!(ok.map(|a| a.value), Ok(0x10));
        assert_eq!(read_u64(&buf[4..]), Some(0x10));
        let (err, _) = run(&RelocInput {
            got_slot: None,
            ..r
        });
        assert_eq!(err.map_err(|f| f.problem), Err(RelocProblem::MissingSlot));
    }

    #[test]
    fn short_place_is_an_error() {
        let mut buf = [0u8; 3];
        let err = apply(&input(R_X86_64_PC32, 0, 0, 0), &mut buf);
        assert_eq!(
            err.map_err(|f| f.problem),
            Err(RelocProblem::ShortPlace { need: 4, have: 3 })
        );
        assert_eq!(buf, [0; 3]);
    }

    #[test]
    fn stub_jumps_to_its_target() {
        let mut buf = [0u8; 16];
        let stub = StubInput {
            address: 0x1000,
            target: 0x1122_3344_5566_7788,
            got_slot: None,
            got_base: 0,
        };
        assert!(write_stub(&mut buf, &stub).is_some());
        assert_eq!(&buf[..6], &[0xff, 0x25, 0, 0, 0, 0]);
        assert_eq!(read_u64(&buf[6..]), Some(0x1122_3344_5566_7788));
        assert!(write_stub(&mut [0u8; 15], &stub).is_none());
    }

    #[test]
    fn every_classified_type_has_a_name_and_applies() {
        check_table(row_input, |_| [0; 16]);
        assert_eq!(RELOCATIONS.len(), 22);
    }

    proptest! {
        /// PC32 writes exactly S + A - P when it fits, rejects it otherwise, and never
        /// touches the bytes around the field.
        #[test]
        fn pc32_matches_the_formula(s in any::<u32>(), a in -0x1000i64..0x1000, p in any::<u32>(), hi in 0u64..4) {
            let s = s as u64 | (hi << 31);
            let r = input(R_X86_64_PC32, s, a, p as u64);
            let (result, buf) = run(&r);
            let expect = s as i128 + a as i128 - p as i128;
            prop_assert_eq!(&buf[..4], &[0xAA; 4]);
            prop_assert_eq!(&buf[8..], &[0xAA; 4]);
            if fits_signed(expect, 32) {
                prop_assert!(result.is_ok());
                prop_assert_eq!(read_u32(&buf[4..]).map(|v| v as i32 as i128), Some(expect));
            } else {
                prop_assert!(result.is_err());
                prop_assert_eq!(buf, [0xAA; 12]);
            }
        }

        #[test]
        fn abs64_round_trips(s in any::<u64>(), a in any::<i64>()) {
            let (result, buf) = run(&input(R_X86_64_64, s, a, 0));
            prop_assert!(result.is_ok());
            prop_assert_eq!(read_u64(&buf[4..]), Some(s.wrapping_add_signed(a)));
        }
    }
}
