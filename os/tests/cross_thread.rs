//! Publication that other threads see (issue 28): the system calls a publish into a reused
//! range makes, and the fallback when the kernel refuses them, seen from outside the
//! process. A child process of this test binary loads a kernel, unloads it and loads
//! another into the same range, calling each, under `strace` (natively, or around
//! qemu-user for a foreign architecture: qemu performs a guest's membarrier as the host's,
//! so the host's strace sees it, and can refuse it). qemu-user does not let a guest install
//! a seccomp filter (`prctl(PR_SET_SECCOMP)` fails with EINVAL, `seccomp(2)` with ENOSYS),
//! so the refusals are strace's injected errors: the kernel call is made and fails, as a
//! filter would make it.
//!
//! riscv64's `riscv_flush_icache` (syscall 259) is not a host call under qemu-riscv64, which
//! completes it in its CPU loop (so neither strace nor qemu's `-strace` sees it): its test
//! preloads a small library logging the process's `syscall(259, ...)` calls instead.
//!
//! Linux only: the calls and their fallbacks are Linux's (docs/os-support.md).
#![cfg(target_os = "linux")]

mod common;

use common::{compile, load_in, wait_until};
use elfjit_core::SegmentKind;
use elfjit_os::icache::{cross_thread_sync, CrossThreadSync};
use elfjit_os::{ArenaConfig, Mode};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The kernels: the same layout (so the second lands where the first was), other
/// instructions.
const FIRST: &str = "int answer(int x) { return x * 6 + 4; }";
const SECOND: &str = "int answer(int x) { return x * 7 + 1; }";

/// The name of [`child_publishes_into_a_reused_range`] for `--exact`.
const CHILD: &str = "child_publishes_into_a_reused_range";

/// How long a child may take before it is presumed stuck (a process start from a
/// multi-threaded program under qemu-user can deadlock before it execs).
const DEADLINE: Duration = Duration::from_secs(120);

/// The child: publishes into a range another kernel ran from, calls the new code, and
/// prints what elfjit did for other threads. `getppid` marks, in the trace, where the
/// publish into the reused range starts.
#[test]
#[ignore = "the child process of the traced tests below"]
fn child_publishes_into_a_reused_range() {
    let (first, second) = (compile(FIRST, "-O1"), compile(SECOND, "-O1"));
    let arena = common::arena(ArenaConfig::new(Mode::PageGranular)).expect("a page-granular arena");
    let call = |entry: usize, x: i32| {
        // SAFETY: `entry` is a live `int answer(int)` of this test's kernels.
        let f: extern "C" fn(i32) -> i32 = unsafe { std::mem::transmute(entry) };
        f(x)
    };
    let code_page = |m: &common::InArena| {
        let start = m.memory.segment(SegmentKind::Code).expect("code").0;
        start / arena.page_size()
    };
    // The arena hands freed pages out again once its pool has gathered some (see
    // os/tests/arena.rs), so: the first kernel loaded and unloaded until its code pages
    // repeat, then the second until it lands on one of them.
    let mut freed = std::collections::BTreeSet::new();
    let mut loads = 0;
    for _ in 0..32 {
        let old = load_in(&arena, &first, "answer").expect("load the first kernel");
        loads += 1;
        assert_eq!(call(old.entry, 7), 46, "the first kernel");
        if !freed.insert(code_page(&old)) {
            break;
        }
    }
    // SAFETY: getppid has no arguments and cannot fail.
    unsafe { libc::getppid() };
    let mut reused = None;
    for _ in 0..32 {
        let new = load_in(&arena, &second, "answer").expect("load the second kernel");
        loads += 1;
        assert_eq!(call(new.entry, 7), 50, "the second kernel");
        if freed.contains(&code_page(&new)) {
            reused = new.memory.segment(SegmentKind::Code);
            break;
        }
    }
    let (start, len) = reused.unwrap_or_else(|| {
        panic!("no load of the second kernel reused the first's pages {freed:?}")
    });
    println!("loads: {loads}");
    println!("reused code: {start} {len}");
    println!("cross-thread sync: {:?}", cross_thread_sync());
}

