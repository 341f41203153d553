//! The compiler memory limit: how much memory a compiler process (clang, and any compiler
//! process elfjit keeps running) may take, as a setting.
//!
//! The default is [`DEFAULT_COMPILE_MEMORY`]; `ELFJIT_COMPILE_MEMORY` changes it for the
//! process (`1G`, `512M`, `0` for no limit). [`crate::child::Spec::memory_limit`] is how a
//! child is run under it, [`crate::child::limit_memory`] how the limit is put on a process.

use crate::bounded::describe_size;
use crate::error::{Error, Result};

/// The environment variable that sets the compiler memory limit.
pub const COMPILE_MEMORY_ENV: &str = "ELFJIT_COMPILE_MEMORY";

/// The compiler memory limit when `ELFJIT_COMPILE_MEMORY` is unset: 4 GiB, far above what
/// an ordinary kernel needs (clang compiles one in well under 512 MiB) and below what
/// would take a developer machine down. (None on macOS, which cannot enforce one on a
/// child: see docs/os-support.md.)
pub const DEFAULT_COMPILE_MEMORY: u64 = 4 << 30;

/// The limit when the variable is unset or empty: [`DEFAULT_COMPILE_MEMORY`], or none
/// where a child's memory limit cannot be enforced (macOS).
pub fn default_compile_memory() -> Option<u64> {
    #[cfg(unix)]
    let applies = crate::platform::COMPILE_MEMORY_BY_DEFAULT;
    // Windows compiles nothing (`compile_windows.rs`): the setting is only parsed.
    #[cfg(not(unix))]
    let applies = true;
    applies.then_some(DEFAULT_COMPILE_MEMORY)
}

/// The compiler memory limit this process's environment asks for: `Some(bytes)`, or
/// `None` for no limit (`ELFJIT_COMPILE_MEMORY=0`). Unset or empty is the default; a
/// value that is not a size is an error naming the variable and the value.
pub fn compile_memory_from_env() -> Result<Option<u64>> {
    compile_memory_from(std::env::var_os(COMPILE_MEMORY_ENV).as_deref())
}

/// [`compile_memory_from_env`] with the variable's value passed in (`None`: unset).
pub fn compile_memory_from(value: Option<&std::ffi::OsStr>) -> Result<Option<u64>> {
    match value {
        None => Ok(default_compile_memory()),
        Some(value) => {
            let text = value.to_str().ok_or_else(|| Error::BadArgument {
                what: format!("{COMPILE_MEMORY_ENV} `{}`", value.to_string_lossy()),
                reason: "not UTF-8".to_string(),
            })?;
            if text.trim().is_empty() {
                return Ok(default_compile_memory());
            }
            parse_memory_size(text).map_err(|reason| Error::BadArgument {
                what: format!("{COMPILE_MEMORY_ENV} `{text}`"),
                reason,
            })
        }
    }
}

/// Parses a memory size: a whole number of bytes, optionally followed by `K`, `M`, `G` or
/// `T` (powers of 1024; `KiB`, `MB`, `g`... are accepted too). `0` is `None`: no limit.
/// The error says what is wrong.
pub fn parse_memory_size(text: &str) -> std::result::Result<Option<u64>, String> {
    let text = text.trim();
    let digits_end = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(digits_end);
    let expected = "expected a size such as 4G, 512M, 65536K or 1073741824 (bytes), or 0 \
                    for no limit";
    if number.is_empty() {
        return Err(expected.to_string());
    }
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => return Err(format!("unknown unit `{}`; {expected}", unit.trim())),
    };
    let value = number
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(1u64 << shift))
        .ok_or_else(|| format!("larger than {} bytes", u64::MAX))?;
    Ok((value != 0).then_some(value))
}

