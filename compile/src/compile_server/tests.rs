//! The compile server against real clang: equivalence with a spawned clang, memory over
//! many compiles, a tampered binary, malformed frames, and the client's failure paths.

use super::binary;
use super::protocol::{self, EXIT_MALFORMED, REQUEST_HEADER_SIZE, REQUEST_MAGIC};
use super::*;
use crate::child::{self, Spec};
use crate::clang::{compile_args, parse_dependencies, Compiler};
use crate::flags::{CompileOptions, HostInfo, Lang};
use crate::private_dir::{random_hex, PrivateDir, Refused};
use crate::verified;
use elfjit_core::Arch;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

const ALL_TARGETS: [Arch; 5] = [
    Arch::X86_64,
    Arch::Aarch64,
    Arch::Riscv64,
    Arch::Loongarch64,
    Arch::Ppc64le,
];

fn compiler() -> Compiler {
    Compiler::find().expect("the compile server tests need clang")
}

fn binary(c: &Compiler) -> Arc<ServerBinary> {
    ServerBinary::for_compiler(c).unwrap_or_else(|e| panic!("no compile server: {e}"))
}

fn soon() -> Instant {
    Instant::now() + Duration::from_secs(120)
}

fn request_args(c: &Compiler, opts: &CompileOptions, host: HostInfo) -> Vec<String> {
    let mut args = vec![c.path().to_str().unwrap().to_string()];
    args.extend(compile_args(opts, host));
    args
}

fn kernels() -> Vec<(PathBuf, Lang)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/kernels");
    let mut found: Vec<(PathBuf, Lang)> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter_map(|p| Lang::from_path(&p).map(|l| (p, l)))
        .collect();
    found.sort_by(|a, b| a.0.cmp(&b.0));
    assert!(found.len() >= 20, "{found:?}");
    found
}

#[test]
fn objects_and_dependencies_equal_spawned_clangs_for_every_kernel_target_and_level() {
    let c = compiler();
    let bin = binary(&c);
    let mut server = Server::start(&bin, &Limits::default()).unwrap();
    let host = HostInfo::current();
    let (mut compiled, mut failed) = (0, 0);
    for (path, lang) in kernels() {
        let source = std::fs::read(&path).unwrap();
        for target in ALL_TARGETS {
            for level in 0..=3 {
                let mut opts = CompileOptions::new(lang, target);
                opts.opt_level = level;
                let what = format!("{} for {target} at -O{level}", path.display());
                // The dependency list where the cache asks for it (C), at one level.
                let deps = lang == Lang::C && level == 2;
                let spawned = if deps {
                    c.compile_with_dependencies(&source, &opts, host)
                } else {
                    c.compile_for_host(&source, &opts, host)
                        .map(|o| (o, vec![]))
                };
                let args = request_args(&c, &opts, host);
                let req = Request {
                    args: &args,
                    source: &source,
                    want_dependencies: deps,
                };
                let reply = server.compile(&req, soon()).unwrap();
                let (spawned, files) = match spawned {
                    Ok(done) => done,
                    // Not every kernel compiles for every target (__bf16): the same
                    // failure, said the same way.
                    Err(crate::Error::ClangFailed { stderr, .. }) => {
                        assert_eq!(reply.status, 1, "{what}");
                        assert_eq!(String::from_utf8_lossy(&reply.diagnostics), stderr);
                        failed += 1;
                        continue;
                    }
                    Err(e) => panic!("{what}: {e}"),
                };
                assert_eq!(
                    reply.status,
                    0,
                    "{what}: {}",
                    String::from_utf8_lossy(&reply.diagnostics)
                );
                assert!(reply.object == spawned, "{what}: the objects differ");
                if deps {
                    let listed = parse_dependencies(reply.dependencies.as_deref().unwrap());
                    assert_eq!(listed, files, "{what}");
                } else {
                    assert_eq!(reply.dependencies, None);
                }
                compiled += 1;
            }
        }
    }
    eprintln!("{compiled} identical objects, {failed} identical failures");
    assert!(compiled >= 20 * 5 * 4);
}

