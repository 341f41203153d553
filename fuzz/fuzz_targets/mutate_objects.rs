//! Structure-aware: real clang objects of all five architectures (fuzz/seeds/) with their
//! relocation entries, symbols and section headers edited field by field, then linked.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = elfjit_fuzz::run_mutate(data, elfjit_fuzz::seeds());
});
