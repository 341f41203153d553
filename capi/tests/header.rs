//! The checked-in header `include/elfjit.h` is what cbindgen generates from `src/lib.rs`
//! today. To update it after changing the ABI:
//! `ELFJIT_BLESS=1 cargo test -p elfjit-capi --test header`.

use std::path::Path;

#[test]
fn header_matches_the_source() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(root.join("cbindgen.toml")).unwrap();
    let mut generated = Vec::new();
    cbindgen::Builder::new()
        .with_config(config)
        .with_src(root.join("src/lib.rs"))
        .generate()
        .expect("cbindgen could not read src/lib.rs")
        .write(&mut generated);
    let generated = String::from_utf8(generated).unwrap();
    let path = root.join("include/elfjit.h");
    if std::env::var_os("ELFJIT_BLESS").is_some() {
        std::fs::write(&path, &generated).unwrap();
    }
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        checked_in == generated,
        "{} is stale: regenerate it with `ELFJIT_BLESS=1 cargo test -p elfjit-capi --test header`\n\
         --- generated ---\n{generated}",
        path.display()
    );
}
