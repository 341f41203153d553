//! Which compiler a compile goes to: a warm compile server from the process's pool, or a
//! clang spawned for it; and [`Compiler::compile`] and its siblings, which ask.
//!
//! `ELFJIT_COMPILER` decides: unset or empty, a server when one can be had and a spawned
//! clang otherwise, with one note per process saying why (no server for this clang, a server
//! that cannot be started or keeps failing). A process's first compile starts the server
//! on a thread of its own once its spawned clang has finished, and spawns clang meanwhile,
//! as do the compiles that come before the server is ready, so a short-lived process never
//! waits for a server's start and its first compile does not share the cores with it
//! ([`warm_in_background`], `elfjit::prepare`, and [`describe`] start it earlier); `spawn`, always a spawned
//! clang; `server`, always a server, and an error where there is none. Any other value is
//! an error naming it. Flags a server must not compile (`-mllvm`, which changes LLVM's
//! global state) are spawned whatever the setting.
//!
//! The servers are the process's own, one pool per clang, started on demand: at most the
//! available cores, up to 8 (`ELFJIT_COMPILE_SERVERS=N`, N from 1 to 256, changes it; any
//! other value is an error at the first compile). A compile takes an idle server, starts
//! one, or waits for one within its deadline ([`Compiler::timeout`]). A server unused for
//! 60 s (`ELFJIT_COMPILE_SERVER_IDLE_SECS`) exits; all of them exit with the process. A
//! request past its deadline kills its server and is [`Error::ClangTimeout`], as a
//! spawned clang's; a server that dies on a request is replaced and the request retried
//! once, then spawned (a source that crashes clang is clang's own error). Servers run in
//! the environment a spawned clang would see now (`CPATH`, ...: see the pool).
//! [`warm_in_background`] (`elfjit::prepare`) starts a server in the background.
//!
//! [`last_compile`] tells what compiled this thread's last kernel (`elfjit run --json`
//! reports it), [`last_server_timing`] how that time split between the server's compile
//! and the protocol around it, and [`describe`] what would compile the next one
//! (`elfjit --version`); [`warm_up`] has as many servers ready as a program is about
//! to compile kernels at once (`elfjit demo`).

use crate::clang::{compile_args, parse_dependencies, Compiler};
use crate::compile_server::pool::{self, Found, Pool, Served};
use crate::compile_server::{Limits, Reply, Request};
use crate::error::{Error, Result};
use crate::flags::{CompileOptions, HostInfo, Lang};
use crate::memory_limit::says_out_of_memory;
pub use crate::outcome::{CompiledBy, ServerTiming};
use std::cell::RefCell;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// The environment variable that chooses the compiler.
pub const COMPILER_ENV: &str = "ELFJIT_COMPILER";

/// What `ELFJIT_COMPILER` asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// A server where one can be had, else a spawned clang (unset or empty).
    Auto,
    /// Always spawn clang (`spawn`).
    Spawn,
    /// Always a server; no server is an error (`server`).
    Server,
}

impl Mode {
    /// The mode `ELFJIT_COMPILER=value` asks for (`None`: unset).
    pub fn from_value(value: Option<&std::ffi::OsStr>) -> Result<Mode> {
        match value.map(|v| v.to_string_lossy()) {
            None => Ok(Mode::Auto),
            Some(v) if v.is_empty() => Ok(Mode::Auto),
            Some(v) if v == "spawn" => Ok(Mode::Spawn),
            Some(v) if v == "server" => Ok(Mode::Server),
            Some(v) => Err(Error::BadArgument {
                what: format!("{COMPILER_ENV} `{v}`"),
                reason: "expected `spawn` (always run clang), `server` (always a compile \
                         server) or nothing (a server where one can be had)"
                    .to_string(),
            }),
        }
    }

    /// The mode this process's environment asks for.
    pub fn from_env() -> Result<Mode> {
        Mode::from_value(std::env::var_os(COMPILER_ENV).as_deref())
    }
}

thread_local! {
    static LAST: RefCell<Option<CompiledBy>> = const { RefCell::new(None) };
    static LAST_TIMING: RefCell<Option<ServerTiming>> = const { RefCell::new(None) };
}

