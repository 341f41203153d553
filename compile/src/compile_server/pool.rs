//! The process's compile servers: a pool per clang, started on demand, shared by every
//! thread that compiles.
//!
//! - **Size.** At most [`default_size`] servers per clang (the available cores, at most
//!   [`DEFAULT_MAX_SERVERS`]), or `ELFJIT_COMPILE_SERVERS` (a whole number from 1 to
//!   [`MAX_SERVERS`]; anything else is an error naming the value). A request takes an idle
//!   server, starts one while the pool is below its size, or waits for one to come back,
//!   never past its own deadline.
//! - **Idle servers exit.** A server unused for [`IDLE_TIMEOUT`] (or
//!   `ELFJIT_COMPILE_SERVER_IDLE_SECS`, whole seconds from 1 to [`MAX_IDLE_SECS`], read
//!   when the pool is made) is stopped, killed and reaped, by a reaper
//!   thread, started when a server is first put back idle and ending once no pool holds an
//!   idle server; each request also stops the expired servers it meets, so an idle server
//!   outlives its timeout only while the reaper cannot be started.
//! - **Killed with the process.** A [`Server`] kills and reaps its process when dropped; a
//!   server whose parent process is gone exits by itself (it watches its parent), so
//!   servers do not outlive a process that exits without dropping them.
//! - **Faults.** A request that overruns its deadline kills its server (the next request
//!   starts a replacement) and is the same [`Error::ClangTimeout`] a spawned clang gives. A
//!   server that dies, or answers outside the protocol, is dropped and the request retried
//!   once on a fresh server; after a second failure the request is spawned
//!   ([`Served::SpawnAfterDeaths`] naming both failures), so a source that crashes clang's frontend
//!   gets the spawned clang's own error (one that ran out of memory under the compiler
//!   memory limit is not retried: it is the spawned clang's [`Error::ClangMemoryLimit`]).
//!   After
//!   [`DEATHS_BEFORE_GIVING_UP`] such failures without a success in between on sources
//!   that the spawned clang then compiled ([`Pool::judge_failures`]: a source that
//!   crashes clang too is the source's fault, not the servers'), or a server
//!   that cannot be started or dies before it is ready (a library missing at run time),
//!   the pool is given up and later compiles spawn clang
//!   ([`Served::Spawn`], which says why).
//! - **Keyed by the clang**: its path and the file's identity (device, inode, size, change
//!   time), so a clang replaced in place gets a new pool and a server verified for it, and
//!   the memory limit its servers run under (the [`Compiler`]'s, as a spawned clang's),
//!   and the values of the variables clang reads from the environment
//!   ([`environment::SERVER_READS`]), with which its servers are started: a server
//!   compiles in the environment a clang spawned now would see. While a variable only
//!   the `clang` executable applies is set (`CCC_OVERRIDE_OPTIONS`, ...), compiles spawn.

use super::environment::{self, Environment};
use super::{Limits, Reply, Request, Server, ServerBinary, ServerError};
use crate::child::Failure;
use crate::clang::Compiler;
use crate::error::{Error, Result};
use crate::memory_limit::says_out_of_memory;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

/// The default most servers per clang, whatever the core count: each holds about 100 MB.
pub const DEFAULT_MAX_SERVERS: usize = 8;
/// The most servers `ELFJIT_COMPILE_SERVERS` may ask for.
pub const MAX_SERVERS: usize = 256;
/// How long an unused server stays up, without `ELFJIT_COMPILE_SERVER_IDLE_SECS`.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// The longest idle timeout `ELFJIT_COMPILE_SERVER_IDLE_SECS` may ask for (a day).
pub const MAX_IDLE_SECS: u64 = 24 * 3600;
/// How long a new server may take to load its libraries and say it is ready.
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// Failed requests in a row (each already retried once) after which a pool is given up.
pub const DEATHS_BEFORE_GIVING_UP: u32 = 3;

/// The pool size without `ELFJIT_COMPILE_SERVERS`: the available cores, at most
/// [`DEFAULT_MAX_SERVERS`].
pub fn default_size() -> usize {
    std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(DEFAULT_MAX_SERVERS)
}

