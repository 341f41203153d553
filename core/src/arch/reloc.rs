//! The vocabulary every architecture file uses: what the pre-scan needs to know about a
//! relocation type ([`Class`]), one row of an architecture's table ([`Relocation`]) and the
//! `relocations!` macro that turns the table into `classify`, the names, the documented
//! `RELOCATIONS` list and `apply`; the inputs of one relocation (`RelocInput`), what
//! applying reports ([`Applied`], `Failure`), and the helpers the architectures share.
//!
//! One convention for encoders: an instruction-immediate encoder checks its own field (the
//! range and alignment of the value it is given) and says what is wrong as a
//! [`RelocProblem`]; a relocation's `apply` does not check those again. `apply` checks only
//! what the psABI says about the relocation's value X beyond the field itself (X of a
//! `MOVW_UABS_G1` must fit 32 bits, a `HI20` + `LO12` pair must reach), computes the part of
//! X the field takes, and reports a failure with X attached.

use crate::bits::{read_u16, read_u32, write_u16, write_u32};
use crate::error::{Range, RelocProblem};
use object::elf::RelocationType;

/// A relocation's part in a pair whose low half is computed from the high half's target
/// (RISC-V `PCREL_HI20` + `PCREL_LO12_I/S`: the LO12's symbol is the label of the AUIPC
/// that carries the HI20).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pair {
    None,
    /// The high half: other relocations may refer to its place.
    Hi,
    /// The low half: its symbol labels the place of a `Hi` relocation.
    Lo,
}

/// What the pre-scan needs to know about one relocation type. The table rows name the
/// constructors: `skip()`, `data(w)`, `got(w)`, `call(w)`, `hi(w)`, `got_hi(w)`, `lo(w)`,
/// with `w` the bytes the relocation reads or writes at its place.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Class {
    /// Bytes at the place the relocation reads or writes (for the bounds check).
    pub width: u8,
    /// Needs a GOT slot holding the symbol's address.
    pub got: bool,
    /// A call or jump that may need a stub when its target is external (far).
    pub call: bool,
    /// Nothing to do (R_*_NONE, linker-relaxation hints).
    pub skip: bool,
    /// Part of a HI/LO pair.
    pub pair: Pair,
}

impl Class {
    /// Nothing is read or written.
    pub const fn skip() -> Class {
        Class {
            skip: true,
            ..Class::data(0)
        }
    }
    /// A datum or instruction field of `width` bytes.
    pub const fn data(width: u8) -> Class {
        Class {
            width,
            got: false,
            call: false,
            skip: false,
            pair: Pair::None,
        }
    }
    /// Refers to the symbol's GOT slot.
    pub const fn got(width: u8) -> Class {
        Class {
            got: true,
            ..Class::data(width)
        }
    }
    /// A call or jump, which goes through a stub when an external target is out of reach.
    pub const fn call(width: u8) -> Class {
        Class {
            call: true,
            ..Class::data(width)
        }
    }
    /// The high half of a pair.
    pub const fn hi(width: u8) -> Class {
        Class {
            pair: Pair::Hi,
            ..Class::data(width)
        }
    }
    /// The high half of a pair whose target is the symbol's GOT slot.
    pub const fn got_hi(width: u8) -> Class {
        Class {
            pair: Pair::Hi,
            ..Class::got(width)
        }
    }
    /// The low half of a pair.
    pub const fn lo(width: u8) -> Class {
        Class {
            pair: Pair::Lo,
            ..Class::data(width)
        }
    }
}

/// One row of an architecture's relocation table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Relocation {
    /// The `r_type` number.
    pub r_type: RelocationType,
    /// Its psABI name (`R_AARCH64_CALL26`).
    pub name: &'static str,
    /// X, the value computed (`S + A - P`), in the psABI's notation.
    pub value: &'static str,
    /// The range and alignment X must have, or why none applies.
    pub check: &'static str,
    /// What the pre-scan needs to know.
    pub class: Class,
}

