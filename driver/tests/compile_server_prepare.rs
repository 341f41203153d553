//! `elfjit::prepare()` starts a compile server in the background (issue 27), and the first
//! compile uses it. Its own test binary: nothing else has started a server in it.
// Compile servers are clang processes: the compile side is Unix-only (docs/os-support.md).
#![cfg(unix)]

use elfjit::route::{last_compile, server_pids, CompiledBy};
use elfjit::{Arch, CompileOptions, Compiler, Lang};
use std::time::Duration;

#[test]
fn prepare_starts_a_server_that_the_first_compile_uses() {
    std::env::set_var("ELFJIT_COMPILER", "server");
    // One server: the compile waits for the one prepare started rather than starting
    // another while it loads.
    std::env::set_var("ELFJIT_COMPILE_SERVERS", "1");
    assert!(server_pids().is_empty());
    elfjit::prepare().unwrap();
    // prepare does not wait for it: wait here (a bound, not a timing assertion).
    let mut started = Vec::new();
    for _ in 0..6000 {
        started = server_pids();
        if !started.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(started.len(), 1, "prepare started no server");
    let compiler = Compiler::find().unwrap();
    let opts = CompileOptions::new(Lang::C, Arch::host().unwrap());
    compiler
        .compile(b"int one(void) { return 1; }", &opts)
        .unwrap();
    match last_compile() {
        Some(CompiledBy::Server { pid, .. }) => assert_eq!([pid], started[..]),
        other => panic!("not compiled by a server: {other:?}"),
    }
}