/// The pool size `ELFJIT_COMPILE_SERVERS=value` asks for (unset: [`default_size`]).
pub fn size_from(value: Option<&std::ffi::OsStr>) -> Result<usize> {
    let Some(value) = value else {
        return Ok(default_size());
    };
    let text = value.to_string_lossy();
    let bad = |reason: String| Error::BadArgument {
        what: format!("ELFJIT_COMPILE_SERVERS `{text}`"),
        reason,
    };
    let n: usize = text
        .trim()
        .parse()
        .map_err(|_| bad(format!("not a whole number from 1 to {MAX_SERVERS}")))?;
    if n == 0 || n > MAX_SERVERS {
        return Err(bad(format!(
            "{n} servers; the count must be from 1 to {MAX_SERVERS} (ELFJIT_COMPILER=spawn \
             runs no server)"
        )));
    }
    Ok(n)
}

/// The idle timeout `ELFJIT_COMPILE_SERVER_IDLE_SECS=value` asks for (unset:
/// [`IDLE_TIMEOUT`]).
pub fn idle_timeout_from(value: Option<&std::ffi::OsStr>) -> Result<Duration> {
    let Some(value) = value else {
        return Ok(IDLE_TIMEOUT);
    };
    let text = value.to_string_lossy();
    match text.trim().parse::<u64>() {
        Ok(secs) if (1..=MAX_IDLE_SECS).contains(&secs) => Ok(Duration::from_secs(secs)),
        _ => Err(Error::BadArgument {
            what: format!("ELFJIT_COMPILE_SERVER_IDLE_SECS `{text}`"),
            reason: format!("not a whole number of seconds from 1 to {MAX_IDLE_SECS}"),
        }),
    }
}

/// What the pool made of a request.
pub(crate) enum Served {
    /// A server compiled it (`status` may still be a failure: a broken source).
    Reply {
        /// The server's answer.
        reply: Reply,
        /// Its process id.
        pid: u32,
    },
    /// Spawn clang for it instead, for the reason given. `fallback` is true when the pool
    /// cannot serve at all (no server, or given up), false when only this request needs
    /// a spawned clang (flags a server refuses).
    Spawn { reason: String, fallback: bool },
    /// Servers died on it twice: spawn clang for it, and tell the pool what the spawned
    /// clang made of it ([`Pool::judge_failures`]), since only that says whose fault the
    /// deaths were (a source that crashes clang's frontend crashes a spawned clang too).
    SpawnAfterDeaths { reason: String, last: String },
}

/// The servers of one clang.
pub(crate) struct Pool {
    binary: Arc<ServerBinary>,
    limits: Limits,
    /// The values of the variables clang reads, which its servers are started with.
    environment: Environment,
    size: usize,
    /// How long a server may stay idle.
    idle_timeout: Duration,
    state: Mutex<State>,
    returned: Condvar,
    /// Whether any of its servers has been ready yet.
    served: AtomicBool,
}

struct State {
    /// Servers waiting for a request, the most recently used last.
    idle: Vec<(Server, Instant)>,
    /// The pids of every server that exists: idle, serving or being started.
    pids: Vec<u32>,
    /// Servers being started (counted against the size, not yet in `pids`).
    starting: usize,
    /// Failed requests since the last success.
    failures_in_a_row: u32,
    /// Why the pool no longer serves, once it has been given up.
    given_up: Option<String>,
}

/// Who holds a server out of the pool: it goes back idle on drop unless it was taken.
struct Lease<'a> {
    pool: &'a Pool,
    server: Option<Server>,
}

impl Drop for Lease<'_> {
    fn drop(&mut self) {
        if let Some(server) = self.server.take() {
            self.pool.put_back(server);
        }
    }
}

impl Lease<'_> {
    /// Drops the server (killing it) and forgets it.
    fn kill(mut self) {
        if let Some(server) = self.server.take() {
            let pid = server.pid();
            drop(server);
            let mut state = self.pool.lock();
            state.pids.retain(|p| *p != pid);
            drop(state);
            self.pool.returned.notify_one();
        }
    }
}

