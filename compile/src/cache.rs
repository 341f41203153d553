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
//! `elfjit::Module::load`.
//!
//! **In memory.** A map bounded by total object bytes ([`DEFAULT_MEMORY_LIMIT`]),
//! least-recently-used entries evicted first, behind a mutex: one [`Cache`] can be shared
//! by any number of threads.
//!
//! **What clang read.** A C compile can read more than its source: `#include`d headers,
//! `#embed`ded files. On a miss the compile also asks clang for its dependency list
//! (`-MD`, on a pipe), and the entry records each file's path and SHA-256; a lookup
//! re-hashes them, and any change is a miss (the entry is recompiled and replaced). A
//! file that cannot be read back, or that changed after the compile started, makes the
//! result uncacheable rather than wrongly cached. Not covered: a header that would now
//! be found earlier on the include path than the one clang read (a new file shadowing an
//! old one), and `__has_include` of a file that did not exist.
//!
//! **On disk** (opt-in: [`Cache::on_disk`], [`Cache::from_env`], `elfjit run --cache`).
//! One file per key, `<dir>/<64 hex digits>.obj`, where `dir` is [`default_dir`]:
//! `$ELFJIT_CACHE_DIR/objects`, else `$XDG_CACHE_HOME/elfjit/objects`, else
//! `~/.cache/elfjit/objects`, else (no `HOME`) `$TMPDIR/elfjit-<uid>/objects`: `objects`
//! under [`root_dir`], the cache root the emulated runner keeps its runners in too. Each file is an 84-byte header, the
//! object and the list of files clang read:
//!
//! | bytes | field |
//! |---|---|
//! | 0..8 | magic `ELFJITOB` |
//! | 8..12 | format version, u32 little-endian ([`DISK_FORMAT`]) |
//! | 12..44 | the key |
//! | 44..52 | object length, u64 little-endian |
//! | 52..84 | SHA-256 of the object and the dependency list |
//! | 84.. | the object |
//! | then | per dependency: path length (u32 LE), path bytes, SHA-256 of its contents |
//!
//! **Who can make elfjit load what.** Whoever can write the cache directory can run code
//! as you: the checksum in an entry proves it is whole, not who wrote it. So the
//! directory (and, for [`Cache::from_env`], the cache root above it) is used only if it is
//! owned by you and not writable by group or others (it is created `0700`), and an entry
//! only if it is a regular file (not a symlink, FIFO or device), owned by you, not
//! writable by group or others, and no larger than the largest object plus its header;
//! see [`crate::private_dir`]. Anything else is a miss, with one line on stderr per
//! reason per process, never a load. A cache shared between users is not supported.
//!
//! Every read checks all of the header: a short, long, foreign or corrupted file is a
//! miss, never loaded, and the recompiled object replaces it. Writes go to a temporary
//! file with an unpredictable name, created exclusively (`0600`) in the same directory
//! and renamed over the entry, so readers in any process see a whole old file or a whole
//! new one, and concurrent writers of one key simply race to rename identical contents.
//! A failed write is not an error (the compile succeeded; the next run compiles again),
//! but a cache that cannot be written is said once. The directory is bounded by total
//! size ([`DEFAULT_DISK_LIMIT`]), temporary files included: a hit refreshes the entry's
//! modification time (at most once a minute), and when a write takes the directory over
//! its limit the least recently used entries are removed until it is under 90 % of it;
//! temporary files older than an hour (a writer that died) are removed on the way.

use crate::bounded;
use crate::clang::{CompileOptions, Compiler, MAX_OBJECT_SIZE};
use crate::error::{Error, Result};
use crate::flags::{clang_args, HostInfo};
use crate::notes;
pub use crate::outcome::CacheStatus;
use crate::private_dir::{PrivateDir, Refused, TEMP_PREFIX};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::ffi::OsStr;
use std::fmt;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime};

