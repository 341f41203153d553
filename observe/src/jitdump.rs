//! The jitdump file perf reads with `perf inject --jit`
//! (`tools/perf/Documentation/jitdump-specification.txt`): a header, then records, each a
//! prefix (id, total size, timestamp) and its body. Per function this writes a
//! `JIT_CODE_DEBUG_INFO` record with its source lines (when the object has a DWARF line
//! table), then the `JIT_CODE_LOAD` record with its name and code bytes, which must follow
//! the debug record of the same address.
//!
//! perf finds the file through the mmap event of a `PROT_EXEC` mapping of it, so the file's
//! first page stays mapped while the dump is open. Timestamps are `CLOCK_MONOTONIC`, the
//! clock `perf record -k 1` (`-k mono`) uses. The file goes in a fresh 0700 directory, as
//! perf inject writes a `jitted-<pid>-<index>.so` per function beside it.

use crate::lines::LineRow;
use crate::platform::ExecMarker;
use crate::published::CodeRange;
use crate::safe_file;
use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

const MAGIC: u32 = 0x4A69_5444; // "JiTD" read as a native-endian u32
const VERSION: u32 = 1;
const HEADER_SIZE: u32 = 40;
const JIT_CODE_LOAD: u32 = 0;
const JIT_CODE_DEBUG_INFO: u32 = 2;
const PREFIX_SIZE: usize = 16;

/// The ELF machine of this process, for the header (perf checks it against the host).
fn host_machine() -> u32 {
    match std::env::consts::ARCH {
        "x86_64" => 62,       // EM_X86_64
        "aarch64" => 183,     // EM_AARCH64
        "riscv64" => 243,     // EM_RISCV
        "loongarch64" => 258, // EM_LOONGARCH
        "powerpc64" => 21,    // EM_PPC64
        _ => 0,
    }
}

/// Nanoseconds of `CLOCK_MONOTONIC` (the clock `perf record -k mono` uses).
fn timestamp() -> u64 {
    crate::platform::monotonic_ns()
}

#[cfg(target_os = "linux")]
fn thread_id() -> u32 {
    // SAFETY: gettid takes no arguments and cannot fail.
    unsafe { libc::gettid() as u32 }
}

/// Outside Linux there is no perf to match records with its samples' thread ids: the
/// process id stands in.
#[cfg(not(target_os = "linux"))]
fn thread_id() -> u32 {
    std::process::id()
}

/// The open jitdump of this process.
pub(crate) struct Jitdump {
    file: File,
    path: PathBuf,
    /// The `PROT_EXEC` mapping of the file's first page that perf finds it by.
    _marker: ExecMarker,
    next_index: u64,
}

/// One function's record: its range, code bytes and source lines.
pub(crate) struct FunctionRecord<'a> {
    pub range: &'a CodeRange,
    pub code: &'a [u8],
    pub lines: Vec<LineRow>,
    pub files: &'a [String],
}

fn prefix(out: &mut Vec<u8>, id: u32, total: usize, time: u64) {
    out.extend_from_slice(&id.to_ne_bytes());
    out.extend_from_slice(&(total as u32).to_ne_bytes());
    out.extend_from_slice(&time.to_ne_bytes());
}

fn push_name(out: &mut Vec<u8>, name: &str) {
    out.extend(name.bytes().filter(|&b| b != 0));
    out.push(0);
}

impl Jitdump {
    /// Creates `<dir>/elfjit-jit.<random>/jit-<pid>.dump`, writes the header and maps the
    /// file's first page executable.
    pub(crate) fn create(dir: &Path) -> io::Result<Jitdump> {
        let pid = std::process::id();
        let private = safe_file::private_dir(dir, &format!("elfjit-jit-{pid}"))?;
        let path = private.join(format!("jit-{pid}.dump"));
        let mut file = safe_file::create_new(&path)?;
        let mut header = Vec::with_capacity(HEADER_SIZE as usize);
        for word in [MAGIC, VERSION, HEADER_SIZE, host_machine(), 0, pid] {
            header.extend_from_slice(&word.to_ne_bytes());
        }
        header.extend_from_slice(&timestamp().to_ne_bytes());
        header.extend_from_slice(&0u64.to_ne_bytes()); // flags: no arch timestamps
        file.write_all(&header)?;
        let marker = ExecMarker::map(&file)?;
        Ok(Jitdump {
            file,
            path,
            _marker: marker,
            next_index: 0,
        })
    }

