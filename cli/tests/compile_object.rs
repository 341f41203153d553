//! `elfjit compile FILE -o OUT.o [--target ARCH[-OS]]` and `elfjit run OUT.o`: a kernel
//! with a read-only table, a global, `expf` and a far call, compiled to an object and run
//! from it gives the answer running the source gives; a target naming another OS compiles
//! for it and is refused by `run`.

use std::process::{Command, Output, Stdio};

mod support;
use support::{stderr, stdout, Scratch};

fn elfjit(args: &[&std::ffi::OsStr]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_elfjit"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("start elfjit")
}

const KERNEL: &str = r#"
extern float expf(float);
static const float table[4] = {0.5f, 1.5f, 2.5f, 3.5f};
int calls;
float kern(int n, float x) {
    float s = 0;
    for (int i = 0; i < n; i++) s += table[i & 3] * expf(x * i);
    return s + ++calls;
}
"#;

/// `elfjit run FILE` of the kernel, its JSON `return`.
fn run_return(file: &std::path::Path) -> String {
    let o = elfjit(&[
        "run".as_ref(),
        file.as_os_str(),
        "--arg=i32:5".as_ref(),
        "--arg=f32:0.25".as_ref(),
        "--ret=f32".as_ref(),
        "--json".as_ref(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let json: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("json");
    json["return"].to_string()
}

#[test]
fn a_compiled_object_runs_with_the_answer_of_its_source() {
    let d = Scratch::new("compile-object");
    let source = d.write("kern.c", KERNEL);
    let object = d.path().join("kern.o");
    let o = elfjit(&[
        "compile".as_ref(),
        source.as_os_str(),
        "-o".as_ref(),
        object.as_os_str(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let bytes = std::fs::read(&object).expect("object written");
    assert_eq!(bytes.get(..4), Some(&b"\x7fELF"[..]));
    let want: f32 = (0..5)
        .map(|i| [0.5f32, 1.5, 2.5, 3.5][i & 3] * (0.25 * i as f32).exp())
        .sum::<f32>()
        + 1.0;
    let from_source = run_return(&source);
    assert_eq!(run_return(&object), from_source);
    let got: f32 = from_source.parse().expect("a number");
    assert!((got - want).abs() <= want * 1e-6, "{got} != {want}");
}

#[test]
fn a_target_naming_another_os_compiles_for_it_and_is_not_run_here() {
    let d = Scratch::new("compile-os");
    let source = d.write("kern.c", KERNEL);
    let host = d.path().join("host.o");
    let windows = d.path().join("windows.o");
    for (target, out) in [("x86_64", &host), ("x86_64-windows", &windows)] {
        let o = elfjit(&[
            "compile".as_ref(),
            source.as_os_str(),
            "--target".as_ref(),
            target.as_ref(),
            "-o".as_ref(),
            out.as_os_str(),
        ]);
        assert!(o.status.success(), "{target}: {}", stderr(&o));
    }
    let (host, windows) = (
        std::fs::read(host).unwrap(),
        std::fs::read(&windows).unwrap(),
    );
    // Both x86_64 ELF objects (e_machine 62), with different code: the Windows x64
    // convention takes the first argument in ecx, not edi.
    assert_eq!(windows.get(18..20), Some(&[62u8, 0][..]));
    assert_ne!(host, windows);
    let o = elfjit(&["inspect".as_ref(), d.path().join("windows.o").as_os_str()]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("object: x86_64"), "{}", stdout(&o));
    let other = if cfg!(windows) {
        "x86_64-linux"
    } else {
        "x86_64-windows"
    };
    let o = elfjit(&[
        "run".as_ref(),
        source.as_os_str(),
        "--target".as_ref(),
        other.as_ref(),
    ]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("use `elfjit compile --target"),
        "{}",
        stderr(&o)
    );
    let o = elfjit(&[
        "compile".as_ref(),
        source.as_os_str(),
        "--target=x86_64-plan9".as_ref(),
        "-o".as_ref(),
        "x.o".as_ref(),
    ]);
    assert!(
        stderr(&o).contains("unknown --target `x86_64-plan9`"),
        "{}",
        stderr(&o)
    );
}
