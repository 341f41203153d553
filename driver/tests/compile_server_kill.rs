//! A compile server killed with SIGKILL in the middle of a request (issue 27): the request
//! is retried on a fresh server and succeeds. Its own test binary, so that its pool holds
//! one server (`ELFJIT_COMPILE_SERVERS=1`) and the server the test kills is the one
//! compiling.
// Compile servers are clang processes: the compile side is Unix-only (docs/os-support.md).
#![cfg(unix)]

use elfjit::route::{last_compile, server_pids, CompiledBy};
use elfjit::{Arch, CompileOptions, Compiler, Lang, Module, Symbol};
use std::time::Duration;

fn served_by() -> u32 {
    match last_compile() {
        Some(CompiledBy::Server { pid, .. }) => pid,
        other => panic!("not compiled by a server: {other:?}"),
    }
}

/// The CPU time (user + system, in clock ticks) process `pid` has used, from /proc.
fn cpu_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces) in parentheses.
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let user: u64 = fields.get(11)?.parse().ok()?;
    let system: u64 = fields.get(12)?.parse().ok()?;
    Some(user + system)
}

#[test]
fn a_server_killed_mid_request_is_replaced_and_the_request_retried() {
    std::env::set_var("ELFJIT_COMPILER", "server");
    std::env::set_var("ELFJIT_COMPILE_SERVERS", "1");
    let compiler = Compiler::find().unwrap();
    let mut opts = CompileOptions::new(Lang::C, Arch::host().unwrap());
    opts.opt_level = 3;
    compiler
        .compile(b"int warm(void) { return 1; }", &opts)
        .unwrap();
    let first = served_by();
    assert_eq!(server_pids(), [first]);
    let idle = cpu_ticks(first).unwrap();

    // About a second of clang's work at -O3, and a function to call at the end.
    let mut src: String = (0..150)
        .map(|i| {
            format!(
                "double f{i}(double *x, int n) {{ double s = 0; for (int i = 0; i < n; i++) \
                 {{ s += x[i] * {i}.5 / (x[(i * 7) % n] + 1.0); if (s > {i}) s -= x[(i * 3) % n]; }} \
                 return s; }}\n"
            )
        })
        .collect();
    src.push_str("int survived(void) { return 42; }\n");
    std::thread::scope(|scope| {
        let compile = scope.spawn(|| {
            let object = compiler.compile(src.as_bytes(), &opts);
            (object, last_compile())
        });
        // Mid-request: the server has started using CPU on this request.
        while cpu_ticks(first).is_some_and(|t| t <= idle + 1) && !compile.is_finished() {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(!compile.is_finished(), "the compile ended before the kill");
        // SAFETY: kill(2) reads no memory of ours; `first` is this process's own server.
        let killed = unsafe { libc::kill(first as i32, libc::SIGKILL) };
        assert_eq!(killed, 0, "{}", std::io::Error::last_os_error());
        let (object, by) = compile.join().unwrap();
        let object = object.unwrap();
        let Some(CompiledBy::Server { pid: second, .. }) = by else {
            panic!("the retry was not compiled by a server: {by:?}")
        };
        assert_ne!(second, first, "the retry ran on the killed server");
        assert_eq!(server_pids(), [second]);
        let module = Module::load(&object).unwrap();
        let survived: Symbol<'_, unsafe extern "C" fn() -> i32> = module.get("survived").unwrap();
        // SAFETY: `survived` is `int (void)`.
        assert_eq!(unsafe { survived() }, 42);
    });
}
