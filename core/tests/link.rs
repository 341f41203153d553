//! The core on real clang output, linked into a buffer at chosen target addresses: stubs,
//! GOT slots, layout, cross-object symbols, and the errors a user can meet.

mod common;
use common::clang_object;

use elfjit_core::elf::Object;
use elfjit_core::plan::SegmentKind;
use elfjit_core::plan::{Input, ObjectEntry, PlanSizes};
use elfjit_core::PlanBuffers;
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
    let plan = Plan::new(objects, PAGE)?;
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
    let plan = Plan::new(&[&a, &b], PAGE).unwrap();
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
    let plan = Plan::new(&[&object], PAGE).unwrap();
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

/// Buffers for a lent-storage plan as large as `sizes` asks, but one entry short in table
/// `short` if given.
fn short_buffers(sizes: PlanSizes, short: Option<&str>) -> PlanBuffers {
    let less = |table: &str, n: usize| if short == Some(table) { n - 1 } else { n };
    PlanBuffers::new(PlanSizes {
        objects: sizes.objects,
        sections: less("sections", sizes.sections),
        symbols: less("symbols", sizes.symbols),
        names: less("names", sizes.names),
        high_halves: less("high_halves", sizes.high_halves),
        low_halves: less("low_halves", sizes.low_halves),
    })
}

/// No table has a fixed capacity: 2,058 symbols plan with allocated tables, and caller
/// storage one entry short of what the counting pass says is a typed error naming the
/// table and the size needed.
#[test]
fn too_many_symbols_is_a_storage_error_naming_the_size_needed() {
    let mut src = String::new();
    for i in 0..2058 {
        src.push_str(&format!("int f{i}(void) {{ return {i}; }}\n"));
    }
    let object = compile(&src, &["-O0"]);
    let plan = Plan::new(&[&object], PAGE).unwrap();
    let sizes = PlanSizes::count(&[&object]).unwrap();
    assert_eq!(plan.sizes(), sizes, "the counting pass is exact");
    assert!(sizes.symbols > 2058, "{sizes:?}");
    let mut buffers = short_buffers(sizes, Some("symbols"));
    let mut objects = [ObjectEntry::EMPTY];
    let err = Plan::new_in(&[&object], PAGE, buffers.lend(&mut objects))
        .err()
        .unwrap();
    assert_eq!(
        err,
        Error::StorageTooSmall {
            table: "symbols",
            needed: sizes.symbols,
            provided: sizes.symbols - 1
        },
        "{err}"
    );
    assert!(err.to_string().contains("symbols"), "{err}");
    assert!(
        err.to_string().contains(&sizes.symbols.to_string()),
        "{err}"
    );
}

/// A symbol entry is what the plan's scan and the link read once per relocation, in the
/// order the relocations name symbols: its size is the working set of both loops, and a
/// caller lending storage pays it per symbol.
#[test]
fn a_symbol_entry_is_48_bytes() {
    assert_eq!(std::mem::size_of::<elfjit_core::plan::SymbolEntry>(), 48);
}

