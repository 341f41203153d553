//! The compile server's protocol: the one definition of its frames, magic numbers and
//! caps. The C++ server gets every constant from here as a `-D` macro
//! ([`cxx_defines`]), so it holds no second copy.
//!
//! All integers are little-endian. The server is started as `SERVER PARENT_PID`
//! (decimal: it exits when that process is gone) and writes one [`Ready`] frame
//! when its libraries are loaded. Then, for each request on its stdin, one reply on its
//! stdout, in order:
//!
//! - request: a [`REQUEST_HEADER_SIZE`]-byte header — magic [`REQUEST_MAGIC`] (u32),
//!   flags (u32: [`FLAG_WANT_DEPENDENCIES`], no other bit), argument count (u32, 1 to
//!   [`MAX_ARG_COUNT`]), zero (u32), arguments' length (u64, at most
//!   [`MAX_ARGS_BYTES`]), source length (u64, at most [`MAX_SOURCE_SIZE`]) — then the
//!   arguments, each ended by a NUL (the first is the clang executable, as spawned),
//!   then the source bytes (what a spawned clang reads on stdin).
//! - reply: a [`REPLY_HEADER_SIZE`]-byte header — magic [`REPLY_MAGIC`] (u32), kind
//!   (u32: [`KIND_COMPILED`], [`KIND_NEEDS_SPAWN`] or [`KIND_TOO_MUCH_OUTPUT`]), status
//!   (i32: clang's exit status, or for too much output the [`STREAM_OBJECT`] /
//!   [`STREAM_DIAGNOSTICS`] / [`STREAM_DEPENDENCIES`] that overflowed), flags (u32:
//!   [`REPLY_FLAG_HAS_DEPENDENCIES`]), then the lengths (u64 each) of the object (at most
//!   [`MAX_OBJECT_SIZE`]), the diagnostics (at most [`MAX_DIAGNOSTICS`]) and the
//!   dependency list (at most [`MAX_DEPENDENCY_LIST`]), then the server's own time for
//!   the request in nanoseconds (u64: from the request read in full to the reply ready,
//!   so a client's round trip minus it is the protocol's overhead), then those bytes in
//!   that order.
//!   For [`KIND_NEEDS_SPAWN`] the diagnostics say why; for [`KIND_TOO_MUCH_OUTPUT`] they
//!   are the head of clang's diagnostics.
//!
//! End of input at a frame boundary ends the server with status 0; anything else that is
//! not a well-formed frame within the caps ends it with [`EXIT_MALFORMED`] before it
//! allocates for the frame.

use crate::clang;

/// The first four bytes of a request: `EJCQ`.
pub(crate) const REQUEST_MAGIC: u32 = u32::from_le_bytes(*b"EJCQ");
/// The first four bytes of a reply: `EJCR`.
pub(crate) const REPLY_MAGIC: u32 = u32::from_le_bytes(*b"EJCR");
/// The first four bytes of the frame the server writes once it is ready: `EJCH`.
pub(crate) const READY_MAGIC: u32 = u32::from_le_bytes(*b"EJCH");
/// The protocol's version, in the ready frame: a server of another version is not used.
pub(crate) const VERSION: u32 = 2;

/// Bytes in a request header.
pub(crate) const REQUEST_HEADER_SIZE: usize = 32;
/// Bytes in a reply header.
pub(crate) const REPLY_HEADER_SIZE: usize = 48;
/// Bytes in the ready frame: magic, version, LLVM major version (u32 each).
pub(crate) const READY_SIZE: usize = 12;

/// Request flag: also return clang's `-MD` dependency list.
pub(crate) const FLAG_WANT_DEPENDENCIES: u32 = 1;
/// Reply flag: a dependency list follows (possibly empty).
pub(crate) const REPLY_FLAG_HAS_DEPENDENCIES: u32 = 1;

/// Reply kind: clang ran; the status is its exit status.
pub(crate) const KIND_COMPILED: u32 = 0;
/// Reply kind: the server does not compile this request (it would change the server's
/// global state, or is not one object from stdin); spawn clang. The diagnostics say why.
pub(crate) const KIND_NEEDS_SPAWN: u32 = 1;
/// Reply kind: an output was larger than its cap; the status names the stream.
pub(crate) const KIND_TOO_MUCH_OUTPUT: u32 = 2;

/// Too-much-output stream: the object.
pub(crate) const STREAM_OBJECT: i32 = 1;
/// Too-much-output stream: the diagnostics.
pub(crate) const STREAM_DIAGNOSTICS: i32 = 2;
/// Too-much-output stream: the dependency list.
pub(crate) const STREAM_DEPENDENCIES: i32 = 3;

