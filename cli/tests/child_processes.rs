//! Issue 12: every child elfjit starts (clang on a pipe, the runner build, the emulated
//! run under qemu) has a deadline that holds even when a grandchild keeps a pipe open,
//! is killed with its process group, is read with bounded buffers, and is reaped; a
//! deadline too large to represent is no deadline; a failed spawn is an error, never a
//! panic. Runs the real binary (with fake clang and qemu scripts where a misbehaving
//! child is needed).

mod support;

use elfjit::clang::{CompileOptions, Compiler, Lang};
use elfjit::Arch;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use support::*;

const ADD: &str = "int add(int a, int b) { return a + b; }\n";

/// `elfjit run add.c --emulate` with the shared runner cache and `qemu` as ELFJIT_QEMU.
fn emulated(
    scratch: &Scratch,
    qemu: Option<&PathBuf>,
    timeout: &str,
) -> (std::process::Output, Duration) {
    let src = scratch.write("add.c", ADD);
    let mut cmd = bin();
    cmd.arg("run")
        .arg(&src)
        .args(["--emulate", "--target", "x86_64", "--ret", "i32"])
        .args(["--arg", "i32:40", "--arg", "i32:2", "--json"])
        .env("ELFJIT_COMPILER", "spawn")
        .env("ELFJIT_CACHE_DIR", shared_runner_cache())
        .env("ELFJIT_RUN_TIMEOUT", timeout);
    if let Some(q) = qemu {
        cmd.env("ELFJIT_QEMU", q);
    }
    // Build (or load) the runner first, so the timing below is the call alone.
    let warm = run(bin()
        .arg("run")
        .arg(&src)
        .args(["--emulate", "--target", "x86_64", "--ret", "i32", "--json"])
        .args(["--arg", "i32:1", "--arg", "i32:1"])
        .env("ELFJIT_COMPILER", "spawn")
        .env("ELFJIT_CACHE_DIR", shared_runner_cache()));
    assert!(warm.status.success(), "{}", stderr(&warm));
    let start = Instant::now();
    let (o, killed) = run_with_watchdog(&mut cmd, Duration::from_secs(60));
    assert!(!killed, "elfjit did not return; stderr: {}", stderr(&o));
    (o, start.elapsed())
}

#[test]
fn a_hanging_runner_and_its_children_are_killed_at_the_deadline() {
    let s = Scratch::new("hang");
    let pids = s.join("pids");
    let qemu = s.script(
        "qemu",
        &format!("sleep 30 & echo \"$$ $!\" > {}; wait", pids.display()),
    );
    let (o, took) = emulated(&s, Some(&qemu), "2");
    let err = stderr(&o);
    assert!(!o.status.success());
    assert!(err.contains("did not finish within 2"), "{err}");
    assert!(took < Duration::from_secs(10), "took {took:?}");
    assert_all_gone(&pids);
}

/// Every process whose pid the fake wrote to `pids` is gone (given a moment to die).
fn assert_all_gone(pids: &std::path::Path) {
    let pids = wait_for_line(pids);
    std::thread::sleep(Duration::from_millis(200));
    for pid in pids.split_whitespace() {
        assert!(!process_alive(pid), "process {pid} was left behind");
    }
}

#[test]
fn a_grandchild_holding_the_pipes_does_not_delay_the_result() {
    let s = Scratch::new("grandchild");
    let pid = s.join("pid");
    // In the runner's process group: killed with it once the runner has exited.
    let qemu = s.script(
        "qemu",
        &format!("sleep 30 & echo \"$!\" > {}; exit 0", pid.display()),
    );
    let (o, took) = emulated(&s, Some(&qemu), "60");
    assert!(stderr(&o).contains("no reply"), "{}", stderr(&o));
    assert!(took < Duration::from_secs(10), "took {took:?}");
    assert_all_gone(&pid);

    // Escaped into its own session: it cannot be killed with the group, and must not be
    // waited for either; the CLI adopted it (a child subreaper) and killed it at its end.
    let s = Scratch::new("escaped");
    let pid = s.join("pid");
    let qemu = s.script(
        "qemu",
        &format!("setsid sleep 30 & echo \"$!\" > {}; exit 0", pid.display()),
    );
    let (o, took) = emulated(&s, Some(&qemu), "60");
    assert!(stderr(&o).contains("no reply"), "{}", stderr(&o));
    assert!(took < Duration::from_secs(10), "took {took:?}");
    assert_all_gone(&pid);
}

