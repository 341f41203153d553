//! The pre-scan: from the objects alone, decide where every section goes, which symbols
//! need GOT slots and stubs, and how big each segment is — before any memory is asked for.
//! Linking then only copies, computes and writes.

use crate::arch::reloc::Pair;
use crate::arch::Arch;
use crate::bits::align_up;
use crate::elf::{Object, Rela, Symbol};
use crate::error::{Error, Location, Name, RelocProblem, Result};
use crate::memory::{Layout, SegmentRequest};
use heapless::Vec;
use object::elf::{self, RelocationType};

// Capacities: a kernel has tens of symbols and sections, a batch of 64 kernels in one
// translation unit a few hundred. The whole plan stays under 100 KiB, so it fits on the
// stack of a small embedded program.

/// Most objects linked into one image.
pub const MAX_OBJECTS: usize = 32;
/// Most section headers across all objects of one image.
pub const MAX_SECTIONS: usize = 1024;
/// Most symbols across all objects of one image.
pub const MAX_SYMBOLS: usize = 2048;
/// Most HI/LO relocation pairs (RISC-V PC-relative addressing) in one image.
pub const MAX_PAIRS: usize = 1024;
/// Largest image elfjit lays out (1 GiB): far beyond any kernel, well inside every
/// architecture's PC-relative reach within the image.
pub const MAX_IMAGE_SIZE: u64 = 1 << 30;

/// Size of a GOT slot (all supported architectures are 64-bit).
pub const GOT_SLOT_SIZE: u64 = 8;

/// "No slot" marker in the symbol table.
const NONE: u32 = u32::MAX;

pub use crate::memory::{Segment, SegmentKind};

/// Where one section of one object goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SectionPlace {
    /// Loaded into the image (SHF_ALLOC); otherwise the other fields are meaningless.
    pub loaded: bool,
    /// Zero-filled (`SHT_NOBITS`) rather than copied.
    pub zeroed: bool,
    pub segment: SegmentKind,
    /// Offset from the start of the image laid out contiguously at the plan's page size
    /// ([`Plan::segment`]); what [`SliceBackend`](crate::SliceBackend) uses.
    pub offset: u64,
    /// Offset from the start of its segment, wherever a backend puts that segment.
    pub segment_offset: u64,
    pub size: u64,
}

const NOT_LOADED: SectionPlace = SectionPlace {
    loaded: false,
    zeroed: false,
    segment: SegmentKind::ReadOnly,
    offset: 0,
    segment_offset: 0,
    size: 0,
};

/// What a symbol table entry refers to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Definition {
    /// The null symbol, or one no loaded relocation can use: address 0.
    Nothing,
    /// In a loaded section (flat section index), at `value` from its start.
    InSection { section: u32, value: u64 },
    /// An absolute value.
    Absolute(u64),
    /// A COMMON symbol placed at this offset of the data segment.
    Common { offset: u64 },
    /// In a section that is not loaded (debug info): relocations against it are errors.
    Unloaded,
    /// Provided from outside the image (the resolver).
    External { weak: bool },
    /// The same symbol as another entry (flat index): a cross-object reference or a
    /// repeated external.
    Alias(u32),
    /// Defined by the linker at an offset from the GOT's first byte.
    GotRelative(i64),
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct SymbolEntry {
    pub def: Definition,
    pub got_slot: u32,
    pub stub: u32,
    pub referenced: bool,
    /// `st_other` of the definition.
    pub other: u8,
    /// `st_size` of the definition.
    pub size: u64,
    /// Filled by the linker.
    pub address: u64,
}

/// The high half of a relocation pair, recorded so that its low halves can find it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct HiEntry {
    /// Flat index of the section holding the high half's place.
    pub section: u32,
    pub offset: u64,
    pub r_type: RelocationType,
    /// Canonical flat symbol index of the high half's target.
    pub symbol: u32,
    pub addend: i64,
}

#[derive(Clone, Copy)]
pub(crate) struct ObjectEntry<'a> {
    pub object: Object<'a>,
    pub section_base: u32,
    pub symbol_base: u32,
}

