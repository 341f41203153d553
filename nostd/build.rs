//! Compiles the corpus kernels listed in src/cases.rs with clang for loongarch64 (-O2, the
//! flags elfjit's driver uses for a foreign target) and writes `kernels.rs` into OUT_DIR:
//! one `include_bytes!` per object, in the order of `CASES`.

use std::path::{Path, PathBuf};
use std::process::Command;

#[allow(dead_code)] // the fields are read by the program, not here
mod cases {
    include!("src/cases.rs");
}

fn main() {
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    let kernels = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/kernels");
    let clang = std::env::var("ELFJIT_CLANG").unwrap_or_else(|_| "clang-19".into());
    println!("cargo:rerun-if-changed=src/cases.rs");
    println!("cargo:rerun-if-env-changed=ELFJIT_CLANG");

    let mut table = String::from("pub static OBJECTS: &[&[u8]] = &[\n");
    for case in cases::CASES {
        let source = kernels.join(case.file);
        println!("cargo:rerun-if-changed={}", source.display());
        let object = out.join(format!("{}.o", case.name));
        let mut cmd = Command::new(&clang);
        cmd.args([
            "--target=loongarch64-none-unknown-elf",
            "-march=loongarch64",
            "-O2",
            "-c",
            "-fPIC",
            "-fno-math-errno",
            "-fno-stack-protector",
        ]);
        if case.file.ends_with(".ll") {
            cmd.args([
                "-x",
                "ir",
                "-funroll-loops",
                "-fvectorize",
                "-fslp-vectorize",
                "-Wno-override-module",
            ]);
        } else {
            cmd.args(["-x", "c", "-ffreestanding", "-nostdlib", "-fno-ident"]);
        }
        let status = cmd
            .arg(&source)
            .arg("-o")
            .arg(&object)
            .status()
            .unwrap_or_else(|e| panic!("running {clang} (set ELFJIT_CLANG): {e}"));
        assert!(status.success(), "{clang} failed on {}", source.display());
        table.push_str(&format!(
            "    include_bytes!({:?}),\n",
            object.display().to_string()
        ));
    }
    table.push_str("];\n");
    std::fs::write(out.join("kernels.rs"), table).expect("writing kernels.rs");
}
