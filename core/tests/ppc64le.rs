//! ppc64le (ELFv2) on real clang output, linked into a buffer at a chosen target address
//! and checked by decoding the instructions: the global entry prologue computes `.TOC.`,
//! TOC-relative accesses reach their data, external calls go through a stub that loads the
//! target from its GOT slot with the `nop` after the call turned into the TOC restore,
//! local calls enter at the local entry point, and Power10 PC-relative code reaches its
//! data and stubs. Every kernel of the corpus links at every optimisation level.

mod common;
use common::clang_object;

use elfjit_core::arch::ppc64le::{
    decode_d34, decode_li24, join_ha_lo, local_entry_offset, LD_R2_24_R1, NOTOC_ENTRY,
    STD_R2_24_R1, TOC_BIAS,
};
use elfjit_core::elf::Object;
use elfjit_core::{Error, Plan, RelocRecord, SliceBackend, Via};
use std::collections::HashMap;
use std::path::Path;

const PAGE: u64 = 0x1_0000; // 64 KiB, the usual ppc64le Linux page
const BASE: u64 = 0x7ff0_0000_0000;

/// Compiles `source` (`lang` is `c` or `ir`) for bare-metal ppc64le with the driver's flags.
fn compile_lang(source: &[u8], lang: &str, extra: &[&str]) -> Vec<u8> {
    let mut args = vec!["--target=powerpc64le-none-unknown-elf", "-c", "-fPIC"];
    args.extend(["-fno-math-errno", "-fno-stack-protector"]);
    if lang == "c" {
        args.extend(["-ffreestanding", "-nostdlib", "-fno-ident"]);
    } else {
        args.extend(["-funroll-loops", "-fvectorize", "-fslp-vectorize"]);
    }
    args.extend_from_slice(extra);
    args.extend(["-x", lang]);
    clang_object(&args, source)
}

fn compile(source: &str, extra: &[&str]) -> Vec<u8> {
    compile_lang(source.as_bytes(), "c", extra)
}

struct Linked {
    image: Vec<u8>,
    records: Vec<RelocRecord>,
    /// (count, first) as target addresses.
    stubs: (u32, u64),
    got: (u32, u64),
    /// Every named symbol of the first object: address and st_other.
    symbols: HashMap<String, (u64, u8)>,
}

impl Linked {
    fn toc(&self) -> u64 {
        self.got.1 + TOC_BIAS
    }
    fn word(&self, address: u64) -> u32 {
        let at = (address - BASE) as usize;
        u32::from_le_bytes(self.image[at..at + 4].try_into().unwrap())
    }
    fn quad(&self, address: u64) -> u64 {
        let at = (address - BASE) as usize;
        u64::from_le_bytes(self.image[at..at + 8].try_into().unwrap())
    }
    fn symbol(&self, name: &str) -> (u64, u8) {
        *self
            .symbols
            .get(name)
            .unwrap_or_else(|| panic!("no {name}"))
    }
    /// The records whose place lies in function `name`.
    fn records_in(&self, name: &str, size: u64) -> Vec<RelocRecord> {
        let (start, _) = self.symbol(name);
        self.records
            .iter()
            .filter(|r| (start..start + size).contains(&r.place_address))
            .copied()
            .collect()
    }
}

fn link(objects: &[&[u8]], resolve: &mut dyn FnMut(&[u8]) -> Option<u64>) -> Result<Linked, Error> {
    let plan = Plan::new(objects, PAGE)?;
    let mut image = vec![0x55u8; plan.image_size() as usize];
    let mut backend = SliceBackend::new(&mut image, BASE, PAGE);
    let (stubs, got) = (plan.stubs(), plan.got());
    let mut records = Vec::new();
    let linked = plan.link_observed(&mut backend, resolve, &mut |r: &RelocRecord| {
        records.push(*r)
    })?;
    let object = Object::parse(objects[0])?;
    let mut symbols = HashMap::new();
    for index in 1..object.symbol_count() {
        let sym = object.symbol(index)?;
        if !sym.name.is_empty() {
            let address = linked.address_of(0, index).unwrap();
            symbols.insert(
                String::from_utf8_lossy(sym.name).into_owned(),
                (address, sym.other),
            );
        }
    }
    Ok(Linked {
        image,
        records,
        stubs: (stubs.0, BASE + stubs.1),
        got: (got.0, BASE + got.1),
        symbols,
    })
}

