//! A content-addressed cache of compiled objects: the same source, language, flags,
//! target and clang give the same object, so the clang process (tens of milliseconds) is
//! paid once.
//!
//! **Key.** SHA-256 over, length-prefixed: a format tag, the source bytes, the language,
//! the target, the exact clang argument list [`crate::flags::clang_args`] produces (so
//! `-O`, `-march`, extra `-D` flags all count), clang's `--version` line
//! ([`Compiler::version`], run once per [`Compiler`]) and, when the flags say
//! `-march=native`/`-mcpu=native`, a fingerprint of this machine's CPU (the first
//! processor's block of `/proc/cpuinfo` without its clock lines), so a cache directory
//! shared between machines never hands one CPU's code to another. A disk cache remembers
//! the `--version` line per clang executable (see [`Cache::clang_version`]).
//!
//! **What is cached.** Object bytes, not loaded images: a hit is a lookup plus
//! [`crate::Module::load`].
//!
//! **In memory.** A map bounded by total object bytes ([`DEFAULT_MEMORY_LIMIT`]),
//! least-recently-used entries evicted first, behind a mutex: one [`Cache`] can be shared
//! by any number of threads.
//!
//! **On disk** (opt-in: [`Cache::on_disk`], [`Cache::from_env`], `elfjit run --cache`).
//! One file per key, `<dir>/<64 hex digits>.obj`, where `dir` is [`default_dir`]:
//! `$ELFJIT_CACHE_DIR/objects`, else `$XDG_CACHE_HOME/elfjit/objects`, else
//! `~/.cache/elfjit/objects` (the directory logic the emulated runner's cache uses). Each
//! file is an 84-byte header and the object:
//!
//! | bytes | field |
//! |---|---|
//! | 0..8 | magic `ELFJITOB` |
//! | 8..12 | format version, u32 little-endian ([`DISK_FORMAT`]) |
//! | 12..44 | the key |
//! | 44..52 | object length, u64 little-endian |
//! | 52..84 | SHA-256 of the object |
//! | 84.. | the object |
//!
//! Every read checks all of it: a short, long, foreign or corrupted file is a miss, never
//! loaded, and the recompiled object replaces it. Writes go to a temporary file in the
//! same directory that is renamed over the entry, so readers in any process see a whole
//! old file or a whole new one, and concurrent writers of one key simply race to rename
//! identical contents. A failed write is not an error (the compile succeeded; the next
//! run compiles again). The directory is bounded by total size ([`DEFAULT_DISK_LIMIT`]):
//! a hit refreshes the entry's modification time (at most once a minute), and when a
//! write takes the directory over its limit the least recently used entries are removed
//! until it is under 90 % of it.

use crate::clang::{CompileOptions, Compiler};
use crate::error::{Error, Result};
use crate::flags::{clang_args, HostInfo};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime};

/// The default bound on the in-memory map: 64 MiB of objects.
pub const DEFAULT_MEMORY_LIMIT: usize = 64 << 20;
/// The default bound on the on-disk directory: 256 MiB.
pub const DEFAULT_DISK_LIMIT: u64 = 256 << 20;
/// The on-disk entry format this build reads and writes.
pub const DISK_FORMAT: u32 = 1;

const MAGIC: &[u8; 8] = b"ELFJITOB";
const HEADER_LEN: usize = 84;
const EXTENSION: &str = "obj";
/// A hit refreshes an entry's mtime only when it is older than this (one syscall saved
/// on the hot path for entries used again and again).
const TOUCH_AFTER: Duration = Duration::from_secs(60);

/// Whether a compile was served from the cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CacheStatus {
    /// Found (in memory or on disk); clang did not run.
    Hit,
    /// Not found (or found corrupted): clang ran and the object was stored.
    Miss,
}

impl CacheStatus {
    /// `"hit"` or `"miss"`, as `elfjit run --cache --json` prints it.
    pub fn name(self) -> &'static str {
        match self {
            CacheStatus::Hit => "hit",
            CacheStatus::Miss => "miss",
        }
    }
}

