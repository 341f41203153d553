//! The client of one compile server process.
//!
//! The server runs in its own process group, registered like every child
//! ([`crate::child`]) so the CLI's termination handler kills it; it ends itself when this
//! process is gone (it watches its parent: a parent-death signal would fire when the
//! *thread* that started it exits, which a pool's threads may well do), and its data
//! memory is limited as a spawned clang's ([`Limits::memory_limit`], put on it before it
//! gets a request). One thread talks to it with `poll`: the request is written while
//! the reply is read, its stderr is drained into a capped buffer, a pidfd notices its
//! exit, and everything stops at the request's deadline, where the server is killed with
//! its group and reaped (the caller starts another). Replies are read by exact length
//! after their header is checked against the caps ([`protocol`]), so nothing is read
//! past a reply and nothing is allocated beyond a cap.

use super::binary::ServerBinary;
use super::environment::Environment;
use super::protocol::{self, Ready, ReplyHeader, READY_SIZE, REPLY_HEADER_SIZE};
use crate::child::{limit_memory, poll_ready, set_nonblocking, Running, Stream};
use crate::clang::Compiler;
use rustix::event::PollFlags;
use std::fmt;
use std::os::fd::OwnedFd;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The most of the server's own stderr kept (its head); the rest is read and dropped.
pub(crate) const MAX_SERVER_STDERR: usize = 64 << 10;
/// Sources up to this size are written with their request's header and arguments at once.
const ONE_WRITE: usize = 64 << 10;
/// How long a server that closed its stdout may take to exit before it is killed.
const EXIT_GRACE: Duration = Duration::from_millis(500);

/// The bounds a server runs within (the object, diagnostics and dependency caps are the
/// spawned path's, fixed by the [`protocol`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Limits {
    /// The most data memory the server may hold, in bytes, as a spawned clang's
    /// ([`limit_memory`], put on it before its first request); `None` is none. A server
    /// past it dies (LLVM's "out of memory"): [`ServerError::Died`] with that stderr.
    pub memory_limit: Option<u64>,
    /// The most of the server's own stderr kept for error messages.
    pub stderr_limit: usize,
}

impl Limits {
    /// The limits of `compiler`'s spawned runs ([`Compiler::memory_limit`]).
    pub(crate) fn for_compiler(compiler: &Compiler) -> Limits {
        Limits {
            memory_limit: compiler.memory_limit(),
            ..Limits::default()
        }
    }
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            memory_limit: None,
            stderr_limit: MAX_SERVER_STDERR,
        }
    }
}

/// One compile: what a spawned clang would get.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Request<'a> {
    /// The driver-level arguments, the clang executable first (as spawned, with `-` as
    /// the input and `-o -`).
    pub args: &'a [String],
    /// What clang reads on stdin.
    pub source: &'a [u8],
    /// Also return the `-MD` dependency list (the compile cache's).
    pub want_dependencies: bool,
}

/// What clang did with a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Reply {
    /// clang's exit status (0: the object is complete).
    pub status: i32,
    /// The object (what clang writes to stdout).
    pub object: Vec<u8>,
    /// clang's diagnostics (what it writes to stderr).
    pub diagnostics: Vec<u8>,
    /// The make-style dependency list (target `x`), if it was asked for.
    pub dependencies: Option<Vec<u8>>,
    /// The time the server reports for the request (read in full to reply ready).
    pub server_time: Duration,
    /// The client's time for the request, from its first byte written to the reply's
    /// last read: minus `server_time`, the protocol's overhead.
    pub round_trip: Duration,
}

