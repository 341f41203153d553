//! Finding clang and running it on a pipe: source on stdin, ELF object on stdout.
//!
//! No temporary file is ever written. The source is fed from one thread and stdout and
//! stderr are drained by two more, so neither side can block on a full pipe; the child
//! is always reaped, and killed (with any process it started) when it overruns the timeout.

use crate::error::{Error, Result};
use crate::flags::{clang_args, HostInfo};
use elfjit_core::Arch;
use std::ffi::{OsStr, OsString};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{mpsc, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

/// The language of a kernel's source text.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Lang {
    /// Freestanding C (`-x c`).
    C,
    /// LLVM IR text (`-x ir`).
    Ir,
}

impl Lang {
    /// Parses a `--lang` value: `c` or `ir` (`ll` is accepted as an alias of `ir`).
    pub fn from_name(name: &str) -> Option<Lang> {
        match name {
            "c" | "C" => Some(Lang::C),
            "ir" | "IR" | "ll" | "llvm" => Some(Lang::Ir),
            _ => None,
        }
    }

    /// Guesses the language from a file extension: `.c` is C, `.ll` is LLVM IR.
    pub fn from_path(path: &Path) -> Option<Lang> {
        match path.extension()?.to_str()? {
            "c" => Some(Lang::C),
            "ll" => Some(Lang::Ir),
            _ => None,
        }
    }

    /// The name `--lang` and `-x` use (`c`, `ir`).
    pub fn name(self) -> &'static str {
        match self {
            Lang::C => "c",
            Lang::Ir => "ir",
        }
    }
}

/// What to compile for and how.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompileOptions {
    /// Source language.
    pub lang: Lang,
    /// The architecture the object is for (the host, or a foreign one for emulated runs).
    pub target: Arch,
    /// `-O` level, 0 to 3 (larger values are treated as 3).
    pub opt_level: u8,
    /// Extra clang arguments appended after the table's flags (e.g. `-DN=16`).
    pub extra_flags: Vec<String>,
    /// DWARF debug information (`-g`): source lines for debuggers and `perf annotate`.
    pub debug_info: bool,
    /// Unwind tables (`-funwind-tables`), so panics and backtraces from callbacks unwind
    /// through the kernel (the loaded `.eh_frame` is registered with the unwinder).
    pub unwind_tables: bool,
}

impl CompileOptions {
    /// Options for `lang` and `target` at `-O2` with no extra flags.
    pub fn new(lang: Lang, target: Arch) -> CompileOptions {
        CompileOptions {
            lang,
            target,
            opt_level: 2,
            extra_flags: Vec::new(),
            debug_info: false,
            unwind_tables: false,
        }
    }
}

/// C `source` prefixed with a `#line 1 "<path>"` directive naming `path` (made absolute),
/// so that debug information compiled from a pipe names the file it came from.
pub fn with_file_name(source: &[u8], path: &Path) -> Vec<u8> {
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let mut escaped = String::new();
    for c in absolute.to_string_lossy().chars() {
        match c {
            '"' | '\\' => {
                escaped.push('\\');
                escaped.push(c);
            }
            '\n' | '\r' => escaped.push('?'),
            c => escaped.push(c),
        }
    }
    let mut out = format!("#line 1 \"{escaped}\"\n").into_bytes();
    out.extend_from_slice(source);
    out
}

/// The default limit on one clang run.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);

/// A located clang executable.
#[derive(Debug)]
pub struct Compiler {
    path: PathBuf,
    timeout: Duration,
    version: OnceLock<String>,
}

impl Compiler {
    /// Finds clang: `ELFJIT_CLANG` if set (an error if it does not run), else `clang` in
    /// PATH, else the newest `clang-NN` in PATH.
    pub fn find() -> Result<Compiler> {
        Compiler::find_with(
            std::env::var_os("ELFJIT_CLANG").as_deref(),
            std::env::var_os("PATH").as_deref(),
        )
    }

