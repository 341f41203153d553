//! GDB sees JIT kernels through the GDB JIT interface: with a pending breakpoint on a
//! kernel's name set before the kernel exists, GDB stops in it once it is registered; `bt`
//! shows the kernel and its Rust caller; compiled with `-g`, `info line` gives the kernel's
//! source file and line.
//!
//! The debugged program is this test binary, run again to do only `gdb_child`.

mod common;

use common::{compile, rerun_under, Loaded};

const KERNEL: &str = "#line 1 \"gdb_kernel.c\"\n\
int gdb_kernel(int x) {\n\
    int y = x * 3;\n\
    return y + 1;\n\
}\n";

/// The debugged program: loads the kernel (registered because `ELFJIT_GDB=1`) and calls it.
#[test]
#[ignore = "run by the gdb tests, under gdb"]
fn gdb_child() {
    let debug = std::env::var_os("GDB_DEBUG").is_some();
    let object = compile(KERNEL, "-O1", if debug { &["-g"] } else { &[] });
    let loaded = Loaded::new(&object);
    let registration = loaded.registration.as_ref().expect("registered");
    assert_eq!(registration.debugger_entries(), 1);
    // SAFETY: `gdb_kernel` has this signature; the module stays loaded while it runs.
    let kernel: extern "C" fn(i32) -> i32 =
        unsafe { std::mem::transmute(loaded.get("gdb_kernel")) };
    assert_eq!(calls_the_kernel(kernel), 13);
}

#[inline(never)]
fn calls_the_kernel(kernel: extern "C" fn(i32) -> i32) -> i32 {
    std::hint::black_box(kernel(std::hint::black_box(4)))
}

/// Runs the child under gdb in batch mode, stopping at `gdb_kernel`; returns gdb's output.
fn debug_child(env: &[(&str, &str)]) -> String {
    let output = rerun_under(
        &[
            "gdb",
            "-batch",
            "-nx",
            "-iex",
            "set auto-load off",
            "-iex",
            "set debuginfod enabled off",
            "-ex",
            "set breakpoint pending on",
            "-ex",
            "break gdb_kernel",
            "-ex",
            "run",
            "-ex",
            "bt",
            "-ex",
            "info line *$pc",
            "-ex",
            "kill",
            "--args",
        ],
        "gdb_child",
        env,
    );
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        text.contains("Breakpoint 1, ") && text.contains("gdb_kernel"),
        "gdb did not stop in gdb_kernel:\n{text}"
    );
    text
}

/// The frames of gdb's `bt` (lines starting with `#N`), function names only.
fn frames(text: &str) -> Vec<&str> {
    text.lines().filter(|l| l.starts_with('#')).collect()
}

#[test]
fn a_pending_breakpoint_stops_in_the_kernel_and_bt_shows_its_caller() {
    let text = debug_child(&[("ELFJIT_GDB", "1")]);
    let frames = frames(&text);
    assert!(
        frames.first().is_some_and(|f| f.contains("gdb_kernel")),
        "frame #0 is not the kernel:\n{text}"
    );
    assert!(
        frames
            .get(1)
            .is_some_and(|f| f.contains("calls_the_kernel")),
        "frame #1 is not the kernel's caller:\n{text}"
    );
}

#[test]
fn with_debug_info_gdb_knows_the_kernel_source_line() {
    let text = debug_child(&[("ELFJIT_GDB", "1"), ("GDB_DEBUG", "1")]);
    assert!(
        text.contains("gdb_kernel.c:"),
        "the breakpoint has no source location:\n{text}"
    );
    let line = text
        .lines()
        .find(|l| l.starts_with("Line "))
        .unwrap_or_else(|| panic!("no `info line` answer:\n{text}"));
    assert!(
        line.contains("gdb_kernel.c")
            && (line.starts_with("Line 2 ") || line.starts_with("Line 3 ")),
        "info line does not give the kernel's line: {line}\n{text}"
    );
    let frames = frames(&text);
    assert!(
        frames
            .get(1)
            .is_some_and(|f| f.contains("calls_the_kernel")),
        "frame #1 is not the kernel's caller:\n{text}"
    );
}

#[test]
fn dropping_a_module_unregisters_its_symbol_file() {
    elfjit_observe::enable(elfjit_observe::Features::GDB).unwrap();
    let before = elfjit_observe::registered_entries();
    let loaded = Loaded::new(&compile(KERNEL, "-O1", &[]));
    assert_eq!(elfjit_observe::registered_entries(), before + 1);
    drop(loaded);
    assert_eq!(elfjit_observe::registered_entries(), before);
}
