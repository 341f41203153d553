//! Finding clang and running it on a pipe: source on stdin, ELF object on stdout.
//!
//! No temporary file is ever written. clang runs through [`crate::child`]: its own process
//! group, one thread polling stdin, stdout and stderr so neither side can block on a full
//! pipe, every output bounded ([`MAX_OBJECT_SIZE`], [`MAX_DIAGNOSTICS`]), the whole group
//! killed when it overruns the timeout, and always reaped.

use crate::bounded::describe_size;
use crate::child::{self, deadline_after, Failure, Finished, SideArgs, Spec, Stream};
use crate::error::{Error, Result};
use crate::flags::{clang_args, HostInfo};
pub use crate::flags::{CompileOptions, Lang};
use crate::memory_limit::{compile_memory_from_env, default_compile_memory, says_out_of_memory};
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

/// The most object bytes read from clang: the largest image the core plans
/// ([`elfjit_core::plan::MAX_IMAGE_SIZE`]) plus 64 MiB for the object's own tables. More
/// stops clang (its process group is killed) and is an error.
pub const MAX_OBJECT_SIZE: usize = (elfjit_core::plan::MAX_IMAGE_SIZE as usize) + (64 << 20);
/// The most diagnostics read from clang's stderr; the head is kept and reported.
pub const MAX_DIAGNOSTICS: usize = 4 << 20;
/// The most bytes of `clang --version` output read.
const MAX_VERSION_OUTPUT: usize = 64 << 10;
/// The most bytes of dependency list (`-MD`) read for the compile cache.
pub(crate) const MAX_DEPENDENCY_LIST: usize = 1 << 20;

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
#[derive(Clone, Debug)]
pub struct Compiler {
    path: PathBuf,
    timeout: Duration,
    memory_limit: Option<u64>,
    version: OnceLock<String>,
}

impl Compiler {
    /// Finds clang: `ELFJIT_CLANG` if set (an error if it does not run), else the first
    /// `clang` in PATH, else a versioned `clang-NN`: the first directory in PATH that
    /// holds one decides, and within it the highest NN (written without leading zeros)
    /// wins. PATH order is the user's order of preference, so a directory late in PATH
    /// never overrides an earlier one, and the choice does not depend on the order a
    /// directory lists its files in.
    ///
    /// Its memory limit is `ELFJIT_COMPILE_MEMORY`'s (an error if that is not a size),
    /// else [`default_compile_memory`]; see [`Compiler::with_memory_limit`].
    pub fn find() -> Result<Compiler> {
        let memory_limit = compile_memory_from_env()?;
        Ok(Compiler::find_with(
            std::env::var_os("ELFJIT_CLANG").as_deref(),
            std::env::var_os("PATH").as_deref(),
        )?
        .with_memory_limit(memory_limit))
    }

