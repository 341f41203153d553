//! Kernels for Windows x86_64: compiled by clang for the Windows x64 calling convention in
//! an ELF object (`common::WINDOWS_FLAGS`), loaded into an arena and an `MmapBackend`, and
//! called as `extern "C"` (which is the Windows x64 convention on Windows) with ints,
//! floats, doubles, pointers and more than four arguments; they call `expf` and `memcpy`
//! from the C runtime's DLLs, ntdll's `__chkstk` and Rust's compiler-rt helpers.
//!
//! On Linux the one test here compiles every kernel (storing the objects in
//! `ELFJIT_TEST_OBJECTS`); on Windows (under Wine: scripts/test-windows) the tests read
//! those objects, since a Windows program cannot start clang there, and run them.

mod common;

/// The kernels, one source.
const KERNELS: &str = r#"
extern float expf(float);
extern void *memcpy(void *, const void *, unsigned long long);
static const int lut[8] = {3, 1, 4, 1, 5, 9, 2, 6};
int counter = 10;

int add(int a, int b) { return a + b; }
int lookup(int i) { return lut[i & 7]; }
int bump(void) { return ++counter; }

/* Nine arguments: the first four in rcx/xmm1/r8/xmm3 by position, the rest on the stack
   above the caller's 32-byte shadow space. */
double mix(int a, float b, const double *p, double c, long long d, float e, int *out,
           double f, short g) {
    *out = a * 2 + g;
    return a + b + p[0] + p[1] + c + (double)d + e + f + g;
}

float softsum(const float *x, int n) {
    float s = 0;
    for (int i = 0; i < n; i++) s += expf(x[i]);
    return s;
}

long long copy_sum(unsigned char *dst, const unsigned char *src, int n) {
    memcpy(dst, src, (unsigned long long)n);
    long long s = 0;
    for (int i = 0; i < n; i++) s += dst[i];
    return s;
}

/* A frame larger than a page: Windows code probes the stack with __chkstk. */
int deep(int n) {
    volatile unsigned char buf[20000];
    for (int i = 0; i < n; i++) buf[i * 97 % 20000] = (unsigned char)i;
    return buf[(n - 1) * 97 % 20000] + buf[0];
}

unsigned long long divide(unsigned long long hi, unsigned long long lo, unsigned long long d) {
    unsigned __int128 x = ((unsigned __int128)hi << 64) | lo;
    return (unsigned long long)(x / d);
}
"#;

/// The optimisation levels the Windows tests load [`KERNELS`] at (all compiled on Linux).
const OPTS: [&str; 3] = ["-O0", "-O1", "-O2"];

#[cfg(not(windows))]
#[test]
fn windows_kernels_compile_to_x86_64_elf_objects() {
    for opt in OPTS {
        let object = common::compile_for_windows(KERNELS, opt);
        assert_eq!(object.get(..4), Some(&b"\x7fELF"[..]), "{opt}");
        // e_machine 62: x86_64.
        assert_eq!(object.get(18..20), Some(&[62u8, 0][..]), "{opt}");
    }
}

#[cfg(windows)]
mod on_windows {
    use super::*;
    use elfjit_core::Plan;
    use elfjit_core::SegmentKind;
    use elfjit_os::{Arena, ArenaError, MmapBackend, Platform, ProcessResolver};
    use windows_sys::Win32::System::Memory::{
        VirtualQuery, MEMORY_BASIC_INFORMATION, MEM_COMMIT, MEM_RESERVE, PAGE_EXECUTE_READWRITE,
        PAGE_EXECUTE_WRITECOPY,
    };

    /// The global `name` of a linked image.
    fn global(image: &elfjit_core::Image, name: &str) -> usize {
        image
            .globals()
            .find(|g| g.name == name.as_bytes())
            .map(|g| g.address as usize)
            .unwrap_or_else(|| panic!("no {name}"))
    }

