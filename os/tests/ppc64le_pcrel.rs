//! Power10 PC-relative kernels (`-mcpu=pwr10`: PCREL34, GOT_PCREL34, REL24_NOTOC through
//! the stubs' PC-relative entry) executed for real, on ppc64le only (elsewhere this file
//! compiles to no test at all). `.cargo/config.toml` runs the ppc64le tests under
//! `qemu-ppc64le -cpu power10`, so `cargo test --target powerpc64le-unknown-linux-gnu -p
//! elfjit-os` executes them; on a CPU without ISA 3.1 the Power10 test fails and says so.
//!
//! The same kernels also link a Power8 caller object to them, so TOC code calling
//! external functions and PC-relative code share one image.
#![cfg(all(target_arch = "powerpc64", target_endian = "little"))]

use elfjit_core::Plan;
use elfjit_os::{MmapBackend, ProcessResolver};
mod common;

const AT_HWCAP2: u64 = 26;
const PPC_FEATURE2_ARCH_3_1: u64 = 0x0004_0000;

/// Whether this process runs on a CPU that executes prefixed instructions.
fn power10() -> bool {
    let Ok(auxv) = std::fs::read("/proc/self/auxv") else {
        return false;
    };
    auxv.chunks_exact(16).any(|entry| {
        let key = u64::from_le_bytes(entry[..8].try_into().unwrap());
        let value = u64::from_le_bytes(entry[8..].try_into().unwrap());
        key == AT_HWCAP2 && value & PPC_FEATURE2_ARCH_3_1 != 0
    })
}

fn compile(source: &str, cpu: &str, opt: &str) -> Vec<u8> {
    common::compile_with(&["--target=powerpc64le-none-unknown-elf", cpu], source, opt)
}

const PCREL: &str = r#"
extern float expf(float);
extern void *memcpy(void *, const void *, unsigned long);
static const int lut[8] = {3, 1, 4, 1, 5, 9, 2, 6};
int counter = 10;
int lookup(int i) { return lut[i & 7]; }
int bump(void) { return ++counter; }
float softsum(const float *x, int n) {
    float s = 0;
    for (int i = 0; i < n; i++) s += expf(x[i]) + lut[i & 7];
    return s;
}
int copy(char *out, const char *in, int n) { memcpy(out, in, n); return out[n - 1] + counter; }
unsigned long long divide(unsigned __int128 a, unsigned long long b) { return (unsigned long long)(a / b); }
"#;

/// Power8 code in the same image: calls a PC-relative function of the other object (which
/// may clobber r2) only through a pointer, and an external through a stub, then reads
/// TOC-relative data.
const TOC: &str = r#"
extern float expf(float);
extern int lookup(int);
int table[4] = {100, 200, 300, 400};
int (*volatile through)(int) = lookup;
float mixed(float x, int i) { return expf(x) + through(i) + table[i & 3]; }
"#;

#[test]
fn power10_kernels_run() {
    assert!(
        power10(),
        "this test needs a Power10 CPU (ISA 3.1, AT_HWCAP2 ARCH_3_1): run it under \
         `qemu-ppc64le -cpu power10`, as .cargo/config.toml does, or set QEMU_CPU=power10"
    );
    for opt in ["-O0", "-O1", "-O2", "-O3"] {
        let pcrel = compile(PCREL, "-mcpu=pwr10", opt);
        let toc = compile(TOC, "-mcpu=pwr8", opt);
        let mut memory = MmapBackend::new();
        let page = memory.page_size();
        let plan = Plan::new(&[&pcrel, &toc], page).expect("plan");
        let image = plan.link(&mut memory, &mut ProcessResolver).expect("link");
        let get = |name: &str| image.symbol(name).unwrap_or_else(|| panic!("no {name}")) as usize;
        // SAFETY (all transmutes below): each signature matches its C definition above, and
        // `memory` keeps the code mapped for the duration of the calls.
        unsafe {
            let lookup: extern "C" fn(i32) -> i32 = std::mem::transmute(get("lookup"));
            assert_eq!(
                (0..8).map(|i| lookup(i)).collect::<Vec<_>>(),
                [3, 1, 4, 1, 5, 9, 2, 6]
            );
            let bump: extern "C" fn() -> i32 = std::mem::transmute(get("bump"));
            assert_eq!((bump(), bump()), (11, 12), "{opt}");
            let softsum: extern "C" fn(*const f32, i32) -> f32 =
                std::mem::transmute(get("softsum"));
            let x = [0.0f32, 1.0, -1.0, 0.5];
            let want: f32 = x.iter().map(|v| v.exp()).sum::<f32>() + 3.0 + 1.0 + 4.0 + 1.0;
            assert!((softsum(x.as_ptr(), 4) - want).abs() < 1e-4 * want, "{opt}");
            let copy: extern "C" fn(*mut u8, *const u8, i32) -> i32 =
                std::mem::transmute(get("copy"));
            let src: Vec<u8> = (0..200).map(|i| (i % 100) as u8).collect();
            let mut dst = vec![0u8; 200];
            assert_eq!(copy(dst.as_mut_ptr(), src.as_ptr(), 150), 49 + 12, "{opt}");
            assert_eq!(&dst[..150], &src[..150]);
            let divide: extern "C" fn(u128, u64) -> u64 = std::mem::transmute(get("divide"));
            assert_eq!(divide((1u128 << 80) + 12345, 1 << 20), 1 << 60);
            let mixed: extern "C" fn(f32, i32) -> f32 = std::mem::transmute(get("mixed"));
            assert_eq!(mixed(0.0, 5), 1.0 + 9.0 + 200.0, "{opt}");
        }
    }
}

/// Power8 code on any ppc64le CPU: after each external call (through a stub, into libc's
/// own TOC) the caller reads TOC-relative data, which only works if `ld r2,24(r1)` put
/// the image's TOC pointer back.
const RESTORE: &str = r#"
extern void *memcpy(void *, const void *, unsigned long);
extern float expf(float);
int table[4] = {100, 200, 300, 400};
static const int lut[4] = {1, 2, 3, 4};
int k(int *dst, const int *src, int x) {
    memcpy(dst, src, 16);
    int a = dst[x & 3] + table[x & 3] + lut[x & 3];
    a += (int)expf(0.0f) * table[(x + 1) & 3];
    return a + lut[(x + 2) & 3];
}
"#;

#[test]
fn toc_pointer_is_restored_after_external_calls() {
    for opt in ["-O0", "-O1", "-O2", "-O3"] {
        let object = compile(RESTORE, "-mcpu=pwr8", opt);
        let mut memory = MmapBackend::new();
        let page = memory.page_size();
        let plan = Plan::new(&[&object], page).expect("plan");
        let image = plan.link(&mut memory, &mut ProcessResolver).expect("link");
        let k = image.symbol("k").expect("k") as usize;
        // SAFETY: `k` has this signature in the C above; `memory` keeps it mapped.
        let k: extern "C" fn(*mut i32, *const i32, i32) -> i32 = unsafe { std::mem::transmute(k) };
        let src = [7, 8, 9, 10];
        let mut dst = [0; 4];
        for x in 0..4usize {
            let want = src[x]
                + [100, 200, 300, 400][x]
                + [1, 2, 3, 4][x]
                + [100, 200, 300, 400][(x + 1) & 3]
                + [1, 2, 3, 4][(x + 2) & 3];
            assert_eq!(
                k(dst.as_mut_ptr(), src.as_ptr(), x as i32),
                want,
                "{opt} x={x}"
            );
        }
    }
}