enum Checkout<'a> {
    Got(Lease<'a>),
    TimedOut,
    GivenUp(String),
}

impl Checkout<'_> {
    /// The pid of the server got (which then goes back idle), or why there is none.
    fn into_pid(self) -> std::result::Result<u32, String> {
        match self {
            Checkout::Got(lease) => lease
                .server
                .as_ref()
                .map(Server::pid)
                .ok_or_else(|| "no server".to_string()),
            Checkout::TimedOut => Err("no server came back".to_string()),
            Checkout::GivenUp(why) => Err(why),
        }
    }
}

impl Pool {
    /// A pool of at most `size` servers of `binary` started within `limits` and with
    /// `environment`, each stopped after `idle_timeout` unused. Its servers start on demand.
    pub(super) fn new(
        binary: Arc<ServerBinary>,
        limits: Limits,
        environment: Environment,
        size: usize,
        idle_timeout: Duration,
    ) -> Pool {
        Pool {
            binary,
            limits,
            environment,
            size,
            idle_timeout,
            state: Mutex::new(State {
                idle: Vec::new(),
                pids: Vec::new(),
                starting: 0,
                failures_in_a_row: 0,
                given_up: None,
            }),
            returned: Condvar::new(),
            served: AtomicBool::new(false),
        }
    }

    /// Whether its first server is still being started: no server has been ready yet and
    /// the pool has not been given up.
    pub(crate) fn first_server_starting(&self) -> bool {
        !self.served.load(Ordering::Acquire) && self.lock().given_up.is_none()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The server binary this pool runs.
    pub(crate) fn binary(&self) -> &ServerBinary {
        &self.binary
    }

    /// The pids of this pool's servers.
    pub(crate) fn pids(&self) -> Vec<u32> {
        self.lock().pids.clone()
    }

    /// An idle server, a new one, or one given back before `deadline`.
    fn checkout(&self, deadline: Option<Instant>) -> Checkout<'_> {
        let mut state = self.lock();
        loop {
            if let Some(why) = &state.given_up {
                return Checkout::GivenUp(why.clone());
            }
            let expired = take_expired(&mut state, Instant::now(), self.idle_timeout);
            if !expired.is_empty() {
                drop(state);
                drop(expired);
                state = self.lock();
                continue;
            }
            if let Some((server, _)) = state.idle.pop() {
                return Checkout::Got(Lease {
                    pool: self,
                    server: Some(server),
                });
            }
            if state.pids.len() + state.starting < self.size {
                state.starting += 1;
                drop(state);
                let started = self.start(deadline);
                let mut state = self.lock();
                state.starting -= 1;
                return match started {
                    Ok(server) => {
                        state.pids.push(server.pid());
                        Checkout::Got(Lease {
                            pool: self,
                            server: Some(server),
                        })
                    }
                    Err(None) => {
                        drop(state);
                        // Its place is free again.
                        self.returned.notify_one();
                        Checkout::TimedOut
                    }
                    Err(Some(why)) => {
                        state.given_up = Some(why.clone());
                        drop(state);
                        // Waiters see the pool given up.
                        self.returned.notify_all();
                        Checkout::GivenUp(why)
                    }
                };
            }
            state = match deadline {
                None => self.returned.wait(state).unwrap_or_else(|p| p.into_inner()),
                Some(deadline) => {
                    let Some(left) = deadline.checked_duration_since(Instant::now()) else {
                        return Checkout::TimedOut;
                    };
                    self.returned
                        .wait_timeout(state, left)
                        .unwrap_or_else(|p| p.into_inner())
                        .0
                }
            };
        }
    }

