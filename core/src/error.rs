//! Typed errors. Every failure says where it is (object, section, offset, symbol, table
//! entry) and with which values, and none of them borrows the input, so they outlive the
//! object bytes.
//!
//! This module depends only on [`Arch`]: a relocation's name is captured
//! as a `&'static str` when its error is built, so displaying an error needs no table.

use crate::arch::Arch;
use core::fmt;
use object::elf::RelocationType;

/// Bytes of a name kept in an error: enough for C kernel and helper names, small enough
/// that an [`Error`] stays cheap to return.
pub const NAME_CAPACITY: usize = 32;

/// A name copied out of the object for an error message (at most [`NAME_CAPACITY`] bytes
/// are kept; longer names are shown with a trailing `…`).
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

/// A signed value in hexadecimal with its sign in front (`-0x800`, not the two's
/// complement `{:#x}` prints for a negative integer).
struct SignedHex(i128);

impl fmt::Display for SignedHex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 < 0 {
            write!(f, "-{:#x}", self.0.unsigned_abs())
        } else {
            write!(f, "{:#x}", self.0)
        }
    }
}

/// The values a relocation field accepts: `lo <= value < hi`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Range {
    pub lo: i128,
    pub hi: i128,
}

impl Range {
    /// A two's-complement field of `bits` bits: `[-2^(bits-1), 2^(bits-1))`.
    pub const fn signed(bits: u32) -> Range {
        let half = 1i128 << (bits - 1);
        Range {
            lo: -half,
            hi: half,
        }
    }

    /// An unsigned field of `bits` bits: `[0, 2^bits)`.
    pub const fn unsigned(bits: u32) -> Range {
        Range {
            lo: 0,
            hi: 1i128 << bits,
        }
    }

    /// A field of `bits` bits its consumer may read signed or unsigned (plain data words):
    /// `[-2^(bits-1), 2^bits)`.
    pub const fn either(bits: u32) -> Range {
        Range {
            lo: -(1i128 << (bits - 1)),
            hi: 1i128 << bits,
        }
    }

    /// The same range moved by `by` (a field that holds `value + bias` accepts
    /// `[lo - bias, hi - bias)`).
    pub const fn shifted(self, by: i128) -> Range {
        Range {
            lo: self.lo + by,
            hi: self.hi + by,
        }
    }

    /// Whether `value` is in the range.
    pub const fn contains(self, value: i128) -> bool {
        self.lo <= value && value < self.hi
    }
}

impl fmt::Display for Range {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}, {})", SignedHex(self.lo), SignedHex(self.hi))
    }
}

/// Why a relocation's value could not be written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RelocProblem {
    /// The value is outside the range the field accepts.
    Overflow { range: Range },
    /// The value is not a multiple of the alignment the field requires.
    Misaligned { align: u8 },
    /// The instruction at the place is not the one this relocation expects.
    UnexpectedInstruction { word: u32 },
    /// The place has `have` bytes left in its section; the relocation writes `need`.
    ShortPlace { need: u8, have: u8 },
    /// The place (`width` bytes at the offset) lies outside its section of `size` bytes,
    /// or in a section without contents (`.bss`): a malformed object.
    OutsideSection { width: u8, size: u64 },
    /// A GOT-relative relocation with a non-zero addend: the GOT slot holds S, and a slot
    /// for S + A is not something elfjit builds.
    GotAddend,
    /// The relocation type is not supported by elfjit.
    Unsupported,
    /// The relocation needs a GOT slot or stub that the plan did not reserve.
    MissingSlot,
    /// A paired relocation (e.g. a LO12 without its HI20) has no partner.
    Unpaired,
    /// The symbol's `st_other` asks for a local entry point the ABI reserves (ppc64le).
    ReservedLocalEntry { other: u8 },
}

impl RelocProblem {
    /// Whether the values S, A, P and the computed value explain the problem (they are
    /// printed for these).
    const fn is_about_the_value(self) -> bool {
        matches!(
            self,
            RelocProblem::Overflow { .. } | RelocProblem::Misaligned { .. }
        )
    }
}

