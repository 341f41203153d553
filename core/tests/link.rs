//! The core on real clang output, linked into a buffer at chosen target addresses: stubs,
//! GOT slots, layout, cross-object symbols, and the errors a user can meet.

mod common;
use common::clang_object;

use elfjit_core::elf::Object;
use elfjit_core::plan::SegmentKind;
use elfjit_core::{Error, NoSymbols, Plan, Range, RelocProblem, SliceBackend, Via};

const PAGE: u64 = 0x1000;

/// Compiles C for bare-metal x86_64.
fn compile(source: &str, extra: &[&str]) -> Vec<u8> {
    let mut args = vec![
        "--target=x86_64-none-unknown-elf",
        "-c",
        "-ffreestanding",
        "-fno-ident",
    ];
    args.extend_from_slice(extra);
    args.extend(["-x", "c"]);
    clang_object(&args, source.as_bytes())
}

fn pic(source: &str) -> Vec<u8> {
    compile(source, &["-O2", "-fPIC"])
}

/// Image bytes, every applied relocation, (stub count, offset), (GOT slots, offset).
type Linked = (
    Vec<u8>,
    Vec<elfjit_core::RelocRecord>,
    (u32, u64),
    (u32, u64),
);

/// Links `objects` at `base` into a fresh buffer.
fn link_at(
    objects: &[&[u8]],
    base: u64,
    resolve: &mut dyn FnMut(&[u8]) -> Option<u64>,
) -> Result<Linked, Error> {
    let mut plan = Plan::new(objects, PAGE)?;
    let mut buf = vec![0x55u8; plan.image_size() as usize];
    let mut backend = SliceBackend::new(&mut buf, base, PAGE);
    let mut records = Vec::new();
    let (stubs, got) = (plan.stubs(), plan.got());
    plan.link_observed(
        &mut backend,
        resolve,
        &mut |r: &elfjit_core::RelocRecord| records.push(*r),
    )?;
    Ok((buf, records, stubs, got))
}

fn read_i32(b: &[u8], at: u64) -> i32 {
    i32::from_le_bytes(b[at as usize..at as usize + 4].try_into().unwrap())
}
fn read_u64(b: &[u8], at: u64) -> u64 {
    u64::from_le_bytes(b[at as usize..at as usize + 8].try_into().unwrap())
}

const FAR_CALLS: &str = r#"
extern int far_fn(int);
int twice(int x) { return far_fn(x) + far_fn(x + 1) * 3; }
"#;

#[test]
fn far_external_calls_share_one_stub() {
    let object = compile(FAR_CALLS, &["-O1", "-fPIC"]);
    let base = 0x40_0000;
    let far = 0x7fff_1234_5000;
    let (image, records, (stubs, stub_offset), _) =
        link_at(&[&object], base, &mut |n| (n == b"far_fn").then_some(far)).unwrap();
    assert_eq!(stubs, 1, "two call sites, one target, one stub");
    let calls: Vec<_> = records
        .iter()
        .filter(|r| r.applied.via == Via::Stub)
        .collect();
    assert_eq!(calls.len(), 2, "{records:?}");
    for call in calls {
        let place = call.place_address - base;
        // call rel32: target = P + 4 + disp (the addend is -4).
        let target = (call.place_address as i64 + 4 + read_i32(&image, place) as i64) as u64;
        assert_eq!(target, base + stub_offset);
    }
    assert_eq!(
        &image[stub_offset as usize..stub_offset as usize + 6],
        &[0xff, 0x25, 0, 0, 0, 0]
    );
    assert_eq!(read_u64(&image, stub_offset + 6), far);
}

#[test]
fn near_external_calls_are_direct() {
    let object = compile(FAR_CALLS, &["-O1", "-fPIC"]);
    let base = 0x40_0000;
    let (_, records, _, _) = link_at(&[&object], base, &mut |_| Some(base + 0x10_0000)).unwrap();
    assert!(
        records.iter().all(|r| r.applied.via == Via::Direct),
        "{records:?}"
    );
}

