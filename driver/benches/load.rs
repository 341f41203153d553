//! Loader benchmarks, each read as a ratio against a baseline measured in the same run:
//!
//! - `load/*` vs `floor/*`: object bytes → callable function, against the unavoidable system
//!   calls for the same image (mmap + copy + mprotect per segment + munmap);
//! - `dlopen/*`: the same code pre-linked as a shared library, loaded with dlopen + dlsym
//!   (+ dlclose) from a file and from a memfd;
//! - `relocate/*`: plan + link of an object with over 10,000 relocations into a buffer
//!   (no system calls; measured in thread CPU time, as `symbols/*`), reported per relocation: tables allocated as `Module::load` does,
//!   lent storage reused as a `no_std` user does, and one plan linked again and again;
//! - `symbols/*`: plan + link of 100, 1,000 and 10,000 symbols in ten objects that refer
//!   to each other's symbols, reported per symbol (it should stay flat as symbols grow);
//! - `end_to_end/*`: C source → first call, in memory vs `clang -shared` + dlopen;
//! - `call/*`: one call through the prepared libffi interface vs a direct typed call.
//!
//! `cargo bench -p elfjit --bench load`; the README's table is made from its output.
//! With `--features dlopen-fallback`, `Module::load` (and so `load_*/Module::load` and
//! `end_to_end/... Module::load ...`) is the fallback path: `clang -shared` + dlopen.

use criterion::measurement::{Measurement, ValueFormatter, WallTime};
use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use elfjit::args::{RetType, Scalar, ScalarType};
use elfjit::clang::{CompileOptions, Compiler, Lang};
use elfjit::ffi::{ArgKind, ArgValue, CallInterface};
use elfjit::{Arch, Module};
use elfjit_core::plan::{ObjectEntry, PlanSizes, SegmentKind};
use elfjit_core::{Plan, PlanBuffers, SliceBackend};
use std::ffi::CString;
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

fn host() -> Arch {
    Arch::host().expect("a supported host")
}

fn compile(source: &str) -> Vec<u8> {
    Compiler::find()
        .expect("clang")
        .compile(source.as_bytes(), &CompileOptions::new(Lang::C, host()))
        .expect("compile")
}

/// About 1 KiB of code and a dozen relocations: .rodata tables, a global, libm calls.
const SMALL: &str = r#"
extern float expf(float);
static const float w[16] = {1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16};
static const int perm[8] = {3, 1, 4, 0, 5, 2, 7, 6};
int calls;
float kernel(float *out, const float *in, int n) {
    float s = 0;
    calls++;
    for (int i = 0; i < n; i++) {
        float v = in[perm[i & 7] + (i & ~7)] * w[i & 15];
        v = v > 0 ? v : 0.01f * v;
        out[i] = expf(v);
        s += out[i];
    }
    return s;
}
"#;

/// Many functions and tables: a larger image with a few hundred relocations.
fn large_source() -> String {
    let mut s = String::from("extern float expf(float); extern float tanhf(float);\n");
    for i in 0..120 {
        s.push_str(&format!(
            "static const float t{i}[8] = {{{i}, 1, 2, 3, 4, 5, 6, {i}}};\n\
             float k{i}(const float *x, int n) {{ float s = 0; for (int j = 0; j < n; j++) \
             s += expf(x[j] * t{i}[j & 7]) + tanhf(x[j]); return s; }}\n"
        ));
    }
    s
}

/// Over 10,000 relocations: 1,000 globals, a table
/// of 12,000 pointers to them (absolute data relocations) and code that reads and writes
/// each (GOT-relative relocations).
fn many_relocations_source() -> String {
    let mut s = String::new();
    for i in 0..1000 {
        s.push_str(&format!("int g{i};\n"));
    }
    s.push_str("int *table[12000] = {\n");
    for i in 0..12000 {
        s.push_str(&format!("&g{},", (i * 7) % 1000));
    }
    s.push_str("};\nlong sum(void) { long t = 0;\n");
    for i in 0..1000 {
        s.push_str(&format!("t += g{i}; g{i} = (int)t;\n"));
    }
    s.push_str("return t; }\n");
    s
}

