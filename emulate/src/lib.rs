//! elfjit-emulate: the emulated executor. `elfjit run --target ARCH` for an
//! architecture this machine is not, by way of qemu-user: the kernel is linked on the
//! host for a fixed address and called in elfjit's own small runner under `qemu-ARCH`.
//!
//! ```no_run
//! use elfjit::{ArgSpec, Arch, Lang, RetType, RunRequest, Scalar};
//!
//! let mut req = RunRequest::new("int add(int a, int b) { return a + b; }", Lang::C);
//! req.target = Arch::Riscv64;
//! req.ret = RetType::I32;
//! req.args = vec!["i32:2".parse::<ArgSpec>()?, "i32:40".parse()?];
//! // SAFETY: `add` takes two ints and returns one, as `req` says.
//! let outcome = unsafe { elfjit_emulate::run(&req) }?;
//! assert_eq!(outcome.ret, Some(Scalar::I32(42)));
//! # Ok::<(), elfjit::Error>(())
//! ```
//!
//! [`Emulated`] is an [`Executor`] like [`elfjit::Native`]; [`executor_for`] picks the
//! one a request needs, and [`run`], [`run_with`] and [`run_cached`] run a request on it
//! (what the `elfjit` command does).
//!
//! ```text
//! kernel.o (clang, generic CPU for ARCH) ─┐
//! shim.o   (generated C, same flags)  ────┼─► core: one image linked at IMAGE_BASE,
//! runner's symbol table (memcpy, libm) ───┘   externals resolved against the runner
//! qemu-ARCH runner  ◄── stdin: header, image, argument block, buffers
//!                   ──► stdout: return value, call time, buffers
//! ```
//!
//! The runner (`runner.c` + `support.c`) is a static, freestanding program of elfjit's
//! own, built once per architecture with clang and lld and cached on disk (see
//! [`elfjit::cache::root_dir`]). It maps the image at the address it was linked for, protects
//! its segments (never writable and executable), flushes the instruction cache, maps the
//! buffers, calls the shim and times the call. The shim ([`shim`]) is generated from the
//! `--arg`/`--ret` types and linked into the same image as the kernel, so the call obeys
//! the target's C ABI without libffi.
//!
//! Fixed addresses in the emulated process (qemu-user reserves the whole span of the
//! runner's segments, so the image must not sit between them):
//!
//! | what | address |
//! |---|---|
//! | the image (at most 16 MiB) | [`IMAGE_BASE`] = 0x1000_0000 |
//! | the runner's code and data | [`RUNNER_BASE`] = 0x1100_0000 |
//! | `elfjit_far_add` (for far-call tests) | [`FAR_ADDRESS`] = 0x2_1000_0000, about 8 GiB above the image |
//! | the argument buffers | [`BUFFER_BASE`] = 0x4_0000_0000 |
//!
//! Segments are aligned to 64 KiB ([`PAGE_SIZE`]), a multiple of every page size the
//! targets use. The runner provides `elfjit_far_add(int) -> int` (x + 1000): a kernel that
//! calls it executes a real far-call stub or veneer.
//!
//! The host architecture runs through the same path when asked to
//! ([`RunRequest::emulate`], `elfjit run --emulate`, or `ELFJIT_EMULATE=1`, see
//! [`is_emulated`]): always under
//! `qemu-<arch>`, x86_64 included, so the host checks the machinery the foreign targets
//! use.

pub mod layout;
pub mod protocol;
pub mod runner;
pub mod shim;

pub use layout::{BUFFER_BASE, FAR_ADDRESS, IMAGE_BASE, IMAGE_LIMIT, PAGE_SIZE, RUNNER_BASE};