/// The default bound on the in-memory map: 64 MiB of objects.
pub const DEFAULT_MEMORY_LIMIT: usize = 64 << 20;
/// The default bound on the on-disk directory: 256 MiB.
pub const DEFAULT_DISK_LIMIT: u64 = 256 << 20;
/// The on-disk entry format this build reads and writes (2: with the dependency list).
pub const DISK_FORMAT: u32 = 2;

const MAGIC: &[u8; 8] = b"ELFJITOB";
const HEADER_LEN: usize = 84;
const EXTENSION: &str = "obj";
/// A hit refreshes an entry's mtime only when it is older than this (one syscall saved
/// on the hot path for entries used again and again).
const TOUCH_AFTER: Duration = Duration::from_secs(60);
/// A temporary file this old belongs to a writer that died: removed.
const STALE_AFTER: Duration = Duration::from_secs(3600);
/// The most files one compile may have read and still be cached.
const MAX_DEPENDENCIES: usize = 4096;
/// The longest dependency path recorded.
const MAX_DEPENDENCY_PATH: usize = 4096;
/// The largest dependency file hashed (a header bigger than this is not cached against).
const MAX_DEPENDENCY_FILE: u64 = 64 << 20;
/// The largest dependency list in an entry.
const MAX_DEPENDENCY_BLOCK: usize = MAX_DEPENDENCIES * (4 + MAX_DEPENDENCY_PATH + 32);
/// The largest entry read: header, the largest object clang is allowed to write, and the
/// largest dependency list.
const MAX_ENTRY: u64 = (HEADER_LEN + MAX_OBJECT_SIZE + MAX_DEPENDENCY_BLOCK) as u64;
/// The largest clang-version record read.
const MAX_VERSION_RECORD: u64 = HEADER_LEN as u64 + 4096;

/// The SHA-256 key of one compile.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CacheKey(pub [u8; 32]);

impl CacheKey {
    /// The key of compiling `source` with `opts` on `host` by the clang whose
    /// `--version` line is `version` (see the module documentation for what goes in; the
    /// files clang reads besides the source are checked against the entry, not keyed).
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

/// A file a compile read besides its source, and the SHA-256 of what it held.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dependency {
    /// The path clang reported (relative ones are relative to the working directory).
    pub path: PathBuf,
    /// SHA-256 of its contents.
    pub sha256: [u8; 32],
}

/// The SHA-256 of the regular file at `path` (at most [`MAX_DEPENDENCY_FILE`] bytes) and
/// its modification time; `None` if it cannot be read as one.
fn hash_file(path: &Path) -> Option<([u8; 32], SystemTime)> {
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .ok()?;
    let meta = file.metadata().ok()?;
    if !meta.is_file() {
        return None;
    }
    let bytes = bounded::read_to_end(&mut file, MAX_DEPENDENCY_FILE, Some(meta.len())).ok()?;
    Some((Sha256::digest(&bytes).into(), meta.modified().ok()?))
}

/// The dependencies of a compile that started at `started`, or `None` (with a note) if
/// the result must not be cached: a file cannot be read back, there are too many, or one
/// was modified after the compile started (what clang read may not be what is hashed).
fn record_dependencies(files: &[PathBuf], started: SystemTime) -> Option<Vec<Dependency>> {
    if files.len() > MAX_DEPENDENCIES {
        return None;
    }
    let mut deps = Vec::with_capacity(files.len());
    for path in files {
        let readable = path.as_os_str().len() <= MAX_DEPENDENCY_PATH;
        let hashed = if readable { hash_file(path) } else { None };
        let Some((sha256, modified)) = hashed else {
            notes::once("compile cache", "dependency-unreadable", || {
                format!(
                    "not caching a compile: the file it read, {}, cannot be read back to \
                     check it later",
                    path.display()
                )
            });
            return None;
        };
        if modified > started {
            notes::once("compile cache", "dependency-changed", || {
                format!(
                    "not caching a compile: {} changed while it was being compiled",
                    path.display()
                )
            });
            return None;
        }
        deps.push(Dependency {
            path: path.clone(),
            sha256,
        });
    }
    Some(deps)
}

