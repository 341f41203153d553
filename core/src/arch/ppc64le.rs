//! ppc64le: the 64-bit ELF V2 ABI for Power, little-endian (RELA relocations).
//!
//! psABI: <https://openpowerfoundation.org/specifications/64bitelfabi/> (§3.5 "Relocation
//! Types"). Notation: S symbol, A addend, P place, G the symbol's GOT slot address, TOC the
//! TOC pointer (`.TOC.` = the GOT's first byte + 0x8000, what r2 holds), L the local entry
//! point of a function (S plus the offset encoded in its `st_other`).
//!
//! The image's GOT *is* its TOC: every function of the image shares one r2, set up by each
//! global entry point (`addis r2,r12,(.TOC.-f)@ha; addi r2,r2,(.TOC.-f)@l`, REL16_HA/LO), so
//! calls inside the image go straight to the callee's local entry point, which skips that
//! set-up. A call to an external function goes through a stub that saves r2 in the caller's
//! frame (24(r1)), loads the target from its GOT slot into r12 and branches to its *global*
//! entry point with r12 = its address, as the ABI requires; the `nop` the compiler leaves
//! after such a `bl` becomes `ld r2,24(r1)`, which restores the image's TOC pointer.
//!
//! Calling *into* the image follows the same rule: a kernel is entered at its global entry
//! point with r12 holding that address. Every ELFv2 indirect call does exactly that: the
//! compiler copies the target into both CTR and r12 before `bctrl` (a C call through a
//! pointer, as in the generated call shim, is checked on clang's output in
//! `core/tests/ppc64le.rs`; Rust function pointers are what `os/tests/native.rs` calls
//! kernels through under qemu). libffi's ELFv2 `ffi_call` has to do the same, or no
//! TOC-using library function could be called through it.
//!
//! Power10 PC-relative code (`-mcpu=pwr10`) needs no TOC: `bl f@notoc` (REL24_NOTOC) has no
//! `nop` after it, and prefixed `paddi`/`pld` carry 34-bit PC-relative offsets (PCREL34,
//! GOT_PCREL34). Each stub therefore has a second entry, [`NOTOC_ENTRY`] bytes in, that
//! loads the target with `pld` and leaves r2 alone.
//!
//! Half16 fields: in a little-endian object the relocation's offset is the instruction's
//! first byte, which holds the 16-bit immediate (D form). DS-form loads/stores (`ld`, `std`,
//! `lwa`) keep their low 2 bits as opcode bits and need a 4-aligned offset; DQ-form ones
//! (`lxv`, `stxv`, `lq`, `lxvp`) keep 4 bits and need 16-aligned.
//!
//! The half16 values are parts of X: `#lo(X)` its bits 0..16, `#hi(X)` bits 16..32,
//! `#ha(X)` bits 16..32 of X + 0x8000 (so that `(ha << 16) + (lo as i16) == X`), and
//! `#higher`, `#highera`, `#highest`, `#highesta` likewise for bits 32..48 and 48..64.
//!
//! The table below ([`RELOCATIONS`], whose documentation lists every row with its X,
//! range and alignment) is the single source of what is linked: classification, names and
//! `apply` all come from it. Other types (TLS, `ADDR24`/`ADDR14`/`REL14` branches, which
//! clang does not emit for ELFv2 code, dynamic relocations) are refused by name before
//! memory is allocated.

use super::reloc::{
    datum, fits, patch16, patch32, patch_pair, relocations, within, write_words, Applied, Failure,
    RelocInput, StubInput, Via,
};
use crate::bits::read_u32;
use crate::error::{Range, RelocProblem};
use object::elf::*;

/// `bl f@notoc`: a call from code that keeps no TOC pointer (Power10 PC-relative code).
pub const R_PPC64_REL24_NOTOC: RelocationType = RelocationType(116);
/// A hint linking a GOT_PCREL34 load to the instruction that uses it (optimisable; ignored).
pub const R_PPC64_PCREL_OPT: RelocationType = RelocationType(123);
/// `S + A - P` in a prefixed instruction's 34-bit immediate.
pub const R_PPC64_PCREL34: RelocationType = RelocationType(132);
/// `G + A - P` in a prefixed instruction's 34-bit immediate.
pub const R_PPC64_GOT_PCREL34: RelocationType = RelocationType(133);