/// What compiled this thread's last kernel (`None` before its first compile).
pub fn last_compile() -> Option<CompiledBy> {
    LAST.with(|l| l.borrow().clone())
}

/// The timing of this thread's last compile, if a compile server replied to it (`None`
/// when it was spawned, or before the first compile).
pub fn last_server_timing() -> Option<ServerTiming> {
    LAST_TIMING.with(|l| *l.borrow())
}

fn record(by: CompiledBy) {
    LAST.with(|l| *l.borrow_mut() = Some(by));
}

fn record_timing(timing: Option<ServerTiming>) {
    LAST_TIMING.with(|l| *l.borrow_mut() = timing);
}

/// What would compile a kernel with `compiler` now, starting a server if the pool has none
/// running (its pid is then the one reported).
pub fn describe(compiler: &Compiler) -> Result<CompiledBy> {
    warm_up(compiler, 1)
}

/// [`describe`] for a program about to compile `kernels` kernels at once: it has that
/// many servers running (at most the pool's size), started together rather than one
/// after another as the compiles would find them missing, and waits until they are
/// ready or `compiler`'s [`Compiler::timeout`] passes. Says what would compile the next
/// kernel: a server (the pid of one of them), or a spawned clang and why.
pub fn warm_up(compiler: &Compiler, kernels: usize) -> Result<CompiledBy> {
    SERVER_WANTED.store(true, Ordering::Release);
    let pool = match choose(compiler, true)? {
        Choice::Spawn(reason) => return Ok(CompiledBy::Spawned { reason }),
        Choice::Pool(pool) => pool,
    };
    let deadline = Instant::now().checked_add(compiler.timeout());
    match pool
        .warm_servers(kernels, deadline)
        .map(|pids| pids.first().copied())
    {
        Ok(Some(pid)) => Ok(CompiledBy::Server {
            pid,
            binary: pool.binary().path().to_path_buf(),
        }),
        Ok(None) => Ok(CompiledBy::Spawned {
            reason: unavailable(Mode::from_env()?, compiler, "no server".to_string())?,
        }),
        Err(why) => Ok(CompiledBy::Spawned {
            reason: unavailable(Mode::from_env()?, compiler, why)?,
        }),
    }
}

/// The pids of this process's compile servers, so that tests can find (and kill) one.
#[doc(hidden)]
pub fn server_pids() -> Vec<u32> {
    pool::all_pids()
}

enum Choice {
    Pool(Arc<Pool>),
    Spawn(String),
}

/// Where a compile goes; with `wait`, a server that is still starting is waited for.
fn choose(compiler: &Compiler, wait: bool) -> Result<Choice> {
    let mode = Mode::from_env()?;
    if mode == Mode::Spawn {
        return Ok(Choice::Spawn(format!("{COMPILER_ENV}=spawn")));
    }
    let limits = Limits::for_compiler(compiler);
    match pool::for_compiler(compiler, &limits, wait || mode == Mode::Server)? {
        Found::Pool(pool) => Ok(Choice::Pool(pool)),
        Found::Starting => Ok(Choice::Spawn(STARTING.to_string())),
        Found::Unavailable(why) => unavailable(mode, compiler, why).map(Choice::Spawn),
    }
}

/// Whether a server is wanted yet: once the process's first compile has finished, or
/// [`describe`] or [`warm_in_background`] asked for one.
static SERVER_WANTED: AtomicBool = AtomicBool::new(false);

/// Why the process's first compiles spawn clang.
const FIRST_COMPILE: &str = "the process's first compile spawns clang; the compile server \
                             starts after it";

/// Why a compile spawned clang while the first server starts.
const STARTING: &str =
    "the compile server is starting; this process's first compiles spawn clang meanwhile";

/// No server for `compiler`, for reason `why`: under [`Mode::Server`] an error, else a
/// spawned clang and the process's one note about it; returns the reason to record.
fn unavailable(mode: Mode, compiler: &Compiler, why: String) -> Result<String> {
    if mode == Mode::Server {
        return Err(Error::CompileServer {
            clang: compiler.path().to_path_buf(),
            message: format!("{COMPILER_ENV}=server, but there is no server: {why}"),
        });
    }
    pool::note_unavailable(compiler, &why);
    Ok(format!("no compile server: {why}"))
}

