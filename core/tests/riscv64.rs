//! The riscv64 relocator on real clang-19 output, linked into a buffer at chosen target
//! addresses: every AUIPC/LUI pair decoded back to its target, far calls through stubs and
//! GOT slots, label differences, and the errors (overflow, unpaired LO12, float ABI).

mod common;
use common::clang_object;

use elfjit_core::arch::riscv64::{decode_cj, decode_i, decode_j, decode_s, decode_u};
use elfjit_core::{Error, Plan, Range, RelocProblem, RelocRecord, SliceBackend, Via};
use object::elf::*;
use std::collections::HashMap;

const PAGE: u64 = 0x1000;

/// Compiles C for bare-metal riscv64 with the flags elfjit uses (rv64gc, LP64D), plus `extra`.
fn compile(source: &str, extra: &[&str]) -> Vec<u8> {
    compile_with(
        source,
        &[
            "--target=riscv64-none-unknown-elf",
            "-march=rv64gc",
            "-mabi=lp64d",
        ],
        extra,
    )
}

fn compile_with(source: &str, target: &[&str], extra: &[&str]) -> Vec<u8> {
    let mut args = target.to_vec();
    args.extend(["-c", "-ffreestanding", "-fno-ident", "-fno-math-errno"]);
    args.extend_from_slice(extra);
    args.extend(["-x", "c"]);
    clang_object(&args, source.as_bytes())
}

struct Linked {
    image: Vec<u8>,
    base: u64,
    records: Vec<RelocRecord>,
    stubs: (u32, u64),
    got: (u32, u64),
    /// Target address of each global symbol.
    globals: HashMap<String, u64>,
}

impl Linked {
    fn u32_at(&self, address: u64) -> u32 {
        let at = (address - self.base) as usize;
        u32::from_le_bytes(self.image[at..at + 4].try_into().unwrap())
    }
    fn u16_at(&self, address: u64) -> u16 {
        let at = (address - self.base) as usize;
        u16::from_le_bytes(self.image[at..at + 2].try_into().unwrap())
    }
    fn u64_at(&self, address: u64) -> u64 {
        let at = (address - self.base) as usize;
        u64::from_le_bytes(self.image[at..at + 8].try_into().unwrap())
    }
    /// The address an `auipc` at `p` plus the 12-bit immediate `lo` forms.
    fn pair_target(&self, p: u64, lo: i64) -> u64 {
        p.wrapping_add_signed((decode_u(self.u32_at(p)) << 12) + lo)
    }
    fn of_type(&self, r_type: RelocationType) -> impl Iterator<Item = &RelocRecord> {
        self.records.iter().filter(move |r| r.rela.r_type == r_type)
    }
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
    let linked = plan.link_observed(&mut backend, resolve, &mut |r: &RelocRecord| {
        records.push(*r)
    })?;
    let globals = linked
        .globals()
        .map(|g| (String::from_utf8_lossy(g.name).into_owned(), g.address))
        .collect();
    Ok(Linked {
        image,
        base,
        records,
        stubs,
        got,
        globals,
    })
}

/// Global data, read-only tables, strings, statics, externals and calls: every PC-relative
/// form clang uses for them.
const DATA_KERNEL: &str = r#"
extern int ext_counter;
extern float expf(float);
static const int lut[8] = {3, 1, 4, 1, 5, 9, 2, 6};
int counter = 10;
static float scratch[64];
double weights[4] = {0.5, 0.25, 0.125, 2.0};
const char *greeting = "hello";
__attribute__((noinline)) static float twice(float x) { return 2 * x; }
int lookup(int i) { return lut[i & 7] + counter++ + ext_counter; }
void store(int i, float v) { scratch[i & 63] = v; ext_counter = i; }
float stage(int i) { store(i, twice((float)i)); return scratch[i & 63] + expf(weights[i & 3]); }
int count_l(void) { int n = 0; for (const char *p = greeting; *p; p++) n += *p == 'l'; return n; }
static int hits;
static double total;
int hit(double x) { total += x; return ++hits; }
"#;

