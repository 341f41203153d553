//! The observers through the `elfjit` command: `elfjit run --debug` under gdb stops in the
//! kernel at its source line; `ELFJIT_PERF=map` lets perf name a kernel `elfjit run` spins
//! in (the library's unwinding is tested in elfjit's tests/observe.rs).

use elfjit::Arch;
use std::process::{Command, Output};

mod support;
use support::Scratch;

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

fn tool(name: &str, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(name);
    command.args(args);
    for (key, value) in env {
        command.env(key, value);
    }
    command
        .output()
        .unwrap_or_else(|e| panic!("cannot run {name} (./scripts/setup installs it): {e}"))
}

#[test]
fn gdb_stops_in_a_kernel_run_with_debug_at_its_source_line() {
    let dir = Scratch::new("gdb");
    let source = dir.join("my_kernel.c");
    std::fs::write(
        &source,
        "int my_kernel(int x) {\n    int y = x * 3;\n    return y + 1;\n}\n",
    )
    .unwrap();
    let output = tool(
        "gdb",
        &[
            "-batch",
            "-nx",
            "-iex",
            "set auto-load off",
            "-iex",
            "set debuginfod enabled off",
            "-ex",
            "set breakpoint pending on",
            "-ex",
            "break my_kernel",
            "-ex",
            "run",
            "-ex",
            "bt",
            "-ex",
            "info line *$pc",
            "-ex",
            "kill",
            "--args",
            env!("CARGO_BIN_EXE_elfjit"),
            "run",
            source.to_str().unwrap(),
            "--debug",
            "--ret",
            "i32",
            "--arg",
            "i32:4",
        ],
        &[],
    );
    let text = text(&output);
    let frame0 = text
        .lines()
        .find(|l| l.starts_with("#0 "))
        .unwrap_or_else(|| panic!("gdb did not stop:\n{text}"));
    assert!(
        frame0.contains("my_kernel (x=4)") && frame0.contains("my_kernel.c:"),
        "not stopped in my_kernel at a source line: {frame0}\n{text}"
    );
    let line = text
        .lines()
        .find(|l| l.starts_with("Line "))
        .unwrap_or_else(|| panic!("no `info line` answer:\n{text}"));
    assert!(
        line.contains(source.to_str().unwrap())
            && (line.starts_with("Line 2 ") || line.starts_with("Line 3 ")),
        "info line: {line}"
    );
    // The backtrace continues into the caller: libffi's call, then elfjit's.
    assert!(
        text.contains("#1 ") && text.contains("elfjit::native::"),
        "{text}"
    );
}

#[test]
fn debug_is_refused_for_an_emulated_run() {
    let foreign = if Arch::host() == Some(Arch::Aarch64) {
        "x86_64"
    } else {
        "aarch64"
    };
    let output = tool(
        env!("CARGO_BIN_EXE_elfjit"),
        &["run", "-", "--lang", "c", "--debug", "--target", foreign],
        &[],
    );
    assert!(!output.status.success());
    assert!(
        text(&output).contains("debugging runs on the host only"),
        "{}",
        text(&output)
    );
}

#[test]
// The dlopen-fallback writes no perf map: its kernel is a file-backed mapping of a shared
// library removed right after dlopen, so perf looks for its symbols in that (gone) file.
#[cfg_attr(
    feature = "dlopen-fallback",
    ignore = "dlopen-fallback kernels are in a removed shared library, not in perf-mapped memory"
)]
fn perf_names_a_kernel_elfjit_run_spins_in_with_elfjit_perf_map() {
    let dir = Scratch::new("perf");
    let source = dir.join("spin.c");
    std::fs::write(
        &source,
        "long spin(long n) { long s = 0; for (long i = 0; i < n; i++) { s = s * 31 + i; \
         __asm__ volatile(\"\" : \"+r\"(s)); } return s; }\n",
    )
    .unwrap();
    let data = dir.join("perf.data");
    let data = data.to_str().unwrap();
    let record = tool(
        "perf",
        &[
            "record",
            "-B",
            "-e",
            "cpu-clock",
            "-o",
            data,
            "--",
            env!("CARGO_BIN_EXE_elfjit"),
            "run",
            source.to_str().unwrap(),
            "--ret",
            "i64",
            "--arg",
            "i64:400000000",
        ],
        &[("ELFJIT_PERF", "map")],
    );
    assert!(
        record.status.success(),
        "perf record failed:\n{}",
        text(&record)
    );
    let report = tool(
        "perf",
        &["report", "-i", data, "--stdio", "--sort", "sym"],
        &[],
    );
    assert!(
        report.status.success(),
        "perf report failed:\n{}",
        text(&report)
    );
    let report = String::from_utf8_lossy(&report.stdout).into_owned();
    let share: f64 = report
        .lines()
        .filter(|l| !l.starts_with('#') && l.split_whitespace().last() == Some("spin"))
        .filter_map(|l| {
            l.split_whitespace()
                .next()?
                .trim_end_matches('%')
                .parse::<f64>()
                .ok()
        })
        .sum();
    assert!(share > 50.0, "spin has {share}% of the samples:\n{report}");
    // The recorded process's perf map stays in /tmp for perf: remove it.
    let script = tool("perf", &["script", "-i", data, "-F", "pid"], &[]);
    let pid = String::from_utf8_lossy(&script.stdout)
        .split_whitespace()
        .next()
        .map(str::to_string)
        .expect("a sample's pid");
    std::fs::remove_file(format!("/tmp/perf-{pid}.map")).unwrap();
}
