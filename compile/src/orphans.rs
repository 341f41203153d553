//! Processes a child leaves behind outside its process group: adopting them, and taking
//! them down when the program ends (Linux: `PR_SET_CHILD_SUBREAPER`, `/proc`).
//!
//! [`crate::child`] kills a child's whole process group, which is all a well-behaved
//! child starts. A process that left the group (`setsid()`, say a kernel under qemu that
//! forks and detaches) is not in it; without more it would be reparented to init and
//! outlive elfjit. A *subreaper* gets such orphans instead of init: [`adopt_orphans`]
//! makes this process one, and the [`Orphans`] it returns kills and reaps every child the
//! process still has when it is dropped.
//!
//! This changes how the whole process reaps, so it is for programs (the `elfjit` CLI
//! calls it first thing in `main`), never done by the library behind its host's back: a
//! host that has children of its own would see them killed. A program that has no other
//! children may call it too.

use rustix::process::{Pid, Signal, WaitOptions};
use std::io::Read;
use std::sync::atomic::{AtomicBool, Ordering};

/// Whether [`adopt_orphans`] made this process a subreaper (read by the termination
/// signal handler of [`crate::child`]).
static ADOPTING: AtomicBool = AtomicBool::new(false);

/// The most rounds of "kill every child, reap them" [`Orphans`] runs: each round takes
/// the children the previous round's victims left (reparented to this process).
const MAX_ROUNDS: usize = 64;

/// This process as the reaper of what its children leave behind; dropping it kills and
/// reaps every child the process still has.
#[derive(Debug)]
#[must_use = "dropping it at once kills every child; keep it until the program ends"]
pub struct Orphans {
    _private: (),
}

/// Makes this process a child subreaper: processes its descendants leave behind (their
/// parent exited) become its children instead of init's. Kill them with the returned
/// [`Orphans`] (dropped when the program ends, after every [`crate::child::run`] is
/// over). For programs only: see the module documentation.
pub fn adopt_orphans() -> std::io::Result<Orphans> {
    // SAFETY: prctl(PR_SET_CHILD_SUBREAPER, 1) reads no memory of ours; it only sets a
    // flag of this process.
    let r = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1 as libc::c_ulong, 0, 0, 0) };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    ADOPTING.store(true, Ordering::Release);
    Ok(Orphans { _private: () })
}

/// The most descendants [`kill_descendants_from_signal_handler`] tracks.
const MAX_DESCENDANTS: usize = 1024;

/// From a signal handler about to end the process: when this process adopts orphans,
/// sends `SIGKILL` to every process descending from it (found through `/proc` before
/// anything is killed, so a child's tree is still whole) and to the process group each
/// leads, so that nothing is left to pass on to init: neither an orphan already adopted
/// nor a detached grandchild whose parent is about to die. Async-signal-safe: system
/// calls on stack buffers only (no allocation, no lock); no reaping (the process is
/// ending).
pub fn kill_descendants_from_signal_handler() {
    if !ADOPTING.load(Ordering::Acquire) {
        return;
    }
    let mut tree = [0i32; MAX_DESCENDANTS];
    let mut len = 1usize;
    // SAFETY: getpid(2) is async-signal-safe and reads no memory of ours.
    tree[0] = unsafe { libc::getpid() };
    // Each pass adds the children of what is known; a chain deeper than the passes is
    // cut there (its leader's group is still killed).
    for _ in 0..32 {
        let before = len;
        for_each_process(|pid, parent| {
            let known = |p: i32| tree.get(..len).is_some_and(|t| t.contains(&p));
            if known(parent) && !known(pid) {
                if let Some(slot) = tree.get_mut(len) {
                    *slot = pid;
                    len += 1;
                }
            }
        });
        if len == before {
            break;
        }
    }
    for &pid in tree.get(1..len).unwrap_or_default() {
        // SAFETY: kill(2) is async-signal-safe. A descendant that exited since the scan
        // could have its pid reused in that instant; the window is that of one signal.
        unsafe {
            libc::kill(-pid, libc::SIGKILL);
            libc::kill(pid, libc::SIGKILL);
        }
    }
}

