//! Eight threads loading and unloading into one arena at once (issue 13), in each mode:
//! every kernel computes the right result, and no sample of `/proc/self/maps` taken while
//! they run shows a mapping that is writable and executable.

mod common;

use common::{check_saxpy, compile, maps, InArena, Loader, Rng, SAXPY, SCALE};
use elfjit_os::{ArenaConfig, Mode};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

const THREADS: usize = 8;

fn hammer(mode: Mode) {
    let cycles = 20_000 / SCALE.min(100);
    let object: Arc<Vec<u8>> = Arc::new(compile(SAXPY, "-O2"));
    let Some(arena) = common::arena(ArenaConfig::new(mode)) else {
        return;
    };
    let done = Arc::new(AtomicBool::new(false));
    let samples = Arc::new(AtomicU64::new(0));
    let sampler = {
        let (done, samples) = (done.clone(), samples.clone());
        std::thread::spawn(move || {
            let mut bad = Vec::new();
            while !done.load(Ordering::Relaxed) {
                let text = std::fs::read_to_string("/proc/self/maps").expect("maps");
                bad.extend(
                    text.lines()
                        .filter(|l| {
                            let perms = l.split_whitespace().nth(1).unwrap_or("");
                            perms.contains('w') && perms.contains('x')
                        })
                        .map(str::to_string),
                );
                samples.fetch_add(1, Ordering::Relaxed);
            }
            bad
        })
    };
    let workers: Vec<_> = (0..THREADS)
        .map(|t| {
            let (arena, object, samples) = (arena.clone(), object.clone(), samples.clone());
            std::thread::spawn(move || {
                let mut loader = Loader::new(&object);
                let mut rng = Rng(0x2545_f491_4f6c_dd1d ^ ((t as u64 + 1) * 0x9e37_79b9));
                let mut kept: Vec<Option<(InArena, i32)>> = (0..16).map(|_| None).collect();
                // At least `cycles`, and on until the sampler has seen the run ten times
                // (a fast machine can finish the cycles between two samples).
                for cycle in 0.. {
                    if cycle >= cycles && samples.load(Ordering::Relaxed) >= 10 {
                        break;
                    }
                    let m = loader.load(&arena, "saxpy").expect("load");
                    // SAFETY: a live saxpy, called for the first time.
                    unsafe { check_saxpy(m.entry, 1) };
                    // Some modules live on (and keep being called), most die at once.
                    let slot = &mut kept[rng.below(16)];
                    if let Some((old, calls)) = slot.as_mut() {
                        *calls += 1;
                        // SAFETY: a live saxpy called `calls - 1` times before.
                        unsafe { check_saxpy(old.entry, *calls) };
                    }
                    if rng.below(4) == 0 {
                        *slot = Some((m, 1));
                    }
                }
            })
        })
        .collect();
    for w in workers {
        w.join().expect("worker");
    }
    done.store(true, Ordering::Relaxed);
    let bad = sampler.join().expect("sampler");
    let samples = samples.load(Ordering::Relaxed);
    eprintln!("{mode:?}: {THREADS} x {cycles} cycles, {samples} samples of /proc/self/maps");
    assert!(bad.is_empty(), "{mode:?}: writable and executable: {bad:?}");
    assert!(samples >= 10, "only {samples} samples");
    let stats = arena.stats();
    assert_eq!((stats.modules, stats.held), (0, 0), "{stats:?}");
    // One mapping per region, plus (page-granular) up to 32 writable stretches of freed
    // pages in each of the code and read-only regions.
    let per_chunk = if mode == Mode::Packed {
        4
    } else {
        3 + 2 * 2 * 32
    };
    let vmas = maps(&arena.regions()).vmas;
    assert!(vmas <= stats.chunks as u64 * per_chunk, "{vmas} mappings");
}

#[test]
fn eight_threads_page_granular() {
    hammer(Mode::PageGranular);
}

#[test]
fn eight_threads_packed() {
    hammer(Mode::Packed);
}
