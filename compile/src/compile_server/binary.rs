//! Finding, building and verifying the compile server for one clang.
//!
//! The server is built from `server.cpp` (shipped in the crate) with the clang it serves,
//! against the `libclang-cpp` and `libLLVM` of that clang's own LLVM installation (found
//! from the clang's real path: `llvm-config` beside it, else `llvm-config-NN` in PATH,
//! whose major version must be the clang's). It is built into the private cache
//! directory ([`cache::root_dir`]) under a name hashed from everything it depends on —
//! the source, the protocol's constants, the clang's real path and version — so it is
//! never used with another clang or another LLVM. Like the emulated runners it is kept
//! with its SHA-256 ([`crate::verified`]), verified on load and again before every start,
//! and run through the verified open descriptor. A lock file keeps two processes from
//! building it at once; a build has a deadline ([`BUILD_TIMEOUT`]).
//!
//! Before the cache, a directory of prebuilt servers is looked at ([`prebuilt`], named by
//! `ELFJIT_SERVER_DIR`): its server for the clang's LLVM major is used if it passes the
//! checks of installed files, matches its manifest and answers the ready handshake
//! ([`handshake`]); otherwise elfjit goes on to the cache or a build, and says once why a
//! prebuilt server that is there was not used. [`build_to`] builds a server with its manifest into a given
//! directory, for packaging (`scripts/dist`).

use super::prebuilt::{self, Manifest, SERVER_DIR_ENV};
use super::protocol;
use crate::cache;
use crate::child::{self, deadline_after, Failure, Spec};
use crate::clang::Compiler;
use crate::notes;
use crate::private_dir::{PrivateDir, Refused};
use crate::verified::{self, Verified};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The server's C++ source.
pub(crate) const SERVER_CPP: &str = include_str!("server.cpp");

/// How long a build (or waiting for another process's build) may take. One build takes
/// about 25 s on a busy 2-core machine.
pub(crate) const BUILD_TIMEOUT: Duration = Duration::from_secs(300);
/// The largest server executable read (it is about 80 KB).
const MAX_SERVER_SIZE: u64 = 64 << 20;
/// The most output read from `llvm-config` or the build.
const MAX_TOOL_OUTPUT: usize = 1 << 20;
/// How long `llvm-config` may take.
const TOOL_TIMEOUT: Duration = Duration::from_secs(60);
/// Prefix of every file the server cache owns in the cache directory.
const PREFIX: &str = "compile-server-";
/// How long a prebuilt server may take to load its libraries and say it is ready.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(60);

/// Why no compile server can be had; the caller spawns clang and says this once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Unavailable {
    /// What is missing or failed, in a sentence.
    pub reason: String,
}

impl fmt::Display for Unavailable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.reason)
    }
}

fn unavailable(reason: impl Into<String>) -> Unavailable {
    Unavailable {
        reason: reason.into(),
    }
}

/// A compile server built for one clang, verified, held open.
#[derive(Debug)]
pub(crate) struct ServerBinary {
    verified: Verified,
    clang: PathBuf,
    llvm_major: u32,
    prebuilt: bool,
    /// What the build printed, if this process built it.
    pub build_log: Option<String>,
}

impl ServerBinary {
    /// The server for `compiler`, loaded from the cache directory or built there (once per
    /// process and clang: a later call returns the same server, or the same reason).
    /// A prebuilt server in the directory `ELFJIT_SERVER_DIR` names is used first.
    pub(crate) fn for_compiler(compiler: &Compiler) -> Result<Arc<ServerBinary>, Unavailable> {
        let prebuilt = std::env::var_os(SERVER_DIR_ENV)
            .filter(|d| !d.is_empty())
            .map(PathBuf::from);
        ServerBinary::for_compiler_in(compiler, &cache::root_dir(), prebuilt.as_deref())
    }

