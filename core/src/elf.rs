//! Reading an ELF64 relocatable object: every offset, size, index and string read from the
//! bytes is checked here, so the planner and linker work on values known to be in bounds.

use crate::arch::Arch;
use crate::error::{Error, Location, Name, RelocError, RelocProblem, Result};
use object::elf::{
    self, FileFlags, FileHeader64, Rela64, RelocationType, SectionFlags, SectionHeader64,
    SectionType, Sym64, SymbolBind, SymbolSection, SymbolType,
};
use object::pod;
use object::LittleEndian as LE;

/// A validated ELF64 little-endian relocatable object, borrowed from its bytes.
#[derive(Clone, Copy)]
pub struct Object<'a> {
    data: &'a [u8],
    arch: Arch,
    sections: &'a [SectionHeader64<LE>],
    section_names: &'a [u8],
    symbols: &'a [Sym64<LE>],
    symbol_names: &'a [u8],
    symtab_index: usize,
}

/// One relocation entry, decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rela {
    pub offset: u64,
    pub symbol: u32,
    pub r_type: RelocationType,
    pub addend: i64,
}

/// A symbol's fields, decoded.
#[derive(Clone, Copy, Debug)]
pub struct Symbol<'a> {
    pub name: &'a [u8],
    pub value: u64,
    pub size: u64,
    pub shndx: SymbolSection,
    pub bind: SymbolBind,
    pub kind: SymbolType,
    /// `st_other` (ppc64le keeps the local entry point offset in it).
    pub other: u8,
}

impl<'a> Symbol<'a> {
    /// Defined somewhere (not `SHN_UNDEF`).
    #[inline]
    pub fn is_defined(&self) -> bool {
        self.head().is_defined()
    }

    /// Visible to other objects (global or weak).
    #[inline]
    pub fn is_global(&self) -> bool {
        self.head().is_global()
    }

    /// The fields but the name.
    #[inline]
    fn head(&self) -> SymbolHead {
        SymbolHead {
            value: self.value,
            size: self.size,
            shndx: self.shndx,
            bind: self.bind,
            kind: self.kind,
            other: self.other,
        }
    }

    /// `head` with its name.
    #[inline]
    fn named(head: SymbolHead, name: &'a [u8]) -> Symbol<'a> {
        Symbol {
            name,
            value: head.value,
            size: head.size,
            shndx: head.shndx,
            bind: head.bind,
            kind: head.kind,
            other: head.other,
        }
    }
}

/// A symbol's fields but its name ([`Object::symbol_head`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct SymbolHead {
    pub value: u64,
    pub size: u64,
    pub shndx: SymbolSection,
    pub bind: SymbolBind,
    pub kind: SymbolType,
    pub other: u8,
}

impl SymbolHead {
    /// Defined somewhere (not `SHN_UNDEF`).
    #[inline]
    pub fn is_defined(&self) -> bool {
        self.shndx != elf::SHN_UNDEF
    }

    /// Visible to other objects (global or weak).
    #[inline]
    pub fn is_global(&self) -> bool {
        is_global_bind(self.bind)
    }
}

/// The fields of raw symbol `sym` but its name.
#[inline]
fn head_of(sym: &Sym64<LE>) -> SymbolHead {
    SymbolHead {
        value: sym.st_value.get(LE),
        size: sym.st_size.get(LE),
        shndx: sym.st_shndx.get(LE),
        bind: sym.st_bind(),
        kind: sym.st_type(),
        other: sym.st_other.0,
    }
}

/// A binding visible to other objects (global or weak).
#[inline]
fn is_global_bind(bind: SymbolBind) -> bool {
    bind == elf::STB_GLOBAL || bind == elf::STB_WEAK
}

/// A section's fields, decoded.
#[derive(Clone, Copy, Debug)]
pub struct Section<'a> {
    pub name: &'a [u8],
    pub kind: SectionType,
    pub flags: SectionFlags,
    pub size: u64,
    pub align: u64,
    pub link: u32,
    pub info: u32,
    /// The file bytes (empty for `SHT_NOBITS`).
    pub data: &'a [u8],
}

