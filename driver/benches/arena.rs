//! Code-arena benchmarks (issue 13), each read as a ratio against a floor measured the same
//! way in the same run. Two workloads:
//!
//! - `small`: saxpy reading a 16-float static table and calling `expf` (code, read-only
//!   data and a data counter);
//! - `big`: one object holding 200 copies of it, each with its own table.
//!
//! Per workload (criterion group `arena_small` / `arena_big`):
//!
//! - `floor`: one anonymous mapping of the image's size: mmap + copy + one mprotect +
//!   munmap;
//! - `load_page`, `load_packed`: `Module::load_in` (page-granular / packed arena) + symbol
//!   lookup + drop, warm;
//! - `load_page_live`: the same page-granular load with every module kept alive (a new
//!   arena per sample): no freed page to reuse, as in a process holding many kernels;
//! - `arena_page`, `arena_packed`: the arena alone — allocate the image's layout, copy its
//!   bytes, publish, free (no plan, no relocations): what the memory costs;
//! - `plan_link`: plan + link into a buffer (`SliceBackend`, no system calls): what the
//!   core costs;
//! - `mmap_backend`: plan + link into one fresh mapping per module (`MmapBackend`, the
//!   backend `Module::load` used before the arena) + drop.
//!
//! `arena_cold/first_load`: the first `Module::load` + lookup in a fresh process (a child
//! of this binary), against warm loads in the same child, with the first load's minor page
//! faults; then the first load after each preparation step ([`Prep`]) alone and after all
//! of them, to show what the first load pays for. To profile the first load alone, run
//! the child by hand: `ELFJIT_BENCH_ARENA_COLD=<object> ELFJIT_BENCH_ARENA_COLD_ONLY=1
//! <this binary>` (no warm loads; prints `cold_ns prep_ns 0 faults`).
//!
//! After criterion, a summary prints every ratio and the per-relocation cost
//! (big − small) / relocations. `cargo bench -p elfjit --bench arena`.
//!
//! With `ELFJIT_BENCH_CPU_TIME=1` every figure is the benchmark thread's CPU time (user +
//! kernel, `CLOCK_THREAD_CPUTIME_ID`) instead of wall time: on a machine shared with other
//! work, wall time also counts the time the thread waited for a core.

use criterion::measurement::{Measurement, ValueFormatter, WallTime};
use criterion::{Criterion, Throughput};
use elfjit::clang::{CompileOptions, Compiler, Lang};
use elfjit::{Arch, Module};
use elfjit_core::{MemoryBackend, Plan, SegmentKind, SliceBackend};
use elfjit_os::{Arena, MmapBackend, ProcessResolver};
use std::hint::black_box;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

