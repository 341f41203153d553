//! What the OS crate's integration tests share: compiling C with clang for the
//! architecture the test binary runs on (natively, or under qemu-user for cross targets;
//! clang is a host program, and qemu-user hands execve of a host binary to the host kernel).

#![allow(dead_code)] // each test binary uses its own subset

use elfjit_core::Arch;

#[path = "../../../core/tests/common/clang_run.rs"]
mod clang_run;

/// The bare-metal triple and the CPU/ABI flags elfjit's driver uses for this architecture.
pub fn target_flags() -> Vec<&'static str> {
    match Arch::host().expect("a supported host") {
        Arch::X86_64 => vec!["--target=x86_64-none-unknown-elf"],
        Arch::Aarch64 => vec!["--target=aarch64-none-unknown-elf", "-march=armv8-a"],
        Arch::Riscv64 => vec![
            "--target=riscv64-none-unknown-elf",
            "-march=rv64gc",
            "-mabi=lp64d",
        ],
        Arch::Loongarch64 => vec!["--target=loongarch64-none-unknown-elf"],
        Arch::Ppc64le => vec!["--target=powerpc64le-none-unknown-elf", "-mcpu=pwr8"],
    }
}

/// Compiles C `source` at `opt` with `flags` (triple and CPU) into an object.
pub fn compile_with(flags: &[&str], source: &str, opt: &str) -> Vec<u8> {
    let mut args = flags.to_vec();
    args.extend(["-c", opt, "-fPIC", "-ffreestanding", "-fno-math-errno"]);
    args.extend(["-fno-stack-protector", "-x", "c", "-", "-o", "-"]);
    clang_run::clang_output(&args, source.as_bytes())
}

/// Compiles C `source` at `opt` for the architecture this test runs on.
pub fn compile(source: &str, opt: &str) -> Vec<u8> {
    compile_with(&target_flags(), source, opt)
}
