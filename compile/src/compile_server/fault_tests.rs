//! The pool's lifecycle and faults on real servers: one that dies before it is ready, one
//! that keeps dying, idle servers exiting, the environment a server compiles in, and a
//! source that crashes clang's frontend. Tests that change the process's environment run
//! alone, in a process of their own ([`run_alone`]).

use super::environment::Environment;
use super::pool::{Pool, Served, DEATHS_BEFORE_GIVING_UP, IDLE_TIMEOUT};
use super::*;
use crate::clang::{compile_args, Compiler};
use crate::flags::{CompileOptions, HostInfo, Lang};
use crate::private_dir::random_hex;
use crate::route::{last_compile, CompiledBy};
use elfjit_core::Arch;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

fn compiler() -> Compiler {
    Compiler::find().expect("the compile server tests need clang")
}

fn soon() -> Option<Instant> {
    Some(Instant::now() + Duration::from_secs(120))
}

fn scratch(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("elfjit-{tag}-{}", random_hex().unwrap()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The request a spawned `c` would get for `source` in C for x86-64 at `-O{level}`.
fn request_args(c: &Compiler, level: u8) -> Vec<String> {
    let mut opts = CompileOptions::new(Lang::C, Arch::X86_64);
    opts.opt_level = level;
    let mut args = vec![c.path().to_str().unwrap().to_string()];
    args.extend(compile_args(&opts, HostInfo::current()));
    args
}

fn compile_on(pool: &Pool, c: &Compiler, args: &[String], source: &[u8]) -> Served {
    let req = Request {
        args,
        source,
        want_dependencies: false,
    };
    pool.compile(&req, soon(), c).unwrap()
}

/// What the pool made of a request, for a failed assertion.
fn describe(served: &Served) -> String {
    match served {
        Served::Reply { pid, .. } => format!("server {pid} replied"),
        Served::Spawn { reason, fallback } => format!("spawn (fallback {fallback}): {reason}"),
        Served::SpawnAfterDeaths { reason, .. } => format!("spawn after deaths: {reason}"),
    }
}

/// Runs the ignored test `name` of this binary alone, in a process of its own with `env`
/// added, and returns what it wrote (stdout, then stderr); fails unless it passed.
pub(super) fn run_alone(name: &str, env: &[(&str, &std::ffi::OsStr)]) -> String {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", name, "--ignored", "--nocapture"])
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success() && said.contains("1 passed"), "{said}");
    said
}

#[test]
fn a_server_that_dies_before_it_is_ready_gives_the_pool_up_at_once() {
    // A data limit so small the server cannot map libLLVM's writable segments (or, if
    // the limit lands later, cannot get through LLVM's start): it dies before it says
    // it is ready. The limit is put on right after the spawn (no pre-exec code runs in
    // a child), so a parent descheduled for the server's whole start would see it die
    // on its first request instead: that is the spawned clang's memory-limit error.
    let tiny = 1 << 20;
    let c = compiler().with_memory_limit(Some(tiny));
    let limits = Limits {
        memory_limit: Some(tiny),
        ..Limits::default()
    };
    let bin = ServerBinary::for_compiler(&compiler()).unwrap();
    let pool = Pool::new(bin, limits, Environment::current(), 2, IDLE_TIMEOUT);
    let args = request_args(&c, 0);
    let req = Request {
        args: &args,
        source: b"int f(void) { return 1; }\n",
        want_dependencies: false,
    };
    let mut gave_up = 0;
    for _ in 0..2 {
        match pool.compile(&req, soon(), &c) {
            Ok(Served::Spawn { reason, fallback }) => {
                assert!(fallback, "{reason}");
                assert!(reason.contains("could not be started"), "{reason}");
                gave_up += 1;
            }
            Err(crate::Error::ClangMemoryLimit { .. }) => {}
            Ok(other) => panic!("{}", describe(&other)),
            Err(e) => panic!("{e}"),
        }
    }
    // The second request at the latest finds the pool given up, without a start.
    assert!(gave_up >= 1);
    assert!(pool.pids().is_empty(), "{:?}", pool.pids());
}

/// A C source that keeps clang busy for seconds at -O2.
fn slow_source() -> String {
    let mut s = String::new();
    for i in 0..400 {
        s += &format!(
            "double k{i}(double *a, int n) {{ double t = 0; for (int i = 0; i < n; i++) \
             for (int j = 0; j < n; j++) t += a[i] * a[j] / (a[i + j] + {i}.5); return t; }}\n"
        );
    }
    s
}

#[test]
fn a_server_that_keeps_dying_is_given_up_and_its_requests_spawn() {
    let c = compiler();
    let bin = ServerBinary::for_compiler(&c).unwrap();
    let pool = Pool::new(
        bin,
        Limits::default(),
        Environment::current(),
        1,
        IDLE_TIMEOUT,
    );
    let args = request_args(&c, 2);
    let slow = slow_source();
    let stop = AtomicBool::new(false);
    /// Stops the killer however the requests end (a failed assertion included).
    struct StopOnDrop<'a>(&'a AtomicBool);
    impl Drop for StopOnDrop<'_> {
        fn drop(&mut self) {
            self.0.store(true, Ordering::Release);
        }
    }
    std::thread::scope(|s| {
        let _stop = StopOnDrop(&stop);
        // Kills every server the pool has once it is ready (its pid is listed then).
        s.spawn(|| {
            while !stop.load(Ordering::Acquire) {
                for pid in pool.pids() {
                    let pid = rustix::process::Pid::from_raw(pid as i32).unwrap();
                    let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        });
        for n in 1..=DEATHS_BEFORE_GIVING_UP {
            match compile_on(&pool, &c, &args, slow.as_bytes()) {
                Served::SpawnAfterDeaths { reason, last } => {
                    assert!(reason.contains("failed on this request twice"), "{reason}");
                    assert_eq!(reason.matches("signal 9").count(), 2, "{reason}");
                    // What the route does once the spawned clang has compiled it (this
                    // is valid C): the deaths count. The request that gives the pool up
                    // says so (the route makes it the process's note).
                    let gave_up = pool.judge_failures(true, &last);
                    assert_eq!(
                        gave_up.is_some(),
                        n == DEATHS_BEFORE_GIVING_UP,
                        "{gave_up:?}"
                    );
                }
                other => panic!("{}", describe(&other)),
            }
        }
    });
    // Given up: later requests spawn, and no server is started.
    match compile_on(&pool, &c, &args, b"int f(void) { return 1; }\n") {
        Served::Spawn { reason, fallback } => {
            assert!(fallback, "{reason}");
            let why = format!("failed on {DEATHS_BEFORE_GIVING_UP} requests in a row");
            assert!(reason.contains(&why), "{reason}");
        }
        other => panic!("{}", describe(&other)),
    }
    assert!(pool.pids().is_empty(), "{:?}", pool.pids());
}

#[test]
fn idle_servers_exit_and_are_reaped_after_the_idle_timeout() {
    run_alone(
        "compile_server::fault_tests::an_idle_server_exits",
        &[
            ("ELFJIT_COMPILE_SERVER_IDLE_SECS", "1".as_ref()),
            ("ELFJIT_COMPILER", "server".as_ref()),
        ],
    );
}

#[test]
#[ignore = "needs a 1 s idle timeout: run by idle_servers_exit_and_are_reaped_after_the_idle_timeout"]
fn an_idle_server_exits() {
    let c = compiler();
    let opts = CompileOptions::new(Lang::C, Arch::X86_64);
    c.compile(b"int f(void) { return 1; }\n", &opts).unwrap();
    let Some(CompiledBy::Server { pid, .. }) = last_compile() else {
        panic!("{:?}", last_compile());
    };
    assert_eq!(crate::route::server_pids(), vec![pid]);
    // Gone from /proc: exited and reaped (a zombie keeps its entry). Far more than the
    // timeout is allowed; the default (60 s) would not do.
    let proc = PathBuf::from(format!("/proc/{pid}"));
    let until = Instant::now() + Duration::from_secs(30);
    while proc.exists() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!proc.exists(), "server {pid} is still there");
    assert!(crate::route::server_pids().is_empty());
    // The next compile starts another.
    c.compile(b"int f(void) { return 2; }\n", &opts).unwrap();
    let Some(CompiledBy::Server { pid: next, .. }) = last_compile() else {
        panic!("{:?}", last_compile());
    };
    assert_ne!(next, pid);
}

