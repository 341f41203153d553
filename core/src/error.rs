//! Typed errors. Every failure names what it is about (section, symbol, relocation, value),
//! and none of them borrows the input, so they outlive the object bytes.

use crate::arch::{self, Arch};
use core::fmt;

/// A name copied out of the object for an error message (at most [`NAME_CAPACITY`] bytes
/// are kept; longer names are shown with a trailing `…`).
/// Bytes of a name kept in an error: enough for C kernel and helper names, small enough
/// that an [`Error`] stays cheap to return.
pub const NAME_CAPACITY: usize = 32;

#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Name {
    bytes: [u8; NAME_CAPACITY],
    len: u8,
}

impl Name {
    /// Copies `raw`, keeping at most [`NAME_CAPACITY`] bytes.
    pub fn new(raw: &[u8]) -> Name {
        let mut bytes = [0u8; NAME_CAPACITY];
        let n = raw.len().min(bytes.len());
        if let (Some(dst), Some(src)) = (bytes.get_mut(..n), raw.get(..n)) {
            dst.copy_from_slice(src);
        }
        // One more than the capacity marks a truncated name.
        let len = if raw.len() > bytes.len() {
            NAME_CAPACITY as u8 + 1
        } else {
            n as u8
        };
        Name { bytes, len }
    }

    /// The kept bytes.
    pub fn as_bytes(&self) -> &[u8] {
        let n = usize::from(self.len).min(self.bytes.len());
        self.bytes.get(..n).unwrap_or(&[])
    }

    fn truncated(&self) -> bool {
        usize::from(self.len) > self.bytes.len()
    }
}

impl fmt::Display for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for chunk in self.as_bytes().utf8_chunks() {
            f.write_str(chunk.valid())?;
            for b in chunk.invalid() {
                write!(f, "\\x{b:02x}")?;
            }
        }
        if self.truncated() {
            f.write_str("…")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "\"{self}\"")
    }
}

/// Why a relocation's value could not be written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RelocProblem {
    /// The value does not fit the field (`bits` wide, signed or unsigned).
    Overflow { bits: u8, signed: bool },
    /// The value is not a multiple of the alignment the field requires.
    Misaligned { align: u8 },
    /// The instruction at the place is not the one this relocation expects.
    UnexpectedInstruction { word: u32 },
    /// The relocation type is not supported by elfjit.
    Unsupported,
    /// The relocation needs a GOT slot or stub that the plan did not reserve.
    MissingSlot,
    /// A paired relocation (e.g. a LO12 without its HI20) has no partner.
    Unpaired,
}

/// A relocation that could not be applied, with everything needed to find it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RelocError {
    /// The object's position in the link (0 for the first).
    pub object: u32,
    /// The object's name, when the caller named its objects ([`Input`](crate::Input)).
    pub object_name: Option<Name>,
    pub arch: Arch,
    pub r_type: u32,
    pub section: Name,
    pub offset: u64,
    pub symbol: Name,
    /// The computed value (for example `S + A - P`) that did not fit.
    pub value: i128,
    pub problem: RelocProblem,
}

impl fmt::Display for RelocError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ty = arch::reloc_name(self.arch, self.r_type);
        write!(
            f,
            "{} relocation {ty} ({}) at {}+{:#x}",
            self.arch, self.r_type, self.section, self.offset
        )?;
        if let Some(object) = &self.object_name {
            write!(f, " in `{object}`")?;
        }
        write!(f, " against `{}`: ", self.symbol)?;
        match self.problem {
            RelocProblem::Overflow { bits, signed } => write!(
                f,
                "value {:#x} ({}) does not fit {} {bits}-bit field",
                self.value,
                self.value,
                if signed { "a signed" } else { "an unsigned" }
            ),
            RelocProblem::Misaligned { align } => {
                write!(f, "value {:#x} is not a multiple of {align}", self.value)
            }
            RelocProblem::UnexpectedInstruction { word } => {
                write!(f, "unexpected instruction {word:#010x} at the place")
            }
            RelocProblem::Unsupported => f.write_str("relocation type not supported"),
            RelocProblem::MissingSlot => f.write_str("no GOT slot or stub was planned for it"),
            RelocProblem::Unpaired => f.write_str("its paired relocation is missing"),
        }
    }
}

/// An error from a [`MemoryBackend`](crate::MemoryBackend).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BackendError {
    /// What the backend was doing (`"map"`, `"protect"`, ...).
    pub op: &'static str,
    /// The size in bytes of the request or range involved (0 if none).
    pub size: u64,
    /// An OS error number or backend-specific code (0 if none).
    pub code: i32,
}

impl BackendError {
    /// An error of operation `op` on `size` bytes, with OS error number `code` (0: none).
    pub const fn new(op: &'static str, size: u64, code: i32) -> BackendError {
        BackendError { op, size, code }
    }
}

