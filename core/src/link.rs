//! Linking a planned image into backend memory: resolve, copy, fill GOT and stubs, apply
//! relocations, publish. The plan is only read, so one plan links as often as wanted, at
//! different addresses or into different backends. What a link learns (the external
//! symbols' addresses) goes into a scratch the caller lends ([`Plan::link_in`]) or, with
//! the `alloc` feature, one allocated at its exact size (`Plan::link`). Nothing here
//! searches per relocation: every lookup is an index into a table the plan built.

use crate::arch::reloc::{Applied, Failure, HiInput, Pair, RelocInput, StubInput, WithApply};
use crate::bits::write_u64;
use crate::elf::Rela;
use crate::error::{Error, Name, RelocError, Result};
use crate::memory::{Layout, MemoryBackend, Placement, SegmentKind, SymbolResolver};
use crate::plan::{
    terminator_size, Base, BaseOffset, Definition, ExternalSlot, GotSlot, LowHalf, Plan,
    SectionPlace, StubIndex, SymbolEntry, SymbolIndex, GOT_SLOT_SIZE,
};
use crate::table::{Table, TableIndex, View};
use object::elf::RelocationType;

/// One applied relocation, reported to a link observer (used by `elfjit inspect`).
#[derive(Clone, Copy, Debug)]
pub struct RelocRecord {
    /// Index of the object in the plan.
    pub object: usize,
    /// Section the relocation patches (index within its object).
    pub section: usize,
    pub rela: Rela,
    /// S, P, and the target address of the GOT slot or stub used, if any.
    pub symbol_address: u64,
    pub place_address: u64,
    pub applied: Applied,
}

/// The target addresses one link computes against.
#[derive(Clone, Copy, Debug)]
struct Bases {
    placement: Placement,
    /// The GOT's first byte.
    got: u64,
    /// The first stub.
    stubs: u64,
    stub_size: u64,
    /// Each [`Base`](crate::plan::Base)'s address, by [`BaseOffset::base_index`].
    by_base: [u64; Base::COUNT],
}

/// `placement` with each empty segment that the backend gave no address (backends may
/// report 0 for one) moved to the first non-empty segment's start. Symbols in empty
/// sections (a zero-length array, a section-start marker) then get an address inside the
/// image instead of NULL, and the image's relative relocations keep small distances. An
/// image with no bytes at all keeps what the backend reported.
fn anchor_empty_segments(layout: Layout, placement: Placement) -> Placement {
    let anchor = SegmentKind::ALL
        .into_iter()
        .find(|&kind| layout.get(kind).size != 0)
        .map_or(0, |kind| placement.target(kind));
    Placement::new(SegmentKind::ALL.map(|kind| {
        let target = placement.target(kind);
        if layout.get(kind).size == 0 && target == 0 {
            anchor
        } else {
            target
        }
    }))
}

impl Bases {
    fn new(plan: &Plan<'_>, placement: Placement) -> Bases {
        let placement = anchor_empty_segments(plan.layout, placement);
        // An image with neither read-only data nor GOT slots has no read-only segment, yet
        // GOT-relative relocations (GOTPC32, GOTOFF64) still need one reference point near
        // the code: the anchor `anchor_empty_segments` gave it, the code segment's start
        // (or the data segment's, in an image without code).
        let got = placement
            .target(SegmentKind::ReadOnly)
            .wrapping_add(plan.got_offset);
        Bases {
            placement,
            got,
            stubs: placement
                .target(SegmentKind::Code)
                .wrapping_add(plan.stub_offset),
            stub_size: plan.arch.stub_size(),
            by_base: [
                0,
                placement.target(SegmentKind::Code),
                placement.target(SegmentKind::ReadOnly),
                placement.target(SegmentKind::Data),
                got,
            ],
        }
    }

    fn segment(&self, kind: SegmentKind) -> u64 {
        self.placement.target(kind)
    }

    /// The target address of `place` (a loaded section).
    fn section(&self, place: &SectionPlace) -> u64 {
        self.segment(place.segment)
            .wrapping_add(place.segment_offset)
    }

    #[inline]
    fn got_slot(&self, slot: GotSlot) -> u64 {
        self.got.wrapping_add(slot.offset())
    }