relocations! {
    R_PPC64_NONE: skip(), "—", "nothing written", |_, _| Ok(Applied::NOTHING);
    R_PPC64_PCREL_OPT: skip(), "—", "an optimisation hint: nothing written", |_, _| {
        Ok(Applied::NOTHING)
    };
    R_PPC64_TOCSAVE: skip(), "—", "a TOC-save hint: nothing written", |_, _| {
        Ok(Applied::NOTHING)
    };
    R_PPC64_ADDR64: data(8), "S + A", "any 64-bit value", |r, at| datum(at, 8, r.sa(), None);
    // The large code model's `.quad .TOC.-f`.
    R_PPC64_REL64: data(8), "S + A - P", "any 64-bit value", |r, at| datum(at, 8, r.sap(), None);
    R_PPC64_TOC: data(8), "TOC + A", "any 64-bit value", |r, at| {
        datum(at, 8, toc(r) + i128::from(r.a), None)
    };
    R_PPC64_ADDR32: data(4), "S + A", "32 bits, signed or unsigned", |r, at| {
        datum(at, 4, r.sa(), Some(Range::either(32)))
    };
    R_PPC64_REL32: data(4), "S + A - P", "signed 32 bits", |r, at| {
        datum(at, 4, r.sap(), Some(Range::signed(32)))
    };
    // L: the local entry, or the stub's TOC entry for an external.
    R_PPC64_REL24: call(4), "L + A - P", "±32 MiB, 4-aligned: I form (b/bl)",
        |r, at| call(r, at, Caller::Toc);
    // From code without a TOC pointer: S, or the stub's NOTOC entry.
    R_PPC64_REL24_NOTOC: call(4), "S + A - P", "±32 MiB, 4-aligned: I form (b/bl)",
        |r, at| call(r, at, Caller::NoToc);
    R_PPC64_PCREL34: data(8), "S + A - P", "signed 34 bits (±8 GiB): prefixed D34",
        |r, at| d34(at, r.sap(), Via::Direct);
    // The slot holds S.
    R_PPC64_GOT_PCREL34: got(8), "G + A - P", "signed 34 bits: prefixed pld", |r, at| {
        d34(at, r.got()? + i128::from(r.a) - i128::from(r.p), Via::Got)
    };
    R_PPC64_ADDR16: data(2), "S + A", "16 bits, signed or unsigned",
        |r, at| half16(r, at, Base::Abs, Part::Either, Form::D);
    R_PPC64_ADDR16_LO: data(2), "#lo(S + A)", "none",
        |r, at| half16(r, at, Base::Abs, Part::Lo, Form::D);
    R_PPC64_ADDR16_HI: data(2), "#hi(S + A)", "X: signed 32 bits",
        |r, at| half16(r, at, Base::Abs, Part::Hi, Form::D);
    R_PPC64_ADDR16_HA: data(2), "#ha(S + A)", "X + 0x8000: signed 32 bits",
        |r, at| half16(r, at, Base::Abs, Part::Ha, Form::D);
    R_PPC64_ADDR16_HIGH: data(2), "#hi(S + A)", "none",
        |r, at| half16(r, at, Base::Abs, Part::High, Form::D);
    R_PPC64_ADDR16_HIGHA: data(2), "#ha(S + A)", "none",
        |r, at| half16(r, at, Base::Abs, Part::Higha, Form::D);
    R_PPC64_ADDR16_HIGHER: data(2), "#higher(S + A)", "none",
        |r, at| half16(r, at, Base::Abs, Part::Higher, Form::D);
    R_PPC64_ADDR16_HIGHERA: data(2), "#highera(S + A)", "none",
        |r, at| half16(r, at, Base::Abs, Part::Highera, Form::D);
    R_PPC64_ADDR16_HIGHEST: data(2), "#highest(S + A)", "none",
        |r, at| half16(r, at, Base::Abs, Part::Highest, Form::D);
    R_PPC64_ADDR16_HIGHESTA: data(2), "#highesta(S + A)", "none",
        |r, at| half16(r, at, Base::Abs, Part::Highesta, Form::D);
    R_PPC64_ADDR16_DS: data(2), "S + A", "signed 16 bits, 4-aligned (16 for DQ form)",
        |r, at| half16(r, at, Base::Abs, Part::Signed, Form::Ds);
    R_PPC64_ADDR16_LO_DS: data(2), "#lo(S + A)", "4-aligned (16 for DQ form)",
        |r, at| half16(r, at, Base::Abs, Part::Lo, Form::Ds);
    R_PPC64_TOC16: data(2), "S + A - TOC", "signed 16 bits",
        |r, at| half16(r, at, Base::Toc, Part::Signed, Form::D);
    R_PPC64_TOC16_LO: data(2), "#lo(S + A - TOC)", "none",
        |r, at| half16(r, at, Base::Toc, Part::Lo, Form::D);
    R_PPC64_TOC16_HI: data(2), "#hi(S + A - TOC)", "X: signed 32 bits",
        |r, at| half16(r, at, Base::Toc, Part::Hi, Form::D);
    R_PPC64_TOC16_HA: data(2), "#ha(S + A - TOC)", "X + 0x8000: signed 32 bits",
        |r, at| half16(r, at, Base::Toc, Part::Ha, Form::D);
    R_PPC64_TOC16_DS: data(2), "S + A - TOC", "signed 16 bits, 4-aligned (16 for DQ form)",
        |r, at| half16(r, at, Base::Toc, Part::Signed, Form::Ds);
    R_PPC64_TOC16_LO_DS: data(2), "#lo(S + A - TOC)", "4-aligned (16 for DQ form)",
        |r, at| half16(r, at, Base::Toc, Part::Lo, Form::Ds);
    R_PPC64_REL16: data(2), "S + A - P", "signed 16 bits",
        |r, at| half16(r, at, Base::Rel, Part::Signed, Form::D);
    R_PPC64_REL16_LO: data(2), "#lo(S + A - P)", "none",
        |r, at| half16(r, at, Base::Rel, Part::Lo, Form::D);
    R_PPC64_REL16_HI: data(2), "#hi(S + A - P)", "X: signed 32 bits",
        |r, at| half16(r, at, Base::Rel, Part::Hi, Form::D);
    R_PPC64_REL16_HA: data(2), "#ha(S + A - P)", "X + 0x8000: signed 32 bits",
        |r, at| half16(r, at, Base::Rel, Part::Ha, Form::D);
    R_PPC64_GOT16: got(2), "G + A - TOC", "signed 16 bits",
        |r, at| half16(r, at, Base::Got, Part::Signed, Form::D);
    R_PPC64_GOT16_LO: got(2), "#lo(G + A - TOC)", "none",
        |r, at| half16(r, at, Base::Got, Part::Lo, Form::D);
    R_PPC64_GOT16_HI: got(2), "#hi(G + A - TOC)", "X: signed 32 bits",
        |r, at| half16(r, at, Base::Got, Part::Hi, Form::D);
    R_PPC64_GOT16_HA: got(2), "#ha(G + A - TOC)", "X + 0x8000: signed 32 bits",
        |r, at| half16(r, at, Base::Got, Part::Ha, Form::D);
    R_PPC64_GOT16_DS: got(2), "G + A - TOC", "signed 16 bits, 4-aligned (16 for DQ form)",
        |r, at| half16(r, at, Base::Got, Part::Signed, Form::Ds);
    R_PPC64_GOT16_LO_DS: got(2), "#lo(G + A - TOC)", "4-aligned (16 for DQ form)",
        |r, at| half16(r, at, Base::Got, Part::Lo, Form::Ds);
}

// ---------------------------------------------------------------------------------------
// What the rows share.

/// TOC: what r2 holds, `.TOC.`.
fn toc(r: &RelocInput) -> i128 {
    i128::from(r.got_base) + i128::from(TOC_BIAS)
}

/// What a half16 relocation's value is relative to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Base {
    /// S + A.
    Abs,
    /// S + A - TOC.
    Toc,
    /// S + A - P.
    Rel,
    /// G + A - TOC.
    Got,
}

/// Which 16 bits of the value go into the field, and how the whole value is checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Part {
    /// The whole value, which must fit 16 bits signed.
    Signed,
    /// The whole value, which must fit 16 bits signed or unsigned (ADDR16).
    Either,
    /// `#lo`: no check.
    Lo,
    /// `#hi`: the value must fit 32 bits signed.
    Hi,
    /// `#ha`: the value + 0x8000 must fit 32 bits signed.
    Ha,
    /// `#hi` / `#ha` without a check (ADDR16_HIGH/HIGHA).
    High,
    Higha,
    Higher,
    Highera,
    Highest,
    Highesta,
}

impl Part {
    /// The 16 bits of `v` this part takes, after its check.
    fn of(self, v: i128) -> Result<u16, Failure> {
        Ok(match self {
            Part::Signed => {
                within(v, Range::signed(16))?;
                lo(v)
            }
            Part::Either => {
                within(v, Range::either(16))?;
                lo(v)
            }
            Part::Lo => lo(v),
            Part::Hi => {
                within(v, Range::signed(32))?;
                hi(v)
            }
            Part::Ha => {
                within(v, Range::signed(32).shifted(-0x8000))?;
                ha(v)
            }
            Part::High => hi(v),
            Part::Higha => ha(v),
            Part::Higher => higher(v),
            Part::Highera => highera(v),
            Part::Highest => highest(v),
            Part::Highesta => highesta(v),
        })
    }
}

/// Whether the half16 field is a whole D-form immediate or a DS/DQ-form offset (whose low
/// bits are opcode bits).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Form {
    D,
    Ds,
}