impl Section<'_> {
    /// Occupies memory at run time.
    #[inline]
    pub fn is_alloc(&self) -> bool {
        self.flags.contains(elf::SHF_ALLOC)
    }
}

fn malformed(what: &'static str, at: Location) -> Error {
    Error::Malformed { what, at }
}

/// Section header `index`, as a location.
#[inline]
fn section_at(index: usize) -> Location {
    Location::Section(u32::try_from(index).unwrap_or(u32::MAX))
}

/// Symbol `index`, as a location.
#[inline]
fn symbol_at(index: usize) -> Location {
    Location::Symbol(u32::try_from(index).unwrap_or(u32::MAX))
}

/// The NUL-terminated string at `offset` in a string table ([`name_at`]), or the error
/// saying why there is none; `at` is the header or symbol whose name it is.
#[inline]
fn string_at(table: &[u8], offset: u32, at: Location) -> Result<&[u8]> {
    name_at(table, offset).ok_or_else(|| {
        let what = if offset as usize > table.len() {
            "name past its string table"
        } else {
            "unterminated name"
        };
        malformed(what, at)
    })
}

/// The name at `offset` of string table `table`: the bytes up to the first NUL after it;
/// `None` past the table or without a NUL.
#[inline]
pub fn name_at(table: &[u8], offset: u32) -> Option<&[u8]> {
    let tail = table.get(offset as usize..)?;
    tail.get(..nul_position(tail)?)
}

/// Whether every in-range offset of string table `table` starts a terminated name: the
/// table ends with NUL. Then checking a name only needs its offset in range.
fn is_terminated(table: &[u8]) -> bool {
    table.last() == Some(&0)
}

/// The position of the first NUL in `bytes`. Planning reads every symbol's name, so
/// this scans eight bytes at a time: `(w - 0x01..01) & !w & 0x80..80` marks the bytes of
/// `w` that are zero, the lowest mark exactly (a borrow only runs upward from a zero).
#[inline]
fn nul_position(bytes: &[u8]) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let mut words = bytes.chunks_exact(8);
    let mut start = 0;
    for chunk in &mut words {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        let w = u64::from_le_bytes(word);
        let zeros = w.wrapping_sub(ONES) & !w & HIGHS;
        if zeros != 0 {
            return Some(start + (zeros.trailing_zeros() / 8) as usize);
        }
        start += 8;
    }
    words
        .remainder()
        .iter()
        .position(|&b| b == 0)
        .map(|p| start + p)
}

/// Checks that the name at `offset` of `table` is readable, as [`string_at`] reads it;
/// `terminated`: [`is_terminated`] of `table`, so that an offset in range suffices.
#[inline]
fn check_name(table: &[u8], terminated: bool, offset: u32, at: Location) -> Result<()> {
    if terminated && (offset as usize) < table.len() {
        return Ok(());
    }
    string_at(table, offset, at).map(|_| ())
}

/// The bytes of `[offset, offset + size)` in `data`; `at` is what they belong to.
#[inline]
fn range<'d>(
    data: &'d [u8],
    offset: u64,
    size: u64,
    what: &'static str,
    at: Location,
) -> Result<&'d [u8]> {
    let end = offset
        .checked_add(size)
        .ok_or_else(|| malformed(what, at))?;
    let start = usize::try_from(offset).map_err(|_| malformed(what, at))?;
    let end = usize::try_from(end).map_err(|_| malformed(what, at))?;
    data.get(start..end).ok_or_else(|| malformed(what, at))
}

