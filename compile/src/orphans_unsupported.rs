//! Processes a child leaves behind outside its process group, on systems where elfjit
//! cannot adopt them (macOS; FreeBSD, whose `procctl(PROC_REAP_ACQUIRE)` would do, is not
//! written yet). What Linux does is in `orphans.rs`: here [`adopt_orphans`] says it
//! cannot, so a process an emulated kernel detaches with `setsid()` is left to init, as
//! SECURITY.md states. Built, never run: no Mac or FreeBSD machine ran this code.

/// What [`adopt_orphans`] would return; never made on this system.
#[derive(Debug)]
#[must_use = "dropping it at once kills every child; keep it until the program ends"]
pub struct Orphans {
    _private: (),
}

/// Always an `Unsupported` error: this system has no child subreaper elfjit uses.
pub fn adopt_orphans() -> std::io::Result<Orphans> {
    Err(std::io::Error::new(
        std::io::ErrorKind::Unsupported,
        "adopting orphaned processes is implemented on Linux only",
    ))
}

/// Nothing to do: no process was adopted (see [`adopt_orphans`]).
pub fn kill_descendants_from_signal_handler() {}

impl Orphans {
    /// Kills nothing: an `Orphans` is never made on this system.
    pub fn stop_all(&self) -> usize {
        0
    }
}

impl Drop for Orphans {
    /// As on Linux, dropping it is where adopted processes would be stopped: none here.
    fn drop(&mut self) {
        self.stop_all();
    }
}

/// Nothing to register: no process is adopted here.
pub(crate) fn kill_only_at_exit(_pids: fn() -> Vec<u32>) {}