/// Checks every PCREL_HI20 / GOT_HI20 and its LO12s: the AUIPC + I/S immediate reach the
/// symbol (or its GOT slot, which holds the symbol's address). Returns the pairs checked.
fn check_pairs(linked: &Linked, object: &[u8]) -> usize {
    let parsed = elfjit_core::elf::Object::parse(object).unwrap();
    let text_place = |r: &RelocRecord| r.place_address - r.rela.offset;
    // HI20 place → (type, its target S + A or slot, the symbol's address).
    let mut his = HashMap::new();
    for r in &linked.records {
        let target = match r.rela.r_type {
            R_RISCV_PCREL_HI20 => {
                assert_eq!(r.applied.via, Via::Direct);
                r.symbol_address.wrapping_add_signed(r.rela.addend)
            }
            R_RISCV_GOT_HI20 => {
                assert_eq!(r.applied.via, Via::Got);
                let slot = r.place_address.wrapping_add_signed(r.applied.value as i64);
                assert_eq!(linked.u64_at(slot), r.symbol_address, "GOT slot content");
                slot
            }
            _ => continue,
        };
        his.insert(r.place_address, (r.rela.r_type, target));
    }
    let mut pairs = 0;
    for r in &linked.records {
        let store = match r.rela.r_type {
            R_RISCV_PCREL_LO12_I => false,
            R_RISCV_PCREL_LO12_S => true,
            _ => continue,
        };
        // The LO12's symbol labels its AUIPC.
        let label = parsed.symbol(r.rela.symbol as usize).unwrap();
        let hi_place = text_place(r) + label.value;
        let &(_, target) = his.get(&hi_place).expect("a HI20 at the label");
        let word = linked.u32_at(r.place_address);
        let lo = if store {
            decode_s(word)
        } else {
            decode_i(word)
        };
        assert_eq!(linked.pair_target(hi_place, lo), target, "{r:?}");
        pairs += 1;
    }
    pairs
}

#[test]
fn pcrel_and_got_pairs_reach_their_targets() {
    // A far external (beyond ±2 GiB) data symbol is only reachable through the GOT (PIC);
    // the non-PIC medany form needs it near.
    let high_base = 0x7fff_0000_0000u64;
    for (flags, ext) in [
        (&["-O2", "-fPIC"][..], 0x1234_5678u64),
        (&["-O0", "-fPIC"][..], 0x1234_5678),
        (
            &["-O2", "-fno-pic", "-mcmodel=medany"][..],
            high_base + 0x1000_0000,
        ),
        (
            &["-O1", "-fno-pic", "-mcmodel=medany"][..],
            high_base - 0x1000_0000,
        ),
    ] {
        let object = compile(DATA_KERNEL, flags);
        let linked = link_at(&[&object], high_base, &mut |n| match n {
            b"ext_counter" => Some(ext),
            b"expf" => Some(high_base + 0x40_0000),
            _ => None,
        })
        .unwrap_or_else(|e| panic!("{flags:?}: {e}"));
        let pairs = check_pairs(&linked, &object);
        assert!(pairs >= 6, "{flags:?}: {pairs} pairs");
        let types: Vec<RelocationType> = linked.records.iter().map(|r| r.rela.r_type).collect();
        if !flags.contains(&"-O0") {
            assert!(types.contains(&R_RISCV_PCREL_LO12_S), "{flags:?}");
        }
        if flags.contains(&"-fPIC") {
            assert!(types.contains(&R_RISCV_GOT_HI20), "{flags:?}");
        }
    }
}

#[test]
fn absolute_medlow_pairs_reach_their_targets_or_overflow() {
    let object = compile(DATA_KERNEL, &["-O2", "-fno-pic", "-mcmodel=medlow"]);
    let resolve = &mut |n: &[u8]| match n {
        b"ext_counter" => Some(0x2000_0000u64),
        b"expf" => Some(0x1100_0000),
        _ => None,
    };
    let base = 0x1000_0000u64;
    let linked = link_at(&[&object], base, resolve).unwrap();
    // HI20 and LO12 carry the same symbol + addend: lui + the immediate reach it.
    let his: HashMap<(u32, i64), u64> = linked
        .of_type(R_RISCV_HI20)
        .map(|r| ((r.rela.symbol, r.rela.addend), r.place_address))
        .collect();
    let mut checked = 0;
    for r in linked
        .records
        .iter()
        .filter(|r| matches!(r.rela.r_type, R_RISCV_LO12_I | R_RISCV_LO12_S))
    {
        let lui = his[&(r.rela.symbol, r.rela.addend)];
        let word = linked.u32_at(r.place_address);
        let lo = if r.rela.r_type == R_RISCV_LO12_S {
            decode_s(word)
        } else {
            decode_i(word)
        };
        let reached = (decode_u(linked.u32_at(lui)) << 12) + lo;
        assert_eq!(
            reached as u64,
            r.symbol_address.wrapping_add_signed(r.rela.addend)
        );
        checked += 1;
    }
    assert!(checked >= 6, "{checked}");
    // Linked high up, medlow's absolute addressing cannot reach: a typed error.
    let err = link_at(&[&object], 0x7fff_0000_0000, resolve)
        .err()
        .unwrap();
    let Error::Relocation(e) = err else {
        panic!("{err}")
    };
    assert_eq!(e.r_type, R_RISCV_HI20);
    assert!(err.to_string().contains("R_RISCV_HI20"), "{err}");
}