/// A half16 relocation: X from `base`, the `part` of it into the instruction's first
/// halfword (D form; DS or DQ form, chosen by the instruction, for `Form::Ds`).
fn half16(
    r: &RelocInput,
    place: &mut [u8],
    base: Base,
    part: Part,
    form: Form,
) -> Result<Applied, Failure> {
    let (value, via) = match base {
        Base::Abs => (r.sa(), Via::Direct),
        Base::Toc => (r.sa() - toc(r), Via::Direct),
        Base::Rel => (r.sap(), Via::Direct),
        Base::Got => (r.got()? + i128::from(r.a) - toc(r), Via::Got),
    };
    let field = part.of(value)?;
    let dq = read_u32(place).is_some_and(is_dq_form);
    patch16(place, value, |old| match form {
        Form::D => Ok(field),
        Form::Ds if dq => encode_dq(old, field),
        Form::Ds => encode_ds(old, field),
    })
    .map(|()| Applied { value, via })
}

/// A 34-bit value into the prefixed instruction at the start of `place`.
fn d34(place: &mut [u8], value: i128, via: Via) -> Result<Applied, Failure> {
    patch_pair(place, value, |prefix, suffix| {
        encode_d34(prefix, suffix, value)
    })
    .map(|()| Applied { value, via })
}

/// Whether the calling code keeps r2 a TOC pointer (REL24) or not (REL24_NOTOC).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Caller {
    Toc,
    NoToc,
}

/// A branch-and-link to a function. Unlike the other architectures' far-call decision,
/// the stub is taken whenever the plan reserved one (the callee is external), near or
/// far: an external function has its own TOC, so it must be entered at its global entry
/// with r12 set, and a TOC caller must restore r2 afterwards.
fn call(r: &RelocInput, place: &mut [u8], caller: Caller) -> Result<Applied, Failure> {
    let a = i128::from(r.a);
    let p = i128::from(r.p);
    if let Some(stub) = r.stub {
        return match caller {
            // The `nop` after the call becomes `ld r2,24(r1)`.
            Caller::Toc => {
                let v = i128::from(stub) + a - p;
                patch_pair(place, v, |bl, next| {
                    if next != NOP {
                        return Err(RelocProblem::UnexpectedInstruction { word: next });
                    }
                    Ok((encode_li24(bl, v)?, LD_R2_24_R1))
                })
                .map(|()| Applied {
                    value: v,
                    via: Via::Stub,
                })
            }
            Caller::NoToc => {
                let v = i128::from(stub) + i128::from(NOTOC_ENTRY) + a - p;
                patch32(place, v, |bl| encode_li24(bl, v)).map(|()| Applied {
                    value: v,
                    via: Via::Stub,
                })
            }
        };
    }
    // A function of this image: it shares the caller's TOC pointer.
    let local = local_entry_offset(r.other).ok_or(Failure::new(
        RelocProblem::ReservedLocalEntry { other: r.other },
        0,
    ))?;
    let kind = (r.other >> 5) & 7;
    let direct = r.sap();
    let v = match caller {
        // Its local entry point skips the r2 set-up. A callee that does not keep r2 (1)
        // would need a stub that saves it; none is planned for functions of the image.
        Caller::Toc if kind == 1 => return Err(Failure::new(RelocProblem::MissingSlot, direct)),
        Caller::Toc => direct + i128::from(local),
        // No TOC pointer to share: a callee that needs one (2..6) would have to be entered
        // at its global entry with r12 set, which takes a stub.
        Caller::NoToc if local != 0 => return Err(Failure::new(RelocProblem::MissingSlot, direct)),
        Caller::NoToc => direct,
    };
    patch32(place, v, |bl| encode_li24(bl, v)).map(|()| Applied::direct(v))
}

/// The offset of a function's local entry point from its global entry point, from bits
/// 5..8 of its `st_other`: 0 and 1 mean none (1: it does not keep r2 a TOC pointer), 2..6
/// mean `1 << n` bytes, 7 is reserved.
pub const fn local_entry_offset(other: u8) -> Option<u64> {
    match (other >> 5) & 7 {
        0 | 1 => Some(0),
        n @ 2..=6 => Some(1 << n),
        _ => None,
    }
}

// ---------------------------------------------------------------------------------------
// The stub.

/// `.TOC.` lies this far past the GOT's first byte, so that 16-bit signed offsets from r2
/// reach the first 64 KiB of the GOT.
pub const TOC_BIAS: u64 = 0x8000;

/// A TOC-using entry (20 bytes), a trap, then a PC-relative entry (16 bytes).
pub(crate) const STUB_SIZE: u64 = 40;
/// Offset of the stub entry for REL24_NOTOC callers.
pub const NOTOC_ENTRY: u64 = 24;
/// Stubs load their target from the symbol's GOT slot.
pub(crate) const STUB_USES_GOT: bool = true;

/// `ori 0,0,0`, the nop the compiler leaves after a call that may need a TOC restore.
pub const NOP: u32 = 0x6000_0000;
/// `ld r2,24(r1)`: restores the caller's TOC pointer from its frame.
pub const LD_R2_24_R1: u32 = 0xe841_0018;
/// `std r2,24(r1)`: saves the TOC pointer in the caller's frame.
pub const STD_R2_24_R1: u32 = 0xf841_0018;
/// `addis r12,r2,0`.
const ADDIS_R12_R2: u32 = 0x3d82_0000;
/// `ld r12,0(r12)`.
const LD_R12_R12: u32 = 0xe98c_0000;
/// `mtctr r12`.
pub const MTCTR_R12: u32 = 0x7d89_03a6;
/// `bctr`.
pub const BCTR: u32 = 0x4e80_0420;
/// `trap`.
const TRAP: u32 = 0x7fe0_0008;
/// `pld r12,0(0),1`: prefix and suffix words.
const PLD_R12_PREFIX: u32 = 0x0410_0000;
const PLD_R12_SUFFIX: u32 = 0xe580_0000;

/// Writes the stub for one external function: at +0 for TOC callers
/// `std r2,24(r1); addis r12,r2,(G-TOC)@ha; ld r12,(G-TOC)@l(r12); mtctr r12; bctr`,
/// then a `trap`, and at +[`NOTOC_ENTRY`] for PC-relative callers
/// `pld r12,(G-here)@pcrel; mtctr r12; bctr`. `None` if the slot is out of reach or the
/// stub is not 8-aligned (a prefixed instruction must not cross a 64-byte boundary).
pub(crate) fn write_stub(buf: &mut [u8], stub: &StubInput) -> Option<()> {
    let slot = i128::from(stub.got_slot?);
    let toc = i128::from(stub.got_base) + i128::from(TOC_BIAS);
    let off = slot - toc;
    if !stub.address.is_multiple_of(8)
        || !Range::signed(32).shifted(-0x8000).contains(off)
        || off % 8 != 0
    {
        return None;
    }
    let pcrel = slot - (i128::from(stub.address) + i128::from(NOTOC_ENTRY));
    let (prefix, suffix) = encode_d34(PLD_R12_PREFIX, PLD_R12_SUFFIX, pcrel).ok()?;
    let words = [
        STD_R2_24_R1,
        ADDIS_R12_R2 | u32::from(ha(off)),
        LD_R12_R12 | u32::from(lo(off)),
        MTCTR_R12,
        BCTR,
        TRAP,
        prefix,
        suffix,
        MTCTR_R12,
        BCTR,
    ];
    write_words(buf.get_mut(..STUB_SIZE as usize)?, &words)
}

