//! aarch64 relocations on real clang-19 output, linked into a buffer at chosen target
//! addresses: every patched instruction is decoded (by decoders written here, independent
//! of the core's encoders) and checked to reach its target; far external calls go through
//! shared veneers; out-of-range pages are errors that name the relocation.

mod common;
use common::clang_object;

use elfjit_core::{Arch, Error, Plan, Range, RelocProblem, RelocRecord, SliceBackend, Via};
use object::elf::*;
use std::collections::HashMap;

const PAGE: u64 = 0x1000;
/// Where images are linked: 64 GiB, so that addresses need more than 32 bits.
const BASE: u64 = 0x10_0000_0000;

/// Compiles C (`lang` "c") or LLVM IR ("ir") for bare-metal aarch64.
fn compile(source: &[u8], lang: &str, extra: &[&str]) -> Vec<u8> {
    let mut args = vec!["--target=aarch64-none-unknown-elf", "-march=armv8-a", "-c"];
    args.extend(["-fno-math-errno", "-fno-stack-protector"]);
    if lang == "c" {
        args.extend(["-ffreestanding", "-fno-ident"]);
    } else {
        args.extend(["-funroll-loops", "-fvectorize", "-fslp-vectorize"]);
    }
    args.extend_from_slice(extra);
    args.extend(["-x", lang]);
    clang_object(&args, source)
}

fn c(source: &str, extra: &[&str]) -> Vec<u8> {
    compile(source.as_bytes(), "c", extra)
}

/// (object, symbol index) → (GOT slot address, stub address).
type Slots = HashMap<(usize, u32), (Option<u64>, Option<u64>)>;

/// A linked image and what the plan decided.
struct Linked {
    image: Vec<u8>,
    records: Vec<RelocRecord>,
    slots: Slots,
    stubs: (u32, u64),
}

impl Linked {
    fn word(&self, address: u64) -> u32 {
        let at = (address - BASE) as usize;
        u32::from_le_bytes(self.image[at..at + 4].try_into().unwrap())
    }
    fn quad(&self, address: u64) -> u64 {
        let at = (address - BASE) as usize;
        u64::from_le_bytes(self.image[at..at + 8].try_into().unwrap())
    }
    fn got_of(&self, r: &RelocRecord) -> u64 {
        self.slots[&(r.object, r.rela.symbol)]
            .0
            .expect("a GOT slot")
    }
    fn stub_of(&self, r: &RelocRecord) -> Option<u64> {
        self.slots[&(r.object, r.rela.symbol)].1
    }
}

fn link(objects: &[&[u8]], resolve: &mut dyn FnMut(&[u8]) -> Option<u64>) -> Result<Linked, Error> {
    let plan = Plan::new(objects, PAGE)?;
    let mut image = vec![0x55u8; plan.image_size() as usize];
    let mut records = Vec::new();
    let stubs = plan.stubs();
    let (_, got) = plan.got();
    {
        let mut backend = SliceBackend::new(&mut image, BASE, PAGE);
        plan.link_observed(&mut backend, resolve, &mut |r: &RelocRecord| {
            records.push(*r)
        })?;
    }
    let mut slots = Slots::new();
    for r in &records {
        let (g, s) = plan.symbol_slots(r.object, r.rela.symbol as usize);
        let g = g.map(|g| BASE + got + 8 * u64::from(g));
        let s = s.map(|s| BASE + stubs.1 + 16 * u64::from(s));
        slots.insert((r.object, r.rela.symbol), (g, s));
    }
    Ok(Linked {
        image,
        records,
        slots,
        stubs,
    })
}

