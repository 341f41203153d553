//! Compile servers built elsewhere and installed with elfjit (the Python wheel's
//! `elfjit/_server/`), so that a machine with a matching clang but no LLVM development
//! headers still gets the warm compiler.
//!
//! A prebuilt directory holds, per LLVM major `NN`, the server `compile-server-llvmNN` and
//! its manifest `compile-server-llvmNN.json` ([`Manifest`]). The directory is named by
//! [`SERVER_DIR_ENV`] (the Python package sets it to its own `_server/` at import, unless
//! it is set already). Unlike the private cache directory it is an installed location,
//! so the checks are those of installed files: the directory, the server and the manifest
//! must be owned by root or by this user and writable by neither group nor others; the
//! two files must be regular files (not followed through a symbolic link at their own
//! name) within their size caps. A server is then used only if the manifest names the
//! LLVM major of the clang found, the very `server.cpp` and protocol this elfjit speaks
//! ([`source_digest`]), and the SHA-256 of the bytes read; and (checked by the caller) if
//! it starts and says it is ready, which proves the `libclang-cpp` it needs resolves.
//! It is then run, like a built one, through the descriptor of the verified file.

use super::protocol;
use crate::bounded;
use crate::private_dir::euid;
use crate::verified::{self, Verified};
use rustix::fs::{FileType, Mode, OFlags, CWD};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::fs::File;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

/// The environment variable naming a directory of prebuilt compile servers.
pub const SERVER_DIR_ENV: &str = "ELFJIT_SERVER_DIR";
/// The largest manifest read.
const MAX_MANIFEST_SIZE: u64 = 4096;

/// What `compile-server-llvmNN.json` records about the server beside it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// The LLVM major version it was built against (and the only one it serves).
    pub llvm_major: u32,
    /// The `libclang-cpp` it links, by soname (e.g. `libclang-cpp.so.19`).
    pub libclang_cpp: String,
    /// The SHA-256 of the server executable, lower-case hex.
    pub sha256: String,
    /// [`source_digest`] of the elfjit that built it: the server's source and protocol.
    pub source: String,
}

/// The file name of the prebuilt server for LLVM `major`.
pub fn server_file(major: u32) -> String {
    format!("compile-server-llvm{major}")
}

/// The file name of its manifest.
pub fn manifest_file(major: u32) -> String {
    format!("{}.json", server_file(major))
}

/// The SHA-256 (hex) of what a server's behaviour depends on besides its LLVM: its source
/// and the protocol's constants.
pub fn source_digest() -> String {
    let mut h = Sha256::new();
    for part in [
        super::SERVER_CPP.as_bytes(),
        protocol::cxx_defines().join(" ").as_bytes(),
    ] {
        h.update((part.len() as u64).to_le_bytes());
        h.update(part);
    }
    verified::hex(&h.finalize())
}

/// Whether the owner and mode of `st` (of `what`) are those of an installed file elfjit
/// may trust: owned by root or this user, writable by neither group nor others.
fn check_installed(st: &rustix::fs::Stat, what: &Path) -> Result<(), String> {
    let uid = st.st_uid;
    if uid != 0 && uid != euid() {
        return Err(format!(
            "{} is owned by uid {uid}, neither root nor this user ({})",
            what.display(),
            euid()
        ));
    }
    let mode = st.st_mode & 0o7777;
    if mode & 0o022 != 0 {
        return Err(format!(
            "{} is writable by its group or others (mode {mode:o})",
            what.display()
        ));
    }
    Ok(())
}

/// Opens `name` in `dir` (held as `dir_fd`) if it is a regular file passing
/// [`check_installed`] and at most `limit` bytes; returns it and its bytes.
fn read_installed(
    dir_fd: &OwnedFd,
    dir: &Path,
    name: &str,
    limit: u64,
) -> Result<(File, Vec<u8>), String> {
    let path = dir.join(name);
    let fd = rustix::fs::openat(
        dir_fd,
        name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    let st = rustix::fs::fstat(&fd).map_err(|e| format!("cannot stat {}: {e}", path.display()))?;
    if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
        return Err(format!("{} is not a regular file", path.display()));
    }
    check_installed(&st, &path)?;
    let len = u64::try_from(st.st_size).unwrap_or(u64::MAX);
    if len > limit {
        return Err(format!(
            "{} is {len} bytes, more than the {limit} allowed",
            path.display()
        ));
    }
    let mut file = File::from(fd);
    let bytes = bounded::read_to_end(&mut file, limit, Some(len))
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    Ok((file, bytes))
}

/// The prebuilt server for LLVM `major` in `dir`, read whole (at most `limit` bytes) and
/// verified against its manifest; `None` if `dir` or its manifest does not exist (the
/// usual case for a clang of another major: nothing to say); `Err` says why it is not
/// used.
pub(crate) fn find(dir: &Path, major: u32, limit: u64) -> Result<Option<Verified>, String> {
    let manifest_name = manifest_file(major);
    match rustix::fs::statat(
        CWD,
        dir.join(&manifest_name),
        rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
    ) {
        Err(rustix::io::Errno::NOENT) | Err(rustix::io::Errno::NOTDIR) => return Ok(None),
        _ => {}
    }
    let dir_fd = rustix::fs::openat(
        CWD,
        dir,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| format!("cannot open the directory {}: {e}", dir.display()))?;
    let st = rustix::fs::fstat(dir_fd.as_fd())
        .map_err(|e| format!("cannot stat {}: {e}", dir.display()))?;
    check_installed(&st, dir)?;
    let name = server_file(major);
    let (_, text) = read_installed(&dir_fd, dir, &manifest_name, MAX_MANIFEST_SIZE)?;
    let manifest: Manifest = serde_json::from_slice(&text).map_err(|e| {
        format!(
            "{} is not a manifest: {e}",
            dir.join(&manifest_name).display()
        )
    })?;
    if manifest.llvm_major != major {
        return Err(format!(
            "{} is for LLVM {}, but clang is LLVM {major}",
            dir.join(&manifest_name).display(),
            manifest.llvm_major
        ));
    }
    if manifest.source != source_digest() {
        return Err(format!(
            "{} was built from another version of the compile server's source",
            dir.join(&name).display()
        ));
    }
    let (file, bytes) = read_installed(&dir_fd, dir, &name, limit)?;
    let digest: [u8; 32] = Sha256::digest(&bytes).into();
    if verified::hex(&digest) != manifest.sha256.trim() {
        return Err(format!(
            "the SHA-256 of {} does not match its manifest",
            dir.join(&name).display()
        ));
    }
    Ok(Some(Verified {
        path: dir.join(name),
        file,
        bytes,
        digest,
    }))
}
