//! Source lines of loaded code, from an object's DWARF line table (`-g`).
//!
//! clang's `-c` objects are relocatable: an address in `.debug_line` or `.debug_info` is
//! zero plus a relocation against the code's section, and a string offset is a relocation
//! against `.debug_str`/`.debug_line_str`. The object's own relocations are applied while
//! reading (gimli's `RelocateReader`), against the address each loaded section went to and
//! offset 0 for the debug sections (each object's debug sections stand alone). Only
//! absolute relocations are applied (what `object` classifies as
//! [`RelocationKind::Absolute`], 32 or 64 bits); an object whose debug sections need others
//! (the ADD/SUB pairs of riscv64 and loongarch64 with linker relaxation) has no lines here.

use crate::published::{parse, Elf, LoadedObject};
use crate::Error;
use gimli::{EndianSlice, Reader as _, Relocate, RelocateReader, RunTimeEndian};
use object::{Object, ObjectSection, ObjectSymbol, RelocationKind, RelocationTarget};
use std::collections::HashMap;

/// One row of a line table: code at `address` and after comes from `line` of `files[file]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LineRow {
    pub address: u64,
    pub line: u32,
    pub file: usize,
}

/// An object's line rows, in address order, and the file names they refer to.
#[derive(Clone, Debug, Default)]
pub(crate) struct LineTable {
    pub rows: Vec<LineRow>,
    pub files: Vec<String>,
}

/// The relocated values of one debug section, by offset.
#[derive(Debug, Default)]
struct Relocations(HashMap<usize, u64>);

impl Relocate<usize> for &Relocations {
    fn relocate_address(&self, offset: usize, value: u64) -> gimli::Result<u64> {
        Ok(self.0.get(&offset).copied().unwrap_or(value))
    }

    fn relocate_offset(&self, offset: usize, value: usize) -> gimli::Result<usize> {
        match self.0.get(&offset) {
            Some(&relocated) => {
                usize::try_from(relocated).map_err(|_| gimli::Error::UnsupportedOffset)
            }
            None => Ok(value),
        }
    }
}

type Reader<'a> = RelocateReader<EndianSlice<'a, RunTimeEndian>, &'a Relocations>;

fn unsupported(module: &str, what: String) -> Error {
    Error::Object {
        module: module.to_string(),
        what,
    }
}

/// The relocated values for section `section` of `file`.
fn relocations(
    module: &str,
    file: &Elf<'_>,
    object: &LoadedObject<'_>,
    section: &object::read::elf::ElfSection64<'_, '_, object::Endianness>,
) -> Result<Relocations, Error> {
    let mut values = HashMap::new();
    for (offset, relocation) in section.relocations() {
        let name = section.name().unwrap_or("?");
        if relocation.kind() != RelocationKind::Absolute || !matches!(relocation.size(), 32 | 64) {
            return Err(unsupported(
                module,
                format!(
                    "relocation {:?} at {name}+{offset:#x} (only absolute relocations are \
                     applied to DWARF)",
                    relocation.flags()
                ),
            ));
        }
        let RelocationTarget::Symbol(index) = relocation.target() else {
            return Err(unsupported(
                module,
                format!("relocation at {name}+{offset:#x} without a symbol"),
            ));
        };
        let symbol = file
            .symbol_by_index(index)
            .map_err(|e| unsupported(module, format!("relocation at {name}+{offset:#x}: {e}")))?;
        let base = symbol
            .section_index()
            .map_or(0, |s| object.address(s).unwrap_or(0));
        let value = base
            .wrapping_add(symbol.address())
            .wrapping_add_signed(relocation.addend());
        let Ok(offset) = usize::try_from(offset) else {
            continue;
        };
        values.insert(offset, value);
    }
    Ok(Relocations(values))
}

