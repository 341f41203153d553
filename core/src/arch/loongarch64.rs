//! loongarch64 (LoongArch ELF psABI v2.30, LP64D): RELA relocations, little-endian, fixed
//! 32-bit instructions whose immediates sit in a few fixed fields.
//!
//! psABI: <https://loongson.github.io/LoongArch-Documentation/LoongArch-ELF-ABI-EN.html>
//! (section "ELF Object Files" → relocations; the extreme-model sequences since v2.30).
//!
//! Notation: S symbol, A addend, P place, G the symbol's GOT slot, PAGE(x) = x & !0xfff.
//!
//! What clang 19 emits (`-fPIC`, -O0..-O3) by code model:
//! - normal: `bl` (B26), `pcalau12i` + `addi.d`/`ld.*` (PCALA_HI20/LO12, GOT_PC_HI20/LO12,
//!   ±2 GiB), 32_PCREL (jump tables), 64 (data);
//! - medium: calls become `pcaddu18i ra` + `jirl ra` (CALL36, ±128 GiB);
//! - extreme: every address is `pcalau12i rA` + `addi.d t8, zero` + `lu32i.d t8` +
//!   `lu52i.d t8, t8` + `add.d`/`ldx.d` (PCALA64_LO20/HI12, GOT64_PC_LO20/HI12): any distance.
//! - with linker relaxation on (`+relax`): also B16/B21 (local branches left to the linker),
//!   ALIGN, and ADD/SUB pairs (ADD32/SUB32 in `.eh_frame`; ADD16/SUB16 and the ULEB128 pair
//!   in debug sections, which are not loaded).
//!
//! HI20 and LO12 halves are page-relative, not label-paired: each is computed from its own
//! S + A and P, so there are no pairs to match (no row is a `hi`/`lo` half). The extreme model's
//! LO20/HI12 halves need the address of their `pcalau12i`; the psABI requires the four
//! instructions to be adjacent, so it is P - 8 (LO20) and P - 12 (HI12). A HI20 alone
//! reaches ±2 GiB and is range-checked, except when the instructions at +8 and +12 are the
//! `lu32i.d rX` + `lu52i.d rX, rX` tail of an extreme sequence: there it is only the low
//! part of a 64-bit distance (see `extreme_tail`).
//!
//! No relaxation is done: RELAX and ALIGN are skipped. This stays correct because nothing
//! is ever moved or deleted: every instruction keeps the offset it has in the object, so the
//! branches and label differences the assembler left as relocations (B16/B21/B26, ADD/SUB
//! pairs) are computed from the final addresses and agree with the code as it is. RELAX only
//! *permits* a linker to shorten a sequence; ALIGN marks NOP padding sized for the worst case
//! that a relaxing linker would trim. Left untrimmed, those NOPs are executed as NOPs, so the
//! only cost is that a loop head may not get its preferred alignment (never a correctness
//! property on LoongArch, where code needs only 4-byte alignment).
//!
//! Far calls: B26 reaches ±128 MiB and CALL36 ±128 GiB. A call to an external target
//! beyond that goes to a stub (one per target, reserved by the pre-scan) that loads the full
//! 64-bit target from a literal inside the stub and jumps through `$t8` (r20), a temporary
//! the calling convention lets any call clobber (clang's own `tail36` uses it the same way):
//!
//! ```text
//!  0: pcaddu12i $t8, 0        # t8 = address of the stub
//!  4: ld.d      $t8, $t8, 16  # t8 = the literal at +16
//!  8: jirl      $zero, $t8, 0 # jump (ra still holds the caller's return address)
//! 12: break     0             # padding, never reached
//! 16: .quad     target        # 8-aligned: stubs start 16-aligned and are 24 bytes
//! ```
//!
//! An inline literal (rather than a GOT slot) keeps each stub self-contained.
//!
//! The table below ([`RELOCATIONS`], whose documentation lists every row with its X,
//! range and alignment) is the single source of what is linked: classification, names and
//! `apply` all come from it. Other types (TLS, the v0 stack-machine `SOP_*` relocations,
//! `GOT_PC` TLS forms, dynamic relocations) are refused by name before memory is
//! allocated.

use super::reloc::{
    add_to_6_bits, add_to_data, call_target, datum, expect, fits, patch32, patch_pair, relocations,
    short, within, write_words, Applied, Failure, RelocInput, StubAddend, StubInput, Via,
};
use crate::bits::{bits, insert, mask, read_u32, sign_extend};
use crate::error::{Range, RelocProblem};
use object::elf::*;