use elfjit::args::{ArgKind, ArgOutcome, ArgSpec, Buffer, ScalarType, BUFFER_ALIGN};
use elfjit::cache::{Cache, CacheStatus};
use elfjit::clang::Compiler;
use elfjit::flags::{CompileOptions, HostInfo, Lang};
use elfjit::run::{run_on, select_entry, Compiled, Executor, RunOutcome, RunRequest, Timings};
use elfjit::{Error, Native, Result};
use elfjit_core::elf::Object;
use elfjit_core::{Arch, Plan, SegmentKind, SliceBackend};
use protocol::{Request, SegmentRange};
use shim::Slot;
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Whether `ELFJIT_EMULATE` asks for every run to go through the emulated runner (set,
/// and neither empty nor `0`).
pub fn forced_by_env() -> bool {
    std::env::var_os("ELFJIT_EMULATE").is_some_and(|v| !v.is_empty() && v != "0")
}

/// Whether `req` runs emulated: it asks to ([`RunRequest::emulate`]), `ELFJIT_EMULATE`
/// does ([`forced_by_env`]), or its target is not the host's architecture.
pub fn is_emulated(req: &RunRequest) -> bool {
    req.emulate || forced_by_env() || Arch::host() != Some(req.target)
}

/// The executor for `req`: [`Emulated`] if [`is_emulated`], else `native`.
pub fn executor_for<'a>(req: &RunRequest, native: &'a Native) -> &'a dyn Executor {
    if is_emulated(req) {
        &Emulated
    } else {
        native
    }
}

/// Runs `req` on the executor it needs ([`executor_for`]), finding clang with
/// [`Compiler::find`].
///
/// # Safety
/// As [`Executor::execute`]: a native run calls the entry in this process; an emulated
/// run executes it under qemu in another process, but the same call may run natively (a
/// host target without emulation), so the contract is the same.
pub unsafe fn run(req: &RunRequest) -> Result<RunOutcome> {
    // SAFETY: the caller upholds `run_with`'s contract.
    unsafe { run_with(&Compiler::find()?, req) }
}

/// [`run`] with a given compiler.
///
/// # Safety
/// As [`run`].
pub unsafe fn run_with(compiler: &Compiler, req: &RunRequest) -> Result<RunOutcome> {
    let native = Native::new();
    // SAFETY: the caller upholds `run`'s contract, which is `run_on`'s.
    unsafe { run_on(executor_for(req, &native), compiler, None, req) }.map(|(o, _)| o)
}

/// [`run_with`] taking the object from `cache` when it has it (native and emulated runs
/// alike: the key includes the target and flags). On a hit, `timings.compile` is the
/// lookup time.
///
/// # Safety
/// As [`run`]. A cached object is what an earlier compile of the same source produced,
/// from a cache directory only this user can write.
pub unsafe fn run_cached(
    compiler: &Compiler,
    cache: &Cache,
    req: &RunRequest,
) -> Result<(RunOutcome, CacheStatus)> {
    let native = Native::new();
    let executor = executor_for(req, &native);
    // SAFETY: the caller upholds `run`'s contract, which is `run_on`'s.
    let (outcome, status) = unsafe { run_on(executor, compiler, Some(cache), req) }?;
    Ok((outcome, status.unwrap_or(CacheStatus::Miss)))
}

/// The emulated executor: links the kernel with a generated call shim for [`IMAGE_BASE`]
/// on the host and calls it in the runner under `qemu-<target>`.
#[derive(Clone, Copy, Debug, Default)]
pub struct Emulated;

impl Executor for Emulated {
    fn prepare(&self, req: &RunRequest) -> Result<HostInfo> {
        if req.debug {
            return Err(Error::BadArgument {
                what: "--debug".into(),
                reason: "debugging runs on the host only; an emulated kernel runs inside qemu"
                    .into(),
            });
        }
        Ok(compile_host())
    }

    /// Runs the kernel in another process, under qemu: a crash or a wrong signature
    /// there is an error, not a crash of this process; the contract stays the trait's.
    unsafe fn execute(&self, compiled: &Compiled<'_>) -> Result<RunOutcome> {
        run_emulated(compiled)
    }
}

/// The host description to compile emulated kernels with: no native CPU, so the generic
/// CPU flags of the target apply (qemu emulates a baseline CPU).
pub fn compile_host() -> HostInfo {
    HostInfo {
        arch: None,
        ..HostInfo::current()
    }
}