#[test]
fn diagnostics_and_status_equal_spawned_clangs() {
    let c = compiler();
    let bin = binary(&c);
    let mut server = Server::start(&bin, &Limits::default()).unwrap();
    let host = HostInfo::current();
    // A driver warning (unused during compilation): the plan that says it is not kept.
    let cases: [(Lang, &[u8], &[&str]); 5] = [
        (Lang::C, b"int f( { return x; }\n", &[]),
        (Lang::C, b"int f(void) { return 0; }\n", &["-Wl,--unused"]),
        (
            Lang::C,
            b"int f(int a) { int unused; return a; }\n",
            &["-Wall"],
        ),
        (Lang::Ir, b"define i32 @f( {\n", &[]),
        (Lang::C, b"int f(void) { return 0; }\n", &["--no-such-flag"]),
    ];
    for (lang, source, extra) in cases {
        let mut opts = CompileOptions::new(lang, Arch::X86_64);
        opts.extra_flags = extra.iter().map(|s| s.to_string()).collect();
        let mut args: Vec<OsString> = vec![];
        args.extend(compile_args(&opts, host).into_iter().map(OsString::from));
        let parts: [&[u8]; 1] = [source];
        let mut spec = Spec::new(c.path(), args);
        spec.input = &parts;
        spec.deadline = Some(soon());
        let spawned = child::run(&spec).unwrap();
        let req_args = request_args(&c, &opts, host);
        // Twice: the repeat may take the server's kept plan of the first.
        for round in 0..2 {
            let reply = server
                .compile(
                    &Request {
                        args: &req_args,
                        source,
                        want_dependencies: false,
                    },
                    soon(),
                )
                .unwrap();
            let what = format!("{} (request {round})", String::from_utf8_lossy(source));
            assert_eq!(Some(reply.status), spawned.status.code(), "{what}");
            assert!(!spawned.stderr.is_empty(), "{what}");
            assert_eq!(
                String::from_utf8_lossy(&reply.diagnostics),
                String::from_utf8_lossy(&spawned.stderr),
                "{what}"
            );
            assert_eq!(reply.object, spawned.stdout, "{what}");
        }
    }
}

#[test]
fn diagnostics_past_the_cap_keep_the_spawned_head_and_the_server_serves_on() {
    let c = compiler();
    let bin = binary(&c);
    let mut server = Server::start(&bin, &Limits::default()).unwrap();
    let host = HostInfo::current();
    let opts = CompileOptions::new(Lang::C, Arch::X86_64);
    // Each warning quotes its 300-byte line: about 7 MiB of diagnostics.
    let source = format!("#warning {}\n", "w".repeat(300)).repeat(10_000);
    let spawned_head = match c.compile_for_host(source.as_bytes(), &opts, host) {
        Err(crate::Error::ClangFailed { stderr, .. }) => stderr,
        other => panic!("{other:?}"),
    };
    let args = request_args(&c, &opts, host);
    let req = Request {
        args: &args,
        source: source.as_bytes(),
        want_dependencies: false,
    };
    match server.compile(&req, soon()) {
        Err(ServerError::TooMuchOutput {
            stream: crate::child::Stream::Stderr,
            limit,
            diagnostics,
        }) => {
            assert_eq!(limit, crate::clang::MAX_DIAGNOSTICS);
            assert_eq!(diagnostics.len(), limit);
            assert!(String::from_utf8_lossy(&diagnostics) == spawned_head);
        }
        other => panic!("{other:?}"),
    }
    let small = b"int f(void) { return 2; }\n";
    let req = Request {
        args: &args,
        source: small,
        want_dependencies: false,
    };
    let reply = server.compile(&req, soon()).unwrap();
    assert_eq!(
        reply.object,
        c.compile_for_host(small, &opts, host).unwrap()
    );
}