// ---------------------------------------------------------------------------------------
// Value splitting: the @l, @h, @ha, @higher, ... parts of a 64-bit value.

/// `#lo(v)`: bits 0..16.
pub const fn lo(v: i128) -> u16 {
    v as u16
}

/// `#hi(v)`: bits 16..32.
pub const fn hi(v: i128) -> u16 {
    (v >> 16) as u16
}

/// `#ha(v)`: bits 16..32 of `v + 0x8000`, so that `(ha << 16) + (lo as i16) == v`.
pub const fn ha(v: i128) -> u16 {
    ((v + 0x8000) >> 16) as u16
}

/// `#higher(v)`: bits 32..48.
pub const fn higher(v: i128) -> u16 {
    (v >> 32) as u16
}

/// `#highera(v)`: bits 32..48 of `v + 0x8000`.
pub const fn highera(v: i128) -> u16 {
    ((v + 0x8000) >> 32) as u16
}

/// `#highest(v)`: bits 48..64.
pub const fn highest(v: i128) -> u16 {
    (v >> 48) as u16
}

/// `#highesta(v)`: bits 48..64 of `v + 0x8000`.
pub const fn highesta(v: i128) -> u16 {
    ((v + 0x8000) >> 48) as u16
}

/// The value an `addis rT,rA,ha; addi rT,rT,lo` pair (or `addis` + D/DS-form access)
/// adds to rA: the decoder of [`ha`] + [`lo`].
pub const fn join_ha_lo(ha: u16, lo: u16) -> i64 {
    ((ha as i16 as i64) << 16) + lo as i16 as i64
}

// ---------------------------------------------------------------------------------------
// Instruction fields. Every encoder checks its field's range and alignment and returns the
// new word(s), or what is wrong; nothing is written by an encoder.

/// DS form: a 16-bit signed offset whose low 2 bits are opcode bits (`ld`, `std`, `lwa`).
/// `imm` (the low 16 bits of the offset) must be 4-aligned; the low 2 bits of `half` stay.
pub fn encode_ds(half: u16, imm: u16) -> Result<u16, RelocProblem> {
    fits(i128::from(imm), Range::unsigned(16), 4)?;
    Ok((half & 3) | imm)
}

/// The offset field of a DS-form halfword (low 2 bits cleared), sign-extended.
pub const fn decode_ds(half: u16) -> i64 {
    (half & !3) as i16 as i64
}

/// DQ form: like DS with 4 opcode bits (`lxv`, `stxv`, `lq`, `lxvp`); 16-aligned offsets.
pub fn encode_dq(half: u16, imm: u16) -> Result<u16, RelocProblem> {
    fits(i128::from(imm), Range::unsigned(16), 16)?;
    Ok((half & 15) | imm)
}

/// The offset field of a DQ-form halfword (low 4 bits cleared), sign-extended.
pub const fn decode_dq(half: u16) -> i64 {
    (half & !15) as i16 as i64
}

/// Whether `word` is a DQ-form instruction (its low 4 immediate bits are opcode bits).
pub const fn is_dq_form(word: u32) -> bool {
    match word >> 26 {
        6 | 56 => true,      // lxvp/stxvp, lq
        61 => word & 3 == 1, // lxv/stxv (61 with XO 0b01); other 61s are DS form
        _ => false,
    }
}

/// I form (`b`, `bl`): a 26-bit signed, 4-aligned branch offset in bits 2..26 (±32 MiB);
/// the AA and LK bits and the opcode stay.
pub fn encode_li24(word: u32, offset: i128) -> Result<u32, RelocProblem> {
    fits(offset, Range::signed(26), 4)?;
    Ok((word & !0x03ff_fffc) | (offset as u32 & 0x03ff_fffc))
}

/// The branch offset of an I-form word.
pub const fn decode_li24(word: u32) -> i64 {
    crate::bits::sign_extend((word & 0x03ff_fffc) as u64, 26)
}

/// A prefixed instruction's 34-bit signed immediate (`paddi`, `pld`, `plwz`, ...): bits
/// 33..16 in the prefix's low 18 bits, bits 15..0 in the suffix's low 16 bits.
pub fn encode_d34(prefix: u32, suffix: u32, value: i128) -> Result<(u32, u32), RelocProblem> {
    fits(value, Range::signed(34), 1)?;
    let v = value as u64;
    Ok((
        (prefix & !0x3_ffff) | ((v >> 16) as u32 & 0x3_ffff),
        (suffix & !0xffff) | (v as u32 & 0xffff),
    ))
}

/// The 34-bit immediate of a prefixed instruction, sign-extended.
pub const fn decode_d34(prefix: u32, suffix: u32) -> i64 {
    let raw = ((prefix as u64 & 0x3_ffff) << 16) | (suffix as u64 & 0xffff);
    crate::bits::sign_extend(raw, 34)
}

#[cfg(test)]
mod tests {

    use super::*;
    use crate::bits::{fits_signed, read_u64, sign_extend};
    use proptest::prelude::*;

    const GOT: u64 = 0x10_0000_0000;
    const TOC: u64 = GOT + TOC_BIAS;

    fn input(r_type: RelocationType, s: u64, a: i64, p: u64) -> RelocInput {
        RelocInput {
            r_type,
            s,
            a,
            p,
            got_slot: None,
            got_base: GOT,
            stub: None,
            size: 0,
            other: 0,
            hi: None,
        }
    }

    /// Applies `r` to `code` (little-endian words) at word 1 of a buffer that has a guard
    /// word on each side; returns the result and the buffer's words.
    fn run(r: &RelocInput, code: &[u32]) -> (Result<Applied, Failure>, [u32; 6]) {
        let mut bytes = [0xAAu8; 24];
        for (chunk, word) in bytes
            .get_mut(4..)
            .unwrap_or(&mut [])
            .chunks_exact_mut(4)
            .zip(code)
        {
            chunk.copy_from_slice(&word.to_le_bytes());
        }
        let result = apply(r, bytes.get_mut(4..).unwrap_or(&mut []));
        let mut words = [0u32; 6];
        for (w, chunk) in words.iter_mut().zip(bytes.chunks_exact(4)) {
            *w = read_u32(chunk).unwrap_or(0);
        }
        (result, words)
    }

    fn word(words: &[u32; 6], i: usize) -> u32 {
        words.get(i).copied().unwrap_or(0)
    }

    fn problem(result: Result<Applied, Failure>) -> Option<RelocProblem> {
        result.err().map(|f| f.problem)
    }

    const OVERFLOW16: Option<RelocProblem> = Some(RelocProblem::Overflow {
        range: Range::signed(16),
    });

    /// `addis r2,r12,0` / `addi r2,r2,0` / `ld r3,0(r3)` / `lxv vs0,0(r3)` / `bl 0`.
    const ADDIS: u32 = 0x3c4c_0000;
    const ADDI: u32 = 0x3842_0000;
    const LD: u32 = 0xe863_0000;
    const LXV: u32 = 0xf403_0001;
    const BL: u32 = 0x4800_0001;