/// Declares an architecture's relocation table. Each row is
///
/// ```text
/// R_NAME: class(width), "X", "range, alignment", |input, place| apply;
/// ```
///
/// and the macro defines, in the invoking module, the documented `RELOCATIONS` list,
/// `classify` and `name` (both a `match` on the rows' types) and `apply`, whose arms are
/// the rows' expressions in the table's order (`input` is the `RelocInput`, `place` the
/// bytes from the place to the end of its section; `_` for either that is unused). An
/// expression evaluates to `Result<Applied, Failure>`.
macro_rules! relocations {
    ($(
        $name:ident: $kind:ident($($arg:expr),*), $value:literal, $check:literal,
            |$input:tt, $place:tt| $apply:expr;
    )*) => {
        /// Every relocation this architecture links, in the order `apply` handles them;
        /// any other type is refused by name before memory is allocated. X is the value
        /// computed; the last column is what the pre-scan reserves (`data(w)`: `w` bytes at
        /// the place; `got`: a GOT slot; `call`: a stub when an external target is out of
        /// reach; `hi`/`lo`: the halves of a pair).
        ///
        /// | relocation | X | range, alignment | pre-scan |
        /// |---|---|---|---|
        #[doc = concat!($(
            "| `", stringify!($name), "` | ", $value, " | ", $check, " | `",
            stringify!($kind), "(", stringify!($($arg),*), ")` |\n",
        )*)]
        pub const RELOCATIONS: &[$crate::arch::reloc::Relocation] = &[$(
            $crate::arch::reloc::Relocation {
                r_type: $name,
                name: stringify!($name),
                value: $value,
                check: $check,
                class: $crate::arch::reloc::Class::$kind($($arg),*),
            },
        )*];

        /// The pre-scan's view of relocation type `r_type`, or `None` if it is not linked.
        pub(crate) fn classify(r_type: object::elf::RelocationType) -> Option<$crate::arch::reloc::Class> {
            match r_type {
                $($name => Some($crate::arch::reloc::Class::$kind($($arg),*)),)*
                _ => None,
            }
        }

        /// The name of a relocation type of the table.
        pub(crate) fn name(r_type: object::elf::RelocationType) -> Option<&'static str> {
            match r_type {
                $($name => Some(stringify!($name)),)*
                _ => None,
            }
        }

        /// Computes relocation `input` and writes it at the start of `place` (which runs to
        /// the end of its section). Nothing is written when it fails.
        pub(crate) fn apply(
            input: &$crate::arch::reloc::RelocInput,
            place: &mut [u8],
        ) -> Result<$crate::arch::reloc::Applied, $crate::arch::reloc::Failure> {
            match input.r_type {
                $($name => {
                    let $input = input;
                    let $place = place;
                    $apply
                })*
                _ => Err($crate::arch::reloc::Failure::new(
                    $crate::error::RelocProblem::Unsupported,
                    0,
                )),
            }
        }

        /// Runs `work` with the row of `r_type` as a function of its own, for a data
        /// relocation (class `data`): a loop over a run of them, the common case of long
        /// runs (tables of pointers, `.eh_frame`), is then compiled per row with the
        /// row's arithmetic inlined and the inputs it does not read left out. `None` for
        /// other classes and types not in the table; those go through `apply`, so that
        /// only data rows cost a loop of code each. The same expressions as `apply`'s.
        /// (riscv64 links its pairs through `apply` alone and never calls it.)
        #[allow(dead_code)]
        pub(crate) fn with_row<W: $crate::arch::reloc::WithApply>(
            r_type: object::elf::RelocationType,
            work: W,
        ) -> Option<W::Output> {
            match r_type {
                $($name => $crate::arch::reloc::row_loop!(
                    $kind,
                    work,
                    #[inline(always)]
                    |$input: &$crate::arch::reloc::RelocInput,
                     $place: &mut [u8]|
                     -> Result<$crate::arch::reloc::Applied, $crate::arch::reloc::Failure> {
                        $apply
                    }
                ),)*
                _ => None,
            }
        }

        /// Checks that the table is what `classify`, `name` and `apply` implement (see
        /// `testing::table_is_consistent`).
        #[cfg(test)]
        fn check_table(
            input: impl Fn(&$crate::arch::reloc::Relocation) -> $crate::arch::reloc::RelocInput,
            place: impl Fn(&$crate::arch::reloc::Relocation) -> [u8; 16],
        ) {
            $crate::arch::reloc::testing::table_is_consistent(
                RELOCATIONS, classify, name, apply, input, place,
            );
        }
    };
}
pub(crate) use relocations;

