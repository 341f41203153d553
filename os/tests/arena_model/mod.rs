//! A model of the arena's public API, shared by the property test (`os/tests/arena_props.rs`,
//! operations from proptest strategies) and the fuzz target (`fuzz/fuzz_targets/arena_api.rs`,
//! operations decoded from bytes): single and batch allocations of arbitrary layouts (sizes
//! and alignments from 0 to `u64::MAX`, powers of two or not), publishing one or all,
//! freeing, allocating twice. After every step it checks what the safe API promises:
//!
//! - every segment handed out (where it is written and where it runs) lies inside one of
//!   the arena's own reservations ([`Arena::regions`]), at its alignment, exactly its size;
//! - no two live modules' segments overlap, nor two segments of one module;
//! - every live module's bytes are still the pattern written into them (distinct per
//!   module and segment, position-dependent);
//! - memory said to read as zero does;
//! - every refusal is an [`ArenaError`] of the right kind ([`ArenaError::TooLarge`] naming
//!   the value and the limit for a size or alignment above the limit) and leaves the arena's
//!   module count and requested bytes as they were; nothing panics.

#![allow(dead_code)] // each user drives its own subset

use elfjit_core::{Layout, MemoryBackend, SegmentKind, SegmentRequest};
use elfjit_os::{Arena, ArenaBackend, ArenaConfig, ArenaError, Mode};

/// The arena every run uses: small chunks, so a few modules need several, and a low
/// reservation limit, so the limit is reached and large segments stay cheap to check.
pub fn config(mode: Mode, retain: usize) -> ArenaConfig {
    ArenaConfig {
        class_bytes: 2 << 20,
        max_reserved: 32 << 20,
        retain,
        ..ArenaConfig::new(mode)
    }
}

/// Runs `ops` on `arena` (which holds nothing yet), checking after every step, then frees
/// everything.
pub fn run(arena: Arena, ops: &[Op]) {
    let mut model = Model::new(arena);
    for op in ops {
        model.step(op);
    }
    model.finish();
}

/// Fuzzer bytes: the first picks the mode and the pool, the rest are operations
/// ([`decode`]). A packed arena the system refuses is that typed refusal, and the input
/// then runs on a page-granular arena.
pub fn run_bytes(data: &[u8]) {
    let Some((&first, rest)) = data.split_first() else {
        return;
    };
    let mode = if first & 1 == 0 {
        Mode::PageGranular
    } else {
        Mode::Packed
    };
    let retain = if first & 2 == 0 { 0 } else { 4 << 20 };
    let arena = match Arena::with_config(config(mode, retain)) {
        Ok(arena) => arena,
        Err(ArenaError::PackedUnavailable { .. }) if mode == Mode::Packed => {
            Arena::with_config(config(Mode::PageGranular, retain)).expect("a page-granular arena")
        }
        Err(e) => panic!("arena {mode:?}: {e}"),
    };
    run(arena, &decode(rest));
}

/// One segment's size and alignment as choices, resolved against the arena's page size
/// and limit ([`size`], [`align`]).
#[derive(Clone, Copy, Debug)]
pub struct Pick {
    pub size: u8,
    pub align: u8,
    pub raw: u64,
}

/// One step.
#[derive(Clone, Debug)]
pub enum Op {
    /// One module through `Arena::backend` and `MemoryBackend::allocate`.
    Allocate([Pick; 3]),
    /// Several through `Arena::allocate_batch`.
    AllocateBatch(Vec<[Pick; 3]>),
    /// `publish` (and `publish_all` for a batch member) of the live module at this index
    /// (modulo their number).
    Publish(usize),
    /// `ArenaBackend::publish_all` of every live module.
    PublishAll,
    /// Drops the live module at this index.
    Free(usize),
    /// Calls `allocate` again on the live module at this index: refused.
    AllocateAgain(usize),
}

/// A segment size: mostly ones that fit (0, 1, around a page, slab classes' edges, a few
/// pages, rarely a quarter of the limit), sometimes ones that cannot (the limit and past
/// it, `u64::MAX` and near it).
pub fn size(pick: Pick, page: u64, limit: u64) -> u64 {
    match pick.size {
        0..=223 => match pick.size % 14 {
            0 | 1 => 0,
            2 => 1,
            3 => page - 1,
            4 => page,
            5 => page + 1,
            6 => 16,
            7 => 100,
            8 => 2048,
            9 => 2049,
            10 => 3 * page + 17,
            11 => (64 << 10) + 3,
            _ => pick.raw % (4 * page),
        },
        224..=229 => limit / 4,
        _ => match pick.size % 8 {
            0 => limit,
            1 => limit + 1,
            2 => u64::MAX,
            3 => u64::MAX - page + 1,
            4 => 1 << 40,
            5 => 1 << 63,
            6 => limit.saturating_add(pick.raw % page),
            _ => pick.raw,
        },
    }
}

