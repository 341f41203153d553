//! The `elfjit` binary, end to end: exit codes, messages, JSON.

use std::io::Write;
use std::process::{Command, Output, Stdio};

mod support;
use support::{stderr, stdout, Scratch};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_elfjit"))
}

fn run(cmd: &mut Command) -> Output {
    cmd.stdin(Stdio::null()).output().unwrap()
}

/// Failed cleanly: non-zero exit, one `elfjit: error:` message, no panic.
fn assert_clean_failure(o: &Output, needle: &str) {
    let err = stderr(o);
    assert!(!o.status.success(), "succeeded unexpectedly; stderr: {err}");
    assert!(err.starts_with("elfjit: error: "), "stderr: {err}");
    assert!(err.contains(needle), "stderr lacks {needle:?}: {err}");
    assert!(!err.contains("panicked"), "stderr: {err}");
    assert!(!err.contains("RUST_BACKTRACE"), "stderr: {err}");
}

const ADD_C: &str = "int add(int a, int b) { return a + b; }\n";

#[test]
fn help_and_version() {
    for flag in ["--help", "help", "-h"] {
        let o = run(bin().arg(flag));
        assert!(o.status.success());
        let text = stdout(&o);
        for cmd in ["run", "demo", "inspect"] {
            assert!(text.contains(cmd), "{text}");
        }
    }
    let o = run(bin().args(["run", "--help"]));
    assert!(o.status.success());
    let text = stdout(&o);
    assert!(
        text.contains("TYPE[N]=fill:V") && text.contains("--json"),
        "{text}"
    );
    let o = run(bin().arg("--version"));
    assert!(o.status.success());
    assert!(stdout(&o).starts_with(&format!("elfjit {}", env!("CARGO_PKG_VERSION"))));
}

#[test]
fn unknown_command_and_option() {
    assert_clean_failure(
        &run(bin().arg("frobnicate")),
        "unknown command `frobnicate`",
    );
    let d = Scratch::new("cli-opt");
    let k = d.write("k.c", ADD_C);
    assert_clean_failure(
        &run(bin().arg("run").arg(&k).arg("--bogus")),
        "unknown option `--bogus`",
    );
    assert_clean_failure(
        &run(bin().arg("run").arg(&k).arg("--arg")),
        "--arg needs a value",
    );
    assert_clean_failure(
        &run(bin().arg("run").arg(&k).args(["--ret", "i8"])),
        "bad --ret `i8`",
    );
    assert_clean_failure(
        &run(bin().arg("run").arg(&k).args(["--target", "mips"])),
        "unknown --target `mips`",
    );
    assert_clean_failure(
        &run(bin().arg("run").arg(&k).args(["--opt-level", "7"])),
        "--opt-level `7`",
    );
    assert_clean_failure(&run(bin().arg("run")), "run needs a FILE");
    assert_clean_failure(&run(bin().arg("run").arg(&k).arg(&k)), "run takes one FILE");
}

#[test]
fn malformed_arg_specs() {
    let d = Scratch::new("cli-args");
    let k = d.write("k.c", ADD_C);
    for (spec, needle) in [
        ("u8:300", "300 is out of range for u8 (0..=255)"),
        ("i31:4", "unknown type `i31`"),
        ("i32[3]=1,2", "needs exactly 3 values, got 2"),
        ("f32[999999999999]", "too large"),
        ("f32:abc", "not a number"),
        ("i32", "expected TYPE:VALUE"),
        ("f32[4", "missing `]`"),
    ] {
        let o = run(bin().arg("run").arg(&k).arg("--arg").arg(spec));
        assert_clean_failure(&o, needle);
        assert!(
            stderr(&o).contains(&format!("--arg `{spec}`")),
            "{}",
            stderr(&o)
        );
        assert_eq!(o.status.code(), Some(2), "usage errors exit 2");
        assert!(o.stdout.is_empty());
    }
}

