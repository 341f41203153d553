//! The runner program: built once per architecture with clang and lld, cached on disk,
//! its symbol table read back for resolving the image's externals, and run under
//! `qemu-<arch>` with the request on stdin.
//!
//! qemu-user performs a runner's system calls for real, so a runner is code elfjit
//! executes as you, and is guarded like it ([`elfjit::verified`]): it is compiled and
//! linked in a private work directory inside the checked cache directory
//! ([`elfjit::private_dir`]; clang's objects go there, not to `$TMPDIR`), its SHA-256 is
//! recorded at build time in a `0600` file beside it (`runner-ARCH-HASH.sha256`), and on
//! use both files must pass the ownership and mode checks and the digest must match what
//! is read. qemu is then given the very file that was verified, through this process's
//! open descriptor (`/proc/<pid>/fd/<n>`), not its path: replacing the file after the
//! check changes nothing. A cache directory that is not yours alone is not used: the runner is
//! then built for this process in a fresh private temporary directory.

use crate::layout::{FAR_ADDRESS, RUNNER_BASE};
use crate::protocol::{Reply, Request, REPLY_HEADER};
use elfjit::cache::{self, Cleared};
use elfjit::child::{self, deadline_after, Failure, Spec, Stream};
use elfjit::clang::{Compiler, MAX_DIAGNOSTICS};
use elfjit::flags;
use elfjit::notes;
use elfjit::private_dir::{random_hex, PrivateDir, Refused};
use elfjit::verified::{self, Verified};
use elfjit::{Error, Result};
use elfjit_core::Arch;
use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

/// The runner's C source.
pub const RUNNER_C: &str = include_str!("runner.c");
/// What kernels link against inside the runner.
pub const SUPPORT_C: &str = include_str!("support.c");

/// How long one emulated call may take before the runner is killed (override with
/// `ELFJIT_RUN_TIMEOUT`, in seconds).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);

/// The largest runner executable read (they are about 100 KB).
const MAX_RUNNER_SIZE: u64 = 64 << 20;
/// The most stderr read from the runner or its build.
const MAX_RUNNER_STDERR: usize = 1 << 20;

fn emulation_error(arch: Arch, message: impl Into<String>) -> Error {
    Error::Emulation {
        target: arch,
        message: message.into(),
    }
}

/// The linker script that puts `elfjit_far_add` far above everything else.
fn far_script() -> String {
    format!(
        "SECTIONS {{\n  elfjit_far {FAR_ADDRESS:#x} : {{ *(elfjit_far) }}\n}} INSERT AFTER .bss;\n"
    )
}

/// The clang arguments that build the runner for `arch`, without sources and output.
pub fn build_flags(arch: Arch, script: &Path) -> Vec<String> {
    let mut f: Vec<String> = vec![
        format!("--target={}-unknown-linux-gnu", flags::triple_arch(arch)),
        "-static".into(),
        "-fno-pic".into(),
        "-nostdlib".into(),
        "-ffreestanding".into(),
        "-fno-builtin".into(),
        "-fno-math-errno".into(),
        "-ffp-contract=off".into(),
        "-fno-stack-protector".into(),
        "-fno-asynchronous-unwind-tables".into(),
        "-fuse-ld=lld".into(),
        "-O2".into(),
        "-Wall".into(),
        "-Wextra".into(),
        format!("-Wl,--image-base={RUNNER_BASE:#x}"),
        "-Wl,--build-id=none".into(),
        format!("-Wl,-T,{}", script.display()),
    ];
    f.extend(flags::generic_cpu_flags(arch).iter().map(|s| s.to_string()));
    f
}

/// A built runner: its path, its global symbols, and the verified executable, open.
#[derive(Debug)]
pub struct Runner {
    /// The arch it runs on.
    pub arch: Arch,
    /// Where it is cached (for messages; it is executed through [`Runner::program`]).
    pub path: PathBuf,
    /// Defined global symbols and their addresses.
    pub symbols: HashMap<String, u64>,
    /// Whatever clang printed while building it (empty when warnings-clean), if it was
    /// built by this process.
    pub build_log: Option<String>,
    /// The file whose SHA-256 was verified, held open for the life of the runner.
    executable: Verified,
}

impl Runner {
    /// The path qemu is given: this process's descriptor of the verified file, so what
    /// runs is what was checked whatever happens to [`Runner::path`] since.
    pub fn program(&self) -> PathBuf {
        self.executable.program()
    }
}

