//! Helpers shared by the CLI's tests: scratch directories, the real `elfjit` binary run
//! with a watchdog, files owned by another user, and fake programs.
#![allow(dead_code)] // each test file uses its own subset

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

// Scratch directories and the host's clang, shared with the driver's tests.
#[path = "../../../driver/tests/common/mod.rs"]
mod common;
pub use common::*;

/// The uid and gid files "owned by another user" get (nobody on Debian).
pub const OTHER_UID: u32 = 65534;

/// The `elfjit` binary cargo built for these tests, with no cache, emulation or compiler
/// settings inherited from the environment.
pub fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_elfjit"));
    for var in [
        "ELFJIT_CACHE_DIR",
        "ELFJIT_EMULATE",
        "ELFJIT_RUN_TIMEOUT",
        "ELFJIT_QEMU",
        "ELFJIT_COMPILER",
        "ELFJIT_COMPILE_SERVERS",
    ] {
        c.env_remove(var);
    }
    c.stdin(Stdio::null());
    c
}

/// Runs `cmd`, killing it if it takes longer than `limit`; returns its output and whether
/// it had to be killed.
pub fn run_with_watchdog(cmd: &mut Command, limit: Duration) -> (Output, bool) {
    let child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn elfjit");
    let pid = child.id() as libc::pid_t;
    // The outputs are drained while waiting (a child blocked on a full pipe is not a hang).
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let start = Instant::now();
    match rx.recv_timeout(limit) {
        Ok(o) => (o.unwrap(), false),
        Err(_) => {
            // SAFETY: kill(2) on our own unreaped child's pid.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            let o = rx.recv().unwrap().unwrap();
            assert!(start.elapsed() >= limit);
            (o, true)
        }
    }
}

/// Runs `cmd` with a 120 s watchdog; a hang is a test failure.
pub fn run(cmd: &mut Command) -> Output {
    let (o, killed) = run_with_watchdog(cmd, Duration::from_secs(120));
    assert!(!killed, "elfjit hung; stderr: {}", stderr(&o));
    o
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The one JSON object a successful `run --json` prints.
pub fn json(o: &Output) -> serde_json::Value {
    assert!(
        o.status.success(),
        "exit {:?}, stderr: {}",
        o.status,
        stderr(o)
    );
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: stdout {:?}", stdout(o)))
}

/// Gives `path` (not following a symlink) to another user. CI runs as root; without root
/// the ownership tests cannot be set up, which is a failure, not a skip.
pub fn chown_to_other(path: &Path) {
    std::os::unix::fs::lchown(path, Some(OTHER_UID), Some(OTHER_UID)).unwrap_or_else(|e| {
        panic!(
            "chown {} to uid {OTHER_UID} failed ({e}); these tests run as root, as CI does",
            path.display()
        )
    });
}

pub fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// How many lines of `text` contain `needle`.
pub fn lines_with(text: &str, needle: &str) -> usize {
    text.lines().filter(|l| l.contains(needle)).count()
}

/// Whether process `pid` exists and is not a zombie.
pub fn process_alive(pid: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|stat| {
            // The state follows the parenthesised command name.
            stat.rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().next())
                .is_none_or(|s| s != "Z")
        })
        .unwrap_or(false)
}

/// Waits (up to 10 s) for `path` to hold a complete line.
pub fn wait_for_line(path: &Path) -> String {
    for _ in 0..500 {
        if let Ok(s) = std::fs::read_to_string(path) {
            if s.ends_with('\n') {
                return s;
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("{} never appeared", path.display());
}

/// A runner cache shared by every test binary of this crate (runners take seconds to
/// build; concurrent builders are safe, as the cache tests show).
pub fn shared_runner_cache() -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join("sec-shared-runners");
    std::fs::create_dir_all(&d).unwrap();
    d
}