#[test]
fn got_slots_hold_symbol_addresses() {
    let src =
        "int counter; extern int ext_var; int bump(void) { counter++; return counter + ext_var; }";
    let object = pic(src);
    let base = 0x1000_0000;
    let ext = 0x2000_0000;
    let (image, records, _, (slots, got)) =
        link_at(&[&object], base, &mut |n| (n == b"ext_var").then_some(ext)).unwrap();
    assert_eq!(slots, 2);
    let mut seen: Vec<u64> = (0..slots as u64)
        .map(|i| read_u64(&image, got + 8 * i))
        .collect();
    seen.sort();
    assert!(seen.contains(&ext), "{seen:x?}");
    let data = base
        + Plan::new(&[&object], PAGE)
            .unwrap()
            .segment(SegmentKind::Data)
            .offset;
    assert!(
        seen.contains(&data),
        "counter in .bss at the data segment start: {seen:x?}"
    );
    for r in records.iter().filter(|r| r.applied.via == Via::Got) {
        let disp = read_i32(&image, r.place_address - base) as i64;
        let g = (r.place_address as i64 + disp - r.rela.addend) as u64;
        assert!(
            g >= base + got && g < base + got + 8 * slots as u64,
            "GOTPCREL points into the GOT"
        );
    }
}

#[test]
fn segments_are_page_aligned_disjoint_and_hold_their_sections() {
    let src = r#"
        static const char msg[] = "hello";
        int table[64] = {1, 2, 3};
        static int scratch[1000];
        const double k[4] = {1.5, 2.5, 3.5, 4.5};
        double f(int i) { scratch[i] = table[i] + msg[i % 5]; return k[i & 3] * scratch[i]; }
    "#;
    let object = pic(src);
    let plan = Plan::new(&[&object], PAGE).unwrap();
    let mut end = 0;
    for kind in SegmentKind::ALL {
        let s = plan.segment(kind);
        assert_eq!(s.offset % PAGE, 0);
        assert_eq!(s.mapped % PAGE, 0);
        assert!(s.size <= s.mapped);
        assert!(s.offset >= end, "segments in order, no overlap");
        end = s.offset + s.mapped;
    }
    assert_eq!(plan.image_size(), end);
    let parsed = Object::parse(&object).unwrap();
    for index in 0..parsed.section_count() {
        let section = parsed.section(index).unwrap();
        let place = plan.section_place(0, index).unwrap();
        assert_eq!(
            place.loaded,
            section.is_alloc(),
            "{}",
            String::from_utf8_lossy(section.name)
        );
        if place.loaded {
            let seg = plan.segment(place.segment);
            assert!(
                place.offset >= seg.offset && place.offset + place.size <= seg.offset + seg.size
            );
            assert_eq!(place.offset % section.align, 0);
        }
    }
}

#[test]
fn objects_link_against_each_other() {
    let a = pic("int helper(int x); int entry(int x) { return helper(x) * 2; }");
    let b = pic("int helper(int x) { return x + 7; }");
    let base = 0x80_0000;
    // The resolver is never asked for `helper`: it is defined in the other object.
    let (_, records, (stubs, _), _) =
        link_at(&[&a, &b], base, &mut |n| panic!("asked for {n:?}")).unwrap();
    assert_eq!(stubs, 0);
    let mut plan = Plan::new(&[&a, &b], PAGE).unwrap();
    let mut buf = vec![0; plan.image_size() as usize];
    let image = plan
        .link(&mut SliceBackend::new(&mut buf, base, PAGE), &mut NoSymbols)
        .unwrap();
    let helper = image.symbol("helper").unwrap();
    assert!(records.iter().any(|r| r.symbol_address == helper));
    let names: Vec<_> = image
        .functions()
        .map(|g| String::from_utf8_lossy(g.name).into_owned())
        .collect();
    assert_eq!(names, ["entry", "helper"]);
}

#[test]
fn common_symbols_are_zeroed_in_data() {
    let object = compile(
        "int shared_counter; int get(void) { return shared_counter; }",
        &["-O2", "-fPIC", "-fcommon"],
    );
    let mut plan = Plan::new(&[&object], PAGE).unwrap();
    let data = plan.segment(SegmentKind::Data);
    assert!(data.size >= 4);
    let mut buf = vec![0xffu8; plan.image_size() as usize];
    let image = plan
        .link(
            &mut SliceBackend::new(&mut buf, 0x1_0000, PAGE),
            &mut NoSymbols,
        )
        .unwrap();
    let addr = image.symbol("shared_counter").unwrap();
    assert!(addr >= 0x1_0000 + data.offset && addr < 0x1_0000 + data.offset + data.size);
    let off = (addr - 0x1_0000) as usize;
    assert_eq!(&buf[off..off + 4], &[0; 4]);
}