fn read_u16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?))
}
fn read_u32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}
fn read_u64(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}
fn to_usize(v: u64) -> Option<usize> {
    usize::try_from(v).ok()
}

/// The defined global and weak symbols of a static little-endian ELF64 executable for
/// `arch`; `None` if the bytes are not one (a stale or corrupt cache entry).
pub fn executable_symbols(elf: &[u8], arch: Arch) -> Option<HashMap<String, u64>> {
    const ET_EXEC: u16 = 2;
    const SHT_SYMTAB: u32 = 2;
    if elf.get(..4)? != b"\x7fELF" || elf.get(4) != Some(&2) || elf.get(5) != Some(&1) {
        return None;
    }
    if read_u16(elf, 16)? != ET_EXEC || read_u16(elf, 18)? != arch.machine().0 {
        return None;
    }
    let shoff = to_usize(read_u64(elf, 0x28)?)?;
    let shentsize = usize::from(read_u16(elf, 0x3a)?);
    let shnum = usize::from(read_u16(elf, 0x3c)?);
    if shentsize < 64 {
        return None;
    }
    let section = |i: usize| -> Option<(u32, usize, usize, u32, usize)> {
        let h = shoff.checked_add(i.checked_mul(shentsize)?)?;
        Some((
            read_u32(elf, h + 4)?,               // sh_type
            to_usize(read_u64(elf, h + 0x18)?)?, // sh_offset
            to_usize(read_u64(elf, h + 0x20)?)?, // sh_size
            read_u32(elf, h + 0x28)?,            // sh_link
            to_usize(read_u64(elf, h + 0x38)?)?, // sh_entsize
        ))
    };
    let mut symbols = HashMap::new();
    for i in 0..shnum {
        let (ty, off, size, link, entsize) = section(i)?;
        if ty != SHT_SYMTAB {
            continue;
        }
        let (_, str_off, str_size, _, _) = section(to_usize(link.into())?)?;
        let strtab = elf.get(str_off..str_off.checked_add(str_size)?)?;
        let table = elf.get(off..off.checked_add(size)?)?;
        if entsize < 24 {
            return None;
        }
        for sym in table.chunks_exact(entsize) {
            let name_at = to_usize(read_u32(sym, 0)?.into())?;
            let info = *sym.get(4)?;
            let shndx = read_u16(sym, 6)?;
            let value = read_u64(sym, 8)?;
            let bind = info >> 4;
            // Global or weak, defined.
            if !(bind == 1 || bind == 2) || shndx == 0 {
                continue;
            }
            let name = strtab.get(name_at..)?;
            let end = name.iter().position(|&b| b == 0)?;
            let Ok(name) = std::str::from_utf8(name.get(..end)?) else {
                continue;
            };
            if !name.is_empty() {
                symbols.insert(name.to_string(), value);
            }
        }
    }
    // A runner without its far function is not ours.
    symbols.contains_key("elfjit_far_add").then_some(symbols)
}

