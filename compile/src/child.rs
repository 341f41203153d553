//! The one way elfjit runs a child process (clang on a pipe, the runner build, the
//! dlopen-fallback link, the emulated run under qemu).
//!
//! - The child gets its own process group; when it is done (or must be stopped) the whole
//!   group is killed, so nothing it started outlives it, and it is always reaped.
//! - A deadline bounds everything: writing stdin, reading the outputs, waiting for the
//!   exit. One thread does all of it with `poll`, so there is no helper thread to spawn
//!   (and fail to spawn) or to join, and no read that can block: a grandchild that escaped
//!   the group and still holds a pipe delays the result by at most [`AFTER_EXIT_GRACE`]
//!   after the child has exited.
//! - Each output is read into a buffer bounded by its own limit and grown with fallible
//!   allocation; more output than the limit stops the child.
//! - A deadline too far away to represent is no deadline.
//! - On Linux nothing is run in the child between `fork` and `exec` (no `pre_exec`), so
//!   the standard library can use `posix_spawn`: starting clang from a process with a
//!   large heap costs no page-table copy.
//! - A memory limit ([`Spec::memory_limit`], [`limit_memory`]) bounds the data memory of
//!   the child and of everything it starts. On Linux it is put on the child with `prlimit`
//!   right after the spawn, before any input is written (so `posix_spawn` stays
//!   possible); without `prlimit` (FreeBSD) the child sets it itself between `fork` and
//!   `exec`; macOS has no limit that would hold (`platform_macos.rs`). Children inherit
//!   it: a compiler, which works on its input, cannot start that work before the limit
//!   holds.
//! - A child in its own process group does not get the terminal's Ctrl-C; a program that
//!   must not leave children behind when it is interrupted calls
//!   [`stop_children_on_termination_signals`] (the `elfjit` CLI does).

use crate::bounded::{grow, ReadError};
use std::ffi::OsString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags};
use rustix::process::{Pid, Signal, WaitId, WaitIdOptions};

/// How long output is still collected after the child has exited and its process group
/// was killed: only a process that left the group can still hold a pipe by then.
pub const AFTER_EXIT_GRACE: Duration = Duration::from_millis(250);

/// Limits the data memory of process `pid` (this process with `None`) and of the
/// processes it starts afterwards to `bytes`: its heap, anonymous and private writable
/// mappings (`RLIMIT_DATA`, soft and hard, so it cannot raise it again). Not the address
/// space (`RLIMIT_AS`): clang maps over 100 MB of shared libraries and reserves address
/// ranges it never touches, which says nothing about the memory it takes; `RLIMIT_DATA`
/// counts exactly what it allocates (Linux 4.7 and later; earlier kernels count only
/// `brk`). Thread stacks are bounded separately by `RLIMIT_STACK`.
///
/// For a child, call it before giving it any work: what it already holds stays.
pub fn limit_memory(pid: Option<Pid>, bytes: u64) -> std::io::Result<()> {
    crate::platform::limit_data_memory(pid, bytes)
}

/// `now + timeout`, or no deadline when that cannot be represented.
pub fn deadline_after(timeout: Duration) -> Option<Instant> {
    Instant::now().checked_add(timeout)
}

/// One output stream of the child.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stream {
    /// Its standard output.
    Stdout,
    /// Its standard error.
    Stderr,
    /// The extra pipe of [`Spec::side_channel`].
    Side,
}

/// Makes the arguments that tell a child where its side channel is, from the path it
/// can open for writing.
pub type SideArgs = dyn Fn(&Path) -> Vec<OsString>;