#[test]
fn undefined_symbol_is_named() {
    let object =
        pic("extern void no_such_function_xyz(void); void k(void) { no_such_function_xyz(); }");
    let err = link_at(&[&object], 0x10000, &mut |_| None).unwrap_err();
    assert!(matches!(err, Error::UndefinedSymbol { .. }));
    assert!(err.to_string().contains("no_such_function_xyz"), "{err}");
}

#[test]
fn weak_undefined_symbol_resolves_to_zero() {
    let object = pic("extern int maybe(void) __attribute__((weak)); int k(void) { return maybe ? maybe() : -1; }");
    assert!(link_at(&[&object], 0x10000, &mut |_| None).is_ok());
}

#[test]
fn out_of_range_reference_is_an_error_naming_everything() {
    // Non-PIC code reaches data with a 32-bit PC-relative field: 4 GiB away cannot fit.
    let object = compile(
        "extern int far_data; int k(void) { return far_data; }",
        &["-O2", "-fno-pic"],
    );
    let err = link_at(&[&object], 0x10000, &mut |_| Some(0x7f00_0000_0000)).unwrap_err();
    let Error::Relocation(r) = err else {
        panic!("{err}")
    };
    assert!(matches!(r.problem, RelocProblem::Overflow { range } if range == Range::signed(32)));
    let text = err.to_string();
    let value = format!("{:#x}", r.value);
    for part in ["x86_64", "R_X86_64_PC32", ".text", "far_data", &value] {
        assert!(text.contains(part), "{part} missing from: {text}");
    }
}

#[test]
fn tls_and_constructors_are_rejected_by_name() {
    let tls = pic("__thread int t; int k(void) { return t; }");
    let err = Plan::new(&[&tls], PAGE).err().unwrap();
    assert!(err.to_string().contains("thread-local"), "{err}");
    // clang drops `__attribute__((constructor))` for the bare-metal triple; name the
    // section as a hand-written runtime would.
    let ctor = pic("int x; static void init(void) { x = 1; } \
         __attribute__((section(\".init_array\"), used)) static void (*p)(void) = init;");
    let err = Plan::new(&[&ctor], PAGE).err().unwrap();
    assert!(err.to_string().contains("constructors"), "{err}");
}