    #[inline]
    fn stub(&self, stub: StubIndex) -> u64 {
        self.stubs.wrapping_add(stub.offset(self.stub_size))
    }
}

/// The addresses one link resolves: the plan's tables, the bases and the externals.
#[derive(Clone, Copy)]
struct Resolved<'t> {
    symbols: View<'t, SymbolIndex, SymbolEntry>,
    externals: View<'t, ExternalSlot, u64>,
    bases: Bases,
}

impl Resolved<'_> {
    /// The address of `entry` (an alias carries its target's location).
    #[inline]
    fn address(&self, entry: &SymbolEntry) -> u64 {
        let at: BaseOffset = entry.at();
        match at.base_index() {
            Some(base) => self
                .bases
                .by_base
                .get(base)
                .map_or(0, |b| b.wrapping_add(at.offset)),
            None => usize::try_from(at.offset)
                .ok()
                .and_then(ExternalSlot::from_position)
                .and_then(|slot| self.externals.get(slot))
                .copied()
                .unwrap_or(0),
        }
    }

    /// The address a reference to `symbol` resolves to.
    fn address_of(&self, symbol: SymbolIndex) -> u64 {
        self.symbols.get(symbol).map_or(0, |e| self.address(e))
    }
}

/// The entries owning one of `count` slots (or stubs) that `slot_of` reads, with the slot:
/// aliases carry copies of their targets' slots and are passed over, so each slot is
/// written once, and the walk ends at the last owner.
fn owners<S>(
    entries: &[SymbolEntry],
    count: u32,
    slot_of: impl Fn(&SymbolEntry) -> Option<S>,
) -> impl Iterator<Item = (&SymbolEntry, S)> {
    entries
        .iter()
        .filter(|s| !matches!(s.def, Definition::Alias(_)))
        .filter_map(move |s| slot_of(s).map(|slot| (s, slot)))
        .take(count as usize)
}

/// The writable bytes of segment `kind` from `backend`.
fn segment_mut<B: MemoryBackend + ?Sized>(backend: &mut B, kind: SegmentKind) -> Result<&mut [u8]> {
    backend.segment_mut(kind).ok_or(Error::BackendMismatch {
        what: "no writable memory for a segment",
    })
}

fn slice_mut(memory: &mut [u8], offset: u64, len: u64) -> Result<&mut [u8]> {
    let start = usize::try_from(offset).map_err(|_| Error::BackendMismatch { what: "offset" })?;
    let end = offset
        .checked_add(len)
        .and_then(|e| usize::try_from(e).ok())
        .ok_or(Error::BackendMismatch { what: "offset" })?;
    memory.get_mut(start..end).ok_or(Error::BackendMismatch {
        what: "memory shorter than the image",
    })
}