const SAXPY: &str = r#"
extern float expf(float);
static const float table[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
int saxpy_calls;
int saxpy(int n, float a, const float *x, float *y) {
    for (int i = 0; i < n; i++) y[i] = a * x[i] + table[i & 15] * expf(y[i]);
    return ++saxpy_calls;
}
"#;

/// 200 copies of [`SAXPY`], each with its own table and counter.
fn big_source() -> String {
    let mut s = String::from("extern float expf(float);\n");
    for k in 0..200 {
        s.push_str(&format!(
            "static const float table_{k}[16] = {{{k}, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, \
             14, 15, 16}};\nint calls_{k};\nint saxpy_{k}(int n, float a, const float *x, \
             float *y) {{ for (int i = 0; i < n; i++) y[i] = a * x[i] + table_{k}[i & 15] * \
             expf(y[i]); return ++calls_{k}; }}\n"
        ));
    }
    s
}

fn compile(source: &str) -> Vec<u8> {
    let host = Arch::host().expect("a supported host");
    Compiler::find()
        .expect("clang")
        .compile(source.as_bytes(), &CompileOptions::new(Lang::C, host))
        .expect("compile")
}

/// What the floor and the arena-only benchmarks need to know about an object's image.
struct ImageFacts {
    layout: elfjit_core::Layout,
    /// Contiguous, page-aligned size (one mapping holding it).
    size: usize,
    relocations: u64,
    /// The image bytes, as a link writes them (copied by the floor and `arena_*`).
    bytes: Vec<u8>,
}

fn facts(object: &[u8]) -> ImageFacts {
    let plan = Plan::new(&[object], 4096).expect("plan");
    let size = plan.image_size() as usize;
    let mut bytes = vec![0u8; size];
    let mut backend = SliceBackend::new(&mut bytes, 0x7f00_0000_0000, 4096);
    plan.link(&mut backend, &mut ProcessResolver).expect("link");
    ImageFacts {
        layout: plan.layout(),
        size,
        relocations: plan.relocation_count(),
        bytes,
    }
}

/// The floor: one anonymous mapping of the image's size, the image copied in, one
/// mprotect, munmap.
fn floor(image: &ImageFacts) {
    // SAFETY: a fresh private anonymous mapping, written within its length, protected,
    // then unmapped; nothing else refers to it.
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            image.size,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        assert_ne!(p, libc::MAP_FAILED);
        std::ptr::copy_nonoverlapping(image.bytes.as_ptr(), p.cast::<u8>(), image.size);
        libc::mprotect(p, image.size, libc::PROT_READ | libc::PROT_EXEC);
        libc::munmap(p, image.size);
    }
}

/// The arena alone: allocate the layout, copy each segment's bytes, publish, free.
fn arena_only(arena: &Arena, image: &ImageFacts) {
    let mut backend = arena.backend();
    backend.allocate(&image.layout).expect("allocate");
    let mut at = 0;
    for kind in SegmentKind::ALL {
        if let Some(dest) = backend.segment_mut(kind) {
            let n = dest.len().min(image.bytes.len().saturating_sub(at));
            dest[..n].copy_from_slice(&image.bytes[at..at + n]);
            at += n;
        }
    }
    backend.publish().expect("publish");
    drop(black_box(backend));
}

fn bench_workload<M: Measurement<Value = Duration>>(
    c: &mut Criterion<M>,
    name: &str,
    object: &[u8],
    entry: &str,
) {
    let image = facts(object);
    let page = Arena::new();
    let packed = Arena::packed().expect("packed arena");
    // Warm: symbol lookups cached, chunks made, pools filled.
    for arena in [&page, &packed] {
        drop(Module::load_in(arena, object).expect("load"));
    }
    let mut buffer = vec![0u8; image.size];
    let mut group = c.benchmark_group(format!("arena_{name}"));
    group.bench_function("floor", |b| b.iter(|| floor(&image)));
    for (id, arena) in [("load_page", &page), ("load_packed", &packed)] {
        group.bench_function(id, |b| {
            b.iter(|| {
                let m = Module::load_in(arena, object).expect("load");
                black_box(m.symbol(entry).expect("entry"));
            })
        });
    }
    group.bench_function("load_page_live", |b| {
        b.iter_custom(|iters| {
            // Every module kept alive (as a process holding many kernels does): no freed
            // page to reuse, each load takes fresh pages. A new arena per sample, its
            // chunk made by a first load that is not timed.
            let arena = Arena::new();
            let mut live = vec![Module::load_in(&arena, object).expect("load")];
            live.reserve(iters as usize);
            let t = Clock::now();
            for _ in 0..iters {
                let m = Module::load_in(&arena, object).expect("load");
                black_box(m.symbol(entry).expect("entry"));
                live.push(m);
            }
            let elapsed = t.elapsed();
            drop(live);
            elapsed
        })
    });
    for (id, arena) in [("arena_page", &page), ("arena_packed", &packed)] {
        group.bench_function(id, |b| b.iter(|| arena_only(arena, &image)));
    }
    group.bench_function("plan_link", |b| {
        b.iter(|| {
            // Planned each time, as `Module::load` does (tables allocated to size).
            let plan = Plan::new(&[object], 4096).expect("plan");
            let mut backend = SliceBackend::new(&mut buffer, 0x7f00_0000_0000, 4096);
            let image = plan.link(&mut backend, &mut ProcessResolver).expect("link");
            black_box(image.placement());
        })
    });
    group.bench_function("mmap_backend", |b| {
        b.iter(|| {
            let mut memory = MmapBackend::new();
            let plan = Plan::new(&[object], 4096).expect("plan");
            let image = plan.link(&mut memory, &mut ProcessResolver).expect("link");
            black_box(image.placement());
        })
    });
    group.finish();
    RELOCATIONS.with(|r| r.borrow_mut().push((name.to_string(), image.relocations)));
}

