//! Helpers shared by the driver's integration tests and the CLI's (cli/tests/support
//! includes this file by path): scratch directories, the host and its clang, and the cache
//! tests' kernel and entry listing.
#![allow(dead_code)] // each test file uses its own subset

use elfjit::clang::Compiler;
use elfjit::Arch;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

/// A fresh directory under cargo's scratch space for the crate's integration tests
/// (`CARGO_TARGET_TMPDIR`, expanded in the crate that includes this file), removed when
/// dropped.
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(tag: &str) -> Scratch {
        static N: AtomicUsize = AtomicUsize::new(0);
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!(
            "{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    pub fn join(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    /// Writes `text` to `name` and returns its path.
    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let p = self.0.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    /// An executable `#!/bin/sh` script.
    pub fn script(&self, name: &str, body: &str) -> PathBuf {
        let p = self.write(name, &format!("#!/bin/sh\n{body}\n"));
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        // Files chowned to another user or made read-only are still removable by root.
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub fn compiler() -> Compiler {
    Compiler::find().expect("clang")
}

pub fn host() -> Arch {
    Arch::host().expect("a supported host")
}

/// A kernel `int add(int, int)` that adds `k` too: a different `k`, a different cache key.
pub fn add_source(k: i32) -> String {
    format!("int add(int a, int b) {{ return a + b + {k}; }}\n")
}

/// Every `.obj` entry of the object cache in `dir`: (path, size), sorted.
pub fn cache_entries(dir: &Path) -> Vec<(PathBuf, u64)> {
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
