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
    Ok(Orphans { _private: () })
}

impl Orphans {
    /// Kills (`SIGKILL`, with each one's process group) and reaps every child this
    /// process has, until none is left; returns how many were killed.
    pub fn stop_all(&self) -> usize {
        let me = rustix::process::getpid();
        let mut killed = 0;
        for _ in 0..MAX_ROUNDS {
            let children = children_of(me);
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