const FAR_CALLS: &str = r#"
extern int far_fn(int);
int twice(int x) { return far_fn(x) + far_fn(x + 1) * 3; }
int tail(int x) { return far_fn(x + 2); }
"#;

#[test]
fn far_external_call_goes_through_the_stub_and_got_slot() {
    let object = compile(FAR_CALLS, &["-O2", "-fPIC"]);
    let base = 0x40_0000u64;
    let far = 0x7fff_1234_5000u64;
    let linked = link_at(&[&object], base, &mut |n| (n == b"far_fn").then_some(far)).unwrap();
    let (stubs, stub_offset) = linked.stubs;
    assert_eq!(stubs, 1, "three call sites, one target, one stub");
    let stub = base + stub_offset;
    let calls: Vec<_> = linked.of_type(R_RISCV_CALL_PLT).collect();
    assert!(calls.len() >= 3, "{calls:?}");
    for call in calls {
        assert_eq!(call.applied.via, Via::Stub);
        let jalr = linked.u32_at(call.place_address + 4);
        assert_eq!(
            linked.pair_target(call.place_address, decode_i(jalr)),
            stub,
            "auipc + jalr reach the stub"
        );
    }
    // The stub: auipc t3 + ld t3 reach the slot; the slot holds the target; jr t3.
    let slot = linked.pair_target(stub, decode_i(linked.u32_at(stub + 4)));
    let (slots, got_offset) = linked.got;
    assert!(slots >= 1);
    assert!((base + got_offset..base + got_offset + 8 * u64::from(slots)).contains(&slot));
    assert_eq!(linked.u64_at(slot), far);
    assert_eq!(linked.u32_at(stub) & 0xfff, 0xe17, "auipc t3");
    assert_eq!(linked.u32_at(stub + 4) & 0xfffff, 0xe3e03, "ld t3, lo(t3)");
    assert_eq!(linked.u32_at(stub + 8), 0x000e_0067, "jr t3");

    // In reach, the same calls are direct.
    let near = base + 0x1000_0000;
    let linked = link_at(&[&object], base, &mut |_| Some(near)).unwrap();
    for call in linked.of_type(R_RISCV_CALL_PLT) {
        assert_eq!(call.applied.via, Via::Direct);
        let jalr = linked.u32_at(call.place_address + 4);
        assert_eq!(linked.pair_target(call.place_address, decode_i(jalr)), near);
    }
}

#[test]
fn local_calls_and_jumps_reach_their_functions() {
    let source = r#"
        __attribute__((noinline)) static int sq(int x) { return x * x; }
        __attribute__((noinline)) int cube(int x) { return sq(x) * x; }
        int sum(int n) { int s = 0; for (int i = 0; i < n; i++) s += i & 1 ? cube(i) : sq(i); return s; }
    "#;
    for opt in ["-O0", "-O1", "-O2", "-O3"] {
        let object = compile(source, &[opt, "-fPIC"]);
        let base = 0x7fff_8000_0000u64;
        let linked = link_at(&[&object], base, &mut |_| None).unwrap();
        let cube = linked.globals["cube"];
        let mut calls = 0;
        for call in linked.of_type(R_RISCV_CALL_PLT) {
            let target = call.symbol_address.wrapping_add_signed(call.rela.addend);
            let jalr = linked.u32_at(call.place_address + 4);
            assert_eq!(
                linked.pair_target(call.place_address, decode_i(jalr)),
                target
            );
            calls += usize::from(target == cube);
        }
        assert!(calls >= 1, "{opt}");
        for j in linked.of_type(R_RISCV_RVC_JUMP) {
            let off = decode_cj(linked.u16_at(j.place_address));
            assert_eq!(
                j.place_address.wrapping_add_signed(off),
                j.symbol_address.wrapping_add_signed(j.rela.addend)
            );
        }
        for j in linked.of_type(R_RISCV_JAL) {
            let off = decode_j(linked.u32_at(j.place_address));
            assert_eq!(
                j.place_address.wrapping_add_signed(off),
                j.symbol_address.wrapping_add_signed(j.rela.addend)
            );
        }
    }
}

