//! A packed arena across processes (issue 26): other processes of the same user cannot
//! rewrite or truncate its code through the memfd, and after a real `fork()` the child's
//! modules keep running their own code whatever the parent loads or frees, the child's
//! arena refuses to load, and dropping it unmaps none of the child's own memory. The
//! page-granular arena keeps working across `fork` as before.
//!
//! Every child leaves with `_exit` and a status the parent checks; it never returns into
//! the test harness. The tests run one at a time: a `fork` makes the parent withhold the
//! packed slots live at that moment, and a descriptor scan must not see another test's
//! arena being made.
#![cfg(target_os = "linux")]

mod common;

use common::{compile, load_in, InArena};
use elfjit_core::{Layout, MemoryBackend, SegmentKind, SegmentRequest};
use elfjit_os::{Arena, ArenaConfig, ArenaError, Mode};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::process::Command;
use std::sync::Mutex;

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn alone() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

/// An object whose `f(void)` returns `value`.
fn returning(value: i32) -> Vec<u8> {
    compile(&format!("int f(void) {{ return {value}; }}"), "-O2")
}

fn load(arena: &Arena, object: &[u8]) -> InArena {
    load_in(arena, object, "f").unwrap_or_else(|e| panic!("load: {} ({:?})", e.0, e.1))
}

/// Calls a loaded `f`.
///
/// # Safety
/// `entry` must be a live `f` from [`returning`].
unsafe fn call(entry: usize) -> i32 {
    // SAFETY: the caller passes a live `int f(void)`.
    let f: extern "C" fn() -> i32 = unsafe { std::mem::transmute(entry) };
    f()
}

/// Forks; the child runs `body` and leaves with its status (101 if it panicked), never
/// returning into the harness. Returns the child's pid.
fn fork_child(body: impl FnOnce() -> i32) -> libc::pid_t {
    // SAFETY: fork in a test that runs alone (`ONE_AT_A_TIME`); the child runs `body`,
    // which uses only this test's objects, and leaves with `_exit`.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
    if pid == 0 {
        let status = std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)).unwrap_or(101);
        // SAFETY: leaving the child at once, without unwinding into the harness.
        unsafe { libc::_exit(status) };
    }
    pid
}

/// Waits for `pid`; its exit status, or the signal that killed it as `Err`.
fn wait(pid: libc::pid_t) -> Result<i32, i32> {
    let mut status = 0;
    // SAFETY: waiting for our own child.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    if libc::WIFEXITED(status) {
        Ok(libc::WEXITSTATUS(status))
    } else {
        Err(libc::WTERMSIG(status))
    }
}

/// A pipe (read end, write end), closed on exec.
fn pipe() -> (OwnedFd, OwnedFd) {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two new descriptors into `fds`.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: both are fresh descriptors nothing else owns.
    unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
}

/// Blocks until a byte arrives or the other end is closed (then the parent is done too).
/// In a child: closes its copy of the write end `write` (so that the parent's close is
/// seen), then blocks until a byte arrives on `read` or the parent closes its end.
fn wait_for_signal(read: RawFd, write: RawFd) {
    let mut byte = 0u8;
    // SAFETY: closing the child's own copy of a descriptor, then reading one byte into a
    // local.
    unsafe {
        libc::close(write);
        libc::read(read, (&mut byte as *mut u8).cast(), 1)
    };
}

fn signal(write: OwnedFd) {
    // SAFETY: writing one byte from a constant.
    let n = unsafe { libc::write(write.as_raw_fd(), [1u8].as_ptr().cast(), 1) };
    assert_eq!(n, 1, "signal the child");
}

/// A packed arena (natively on x86_64 it must be available; see `common::arena`).
fn packed() -> Option<Arena> {
    common::arena(ArenaConfig::new(Mode::Packed))
}

/// Our descriptors that refer to a packed arena's memfd.
fn arena_memfds() -> Vec<String> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc/self/fd").expect("/proc/self/fd") {
        let path = entry.expect("fd entry").path();
        if let Ok(target) = std::fs::read_link(&path) {
            if target.to_string_lossy().contains("memfd:elfjit-arena") {
                let fd = path
                    .file_name()
                    .expect("fd name")
                    .to_string_lossy()
                    .to_string();
                out.push(fd);
            }
        }
    }
    out
}

/// The mapping holding `address`: (start, end, file offset, path).
fn mapping_of(address: usize) -> (usize, usize, usize, String) {
    let maps = std::fs::read_to_string("/proc/self/maps").expect("/proc/self/maps");
    for line in maps.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (lo, hi) = fields[0].split_once('-').expect("range");
        let lo = usize::from_str_radix(lo, 16).expect("hex");
        let hi = usize::from_str_radix(hi, 16).expect("hex");
        if (lo..hi).contains(&address) {
            let offset = usize::from_str_radix(fields[2], 16).expect("offset");
            return (lo, hi, offset, fields[5..].join(" "));
        }
    }
    panic!("{address:#x} is not mapped");
}

