//! The compile cache through the `elfjit` binary: concurrent writer processes, `--cache`
//! (native and emulated targets) and `cache clear` / `cache dir`.
//! Every test uses its own directory under cargo's scratch space and removes it.

use elfjit::cache::clear_dir;
use elfjit::Arch;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

mod support;
use support::*;

fn run_cli(cache_dir: &Path, args: &[&str]) -> std::process::Output {
    bin()
        .args(args)
        .env("ELFJIT_COMPILER", "spawn")
        .env("ELFJIT_CACHE_DIR", cache_dir)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// `PATH` with `dir` in front.
fn path_with(dir: &Path) -> std::ffi::OsString {
    let mut dirs = vec![dir.to_path_buf()];
    dirs.extend(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    ));
    std::env::join_paths(dirs).unwrap()
}

#[test]
fn processes_writing_the_same_entries_at_once() {
    let dir = Scratch::new("procs");
    let cache_dir = dir.0.join("cache");
    let files: Vec<PathBuf> = (0..3)
        .map(|k| {
            let p = dir.0.join(format!("k{k}.c"));
            std::fs::write(&p, add_source(200 + k)).unwrap();
            p
        })
        .collect();
    // Four processes at once, each compiling all three kernels through the cache.
    let children: Vec<_> = (0..4)
        .map(|_| {
            let script = files
                .iter()
                .map(|f| {
                    format!(
                        "{} run {} --ret i32 --arg i32:1 --arg i32:1 --cache --json || exit 1",
                        env!("CARGO_BIN_EXE_elfjit"),
                        f.display()
                    )
                })
                .collect::<Vec<_>>()
                .join("; ");
            Command::new("sh")
                .arg("-c")
                .arg(script)
                .env("ELFJIT_COMPILER", "spawn")
                .env("ELFJIT_CACHE_DIR", &cache_dir)
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for child in children {
        let o = child.wait_with_output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        for (k, line) in String::from_utf8_lossy(&o.stdout).lines().enumerate() {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            assert_eq!(v["return"], 202 + k as i64, "{line}");
        }
    }
    // Every entry is whole: a later run of each is a hit with the right answer.
    for (k, f) in files.iter().enumerate() {
        let v = json(&run_cli(
            &cache_dir,
            &[
                "run",
                f.to_str().unwrap(),
                "--ret",
                "i32",
                "--arg",
                "i32:1",
                "--arg",
                "i32:1",
                "--cache",
                "--json",
            ],
        ));
        assert_eq!(v["cache"], "hit");
        assert_eq!(v["return"], 202 + k as i64);
    }
}

#[test]
fn cli_cache_field_override_and_clear() {
    let dir = Scratch::new("cli");
    let cache_dir = dir.0.join("elsewhere");
    let src = dir.0.join("add.c");
    std::fs::write(&src, add_source(0)).unwrap();
    let src = src.to_str().unwrap();
    let args = [
        "run", src, "--ret", "i32", "--arg", "i32:2", "--arg", "i32:40", "--json",
    ];
    // The real clang behind a wrapper that logs each start, so a hit can be seen to run
    // no clang at all.
    // (Found as `clang` in PATH: an ELFJIT_CLANG is checked to run in every process.)
    let log = dir.0.join("clang-starts.log");
    let bin_dir = dir.0.join("bin");
    std::fs::create_dir(&bin_dir).unwrap();
    let wrapper = bin_dir.join("clang");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\necho \"$@\" >> '{}'\nexec '{}' \"$@\"\n",
            log.display(),
            compiler().path().display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(
        &wrapper,
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    )
    .unwrap();
    // Compiles only: with the dlopen fallback every load also links with `clang -shared`.
    let starts = || {
        std::fs::read_to_string(&log).map_or(0, |t| {
            t.lines()
                .filter(|l| l.split(' ').any(|a| a == "-c"))
                .count()
        })
    };
    let run_logged = |args: &[&str]| {
        bin()
            .args(args)
            .env("ELFJIT_COMPILER", "spawn")
            .env("ELFJIT_CACHE_DIR", &cache_dir)
            .env_remove("ELFJIT_CLANG")
            .env("PATH", path_with(&bin_dir))
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    // Without --cache: no "cache" field and nothing written.
    let v = json(&run_logged(&args));
    assert!(v.get("cache").is_none(), "{v}");
    assert!(!cache_dir.join("objects").exists());
    let mut cached = args.to_vec();
    cached.push("--cache");
    let v = json(&run_logged(&cached));
    assert_eq!(v["cache"], "miss");
    assert_eq!(v["return"], 42);
    let before_hit = starts();
    assert!(
        before_hit >= 2,
        "clang ran for both compiles ({before_hit} starts)"
    );
    let v = json(&run_logged(&cached));
    assert_eq!(v["cache"], "hit");
    assert_eq!(v["return"], 42);
    assert_eq!(
        starts(),
        before_hit,
        "a hit in a new process compiles nothing: {}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    // The entries are under $ELFJIT_CACHE_DIR/objects.
    let objects = cache_dir.join("objects");
    assert_eq!(
        cache_entries(&objects).len(),
        2,
        "the object and clang's version"
    );
    let o = run_cli(&cache_dir, &["cache", "dir"]);
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        objects.to_str().unwrap()
    );
    // Something that is not ours survives `cache clear`.
    std::fs::write(objects.join("README"), "keep").unwrap();
    let o = run_cli(&cache_dir, &["cache", "clear"]);
    assert!(o.status.success());
    let said = String::from_utf8_lossy(&o.stdout);
    assert!(said.starts_with("removed 2 cached objects ("), "{said}");
    assert!(said.contains(objects.to_str().unwrap()), "{said}");
    assert!(cache_entries(&objects).is_empty());
    assert!(objects.join("README").exists());
    let v = json(&run_cli(&cache_dir, &cached));
    assert_eq!(v["cache"], "miss");
    // Clearing an empty or missing directory is fine.
    assert_eq!(clear_dir(&dir.0.join("none")).unwrap().files, 0);
    let o = run_cli(&dir.0.join("none"), &["cache", "clear"]);
    assert!(String::from_utf8_lossy(&o.stdout).starts_with("removed 0 cached objects"));
    let o = run_cli(&cache_dir, &["cache", "bogus"]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn cli_cache_for_an_emulated_target() {
    let foreign = Arch::ALL.into_iter().find(|a| *a != host()).unwrap();
    let dir = Scratch::new("emu");
    // Share the runner cache the other emulated tests use, keep objects separate.
    let cache_dir = dir.0.join("cache");
    let src = dir.0.join("add.c");
    std::fs::write(&src, add_source(5)).unwrap();
    let args = [
        "run",
        src.to_str().unwrap(),
        "--target",
        foreign.name(),
        "--ret",
        "i32",
        "--arg",
        "i32:2",
        "--arg",
        "i32:3",
        "--cache",
        "--json",
    ];
    // A missing qemu-user is a failure (./scripts/setup installs it), not a skip.
    let v = json(&run_cli(&cache_dir, &args));
    assert_eq!(v["cache"], "miss");
    assert_eq!(v["return"], 10);
    let v = json(&run_cli(&cache_dir, &args));
    assert_eq!(v["cache"], "hit");
    assert_eq!(v["target"], foreign.name());
    assert_eq!(v["return"], 10);
}