/// The most arguments in a request.
pub(crate) const MAX_ARG_COUNT: u32 = 4096;
/// The most bytes of arguments (NULs included) in a request.
pub(crate) const MAX_ARGS_BYTES: u64 = 1 << 20;
/// The largest source in a request (a larger one is spawned).
pub(crate) const MAX_SOURCE_SIZE: u64 = 1 << 30;
/// The largest object in a reply: the spawned path's cap.
pub(crate) const MAX_OBJECT_SIZE: u64 = clang::MAX_OBJECT_SIZE as u64;
/// The most diagnostics in a reply: the spawned path's cap.
pub(crate) const MAX_DIAGNOSTICS: u64 = clang::MAX_DIAGNOSTICS as u64;
/// The longest dependency list in a reply: the spawned path's cap.
pub(crate) const MAX_DEPENDENCY_LIST: u64 = clang::MAX_DEPENDENCY_LIST as u64;

/// Server exit status: a malformed frame.
pub(crate) const EXIT_MALFORMED: i32 = 65;
/// Server exit status: it could not set itself up (arguments, limits, descriptors).
pub(crate) const EXIT_SETUP: i32 = 70;
/// Server exit status: reading or writing a frame failed.
pub(crate) const EXIT_IO: i32 = 74;
/// Server exit status: the process that started it is gone.
pub(crate) const EXIT_PARENT_GONE: i32 = 75;

/// The constants above as C preprocessor definitions for the server's build.
pub(crate) fn cxx_defines() -> Vec<String> {
    let unsigned: [(&str, u64); 18] = [
        ("REQUEST_MAGIC", REQUEST_MAGIC.into()),
        ("REPLY_MAGIC", REPLY_MAGIC.into()),
        ("READY_MAGIC", READY_MAGIC.into()),
        ("VERSION", VERSION.into()),
        ("REQUEST_HEADER_SIZE", REQUEST_HEADER_SIZE as u64),
        ("REPLY_HEADER_SIZE", REPLY_HEADER_SIZE as u64),
        ("READY_SIZE", READY_SIZE as u64),
        ("FLAG_WANT_DEPENDENCIES", FLAG_WANT_DEPENDENCIES.into()),
        (
            "REPLY_FLAG_HAS_DEPENDENCIES",
            REPLY_FLAG_HAS_DEPENDENCIES.into(),
        ),
        ("KIND_COMPILED", KIND_COMPILED.into()),
        ("KIND_NEEDS_SPAWN", KIND_NEEDS_SPAWN.into()),
        ("KIND_TOO_MUCH_OUTPUT", KIND_TOO_MUCH_OUTPUT.into()),
        ("MAX_ARG_COUNT", MAX_ARG_COUNT.into()),
        ("MAX_ARGS_BYTES", MAX_ARGS_BYTES),
        ("MAX_SOURCE_SIZE", MAX_SOURCE_SIZE),
        ("MAX_OBJECT_SIZE", MAX_OBJECT_SIZE),
        ("MAX_DIAGNOSTICS", MAX_DIAGNOSTICS),
        ("MAX_DEPENDENCY_LIST", MAX_DEPENDENCY_LIST),
    ];
    let signed: [(&str, i32); 7] = [
        ("STREAM_OBJECT", STREAM_OBJECT),
        ("STREAM_DIAGNOSTICS", STREAM_DIAGNOSTICS),
        ("STREAM_DEPENDENCIES", STREAM_DEPENDENCIES),
        ("EXIT_MALFORMED", EXIT_MALFORMED),
        ("EXIT_SETUP", EXIT_SETUP),
        ("EXIT_IO", EXIT_IO),
        ("EXIT_PARENT_GONE", EXIT_PARENT_GONE),
    ];
    unsigned
        .iter()
        .map(|(name, v)| format!("-DELFJIT_CS_{name}={v}ULL"))
        .chain(
            signed
                .iter()
                .map(|(name, v)| format!("-DELFJIT_CS_{name}=({v})")),
        )
        .collect()
}

/// Why a request cannot be sent to a server (it is spawned instead).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Unsendable {
    /// No arguments (there must be at least the clang executable).
    NoArguments,
    /// More than [`MAX_ARG_COUNT`] arguments.
    TooManyArguments(usize),
    /// More than [`MAX_ARGS_BYTES`] of arguments.
    ArgumentsTooLong(u64),
    /// An argument holds a NUL byte, which no program argument can.
    NulInArgument(usize),
    /// A source larger than [`MAX_SOURCE_SIZE`].
    SourceTooLarge(u64),
}

