//! x86_64 (System V AMD64 psABI): RELA relocations, little-endian, all fields are plain
//! 8/16/32/64-bit integers at the place, so there is no instruction encoding to do.
//! Calls are `call rel32` (±2 GiB): an external target further away goes through a stub
//! `jmp *0(%rip); .quad target`. GOT-relative loads get a real GOT slot.
//!
//! psABI: <https://gitlab.com/x86-psABIs/x86-64-ABI> (§4.4 Relocation).
//! Notation: S symbol, A addend, P place, G GOT slot address, GOT the GOT's base,
//! L the call target (S, or the stub when S is out of reach), Z the symbol's size.

use super::{
    check_signed, check_unsigned, short_place, Applied, Failure, RelocClass, RelocInput, StubInput,
    Via,
};
use crate::bits::{fits_either, fits_signed, write_u16, write_u32, write_u64, write_u8};
use crate::error::RelocProblem;
use object::elf::*;

/// `jmp *0(%rip)` (6 bytes) + the 8-byte target, padded with `int3` to 16.
pub(crate) const STUB_SIZE: u64 = 16;
/// Stubs carry their target inline.
pub(crate) const STUB_USES_GOT: bool = false;
/// No HI/LO relocation pairs on x86_64.
pub(crate) const HAS_PAIRS: bool = false;

pub(crate) fn write_stub(buf: &mut [u8], stub: &StubInput) -> Option<()> {
    let target = stub.target;
    let stub = buf.get_mut(..16)?;
    stub.copy_from_slice(&[0xff, 0x25, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xcc, 0xcc]);
    write_u64(stub.get_mut(6..)?, target)
}

pub(crate) fn classify(r_type: u32) -> Option<RelocClass> {
    Some(match r_type {
        R_X86_64_NONE => RelocClass::SKIP,
        R_X86_64_64 | R_X86_64_PC64 | R_X86_64_GOTOFF64 | R_X86_64_PLTOFF64 | R_X86_64_GOTPC64
        | R_X86_64_SIZE64 => RelocClass::data(8),
        R_X86_64_PC32 | R_X86_64_32 | R_X86_64_32S | R_X86_64_GOTPC32 | R_X86_64_SIZE32 => {
            RelocClass::data(4)
        }
        R_X86_64_16 | R_X86_64_PC16 => RelocClass::data(2),
        R_X86_64_8 | R_X86_64_PC8 => RelocClass::data(1),
        R_X86_64_PLT32 => RelocClass::call(4),
        R_X86_64_GOTPCREL | R_X86_64_GOTPCRELX | R_X86_64_REX_GOTPCRELX => RelocClass::got(4),
        R_X86_64_GOT64 | R_X86_64_GOTPCREL64 => RelocClass::got(8),
        _ => return None,
    })
}

/// Writes a value that must fit `width` bits as a signed field.
fn put_signed(place: &mut [u8], width: u32, value: i128) -> Result<(), Failure> {
    check_signed(value, width)?;
    put(place, width, value)
}

/// Writes a value that must fit `width` bits read either as signed or unsigned.
fn put_either(place: &mut [u8], width: u32, value: i128) -> Result<(), Failure> {
    if !fits_either(value, width) {
        return Err(Failure {
            problem: RelocProblem::Overflow {
                bits: width as u8,
                signed: false,
            },
            value,
        });
    }
    put(place, width, value)
}

/// Writes the low `width` bits (already range-checked, or a full 64-bit field).
fn put(place: &mut [u8], width: u32, value: i128) -> Result<(), Failure> {
    let v = value as u64;
    let written = match width {
        8 => write_u8(place, v as u8),
        16 => write_u16(place, v as u16),
        32 => write_u32(place, v as u32),
        _ => write_u64(place, v),
    };
    written.ok_or(short_place(value))
}

fn missing_slot() -> Failure {
    Failure {
        problem: RelocProblem::MissingSlot,
        value: 0,
    }
}

