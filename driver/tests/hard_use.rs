//! Long and parallel use of the whole stack: memory and mappings stay flat over 100,000
//! load/call/unload cycles; clang's pipes are closed and clang reaped; eight threads compile,
//! load and call at once; a clang that hangs is killed, one that dies is a clear error, and
//! neither leaves a zombie.
//!
//! The tests in this file take one lock: they count this process's file descriptors,
//! mappings and children, which other tests running at the same time would disturb.
// Compiles, /proc counts and signals: Unix-only (the compile side is, docs/os-support.md).
#![cfg(unix)]

use elfjit::clang::{CompileOptions, Compiler, Lang};
use elfjit::{CompileError as Error, Module};
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

mod common;
use common::*;

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn compile(source: &str) -> Vec<u8> {
    Compiler::find()
        .unwrap()
        .compile(source.as_bytes(), &CompileOptions::new(Lang::C, host()))
        .unwrap()
}

/// Resident set size in bytes (from /proc/self/statm).
fn resident_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

fn mapping_count() -> usize {
    std::fs::read_to_string("/proc/self/maps")
        .unwrap()
        .lines()
        .count()
}

fn fd_count() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

/// The number of open descriptors once it has not changed for 300 ms (at most 10 s): a
/// baseline not taken in the middle of background work.
fn settled_fd_count() -> usize {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut count = fd_count();
    let mut since = Instant::now();
    while since.elapsed() < Duration::from_millis(300) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
        let now = fd_count();
        if now != count {
            count = now;
            since = Instant::now();
        }
    }
    count
}

/// What each of this process's descriptors refers to (for a failure's message).
fn fd_targets() -> Vec<String> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc/self/fd").unwrap().flatten() {
        let target = std::fs::read_link(entry.path()).unwrap_or_default();
        out.push(format!(
            "{}: {}",
            entry.file_name().to_string_lossy(),
            target.display()
        ));
    }
    out
}

/// Whether this process has a child that exited and is still unreaped 10 s later: a zombie
/// that stays. Children are found through /proc and never reaped here (a `waitpid(-1)`
/// would take the exit status of a child a background thread of the library is about to
/// wait for: the compile server's start after a process's first compile runs on one), and
/// a zombie that its owner reaps within the grace time is not a leak.
fn has_unreaped_child() -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let zombies = zombie_children();
        if zombies.is_empty() {
            return false;
        }
        if Instant::now() >= deadline {
            eprintln!("unreaped children: {zombies:?}");
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// This process's children that have exited and not been reaped (state `Z`).
fn zombie_children() -> Vec<u32> {
    let mut zombies = Vec::new();
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return zombies;
    };
    for task in tasks.flatten() {
        let children = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
        for pid in children
            .split_whitespace()
            .filter_map(|p| p.parse::<u32>().ok())
        {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            // The state follows the command name's closing parenthesis.
            let state = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().next());
            if state == Some("Z") {
                zombies.push(pid);
            }
        }
    }
    zombies
}

const KERNEL: &str = r#"
static const float weights[8] = {0.5f, 1.5f, 2.5f, 3.5f, 4.5f, 5.5f, 6.5f, 7.5f};
int calls;
float weighted(const float *x, int n) {
    float s = 0;
    calls++;
    for (int i = 0; i < n; i++) s += x[i] * weights[i & 7];
    return s;
}
"#;

#[test]
fn load_call_unload_100k_cycles_keep_memory_flat() {
    let _guard = serial();
    let object = compile(KERNEL);
    let x: Vec<f32> = (0..16).map(|i| i as f32).collect();
    let want: f32 = x
        .iter()
        .enumerate()
        .map(|(i, v)| v * (i % 8) as f32 + v * 0.5)
        .sum();
    let cycle = || {
        let module = Module::load(&object).unwrap();
        // SAFETY: matches `float weighted(const float *, int)`; `module` outlives the call.
        let f: extern "C" fn(*const f32, i32) -> f32 =
            unsafe { std::mem::transmute(module.symbol("weighted").unwrap()) };
        assert_eq!(f(x.as_ptr(), 16), want);
    };
    // The dlopen fallback runs `clang -shared` per load: fewer cycles, same checks.
    let (warm_up, cycles) = if cfg!(feature = "dlopen-fallback") {
        (20, 300)
    } else {
        (5_000, 100_000)
    };
    for _ in 0..warm_up {
        cycle();
    }
    let (rss, maps) = (resident_bytes(), mapping_count());
    for _ in 0..cycles {
        cycle();
    }
    let (rss_after, maps_after) = (resident_bytes(), mapping_count());
    assert!(
        rss_after <= rss + (2 << 20),
        "resident memory grew from {rss} to {rss_after} bytes over {cycles} cycles"
    );
    assert!(
        maps_after <= maps + 2,
        "mappings grew from {maps} to {maps_after}"
    );
}

