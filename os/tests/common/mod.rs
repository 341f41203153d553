//! What the OS crate's integration tests share: compiling C with clang for the
//! architecture the test binary runs on (natively, or under qemu-user for cross targets;
//! clang is a host program, and qemu-user hands execve of a host binary to the host kernel).

#![allow(dead_code)] // each test binary uses its own subset

use elfjit_core::Arch;

#[path = "../../../core/tests/common/clang_run.rs"]
mod clang_run;
#[allow(unused_imports)] // each test binary uses its own subset
pub use clang_run::wait_until;

/// The bare-metal triple and the CPU/ABI flags elfjit's driver uses for this architecture.
pub fn target_flags() -> Vec<&'static str> {
    match Arch::host().expect("a supported host") {
        Arch::X86_64 => vec!["--target=x86_64-none-unknown-elf"],
        Arch::Aarch64 => vec!["--target=aarch64-none-unknown-elf", "-march=armv8-a"],
        Arch::Riscv64 => vec![
            "--target=riscv64-none-unknown-elf",
            "-march=rv64gc",
            "-mabi=lp64d",
        ],
        Arch::Loongarch64 => vec!["--target=loongarch64-none-unknown-elf"],
        Arch::Ppc64le => vec!["--target=powerpc64le-none-unknown-elf", "-mcpu=pwr8"],
    }
}

/// Compiles C `source` at `opt` with `flags` (triple and CPU) into an object.
pub fn compile_with(flags: &[&str], source: &str, opt: &str) -> Vec<u8> {
    let mut args = flags.to_vec();
    args.extend(["-c", opt, "-fPIC", "-ffreestanding", "-fno-math-errno"]);
    args.extend(["-fno-stack-protector", "-x", "c", "-", "-o", "-"]);
    clang_run::clang_output(&args, source.as_bytes())
}

/// The clang flags of a kernel for Windows x86_64: the Windows x64 calling convention in an
/// ELF object (`x86_64-pc-windows-elf`; no `-fPIC`, which Windows targets reject: their
/// code is RIP-relative anyway), so that kernels call the C runtime's DLLs and are called
/// as `extern "C"` on Windows. The driver's `x86_64-windows` target uses the same triple.
pub const WINDOWS_FLAGS: [&str; 7] = [
    "--target=x86_64-pc-windows-elf",
    "-c",
    "-ffreestanding",
    "-fno-math-errno",
    "-fno-stack-protector",
    "-x",
    "c",
];

/// Compiles C `source` at `opt` for Windows x86_64 ([`WINDOWS_FLAGS`]); any host can
/// (a Windows test under Wine reads what a native run stored, see `clang_run.rs`).
pub fn compile_for_windows(source: &str, opt: &str) -> Vec<u8> {
    let mut args = WINDOWS_FLAGS.to_vec();
    args.extend([opt, "-", "-o", "-"]);
    clang_run::clang_output(&args, source.as_bytes())
}

/// Compiles C `source` at `opt` for the architecture this test runs on.
pub fn compile(source: &str, opt: &str) -> Vec<u8> {
    compile_with(&target_flags(), source, opt)
}

