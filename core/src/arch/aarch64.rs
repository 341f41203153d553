//! aarch64 (AAPCS64, "ELF for the Arm 64-bit Architecture"): RELA relocations,
//! little-endian, fixed 32-bit instructions whose immediates are split over bit fields.
//! Every relocation below is "compute a value, check its range and alignment, encode it
//! into one instruction field (or write a plain 16/32/64-bit datum)".
//!
//! psABI: <https://github.com/ARM-software/abi-aa/blob/main/aaelf64/aaelf64.rst>
//! (§5.7 Relocation). Notation: S symbol, A addend, P place, G the address of the
//! symbol's GOT slot, `Page(x) = x & !0xfff`, X the computed value.
//!
//! `BL`/`B` reach ±128 MiB. A call or tail call to an external symbol further away goes
//! through a veneer in the stub area at the end of the code segment:
//! `LDR X16, [PC, #8]; BR X16; .quad target` (X16 is IP0, which the AAPCS64 lets veneers
//! clobber). The pre-scan reserves one per external call target, shared by all call sites.
//!
//! | relocation | X | field | check |
//! |---|---|---|---|
//! | ABS64 / PREL64 | S+A / S+A-P | 64-bit datum | none |
//! | ABS32 / PREL32 | S+A / S+A-P | 32-bit datum | −2^31 ≤ X < 2^32 |
//! | ABS16 / PREL16 | S+A / S+A-P | 16-bit datum | −2^15 ≤ X < 2^16 |
//! | CALL26, JUMP26 | S+A-P (or veneer − P) | imm26 of BL/B, X>>2 | ±128 MiB, 4-aligned |
//! | CONDBR19, LD_PREL_LO19 | S+A-P | imm19, X>>2 | ±1 MiB, 4-aligned |
//! | GOT_LD_PREL19 | G-P | imm19 of LDR literal | ±1 MiB, 4-aligned |
//! | TSTBR14 | S+A-P | imm14 of TBZ/TBNZ, X>>2 | ±32 KiB, 4-aligned |
//! | ADR_PREL_LO21 | S+A-P | immhi:immlo of ADR | ±1 MiB |
//! | ADR_PREL_PG_HI21 | Page(S+A)-Page(P) | immhi:immlo of ADRP, X>>12 | ±4 GiB |
//! | ADR_PREL_PG_HI21_NC | Page(S+A)-Page(P) | as above | none |
//! | ADR_GOT_PAGE | Page(G)-Page(P) | immhi:immlo of ADRP, X>>12 | ±4 GiB |
//! | ADD_ABS_LO12_NC, LDST8_ABS_LO12_NC | (S+A) & 0xfff | imm12 | none |
//! | LDST16/32/64/128_ABS_LO12_NC | (S+A) & 0xfff | imm12, X>>1/2/3/4 | multiple of 2/4/8/16 |
//! | LD64_GOT_LO12_NC | G & 0xfff | imm12 of LDR, X>>3 | multiple of 8 |
//! | MOVW_UABS_Gn (n = 0..2) | S+A | imm16 = X>>16n | 0 ≤ X < 2^(16n+16) |
//! | MOVW_UABS_Gn_NC, G3 | S+A | imm16 = X>>16n | none |
//! | MOVW_SABS_Gn (n = 0..2) | S+A | MOVZ/MOVN imm16 | −2^(16n+16) ≤ X < 2^(16n+16) |
//! | MOVW_PREL_Gn (n = 0..2) | S+A-P | MOVZ/MOVN imm16 | −2^(16n+16) ≤ X < 2^(16n+16) |
//! | MOVW_PREL_Gn_NC, G3 | S+A-P | imm16 (MOVZ/MOVN for G3) | none |
//!
//! The `_NC` ("no check") forms take only the bits they encode: that is their definition,
//! not a truncation. GOT forms require a zero addend (our slots hold S, not S+A).

use super::{
    check_aligned, check_signed, check_unsigned, short_place, Applied, Failure, RelocClass,
    RelocInput, StubInput, Via,
};
use crate::bits::{
    bits, fits_either, fits_signed, insert, read_u32, sign_extend, write_u16, write_u32, write_u64,
};
use crate::error::RelocProblem;
use object::elf::*;

/// A veneer: `LDR X16, [PC, #8]; BR X16; .quad target`.
pub(crate) const STUB_SIZE: u64 = 16;
/// Veneers carry their target inline.
pub(crate) const STUB_USES_GOT: bool = false;
/// aarch64's ADRP + LO12 forms are computed independently: no pairs to match.
pub(crate) const HAS_PAIRS: bool = false;

/// `LDR X16, <pc + 8>` (LDR literal, 64-bit, imm19 = 2).
const LDR_X16_PC8: u32 = 0x5800_0050;
/// `BR X16`.
const BR_X16: u32 = 0xd61f_0200;

pub(crate) fn write_stub(buf: &mut [u8], stub: &StubInput) -> Option<()> {
    let stub_bytes = buf.get_mut(..16)?;
    write_u32(stub_bytes, LDR_X16_PC8)?;
    write_u32(stub_bytes.get_mut(4..)?, BR_X16)?;
    write_u64(stub_bytes.get_mut(8..)?, stub.target)
}

// ---------------------------------------------------------------------------------------
// Instruction-immediate formats. Each encoder takes the value the field stands for (a
// byte offset, a page count, an unshifted low-12 value, a 16-bit chunk), returns `None`
// when it cannot be represented exactly, and touches no bit outside its field. Each
// decoder beside it gives back that value.
// ---------------------------------------------------------------------------------------

/// `B`/`BL`: imm26 in bits 25..0, a byte offset / 4. `offset` must be a multiple of 4 in
/// [−2^27, 2^27).
pub const fn encode_imm26(word: u32, offset: i64) -> Option<u32> {
    if offset & 3 != 0 || !fits_signed(offset as i128, 28) {
        return None;
    }
    Some(insert(word, (offset >> 2) as u64, 25, 0))
}

/// The byte offset a `B`/`BL` encodes.
pub const fn decode_imm26(word: u32) -> i64 {
    sign_extend(bits(word as u64, 25, 0), 26) << 2
}

/// `B.cond`, `CBZ`/`CBNZ`, `LDR` (literal): imm19 in bits 23..5, a byte offset / 4.
/// `offset` must be a multiple of 4 in [−2^20, 2^20).
pub const fn encode_imm19(word: u32, offset: i64) -> Option<u32> {
    if offset & 3 != 0 || !fits_signed(offset as i128, 21) {
        return None;
    }
    Some(insert(word, (offset >> 2) as u64, 23, 5))
}

/// The byte offset an imm19 instruction encodes.
pub const fn decode_imm19(word: u32) -> i64 {
    sign_extend(bits(word as u64, 23, 5), 19) << 2
}

/// `TBZ`/`TBNZ`: imm14 in bits 18..5, a byte offset / 4. `offset` must be a multiple of 4
/// in [−2^15, 2^15).
pub const fn encode_imm14(word: u32, offset: i64) -> Option<u32> {
    if offset & 3 != 0 || !fits_signed(offset as i128, 16) {
        return None;
    }
    Some(insert(word, (offset >> 2) as u64, 18, 5))
}

/// The byte offset a `TBZ`/`TBNZ` encodes.
pub const fn decode_imm14(word: u32) -> i64 {
    sign_extend(bits(word as u64, 18, 5), 14) << 2
}

/// `ADR`/`ADRP`: a signed 21-bit immediate split as immlo (bits 30..29, its low 2 bits)
/// and immhi (bits 23..5, the rest). For ADR it is a byte offset, for ADRP a page count.
pub const fn encode_adr(word: u32, imm: i64) -> Option<u32> {
    if !fits_signed(imm as i128, 21) {
        return None;
    }
    let v = imm as u64;
    Some(insert(insert(word, v, 30, 29), v >> 2, 23, 5))
}

/// The signed 21-bit immediate of an `ADR`/`ADRP`.
pub const fn decode_adr(word: u32) -> i64 {
    let w = word as u64;
    sign_extend((bits(w, 23, 5) << 2) | bits(w, 30, 29), 21)
}