impl<'a> Plan<'a> {
    /// Links the planned image into memory from `backend`, resolving external symbols
    /// with `resolver` into `externals` (at least [`external_count`](Plan::external_count)
    /// entries; the image keeps them for [`Image::address_of`]). The plan is not changed:
    /// it can be linked again, elsewhere.
    pub fn link_in<'p, B, R>(
        &'p self,
        backend: &mut B,
        resolver: &mut R,
        externals: &'p mut [u64],
    ) -> Result<Image<'p, 'a>>
    where
        B: MemoryBackend + ?Sized,
        R: SymbolResolver + ?Sized,
    {
        self.link_observed_in(backend, resolver, externals, &mut |_: &RelocRecord| {})
    }

    /// Like [`link_in`](Plan::link_in), calling `observer` after each relocation is
    /// applied.
    pub fn link_observed_in<'p, B, R, O>(
        &'p self,
        backend: &mut B,
        resolver: &mut R,
        externals: &'p mut [u64],
        observer: &mut O,
    ) -> Result<Image<'p, 'a>>
    where
        B: MemoryBackend + ?Sized,
        R: SymbolResolver + ?Sized,
        O: FnMut(&RelocRecord) + ?Sized,
    {
        let externals = Table::lent(externals, self.external_count(), "externals", 0)?;
        self.link_into(backend, resolver, externals, observer)
    }

    /// [`link_in`](Plan::link_in) with the externals' scratch allocated at its exact size.
    #[cfg(feature = "alloc")]
    pub fn link<B, R>(&self, backend: &mut B, resolver: &mut R) -> Result<Image<'_, 'a>>
    where
        B: MemoryBackend + ?Sized,
        R: SymbolResolver + ?Sized,
    {
        self.link_observed(backend, resolver, &mut |_: &RelocRecord| {})
    }

    /// [`link_observed_in`](Plan::link_observed_in) with the externals' scratch allocated
    /// at its exact size.
    #[cfg(feature = "alloc")]
    pub fn link_observed<B, R, O>(
        &self,
        backend: &mut B,
        resolver: &mut R,
        observer: &mut O,
    ) -> Result<Image<'_, 'a>>
    where
        B: MemoryBackend + ?Sized,
        R: SymbolResolver + ?Sized,
        O: FnMut(&RelocRecord) + ?Sized,
    {
        let externals = Table::allocated(self.external_count(), "externals", 0)?;
        self.link_into(backend, resolver, externals, observer)
    }

    fn link_into<'p, B, R, O>(
        &'p self,
        backend: &mut B,
        resolver: &mut R,
        mut externals: Table<'p, ExternalSlot, u64>,
        observer: &mut O,
    ) -> Result<Image<'p, 'a>>
    where
        B: MemoryBackend + ?Sized,
        R: SymbolResolver + ?Sized,
        O: FnMut(&RelocRecord) + ?Sized,
    {
        // Before any memory is asked for: an undefined symbol leaves the backend untouched.
        self.resolve_externals(resolver, &mut externals)?;
        let layout = self.layout;
        let placement = backend.allocate(&layout)?;
        for kind in SegmentKind::ALL {
            let request = layout.get(kind);
            let target = placement.target(kind);
            if request.size != 0 && !target.is_multiple_of(request.align.max(1)) {
                return Err(Error::BackendMismatch {
                    what: "segment address not aligned as the layout asks",
                });
            }
            let short = backend
                .segment_mut(kind)
                .map_or(request.size != 0, |bytes| {
                    (bytes.len() as u64) < request.size
                });
            if short {
                return Err(Error::BackendMismatch {
                    what: "segment memory shorter than the layout asks",
                });
            }
        }
        let resolved = Resolved {
            symbols: self.symbols.view(),
            externals: externals.view(),
            bases: Bases::new(self, placement),
        };
        self.copy_sections(backend)?;
        self.write_got_and_stubs(backend, &resolved)?;
        self.apply_relocations(backend, &resolved, observer)?;
        backend.publish()?;
        let bases = resolved.bases;
        Ok(Image {
            plan: self,
            bases,
            externals,
        })
    }

    /// Asks `resolver` for every referenced external, once each.
    fn resolve_externals<R: SymbolResolver + ?Sized>(
        &self,
        resolver: &mut R,
        externals: &mut Table<'_, ExternalSlot, u64>,
    ) -> Result<()> {
        if self.externals == 0 {
            return Ok(());
        }
        // Each slot belongs to one entry (a repeated external is an alias of the first):
        // the walk ends at the last one.
        let mut left = self.externals;
        for (_, entry) in self.loaded() {
            let symbols = entry.symbols_in(self.symbols.entries());
            for (local, symbol) in symbols.iter().enumerate() {
                if left == 0 {
                    return Ok(());
                }
                let Definition::External {
                    weak,
                    slot: Some(slot),
                } = symbol.def
                else {
                    continue;
                };
                left = left.saturating_sub(1);
                let name = entry.object.symbol(local)?.name;
                let address = match resolver.resolve(name) {
                    Some(address) => address,
                    None if weak => 0,
                    None => {
                        return Err(Error::UndefinedSymbol {
                            name: Name::new(name),
                        })
                    }
                };
                if let Some(out) = externals.get_mut(slot) {
                    *out = address;
                }
            }
        }
        Ok(())
    }

    fn copy_sections<B: MemoryBackend + ?Sized>(&self, backend: &mut B) -> Result<()> {
        // Fresh memory that reads as zero needs no zero-fill: writing it would commit
        // every page of `.bss`. Other memory gets every byte of each segment's size
        // written here: the sections, the gaps between them, and the rest of the segment
        // (COMMON symbols, the GOT and the stubs, which are written after), so nothing an
        // earlier user of the memory left stays in the image.
        let zero_filled = backend.zero_filled();
        // Per segment, the end of what is written so far. Sections are visited in the
        // order `place_sections` laid them out, so each starts at or after it.
        let mut written = [0u64; 3];
        for (_, entry) in self.loaded() {
            for index in 0..entry.object.section_count() {
                let Some(place) = entry.section(index).and_then(|i| self.sections.get(i)) else {
                    continue;
                };
                if !place.loaded || place.size == 0 || (place.zeroed && zero_filled) {
                    continue;
                }
                let memory = segment_mut(backend, place.segment)?;
                let cursor = written
                    .get_mut(place.segment.index())
                    .ok_or(Error::BackendMismatch { what: "segment" })?;
                if !zero_filled && *cursor < place.segment_offset {
                    slice_mut(memory, *cursor, place.segment_offset - *cursor)?.fill(0);
                }
                let mut end = place.segment_offset.saturating_add(place.size);
                let dest = slice_mut(memory, place.segment_offset, place.size)?;
                if place.zeroed {
                    dest.fill(0);
                } else {
                    let section = entry.object.section(index)?;
                    dest.copy_from_slice(section.data);
                    let terminator = terminator_size(section.name);
                    if terminator != 0 {
                        slice_mut(memory, end, terminator)?.fill(0);
                        end = end.saturating_add(terminator);
                    }
                }
                *cursor = (*cursor).max(end);
            }
        }
        if zero_filled {
            return Ok(());
        }
        for (kind, &cursor) in SegmentKind::ALL.into_iter().zip(&written) {
            let size = self.layout.get(kind).size;
            if cursor < size {
                let memory = segment_mut(backend, kind)?;
                slice_mut(memory, cursor, size - cursor)?.fill(0);
            }
        }
        Ok(())
    }

    fn write_got_and_stubs<B: MemoryBackend + ?Sized>(
        &self,
        backend: &mut B,
        resolved: &Resolved<'_>,
    ) -> Result<()> {
        let bases = &resolved.bases;
        if self.got_slots != 0 {
            let got = segment_mut(backend, SegmentKind::ReadOnly)?;
            for (symbol, slot) in owners(self.symbols.entries(), self.got_slots, |s| s.got) {
                let offset = self.got_offset + slot.offset();
                write_u64(
                    slice_mut(got, offset, GOT_SLOT_SIZE)?,
                    resolved.address(symbol),
                )
                .ok_or(Error::BackendMismatch {
                    what: "GOT outside memory",
                })?;
            }
        }
        if self.stubs != 0 {
            let code = segment_mut(backend, SegmentKind::Code)?;
            for (symbol, index) in owners(self.symbols.entries(), self.stubs, |s| s.stub) {
                let stub = StubInput {
                    address: bases.stub(index),
                    target: resolved.address(symbol),
                    got_slot: symbol.got.map(|slot| bases.got_slot(slot)),
                    got_base: bases.got,
                };
                let offset = self.stub_offset + index.offset(bases.stub_size);
                let bytes = slice_mut(code, offset, bases.stub_size)?;
                self.arch
                    .write_stub(bytes, &stub)
                    .ok_or(Error::BackendMismatch {
                        what: "stub outside memory",
                    })?;
            }
        }
        Ok(())
    }

    fn apply_relocations<B, O>(
        &self,
        backend: &mut B,
        resolved: &Resolved<'_>,
        observer: &mut O,
    ) -> Result<()>
    where
        B: MemoryBackend + ?Sized,
        O: FnMut(&RelocRecord) + ?Sized,
    {
        let bases = &resolved.bases;
        let pairs = self.arch.has_pairs();
        let mut low_halves = self.low_halves.entries().iter();
        for (object, entry) in self.loaded() {
            let object = object.position();
            for (rela_index, target) in crate::plan::relocation_sections(&entry.object) {
                let Some(place) = entry.section(target).and_then(|i| self.sections.get(i)) else {
                    continue;
                };
                // An empty section has no memory (its segment may be empty too); any
                // relocation in it that is not a hint was refused by the pre-scan.
                let section_bytes: &mut [u8] = if place.size == 0 {
                    &mut []
                } else {
                    let memory = segment_mut(backend, place.segment)?;
                    slice_mut(memory, place.segment_offset, place.size)?
                };
                let section = SectionLink {
                    plan: self,
                    resolved,
                    symbols: entry.symbols_in(self.symbols.entries()),
                    address: bases.section(place),
                    object,
                    target,
                };
                let relocations = entry.object.relocations(rela_index)?;
                if pairs {
                    section.apply_with_pairs(
                        relocations,
                        section_bytes,
                        &mut low_halves,
                        observer,
                    )?;
                } else {
                    section.apply(relocations, section_bytes, observer)?;
                }
            }
        }
        Ok(())
    }

    /// The inputs of high half `pair`, for its low halves.
    fn hi_input(&self, pair: crate::plan::PairIndex, resolved: &Resolved<'_>) -> Option<HiInput> {
        let hi = self.high_halves.get(pair)?;
        let symbol = resolved.symbols.get(hi.symbol?)?;
        Some(HiInput {
            r_type: hi.r_type,
            s: resolved.address(symbol),
            a: hi.addend,
            p: resolved.bases.segment(hi.segment).wrapping_add(hi.offset),
            got_slot: symbol.got.map(|slot| resolved.bases.got_slot(slot)),
        })
    }
}

