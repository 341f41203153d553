//! What the core's integration tests share: running clang on a pipe.

use std::io::Write;
use std::process::{Command, Stdio};

/// Runs clang (`$ELFJIT_CLANG`, else `clang-19`) with `args`, `source` on stdin and the
/// object on stdout (`- -o -` is appended), and returns the object; clang's diagnostics
/// fail the test.
pub fn clang_object(args: &[&str], source: &[u8]) -> Vec<u8> {
    let clang = std::env::var("ELFJIT_CLANG").unwrap_or_else(|_| "clang-19".into());
    let mut child = Command::new(clang)
        .args(args)
        .args(["-", "-o", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("clang-19 (set ELFJIT_CLANG)");
    child.stdin.take().unwrap().write_all(source).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}