    /// [`Compiler::find`] with the two environment variables passed in, so callers (and
    /// tests) can search as if the environment were different.
    pub fn find_with(clang_env: Option<&OsStr>, path_env: Option<&OsStr>) -> Result<Compiler> {
        let dirs: Vec<PathBuf> = path_env
            .map(|p| std::env::split_paths(p).collect())
            .unwrap_or_default();
        if let Some(explicit) = clang_env.filter(|v| !v.is_empty()) {
            let candidate = PathBuf::from(explicit);
            let resolved = if candidate.components().count() > 1 {
                Some(candidate.clone())
            } else {
                dirs.iter()
                    .map(|d| d.join(&candidate))
                    .find(|p| is_executable(p))
            };
            let not_found = |why: String| Error::ClangNotFound {
                tried: vec![format!("ELFJIT_CLANG={} ({why})", candidate.display())],
            };
            let path = resolved.ok_or_else(|| not_found("not found in PATH".into()))?;
            if !is_executable(&path) {
                return Err(not_found("not an executable file".into()));
            }
            let compiler = Compiler::new(path);
            // ELFJIT_CLANG is a deliberate choice: make sure it actually runs.
            compiler
                .version()
                .map_err(|e| not_found(format!("does not run: {e}")))?;
            return Ok(compiler);
        }

        if let Some(path) = dirs
            .iter()
            .map(|d| d.join("clang"))
            .find(|p| is_executable(p))
        {
            return Ok(Compiler::new(path));
        }
        if let Some(path) = newest_versioned_clang(&dirs) {
            return Ok(Compiler::new(path));
        }
        let path_desc = match path_env {
            Some(p) if !p.is_empty() => p.to_string_lossy().into_owned(),
            _ => "(empty)".to_string(),
        };
        Err(Error::ClangNotFound {
            tried: vec![
                "ELFJIT_CLANG (unset)".to_string(),
                format!("`clang` in PATH={path_desc}"),
                "`clang-NN` in PATH".to_string(),
            ],
        })
    }

    /// Uses the clang at `path`, checking that it is an executable file.
    pub fn at(path: impl Into<PathBuf>) -> Result<Compiler> {
        let path = path.into();
        if !is_executable(&path) {
            return Err(Error::ClangNotFound {
                tried: vec![format!("{} (not an executable file)", path.display())],
            });
        }
        Ok(Compiler::new(path))
    }

    fn new(path: PathBuf) -> Compiler {
        Compiler {
            path,
            timeout: DEFAULT_TIMEOUT,
            version: OnceLock::new(),
        }
    }

    /// The same compiler with a different limit per clang run.
    pub fn with_timeout(mut self, timeout: Duration) -> Compiler {
        self.timeout = timeout;
        self
    }

    /// The limit per clang run.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The clang executable.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The first line of `clang --version` (run once, then cached).
    pub fn version(&self) -> Result<String> {
        if let Some(v) = self.version.get() {
            return Ok(v.clone());
        }
        let out = self.run(&[OsString::from("--version")], &[])?;
        let text = String::from_utf8_lossy(&out.stdout);
        let first = text.lines().next().unwrap_or("").trim().to_string();
        if !out.status.success() || first.is_empty() {
            return Err(Error::ClangFailed {
                clang: self.path.clone(),
                status: out.status.to_string(),
                stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            });
        }
        Ok(self.version.get_or_init(|| first).clone())
    }