fn opcode(word: u32) -> u32 {
    word >> 26
}
fn rt(word: u32) -> u32 {
    (word >> 21) & 31
}
fn ra(word: u32) -> u32 {
    (word >> 16) & 31
}

/// Follows `addis rT,rA,hi` then D/DS-form uses of rT from `start` for `count` words and
/// returns every address computed from r2 (`addi`, `ld`, `lwz`, `lfs`, `lxv`, ...). A
/// register holds `r2 + (hi << 16)` from its `addis` until it is overwritten.
fn toc_addresses(l: &Linked, start: u64, count: u64, r2: u64) -> Vec<u64> {
    let mut high: HashMap<u32, u64> = HashMap::new();
    let mut found = Vec::new();
    for i in 0..count {
        let w = l.word(start + 4 * i);
        let imm = w as u16;
        match opcode(w) {
            15 if ra(w) == 2 => {
                high.insert(rt(w), r2.wrapping_add(((imm as i16 as i64) << 16) as u64));
            }
            // addi, lwz, lbz, lfs, lfd, stw, ...: D form.
            14 | 32..=55 => {
                if let Some(&h) = high.get(&ra(w)) {
                    found.push(h.wrapping_add(imm as i16 as i64 as u64));
                }
                if opcode(w) == 14 || opcode(w) < 36 {
                    high.remove(&rt(w));
                }
            }
            // ld/lwa (58), std (62): DS form; lxv/stxv (61, XO 1/5): DQ form.
            58 | 61 | 62 => {
                if let Some(&h) = high.get(&ra(w)) {
                    let mask = if opcode(w) == 61 && w & 3 == 1 {
                        !15
                    } else {
                        !3
                    };
                    found.push(h.wrapping_add((imm & mask) as i16 as i64 as u64));
                }
                if opcode(w) == 58 {
                    high.remove(&rt(w));
                }
            }
            _ => {}
        }
    }
    found
}

const KERNELS: &str = r#"
extern float expf(float);
static const int lut[8] = {3, 1, 4, 1, 5, 9, 2, 6};
int counter = 10;
__attribute__((noinline)) static int helper(int x) { return x + lut[x & 7] + counter; }
int lookup(int i) { return lut[i & 7]; }
int bump(void) { return ++counter; }
int twice(int x) { return helper(x) * 2; }
float soft(float x) { return expf(x) + (float)counter; }
"#;

#[test]
fn global_entry_computes_toc_and_toc_relative_accesses_reach_their_data() {
    for opt in ["-O0", "-O2"] {
        let object = compile(KERNELS, &["-mcpu=pwr8", opt]);
        let l = link(&[&object], &mut |n| {
            (n == b"expf").then_some(0x1234_5678_0000)
        })
        .unwrap();
        for f in ["lookup", "bump", "twice", "soft"] {
            let (start, other) = l.symbol(f);
            // addis r2,r12,ha; addi r2,r2,lo at the global entry, with r12 = start.
            let (w0, w1) = (l.word(start), l.word(start + 4));
            assert_eq!(w0 & 0xffff_0000, 0x3c4c_0000, "{f} {opt}: addis r2,r12");
            assert_eq!(w1 & 0xffff_0000, 0x3842_0000, "{f} {opt}: addi r2,r2");
            let r2 = start.wrapping_add(join_ha_lo(w0 as u16, w1 as u16) as u64);
            assert_eq!(r2, l.toc(), "{f} {opt}");
            assert_eq!(local_entry_offset(other), Some(8), "{f} {opt}");
        }
        // lookup reaches lut directly; bump reaches counter through its .toc entry.
        let (lut, _) = l.symbol("lut");
        let (lookup, _) = l.symbol("lookup");
        assert!(
            toc_addresses(&l, lookup, 16, l.toc()).contains(&lut),
            "{opt}"
        );
        let (counter, _) = l.symbol("counter");
        let (bump, _) = l.symbol("bump");
        let reached = toc_addresses(&l, bump, 24, l.toc());
        assert!(
            reached.iter().any(|&a| l.quad(a) == counter),
            "{opt}: a .toc entry holding &counter: {reached:x?}"
        );
        // Every TOC16 record decodes back to S + A - TOC.
        for r in &l.records {
            if r.rela.r_type.0 == 50 {
                let w = l.word(r.place_address);
                let want = (r.symbol_address as i128 + r.rela.addend as i128 - l.toc() as i128
                    + 0x8000)
                    >> 16;
                assert_eq!(w as u16, want as u16, "{r:?}");
            }
        }
    }
}

