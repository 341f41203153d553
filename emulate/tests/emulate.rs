//! The emulated runner's build and cache: it builds warnings-clean for every architecture,
//! with `elfjit_far_add` placed where the image layout says, and a corrupt cache entry is
//! rebuilt rather than trusted.

use elfjit::{Arch, Compiler};
use elfjit_emulate::runner::{load_or_build, qemu_name};
use elfjit_emulate::{FAR_ADDRESS, IMAGE_BASE, IMAGE_LIMIT};

fn scratch(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("elfjit-runner-test-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

#[test]
fn runner_builds_clean_for_every_arch_and_is_cached() {
    let compiler = Compiler::find().expect("clang");
    const { assert!(FAR_ADDRESS - (IMAGE_BASE + IMAGE_LIMIT) > 4 << 30) };
    let dir = scratch("all");
    let runners: Vec<_> = Arch::ALL
        .iter()
        .map(|&arch| load_or_build(&compiler, arch, &dir).unwrap_or_else(|e| panic!("{e}")))
        .collect();
    for built in runners {
        let arch = built.arch;
        let log = built.build_log.as_deref().expect("a fresh cache builds");
        assert!(log.trim().is_empty(), "{arch}: clang warned:\n{log}");
        assert_eq!(
            built.symbols.get("elfjit_far_add"),
            Some(&FAR_ADDRESS),
            "{arch}"
        );
        for name in [
            "memcpy",
            "expf",
            "__udivti3",
            "__truncsfbf2",
            "__extendhfsf2",
        ] {
            let a = *built
                .symbols
                .get(name)
                .unwrap_or_else(|| panic!("{arch}: no {name}"));
            // The runner sits just above the image; the far function far away.
            assert!(
                (IMAGE_BASE + IMAGE_LIMIT..FAR_ADDRESS).contains(&a),
                "{arch} {name} {a:#x}"
            );
        }
        // Internals are not exported to kernels.
        assert!(!built.symbols.contains_key("runner_main"), "{arch}");
        // Second time: loaded from the cache, not rebuilt.
        let again = load_or_build(&compiler, arch, &dir).unwrap();
        assert!(again.build_log.is_none(), "{arch}");
        assert_eq!(again.path, built.path);
        // A corrupt entry (here: another architecture's runner, then garbage) is rebuilt.
        let other = if arch == Arch::X86_64 {
            Arch::Aarch64
        } else {
            Arch::X86_64
        };
        let other_runner = load_or_build(&compiler, other, &dir).unwrap();
        std::fs::copy(&other_runner.path, &built.path).unwrap();
        assert!(
            load_or_build(&compiler, arch, &dir)
                .unwrap()
                .build_log
                .is_some(),
            "{arch}"
        );
        std::fs::write(&built.path, b"\x7fELF garbage").unwrap();
        let rebuilt = load_or_build(&compiler, arch, &dir).unwrap();
        assert!(rebuilt.build_log.is_some(), "{arch}");
        assert_eq!(rebuilt.symbols, built.symbols);
        assert!(qemu_name(arch).starts_with("qemu-"));
    }
    // Only runners are left behind: no temporary build directories or files.
    for entry in std::fs::read_dir(&dir).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        assert!(
            name.starts_with("runner-") && !name.contains(".tmp"),
            "{name}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