#[test]
fn a_timeout_too_large_to_represent_is_no_deadline() {
    for t in ["1e20", "inf"] {
        let s = Scratch::new("bigtimeout");
        let (o, _) = emulated(&s, None, t);
        assert_eq!(json(&o)["return"], 42, "ELFJIT_RUN_TIMEOUT={t}");
    }
    let c = Compiler::find().expect("clang").with_timeout(Duration::MAX);
    let obj = c
        .compile(
            ADD.as_bytes(),
            &CompileOptions::new(Lang::C, Arch::host().unwrap()),
        )
        .unwrap();
    assert_eq!(&obj[..4], b"\x7fELF");
}

/// A fake clang: answers `--version`, otherwise runs `body`.
fn fake_clang(s: &Scratch, body: &str) -> PathBuf {
    s.script(
        "clang",
        &format!("if [ \"$1\" = --version ]; then echo 'fake clang 1'; exit 0; fi\n{body}"),
    )
}

/// Runs `elfjit run add.c` with `clang` under a 4 GB address-space limit, so that an
/// unbounded reader fails fast instead of eating the machine.
fn with_clang(s: &Scratch, clang: &PathBuf) -> (std::process::Output, Duration) {
    let src = s.write("add.c", ADD);
    let start = Instant::now();
    let o = run(std::process::Command::new("sh")
        .arg("-c")
        .arg("ulimit -v 4000000; exec \"$@\"")
        .arg("sh")
        .arg(env!("CARGO_BIN_EXE_elfjit"))
        .arg("run")
        .arg(&src)
        .env("ELFJIT_CLANG", clang)
        .stdin(std::process::Stdio::null()));
    (o, start.elapsed())
}

#[test]
fn an_endless_object_is_cut_off_at_the_limit() {
    let s = Scratch::new("flood-out");
    let pid = s.join("pid");
    let clang = fake_clang(
        &s,
        &format!("echo $$ > {}; exec cat /dev/zero", pid.display()),
    );
    let (o, _) = with_clang(&s, &clang);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("more than") && err.contains("bytes of object"),
        "{err}"
    );
    let pid = wait_for_line(&pid);
    assert!(
        !process_alive(pid.trim()),
        "the flooding clang was not killed"
    );
}

#[test]
fn endless_diagnostics_are_cut_off_keeping_the_head() {
    let s = Scratch::new("flood-err");
    let clang = fake_clang(
        &s,
        "echo 'error: the first line'>&2; exec yes 'more noise' >&2",
    );
    let (o, took) = with_clang(&s, &clang);
    let err = stderr(&o);
    let head: String = err.chars().take(2000).collect();
    assert_eq!(o.status.code(), Some(1), "{head}");
    assert!(err.contains("error: the first line"), "{head}");
    assert!(err.contains("diagnostics"), "{head}");
    assert!(err.len() < 8 << 20, "{} bytes of stderr", err.len());
    assert!(took < Duration::from_secs(60));
}

