//! The compile cache: hits and misses, what the key covers, damaged entries, concurrent
//! writers (threads and processes), eviction, and the CLI's `--cache` / `cache clear`.
//! Every test uses its own directory under cargo's scratch space and removes it.

use elfjit::cache::{clear_dir, Cache, CacheKey, CacheStatus};
use elfjit::clang::{CompileOptions, Compiler, Lang};
use elfjit::flags::HostInfo;
use elfjit::{Arch, Module};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime};

/// A fresh directory, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Scratch {
        static N: AtomicUsize = AtomicUsize::new(0);
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!(
            "cache-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn compiler() -> Compiler {
    Compiler::find().expect("clang")
}

fn host() -> Arch {
    Arch::host().expect("a supported host")
}

fn c_opts() -> CompileOptions {
    CompileOptions::new(Lang::C, host())
}

fn add_source(k: i32) -> String {
    format!("int add(int a, int b) {{ return a + b + {k}; }}\n")
}

fn call_add(object: &[u8], a: i32, b: i32) -> i32 {
    let m = Module::load(object).unwrap();
    let f = m.symbol("add").unwrap();
    // SAFETY: `add` is `int add(int, int)` and `m` is alive for the call.
    let f: extern "C" fn(i32, i32) -> i32 = unsafe { std::mem::transmute(f) };
    f(a, b)
}

/// Every `.obj` entry in `dir`: (path, size).
fn entries(dir: &Path) -> Vec<(PathBuf, u64)> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .filter(|e| e.file_name().to_string_lossy().ends_with(".obj"))
                .map(|e| (e.path(), e.metadata().unwrap().len()))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
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
    let files = entries(&dir.0);
    // Four objects plus the remembered clang version.
    assert_eq!(files.len(), 5, "{files:?}");
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

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_elfjit"))
}

fn run_cli(cache_dir: &Path, args: &[&str]) -> std::process::Output {
    bin()
        .args(args)
        .env("ELFJIT_CACHE_DIR", cache_dir)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// `PATH` with `dir` in front.
fn path_with(dir: &Path) -> std::ffi::OsString {
    let mut dirs = vec![dir.to_path_buf()];
    dirs.extend(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    ));
    std::env::join_paths(dirs).unwrap()
}

fn json(o: &std::process::Output) -> serde_json::Value {
    assert!(
        o.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).unwrap()
}