    /// [`ServerBinary::for_compiler`] with the cache directory and the prebuilt servers'
    /// directory given.
    pub(crate) fn for_compiler_in(
        compiler: &Compiler,
        dir: &Path,
        prebuilt: Option<&Path>,
    ) -> Result<Arc<ServerBinary>, Unavailable> {
        type Slot = Arc<Mutex<Option<Result<Arc<ServerBinary>, Unavailable>>>>;
        type Key = (PathBuf, PathBuf, Option<PathBuf>);
        static SERVERS: OnceLock<Mutex<HashMap<Key, Slot>>> = OnceLock::new();
        let key = (
            compiler.path().to_path_buf(),
            dir.to_path_buf(),
            prebuilt.map(Path::to_path_buf),
        );
        let slot = SERVERS
            .get_or_init(Default::default)
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(key)
            .or_default()
            .clone();
        let mut slot = slot.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(known) = &*slot {
            return known.clone();
        }
        let found = load_or_build(compiler, dir, prebuilt).map(Arc::new);
        *slot = Some(found.clone());
        found
    }

    /// The path the server is started from (the verified descriptor).
    pub(crate) fn program(&self) -> PathBuf {
        self.verified.program()
    }

    /// Where it is cached (for messages).
    pub(crate) fn path(&self) -> &Path {
        &self.verified.path
    }

    /// The clang it serves (the path requests name first).
    pub(crate) fn clang(&self) -> &Path {
        &self.clang
    }

    /// The LLVM major version it was built against.
    pub(crate) fn llvm_major(&self) -> u32 {
        self.llvm_major
    }

    /// Whether it is a prebuilt server (from `ELFJIT_SERVER_DIR`), not one built here.
    pub(crate) fn is_prebuilt(&self) -> bool {
        self.prebuilt
    }

    /// `Ok` if the open file still holds the bytes verified when it was loaded.
    pub(crate) fn check(&self) -> Result<(), String> {
        match self.verified.still_matches() {
            Ok(true) => Ok(()),
            Ok(false) => Err(format!(
                "{} changed since it was verified (its SHA-256 no longer matches)",
                self.verified.path.display()
            )),
            Err(e) => Err(format!(
                "cannot re-read {} to verify it: {e}",
                self.verified.path.display()
            )),
        }
    }
}

