//! The engine behind `elfjit run`: source in, a finished call and its results out.
//!
//! compile (clang on a pipe) → link in memory ([`Module::load`]) → pick the entry →
//! lay out the `--arg` buffers → call through libffi → read the buffers back.

use crate::args::{ArgOutcome, ArgSpec, Buffer, RetType, Scalar};
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
        let args: Vec<String> = self.args.iter().map(json::arg_outcome).collect();
        let cache = cache.map_or_else(String::new, |c| {
            format!(", \"cache\": {}", json::string(c.name()))
        });
        format!(
            "{{\"target\": {}, \"entry\": {}, \"return\": {}, \"args\": [{}]{cache}, \"timings_us\": {{\"compile\": {}, \"load\": {}, \"call\": {}}}}}",
            json::string(self.target.name()),
            json::string(&self.entry),
            self.ret.map_or_else(|| "null".to_string(), json::scalar),
            args.join(", "),
            json::f64_value(micros(self.timings.compile)),
            json::f64_value(micros(self.timings.load)),
            json::f64_value(micros(self.timings.call)),
        )
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
                    let ty = values.first().map_or("", |v| v.ty().name());
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
pub fn run(req: &RunRequest) -> Result<RunOutcome> {
    run_with(&Compiler::find()?, req)
}

/// Runs `req` with a given compiler: natively when `target` is the host (unless
/// emulation is asked for), otherwise through the emulated runner
/// ([`crate::emulate::run_emulated`]).
pub fn run_with(compiler: &Compiler, req: &RunRequest) -> Result<RunOutcome> {
    run_inner(compiler, None, req).map(|(outcome, _)| outcome)
}

/// [`run_with`] taking the object from `cache` when it has it (native and emulated runs
/// alike: the key includes the target and flags). On a hit, `timings.compile` is the
/// lookup time.
pub fn run_cached(
    compiler: &Compiler,
    cache: &Cache,
    req: &RunRequest,
) -> Result<(RunOutcome, CacheStatus)> {
    let (outcome, status) = run_inner(compiler, Some(cache), req)?;
    Ok((outcome, status.unwrap_or(CacheStatus::Miss)))
}

fn run_inner(
    compiler: &Compiler,
    cache: Option<&Cache>,
    req: &RunRequest,
) -> Result<(RunOutcome, Option<CacheStatus>)> {
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
        run_native(req, &object, compile)
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

fn run_native(req: &RunRequest, object: &[u8], compile: Duration) -> Result<RunOutcome> {
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

    let t = Instant::now();
    // SAFETY: `code` is the entry's address in `module`, which stays loaded (and its code
    // executable) until after the call. That the function's C signature is the one
    // `--arg`/`--ret` describe is the caller's contract, the premise of `elfjit run`: the
    // driver cannot check it. Buffer pointers stay valid (the buffers outlive the call) and
    // each holds exactly the declared number of elements.
    let ret = unsafe { interface.call(code, &values) };
    let call = t.elapsed();

    let args = req
        .args
        .iter()
        .zip(&buffers)
        .map(|(spec, buf)| match (spec, buf) {
            (_, Some(b)) => ArgOutcome::Buffer(b.values()),
            (ArgSpec::Scalar(s), None) => ArgOutcome::Scalar(*s),
            (ArgSpec::Buffer { .. }, None) => ArgOutcome::Buffer(Vec::new()),
        })
        .collect();
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
                ArgOutcome::Buffer(vec![Scalar::F64(0.5), Scalar::F64(f64::NAN)]),
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
        assert!(matches!(
            run_with(&c, &req).unwrap_err(),
            Error::ClangFailed { .. }
        ));
        // Forced emulation on the host: the same.
        req.target = host.unwrap_or(Arch::X86_64);
        req.emulate = true;
        assert!(matches!(
            run_with(&c, &req).unwrap_err(),
            Error::ClangFailed { .. }
        ));
    }
}
