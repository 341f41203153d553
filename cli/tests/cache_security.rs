//! Issue 12: nobody but you can make `elfjit run --cache` execute their code. A planted,
//! self-consistent compile-cache entry (valid header, key and checksum; an object that
//! returns 666) is refused when the directory or the entry is not yours alone, is a
//! symlink, a FIFO, a device or absurdly large; the refusal is one line on stderr, and the
//! run recompiles and returns the real answer. Runs the real binary.

mod support;

use elfjit::cache::{Cache, CacheKey};
use elfjit::clang::{CompileOptions, Compiler, Lang};
use elfjit::flags::HostInfo;
use elfjit::Arch;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};
use support::*;

const VICTIM: &str = "int add(int a, int b) { return a + b; }\n";
const FORGED: &str = "int add(int a, int b) { (void)a; (void)b; return 666; }\n";

fn c_opts() -> CompileOptions {
    CompileOptions::new(Lang::C, Arch::host().expect("a supported host"))
}

/// A victim: the kernel file, and the cache directory `elfjit run --cache` will use
/// (`ELFJIT_CACHE_DIR`, objects in `objects/`).
struct Victim {
    scratch: Scratch,
    source: PathBuf,
    root: PathBuf,
}

impl Victim {
    fn new(tag: &str) -> Victim {
        let scratch = Scratch::new(tag);
        let source = scratch.write("add.c", VICTIM);
        let root = scratch.join("cache");
        std::fs::create_dir_all(root.join("objects")).unwrap();
        Victim {
            scratch,
            source,
            root,
        }
    }

    fn objects(&self) -> PathBuf {
        self.root.join("objects")
    }

    /// `elfjit run add.c --ret i32 --arg i32:40 --arg i32:2 --cache --json`.
    fn run(&self) -> std::process::Output {
        run(bin()
            .arg("run")
            .arg(&self.source)
            .args(["--ret", "i32", "--arg", "i32:40", "--arg", "i32:2"])
            .args(["--cache", "--json"])
            .env("ELFJIT_COMPILER", "spawn")
            .env("ELFJIT_CACHE_DIR", &self.root))
    }

    /// Runs, and checks the real kernel ran (42, never the forged 666).
    fn run_checks_answer(&self) -> (serde_json::Value, String) {
        let o = self.run();
        let v = json(&o);
        assert_eq!(v["return"], 42, "a forged entry was executed: {v}");
        (v, stderr(&o))
    }
}

/// A self-consistent entry for the victim's key whose object returns 666: the file name
/// and bytes, made with elfjit's own cache writer.
fn forged_entry() -> (String, Vec<u8>) {
    let compiler = Compiler::find().expect("clang");
    let forge = Scratch::new("forge");
    let cache = Cache::on_disk(forge.path());
    let key = cache
        .key(&compiler, VICTIM.as_bytes(), &c_opts(), HostInfo::current())
        .unwrap();
    let object = compiler.compile(FORGED.as_bytes(), &c_opts()).unwrap();
    cache.insert(key, &object);
    let path = cache.entry_path(&key).unwrap();
    let bytes = std::fs::read(&path).expect("the forger's entry was written");
    let name = path.file_name().unwrap().to_string_lossy().into_owned();
    (name, bytes)
}

/// Plants the forged entry in `dir`; returns its path.
fn plant(dir: &Path) -> PathBuf {
    let (name, bytes) = forged_entry();
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    chmod(&p, 0o600);
    p
}

/// The forged entry is recognised as an entry when it is planted properly: the tests
/// below would prove nothing if it were simply malformed. (Owned by us, mode 0600, it is
/// indistinguishable from one we wrote, and is used: elfjit trusts its own user.)
#[test]
fn a_planted_entry_is_well_formed() {
    let v = Victim::new("wellformed");
    plant(&v.objects());
    let o = v.run();
    let j = json(&o);
    assert_eq!(j["cache"], "hit");
    assert_eq!(j["return"], 666);
}

#[test]
fn entry_owned_by_another_user_is_not_executed() {
    let v = Victim::new("owner");
    let p = plant(&v.objects());
    chown_to_other(&p);
    let (j, err) = v.run_checks_answer();
    assert_eq!(j["cache"], "miss");
    assert_eq!(lines_with(&err, "not owned by"), 1, "stderr: {err}");
}

#[test]
fn group_or_world_writable_entry_is_not_executed() {
    for mode in [0o620, 0o602, 0o666] {
        let v = Victim::new("mode");
        let p = plant(&v.objects());
        chmod(&p, mode);
        let (j, err) = v.run_checks_answer();
        assert_eq!(j["cache"], "miss", "mode {mode:o}");
        assert_eq!(lines_with(&err, "writable by"), 1, "mode {mode:o}: {err}");
    }
}

