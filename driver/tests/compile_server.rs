//! The compile server pool on real clang and real servers (issue 27): concurrent compiles,
//! deadlines, and what compiled each kernel. `ELFJIT_COMPILER=server` throughout, so a
//! compile that quietly spawned clang fails the test instead of passing it.
// Compile servers are clang processes: the compile side is Unix-only (docs/os-support.md).
#![cfg(unix)]

use elfjit::route::{last_compile, CompiledBy};
use elfjit::{Arch, CompileError as Error, CompileOptions, Compiler, Lang, Module, Symbol};
use std::sync::Once;
use std::time::Duration;

fn server_required() {
    static SET: Once = Once::new();
    // Set before any compile of this test binary (every test calls this
    // first), to the same value by every test.
    SET.call_once(|| std::env::set_var("ELFJIT_COMPILER", "server"));
}

fn host_opts() -> CompileOptions {
    CompileOptions::new(Lang::C, Arch::host().expect("a host elfjit runs on"))
}

fn assert_served() -> u32 {
    match last_compile() {
        Some(CompiledBy::Server { pid, .. }) => pid,
        other => panic!("not compiled by a server: {other:?}"),
    }
}

/// C source that takes clang seconds at -O3: `n` functions with loops to optimise.
fn slow_source(n: usize) -> String {
    (0..n)
        .map(|i| {
            format!(
                "double f{i}(double *x, int n) {{ double s = 0; for (int i = 0; i < n; i++) \
                 {{ s += x[i] * {i}.5 / (x[(i * 7) % n] + 1.0); if (s > {i}) s -= x[(i * 3) % n]; }} \
                 return s; }}\n"
            )
        })
        .collect()
}

#[test]
fn eight_threads_compiling_at_once_each_get_their_own_object() {
    server_required();
    let compiler = Compiler::find().unwrap();
    let opts = host_opts();
    std::thread::scope(|scope| {
        let threads: Vec<_> = (0..8)
            .map(|k| {
                let (compiler, opts) = (&compiler, &opts);
                scope.spawn(move || {
                    let mut pids = Vec::new();
                    for round in 0..4 {
                        let n = k * 100 + round;
                        let src = format!("int k{n}(int x) {{ return x * {k} + {round}; }}\n");
                        let object = compiler.compile(src.as_bytes(), opts).unwrap();
                        pids.push(assert_served());
                        let module = Module::load(&object).unwrap();
                        let f: Symbol<'_, unsafe extern "C" fn(i32) -> i32> =
                            module.get(&format!("k{n}")).unwrap();
                        // SAFETY: k<n> is `int (int)`, as compiled just above.
                        assert_eq!(unsafe { f(1000) }, 1000 * k + round);
                    }
                    pids
                })
            })
            .collect();
        for t in threads {
            assert_eq!(t.join().unwrap().len(), 4);
        }
    });
    let pids = elfjit::route::server_pids();
    assert!(!pids.is_empty() && pids.len() <= 8, "{pids:?}");
}

#[test]
fn warming_up_for_several_kernels_has_that_many_servers_running() {
    server_required();
    let compiler = Compiler::find().unwrap();
    // The pool's default size: the available cores, at most 8.
    let size = std::thread::available_parallelism().map_or(1, |n| n.get().min(8));
    let by = elfjit::route::warm_up(&compiler, 3).unwrap();
    let CompiledBy::Server { pid, .. } = by else {
        panic!("not a server: {by}");
    };
    let pids = elfjit::route::server_pids();
    assert!(pids.contains(&pid), "{pid} not among {pids:?}");
    assert!(
        pids.len() >= size.min(3) && pids.len() <= size,
        "{} servers after warming up for 3 kernels with a pool of {size}: {pids:?}",
        pids.len()
    );
    for p in &pids {
        assert!(
            std::path::Path::new(&format!("/proc/{p}")).exists(),
            "server {p} is not running"
        );
    }
    // And they serve.
    let object = compiler
        .compile(b"int warmed(void) { return 3; }", &host_opts())
        .unwrap();
    assert!(elfjit::route::server_pids().contains(&assert_served()));
    assert!(!object.is_empty());
}

#[test]
fn a_request_past_its_deadline_is_a_timeout_and_the_pool_recovers() {
    server_required();
    let mut opts = host_opts();
    opts.opt_level = 3;
    let slow = Compiler::find()
        .unwrap()
        .with_timeout(Duration::from_secs(1));
    let err = slow
        .compile(slow_source(400).as_bytes(), &opts)
        .unwrap_err();
    assert!(matches!(err, Error::ClangTimeout { .. }), "{err}");
    assert!(
        err.to_string().contains("did not finish within 1.0 s"),
        "{err}"
    );
    let object = Compiler::find()
        .unwrap()
        .compile(b"int after(void) { return 7; }", &host_opts())
        .unwrap();
    assert_served();
    let module = Module::load(&object).unwrap();
    let after: Symbol<'_, unsafe extern "C" fn() -> i32> = module.get("after").unwrap();
    // SAFETY: `after` is `int (void)`.
    assert_eq!(unsafe { after() }, 7);
}

/// What clang itself makes of `src` (stdout, stderr), spawned with the arguments elfjit
/// gives it.
fn spawned_clang(compiler: &Compiler, src: &[u8]) -> (Vec<u8>, String) {
    use std::io::Write;
    let mut child = std::process::Command::new(compiler.path())
        .args(elfjit::flags::clang_args(
            &host_opts(),
            elfjit::flags::HostInfo::current(),
        ))
        .args(["-", "-o", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(src).unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.stdout,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn objects_and_diagnostics_are_the_spawned_clangs() {
    server_required();
    let compiler = Compiler::find().unwrap();
    let src = b"float saxpy(float a, float *x, float *y, int n) { float s = 0; for (int i = 0; i < n; i++) s += a * x[i] + y[i]; return s; }";
    let served = compiler.compile(src, &host_opts()).unwrap();
    assert_served();
    assert_eq!(served, spawned_clang(&compiler, src).0);
    let broken = b"int broken( {";
    let err = compiler.compile(broken, &host_opts()).unwrap_err();
    assert_served();
    let Error::ClangFailed { stderr, .. } = err else {
        panic!("{err}")
    };
    assert_eq!(stderr, spawned_clang(&compiler, broken).1);
}