thread_local! {
    static RELOCATIONS: std::cell::RefCell<Vec<(String, u64)>> = const { std::cell::RefCell::new(Vec::new()) };
}

fn bench_small<M: Measurement<Value = Duration>>(c: &mut Criterion<M>) {
    bench_workload(c, "small", &compile(SAXPY), "saxpy");
}

fn bench_big<M: Measurement<Value = Duration>>(c: &mut Criterion<M>) {
    bench_workload(c, "big", &compile(&big_source()), "saxpy_0");
}

/// Set in a child of this binary: the path of an object to load cold, then warm.
const COLD_CHILD: &str = "ELFJIT_BENCH_ARENA_COLD";

/// Set in a child: what to do before the first load, to see what the first load pays for.
const COLD_PREP: &str = "ELFJIT_BENCH_ARENA_COLD_PREP";

/// One thing a first load does for the first time in a process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Prep {
    /// Look `expf` up (dlsym, libm).
    Resolve,
    /// `Arena::prepare` on the process arena: make its first chunk (reserve, protect) and
    /// publish a small module's memory per class in it (freed into the arena's pool).
    Arena,
    /// Map every page of this executable (read one byte of each page of its mappings): the
    /// page faults a first run of our code takes, without running it.
    Text,
    /// `elfjit::prepare`: the loader's code pages mapped, `ProcessResolver::prepare`,
    /// `Arena::prepare` on the process arena, and one link of its built-in object.
    Prepare,
    /// Load the object into another arena and drop it: everything a first load does for
    /// the first time (our code's pages and caches, the heap, symbol lookups, observer
    /// settings) except the process arena's first chunk.
    Elsewhere,
}

const PREPS: [Prep; 5] = [
    Prep::Resolve,
    Prep::Arena,
    Prep::Prepare,
    Prep::Text,
    Prep::Elsewhere,
];

/// Reads a byte of every page this executable's file is mapped at.
fn touch_own_pages() {
    let exe = std::env::current_exe().expect("exe");
    let maps = std::fs::read_to_string("/proc/self/maps").expect("maps");
    for line in maps.lines() {
        let mut fields = line.split_whitespace();
        let (Some(range), Some(perms)) = (fields.next(), fields.next()) else {
            continue;
        };
        let path = fields.nth(3).map(std::path::Path::new);
        if path != Some(exe.as_path()) || !perms.starts_with('r') {
            continue;
        }
        let Some((lo, hi)) = range.split_once('-') else {
            continue;
        };
        let lo = usize::from_str_radix(lo, 16).expect("hex");
        let hi = usize::from_str_radix(hi, 16).expect("hex");
        for page in (lo..hi).step_by(4096) {
            // SAFETY: the page lies in a readable mapping of our own executable, which
            // stays mapped for the life of the process.
            black_box(unsafe { std::ptr::read_volatile(page as *const u8) });
        }
    }
}

