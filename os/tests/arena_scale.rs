//! Many live kernels in one process (issue 13): 1,000,000 in a packed arena and 100,000
//! in a page-granular one, each a real saxpy load (code + read-only table + data counter),
//! in at most 1,000 mappings; packed resident memory at most twice the image bytes.
//! Full counts in release builds (scripts/test runs this file with `--release`), divided
//! by [`common::SCALE`] in debug builds.

mod common;

use common::{check_saxpy, compile, smaps, Loader, SAXPY, SCALE};
use elfjit_os::{Arena, ArenaBackend, ArenaConfig, Mode};
use std::time::Instant;

/// Loads `n` saxpys into `arena`, keeps them all, checks a sample runs, and returns the
/// mappings summary of the arena with everything live.
fn load_many(arena: &Arena, n: usize) -> (common::MapsSummary, u64) {
    let object = compile(SAXPY, "-O2");
    let mut loader = Loader::new(&object);
    let start = Instant::now();
    let mut live: Vec<ArenaBackend> = Vec::with_capacity(n);
    let mut sample = Vec::new();
    for i in 0..n {
        let m = loader
            .load(arena, "saxpy")
            .unwrap_or_else(|e| panic!("load {i}: {e:?}"));
        if i % (n / 64).max(1) == 0 {
            sample.push(m.entry);
        }
        live.push(m.memory);
    }
    let elapsed = start.elapsed();
    for &entry in &sample {
        // SAFETY: a live saxpy (its module is in `live`), called for the first time.
        unsafe { check_saxpy(entry, 1) };
    }
    let summary = smaps(&arena.regions());
    let stats = arena.stats();
    eprintln!(
        "{:?}: {n} live kernels in {:.2} s ({:.2} us per load): {summary:?}, {stats:?}",
        arena.mode(),
        elapsed.as_secs_f64(),
        elapsed.as_secs_f64() * 1e6 / n as f64
    );
    assert_eq!(stats.modules, n as u64);
    assert_eq!(summary.writable_and_executable, 0);
    (summary, stats.requested)
}

#[test]
fn a_million_packed_kernels_in_few_mappings_and_twice_their_bytes() {
    let Some(arena) = common::arena(ArenaConfig::new(Mode::Packed)) else {
        return;
    };
    let (summary, image_bytes) = load_many(&arena, 1_000_000 / SCALE);
    assert!(summary.vmas <= 1000, "{} mappings", summary.vmas);
    // Pss counts a page mapped in both views once (Rss would count it twice).
    assert!(
        summary.pss <= 2 * image_bytes,
        "resident {} bytes for {image_bytes} image bytes",
        summary.pss
    );
}

#[test]
fn a_hundred_thousand_page_granular_kernels_in_few_mappings() {
    let arena = Arena::new();
    let (summary, _) = load_many(&arena, 100_000 / SCALE);
    assert!(summary.vmas <= 1000, "{} mappings", summary.vmas);
}