/// Whether every dependency still holds what it held.
fn dependencies_unchanged(deps: &[Dependency]) -> bool {
    deps.iter()
        .all(|d| hash_file(&d.path).is_some_and(|(h, _)| h == d.sha256))
}

/// What this machine's CPU is, for keys of `-march=native` compiles: the first
/// processor's block of `/proc/cpuinfo` (model, flags, ...) without the lines that change
/// from moment to moment or boot to boot (clock speed, BogoMIPS). Empty where there is no
/// `/proc/cpuinfo`.
fn cpu_fingerprint() -> &'static [u8] {
    static PRINT: OnceLock<Vec<u8>> = OnceLock::new();
    PRINT.get_or_init(|| {
        let text = std::fs::File::open("/proc/cpuinfo")
            .ok()
            .and_then(|mut f| bounded::read_to_end(&mut f, 1 << 20, None).ok())
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default();
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

/// The directory elfjit caches things in: `$ELFJIT_CACHE_DIR`, else
/// `$XDG_CACHE_HOME/elfjit`, else `~/.cache/elfjit`, else (no `HOME`) `elfjit-<uid>` in
/// the system's temporary directory. The compile cache keeps its objects in `objects`
/// under it ([`default_dir`]); the emulated runner keeps its runners in it. There is no
/// directory shared between users: whichever is chosen must be yours alone to be used,
/// and a symbolic link at its name is refused, not followed ([`PrivateDir::open`]).
pub fn root_dir() -> PathBuf {
    let non_empty = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
    if let Some(d) = non_empty("ELFJIT_CACHE_DIR") {
        return PathBuf::from(d);
    }
    if let Some(d) = non_empty("XDG_CACHE_HOME") {
        return PathBuf::from(d).join("elfjit");
    }
    if let Some(h) = non_empty("HOME") {
        return PathBuf::from(h).join(".cache").join("elfjit");
    }
    std::env::temp_dir().join(format!("elfjit-{}", crate::private_dir::euid()))
}

/// The on-disk object cache directory: `objects` under [`root_dir`].
pub fn default_dir() -> PathBuf {
    root_dir().join(OBJECTS)
}

const OBJECTS: &str = "objects";

/// What [`clear_dir`] (or [`Cache::clear`]) removed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cleared {
    /// Entries (and leftover temporary files) removed.
    pub files: u64,
    /// Their total size in bytes.
    pub bytes: u64,
}

/// Removes every object cache entry (and leftover temporary file) in `dir`; other files
/// are left alone. A missing directory is empty; a directory that is not yours alone is
/// refused (an error) and left as it is.
pub fn clear_dir(dir: &Path) -> Result<Cleared> {
    clear_opened(dir, PrivateDir::open(dir, false), is_cache_file)
}

/// [`clear_dir`] for `objects` under the cache root `root` (what `elfjit cache clear`
/// empties), reached through the root's checked descriptor: a root that is not yours
/// alone (another user's directory, or a symbolic link planted at its name) is refused
/// and nothing under it is touched.
pub fn clear_objects_in(root: &Path) -> Result<Cleared> {
    clear_opened(
        &root.join(OBJECTS),
        open_objects(root, false),
        is_cache_file,
    )
}

/// The checked `objects` directory under the checked cache root `root`.
fn open_objects(root: &Path, create: bool) -> std::result::Result<PrivateDir, Refused> {
    PrivateDir::open(root, create).and_then(|r| r.subdir(OBJECTS, create))
}

/// Removes the files (and elfjit's work directories) of the private directory `dir`
/// whose names `ours` accepts (what [`clear_dir`] does for objects, and the emulated
/// runner for its runners in [`root_dir`]). A missing directory is empty; one that is not
/// yours alone is refused, untouched.
pub fn clear_matching(dir: &Path, ours: impl Fn(&str) -> bool) -> Result<Cleared> {
    clear_opened(dir, PrivateDir::open(dir, false), ours)
}

/// Removes what `ours` accepts from `opened` (the private directory `shown`, or why it
/// was refused); every removal is relative to its descriptor.
fn clear_opened(
    shown: &Path,
    opened: std::result::Result<PrivateDir, Refused>,
    ours: impl Fn(&str) -> bool,
) -> Result<Cleared> {
    let dir = match opened {
        Ok(d) => d,
        Err(Refused::Missing) => return Ok(Cleared::default()),
        Err(e) => {
            return Err(Error::Io {
                context: format!("refusing to clear {}", shown.display()),
                source: std::io::Error::other(e.to_string()),
            })
        }
    };
    let io = |source| Error::Io {
        context: format!("cannot clear {}", dir.path().display()),
        source,
    };
    let mut cleared = Cleared::default();
    for entry in dir.list().map_err(io)? {
        let Some(name) = entry.name.to_str() else {
            continue;
        };
        if !ours(name) {
            continue;
        }
        match dir.remove_tree(&entry.name) {
            Ok(()) => {
                cleared.files += 1;
                cleared.bytes += entry.len;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io(e)),
        }
    }
    Ok(cleared)
}

/// An entry or a temporary file of the object cache.
fn is_cache_file(name: &str) -> bool {
    is_entry_name(name) || is_temp_name(name)
}

fn is_entry_name(name: &str) -> bool {
    name.strip_suffix(".obj")
        .is_some_and(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()))
}