impl fmt::Display for CacheStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The SHA-256 key of one compile.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CacheKey(pub [u8; 32]);

impl CacheKey {
    /// The key of compiling `source` with `opts` on `host` by the clang whose
    /// `--version` line is `version` (see the module documentation for what goes in).
    pub fn new(source: &[u8], opts: &CompileOptions, host: HostInfo, version: &str) -> CacheKey {
        let args = clang_args(opts, host);
        let mut h = Sha256::new();
        let mut field = |bytes: &[u8]| {
            h.update((bytes.len() as u64).to_le_bytes());
            h.update(bytes);
        };
        field(b"elfjit object cache 1");
        field(source);
        field(opts.lang.name().as_bytes());
        field(opts.target.name().as_bytes());
        field(&(args.len() as u64).to_le_bytes());
        for a in &args {
            field(a.as_bytes());
        }
        field(version.as_bytes());
        if args.iter().any(|a| a.ends_with("=native")) {
            field(cpu_fingerprint());
        }
        CacheKey(h.finalize().into())
    }

    /// 64 lowercase hex digits.
    pub fn hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }
}

/// What this machine's CPU is, for keys of `-march=native` compiles: the first
/// processor's block of `/proc/cpuinfo` (model, flags, ...) without the lines that change
/// from moment to moment or boot to boot (clock speed, BogoMIPS). Empty where there is no
/// `/proc/cpuinfo`.
fn cpu_fingerprint() -> &'static [u8] {
    static PRINT: OnceLock<Vec<u8>> = OnceLock::new();
    PRINT.get_or_init(|| {
        let text = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let mut out = String::new();
        for line in text.lines() {
            if line.trim().is_empty() {
                break; // end of the first processor's block
            }
            let lower = line.to_ascii_lowercase();
            if lower.contains("mhz") || lower.contains("bogomips") {
                continue;
            }
            out.push_str(line);
            out.push('\n');
        }
        Sha256::digest(out.as_bytes()).to_vec()
    })
}

/// The key under which a clang executable's `--version` line is remembered on disk:
/// its resolved path, size, modification time and inode.
fn clang_identity(path: &Path) -> Option<CacheKey> {
    let real = std::fs::canonicalize(path).ok()?;
    let meta = std::fs::metadata(&real).ok()?;
    let mut h = Sha256::new();
    h.update(b"elfjit clang identity 1\0");
    h.update(real.as_os_str().as_encoded_bytes());
    h.update(b"\0");
    h.update(meta.len().to_le_bytes());
    if let Ok(m) = meta.modified() {
        if let Ok(d) = m.duration_since(SystemTime::UNIX_EPOCH) {
            h.update(d.as_nanos().to_le_bytes());
        }
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        h.update(meta.ino().to_le_bytes());
        h.update(meta.dev().to_le_bytes());
    }
    Some(CacheKey(h.finalize().into()))
}

/// The on-disk object cache directory: `objects` under the cache directory the emulated
/// runner uses (`$ELFJIT_CACHE_DIR`, else `$XDG_CACHE_HOME/elfjit`, else
/// `~/.cache/elfjit`).
pub fn default_dir() -> PathBuf {
    crate::emulate::runner::cache_dir().join("objects")
}

/// What [`clear_dir`] (or [`Cache::clear`]) removed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cleared {
    /// Entries (and leftover temporary files) removed.
    pub files: u64,
    /// Their total size in bytes.
    pub bytes: u64,
}

/// Removes every object cache entry (and leftover temporary file) in `dir`; other files
/// are left alone. A missing directory is empty.
pub fn clear_dir(dir: &Path) -> Result<Cleared> {
    let mut cleared = Cleared::default();
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(cleared),
        Err(source) => {
            return Err(Error::Io {
                context: format!("cannot read the cache {}", dir.display()),
                source,
            })
        }
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if !(is_entry_name(&name) || is_temp_name(&name)) {
            continue;
        }
        let size = entry.metadata().map(|m| m.len()).unwrap_or(0);
        match std::fs::remove_file(entry.path()) {
            Ok(()) => {
                cleared.files += 1;
                cleared.bytes += size;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => {
                return Err(Error::Io {
                    context: format!("cannot remove {}", entry.path().display()),
                    source,
                })
            }
        }
    }
    Ok(cleared)
}

