//! aarch64 under qemu-aarch64 through elfjit's runner: a kernel calls the runner's
//! `elfjit_far_add`, about 8 GiB from the image, so `BL` (±128 MiB) cannot reach it. The
//! core must route the call through a veneer (`LDR X16, [PC, #8]; BR X16; .quad target`),
//! and the call must come back with the right value.

use elfjit::args::{ArgSpec, RetType, Scalar};
use elfjit::clang::{CompileOptions, Compiler, Lang};
use elfjit::emulate::{FAR_ADDRESS, IMAGE_BASE, PAGE_SIZE};
use elfjit::run::{run, RunRequest};
use elfjit::Arch;
use elfjit_core::{Plan, RelocRecord, SliceBackend, Via};

const FAR_KERNEL: &str = "
extern int elfjit_far_add(int);
int far_twice(int x) { return elfjit_far_add(x) + elfjit_far_add(2 * x); }
int far_tail(int x) { return elfjit_far_add(x + 5); }
";

#[test]
fn far_call_goes_through_a_veneer_and_returns() {
    let compiler = Compiler::find().unwrap();
    for opt in 0..=3u8 {
        // The plan for the kernel as the emulated run links it: the image at IMAGE_BASE,
        // `elfjit_far_add` at FAR_ADDRESS.
        let mut opts = CompileOptions::new(Lang::C, Arch::Aarch64);
        opts.opt_level = opt;
        let object = compiler.compile(FAR_KERNEL.as_bytes(), &opts).unwrap();
        let plan = Plan::new(&[&object], PAGE_SIZE).unwrap();
        let (stubs, stub_offset) = plan.stubs();
        assert_eq!(stubs, 1, "-O{opt}: one veneer for one far target");
        let mut image = vec![0u8; plan.image_size() as usize];
        let mut records = Vec::new();
        plan.link_observed(
            &mut SliceBackend::new(&mut image, IMAGE_BASE, PAGE_SIZE),
            &mut |name: &[u8]| (name == b"elfjit_far_add").then_some(FAR_ADDRESS),
            &mut |r: &RelocRecord| records.push(*r),
        )
        .unwrap();
        let far_calls: Vec<_> = records
            .iter()
            .filter(|r| r.symbol_address == FAR_ADDRESS)
            .collect();
        assert_eq!(far_calls.len(), 3, "-O{opt}: {records:?}");
        assert!(
            far_calls.iter().all(|r| r.applied.via == Via::Stub),
            "-O{opt}: {far_calls:?}"
        );
        let veneer = stub_offset as usize;
        let literal = u64::from_le_bytes(image[veneer + 8..veneer + 16].try_into().unwrap());
        assert_eq!(literal, FAR_ADDRESS, "-O{opt}: the veneer's literal");

        // And for real, under qemu-aarch64.
        for (entry, x, want) in [
            ("far_twice", 21, 21 + 1000 + 42 + 1000),
            ("far_tail", 7, 7 + 5 + 1000),
        ] {
            let mut req = RunRequest::new(FAR_KERNEL, Lang::C);
            req.target = Arch::Aarch64;
            req.emulate = true;
            req.opt_level = opt;
            req.entry = Some(entry.to_string());
            req.ret = RetType::I32;
            req.args = vec![ArgSpec::Scalar(Scalar::I32(x))];
            // SAFETY: emulated, and each entry is `int f(int)` as declared.
            let out = unsafe { run(&req) }.unwrap_or_else(|e| panic!("-O{opt} {entry}: {e}"));
            assert_eq!(out.ret, Some(Scalar::I32(want)), "-O{opt} {entry}");
        }
    }
}