impl std::fmt::Display for Unsendable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unsendable::NoArguments => f.write_str("the request has no arguments"),
            Unsendable::TooManyArguments(n) => {
                write!(
                    f,
                    "{n} arguments (the server takes at most {MAX_ARG_COUNT})"
                )
            }
            Unsendable::ArgumentsTooLong(n) => write!(
                f,
                "{n} bytes of arguments (the server takes at most {MAX_ARGS_BYTES})"
            ),
            Unsendable::NulInArgument(i) => write!(f, "argument {i} contains a NUL byte"),
            Unsendable::SourceTooLarge(n) => write!(
                f,
                "a {n}-byte source (the server takes at most {MAX_SOURCE_SIZE})"
            ),
        }
    }
}

/// A request's header and its arguments, ready to write (the source follows them).
pub(crate) fn encode_request(
    args: &[String],
    source_len: usize,
    want_dependencies: bool,
) -> Result<([u8; REQUEST_HEADER_SIZE], Vec<u8>), Unsendable> {
    if args.is_empty() {
        return Err(Unsendable::NoArguments);
    }
    let count = u32::try_from(args.len())
        .ok()
        .filter(|n| *n <= MAX_ARG_COUNT)
        .ok_or(Unsendable::TooManyArguments(args.len()))?;
    let total: u64 = args.iter().map(|a| a.len() as u64 + 1).sum();
    if total > MAX_ARGS_BYTES {
        return Err(Unsendable::ArgumentsTooLong(total));
    }
    let source = source_len as u64;
    if source > MAX_SOURCE_SIZE {
        return Err(Unsendable::SourceTooLarge(source));
    }
    let mut packed = Vec::with_capacity(total as usize);
    for (i, a) in args.iter().enumerate() {
        if a.as_bytes().contains(&0) {
            return Err(Unsendable::NulInArgument(i));
        }
        packed.extend_from_slice(a.as_bytes());
        packed.push(0);
    }
    let flags = if want_dependencies {
        FLAG_WANT_DEPENDENCIES
    } else {
        0
    };
    let mut header = [0u8; REQUEST_HEADER_SIZE];
    put(&mut header, 0, &REQUEST_MAGIC.to_le_bytes());
    put(&mut header, 4, &flags.to_le_bytes());
    put(&mut header, 8, &count.to_le_bytes());
    put(&mut header, 16, &total.to_le_bytes());
    put(&mut header, 24, &source.to_le_bytes());
    Ok((header, packed))
}

fn put(buf: &mut [u8], at: usize, bytes: &[u8]) {
    if let Some(dst) = buf.get_mut(at..at + bytes.len()) {
        dst.copy_from_slice(bytes);
    }
}

fn u32_at(buf: &[u8], at: usize) -> u32 {
    let mut b = [0u8; 4];
    if let Some(src) = buf.get(at..at + 4) {
        b.copy_from_slice(src);
    }
    u32::from_le_bytes(b)
}

fn u64_at(buf: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 8];
    if let Some(src) = buf.get(at..at + 8) {
        b.copy_from_slice(src);
    }
    u64::from_le_bytes(b)
}

/// The server's ready frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ready {
    /// The LLVM major version the server was built against.
    pub llvm_major: u32,
}

/// Decodes the ready frame; `Err` says what is wrong with it.
pub(crate) fn decode_ready(frame: &[u8; READY_SIZE]) -> Result<Ready, String> {
    let (magic, version) = (u32_at(frame, 0), u32_at(frame, 4));
    if magic != READY_MAGIC {
        return Err(format!(
            "its first frame starts with {magic:#010x}, not the ready magic {READY_MAGIC:#010x}"
        ));
    }
    if version != VERSION {
        return Err(format!(
            "it speaks protocol version {version}, this elfjit version {VERSION}"
        ));
    }
    Ok(Ready {
        llvm_major: u32_at(frame, 8),
    })
}

/// What a reply header announces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ReplyHeader {
    /// [`KIND_COMPILED`], [`KIND_NEEDS_SPAWN`] or [`KIND_TOO_MUCH_OUTPUT`].
    pub kind: u32,
    /// clang's exit status, or the stream that overflowed.
    pub status: i32,
    /// Whether a dependency list follows.
    pub has_dependencies: bool,
    /// Object bytes that follow.
    pub object_len: u64,
    /// Diagnostic bytes that follow.
    pub diagnostics_len: u64,
    /// Dependency-list bytes that follow.
    pub dependencies_len: u64,
    /// The server's own time for the request, in nanoseconds (the request read in full
    /// to the reply ready).
    pub server_ns: u64,
}

