//! Batches (many kernels, one clang run, one image) and parallel compiles (one clang run
//! per kernel, several at a time, errors per kernel).
// Batches and parallel compiles run clang: the compile side is Unix-only (docs/os-support.md).
#![cfg(unix)]

use elfjit::batch::Batch;
use elfjit::cache::{Cache, CacheStatus};
use elfjit::clang::{CompileOptions, Compiler, Lang};
use elfjit::parallel::{compile_all, compile_sources, Job, ParallelOptions};
use elfjit::{Arch, CompileError, Error, Module};
use std::num::NonZeroUsize;

fn compiler() -> Compiler {
    Compiler::find().expect("clang")
}

fn opts() -> CompileOptions {
    CompileOptions::new(Lang::C, Arch::host().expect("a supported host"))
}

/// Kernel `i`: scales a buffer by `i + 1` through its own static helper and table, and
/// returns the sum.
fn kernel(i: usize) -> String {
    format!(
        "static const float scale_{i}[1] = {{ {i}.0f + 1.0f }};\n\
         static float mul_{i}(float x) {{ return x * scale_{i}[0]; }}\n\
         float k{i}(float *x, int n) {{\n\
             float s = 0;\n\
             for (int j = 0; j < n; j++) {{ x[j] = mul_{i}(x[j]); s += x[j]; }}\n\
             return s;\n\
         }}\n"
    )
}

type Kernel = unsafe extern "C" fn(*mut f32, i32) -> f32;

fn call(m: &Module, name: &str) -> (f32, Vec<f32>) {
    let f = m
        .get::<Kernel>(name)
        .unwrap_or_else(|e| panic!("{name} missing: {e}"));
    let mut x: Vec<f32> = (0..8).map(|j| j as f32).collect();
    // SAFETY: every kernel is `float k(float *, int)`; `f` borrows `m`, which outlives
    // the call, and the buffer holds the 8 elements passed.
    let s = unsafe { f(x.as_mut_ptr(), 8) };
    (s, x)
}

#[test]
fn batch_of_64_kernels_each_callable_by_name() {
    let c = compiler();
    let mut batch = Batch::new();
    for i in 0..64 {
        batch.add(format!("k{i}"), kernel(i)).unwrap();
    }
    let object = batch.compile(&c, &opts()).unwrap();
    let module = batch.load(&object).unwrap();
    for i in 0..64 {
        let (s, x) = call(&module, &format!("k{i}"));
        let scale = (i + 1) as f32;
        assert_eq!(s, 28.0 * scale, "k{i}");
        assert_eq!(x, (0..8).map(|j| j as f32 * scale).collect::<Vec<_>>());
    }
    // The same through a cache: a miss, then a hit with the same object.
    let cache = Cache::in_memory();
    let (a, s) = batch.compile_cached(&c, &opts(), &cache).unwrap();
    assert_eq!(s, CacheStatus::Miss);
    let (b, s) = batch.compile_cached(&c, &opts(), &cache).unwrap();
    assert_eq!(s, CacheStatus::Hit);
    assert_eq!(a, b);
}

#[test]
fn batch_errors_name_the_kernel() {
    let c = compiler();
    // A colliding static helper: clang's redefinition error, pointing at kernel `b`.
    let mut batch = Batch::new();
    batch
        .add(
            "a",
            "static int h(void) { return 1; } int a(void) { return h(); }",
        )
        .unwrap();
    batch
        .add(
            "b",
            "static int h(void) { return 2; } int b(void) { return h(); }",
        )
        .unwrap();
    let e = batch.build(&c, &opts()).err().unwrap();
    let msg = e.to_string();
    assert!(
        matches!(e, Error::Compile(CompileError::ClangFailed { .. })),
        "{msg}"
    );
    assert!(
        msg.contains("b:1:") && msg.contains("redefinition"),
        "{msg}"
    );
    // A kernel whose function has another name than the one it was added under.
    let mut batch = Batch::new();
    batch.add("f", "int g(void) { return 0; }").unwrap();
    let e = batch.build(&c, &opts()).err().unwrap();
    assert!(
        e.to_string().contains("unknown entry `f`") && e.to_string().contains("g"),
        "{e}"
    );
    // IR is refused up front.
    let mut batch = Batch::new();
    batch.add("f", "define void @f() { ret void }").unwrap();
    let ir = CompileOptions::new(Lang::Ir, Arch::host().unwrap());
    assert!(matches!(batch.compile(&c, &ir), Err(Error::Unsupported(_))));
}

