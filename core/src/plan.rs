//! The pre-scan: from the objects alone, decide where every section goes, what every
//! symbol binds to, which symbols need GOT slots, stubs and external address slots, and how
//! big each segment is — before any memory is asked for. Linking then only copies,
//! computes and writes, and never changes the plan: one plan links as often as wanted.
//!
//! A plan's tables are sized to its input. They live in storage the caller lends
//! ([`PlanStorage`], e.g. static buffers; [`PlanSizes::count`] says how much) or, with the
//! `alloc` feature, in allocations of exactly the size needed (`Plan::new`).

use crate::arch::reloc::{Class, Pair};
use crate::arch::Arch;
use crate::bits::align_up;
use crate::elf::{Object, Rela, SymbolHead};
use crate::error::{Error, Location, Name, RelocError, RelocProblem, Result};
use crate::memory::{Layout, SegmentRequest};
use crate::names::{self, NameKey, NameSlot};
use crate::table::{Table, TableIndex, View};
use object::elf::{self, RelocationType};

pub use crate::memory::{Segment, SegmentKind};
pub use crate::names::NameEntry;

/// Largest image elfjit lays out (1 GiB, all segments together). It bounds what an object
/// can make a backend allocate — a `.bss` of 2^40 bytes is refused here, before any memory
/// is asked for — and keeps every offset and size of the plan far from overflowing.
///
/// It is not a reach guarantee: a PC-relative branch may reach less than this
/// (ppc64le `REL24` ±32 MiB; aarch64 and loongarch64 `B26` ±128 MiB). Every range-limited
/// relocation is checked when it is applied, so code too far from its target is a
/// relocation error, never wrong code.
pub const MAX_IMAGE_SIZE: u64 = 1 << 30;

/// Size of a GOT slot (all supported architectures are 64-bit).
pub const GOT_SLOT_SIZE: u64 = 8;

// Declared with the tables, since the name index (`names`) needs them too.
pub(crate) use crate::table::{ObjectIndex, SymbolIndex};

index_type! {
    /// A section of the image: its position among all objects' section headers.
    pub(crate) struct SectionIndex;
}
index_type! {
    /// A GOT slot: its position in the GOT (slot `n` is `n * 8` bytes from its start).
    pub struct GotSlot;
}
index_type! {
    /// A far-call stub: its position among the stubs.
    pub struct StubIndex;
}

impl GotSlot {
    /// The slot's position in the GOT.
    pub fn index(self) -> usize {
        self.position()
    }

    /// The slot's offset from the GOT's first byte.
    pub(crate) fn offset(self) -> u64 {
        u64::from(self) * GOT_SLOT_SIZE
    }
}

impl StubIndex {
    /// The stub's position among the stubs.
    pub fn index(self) -> usize {
        self.position()
    }

    /// The stub's offset from the first stub, for stubs of `stub_size` bytes.
    pub(crate) fn offset(self, stub_size: u64) -> u64 {
        u64::from(self) * stub_size
    }
}
index_type! {
    /// The high half of a relocation pair: its position in the table of high halves.
    pub(crate) struct PairIndex;
}
index_type! {
    /// A low half of a relocation pair: its position in relocation order.
    pub(crate) struct LowIndex;
}
index_type! {
    /// A referenced external symbol: its address's position in the linker's scratch.
    pub(crate) struct ExternalSlot;
}

/// One object to link, with the name relocation errors call it by (a file or kernel name).
#[derive(Clone, Copy, Debug)]
pub struct Input<'a> {
    pub name: &'a str,
    pub bytes: &'a [u8],
}

/// The objects of one link, named or not.
#[derive(Clone, Copy)]
enum Inputs<'o, 'a> {
    Plain(&'o [&'a [u8]]),
    Named(&'o [Input<'a>]),
}

impl<'a> Inputs<'_, 'a> {
    fn len(self) -> usize {
        match self {
            Inputs::Plain(objects) => objects.len(),
            Inputs::Named(objects) => objects.len(),
        }
    }

    /// Object `index`: its name, if given, and its bytes.
    fn get(self, index: usize) -> Option<(Option<&'a str>, &'a [u8])> {
        match self {
            Inputs::Plain(objects) => objects.get(index).map(|&bytes| (None, bytes)),
            Inputs::Named(objects) => objects.get(index).map(|i| (Some(i.name), i.bytes)),
        }
    }
}

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

impl SectionPlace {
    /// A section that is not loaded; also what caller storage is filled with.
    pub const NOT_LOADED: SectionPlace = SectionPlace {
        loaded: false,
        zeroed: false,
        segment: SegmentKind::ReadOnly,
        offset: 0,
        segment_offset: 0,
        size: 0,
    };
}

/// What a symbol table entry refers to. The variants a plain reference needs nothing for
/// come first, so that [`SymbolEntry::has_address`] is one comparison.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Definition {
    /// The null symbol, or one no loaded relocation can use: address 0.
    Nothing,
    /// An absolute value.
    Absolute(u64),
    /// In a loaded section: `offset` bytes into `segment`.
    Placed { segment: SegmentKind, offset: u64 },
    /// A COMMON symbol: `offset` bytes into the data segment (zero-filled by the linker
    /// unless the backend's memory already reads as zero).
    Common { offset: u64 },
    /// In a section that is not loaded (debug info): relocations against it are errors.
    Unloaded,
    /// Defined by the linker at an offset from the GOT's first byte.
    GotRelative(i64),
    /// Provided from outside the image (the resolver), into `slot` of the linker's scratch
    /// once a relocation refers to it.
    External {
        weak: bool,
        slot: Option<ExternalSlot>,
    },
    /// The same symbol as another entry: a cross-object reference or a repeated external.
    /// Never points at another alias.
    Alias(SymbolIndex),
}

/// What a symbol's address is counted from, once the plan is made: the link computes it
/// as that base's target address plus an offset, with no case analysis per relocation.
/// The discriminants are positions in a link's table of base addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Base {
    /// Address 0 plus the offset: absolute symbols, and symbols with no address.
    Zero = 0,
    Code = 1,
    ReadOnly = 2,
    Data = 3,
    /// The GOT's first byte (linker-defined GOT symbols).
    Got = 4,
    /// The resolved address in the externals scratch at the offset's position.
    External = 5,
}

impl Base {
    /// Every base but [`Base::External`], in the order [`BaseOffset::base_index`] counts.
    pub(crate) const COUNT: usize = 5;

    fn of(segment: SegmentKind) -> Base {
        match segment {
            SegmentKind::Code => Base::Code,
            SegmentKind::ReadOnly => Base::ReadOnly,
            SegmentKind::Data => Base::Data,
        }
    }
}

/// Where a symbol's address comes from: `offset` bytes past `base`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct BaseOffset {
    pub base: Base,
    pub offset: u64,
}

impl BaseOffset {
    const NOWHERE: BaseOffset = BaseOffset {
        base: Base::Zero,
        offset: 0,
    };

