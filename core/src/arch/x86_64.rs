//! x86_64 (System V AMD64 psABI): RELA relocations, little-endian, all fields are plain
//! 8/16/32/64-bit integers at the place, so there is no instruction encoding to do.
//! Calls are `call rel32` (±2 GiB): an external target further away goes through a stub
//! `jmp *0(%rip); .quad target`. GOT-relative loads get a real GOT slot.
//!
//! psABI: <https://gitlab.com/x86-psABIs/x86-64-ABI> (§4.4 Relocation).
//! Notation: S symbol, A addend, P place, G GOT slot address, GOT the GOT's base,
//! L the call target (S, or the stub when S is out of reach), Z the symbol's size.

use super::{Applied, Failure, RelocClass, RelocInput, Via};
use crate::bits::{fits_either, fits_signed, write_u16, write_u32, write_u64, write_u8};
use crate::error::RelocProblem;
use object::elf::*;

/// `jmp *0(%rip)` (6 bytes) + the 8-byte target, padded with `int3` to 16.
pub(crate) const STUB_SIZE: u64 = 16;

pub(crate) fn write_stub(buf: &mut [u8], target: u64) -> Option<()> {
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
    if !fits_signed(value, width) {
        return Err(Failure {
            problem: RelocProblem::Overflow {
                bits: width as u8,
                signed: true,
            },
            value,
        });
    }
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
    written.ok_or(Failure {
        problem: RelocProblem::Overflow {
            bits: width as u8,
            signed: false,
        },
        value,
    })
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
            if !(0..=i128::from(u32::MAX)).contains(&v) {
                return Err(Failure {
                    problem: RelocProblem::Overflow {
                        bits: 32,
                        signed: false,
                    },
                    value: v,
                });
            }
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
