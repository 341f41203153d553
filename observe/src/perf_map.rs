//! The perf map: `/tmp/perf-<pid>.map`, one text line `START SIZE name` (hex, no `0x`) per
//! piece of JIT code (`tools/perf/Documentation/jit-interface.txt`). perf reads it when it
//! resolves samples in anonymous executable memory. Lines are only ever appended, so a
//! range reused by a later module gets a new line, and other JITs in the process (CPython's
//! perf trampolines, a JVM) can share the file.

use crate::published::CodeRange;
use crate::safe_file;
use std::fmt::Write as _;
use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// The open perf map of this process.
pub(crate) struct PerfMap {
    file: File,
    path: PathBuf,
}

/// Where perf looks for this process's map.
pub(crate) fn default_path() -> PathBuf {
    PathBuf::from(format!("/tmp/perf-{}.map", std::process::id()))
}

/// `name` as one line of text: control characters (a newline would start a line of its
/// own, naming code that is not there) become `?`.
pub(crate) fn printable(name: &str) -> impl Iterator<Item = char> + '_ {
    name.chars().map(|c| if c.is_control() { '?' } else { c })
}

impl PerfMap {
    /// Opens (or creates, 0600) the map at `path` for appending.
    pub(crate) fn open(path: &Path) -> io::Result<PerfMap> {
        Ok(PerfMap {
            file: safe_file::open_append(path)?,
            path: path.to_path_buf(),
        })
    }

    /// The file's path.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Appends one line per range, with one `write` (so lines of concurrent writers in
    /// other libraries do not interleave within a module's).
    pub(crate) fn append(&mut self, ranges: &[CodeRange]) -> io::Result<()> {
        let mut text = String::with_capacity(ranges.len() * 40);
        for range in ranges {
            let _ = write!(text, "{:x} {:x} ", range.address, range.size);
            text.extend(printable(&range.name));
            text.push('\n');
        }
        self.file.write_all(text.as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::published::CodeKind;

    #[test]
    fn lines_are_hex_start_size_name_and_reuse_appends() {
        let path =
            std::env::temp_dir().join(format!("elfjit-perf-map-test-{}.map", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let mut map = PerfMap::open(&path).unwrap();
        let range = |name: &str, address, size, kind| CodeRange {
            name: name.into(),
            address,
            size,
            kind,
            object: None,
        };
        map.append(&[
            range("my_kernel", 0x7f00_0000_1000, 0x46, CodeKind::Function),
            range("expf@stub", 0x7f00_0000_1050, 0x10, CodeKind::Stub),
        ])
        .unwrap();
        // The same range again (a reused arena range): a new line, the old one kept.
        map.append(&[range(
            "evil\nffff 1 fake",
            0x7f00_0000_1000,
            0x20,
            CodeKind::Function,
        )])
        .unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(
            text,
            "7f0000001000 46 my_kernel\n7f0000001050 10 expf@stub\n7f0000001000 20 evil?ffff 1 fake\n"
        );
        std::fs::remove_file(&path).unwrap();
    }
}