relocations! {
    R_LARCH_NONE: skip(), "—", "nothing written", |_, _| Ok(Applied::NOTHING);
    R_LARCH_RELAX: skip(), "—", "a relaxation hint: nothing written", |_, _| {
        Ok(Applied::NOTHING)
    };
    R_LARCH_ALIGN: skip(), "—", "padding for a relaxing linker: nothing written", |_, _| {
        Ok(Applied::NOTHING)
    };
    R_LARCH_MARK_LA: skip(), "—", "a marker: nothing written", |_, _| Ok(Applied::NOTHING);
    R_LARCH_MARK_PCREL: skip(), "—", "a marker: nothing written", |_, _| Ok(Applied::NOTHING);
    R_LARCH_64: data(8), "S + A", "any 64-bit value", |r, at| datum(at, 8, r.sa(), None);
    // Read as signed or unsigned by its consumer.
    R_LARCH_32: data(4), "S + A", "32 bits, signed or unsigned", |r, at| {
        datum(at, 4, r.sa(), Some(Range::either(32)))
    };
    // Jump tables, .eh_frame.
    R_LARCH_32_PCREL: data(4), "S + A - P", "signed 32 bits", |r, at| {
        datum(at, 4, r.sap(), Some(Range::signed(32)))
    };
    R_LARCH_64_PCREL: data(8), "S + A - P", "any 64-bit value", |r, at| {
        datum(at, 8, r.sap(), None)
    };
    // The two halves of a label difference, each modular (the psABI's definition, and a
    // half alone has no range to check).
    R_LARCH_ADD8: data(1), "V + S + A", "modular", |r, at| add(at, 1, r, 1);
    R_LARCH_ADD16: data(2), "V + S + A", "modular", |r, at| add(at, 2, r, 1);
    R_LARCH_ADD24: data(3), "V + S + A", "modular", |r, at| add(at, 3, r, 1);
    R_LARCH_ADD32: data(4), "V + S + A", "modular", |r, at| add(at, 4, r, 1);
    R_LARCH_ADD64: data(8), "V + S + A", "modular", |r, at| add(at, 8, r, 1);
    R_LARCH_SUB8: data(1), "V - S - A", "modular", |r, at| add(at, 1, r, -1);
    R_LARCH_SUB16: data(2), "V - S - A", "modular", |r, at| add(at, 2, r, -1);
    R_LARCH_SUB24: data(3), "V - S - A", "modular", |r, at| add(at, 3, r, -1);
    R_LARCH_SUB32: data(4), "V - S - A", "modular", |r, at| add(at, 4, r, -1);
    R_LARCH_SUB64: data(8), "V - S - A", "modular", |r, at| add(at, 8, r, -1);
    // The low 6 bits of a byte (DW_CFA_advance_loc), the top 2 bits kept.
    R_LARCH_ADD6: data(1), "V + S + A", "modular, low 6 bits", |r, at| {
        add_to_6_bits(at, sa(r), false).map(|_| Applied::direct(r.sa()))
    };
    R_LARCH_SUB6: data(1), "V - S - A", "modular, low 6 bits", |r, at| {
        add_to_6_bits(at, sa(r).wrapping_neg(), false).map(|_| Applied::direct(r.sa()))
    };
    // At least one byte; the rest of the ULEB128 is bounds-checked when applied.
    R_LARCH_ADD_ULEB128: data(1), "V + S + A", "fits the ULEB128's length (7 bits a byte)",
        |r, at| add_uleb128(at, sa(r));
    R_LARCH_SUB_ULEB128: data(1), "V - S - A", "fits the ULEB128's length (7 bits a byte)",
        |r, at| add_uleb128(at, sa(r).wrapping_neg());
    R_LARCH_B16: data(4), "S + A - P", "±128 KiB, 4-aligned: offs16 of beq/bne/blt...",
        |r, at| branch(at, r.sap(), encode_b16);
    R_LARCH_B21: data(4), "S + A - P", "±4 MiB, 4-aligned: offs21 of beqz/bnez/bceqz/bcnez",
        |r, at| branch(at, r.sap(), encode_b21);
    R_LARCH_PCREL20_S2: data(4), "S + A - P", "±2 MiB, 4-aligned: si20 of pcaddi",
        |r, at| branch(at, r.sap(), encode_pcaddi);
    R_LARCH_B26: call(4), "S + A - P (or stub - P)", "±128 MiB, 4-aligned: offs26 of b/bl",
        |r, at| {
            let (value, via) = call_target(r, Range::signed(28), StubAddend::MustBeZero);
            patch32(at, value, |w| encode_b26(w, value as i64)).map(|()| Applied { value, via })
        };
    R_LARCH_CALL36: call(8), "S + A - P (or stub - P)",
        "−2^37 − 0x20000 ≤ X < 2^37 − 0x20000, 4-aligned: pcaddu18i + jirl", |r, at| {
            let (value, via) = call_target(r, CALL36_REACH, StubAddend::MustBeZero);
            patch_pair(at, value, |first, second| {
                expect(first & 0xfe00_0000 == PCADDU18I, first)?;
                expect(second & 0xfc00_0000 == JIRL, second)?;
                encode_call36(first, second, value as i64)
            })
            .map(|()| Applied { value, via })
        };
    // The page delta of pcalau12i: ±2 GiB, or any distance as the first of an
    // extreme-model sequence.
    R_LARCH_PCALA_HI20: data(4), "PAGE(S + A + 0x800) - PAGE(P)",
        "signed 32 bits unless an extreme tail follows: bits 31..12 into si20",
        |r, at| hi20(at, page_delta(sa(r), r.p), Via::Direct);
    R_LARCH_PCALA_LO12: data(4), "(S + A) & 0xfff", "none: si12 (or jirl's offs16, 4-aligned)",
        |r, at| lo12(at, r.sa(), Via::Direct);
    // The extreme model: bits [51:32] and [63:52] of S + A - PAGE(pcalau12i).
    R_LARCH_PCALA64_LO20: data(4), "S + A - PAGE(P - 8), bits 51..32", "none: si20 of lu32i.d",
        |r, at| lo20(at, page_split(sa(r), r.p.wrapping_sub(8)).lo20, r.sa(), Via::Direct);
    R_LARCH_PCALA64_HI12: data(4), "S + A - PAGE(P - 12), bits 63..52", "none: si12 of lu52i.d",
        |r, at| hi12(at, page_split(sa(r), r.p.wrapping_sub(12)).hi12, r.sa(), Via::Direct);
    // The same four with G + A: the address of the symbol's GOT slot.
    R_LARCH_GOT_PC_HI20: got(4), "PAGE(G + A + 0x800) - PAGE(P)",
        "signed 32 bits unless an extreme tail follows", |r, at| {
            hi20(at, page_delta(ga(r)?, r.p), Via::Got)
        };
    R_LARCH_GOT_PC_LO12: got(4), "(G + A) & 0xfff", "none: si12", |r, at| {
        lo12(at, ga(r)?.into(), Via::Got)
    };
    R_LARCH_GOT64_PC_LO20: got(4), "G + A - PAGE(P - 8), bits 51..32", "none: si20", |r, at| {
        let g = ga(r)?;
        lo20(at, page_split(g, r.p.wrapping_sub(8)).lo20, g.into(), Via::Got)
    };
    R_LARCH_GOT64_PC_HI12: got(4), "G + A - PAGE(P - 12), bits 63..52", "none: si12", |r, at| {
        let g = ga(r)?;
        hi12(at, page_split(g, r.p.wrapping_sub(12)).hi12, g.into(), Via::Got)
    };
    // Absolute S + A: bits [31:12] (`lu12i.w`), [11:0] (`ori`, zero-extended: no rounding),
    // [51:32] (`lu32i.d`), [63:52] (`lu52i.d`).
    R_LARCH_ABS_HI20: data(4), "S + A, bits 31..12", "signed 32 bits unless an extreme tail follows",
        |r, at| hi20(at, i128::from(sa(r) as i64), Via::Direct);
    R_LARCH_ABS_LO12: data(4), "S + A, bits 11..0", "none: ui12 of ori",
        |r, at| lo12(at, sa(r).into(), Via::Direct);
    R_LARCH_ABS64_LO20: data(4), "S + A, bits 51..32", "none: si20 of lu32i.d",
        |r, at| lo20(at, upper20(sa(r)), sa(r).into(), Via::Direct);
    R_LARCH_ABS64_HI12: data(4), "S + A, bits 63..52", "none: si12 of lu52i.d",
        |r, at| hi12(at, top12(sa(r)), sa(r).into(), Via::Direct);
    // The same with G + A, absolute.
    R_LARCH_GOT_HI20: got(4), "G + A, bits 31..12", "signed 32 bits unless an extreme tail follows",
        |r, at| hi20(at, i128::from(ga(r)? as i64), Via::Got);
    R_LARCH_GOT_LO12: got(4), "G + A, bits 11..0", "none", |r, at| {
        lo12(at, ga(r)?.into(), Via::Got)
    };
    R_LARCH_GOT64_LO20: got(4), "G + A, bits 51..32", "none", |r, at| {
        let g = ga(r)?;
        lo20(at, upper20(g), g.into(), Via::Got)
    };
    R_LARCH_GOT64_HI12: got(4), "G + A, bits 63..52", "none", |r, at| {
        let g = ga(r)?;
        hi12(at, top12(g), g.into(), Via::Got)
    };
}

// ---------------------------------------------------------------------------------------
// What the rows share.

/// The reach of `pcaddu18i` + `jirl`: -2^37 - 0x20000 ..= 2^37 - 0x20000 - 4 (about
/// ±128 GiB; see [`encode_call36`]).
const CALL36_REACH: Range = Range::signed(38).shifted(-0x2_0000);

/// S + A as a 64-bit address (modulo 2^64).
fn sa(r: &RelocInput) -> u64 {
    r.s.wrapping_add_signed(r.a)
}

/// G + A as a 64-bit address.
fn ga(r: &RelocInput) -> Result<u64, Failure> {
    Ok((r.got()? as u64).wrapping_add_signed(r.a))
}

/// Bits \[51:32\] of `v`, sign-extended (what `lu32i.d` takes).
fn upper20(v: u64) -> i64 {
    sign_extend(bits(v, 51, 32), 20)
}

/// Bits \[63:52\] of `v`, sign-extended (what `lu52i.d` takes).
fn top12(v: u64) -> i64 {
    sign_extend(bits(v, 63, 52), 12)
}

/// `*P += S + A` (`sign` 1) or `*P -= S + A` (`sign` -1) on a `bytes`-byte field, modulo
/// its width.
fn add(place: &mut [u8], bytes: usize, r: &RelocInput, sign: i8) -> Result<Applied, Failure> {
    let delta = if sign < 0 {
        sa(r).wrapping_neg()
    } else {
        sa(r)
    };
    add_to_data(place, bytes, delta).map(|_| Applied::direct(r.sa()))
}

/// A PC-relative branch X into the field `encode` writes.
fn branch(
    place: &mut [u8],
    value: i128,
    encode: fn(u32, i64) -> Result<u32, RelocProblem>,
) -> Result<Applied, Failure> {
    patch32(place, value, |w| encode(w, value as i64)).map(|()| Applied::direct(value))
}

/// A HI20 (`pcalau12i` page delta or `lu12i.w` absolute bits \[31:12\]) into si20. `value`
/// must fit 32 signed bits unless an extreme-model tail follows, which supplies the upper
/// 32 bits.
fn hi20(place: &mut [u8], value: i128, via: Via) -> Result<Applied, Failure> {
    if !extreme_tail(place) {
        within(value, Range::signed(32))?;
    }
    let field = sign_extend(bits(value as u64, 31, 12), 20);
    patch32(place, value, |w| encode_si20(w, field)).map(|()| Applied { value, via })
}

/// A LO12: the low 12 bits of `value` into si12, or for `jirl` (the pre-CALL36 medium
/// model, `pcalau12i` + `jirl`) into its offs16 as lo12 >> 2.
fn lo12(place: &mut [u8], value: i128, via: Via) -> Result<Applied, Failure> {
    let low = sign_extend(value as u64 & 0xfff, 12);
    patch32(place, value, |w| {
        if w & 0xfc00_0000 == JIRL {
            fits(i128::from(low), Range::signed(12), 4)?;
            encode_si16(w, low >> 2)
        } else {
            encode_si12(w, low)
        }
    })
    .map(|()| Applied { value, via })
}