/// The LLVM major version in a `clang --version` line (`... clang version 19.1.7 ...`).
pub(crate) fn llvm_major(version: &str) -> Option<u32> {
    let rest = version.split("clang version ").nth(1)?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// The cache name of the server for the clang at `real_clang` reporting `version`.
fn server_name(real_clang: &Path, version: &str) -> String {
    let mut h = Sha256::new();
    for part in [
        SERVER_CPP.as_bytes(),
        protocol::cxx_defines().join(" ").as_bytes(),
        real_clang.as_os_str().as_encoded_bytes(),
        version.as_bytes(),
    ] {
        h.update((part.len() as u64).to_le_bytes());
        h.update(part);
    }
    let digest = verified::hex(&h.finalize());
    format!("{PREFIX}{}", digest.get(..16).unwrap_or(&digest))
}

/// Whether `name` in the cache directory belongs to the server cache (a server, its
/// digest, its lock); for `elfjit cache clear`.
pub(crate) fn is_server_file(name: &str) -> bool {
    name.starts_with(PREFIX)
}

fn load_or_build(
    compiler: &Compiler,
    dir: &Path,
    prebuilt_dir: Option<&Path>,
) -> Result<ServerBinary, Unavailable> {
    // Remembered on disk under the clang's identity, as the compile cache's key has it:
    // a fresh process does not pay a `clang --version` run (tens of milliseconds) before
    // its server starts.
    let version = cache::Cache::from_env()
        .clang_version(compiler)
        .map_err(|e| unavailable(format!("cannot ask clang its version: {e}")))?;
    compiler.remember_version(&version);
    let major = llvm_major(&version).ok_or_else(|| {
        unavailable(format!(
            "cannot tell the LLVM version of {} from `{version}`",
            compiler.path().display()
        ))
    })?;
    // Said with any later reason, so that `ELFJIT_COMPILER=server` tells why neither.
    let mut not_prebuilt = String::new();
    if let Some(pdir) = prebuilt_dir {
        match use_prebuilt(compiler, pdir, major) {
            Ok(Some(server)) => return Ok(server),
            Ok(None) => {
                not_prebuilt = format!(
                    "{} holds no prebuilt server for LLVM {major}; ",
                    pdir.display()
                );
            }
            Err(why) => {
                notes::once("prebuilt compile server", "not-used", || {
                    format!("not using the prebuilt compile server: {why}")
                });
                not_prebuilt = format!("the prebuilt server is not used ({why}); ");
            }
        }
    }
    let with_prebuilt = |u: Unavailable| unavailable(format!("{not_prebuilt}{}", u.reason));
    load_or_build_cached(compiler, dir, &version, major).map_err(with_prebuilt)
}

/// The prebuilt server for LLVM `major` in `dir`, verified and answering the handshake;
/// `None` if there is none.
fn use_prebuilt(
    compiler: &Compiler,
    dir: &Path,
    major: u32,
) -> Result<Option<ServerBinary>, String> {
    let Some(verified) = prebuilt::find(dir, major, MAX_SERVER_SIZE)? else {
        return Ok(None);
    };
    let server = ServerBinary {
        verified,
        clang: compiler.path().to_path_buf(),
        llvm_major: major,
        prebuilt: true,
        build_log: None,
    };
    handshake(&server, major)?;
    Ok(Some(server))
}

/// Starts `server` with nothing to compile: it must send the ready frame of this protocol
/// and LLVM `major` (so the shared libraries it needs resolve), then exit at the end of
/// its input.
fn handshake(server: &ServerBinary, major: u32) -> Result<(), String> {
    let program = server.program();
    let mut spec = Spec::new(&program, vec![std::process::id().to_string().into()]);
    spec.stdout_limit = protocol::READY_SIZE;
    spec.stderr_limit = MAX_TOOL_OUTPUT;
    spec.deadline = deadline_after(HANDSHAKE_TIMEOUT);
    let path = server.path().display();
    let out = child::run(&spec).map_err(|f| match f {
        Failure::TimedOut { .. } => format!(
            "{path} did not say it was ready within {} s",
            HANDSHAKE_TIMEOUT.as_secs()
        ),
        Failure::Spawn(e) => format!("cannot start {path}: {e}"),
        _ => format!("{path} wrote more than a ready frame"),
    })?;
    let frame: Option<[u8; protocol::READY_SIZE]> = out.stdout.as_slice().try_into().ok();
    let Some(frame) = frame.filter(|_| out.status.success()) else {
        let stderr = String::from_utf8_lossy(&out.stderr);
        return Err(format!(
            "{path} does not start ({}): {}",
            out.status,
            stderr.trim()
        ));
    };
    let ready = protocol::decode_ready(&frame).map_err(|e| format!("{path}: {e}"))?;
    if ready.llvm_major != major {
        return Err(format!(
            "{path} says it was built for LLVM {}, but clang is LLVM {major}",
            ready.llvm_major
        ));
    }
    Ok(())
}

fn load_or_build_cached(
    compiler: &Compiler,
    dir: &Path,
    version: &str,
    major: u32,
) -> Result<ServerBinary, Unavailable> {
    let real = std::fs::canonicalize(compiler.path())
        .map_err(|e| unavailable(format!("cannot resolve {}: {e}", compiler.path().display())))?;
    let name = server_name(&real, version);
    let cache = PrivateDir::open(dir, true).map_err(|e| {
        unavailable(format!(
            "the cache directory cannot hold it ({e}); whoever can write it could make \
             elfjit run their code"
        ))
    })?;
    let made = |verified: Verified, build_log: Option<String>| ServerBinary {
        verified,
        clang: compiler.path().to_path_buf(),
        llvm_major: major,
        prebuilt: false,
        build_log,
    };
    if let Some(v) = load(&cache, &name) {
        return Ok(made(v, None));
    }
    let deadline = Instant::now() + BUILD_TIMEOUT;
    let _lock = lock(&cache, &format!("{name}.lock"), deadline)?;
    // Another process may have built it while this one waited.
    if let Some(v) = load(&cache, &name) {
        return Ok(made(v, None));
    }
    verified::remove_stale(&cache);
    let toolchain = Toolchain::find(&real, major)?;
    let (v, log) = build(&toolchain, &cache, &name, deadline)?;
    Ok(made(v, Some(log)))
}

/// The cached server, or `None` (said once per reason) if it must be built.
fn load(cache: &PrivateDir, name: &str) -> Option<Verified> {
    match verified::load(cache, name, MAX_SERVER_SIZE) {
        Ok(v) => Some(v),
        Err(Refused::Missing) => None,
        Err(e) => {
            let reason = match &e {
                Refused::Unsafe { reason, .. } => reason,
                _ => "unreadable",
            };
            notes::once("compile server cache", reason, || {
                format!("rebuilding the compile server: {e}")
            });
            None
        }
    }
}

/// Takes the build lock `name` in `cache`, waiting for another process's build until
/// `deadline`. Released when the file is dropped.
fn lock(cache: &PrivateDir, name: &str, deadline: Instant) -> Result<std::fs::File, Unavailable> {
    use rustix::fs::FlockOperation;
    let file = cache.open_lock(name).map_err(|e| {
        unavailable(format!(
            "cannot open the build lock {}: {e}",
            cache.path().join(name).display()
        ))
    })?;
    loop {
        match rustix::fs::flock(&file, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => return Ok(file),
            Err(rustix::io::Errno::WOULDBLOCK) | Err(rustix::io::Errno::INTR) => {}
            Err(e) => {
                return Err(unavailable(format!(
                    "cannot lock {}: {e}",
                    cache.path().join(name).display()
                )))
            }
        }
        if Instant::now() >= deadline {
            return Err(unavailable(format!(
                "another process has been building the compile server for {} s \
                 ({} is locked)",
                BUILD_TIMEOUT.as_secs(),
                cache.path().join(name).display()
            )));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The LLVM installation of one clang, as its `llvm-config` describes it.
#[derive(Debug)]
struct Toolchain {
    clang: PathBuf,
    libdir: PathBuf,
    cxxflags: Vec<String>,
    libclang_cpp: PathBuf,
    libllvm: PathBuf,
}

impl Toolchain {
    /// The installation of the clang whose real path is `clang`, LLVM `major`.
    fn find(clang: &Path, major: u32) -> Result<Toolchain, Unavailable> {
        let beside = clang.parent().map(|d| d.join("llvm-config"));
        let versioned = format!("llvm-config-{major}");
        let in_path = std::env::var_os("PATH").and_then(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join(&versioned))
                .find(|p| p.is_file())
        });
        let config = beside.filter(|p| p.is_file()).or(in_path).ok_or_else(|| {
            unavailable(format!(
                "no llvm-config beside {} nor {versioned} in PATH (Debian/Ubuntu: \
                     `apt-get install llvm-{major}-dev libclang-{major}-dev`)",
                clang.display()
            ))
        })?;
        let args = [
            "--version",
            "--libdir",
            "--includedir",
            "--cxxflags",
            "--has-rtti",
        ];
        let mut spec = Spec::new(&config, args.iter().map(OsString::from).collect());
        spec.stdout_limit = MAX_TOOL_OUTPUT;
        spec.stderr_limit = MAX_TOOL_OUTPUT;
        spec.deadline = deadline_after(TOOL_TIMEOUT);
        let out = child::run(&spec)
            .ok()
            .filter(|o| o.status.success())
            .ok_or_else(|| unavailable(format!("{} does not run", config.display())))?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let lines: Vec<&str> = text.lines().map(str::trim).collect();
        let [version, libdir, includedir, cxxflags, rtti] = lines.as_slice() else {
            return Err(unavailable(format!(
                "{} printed {} lines for 5 questions",
                config.display(),
                lines.len()
            )));
        };
        let their_major: Option<u32> = version.split('.').next().and_then(|m| m.parse().ok());
        if their_major != Some(major) {
            return Err(unavailable(format!(
                "{} is LLVM {version}, but clang is LLVM {major}",
                config.display()
            )));
        }
        let header = Path::new(includedir).join("clang/FrontendTool/Utils.h");
        if !header.is_file() {
            return Err(unavailable(format!(
                "clang's development headers are not installed (no {}; Debian/Ubuntu: \
                 `apt-get install libclang-{major}-dev`)",
                header.display()
            )));
        }
        let libdir = PathBuf::from(libdir);
        let library = |stems: &[String]| -> Option<PathBuf> {
            let mut names: Vec<String> = std::fs::read_dir(&libdir)
                .ok()?
                .filter_map(|e| e.ok()?.file_name().into_string().ok())
                .filter(|n| {
                    stems
                        .iter()
                        .any(|s| n == s || n.starts_with(&format!("{s}.")))
                })
                .collect();
            names.sort_by_key(|n| n.len());
            names.first().map(|n| libdir.join(n))
        };
        let libclang_cpp = library(&[format!("libclang-cpp.so.{major}")]).ok_or_else(|| {
            unavailable(format!(
                "no libclang-cpp.so.{major} in {} (Debian/Ubuntu: `apt-get install \
                 libclang-cpp{major}`)",
                libdir.display()
            ))
        })?;
        let libllvm = library(&[format!("libLLVM-{major}.so"), format!("libLLVM.so.{major}")])
            .ok_or_else(|| unavailable(format!("no libLLVM.so.{major} in {}", libdir.display())))?;
        let mut cxxflags: Vec<String> = cxxflags.split_whitespace().map(String::from).collect();
        if *rtti == "NO" {
            cxxflags.push("-fno-rtti".into());
        }
        Ok(Toolchain {
            clang: clang.to_path_buf(),
            libdir,
            cxxflags,
            libclang_cpp,
            libllvm,
        })
    }

    /// The two steps that build `server.cpp` into `server` in the work directory: compile
    /// to `server.o`, then link. Apart, so that clang keeps no intermediate object in
    /// `$TMPDIR` (one compile-and-link run would put it there, and leave it when stopped).
    fn build_steps(&self) -> [Vec<OsString>; 2] {
        let mut compile: Vec<OsString> = vec!["--driver-mode=g++".into()];
        compile.extend(self.cxxflags.iter().map(OsString::from));
        compile.extend(["-DNDEBUG", "-O2", "-Wall"].map(OsString::from));
        compile.extend(protocol::cxx_defines().into_iter().map(OsString::from));
        compile.extend(["-c", "server.cpp", "-o", "server.o"].map(OsString::from));
        let mut link: Vec<OsString> = vec!["--driver-mode=g++".into()];
        link.extend(["server.o", "-o", "server"].map(OsString::from));
        link.push(self.libclang_cpp.clone().into_os_string());
        link.push(self.libllvm.clone().into_os_string());
        let mut rpath = OsString::from("-Wl,-rpath,");
        rpath.push(&self.libdir);
        link.push(rpath);
        [compile, link]
    }
}

/// Builds the server as `name` in `cache`, in a private work directory there.
fn build(
    toolchain: &Toolchain,
    cache: &PrivateDir,
    name: &str,
    deadline: Instant,
) -> Result<(Verified, String), Unavailable> {
    let (work_name, work) = cache.temp_subdir("build").map_err(|e| {
        unavailable(format!(
            "cannot create a build directory in {}: {e}",
            cache.path().display()
        ))
    })?;
    let result = build_in(toolchain, &work, cache, name, deadline);
    let _ = cache.remove_tree(OsStr::new(&work_name));
    result
}

/// Compiles `server.cpp` into `server` in the work directory `work`; returns what the
/// compiler printed.
fn compile_in(
    toolchain: &Toolchain,
    work: &PrivateDir,
    deadline: Instant,
) -> Result<String, Unavailable> {
    work.write_file("server.cpp", &[SERVER_CPP.as_bytes()], 0o600)
        .map_err(|e| unavailable(format!("cannot write the server's source: {e}")))?;
    let mut log = String::new();
    for args in toolchain.build_steps() {
        let mut spec = Spec::new(&toolchain.clang, args);
        // The work directory through this process's descriptor: nothing on its path can
        // redirect the build's reads and writes.
        spec.current_dir = Some(work.fd_path());
        spec.stdout_limit = MAX_TOOL_OUTPUT;
        spec.stderr_limit = MAX_TOOL_OUTPUT;
        spec.deadline = Some(deadline);
        let out = child::run(&spec).map_err(|f| match f {
            Failure::TimedOut { .. } => unavailable(format!(
                "building it with {} did not finish within {} s and was stopped",
                toolchain.clang.display(),
                BUILD_TIMEOUT.as_secs()
            )),
            Failure::Spawn(e) => unavailable(format!(
                "cannot start {} to build it: {e}",
                toolchain.clang.display()
            )),
            _ => unavailable(format!(
                "building it with {} failed: its output was too long or unreadable",
                toolchain.clang.display()
            )),
        })?;
        log.push_str(&String::from_utf8_lossy(&out.stderr));
        if !out.status.success() {
            let head: String = log.lines().take(20).collect::<Vec<_>>().join("\n");
            return Err(unavailable(format!(
                "building it with {} failed ({}):\n{head}",
                toolchain.clang.display(),
                out.status
            )));
        }
    }
    Ok(log)
}

fn build_in(
    toolchain: &Toolchain,
    work: &PrivateDir,
    cache: &PrivateDir,
    name: &str,
    deadline: Instant,
) -> Result<(Verified, String), Unavailable> {
    let log = compile_in(toolchain, work, deadline)?;
    let v = verified::install(work, "server", cache, name, MAX_SERVER_SIZE)
        .map_err(|e| unavailable(format!("the built server cannot be kept: {e}")))?;
    Ok((v, log))
}

/// Builds the compile server for `compiler` into the directory `out` as a prebuilt server
/// (`compile-server-llvmNN`, mode `0755`, and its manifest `compile-server-llvmNN.json`),
/// in a work directory of the private cache directory `cache_dir`. Returns the server's
/// path. For packaging: `out` is what `ELFJIT_SERVER_DIR` later names.
pub(crate) fn build_to(
    compiler: &Compiler,
    cache_dir: &Path,
    out: &Path,
) -> Result<PathBuf, Unavailable> {
    let version = compiler
        .version()
        .map_err(|e| unavailable(format!("cannot ask clang its version: {e}")))?;
    let major = llvm_major(&version)
        .ok_or_else(|| unavailable(format!("cannot tell the LLVM version from `{version}`")))?;
    let real = std::fs::canonicalize(compiler.path())
        .map_err(|e| unavailable(format!("cannot resolve {}: {e}", compiler.path().display())))?;
    let toolchain = Toolchain::find(&real, major)?;
    let cache = PrivateDir::open(cache_dir, true)
        .map_err(|e| unavailable(format!("cannot use {}: {e}", cache_dir.display())))?;
    let (work_name, work) = cache.temp_subdir("build").map_err(|e| {
        unavailable(format!(
            "cannot create a build directory in {}: {e}",
            cache.path().display()
        ))
    })?;
    let result = compile_in(&toolchain, &work, Instant::now() + BUILD_TIMEOUT).and_then(|_| {
        let built = work.path().join("server");
        let bytes = std::fs::read(&built)
            .map_err(|e| unavailable(format!("cannot read {}: {e}", built.display())))?;
        let libclang_cpp = needed_libclang_cpp(&bytes).ok_or_else(|| {
            unavailable(format!(
                "{} needs no libclang-cpp (its dynamic section names none)",
                built.display()
            ))
        })?;
        let manifest = Manifest {
            llvm_major: major,
            libclang_cpp,
            sha256: verified::hex(&Sha256::digest(&bytes)),
            source: prebuilt::source_digest(),
        };
        let json = serde_json::to_string_pretty(&manifest)
            .map_err(|e| unavailable(format!("cannot write the manifest: {e}")))?;
        let write = |name: String, bytes: &[u8], mode: u32| {
            use std::os::unix::fs::PermissionsExt;
            let path = out.join(name);
            std::fs::write(&path, bytes)
                .and_then(|()| {
                    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))
                })
                .map(|()| path.clone())
                .map_err(|e| unavailable(format!("cannot write {}: {e}", path.display())))
        };
        let server = write(prebuilt::server_file(major), &bytes, 0o755)?;
        write(
            prebuilt::manifest_file(major),
            format!("{json}\n").as_bytes(),
            0o644,
        )?;
        Ok(server)
    });
    let _ = cache.remove_tree(OsStr::new(&work_name));
    result
}