    #[test]
    fn global_entry_prologue_computes_the_toc_pointer() {
        // addis r2,r12,(.TOC.-f)@ha at f; addi r2,r2,(.TOC.-f)@l at f+4 (addend 4).
        let f = GOT - 0x10_0000 + 0x124;
        let (ok, w) = run(&input(R_PPC64_REL16_HA, TOC, 0, f), &[ADDIS]);
        assert!(ok.is_ok());
        let high = word(&w, 1);
        let (ok, w) = run(&input(R_PPC64_REL16_LO, TOC, 4, f + 4), &[ADDI]);
        assert!(ok.is_ok());
        let low = word(&w, 1);
        assert_eq!(high & 0xffff_0000, ADDIS);
        assert_eq!(low & 0xffff_0000, ADDI);
        let r2 = f as i64 + join_ha_lo(high as u16, low as u16);
        assert_eq!(r2 as u64, TOC);
    }

    #[test]
    fn ha_boundaries() {
        // TOC16_HA: S + A - TOC + 0x8000 must fit 32 bits signed.
        let max = TOC as i64 + 0x7fff_7fff;
        let (ok, w) = run(&input(R_PPC64_TOC16_HA, max as u64, 0, 0), &[ADDIS]);
        assert!(ok.is_ok());
        assert_eq!(word(&w, 1), ADDIS | 0x7fff);
        let (err, w) = run(&input(R_PPC64_TOC16_HA, max as u64 + 1, 0, 0), &[ADDIS]);
        assert!(matches!(
            problem(err),
            Some(RelocProblem::Overflow { range }) if range == Range::signed(32).shifted(-0x8000)
        ));
        assert_eq!(word(&w, 1), ADDIS, "nothing written");
        let min = TOC as i64 - 0x8000_8000;
        let (ok, w) = run(&input(R_PPC64_TOC16_HA, min as u64, 0, 0), &[ADDIS]);
        assert!(ok.is_ok());
        assert_eq!(word(&w, 1), ADDIS | 0x8000);
        let (err, _) = run(&input(R_PPC64_TOC16_HA, min as u64 - 1, 0, 0), &[ADDIS]);
        assert!(err.is_err());
        // HI: the value itself must fit 32 bits.
        let (ok, _) = run(&input(R_PPC64_TOC16_HI, TOC + 0x7fff_ffff, 0, 0), &[ADDIS]);
        assert!(ok.is_ok());
        let (err, _) = run(&input(R_PPC64_TOC16_HI, TOC + 0x8000_0000, 0, 0), &[ADDIS]);
        assert!(err.is_err());
        // LO takes the low bits of anything.
        let (ok, w) = run(&input(R_PPC64_TOC16_LO, TOC + 0x7_1234_fff0, 0, 0), &[ADDI]);
        assert!(ok.is_ok());
        assert_eq!(word(&w, 1), ADDI | 0xfff0);
    }

    #[test]
    fn toc16_and_ds_boundaries() {
        let (ok, w) = run(&input(R_PPC64_TOC16, TOC + 0x7fff, 0, 0), &[ADDI]);
        assert!(ok.is_ok());
        assert_eq!(word(&w, 1), ADDI | 0x7fff);
        let (ok, w) = run(&input(R_PPC64_TOC16, TOC - 0x8000, 0, 0), &[ADDI]);
        assert!(ok.is_ok());
        assert_eq!(word(&w, 1), ADDI | 0x8000);
        for s in [TOC + 0x8000, TOC - 0x8001] {
            let (err, w) = run(&input(R_PPC64_TOC16, s, 0, 0), &[ADDI]);
            assert_eq!(problem(err), OVERFLOW16);
            assert_eq!(word(&w, 1), ADDI);
        }
        // DS: 4-aligned, the low 2 bits of the instruction stay (ld is XO 0; lwa is 2).
        let lwa = LD | 2;
        let (ok, w) = run(&input(R_PPC64_TOC16_DS, TOC + 0x7ffc, 0, 0), &[lwa]);
        assert!(ok.is_ok());
        assert_eq!(word(&w, 1), lwa | 0x7ffc);
        let (err, w) = run(&input(R_PPC64_TOC16_DS, TOC + 0x8000, 0, 0), &[lwa]);
        assert_eq!(problem(err), OVERFLOW16);
        assert_eq!(word(&w, 1), lwa);
        let (err, w) = run(&input(R_PPC64_TOC16_DS, TOC + 6, 0, 0), &[lwa]);
        assert_eq!(problem(err), Some(RelocProblem::Misaligned { align: 4 }));
        assert_eq!(word(&w, 1), lwa);
        let (ok, w) = run(&input(R_PPC64_TOC16_LO_DS, TOC + 0x1_0008, 0, 0), &[LD]);
        assert!(ok.is_ok());
        assert_eq!(word(&w, 1), LD | 8);
        let (err, _) = run(&input(R_PPC64_TOC16_LO_DS, TOC + 0x1_000a, 0, 0), &[LD]);
        assert_eq!(problem(err), Some(RelocProblem::Misaligned { align: 4 }));
    }

    #[test]
    fn dq_form_needs_16_alignment() {
        let (ok, w) = run(&input(R_PPC64_TOC16_LO_DS, TOC + 0x20, 0, 0), &[LXV]);
        assert!(ok.is_ok());
        assert_eq!(word(&w, 1), LXV | 0x20);
        let (err, w) = run(&input(R_PPC64_TOC16_LO_DS, TOC + 0x24, 0, 0), &[LXV]);
        assert_eq!(problem(err), Some(RelocProblem::Misaligned { align: 16 }));
        assert_eq!(word(&w, 1), LXV);
        assert!(is_dq_form(LXV));
        assert!(is_dq_form(0xe000_0000)); // lq
        assert!(!is_dq_form(0xf403_0002)); // stxsd: DS form with opcode 61
        assert!(!is_dq_form(LD));
    }