/// What one architecture's relocation arithmetic returns.
type ApplyResult = core::result::Result<Applied, Failure>;

/// What applying one section's relocations needs, fixed for the section.
struct SectionLink<'l, 'a> {
    plan: &'l Plan<'a>,
    resolved: &'l Resolved<'l>,
    /// The object's symbols.
    symbols: &'l [SymbolEntry],
    /// The section's target address.
    address: u64,
    object: usize,
    /// The section's index in its object.
    target: usize,
}

impl SectionLink<'_, '_> {
    /// The inputs of `rela` (but a low half's high half).
    #[inline]
    fn input(&self, rela: &Rela) -> RelocInput {
        let bases = &self.resolved.bases;
        let (s, got_slot, stub, size, other) = match self.symbols.get(rela.symbol as usize) {
            Some(sym) => (
                self.resolved.address(sym),
                sym.got.map(|slot| bases.got_slot(slot)),
                sym.stub.map(|stub| bases.stub(stub)),
                sym.size,
                sym.other,
            ),
            None => (0, None, None, 0, 0),
        };
        RelocInput {
            r_type: rela.r_type,
            s,
            a: rela.addend,
            p: self.address.wrapping_add(rela.offset),
            got_slot,
            got_base: bases.got,
            stub,
            size,
            other,
            hi: None,
        }
    }