impl<'a> Object<'a> {
    /// Parses and validates `data` as an ELF64 little-endian relocatable object.
    pub fn parse(data: &'a [u8]) -> Result<Object<'a>> {
        let (header, _) = pod::from_bytes::<FileHeader64<LE>>(data).map_err(|()| {
            malformed(
                "shorter than an ELF64 header",
                Location::File {
                    len: data.len() as u64,
                },
            )
        })?;
        let ident = &header.e_ident;
        if ident.magic != elf::ELFMAG {
            return Err(malformed(
                "not an ELF file (bad magic)",
                Location::FileOffset(0),
            ));
        }
        if ident.class != elf::ELFCLASS64 {
            return Err(Error::NotSupported {
                what: "ELF class (elfjit loads 64-bit objects)",
                value: u64::from(ident.class.0),
            });
        }
        if ident.data != elf::ELFDATA2LSB {
            return Err(Error::NotSupported {
                what: "byte order (elfjit loads little-endian objects)",
                value: u64::from(ident.data.0),
            });
        }
        if ident.version != elf::EV_CURRENT {
            return Err(malformed(
                "ELF identification version",
                Location::Header {
                    value: u64::from(ident.version.0),
                },
            ));
        }
        let e_type = header.e_type.get(LE);
        if e_type != elf::ET_REL {
            return Err(Error::NotSupported {
                what: "object type (elfjit loads relocatable objects, ET_REL)",
                value: u64::from(e_type.0),
            });
        }
        let machine = header.e_machine.get(LE);
        let arch =
            Arch::from_machine(machine).ok_or(Error::UnsupportedMachine { machine: machine.0 })?;

        let shoff = header.e_shoff.get(LE);
        let shnum = header.e_shnum.get(LE);
        if shnum == 0 {
            // Zero means "no sections" or extended numbering; neither can be a kernel.
            return Err(malformed(
                "no section headers",
                Location::Header { value: shoff },
            ));
        }
        if usize::from(header.e_shentsize.get(LE)) != core::mem::size_of::<SectionHeader64<LE>>() {
            return Err(malformed(
                "section header size",
                Location::Header {
                    value: u64::from(header.e_shentsize.get(LE)),
                },
            ));
        }
        let table = range(
            data,
            shoff,
            u64::from(shnum) * core::mem::size_of::<SectionHeader64<LE>>() as u64,
            "section header table past the end of the file",
            Location::FileOffset(shoff),
        )?;
        let (sections, _) = pod::slice_from_bytes::<SectionHeader64<LE>>(table, usize::from(shnum))
            .map_err(|()| malformed("section header table", Location::FileOffset(shoff)))?;

        let shstrndx = header.e_shstrndx.get(LE);
        if shstrndx == elf::SHN_XINDEX || usize::from(shstrndx.0) >= sections.len() {
            return Err(malformed(
                "section name table index",
                Location::Header {
                    value: u64::from(shstrndx.0),
                },
            ));
        }
        let mut object = Object {
            data,
            arch,
            sections,
            section_names: &[],
            symbols: &[],
            symbol_names: &[],
            symtab_index: 0,
        };
        let names_index = usize::from(shstrndx.0);
        let names = object.section_header(names_index)?;
        if names.sh_type.get(LE) != elf::SHT_STRTAB {
            return Err(malformed(
                "section name table is not a string table",
                section_at(names_index),
            ));
        }
        object.section_names = object.section_bytes(names, names_index)?;

        // Every section's name and file range must be sound, loaded or not.
        let section_names_terminated = is_terminated(object.section_names);
        for (index, sh) in sections.iter().enumerate() {
            check_name(
                object.section_names,
                section_names_terminated,
                sh.sh_name.get(LE),
                section_at(index),
            )?;
            let kind = sh.sh_type.get(LE);
            if kind != elf::SHT_NOBITS && kind != elf::SHT_NULL {
                object.section_bytes(sh, index)?;
            }
            let align = sh.sh_addralign.get(LE);
            if align > 1 && !align.is_power_of_two() {
                return Err(malformed(
                    "section alignment is not a power of two",
                    Location::SectionField {
                        section: index as u32,
                        value: align,
                    },
                ));
            }
            if kind == elf::SHT_SYMTAB {
                if object.symtab_index != 0 {
                    return Err(malformed("more than one symbol table", section_at(index)));
                }
                object.symtab_index = index;
            }
        }

        if object.symtab_index != 0 {
            let at = object.symtab_index;
            let symtab = object.section_header(at)?;
            let field = |value| Location::SectionField {
                section: at as u32,
                value,
            };
            if usize::try_from(symtab.sh_entsize.get(LE)).ok()
                != Some(core::mem::size_of::<Sym64<LE>>())
            {
                return Err(malformed(
                    "symbol entry size",
                    field(symtab.sh_entsize.get(LE)),
                ));
            }
            let bytes = object.section_bytes(symtab, at)?;
            let count = bytes.len() / core::mem::size_of::<Sym64<LE>>();
            let (symbols, rest) = pod::slice_from_bytes::<Sym64<LE>>(bytes, count)
                .map_err(|()| malformed("symbol table", section_at(at)))?;
            if !rest.is_empty() {
                return Err(malformed(
                    "symbol table size",
                    field(symtab.sh_size.get(LE)),
                ));
            }
            let strtab_index = symtab.sh_link.get(LE) as usize;
            let strtab = object.section_header(strtab_index)?;
            if strtab.sh_type.get(LE) != elf::SHT_STRTAB {
                return Err(malformed(
                    "symbol table's string table",
                    field(u64::from(symtab.sh_link.get(LE))),
                ));
            }
            object.symbols = symbols;
            object.symbol_names = object.section_bytes(strtab, strtab_index)?;
            let terminated = is_terminated(object.symbol_names);
            let (names, sections) = (object.symbol_names.len(), object.sections.len());
            for (index, sym) in symbols.iter().enumerate() {
                // The common case, tested inline: a name offset inside a terminated table
                // and an ordinary section index. Anything else gets the full check, which
                // says what is wrong.
                let shndx = usize::from(sym.st_shndx.get(LE).0);
                let plain = terminated
                    && (sym.st_name.get(LE) as usize) < names
                    && shndx < sections.min(usize::from(elf::SHN_LORESERVE));
                if !plain {
                    object.validate_symbol(index, terminated)?;
                }
            }
        }

        for (index, sh) in sections.iter().enumerate() {
            let kind = sh.sh_type.get(LE);
            if kind == elf::SHT_RELA {
                if usize::try_from(sh.sh_entsize.get(LE)).ok()
                    != Some(core::mem::size_of::<Rela64<LE>>())
                {
                    return Err(malformed(
                        "relocation entry size",
                        Location::SectionField {
                            section: index as u32,
                            value: sh.sh_entsize.get(LE),
                        },
                    ));
                }
                let bytes = object.section_bytes(sh, index)?;
                if bytes.len() % core::mem::size_of::<Rela64<LE>>() != 0 {
                    return Err(malformed(
                        "relocation section size",
                        Location::SectionField {
                            section: index as u32,
                            value: sh.sh_size.get(LE),
                        },
                    ));
                }
                if sh.sh_link.get(LE) as usize != object.symtab_index || object.symtab_index == 0 {
                    return Err(malformed(
                        "relocation section's symbol table link",
                        Location::SectionField {
                            section: index as u32,
                            value: u64::from(sh.sh_link.get(LE)),
                        },
                    ));
                }
                let target = sh.sh_info.get(LE) as usize;
                if target == 0 || target >= sections.len() {
                    return Err(malformed(
                        "relocation section's target section",
                        Location::SectionField {
                            section: index as u32,
                            value: target as u64,
                        },
                    ));
                }
            }
        }
        Ok(object)
    }

    #[inline]
    fn section_header(&self, index: usize) -> Result<&'a SectionHeader64<LE>> {
        self.sections
            .get(index)
            .ok_or_else(|| malformed("section index out of range", section_at(index)))
    }

