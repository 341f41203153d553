//! The name index: how an undefined symbol finds what it binds to across the objects of
//! an image without comparing it against every other symbol. An open-addressing hash table
//! (linear probing, at most half full) keyed by symbol name. Each name records its first
//! definition, the first definition in another object than that one (so a reference never
//! binds to its own object's definition), and the first undefined occurrence that stayed
//! external (the one every later reference to the name shares).
//!
//! A slot holds no borrowed bytes, so its storage can outlive the objects (a `no_std`
//! caller reuses one static table for every link): names are compared by reading them from
//! the objects, through the `name_of` callback.

use crate::table::{ObjectIndex, SymbolIndex, Table};

index_type! {
    /// A position in the name index.
    pub(crate) struct NameSlot;
}

/// Which symbol a slot's name was read from: an object and its symbol table index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct NameKey {
    pub object: ObjectIndex,
    pub symbol: u32,
}

/// One slot of the name index. Public only so that callers can provide storage for it
/// (the `names` of a [`PlanStorage`](crate::plan::PlanStorage)); its contents are the plan's.
#[derive(Clone, Copy, Debug)]
pub struct NameEntry {
    /// The symbol the name is read from; `None` for an empty slot.
    pub(crate) key: Option<NameKey>,
    pub(crate) hash: u32,
    /// The first definition, and the object it is in.
    pub(crate) definition: Option<(ObjectIndex, SymbolIndex)>,
    /// The first definition in an object other than `definition`'s.
    pub(crate) elsewhere: Option<SymbolIndex>,
    /// The first undefined occurrence that did not bind to a definition.
    pub(crate) external: Option<SymbolIndex>,
}

impl NameEntry {
    /// An empty slot, to fill caller storage with.
    pub const EMPTY: NameEntry = NameEntry {
        key: None,
        hash: 0,
        definition: None,
        elsewhere: None,
        external: None,
    };

    /// The definition a reference from `object` binds to, if any: never one in `object`
    /// itself.
    pub(crate) fn definition_for(&self, object: ObjectIndex) -> Option<SymbolIndex> {
        match self.definition {
            Some((owner, symbol)) if owner != object => Some(symbol),
            Some(_) => self.elsewhere,
            None => None,
        }
    }

    /// Records definition `symbol` of `object`, if it is the first, or the first outside
    /// the first's object.
    pub(crate) fn define(&mut self, object: ObjectIndex, symbol: SymbolIndex) {
        match self.definition {
            None => self.definition = Some((object, symbol)),
            Some((owner, _)) if owner != object && self.elsewhere.is_none() => {
                self.elsewhere = Some(symbol)
            }
            Some(_) => {}
        }
    }
}

/// Slots needed to index `names` names: a power of two at least twice as large, so a
/// probe always meets an empty slot and stays short. `None` if that overflows.
pub(crate) fn slots_for(names: usize) -> Option<usize> {
    if names == 0 {
        return Some(0);
    }
    names.checked_mul(2)?.checked_next_power_of_two()
}

/// FNV-1a: short names, no allocation, the same on every target.
fn hash(name: &[u8]) -> u32 {
    name.iter().fold(0x811c_9dc5u32, |h, &b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

/// The slot for `name`, read from `key`: the one holding it, or the empty one where it
/// goes (claimed for it). `name_of` reads a slot's name back for comparison. `None` only if
/// the table has no free slot, which [`slots_for`] rules out.
pub(crate) fn entry<'t, 'n>(
    table: &'t mut Table<'_, NameSlot, NameEntry>,
    name: &[u8],
    key: NameKey,
    name_of: impl Fn(NameKey) -> Option<&'n [u8]>,
) -> Option<&'t mut NameEntry> {
    let h = hash(name);
    let entries = table.entries_mut();
    let mask = entries.len().checked_sub(1)?;
    let mut at = h as usize & mask;
    let mut found = None;
    for _ in 0..entries.len() {
        let slot = entries.get(at)?;
        match slot.key {
            None => break,
            Some(other) if slot.hash == h && name_of(other) == Some(name) => {
                found = Some(at);
                break;
            }
            Some(_) => at = (at + 1) & mask,
        }
    }
    let slot = entries.get_mut(found.unwrap_or(at))?;
    match slot.key {
        Some(_) if found.is_some() => {}
        Some(_) => return None,
        None => {
            *slot = NameEntry {
                key: Some(key),
                hash: h,
                ..NameEntry::EMPTY
            }
        }
    }
    Some(slot)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::TableIndex;

    const NAMES: [&[u8]; 5] = [b"expf", b"memcpy", b"k", b"kernel_with_a_long_name", b"k2"];

    fn object(i: usize) -> ObjectIndex {
        ObjectIndex::from_position(i).unwrap_or_else(|| panic!("{i} fits"))
    }

    fn key(i: usize) -> NameKey {
        NameKey {
            object: object(0),
            symbol: i as u32,
        }
    }

    fn name_of(key: NameKey) -> Option<&'static [u8]> {
        NAMES.get(key.symbol as usize).copied()
    }

    #[test]
    fn names_find_their_slot_and_collisions_probe_on() {
        let size = slots_for(NAMES.len()).unwrap_or(0);
        assert_eq!(size, 16);
        // Fewer slots than `slots_for` asks: collisions must still resolve by name.
        let mut storage = [NameEntry::EMPTY; 8];
        let mut table = Table::lent(&mut storage, 8, "names", NameEntry::EMPTY)
            .unwrap_or_else(|_| Table::empty());
        for (i, name) in NAMES.iter().enumerate() {
            let slot = entry(&mut table, name, key(i), name_of);
            assert!(slot.as_ref().is_some_and(|s| s.external.is_none()));
            if let Some(slot) = slot {
                slot.external = SymbolIndex::from_position(i);
            }
        }
        for (i, name) in NAMES.iter().enumerate() {
            let external = entry(&mut table, name, key(99), name_of).and_then(|s| s.external);
            assert_eq!(external, SymbolIndex::from_position(i));
        }
        assert_eq!(
            table.entries().iter().filter(|s| s.key.is_some()).count(),
            5
        );
        assert_eq!(slots_for(0), Some(0));
        assert_eq!(slots_for(3), Some(8));
        assert_eq!(slots_for(usize::MAX), None);
    }

    #[test]
    fn a_full_or_empty_table_claims_nothing() {
        let mut none: Table<'_, NameSlot, NameEntry> = Table::empty();
        assert!(entry(&mut none, b"x", key(0), name_of).is_none());
        let mut storage = [NameEntry::EMPTY; 1];
        let mut one = Table::lent(&mut storage, 1, "names", NameEntry::EMPTY)
            .unwrap_or_else(|_| Table::empty());
        assert!(entry(&mut one, b"expf", key(0), name_of).is_some());
        assert!(entry(&mut one, b"memcpy", key(1), name_of).is_none());
        assert!(entry(&mut one, b"expf", key(0), name_of).is_some());
    }

    #[test]
    fn references_never_bind_to_their_own_object() {
        let symbol = |i: usize| SymbolIndex::from_position(i);
        let mut slot = NameEntry::EMPTY;
        let (Some(s3), Some(s7), Some(s9)) = (symbol(3), symbol(7), symbol(9)) else {
            panic!("indices fit")
        };
        slot.define(object(0), s3);
        slot.define(object(0), s7); // same object as the first: not "elsewhere"
        slot.define(object(2), s9);
        assert_eq!(slot.definition_for(object(1)), Some(s3));
        assert_eq!(slot.definition_for(object(0)), Some(s9));
        assert_eq!(NameEntry::EMPTY.definition_for(object(0)), None);
    }
}
