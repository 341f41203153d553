//! Page runs within one class region of a chunk: free extents (kept maximally coalesced,
//! their pages released to the OS, so they read as zero) and a pool of recently freed short
//! runs kept resident, so a warm load writes to pages that are already there.
//!
//! In a region whose pages change protection (page-granular code and read-only data), the
//! pool has two parts: *dirty* runs, freed at their final protection, and *ready* runs,
//! already made writable in a batch ([`PageRuns::take_dirty`], [`PageRuns::put_ready`]):
//! one `mprotect` for many runs when they touch, and a load that takes a ready run needs no
//! `mprotect` before writing.
//!
//! A load that has to make fresh pages writable makes the free pages right after its run
//! writable in the same `mprotect` ([`PageRuns::take_ahead`]): they go back to the free
//! extents as the region's *opened* stretch ([`PageRuns::put_opened`]), and the next loads
//! that take fresh pages from its start write them without an `mprotect` of their own.
//! With many modules alive no freed run is there to reuse, and every load took fresh
//! pages: two `mprotect`s per class instead of one.
//!
//! Pages are counted from the region's start (`u32`: a region holds at most 2^32 pages).

use std::collections::{BTreeMap, BTreeSet};

/// Runs of up to this many pages go to the pool when freed (if the arena's pool has room).
pub(crate) const POOL_RUN: u32 = 8;

/// Free pages a load opens ahead of its run (one `mprotect` then serves this many more
/// one-page runs).
pub(crate) const OPEN_AHEAD: u32 = 16;

/// Dirty runs are made ready this many at a time, and only when they lie in at most
/// [`READY_STRETCHES`] contiguous stretches (one `mprotect`, one extra mapping, each):
/// a warm load/unload loop frees neighbouring pages; random churn does not, and then
/// dirty runs are reused directly.
pub(crate) const RECYCLE_AT: usize = 16;
pub(crate) const READY_STRETCHES: usize = 2;

/// Where a run came from, so giving it back on a failed load restores exactly that.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Source {
    /// The pool: resident, holding whatever the last user left, at its final protection.
    Pool,
    /// The ready pool: resident, stale, and already writable.
    Ready,
    /// Free extents: released (or never touched), reads as zero.
    Fresh,
    /// Free extents of the opened stretch: never handed out since they were released or
    /// made, and already writable. Handled as stale (a stray write could have reached
    /// them): what the segment does not fill is zeroed.
    Opened,
}

impl Source {
    /// Its pages are writable already when taken: no `mprotect` before writing them, and
    /// a failed load leaves them writable.
    pub fn is_writable(self) -> bool {
        matches!(self, Source::Ready | Source::Opened)
    }
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
    /// Resident runs already writable, likewise by length.
    ready: Vec<Vec<u32>>,
    /// Runs in `pool` (for deciding when to make a batch of them ready).
    dirty_runs: usize,
    /// Pages in `pool` and `ready`, and pages taken out by `take_dirty` and not yet put
    /// back (they are still the pool's).
    pooled_pages: u64,
    pages: u32,
    /// Dirty runs need an `mprotect` to be written: take fresh pages before them, so that
    /// they collect into batches made ready together.
    dirty_last: bool,
    /// The opened stretch `[start, end)`: free pages (always inside the free extents)
    /// already writable.
    opened: Option<(u32, u32)>,
}