    /// The file bytes of section header `sh` (number `index`).
    #[inline]
    fn section_bytes(&self, sh: &SectionHeader64<LE>, index: usize) -> Result<&'a [u8]> {
        if sh.sh_type.get(LE) == elf::SHT_NOBITS {
            return Ok(&[]);
        }
        range(
            self.data,
            sh.sh_offset.get(LE),
            sh.sh_size.get(LE),
            "section contents past the end of the file",
            section_at(index),
        )
    }

    /// Checks symbol `index`'s name and section index; `terminated`: the string table ends
    /// with NUL ([`is_terminated`]).
    fn validate_symbol(&self, index: usize, terminated: bool) -> Result<()> {
        let sym = self.symbol_entry(index)?;
        check_name(
            self.symbol_names,
            terminated,
            sym.st_name.get(LE),
            symbol_at(index),
        )?;
        match sym.st_shndx.get(LE) {
            elf::SHN_XINDEX => Err(Error::NotSupported {
                what: "extended section indices (SHN_XINDEX)",
                value: index as u64,
            }),
            elf::SHN_UNDEF | elf::SHN_ABS | elf::SHN_COMMON => Ok(()),
            shndx if usize::from(shndx.0) < self.sections.len() => Ok(()),
            _ => Err(malformed("symbol's section index", symbol_at(index))),
        }
    }

    /// The architecture from `e_machine`.
    #[inline]
    pub fn arch(&self) -> Arch {
        self.arch
    }

    /// The raw `e_flags` (ABI details such as the RISC-V float ABI).
    pub fn flags(&self) -> FileFlags {
        pod::from_bytes::<FileHeader64<LE>>(self.data)
            .map(|(h, _)| h.e_flags.get(LE))
            .unwrap_or(FileFlags(0))
    }

    /// Number of section headers.
    #[inline]
    pub fn section_count(&self) -> usize {
        self.sections.len()
    }

    /// Section `index`, decoded.
    #[inline]
    pub fn section(&self, index: usize) -> Result<Section<'a>> {
        let sh = self.section_header(index)?;
        Ok(Section {
            name: string_at(self.section_names, sh.sh_name.get(LE), section_at(index))?,
            kind: sh.sh_type.get(LE),
            flags: sh.sh_flags.get(LE),
            size: sh.sh_size.get(LE),
            align: sh.sh_addralign.get(LE).max(1),
            link: sh.sh_link.get(LE),
            info: sh.sh_info.get(LE),
            data: self.section_bytes(sh, index)?,
        })
    }

    /// A section's name for messages (`?` if unreadable).
    pub fn section_name(&self, index: usize) -> Name {
        Name::new(self.section(index).map(|s| s.name).unwrap_or(b"?"))
    }

    /// A symbol's name for messages: a section symbol (which has no name of its own) by its
    /// section's name; `?` if unreadable.
    pub fn symbol_name(&self, index: usize) -> Name {
        match self.symbol(index) {
            Ok(s) if s.name.is_empty() => self.section_name(usize::from(s.shndx.0)),
            Ok(s) => Name::new(s.name),
            Err(_) => Name::new(b"?"),
        }
    }

    /// An error about relocation `rela`, which patches section `target` of this object,
    /// the `index`-th of the link; S, P and the value are 0 until the linker fills them.
    pub fn reloc_error(
        &self,
        index: usize,
        target: usize,
        rela: &Rela,
        problem: RelocProblem,
    ) -> RelocError {
        RelocError {
            object: u32::try_from(index).unwrap_or(u32::MAX),
            object_name: None,
            arch: self.arch,
            r_type: rela.r_type,
            name: self.arch.reloc_name(rela.r_type),
            section: self.section_name(target),
            offset: rela.offset,
            symbol: self.symbol_name(rela.symbol as usize),
            s: 0,
            a: rela.addend,
            p: 0,
            value: 0,
            problem,
        }
    }

    /// Number of symbols (including the null symbol 0).
    #[inline]
    pub fn symbol_count(&self) -> usize {
        self.symbols.len()
    }

    /// Symbol `index`, decoded, if it is a named global (or weak) definition. The entry's
    /// fields are tested before its name is decoded: most symbols of an object are not
    /// global definitions, and decoding a name is a search for its terminator.
    #[inline]
    pub fn global_definition(&self, index: usize) -> Option<Symbol<'a>> {
        let (head, offset) = self.global_definition_head(index)?;
        Some(Symbol::named(head, name_at(self.symbol_names, offset)?))
    }

    /// [`Object::global_definition`] without reading the name: the symbol's fixed fields
    /// and where its name (not empty) starts in [`Object::symbol_names`].
    #[inline]
    pub(crate) fn global_definition_head(&self, index: usize) -> Option<(SymbolHead, u32)> {
        let sym = self.symbol_entry(index).ok()?;
        let head = head_of(sym);
        let offset = sym.st_name.get(LE);
        let named = offset != 0
            && self
                .symbol_names
                .get(offset as usize)
                .is_some_and(|&b| b != 0);
        (named && head.is_defined() && head.is_global()).then_some((head, offset))
    }

    /// The symbol string table. Every symbol's name offset is inside it and its name ends
    /// at a NUL inside it ([`Object::parse`] checks both).
    #[inline]
    pub fn symbol_names(&self) -> &'a [u8] {
        self.symbol_names
    }

    /// Symbol `index`, decoded.
    #[inline]
    pub fn symbol(&self, index: usize) -> Result<Symbol<'a>> {
        let head = self.symbol_head(index)?;
        Ok(Symbol::named(head, self.symbol_name_bytes(index)?))
    }

    /// Symbol `index` but its name: its fixed fields only, read without searching for the
    /// end of its name.
    #[inline]
    pub(crate) fn symbol_head(&self, index: usize) -> Result<SymbolHead> {
        self.symbol_entry(index).map(head_of)
    }

    /// The name of symbol `index`.
    #[inline]
    pub(crate) fn symbol_name_bytes(&self, index: usize) -> Result<&'a [u8]> {
        let sym = self.symbol_entry(index)?;
        string_at(self.symbol_names, sym.st_name.get(LE), symbol_at(index))
    }

    /// The raw entry of symbol `index`.
    #[inline]
    fn symbol_entry(&self, index: usize) -> Result<&'a Sym64<LE>> {
        self.symbols
            .get(index)
            .ok_or_else(|| malformed("symbol index out of range", symbol_at(index)))
    }

    /// The relocation entries of `SHT_RELA` section `index`, validated in `parse`.
    #[inline]
    pub fn relocations(&self, index: usize) -> Result<Relocations<'a>> {
        let sh = self.section_header(index)?;
        let bytes = self.section_bytes(sh, index)?;
        let count = bytes.len() / core::mem::size_of::<Rela64<LE>>();
        let (entries, _) = pod::slice_from_bytes::<Rela64<LE>>(bytes, count)
            .map_err(|()| malformed("relocation section", section_at(index)))?;
        Ok(Relocations {
            entries: entries.iter(),
        })
    }
}

