//! `elfjit run --emulate`: the emulated runner through the real binary.

fn scratch(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!(
        "elfjit-cli-emulate-test-{}-{tag}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&d);
    d
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
            // Each run's own compile server (or spawned clang) compiled it.
            v.as_object_mut().unwrap().remove("compiler");
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