#[test]
fn too_many_symbols_is_a_capacity_error() {
    let mut src = String::new();
    for i in 0..(elfjit_core::plan::MAX_SYMBOLS + 10) {
        src.push_str(&format!("int f{i}(void) {{ return {i}; }}\n"));
    }
    let object = compile(&src, &["-O0"]);
    let err = Plan::new(&[&object], PAGE).err().unwrap();
    assert!(
        matches!(
            err,
            Error::CapacityExceeded {
                table: "symbols",
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn every_truncation_and_byte_flip_is_an_error_or_a_clean_link() {
    let object = pic(r#"
        extern float expf(float);
        static const int lut[8] = {3, 1, 4, 1, 5, 9, 2, 6};
        int g;
        float k(float x, int i) { g += lut[i & 7]; return expf(x) + g; }
    "#);
    let resolve = &mut |_: &[u8]| Some(0x7000_0000u64);
    assert!(link_at(&[&object], 0x10000, resolve).is_ok());
    for len in 0..object.len() {
        assert!(
            link_at(&[&object[..len]], 0x10000, resolve).is_err(),
            "truncated at {len}"
        );
    }
    // Flip each byte of the header, the section table and the symbol/relocation tables.
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    for at in 0..object.len() {
        for _ in 0..3 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let mut bad = object.clone();
            bad[at] ^= (state as u8) | 1;
            // Must not panic; either outcome is fine for a flipped code or data byte.
            let _ = link_at(&[&bad], 0x10000, resolve);
        }
    }
}

/// Patches the `field` (offset within the header, width) of the first section header of
/// type `kind`.
fn patch_section(object: &mut [u8], kind: u32, field: usize, width: usize, value: u64) {
    let shoff = u64::from_le_bytes(object[0x28..0x30].try_into().unwrap()) as usize;
    let shnum = u16::from_le_bytes(object[0x3c..0x3e].try_into().unwrap()) as usize;
    for i in 0..shnum {
        let at = shoff + i * 64;
        if u32::from_le_bytes(object[at + 4..at + 8].try_into().unwrap()) == kind {
            object[at + field..at + field + width].copy_from_slice(&value.to_le_bytes()[..width]);
            return;
        }
    }
    panic!("no section of type {kind}");
}

#[test]
fn huge_or_bogus_sizes_are_rejected_before_any_allocation() {
    let object =
        pic("static int scratch[16]; int k(int i) { scratch[i & 15] += i; return scratch[0]; }");
    let (size, offset) = (0x20, 0x18);
    let cases: [(u32, usize, u64, &str); 5] = [
        (object::elf::SHT_NOBITS.0, size, 1 << 40, "too large"),
        (object::elf::SHT_SYMTAB.0, size, 1 << 40, "past the end"),
        (object::elf::SHT_RELA.0, size, u64::MAX - 7, "past the end"),
        (
            object::elf::SHT_RELA.0,
            offset,
            u64::MAX - 16,
            "past the end",
        ),
        (object::elf::SHT_PROGBITS.0, size, 1 << 33, "past the end"),
    ];
    for (kind, field, value, expect) in cases {
        let mut bad = object.clone();
        patch_section(&mut bad, kind, field, 8, value);
        // The backend would record any allocation; the plan must fail first.
        let err = Plan::new(&[&bad], PAGE).err().unwrap();
        assert!(
            err.to_string().contains(expect),
            "{kind}/{field:#x}={value:#x}: {err}"
        );
    }
    // A section count pointing past the end of the file.
    let mut bad = object.clone();
    bad[0x3c..0x3e].copy_from_slice(&0xfff0u16.to_le_bytes());
    assert!(matches!(
        Plan::new(&[&bad], PAGE),
        Err(Error::Malformed { .. })
    ));
}

#[test]
fn writable_code_is_refused() {
    let object = pic(
        "__asm__(\".section .wx,\\\"awx\\\",@progbits\\n.byte 0xc3\\n.text\");\n\
         int k(void) { return 1; }",
    );
    let err = Plan::new(&[&object], PAGE).err().unwrap();
    assert!(matches!(err, Error::UnsupportedSection { .. }), "{err}");
    assert!(err.to_string().contains("W+X"), "{err}");
    assert!(err.to_string().contains(".wx"), "{err}");
}

/// A plan refilled in place (`Plan::replan`, after another object and after an error)
/// links exactly like a fresh `Plan::new`.
#[test]
fn replanned_in_place_links_like_a_fresh_plan() {
    let a = pic(
        "extern int ext(int); static const int t[4] = {1, 2, 3, 4}; int g;\n\
                 int f(int x) { g += x; return ext(x) + t[x & 3]; }",
    );
    let b = pic("int other(int x) { return x * 3; } int h[100];");
    let resolve = |name: &[u8]| (name == b"ext").then_some(0x7f00_1234_0000u64);
    let fresh = link_at(&[&a], 0x7f00_0000_0000, &mut { resolve }).unwrap();

    let mut plan = Plan::empty();
    plan.replan(&[&b], PAGE).unwrap();
    assert!(plan
        .replan(&[b"not an ELF object".as_slice()], PAGE)
        .is_err());
    plan.replan(&[&a], PAGE).unwrap();
    assert_eq!((plan.stubs(), plan.got()), (fresh.2, fresh.3));
    let mut buf = vec![0x55u8; plan.image_size() as usize];
    let mut backend = SliceBackend::new(&mut buf, 0x7f00_0000_0000, PAGE);
    let mut records = Vec::new();
    plan.link_observed(
        &mut backend,
        &mut { resolve },
        &mut |r: &elfjit_core::RelocRecord| records.push(*r),
    )
    .unwrap();
    assert_eq!(buf, fresh.0);
    assert_eq!(records.len(), fresh.1.len());
}