fn is_temp_name(name: &str) -> bool {
    name.starts_with(TEMP_PREFIX)
}

/// An object and the files it was compiled from, as found in memory.
type Found = (Arc<[u8]>, Arc<[Dependency]>);

/// An in-memory entry: the object, the files it was compiled from, when it was last used.
struct Slot {
    object: Arc<[u8]>,
    deps: Arc<[Dependency]>,
    used: u64,
}

#[derive(Default)]
struct MemoryMap {
    entries: HashMap<CacheKey, Slot>,
    bytes: usize,
    clock: u64,
}

impl MemoryMap {
    fn get(&mut self, key: &CacheKey) -> Option<Found> {
        self.clock += 1;
        let clock = self.clock;
        self.entries.get_mut(key).map(|s| {
            s.used = clock;
            (s.object.clone(), s.deps.clone())
        })
    }

    fn remove(&mut self, key: &CacheKey) {
        if let Some(s) = self.entries.remove(key) {
            self.bytes -= s.object.len();
        }
    }

    fn insert(&mut self, key: CacheKey, object: Arc<[u8]>, deps: Arc<[Dependency]>, limit: usize) {
        if object.len() > limit {
            return;
        }
        self.clock += 1;
        self.bytes += object.len();
        if let Some(old) = self.entries.insert(
            key,
            Slot {
                object,
                deps,
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
            self.remove(&oldest);
        }
    }
}

/// Whether the directory has been opened (and checked) yet.
enum DirState {
    /// Not yet, or it did not exist the last time.
    Unopened,
    Open(Arc<PrivateDir>),
    /// Refused or unusable: not tried again by this cache.
    Refused,
}

/// The on-disk half of a [`Cache`].
struct Disk {
    /// The objects directory.
    path: PathBuf,
    /// For [`Cache::from_env`]: the cache root, checked before `objects` in it.
    root: Option<PathBuf>,
    limit: u64,
    state: Mutex<DirState>,
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

impl Cache {
    /// A cache in this process's memory only, bounded by [`DEFAULT_MEMORY_LIMIT`].
    pub fn in_memory() -> Cache {
        Cache {
            memory: Mutex::new(MemoryMap::default()),
            memory_limit: DEFAULT_MEMORY_LIMIT,
            disk: None,
        }
    }

    /// A cache in memory backed by the directory `dir` (created `0700` on first write),
    /// bounded by [`DEFAULT_DISK_LIMIT`]. The directory is used only if it is yours alone
    /// (see the module documentation).
    pub fn on_disk(dir: impl Into<PathBuf>) -> Cache {
        Cache::with_disk(dir.into(), None)
    }

