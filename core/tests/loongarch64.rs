//! The loongarch64 relocator on real clang-19 output, linked into a buffer at chosen target
//! addresses: every patched instruction is decoded and must reach its target (directly,
//! through its GOT slot, or through a far-call stub); every corpus kernel links in every
//! code model at -O0..-O3; overflow is an error that names the relocation.

mod common;
use common::clang_object;

use elfjit_core::arch::loongarch64::{
    decode_b16, decode_b21, decode_b26, decode_call36, decode_si12, decode_si20,
};
use elfjit_core::{Error, Plan, Range, RelocProblem, RelocRecord, SliceBackend, Via};
use object::elf::*;
use std::path::{Path, PathBuf};

const PAGE: u64 = 0x4000; // LoongArch Linux uses 16 KiB pages
const BASE: u64 = 0x7f12_3456_8000;

/// Compiles `source` (C, or LLVM IR with `-x ir` in `extra`) for loongarch64.
fn compile_with(source: &[u8], lang: &str, extra: &[&str]) -> Vec<u8> {
    let mut args = vec![
        "--target=loongarch64-none-unknown-elf",
        "-march=loongarch64",
        "-c",
        "-fPIC",
        "-fno-math-errno",
        "-fno-stack-protector",
        "-Wno-override-module",
    ];
    if lang == "c" {
        args.extend(["-ffreestanding", "-nostdlib", "-fno-ident"]);
    }
    args.extend_from_slice(extra);
    args.extend(["-x", lang]);
    clang_object(&args, source)
}

fn compile(source: &str, extra: &[&str]) -> Vec<u8> {
    compile_with(source.as_bytes(), "c", extra)
}

struct Linked {
    image: Vec<u8>,
    records: Vec<RelocRecord>,
    stubs: (u32, u64),
    got: (u32, u64),
}

fn link_at(
    objects: &[&[u8]],
    base: u64,
    resolve: &mut dyn FnMut(&[u8]) -> Option<u64>,
) -> Result<Linked, Error> {
    let plan = Plan::new(objects, PAGE)?;
    let mut image = vec![0x55u8; plan.image_size() as usize];
    let mut backend = SliceBackend::new(&mut image, base, PAGE);
    let mut records = Vec::new();
    let (stubs, got) = (plan.stubs(), plan.got());
    plan.link_observed(&mut backend, resolve, &mut |r: &RelocRecord| {
        records.push(*r)
    })?;
    Ok(Linked {
        image,
        records,
        stubs,
        got,
    })
}

fn word(image: &[u8], base: u64, at: u64) -> u32 {
    let i = (at - base) as usize;
    u32::from_le_bytes(image[i..i + 4].try_into().unwrap())
}

fn quad(image: &[u8], base: u64, at: u64) -> u64 {
    let i = (at - base) as usize;
    u64::from_le_bytes(image[i..i + 8].try_into().unwrap())
}

/// What `pcalau12i` at `pc` puts in its register.
fn pcalau12i(w: u32, pc: u64) -> u64 {
    (pc & !0xfff).wrapping_add(((decode_si20(w) << 12) as i32) as i64 as u64)
}

/// The address a far-call stub at `stub` jumps to, decoded from its instructions.
fn stub_target(image: &[u8], base: u64, stub: u64) -> u64 {
    let (w0, w1, w2) = (
        word(image, base, stub),
        word(image, base, stub + 4),
        word(image, base, stub + 8),
    );
    assert_eq!(w0 & !0x01ff_ffe0, 0x1c00_0014, "pcaddu12i $t8: {w0:#x}");
    assert_eq!(w1 & !0x003f_fc00, 0x28c0_0294, "ld.d $t8, $t8: {w1:#x}");
    assert_eq!(w2, 0x4c00_0280, "jirl $zero, $t8, 0: {w2:#x}");
    let literal = stub
        .wrapping_add((decode_si20(w0) << 12) as u64)
        .wrapping_add(decode_si12(w1) as u64);
    assert_eq!(literal % 8, 0, "the literal is 8-aligned");
    quad(image, base, literal)
}