impl PageRuns {
    /// A region of `pages` pages, all free.
    pub fn new(pages: u32) -> PageRuns {
        let mut runs = PageRuns {
            free: BTreeMap::new(),
            by_size: BTreeSet::new(),
            pool: vec![Vec::new(); POOL_RUN as usize],
            ready: vec![Vec::new(); POOL_RUN as usize],
            dirty_runs: 0,
            pooled_pages: 0,
            pages,
            dirty_last: false,
            opened: None,
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

    /// Takes fresh pages before dirty ones (for regions whose pages change protection).
    pub fn set_dirty_last(&mut self) {
        self.dirty_last = true;
    }

    /// Runs in the dirty pool.
    #[cfg(test)]
    pub fn dirty_runs(&self) -> usize {
        self.dirty_runs
    }

    /// `count` pages starting at a multiple of `align` pages (a power of two), from the
    /// ready pool or the pool if `use_pool` and a run of that length is there, otherwise
    /// the best-fitting free extent.
    pub fn take(&mut self, count: u32, align: u32, use_pool: bool) -> Option<Run> {
        if count == 0 {
            return None;
        }
        let pooled = use_pool && align <= 1 && count <= POOL_RUN;
        if pooled {
            if let Some(run) = self.take_pooled(count, Source::Ready) {
                return Some(run);
            }
            if !self.dirty_last || self.dirty_runs >= RECYCLE_AT {
                if let Some(run) = self.take_pooled(count, Source::Pool) {
                    return Some(run);
                }
            }
        }
        match self.take_fresh(count, align) {
            Some(run) => Some(run),
            None if pooled && self.dirty_last => self.take_pooled(count, Source::Pool),
            None => None,
        }
    }

    /// A pooled run of `count` pages from the ready or the dirty pool.
    fn take_pooled(&mut self, count: u32, source: Source) -> Option<Run> {
        let slot = count.checked_sub(1)? as usize;
        let stack = match source {
            Source::Ready => self.ready.get_mut(slot),
            _ => self.pool.get_mut(slot),
        };
        let start = stack.and_then(Vec::pop)?;
        self.pooled_pages -= u64::from(count);
        if source == Source::Pool {
            self.dirty_runs -= 1;
        }
        Some(Run {
            start,
            count,
            source,
        })
    }

    /// `count` fresh pages aligned to `align` pages: the best-fitting free extent.
    fn take_fresh(&mut self, count: u32, align: u32) -> Option<Run> {
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
            source: self.take_from_opened(at, taken_end),
        })
    }

    /// Keeps the opened stretch inside the free extents when `[at, end)` leaves them:
    /// `Opened` if the run is the stretch's start (the stretch then begins after it).
    /// Otherwise the pages of the stretch the run overlaps, and those past it, are
    /// forgotten (still writable, they are opened again by the next load that takes them).
    fn take_from_opened(&mut self, at: u32, end: u32) -> Source {
        let Some((open, open_end)) = self.opened else {
            return Source::Fresh;
        };
        if end <= open || at >= open_end {
            return Source::Fresh;
        }
        if at == open && end <= open_end {
            self.opened = (end < open_end).then_some((end, open_end));
            return Source::Opened;
        }
        self.opened = if at > open {
            Some((open, at))
        } else {
            (end < open_end).then_some((end, open_end))
        };
        Source::Fresh
    }

    /// Up to `max` free pages from `start` on, if `start` begins a free extent and the
    /// region has no opened stretch: taken out of the free extents to be made writable
    /// with the run before them, then given back with [`put_opened`](PageRuns::put_opened)
    /// (or with `give_back` and `undo`, as fresh pages, if that failed).
    pub fn take_ahead(&mut self, start: u32, max: u32) -> Option<Run> {
        if self.opened.is_some() || max == 0 {
            return None;
        }
        let len = *self.free.get(&start)?;
        let count = len.min(max);
        self.remove_extent(start, len);
        if len > count {
            self.insert_extent(start + count, len - count);
        }
        Some(Run {
            start,
            count,
            source: Source::Fresh,
        })
    }

    /// Gives back pages taken with [`take_ahead`](PageRuns::take_ahead), now writable: they
    /// are the region's opened stretch.
    pub fn put_opened(&mut self, run: Run) {
        self.give_back(
            Run {
                source: Source::Fresh,
                ..run
            },
            true,
            false,
        );
        if self.opened.is_none() {
            self.opened = Some((run.start, run.start + run.count));
        }
    }

    /// The opened stretch: pages `[start, end)`.
    pub fn opened(&self) -> Option<(u32, u32)> {
        self.opened
    }

    /// Pages in the opened stretch.
    pub fn opened_pages(&self) -> u64 {
        self.opened
            .map_or(0, |(start, end)| u64::from(end.saturating_sub(start)))
    }