fn is_entry_name(name: &str) -> bool {
    name.strip_suffix(".obj")
        .is_some_and(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()))
}

fn is_temp_name(name: &str) -> bool {
    name.starts_with(".tmp-") && name.ends_with(".obj")
}

/// An in-memory entry: the object and when it was last used.
struct Slot {
    object: Arc<[u8]>,
    used: u64,
}

#[derive(Default)]
struct MemoryMap {
    entries: HashMap<CacheKey, Slot>,
    bytes: usize,
    clock: u64,
}

impl MemoryMap {
    fn get(&mut self, key: &CacheKey) -> Option<Arc<[u8]>> {
        self.clock += 1;
        let clock = self.clock;
        self.entries.get_mut(key).map(|s| {
            s.used = clock;
            s.object.clone()
        })
    }

    fn insert(&mut self, key: CacheKey, object: Arc<[u8]>, limit: usize) {
        if object.len() > limit {
            return;
        }
        self.clock += 1;
        self.bytes += object.len();
        if let Some(old) = self.entries.insert(
            key,
            Slot {
                object,
                used: self.clock,
            },
        ) {
            self.bytes -= old.object.len();
        }
        while self.bytes > limit {
            let Some(oldest) = self
                .entries
                .iter()
                .min_by_key(|(_, s)| s.used)
                .map(|(k, _)| *k)
            else {
                break;
            };
            if let Some(s) = self.entries.remove(&oldest) {
                self.bytes -= s.object.len();
            }
        }
    }
}

/// The on-disk half of a [`Cache`].
struct Disk {
    dir: PathBuf,
    limit: u64,
    /// This process's estimate of the directory's size (`None` before the first scan).
    estimate: Mutex<Option<u64>>,
    writes: AtomicUsize,
}

/// A compile cache: in memory, and optionally on disk. Thread-safe; share one by
/// reference (or in an `Arc`).
pub struct Cache {
    memory: Mutex<MemoryMap>,
    memory_limit: usize,
    disk: Option<Disk>,
}

impl fmt::Debug for Cache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cache")
            .field("memory_limit", &self.memory_limit)
            .field("dir", &self.dir())
            .field("disk_limit", &self.disk.as_ref().map(|d| d.limit))
            .finish()
    }
}

impl Default for Cache {
    fn default() -> Self {
        Cache::in_memory()
    }
}

static UNIQUE: AtomicUsize = AtomicUsize::new(0);

impl Cache {
    /// A cache in this process's memory only, bounded by [`DEFAULT_MEMORY_LIMIT`].
    pub fn in_memory() -> Cache {
        Cache {
            memory: Mutex::new(MemoryMap::default()),
            memory_limit: DEFAULT_MEMORY_LIMIT,
            disk: None,
        }
    }

    /// A cache in memory backed by the directory `dir` (created on first write), bounded
    /// by [`DEFAULT_DISK_LIMIT`].
    pub fn on_disk(dir: impl Into<PathBuf>) -> Cache {
        Cache {
            disk: Some(Disk {
                dir: dir.into(),
                limit: DEFAULT_DISK_LIMIT,
                estimate: Mutex::new(None),
                writes: AtomicUsize::new(0),
            }),
            ..Cache::in_memory()
        }
    }

    /// [`Cache::on_disk`] in [`default_dir`] (`$ELFJIT_CACHE_DIR/objects`, ...).
    pub fn from_env() -> Cache {
        Cache::on_disk(default_dir())
    }

    /// The same cache with another bound on the in-memory map, in bytes (0 keeps nothing
    /// in memory).
    pub fn with_memory_limit(mut self, bytes: usize) -> Cache {
        self.memory_limit = bytes;
        self
    }