/// With the number of processes capped, a failed spawn is an error; with just enough
/// for clang, the compile succeeds (no helper threads are needed to talk to clang). The
/// dlopen-fallback's `clang -shared` starts lld as well: it needs one more.
#[test]
fn failed_spawns_are_errors_not_panics() {
    let s = Scratch::new("nproc");
    chmod(s.path(), 0o755);
    let src = s.write("add.c", ADD);
    chmod(&src, 0o644);
    let go = |nproc: &str| {
        run(std::process::Command::new("setpriv")
            .args([
                "--reuid",
                "65534",
                "--regid",
                "65534",
                "--clear-groups",
                "--",
            ])
            .args(["prlimit", &format!("--nproc={nproc}"), "--"])
            .arg(env!("CARGO_BIN_EXE_elfjit"))
            .arg("run")
            .arg(&src)
            .args(["--ret", "i32", "--arg", "i32:1", "--arg", "i32:2", "--json"])
            .env_remove("ELFJIT_CACHE_DIR")
            // About clang's spawn: no compile server (nor its note) in between.
            .env("ELFJIT_COMPILER", "spawn")
            .stdin(std::process::Stdio::null()))
    };
    let o = go("1");
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.starts_with("elfjit: error: cannot start"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    let enough = if cfg!(feature = "dlopen-fallback") {
        // `clang -shared` starts lld, which starts threads of its own: too few
        // processes is lld's error, reported cleanly.
        for n in ["2", "3"] {
            let o = go(n);
            let err = stderr(&o);
            assert!(
                o.status.success() || err.starts_with("elfjit: error: "),
                "{err}"
            );
            assert!(!err.contains("panicked"), "{err}");
        }
        // RLIMIT_NPROC counts every thread of the uid on the machine, so "enough" has room
        // for whatever else runs as nobody at the same time.
        &["4096"][..]
    } else {
        &["2", "3"][..]
    };
    for n in enough {
        let o = go(n);
        assert_eq!(json(&o)["return"], 3, "nproc {n}");
    }
}

/// Children run in their own process groups, which the terminal's Ctrl-C does not reach:
/// the CLI kills them itself when it is interrupted (and everything else descending from
/// it, such as a process that left its group with setsid), then dies of the signal.
#[test]
fn an_interrupted_cli_takes_its_children_down() {
    let s = Scratch::new("interrupt");
    let pids = s.join("pids");
    // A child in the group, and one that left it (setsid): both go down with elfjit.
    let qemu = s.script(
        "qemu",
        &format!(
            "setsid sleep 60 & detached=$!; sleep 60 & echo \"$$ $! $detached\" > {}; wait",
            pids.display()
        ),
    );
    let src = s.write("add.c", ADD);
    // The runner first (built or loaded), so the child below is the emulated call.
    let warm = run(bin()
        .arg("run")
        .arg(&src)
        .args(["--emulate", "--target", "x86_64", "--ret", "i32", "--json"])
        .args(["--arg", "i32:1", "--arg", "i32:1"])
        .env("ELFJIT_COMPILER", "spawn")
        .env("ELFJIT_CACHE_DIR", shared_runner_cache()));
    assert!(warm.status.success(), "{}", stderr(&warm));
    let mut child = bin()
        .arg("run")
        .arg(&src)
        .args(["--emulate", "--target", "x86_64", "--ret", "i32"])
        .args(["--arg", "i32:1", "--arg", "i32:1"])
        .env("ELFJIT_COMPILER", "spawn")
        .env("ELFJIT_CACHE_DIR", shared_runner_cache())
        .env("ELFJIT_QEMU", &qemu)
        .env("ELFJIT_RUN_TIMEOUT", "120")
        .spawn()
        .unwrap();
    wait_for_line(&pids);
    // SAFETY: kill(2) on our own unreaped child.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
    let start = Instant::now();
    let status = child.wait().unwrap();
    assert!(start.elapsed() < Duration::from_secs(10));
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(libc::SIGINT), "{status:?}");
    assert_all_gone(&pids);
}

