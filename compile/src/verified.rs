//! Executables elfjit builds and later runs (the emulated runners, the compile server):
//! built in a private work directory, their SHA-256 recorded at build time in a `0600`
//! file beside them (`NAME.sha256`), and on every use both files must pass
//! [`PrivateDir`]'s ownership and mode checks and the digest must match what is read.
//! The program is then run through this process's open descriptor of the very file that
//! was verified ([`Verified::program`]), not its path: replacing the file after the check
//! changes nothing.

use crate::bounded;
use crate::private_dir::{PrivateDir, Refused, TEMP_PREFIX};
use sha2::{Digest, Sha256};
use std::ffi::OsStr;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

/// A work directory or temporary file this old belongs to a build that died.
pub const STALE_AFTER: Duration = Duration::from_secs(3600);

/// A verified executable, held open.
#[derive(Debug)]
pub struct Verified {
    /// Where it is cached (for messages; it is run through [`Verified::program`]).
    pub path: PathBuf,
    /// The file whose digest was verified.
    pub file: File,
    /// Its bytes, as verified.
    pub bytes: Vec<u8>,
    /// Their SHA-256.
    pub digest: [u8; 32],
}

impl Verified {
    /// The path a child is started from: this process's descriptor of the verified file.
    pub fn program(&self) -> PathBuf {
        PathBuf::from(format!(
            "/proc/{}/fd/{}",
            std::process::id(),
            self.file.as_raw_fd()
        ))
    }

    /// Whether the open file still holds the verified bytes (re-read and re-hashed).
    pub fn still_matches(&self) -> std::io::Result<bool> {
        let len = self.file.metadata()?.len();
        if len != self.bytes.len() as u64 {
            return Ok(false);
        }
        let mut now = vec![0u8; self.bytes.len()];
        self.file.read_exact_at(&mut now, 0)?;
        Ok(Sha256::digest(&now).as_slice() == self.digest)
    }
}

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The name of the digest file of `name`.
pub fn digest_name(name: &str) -> String {
    format!("{name}.sha256")
}

/// Whether `name` is a temporary file or work directory (including the `build.tmp-*` of
/// older versions).
pub fn is_temporary(name: &str) -> bool {
    name.starts_with(TEMP_PREFIX) || name.contains(".tmp-")
}

/// The executable `name` in `dir` if it and its digest pass every check and match, read
/// whole (at most `limit` bytes). A missing digest or a mismatch is `Refused::Unsafe`
/// with reason `no-digest` or `digest-mismatch`.
pub fn load(dir: &PrivateDir, name: &str, limit: u64) -> Result<Verified, Refused> {
    let mut program = dir.open_file(name, limit)?;
    let digest_file = digest_name(name);
    let recorded = match dir.open_file(&digest_file, 256) {
        Ok(mut f) => bounded::read_to_end(&mut f.file, 256, Some(f.len))
            .map_err(|e| Refused::Io(std::io::Error::other(e.to_string())))?,
        Err(Refused::Missing) => {
            return Err(Refused::Unsafe {
                reason: "no-digest",
                why: format!(
                    "{} has no recorded SHA-256 digest ({digest_file})",
                    dir.path().join(name).display()
                ),
            })
        }
        Err(e) => return Err(e),
    };
    let bytes = bounded::read_to_end(&mut program.file, limit, Some(program.len))
        .map_err(|e| Refused::Io(std::io::Error::other(e.to_string())))?;
    let digest: [u8; 32] = Sha256::digest(&bytes).into();
    if String::from_utf8_lossy(&recorded).trim() != hex(&digest) {
        return Err(Refused::Unsafe {
            reason: "digest-mismatch",
            why: format!(
                "the SHA-256 of {} does not match the digest recorded when it was built",
                dir.path().join(name).display()
            ),
        });
    }
    Ok(Verified {
        path: dir.path().join(name),
        file: program.file,
        bytes,
        digest,
    })
}

/// Moves the executable `built` of the work directory `work` to `name` in `dir` (mode
/// `0700`), recording its digest beside it; returns it opened and verified. `Err` says
/// what failed.
pub fn install(
    work: &PrivateDir,
    built: &str,
    dir: &PrivateDir,
    name: &str,
    limit: u64,
) -> Result<Verified, String> {
    let mut file = work
        .open_file(built, limit)
        .map_err(|e| format!("{} cannot be used: {e}", work.path().join(built).display()))?;
    let bytes = bounded::read_to_end(&mut file.file, limit, Some(file.len))
        .map_err(|e| format!("{} cannot be read: {e}", work.path().join(built).display()))?;
    rustix::fs::fchmod(&file.file, rustix::fs::Mode::from_raw_mode(0o700))
        .map_err(|e| format!("cannot protect {}: {e}", work.path().display()))?;
    let digest: [u8; 32] = Sha256::digest(&bytes).into();
    work.rename_to(built, dir, name)
        .map_err(|e| format!("cannot move {built} into {}: {e}", dir.path().display()))?;
    let text = format!("{}\n", hex(&digest));
    dir.write_file(&digest_name(name), &[text.as_bytes()], 0o600)
        .map_err(|e| format!("cannot record the digest in {}: {e}", dir.path().display()))?;
    Ok(Verified {
        path: dir.path().join(name),
        file: file.file,
        bytes,
        digest,
    })
}

/// Removes work directories and temporary files of builds that died (older than
/// [`STALE_AFTER`]); a build at work is younger.
pub fn remove_stale(dir: &PrivateDir) {
    let Ok(listing) = dir.list() else { return };
    let now = SystemTime::now();
    for l in listing {
        let stale = now
            .duration_since(l.modified)
            .is_ok_and(|age| age > STALE_AFTER);
        if stale && l.name.to_str().is_some_and(is_temporary) {
            let _ = dir.remove_tree(OsStr::new(&l.name));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::private_dir::random_hex;

    #[test]
    fn installed_loaded_and_tampering_refused() {
        let root = std::env::temp_dir().join(format!("elfjit-verified-{}", random_hex().unwrap()));
        let dir = PrivateDir::open(&root, true).unwrap();
        let (work_name, work) = dir.temp_subdir("build").unwrap();
        work.write_file("prog", &[b"#!/bin/sh\necho hi\n"], 0o600)
            .unwrap();
        let v = install(&work, "prog", &dir, "p", 1 << 20).unwrap();
        dir.remove_tree(OsStr::new(&work_name)).unwrap();
        assert!(v.still_matches().unwrap());
        let out = std::process::Command::new(v.program()).output().unwrap();
        assert_eq!(out.stdout, b"hi\n");
        let again = load(&dir, "p", 1 << 20).unwrap();
        assert_eq!(again.digest, v.digest);
        // One byte changed in place: refused on load, and the held file no longer matches.
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(root.join("p"))
            .unwrap();
        f.write_all_at(b"X", 12).unwrap();
        drop(f);
        assert!(!v.still_matches().unwrap());
        assert!(matches!(
            load(&dir, "p", 1 << 20),
            Err(Refused::Unsafe {
                reason: "digest-mismatch",
                ..
            })
        ));
        dir.remove(OsStr::new(&digest_name("p"))).unwrap();
        assert!(matches!(
            load(&dir, "p", 1 << 20),
            Err(Refused::Unsafe {
                reason: "no-digest",
                ..
            })
        ));
        std::fs::remove_dir_all(&root).unwrap();
    }
}
