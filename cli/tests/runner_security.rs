//! Issue 12: the emulated runner elfjit executes under qemu-user is its own. A runner
//! file that passes every structural check (an ELF executable for the machine with
//! `elfjit_far_add`) but was not built by this user's elfjit is never executed: its
//! SHA-256 must match the digest recorded at build time, both files must be the user's
//! alone, and the verified open file is what qemu runs. `cache clear` removes runners;
//! stale build directories are removed, never through a link planted at the cache root;
//! the build writes nothing outside its private work directory. Runs the real binary.

mod support;

use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};
use support::*;

const ADD: &str = "int add(int a, int b) { return a + b; }\n";

struct Setup {
    scratch: Scratch,
    source: PathBuf,
    root: PathBuf,
    marker: PathBuf,
}

impl Setup {
    fn new(tag: &str) -> Setup {
        let scratch = Scratch::new(tag);
        let source = scratch.write("add.c", ADD);
        let root = scratch.join("cache");
        let marker = scratch.join("FORGED-RUNNER-RAN");
        Setup {
            scratch,
            source,
            root,
            marker,
        }
    }

    fn run(&self) -> std::process::Output {
        run(bin()
            .arg("run")
            .arg(&self.source)
            .args(["--emulate", "--target", "x86_64", "--ret", "i32"])
            .args(["--arg", "i32:40", "--arg", "i32:2", "--json"])
            .env("ELFJIT_COMPILER", "spawn")
            .env("ELFJIT_CACHE_DIR", &self.root))
    }

    fn run_ok(&self) -> String {
        let o = self.run();
        assert_eq!(json(&o)["return"], 42);
        assert!(!self.marker.exists(), "the forged runner was executed");
        stderr(&o)
    }

    /// The cached x86_64 runner (not its digest).
    fn runner(&self) -> PathBuf {
        std::fs::read_dir(&self.root)
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| {
                let n = p.file_name().unwrap().to_string_lossy();
                n.starts_with("runner-x86_64-") && !n.contains('.')
            })
            .expect("a cached x86_64 runner")
    }

    /// A static x86_64 program with everything the old structural check looked for
    /// (`ET_EXEC`, the machine, a global `elfjit_far_add`) that creates the marker file.
    fn forged_runner(&self) -> Vec<u8> {
        let c = self.scratch.write(
            "fake.c",
            &format!(
                r#"
static long sys(long n, long a, long b, long c) {{
    long r;
    __asm__ volatile("syscall" : "=a"(r) : "a"(n), "D"(a), "S"(b), "d"(c) : "rcx", "r11", "memory");
    return r;
}}
int elfjit_far_add(int x) {{ return x + 1000; }}
void _start(void) {{
    sys(2, (long)"{}", 01101, 0644); /* open(O_WRONLY|O_CREAT|O_TRUNC) */
    sys(60, 0, 0, 0);                /* exit(0) */
}}
"#,
                self.marker.display()
            ),
        );
        let out = self.scratch.join("fake");
        let st = std::process::Command::new("clang-19")
            .args(["--target=x86_64-unknown-linux-gnu", "-static"])
            .args([
                "-nostdlib",
                "-ffreestanding",
                "-fno-pic",
                "-fuse-ld=lld",
                "-O1",
            ])
            .arg("-o")
            .arg(&out)
            .arg(&c)
            .status()
            .unwrap();
        assert!(st.success());
        std::fs::read(out).unwrap()
    }

    /// Overwrites the cached runner with the forged program, keeping its owner and mode.
    fn plant_forged(&self) -> PathBuf {
        let runner = self.runner();
        std::fs::write(&runner, self.forged_runner()).unwrap();
        chmod(&runner, 0o700);
        runner
    }
}

/// Plants the forged runner with a digest that matches it, as its planter would.
fn plant_forged_with_digest(s: &Setup) -> (PathBuf, PathBuf) {
    let runner = s.plant_forged();
    let digest = digest_path(&runner);
    let hex: String = Sha256::digest(std::fs::read(&runner).unwrap())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    std::fs::write(&digest, format!("{hex}\n")).unwrap();
    (runner, digest)
}

fn digest_path(runner: &Path) -> PathBuf {
    let mut p = runner.as_os_str().to_owned();
    p.push(".sha256");
    PathBuf::from(p)
}

#[test]
fn a_forged_runner_is_never_executed() {
    let s = Setup::new("forged");
    s.run_ok();
    s.plant_forged();
    let err = s.run_ok();
    assert_eq!(lines_with(&err, "digest"), 1, "stderr: {err}");
    // It was rebuilt: the next run uses it quietly.
    assert_eq!(s.run_ok(), "");
}

#[test]
fn a_runner_and_digest_owned_by_another_user_are_refused() {
    let s = Setup::new("owner");
    s.run_ok();
    let (runner, digest) = plant_forged_with_digest(&s);
    chown_to_other(&runner);
    chown_to_other(&digest);
    let err = s.run_ok();
    assert_eq!(lines_with(&err, "not owned by"), 1, "stderr: {err}");
}