    /// Calls every kernel at `addresses` (by name) and checks the answers against Rust's.
    ///
    /// # Safety
    /// `at` gives the addresses of live kernels from [`KERNELS`].
    unsafe fn check_kernels(at: impl Fn(&str) -> usize) {
        // SAFETY (all transmutes): each address is the kernel of that name, compiled for
        // the Windows x64 convention, which is `extern "C"` on Windows, with exactly these
        // parameter and return types.
        unsafe {
            let add: extern "C" fn(i32, i32) -> i32 = std::mem::transmute(at("add"));
            assert_eq!(add(40, 2), 42);
            assert_eq!(add(-7, 3), -4);
            let lookup: extern "C" fn(i32) -> i32 = std::mem::transmute(at("lookup"));
            assert_eq!(
                (0..8).map(|i| lookup(i)).collect::<Vec<_>>(),
                [3, 1, 4, 1, 5, 9, 2, 6]
            );
            let bump: extern "C" fn() -> i32 = std::mem::transmute(at("bump"));
            assert_eq!((bump(), bump()), (11, 12));
            let counter = at("counter") as *const i32;
            assert_eq!(*counter, 12, "the global, read from Rust");

            type Mix =
                extern "C" fn(i32, f32, *const f64, f64, i64, f32, *mut i32, f64, i16) -> f64;
            let mix: Mix = std::mem::transmute(at("mix"));
            let p = [0.25f64, 1.5];
            let mut out = 0i32;
            let got = mix(
                3,
                0.5,
                p.as_ptr(),
                10.0,
                -4_000_000_000,
                2.25,
                &mut out,
                100.125,
                -9,
            );
            let want = 3.0 + 0.5 + 0.25 + 1.5 + 10.0 - 4_000_000_000.0 + 2.25 + 100.125 - 9.0;
            assert_eq!(got, want);
            assert_eq!(out, 3 * 2 - 9);

            let softsum: extern "C" fn(*const f32, i32) -> f32 = std::mem::transmute(at("softsum"));
            let x = [0.0f32, 0.5, 1.0, -1.0, 2.0];
            let want: f32 = x.iter().map(|v| v.exp()).sum();
            let got = softsum(x.as_ptr(), x.len() as i32);
            assert!((got - want).abs() <= want * 1e-6, "{got} != {want}");

            let copy_sum: extern "C" fn(*mut u8, *const u8, i32) -> i64 =
                std::mem::transmute(at("copy_sum"));
            let src: Vec<u8> = (0..300u32).map(|i| (i * 7) as u8).collect();
            let mut dst = vec![0u8; 300];
            let sum = copy_sum(dst.as_mut_ptr(), src.as_ptr(), 300);
            assert_eq!(dst, src);
            assert_eq!(sum, src.iter().map(|&b| i64::from(b)).sum::<i64>());

            let deep: extern "C" fn(i32) -> i32 = std::mem::transmute(at("deep"));
            // buf[0] is written once, with 0; the last index written holds (n - 1) as a byte.
            let n = 5000;
            assert_eq!(deep(n), (n - 1) % 256);

            let divide: extern "C" fn(u64, u64, u64) -> u64 = std::mem::transmute(at("divide"));
            let x = (3u128 << 64) | 12345;
            assert_eq!(divide(3, 12345, 1_000_003), (x / 1_000_003) as u64);
        }
    }

    /// What `VirtualQuery` says of the run of pages from `at`.
    fn query(at: usize) -> MEMORY_BASIC_INFORMATION {
        // SAFETY: all-zero is a valid MEMORY_BASIC_INFORMATION.
        let mut info: MEMORY_BASIC_INFORMATION = unsafe { std::mem::zeroed() };
        let size = std::mem::size_of::<MEMORY_BASIC_INFORMATION>();
        // SAFETY: VirtualQuery writes at most `size` bytes into `info`.
        assert_ne!(unsafe { VirtualQuery(at as *const _, &mut info, size) }, 0);
        info
    }

