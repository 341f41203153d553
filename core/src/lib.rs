//! elfjit-core: link ELF relocatable objects into memory for a JIT, without `std`,
//! without allocation and without `unsafe`.
//!
//! The flow is *plan, then link*. [`Plan::new`] parses and validates the objects and
//! decides everything from them alone: where each section goes, in three page-aligned
//! segments (code read/execute, read-only data, read/write data), which symbols need GOT
//! slots and far-call stubs. [`Plan::link`] then asks a [`MemoryBackend`] for memory for
//! each segment ([`Layout`]), copies the sections, resolves undefined symbols through a
//! [`SymbolResolver`], applies the relocations against the *target* addresses the backend
//! reports ([`Placement`], which may differ from where the bytes are written), and asks the
//! backend to publish the image (protect the segments, flush the instruction cache).
//!
//! Every input is validated; every failure is an [`Error`]; every range-limited relocation
//! is checked. Tables are fixed-capacity (see the `MAX_*` constants).
#![no_std]
#![forbid(unsafe_code)]
// No panics in the library: every fallible step is an `Error` (tests may unwrap).
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        clippy::indexing_slicing
    )
)]

pub mod arch;
pub mod bits;
pub mod elf;
pub mod error;
pub mod link;
pub mod memory;
pub mod plan;

pub use arch::reloc::{Applied, Via};
pub use arch::Arch;
pub use error::{BackendError, Error, Location, Name, Range, RelocError, RelocProblem, Result};
pub use link::{Global, Image, RelocRecord, Stub};
pub use memory::{
    Layout, MemoryBackend, NoSymbols, Placement, Protection, Segment, SegmentKind, SegmentRequest,
    SliceBackend, SymbolResolver,
};
pub use plan::{Plan, SectionPlace};
