//! The architectures elfjit links for.

use core::fmt;

/// A target architecture: the machine an object was compiled for and its code will run on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Arch {
    X86_64,
    Aarch64,
    Riscv64,
    Loongarch64,
    Ppc64le,
}

impl Arch {
    /// Every architecture, in a stable order.
    pub const ALL: [Arch; 5] = [
        Arch::X86_64,
        Arch::Aarch64,
        Arch::Riscv64,
        Arch::Loongarch64,
        Arch::Ppc64le,
    ];

    /// The name used on the command line and in JSON (`x86_64`, `aarch64`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            Arch::X86_64 => "x86_64",
            Arch::Aarch64 => "aarch64",
            Arch::Riscv64 => "riscv64",
            Arch::Loongarch64 => "loongarch64",
            Arch::Ppc64le => "ppc64le",
        }
    }

    /// Parses a command-line name; also accepts the spellings Rust and Debian use.
    pub fn from_name(name: &str) -> Option<Arch> {
        match name {
            "x86_64" | "x86-64" | "amd64" => Some(Arch::X86_64),
            "aarch64" | "arm64" => Some(Arch::Aarch64),
            "riscv64" | "riscv64gc" => Some(Arch::Riscv64),
            "loongarch64" | "loong64" => Some(Arch::Loongarch64),
            "ppc64le" | "powerpc64le" | "powerpc64" | "ppc64el" => Some(Arch::Ppc64le),
            _ => None,
        }
    }

    /// The architecture this crate was compiled for, if elfjit supports it.
    pub const fn host() -> Option<Arch> {
        if cfg!(target_arch = "x86_64") {
            Some(Arch::X86_64)
        } else if cfg!(target_arch = "aarch64") {
            Some(Arch::Aarch64)
        } else if cfg!(target_arch = "riscv64") {
            Some(Arch::Riscv64)
        } else if cfg!(target_arch = "loongarch64") {
            Some(Arch::Loongarch64)
        } else if cfg!(all(target_arch = "powerpc64", target_endian = "little")) {
            Some(Arch::Ppc64le)
        } else {
            None
        }
    }
}

impl fmt::Display for Arch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

pub mod aarch64;
pub mod loongarch64;
pub mod ppc64le;
pub mod riscv64;
pub mod x86_64;

/// A relocation's part in a pair whose low half is computed from the high half's target
/// (RISC-V `PCREL_HI20` + `PCREL_LO12_I/S`: the LO12's symbol is the label of the AUIPC
/// that carries the HI20).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pair {
    None,
    /// The high half: other relocations may refer to its place.
    Hi,
    /// The low half: its symbol labels the place of a `Hi` relocation.
    Lo,
}

/// What the pre-scan needs to know about one relocation type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RelocClass {
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

impl RelocClass {
    pub(crate) const fn data(width: u8) -> RelocClass {
        RelocClass {
            width,
            got: false,
            call: false,
            skip: false,
            pair: Pair::None,
        }
    }
    /// The high half of a pair (`got`: its target is the symbol's GOT slot).
    pub(crate) const fn hi(width: u8, got: bool) -> RelocClass {
        RelocClass {
            got,
            pair: Pair::Hi,
            ..RelocClass::data(width)
        }
    }
    /// The low half of a pair.
    pub(crate) const fn lo(width: u8) -> RelocClass {
        RelocClass {
            pair: Pair::Lo,
            ..RelocClass::data(width)
        }
    }
    pub(crate) const fn got(width: u8) -> RelocClass {
        RelocClass {
            got: true,
            ..RelocClass::data(width)
        }
    }
    pub(crate) const fn call(width: u8) -> RelocClass {
        RelocClass {
            call: true,
            ..RelocClass::data(width)
        }
    }
    pub(crate) const SKIP: RelocClass = RelocClass {
        width: 0,
        got: false,
        call: false,
        skip: true,
        pair: Pair::None,
    };
}

/// The inputs of one relocation, as addresses in the target's address space.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RelocInput {
    pub r_type: u32,
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

/// The high half of a pair, as its low half needs it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct HiInput {
    pub r_type: u32,
    pub s: u64,
    pub a: i64,
    /// The high half's place (the AUIPC).
    pub p: u64,
    pub got_slot: Option<u64>,
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

/// Why applying failed, and the value involved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Failure {
    pub problem: crate::error::RelocProblem,
    pub value: i128,
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

/// `Ok` if `value` fits a signed `bits`-wide field, else an overflow failure.
pub(crate) fn check_signed(value: i128, bits: u32) -> Result<(), Failure> {
    if crate::bits::fits_signed(value, bits) {
        Ok(())
    } else {
        Err(Failure {
            problem: crate::error::RelocProblem::Overflow {
                bits: bits as u8,
                signed: true,
            },
            value,
        })
    }
}

