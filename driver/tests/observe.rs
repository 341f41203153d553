//! The observers through the library: a panic in a Rust callback unwinds through a kernel
//! `Module::load` loaded with unwind tables (the CLI's `--debug` and `ELFJIT_PERF` are
//! tested in elfjit-cli's tests/observe.rs).
// Windows x64 unwinds through `.pdata`, which ELF kernels lack: no unwinding through a
// kernel frame there (docs/os-support.md).
#![cfg(unix)]

use elfjit::clang::{CompileOptions, Compiler, Lang};
use elfjit::{Arch, Module};
use std::panic::{catch_unwind, AssertUnwindSafe};

extern "C-unwind" fn panics(x: i32) -> i32 {
    panic!("callback saw {x}");
}

#[test]
fn a_panic_unwinds_through_a_kernel_compiled_with_unwind_tables() {
    let host = Arch::host().expect("a supported host");
    let mut opts = CompileOptions::new(Lang::C, host);
    opts.unwind_tables = true;
    let object = Compiler::find()
        .unwrap()
        .compile(
            b"int through(int (*cb)(int), int x) { return cb(x + 1) * 2; }\n",
            &opts,
        )
        .unwrap();
    let module = Module::load(&object).unwrap();
    if cfg!(feature = "dlopen-fallback") {
        // The dynamic linker registers the library's unwind tables; elfjit tells no one.
        assert!(module.observed().is_none());
    } else {
        assert!(module.observed().is_some_and(|o| o.unwinds()));
    }
    type Through = extern "C-unwind" fn(extern "C-unwind" fn(i32) -> i32, i32) -> i32;
    // SAFETY: `through` has this signature; `module` outlives the call.
    let through: Through = unsafe { std::mem::transmute(module.symbol("through").unwrap()) };
    let caught = catch_unwind(AssertUnwindSafe(|| through(panics, 1)));
    let message = caught.expect_err("the panic did not arrive");
    assert_eq!(
        message.downcast_ref::<String>().map(String::as_str),
        Some("callback saw 2")
    );
}
