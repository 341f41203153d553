//! The methods of [`Arch`] that forward to the architecture's own file: its relocation
//! table, `apply`, stubs and ABI checks. The planner and linker call these; nothing else
//! in the crate names an architecture's module.

use super::reloc::{Applied, Class, Failure, Pair, RelocInput, Relocation, StubInput, WithApply};
use super::{aarch64, loongarch64, ppc64le, riscv64, x86_64, Arch};
use crate::error::Error;
use object::elf::{FileFlags, RelocationType, SectionType};

/// Evaluates `$f` in the module of `$arch`.
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

impl Arch {
    /// Every relocation elfjit links for this architecture, with its formula, range and
    /// alignment: the table at the top of the architecture's file.
    pub fn relocations(self) -> &'static [Relocation] {
        per_arch!(self, RELOCATIONS)
    }

    /// The name of relocation type `r_type` (`"R_X86_64_PC32"`): from the table for the
    /// types elfjit links, from `object`'s list for the others, `"unknown"` if neither
    /// knows it.
    pub fn reloc_name(self, r_type: RelocationType) -> &'static str {
        let names = match self {
            Arch::X86_64 => &object::elf::NAMES_R_X86_64,
            Arch::Aarch64 => &object::elf::NAMES_R_AARCH64,
            Arch::Riscv64 => &object::elf::NAMES_R_RISCV,
            Arch::Loongarch64 => &object::elf::NAMES_R_LARCH,
            Arch::Ppc64le => &object::elf::NAMES_R_PPC64,
        };
        per_arch!(self, name(r_type))
            .or_else(|| names.name(r_type))
            .unwrap_or("unknown")
    }

    /// The pre-scan's view of relocation type `r_type`, or `None` if it is not linked.
    pub(crate) fn classify(self, r_type: RelocationType) -> Option<Class> {
        per_arch!(self, classify(r_type))
    }

    /// Computes relocation `input` and writes it at the start of `place` (which runs to the
    /// end of its section). Nothing is written when it fails.
    pub(crate) fn apply(self, input: &RelocInput, place: &mut [u8]) -> Result<Applied, Failure> {
        per_arch!(self, apply(input, place))
    }

    /// Runs `work` with this architecture's `apply` as a function item, so that a loop
    /// over many relocations is compiled once per architecture with its `apply` inlined:
    /// the architecture is chosen once per section, not per relocation.
    pub(crate) fn with_apply<W: WithApply>(self, work: W) -> W::Output {
        match self {
            Arch::X86_64 => work.run(x86_64::apply),
            Arch::Aarch64 => work.run(aarch64::apply),
            Arch::Riscv64 => work.run(riscv64::apply),
            Arch::Loongarch64 => work.run(loongarch64::apply),
            Arch::Ppc64le => work.run(ppc64le::apply),
        }
    }

    /// Runs `work` with the row of data relocation type `r_type` alone as its `apply`,
    /// so that a loop over a run of that type is compiled per row with its arithmetic
    /// inlined; `None` for other types. Not for riscv64, whose pairs are linked through
    /// [`Arch::apply`] in one loop (its loop would be compiled but never run).
    pub(crate) fn with_row<W: WithApply>(
        self,
        r_type: RelocationType,
        work: W,
    ) -> Option<W::Output> {
        match self {
            Arch::X86_64 => x86_64::with_row(r_type, work),
            Arch::Aarch64 => aarch64::with_row(r_type, work),
            Arch::Loongarch64 => loongarch64::with_row(r_type, work),
            Arch::Ppc64le => ppc64le::with_row(r_type, work),
            Arch::Riscv64 => None,
        }
    }

    /// Whether the table has HI/LO pairs for the pre-scan to match up.
    pub(crate) fn has_pairs(self) -> bool {
        self.relocations()
            .iter()
            .any(|row| row.class.pair == Pair::Hi)
    }

    /// Size in bytes of one far-call stub (or veneer): the code segment holds
    /// [`Plan::stubs`](crate::Plan::stubs) of them, one after another.
    pub fn stub_size(self) -> u64 {
        per_arch!(self, STUB_SIZE)
    }

    /// Writes a stub at `buf` that jumps to its target.
    pub(crate) fn write_stub(self, buf: &mut [u8], stub: &StubInput) -> Option<()> {
        per_arch!(self, write_stub(buf, stub))
    }

    /// Whether stubs load their target from a GOT slot (so each stubbed symbol also gets
    /// one).
    pub(crate) fn stub_uses_got(self) -> bool {
        per_arch!(self, STUB_USES_GOT)
    }

    /// Refuses an object whose `e_flags` ask for an ABI the image cannot honour (riscv64
    /// and loongarch64: a float ABI other than LP64D, whose functions would take
    /// `float`/`double` arguments in other registers than their Linux callers use).
    pub(crate) fn check_flags(self, e_flags: FileFlags) -> Result<(), Error> {
        match self {
            Arch::Riscv64 => riscv64::check_flags(e_flags).map_err(|abi| Error::NotSupported {
                what: "RISC-V float ABI (elfjit links LP64D objects: -march=rv64gc -mabi=lp64d)",
                value: u64::from(abi.0),
            }),
            Arch::Loongarch64 => {
                loongarch64::check_flags(e_flags).map_err(|abi| Error::NotSupported {
                    what: "LoongArch base ABI (elfjit links LP64D objects: -mabi=lp64d, the \
                           default)",
                    value: u64::from(abi.0),
                })
            }
            _ => Ok(()),
        }
    }

    /// Undefined symbols the linker itself defines, as an offset from the GOT's first byte
    /// (`_GLOBAL_OFFSET_TABLE_` on x86_64; `.TOC.` on ppc64le is the GOT + 0x8000);
    /// `None` for every other name.
    pub fn linker_defined(self, name: &[u8]) -> Option<i64> {
        match (self, name) {
            (Arch::X86_64, b"_GLOBAL_OFFSET_TABLE_") => Some(0),
            (Arch::Ppc64le, b".TOC.") => Some(ppc64le::TOC_BIAS as i64),
            _ => None,
        }
    }

    /// Section types that hold loadable bytes besides PROGBITS/NOBITS
    /// (`SHT_X86_64_UNWIND`).
    pub(crate) fn is_loadable_type(self, sh_type: SectionType) -> bool {
        matches!(
            (self, sh_type),
            (Arch::X86_64, object::elf::SHT_X86_64_UNWIND)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_come_from_the_table_then_from_object() {
        assert_eq!(
            Arch::X86_64.reloc_name(object::elf::R_X86_64_PC32),
            "R_X86_64_PC32"
        );
        // Not linked, still named.
        assert_eq!(
            Arch::Aarch64.reloc_name(object::elf::R_AARCH64_TLSDESC_CALL),
            "R_AARCH64_TLSDESC_CALL"
        );
        // Linked, and only our table knows it.
        assert_eq!(
            Arch::Ppc64le.reloc_name(ppc64le::R_PPC64_REL24_NOTOC),
            "R_PPC64_REL24_NOTOC"
        );
        assert_eq!(Arch::Riscv64.reloc_name(RelocationType(0xfff0)), "unknown");
        assert!(Arch::Riscv64.has_pairs());
        assert!(!Arch::Aarch64.has_pairs());
        for arch in Arch::ALL {
            for row in arch.relocations() {
                assert_eq!(arch.reloc_name(row.r_type), row.name);
            }
        }
    }
}