/// Why a request got no reply from the server. After `Died`, `Timeout` and `Protocol` the
/// server is gone (killed and reaped); after `NeedsSpawn` and `TooMuchOutput` it serves on.
#[derive(Debug)]
pub(crate) enum ServerError {
    /// It exited (or was killed) before replying.
    Died {
        /// Its process id.
        pid: u32,
        /// How it ended.
        status: String,
        /// The head of what it wrote to stderr.
        stderr: String,
    },
    /// The deadline passed; it was killed.
    Timeout {
        /// Its process id.
        pid: u32,
        /// How long the request had.
        after: Duration,
    },
    /// It wrote something that is not a frame within the caps; it was killed.
    Protocol {
        /// Its process id.
        pid: u32,
        /// What was wrong.
        what: String,
    },
    /// The server does not compile this request (it would change the server's global
    /// state, or is not one object from stdin): spawn clang for it.
    NeedsSpawn {
        /// Why.
        reason: String,
    },
    /// An output was larger than its cap (as a spawned clang's reader would report).
    TooMuchOutput {
        /// The stream that overflowed.
        stream: Stream,
        /// Its cap.
        limit: usize,
        /// The head of clang's diagnostics.
        diagnostics: Vec<u8>,
    },
    /// The server binary no longer matches what was verified: not started.
    Untrusted {
        /// What is wrong.
        why: String,
    },
    /// Starting it or talking to it failed.
    Io {
        /// What was being done.
        context: String,
        /// The system's error.
        source: std::io::Error,
    },
}

impl fmt::Display for ServerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ServerError::Died {
                pid,
                status,
                stderr,
            } => {
                write!(f, "the compile server (pid {pid}) {status} before replying")?;
                if !stderr.trim().is_empty() {
                    write!(f, "; it said: {}", stderr.trim_end())?;
                }
                Ok(())
            }
            ServerError::Timeout { pid, after } => write!(
                f,
                "the compile server (pid {pid}) did not reply within {:.1} s and was killed",
                after.as_secs_f64()
            ),
            ServerError::Protocol { pid, what } => write!(
                f,
                "the compile server (pid {pid}) broke the protocol ({what}) and was killed"
            ),
            ServerError::NeedsSpawn { reason } => {
                write!(f, "the compile server does not take this compile: {reason}")
            }
            ServerError::TooMuchOutput { stream, limit, .. } => {
                let what = match stream {
                    Stream::Stdout => "object",
                    Stream::Stderr => "diagnostics",
                    Stream::Side => "dependency list",
                };
                write!(f, "clang's {what} is longer than {limit} bytes")
            }
            ServerError::Untrusted { why } => write!(f, "the compile server is not started: {why}"),
            ServerError::Io { context, source } => write!(f, "{context}: {source}"),
        }
    }
}

impl std::error::Error for ServerError {}

/// One running compile server; killed with its group and reaped when dropped.
pub(crate) struct Server {
    running: Option<Running>,
    pid: u32,
    /// The clang it was built for: the only one its requests may name.
    clang: String,
    /// The LLVM major version it was built against: what its ready frame must say.
    llvm_major: u32,
    stdin: Option<OwnedFd>,
    stdout: Option<OwnedFd>,
    stderr: Option<OwnedFd>,
    pidfd: Option<OwnedFd>,
    stderr_head: Vec<u8>,
    stderr_limit: usize,
    ready: Option<Ready>,
}

impl fmt::Debug for Server {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Server")
            .field("pid", &self.pid)
            .field("alive", &self.running.is_some())
            .field("ready", &self.ready)
            .finish()
    }
}

/// Where the reply being read is.
enum Phase {
    Ready([u8; READY_SIZE], usize),
    Header([u8; REPLY_HEADER_SIZE], usize),
    Body { header: ReplyHeader, part: usize },
}