/// The issue's small kernel: saxpy reading a 16-float static table (read-only data),
/// calling `expf` (a far call through a stub), counting its calls (data).
pub const SAXPY: &str = r#"
extern float expf(float);
static const float table[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
int saxpy_calls;
int saxpy(int n, float a, const float *x, float *y) {
    for (int i = 0; i < n; i++) y[i] = a * x[i] + table[i & 15] * expf(y[i]);
    return ++saxpy_calls;
}
"#;

/// The signature of [`SAXPY`]'s `saxpy`.
pub type SaxpyFn = extern "C" fn(i32, f32, *const f32, *mut f32) -> i32;

/// Calls a loaded `saxpy` once on 20 elements, checks every result against the same
/// formula computed here, and checks it returns `count` (its calls so far, this one
/// included).
///
/// # Safety
/// `entry` must be the address of a live `saxpy` from [`SAXPY`].
pub unsafe fn check_saxpy(entry: usize, count: i32) {
    // SAFETY: the caller passes a live `saxpy`.
    let f: SaxpyFn = unsafe { std::mem::transmute(entry) };
    let x: Vec<f32> = (0..20).map(|i| i as f32 * 0.25).collect();
    let mut y: Vec<f32> = (0..20).map(|i| (i % 3) as f32 * 0.1).collect();
    let expect: Vec<f32> = (0..20)
        .map(|i| 1.5 * x[i] + ((i & 15) + 1) as f32 * y[i].exp())
        .collect();
    assert_eq!(
        f(20, 1.5, x.as_ptr(), y.as_mut_ptr()),
        count,
        "call counter"
    );
    for (got, want) in y.iter().zip(&expect) {
        assert!((got - want).abs() <= want.abs() * 1e-5, "{got} != {want}");
    }
}

/// A module linked into an arena: its memory and its entry point.
pub struct InArena {
    pub memory: elfjit_os::ArenaBackend,
    pub entry: usize,
}

/// Why [`load_in`] failed: the core's error and the arena's, if it was the arena.
pub type LoadError = Box<(elfjit_core::Error, Option<elfjit_os::ArenaError>)>;

/// Links `object` into `arena` and finds global `entry`.
pub fn load_in(arena: &elfjit_os::Arena, object: &[u8], entry: &str) -> Result<InArena, LoadError> {
    Loader::new(object).load(arena, entry)
}

/// Loads one object again and again from one plan: linking leaves a plan unchanged, so
/// the object is planned once (for the arena's page size) and each load only links it.
pub struct Loader<'a> {
    object: &'a [u8],
    plan: Option<elfjit_core::Plan<'a>>,
}

impl<'a> Loader<'a> {
    pub fn new(object: &'a [u8]) -> Loader<'a> {
        Loader { object, plan: None }
    }

    /// Links the object into `arena` and finds global `entry`.
    pub fn load(&mut self, arena: &elfjit_os::Arena, entry: &str) -> Result<InArena, LoadError> {
        let page = arena.page_size() as u64;
        if self.plan.as_ref().is_none_or(|p| p.page_size() != page) {
            let plan =
                elfjit_core::Plan::new(&[self.object], page).map_err(|e| Box::new((e, None)))?;
            self.plan = Some(plan);
        }
        let plan = self.plan.as_ref().expect("planned above");
        let mut memory = arena.backend();
        let image = plan
            .link(&mut memory, &mut elfjit_os::ProcessResolver)
            .map_err(|e| Box::new((e, memory.error().copied())))?;
        let address = image
            .globals()
            .find(|g| g.name == entry.as_bytes())
            .map(|g| g.address as usize)
            .unwrap_or_else(|| panic!("no {entry}"));
        Ok(InArena {
            memory,
            entry: address,
        })
    }
}

/// What `/proc/self/maps` and `/proc/self/smaps` say about the mappings inside `ranges`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MapsSummary {
    /// Mappings (VMAs) inside the ranges.
    pub vmas: u64,
    /// Resident bytes (Rss: a page mapped in two views counts twice).
    pub rss: u64,
    /// Proportional resident bytes (Pss: a page mapped twice counts once in all).
    pub pss: u64,
    /// Mappings anywhere in the process that are writable and executable.
    pub writable_and_executable: u64,
}

fn in_ranges(ranges: &[(usize, usize)], lo: usize) -> bool {
    ranges.iter().any(|&(s, l)| s <= lo && lo < s + l)
}

fn map_range(line: &str) -> Option<(usize, usize, &str)> {
    let mut fields = line.split_whitespace();
    let (lo, hi) = fields.next()?.split_once('-')?;
    let perms = fields.next()?;
    Some((
        usize::from_str_radix(lo, 16).ok()?,
        usize::from_str_radix(hi, 16).ok()?,
        perms,
    ))
}