/// Decodes every patched place and checks it reaches what the relocation names: S + A,
/// the GOT slot holding S, or a stub jumping to S. Returns how many were checked.
fn check_all(linked: &Linked, base: u64) -> usize {
    let img = &linked.image;
    let (got_slots, got_offset) = linked.got;
    let got_range = base + got_offset..base + got_offset + 8 * u64::from(got_slots);
    let mut checked = 0;
    for (i, r) in linked.records.iter().enumerate() {
        let p = r.place_address;
        let s = r.symbol_address;
        let a = r.rela.addend;
        let target = s.wrapping_add_signed(a);
        // For GOT forms: the slot (G) that holds S, plus A.
        let got_target = || {
            assert_eq!(r.applied.via, Via::Got);
            let g = got_range
                .clone()
                .step_by(8)
                .find(|&g| quad(img, base, g) == s)
                .unwrap_or_else(|| panic!("no GOT slot holds S: {r:?}"));
            g.wrapping_add_signed(a)
        };
        let branch_target = |offset: i64| {
            let reached = p.wrapping_add_signed(offset);
            match r.applied.via {
                Via::Stub => assert_eq!(stub_target(img, base, reached), s, "{r:?}"),
                _ => assert_eq!(reached, target, "{r:?}"),
            }
        };
        match r.rela.r_type {
            R_LARCH_B26 => branch_target(decode_b26(word(img, base, p))),
            R_LARCH_B21 => branch_target(decode_b21(word(img, base, p))),
            R_LARCH_B16 => branch_target(decode_b16(word(img, base, p))),
            R_LARCH_CALL36 => {
                branch_target(decode_call36(word(img, base, p), word(img, base, p + 4)))
            }
            R_LARCH_PCALA_HI20 | R_LARCH_GOT_PC_HI20 => {
                let dest = if r.rela.r_type == R_LARCH_GOT_PC_HI20 {
                    got_target()
                } else {
                    target
                };
                let next = linked.records.get(i + 1).map(|n| n.rela.r_type);
                if matches!(next, Some(R_LARCH_PCALA_LO12 | R_LARCH_GOT_PC_LO12))
                    && linked
                        .records
                        .get(i + 2)
                        .is_some_and(|n| n.place_address == p + 8)
                    && matches!(
                        linked.records.get(i + 2).map(|n| n.rela.r_type),
                        Some(R_LARCH_PCALA64_LO20 | R_LARCH_GOT64_PC_LO20)
                    )
                {
                    // Extreme: pcalau12i + addi.d t8, zero + lu32i.d t8 + lu52i.d t8, t8.
                    let mut t8 = decode_si12(word(img, base, p + 4)) as u64;
                    t8 = (t8 & 0xffff_ffff) | ((decode_si20(word(img, base, p + 8)) as u64) << 32);
                    t8 = (t8 & ((1 << 52) - 1))
                        | ((decode_si12(word(img, base, p + 12)) as u64) << 52);
                    let reached = pcalau12i(word(img, base, p), p).wrapping_add(t8);
                    assert_eq!(reached, dest, "extreme sequence at {p:#x}");
                } else {
                    // The page delta plus the LO12 of the same target reaches it.
                    let lo = (((dest & 0xfff) << 52) as i64) >> 52;
                    let reached = pcalau12i(word(img, base, p), p).wrapping_add_signed(lo);
                    assert_eq!(reached, dest, "{r:?}");
                }
            }
            R_LARCH_PCALA_LO12 | R_LARCH_GOT_PC_LO12 => {
                let dest = if r.rela.r_type == R_LARCH_GOT_PC_LO12 {
                    got_target()
                } else {
                    target
                };
                let w = word(img, base, p);
                assert_eq!(decode_si12(w) as u64 & 0xfff, dest & 0xfff, "{r:?}");
            }
            R_LARCH_PCALA64_LO20 | R_LARCH_PCALA64_HI12 => {} // checked with their HI20
            R_LARCH_GOT64_PC_LO20 | R_LARCH_GOT64_PC_HI12 => {
                got_target();
            }
            R_LARCH_32_PCREL => {
                let v = i32::from_le_bytes(img[(p - base) as usize..][..4].try_into().unwrap());
                assert_eq!(p.wrapping_add_signed(v.into()), target, "{r:?}");
            }
            R_LARCH_64 => assert_eq!(quad(img, base, p), target, "{r:?}"),
            // Halves of label differences (.eh_frame with relaxation on): checked as a
            // whole by the unit tests; here they only have to apply.
            R_LARCH_ADD32 | R_LARCH_SUB32 | R_LARCH_ADD64 | R_LARCH_SUB64 => {}
            _ if r.applied.via == Via::Nothing => {} // ALIGN, RELAX
            other => panic!("unexpected relocation type {other} in {r:?}"),
        }
        checked += 1;
    }
    checked
}