/// `ADD` (immediate) and `LDR`/`STR` (unsigned offset): imm12 in bits 21..10, scaled by
/// the access size `1 << shift` (0..=4). `value` is the unscaled offset the `LO12`
/// relocations give (at most 0xfff) and must be a multiple of the access size.
pub const fn encode_imm12(word: u32, value: u64, shift: u32) -> Option<u32> {
    if shift > 4 || value > 0xfff || value & ((1 << shift) - 1) != 0 {
        return None;
    }
    Some(insert(word, value >> shift, 21, 10))
}

/// The unscaled offset an imm12 instruction with access size `1 << shift` encodes.
pub const fn decode_imm12(word: u32, shift: u32) -> u64 {
    bits(word as u64, 21, 10) << shift
}

/// `MOVZ`/`MOVN`/`MOVK`: imm16 in bits 20..5.
pub const fn encode_imm16(word: u32, chunk: u64) -> Option<u32> {
    if chunk > 0xffff {
        return None;
    }
    Some(insert(word, chunk, 20, 5))
}

/// The imm16 of a move-wide instruction.
pub const fn decode_imm16(word: u32) -> u64 {
    bits(word as u64, 20, 5)
}

/// Bit 30 of a move-wide instruction: set for MOVZ (opc 10) and MOVK (11), clear for
/// MOVN (00). Bit 29 is set only for MOVK.
const MOVW_OPC_HI: u32 = 1 << 30;
const MOVW_OPC_LO: u32 = 1 << 29;

/// A signed move-wide chunk (`MOVW_SABS_Gn`, `MOVW_PREL_Gn`): `chunk` is X >> 16n
/// (arithmetic). On a MOVZ or MOVN, a negative chunk turns the instruction into
/// `MOVN #~chunk` and a non-negative one into `MOVZ #chunk`; a MOVK takes the low 16 bits
/// as they are. `chunk` must fit 17 signed bits on MOVZ/MOVN (16 unsigned and the sign),
/// and 16 bits either way on MOVK.
pub const fn encode_movw_signed(word: u32, chunk: i64) -> Option<u32> {
    if word & MOVW_OPC_LO != 0 {
        // MOVK: keeps the other chunks, so only the 16 bits themselves matter.
        if !fits_either(chunk as i128, 16) {
            return None;
        }
        return encode_imm16(word, chunk as u64 & 0xffff);
    }
    if !fits_signed(chunk as i128, 17) {
        return None;
    }
    if chunk < 0 {
        encode_imm16(word & !MOVW_OPC_HI, !chunk as u64)
    } else {
        encode_imm16(word | MOVW_OPC_HI, chunk as u64)
    }
}

/// The chunk a MOVZ or MOVN encodes, as [`encode_movw_signed`] takes it (the imm16 of a
/// MOVZ; the complement of a MOVN's, which is negative). A MOVK gives its imm16.
pub const fn decode_movw_signed(word: u32) -> i64 {
    let imm = decode_imm16(word) as i64;
    if word & (MOVW_OPC_HI | MOVW_OPC_LO) == 0 {
        !imm
    } else {
        imm
    }
}

// ---------------------------------------------------------------------------------------
// Relocations.
// ---------------------------------------------------------------------------------------

pub(crate) fn classify(r_type: u32) -> Option<RelocClass> {
    Some(match r_type {
        R_AARCH64_NONE => RelocClass::SKIP,
        R_AARCH64_ABS64 | R_AARCH64_PREL64 => RelocClass::data(8),
        R_AARCH64_ABS32 | R_AARCH64_PREL32 => RelocClass::data(4),
        R_AARCH64_ABS16 | R_AARCH64_PREL16 => RelocClass::data(2),
        R_AARCH64_CALL26 | R_AARCH64_JUMP26 => RelocClass::call(4),
        R_AARCH64_ADR_GOT_PAGE | R_AARCH64_LD64_GOT_LO12_NC | R_AARCH64_GOT_LD_PREL19 => {
            RelocClass::got(4)
        }
        R_AARCH64_CONDBR19
        | R_AARCH64_TSTBR14
        | R_AARCH64_LD_PREL_LO19
        | R_AARCH64_ADR_PREL_LO21
        | R_AARCH64_ADR_PREL_PG_HI21
        | R_AARCH64_ADR_PREL_PG_HI21_NC
        | R_AARCH64_ADD_ABS_LO12_NC
        | R_AARCH64_LDST8_ABS_LO12_NC
        | R_AARCH64_LDST16_ABS_LO12_NC
        | R_AARCH64_LDST32_ABS_LO12_NC
        | R_AARCH64_LDST64_ABS_LO12_NC
        | R_AARCH64_LDST128_ABS_LO12_NC
        | R_AARCH64_MOVW_UABS_G0
        | R_AARCH64_MOVW_UABS_G0_NC
        | R_AARCH64_MOVW_UABS_G1
        | R_AARCH64_MOVW_UABS_G1_NC
        | R_AARCH64_MOVW_UABS_G2
        | R_AARCH64_MOVW_UABS_G2_NC
        | R_AARCH64_MOVW_UABS_G3
        | R_AARCH64_MOVW_SABS_G0
        | R_AARCH64_MOVW_SABS_G1
        | R_AARCH64_MOVW_SABS_G2
        | R_AARCH64_MOVW_PREL_G0
        | R_AARCH64_MOVW_PREL_G0_NC
        | R_AARCH64_MOVW_PREL_G1
        | R_AARCH64_MOVW_PREL_G1_NC
        | R_AARCH64_MOVW_PREL_G2
        | R_AARCH64_MOVW_PREL_G2_NC
        | R_AARCH64_MOVW_PREL_G3 => RelocClass::data(4),
        _ => return None,
    })
}

fn missing_slot() -> Failure {
    Failure {
        problem: RelocProblem::MissingSlot,
        value: 0,
    }
}

fn overflow(value: i128, bits: u32, signed: bool) -> Failure {
    Failure {
        problem: RelocProblem::Overflow {
            bits: bits as u8,
            signed,
        },
        value,
    }
}

/// The GOT slot of a GOT-relative relocation: it must exist and the addend be zero (the
/// slot holds S; a GOT entry for S+A is not something we build).
fn got_slot(r: &RelocInput) -> Result<i128, Failure> {
    if r.a != 0 {
        return Err(Failure {
            problem: RelocProblem::Unsupported,
            value: i128::from(r.a),
        });
    }
    r.got_slot.map(i128::from).ok_or_else(missing_slot)
}

/// `x & !0xfff`.
fn page(x: i128) -> i128 {
    x & !0xfff
}

/// Reads the instruction at the place, re-encodes it with `encode`, writes it back.
/// `encode` returning `None` means the range checks before it were incomplete: an error,
/// never a panic and never a partial write.
fn patch(
    place: &mut [u8],
    value: i128,
    encode: impl FnOnce(u32) -> Option<u32>,
) -> Result<(), Failure> {
    let word = read_u32(place).ok_or(short_place(value))?;
    let new = encode(word).ok_or(Failure {
        problem: RelocProblem::Overflow {
            bits: 0,
            signed: true,
        },
        value,
    })?;
    write_u32(place, new).ok_or(short_place(value))
}

/// A PC-relative branch or literal offset into an imm26/19/14 field (`width` is the
/// byte-offset width: 28, 21 or 16).
fn branch(
    place: &mut [u8],
    value: i128,
    width: u32,
    encode: fn(u32, i64) -> Option<u32>,
) -> Result<(), Failure> {
    check_aligned(value, 4)?;
    check_signed(value, width)?;
    patch(place, value, |w| encode(w, value as i64))
}

/// A page delta into an ADRP (checked to ±4 GiB unless `nc`).
fn adrp(place: &mut [u8], delta: i128, nc: bool) -> Result<(), Failure> {
    if !nc {
        check_signed(delta, 33)?;
    }
    let pages = sign_extend(((delta >> 12) as u64) & 0x1f_ffff, 21);
    patch(place, delta, |w| encode_adr(w, pages))
}