/// What a watched child printed and the calls it was seen making.
struct Traced {
    mode: String,
    loads: usize,
    /// The code (start, length) published into the reused range.
    #[cfg_attr(not(target_arch = "riscv64"), allow(dead_code))] // riscv64's test
    reused: (usize, usize),
    trace: Vec<String>,
}

impl Traced {
    /// The calls to `name` seen, each from its arguments to its result.
    fn calls(&self, name: &str) -> Vec<&str> {
        calls_in(&self.trace, name)
    }

    /// The calls to `name` after the `getppid` marker.
    fn calls_after_marker(&self, name: &str) -> Vec<&str> {
        let marker = self.trace.iter().position(|l| l.contains("getppid("));
        let marker = marker.unwrap_or_else(|| panic!("no getppid marker in {:#?}", self.trace));
        calls_in(&self.trace[marker..], name)
    }
}

fn calls_in<'a>(lines: &'a [String], name: &str) -> Vec<&'a str> {
    let open = format!("{name}(");
    lines
        .iter()
        .filter_map(|l| l.split_once(open.as_str()).map(|(_, call)| call))
        .collect()
}

/// `key` of this architecture's Linux target in .cargo/config.toml (e.g. the runner
/// `qemu-aarch64 -L /usr/aarch64-linux-gnu`, the linker `aarch64-linux-gnu-gcc`), if any.
fn target_setting(key: &str) -> Option<String> {
    let config = concat!(env!("CARGO_MANIFEST_DIR"), "/../.cargo/config.toml");
    let text = std::fs::read_to_string(config).unwrap_or_else(|e| panic!("{config}: {e}"));
    let ours = format!("[target.{}", std::env::consts::ARCH);
    let mut in_ours = false;
    for line in text.lines().map(str::trim) {
        if line.starts_with('[') {
            in_ours = line.starts_with(&ours) && line.contains("linux");
        } else if let Some((k, value)) = line.split_once('=').filter(|_| in_ours) {
            if k.trim() == key {
                return Some(value.trim().trim_matches('"').to_string());
            }
        }
    }
    None
}

/// The runner cargo uses for this architecture (qemu-user), or none: natively.
fn runner() -> Vec<String> {
    target_setting("runner")
        .map(|r| r.split_whitespace().map(String::from).collect())
        .unwrap_or_default()
}