/// Bits \[51:32\] of a 64-bit value into `lu32i.d`'s si20.
fn lo20(place: &mut [u8], field: i64, value: i128, via: Via) -> Result<Applied, Failure> {
    patch32(place, value, |w| encode_si20(w, field)).map(|()| Applied { value, via })
}

/// Bits \[63:52\] of a 64-bit value into `lu52i.d`'s si12.
fn hi12(place: &mut [u8], field: i64, value: i128, via: Via) -> Result<Applied, Failure> {
    patch32(place, value, |w| encode_si12(w, field)).map(|()| Applied { value, via })
}

/// `*P += delta` on a ULEB128, keeping its encoded length; the sum must fit the 7 bits per
/// byte that length gives.
fn add_uleb128(place: &mut [u8], delta: u64) -> Result<Applied, Failure> {
    let mut old = 0u64;
    let mut len = 0usize;
    loop {
        let byte = *place.get(len).ok_or_else(|| short(len + 1, place.len()))?;
        if len < 10 {
            old |= u64::from(byte & 0x7f) << (7 * len);
        }
        len += 1;
        if byte & 0x80 == 0 {
            break;
        }
        if len >= 10 {
            // 10 bytes carry 70 bits: anything longer is malformed.
            return Err(short(len + 1, len));
        }
    }
    let new = old.wrapping_add(delta);
    let width = (7 * len).min(64) as u32;
    if width < 64 && new >> width != 0 {
        return Err(Failure::new(
            RelocProblem::Overflow {
                range: Range::unsigned(width),
            },
            i128::from(new),
        ));
    }
    let have = place.len();
    let field = place.get_mut(..len).ok_or_else(|| short(len, have))?;
    let last = len - 1;
    for (i, byte) in field.iter_mut().enumerate() {
        let chunk = (new >> (7 * i).min(63)) as u8 & 0x7f;
        *byte = if i < last { chunk | 0x80 } else { chunk };
    }
    Ok(Applied::direct(i128::from(new)))
}

// ---------------------------------------------------------------------------------------
// Address splits.

/// The four immediates that build a 64-bit PC-relative distance: `pcalau12i` (hi20),
/// `addi.d t8, zero` (lo12), `lu32i.d t8` (lo20) and `lu52i.d t8, t8` (hi12), computed so
/// that `PAGE(pc) + sext(hi20 << 12) + t8 == dest` modulo 2^64, where
/// `t8 = hi12 << 52 | lo20 << 32 | (sext(lo12) & 0xffff_ffff)`.
///
/// lo12 is the low 12 bits of `dest` (what the LO12 relocation writes) and hi20 the
/// `+0x800`-rounded page delta (what HI20 writes); lo20/hi12 are then whatever the upper
/// 32 bits of the remaining difference are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageSplit {
    pub hi20: i64,
    pub lo12: i64,
    pub lo20: i64,
    pub hi12: i64,
}

pub fn page_split(dest: u64, pc: u64) -> PageSplit {
    let delta = dest.wrapping_sub(pc & !0xfff);
    let lo12 = sign_extend(delta & 0xfff, 12);
    let upper = delta.wrapping_sub(lo12 as u64); // low 12 bits are zero
    let hi20 = sign_extend(bits(upper, 31, 12), 20);
    // What pcalau12i and addi.d contribute, then the rest for lu32i.d/lu52i.d.
    let from_hi20 = (hi20 << 12) as u64;
    let rest = delta
        .wrapping_sub(from_hi20)
        .wrapping_sub((lo12 as u64) & mask(32));
    PageSplit {
        hi20,
        lo12,
        lo20: sign_extend(bits(rest, 51, 32), 20),
        hi12: sign_extend(bits(rest, 63, 52), 12),
    }
}

/// The page delta a lone `pcalau12i` + LO12 pair needs: `(dest + 0x800) - PAGE(pc)` as a
/// signed value (the HI20 field is its bits \[31:12\]; it must fit 32 signed bits).
fn page_delta(dest: u64, pc: u64) -> i128 {
    i128::from((dest.wrapping_add(0x800) & !0xfff).wrapping_sub(pc & !0xfff) as i64)
}

/// Whether the instructions at +8 and +12 are `lu32i.d rX` + `lu52i.d rX, rX`, with the
/// instruction at +4 also writing rX: the tail of an extreme-model sequence, which makes a
/// HI20 at +0 only the low part of a 64-bit value (so no ±2 GiB check applies to it).
fn extreme_tail(place: &[u8]) -> bool {
    let word = |at: usize| place.get(at..).and_then(read_u32);
    let (Some(mid), Some(lu32), Some(lu52)) = (word(4), word(8), word(12)) else {
        return false;
    };
    let rd = lu32 & 0x1f;
    lu32 & 0xfe00_0000 == LU32I_D
        && lu52 & 0xffc0_0000 == LU52I_D
        && lu52 & 0x1f == rd
        && (lu52 >> 5) & 0x1f == rd
        && mid & 0x1f == rd
}

// ---------------------------------------------------------------------------------------
// The stub and the base ABI.

/// Three instructions, 4 bytes of padding and an 8-byte literal.
pub(crate) const STUB_SIZE: u64 = 24;
/// Stubs carry their target inline.
pub(crate) const STUB_USES_GOT: bool = false;

/// `$t8`, the stub's scratch register.
const T8: u32 = 20;
/// `pcaddu18i rd, si20`: rd = PC + (si20 << 18) (the first of CALL36's pair).
const PCADDU18I: u32 = 0x1e00_0000;
/// `pcaddu12i rd, si20`: rd = PC + (si20 << 12).
const PCADDU12I: u32 = 0x1c00_0000;
/// `ld.d rd, rj, si12`.
const LD_D: u32 = 0x28c0_0000;
/// `jirl rd, rj, offs16`: rd = PC + 4; PC = rj + (offs16 << 2).
const JIRL: u32 = 0x4c00_0000;
/// `break 0`.
const BREAK: u32 = 0x002a_0000;
/// `lu32i.d rd, si20` and `lu52i.d rd, rj, si12` (the tail of an extreme-model sequence).
const LU32I_D: u32 = 0x1600_0000;
const LU52I_D: u32 = 0x0300_0000;

pub(crate) fn write_stub(buf: &mut [u8], stub: &StubInput) -> Option<()> {
    let target = stub.target;
    let words = [
        PCADDU12I | T8,
        LD_D | (16 << 10) | (T8 << 5) | T8,
        JIRL | (T8 << 5),
        BREAK,
        target as u32,
        (target >> 32) as u32,
    ];
    write_words(buf.get_mut(..24)?, &words)
}

/// The base ABI in `e_flags` bits \[2:0\]: LP64D (double-float), what Linux and the Rust
/// `loongarch64-unknown-none` target use, and the only one elfjit links: a `float` or `double`
/// argument must be in the register its caller puts it in. (`-mabi=lp64s`/`lp64f` objects
/// are refused, not silently miscalled.)
pub const REQUIRED_BASE_ABI: FileFlags = EF_LARCH_ABI_DOUBLE_FLOAT;

/// `Ok` for an LP64D object; otherwise its base-ABI bits, for the error. (The object-ABI
/// version in bits \[7:6\] needs no check: v0 objects use the stack-machine `SOP_*`
/// relocations, which the table does not have and the pre-scan refuses by name.)
pub fn check_flags(e_flags: FileFlags) -> Result<(), FileFlags> {
    let abi = e_flags.larch_abi_modifier();
    if abi == REQUIRED_BASE_ABI {
        Ok(())
    } else {
        Err(abi)
    }
}

// ---------------------------------------------------------------------------------------
// Immediate fields. Each encoder returns the instruction with its field replaced (every
// other bit untouched), or says why the value does not fit; its decoder reads it back.

/// si12 in bits \[21:10\] (`addi.d`, `ld.*`/`st.*`, `lu52i.d`; `ori`'s ui12 is the same bits):
/// -2048..=2047.
pub fn encode_si12(word: u32, value: i64) -> Result<u32, RelocProblem> {
    fits(i128::from(value), Range::signed(12), 1)?;
    Ok(insert(word, value as u64, 21, 10))
}

pub fn decode_si12(word: u32) -> i64 {
    sign_extend(bits(u64::from(word), 21, 10), 12)
}