/// An aarch64 kernel that forks (qemu-user forks itself) and whose child calls setsid()
/// and sleeps: the child leaves the runner's process group, so killing the group misses
/// it. Returns the child's pid (qemu-user's pids are the host's).
const DETACHING_KERNEL: &str = r#"
static long sys(long n, long a, long b) {
    register long x8 __asm__("x8") = n;
    register long x0 __asm__("x0") = a;
    register long x1 __asm__("x1") = b;
    __asm__ volatile("svc 0" : "+r"(x0) : "r"(x8), "r"(x1) : "memory");
    return x0;
}
long detach(void) {
    long pid = sys(220 /* clone */, 17 /* SIGCHLD: a fork */, 0);
    if (pid == 0) {
        sys(157 /* setsid */, 0, 0);
        struct { long sec, nsec; } t = {30, 0};
        sys(101 /* nanosleep */, (long)&t, 0);
        sys(93 /* exit */, 0, 0);
    }
    return pid;
}
"#;

/// The processes of this user whose environment holds `marker`.
fn processes_with(marker: &str) -> Vec<String> {
    let needle = marker.as_bytes();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.parse::<u32>().is_ok())
        })
        .filter(|e| {
            std::fs::read(e.path().join("environ"))
                .is_ok_and(|env| env.windows(needle.len()).any(|w| w == needle))
        })
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|pid| process_alive(pid))
        .collect()
}

/// Issue 26: a process the kernel detached with setsid() is adopted by the CLI (a child
/// subreaper) and killed when it exits: no qemu process of the run is left.
#[test]
fn a_detached_emulated_process_does_not_outlive_the_cli() {
    let s = Scratch::new("detach");
    let src = s.write("detach.c", DETACHING_KERNEL);
    let marker = format!(
        "ELFJIT_TEST_DETACH_MARKER={}-{:?}",
        std::process::id(),
        Instant::now()
    );
    let (name, value) = marker.split_once('=').unwrap();
    let (o, killed) = run_with_watchdog(
        bin()
            .arg("run")
            .arg(&src)
            .args([
                "--target", "aarch64", "--entry", "detach", "--ret", "i64", "--json",
            ])
            .env("ELFJIT_CACHE_DIR", shared_runner_cache())
            .env(name, value),
        Duration::from_secs(120),
    );
    assert!(!killed, "elfjit did not return; stderr: {}", stderr(&o));
    assert!(o.status.success(), "{}", stderr(&o));
    let child = json(&o)["return"].as_i64().unwrap();
    assert!(child > 0, "the fork failed: {child}");
    let left = processes_with(&marker);
    for pid in &left {
        let _ = std::process::Command::new("kill")
            .args(["-9", pid])
            .status();
    }
    assert!(
        left.is_empty() && !process_alive(&child.to_string()),
        "left behind: {left:?} (the detached child was {child})"
    );
}

/// Issue 26: ELFJIT_COMPILE_MEMORY that is not a size is an error naming it, before
/// clang runs; a limit clang passes is an error naming the limit.
#[test]
fn the_compiler_memory_limit_is_set_by_the_environment() {
    let s = Scratch::new("compile-memory");
    let src = s.write("add.c", ADD);
    let args = ["--arg", "i32:40", "--arg", "i32:2", "--ret", "i32"];
    let o = run(bin()
        .arg("run")
        .arg(&src)
        .args(args)
        .env("ELFJIT_COMPILE_MEMORY", "lots"));
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("bad ELFJIT_COMPILE_MEMORY `lots`: expected a size"),
        "{}",
        stderr(&o)
    );
    for ok in ["512M", "0", ""] {
        let o = run(bin()
            .arg("run")
            .arg(&src)
            .args(args)
            .env("ELFJIT_COMPILE_MEMORY", ok));
        assert!(o.status.success(), "{ok}: {}", stderr(&o));
    }
    let huge = s.write(
        "huge.c",
        "asm(\".fill 268435456\");\nint f(void) { return 1; }\n",
    );
    let o = run(bin()
        .arg("run")
        .arg(&huge)
        .args(["--ret", "i32"])
        .env("ELFJIT_COMPILE_MEMORY", "128M"));
    assert!(
        stderr(&o)
            .contains("exceeded the compiler memory limit of 128 MiB (ELFJIT_COMPILE_MEMORY)"),
        "{}",
        stderr(&o)
    );
}