/// 64-bit FNV-1a: a stable hash for cache file names.
fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for &b in *p {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        // Separate the parts, so ("ab", "c") and ("a", "bc") differ.
        h ^= 0xff;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

fn io(context: String) -> impl FnOnce(std::io::Error) -> Error {
    move |source| Error::Io { context, source }
}

/// The cache file name of `arch`'s runner built by clang `version`: a hash of
/// everything the build depends on.
fn runner_name(arch: Arch, version: &str) -> String {
    let script = far_script();
    let flags = build_flags(arch, Path::new("far.ld")).join(" ");
    let hash = fnv1a(&[
        RUNNER_C.as_bytes(),
        SUPPORT_C.as_bytes(),
        script.as_bytes(),
        flags.as_bytes(),
        version.as_bytes(),
    ]);
    format!("runner-{}-{hash:016x}", arch.name())
}

/// Whether `name` in the runner directory is elfjit's: a runner, its digest, or a
/// temporary file or work directory (including the `build.tmp-*` of older versions).
pub fn is_runner_file(name: &str) -> bool {
    name.starts_with("runner-") || verified::is_temporary(name)
}

/// Removes the emulated runners, their digests and leftover build directories from the
/// runner cache `root` (`elfjit cache clear`); other files are left alone. A missing
/// directory is empty; one that is not yours alone is refused and left as it is.
pub fn clear_dir(root: &Path) -> Result<Cleared> {
    Ok(cache::clear_matching(root, is_runner_file)?)
}

/// Says once why the runner in `dir` is rebuilt.
fn rebuilding(reason: &'static str, why: String) {
    notes::once("runner cache", reason, || {
        format!("rebuilding the emulation runner: {why}")
    });
}

/// The cached runner `name` in `dir` if it and its digest pass every check and match;
/// `None` (said once per reason) if it must be rebuilt.
fn load(dir: &PrivateDir, name: &str, arch: Arch) -> Option<Runner> {
    let runner = match verified::load(dir, name, MAX_RUNNER_SIZE) {
        Ok(v) => v,
        Err(Refused::Unsafe { reason, why }) => {
            rebuilding(reason, why);
            return None;
        }
        Err(_) => return None,
    };
    let Some(symbols) = executable_symbols(&runner.bytes, arch) else {
        rebuilding(
            "not-a-runner",
            format!(
                "{} is not a runner for {arch}",
                dir.path().join(name).display()
            ),
        );
        return None;
    };
    Some(Runner {
        arch,
        path: dir.path().join(name),
        symbols,
        build_log: None,
        executable: runner,
    })
}

/// Builds `arch`'s runner as `name` in `dir`: in a private work directory there, its
/// digest recorded beside it; returns it opened and verified.
fn build(compiler: &Compiler, arch: Arch, dir: &PrivateDir, name: &str) -> Result<Runner> {
    let (work_name, work) = dir.temp_subdir("build").map_err(io(format!(
        "cannot create a build directory in {}",
        dir.path().display()
    )))?;
    let result = build_in(compiler, arch, &work, dir, name);
    let _ = dir.remove_tree(OsStr::new(&work_name));
    result
}

/// Runs `compiler` with `flags` then `extra` in the work directory `work` (through this
/// process's descriptor: nothing on its path can redirect clang's reads and writes);
/// returns what it printed.
fn run_clang(
    compiler: &Compiler,
    arch: Arch,
    work: &PrivateDir,
    flags: &[String],
    extra: &[&str],
) -> Result<String> {
    let args: Vec<OsString> = flags
        .iter()
        .map(OsString::from)
        .chain(extra.iter().map(OsString::from))
        .collect();
    let mut spec = Spec::new(compiler.path(), args);
    spec.current_dir = Some(work.fd_path());
    spec.stderr_limit = MAX_DIAGNOSTICS;
    spec.deadline = deadline_after(compiler.timeout());
    // elfjit's own sources, read from files: the limit is set while clang starts up.
    spec.memory_limit = compiler.memory_limit();
    let output = child::run(&spec).map_err(|f| match f {
        Failure::TimedOut { .. } => emulation_error(
            arch,
            format!(
                "building the runner with {} did not finish within {:.0} s and was killed",
                compiler.path().display(),
                compiler.timeout().as_secs_f64()
            ),
        ),
        other => child_error(arch, compiler.path(), other),
    })?;
    let log = String::from_utf8_lossy(&output.stderr).into_owned();
    if !output.status.success() {
        let hint = if log.contains("lld") || log.contains("fuse-ld") {
            "\n(the runner is linked with lld: install it, e.g. `apt-get install lld-19`)"
        } else {
            ""
        };
        return Err(emulation_error(
            arch,
            format!(
                "building the runner with {} failed ({}):\n{}{hint}",
                compiler.path().display(),
                output.status,
                log.trim_end()
            ),
        ));
    }
    Ok(log)
}

fn build_in(
    compiler: &Compiler,
    arch: Arch,
    work: &PrivateDir,
    dir: &PrivateDir,
    name: &str,
) -> Result<Runner> {
    for (file, text) in [
        ("far.ld", far_script()),
        ("runner.c", RUNNER_C.to_string()),
        ("support.c", SUPPORT_C.to_string()),
    ] {
        work.write_file(file, &[text.as_bytes()], 0o600)
            .map_err(io(format!(
                "cannot write {}",
                work.path().join(file).display()
            )))?;
    }
    // Compiled to objects in the work directory, then linked there: one clang given both
    // sources and `-o runner` would put its intermediate objects in $TMPDIR (shared /tmp).
    // Each step gets every flag (the hash in the runner's name covers one list), so the
    // other step's are unused on purpose.
    let flags = build_flags(arch, Path::new("far.ld"));
    let compile_log = run_clang(
        compiler,
        arch,
        work,
        &flags,
        &["-Qunused-arguments", "-c", "runner.c", "support.c"],
    )?;
    let link_log = run_clang(
        compiler,
        arch,
        work,
        &flags,
        &[
            "-Qunused-arguments",
            "-o",
            "runner",
            "runner.o",
            "support.o",
        ],
    )?;
    let log = compile_log + &link_log;
    let not_valid = |why: String| {
        emulation_error(
            arch,
            format!("the runner built in {} {why}", work.path().display()),
        )
    };
    // Executable (qemu wants an execute bit) by its owner only, its digest recorded.
    let built = verified::install(work, "runner", dir, name, MAX_RUNNER_SIZE)
        .map_err(|why| not_valid(format!("cannot be kept: {why}")))?;
    let Some(symbols) = executable_symbols(&built.bytes, arch) else {
        let _ = dir.remove(OsStr::new(name));
        return Err(not_valid("is not a valid executable".to_string()));
    };
    Ok(Runner {
        arch,
        path: dir.path().join(name),
        symbols,
        build_log: Some(log),
        executable: built,
    })
}

/// The runner for `arch` in the cache `dir`: loaded if a valid one is there, else built
/// (a cached file that does not verify is rebuilt). If `dir` is not yours alone (or
/// cannot be created) it is not used: the runner is built for this process in a private
/// temporary directory, which is removed at once (the open file stays runnable).
pub fn load_or_build(compiler: &Compiler, arch: Arch, dir: &Path) -> Result<Runner> {
    let version = compiler.version()?;
    let name = runner_name(arch, &version);
    match PrivateDir::open(dir, true) {
        Ok(d) => {
            if let Some(r) = load(&d, &name, arch) {
                return Ok(r);
            }
            verified::remove_stale(&d);
            build(compiler, arch, &d, &name)
        }
        Err(e) => {
            let reason = match &e {
                Refused::Unsafe { reason, .. } => reason,
                _ => "unusable",
            };
            notes::once("runner cache directory", reason, || {
                format!(
                    "not using the runner cache: {e}; whoever can write it could make \
                     elfjit run their code. The runner is built for this process only"
                )
            });
            let base = std::env::temp_dir();
            let path = base.join(format!(
                "elfjit-runner-{}",
                random_hex().map_err(io("cannot name a temporary directory".into(),))?
            ));
            std::fs::DirBuilder::new()
                .mode(0o700)
                .create(&path)
                .map_err(io(format!("cannot create {}", path.display())))?;
            let private = PrivateDir::open(&path, false);
            let result = match private {
                Ok(d) => build(compiler, arch, &d, &name),
                Err(e) => Err(emulation_error(
                    arch,
                    format!("cannot use {}: {e}", path.display()),
                )),
            };
            let _ = std::fs::remove_dir_all(&path);
            result
        }
    }
}

/// The runner for `arch`: from this process's memory, else [`load_or_build`] in the
/// cache root ([`elfjit::cache::root_dir`]).
pub fn runner(compiler: &Compiler, arch: Arch) -> Result<Arc<Runner>> {
    runner_in(compiler, arch, &cache::root_dir())
}

/// [`runner`] with the cache directory given. Each (clang, directory, architecture) has
/// its own slot: a build holds only its own, so a slow build (bounded by the compiler's
/// timeout) delays the runs that need that very runner and no other.
pub fn runner_in(compiler: &Compiler, arch: Arch, dir: &Path) -> Result<Arc<Runner>> {
    type Key = (PathBuf, PathBuf, Arch);
    type Slot = Arc<Mutex<Option<Arc<Runner>>>>;
    static RUNNERS: OnceLock<Mutex<HashMap<Key, Slot>>> = OnceLock::new();
    let key = (compiler.path().to_path_buf(), dir.to_path_buf(), arch);
    let slot = RUNNERS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .entry(key)
        .or_default()
        .clone();
    let mut slot = slot.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(r) = &*slot {
        return Ok(r.clone());
    }
    let r = Arc::new(load_or_build(compiler, arch, dir)?);
    *slot = Some(r.clone());
    Ok(r)
}

/// The qemu-user program for `arch`.
pub fn qemu_name(arch: Arch) -> &'static str {
    match arch {
        Arch::X86_64 => "qemu-x86_64",
        Arch::Aarch64 => "qemu-aarch64",
        Arch::Riscv64 => "qemu-riscv64",
        Arch::Loongarch64 => "qemu-loongarch64",
        Arch::Ppc64le => "qemu-ppc64le",
    }
}