    fn with_disk(path: PathBuf, root: Option<PathBuf>) -> Cache {
        Cache {
            disk: Some(Disk {
                path,
                root,
                limit: DEFAULT_DISK_LIMIT,
                state: Mutex::new(DirState::Unopened),
                estimate: Mutex::new(None),
                writes: AtomicUsize::new(0),
            }),
            ..Cache::in_memory()
        }
    }

    /// [`Cache::on_disk`] in [`default_dir`] (`$ELFJIT_CACHE_DIR/objects`, ...); the
    /// cache root above it is checked too.
    pub fn from_env() -> Cache {
        let root = root_dir();
        Cache::with_disk(root.join(OBJECTS), Some(root))
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
        self.disk.as_ref().map(|d| d.path.as_path())
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
        let started = SystemTime::now();
        let (object, files) = compiler.compile_with_dependencies(source, opts, host)?;
        if let Some(deps) = record_dependencies(&files, started) {
            self.insert_with_dependencies(key, &object, deps);
        }
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
            .read(&id, MAX_VERSION_RECORD)
            .filter(|(_, deps)| deps.is_empty())
            .and_then(|(b, _)| String::from_utf8(b).ok())
            .filter(|v| !v.is_empty())
        {
            Some(v) => v,
            None => {
                let v = compiler.version()?;
                disk.write(&id, v.as_bytes(), &[]);
                v
            }
        };
        seen.lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, version.clone());
        Ok(version)
    }

    /// The object stored under `key`: from memory, else from disk (a valid entry is then
    /// kept in memory too). A damaged disk entry, or one whose recorded dependencies have
    /// changed since, is a miss.
    pub fn get(&self, key: &CacheKey) -> Option<Vec<u8>> {
        let found = self.lock().get(key);
        if let Some((object, deps)) = found {
            if dependencies_unchanged(&deps) {
                return Some(object.to_vec());
            }
            self.lock().remove(key);
            return None;
        }
        let disk = self.disk.as_ref()?;
        let (object, deps) = disk.read(key, MAX_ENTRY)?;
        if !dependencies_unchanged(&deps) {
            return None;
        }
        self.lock().insert(
            *key,
            Arc::from(object.as_slice()),
            Arc::from(deps),
            self.memory_limit,
        );
        Some(object)
    }

    /// Stores `object` under `key` in memory and, for a disk cache, in its directory
    /// (best effort: a failed write is said once, not returned), as a compile that read
    /// no file but its source.
    pub fn insert(&self, key: CacheKey, object: &[u8]) {
        self.insert_with_dependencies(key, object, Vec::new());
    }