#[test]
fn directory_owned_by_another_user_is_not_used() {
    let v = Victim::new("dirowner");
    plant(&v.objects());
    chown_to_other(&v.objects());
    let (j, err) = v.run_checks_answer();
    assert_eq!(j["cache"], "miss");
    assert_eq!(lines_with(&err, "not owned by"), 1, "stderr: {err}");
    // And nothing of ours is written into it.
    let names: Vec<_> = std::fs::read_dir(v.objects()).unwrap().collect();
    assert_eq!(names.len(), 1, "{names:?}");
}

#[test]
fn group_or_world_writable_directory_is_not_used() {
    for mode in [0o770, 0o707, 0o777, 0o1777] {
        let v = Victim::new("dirmode");
        plant(&v.objects());
        chmod(&v.objects(), mode);
        let (j, err) = v.run_checks_answer();
        assert_eq!(j["cache"], "miss", "mode {mode:o}");
        assert_eq!(lines_with(&err, "writable by"), 1, "mode {mode:o}: {err}");
    }
}

#[test]
fn symlinked_entry_is_not_followed() {
    let v = Victim::new("symlink");
    let elsewhere = v.scratch.join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let target = plant(&elsewhere);
    let link = v.objects().join(target.file_name().unwrap());
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let before = std::fs::read(&target).unwrap();
    let (j, err) = v.run_checks_answer();
    assert_eq!(j["cache"], "miss");
    assert_eq!(lines_with(&err, "symbolic link"), 1, "stderr: {err}");
    // The recompiled entry replaced the link; the file it pointed to is untouched.
    assert_eq!(std::fs::read(&target).unwrap(), before);
    assert!(!std::fs::symlink_metadata(&link).unwrap().is_symlink());
}

#[test]
fn fifo_entry_does_not_hang() {
    let v = Victim::new("fifo");
    let (name, _) = forged_entry();
    let fifo = v.objects().join(name);
    let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: mkfifo only reads the NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let (o, killed) = run_with_watchdog(
        bin()
            .arg("run")
            .arg(&v.source)
            .args(["--ret", "i32", "--arg", "i32:40", "--arg", "i32:2"])
            .args(["--cache", "--json"])
            .env("ELFJIT_COMPILER", "spawn")
            .env("ELFJIT_CACHE_DIR", &v.root),
        Duration::from_secs(30),
    );
    assert!(!killed, "elfjit hung on a FIFO in the cache");
    let j = json(&o);
    assert_eq!(j["return"], 42);
    assert_eq!(
        lines_with(&stderr(&o), "not a regular file"),
        1,
        "{}",
        stderr(&o)
    );
}

#[test]
fn huge_sparse_entries_are_refused_without_allocating() {
    let v = Victim::new("sparse");
    // First run: the object and clang's version record are written.
    let (j, _) = v.run_checks_answer();
    assert_eq!(j["cache"], "miss");
    let entries: Vec<PathBuf> = std::fs::read_dir(v.objects())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(entries.len(), 2, "{entries:?}");
    // Both become 1 TiB sparse files: reading either by its size would abort.
    for e in &entries {
        std::fs::OpenOptions::new()
            .write(true)
            .open(e)
            .unwrap()
            .set_len(1 << 40)
            .unwrap();
    }
    let o = v.run();
    let j = json(&o);
    assert_eq!(j["return"], 42);
    assert_eq!(j["cache"], "miss");
    let err = stderr(&o);
    assert_eq!(lines_with(&err, "too large"), 1, "stderr: {err}");
}

/// Temporary names cannot be guessed: symlinks planted at every name the old scheme
/// (pid, counter, key prefix) would use do not redirect the write.
#[test]
fn temporary_files_are_not_written_through_planted_symlinks() {
    let dir = Scratch::new("tmpnames");
    let victim = dir.write("victim", "precious\n");
    let objects = dir.join("objects");
    std::fs::create_dir_all(&objects).unwrap();
    let key = CacheKey([0x5a; 32]);
    let prefix = &key.hex()[..16];
    for n in 0..512 {
        let name = format!(".tmp-{}-{n}-{prefix}.obj", std::process::id());
        std::os::unix::fs::symlink(&victim, objects.join(name)).unwrap();
    }
    let cache = Cache::on_disk(&objects);
    cache.insert(key, b"\x7fELF object bytes");
    assert_eq!(
        std::fs::read(&victim).unwrap(),
        b"precious\n",
        "written through a symlink"
    );
    let fresh = Cache::on_disk(&objects);
    assert_eq!(
        fresh.get(&key).as_deref(),
        Some(&b"\x7fELF object bytes"[..])
    );
}

