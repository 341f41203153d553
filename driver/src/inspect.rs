//! `elfjit inspect`: the planned layout of an object, as text. (Being written with the core.)

use crate::error::{Error, Result};
use elfjit_core::Arch;

/// Plans and links `object` for `target` at a notional address and describes the result:
/// segments, sections with addresses, symbols, each relocation with its computed value,
/// stubs and GOT slots.
pub fn report(object: &[u8], target: Arch) -> Result<String> {
    let _ = (object, target);
    Err(Error::Unsupported("inspect not yet written".into()))
}
