//! Bounded, fallible reads: nothing elfjit reads from a file, a pipe or stdin can make it
//! allocate more than a stated limit, and an allocation the system refuses is an error,
//! not an abort.

use std::fmt;
use std::io::Read;

/// Why a bounded read stopped.
#[derive(Debug)]
pub enum ReadError {
    /// There was more than `limit` bytes.
    TooLarge {
        /// The cap, in bytes.
        limit: u64,
    },
    /// The system refused `bytes` bytes of memory.
    OutOfMemory {
        /// What was asked for.
        bytes: usize,
    },
    /// The read itself failed.
    Io(std::io::Error),
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadError::TooLarge { limit } => write!(f, "larger than {}", describe_size(*limit)),
            ReadError::OutOfMemory { bytes } => {
                write!(f, "cannot allocate {bytes} bytes to hold it")
            }
            ReadError::Io(e) => write!(f, "{e}"),
        }
    }
}

/// `n` bytes the way a person says it: `64 MiB`, `4096 bytes`.
pub fn describe_size(n: u64) -> String {
    const UNITS: [(u64, &str); 3] = [(1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")];
    for (unit, name) in UNITS {
        if n >= unit && n.is_multiple_of(unit) {
            return format!("{} {name}", n / unit);
        }
    }
    format!("{n} bytes")
}

/// Makes room in `buf` for `additional` more bytes without going past `limit` bytes in
/// all, growing geometrically (so appends stay amortised O(1)) but never reserving more
/// than the limit allows.
pub fn grow(buf: &mut Vec<u8>, additional: usize, limit: usize) -> Result<(), ReadError> {
    let need = buf.len().saturating_add(additional);
    if need <= buf.capacity() {
        return Ok(());
    }
    let target = need
        .max(buf.capacity().saturating_mul(2))
        .max(4096)
        .min(limit.max(need));
    buf.try_reserve_exact(target - buf.len())
        .map_err(|_| ReadError::OutOfMemory { bytes: target })
}

/// Reads `r` to its end, refusing more than `limit` bytes. `size_hint` (a file's length)
/// is checked against the limit first and sizes the first allocation.
pub fn read_to_end(
    r: &mut impl Read,
    limit: u64,
    size_hint: Option<u64>,
) -> Result<Vec<u8>, ReadError> {
    if size_hint.is_some_and(|s| s > limit) {
        return Err(ReadError::TooLarge { limit });
    }
    let limit_usize = usize::try_from(limit).unwrap_or(usize::MAX);
    let mut buf = Vec::new();
    if let Some(hint) = size_hint {
        // One more byte, to see the end without a second allocation.
        let first = usize::try_from(hint)
            .unwrap_or(usize::MAX)
            .saturating_add(1);
        grow(
            &mut buf,
            first.min(limit_usize.saturating_add(1)),
            limit_usize.saturating_add(1),
        )?;
    }
    let mut chunk = [0u8; 16 * 1024];
    loop {
        let room = limit_usize.saturating_add(1).saturating_sub(buf.len());
        let want = chunk.len().min(room.max(1));
        let n = match r.read(&mut chunk[..want]) {
            Ok(0) => return Ok(buf),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(ReadError::Io(e)),
        };
        if buf.len() + n > limit_usize {
            return Err(ReadError::TooLarge { limit });
        }
        grow(&mut buf, n, limit_usize)?;
        buf.extend_from_slice(&chunk[..n]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_are_exact() {
        let data = vec![7u8; 10_000];
        assert_eq!(read_to_end(&mut &data[..], 10_000, None).unwrap(), data);
        assert_eq!(
            read_to_end(&mut &data[..], 10_000, Some(10_000)).unwrap(),
            data
        );
        assert!(matches!(
            read_to_end(&mut &data[..], 9_999, None),
            Err(ReadError::TooLarge { limit: 9_999 })
        ));
        // A hint past the limit is refused before anything is read or allocated.
        assert!(matches!(
            read_to_end(&mut &data[..], 100, Some(1 << 40)),
            Err(ReadError::TooLarge { .. })
        ));
        // A wrong hint (the file grew or shrank) does not matter.
        assert_eq!(read_to_end(&mut &data[..], 20_000, Some(3)).unwrap(), data);
        assert!(read_to_end(&mut &data[..0], 0, None).unwrap().is_empty());
    }

    #[test]
    fn endless_input_stops_at_the_limit() {
        let mut zeros = std::io::repeat(0);
        let e = read_to_end(&mut zeros, 1 << 20, None).unwrap_err();
        assert_eq!(e.to_string(), "larger than 1 MiB");
    }

    #[test]
    fn growth_never_passes_the_limit() {
        let mut v = Vec::new();
        grow(&mut v, 10, 100).unwrap();
        assert!(v.capacity() >= 10 && v.capacity() <= 4096);
        v.resize(100, 0);
        let mut w: Vec<u8> = vec![0; 60];
        w.shrink_to_fit();
        grow(&mut w, 30, 100).unwrap();
        assert!(
            w.capacity() >= 90 && w.capacity() <= 100,
            "{}",
            w.capacity()
        );
        assert_eq!(describe_size(64 << 20), "64 MiB");
        assert_eq!(describe_size(1000), "1000 bytes");
    }
}
