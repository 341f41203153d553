//! The run engine's vocabulary: a run is compile → link → execute → outcome.
//!
//! A [`RunRequest`] says what to run (source, language, target, entry, argument and
//! return types). [`run_on`] compiles it with clang (through a [`Cache`] when given) and
//! hands the object to an [`Executor`], which links it, calls the entry and reads the
//! results back into a [`RunOutcome`]. There are two executors: [`Native`](crate::Native) links into
//! this process ([`Module::load`](crate::Module::load)) and calls through libffi; the
//! `elfjit-emulate` crate's links for a fixed address and calls under qemu-user, for any
//! target architecture. [`run`](crate::run()), [`run_with`](crate::run_with) and
//! [`run_cached`](crate::run_cached) (in [`native`](crate::native)) are [`run_on`] with
//! [`Native`](crate::Native).
//!
//! ```
//! use elfjit::{ArgSpec, Lang, RetType, RunRequest, Scalar};
//!
//! let mut req = RunRequest::new("int add(int a, int b) { return a + b; }", Lang::C);
//! req.ret = RetType::I32;
//! req.args = vec!["i32:2".parse()?, "i32:40".parse::<ArgSpec>()?];
//! // SAFETY: `add` takes two ints and returns one, as `req` says.
//! let outcome = unsafe { elfjit::run(&req) }?;
//! assert_eq!(outcome.ret, Some(Scalar::I32(42)));
//! # Ok::<(), elfjit::Error>(())
//! ```

use crate::args::{check_buffer_total, ArgOutcome, ArgSpec, RetType, Scalar};
use crate::cache::{Cache, CacheStatus};
use crate::clang::Compiler;
use crate::error::{Error, Result};
use crate::flags::{CompileOptions, HostInfo, Lang};
use elfjit_core::Arch;
use std::time::{Duration, Instant};

/// Everything a run needs to know (what `elfjit run`'s options say).
#[derive(Clone, Debug, PartialEq)]
pub struct RunRequest {
    /// C source or LLVM IR text.
    pub source: Vec<u8>,
    /// A precompiled ELF object to load instead of compiling `source` (`elfjit run k.o`);
    /// `source` and `lang` are then unused, and no cache is consulted.
    pub object: Option<Vec<u8>>,
    /// The language of `source`.
    pub lang: Lang,
    /// The function to call; `None` means the object's only global function.
    pub entry: Option<String>,
    /// The architecture to compile for and run on.
    pub target: Arch,
    /// The entry's return type.
    pub ret: RetType,
    /// The entry's arguments, in call order.
    pub args: Vec<ArgSpec>,
    /// clang's `-O` level (0 to 3).
    pub opt_level: u8,
    /// Run through an emulated executor even when `target` is the host architecture
    /// (foreign targets always are); [`Native`](crate::Native) refuses such a request. See the
    /// `elfjit-emulate` crate, which also honours `ELFJIT_EMULATE=1`.
    pub emulate: bool,
    /// Compile with `-g` and register the module with the GDB JIT interface, so a debugger
    /// can break in the kernel by name and show its source lines (`elfjit run --debug`).
    /// Native runs only: an emulated executor refuses it (the kernel runs inside qemu).
    pub debug: bool,
}

impl RunRequest {
    /// A request for the host architecture, returning `void`, no arguments, at `-O2`.
    pub fn new(source: impl Into<Vec<u8>>, lang: Lang) -> Self {
        RunRequest {
            source: source.into(),
            object: None,
            lang,
            entry: None,
            // On a host elfjit cannot run on, this is "foreign" and the executor says so.
            target: Arch::host().unwrap_or(Arch::X86_64),
            ret: RetType::Void,
            args: Vec::new(),
            opt_level: 2,
            emulate: false,
            debug: false,
        }
    }

    /// The compile options the request implies.
    pub fn compile_options(&self) -> CompileOptions {
        let mut opts = CompileOptions::new(self.lang, self.target);
        opts.opt_level = self.opt_level;
        opts.debug_info = self.debug;
        opts
    }
}

/// Wall-clock time of each stage.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Timings {
    /// Running clang (or, on a cache hit, the lookup).
    pub compile: Duration,
    /// Linking the object into memory.
    pub load: Duration,
    /// The call itself.
    pub call: Duration,
}

/// The result of a successful run.
#[derive(Clone, Debug, PartialEq)]
pub struct RunOutcome {
    /// The architecture the code ran on.
    pub target: Arch,
    /// The function that was called.
    pub entry: String,
    /// Its return value (`None` for `void`).
    pub ret: Option<Scalar>,
    /// Each argument after the call: scalars as given, buffers as left by the kernel.
    pub args: Vec<ArgOutcome>,
    /// Per-stage times.
    pub timings: Timings,
}