/// A segment alignment: mostly powers of two up to a few MiB (0 is taken as 1), sometimes
/// numbers that are not powers of two, or are above the limit.
pub fn align(pick: Pick, page: u64, limit: u64) -> u64 {
    match pick.align {
        0..=223 => match pick.align % 12 {
            0 => 0,
            1 => 1,
            2 => 2,
            3 => 8,
            4 => 16,
            5 => 64,
            6 => page / 2,
            7 => page,
            8 => 2 * page,
            9 => 64 << 10,
            10 => 2 << 20,
            _ => 1 << (pick.raw % 12),
        },
        _ => match pick.align % 9 {
            0 => 3,
            1 => 24,
            2 => 3 * page,
            3 => limit,
            4 => limit.saturating_mul(2),
            5 => 1 << 63,
            6 => u64::MAX,
            7 => 1 << (pick.raw % 64),
            _ => pick.raw,
        },
    }
}

/// Decodes operations from fuzzer bytes: a byte for the kind, then per segment a byte for
/// its size, one for its alignment and two for the raw value; missing bytes read as 0.
pub fn decode(bytes: &[u8]) -> Vec<Op> {
    let mut input = bytes.iter().copied();
    let mut ops = Vec::new();
    while let Some(kind) = input.next() {
        let mut next = || input.next().unwrap_or(0);
        let op = match kind % 12 {
            0..=3 => Op::Allocate(picks(&mut next)),
            4 | 5 => {
                let count = 1 + usize::from(next() % 6);
                Op::AllocateBatch((0..count).map(|_| picks(&mut next)).collect())
            }
            6 | 7 => Op::Publish(usize::from(next())),
            8 => Op::PublishAll,
            9 | 10 => Op::Free(usize::from(next())),
            _ => Op::AllocateAgain(usize::from(next())),
        };
        ops.push(op);
    }
    ops
}

/// Three segments' choices from `next` byte after byte.
fn picks(next: &mut impl FnMut() -> u8) -> [Pick; 3] {
    [(); 3].map(|()| Pick {
        size: next(),
        align: next(),
        raw: u64::from(u16::from_le_bytes([next(), next()])),
    })
}

/// Where one segment of a live module was handed out.
#[derive(Clone, Copy, Debug)]
struct Segment {
    writer: usize,
    target: usize,
    size: usize,
    seed: u8,
}

#[derive(Debug)]
struct Live {
    layout: Layout,
    /// Counted in `ArenaStats::modules`: a module with no bytes allocated alone holds
    /// nothing and is not; one of a batch is.
    counted: bool,
    published: bool,
    segments: [Option<Segment>; 3],
}

/// A real arena, the modules alive in it, and what was written into them.
pub struct Model {
    arena: Arena,
    page: u64,
    limit: u64,
    backends: Vec<ArenaBackend>,
    live: Vec<Live>,
    next_id: u32,
}

/// 256 bytes of the pattern a segment with `seed` holds (it repeats).
fn pattern(seed: u8) -> [u8; 256] {
    let mut block = [0u8; 256];
    for (i, b) in block.iter_mut().enumerate() {
        *b = seed.wrapping_add(i as u8);
    }
    block
}

/// Why a layout must be refused, if it must.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Refusal {
    /// An alignment that is not a power of two.
    NotPowerOfTwo,
    /// A size or alignment above the limit.
    TooLarge,
}

impl Model {
    /// A model over `arena`, which holds nothing yet.
    pub fn new(arena: Arena) -> Model {
        assert_eq!(arena.stats().modules, 0);
        Model {
            page: arena.page_size() as u64,
            limit: arena.request_limit(),
            arena,
            backends: Vec::new(),
            live: Vec::new(),
            next_id: 0,
        }
    }

    /// The arena's mode.
    pub fn mode(&self) -> Mode {
        self.arena.mode()
    }

