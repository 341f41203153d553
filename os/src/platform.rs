//! [`Platform`]: the operating systems elfjit's OS layer is written for, to name the one
//! that lacks something in an error.

use std::fmt;

/// An operating system with its own file in the OS layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Platform {
    /// Linux (and Android's kernel): everything elfjit uses.
    Linux,
    /// Windows (run under Wine in CI).
    Windows,
    /// macOS (built, never run here).
    MacOs,
    /// FreeBSD 13 and later (built, never run here).
    FreeBsd,
}

impl Platform {
    /// The platform this program was built for.
    pub const fn current() -> Platform {
        if cfg!(windows) {
            Platform::Windows
        } else if cfg!(target_os = "macos") {
            Platform::MacOs
        } else if cfg!(target_os = "freebsd") {
            Platform::FreeBsd
        } else {
            Platform::Linux
        }
    }
}

impl fmt::Display for Platform {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Platform::Linux => "Linux",
            Platform::Windows => "Windows",
            Platform::MacOs => "macOS",
            Platform::FreeBsd => "FreeBSD",
        })
    }
}
