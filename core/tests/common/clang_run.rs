//! Running clang for a test, shared by the core's, the OS crate's and the observer's
//! integration tests (included by path): source on stdin, object on stdout.
//!
//! Two things make these tests robust when they run under qemu-user (scripts/test runs
//! them for aarch64, riscv64 and ppc64le):
//! - `ELFJIT_TEST_OBJECTS`, when set, names a directory of objects already compiled,
//!   keyed by clang's identity, its arguments and the source. scripts/test sets it for
//!   the native run, which fills it, and for the emulated runs, which then mostly read it
//!   instead of starting clang from inside qemu.
//! - Starting a process from a multi-threaded program under qemu-user can deadlock the
//!   child before it execs (seen: a forked child stuck on a futex, hanging the suite for
//!   20 minutes). So clang gets a deadline; a clang that overran it is killed, reaped and
//!   started once more, with a note on stderr. A second overrun fails the test.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long one clang run may take before it is presumed stuck: these tests' sources take
/// clang well under a second, so 30 s is a stuck child, not a slow compile (a stuck child
/// cost the ppc64le run of os/tests/arena.rs 120 s, the deadline it had, in one suite run).
const DEADLINE: Duration = Duration::from_secs(30);

/// The clang the tests run: `$ELFJIT_CLANG`, else `clang-19`.
pub fn clang() -> String {
    std::env::var("ELFJIT_CLANG").unwrap_or_else(|_| "clang-19".into())
}

/// Runs clang with `args` (which must send the object to stdout, e.g. end in `- -o -`) on
/// `source`, and returns what it wrote; clang's diagnostics fail the test.
pub fn clang_output(args: &[&str], source: &[u8]) -> Vec<u8> {
    let stored = stored_path(args, source);
    if let Some(object) = stored.as_deref().and_then(|p| std::fs::read(p).ok()) {
        return object;
    }
    let object = match run_once(args, source) {
        Some(object) => object,
        None => {
            eprintln!(
                "note: clang overran {DEADLINE:?} (a process start under qemu-user can \
                 deadlock); killed it, starting it once more"
            );
            run_once(args, source)
                .unwrap_or_else(|| panic!("clang overran {DEADLINE:?} twice: {} {args:?}", clang()))
        }
    };
    if let Some(path) = stored {
        store(&path, &object);
    }
    object
}

/// One clang run; `None` if it overran the deadline (it is then killed and reaped).
fn run_once(args: &[&str], source: &[u8]) -> Option<Vec<u8>> {
    let mut child = Command::new(clang())
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            // Under Wine clang cannot start: the object should have been stored.
            let hint = if cfg!(windows) {
                "; a Windows test reads objects a Linux run stored: run scripts/test-windows"
            } else {
                ""
            };
            panic!("cannot start {} (set ELFJIT_CLANG{hint}): {e}", clang())
        });
    let mut stdin = child.stdin.take().expect("stdin");
    let source = source.to_vec();
    let writer = std::thread::spawn(move || stdin.write_all(&source));
    let stdout = drain(child.stdout.take().expect("stdout"));
    let stderr = drain(child.stderr.take().expect("stderr"));
    let status = wait_until(&mut child, Instant::now() + DEADLINE)?;
    let _ = writer.join();
    let (stdout, stderr) = (
        stdout.join().expect("stdout"),
        stderr.join().expect("stderr"),
    );
    assert!(
        status.success(),
        "{} {args:?} failed:\n{}",
        clang(),
        String::from_utf8_lossy(&stderr)
    );
    Some(stdout)
}

fn drain(mut pipe: impl Read + Send + 'static) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut out = Vec::new();
        let _ = pipe.read_to_end(&mut out);
        out
    })
}

/// Waits for `child` until `deadline`; past it, kills and reaps it and returns `None`.
pub fn wait_until(child: &mut Child, deadline: Instant) -> Option<std::process::ExitStatus> {
    loop {
        if let Some(status) = child.try_wait().expect("wait for a child") {
            return Some(status);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Where the object for this compile is kept, if `ELFJIT_TEST_OBJECTS` is set: a name
/// hashed from clang's identity (its path, size and modification time, or
/// `ELFJIT_CLANG_IDENTITY` when set), the arguments and the source.
///
/// `ELFJIT_CLANG_IDENTITY` is for test programs that cannot see clang: Windows tests under
/// Wine read objects a native run stored (scripts/test-windows sets it for both runs).
fn stored_path(args: &[&str], source: &[u8]) -> Option<PathBuf> {
    let dir = PathBuf::from(std::env::var_os("ELFJIT_TEST_OBJECTS")?);
    let clang = clang();
    let identity = match std::env::var("ELFJIT_CLANG_IDENTITY") {
        Ok(identity) => identity,
        Err(_) => {
            let identity = which(&clang)
                .and_then(|p| std::fs::metadata(p).ok())
                .map(|m| (m.len(), m.modified().ok()));
            format!("{identity:?}")
        }
    };
    let mut hash = Fnv::new();
    hash.add(clang.as_bytes());
    hash.add(identity.as_bytes());
    for arg in args {
        hash.add(arg.as_bytes());
    }
    hash.add(source);
    Some(dir.join(format!("{:016x}{:016x}.o", hash.0, hash.1)))
}

/// Writes `object` to `path` through a temporary file, so readers never see half of it.
fn store(path: &Path, object: &[u8]) {
    let Some(dir) = path.parent() else { return };
    let _ = std::fs::create_dir_all(dir);
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    if std::fs::write(&tmp, object).is_ok() {
        let _ = std::fs::rename(&tmp, path);
    }
}

/// `name` resolved through PATH (or as given when it has a slash).
fn which(name: &str) -> Option<PathBuf> {
    if name.contains('/') {
        return Some(PathBuf::from(name));
    }
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// Two FNV-1a 64-bit hashes with different offsets: 128 bits of name, no dependency.
struct Fnv(u64, u64);

impl Fnv {
    fn new() -> Fnv {
        Fnv(0xcbf2_9ce4_8422_2325, 0x6c62_272e_07bb_0142)
    }
    fn add(&mut self, bytes: &[u8]) {
        for &b in bytes.iter().chain(&[0xff]) {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
            self.1 = (self.1 ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
}