    /// The position of `base` in a table of base addresses (`None` for an external).
    #[inline]
    pub(crate) fn base_index(self) -> Option<usize> {
        let index = self.base as usize;
        (index < Base::COUNT).then_some(index)
    }
}

/// A parsed object and where its sections and symbols start in the plan's tables.
#[derive(Clone, Copy)]
pub(crate) struct Loaded<'a> {
    pub object: Object<'a>,
    pub name: Option<&'a str>,
    first_section: usize,
    first_symbol: usize,
}

impl Loaded<'_> {
    /// The image-wide index of this object's section `index`, if it has one.
    #[inline]
    pub(crate) fn section(&self, index: usize) -> Option<SectionIndex> {
        if index >= self.object.section_count() {
            return None;
        }
        SectionIndex::from_position(self.first_section.checked_add(index)?)
    }

    /// The image-wide index of this object's symbol `index`, if it has one.
    #[inline]
    pub(crate) fn symbol(&self, index: usize) -> Option<SymbolIndex> {
        if index >= self.object.symbol_count() {
            return None;
        }
        SymbolIndex::from_position(self.first_symbol.checked_add(index)?)
    }

    /// The positions of this object's symbols in the image-wide table.
    #[inline]
    pub(crate) fn symbol_range(&self) -> core::ops::Range<usize> {
        self.first_symbol..self.first_symbol.saturating_add(self.object.symbol_count())
    }

    /// This object's entries of an image-wide symbol table, by local index.
    #[inline]
    pub(crate) fn symbols_in<'t, T>(&self, table: &'t [T]) -> &'t [T] {
        table.get(self.symbol_range()).unwrap_or(&[])
    }

    /// Every image-wide symbol index of this object with its local index.
    #[inline]
    pub(crate) fn symbols(&self) -> impl Iterator<Item = (usize, SymbolIndex)> + '_ {
        (0..self.object.symbol_count()).filter_map(|i| Some((i, self.symbol(i)?)))
    }
}

/// One entry of a plan's object table. Public only so that callers can provide storage
/// for it (the `objects` of a [`PlanStorage`]); its contents are the plan's.
#[derive(Clone, Copy)]
pub struct ObjectEntry<'a>(Option<Loaded<'a>>);

impl<'a> ObjectEntry<'a> {
    /// An empty entry, to fill caller storage with.
    pub const EMPTY: ObjectEntry<'static> = ObjectEntry(None);

    /// The object this entry holds, if it was filled.
    #[inline]
    pub(crate) fn loaded(&self) -> Option<&Loaded<'a>> {
        self.0.as_ref()
    }
}

/// One entry of a plan's symbol table (storage only, like [`ObjectEntry`]).
#[derive(Clone, Copy, Debug)]
pub struct SymbolEntry {
    pub(crate) def: Definition,
    /// Where the address comes from (for an alias, its target's), set when the plan is
    /// finished; an alias also carries its target's slots, size and `st_other`, so that a
    /// link reads one entry per relocation. A [`BaseOffset`] kept as two fields: its base
    /// then shares a word with the other small fields, and an entry is 48 bytes, not 56
    /// (the plan's scan and the link read one entry per relocation, in symbol order).
    at_base: Base,
    at_offset: u64,
    pub(crate) got: Option<GotSlot>,
    pub(crate) stub: Option<StubIndex>,
    /// `st_size` of the definition.
    pub(crate) size: u64,
    /// `st_other` of the definition.
    pub(crate) other: u8,
    /// Goes into the name index (a named global definition, or a named undefined symbol).
    indexed: bool,
}

impl SymbolEntry {
    /// Where the address comes from.
    #[inline]
    pub(crate) fn at(&self) -> BaseOffset {
        BaseOffset {
            base: self.at_base,
            offset: self.at_offset,
        }
    }

    #[inline]
    fn set_at(&mut self, at: BaseOffset) {
        self.at_base = at.base;
        self.at_offset = at.offset;
    }

    /// Defined here with an address (or none at all): a plain reference to it needs no
    /// GOT slot, stub or external slot.
    #[inline]
    fn has_address(&self) -> bool {
        matches!(
            self.def,
            Definition::Placed { .. }
                | Definition::Common { .. }
                | Definition::Absolute(_)
                | Definition::Nothing
        )
    }

    /// An empty entry, to fill caller storage with.
    pub const EMPTY: SymbolEntry = SymbolEntry {
        def: Definition::Nothing,
        at_base: Base::Zero,
        at_offset: 0,
        got: None,
        stub: None,
        size: 0,
        other: 0,
        indexed: false,
    };
}

/// The high half of a relocation pair (RISC-V `PCREL_HI20`), recorded so that its low
/// halves can find it (storage only, like [`ObjectEntry`]).
#[derive(Clone, Copy, Debug)]
pub struct HighHalf {
    /// The high half's place: `offset` bytes into `segment`.
    pub(crate) segment: SegmentKind,
    pub(crate) offset: u64,
    pub(crate) r_type: RelocationType,
    /// The high half's target.
    pub(crate) symbol: Option<SymbolIndex>,
    pub(crate) addend: i64,
}

impl HighHalf {
    /// An empty entry, to fill caller storage with.
    pub const EMPTY: HighHalf = HighHalf {
        segment: SegmentKind::Code,
        offset: 0,
        r_type: RelocationType(0),
        symbol: None,
        addend: 0,
    };

    fn place(&self) -> (SegmentKind, u64) {
        (self.segment, self.offset)
    }
}

/// A low half of a relocation pair: the high half it belongs to (storage only, like
/// [`ObjectEntry`]).
#[derive(Clone, Copy, Debug)]
pub struct LowHalf(pub(crate) Option<PairIndex>);

impl LowHalf {
    /// An empty entry, to fill caller storage with.
    pub const EMPTY: LowHalf = LowHalf(None);
}

/// How many entries each table of a plan needs: what [`PlanStorage`] must provide.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PlanSizes {
    /// One per object.
    pub objects: usize,
    /// One per section header, across all objects.
    pub sections: usize,
    /// One per symbol table entry, across all objects.
    pub symbols: usize,
    /// Slots of the name index (twice the names that cross objects, to a power of two).
    pub names: usize,
    /// High halves of relocation pairs (RISC-V `PCREL_HI20`).
    pub high_halves: usize,
    /// Low halves of relocation pairs (RISC-V `PCREL_LO12_I/S`).
    pub low_halves: usize,
}

impl PlanSizes {
    /// Counts what planning `objects` needs (each is parsed; nothing is laid out).
    pub fn count(objects: &[&[u8]]) -> Result<PlanSizes> {
        PlanSizes::count_inputs(Inputs::Plain(objects))
    }

