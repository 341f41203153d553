//! Embeds every object in seeds/ so the structure-aware target needs no files at run time.
use std::fmt::Write;

fn main() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("seeds");
    println!("cargo:rerun-if-changed={}", dir.display());
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    files.retain(|p| p.extension().is_some_and(|e| e == "o"));
    files.sort();
    let mut out = String::from("&[\n");
    for f in files {
        let _ = writeln!(out, "    include_bytes!({:?}),", f.display().to_string());
    }
    out.push(']');
    let dest = std::path::Path::new(&std::env::var("OUT_DIR").unwrap_or_default()).join("seeds.rs");
    std::fs::write(dest, out).unwrap_or_else(|e| panic!("writing seeds.rs: {e}"));
}