    /// Applies `input` at `rela`'s place in `section` with `apply` (the architecture's)
    /// and reports it to `observer`.
    #[inline]
    fn apply_one<F, O>(
        &self,
        apply: F,
        rela: &Rela,
        input: &RelocInput,
        section: &mut [u8],
        observer: &mut O,
    ) -> Result<()>
    where
        F: Fn(&RelocInput, &mut [u8]) -> ApplyResult,
        O: FnMut(&RelocRecord) + ?Sized,
    {
        let at = usize::try_from(rela.offset).unwrap_or(usize::MAX);
        let place = section.get_mut(at..).unwrap_or(&mut []);
        let applied = match apply(input, place) {
            Ok(applied) => applied,
            Err(failure) => return Err(self.error(rela, input.s, input.p, failure)),
        };
        observer(&RelocRecord {
            object: self.object,
            section: self.target,
            rela: *rela,
            symbol_address: input.s,
            place_address: input.p,
            applied,
        });
        Ok(())
    }

    /// The error for `rela`, with its S and P. They come by value: a reference to the
    /// whole input would keep every field of it in memory on the hot path.
    #[cold]
    fn error(&self, rela: &Rela, s: u64, p: u64, failure: Failure) -> Error {
        Error::Relocation(RelocError {
            s,
            p,
            value: failure.value,
            ..self
                .plan
                .reloc_error(self.object, self.target, rela, failure.problem)
        })
    }