    /// A new server, ready for requests (its libraries loaded). `Err(None)`: `deadline`
    /// came first, which is the request's doing; `Err(Some(why))`: no server can be
    /// started here (it cannot be run, is no longer the verified file, or exits or hangs
    /// before it is ready).
    fn start(&self, deadline: Option<Instant>) -> std::result::Result<Server, Option<String>> {
        let failed = |e: ServerError| {
            Some(format!(
                "the compile server {} could not be started: {e}",
                self.binary.path().display()
            ))
        };
        let mut server =
            Server::start_with(&self.binary, &self.limits, &self.environment).map_err(failed)?;
        let own = Instant::now() + START_TIMEOUT;
        let until = deadline.map_or(own, |d| d.min(own));
        match server.wait_ready(until) {
            Ok(_) => {
                self.served.store(true, Ordering::Release);
                Ok(server)
            }
            Err(ServerError::Timeout { .. }) if until < own => Err(None),
            Err(e) => Err(failed(e)),
        }
    }

    fn put_back(&self, server: Server) {
        let mut state = self.lock();
        if state.given_up.is_some() {
            let pid = server.pid();
            state.pids.retain(|p| *p != pid);
            drop(state);
            drop(server);
        } else {
            state.idle.push((server, Instant::now()));
            drop(state);
            reaper::ensure_running();
        }
        self.returned.notify_one();
    }

    /// Compiles `request` on a server before `deadline`, as the module's documentation
    /// says; `clang` and `timeout` name the compiler and its limit in errors.
    pub(crate) fn compile(
        &self,
        request: &Request<'_>,
        deadline: Option<Instant>,
        clang: &Compiler,
    ) -> Result<Served> {
        let timeout = || Error::ClangTimeout {
            clang: clang.path().to_path_buf(),
            timeout: clang.timeout(),
        };
        if let Some(reason) = environment::needs_spawn() {
            return Ok(Served::Spawn {
                reason,
                fallback: false,
            });
        }
        let mut first_failure: Option<String> = None;
        loop {
            let mut lease = match self.checkout(deadline) {
                Checkout::Got(lease) => lease,
                Checkout::TimedOut => return Err(timeout()),
                Checkout::GivenUp(reason) => {
                    return Ok(Served::Spawn {
                        reason,
                        fallback: true,
                    })
                }
            };
            let Some(server) = lease.server.as_mut() else {
                continue;
            };
            let pid = server.pid();
            // A request with no deadline still ends: a server that stops answering is
            // killed at the latest when the process's servers are.
            let far = Instant::now() + Duration::from_secs(365 * 24 * 3600);
            match server.compile(request, deadline.unwrap_or(far)) {
                Ok(reply) => {
                    self.lock().failures_in_a_row = 0;
                    return Ok(Served::Reply { reply, pid });
                }
                Err(ServerError::NeedsSpawn { reason }) => {
                    return Ok(Served::Spawn {
                        reason: format!("the compile server does not take this compile: {reason}"),
                        fallback: false,
                    });
                }
                Err(ServerError::TooMuchOutput {
                    stream,
                    limit,
                    diagnostics,
                }) => {
                    // The server serves on; the error is the spawned clang's.
                    let too_much = Failure::TooMuchOutput {
                        stream,
                        limit,
                        stderr: diagnostics,
                    };
                    return Err(clang.failure(too_much, "object"));
                }
                Err(ServerError::Timeout { .. }) => {
                    lease.kill();
                    return Err(timeout());
                }
                // Out of memory under the compiler memory limit: the source's doing, which
                // a retry would only repeat. The spawned clang's error.
                Err(ServerError::Died { stderr, .. })
                    if clang.memory_limit().is_some() && says_out_of_memory(stderr.as_bytes()) =>
                {
                    lease.kill();
                    return Err(Error::ClangMemoryLimit {
                        clang: clang.path().to_path_buf(),
                        limit: clang.memory_limit().unwrap_or_default(),
                        stderr,
                    });
                }
                Err(e) => {
                    let what = e.to_string();
                    lease.kill();
                    let Some(first) = first_failure.take() else {
                        first_failure = Some(what);
                        continue;
                    };
                    // Spawned, the request gets clang's own verdict (a source that
                    // crashes clang's frontend is clang's error, not the server's).
                    return Ok(Served::SpawnAfterDeaths {
                        reason: format!(
                            "the compile server failed on this request twice: first {first}; \
                             then, retried on another server, {what}"
                        ),
                        last: what,
                    });
                }
            }
        }
    }

