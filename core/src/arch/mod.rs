//! The architectures elfjit links for: the [`Arch`] enum, and one file per architecture.
//!
//! The pieces, each in its own module so that the imports form no circle:
//! - this file: [`Arch`], what the rest of the crate (errors included) names a target by;
//! - [`reloc`]: the vocabulary every architecture file uses (the inputs of a relocation,
//!   what applying it reports, the table macro, the checks and read-modify-write helpers
//!   they share);
//! - one file per architecture ([`x86_64`], [`aarch64`], [`riscv64`], [`loongarch64`],
//!   [`ppc64le`]): ABI notes, the relocation table with each relocation's `apply`, the
//!   instruction encoders and the far-call stub;
//! - [`dispatch`]: the methods of [`Arch`] that forward to the architecture's file.

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
pub mod dispatch;
pub mod loongarch64;
pub mod ppc64le;
pub mod reloc;
pub mod riscv64;
pub mod x86_64;