    /// Runs `op`, then checks every invariant.
    pub fn step(&mut self, op: &Op) {
        match op {
            Op::Allocate(picks) => self.allocate(picks),
            Op::AllocateBatch(picks) => self.allocate_batch(picks),
            Op::Publish(i) => self.publish(*i),
            Op::PublishAll => {
                ArenaBackend::publish_all(&mut self.backends).expect("publish_all");
                for (b, live) in self.backends.iter().zip(&mut self.live) {
                    assert!(b.is_published());
                    live.published = true;
                }
            }
            Op::Free(i) => {
                if !self.live.is_empty() {
                    let i = i % self.live.len();
                    self.live.swap_remove(i);
                    drop(self.backends.swap_remove(i));
                }
            }
            Op::AllocateAgain(i) => {
                if !self.live.is_empty() {
                    let i = i % self.live.len();
                    let (b, live) = (&mut self.backends[i], &self.live[i]);
                    let e = b.allocate(&live.layout).expect_err("a second allocation");
                    let full = b.error().copied();
                    assert!(
                        matches!(full, Some(ArenaError::BadRequest { .. })),
                        "{e}: {full:?}"
                    );
                }
            }
        }
        self.check();
    }

    /// Frees every module: the arena holds nothing afterwards.
    pub fn finish(mut self) {
        self.live.clear();
        self.backends.clear();
        let stats = self.arena.stats();
        assert_eq!((stats.modules, stats.requested, stats.held), (0, 0, 0));
    }

    fn layout(&self, picks: &[Pick; 3]) -> Layout {
        Layout::new(picks.map(|p| SegmentRequest {
            size: size(p, self.page, self.limit),
            align: align(p, self.page, self.limit),
        }))
    }

    /// Whether `layout` must be refused, and why (both, if both apply).
    fn refusals(&self, layout: &Layout) -> Vec<Refusal> {
        let mut out = Vec::new();
        let mut pages: u64 = 0;
        for kind in SegmentKind::ALL {
            let r = layout.get(kind);
            if !r.align.max(1).is_power_of_two() {
                out.push(Refusal::NotPowerOfTwo);
            }
            if r.size > self.limit || r.align > self.limit {
                out.push(Refusal::TooLarge);
            }
            pages = pages.saturating_add(r.size.div_ceil(self.page));
        }
        if pages.saturating_mul(self.page) > self.limit {
            out.push(Refusal::TooLarge);
        }
        out
    }

    /// Checks a refusal: of the kind it must be (any of `must`), or, if nothing had to be
    /// refused, the limit reached (or, for a `batch`, its pages above the limit).
    fn check_refusal(&self, e: &ArenaError, must: &[Refusal], batch: bool) {
        let text = e.to_string();
        match *e {
            ArenaError::TooLarge { size, limit, .. } => {
                assert!(must.contains(&Refusal::TooLarge) || batch, "{text}");
                assert_eq!(limit, self.limit, "{text}");
                assert!(size > limit, "{text}");
                assert!(text.contains(&size.to_string()), "{text}");
                assert!(text.contains(&limit.to_string()), "{text}");
            }
            ArenaError::BadRequest { .. } => {
                assert!(must.contains(&Refusal::NotPowerOfTwo), "{text}")
            }
            ArenaError::Exhausted { .. } => assert!(must.is_empty(), "{text}"),
            _ => panic!("unexpected refusal: {text}"),
        }
    }

    fn allocate(&mut self, picks: &[Pick; 3]) {
        let layout = self.layout(picks);
        let must = self.refusals(&layout);
        let mut b = self.arena.backend();
        match b.allocate(&layout) {
            Ok(placement) => {
                assert!(must.is_empty(), "{layout:?} was accepted: {must:?}");
                self.adopt(b, layout, placement, false);
            }
            Err(e) => {
                let full = b.error().copied();
                let full = full.unwrap_or_else(|| panic!("{e}: no arena error"));
                self.check_refusal(&full, &must, false);
                assert!(b.segment_mut(SegmentKind::Data).is_none());
            }
        }
    }

    fn allocate_batch(&mut self, picks: &[[Pick; 3]]) {
        let layouts: Vec<Layout> = picks.iter().map(|p| self.layout(p)).collect();
        let must: Vec<Refusal> = layouts.iter().flat_map(|l| self.refusals(l)).collect();
        match self.arena.allocate_batch(&layouts) {
            Ok(batch) => {
                assert!(must.is_empty(), "{layouts:?} was accepted: {must:?}");
                assert_eq!(batch.len(), layouts.len());
                for (mut b, layout) in batch.into_iter().zip(layouts) {
                    let placement = b.allocate(&layout).expect("the layout the batch reserved");
                    self.adopt(b, layout, placement, true);
                }
            }
            Err(e) => self.check_refusal(&e, &must, true),
        }
    }

