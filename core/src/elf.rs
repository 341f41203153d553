//! Reading an ELF64 relocatable object: every offset, size, index and string read from the
//! bytes is checked here, so the planner and linker work on values known to be in bounds.

use crate::arch::Arch;
use crate::error::{Error, Name, Result};
use object::elf::{self, FileHeader64, Rela64, SectionHeader64, Sym64};
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
    pub r_type: u32,
    pub addend: i64,
}

/// A symbol's fields, decoded.
#[derive(Clone, Copy, Debug)]
pub struct Symbol<'a> {
    pub name: &'a [u8],
    pub value: u64,
    pub size: u64,
    pub shndx: u16,
    pub bind: u8,
    pub kind: u8,
    pub other: u8,
}

impl Symbol<'_> {
    /// Defined somewhere (not `SHN_UNDEF`).
    pub fn is_defined(&self) -> bool {
        self.shndx != elf::SHN_UNDEF
    }

    /// Visible to other objects (global or weak).
    pub fn is_global(&self) -> bool {
        self.bind == elf::STB_GLOBAL || self.bind == elf::STB_WEAK
    }
}

/// A section's fields, decoded.
#[derive(Clone, Copy, Debug)]
pub struct Section<'a> {
    pub name: &'a [u8],
    pub kind: u32,
    pub flags: u64,
    pub size: u64,
    pub align: u64,
    pub link: u32,
    pub info: u32,
    /// The file bytes (empty for `SHT_NOBITS`).
    pub data: &'a [u8],
}

impl Section<'_> {
    /// Occupies memory at run time.
    pub fn is_alloc(&self) -> bool {
        self.flags & u64::from(elf::SHF_ALLOC) != 0
    }
}

fn malformed(what: &'static str, at: u64) -> Error {
    Error::Malformed { what, at }
}

/// The NUL-terminated string at `offset` in a string table.
fn string_at(table: &[u8], offset: u32) -> Result<&[u8]> {
    let tail = table
        .get(offset as usize..)
        .ok_or(malformed("string index past its table", u64::from(offset)))?;
    let end = tail
        .iter()
        .position(|&b| b == 0)
        .ok_or(malformed("unterminated string", u64::from(offset)))?;
    tail.get(..end)
        .ok_or(malformed("string", u64::from(offset)))
}

/// The bytes of `[offset, offset + size)` in `data`.
fn range<'d>(data: &'d [u8], offset: u64, size: u64, what: &'static str) -> Result<&'d [u8]> {
    let end = offset.checked_add(size).ok_or(malformed(what, offset))?;
    let start = usize::try_from(offset).map_err(|_| malformed(what, offset))?;
    let end = usize::try_from(end).map_err(|_| malformed(what, offset))?;
    data.get(start..end).ok_or(malformed(what, offset))
}