// Decoders written from the Arm ARM, independently of the core's.
fn sext(v: u32, bits: u32) -> i64 {
    ((u64::from(v) << (64 - bits)) as i64) >> (64 - bits)
}
/// B/BL: imm26 × 4.
fn branch26(w: u32) -> i64 {
    sext(w & 0x03ff_ffff, 26) * 4
}
/// B.cond, CBZ, LDR literal: imm19 (bits 23..5) × 4.
fn branch19(w: u32) -> i64 {
    sext((w >> 5) & 0x7_ffff, 19) * 4
}
/// ADR/ADRP: immhi (23..5) : immlo (30..29).
fn adr21(w: u32) -> i64 {
    sext((((w >> 5) & 0x7_ffff) << 2) | ((w >> 29) & 3), 21)
}
/// ADD/LDR/STR (unsigned offset): imm12 (21..10), unscaled.
fn imm12(w: u32) -> u64 {
    u64::from((w >> 10) & 0xfff)
}
/// log2 of the access size of a load/store (unsigned offset): size (31..30), or 4 for a
/// 128-bit SIMD&FP access (V = 1, opc<1> = 1, size = 0).
fn access_shift(w: u32) -> u32 {
    let size = w >> 30;
    if (w >> 26) & 1 == 1 && (w >> 23) & 1 == 1 && size == 0 {
        4
    } else {
        size
    }
}
fn page(x: u64) -> u64 {
    x & !0xfff
}

/// Checks that every applied relocation in `linked` reaches its target; returns the
/// relocation types seen.
fn verify(linked: &Linked, what: &str) -> Vec<RelocationType> {
    let mut seen = Vec::new();
    for r in &linked.records {
        let (s, p, a) = (r.symbol_address, r.place_address, r.rela.addend);
        let target = s.wrapping_add_signed(a);
        let name = Arch::Aarch64.reloc_name(r.rela.r_type);
        let ctx = format!("{what}: {name} at {p:#x} S={s:#x} A={a} {:?}", r.applied);
        match r.rela.r_type {
            R_AARCH64_CALL26 | R_AARCH64_JUMP26 => {
                let w = linked.word(p);
                let dest = p.wrapping_add_signed(branch26(w));
                let opcode = if r.rela.r_type == R_AARCH64_CALL26 {
                    0x9400_0000
                } else {
                    0x1400_0000
                };
                assert_eq!(w & 0xfc00_0000, opcode, "{ctx}");
                match r.applied.via {
                    Via::Direct => assert_eq!(dest, target, "{ctx}"),
                    Via::Stub => {
                        assert_eq!(Some(dest), linked.stub_of(r), "{ctx}");
                        assert_eq!(a, 0, "{ctx}");
                        assert_eq!(linked.word(dest), 0x5800_0050, "LDR X16, [PC, #8]: {ctx}");
                        assert_eq!(linked.word(dest + 4), 0xd61f_0200, "BR X16: {ctx}");
                        assert_eq!(linked.quad(dest + 8), s, "the veneer's literal: {ctx}");
                        assert!(
                            target.abs_diff(p) >= 1 << 27,
                            "a veneer only when far: {ctx}"
                        );
                    }
                    other => panic!("{ctx}: {other:?}"),
                }
            }
            R_AARCH64_ADR_PREL_PG_HI21 | R_AARCH64_ADR_PREL_PG_HI21_NC => {
                let w = linked.word(p);
                assert_eq!(w & 0x9f00_0000, 0x9000_0000, "ADRP: {ctx}");
                let got = page(p).wrapping_add_signed(adr21(w) << 12);
                assert_eq!(got, page(target), "{ctx}");
            }
            R_AARCH64_ADR_GOT_PAGE => {
                let w = linked.word(p);
                assert_eq!(w & 0x9f00_0000, 0x9000_0000, "ADRP: {ctx}");
                let g = linked.got_of(r);
                assert_eq!(
                    page(p).wrapping_add_signed(adr21(w) << 12),
                    page(g),
                    "{ctx}"
                );
                assert_eq!(linked.quad(g), s, "the GOT slot holds S: {ctx}");
                assert_eq!(r.applied.via, Via::Got);
            }
            R_AARCH64_LD64_GOT_LO12_NC => {
                let w = linked.word(p);
                assert_eq!(access_shift(w), 3, "{ctx}");
                let g = linked.got_of(r);
                assert_eq!(imm12(w) << 3, g & 0xfff, "{ctx}");
                assert_eq!(linked.quad(g), s, "{ctx}");
            }
            R_AARCH64_GOT_LD_PREL19 => {
                let w = linked.word(p);
                let g = linked.got_of(r);
                assert_eq!(p.wrapping_add_signed(branch19(w)), g, "{ctx}");
                assert_eq!(linked.quad(g), s, "{ctx}");
            }
            R_AARCH64_ADD_ABS_LO12_NC => {
                let w = linked.word(p);
                assert_eq!(
                    w & 0x7f80_0000,
                    0x1100_0000,
                    "ADD (immediate), no shift: {ctx}"
                );
                assert_eq!(imm12(w), target & 0xfff, "{ctx}");
            }
            R_AARCH64_LDST8_ABS_LO12_NC
            | R_AARCH64_LDST16_ABS_LO12_NC
            | R_AARCH64_LDST32_ABS_LO12_NC
            | R_AARCH64_LDST64_ABS_LO12_NC
            | R_AARCH64_LDST128_ABS_LO12_NC => {
                let shift = match r.rela.r_type {
                    R_AARCH64_LDST8_ABS_LO12_NC => 0,
                    R_AARCH64_LDST16_ABS_LO12_NC => 1,
                    R_AARCH64_LDST32_ABS_LO12_NC => 2,
                    R_AARCH64_LDST64_ABS_LO12_NC => 3,
                    _ => 4,
                };
                let w = linked.word(p);
                assert_eq!(access_shift(w), shift, "the instruction's own size: {ctx}");
                assert_eq!(imm12(w) << shift, target & 0xfff, "{ctx}");
            }
            R_AARCH64_ADR_PREL_LO21 => {
                let w = linked.word(p);
                assert_eq!(w & 0x9f00_0000, 0x1000_0000, "ADR: {ctx}");
                assert_eq!(p.wrapping_add_signed(adr21(w)), target, "{ctx}");
            }
            R_AARCH64_LD_PREL_LO19 | R_AARCH64_CONDBR19 => {
                let w = linked.word(p);
                assert_eq!(p.wrapping_add_signed(branch19(w)), target, "{ctx}");
            }
            R_AARCH64_MOVW_UABS_G0
            | R_AARCH64_MOVW_UABS_G0_NC
            | R_AARCH64_MOVW_UABS_G1_NC
            | R_AARCH64_MOVW_UABS_G2_NC
            | R_AARCH64_MOVW_UABS_G3 => {
                let group = match r.rela.r_type {
                    R_AARCH64_MOVW_UABS_G0 | R_AARCH64_MOVW_UABS_G0_NC => 0,
                    R_AARCH64_MOVW_UABS_G1_NC => 1,
                    R_AARCH64_MOVW_UABS_G2_NC => 2,
                    _ => 3,
                };
                let w = linked.word(p);
                assert_eq!((w >> 21) & 3, group, "the instruction's own shift: {ctx}");
                let want = (target >> (16 * group)) & 0xffff;
                assert_eq!(u64::from((w >> 5) & 0xffff), want, "{ctx}");
            }
            R_AARCH64_ABS64 => assert_eq!(linked.quad(p), target, "{ctx}"),
            R_AARCH64_PREL64 => {
                assert_eq!(p.wrapping_add(linked.quad(p)), target, "{ctx}")
            }
            R_AARCH64_PREL32 => {
                let v = linked.word(p) as i32;
                assert_eq!(p.wrapping_add_signed(v.into()), target, "{ctx}");
            }
            other => panic!("{ctx}: relocation type {other} not verified here"),
        }
        if !seen.contains(&r.rela.r_type) {
            seen.push(r.rela.r_type);
        }
    }
    seen
}