/// `with_row`'s arm for a row of class `$kind`: `work` run with the row's closure for a
/// `data` row, `None` (no loop compiled) for the others.
macro_rules! row_loop {
    (data, $work:ident, $row:expr) => {
        Some($work.run($row))
    };
    ($kind:ident, $work:ident, $row:expr) => {{
        drop($work);
        None
    }};
}
pub(crate) use row_loop;

/// Work generic over one architecture's `apply`
/// ([`Arch::with_apply`](crate::arch::Arch::with_apply)) or one relocation row's
/// arithmetic ([`Arch::with_row`](crate::arch::Arch::with_row)).
pub(crate) trait WithApply {
    type Output;
    fn run<F>(self, apply: F) -> Self::Output
    where
        F: Fn(&RelocInput, &mut [u8]) -> Result<Applied, Failure> + Copy;
}

/// The inputs of one relocation, as addresses in the target's address space.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RelocInput {
    pub r_type: RelocationType,
    /// S: the symbol's address.
    pub s: u64,
    /// A: the addend.
    pub a: i64,
    /// P: the place's address.
    pub p: u64,
    /// The address of the symbol's GOT slot, if the plan gave it one.
    pub got_slot: Option<u64>,
    /// The address of the GOT's first byte.
    pub got_base: u64,
    /// The address of the symbol's stub, if the plan gave it one.
    pub stub: Option<u64>,
    /// The symbol's size (st_size), for R_*_SIZE.
    pub size: u64,
    /// The symbol's `st_other` (ppc64le keeps the local entry point offset there).
    pub other: u8,
    /// For the low half of a pair: the high half's inputs.
    pub hi: Option<HiInput>,
}

impl RelocInput {
    /// S + A.
    pub fn sa(&self) -> i128 {
        i128::from(self.s) + i128::from(self.a)
    }

    /// S + A - P.
    pub fn sap(&self) -> i128 {
        self.sa() - i128::from(self.p)
    }

    /// G: the address of the symbol's GOT slot, which the pre-scan reserved for every
    /// relocation classified `got`.
    pub fn got(&self) -> Result<i128, Failure> {
        slot(self.got_slot)
    }
}

/// The high half of a pair, as its low half needs it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct HiInput {
    pub r_type: RelocationType,
    pub s: u64,
    pub a: i64,
    /// The high half's place (the AUIPC).
    pub p: u64,
    pub got_slot: Option<u64>,
}

impl HiInput {
    /// The high half's G.
    pub fn got(&self) -> Result<i128, Failure> {
        slot(self.got_slot)
    }
}

fn slot(got_slot: Option<u64>) -> Result<i128, Failure> {
    got_slot
        .map(i128::from)
        .ok_or(Failure::new(RelocProblem::MissingSlot, 0))
}

/// What a stub needs to know to reach its target.
#[derive(Clone, Copy, Debug)]
pub(crate) struct StubInput {
    /// The stub's own address.
    pub address: u64,
    /// Where it jumps.
    pub target: u64,
    /// The target's GOT slot, on architectures whose stubs load through one.
    pub got_slot: Option<u64>,
    /// The GOT's first byte.
    pub got_base: u64,
}

/// Where a relocated reference ends up pointing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Via {
    /// At the symbol itself.
    Direct,
    /// Through the symbol's GOT slot.
    Got,
    /// Through the symbol's stub (a far call).
    Stub,
    /// Nothing was written (a hint such as RELAX).
    Nothing,
}