    #[test]
    fn addr16_family() {
        let v = 0x1234_5678_9abc_def0u64;
        let cases = [
            (R_PPC64_ADDR16_LO, 0xdef0),
            (R_PPC64_ADDR16_HIGH, 0x9abc),
            (R_PPC64_ADDR16_HIGHA, 0x9abd),
            (R_PPC64_ADDR16_HIGHER, 0x5678),
            (R_PPC64_ADDR16_HIGHERA, 0x5678),
            (R_PPC64_ADDR16_HIGHEST, 0x1234),
            (R_PPC64_ADDR16_HIGHESTA, 0x1234),
        ];
        for (r_type, want) in cases {
            let (ok, w) = run(&input(r_type, v, 0, 0), &[ADDI]);
            assert!(ok.is_ok(), "{}", name(r_type).unwrap_or("?"));
            assert_eq!(word(&w, 1), ADDI | want, "{}", name(r_type).unwrap_or("?"));
        }
        // highera/highesta carry the +0x8000 through.
        let (_, w) = run(
            &input(R_PPC64_ADDR16_HIGHERA, 0xffff_ffff_8000, 0, 0),
            &[ADDI],
        );
        assert_eq!(word(&w, 1), ADDI, "0xffff_ffff_8000 @highera is 0");
        let (_, w) = run(
            &input(R_PPC64_ADDR16_HIGHER, 0xffff_ffff_8000, 0, 0),
            &[ADDI],
        );
        assert_eq!(word(&w, 1), ADDI | 0xffff);
        // ADDR16_HI/HA check 32 bits; ADDR16 accepts signed or unsigned 16.
        let (err, _) = run(&input(R_PPC64_ADDR16_HA, v, 0, 0), &[ADDIS]);
        assert!(err.is_err());
        let (ok, _) = run(&input(R_PPC64_ADDR16_HA, 0x7fff_7fff, 0, 0), &[ADDIS]);
        assert!(ok.is_ok());
        let (ok, _) = run(&input(R_PPC64_ADDR16, 0xffff, 0, 0), &[ADDI]);
        assert!(ok.is_ok());
        let (ok, _) = run(&input(R_PPC64_ADDR16, 0, -0x8000, 0), &[ADDI]);
        assert!(ok.is_ok());
        let (err, _) = run(&input(R_PPC64_ADDR16, 0x1_0000, 0, 0), &[ADDI]);
        assert!(err.is_err());
        let (err, _) = run(&input(R_PPC64_ADDR16, 0, -0x8001, 0), &[ADDI]);
        assert!(err.is_err());
    }

    #[test]
    fn got16_forms_use_the_slot() {
        let r = RelocInput {
            got_slot: Some(GOT + 0x18),
            ..input(R_PPC64_GOT16_LO_DS, 0xdead_0000, 0, 0)
        };
        let (ok, w) = run(&r, &[LD]);
        assert_eq!(ok.map(|a| (a.value, a.via)), Ok((0x18 - 0x8000, Via::Got)));
        assert_eq!(word(&w, 1), LD | 0x8018);
        let (err, _) = run(
            &RelocInput {
                got_slot: None,
                ..r
            },
            &[LD],
        );
        assert_eq!(problem(err), Some(RelocProblem::MissingSlot));
    }

    #[test]
    fn data_fields() {
        let (ok, w) = run(&input(R_PPC64_ADDR64, 0x1122_3344_5566_7788, 8, 0), &[0, 0]);
        assert!(ok.is_ok());
        assert_eq!((word(&w, 1), word(&w, 2)), (0x5566_7790, 0x1122_3344));
        let (ok, w) = run(&input(R_PPC64_REL64, 0x100, 0, 0x1000), &[0, 0]);
        assert!(ok.is_ok());
        assert_eq!((word(&w, 1), word(&w, 2)), (0xffff_f100, 0xffff_ffff));
        let (ok, w) = run(&input(R_PPC64_TOC, 0, 0, 0), &[0, 0]);
        assert!(ok.is_ok());
        assert_eq!((word(&w, 1), word(&w, 2)), (TOC as u32, (TOC >> 32) as u32));
        let p = 0x1_0000_0000u64;
        let (ok, _) = run(&input(R_PPC64_REL32, p + 0x7fff_ffff, 0, p), &[0]);
        assert!(ok.is_ok());
        let (ok, _) = run(&input(R_PPC64_REL32, p - 0x8000_0000, 0, p), &[0]);
        assert!(ok.is_ok());
        for s in [p + 0x8000_0000, p - 0x8000_0001] {
            let (err, w) = run(&input(R_PPC64_REL32, s, 0, p), &[0x1234]);
            assert!(err.is_err());
            assert_eq!(word(&w, 1), 0x1234);
        }
        let (ok, _) = run(&input(R_PPC64_ADDR32, 0xffff_ffff, 0, 0), &[0]);
        assert!(ok.is_ok());
        let (err, _) = run(&input(R_PPC64_ADDR32, 0x1_0000_0000, 0, 0), &[0]);
        assert!(err.is_err());
    }

    #[test]
    fn local_calls_enter_at_the_local_entry_point() {
        let p = 0x10_0000u64;
        for (other, offset) in [(0u8, 0u64), (2 << 5, 4), (3 << 5, 8), (6 << 5, 64)] {
            let r = RelocInput {
                other,
                ..input(R_PPC64_REL24, p + 0x100, 0, p)
            };
            let (ok, w) = run(&r, &[BL, NOP]);
            assert_eq!(
                ok,
                Ok(Applied {
                    value: 0x100 + i128::from(offset),
                    via: Via::Direct
                })
            );
            assert_eq!(decode_li24(word(&w, 1)), 0x100 + offset as i64);
            assert_eq!(word(&w, 1) & !0x03ff_fffc, BL, "opcode and LK kept");
            assert_eq!(word(&w, 2), NOP, "a local call keeps its nop");
        }
        let reserved = RelocInput {
            other: 7 << 5,
            ..input(R_PPC64_REL24, p + 0x100, 0, p)
        };
        assert!(run(&reserved, &[BL, NOP]).0.is_err());
        // A callee that does not keep r2 (st_other 1) needs a stub from TOC code.
        let clobbers = RelocInput {
            other: 1 << 5,
            ..input(R_PPC64_REL24, p + 0x100, 0, p)
        };
        let (err, w) = run(&clobbers, &[BL, NOP]);
        assert_eq!(problem(err), Some(RelocProblem::MissingSlot));
        assert_eq!(word(&w, 1), BL);
        // From PC-relative code: direct to st_other 0/1, refused for TOC users.
        let (ok, w) = run(
            &RelocInput {
                r_type: R_PPC64_REL24_NOTOC,
                ..clobbers
            },
            &[BL, 0x7c00_0000],
        );
        assert!(ok.is_ok());
        assert_eq!(decode_li24(word(&w, 1)), 0x100);
        let toc_user = RelocInput {
            other: 2 << 5,
            ..input(R_PPC64_REL24_NOTOC, p + 0x100, 0, p)
        };
        assert_eq!(
            problem(run(&toc_user, &[BL]).0),
            Some(RelocProblem::MissingSlot)
        );
    }

    #[test]
    fn rel24_boundaries() {
        let p = 0x1000_0000u64;
        let (ok, _) = run(&input(R_PPC64_REL24, p + 0x1ff_fffc, 0, p), &[BL]);
        assert!(ok.is_ok());
        let (ok, w) = run(&input(R_PPC64_REL24, p - 0x200_0000, 0, p), &[BL]);
        assert!(ok.is_ok());
        assert_eq!(decode_li24(word(&w, 1)), -0x200_0000);
        for s in [p + 0x200_0000, p - 0x200_0004] {
            let (err, w) = run(&input(R_PPC64_REL24, s, 0, p), &[BL]);
            assert!(matches!(
                problem(err),
                Some(RelocProblem::Overflow { range }) if range == Range::signed(26)
            ));
            assert_eq!(word(&w, 1), BL);
        }
        let (err, _) = run(&input(R_PPC64_REL24, p + 2, 0, p), &[BL]);
        assert_eq!(problem(err), Some(RelocProblem::Misaligned { align: 4 }));
    }