/// The global functions `object` defines, in symbol-table order.
fn kernel_functions(object: &[u8]) -> Result<Vec<String>> {
    let obj = Object::parse(object)?;
    let mut names = Vec::new();
    for i in 1..obj.symbol_count() {
        let sym = obj.symbol(i)?;
        if sym.is_defined()
            && sym.is_global()
            && sym.kind == object::elf::STT_FUNC
            && !sym.name.is_empty()
        {
            if let Ok(n) = std::str::from_utf8(sym.name) {
                names.push(n.to_string());
            }
        }
    }
    Ok(names)
}

/// Compiles the shim with the kernel's flags for the target (at -O2 whatever the kernel's
/// level: the shim's code does not depend on it), reusing an earlier compile of the same
/// source for the same target and compiler (each clang run costs tens of milliseconds).
fn compile_shim(compiler: &Compiler, req: &RunRequest, source: &str) -> Result<Vec<u8>> {
    type Key = (std::path::PathBuf, Arch, String);
    static SHIMS: OnceLock<Mutex<HashMap<Key, Vec<u8>>>> = OnceLock::new();
    let key = (
        compiler.path().to_path_buf(),
        req.target,
        source.to_string(),
    );
    let shims = SHIMS.get_or_init(Default::default);
    if let Some(obj) = shims.lock().unwrap_or_else(|p| p.into_inner()).get(&key) {
        return Ok(obj.clone());
    }
    let opts = CompileOptions::new(Lang::C, req.target);
    let obj = compiler.compile_for_host(source.as_bytes(), &opts, compile_host())?;
    shims
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(key, obj.clone());
    Ok(obj)
}

/// One buffer's place in the buffer region.
struct Placed {
    offset: usize,
    ty: ScalarType,
    len: usize,
}

fn align_up(v: usize, a: usize) -> usize {
    v.div_ceil(a) * a
}