/// The compile entry points: each tries a compile server (`compile_on_server`), then a
/// spawned clang. They live here rather than beside the rest of [`Compiler`] so that
/// finding and spawning clang does not depend on the servers that depend on it.
impl Compiler {
    /// Compiles `source` to a relocatable ELF object, entirely through pipes: on a warm
    /// compile server of the process's pool where there is one, else by a spawned clang
    /// (the same object either way; [`last_compile`] says which and why).
    pub fn compile(&self, source: &[u8], opts: &CompileOptions) -> Result<Vec<u8>> {
        self.compile_for_host(source, opts, HostInfo::current())
    }

    /// [`Compiler::compile`] with the host description given explicitly (it decides
    /// native versus generic CPU flags).
    pub fn compile_for_host(
        &self,
        source: &[u8],
        opts: &CompileOptions,
        host: HostInfo,
    ) -> Result<Vec<u8>> {
        self.compile_routed(source, opts, host, false)
            .map(|(object, _)| object)
    }

    /// [`Compiler::compile_for_host`], also returning the files clang read besides the
    /// source (`#include`d headers, `#embed`ded data), from its `-MD` dependency output
    /// written to a pipe. LLVM IR reads no other file: the list is empty.
    pub fn compile_with_dependencies(
        &self,
        source: &[u8],
        opts: &CompileOptions,
        host: HostInfo,
    ) -> Result<(Vec<u8>, Vec<PathBuf>)> {
        self.compile_routed(source, opts, host, opts.lang == Lang::C)
    }

    fn compile_routed(
        &self,
        source: &[u8],
        opts: &CompileOptions,
        host: HostInfo,
        dependencies: bool,
    ) -> Result<(Vec<u8>, Vec<PathBuf>)> {
        let args = compile_args(opts, host);
        if Mode::from_env()? == Mode::Auto && !SERVER_WANTED.load(Ordering::Acquire) {
            // A bad pool size is an error now, as it is where the server starts at once.
            pool::size_from(std::env::var_os("ELFJIT_COMPILE_SERVERS").as_deref())?;
            record_timing(None);
            record(CompiledBy::Spawned {
                reason: FIRST_COMPILE.to_string(),
            });
            let spawned = self.compile_spawned(args, source, dependencies);
            // Now the server: its start no longer competes with that clang.
            SERVER_WANTED.store(true, Ordering::Release);
            let _ = choose(self, false);
            return spawned;
        }
        match compile_on_server(self, &args, source, dependencies)? {
            OnServer::Replied(reply) => server_result(self, reply),
            OnServer::Spawn => self.compile_spawned(args, source, dependencies),
            OnServer::SpawnAndJudge { pool, last } => {
                let spawned = self.compile_spawned(args, source, dependencies);
                if let Some(why) = pool.judge_failures(spawned.is_ok(), &last) {
                    pool::note_unavailable(self, &why);
                }
                spawned
            }
        }
    }
}

/// A compile server's reply as the spawned path's result: the same errors for a failed
/// compile, one out of memory under the limit, or an empty object (the server reports
/// clang's exit status).
fn server_result(compiler: &Compiler, reply: Reply) -> Result<(Vec<u8>, Vec<PathBuf>)> {
    let stderr = || String::from_utf8_lossy(&reply.diagnostics).into_owned();
    let failed = |status: String| Error::ClangFailed {
        clang: compiler.path().to_path_buf(),
        status,
        stderr: stderr(),
    };
    if reply.status != 0 {
        let out_of_memory = says_out_of_memory(&reply.diagnostics);
        if let Some(limit) = compiler.memory_limit().filter(|_| out_of_memory) {
            return Err(Error::ClangMemoryLimit {
                clang: compiler.path().to_path_buf(),
                limit,
                stderr: stderr(),
            });
        }
        return Err(failed(format!("exit status: {}", reply.status)));
    }
    if reply.object.is_empty() {
        return Err(failed(
            "exited successfully but wrote no object".to_string(),
        ));
    }
    let files = parse_dependencies(reply.dependencies.as_deref().unwrap_or_default());
    Ok((reply.object, files))
}