/// Finds `qemu-<arch>` (or Debian's `qemu-<arch>-static`) in PATH; `ELFJIT_QEMU`
/// overrides the search.
pub fn find_qemu(arch: Arch) -> Result<PathBuf> {
    if let Some(q) = std::env::var_os("ELFJIT_QEMU").filter(|v| !v.is_empty()) {
        return Ok(PathBuf::from(q));
    }
    let name = qemu_name(arch);
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path) {
        for candidate in [name.to_string(), format!("{name}-static")] {
            let p = dir.join(&candidate);
            if p.is_file() {
                return Ok(p);
            }
        }
    }
    Err(emulation_error(
        arch,
        format!(
            "{name} not found in PATH; emulated runs need qemu-user \
             (Debian/Ubuntu: `apt-get install qemu-user`)"
        ),
    ))
}

/// The call timeout: `ELFJIT_RUN_TIMEOUT` seconds if set (a positive number), else
/// [`DEFAULT_TIMEOUT`]. A value too large to represent (`1e20`, `inf`) is no limit.
fn timeout() -> Option<Duration> {
    let Some(secs) = std::env::var("ELFJIT_RUN_TIMEOUT")
        .ok()
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|s| *s > 0.0)
    else {
        return Some(DEFAULT_TIMEOUT);
    };
    Duration::try_from_secs_f64(secs).ok()
}