/// si16 in bits \[25:10\] (`jirl`'s offs16, before its shift by 2): -32768..=32767.
pub fn encode_si16(word: u32, value: i64) -> Result<u32, RelocProblem> {
    fits(i128::from(value), Range::signed(16), 1)?;
    Ok(insert(word, value as u64, 25, 10))
}

pub fn decode_si16(word: u32) -> i64 {
    sign_extend(bits(u64::from(word), 25, 10), 16)
}

/// si20 in bits \[24:5\] (`lu12i.w`, `lu32i.d`, `pcalau12i`, `pcaddu12i`, `pcaddu18i`,
/// `pcaddi`): -2^19..2^19.
pub fn encode_si20(word: u32, value: i64) -> Result<u32, RelocProblem> {
    fits(i128::from(value), Range::signed(20), 1)?;
    Ok(insert(word, value as u64, 24, 5))
}

pub fn decode_si20(word: u32) -> i64 {
    sign_extend(bits(u64::from(word), 24, 5), 20)
}

/// The check of a branch field of `bits` bits that holds a 4-aligned offset >> 2.
fn branch_fits(offset: i64, bits: u32) -> Result<(), RelocProblem> {
    fits(i128::from(offset), Range::signed(bits + 2), 4)
}

/// B16 (`beq`, `bne`, `blt`, ...): a byte offset, 4-aligned, ±128 KiB, stored >> 2 as
/// offs16 in \[25:10\].
pub fn encode_b16(word: u32, offset: i64) -> Result<u32, RelocProblem> {
    branch_fits(offset, 16)?;
    Ok(insert(word, (offset >> 2) as u64, 25, 10))
}

pub fn decode_b16(word: u32) -> i64 {
    decode_si16(word) << 2
}

/// B21 (`beqz`, `bnez`, `bceqz`, `bcnez`): 4-aligned, ±4 MiB; offs21 = offset >> 2, its
/// bits \[15:0\] in \[25:10\] and \[20:16\] in \[4:0\].
pub fn encode_b21(word: u32, offset: i64) -> Result<u32, RelocProblem> {
    branch_fits(offset, 21)?;
    let offs = (offset >> 2) as u64;
    Ok(insert(insert(word, offs, 25, 10), offs >> 16, 4, 0))
}

pub fn decode_b21(word: u32) -> i64 {
    let w = u64::from(word);
    sign_extend(bits(w, 25, 10) | (bits(w, 4, 0) << 16), 21) << 2
}

/// B26 (`b`, `bl`): 4-aligned, ±128 MiB; offs26 = offset >> 2, its bits \[15:0\] in \[25:10\]
/// and \[25:16\] in \[9:0\].
pub fn encode_b26(word: u32, offset: i64) -> Result<u32, RelocProblem> {
    branch_fits(offset, 26)?;
    let offs = (offset >> 2) as u64;
    Ok(insert(insert(word, offs, 25, 10), offs >> 16, 9, 0))
}

pub fn decode_b26(word: u32) -> i64 {
    let w = u64::from(word);
    sign_extend(bits(w, 25, 10) | (bits(w, 9, 0) << 16), 26) << 2
}

/// PCREL20_S2 (`pcaddi`): 4-aligned, ±2 MiB, stored >> 2 as si20.
pub fn encode_pcaddi(word: u32, offset: i64) -> Result<u32, RelocProblem> {
    branch_fits(offset, 20)?;
    Ok(insert(word, (offset >> 2) as u64, 24, 5))
}

pub fn decode_pcaddi(word: u32) -> i64 {
    decode_si20(word) << 2
}

/// CALL36 (`pcaddu18i rd, hi20` + `jirl rd', rd, lo16`): a 4-aligned byte offset split as
/// `(hi20 << 18) + (lo16 << 2)` with lo16 signed, so hi20 = (offset + 0x20000) >> 18. The
/// reach is -2^37 - 0x20000 ..= 2^37 - 0x20000 - 4 (about ±128 GiB).
pub fn encode_call36(pcaddu18i: u32, jirl: u32, offset: i64) -> Result<(u32, u32), RelocProblem> {
    fits(i128::from(offset), CALL36_REACH, 4)?;
    let hi = (offset + 0x2_0000) >> 18;
    let lo = sign_extend(bits(offset as u64, 17, 2), 16);
    Ok((encode_si20(pcaddu18i, hi)?, encode_si16(jirl, lo)?))
}

pub fn decode_call36(pcaddu18i: u32, jirl: u32) -> i64 {
    (decode_si20(pcaddu18i) << 18) + (decode_si16(jirl) << 2)
}

#[cfg(test)]
mod tests {
    use super::super::reloc::testing::{input, row_input};
    use super::*;
    use crate::bits::{fits_signed, read_u64};
    use proptest::prelude::*;

    /// Four instruction words as bytes.
    fn to_bytes(words: [u32; 4]) -> [u8; 16] {
        let mut out = [0u8; 16];
        for (chunk, word) in out.chunks_exact_mut(4).zip(words) {
            chunk.copy_from_slice(&word.to_le_bytes());
        }
        out
    }

    fn to_words(bytes: &[u8; 16]) -> [u32; 4] {
        let mut out = [0u32; 4];
        for (word, chunk) in out.iter_mut().zip(bytes.chunks_exact(4)) {
            *word = read_u32(chunk).unwrap_or(0);
        }
        out
    }

    /// Applies `r` at the first of four instruction words; returns the words afterwards.
    fn run(r: &RelocInput, words: [u32; 4]) -> (Result<Applied, Failure>, [u32; 4]) {
        let mut buf = to_bytes(words);
        let result = apply(r, &mut buf);
        (result, to_words(&buf))
    }

    /// An overflow of a `width`-bit field: a window `width` bits wide (signed, unsigned,
    /// or a biased reach such as CALL36's), or a datum read either way.
    fn is_overflow(result: &Result<Applied, Failure>, width: u8) -> bool {
        matches!(result, Err(Failure { problem: RelocProblem::Overflow { range }, .. })
            if range.hi - range.lo == 1i128 << width || *range == Range::either(width.into()))
    }

    fn is_misaligned(result: &Result<Applied, Failure>) -> bool {
        matches!(
            result,
            Err(Failure {
                problem: RelocProblem::Misaligned { align: 4 },
                ..
            })
        )
    }

    type Encoder = fn(u32, i64) -> Result<u32, RelocProblem>;
    type Decoder = fn(u32) -> i64;

    const BL: u32 = 0x5400_0000;
    const BEQZ_A0: u32 = 0x4000_0080;
    const BEQ_A0_A1: u32 = 0x5800_0085;
    const PCADDU18I_RA: u32 = 0x1e00_0001;
    const JIRL_RA_RA: u32 = 0x4c00_0021;
    const PCALAU12I_A0: u32 = 0x1a00_0004;
    const ADDI_D_A0_A0: u32 = 0x02c0_0084;
    const ADDI_D_T8_ZERO: u32 = 0x02c0_0014;
    const LU32I_D_T8: u32 = 0x1600_0014;
    const LU52I_D_T8_T8: u32 = 0x0300_0294;
    const LU12I_W_A0: u32 = 0x1400_0004;
    const ORI_A0_A0: u32 = 0x0380_0084;
    const PCADDI_A0: u32 = 0x1800_0004;
    const NOP: u32 = 0x0340_0000;

    #[test]
    fn encoders_match_the_assembler() {
        // Words from `llvm-mc --triple=loongarch64 --show-encoding`.
        assert_eq!(encode_b26(0x5000_0000, 0x1234), Ok(0x5012_3400));
        assert_eq!(encode_b26(BL, -0x800_0000), Ok(0x5400_0200));
        assert_eq!(encode_b26(BL, 0x7ff_fffc), Ok(0x57ff_fdff));
        assert_eq!(encode_b21(BEQZ_A0, 0x3f_fffc), Ok(0x43ff_fc8f));
        assert_eq!(encode_b21(0x4400_00a0, -0x40_0000), Ok(0x4400_00b0));
        assert_eq!(encode_b16(BEQ_A0_A1, 0x1_fffc), Ok(0x59ff_fc85));
        assert_eq!(encode_b16(0x5c00_00c7, -0x2_0000), Ok(0x5e00_00c7));
        assert_eq!(encode_pcaddi(PCADDI_A0, -0x20_0000), Ok(0x1900_0004));
        assert_eq!(encode_pcaddi(0x1800_0005, 0x1f_fffc), Ok(0x18ff_ffe5));
        assert_eq!(encode_si16(JIRL_RA_RA, -1), Ok(0x4fff_fc21));
        assert_eq!(encode_si16(0x4c00_0281, 0x7fff), Ok(0x4dff_fe81));
        assert_eq!(encode_si20(PCALAU12I_A0, -1), Ok(0x1bff_ffe4));
        assert_eq!(encode_si20(PCADDU18I_RA, 0x7_ffff), Ok(0x1eff_ffe1));
        assert_eq!(encode_si12(ADDI_D_A0_A0, -2048), Ok(0x02e0_0084));
        assert_eq!(encode_si12(0x28c0_00c5, 2047), Ok(0x28df_fcc5));
        assert_eq!(encode_si20(LU32I_D_T8, -0x8_0000), Ok(0x1700_0014));
        assert_eq!(encode_si12(LU52I_D_T8_T8, -1), Ok(0x033f_fe94));
    }

