//! Windows: the perf map and the jitdump are Linux perf's files, and the owner and mode
//! checks of safe_file.rs are POSIX ones: every file is refused with `Unsupported`, so
//! `enable` with `PERF_MAP` or `JITDUMP` fails with a typed error naming the file.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

fn unsupported(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::Unsupported,
        format!(
            "{}: perf maps and jitdumps are for Linux perf; not written on Windows",
            path.display()
        ),
    )
}

/// Refused on Windows.
pub(crate) fn open_append(path: &Path) -> io::Result<File> {
    Err(unsupported(path))
}

/// Refused on Windows.
pub(crate) fn private_dir(parent: &Path, _prefix: &str) -> io::Result<PathBuf> {
    Err(unsupported(parent))
}

/// Refused on Windows.
pub(crate) fn create_new(path: &Path) -> io::Result<File> {
    Err(unsupported(path))
}
