//! The compile cache: hits and misses, what the key covers, damaged entries, concurrent
//! writer threads and eviction (writer processes and the CLI's `--cache` / `cache clear`
//! are tested with the binary, in cli/tests/cache.rs).
//! Every test uses its own directory under cargo's scratch space and removes it.
// The cache holds what clang compiled: the compile side is Unix-only (docs/os-support.md).
#![cfg(unix)]

use elfjit::cache::{Cache, CacheKey, CacheStatus};
use elfjit::clang::{CompileOptions, Lang};
use elfjit::flags::HostInfo;
use elfjit::{Arch, Module};
use std::path::Path;
use std::time::{Duration, SystemTime};

mod common;
use common::*;

fn c_opts() -> CompileOptions {
    CompileOptions::new(Lang::C, host())
}

fn call_add(object: &[u8], a: i32, b: i32) -> i32 {
    let m = Module::load(object).unwrap();
    let f = m.symbol("add").unwrap();
    // SAFETY: `add` is `int add(int, int)` and `m` is alive for the call.
    let f: extern "C" fn(i32, i32) -> i32 = unsafe { std::mem::transmute(f) };
    f(a, b)
}

#[test]
fn memory_hit_and_miss_and_the_object_runs() {
    let c = compiler();
    let cache = Cache::in_memory();
    let src = add_source(1);
    let (a, s) = cache.compile(&c, src.as_bytes(), &c_opts()).unwrap();
    assert_eq!(s, CacheStatus::Miss);
    let (b, s) = cache.compile(&c, src.as_bytes(), &c_opts()).unwrap();
    assert_eq!(s, CacheStatus::Hit);
    assert_eq!(a, b);
    assert_eq!(call_add(&b, 2, 40), 43);
    assert_eq!(cache.memory_usage(), (1, a.len()));
    assert!(cache.dir().is_none());
    // clang errors are not cached: they come back every time.
    for _ in 0..2 {
        assert!(cache.compile(&c, b"int f( {", &c_opts()).is_err());
    }
    assert_eq!(cache.memory_usage().0, 1);
}

#[test]
fn the_key_covers_source_flags_target_and_language() {
    let c = compiler();
    let dir = Scratch::new("key");
    let cache = Cache::on_disk(&dir.0);
    let src = add_source(2);
    let mut seen = std::collections::HashSet::new();
    let base = c_opts();
    let mut variants = vec![base.clone()];
    let mut o = base.clone();
    o.opt_level = 0;
    variants.push(o);
    let mut o = base.clone();
    o.extra_flags.push("-DUNUSED=1".into());
    variants.push(o);
    let foreign = Arch::ALL.into_iter().find(|a| *a != host()).unwrap();
    variants.push(CompileOptions::new(Lang::C, foreign));
    for opts in &variants {
        let (_, s) = cache.compile(&c, src.as_bytes(), opts).unwrap();
        assert_eq!(s, CacheStatus::Miss, "{opts:?}");
        let key = cache
            .key(&c, src.as_bytes(), opts, HostInfo::current())
            .unwrap();
        assert!(seen.insert(key), "{opts:?} shares a key");
    }
    // Each again: hits, from memory and (in a fresh cache) from disk.
    let fresh = Cache::on_disk(&dir.0);
    for opts in &variants {
        assert_eq!(
            cache.compile(&c, src.as_bytes(), opts).unwrap().1,
            CacheStatus::Hit
        );
        assert_eq!(
            fresh.compile(&c, src.as_bytes(), opts).unwrap().1,
            CacheStatus::Hit
        );
    }
    // One byte of source, the language, or clang's version: another key.
    let other = add_source(3);
    assert_eq!(
        cache.compile(&c, other.as_bytes(), &base).unwrap().1,
        CacheStatus::Miss
    );
    let h = HostInfo::current();
    let v = c.version().unwrap();
    let k = CacheKey::new(src.as_bytes(), &base, h, &v);
    assert_ne!(
        k,
        CacheKey::new(
            src.as_bytes(),
            &CompileOptions::new(Lang::Ir, host()),
            h,
            &v
        )
    );
    assert_ne!(
        k,
        CacheKey::new(src.as_bytes(), &base, h, "clang version 0.0.1")
    );
    assert_eq!(k, CacheKey::new(src.as_bytes(), &base, h, &v));
}

/// Damages the entry of `src` in `dir` with `damage`, then checks a fresh cache misses,
/// recompiles, and leaves a good entry behind (a second fresh cache hits).
fn damaged_entry_is_recompiled(damage: impl Fn(&Path)) {
    let c = compiler();
    let dir = Scratch::new("damage");
    let src = add_source(4);
    let first = Cache::on_disk(&dir.0);
    let (good, s) = first.compile(&c, src.as_bytes(), &c_opts()).unwrap();
    assert_eq!(s, CacheStatus::Miss);
    let key = first
        .key(&c, src.as_bytes(), &c_opts(), HostInfo::current())
        .unwrap();
    let path = first.entry_path(&key).unwrap();
    assert!(path.exists());
    damage(&path);
    let second = Cache::on_disk(&dir.0);
    let (again, s) = second.compile(&c, src.as_bytes(), &c_opts()).unwrap();
    assert_eq!(s, CacheStatus::Miss, "a damaged entry was used");
    assert_eq!(again, good);
    let third = Cache::on_disk(&dir.0);
    let (hit, s) = third.compile(&c, src.as_bytes(), &c_opts()).unwrap();
    assert_eq!(s, CacheStatus::Hit, "the damaged entry was not replaced");
    assert_eq!(call_add(&hit, 1, 1), 6);
}

