//! Files in a shared directory (`/tmp`), made so that another user cannot swap in a link or
//! a file of their own: created with `O_CREAT|O_EXCL|O_NOFOLLOW` and mode 0600, or, when
//! the name exists, opened with `O_NOFOLLOW|O_NONBLOCK` (a FIFO or device planted there is
//! refused at once instead of blocking the open) and kept only if what was opened is a
//! regular file with one link, owned by this user, that neither group nor others can write.

use std::fs::{DirBuilder, File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

fn effective_uid() -> u32 {
    // SAFETY: geteuid takes no arguments, cannot fail and touches no memory of ours.
    unsafe { libc::geteuid() }
}

/// Opens `path` for appending: created 0600 if it does not exist, else checked as the
/// module documentation says. An existing file's contents are kept. A refusal is a
/// `PermissionDenied` error saying what is wrong with the file (the caller names it).
pub(crate) fn open_append(path: &Path) -> io::Result<File> {
    let created = OpenOptions::new()
        .append(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path);
    match created {
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        other => return other,
    }
    // Non-blocking: opening a FIFO for writing would otherwise wait for a reader, forever.
    let file = OpenOptions::new()
        .append(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            // A FIFO with no reader (the only thing a non-blocking open for writing
            // refuses with ENXIO).
            Some(libc::ENXIO) => refused("it is a FIFO, not a regular file"),
            Some(libc::ELOOP) => refused("it is a symbolic link"),
            _ => e,
        })?;
    check_private(&file)?;
    blocking(&file)?;
    Ok(file)
}

fn refused(problem: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::PermissionDenied,
        format!("{problem}; refusing to write to it"),
    )
}

/// Refuses a file someone else could have planted or could change.
fn check_private(file: &File) -> io::Result<()> {
    let meta = file.metadata()?;
    let kind = meta.file_type();
    let problem = if kind.is_fifo() {
        Some("it is a FIFO, not a regular file")
    } else if !kind.is_file() {
        Some("it is not a regular file")
    } else if meta.uid() != effective_uid() {
        Some("it is owned by another user")
    } else if meta.mode() & 0o022 != 0 {
        Some("it is writable by group or others")
    } else if meta.nlink() != 1 {
        Some("it has more than one link")
    } else {
        None
    };
    problem.map_or(Ok(()), |problem| Err(refused(problem)))
}

/// Clears `O_NONBLOCK` on the checked regular file (writes to one never block anyway;
/// this keeps the descriptor what a plain open would give).
fn blocking(file: &File) -> io::Result<()> {
    let fd = file.as_raw_fd();
    // SAFETY: F_GETFL on a descriptor `file` owns and keeps open; no memory is passed.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: F_SETFL with an integer flag set on the same open descriptor.
    if unsafe { libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Creates a new directory `<parent>/<prefix>.<suffix>` with mode 0700 that nobody else
/// can have prepared (`mkdir` fails on any existing name, links included).
pub(crate) fn private_dir(parent: &Path, prefix: &str) -> io::Result<PathBuf> {
    let mut last = None;
    for attempt in 0..16u32 {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let path = parent.join(format!(
            "{prefix}.{:08x}",
            nanos ^ attempt.wrapping_mul(0x9e37_79b9)
        ));
        match DirBuilder::new().mode(0o700).create(&path) {
            Ok(()) => return Ok(path),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| io::Error::other("no free directory name")))
}

/// Creates `path`, which must not exist, with mode 0600 for reading and writing.
pub(crate) fn create_new(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::fs::PermissionsExt;

    /// A fresh directory for one test, removed when it is dropped (passing or not).
    fn scratch() -> tempfile::TempDir {
        tempfile::Builder::new()
            .prefix("elfjit-safe-file-")
            .tempdir()
            .unwrap()
    }

    #[test]
    fn creates_0600_and_appends_to_its_own_file() {
        let dir = scratch();
        let path = dir.path().join("own");
        open_append(&path).unwrap().write_all(b"one\n").unwrap();
        open_append(&path).unwrap().write_all(b"two\n").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "one\ntwo\n");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn refuses_symlinks_shared_files_and_hard_links() {
        let dir = scratch();
        let scratch = |name: &str| dir.path().join(name);
        let target = scratch("target");
        std::fs::write(&target, b"").unwrap();
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o600)).unwrap();

        let link = scratch("symlink");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert!(open_append(&link).is_err(), "followed a symlink");

        let hard = scratch("hardlink");
        std::fs::hard_link(&target, &hard).unwrap();
        let err = open_append(&hard).unwrap_err();
        assert!(err.to_string().contains("more than one link"), "{err}");

        let shared = scratch("shared");
        std::fs::write(&shared, b"").unwrap();
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o666)).unwrap();
        let err = open_append(&shared).unwrap_err();
        assert!(
            err.to_string().contains("writable by group or others"),
            "{err}"
        );

        let a_directory = scratch("a-directory");
        std::fs::create_dir_all(&a_directory).unwrap();
        assert!(open_append(&a_directory).is_err());
    }

    /// Waits at most 20 s for `open_append(path)` (on another thread): a regression that
    /// blocks fails the test instead of hanging it.
    fn open_append_within_deadline(path: &Path) -> io::Result<File> {
        let path = path.to_path_buf();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(open_append(&path));
        });
        rx.recv_timeout(std::time::Duration::from_secs(20))
            .expect("opening a planted FIFO blocked")
    }

    fn mkfifo(path: &Path) {
        let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: mkfifo only reads the NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    }

    #[test]
    fn a_planted_fifo_is_refused_without_blocking() {
        let dir = scratch();
        let fifo = dir.path().join("perf-1.map");
        mkfifo(&fifo);
        // No reader: a blocking open for writing would wait forever.
        let err = open_append_within_deadline(&fifo).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::PermissionDenied, "{err}");
        assert!(err.to_string().contains("FIFO"), "{err}");
        // With a reader (its planter listening), the open succeeds and the check on the
        // descriptor refuses it.
        let _reader = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&fifo)
            .unwrap();
        let err = open_append_within_deadline(&fifo).unwrap_err();
        assert!(err.to_string().contains("FIFO"), "{err}");
    }

    #[test]
    fn a_file_owned_by_another_user_is_refused_and_an_own_file_stays_blocking() {
        let dir = scratch();
        let path = dir.path().join("theirs");
        std::fs::write(&path, b"").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        // Tests run as root, as CI does: chown gives the file to `nobody`.
        std::os::unix::fs::lchown(&path, Some(65534), Some(65534))
            .expect("chown needs root; these tests run as root");
        let err = open_append(&path).unwrap_err();
        assert!(err.to_string().contains("owned by another user"), "{err}");

        let own = dir.path().join("own");
        open_append(&own).unwrap();
        let file = open_append(&own).unwrap();
        // SAFETY: F_GETFL on an open descriptor; no memory is passed.
        let flags = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GETFL) };
        assert_eq!(flags & libc::O_NONBLOCK, 0, "O_NONBLOCK left on");
        assert_ne!(flags & libc::O_APPEND, 0, "O_APPEND lost");
    }

    #[test]
    fn private_dirs_are_new_and_0700() {
        let parent = scratch();
        let a = private_dir(parent.path(), "x").unwrap();
        let b = private_dir(parent.path(), "x").unwrap();
        assert_ne!(a, b);
        let mode = std::fs::metadata(&a).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        let file = a.join("f");
        create_new(&file).unwrap();
        assert!(
            create_new(&file).is_err(),
            "create_new reopened an existing file"
        );
    }
}
