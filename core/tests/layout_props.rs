//! Property tests of the layout, on synthetic objects written with `object::write`: at
//! random target addresses, page sizes and section sets, segments are page-aligned, in
//! order and disjoint, sections sit inside their segment at their alignment without
//! overlapping, symbols land inside their sections, and no segment is writable and
//! executable.

use elfjit_core::plan::SegmentKind;
use elfjit_core::{Layout, MemoryBackend, NoSymbols, Placement, Plan, Protection, SliceBackend};
use object::write::{Object, Symbol, SymbolSection};
use object::{
    Architecture, BinaryFormat, Endianness, SectionKind, SymbolFlags, SymbolKind, SymbolScope,
};
use proptest::prelude::*;

#[derive(Clone, Debug)]
struct Spec {
    kind: u8,
    size: u64,
    align_log2: u32,
}

fn section_kind(k: u8) -> SectionKind {
    match k % 5 {
        0 => SectionKind::Text,
        1 => SectionKind::ReadOnlyData,
        2 => SectionKind::ReadOnlyString,
        3 => SectionKind::Data,
        _ => SectionKind::UninitializedData,
    }
}

/// An x86_64 object with the given sections, each with a global symbol at its end.
fn build(specs: &[Spec]) -> Vec<u8> {
    let mut obj = Object::new(BinaryFormat::Elf, Architecture::X86_64, Endianness::Little);
    for (i, spec) in specs.iter().enumerate() {
        let kind = section_kind(spec.kind);
        let name = format!(".s{i}").into_bytes();
        let id = obj.add_section(Vec::new(), name, kind);
        let align = 1u64 << spec.align_log2;
        if kind == SectionKind::UninitializedData {
            obj.append_section_bss(id, spec.size, align);
        } else {
            obj.append_section_data(id, &vec![0xa5; spec.size as usize], align);
        }
        obj.add_symbol(Symbol {
            name: format!("sym{i}").into_bytes(),
            value: spec.size,
            size: 0,
            kind: if kind == SectionKind::Text {
                SymbolKind::Text
            } else {
                SymbolKind::Data
            },
            scope: SymbolScope::Dynamic,
            weak: false,
            section: SymbolSection::Section(id),
            flags: SymbolFlags::None,
        });
    }
    obj.write().unwrap()
}

/// Records what the linker asks of its backend. With `zero_empty` it reports 0 for empty
/// segments, as the mmap and arena backends do, instead of the slice backend's address.
struct Recording<'b> {
    inner: SliceBackend<'b>,
    zero_empty: bool,
    layouts: Vec<Layout>,
    publishes: usize,
}

impl MemoryBackend for Recording<'_> {
    fn allocate(&mut self, layout: &Layout) -> Result<Placement, elfjit_core::BackendError> {
        self.layouts.push(*layout);
        let placement = self.inner.allocate(layout)?;
        if !self.zero_empty {
            return Ok(placement);
        }
        Ok(Placement::new(SegmentKind::ALL.map(|kind| {
            if layout.get(kind).size == 0 {
                0
            } else {
                placement.target(kind)
            }
        })))
    }
    fn segment_mut(&mut self, kind: SegmentKind) -> Option<&mut [u8]> {
        assert_eq!(self.publishes, 0, "written after publishing");
        self.inner.segment_mut(kind)
    }
    fn publish(&mut self) -> Result<(), elfjit_core::BackendError> {
        self.publishes += 1;
        self.inner.publish()
    }
}

