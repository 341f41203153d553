//! Arbitrary bytes as one object: parse, walk, plan and link.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = elfjit_fuzz::run_parse_plan(data);
});