/// Lent storage of exactly the counted sizes plans every table; any table one entry short
/// is an error naming that table (on riscv64, where pairs have tables too).
#[test]
fn lent_storage_of_the_counted_size_is_enough_and_one_less_is_named() {
    let riscv = clang_object(
        &[
            "--target=riscv64-unknown-elf",
            "-march=rv64gc",
            "-mabi=lp64d",
            "-c",
            "-O2",
            "-fPIC",
            "-ffreestanding",
            "-x",
            "c",
        ],
        b"static const int t[4] = {1, 2, 3, 4}; extern int ext(int); int g;\n\
          int f(int x) { g += t[x & 3]; return ext(g); }",
    );
    for objects in [vec![&riscv[..]], vec![&pic(FAR_CALLS)[..]]] {
        let sizes = PlanSizes::count(&objects).unwrap();
        let owned = Plan::new(&objects, PAGE).unwrap();
        assert_eq!(owned.sizes(), sizes);
        let mut buffers = short_buffers(sizes, None);
        let mut entries = vec![ObjectEntry::EMPTY; objects.len()];
        let lent = Plan::new_in(&objects, PAGE, buffers.lend(&mut entries)).unwrap();
        assert_eq!(lent.sizes(), sizes);
        assert_eq!((lent.got(), lent.stubs()), (owned.got(), owned.stubs()));
        for table in [
            "objects",
            "sections",
            "symbols",
            "names",
            "high_halves",
            "low_halves",
        ] {
            let needed = match table {
                "objects" => sizes.objects,
                "sections" => sizes.sections,
                "symbols" => sizes.symbols,
                "names" => sizes.names,
                "high_halves" => sizes.high_halves,
                _ => sizes.low_halves,
            };
            if needed == 0 {
                continue;
            }
            let mut buffers = short_buffers(sizes, Some(table));
            let short = usize::from(table == "objects");
            let mut entries = vec![ObjectEntry::EMPTY; objects.len() - short];
            let storage = buffers.lend(&mut entries);
            let err = Plan::new_in(&objects, PAGE, storage).err();
            assert!(
                matches!(err, Some(Error::StorageTooSmall { table: t, needed: n, .. }) if t == table && n == needed),
                "{table}: {err:?}"
            );
        }
    }
    // One object: only its external (`ext`) is indexed, in 2 slots. Two objects: names
    // cross objects, so the definitions (`f`, `g`) are indexed too: 6 names, 16 slots.
    assert_eq!(PlanSizes::count(&[&riscv]).unwrap().names, 2);
    assert_eq!(PlanSizes::count(&[&riscv, &riscv]).unwrap().names, 16);
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

/// An object with an external (`ext`), read-only data and data; and one without.
const USES_EXT: &str = "extern int ext(int); static const int t[4] = {1, 2, 3, 4}; int g;\n\
                        int f(int x) { g += x; return ext(x) + t[x & 3]; }";
const OTHER: &str = "int other(int x) { return x * 3; } int h[100];";
const EXT: u64 = 0x7f00_1234_0000;

/// A resolver that knows only `ext`, at `address`.
fn ext_at(address: u64) -> impl Fn(&[u8]) -> Option<u64> + Copy {
    move |name: &[u8]| (name == b"ext").then_some(address)
}

/// Linking reads the plan only: one plan links twice at different bases, each link is
/// byte-for-byte what a fresh plan links there, and the plan's layout is unchanged.
#[test]
fn one_plan_links_twice_at_different_bases() {
    let (a, b) = (pic(USES_EXT), pic(OTHER));
    let resolve = ext_at(EXT);
    let (low, high) = (0x7f00_0000_0000u64, 0x7f00_4000_0000u64);
    let fresh_low = link_at(&[&a, &b], low, &mut { resolve }).unwrap();
    let fresh_high = link_at(&[&a, &b], high, &mut { resolve }).unwrap();
    assert_ne!(fresh_low.0, fresh_high.0, "the bases show in the bytes");

    let plan = Plan::new(&[&a, &b], PAGE).unwrap();
    let before = (plan.layout(), plan.got(), plan.stubs(), plan.sizes());
    for (base, fresh) in [(low, &fresh_low), (high, &fresh_high), (low, &fresh_low)] {
        let mut buf = vec![0x55u8; plan.image_size() as usize];
        let mut records = Vec::new();
        let image = plan
            .link_observed(
                &mut SliceBackend::new(&mut buf, base, PAGE),
                &mut { resolve },
                &mut |r: &elfjit_core::RelocRecord| records.push(*r),
            )
            .unwrap();
        let f = image.symbol("f").unwrap();
        assert!(f >= base && f < base + plan.image_size(), "{f:#x}");
        assert_eq!(buf, fresh.0, "base {base:#x}");
        assert_eq!(records.len(), fresh.1.len());
        assert_eq!((plan.stubs(), plan.got()), (fresh.2, fresh.3));
    }
    assert_eq!(
        (plan.layout(), plan.got(), plan.stubs(), plan.sizes()),
        before
    );

    // And at once, from two threads: a plan is shared, not copied.
    std::thread::scope(|scope| {
        for (base, fresh) in [(low, &fresh_low), (high, &fresh_high)] {
            let plan = &plan;
            scope.spawn(move || {
                let mut buf = vec![0x55u8; plan.image_size() as usize];
                let mut externals = vec![0; plan.external_count()];
                plan.link_in(
                    &mut SliceBackend::new(&mut buf, base, PAGE),
                    &mut { resolve },
                    &mut externals,
                )
                .unwrap();
                assert_eq!(buf, fresh.0);
                assert_eq!(externals, [EXT]);
            });
        }
    });
}

/// Lent storage is reused from one plan to the next, after another object and after an
/// error, and links exactly like a fresh `Plan::new`; the externals scratch is checked.
#[test]
fn reused_lent_storage_links_like_a_fresh_plan() {
    let (a, b) = (pic(USES_EXT), pic(OTHER));
    let resolve = ext_at(EXT);
    let fresh = link_at(&[&a], 0x7f00_0000_0000, &mut { resolve }).unwrap();

    let mut buffers = PlanBuffers::new(PlanSizes {
        objects: 1,
        sections: 64,
        symbols: 256,
        names: 64,
        high_halves: 0,
        low_halves: 0,
    });
    {
        let mut objects = [ObjectEntry::EMPTY];
        Plan::new_in(&[&b], PAGE, buffers.lend(&mut objects)).unwrap();
    }
    {
        let mut objects = [ObjectEntry::EMPTY];
        let bad = Plan::new_in(
            &[b"not an ELF object".as_slice()],
            PAGE,
            buffers.lend(&mut objects),
        );
        assert!(bad.is_err());
    }
    let mut objects = [ObjectEntry::EMPTY];
    let plan = Plan::new_in(&[&a], PAGE, buffers.lend(&mut objects)).unwrap();
    assert_eq!((plan.stubs(), plan.got()), (fresh.2, fresh.3));
    let mut buf = vec![0x55u8; plan.image_size() as usize];
    assert_eq!(plan.external_count(), 1);
    let err = plan
        .link_in(
            &mut SliceBackend::new(&mut buf, 0x7f00_0000_0000, PAGE),
            &mut { resolve },
            &mut [],
        )
        .err();
    assert_eq!(
        err,
        Some(Error::StorageTooSmall {
            table: "externals",
            needed: 1,
            provided: 0
        })
    );
    let mut records = Vec::new();
    let mut externals = [0u64; 4];
    let image = plan
        .link_observed_in(
            &mut SliceBackend::new(&mut buf, 0x7f00_0000_0000, PAGE),
            &mut { resolve },
            &mut externals,
            &mut |r: &elfjit_core::RelocRecord| records.push(*r),
        )
        .unwrap();
    let ext_index = (1..Object::parse(&a).unwrap().symbol_count())
        .find(|&i| Object::parse(&a).unwrap().symbol(i).unwrap().name == b"ext")
        .unwrap();
    assert_eq!(image.address_of(0, ext_index), Some(EXT));
    drop(image);
    assert_eq!(buf, fresh.0);
    assert_eq!(records.len(), fresh.1.len());
}

/// A relocation error names the object: its position always, its name when given.
#[test]
fn relocation_errors_name_the_object() {
    let ok = pic("int helper(int x) { return x; }");
    let far = compile(
        "extern int far_data; int k(void) { return far_data; }",
        &["-O2", "-fno-pic"],
    );
    let resolve = |_: &[u8]| Some(0x7f00_0000_0000u64);
    let plan = Plan::new_named(
        &[
            Input {
                name: "helper.o",
                bytes: &ok,
            },
            Input {
                name: "kernel.c",
                bytes: &far,
            },
        ],
        PAGE,
    )
    .unwrap();
    assert_eq!(plan.object_name(1), Some("kernel.c"));
    let mut buf = vec![0u8; plan.image_size() as usize];
    let err = plan
        .link(&mut SliceBackend::new(&mut buf, 0x10000, PAGE), &mut {
            resolve
        })
        .err()
        .unwrap();
    let Error::Relocation(r) = err else {
        panic!("{err}")
    };
    assert_eq!(r.object, 1);
    assert_eq!(
        r.object_name.map(|n| n.to_string()),
        Some("kernel.c".into())
    );
    assert!(err.to_string().starts_with("kernel.c: "), "{err}");
    // Unnamed: the position only.
    let err = link_at(&[&ok, &far], 0x10000, &mut { resolve }).unwrap_err();
    let Error::Relocation(r) = err else {
        panic!("{err}")
    };
    assert_eq!((r.object, r.object_name), (1, None));
    assert!(err.to_string().starts_with("object 1: "), "{err}");
}

/// Undefined symbols bind through the name index: to another object's definition (never
/// their own object's), and repeated externals across objects resolve once and share one
/// stub.
#[test]
fn cross_object_binding_rules() {
    let a = pic("extern int far_fn(int); int shared(int x) { return far_fn(x) + 1; }");
    let b = pic("extern int far_fn(int); extern int shared(int); int k(int x) { return far_fn(x) + shared(x); }");
    let c = pic("extern int far_fn(int); int k2(int x) { return far_fn(x) * 2; }");
    let mut asked = Vec::new();
    let far = 0x7fff_1234_5000u64;
    let (_, records, (stubs, _), _) = link_at(&[&a, &b, &c], 0x40_0000, &mut |n| {
        asked.push(n.to_vec());
        (n == b"far_fn").then_some(far)
    })
    .unwrap();
    assert_eq!(
        asked,
        [b"far_fn".to_vec()],
        "resolved once, `shared` found in `a`"
    );
    assert_eq!(stubs, 1, "one stub for three objects' calls");
    let to_far: Vec<_> = records.iter().filter(|r| r.symbol_address == far).collect();
    assert_eq!(to_far.len(), 3, "{records:?}");
    assert!(to_far.iter().all(|r| r.applied.via == Via::Stub));
}

/// The pre-scan visits every relocation of every loaded section (counted here straight from
/// the objects), on real objects of all five architectures.
#[test]
fn the_plan_counts_every_relocation_of_loaded_sections() {
    let seeds = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/seeds");
    let mut checked = 0;
    for entry in std::fs::read_dir(seeds).unwrap() {
        let bytes = std::fs::read(entry.unwrap().path()).unwrap();
        let object = Object::parse(&bytes).unwrap();
        let mut expected = 0u64;
        for index in 0..object.section_count() {
            let section = object.section(index).unwrap();
            if section.kind == object::elf::SHT_RELA
                && object.section(section.info as usize).unwrap().is_alloc()
            {
                expected += object.relocations(index).unwrap().count() as u64;
            }
        }
        let plan = Plan::new(&[&bytes], PAGE).unwrap();
        assert_eq!(plan.relocation_count(), expected);
        checked += 1;
    }
    assert!(checked >= 50, "{checked} seeds");
}

/// A table of pointers is one run of `R_X86_64_64` relocations, which the linker applies
/// in a loop compiled for that row; the relocations around it (another type) each go
/// through `apply`. Every relocation is applied once, in order, and every entry holds its
/// symbol's address.
#[test]
fn a_run_of_data_relocations_is_applied_entry_by_entry() {
    let object = compile(
        "extern char a, b, c;\n\
         char *table[7] = {&a, &b, &c, &a, &b + 1, &c + 2, &a + 3};\n\
         unsigned short mark = 7;\n\
         char *tail[2] = {&c, &a};\n",
        &["-O2", "-fno-pic"],
    );
    let at = |name: &[u8]| match name {
        b"a" => Some(0x1000),
        b"b" => Some(0x2000),
        b"c" => Some(0x3000),
        _ => None,
    };
    let (image, records, _, _) = link_at(&[&object], 0x40_0000, &mut |n| at(n)).unwrap();
    assert_eq!(relocation_types(&object).len(), 9);
    assert_eq!(records.len(), 9, "each relocation applied once");
    let offsets: Vec<u64> = records.iter().map(|r| r.rela.offset).collect();
    let mut sorted = offsets.clone();
    sorted.sort_unstable();
    assert_eq!(offsets, sorted, "in the object's order");
    let data = records[0].place_address - 0x40_0000 - records[0].rela.offset;
    let want = [0x1000, 0x2000, 0x3000, 0x1000, 0x2001, 0x3002, 0x1003];
    for (i, w) in want.iter().enumerate() {
        assert_eq!(read_u64(&image, data + 8 * i as u64), *w, "table[{i}]");
    }
    let tail = records[7].place_address - 0x40_0000;
    assert_eq!(
        (read_u64(&image, tail), read_u64(&image, tail + 8)),
        (0x3000, 0x1000)
    );
}

/// A value out of range in the middle of a run stops the link there, and the error names
/// that relocation, its symbol and its value (not the run's first).
#[test]
fn an_overflow_in_the_middle_of_a_run_names_that_relocation() {
    // C has no constant 32-bit address; the assembler's `.long` is R_X86_64_32.
    let object = compile(
        "__asm__(\".data\\n.globl low\\nlow: .long a\\n.long b\\n.long c\\n\");\n",
        &["-O2", "-fno-pic"],
    );
    assert_eq!(
        relocation_types(&object),
        [object::elf::R_X86_64_32; 3],
        "one run of three"
    );
    let err = link_at(&[&object], 0x40_0000, &mut |n| {
        Some(if n == b"b" { 0x7f00_0000_0000 } else { 0x1000 })
    })
    .unwrap_err();
    let Error::Relocation(r) = &err else {
        panic!("{err}")
    };
    assert_eq!(r.value, 0x7f00_0000_0000);
    assert_eq!(r.s, 0x7f00_0000_0000);
    let text = err.to_string();
    for part in ["R_X86_64_32", ".data+0x4", "`b`", "0x7f0000000000"] {
        assert!(text.contains(part), "{part} missing from: {text}");
    }
}

/// The `r_type` of every relocation of `object`, in order.
fn relocation_types(object: &[u8]) -> Vec<object::elf::RelocationType> {
    let parsed = Object::parse(object).unwrap();
    (0..parsed.section_count())
        .filter(|&i| parsed.section(i).unwrap().kind == object::elf::SHT_RELA)
        .flat_map(|i| parsed.relocations(i).unwrap())
        .map(|r| r.r_type)
        .collect()
}

/// Into memory that is not known to read as zero (a slice backend's buffer), the linker
/// writes every byte of each segment: sections, alignment gaps, `.bss`, COMMON symbols,
/// the GOT and far-call stubs. Links into a buffer of leftovers and into a zeroed one give
/// the same segments.
#[test]
fn every_byte_of_a_segment_is_written() {
    let object = compile(
        "extern int far_fn(int);\n\
         int shared;\n\
         static int zeros[300];\n\
         __attribute__((aligned(64))) const char tag[3] = \"ab\";\n\
         long big[4] = {1, 2, 3, 4};\n\
         int f(int x) { return far_fn(x) + shared + zeros[x & 7] + tag[x & 1] + (int)big[x & 3]; }\n",
        &["-O2", "-fPIC", "-fcommon"],
    );
    let plan = Plan::new(&[&object], PAGE).unwrap();
    assert!(
        plan.stubs().0 > 0 || plan.got().0 > 0,
        "stubs or GOT slots in the image"
    );
    let link_into = |fill: u8| {
        let mut buf = vec![fill; plan.image_size() as usize];
        plan.link(
            &mut SliceBackend::new(&mut buf, 0x10_0000, PAGE),
            &mut |_: &[u8]| Some(0x7f00_0000_0000u64),
        )
        .unwrap();
        buf
    };
    let (dirty, clean) = (link_into(0xa5), link_into(0));
    for kind in SegmentKind::ALL {
        let s = plan.segment(kind);
        let range = s.offset as usize..(s.offset + s.size) as usize;
        assert!(
            dirty[range.clone()] == clean[range],
            "{kind:?} keeps leftovers"
        );
    }
}

/// `globals` lists exactly the global and weak definitions of every object, in link
/// order (placed, absolute and common ones), and nothing local or undefined; each at the
/// address the symbol resolves to.
#[test]
fn globals_are_the_global_and_weak_definitions_of_every_object() {
    let a = compile(
        "static int hidden(int x) { return x * 3; }\n\
         int entry(int x) { return hidden(x) + 1; }\n\
         __attribute__((weak)) int tunable(void) { return 4; }\n\
         static int counter; int shared_common;\n\
         int bump(void) { return ++counter + shared_common; }\n\
         __asm__(\".globl fixed\\n.set fixed, 0x1234\");",
        &["-O2", "-fPIC", "-fcommon"],
    );
    let b = pic("extern int entry(int); extern int outside(void);\n\
         const int table[4] = {1, 2, 3, 4};\n\
         int second(int i) { return entry(table[i & 3]) + outside(); }");
    let plan = Plan::new(&[&a, &b], PAGE).unwrap();
    let mut buf = vec![0; plan.image_size() as usize];
    let base = 0x40_0000;
    let image = plan
        .link(
            &mut SliceBackend::new(&mut buf, base, PAGE),
            &mut |name: &[u8]| (name == b"outside").then_some(0x9000),
        )
        .unwrap();
    let globals: Vec<(String, u64, bool)> = image
        .globals()
        .map(|g| {
            (
                String::from_utf8_lossy(g.name).into_owned(),
                g.address,
                g.is_function,
            )
        })
        .collect();
    // The same list unnamed: each entry's name starts at its offset in its object's
    // string table (two objects, two tables) and ends at the first NUL after it.
    let entries: Vec<_> = image.global_entries().collect();
    let named: Vec<(String, u64, bool)> = entries
        .iter()
        .map(|e| {
            let tail = &e.string_table[e.name_offset as usize..];
            let name = &tail[..tail.iter().position(|&b| b == 0).unwrap()];
            assert_eq!(e.name(), Some(name));
            let address = e.global().unwrap().address;
            (
                String::from_utf8_lossy(name).into_owned(),
                address,
                e.is_function,
            )
        })
        .collect();
    assert_eq!(named, globals);
    let tables: std::collections::BTreeSet<_> =
        entries.iter().map(|e| e.string_table.as_ptr()).collect();
    assert_eq!(tables.len(), 2, "one string table per object");
    let mut names: Vec<&str> = globals.iter().map(|(n, _, _)| n.as_str()).collect();
    // Within an object the order is the symbol table's; across objects, link order.
    let split = names
        .iter()
        .position(|&n| n == "second" || n == "table")
        .unwrap();
    assert!(names[split..]
        .iter()
        .all(|n| ["second", "table"].contains(n)));
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "bump",
            "entry",
            "fixed",
            "second",
            "shared_common",
            "table",
            "tunable"
        ]
    );
    let end = base + plan.image_size();
    for (name, address, is_function) in &globals {
        assert_eq!(Some(*address), image.symbol(name), "{name}");
        if name == "fixed" {
            assert_eq!(*address, 0x1234);
        } else {
            assert!((base..end).contains(address), "{name} at {address:#x}");
        }
        let function = ["bump", "entry", "second", "tunable"].contains(&name.as_str());
        assert_eq!(*is_function, function, "{name}");
    }
}