#[test]
fn jump_table_label_differences_are_exact() {
    // Distinct case bodies, so that the switch stays a jump table of label differences.
    let source = r#"
        int pick(int x, int y) {
            switch (x) {
            case 0: return y * 3; case 1: return y + 7; case 2: return y ^ 5; case 3: return y << 2;
            case 4: return y - 9; case 5: return y / 3; case 6: return y % 7; case 7: return ~y;
            default: return -1;
            }
        }
    "#;
    let object = compile(source, &["-O2", "-fPIC"]);
    let linked = link_at(&[&object], 0x7f12_3456_0000, &mut |_| None).unwrap();
    let subs: HashMap<u64, &RelocRecord> = linked
        .of_type(R_RISCV_SUB32)
        .map(|r| (r.place_address, r))
        .collect();
    let mut entries = 0;
    for add in linked.of_type(R_RISCV_ADD32) {
        let sub = subs[&add.place_address];
        let expect = add.symbol_address.wrapping_add_signed(add.rela.addend) as i64
            - sub.symbol_address.wrapping_add_signed(sub.rela.addend) as i64;
        assert_eq!(linked.u32_at(add.place_address) as i32 as i64, expect);
        entries += 1;
    }
    assert!(entries >= 8, "{entries}");
}

#[test]
fn branch_out_of_range_is_an_overflow_naming_r_riscv_branch() {
    // The assembler turns a `beqz` to an undefined symbol into `bnez; j`, so the BRANCH is
    // written by hand: `beqz a0, far_label` with its relocation.
    let source = r#"
        extern char far_label[];
        int f(int x) {
            __asm__ volatile(".reloc ., R_RISCV_BRANCH, far_label\n.4byte 0x00050063" ::: "memory");
            return x;
        }
    "#;
    let object = compile(source, &["-O2", "-fPIC"]);
    let base = 0x40_0000u64;
    // 2 KiB away is within ±4 KiB: it links.
    let near = link_at(&[&object], base, &mut |_| Some(base + 0x800)).unwrap();
    let branch = near.of_type(R_RISCV_BRANCH).next().unwrap();
    let off = elfjit_core::arch::riscv64::decode_b(near.u32_at(branch.place_address));
    assert_eq!(branch.place_address.wrapping_add_signed(off), base + 0x800);
    let err = link_at(&[&object], base, &mut |_| Some(base + 0x10_0000))
        .err()
        .unwrap();
    let Error::Relocation(e) = err else {
        panic!("{err}")
    };
    assert_eq!(e.r_type, R_RISCV_BRANCH);
    assert_eq!(
        e.problem,
        RelocProblem::Overflow {
            range: Range::signed(13)
        }
    );
    assert_eq!(e.symbol.as_bytes(), b"far_label");
    let text = err.to_string();
    assert!(text.contains("R_RISCV_BRANCH"), "{text}");
    assert!(text.contains("far_label"), "{text}");
}

#[test]
fn far_jal_goes_through_the_stub() {
    // What the assembler makes of `beqz a0, far_label`: `bnez a0, 1f; j far_label; 1:`,
    // the `j` a JAL (±1 MiB) against an external.
    let source = r#"
        extern char far_label[];
        int f(int x) { __asm__ volatile("beqz %0, far_label" :: "r"(x)); return x; }
    "#;
    let object = compile(source, &["-O2", "-fPIC"]);
    let base = 0x40_0000u64;
    let far = 0x7fff_0000_0000u64;
    let linked = link_at(&[&object], base, &mut |_| Some(far)).unwrap();
    let jal = linked.of_type(R_RISCV_JAL).next().unwrap();
    assert_eq!(jal.applied.via, Via::Stub);
    let stub = base + linked.stubs.1;
    let off = decode_j(linked.u32_at(jal.place_address));
    assert_eq!(jal.place_address.wrapping_add_signed(off), stub);
    let slot = linked.pair_target(stub, decode_i(linked.u32_at(stub + 4)));
    assert_eq!(linked.u64_at(slot), far);
}

