//! What to compile for ([`CompileOptions`]: language, target, `-O` level) and the
//! compile-flags table: which clang arguments each language, target and host get.
//!
//! Kept as data plus one function ([`clang_args`]) so the whole policy can be read (and
//! unit-tested) in one place; [`crate::clang`] runs clang with what it returns.

use elfjit_core::Arch;
use std::path::Path;

/// The language of a kernel's source text.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Lang {
    /// Freestanding C (`-x c`).
    C,
    /// LLVM IR text (`-x ir`).
    Ir,
}

impl Lang {
    /// Parses a `--lang` value: `c` or `ir` (`ll` is accepted as an alias of `ir`).
    pub fn from_name(name: &str) -> Option<Lang> {
        match name {
            "c" | "C" => Some(Lang::C),
            "ir" | "IR" | "ll" | "llvm" => Some(Lang::Ir),
            _ => None,
        }
    }

    /// Guesses the language from a file extension: `.c` is C, `.ll` is LLVM IR.
    pub fn from_path(path: &Path) -> Option<Lang> {
        match path.extension()?.to_str()? {
            "c" => Some(Lang::C),
            "ll" => Some(Lang::Ir),
            _ => None,
        }
    }

    /// The name `--lang` and `-x` use (`c`, `ir`).
    pub fn name(self) -> &'static str {
        match self {
            Lang::C => "c",
            Lang::Ir => "ir",
        }
    }
}

/// What to compile for and how.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompileOptions {
    /// Source language.
    pub lang: Lang,
    /// The architecture the object is for (the host, or a foreign one for emulated runs).
    pub target: Arch,
    /// `-O` level, 0 to 3 (larger values are treated as 3).
    pub opt_level: u8,
    /// Extra clang arguments appended after the table's flags (e.g. `-DN=16`).
    pub extra_flags: Vec<String>,
    /// DWARF debug information (`-g`): source lines for debuggers and `perf annotate`.
    pub debug_info: bool,
    /// Unwind tables (`-funwind-tables`), so panics and backtraces from callbacks unwind
    /// through the kernel (the loaded `.eh_frame` is registered with the unwinder).
    pub unwind_tables: bool,
}

impl CompileOptions {
    /// Options for `lang` and `target` at `-O2` with no extra flags.
    pub fn new(lang: Lang, target: Arch) -> CompileOptions {
        CompileOptions {
            lang,
            target,
            opt_level: 2,
            extra_flags: Vec::new(),
            debug_info: false,
            unwind_tables: false,
        }
    }
}

/// Flags every compile gets, whatever the language (`-O{n}` and `--target` are added
/// separately).
pub const COMMON_FLAGS: &[&str] = &["-c", "-fPIC", "-fno-math-errno", "-fno-stack-protector"];

/// Flags only the C back end gets: no hosted environment, no libc, no `.comment` section.
pub const C_FLAGS: &[&str] = &["-x", "c", "-ffreestanding", "-nostdlib", "-fno-ident"];

/// Flags only the LLVM IR back end gets: loop and SLP vectorisation. `-Wno-override-module`
/// silences the warning clang prints because `--target` replaces the module's own triple,
/// which is exactly what we want.
pub const IR_FLAGS: &[&str] = &[
    "-x",
    "ir",
    "-funroll-loops",
    "-fvectorize",
    "-fslp-vectorize",
    "-Wno-override-module",
];

/// What the flags depend on about the machine the kernel runs on (elfjit's own, unless a
/// target names another OS: `elfjit compile --target x86_64-windows`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostInfo {
    /// The host architecture, if elfjit supports it (`None`: every target is foreign).
    pub arch: Option<Arch>,
    /// The host OS as `std::env::consts::OS` spells it (`linux`, `macos`, `windows`, ...).
    pub os: &'static str,
}

/// Whether kernels for `arch` on `os` use the Windows x64 calling convention: x86_64
/// Windows, where they call the C runtime's DLLs (`expf` in ucrtbase) and the program calls
/// them as `extern "C"`; clang emits that convention in an ELF object for the triple
/// `x86_64-pc-windows-elf`. (aarch64 Windows uses AAPCS64, as the bare-metal triple does.)
pub fn windows_x64_abi(arch: Arch, os: &str) -> bool {
    arch == Arch::X86_64 && os == "windows"
}

impl HostInfo {
    /// The machine this process runs on: the core's [`Arch::host`] (`None` on a host
    /// elfjit does not target, big-endian ppc64 included) and the OS it was built for.
    pub fn current() -> HostInfo {
        HostInfo {
            arch: Arch::host(),
            os: std::env::consts::OS,
        }
    }
}

/// The architecture part of the `--target=<arch>-none-unknown-elf` triple.
pub fn triple_arch(arch: Arch) -> &'static str {
    match arch {
        Arch::X86_64 => "x86_64",
        Arch::Aarch64 => "aarch64",
        Arch::Riscv64 => "riscv64",
        Arch::Loongarch64 => "loongarch64",
        Arch::Ppc64le => "powerpc64le",
    }
}