/// Without HOME the cache is a per-user directory checked like any other, never a fixed
/// path under the shared temporary directory.
#[test]
fn no_home_means_no_shared_directory() {
    let v = Victim::new("nohome");
    let tmp = v.scratch.join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    // The shared directory the old fallback used, with a forged entry planted by someone
    // else.
    let shared = tmp.join("elfjit-cache").join("objects");
    std::fs::create_dir_all(&shared).unwrap();
    let planted = plant(&shared);
    chown_to_other(&planted);
    chown_to_other(&shared);
    chown_to_other(&tmp.join("elfjit-cache"));
    let uid = euid();
    let cli = |args: &[&str]| {
        run(bin()
            .args(args)
            .env_remove("HOME")
            .env_remove("XDG_CACHE_HOME")
            .env("TMPDIR", &tmp)
            // The object cache's directory is under test, not a compile server in it.
            .env("ELFJIT_COMPILER", "spawn"))
    };
    let o = cli(&["cache", "dir"]);
    let dir = stdout(&o);
    assert!(!dir.contains("elfjit-cache"), "{dir}");
    assert!(dir.contains(&format!("elfjit-{uid}")), "{dir}");
    let src = v.source.to_str().unwrap();
    let o = cli(&[
        "run", src, "--ret", "i32", "--arg", "i32:40", "--arg", "i32:2", "--cache", "--json",
    ]);
    let j = json(&o);
    assert_eq!(j["return"], 42);
    assert_eq!(j["cache"], "miss");
    let o = cli(&[
        "run", src, "--ret", "i32", "--arg", "i32:40", "--arg", "i32:2", "--cache", "--json",
    ]);
    assert_eq!(json(&o)["cache"], "hit", "the per-user directory works");
    // Someone else's directory at the per-user name: no disk cache, said once, still runs.
    let squatted = Victim::new("squat");
    let tmp2 = squatted.scratch.join("tmp");
    let squat = tmp2.join(format!("elfjit-{uid}"));
    std::fs::create_dir_all(squat.join("objects")).unwrap();
    plant(&squat.join("objects"));
    chown_to_other(&squat);
    let o = run(bin()
        .arg("run")
        .arg(&squatted.source)
        .args(["--ret", "i32", "--arg", "i32:40", "--arg", "i32:2"])
        .args(["--cache", "--json"])
        .env_remove("HOME")
        .env_remove("XDG_CACHE_HOME")
        .env("TMPDIR", &tmp2)
        .env("ELFJIT_COMPILER", "spawn"));
    let j = json(&o);
    assert_eq!(j["return"], 42);
    assert_eq!(j["cache"], "miss");
    let err = stderr(&o);
    assert_eq!(lines_with(&err, "not owned by"), 1, "stderr: {err}");
}

/// A cache elfjit cannot write (here: its directory belongs to root and elfjit runs as
/// another user) is said once per process, and the run still succeeds.
#[test]
fn unwritable_cache_is_said_once() {
    let v = Victim::new("unwritable");
    // World-traversable, so the unprivileged user can reach the kernel and the binary.
    chmod(v.scratch.path(), 0o755);
    chmod(&v.source, 0o644);
    let mine = v.scratch.join("theirs");
    std::fs::create_dir_all(mine.join("objects")).unwrap();
    chown_to_other(&mine);
    chown_to_other(&mine.join("objects"));
    chmod(&mine.join("objects"), 0o500);
    let o = run(Command::new("setpriv")
        .args([
            "--reuid",
            &OTHER_UID.to_string(),
            "--regid",
            &OTHER_UID.to_string(),
            "--clear-groups",
            "--",
        ])
        .arg(env!("CARGO_BIN_EXE_elfjit"))
        .arg("run")
        .arg(&v.source)
        .args(["--ret", "i32", "--arg", "i32:40", "--arg", "i32:2"])
        .args(["--cache", "--json"])
        .env("ELFJIT_COMPILER", "spawn")
        .env("ELFJIT_CACHE_DIR", &mine)
        .stdin(std::process::Stdio::null()));
    let j = json(&o);
    assert_eq!(j["return"], 42);
    let err = stderr(&o);
    // Two writes failed (clang's version record and the object): one line.
    assert_eq!(lines_with(&err, "cannot write"), 1, "stderr: {err}");
}

use std::process::Command;

