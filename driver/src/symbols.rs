//! A loaded module's global symbols: all names in one buffer, entries in symbol-table
//! order, and an open-addressing hash index over them, so a load costs three allocations
//! and linear time however many symbols it has (a map of `String`s cost an allocation per
//! name, and for a 200-kernel object more than linking it). Names are kept as the object's
//! bytes: a lookup by `&str` compares bytes (equal bytes are valid UTF-8), and only the
//! list of function names, made on first use, needs them as text.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;

#[derive(Clone, Copy, Debug)]
struct Entry {
    /// The name's place in `Symbols::names`.
    start: u32,
    len: u32,
    address: u64,
    is_function: bool,
}

/// A global found by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Found {
    pub address: u64,
    pub is_function: bool,
}

/// Global symbols by name.
#[derive(Debug, Default)]
pub(crate) struct Symbols {
    names: Vec<u8>,
    /// In symbol-table order, as pushed; where a name repeats, the first entry wins.
    entries: Vec<Entry>,
    /// Lookups answered by scanning `entries`, up to [`SCANNED_LOOKUPS`].
    scans: AtomicU32,
    /// Made by the first lookup after those.
    index: OnceLock<Index>,
    /// The global functions' names in symbol-table order (those that are UTF-8), made on
    /// first use.
    functions: OnceLock<Vec<String>>,
}

/// How many lookups a module answers by scanning before it builds its hash index.
const SCANNED_LOOKUPS: u32 = 8;

/// Open addressing over `Symbols::entries`: entry index + 1, or 0 for an empty slot; a
/// power of two at least twice the number of names, so an empty slot ends every probe.
#[derive(Debug)]
struct Index {
    slots: Vec<u32>,
}

/// Collects `(name, address, is_function)` in symbol-table order.
#[derive(Default)]
pub(crate) struct SymbolsBuilder {
    names: Vec<u8>,
    entries: Vec<Entry>,
}

impl SymbolsBuilder {
    pub fn with_capacity(symbols: usize, name_bytes: usize) -> SymbolsBuilder {
        SymbolsBuilder {
            names: Vec::with_capacity(name_bytes),
            entries: Vec::with_capacity(symbols),
        }
    }

    pub fn push(&mut self, name: &[u8], address: u64, is_function: bool) {
        let (Ok(start), Ok(len)) = (u32::try_from(self.names.len()), u32::try_from(name.len()))
        else {
            return;
        };
        self.names.extend_from_slice(name);
        self.entries.push(Entry {
            start,
            len,
            address,
            is_function,
        });
    }

    /// The symbols, their storage trimmed to what they hold (a module keeps it for its
    /// whole life, and a process may keep a million modules).
    pub fn finish(mut self) -> Symbols {
        self.names.shrink_to_fit();
        self.entries.shrink_to_fit();
        Symbols {
            names: self.names,
            entries: self.entries,
            ..Symbols::default()
        }
    }
}

fn slice<'n>(names: &'n [u8], e: &Entry) -> &'n [u8] {
    names
        .get(e.start as usize..(e.start as usize).saturating_add(e.len as usize))
        .unwrap_or(&[])
}