/// The image size and, per non-empty segment, (offset, bytes used, bytes mapped,
/// protection) of a link of `object`, for the floor baseline.
fn segments(object: &[u8]) -> (usize, Vec<(usize, usize, usize, i32)>) {
    let plan = Plan::new(&[object], 4096).expect("plan");
    let mut out = Vec::new();
    for kind in SegmentKind::ALL {
        let s = plan.segment(kind);
        if s.mapped != 0 {
            let prot = match kind {
                SegmentKind::Code => libc::PROT_READ | libc::PROT_EXEC,
                SegmentKind::ReadOnly => libc::PROT_READ,
                SegmentKind::Data => libc::PROT_READ | libc::PROT_WRITE,
            };
            out.push((s.offset as usize, s.size as usize, s.mapped as usize, prot));
        }
    }
    (plan.image_size() as usize, out)
}

/// The floor: what any in-memory loader must do for this image — map it, write every
/// byte the image uses (so the same pages are touched), protect each segment, unmap.
fn floor(size: usize, segments: &[(usize, usize, usize, i32)], image: &[u8]) {
    // SAFETY: a fresh private anonymous mapping, written within each segment's range
    // (inside its length), protected within its length, then unmapped; nothing else
    // refers to it.
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            size,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        assert_ne!(p, libc::MAP_FAILED);
        for &(offset, used, _, _) in segments {
            let n = used.min(image.len().saturating_sub(offset));
            std::ptr::copy_nonoverlapping(
                image.as_ptr().add(offset),
                p.cast::<u8>().add(offset),
                n,
            );
        }
        for &(offset, _, mapped, prot) in segments {
            libc::mprotect(p.cast::<u8>().add(offset).cast(), mapped, prot);
        }
        libc::munmap(p, size);
    }
}

