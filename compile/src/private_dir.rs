//! Directories only this user can write, and the files in them: the on-disk compile
//! cache and the emulated runner's cache.
//!
//! Whoever can write a directory elfjit caches into can make elfjit load their code, so a
//! [`PrivateDir`] is used only when it is owned by the effective uid and not writable by
//! its group or others (new ones are created `0700`); the check is explicit, because root
//! (as CI runs) bypasses permission bits. It is reached component by component with
//! `openat`, never through a symbolic link at its own name or at a component elfjit
//! created ([`PrivateDir::open`]). Once opened, the directory is held by its file
//! descriptor and every file operation is relative to it (`openat`, `renameat`,
//! `unlinkat`: cleanup and `elfjit cache clear` too), so renaming a directory on the path
//! afterwards changes nothing.
//!
//! A file in it is used only if it is a regular file (not a symbolic link, FIFO, device or
//! directory: it is `lstat`ed first, then opened with `O_NOFOLLOW | O_NONBLOCK`, so
//! nothing else is ever opened), owned by the effective uid, not writable by group or
//! others, and no larger than the caller's limit. Files are written under an
//! unpredictable name (`.tmp-` and 16 random hex digits) created exclusively with
//! `O_CREAT | O_EXCL | O_NOFOLLOW` and mode `0600` (or the caller's), then renamed into
//! place, so readers see a whole old file or a whole new one and a planted symlink is
//! never written through.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, CWD};

/// Prefix of every temporary name elfjit creates in a private directory.
pub const TEMP_PREFIX: &str = ".tmp-";

/// Why a directory or file is not used.
#[derive(Debug)]
pub enum Refused {
    /// It does not exist (yet).
    Missing,
    /// It exists but must not be trusted. `reason` is a short stable key (one note per
    /// reason per process); `why` says what is wrong with it, naming it.
    Unsafe {
        /// A short stable key for the kind of problem.
        reason: &'static str,
        /// The problem, in a sentence naming the file or directory.
        why: String,
    },
    /// The system refused (permissions, a full or read-only file system, ...).
    Io(std::io::Error),
}

impl Refused {
    fn io(e: impl Into<std::io::Error>) -> Refused {
        let e = e.into();
        if e.kind() == std::io::ErrorKind::NotFound {
            Refused::Missing
        } else {
            Refused::Io(e)
        }
    }
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refused::Missing => f.write_str("it does not exist"),
            Refused::Unsafe { why, .. } => f.write_str(why),
            Refused::Io(e) => write!(f, "{e}"),
        }
    }
}

/// The effective uid of this process.
pub fn euid() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// A checked file opened for reading.
#[derive(Debug)]
pub struct CheckedFile {
    /// The open file (the very one that was checked).
    pub file: File,
    /// Its length.
    pub len: u64,
    /// Its modification time.
    pub modified: SystemTime,
}

/// What [`PrivateDir::list`] reports for one name.
#[derive(Clone, Debug)]
pub struct Listing {
    /// The name in the directory.
    pub name: OsString,
    /// Size in bytes (of a directory: its own entry, not its contents).
    pub len: u64,
    /// Modification time.
    pub modified: SystemTime,
    /// Whether it is a directory (not following links).
    pub is_dir: bool,
}

/// A directory owned by this user and writable by nobody else, held open.
#[derive(Debug)]
pub struct PrivateDir {
    path: PathBuf,
    fd: OwnedFd,
}

fn kind_name(t: FileType) -> &'static str {
    match t {
        FileType::Fifo => "a FIFO",
        FileType::CharacterDevice => "a character device",
        FileType::BlockDevice => "a block device",
        FileType::Socket => "a socket",
        FileType::Directory => "a directory",
        FileType::Symlink => "a symbolic link",
        _ => "not a regular file",
    }
}