pub(crate) fn apply(r: &RelocInput, place: &mut [u8]) -> Result<Applied, Failure> {
    let s = i128::from(r.s);
    let a = i128::from(r.a);
    let p = i128::from(r.p);
    let got = i128::from(r.got_base);
    let direct = |value| {
        Ok(Applied {
            value,
            via: Via::Direct,
        })
    };
    match r.r_type {
        R_X86_64_NONE => Ok(Applied {
            value: 0,
            via: Via::Nothing,
        }),
        // S + A, a full 64-bit field: any value fits (as u64 two's complement).
        R_X86_64_64 => put(place, 64, s + a).and_then(|()| direct(s + a)),
        // S + A - P, 32-bit signed (±2 GiB).
        R_X86_64_PC32 => put_signed(place, 32, s + a - p).and_then(|()| direct(s + a - p)),
        R_X86_64_PC16 => put_signed(place, 16, s + a - p).and_then(|()| direct(s + a - p)),
        R_X86_64_PC8 => put_signed(place, 8, s + a - p).and_then(|()| direct(s + a - p)),
        // S + A - P, 64-bit.
        R_X86_64_PC64 => put(place, 64, s + a - p).and_then(|()| direct(s + a - p)),
        // S + A zero-extended to 64 bits by the instruction: 0 ≤ v < 2^32.
        R_X86_64_32 => {
            let v = s + a;
            check_unsigned(v, 32)?;
            put(place, 32, v).and_then(|()| direct(v))
        }
        // S + A sign-extended to 64 bits by the instruction: ±2 GiB.
        R_X86_64_32S => put_signed(place, 32, s + a).and_then(|()| direct(s + a)),
        R_X86_64_16 => put_either(place, 16, s + a).and_then(|()| direct(s + a)),
        R_X86_64_8 => put_either(place, 8, s + a).and_then(|()| direct(s + a)),
        // L + A - P, 32-bit signed; L = S when it is in reach, else the stub.
        R_X86_64_PLT32 => {
            let v = s + a - p;
            if fits_signed(v, 32) {
                return put(place, 32, v).and_then(|()| direct(v));
            }
            let Some(stub) = r.stub else {
                return put_signed(place, 32, v).and_then(|()| direct(v));
            };
            let v = i128::from(stub) + a - p;
            put_signed(place, 32, v).map(|()| Applied {
                value: v,
                via: Via::Stub,
            })
        }
        // L + A - GOT, 64-bit (large code model calls through the GOT base).
        R_X86_64_PLTOFF64 => put(place, 64, s + a - got).and_then(|()| direct(s + a - got)),
        // G + A - P, 32-bit signed: the slot holds S. (GOTPCRELX forms may be relaxed by a
        // static linker; keeping the load through a real slot is always valid.)
        R_X86_64_GOTPCREL | R_X86_64_GOTPCRELX | R_X86_64_REX_GOTPCRELX => {
            let g = i128::from(r.got_slot.ok_or_else(missing_slot)?);
            let v = g + a - p;
            put_signed(place, 32, v).map(|()| Applied {
                value: v,
                via: Via::Got,
            })
        }
        // G + A - P, 64-bit.
        R_X86_64_GOTPCREL64 => {
            let g = i128::from(r.got_slot.ok_or_else(missing_slot)?);
            put(place, 64, g + a - p).map(|()| Applied {
                value: g + a - p,
                via: Via::Got,
            })
        }
        // G - GOT + A: the slot's offset in the GOT, 64-bit.
        R_X86_64_GOT64 => {
            let g = i128::from(r.got_slot.ok_or_else(missing_slot)?);
            put(place, 64, g - got + a).map(|()| Applied {
                value: g - got + a,
                via: Via::Got,
            })
        }
        // S + A - GOT, 64-bit.
        R_X86_64_GOTOFF64 => put(place, 64, s + a - got).and_then(|()| direct(s + a - got)),
        // GOT + A - P, 32-bit signed and 64-bit.
        R_X86_64_GOTPC32 => put_signed(place, 32, got + a - p).and_then(|()| direct(got + a - p)),
        R_X86_64_GOTPC64 => put(place, 64, got + a - p).and_then(|()| direct(got + a - p)),
        // Z + A.
        R_X86_64_SIZE32 => {
            let v = i128::from(r.size) + a;
            put_either(place, 32, v).and_then(|()| direct(v))
        }
        R_X86_64_SIZE64 => {
            let v = i128::from(r.size) + a;
            put(place, 64, v).and_then(|()| direct(v))
        }
        _ => Err(Failure {
            problem: RelocProblem::Unsupported,
            value: 0,
        }),
    }
}