    /// [`count`](PlanSizes::count) for named objects.
    pub fn count_named(objects: &[Input<'_>]) -> Result<PlanSizes> {
        PlanSizes::count_inputs(Inputs::Named(objects))
    }

    fn count_inputs(inputs: Inputs<'_, '_>) -> Result<PlanSizes> {
        let mut sizes = PlanSizes {
            objects: inputs.len(),
            ..PlanSizes::default()
        };
        let mut names = 0usize;
        let multi = inputs.len() > 1;
        for index in 0..inputs.len() {
            let Some((_, bytes)) = inputs.get(index) else {
                continue;
            };
            let object = Object::parse(bytes)?;
            sizes.sections = grow(sizes.sections, object.section_count())?;
            sizes.symbols = grow(sizes.symbols, object.symbol_count())?;
            for symbol in 1..object.symbol_count() {
                let head = object.symbol_head(symbol)?;
                let name = needed_name(&object, symbol, &head, multi)?;
                if is_indexed(object.arch(), &head, name, multi) {
                    names = grow(names, 1)?;
                }
            }
            if object.arch().has_pairs() {
                let (high, low) = count_pairs(&object)?;
                sizes.high_halves = grow(sizes.high_halves, high)?;
                sizes.low_halves = grow(sizes.low_halves, low)?;
            }
        }
        sizes.names = names::slots_for(names).ok_or_else(|| too_many("names"))?;
        Ok(sizes)
    }
}

/// `total + more`, or an error if the tables could not be indexed.
fn grow(total: usize, more: usize) -> Result<usize> {
    total
        .checked_add(more)
        .filter(|&n| u32::try_from(n).is_ok())
        .ok_or_else(|| too_many("table entries"))
}

fn too_many(what: &'static str) -> Error {
    Error::NotSupported {
        what,
        value: u64::from(u32::MAX),
    }
}

/// The name of symbol `index` of `object` if planning reads it, else empty: an undefined
/// symbol's (what it binds to) and, when there are several objects, a global
/// definition's (the name index). Other definitions are placed by their section alone,
/// and decoding a name is a search for its end.
#[inline]
fn needed_name<'a>(
    object: &Object<'a>,
    index: usize,
    head: &SymbolHead,
    multi: bool,
) -> Result<&'a [u8]> {
    if index != 0 && (!head.is_defined() || (multi && head.is_global())) {
        object.symbol_name_bytes(index)
    } else {
        Ok(&[])
    }
}

/// Whether a symbol (not the null symbol) goes into the name index: named undefined
/// symbols (other than the ones the linker defines), and, when there are several objects,
/// named global definitions. `name` is [`needed_name`]'s.
#[inline]
fn is_indexed(arch: Arch, head: &SymbolHead, name: &[u8], multi: bool) -> bool {
    if name.is_empty() {
        return false;
    }
    if head.is_defined() {
        multi && head.is_global()
    } else {
        arch.linker_defined(name).is_none()
    }
}

/// Every relocation section of `object` whose target is loaded: (rela section, target).
pub(crate) fn relocation_sections<'o>(
    object: &'o Object<'_>,
) -> impl Iterator<Item = (usize, usize)> + 'o {
    (0..object.section_count()).filter_map(move |index| {
        let section = object.section(index).ok()?;
        if section.kind != elf::SHT_RELA {
            return None;
        }
        let target = section.info as usize;
        object
            .section(target)
            .ok()?
            .is_alloc()
            .then_some((index, target))
    })
}

/// High and low halves of pairs among `object`'s relocations (unsupported types are left
/// to the scan to report).
fn count_pairs(object: &Object<'_>) -> Result<(usize, usize)> {
    let (mut high, mut low) = (0usize, 0usize);
    for (rela, _) in relocation_sections(object) {
        for r in object.relocations(rela)? {
            match object.arch().classify(r.r_type).map(|c| c.pair) {
                Some(Pair::Hi) => high = grow(high, 1)?,
                Some(Pair::Lo) => low = grow(low, 1)?,
                _ => {}
            }
        }
    }
    Ok((high, low))
}

/// Storage a caller lends a plan: one slice per table, at least as long as
/// [`PlanSizes::count`] says (longer is fine; a shorter one is an
/// [`Error::StorageTooSmall`] naming the table and the size needed). Only the object table
/// holds borrowed data; the other tables can be static buffers reused by every link.
///
/// ```
/// use elfjit_core::plan::*;
/// let mut objects = [ObjectEntry::EMPTY; 1];
/// let mut sections = [SectionPlace::NOT_LOADED; 64];
/// let mut symbols = [SymbolEntry::EMPTY; 256];
/// let mut names = [NameEntry::EMPTY; 64];
/// let storage = PlanStorage {
///     objects: &mut objects,
///     sections: &mut sections,
///     symbols: &mut symbols,
///     names: &mut names,
///     high_halves: &mut [],
///     low_halves: &mut [],
/// };
/// let err = Plan::new_in(&[b"not an object".as_slice()], 4096, storage).err();
/// assert!(err.is_some());
/// ```
pub struct PlanStorage<'a> {
    pub objects: &'a mut [ObjectEntry<'a>],
    pub sections: &'a mut [SectionPlace],
    pub symbols: &'a mut [SymbolEntry],
    pub names: &'a mut [NameEntry],
    pub high_halves: &'a mut [HighHalf],
    pub low_halves: &'a mut [LowHalf],
}

/// With the `alloc` feature: every table but the object table, allocated once at given
/// sizes and lent to plan after plan (no allocation per plan).
#[cfg(feature = "alloc")]
pub struct PlanBuffers {
    pub sections: alloc::vec::Vec<SectionPlace>,
    pub symbols: alloc::vec::Vec<SymbolEntry>,
    pub names: alloc::vec::Vec<NameEntry>,
    pub high_halves: alloc::vec::Vec<HighHalf>,
    pub low_halves: alloc::vec::Vec<LowHalf>,
}

#[cfg(feature = "alloc")]
impl PlanBuffers {
    /// Buffers for plans that need at most `sizes` (`sizes.objects` is the caller's).
    pub fn new(sizes: PlanSizes) -> PlanBuffers {
        PlanBuffers {
            sections: alloc::vec![SectionPlace::NOT_LOADED; sizes.sections],
            symbols: alloc::vec![SymbolEntry::EMPTY; sizes.symbols],
            names: alloc::vec![NameEntry::EMPTY; sizes.names],
            high_halves: alloc::vec![HighHalf::EMPTY; sizes.high_halves],
            low_halves: alloc::vec![LowHalf::EMPTY; sizes.low_halves],
        }
    }

    /// The storage for one plan, whose object table is `objects` (one entry per object).
    pub fn lend<'a>(&'a mut self, objects: &'a mut [ObjectEntry<'a>]) -> PlanStorage<'a> {
        PlanStorage {
            objects,
            sections: &mut self.sections,
            symbols: &mut self.symbols,
            names: &mut self.names,
            high_halves: &mut self.high_halves,
            low_halves: &mut self.low_halves,
        }
    }
}