/// Calls `f(pid, parent)` for every process in `/proc`, with stack buffers only.
fn for_each_process(mut f: impl FnMut(i32, i32)) {
    // SAFETY: open(2) of a NUL-terminated literal; async-signal-safe.
    let proc_dir = unsafe {
        libc::open(
            c"/proc".as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if proc_dir < 0 {
        return;
    }
    let mut entries = [0u8; 4096];
    loop {
        // SAFETY: getdents64 writes at most `entries.len()` bytes into the local buffer.
        let n = unsafe {
            libc::syscall(
                libc::SYS_getdents64,
                proc_dir,
                entries.as_mut_ptr(),
                entries.len(),
            )
        };
        let Some(filled) = usize::try_from(n).ok().filter(|&n| n > 0) else {
            break;
        };
        let mut at = 0usize;
        // linux_dirent64: d_ino (8), d_off (8), d_reclen (2), d_type (1), d_name.
        while let Some(record) = entries.get(at..filled.min(entries.len())) {
            let Some(length) = record
                .get(16..18)
                .and_then(|r| <[u8; 2]>::try_from(r).ok())
                .map(|r| usize::from(u16::from_ne_bytes(r)))
                .filter(|&l| l > 0)
            else {
                break;
            };
            if let Some(pid) = record
                .get(19..length.min(record.len()))
                .and_then(pid_of_name)
            {
                if let Some(parent) = parent_from_signal_handler(pid) {
                    f(pid, parent);
                }
            }
            at += length;
        }
    }
    // SAFETY: the descriptor opened above, closed once.
    unsafe { libc::close(proc_dir) };
}

/// The pid a `/proc` entry's NUL-terminated name spells, if it is all digits.
fn pid_of_name(name: &[u8]) -> Option<i32> {
    let digits = name.split(|&b| b == 0).next()?;
    if digits.is_empty() || digits.len() > 9 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(
        digits
            .iter()
            .fold(0i32, |n, &d| n * 10 + i32::from(d - b'0')),
    )
}

/// The parent of `pid` from `/proc/<pid>/stat`, with stack buffers only.
fn parent_from_signal_handler(pid: i32) -> Option<i32> {
    // "/proc/" + at most 9 digits + "/stat" + NUL.
    let mut path = [0u8; 32];
    let mut len = 0usize;
    let mut put = |bytes: &[u8]| {
        for &b in bytes {
            if let Some(slot) = path.get_mut(len) {
                *slot = b;
                len += 1;
            }
        }
    };
    put(b"/proc/");
    let mut digits = [0u8; 10];
    let mut count = 0usize;
    let mut rest = pid;
    loop {
        if let Some(slot) = digits.get_mut(count) {
            *slot = b'0' + (rest % 10) as u8;
        }
        count += 1;
        rest /= 10;
        if rest == 0 || count >= digits.len() {
            break;
        }
    }
    for i in (0..count).rev() {
        put(digits.get(i..=i).unwrap_or_default());
    }
    put(b"/stat\0");
    let mut stat = [0u8; 512];
    // SAFETY: `path` is NUL-terminated (it has room to spare); `stat` is a local buffer
    // whose length is passed; the descriptor is closed before returning.
    let read = unsafe {
        let fd = libc::open(path.as_ptr().cast(), libc::O_RDONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return None;
        }
        let n = libc::read(fd, stat.as_mut_ptr().cast(), stat.len());
        libc::close(fd);
        usize::try_from(n).ok()?
    };
    let stat = stat.get(..read)?;
    let after = stat.iter().rposition(|&b| b == b')')?;
    // ") S PPID ": skip the state, then read the digits.
    let mut fields = stat
        .get(after + 1..)?
        .split(|&b| b == b' ')
        .filter(|f| !f.is_empty());
    fields.next()?;
    pid_of_name(fields.next()?)
}

/// Who lists the children to kill but not wait for when [`Orphans`] stops everything:
/// the compile servers, whose pool owns their pids and registers itself here (this
/// module imports nothing of the compile side, which imports it).
static KILL_ONLY: std::sync::OnceLock<fn() -> Vec<u32>> = std::sync::OnceLock::new();

/// Registers `pids`, called when [`Orphans`] stops everything, as the list of children
/// it kills without waiting for them. The first registration holds.
pub(crate) fn kill_only_at_exit(pids: fn() -> Vec<u32>) {
    let _ = KILL_ONLY.set(pids);
}

impl Orphans {
    /// Kills (`SIGKILL`, with each one's process group) and reaps every child this
    /// process has, until none is left; returns how many were killed. The process's
    /// compile servers are killed but not waited for: they start no process of their
    /// own, a `SIGKILL` cannot be refused, and waiting for one to unmap its ~100 MB cost
    /// every `elfjit` run about 30 ms at exit.
    pub fn stop_all(&self) -> usize {
        let me = rustix::process::getpid();
        let servers: Vec<u32> = KILL_ONLY.get().map(|pids| pids()).unwrap_or_default();
        let mut killed_servers: Vec<Pid> = Vec::new();
        let mut killed = 0;
        for _ in 0..MAX_ROUNDS {
            let children: Vec<Pid> = children_of(me)
                .into_iter()
                .filter(|pid| !killed_servers.contains(pid))
                .collect();
            if children.is_empty() {
                break;
            }
            for &pid in &children {
                // Not reaped yet, so neither its pid nor a group it leads can have been
                // reused. ESRCH (it leads no group) is fine.
                let _ = rustix::process::kill_process_group(pid, Signal::KILL);
                let _ = rustix::process::kill_process(pid, Signal::KILL);
            }
            for &pid in &children {
                if servers.contains(&pid.as_raw_nonzero().get().unsigned_abs()) {
                    killed_servers.push(pid);
                    continue;
                }
                // ECHILD: another thread reaped it meanwhile; nothing left to do.
                let _ = rustix::process::waitpid(Some(pid), WaitOptions::empty());
            }
            killed += children.len();
        }
        killed
    }
}

impl Drop for Orphans {
    fn drop(&mut self) {
        self.stop_all();
    }
}

/// The processes whose parent is `parent`, from `/proc/<pid>/stat` (field 4).
fn children_of(parent: Pid) -> Vec<Pid> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut children = Vec::new();
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
            .and_then(Pid::from_raw)
        else {
            continue;
        };
        if parent_of(&entry.path()) == Some(parent) {
            children.push(pid);
        }
    }
    children
}