/// What applying wrote: the field's value and how the target was reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Applied {
    pub value: i128,
    pub via: Via,
}

impl Applied {
    /// Nothing written (a hint).
    pub const NOTHING: Applied = Applied {
        value: 0,
        via: Via::Nothing,
    };

    /// `value` written, reaching the symbol itself.
    pub const fn direct(value: i128) -> Applied {
        Applied {
            value,
            via: Via::Direct,
        }
    }

    /// `value` written, reaching the symbol's GOT slot.
    pub const fn got(value: i128) -> Applied {
        Applied {
            value,
            via: Via::Got,
        }
    }
}

/// Why applying failed, and the computed value X it is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Failure {
    pub problem: RelocProblem,
    pub value: i128,
}

impl Failure {
    pub const fn new(problem: RelocProblem, value: i128) -> Failure {
        Failure { problem, value }
    }
}

/// Attaches X to an encoder's problem: `encode(word, x).map_err(about(x))`.
pub(crate) fn about(value: i128) -> impl FnOnce(RelocProblem) -> Failure {
    move |problem| Failure::new(problem, value)
}

// ---------------------------------------------------------------------------------------
// Checks.

/// The field check of every encoder: `value` is a multiple of `align` (a power of two) and
/// within `range`. Alignment is checked first: a misaligned offset is the more precise
/// complaint.
pub(crate) const fn fits(value: i128, range: Range, align: u8) -> Result<(), RelocProblem> {
    if value & (align as i128 - 1) != 0 {
        Err(RelocProblem::Misaligned { align })
    } else if !range.contains(value) {
        Err(RelocProblem::Overflow { range })
    } else {
        Ok(())
    }
}

/// A relocation's own check of X: `Ok` if `value` lies in `range`.
pub(crate) const fn within(value: i128, range: Range) -> Result<(), Failure> {
    if range.contains(value) {
        Ok(())
    } else {
        Err(Failure::new(RelocProblem::Overflow { range }, value))
    }
}

/// A relocation's own check of X: `Ok` if `value` is a multiple of `align`.
pub(crate) const fn aligned(value: i128, align: u8) -> Result<(), Failure> {
    match fits(
        value,
        Range {
            lo: value,
            hi: value + 1,
        },
        align,
    ) {
        Ok(()) => Ok(()),
        Err(problem) => Err(Failure::new(problem, value)),
    }
}

/// A place with fewer than `need` bytes left in its section (the pre-scan's bounds check
/// makes this unreachable for well-formed plans; it still must not panic).
#[cold]
pub(crate) fn short(need: usize, have: usize) -> Failure {
    Failure::new(
        RelocProblem::ShortPlace {
            need: need.min(255) as u8,
            have: have.min(255) as u8,
        },
        0,
    )
}

// ---------------------------------------------------------------------------------------
// Data fields.

/// Reads the `bytes`-byte little-endian field at the start of `place` (V of ADD/SUB).
pub(crate) fn read_data(place: &[u8], bytes: usize) -> Result<u64, Failure> {
    let field = place
        .get(..bytes)
        .ok_or_else(|| short(bytes, place.len()))?;
    let mut le = [0u8; 8];
    le.get_mut(..bytes)
        .ok_or_else(|| short(bytes, 8))?
        .copy_from_slice(field);
    Ok(u64::from_le_bytes(le))
}

/// Writes the low `bytes` bytes of `value` at the start of `place`, after checking that
/// `value` lies in `range` (`None`: every value is a definition, as for a 64-bit field or
/// one half of a modular label difference). Meant to be inlined: with `bytes` and `range`
/// constant, as every row gives them, the check and the copy become a compare and one
/// store. (A hint, not `always`: a debug build inlining it into every arm of `apply`
/// gave `apply` a 21 KB frame.)
#[inline]
pub(crate) fn write_data(
    place: &mut [u8],
    bytes: usize,
    value: i128,
    range: Option<Range>,
) -> Result<(), Failure> {
    if let Some(range) = range {
        within(value, range)?;
    }
    let le = (value as u64).to_le_bytes();
    let src = le.get(..bytes).ok_or_else(|| short(bytes, 8))?;
    let have = place.len();
    place
        .get_mut(..bytes)
        .ok_or_else(|| short(bytes, have))?
        .copy_from_slice(src);
    Ok(())
}