/// A relocation that could not be applied, with everything needed to find it and to see
/// why: the object, the relocation, where it is, what it refers to and the values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RelocError {
    /// The object's index in the link (0 for the first).
    pub object: u32,
    /// The object's name, when the caller named its objects ([`Input`](crate::Input)).
    pub object_name: Option<Name>,
    pub arch: Arch,
    /// The relocation type's number and name (`R_X86_64_PC32`).
    pub r_type: RelocationType,
    pub name: &'static str,
    /// The section the relocation patches, and the place's offset in it.
    pub section: Name,
    pub offset: u64,
    /// The symbol it refers to (a section symbol by its section's name).
    pub symbol: Name,
    /// S, A and P: the symbol's address, the addend and the place's address (0 when the
    /// error is found before addresses are known).
    pub s: u64,
    pub a: i64,
    pub p: u64,
    /// The computed value (for example `S + A - P`) the problem is about.
    pub value: i128,
    pub problem: RelocProblem,
}

impl fmt::Display for RelocError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.object_name {
            Some(name) => write!(f, "{name}: ")?,
            None => write!(f, "object {}: ", self.object)?,
        }
        write!(
            f,
            "{} relocation {} ({}) at {}+{:#x} against `{}`: ",
            self.arch, self.name, self.r_type, self.section, self.offset, self.symbol
        )?;
        match self.problem {
            RelocProblem::Overflow { range } => write!(
                f,
                "value {:#x} ({}) is outside {range}",
                self.value, self.value
            )?,
            RelocProblem::Misaligned { align } => {
                write!(f, "value {:#x} is not a multiple of {align}", self.value)?
            }
            RelocProblem::UnexpectedInstruction { word } => {
                write!(f, "unexpected instruction {word:#010x} at the place")?
            }
            RelocProblem::ShortPlace { need, have } => write!(
                f,
                "the field needs {need} bytes, the section has {have} left at the place"
            )?,
            RelocProblem::GotAddend => write!(
                f,
                "a GOT-relative relocation with addend {} (elfjit's GOT slots hold the \
                 symbol's address, so the addend must be 0)",
                SignedHex(i128::from(self.a))
            )?,
            RelocProblem::OutsideSection { width, size } => write!(
                f,
                "malformed ELF object: the place ({width} bytes) lies outside the section \
                 ({size:#x} bytes of contents)"
            )?,
            RelocProblem::Unsupported => f.write_str("relocation type not supported")?,
            RelocProblem::MissingSlot => f.write_str("no GOT slot or stub was planned for it")?,
            RelocProblem::Unpaired => f.write_str("its paired relocation is missing")?,
            RelocProblem::ReservedLocalEntry { other } => write!(
                f,
                "the symbol's st_other {other:#x} gives a reserved local entry point"
            )?,
        }
        if self.problem.is_about_the_value() {
            write!(
                f,
                " (S = {:#x}, A = {}, P = {:#x})",
                self.s,
                SignedHex(i128::from(self.a)),
                self.p
            )?;
        }
        Ok(())
    }
}

