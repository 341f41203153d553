//! A precompiled object run by the native executor (what `elfjit run k.o` does: no
//! compile): a libffi call with integers, floats, doubles and pointers, more arguments than
//! any convention passes in registers, a C runtime call (`expf`) and a global; and objects
//! the loader refuses, each a typed error. On every host the tests run on: on Windows the
//! kernel uses the Windows x64 convention and was compiled on Linux (common/objects.rs).

use elfjit::{Arch, ArgOutcome, ArgSpec, CompileOptions, Compiler, Lang, RetType, RunRequest};
use elfjit::{Module, Scalar};

#[path = "common/objects.rs"]
mod objects;

/// Ten arguments of six types; writes through both pointers and reads a global.
const KERNEL: &str = r#"
extern float expf(float);
int scale = 3;
double mix(int a, float b, double *p, double c, long long d, float e, int *out, double f,
           short g, unsigned char h) {
    out[0] = a * scale + g;
    out[1] = h;
    p[0] = p[0] + expf(b);
    return a + b + p[1] + c + (double)d + e + f + g + h;
}
"#;

fn object(source: &str) -> Vec<u8> {
    let host = Arch::host().expect("a supported host");
    objects::driver_object(source, &CompileOptions::new(Lang::C, host))
}

#[test]
fn a_precompiled_object_runs_with_ten_mixed_arguments() {
    let mut req = RunRequest::new("", Lang::C);
    req.object = Some(object(KERNEL));
    req.entry = Some("mix".into());
    req.ret = RetType::F64;
    req.args = [
        "i32:7",
        "f32:0.5",
        "f64[2]=1.25,2.5",
        "f64:10",
        "i64:-4000000000",
        "f32:2.25",
        "i32[2]",
        "f64:100.125",
        "i16:-9",
        "u8:200",
    ]
    .iter()
    .map(|s| ArgSpec::parse(s).expect("spec"))
    .collect();
    // On Windows `Compiler` only names a clang: nothing is compiled for an object.
    let compiler = Compiler::find().expect("a compiler");
    // SAFETY: the specs match `mix`'s C signature; the buffers are as long as it reads.
    let outcome = unsafe { elfjit::run_with(&compiler, &req) }.expect("run");
    let want = 7.0 + 0.5 + 2.5 + 10.0 - 4_000_000_000.0 + 2.25 + 100.125 - 9.0 + 200.0;
    assert_eq!(outcome.ret, Some(Scalar::F64(want)));
    let buffer = |i: usize| match outcome.args.get(i) {
        Some(ArgOutcome::Buffer(b)) => b.values(),
        other => panic!("argument {i} is not a buffer: {}", other.is_some()),
    };
    assert_eq!(buffer(6), [Scalar::I32(7 * 3 - 9), Scalar::I32(200)]);
    let p = buffer(2);
    let Some(Scalar::F64(p0)) = p.first().copied() else {
        panic!("{p:?}");
    };
    assert!((p0 - (1.25 + 0.5f64.exp())).abs() < 1e-6, "{p0}");
    assert_eq!(p.get(1), Some(&Scalar::F64(2.5)));
}

#[test]
fn objects_the_loader_refuses_are_typed_errors() {
    let good = object("int add(int a, int b) { return a + b; }");
    let not_elf = Module::load(b"MZ this is not an ELF object")
        .err()
        .expect("refused");
    assert!(!not_elf.to_string().is_empty());
    for len in [0, 16, 64, good.len() / 2] {
        let cut = good.get(..len).expect("a prefix");
        assert!(Module::load(cut).is_err(), "{len} of {} bytes", good.len());
    }
    let unresolved = Module::load(&object(
        "extern int nowhere_to_be_found(int); int f(int x) { return nowhere_to_be_found(x); }",
    ))
    .err()
    .expect("refused");
    assert!(
        unresolved.to_string().contains("nowhere_to_be_found"),
        "{unresolved}"
    );
    // The intact object still loads and runs.
    let module = Module::load(&good).expect("load");
    // SAFETY: `add` is `int add(int, int)`; `module` outlives the call.
    let add: extern "C" fn(i32, i32) -> i32 =
        unsafe { std::mem::transmute(module.symbol("add").expect("add")) };
    assert_eq!(add(40, 2), 42);
}
