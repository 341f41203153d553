//! The core where there is no std: builds the `#![no_std]` loongarch64 example in `nostd/`
//! (nightly, `-Zbuild-std=core`, its own target directory under `target/`), runs it under
//! `qemu-loongarch64`, and checks every kernel it reports with the corpus's own checks:
//! the same arguments (compared spelling by spelling) and the same Rust reference results.

use elfjit::args::{ArgOutcome, Buffer, Scalar, ScalarType};
use elfjit::run::{RunOutcome, Timings};
use elfjit::Arch;
use elfjit_tests::{case, corpus};
use std::path::{Path, PathBuf};
use std::process::Command;

const TARGET: &str = "loongarch64-unknown-none";

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// Builds the program and returns the path of its executable.
fn build() -> PathBuf {
    let root = workspace();
    let target_dir = root.join("target/nostd");
    // `rustup run nightly` rather than `cargo +nightly`: this test runs under a stable
    // cargo whose environment (RUSTUP_TOOLCHAIN, CARGO, RUSTC, ...) must not leak in.
    let mut cmd = Command::new("rustup");
    cmd.args(["run", "nightly", "cargo", "build", "--quiet", "--release"])
        .args(["-Zbuild-std=core", "--target", TARGET])
        .arg("--manifest-path")
        .arg(root.join("nostd/Cargo.toml"))
        .arg("--target-dir")
        .arg(&target_dir);
    for var in [
        "RUSTUP_TOOLCHAIN",
        "CARGO",
        "RUSTC",
        "RUSTDOC",
        "RUSTC_WRAPPER",
        "RUSTFLAGS",
        "CARGO_ENCODED_RUSTFLAGS",
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_TARGET",
        "CARGO_MANIFEST_DIR",
    ] {
        cmd.env_remove(var);
    }
    let out = cmd
        .output()
        .expect("rustup (scripts/setup installs nightly + rust-src)");
    assert!(
        out.status.success(),
        "building nostd/ failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    target_dir
        .join(TARGET)
        .join("release/elfjit-nostd-loongarch")
}

/// One kernel as the program reported it.
#[derive(Debug, Default)]
struct Report {
    name: String,
    file: String,
    entry: String,
    spec: Vec<String>,
    ret: Option<Scalar>,
    args: Vec<ArgOutcome>,
}

fn scalar(ty: &str, hex: &str) -> Scalar {
    let bits = u64::from_str_radix(hex.trim_start_matches("0x"), 16)
        .unwrap_or_else(|e| panic!("`{hex}`: {e}"));
    match ty {
        "i8" => Scalar::I8(bits as i8),
        "u8" => Scalar::U8(bits as u8),
        "i16" => Scalar::I16(bits as i16),
        "u16" => Scalar::U16(bits as u16),
        "i32" => Scalar::I32(bits as i32),
        "u32" => Scalar::U32(bits as u32),
        "i64" => Scalar::I64(bits as i64),
        "u64" => Scalar::U64(bits),
        "f32" => Scalar::F32(f32::from_bits(bits as u32)),
        "f64" => Scalar::F64(f64::from_bits(bits)),
        other => panic!("unknown type `{other}`"),
    }
}

/// Parses the program's output into one report per kernel, plus the closing line.
fn parse(stdout: &str) -> (Vec<Report>, String) {
    let mut reports = Vec::new();
    let mut current: Option<Report> = None;
    let mut done = String::new();
    for line in stdout.lines() {
        let words: Vec<&str> = line.split(' ').collect();
        match words.as_slice() {
            ["case", name, file] => {
                current = Some(Report {
                    name: name.to_string(),
                    file: file.to_string(),
                    ..Report::default()
                })
            }
            ["entry", entry] => current.as_mut().unwrap().entry = entry.to_string(),
            ["spec", spec @ ..] => {
                current.as_mut().unwrap().spec = spec.iter().map(|s| s.to_string()).collect()
            }
            ["ret", "void"] => {}
            ["ret", ty, hex] => current.as_mut().unwrap().ret = Some(scalar(ty, hex)),
            ["arg", i, ty, values @ ..] => {
                let report = current.as_mut().unwrap();
                assert_eq!(i.parse::<usize>().unwrap(), report.args.len(), "{line}");
                report.args.push(match ty.split_once('[') {
                    Some((elem, len)) => {
                        let len: usize = len.trim_end_matches(']').parse().unwrap();
                        assert_eq!(values.len(), len, "{line}");
                        let elems: Vec<Scalar> = values.iter().map(|v| scalar(elem, v)).collect();
                        let ty = ScalarType::from_name(elem).expect("element type");
                        ArgOutcome::Buffer(Buffer::from_values(ty, &elems).expect("buffer"))
                    }
                    None => ArgOutcome::Scalar(scalar(ty, values[0])),
                });
            }
            ["end"] => reports.push(current.take().unwrap()),
            _ if line.starts_with("done: ") => done = line.to_string(),
            _ if line.starts_with("elfjit-core on loongarch64") => {}
            _ => panic!("unexpected output line: {line}"),
        }
    }
    (reports, done)
}

#[test]
fn no_std_program_runs_corpus_kernels_under_qemu() {
    let exe = build();
    let out = Command::new("qemu-loongarch64")
        .arg(&exe)
        .output()
        .expect("qemu-loongarch64 (scripts/setup installs qemu-user)");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "exit {:?}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let (reports, done) = parse(&stdout);
    assert_eq!(
        done,
        format!("done: {} linked and called, 0 failed", reports.len())
    );

    // The issue asks for at least a third of the corpus.
    let valid = corpus()
        .iter()
        .filter(|c| c.not_valid_on(Arch::Loongarch64).is_none())
        .count();
    assert!(
        reports.len() * 3 >= corpus().len() && reports.len() + 1 >= valid,
        "{} of {} kernels ({valid} valid on loongarch64)",
        reports.len(),
        corpus().len()
    );

    let mut failures = Vec::new();
    for report in &reports {
        let c = case(&report.name);
        assert_eq!(report.file, c.file);
        // The program must call the kernel exactly as the corpus does.
        let mut spec = vec![c.ret.to_string()];
        spec.extend(c.args.iter().map(|a| a.to_string()));
        assert_eq!(
            report.spec, spec,
            "{}: arguments differ from the corpus",
            c.name
        );
        if let Some(entry) = c.entry {
            assert_eq!(report.entry, entry);
        }
        let outcome = RunOutcome {
            target: Arch::Loongarch64,
            entry: report.entry.clone(),
            ret: report.ret,
            args: report.args.clone(),
            timings: Timings::default(),
        };
        if let Err(e) = (c.check)(&outcome) {
            failures.push(format!("{}: {e}", c.name));
        }
    }
    assert!(failures.is_empty(), "\n{}\n", failures.join("\n"));
    eprintln!(
        "nostd loongarch64: {} kernels linked, run and checked under qemu",
        reports.len()
    );
}