    /// The same cache with another bound on the directory, in bytes (no effect without a
    /// directory).
    pub fn with_disk_limit(mut self, bytes: u64) -> Cache {
        if let Some(d) = &mut self.disk {
            d.limit = bytes;
        }
        self
    }

    /// The on-disk directory, if any.
    pub fn dir(&self) -> Option<&Path> {
        self.disk.as_ref().map(|d| d.dir.as_path())
    }

    /// Compiles `source` for the host this process runs on (as [`Compiler::compile`]),
    /// unless the cache has the object.
    pub fn compile(
        &self,
        compiler: &Compiler,
        source: &[u8],
        opts: &CompileOptions,
    ) -> Result<(Vec<u8>, CacheStatus)> {
        self.compile_for_host(compiler, source, opts, HostInfo::current())
    }

    /// [`Cache::compile`] with the host description given (as
    /// [`Compiler::compile_for_host`]). clang's errors are returned and not cached.
    pub fn compile_for_host(
        &self,
        compiler: &Compiler,
        source: &[u8],
        opts: &CompileOptions,
        host: HostInfo,
    ) -> Result<(Vec<u8>, CacheStatus)> {
        let key = self.key(compiler, source, opts, host)?;
        if let Some(object) = self.get(&key) {
            return Ok((object, CacheStatus::Hit));
        }
        let object = compiler.compile_for_host(source, opts, host)?;
        self.insert(key, &object);
        Ok((object, CacheStatus::Miss))
    }

    /// The key of compiling `source` with `opts` on `host` by `compiler`.
    pub fn key(
        &self,
        compiler: &Compiler,
        source: &[u8],
        opts: &CompileOptions,
        host: HostInfo,
    ) -> Result<CacheKey> {
        Ok(CacheKey::new(
            source,
            opts,
            host,
            &self.clang_version(compiler)?,
        ))
    }

