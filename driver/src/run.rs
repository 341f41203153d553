//! The engine behind `elfjit run`: source in, a finished call and its results out.
//!
//! compile (clang on a pipe) → link in memory ([`Module::load`]) → pick the entry →
//! lay out the `--arg` buffers → call through libffi → read the buffers back.

use crate::args::{check_buffer_total, ArgOutcome, ArgSpec, Buffer, RetType, Scalar};
use crate::cache::{Cache, CacheStatus};
use crate::clang::{CompileOptions, Compiler, Lang};
use crate::emulate;
use crate::error::{Error, Result};
use crate::ffi::{ArgKind, ArgValue, CallInterface};
use crate::flags::HostInfo;
use crate::json;
use crate::module::Module;
use elfjit_core::Arch;
use std::fmt::Write;
use std::io;
use std::time::{Duration, Instant};

/// Everything `elfjit run` needs to know.
#[derive(Clone, Debug, PartialEq)]
pub struct RunRequest {
    /// C source or LLVM IR text.
    pub source: Vec<u8>,
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
    /// Run through the emulated runner under qemu even when `target` is the host
    /// architecture (foreign targets always are). `ELFJIT_EMULATE=1` sets this for every
    /// run. See [`crate::emulate`].
    pub emulate: bool,
    /// Compile with `-g` and register the module with the GDB JIT interface, so a debugger
    /// can break in the kernel by name and show its source lines (`elfjit run --debug`).
    pub debug: bool,
}

impl RunRequest {
    /// A request for the host architecture, returning `void`, no arguments, at `-O2`.
    pub fn new(source: impl Into<Vec<u8>>, lang: Lang) -> Self {
        RunRequest {
            source: source.into(),
            lang,
            entry: None,
            // On a host elfjit cannot run on, this is "foreign" and `run` says so.
            target: HostInfo::current().arch.unwrap_or(Arch::X86_64),
            ret: RetType::Void,
            args: Vec::new(),
            opt_level: 2,
            emulate: false,
            debug: false,
        }
    }
}

/// Wall-clock time of each stage.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Timings {
    /// Running clang.
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

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

impl RunOutcome {
    /// The `elfjit run --json` object (one line, no trailing newline).
    pub fn to_json(&self) -> String {
        self.to_json_with_cache(None)
    }

    /// [`RunOutcome::to_json`] with, for a run through a compile cache, a `"cache":
    /// "hit"|"miss"` field after `"args"` (`None` gives exactly [`RunOutcome::to_json`]).
    pub fn to_json_with_cache(&self, cache: Option<CacheStatus>) -> String {
        let mut out = Vec::new();
        let _ = self.write_json(cache, &mut out);
        String::from_utf8(out).unwrap_or_default()
    }

    /// Writes [`RunOutcome::to_json_with_cache`]'s text to `w` as it goes: buffers are
    /// formatted element by element, never held as text.
    pub fn write_json(&self, cache: Option<CacheStatus>, w: &mut dyn io::Write) -> io::Result<()> {
        w.write_all(b"{\"target\": ")?;
        json::write_string(w, self.target.name())?;
        w.write_all(b", \"entry\": ")?;
        json::write_string(w, &self.entry)?;
        w.write_all(b", \"return\": ")?;
        match self.ret {
            Some(v) => json::write_scalar(w, v)?,
            None => w.write_all(b"null")?,
        }
        w.write_all(b", \"args\": [")?;
        for (i, a) in self.args.iter().enumerate() {
            if i > 0 {
                w.write_all(b", ")?;
            }
            json::write_arg_outcome(w, a)?;
        }
        w.write_all(b"]")?;
        if let Some(c) = cache {
            w.write_all(b", \"cache\": ")?;
            json::write_string(w, c.name())?;
        }
        w.write_all(b", \"timings_us\": {\"compile\": ")?;
        json::write_scalar(w, Scalar::F64(micros(self.timings.compile)))?;
        w.write_all(b", \"load\": ")?;
        json::write_scalar(w, Scalar::F64(micros(self.timings.load)))?;
        w.write_all(b", \"call\": ")?;
        json::write_scalar(w, Scalar::F64(micros(self.timings.call)))?;
        w.write_all(b"}}")
    }