/// `Ok` if `value` fits an unsigned `bits`-wide field, else an overflow failure.
pub(crate) fn check_unsigned(value: i128, bits: u32) -> Result<(), Failure> {
    if crate::bits::fits_unsigned(value, bits) {
        Ok(())
    } else {
        Err(Failure {
            problem: crate::error::RelocProblem::Overflow {
                bits: bits as u8,
                signed: false,
            },
            value,
        })
    }
}

/// `Ok` if `value` is a multiple of `align`, else a misalignment failure.
pub(crate) fn check_aligned(value: i128, align: u64) -> Result<(), Failure> {
    if crate::bits::is_aligned(value, align) {
        Ok(())
    } else {
        Err(Failure {
            problem: crate::error::RelocProblem::Misaligned { align: align as u8 },
            value,
        })
    }
}

/// A failure for a place too short for its field (the pre-scan's bounds check makes this
/// unreachable for well-formed plans; it still must not panic).
pub(crate) fn short_place(value: i128) -> Failure {
    Failure {
        problem: crate::error::RelocProblem::Overflow {
            bits: 0,
            signed: false,
        },
        value,
    }
}

/// Calls `$f` in the module of `$arch`.
macro_rules! per_arch {
    ($arch:expr, $($f:tt)+) => {
        match $arch {
            Arch::X86_64 => x86_64::$($f)+,
            Arch::Aarch64 => aarch64::$($f)+,
            Arch::Riscv64 => riscv64::$($f)+,
            Arch::Loongarch64 => loongarch64::$($f)+,
            Arch::Ppc64le => ppc64le::$($f)+,
        }
    };
}

/// The pre-scan's view of relocation type `r_type`, or `None` if it is not supported.
pub(crate) fn classify(arch: Arch, r_type: u32) -> Option<RelocClass> {
    per_arch!(arch, classify(r_type))
}

/// Computes relocation `input` and writes it at the start of `place` (which runs to the end
/// of its section). Nothing is written when it fails.
pub(crate) fn apply(arch: Arch, input: &RelocInput, place: &mut [u8]) -> Result<Applied, Failure> {
    per_arch!(arch, apply(input, place))
}

/// The name of relocation type `r_type` on `arch` (`"R_X86_64_PC32"`), or `"unknown"`.
pub fn reloc_name(arch: Arch, r_type: u32) -> &'static str {
    per_arch!(arch, reloc_name(r_type))
}

/// Size in bytes of one far-call stub on `arch`.
pub(crate) fn stub_size(arch: Arch) -> u64 {
    per_arch!(arch, STUB_SIZE)
}

/// Writes a stub at `buf` that jumps to its target.
pub(crate) fn write_stub(arch: Arch, buf: &mut [u8], stub: &StubInput) -> Option<()> {
    per_arch!(arch, write_stub(buf, stub))
}

/// Whether stubs on `arch` load their target from a GOT slot (so each stubbed symbol also
/// gets one).
pub(crate) fn stub_uses_got(arch: Arch) -> bool {
    per_arch!(arch, STUB_USES_GOT)
}

/// Whether `arch` has HI/LO relocation pairs to match up in the pre-scan.
pub(crate) fn has_pairs(arch: Arch) -> bool {
    per_arch!(arch, HAS_PAIRS)
}

/// Refuses an object whose `e_flags` ask for an ABI the image cannot honour (riscv64 and
/// loongarch64: a float ABI other than LP64D, whose functions would take `float`/`double`
/// arguments in other registers than their Linux callers use).
pub(crate) fn check_flags(arch: Arch, e_flags: u32) -> Result<(), crate::error::Error> {
    match arch {
        Arch::Riscv64 => {
            riscv64::check_flags(e_flags).map_err(|abi| crate::error::Error::NotSupported {
                what: "RISC-V float ABI (elfjit links LP64D objects: -march=rv64gc -mabi=lp64d)",
                value: u64::from(abi),
            })
        }
        Arch::Loongarch64 => {
            loongarch64::check_flags(e_flags).map_err(|abi| crate::error::Error::NotSupported {
                what: "LoongArch base ABI (elfjit links LP64D objects: -mabi=lp64d, the default)",
                value: u64::from(abi),
            })
        }
        _ => Ok(()),
    }
}

/// Undefined symbols the linker itself defines, as an offset from the GOT's first byte
/// (`_GLOBAL_OFFSET_TABLE_` on x86_64; `.TOC.` on ppc64le is the GOT + 0x8000).
pub(crate) fn linker_defined(arch: Arch, name: &[u8]) -> Option<i64> {
    match (arch, name) {
        (Arch::X86_64, b"_GLOBAL_OFFSET_TABLE_") => Some(0),
        (Arch::Ppc64le, b".TOC.") => Some(0x8000),
        _ => None,
    }
}

/// Section types that hold loadable bytes besides PROGBITS/NOBITS (`SHT_X86_64_UNWIND`).
pub(crate) fn is_loadable_type(arch: Arch, sh_type: u32) -> bool {
    matches!(
        (arch, sh_type),
        (Arch::X86_64, object::elf::SHT_X86_64_UNWIND)
    )
}