    /// `(address, bytes, protection)` of every committed run of pages in `ranges`.
    fn committed_runs(ranges: &[(usize, usize)]) -> Vec<(usize, usize, u32)> {
        let mut out = Vec::new();
        for &(start, len) in ranges {
            let mut at = start;
            while at < start + len {
                let info = query(at);
                let end = (info.BaseAddress as usize + info.RegionSize).min(start + len);
                if info.State == MEM_COMMIT {
                    out.push((at, end - at, info.Protect));
                }
                at = end;
            }
        }
        out
    }

    /// `(address, protection)` of every committed run of pages in `ranges`.
    fn committed(ranges: &[(usize, usize)]) -> Vec<(usize, u32)> {
        committed_runs(ranges)
            .into_iter()
            .map(|(at, _, protect)| (at, protect))
            .collect()
    }

    /// An arena is charged for the pages its modules hold, not for its reservation: the
    /// data region, whose pages rest writable, is committed run by run as loads take it
    /// and decommitted as they free it (it used to be committed whole: 256 MiB of commit
    /// charge for an idle arena).
    #[test]
    fn an_arena_commits_the_pages_its_modules_hold_not_its_reservation() {
        let config = elfjit_os::ArenaConfig {
            retain: 0,
            ..elfjit_os::ArenaConfig::default()
        };
        let arena = Arena::with_config(config).expect("arena");
        let page = arena.page_size();
        let layout = elfjit_core::Layout::new(
            [elfjit_core::SegmentRequest {
                size: 3 * page as u64,
                align: 16,
            }; 3],
        );
        let mut backend = arena.backend();
        elfjit_core::MemoryBackend::allocate(&mut backend, &layout).expect("allocate");
        let data = elfjit_core::MemoryBackend::segment_mut(&mut backend, SegmentKind::Data)
            .expect("writable");
        data.fill(0xa5);
        let data = data.as_ptr() as usize;
        elfjit_core::MemoryBackend::publish(&mut backend).expect("publish");

        let reserved: usize = arena.regions().iter().map(|&(_, len)| len).sum();
        let committed: usize = committed_runs(&arena.regions())
            .iter()
            .map(|&(_, len, _)| len)
            .sum();
        assert!(reserved >= 256 << 20, "{reserved}");
        assert!(
            committed <= 64 * page,
            "{committed} of {reserved} reserved bytes are committed"
        );
        assert_eq!(query(data).State, MEM_COMMIT, "the data in use");
        assert_eq!(
            query(data + 16 * page).State,
            MEM_RESERVE,
            "data not in use"
        );

        drop(backend);
        assert_eq!(query(data).State, MEM_RESERVE, "freed data is decommitted");
    }

    #[test]
    fn kernels_run_from_an_arena_and_no_page_is_writable_and_executable() {
        let arena = Arena::new();
        for opt in [OPTS[0], OPTS[2]] {
            let object = common::compile_for_windows(KERNELS, opt);
            let plan = Plan::new(&[&object], arena.page_size() as u64).expect("plan");
            let mut memory = arena.backend();
            let image = plan.link(&mut memory, &mut ProcessResolver).expect("link");
            // SAFETY: the addresses are the kernels just linked, alive with `memory`.
            unsafe { check_kernels(|name| global(&image, name)) };
            let pages = committed(&arena.regions());
            assert!(!pages.is_empty());
            for &(at, protect) in &pages {
                assert!(
                    protect != PAGE_EXECUTE_READWRITE && protect != PAGE_EXECUTE_WRITECOPY,
                    "{at:#x} is writable and executable ({protect:#x})"
                );
            }
            let code = memory
                .segment(elfjit_core::SegmentKind::Code)
                .expect("code");
            let code_protect = pages.iter().rev().find(|&&(at, _)| at <= code.0);
            assert_eq!(
                code_protect.map(|&(_, p)| p),
                Some(windows_sys::Win32::System::Memory::PAGE_EXECUTE_READ),
                "{opt}"
            );
        }
    }

