//! Compile-side benchmarks, each read as a ratio against one clang run per kernel measured
//! in the same run:
//!
//! - `source_to_callable/compile`: `Compiler::compile` + `Module::load` + symbol lookup
//!   (the baseline); `/hit_memory` and `/hit_disk`: the same through a warm [`Cache`]
//!   (in memory; on disk with the in-memory map off, so every lookup reads and verifies
//!   the file);
//! - `batch/N` for N = 1, 8, 64: N kernels compiled by one clang run and loaded as one
//!   image (throughput in kernels: divide the time by N for the per-kernel cost);
//!   `batch/64 split over the cores`: the same 64 in one translation unit per core,
//!   compiled at once and linked into one image ([`Batch::build_split`]);
//! - `parallel16/serial` vs `parallel16/parallel`: 16 kernels, one clang run each, one at
//!   a time vs on every core ([`elfjit::parallel::compile_sources`]);
//! - `compiler/spawn` vs `compiler/server`: the saxpy kernel from source to callable with
//!   a spawned clang (`ELFJIT_COMPILER=spawn`) vs a warm compile server of the pool
//!   (`ELFJIT_COMPILER=server`, started before the timing);
//! - `kernels64/spawn` vs `kernels64/server`: 64 different kernels, one compile each (as
//!   tinygrad and Morok compile them), as parallel as [`compile_sources`] runs them, with
//!   spawned clangs vs the pool's warm servers;
//! - `batch64/spawn` vs `batch64/server`: the 64 kernels as one [`Batch`] split over the
//!   cores ([`Batch::build_split`]), with spawned clangs vs the pool's servers;
//! - `protocol/{empty,saxpy}/overhead` vs `.../server`: per request on a warm server, the
//!   client's round trip less the server's own reported time
//!   ([`elfjit::route::last_server_timing`]), and that server time itself.
//!
//! The other groups compile as `ELFJIT_COMPILER` says (unset: through the compile server
//! pool where there is a server).
//!
//! `cargo bench -p elfjit --bench compile`; the README's table is made from the medians in
//! `target/criterion/*/*/new/estimates.json`. The module's unmapping is left out of the
//! timings (`iter_with_large_drop`).

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use elfjit::batch::Batch;
use elfjit::cache::{Cache, CacheStatus};
use elfjit::clang::{CompileOptions, Compiler, Lang};
use elfjit::parallel::compile_sources;
use elfjit::{Arch, Module};
use std::hint::black_box;
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::time::Duration;

fn compiler() -> Compiler {
    Compiler::find().expect("clang")
}

fn opts() -> CompileOptions {
    CompileOptions::new(Lang::C, Arch::host().expect("a supported host"))
}

/// A small kernel, distinct per `i`: a static table, a static helper and a loop.
fn kernel(i: usize) -> String {
    format!(
        "static const float scale_{i}[4] = {{ {i}.0f, 1.0f, 2.0f, 3.0f }};\n\
         static float mul_{i}(float x, int j) {{ return x * scale_{i}[j & 3]; }}\n\
         float k{i}(float *x, int n) {{\n\
             float s = 0;\n\
             for (int j = 0; j < n; j++) {{ x[j] = mul_{i}(x[j], j); s += x[j]; }}\n\
             return s;\n\
         }}\n"
    )
}

fn callable(object: &[u8], name: &str) -> Module {
    let m = Module::load(object).expect("load");
    black_box(m.symbol(name).expect("symbol"));
    m
}

/// A directory under the system's temporary directory, removed when dropped.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn source_to_callable(c: &mut Criterion) {
    let clang = compiler();
    let o = opts();
    let src = kernel(7);
    let mut group = c.benchmark_group("source_to_callable");
    group.sample_size(20);
    group.measurement_time(Duration::from_secs(5));
    group.bench_function("compile", |b| {
        b.iter_with_large_drop(|| callable(&clang.compile(src.as_bytes(), &o).unwrap(), "k7"))
    });

    let memory = Cache::in_memory();
    memory.compile(&clang, src.as_bytes(), &o).unwrap();
    group.bench_function("hit_memory", |b| {
        b.iter_with_large_drop(|| {
            let (obj, status) = memory.compile(&clang, src.as_bytes(), &o).unwrap();
            assert_eq!(status, CacheStatus::Hit);
            callable(&obj, "k7")
        })
    });

    let dir = TempDir(std::env::temp_dir().join(format!("elfjit-bench-{}", std::process::id())));
    let disk = Cache::on_disk(&dir.0).with_memory_limit(0);
    disk.compile(&clang, src.as_bytes(), &o).unwrap();
    group.bench_function("hit_disk", |b| {
        b.iter_with_large_drop(|| {
            let (obj, status) = disk.compile(&clang, src.as_bytes(), &o).unwrap();
            assert_eq!(status, CacheStatus::Hit);
            callable(&obj, "k7")
        })
    });
    group.finish();
}

