//! A full link of up to four arbitrary objects at an arbitrary target address and page size.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = elfjit_fuzz::run_link(data);
});