/// Gives a plan its tables as their sizes become known.
trait Provide<'a> {
    fn objects(&mut self, n: usize) -> Result<Table<'a, ObjectIndex, ObjectEntry<'a>>>;
    fn sections(&mut self, n: usize) -> Result<Table<'a, SectionIndex, SectionPlace>>;
    fn symbols(&mut self, n: usize) -> Result<Table<'a, SymbolIndex, SymbolEntry>>;
    fn names(&mut self, n: usize) -> Result<Table<'a, NameSlot, NameEntry>>;
    fn high_halves(&mut self, n: usize) -> Result<Table<'a, PairIndex, HighHalf>>;
    fn low_halves(&mut self, n: usize) -> Result<Table<'a, LowIndex, LowHalf>>;
}

impl<'a> Provide<'a> for PlanStorage<'a> {
    fn objects(&mut self, n: usize) -> Result<Table<'a, ObjectIndex, ObjectEntry<'a>>> {
        let slice = core::mem::take(&mut self.objects);
        Table::lent(slice, n, "objects", ObjectEntry::EMPTY)
    }
    fn sections(&mut self, n: usize) -> Result<Table<'a, SectionIndex, SectionPlace>> {
        let slice = core::mem::take(&mut self.sections);
        Table::lent(slice, n, "sections", SectionPlace::NOT_LOADED)
    }
    fn symbols(&mut self, n: usize) -> Result<Table<'a, SymbolIndex, SymbolEntry>> {
        let slice = core::mem::take(&mut self.symbols);
        Table::lent(slice, n, "symbols", SymbolEntry::EMPTY)
    }
    fn names(&mut self, n: usize) -> Result<Table<'a, NameSlot, NameEntry>> {
        let slice = core::mem::take(&mut self.names);
        Table::lent(slice, n, "names", NameEntry::EMPTY)
    }
    fn high_halves(&mut self, n: usize) -> Result<Table<'a, PairIndex, HighHalf>> {
        let slice = core::mem::take(&mut self.high_halves);
        Table::lent(slice, n, "high_halves", HighHalf::EMPTY)
    }
    fn low_halves(&mut self, n: usize) -> Result<Table<'a, LowIndex, LowHalf>> {
        let slice = core::mem::take(&mut self.low_halves);
        Table::lent(slice, n, "low_halves", LowHalf::EMPTY)
    }
}

/// Tables allocated at exactly the size needed.
#[cfg(feature = "alloc")]
struct Allocate;

#[cfg(feature = "alloc")]
impl<'a> Provide<'a> for Allocate {
    fn objects(&mut self, n: usize) -> Result<Table<'a, ObjectIndex, ObjectEntry<'a>>> {
        Table::allocated(n, "objects", ObjectEntry::EMPTY)
    }
    fn sections(&mut self, n: usize) -> Result<Table<'a, SectionIndex, SectionPlace>> {
        Table::allocated(n, "sections", SectionPlace::NOT_LOADED)
    }
    fn symbols(&mut self, n: usize) -> Result<Table<'a, SymbolIndex, SymbolEntry>> {
        Table::allocated(n, "symbols", SymbolEntry::EMPTY)
    }
    fn names(&mut self, n: usize) -> Result<Table<'a, NameSlot, NameEntry>> {
        Table::allocated(n, "names", NameEntry::EMPTY)
    }
    fn high_halves(&mut self, n: usize) -> Result<Table<'a, PairIndex, HighHalf>> {
        Table::allocated(n, "high_halves", HighHalf::EMPTY)
    }
    fn low_halves(&mut self, n: usize) -> Result<Table<'a, LowIndex, LowHalf>> {
        Table::allocated(n, "low_halves", LowHalf::EMPTY)
    }
}

/// What defining a symbol reads of the plan: the architecture, the page size and where
/// each section went (borrowed apart from the symbol table being written).
struct Definer<'t> {
    arch: Arch,
    page_size: u64,
    sections: View<'t, SectionIndex, SectionPlace>,
}

impl Definer<'_> {
    fn define(
        &self,
        entry: &Loaded<'_>,
        index: usize,
        sym: &SymbolHead,
        name: &[u8],
        fills: &mut Fills,
    ) -> Result<Definition> {
        if index == 0 {
            return Ok(Definition::Nothing);
        }
        Ok(match sym.shndx {
            elf::SHN_UNDEF => {
                if name.is_empty() {
                    Definition::Nothing
                } else if let Some(bias) = self.arch.linker_defined(name) {
                    Definition::GotRelative(bias)
                } else {
                    Definition::External {
                        weak: sym.bind == elf::STB_WEAK,
                        slot: None,
                    }
                }
            }
            elf::SHN_ABS => Definition::Absolute(sym.value),
            elf::SHN_COMMON => {
                // For COMMON symbols st_value is the alignment.
                let align = sym.value.max(1);
                if !align.is_power_of_two() || align > self.page_size {
                    return Err(malformed(
                        "COMMON symbol alignment",
                        Location::Symbol(position(index)),
                    ));
                }
                Definition::Common {
                    offset: fills.get(SegmentKind::Data)?.reserve(sym.size, align)?,
                }
            }
            shndx => match entry
                .section(usize::from(shndx.0))
                .and_then(|i| self.sections.get(i))
            {
                Some(place) if place.loaded => Definition::Placed {
                    segment: place.segment,
                    offset: place.segment_offset.wrapping_add(sym.value),
                },
                _ => Definition::Unloaded,
            },
        })
    }
}

/// The complete layout of an image, computed from its objects before memory is allocated.
/// Linking reads it and never changes it ([`Plan::link`](Plan::link_in)).
pub struct Plan<'a> {
    pub(crate) arch: Arch,
    pub(crate) page_size: u64,
    pub(crate) objects: Table<'a, ObjectIndex, ObjectEntry<'a>>,
    pub(crate) sections: Table<'a, SectionIndex, SectionPlace>,
    pub(crate) symbols: Table<'a, SymbolIndex, SymbolEntry>,
    names: Table<'a, NameSlot, NameEntry>,
    /// High halves of pairs, sorted by place.
    pub(crate) high_halves: Table<'a, PairIndex, HighHalf>,
    /// For each low half, in relocation order, its high half.
    pub(crate) low_halves: Table<'a, LowIndex, LowHalf>,
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
    /// Referenced external symbols (each resolved once per link).
    pub(crate) externals: u32,
    /// A relocation refers to a linker-defined GOT symbol (`_GLOBAL_OFFSET_TABLE_`).
    got_named: bool,
    pub(crate) image_size: u64,
    pub(crate) relocations: u64,
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

/// The three segments' fills while the plan is made.
struct Fills([Fill; 3]);