struct Scratch(PathBuf);
impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn scratch() -> Scratch {
    let dir = std::env::temp_dir().join(format!("elfjit-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    Scratch(dir)
}

fn clang_path() -> PathBuf {
    Compiler::find().expect("clang").path().to_path_buf()
}

/// `clang -shared` of C source into `out` (the classic path, for the dlopen baselines).
fn link_shared(source: &str, out: &Path) {
    let src = out.with_extension("c");
    std::fs::write(&src, source).expect("write source");
    let status = Command::new(clang_path())
        .args([
            "-shared",
            "-fPIC",
            "-O2",
            "-march=native",
            "-fno-math-errno",
            "-fuse-ld=lld",
        ])
        .arg(&src)
        .arg("-o")
        .arg(out)
        .arg("-lm")
        .status()
        .expect("clang -shared");
    assert!(status.success());
}

fn dlopen_call(path: &CString, symbol: &CString) {
    // SAFETY: dlopen of a library we built from our own C; the handle is closed before
    // returning, and the symbol is only checked for presence.
    unsafe {
        let h = libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL);
        assert!(!h.is_null());
        black_box(libc::dlsym(h, symbol.as_ptr()));
        libc::dlclose(h);
    }
}

/// Which path `Module::load` takes in this build, for benchmark names.
const LOAD_PATH: &str = if cfg!(feature = "dlopen-fallback") {
    "dlopen-fallback (clang -shared + dlopen)"
} else {
    "in-memory"
};

fn bench_load(c: &mut Criterion) {
    let small = compile(SMALL);
    let large = compile(&large_source());
    Module::load(&small).expect("warm up: dlsym, libm");
    for (name, object) in [("small", &small), ("large", &large)] {
        let (size, segs) = segments(object);
        // The bytes the floor copies: an image's worth.
        let image = vec![0xa5u8; size];
        let mut group = c.benchmark_group(format!("load_{name}"));
        group.bench_function("floor (mmap+copy+mprotect+munmap)", |b| {
            b.iter(|| floor(size, &segs, &image))
        });
        if cfg!(feature = "dlopen-fallback") {
            group.sample_size(20);
        }
        group.bench_function(format!("Module::load + drop, {LOAD_PATH}"), |b| {
            b.iter(|| drop(black_box(Module::load(object).expect("load"))))
        });
        group.finish();
    }

    let dir = scratch();
    let so = dir.0.join("small.so");
    link_shared(SMALL, &so);
    let path = CString::new(so.to_str().expect("utf8 path")).expect("path");
    let symbol = CString::new("kernel").expect("symbol");
    let bytes = std::fs::read(&so).expect("read .so");
    // SAFETY: memfd_create with a constant name; the fd is written once and kept open for
    // the benchmark's duration.
    let memfd = unsafe { libc::memfd_create(c"elfjit-bench".as_ptr(), 0) };
    assert!(memfd >= 0);
    // SAFETY: writing our own buffer to our own fd.
    let written = unsafe { libc::write(memfd, bytes.as_ptr().cast(), bytes.len()) };
    assert_eq!(written, bytes.len() as isize);
    let memfd_path = CString::new(format!("/proc/self/fd/{memfd}")).expect("path");
    let mut group = c.benchmark_group("load_small");
    group.bench_function("dlopen+dlsym+dlclose (file)", |b| {
        b.iter(|| dlopen_call(&path, &symbol))
    });
    group.bench_function("dlopen+dlsym+dlclose (memfd)", |b| {
        b.iter(|| dlopen_call(&memfd_path, &symbol))
    });
    group.finish();
}

/// Links `plan` into `buffer` (no externals), as the relocation benchmarks measure it.
fn link(plan: &Plan<'_>, buffer: &mut [u8]) {
    let mut backend = SliceBackend::new(buffer, 0x7f00_0000_0000, 4096);
    let image = plan
        .link(&mut backend, &mut elfjit_core::NoSymbols)
        .expect("link");
    black_box(image.placement());
}

fn bench_relocate(c: &mut Criterion<ThreadCpuTime>) {
    let object = compile(&many_relocations_source());
    let objects: [&[u8]; 1] = [&object];
    let plan = Plan::new(&objects, 4096).expect("plan");
    let relocations = plan.relocation_count();
    assert!(relocations >= 10_000, "{relocations} relocations");
    let mut buffer = vec![0u8; plan.image_size() as usize];
    let mut storage = PlanBuffers::new(PlanSizes::count(&objects).expect("count"));
    let mut group = c.benchmark_group("relocate");
    group.throughput(Throughput::Elements(relocations));
    group.bench_function(
        format!("plan+link {relocations} relocations into a buffer"),
        |b| {
            // Planned each time, as Module::load does (tables allocated to size).
            b.iter(|| link(&Plan::new(&objects, 4096).expect("plan"), &mut buffer))
        },
    );
    group.bench_function(
        format!("plan+link {relocations} relocations, lent storage"),
        |b| {
            // As a no_std user does: the same static tables every time, no allocation.
            b.iter(|| {
                let mut entries = [ObjectEntry::EMPTY];
                let plan = Plan::new_in(&objects, 4096, storage.lend(&mut entries)).expect("plan");
                let mut backend = SliceBackend::new(&mut buffer, 0x7f00_0000_0000, 4096);
                let image = plan
                    .link_in(&mut backend, &mut elfjit_core::NoSymbols, &mut [])
                    .expect("link");
                black_box(image.placement());
            })
        },
    );
    group.bench_function(format!("link only, {relocations} relocations"), |b| {
        // One plan, linked again and again (what a plan reused across arenas costs).
        b.iter(|| link(&plan, &mut buffer))
    });
    group.finish();
}

/// Objects for the symbol-scaling benchmark: `total` global variables over ten objects,
/// each object holding a table of pointers to the next object's variables (so every
/// variable is also an undefined symbol of another object, bound across objects).
fn cross_object_sources(total: usize) -> Vec<String> {
    const OBJECTS: usize = 10;
    let per = total / OBJECTS;
    (0..OBJECTS)
        .map(|j| {
            let next = (j + 1) % OBJECTS;
            let mut s = String::new();
            for i in 0..per {
                s.push_str(&format!("int v{j}_{i} = {i};\nextern int v{next}_{i};\n"));
            }
            s.push_str(&format!("int *t{j}[] = {{"));
            for i in 0..per {
                s.push_str(&format!("&v{next}_{i},"));
            }
            s.push_str("};\n");
            s
        })
        .collect()
}

fn bench_symbols(c: &mut Criterion<ThreadCpuTime>) {
    let mut group = c.benchmark_group("symbols");
    for total in [100usize, 1_000, 10_000] {
        let objects: Vec<Vec<u8>> = cross_object_sources(total)
            .iter()
            .map(|s| compile(s))
            .collect();
        let objects: Vec<&[u8]> = objects.iter().map(Vec::as_slice).collect();
        let plan = Plan::new(&objects, 4096).expect("plan");
        assert_eq!(
            plan.external_count(),
            0,
            "every reference binds across objects"
        );
        let mut buffer = vec![0u8; plan.image_size() as usize];
        group.throughput(Throughput::Elements(total as u64));
        group.bench_function(
            format!("plan+link, {total} symbols in 10 objects, bound across objects"),
            |b| b.iter(|| link(&Plan::new(&objects, 4096).expect("plan"), &mut buffer)),
        );
    }
    group.finish();
}

fn bench_end_to_end(c: &mut Criterion) {
    let compiler = Compiler::find().expect("clang");
    let dir = scratch();
    let mut group = c.benchmark_group("end_to_end");
    group.sample_size(20);
    group.bench_function(
        format!("clang -c | Module::load, {LOAD_PATH} | first call"),
        |b| {
            b.iter(|| {
                let object = compiler
                    .compile(SMALL.as_bytes(), &CompileOptions::new(Lang::C, host()))
                    .expect("compile");
                let module = Module::load(&object).expect("load");
                // SAFETY: matches `float kernel(float *, const float *, int)`.
                let f: extern "C" fn(*mut f32, *const f32, i32) -> f32 =
                    unsafe { std::mem::transmute(module.symbol("kernel").expect("kernel")) };
                black_box(f(std::ptr::null_mut(), std::ptr::null(), 0));
            })
        },
    );
    group.bench_function("clang -c only", |b| {
        b.iter(|| {
            black_box(
                compiler
                    .compile(SMALL.as_bytes(), &CompileOptions::new(Lang::C, host()))
                    .expect("compile"),
            )
        })
    });
    let symbol = CString::new("kernel").expect("symbol");
    group.bench_function("clang -shared (file) + dlopen + first call", |b| {
        b.iter_batched(
            || dir.0.join(format!("e2e-{}.so", rand_suffix())),
            |so| {
                link_shared(SMALL, &so);
                let path = CString::new(so.to_str().expect("utf8")).expect("path");
                // SAFETY: as in dlopen_call; the function has the signature below.
                unsafe {
                    let h = libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL);
                    assert!(!h.is_null());
                    let f: extern "C" fn(*mut f32, *const f32, i32) -> f32 =
                        std::mem::transmute(libc::dlsym(h, symbol.as_ptr()));
                    black_box(f(std::ptr::null_mut(), std::ptr::null(), 0));
                    libc::dlclose(h);
                }
                let _ = std::fs::remove_file(&so);
            },
            BatchSize::PerIteration,
        )
    });
    group.finish();
}