/// Where in an object a malformed field is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Location {
    /// The file as a whole, which is `len` bytes long.
    File { len: u64 },
    /// A byte offset in the file.
    FileOffset(u64),
    /// A field of the ELF header, which holds `value`.
    Header { value: u64 },
    /// Section header `index`.
    Section(u32),
    /// A field of section header `section` that holds `value`.
    SectionField { section: u32, value: u64 },
    /// Symbol table entry `index`.
    Symbol(u32),
    /// Entry `index` of relocation section `section`.
    Relocation { section: u32, index: u32 },
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Location::File { len } => write!(f, "a file of {len} bytes"),
            Location::FileOffset(offset) => write!(f, "file offset {offset:#x}"),
            Location::Header { value } => write!(f, "ELF header field value {value:#x}"),
            Location::Section(index) => write!(f, "section {index}"),
            Location::SectionField { section, value } => {
                write!(f, "section {section}, field value {value:#x}")
            }
            Location::Symbol(index) => write!(f, "symbol {index}"),
            Location::Relocation { section, index } => {
                write!(f, "relocation {index} of section {section}")
            }
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
    Malformed { what: &'static str, at: Location },
    /// An ELF object, but of a kind elfjit does not load.
    NotSupported { what: &'static str, value: u64 },
    /// The ELF machine is not one elfjit links for.
    UnsupportedMachine { machine: u16 },
    /// Objects of different architectures were given to one link.
    MixedArchitectures { first: Arch, other: Arch },
    /// A section uses a feature the loader cannot honour (TLS, constructors, ...).
    UnsupportedSection { section: Name, what: &'static str },
    /// An undefined symbol nothing provides.
    UndefinedSymbol { name: Name },
    /// A relocation is refused: its type is not linked, its place lies outside its
    /// section, its pair is missing, or its value cannot be written.
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
            Error::Malformed { what, at } => write!(f, "malformed ELF object: {what} (at {at})"),
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

    fn text(args: core::fmt::Arguments<'_>) -> heapless::String<512> {
        let mut text = heapless::String::<512>::new();
        let _ = core::fmt::write(&mut text, args);
        text
    }

    #[test]
    fn errors_stay_small_and_names_show_truncation() {
        // A relocation error carries three names (object, section, symbol: 33 bytes each),
        // S, A, P, the 128-bit computed value and the 128-bit range it missed.
        assert!(
            core::mem::size_of::<Error>() <= 240,
            "{}",
            core::mem::size_of::<Error>()
        );
        let long = [b'a'; 60];
        let shown = text(format_args!("{}", Name::new(&long)));
        assert!(shown.ends_with('…'));
        assert_eq!(shown.len(), NAME_CAPACITY + '…'.len_utf8());
        let shown = text(format_args!("{}", Name::new(b"ok\xff")));
        assert_eq!(shown.as_str(), "ok\\xff");
    }

    #[test]
    fn ranges_are_half_open_and_print_with_their_sign() {
        assert_eq!(
            Range::signed(32),
            Range {
                lo: -0x8000_0000,
                hi: 0x8000_0000
            }
        );
        assert!(Range::signed(8).contains(-128) && !Range::signed(8).contains(128));
        assert!(Range::unsigned(16).contains(0xffff) && !Range::unsigned(16).contains(-1));
        assert!(Range::either(16).contains(-0x8000) && Range::either(16).contains(0xffff));
        assert!(!Range::either(16).contains(0x1_0000));
        assert_eq!(
            Range::signed(32).shifted(-0x800).lo,
            -0x8000_0000 - 0x800,
            "a biased field"
        );
        assert_eq!(
            text(format_args!("{}", Range::signed(12))).as_str(),
            "[-0x800, 0x800)"
        );
    }

    #[test]
    fn relocation_errors_say_where_and_with_which_values() {
        let e = RelocError {
            object: 2,
            object_name: None,
            arch: Arch::X86_64,
            r_type: RelocationType(2),
            name: "R_X86_64_PC32",
            section: Name::new(b".text"),
            offset: 0x1a,
            symbol: Name::new(b"far"),
            s: 0x7f00_0000_0000,
            a: -4,
            p: 0x1001a,
            value: 0x7eff_fffe_ffe2,
            problem: RelocProblem::Overflow {
                range: Range::signed(32),
            },
        };
        let shown = text(format_args!("{e}"));
        for part in [
            "object 2:",
            "x86_64",
            "R_X86_64_PC32 (2)",
            ".text+0x1a",
            "`far`",
            "0x7efffffeffe2",
            "[-0x80000000, 0x80000000)",
            "S = 0x7f0000000000, A = -0x4, P = 0x1001a",
        ] {
            assert!(shown.contains(part), "{part} missing from {shown}");
        }
        let named = RelocError {
            object_name: Some(Name::new(b"kernel.o")),
            problem: RelocProblem::GotAddend,
            a: 8,
            ..e
        };
        let shown = text(format_args!("{named}"));
        assert!(shown.starts_with("kernel.o: "), "{shown}");
        assert!(shown.contains("addend 0x8"), "{shown}");
        assert!(!shown.contains("S = "), "{shown}");
        let short = RelocError {
            problem: RelocProblem::ShortPlace { need: 4, have: 1 },
            ..e
        };
        let shown = text(format_args!("{short}"));
        assert!(
            shown.contains("needs 4 bytes") && shown.contains("1 left"),
            "{shown}"
        );
    }
}
