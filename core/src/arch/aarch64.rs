//! aarch64 (AAPCS64, "ELF for the Arm 64-bit Architecture"): RELA relocations,
//! little-endian, fixed 32-bit instructions whose immediates are split over bit fields.
//! Every relocation is "compute X, check it, encode it into one instruction field (or write
//! a plain 16/32/64-bit datum)".
//!
//! psABI: <https://github.com/ARM-software/abi-aa/blob/main/aaelf64/aaelf64.rst>
//! (§5.7 "Relocation"). Notation: S symbol, A addend, P place, G the address of the
//! symbol's GOT slot, `Page(x) = x & !0xfff`, X the computed value.
//!
//! `BL`/`B` reach ±128 MiB. A call or tail call to an external symbol further away goes
//! through a veneer in the stub area at the end of the code segment:
//! `LDR X16, [PC, #8]; BR X16; .quad target` (X16 is IP0, which the AAPCS64 lets veneers
//! clobber). The pre-scan reserves one per external call target, shared by all call sites.
//!
//! The `_NC` ("no check") forms take only the bits they encode: that is their definition,
//! not a truncation. GOT forms require a zero addend: the psABI's GOT entry is for S + A,
//! and our slots hold S.
//!
//! The table below ([`RELOCATIONS`], whose documentation lists every row with its X,
//! range and alignment) is the single source of what is linked: classification, names and
//! `apply` all come from it. Other types (TLS, `MOVW_GOTOFF`, `GOTREL`, dynamic
//! relocations) are refused by name before memory is allocated.

use super::reloc::{
    aligned, call_target, datum, fits, patch32, relocations, within, write_words, Applied, Failure,
    RelocInput, StubAddend, StubInput, Via,
};
use crate::bits::{bits, insert, sign_extend};
use crate::error::{Range, RelocProblem};
use object::elf::*;