fn rand_suffix() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

fn bench_call(c: &mut Criterion) {
    let module = Module::load(&compile("int add(int a, int b) { return a + b; }")).expect("load");
    let code = module.symbol("add").expect("add");
    // SAFETY: matches `int add(int, int)`; `module` outlives the benchmark.
    let add: extern "C" fn(i32, i32) -> i32 = unsafe { std::mem::transmute(code) };
    let ci = CallInterface::new(
        &[
            ArgKind::Scalar(ScalarType::I32),
            ArgKind::Scalar(ScalarType::I32),
        ],
        RetType::I32,
    )
    .expect("cif");
    let args = [
        ArgValue::Scalar(Scalar::I32(2)),
        ArgValue::Scalar(Scalar::I32(40)),
    ];
    let mut group = c.benchmark_group("call");
    group.bench_function("direct typed call", |b| {
        b.iter(|| black_box(add(black_box(2), black_box(40))))
    });
    group.bench_function("libffi prepared interface", |b| {
        // SAFETY: the interface matches `add`'s signature.
        b.iter(|| black_box(unsafe { ci.call(code, black_box(&args)) }))
    });
    group.finish();
}

/// The time the benchmark thread spends on a CPU (`CLOCK_THREAD_CPUTIME_ID`), for the
/// pure-computation benchmarks (plan + link into a buffer: no system calls, no waiting).
/// On a machine shared with other work, wall time also counts the slices other processes
/// run in; this counts only the benchmark's own.
struct ThreadCpuTime;

fn thread_cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into `ts`, which lives for the call.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "CLOCK_THREAD_CPUTIME_ID");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

impl Measurement for ThreadCpuTime {
    type Intermediate = Duration;
    type Value = Duration;
    fn start(&self) -> Duration {
        thread_cpu_time()
    }
    fn end(&self, start: Duration) -> Duration {
        thread_cpu_time().saturating_sub(start)
    }
    fn add(&self, a: &Duration, b: &Duration) -> Duration {
        *a + *b
    }
    fn zero(&self) -> Duration {
        Duration::ZERO
    }
    fn to_f64(&self, value: &Duration) -> f64 {
        value.as_nanos() as f64
    }
    fn formatter(&self) -> &dyn ValueFormatter {
        WallTime.formatter()
    }
}

fn cpu_time() -> Criterion<ThreadCpuTime> {
    Criterion::default().with_measurement(ThreadCpuTime)
}

criterion_group!(benches, bench_load, bench_end_to_end, bench_call);
criterion_group! {
    name = computation;
    config = cpu_time();
    targets = bench_relocate, bench_symbols
}
criterion_main!(benches, computation);
