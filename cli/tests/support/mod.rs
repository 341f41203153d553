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
    wait_with_watchdog(child, limit)
}

/// Waits for `child` (spawned with piped stdout and stderr), killing it if it takes longer
/// than `limit`; returns its output and whether it had to be killed.
pub fn wait_with_watchdog(child: std::process::Child, limit: Duration) -> (Output, bool) {
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

/// The effective uid of this process.
pub fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() }
}

/// Another user's symbolic link planted at the per-uid cache root `$TMPDIR/elfjit-<uid>`
/// (used when there is no `HOME`), pointing at a directory of the victim (us) that holds
/// names elfjit's cleanup and `cache clear` match (`x.tmp-1`, `.tmp-d/`), old enough to
/// count as stale.
pub struct PlantedRoot {
    /// The scratch directory holding both.
    pub scratch: Scratch,
    /// What `TMPDIR` is set to.
    pub tmp: PathBuf,
    /// The directory the link points at.
    pub victim: PathBuf,
}

impl PlantedRoot {
    pub fn new(tag: &str) -> PlantedRoot {
        let scratch = Scratch::new(tag);
        let tmp = scratch.join("tmp");
        let victim = scratch.join("victim");
        std::fs::create_dir_all(&tmp).unwrap();
        std::fs::create_dir_all(victim.join(".tmp-d")).unwrap();
        std::fs::write(victim.join(".tmp-d").join("f"), b"inside").unwrap();
        std::fs::write(victim.join("x.tmp-1"), b"precious").unwrap();
        chmod(&victim, 0o700);
        let old = std::time::SystemTime::now() - Duration::from_secs(2 * 3600);
        for p in [victim.join("x.tmp-1"), victim.join(".tmp-d")] {
            std::fs::File::open(&p).unwrap().set_modified(old).unwrap();
        }
        let link = tmp.join(format!("elfjit-{}", euid()));
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        chown_to_other(&link);
        PlantedRoot {
            scratch,
            tmp,
            victim,
        }
    }

    /// `elfjit ARGS` with no `HOME` (nor `XDG_CACHE_HOME`) and `TMPDIR` the scratch `tmp`.
    pub fn elfjit(&self, args: &[&std::ffi::OsStr]) -> Output {
        run(bin()
            .args(args)
            .env_remove("HOME")
            .env_remove("XDG_CACHE_HOME")
            .env("TMPDIR", &self.tmp))
    }

    /// Checks the victim's directory holds exactly what was planted in it, unchanged.
    pub fn assert_victim_untouched(&self) {
        let mut names: Vec<String> = std::fs::read_dir(&self.victim)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(
            names,
            [".tmp-d", "x.tmp-1"],
            "written or removed through the link"
        );
        assert_eq!(
            std::fs::read(self.victim.join("x.tmp-1")).unwrap(),
            b"precious"
        );
        assert_eq!(
            std::fs::read(self.victim.join(".tmp-d").join("f")).unwrap(),
            b"inside"
        );
    }
}