impl<'a> Object<'a> {
    /// Parses and validates `data` as an ELF64 little-endian relocatable object.
    pub fn parse(data: &'a [u8]) -> Result<Object<'a>> {
        let (header, _) = pod::from_bytes::<FileHeader64<LE>>(data)
            .map_err(|()| malformed("shorter than an ELF64 header", data.len() as u64))?;
        let ident = &header.e_ident;
        if ident.magic != elf::ELFMAG {
            return Err(malformed("not an ELF file (bad magic)", 0));
        }
        if ident.class != elf::ELFCLASS64 {
            return Err(Error::NotSupported {
                what: "ELF class (elfjit loads 64-bit objects)",
                value: u64::from(ident.class),
            });
        }
        if ident.data != elf::ELFDATA2LSB {
            return Err(Error::NotSupported {
                what: "byte order (elfjit loads little-endian objects)",
                value: u64::from(ident.data),
            });
        }
        if ident.version != elf::EV_CURRENT {
            return Err(malformed(
                "ELF identification version",
                u64::from(ident.version),
            ));
        }
        let e_type = header.e_type.get(LE);
        if e_type != elf::ET_REL {
            return Err(Error::NotSupported {
                what: "object type (elfjit loads relocatable objects, ET_REL)",
                value: u64::from(e_type),
            });
        }
        let machine = header.e_machine.get(LE);
        let arch = match machine {
            elf::EM_X86_64 => Arch::X86_64,
            elf::EM_AARCH64 => Arch::Aarch64,
            elf::EM_RISCV => Arch::Riscv64,
            elf::EM_LOONGARCH => Arch::Loongarch64,
            elf::EM_PPC64 => Arch::Ppc64le,
            _ => return Err(Error::UnsupportedMachine { machine }),
        };

        let shoff = header.e_shoff.get(LE);
        let shnum = header.e_shnum.get(LE);
        if shnum == 0 {
            // Zero means "no sections" or extended numbering; neither can be a kernel.
            return Err(malformed("no section headers", shoff));
        }
        if usize::from(header.e_shentsize.get(LE)) != core::mem::size_of::<SectionHeader64<LE>>() {
            return Err(malformed(
                "section header size",
                u64::from(header.e_shentsize.get(LE)),
            ));
        }
        let table = range(
            data,
            shoff,
            u64::from(shnum) * core::mem::size_of::<SectionHeader64<LE>>() as u64,
            "section header table past the end of the file",
        )?;
        let (sections, _) = pod::slice_from_bytes::<SectionHeader64<LE>>(table, usize::from(shnum))
            .map_err(|()| malformed("section header table", shoff))?;

        let shstrndx = header.e_shstrndx.get(LE);
        if shstrndx == elf::SHN_XINDEX || usize::from(shstrndx) >= sections.len() {
            return Err(malformed("section name table index", u64::from(shstrndx)));
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
        let names = object.section_header(usize::from(shstrndx))?;
        if names.sh_type.get(LE) != elf::SHT_STRTAB {
            return Err(malformed(
                "section name table is not a string table",
                u64::from(shstrndx),
            ));
        }
        object.section_names = object.section_bytes(names)?;

        // Every section's name and file range must be sound, loaded or not.
        for (index, sh) in sections.iter().enumerate() {
            string_at(object.section_names, sh.sh_name.get(LE))?;
            let kind = sh.sh_type.get(LE);
            if kind != elf::SHT_NOBITS && kind != elf::SHT_NULL {
                object.section_bytes(sh)?;
            }
            let align = sh.sh_addralign.get(LE);
            if align > 1 && !align.is_power_of_two() {
                return Err(malformed(
                    "section alignment is not a power of two",
                    index as u64,
                ));
            }
            if kind == elf::SHT_SYMTAB {
                if object.symtab_index != 0 {
                    return Err(malformed("more than one symbol table", index as u64));
                }
                object.symtab_index = index;
            }
        }

        if object.symtab_index != 0 {
            let symtab = object.section_header(object.symtab_index)?;
            if usize::try_from(symtab.sh_entsize.get(LE)).ok()
                != Some(core::mem::size_of::<Sym64<LE>>())
            {
                return Err(malformed("symbol entry size", symtab.sh_entsize.get(LE)));
            }
            let bytes = object.section_bytes(symtab)?;
            let count = bytes.len() / core::mem::size_of::<Sym64<LE>>();
            let (symbols, rest) = pod::slice_from_bytes::<Sym64<LE>>(bytes, count)
                .map_err(|()| malformed("symbol table", symtab.sh_offset.get(LE)))?;
            if !rest.is_empty() {
                return Err(malformed("symbol table size", symtab.sh_size.get(LE)));
            }
            let strtab = object.section_header(symtab.sh_link.get(LE) as usize)?;
            if strtab.sh_type.get(LE) != elf::SHT_STRTAB {
                return Err(malformed(
                    "symbol table's string table",
                    u64::from(symtab.sh_link.get(LE)),
                ));
            }
            object.symbols = symbols;
            object.symbol_names = object.section_bytes(strtab)?;
            for index in 0..symbols.len() {
                object.validate_symbol(index)?;
            }
        }

        for (index, sh) in sections.iter().enumerate() {
            let kind = sh.sh_type.get(LE);
            if kind == elf::SHT_RELA {
                if usize::try_from(sh.sh_entsize.get(LE)).ok()
                    != Some(core::mem::size_of::<Rela64<LE>>())
                {
                    return Err(malformed("relocation entry size", index as u64));
                }
                let bytes = object.section_bytes(sh)?;
                if bytes.len() % core::mem::size_of::<Rela64<LE>>() != 0 {
                    return Err(malformed("relocation section size", index as u64));
                }
                if sh.sh_link.get(LE) as usize != object.symtab_index || object.symtab_index == 0 {
                    return Err(malformed(
                        "relocation section's symbol table link",
                        index as u64,
                    ));
                }
                let target = sh.sh_info.get(LE) as usize;
                if target == 0 || target >= sections.len() {
                    return Err(malformed(
                        "relocation section's target section",
                        index as u64,
                    ));
                }
            }
        }
        Ok(object)
    }

    fn section_header(&self, index: usize) -> Result<&'a SectionHeader64<LE>> {
        self.sections
            .get(index)
            .ok_or(malformed("section index", index as u64))
    }

    fn section_bytes(&self, sh: &SectionHeader64<LE>) -> Result<&'a [u8]> {
        if sh.sh_type.get(LE) == elf::SHT_NOBITS {
            return Ok(&[]);
        }
        range(
            self.data,
            sh.sh_offset.get(LE),
            sh.sh_size.get(LE),
            "section contents past the end of the file",
        )
    }