#[test]
fn processes_writing_the_same_entries_at_once() {
    let dir = Scratch::new("procs");
    let cache_dir = dir.0.join("cache");
    let files: Vec<PathBuf> = (0..3)
        .map(|k| {
            let p = dir.0.join(format!("k{k}.c"));
            std::fs::write(&p, add_source(200 + k)).unwrap();
            p
        })
        .collect();
    // Four processes at once, each compiling all three kernels through the cache.
    let children: Vec<_> = (0..4)
        .map(|_| {
            let script = files
                .iter()
                .map(|f| {
                    format!(
                        "{} run {} --ret i32 --arg i32:1 --arg i32:1 --cache --json || exit 1",
                        env!("CARGO_BIN_EXE_elfjit"),
                        f.display()
                    )
                })
                .collect::<Vec<_>>()
                .join("; ");
            Command::new("sh")
                .arg("-c")
                .arg(script)
                .env("ELFJIT_CACHE_DIR", &cache_dir)
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for child in children {
        let o = child.wait_with_output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        for (k, line) in String::from_utf8_lossy(&o.stdout).lines().enumerate() {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            assert_eq!(v["return"], 202 + k as i64, "{line}");
        }
    }
    // Every entry is whole: a later run of each is a hit with the right answer.
    for (k, f) in files.iter().enumerate() {
        let v = json(&run_cli(
            &cache_dir,
            &[
                "run",
                f.to_str().unwrap(),
                "--ret",
                "i32",
                "--arg",
                "i32:1",
                "--arg",
                "i32:1",
                "--cache",
                "--json",
            ],
        ));
        assert_eq!(v["cache"], "hit");
        assert_eq!(v["return"], 202 + k as i64);
    }
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
    assert_eq!(entries(&dir.0).len(), 4);
    // Age every entry, then use entry 0: it becomes the most recently used.
    let old = SystemTime::now() - Duration::from_secs(3600);
    for (i, (p, _)) in entries(&dir.0).iter().enumerate() {
        let f = std::fs::File::options().write(true).open(p).unwrap();
        f.set_modified(old + Duration::from_secs(i as u64)).unwrap();
    }
    assert_eq!(cache.get(&key(0)), Some(object(0)));
    // 10,000 bytes: at the limit. 12,000: over it, so down to 90 %: 1 and 2 go.
    for n in 4..6 {
        cache.insert(key(n), &object(n));
    }
    let total: u64 = entries(&dir.0).iter().map(|e| e.1).sum();
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
        let total: u64 = entries(&dir.0).iter().map(|e| e.1).sum();
        assert!(total <= limit, "{total} bytes after entry {n}");
    }
    // A limit smaller than one entry keeps nothing, and says nothing.
    let tiny = Cache::on_disk(dir.0.join("tiny")).with_disk_limit(100);
    tiny.insert(key(9), &object(9));
    assert!(entries(&dir.0.join("tiny")).is_empty());
}

#[test]
fn cli_cache_field_override_and_clear() {
    let dir = Scratch::new("cli");
    let cache_dir = dir.0.join("elsewhere");
    let src = dir.0.join("add.c");
    std::fs::write(&src, add_source(0)).unwrap();
    let src = src.to_str().unwrap();
    let args = [
        "run", src, "--ret", "i32", "--arg", "i32:2", "--arg", "i32:40", "--json",
    ];
    // The real clang behind a wrapper that logs each start, so a hit can be seen to run
    // no clang at all.
    // (Found as `clang` in PATH: an ELFJIT_CLANG is checked to run in every process.)
    let log = dir.0.join("clang-starts.log");
    let bin_dir = dir.0.join("bin");
    std::fs::create_dir(&bin_dir).unwrap();
    let wrapper = bin_dir.join("clang");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\necho \"$@\" >> '{}'\nexec '{}' \"$@\"\n",
            log.display(),
            compiler().path().display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(
        &wrapper,
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    )
    .unwrap();
    // Compiles only: with the dlopen fallback every load also links with `clang -shared`.
    let starts = || {
        std::fs::read_to_string(&log).map_or(0, |t| {
            t.lines()
                .filter(|l| l.split(' ').any(|a| a == "-c"))
                .count()
        })
    };
    let run_logged = |args: &[&str]| {
        bin()
            .args(args)
            .env("ELFJIT_CACHE_DIR", &cache_dir)
            .env_remove("ELFJIT_CLANG")
            .env("PATH", path_with(&bin_dir))
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    // Without --cache: no "cache" field and nothing written.
    let v = json(&run_logged(&args));
    assert!(v.get("cache").is_none(), "{v}");
    assert!(!cache_dir.join("objects").exists());
    let mut cached = args.to_vec();
    cached.push("--cache");
    let v = json(&run_logged(&cached));
    assert_eq!(v["cache"], "miss");
    assert_eq!(v["return"], 42);
    let before_hit = starts();
    assert!(
        before_hit >= 2,
        "clang ran for both compiles ({before_hit} starts)"
    );
    let v = json(&run_logged(&cached));
    assert_eq!(v["cache"], "hit");
    assert_eq!(v["return"], 42);
    assert_eq!(
        starts(),
        before_hit,
        "a hit in a new process compiles nothing: {}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    // The entries are under $ELFJIT_CACHE_DIR/objects.
    let objects = cache_dir.join("objects");
    assert_eq!(entries(&objects).len(), 2, "the object and clang's version");
    let o = run_cli(&cache_dir, &["cache", "dir"]);
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        objects.to_str().unwrap()
    );
    // Something that is not ours survives `cache clear`.
    std::fs::write(objects.join("README"), "keep").unwrap();
    let o = run_cli(&cache_dir, &["cache", "clear"]);
    assert!(o.status.success());
    let said = String::from_utf8_lossy(&o.stdout);
    assert!(said.starts_with("removed 2 cached objects ("), "{said}");
    assert!(said.contains(objects.to_str().unwrap()), "{said}");
    assert!(entries(&objects).is_empty());
    assert!(objects.join("README").exists());
    let v = json(&run_cli(&cache_dir, &cached));
    assert_eq!(v["cache"], "miss");
    // Clearing an empty or missing directory is fine.
    assert_eq!(clear_dir(&dir.0.join("none")).unwrap().files, 0);
    let o = run_cli(&dir.0.join("none"), &["cache", "clear"]);
    assert!(String::from_utf8_lossy(&o.stdout).starts_with("removed 0 cached objects"));
    let o = run_cli(&cache_dir, &["cache", "bogus"]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn cli_cache_for_an_emulated_target() {
    let foreign = Arch::ALL.into_iter().find(|a| *a != host()).unwrap();
    let dir = Scratch::new("emu");
    // Share the runner cache the other emulated tests use, keep objects separate.
    let cache_dir = dir.0.join("cache");
    let src = dir.0.join("add.c");
    std::fs::write(&src, add_source(5)).unwrap();
    let args = [
        "run",
        src.to_str().unwrap(),
        "--target",
        foreign.name(),
        "--ret",
        "i32",
        "--arg",
        "i32:2",
        "--arg",
        "i32:3",
        "--cache",
        "--json",
    ];
    let o = run_cli(&cache_dir, &args);
    if !o.status.success() && String::from_utf8_lossy(&o.stderr).contains("qemu") {
        eprintln!("skipped: {}", String::from_utf8_lossy(&o.stderr));
        return;
    }
    let v = json(&o);
    assert_eq!(v["cache"], "miss");
    assert_eq!(v["return"], 10);
    let v = json(&run_cli(&cache_dir, &args));
    assert_eq!(v["cache"], "hit");
    assert_eq!(v["target"], foreign.name());
    assert_eq!(v["return"], 10);
}