/// The entries of one relocation section, decoded as they are visited.
#[derive(Clone, Debug)]
pub struct Relocations<'a> {
    entries: core::slice::Iter<'a, Rela64<LE>>,
}

impl Relocations<'_> {
    /// Passes over the leading entries for which `keep(r_type, offset, symbol)` holds and
    /// returns how many it passed. A plain loop over the raw entries that never decodes an
    /// addend: the plan's scan of a long run of data relocations is this loop.
    #[inline]
    pub fn pass_while(&mut self, mut keep: impl FnMut(RelocationType, u64, u32) -> bool) -> u64 {
        let rest = self.entries.as_slice();
        let passed = rest
            .iter()
            .position(|r| !keep(r.r_type(LE, false), r.r_offset.get(LE), r.r_sym(LE, false)))
            .unwrap_or(rest.len());
        self.entries = rest.get(passed..).unwrap_or_default().iter();
        passed as u64
    }
}

impl Iterator for Relocations<'_> {
    type Item = Rela;

    #[inline]
    fn next(&mut self) -> Option<Rela> {
        self.entries.next().map(|r| Rela {
            offset: r.r_offset.get(LE),
            symbol: r.r_sym(LE, false),
            r_type: r.r_type(LE, false),
            addend: r.r_addend.get(LE),
        })
    }

    #[inline]
    fn size_hint(&self) -> (usize, Option<usize>) {
        self.entries.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The word-at-a-time scan finds the same NUL as a byte loop, wherever it is and
        /// whatever surrounds it (0x80 and 0x01 bytes are the trick's edge cases).
        #[test]
        fn nul_position_is_the_first_nul(
            bytes in proptest::collection::vec(
                prop_oneof![Just(0u8), Just(1u8), Just(0x80u8), Just(0xffu8), any::<u8>()],
                0..40,
            ),
        ) {
            prop_assert_eq!(nul_position(&bytes), bytes.iter().position(|&b| b == 0));
        }
    }

    /// `pass_while` passes exactly the leading entries that hold, and the iterator goes
    /// on from the first that does not, decoded whole (its addend too).
    #[test]
    fn skipping_a_run_resumes_at_the_first_entry_outside_it() {
        let rela = |offset: u64, symbol: u32, r_type: u32, addend: i64| Rela64::<LE> {
            r_offset: object::U64::new(LE, offset),
            r_info: Rela64::<LE>::r_info(LE, false, symbol, RelocationType(r_type)),
            r_addend: object::I64::new(LE, addend),
        };
        let entries = [
            rela(0, 1, 1, 10),
            rela(8, 2, 1, 20),
            rela(16, 3, 2, -30),
            rela(24, 1, 1, 40),
        ];
        let mut relocations = Relocations {
            entries: entries.iter(),
        };
        let mut seen = [0u32; 4];
        let passed = relocations.pass_while(|r_type, offset, symbol| {
            seen[offset as usize / 8] = symbol;
            r_type == RelocationType(1)
        });
        assert_eq!(passed, 2);
        assert_eq!(seen, [1, 2, 3, 0]); // the third was asked and refused; the fourth never
        let next = Rela {
            offset: 16,
            symbol: 3,
            r_type: RelocationType(2),
            addend: -30,
        };
        assert_eq!(relocations.next(), Some(next));
        assert_eq!(relocations.pass_while(|_, _, _| false), 0);
        assert_eq!(relocations.pass_while(|_, _, _| true), 1);
        assert_eq!(relocations.next(), None);
        assert_eq!(relocations.pass_while(|_, _, _| true), 0);
    }

    #[test]
    fn names_in_an_unterminated_table_are_still_checked_one_by_one() {
        let at = symbol_at(1);
        assert!(check_name(b"ab\0cd", false, 3, at).is_err());
        assert!(check_name(b"ab\0cd", false, 0, at).is_ok());
        assert!(check_name(b"ab\0", true, 3, at).is_err());
        assert!(check_name(b"ab\0", true, 2, at).is_ok());
        assert!(is_terminated(b"a\0") && !is_terminated(b"a") && !is_terminated(b""));
    }

    #[test]
    fn rejects_short_and_foreign_input() {
        assert!(matches!(Object::parse(&[]), Err(Error::Malformed { .. })));
        assert!(matches!(
            Object::parse(&[0x7f, b'E', b'L', b'F']),
            Err(Error::Malformed { .. })
        ));
        let mut header = [0u8; 64];
        header[..4].copy_from_slice(&elf::ELFMAG);
        header[4] = elf::ELFCLASS32.0;
        assert!(matches!(
            Object::parse(&header),
            Err(Error::NotSupported { .. })
        ));
        header[4] = elf::ELFCLASS64.0;
        header[5] = elf::ELFDATA2MSB.0;
        assert!(matches!(
            Object::parse(&header),
            Err(Error::NotSupported { .. })
        ));
        header[5] = elf::ELFDATA2LSB.0;
        header[6] = elf::EV_CURRENT.0;
        header[16] = elf::ET_DYN.0 as u8;
        assert!(matches!(
            Object::parse(&header),
            Err(Error::NotSupported { .. })
        ));
        header[16] = elf::ET_REL.0 as u8;
        header[18] = 3; // EM_386
        assert!(matches!(
            Object::parse(&header),
            Err(Error::UnsupportedMachine { machine: 3 })
        ));
        header[18] = elf::EM_X86_64.0 as u8;
        assert!(matches!(
            Object::parse(&header),
            Err(Error::Malformed { .. })
        ));
    }

    #[test]
    fn strings_are_bounded() {
        let at = Location::Symbol(1);
        assert_eq!(string_at(b"ab\0cd\0", 3, at).ok(), Some(&b"cd"[..]));
        assert!(string_at(b"ab", 0, at).is_err());
        assert_eq!(
            string_at(b"ab\0", 9, at),
            Err(Error::Malformed {
                what: "name past its string table",
                at
            })
        );
    }
}