/// Another process (`dd`) writes `bytes` at `offset` of the file at `path` in place;
/// `unprivileged`: as a process of the same user without the capabilities that open
/// `/proc/PID/map_files` (dropped if we are root). Whether it succeeded.
fn other_process_writes(path: &str, offset: usize, bytes: &[u8], unprivileged: bool) -> bool {
    use std::io::Write;
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let mut command = if unprivileged && root {
        let mut c = Command::new("setpriv");
        c.args(["--bounding-set", "-sys_admin,-checkpoint_restore", "dd"]);
        c
    } else {
        Command::new("dd")
    };
    command
        .arg(format!("of={path}"))
        .args([
            "bs=1",
            &format!("seek={offset}"),
            "conv=notrunc",
            "status=none",
        ])
        .stdin(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null());
    let mut child = command.spawn().expect("spawn dd");
    let mut stdin = child.stdin.take().expect("stdin");
    let _ = stdin.write_all(bytes);
    drop(stdin);
    child.wait().expect("wait for dd").success()
}

/// Another process (`truncate`) sets the size of the file at `path` to `size` (e.g. "0",
/// "1G"). Whether it succeeded.
fn other_process_truncates(path: &str, size: &str) -> bool {
    Command::new("truncate")
        .args(["--no-create", "-s", size, path])
        .stderr(std::process::Stdio::null())
        .status()
        .expect("run truncate")
        .success()
}

/// `mov eax, 1337; ret` on x86_64 (what the review wrote); elsewhere bytes that would
/// crash the call if they got in.
fn foreign_code() -> Vec<u8> {
    if cfg!(target_arch = "x86_64") {
        vec![0xb8, 0x39, 0x05, 0, 0, 0xc3]
    } else {
        vec![0; 8]
    }
}

#[test]
fn other_processes_cannot_rewrite_or_truncate_packed_code() {
    let _alone = alone();
    let Some(arena) = packed() else {
        return;
    };
    let m = load(&arena, &returning(42));
    // SAFETY: a live `f`.
    assert_eq!(unsafe { call(m.entry) }, 42);
    let pid = std::process::id();
    let code = foreign_code();
    let (start, end, offset, path) = mapping_of(m.entry);
    assert!(path.contains("memfd:elfjit-arena"), "{path}");
    let at = offset + (m.entry - start);

    // Through a descriptor of ours (the review's attack: /proc/PID/fd/N reopened).
    let memfds = arena_memfds();
    for fd in &memfds {
        let target = format!("/proc/{pid}/fd/{fd}");
        let wrote = other_process_writes(&target, at, &code, false);
        // SAFETY: a live `f` (rewritten to return 1337 if the write got through).
        assert_eq!(unsafe { call(m.entry) }, 42, "rewritten through {target}");
        assert!(!wrote, "wrote through {target}");
        assert!(!other_process_truncates(&target, "0"), "truncated {target}");
    }
    assert!(
        memfds.is_empty(),
        "descriptors still open on the arena's memfd: {memfds:?}"
    );

    // Through the mapping's entry in /proc/PID/map_files: a process of the same user
    // without CAP_SYS_ADMIN/CAP_CHECKPOINT_RESTORE cannot open it.
    let link = format!("/proc/{pid}/map_files/{start:x}-{end:x}");
    let wrote = other_process_writes(&link, at, &code, true);
    // SAFETY: a live `f`.
    assert_eq!(unsafe { call(m.entry) }, 42, "rewritten through {link}");
    assert!(!wrote, "wrote through {link} without privileges");
    // One with them (root here) can open it, but the memfd's size is sealed: no
    // truncation (SIGBUS on the next call) and no growth.
    assert!(!other_process_truncates(&link, "0"), "truncated {link}");
    assert!(!other_process_truncates(&link, "1G"), "grew {link}");
    // SAFETY: a live `f`.
    assert_eq!(unsafe { call(m.entry) }, 42);
    // The arena still loads, frees and reuses memory (the seals leave hole punching
    // alone).
    drop(m);
    let again = load(&arena, &returning(7));
    // SAFETY: a live `f`.
    assert_eq!(unsafe { call(again.entry) }, 7);
}

