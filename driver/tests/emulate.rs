//! The emulated runner's build and cache: it builds warnings-clean for every architecture,
//! with `elfjit_far_add` placed where the image layout says, and a corrupt cache entry is
//! rebuilt rather than trusted.

use elfjit::emulate::runner::{load_or_build, qemu_name};
use elfjit::emulate::{FAR_ADDRESS, IMAGE_BASE, IMAGE_LIMIT};
use elfjit::{Arch, Compiler};

fn scratch(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("elfjit-runner-test-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

#[test]
fn runner_builds_clean_for_every_arch_and_is_cached() {
    let compiler = Compiler::find().expect("clang");
    const { assert!(FAR_ADDRESS - (IMAGE_BASE + IMAGE_LIMIT) > 4 << 30) };
    let dir = scratch("all");
    let runners: Vec<_> = Arch::ALL
        .iter()
        .map(|&arch| load_or_build(&compiler, arch, &dir).unwrap_or_else(|e| panic!("{e}")))
        .collect();
    for built in runners {
        let arch = built.arch;
        let log = built.build_log.as_deref().expect("a fresh cache builds");
        assert!(log.trim().is_empty(), "{arch}: clang warned:\n{log}");
        assert_eq!(
            built.symbols.get("elfjit_far_add"),
            Some(&FAR_ADDRESS),
            "{arch}"
        );
        for name in [
            "memcpy",
            "expf",
            "__udivti3",
            "__truncsfbf2",
            "__extendhfsf2",
        ] {
            let a = *built
                .symbols
                .get(name)
                .unwrap_or_else(|| panic!("{arch}: no {name}"));
            // The runner sits just above the image; the far function far away.
            assert!(
                (IMAGE_BASE + IMAGE_LIMIT..FAR_ADDRESS).contains(&a),
                "{arch} {name} {a:#x}"
            );
        }
        // Internals are not exported to kernels.
        assert!(!built.symbols.contains_key("runner_main"), "{arch}");
        // Second time: loaded from the cache, not rebuilt.
        let again = load_or_build(&compiler, arch, &dir).unwrap();
        assert!(again.build_log.is_none(), "{arch}");
        assert_eq!(again.path, built.path);
        // A corrupt entry (here: another architecture's runner, then garbage) is rebuilt.
        let other = if arch == Arch::X86_64 {
            Arch::Aarch64
        } else {
            Arch::X86_64
        };
        let other_runner = load_or_build(&compiler, other, &dir).unwrap();
        std::fs::copy(&other_runner.path, &built.path).unwrap();
        assert!(
            load_or_build(&compiler, arch, &dir)
                .unwrap()
                .build_log
                .is_some(),
            "{arch}"
        );
        std::fs::write(&built.path, b"\x7fELF garbage").unwrap();
        let rebuilt = load_or_build(&compiler, arch, &dir).unwrap();
        assert!(rebuilt.build_log.is_some(), "{arch}");
        assert_eq!(rebuilt.symbols, built.symbols);
        assert!(qemu_name(arch).starts_with("qemu-"));
    }
    // Only runners are left behind: no temporary build directories or files.
    for entry in std::fs::read_dir(&dir).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        assert!(
            name.starts_with("runner-") && !name.contains(".tmp"),
            "{name}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `elfjit run --emulate --json` (and `ELFJIT_EMULATE=1`) prints the native JSON shape with
/// the same values.
#[test]
fn cli_emulated_json_matches_native() {
    let dir = scratch("cli");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("saxpy.c");
    std::fs::write(
        &file,
        "float saxpy(int n, float a, const float *x, float *y) { float s = 0;
         for (int i = 0; i < n; i++) { y[i] = a * x[i] + y[i]; s += y[i]; } return s; }",
    )
    .unwrap();
    let run = |extra: &[&str], env: Option<&str>| -> serde_json::Value {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_elfjit"));
        cmd.arg("run")
            .arg(&file)
            .args(["--target", "x86_64", "--ret", "f32"]);
        cmd.args(["--arg", "i32:4", "--arg", "f32:2", "--arg", "f32[4]=iota"]);
        cmd.args(["--arg", "f32[4]=fill:1", "--json"]).args(extra);
        cmd.env_remove("ELFJIT_EMULATE");
        if let Some(v) = env {
            cmd.env("ELFJIT_EMULATE", v);
        }
        let out = cmd.output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let mut native = run(&[], None);
    for mut emulated in [run(&["--emulate"], None), run(&[], Some("1"))] {
        for v in [&mut native, &mut emulated] {
            let t = v["timings_us"].as_object_mut().unwrap();
            for k in ["compile", "load", "call"] {
                assert!(t[k].as_f64().unwrap() >= 0.0);
                t[k] = 0.into();
            }
        }
        assert_eq!(emulated, native);
        assert_eq!(emulated["return"], 16.0);
    }
    let _ = std::fs::remove_dir_all(&dir);
}