/// A multiply-xor hash over eight bytes at a time with murmur3's finalizer, so that the
/// low bits the index uses depend on every byte (names differ mostly in their last
/// digits). Not keyed: a module's names come from its own objects.
fn hash(name: &[u8]) -> u64 {
    const K: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut chunks = name.chunks_exact(8);
    let mut h = name.len() as u64;
    for chunk in &mut chunks {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        h = (h ^ u64::from_le_bytes(word))
            .wrapping_mul(K)
            .rotate_left(31);
    }
    let mut last = [0u8; 8];
    let rest = chunks.remainder();
    last[..rest.len()].copy_from_slice(rest);
    h ^= u64::from_le_bytes(last);
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

impl Symbols {
    /// From a map of addresses and the functions' names (the dlopen-fallback loader's).
    #[cfg_attr(not(feature = "dlopen-fallback"), allow(dead_code))]
    pub fn from_map(map: HashMap<String, u64>, functions: Vec<String>) -> Symbols {
        let mut b = SymbolsBuilder::with_capacity(map.len(), map.keys().map(String::len).sum());
        let is_function: std::collections::HashSet<&str> =
            functions.iter().map(String::as_str).collect();
        for (name, address) in &map {
            b.push(
                name.as_bytes(),
                *address,
                is_function.contains(name.as_str()),
            );
        }
        let symbols = b.finish();
        let _ = symbols.functions.set(functions);
        symbols
    }

    /// The first entry named `name`, by scan or through the index.
    fn find(&self, name: &[u8]) -> Option<&Entry> {
        let index = match self.index.get() {
            Some(index) => index,
            None if self.scans.fetch_add(1, Ordering::Relaxed) < SCANNED_LOOKUPS => {
                return self
                    .entries
                    .iter()
                    .find(|e| e.len as usize == name.len() && slice(&self.names, e) == name);
            }
            None => self.index.get_or_init(|| self.build_index()),
        };
        self.probe(index, name)
            .ok()
            .and_then(|i| self.entries.get(i))
    }

    /// The index over the entries; a repeated name keeps its first entry.
    fn build_index(&self) -> Index {
        let mut index = Index {
            slots: vec![0; (self.entries.len() * 2).next_power_of_two().max(4)],
        };
        for (i, e) in self.entries.iter().enumerate() {
            if let Err(slot) = self.probe(&index, slice(&self.names, e)) {
                if let Some(s) = index.slots.get_mut(slot) {
                    *s = i as u32 + 1;
                }
            }
        }
        index
    }

    /// The position in `entries` of the entry `index` holds for `name` (`Ok`), or the
    /// empty slot where it would go (`Err`).
    fn probe(&self, index: &Index, name: &[u8]) -> Result<usize, usize> {
        let slots = &index.slots;
        let mask = slots.len().saturating_sub(1);
        let mut slot = hash(name) as usize & mask;
        for _ in 0..slots.len() {
            match slots.get(slot).copied() {
                Some(0) | None => return Err(slot),
                Some(i) => {
                    let at = i as usize - 1;
                    if self
                        .entries
                        .get(at)
                        .is_some_and(|e| slice(&self.names, e) == name)
                    {
                        return Ok(at);
                    }
                }
            }
            slot = (slot + 1) & mask;
        }
        Err(usize::MAX)
    }

    /// The address of global `name`, and whether it is a function.
    pub fn lookup(&self, name: &str) -> Option<Found> {
        self.find(name.as_bytes()).map(|e| Found {
            address: e.address,
            is_function: e.is_function,
        })
    }

    /// The address of global `name`.
    pub fn get(&self, name: &str) -> Option<u64> {
        self.lookup(name).map(|f| f.address)
    }

    /// The global functions' names, in symbol-table order.
    pub fn functions(&self) -> &[String] {
        self.functions.get_or_init(|| {
            let index = self.index.get_or_init(|| self.build_index());
            self.entries
                .iter()
                .enumerate()
                .filter(|(_, e)| e.is_function)
                .map(|(i, e)| (i, slice(&self.names, e)))
                // Each name once: where it repeats, the entry lookups find.
                .filter(|&(i, name)| self.probe(index, name) == Ok(i))
                .filter_map(|(_, name)| std::str::from_utf8(name).ok())
                .map(str::to_string)
                .collect()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup_first_definition_wins_and_functions_keep_table_order() {
        let mut b = SymbolsBuilder::default();
        b.push(b"zeta", 1, true);
        b.push(b"alpha", 2, false);
        b.push(b"mid", 3, true);
        b.push(b"zeta", 4, true);
        for i in 0..100 {
            b.push(format!("k{i}").as_bytes(), 100 + i, false);
        }
        let s = b.finish();
        // The first lookups scan, the later ones use the index: both find the same.
        let expected = |i: u64| Some(100 + i);
        assert!((0..100).all(|i| s.get(&format!("k{i}")) == expected(i)));
        assert!(s.index.get().is_some(), "a hundred lookups built the index");
        assert_eq!(s.get("zeta"), Some(1));
        assert_eq!(s.get("alpha"), Some(2));
        assert_eq!(s.get("nope"), None);
        assert_eq!(s.functions(), ["zeta", "mid"]);
        assert_eq!(
            s.lookup("mid"),
            Some(Found {
                address: 3,
                is_function: true
            })
        );
        let m = Symbols::from_map(HashMap::from([("f".to_string(), 9)]), vec!["f".into()]);
        assert_eq!(
            (m.get("f"), m.functions()),
            (Some(9), &["f".to_string()][..])
        );
    }

    /// Names of every length around the hash's eight-byte steps, names sharing a prefix,
    /// and a name that is not UTF-8 (found by no `&str`, listed among no functions).
    #[test]
    fn names_of_any_length_and_bytes() {
        let names: Vec<String> = (0..40).map(|n| "x".repeat(n)).collect();
        let mut b = SymbolsBuilder::default();
        b.push(b"\xff\xfe", 7, true);
        for (i, name) in names.iter().enumerate() {
            b.push(name.as_bytes(), i as u64, i % 2 == 0);
        }
        let s = b.finish();
        for (i, name) in names.iter().enumerate() {
            assert_eq!(s.get(name), Some(i as u64), "{name:?}");
        }
        assert_eq!(s.functions().len(), 20);
        assert!(s.functions().iter().all(|f| f.len() % 2 == 0));
        assert_eq!(s.get("\u{fffd}"), None);
    }

    /// The scans of the first lookups and the index after them give the same answers,
    /// first definition winning in both, and the function list names a repeated function
    /// once even before any lookup.
    #[test]
    fn scanned_and_indexed_lookups_agree() {
        let build = || {
            let mut b = SymbolsBuilder::default();
            for (name, address) in [("zeta", 1), ("alpha", 2), ("zeta", 3), ("zet", 4)] {
                b.push(name.as_bytes(), address, true);
            }
            b.finish()
        };
        assert_eq!(build().functions(), ["zeta", "alpha", "zet"]);
        let s = build();
        let ask = |s: &Symbols| ["zeta", "alpha", "zet", "ze", "nope", ""].map(|n| s.get(n));
        let want = [Some(1), Some(2), Some(4), None, None, None];
        assert_eq!(ask(&s), want);
        assert!(s.index.get().is_none(), "six lookups were scans");
        assert_eq!(ask(&s), want);
        assert!(s.index.get().is_some(), "the ninth lookup built the index");
        assert_eq!(ask(&s), want);
    }
}