#[test]
fn external_call_goes_through_the_stub_and_restores_r2() {
    let expf = 0x1234_5678_0000;
    for opt in ["-O0", "-O1", "-O2", "-O3"] {
        let object = compile(KERNELS, &["-mcpu=pwr8", opt]);
        let l = link(&[&object], &mut |n| (n == b"expf").then_some(expf)).unwrap();
        assert_eq!(l.stubs.0, 1, "{opt}");
        let stub = l.stubs.1;
        let calls: Vec<_> = l
            .records
            .iter()
            .filter(|r| r.applied.via == Via::Stub)
            .collect();
        assert_eq!(calls.len(), 1, "{opt}");
        let call = calls[0];
        let bl = l.word(call.place_address);
        assert_eq!(bl & 0xfc00_0003, 0x4800_0001, "bl");
        assert_eq!(
            call.place_address.wrapping_add(decode_li24(bl) as u64),
            stub
        );
        assert_eq!(l.word(call.place_address + 4), LD_R2_24_R1, "{opt}");
        // The stub: std r2,24(r1); addis r12,r2,ha; ld r12,lo(r12); mtctr r12; bctr.
        assert_eq!(l.word(stub), STD_R2_24_R1);
        let (addis, ld) = (l.word(stub + 4), l.word(stub + 8));
        assert_eq!((addis >> 16, ld >> 16), (0x3d82, 0xe98c));
        let slot = l
            .toc()
            .wrapping_add(join_ha_lo(addis as u16, ld as u16) as u64);
        assert_eq!(l.quad(slot), expf, "{opt}: the slot holds the target");
        assert_eq!(
            (l.word(stub + 12), l.word(stub + 16)),
            (0x7d89_03a6, 0x4e80_0420)
        );
        // The PC-relative entry reaches the same slot.
        let (prefix, suffix) = (l.word(stub + NOTOC_ENTRY), l.word(stub + NOTOC_ENTRY + 4));
        assert_eq!(
            (stub + NOTOC_ENTRY).wrapping_add(decode_d34(prefix, suffix) as u64),
            slot
        );
    }
}

#[test]
fn local_call_enters_at_the_local_entry_point() {
    for opt in ["-O0", "-O1", "-O2", "-O3"] {
        let object = compile(KERNELS, &["-mcpu=pwr8", opt]);
        let l = link(&[&object], &mut |_| Some(0x1234_5678_0000)).unwrap();
        let (helper, other) = l.symbol("helper");
        let local = local_entry_offset(other).unwrap();
        assert_eq!(local, 8, "{opt}: helper reads globals, so it sets up r2");
        let calls: Vec<_> = l
            .records_in("twice", 0x80)
            .into_iter()
            .filter(|r| r.rela.r_type.0 == 10)
            .collect();
        assert_eq!(calls.len(), 1, "{opt}");
        let call = calls[0];
        assert_eq!(call.applied.via, Via::Direct);
        let bl = l.word(call.place_address);
        assert_eq!(
            call.place_address.wrapping_add(decode_li24(bl) as u64),
            helper + local,
            "{opt}"
        );
        // The word after a local call is left alone.
        assert_ne!(l.word(call.place_address + 4), LD_R2_24_R1);
    }
}