#[test]
fn global_state_is_refused_and_the_server_serves_on() {
    let c = compiler();
    let bin = binary(&c);
    let mut server = Server::start(&bin, &Limits::default()).unwrap();
    let ready = server.wait_ready(soon()).unwrap();
    assert_eq!(Some(ready.llvm_major), llvm_major(&c.version().unwrap()));
    assert_eq!(bin.llvm_major(), ready.llvm_major);
    let host = HostInfo::current();
    let mut opts = CompileOptions::new(Lang::C, Arch::X86_64);
    let source = b"int f(int a) { return a * 3; }\n";
    for extra in [
        &["-mllvm", "-unroll-threshold=1"][..],
        &["-S"],
        &["-fno-integrated-as"],
        &["-v"],
        &["-###"],
        &["-ftime-report"],
        &["-save-temps"],
    ] {
        opts.extra_flags = extra.iter().map(|s| s.to_string()).collect();
        let args = request_args(&c, &opts, host);
        let r = server.compile(
            &Request {
                args: &args,
                source,
                want_dependencies: false,
            },
            soon(),
        );
        assert!(
            matches!(r, Err(ServerError::NeedsSpawn { .. })),
            "{extra:?}: {r:?}"
        );
    }
    opts.extra_flags.clear();
    let mut args = request_args(&c, &opts, host);
    args[0] = "/usr/bin/another-clang".into();
    let r = server.compile(
        &Request {
            args: &args,
            source,
            want_dependencies: false,
        },
        soon(),
    );
    assert!(matches!(r, Err(ServerError::NeedsSpawn { .. })), "{r:?}");
    let args = request_args(&c, &opts, host);
    let reply = server
        .compile(
            &Request {
                args: &args,
                source,
                want_dependencies: false,
            },
            soon(),
        )
        .unwrap();
    assert_eq!(
        reply.object,
        c.compile_for_host(source, &opts, host).unwrap()
    );
}

#[test]
fn a_passed_deadline_kills_and_a_killed_server_is_reported() {
    let c = compiler();
    let bin = binary(&c);
    let host = HostInfo::current();
    let opts = CompileOptions::new(Lang::C, Arch::X86_64);
    let args = request_args(&c, &opts, host);
    let req = Request {
        args: &args,
        source: b"int f(void) { return 1; }\n",
        want_dependencies: false,
    };
    let mut server = Server::start(&bin, &Limits::default()).unwrap();
    let pid = server.pid();
    let r = server.compile(&req, Instant::now());
    assert!(matches!(r, Err(ServerError::Timeout { .. })), "{r:?}");
    assert!(!server.is_alive());
    assert!(
        !Path::new(&format!("/proc/{pid}")).exists(),
        "killed and reaped"
    );

    let mut server = Server::start(&bin, &Limits::default()).unwrap();
    server.wait_ready(soon()).unwrap();
    let pid = rustix::process::Pid::from_raw(server.pid() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::KILL).unwrap();
    match server.compile(&req, soon()) {
        Err(e @ ServerError::Died { .. }) => {
            assert!(e.to_string().contains("signal 9"), "{e}")
        }
        other => panic!("{other:?}"),
    }
    assert!(!server.is_alive());
    // A memory limit too small for clang: the server dies, it is not a hang.
    let tiny = Limits {
        memory_limit: Some(8 << 20),
        ..Limits::default()
    };
    let mut server = Server::start(&bin, &tiny).unwrap();
    let r = server.compile(&req, soon());
    assert!(matches!(r, Err(ServerError::Died { .. })), "{r:?}");
}

/// Runs the server binary directly with `input` on its stdin.
fn run_raw(bin: &ServerBinary, input: &[u8]) -> child::Finished {
    let parts: [&[u8]; 1] = [input];
    let program = bin.program();
    let mut spec = Spec::new(&program, vec![std::process::id().to_string().into()]);
    spec.input = if input.is_empty() { &[] } else { &parts };
    spec.stdout_limit = 1 << 20;
    spec.deadline = Some(Instant::now() + Duration::from_secs(60));
    child::run(&spec).expect("the server ends by itself")
}

fn header(flags: u32, count: u32, zero: u32, args_len: u64, source_len: u64) -> Vec<u8> {
    let mut h = Vec::with_capacity(REQUEST_HEADER_SIZE);
    for v in [REQUEST_MAGIC, flags, count, zero] {
        h.extend_from_slice(&v.to_le_bytes());
    }
    h.extend_from_slice(&args_len.to_le_bytes());
    h.extend_from_slice(&source_len.to_le_bytes());
    h
}

