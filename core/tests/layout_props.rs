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

/// Records what the linker asks of its backend.
struct Recording<'b> {
    inner: SliceBackend<'b>,
    layouts: Vec<Layout>,
    publishes: usize,
}

impl MemoryBackend for Recording<'_> {
    fn allocate(&mut self, layout: &Layout) -> Result<Placement, elfjit_core::BackendError> {
        self.layouts.push(*layout);
        self.inner.allocate(layout)
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
    fn layout_invariants(specs in specs(), page_log2 in prop::sample::select(vec![12u32, 14, 16]), base_pages in 0u64..(1 << 30)) {
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
        let mut backend = Recording { inner: SliceBackend::new(&mut buffer, base, page), layouts: Vec::new(), publishes: 0 };
        let image = plan.link(&mut backend, &mut NoSymbols).unwrap();
        for (i, spec) in specs.iter().enumerate() {
            let address = image.symbol(&format!("sym{i}")).unwrap();
            prop_assert!(address >= base && address <= base + end);
            let _ = spec;
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
    }
}