    #[test]
    fn encoder_boundaries() {
        // Last in range accepted, first beyond rejected, on both sides.
        let cases: [(Encoder, i64, i64); 7] = [
            (encode_si12, -2048, 2047),
            (encode_si16, -0x8000, 0x7fff),
            (encode_si20, -0x8_0000, 0x7_ffff),
            (encode_b16, -0x2_0000, 0x1_fffc),
            (encode_b21, -0x40_0000, 0x3f_fffc),
            (encode_b26, -0x800_0000, 0x7ff_fffc),
            (encode_pcaddi, -0x20_0000, 0x1f_fffc),
        ];
        for (i, (encode, min, max)) in cases.into_iter().enumerate() {
            let step = if i >= 3 { 4 } else { 1 };
            assert!(encode(0, min).is_ok(), "case {i} min");
            assert!(encode(0, max).is_ok(), "case {i} max");
            assert!(encode(0, min - step).is_err(), "case {i} below");
            assert!(encode(0, max + step).is_err(), "case {i} above");
            if step == 4 {
                assert!(encode(0, 2).is_err(), "case {i} misaligned");
            }
        }
        let (min, max) = (-(1i64 << 37) - 0x2_0000, (1i64 << 37) - 0x2_0000 - 4);
        assert!(encode_call36(PCADDU18I_RA, JIRL_RA_RA, min).is_ok());
        assert!(encode_call36(PCADDU18I_RA, JIRL_RA_RA, max).is_ok());
        assert!(encode_call36(PCADDU18I_RA, JIRL_RA_RA, min - 4).is_err());
        assert!(encode_call36(PCADDU18I_RA, JIRL_RA_RA, max + 4).is_err());
        assert!(encode_call36(PCADDU18I_RA, JIRL_RA_RA, 6).is_err());
    }

    #[test]
    fn b26_boundaries_and_nothing_written_on_failure() {
        let p = 0x1000_0000u64;
        let words = [BL, NOP, NOP, NOP];
        for (target, ok) in [
            (p + 0x7ff_fffc, true),
            (p - 0x800_0000, true),
            (p + 0x800_0000, false),
            (p - 0x800_0004, false),
        ] {
            let (result, after) = run(&input(R_LARCH_B26, target, 0, p), words);
            if ok {
                assert!(result.is_ok(), "{target:#x}");
                assert_eq!(
                    p.wrapping_add_signed(decode_b26(after[0])),
                    target,
                    "{target:#x}"
                );
                assert_eq!(after[0] & 0xfc00_0000, BL);
            } else {
                assert!(is_overflow(&result, 28), "{target:#x}");
                assert_eq!(after, words, "nothing written");
            }
        }
        let (result, after) = run(&input(R_LARCH_B26, p + 6, 0, p), words);
        assert!(is_misaligned(&result));
        assert_eq!(after, words);
    }

    #[test]
    fn b16_and_b21_boundaries() {
        let p = 0x2000_0000u64;
        let cases = [
            (R_LARCH_B16, BEQ_A0_A1, 0x1_fffc_i64, -0x2_0000_i64, 18u8),
            (R_LARCH_B21, BEQZ_A0, 0x3f_fffc, -0x40_0000, 23),
            (R_LARCH_PCREL20_S2, PCADDI_A0, 0x1f_fffc, -0x20_0000, 22),
        ];
        for (r_type, word, max, min, width) in cases {
            let words = [word, NOP, NOP, NOP];
            for offset in [max, min] {
                let (result, after) =
                    run(&input(r_type, p.wrapping_add_signed(offset), 0, p), words);
                assert_eq!(result.map(|a| a.value), Ok(i128::from(offset)));
                let decoded = match r_type {
                    R_LARCH_B16 => decode_b16(after[0]),
                    R_LARCH_B21 => decode_b21(after[0]),
                    _ => decode_pcaddi(after[0]),
                };
                assert_eq!(decoded, offset);
            }
            for offset in [max + 4, min - 4] {
                let (result, after) =
                    run(&input(r_type, p.wrapping_add_signed(offset), 0, p), words);
                assert!(
                    is_overflow(&result, width),
                    "{}",
                    name(r_type).unwrap_or("?")
                );
                assert_eq!(after, words);
            }
            let (result, after) = run(&input(r_type, p + 2, 0, p), words);
            assert!(is_misaligned(&result));
            assert_eq!(after, words);
        }
    }

    #[test]
    fn calls_use_the_stub_only_when_the_target_is_far() {
        let p = 0x10_0000u64;
        let stub = p + 0x400;
        let words = [BL, NOP, NOP, NOP];
        let near = RelocInput {
            stub: Some(stub),
            ..input(R_LARCH_B26, p + 0x100, 0, p)
        };
        let (result, _) = run(&near, words);
        assert_eq!(result.map(|a| a.via), Ok(Via::Direct));
        let far = RelocInput {
            stub: Some(stub),
            ..input(R_LARCH_B26, 0x7fff_0000_0000, 0, p)
        };
        let (result, after) = run(&far, words);
        assert_eq!(
            result,
            Ok(Applied {
                value: 0x400,
                via: Via::Stub
            })
        );
        assert_eq!(p.wrapping_add_signed(decode_b26(after[0])), stub);
        // No stub, or an addend the stub cannot honour: an error, not a truncation.
        let (result, after) = run(&RelocInput { stub: None, ..far }, words);
        assert!(is_overflow(&result, 28));
        assert_eq!(after, words);
        let (result, _) = run(&RelocInput { a: 8, ..far }, words);
        assert!(is_overflow(&result, 28));

        // CALL36: ±128 GiB directly, the stub beyond.
        let words = [PCADDU18I_RA, JIRL_RA_RA, NOP, NOP];
        let mid = RelocInput {
            stub: Some(stub),
            ..input(R_LARCH_CALL36, p + 0x10_0000_0000, 0, p)
        };
        let (result, after) = run(&mid, words);
        assert_eq!(result.map(|a| a.via), Ok(Via::Direct));
        assert_eq!(
            p.wrapping_add_signed(decode_call36(after[0], after[1])),
            p + 0x10_0000_0000
        );
        assert_eq!(after[0] & 0xfe00_001f, PCADDU18I_RA);
        assert_eq!(after[1] & 0xfc00_03ff, JIRL_RA_RA);
        let (result, after) = run(
            &RelocInput {
                s: 0x7fff_0000_0000,
                ..mid
            },
            words,
        );
        assert_eq!(result.map(|a| a.via), Ok(Via::Stub));
        assert_eq!(
            p.wrapping_add_signed(decode_call36(after[0], after[1])),
            stub
        );
        let (result, after) = run(
            &RelocInput {
                s: 0x7fff_0000_0000,
                stub: None,
                ..mid
            },
            words,
        );
        assert!(is_overflow(&result, 38));
        assert_eq!(after, words);
    }