#[test]
fn malformed_frames_end_the_server_with_an_error() {
    let c = compiler();
    let bin = binary(&c);
    assert_eq!(run_raw(&bin, b"").status.code(), Some(0));
    let mut cases: Vec<(&str, Vec<u8>)> = vec![
        ("a truncated header", header(0, 1, 0, 6, 0)[..10].to_vec()),
        ("a wrong magic", {
            let mut h = header(0, 1, 0, 6, 0);
            h[0] ^= 0xff;
            h
        }),
        ("unknown flags", header(2, 1, 0, 6, 0)),
        ("a non-zero reserved word", header(0, 1, 7, 6, 0)),
        ("no arguments", header(0, 0, 0, 0, 0)),
        ("too many arguments", header(0, u32::MAX, 0, 6, 0)),
        ("huge arguments", header(0, 1, 0, u64::MAX, 0)),
        ("a huge source", header(0, 1, 0, 6, u64::MAX)),
        (
            "a source just over the cap",
            header(0, 1, 0, 6, protocol::MAX_SOURCE_SIZE + 1),
        ),
    ];
    let mut truncated_args = header(0, 1, 0, 6, 0);
    truncated_args.extend_from_slice(b"cla");
    cases.push(("truncated arguments", truncated_args));
    let mut unended = header(0, 1, 0, 5, 0);
    unended.extend_from_slice(b"clang");
    cases.push(("an argument without its NUL", unended));
    let mut miscounted = header(0, 2, 0, 6, 0);
    miscounted.extend_from_slice(b"clang\0");
    cases.push(("a miscounted argument list", miscounted));
    let mut truncated_source = header(0, 1, 0, 6, 100);
    truncated_source.extend_from_slice(b"clang\0int x;");
    cases.push(("a truncated source", truncated_source));
    for (what, bytes) in cases {
        let out = run_raw(&bin, &bytes);
        assert_eq!(
            out.status.code(),
            Some(EXIT_MALFORMED),
            "{what}: {:?}, {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("malformed request"),
            "{what}"
        );
        // Only the ready frame was written.
        assert_eq!(out.stdout.len(), protocol::READY_SIZE, "{what}");
    }
    // Garbage of every length up to two headers.
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    for len in (1..2 * REQUEST_HEADER_SIZE).step_by(7) {
        let bytes: Vec<u8> = (0..len)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                seed as u8
            })
            .collect();
        let out = run_raw(&bin, &bytes);
        assert_eq!(
            out.status.code(),
            Some(EXIT_MALFORMED),
            "{len} random bytes"
        );
    }
}

#[test]
fn a_tampered_server_is_refused_and_rebuilt() {
    let c = compiler();
    let good = binary(&c);
    let root = std::env::temp_dir().join(format!("elfjit-server-tamper-{}", random_hex().unwrap()));
    let dir = PrivateDir::open(&root, true).unwrap();
    let name = good
        .path()
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()
        .to_string();
    let mut bytes = std::fs::read(good.path()).unwrap();
    let digest = std::fs::read(verified::digest_name(good.path().to_str().unwrap())).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x40;
    dir.write_file(&name, &[&bytes], 0o700).unwrap();
    dir.write_file(&verified::digest_name(&name), &[&digest], 0o600)
        .unwrap();
    assert!(matches!(
        verified::load(&dir, &name, 64 << 20),
        Err(Refused::Unsafe {
            reason: "digest-mismatch",
            ..
        })
    ));
    // The server for this clang in that directory: the tampered file is replaced by a
    // build, which then serves.
    let rebuilt = ServerBinary::for_compiler_in(&c, &root, None).unwrap();
    assert_eq!(rebuilt.path(), root.join(&name));
    assert!(rebuilt.build_log.is_some(), "it was built, not loaded");
    assert_ne!(std::fs::read(root.join(&name)).unwrap(), bytes);
    let mut server = Server::start(&rebuilt, &Limits::default()).unwrap();
    server.wait_ready(soon()).unwrap();
    drop(server);
    // Changed after it was verified: not started.
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(root.join(&name))
        .unwrap();
    std::os::unix::fs::FileExt::write_all_at(&f, b"\x01", middle as u64).unwrap();
    drop(f);
    match Server::start(&rebuilt, &Limits::default()) {
        Err(ServerError::Untrusted { why }) => assert!(why.contains("changed"), "{why}"),
        other => panic!("{other:?}"),
    }
    std::fs::remove_dir_all(&root).unwrap();
}