/// How the child's calls are seen.
enum Watch<'a> {
    /// Under strace (around qemu-user abroad), tracing membarrier and the marker, with a
    /// strace `inject=` expression refusing membarrier calls.
    Strace { inject: Option<&'a str> },
    /// With a library preloaded that logs the calls (os/tests/riscv_flush_log.c).
    #[cfg_attr(not(target_arch = "riscv64"), allow(dead_code))] // riscv64's test
    Preload { library: &'a Path },
}

/// Runs the child, watched.
fn traced(name: &str, watch: Watch) -> Traced {
    let dir =
        std::env::temp_dir().join(format!("elfjit-cross-thread-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temporary directory");
    let result = (0..2).find_map(|_| traced_once(&dir, &watch));
    let _ = std::fs::remove_dir_all(&dir);
    result.unwrap_or_else(|| panic!("the watched child overran {DEADLINE:?} twice"))
}

/// One watched run; `None` if it overran the deadline (it is then killed and reaped).
fn traced_once(dir: &Path, watch: &Watch) -> Option<Traced> {
    let path = |file: &str| -> PathBuf { dir.join(file) };
    let file = |file: &str| std::fs::File::create(path(file)).expect("output file");
    let _ = std::fs::remove_file(path("trace"));
    let exe = std::env::current_exe().expect("test binary");
    let mut runner = runner();
    let mut command = match watch {
        Watch::Strace { inject } => {
            let mut strace = Command::new("strace");
            strace.args(["-f", "-qq", "--seccomp-bpf"]);
            strace.args(["-e", "trace=membarrier,getppid"]);
            if let Some(inject) = inject {
                strace.args(["-e", &format!("inject=membarrier:{inject}")]);
            }
            strace.arg("-o").arg(path("trace")).args(runner).arg(exe);
            strace
        }
        Watch::Preload { library } => {
            let preload = format!("LD_PRELOAD={}", library.display());
            let mut command = if runner.is_empty() {
                let mut command = Command::new(exe);
                command.env("LD_PRELOAD", library);
                command
            } else {
                // For the guest only (qemu's -E): the host's loader would refuse it.
                let mut command = Command::new(runner.remove(0));
                command.args(["-E", &preload]).args(runner).arg(exe);
                command
            };
            command.env("ELFJIT_TEST_SYSCALL_LOG", path("trace"));
            command
        }
    };
    command.args(["--exact", CHILD, "--ignored", "--nocapture"]);
    let mut child = command
        .stdin(Stdio::null())
        .stdout(file("stdout"))
        .stderr(file("stderr"))
        .spawn()
        .expect("start the child (under strace: scripts/setup installs it)");
    let status = wait_until(&mut child, Instant::now() + DEADLINE)?;
    let read = |file: &str| std::fs::read_to_string(path(file)).unwrap_or_default();
    let (stdout, stderr, trace) = (read("stdout"), read("stderr"), read("trace"));
    assert!(
        status.success(),
        "watched child: {status}\n{stdout}\n{stderr}\ntrace:\n{trace}"
    );
    let said = |what: &str| {
        let prefix = format!("{what}: ");
        stdout
            .lines()
            .find_map(|l| l.split_once(prefix.as_str()).map(|(_, v)| v.to_string()))
            .unwrap_or_else(|| panic!("the child did not say its {what}:\n{stdout}\n{stderr}"))
    };
    let number = |text: &str| -> usize { text.parse().expect("a number") };
    let reused = said("reused code");
    let (start, len) = reused.split_once(' ').expect("start and length");
    Some(Traced {
        mode: said("cross-thread sync"),
        loads: number(&said("loads")),
        reused: (number(start), number(len)),
        trace: trace.lines().map(String::from).collect(),
    })
}

/// With the kernel's membarrier: aarch64 registers once, then issues SYNC_CORE after each
/// publish, the one into the reused range included; elsewhere no membarrier is made.
#[test]
fn publishing_makes_the_calls_the_architecture_needs() {
    let t = traced("granted", Watch::Strace { inject: None });
    let calls = t.calls("membarrier");
    if cfg!(target_arch = "aarch64") {
        assert_eq!(
            t.mode,
            format!("{:?}", CrossThreadSync::Membarrier),
            "{calls:#?}"
        );
        assert!(
            calls[0].starts_with("MEMBARRIER_CMD_QUERY, 0) = 0x"),
            "{calls:#?}"
        );
        assert!(
            calls[1].starts_with("MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_SYNC_CORE, 0) = 0"),
            "{calls:#?}"
        );
        let after = t.calls_after_marker("membarrier");
        assert!(
            !after.is_empty()
                && after
                    .iter()
                    .all(|c| c.starts_with("MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE, 0) = 0")),
            "the publish into the reused range: {after:#?}"
        );
        // One per publish of code (each load publishes once).
        assert_eq!(calls.len(), 2 + t.loads, "{calls:#?}");
    } else {
        assert_eq!(t.mode, format!("{:?}", CrossThreadSync::NotNeeded));
        assert!(calls.is_empty(), "no membarrier needed here: {calls:#?}");
    }
}

/// A kernel without membarrier (every call ENOSYS): aarch64 asks once, takes the fallback
/// and says so with the errno; the new code runs.
#[cfg(target_arch = "aarch64")]
#[test]
fn without_membarrier_the_fallback_is_taken() {
    let t = traced(
        "enosys",
        Watch::Strace {
            inject: Some("error=ENOSYS"),
        },
    );
    assert_eq!(
        t.mode,
        format!(
            "{:?}",
            CrossThreadSync::Unavailable {
                errno: libc::ENOSYS
            }
        )
    );
    let calls = t.calls("membarrier");
    assert_eq!(calls.len(), 1, "only the query: {calls:#?}");
    assert!(
        calls[0].starts_with("MEMBARRIER_CMD_QUERY, 0) = -1 ENOSYS")
            && calls[0].ends_with("(INJECTED)"),
        "{calls:#?}"
    );
}

/// A kernel that lists SYNC_CORE but refuses the registration (EPERM, the second call):
/// the fallback with that errno, and no SYNC_CORE command after any publish.
#[cfg(target_arch = "aarch64")]
#[test]
fn a_refused_registration_takes_the_fallback() {
    let t = traced(
        "eperm",
        Watch::Strace {
            inject: Some("error=EPERM:when=2"),
        },
    );
    assert_eq!(
        t.mode,
        format!("{:?}", CrossThreadSync::Unavailable { errno: libc::EPERM })
    );
    let calls = t.calls("membarrier");
    assert_eq!(calls.len(), 2, "the query and the registration: {calls:#?}");
    assert!(
        calls[0].starts_with("MEMBARRIER_CMD_QUERY, 0) = 0x"),
        "{calls:#?}"
    );
    assert!(
        calls[1].starts_with("MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_SYNC_CORE, 0) = -1 EPERM")
            && calls[1].ends_with("(INJECTED)"),
        "{calls:#?}"
    );
}

/// riscv64: every publish flushes with `riscv_flush_icache(start, end, 0)` (flags 0: every
/// hart of the process), the publish into the reused range over its code; seen through a
/// preloaded library, as qemu-riscv64 makes no host call of it.
#[cfg(target_arch = "riscv64")]
#[test]
fn riscv_flushes_every_hart_after_each_publish() {
    let dir = std::env::temp_dir().join(format!("elfjit-riscv-log-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temporary directory");
    let library = dir.join("riscv_flush_log.so");
    let source = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/riscv_flush_log.c");
    // The target's C compiler: the linker cargo uses for it.
    let cc = target_setting("linker").unwrap_or_else(|| "cc".into());
    let mut build = Command::new(&cc)
        .args(["-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-o"])
        .arg(&library)
        .arg(source)
        .spawn()
        .unwrap_or_else(|e| panic!("start {cc}: {e}"));
    let built = wait_until(&mut build, Instant::now() + DEADLINE);
    assert!(
        built.is_some_and(|s| s.success()),
        "{cc} {source}: {built:?}"
    );
    let t = traced("riscv", Watch::Preload { library: &library });
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(t.mode, format!("{:?}", CrossThreadSync::NotNeeded));
    let flushes: Vec<(usize, usize, u64)> = t
        .calls("riscv_flush_icache")
        .iter()
        .map(|c| {
            let args: Vec<&str> = c.trim_end_matches(')').split(", ").collect();
            let hex = |a: &str| usize::from_str_radix(a.trim_start_matches("0x"), 16);
            match args[..] {
                [start, end, flags] => (
                    hex(start).expect("start"),
                    hex(end).expect("end"),
                    flags.parse().expect("flags"),
                ),
                _ => panic!("riscv_flush_icache({c}"),
            }
        })
        .collect();
    assert_eq!(flushes.len(), t.loads, "one per publish: {flushes:#x?}");
    assert!(
        flushes
            .iter()
            .all(|&(start, end, flags)| start < end && flags == 0),
        "every hart, a non-empty range: {flushes:#x?}"
    );
    let (code, len) = t.reused;
    let after = t.calls_after_marker("riscv_flush_icache").len();
    assert!(
        flushes[flushes.len() - after..]
            .iter()
            .any(|&(start, end, _)| start >= code && end <= code + len),
        "the reused range [{code:#x}, +{len}) flushed: {flushes:#x?}"
    );
}
