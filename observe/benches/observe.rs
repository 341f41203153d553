//! What publishing a module to the observers costs, against baselines in the same run:
//!
//! - `load/link` vs `load/link+publish off`: linking an object into fresh memory, without
//!   and with the (switched-off) observers' gate — the cost of the hook on the load path;
//! - `publish/*`: publishing one linked module of `FUNCTIONS` functions with one feature on
//!   (`perf map`, `gdb`; `eh_frame` for the same module compiled with `-funwind-tables`),
//!   including unregistering it again when the registration drops. Read as
//!   `(publish/X − publish/off) / FUNCTIONS` per function for the perf map and per module
//!   for the others.
//!
//! `cargo bench -p elfjit-observe --bench observe`.

use criterion::{criterion_group, criterion_main, Criterion};
use elfjit_core::Plan;
use elfjit_observe::Features;
use elfjit_os::{MmapBackend, ProcessResolver};
use std::hint::black_box;
use std::io::Write;
use std::process::{Command, Stdio};

/// Functions in the benchmark module.
const FUNCTIONS: usize = 16;

fn source() -> String {
    let mut s = String::from("extern float expf(float);\n");
    for i in 0..FUNCTIONS {
        s += &format!(
            "float k{i}(const float *x, int n) {{ float s = {i}; \
             for (int j = 0; j < n; j++) s += expf(x[j] * {i}.5f); return s; }}\n"
        );
    }
    s
}

fn compile(extra: &[&str]) -> Vec<u8> {
    let target = match std::env::consts::ARCH {
        "aarch64" => "--target=aarch64-none-unknown-elf",
        _ => "--target=x86_64-none-unknown-elf",
    };
    let mut child = Command::new(std::env::var("ELFJIT_CLANG").unwrap_or("clang-19".into()))
        .args([
            target,
            "-c",
            "-O2",
            "-fPIC",
            "-ffreestanding",
            "-fno-stack-protector",
        ])
        .args(extra)
        .args(["-x", "c", "-", "-o", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("clang-19");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(source().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    out.stdout
}

fn bench(c: &mut Criterion) {
    let plain = compile(&[]);
    let unwind = compile(&["-funwind-tables"]);
    let mut group = c.benchmark_group("load");
    group.bench_function("link", |b| {
        b.iter(|| {
            let mut memory = MmapBackend::new();
            let plan = Plan::new(&[&plain[..]], memory.page_size()).unwrap();
            let image = plan.link(&mut memory, &mut ProcessResolver).unwrap();
            black_box(image.placement());
        })
    });
    group.bench_function("link+publish off", |b| {
        b.iter(|| {
            let mut memory = MmapBackend::new();
            let plan = Plan::new(&[&plain[..]], memory.page_size()).unwrap();
            let image = plan.link(&mut memory, &mut ProcessResolver).unwrap();
            // SAFETY: `memory` outlives the (absent) registration.
            let published =
                unsafe { elfjit_observe::observe_image("bench", &[&plain[..]], &image) };
            black_box(published.unwrap());
        })
    });
    group.finish();

    // One linked copy of each object, published again and again.
    let mut memory = MmapBackend::new();
    let plan = Plan::new(&[&plain[..]], memory.page_size()).unwrap();
    let image = plan.link(&mut memory, &mut ProcessResolver).unwrap();
    let mut unwind_memory = MmapBackend::new();
    let unwind_plan = Plan::new(&[&unwind[..]], unwind_memory.page_size()).unwrap();
    let unwind_image = unwind_plan
        .link(&mut unwind_memory, &mut ProcessResolver)
        .unwrap();
    let dir = std::env::temp_dir().join(format!("elfjit-observe-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut group = c.benchmark_group("publish");
    let publish = |image: &elfjit_core::Image<'_, '_>, object: &[u8]| {
        // SAFETY: the images' memory lives until the end of `bench`; each registration is
        // dropped at the end of its iteration.
        let registration = unsafe { elfjit_observe::observe_image("bench", &[object], image) };
        drop(black_box(registration.unwrap()));
    };
    group.bench_function("off", |b| b.iter(|| publish(&image, &plain)));
    elfjit_observe::enable_with(Features::PERF_MAP, &dir.join("perf.map"), &dir).unwrap();
    group.bench_function("perf map", |b| b.iter(|| publish(&image, &plain)));
    elfjit_observe::disable(Features::PERF_MAP);
    elfjit_observe::enable(Features::GDB).unwrap();
    group.bench_function("gdb", |b| b.iter(|| publish(&image, &plain)));
    elfjit_observe::disable(Features::GDB);
    group.bench_function("eh_frame", |b| b.iter(|| publish(&unwind_image, &unwind)));
    group.finish();
    std::fs::remove_dir_all(&dir).unwrap();
}

criterion_group!(benches, bench);
criterion_main!(benches);