/// Whether a compiler's diagnostics say an allocation failed: LLVM's out-of-memory
/// handler reports `LLVM ERROR: out of memory` / `Allocation failed` (then clang's driver
/// exits with 1, or the process dies of `SIGABRT`), the C++ runtime `std::bad_alloc`. A
/// compiler that failed with this under a limit ran out of it.
pub fn says_out_of_memory(stderr: &[u8]) -> bool {
    let stderr = String::from_utf8_lossy(stderr);
    [
        "LLVM ERROR: out of memory",
        "Allocation failed",
        "std::bad_alloc",
    ]
    .iter()
    .any(|marker| stderr.contains(marker))
}

/// How a limit reads in messages: `1 GiB (ELFJIT_COMPILE_MEMORY)`.
pub fn describe_limit(bytes: u64) -> String {
    format!("{} ({COMPILE_MEMORY_ENV})", describe_size(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_in_binary_units() {
        assert_eq!(parse_memory_size("1G"), Ok(Some(1 << 30)));
        assert_eq!(parse_memory_size("512M"), Ok(Some(512 << 20)));
        assert_eq!(parse_memory_size("512mib"), Ok(Some(512 << 20)));
        assert_eq!(parse_memory_size(" 4 GiB "), Ok(Some(4 << 30)));
        assert_eq!(parse_memory_size("65536K"), Ok(Some(64 << 20)));
        assert_eq!(parse_memory_size("2t"), Ok(Some(2 << 40)));
        assert_eq!(parse_memory_size("1073741824"), Ok(Some(1 << 30)));
        assert_eq!(parse_memory_size("100b"), Ok(Some(100)));
    }

    #[test]
    fn zero_is_no_limit() {
        assert_eq!(parse_memory_size("0"), Ok(None));
        assert_eq!(parse_memory_size("0G"), Ok(None));
    }

    #[test]
    fn bad_values_say_why() {
        for bad in ["", "G", "-1G", "1.5G", "1X", "1GG", "one", "0x10"] {
            let err = parse_memory_size(bad).unwrap_err();
            assert!(err.contains("expected a size"), "{bad}: {err}");
        }
        let err = parse_memory_size("99999999999T").unwrap_err();
        assert!(err.contains("larger than"), "{err}");
        let err = parse_memory_size(&format!("{}0", u64::MAX)).unwrap_err();
        assert!(err.contains("larger than"), "{err}");
    }

    #[test]
    fn the_setting_defaults_and_names_itself_when_wrong() {
        use std::ffi::OsStr;
        let default = Some(DEFAULT_COMPILE_MEMORY);
        assert_eq!(compile_memory_from(None).unwrap(), default);
        assert_eq!(compile_memory_from(Some(OsStr::new(" "))).unwrap(), default);
        assert_eq!(compile_memory_from(Some(OsStr::new("0"))).unwrap(), None);
        assert_eq!(
            compile_memory_from(Some(OsStr::new("1G"))).unwrap(),
            Some(1 << 30)
        );
        let msg = compile_memory_from(Some(OsStr::new("lots")))
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("ELFJIT_COMPILE_MEMORY `lots`") && msg.contains("512M"),
            "{msg}"
        );
        use std::os::unix::ffi::OsStrExt;
        let msg = compile_memory_from(Some(OsStr::from_bytes(b"1\xffG")))
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("ELFJIT_COMPILE_MEMORY") && msg.contains("UTF-8"),
            "{msg}"
        );
    }

    #[test]
    fn out_of_memory_reports_are_recognised() {
        assert!(says_out_of_memory(
            b"LLVM ERROR: out of memory\nAllocation failed\n"
        ));
        assert!(says_out_of_memory(
            b"terminate called after throwing std::bad_alloc"
        ));
        assert!(!says_out_of_memory(b"<stdin>:1:5: error: expected ';'"));
    }

    #[test]
    fn limits_are_described_with_the_variable() {
        assert_eq!(describe_limit(1 << 30), "1 GiB (ELFJIT_COMPILE_MEMORY)");
        assert_eq!(describe_limit(1000), "1000 bytes (ELFJIT_COMPILE_MEMORY)");
    }
}