    #[test]
    fn call36_boundaries_and_instruction_check() {
        let p = 0x40_0000_0000u64;
        let words = [PCADDU18I_RA, JIRL_RA_RA, NOP, NOP];
        let max = (1i64 << 37) - 0x2_0000 - 4;
        let min = -(1i64 << 37) - 0x2_0000;
        for offset in [max, min, 0x1_fffc, 0x2_0000, -0x2_0000, -0x2_0004] {
            let (result, after) = run(
                &input(R_LARCH_CALL36, p.wrapping_add_signed(offset), 0, p),
                words,
            );
            assert!(result.is_ok(), "{offset:#x}");
            assert_eq!(decode_call36(after[0], after[1]), offset);
        }
        for offset in [max + 4, min - 4] {
            let (result, after) = run(
                &input(R_LARCH_CALL36, p.wrapping_add_signed(offset), 0, p),
                words,
            );
            assert!(is_overflow(&result, 38), "{offset:#x}");
            assert_eq!(after, words);
        }
        let (result, after) = run(
            &input(R_LARCH_CALL36, p + 16, 0, p),
            [PCADDU18I_RA, NOP, NOP, NOP],
        );
        assert!(matches!(
            result,
            Err(Failure {
                problem: RelocProblem::UnexpectedInstruction { word: NOP },
                ..
            })
        ));
        assert_eq!(after, [PCADDU18I_RA, NOP, NOP, NOP]);
    }

    /// What `pcalau12i` at `pc` leaves in its register.
    fn pcalau12i(word: u32, pc: u64) -> u64 {
        (pc & !0xfff).wrapping_add(((decode_si20(word) << 12) as i32) as i64 as u64)
    }

    /// The address `pcalau12i` + the four-instruction extreme tail computes.
    fn extreme(words: [u32; 4], pc: u64) -> u64 {
        let mut t8 = decode_si12(words[1]) as u64; // addi.d t8, zero, lo12
        t8 = (t8 & 0xffff_ffff) | ((decode_si20(words[2]) as u64) << 32); // lu32i.d
        t8 = (t8 & mask(52)) | ((decode_si12(words[3]) as u64) << 52); // lu52i.d
        pcalau12i(words[0], pc).wrapping_add(t8)
    }

    #[test]
    fn pcala_pair_boundaries() {
        let p = 0x1_0000_0abcu64;
        let page = p & !0xfff;
        let words = [PCALAU12I_A0, ADDI_D_A0_A0, NOP, NOP];
        // The furthest reachable: page + 0x7fff_f7ff above, page - 0x8000_0800 below.
        for (target, ok) in [
            (page + 0x7fff_f7ff, true),
            (page - 0x8000_0800, true),
            (page + 0x7fff_f800, false),
            (page - 0x8000_0801, false),
        ] {
            let (hi, after_hi) = run(&input(R_LARCH_PCALA_HI20, target, 0, p), words);
            if !ok {
                assert!(is_overflow(&hi, 32), "{target:#x}");
                assert_eq!(after_hi, words);
                continue;
            }
            assert!(hi.is_ok(), "{target:#x}");
            let mut lo_input = input(R_LARCH_PCALA_LO12, target, 0, p + 4);
            lo_input.p = p + 4;
            let mut buf = to_bytes(after_hi);
            assert!(apply(&lo_input, buf.get_mut(4..).unwrap_or(&mut [])).is_ok());
            let after = to_words(&buf);
            let reached = pcalau12i(after[0], p).wrapping_add(decode_si12(after[1]) as u64);
            assert_eq!(reached, target, "{target:#x}");
        }
    }

    #[test]
    fn extreme_sequence_is_recognised() {
        let words = [PCALAU12I_A0, ADDI_D_T8_ZERO, LU32I_D_T8, LU52I_D_T8_T8];
        assert!(extreme_tail(&to_bytes(words)));
        // A HI20 far out of ±2 GiB is accepted in front of an extreme tail...
        let r = input(R_LARCH_PCALA_HI20, 0x7000_0000_0000, 0, 0x1000);
        assert!(run(&r, words).0.is_ok());
        // ...but not in front of anything else.
        assert!(!extreme_tail(&to_bytes([
            PCALAU12I_A0,
            ADDI_D_A0_A0,
            LU32I_D_T8,
            NOP
        ])));
        assert!(!extreme_tail(&to_bytes([
            PCALAU12I_A0,
            ADDI_D_A0_A0,
            LU32I_D_T8,
            LU52I_D_T8_T8
        ])));
        assert!(!extreme_tail(&[0u8; 12]));
        assert!(is_overflow(
            &run(&r, [PCALAU12I_A0, ADDI_D_A0_A0, NOP, NOP]).0,
            32
        ));
    }

    /// Applies a PCALA (or GOT_PC) extreme sequence of four relocations at `p`.
    fn apply_extreme(
        types: [RelocationType; 4],
        s: u64,
        a: i64,
        p: u64,
        got: Option<u64>,
    ) -> Option<[u32; 4]> {
        let mut buf = to_bytes([PCALAU12I_A0, ADDI_D_T8_ZERO, LU32I_D_T8, LU52I_D_T8_T8]);
        for (i, r_type) in types.into_iter().enumerate() {
            let at = i * 4;
            let r = RelocInput {
                got_slot: got,
                ..input(r_type, s, a, p + at as u64)
            };
            apply(&r, buf.get_mut(at..)?).ok()?;
        }
        Some(to_words(&buf))
    }

    const PCALA_EXTREME: [RelocationType; 4] = [
        R_LARCH_PCALA_HI20,
        R_LARCH_PCALA_LO12,
        R_LARCH_PCALA64_LO20,
        R_LARCH_PCALA64_HI12,
    ];
    const GOT_EXTREME: [RelocationType; 4] = [
        R_LARCH_GOT_PC_HI20,
        R_LARCH_GOT_PC_LO12,
        R_LARCH_GOT64_PC_LO20,
        R_LARCH_GOT64_PC_HI12,
    ];

    #[test]
    fn extreme_sequences_reach_any_address() {
        let p = 0x1234_5ffcu64; // the sequence straddles a page boundary
        for target in [
            0u64,
            0x800,
            0x7ff,
            0xffff_ffff_ffff_f800,
            0x8000_0000_0000_0000,
            0x7fff_ffff_ffff_ffff,
            0x1_2345_6fff,
            0x1_2345_5800,
            p + 0x8000_0000,
            p.wrapping_sub(0x8000_0801),
        ] {
            let words = apply_extreme(PCALA_EXTREME, target, 0, p, None);
            assert_eq!(words.map(|w| extreme(w, p)), Some(target), "{target:#x}");
        }
        let slot = 0xffff_8000_0000_1008u64;
        let words = apply_extreme(GOT_EXTREME, 0, 0, p, Some(slot));
        assert_eq!(words.map(|w| extreme(w, p)), Some(slot));
        assert!(
            apply_extreme(GOT_EXTREME, 0, 0, p, None).is_none(),
            "slot needed"
        );
    }

    #[test]
    fn got_pair_loads_from_the_slot() {
        let p = 0x50_0000u64;
        let slot = 0x62_3ff8u64;
        let words = [PCALAU12I_A0, 0x28c0_0084, NOP, NOP]; // ld.d a0, a0, 0
        let r = RelocInput {
            got_slot: Some(slot),
            ..input(R_LARCH_GOT_PC_HI20, 0xdead_beef_0000, 0, p)
        };
        let (hi, after) = run(&r, words);
        assert_eq!(hi.map(|a| a.via), Ok(Via::Got));
        let mut buf = to_bytes(after);
        let lo = RelocInput {
            r_type: R_LARCH_GOT_PC_LO12,
            p: p + 4,
            ..r
        };
        assert!(apply(&lo, buf.get_mut(4..).unwrap_or(&mut [])).is_ok());
        let after = to_words(&buf);
        assert_eq!(
            pcalau12i(after[0], p).wrapping_add(decode_si12(after[1]) as u64),
            slot
        );
        let (err, _) = run(
            &RelocInput {
                got_slot: None,
                ..r
            },
            words,
        );
        assert_eq!(err.map_err(|f| f.problem), Err(RelocProblem::MissingSlot));
    }

