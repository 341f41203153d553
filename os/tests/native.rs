//! Kernels compiled by clang for the architecture these tests run on, linked by the core
//! into an `MmapBackend`, externals resolved by `ProcessResolver`, and called. On x86_64
//! this runs natively; with `cargo test --target aarch64-unknown-linux-gnu` (and riscv64,
//! ppc64le) it runs under qemu-user, which executes the relocated code for real.

use elfjit_core::Plan;
use elfjit_os::{MmapBackend, ProcessResolver};
mod common;

use common::compile;

/// A linked image that stays mapped while the test calls into it.
struct Loaded {
    _memory: MmapBackend,
    symbols: Vec<(String, u64)>,
}

impl Loaded {
    fn new(object: &[u8]) -> Loaded {
        let mut memory = MmapBackend::new();
        let page = memory.page_size();
        let plan = Plan::new(&[object], page).expect("plan");
        let image = plan.link(&mut memory, &mut ProcessResolver).expect("link");
        let symbols = image
            .globals()
            .map(|g| (String::from_utf8_lossy(g.name).into_owned(), g.address))
            .collect();
        Loaded {
            _memory: memory,
            symbols,
        }
    }

    fn get(&self, name: &str) -> usize {
        self.symbols
            .iter()
            .find(|(n, _)| n == name)
            .map(|&(_, a)| a as usize)
            .unwrap_or_else(|| panic!("no {name}"))
    }
}

const KERNELS: &str = r#"
extern float expf(float);
extern void *memcpy(void *, const void *, unsigned long);
static const int lut[8] = {3, 1, 4, 1, 5, 9, 2, 6};
int counter = 10;
static float scratch[64];
const char *greeting = "hello, kernel";

int add(int a, int b) { return a + b; }
int lookup(int i) { return lut[i & 7]; }
int bump(void) { return ++counter; }
float softsum(const float *x, int n) {
    float s = 0;
    for (int i = 0; i < n; i++) s += expf(x[i]);
    return s;
}
struct big { char bytes[300]; };
int copy_big(struct big *out, const struct big *in, int n) {
    memcpy(out, in, n);
    return out->bytes[n - 1];
}
int count_l(void) { int n = 0; for (const char *p = greeting; *p; p++) n += *p == 'l'; return n; }
__attribute__((noinline)) static float twice(float x) { return 2 * x; }
float stage(int i) { scratch[i & 63] = twice((float)i); return scratch[i & 63] + lookup(i); }
unsigned long long divide(unsigned __int128 a, unsigned long long b) { return (unsigned long long)(a / b); }
int classify(int x) {
    switch (x) {
    case 0: return 11; case 1: return 22; case 2: return 33; case 3: return 44;
    case 4: return 55; case 5: return 66; case 6: return 77; case 7: return 88;
    default: return -1;
    }
}
"#;

#[test]
fn kernels_run_at_every_opt_level() {
    for opt in ["-O0", "-O1", "-O2", "-O3"] {
        let loaded = Loaded::new(&compile(KERNELS, opt));
        // SAFETY (all transmutes below): each signature matches its C definition above and
        // `loaded` keeps the code mapped for the duration of the calls.
        unsafe {
            let add: extern "C" fn(i32, i32) -> i32 = std::mem::transmute(loaded.get("add"));
            assert_eq!(add(40, 2), 42, "{opt}");
            let lookup: extern "C" fn(i32) -> i32 = std::mem::transmute(loaded.get("lookup"));
            assert_eq!(
                (0..8).map(|i| lookup(i)).collect::<Vec<_>>(),
                [3, 1, 4, 1, 5, 9, 2, 6]
            );
            let bump: extern "C" fn() -> i32 = std::mem::transmute(loaded.get("bump"));
            assert_eq!((bump(), bump()), (11, 12), "{opt}");
            let softsum: extern "C" fn(*const f32, i32) -> f32 =
                std::mem::transmute(loaded.get("softsum"));
            let x = [0.0f32, 1.0, -1.0, 0.5];
            let want: f32 = x.iter().map(|v| v.exp()).sum();
            assert!((softsum(x.as_ptr(), 4) - want).abs() < 1e-5 * want, "{opt}");
            let copy_big: extern "C" fn(*mut u8, *const u8, i32) -> i32 =
                std::mem::transmute(loaded.get("copy_big"));
            let src: Vec<u8> = (0..300).map(|i| (i % 100) as u8).collect();
            let mut dst = vec![0u8; 300];
            assert_eq!(copy_big(dst.as_mut_ptr(), src.as_ptr(), 257), 56);
            assert_eq!(&dst[..257], &src[..257]);
            let count_l: extern "C" fn() -> i32 = std::mem::transmute(loaded.get("count_l"));
            assert_eq!(count_l(), 3);
            let stage: extern "C" fn(i32) -> f32 = std::mem::transmute(loaded.get("stage"));
            assert_eq!(stage(5), 10.0 + 9.0);
            let divide: extern "C" fn(u128, u64) -> u64 = std::mem::transmute(loaded.get("divide"));
            assert_eq!(divide((1u128 << 80) + 12345, 1 << 20), 1 << 60);
            let classify: extern "C" fn(i32) -> i32 = std::mem::transmute(loaded.get("classify"));
            assert_eq!(
                (0..9).map(|i| classify(i)).collect::<Vec<_>>(),
                [11, 22, 33, 44, 55, 66, 77, 88, -1]
            );
        }
    }
}