/// The full bare-metal target triple clang is given for `arch`.
pub fn target_triple(arch: Arch) -> String {
    format!("{}-none-unknown-elf", triple_arch(arch))
}

/// CPU selection when compiling for the machine we run on: the host CPU.
fn native_cpu_flags(arch: Arch) -> &'static [&'static str] {
    match arch {
        Arch::X86_64 | Arch::Aarch64 | Arch::Loongarch64 => &["-march=native"],
        // clang has no `-march=native` for RISC-V; rv64gc with the Linux ABI (lp64d).
        Arch::Riscv64 => &["-march=rv64gc", "-mabi=lp64d"],
        Arch::Ppc64le => &["-mcpu=native"],
    }
}

/// CPU selection for a foreign architecture (emulated runs): a generic baseline CPU.
pub fn generic_cpu_flags(arch: Arch) -> &'static [&'static str] {
    match arch {
        Arch::X86_64 => &["-march=x86-64"],
        Arch::Aarch64 => &["-march=armv8-a"],
        Arch::Riscv64 => &["-march=rv64gc", "-mabi=lp64d"],
        Arch::Loongarch64 => &["-march=loongarch64"],
        // POWER8 is the oldest CPU of the little-endian ELFv2 ABI.
        Arch::Ppc64le => &["-mcpu=pwr8"],
    }
}