/// What to run and within which bounds.
pub struct Spec<'a> {
    /// The program.
    pub program: &'a Path,
    /// Its arguments.
    pub args: Vec<OsString>,
    /// Its working directory (inherited if `None`).
    pub current_dir: Option<PathBuf>,
    /// Written to its stdin, in order, then stdin is closed. With no parts, stdin is
    /// `/dev/null`.
    pub input: &'a [&'a [u8]],
    /// The most stdout bytes accepted.
    pub stdout_limit: usize,
    /// The most stderr bytes accepted.
    pub stderr_limit: usize,
    /// An extra output pipe (clang's dependency file): its limit, and a function from a
    /// path the child can open for writing to reach the pipe (`/proc/<pid>/fd/<n>` of
    /// this process's end, which is not inherited) to the arguments that tell it so.
    /// The pipe's contents are complete when the child has exited.
    pub side_channel: Option<(usize, &'a SideArgs)>,
    /// When to stop it; `None` waits as long as it takes.
    pub deadline: Option<Instant>,
    /// The most data memory, in bytes, it (and each process it starts) may hold
    /// ([`limit_memory`]); `None` is no limit. A child that passes it sees its
    /// allocations fail; what it does then is its own (clang reports "out of memory").
    pub memory_limit: Option<u64>,
}

impl<'a> Spec<'a> {
    /// `program` with `args`, nothing on stdin, 1 MiB of each output, no deadline, no
    /// memory limit.
    pub fn new(program: &'a Path, args: Vec<OsString>) -> Spec<'a> {
        Spec {
            program,
            args,
            current_dir: None,
            input: &[],
            stdout_limit: 1 << 20,
            stderr_limit: 1 << 20,
            side_channel: None,
            deadline: None,
            memory_limit: None,
        }
    }
}

/// A child that exited by itself.
#[derive(Debug)]
pub struct Finished {
    /// How it exited.
    pub status: ExitStatus,
    /// Everything it wrote to stdout.
    pub stdout: Vec<u8>,
    /// Everything it wrote to stderr.
    pub stderr: Vec<u8>,
    /// Everything it wrote to the side channel.
    pub side: Vec<u8>,
}

/// Why a child did not finish by itself. In every case but `Spawn` it was killed with
/// its process group and reaped.
#[derive(Debug)]
pub enum Failure {
    /// It could not be started.
    Spawn(std::io::Error),
    /// The deadline passed. `stderr` is what it had said by then.
    TimedOut {
        /// Its diagnostics until then.
        stderr: Vec<u8>,
    },
    /// It wrote more than `limit` bytes to `stream`. `stderr` holds the head of its
    /// diagnostics.
    TooMuchOutput {
        /// The stream that overflowed.
        stream: Stream,
        /// That stream's cap, in bytes.
        limit: usize,
        /// The head of its diagnostics.
        stderr: Vec<u8>,
    },
    /// Memory for its output could not be allocated.
    OutOfMemory {
        /// The stream being read.
        stream: Stream,
        /// The buffer size that was refused.
        bytes: usize,
    },
    /// Talking to it failed.
    Io(std::io::Error),
}

/// An output pipe being read.
struct Reader {
    fd: Option<OwnedFd>,
    buf: Vec<u8>,
    limit: usize,
    stream: Stream,
}

impl Reader {
    fn new(fd: Option<OwnedFd>, limit: usize, stream: Stream) -> Reader {
        Reader {
            fd,
            buf: Vec::new(),
            limit,
            stream,
        }
    }

