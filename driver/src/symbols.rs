//! A loaded module's global symbols: all names in one buffer, entries in symbol-table
//! order, and an open-addressing hash index over them, so a load costs three allocations
//! and linear time however many symbols it has (a map of `String`s cost an allocation per
//! name, and for a 200-kernel object more than linking it).

use std::collections::HashMap;
use std::sync::OnceLock;

#[derive(Clone, Copy, Debug)]
struct Entry {
    /// The name's place in `Symbols::names`.
    start: u32,
    len: u32,
    address: u64,
    is_function: bool,
}

/// Global symbols by name.
#[derive(Debug, Default)]
pub(crate) struct Symbols {
    names: String,
    /// In symbol-table order, one entry per name (the first definition wins).
    entries: Vec<Entry>,
    /// Open addressing, a power of two at least twice `entries.len()`: entry index + 1, or
    /// 0 for an empty slot.
    index: Vec<u32>,
    /// The global functions' names in symbol-table order, made on first use.
    functions: OnceLock<Vec<String>>,
}

/// Collects `(name, address, is_function)` in symbol-table order.
#[derive(Default)]
pub(crate) struct SymbolsBuilder {
    names: String,
    entries: Vec<Entry>,
}

impl SymbolsBuilder {
    pub fn with_capacity(symbols: usize, name_bytes: usize) -> SymbolsBuilder {
        SymbolsBuilder {
            names: String::with_capacity(name_bytes),
            entries: Vec::with_capacity(symbols),
        }
    }

    pub fn push(&mut self, name: &str, address: u64, is_function: bool) {
        let (Ok(start), Ok(len)) = (u32::try_from(self.names.len()), u32::try_from(name.len()))
        else {
            return;
        };
        self.names.push_str(name);
        self.entries.push(Entry {
            start,
            len,
            address,
            is_function,
        });
    }

    pub fn finish(self) -> Symbols {
        let SymbolsBuilder { names, entries } = self;
        let mut symbols = Symbols {
            names,
            entries: Vec::with_capacity(entries.len()),
            index: vec![0; (entries.len() * 2).next_power_of_two().max(4)],
            functions: OnceLock::new(),
        };
        for e in entries {
            let name = slice(&symbols.names, &e);
            if let Err(slot) = symbols.find(name) {
                symbols.entries.push(e);
                if let Some(s) = symbols.index.get_mut(slot) {
                    *s = symbols.entries.len() as u32;
                }
            }
        }
        symbols
    }
}

fn slice<'n>(names: &'n str, e: &Entry) -> &'n str {
    names
        .get(e.start as usize..(e.start + e.len) as usize)
        .unwrap_or("")
}

/// FNV-1a: names are short, so a simple byte hash is fast enough.
fn hash(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

impl Symbols {
    /// From a map of addresses and the functions' names (the dlopen-fallback loader's).
    #[cfg_attr(not(feature = "dlopen-fallback"), allow(dead_code))]
    pub fn from_map(map: HashMap<String, u64>, functions: Vec<String>) -> Symbols {
        let mut b = SymbolsBuilder::with_capacity(map.len(), map.keys().map(String::len).sum());
        for (name, address) in &map {
            b.push(name, *address, false);
        }
        let symbols = b.finish();
        let _ = symbols.functions.set(functions);
        symbols
    }

    /// The entry named `name` (`Ok`), or the empty index slot where it would go (`Err`).
    fn find(&self, name: &str) -> Result<&Entry, usize> {
        let mask = self.index.len().saturating_sub(1);
        let mut slot = hash(name) as usize & mask;
        // The index is at most half full, so an empty slot ends every probe.
        for _ in 0..self.index.len() {
            match self.index.get(slot).copied() {
                Some(0) | None => return Err(slot),
                Some(i) => {
                    if let Some(e) = self.entries.get(i as usize - 1) {
                        if slice(&self.names, e) == name {
                            return Ok(e);
                        }
                    }
                }
            }
            slot = (slot + 1) & mask;
        }
        Err(usize::MAX)
    }

    /// The address of global `name`.
    pub fn get(&self, name: &str) -> Option<u64> {
        self.find(name).ok().map(|e| e.address)
    }

    /// The global functions' names, in symbol-table order.
    pub fn functions(&self) -> &[String] {
        self.functions.get_or_init(|| {
            self.entries
                .iter()
                .filter(|e| e.is_function)
                .map(|e| slice(&self.names, e).to_string())
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
        b.push("zeta", 1, true);
        b.push("alpha", 2, false);
        b.push("mid", 3, true);
        b.push("zeta", 4, true);
        for i in 0..100 {
            b.push(&format!("k{i}"), 100 + i, false);
        }
        let s = b.finish();
        assert!((0..100).all(|i| s.get(&format!("k{i}")) == Some(100 + i)));
        assert_eq!(s.get("zeta"), Some(1));
        assert_eq!(s.get("alpha"), Some(2));
        assert_eq!(s.get("nope"), None);
        assert_eq!(s.functions(), ["zeta", "mid"]);
        let m = Symbols::from_map(HashMap::from([("f".to_string(), 9)]), vec!["f".into()]);
        assert_eq!(
            (m.get("f"), m.functions()),
            (Some(9), &["f".to_string()][..])
        );
    }
}
