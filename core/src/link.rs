//! Linking a planned image into backend memory: copy, resolve, fill GOT and stubs, apply
//! relocations, protect, flush. Nothing here allocates or searches per relocation: every
//! lookup is an index into a table the plan built.

use crate::arch::reloc::{Applied, HiInput, Pair, RelocInput, StubInput};
use crate::bits::write_u64;
use crate::elf::Rela;
use crate::error::{Error, Name, RelocError, Result};
use crate::memory::{MemoryBackend, Placement, SegmentKind, SymbolResolver};
use crate::plan::{terminator_size, Definition, Plan, SectionPlace, GOT_SLOT_SIZE};

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

/// A linked image: the plan plus the target addresses its segments were linked at.
pub struct Image<'p, 'a> {
    plan: &'p Plan<'a>,
    placement: Placement,
}

/// The writable bytes of segment `kind` from `backend`.
fn segment_mut<B: MemoryBackend + ?Sized>(backend: &mut B, kind: SegmentKind) -> Result<&mut [u8]> {
    backend.segment_mut(kind).ok_or(Error::BackendMismatch {
        what: "no writable memory for a segment",
    })
}

/// The target address of `place` (a loaded section) under `placement`.
fn section_address(placement: &Placement, place: &SectionPlace) -> u64 {
    placement
        .target(place.segment)
        .wrapping_add(place.segment_offset)
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
    /// Links the planned image into memory from `backend`, resolving external symbols with
    /// `resolver`.
    pub fn link<B, R>(&mut self, backend: &mut B, resolver: &mut R) -> Result<Image<'_, 'a>>
    where
        B: MemoryBackend + ?Sized,
        R: SymbolResolver + ?Sized,
    {
        self.link_observed(backend, resolver, &mut |_: &RelocRecord| {})
    }

    /// Like [`link`](Plan::link), calling `observer` after each relocation is applied.
    pub fn link_observed<B, R, O>(
        &mut self,
        backend: &mut B,
        resolver: &mut R,
        observer: &mut O,
    ) -> Result<Image<'_, 'a>>
    where
        B: MemoryBackend + ?Sized,
        R: SymbolResolver + ?Sized,
        O: FnMut(&RelocRecord) + ?Sized,
    {
        let layout = self.layout();
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
        self.copy_sections(backend)?;
        self.resolve_symbols(&placement, resolver)?;
        self.write_got_and_stubs(backend, &placement)?;
        self.apply_relocations(backend, &placement, observer)?;
        backend.publish()?;
        Ok(Image {
            plan: self,
            placement,
        })
    }

    fn copy_sections<B: MemoryBackend + ?Sized>(&self, backend: &mut B) -> Result<()> {
        // Fresh memory that reads as zero needs no zero-fill: writing it would commit
        // every page of `.bss`.
        let zero_filled = backend.zero_filled();
        for entry in self.objects.iter() {
            for index in 0..entry.object.section_count() {
                let Some(place) = self.sections.get(entry.section_base as usize + index) else {
                    continue;
                };
                if !place.loaded || place.size == 0 || (place.zeroed && zero_filled) {
                    continue;
                }
                let memory = segment_mut(backend, place.segment)?;
                let dest = slice_mut(memory, place.segment_offset, place.size)?;
                if place.zeroed {
                    dest.fill(0);
                } else {
                    let section = entry.object.section(index)?;
                    dest.copy_from_slice(section.data);
                    let terminator = terminator_size(section.name);
                    if terminator != 0 {
                        let end = place.segment_offset.saturating_add(place.size);
                        slice_mut(memory, end, terminator)?.fill(0);
                    }
                }
            }
        }
        if zero_filled {
            return Ok(());
        }
        // COMMON symbols keep their size in the object's symbol table.
        for entry in self.objects.iter() {
            for index in 0..entry.object.symbol_count() {
                let flat = entry.symbol_base as usize + index;
                if let Some(Definition::Common { offset }) = self.symbol_def(flat) {
                    let size = entry.object.symbol(index)?.size;
                    if size == 0 {
                        continue;
                    }
                    let memory = segment_mut(backend, SegmentKind::Data)?;
                    slice_mut(memory, offset, size)?.fill(0);
                }
            }
        }
        Ok(())
    }

    fn resolve_symbols<R: SymbolResolver + ?Sized>(
        &mut self,
        placement: &Placement,
        resolver: &mut R,
    ) -> Result<()> {
        let got_base = self.got_base(placement);
        for obj in 0..self.objects.len() {
            let Some(entry) = self.objects.get(obj).copied() else {
                continue;
            };
            for index in 0..entry.object.symbol_count() {
                let flat = entry.symbol_base as usize + index;
                let Some(symbol) = self.symbols.get(flat).copied() else {
                    continue;
                };
                let address = match symbol.def {
                    Definition::Nothing | Definition::Unloaded | Definition::Alias(_) => 0,
                    Definition::InSection { section, value } => self
                        .sections
                        .get(section as usize)
                        .map_or(0, |p| section_address(placement, p))
                        .wrapping_add(value),
                    Definition::Absolute(value) => value,
                    Definition::Common { offset } => {
                        placement.target(SegmentKind::Data).wrapping_add(offset)
                    }
                    Definition::GotRelative(bias) => got_base.wrapping_add_signed(bias),
                    Definition::External { weak } => {
                        if !symbol.referenced {
                            0
                        } else {
                            let name = entry.object.symbol(index)?.name;
                            match resolver.resolve(name) {
                                Some(address) => address,
                                None if weak => 0,
                                None => {
                                    return Err(Error::UndefinedSymbol {
                                        name: Name::new(name),
                                    })
                                }
                            }
                        }
                    }
                };
                if let Some(s) = self.symbols.get_mut(flat) {
                    s.address = address;
                }
            }
        }
        // Aliases point at entries resolved above (never at other aliases).
        for flat in 0..self.symbols.len() {
            if let Some(Definition::Alias(target)) = self.symbol_def(flat) {
                let address = self.symbols.get(target as usize).map_or(0, |s| s.address);
                if let Some(s) = self.symbols.get_mut(flat) {
                    s.address = address;
                }
            }
        }
        Ok(())
    }

    fn write_got_and_stubs<B: MemoryBackend + ?Sized>(
        &self,
        backend: &mut B,
        placement: &Placement,
    ) -> Result<()> {
        let stub_size = self.arch.stub_size();
        let got_base = self.got_base(placement);
        let stub_base = self.stub_base(placement);
        if self.got_slots != 0 {
            let got = segment_mut(backend, SegmentKind::ReadOnly)?;
            for symbol in self.symbols.iter().filter(|s| s.got_slot != u32::MAX) {
                let offset = self.got_offset + u64::from(symbol.got_slot) * GOT_SLOT_SIZE;
                write_u64(slice_mut(got, offset, GOT_SLOT_SIZE)?, symbol.address).ok_or(
                    Error::BackendMismatch {
                        what: "GOT outside memory",
                    },
                )?;
            }
        }
        if self.stubs != 0 {
            let code = segment_mut(backend, SegmentKind::Code)?;
            for symbol in self.symbols.iter().filter(|s| s.stub != u32::MAX) {
                let offset = u64::from(symbol.stub) * stub_size;
                let stub = StubInput {
                    address: stub_base.wrapping_add(offset),
                    target: symbol.address,
                    got_slot: (symbol.got_slot != u32::MAX)
                        .then(|| got_base + u64::from(symbol.got_slot) * GOT_SLOT_SIZE),
                    got_base,
                };
                let bytes = slice_mut(code, self.stub_offset + offset, stub_size)?;
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
        placement: &Placement,
        observer: &mut O,
    ) -> Result<()>
    where
        B: MemoryBackend + ?Sized,
        O: FnMut(&RelocRecord) + ?Sized,
    {
        let got_base = self.got_base(placement);
        let stub_base = self.stub_base(placement);
        let stub_size = self.arch.stub_size();
        let pairs = self.arch.has_pairs();
        let mut next_lo = 0usize;
        for (obj, rela_index, target) in self.relocation_sections() {
            let Some(entry) = self.objects.get(obj) else {
                continue;
            };
            let Some(place) = self
                .sections
                .get(entry.section_base as usize + target)
                .copied()
            else {
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
            let section_address = section_address(placement, &place);
            for rela in entry.object.relocations(rela_index)? {
                let flat = self.canonical(entry.symbol_base as usize + rela.symbol as usize);
                let symbol = self.symbols.get(flat).copied();
                let (s, got_slot, stub, size, other) = match symbol {
                    Some(sym) => (
                        sym.address,
                        self.got_slot_address(sym.got_slot, got_base),
                        (sym.stub != u32::MAX).then(|| stub_base + u64::from(sym.stub) * stub_size),
                        sym.size,
                        sym.other,
                    ),
                    None => (0, None, None, 0, 0),
                };
                // A low half takes the next recorded pair, in the pre-scan's order.
                let hi = if pairs
                    && self
                        .arch
                        .classify(rela.r_type)
                        .is_some_and(|c| c.pair == Pair::Lo)
                {
                    let hi = self
                        .lo_links
                        .get(next_lo)
                        .and_then(|&i| self.hi_input(i, placement, got_base));
                    next_lo += 1;
                    hi
                } else {
                    None
                };
                let input = RelocInput {
                    r_type: rela.r_type,
                    s,
                    a: rela.addend,
                    p: section_address.wrapping_add(rela.offset),
                    got_slot,
                    got_base,
                    stub,
                    size,
                    other,
                    hi,
                };
                let at = usize::try_from(rela.offset).unwrap_or(usize::MAX);
                let place_bytes = section_bytes.get_mut(at..).unwrap_or(&mut []);
                let applied = self.arch.apply(&input, place_bytes).map_err(|failure| {
                    Error::Relocation(RelocError {
                        s,
                        p: input.p,
                        value: failure.value,
                        ..entry
                            .object
                            .reloc_error(obj, target, &rela, failure.problem)
                    })
                })?;
                observer(&RelocRecord {
                    object: obj,
                    section: target,
                    rela,
                    symbol_address: s,
                    place_address: input.p,
                    applied,
                });
            }
        }
        Ok(())
    }
}

impl Plan<'_> {
    /// The target address of the GOT's first byte. An image with neither read-only data
    /// nor GOT slots has no read-only segment, yet GOT-relative relocations (GOTPC32,
    /// GOTOFF64) still need one reference point near the code: its code segment's start.
    fn got_base(&self, placement: &Placement) -> u64 {
        if self.layout().get(SegmentKind::ReadOnly).size == 0 {
            let code = placement.target(SegmentKind::Code);
            return if code != 0 {
                code
            } else {
                placement.target(SegmentKind::Data)
            };
        }
        placement
            .target(SegmentKind::ReadOnly)
            .wrapping_add(self.got_offset)
    }

    /// The target address of the first stub.
    fn stub_base(&self, placement: &Placement) -> u64 {
        placement
            .target(SegmentKind::Code)
            .wrapping_add(self.stub_offset)
    }

    fn got_slot_address(&self, slot: u32, got_base: u64) -> Option<u64> {
        (slot != u32::MAX).then(|| got_base + u64::from(slot) * GOT_SLOT_SIZE)
    }

    /// The inputs of high half `index`, for its low halves.
    fn hi_input(&self, index: u32, placement: &Placement, got_base: u64) -> Option<HiInput> {
        let hi = self.his.get(index as usize)?;
        let symbol = self.symbols.get(hi.symbol as usize)?;
        let section = self.sections.get(hi.section as usize)?;
        Some(HiInput {
            r_type: hi.r_type,
            s: symbol.address,
            a: hi.addend,
            p: section_address(placement, section).wrapping_add(hi.offset),
            got_slot: self.got_slot_address(symbol.got_slot, got_base),
        })
    }
}

impl<'a> Image<'_, 'a> {
    /// Where the backend placed each segment.
    pub fn placement(&self) -> Placement {
        self.placement
    }

    /// The target address of section `index` of object `object`, if it was loaded.
    pub fn section_address(&self, object: usize, index: usize) -> Option<u64> {
        let place = self.plan.section_place(object, index)?;
        place
            .loaded
            .then(|| section_address(&self.placement, &place))
    }

    /// The plan the image was linked from.
    pub fn plan(&self) -> &Plan<'a> {
        self.plan
    }

    /// The address symbol `index` of object `object` resolved to (0 for an unreferenced
    /// external), or `None` if there is no such symbol.
    pub fn address_of(&self, object: usize, index: usize) -> Option<u64> {
        let entry = self.plan.objects.get(object)?;
        if index >= entry.object.symbol_count() {
            return None;
        }
        let flat = self.plan.canonical(entry.symbol_base as usize + index);
        self.plan.symbols.get(flat).map(|s| s.address)
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
        let stub_base = self.plan.stub_base(&self.placement);
        let size = self.plan.arch.stub_size();
        self.plan.objects.iter().flat_map(move |entry| {
            (1..entry.object.symbol_count()).filter_map(move |index| {
                let s = self.plan.symbols.get(entry.symbol_base as usize + index)?;
                if s.stub == u32::MAX {
                    return None;
                }
                Some(Stub {
                    target: entry.object.symbol(index).ok()?.name,
                    address: stub_base.wrapping_add(u64::from(s.stub) * size),
                    size,
                })
            })
        })
    }

    /// Every global (or weak) symbol defined in the image.
    pub fn globals(&self) -> impl Iterator<Item = Global<'a>> + '_ {
        self.plan.objects.iter().flat_map(move |entry| {
            (1..entry.object.symbol_count()).filter_map(move |index| {
                let sym = entry.object.symbol(index).ok()?;
                if !sym.is_defined() || !sym.is_global() || sym.name.is_empty() {
                    return None;
                }
                let flat = entry.symbol_base as usize + index;
                let s = self.plan.symbols.get(flat)?;
                if matches!(s.def, Definition::Unloaded | Definition::Nothing) {
                    return None;
                }
                Some(Global {
                    name: sym.name,
                    address: s.address,
                    size: sym.size,
                    is_function: sym.kind == object::elf::STT_FUNC,
                    other: sym.other,
                })
            })
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