    /// What a spawned clang made of a request servers died on twice
    /// ([`Served::SpawnAfterDeaths`], `last` the second death): if it compiled, the
    /// servers failed where clang does not, which counts towards giving the pool up
    /// ([`DEATHS_BEFORE_GIVING_UP`] such requests in a row); if clang failed too, the
    /// source was at fault and nothing counts. Returns why the pool was given up, if this
    /// gave it up.
    pub(crate) fn judge_failures(&self, spawned_compiled: bool, last: &str) -> Option<String> {
        if !spawned_compiled {
            return None;
        }
        let mut state = self.lock();
        if state.given_up.is_some() {
            return None;
        }
        state.failures_in_a_row += 1;
        if state.failures_in_a_row < DEATHS_BEFORE_GIVING_UP {
            return None;
        }
        let why = format!(
            "compile servers failed on {} requests in a row that clang itself compiles, \
             the last with: {last}",
            state.failures_in_a_row
        );
        state.given_up = Some(why.clone());
        drop(state);
        // Waiters see the pool given up.
        self.returned.notify_all();
        Some(why)
    }

    /// Takes a server (starting one if none is idle) and puts it back: what
    /// [`crate::route::warm_in_background`] does so the first compile finds one running. Returns its pid.
    pub(crate) fn warm(&self) -> std::result::Result<u32, String> {
        self.checkout(None).into_pid()
    }

    /// Has `count` servers running at once (at most the pool's size, at least one),
    /// starting the missing ones together rather than one after another, and waits until
    /// each is ready or `deadline` passes: what a program about to compile `count`
    /// kernels at once asks for. Returns their pids.
    pub(crate) fn warm_servers(
        &self,
        count: usize,
        deadline: Option<Instant>,
    ) -> std::result::Result<Vec<u32>, String> {
        let count = count.clamp(1, self.size.max(1));
        // Each lease is held until every thread has one, so that the leases are different
        // servers; then all go back idle.
        let all_held = std::sync::Barrier::new(count);
        let held: Vec<std::result::Result<u32, String>> = std::thread::scope(|s| {
            let threads: Vec<_> = (0..count)
                .map(|_| {
                    s.spawn(|| {
                        let got = self.checkout(deadline);
                        all_held.wait();
                        got.into_pid()
                    })
                })
                .collect();
            threads
                .into_iter()
                .map(|t| {
                    t.join()
                        .unwrap_or_else(|_| Err("a thread starting a server panicked".to_string()))
                })
                .collect()
        });
        let mut pids = Vec::with_capacity(held.len());
        let mut why = None;
        for one in held {
            match one {
                Ok(pid) => pids.push(pid),
                Err(e) => why = Some(e),
            }
        }
        match (pids.is_empty(), why) {
            (true, Some(why)) => Err(why),
            _ => Ok(pids),
        }
    }

    /// Stops the idle servers unused for its idle timeout at `now`; whether any idle
    /// server is left.
    fn reap(&self, now: Instant) -> bool {
        let mut state = self.lock();
        let expired = take_expired(&mut state, now, self.idle_timeout);
        let left = !state.idle.is_empty();
        drop(state);
        drop(expired);
        left
    }
}

/// Removes the idle servers unused for `timeout` at `now` from `state` (and their pids),
/// for the caller to drop outside the lock: dropping one kills and reaps it.
fn take_expired(state: &mut State, now: Instant, timeout: Duration) -> Vec<Server> {
    let mut expired = Vec::new();
    let mut i = 0;
    while let Some((_, since)) = state.idle.get(i) {
        if now.saturating_duration_since(*since) >= timeout {
            let (server, _) = state.idle.remove(i);
            let pid = server.pid();
            state.pids.retain(|p| *p != pid);
            expired.push(server);
        } else {
            i += 1;
        }
    }
    expired
}

/// What identifies a clang and the servers that may serve it.
#[derive(Clone, PartialEq, Eq, Debug)]
struct Key {
    path: PathBuf,
    /// Device, inode, size and change time of the file the path names.
    file: (u64, u64, u64, i64, i64),
    memory_limit: Option<u64>,
    environment: Environment,
}