impl ReplyHeader {
    /// The header's bytes (the server's side; the tests use it).
    #[cfg(test)]
    pub(crate) fn encode(&self) -> [u8; REPLY_HEADER_SIZE] {
        let mut h = [0u8; REPLY_HEADER_SIZE];
        put(&mut h, 0, &REPLY_MAGIC.to_le_bytes());
        put(&mut h, 4, &self.kind.to_le_bytes());
        put(&mut h, 8, &self.status.to_le_bytes());
        let flags = if self.has_dependencies {
            REPLY_FLAG_HAS_DEPENDENCIES
        } else {
            0
        };
        put(&mut h, 12, &flags.to_le_bytes());
        put(&mut h, 16, &self.object_len.to_le_bytes());
        put(&mut h, 24, &self.diagnostics_len.to_le_bytes());
        put(&mut h, 32, &self.dependencies_len.to_le_bytes());
        put(&mut h, 40, &self.server_ns.to_le_bytes());
        h
    }
}

/// Decodes and checks a reply header: magic, kind, flags and every length within its
/// cap. `Err` says what is wrong.
pub(crate) fn decode_reply_header(h: &[u8; REPLY_HEADER_SIZE]) -> Result<ReplyHeader, String> {
    let magic = u32_at(h, 0);
    if magic != REPLY_MAGIC {
        return Err(format!(
            "a reply starts with {magic:#010x}, not the reply magic {REPLY_MAGIC:#010x}"
        ));
    }
    let kind = u32_at(h, 4);
    if !matches!(
        kind,
        KIND_COMPILED | KIND_NEEDS_SPAWN | KIND_TOO_MUCH_OUTPUT
    ) {
        return Err(format!("a reply of unknown kind {kind}"));
    }
    let status = u32_at(h, 8) as i32;
    let flags = u32_at(h, 12);
    if flags & !REPLY_FLAG_HAS_DEPENDENCIES != 0 {
        return Err(format!("a reply with unknown flags {flags:#x}"));
    }
    let header = ReplyHeader {
        kind,
        status,
        has_dependencies: flags & REPLY_FLAG_HAS_DEPENDENCIES != 0,
        object_len: u64_at(h, 16),
        diagnostics_len: u64_at(h, 24),
        dependencies_len: u64_at(h, 32),
        server_ns: u64_at(h, 40),
    };
    for (what, len, cap) in [
        ("object", header.object_len, MAX_OBJECT_SIZE),
        ("diagnostics", header.diagnostics_len, MAX_DIAGNOSTICS),
        (
            "dependency list",
            header.dependencies_len,
            MAX_DEPENDENCY_LIST,
        ),
    ] {
        if len > cap {
            return Err(format!(
                "a reply announces {len} bytes of {what}, more than the cap of {cap}"
            ));
        }
    }
    if !header.has_dependencies && header.dependencies_len != 0 {
        return Err("a reply without a dependency list announces its bytes".into());
    }
    if kind == KIND_TOO_MUCH_OUTPUT
        && !matches!(
            status,
            STREAM_OBJECT | STREAM_DIAGNOSTICS | STREAM_DEPENDENCIES
        )
    {
        return Err(format!(
            "a too-much-output reply names unknown stream {status}"
        ));
    }
    Ok(header)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn defines_name_every_constant_once() {
        let d = cxx_defines();
        assert!(d.contains(&format!("-DELFJIT_CS_REQUEST_MAGIC={REQUEST_MAGIC}ULL")));
        assert!(d.contains(&"-DELFJIT_CS_EXIT_MALFORMED=(65)".to_string()));
        let mut names: Vec<_> = d.iter().map(|s| s.split('=').next().unwrap()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), d.len());
    }

    #[test]
    fn unsendable_requests() {
        assert_eq!(encode_request(&[], 0, false), Err(Unsendable::NoArguments));
        let nul = vec!["clang".to_string(), "a\0b".to_string()];
        assert_eq!(
            encode_request(&nul, 0, false),
            Err(Unsendable::NulInArgument(1))
        );
        let many = vec![String::new(); MAX_ARG_COUNT as usize + 1];
        assert!(matches!(
            encode_request(&many, 0, false),
            Err(Unsendable::TooManyArguments(_))
        ));
        let long = vec!["x".repeat(MAX_ARGS_BYTES as usize)];
        assert!(matches!(
            encode_request(&long, 0, false),
            Err(Unsendable::ArgumentsTooLong(_))
        ));
        let one = vec!["clang".to_string()];
        assert!(matches!(
            encode_request(&one, MAX_SOURCE_SIZE as usize + 1, false),
            Err(Unsendable::SourceTooLarge(_))
        ));
    }

    #[test]
    fn reply_header_checks() {
        let ok = ReplyHeader {
            kind: KIND_COMPILED,
            status: 0,
            has_dependencies: false,
            object_len: 10,
            diagnostics_len: 0,
            dependencies_len: 0,
            server_ns: 14_000_000,
        };
        assert_eq!(decode_reply_header(&ok.encode()), Ok(ok));
        for bad in [
            ReplyHeader { kind: 9, ..ok },
            ReplyHeader {
                object_len: MAX_OBJECT_SIZE + 1,
                ..ok
            },
            ReplyHeader {
                diagnostics_len: MAX_DIAGNOSTICS + 1,
                ..ok
            },
            ReplyHeader {
                dependencies_len: 1,
                ..ok
            },
            ReplyHeader {
                kind: KIND_TOO_MUCH_OUTPUT,
                status: 7,
                ..ok
            },
        ] {
            assert!(decode_reply_header(&bad.encode()).is_err(), "{bad:?}");
        }
        let mut wrong_magic = ok.encode();
        wrong_magic[0] ^= 1;
        assert!(decode_reply_header(&wrong_magic).is_err());
        let mut ready = [0u8; READY_SIZE];
        ready[..4].copy_from_slice(&READY_MAGIC.to_le_bytes());
        ready[4..8].copy_from_slice(&VERSION.to_le_bytes());
        ready[8..].copy_from_slice(&19u32.to_le_bytes());
        assert_eq!(decode_ready(&ready), Ok(Ready { llvm_major: 19 }));
        ready[4] ^= 2;
        assert!(decode_ready(&ready).is_err());
    }

    proptest! {
        #[test]
        fn request_encoding_round_trips(
            args in proptest::collection::vec("[^\0]{0,40}", 1..20),
            source_len in 0usize..1_000_000,
            deps: bool,
        ) {
            let (h, packed) = encode_request(&args, source_len, deps).unwrap();
            prop_assert_eq!(u32_at(&h, 0), REQUEST_MAGIC);
            prop_assert_eq!(u32_at(&h, 4), u32::from(deps));
            prop_assert_eq!(u32_at(&h, 8) as usize, args.len());
            prop_assert_eq!(u32_at(&h, 12), 0);
            prop_assert_eq!(u64_at(&h, 16), packed.len() as u64);
            prop_assert_eq!(u64_at(&h, 24), source_len as u64);
            let parts: Vec<&[u8]> = packed.split(|b| *b == 0).collect();
            prop_assert_eq!(parts.len(), args.len() + 1);
            for (p, a) in parts.iter().zip(&args) {
                prop_assert_eq!(*p, a.as_bytes());
            }
        }

        #[test]
        fn reply_header_round_trips(
            kind in 0u32..3, status: i32, deps: bool,
            object_len in 0..=MAX_OBJECT_SIZE,
            diagnostics_len in 0..=MAX_DIAGNOSTICS,
            dependencies_len in 0..=MAX_DEPENDENCY_LIST,
            server_ns: u64,
        ) {
            let status = if kind == KIND_TOO_MUCH_OUTPUT { status.rem_euclid(3) + 1 } else { status };
            let h = ReplyHeader {
                kind, status, has_dependencies: deps, object_len, diagnostics_len,
                dependencies_len: if deps { dependencies_len } else { 0 },
                server_ns,
            };
            prop_assert_eq!(decode_reply_header(&h.encode()), Ok(h));
        }

        #[test]
        fn any_reply_header_bytes_decode_or_are_refused(bytes in proptest::array::uniform32(any::<u8>()), tail: [u64; 2]) {
            let mut h = [0u8; REPLY_HEADER_SIZE];
            h[..32].copy_from_slice(&bytes);
            h[32..40].copy_from_slice(&tail[0].to_le_bytes());
            h[40..].copy_from_slice(&tail[1].to_le_bytes());
            if let Ok(d) = decode_reply_header(&h) {
                prop_assert!(d.object_len <= MAX_OBJECT_SIZE);
                prop_assert!(d.diagnostics_len <= MAX_DIAGNOSTICS);
                prop_assert!(d.dependencies_len <= MAX_DEPENDENCY_LIST);
            }
        }
    }
}