/// Externals resolve to addresses 1 GiB above the image (far for BL, in reach of ADRP),
/// one page apart per name.
fn far_resolver() -> impl FnMut(&[u8]) -> Option<u64> {
    let mut names: Vec<Vec<u8>> = Vec::new();
    move |name: &[u8]| {
        let i = match names.iter().position(|n| n == name) {
            Some(i) => i,
            None => {
                names.push(name.to_vec());
                names.len() - 1
            }
        };
        Some(BASE + 0x4000_0000 + 0x1000 * i as u64)
    }
}

fn corpus() -> Vec<(String, Vec<u8>, &'static str)> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/kernels");
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| matches!(p.extension().and_then(|e| e.to_str()), Some("c" | "ll")))
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let lang = if p.extension().unwrap() == "c" {
                "c"
            } else {
                "ir"
            };
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(&p).unwrap(), lang)
        })
        .collect()
}

/// Every corpus kernel in every code model clang allows (small PIC and not, large, tiny
/// PIC and not), -O0..-O3 for small PIC and -O0/-O2 for the rest, linked at 64 GiB with far externals: every relocation
/// reaches its target.
#[test]
fn corpus_relocations_reach_their_targets_in_every_code_model() {
    let modes: [&[&str]; 5] = [
        &["-fPIC"],
        &["-fno-pic"],
        &["-fno-pic", "-mcmodel=large"],
        &["-fPIC", "-mcmodel=tiny"],
        &["-fno-pic", "-mcmodel=tiny"],
    ];
    let mut jobs = Vec::new();
    for (name, source, lang) in corpus() {
        for opt in ["-O0", "-O1", "-O2", "-O3"] {
            for mode in modes {
                // The driver's mode (small, PIC) at every level; the others at two.
                if mode == modes[0] || matches!(opt, "-O0" | "-O2") {
                    jobs.push((name.clone(), source.clone(), lang, opt, mode));
                }
            }
        }
    }
    // clang is the slow part: compile on a few threads.
    let results: Vec<(String, Vec<u8>)> = std::thread::scope(|scope| {
        let chunks: Vec<_> = jobs.chunks(jobs.len().div_ceil(4)).collect();
        let handles: Vec<_> = chunks
            .into_iter()
            .map(|chunk| {
                scope.spawn(move || {
                    chunk
                        .iter()
                        .map(|(name, source, lang, opt, mode)| {
                            let mut flags = vec![*opt];
                            flags.extend_from_slice(mode);
                            let what = format!("{name} {}", flags.join(" "));
                            (what, compile(source, lang, &flags))
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    let mut all_seen = Vec::new();
    for (what, object) in &results {
        let linked = link(&[object], &mut far_resolver()).unwrap_or_else(|e| panic!("{what}: {e}"));
        for t in verify(&linked, what) {
            if !all_seen.contains(&t) {
                all_seen.push(t);
            }
        }
    }
    let mut names: Vec<_> = all_seen
        .iter()
        .map(|&t| Arch::Aarch64.reloc_name(t))
        .collect();
    names.sort();
    for expected in [
        "R_AARCH64_CALL26",
        "R_AARCH64_JUMP26",
        "R_AARCH64_ADR_PREL_PG_HI21",
        "R_AARCH64_ADD_ABS_LO12_NC",
        "R_AARCH64_LDST32_ABS_LO12_NC",
        "R_AARCH64_LDST128_ABS_LO12_NC",
        "R_AARCH64_ADR_GOT_PAGE",
        "R_AARCH64_LD64_GOT_LO12_NC",
        "R_AARCH64_MOVW_UABS_G3",
        "R_AARCH64_MOVW_UABS_G0_NC",
        "R_AARCH64_ADR_PREL_LO21",
        "R_AARCH64_LD_PREL_LO19",
        "R_AARCH64_GOT_LD_PREL19",
        "R_AARCH64_ABS64",
        "R_AARCH64_PREL32",
    ] {
        assert!(
            names.contains(&expected),
            "{expected} never seen: {names:?}"
        );
    }
}

const FAR_CALLS: &str = r#"
extern int far_fn(int);
int twice(int x) { return far_fn(x) + far_fn(x + 1) * 3; }
int tail(int x) { return far_fn(x * 2); }
"#;

#[test]
fn far_external_calls_share_one_veneer() {
    let far = 0x7fff_1234_5000;
    for opt in ["-O0", "-O2"] {
        let object = c(FAR_CALLS, &[opt, "-fPIC"]);
        let linked = link(&[&object], &mut |n| (n == b"far_fn").then_some(far)).unwrap();
        assert_eq!(
            linked.stubs.0, 1,
            "three call sites, one target, one veneer"
        );
        let veneer = BASE + linked.stubs.1;
        let calls: Vec<_> = linked
            .records
            .iter()
            .filter(|r| matches!(r.rela.r_type, R_AARCH64_CALL26 | R_AARCH64_JUMP26))
            .collect();
        assert_eq!(calls.len(), 3, "{opt}");
        for call in calls {
            assert_eq!(call.applied.via, Via::Stub);
            let w = linked.word(call.place_address);
            assert_eq!(call.place_address.wrapping_add_signed(branch26(w)), veneer);
        }
        assert_eq!(
            linked.quad(veneer + 8),
            far,
            "the veneer's literal is the target"
        );
        verify(&linked, opt);
    }
}

#[test]
fn near_external_calls_are_direct() {
    let object = c(FAR_CALLS, &["-O2", "-fPIC"]);
    let near = BASE + 0x7f0_0000; // within 128 MiB of every call site
    let linked = link(&[&object], &mut |_| Some(near)).unwrap();
    assert!(linked.records.iter().all(|r| r.applied.via != Via::Stub));
    verify(&linked, "near");
}

#[test]
fn adrp_beyond_4_gib_is_an_overflow_naming_the_relocation() {
    let object = c(
        "extern int far_var; int get(void) { return far_var; }",
        &["-O2", "-fno-pic"],
    );
    let err = link(&[&object], &mut |_| Some(BASE + 0x1_0000_1000))
        .err()
        .unwrap();
    let Error::Relocation(e) = err else {
        panic!("{err:?}")
    };
    assert_eq!(e.r_type, R_AARCH64_ADR_PREL_PG_HI21);
    assert_eq!(
        e.problem,
        RelocProblem::Overflow {
            range: Range::signed(33)
        }
    );
    assert_eq!(e.value, 0x1_0000_1000);
    let text = err.to_string();
    assert!(
        text.contains("R_AARCH64_ADR_PREL_PG_HI21") && text.contains("far_var"),
        "{text}"
    );
    // The last page in reach links.
    let linked = link(&[&object], &mut |_| Some(BASE + 0xffff_f000)).unwrap();
    verify(&linked, "last page");
}

#[test]
fn tiny_code_model_references_beyond_1_mib_are_errors() {
    // The tiny code model reaches data with ADR (±1 MiB).
    let object = c(
        "extern int v; int *addr(void) { return &v; }",
        &["-O2", "-fno-pic", "-mcmodel=tiny"],
    );
    let err = link(&[&object], &mut |_| Some(BASE + 0x20_0000))
        .err()
        .unwrap();
    assert!(
        matches!(err, Error::Relocation(e) if e.r_type == R_AARCH64_ADR_PREL_LO21
            && e.problem == RelocProblem::Overflow { range: Range::signed(21) }),
        "{err}"
    );
    let linked = link(&[&object], &mut |_| Some(BASE + 0xf_f000)).unwrap();
    verify(&linked, "tiny");
}

#[test]
fn large_code_model_builds_absolute_addresses_with_movw() {
    let src = "int table[4] = {1, 2, 3, 4}; extern int ext; int get(int i) { return table[i & 3] + ext; }";
    let object = c(src, &["-O2", "-fno-pic", "-mcmodel=large"]);
    let ext = 0x1234_5678_9abc_d000;
    let linked = link(&[&object], &mut |_| Some(ext)).unwrap();
    let seen = verify(&linked, "large");
    assert!(seen.contains(&R_AARCH64_MOVW_UABS_G3), "{seen:?}");
    // The four moves that build `ext` reassemble it.
    let mut built = 0u64;
    for r in linked.records.iter().filter(|r| r.symbol_address == ext) {
        let w = linked.word(r.place_address);
        built |= u64::from((w >> 5) & 0xffff) << (16 * ((w >> 21) & 3));
    }
    assert_eq!(built, ext);
}

#[test]
fn got_slots_hold_symbol_addresses() {
    let src =
        "int counter; extern int ext_var; int bump(void) { counter++; return counter + ext_var; }";
    let object = c(src, &["-O2", "-fPIC"]);
    let ext = 0x2000_0000;
    let linked = link(&[&object], &mut |n| (n == b"ext_var").then_some(ext)).unwrap();
    let seen = verify(&linked, "got");
    assert!(seen.contains(&R_AARCH64_ADR_GOT_PAGE) && seen.contains(&R_AARCH64_LD64_GOT_LO12_NC));
    assert!(linked
        .records
        .iter()
        .any(|r| r.applied.via == Via::Got && r.symbol_address == ext));
}