    /// Compiles `source` to a relocatable ELF object, entirely through pipes.
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
        let mut args: Vec<OsString> = clang_args(opts, host)
            .into_iter()
            .map(OsString::from)
            .collect();
        args.extend(["-", "-o", "-"].map(OsString::from));
        let out = self.run(&args, source)?;
        if !out.status.success() {
            return Err(Error::ClangFailed {
                clang: self.path.clone(),
                status: out.status.to_string(),
                stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            });
        }
        if out.stdout.is_empty() {
            return Err(Error::ClangFailed {
                clang: self.path.clone(),
                status: "exited successfully but wrote no object".to_string(),
                stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            });
        }
        Ok(out.stdout)
    }

    /// Runs clang with `args`, `input` on stdin, collecting stdout and stderr, within the
    /// timeout.
    fn run(&self, args: &[OsString], input: &[u8]) -> Result<Output> {
        let io_err = |context: String| {
            let clang = self.path.display().to_string();
            move |source| Error::Io {
                context: format!("{context} {clang}"),
                source,
            }
        };
        let mut cmd = Command::new(&self.path);
        cmd.args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        #[cfg(unix)]
        {
            use std::os::unix::process::CommandExt;
            // Own process group, so a timeout can kill anything clang started too.
            cmd.process_group(0);
        }
        let mut child = cmd.spawn().map_err(io_err("cannot start".into()))?;

        // Take all three pipes; each is closed when its thread finishes with it.
        let (stdin, stdout, stderr) =
            match (child.stdin.take(), child.stdout.take(), child.stderr.take()) {
                (Some(i), Some(o), Some(e)) => (i, o, e),
                _ => {
                    kill_and_reap(&mut child);
                    return Err(Error::Io {
                        context: format!("cannot open pipes to {}", self.path.display()),
                        source: std::io::Error::other("missing pipe"),
                    });
                }
            };

        let (done_tx, done_rx) = mpsc::channel::<()>();
        thread::scope(|scope| {
            let writer = scope.spawn(move || {
                let mut stdin = stdin;
                let r = stdin.write_all(input);
                drop(stdin); // EOF for clang
                r
            });
            let out_tx = done_tx.clone();
            let out_reader = thread::spawn(move || {
                let r = read_all(stdout);
                let _ = out_tx.send(());
                r
            });
            let err_reader = thread::spawn(move || {
                let r = read_all(stderr);
                let _ = done_tx.send(());
                r
            });

            let deadline = Instant::now() + self.timeout;
            // Both pipes reach EOF when clang exits (or closes them); then reap it.
            let mut open = 2;
            let mut status = None;
            while open > 0 {
                let left = deadline.saturating_duration_since(Instant::now());
                match done_rx.recv_timeout(left) {
                    Ok(()) => open -= 1,
                    Err(mpsc::RecvTimeoutError::Disconnected) => break,
                    Err(mpsc::RecvTimeoutError::Timeout) => break,
                }
            }
            if open == 0 {
                status = wait_until(&mut child, deadline);
            }
            let status = match status {
                Some(Ok(s)) => s,
                Some(Err(e)) => {
                    kill_and_reap(&mut child);
                    return Err(io_err("cannot wait for".into())(e));
                }
                None => {
                    kill_and_reap(&mut child);
                    // The readers end now that the process group is dead; the writer
                    // ends with EPIPE. Detach the reader threads rather than risk
                    // blocking on a pipe some stray process still holds.
                    let _ = writer.join();
                    return Err(Error::ClangTimeout {
                        clang: self.path.clone(),
                        timeout: self.timeout,
                    });
                }
            };
            let written = writer.join();
            let stdout =
                join_reader(out_reader).map_err(io_err("cannot read the output of".into()))?;
            let stderr =
                join_reader(err_reader).map_err(io_err("cannot read the errors of".into()))?;
            match written {
                Ok(Ok(())) => {}
                // clang may exit before reading all of stdin (e.g. bad flags): its
                // status and stderr tell the real story.
                Ok(Err(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
                Ok(Err(e)) => return Err(io_err("cannot write the source to".into())(e)),
                Err(_) => {
                    return Err(Error::Io {
                        context: format!("writing the source to {}", self.path.display()),
                        source: std::io::Error::other("writer thread panicked"),
                    })
                }
            }
            Ok(Output {
                status,
                stdout,
                stderr,
            })
        })
    }
}

struct Output {
    status: ExitStatus,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
}

fn read_all(mut r: impl Read) -> std::io::Result<Vec<u8>> {
    let mut buf = Vec::new();
    r.read_to_end(&mut buf)?;
    Ok(buf)
}

fn join_reader(h: thread::JoinHandle<std::io::Result<Vec<u8>>>) -> std::io::Result<Vec<u8>> {
    h.join()
        .unwrap_or_else(|_| Err(std::io::Error::other("reader thread panicked")))
}

/// Waits for the child until `deadline`; `None` when the deadline passed first.
fn wait_until(child: &mut Child, deadline: Instant) -> Option<std::io::Result<ExitStatus>> {
    let mut nap = Duration::from_micros(50);
    loop {
        match child.try_wait() {
            Ok(Some(s)) => return Some(Ok(s)),
            Ok(None) => {}
            Err(e) => return Some(Err(e)),
        }
        let now = Instant::now();
        if now >= deadline {
            return None;
        }
        thread::sleep(nap.min(deadline - now));
        nap = (nap * 2).min(Duration::from_millis(20));
    }
}

/// Kills the child (and, on Unix, its process group) and reaps it.
fn kill_and_reap(child: &mut Child) {
    #[cfg(unix)]
    {
        if let Ok(pid) = libc::pid_t::try_from(child.id()) {
            // SAFETY: kill(2) has no memory-safety preconditions. The child has not been
            // reaped yet (we reap it below), so its pid, which is also its process group
            // id (`process_group(0)`), cannot have been reused.
            unsafe {
                libc::kill(-pid, libc::SIGKILL);
            }
        }
    }
    let _ = child.kill();
    let _ = child.wait();
}

fn is_executable(path: &Path) -> bool {
    let Ok(meta) = std::fs::metadata(path) else {
        return false;
    };
    if !meta.is_file() {
        return false;
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        meta.permissions().mode() & 0o111 != 0
    }
    #[cfg(not(unix))]
    {
        true
    }
}

/// The `clang-NN` with the highest NN across `dirs` (the earliest directory wins a tie).
fn newest_versioned_clang(dirs: &[PathBuf]) -> Option<PathBuf> {
    let mut best: Option<(u32, PathBuf)> = None;
    for dir in dirs {
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(version) = name
                .to_str()
                .and_then(|n| n.strip_prefix("clang-"))
                .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|v| v.parse::<u32>().ok())
            else {
                continue;
            };
            let path = entry.path();
            if best.as_ref().is_some_and(|(b, _)| *b >= version) || !is_executable(&path) {
                continue;
            }
            best = Some((version, path));
        }
    }
    best.map(|(_, p)| p)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn scratch_dir(tag: &str) -> PathBuf {
        static N: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "elfjit-clang-test-{}-{tag}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let p = dir.join(name);
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p
    }

    #[test]
    fn no_clang_lists_what_was_tried() {
        let empty = scratch_dir("empty");
        let err = Compiler::find_with(None, Some(empty.as_os_str())).unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, Error::ClangNotFound { .. }), "{msg}");
        assert!(msg.contains("ELFJIT_CLANG"), "{msg}");
        assert!(msg.contains("clang-NN"), "{msg}");
        assert!(Compiler::find_with(None, None).is_err());
    }

    #[test]
    fn picks_plain_clang_then_newest_versioned() {
        let a = scratch_dir("a");
        let b = scratch_dir("b");
        script(&a, "clang-9", "exit 0");
        script(&a, "clang-17", "exit 0");
        script(&b, "clang-19", "exit 0");
        script(&b, "clang-19x", "exit 0");
        std::fs::write(b.join("clang-42"), "not executable").unwrap();
        let path = std::env::join_paths([&a, &b]).unwrap();
        let c = Compiler::find_with(None, Some(&path)).unwrap();
        assert_eq!(c.path(), b.join("clang-19"));
        script(&b, "clang", "exit 0");
        let c = Compiler::find_with(None, Some(&path)).unwrap();
        assert_eq!(c.path(), b.join("clang"));
    }

    #[test]
    fn explicit_clang_must_exist_and_run() {
        let d = scratch_dir("explicit");
        let missing = d.join("nope");
        let err = Compiler::find_with(Some(missing.as_os_str()), None).unwrap_err();
        assert!(err.to_string().contains("ELFJIT_CLANG="), "{err}");
        let broken = script(&d, "broken", "exit 3");
        let err = Compiler::find_with(Some(broken.as_os_str()), None).unwrap_err();
        assert!(err.to_string().contains("does not run"), "{err}");
        let fake = script(&d, "fake", "echo 'fake clang version 99'");
        let c = Compiler::find_with(Some(fake.as_os_str()), None).unwrap();
        assert_eq!(c.version().unwrap(), "fake clang version 99");
        // A bare name is looked up in PATH.
        let c = Compiler::find_with(Some(OsStr::new("fake")), Some(d.as_os_str())).unwrap();
        assert_eq!(c.path(), fake);
    }

    #[test]
    fn timeout_kills_and_reaps() {
        let d = scratch_dir("slow");
        let slow = script(&d, "slow", "sleep 30");
        let c = Compiler::at(&slow)
            .unwrap()
            .with_timeout(Duration::from_millis(300));
        let t = Instant::now();
        let err = c
            .compile(b"int x;", &CompileOptions::new(Lang::C, Arch::X86_64))
            .unwrap_err();
        assert!(matches!(err, Error::ClangTimeout { .. }), "{err}");
        assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    }

    #[test]
    fn failure_and_empty_output_are_errors() {
        let d = scratch_dir("fail");
        let failing = script(
            &d,
            "failing",
            "cat >/dev/null; echo 'boom: bad input' >&2; exit 1",
        );
        let err = Compiler::at(&failing)
            .unwrap()
            .compile(b"x", &CompileOptions::new(Lang::C, Arch::X86_64))
            .unwrap_err();
        assert!(err.to_string().contains("boom: bad input"), "{err}");
        let silent = script(&d, "silent", "exit 0");
        let err = Compiler::at(&silent)
            .unwrap()
            .compile(
                &vec![b' '; 1 << 20],
                &CompileOptions::new(Lang::C, Arch::X86_64),
            )
            .unwrap_err();
        assert!(err.to_string().contains("no object"), "{err}");
    }

    #[test]
    fn big_input_and_output_do_not_deadlock() {
        let d = scratch_dir("echo");
        // Echo 4 MiB back on stdout and a lot on stderr while still reading stdin.
        let echo = script(&d, "echo", "cat; cat /dev/zero | head -c 1000000 >&2");
        let src = vec![b'a'; 4 << 20];
        let out = Compiler::at(&echo)
            .unwrap()
            .compile(&src, &CompileOptions::new(Lang::C, Arch::X86_64))
            .unwrap();
        assert_eq!(out, src);
    }

    #[test]
    fn real_clang_compiles_for_every_target() {
        let Ok(c) = Compiler::find() else {
            eprintln!("no clang: skipped");
            return;
        };
        assert!(!c.version().unwrap().is_empty());
        for arch in Arch::ALL {
            for lang in [Lang::C, Lang::Ir] {
                let src: &[u8] = match lang {
                    Lang::C => b"float k(float *x, int n) { float s = 0; for (int i = 0; i < n; i++) s += x[i]; return s; }\n",
                    Lang::Ir => b"define i32 @k(i32 %a) {\n  %b = add i32 %a, 1\n  ret i32 %b\n}\n",
                };
                let obj = c.compile(src, &CompileOptions::new(lang, arch)).unwrap();
                assert_eq!(&obj[..4], b"\x7fELF", "{arch} {lang:?}");
            }
        }
        let err = c
            .compile(b"int f( {", &CompileOptions::new(Lang::C, Arch::X86_64))
            .unwrap_err();
        assert!(err.to_string().contains("error"), "{err}");
    }
}