/// A datum: `value` checked against `range` and written in `bytes` bytes, reaching the
/// symbol directly.
#[inline]
pub(crate) fn datum(
    place: &mut [u8],
    bytes: usize,
    value: i128,
    range: Option<Range>,
) -> Result<Applied, Failure> {
    write_data(place, bytes, value, range).map(|()| Applied::direct(value))
}

/// `V + delta` modulo 2^(8·bytes) into the `bytes`-byte field at the place (the halves
/// of a label difference, `*P += S + A` and `*P -= S + A`). Returns the new field.
pub(crate) fn add_to_data(place: &mut [u8], bytes: usize, delta: u64) -> Result<u64, Failure> {
    let old = read_data(place, bytes)?;
    let new = old.wrapping_add(delta) & crate::bits::mask(8 * bytes as u32);
    write_data(place, bytes, i128::from(new), None)?;
    Ok(new)
}

/// `V + delta` into the low 6 bits of the byte at the place, keeping its top two bits
/// (DW_CFA_advance_loc's opcode); `set` replaces the 6 bits instead. Returns the 6 bits.
pub(crate) fn add_to_6_bits(place: &mut [u8], delta: u64, set: bool) -> Result<u8, Failure> {
    let byte = place.first_mut().ok_or_else(|| short(1, 0))?;
    let old = if set { 0 } else { u64::from(*byte) };
    let low = (old.wrapping_add(delta) & 0x3f) as u8;
    *byte = (*byte & 0xc0) | low;
    Ok(low)
}

// ---------------------------------------------------------------------------------------
// Instructions: read, re-encode, write back. Nothing is written when the encoder fails.

/// Rewrites the 32-bit instruction at the start of `place` with `encode`; X (`value`) is
/// attached to its problem.
pub(crate) fn patch32(
    place: &mut [u8],
    value: i128,
    encode: impl FnOnce(u32) -> Result<u32, RelocProblem>,
) -> Result<(), Failure> {
    let word = read_u32(place).ok_or_else(|| short(4, place.len()))?;
    let new = encode(word).map_err(about(value))?;
    write_u32(place, new).ok_or_else(|| short(4, 0))
}

/// Rewrites the 16-bit instruction at the start of `place` with `encode`.
pub(crate) fn patch16(
    place: &mut [u8],
    value: i128,
    encode: impl FnOnce(u16) -> Result<u16, RelocProblem>,
) -> Result<(), Failure> {
    let half = read_u16(place).ok_or_else(|| short(2, place.len()))?;
    let new = encode(half).map_err(about(value))?;
    write_u16(place, new).ok_or_else(|| short(2, 0))
}

/// Rewrites the two consecutive 32-bit instructions at the start of `place` with
/// `encode` (both read and checked before either is written).
pub(crate) fn patch_pair(
    place: &mut [u8],
    value: i128,
    encode: impl FnOnce(u32, u32) -> Result<(u32, u32), RelocProblem>,
) -> Result<(), Failure> {
    let first = read_u32(place).ok_or_else(|| short(8, place.len()))?;
    let second = place
        .get(4..)
        .and_then(read_u32)
        .ok_or_else(|| short(8, place.len()))?;
    let (first, second) = encode(first, second).map_err(about(value))?;
    let bytes = place.get_mut(..8).ok_or_else(|| short(8, 0))?;
    let (a, b) = bytes.split_at_mut(4);
    a.copy_from_slice(&first.to_le_bytes());
    b.copy_from_slice(&second.to_le_bytes());
    Ok(())
}

/// `UnexpectedInstruction` unless `ok`.
pub(crate) fn expect(ok: bool, word: u32) -> Result<(), RelocProblem> {
    if ok {
        Ok(())
    } else {
        Err(RelocProblem::UnexpectedInstruction { word })
    }
}