    #[test]
    fn absolute_sequences() {
        // lu12i.w + ori: a 32-bit signed address.
        for target in [0x7fff_ffffu64, 0xffff_ffff_8000_0000, 0x1234_5fff, 0] {
            let mut buf = to_bytes([LU12I_W_A0, ORI_A0_A0, NOP, NOP]);
            let hi = apply(&input(R_LARCH_ABS_HI20, target, 0, 0), &mut buf);
            let lo = apply(
                &input(R_LARCH_ABS_LO12, target, 0, 4),
                buf.get_mut(4..).unwrap_or(&mut []),
            );
            assert!(hi.is_ok() && lo.is_ok(), "{target:#x}");
            let w = to_words(&buf);
            let reached =
                (((decode_si20(w[0]) << 12) as i32) as i64 as u64) | bits(u64::from(w[1]), 21, 10);
            assert_eq!(reached, target);
        }
        let (err, _) = run(
            &input(R_LARCH_ABS_HI20, 0x8000_0000, 0, 0),
            [LU12I_W_A0, ORI_A0_A0, NOP, NOP],
        );
        assert!(is_overflow(&err, 32));
        // lu12i.w + ori + lu32i.d + lu52i.d: any 64-bit address.
        let target = 0xfedc_ba98_7654_3210u64;
        let lu32 = 0x1600_0004; // lu32i.d a0
        let lu52 = 0x0300_0084; // lu52i.d a0, a0
        let mut buf = to_bytes([LU12I_W_A0, ORI_A0_A0, lu32, lu52]);
        for (i, r_type) in [
            R_LARCH_ABS_HI20,
            R_LARCH_ABS_LO12,
            R_LARCH_ABS64_LO20,
            R_LARCH_ABS64_HI12,
        ]
        .into_iter()
        .enumerate()
        {
            let r = input(r_type, target, 0, 4 * i as u64);
            assert!(apply(&r, buf.get_mut(4 * i..).unwrap_or(&mut [])).is_ok());
        }
        let w = to_words(&buf);
        let mut v = ((decode_si20(w[0]) << 12) as i32) as i64 as u64;
        v |= bits(u64::from(w[1]), 21, 10);
        v = (v & 0xffff_ffff) | ((decode_si20(w[2]) as u64) << 32);
        v = (v & mask(52)) | ((decode_si12(w[3]) as u64) << 52);
        assert_eq!(v, target);
    }

    #[test]
    fn lo12_on_jirl_is_shifted() {
        // The pre-CALL36 medium model: pcalau12i ra + jirl ra, ra, %pc_lo12.
        let target = 0x1234_5ffcu64;
        let (ok, after) = run(
            &input(R_LARCH_PCALA_LO12, target, 0, 0),
            [JIRL_RA_RA, NOP, NOP, NOP],
        );
        assert!(ok.is_ok());
        assert_eq!(decode_si16(after[0]) << 2, -4);
    }

    #[test]
    fn data_relocations() {
        let mut buf = [0xAAu8; 12];
        let ok = apply(
            &input(R_LARCH_32_PCREL, 0x1000, 4, 0x8000_0000 + 0x1004),
            buf.get_mut(4..).unwrap_or(&mut []),
        );
        assert_eq!(ok.map(|a| a.value), Ok(-0x8000_0000));
        assert_eq!(read_u32(buf.get(4..).unwrap_or(&[])), Some(0x8000_0000));
        assert_eq!(buf.get(..4), Some(&[0xAA; 4][..]));
        assert_eq!(buf.get(8..), Some(&[0xAA; 4][..]));
        let mut buf = [0xAAu8; 8];
        let err = apply(
            &input(R_LARCH_32_PCREL, 0xfff, 4, 0x8000_0000 + 0x1004),
            &mut buf,
        );
        assert!(is_overflow(&err, 32));
        assert_eq!(buf, [0xAA; 8]);
        assert!(apply(&input(R_LARCH_32, u32::MAX as u64, 0, 0), &mut buf).is_ok());
        assert!(apply(&input(R_LARCH_32, 0, -0x8000_0000, 0), &mut buf).is_ok());
        let before = buf;
        assert!(is_overflow(
            &apply(&input(R_LARCH_32, 1 << 32, 0, 0), &mut buf),
            32
        ));
        assert!(is_overflow(
            &apply(&input(R_LARCH_32, 0, -0x8000_0001, 0), &mut buf),
            32
        ));
        assert_eq!(buf, before);
        assert!(apply(&input(R_LARCH_64_PCREL, 0, 0, 8), &mut buf).is_ok());
        assert_eq!(read_u64(&buf), Some(-8i64 as u64));
        assert!(apply(&input(R_LARCH_64, 0x1122_3344_5566_7788, 1, 0), &mut buf).is_ok());
        assert_eq!(read_u64(&buf), Some(0x1122_3344_5566_7789));
    }

    #[test]
    fn add_sub_pairs_give_label_differences() {
        for (add, sub, n) in [
            (R_LARCH_ADD8, R_LARCH_SUB8, 1usize),
            (R_LARCH_ADD16, R_LARCH_SUB16, 2),
            (R_LARCH_ADD24, R_LARCH_SUB24, 3),
            (R_LARCH_ADD32, R_LARCH_SUB32, 4),
            (R_LARCH_ADD64, R_LARCH_SUB64, 8),
        ] {
            let mut buf = [0xAAu8; 10];
            buf.iter_mut().take(n).for_each(|b| *b = 0);
            if let Some(first) = buf.first_mut() {
                *first = 3; // an addend already in the field
            }
            assert!(apply(&input(add, 0x4000_0090, 0, 0), &mut buf).is_ok());
            assert!(apply(&input(sub, 0x4000_0010, 0, 0), &mut buf).is_ok());
            let mut value = [0u8; 8];
            value
                .iter_mut()
                .zip(buf.iter().take(n))
                .for_each(|(v, b)| *v = *b);
            assert_eq!(
                u64::from_le_bytes(value),
                0x83,
                "{}",
                name(add).unwrap_or("?")
            );
            assert!(
                buf.iter().skip(n).all(|&b| b == 0xAA),
                "{}",
                name(add).unwrap_or("?")
            );
        }
        // ADD6/SUB6 change only the low 6 bits (DW_CFA_advance_loc keeps its opcode).
        let mut byte = [0x40u8];
        assert!(apply(&input(R_LARCH_ADD6, 0x1030, 0, 0), &mut byte).is_ok());
        assert!(apply(&input(R_LARCH_SUB6, 0x1010, 0, 0), &mut byte).is_ok());
        assert_eq!(byte, [0x40 | 0x20]);
    }

    #[test]
    fn uleb128_pairs_keep_their_length() {
        // A two-byte ULEB128 holding 0 (0x80 0x00), then S1 - S2 = 300.
        let mut buf = [0x80u8, 0x00, 0xAA];
        assert!(apply(&input(R_LARCH_ADD_ULEB128, 1300, 0, 0), &mut buf).is_ok());
        assert!(apply(&input(R_LARCH_SUB_ULEB128, 1000, 0, 0), &mut buf).is_ok());
        assert_eq!(buf, [0x80 | (300 & 0x7f) as u8, (300 >> 7) as u8, 0xAA]);
        // 2^14 does not fit two bytes.
        let mut buf = [0x80u8, 0x00, 0xAA];
        let err = apply(&input(R_LARCH_ADD_ULEB128, 1 << 14, 0, 0), &mut buf);
        assert!(is_overflow(&err, 14));
        assert_eq!(buf, [0x80, 0x00, 0xAA]);
        // Unterminated: an error, not a panic.
        let mut buf = [0x80u8, 0x80];
        assert!(apply(&input(R_LARCH_ADD_ULEB128, 1, 0, 0), &mut buf).is_err());
    }

    #[test]
    fn hints_are_skipped() {
        for r_type in [
            R_LARCH_RELAX,
            R_LARCH_ALIGN,
            R_LARCH_MARK_LA,
            R_LARCH_MARK_PCREL,
            R_LARCH_NONE,
        ] {
            assert_eq!(classify(r_type).map(|c| c.skip), Some(true));
            let (result, after) = run(&input(r_type, 1, 2, 3), [NOP; 4]);
            assert_eq!(result.map(|a| a.via), Ok(Via::Nothing));
            assert_eq!(after, [NOP; 4]);
        }
        assert!(classify(R_LARCH_TLS_LE_HI20).is_none(), "TLS is refused");
        assert_eq!(name(R_LARCH_CALL36), Some("R_LARCH_CALL36"));
    }

    #[test]
    fn short_place_is_an_error() {
        let mut buf = [0u8; 3];
        assert!(apply(&input(R_LARCH_B26, 0, 0, 0), &mut buf).is_err());
        assert!(apply(&input(R_LARCH_64, 0, 0, 0), &mut buf).is_err());
        assert_eq!(buf, [0; 3]);
        let mut buf = to_bytes([PCADDU18I_RA, 0, 0, 0]);
        assert!(apply(
            &input(R_LARCH_CALL36, 0, 0, 0),
            buf.get_mut(..6).unwrap_or(&mut [])
        )
        .is_err());
    }

