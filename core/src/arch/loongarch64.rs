//! loongarch64 (LoongArch ELF psABI, LP64D).
//!
//! psABI: <https://loongson.github.io/LoongArch-Documentation/LoongArch-ELF-ABI-EN.html>
//!
//! Not implemented yet: every relocation type is reported as unsupported, so objects for
//! this architecture can be parsed and inspected but not linked.

use super::{Applied, Failure, RelocClass, RelocInput, StubInput};
use crate::error::RelocProblem;

/// Size of one far-call stub.
pub(crate) const STUB_SIZE: u64 = 16;
/// Whether stubs load their target through a GOT slot.
pub(crate) const STUB_USES_GOT: bool = false;
/// Whether HI/LO relocation pairs must be matched in the pre-scan.
pub(crate) const HAS_PAIRS: bool = false;

pub(crate) fn classify(r_type: u32) -> Option<RelocClass> {
    let _ = r_type;
    None
}

pub(crate) fn apply(r: &RelocInput, place: &mut [u8]) -> Result<Applied, Failure> {
    let _ = (r, place);
    Err(Failure {
        problem: RelocProblem::Unsupported,
        value: 0,
    })
}

pub(crate) fn write_stub(buf: &mut [u8], stub: &StubInput) -> Option<()> {
    let _ = (buf, stub);
    None
}

pub(crate) fn reloc_name(r_type: u32) -> &'static str {
    let _ = r_type;
    "unknown"
}