/// Writes `words` (little-endian) at the start of `buf` (a stub); `None` if it is short.
pub(crate) fn write_words(buf: &mut [u8], words: &[u32]) -> Option<()> {
    let out = buf.get_mut(..words.len() * 4)?;
    for (chunk, word) in out.chunks_exact_mut(4).zip(words) {
        chunk.copy_from_slice(&word.to_le_bytes());
    }
    Some(())
}

// ---------------------------------------------------------------------------------------
// Far calls.

/// What a stub stands in for when a call's addend is not zero.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StubAddend {
    /// The addend only corrects for where the field sits in the instruction (x86_64's
    /// `call rel32` has A = -4): the stub takes it as well, L + A - P.
    Kept,
    /// The place is the instruction, so A ≠ 0 means a target other than S, which the stub
    /// (it jumps to S) cannot stand for: such a call stays direct, and its range check
    /// reports it.
    MustBeZero,
}

/// The far-call decision: where a call or jump at P goes, and its X. Straight to S + A
/// when `reach` contains S + A - P; else through the symbol's stub, if the plan reserved
/// one (external targets) and `addend` allows; else straight, and the caller's range
/// check reports the overflow.
pub(crate) fn call_target(r: &RelocInput, reach: Range, addend: StubAddend) -> (i128, Via) {
    let direct = r.sap();
    if reach.contains(direct) {
        return (direct, Via::Direct);
    }
    let p = i128::from(r.p);
    match (r.stub, addend) {
        (Some(stub), StubAddend::Kept) => (i128::from(stub) + i128::from(r.a) - p, Via::Stub),
        (Some(stub), StubAddend::MustBeZero) if r.a == 0 => (i128::from(stub) - p, Via::Stub),
        _ => (direct, Via::Direct),
    }
}

#[cfg(test)]
pub(crate) mod testing {
    //! What every architecture's tests check about its table.

    use super::*;