/// The low 12 bits of `value` into an imm12 field scaled by `1 << shift`.
fn lo12(place: &mut [u8], value: i128, shift: u32) -> Result<(), Failure> {
    let low = (value & 0xfff) as u64;
    check_aligned(low.into(), 1 << shift).map_err(|f| Failure { value, ..f })?;
    patch(place, value, |w| encode_imm12(w, low, shift))
}

/// Group `group` (bits 16·group and up) of an unsigned MOVW value, range-checked to
/// 16·(group+1) bits unless `nc`.
fn movw_unsigned(place: &mut [u8], value: i128, group: u32, nc: bool) -> Result<(), Failure> {
    if !nc {
        check_unsigned(value, 16 * (group + 1))?;
    }
    let chunk = ((value >> (16 * group)) as u64) & 0xffff;
    patch(place, value, |w| encode_imm16(w, chunk))
}

/// Group `group` of a signed MOVW value (MOVZ/MOVN chosen by sign), range-checked to
/// −2^(16·(group+1)) ≤ X < 2^(16·(group+1)) unless `nc`. The `_NC` forms are MOVKs in
/// practice; a MOVZ/MOVN under one takes the chunk's sign as the instruction's.
fn movw_signed(place: &mut [u8], value: i128, group: u32, nc: bool) -> Result<(), Failure> {
    let width = 16 * (group + 1) + 1;
    if !nc {
        check_signed(value, width)?;
    }
    let shifted = value >> (16 * group);
    patch(place, value, |w| {
        // A MOVK takes the low 16 bits as they are; a MOVZ/MOVN under an unchecked form
        // (or G3, whose chunk is the top of a 64-bit value) its 16 bits and the sign.
        let chunk = if w & MOVW_OPC_LO != 0 {
            (shifted as u64 & 0xffff) as i64
        } else {
            sign_extend(shifted as u64 & 0x1_ffff, 17)
        };
        encode_movw_signed(w, chunk)
    })
}

/// Writes a 64/32/16-bit datum; 32 and 16 must fit signed or unsigned.
fn datum(place: &mut [u8], value: i128, width: u32) -> Result<(), Failure> {
    let v = value as u64;
    let written = match width {
        64 => write_u64(place, v),
        32 if fits_either(value, 32) => write_u32(place, v as u32),
        16 if fits_either(value, 16) => write_u16(place, v as u16),
        _ => return Err(overflow(value, width, false)),
    };
    written.ok_or(short_place(value))
}

pub(crate) fn apply(r: &RelocInput, place: &mut [u8]) -> Result<Applied, Failure> {
    let s = i128::from(r.s);
    let a = i128::from(r.a);
    let p = i128::from(r.p);
    let done = |value, via| Ok(Applied { value, via });
    let direct = |value| done(value, Via::Direct);
    match r.r_type {
        R_AARCH64_NONE => done(0, Via::Nothing),
        R_AARCH64_ABS64 => datum(place, s + a, 64).and_then(|()| direct(s + a)),
        R_AARCH64_ABS32 => datum(place, s + a, 32).and_then(|()| direct(s + a)),
        R_AARCH64_ABS16 => datum(place, s + a, 16).and_then(|()| direct(s + a)),
        R_AARCH64_PREL64 => datum(place, s + a - p, 64).and_then(|()| direct(s + a - p)),
        R_AARCH64_PREL32 => datum(place, s + a - p, 32).and_then(|()| direct(s + a - p)),
        R_AARCH64_PREL16 => datum(place, s + a - p, 16).and_then(|()| direct(s + a - p)),
        // S + A - P into BL/B; beyond ±128 MiB, through the symbol's veneer (only for a
        // zero addend: the veneer reaches S, not S + A).
        R_AARCH64_CALL26 | R_AARCH64_JUMP26 => {
            let v = s + a - p;
            check_aligned(v, 4)?;
            if !fits_signed(v, 28) {
                if let (Some(stub), 0) = (r.stub, r.a) {
                    let v = i128::from(stub) - p;
                    return branch(place, v, 28, encode_imm26).and_then(|()| done(v, Via::Stub));
                }
            }
            branch(place, v, 28, encode_imm26).and_then(|()| direct(v))
        }
        R_AARCH64_CONDBR19 | R_AARCH64_LD_PREL_LO19 => {
            branch(place, s + a - p, 21, encode_imm19).and_then(|()| direct(s + a - p))
        }
        R_AARCH64_TSTBR14 => {
            branch(place, s + a - p, 16, encode_imm14).and_then(|()| direct(s + a - p))
        }
        R_AARCH64_GOT_LD_PREL19 => {
            let v = got_slot(r)? - p;
            branch(place, v, 21, encode_imm19).and_then(|()| done(v, Via::Got))
        }
        R_AARCH64_ADR_PREL_LO21 => {
            let v = s + a - p;
            check_signed(v, 21)?;
            patch(place, v, |w| encode_adr(w, v as i64)).and_then(|()| direct(v))
        }
        R_AARCH64_ADR_PREL_PG_HI21 | R_AARCH64_ADR_PREL_PG_HI21_NC => {
            let v = page(s + a) - page(p);
            adrp(place, v, r.r_type == R_AARCH64_ADR_PREL_PG_HI21_NC).and_then(|()| direct(v))
        }
        R_AARCH64_ADR_GOT_PAGE => {
            let v = page(got_slot(r)?) - page(p);
            adrp(place, v, false).and_then(|()| done(v, Via::Got))
        }
        R_AARCH64_ADD_ABS_LO12_NC | R_AARCH64_LDST8_ABS_LO12_NC => {
            lo12(place, s + a, 0).and_then(|()| direct(s + a))
        }
        R_AARCH64_LDST16_ABS_LO12_NC => lo12(place, s + a, 1).and_then(|()| direct(s + a)),
        R_AARCH64_LDST32_ABS_LO12_NC => lo12(place, s + a, 2).and_then(|()| direct(s + a)),
        R_AARCH64_LDST64_ABS_LO12_NC => lo12(place, s + a, 3).and_then(|()| direct(s + a)),
        R_AARCH64_LDST128_ABS_LO12_NC => lo12(place, s + a, 4).and_then(|()| direct(s + a)),
        R_AARCH64_LD64_GOT_LO12_NC => {
            let g = got_slot(r)?;
            lo12(place, g, 3).and_then(|()| done(g, Via::Got))
        }
        R_AARCH64_MOVW_UABS_G0
        | R_AARCH64_MOVW_UABS_G0_NC
        | R_AARCH64_MOVW_UABS_G1
        | R_AARCH64_MOVW_UABS_G1_NC
        | R_AARCH64_MOVW_UABS_G2
        | R_AARCH64_MOVW_UABS_G2_NC
        | R_AARCH64_MOVW_UABS_G3 => {
            let (group, nc) = match r.r_type {
                R_AARCH64_MOVW_UABS_G0 => (0, false),
                R_AARCH64_MOVW_UABS_G0_NC => (0, true),
                R_AARCH64_MOVW_UABS_G1 => (1, false),
                R_AARCH64_MOVW_UABS_G1_NC => (1, true),
                R_AARCH64_MOVW_UABS_G2 => (2, false),
                R_AARCH64_MOVW_UABS_G2_NC => (2, true),
                // G3: bits 63..48 of a 64-bit address; any 64-bit value has them.
                _ => (3, true),
            };
            movw_unsigned(place, s + a, group, nc).and_then(|()| direct(s + a))
        }
        R_AARCH64_MOVW_SABS_G0 | R_AARCH64_MOVW_SABS_G1 | R_AARCH64_MOVW_SABS_G2 => {
            let group = r.r_type - R_AARCH64_MOVW_SABS_G0;
            movw_signed(place, s + a, group, false).and_then(|()| direct(s + a))
        }
        R_AARCH64_MOVW_PREL_G0
        | R_AARCH64_MOVW_PREL_G0_NC
        | R_AARCH64_MOVW_PREL_G1
        | R_AARCH64_MOVW_PREL_G1_NC
        | R_AARCH64_MOVW_PREL_G2
        | R_AARCH64_MOVW_PREL_G2_NC
        | R_AARCH64_MOVW_PREL_G3 => {
            // G0, G0_NC, G1, G1_NC, G2, G2_NC, G3 are consecutive.
            let index = r.r_type - R_AARCH64_MOVW_PREL_G0;
            let (group, nc) = (index / 2, index % 2 == 1 || index == 6);
            movw_signed(place, s + a - p, group, nc).and_then(|()| direct(s + a - p))
        }
        _ => Err(Failure {
            problem: RelocProblem::Unsupported,
            value: 0,
        }),
    }
}