/// Symbols the parse must refuse, each named: a section index past the section headers,
/// an extended index (`SHN_XINDEX`), a name at the string table's end or past it. The same object with
/// an absolute symbol (a reserved index the parse accepts) still parses.
#[test]
fn bad_symbol_fields_are_refused_by_name() {
    use elfjit_core::error::Location;
    let object = pic("int counter; int k(void) { return ++counter; }");
    let parsed = Object::parse(&object).unwrap();
    let (symtab, strtab_len) = (0..parsed.section_count())
        .find_map(|i| {
            let s = parsed.section(i).ok()?;
            (s.kind == object::elf::SHT_SYMTAB).then(|| {
                let names = parsed.section(s.link as usize).unwrap().data.len();
                let at = s.data.as_ptr() as usize - object.as_ptr() as usize;
                (at, names)
            })
        })
        .unwrap();
    let last = parsed.symbol_count() - 1;
    // Elf64_Sym: st_name (4), st_info, st_other, st_shndx (2), st_value, st_size.
    let field = |index: usize, at: usize| symtab + index * 24 + at;
    let with = |index: usize, at: usize, bytes: &[u8]| {
        let mut patched = object.clone();
        patched[field(index, at)..field(index, at) + bytes.len()].copy_from_slice(bytes);
        patched
    };
    let sections = parsed.section_count() as u16;
    let cases = [
        (
            with(last, 6, &sections.to_le_bytes()),
            "symbol's section index",
        ),
        (
            with(last, 6, &0xffffu16.to_le_bytes()),
            "extended section indices (SHN_XINDEX)",
        ),
        (
            with(last, 0, &(strtab_len as u32).to_le_bytes()),
            "unterminated name",
        ),
        (
            with(last, 0, &(strtab_len as u32 + 1).to_le_bytes()),
            "name past its string table",
        ),
    ];
    for (patched, what) in cases {
        match Object::parse(&patched).map(|_| ()) {
            Err(Error::Malformed { what: got, at }) => {
                assert_eq!((got, at), (what, Location::Symbol(last as u32)));
            }
            Err(Error::NotSupported { what: got, value }) => {
                assert_eq!((got, value), (what, last as u64));
            }
            other => panic!("{what}: {other:?}"),
        }
    }
    let absolute = with(last, 6, &0xfff1u16.to_le_bytes());
    assert!(Object::parse(&absolute).is_ok());
}
