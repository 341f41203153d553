//! Slots for small segments in a packed arena: each slab is a short run of pages cut into
//! equal slots of one size class, so many modules' segments share a page.
//!
//! Size classes are multiples of 16 bytes, 16 bytes apart up to 128 and at most 25% apart
//! above, up to [`SLAB_MAX`]; a slot of
//! class `c` starts at a multiple of `c` from a page boundary, so it is aligned to every
//! power of two dividing `c`.

use super::pages::{PageRuns, Returned, Run};

/// Segments larger than this get whole pages, even in a packed arena.
pub(crate) const SLAB_MAX: u32 = 2048;

const CLASSES: [u32; 24] = [
    16, 32, 48, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384, 448, 512, 640, 768, 896, 1024,
    1280, 1536, 1792, 2048,
];

const NOT_LISTED: u32 = u32::MAX;

/// The smallest class that holds `size` bytes aligned to `align` (a power of two).
pub(crate) fn class_for(size: u64, align: u64) -> Option<u8> {
    CLASSES
        .iter()
        .position(|&c| u64::from(c) >= size && u64::from(c).is_multiple_of(align.max(1)))
        .map(|i| i as u8)
}

/// The slot size of class `class`.
pub(crate) fn class_size(class: u8) -> u32 {
    CLASSES.get(usize::from(class)).copied().unwrap_or(SLAB_MAX)
}

/// Pages per slab of class `class`: enough for at least 8 slots.
fn slab_pages(class: u8, page: u32) -> u32 {
    (8 * class_size(class)).div_ceil(page).max(1)
}

#[derive(Debug)]
struct Slab {
    run: Run,
    class: u8,
    used: u32,
    capacity: u32,
    /// One bit per slot, set while in use.
    used_bits: Vec<u64>,
    /// Position in its class's partial list, or `NOT_LISTED`.
    partial_at: u32,
}

#[derive(Debug, Default, Clone)]
struct Class {
    /// Slabs of this class with a free slot.
    partial: Vec<u32>,
    /// An empty slab kept for the next allocation (so a load/unload loop does not make
    /// and unmake a slab each time).
    spare: Option<u32>,
}

/// A slot handed out, with what undoing it must restore.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Slot {
    pub slab: u32,
    pub index: u32,
    /// Byte offset of the slot from the region's start.
    pub offset: u64,
    /// Bytes in the slot.
    pub size: u32,
    /// The slab was made for this slot.
    created: bool,
    /// The slab was the class's spare before this slot was taken.
    was_spare: bool,
    /// The slot may hold what its last user left: zero it before handing it out.
    pub stale: bool,
}

/// The slabs of one class region.
#[derive(Debug, Default)]
pub(crate) struct Slabs {
    classes: Vec<Class>,
    slabs: Vec<Option<Slab>>,
    free_ids: Vec<u32>,
}

impl Slabs {
    /// No slabs. Allocates nothing: the class table is made by the first `take` (a
    /// page-granular arena never takes a slot, and every chunk has three `Slabs`).
    pub fn new() -> Slabs {
        Slabs::default()
    }

    /// A slot of class `class`, making a slab from `runs` if no slab has room.
    pub fn take(&mut self, class: u8, runs: &mut PageRuns, page: u32) -> Option<Slot> {
        if self.classes.is_empty() {
            self.classes = vec![Class::default(); CLASSES.len()];
        }
        let size = class_size(class);
        let ci = usize::from(class);
        let listed = self.classes.get(ci)?.partial.last().copied();
        let (id, created) = match listed {
            Some(id) => (id, false),
            None => {
                let pages = slab_pages(class, page);
                let run = runs.take(pages, 1, true)?;
                let capacity = pages * page / size;
                let slab = Slab {
                    run,
                    class,
                    used: 0,
                    capacity,
                    used_bits: vec![0; capacity.div_ceil(64) as usize],
                    partial_at: NOT_LISTED,
                };
                let id = match self.free_ids.pop() {
                    Some(id) => {
                        if let Some(entry) = self.slabs.get_mut(id as usize) {
                            *entry = Some(slab);
                        }
                        id
                    }
                    None => {
                        self.slabs.push(Some(slab));
                        (self.slabs.len() - 1) as u32
                    }
                };
                self.list(id);
                (id, true)
            }
        };
        let class_entry = self.classes.get_mut(ci)?;
        let was_spare = class_entry.spare == Some(id);
        if was_spare {
            class_entry.spare = None;
        }
        let slab = self.slabs.get_mut(id as usize)?.as_mut()?;
        let (word, bit) = slab
            .used_bits
            .iter()
            .enumerate()
            .find_map(|(w, &bits)| (bits != u64::MAX).then(|| (w, (!bits).trailing_zeros())))?;
        let index = word as u32 * 64 + bit;
        if index >= slab.capacity {
            return None;
        }
        if let Some(bits) = slab.used_bits.get_mut(word) {
            *bits |= 1 << bit;
        }
        slab.used += 1;
        let full = slab.used == slab.capacity;
        let offset = u64::from(slab.run.start) * u64::from(page) + u64::from(index * size);
        let fresh = slab.run.source == super::pages::Source::Fresh;
        if full {
            self.unlist(id);
        }
        Some(Slot {
            slab: id,
            index,
            offset,
            size,
            created,
            was_spare,
            // Only a new slab on fresh pages is known to read as zero; any other slot may
            // hold what its last user (or the trap fill of a freed code slot) left.
            stale: !(created && fresh),
        })
    }