    #[test]
    fn kernels_run_from_an_mmap_backend() {
        let object = common::compile_for_windows(KERNELS, OPTS[1]);
        let mut memory = MmapBackend::new();
        let plan = Plan::new(&[&object], memory.page_size()).expect("plan");
        let image = plan.link(&mut memory, &mut ProcessResolver).expect("link");
        // SAFETY: the addresses are the kernels just linked, alive with `memory`.
        unsafe { check_kernels(|name| global(&image, name)) };
        let (start, len) = memory.region().expect("mapped");
        for (at, protect) in committed(&[(start, len)]) {
            assert_ne!(protect, PAGE_EXECUTE_READWRITE, "{at:#x}");
        }
    }

    #[test]
    fn released_pages_read_as_zero_when_reused() {
        // Nothing retained: every freed page is decommitted and, for data, committed again.
        let config = elfjit_os::ArenaConfig {
            retain: 0,
            class_bytes: 2 << 20,
            ..elfjit_os::ArenaConfig::default()
        };
        let arena = Arena::with_config(config).expect("arena");
        let layout = elfjit_core::Layout::new(
            [elfjit_core::SegmentRequest {
                size: 3 * arena.page_size() as u64,
                align: 16,
            }; 3],
        );
        for round in 0..3u8 {
            let mut backend = arena.backend();
            elfjit_core::MemoryBackend::allocate(&mut backend, &layout).expect("allocate");
            let zero_filled = elfjit_core::MemoryBackend::zero_filled(&backend);
            for kind in elfjit_core::SegmentKind::ALL {
                let bytes =
                    elfjit_core::MemoryBackend::segment_mut(&mut backend, kind).expect("writable");
                if zero_filled {
                    assert!(bytes.iter().all(|&b| b == 0), "round {round} {kind:?}");
                }
                bytes.fill(0xa5);
            }
            elfjit_core::MemoryBackend::publish(&mut backend).expect("publish");
        }
    }

    #[test]
    fn four_threads_load_call_and_unload_in_one_arena() {
        // Small chunks and nothing retained: freed pages are decommitted and reused while
        // other threads run their own modules.
        let config = elfjit_os::ArenaConfig {
            retain: 0,
            class_bytes: 2 << 20,
            ..elfjit_os::ArenaConfig::default()
        };
        let arena = Arena::with_config(config).expect("arena");
        let objects: Vec<Vec<u8>> = OPTS
            .iter()
            .map(|opt| common::compile_for_windows(KERNELS, opt))
            .collect();
        std::thread::scope(|scope| {
            for t in 0..4usize {
                let (arena, objects) = (&arena, &objects);
                scope.spawn(move || {
                    for round in 0..25usize {
                        let object = &objects[(t + round) % objects.len()];
                        let plan = Plan::new(&[object], arena.page_size() as u64).expect("plan");
                        let mut memory = arena.backend();
                        let image = plan.link(&mut memory, &mut ProcessResolver).expect("link");
                        // SAFETY: `add` and `lookup` of the image just linked, alive with
                        // `memory`, with these signatures (Windows x64 = extern "C").
                        unsafe {
                            let add: extern "C" fn(i32, i32) -> i32 =
                                std::mem::transmute(global(&image, "add"));
                            let lookup: extern "C" fn(i32) -> i32 =
                                std::mem::transmute(global(&image, "lookup"));
                            assert_eq!(add(t as i32, round as i32), (t + round) as i32);
                            assert_eq!(lookup(5), 9);
                        }
                    }
                });
            }
        });
        for (at, protect) in committed(&arena.regions()) {
            assert!(
                protect != PAGE_EXECUTE_READWRITE && protect != PAGE_EXECUTE_WRITECOPY,
                "{at:#x} is writable and executable ({protect:#x})"
            );
        }
        assert_eq!(arena.stats().modules, 0);
    }

    #[test]
    fn packed_mode_is_the_typed_unsupported_error() {
        match Arena::packed() {
            Err(ArenaError::Unsupported { platform, feature }) => {
                assert_eq!(platform, Platform::Windows);
                assert!(feature.contains("packed"), "{feature}");
            }
            other => panic!("expected Unsupported, got {other:?}"),
        }
    }
}