fn io_error(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> ServerError {
    let context = context.into();
    move |source| ServerError::Io { context, source }
}

impl Server {
    /// Starts the server `bin` (re-verifying its bytes first) within `limits`, with the
    /// process's current environment. Returns at once: the server loads its libraries
    /// while the first request is written.
    pub(crate) fn start(bin: &ServerBinary, limits: &Limits) -> Result<Server, ServerError> {
        Server::start_with(bin, limits, &Environment::current())
    }

    /// [`Server::start`] with the variables clang reads set to `env`'s values (those of
    /// the pool it serves), whatever the process's are now.
    pub(crate) fn start_with(
        bin: &ServerBinary,
        limits: &Limits,
        env: &Environment,
    ) -> Result<Server, ServerError> {
        bin.check().map_err(|why| ServerError::Untrusted { why })?;
        let mut cmd = Command::new(bin.program());
        for (name, value) in env.vars() {
            match value {
                Some(value) => cmd.env(name, value),
                None => cmd.env_remove(name),
            };
        }
        cmd.arg(std::process::id().to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        use std::os::unix::process::CommandExt;
        // The limit holds before it gets a request: what it compiles is under it.
        let mut running =
            Running::spawn_limited(&mut cmd, limits.memory_limit).map_err(io_error(format!(
                "cannot start the compile server {}",
                bin.path().display()
            )))?;
        let pid = running.pid().as_raw_nonzero().get().unsigned_abs();
        let child = running.child_mut();
        let pipes = [
            child.stdin.take().map(OwnedFd::from),
            child.stdout.take().map(OwnedFd::from),
            child.stderr.take().map(OwnedFd::from),
        ];
        for fd in pipes.iter().flatten() {
            set_nonblocking(fd).map_err(io_error("cannot set up the compile server's pipes"))?;
        }
        let [stdin, stdout, stderr] = pipes;
        let pidfd = crate::platform::exit_notifier(running.pid());
        Ok(Server {
            running: Some(running),
            pid,
            clang: bin.clang().to_string_lossy().into_owned(),
            llvm_major: bin.llvm_major(),
            stdin,
            stdout,
            stderr,
            pidfd,
            stderr_head: Vec::new(),
            stderr_limit: limits.stderr_limit,
            ready: None,
        })
    }

    /// The server's process id.
    pub(crate) fn pid(&self) -> u32 {
        self.pid
    }

    /// Whether it can still take requests (it has not died, timed out or broken the
    /// protocol).
    pub(crate) fn is_alive(&self) -> bool {
        self.running.is_some()
    }

    /// Waits until the server has loaded its libraries and said so (a compile does this
    /// by itself; `prepare` uses it to have a warm server before the first kernel).
    pub(crate) fn wait_ready(&mut self, deadline: Instant) -> Result<Ready, ServerError> {
        if let Some(r) = self.ready {
            return Ok(r);
        }
        let started = Instant::now();
        self.exchange(&[], None, deadline, started)?;
        self.ready
            .ok_or_else(|| self.broken("it sent no ready frame".into()))
    }

    /// Compiles `req`, within `deadline`. A request naming another clang than the
    /// server's is [`ServerError::NeedsSpawn`].
    pub(crate) fn compile(
        &mut self,
        req: &Request<'_>,
        deadline: Instant,
    ) -> Result<Reply, ServerError> {
        if req.args.first() != Some(&self.clang) {
            return Err(ServerError::NeedsSpawn {
                reason: format!(
                    "the request names {:?}, and this server is built for {}",
                    req.args.first(),
                    self.clang
                ),
            });
        }
        let (header, packed) =
            protocol::encode_request(req.args, req.source.len(), req.want_dependencies).map_err(
                |u| ServerError::NeedsSpawn {
                    reason: u.to_string(),
                },
            )?;
        // A small request goes in one write: the server then wakes once for it.
        let parts: [&[u8]; 3] = [&header, &packed, req.source];
        let whole: Vec<u8> = if req.source.len() <= ONE_WRITE {
            parts.concat()
        } else {
            Vec::new()
        };
        let one: [&[u8]; 1] = [&whole];
        let input: &[&[u8]] = if whole.is_empty() { &parts } else { &one };
        let started = Instant::now();
        let mut bodies: [Vec<u8>; 3] = Default::default();
        let header = self
            .exchange(input, Some(&mut bodies), deadline, started)?
            .ok_or_else(|| self.broken("no reply".into()))?;
        let round_trip = started.elapsed();
        let [object, diagnostics, dependencies] = bodies;
        match header.kind {
            protocol::KIND_COMPILED => Ok(Reply {
                status: header.status,
                object,
                diagnostics,
                dependencies: header.has_dependencies.then_some(dependencies),
                server_time: Duration::from_nanos(header.server_ns),
                round_trip,
            }),
            protocol::KIND_NEEDS_SPAWN => Err(ServerError::NeedsSpawn {
                reason: String::from_utf8_lossy(&diagnostics).into_owned(),
            }),
            _ => {
                let (stream, limit) = match header.status {
                    protocol::STREAM_OBJECT => (Stream::Stdout, protocol::MAX_OBJECT_SIZE),
                    protocol::STREAM_DIAGNOSTICS => (Stream::Stderr, protocol::MAX_DIAGNOSTICS),
                    _ => (Stream::Side, protocol::MAX_DEPENDENCY_LIST),
                };
                Err(ServerError::TooMuchOutput {
                    stream,
                    limit: usize::try_from(limit).unwrap_or(usize::MAX),
                    diagnostics,
                })
            }
        }
    }

    /// Writes `input` and reads the ready frame (if not read yet) and, with `bodies`, one
    /// reply into them; returns the reply's header.
    fn exchange(
        &mut self,
        input: &[&[u8]],
        mut bodies: Option<&mut [Vec<u8>; 3]>,
        deadline: Instant,
        started: Instant,
    ) -> Result<Option<ReplyHeader>, ServerError> {
        if self.running.is_none() {
            return Err(ServerError::Died {
                pid: self.pid,
                status: "had already ended".into(),
                stderr: String::from_utf8_lossy(&self.stderr_head).into_owned(),
            });
        }
        let mut phase = match self.ready {
            None => Phase::Ready([0; READY_SIZE], 0),
            Some(_) => Phase::Header([0; REPLY_HEADER_SIZE], 0),
        };
        let (mut part, mut offset) = (0usize, 0usize);
        let mut scratch = [0u8; 16 << 10];
        loop {
            while input.get(part).is_some_and(|p| offset >= p.len()) {
                part += 1;
                offset = 0;
            }
            let writing = part < input.len();
            // Done: the ready frame when only that was wanted, or a whole reply.
            match &phase {
                Phase::Header(_, 0) if bodies.is_none() && !writing => return Ok(None),
                Phase::Body { header, part: 3 } => return Ok(Some(*header)),
                _ => {}
            }
            if Instant::now() >= deadline {
                self.kill();
                return Err(ServerError::Timeout {
                    pid: self.pid,
                    after: deadline.saturating_duration_since(started),
                });
            }
            let mut waits: Vec<(u8, &OwnedFd, PollFlags)> = Vec::with_capacity(4);
            if writing {
                if let Some(fd) = &self.stdin {
                    waits.push((0, fd, PollFlags::OUT));
                }
            }
            for (role, fd) in [(1u8, &self.stdout), (2, &self.stderr), (3, &self.pidfd)] {
                if let Some(fd) = fd {
                    waits.push((role, fd, PollFlags::IN));
                }
            }
            let slice = self.pidfd.is_none().then_some(Duration::from_millis(10));
            let polled = poll_ready(&waits, Some(deadline), slice);
            drop(waits);
            let ready = match polled {
                Ok(ready) => ready,
                Err(e) => {
                    self.kill();
                    return Err(io_error("cannot wait for the compile server")(e));
                }
            };
            let mut exited = false;
            for (role, events) in ready {
                match role {
                    0 => {
                        let Some(fd) = &self.stdin else { continue };
                        let data = input.get(part).copied().unwrap_or_default();
                        let chunk = data.get(offset..).unwrap_or_default();
                        match rustix::io::write(fd, chunk) {
                            Ok(n) => offset += n,
                            Err(rustix::io::Errno::AGAIN) | Err(rustix::io::Errno::INTR) => {}
                            // It stopped reading: its exit tells the story.
                            Err(_) => {
                                self.stdin = None;
                                exited = true;
                            }
                        }
                        if events.intersects(PollFlags::ERR) {
                            exited = true;
                        }
                    }
                    1 => {
                        if !self.read_reply(&mut phase, bodies.as_deref_mut(), &mut scratch)? {
                            exited = true;
                        }
                    }
                    2 => self.drain_stderr(&mut scratch),
                    _ => exited = true,
                }
            }
            if exited || (self.pidfd.is_none() && self.has_exited()) {
                // Whatever it wrote before exiting is still in the pipe: read it first.
                if self.read_reply(&mut phase, bodies.as_deref_mut(), &mut scratch)? {
                    if let Phase::Body { header, part: 3 } = &phase {
                        return Ok(Some(*header));
                    }
                    if matches!(phase, Phase::Header(_, 0)) && bodies.is_none() {
                        return Ok(None);
                    }
                    if !self.has_exited() {
                        continue;
                    }
                }
                return Err(self.died());
            }
        }
    }

    /// Reads what the server has written into the current phase. `Ok(false)` at the end
    /// of its stdout.
    fn read_reply(
        &mut self,
        phase: &mut Phase,
        mut bodies: Option<&mut [Vec<u8>; 3]>,
        scratch: &mut [u8],
    ) -> Result<bool, ServerError> {
        loop {
            let Some(fd) = &self.stdout else {
                return Ok(false);
            };
            let want: &mut [u8] = match phase {
                Phase::Ready(buf, got) => buf.get_mut(*got..).unwrap_or_default(),
                Phase::Header(buf, got) => buf.get_mut(*got..).unwrap_or_default(),
                Phase::Body { header, part } => {
                    let Some(bodies) = bodies.as_deref_mut() else {
                        return Ok(true);
                    };
                    let lens = [
                        header.object_len,
                        header.diagnostics_len,
                        header.dependencies_len,
                    ];
                    let (Some(body), Some(&len)) = (bodies.get_mut(*part), lens.get(*part)) else {
                        return Ok(true); // complete
                    };
                    let len = usize::try_from(len).unwrap_or(usize::MAX);
                    let left = len.saturating_sub(body.len());
                    if left == 0 {
                        *part += 1;
                        continue;
                    }
                    let n = left.min(scratch.len());
                    scratch.get_mut(..n).unwrap_or_default()
                }
            };
            if want.is_empty() {
                if !self.advance(phase, bodies.as_deref_mut())? {
                    return Ok(true);
                }
                continue;
            }
            let n = match rustix::io::read(fd, &mut *want) {
                Ok(0) => {
                    self.stdout = None;
                    return Ok(false);
                }
                Ok(n) => n,
                Err(rustix::io::Errno::AGAIN) => return Ok(true),
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => {
                    self.kill();
                    return Err(io_error("cannot read from the compile server")(e.into()));
                }
            };
            match phase {
                Phase::Ready(_, got) | Phase::Header(_, got) => *got += n,
                Phase::Body { part, .. } => {
                    if let Some(body) = bodies.as_deref_mut().and_then(|b| b.get_mut(*part)) {
                        body.extend_from_slice(scratch.get(..n).unwrap_or_default());
                    }
                }
            }
        }
    }

    /// Moves past a completed ready frame or header. `Ok(false)`: nothing more to read
    /// now (the ready frame was all that was wanted).
    fn advance(
        &mut self,
        phase: &mut Phase,
        bodies: Option<&mut [Vec<u8>; 3]>,
    ) -> Result<bool, ServerError> {
        match phase {
            Phase::Ready(buf, _) => {
                let ready = protocol::decode_ready(buf).map_err(|what| self.broken(what))?;
                if ready.llvm_major != self.llvm_major {
                    return Err(self.broken(format!(
                        "it runs LLVM {}, and was built for LLVM {}",
                        ready.llvm_major, self.llvm_major
                    )));
                }
                self.ready = Some(ready);
                *phase = Phase::Header([0; REPLY_HEADER_SIZE], 0);
                Ok(bodies.is_some())
            }
            Phase::Header(buf, _) => {
                let header =
                    protocol::decode_reply_header(buf).map_err(|what| self.broken(what))?;
                if let Some(bodies) = bodies {
                    for (body, len) in bodies.iter_mut().zip([
                        header.object_len,
                        header.diagnostics_len,
                        header.dependencies_len,
                    ]) {
                        let len = usize::try_from(len).unwrap_or(usize::MAX);
                        body.try_reserve_exact(len).map_err(|_| {
                            self.kill();
                            ServerError::Io {
                                context: "cannot hold the compile server's reply".into(),
                                source: std::io::Error::other(format!(
                                    "cannot allocate {len} bytes"
                                )),
                            }
                        })?;
                    }
                }
                *phase = Phase::Body { header, part: 0 };
                Ok(true)
            }
            Phase::Body { .. } => Ok(true),
        }
    }

    fn drain_stderr(&mut self, scratch: &mut [u8]) {
        let Some(fd) = &self.stderr else { return };
        loop {
            match rustix::io::read(fd, &mut *scratch) {
                Ok(0) => {
                    self.stderr = None;
                    return;
                }
                Ok(n) => {
                    let room = self.stderr_limit.saturating_sub(self.stderr_head.len());
                    let keep = n.min(room);
                    self.stderr_head
                        .extend_from_slice(scratch.get(..keep).unwrap_or_default());
                }
                Err(rustix::io::Errno::INTR) => {}
                Err(_) => return,
            }
        }
    }

    fn has_exited(&self) -> bool {
        self.running
            .as_ref()
            .is_none_or(|r| r.exited().unwrap_or(true))
    }

    /// The error for a server that broke the protocol, which is killed.
    fn broken(&mut self, what: String) -> ServerError {
        self.kill();
        ServerError::Protocol {
            pid: self.pid,
            what,
        }
    }

    /// Reaps a server that ended (killing it if it lingers) and says how it ended.
    fn died(&mut self) -> ServerError {
        let until = Instant::now() + EXIT_GRACE;
        while !self.has_exited() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(5));
        }
        let mut scratch = [0u8; 4096];
        self.drain_stderr(&mut scratch);
        let status = match self.running.take().map(Running::finish) {
            Some(Ok(s)) => describe(s),
            Some(Err(e)) => format!("ended (its status is unknown: {e})"),
            None => "had already ended".into(),
        };
        self.close();
        ServerError::Died {
            pid: self.pid,
            status,
            stderr: String::from_utf8_lossy(&self.stderr_head).into_owned(),
        }
    }

    /// Kills the server with its group and reaps it.
    fn kill(&mut self) {
        if let Some(r) = self.running.take() {
            let _ = r.finish();
        }
        self.close();
    }

    fn close(&mut self) {
        self.stdin = None;
        self.stdout = None;
        self.stderr = None;
        self.pidfd = None;
    }

    /// The server's stderr so far (its head).
    pub(crate) fn stderr(&self) -> &[u8] {
        &self.stderr_head
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// How a server ended, in words.
fn describe(status: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => {
            let meaning = match code {
                protocol::EXIT_MALFORMED => " (a malformed request)",
                protocol::EXIT_SETUP => " (it could not set itself up, or LLVM failed)",
                protocol::EXIT_IO => " (reading or writing a frame failed)",
                protocol::EXIT_PARENT_GONE => " (its parent was gone)",
                _ => "",
            };
            format!("exited with status {code}{meaning}")
        }
        (None, Some(sig)) => format!("was killed by signal {sig}"),
        _ => status.to_string(),
    }
}