#[test]
fn a_forked_childs_module_keeps_its_code_whatever_the_parent_frees_and_loads() {
    let _alone = alone();
    let Some(arena) = packed() else {
        return;
    };
    let a = load(&arena, &returning(42));
    let a_entry = a.entry;
    let (read, write) = pipe();
    let (read_fd, write_fd) = (read.as_raw_fd(), write.as_raw_fd());
    let pid = fork_child(|| {
        wait_for_signal(read_fd, write_fd);
        // SAFETY: `a` is live in the child (its copy of the parent's state at fork).
        unsafe { call(a_entry) }
    });
    drop(read);
    // The parent frees A (a trap fill of its slot, before) and loads B where it can.
    drop(a);
    let b = load(&arena, &returning(7));
    let c = load(&arena, &returning(9));
    drop(c); // a trap fill of C's slot
    signal(write);
    assert_eq!(
        wait(pid),
        Ok(42),
        "the child's module ran other code (7: B's, Err(5): a trap)"
    );
    // The parent never handed out A's code slot again: the child could still run it.
    let b_code = b.memory.segment(SegmentKind::Code).expect("code").0;
    assert_ne!(b.entry, a_entry, "B took A's slot");
    assert!(
        arena.stats().quarantined > 0,
        "A's slots withheld: {:?}",
        arena.stats()
    );
    // SAFETY: a live `f`.
    assert_eq!(unsafe { call(b.entry) }, 7, "B at {b_code:#x}");
    // Loaded after the fork, B's memory is reused as usual.
    drop(b);
    let d = load(&arena, &returning(11));
    assert_eq!(d.memory.segment(SegmentKind::Code).expect("code").0, b_code);
    // SAFETY: a live `f`.
    assert_eq!(unsafe { call(d.entry) }, 11);
}

#[test]
fn a_forked_childs_packed_arena_refuses_to_write_and_unmaps_none_of_the_childs_memory() {
    let _alone = alone();
    let Some(arena) = packed() else {
        return;
    };
    let object = returning(42);
    let a = load(&arena, &object);
    // Being written when the process forks.
    let mut pending = arena.backend();
    let small = SegmentRequest {
        size: 64,
        align: 16,
    };
    pending
        .allocate(&Layout::new([small; 3]))
        .expect("allocate");
    let regions = arena.regions();
    assert_eq!(regions.len(), 1, "{regions:?}");
    // The chunk starts with the writer view, which a child does not inherit.
    let hole = regions[0].0;
    let page = arena.page_size();
    let pid = fork_child(move || {
        let refused =
            load_in(&arena, &object, "f").is_err_and(|e| e.1 == Some(ArenaError::UsedAfterFork));
        if !refused {
            return 10;
        }
        if pending.segment_mut(SegmentKind::Code).is_some() {
            return 11; // a slice into the hole
        }
        // The child's own memory, where the writer view was (an allocator may put it
        // there), and elsewhere.
        // SAFETY: a new private mapping at a range this process has nothing mapped at
        // (MAP_FIXED_NOREPLACE fails otherwise).
        let mine = unsafe {
            libc::mmap(
                hole as *mut libc::c_void,
                page,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE,
                -1,
                0,
            )
        };
        if mine as usize != hole {
            return 12;
        }
        // SAFETY: the page just mapped.
        unsafe { std::ptr::write_bytes(mine.cast::<u8>(), 0x5a, page) };
        let vec = vec![0x77u8; 1 << 20];
        // SAFETY: `a` is live in the child.
        if unsafe { call(a.entry) } != 42 {
            return 13;
        }
        drop((pending, a, arena)); // the last handle: the chunk is dropped
        let mut residency = [0u8; 1];
        // SAFETY: mincore only reports on the range (ENOMEM if it is not mapped).
        if unsafe { libc::mincore(mine, page, residency.as_mut_ptr()) } != 0 {
            return 14; // unmapped by the arena
        }
        // SAFETY: still mapped (checked above), read/write, ours.
        let intact = unsafe { std::slice::from_raw_parts(mine.cast::<u8>(), page) };
        if !intact.iter().all(|&b| b == 0x5a) || !vec.iter().all(|&b| b == 0x77) {
            return 15;
        }
        0
    });
    assert_eq!(
        wait(pid),
        Ok(0),
        "10: loaded after fork; 11: handed out the writer view's hole; 12: the hole was \
         not free; 13: code changed; 14: the child's mapping was unmapped; 15: changed"
    );
}

#[test]
fn a_page_granular_arena_keeps_working_across_fork() {
    let _alone = alone();
    let arena = Arena::new();
    let a = load(&arena, &returning(42));
    let a_entry = a.entry;
    let nine = returning(9);
    let (read, write) = pipe();
    let (read_fd, write_fd) = (read.as_raw_fd(), write.as_raw_fd());
    let child_arena = arena.clone();
    let pid = fork_child(move || {
        wait_for_signal(read_fd, write_fd);
        // SAFETY: `a` is live in the child (private memory, its own copy).
        if unsafe { call(a_entry) } != 42 {
            return 1;
        }
        // The child's arena loads (its private copy of the parent's chunks).
        let n = load(&child_arena, &nine);
        // SAFETY: a live `f`.
        if unsafe { call(n.entry) } != 9 {
            return 2;
        }
        drop((n, child_arena));
        0
    });
    drop(read);
    drop(a);
    let b = load(&arena, &returning(7));
    signal(write);
    assert_eq!(wait(pid), Ok(0), "1: A changed; 2: the child's load");
    // SAFETY: a live `f`.
    assert_eq!(unsafe { call(b.entry) }, 7);
}
