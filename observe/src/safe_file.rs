//! Files in a shared directory (`/tmp`), made so that another user cannot swap in a link or
//! a file of their own: created with `O_CREAT|O_EXCL|O_NOFOLLOW` and mode 0600, or, when
//! the name exists, opened with `O_NOFOLLOW` and kept only if it is a regular file with one
//! link, owned by this user, that neither group nor others can write.

use std::fs::{DirBuilder, File, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

fn effective_uid() -> u32 {
    // SAFETY: geteuid takes no arguments, cannot fail and touches no memory of ours.
    unsafe { libc::geteuid() }
}

/// Opens `path` for appending: created 0600 if it does not exist, else checked as the
/// module documentation says. An existing file's contents are kept.
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
    let file = OpenOptions::new()
        .append(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)?;
    check_private(&file, path)?;
    Ok(file)
}

/// Refuses a file someone else could have planted or could change.
fn check_private(file: &File, path: &Path) -> io::Result<()> {
    let meta = file.metadata()?;
    let problem = if !meta.file_type().is_file() {
        Some("is not a regular file")
    } else if meta.uid() != effective_uid() {
        Some("is owned by another user")
    } else if meta.mode() & 0o022 != 0 {
        Some("is writable by group or others")
    } else if meta.nlink() != 1 {
        Some("has more than one link")
    } else {
        None
    };
    match problem {
        None => Ok(()),
        Some(problem) => Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("{} {problem}; refusing to write to it", path.display()),
        )),
    }
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