#[test]
fn stdin_needs_lang() {
    let o = run(bin().args(["run", "-"]));
    assert_clean_failure(&o, "--lang");
}

#[test]
fn unknown_extension_needs_lang() {
    let d = Scratch::new("cli-ext");
    let k = d.write("k.txt", ADD_C);
    assert_clean_failure(&run(bin().arg("run").arg(&k)), "--lang");
    assert_clean_failure(
        &run(bin().arg("run").arg(d.join("missing.c"))),
        "cannot read",
    );
}

#[test]
fn clang_diagnostics_are_shown() {
    let d = Scratch::new("cli-diag");
    let k = d.write("broken.c", "int f(int a) { return a +; }\n");
    let o = run(bin().arg("run").arg(&k));
    assert_clean_failure(&o, "expected expression");
    assert_eq!(o.status.code(), Some(1));
}

#[test]
fn no_clang_found() {
    let empty = Scratch::new("cli-nopath");
    let k = empty.write("k.c", ADD_C);
    let empty_path = Scratch::new("cli-emptypath");
    let o = run(bin()
        .arg("run")
        .arg(&k)
        .env_remove("ELFJIT_CLANG")
        .env("PATH", empty_path.path()));
    assert_clean_failure(&o, "no clang found");
    assert!(stderr(&o).contains("ELFJIT_CLANG"), "{}", stderr(&o));
    let o = run(bin()
        .arg("run")
        .arg(&k)
        .env("ELFJIT_CLANG", empty.join("no-such-clang")));
    assert_clean_failure(&o, "ELFJIT_CLANG=");
}

#[test]
fn foreign_target_runs_emulated() {
    let d = Scratch::new("cli-foreign");
    let k = d.write("k.c", ADD_C);
    let foreign = if cfg!(target_arch = "riscv64") {
        "aarch64"
    } else {
        "riscv64"
    };
    let o = run(bin().arg("run").arg(&k).args([
        "--target", foreign, "--ret", "i32", "--arg", "i32:2", "--arg", "i32:40", "--json",
    ]));
    let v = json(&o);
    assert_eq!(v["target"], foreign);
    assert_eq!(v["return"], 42);
}

// ---- these need the loader (driver/src/module.rs) ----