/// Resident memory of `pid` in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[test]
#[ignore = "10,000 compiles: about 5 minutes on a busy 2-core machine; run with --ignored"]
fn resident_memory_is_flat_over_ten_thousand_compiles() {
    let c = compiler();
    let bin = binary(&c);
    let mut server = Server::start(&bin, &Limits::default()).unwrap();
    let host = HostInfo::current();
    let opts = CompileOptions::new(Lang::C, Arch::X86_64);
    let args = request_args(&c, &opts, host);
    let mut after_warm_up = 0;
    for i in 0..10_000u32 {
        let source = format!("int k{i}(int a) {{ return a * {i} + 1; }}\n");
        let reply = server
            .compile(
                &Request {
                    args: &args,
                    source: source.as_bytes(),
                    want_dependencies: i % 2 == 0,
                },
                soon(),
            )
            .unwrap();
        assert_eq!(reply.status, 0);
        if i == 500 {
            after_warm_up = rss_kib(server.pid());
        }
    }
    let end = rss_kib(server.pid());
    eprintln!("server RSS after 500 compiles: {after_warm_up} KiB, after 10,000: {end} KiB");
    assert!(
        end * 10 <= after_warm_up * 11,
        "grew from {after_warm_up} KiB to {end} KiB"
    );
}

#[test]
fn requests_follow_elfjits_current_directory() {
    // The current directory is the whole process's: the test that changes it runs alone,
    // in a process of its own.
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "compile_server::tests::compiles_in_the_directory_elfjit_moved_to",
            "--ignored",
        ])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && said.contains("1 passed"),
        "{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
#[ignore = "changes the current directory: run alone by requests_follow_elfjits_current_directory"]
fn compiles_in_the_directory_elfjit_moved_to() {
    let c = compiler();
    let bin = binary(&c);
    // Started here, then elfjit moves: a relative -I and -g's directory are the new one's.
    let mut server = Server::start(&bin, &Limits::default()).unwrap();
    server.wait_ready(soon()).unwrap();
    let dir = std::env::temp_dir().join(format!("elfjit-server-cwd-{}", random_hex().unwrap()));
    std::fs::create_dir_all(dir.join("inc")).unwrap();
    std::fs::write(dir.join("inc/k.h"), "#define K 7\n").unwrap();
    let before = std::env::current_dir().unwrap();
    std::env::set_current_dir(&dir).unwrap();
    let mut opts = CompileOptions::new(Lang::C, Arch::X86_64);
    opts.debug_info = true;
    opts.extra_flags = vec!["-Iinc".into()];
    let host = HostInfo::current();
    let source = b"#include \"k.h\"\nint f(void) { return K; }\n";
    let args = request_args(&c, &opts, host);
    let reply = server
        .compile(
            &Request {
                args: &args,
                source,
                want_dependencies: false,
            },
            soon(),
        )
        .unwrap();
    let spawned = c.compile_for_host(source, &opts, host);
    std::env::set_current_dir(before).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(
        reply.status,
        0,
        "{}",
        String::from_utf8_lossy(&reply.diagnostics)
    );
    assert!(reply.object == spawned.unwrap());
}

/// Writes `text` over `path` with `mode` (files of a prebuilt directory are installed,
/// not private: the test changes them as a packager or an attacker would).
fn overwrite(path: &Path, bytes: &[u8], mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, bytes).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