relocations! {
    R_AARCH64_NONE: skip(), "—", "nothing written", |_, _| Ok(Applied::NOTHING);
    R_AARCH64_ABS64: data(8), "S + A", "any 64-bit value", |r, at| datum(at, 8, r.sa(), None);
    R_AARCH64_ABS32: data(4), "S + A", "−2^31 ≤ X < 2^32", |r, at| {
        datum(at, 4, r.sa(), Some(Range::either(32)))
    };
    R_AARCH64_ABS16: data(2), "S + A", "−2^15 ≤ X < 2^16", |r, at| {
        datum(at, 2, r.sa(), Some(Range::either(16)))
    };
    R_AARCH64_PREL64: data(8), "S + A - P", "any 64-bit value", |r, at| {
        datum(at, 8, r.sap(), None)
    };
    R_AARCH64_PREL32: data(4), "S + A - P", "−2^31 ≤ X < 2^32", |r, at| {
        datum(at, 4, r.sap(), Some(Range::either(32)))
    };
    R_AARCH64_PREL16: data(2), "S + A - P", "−2^15 ≤ X < 2^16", |r, at| {
        datum(at, 2, r.sap(), Some(Range::either(16)))
    };
    R_AARCH64_CALL26: call(4), "S + A - P (or veneer − P)", "±128 MiB, 4-aligned: imm26 of BL",
        |r, at| call26(r, at);
    R_AARCH64_JUMP26: call(4), "S + A - P (or veneer − P)", "±128 MiB, 4-aligned: imm26 of B",
        |r, at| call26(r, at);
    R_AARCH64_CONDBR19: data(4), "S + A - P", "±1 MiB, 4-aligned: imm19 of B.cond/CBZ",
        |r, at| branch(at, r.sap(), encode_imm19);
    R_AARCH64_LD_PREL_LO19: data(4), "S + A - P", "±1 MiB, 4-aligned: imm19 of LDR (literal)",
        |r, at| branch(at, r.sap(), encode_imm19);
    R_AARCH64_GOT_LD_PREL19: got(4), "G - P", "±1 MiB, 4-aligned: imm19 of LDR (literal); A = 0",
        |r, at| {
            let v = got_slot(r)? - i128::from(r.p);
            branch(at, v, encode_imm19).map(|a| Applied { via: Via::Got, ..a })
        };
    R_AARCH64_TSTBR14: data(4), "S + A - P", "±32 KiB, 4-aligned: imm14 of TBZ/TBNZ",
        |r, at| branch(at, r.sap(), encode_imm14);
    R_AARCH64_ADR_PREL_LO21: data(4), "S + A - P", "±1 MiB: immhi:immlo of ADR", |r, at| {
        let v = r.sap();
        patch32(at, v, |w| encode_adr(w, v as i64)).map(|()| Applied::direct(v))
    };
    R_AARCH64_ADR_PREL_PG_HI21: data(4), "Page(S + A) - Page(P)",
        "±4 GiB: immhi:immlo of ADRP = X >> 12", |r, at| {
            adrp(at, page(r.sa()) - page(i128::from(r.p)), Checked::Yes)
        };
    R_AARCH64_ADR_PREL_PG_HI21_NC: data(4), "Page(S + A) - Page(P)",
        "none (X >> 12 taken modulo 2^21)", |r, at| {
            adrp(at, page(r.sa()) - page(i128::from(r.p)), Checked::No)
        };
    R_AARCH64_ADR_GOT_PAGE: got(4), "Page(G) - Page(P)", "±4 GiB: ADRP = X >> 12; A = 0",
        |r, at| {
            let v = page(got_slot(r)?) - page(i128::from(r.p));
            adrp(at, v, Checked::Yes).map(|a| Applied { via: Via::Got, ..a })
        };
    R_AARCH64_ADD_ABS_LO12_NC: data(4), "(S + A) & 0xfff", "none: imm12 of ADD",
        |r, at| lo12(at, r.sa(), 0);
    R_AARCH64_LDST8_ABS_LO12_NC: data(4), "(S + A) & 0xfff", "none: imm12 of LDRB/STRB",
        |r, at| lo12(at, r.sa(), 0);
    R_AARCH64_LDST16_ABS_LO12_NC: data(4), "(S + A) & 0xfff", "2-aligned: imm12 = X >> 1",
        |r, at| lo12(at, r.sa(), 1);
    R_AARCH64_LDST32_ABS_LO12_NC: data(4), "(S + A) & 0xfff", "4-aligned: imm12 = X >> 2",
        |r, at| lo12(at, r.sa(), 2);
    R_AARCH64_LDST64_ABS_LO12_NC: data(4), "(S + A) & 0xfff", "8-aligned: imm12 = X >> 3",
        |r, at| lo12(at, r.sa(), 3);
    R_AARCH64_LDST128_ABS_LO12_NC: data(4), "(S + A) & 0xfff", "16-aligned: imm12 = X >> 4",
        |r, at| lo12(at, r.sa(), 4);
    R_AARCH64_LD64_GOT_LO12_NC: got(4), "G & 0xfff", "8-aligned: imm12 of LDR = X >> 3; A = 0",
        |r, at| {
            let g = got_slot(r)?;
            lo12(at, g, 3).map(|a| Applied { via: Via::Got, ..a })
        };
    R_AARCH64_MOVW_UABS_G0: data(4), "S + A", "0 ≤ X < 2^16: imm16 = X",
        |r, at| movw_unsigned(at, r.sa(), 0, Checked::Yes);
    R_AARCH64_MOVW_UABS_G0_NC: data(4), "S + A", "none: imm16 = X & 0xffff",
        |r, at| movw_unsigned(at, r.sa(), 0, Checked::No);
    R_AARCH64_MOVW_UABS_G1: data(4), "S + A", "0 ≤ X < 2^32: imm16 = X >> 16",
        |r, at| movw_unsigned(at, r.sa(), 1, Checked::Yes);
    R_AARCH64_MOVW_UABS_G1_NC: data(4), "S + A", "none: imm16 = (X >> 16) & 0xffff",
        |r, at| movw_unsigned(at, r.sa(), 1, Checked::No);
    R_AARCH64_MOVW_UABS_G2: data(4), "S + A", "0 ≤ X < 2^48: imm16 = X >> 32",
        |r, at| movw_unsigned(at, r.sa(), 2, Checked::Yes);
    R_AARCH64_MOVW_UABS_G2_NC: data(4), "S + A", "none: imm16 = (X >> 32) & 0xffff",
        |r, at| movw_unsigned(at, r.sa(), 2, Checked::No);
    // Bits 63..48 of a 64-bit address: every 64-bit value has them.
    R_AARCH64_MOVW_UABS_G3: data(4), "S + A", "none: imm16 = X >> 48",
        |r, at| movw_unsigned(at, r.sa(), 3, Checked::No);
    R_AARCH64_MOVW_SABS_G0: data(4), "S + A", "−2^16 ≤ X < 2^16: MOVZ/MOVN by sign",
        |r, at| movw_signed(at, r.sa(), 0, Checked::Yes);
    R_AARCH64_MOVW_SABS_G1: data(4), "S + A", "−2^32 ≤ X < 2^32: MOVZ/MOVN of X >> 16",
        |r, at| movw_signed(at, r.sa(), 1, Checked::Yes);
    R_AARCH64_MOVW_SABS_G2: data(4), "S + A", "−2^48 ≤ X < 2^48: MOVZ/MOVN of X >> 32",
        |r, at| movw_signed(at, r.sa(), 2, Checked::Yes);
    R_AARCH64_MOVW_PREL_G0: data(4), "S + A - P", "−2^16 ≤ X < 2^16: MOVZ/MOVN by sign",
        |r, at| movw_signed(at, r.sap(), 0, Checked::Yes);
    R_AARCH64_MOVW_PREL_G0_NC: data(4), "S + A - P", "none: MOVK imm16 = X & 0xffff",
        |r, at| movw_signed(at, r.sap(), 0, Checked::No);
    R_AARCH64_MOVW_PREL_G1: data(4), "S + A - P", "−2^32 ≤ X < 2^32: MOVZ/MOVN of X >> 16",
        |r, at| movw_signed(at, r.sap(), 1, Checked::Yes);
    R_AARCH64_MOVW_PREL_G1_NC: data(4), "S + A - P", "none: MOVK imm16 = (X >> 16) & 0xffff",
        |r, at| movw_signed(at, r.sap(), 1, Checked::No);
    R_AARCH64_MOVW_PREL_G2: data(4), "S + A - P", "−2^48 ≤ X < 2^48: MOVZ/MOVN of X >> 32",
        |r, at| movw_signed(at, r.sap(), 2, Checked::Yes);
    R_AARCH64_MOVW_PREL_G2_NC: data(4), "S + A - P", "none: MOVK imm16 = (X >> 32) & 0xffff",
        |r, at| movw_signed(at, r.sap(), 2, Checked::No);
    R_AARCH64_MOVW_PREL_G3: data(4), "S + A - P", "none: MOVZ/MOVN/MOVK of X >> 48",
        |r, at| movw_signed(at, r.sap(), 3, Checked::No);
}