/// Counts the mappings inside `ranges` and any W+X mapping in the process (cheap: maps
/// only).
pub fn maps(ranges: &[(usize, usize)]) -> MapsSummary {
    let text = std::fs::read_to_string("/proc/self/maps").expect("/proc/self/maps");
    let mut out = MapsSummary::default();
    for (lo, _, perms) in text.lines().filter_map(map_range) {
        if perms.contains('w') && perms.contains('x') {
            out.writable_and_executable += 1;
        }
        if in_ranges(ranges, lo) {
            out.vmas += 1;
        }
    }
    out
}

/// [`maps`] plus resident memory inside `ranges` (reads smaps).
pub fn smaps(ranges: &[(usize, usize)]) -> MapsSummary {
    let mut out = maps(ranges);
    let text = std::fs::read_to_string("/proc/self/smaps").expect("/proc/self/smaps");
    let mut inside = false;
    for line in text.lines() {
        // Mapping headers start with a lowercase hex address; fields with a capital.
        if !line.starts_with(|c: char| c.is_ascii_uppercase()) {
            inside = map_range(line).is_some_and(|(lo, _, _)| in_ranges(ranges, lo));
            continue;
        }
        if !inside {
            continue;
        }
        let kb = |key: &str| {
            line.strip_prefix(key)
                .and_then(|v| v.trim().strip_suffix("kB"))
                .and_then(|v| v.trim().parse::<u64>().ok())
        };
        if let Some(v) = kb("Rss:") {
            out.rss += v * 1024;
        } else if let Some(v) = kb("Pss:") {
            out.pss += v * 1024;
        }
    }
    out
}

/// How many of the pages of `[start, start + len)` are in the process's page tables
/// (`/proc/self/pagemap`: one little-endian u64 per page, bit 63 "present"; readable
/// without privileges, which only hides the frame numbers). Native runs only: under
/// qemu-user the file is the host process's.
pub fn present_pages(start: usize, len: usize) -> usize {
    use std::io::{Read, Seek, SeekFrom};
    let page = 4096;
    let (first, end) = (start / page, (start + len).div_ceil(page));
    let mut file = std::fs::File::open("/proc/self/pagemap").expect("/proc/self/pagemap");
    file.seek(SeekFrom::Start(first as u64 * 8)).expect("seek");
    let mut entries = vec![0u8; (end - first) * 8];
    file.read_exact(&mut entries).expect("read pagemap");
    entries
        .chunks_exact(8)
        .filter(|&e| u64::from_le_bytes(e.try_into().expect("8 bytes")) >> 63 == 1)
        .count()
}

/// The process's resident memory (`VmRSS`), in bytes.
pub fn process_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().strip_suffix("kB"))
        .and_then(|v| v.trim().parse::<u64>().ok())
        .expect("VmRSS")
        * 1024
}

/// Divides the scale tests' counts: 1 in release (the issue's full numbers, run by
/// scripts/test with `--release`), more in debug builds and under qemu, where a load is
/// tens of times slower.
pub const SCALE: usize = if !cfg!(debug_assertions) {
    1
} else if cfg!(target_arch = "x86_64") {
    100
} else {
    1000
};

/// A small xorshift generator (the tests need repeatable randomness, not quality).
pub struct Rng(pub u64);

impl Rng {
    pub fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

/// An arena of `config`, or `None` for a packed one where the system cannot run code
/// rewritten through a second mapping: qemu-user, which caches its translation of guest
/// code per page (so foreign-architecture runs test page-granular arenas only). The
/// refusal must say so; natively on x86_64 a packed arena must be available.
pub fn arena(config: elfjit_os::ArenaConfig) -> Option<elfjit_os::Arena> {
    match elfjit_os::Arena::with_config(config) {
        Ok(arena) => Some(arena),
        Err(elfjit_os::ArenaError::PackedUnavailable { step, errno: 0 })
            if !cfg!(target_arch = "x86_64") && step.contains("qemu-user") =>
        {
            eprintln!("packed arena unavailable here: {step}");
            None
        }
        Err(e) => panic!("arena {config:?}: {e}"),
    }
}