#[test]
fn idle_timeouts() {
    use super::pool::idle_timeout_from;
    use std::ffi::OsStr;
    assert_eq!(idle_timeout_from(None).unwrap(), IDLE_TIMEOUT);
    assert_eq!(
        idle_timeout_from(Some(OsStr::new(" 5 "))).unwrap(),
        Duration::from_secs(5)
    );
    for bad in ["0", "-1", "1.5", "", "86401", "soon"] {
        let e = idle_timeout_from(Some(OsStr::new(bad)))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(&format!("ELFJIT_COMPILE_SERVER_IDLE_SECS `{bad}`")),
            "{e}"
        );
    }
}

#[test]
fn servers_see_the_environment_a_spawned_clang_would() {
    run_alone(
        "compile_server::fault_tests::compiles_in_the_current_environment",
        &[("ELFJIT_COMPILER", "server".as_ref())],
    );
}

#[test]
#[ignore = "changes the environment: run alone by servers_see_the_environment_a_spawned_clang_would"]
fn compiles_in_the_current_environment() {
    let c = compiler();
    let opts = CompileOptions::new(Lang::C, Arch::X86_64);
    c.compile(b"int f(void) { return 1; }\n", &opts).unwrap();
    assert!(matches!(last_compile(), Some(CompiledBy::Server { .. })));
    // A header reachable only through CPATH, set after the server started.
    let dir = scratch("cpath");
    std::fs::write(dir.join("only_on_cpath.h"), "#define K 7\n").unwrap();
    std::env::set_var("CPATH", &dir);
    let source = b"#include <only_on_cpath.h>\nint f(void) { return K; }\n";
    let object = c.compile(source, &opts).unwrap();
    assert!(
        matches!(last_compile(), Some(CompiledBy::Server { .. })),
        "{:?}",
        last_compile()
    );
    let args = compile_args(&opts, HostInfo::current());
    assert!(object == c.compile_spawned(args, source, false).unwrap().0);
    // A variable only clang's own main applies: spawned.
    std::env::set_var("CCC_OVERRIDE_OPTIONS", "+-DEXTRA=5");
    c.compile(b"int f(void) { return EXTRA; }\n", &opts)
        .unwrap();
    match last_compile() {
        Some(CompiledBy::Spawned { reason }) => {
            assert!(reason.contains("CCC_OVERRIDE_OPTIONS"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
    std::env::remove_var("CCC_OVERRIDE_OPTIONS");
    std::env::remove_var("CPATH");
    std::fs::remove_dir_all(&dir).unwrap();
    // Back to the first environment: the first pool's server.
    let e = c.compile(source, &opts).unwrap_err();
    assert!(matches!(e, crate::Error::ClangFailed { .. }), "{e}");
    assert!(matches!(last_compile(), Some(CompiledBy::Server { .. })));
}

const CRASHES_CLANG: &[u8] = b"#pragma clang __debug crash\nint f(void) { return 1; }\n";

#[test]
fn a_source_that_crashes_clang_is_clangs_error_on_both_paths_and_leaves_no_files() {
    let tmp = scratch("crash-tmp");
    run_alone(
        "compile_server::fault_tests::crashing_clang",
        &[
            ("ELFJIT_COMPILER", "server".as_ref()),
            ("TMPDIR", tmp.as_os_str()),
        ],
    );
    let left: Vec<_> = std::fs::read_dir(&tmp)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    std::fs::remove_dir_all(&tmp).unwrap();
    assert!(left.is_empty(), "crash reproducers left: {left:?}");
}

/// The error's kind and its last line (clang's verdict; the stack dump above it differs
/// from run to run).
fn crash_verdict(e: &crate::Error) -> String {
    match e {
        crate::Error::ClangFailed { stderr, .. } => stderr
            .trim_end()
            .lines()
            .last()
            .unwrap_or_default()
            .to_string(),
        other => panic!("not clang's failure: {other}"),
    }
}

#[test]
#[ignore = "needs its own TMPDIR: run by a_source_that_crashes_clang_is_clangs_error_on_both_paths_and_leaves_no_files"]
fn crashing_clang() {
    let c = compiler();
    let opts = CompileOptions::new(Lang::C, Arch::X86_64);
    let through_server = c.compile(CRASHES_CLANG, &opts).unwrap_err();
    match last_compile() {
        Some(CompiledBy::Spawned { reason }) => {
            assert!(reason.contains("failed on this request twice"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
    let args = compile_args(&opts, HostInfo::current());
    let spawned = c.compile_spawned(args, CRASHES_CLANG, false).unwrap_err();
    let verdict = crash_verdict(&spawned);
    assert!(
        verdict.contains("clang frontend command failed"),
        "{spawned}"
    );
    assert_eq!(crash_verdict(&through_server), verdict);
    // More crashing sources in a row than the deaths that give a pool up: the source's
    // fault each time (the spawned clang crashes too), so none counts.
    for _ in 1..DEATHS_BEFORE_GIVING_UP + 1 {
        let again = c.compile(CRASHES_CLANG, &opts).unwrap_err();
        assert_eq!(crash_verdict(&again), verdict);
    }
    // The pool serves on.
    c.compile(b"int f(void) { return 1; }\n", &opts).unwrap();
    assert!(
        matches!(last_compile(), Some(CompiledBy::Server { .. })),
        "{:?}",
        last_compile()
    );
}

#[test]
fn a_server_that_cannot_start_means_one_note_and_no_hang() {
    let said = run_alone(
        "compile_server::fault_tests::compiles_where_no_server_can_start",
        &[("ELFJIT_COMPILE_MEMORY", "1M".as_ref())],
    );
    let notes: Vec<&str> = said
        .lines()
        .filter(|l| l.starts_with("elfjit: note:"))
        .collect();
    assert_eq!(notes.len(), 1, "{said}");
    assert!(notes[0].contains("could not be started"), "{said}");
}

#[test]
#[ignore = "needs a 1 MiB compiler memory limit: run by a_server_that_cannot_start_means_one_note_and_no_hang"]
fn compiles_where_no_server_can_start() {
    let c = compiler();
    assert_eq!(c.memory_limit(), Some(1 << 20));
    // Waits for the verdict on the first server: it died before it was ready.
    match crate::route::describe(&c).unwrap() {
        CompiledBy::Spawned { reason } => {
            assert!(reason.contains("could not be started"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
    // Every compile spawns clang (which cannot run in 1 MiB either: a clear error).
    let opts = CompileOptions::new(Lang::C, Arch::X86_64);
    for k in 0..3 {
        let source = format!("int f(void) {{ return {k}; }}\n");
        let e = c.compile(source.as_bytes(), &opts).unwrap_err();
        assert!(
            matches!(
                e,
                crate::Error::ClangFailed { .. } | crate::Error::ClangMemoryLimit { .. }
            ),
            "{e}"
        );
        match last_compile() {
            Some(CompiledBy::Spawned { reason }) => {
                assert!(reason.contains("could not be started"), "{reason}")
            }
            other => panic!("{other:?}"),
        }
    }
}
