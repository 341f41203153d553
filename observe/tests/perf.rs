//! perf sees JIT kernels: a kernel spins for about half a second under `perf record` (the
//! machine has no PMU: the software `cpu-clock` event), and perf attributes most samples to
//! the kernel's name — through `/tmp/perf-<pid>.map`, and through the jitdump after
//! `perf inject --jit`, whose `perf annotate` shows the kernel's instructions and, compiled
//! with `-g`, its source lines.
//!
//! The program recorded is this test binary, run again to do only `spin_child`.

mod common;

use common::{compile, rerun_under, scratch, Loaded};
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

const SPIN: &str = "#line 1 \"spin_kernel.c\"\n\
long spin_kernel(long n) {\n\
    long s = 0;\n\
    for (long i = 0; i < n; i++) {\n\
        s = s * 31 + i;\n\
        __asm__ volatile(\"\" : \"+r\"(s));\n\
    }\n\
    return s;\n\
}\n";

/// The recorded program: loads the kernel with the observers `ELFJIT_PERF` asks for and
/// spins in it for half a second.
#[test]
#[ignore = "run by the perf tests, under perf record"]
fn spin_child() {
    let debug = std::env::var_os("SPIN_DEBUG").is_some();
    let object = compile(SPIN, "-O1", if debug { &["-g"] } else { &[] });
    let loaded = Loaded::new(&object);
    // SAFETY: `spin_kernel` has this signature; the module stays loaded while it runs.
    let spin: extern "C" fn(i64) -> i64 = unsafe { std::mem::transmute(loaded.get("spin_kernel")) };
    let start = Instant::now();
    let mut sum = 0i64;
    while start.elapsed() < Duration::from_millis(500) {
        sum = sum.wrapping_add(spin(200_000));
    }
    println!("sum {sum}");
    if let Some(path) = elfjit_observe::perf_map_path() {
        println!("perf map {}", path.display());
    }
    if let Some(path) = elfjit_observe::jitdump_path() {
        println!("jitdump {}", path.display());
    }
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

fn perf(args: &[&str]) -> Output {
    let output = Command::new("perf")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run perf (./scripts/setup installs linux-perf): {e}"));
    assert!(
        output.status.success(),
        "perf {} failed:\n{}",
        args.join(" "),
        text(&output)
    );
    output
}

/// Records the spinning child with `extra` perf record flags and `env`.
fn record(data: &Path, extra: &[&str], env: &[(&str, &str)]) -> Output {
    let data = data.to_str().unwrap();
    // -B: no build-id collection at the end (a second of post-processing, unused here).
    let mut wrapper = vec!["perf", "record", "-B", "-e", "cpu-clock", "-o", data];
    wrapper.extend_from_slice(extra);
    wrapper.push("--");
    let output = rerun_under(&wrapper, "spin_child", env);
    assert!(
        output.status.success(),
        "perf record could not record the kernel (perf_event_paranoid, a kernel without \
         perf events?):\n{}",
        text(&output)
    );
    output
}

/// The share of samples `perf report` gives `symbol` (in percent).
fn share_of(report: &str, symbol: &str) -> f64 {
    report
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| l.split_whitespace().last() == Some(symbol))
        .filter_map(|l| {
            l.split_whitespace()
                .next()?
                .trim_end_matches('%')
                .parse::<f64>()
                .ok()
        })
        .sum()
}

#[test]
fn perf_report_names_the_kernel_from_the_perf_map() {
    let dir = scratch("perf-map");
    let data = dir.join("perf.data");
    let child = record(&data, &[], &[("ELFJIT_PERF", "map")]);
    let report = perf(&[
        "report",
        "-i",
        data.to_str().unwrap(),
        "--stdio",
        "--sort",
        "sym",
        "--percent-limit",
        "1",
    ]);
    let report = String::from_utf8_lossy(&report.stdout).into_owned();
    let share = share_of(&report, "spin_kernel");
    assert!(
        share > 50.0,
        "spin_kernel has {share}% of the samples:\n{report}\n{}",
        text(&child)
    );
    let stdout = String::from_utf8_lossy(&child.stdout).into_owned();
    let map = stdout
        .lines()
        .find_map(|l| l.strip_prefix("perf map "))
        .expect("the child names its perf map");
    std::fs::remove_file(map).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn perf_inject_jit_names_annotates_and_gives_lines() {
    let dir = scratch("jitdump");
    let data = dir.join("perf.data");
    let child = record(
        &data,
        &["-k", "1"],
        &[("ELFJIT_PERF", "jitdump"), ("SPIN_DEBUG", "1")],
    );
    let stdout = String::from_utf8_lossy(&child.stdout).into_owned();
    let dump = stdout
        .lines()
        .find_map(|l| l.strip_prefix("jitdump "))
        .unwrap_or_else(|| panic!("the child wrote no jitdump:\n{}", text(&child)))
        .to_string();
    let injected = dir.join("perf.jit.data");
    perf(&[
        "inject",
        "--jit",
        "-i",
        data.to_str().unwrap(),
        "-o",
        injected.to_str().unwrap(),
    ]);
    let injected = injected.to_str().unwrap();
    let report = perf(&[
        "report",
        "-i",
        injected,
        "--stdio",
        "--sort",
        "sym",
        "--percent-limit",
        "1",
    ]);
    let report = String::from_utf8_lossy(&report.stdout).into_owned();
    let share = share_of(&report, "spin_kernel");
    assert!(
        share > 50.0,
        "spin_kernel has {share}% of the samples:\n{report}"
    );

    // -l: a summary of the samples' source lines after the disassembly.
    let annotate = perf(&["annotate", "-i", injected, "--stdio", "-l", "spin_kernel"]);
    let annotate = String::from_utf8_lossy(&annotate.stdout).into_owned();
    assert!(
        annotate.lines().any(|l| l.trim_end().ends_with("ret")),
        "perf annotate shows no instructions of spin_kernel:\n{annotate}"
    );
    // The loop's lines (3: for, 4: the multiply-add, 5: the asm barrier) hold the samples.
    for line in ["spin_kernel.c:3", "spin_kernel.c:4"] {
        assert!(
            annotate.contains(line),
            "perf annotate has no samples on {line}:\n{annotate}"
        );
    }
    std::fs::remove_dir_all(Path::new(&dump).parent().unwrap()).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}