/// A clang's pool (or why it has none), made once; `starting` once someone makes it.
#[derive(Default)]
struct SlotInner {
    made: OnceLock<std::result::Result<Arc<Pool>, String>>,
    starting: AtomicBool,
}

type Slot = Arc<SlotInner>;

/// Every pool of the process, with the clangs for which no server could be had, and the
/// process they belong to.
static POOLS: Mutex<Pools> = Mutex::new(Pools {
    owner: 0,
    pools: Vec::new(),
});

struct Pools {
    owner: u32,
    pools: Vec<(Key, Slot)>,
}

impl Pools {
    /// The pools of this process. A child forked from the process that started them
    /// inherits their pipes but not the servers: its requests would interleave with the
    /// parent's, and dropping them would kill the parent's servers. The child forgets them
    /// (leaking their memory and descriptors) and starts its own.
    fn mine(&mut self) -> &mut Vec<(Key, Slot)> {
        let me = std::process::id();
        if self.owner != me {
            std::mem::forget(std::mem::take(&mut self.pools));
            self.owner = me;
        }
        &mut self.pools
    }

    fn all(&mut self) -> Vec<Arc<Pool>> {
        self.mine()
            .iter()
            .filter_map(|(_, slot)| slot.made.get().and_then(|p| p.as_ref().ok()).cloned())
            .collect()
    }
}

/// The process's one note that `clang` compiles without a server, and why.
pub(crate) fn note_unavailable(clang: &Compiler, why: &str) {
    crate::notes::once("compile server", "unavailable", || {
        format!(
            "compiling with a spawned {} for every kernel (slower): {why}",
            clang.path().display()
        )
    });
}

/// What the process has for a clang.
pub(crate) enum Found {
    /// Its pool.
    Pool(Arc<Pool>),
    /// No server can be had, for this reason.
    Unavailable(String),
    /// Its first server is being found (or built) and started in the background: spawn
    /// clang for this compile rather than wait (a fresh process's first compile costs a
    /// spawned clang's time, not a server's start on top).
    Starting,
}

/// The pool for `clang`'s servers under `limits`, made on first use (finding, verifying
/// or building its server, then starting one). With `wait`, made (and found) now;
/// without, while the pool's first server is not ready, it is made and started on a
/// thread of its own and the answer is [`Found::Starting`].
pub(crate) fn for_compiler(clang: &Compiler, limits: &Limits, wait: bool) -> Result<Found> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(clang.path()).map_err(|source| Error::Io {
        context: format!("cannot read what {} is", clang.path().display()),
        source,
    })?;
    let key = Key {
        path: clang.path().to_path_buf(),
        file: (
            meta.dev(),
            meta.ino(),
            meta.size(),
            meta.ctime(),
            meta.ctime_nsec(),
        ),
        memory_limit: limits.memory_limit,
        environment: Environment::current(),
    };
    // The CLI's exit kills the servers without waiting for them to unmap LLVM.
    crate::orphans::kill_only_at_exit(all_pids);
    let slot: Slot = {
        let mut pools = POOLS.lock().unwrap_or_else(|p| p.into_inner());
        let pools = pools.mine();
        match pools.iter().find(|(k, _)| *k == key) {
            Some((_, slot)) => slot.clone(),
            None => {
                let slot = Slot::default();
                pools.push((key.clone(), slot.clone()));
                slot
            }
        }
    };
    let found = |made: &std::result::Result<Arc<Pool>, String>| match made {
        Ok(pool) if !wait && pool.first_server_starting() => Found::Starting,
        Ok(pool) => Found::Pool(pool.clone()),
        Err(why) => Found::Unavailable(why.clone()),
    };
    if let Some(made) = slot.made.get() {
        return Ok(found(made));
    }
    let size = size_from(std::env::var_os("ELFJIT_COMPILE_SERVERS").as_deref())?;
    let idle = idle_timeout_from(std::env::var_os("ELFJIT_COMPILE_SERVER_IDLE_SECS").as_deref())?;
    let environment = key.environment.clone();
    let make = move |slot: &SlotInner, clang: &Compiler, limits: &Limits| {
        slot.made.get_or_init(|| {
            ServerBinary::for_compiler(clang)
                .map(|binary| {
                    let env = environment.clone();
                    Arc::new(Pool::new(binary, limits.clone(), env, size, idle))
                })
                .map_err(|u| u.to_string())
        });
    };
    let first = !slot.starting.swap(true, Ordering::AcqRel);
    if !wait {
        if !first {
            return Ok(Found::Starting);
        }
        let (background, clang2, limits2) = (slot.clone(), clang.clone(), limits.clone());
        let make = make.clone();
        let started = std::thread::Builder::new()
            .name("elfjit-compile-server-start".into())
            .spawn(move || {
                make(&background, &clang2, &limits2);
                match background.made.get() {
                    // A failure gives the pool up: the next compile says why.
                    Some(Ok(pool)) => drop(pool.warm()),
                    Some(Err(why)) => note_unavailable(&clang2, why),
                    None => {}
                }
            });
        if started.is_ok() {
            return Ok(Found::Starting);
        }
    }
    make(&slot, clang, limits);
    // Made here, and the caller's compile starts its first server.
    Ok(match slot.made.get() {
        Some(Ok(pool)) => Found::Pool(pool.clone()),
        Some(Err(why)) => Found::Unavailable(why.clone()),
        None => Found::Unavailable("the compile server's pool was not made".to_string()),
    })
}

