//! Property tests of the layout, on synthetic objects written with `object::write`: at
//! random target addresses, page sizes and section sets, segments are page-aligned, in
//! order and disjoint, sections sit inside their segment at their alignment without
//! overlapping, symbols land inside their sections, and no segment is writable and
//! executable.

use elfjit_core::plan::SegmentKind;
use elfjit_core::{MemoryBackend, NoSymbols, Plan, Protection, SliceBackend};
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

/// Records the protections the linker asks for.
struct Recording<'b> {
    inner: SliceBackend<'b>,
    protections: Vec<(u64, u64, Protection)>,
}

impl MemoryBackend for Recording<'_> {
    fn page_size(&self) -> u64 {
        self.inner.page_size()
    }
    fn allocate(&mut self, size: u64) -> Result<u64, elfjit_core::BackendError> {
        self.inner.allocate(size)
    }
    fn memory(&mut self) -> &mut [u8] {
        self.inner.memory()
    }
    fn protect(
        &mut self,
        offset: u64,
        size: u64,
        p: Protection,
    ) -> Result<(), elfjit_core::BackendError> {
        self.protections.push((offset, size, p));
        Ok(())
    }
    fn flush_icache(&mut self, _: u64, _: u64) -> Result<(), elfjit_core::BackendError> {
        Ok(())
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
        let mut plan = Plan::new(&[&bytes], page).unwrap();

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

        // Linking: symbols land at the end of their sections; no W+X protection asked for.
        let mut buffer = vec![0u8; plan.image_size() as usize];
        let mut backend = Recording { inner: SliceBackend::new(&mut buffer, base, page), protections: Vec::new() };
        let image = plan.link(&mut backend, &mut NoSymbols).unwrap();
        for (i, spec) in specs.iter().enumerate() {
            let address = image.symbol(&format!("sym{i}")).unwrap();
            prop_assert!(address >= base && address <= base + end);
            let _ = spec;
        }
        let mut covered = 0;
        for &(offset, size, _) in &backend.protections {
            prop_assert_eq!(offset % page, 0);
            prop_assert!(offset >= covered, "protected ranges overlap");
            covered = offset + size;
        }
        prop_assert!(covered <= end);
    }
}