/// The complete layout of an image, computed from its objects before memory is allocated.
pub struct Plan<'a> {
    pub(crate) arch: Arch,
    pub(crate) page_size: u64,
    pub(crate) objects: Vec<ObjectEntry<'a>, MAX_OBJECTS>,
    pub(crate) sections: Vec<SectionPlace, MAX_SECTIONS>,
    pub(crate) symbols: Vec<SymbolEntry, MAX_SYMBOLS>,
    /// What each segment needs, wherever a backend places it.
    pub(crate) layout: Layout,
    /// The segments laid out contiguously on `page_size` pages.
    pub(crate) segments: [Segment; 3],
    /// Offset of the GOT in the read-only segment.
    pub(crate) got_offset: u64,
    pub(crate) got_slots: u32,
    /// Offset of the first stub in the code segment.
    pub(crate) stub_offset: u64,
    pub(crate) stubs: u32,
    pub(crate) image_size: u64,
    pub(crate) relocations: u64,
    /// High halves of pairs, in relocation order.
    pub(crate) his: Vec<HiEntry, MAX_PAIRS>,
    /// For each low half, in relocation order, the index of its high half in `his`.
    pub(crate) lo_links: Vec<u32, MAX_PAIRS>,
}

/// The end of one segment while sections are placed in it, and the largest alignment asked
/// of it so far.
#[derive(Clone, Copy, Debug)]
struct Fill {
    end: u64,
    align: u64,
}

impl Fill {
    const EMPTY: Fill = Fill { end: 0, align: 1 };

    /// Reserves `size` bytes aligned to `align` at the end of the segment; returns their
    /// offset from the segment's start.
    fn reserve(&mut self, size: u64, align: u64) -> Result<u64> {
        let start = align_up(self.end, align).ok_or(Error::ImageTooLarge { size: self.end })?;
        let new_end = start
            .checked_add(size)
            .ok_or(Error::ImageTooLarge { size: start })?;
        if new_end > MAX_IMAGE_SIZE {
            return Err(Error::ImageTooLarge { size: new_end });
        }
        self.end = new_end;
        self.align = self.align.max(align);
        Ok(start)
    }

    fn request(self) -> SegmentRequest {
        SegmentRequest {
            size: self.end,
            align: self.align,
        }
    }
}

/// Zero bytes the image keeps after a loaded section of this name: 4 after `.eh_frame`,
/// the terminator an unwinder walks the section to (libgcc's `__register_frame` takes a
/// whole section; a relocatable object's `.eh_frame` has none, the static linker adds it).
pub(crate) fn terminator_size(name: &[u8]) -> u64 {
    if name == b".eh_frame" {
        4
    } else {
        0
    }
}

fn unsupported(object: &Object<'_>, index: usize, what: &'static str) -> Error {
    Error::UnsupportedSection {
        section: object.section_name(index),
        what,
    }
}