#[test]
fn a_runner_directory_owned_by_another_user_is_not_used() {
    let s = Setup::new("dirowner");
    s.run_ok();
    plant_forged_with_digest(&s);
    chown_to_other(&s.root);
    let err = s.run_ok();
    assert_eq!(lines_with(&err, "not owned by"), 1, "stderr: {err}");
}

#[test]
fn cache_clear_removes_runners() {
    let s = Setup::new("clear");
    s.run_ok();
    let runner = s.runner();
    let o = run(bin()
        .args(["cache", "clear"])
        .env("ELFJIT_COMPILER", "spawn")
        .env("ELFJIT_CACHE_DIR", &s.root));
    assert!(o.status.success(), "{}", stderr(&o));
    let said = stdout(&o);
    assert!(said.contains("runner"), "{said}");
    assert!(!runner.exists(), "cache clear kept {}", runner.display());
    assert!(!digest_path(&runner).exists());
    s.run_ok();
}

#[test]
fn stale_build_directories_are_removed() {
    let s = Setup::new("stale");
    std::fs::create_dir_all(&s.root).unwrap();
    let old = SystemTime::now() - Duration::from_secs(2 * 3600);
    let mut stale = Vec::new();
    for name in [".tmp-build-0123456789abcdef", "build.tmp-1234-0"] {
        let d = s.root.join(name);
        std::fs::create_dir_all(&d).unwrap();
        let f = d.join("runner.c");
        std::fs::write(&f, vec![b'x'; 1000]).unwrap();
        for p in [&f, &d] {
            std::fs::File::open(p).unwrap().set_modified(old).unwrap();
        }
        stale.push(d);
    }
    s.run_ok();
    for d in &stale {
        assert!(!d.exists(), "{} survived", d.display());
    }
}

/// Issue 26: without `HOME`, another user's symbolic link planted at `$TMPDIR/elfjit-<uid>`
/// (pointing at a directory of ours) is not used as the runner cache: the stale-looking
/// `*.tmp-*` names there survive the run's cleanup and `cache clear`, nothing is written
/// there, and the runner is built in a private directory that is removed afterwards.
#[test]
fn a_symlink_planted_at_the_per_uid_runner_cache_is_not_followed() {
    let planted = PlantedRoot::new("planted-runner-root");
    let source = planted.scratch.write("add.c", ADD);
    let o = planted.elfjit(&[
        "run".as_ref(),
        source.as_os_str(),
        "--emulate".as_ref(),
        "--target".as_ref(),
        "x86_64".as_ref(),
        "--ret".as_ref(),
        "i32".as_ref(),
        "--arg".as_ref(),
        "i32:40".as_ref(),
        "--arg".as_ref(),
        "i32:2".as_ref(),
        "--json".as_ref(),
    ]);
    assert_eq!(json(&o)["return"], 42);
    planted.assert_victim_untouched();
    let err = stderr(&o);
    assert_eq!(
        lines_with(&err, "not using the runner cache"),
        1,
        "stderr: {err}"
    );
    // The compile server (built in the same directory) refuses it too, at most once.
    assert_eq!(
        lines_with(&err, "is a symbolic link"),
        lines_with(&err, "elfjit: note:")
    );
    assert!(
        lines_with(&err, "compiling with a spawned") <= 1,
        "stderr: {err}"
    );
    // Only the link is left in TMPDIR: the private build directory is gone.
    let left: Vec<_> = std::fs::read_dir(&planted.tmp)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left.len(), 1, "{left:?}");
    let o = planted.elfjit(&["cache".as_ref(), "clear".as_ref()]);
    assert!(!o.status.success(), "cache clear went through the link");
    planted.assert_victim_untouched();
}

/// Issue 26: the runner's build writes nothing in `TMPDIR` (clang given several sources
/// and `-o` keeps their objects there): with `TMPDIR` naming a directory that does not
/// exist the build still succeeds, and with an empty one it stays empty.
#[test]
fn the_runner_build_writes_nothing_in_tmpdir() {
    let s = Setup::new("tmpdir");
    let missing = s.scratch.join("no-such-tmp");
    let empty = s.scratch.join("empty-tmp");
    std::fs::create_dir_all(&empty).unwrap();
    for tmp in [&missing, &empty] {
        let _ = std::fs::remove_dir_all(&s.root);
        let o = run(bin()
            .arg("run")
            .arg(&s.source)
            .args(["--emulate", "--target", "x86_64", "--ret", "i32"])
            .args(["--arg", "i32:40", "--arg", "i32:2", "--json"])
            .env("ELFJIT_CACHE_DIR", &s.root)
            .env("TMPDIR", tmp));
        assert_eq!(json(&o)["return"], 42, "TMPDIR={}", tmp.display());
        s.runner();
    }
    assert!(!missing.exists());
    let left: Vec<_> = std::fs::read_dir(&empty)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "the build left {left:?} in TMPDIR");
}
