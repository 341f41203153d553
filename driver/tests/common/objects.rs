//! Kernel objects for the driver's tests that load and call them, on every OS they run on
//! (included by path by those tests and by the library's own unit tests).
//!
//! On Unix a kernel is compiled by clang for this machine through the tests' shared
//! object cache (`core/tests/common/clang_run.rs`, keyed by clang, its arguments and the
//! source). A Windows test under Wine cannot run clang (a Linux program) as a child it
//! waits for (docs/os-support.md), so scripts/test-windows first runs the same tests on
//! Linux with `ELFJIT_TEST_WINDOWS_OBJECTS` set: each kernel is then compiled a second
//! time, for x86_64 Windows (the Windows x64 convention in an ELF object, as the driver
//! compiles for a Windows host), and stored in `ELFJIT_TEST_OBJECTS`, where the Windows
//! run finds it under the same key.
#![allow(dead_code)] // each test binary uses its own subset

#[path = "../../../core/tests/common/clang_run.rs"]
mod clang_run;

use elfjit::flags::{clang_args, target_triple, windows_x64_abi, HostInfo};
use elfjit::{Arch, CompileOptions};

/// Set (to anything) on Linux x86_64: store every kernel's Windows object too.
pub const WINDOWS_OBJECTS: &str = "ELFJIT_TEST_WINDOWS_OBJECTS";

/// `source` compiled with the driver's own flags for `opts` on this machine
/// ([`clang_args`]: the Windows x64 convention on Windows).
pub fn driver_object(source: &str, opts: &CompileOptions) -> Vec<u8> {
    object(source, |host| clang_args(opts, host))
}

/// `source` compiled with the bare-metal flags for this machine, plus `extra`, bypassing
/// the driver's flags table (for tests that isolate the loader). On x86_64 Windows the
/// triple is `x86_64-pc-windows-elf` and there is no `-fPIC` (not even in `extra`), which
/// Windows targets reject (their code is RIP-relative anyway).
pub fn loader_object(source: &str, extra: &[&str]) -> Vec<u8> {
    object(source, |host| {
        let arch = host.arch.expect("a host elfjit runs on");
        let windows = windows_x64_abi(arch, host.os);
        let triple = if windows {
            "x86_64-pc-windows-elf".to_string()
        } else {
            target_triple(arch)
        };
        let mut args = vec![format!("--target={triple}"), "-c".into()];
        if !windows {
            args.push("-fPIC".into());
        }
        args.extend(
            ["-ffreestanding", "-fno-math-errno", "-fno-stack-protector"]
                .into_iter()
                .chain(["-x", "c"])
                .chain(
                    extra
                        .iter()
                        .copied()
                        .filter(|a| !(windows && *a == "-fPIC")),
                )
                .map(String::from),
        );
        args
    })
}

/// Compiles `source` with `args(host)` for this machine; on Linux x86_64 with
/// [`WINDOWS_OBJECTS`] set, stores the object for an x86_64 Windows host first.
fn object(source: &str, args: impl Fn(HostInfo) -> Vec<String>) -> Vec<u8> {
    let here = HostInfo::current();
    if cfg!(unix) && here.arch == Some(Arch::X86_64) && std::env::var_os(WINDOWS_OBJECTS).is_some()
    {
        let windows = HostInfo {
            arch: Some(Arch::X86_64),
            os: "windows",
        };
        compile(&args(windows), source);
    }
    compile(&args(here), source)
}

/// Runs clang with `args` on `source` from stdin to stdout, or reads the stored object.
fn compile(args: &[String], source: &str) -> Vec<u8> {
    let mut all: Vec<&str> = args.iter().map(String::as_str).collect();
    all.extend(["-", "-o", "-"]);
    clang_run::clang_output(&all, source.as_bytes())
}