    /// Checks a module just allocated, fills its segments with its pattern and keeps it.
    fn adopt(
        &mut self,
        mut b: ArenaBackend,
        layout: Layout,
        placement: elfjit_core::Placement,
        batch: bool,
    ) {
        let id = self.next_id;
        self.next_id += 1;
        let zero_filled = b.zero_filled();
        let mut segments = [None; 3];
        for (kind, slot) in SegmentKind::ALL.into_iter().zip(&mut segments) {
            let request = layout.get(kind);
            let segment = b.segment(kind);
            if request.size == 0 {
                assert_eq!(segment, None, "{kind:?} is empty");
                assert!(b.segment_mut(kind).is_none());
                continue;
            }
            let (target, size) = segment.unwrap_or_else(|| panic!("no {kind:?} segment"));
            assert_eq!(size as u64, request.size);
            assert_eq!(placement.target(kind), target as u64);
            assert!(
                (target as u64).is_multiple_of(request.align.max(1)),
                "{kind:?} at {target:#x} is not aligned to {}",
                request.align
            );
            let seed = (id.wrapping_mul(7) as u8).wrapping_add(kind.index() as u8 * 85);
            let bytes = b.segment_mut(kind).expect("writable until published");
            assert_eq!(bytes.len(), size);
            if zero_filled {
                // Compared a block at a time (a fuzzer's comparison tracing made a byte at
                // a time its hot spot).
                const ZERO: [u8; 4096] = [0; 4096];
                let zero = bytes.chunks(ZERO.len()).all(|c| c == &ZERO[..c.len()]);
                assert!(zero, "{kind:?} does not read as zero");
            }
            let block = pattern(seed);
            for chunk in bytes.chunks_mut(block.len()) {
                chunk.copy_from_slice(&block[..chunk.len()]);
            }
            *slot = Some(Segment {
                writer: bytes.as_ptr() as usize,
                target,
                size,
                seed,
            });
        }
        self.backends.push(b);
        let counted = batch || segments.iter().any(Option::is_some);
        self.live.push(Live {
            layout,
            counted,
            published: false,
            segments,
        });
    }

    fn publish(&mut self, i: usize) {
        if self.live.is_empty() {
            return;
        }
        let i = i % self.live.len();
        let (b, live) = (&mut self.backends[i], &mut self.live[i]);
        if live.published {
            assert!(b.publish().is_err(), "published twice");
            return;
        }
        // A batch member's `publish` only ends writing; `publish_all` makes it runnable.
        let _ = b.publish();
        assert!(b.segment_mut(SegmentKind::Data).is_none(), "sealed");
        if !b.is_published() {
            ArenaBackend::publish_all(std::slice::from_mut(b)).expect("publish_all");
        }
        assert!(b.is_published());
        assert!(SegmentKind::ALL.iter().all(|&k| b.segment_mut(k).is_none()));
        live.published = true;
    }

    /// Every invariant over the live modules.
    fn check(&self) {
        let spans = self.arena.regions();
        let inside = |start: usize, len: usize| {
            spans
                .iter()
                .any(|&(s, l)| s <= start && len <= l && start - s <= l - len)
        };
        // (start, len, module, segment), each address range once.
        let mut ranges: Vec<(usize, usize, usize, usize)> = Vec::new();
        let mut requested = 0u64;
        for (m, live) in self.live.iter().enumerate() {
            for (k, seg) in live.segments.iter().enumerate() {
                let Some(seg) = seg else { continue };
                requested += seg.size as u64;
                for at in [seg.writer, seg.target] {
                    assert!(
                        inside(at, seg.size),
                        "module {m} segment {k}: {:#x} bytes at {at:#x} outside the arena {spans:x?}",
                        seg.size
                    );
                    if !ranges.contains(&(at, seg.size, m, k)) {
                        ranges.push((at, seg.size, m, k));
                    }
                }
                // SAFETY: the segment is live (its backend is held), mapped readable where
                // it runs in every state (written, sealed, published), and no `&mut` slice
                // into it exists outside `adopt`.
                let bytes =
                    unsafe { std::slice::from_raw_parts(seg.target as *const u8, seg.size) };
                let block = pattern(seg.seed);
                assert!(
                    bytes.chunks(block.len()).all(|c| c == &block[..c.len()]),
                    "module {m} segment {k} at {:#x} changed",
                    seg.target
                );
            }
        }
        ranges.sort_unstable();
        for pair in ranges.windows(2) {
            let ((a, alen, am, ak), (b, _, bm, bk)) = (pair[0], pair[1]);
            assert!(
                a + alen <= b,
                "module {am} segment {ak} ({alen:#x} bytes at {a:#x}) overlaps module {bm} \
                 segment {bk} at {b:#x}"
            );
        }
        let stats = self.arena.stats();
        let counted = self.live.iter().filter(|l| l.counted).count();
        assert_eq!(stats.modules, counted as u64, "{stats:?}");
        assert_eq!(stats.requested, requested, "{stats:?}");
    }
}