    /// Gives `run` back. `undo`: it was never published, put it back where it came from
    /// (the free extents are canonical, so this restores their exact state). Otherwise it
    /// goes to the pool if `pool_room` and it is short, or to the free extents.
    pub fn give_back(&mut self, run: Run, undo: bool, pool_room: bool) -> Returned {
        if undo && run.source == Source::Ready {
            self.put_ready(run);
            return Returned::Pooled;
        }
        if undo && run.source == Source::Opened {
            // Still writable: the stretch begins at it again (if nothing was taken since;
            // otherwise it is free and writable, outside the stretch).
            let end = run.start + run.count;
            self.opened = match self.opened {
                None => Some((run.start, end)),
                Some((open, open_end)) if open == end => Some((run.start, open_end)),
                other => other,
            };
        }
        let to_pool = if undo {
            run.source == Source::Pool
        } else {
            pool_room && run.count <= POOL_RUN
        };
        if to_pool {
            if let Some(slot) = self.pool.get_mut(run.count as usize - 1) {
                slot.push(run.start);
                self.pooled_pages += u64::from(run.count);
                self.dirty_runs += 1;
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

    /// The [`RECYCLE_AT`] most recently freed dirty runs, taken out to be made writable,
    /// if there are that many and they lie in at most [`READY_STRETCHES`] stretches. They
    /// still count as pooled until [`put_ready`](PageRuns::put_ready) (or a `give_back`
    /// with `undo`, if making them writable failed) returns them.
    pub fn take_recyclable(&mut self) -> Option<Vec<Run>> {
        if !self.dirty_last || self.dirty_runs < RECYCLE_AT {
            return None;
        }
        let mut picked: Vec<(usize, Run)> = Vec::with_capacity(RECYCLE_AT);
        for (slot, stack) in self.pool.iter().enumerate() {
            for &start in stack.iter().rev() {
                if picked.len() == RECYCLE_AT {
                    break;
                }
                let count = slot as u32 + 1;
                picked.push((
                    slot,
                    Run {
                        start,
                        count,
                        source: Source::Pool,
                    },
                ));
            }
        }
        let mut spans: Vec<(u32, u32)> = picked.iter().map(|(_, r)| (r.start, r.count)).collect();
        spans.sort_unstable();
        let stretches = spans
            .windows(2)
            .filter(|w| w[0].0 + w[0].1 != w[1].0)
            .count()
            + 1;
        if stretches > READY_STRETCHES {
            return None;
        }
        for (slot, run) in &picked {
            if let Some(stack) = self.pool.get_mut(*slot) {
                stack.pop();
            }
            self.pooled_pages -= u64::from(run.count);
        }
        self.dirty_runs -= picked.len();
        Some(picked.into_iter().map(|(_, r)| r).collect())
    }

    /// Adds `run`, now writable, to the ready pool.
    pub fn put_ready(&mut self, run: Run) {
        if let Some(stack) = self.ready.get_mut(run.count as usize - 1) {
            stack.push(run.start);
            self.pooled_pages += u64::from(run.count);
        }
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
    fn pages_opened_ahead_serve_the_next_fresh_takes_from_their_start() {
        let mut runs = PageRuns::new(100);
        runs.set_dirty_last();
        let first = runs.take(1, 1, true).unwrap();
        assert_eq!((first.start, first.source), (0, Source::Fresh));
        let ahead = runs.take_ahead(1, OPEN_AHEAD).unwrap();
        assert_eq!((ahead.start, ahead.count), (1, OPEN_AHEAD));
        assert_eq!(runs.take_ahead(1, OPEN_AHEAD), None, "taken already");
        // While they are being made writable nobody else is handed them.
        let other = runs.take(2, 1, true).unwrap();
        assert_eq!(other.start, 1 + OPEN_AHEAD);
        runs.give_back(other, true, true);
        runs.put_opened(ahead);
        assert_eq!(runs.opened(), Some((1, 1 + OPEN_AHEAD)));
        assert_eq!(runs.extents(), [(1, 99)], "back in the free extents");
        assert_eq!(
            runs.take_ahead(1 + OPEN_AHEAD, OPEN_AHEAD),
            None,
            "one stretch"
        );
        // Taken from its start: opened (no mprotect), and the stretch moves on.
        let a = runs.take(1, 1, true).unwrap();
        assert_eq!((a.start, a.source), (1, Source::Opened));
        let b = runs.take(3, 1, true).unwrap();
        assert_eq!((b.start, b.source), (2, Source::Opened));
        assert_eq!(runs.opened(), Some((5, 1 + OPEN_AHEAD)));
        assert_eq!(runs.opened_pages(), u64::from(OPEN_AHEAD - 4));
        // A failed load gives its opened run back: the stretch begins at it again.
        runs.give_back(b, true, true);
        assert_eq!(runs.opened(), Some((2, 1 + OPEN_AHEAD)));
        assert_eq!(runs.extents(), [(2, 98)]);
        // A published run freed is not opened pages: it goes to the pool.
        assert_eq!(runs.give_back(a, false, true), Returned::Pooled);
        assert_eq!(runs.opened(), Some((2, 1 + OPEN_AHEAD)));
    }

    #[test]
    fn a_fresh_take_across_the_opened_stretch_keeps_it_inside_the_free_extents() {
        let mut runs = PageRuns::new(64);
        let first = runs.take(4, 1, false).unwrap();
        let ahead = runs.take_ahead(first.start + first.count, 8).unwrap();
        runs.put_opened(ahead);
        assert_eq!(runs.opened(), Some((4, 12)));
        // Longer than the stretch: fresh (made writable whole), the stretch used up.
        let long = runs.take(10, 1, false).unwrap();
        assert_eq!((long.start, long.source), (4, Source::Fresh));
        assert_eq!(runs.opened(), None);
        runs.give_back(long, true, false);
        let ahead = runs.take_ahead(4, 8).unwrap();
        runs.put_opened(ahead);
        // Aligned past the stretch's start: the part before it stays opened.
        let aligned = runs.take(2, 8, false).unwrap();
        assert_eq!((aligned.start, aligned.source), (8, Source::Fresh));
        assert_eq!(runs.opened(), Some((4, 8)));
        let (start, end) = runs.opened().unwrap();
        assert!(runs
            .extents()
            .iter()
            .any(|&(s, l)| s <= start && end <= s + l));
    }

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
    fn neighbouring_dirty_runs_are_made_ready_together_scattered_ones_are_not() {
        let mut runs = PageRuns::new(256);
        runs.set_dirty_last();
        // A warm loop: fresh pages while fewer than RECYCLE_AT are dirty.
        let taken: Vec<Run> = (0..RECYCLE_AT)
            .map(|_| runs.take(1, 1, true).unwrap())
            .collect();
        assert!(taken.iter().all(|r| r.source == Source::Fresh));
        for (i, run) in taken.iter().enumerate() {
            assert!(runs.take_recyclable().is_none() || i == RECYCLE_AT);
            runs.give_back(*run, false, true);
        }
        let ready = runs.take_recyclable().expect("one stretch");
        assert_eq!(ready.len(), RECYCLE_AT);
        assert_eq!((runs.dirty_runs(), runs.pooled_pages()), (0, 0));
        for run in &ready {
            runs.put_ready(*run);
        }
        assert_eq!(runs.pooled_pages(), RECYCLE_AT as u64);
        let r = runs.take(1, 1, true).unwrap();
        assert_eq!(r.source, Source::Ready);
        assert_eq!(runs.give_back(r, true, false), Returned::Pooled);
        assert_eq!(runs.take(1, 1, true).map(|r| r.source), Some(Source::Ready));

        // Scattered frees stay dirty, and are taken once RECYCLE_AT are there.
        let mut scattered = PageRuns::new(256);
        scattered.set_dirty_last();
        let all: Vec<Run> = (0..64)
            .map(|_| scattered.take(1, 1, true).unwrap())
            .collect();
        for run in all.iter().step_by(3).take(RECYCLE_AT) {
            scattered.give_back(*run, false, true);
        }
        assert!(scattered.take_recyclable().is_none());
        assert_eq!(
            scattered.take(1, 1, true).map(|r| r.source),
            Some(Source::Pool)
        );
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