/// Runs the request whose kernel clang already compiled (with [`compile_host`]'s flags)
/// through the runner under qemu.
fn run_emulated(compiled: &Compiled<'_>) -> Result<RunOutcome> {
    let Compiled {
        compiler,
        request: req,
        object,
        compile,
    } = *compiled;
    let arch = req.target;
    let entry = select_entry(req.entry.as_deref(), &kernel_functions(object)?)?;
    let kinds: Vec<ArgKind> = req.args.iter().map(ArgSpec::kind).collect();
    let t = Instant::now();
    let shim_obj = compile_shim(compiler, req, &shim::source(&entry, &kinds, req.ret)?)?;
    let compile = compile + t.elapsed();
    let runner = runner::runner(compiler, arch)?;

    // Link kernel + shim on the host, for the address the runner will map them at.
    let t = Instant::now();
    let objects: [&[u8]; 2] = [object, &shim_obj];
    let plan = Plan::new(&objects, PAGE_SIZE)?;
    if plan.arch() != arch {
        return Err(Error::Unsupported(format!(
            "the object is for {}, not the requested target {arch}",
            plan.arch()
        )));
    }
    let size = plan.image_size();
    if size > IMAGE_LIMIT {
        return Err(Error::Emulation {
            target: arch,
            message: format!("the image is {size} bytes; emulated runs take at most {IMAGE_LIMIT}"),
        });
    }
    let mut memory = vec![0u8; usize::try_from(size).unwrap_or(usize::MAX)];
    let mut backend = SliceBackend::new(&mut memory, IMAGE_BASE, PAGE_SIZE);
    let mut resolve = |name: &[u8]| -> Option<u64> {
        std::str::from_utf8(name)
            .ok()
            .and_then(|n| runner.symbols.get(n).copied())
    };
    let image = plan.link(&mut backend, &mut resolve)?;
    let shim_address = image
        .symbol(shim::SHIM_SYMBOL)
        .ok_or_else(|| Error::Emulation {
            target: arch,
            message: format!("the linked image has no `{}`", shim::SHIM_SYMBOL),
        })?;
    let segments = SegmentKind::ALL.map(|kind| {
        let s = image.plan().segment(kind);
        SegmentRange {
            offset: s.offset,
            size: s.mapped,
        }
    });
    let load = t.elapsed();

    // Buffers, each 64-byte aligned in one region (allocated fallibly, once: the total
    // was capped before compiling), and the argument block.
    let region_size = req.args.iter().fold(0usize, |end, spec| match spec {
        ArgSpec::Buffer { .. } => {
            align_up(end, BUFFER_ALIGN).saturating_add(spec.buffer_bytes() as usize)
        }
        ArgSpec::Scalar(_) => end,
    });
    let mut region: Vec<u8> = Vec::new();
    region.try_reserve_exact(region_size).map_err(|_| {
        Error::Memory(format!(
            "cannot allocate {region_size} bytes for the buffers"
        ))
    })?;
    let mut placed: Vec<Option<Placed>> = Vec::with_capacity(req.args.len());
    for spec in &req.args {
        placed.push(match spec {
            ArgSpec::Buffer { ty, init } => {
                // Validates the initial values as the native path does.
                let buffer = Buffer::new(*ty, init)?;
                let offset = align_up(region.len(), BUFFER_ALIGN);
                region.resize(offset, 0);
                region.extend_from_slice(&buffer.to_le_bytes());
                Some(Placed {
                    offset,
                    ty: *ty,
                    len: buffer.len(),
                })
            }
            ArgSpec::Scalar(_) => None,
        });
    }
    let slots: Vec<Slot> = req
        .args
        .iter()
        .zip(&placed)
        .map(|(spec, p)| match (spec, p) {
            (_, Some(p)) => Slot::Pointer(BUFFER_BASE + p.offset as u64),
            (ArgSpec::Scalar(s), None) => Slot::Scalar(*s),
            (ArgSpec::Buffer { .. }, None) => Slot::Pointer(BUFFER_BASE),
        })
        .collect();
    let args = shim::pack_args(&slots);
    if args.len() > protocol::MAX_ARGS_SIZE {
        return Err(Error::Emulation {
            target: arch,
            message: format!(
                "{} arguments are more than the runner's argument block holds",
                req.args.len()
            ),
        });
    }

    let request = Request {
        image_base: IMAGE_BASE,
        image: backend.image(),
        segments,
        shim: shim_address,
        args: &args,
        buffers_base: BUFFER_BASE,
        buffers: &region,
    };
    let reply = runner::call(&runner, &request)?;

    let ret = match req.ret.scalar_type() {
        None => None,
        Some(ty) => shim::scalar_from_le(ty, &reply.ret),
    };
    drop(region);
    let args = req
        .args
        .iter()
        .zip(&placed)
        .map(|(spec, p)| match (spec, p) {
            (_, Some(p)) => {
                let bytes = reply
                    .buffers
                    .get(p.offset..p.offset + p.len * p.ty.size())
                    .unwrap_or(&[]);
                Buffer::from_le_bytes(p.ty, bytes).map(ArgOutcome::Buffer)
            }
            (ArgSpec::Scalar(s), None) => Ok(ArgOutcome::Scalar(*s)),
            (ArgSpec::Buffer { ty, .. }, None) => Buffer::zeroed(*ty, 0).map(ArgOutcome::Buffer),
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(RunOutcome {
        target: arch,
        entry,
        ret,
        args,
        timings: Timings {
            compile,
            load,
            call: Duration::from_nanos(reply.call_ns),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use elfjit::CompileError;

    #[test]
    fn foreign_target_compile_errors_come_first() {
        let c = Compiler::find().expect("clang (./scripts/setup installs clang-19)");
        let host = Arch::host();
        let foreign = Arch::ALL.into_iter().find(|a| Some(*a) != host).unwrap();
        let mut req = RunRequest::new("int f( {", Lang::C);
        req.target = foreign;
        // SAFETY: the source does not compile, so nothing is called.
        let foreign_run = unsafe { run_with(&c, &req) };
        assert!(matches!(
            foreign_run.unwrap_err(),
            Error::Compile(CompileError::ClangFailed { .. })
        ));
        // Forced emulation on the host: the same.
        req.target = host.unwrap_or(Arch::X86_64);
        req.emulate = true;
        // SAFETY: as above.
        let emulated_run = unsafe { run_with(&c, &req) };
        assert!(matches!(
            emulated_run.unwrap_err(),
            Error::Compile(CompileError::ClangFailed { .. })
        ));
    }
}