// ---------------------------------------------------------------------------------------
// What the rows share.

/// Whether a relocation checks X's range (the `_NC` forms and G3 do not).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Checked {
    Yes,
    No,
}

/// G for a GOT-relative relocation: the slot must exist and the addend be zero (the slot
/// holds S; a GOT entry for S + A is not something we build).
fn got_slot(r: &RelocInput) -> Result<i128, Failure> {
    if r.a != 0 {
        return Err(Failure::new(RelocProblem::GotAddend, i128::from(r.a)));
    }
    r.got()
}

/// `x & !0xfff`.
fn page(x: i128) -> i128 {
    x & !0xfff
}

/// A PC-relative branch or literal offset X into an imm26/19/14 field.
fn branch(
    place: &mut [u8],
    value: i128,
    encode: fn(u32, i64) -> Result<u32, RelocProblem>,
) -> Result<Applied, Failure> {
    patch32(place, value, |w| encode(w, value as i64)).map(|()| Applied::direct(value))
}

/// BL/B: S + A - P, or through the symbol's veneer when it is out of reach (only for a
/// zero addend: the veneer reaches S, not S + A). The target itself must be an
/// instruction: a misaligned S + A is refused even where a veneer could reach it.
fn call26(r: &RelocInput, place: &mut [u8]) -> Result<Applied, Failure> {
    aligned(r.sap(), 4)?;
    let (value, via) = call_target(r, Range::signed(28), StubAddend::MustBeZero);
    patch32(place, value, |w| encode_imm26(w, value as i64)).map(|()| Applied { value, via })
}

/// A page delta X into an ADRP: checked to ±4 GiB unless `Checked::No`, which takes the
/// page count modulo 2^21.
fn adrp(place: &mut [u8], delta: i128, checked: Checked) -> Result<Applied, Failure> {
    if checked == Checked::Yes {
        within(delta, Range::signed(33))?;
    }
    let pages = sign_extend(((delta >> 12) as u64) & 0x1f_ffff, 21);
    patch32(place, delta, |w| encode_adr(w, pages)).map(|()| Applied::direct(delta))
}

/// The low 12 bits of X into an imm12 field scaled by the access size `1 << shift`.
fn lo12(place: &mut [u8], value: i128, shift: u32) -> Result<Applied, Failure> {
    let low = (value & 0xfff) as u64;
    patch32(place, value, |w| encode_imm12(w, low, shift)).map(|()| Applied::direct(value))
}