    /// Applies every relocation of a section on an architecture without pairs.
    fn apply<O>(
        &self,
        relocations: impl Iterator<Item = Rela>,
        section: &mut [u8],
        observer: &mut O,
    ) -> Result<()>
    where
        O: FnMut(&RelocRecord) + ?Sized,
    {
        self.plan.arch.with_apply(ApplyAll {
            link: self,
            relocations,
            section,
            observer,
        })
    }

    /// Applies every relocation of a section, giving each low half of a pair the next
    /// recorded high half (the pre-scan recorded them in this order).
    fn apply_with_pairs<O>(
        &self,
        relocations: impl Iterator<Item = Rela>,
        section: &mut [u8],
        low_halves: &mut core::slice::Iter<'_, LowHalf>,
        observer: &mut O,
    ) -> Result<()>
    where
        O: FnMut(&RelocRecord) + ?Sized,
    {
        let arch = self.plan.arch;
        let mut last_type: Option<(RelocationType, bool)> = None;
        for rela in relocations {
            let is_lo = match last_type {
                Some((r_type, is_lo)) if r_type == rela.r_type => is_lo,
                _ => {
                    let is_lo = arch
                        .classify(rela.r_type)
                        .is_some_and(|c| c.pair == Pair::Lo);
                    last_type = Some((rela.r_type, is_lo));
                    is_lo
                }
            };
            let mut input = self.input(&rela);
            if is_lo {
                input.hi = low_halves
                    .next()
                    .and_then(|low| low.0)
                    .and_then(|pair| self.plan.hi_input(pair, self.resolved));
            }
            self.apply_one(
                |input, place| arch.apply(input, place),
                &rela,
                &input,
                section,
                observer,
            )?;
        }
        Ok(())
    }
}

/// Every relocation of a section on an architecture without pairs, in a loop compiled
/// for one architecture's `apply` (`Arch::with_apply`). Relocations of one type come in
/// runs (a table of pointers is one long run): a run of a data type goes to a loop
/// compiled for its row (`Arch::with_row`), with the row's arithmetic inlined; the others
/// are applied here, one call of `apply` each.
struct ApplyAll<'s, 'l, 'a, I, O: ?Sized> {
    link: &'s SectionLink<'l, 'a>,
    relocations: I,
    section: &'s mut [u8],
    observer: &'s mut O,
}

impl<I, O> WithApply for ApplyAll<'_, '_, '_, I, O>
where
    I: Iterator<Item = Rela>,
    O: FnMut(&RelocRecord) + ?Sized,
{
    type Output = Result<()>;

    #[inline(always)]
    fn run<F>(mut self, apply: F) -> Result<()>
    where
        F: Fn(&RelocInput, &mut [u8]) -> ApplyResult + Copy,
    {
        let link = self.link;
        // The relocation after a run, which ended it; the type of the one before; the
        // type of the last run that had no row's loop (not asked again while it lasts).
        let mut after: Option<Rela> = None;
        let mut last = None;
        let mut no_loop = None;
        while let Some(rela) = after.take().or_else(|| self.relocations.next()) {
            if last == Some(rela.r_type) && no_loop != last {
                // The second of a run: it and the rest of the run in the row's loop.
                let mut run = ApplyRun {
                    link,
                    first: rela,
                    relocations: &mut self.relocations,
                    section: &mut *self.section,
                    observer: &mut *self.observer,
                };
                if let Some(result) = link.plan.arch.with_row(rela.r_type, &mut run) {
                    after = result?;
                    continue;
                }
                no_loop = last;
            }
            last = Some(rela.r_type);
            let input = link.input(&rela);
            link.apply_one(apply, &rela, &input, self.section, self.observer)?;
        }
        Ok(())
    }
}

/// The rest of a run of relocations of one type (`first`, then those of `relocations` up
/// to one of another type), applied in a loop compiled for that type's row
/// (`Arch::with_row`). Lent by reference, so entering the loop moves one pointer.
struct ApplyRun<'s, 'l, 'a, I, O: ?Sized> {
    link: &'s SectionLink<'l, 'a>,
    first: Rela,
    relocations: &'s mut I,
    section: &'s mut [u8],
    observer: &'s mut O,
}

