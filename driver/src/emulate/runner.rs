//! The runner program: built once per architecture with clang and lld, cached on disk,
//! its symbol table read back for resolving the image's externals, and run under
//! `qemu-<arch>` with the request on stdin.

use super::protocol::{Reply, Request};
use super::{FAR_ADDRESS, RUNNER_BASE};
use crate::clang::Compiler;
use crate::error::{Error, Result};
use crate::flags;
use elfjit_core::Arch;
use std::collections::HashMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The runner's C source.
pub const RUNNER_C: &str = include_str!("runner.c");
/// What kernels link against inside the runner.
pub const SUPPORT_C: &str = include_str!("support.c");

/// How long one emulated call may take before the runner is killed (override with
/// `ELFJIT_RUN_TIMEOUT`, in seconds).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);

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

/// A built runner: its path and its global symbols.
#[derive(Debug)]
pub struct Runner {
    /// The arch it runs on.
    pub arch: Arch,
    /// The executable.
    pub path: PathBuf,
    /// Defined global symbols and their addresses.
    pub symbols: HashMap<String, u64>,
    /// Whatever clang printed while building it (empty when warnings-clean), if it was
    /// built by this process.
    pub build_log: Option<String>,
}

/// The ELF machine number of `arch`.
fn machine(arch: Arch) -> u16 {
    match arch {
        Arch::X86_64 => 62,
        Arch::Aarch64 => 183,
        Arch::Riscv64 => 243,
        Arch::Loongarch64 => 258,
        Arch::Ppc64le => 21,
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
    if read_u16(elf, 16)? != ET_EXEC || read_u16(elf, 18)? != machine(arch) {
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

/// Where runners are cached: `$ELFJIT_CACHE_DIR`, else `$XDG_CACHE_HOME/elfjit`, else
/// `~/.cache/elfjit`, else a directory under the system's temporary directory.
pub fn cache_dir() -> PathBuf {
    let non_empty = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
    if let Some(d) = non_empty("ELFJIT_CACHE_DIR") {
        return PathBuf::from(d);
    }
    if let Some(d) = non_empty("XDG_CACHE_HOME") {
        return PathBuf::from(d).join("elfjit");
    }
    if let Some(h) = non_empty("HOME") {
        return PathBuf::from(h).join(".cache").join("elfjit");
    }
    std::env::temp_dir().join("elfjit-cache")
}

static UNIQUE: AtomicUsize = AtomicUsize::new(0);

/// A name no other thread or process is using in the cache directory.
fn unique_name(stem: &str) -> String {
    format!(
        "{stem}.tmp-{}-{}",
        std::process::id(),
        UNIQUE.fetch_add(1, Ordering::Relaxed)
    )
}

fn io(context: String) -> impl FnOnce(std::io::Error) -> Error {
    move |source| Error::Io { context, source }
}

/// Builds the runner for `arch` into `dir` (atomically: a temporary file renamed into
/// place) and returns clang's messages.
fn build(compiler: &Compiler, arch: Arch, dir: &Path, dest: &Path) -> Result<String> {
    let work = dir.join(unique_name("build"));
    std::fs::create_dir_all(&work).map_err(io(format!("cannot create {}", work.display())))?;
    let result = (|| {
        let script = work.join("far.ld");
        let runner_c = work.join("runner.c");
        let support_c = work.join("support.c");
        for (path, text) in [
            (&script, far_script()),
            (&runner_c, RUNNER_C.to_string()),
            (&support_c, SUPPORT_C.to_string()),
        ] {
            std::fs::write(path, text).map_err(io(format!("cannot write {}", path.display())))?;
        }
        let out = work.join("runner");
        let output = Command::new(compiler.path())
            .args(build_flags(arch, &script))
            .arg("-o")
            .arg(&out)
            .arg(&runner_c)
            .arg(&support_c)
            .stdin(Stdio::null())
            .output()
            .map_err(io(format!("cannot start {}", compiler.path().display())))?;
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
        std::fs::rename(&out, dest).map_err(io(format!(
            "cannot move the runner into {}",
            dest.display()
        )))?;
        Ok(log)
    })();
    let _ = std::fs::remove_dir_all(&work);
    result
}

/// The runner for `arch` in the cache `dir`: loaded if a valid one is there, else built
/// (a cached file that is not a runner for `arch` is rebuilt).
pub fn load_or_build(compiler: &Compiler, arch: Arch, dir: &Path) -> Result<Runner> {
    let version = compiler.version()?;
    let script = far_script();
    let flags = build_flags(arch, Path::new("far.ld")).join(" ");
    let hash = fnv1a(&[
        RUNNER_C.as_bytes(),
        SUPPORT_C.as_bytes(),
        script.as_bytes(),
        flags.as_bytes(),
        version.as_bytes(),
    ]);
    let path = dir.join(format!("runner-{}-{hash:016x}", arch.name()));
    if let Some(symbols) = std::fs::read(&path)
        .ok()
        .and_then(|b| executable_symbols(&b, arch))
    {
        return Ok(Runner {
            arch,
            path,
            symbols,
            build_log: None,
        });
    }
    std::fs::create_dir_all(dir)
        .map_err(io(format!("cannot create the cache {}", dir.display())))?;
    let log = build(compiler, arch, dir, &path)?;
    let bytes = std::fs::read(&path).map_err(io(format!("cannot read {}", path.display())))?;
    let symbols = executable_symbols(&bytes, arch).ok_or_else(|| {
        emulation_error(
            arch,
            format!(
                "the runner built at {} is not a valid executable",
                path.display()
            ),
        )
    })?;
    Ok(Runner {
        arch,
        path,
        symbols,
        build_log: Some(log),
    })
}

/// The runner for `arch`: from this process's memory, else [`load_or_build`] in
/// [`cache_dir`].
pub fn runner(compiler: &Compiler, arch: Arch) -> Result<Arc<Runner>> {
    type Key = (PathBuf, PathBuf, Arch);
    static RUNNERS: OnceLock<Mutex<HashMap<Key, Arc<Runner>>>> = OnceLock::new();
    let dir = cache_dir();
    let key = (compiler.path().to_path_buf(), dir.clone(), arch);
    // Held across the build, so one thread builds while the others wait for it.
    let mut runners = RUNNERS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(r) = runners.get(&key) {
        return Ok(r.clone());
    }
    let r = Arc::new(load_or_build(compiler, arch, &dir)?);
    runners.insert(key, r.clone());
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

/// The call timeout: `ELFJIT_RUN_TIMEOUT` seconds if set, else [`DEFAULT_TIMEOUT`].
fn timeout() -> Duration {
    std::env::var("ELFJIT_RUN_TIMEOUT")
        .ok()
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s > 0.0)
        .map_or(DEFAULT_TIMEOUT, Duration::from_secs_f64)
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

/// Runs `program args...` with `input` on stdin; returns stdout or an error built from
/// stderr and the exit status. Used for the runner (under qemu) and by tests.
pub fn exchange(
    arch: Arch,
    program: &Path,
    args: &[&std::ffi::OsStr],
    input: &[u8],
    limit: Duration,
) -> Result<Vec<u8>> {
    let mut cmd = Command::new(program);
    cmd.args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .map_err(io(format!("cannot start {}", program.display())))?;
    let (Some(mut stdin), Some(mut stdout), Some(mut stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        let _ = child.kill();
        let _ = child.wait();
        return Err(emulation_error(arch, "cannot open pipes to the runner"));
    };
    let input = input.to_vec();
    // The runner stops reading at the first error: a broken pipe here is not the story.
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    let out_reader = std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = stdout.read_to_end(&mut b);
        b
    });
    let err_reader = std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = stderr.read_to_end(&mut b);
        b
    });
    let deadline = Instant::now() + limit;
    let mut nap = Duration::from_micros(200);
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) => {}
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(io(format!("cannot wait for {}", program.display()))(e));
            }
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(emulation_error(
                arch,
                format!(
                    "the runner did not finish within {:.0} s and was killed \
                     (set ELFJIT_RUN_TIMEOUT to allow longer)",
                    limit.as_secs_f64()
                ),
            ));
        }
        std::thread::sleep(nap);
        nap = (nap * 2).min(Duration::from_millis(20));
    };
    let _ = writer.join();
    let stdout = out_reader.join().unwrap_or_default();
    let stderr = err_reader.join().unwrap_or_default();
    if !status.success() {
        let said = String::from_utf8_lossy(&stderr);
        let said = said.trim();
        return Err(emulation_error(
            arch,
            format!(
                "the runner failed ({}){}{said}",
                describe(status),
                if said.is_empty() { "" } else { ": " }
            ),
        ));
    }
    Ok(stdout)
}

/// Sends `request` to the runner under qemu and returns its parsed reply.
pub fn call(runner: &Runner, request: &Request<'_>) -> Result<Reply> {
    let qemu = find_qemu(runner.arch)?;
    let out = exchange(
        runner.arch,
        &qemu,
        &[runner.path.as_os_str()],
        &request.encode(),
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
        if !sh.exists() {
            return;
        }
        let run = |script: &str| {
            exchange(
                Arch::X86_64,
                sh,
                &["-c".as_ref(), script.as_ref()],
                b"input",
                Duration::from_secs(20),
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
            b"",
            Duration::from_millis(200),
        )
        .unwrap_err();
        assert!(e.to_string().contains("did not finish"), "{e}");
        let e = exchange(
            Arch::X86_64,
            Path::new("/nonexistent/elfjit-qemu"),
            &[],
            b"",
            Duration::from_secs(1),
        )
        .unwrap_err();
        assert!(matches!(e, Error::Io { .. }), "{e}");
    }
}