/// An external-symbol resolver: every name at its own address near (or far from) the image.
fn resolver(far: bool) -> impl FnMut(&[u8]) -> Option<u64> {
    move |name: &[u8]| {
        let h = name
            .iter()
            .fold(0u64, |h, &b| h.wrapping_mul(31).wrapping_add(u64::from(b)));
        let offset = (h % 0x1000) * 0x40;
        Some(if far {
            0x1_0000_0000 + offset
        } else {
            BASE + 0x100_0000 + offset
        })
    }
}

fn kernels() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/kernels");
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy().to_string();
            // clang 19 has no _Float16 / __bf16 for loongarch64 (the corpus's `not_on`).
            (name.ends_with(".c") || name.ends_with(".ll"))
                && !name.starts_with("f16_")
                && !name.starts_with("bf16_")
        })
        .collect();
    files.sort();
    files
}

fn compile_kernel(path: &Path, extra: &[&str]) -> Vec<u8> {
    let source = std::fs::read(path).unwrap();
    if path.extension().is_some_and(|e| e == "ll") {
        let mut flags = vec!["-funroll-loops", "-fvectorize", "-fslp-vectorize"];
        flags.extend_from_slice(extra);
        compile_with(&source, "ir", &flags)
    } else {
        compile_with(&source, "c", extra)
    }
}

/// Every corpus kernel at -O0..-O3 in each code model (and with linker relaxation on, which
/// adds B16/B21, ALIGN and ADD/SUB pairs), linked with externals near and far: each links
/// and every relocation decodes to its target.
#[test]
fn corpus_links_in_every_code_model_and_reaches_its_targets() {
    let kernels = kernels();
    assert!(kernels.len() >= 20, "{kernels:?}");
    let relax = ["-Xclang", "-target-feature", "-Xclang", "+relax"];
    let mut jobs: Vec<(PathBuf, Vec<&str>)> = Vec::new();
    for k in &kernels {
        for opt in ["-O0", "-O1", "-O2", "-O3"] {
            for model in ["-mcmodel=normal", "-mcmodel=medium", "-mcmodel=extreme"] {
                jobs.push((k.clone(), vec![opt, model]));
            }
        }
        let mut with_relax = vec!["-O2", "-mcmodel=medium"];
        with_relax.extend_from_slice(&relax);
        jobs.push((k.clone(), with_relax));
    }
    let jobs = std::sync::Mutex::new(jobs);
    let total = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for _ in 0..2 {
            scope.spawn(|| loop {
                let Some((path, flags)) = jobs.lock().unwrap().pop() else {
                    break;
                };
                let object = compile_kernel(&path, &flags);
                for far in [false, true] {
                    let linked = link_at(&[&object], BASE, &mut resolver(far))
                        .unwrap_or_else(|e| panic!("{} {flags:?}: {e}", path.display()));
                    let n = check_all(&linked, BASE);
                    total.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
                }
            });
        }
    });
    assert!(total.into_inner() > 1000);
}

const FAR_CALLS: &str = r#"
extern int far_fn(int);
int twice(int x) { return far_fn(x) + far_fn(x + 1) * 3; }
"#;

#[test]
fn far_external_calls_share_one_stub_in_normal_and_medium_models() {
    for (model, r_type) in [
        ("-mcmodel=normal", R_LARCH_B26),
        ("-mcmodel=medium", R_LARCH_CALL36),
    ] {
        let object = compile(FAR_CALLS, &["-O1", model]);
        let far = 0x12_3456_7890_0000u64; // beyond even CALL36's ±128 GiB
        let linked = link_at(&[&object], BASE, &mut |n| (n == b"far_fn").then_some(far)).unwrap();
        let (stubs, stub_offset) = linked.stubs;
        assert_eq!(stubs, 1, "two call sites, one target, one stub");
        let calls: Vec<_> = linked
            .records
            .iter()
            .filter(|r| r.rela.r_type == r_type)
            .collect();
        assert_eq!(calls.len(), 2, "{model}");
        for call in calls {
            assert_eq!(call.applied.via, Via::Stub);
            let p = call.place_address;
            let offset = if r_type == R_LARCH_B26 {
                decode_b26(word(&linked.image, BASE, p))
            } else {
                decode_call36(
                    word(&linked.image, BASE, p),
                    word(&linked.image, BASE, p + 4),
                )
            };
            assert_eq!(p.wrapping_add_signed(offset), BASE + stub_offset);
        }
        assert_eq!(stub_target(&linked.image, BASE, BASE + stub_offset), far);
        assert_eq!((BASE + stub_offset) % 16, 0);
        check_all(&linked, BASE);

        // Near: the same calls go direct, the (still reserved) stub unused.
        let near = BASE - 0x10_0000;
        let linked = link_at(&[&object], BASE, &mut |n| (n == b"far_fn").then_some(near)).unwrap();
        assert!(linked
            .records
            .iter()
            .filter(|r| r.rela.r_type == r_type)
            .all(|r| r.applied.via == Via::Direct));
        check_all(&linked, BASE);
    }
    // CALL36 reaches ±128 GiB without a stub.
    let object = compile(FAR_CALLS, &["-O1", "-mcmodel=medium"]);
    let mid = BASE - 0x10_0000_0000;
    let linked = link_at(&[&object], BASE, &mut |n| (n == b"far_fn").then_some(mid)).unwrap();
    assert!(linked
        .records
        .iter()
        .filter(|r| r.rela.r_type == R_LARCH_CALL36)
        .all(|r| r.applied.via == Via::Direct));
    check_all(&linked, BASE);
}