/// In the child: does the steps named in `ELFJIT_BENCH_ARENA_COLD_PREP` (timing the
/// whole preparation), then times the first load + lookup, then the median of 200 warm
/// loads. Prints `cold_ns prep_ns warm_ns`.
fn cold_child(path: &str) {
    let object = std::fs::read(path).expect("object");
    let prep = std::env::var(COLD_PREP).unwrap_or_default();
    let t = Clock::now();
    for step in PREPS.iter().filter(|s| prep.contains(&format!("{s:?}"))) {
        match step {
            Prep::Resolve => {
                black_box(ProcessResolver::lookup(b"expf"));
            }
            Prep::Arena => Arena::process().prepare().expect("prepare"),
            Prep::Prepare => elfjit::prepare().expect("prepare"),
            Prep::Text => touch_own_pages(),
            Prep::Elsewhere => {
                let other = Arena::new();
                let m = Module::load_in(&other, &object).expect("load");
                black_box(m.symbol("saxpy"));
            }
        }
    }
    let resolve = t.elapsed();
    let faults = minor_faults();
    let t = Clock::now();
    let m = Module::load(&object).expect("load");
    black_box(m.symbol("saxpy"));
    let cold = t.elapsed();
    let faults = minor_faults() - faults;
    drop(m);
    // For profiling the first load alone: no warm loads (their median prints as 0).
    let warm_runs = if std::env::var_os(COLD_ONLY).is_some() {
        0
    } else {
        200
    };
    let mut warm: Vec<Duration> = (0..warm_runs)
        .map(|_| {
            let t = Clock::now();
            let m = Module::load(&object).expect("load");
            black_box(m.symbol("saxpy"));
            drop(m);
            t.elapsed()
        })
        .collect();
    warm.sort_unstable();
    println!(
        "{} {} {} {faults}",
        cold.as_nanos(),
        resolve.as_nanos(),
        warm.get(warm.len() / 2).map_or(0, Duration::as_nanos)
    );
}

/// Set in a child (for profiling the first load alone): no warm loads after it.
const COLD_ONLY: &str = "ELFJIT_BENCH_ARENA_COLD_ONLY";

/// Minor page faults of this thread so far.
fn minor_faults() -> u64 {
    // SAFETY: an all-zero rusage is a valid value for getrusage to overwrite.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage writes the struct we pass.
    unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut usage) };
    usage.ru_minflt as u64
}

/// One child's `(first load, preparation, warm load, first load's minor faults)`.
fn run_cold_child(object: &std::path::Path, prep: &str) -> (u64, u64, u64, u64) {
    let mut cmd = Command::new(std::env::current_exe().expect("exe"));
    cmd.env(COLD_CHILD, object).env(COLD_PREP, prep);
    let out = cmd.output().expect("child");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let v: Vec<u64> = text
        .split_whitespace()
        .map(|n| n.parse().expect("number"))
        .collect();
    (v[0], v[1], v[2], v[3])
}