    #[test]
    fn external_calls_go_through_the_stub_and_restore_r2() {
        let p = 0x10_0000u64;
        let stub = 0x10_4000u64;
        let r = RelocInput {
            stub: Some(stub),
            got_slot: Some(GOT),
            ..input(R_PPC64_REL24, 0x7fff_0000_0000, 0, p)
        };
        let (ok, w) = run(&r, &[BL, NOP]);
        assert_eq!(
            ok,
            Ok(Applied {
                value: 0x4000,
                via: Via::Stub
            })
        );
        assert_eq!(decode_li24(word(&w, 1)), 0x4000);
        assert_eq!(word(&w, 2), LD_R2_24_R1);
        assert_eq!(word(&w, 3), 0xAAAA_AAAA);
        // No nop after the call: a typed error, nothing written.
        let (err, w) = run(&r, &[BL, 0x7c08_02a6]);
        assert_eq!(
            problem(err),
            Some(RelocProblem::UnexpectedInstruction { word: 0x7c08_02a6 })
        );
        assert_eq!((word(&w, 1), word(&w, 2)), (BL, 0x7c08_02a6));
        // The call is the section's last word: no room for the restore.
        let mut short = BL.to_le_bytes();
        assert!(apply(&r, &mut short).is_err());
        assert_eq!(short, BL.to_le_bytes());
        // PC-relative callers use the second entry and keep the next word.
        let (ok, w) = run(
            &RelocInput {
                r_type: R_PPC64_REL24_NOTOC,
                ..r
            },
            &[BL, 0x7c08_02a6],
        );
        assert!(ok.is_ok());
        assert_eq!(decode_li24(word(&w, 1)), 0x4000 + NOTOC_ENTRY as i64);
        assert_eq!(word(&w, 2), 0x7c08_02a6);
    }

    #[test]
    fn pcrel34_forms() {
        let paddi = [0x0610_0000u32, 0x3860_0000];
        let p = 0x2000_0000u64;
        let max = p + (1 << 33) - 1;
        let (ok, w) = run(&input(R_PPC64_PCREL34, max, 0, p), &paddi);
        assert!(ok.is_ok());
        assert_eq!(decode_d34(word(&w, 1), word(&w, 2)), (1 << 33) - 1);
        assert_eq!(word(&w, 1) & !0x3_ffff, 0x0610_0000);
        assert_eq!(word(&w, 2) & !0xffff, 0x3860_0000);
        let (ok, w) = run(&input(R_PPC64_PCREL34, 0, -(1 << 33), 0), &paddi);
        assert!(ok.is_ok());
        assert_eq!(decode_d34(word(&w, 1), word(&w, 2)), -(1 << 33));
        let (err, w) = run(&input(R_PPC64_PCREL34, max + 1, 0, p), &paddi);
        assert!(matches!(
            problem(err),
            Some(RelocProblem::Overflow { range }) if range == Range::signed(34)
        ));
        assert_eq!((word(&w, 1), word(&w, 2)), (0x0610_0000, 0x3860_0000));
        let pld = [PLD_R12_PREFIX, 0xe460_0000];
        let r = RelocInput {
            got_slot: Some(GOT + 8),
            ..input(R_PPC64_GOT_PCREL34, 0x7fff_0000_0000, 0, GOT - 0x100)
        };
        let (ok, w) = run(&r, &pld);
        assert_eq!(ok.map(|a| (a.value, a.via)), Ok((0x108, Via::Got)));
        assert_eq!(decode_d34(word(&w, 1), word(&w, 2)), 0x108);
        let (err, _) = run(
            &RelocInput {
                got_slot: None,
                ..r
            },
            &pld,
        );
        assert_eq!(problem(err), Some(RelocProblem::MissingSlot));
        let mut short = [0u8; 7];
        assert!(apply(&input(R_PPC64_PCREL34, 0, 0, 0), &mut short).is_err());
        assert_eq!(short, [0; 7]);
    }

    #[test]
    fn stub_loads_its_slot_through_the_toc_and_pc_relative() {
        let mut buf = [0u8; 40];
        let stub = StubInput {
            address: GOT - 0x1_0000 + 8,
            target: 0x7fff_1234_5678,
            got_slot: Some(GOT + 0x9_0010),
            got_base: GOT,
        };
        assert!(write_stub(&mut buf, &stub).is_some());
        let w: [u32; 10] =
            core::array::from_fn(|i| buf.get(4 * i..).and_then(read_u32).unwrap_or(0));
        let [w0, w1, w2, w3, w4, _, w6, w7, w8, w9] = w;
        assert_eq!(w0, STD_R2_24_R1);
        assert_eq!(w1 & 0xffff_0000, ADDIS_R12_R2);
        assert_eq!(w2 & 0xffff_0000, LD_R12_R12);
        let toc_off = join_ha_lo(w1 as u16, w2 as u16);
        assert_eq!(TOC as i64 + toc_off, (GOT + 0x9_0010) as i64);
        assert_eq!((w3, w4), (MTCTR_R12, BCTR));
        let pc = decode_d34(w6, w7);
        assert_eq!(
            stub.address as i64 + NOTOC_ENTRY as i64 + pc,
            (GOT + 0x9_0010) as i64
        );
        assert_eq!((w8, w9), (MTCTR_R12, BCTR));
        assert!(write_stub(&mut [0u8; 39], &stub).is_none());
        let no_slot = StubInput {
            got_slot: None,
            ..stub
        };
        assert!(write_stub(&mut buf, &no_slot).is_none());
        let misaligned = StubInput {
            address: GOT - 0x1_0000 + 4,
            ..stub
        };
        assert!(write_stub(&mut buf, &misaligned).is_none());
    }

    #[test]
    fn every_classified_type_has_a_name_and_applies() {
        check_table(
            |row| RelocInput {
                got_slot: Some(0x10),
                got_base: 0,
                ..super::super::reloc::testing::row_input(row)
            },
            |_| {
                let mut buf = [0u8; 16];
                buf[4..8].copy_from_slice(&NOP.to_le_bytes());
                buf
            },
        );
        assert_eq!(RELOCATIONS.len(), 40);
        // TLS is rejected by name.
        assert!(classify(R_PPC64_GOT_TPREL16_HA).is_none());
        assert_eq!(
            crate::Arch::Ppc64le.reloc_name(R_PPC64_GOT_TPREL16_HA),
            "R_PPC64_GOT_TPREL16_HA"
        );
    }

    #[test]
    fn short_places_are_errors() {
        let mut one = [0u8; 1];
        assert!(apply(&input(R_PPC64_TOC16_LO, TOC, 0, 0), &mut one).is_err());
        let mut three = [0u8; 3];
        assert!(apply(&input(R_PPC64_REL24, 0, 0, 0), &mut three).is_err());
        assert!(apply(&input(R_PPC64_ADDR64, 0, 0, 0), &mut [0u8; 7]).is_err());
        assert_eq!((one, three), ([0], [0; 3]));
    }