fn specs() -> impl Strategy<Value = Vec<Spec>> {
    prop::collection::vec(
        (any::<u8>(), 0u64..20_000, 0u32..13).prop_map(|(kind, size, align_log2)| Spec {
            kind,
            size,
            align_log2,
        }),
        1..12,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn layout_invariants(specs in specs(), page_log2 in prop::sample::select(vec![12u32, 14, 16]), base_pages in 0u64..(1 << 30), zero_empty in any::<bool>()) {
        let page = 1u64 << page_log2;
        let base = base_pages * page;
        let bytes = build(&specs);
        let plan = Plan::new(&[&bytes], page).unwrap();

        // Segments: page-aligned, in order, disjoint, covering the image.
        let mut end = 0;
        for kind in SegmentKind::ALL {
            let s = plan.segment(kind);
            prop_assert_eq!(s.offset % page, 0);
            prop_assert_eq!(s.mapped % page, 0);
            prop_assert!(s.size <= s.mapped);
            prop_assert!(s.offset >= end);
            end = s.offset + s.mapped;
        }
        prop_assert_eq!(plan.image_size(), end);

        // Sections: inside their segment, aligned, not overlapping each other.
        let parsed = elfjit_core::elf::Object::parse(&bytes).unwrap();
        let mut placed: Vec<(u64, u64)> = Vec::new();
        for index in 0..parsed.section_count() {
            let section = parsed.section(index).unwrap();
            let place = plan.section_place(0, index).unwrap();
            prop_assert_eq!(place.loaded, section.is_alloc());
            if !place.loaded {
                continue;
            }
            let seg = plan.segment(place.segment);
            prop_assert!(place.offset >= seg.offset);
            prop_assert!(place.offset + place.size <= seg.offset + seg.size);
            prop_assert_eq!((base + place.offset) % section.align, 0);
            let expected = if section.flags.contains(object::elf::SHF_EXECINSTR) {
                SegmentKind::Code
            } else if section.flags.contains(object::elf::SHF_WRITE) {
                SegmentKind::Data
            } else {
                SegmentKind::ReadOnly
            };
            prop_assert_eq!(place.segment, expected);
            for &(o, s) in &placed {
                prop_assert!(place.offset + place.size <= o || o + s <= place.offset || place.size == 0 || s == 0);
            }
            placed.push((place.offset, place.size));
        }

        // Linking: one allocation of exactly the plan's layout, one publish; symbols land
        // inside the image; no segment ends up writable and executable.
        let mut buffer = vec![0u8; plan.image_size() as usize];
        let mut backend = Recording { inner: SliceBackend::new(&mut buffer, base, page), zero_empty, layouts: Vec::new(), publishes: 0 };
        let image = plan.link(&mut backend, &mut NoSymbols).unwrap();
        for i in 0..specs.len() {
            let address = image.symbol(&format!("sym{i}")).unwrap();
            if end == 0 && zero_empty {
                // No bytes and no address from the backend: nothing to anchor to.
                prop_assert_eq!(address, 0);
            } else {
                prop_assert!(address >= base && address <= base + end, "sym{} at {:#x}, image [{:#x}, {:#x}]", i, address, base, base + end);
            }
        }
        let plan = image.plan();
        for kind in SegmentKind::ALL {
            let request = plan.layout().get(kind);
            prop_assert_eq!(request.size, plan.segment(kind).size);
            let target = image.placement().target(kind);
            if request.size != 0 {
                prop_assert_eq!(target, base + plan.segment(kind).offset);
                prop_assert_eq!(target % request.align, 0);
            }
            let expected = match kind {
                SegmentKind::Code => Protection::ReadExecute,
                SegmentKind::ReadOnly => Protection::ReadOnly,
                SegmentKind::Data => Protection::ReadWrite,
            };
            prop_assert_eq!(kind.protection(), expected);
        }
        prop_assert_eq!(&backend.layouts, &vec![plan.layout()]);
        prop_assert_eq!(backend.publishes, 1);

        // Into memory that is not known to read as zero the linker writes every byte of
        // each segment's size: a buffer full of leftovers links to the same bytes.
        let mut dirty = vec![0xa5u8; buffer.len()];
        let mut dirty_backend = SliceBackend::new(&mut dirty, base, page);
        plan.link(&mut dirty_backend, &mut NoSymbols).unwrap();
        for kind in SegmentKind::ALL {
            let s = plan.segment(kind);
            let range = s.offset as usize..(s.offset + s.size) as usize;
            prop_assert!(dirty[range.clone()] == buffer[range], "{:?} differs", kind);
        }
    }
}

/// Links `specs` at `base` and returns each symbol's address.
fn link_symbols(specs: &[Spec], base: u64, zero_empty: bool) -> Vec<u64> {
    let bytes = build(specs);
    let plan = Plan::new(&[&bytes], 0x1000).unwrap();
    let mut buffer = vec![0u8; plan.image_size() as usize];
    let mut backend = Recording {
        inner: SliceBackend::new(&mut buffer, base, 0x1000),
        zero_empty,
        layouts: Vec::new(),
        publishes: 0,
    };
    let image = plan.link(&mut backend, &mut NoSymbols).unwrap();
    (0..specs.len())
        .map(|i| image.symbol(&format!("sym{i}")).unwrap())
        .collect()
}

/// The case proptest once found: an object whose only section is empty. Its image has no
/// bytes, and its symbol gets the backend's address for it.
#[test]
fn symbol_of_an_empty_image_is_at_its_base() {
    let empty = [Spec {
        kind: 0,
        size: 0,
        align_log2: 0,
    }];
    assert_eq!(link_symbols(&empty, 0x40_0000, false), vec![0x40_0000]);
    assert_eq!(link_symbols(&empty, 0x40_0000, true), vec![0]);
}

/// A symbol in an empty read-only section, beside code, is at the code's start when the
/// backend gives the empty segment no address: never NULL.
#[test]
fn symbol_of_an_empty_segment_is_anchored_in_the_image() {
    let specs = [
        Spec {
            kind: 0,
            size: 64,
            align_log2: 4,
        },
        Spec {
            kind: 1,
            size: 0,
            align_log2: 0,
        },
    ];
    assert_eq!(
        link_symbols(&specs, 0x40_0000, true),
        vec![0x40_0000 + 64, 0x40_0000]
    );
    let sliced = link_symbols(&specs, 0x40_0000, false);
    assert_eq!(sliced[0], 0x40_0000 + 64);
    assert!(sliced[1] >= 0x40_0000 && sliced[1] <= 0x40_0000 + 0x1000);
}
