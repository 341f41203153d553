//! cargo-fuzz targets over elfjit-core. The bodies live in `body.rs` (shared with the
//! regression replay in core/tests); this crate adds the embedded seed objects.

mod body;
pub use body::*;

/// The committed seed objects (fuzz/seeds/*.o): real clang output for five architectures.
pub fn seeds() -> &'static [&'static [u8]] {
    include!(concat!(env!("OUT_DIR"), "/seeds.rs"))
}