    proptest! {
        /// @ha and @lo recombine to the value for everything the HA check accepts; @hi and
        /// @lo, unadjusted, for every value that fits 32 signed bits (below -2^31 the
        /// high half wraps: v = -2^31 - 1 is where proptest found it).
        #[test]
        fn ha_lo_round_trip(v in -0x8000_8000i64..=0x7fff_7fff) {
            prop_assert_eq!(join_ha_lo(ha(v.into()), lo(v.into())), v);
            if i32::try_from(v).is_ok() {
                prop_assert_eq!(
                    i64::from(hi(v.into()) as i16) << 16 | i64::from(lo(v.into())),
                    v
                );
            }
        }

        /// The four 16-bit parts reassemble any 64-bit value, with and without the
        /// adjustment.
        #[test]
        fn parts_reassemble(v in any::<i64>()) {
            let x = i128::from(v);
            let plain = (u64::from(highest(x)) << 48) | (u64::from(higher(x)) << 32)
                | (u64::from(hi(x)) << 16) | u64::from(lo(x));
            prop_assert_eq!(plain, v as u64);
            let adjusted = (u64::from(highesta(x)) << 48)
                .wrapping_add(u64::from(highera(x)) << 32)
                .wrapping_add((u64::from(ha(x)) << 16) & 0xffff_ffff)
                .wrapping_add(sign_extend(u64::from(lo(x)), 16) as u64);
            prop_assert_eq!(adjusted & 0xffff_ffff, v as u64 & 0xffff_ffff);
        }

        /// TOC16_HA + TOC16_LO through real instruction words: the pair reaches S, and the
        /// first out-of-range value is refused with nothing written.
        #[test]
        fn toc_pair_reaches_the_symbol(off in -0x8000_8000i64..=0x7fff_7fff, reg in 0u32..32) {
            let s = (TOC as i64 + off) as u64;
            let addis = ADDIS | reg << 21;
            let (ok, w) = run(&input(R_PPC64_TOC16_HA, s, 0, 0), &[addis]);
            prop_assert!(ok.is_ok());
            prop_assert_eq!(word(&w, 1) & 0xffff_0000, addis);
            let (ok, w2) = run(&input(R_PPC64_TOC16_LO, s, 0, 0), &[ADDI]);
            prop_assert!(ok.is_ok());
            prop_assert_eq!(TOC as i64 + join_ha_lo(word(&w, 1) as u16, word(&w2, 1) as u16), s as i64);
            prop_assert_eq!((word(&w, 0), word(&w, 2)), (0xAAAA_AAAA, 0xAAAA_AAAA));
        }

        /// DS: the offset round-trips when 4-aligned, the low 2 bits stay, misaligned
        /// offsets are refused.
        #[test]
        fn ds_round_trip(half in any::<u16>(), imm in any::<u16>()) {
            match encode_ds(half, imm) {
                Ok(new) => {
                    prop_assert_eq!(imm % 4, 0);
                    prop_assert_eq!(new & 3, half & 3);
                    prop_assert_eq!(decode_ds(new), i64::from(imm as i16));
                }
                Err(problem) => {
                    prop_assert_ne!(imm % 4, 0);
                    prop_assert_eq!(problem, RelocProblem::Misaligned { align: 4 });
                }
            }
            match encode_dq(half, imm) {
                Ok(new) => {
                    prop_assert_eq!(imm % 16, 0);
                    prop_assert_eq!(new & 15, half & 15);
                    prop_assert_eq!(decode_dq(new), i64::from(imm as i16));
                }
                Err(_) => prop_assert_ne!(imm % 16, 0),
            }
        }

        /// LI24: 4-aligned offsets within ±32 MiB round-trip; the opcode, AA and LK bits
        /// stay; the last in-range values pass and the first out-of-range fail.
        #[test]
        fn li24_round_trip(word in any::<u32>(), off in -0x400_0000i64..0x400_0000) {
            let off = i128::from(off);
            match encode_li24(word, off) {
                Ok(new) => {
                    prop_assert!(fits_signed(off, 26) && off % 4 == 0);
                    prop_assert_eq!(i128::from(decode_li24(new)), off);
                    prop_assert_eq!(new & !0x03ff_fffc, word & !0x03ff_fffc);
                }
                Err(_) => prop_assert!(!fits_signed(off, 26) || off % 4 != 0),
            }
            prop_assert!(encode_li24(word, 0x1ff_fffc).is_ok());
            prop_assert!(encode_li24(word, -0x200_0000).is_ok());
            prop_assert!(encode_li24(word, 0x200_0000).is_err());
            prop_assert!(encode_li24(word, -0x200_0004).is_err());
        }

        /// D34: round-trip, the bits outside the immediate stay, boundaries.
        #[test]
        fn d34_round_trip(prefix in any::<u32>(), suffix in any::<u32>(), v in -(1i64 << 34)..(1i64 << 34)) {
            match encode_d34(prefix, suffix, v.into()) {
                Ok((p, s)) => {
                    prop_assert!(fits_signed(v.into(), 34));
                    prop_assert_eq!(decode_d34(p, s), v);
                    prop_assert_eq!(p & !0x3_ffff, prefix & !0x3_ffff);
                    prop_assert_eq!(s & !0xffff, suffix & !0xffff);
                }
                Err(_) => prop_assert!(!fits_signed(v.into(), 34)),
            }
            prop_assert!(encode_d34(prefix, suffix, (1 << 33) - 1).is_ok());
            prop_assert!(encode_d34(prefix, suffix, -(1 << 33)).is_ok());
            prop_assert!(encode_d34(prefix, suffix, 1 << 33).is_err());
            prop_assert!(encode_d34(prefix, suffix, -(1 << 33) - 1).is_err());
        }

        /// REL16_LO writes exactly the low half and never touches the bytes around it,
        /// whatever the instruction's other bits.
        #[test]
        fn half16_leaves_other_bits(insn in any::<u32>(), s in any::<u64>(), p in any::<u32>()) {
            let (ok, w) = run(&input(R_PPC64_REL16_LO, s, 0, p.into()), &[insn]);
            prop_assert!(ok.is_ok());
            prop_assert_eq!(word(&w, 1) & 0xffff_0000, insn & 0xffff_0000);
            prop_assert_eq!(word(&w, 1) as u16, lo(i128::from(s) - i128::from(p)));
            prop_assert_eq!((word(&w, 0), word(&w, 2)), (0xAAAA_AAAA, 0xAAAA_AAAA));
        }

        /// A stub's two entries both reach the slot from any 8-aligned place.
        #[test]
        fn stub_reaches_the_slot(addr in 0u64..1 << 30, slot in 0u64..1 << 27) {
            let address = GOT - (1 << 30) + (addr & !7);
            let stub = StubInput { address, target: 0, got_slot: Some(GOT + slot * 8), got_base: GOT };
            let mut buf = [0u8; 40];
            prop_assert!(write_stub(&mut buf, &stub).is_some());
            let at = |i: usize| buf.get(4 * i..).and_then(read_u32).unwrap_or(0);
            prop_assert_eq!(TOC as i64 + join_ha_lo(at(1) as u16, at(2) as u16), (GOT + slot * 8) as i64);
            prop_assert_eq!(address as i64 + 24 + decode_d34(at(6), at(7)), (GOT + slot * 8) as i64);
            prop_assert!(read_u64(&buf).is_some());
        }
    }
}