    /// Frees `slot`. `undo`: it was never published, so restore what taking it changed.
    /// An empty slab becomes the class's spare, or gives its pages back to `runs` (which
    /// says whether the caller must release them).
    pub fn give_back(
        &mut self,
        slot: Slot,
        undo: bool,
        runs: &mut PageRuns,
        pool_room: bool,
    ) -> Option<(Run, Returned)> {
        let id = slot.slab;
        let slab = self.slabs.get_mut(id as usize)?.as_mut()?;
        let word = (slot.index / 64) as usize;
        if let Some(bits) = slab.used_bits.get_mut(word) {
            *bits &= !(1u64 << (slot.index % 64));
        }
        let was_full = slab.used == slab.capacity;
        slab.used -= 1;
        let empty = slab.used == 0;
        let (run, class) = (slab.run, slab.class);
        if was_full {
            self.list(id);
        }
        if !empty {
            return None;
        }
        let class_entry = self.classes.get_mut(usize::from(class))?;
        let keep = if undo {
            !slot.created
        } else {
            class_entry.spare.is_none()
        };
        if keep {
            if !undo || slot.was_spare {
                class_entry.spare = Some(id);
            }
            return None;
        }
        if class_entry.spare == Some(id) {
            class_entry.spare = None;
        }
        self.unlist(id);
        if let Some(entry) = self.slabs.get_mut(id as usize) {
            *entry = None;
        }
        if undo && id as usize + 1 == self.slabs.len() && slot.created {
            self.slabs.pop();
        } else {
            self.free_ids.push(id);
        }
        Some((run, runs.give_back(run, undo, pool_room)))
    }

    fn list(&mut self, id: u32) {
        let Some(Some(slab)) = self.slabs.get(id as usize) else {
            return;
        };
        let class = usize::from(slab.class);
        let Some(entry) = self.classes.get_mut(class) else {
            return;
        };
        let at = entry.partial.len() as u32;
        entry.partial.push(id);
        if let Some(Some(slab)) = self.slabs.get_mut(id as usize) {
            slab.partial_at = at;
        }
    }

    fn unlist(&mut self, id: u32) {
        let Some(Some(slab)) = self.slabs.get_mut(id as usize) else {
            return;
        };
        let at = slab.partial_at;
        slab.partial_at = NOT_LISTED;
        let class = usize::from(slab.class);
        if at == NOT_LISTED {
            return;
        }
        let Some(entry) = self.classes.get_mut(class) else {
            return;
        };
        entry.partial.swap_remove(at as usize);
        if let Some(&moved) = entry.partial.get(at as usize) {
            if let Some(Some(slab)) = self.slabs.get_mut(moved as usize) {
                slab.partial_at = at;
            }
        }
    }

    /// Live slabs, for tests.
    #[cfg(test)]
    pub fn slab_count(&self) -> usize {
        self.slabs.iter().filter(|s| s.is_some()).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_fit_size_and_alignment() {
        assert_eq!(class_for(1, 1).map(class_size), Some(16));
        assert_eq!(class_for(100, 8).map(class_size), Some(112));
        assert_eq!(class_for(100, 32).map(class_size), Some(128));
        assert_eq!(class_for(300, 64).map(class_size), Some(320));
        assert_eq!(class_for(2048, 1).map(class_size), Some(2048));
        assert_eq!(class_for(2049, 1), None);
        assert_eq!(class_for(16, 4096), None);
        for pair in CLASSES.windows(2) {
            assert!(
                pair[1] - pair[0] <= (pair[0] / 4).max(16),
                "{pair:?} too far apart"
            );
            assert_eq!(pair[1] % 16, 0);
        }
    }

    #[test]
    fn slots_share_a_slab_and_an_empty_slab_is_kept_once() {
        let page = 4096;
        let mut runs = PageRuns::new(16);
        let mut slabs = Slabs::new();
        let class = class_for(400, 16).unwrap();
        let size = class_size(class);
        let slots: Vec<Slot> = (0..(page / size) + 1)
            .map(|_| slabs.take(class, &mut runs, page).unwrap())
            .collect();
        assert_eq!(slabs.slab_count(), 2, "one full slab and a second one");
        assert_eq!(slots[1].offset, u64::from(size));
        assert!(slots.iter().all(|s| s.offset % 16 == 0));
        for slot in slots {
            slabs.give_back(slot, false, &mut runs, true);
        }
        assert_eq!(slabs.slab_count(), 1, "one spare kept");
        assert_eq!(runs.pooled_pages(), 1, "the other slab's page is pooled");
    }

    #[test]
    fn undo_restores_slabs_and_pages() {
        let page = 4096;
        let mut runs = PageRuns::new(16);
        let mut slabs = Slabs::new();
        let class = class_for(64, 16).unwrap();
        let before = runs.extents();
        let slot = slabs.take(class, &mut runs, page).unwrap();
        assert!(!slot.stale, "a new slab on fresh pages reads as zero");
        let back = slabs.give_back(slot, true, &mut runs, true);
        assert!(matches!(back, Some((_, Returned::Freed))));
        assert_eq!(slabs.slab_count(), 0);
        assert_eq!(runs.extents(), before);

        // A spare taken and undone is the spare again.
        let a = slabs.take(class, &mut runs, page).unwrap();
        slabs.give_back(a, false, &mut runs, true);
        let b = slabs.take(class, &mut runs, page).unwrap();
        assert!(b.was_spare && b.stale);
        assert!(slabs.give_back(b, true, &mut runs, true).is_none());
        assert_eq!(slabs.classes[usize::from(class)].spare, Some(b.slab));
    }
}