    /// The file's path.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Appends the records of one module's functions, with one `write`.
    pub(crate) fn append(&mut self, functions: &[FunctionRecord<'_>]) -> io::Result<()> {
        let mut out = Vec::new();
        let pid = std::process::id();
        let tid = thread_id();
        for function in functions {
            let time = timestamp();
            let address = function.range.address;
            if !function.lines.is_empty() {
                let start = out.len();
                prefix(&mut out, JIT_CODE_DEBUG_INFO, 0, time);
                out.extend_from_slice(&address.to_ne_bytes());
                out.extend_from_slice(&(function.lines.len() as u64).to_ne_bytes());
                for row in &function.lines {
                    out.extend_from_slice(&row.address.to_ne_bytes());
                    out.extend_from_slice(&(row.line as i32).to_ne_bytes());
                    out.extend_from_slice(&0i32.to_ne_bytes()); // discriminator
                                                                // Always the full name: perf before 6.5 mishandles the "\xff" marker
                                                                // for "same as the previous entry".
                    push_name(&mut out, function.files.get(row.file).map_or("??", |f| f));
                }
                // Entries are counted, so padding to 8 bytes is allowed and keeps the next
                // record aligned.
                out.resize(start + (out.len() - start).next_multiple_of(8), 0);
                let total = (out.len() - start) as u32;
                out[start + 4..start + 8].copy_from_slice(&total.to_ne_bytes());
            }
            let start = out.len();
            prefix(&mut out, JIT_CODE_LOAD, 0, time);
            out.extend_from_slice(&pid.to_ne_bytes());
            out.extend_from_slice(&tid.to_ne_bytes());
            out.extend_from_slice(&address.to_ne_bytes()); // vma
            out.extend_from_slice(&address.to_ne_bytes()); // code_addr
            out.extend_from_slice(&(function.code.len() as u64).to_ne_bytes());
            out.extend_from_slice(&self.next_index.to_ne_bytes());
            self.next_index += 1;
            push_name(&mut out, &function.range.name);
            // perf finds the code at the record's end, so any padding goes after the name.
            let unpadded = out.len() - start + function.code.len();
            out.resize(out.len() + (unpadded.next_multiple_of(8) - unpadded), 0);
            out.extend_from_slice(function.code);
            let total = (out.len() - start) as u32;
            out[start + 4..start + 8].copy_from_slice(&total.to_ne_bytes());
        }
        debug_assert!(out.len() >= PREFIX_SIZE || functions.is_empty());
        self.file.write_all(&out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::published::CodeKind;

    fn u32_at(b: &[u8], at: usize) -> u32 {
        u32::from_ne_bytes(b[at..at + 4].try_into().unwrap())
    }
    fn u64_at(b: &[u8], at: usize) -> u64 {
        u64::from_ne_bytes(b[at..at + 8].try_into().unwrap())
    }

    #[test]
    fn header_then_debug_info_then_code_load() {
        let mut dump = Jitdump::create(&std::env::temp_dir()).unwrap();
        let path = dump.path().to_path_buf();
        assert!(path
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("jit-"));
        let range = CodeRange {
            name: "my_kernel".into(),
            address: 0x1000,
            size: 5,
            kind: CodeKind::Function,
            object: Some(0),
        };
        let files = vec!["/src/k.c".to_string()];
        let lines = vec![
            LineRow {
                address: 0x1000,
                line: 3,
                file: 0,
            },
            LineRow {
                address: 0x1003,
                line: 4,
                file: 0,
            },
        ];
        dump.append(&[FunctionRecord {
            range: &range,
            code: &[0x90, 0x90, 0x90, 0x90, 0xc3],
            lines,
            files: &files,
        }])
        .unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(u32_at(&bytes, 0), MAGIC);
        assert_eq!(u32_at(&bytes, 4), VERSION);
        assert_eq!(u32_at(&bytes, 8), HEADER_SIZE);
        assert_eq!(u32_at(&bytes, 20), std::process::id());
        let debug = HEADER_SIZE as usize;
        assert_eq!(u32_at(&bytes, debug), JIT_CODE_DEBUG_INFO);
        let debug_size = u32_at(&bytes, debug + 4) as usize;
        assert_eq!(debug_size % 8, 0);
        assert_eq!(u64_at(&bytes, debug + 16), 0x1000);
        assert_eq!(u64_at(&bytes, debug + 24), 2);
        assert_eq!(u64_at(&bytes, debug + 32), 0x1000);
        assert_eq!(u32_at(&bytes, debug + 40), 3);
        assert_eq!(&bytes[debug + 48..debug + 57], b"/src/k.c\0");
        let load = debug + debug_size;
        assert_eq!(u32_at(&bytes, load), JIT_CODE_LOAD);
        let load_size = u32_at(&bytes, load + 4) as usize;
        assert_eq!(load + load_size, bytes.len());
        assert_eq!(u64_at(&bytes, load + 24), 0x1000); // vma
        assert_eq!(u64_at(&bytes, load + 32), 0x1000); // code_addr
        assert_eq!(u64_at(&bytes, load + 40), 5); // code_size
        assert_eq!(&bytes[load + 56..load + 66], b"my_kernel\0");
        assert_eq!(&bytes[bytes.len() - 5..], &[0x90, 0x90, 0x90, 0x90, 0xc3]);
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let mapped = maps
            .lines()
            .find(|l| l.ends_with(path.to_str().unwrap()))
            .expect("the dump is mapped");
        assert!(mapped.contains("r-xp"), "{mapped}");
        drop(dump);
        std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
    }
}
