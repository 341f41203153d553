//! A loaded `.eh_frame` is followed by a 4-byte zero terminator, what an unwinder's
//! `__register_frame` walks the section to (libgcc takes a whole section), even when the
//! backend's memory is not zero (a reused buffer).

mod common;

use common::clang_object;
use elfjit_core::{NoSymbols, Plan, SegmentKind, SliceBackend};

const PAGE: u64 = 0x1000;

fn object(arch: &str) -> Vec<u8> {
    let target = format!("--target={arch}-none-unknown-elf");
    let mut args = vec![
        &target[..],
        "-c",
        "-O2",
        "-fPIC",
        "-funwind-tables",
        "-x",
        "c",
    ];
    if arch == "riscv64" {
        args.extend(["-march=rv64gc", "-mabi=lp64d"]);
    }
    clang_object(
        &args,
        b"int f(int (*g)(int), int x) { return g(x) + 1; }\n\
          static const int table[3] = {1, 2, 3};\n\
          int h(int i) { return table[i]; }\n",
    )
}

#[test]
fn the_terminator_follows_each_loaded_eh_frame() {
    for arch in ["x86_64", "aarch64", "riscv64", "powerpc64le"] {
        let object = object(arch);
        let plan = Plan::new(&[&object[..]], PAGE).unwrap();
        let parsed = plan.objects().next().unwrap();
        let index = (0..parsed.section_count())
            .find(|&i| parsed.section(i).unwrap().name == b".eh_frame")
            .unwrap_or_else(|| panic!("{arch}: no .eh_frame"));
        let place = plan.section_place(0, index).unwrap();
        assert!(
            place.loaded && place.segment == SegmentKind::ReadOnly,
            "{arch}: {place:?}"
        );
        let mut buf = vec![0xa5u8; plan.image_size() as usize];
        plan.link(
            &mut SliceBackend::new(&mut buf, 0x10_0000, PAGE),
            &mut NoSymbols,
        )
        .unwrap();
        let end = (place.offset + place.size) as usize;
        assert_eq!(
            &buf[end..end + 4],
            &[0; 4],
            "{arch}: no terminator after .eh_frame"
        );
        // The section itself is intact: its first record (the CIE) has a non-zero length.
        let start = place.offset as usize;
        assert_ne!(&buf[start..start + 4], &[0; 4], "{arch}");
    }
}
