//! Page runs within one class region of a chunk: free extents (kept maximally coalesced,
//! their pages released to the OS, so they read as zero) and a pool of recently freed short
//! runs kept resident, so a warm load writes to pages that are already there.
//!
//! Pages are counted from the region's start (`u32`: a region holds at most 2^32 pages).

use std::collections::{BTreeMap, BTreeSet};

/// Runs of up to this many pages go to the pool when freed (if the arena's pool has room).
pub(crate) const POOL_RUN: u32 = 8;

/// Where a run came from, so giving it back on a failed load restores exactly that.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Source {
    /// The pool: resident, holding whatever the last user left.
    Pool,
    /// Free extents: released (or never touched), reads as zero.
    Fresh,
}

/// `count` pages from `start`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Run {
    pub start: u32,
    pub count: u32,
    pub source: Source,
}

/// What became of a run given back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Returned {
    /// Kept resident in the pool.
    Pooled,
    /// Added to the free extents: the caller must release its pages (they were written).
    Freed,
}

/// The page allocator of one class region.
#[derive(Debug)]
pub(crate) struct PageRuns {
    /// Free extents: start → length.
    free: BTreeMap<u32, u32>,
    /// The same extents by (length, start), for best fit.
    by_size: BTreeSet<(u32, u32)>,
    /// Resident runs of `n + 1` pages at index `n`, most recently freed last.
    pool: Vec<Vec<u32>>,
    pooled_pages: u64,
    pages: u32,
}

impl PageRuns {
    /// A region of `pages` pages, all free.
    pub fn new(pages: u32) -> PageRuns {
        let mut runs = PageRuns {
            free: BTreeMap::new(),
            by_size: BTreeSet::new(),
            pool: vec![Vec::new(); POOL_RUN as usize],
            pooled_pages: 0,
            pages,
        };
        if pages != 0 {
            runs.insert_extent(0, pages);
        }
        runs
    }

    /// Pages held in the pool.
    pub fn pooled_pages(&self) -> u64 {
        self.pooled_pages
    }

    /// Pages in free extents.
    pub fn free_pages(&self) -> u64 {
        self.free.values().map(|&n| u64::from(n)).sum()
    }

    /// Whether nothing is allocated (every page free or pooled).
    pub fn is_empty(&self) -> bool {
        self.free_pages() + self.pooled_pages == u64::from(self.pages)
    }

    /// `count` pages starting at a multiple of `align` pages (a power of two), from the
    /// pool if `use_pool` and a run of that length is there, otherwise the best-fitting
    /// free extent.
    pub fn take(&mut self, count: u32, align: u32, use_pool: bool) -> Option<Run> {
        if count == 0 {
            return None;
        }
        if use_pool && align <= 1 && count <= POOL_RUN {
            if let Some(start) = self.pool_slot(count).and_then(Vec::pop) {
                self.pooled_pages -= u64::from(count);
                return Some(Run {
                    start,
                    count,
                    source: Source::Pool,
                });
            }
        }
        let (start, len, at) = if align <= 1 {
            let &(len, start) = self.by_size.range((count, 0)..).next()?;
            (start, len, start)
        } else {
            // Aligned requests are rare (sections aligned beyond a page): first fit.
            self.free.iter().find_map(|(&start, &len)| {
                let at = start.checked_next_multiple_of(align)?;
                (u64::from(at) + u64::from(count) <= u64::from(start) + u64::from(len))
                    .then_some((start, len, at))
            })?
        };
        self.remove_extent(start, len);
        if at > start {
            self.insert_extent(start, at - start);
        }
        let end = start + len;
        let taken_end = at + count;
        if end > taken_end {
            self.insert_extent(taken_end, end - taken_end);
        }
        Some(Run {
            start: at,
            count,
            source: Source::Fresh,
        })
    }