#[test]
fn corrupted_entry_is_recompiled() {
    damaged_entry_is_recompiled(|p| {
        let mut bytes = std::fs::read(p).unwrap();
        let last = bytes.len() - 10;
        bytes[last] ^= 0x01; // one bit inside the object
        std::fs::write(p, bytes).unwrap();
    });
}

#[test]
fn truncated_entries_are_recompiled() {
    for keep in [0usize, 20, 84, 200] {
        damaged_entry_is_recompiled(|p| {
            let bytes = std::fs::read(p).unwrap();
            std::fs::write(p, &bytes[..keep.min(bytes.len() - 1)]).unwrap();
        });
    }
}

#[test]
fn header_damage_is_recompiled() {
    // Magic, format version, key and length fields.
    for at in [0usize, 9, 30, 45] {
        damaged_entry_is_recompiled(|p| {
            let mut bytes = std::fs::read(p).unwrap();
            bytes[at] ^= 0x80;
            std::fs::write(p, bytes).unwrap();
        });
    }
}

#[test]
fn concurrent_threads_share_one_cache() {
    let c = compiler();
    let dir = Scratch::new("threads");
    let cache = Cache::on_disk(&dir.0);
    let sources: Vec<String> = (0..4).map(|k| add_source(100 + k)).collect();
    std::thread::scope(|s| {
        for t in 0..6 {
            let (c, cache, sources) = (&c, &cache, &sources);
            s.spawn(move || {
                for round in 0..3 {
                    let k = (t + round) % sources.len();
                    let (obj, _) = cache.compile(c, sources[k].as_bytes(), &c_opts()).unwrap();
                    assert_eq!(call_add(&obj, 1, 2), 103 + k as i32);
                }
            });
        }
    });
    let files = cache_entries(&dir.0);
    // Four objects, plus the remembered clang version unless the process already knew it
    // (a compile server's start reads it from the default cache directory first); the
    // hits below prove the four objects are there.
    assert!(matches!(files.len(), 4 | 5), "{files:?}");
    let fresh = Cache::on_disk(&dir.0);
    for (k, src) in sources.iter().enumerate() {
        let (obj, s) = fresh.compile(&c, src.as_bytes(), &c_opts()).unwrap();
        assert_eq!(s, CacheStatus::Hit);
        assert_eq!(call_add(&obj, 0, 0), 100 + k as i32);
    }
    // No temporary file left behind.
    let names: Vec<String> = std::fs::read_dir(&dir.0)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(names.iter().all(|n| !n.starts_with(".tmp-")), "{names:?}");
}

#[test]
fn eviction_keeps_the_directory_under_its_limit_least_recently_used_first() {
    let dir = Scratch::new("evict");
    let limit = 10_000u64;
    let cache = Cache::on_disk(&dir.0)
        .with_disk_limit(limit)
        .with_memory_limit(0);
    let key = |n: u8| CacheKey([n; 32]);
    let object = |n: u8| vec![n; 1_916]; // 2,000 bytes with the header
    for n in 0..4 {
        cache.insert(key(n), &object(n));
    }
    assert_eq!(cache_entries(&dir.0).len(), 4);
    // Age every entry, then use entry 0: it becomes the most recently used.
    let old = SystemTime::now() - Duration::from_secs(3600);
    for (i, (p, _)) in cache_entries(&dir.0).iter().enumerate() {
        let f = std::fs::File::options().write(true).open(p).unwrap();
        f.set_modified(old + Duration::from_secs(i as u64)).unwrap();
    }
    assert_eq!(cache.get(&key(0)), Some(object(0)));
    // 10,000 bytes: at the limit. 12,000: over it, so down to 90 %: 1 and 2 go.
    for n in 4..6 {
        cache.insert(key(n), &object(n));
    }
    let total: u64 = cache_entries(&dir.0).iter().map(|e| e.1).sum();
    assert!(total <= limit / 10 * 9, "{total} bytes left");
    assert_eq!(
        cache.get(&key(0)),
        Some(object(0)),
        "the recently used entry went"
    );
    assert_eq!(cache.get(&key(5)), Some(object(5)), "the newest entry went");
    assert_eq!(cache.get(&key(3)), Some(object(3)), "more than needed went");
    assert_eq!(cache.get(&key(1)), None);
    assert_eq!(cache.get(&key(2)), None);
    // Many more writes: never over the limit.
    for n in 10..40 {
        cache.insert(key(n), &object(n));
        let total: u64 = cache_entries(&dir.0).iter().map(|e| e.1).sum();
        assert!(total <= limit, "{total} bytes after entry {n}");
    }
    // A limit smaller than one entry keeps nothing, and says nothing.
    let tiny = Cache::on_disk(dir.0.join("tiny")).with_disk_limit(100);
    tiny.insert(key(9), &object(9));
    assert!(cache_entries(&dir.0.join("tiny")).is_empty());
}
