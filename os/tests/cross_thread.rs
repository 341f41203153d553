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
//! Not seen here: riscv64's `riscv_flush_icache` (syscall 259). qemu-riscv64 completes it
//! itself (no host call for strace to see, and qemu 7.2's `-strace` does not list it); its
//! unit test in os/src/icache.rs checks that qemu accepts the call.

mod common;

use common::{compile, load_in, wait_until};
use elfjit_core::SegmentKind;
use elfjit_os::icache::{cross_thread_sync, CrossThreadSync};
use elfjit_os::{ArenaConfig, Mode};
use std::path::PathBuf;
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
    let mut reused = false;
    for _ in 0..32 {
        let new = load_in(&arena, &second, "answer").expect("load the second kernel");
        loads += 1;
        assert_eq!(call(new.entry, 7), 50, "the second kernel");
        if freed.contains(&code_page(&new)) {
            reused = true;
            break;
        }
    }
    assert!(
        reused,
        "no load of the second kernel reused the first's pages {freed:?}"
    );
    println!("loads: {loads}");
    println!("cross-thread sync: {:?}", cross_thread_sync());
}

/// What a traced child printed and the trace's lines.
struct Traced {
    mode: String,
    loads: usize,
    trace: Vec<String>,
}

impl Traced {
    /// The trace's membarrier lines, each the command's name and the result.
    fn membarriers(&self) -> Vec<&str> {
        self.trace
            .iter()
            .filter_map(|l| l.split_once("membarrier(").map(|(_, call)| call))
            .collect()
    }

    /// The membarrier lines after the `getppid` marker.
    fn membarriers_after_marker(&self) -> Vec<&str> {
        let marker = self.trace.iter().position(|l| l.contains("getppid("));
        let marker = marker.unwrap_or_else(|| panic!("no getppid marker in {:#?}", self.trace));
        self.trace[marker..]
            .iter()
            .filter_map(|l| l.split_once("membarrier(").map(|(_, call)| call))
            .collect()
    }
}

/// The runner cargo uses for this architecture's Linux target (.cargo/config.toml, e.g.
/// `qemu-aarch64 -L /usr/aarch64-linux-gnu`), or none: natively.
fn runner() -> Vec<String> {
    let config = concat!(env!("CARGO_MANIFEST_DIR"), "/../.cargo/config.toml");
    let text = std::fs::read_to_string(config).unwrap_or_else(|e| panic!("{config}: {e}"));
    let ours = format!("[target.{}", std::env::consts::ARCH);
    let mut in_ours = false;
    for line in text.lines().map(str::trim) {
        if line.starts_with('[') {
            in_ours = line.starts_with(&ours) && line.contains("linux");
        } else if let Some(value) = line.strip_prefix("runner").filter(|_| in_ours) {
            let value = value.trim_start().trim_start_matches('=').trim();
            return value
                .trim_matches('"')
                .split_whitespace()
                .map(String::from)
                .collect();
        }
    }
    Vec::new()
}

/// Runs the child under strace (tracing membarrier and the marker), with `inject` (a
/// strace `inject=` expression) refusing calls.
fn traced(name: &str, inject: Option<&str>) -> Traced {
    let dir =
        std::env::temp_dir().join(format!("elfjit-cross-thread-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temporary directory");
    let result = (0..2).find_map(|_| traced_once(&dir, inject));
    let _ = std::fs::remove_dir_all(&dir);
    result.unwrap_or_else(|| panic!("the traced child overran {DEADLINE:?} twice"))
}

/// One traced run; `None` if it overran the deadline (it is then killed and reaped).
fn traced_once(dir: &std::path::Path, inject: Option<&str>) -> Option<Traced> {
    let path = |file: &str| -> PathBuf { dir.join(file) };
    let file = |file: &str| std::fs::File::create(path(file)).expect("output file");
    let mut strace = Command::new("strace");
    strace.args([
        "-f",
        "-qq",
        "--seccomp-bpf",
        "-e",
        "trace=membarrier,getppid",
    ]);
    if let Some(inject) = inject {
        strace.args(["-e", &format!("inject=membarrier:{inject}")]);
    }
    strace.arg("-o").arg(path("trace"));
    strace
        .args(runner())
        .arg(std::env::current_exe().expect("test binary"));
    strace.args([
        "--exact",
        CHILD,
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ]);
    let mut child = strace
        .stdin(Stdio::null())
        .stdout(file("stdout"))
        .stderr(file("stderr"))
        .spawn()
        .expect("start strace (the tests need it: scripts/setup installs it)");
    let status = wait_until(&mut child, Instant::now() + DEADLINE)?;
    let read = |file: &str| std::fs::read_to_string(path(file)).unwrap_or_default();
    let (stdout, stderr, trace) = (read("stdout"), read("stderr"), read("trace"));
    assert!(
        status.success(),
        "traced child: {status}\n{stdout}\n{stderr}\ntrace:\n{trace}"
    );
    let mode = stdout
        .lines()
        .find_map(|l| l.split_once("cross-thread sync: ").map(|(_, m)| m))
        .unwrap_or_else(|| panic!("the child said no mode:\n{stdout}\n{stderr}"))
        .to_string();
    let loads = stdout
        .lines()
        .find_map(|l| l.split_once("loads: ").map(|(_, n)| n))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("the child said no count of loads:\n{stdout}"));
    let trace = trace.lines().map(String::from).collect();
    Some(Traced { mode, loads, trace })
}

/// With the kernel's membarrier: aarch64 registers once, then issues SYNC_CORE after each
/// publish, the one into the reused range included; elsewhere no membarrier is made.
#[test]
fn publishing_makes_the_calls_the_architecture_needs() {
    let t = traced("granted", None);
    let calls = t.membarriers();
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
        let after = t.membarriers_after_marker();
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
    let t = traced("enosys", Some("error=ENOSYS"));
    assert_eq!(
        t.mode,
        format!(
            "{:?}",
            CrossThreadSync::Unavailable {
                errno: libc::ENOSYS
            }
        )
    );
    let calls = t.membarriers();
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
    let t = traced("eperm", Some("error=EPERM:when=2"));
    assert_eq!(
        t.mode,
        format!("{:?}", CrossThreadSync::Unavailable { errno: libc::EPERM })
    );
    let calls = t.membarriers();
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