impl fmt::Display for BackendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "memory backend failed to {}", self.op)?;
        if self.size != 0 {
            write!(f, " ({} bytes)", self.size)?;
        }
        if self.code != 0 {
            write!(f, ": OS error {}", self.code)?;
        }
        Ok(())
    }
}

/// Everything that can go wrong parsing, planning or linking.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Error {
    /// The bytes are not a well-formed ELF64 object; `what` says which check failed.
    Malformed { what: &'static str, at: u64 },
    /// An ELF object, but of a kind elfjit does not load.
    NotSupported { what: &'static str, value: u64 },
    /// The ELF machine is not one elfjit links for.
    UnsupportedMachine { machine: u16 },
    /// Objects of different architectures were given to one link.
    MixedArchitectures { first: Arch, other: Arch },
    /// A section uses a feature the loader cannot honour (TLS, constructors, ...).
    UnsupportedSection { section: Name, what: &'static str },
    /// A relocation type elfjit does not implement for this architecture.
    UnsupportedRelocation {
        arch: Arch,
        r_type: u32,
        section: Name,
        offset: u64,
    },
    /// A relocation's place lies outside its section.
    RelocationOutOfBounds { section: Name, offset: u64 },
    /// An undefined symbol nothing provides.
    UndefinedSymbol { name: Name },
    /// A relocation value could not be written.
    Relocation(RelocError),
    /// Storage the caller provided for a plan's table (or the linker's scratch) is too
    /// short: `table` names the field of [`PlanStorage`](crate::PlanStorage) (or
    /// `"externals"`), `needed` the entries it must hold.
    StorageTooSmall {
        table: &'static str,
        needed: usize,
        provided: usize,
    },
    /// With the `alloc` feature: allocating a plan's table failed.
    OutOfMemory { table: &'static str, needed: usize },
    /// The image would be larger than elfjit allows.
    ImageTooLarge { size: u64 },
    /// The memory backend failed.
    Backend(BackendError),
    /// The backend's memory does not match the request.
    BackendMismatch { what: &'static str },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Malformed { what, at } => write!(f, "malformed ELF object: {what} (at {at:#x})"),
            Error::NotSupported { what, value } => {
                write!(f, "unsupported ELF object: {what} ({value:#x})")
            }
            Error::UnsupportedMachine { machine } => write!(
                f,
                "unsupported ELF machine {machine} (elfjit links x86_64, aarch64, riscv64, \
                 loongarch64 and ppc64le objects)"
            ),
            Error::MixedArchitectures { first, other } => {
                write!(f, "cannot link {other} object into a {first} image")
            }
            Error::UnsupportedSection { section, what } => {
                write!(
                    f,
                    "section `{section}` uses {what}, which elfjit cannot load"
                )
            }
            Error::UnsupportedRelocation {
                arch,
                r_type,
                section,
                offset,
            } => write!(
                f,
                "unsupported {arch} relocation {} ({r_type}) at {section}+{offset:#x}",
                arch::reloc_name(*arch, *r_type)
            ),
            Error::RelocationOutOfBounds { section, offset } => write!(
                f,
                "malformed ELF object: relocation at {section}+{offset:#x} lies outside the section"
            ),
            Error::UndefinedSymbol { name } => write!(f, "undefined symbol `{name}`"),
            Error::Relocation(e) => write!(f, "{e}"),
            Error::StorageTooSmall {
                table,
                needed,
                provided,
            } => write!(
                f,
                "plan storage `{table}` holds {provided} entries; this link needs {needed}"
            ),
            Error::OutOfMemory { table, needed } => {
                write!(
                    f,
                    "cannot allocate {needed} entries for plan table `{table}`"
                )
            }
            Error::ImageTooLarge { size } => write!(f, "image of {size} bytes is too large"),
            Error::Backend(e) => write!(f, "{e}"),
            Error::BackendMismatch { what } => write!(f, "memory backend mismatch: {what}"),
        }
    }
}

impl core::error::Error for Error {}

impl From<BackendError> for Error {
    fn from(e: BackendError) -> Self {
        Error::Backend(e)
    }
}

/// Shorthand used across the core.
pub type Result<T, E = Error> = core::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_stay_small_and_names_show_truncation() {
        // A relocation error carries three names (object, section, symbol).
        assert!(
            core::mem::size_of::<Error>() <= 144,
            "{}",
            core::mem::size_of::<Error>()
        );
        let mut text = heapless::String::<128>::new();
        let long = [b'a'; 60];
        let _ = core::fmt::write(&mut text, format_args!("{}", Name::new(&long)));
        assert!(text.ends_with('…'));
        assert_eq!(text.len(), NAME_CAPACITY + '…'.len_utf8());
        text.clear();
        let _ = core::fmt::write(&mut text, format_args!("{}", Name::new(b"ok\xff")));
        assert_eq!(text.as_str(), "ok\\xff");
    }
}