/// The parent in a `/proc/<pid>` directory's `stat` (read at most 4 KiB).
fn parent_of(dir: &std::path::Path) -> Option<Pid> {
    let mut stat = Vec::new();
    std::fs::File::open(dir.join("stat"))
        .ok()?
        .take(4096)
        .read_to_end(&mut stat)
        .ok()?;
    // `pid (comm) state ppid ...`: the name may hold anything, so parse after its last ')'.
    let after = stat.iter().rposition(|&b| b == b')')?;
    let rest = std::str::from_utf8(stat.get(after + 1..)?).ok()?;
    let ppid = rest.split_whitespace().nth(1)?.parse::<i32>().ok()?;
    Pid::from_raw(ppid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signal_handler_scan_sees_this_process_and_its_children() {
        let me = rustix::process::getpid().as_raw_nonzero().get();
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let (mut saw_me, mut saw_child) = (false, false);
        for_each_process(|pid, parent| {
            saw_me |= pid == me;
            saw_child |= pid == child.id() as i32 && parent == me;
        });
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(saw_me && saw_child);
    }

    #[test]
    fn the_signal_handler_reads_names_and_parents_without_allocating() {
        assert_eq!(pid_of_name(b"1234\0\0\0"), Some(1234));
        assert_eq!(pid_of_name(b"self\0"), None);
        assert_eq!(pid_of_name(b"\0"), None);
        assert_eq!(pid_of_name(b"12345678901\0"), None);
        let me = rustix::process::getpid().as_raw_nonzero().get();
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        assert_eq!(parent_from_signal_handler(child.id() as i32), Some(me));
        assert_eq!(
            parent_from_signal_handler(me),
            Some(rustix::process::getppid().map_or(0, |p| p.as_raw_nonzero().get()))
        );
        child.kill().unwrap();
        child.wait().unwrap();
    }

    #[test]
    fn children_are_found_by_their_parent() {
        let me = rustix::process::getpid();
        let child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = Pid::from_raw(child.id() as i32).unwrap();
        assert!(children_of(me).contains(&pid));
        assert_eq!(
            parent_of(std::path::Path::new(&format!("/proc/{}", child.id()))),
            Some(me)
        );
        let mut child = child;
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(!children_of(me).contains(&pid));
    }
}