fn bench_cold<M: Measurement<Value = Duration>>(c: &mut Criterion<M>) {
    let dir = std::env::temp_dir().join(format!("elfjit-arena-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let path = dir.join("saxpy.o");
    std::fs::write(&path, compile(SAXPY)).expect("write");
    let mut group = c.benchmark_group("arena_cold");
    group.sample_size(20);
    let mut runs: Vec<(u64, u64, u64, u64)> = Vec::new();
    group.bench_function("first_load", |b| {
        b.iter_custom(|iters| {
            (0..iters)
                .map(|_| {
                    let r = run_cold_child(&path, "");
                    runs.push(r);
                    Duration::from_nanos(r.0)
                })
                .sum()
        })
    });
    group.finish();
    if runs.is_empty() {
        // A filter left `first_load` out: nothing to compare the preparations with.
        let _ = std::fs::remove_dir_all(&dir);
        return;
    }
    let median = |v: &mut Vec<u64>| {
        v.sort_unstable();
        v.get(v.len() / 2).copied().unwrap_or(0)
    };
    let mut cold: Vec<u64> = runs.iter().map(|r| r.0).collect();
    let mut warm: Vec<u64> = runs.iter().map(|r| r.2).collect();
    let mut faults: Vec<u64> = runs.iter().map(|r| r.3).collect();
    let (cold, warm, faults) = (median(&mut cold), median(&mut warm), median(&mut faults));
    // The first load after each preparation alone, and after all of them.
    let mut after = Vec::new();
    let all = PREPS.map(|p| format!("{p:?}")).join(",");
    for prep in PREPS.iter().map(|p| format!("{p:?}")).chain([all]) {
        let children: Vec<_> = (0..15).map(|_| run_cold_child(&path, &prep)).collect();
        let pick =
            |f: fn(&(u64, u64, u64, u64)) -> u64| median(&mut children.iter().map(f).collect());
        let (cost, first, faults) = (pick(|r| r.1), pick(|r| r.0), pick(|r| r.3));
        after.push((prep, cost, first, faults));
    }
    COLD.with(|c| *c.borrow_mut() = Some((cold, warm, faults, after)));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Cold first load, warm load, the first load's minor page faults (medians), and per
/// preparation: (steps, their cost, the first load after them, its faults).
type ColdFigures = (u64, u64, u64, Vec<(String, u64, u64, u64)>);

thread_local! {
    static COLD: std::cell::RefCell<Option<ColdFigures>> = const { std::cell::RefCell::new(None) };
}

/// When this process started benchmarking: estimates written before it are an earlier
/// run's (a filter left their benchmark out this time) and are not reported as this run's.
static STARTED: std::sync::OnceLock<std::time::SystemTime> = std::sync::OnceLock::new();

/// Criterion's mean estimate (ns) for `group/id` in this run, if it ran.
fn mean(group: &str, id: &str) -> Option<f64> {
    let root = std::env::var_os("CRITERION_HOME")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("CARGO_TARGET_DIR").map(|d| PathBuf::from(d).join("criterion"))
        })
        .or_else(|| {
            // `cargo bench` runs this from the package directory; the binary is
            // <target>/release/deps/arena-<hash> and criterion writes to <target>/criterion.
            let exe = std::env::current_exe().ok()?;
            Some(exe.parent()?.parent()?.parent()?.join("criterion"))
        })
        .unwrap_or_else(|| PathBuf::from("target/criterion"));
    let path = root.join(group).join(id).join("new/estimates.json");
    let written = std::fs::metadata(&path).and_then(|m| m.modified()).ok()?;
    if STARTED.get().is_none_or(|&started| written < started) {
        return None;
    }
    let text = std::fs::read_to_string(&path).ok()?;
    let json: serde_json::Value = serde_json::from_str(&text).ok()?;
    json["mean"]["point_estimate"].as_f64()
}

fn summary() {
    let clock = if cpu_time() {
        "thread CPU time"
    } else {
        "wall time"
    };
    println!("\n== arena summary ({clock}, means of this run; ratios against the floor) ==");
    let mut loads = Vec::new();
    for name in ["small", "big"] {
        let group = format!("arena_{name}");
        let Some(floor) = mean(&group, "floor") else {
            continue;
        };
        println!("{group}: floor {:.2} us", floor / 1e3);
        for id in [
            "load_page",
            "load_page_live",
            "load_packed",
            "arena_page",
            "arena_packed",
            "plan_link",
            "mmap_backend",
        ] {
            if let Some(t) = mean(&group, id) {
                println!("  {id:13} {:9.2} us  {:5.2}x floor", t / 1e3, t / floor);
            }
        }
        loads.push((
            name,
            mean(&group, "load_page"),
            mean(&group, "load_packed"),
            mean(&group, "plan_link"),
        ));
    }
    let relocations = RELOCATIONS.with(|r| r.borrow().clone());
    let count = |n: &str| relocations.iter().find(|(k, _)| k == n).map(|&(_, c)| c);
    if let (Some(small), Some(big), Some(rs), Some(rb)) = (
        loads.iter().find(|l| l.0 == "small"),
        loads.iter().find(|l| l.0 == "big"),
        count("small"),
        count("big"),
    ) {
        let per = |a: Option<f64>, b: Option<f64>| {
            a.zip(b)
                .map(|(s, b)| (b - s) / (rb - rs) as f64)
                .unwrap_or(f64::NAN)
        };
        println!(
            "per relocation (big - small) / ({rb} - {rs}): page-granular {:.1} ns, packed {:.1} ns, \
             plan+link alone {:.1} ns",
            per(small.1, big.1),
            per(small.2, big.2),
            per(small.3, big.3)
        );
    }
    if let Some((cold, warm, faults, after)) = COLD.with(|c| c.borrow().clone()) {
        let us = |ns: u64| ns as f64 / 1e3;
        println!(
            "cold first load {:.1} us ({faults} minor faults), warm load in the same process \
             {:.1} us: {:.1}x",
            us(cold),
            us(warm),
            cold as f64 / warm.max(1) as f64
        );
        for (prep, cost, first, faults) in after {
            println!(
                "  after {prep} first ({:.1} us): first load {:.1} us ({:.1}x warm, \
                 {faults} minor faults)",
                us(cost),
                us(first),
                first as f64 / warm.max(1) as f64
            );
        }
    }
}

/// Whether figures are thread CPU time (`ELFJIT_BENCH_CPU_TIME`) rather than wall time.
fn cpu_time() -> bool {
    std::env::var_os("ELFJIT_BENCH_CPU_TIME").is_some_and(|v| v != "0")
}

/// This thread's CPU time so far (user + kernel).
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the struct we pass.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Wall or thread CPU time, as chosen for the run (the cold child uses the same).
enum Clock {
    Wall(Instant),
    Cpu(Duration),
}

impl Clock {
    fn now() -> Clock {
        if cpu_time() {
            Clock::Cpu(thread_cpu())
        } else {
            Clock::Wall(Instant::now())
        }
    }

    fn elapsed(&self) -> Duration {
        match self {
            Clock::Wall(t) => t.elapsed(),
            Clock::Cpu(t) => thread_cpu().saturating_sub(*t),
        }
    }
}

/// Criterion measurement of the benchmark thread's CPU time.
struct ThreadCpu;

impl Measurement for ThreadCpu {
    type Intermediate = Duration;
    type Value = Duration;
    fn start(&self) -> Duration {
        thread_cpu()
    }
    fn end(&self, start: Duration) -> Duration {
        thread_cpu().saturating_sub(start)
    }
    fn add(&self, a: &Duration, b: &Duration) -> Duration {
        *a + *b
    }
    fn zero(&self) -> Duration {
        Duration::ZERO
    }
    fn to_f64(&self, v: &Duration) -> f64 {
        v.as_nanos() as f64
    }
    fn formatter(&self) -> &dyn ValueFormatter {
        &CpuFormatter
    }
}

struct CpuFormatter;

impl ValueFormatter for CpuFormatter {
    fn scale_values(&self, typical: f64, values: &mut [f64]) -> &'static str {
        let (div, unit) = if typical < 1e3 {
            (1.0, "ns cpu")
        } else if typical < 1e6 {
            (1e3, "µs cpu")
        } else {
            (1e6, "ms cpu")
        };
        values.iter_mut().for_each(|v| *v /= div);
        unit
    }
    fn scale_throughputs(&self, _: f64, _: &Throughput, values: &mut [f64]) -> &'static str {
        values.iter_mut().for_each(|v| *v = 1e9 / v.max(1.0));
        "per cpu-second"
    }
    fn scale_for_machines(&self, _: &mut [f64]) -> &'static str {
        "ns"
    }
}

fn run<M: Measurement<Value = Duration>>(mut c: Criterion<M>) {
    bench_small(&mut c);
    bench_big(&mut c);
    bench_cold(&mut c);
    c.final_summary();
}

fn main() {
    if let Ok(path) = std::env::var(COLD_CHILD) {
        cold_child(&path);
        return;
    }
    STARTED.get_or_init(std::time::SystemTime::now);
    if cpu_time() {
        run(Criterion::default()
            .with_measurement(ThreadCpu)
            .configure_from_args());
    } else {
        run(Criterion::<WallTime>::default().configure_from_args());
    }
    summary();
}
