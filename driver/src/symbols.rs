//! A loaded module's global symbols: all names in one buffer, entries in symbol-table
//! order, and an open-addressing hash index over them, so a load costs three allocations
//! and linear time however many symbols it has (a map of `String`s cost an allocation per
//! name, and for a 200-kernel object more than linking it). Names are kept as the object's
//! bytes, each ended by a NUL: a lookup by `&str` compares bytes (equal bytes are valid
//! UTF-8), and only the list of function names, made on first use, needs them as text.
//!
//! An entry holds where its name starts, not its length: an object with many globals has
//! its whole string table copied once ([`SymbolsBuilder::push_global`]), and the name's
//! end is found only when something reads it (the hash index, the function list). For a
//! 200-kernel object, searching for the end of each of its 400 names at load took more
//! time than copying its table.

use elfjit_core::GlobalEntry;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;

#[derive(Clone, Copy, Debug)]
struct Entry {
    /// Where the name starts in `Symbols::names` (it ends at the next NUL).
    start: u32,
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
    /// NUL-terminated names: copied one by one, or whole string tables.
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

/// A string table at most this long has its names copied one by one; a longer one is
/// copied whole. A small kernel's table is mostly section names (`.rela.text`, ...),
/// several times its globals' names, and a million such modules keep theirs for life.
const COPIED_BY_NAME: usize = 512;

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
    /// The string table copied last (its address and length: the image's objects outlive
    /// the builder's use, so no other table has them) and where its copy starts.
    copied: Option<(usize, usize, u32)>,
}

impl SymbolsBuilder {
    pub fn with_capacity(symbols: usize, name_bytes: usize) -> SymbolsBuilder {
        SymbolsBuilder {
            names: Vec::with_capacity(name_bytes),
            entries: Vec::with_capacity(symbols),
            copied: None,
        }
    }

    /// Adds a global of a linked image. A string table of at most [`COPIED_BY_NAME`]
    /// bytes has the name copied; a longer one is copied whole when the first of its names
    /// comes (an image's globals come object by object), and its names point into the
    /// copy.
    // Inline: a large object's load calls it once per global.
    #[inline]
    pub fn push_global(&mut self, global: &GlobalEntry<'_>) {
        let table = global.string_table;
        if table.len() <= COPIED_BY_NAME {
            if let Some(name) = global.name() {
                self.push(name, global.address, global.is_function);
            }
            return;
        }
        let id = (table.as_ptr() as usize, table.len());
        let at = match self.copied {
            Some((address, len, at)) if (address, len) == id => at,
            _ => {
                let Some(at) = self.push_table(table) else {
                    return;
                };
                self.copied = Some((id.0, id.1, at));
                at
            }
        };
        self.push_at(at, global.name_offset, global.address, global.is_function);
    }

    /// Adds a global whose name is `name` (without NUL; one with a NUL is not added).
    pub fn push(&mut self, name: &[u8], address: u64, is_function: bool) {
        let Ok(start) = u32::try_from(self.names.len()) else {
            return;
        };
        if name.contains(&0) {
            return;
        }
        self.names.extend_from_slice(name);
        self.names.push(0);
        self.entries.push(Entry {
            start,
            address,
            is_function,
        });
    }

    /// Copies a whole string table, for [`SymbolsBuilder::push_at`]: where it starts in
    /// the names, or `None` if the names would outgrow `u32` offsets. A NUL is added after
    /// it, so that every name in it ends inside the copy.
    fn push_table(&mut self, table: &[u8]) -> Option<u32> {
        let start = u32::try_from(self.names.len()).ok()?;
        u32::try_from(self.names.len().checked_add(table.len())?.checked_add(1)?).ok()?;
        self.names.extend_from_slice(table);
        self.names.push(0);
        Some(start)
    }