#[test]
fn a_prelude_shares_helpers() {
    let c = compiler();
    let mut batch = Batch::new().prelude("static inline int twice(int x) { return 2 * x; }");
    batch
        .add("p", "int p(int x) { return twice(x) + 1; }")
        .unwrap();
    batch
        .add("q", "int q(int x) { return twice(x) - 1; }")
        .unwrap();
    let m = batch.build(&c, &opts()).unwrap();
    for (name, want) in [("p", 21), ("q", 19)] {
        // SAFETY: `int name(int)`, `m` alive.
        let f: extern "C" fn(i32) -> i32 = unsafe { std::mem::transmute(m.symbol(name).unwrap()) };
        assert_eq!(f(10), want, "{name}");
    }
}

#[test]
fn parallel_compile_with_one_broken_kernel() {
    let c = compiler();
    let mut sources: Vec<String> = (0..9).map(kernel).collect();
    sources[4] = "float k4(float *x, int n) { return x[n] +; }".to_string();
    for workers in [None, NonZeroUsize::new(1), NonZeroUsize::new(3)] {
        let results = compile_sources(&c, &sources, &opts(), workers);
        assert_eq!(results.len(), sources.len());
        for (i, r) in results.iter().enumerate() {
            if i == 4 {
                let Err(e) = r else {
                    panic!("the broken kernel compiled")
                };
                assert!(matches!(e, CompileError::ClangFailed { .. }), "{e}");
                assert!(e.to_string().contains("expected expression"), "{e}");
                continue;
            }
            let m = Module::load(r.as_ref().unwrap()).unwrap();
            assert_eq!(call(&m, &format!("k{i}")).0, 28.0 * (i + 1) as f32, "k{i}");
        }
    }
}

#[test]
fn parallel_compile_through_a_cache() {
    let c = compiler();
    let cache = Cache::in_memory();
    let sources: Vec<String> = (0..6).map(kernel).collect();
    let o = opts();
    let mut jobs: Vec<Job<'_>> = sources
        .iter()
        .map(|s| Job {
            source: s.as_bytes(),
            opts: &o,
        })
        .collect();
    // The same kernel twice in one list, and a second pass: hits.
    jobs.push(jobs[0]);
    let options = ParallelOptions {
        workers: NonZeroUsize::new(2),
        cache: Some(&cache),
    };
    let first = compile_all(&c, &jobs, &options);
    assert!(first.iter().all(|r| r.is_ok()));
    let second = compile_all(&c, &jobs, &options);
    for (i, r) in second.iter().enumerate() {
        let (object, status) = r.as_ref().unwrap();
        assert_eq!(*status, CacheStatus::Hit, "job {i}");
        let m = Module::load(object).unwrap();
        let k = if i == 6 { 0 } else { i };
        assert_eq!(call(&m, &format!("k{k}")).0, 28.0 * (k + 1) as f32);
    }
}

#[test]
fn a_split_batch_is_one_image_with_every_kernel() {
    let c = compiler();
    let mut batch = Batch::new().prelude("static inline float twice(float x) { return 2 * x; }");
    for i in 0..13 {
        batch.add(format!("k{i}"), kernel(i)).unwrap();
    }
    for parts in [1, 2, 3, 13, 64] {
        let module = batch
            .build_split(&c, &opts(), std::num::NonZeroUsize::new(parts))
            .unwrap();
        assert_eq!(module.functions().len(), 13, "{parts} parts");
        for i in 0..13 {
            let (s, _) = call(&module, &format!("k{i}"));
            assert_eq!(s, 28.0 * (i + 1) as f32, "k{i} with {parts} parts");
        }
    }
    // An error in one part is the batch's error, naming the kernel.
    batch
        .add("broken", "float broken(void) { return nope; }")
        .unwrap();
    let err = batch.build_split(&c, &opts(), None).err().unwrap();
    assert!(err.to_string().contains("broken"), "{err}");
}
