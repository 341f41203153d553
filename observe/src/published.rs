//! What the observers are told about a module: its objects' bytes, where each loaded
//! section went, and the code the linker added (stubs, veneers). Everything else —
//! function ranges, `.eh_frame`, DWARF — is read from the objects here.

use crate::Error;
use object::elf;
use object::read::elf::{ElfFile64, SectionHeader};
use object::{Endianness, Object, ObjectSection, ObjectSymbol, SectionIndex, SymbolKind};

/// One object of a published module.
#[derive(Clone, Debug)]
pub struct LoadedObject<'a> {
    /// The relocatable object's bytes, as given to the linker.
    pub bytes: &'a [u8],
    /// The target address of each section, indexed by section header index (`None`: not
    /// loaded, such as `.debug_*` and relocation sections).
    pub section_addresses: Vec<Option<u64>>,
}

/// A piece of code the linker made that no object's symbol table names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinkerCode {
    /// The symbol it leads to (`expf`).
    pub target: String,
    /// Its first byte.
    pub address: u64,
    /// Its size in bytes.
    pub size: u64,
    /// What it is.
    pub kind: CodeKind,
}

/// What a named range of code is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CodeKind {
    /// A function of an object (global or local).
    Function,
    /// A far-call stub the linker wrote (x86_64, riscv64, loongarch64, ppc64le).
    Stub,
    /// A range-extension veneer the linker wrote (aarch64).
    Veneer,
}

/// A published module: linked, protected, its code executable in this process.
#[derive(Clone, Debug)]
pub struct Published<'a> {
    /// A name for messages (the module's first function, a file name, ...).
    pub name: &'a str,
    /// The objects linked into it, in link order.
    pub objects: Vec<LoadedObject<'a>>,
    /// Stubs and veneers.
    pub linker_code: Vec<LinkerCode>,
}

/// A named range of code: what a profiler is told.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CodeRange {
    /// The name profilers show (`my_kernel`, `expf@stub`, `expf@veneer`).
    pub name: String,
    /// Its first byte.
    pub address: u64,
    /// Its size in bytes (never 0).
    pub size: u64,
    /// What it is.
    pub kind: CodeKind,
    /// The object it comes from (`None` for linker code).
    pub object: Option<usize>,
}

/// A loaded `.eh_frame` section.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct EhFrame {
    pub address: u64,
    pub size: u64,
}

pub(crate) type Elf<'a> = ElfFile64<'a, Endianness>;

pub(crate) fn parse<'a>(module: &str, bytes: &'a [u8]) -> Result<Elf<'a>, Error> {
    Elf::parse(bytes).map_err(|e| Error::Object {
        module: module.to_string(),
        what: format!("not an ELF64 object the observers can read: {e}"),
    })
}

impl<'a> LoadedObject<'a> {
    /// The target address of section `index`, if it was loaded.
    pub(crate) fn address(&self, index: SectionIndex) -> Option<u64> {
        self.section_addresses.get(index.0).copied().flatten()
    }
}

impl Published<'_> {
    /// Every function of every object (those with a size), then the linker's stubs and
    /// veneers, in address order.
    pub fn code_ranges(&self) -> Result<Vec<CodeRange>, Error> {
        let mut ranges = Vec::new();
        for (index, object) in self.objects.iter().enumerate() {
            let file = parse(self.name, object.bytes)?;
            for symbol in file.symbols() {
                if symbol.kind() != SymbolKind::Text || symbol.size() == 0 {
                    continue;
                }
                let Some(base) = symbol.section_index().and_then(|s| object.address(s)) else {
                    continue;
                };
                let Ok(name) = symbol.name() else { continue };
                ranges.push(CodeRange {
                    name: name.to_string(),
                    address: base.wrapping_add(symbol.address()),
                    size: symbol.size(),
                    kind: CodeKind::Function,
                    object: Some(index),
                });
            }
        }
        for code in self.linker_code.iter().filter(|c| c.size != 0) {
            let suffix = match code.kind {
                CodeKind::Veneer => "veneer",
                _ => "stub",
            };
            ranges.push(CodeRange {
                name: format!("{}@{suffix}", code.target),
                address: code.address,
                size: code.size,
                kind: code.kind,
                object: None,
            });
        }
        ranges.sort_by_key(|r| r.address);
        Ok(ranges)
    }

    /// The loaded `.eh_frame` sections (one per object that has one).
    pub(crate) fn eh_frames(&self) -> Result<Vec<EhFrame>, Error> {
        let mut frames = Vec::new();
        for object in &self.objects {
            let file = parse(self.name, object.bytes)?;
            let endian = file.endian();
            for section in file.sections() {
                let header = section.elf_section_header();
                if section.name_bytes().ok() != Some(b".eh_frame")
                    || !header.sh_flags(endian).contains(elf::SHF_ALLOC)
                {
                    continue;
                }
                if let Some(address) = object.address(section.index()) {
                    frames.push(EhFrame {
                        address,
                        size: section.size(),
                    });
                }
            }
        }
        Ok(frames)
    }
}
