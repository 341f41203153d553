//! The tables a plan is built into, and the index types that address them.
//!
//! A table is either a prefix of a slice the caller lent (a `no_std` user passes static
//! buffers) or, with the `alloc` feature, a boxed slice allocated at exactly the size the
//! plan needs. Each table is indexed by its own index type, so a section number cannot be
//! used as a symbol number, and the arithmetic that turns an object's local index into a
//! table index lives in one place ([`crate::plan`]'s object entries).

use crate::error::{Error, Result};
use core::marker::PhantomData;

/// A typed position in a table: converts to and from `usize` in one checked place.
pub(crate) trait TableIndex: Copy {
    /// The index for position `index`, or `None` if it does not fit.
    fn from_position(index: usize) -> Option<Self>;
    /// The position this index names.
    fn position(self) -> usize;
}

/// Declares an index newtype and its [`TableIndex`] impl. It holds the position plus one
/// in a `NonZeroU32` (here and nowhere else), so that `Option` of it is four bytes.
macro_rules! index_type {
    ($(#[$meta:meta])* $vis:vis struct $name:ident;) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        $vis struct $name(core::num::NonZeroU32);

        impl $crate::table::TableIndex for $name {
            fn from_position(index: usize) -> Option<Self> {
                let biased = u32::try_from(index).ok()?.checked_add(1)?;
                core::num::NonZeroU32::new(biased).map($name)
            }
            fn position(self) -> usize {
                self.0.get().wrapping_sub(1) as usize
            }
        }

        impl From<$name> for u64 {
            fn from(index: $name) -> u64 {
                use $crate::table::TableIndex;
                index.position() as u64
            }
        }

        impl core::fmt::Display for $name {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                use $crate::table::TableIndex;
                core::fmt::Display::fmt(&self.position(), f)
            }
        }
    };
}

/// Where a table's entries live.
enum Store<'s, T> {
    /// A prefix of a slice the caller lent.
    Borrowed(&'s mut [T]),
    /// Allocated at exactly the size needed.
    #[cfg(feature = "alloc")]
    Owned(alloc::boxed::Box<[T]>),
}

index_type! {
    /// An object's position in the link.
    pub(crate) struct ObjectIndex;
}
index_type! {
    /// A symbol of the image: its position among all objects' symbol tables.
    pub(crate) struct SymbolIndex;
}

/// A table of `T` indexed by `I`.
pub(crate) struct Table<'s, I, T> {
    store: Store<'s, T>,
    index: PhantomData<fn(I) -> I>,
}

/// A read-only view of a table, cheap to copy into a hot loop (no storage dispatch per
/// access).
pub(crate) struct View<'t, I, T> {
    entries: &'t [T],
    index: PhantomData<fn(I) -> I>,
}

impl<I, T> Clone for View<'_, I, T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<I, T> Copy for View<'_, I, T> {}

impl<'s, I: TableIndex, T: Copy> Table<'s, I, T> {
    /// A table with no entries.
    pub(crate) fn empty() -> Self {
        Table {
            store: Store::Borrowed(&mut []),
            index: PhantomData,
        }
    }

    /// The first `needed` entries of `slice`, each set to `fill`; an error naming `table`
    /// and the size needed if the slice is shorter.
    pub(crate) fn lent(
        slice: &'s mut [T],
        needed: usize,
        table: &'static str,
        fill: T,
    ) -> Result<Self> {
        let provided = slice.len();
        let entries = slice.get_mut(..needed).ok_or(Error::StorageTooSmall {
            table,
            needed,
            provided,
        })?;
        entries.fill(fill);
        Ok(Table {
            store: Store::Borrowed(entries),
            index: PhantomData,
        })
    }

    /// `needed` entries set to `fill`, allocated at exactly that size; an error naming
    /// `table` if the allocation fails.
    #[cfg(feature = "alloc")]
    pub(crate) fn allocated(needed: usize, table: &'static str, fill: T) -> Result<Self> {
        let mut entries = alloc::vec::Vec::new();
        entries
            .try_reserve_exact(needed)
            .map_err(|_| Error::OutOfMemory { table, needed })?;
        entries.resize(needed, fill);
        Ok(Table {
            store: Store::Owned(entries.into_boxed_slice()),
            index: PhantomData,
        })
    }

    pub(crate) fn entries(&self) -> &[T] {
        match &self.store {
            Store::Borrowed(entries) => entries,
            #[cfg(feature = "alloc")]
            Store::Owned(entries) => entries,
        }
    }

    pub(crate) fn entries_mut(&mut self) -> &mut [T] {
        match &mut self.store {
            Store::Borrowed(entries) => entries,
            #[cfg(feature = "alloc")]
            Store::Owned(entries) => entries,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.entries().len()
    }

    pub(crate) fn get(&self, index: I) -> Option<&T> {
        self.entries().get(index.position())
    }

    pub(crate) fn get_mut(&mut self, index: I) -> Option<&mut T> {
        self.entries_mut().get_mut(index.position())
    }

    pub(crate) fn view(&self) -> View<'_, I, T> {
        View {
            entries: self.entries(),
            index: PhantomData,
        }
    }

    /// Every entry with its index.
    pub(crate) fn enumerate(&self) -> impl Iterator<Item = (I, &T)> + '_ {
        self.view().enumerate()
    }
}

impl<'t, I: TableIndex, T> View<'t, I, T> {
    pub(crate) fn get(self, index: I) -> Option<&'t T> {
        self.entries.get(index.position())
    }

    /// The entries, in index order.
    pub(crate) fn entries(self) -> &'t [T] {
        self.entries
    }

    pub(crate) fn enumerate(self) -> impl Iterator<Item = (I, &'t T)> + 't {
        self.entries
            .iter()
            .enumerate()
            .filter_map(|(i, entry)| Some((I::from_position(i)?, entry)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    index_type! {
        /// A test index.
        struct Position;
    }

    #[test]
    fn lent_tables_take_a_prefix_or_name_the_size_needed() {
        let mut buffer = [7u32; 4];
        let table = Table::<Position, u32>::lent(&mut buffer, 3, "things", 0);
        let table = table.unwrap_or_else(|_| Table::empty());
        assert_eq!(table.entries(), &[0, 0, 0]);
        let at = |i: usize| Position::from_position(i).unwrap_or_else(|| panic!("{i} fits"));
        assert_eq!(table.get(at(2)), Some(&0));
        assert_eq!(table.get(at(3)), None);
        assert_eq!(at(3).position(), 3);
        assert_eq!(Position::from_position(u32::MAX as usize), None);
        assert_eq!(core::mem::size_of::<Option<Position>>(), 4);
        let mut short = [0u32; 2];
        let err = Table::<Position, u32>::lent(&mut short, 3, "things", 0).err();
        assert_eq!(
            err,
            Some(Error::StorageTooSmall {
                table: "things",
                needed: 3,
                provided: 2
            })
        );
    }

    #[cfg(feature = "alloc")]
    #[test]
    fn allocated_tables_are_exactly_sized() {
        let table = Table::<Position, u64>::allocated(5, "things", 9);
        let table = table.unwrap_or_else(|_| Table::empty());
        assert_eq!(table.len(), 5);
        assert!(table.enumerate().all(|(i, &v)| v == 9 && i.position() < 5));
    }
}