/// Group `group` (bits 16·group and up) of an unsigned MOVW value, X checked to
/// 16·(group+1) bits unless `Checked::No`.
fn movw_unsigned(
    place: &mut [u8],
    value: i128,
    group: u32,
    checked: Checked,
) -> Result<Applied, Failure> {
    if checked == Checked::Yes {
        within(value, Range::unsigned(16 * (group + 1)))?;
    }
    let chunk = ((value >> (16 * group)) as u64) & 0xffff;
    patch32(place, value, |w| encode_imm16(w, chunk)).map(|()| Applied::direct(value))
}

/// Group `group` of a signed MOVW value (MOVZ/MOVN chosen by sign), X checked to
/// −2^(16·(group+1)) ≤ X < 2^(16·(group+1)) unless `Checked::No`. The `_NC` forms are
/// MOVKs in practice; a MOVZ/MOVN under one takes the chunk's sign as the instruction's.
fn movw_signed(
    place: &mut [u8],
    value: i128,
    group: u32,
    checked: Checked,
) -> Result<Applied, Failure> {
    if checked == Checked::Yes {
        within(value, Range::signed(16 * (group + 1) + 1))?;
    }
    let shifted = value >> (16 * group);
    patch32(place, value, |w| {
        // A MOVK takes the low 16 bits as they are; a MOVZ/MOVN under an unchecked form
        // (or G3, whose chunk is the top of a 64-bit value) its 16 bits and the sign.
        let chunk = if w & MOVW_OPC_LO != 0 {
            (shifted as u64 & 0xffff) as i64
        } else {
            sign_extend(shifted as u64 & 0x1_ffff, 17)
        };
        encode_movw_signed(w, chunk)
    })
    .map(|()| Applied::direct(value))
}

// ---------------------------------------------------------------------------------------
// The veneer.

/// A veneer: `LDR X16, [PC, #8]; BR X16; .quad target`.
pub(crate) const STUB_SIZE: u64 = 16;
/// Veneers carry their target inline.
pub(crate) const STUB_USES_GOT: bool = false;

/// `LDR X16, <pc + 8>` (LDR literal, 64-bit, imm19 = 2).
const LDR_X16_PC8: u32 = 0x5800_0050;
/// `BR X16`.
const BR_X16: u32 = 0xd61f_0200;

pub(crate) fn write_stub(buf: &mut [u8], stub: &StubInput) -> Option<()> {
    let target = stub.target;
    write_words(
        buf.get_mut(..16)?,
        &[LDR_X16_PC8, BR_X16, target as u32, (target >> 32) as u32],
    )
}

// ---------------------------------------------------------------------------------------
// Instruction-immediate formats. Each encoder takes the value the field stands for (a
// byte offset, a page count, an unshifted low-12 value, a 16-bit chunk), checks that the
// field can represent it exactly (saying how it cannot), and touches no bit outside its
// field. Each decoder beside it gives back that value.

/// `B`/`BL`: imm26 in bits 25..0, a byte offset / 4. `offset` must be a multiple of 4 in
/// [−2^27, 2^27).
pub fn encode_imm26(word: u32, offset: i64) -> Result<u32, RelocProblem> {
    fits(offset as i128, Range::signed(28), 4)?;
    Ok(insert(word, (offset >> 2) as u64, 25, 0))
}

/// The byte offset a `B`/`BL` encodes.
pub const fn decode_imm26(word: u32) -> i64 {
    sign_extend(bits(word as u64, 25, 0), 26) << 2
}

/// `B.cond`, `CBZ`/`CBNZ`, `LDR` (literal): imm19 in bits 23..5, a byte offset / 4.
/// `offset` must be a multiple of 4 in [−2^20, 2^20).
pub fn encode_imm19(word: u32, offset: i64) -> Result<u32, RelocProblem> {
    fits(offset as i128, Range::signed(21), 4)?;
    Ok(insert(word, (offset >> 2) as u64, 23, 5))
}

/// The byte offset an imm19 instruction encodes.
pub const fn decode_imm19(word: u32) -> i64 {
    sign_extend(bits(word as u64, 23, 5), 19) << 2
}

/// `TBZ`/`TBNZ`: imm14 in bits 18..5, a byte offset / 4. `offset` must be a multiple of 4
/// in [−2^15, 2^15).
pub fn encode_imm14(word: u32, offset: i64) -> Result<u32, RelocProblem> {
    fits(offset as i128, Range::signed(16), 4)?;
    Ok(insert(word, (offset >> 2) as u64, 18, 5))
}