/// Stale temporary files (a writer killed mid-write) count against the disk limit and
/// are removed; fresh ones (a writer at work) are kept.
#[test]
fn stale_temporary_files_are_counted_and_removed() {
    let dir = Scratch::new("stale");
    let stale = dir.join(".tmp-0123456789abcdef.obj");
    let fresh = dir.join(".tmp-fedcba9876543210.obj");
    std::fs::write(&stale, vec![0u8; 6_000]).unwrap();
    std::fs::write(&fresh, vec![0u8; 100]).unwrap();
    let old = SystemTime::now() - Duration::from_secs(2 * 3600);
    std::fs::File::options()
        .write(true)
        .open(&stale)
        .unwrap()
        .set_modified(old)
        .unwrap();
    let cache = Cache::on_disk(dir.path())
        .with_disk_limit(10_000)
        .with_memory_limit(0);
    for n in 0..3u8 {
        cache.insert(CacheKey([n; 32]), &vec![n; 1_916]);
    }
    assert!(!stale.exists(), "a stale temporary file survived eviction");
    assert!(fresh.exists(), "a fresh temporary file was removed");
    let total: u64 = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum();
    assert!(total <= 10_000, "{total} bytes");
    for n in 0..3u8 {
        assert_eq!(cache.get(&CacheKey([n; 32])), Some(vec![n; 1_916]));
    }
}

/// Editing an `#include`d header changes the result: the key covers what clang read.
#[test]
fn editing_an_included_header_is_a_miss() {
    let v = Victim::new("include");
    let header = v.scratch.write("k.h", "#define K 1\n");
    let source = v.scratch.write(
        "inc.c",
        &format!(
            "#include \"{}\"\nint k(void) {{ return K; }}\n",
            header.display()
        ),
    );
    // A relative include, resolved from elfjit's working directory.
    let relative = v.scratch.write(
        "rel.c",
        "#include \"k.h\"\nint k(void) { return K * 10; }\n",
    );
    let go = |src: &Path| {
        let o = run(bin()
            .arg("run")
            .arg(src)
            .args(["--ret", "i32", "--cache", "--json"])
            .env("ELFJIT_COMPILER", "spawn")
            .env("ELFJIT_CACHE_DIR", &v.root)
            .current_dir(v.scratch.path()));
        let j = json(&o);
        (j["return"].as_i64().unwrap(), j["cache"].clone())
    };
    assert_eq!(go(&source), (1, "miss".into()));
    assert_eq!(go(&source), (1, "hit".into()));
    assert_eq!(go(&relative), (10, "miss".into()));
    assert_eq!(go(&relative), (10, "hit".into()));
    // Same length, so only the contents change.
    std::fs::write(&header, "#define K 2\n").unwrap();
    assert_eq!(go(&source), (2, "miss".into()));
    assert_eq!(go(&source), (2, "hit".into()));
    assert_eq!(go(&relative), (20, "miss".into()));
    let start = Instant::now();
    assert_eq!(go(&relative), (20, "hit".into()));
    assert!(start.elapsed() < Duration::from_secs(30));
}

/// Issue 26: without `HOME`, another user's symbolic link planted at `$TMPDIR/elfjit-<uid>`
/// (pointing at a directory of ours) is refused, not followed: the compile cache writes
/// nothing into its target, and `elfjit cache clear` removes nothing there (it refuses,
/// saying why).
#[test]
fn a_symlink_planted_at_the_per_uid_directory_is_not_followed() {
    let planted = PlantedRoot::new("planted-root");
    let source = planted.scratch.write("add.c", VICTIM);
    let run_args: Vec<&std::ffi::OsStr> = [
        source.as_os_str(),
        "--ret".as_ref(),
        "i32".as_ref(),
        "--arg".as_ref(),
        "i32:40".as_ref(),
        "--arg".as_ref(),
        "i32:2".as_ref(),
        "--cache".as_ref(),
        "--json".as_ref(),
    ]
    .to_vec();
    let mut args = vec!["run".as_ref()];
    args.extend(run_args);
    for _ in 0..2 {
        let o = planted.elfjit(&args);
        let j = json(&o);
        assert_eq!(j["return"], 42);
        planted.assert_victim_untouched();
        assert_eq!(j["cache"], "miss", "a disk cache was used through the link");
        let err = stderr(&o);
        // One note from the compile cache; the compile server, which would be built in
        // the same directory, refuses it too and says so once.
        assert_eq!(
            lines_with(&err, "is a symbolic link"),
            lines_with(&err, "elfjit: note:")
        );
        assert_eq!(
            lines_with(&err, "not using the compile cache"),
            1,
            "stderr: {err}"
        );
        assert!(
            lines_with(&err, "compiling with a spawned") <= 1,
            "stderr: {err}"
        );
    }
    let o = planted.elfjit(&["cache".as_ref(), "clear".as_ref()]);
    planted.assert_victim_untouched();
    assert!(!o.status.success(), "cache clear went through the link");
    let err = stderr(&o);
    assert_eq!(lines_with(&err, "is a symbolic link"), 1, "stderr: {err}");
}