pub(crate) fn reloc_name(r_type: u32) -> &'static str {
    match r_type {
        R_X86_64_NONE => "R_X86_64_NONE",
        R_X86_64_64 => "R_X86_64_64",
        R_X86_64_PC32 => "R_X86_64_PC32",
        R_X86_64_GOT32 => "R_X86_64_GOT32",
        R_X86_64_PLT32 => "R_X86_64_PLT32",
        R_X86_64_GOTPCREL => "R_X86_64_GOTPCREL",
        R_X86_64_32 => "R_X86_64_32",
        R_X86_64_32S => "R_X86_64_32S",
        R_X86_64_16 => "R_X86_64_16",
        R_X86_64_PC16 => "R_X86_64_PC16",
        R_X86_64_8 => "R_X86_64_8",
        R_X86_64_PC8 => "R_X86_64_PC8",
        R_X86_64_DTPMOD64 => "R_X86_64_DTPMOD64",
        R_X86_64_DTPOFF64 => "R_X86_64_DTPOFF64",
        R_X86_64_TPOFF64 => "R_X86_64_TPOFF64",
        R_X86_64_TLSGD => "R_X86_64_TLSGD",
        R_X86_64_TLSLD => "R_X86_64_TLSLD",
        R_X86_64_DTPOFF32 => "R_X86_64_DTPOFF32",
        R_X86_64_GOTTPOFF => "R_X86_64_GOTTPOFF",
        R_X86_64_TPOFF32 => "R_X86_64_TPOFF32",
        R_X86_64_PC64 => "R_X86_64_PC64",
        R_X86_64_GOTOFF64 => "R_X86_64_GOTOFF64",
        R_X86_64_GOTPC32 => "R_X86_64_GOTPC32",
        R_X86_64_GOT64 => "R_X86_64_GOT64",
        R_X86_64_GOTPCREL64 => "R_X86_64_GOTPCREL64",
        R_X86_64_GOTPC64 => "R_X86_64_GOTPC64",
        R_X86_64_GOTPLT64 => "R_X86_64_GOTPLT64",
        R_X86_64_PLTOFF64 => "R_X86_64_PLTOFF64",
        R_X86_64_SIZE32 => "R_X86_64_SIZE32",
        R_X86_64_SIZE64 => "R_X86_64_SIZE64",
        R_X86_64_GOTPC32_TLSDESC => "R_X86_64_GOTPC32_TLSDESC",
        R_X86_64_TLSDESC_CALL => "R_X86_64_TLSDESC_CALL",
        R_X86_64_TLSDESC => "R_X86_64_TLSDESC",
        R_X86_64_GOTPCRELX => "R_X86_64_GOTPCRELX",
        R_X86_64_REX_GOTPCRELX => "R_X86_64_REX_GOTPCRELX",
        _ => "unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bits::{read_u32, read_u64};
    use proptest::prelude::*;

    fn input(r_type: u32, s: u64, a: i64, p: u64) -> RelocInput {
        RelocInput {
            r_type,
            s,
            a,
            p,
            got_slot: None,
            got_base: 0,
            stub: None,
            size: 0,
            other: 0,
            hi: None,
        }
    }

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
                    problem: RelocProblem::Overflow {
                        bits: 32,
                        signed: true
                    },
                    ..
                })
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
        assert!(apply(&input(R_X86_64_PC32, 0, 0, 0), &mut buf).is_err());
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
        for r_type in 0..64 {
            if let Some(class) = classify(r_type) {
                assert_ne!(reloc_name(r_type), "unknown", "{r_type}");
                let r = RelocInput {
                    got_slot: Some(0x100),
                    stub: Some(0x80),
                    ..input(r_type, 0x40, 0, 0x20)
                };
                let mut buf = [0u8; 8];
                assert!(apply(&r, &mut buf).is_ok(), "{}", reloc_name(r_type));
                assert!(class.width <= 8);
            }
        }
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