/// The byte range of every `Elf64_Rela` in the object, with its r_info offset.
fn rela_entries(object: &[u8]) -> Vec<(usize, u32)> {
    let shoff = u64::from_le_bytes(object[0x28..0x30].try_into().unwrap()) as usize;
    let shnum = u16::from_le_bytes(object[0x3c..0x3e].try_into().unwrap()) as usize;
    let mut out = Vec::new();
    for i in 0..shnum {
        let sh = &object[shoff + i * 64..shoff + (i + 1) * 64];
        if u32::from_le_bytes(sh[4..8].try_into().unwrap()) != SHT_RELA.0 {
            continue;
        }
        let offset = u64::from_le_bytes(sh[24..32].try_into().unwrap()) as usize;
        let size = u64::from_le_bytes(sh[32..40].try_into().unwrap()) as usize;
        for at in (offset..offset + size).step_by(24) {
            let info = u64::from_le_bytes(object[at + 8..at + 16].try_into().unwrap());
            out.push((at + 8, info as u32));
        }
    }
    out
}

#[test]
fn lo12_without_its_hi20_is_an_unpaired_plan_error() {
    let object = compile(DATA_KERNEL, &["-O2", "-fPIC"]);
    assert!(Plan::new(&[&object], PAGE).is_ok());
    // Turn the first PCREL_HI20 into a RELAX hint: its LO12s now label nothing.
    let mut broken = object.clone();
    let (info_at, _) = rela_entries(&object)
        .into_iter()
        .find(|&(_, t)| t == R_RISCV_PCREL_HI20.0)
        .unwrap();
    broken[info_at..info_at + 4].copy_from_slice(&R_RISCV_RELAX.0.to_le_bytes());
    let err = Plan::new(&[&broken], PAGE).err().unwrap();
    let Error::Relocation(e) = err else {
        panic!("{err}")
    };
    assert_eq!(e.problem, RelocProblem::Unpaired);
    assert!(matches!(
        e.r_type,
        R_RISCV_PCREL_LO12_I | R_RISCV_PCREL_LO12_S
    ));
    assert!(err.to_string().contains("R_RISCV_PCREL_LO12"), "{err}");
}

#[test]
fn clang_relocations_at_every_opt_level_and_code_model_link() {
    let kernels = [DATA_KERNEL, FAR_CALLS];
    for source in kernels {
        for opt in ["-O0", "-O1", "-O2", "-O3"] {
            for model in [
                &["-fPIC", "-mcmodel=medany"][..],
                &["-fPIC", "-mcmodel=medlow"],
                &["-fno-pic", "-mcmodel=medany"],
                &["-fno-pic", "-mcmodel=medlow"],
            ] {
                let mut flags = vec![opt];
                flags.extend_from_slice(model);
                let object = compile(source, &flags);
                // Low enough for medlow's absolute addresses.
                let base = 0x100_0000u64;
                let linked = link_at(&[&object], base, &mut |_| Some(base + 0x80_0000))
                    .unwrap_or_else(|e| panic!("{flags:?}: {e}"));
                check_pairs(&linked, &object);
            }
        }
    }
}
#[test]
fn objects_for_another_float_abi_are_refused() {
    let source = "double mix(double a, float b) { return a * b; }";
    // -march=rv64gc alone selects LP64D on clang 19's bare-metal triple.
    let gc = compile_with(
        source,
        &["--target=riscv64-none-unknown-elf", "-march=rv64gc"],
        &["-O2"],
    );
    assert!(Plan::new(&[&gc], PAGE).is_ok());
    for abi in ["-mabi=lp64", "-mabi=lp64f"] {
        let other = compile_with(
            source,
            &["--target=riscv64-none-unknown-elf", "-march=rv64gc", abi],
            &["-O2"],
        );
        let err = Plan::new(&[&other], PAGE).err().unwrap();
        assert!(matches!(err, Error::NotSupported { .. }), "{abi}: {err:?}");
        assert!(err.to_string().contains("float ABI"), "{err}");
    }
    // No -march at all: soft-float LP64, also refused.
    let bare = compile_with(source, &["--target=riscv64-none-unknown-elf"], &["-O2"]);
    assert!(Plan::new(&[&bare], PAGE).is_err());
}