    /// Adds a global whose name starts at `offset` of the table copied at `table`
    /// ([`SymbolsBuilder::push_table`]); an offset past the names or at an empty name is
    /// not added.
    #[inline]
    fn push_at(&mut self, table: u32, offset: u32, address: u64, is_function: bool) {
        let Some(start) = table.checked_add(offset) else {
            return;
        };
        if self.names.get(start as usize).is_none_or(|&b| b == 0) {
            return;
        }
        self.entries.push(Entry {
            start,
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

/// The name of `e`: from its start to the next NUL (the end of `names` if none, which the
/// builder never leaves).
fn name_of<'n>(names: &'n [u8], e: &Entry) -> &'n [u8] {
    let tail = names.get(e.start as usize..).unwrap_or(&[]);
    let end = tail.iter().position(|&b| b == 0).unwrap_or(tail.len());
    tail.get(..end).unwrap_or(&[])
}

/// Whether `e` is named `name` (which holds no NUL): its bytes, then the NUL that ends
/// it, compared without searching for its end.
fn is_named(names: &[u8], e: &Entry, name: &[u8]) -> bool {
    let start = e.start as usize;
    names.get(start + name.len()) == Some(&0) && names.get(start..start + name.len()) == Some(name)
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
        // A name holding a NUL is no symbol's (and would match a prefix followed by its
        // neighbour in a copied table).
        if name.contains(&0) {
            return None;
        }
        let index = match self.index.get() {
            Some(index) => index,
            None if self.scans.fetch_add(1, Ordering::Relaxed) < SCANNED_LOOKUPS => {
                return self.entries.iter().find(|e| is_named(&self.names, e, name));
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
            if let Err(slot) = self.probe(&index, name_of(&self.names, e)) {
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
                        .is_some_and(|e| is_named(&self.names, e, name))
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
                .map(|(i, e)| (i, name_of(&self.names, e)))
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

    /// Names in a copied string table: found by their offsets, through scans and the index
    /// alike; a prefix of a name, a name running into its neighbour and an offset past the
    /// names find nothing; names pushed one by one after the table still work.
    #[test]
    fn names_in_a_copied_table_end_at_their_nul() {
        let table = b"\0saxpy\0saxpy_calls\0.rela.text\0expf\0k";
        let mut b = SymbolsBuilder::default();
        let at = b.push_table(table).expect("fits");
        b.push_at(at, 1, 10, true); // saxpy
        b.push_at(at, 7, 11, false); // saxpy_calls
        b.push_at(at, 35, 12, true); // "k": the table's last byte, ended by the added NUL
        b.push_at(at, 36, 16, true); // that NUL: an empty name, not added
        b.push_at(at, 99, 13, true); // past the names: not added
        b.push(b"alone", 14, true);
        b.push(b"with\0nul", 15, true); // not a symbol name: not added
        let s = b.finish();
        assert_eq!(s.entries.len(), 4);
        let ask = |s: &Symbols| {
            [
                "saxpy",
                "saxpy_calls",
                "k",
                "alone",
                "sax",
                "saxpy\0saxpy_calls",
                "expf",
                "",
            ]
            .map(|n| s.get(n))
        };
        let want = [
            Some(10),
            Some(11),
            Some(12),
            Some(14),
            None,
            None,
            None,
            None,
        ];
        assert_eq!(ask(&s), want);
        for _ in 0..2 {
            assert_eq!(ask(&s), want);
        }
        assert!(s.index.get().is_some(), "the later lookups used the index");
        assert_eq!(s.functions(), ["saxpy", "k", "alone"]);
    }

    /// A large string table is copied once for all its names, a small one name by name.
    #[test]
    fn a_large_table_is_copied_once_a_small_one_by_name() {
        let mut large = vec![b'x'; COPIED_BY_NAME];
        large.extend_from_slice(b"\0alpha\0beta\0");
        let small = b"\0gamma\0.rela.text\0";
        let global = |string_table, name_offset, address| GlobalEntry {
            string_table,
            name_offset,
            address,
            size: 0,
            is_function: true,
            other: 0,
        };
        let alpha = COPIED_BY_NAME as u32 + 1;
        let mut b = SymbolsBuilder::default();
        b.push_global(&global(&large, alpha, 1));
        b.push_global(&global(&large, alpha + 6, 2));
        b.push_global(&global(small, 1, 3));
        let s = b.finish();
        assert_eq!(s.names.len(), large.len() + 1 + b"gamma\0".len());
        let found = ["alpha", "beta", "gamma", "x"].map(|n| s.get(n));
        assert_eq!(found, [Some(1), Some(2), Some(3), None]);
        assert_eq!(s.functions(), ["alpha", "beta", "gamma"]);
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