fn json(o: &Output) -> serde_json::Value {
    assert!(o.status.success(), "failed: {}", stderr(o));
    let text = stdout(o);
    assert_eq!(
        text.trim_end().lines().count(),
        1,
        "one JSON object: {text}"
    );
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

#[test]
fn run_add_json() {
    let d = Scratch::new("cli-add");
    let k = d.write("k.c", ADD_C);
    let v = json(&run(bin().arg("run").arg(&k).args([
        "--ret", "i32", "--arg", "i32:2", "--arg", "i32:3", "--json",
    ])));
    assert_eq!(v["return"], 5);
    assert_eq!(v["entry"], "add");
    assert_eq!(v["args"], serde_json::json!([2, 3]));
    assert!(v["target"].is_string());
    for t in ["compile", "load", "call"] {
        assert!(v["timings_us"][t].as_f64().unwrap() >= 0.0, "{v}");
    }
}

#[test]
fn run_buffers_and_floats_json() {
    let d = Scratch::new("cli-buf");
    let k = d.write(
        "scale.c",
        "float scale(float *x, int n, float a) { float s = 0; for (int i = 0; i < n; i++) { x[i] *= a; s += x[i]; } return s; }\n",
    );
    let v = json(&run(bin().arg("run").arg(&k).args([
        "--ret",
        "f32",
        "--arg",
        "f32[4]=iota",
        "--arg",
        "i32:4",
        "--arg",
        "f32:0.5",
        "--json",
    ])));
    assert_eq!(v["return"], 3.0);
    assert_eq!(v["args"], serde_json::json!([[0, 0.5, 1, 1.5], 4, 0.5]));
    // Non-finite values come back as strings.
    let v = json(&run(bin().arg("run").arg(&k).args([
        "--ret",
        "f32",
        "--arg",
        "f32[2]=1,-2",
        "--arg",
        "i32:2",
        "--arg",
        "f32:inf",
        "--json",
    ])));
    assert_eq!(v["return"], "nan");
    assert_eq!(v["args"][0], serde_json::json!(["inf", "-inf"]));
}

#[test]
fn run_from_stdin_ir_and_summary() {
    let ir = "define i64 @twice(i64 %a) {\n  %b = shl i64 %a, 1\n  ret i64 %b\n}\n";
    let mut child = bin()
        .args([
            "run", "-", "--lang", "ir", "--ret", "i64", "--arg", "i64:-21", "-O3",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(ir.as_bytes())
        .unwrap();
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(text.contains("twice") && text.contains("-42"), "{text}");
}

#[test]
fn entry_selection_errors() {
    let d = Scratch::new("cli-entry");
    let k = d.write(
        "two.c",
        "int a(void) { return 1; }\nint b(void) { return 2; }\n",
    );
    let o = run(bin().arg("run").arg(&k).args(["--ret", "i32"]));
    assert_clean_failure(&o, "choose an entry with --entry");
    assert!(stderr(&o).contains("a, b"), "{}", stderr(&o));
    let o = run(bin()
        .arg("run")
        .arg(&k)
        .args(["--ret", "i32", "--entry", "c"]));
    assert_clean_failure(&o, "unknown entry `c`");
    let v = json(&run(bin()
        .arg("run")
        .arg(&k)
        .args(["--ret", "i32", "--entry", "b", "--json"])));
    assert_eq!(v["return"], 2);
}

#[test]
fn undefined_symbol_is_an_error() {
    let d = Scratch::new("cli-undef");
    let k = d.write("u.c", "int nope_not_defined_anywhere(int);\nint f(int a) { return nope_not_defined_anywhere(a); }\n");
    let o = run(bin()
        .arg("run")
        .arg(&k)
        .args(["--ret", "i32", "--arg", "i32:1"]));
    assert_clean_failure(&o, "nope_not_defined_anywhere");
}

#[test]
fn inspect_truncated_object_fails_cleanly() {
    let d = Scratch::new("cli-inspect");
    let obj = Command::new(std::env::var("ELFJIT_CLANG").unwrap_or_else(|_| "clang-19".into()))
        .args(["-c", "-x", "c", "-", "-o", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            c.stdin.take().unwrap().write_all(ADD_C.as_bytes())?;
            c.wait_with_output()
        });
    let bytes = match obj {
        Ok(o) if o.status.success() => o.stdout,
        _ => b"\x7fELF\x02\x01\x01\0\0\0\0\0\0\0\0\0\x01\0\x3e\0".to_vec(),
    };
    let truncated = d.join("trunc.o");
    std::fs::write(&truncated, &bytes[..bytes.len().min(40)]).unwrap();
    let o = run(bin().arg("inspect").arg(&truncated));
    assert_clean_failure(&o, "");
    assert_eq!(stderr(&o).lines().count(), 1, "{}", stderr(&o));
    let garbage = d.write("garbage.o", "definitely not an ELF file");
    assert_clean_failure(&run(bin().arg("inspect").arg(&garbage)), "");
    assert_clean_failure(&run(bin().arg("inspect")), "inspect needs a FILE");
}

#[test]
fn inspect_compiles_sources() {
    let d = Scratch::new("cli-inspect-src");
    let k = d.write("k.c", ADD_C);
    let o = run(bin().arg("inspect").arg(&k));
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("add"), "{}", stdout(&o));
}

#[test]
fn demo_passes() {
    let o = run(bin().arg("demo"));
    assert!(o.status.success(), "{}\n{}", stdout(&o), stderr(&o));
    let text = stdout(&o);
    for k in ["saxpy", "dot", "softmax", "matmul", "sum_ir"] {
        assert!(
            text.lines().any(|l| l.starts_with("ok") && l.contains(k)),
            "{text}"
        );
    }
}