    /// `compiler`'s `--version` line. In memory only, [`Compiler::version`] (run once per
    /// [`Compiler`]). With a directory, remembered there (and in this process) under the
    /// identity of the clang executable: its resolved path, size, modification time and
    /// inode, as ccache's default compiler check does; so a new process (each
    /// `elfjit run --cache`) does not pay a `clang --version` run (tens of milliseconds)
    /// on a hit. Replacing the clang binary changes the identity.
    pub fn clang_version(&self, compiler: &Compiler) -> Result<String> {
        let Some(disk) = &self.disk else {
            return compiler.version();
        };
        let Some(id) = clang_identity(compiler.path()) else {
            return compiler.version();
        };
        static SEEN: OnceLock<Mutex<HashMap<CacheKey, String>>> = OnceLock::new();
        let seen = SEEN.get_or_init(Default::default);
        if let Some(v) = seen.lock().unwrap_or_else(|p| p.into_inner()).get(&id) {
            return Ok(v.clone());
        }
        let version = match disk
            .read(&id)
            .and_then(|b| String::from_utf8(b).ok())
            .filter(|v| !v.is_empty())
        {
            Some(v) => v,
            None => {
                let v = compiler.version()?;
                disk.write(&id, v.as_bytes());
                v
            }
        };
        seen.lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, version.clone());
        Ok(version)
    }

    /// The object stored under `key`: from memory, else from disk (a valid entry is then
    /// kept in memory too). A damaged disk entry is a miss.
    pub fn get(&self, key: &CacheKey) -> Option<Vec<u8>> {
        if let Some(o) = self.lock().get(key) {
            return Some(o.to_vec());
        }
        let disk = self.disk.as_ref()?;
        let object = disk.read(key)?;
        self.lock()
            .insert(*key, Arc::from(object.as_slice()), self.memory_limit);
        Some(object)
    }

    /// Stores `object` under `key` in memory and, for a disk cache, in its directory
    /// (best effort: a failed write is ignored).
    pub fn insert(&self, key: CacheKey, object: &[u8]) {
        self.lock()
            .insert(key, Arc::from(object), self.memory_limit);
        if let Some(disk) = &self.disk {
            disk.write(&key, object);
        }
    }

    /// Empties the in-memory map and removes every entry of the directory (see
    /// [`clear_dir`]).
    pub fn clear(&self) -> Result<Cleared> {
        {
            let mut m = self.lock();
            m.entries.clear();
            m.bytes = 0;
        }
        match &self.disk {
            None => Ok(Cleared::default()),
            Some(d) => {
                *d.estimate.lock().unwrap_or_else(|p| p.into_inner()) = None;
                clear_dir(&d.dir)
            }
        }
    }

    /// Objects held in memory: (entries, bytes).
    pub fn memory_usage(&self) -> (usize, usize) {
        let m = self.lock();
        (m.entries.len(), m.bytes)
    }

    /// The path of `key`'s entry on disk (whether it exists or not), for a disk cache.
    pub fn entry_path(&self, key: &CacheKey) -> Option<PathBuf> {
        self.disk.as_ref().map(|d| d.path(key))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, MemoryMap> {
        self.memory.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The header and object of an entry.
fn encode_entry(key: &CacheKey, object: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + object.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&DISK_FORMAT.to_le_bytes());
    out.extend_from_slice(&key.0);
    out.extend_from_slice(&(object.len() as u64).to_le_bytes());
    out.extend_from_slice(&Sha256::digest(object));
    out.extend_from_slice(object);
    out
}

/// The object of an entry if every header field checks out against `key` and the bytes.
fn decode_entry(key: &CacheKey, mut file: Vec<u8>) -> Option<Vec<u8>> {
    let header = file.get(..HEADER_LEN)?;
    let len = u64::from_le_bytes(header.get(44..52)?.try_into().ok()?);
    let valid = header.get(..8)? == MAGIC
        && header.get(8..12)? == DISK_FORMAT.to_le_bytes()
        && header.get(12..44)? == key.0
        && u64::try_from(file.len() - HEADER_LEN).ok()? == len
        && header.get(52..84)? == Sha256::digest(file.get(HEADER_LEN..)?).as_slice();
    if !valid {
        return None;
    }
    file.drain(..HEADER_LEN);
    Some(file)
}

impl Disk {
    fn path(&self, key: &CacheKey) -> PathBuf {
        self.dir.join(format!("{}.{EXTENSION}", key.hex()))
    }

    fn read(&self, key: &CacheKey) -> Option<Vec<u8>> {
        let mut file = std::fs::File::open(self.path(key)).ok()?;
        let meta = file.metadata().ok()?;
        let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).ok()?);
        file.read_to_end(&mut bytes).ok()?;
        let object = decode_entry(key, bytes)?;
        let stale = meta
            .modified()
            .ok()
            .and_then(|m| SystemTime::now().duration_since(m).ok())
            .is_some_and(|age| age > TOUCH_AFTER);
        if stale {
            // Recently used: the last to be evicted. Failure only costs LRU accuracy.
            let _ = file.set_modified(SystemTime::now());
        }
        Some(object)
    }

    fn write(&self, key: &CacheKey, object: &[u8]) {
        if std::fs::create_dir_all(&self.dir).is_err() {
            return;
        }
        let entry = encode_entry(key, object);
        let temp = self.dir.join(format!(
            ".tmp-{}-{}-{}.{EXTENSION}",
            std::process::id(),
            UNIQUE.fetch_add(1, Ordering::Relaxed),
            &key.hex()[..16]
        ));
        let written =
            std::fs::write(&temp, &entry).and_then(|()| std::fs::rename(&temp, self.path(key)));
        if written.is_err() {
            let _ = std::fs::remove_file(&temp);
            return;
        }
        self.account(entry.len() as u64);
    }

    /// Adds a write to this process's estimate of the directory's size and evicts when
    /// it passes the limit. The directory is scanned on the first write, when the
    /// estimate passes the limit, and every 256 writes (to see other processes' writes).
    fn account(&self, written: u64) {
        let mut estimate = self.estimate.lock().unwrap_or_else(|p| p.into_inner());
        let rescan = self.writes.fetch_add(1, Ordering::Relaxed) % 256 == 255;
        let total = match *estimate {
            Some(e) if !rescan => e + written,
            _ => self.scan().iter().map(|e| e.1).sum(),
        };
        *estimate = Some(if total > self.limit {
            self.evict()
        } else {
            total
        });
    }

    /// The entries in the directory: (path, size, last use).
    fn scan(&self) -> Vec<(PathBuf, u64, SystemTime)> {
        let Ok(dir) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        dir.flatten()
            .filter(|e| is_entry_name(&e.file_name().to_string_lossy()))
            .filter_map(|e| {
                let m = e.metadata().ok()?;
                Some((
                    e.path(),
                    m.len(),
                    m.modified().unwrap_or(SystemTime::UNIX_EPOCH),
                ))
            })
            .collect()
    }

    /// Removes least recently used entries until the directory is under 90 % of its
    /// limit; returns the size left.
    fn evict(&self) -> u64 {
        let mut entries = self.scan();
        entries.sort_by_key(|e| e.2);
        let mut total: u64 = entries.iter().map(|e| e.1).sum();
        let target = self.limit / 10 * 9;
        for (path, size, _) in entries {
            if total <= target {
                break;
            }
            match std::fs::remove_file(&path) {
                Ok(()) => total -= size,
                // Another process evicted it first.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => total -= size,
                Err(_) => {}
            }
        }
        total
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(n: u8) -> CacheKey {
        CacheKey([n; 32])
    }

    #[test]
    fn entry_round_trip_and_every_damage_is_refused() {
        let obj = b"\x7fELF not really an object".to_vec();
        let good = encode_entry(&key(1), &obj);
        assert_eq!(decode_entry(&key(1), good.clone()), Some(obj.clone()));
        // Another key's file under this name.
        assert_eq!(decode_entry(&key(2), good.clone()), None);
        // Truncated anywhere, including inside the header.
        for cut in [0, 7, HEADER_LEN - 1, HEADER_LEN, good.len() - 1] {
            assert_eq!(decode_entry(&key(1), good[..cut].to_vec()), None, "{cut}");
        }
        // Trailing garbage.
        let mut long = good.clone();
        long.push(0);
        assert_eq!(decode_entry(&key(1), long), None);
        // Any flipped bit.
        for i in 0..good.len() {
            let mut bad = good.clone();
            bad[i] ^= 0x10;
            assert_eq!(decode_entry(&key(1), bad), None, "byte {i}");
        }
    }

    #[test]
    fn memory_map_evicts_least_recently_used() {
        let mut m = MemoryMap::default();
        let obj = |n: usize| Arc::from(vec![0u8; n]);
        m.insert(key(1), obj(40), 100);
        m.insert(key(2), obj(40), 100);
        assert!(m.get(&key(1)).is_some()); // 2 is now the oldest
        m.insert(key(3), obj(40), 100);
        assert!(m.get(&key(2)).is_none());
        assert!(m.get(&key(1)).is_some() && m.get(&key(3)).is_some());
        assert_eq!(m.bytes, 80);
        // Too big to keep at all.
        m.insert(key(4), obj(101), 100);
        assert!(m.get(&key(4)).is_none());
        assert_eq!(m.bytes, 80);
        // Replacing an entry does not count it twice.
        m.insert(key(1), obj(10), 100);
        assert_eq!(m.bytes, 50);
    }

    #[test]
    fn names() {
        assert!(is_entry_name(&format!("{}.obj", key(0xab).hex())));
        assert!(!is_entry_name("runner-x86_64-7695560413c5a923"));
        assert!(!is_entry_name("abc.obj"));
        assert!(is_temp_name(".tmp-1-2-0123456789abcdef.obj"));
        assert_eq!(CacheStatus::Hit.to_string(), "hit");
        assert_eq!(CacheStatus::Miss.name(), "miss");
    }
}