    /// An input with only the type, S, A and P set.
    pub fn input(r_type: RelocationType, s: u64, a: i64, p: u64) -> RelocInput {
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

    /// What the table check applies each row with: S = 0x40, P = 0x20, A = 0, a GOT slot
    /// at 0x100 and a stub at 0x80.
    pub fn row_input(row: &Relocation) -> RelocInput {
        RelocInput {
            got_slot: Some(0x100),
            stub: Some(0x80),
            ..input(row.r_type, 0x40, 0, 0x20)
        }
    }

    /// The table is what `classify`, `name` and `apply` implement: every row's type
    /// classifies as the row says, is named as it says, and applies (with a GOT slot and a
    /// stub available and the place `place(row)` gives); no type outside the table
    /// classifies, and applying one is `Unsupported`.
    pub fn table_is_consistent(
        table: &[Relocation],
        classify: fn(RelocationType) -> Option<Class>,
        name: fn(RelocationType) -> Option<&'static str>,
        apply: fn(&RelocInput, &mut [u8]) -> Result<Applied, Failure>,
        input: impl Fn(&Relocation) -> RelocInput,
        place: impl Fn(&Relocation) -> [u8; 16],
    ) {
        for row in table {
            assert_eq!(classify(row.r_type), Some(row.class), "{}", row.name);
            assert_eq!(name(row.r_type), Some(row.name));
            assert!(row.class.width <= 8 && (row.class.width > 0) != row.class.skip);
            let mut bytes = place(row);
            let result = apply(&input(row), &mut bytes);
            assert!(result.is_ok(), "{}: {result:?}", row.name);
        }
        for r_type in (0..1200).map(RelocationType) {
            if table.iter().any(|row| row.r_type == r_type) {
                continue;
            }
            assert_eq!(classify(r_type), None, "{r_type}");
            assert_eq!(name(r_type), None, "{r_type}");
            let result = apply(&input(&table_row(r_type)), &mut [0u8; 16]);
            assert_eq!(
                result.map_err(|f| f.problem),
                Err(RelocProblem::Unsupported)
            );
        }
    }

    fn table_row(r_type: RelocationType) -> Relocation {
        Relocation {
            r_type,
            name: "?",
            value: "",
            check: "",
            class: Class::skip(),
        }
    }

    #[test]
    fn checks_report_the_range_and_the_alignment() {
        assert_eq!(
            fits(6, Range::signed(8), 4),
            Err(RelocProblem::Misaligned { align: 4 })
        );
        assert_eq!(
            fits(128, Range::signed(8), 4),
            Err(RelocProblem::Overflow {
                range: Range::signed(8)
            })
        );
        assert_eq!(fits(-128, Range::signed(8), 4), Ok(()));
        assert_eq!(
            within(-1, Range::unsigned(8)),
            Err(Failure::new(
                RelocProblem::Overflow {
                    range: Range::unsigned(8)
                },
                -1
            ))
        );
        assert!(aligned(-8, 4).is_ok() && aligned(-6, 4).is_err());
    }

    #[test]
    fn data_fields_are_little_endian_and_bounded() {
        let mut buf = [0xAAu8; 4];
        assert!(write_data(&mut buf, 3, 0x12_3456, None).is_ok());
        assert_eq!(buf, [0x56, 0x34, 0x12, 0xAA]);
        assert_eq!(read_data(&buf, 3), Ok(0x12_3456));
        assert_eq!(add_to_data(&mut buf, 3, 0xff_ffff_ffff), Ok(0x12_3455));
        let err = write_data(&mut buf[..2], 4, 5, None).map_err(|f| f.problem);
        assert_eq!(err, Err(RelocProblem::ShortPlace { need: 4, have: 2 }));
        assert_eq!(buf, [0x55, 0x34, 0x12, 0xAA], "nothing written");
        let mut byte = [0xc1u8];
        assert_eq!(add_to_6_bits(&mut byte, 0x3f, false), Ok(0));
        assert_eq!(byte, [0xc0]);
        assert_eq!(add_to_6_bits(&mut byte, 0x45, true), Ok(5));
        assert_eq!(byte, [0xc5]);
    }

    #[test]
    fn far_calls_are_direct_when_in_reach_else_through_the_stub() {
        let reach = Range::signed(28);
        let far = RelocInput {
            stub: Some(0x1000),
            ..input(RelocationType(0), 0x7fff_0000_0000, 0, 0x800)
        };
        assert_eq!(
            call_target(&far, reach, StubAddend::MustBeZero),
            (0x800, Via::Stub)
        );
        let near = RelocInput { s: 0x900, ..far };
        assert_eq!(
            call_target(&near, reach, StubAddend::MustBeZero),
            (0x100, Via::Direct)
        );
        let offset = RelocInput { a: 8, ..far };
        assert_eq!(
            call_target(&offset, reach, StubAddend::MustBeZero).1,
            Via::Direct
        );
        assert_eq!(
            call_target(&offset, reach, StubAddend::Kept),
            (0x808, Via::Stub)
        );
        let no_stub = RelocInput { stub: None, ..far };
        assert_eq!(
            call_target(&no_stub, reach, StubAddend::Kept).1,
            Via::Direct
        );
    }

    #[test]
    fn patches_write_nothing_on_failure() {
        let mut buf = [1u8, 2, 3, 4, 5, 6, 7, 8];
        let err = patch_pair(&mut buf, 9, |_, w| {
            Err(RelocProblem::UnexpectedInstruction { word: w })
        });
        assert_eq!(
            err,
            Err(Failure::new(
                RelocProblem::UnexpectedInstruction { word: 0x0807_0605 },
                9
            ))
        );
        assert_eq!(buf, [1, 2, 3, 4, 5, 6, 7, 8]);
        assert!(patch32(&mut buf[..3], 0, Ok).is_err());
        assert!(patch_pair(&mut buf, 0, |a, b| Ok((b, a))).is_ok());
        assert_eq!(buf, [5, 6, 7, 8, 1, 2, 3, 4]);
    }
}