const HIDDEN_DATA: &str = r#"
extern int far_data __attribute__((visibility("hidden")));
int get(void) { return far_data; }
"#;

#[test]
fn out_of_range_page_reference_is_an_error_naming_everything() {
    // A hidden external is reached PC-relatively (PCALA_HI20, ±2 GiB): 4 GiB away cannot.
    let object = compile(HIDDEN_DATA, &["-O2"]);
    let far = BASE + 0x1_0000_0000;
    let err = link_at(&[&object], BASE, &mut |_| Some(far)).err().unwrap();
    let Error::Relocation(r) = err else {
        panic!("{err}")
    };
    assert_eq!(r.r_type, R_LARCH_PCALA_HI20);
    assert!(matches!(
        r.problem,
        RelocProblem::Overflow { range } if range == Range::signed(32)
    ));
    let text = err.to_string();
    let value = format!("{:#x}", r.value);
    for part in [
        "loongarch64",
        "R_LARCH_PCALA_HI20",
        ".text",
        "far_data",
        &value,
    ] {
        assert!(text.contains(part), "{part} missing from: {text}");
    }
    // The extreme model reaches it.
    let object = compile(HIDDEN_DATA, &["-O2", "-mcmodel=extreme"]);
    let linked = link_at(&[&object], BASE, &mut |_| Some(far)).unwrap();
    assert!(linked
        .records
        .iter()
        .any(|r| r.rela.r_type == R_LARCH_PCALA64_HI12));
    check_all(&linked, BASE);
}

#[test]
fn global_data_goes_through_got_slots() {
    let object = compile(
        "int counter; const int table[4] = {1, 2, 3, 4}; \
         int bump(int i) { counter += table[i & 3]; return counter; }",
        &["-O2"],
    );
    let linked = link_at(&[&object], BASE, &mut |_| None).unwrap();
    assert_eq!(linked.got.0, 2, "one slot each for counter and table");
    let got_forms = linked
        .records
        .iter()
        .filter(|r| r.applied.via == Via::Got)
        .count();
    assert!(got_forms >= 4, "{:?}", linked.records);
    check_all(&linked, BASE);
}

#[test]
fn linking_at_two_bases_differs_only_in_relocated_places() {
    let object = compile_kernel(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/kernels/switch_jumptable.c"),
        &["-O2"],
    );
    let a = link_at(&[&object], BASE, &mut |_| None).unwrap();
    let b = link_at(&[&object], 0x1_0000_0000, &mut |_| None).unwrap();
    assert!(check_all(&b, 0x1_0000_0000) > 0);
    // Everything here is PC-relative: the images are identical.
    assert_eq!(a.image, b.image);
}

#[test]
fn soft_float_objects_are_refused_by_name() {
    // -mabi=lp64s passes floats in integer registers: linking it for LP64D callers would
    // call it wrongly, so the plan refuses it.
    let object = compile(
        "float twice(float x) { return 2 * x; }",
        &["-O2", "-mabi=lp64s", "-Wno-unused-command-line-argument"],
    );
    let err = Plan::new(&[&object], PAGE).err().unwrap();
    assert!(matches!(err, Error::NotSupported { value: 1, .. }), "{err}");
    assert!(err.to_string().contains("LP64D"), "{err}");
    // The default ABI is LP64D and links.
    let object = compile("float twice(float x) { return 2 * x; }", &["-O2"]);
    assert!(Plan::new(&[&object], PAGE).is_ok());
}