/// The checks every directory and file share: owned by us, writable by nobody else.
fn check_owner_and_mode(
    what: &str,
    path: &Path,
    uid: u32,
    mode: impl Into<u32>,
) -> Result<(), Refused> {
    // `mode_t` is 32 bits on Linux and FreeBSD, 16 on macOS.
    let mode: u32 = mode.into();
    let me = euid();
    if uid != me {
        return Err(Refused::Unsafe {
            reason: "not-owned",
            why: format!(
                "{what} {} is not owned by you (owner uid {uid}, you are uid {me})",
                path.display()
            ),
        });
    }
    if mode & 0o022 != 0 {
        return Err(Refused::Unsafe {
            reason: "writable-by-others",
            why: format!(
                "{what} {} is writable by its group or by others (mode {:04o})",
                path.display(),
                mode & 0o7777
            ),
        });
    }
    Ok(())
}

fn mtime(meta: &std::fs::Metadata) -> SystemTime {
    meta.modified().unwrap_or(SystemTime::UNIX_EPOCH)
}

fn stat_mtime(st: &rustix::fs::Stat) -> SystemTime {
    let secs = u64::try_from(st.st_mtime).unwrap_or(0);
    SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
}

/// 16 unpredictable hex digits (64 bits from the kernel's random source).
pub fn random_hex() -> std::io::Result<String> {
    let mut bytes = [0u8; 8];
    let mut filled = 0;
    while filled < bytes.len() {
        let part = bytes.get_mut(filled..).unwrap_or_default();
        filled += crate::platform::fill_random(part)?;
    }
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

impl PrivateDir {
    /// Opens the directory `path` (creating it and any missing parent with mode `0700`
    /// when `create` is set), refusing it unless it is a real directory (not a symbolic
    /// link to one) owned by the effective uid and not writable by group or others.
    ///
    /// The path is walked one component at a time, each opened from its parent's
    /// descriptor (`openat`). The directory itself, and every component this call
    /// creates, is opened with `O_NOFOLLOW`: a link planted there (say at
    /// `$TMPDIR/elfjit-<uid>`, pointing at a directory of yours) is refused, never
    /// followed. Components above it that already exist are followed like any path:
    /// they are your own layout (`~/.cache` may be a link to another disk).
    pub fn open(path: &Path, create: bool) -> Result<PrivateDir, Refused> {
        let fd = open_components(path, create)?;
        PrivateDir::checked(path.to_path_buf(), fd)
    }

    fn checked(path: PathBuf, fd: OwnedFd) -> Result<PrivateDir, Refused> {
        let st = rustix::fs::fstat(&fd).map_err(Refused::io)?;
        if FileType::from_raw_mode(st.st_mode) != FileType::Directory {
            return Err(Refused::Unsafe {
                reason: "not-a-directory",
                why: format!("{} is not a directory", path.display()),
            });
        }
        check_owner_and_mode("the directory", &path, st.st_uid, st.st_mode)?;
        Ok(PrivateDir { path, fd })
    }

    /// The subdirectory `name` (created `0700` when `create` is set), checked the same
    /// way, without following a symbolic link.
    pub fn subdir(&self, name: &str, create: bool) -> Result<PrivateDir, Refused> {
        if create {
            match rustix::fs::mkdirat(&self.fd, name, Mode::from_raw_mode(0o700)) {
                Ok(()) => {}
                Err(rustix::io::Errno::EXIST) => {}
                Err(e) => return Err(Refused::io(e)),
            }
        }
        let path = self.path.join(name);
        let fd = open_dir_at(&self.fd, OsStr::new(name), &path, Follow::Never)?;
        PrivateDir::checked(path, fd)
    }

    /// A fresh, empty private subdirectory with an unpredictable `.tmp-TAG-` name; the
    /// caller removes it ([`PrivateDir::remove_tree`]).
    pub fn temp_subdir(&self, tag: &str) -> std::io::Result<(String, PrivateDir)> {
        loop {
            let name = format!("{TEMP_PREFIX}{tag}-{}", random_hex()?);
            match rustix::fs::mkdirat(&self.fd, name.as_str(), Mode::from_raw_mode(0o700)) {
                Ok(()) => {}
                Err(rustix::io::Errno::EXIST) => continue,
                Err(e) => return Err(e.into()),
            }
            return match self.subdir(&name, false) {
                Ok(d) => Ok((name, d)),
                Err(Refused::Io(e)) => Err(e),
                Err(other) => Err(std::io::Error::other(other.to_string())),
            };
        }
    }

    /// The directory's path, as it was opened (for messages).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A path that reaches this very directory through this process's descriptor, for
    /// a child process (a compiler's working directory, qemu's program): renaming
    /// anything on [`PrivateDir::path`] cannot redirect it.
    pub fn fd_path(&self) -> PathBuf {
        PathBuf::from(format!(
            "/proc/{}/fd/{}",
            std::process::id(),
            self.fd.as_raw_fd()
        ))
    }

    /// Opens the file `name` for reading if it passes every check (see the module
    /// documentation) and is at most `limit` bytes long.
    pub fn open_file(&self, name: &str, limit: u64) -> Result<CheckedFile, Refused> {
        let path = self.path.join(name);
        // lstat first: a FIFO or device is refused without being opened at all.
        let st =
            rustix::fs::statat(&self.fd, name, AtFlags::SYMLINK_NOFOLLOW).map_err(Refused::io)?;
        check_file_type(&path, FileType::from_raw_mode(st.st_mode))?;
        let fd = rustix::fs::openat(
            &self.fd,
            name,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| {
            if e == rustix::io::Errno::LOOP {
                Refused::Unsafe {
                    reason: "symlink",
                    why: format!("{} is a symbolic link", path.display()),
                }
            } else {
                Refused::io(e)
            }
        })?;
        let file = File::from(fd);
        // The checks that count are on what was opened.
        let meta = file.metadata().map_err(Refused::Io)?;
        check_file_type(
            &path,
            FileType::from_raw_mode(meta.mode() as rustix::fs::RawMode),
        )?;
        check_owner_and_mode("the file", &path, meta.uid(), meta.mode())?;
        if meta.len() > limit {
            return Err(Refused::Unsafe {
                reason: "too-large",
                why: format!(
                    "{} is too large ({} bytes; at most {limit} are read)",
                    path.display(),
                    meta.len()
                ),
            });
        }
        Ok(CheckedFile {
            modified: mtime(&meta),
            len: meta.len(),
            file,
        })
    }

    /// Writes `parts` (concatenated) to `name` atomically: into an exclusively created
    /// temporary file of `mode`, then renamed over `name`. Returns the bytes written.
    pub fn write_file(&self, name: &str, parts: &[&[u8]], mode: u32) -> std::io::Result<u64> {
        let (temp, mut file) = self.create_temp(mode)?;
        let written = (|| {
            let mut total = 0u64;
            for p in parts {
                file.write_all(p)?;
                total += p.len() as u64;
            }
            drop(file);
            rustix::fs::renameat(&self.fd, temp.as_str(), &self.fd, name)?;
            Ok(total)
        })();
        if written.is_err() {
            let _ = rustix::fs::unlinkat(&self.fd, temp.as_str(), AtFlags::empty());
        }
        written
    }

    /// An exclusively created, empty temporary file of `mode`: its name and the file.
    fn create_temp(&self, mode: u32) -> std::io::Result<(String, File)> {
        loop {
            let name = format!("{TEMP_PREFIX}{}", random_hex()?);
            let fd = match rustix::fs::openat(
                &self.fd,
                name.as_str(),
                OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::from_raw_mode(mode as rustix::fs::RawMode),
            ) {
                Ok(fd) => fd,
                Err(rustix::io::Errno::EXIST) => continue,
                Err(e) => return Err(e.into()),
            };
            // The umask may have taken bits away; the mode is part of the contract.
            rustix::fs::fchmod(&fd, Mode::from_raw_mode(mode as rustix::fs::RawMode))?;
            return Ok((name, File::from(fd)));
        }
    }

    /// The lock file `name` (created empty with mode `0600` if missing, never through a
    /// symbolic link), open for [`rustix::fs::flock`]: a build that two processes could
    /// start at once takes it first.
    pub fn open_lock(&self, name: &str) -> std::io::Result<File> {
        let fd = rustix::fs::openat(
            &self.fd,
            name,
            OFlags::RDWR | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )?;
        Ok(File::from(fd))
    }

    /// Renames `from` in this directory to `to` in `dest` (replacing it).
    pub fn rename_to(&self, from: &str, dest: &PrivateDir, to: &str) -> std::io::Result<()> {
        Ok(rustix::fs::renameat(&self.fd, from, &dest.fd, to)?)
    }

    /// Removes the file `name` (not following a link: a link is removed, not its target).
    pub fn remove(&self, name: &OsStr) -> std::io::Result<()> {
        Ok(rustix::fs::unlinkat(&self.fd, name, AtFlags::empty())?)
    }

    /// Removes `name`: a file, or a directory with the files in it (elfjit's work
    /// directories hold no subdirectories; one that does is left in place).
    pub fn remove_tree(&self, name: &OsStr) -> std::io::Result<()> {
        let st = rustix::fs::statat(&self.fd, name, AtFlags::SYMLINK_NOFOLLOW)?;
        if FileType::from_raw_mode(st.st_mode) != FileType::Directory {
            return self.remove(name);
        }
        let inner = rustix::fs::openat(
            &self.fd,
            name,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        for entry in rustix::fs::Dir::read_from(&inner)? {
            let entry = entry?;
            let n = entry.file_name().to_bytes();
            if n == b"." || n == b".." {
                continue;
            }
            let flags = if entry.file_type() == FileType::Directory {
                AtFlags::REMOVEDIR
            } else {
                AtFlags::empty()
            };
            let _ = rustix::fs::unlinkat(&inner, entry.file_name(), flags);
        }
        Ok(rustix::fs::unlinkat(&self.fd, name, AtFlags::REMOVEDIR)?)
    }

    /// Every name in the directory with its size, time and kind (`lstat`: links are
    /// not followed). Names that vanish while listing are skipped.
    pub fn list(&self) -> std::io::Result<Vec<Listing>> {
        let mut out = Vec::new();
        for entry in rustix::fs::Dir::read_from(&self.fd)? {
            let entry = entry?;
            let name = entry.file_name();
            if name.to_bytes() == b"." || name.to_bytes() == b".." {
                continue;
            }
            let Ok(st) = rustix::fs::statat(&self.fd, name, AtFlags::SYMLINK_NOFOLLOW) else {
                continue;
            };
            out.push(Listing {
                name: OsStr::from_bytes(name.to_bytes()).to_os_string(),
                len: u64::try_from(st.st_size).unwrap_or(0),
                modified: stat_mtime(&st),
                is_dir: FileType::from_raw_mode(st.st_mode) == FileType::Directory,
            });
        }
        Ok(out)
    }

    /// Sets `file`'s modification time to now (the LRU clock); a failure only costs
    /// eviction accuracy.
    pub fn touch(file: &File) {
        let _ = file.set_modified(SystemTime::now());
    }
}

/// Whether [`open_dir_at`] may follow a symbolic link at the name.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Follow {
    /// A component above the private directory that existed: the user's own layout.
    Existing,
    /// The private directory itself, or a component elfjit created.
    Never,
}

/// Opens the directory `name` in `parent` (`path` is its full path, for messages).
fn open_dir_at(
    parent: &OwnedFd,
    name: &OsStr,
    path: &Path,
    follow: Follow,
) -> Result<OwnedFd, Refused> {
    let mut flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    if follow == Follow::Never {
        flags |= OFlags::NOFOLLOW;
    }
    rustix::fs::openat(parent, name, flags, Mode::empty()).map_err(|e| match e {
        rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR => {
            // Say which: a link (refused without being followed) or something else.
            let is_link = rustix::fs::statat(parent, name, AtFlags::SYMLINK_NOFOLLOW)
                .is_ok_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::Symlink);
            if is_link && follow == Follow::Never {
                Refused::Unsafe {
                    reason: "symlink",
                    why: format!(
                        "{} is a symbolic link (a private directory is never reached \
                         through one: whoever made it chooses where it leads)",
                        path.display()
                    ),
                }
            } else {
                Refused::Unsafe {
                    reason: "not-a-directory",
                    why: format!("{} is not a directory", path.display()),
                }
            }
        }
        e => Refused::io(e),
    })
}