    /// A readable multi-line summary (what `elfjit run` prints without `--json`).
    pub fn summary(&self) -> String {
        const SHOWN: usize = 16;
        let mut s = String::new();
        let _ = writeln!(s, "{} on {}", self.entry, self.target);
        match self.ret {
            Some(v) => {
                let _ = writeln!(s, "  return  {v} ({})", v.ty());
            }
            None => {
                let _ = writeln!(s, "  return  void");
            }
        }
        for (i, a) in self.args.iter().enumerate() {
            match a {
                ArgOutcome::Scalar(v) => {
                    let _ = writeln!(s, "  arg {i}   {}:{v}", v.ty());
                }
                ArgOutcome::Buffer(values) => {
                    let ty = values.ty().name();
                    let shown: Vec<String> =
                        values.iter().take(SHOWN).map(|v| v.to_string()).collect();
                    let more = values.len().saturating_sub(SHOWN);
                    let tail = if more > 0 {
                        format!(", ... ({more} more)")
                    } else {
                        String::new()
                    };
                    let _ = writeln!(
                        s,
                        "  arg {i}   {ty}[{}] = [{}{tail}]",
                        values.len(),
                        shown.join(", ")
                    );
                }
            }
        }
        let _ = write!(
            s,
            "  time    compile {:.0} µs, load {:.1} µs, call {:.1} µs",
            micros(self.timings.compile),
            micros(self.timings.load),
            micros(self.timings.call)
        );
        s
    }
}

/// Runs `req`, finding clang with [`Compiler::find`].
///
/// ```compile_fail,E0133
/// // Calling code on the caller's word about its signature is `unsafe`:
/// let req = elfjit::RunRequest::new("void f(void) {}", elfjit::Lang::C);
/// let _ = elfjit::run(&req);
/// ```
///
/// # Safety
/// As [`run_with`].
pub unsafe fn run(req: &RunRequest) -> Result<RunOutcome> {
    // SAFETY: the caller upholds `run_with`'s contract.
    unsafe { run_with(&Compiler::find()?, req) }
}

/// Runs `req` with a given compiler: natively when `target` is the host (unless
/// emulation is asked for), otherwise through the emulated runner
/// ([`crate::emulate::run_emulated`]).
///
/// # Safety
/// A native run calls the compiled entry in this process as a C function taking
/// `req.args` and returning `req.ret`; elfjit cannot check that. The caller asserts that
/// the entry really has that signature, that it does with its pointer arguments only
/// what their buffers allow (each holds exactly the elements its `--arg` declares), and
/// that the code is safe to run in this process (it runs with the process's rights).
/// An emulated run executes the code under qemu in another process, but the same call
/// may run natively (a host target without emulation), so the contract is the same.
pub unsafe fn run_with(compiler: &Compiler, req: &RunRequest) -> Result<RunOutcome> {
    // SAFETY: the caller upholds this function's contract, which is `run_inner`'s.
    unsafe { run_inner(compiler, None, req) }.map(|(outcome, _)| outcome)
}

/// [`run_with`] taking the object from `cache` when it has it (native and emulated runs
/// alike: the key includes the target and flags). On a hit, `timings.compile` is the
/// lookup time.
///
/// # Safety
/// As [`run_with`]. A cached object is what an earlier compile of the same source
/// produced, from a cache directory only this user can write.
pub unsafe fn run_cached(
    compiler: &Compiler,
    cache: &Cache,
    req: &RunRequest,
) -> Result<(RunOutcome, CacheStatus)> {
    // SAFETY: the caller upholds `run_with`'s contract.
    let (outcome, status) = unsafe { run_inner(compiler, Some(cache), req) }?;
    Ok((outcome, status.unwrap_or(CacheStatus::Miss)))
}