    #[test]
    fn only_lp64d_objects_are_linked() {
        // clang: 0x43 for the default (lp64d), 0x41 for -mabi=lp64s.
        assert_eq!(check_flags(FileFlags(0x43)), Ok(()));
        assert_eq!(check_flags(FileFlags(0x41)), Err(FileFlags(1)));
        assert_eq!(check_flags(FileFlags(0x42)), Err(FileFlags(2)));
        assert_eq!(check_flags(FileFlags(0x03)), Ok(()));
    }

    #[test]
    fn stub_jumps_to_its_target() {
        let mut buf = [0u8; 24];
        let stub = StubInput {
            address: 0x1000,
            target: 0x1122_3344_5566_7788,
            got_slot: None,
            got_base: 0,
        };
        assert!(write_stub(&mut buf, &stub).is_some());
        let mut first = [0u8; 16];
        first.copy_from_slice(buf.get(..16).unwrap_or(&[0; 16]));
        // From llvm-mc: pcaddu12i $t8, 0; ld.d $t8, $t8, 16; jr $t8; break 0.
        assert_eq!(
            to_words(&first),
            [0x1c00_0014, 0x28c0_4294, 0x4c00_0280, 0x002a_0000]
        );
        assert_eq!(
            read_u64(buf.get(16..).unwrap_or(&[])),
            Some(0x1122_3344_5566_7788)
        );
        // The load reads stub + 16, and STUB_SIZE keeps that 8-aligned for 16-aligned stubs.
        assert_eq!(decode_si20(0x1c00_0014), 0);
        assert_eq!(decode_si12(0x28c0_4294), 16);
        assert_eq!(STUB_SIZE % 8, 0);
        assert!(write_stub(&mut [0u8; 23], &stub).is_none());
    }

    #[test]
    fn every_classified_type_has_a_name_and_applies() {
        check_table(row_input, |row| {
            to_bytes(match row.r_type {
                R_LARCH_CALL36 => [PCADDU18I_RA, JIRL_RA_RA, NOP, NOP],
                R_LARCH_SUB_ULEB128 => [0x7f, 0, 0, 0], // 127 - 0x40 fits one byte
                _ => [0; 4],
            })
        });
        assert_eq!(RELOCATIONS.len(), 44);
    }

    proptest! {
        #[test]
        fn si_fields_round_trip(word in any::<u32>(), v in any::<i32>()) {
            let v = i64::from(v);
            for (encode, decode, width, field) in [
                (encode_si12 as Encoder, decode_si12 as Decoder, 12u32, 0x003f_fc00u32),
                (encode_si16, decode_si16, 16, 0x03ff_fc00),
                (encode_si20, decode_si20, 20, 0x01ff_ffe0),
            ] {
                let small = sign_extend(v as u64 & mask(width), width);
                let encoded = encode(word, small).ok();
                prop_assert_eq!(encoded.map(decode), Some(small));
                prop_assert_eq!(encoded.map(|w| w & !field), Some(word & !field));
                if fits_signed(i128::from(v), width) {
                    prop_assert!(encode(word, v).ok().is_some());
                } else {
                    prop_assert!(encode(word, v).ok().is_none());
                }
            }
        }

        #[test]
        fn branch_fields_round_trip(word in any::<u32>(), v in any::<i32>()) {
            let v = i64::from(v) * 4; // 4-aligned, up to ±8 GiB: covers every range
            for (encode, decode, width, field) in [
                (encode_b16 as Encoder, decode_b16 as Decoder, 18u32, 0x03ff_fc00u32),
                (encode_b21, decode_b21, 23, 0x03ff_fc1f),
                (encode_b26, decode_b26, 28, 0x03ff_ffff),
                (encode_pcaddi, decode_pcaddi, 22, 0x01ff_ffe0),
            ] {
                let in_range = sign_extend(v as u64 & mask(width), width);
                let encoded = encode(word, in_range).ok();
                prop_assert_eq!(encoded.map(decode), Some(in_range));
                prop_assert_eq!(encoded.map(|w| w & !field), Some(word & !field));
                prop_assert_eq!(encode(word, v).ok().is_some(), fits_signed(i128::from(v), width));
                prop_assert!(encode(word, in_range | 1).ok().is_none());
                prop_assert!(encode(word, in_range | 2).ok().is_none());
            }
        }

        #[test]
        fn call36_round_trips(hi in any::<u32>(), lo in any::<u32>(), v in any::<i64>()) {
            let offset = (v >> 24) & !3; // ±2^39: both sides of the reach
            let fits = (-(1i64 << 37) - 0x2_0000..(1i64 << 37) - 0x2_0000).contains(&offset);
            match encode_call36(hi, lo, offset).ok() {
                Some((a, b)) => {
                    prop_assert!(fits);
                    prop_assert_eq!(decode_call36(a, b), offset);
                    prop_assert_eq!(a & !0x01ff_ffe0, hi & !0x01ff_ffe0);
                    prop_assert_eq!(b & !0x03ff_fc00, lo & !0x03ff_fc00);
                }
                None => prop_assert!(!fits),
            }
        }

        /// B26 through `apply`: the patched `bl` reaches S + A when in range; otherwise an
        /// error and the bytes untouched.
        #[test]
        fn b26_matches_the_formula(s in any::<u32>(), p in any::<u32>(), hi in 0u64..2) {
            let s = (u64::from(s) << 2 | hi << 30) & !3;
            let p = u64::from(p) & !3;
            let words = [BL | 0x2a, NOP, NOP, NOP];
            let (result, after) = run(&input(R_LARCH_B26, s, 0, p), words);
            let v = i128::from(s) - i128::from(p);
            if fits_signed(v, 28) {
                prop_assert!(result.is_ok());
                prop_assert_eq!(p.wrapping_add_signed(decode_b26(after[0])), s);
                prop_assert_eq!(after[0] & 0xfc00_0000, BL);
            } else {
                prop_assert!(result.is_err());
                prop_assert_eq!(after, words);
            }
        }

        /// pcalau12i + addi.d reach S + A exactly whenever the check lets them through.
        #[test]
        fn pcala_pair_reaches_its_target(s in any::<u64>(), p in any::<u64>(), near in any::<bool>(), a in -0x1000i64..0x1000) {
            let p = p & !3;
            let s = if near { p.wrapping_add(s >> 33).wrapping_sub(1 << 30) } else { s };
            let target = s.wrapping_add_signed(a);
            let words = [PCALAU12I_A0, ADDI_D_A0_A0, NOP, NOP];
            let (hi, after) = run(&input(R_LARCH_PCALA_HI20, s, a, p), words);
            let delta = i128::from(target) - i128::from(p & !0xfff);
            let reachable = (-0x8000_0800..0x7fff_f800).contains(&delta);
            prop_assert_eq!(hi.is_ok(), reachable);
            if reachable {
                let mut buf = to_bytes(after);
                let lo = input(R_LARCH_PCALA_LO12, s, a, p.wrapping_add(4));
                prop_assert!(apply(&lo, buf.get_mut(4..).unwrap_or(&mut [])).is_ok());
                let w = to_words(&buf);
                prop_assert_eq!(pcalau12i(w[0], p).wrapping_add(decode_si12(w[1]) as u64), target);
                prop_assert_eq!(w[0] & !0x01ff_ffe0, PCALAU12I_A0);
                prop_assert_eq!(w[1] & !0x003f_fc00, ADDI_D_A0_A0);
            } else {
                prop_assert_eq!(after, words);
            }
        }

        /// The extreme model's four instructions reach any address from any place.
        #[test]
        fn extreme_reaches_everything(s in any::<u64>(), p in any::<u64>(), a in -0x1000i64..0x1000) {
            let p = p & !3 & !(1 << 63); // room for the 16 bytes
            let words = apply_extreme(PCALA_EXTREME, s, a, p, None);
            prop_assert_eq!(words.map(|w| extreme(w, p)), Some(s.wrapping_add_signed(a)));
            let split = page_split(s, p);
            prop_assert!(fits_signed(i128::from(split.hi20), 20));
            prop_assert!(fits_signed(i128::from(split.lo12), 12));
        }

        #[test]
        fn add_sub_are_modular(old in any::<u64>(), x in any::<u64>(), y in any::<u64>()) {
            let mut buf = old.to_le_bytes();
            prop_assert!(apply(&input(R_LARCH_ADD64, x, 0, 0), &mut buf).is_ok());
            prop_assert!(apply(&input(R_LARCH_SUB64, y, 0, 0), &mut buf).is_ok());
            prop_assert_eq!(u64::from_le_bytes(buf), old.wrapping_add(x).wrapping_sub(y));
        }
    }
}
