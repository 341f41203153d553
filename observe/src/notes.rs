//! Notes on stderr: things a user should know that are not errors (a cache directory
//! refused, a cache that cannot be written, a perf map not written). Each reason is said
//! once per process, however many entries or runs meet it, so a broken cache costs one
//! line, not one per lookup. It lives in the lowest elfjit crate that says any (this
//! one); `elfjit::notes` is this module.

use std::collections::HashSet;
use std::io::Write;
use std::sync::Mutex;

type Key = (&'static str, &'static str);
static SAID: Mutex<Option<HashSet<Key>>> = Mutex::new(None);

/// Writes `elfjit: note: MESSAGE` to stderr unless a note about this `reason` in this
/// `context` (the compile cache, its entries, the runner cache, ...) was already written
/// by this process. `message` is only built when it is written. Returns whether it was.
pub fn once(context: &'static str, reason: &'static str, message: impl FnOnce() -> String) -> bool {
    let first = SAID
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get_or_insert_with(HashSet::new)
        .insert((context, reason));
    if first {
        // Nothing useful can be done if stderr itself is gone.
        let _ = writeln!(std::io::stderr(), "elfjit: note: {}", message());
    }
    first
}

#[cfg(test)]
mod tests {
    #[test]
    fn each_reason_once() {
        assert!(super::once("test", "a", || "first".into()));
        assert!(!super::once("test", "a", || unreachable!(
            "not built twice"
        )));
        assert!(super::once("test", "b", || "another reason".into()));
        assert!(super::once("another test", "a", || "another context".into()));
    }
}