impl<'a> Plan<'a> {
    /// Plans one image from `objects` (all of one architecture), with segments aligned to
    /// `page_size` (a power of two, the target's page size).
    ///
    /// A plan is large (its tables have fixed capacities, about 200 KB); returning one by
    /// value copies it. Callers on a hot path build it in place instead:
    /// [`Plan::empty`] then [`Plan::replan`].
    pub fn new(objects: &[&'a [u8]], page_size: u64) -> Result<Plan<'a>> {
        let mut plan = Plan::empty();
        plan.replan(objects, page_size)?;
        Ok(plan)
    }

    /// A plan of nothing, to be filled in place by [`Plan::replan`]. Cheap: only the
    /// tables' lengths are written.
    pub const fn empty() -> Plan<'a> {
        const NO_SEGMENT: Segment = Segment {
            offset: 0,
            size: 0,
            mapped: 0,
        };
        Plan {
            arch: Arch::X86_64,
            page_size: 0,
            objects: Vec::new(),
            sections: Vec::new(),
            symbols: Vec::new(),
            layout: Layout::new([SegmentRequest { size: 0, align: 1 }; 3]),
            segments: [NO_SEGMENT; 3],
            got_offset: 0,
            got_slots: 0,
            stub_offset: 0,
            stubs: 0,
            image_size: 0,
            relocations: 0,
            his: Vec::new(),
            lo_links: Vec::new(),
        }
    }

    /// Plans `objects` into this value, as [`Plan::new`] does, replacing whatever it held.
    /// On an error the plan is left empty or partly filled and must not be linked.
    pub fn replan(&mut self, objects: &[&'a [u8]], page_size: u64) -> Result<()> {
        self.objects.clear();
        self.sections.clear();
        self.symbols.clear();
        self.his.clear();
        self.lo_links.clear();
        self.layout = Layout::default();
        self.segments = [Segment::default(); 3];
        self.got_offset = 0;
        self.got_slots = 0;
        self.stub_offset = 0;
        self.stubs = 0;
        self.image_size = 0;
        self.relocations = 0;
        if !page_size.is_power_of_two() || page_size > MAX_IMAGE_SIZE {
            return Err(Error::NotSupported {
                what: "page size",
                value: page_size,
            });
        }
        let (mut section_base, mut symbol_base) = (0u32, 0u32);
        for bytes in objects {
            let object = Object::parse(bytes)?;
            self.objects
                .push(ObjectEntry {
                    object,
                    section_base,
                    symbol_base,
                })
                .map_err(|_| Error::CapacityExceeded {
                    table: "objects",
                    capacity: MAX_OBJECTS,
                })?;
            section_base = section_base.saturating_add(object.section_count() as u32);
            symbol_base = symbol_base.saturating_add(object.symbol_count() as u32);
        }
        let first = self.objects.first().ok_or(Error::NotSupported {
            what: "empty object list",
            value: 0,
        })?;
        let arch = first.object.arch();
        if let Some(other) = self.objects.iter().find(|o| o.object.arch() != arch) {
            return Err(Error::MixedArchitectures {
                first: arch,
                other: other.object.arch(),
            });
        }
        for entry in self.objects.iter() {
            arch.check_flags(entry.object.flags())?;
        }
        self.arch = arch;
        self.page_size = page_size;
        let plan = self;
        // Segment-relative ends while sections are placed.
        let mut ends = [Fill::EMPTY; 3];
        plan.place_sections(&mut ends)?;
        plan.collect_symbols(&mut ends)?;
        plan.scan_relocations()?;
        plan.finish_layout(&mut ends)?;
        Ok(())
    }

    fn place_sections(&mut self, ends: &mut [Fill; 3]) -> Result<()> {
        for entry in self.objects.clone().iter() {
            let object = &entry.object;
            for index in 0..object.section_count() {
                let section = object.section(index)?;
                let place = Self::place_section(self.arch, object, index, ends, &section)?;
                self.sections
                    .push(place)
                    .map_err(|_| Error::CapacityExceeded {
                        table: "sections",
                        capacity: MAX_SECTIONS,
                    })?;
            }
        }
        Ok(())
    }

    fn place_section(
        arch: Arch,
        object: &Object<'_>,
        index: usize,
        ends: &mut [Fill; 3],
        section: &crate::elf::Section<'_>,
    ) -> Result<SectionPlace> {
        let flags = section.flags;
        let name = section.name;
        match section.kind {
            elf::SHT_REL => {
                let target = object.section(section.info as usize)?;
                if target.is_alloc() {
                    return Err(unsupported(
                        object,
                        index,
                        "SHT_REL relocations without addends",
                    ));
                }
            }
            elf::SHT_INIT_ARRAY | elf::SHT_FINI_ARRAY | elf::SHT_PREINIT_ARRAY => {
                return Err(unsupported(object, index, "constructors or destructors"));
            }
            _ => {}
        }
        if !section.is_alloc() {
            return Ok(NOT_LOADED);
        }
        if name.starts_with(b".ctors") || name.starts_with(b".dtors") {
            return Err(unsupported(object, index, "constructors or destructors"));
        }
        if flags.contains(elf::SHF_TLS) {
            return Err(unsupported(object, index, "thread-local storage"));
        }
        let zeroed = match section.kind {
            elf::SHT_NOBITS => true,
            elf::SHT_PROGBITS | elf::SHT_NOTE => false,
            kind if arch.is_loadable_type(kind) => false,
            _ => {
                return Err(unsupported(
                    object,
                    index,
                    "an allocated section type elfjit does not know",
                ))
            }
        };
        let write = flags.contains(elf::SHF_WRITE);
        let exec = flags.contains(elf::SHF_EXECINSTR);
        let segment = match (write, exec) {
            (true, true) => return Err(unsupported(object, index, "writable code (W+X)")),
            (false, true) => SegmentKind::Code,
            (true, false) => SegmentKind::Data,
            (false, false) => SegmentKind::ReadOnly,
        };
        let end = ends
            .get_mut(segment.index())
            .ok_or(Error::ImageTooLarge { size: 0 })?;
        let reserved = section
            .size
            .checked_add(terminator_size(name))
            .ok_or(Error::ImageTooLarge { size: section.size })?;
        let offset = end.reserve(reserved, section.align)?;
        Ok(SectionPlace {
            loaded: true,
            zeroed,
            segment,
            offset,
            segment_offset: offset,
            size: section.size,
        })
    }

    fn collect_symbols(&mut self, ends: &mut [Fill; 3]) -> Result<()> {
        for entry in self.objects.clone().iter() {
            let object = &entry.object;
            for index in 0..object.symbol_count() {
                let sym = object.symbol(index)?;
                let def = self.define(entry, index, &sym, ends)?;
                self.symbols
                    .push(SymbolEntry {
                        def,
                        got_slot: NONE,
                        stub: NONE,
                        referenced: false,
                        other: sym.other,
                        size: sym.size,
                        address: 0,
                    })
                    .map_err(|_| Error::CapacityExceeded {
                        table: "symbols",
                        capacity: MAX_SYMBOLS,
                    })?;
            }
        }
        // Undefined symbols: another object's global definition, a linker-defined name, a
        // repeat of an earlier external (one GOT slot / stub per name), or a new external.
        for (obj_index, entry) in self.objects.clone().iter().enumerate() {
            for index in 0..entry.object.symbol_count() {
                let flat = entry.symbol_base as usize + index;
                if !matches!(self.symbol_def(flat), Some(Definition::External { .. })) {
                    continue;
                }
                let name = entry.object.symbol(index)?.name;
                if let Some(target) = self.find_definition(name, obj_index, flat)? {
                    if let Some(s) = self.symbols.get_mut(flat) {
                        s.def = target;
                    }
                }
            }
        }
        Ok(())
    }

    fn define(
        &self,
        entry: &ObjectEntry<'a>,
        index: usize,
        sym: &Symbol<'a>,
        ends: &mut [Fill; 3],
    ) -> Result<Definition> {
        if index == 0 {
            return Ok(Definition::Nothing);
        }
        Ok(match sym.shndx {
            elf::SHN_UNDEF => {
                if sym.name.is_empty() {
                    Definition::Nothing
                } else {
                    Definition::External {
                        weak: sym.bind == elf::STB_WEAK,
                    }
                }
            }
            elf::SHN_ABS => Definition::Absolute(sym.value),
            elf::SHN_COMMON => {
                // For COMMON symbols st_value is the alignment.
                let align = sym.value.max(1);
                if !align.is_power_of_two() || align > self.page_size {
                    return Err(Error::Malformed {
                        what: "COMMON symbol alignment",
                        at: Location::Symbol(index as u32),
                    });
                }
                let end = ends
                    .get_mut(SegmentKind::Data.index())
                    .ok_or(Error::ImageTooLarge { size: 0 })?;
                Definition::Common {
                    offset: end.reserve(sym.size, align)?,
                }
            }
            shndx => {
                let flat = entry.section_base as usize + usize::from(shndx.0);
                match self.sections.get(flat) {
                    Some(place) if place.loaded => Definition::InSection {
                        section: flat as u32,
                        value: sym.value,
                    },
                    _ => Definition::Unloaded,
                }
            }
        })
    }

    /// Resolves an undefined name within the image, if anything here defines it.
    fn find_definition(
        &self,
        name: &[u8],
        obj_index: usize,
        flat: usize,
    ) -> Result<Option<Definition>> {
        if let Some(bias) = self.arch.linker_defined(name) {
            return Ok(Some(Definition::GotRelative(bias)));
        }
        for (other_index, other) in self.objects.iter().enumerate() {
            if other_index == obj_index {
                continue;
            }
            for index in 1..other.object.symbol_count() {
                let sym = other.object.symbol(index)?;
                if sym.is_defined() && sym.is_global() && sym.name == name {
                    return Ok(Some(Definition::Alias(other.symbol_base + index as u32)));
                }
            }
        }
        // An earlier external of the same name becomes the one both refer to.
        for entry in self.objects.iter() {
            for index in 1..entry.object.symbol_count() {
                let earlier = entry.symbol_base as usize + index;
                if earlier >= flat {
                    return Ok(None);
                }
                if matches!(self.symbol_def(earlier), Some(Definition::External { .. }))
                    && entry.object.symbol(index)?.name == name
                {
                    return Ok(Some(Definition::Alias(earlier as u32)));
                }
            }
        }
        Ok(None)
    }

    pub(crate) fn symbol_def(&self, flat: usize) -> Option<Definition> {
        self.symbols.get(flat).map(|s| s.def)
    }

    /// The entry a reference to `flat` really uses (aliases followed; they never chain).
    pub(crate) fn canonical(&self, flat: usize) -> usize {
        match self.symbol_def(flat) {
            Some(Definition::Alias(target)) => target as usize,
            _ => flat,
        }
    }

    /// Every loaded relocation section: (object index, rela section, target section).
    pub(crate) fn relocation_sections(&self) -> impl Iterator<Item = (usize, usize, usize)> + '_ {
        self.objects
            .iter()
            .enumerate()
            .flat_map(move |(obj, entry)| {
                (0..entry.object.section_count()).filter_map(move |index| {
                    let section = entry.object.section(index).ok()?;
                    if section.kind != elf::SHT_RELA {
                        return None;
                    }
                    let target = section.info as usize;
                    let place = self.sections.get(entry.section_base as usize + target)?;
                    place.loaded.then_some((obj, index, target))
                })
            })
    }

    fn scan_relocations(&mut self) -> Result<()> {
        let mut count = 0u64;
        let sections: Vec<(usize, usize, usize), MAX_SECTIONS> =
            self.relocation_sections().collect();
        if self.arch.has_pairs() {
            self.collect_high_halves(&sections)?;
        }
        for &(obj, rela_index, target) in sections.iter() {
            let entry = *self.objects.get(obj).ok_or(Error::Malformed {
                what: "object index",
                at: Location::Section(rela_index as u32),
            })?;
            let place = *self
                .sections
                .get(entry.section_base as usize + target)
                .ok_or(Error::Malformed {
                    what: "relocation section's target section",
                    at: Location::Section(rela_index as u32),
                })?;
            for (index, rela) in entry.object.relocations(rela_index)?.enumerate() {
                count += 1;
                let at = Location::Relocation {
                    section: rela_index as u32,
                    index: index as u32,
                };
                self.scan_one(obj, &entry, target, &place, &rela, at)?;
            }
        }
        self.relocations = count;
        Ok(())
    }

    /// Records every high half of a pair, so low halves anywhere can refer to it.
    fn collect_high_halves(&mut self, sections: &[(usize, usize, usize)]) -> Result<()> {
        for &(obj, rela_index, target) in sections {
            let entry = *self.objects.get(obj).ok_or(Error::Malformed {
                what: "object index",
                at: Location::Section(rela_index as u32),
            })?;
            for rela in entry.object.relocations(rela_index)? {
                let is_hi = self
                    .arch
                    .classify(rela.r_type)
                    .is_some_and(|c| c.pair == Pair::Hi);
                if !is_hi {
                    continue;
                }
                let symbol =
                    self.canonical(entry.symbol_base as usize + rela.symbol as usize) as u32;
                self.his
                    .push(HiEntry {
                        section: entry.section_base + target as u32,
                        offset: rela.offset,
                        r_type: rela.r_type,
                        symbol,
                        addend: rela.addend,
                    })
                    .map_err(|_| Error::CapacityExceeded {
                        table: "HI/LO relocation pairs",
                        capacity: MAX_PAIRS,
                    })?;
            }
        }
        Ok(())
    }

    /// Finds the high half whose place the low half's symbol labels.
    fn link_low_half(
        &mut self,
        obj: usize,
        entry: &ObjectEntry<'a>,
        target: usize,
        rela: &Rela,
    ) -> Result<()> {
        let label = entry.symbol_base as usize + rela.symbol as usize;
        let found = match self.symbol_def(label) {
            Some(Definition::InSection { section, value }) => self
                .his
                .iter()
                .position(|hi| hi.section == section && hi.offset == value),
            _ => None,
        };
        let index = found.ok_or_else(|| {
            let problem = RelocProblem::Unpaired;
            Error::Relocation(entry.object.reloc_error(obj, target, rela, problem))
        })?;
        self.lo_links
            .push(index as u32)
            .map_err(|_| Error::CapacityExceeded {
                table: "HI/LO relocation pairs",
                capacity: MAX_PAIRS,
            })
    }

    fn scan_one(
        &mut self,
        obj: usize,
        entry: &ObjectEntry<'a>,
        target: usize,
        place: &SectionPlace,
        rela: &Rela,
        at: Location,
    ) -> Result<()> {
        let object = &entry.object;
        let refuse = |problem| Error::Relocation(object.reloc_error(obj, target, rela, problem));
        let class = self
            .arch
            .classify(rela.r_type)
            .ok_or_else(|| refuse(RelocProblem::Unsupported))?;
        if class.skip {
            return Ok(());
        }
        let in_bounds = rela
            .offset
            .checked_add(u64::from(class.width))
            .is_some_and(|end| end <= place.size);
        if !in_bounds || place.zeroed {
            return Err(refuse(RelocProblem::OutsideSection {
                width: class.width,
                size: if place.zeroed { 0 } else { place.size },
            }));
        }
        if rela.symbol as usize >= object.symbol_count() {
            return Err(Error::Malformed {
                what: "relocation's symbol index out of range",
                at,
            });
        }
        if class.pair == Pair::Lo {
            // The low half's symbol is a label, not its target: nothing else to plan.
            return self.link_low_half(obj, entry, target, rela);
        }
        let flat = self.canonical(entry.symbol_base as usize + rela.symbol as usize);
        let def = self.symbol_def(flat);
        if def == Some(Definition::Unloaded) {
            return Err(Error::UnsupportedSection {
                section: object.section_name(target),
                what: "a relocation against a symbol in a section that is not loaded",
            });
        }
        let external = matches!(def, Some(Definition::External { .. }));
        let (mut got_slots, mut stubs) = (self.got_slots, self.stubs);
        let symbol = self.symbols.get_mut(flat).ok_or(Error::Malformed {
            what: "relocation's symbol index out of range",
            at,
        })?;
        symbol.referenced = true;
        if class.got && symbol.got_slot == NONE {
            symbol.got_slot = got_slots;
            got_slots += 1;
        }
        if class.call && external && symbol.stub == NONE {
            symbol.stub = stubs;
            stubs += 1;
            if self.arch.stub_uses_got() && symbol.got_slot == NONE {
                symbol.got_slot = got_slots;
                got_slots += 1;
            }
        }
        self.got_slots = got_slots;
        self.stubs = stubs;
        Ok(())
    }

    fn finish_layout(&mut self, ends: &mut [Fill; 3]) -> Result<()> {
        let [code, read_only, data] = ends;
        self.stub_offset = code.reserve(u64::from(self.stubs) * self.arch.stub_size(), 16)?;
        // `_GLOBAL_OFFSET_TABLE_` and `.TOC.` are defined from the GOT's address, so a GOT
        // they refer to takes room even with no slots: an empty segment has no address.
        let got_named = self
            .symbols
            .iter()
            .any(|s| s.referenced && matches!(s.def, Definition::GotRelative(_)));
        let got_size = u64::from(self.got_slots) * GOT_SLOT_SIZE;
        let got_size = if got_named {
            got_size.max(GOT_SLOT_SIZE)
        } else {
            got_size
        };
        self.got_offset = read_only.reserve(got_size, GOT_SLOT_SIZE)?;
        self.layout = Layout::new([code.request(), read_only.request(), data.request()]);
        let (segments, size) = self
            .layout
            .contiguous(self.page_size)
            .ok_or(Error::ImageTooLarge { size: u64::MAX })?;
        if size > MAX_IMAGE_SIZE {
            return Err(Error::ImageTooLarge { size });
        }
        self.segments = segments;
        self.image_size = size;
        for place in self.sections.iter_mut().filter(|p| p.loaded) {
            let start = segments
                .get(place.segment.index())
                .map_or(0, |s: &Segment| s.offset);
            place.offset = start + place.segment_offset;
        }
        Ok(())
    }

    /// The architecture of the objects.
    pub fn arch(&self) -> Arch {
        self.arch
    }

    /// The page size segments are aligned to.
    pub fn page_size(&self) -> u64 {
        self.page_size
    }

    /// Total bytes of the image laid out contiguously on the plan's pages
    /// ([`Plan::segment`]): the buffer a [`SliceBackend`](crate::SliceBackend) needs.
    pub fn image_size(&self) -> u64 {
        self.image_size
    }

    /// What each segment needs (size and alignment): what the plan asks a backend for.
    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// A segment's place in the image laid out contiguously on the plan's pages.
    pub fn segment(&self, kind: SegmentKind) -> Segment {
        self.segments.get(kind.index()).copied().unwrap_or_default()
    }

    /// Number of GOT slots and the GOT's offset in the contiguous image.
    pub fn got(&self) -> (u32, u64) {
        let start = self.segment(SegmentKind::ReadOnly).offset;
        (self.got_slots, start + self.got_offset)
    }

    /// Number of stubs and the offset of the first in the contiguous image.
    pub fn stubs(&self) -> (u32, u64) {
        let start = self.segment(SegmentKind::Code).offset;
        (self.stubs, start + self.stub_offset)
    }

    /// Total relocation entries in loaded sections.
    pub fn relocation_count(&self) -> u64 {
        self.relocations
    }

    /// The objects, in link order.
    pub fn objects(&self) -> impl Iterator<Item = &Object<'a>> + '_ {
        self.objects.iter().map(|e| &e.object)
    }

    /// Where section `index` of object `object` goes.
    pub fn section_place(&self, object: usize, index: usize) -> Option<SectionPlace> {
        let entry = self.objects.get(object)?;
        self.sections
            .get(entry.section_base as usize + index)
            .copied()
    }

    /// The GOT slot and stub numbers planned for symbol `index` of object `object`.
    pub fn symbol_slots(&self, object: usize, index: usize) -> (Option<u32>, Option<u32>) {
        let Some(entry) = self.objects.get(object) else {
            return (None, None);
        };
        let flat = self.canonical(entry.symbol_base as usize + index);
        match self.symbols.get(flat) {
            Some(s) => (
                (s.got_slot != NONE).then_some(s.got_slot),
                (s.stub != NONE).then_some(s.stub),
            ),
            None => (None, None),
        }
    }

    /// Section `index` of object `object`'s name, for messages.
    pub fn section_name(&self, object: usize, index: usize) -> Name {
        self.objects
            .get(object)
            .map(|e| e.object.section_name(index))
            .unwrap_or(Name::new(b"?"))
    }
}