    /// [`Compiler::find`] with the two environment variables passed in, so callers (and
    /// tests) can search as if the environment were different. The memory limit is
    /// [`default_compile_memory`], whatever the environment says.
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
        if let Some(path) = versioned_clang(&dirs) {
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

    /// Uses the clang at `path`, checking that it is an executable file. The memory limit
    /// is `ELFJIT_COMPILE_MEMORY`'s, as for [`Compiler::find`].
    pub fn at(path: impl Into<PathBuf>) -> Result<Compiler> {
        let path = path.into();
        if !is_executable(&path) {
            return Err(Error::ClangNotFound {
                tried: vec![format!("{} (not an executable file)", path.display())],
            });
        }
        Ok(Compiler::new(path).with_memory_limit(compile_memory_from_env()?))
    }

    fn new(path: PathBuf) -> Compiler {
        Compiler {
            path,
            timeout: DEFAULT_TIMEOUT,
            memory_limit: default_compile_memory(),
            version: OnceLock::new(),
        }
    }

    /// The same compiler with a different limit per clang run (one too large to add to
    /// the current time, such as [`Duration::MAX`], is no limit).
    pub fn with_timeout(mut self, timeout: Duration) -> Compiler {
        self.timeout = timeout;
        self
    }

    /// The limit per clang run.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The same compiler with a different memory limit per clang run, in bytes (`None`:
    /// no limit). Every process of a run (clang, and what it starts) is held to it
    /// ([`child::limit_memory`]); a run that passes it fails with
    /// [`Error::ClangMemoryLimit`].
    pub fn with_memory_limit(mut self, bytes: Option<u64>) -> Compiler {
        self.memory_limit = bytes;
        self
    }

    /// The memory limit per clang run, in bytes (`None`: no limit).
    pub fn memory_limit(&self) -> Option<u64> {
        self.memory_limit
    }

    /// The clang executable.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Sets what [`Compiler::version`] answers when it has not run yet: `version` is this
    /// clang's, remembered under the executable's identity (see
    /// [`crate::cache::Cache::clang_version`]).
    pub(crate) fn remember_version(&self, version: &str) {
        let _ = self.version.set(version.to_string());
    }

    /// The first line of `clang --version` (run once, then cached).
    pub fn version(&self) -> Result<String> {
        if let Some(v) = self.version.get() {
            return Ok(v.clone());
        }
        let out = self.run(
            vec![OsString::from("--version")],
            &[],
            "output",
            MAX_VERSION_OUTPUT,
            None,
        )?;
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

    /// Compiles `source` with a spawned clang given `args` ([`compile_args`]), returning
    /// the object and, with `dependencies`, the files clang read besides the source (the
    /// compile entry points, [`Compiler::compile`] and the others, are in
    /// [`crate::route`], which tries a compile server first).
    pub(crate) fn compile_spawned(
        &self,
        args: Vec<String>,
        source: &[u8],
        dependencies: bool,
    ) -> Result<(Vec<u8>, Vec<PathBuf>)> {
        let args: Vec<OsString> = args.into_iter().map(OsString::from).collect();
        let side = |pipe: &Path| -> Vec<OsString> {
            ["-MD", "-MT", "x", "-MF"]
                .iter()
                .map(OsString::from)
                .chain([pipe.as_os_str().to_os_string()])
                .collect()
        };
        let out = self.run(
            args,
            source,
            "object",
            MAX_OBJECT_SIZE,
            dependencies.then_some(&side as &SideArgs),
        )?;
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
        let files = parse_dependencies(&out.side);
        Ok((out.stdout, files))
    }

    /// Runs clang with `args` and nothing on stdin (a link: the dlopen-fallback's
    /// `clang -shared`), bounded like every clang run; the caller reads the status.
    pub fn run_plain(&self, args: Vec<OsString>) -> Result<Finished> {
        self.run(args, &[], "output", MAX_VERSION_OUTPUT, None)
    }

    /// Runs clang with `args`, `input` on stdin, collecting at most `stdout_limit`
    /// bytes of `what` from stdout, [`MAX_DIAGNOSTICS`] from stderr and, with `side`, a
    /// dependency list, within the timeout (see [`crate::child`]).
    fn run(
        &self,
        args: Vec<OsString>,
        input: &[u8],
        what: &str,
        stdout_limit: usize,
        side: Option<&SideArgs>,
    ) -> Result<Finished> {
        let parts: [&[u8]; 1] = [input];
        let mut spec = Spec::new(&self.path, args);
        spec.input = if input.is_empty() { &[] } else { &parts };
        spec.stdout_limit = stdout_limit;
        spec.stderr_limit = MAX_DIAGNOSTICS;
        spec.side_channel = side.map(|s| (MAX_DEPENDENCY_LIST, s));
        spec.deadline = deadline_after(self.timeout);
        spec.memory_limit = self.memory_limit;
        let finished = child::run(&spec).map_err(|f| self.failure(f, what))?;
        match self.memory_limit {
            Some(limit) if !finished.status.success() && says_out_of_memory(&finished.stderr) => {
                Err(Error::ClangMemoryLimit {
                    clang: self.path.clone(),
                    limit,
                    stderr: String::from_utf8_lossy(&finished.stderr).into_owned(),
                })
            }
            _ => Ok(finished),
        }
    }

    /// The error for a clang run that did not finish by itself.
    pub(crate) fn failure(&self, f: Failure, what: &str) -> Error {
        let clang = self.path.clone();
        match f {
            Failure::Spawn(source) => Error::Io {
                context: format!("cannot start {}", clang.display()),
                source,
            },
            Failure::TimedOut { .. } => Error::ClangTimeout {
                clang,
                timeout: self.timeout,
            },
            Failure::TooMuchOutput {
                stream,
                limit,
                stderr,
            } => {
                let status = match stream {
                    Stream::Stdout => format!(
                        "it wrote more than {limit} bytes of {what} and was stopped; the \
                         largest image elfjit loads is {}",
                        describe_size(elfjit_core::plan::MAX_IMAGE_SIZE)
                    ),
                    Stream::Stderr => format!(
                        "it wrote more than {limit} bytes of diagnostics and was stopped; \
                         the first ones follow"
                    ),
                    Stream::Side => {
                        format!("its list of included files is longer than {limit} bytes")
                    }
                };
                Error::ClangFailed {
                    clang,
                    status,
                    stderr: String::from_utf8_lossy(&stderr).into_owned(),
                }
            }
            Failure::OutOfMemory { stream, bytes } => Error::Memory(format!(
                "cannot allocate {bytes} bytes for the {stream:?} of {}",
                clang.display()
            )),
            Failure::Io(source) => Error::Io {
                context: format!("cannot talk to {}", clang.display()),
                source,
            },
        }
    }
}

/// The arguments a spawned clang gets to compile `opts` from stdin to stdout (after its
/// executable): [`clang_args`], then `- -o -`. A compile server's request carries the
/// same list.
pub(crate) fn compile_args(opts: &CompileOptions, host: HostInfo) -> Vec<String> {
    let mut args = clang_args(opts, host);
    // A crashing clang leaves no reproducer files in the temporary directory.
    args.extend(["-fno-crash-diagnostics", "-", "-o", "-"].map(String::from));
    args
}

/// The files a make-style dependency rule (`-MD -MF`, target `x`) names, in order,
/// without stdin. Clang escapes a space as `\ `, `#` as `\#` and `$` as `$$`, and
/// continues lines with a trailing backslash.
pub fn parse_dependencies(text: &[u8]) -> Vec<PathBuf> {
    use std::os::unix::ffi::OsStringExt;
    // Everything after the first unescaped `: ` (the target is ours and plain).
    let body = text
        .windows(2)
        .position(|w| w == b": " || w == b":\n")
        .and_then(|i| text.get(i + 1..))
        .unwrap_or_default();
    let mut files = Vec::new();
    let mut word: Vec<u8> = Vec::new();
    let mut bytes = body.iter().copied().peekable();
    let mut flush = |word: &mut Vec<u8>| {
        if !word.is_empty() && word != b"-" && word != b"<stdin>" {
            files.push(PathBuf::from(OsString::from_vec(std::mem::take(word))));
        }
        word.clear();
    };
    while let Some(b) = bytes.next() {
        match (b, bytes.peek().copied()) {
            (b'\\', Some(b'\n')) => {
                bytes.next();
                flush(&mut word);
            }
            (b'\\', Some(c @ (b' ' | b'#' | b'\\'))) => {
                bytes.next();
                word.push(c);
            }
            (b'$', Some(b'$')) => {
                bytes.next();
                word.push(b'$');
            }
            (b' ' | b'\t' | b'\n' | b'\r', _) => flush(&mut word),
            (b, _) => word.push(b),
        }
    }
    flush(&mut word);
    files
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

/// The versioned clang to use: in the first of `dirs` that has an executable
/// `clang-NN` (NN decimal, no leading zero), the highest NN.
fn versioned_clang(dirs: &[PathBuf]) -> Option<PathBuf> {
    for dir in dirs {
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        let mut best: Option<(u32, PathBuf)> = None;
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(version) = name
                .to_str()
                .and_then(|n| n.strip_prefix("clang-"))
                .filter(|v| {
                    !v.is_empty() && !v.starts_with('0') && v.bytes().all(|b| b.is_ascii_digit())
                })
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
        if let Some((_, path)) = best {
            return Some(path);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use elfjit_core::Arch;
    use std::time::Instant;

    /// A fresh directory for one test, removed when it is dropped (passing or not).
    fn scratch_dir(tag: &str) -> tempfile::TempDir {
        tempfile::Builder::new()
            .prefix(&format!("elfjit-clang-test-{tag}-"))
            .tempdir()
            .unwrap()
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
        let empty_dir = scratch_dir("empty");
        let empty = empty_dir.path();
        let err = Compiler::find_with(None, Some(empty.as_os_str())).unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, Error::ClangNotFound { .. }), "{msg}");
        assert!(msg.contains("ELFJIT_CLANG"), "{msg}");
        assert!(msg.contains("clang-NN"), "{msg}");
        assert!(Compiler::find_with(None, None).is_err());
    }

    #[test]
    fn picks_plain_clang_then_newest_versioned() {
        let a_dir = scratch_dir("a");
        let a = a_dir.path();
        let b_dir = scratch_dir("b");
        let b = b_dir.path();
        script(a, "clang-9", "exit 0");
        script(a, "clang-17", "exit 0");
        script(b, "clang-19", "exit 0");
        script(b, "clang-19x", "exit 0");
        std::fs::write(b.join("clang-42"), "not executable").unwrap();
        // PATH order decides (issue 12: a later directory's higher number used to win);
        // within a directory the highest version does.
        let path = std::env::join_paths([&a, &b]).unwrap();
        let c = Compiler::find_with(None, Some(&path)).unwrap();
        assert_eq!(c.path(), a.join("clang-17"));
        let reversed = std::env::join_paths([&b, &a]).unwrap();
        let c = Compiler::find_with(None, Some(&reversed)).unwrap();
        assert_eq!(c.path(), b.join("clang-19"));
        // A leading zero is not a version: `clang-019` never competes with `clang-19`.
        script(b, "clang-0190", "exit 0");
        let c = Compiler::find_with(None, Some(&reversed)).unwrap();
        assert_eq!(c.path(), b.join("clang-19"));
        script(b, "clang", "exit 0");
        let c = Compiler::find_with(None, Some(&path)).unwrap();
        assert_eq!(c.path(), b.join("clang"));
    }

    #[test]
    fn explicit_clang_must_exist_and_run() {
        let d_dir = scratch_dir("explicit");
        let d = d_dir.path();
        let missing = d.join("nope");
        let err = Compiler::find_with(Some(missing.as_os_str()), None).unwrap_err();
        assert!(err.to_string().contains("ELFJIT_CLANG="), "{err}");
        let broken = script(d, "broken", "exit 3");
        let err = Compiler::find_with(Some(broken.as_os_str()), None).unwrap_err();
        assert!(err.to_string().contains("does not run"), "{err}");
        let fake = script(d, "fake", "echo 'fake clang version 99'");
        let c = Compiler::find_with(Some(fake.as_os_str()), None).unwrap();
        assert_eq!(c.version().unwrap(), "fake clang version 99");
        // A bare name is looked up in PATH.
        let c = Compiler::find_with(Some(OsStr::new("fake")), Some(d.as_os_str())).unwrap();
        assert_eq!(c.path(), fake);
    }

    #[test]
    fn timeout_kills_and_reaps() {
        let d_dir = scratch_dir("slow");
        let d = d_dir.path();
        let slow = script(d, "slow", "sleep 30");
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
    fn a_timeout_too_large_to_represent_is_no_limit() {
        let d_dir = scratch_dir("maxtimeout");
        let d = d_dir.path();
        let echo = script(d, "echo", "cat");
        let out = Compiler::at(&echo)
            .unwrap()
            .with_timeout(Duration::MAX)
            .compile(b"int x;", &CompileOptions::new(Lang::C, Arch::X86_64))
            .unwrap();
        assert_eq!(out, b"int x;");
    }

    /// A two-line source whose one `.fill` makes clang's assembler hold 1.5 GiB.
    const HUGE_FILL: &[u8] = b"asm(\".fill 1610612736\");\nint f(void) { return 1; }\n";

    #[test]
    fn a_source_past_the_memory_limit_fails_naming_the_limit() {
        let c = Compiler::find()
            .unwrap_or_else(|e| panic!("{e}"))
            .with_memory_limit(Some(1 << 30));
        let host = Arch::host().unwrap_or(Arch::X86_64);
        let err = c
            .compile(HUGE_FILL, &CompileOptions::new(Lang::C, host))
            .unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, Error::ClangMemoryLimit { limit, .. } if limit == 1 << 30));
        assert!(
            msg.contains("exceeded the compiler memory limit of 1 GiB (ELFJIT_COMPILE_MEMORY)"),
            "{msg}"
        );
        assert!(msg.lines().count() < 10, "{msg}");
    }

    #[test]
    fn ordinary_kernels_compile_under_512_mib_and_by_default() {
        let found = Compiler::find().unwrap_or_else(|e| panic!("{e}"));
        let source = b"double dot(const double *a, const double *b, int n) {\n\
            double s = 0; for (int i = 0; i < n; i++) s += a[i] * b[i]; return s; }\n";
        for arch in [Arch::host().unwrap_or(Arch::X86_64), Arch::Aarch64] {
            let opts = CompileOptions::new(Lang::C, arch);
            let small = found.clone().with_memory_limit(Some(512 << 20));
            assert_eq!(small.memory_limit(), Some(512 << 20));
            small
                .compile(source, &opts)
                .unwrap_or_else(|e| panic!("{e}"));
            let default = Compiler::find_with(None, std::env::var_os("PATH").as_deref())
                .unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(default.memory_limit(), default_compile_memory());
            default
                .compile(source, &opts)
                .unwrap_or_else(|e| panic!("{e}"));
        }
    }

    #[test]
    fn dependency_lists_are_parsed() {
        let deps = parse_dependencies(
            b"x: /usr/lib/clang/19/include/stdint.h my\\ h.h \\\n  /a/b\\#c.h $$HOME.h -\n",
        );
        let want: Vec<PathBuf> = [
            "/usr/lib/clang/19/include/stdint.h",
            "my h.h",
            "/a/b#c.h",
            "$HOME.h",
        ]
        .iter()
        .map(PathBuf::from)
        .collect();
        assert_eq!(deps, want);
        assert!(parse_dependencies(b"x:\n").is_empty());
        assert!(parse_dependencies(b"").is_empty());
    }

    #[test]
    fn real_clang_reports_what_it_included() {
        let c = Compiler::find().expect("clang");
        let d_dir = scratch_dir("deps");
        let d = d_dir.path();
        let header = d.join("k.h");
        std::fs::write(&header, "#define K 3\n").unwrap();
        let src = format!(
            "#include \"{}\"\nint k(void) {{ return K; }}\n",
            header.display()
        );
        let opts = CompileOptions::new(Lang::C, Arch::X86_64);
        let (obj, deps) = c
            .compile_with_dependencies(src.as_bytes(), &opts, HostInfo::current())
            .unwrap();
        assert_eq!(&obj[..4], b"\x7fELF");
        assert_eq!(deps, [header]);
        let ir = CompileOptions::new(Lang::Ir, Arch::X86_64);
        let (_, deps) = c
            .compile_with_dependencies(
                b"define i32 @k() {\n  ret i32 1\n}\n",
                &ir,
                HostInfo::current(),
            )
            .unwrap();
        assert!(deps.is_empty());
    }

    #[test]
    fn failure_and_empty_output_are_errors() {
        let d_dir = scratch_dir("fail");
        let d = d_dir.path();
        let failing = script(
            d,
            "failing",
            "cat >/dev/null; echo 'boom: bad input' >&2; exit 1",
        );
        let err = Compiler::at(&failing)
            .unwrap()
            .compile(b"x", &CompileOptions::new(Lang::C, Arch::X86_64))
            .unwrap_err();
        assert!(err.to_string().contains("boom: bad input"), "{err}");
        let silent = script(d, "silent", "exit 0");
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
        let d_dir = scratch_dir("echo");
        let d = d_dir.path();
        // Echo 4 MiB back on stdout and a lot on stderr while still reading stdin.
        let echo = script(d, "echo", "cat; cat /dev/zero | head -c 1000000 >&2");
        let src = vec![b'a'; 4 << 20];
        let out = Compiler::at(&echo)
            .unwrap()
            .compile(&src, &CompileOptions::new(Lang::C, Arch::X86_64))
            .unwrap();
        assert_eq!(out, src);
    }

    #[test]
    fn real_clang_compiles_for_every_target() {
        // A missing clang is a failure: ./scripts/setup installs clang-19.
        let c = Compiler::find().unwrap_or_else(|e| panic!("{e}"));
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