/// The byte offset a `TBZ`/`TBNZ` encodes.
pub const fn decode_imm14(word: u32) -> i64 {
    sign_extend(bits(word as u64, 18, 5), 14) << 2
}

/// `ADR`/`ADRP`: a signed 21-bit immediate split as immlo (bits 30..29, its low 2 bits)
/// and immhi (bits 23..5, the rest). For ADR it is a byte offset, for ADRP a page count.
pub fn encode_adr(word: u32, imm: i64) -> Result<u32, RelocProblem> {
    fits(imm as i128, Range::signed(21), 1)?;
    let v = imm as u64;
    Ok(insert(insert(word, v, 30, 29), v >> 2, 23, 5))
}

/// The signed 21-bit immediate of an `ADR`/`ADRP`.
pub const fn decode_adr(word: u32) -> i64 {
    let w = word as u64;
    sign_extend((bits(w, 23, 5) << 2) | bits(w, 30, 29), 21)
}

/// `ADD` (immediate) and `LDR`/`STR` (unsigned offset): imm12 in bits 21..10, scaled by
/// the access size `1 << shift` (0..=4). `value` is the unscaled offset the `LO12`
/// relocations give (at most 0xfff) and must be a multiple of the access size.
pub fn encode_imm12(word: u32, value: u64, shift: u32) -> Result<u32, RelocProblem> {
    if shift > 4 {
        return Err(RelocProblem::Unsupported);
    }
    fits(i128::from(value), Range::unsigned(12), 1 << shift)?;
    Ok(insert(word, value >> shift, 21, 10))
}

/// The unscaled offset an imm12 instruction with access size `1 << shift` encodes.
pub const fn decode_imm12(word: u32, shift: u32) -> u64 {
    bits(word as u64, 21, 10) << shift
}