fn batches(c: &mut Criterion) {
    let clang = compiler();
    let o = opts();
    let mut group = c.benchmark_group("batch");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(8));
    for n in [1usize, 8, 64] {
        let mut batch = Batch::new();
        for i in 0..n {
            batch.add(format!("k{i}"), kernel(i)).unwrap();
        }
        group.throughput(Throughput::Elements(n as u64));
        group.bench_function(n.to_string(), |b| {
            b.iter_with_large_drop(|| {
                let m = batch.build(&clang, &o).unwrap();
                black_box(m.symbol("k0").unwrap());
                m
            })
        });
        if n == 64 {
            group.bench_function("64 split over the cores", |b| {
                b.iter_with_large_drop(|| {
                    let m = batch.build_split(&clang, &o, None).unwrap();
                    black_box(m.symbol("k63").unwrap());
                    m
                })
            });
        }
    }
    group.finish();
}

fn parallel(c: &mut Criterion) {
    let clang = compiler();
    let o = opts();
    let sources: Vec<String> = (0..16).map(kernel).collect();
    let mut group = c.benchmark_group("parallel16");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(10));
    group.throughput(Throughput::Elements(16));
    for (name, workers) in [("serial", NonZeroUsize::new(1)), ("parallel", None)] {
        group.bench_function(name, |b| {
            b.iter(|| {
                let objects = compile_sources(&clang, &sources, &o, workers);
                assert!(objects.iter().all(|r| r.is_ok()));
                objects
            })
        });
    }
    group.finish();
}

/// The saxpy kernel of `examples/saxpy.rs`.
const SAXPY: &str = "
void saxpy(int n, float a, const float *restrict x, float *restrict y) {
    for (int i = 0; i < n; i++)
        y[i] = a * x[i] + y[i];
}
";

fn spawn_vs_server(c: &mut Criterion) {
    let clang = compiler();
    let o = opts();
    let mut group = c.benchmark_group("compiler");
    group.sample_size(20);
    group.measurement_time(Duration::from_secs(5));
    for mode in ["spawn", "server"] {
        // Benchmarks run one at a time: nothing else reads the variable meanwhile.
        std::env::set_var("ELFJIT_COMPILER", mode);
        // Warm: the server started and its libraries loaded before the timing.
        clang.compile(SAXPY.as_bytes(), &o).expect("compile");
        group.bench_function(mode, |b| {
            b.iter_with_large_drop(|| {
                callable(&clang.compile(SAXPY.as_bytes(), &o).unwrap(), "saxpy")
            })
        });
    }
    std::env::remove_var("ELFJIT_COMPILER");
    group.finish();
}

fn protocol_overhead(c: &mut Criterion) {
    let clang = compiler();
    let o = opts();
    let mut group = c.benchmark_group("protocol");
    group.sample_size(20);
    group.measurement_time(Duration::from_secs(5));
    // Benchmarks run one at a time: nothing else reads the variable meanwhile.
    std::env::set_var("ELFJIT_COMPILER", "server");
    for (name, source) in [("empty", ""), ("saxpy", SAXPY)] {
        clang.compile(source.as_bytes(), &o).expect("compile");
        type Part = fn(&elfjit::route::ServerTiming) -> Duration;
        let parts: [(&str, Part); 2] = [("overhead", |t| t.overhead()), ("server", |t| t.server)];
        for (part, of) in parts {
            group.bench_function(format!("{name}/{part}"), |b| {
                b.iter_custom(|iters| {
                    (0..iters)
                        .map(|_| {
                            black_box(clang.compile(source.as_bytes(), &o).unwrap());
                            of(&elfjit::route::last_server_timing().expect("a server compiled it"))
                        })
                        .sum()
                })
            });
        }
    }
    std::env::remove_var("ELFJIT_COMPILER");
    group.finish();
}

/// Runs `bench` once per compiler mode (`spawn`, then `server`), with `ELFJIT_COMPILER`
/// set to it and the pool's servers started and warm before the timing.
fn per_mode(warm: impl Fn(), mut bench: impl FnMut(&str)) {
    for mode in ["spawn", "server"] {
        // Benchmarks run one at a time: nothing else reads the variable meanwhile.
        std::env::set_var("ELFJIT_COMPILER", mode);
        warm();
        bench(mode);
    }
    std::env::remove_var("ELFJIT_COMPILER");
}

fn kernels64(c: &mut Criterion) {
    let clang = compiler();
    let o = opts();
    let sources: Vec<String> = (0..64).map(kernel).collect();
    let all = || {
        let objects = compile_sources(&clang, &sources, &o, None);
        assert!(objects.iter().all(|r| r.is_ok()));
        objects
    };
    let mut group = c.benchmark_group("kernels64");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(10));
    group.throughput(Throughput::Elements(64));
    per_mode(
        || drop(all()),
        |mode| {
            group.bench_function(mode, |b| b.iter(all));
        },
    );
    group.finish();

    let mut batch = Batch::new();
    for (i, source) in sources.iter().enumerate() {
        batch.add(format!("k{i}"), source.clone()).unwrap();
    }
    let build = || {
        let m = batch.build_split(&clang, &o, None).unwrap();
        black_box(m.symbol("k63").unwrap());
        m
    };
    let mut group = c.benchmark_group("batch64");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(10));
    group.throughput(Throughput::Elements(64));
    per_mode(
        || drop(build()),
        |mode| {
            group.bench_function(mode, |b| b.iter_with_large_drop(build));
        },
    );
    group.finish();
}

criterion_group!(
    benches,
    source_to_callable,
    batches,
    parallel,
    spawn_vs_server,
    protocol_overhead,
    kernels64
);
criterion_main!(benches);