/// A compiled kernel, handed to an [`Executor`].
#[derive(Clone, Copy, Debug)]
pub struct Compiled<'a> {
    /// The compiler that built it (an executor may need it again: the emulated one
    /// compiles its call shim and builds its runner with it).
    pub compiler: &'a Compiler,
    /// What to run.
    pub request: &'a RunRequest,
    /// The relocatable ELF object clang produced for `request.target`.
    pub object: &'a [u8],
    /// How long compiling (or the cache lookup) took.
    pub compile: Duration,
}

/// Where and how a compiled kernel is linked and called: the one interface both the
/// native and the emulated executor implement.
pub trait Executor {
    /// Checks that this executor can run `req` and readies it (before anything is
    /// compiled: the native executor turns on the GDB JIT interface for
    /// [`RunRequest::debug`]), and returns the host description the kernel is compiled
    /// with: it decides between the native CPU's flags and a generic CPU's
    /// ([`crate::flags::clang_args`]).
    fn prepare(&self, req: &RunRequest) -> Result<HostInfo>;

    /// Links `compiled.object`, calls its entry with the request's arguments and returns
    /// what came back, `timings.compile` being `compiled.compile` (plus any compiling of
    /// its own).
    ///
    /// # Safety
    /// The entry is called as a C function taking the request's arguments and returning
    /// its return type; elfjit cannot check that. The caller asserts that the entry
    /// really has that signature, that it does with its pointer arguments only what their
    /// buffers allow (each holds exactly the elements its [`ArgSpec`] declares), and that
    /// the code is safe to run where the executor runs it (the native executor: in this
    /// process, with its rights).
    unsafe fn execute(&self, compiled: &Compiled<'_>) -> Result<RunOutcome>;
}

/// Picks the function to call: the named one, or the only global function.
pub fn select_entry(requested: Option<&str>, functions: &[String]) -> Result<String> {
    match requested {
        Some(name) => {
            if functions.iter().any(|f| f == name) {
                Ok(name.to_string())
            } else {
                Err(Error::UnknownEntry {
                    name: name.to_string(),
                    available: functions.to_vec(),
                })
            }
        }
        None => match functions {
            [only] => Ok(only.clone()),
            _ => Err(Error::AmbiguousEntry {
                available: functions.to_vec(),
            }),
        },
    }
}

/// Runs `req` on `executor`: checks the buffers against their cap and the request
/// against the executor, compiles (from `cache` when given: native and emulated runs
/// alike, the key includes the target and flags; a hit's `timings.compile` is the
/// lookup), then executes. The status is `Some` exactly when a cache was given and the
/// request had no precompiled [`RunRequest::object`].
///
/// # Safety
/// As [`Executor::execute`]. A cached object is what an earlier compile of the same
/// source produced, from a cache directory only this user can write.
pub unsafe fn run_on(
    executor: &dyn Executor,
    compiler: &Compiler,
    cache: Option<&Cache>,
    req: &RunRequest,
) -> Result<(RunOutcome, Option<CacheStatus>)> {
    // Before any compile or allocation: the buffers must fit the cap.
    check_buffer_total(&req.args)?;
    let host = executor.prepare(req)?;
    let opts = req.compile_options();
    let t = Instant::now();
    let (object, status) = match (&req.object, cache) {
        (Some(object), _) => (object.clone(), None),
        (None, Some(c)) => {
            let (o, s) = c.compile_for_host(compiler, &req.source, &opts, host)?;
            (o, Some(s))
        }
        (None, None) => (compiler.compile_for_host(&req.source, &opts, host)?, None),
    };
    let compiled = Compiled {
        compiler,
        request: req,
        object: &object,
        compile: t.elapsed(),
    };
    // SAFETY: the caller upholds `execute`'s contract.
    let outcome = unsafe { executor.execute(&compiled) }?;
    Ok((outcome, status))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn entry_selection() {
        assert_eq!(select_entry(None, &names(&["add"])).unwrap(), "add");
        assert_eq!(select_entry(Some("b"), &names(&["a", "b"])).unwrap(), "b");
        let e = select_entry(None, &names(&["a", "b"])).unwrap_err();
        assert!(matches!(e, Error::AmbiguousEntry { .. }));
        assert!(e.to_string().contains("a, b"), "{e}");
        let e = select_entry(None, &[]).unwrap_err();
        assert!(e.to_string().contains("(none)"), "{e}");
        let e = select_entry(Some("c"), &names(&["a", "b"])).unwrap_err();
        assert!(e.to_string().contains("unknown entry `c`"), "{e}");
    }
}