    fn validate_symbol(&self, index: usize) -> Result<()> {
        let sym = self.symbol(index)?;
        match sym.shndx {
            elf::SHN_XINDEX => Err(Error::NotSupported {
                what: "extended section indices (SHN_XINDEX)",
                value: index as u64,
            }),
            elf::SHN_UNDEF | elf::SHN_ABS | elf::SHN_COMMON => Ok(()),
            shndx if usize::from(shndx) < self.sections.len() => Ok(()),
            _ => Err(malformed("symbol's section index", index as u64)),
        }
    }

    /// The architecture from `e_machine`.
    pub fn arch(&self) -> Arch {
        self.arch
    }

    /// The raw `e_flags` (ABI details such as the RISC-V float ABI).
    pub fn flags(&self) -> u32 {
        pod::from_bytes::<FileHeader64<LE>>(self.data)
            .map(|(h, _)| h.e_flags.get(LE))
            .unwrap_or(0)
    }

    /// Number of section headers.
    pub fn section_count(&self) -> usize {
        self.sections.len()
    }

    /// Section `index`, decoded.
    pub fn section(&self, index: usize) -> Result<Section<'a>> {
        let sh = self.section_header(index)?;
        Ok(Section {
            name: string_at(self.section_names, sh.sh_name.get(LE))?,
            kind: sh.sh_type.get(LE),
            flags: sh.sh_flags.get(LE),
            size: sh.sh_size.get(LE),
            align: sh.sh_addralign.get(LE).max(1),
            link: sh.sh_link.get(LE),
            info: sh.sh_info.get(LE),
            data: self.section_bytes(sh)?,
        })
    }

    /// A section's name for messages (empty if unreadable).
    pub fn section_name(&self, index: usize) -> Name {
        Name::new(self.section(index).map(|s| s.name).unwrap_or(b"?"))
    }

    /// Number of symbols (including the null symbol 0).
    pub fn symbol_count(&self) -> usize {
        self.symbols.len()
    }

    /// Symbol `index`, decoded.
    pub fn symbol(&self, index: usize) -> Result<Symbol<'a>> {
        let sym = self
            .symbols
            .get(index)
            .ok_or(malformed("symbol index", index as u64))?;
        Ok(Symbol {
            name: string_at(self.symbol_names, sym.st_name.get(LE))?,
            value: sym.st_value.get(LE),
            size: sym.st_size.get(LE),
            shndx: sym.st_shndx.get(LE),
            bind: sym.st_bind(),
            kind: sym.st_type(),
            other: sym.st_other,
        })
    }

    /// The relocation entries of `SHT_RELA` section `index`, validated in `parse`.
    pub fn relocations(&self, index: usize) -> Result<impl Iterator<Item = Rela> + 'a> {
        let sh = self.section_header(index)?;
        let bytes = self.section_bytes(sh)?;
        let count = bytes.len() / core::mem::size_of::<Rela64<LE>>();
        let (entries, _) = pod::slice_from_bytes::<Rela64<LE>>(bytes, count)
            .map_err(|()| malformed("relocation section", index as u64))?;
        Ok(entries.iter().map(|r| Rela {
            offset: r.r_offset.get(LE),
            symbol: r.r_sym(LE, false),
            r_type: r.r_type(LE, false),
            addend: r.r_addend.get(LE),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_short_and_foreign_input() {
        assert!(matches!(Object::parse(&[]), Err(Error::Malformed { .. })));
        assert!(matches!(
            Object::parse(&[0x7f, b'E', b'L', b'F']),
            Err(Error::Malformed { .. })
        ));
        let mut header = [0u8; 64];
        header[..4].copy_from_slice(&elf::ELFMAG);
        header[4] = elf::ELFCLASS32;
        assert!(matches!(
            Object::parse(&header),
            Err(Error::NotSupported { .. })
        ));
        header[4] = elf::ELFCLASS64;
        header[5] = elf::ELFDATA2MSB;
        assert!(matches!(
            Object::parse(&header),
            Err(Error::NotSupported { .. })
        ));
        header[5] = elf::ELFDATA2LSB;
        header[6] = elf::EV_CURRENT;
        header[16] = elf::ET_DYN as u8;
        assert!(matches!(
            Object::parse(&header),
            Err(Error::NotSupported { .. })
        ));
        header[16] = elf::ET_REL as u8;
        header[18] = 3; // EM_386
        assert!(matches!(
            Object::parse(&header),
            Err(Error::UnsupportedMachine { machine: 3 })
        ));
        header[18] = elf::EM_X86_64 as u8;
        assert!(matches!(
            Object::parse(&header),
            Err(Error::Malformed { .. })
        ));
    }

    #[test]
    fn strings_are_bounded() {
        assert_eq!(string_at(b"ab\0cd\0", 3).ok(), Some(&b"cd"[..]));
        assert!(string_at(b"ab", 0).is_err());
        assert!(string_at(b"ab\0", 9).is_err());
    }
}
