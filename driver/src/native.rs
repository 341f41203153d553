//! The native executor: the kernel linked into this process ([`Module::load`]) and called
//! through libffi ([`CallInterface`]), its `--arg` buffers in this process's memory; and
//! [`run`], [`run_with`] and [`run_cached`], [`run_on`] with it.

use crate::args::{ArgKind, ArgOutcome, ArgSpec, Buffer};
use crate::cache::{Cache, CacheStatus};
use crate::clang::Compiler;
use crate::error::{Error, Result};
use crate::ffi::{ArgValue, CallInterface};
use crate::flags::HostInfo;
use crate::module::Module;
use crate::run::{run_on, select_entry, Compiled, Executor, RunOutcome, RunRequest, Timings};
use std::time::Instant;

/// Told about each native call just before it is made and just after it returns: what a
/// crash reporter needs to name the kernel that brought the process down.
pub trait CallObserver: Sync {
    /// The kernel `entry`, in the module mapped at `region` (start, length), is about to
    /// be called.
    fn before(&self, entry: &str, region: (usize, usize));
    /// The call returned.
    fn after(&self);
}

/// Runs kernels in this process: [`Module::load`], then a libffi call.
#[derive(Clone, Copy, Default)]
pub struct Native {
    observer: Option<&'static dyn CallObserver>,
}

impl std::fmt::Debug for Native {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Native")
            .field("observer", &self.observer.is_some())
            .finish()
    }
}

impl Native {
    /// The native executor.
    pub const fn new() -> Native {
        Native { observer: None }
    }

    /// The native executor telling `observer` about each call.
    pub const fn with_observer(observer: &'static dyn CallObserver) -> Native {
        Native {
            observer: Some(observer),
        }
    }
}

impl Executor for Native {
    fn prepare(&self, req: &RunRequest) -> Result<HostInfo> {
        let host = HostInfo::current();
        if req.emulate {
            return Err(Error::Unsupported(
                "the request asks for emulation, which the native executor does not do; run \
                 it with an emulated executor (elfjit-emulate, `elfjit run --emulate`)"
                    .to_string(),
            ));
        }
        match host.arch {
            Some(arch) if arch == req.target => {
                if req.debug {
                    // Before the load, which then registers the module with the debugger.
                    elfjit_observe::enable(elfjit_observe::Features::GDB)?;
                }
                Ok(host)
            }
            Some(arch) => Err(Error::Unsupported(format!(
                "a kernel for {} cannot run natively on this {arch} host; run it with an \
                 emulated executor (elfjit-emulate, `elfjit run --target {}`)",
                req.target, req.target
            ))),
            None => Err(Error::Unsupported(format!(
                "this host ({}) is not an architecture elfjit runs on",
                std::env::consts::ARCH
            ))),
        }
    }

    unsafe fn execute(&self, compiled: &Compiled<'_>) -> Result<RunOutcome> {
        let req = compiled.request;
        let t = Instant::now();
        let module = Module::load(compiled.object)?;
        let load = t.elapsed();

        let entry = select_entry(req.entry.as_deref(), module.functions())?;
        let code = module.symbol(&entry).ok_or_else(|| Error::UnknownEntry {
            name: entry.clone(),
            available: module.functions().to_vec(),
        })?;

        // Buffers first (they must not move), then the argument values pointing into them.
        let mut buffers: Vec<Option<Buffer>> = req
            .args
            .iter()
            .map(|a| match a {
                ArgSpec::Buffer { ty, init } => Buffer::new(*ty, init).map(Some),
                ArgSpec::Scalar(_) => Ok(None),
            })
            .collect::<Result<_>>()?;
        let values: Vec<ArgValue> = req
            .args
            .iter()
            .zip(buffers.iter_mut())
            .map(|(spec, buf)| match (spec, buf) {
                (_, Some(b)) => ArgValue::Pointer(b.as_mut_ptr().cast()),
                (ArgSpec::Scalar(s), None) => ArgValue::Scalar(*s),
                // Every Buffer spec got a buffer above; keep the kinds consistent regardless.
                (ArgSpec::Buffer { .. }, None) => ArgValue::Pointer(std::ptr::null_mut()),
            })
            .collect();
        let kinds: Vec<ArgKind> = req.args.iter().map(ArgSpec::kind).collect();
        let interface = CallInterface::new(&kinds, req.ret)?;

        if let Some(o) = self.observer {
            o.before(&entry, module.region());
        }
        let t = Instant::now();
        // SAFETY: `code` is the entry's address in `module`, which stays loaded (and its
        // code executable) until after the call. That the function's C signature is the
        // one the request describes is this function's contract, passed up to the public
        // `run` family as theirs. Buffer pointers stay valid (the buffers outlive the call)
        // and each holds exactly the declared number of elements.
        let ret = unsafe { interface.call(code, &values) };
        let call = t.elapsed();
        if let Some(o) = self.observer {
            o.after();
        }
        drop(values);

        // The buffers themselves become the outcome: nothing is copied.
        let args = req
            .args
            .iter()
            .zip(buffers)
            .map(|(spec, buf)| match (spec, buf) {
                (_, Some(b)) => Ok(ArgOutcome::Buffer(b)),
                (ArgSpec::Scalar(s), None) => Ok(ArgOutcome::Scalar(*s)),
                (ArgSpec::Buffer { ty, .. }, None) => {
                    Buffer::zeroed(*ty, 0).map(ArgOutcome::Buffer)
                }
            })
            .collect::<Result<Vec<_>>>()?;
        drop(module);

        Ok(RunOutcome {
            target: req.target,
            entry,
            ret,
            args,
            timings: Timings {
                compile: compiled.compile,
                load,
                call,
            },
        })
    }
}

/// Runs `req` natively, finding clang with [`Compiler::find`].
///
/// ```compile_fail,E0133
/// // Calling code on the caller's word about its signature is `unsafe`:
/// let req = elfjit::RunRequest::new("void f(void) {}", elfjit::Lang::C);
/// let _ = elfjit::run(&req);
/// ```
///
/// # Safety
/// As [`Executor::execute`].
pub unsafe fn run(req: &RunRequest) -> Result<RunOutcome> {
    // SAFETY: the caller upholds `run_with`'s contract.
    unsafe { run_with(&Compiler::find()?, req) }
}

/// Runs `req` natively ([`Native`]) with a given compiler: `req.target` must be the
/// host's architecture.
///
/// # Safety
/// As [`Executor::execute`].
pub unsafe fn run_with(compiler: &Compiler, req: &RunRequest) -> Result<RunOutcome> {
    // SAFETY: the caller upholds `execute`'s contract.
    unsafe { run_on(&Native::new(), compiler, None, req) }.map(|(outcome, _)| outcome)
}

/// [`run_with`] taking the object from `cache` when it has it. On a hit,
/// `timings.compile` is the lookup time.
///
/// # Safety
/// As [`run_on`].
pub unsafe fn run_cached(
    compiler: &Compiler,
    cache: &Cache,
    req: &RunRequest,
) -> Result<(RunOutcome, CacheStatus)> {
    // SAFETY: the caller upholds `run_on`'s contract.
    let (outcome, status) = unsafe { run_on(&Native::new(), compiler, Some(cache), req) }?;
    Ok((outcome, status.unwrap_or(CacheStatus::Miss)))
}