    /// Reads what is there; `Err` when the limit is passed or memory runs out.
    fn read_some(&mut self, scratch: &mut [u8]) -> Result<(), Failure> {
        let Some(fd) = &self.fd else { return Ok(()) };
        // One byte past the limit tells "exactly the limit" from "more".
        let room = self.limit.saturating_add(1).saturating_sub(self.buf.len());
        let want = scratch.len().min(room.max(1));
        let chunk = scratch.get_mut(..want).unwrap_or_default();
        match rustix::io::read(fd, &mut *chunk) {
            Ok(0) => self.fd = None,
            Ok(n) => {
                // Past the limit, the head up to the limit is still kept: a TooMuchOutput
                // reports the start of stderr, which a read of one big chunk would lose.
                let over = self.buf.len() + n > self.limit;
                let keep = n.min(self.limit.saturating_sub(self.buf.len()));
                grow(&mut self.buf, keep, self.limit).map_err(|e| match e {
                    ReadError::OutOfMemory { bytes } => Failure::OutOfMemory {
                        stream: self.stream,
                        bytes,
                    },
                    other => Failure::Io(std::io::Error::other(other.to_string())),
                })?;
                self.buf
                    .extend_from_slice(chunk.get(..keep).unwrap_or_default());
                if over {
                    return Err(Failure::TooMuchOutput {
                        stream: self.stream,
                        limit: self.limit,
                        stderr: Vec::new(),
                    });
                }
            }
            Err(rustix::io::Errno::AGAIN) | Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(Failure::Io(e.into())),
        }
        Ok(())
    }
}

/// The running child: killed with its group and reaped when dropped, whatever happened.
/// (Also the compile server's process: [`crate::compile_server`].)
pub(crate) struct Running {
    child: Child,
    pid: Pid,
    /// Its place in [`LIVE`], if there was room.
    slot: Option<usize>,
    reaped: bool,
}

/// Process groups of children alive now, for [`stop_children_on_termination_signals`]
/// (0: free). A fixed table of atomics, so a signal handler can read it.
static LIVE: [AtomicI32; 64] = [const { AtomicI32::new(0) }; 64];

fn register(pid: Pid) -> Option<usize> {
    let raw = pid.as_raw_nonzero().get();
    LIVE.iter().position(|slot| {
        slot.compare_exchange(0, raw, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
    })
}

fn unregister(slot: Option<usize>) {
    if let Some(s) = slot.and_then(|i| LIVE.get(i)) {
        s.store(0, Ordering::Release);
    }
}

/// Installs handlers for SIGINT, SIGTERM, SIGHUP and SIGQUIT that kill the process group
/// of every child running at that moment, then let the signal end the process as it
/// would have. Children live in their own groups (so a timeout can kill everything they
/// started), which the terminal's signals do not reach; without this an interrupted
/// elfjit would leave, say, a looping kernel under qemu running. With
/// [`crate::orphans::adopt_orphans`], every other descendant is killed too. Idempotent; for
/// programs (the CLI), not libraries, which keep their host's signal handling.
pub fn stop_children_on_termination_signals() -> std::io::Result<()> {
    static INSTALLED: AtomicBool = AtomicBool::new(false);
    if INSTALLED.swap(true, Ordering::AcqRel) {
        return Ok(());
    }
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT] {
        // SAFETY: a fully initialised action whose handler only does async-signal-safe
        // work (atomic loads, kill(2), raise(3)); SA_RESETHAND restores the default
        // action first, so raising the signal again ends the process.
        let r = unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_termination as extern "C" fn(libc::c_int) as usize;
            action.sa_flags = libc::SA_RESETHAND | libc::SA_NODEFER;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(sig, &action, std::ptr::null_mut())
        };
        if r != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

extern "C" fn on_termination(sig: libc::c_int) {
    // A process that left its group (setsid) would pass on to init when this process
    // dies; with `adopt_orphans` (the CLI), every descendant is killed
    // (first, while the process tree is whole).
    crate::orphans::kill_descendants_from_signal_handler();
    for slot in &LIVE {
        let pgid = slot.load(Ordering::Acquire);
        if pgid > 0 {
            // SAFETY: kill(2) is async-signal-safe; a registered group's leader is not
            // reaped before it is unregistered, so the id is still that group's.
            unsafe { libc::kill(-pgid, libc::SIGKILL) };
        }
    }
    // SAFETY: raise(3) is async-signal-safe; the default action is back (SA_RESETHAND).
    unsafe { libc::raise(sig) };
}

impl Running {
    /// Spawns `cmd` (which must put the child in its own process group) and registers
    /// its group for [`stop_children_on_termination_signals`].
    pub(crate) fn spawn(cmd: &mut std::process::Command) -> std::io::Result<Running> {
        let child = cmd.spawn()?;
        let pid = Pid::from_child(&child);
        Ok(Running {
            pid,
            slot: register(pid),
            child,
            reaped: false,
        })
    }

    /// Starts `cmd` with the data memory of the child (and of what it starts) limited to
    /// `memory_limit` bytes, if any: set in the child between `fork` and `exec` where the
    /// OS can only do it there, else ([`limit_memory`]) right after the spawn, before the
    /// caller gives it any work. On a failure to limit it, the child is killed and reaped.
    pub(crate) fn spawn_limited(
        cmd: &mut std::process::Command,
        memory_limit: Option<u64>,
    ) -> std::io::Result<Running> {
        let context = |bytes: u64| {
            move |e: std::io::Error| {
                std::io::Error::new(
                    e.kind(),
                    format!("cannot limit its memory to {bytes} bytes: {e}"),
                )
            }
        };
        let at_exec = match memory_limit {
            Some(bytes) => {
                crate::platform::limit_memory_at_exec(cmd, bytes).map_err(context(bytes))?
            }
            None => false,
        };
        let running = Running::spawn(cmd)?;
        if let (Some(bytes), false) = (memory_limit, at_exec) {
            // On failure `running` is dropped: killed and reaped.
            limit_memory(Some(running.pid()), bytes).map_err(context(bytes))?;
        }
        Ok(running)
    }

    /// The child's process id (its group's id too).
    pub(crate) fn pid(&self) -> Pid {
        self.pid
    }

    /// The child, for its pipes.
    pub(crate) fn child_mut(&mut self) -> &mut Child {
        &mut self.child
    }

    pub(crate) fn kill_group(&self) {
        // The child is not reaped yet, so its pid (the group's id) cannot have been
        // reused. ESRCH (nobody left) is fine.
        let _ = rustix::process::kill_process_group(self.pid, Signal::KILL);
    }

    pub(crate) fn exited(&self) -> std::io::Result<bool> {
        // WNOWAIT: look, but leave the zombie (and with it the group id) in place until
        // the group has been killed.
        let options = WaitIdOptions::EXITED | WaitIdOptions::NOHANG | WaitIdOptions::NOWAIT;
        match rustix::process::waitid(WaitId::Pid(self.pid), options) {
            Ok(status) => Ok(status.is_some()),
            Err(rustix::io::Errno::INTR) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Kills what is left of the group and reaps the child.
    pub(crate) fn finish(mut self) -> std::io::Result<ExitStatus> {
        self.kill_group();
        unregister(self.slot.take());
        self.reaped = true;
        self.child.wait()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if !self.reaped {
            self.kill_group();
            unregister(self.slot.take());
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

pub(crate) fn set_nonblocking(fd: &OwnedFd) -> std::io::Result<()> {
    let flags = rustix::fs::fcntl_getfl(fd)?;
    rustix::fs::fcntl_setfl(fd, flags | rustix::fs::OFlags::NONBLOCK)?;
    Ok(())
}

/// Waits with `poll` until one of `waits` (a role of the caller's, a descriptor, the
/// events wanted) is ready, or until `until` (or `slice`, see [`poll_timeout`]); returns
/// the roles with events and the events. A signal's interruption is no event: the caller
/// looks at its state again, as after a timeout.
pub(crate) fn poll_ready<R: Copy>(
    waits: &[(R, &OwnedFd, PollFlags)],
    until: Option<Instant>,
    slice: Option<Duration>,
) -> std::io::Result<Vec<(R, PollFlags)>> {
    let mut fds: Vec<PollFd<'_>> = waits
        .iter()
        .map(|(_, fd, events)| PollFd::new(*fd, *events))
        .collect();
    match rustix::event::poll(&mut fds, poll_timeout(until, slice).as_ref()) {
        Ok(_) => {}
        Err(rustix::io::Errno::INTR) => return Ok(Vec::new()),
        Err(e) => return Err(e.into()),
    }
    Ok(waits
        .iter()
        .zip(fds.iter())
        .map(|((role, _, _), fd)| (*role, fd.revents()))
        .filter(|(_, events)| !events.is_empty())
        .collect())
}

/// How long `poll` may sleep: until the deadline, the grace period's end, or (without a
/// pidfd to wake it at the child's exit) a short slice.
pub(crate) fn poll_timeout(
    until: Option<Instant>,
    slice: Option<Duration>,
) -> Option<rustix::event::Timespec> {
    let left = until.map(|u| u.saturating_duration_since(Instant::now()));
    let wait = match (left, slice) {
        (Some(l), Some(s)) => Some(l.min(s)),
        (l, s) => l.or(s),
    }?;
    Some(rustix::event::Timespec {
        tv_sec: i64::try_from(wait.as_secs()).unwrap_or(i64::MAX),
        tv_nsec: wait.subsec_nanos().into(),
    })
}

/// Runs `spec` to completion (see the module documentation).
pub fn run(spec: &Spec<'_>) -> Result<Finished, Failure> {
    let mut cmd = std::process::Command::new(spec.program);
    cmd.args(&spec.args)
        .stdin(if spec.input.is_empty() {
            Stdio::null()
        } else {
            Stdio::piped()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    if let Some(dir) = &spec.current_dir {
        cmd.current_dir(dir);
    }
    // The side channel: a pipe the child opens by the path of this process's write end
    // (close-on-exec, so no other child inherits it). That end stays open until the child
    // has exited; then the pipe reaches its end once drained.
    let mut side_write: Option<OwnedFd> = None;
    let mut side_reader = Reader::new(None, 0, Stream::Side);
    if let Some((limit, args)) = spec.side_channel {
        let (read, write) = crate::platform::pipe_cloexec().map_err(Failure::Spawn)?;
        let path = PathBuf::from(format!(
            "/proc/{}/fd/{}",
            std::process::id(),
            write.as_raw_fd()
        ));
        cmd.args(args(&path));
        side_write = Some(write);
        side_reader = Reader::new(Some(read), limit, Stream::Side);
    }
    // The limit holds before stdin gets a byte.
    let mut running =
        Running::spawn_limited(&mut cmd, spec.memory_limit).map_err(Failure::Spawn)?;
    let take = |fd: Option<OwnedFd>| -> Result<Option<OwnedFd>, Failure> {
        if let Some(fd) = &fd {
            set_nonblocking(fd).map_err(Failure::Io)?;
        }
        Ok(fd)
    };
    let mut stdin = take(running.child_mut().stdin.take().map(OwnedFd::from))?;
    let mut out = Reader::new(
        take(running.child_mut().stdout.take().map(OwnedFd::from))?,
        spec.stdout_limit,
        Stream::Stdout,
    );
    let mut err = Reader::new(
        take(running.child_mut().stderr.take().map(OwnedFd::from))?,
        spec.stderr_limit,
        Stream::Stderr,
    );
    if let Some(fd) = &side_reader.fd {
        set_nonblocking(fd).map_err(Failure::Io)?;
    }
    // Wakes poll when the child exits (a pidfd, Linux 5.3+); without it, poll in short slices.
    let pidfd = crate::platform::exit_notifier(running.pid);
    let slice = if pidfd.is_some() {
        None
    } else {
        Some(Duration::from_millis(10))
    };

    let mut scratch = vec![0u8; 64 * 1024];
    let (mut part, mut offset) = (0usize, 0usize);
    let mut exited_at: Option<Instant> = None;
    let with_stderr = |f: Failure, err: &Reader| match f {
        Failure::TooMuchOutput { stream, limit, .. } => Failure::TooMuchOutput {
            stream,
            limit,
            stderr: err.buf.clone(),
        },
        other => other,
    };
    loop {
        let readers_open = out.fd.is_some() || err.fd.is_some() || side_reader.fd.is_some();
        if exited_at.is_none() && running.exited().map_err(Failure::Io)? {
            // Done: take down anything it left in its group, then collect what is
            // still in the pipes for a moment.
            running.kill_group();
            exited_at = Some(Instant::now());
            stdin = None;
            side_write = None;
        }
        if !readers_open {
            break; // if it still runs, it is waited for below
        }
        let grace_end = exited_at.map(|t| t + AFTER_EXIT_GRACE);
        if grace_end.is_some_and(|g| Instant::now() >= g) {
            break;
        }
        if spec.deadline.is_some_and(|d| Instant::now() >= d) {
            return Err(Failure::TimedOut {
                stderr: std::mem::take(&mut err.buf),
            });
        }
        let until = match (spec.deadline, grace_end) {
            (Some(d), Some(g)) => Some(d.min(g)),
            (d, g) => d.or(g),
        };
        let mut waits: Vec<(u8, &OwnedFd, PollFlags)> = Vec::with_capacity(5);
        if let Some(fd) = &stdin {
            waits.push((0, fd, PollFlags::OUT));
        }
        for (role, r) in [(1u8, &out), (2, &err), (3, &side_reader)] {
            if let Some(fd) = &r.fd {
                waits.push((role, fd, PollFlags::IN));
            }
        }
        if exited_at.is_none() {
            if let Some(fd) = &pidfd {
                waits.push((4, fd, PollFlags::IN));
            }
        }
        let slice = if exited_at.is_none() { slice } else { None };
        let ready = poll_ready(&waits, until, slice).map_err(Failure::Io)?;
        drop(waits);
        for (role, events) in ready {
            match role {
                0 => {
                    let Some(fd) = &stdin else { continue };
                    if events.intersects(PollFlags::ERR | PollFlags::HUP) {
                        stdin = None;
                        continue;
                    }
                    let data = spec.input.get(part).copied().unwrap_or_default();
                    let end = data.len().min(offset + 64 * 1024);
                    match rustix::io::write(fd, data.get(offset..end).unwrap_or_default()) {
                        Ok(n) => offset += n,
                        Err(rustix::io::Errno::AGAIN) | Err(rustix::io::Errno::INTR) => {}
                        // The child stopped reading (EPIPE, or worse): its exit status
                        // and stderr tell the story.
                        Err(_) => stdin = None,
                    }
                    while spec.input.get(part).is_some_and(|d| offset >= d.len()) {
                        part += 1;
                        offset = 0;
                    }
                    if part >= spec.input.len() {
                        stdin = None; // EOF for the child
                    }
                }
                1 => out
                    .read_some(&mut scratch)
                    .map_err(|f| with_stderr(f, &err))?,
                2 => err
                    .read_some(&mut scratch)
                    .map_err(|f| with_stderr(f, &err))?,
                3 => side_reader
                    .read_some(&mut scratch)
                    .map_err(|f| with_stderr(f, &err))?,
                _ => {} // the pidfd: the exit is noticed at the top of the loop
            }
        }
    }
    drop(stdin);
    if exited_at.is_none() && side_write.is_some() {
        // Only this process still holds the side channel open: it cannot end by itself.
        side_write = None;
    }
    drop(side_write);
    if exited_at.is_none() {
        // Every pipe closed but the child still runs: wait for it, within the deadline.
        loop {
            if running.exited().map_err(Failure::Io)? {
                break;
            }
            if spec.deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(Failure::TimedOut {
                    stderr: std::mem::take(&mut err.buf),
                });
            }
            let waits: Vec<(u8, &OwnedFd, PollFlags)> =
                pidfd.iter().map(|fd| (0, fd, PollFlags::IN)).collect();
            poll_ready(&waits, spec.deadline, Some(Duration::from_millis(10)))
                .map_err(Failure::Io)?;
        }
    }
    let status = running.finish().map_err(Failure::Io)?;
    Ok(Finished {
        status,
        stdout: out.buf,
        stderr: err.buf,
        side: side_reader.buf,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> Spec<'static> {
        Spec::new(Path::new("/bin/sh"), vec!["-c".into(), script.into()])
    }

    #[test]
    fn input_output_and_status() {
        let input: &[&[u8]] = &[b"hello ", b"", b"world"];
        let mut s = sh("cat; echo oops >&2; exit 3");
        s.input = input;
        let f = run(&s).unwrap();
        assert_eq!(f.stdout, b"hello world");
        assert_eq!(f.stderr, b"oops\n");
        assert_eq!(f.status.code(), Some(3));
    }

    #[test]
    fn big_input_and_output_do_not_deadlock() {
        let big = vec![b'x'; 3 << 20];
        let input: &[&[u8]] = &[&big];
        let mut s = sh("cat; head -c 2000000 /dev/zero >&2");
        s.input = input;
        s.stdout_limit = 4 << 20;
        s.stderr_limit = 4 << 20;
        let f = run(&s).unwrap();
        assert_eq!(f.stdout.len(), big.len());
        assert_eq!(f.stderr.len(), 2_000_000);
    }

    #[test]
    fn limits_stop_the_child() {
        let mut s = sh("exec cat /dev/zero");
        s.stdout_limit = 100_000;
        match run(&s) {
            Err(Failure::TooMuchOutput {
                stream: Stream::Stdout,
                limit: 100_000,
                ..
            }) => {}
            other => panic!("{other:?}"),
        }
        let mut s = sh("echo first >&2; exec yes >&2");
        s.stderr_limit = 10_000;
        match run(&s) {
            Err(Failure::TooMuchOutput {
                stream: Stream::Stderr,
                stderr,
                ..
            }) => {
                assert!(stderr.starts_with(b"first\n"));
            }
            other => panic!("{other:?}"),
        }
        // One write far past the limit, read in one chunk: its head is still reported.
        let mut s = sh("printf 'first\\n%020000d' 0 >&2");
        s.stderr_limit = 10_000;
        match run(&s) {
            Err(Failure::TooMuchOutput {
                stream: Stream::Stderr,
                stderr,
                ..
            }) => {
                assert!(stderr.starts_with(b"first\n00"), "{stderr:?}");
                assert_eq!(stderr.len(), 10_000);
            }
            other => panic!("{other:?}"),
        }
        // Exactly the limit is fine.
        let mut s = sh("head -c 5000 /dev/zero");
        s.stdout_limit = 5000;
        assert_eq!(run(&s).unwrap().stdout.len(), 5000);
    }

    #[test]
    fn deadline_kills_the_group_and_escaped_holders_are_not_waited_for() {
        let mut s = sh("sleep 30 & wait");
        s.deadline = Some(Instant::now() + Duration::from_millis(300));
        let t = Instant::now();
        assert!(matches!(run(&s), Err(Failure::TimedOut { .. })));
        assert!(t.elapsed() < Duration::from_secs(5));
        // Exits at once while a process outside its group holds stdout.
        let s = sh("setsid sleep 3 & echo done");
        let t = Instant::now();
        let f = run(&s).unwrap();
        assert_eq!(f.stdout, b"done\n");
        assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
        // Closes its pipes but keeps running: waited for within the deadline.
        let mut s = sh("exec >/dev/null 2>&1; sleep 30");
        s.deadline = Some(Instant::now() + Duration::from_millis(300));
        assert!(matches!(run(&s), Err(Failure::TimedOut { .. })));
        assert_eq!(deadline_after(Duration::MAX), None);
    }

    #[test]
    fn the_memory_limit_holds_for_the_child_and_what_it_starts() {
        // `read` waits for stdin, which is written only once the limit is set: the `cat`
        // started after it reports the limit it inherited.
        let input: &[&[u8]] = &[b"go\n"];
        let mut s = sh("read x; cat /proc/self/limits");
        s.input = input;
        s.memory_limit = Some(256 << 20);
        let f = run(&s).unwrap();
        let limits = String::from_utf8_lossy(&f.stdout);
        let data = limits
            .lines()
            .find(|l| l.starts_with("Max data size"))
            .unwrap_or_else(|| panic!("{limits}"));
        let fields: Vec<&str> = data.split_whitespace().collect();
        assert_eq!(fields[3..5], ["268435456", "268435456"], "{data}");
        // Without one, the child keeps this process's.
        let mut s = sh("read x; cat /proc/self/limits");
        s.input = input;
        let f = run(&s).unwrap();
        assert!(!String::from_utf8_lossy(&f.stdout).contains("268435456"));
    }

    #[test]
    fn side_channel_and_spawn_failure() {
        let make = |path: &Path| {
            vec![
                OsString::from("-c"),
                format!("echo side > {}; echo out", path.display()).into(),
            ]
        };
        let mut s = Spec::new(Path::new("/bin/sh"), vec![]);
        s.side_channel = Some((100, &make));
        let f = run(&s).unwrap();
        assert_eq!(f.side, b"side\n");
        assert_eq!(f.stdout, b"out\n");
        let s = Spec::new(Path::new("/nonexistent/elfjit-child"), vec![]);
        assert!(matches!(run(&s), Err(Failure::Spawn(_))));
    }
}
