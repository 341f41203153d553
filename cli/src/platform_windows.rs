//! Windows: the command's OS pieces. It loads and calls precompiled objects natively
//! (`elfjit.exe run k.o`, objects from `elfjit compile --target x86_64-windows` on
//! Linux); it lacks what needs a child process (compiling, the qemu-user emulator, the
//! demo's kernels, the object cache, orphan adoption) and the crash reporter (a POSIX
//! signal handler; a vectored exception handler would do, not written): those commands
//! fail with an `Unsupported` error naming Windows.

use crate::cli::CacheCommand;
use crate::Failure;
use elfjit::run::{Executor, RunRequest};
use elfjit::{Arch, Error, Native};

fn unsupported(what: &str) -> Failure {
    Failure::Run(Error::Unsupported(format!(
        "{what} is not ported to Windows (it needs child processes: clang or qemu-user)"
    )))
}

/// Nothing to keep alive on Windows.
pub(crate) struct Guards;

/// No crash reporter, Ctrl-C handler or orphan adoption on Windows.
pub(crate) fn install_guards() -> Guards {
    Guards
}

/// The native executor (no crash reporter on Windows).
pub(crate) fn native() -> Native {
    Native::new()
}

/// `native` for this machine's architecture; emulation (qemu-user) is refused.
pub(crate) fn executor_for<'a>(
    req: &RunRequest,
    native: &'a Native,
) -> Result<&'a dyn Executor, Failure> {
    if req.emulate || Arch::host() != Some(req.target) {
        return Err(unsupported("running under an emulator"));
    }
    Ok(native)
}

/// `elfjit cache`: there is no object cache on Windows.
pub(crate) fn cmd_cache(_command: CacheCommand) -> Result<(), Failure> {
    Err(unsupported("the object cache"))
}

/// `elfjit demo`: its kernels are compiled, which Windows cannot do yet.
pub(crate) fn cmd_demo() -> Result<(), Failure> {
    Err(unsupported("the demo (compiling its kernels)"))
}