pub(crate) fn reloc_name(r_type: u32) -> &'static str {
    match r_type {
        R_AARCH64_NONE => "R_AARCH64_NONE",
        R_AARCH64_ABS64 => "R_AARCH64_ABS64",
        R_AARCH64_ABS32 => "R_AARCH64_ABS32",
        R_AARCH64_ABS16 => "R_AARCH64_ABS16",
        R_AARCH64_PREL64 => "R_AARCH64_PREL64",
        R_AARCH64_PREL32 => "R_AARCH64_PREL32",
        R_AARCH64_PREL16 => "R_AARCH64_PREL16",
        R_AARCH64_MOVW_UABS_G0 => "R_AARCH64_MOVW_UABS_G0",
        R_AARCH64_MOVW_UABS_G0_NC => "R_AARCH64_MOVW_UABS_G0_NC",
        R_AARCH64_MOVW_UABS_G1 => "R_AARCH64_MOVW_UABS_G1",
        R_AARCH64_MOVW_UABS_G1_NC => "R_AARCH64_MOVW_UABS_G1_NC",
        R_AARCH64_MOVW_UABS_G2 => "R_AARCH64_MOVW_UABS_G2",
        R_AARCH64_MOVW_UABS_G2_NC => "R_AARCH64_MOVW_UABS_G2_NC",
        R_AARCH64_MOVW_UABS_G3 => "R_AARCH64_MOVW_UABS_G3",
        R_AARCH64_MOVW_SABS_G0 => "R_AARCH64_MOVW_SABS_G0",
        R_AARCH64_MOVW_SABS_G1 => "R_AARCH64_MOVW_SABS_G1",
        R_AARCH64_MOVW_SABS_G2 => "R_AARCH64_MOVW_SABS_G2",
        R_AARCH64_LD_PREL_LO19 => "R_AARCH64_LD_PREL_LO19",
        R_AARCH64_ADR_PREL_LO21 => "R_AARCH64_ADR_PREL_LO21",
        R_AARCH64_ADR_PREL_PG_HI21 => "R_AARCH64_ADR_PREL_PG_HI21",
        R_AARCH64_ADR_PREL_PG_HI21_NC => "R_AARCH64_ADR_PREL_PG_HI21_NC",
        R_AARCH64_ADD_ABS_LO12_NC => "R_AARCH64_ADD_ABS_LO12_NC",
        R_AARCH64_LDST8_ABS_LO12_NC => "R_AARCH64_LDST8_ABS_LO12_NC",
        R_AARCH64_TSTBR14 => "R_AARCH64_TSTBR14",
        R_AARCH64_CONDBR19 => "R_AARCH64_CONDBR19",
        R_AARCH64_JUMP26 => "R_AARCH64_JUMP26",
        R_AARCH64_CALL26 => "R_AARCH64_CALL26",
        R_AARCH64_LDST16_ABS_LO12_NC => "R_AARCH64_LDST16_ABS_LO12_NC",
        R_AARCH64_LDST32_ABS_LO12_NC => "R_AARCH64_LDST32_ABS_LO12_NC",
        R_AARCH64_LDST64_ABS_LO12_NC => "R_AARCH64_LDST64_ABS_LO12_NC",
        R_AARCH64_MOVW_PREL_G0 => "R_AARCH64_MOVW_PREL_G0",
        R_AARCH64_MOVW_PREL_G0_NC => "R_AARCH64_MOVW_PREL_G0_NC",
        R_AARCH64_MOVW_PREL_G1 => "R_AARCH64_MOVW_PREL_G1",
        R_AARCH64_MOVW_PREL_G1_NC => "R_AARCH64_MOVW_PREL_G1_NC",
        R_AARCH64_MOVW_PREL_G2 => "R_AARCH64_MOVW_PREL_G2",
        R_AARCH64_MOVW_PREL_G2_NC => "R_AARCH64_MOVW_PREL_G2_NC",
        R_AARCH64_MOVW_PREL_G3 => "R_AARCH64_MOVW_PREL_G3",
        R_AARCH64_LDST128_ABS_LO12_NC => "R_AARCH64_LDST128_ABS_LO12_NC",
        R_AARCH64_MOVW_GOTOFF_G0 => "R_AARCH64_MOVW_GOTOFF_G0",
        R_AARCH64_MOVW_GOTOFF_G0_NC => "R_AARCH64_MOVW_GOTOFF_G0_NC",
        R_AARCH64_MOVW_GOTOFF_G1 => "R_AARCH64_MOVW_GOTOFF_G1",
        R_AARCH64_MOVW_GOTOFF_G1_NC => "R_AARCH64_MOVW_GOTOFF_G1_NC",
        R_AARCH64_MOVW_GOTOFF_G2 => "R_AARCH64_MOVW_GOTOFF_G2",
        R_AARCH64_MOVW_GOTOFF_G2_NC => "R_AARCH64_MOVW_GOTOFF_G2_NC",
        R_AARCH64_MOVW_GOTOFF_G3 => "R_AARCH64_MOVW_GOTOFF_G3",
        R_AARCH64_GOTREL64 => "R_AARCH64_GOTREL64",
        R_AARCH64_GOTREL32 => "R_AARCH64_GOTREL32",
        R_AARCH64_GOT_LD_PREL19 => "R_AARCH64_GOT_LD_PREL19",
        R_AARCH64_LD64_GOTOFF_LO15 => "R_AARCH64_LD64_GOTOFF_LO15",
        R_AARCH64_ADR_GOT_PAGE => "R_AARCH64_ADR_GOT_PAGE",
        R_AARCH64_LD64_GOT_LO12_NC => "R_AARCH64_LD64_GOT_LO12_NC",
        R_AARCH64_LD64_GOTPAGE_LO15 => "R_AARCH64_LD64_GOTPAGE_LO15",
        R_AARCH64_TLSGD_ADR_PREL21 => "R_AARCH64_TLSGD_ADR_PREL21",
        R_AARCH64_TLSGD_ADR_PAGE21 => "R_AARCH64_TLSGD_ADR_PAGE21",
        R_AARCH64_TLSGD_ADD_LO12_NC => "R_AARCH64_TLSGD_ADD_LO12_NC",
        R_AARCH64_TLSLD_ADR_PAGE21 => "R_AARCH64_TLSLD_ADR_PAGE21",
        R_AARCH64_TLSIE_ADR_GOTTPREL_PAGE21 => "R_AARCH64_TLSIE_ADR_GOTTPREL_PAGE21",
        R_AARCH64_TLSIE_LD64_GOTTPREL_LO12_NC => "R_AARCH64_TLSIE_LD64_GOTTPREL_LO12_NC",
        R_AARCH64_TLSLE_ADD_TPREL_HI12 => "R_AARCH64_TLSLE_ADD_TPREL_HI12",
        R_AARCH64_TLSLE_ADD_TPREL_LO12_NC => "R_AARCH64_TLSLE_ADD_TPREL_LO12_NC",
        R_AARCH64_TLSDESC_ADR_PAGE21 => "R_AARCH64_TLSDESC_ADR_PAGE21",
        R_AARCH64_TLSDESC_LD64_LO12 => "R_AARCH64_TLSDESC_LD64_LO12",
        R_AARCH64_TLSDESC_ADD_LO12 => "R_AARCH64_TLSDESC_ADD_LO12",
        R_AARCH64_TLSDESC_CALL => "R_AARCH64_TLSDESC_CALL",
        R_AARCH64_COPY => "R_AARCH64_COPY",
        R_AARCH64_GLOB_DAT => "R_AARCH64_GLOB_DAT",
        R_AARCH64_JUMP_SLOT => "R_AARCH64_JUMP_SLOT",
        R_AARCH64_RELATIVE => "R_AARCH64_RELATIVE",
        R_AARCH64_TLS_DTPMOD => "R_AARCH64_TLS_DTPMOD",
        R_AARCH64_TLS_DTPREL => "R_AARCH64_TLS_DTPREL",
        R_AARCH64_TLS_TPREL => "R_AARCH64_TLS_TPREL",
        R_AARCH64_TLSDESC => "R_AARCH64_TLSDESC",
        R_AARCH64_IRELATIVE => "R_AARCH64_IRELATIVE",
        _ => "unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bits::{mask, read_u16, read_u64};
    use proptest::prelude::*;
    use proptest::test_runner::TestCaseError;

    const BL: u32 = 0x9400_0000;
    const B: u32 = 0x1400_0000;
    const B_EQ: u32 = 0x5400_0000;
    const CBZ_X0: u32 = 0xb400_0000;
    const LDR_X0_LIT: u32 = 0x5800_0000;
    const TBZ: u32 = 0x3600_0000;
    const ADR_X0: u32 = 0x1000_0000;
    const ADRP_X0: u32 = 0x9000_0000;
    const ADD_X0: u32 = 0x9100_0000;
    const LDRB: u32 = 0x3940_0000;
    const LDRH: u32 = 0x7940_0000;
    const LDR_W: u32 = 0xb940_0000;
    const LDR_X: u32 = 0xf940_0000;
    const LDR_Q: u32 = 0x3dc0_0000;
    const MOVZ_X0: u32 = 0xd280_0000;
    const MOVN_X0: u32 = 0x9280_0000;
    const MOVK_X0: u32 = 0xf280_0000;

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

    /// A 16-byte buffer of 0xAA with `word` at offset 4 (an 8-byte field spans 4..12).
    fn buffer(word: u32) -> [u8; 16] {
        let [a, b, c, d] = word.to_le_bytes();
        let x = 0xAA;
        [x, x, x, x, a, b, c, d, x, x, x, x, x, x, x, x]
    }

    /// Applies `r` to a buffer holding `word` at offset 4.
    fn run(r: &RelocInput, word: u32) -> (Result<Applied, Failure>, [u8; 16]) {
        let mut buf = buffer(word);
        let result = match buf.get_mut(4..) {
            Some(place) => apply(r, place),
            None => Err(short_place(0)),
        };
        (result, buf)
    }

    fn field32(buf: &[u8; 16]) -> u32 {
        let [_, _, _, _, a, b, c, d, ..] = *buf;
        u32::from_le_bytes([a, b, c, d])
    }

    fn field64(buf: &[u8; 16]) -> Option<u64> {
        read_u64(buf.get(4..)?)
    }

    fn is_overflow<T>(result: &Result<T, Failure>, bits: u8, signed: bool) -> bool {
        matches!(result, Err(Failure { problem: RelocProblem::Overflow { bits: b, signed: s }, .. }) if *b == bits && *s == signed)
    }

    fn is_misaligned<T>(result: &Result<T, Failure>, align: u8) -> bool {
        matches!(result, Err(Failure { problem: RelocProblem::Misaligned { align: a }, .. }) if *a == align)
    }

    /// Applies and returns the patched word, or the failure (checking that a failure left
    /// every byte as it was).
    fn patched(r: &RelocInput, word: u32) -> Result<(Applied, u32), Failure> {
        let (result, buf) = run(r, word);
        match result {
            Ok(applied) => {
                assert_eq!(buf.get(..4), Some(&[0xAA; 4][..]));
                assert_eq!(buf.get(8..), Some(&[0xAA; 8][..]));
                Ok((applied, field32(&buf)))
            }
            Err(failure) => {
                assert_eq!(buf, buffer(word), "nothing written on failure");
                Err(failure)
            }
        }
    }

    // ---- calls and branches -------------------------------------------------------------

    #[test]
    fn call26_reaches_128_mib_and_no_further() {
        let p = 0x1000_0000u64;
        for r_type in [R_AARCH64_CALL26, R_AARCH64_JUMP26] {
            let max = p + (1 << 27) - 4;
            let ok = patched(&input(r_type, max, 0, p), BL);
            assert!(
                matches!(ok, Ok((Applied { via: Via::Direct, .. }, w)) if decode_imm26(w) == (1 << 27) - 4 && w & !0x3ff_ffff == BL)
            );
            let min = p - (1 << 27);
            let ok = patched(&input(r_type, min, 0, p), B);
            assert!(
                matches!(ok, Ok((_, w)) if decode_imm26(w) == -(1 << 27) && w & !0x3ff_ffff == B)
            );
            let err = run(&input(r_type, max + 4, 0, p), BL).0;
            assert!(is_overflow(&err, 28, true));
            assert!(patched(&input(r_type, min - 4, 0, p), BL).is_err());
            let err = patched(&input(r_type, p + 2, 0, p), BL);
            assert!(matches!(
                err,
                Err(Failure {
                    problem: RelocProblem::Misaligned { align: 4 },
                    value: 2
                })
            ));
        }
    }

    #[test]
    fn far_calls_go_through_the_veneer_near_ones_do_not() {
        let p = 0x40_0000u64;
        let stub = p + 0x1000;
        let far = input(R_AARCH64_CALL26, 0x7fff_0000_0000, 0, p);
        let with_stub = RelocInput {
            stub: Some(stub),
            ..far
        };
        let ok = patched(&with_stub, BL);
        assert!(
            matches!(ok, Ok((Applied { value: 0x1000, via: Via::Stub }, w)) if decode_imm26(w) == 0x1000)
        );
        let near = RelocInput {
            s: p + 0x2000,
            ..with_stub
        };
        assert!(matches!(
            patched(&near, BL),
            Ok((
                Applied {
                    via: Via::Direct,
                    ..
                },
                _
            ))
        ));
        assert!(
            is_overflow(&patched(&far, BL), 28, true),
            "no stub: an error"
        );
        // A non-zero addend cannot go through a veneer that reaches S.
        let offset = RelocInput { a: 8, ..with_stub };
        assert!(is_overflow(&patched(&offset, BL), 28, true));
        // The veneer itself out of reach is an error too.
        let far_stub = RelocInput {
            stub: Some(p + (1 << 27)),
            ..far
        };
        assert!(is_overflow(&patched(&far_stub, BL), 28, true));
    }

    #[test]
    fn imm19_and_imm14_boundaries() {
        let p = 0x10_0000_0000u64;
        for (r_type, word) in [
            (R_AARCH64_CONDBR19, B_EQ),
            (R_AARCH64_CONDBR19, CBZ_X0),
            (R_AARCH64_LD_PREL_LO19, LDR_X0_LIT),
        ] {
            let max = patched(&input(r_type, p + (1 << 20) - 4, 0, p), word);
            assert!(matches!(max, Ok((_, w)) if decode_imm19(w) == (1 << 20) - 4));
            let min = patched(&input(r_type, p, -(1 << 20), p), word);
            assert!(matches!(min, Ok((_, w)) if decode_imm19(w) == -(1 << 20)));
            assert!(is_overflow(
                &patched(&input(r_type, p + (1 << 20), 0, p), word),
                21,
                true
            ));
            assert!(is_overflow(
                &patched(&input(r_type, p, -(1 << 20) - 4, p), word),
                21,
                true
            ));
            assert!(is_misaligned(
                &patched(&input(r_type, p + 6, 0, p), word),
                4
            ));
        }
        let r_type = R_AARCH64_TSTBR14;
        let max = patched(&input(r_type, p + (1 << 15) - 4, 0, p), TBZ);
        assert!(matches!(max, Ok((_, w)) if decode_imm14(w) == (1 << 15) - 4));
        let min = patched(&input(r_type, p - (1 << 15), 0, p), TBZ);
        assert!(matches!(min, Ok((_, w)) if decode_imm14(w) == -(1 << 15)));
        assert!(is_overflow(
            &patched(&input(r_type, p + (1 << 15), 0, p), TBZ),
            16,
            true
        ));
        assert!(is_overflow(
            &patched(&input(r_type, p - (1 << 15) - 4, 0, p), TBZ),
            16,
            true
        ));
        assert!(is_misaligned(&patched(&input(r_type, p + 1, 0, p), TBZ), 4));
    }

    // ---- ADR / ADRP -------------------------------------------------------------------

    #[test]
    fn adr_reaches_one_mib_either_way() {
        let p = 0x5000_0003u64;
        let r_type = R_AARCH64_ADR_PREL_LO21;
        let max = patched(&input(r_type, p + (1 << 20) - 1, 0, p), ADR_X0);
        assert!(
            matches!(max, Ok((_, w)) if decode_adr(w) == (1 << 20) - 1 && w & 0x9f00_001f == ADR_X0)
        );
        let min = patched(&input(r_type, p - (1 << 20), 0, p), ADR_X0);
        assert!(matches!(min, Ok((_, w)) if decode_adr(w) == -(1 << 20)));
        assert!(is_overflow(
            &patched(&input(r_type, p + (1 << 20), 0, p), ADR_X0),
            21,
            true
        ));
        assert!(is_overflow(
            &patched(&input(r_type, p - (1 << 20) - 1, 0, p), ADR_X0),
            21,
            true
        ));
    }

    #[test]
    fn adrp_reaches_4_gib_of_pages() {
        let p = 0x1_0000_0000u64 + 0x123;
        let r_type = R_AARCH64_ADR_PREL_PG_HI21;
        // The last page forward: Page(S) - Page(P) = 4 GiB - 4 KiB.
        let s_max = 0x1_0000_0000 + (1u64 << 32) - 0x1000 + 0xfff;
        let max = patched(&input(r_type, s_max, 0, p), ADRP_X0);
        assert!(
            matches!(max, Ok((Applied { value, .. }, w)) if value == (1 << 32) - 0x1000 && decode_adr(w) == (1 << 20) - 1)
        );
        let min = patched(&input(r_type, 0, 0, p), ADRP_X0);
        assert!(matches!(min, Ok((_, w)) if decode_adr(w) == -(1 << 20)));
        let over = patched(&input(r_type, s_max + 1, 0, p), ADRP_X0);
        assert!(
            matches!(over, Err(Failure { problem: RelocProblem::Overflow { bits: 33, signed: true }, value }) if value == 1 << 32)
        );
        let under = patched(&input(r_type, 0, -1, p), ADRP_X0);
        assert!(is_overflow(&under, 33, true));
        // _NC takes the same page count without the check.
        let nc = patched(
            &input(R_AARCH64_ADR_PREL_PG_HI21_NC, s_max + 1, 0, p),
            ADRP_X0,
        );
        assert!(matches!(nc, Ok((_, w)) if decode_adr(w) == -(1 << 20)));
        // Page arithmetic: same page is 0, next page 1, regardless of the low bits.
        let same = patched(&input(r_type, p - 0x123 + 0xfff, 0, p), ADRP_X0);
        assert!(matches!(same, Ok((_, w)) if decode_adr(w) == 0));
        let next = patched(&input(r_type, p - 0x123, 0x1000, p), ADRP_X0);
        assert!(matches!(next, Ok((_, w)) if decode_adr(w) == 1));
    }

    // ---- LO12 forms ------------------------------------------------------------------

    #[test]
    fn lo12_forms_scale_and_check_alignment() {
        let s = 0x1234_5000u64;
        let cases = [
            (R_AARCH64_ADD_ABS_LO12_NC, ADD_X0, 0u32),
            (R_AARCH64_LDST8_ABS_LO12_NC, LDRB, 0),
            (R_AARCH64_LDST16_ABS_LO12_NC, LDRH, 1),
            (R_AARCH64_LDST32_ABS_LO12_NC, LDR_W, 2),
            (R_AARCH64_LDST64_ABS_LO12_NC, LDR_X, 3),
            (R_AARCH64_LDST128_ABS_LO12_NC, LDR_Q, 4),
        ];
        for (r_type, word, shift) in cases {
            let size = 1u64 << shift;
            let last = 0x1000 - size;
            let ok = patched(&input(r_type, s + last, 0, 0), word);
            assert!(
                matches!(ok, Ok((_, w)) if decode_imm12(w, shift) == last && w & !(0xfff << 10) == word),
                "{}",
                reloc_name(r_type)
            );
            // Bits above the low 12 are ignored (the ADRP carries them).
            let ok = patched(&input(r_type, s, 0x1000 + i64::from(size as u8), 0), word);
            assert!(matches!(ok, Ok((_, w)) if decode_imm12(w, shift) == size));
            if size > 1 {
                let err = patched(&input(r_type, s + size / 2, 0, 0), word);
                assert!(is_misaligned(&err, size as u8), "{}", reloc_name(r_type));
            }
        }
    }

    #[test]
    fn got_forms_use_the_slot() {
        let p = 0x40_0000u64;
        let slot = 0x48_1238u64;
        let with = |r_type| RelocInput {
            got_slot: Some(slot),
            ..input(r_type, 0xdead_beef_0000, 0, p)
        };
        let page = patched(&with(R_AARCH64_ADR_GOT_PAGE), ADRP_X0);
        assert!(matches!(page, Ok((Applied { via: Via::Got, .. }, w)) if decode_adr(w) == 0x81));
        let lo = patched(&with(R_AARCH64_LD64_GOT_LO12_NC), LDR_X);
        assert!(
            matches!(lo, Ok((Applied { via: Via::Got, .. }, w)) if decode_imm12(w, 3) == 0x238)
        );
        let lit = patched(&with(R_AARCH64_GOT_LD_PREL19), LDR_X0_LIT);
        assert!(matches!(lit, Ok((_, w)) if decode_imm19(w) == 0x8_1238));
        let misaligned = RelocInput {
            got_slot: Some(slot + 4),
            ..with(R_AARCH64_LD64_GOT_LO12_NC)
        };
        assert!(is_misaligned(&patched(&misaligned, LDR_X), 8));
        for r_type in [
            R_AARCH64_ADR_GOT_PAGE,
            R_AARCH64_LD64_GOT_LO12_NC,
            R_AARCH64_GOT_LD_PREL19,
        ] {
            let none = RelocInput {
                got_slot: None,
                ..with(r_type)
            };
            assert!(matches!(
                patched(&none, ADRP_X0),
                Err(Failure {
                    problem: RelocProblem::MissingSlot,
                    ..
                })
            ));
            let addend = RelocInput {
                a: 8,
                ..with(r_type)
            };
            assert!(matches!(
                patched(&addend, ADRP_X0),
                Err(Failure {
                    problem: RelocProblem::Unsupported,
                    value: 8
                })
            ));
            assert!(classify(r_type).is_some_and(|c| c.got));
        }
        let far = RelocInput {
            got_slot: Some(p + (1 << 32)),
            ..with(R_AARCH64_ADR_GOT_PAGE)
        };
        assert!(is_overflow(&patched(&far, ADRP_X0), 33, true));
    }

    // ---- MOVW ------------------------------------------------------------------------

    #[test]
    fn movw_unsigned_groups() {
        let v = 0x1234_5678_9abc_def0u64;
        for (r_type, chunk) in [
            (R_AARCH64_MOVW_UABS_G0_NC, 0xdef0),
            (R_AARCH64_MOVW_UABS_G1_NC, 0x9abc),
            (R_AARCH64_MOVW_UABS_G2_NC, 0x5678),
            (R_AARCH64_MOVW_UABS_G3, 0x1234),
        ] {
            let ok = patched(&input(r_type, v, 0, 0), MOVK_X0);
            assert!(
                matches!(ok, Ok((_, w)) if decode_imm16(w) == chunk && w & !(0xffff << 5) == MOVK_X0)
            );
        }
        for (r_type, group) in [
            (R_AARCH64_MOVW_UABS_G0, 0u32),
            (R_AARCH64_MOVW_UABS_G1, 1),
            (R_AARCH64_MOVW_UABS_G2, 2),
        ] {
            let last = mask(16 * (group + 1));
            let ok = patched(&input(r_type, last, 0, 0), MOVZ_X0);
            assert!(matches!(ok, Ok((_, w)) if decode_imm16(w) == 0xffff));
            let err = patched(&input(r_type, last + 1, 0, 0), MOVZ_X0);
            assert!(is_overflow(&err, 16 * (group as u8 + 1), false));
            assert!(is_overflow(
                &patched(&input(r_type, 0, -1, 0), MOVZ_X0),
                16 * (group as u8 + 1),
                false
            ));
        }
    }

    #[test]
    fn movw_signed_picks_movz_or_movn() {
        let r_type = R_AARCH64_MOVW_SABS_G0;
        let neg = patched(&input(r_type, 0, -1, 0), MOVZ_X0);
        assert!(matches!(neg, Ok((_, w)) if w == MOVN_X0 && decode_movw_signed(w) == -1));
        let pos = patched(&input(r_type, 5, 0, 0), MOVN_X0);
        assert!(matches!(pos, Ok((_, w)) if w == MOVZ_X0 | (5 << 5)));
        let max = patched(&input(r_type, 0xffff, 0, 0), MOVZ_X0);
        assert!(matches!(max, Ok((_, w)) if decode_movw_signed(w) == 0xffff));
        let min = patched(&input(r_type, 0, -0x1_0000, 0), MOVZ_X0);
        assert!(
            matches!(min, Ok((_, w)) if decode_movw_signed(w) == -0x1_0000 && w & MOVW_OPC_HI == 0)
        );
        assert!(is_overflow(
            &patched(&input(r_type, 0x1_0000, 0, 0), MOVZ_X0),
            17,
            true
        ));
        assert!(is_overflow(
            &patched(&input(r_type, 0, -0x1_0001, 0), MOVZ_X0),
            17,
            true
        ));
        // G1 of -0x2_0000 is MOVN #1 (lsl 16): ~(1 << 16) + 1 ... i.e. -(2 << 16).
        let g1 = patched(&input(R_AARCH64_MOVW_SABS_G1, 0, -0x2_0000, 0), MOVZ_X0);
        assert!(matches!(g1, Ok((_, w)) if decode_movw_signed(w) == -2));
        assert!(is_overflow(
            &patched(&input(R_AARCH64_MOVW_SABS_G2, 1 << 48, 0, 0), MOVZ_X0),
            49,
            true
        ));
    }

    #[test]
    fn movw_prel_groups_and_nc() {
        let p = 0x10_0000_0000u64;
        // S - P = -0x2345_6789: G1 checks 33 signed bits.
        let s = p - 0x2345_6789;
        let g1 = patched(&input(R_AARCH64_MOVW_PREL_G1, s, 0, p), MOVZ_X0);
        assert!(matches!(g1, Ok((_, w)) if decode_movw_signed(w) == -0x2346));
        let g0 = patched(&input(R_AARCH64_MOVW_PREL_G0_NC, s, 0, p), MOVK_X0);
        assert!(matches!(g0, Ok((_, w)) if decode_imm16(w) == (-0x2345_6789i64 as u64 & 0xffff)));
        assert!(is_overflow(
            &patched(&input(R_AARCH64_MOVW_PREL_G0, s, 0, p), MOVZ_X0),
            17,
            true
        ));
        let g2nc = patched(&input(R_AARCH64_MOVW_PREL_G2_NC, s, 0, p), MOVK_X0);
        assert!(matches!(g2nc, Ok((_, w)) if decode_imm16(w) == 0xffff));
        let g3 = patched(&input(R_AARCH64_MOVW_PREL_G3, s, 0, p), MOVZ_X0);
        assert!(matches!(g3, Ok((_, w)) if decode_movw_signed(w) == -1));
        let g2 = patched(&input(R_AARCH64_MOVW_PREL_G2, p + (1 << 48), 0, p), MOVZ_X0);
        assert!(is_overflow(&g2, 49, true));
        let g1 = patched(
            &input(R_AARCH64_MOVW_PREL_G1, p - (1 << 32) - 1, 0, p),
            MOVZ_X0,
        );
        assert!(is_overflow(&g1, 33, true));
        let g1 = patched(&input(R_AARCH64_MOVW_PREL_G1, p - (1 << 32), 0, p), MOVZ_X0);
        assert!(matches!(g1, Ok((_, w)) if decode_movw_signed(w) == -0x1_0000));
    }

    // ---- data ------------------------------------------------------------------------

    #[test]
    fn data_fields_fit_signed_or_unsigned() {
        let p = 0x8000_0000u64;
        let (ok, buf) = run(&input(R_AARCH64_ABS64, u64::MAX, 1, 0), 0);
        assert!(ok.is_ok());
        assert_eq!(field64(&buf), Some(0));
        let (ok, buf) = run(&input(R_AARCH64_PREL64, 0, 0, p), 0);
        assert!(ok.is_ok());
        assert_eq!(field64(&buf), Some((-(p as i64)) as u64));
        for r_type in [R_AARCH64_ABS32, R_AARCH64_PREL32] {
            let base = if r_type == R_AARCH64_PREL32 { p } else { 0 };
            let at = |v: i64| input(r_type, base, v, base);
            assert!(patched(&at(u32::MAX as i64), 0).is_ok_and(|(_, w)| w == u32::MAX));
            assert!(patched(&at(i32::MIN as i64), 0).is_ok_and(|(_, w)| w == 0x8000_0000));
            assert!(is_overflow(
                &patched(&at(u32::MAX as i64 + 1), 0),
                32,
                false
            ));
            assert!(is_overflow(
                &patched(&at(i32::MIN as i64 - 1), 0),
                32,
                false
            ));
        }
        for r_type in [R_AARCH64_ABS16, R_AARCH64_PREL16] {
            let base = if r_type == R_AARCH64_PREL16 { p } else { 0 };
            let at = |v: i64| input(r_type, base, v, base);
            let (ok, buf) = run(&at(0xffff), 0x1234_5678);
            assert!(ok.is_ok());
            assert_eq!(buf.get(4..).and_then(read_u16), Some(0xffff));
            assert_eq!(field32(&buf) >> 16, 0x1234, "the bytes after the field");
            assert!(patched(&at(-0x8000), 0).is_ok_and(|(_, w)| w == 0x8000));
            assert!(is_overflow(&patched(&at(0x1_0000), 0), 16, false));
            assert!(is_overflow(&patched(&at(-0x8001), 0), 16, false));
        }
    }

    #[test]
    fn short_places_are_errors() {
        for r_type in [R_AARCH64_CALL26, R_AARCH64_ABS64, R_AARCH64_ABS16] {
            let mut buf = [0u8; 1];
            assert!(apply(&input(r_type, 0, 0, 0), &mut buf).is_err());
            assert_eq!(buf, [0]);
        }
    }

    #[test]
    fn veneer_loads_and_branches_to_its_target() {
        let mut buf = [0u8; 16];
        let stub = StubInput {
            address: 0x1000,
            target: 0x1122_3344_5566_7788,
            got_slot: None,
            got_base: 0,
        };
        assert!(write_stub(&mut buf, &stub).is_some());
        assert_eq!(read_u32(&buf), Some(LDR_X16_PC8));
        assert_eq!(read_u32(&buf).map(decode_imm19), Some(8), "literal at +8");
        assert_eq!(buf.get(4..).and_then(read_u32), Some(BR_X16));
        assert_eq!(buf.get(8..).and_then(read_u64), Some(0x1122_3344_5566_7788));
        assert!(write_stub(&mut [0u8; 15], &stub).is_none());
    }

    #[test]
    fn every_classified_type_has_a_name_and_applies() {
        let mut classified = 0;
        for r_type in 0..1100 {
            let Some(class) = classify(r_type) else {
                assert_eq!(
                    apply(&input(r_type, 0, 0, 0), &mut [0u8; 8]).map_err(|f| f.problem),
                    Err(RelocProblem::Unsupported)
                );
                continue;
            };
            classified += 1;
            assert_ne!(reloc_name(r_type), "unknown", "{r_type}");
            let r = RelocInput {
                got_slot: Some(0x100),
                stub: Some(0x80),
                ..input(r_type, 0x40, 0, 0x20)
            };
            let mut buf = [0u8; 8];
            assert!(apply(&r, &mut buf).is_ok(), "{}", reloc_name(r_type));
            assert!(class.width <= 8 && (class.width > 0 || class.skip));
        }
        assert_eq!(classified, 41);
    }

    // ---- property tests for every encoder ----------------------------------------------

    /// Round trip, the last offsets in range, the first out of range, misalignment, and
    /// no bit outside the field changed, for a scaled PC-relative field of `width` bits of
    /// byte offset.
    fn branch_field(
        encode: fn(u32, i64) -> Option<u32>,
        decode: fn(u32) -> i64,
        width: u32,
        field: u32,
        word: u32,
        k: i64,
    ) -> Result<(), TestCaseError> {
        let max = (1i64 << (width - 1)) - 4;
        let min = -(1i64 << (width - 1));
        let offset = (k << 2).clamp(min, max);
        let w = encode(word, offset);
        prop_assert!(w.is_some());
        let w = w.unwrap_or(0);
        prop_assert_eq!(decode(w), offset);
        prop_assert_eq!(w & !field, word & !field);
        for edge in [max, min] {
            prop_assert_eq!(encode(word, edge).map(decode), Some(edge));
        }
        prop_assert_eq!(encode(word, max + 4), None);
        prop_assert_eq!(encode(word, min - 4), None);
        prop_assert_eq!(encode(word, offset | 1), None);
        prop_assert_eq!(encode(word, offset | 2), None);
        Ok(())
    }

    proptest! {
        #[test]
        fn imm26_encoding(word in any::<u32>(), k in any::<i32>()) {
            branch_field(encode_imm26, decode_imm26, 28, 0x03ff_ffff, word, i64::from(k))?;
        }

        #[test]
        fn imm19_encoding(word in any::<u32>(), k in -(1i64 << 18)..(1 << 18)) {
            branch_field(encode_imm19, decode_imm19, 21, 0x7_ffff << 5, word, k)?;
        }

        #[test]
        fn imm14_encoding(word in any::<u32>(), k in -(1i64 << 13)..(1 << 13)) {
            branch_field(encode_imm14, decode_imm14, 16, 0x3fff << 5, word, k)?;
        }

        #[test]
        fn adr_encoding(word in any::<u32>(), imm in -(1i64 << 20)..(1 << 20)) {
            let field = (0x7_ffff << 5) | (3 << 29);
            let w = encode_adr(word, imm);
            prop_assert_eq!(w.map(decode_adr), Some(imm));
            prop_assert_eq!(w.map(|w| w & !field), Some(word & !field));
            prop_assert_eq!(encode_adr(word, (1 << 20) - 1).map(decode_adr), Some((1 << 20) - 1));
            prop_assert_eq!(encode_adr(word, -(1 << 20)).map(decode_adr), Some(-(1 << 20)));
            prop_assert_eq!(encode_adr(word, 1 << 20), None);
            prop_assert_eq!(encode_adr(word, -(1 << 20) - 1), None);
        }

        #[test]
        fn imm12_encoding(word in any::<u32>(), v in 0u64..0x1000, shift in 0u32..=4) {
            let field = 0xfff << 10;
            let aligned = v & !mask(shift);
            let w = encode_imm12(word, aligned, shift);
            prop_assert_eq!(w.map(|w| decode_imm12(w, shift)), Some(aligned));
            prop_assert_eq!(w.map(|w| w & !field), Some(word & !field));
            let last = 0x1000 - (1 << shift);
            prop_assert_eq!(encode_imm12(word, last, shift).map(|w| decode_imm12(w, shift)), Some(last));
            prop_assert_eq!(encode_imm12(word, 0x1000, shift), None);
            if shift > 0 {
                prop_assert_eq!(encode_imm12(word, aligned | 1 << (shift - 1), shift), None);
            }
        }

        #[test]
        fn imm16_encoding(word in any::<u32>(), chunk in 0u64..0x1_0000) {
            let field = 0xffff << 5;
            let w = encode_imm16(word, chunk);
            prop_assert_eq!(w.map(decode_imm16), Some(chunk));
            prop_assert_eq!(w.map(|w| w & !field), Some(word & !field));
            prop_assert_eq!(encode_imm16(word, 0xffff).map(decode_imm16), Some(0xffff));
            prop_assert_eq!(encode_imm16(word, 0x1_0000), None);
        }

        /// MOVZ/MOVN: the chunk's sign picks the opcode; only bit 30 and imm16 change.
        #[test]
        fn movw_signed_encoding(rd in 0u32..32, hw in 0u32..4, n in any::<bool>(), chunk in -0x1_0000i64..0x1_0000) {
            let word = if n { MOVN_X0 } else { MOVZ_X0 } | hw << 21 | rd;
            let w = encode_movw_signed(word, chunk);
            prop_assert_eq!(w.map(decode_movw_signed), Some(chunk));
            prop_assert_eq!(w.map(|w| w & !(0xffff << 5 | MOVW_OPC_HI)), Some(word & !(0xffff << 5 | MOVW_OPC_HI)));
            prop_assert_eq!(w.map(|w| w & MOVW_OPC_HI == 0), Some(chunk < 0));
            prop_assert_eq!(encode_movw_signed(word, 0x1_0000), None);
            prop_assert_eq!(encode_movw_signed(word, -0x1_0001), None);
            // MOVK keeps its opcode and takes the 16 bits.
            let k = encode_movw_signed(MOVK_X0 | rd, chunk & 0xffff);
            prop_assert_eq!(k, Some(MOVK_X0 | rd | ((chunk as u32 & 0xffff) << 5)));
        }

        /// CALL26 at the relocation level: exactly S + A - P when it fits, else an error
        /// with every byte untouched.
        #[test]
        fn call26_matches_the_formula(s in any::<u32>(), p in any::<u32>(), hi in 0u64..2) {
            let s = (u64::from(s) & !3) | hi << 32;
            let p = u64::from(p) & !3;
            let (result, buf) = run(&input(R_AARCH64_CALL26, s, 0, p), BL);
            let v = i128::from(s) - i128::from(p);
            if fits_signed(v, 28) {
                prop_assert!(result.is_ok());
                prop_assert_eq!(i128::from(decode_imm26(field32(&buf))), v);
            } else {
                prop_assert!(result.is_err());
                prop_assert_eq!(buf, buffer(BL));
            }
        }

        /// ADRP + ADD reassemble S + A for any in-range pair.
        #[test]
        fn adrp_add_reassemble(s in any::<u32>(), p in any::<u32>(), a in -0x1000i64..0x1000) {
            let (s, p) = (u64::from(s) + 0x1_0000_0000, u64::from(p) + 0x1_0000_0000);
            let target = s.wrapping_add_signed(a);
            let hi = patched(&input(R_AARCH64_ADR_PREL_PG_HI21, s, a, p), ADRP_X0);
            let lo = patched(&input(R_AARCH64_ADD_ABS_LO12_NC, s, a, 0), ADD_X0);
            prop_assert!(hi.is_ok() && lo.is_ok());
            if let (Ok((_, hi)), Ok((_, lo))) = (hi, lo) {
                let page = (p & !0xfff).wrapping_add_signed(decode_adr(hi) << 12);
                prop_assert_eq!(page + decode_imm12(lo, 0), target);
            }
        }
    }
}