#[test]
fn a_matching_prebuilt_server_is_used_without_a_build_and_a_mismatched_one_never() {
    use super::prebuilt::{self, Manifest};
    let c = compiler();
    let major = llvm_major(&c.version().unwrap()).unwrap();
    let scratch = std::env::temp_dir().join(format!("elfjit-prebuilt-{}", random_hex().unwrap()));
    let (pre, cache, work) = (
        scratch.join("pre"),
        scratch.join("cache"),
        scratch.join("w"),
    );
    std::fs::create_dir_all(&pre).unwrap();
    let built = binary::build_to(&c, &work, &pre).unwrap();
    assert_eq!(built, pre.join(prebuilt::server_file(major)));
    let manifest_path = pre.join(prebuilt::manifest_file(major));
    let manifest: Manifest =
        serde_json::from_slice(&std::fs::read(&manifest_path).unwrap()).unwrap();
    assert_eq!(manifest.llvm_major, major);
    assert!(
        manifest
            .libclang_cpp
            .starts_with(&format!("libclang-cpp.so.{major}")),
        "{manifest:?}"
    );

    // Used from the prebuilt directory: the (empty) cache directory gets no server.
    let bin = ServerBinary::for_compiler_in(&c, &cache, Some(&pre)).unwrap();
    assert!(bin.is_prebuilt() && bin.build_log.is_none(), "{bin:?}");
    assert_eq!(bin.path(), built);
    let cached: Vec<_> = std::fs::read_dir(&cache)
        .map(|d| d.map(|e| e.unwrap().file_name()).collect())
        .unwrap_or_default();
    assert!(
        !cached.iter().any(|n| is_server_file(&n.to_string_lossy())),
        "{cached:?}"
    );
    // Its objects are spawned clang's.
    let source =
        std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/kernels/layernorm.c"))
            .unwrap();
    let host = HostInfo::current();
    let opts = CompileOptions::new(Lang::C, Arch::X86_64);
    let args = request_args(&c, &opts, host);
    let mut server = Server::start(&bin, &Limits::default()).unwrap();
    let reply = server
        .compile(
            &Request {
                args: &args,
                source: &source,
                want_dependencies: false,
            },
            soon(),
        )
        .unwrap();
    assert_eq!(reply.status, 0);
    assert_eq!(
        reply.object,
        c.compile_for_host(&source, &opts, host).unwrap()
    );
    drop(server);

    let find = || prebuilt::find(&pre, major, 64 << 20).map(|v| v.map(|_| ()));
    assert_eq!(find(), Ok(Some(())));
    let good_manifest = std::fs::read(&manifest_path).unwrap();
    let good_server = std::fs::read(&built).unwrap();
    // A manifest for another major: not used for this clang.
    let other = Manifest {
        llvm_major: major + 1,
        ..manifest.clone()
    };
    overwrite(&manifest_path, &serde_json::to_vec(&other).unwrap(), 0o644);
    let why = find().unwrap_err();
    assert!(why.contains(&format!("is for LLVM {}", major + 1)), "{why}");
    // The server of another major only: nothing for this one (and nothing to say).
    std::fs::rename(&manifest_path, pre.join(prebuilt::manifest_file(major + 1))).unwrap();
    assert_eq!(find(), Ok(None));
    std::fs::remove_file(pre.join(prebuilt::manifest_file(major + 1))).unwrap();
    // Built from another server source.
    let stale = Manifest {
        source: "0".repeat(64),
        ..manifest.clone()
    };
    overwrite(&manifest_path, &serde_json::to_vec(&stale).unwrap(), 0o644);
    let why = find().unwrap_err();
    assert!(why.contains("another version"), "{why}");
    overwrite(&manifest_path, &good_manifest, 0o644);
    // A tampered binary.
    let mut tampered = good_server.clone();
    let middle = tampered.len() / 2;
    tampered[middle] ^= 0x40;
    overwrite(&built, &tampered, 0o755);
    let why = find().unwrap_err();
    assert!(why.contains("does not match its manifest"), "{why}");
    // Group-writable server, manifest or directory.
    overwrite(&built, &good_server, 0o775);
    let why = find().unwrap_err();
    assert!(why.contains("writable by its group"), "{why}");
    overwrite(&built, &good_server, 0o755);
    overwrite(&manifest_path, &good_manifest, 0o666);
    let why = find().unwrap_err();
    assert!(why.contains("writable by its group"), "{why}");
    overwrite(&manifest_path, &good_manifest, 0o644);
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&pre, std::fs::Permissions::from_mode(0o777)).unwrap();
        let why = find().unwrap_err();
        assert!(why.contains("writable by its group"), "{why}");
        std::fs::set_permissions(&pre, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    // A symbolic link at the server's name is not followed.
    std::fs::rename(&built, pre.join("real")).unwrap();
    std::os::unix::fs::symlink(pre.join("real"), &built).unwrap();
    let why = find().unwrap_err();
    assert!(why.contains("cannot open"), "{why}");
    std::fs::remove_file(&built).unwrap();
    std::fs::rename(pre.join("real"), &built).unwrap();
    assert_eq!(find(), Ok(Some(())));

    // A refused prebuilt server is passed over for the cache: here the user's cache,
    // where `binary` keeps (or builds) this clang's server.
    let from_cache = binary(&c);
    overwrite(&built, &tampered, 0o755);
    let fallback =
        ServerBinary::for_compiler_in(&c, &crate::cache::root_dir(), Some(&pre)).unwrap();
    assert!(!fallback.is_prebuilt(), "{fallback:?}");
    assert_eq!(fallback.path(), from_cache.path());
    std::fs::remove_dir_all(&scratch).unwrap();
}