impl<I, O> WithApply for &mut ApplyRun<'_, '_, '_, I, O>
where
    I: Iterator<Item = Rela>,
    O: FnMut(&RelocRecord) + ?Sized,
{
    /// The first relocation after the run.
    type Output = Result<Option<Rela>>;

    // Out of line: each row's loop is a function with a frame of its own. Inlined into
    // `with_row`, a debug build gave that one function the frames of every row's loop at
    // once, and a load overflowed a 64 KiB thread stack. (The row's arithmetic is still
    // inlined into its loop; entering the loop is one call per run.)
    #[inline(never)]
    fn run<F>(self, apply: F) -> Result<Option<Rela>>
    where
        F: Fn(&RelocInput, &mut [u8]) -> ApplyResult + Copy,
    {
        let link = self.link;
        let r_type = self.first.r_type;
        let mut rela = self.first;
        loop {
            let input = link.input(&rela);
            link.apply_one(apply, &rela, &input, self.section, self.observer)?;
            match self.relocations.next() {
                Some(next) if next.r_type == r_type => rela = next,
                after => return Ok(after),
            }
        }
    }
}

/// A linked image: the plan, the target addresses its segments were linked at, and the
/// addresses its external symbols resolved to.
pub struct Image<'p, 'a> {
    plan: &'p Plan<'a>,
    bases: Bases,
    externals: Table<'p, ExternalSlot, u64>,
}

impl<'p, 'a> Image<'p, 'a> {
    fn resolved(&self) -> Resolved<'_> {
        Resolved {
            symbols: self.plan.symbols.view(),
            externals: self.externals.view(),
            bases: self.bases,
        }
    }

    /// Where the backend placed each segment.
    pub fn placement(&self) -> Placement {
        self.bases.placement
    }

    /// The target address of section `index` of object `object`, if it was loaded.
    pub fn section_address(&self, object: usize, index: usize) -> Option<u64> {
        let place = self.plan.section_place(object, index)?;
        place.loaded.then(|| self.bases.section(&place))
    }

    /// The plan the image was linked from.
    pub fn plan(&self) -> &'p Plan<'a> {
        self.plan
    }

    /// The address symbol `index` of object `object` resolved to (0 for an unreferenced
    /// external), or `None` if there is no such symbol.
    pub fn address_of(&self, object: usize, index: usize) -> Option<u64> {
        let symbol = self.plan.object(object)?.symbol(index)?;
        Some(self.resolved().address_of(symbol))
    }

    /// The target address of a global symbol defined in the image.
    pub fn symbol(&self, name: &str) -> Option<u64> {
        self.globals()
            .find(|g| g.name == name.as_bytes())
            .map(|g| g.address)
    }

    /// The global functions defined in the image, in link order.
    pub fn functions(&self) -> impl Iterator<Item = Global<'a>> + '_ {
        self.globals().filter(|g| g.is_function)
    }

    /// The far-call stubs (veneers on aarch64) the linker wrote, one per external symbol
    /// called from too far away, in link order of the symbols they reach.
    pub fn stubs(&self) -> impl Iterator<Item = Stub<'a>> + '_ {
        let bases = self.bases;
        self.plan.loaded().flat_map(move |(_, entry)| {
            entry.symbols().skip(1).filter_map(move |(index, flat)| {
                let s = self.plan.symbols.get(flat)?;
                // An alias carries its target's stub, which its target reports.
                if matches!(s.def, Definition::Alias(_)) {
                    return None;
                }
                Some(Stub {
                    target: entry.object.symbol(index).ok()?.name,
                    address: bases.stub(s.stub?),
                    size: bases.stub_size,
                })
            })
        })
    }

    /// Every global (or weak) symbol defined in the image.
    pub fn globals(&self) -> impl Iterator<Item = Global<'a>> + '_ {
        self.global_entries().filter_map(|entry| entry.global())
    }

    /// [`Image::globals`] with their names not yet read: where each starts in its object's
    /// string table. For a caller that keeps the names (a copy of the table and offsets)
    /// without searching for the end of each.
    pub fn global_entries(&self) -> impl Iterator<Item = GlobalEntry<'a>> + '_ {
        Globals {
            resolved: self.resolved(),
            objects: self.plan.objects.entries().iter(),
            object: None,
            entries: [].iter().enumerate(),
        }
    }
}