    /// Gives `run` back. `undo`: it was never published, put it back where it came from
    /// (the free extents are canonical, so this restores their exact state). Otherwise it
    /// goes to the pool if `pool_room` and it is short, or to the free extents.
    pub fn give_back(&mut self, run: Run, undo: bool, pool_room: bool) -> Returned {
        let to_pool = if undo {
            run.source == Source::Pool
        } else {
            pool_room && run.count <= POOL_RUN
        };
        if to_pool {
            if let Some(slot) = self.pool_slot(run.count) {
                slot.push(run.start);
                self.pooled_pages += u64::from(run.count);
                return Returned::Pooled;
            }
        }
        let (mut start, mut len) = (run.start, run.count);
        if let Some((&before, &before_len)) = self.free.range(..start).next_back() {
            if before + before_len == start {
                self.remove_extent(before, before_len);
                start = before;
                len += before_len;
            }
        }
        let end = start + len;
        if let Some(&after_len) = self.free.get(&end) {
            self.remove_extent(end, after_len);
            len += after_len;
        }
        self.insert_extent(start, len);
        Returned::Freed
    }

    fn pool_slot(&mut self, count: u32) -> Option<&mut Vec<u32>> {
        self.pool.get_mut(count.checked_sub(1)? as usize)
    }

    fn insert_extent(&mut self, start: u32, len: u32) {
        self.free.insert(start, len);
        self.by_size.insert((len, start));
    }

    fn remove_extent(&mut self, start: u32, len: u32) {
        self.free.remove(&start);
        self.by_size.remove(&(len, start));
    }

    /// The free extents, for tests that check a state was restored.
    #[cfg(test)]
    pub fn extents(&self) -> Vec<(u32, u32)> {
        self.free.iter().map(|(&s, &l)| (s, l)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn best_fit_split_and_coalesce_restore_the_extents() {
        let mut runs = PageRuns::new(100);
        let a = runs.take(10, 1, true).unwrap();
        let b = runs.take(5, 1, true).unwrap();
        assert_eq!((a.start, b.start), (0, 10));
        assert_eq!(a.source, Source::Fresh);
        assert_eq!(runs.extents(), [(15, 85)]);
        assert_eq!(runs.give_back(a, true, true), Returned::Freed);
        assert_eq!(runs.extents(), [(0, 10), (15, 85)]);
        // The 5-page hole at 0 fits best.
        let c = runs.take(4, 1, true).unwrap();
        assert_eq!(c.start, 0);
        runs.give_back(c, true, true);
        runs.give_back(b, true, true);
        assert_eq!(runs.extents(), [(0, 100)]);
        assert!(runs.is_empty());
    }

    #[test]
    fn short_runs_are_pooled_and_reused_last_in_first_out() {
        let mut runs = PageRuns::new(64);
        let a = runs.take(2, 1, true).unwrap();
        let b = runs.take(2, 1, true).unwrap();
        assert_eq!(runs.give_back(a, false, true), Returned::Pooled);
        assert_eq!(runs.give_back(b, false, true), Returned::Pooled);
        assert_eq!(runs.pooled_pages(), 4);
        let c = runs.take(2, 1, true).unwrap();
        assert_eq!((c.start, c.source), (b.start, Source::Pool));
        // Undo of a pooled run puts it back in the pool.
        assert_eq!(runs.give_back(c, true, false), Returned::Pooled);
        // Without room, or too long, a run goes to the free extents.
        let long = runs.take(POOL_RUN + 1, 1, true).unwrap();
        assert_eq!(runs.give_back(long, false, true), Returned::Freed);
        let d = runs.take(2, 1, false).unwrap();
        assert_eq!(d.source, Source::Fresh);
        assert_eq!(runs.give_back(d, false, false), Returned::Freed);
    }

    #[test]
    fn aligned_runs_start_on_their_alignment() {
        let mut runs = PageRuns::new(64);
        let _one = runs.take(1, 1, false).unwrap();
        let a = runs.take(3, 16, false).unwrap();
        assert_eq!(a.start, 16);
        assert_eq!(runs.extents(), [(1, 15), (19, 45)]);
        runs.give_back(a, true, false);
        assert_eq!(runs.extents(), [(1, 63)]);
        assert!(runs.take(64, 1, false).is_none());
        assert!(runs.take(1, 128, false).is_none());
    }
}