#[test]
fn calls_through_a_pointer_set_r12() {
    // The generated C call shim and libffi reach a kernel through a pointer: ppc64le
    // compilers move the target into r12 and branch through CTR, so the kernel's global
    // entry point sees r12 = its own address, as its TOC set-up requires.
    let object = compile(
        "int call(int (*f)(int), int x) { return f(x) + 1; }",
        &["-mcpu=pwr8", "-O2"],
    );
    let l = link(&[&object], &mut |_| None).unwrap();
    let (start, _) = l.symbol("call");
    let words: Vec<u32> = (0..24).map(|i| l.word(start + 4 * i)).collect();
    // bctrl, after `mtctr rX` and `mr r12,rX` (= `or r12,rX,rX`) of the same register.
    let bctrl = words.iter().position(|&w| w == 0x4e80_0421).expect("bctrl");
    let before = &words[..bctrl];
    let source = before
        .iter()
        .rev()
        .find(|&&w| w & 0xfc1f_ffff == 0x7c09_03a6)
        .map(|&w| rt(w))
        .expect("mtctr");
    let mr_r12 = 0x7c0c_0378 | source << 21 | source << 11;
    assert!(
        source == 12 || before.contains(&mr_r12),
        "r12 = the target: {words:08x?}"
    );
    // ... with the caller's r2 saved and restored around it.
    assert!(before.contains(&STD_R2_24_R1));
    assert_eq!(words[bctrl + 1], LD_R2_24_R1);
}

const PCREL: &str = r#"
extern float expf(float);
static const int lut[8] = {3, 1, 4, 1, 5, 9, 2, 6};
int counter = 10;
int lookup(int i) { return lut[i & 7]; }
int bump(void) { return ++counter; }
float soft(float x) { return expf(x) + 1.0f; }
"#;

#[test]
fn power10_pc_relative_code() {
    let expf = 0x1234_5678_0000;
    let object = compile(PCREL, &["-mcpu=pwr10", "-O2"]);
    let l = link(&[&object], &mut |n| (n == b"expf").then_some(expf)).unwrap();
    // paddi reaches lut.
    let (lut, _) = l.symbol("lut");
    let pcrel: Vec<_> = l
        .records_in("lookup", 0x20)
        .into_iter()
        .filter(|r| r.rela.r_type.0 == 132)
        .collect();
    assert_eq!(pcrel.len(), 1);
    let at = pcrel[0].place_address;
    assert_eq!(
        at.wrapping_add(decode_d34(l.word(at), l.word(at + 4)) as u64),
        lut
    );
    // pld reaches counter's GOT slot.
    let (counter, _) = l.symbol("counter");
    let got: Vec<_> = l
        .records_in("bump", 0x20)
        .into_iter()
        .filter(|r| r.rela.r_type.0 == 133)
        .collect();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].applied.via, Via::Got);
    let at = got[0].place_address;
    let slot = at.wrapping_add(decode_d34(l.word(at), l.word(at + 4)) as u64);
    assert_eq!(l.quad(slot), counter);
    // bl expf@notoc enters the stub's PC-relative entry, whose pld reaches expf's slot.
    let call = l
        .records
        .iter()
        .find(|r| r.rela.r_type.0 == 116)
        .expect("REL24_NOTOC");
    assert_eq!(call.applied.via, Via::Stub);
    let entry = call
        .place_address
        .wrapping_add(decode_li24(l.word(call.place_address)) as u64);
    assert_eq!(entry, l.stubs.1 + NOTOC_ENTRY);
    let slot = entry.wrapping_add(decode_d34(l.word(entry), l.word(entry + 4)) as u64);
    assert_eq!(l.quad(slot), expf);
    assert_ne!(l.word(call.place_address + 4), LD_R2_24_R1);
}