/// Describes how a process ended.
fn describe(status: ExitStatus) -> String {
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(sig) = status.signal() {
            let name = match sig {
                4 => " (SIGILL: illegal instruction)",
                5 => " (SIGTRAP)",
                6 => " (SIGABRT)",
                7 => " (SIGBUS: bus error)",
                8 => " (SIGFPE: arithmetic exception)",
                9 => " (SIGKILL)",
                11 => " (SIGSEGV: invalid memory access)",
                _ => "",
            };
            return format!("killed by signal {sig}{name}");
        }
    }
    status.to_string()
}

/// The error for a child that did not finish by itself (all but the timeout, which each
/// caller words).
fn child_error(arch: Arch, program: &Path, f: Failure) -> Error {
    match f {
        Failure::Spawn(source) => Error::Io {
            context: format!("cannot start {}", program.display()),
            source,
        },
        Failure::TimedOut { .. } => emulation_error(
            arch,
            format!(
                "{} did not finish in time and was killed",
                program.display()
            ),
        ),
        Failure::TooMuchOutput {
            stream: Stream::Stdout,
            limit,
            ..
        } => emulation_error(
            arch,
            format!(
                "the runner's reply is longer than the {limit} bytes expected (did the kernel \
                 write to stdout?); it was stopped"
            ),
        ),
        Failure::TooMuchOutput { limit, stderr, .. } => emulation_error(
            arch,
            format!(
                "{} wrote more than {limit} bytes of messages and was stopped; the first: {}",
                program.display(),
                String::from_utf8_lossy(stderr.get(..stderr.len().min(4096)).unwrap_or_default())
            ),
        ),
        Failure::OutOfMemory { stream, bytes } => Error::Memory(format!(
            "cannot allocate {bytes} bytes for the {stream:?} of {}",
            program.display()
        )),
        Failure::Io(source) => Error::Io {
            context: format!("cannot talk to {}", program.display()),
            source,
        },
    }
}

/// Runs `program args...` with `input` (its parts in order) on stdin and at most
/// `reply_limit` bytes expected on stdout, within `limit` (`None`: no limit); returns
/// stdout or an error built from stderr and the exit status. Used for the runner (under
/// qemu) and by tests.
pub fn exchange(
    arch: Arch,
    program: &Path,
    args: &[&OsStr],
    input: &[&[u8]],
    reply_limit: usize,
    limit: Option<Duration>,
) -> Result<Vec<u8>> {
    let mut spec = Spec::new(program, args.iter().map(|a| a.to_os_string()).collect());
    spec.input = input;
    spec.stdout_limit = reply_limit;
    spec.stderr_limit = MAX_RUNNER_STDERR;
    spec.deadline = limit.and_then(deadline_after);
    let finished = child::run(&spec).map_err(|f| match f {
        Failure::TimedOut { .. } => emulation_error(
            arch,
            format!(
                "the runner did not finish within {:.0} s and was killed \
                 (set ELFJIT_RUN_TIMEOUT to allow longer)",
                limit.unwrap_or_default().as_secs_f64()
            ),
        ),
        other => child_error(arch, program, other),
    })?;
    if !finished.status.success() {
        let said = String::from_utf8_lossy(&finished.stderr);
        let said = said.trim();
        return Err(emulation_error(
            arch,
            format!(
                "the runner failed ({}){}{said}",
                describe(finished.status),
                if said.is_empty() { "" } else { ": " }
            ),
        ));
    }
    Ok(finished.stdout)
}