/// The walk behind [`Image::globals`]: each loaded object's raw symbols beside its slice
/// of the plan's symbol table, in step. A module's load lists every global this way, so
/// it is a plain loop (a chain of `flat_map` and `filter_map` kept a closure call and an
/// index translation per symbol).
struct Globals<'i, 'a> {
    resolved: Resolved<'i>,
    objects: core::slice::Iter<'i, crate::plan::ObjectEntry<'a>>,
    /// The object whose symbols `entries` walks.
    object: Option<crate::elf::Object<'a>>,
    /// Its entries in the plan's symbol table, with their indices in the object.
    entries: core::iter::Enumerate<core::slice::Iter<'i, SymbolEntry>>,
}

impl<'a> Iterator for Globals<'_, 'a> {
    type Item = GlobalEntry<'a>;

    // Inline, so the load's loop over the globals keeps its registers across symbols.
    #[inline]
    fn next(&mut self) -> Option<GlobalEntry<'a>> {
        loop {
            if let Some(object) = &self.object {
                for (index, s) in self.entries.by_ref() {
                    // Defined in the image (the plan's entry, at hand), then a named global
                    // definition (the raw entry, then its name).
                    let defined = matches!(
                        s.def,
                        Definition::Placed { .. }
                            | Definition::Absolute(_)
                            | Definition::Common { .. }
                    );
                    if !defined {
                        continue;
                    }
                    let Some((sym, name_offset)) = object.global_definition_head(index) else {
                        continue;
                    };
                    return Some(GlobalEntry {
                        string_table: object.symbol_names(),
                        name_offset,
                        address: self.resolved.address(s),
                        size: sym.size,
                        is_function: sym.kind == object::elf::STT_FUNC,
                        other: sym.other,
                    });
                }
            }
            let loaded = self.objects.find_map(|entry| entry.loaded())?;
            let entries = loaded.symbols_in(self.resolved.symbols.entries());
            self.object = Some(loaded.object);
            // Symbol 0 is the null symbol.
            self.entries = entries.iter().enumerate();
            self.entries.next();
        }
    }
}

/// A global symbol of a linked image, its name not yet read ([`Image::global_entries`]).
#[derive(Clone, Copy, Debug)]
pub struct GlobalEntry<'a> {
    /// The string table of the symbol's object: the name starts at `name_offset` and ends
    /// at the first NUL after it, inside the table (a parsed object's names all do).
    pub string_table: &'a [u8],
    pub name_offset: u32,
    pub address: u64,
    pub size: u64,
    pub is_function: bool,
    /// `st_other` (ppc64le keeps the local entry point offset here).
    pub other: u8,
}

impl<'a> GlobalEntry<'a> {
    /// Its name (searched for its end), not empty.
    #[inline]
    pub fn name(&self) -> Option<&'a [u8]> {
        crate::elf::name_at(self.string_table, self.name_offset).filter(|n| !n.is_empty())
    }

    /// The symbol with its name read.
    #[inline]
    pub fn global(&self) -> Option<Global<'a>> {
        Some(Global {
            name: self.name()?,
            address: self.address,
            size: self.size,
            is_function: self.is_function,
            other: self.other,
        })
    }
}

/// A global symbol of a linked image.
#[derive(Clone, Copy, Debug)]
pub struct Global<'a> {
    pub name: &'a [u8],
    pub address: u64,
    pub size: u64,
    pub is_function: bool,
    /// `st_other` (ppc64le keeps the local entry point offset here).
    pub other: u8,
}

/// A far-call stub (a veneer on aarch64) of a linked image.
#[derive(Clone, Copy, Debug)]
pub struct Stub<'a> {
    /// The name of the symbol it jumps to.
    pub target: &'a [u8],
    /// Its first byte.
    pub address: u64,
    /// Its size in bytes.
    pub size: u64,
}