/// What [`compile_on_server`] made of a compile.
enum OnServer {
    /// A server's reply.
    Replied(Reply),
    /// Spawn clang (the reason is recorded for [`last_compile`]).
    Spawn,
    /// Spawn clang, then tell `pool` whether it compiled: servers died on this request
    /// twice, the second time with `last` ([`Pool::judge_failures`]).
    SpawnAndJudge { pool: Arc<Pool>, last: String },
}

/// Compiles `source` with the arguments a spawned `compiler` would get (`args`, after
/// the executable) on a server, when one is to be used.
fn compile_on_server(
    compiler: &Compiler,
    args: &[String],
    source: &[u8],
    want_dependencies: bool,
) -> Result<OnServer> {
    record_timing(None);
    let pool = match choose(compiler, false)? {
        Choice::Pool(pool) => pool,
        Choice::Spawn(reason) => {
            record(CompiledBy::Spawned { reason });
            return Ok(OnServer::Spawn);
        }
    };
    // The protocol carries text: a clang whose path is not UTF-8 is spawned.
    let Some(clang) = compiler.path().to_str() else {
        record(CompiledBy::Spawned {
            reason: "the clang's path is not UTF-8".to_string(),
        });
        return Ok(OnServer::Spawn);
    };
    let argv: Vec<String> = std::iter::once(clang)
        .chain(args.iter().map(String::as_str))
        .map(str::to_string)
        .collect();
    let deadline = Instant::now().checked_add(compiler.timeout());
    let request = Request {
        args: &argv,
        source,
        want_dependencies,
    };
    match pool.compile(&request, deadline, compiler)? {
        Served::Reply { reply, pid } => {
            record_timing(Some(ServerTiming {
                round_trip: reply.round_trip,
                server: reply.server_time,
            }));
            record(CompiledBy::Server {
                pid,
                binary: pool.binary().path().to_path_buf(),
            });
            Ok(OnServer::Replied(reply))
        }
        Served::Spawn {
            reason,
            fallback: true,
        } => {
            let reason = unavailable(Mode::from_env()?, compiler, reason)?;
            record(CompiledBy::Spawned { reason });
            Ok(OnServer::Spawn)
        }
        Served::Spawn {
            reason,
            fallback: false,
        } => {
            record(CompiledBy::Spawned { reason });
            Ok(OnServer::Spawn)
        }
        Served::SpawnAfterDeaths { reason, last } => {
            record(CompiledBy::Spawned { reason });
            Ok(OnServer::SpawnAndJudge { pool, last })
        }
    }
}

/// Starts a server for the clang [`Compiler::find`] finds on a thread of its own, so that
/// the first compile finds one running; does nothing under `ELFJIT_COMPILER=spawn`, with
/// no clang, or once already done. The thread only waits for the server; a process that
/// exits meanwhile takes it along (and the server sees its parent gone and exits).
pub fn warm_in_background() {
    static STARTED: std::sync::Once = std::sync::Once::new();
    SERVER_WANTED.store(true, Ordering::Release);
    STARTED.call_once(|| {
        if Mode::from_env().ok() == Some(Mode::Spawn) {
            return;
        }
        // No thread: the first compile starts the server instead.
        let _ = std::thread::Builder::new()
            .name("elfjit-compile-server-start".into())
            .spawn(|| {
                if let Ok(compiler) = Compiler::find() {
                    // Errors surface again, with their note, at the first compile.
                    let _ = choose(&compiler, true).map(|choice| match choice {
                        Choice::Pool(pool) => drop(pool.warm()),
                        Choice::Spawn(_) => {}
                    });
                }
            });
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;

    #[test]
    fn modes() {
        assert_eq!(Mode::from_value(None).unwrap(), Mode::Auto);
        assert_eq!(Mode::from_value(Some(OsStr::new(""))).unwrap(), Mode::Auto);
        assert_eq!(
            Mode::from_value(Some(OsStr::new("spawn"))).unwrap(),
            Mode::Spawn
        );
        assert_eq!(
            Mode::from_value(Some(OsStr::new("server"))).unwrap(),
            Mode::Server
        );
        let e = Mode::from_value(Some(OsStr::new("Server ")))
            .unwrap_err()
            .to_string();
        assert!(e.contains("ELFJIT_COMPILER `Server `"), "{e}");
        assert!(e.contains("spawn"), "{e}");
    }
}