/// Sends `request` to the runner under qemu and returns its parsed reply.
pub fn call(runner: &Runner, request: &Request<'_>) -> Result<Reply> {
    let qemu = find_qemu(runner.arch)?;
    let header = request.header();
    let parts: [&[u8]; 4] = [&header, request.image, request.args, request.buffers];
    let program = runner.program();
    let out = exchange(
        runner.arch,
        &qemu,
        &[program.as_os_str()],
        &parts,
        REPLY_HEADER + request.buffers.len(),
        timeout(),
    )?;
    Reply::decode(&out, request.buffers.len()).map_err(|m| emulation_error(runner.arch, m))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_separates_parts() {
        assert_ne!(fnv1a(&[b"ab", b"c"]), fnv1a(&[b"a", b"bc"]));
        assert_eq!(fnv1a(&[b"x"]), fnv1a(&[b"x"]));
    }

    #[test]
    fn not_runners_are_rejected() {
        assert!(executable_symbols(b"", Arch::X86_64).is_none());
        assert!(executable_symbols(b"\x7fELF\x02\x01garbage", Arch::X86_64).is_none());
        assert!(executable_symbols(&[0u8; 200], Arch::Aarch64).is_none());
    }

    #[test]
    fn flags_place_the_runner_and_its_far_function() {
        let f = build_flags(Arch::Riscv64, Path::new("/x/far.ld"));
        assert!(f.contains(&"--target=riscv64-unknown-linux-gnu".to_string()));
        assert!(f.contains(&"-mabi=lp64d".to_string()));
        assert!(f.contains(&"-Wl,--image-base=0x11000000".to_string()));
        assert!(f.contains(&"-Wl,-T,/x/far.ld".to_string()));
        assert!(far_script().contains("elfjit_far 0x210000000"));
    }

    #[test]
    fn crashes_and_failures_become_errors() {
        let sh = Path::new("/bin/sh");
        assert!(sh.exists(), "this test runs /bin/sh as a stand-in for qemu");
        let run = |script: &str| {
            exchange(
                Arch::X86_64,
                sh,
                &["-c".as_ref(), script.as_ref()],
                &[b"in", b"put"],
                1 << 20,
                Some(Duration::from_secs(20)),
            )
        };
        assert_eq!(run("cat").unwrap(), b"input");
        let e = run("echo 'elfjit-runner: boom' >&2; exit 3").unwrap_err();
        assert!(matches!(e, Error::Emulation { .. }), "{e}");
        assert!(e.to_string().contains("elfjit-runner: boom"), "{e}");
        let e = run("kill -SEGV $$").unwrap_err();
        assert!(e.to_string().contains("SIGSEGV"), "{e}");
        let e = exchange(
            Arch::X86_64,
            sh,
            &["-c".as_ref(), "sleep 30".as_ref()],
            &[],
            1 << 20,
            Some(Duration::from_millis(200)),
        )
        .unwrap_err();
        assert!(e.to_string().contains("did not finish"), "{e}");
        let e = exchange(
            Arch::X86_64,
            Path::new("/nonexistent/elfjit-qemu"),
            &[],
            &[],
            1 << 20,
            Some(Duration::from_secs(1)),
        )
        .unwrap_err();
        assert!(matches!(e, Error::Io { .. }), "{e}");
        // A reply longer than expected stops the runner and says so.
        let e = exchange(
            Arch::X86_64,
            sh,
            &["-c".as_ref(), "yes".as_ref()],
            &[],
            64,
            None,
        )
        .unwrap_err();
        assert!(e.to_string().contains("reply is longer"), "{e}");
    }
}