#[test]
fn compiles_close_their_pipes_and_reap_clang() {
    let _guard = serial();
    let compiler = Compiler::find().unwrap();
    let opts = CompileOptions::new(Lang::C, host());
    compiler.compile(KERNEL.as_bytes(), &opts).unwrap();
    // A process's first compile is a spawned clang and starts the compile server after
    // it, on a thread of its own: the descriptors are counted once that start is over
    // (describe waits for it), so those the server keeps open count as the baseline.
    elfjit::route::describe(&compiler).unwrap();
    let fds = settled_fd_count();
    for i in 0..60 {
        let source = format!("int k{i}(int x) {{ return x * {i}; }}");
        compiler.compile(source.as_bytes(), &opts).unwrap();
        // Failures take the same path: pipes closed, child reaped.
        assert!(compiler.compile(b"int broken(", &opts).is_err());
    }
    // Background work an earlier test started (a server start for one of their fake
    // clangs, under its short deadline) may hold descriptors a moment: a leak is a count
    // that stays above the baseline.
    let deadline = Instant::now() + Duration::from_secs(10);
    while fd_count() > fds && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        fd_count() <= fds,
        "file descriptors leaked: {fds} before, now {:?}",
        fd_targets()
    );
    assert!(!has_unreaped_child(), "a clang process was left unreaped");
}

#[test]
fn eight_threads_compile_load_and_call_concurrently() {
    let _guard = serial();
    let threads: Vec<_> = (0..8)
        .map(|t| {
            std::thread::spawn(move || {
                let compiler = Compiler::find().unwrap();
                for round in 0..6 {
                    let k = t * 100 + round;
                    let source = format!(
                        "static const int table[4] = {{{k}, 1, 2, 3}};\n\
                         int scale(int x) {{ return x * {k} + table[x & 3]; }}"
                    );
                    let object = compiler
                        .compile(source.as_bytes(), &CompileOptions::new(Lang::C, host()))
                        .unwrap();
                    let module = Module::load(&object).unwrap();
                    // SAFETY: matches `int scale(int)`; `module` outlives the calls.
                    let scale: extern "C" fn(i32) -> i32 =
                        unsafe { std::mem::transmute(module.symbol("scale").unwrap()) };
                    for x in 0..64 {
                        let table = [k, 1, 2, 3];
                        assert_eq!(scale(x), x * k + table[(x & 3) as usize]);
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

fn process_alive(pid: &str) -> bool {
    // A zombie still has a /proc entry, so look at its state too.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|stat| stat.split_whitespace().nth(2).is_none_or(|s| s != "Z"))
        .unwrap_or(false)
}

fn wait_for_file(path: &Path) -> String {
    for _ in 0..100 {
        if let Ok(s) = std::fs::read_to_string(path) {
            if s.ends_with('\n') {
                return s;
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("{} never appeared", path.display());
}

#[test]
fn hanging_clang_is_killed_with_its_children_and_reaped() {
    let _guard = serial();
    let scratch = Scratch::new("hang");
    let pids = scratch.0.join("pids");
    // The "clang" starts a grandchild and both hang; the timeout must take down both.
    let hang = scratch.script(
        "hang",
        &format!("sleep 60 & echo \"$$ $!\" > {}; wait", pids.display()),
    );
    let compiler = Compiler::at(&hang)
        .unwrap()
        .with_timeout(Duration::from_millis(500));
    let start = Instant::now();
    let err = compiler
        .compile(b"int x;", &CompileOptions::new(Lang::C, host()))
        .unwrap_err();
    assert!(matches!(err, Error::ClangTimeout { .. }), "{err}");
    assert!(err.to_string().contains("killed"), "{err}");
    assert!(start.elapsed() < Duration::from_secs(10));
    let pids = wait_for_file(&pids);
    std::thread::sleep(Duration::from_millis(200));
    for pid in pids.split_whitespace() {
        assert!(!process_alive(pid), "process {pid} survived the timeout");
    }
    assert!(!has_unreaped_child(), "the killed clang was not reaped");
}

#[test]
fn dying_clang_is_a_clear_error() {
    let _guard = serial();
    let scratch = Scratch::new("die");
    let die = scratch.script(
        "die",
        "cat >/dev/null; echo 'internal compiler error' >&2; kill -SEGV $$",
    );
    let err = Compiler::at(&die)
        .unwrap()
        .compile(b"int x;", &CompileOptions::new(Lang::C, host()))
        .unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, Error::ClangFailed { .. }), "{text}");
    assert!(text.contains("internal compiler error"), "{text}");
    assert!(
        text.contains("signal") || text.contains("SIGSEGV") || text.contains("11"),
        "{text}"
    );
    assert!(!has_unreaped_child());
}
