//! Runs every corpus kernel on the host through the whole pipeline (clang -c on a pipe,
//! the in-memory loader, libffi) at -O0, -O1, -O2 and -O3, checking every output against the
//! Rust reference in `elfjit_tests`. One `#[test]` per kernel, so a failure names it;
//! each test reports every optimisation level before failing.
//!
//! Also, without running anything: every kernel compiles for every architecture it
//! claims to support, and every `not_on` entry is a real clang rejection.

use elfjit::clang::{CompileOptions, Compiler};
use elfjit::{Arch, CompileError};
use elfjit_tests::{case, check_case, corpus, kernel_source, Case};

fn host() -> Arch {
    Arch::host().expect("the tests run on an architecture elfjit supports")
}

/// Runs `name` on the host at each level in `levels`, collecting every failure.
fn run_levels(name: &str, levels: &[u8]) {
    let c = case(name);
    let h = host();
    if let Some(why) = c.not_valid_on(h) {
        // Not a silent skip: the claim itself is checked by `not_on_entries_are_real`.
        eprintln!("{name}: not valid on {h} ({why}); checking that clang rejects it");
        expect_rejected(&c, h, why);
        return;
    }
    let failures: Vec<String> = levels
        .iter()
        .filter_map(|&opt| check_case(&c, h, opt).err())
        .collect();
    assert!(failures.is_empty(), "\n{}\n", failures.join("\n"));
}

macro_rules! corpus_tests {
    ($($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                run_levels(stringify!($name), &[0, 1, 2, 3]);
            }
        )*

        /// The list above must name every corpus case exactly once.
        #[test]
        fn every_case_has_a_test() {
            let mut listed = vec![$(stringify!($name)),*];
            listed.sort_unstable();
            let mut all: Vec<&str> = corpus().iter().map(|c| c.name).collect();
            all.sort_unstable();
            assert_eq!(listed, all, "corpus_tests! and corpus() disagree");
        }
    };
}

corpus_tests!(
    elementwise_sqrt_fma,
    softmax_expf,
    reduce_sumsq,
    matmul_vec4,
    crc32_lut,
    string_table,
    data_bss_state,
    static_helpers,
    switch_jumptable,
    struct_memcpy,
    many_args,
    ret_i64,
    ret_f64,
    int128_div,
    f16_convert,
    bf16_convert,
    layernorm,
    quantize_i8,
    dispatch_table,
    global_data_got,
    ir_saxpy,
    ir_vec4_bias_relu,
    ir_sigmoid_expf,
    ir_dot_reassoc,
    ir_globals_i64,
);

/// A fresh module starts from the object's initial .data/.bss: running the stateful
/// kernels twice gives the first-call results both times.
#[test]
fn state_is_fresh_per_run() {
    let h = host();
    for name in ["data_bss_state", "ir_globals_i64"] {
        let c = case(name);
        for round in 0..2 {
            if let Err(e) = check_case(&c, h, 2) {
                panic!("round {round}: {e}");
            }
        }
    }
}

fn compile_for(compiler: &Compiler, c: &Case, arch: Arch) -> Result<Vec<u8>, CompileError> {
    let opts = CompileOptions::new(c.lang(), arch);
    compiler.compile(&kernel_source(c.file), &opts)
}

fn expect_rejected(c: &Case, arch: Arch, why: &str) {
    let compiler = Compiler::find().expect("clang");
    match compile_for(&compiler, c, arch) {
        Err(CompileError::ClangFailed { stderr, .. }) => {
            // The reason quotes clang's diagnostic; it must still be what clang says.
            let quoted = why.split('"').nth(1).unwrap_or(why);
            assert!(
                stderr.contains(quoted),
                "{} on {arch}: clang's error changed; table says {why:?}, clang says:\n{stderr}",
                c.name
            );
        }
        Err(e) => panic!("{} on {arch}: expected a clang rejection, got: {e}", c.name),
        Ok(_) => panic!(
            "{} compiles for {arch}: remove its `not_on` entry ({why})",
            c.name
        ),
    }
}

/// Every kernel compiles (-O2, the driver's flags) for every architecture it does not
/// list in `not_on`, and is an ELF64 relocatable object for that machine.
#[test]
fn compiles_for_every_claimed_architecture() {
    let compiler = Compiler::find().expect("clang");
    let mut failures = Vec::new();
    for c in corpus() {
        for arch in Arch::ALL {
            if c.not_valid_on(arch).is_some() {
                continue;
            }
            match compile_for(&compiler, &c, arch) {
                Ok(obj) => {
                    let machine = u16::from_le_bytes([obj[18], obj[19]]);
                    let want = match arch {
                        Arch::X86_64 => 62,
                        Arch::Aarch64 => 183,
                        Arch::Riscv64 => 243,
                        Arch::Loongarch64 => 258,
                        Arch::Ppc64le => 21,
                    };
                    if &obj[..4] != b"\x7fELF" || obj[4] != 2 || obj[16] != 1 || machine != want {
                        failures.push(format!(
                            "{} for {arch}: not an ELF64 REL for e_machine {want}",
                            c.name
                        ));
                    }
                }
                Err(e) => failures.push(format!("{} for {arch}: {e}", c.name)),
            }
        }
    }
    assert!(failures.is_empty(), "\n{}\n", failures.join("\n"));
}

/// Every `not_on` entry is true: clang really rejects the kernel there, with the
/// diagnostic the reason quotes.
#[test]
fn not_on_entries_are_real() {
    let mut n = 0;
    for c in corpus() {
        for &(arch, why) in c.not_on {
            expect_rejected(&c, arch, why);
            n += 1;
        }
    }
    assert_eq!(n, 4, "update this count when the portability table changes");
}