/// The descriptor of the directory `path`, walked component by component as
/// [`PrivateDir::open`] says (missing components created `0700` when `create` is set).
fn open_components(path: &Path, create: bool) -> Result<OwnedFd, Refused> {
    use std::path::Component;
    let start = if path.has_root() { "/" } else { "." };
    let mut dir = rustix::fs::openat(
        CWD,
        start,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(Refused::io)?;
    let names: Vec<&OsStr> = path
        .components()
        .filter_map(|c| match c {
            Component::Normal(name) => Some(name),
            Component::ParentDir => Some(OsStr::new("..")),
            Component::Prefix(_) | Component::RootDir | Component::CurDir => None,
        })
        .collect();
    let mut walked = PathBuf::from(if path.has_root() { "/" } else { "" });
    for (index, &name) in names.iter().enumerate() {
        walked.push(name);
        let created = create
            && match rustix::fs::mkdirat(&dir, name, Mode::from_raw_mode(0o700)) {
                Ok(()) => true,
                Err(rustix::io::Errno::EXIST) => false,
                Err(e) => return Err(Refused::io(e)),
            };
        let last = index + 1 == names.len();
        let follow = if last || created {
            Follow::Never
        } else {
            Follow::Existing
        };
        dir = open_dir_at(&dir, name, &walked, follow)?;
    }
    Ok(dir)
}

fn check_file_type(path: &Path, t: FileType) -> Result<(), Refused> {
    match t {
        FileType::RegularFile => Ok(()),
        FileType::Symlink => Err(Refused::Unsafe {
            reason: "symlink",
            why: format!("{} is a symbolic link", path.display()),
        }),
        other => Err(Refused::Unsafe {
            reason: "not-a-regular-file",
            why: format!(
                "{} is not a regular file ({})",
                path.display(),
                kind_name(other)
            ),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn scratch(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "elfjit-private-dir-{}-{tag}-{}",
            std::process::id(),
            random_hex().unwrap()
        ));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn created_private_written_atomically_and_listed() {
        let path = scratch("basic").join("a").join("b");
        let dir = PrivateDir::open(&path, true).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        assert_eq!(dir.write_file("x", &[b"ab", b"cd"], 0o600).unwrap(), 4);
        let f = dir.open_file("x", 4).unwrap();
        assert_eq!(f.len, 4);
        let m = std::fs::metadata(path.join("x")).unwrap();
        assert_eq!(m.permissions().mode() & 0o777, 0o600);
        assert!(matches!(
            dir.open_file("x", 3),
            Err(Refused::Unsafe {
                reason: "too-large",
                ..
            })
        ));
        assert!(matches!(dir.open_file("nope", 9), Err(Refused::Missing)));
        let names: Vec<_> = dir.list().unwrap().into_iter().map(|l| l.name).collect();
        assert_eq!(names, [OsString::from("x")], "no temporary file is left");
        let (tmp, sub) = dir.temp_subdir("build").unwrap();
        assert!(tmp.starts_with(".tmp-build-") && tmp.len() == ".tmp-build-".len() + 16);
        sub.write_file("f", &[b"1"], 0o600).unwrap();
        dir.remove_tree(OsStr::new(&tmp)).unwrap();
        assert_eq!(dir.list().unwrap().len(), 1);
        assert!(dir.fd_path().join("x").exists());
        std::fs::remove_dir_all(path.parent().unwrap().parent().unwrap()).unwrap();
    }

    /// A link planted at the private directory's name (another user's, pointing at a
    /// directory of ours) is refused, never followed: nothing is created, listed or
    /// removed through it. Links above it (the user's own layout) are followed.
    #[test]
    fn a_symlink_at_the_directory_or_a_created_component_is_not_followed() {
        let base = scratch("links");
        let victim = base.join("victim");
        std::fs::create_dir_all(victim.join(".tmp-d")).unwrap();
        std::fs::write(victim.join("x.tmp-1"), b"keep").unwrap();
        let planted = base.join("elfjit-0");
        std::os::unix::fs::symlink(&victim, &planted).unwrap();
        for create in [false, true] {
            match PrivateDir::open(&planted, create) {
                Err(Refused::Unsafe { reason, why }) => {
                    assert_eq!(reason, "symlink", "{why}");
                    assert!(why.contains("elfjit-0 is a symbolic link"), "{why}");
                }
                other => panic!("create={create}: followed the planted link: {other:?}"),
            }
        }
        let mut names: Vec<_> = std::fs::read_dir(&victim)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        names.sort();
        assert_eq!(names, [OsString::from(".tmp-d"), OsString::from("x.tmp-1")]);

        // An existing link above the private directory is the user's layout: followed.
        let real = base.join("real-cache");
        std::fs::create_dir_all(&real).unwrap();
        let layout = base.join("cache-link");
        std::os::unix::fs::symlink(&real, &layout).unwrap();
        let dir = PrivateDir::open(&layout.join("elfjit").join("objects"), true).unwrap();
        dir.write_file("f", &[b"1"], 0o600).unwrap();
        assert!(real.join("elfjit/objects/f").exists());
        let mode = std::fs::metadata(real.join("elfjit"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o700, "a created component is 0700");
        // A file where a directory is expected is not a directory.
        std::fs::write(base.join("plain"), b"").unwrap();
        assert!(matches!(
            PrivateDir::open(&base.join("plain"), false),
            Err(Refused::Unsafe {
                reason: "not-a-directory",
                ..
            })
        ));
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn other_users_modes_links_and_special_files_are_refused() {
        let path = scratch("refused");
        let dir = PrivateDir::open(&path, true).unwrap();
        dir.write_file("f", &[b"data"], 0o600).unwrap();
        std::os::unix::fs::symlink(path.join("f"), path.join("link")).unwrap();
        assert!(matches!(
            dir.open_file("link", 100),
            Err(Refused::Unsafe {
                reason: "symlink",
                ..
            })
        ));
        std::fs::create_dir(path.join("d")).unwrap();
        assert!(matches!(
            dir.open_file("d", 100),
            Err(Refused::Unsafe {
                reason: "not-a-regular-file",
                ..
            })
        ));
        std::fs::set_permissions(path.join("f"), std::fs::Permissions::from_mode(0o660)).unwrap();
        let e = dir.open_file("f", 100).unwrap_err();
        assert!(e.to_string().contains("writable by its group"), "{e}");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = PrivateDir::open(&path, false).unwrap_err();
        assert!(e.to_string().contains("mode 0777"), "{e}");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o700)).unwrap();
        // A temporary name is never written through a planted link.
        let victim = path.join("victim");
        std::fs::write(&victim, b"keep").unwrap();
        dir.write_file("g", &[b"new"], 0o600).unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
        assert!(matches!(
            PrivateDir::open(&path.join("f"), false),
            Err(Refused::Unsafe { .. }) | Err(Refused::Io(_))
        ));
        std::fs::remove_dir_all(&path).unwrap();
    }
}