    /// [`Cache::insert`] recording the files the compile read: the entry is used only
    /// while each still holds what it held.
    pub fn insert_with_dependencies(&self, key: CacheKey, object: &[u8], deps: Vec<Dependency>) {
        let deps: Arc<[Dependency]> = Arc::from(deps);
        self.lock()
            .insert(key, Arc::from(object), deps.clone(), self.memory_limit);
        if let Some(disk) = &self.disk {
            disk.write(&key, object, &deps);
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
                match &d.root {
                    Some(root) => clear_objects_in(root),
                    None => clear_dir(&d.path),
                }
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
        self.disk.as_ref().map(|d| d.path.join(entry_name(key)))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, MemoryMap> {
        self.memory.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn entry_name(key: &CacheKey) -> String {
    format!("{}.{EXTENSION}", key.hex())
}

/// The dependency list as stored after the object.
fn encode_dependencies(deps: &[Dependency]) -> Vec<u8> {
    let mut out = Vec::new();
    for d in deps {
        let path = d.path.as_os_str().as_bytes();
        out.extend_from_slice(&(path.len() as u32).to_le_bytes());
        out.extend_from_slice(path);
        out.extend_from_slice(&d.sha256);
    }
    out
}

fn decode_dependencies(mut bytes: &[u8]) -> Option<Vec<Dependency>> {
    let mut deps = Vec::new();
    while !bytes.is_empty() {
        if deps.len() >= MAX_DEPENDENCIES {
            return None;
        }
        let len = u32::from_le_bytes(bytes.get(..4)?.try_into().ok()?) as usize;
        if len > MAX_DEPENDENCY_PATH {
            return None;
        }
        let path = bytes.get(4..4 + len)?;
        let sha256: [u8; 32] = bytes.get(4 + len..4 + len + 32)?.try_into().ok()?;
        deps.push(Dependency {
            path: PathBuf::from(OsStr::from_bytes(path)),
            sha256,
        });
        bytes = bytes.get(4 + len + 32..)?;
    }
    Some(deps)
}

/// The header of an entry holding `object` and the encoded dependency list `deps`.
fn encode_header(key: &CacheKey, object: &[u8], deps: &[u8]) -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    let mut sha = Sha256::new();
    sha.update(object);
    sha.update(deps);
    let fields: [&[u8]; 5] = [
        MAGIC,
        &DISK_FORMAT.to_le_bytes(),
        &key.0,
        &(object.len() as u64).to_le_bytes(),
        &sha.finalize(),
    ];
    let mut at = 0;
    for f in fields {
        if let Some(dst) = h.get_mut(at..at + f.len()) {
            dst.copy_from_slice(f);
        }
        at += f.len();
    }
    h
}

/// The whole entry (tests, and writers of forged entries in tests).
#[cfg(test)]
fn encode_entry(key: &CacheKey, object: &[u8]) -> Vec<u8> {
    let mut out = encode_header(key, object, &[]).to_vec();
    out.extend_from_slice(object);
    out
}

/// The object and dependencies of an entry if every header field checks out against
/// `key` and the bytes.
fn decode_entry(key: &CacheKey, mut file: Vec<u8>) -> Option<(Vec<u8>, Vec<Dependency>)> {
    let header = file.get(..HEADER_LEN)?;
    let len = usize::try_from(u64::from_le_bytes(header.get(44..52)?.try_into().ok()?)).ok()?;
    let end = HEADER_LEN.checked_add(len)?;
    let valid = header.get(..8)? == MAGIC
        && header.get(8..12)? == DISK_FORMAT.to_le_bytes()
        && header.get(12..44)? == key.0
        && end <= file.len()
        && header.get(52..84)? == Sha256::digest(file.get(HEADER_LEN..)?).as_slice();
    if !valid {
        return None;
    }
    let deps = decode_dependencies(file.get(end..)?)?;
    file.truncate(end);
    file.drain(..HEADER_LEN);
    Some((file, deps))
}

/// What a scan of the directory found.
struct Scanned {
    /// Entries: (name, size, last use).
    entries: Vec<(std::ffi::OsString, u64, SystemTime)>,
    /// Bytes in live temporary files (writers at work).
    temporary: u64,
}

impl Disk {
    /// The checked directory, opening it on first use (creating it if `create`). A
    /// refusal is said once and remembered; a missing directory is retried later.
    fn dir(&self, create: bool) -> Option<Arc<PrivateDir>> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        match &*state {
            DirState::Open(d) => return Some(d.clone()),
            DirState::Refused => return None,
            DirState::Unopened => {}
        }
        let opened = match &self.root {
            Some(root) => open_objects(root, create),
            None => PrivateDir::open(&self.path, create),
        };
        match opened {
            Ok(d) => {
                let d = Arc::new(d);
                *state = DirState::Open(d.clone());
                Some(d)
            }
            Err(Refused::Missing) if !create => None,
            Err(Refused::Unsafe { reason, why }) => {
                notes::once("compile cache", reason, || {
                    format!(
                        "not using the compile cache: {why}; whoever can write a cache \
                         directory can make elfjit run their code"
                    )
                });
                *state = DirState::Refused;
                None
            }
            Err(e) => {
                if create {
                    self.cannot_write(&e.to_string());
                    *state = DirState::Refused;
                }
                None
            }
        }
    }

    fn cannot_write(&self, why: &str) {
        notes::once("compile cache", "cannot-write", || {
            format!(
                "cannot write to the compile cache {}: {why}; compiles are not being cached",
                self.path.display()
            )
        });
    }

    /// The object and dependencies of `key`'s entry, if it passes every check and is at
    /// most `limit` bytes.
    fn read(&self, key: &CacheKey, limit: u64) -> Option<(Vec<u8>, Vec<Dependency>)> {
        let dir = self.dir(false)?;
        let name = entry_name(key);
        let mut checked = match dir.open_file(&name, limit) {
            Ok(f) => f,
            Err(Refused::Unsafe { reason, why }) => {
                notes::once("compile cache entry", reason, || {
                    format!("ignoring a compile cache entry: {why}")
                });
                return None;
            }
            Err(_) => return None,
        };
        let bytes = bounded::read_to_end(&mut checked.file, limit, Some(checked.len)).ok()?;
        let entry = decode_entry(key, bytes)?;
        let stale = SystemTime::now()
            .duration_since(checked.modified)
            .is_ok_and(|age| age > TOUCH_AFTER);
        if stale {
            // Recently used: the last to be evicted.
            PrivateDir::touch(&checked.file);
        }
        Some(entry)
    }

    fn write(&self, key: &CacheKey, object: &[u8], deps: &[Dependency]) {
        let Some(dir) = self.dir(true) else {
            return;
        };
        let deps = encode_dependencies(deps);
        let header = encode_header(key, object, &deps);
        match dir.write_file(&entry_name(key), &[&header, object, &deps], 0o600) {
            Ok(n) => self.account(&dir, n),
            Err(e) => self.cannot_write(&e.to_string()),
        }
    }

    /// Adds a write to this process's estimate of the directory's size and evicts when
    /// it passes the limit. The directory is scanned on the first write, when the
    /// estimate passes the limit, and every 256 writes (to see other processes' writes).
    fn account(&self, dir: &PrivateDir, written: u64) {
        let mut estimate = self.estimate.lock().unwrap_or_else(|p| p.into_inner());
        let rescan = self.writes.fetch_add(1, Ordering::Relaxed) % 256 == 255;
        let total = match *estimate {
            Some(e) if !rescan => e + written,
            _ => {
                let s = self.scan(dir);
                s.temporary + s.entries.iter().map(|e| e.1).sum::<u64>()
            }
        };
        *estimate = Some(if total > self.limit {
            self.evict(dir)
        } else {
            total
        });
    }

    /// The entries in the directory, and the size of live temporary files; temporary
    /// files older than [`STALE_AFTER`] are removed.
    fn scan(&self, dir: &PrivateDir) -> Scanned {
        let mut scanned = Scanned {
            entries: Vec::new(),
            temporary: 0,
        };
        let Ok(listing) = dir.list() else {
            return scanned;
        };
        let now = SystemTime::now();
        for l in listing {
            let Some(name) = l.name.to_str() else {
                continue;
            };
            if is_entry_name(name) && !l.is_dir {
                scanned.entries.push((l.name.clone(), l.len, l.modified));
            } else if is_temp_name(name) {
                let stale = now
                    .duration_since(l.modified)
                    .is_ok_and(|age| age > STALE_AFTER);
                if !(stale && dir.remove_tree(&l.name).is_ok()) {
                    scanned.temporary += l.len;
                }
            }
        }
        scanned
    }

    /// Removes least recently used entries until the directory is under 90 % of its
    /// limit; returns the size left.
    fn evict(&self, dir: &PrivateDir) -> u64 {
        let Scanned {
            mut entries,
            temporary,
        } = self.scan(dir);
        entries.sort_by_key(|e| e.2);
        let mut total: u64 = temporary + entries.iter().map(|e| e.1).sum::<u64>();
        let target = self.limit / 10 * 9;
        for (name, size, _) in entries {
            if total <= target {
                break;
            }
            match dir.remove(&name) {
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

    fn object_of(key: &CacheKey, file: Vec<u8>) -> Option<Vec<u8>> {
        decode_entry(key, file).map(|(object, _)| object)
    }

    #[test]
    fn entry_round_trip_and_every_damage_is_refused() {
        let obj = b"\x7fELF not really an object".to_vec();
        let good = encode_entry(&key(1), &obj);
        assert_eq!(object_of(&key(1), good.clone()), Some(obj.clone()));
        // Another key's file under this name.
        assert_eq!(object_of(&key(2), good.clone()), None);
        // Truncated anywhere, including inside the header.
        for cut in [0, 7, HEADER_LEN - 1, HEADER_LEN, good.len() - 1] {
            assert_eq!(object_of(&key(1), good[..cut].to_vec()), None, "{cut}");
        }
        // Trailing garbage.
        let mut long = good.clone();
        long.push(0);
        assert_eq!(object_of(&key(1), long), None);
        // Any flipped bit.
        for i in 0..good.len() {
            let mut bad = good.clone();
            bad[i] ^= 0x10;
            assert_eq!(object_of(&key(1), bad), None, "byte {i}");
        }
    }

    #[test]
    fn dependencies_round_trip_inside_the_checksum() {
        let deps = vec![
            Dependency {
                path: PathBuf::from("/usr/include/stdint.h"),
                sha256: [7; 32],
            },
            Dependency {
                path: PathBuf::from("rel dir/k.h"),
                sha256: [9; 32],
            },
        ];
        let obj = b"object".to_vec();
        let tail = encode_dependencies(&deps);
        let mut file = encode_header(&key(3), &obj, &tail).to_vec();
        file.extend_from_slice(&obj);
        file.extend_from_slice(&tail);
        assert_eq!(decode_entry(&key(3), file.clone()), Some((obj, deps)));
        // The list is covered by the checksum, and must parse to its end.
        let last = file.len() - 1;
        file[last] ^= 1;
        assert_eq!(decode_entry(&key(3), file), None);
        assert_eq!(decode_dependencies(&[1, 0, 0]), None);
        assert_eq!(decode_dependencies(&[0xff, 0xff, 0, 0]), None);
    }

    #[test]
    fn memory_map_evicts_least_recently_used() {
        let mut m = MemoryMap::default();
        let obj = |n: usize| Arc::from(vec![0u8; n]);
        let none = || Arc::from(Vec::new());
        m.insert(key(1), obj(40), none(), 100);
        m.insert(key(2), obj(40), none(), 100);
        assert!(m.get(&key(1)).is_some()); // 2 is now the oldest
        m.insert(key(3), obj(40), none(), 100);
        assert!(m.get(&key(2)).is_none());
        assert!(m.get(&key(1)).is_some() && m.get(&key(3)).is_some());
        assert_eq!(m.bytes, 80);
        // Too big to keep at all.
        m.insert(key(4), obj(101), none(), 100);
        assert!(m.get(&key(4)).is_none());
        assert_eq!(m.bytes, 80);
        // Replacing an entry does not count it twice.
        m.insert(key(1), obj(10), none(), 100);
        assert_eq!(m.bytes, 50);
    }

    #[test]
    fn names() {
        assert!(is_entry_name(&format!("{}.obj", key(0xab).hex())));
        assert!(!is_entry_name("runner-x86_64-7695560413c5a923"));
        assert!(!is_entry_name("abc.obj"));
        assert!(is_temp_name(".tmp-1-2-0123456789abcdef.obj"));
        assert!(is_temp_name(".tmp-0123456789abcdef"));
        assert_eq!(CacheStatus::Hit.to_string(), "hit");
        assert_eq!(CacheStatus::Miss.name(), "miss");
    }
}