/// `MOVZ`/`MOVN`/`MOVK`: imm16 in bits 20..5.
pub fn encode_imm16(word: u32, chunk: u64) -> Result<u32, RelocProblem> {
    fits(i128::from(chunk), Range::unsigned(16), 1)?;
    Ok(insert(word, chunk, 20, 5))
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
pub fn encode_movw_signed(word: u32, chunk: i64) -> Result<u32, RelocProblem> {
    if word & MOVW_OPC_LO != 0 {
        // MOVK: keeps the other chunks, so only the 16 bits themselves matter.
        fits(chunk as i128, Range::either(16), 1)?;
        return encode_imm16(word, chunk as u64 & 0xffff);
    }
    fits(chunk as i128, Range::signed(17), 1)?;
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

#[cfg(test)]
mod tests {
    use super::super::reloc::short;
    use super::super::reloc::testing::{input, row_input};
    use super::*;
    use crate::bits::{fits_signed, mask, read_u16, read_u32, read_u64};
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
            None => Err(short(4, 0)),
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

    /// An overflow of a `bits`-wide field: signed, or else unsigned or read either way.
    fn is_overflow<T>(result: &Result<T, Failure>, bits: u8, signed: bool) -> bool {
        let bits = u32::from(bits);
        let ranges = if signed {
            [Range::signed(bits), Range::signed(bits)]
        } else {
            [Range::unsigned(bits), Range::either(bits)]
        };
        matches!(result, Err(Failure { problem: RelocProblem::Overflow { range }, .. }) if ranges.contains(range))
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
            matches!(over, Err(Failure { problem: RelocProblem::Overflow { range }, value }) if value == 1 << 32 && range == Range::signed(33))
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
                name(r_type).unwrap_or("?")
            );
            // Bits above the low 12 are ignored (the ADRP carries them).
            let ok = patched(&input(r_type, s, 0x1000 + i64::from(size as u8), 0), word);
            assert!(matches!(ok, Ok((_, w)) if decode_imm12(w, shift) == size));
            if size > 1 {
                let err = patched(&input(r_type, s + size / 2, 0, 0), word);
                assert!(
                    is_misaligned(&err, size as u8),
                    "{}",
                    name(r_type).unwrap_or("?")
                );
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
                    problem: RelocProblem::GotAddend,
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
        check_table(row_input, |_| [0; 16]);
        assert_eq!(RELOCATIONS.len(), 41);
    }

    // ---- property tests for every encoder ----------------------------------------------

    /// Round trip, the last offsets in range, the first out of range, misalignment, and
    /// no bit outside the field changed, for a scaled PC-relative field of `width` bits of
    /// byte offset.
    fn branch_field(
        encode: fn(u32, i64) -> Result<u32, RelocProblem>,
        decode: fn(u32) -> i64,
        width: u32,
        field: u32,
        word: u32,
        k: i64,
    ) -> Result<(), TestCaseError> {
        let max = (1i64 << (width - 1)) - 4;
        let min = -(1i64 << (width - 1));
        let offset = (k << 2).clamp(min, max);
        let w = encode(word, offset).ok();
        prop_assert!(w.is_some());
        let w = w.unwrap_or(0);
        prop_assert_eq!(decode(w), offset);
        prop_assert_eq!(w & !field, word & !field);
        for edge in [max, min] {
            prop_assert_eq!(encode(word, edge).ok().map(decode), Some(edge));
        }
        prop_assert_eq!(encode(word, max + 4).ok(), None);
        prop_assert_eq!(encode(word, min - 4).ok(), None);
        prop_assert_eq!(encode(word, offset | 1).ok(), None);
        prop_assert_eq!(encode(word, offset | 2).ok(), None);
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
            let w = encode_adr(word, imm).ok();
            prop_assert_eq!(w.map(decode_adr), Some(imm));
            prop_assert_eq!(w.map(|w| w & !field), Some(word & !field));
            prop_assert_eq!(encode_adr(word, (1 << 20) - 1).ok().map(decode_adr), Some((1 << 20) - 1));
            prop_assert_eq!(encode_adr(word, -(1 << 20)).ok().map(decode_adr), Some(-(1 << 20)));
            prop_assert_eq!(encode_adr(word, 1 << 20).ok(), None);
            prop_assert_eq!(encode_adr(word, -(1 << 20) - 1).ok(), None);
        }

        #[test]
        fn imm12_encoding(word in any::<u32>(), v in 0u64..0x1000, shift in 0u32..=4) {
            let field = 0xfff << 10;
            let aligned = v & !mask(shift);
            let w = encode_imm12(word, aligned, shift).ok();
            prop_assert_eq!(w.map(|w| decode_imm12(w, shift)), Some(aligned));
            prop_assert_eq!(w.map(|w| w & !field), Some(word & !field));
            let last = 0x1000 - (1 << shift);
            prop_assert_eq!(encode_imm12(word, last, shift).ok().map(|w| decode_imm12(w, shift)), Some(last));
            prop_assert_eq!(encode_imm12(word, 0x1000, shift).ok(), None);
            if shift > 0 {
                prop_assert_eq!(encode_imm12(word, aligned | 1 << (shift - 1), shift).ok(), None);
            }
        }

        #[test]
        fn imm16_encoding(word in any::<u32>(), chunk in 0u64..0x1_0000) {
            let field = 0xffff << 5;
            let w = encode_imm16(word, chunk).ok();
            prop_assert_eq!(w.map(decode_imm16), Some(chunk));
            prop_assert_eq!(w.map(|w| w & !field), Some(word & !field));
            prop_assert_eq!(encode_imm16(word, 0xffff).ok().map(decode_imm16), Some(0xffff));
            prop_assert_eq!(encode_imm16(word, 0x1_0000).ok(), None);
        }

        /// MOVZ/MOVN: the chunk's sign picks the opcode; only bit 30 and imm16 change.
        #[test]
        fn movw_signed_encoding(rd in 0u32..32, hw in 0u32..4, n in any::<bool>(), chunk in -0x1_0000i64..0x1_0000) {
            let word = if n { MOVN_X0 } else { MOVZ_X0 } | hw << 21 | rd;
            let w = encode_movw_signed(word, chunk).ok();
            prop_assert_eq!(w.map(decode_movw_signed), Some(chunk));
            prop_assert_eq!(w.map(|w| w & !(0xffff << 5 | MOVW_OPC_HI)), Some(word & !(0xffff << 5 | MOVW_OPC_HI)));
            prop_assert_eq!(w.map(|w| w & MOVW_OPC_HI == 0), Some(chunk < 0));
            prop_assert_eq!(encode_movw_signed(word, 0x1_0000).ok(), None);
            prop_assert_eq!(encode_movw_signed(word, -0x1_0001).ok(), None);
            // MOVK keeps its opcode and takes the 16 bits.
            let k = encode_movw_signed(MOVK_X0 | rd, chunk & 0xffff).ok();
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