impl Fills {
    fn get(&mut self, kind: SegmentKind) -> Result<&mut Fill> {
        self.0
            .get_mut(kind.index())
            .ok_or(Error::ImageTooLarge { size: 0 })
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

fn malformed(what: &'static str, at: Location) -> Error {
    Error::Malformed { what, at }
}

/// A table position as a location's index (positions fit in `u32`: [`grow`] checks).
fn position(index: usize) -> u32 {
    u32::try_from(index).unwrap_or(u32::MAX)
}

impl<'a> Plan<'a> {
    /// Plans one image from `objects` (all of one architecture), with segments aligned to
    /// `page_size` (a power of two, the target's page size), into `storage`.
    pub fn new_in(
        objects: &[&'a [u8]],
        page_size: u64,
        storage: PlanStorage<'a>,
    ) -> Result<Plan<'a>> {
        Plan::build(Inputs::Plain(objects), page_size, storage)
    }

    /// [`new_in`](Plan::new_in) for named objects: relocation errors name the object.
    pub fn new_named_in(
        objects: &[Input<'a>],
        page_size: u64,
        storage: PlanStorage<'a>,
    ) -> Result<Plan<'a>> {
        Plan::build(Inputs::Named(objects), page_size, storage)
    }

    /// [`new_in`](Plan::new_in) with tables allocated at exactly the size needed.
    #[cfg(feature = "alloc")]
    pub fn new(objects: &[&'a [u8]], page_size: u64) -> Result<Plan<'a>> {
        Plan::build(Inputs::Plain(objects), page_size, Allocate)
    }

    /// [`new_named_in`](Plan::new_named_in) with tables allocated at exactly the size
    /// needed.
    #[cfg(feature = "alloc")]
    pub fn new_named(objects: &[Input<'a>], page_size: u64) -> Result<Plan<'a>> {
        Plan::build(Inputs::Named(objects), page_size, Allocate)
    }

    fn build(
        inputs: Inputs<'_, 'a>,
        page_size: u64,
        mut provide: impl Provide<'a>,
    ) -> Result<Plan<'a>> {
        if !page_size.is_power_of_two() || page_size > MAX_IMAGE_SIZE {
            return Err(Error::NotSupported {
                what: "page size",
                value: page_size,
            });
        }
        let mut objects = provide.objects(inputs.len())?;
        let (mut sections, mut symbols) = (0usize, 0usize);
        for (index, slot) in objects.entries_mut().iter_mut().enumerate() {
            let (name, bytes) = inputs.get(index).ok_or_else(|| {
                malformed("object missing from the inputs", Location::File { len: 0 })
            })?;
            let object = Object::parse(bytes)?;
            *slot = ObjectEntry(Some(Loaded {
                object,
                name,
                first_section: sections,
                first_symbol: symbols,
            }));
            sections = grow(sections, object.section_count())?;
            symbols = grow(symbols, object.symbol_count())?;
        }
        let arch = {
            let mut loaded = objects.entries().iter().filter_map(|e| e.0.as_ref());
            let first = loaded.next().ok_or(Error::NotSupported {
                what: "empty object list",
                value: 0,
            })?;
            let arch = first.object.arch();
            if let Some(other) = loaded.find(|o| o.object.arch() != arch) {
                return Err(Error::MixedArchitectures {
                    first: arch,
                    other: other.object.arch(),
                });
            }
            arch
        };
        let mut plan = Plan {
            arch,
            page_size,
            objects,
            sections: Table::empty(),
            symbols: Table::empty(),
            names: Table::empty(),
            high_halves: Table::empty(),
            low_halves: Table::empty(),
            layout: Layout::default(),
            segments: [Segment::default(); 3],
            got_offset: 0,
            got_slots: 0,
            stub_offset: 0,
            stubs: 0,
            externals: 0,
            got_named: false,
            image_size: 0,
            relocations: 0,
        };
        for (_, entry) in plan.loaded() {
            arch.check_flags(entry.object.flags())?;
        }
        let mut fills = Fills([Fill::EMPTY; 3]);
        plan.sections = provide.sections(sections)?;
        plan.place_sections(&mut fills)?;
        plan.symbols = provide.symbols(symbols)?;
        let names = plan.define_symbols(&mut fills)?;
        plan.names = provide.names(names::slots_for(names).ok_or_else(|| too_many("names"))?)?;
        plan.bind_symbols()?;
        if arch.has_pairs() {
            let (mut high, mut low) = (0, 0);
            for (_, entry) in plan.loaded() {
                let (h, l) = count_pairs(&entry.object)?;
                (high, low) = (grow(high, h)?, grow(low, l)?);
            }
            plan.high_halves = provide.high_halves(high)?;
            plan.collect_high_halves()?;
            plan.low_halves = provide.low_halves(low)?;
        }
        plan.scan_relocations()?;
        plan.finish_layout(&mut fills)?;
        Ok(plan)
    }

    /// The parsed objects, in link order, with their indices.
    pub(crate) fn loaded(&self) -> impl Iterator<Item = (ObjectIndex, &Loaded<'a>)> + '_ {
        self.objects
            .enumerate()
            .filter_map(|(index, entry)| Some((index, entry.loaded()?)))
    }

    /// Object `index`, in link order.
    pub(crate) fn object(&self, index: usize) -> Option<&Loaded<'a>> {
        self.objects
            .get(ObjectIndex::from_position(index)?)?
            .0
            .as_ref()
    }

    fn place_sections(&mut self, fills: &mut Fills) -> Result<()> {
        for index in 0..self.objects.len() {
            let Some(entry) = self.object(index).copied() else {
                continue;
            };
            for local in 0..entry.object.section_count() {
                let section = entry.object.section(local)?;
                let place = Self::place_section(self.arch, &entry.object, local, fills, &section)?;
                let slot = entry
                    .section(local)
                    .and_then(|i| self.sections.get_mut(i))
                    .ok_or_else(|| {
                        malformed("section index", Location::Section(position(local)))
                    })?;
                *slot = place;
            }
        }
        Ok(())
    }

    fn place_section(
        arch: Arch,
        object: &Object<'_>,
        index: usize,
        fills: &mut Fills,
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
            return Ok(SectionPlace::NOT_LOADED);
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
        let reserved = section
            .size
            .checked_add(terminator_size(name))
            .ok_or(Error::ImageTooLarge { size: section.size })?;
        let offset = fills.get(segment)?.reserve(reserved, section.align)?;
        Ok(SectionPlace {
            loaded: true,
            zeroed,
            segment,
            offset,
            segment_offset: offset,
            size: section.size,
        })
    }

    /// Fills the symbol table from the objects' own definitions; returns how many names go
    /// into the name index.
    fn define_symbols(&mut self, fills: &mut Fills) -> Result<usize> {
        let multi = self.objects.len() > 1;
        let mut names = 0usize;
        let definer = Definer {
            arch: self.arch,
            page_size: self.page_size,
            sections: self.sections.view(),
        };
        let slots = self.symbols.entries_mut();
        // Each object's symbols beside its slice of the table, in step: no index to
        // translate or check per symbol.
        for entry in self
            .objects
            .entries()
            .iter()
            .filter_map(ObjectEntry::loaded)
        {
            let Some(object_slots) = slots.get_mut(entry.symbol_range()) else {
                return Err(malformed(
                    "symbol index",
                    Location::Symbol(position(entry.object.symbol_count())),
                ));
            };
            for (local, slot) in object_slots.iter_mut().enumerate() {
                let sym = entry.object.symbol_head(local)?;
                let name = needed_name(&entry.object, local, &sym, multi)?;
                let indexed = local != 0 && is_indexed(definer.arch, &sym, name, multi);
                let def = definer.define(entry, local, &sym, name, fills)?;
                if indexed {
                    names = grow(names, 1)?;
                }
                *slot = SymbolEntry {
                    def,
                    at_base: Base::Zero,
                    at_offset: 0,
                    got: None,
                    stub: None,
                    size: sym.size,
                    other: sym.other,
                    indexed,
                };
            }
        }
        Ok(names)
    }

    /// Binds every undefined symbol through the name index: to a definition in another
    /// object, else to the first occurrence of its name that stayed external.
    fn bind_symbols(&mut self) -> Result<()> {
        if self.names.len() == 0 {
            return Ok(());
        }
        // Definitions first: a reference may bind to a later object's definition. A lone
        // object's definitions are not indexed (`is_indexed`): it has only references.
        let passes: &[Pass] = if self.objects.len() > 1 {
            &[Pass::Definitions, Pass::References]
        } else {
            &[Pass::References]
        };
        let Plan {
            objects,
            symbols,
            names,
            ..
        } = self;
        let slots = symbols.entries_mut();
        for &pass in passes {
            for (index, entry) in objects.enumerate() {
                let Some(entry) = entry.loaded() else {
                    continue;
                };
                let first = entry.symbol_range().start;
                for local in 0..entry.object.symbol_count() {
                    // Most symbols are not indexed: tested on the entry, in step.
                    let Some(symbol) = slots.get(first.wrapping_add(local)) else {
                        break;
                    };
                    let external = matches!(symbol.def, Definition::External { .. });
                    if !symbol.indexed || external != (pass == Pass::References) {
                        continue;
                    }
                    let flat = entry.symbol(local).ok_or_else(|| too_many("symbols"))?;
                    let name = entry.object.symbol_name_bytes(local)?;
                    let key = NameKey {
                        object: index,
                        symbol: local as u32,
                    };
                    let name_of = |key: NameKey| {
                        let owner = objects.get(key.object)?.loaded()?;
                        owner.object.symbol_name_bytes(key.symbol as usize).ok()
                    };
                    let slot =
                        names::entry(names, name, key, name_of).ok_or_else(|| too_many("names"))?;
                    if pass == Pass::Definitions {
                        slot.define(index, flat);
                        continue;
                    }
                    let bound = slot.definition_for(index).or(slot.external);
                    if bound.is_none() {
                        slot.external = Some(flat);
                    }
                    if let (Some(target), Some(alias)) = (bound, slots.get_mut(flat.position())) {
                        alias.def = Definition::Alias(target);
                    }
                }
            }
        }
        Ok(())
    }

    /// The entry a reference to `symbol` really uses (aliases followed; they never chain).
    pub(crate) fn canonical(&self, symbol: SymbolIndex) -> SymbolIndex {
        match self.symbols.get(symbol).map(|s| s.def) {
            Some(Definition::Alias(target)) => target,
            _ => symbol,
        }
    }

    /// Records every high half of a pair, sorted by place, so that each low half finds its
    /// own by binary search.
    fn collect_high_halves(&mut self) -> Result<()> {
        let mut next = 0usize;
        for index in 0..self.objects.len() {
            let Some(entry) = self.object(index).copied() else {
                continue;
            };
            for (rela_index, target) in relocation_sections(&entry.object) {
                let place = self.section_of(&entry, target)?;
                for (number, rela) in entry.object.relocations(rela_index)?.enumerate() {
                    let is_hi = self
                        .arch
                        .classify(rela.r_type)
                        .is_some_and(|c| c.pair == Pair::Hi);
                    if !is_hi {
                        continue;
                    }
                    let symbol = entry
                        .symbol(rela.symbol as usize)
                        .map(|s| self.canonical(s));
                    let slot = PairIndex::from_position(next)
                        .and_then(|i| self.high_halves.get_mut(i))
                        .ok_or_else(|| {
                            malformed(
                                "relocation pairs",
                                Location::Relocation {
                                    section: position(rela_index),
                                    index: position(number),
                                },
                            )
                        })?;
                    *slot = HighHalf {
                        segment: place.segment,
                        offset: place.segment_offset.wrapping_add(rela.offset),
                        r_type: rela.r_type,
                        symbol,
                        addend: rela.addend,
                    };
                    next += 1;
                }
            }
        }
        // Every field in the key: equal places (malformed input) still sort one way.
        self.high_halves
            .entries_mut()
            .sort_unstable_by_key(|h| (h.segment.index(), h.offset, h.r_type, h.symbol, h.addend));
        Ok(())
    }

    /// The place of `object`'s section `index`.
    fn section_of(&self, entry: &Loaded<'a>, index: usize) -> Result<SectionPlace> {
        entry
            .section(index)
            .and_then(|i| self.sections.get(i))
            .copied()
            .ok_or_else(|| malformed("section", Location::Section(position(index))))
    }

    /// The high half whose place the low half's label symbol marks.
    fn find_high_half(&self, label: SymbolIndex) -> Option<PairIndex> {
        let Some(Definition::Placed { segment, offset }) = self.symbols.get(label).map(|s| s.def)
        else {
            return None;
        };
        let key = (segment, offset);
        let his = self.high_halves.entries();
        let at = his.partition_point(|h| (h.segment.index(), h.offset) < (segment.index(), offset));
        his.get(at)
            .filter(|h| h.place() == key)
            .and_then(|_| PairIndex::from_position(at))
    }

    /// A relocation error for `rela` in section `target` of object `object`, located by
    /// the object ([`Object::reloc_error`]) and named with the name the caller gave the
    /// object ([`Input`]); S, P and the value are 0 until the linker fills them.
    pub(crate) fn reloc_error(
        &self,
        object: usize,
        target: usize,
        rela: &Rela,
        problem: RelocProblem,
    ) -> RelocError {
        match self.object(object) {
            Some(entry) => RelocError {
                object_name: entry.name.map(|n| Name::new(n.as_bytes())),
                ..entry.object.reloc_error(object, target, rela, problem)
            },
            // Not reached: every caller passes one of the plan's objects.
            None => RelocError {
                object: position(object),
                object_name: None,
                arch: self.arch,
                r_type: rela.r_type,
                name: self.arch.reloc_name(rela.r_type),
                section: Name::new(b"?"),
                offset: rela.offset,
                symbol: Name::new(b"?"),
                s: 0,
                a: rela.addend,
                p: 0,
                value: 0,
                problem,
            },
        }
    }

    fn scan_relocations(&mut self) -> Result<()> {
        let mut count = 0u64;
        let mut low = 0usize;
        let mut classes = ClassCache::new();
        for index in 0..self.objects.len() {
            let Some(entry) = self.object(index).copied() else {
                continue;
            };
            for (rela_index, target) in relocation_sections(&entry.object) {
                let place = self.section_of(&entry, target)?;
                let first = count;
                // Entry `number` of the relocation section, for a malformed one.
                let at = |count: u64| Location::Relocation {
                    section: position(rela_index),
                    index: u32::try_from(count - first - 1).unwrap_or(u32::MAX),
                };
                let mut relocations = entry.object.relocations(rela_index)?;
                while let Some(rela) = relocations.next() {
                    count += 1;
                    let class = match classes.get(rela.r_type) {
                        Some(class) => class,
                        None => {
                            let class = self.arch.classify(rela.r_type).ok_or_else(|| {
                                Error::Relocation(self.reloc_error(
                                    index,
                                    target,
                                    &rela,
                                    RelocProblem::Unsupported,
                                ))
                            })?;
                            classes.put(rela.r_type, class);
                            class
                        }
                    };
                    if class.skip {
                        continue;
                    }
                    let in_bounds = rela
                        .offset
                        .checked_add(u64::from(class.width))
                        .is_some_and(|end| end <= place.size);
                    if !in_bounds || place.zeroed {
                        let problem = RelocProblem::OutsideSection {
                            width: class.width,
                            size: if place.zeroed { 0 } else { place.size },
                        };
                        return Err(Error::Relocation(
                            self.reloc_error(index, target, &rela, problem),
                        ));
                    }
                    let symbol = entry.symbol(rela.symbol as usize).ok_or_else(|| {
                        malformed("relocation's symbol index out of range", at(count))
                    })?;
                    if class.pair == Pair::Lo {
                        // The low half's symbol labels its high half's place, not a target.
                        let high = self.find_high_half(symbol).ok_or_else(|| {
                            let problem = RelocProblem::Unpaired;
                            Error::Relocation(self.reloc_error(index, target, &rela, problem))
                        })?;
                        let slot = LowIndex::from_position(low)
                            .and_then(|i| self.low_halves.get_mut(i))
                            .ok_or_else(|| malformed("relocation pairs", at(count)))?;
                        *slot = LowHalf(Some(high));
                        low += 1;
                        continue;
                    }
                    let plain = !class.got && !class.call;
                    if !plain
                        || !self
                            .symbols
                            .get(symbol)
                            .is_some_and(SymbolEntry::has_address)
                    {
                        self.reserve(symbol, class, &entry, target)?;
                    }
                    // The rest of a run of plain data relocations (no slot, no pair) needs
                    // only places in bounds and symbols with an address (this one's field
                    // fit, so the section holds at least one): passed over on the raw
                    // entries. A relocation of another type after this one ends it at once.
                    let limit = place.size.checked_sub(u64::from(class.width));
                    if let Some(limit) = limit.filter(|_| plain) {
                        let run = PlainRun {
                            r_type: rela.r_type,
                            limit,
                            symbols: entry.symbols_in(self.symbols.entries()),
                        };
                        count += relocations
                            .pass_while(|r_type, offset, symbol| run.holds(r_type, offset, symbol));
                    }
                }
            }
        }
        self.relocations = count;
        Ok(())
    }

    /// Gives `symbol`'s canonical entry what a relocation of `class` needs: a GOT slot, a
    /// stub, an external address slot.
    fn reserve(
        &mut self,
        symbol: SymbolIndex,
        class: Class,
        entry: &Loaded<'a>,
        target: usize,
    ) -> Result<()> {
        let canonical = self.canonical(symbol);
        let stub_uses_got = self.arch.stub_uses_got();
        let sym = self.symbols.get_mut(canonical).ok_or_else(|| {
            malformed(
                "relocation's symbol index",
                Location::Symbol(position(canonical.position())),
            )
        })?;
        let external = match &mut sym.def {
            Definition::Unloaded => {
                return Err(Error::UnsupportedSection {
                    section: entry.object.section_name(target),
                    what: "a relocation against a symbol in a section that is not loaded",
                })
            }
            Definition::GotRelative(_) => {
                self.got_named = true;
                false
            }
            Definition::External { slot, .. } => {
                if slot.is_none() {
                    *slot = Some(next(&mut self.externals, ExternalSlot::from_position)?);
                }
                true
            }
            _ => false,
        };
        if class.got && sym.got.is_none() {
            sym.got = Some(next(&mut self.got_slots, GotSlot::from_position)?);
        }
        if class.call && external && sym.stub.is_none() {
            sym.stub = Some(next(&mut self.stubs, StubIndex::from_position)?);
            if stub_uses_got && sym.got.is_none() {
                sym.got = Some(next(&mut self.got_slots, GotSlot::from_position)?);
            }
        }
        Ok(())
    }

    fn finish_layout(&mut self, fills: &mut Fills) -> Result<()> {
        let stub_bytes = u64::from(self.stubs) * self.arch.stub_size();
        self.stub_offset = fills.get(SegmentKind::Code)?.reserve(stub_bytes, 16)?;
        // `_GLOBAL_OFFSET_TABLE_` and `.TOC.` are defined from the GOT's address, so a GOT
        // they refer to takes room even with no slots: an empty segment has no address.
        let got_size = u64::from(self.got_slots) * GOT_SLOT_SIZE;
        let got_size = if self.got_named {
            got_size.max(GOT_SLOT_SIZE)
        } else {
            got_size
        };
        self.got_offset = fills
            .get(SegmentKind::ReadOnly)?
            .reserve(got_size, GOT_SLOT_SIZE)?;
        let [code, read_only, data] = fills.0;
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
        for place in self.sections.entries_mut().iter_mut().filter(|p| p.loaded) {
            let start = segments
                .get(place.segment.index())
                .map_or(0, |s: &Segment| s.offset);
            place.offset = start + place.segment_offset;
        }
        self.locate_symbols();
        Ok(())
    }

    /// Sets every symbol's [`BaseOffset`]; an alias takes its target's location, slots, size
    /// and `st_other` (aliases never chain, so one pass over targets first suffices).
    fn locate_symbols(&mut self) {
        let mut aliases = false;
        for symbol in self.symbols.entries_mut() {
            let at = match symbol.def {
                Definition::Nothing | Definition::Unloaded => BaseOffset::NOWHERE,
                Definition::Alias(_) => {
                    aliases = true;
                    BaseOffset::NOWHERE
                }
                Definition::Absolute(value) => BaseOffset {
                    base: Base::Zero,
                    offset: value,
                },
                Definition::Placed { segment, offset } => BaseOffset {
                    base: Base::of(segment),
                    offset,
                },
                Definition::Common { offset } => BaseOffset {
                    base: Base::Data,
                    offset,
                },
                Definition::GotRelative(bias) => BaseOffset {
                    base: Base::Got,
                    offset: bias as u64,
                },
                Definition::External { slot, .. } => match slot {
                    Some(slot) => BaseOffset {
                        base: Base::External,
                        offset: slot.into(),
                    },
                    None => BaseOffset::NOWHERE,
                },
            };
            symbol.set_at(at);
        }
        if !aliases {
            return;
        }
        for index in 0..self.symbols.len() {
            let Some(symbol) = SymbolIndex::from_position(index) else {
                continue;
            };
            let Some(Definition::Alias(target)) = self.symbols.get(symbol).map(|s| s.def) else {
                continue;
            };
            let Some(target) = self.symbols.get(target).copied() else {
                continue;
            };
            if let Some(alias) = self.symbols.get_mut(symbol) {
                *alias = SymbolEntry {
                    def: alias.def,
                    indexed: alias.indexed,
                    ..target
                };
            }
        }
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

    /// Number of distinct external symbols the relocations refer to: the length of the
    /// scratch [`link_in`](Plan::link_in) needs.
    pub fn external_count(&self) -> usize {
        self.externals as usize
    }

    /// Total relocation entries in loaded sections.
    pub fn relocation_count(&self) -> u64 {
        self.relocations
    }

    /// The size of each of the plan's tables: what [`PlanStorage`] had to provide.
    pub fn sizes(&self) -> PlanSizes {
        PlanSizes {
            objects: self.objects.len(),
            sections: self.sections.len(),
            symbols: self.symbols.len(),
            names: self.names.len(),
            high_halves: self.high_halves.len(),
            low_halves: self.low_halves.len(),
        }
    }

    /// The objects, in link order.
    pub fn objects(&self) -> impl Iterator<Item = &Object<'a>> + '_ {
        self.loaded().map(|(_, e)| &e.object)
    }

    /// The name object `object` was given ([`Input`]), if any.
    pub fn object_name(&self, object: usize) -> Option<&'a str> {
        self.object(object)?.name
    }

    /// Where section `index` of object `object` goes.
    pub fn section_place(&self, object: usize, index: usize) -> Option<SectionPlace> {
        let entry = self.object(object)?;
        self.sections.get(entry.section(index)?).copied()
    }

    /// The GOT slot and stub planned for symbol `index` of object `object`.
    pub fn symbol_slots(
        &self,
        object: usize,
        index: usize,
    ) -> (Option<GotSlot>, Option<StubIndex>) {
        let symbol = self
            .object(object)
            .and_then(|e| e.symbol(index))
            .and_then(|s| self.symbols.get(self.canonical(s)));
        symbol.map_or((None, None), |s| (s.got, s.stub))
    }

    /// Section `index` of object `object`'s name, for messages.
    pub fn section_name(&self, object: usize, index: usize) -> Name {
        self.object(object)
            .map(|e| e.object.section_name(index))
            .unwrap_or(Name::new(b"?"))
    }
}

/// The classes of the relocation types the scan has met, by the type's low bits. Code
/// interleaves a few types (x86_64: a call, a data reference, a GOT load per kernel), so
/// remembering only the last type classified nearly every relocation again.
struct ClassCache {
    /// Slot `k` holds a type whose low bits are `k`; an empty slot holds a type whose low
    /// bits are not `k` (so no type looked up there matches it).
    slots: [(RelocationType, Class); ClassCache::SLOTS],
}

impl ClassCache {
    const SLOTS: usize = 16;

    fn new() -> ClassCache {
        let mut slots = [(RelocationType(0), Class::skip()); Self::SLOTS];
        for (k, slot) in (1u32..).zip(slots.iter_mut()) {
            slot.0 = RelocationType(k % Self::SLOTS as u32);
        }
        ClassCache { slots }
    }

    fn slot(r_type: RelocationType) -> usize {
        r_type.0 as usize % Self::SLOTS
    }

    #[inline]
    fn get(&self, r_type: RelocationType) -> Option<Class> {
        let &(cached, class) = self.slots.get(Self::slot(r_type))?;
        (cached == r_type).then_some(class)
    }

    fn put(&mut self, r_type: RelocationType, class: Class) {
        if let Some(slot) = self.slots.get_mut(Self::slot(r_type)) {
            *slot = (r_type, class);
        }
    }
}

/// A run of plain data relocations of one type in one section: each needs only its place
/// in bounds and a symbol with an address, so the scan checks just that, in a tight loop.
struct PlainRun<'t> {
    r_type: RelocationType,
    /// The last offset a field of the type fits at.
    limit: u64,
    /// The object's symbols.
    symbols: &'t [SymbolEntry],
}

impl PlainRun<'_> {
    /// A relocation of the run's type, in bounds, against a symbol with an address.
    #[inline(always)]
    fn holds(&self, r_type: RelocationType, offset: u64, symbol: u32) -> bool {
        r_type == self.r_type
            && offset <= self.limit
            && self
                .symbols
                .get(symbol as usize)
                .is_some_and(SymbolEntry::has_address)
    }
}

/// Which symbols [`Plan::bind_symbols`] visits.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Pass {
    Definitions,
    References,
}

/// The next index from `counter`, counting it.
fn next<I>(counter: &mut u32, make: fn(usize) -> Option<I>) -> Result<I> {
    let index = make(*counter as usize).ok_or_else(|| too_many("slots"))?;
    *counter = counter.checked_add(1).ok_or_else(|| too_many("slots"))?;
    Ok(index)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An empty cache answers no type, a type put is answered until another type with
    /// the same low bits replaces it, and types with other low bits are left alone.
    #[test]
    fn class_cache_answers_only_the_types_put_in_it() {
        let mut cache = ClassCache::new();
        for r_type in (0..64).chain([u32::MAX - 1, u32::MAX]) {
            assert_eq!(cache.get(RelocationType(r_type)), None, "type {r_type}");
        }
        // x86_64's kernel mix: PLT32, PC32, REX_GOTPCRELX (4, 2, 42: 42 shares no slot).
        let (plt, pc, got) = (Class::call(4), Class::data(4), Class::got(4));
        cache.put(RelocationType(4), plt);
        cache.put(RelocationType(2), pc);
        cache.put(RelocationType(42), got);
        assert_eq!(cache.get(RelocationType(4)), Some(plt));
        assert_eq!(cache.get(RelocationType(2)), Some(pc));
        assert_eq!(cache.get(RelocationType(42)), Some(got));
        assert_eq!(
            cache.get(RelocationType(18)),
            None,
            "18 shares 2's slot only"
        );
        cache.put(RelocationType(18), Class::skip());
        assert_eq!(cache.get(RelocationType(18)), Some(Class::skip()));
        assert_eq!(cache.get(RelocationType(2)), None, "replaced by 18");
        assert_eq!(cache.get(RelocationType(4)), Some(plt));
    }
}