/// The clang arguments for one compile, without the input (`-`) and output (`-o -`).
pub fn clang_args(opts: &CompileOptions, host: HostInfo) -> Vec<String> {
    let mut args: Vec<String> = Vec::with_capacity(20);
    let lang_flags = match opts.lang {
        Lang::C => C_FLAGS,
        Lang::Ir => IR_FLAGS,
    };
    args.extend(lang_flags.iter().map(|s| s.to_string()));
    let windows_x64 = windows_x64_abi(opts.target, host.os);
    if windows_x64 {
        args.push("--target=x86_64-pc-windows-elf".to_string());
    } else {
        args.push(format!("--target={}", target_triple(opts.target)));
    }
    // Windows targets reject -fPIC; their code is RIP-relative anyway.
    let common = COMMON_FLAGS
        .iter()
        .filter(|f| !(windows_x64 && **f == "-fPIC"));
    args.extend(common.map(|s| s.to_string()));
    args.push(format!("-O{}", opts.opt_level.min(3)));
    let cpu = if host.arch == Some(opts.target) {
        native_cpu_flags(opts.target)
    } else {
        generic_cpu_flags(opts.target)
    };
    args.extend(cpu.iter().map(|s| s.to_string()));
    if opts.target == Arch::Aarch64 && matches!(host.os, "macos" | "windows") {
        // x18 is the platform register there; code must not touch it.
        args.push("-ffixed-x18".to_string());
    }
    if opts.debug_info {
        args.push("-g".to_string());
    }
    if opts.unwind_tables {
        // For IR this adds nothing to functions LLVM already gives an unwind entry (any
        // that may unwind: calls to functions not marked nounwind) and nothing to nounwind
        // leaves, which no unwind can pass through.
        args.push("-funwind-tables".to_string());
    }
    args.extend(opts.extra_flags.iter().cloned());
    args
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(arch: Arch, os: &'static str) -> HostInfo {
        HostInfo {
            arch: Some(arch),
            os,
        }
    }

    fn has(args: &[String], flag: &str) -> bool {
        args.iter().any(|a| a == flag)
    }

    #[test]
    fn c_flags_on_native_x86_64() {
        let opts = CompileOptions::new(Lang::C, Arch::X86_64);
        let args = clang_args(&opts, host(Arch::X86_64, "linux"));
        for f in [
            "-c",
            "-O2",
            "-fPIC",
            "-fno-math-errno",
            "-fno-stack-protector",
            "--target=x86_64-none-unknown-elf",
            "-ffreestanding",
            "-nostdlib",
            "-fno-ident",
            "-march=native",
        ] {
            assert!(has(&args, f), "{f} missing from {args:?}");
        }
        assert!(args.windows(2).any(|w| w[0] == "-x" && w[1] == "c"));
        for f in [
            "-funroll-loops",
            "-fvectorize",
            "-fslp-vectorize",
            "-ffixed-x18",
        ] {
            assert!(!has(&args, f), "{f} unexpected in {args:?}");
        }
    }

    #[test]
    fn ir_flags_differ_from_c() {
        let opts = CompileOptions::new(Lang::Ir, Arch::X86_64);
        let args = clang_args(&opts, host(Arch::X86_64, "linux"));
        assert!(args.windows(2).any(|w| w[0] == "-x" && w[1] == "ir"));
        for f in [
            "-funroll-loops",
            "-fvectorize",
            "-fslp-vectorize",
            "-fPIC",
            "-c",
        ] {
            assert!(has(&args, f), "{f} missing from {args:?}");
        }
        for f in ["-ffreestanding", "-nostdlib", "-fno-ident"] {
            assert!(!has(&args, f), "{f} unexpected in {args:?}");
        }
    }

    #[test]
    fn x18_reserved_only_on_aarch64_macos_and_windows() {
        let opts = CompileOptions::new(Lang::C, Arch::Aarch64);
        for os in ["macos", "windows"] {
            assert!(has(
                &clang_args(&opts, host(Arch::Aarch64, os)),
                "-ffixed-x18"
            ));
            // Cross-compiling for aarch64 from an x86_64 mac still reserves it.
            assert!(has(
                &clang_args(&opts, host(Arch::X86_64, os)),
                "-ffixed-x18"
            ));
        }
        assert!(!has(
            &clang_args(&opts, host(Arch::Aarch64, "linux")),
            "-ffixed-x18"
        ));
        let x86 = CompileOptions::new(Lang::C, Arch::X86_64);
        assert!(!has(
            &clang_args(&x86, host(Arch::X86_64, "macos")),
            "-ffixed-x18"
        ));
    }

    #[test]
    fn x86_64_windows_kernels_use_the_windows_x64_convention() {
        let opts = CompileOptions::new(Lang::C, Arch::X86_64);
        let args = clang_args(&opts, host(Arch::X86_64, "windows"));
        assert!(has(&args, "--target=x86_64-pc-windows-elf"), "{args:?}");
        assert!(!has(&args, "-fPIC"), "{args:?}");
        for os in ["linux", "macos", "freebsd"] {
            let args = clang_args(&opts, host(Arch::X86_64, os));
            assert!(has(&args, "--target=x86_64-none-unknown-elf"), "{args:?}");
            assert!(has(&args, "-fPIC"), "{args:?}");
        }
        let arm = CompileOptions::new(Lang::C, Arch::Aarch64);
        let args = clang_args(&arm, host(Arch::Aarch64, "windows"));
        assert!(has(&args, "--target=aarch64-none-unknown-elf"), "{args:?}");
    }

    #[test]
    fn foreign_targets_get_a_generic_cpu() {
        let h = host(Arch::X86_64, "linux");
        let cases: [(Arch, &[&str]); 4] = [
            (Arch::Aarch64, &["-march=armv8-a"]),
            (Arch::Riscv64, &["-march=rv64gc", "-mabi=lp64d"]),
            (Arch::Loongarch64, &["-march=loongarch64"]),
            (Arch::Ppc64le, &["-mcpu=pwr8"]),
        ];
        for (arch, want) in cases {
            let args = clang_args(&CompileOptions::new(Lang::C, arch), h);
            for w in want {
                assert!(has(&args, w), "{arch}: {w} missing from {args:?}");
            }
            assert!(!args.iter().any(|a| a.ends_with("=native")), "{args:?}");
        }
        let none = HostInfo {
            arch: None,
            os: "linux",
        };
        let args = clang_args(&CompileOptions::new(Lang::C, Arch::X86_64), none);
        assert!(has(&args, "-march=x86-64"));
    }

    #[test]
    fn native_cpu_per_arch() {
        for (arch, want) in [
            (Arch::Aarch64, "-march=native"),
            (Arch::Loongarch64, "-march=native"),
            (Arch::Ppc64le, "-mcpu=native"),
            (Arch::Riscv64, "-march=rv64gc"),
        ] {
            let args = clang_args(&CompileOptions::new(Lang::C, arch), host(arch, "linux"));
            assert!(has(&args, want), "{arch}: {args:?}");
        }
    }

    #[test]
    fn debug_info_and_unwind_tables_only_when_asked() {
        for lang in [Lang::C, Lang::Ir] {
            let mut opts = CompileOptions::new(lang, Arch::X86_64);
            let args = clang_args(&opts, host(Arch::X86_64, "linux"));
            assert!(
                !has(&args, "-g") && !has(&args, "-funwind-tables"),
                "{args:?}"
            );
            opts.debug_info = true;
            opts.unwind_tables = true;
            let args = clang_args(&opts, host(Arch::X86_64, "linux"));
            assert!(
                has(&args, "-g") && has(&args, "-funwind-tables"),
                "{args:?}"
            );
        }
    }

    #[test]
    fn triples_and_opt_level() {
        let mut opts = CompileOptions::new(Lang::C, Arch::Ppc64le);
        opts.opt_level = 0;
        opts.extra_flags.push("-DN=4".into());
        let args = clang_args(&opts, host(Arch::X86_64, "linux"));
        assert!(has(&args, "--target=powerpc64le-none-unknown-elf"));
        assert!(has(&args, "-O0"));
        assert_eq!(args.last().map(String::as_str), Some("-DN=4"));
        opts.opt_level = 9;
        assert!(has(&clang_args(&opts, host(Arch::X86_64, "linux")), "-O3"));
    }
}