/// The line table of `object`, or an empty one if it has no DWARF line program.
pub(crate) fn line_table(module: &str, object: &LoadedObject<'_>) -> Result<LineTable, Error> {
    let file = parse(module, object.bytes)?;
    let endian = if file.is_little_endian() {
        RunTimeEndian::Little
    } else {
        RunTimeEndian::Big
    };
    // Every debug section's bytes and relocated values, kept alive for the readers.
    let mut sections: Vec<(String, &[u8], Relocations)> = Vec::new();
    for section in file.sections() {
        let Ok(name) = section.name() else { continue };
        if !name.starts_with(".debug_") {
            continue;
        }
        let data = section
            .data()
            .map_err(|e| unsupported(module, format!("{name}: {e}")))?;
        let relocated = relocations(module, &file, object, &section)?;
        sections.push((name.to_string(), data, relocated));
    }
    if !sections.iter().any(|(name, ..)| name == ".debug_line") {
        return Ok(LineTable::default());
    }
    let empty = Relocations::default();
    let dwarf = gimli::Dwarf::load(|id| -> gimli::Result<Reader<'_>> {
        let (data, relocated) = sections
            .iter()
            .find(|(name, ..)| name == id.name())
            .map_or((&[][..], &empty), |(_, data, relocated)| (*data, relocated));
        Ok(RelocateReader::new(
            EndianSlice::new(data, endian),
            relocated,
        ))
    })
    .map_err(|e| unsupported(module, format!("DWARF: {e}")))?;
    read_rows(&dwarf).map_err(|e| unsupported(module, format!("DWARF line table: {e}")))
}

fn read_rows(dwarf: &gimli::Dwarf<Reader<'_>>) -> gimli::Result<LineTable> {
    let mut table = LineTable::default();
    let mut file_index: HashMap<String, usize> = HashMap::new();
    let mut units = dwarf.units();
    while let Some(header) = units.next()? {
        let unit = dwarf.unit(header)?;
        let Some(program) = unit.line_program.clone() else {
            continue;
        };
        let mut rows = program.rows();
        while let Some((header, row)) = rows.next_row()? {
            if row.end_sequence() {
                continue;
            }
            let Some(line) = row.line() else { continue };
            let path = match row.file(header) {
                Some(entry) => file_path(dwarf, &unit, header, entry)?,
                None => "??".to_string(),
            };
            let next = table.files.len();
            let file = *file_index.entry(path.clone()).or_insert(next);
            if file == next {
                table.files.push(path);
            }
            table.rows.push(LineRow {
                address: row.address(),
                line: u32::try_from(line.get()).unwrap_or(u32::MAX),
                file,
            });
        }
    }
    table.rows.sort_by_key(|r| r.address);
    Ok(table)
}

/// A line-table file entry as a path: absolute, or under its directory and the unit's
/// compilation directory.
fn file_path(
    dwarf: &gimli::Dwarf<Reader<'_>>,
    unit: &gimli::Unit<Reader<'_>>,
    header: &gimli::LineProgramHeader<Reader<'_>>,
    entry: &gimli::FileEntry<Reader<'_>>,
) -> gimli::Result<String> {
    let text = |value| -> gimli::Result<String> {
        Ok(dwarf
            .attr_string(unit, value)?
            .to_string_lossy()?
            .into_owned())
    };
    let name = text(entry.path_name())?;
    if name.starts_with('/') {
        return Ok(name);
    }
    let mut path = std::path::PathBuf::new();
    if let Some(dir) = &unit.comp_dir {
        path.push(dir.to_string_lossy()?.as_ref());
    }
    if let Some(dir) = entry.directory(header) {
        path.push(text(dir)?);
    }
    path.push(name);
    Ok(path.to_string_lossy().into_owned())
}

impl LineTable {
    /// The rows of code in `[start, start + size)`, consecutive repeats of the same line
    /// and file dropped.
    pub(crate) fn rows_in(&self, start: u64, size: u64) -> Vec<LineRow> {
        let end = start.saturating_add(size);
        let first = self.rows.partition_point(|r| r.address < start);
        let mut out: Vec<LineRow> = Vec::new();
        for row in self.rows.iter().skip(first).take_while(|r| r.address < end) {
            let repeat = out
                .last()
                .is_some_and(|last| last.line == row.line && last.file == row.file);
            if !repeat && row.line != 0 {
                out.push(*row);
            }
        }
        out
    }
}
