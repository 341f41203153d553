//! What the core's integration tests share: running clang on a pipe.

#![allow(dead_code)] // each test binary uses its own subset

mod clang_run;

/// Runs clang (`$ELFJIT_CLANG`, else `clang-19`) with `args`, `source` on stdin and the
/// object on stdout (`- -o -` is appended), and returns the object; clang's diagnostics
/// fail the test.
pub fn clang_object(args: &[&str], source: &[u8]) -> Vec<u8> {
    let mut all = args.to_vec();
    all.extend(["-", "-o", "-"]);
    clang_run::clang_output(&all, source)
}