/// The pids of every compile server of this process that is ready or serving (for tests
/// that must find one, and for the exit-time kill).
pub(crate) fn all_pids() -> Vec<u32> {
    let pools = POOLS.lock().unwrap_or_else(|p| p.into_inner()).all();
    pools.iter().flat_map(|pool| pool.pids()).collect()
}

/// The thread that stops idle servers.
mod reaper {
    use super::{IDLE_TIMEOUT, POOLS};
    use std::sync::Mutex;
    use std::time::Duration;
    use std::time::Instant;

    /// The process whose reaper runs (a forked child has none, whatever it inherited).
    static RUNNING: Mutex<Option<u32>> = Mutex::new(None);

    /// Starts the reaper unless it runs. If the system refuses a thread, requests still
    /// stop the expired servers they meet.
    pub(super) fn ensure_running() {
        let me = std::process::id();
        let mut running = RUNNING.lock().unwrap_or_else(|p| p.into_inner());
        if *running == Some(me) {
            return;
        }
        *running = std::thread::Builder::new()
            .name("elfjit-compile-server-reaper".into())
            .spawn(run)
            .is_ok()
            .then_some(me);
    }

    fn run() {
        loop {
            // A quarter of the shortest idle timeout: a server exits at most a quarter
            // late.
            let pools = POOLS.lock().unwrap_or_else(|p| p.into_inner()).all();
            let shortest = pools.iter().map(|p| p.idle_timeout).min();
            drop(pools);
            std::thread::sleep(shortest.unwrap_or(IDLE_TIMEOUT) / 4);
            let pools = POOLS.lock().unwrap_or_else(|p| p.into_inner()).all();
            let now = Instant::now();
            let mut any_idle = false;
            for pool in pools {
                any_idle |= pool.reap(now);
            }
            // Decided under the lock `ensure_running` takes, so a server put back idle
            // after this check starts a new reaper.
            let mut running = RUNNING.lock().unwrap_or_else(|p| p.into_inner());
            if !any_idle {
                *running = None;
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;

    #[test]
    fn server_counts() {
        assert_eq!(size_from(None).unwrap(), default_size());
        assert!((1..=DEFAULT_MAX_SERVERS).contains(&default_size()));
        assert_eq!(size_from(Some(OsStr::new("3"))).unwrap(), 3);
        assert_eq!(size_from(Some(OsStr::new(" 12 "))).unwrap(), 12);
        for bad in ["0", "-1", "many", "", "257", "99999999999999999999999"] {
            let e = size_from(Some(OsStr::new(bad))).unwrap_err().to_string();
            assert!(e.contains("ELFJIT_COMPILE_SERVERS"), "{bad}: {e}");
            assert!(e.contains(&format!("`{bad}`")), "{bad}: {e}");
        }
    }
}
