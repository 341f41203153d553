//! elfjit-core: link ELF relocatable objects into memory for a JIT, without `std`,
//! without `unsafe` and, unless the `alloc` feature asks for it, without allocation.
//!
//! The flow is *plan, then link*. [`Plan::new_in`] parses and validates the objects and
//! decides everything from them alone: where each section goes, in three page-aligned
//! segments (code read/execute, read-only data, read/write data), what each symbol binds
//! to, which symbols need GOT slots and far-call stubs. The plan's tables are sized to
//! its input and live in storage the caller lends ([`PlanStorage`], sized by
//! [`PlanSizes::count`]); with the `alloc` feature, `Plan::new` allocates them at exactly
//! that size. [`Plan::link_in`] then asks a [`MemoryBackend`] for memory for each segment
//! ([`Layout`]), resolves undefined symbols through a [`SymbolResolver`], copies the
//! sections, applies the relocations against the *target* addresses the backend reports
//! ([`Placement`], which may differ from where the bytes are written), and asks the backend
//! to publish the image (protect the segments, flush the instruction cache). Linking only
//! reads the plan: one plan can be linked many times, at different addresses or into
//! different backends.
//!
//! Every input is validated; every failure is an [`Error`]; every range-limited relocation
//! is checked.
//!
//! Features: `alloc` (off by default) adds `Plan::new`, `Plan::new_named`, `Plan::link`
//! and `Plan::link_observed`, which allocate their tables, and
//! `PlanBuffers`, storage allocated once and lent to plan after plan.
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

#[cfg(feature = "alloc")]
extern crate alloc;

#[macro_use]
mod table;

pub mod arch;
pub mod bits;
pub mod elf;
pub mod error;
pub mod link;
pub mod memory;
mod names;
pub mod plan;

pub use arch::reloc::{Applied, Via};
pub use arch::Arch;
pub use error::{BackendError, Error, Location, Name, Range, RelocError, RelocProblem, Result};
pub use link::{Global, GlobalEntry, Image, RelocRecord, Stub};
pub use memory::{
    Layout, MemoryBackend, NoSymbols, Placement, Protection, Segment, SegmentKind, SegmentRequest,
    SliceBackend, SymbolResolver,
};
#[cfg(feature = "alloc")]
pub use plan::PlanBuffers;
pub use plan::{
    GotSlot, HighHalf, Input, LowHalf, NameEntry, ObjectEntry, Plan, PlanSizes, PlanStorage,
    SectionPlace, StubIndex, SymbolEntry,
};
