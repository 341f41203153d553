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

pub mod x86_64;

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
}

impl RelocClass {
    pub(crate) const fn data(width: u8) -> RelocClass {
        RelocClass {
            width,
            got: false,
            call: false,
            skip: false,
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

pub(crate) fn classify(arch: Arch, r_type: u32) -> Option<RelocClass> {
    match arch {
        Arch::X86_64 => x86_64::classify(r_type),
        _ => None,
    }
}

pub(crate) fn apply(arch: Arch, input: &RelocInput, place: &mut [u8]) -> Result<Applied, Failure> {
    match arch {
        Arch::X86_64 => x86_64::apply(input, place),
        _ => Err(Failure {
            problem: crate::error::RelocProblem::Unsupported,
            value: 0,
        }),
    }
}

/// The name of relocation type `r_type` on `arch` (`"R_X86_64_PC32"`), or `"unknown"`.
pub fn reloc_name(arch: Arch, r_type: u32) -> &'static str {
    match arch {
        Arch::X86_64 => x86_64::reloc_name(r_type),
        _ => "unknown",
    }
}

/// Size in bytes of one far-call stub on `arch`.
pub(crate) fn stub_size(arch: Arch) -> u64 {
    match arch {
        Arch::X86_64 => x86_64::STUB_SIZE,
        _ => 16,
    }
}

/// Writes a stub at `buf` (running at `stub_addr`) that jumps to `target`.
pub(crate) fn write_stub(arch: Arch, buf: &mut [u8], target: u64) -> Option<()> {
    match arch {
        Arch::X86_64 => x86_64::write_stub(buf, target),
        _ => None,
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
