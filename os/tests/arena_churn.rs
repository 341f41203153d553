//! Churn (issue 13): 1,000,000 load/unload cycles with random lifetimes, at most 10,000
//! modules live at once, in each mode. After warm-up the arena's resident memory, the
//! process's resident memory and the arena's mapping count stay within 10%; at the end
//! nothing is held and at most the pool stays resident. Full counts in release builds
//! (scripts/test runs this file with `--release`), divided by [`common::SCALE`] in debug.

mod common;

use common::{check_saxpy, compile, process_rss, smaps, InArena, Loader, Rng, SAXPY, SCALE};
use elfjit_os::{ArenaConfig, Mode};
use std::sync::Mutex;
use std::time::Instant;

/// Held by each churn run: the process's resident memory is one of the figures that must
/// stay flat, and another churn running at the same time in this process would grow it.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn churn(mode: Mode) {
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let cycles = 1_000_000 / SCALE;
    let slots = 10_000 / SCALE;
    let warm_up = cycles / 5;
    let object = compile(SAXPY, "-O2");
    let mut loader = Loader::new(&object);
    let Some(arena) = common::arena(ArenaConfig::new(mode)) else {
        return;
    };
    let mut live: Vec<Option<InArena>> = (0..slots).map(|_| None).collect();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    // (arena resident bytes, process resident bytes, arena mappings) after warm-up.
    let mut samples: Vec<(u64, u64, u64)> = Vec::new();
    let start = Instant::now();
    for cycle in 0..cycles {
        // A random slot: its module (if any) dies, a new one takes its place. Lifetimes
        // are geometric; the live count climbs to `slots` and stays near it.
        let slot = &mut live[rng.below(slots)];
        drop(slot.take());
        let m = loader
            .load(&arena, "saxpy")
            .unwrap_or_else(|e| panic!("cycle {cycle}: {e:?}"));
        if cycle % 1024 == 0 {
            // SAFETY: a live saxpy, called for the first time.
            unsafe { check_saxpy(m.entry, 1) };
        }
        *slot = Some(m);
        if cycle >= warm_up && cycle % (cycles / 20).max(1) == 0 {
            let s = smaps(&arena.regions());
            assert_eq!(s.writable_and_executable, 0);
            samples.push((s.pss, process_rss(), s.vmas));
        }
    }
    let elapsed = start.elapsed();
    let stats = arena.stats();
    eprintln!(
        "{mode:?}: {cycles} cycles in {:.2} s ({:.2} us per load+unload); {} live; \
         samples (arena Pss, process RSS, arena VMAs): {samples:?}; {stats:?}",
        elapsed.as_secs_f64(),
        elapsed.as_secs_f64() * 1e6 / cycles as f64,
        live.iter().filter(|m| m.is_some()).count(),
    );
    let flat = |pick: fn(&(u64, u64, u64)) -> u64, what: &str| {
        let lo = samples.iter().map(pick).min().unwrap_or(0);
        let hi = samples.iter().map(pick).max().unwrap_or(0);
        assert!(hi * 10 <= lo * 11, "{mode:?}: {what} not flat: {lo}..{hi}");
    };
    assert!(samples.len() >= 10);
    flat(|s| s.0, "arena resident memory");
    flat(|s| s.1, "process resident memory");
    flat(|s| s.2, "arena mappings");

    drop(live);
    let end = arena.stats();
    assert_eq!((end.modules, end.requested, end.held), (0, 0, 0), "{end:?}");
    assert!(end.pooled <= arena.config().retain as u64, "{end:?}");
    let left = smaps(&arena.regions());
    // What stays resident: the pool, and slab pages kept as spares (one per class).
    assert!(
        left.pss <= arena.config().retain as u64 + (64 << 10),
        "{mode:?}: {} bytes resident with nothing loaded",
        left.pss
    );
}

#[test]
fn page_granular_churn_is_flat_and_leaks_nothing() {
    churn(Mode::PageGranular);
}

#[test]
fn packed_churn_is_flat_and_leaks_nothing() {
    churn(Mode::Packed);
}