#[test]
fn a_call_without_its_nop_is_a_typed_error() {
    // A hand-written sibling call to an external (`b ext`): there is no nop to restore r2.
    let object = compile(
        "extern int ext(int); int f(int x) { __asm__ volatile(\"bl ext\\n\\tmflr 0\"); return x; }",
        &["-mcpu=pwr8", "-O2"],
    );
    let err = link(&[&object], &mut |_| Some(0x1234_5678_0000))
        .err()
        .expect("refused");
    let text = err.to_string();
    assert!(
        text.contains("R_PPC64_REL24") && text.contains("unexpected instruction 0x7c0802a6"),
        "{text}"
    );
}

#[test]
fn far_local_data_in_the_small_code_model_is_range_checked() {
    // -mcmodel=small: TOC16_DS reaches ±32 KiB around .TOC.. A small image fits.
    let object = compile(KERNELS, &["-mcpu=pwr8", "-O2", "-mcmodel=small"]);
    let l = link(&[&object], &mut |_| Some(0x1234_5678_0000)).unwrap();
    assert!(l.records.iter().any(|r| r.rela.r_type.0 == 63));
    // -mcmodel=large: `.quad .TOC.-f` before the function (REL64), loaded at entry.
    let object = compile(KERNELS, &["-mcpu=pwr8", "-O2", "-mcmodel=large"]);
    let l = link(&[&object], &mut |_| Some(0x1234_5678_0000)).unwrap();
    let rel64: Vec<_> = l.records.iter().filter(|r| r.rela.r_type.0 == 44).collect();
    assert!(!rel64.is_empty());
    for r in rel64 {
        // ld r2,-8(r12); add r2,r2,r12 at the global entry, 8 bytes after the quad.
        let entry = r.place_address + 8;
        assert_eq!(entry.wrapping_add(l.quad(r.place_address)), l.toc());
        assert_eq!(l.word(entry), 0xe84c_fff8, "ld r2,-8(r12)");
    }
}

/// Every kernel of the corpus links for pwr8/pwr9 at -O0..-O3 and pwr10 at -O0/-O2, its
/// externals far away (every external call through a stub).
#[test]
fn the_corpus_links_for_every_cpu_and_level() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/kernels");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| matches!(p.extension().and_then(|e| e.to_str()), Some("c" | "ll")))
        .collect();
    files.sort();
    let mut linked = 0;
    for (cpu, opts) in [
        ("pwr8", &["-O0", "-O1", "-O2", "-O3"][..]),
        ("pwr9", &["-O0", "-O1", "-O2", "-O3"][..]),
        ("pwr10", &["-O0", "-O2"][..]),
    ] {
        for file in &files {
            let name = file.file_name().unwrap().to_string_lossy();
            if name.starts_with("f16_") || name.starts_with("bf16_") {
                continue; // clang 19: _Float16 / __bf16 are not supported on ppc64le
            }
            let lang = if name.ends_with(".ll") { "ir" } else { "c" };
            let source = std::fs::read(file).unwrap();
            for opt in opts {
                let cpu_flag = format!("-mcpu={cpu}");
                let object = compile_lang(&source, lang, &[&cpu_flag, opt]);
                let mut next = 0x7000_0000_0000u64;
                let l = link(&[&object], &mut |_| {
                    next += 0x1000;
                    Some(next)
                })
                .unwrap_or_else(|e| panic!("{name} {cpu} {opt}: {e}"));
                for r in &l.records {
                    if r.rela.r_type.0 == 10 && r.applied.via == Via::Stub {
                        assert_eq!(l.word(r.place_address + 4), LD_R2_24_R1);
                    }
                    if r.rela.r_type.0 == 10 && r.applied.via == Via::Direct {
                        assert_ne!(l.word(r.place_address + 4), LD_R2_24_R1);
                    }
                }
                assert!(l
                    .records
                    .iter()
                    .all(|r| r.applied.via != Via::Nothing || r.rela.r_type.0 == 123));
                linked += 1;
            }
        }
    }
    assert!(linked >= 200, "{linked}");
}