/// The `libclang-cpp` soname the executable `elf` needs (its `DT_NEEDED` entry).
fn needed_libclang_cpp(elf: &[u8]) -> Option<String> {
    use object::read::elf::ElfFile64;
    let file = ElfFile64::<object::Endianness>::parse(elf).ok()?;
    let table = file.elf_dynamic_table().ok()?;
    table
        .iter()
        .filter(|d| d.tag == object::elf::DT_NEEDED)
        .filter_map(|d| table.string(d).ok())
        .map(|name| String::from_utf8_lossy(name).into_owned())
        .find(|name| name.starts_with("libclang-cpp.so"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn major_versions_and_names() {
        assert_eq!(llvm_major("Debian clang version 19.1.7 (3+b1)"), Some(19));
        assert_eq!(llvm_major("clang version 20.0.0git"), Some(20));
        assert_eq!(llvm_major("Apple LLVM version 15"), None);
        let a = server_name(
            Path::new("/usr/lib/llvm-19/bin/clang"),
            "clang version 19.1.7",
        );
        let b = server_name(
            Path::new("/usr/lib/llvm-18/bin/clang"),
            "clang version 19.1.7",
        );
        let c = server_name(
            Path::new("/usr/lib/llvm-19/bin/clang"),
            "clang version 19.1.8",
        );
        assert!(a != b && a != c && b != c);
        assert!(is_server_file(&a) && is_server_file(&verified::digest_name(&a)));
        assert!(!is_server_file("runner-x86_64-0123"));
    }

    /// A prebuilt "server" `script` in a fresh directory, with a manifest matching it.
    fn prebuilt_script(script: &str, major: u32) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!(
            "elfjit-prebuilt-handshake-{}",
            crate::private_dir::random_hex().unwrap()
        ));
        std::fs::create_dir(&dir).unwrap();
        let server = dir.join(prebuilt::server_file(major));
        std::fs::write(&server, script).unwrap();
        std::fs::set_permissions(&server, std::fs::Permissions::from_mode(0o755)).unwrap();
        let manifest = Manifest {
            llvm_major: major,
            libclang_cpp: format!("libclang-cpp.so.{major}"),
            sha256: verified::hex(&Sha256::digest(script.as_bytes())),
            source: prebuilt::source_digest(),
        };
        std::fs::write(
            dir.join(prebuilt::manifest_file(major)),
            serde_json::to_vec(&manifest).unwrap(),
        )
        .unwrap();
        dir
    }

    #[test]
    fn a_prebuilt_server_that_does_not_answer_the_handshake_is_not_used() {
        let c = Compiler::find().expect("clang");
        let major = llvm_major(&c.version().unwrap()).unwrap();
        // As a server whose libclang-cpp does not resolve: the loader fails, status 127.
        let dir = prebuilt_script(
            "#!/bin/sh\necho 'libclang-cpp.so: cannot open' >&2\nexit 127\n",
            major,
        );
        let why = use_prebuilt(&c, &dir, major).unwrap_err();
        assert!(
            why.contains("does not start") && why.contains("cannot open"),
            "{why}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
        // A ready frame naming another LLVM major than its manifest's.
        let mut frame = Vec::new();
        for word in [protocol::READY_MAGIC, protocol::VERSION, major + 1] {
            frame.extend(word.to_le_bytes());
        }
        let octal: String = frame.iter().map(|b| format!("\\{b:03o}")).collect();
        let dir = prebuilt_script(&format!("#!/bin/sh\nprintf '{octal}'\n"), major);
        let why = use_prebuilt(&c, &dir, major).unwrap_err();
        assert!(
            why.contains(&format!("built for LLVM {}", major + 1)),
            "{why}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_held_build_lock_makes_a_second_builder_wait_then_give_up() {
        let root = std::env::temp_dir().join(format!(
            "elfjit-server-lock-{}",
            crate::private_dir::random_hex().unwrap()
        ));
        let dir = PrivateDir::open(&root, true).unwrap();
        let held = lock(&dir, "x.lock", Instant::now()).unwrap();
        // flock belongs to the open file: a second open is a second builder.
        let e = lock(&dir, "x.lock", Instant::now() + Duration::from_millis(200)).unwrap_err();
        assert!(e.reason.contains("another process"), "{e}");
        drop(held);
        lock(&dir, "x.lock", Instant::now()).unwrap();
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_toolchain_that_cannot_build_it_is_unavailable_with_the_reason() {
        let e = Toolchain::find(Path::new("/nonexistent/bin/clang"), 4242).unwrap_err();
        assert!(e.reason.contains("llvm-config-4242"), "{e}");
        let c = Compiler::find().expect("clang");
        let real = std::fs::canonicalize(c.path()).unwrap();
        let major = llvm_major(&c.version().unwrap()).unwrap();
        if real.parent().unwrap().join("llvm-config").is_file() {
            let e = Toolchain::find(&real, major + 1).unwrap_err();
            assert!(
                e.reason.contains(&format!("clang is LLVM {}", major + 1)),
                "{e}"
            );
        }
        let t = Toolchain::find(&real, major).unwrap();
        assert!(t.libclang_cpp.is_file() && t.libllvm.is_file(), "{t:?}");
    }
}