/// # Safety
/// As [`run_with`].
unsafe fn run_inner(
    compiler: &Compiler,
    cache: Option<&Cache>,
    req: &RunRequest,
) -> Result<(RunOutcome, Option<CacheStatus>)> {
    // Before any compile or allocation: the buffers must fit the cap.
    check_buffer_total(&req.args)?;
    let host = HostInfo::current();
    let emulated = req.emulate || emulate::forced_by_env() || host.arch != Some(req.target);
    let mut opts = CompileOptions::new(req.lang, req.target);
    opts.opt_level = req.opt_level;
    if req.debug {
        if emulated {
            return Err(Error::BadArgument {
                what: "--debug".into(),
                reason: "debugging runs on the host only; an emulated kernel runs inside qemu"
                    .into(),
            });
        }
        opts.debug_info = true;
        elfjit_observe::enable(elfjit_observe::Features::GDB)?;
    }
    let flags_host = if emulated {
        emulate::compile_host()
    } else {
        host
    };

    let t = Instant::now();
    let (object, status) = match cache {
        Some(c) => {
            let (o, s) = c.compile_for_host(compiler, &req.source, &opts, flags_host)?;
            (o, Some(s))
        }
        None => (
            compiler.compile_for_host(&req.source, &opts, flags_host)?,
            None,
        ),
    };
    let compile = t.elapsed();

    let outcome = if emulated {
        emulate::run_emulated(compiler, req, &object, compile)
    } else {
        // SAFETY: the caller upholds `run_with`'s contract for this native call.
        unsafe { run_native(req, &object, compile) }
    }?;
    Ok((outcome, status))
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

/// # Safety
/// `object`'s entry must have the signature `req` describes (see [`run_with`]).
unsafe fn run_native(req: &RunRequest, object: &[u8], compile: Duration) -> Result<RunOutcome> {
    let t = Instant::now();
    let module = Module::load(object)?;
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

    // A crash in the kernel is reported by name where the CLI installed the reporter.
    let named = crate::crash::calling(&entry, module.region());
    let t = Instant::now();
    // SAFETY: `code` is the entry's address in `module`, which stays loaded (and its code
    // executable) until after the call. That the function's C signature is the one
    // `--arg`/`--ret` describe is this function's contract, passed up to the public
    // `run` family as theirs. Buffer pointers stay valid (the buffers outlive the call)
    // and each holds exactly the declared number of elements.
    let ret = unsafe { interface.call(code, &values) };
    let call = t.elapsed();
    drop(named);
    drop(values);

    // The buffers themselves become the outcome: nothing is copied.
    let args = req
        .args
        .iter()
        .zip(buffers)
        .map(|(spec, buf)| match (spec, buf) {
            (_, Some(b)) => Ok(ArgOutcome::Buffer(b)),
            (ArgSpec::Scalar(s), None) => Ok(ArgOutcome::Scalar(*s)),
            (ArgSpec::Buffer { ty, .. }, None) => Buffer::zeroed(*ty, 0).map(ArgOutcome::Buffer),
        })
        .collect::<Result<Vec<_>>>()?;
    drop(module);

    Ok(RunOutcome {
        target: req.target,
        entry,
        ret,
        args,
        timings: Timings {
            compile,
            load,
            call,
        },
    })
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

    #[test]
    fn json_shape() {
        let o = RunOutcome {
            target: Arch::X86_64,
            entry: "k\"1".into(),
            ret: Some(Scalar::F32(f32::NEG_INFINITY)),
            args: vec![
                ArgOutcome::Scalar(Scalar::I32(3)),
                ArgOutcome::Buffer(
                    Buffer::from_values(
                        crate::args::ScalarType::F64,
                        &[Scalar::F64(0.5), Scalar::F64(f64::NAN)],
                    )
                    .unwrap(),
                ),
            ],
            timings: Timings {
                compile: Duration::from_micros(30_000),
                load: Duration::from_nanos(3_700),
                call: Duration::ZERO,
            },
        };
        let v: serde_json::Value = serde_json::from_str(&o.to_json()).unwrap();
        assert_eq!(
            v,
            serde_json::json!({
                "target": "x86_64", "entry": "k\"1", "return": "-inf",
                "args": [3, [0.5, "nan"]],
                "timings_us": {"compile": 30000, "load": 3.7, "call": 0}
            })
        );
        let void = RunOutcome {
            ret: None,
            args: vec![],
            ..o
        };
        let v: serde_json::Value = serde_json::from_str(&void.to_json()).unwrap();
        assert!(v["return"].is_null());
        assert!(v.get("cache").is_none());
        assert_eq!(void.to_json_with_cache(None), void.to_json());
        for status in [CacheStatus::Hit, CacheStatus::Miss] {
            let v: serde_json::Value =
                serde_json::from_str(&void.to_json_with_cache(Some(status))).unwrap();
            assert_eq!(v["cache"], status.name());
            assert!(v["timings_us"]["compile"].is_number());
        }
        assert!(void.summary().contains("return  void"));
    }

    #[test]
    fn foreign_target_compile_errors_come_first() {
        let Ok(c) = Compiler::find() else {
            return;
        };
        let host = HostInfo::current().arch;
        let foreign = Arch::ALL.into_iter().find(|a| Some(*a) != host).unwrap();
        let mut req = RunRequest::new("int f( {", Lang::C);
        req.target = foreign;
        // SAFETY (both runs): the source does not compile, so nothing is called.
        assert!(matches!(
            unsafe { run_with(&c, &req) }.unwrap_err(),
            Error::ClangFailed { .. }
        ));
        // Forced emulation on the host: the same.
        req.target = host.unwrap_or(Arch::X86_64);
        req.emulate = true;
        assert!(matches!(
            unsafe { run_with(&c, &req) }.unwrap_err(),
            Error::ClangFailed { .. }
        ));
    }
}
