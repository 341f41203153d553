//! Arbitrary bytes as calls on the code arena's safe API (elfjit-os): single and batch
//! allocations of arbitrary layouts, publish, publish_all, free, a second allocate, in
//! either mode. The model shared with os/tests/arena_props.rs checks after every call that
//! nothing handed out lies outside the arena or over a live module, that live modules'
//! bytes are intact and that every refusal is the typed error it must be.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../../os/tests/arena_model/mod.rs"]
mod arena_model;

fuzz_target!(|data: &[u8]| {
    arena_model::run_bytes(data);
});
