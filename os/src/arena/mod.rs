//! [`Arena`]: code memory that many modules share.
//!
//! An arena reserves address space in large chunks (`PROT_NONE`, `MAP_NORESERVE`: no pages,
//! no commit charge) and splits each chunk into one region per protection class — code,
//! read-only data, data — so that pages of one protection lie together and the kernel
//! keeps each region as one mapping however many modules live in it. A module's three
//! segments always come from one chunk, so they stay within reach of each other
//! (x86_64 PC32 ±2 GiB, aarch64 ADRP ±4 GiB); the core range-checks every relocation anyway.
//!
//! Two ways to publish, chosen per arena ([`Mode`]); in neither is any mapping writable and
//! executable at once:
//!
//! - **page-granular** (default): each segment of a module gets whole pages. Free pages
//!   rest at their region's final protection; a module's pages are made read/write while
//!   it is written and protected again when it is published. No page is shared between
//!   modules, and no writable alias of code exists.
//! - **packed** (opt-in, [`Arena::packed`]): small segments share pages (slabs of
//!   16-byte-granular size classes). Code and read-only data live in a memfd mapped twice:
//!   a read/write view that the loader writes, and read/execute and read-only views that
//!   run. Publishing needs no `mprotect`. The price: a writable alias of the code exists
//!   at another address of the process for as long as the arena lives (see SECURITY.md).
//!   Across `fork` the child's views share the parent's memfd, so the parent never writes
//!   or releases the code and read-only slots of a module that was live when it forked
//!   (they are withheld, [`ArenaStats::quarantined`]), and the child loads nothing
//!   ([`ArenaError::UsedAfterFork`]): each keeps running its own modules.
//!
//! Unloading gives a module's pages back for reuse. Runs of up to eight pages are kept
//! resident in a pool bounded by [`ArenaConfig::retain`] (so a warm load touches pages
//! that are already there); the rest are released to the OS with `madvise`, never
//! unmapped. A module that fails halfway (an undefined symbol after allocation) leaves the
//! arena as it was. Running out of the arena's limit, the address space or the map count
//! is an [`ArenaError::Exhausted`] naming which, the size asked for and the limit.
//!
//! Publishing a batch ([`Arena::allocate_batch`] + [`ArenaBackend::publish_all`]) costs one
//! `mprotect` per protection class that changes (code, read-only) and one pass of
//! instruction-cache maintenance over exactly the code bytes written.
//!
//! What each OS gives is in its `sys` file (`sys.rs` for Linux, `sys_windows.rs`,
//! `sys_macos.rs`, `sys_freebsd.rs`); packed mode needs a shared-memory object mapped twice
//! and is [`ArenaError::Unsupported`] where the OS layer has none. Where the OS gives
//! per-thread JIT memory instead (macOS arm64, `MAP_JIT`), code is staged: the linker
//! writes a buffer, and publishing copies it into the code pages on the publishing thread
//! (`code_write.rs`); the code pages are never protected after their chunk is made.

mod backend;
mod chunk;
mod classify;
pub(crate) mod code_write;
mod error;
mod pages;
mod probe;
mod slab;
// The per-OS system layer: `sys.rs` is Linux's; each file opens with what its OS gives
// and lacks.
#[cfg_attr(windows, path = "sys_windows.rs")]
#[cfg_attr(target_os = "macos", path = "sys_macos.rs")]
#[cfg_attr(target_os = "freebsd", path = "sys_freebsd.rs")]
pub(crate) mod sys;
pub(crate) mod sys_api;
#[cfg(unix)]
mod sys_posix;

pub use backend::ArenaBackend;
pub use error::{ArenaError, Resource};

use chunk::{Chunk, Region, REGION_ALIGN};
use elfjit_core::{Layout, MemoryBackend, SegmentKind};
use pages::Run;
use slab::Slot;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use sys_api::{Advice, PerThreadJit, Prot};

/// How an arena publishes modules.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Whole pages per segment, protected in place when published.
    PageGranular,
    /// Small segments share pages; code is written through a second, writable view.
    Packed,
}

/// How an arena is sized.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArenaConfig {
    pub mode: Mode,
    /// Address space per protection class in each chunk, rounded up to 2 MiB; at most
    /// 512 MiB so a chunk's regions stay within ±2 GiB of each other. Default 256 MiB;
    /// a chunk the address space cannot hold (a low `RLIMIT_AS`) is halved, down to what
    /// the module needs.
    pub class_bytes: usize,
    /// The most address space the arena reserves in all chunks. Default 64 GiB.
    pub max_reserved: usize,
    /// Bytes of freed pages kept resident for reuse instead of released. Default 4 MiB.
    pub retain: usize,
}

impl ArenaConfig {
    /// The defaults for `mode`.
    pub const fn new(mode: Mode) -> ArenaConfig {
        ArenaConfig {
            mode,
            class_bytes: 256 << 20,
            max_reserved: 64 << 30,
            retain: 4 << 20,
        }
    }
}

impl Default for ArenaConfig {
    fn default() -> Self {
        ArenaConfig::new(Mode::PageGranular)
    }
}

/// What an arena holds now.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ArenaStats {
    /// Chunks reserved.
    pub chunks: usize,
    /// Address space reserved by all chunks, in bytes.
    pub reserved: u64,
    /// Modules holding memory (published, or being loaded).
    pub modules: u64,
    /// Bytes those modules asked for (the sum of their segment sizes).
    pub requested: u64,
    /// Bytes they hold: whole pages (page-granular, large segments) or slots (packed).
    pub held: u64,
    /// Bytes of freed pages kept resident in the pool.
    pub pooled: u64,
    /// Bytes of free pages already made writable for the next loads (page-granular: the
    /// pages a load opened after its own, its region's opened stretch). Never executable,
    /// resident once written or after [`Arena::prepare`]; counted in neither `held` nor
    /// `pooled`.
    pub opened: u64,
    /// Bytes withheld for good: pages that could not be returned to their resting
    /// protection (an `mprotect` failed; only when the system is out of mappings), and
    /// (packed) the code and read-only slots of modules that were live when the process
    /// forked, freed since: a child may still run them from the memfd it shares.
    pub quarantined: u64,
    /// `mprotect` calls the arena has made so far (making chunks, writing, publishing).
    pub protect_calls: u64,
}

/// Shared code memory; cheap to clone (a handle). Every [`ArenaBackend`] it hands out
/// keeps it alive, so an arena lives as long as its last module.
#[derive(Clone)]
pub struct Arena {
    shared: Arc<Shared>,
}

struct Shared {
    config: ArenaConfig,
    page: usize,
    /// The fork generation the arena was made in (packed arenas only; 0 otherwise).
    fork_generation: u64,
    state: Mutex<State>,
    protect_calls: AtomicU64,
    /// Per-thread JIT memory for code (`sys::JIT`, macOS arm64): code is staged and
    /// copied in at publish (`code_write.rs`) instead of protected in place.
    jit: Option<PerThreadJit>,
}

#[derive(Default)]
struct State {
    chunks: Vec<Chunk>,
    stats: ArenaStats,
}

/// One segment's memory in an allocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Piece {
    Empty,
    Pages(Run),
    Slot(Slot),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Placed {
    piece: Piece,
    /// Where the bytes are written and where they run.
    writer: usize,
    target: usize,
    /// Bytes asked for, and bytes held (whole pages or the slot).
    size: usize,
    held: usize,
}

const EMPTY: Placed = Placed {
    piece: Piece::Empty,
    writer: 0,
    target: 0,
    size: 0,
    held: 0,
};

impl Placed {
    /// The whole pages this segment owns (`None` for a slot or nothing).
    fn pages(&self, page: usize) -> Option<(usize, usize)> {
        match self.piece {
            Piece::Pages(run) => Some((self.writer, run.count as usize * page)),
            _ => None,
        }
    }

    /// Whether its memory may hold what an earlier user left; `shared`: it lies in a memfd
    /// (a packed arena's code or read-only data), released with `MADV_REMOVE`.
    fn stale(&self, shared: bool) -> bool {
        match self.piece {
            Piece::Empty => false,
            Piece::Pages(run) => {
                run.source != pages::Source::Fresh || !sys::free_pages_read_zero(shared)
            }
            Piece::Slot(slot) => slot.stale || !sys::free_pages_read_zero(shared),
        }
    }

    /// The pages to make writable before this segment is written (`None` if it is a slot
    /// or came from the ready pool, which is writable already).
    fn pages_to_open(&self, page: usize) -> Option<(usize, usize)> {
        match self.piece {
            Piece::Pages(run) if run.source.is_writable() => None,
            _ => self.pages(page),
        }
    }
}

/// One module's memory: a segment per class, all in chunk `chunk`.
#[derive(Debug)]
struct Allocation {
    chunk: usize,
    segments: [Placed; 3],
    /// The chunk was made for this allocation (dropped again if a failed load leaves it
    /// unused).
    created_chunk: bool,
    /// Every segment read as zero when it was handed out (nothing an earlier user wrote
    /// was in it): `MemoryBackend::zero_filled`. Set by `prepare`.
    zero_filled: bool,
    /// Per class, free pages right after a fresh run, taken to be made writable with it
    /// (`PageRuns::take_ahead`) and their address; given back as the region's opened
    /// stretch once they are (or as they were, if that failed).
    ahead: [Option<(Run, usize)>; 3],
    /// [`sys::forks_begun`] when it was placed (packed; 0 otherwise): if the process has
    /// forked since, a child shares its code and read-only slots.
    forks: u64,
    /// The code segment's bytes while they are written, with per-thread JIT memory
    /// (`Shared::jit`): copied into its pages at publish. Empty otherwise.
    staging: Vec<u8>,
}

impl Allocation {
    fn segment(&self, kind: SegmentKind) -> &Placed {
        self.segments.get(kind.index()).unwrap_or(&EMPTY)
    }

    /// Bytes its segments asked for.
    fn requested(&self) -> u64 {
        self.segments.iter().map(|s| s.size as u64).sum()
    }
}

/// Bytes `allocations` asked for.
fn requested(allocations: &[Allocation]) -> u64 {
    allocations.iter().map(Allocation::requested).sum()
}

/// A segment request: bytes and alignment.
type Request = (usize, usize);

/// A region counts its pages in a `u32`. A segment's size and alignment are each at most
/// this many pages, so a chunk made for the largest (its size in pages, plus its
/// alignment, rounded up to that) still has fewer than 2^32 pages per class.
const MAX_SEGMENT_PAGES: u64 = 1 << 30;

/// `Err(TooLarge)` if `size` is above `limit`.
fn at_most(what: &'static str, size: u64, limit: u64) -> Result<(), ArenaError> {
    if size > limit {
        return Err(ArenaError::TooLarge { what, size, limit });
    }
    Ok(())
}

fn total(requests: &[Request; 3]) -> u64 {
    requests
        .iter()
        .map(|&(s, _)| s as u64)
        .fold(0, u64::saturating_add)
}

/// Sorts `(start, len)` ranges and merges those that touch or overlap, for one system call
/// per contiguous run.
pub(crate) fn coalesce(ranges: &mut Vec<(usize, usize)>) {
    ranges.retain(|&(_, len)| len != 0);
    ranges.sort_unstable();
    // In place: every load publishes through here, and a second vector was an allocation.
    let mut kept: usize = 0;
    for i in 0..ranges.len() {
        let (start, len) = ranges[i];
        match kept.checked_sub(1).and_then(|last| ranges.get_mut(last)) {
            Some((s, l)) if *s + *l >= start => *l = (*l).max(start + len - *s),
            _ => {
                ranges[kept] = (start, len);
                kept += 1;
            }
        }
    }
    ranges.truncate(kept);
}

impl Arena {
    /// A page-granular arena with the default sizes. Reserves nothing until the first
    /// module is loaded.
    pub fn new() -> Arena {
        Arena::build(ArenaConfig::default())
    }

    /// A packed arena with the default sizes; fails with
    /// [`ArenaError::PackedUnavailable`] where an executable memfd cannot be mapped twice
    /// (no memfd, `vm.memfd_noexec`, a policy refusing executable shared mappings), where
    /// code rewritten through the writable view does not run (qemu-user), or where its
    /// `fork` hooks cannot be registered.
    pub fn packed() -> Result<Arena, ArenaError> {
        Arena::with_config(ArenaConfig::new(Mode::Packed))
    }

    /// An arena sized by `config`. A packed arena checks at once that its memory can be
    /// mapped and that code rewritten through the writable view runs (one small probe
    /// chunk, unmapped again).
    pub fn with_config(config: ArenaConfig) -> Result<Arena, ArenaError> {
        if config.class_bytes == 0 || config.class_bytes > 512 << 20 {
            return Err(ArenaError::BadRequest {
                what: "class_bytes must be between 1 byte and 512 MiB",
                size: config.class_bytes as u64,
            });
        }
        let arena = Arena::build(config);
        if config.mode == Mode::Packed {
            sys::register_fork_hooks().map_err(|errno| ArenaError::PackedUnavailable {
                step: "pthread_atfork (the hooks that tell a forked child)",
                errno,
            })?;
            let size = [REGION_ALIGN; 3];
            let probe = Chunk::new(
                Mode::Packed,
                size,
                REGION_ALIGN,
                arena.shared.page,
                arena.shared.jit,
            )?;
            probe::check_aliased_code(&probe)?;
        }
        Ok(arena)
    }

    fn build(config: ArenaConfig) -> Arena {
        Arena::build_with(config, sys::JIT)
    }

    fn build_with(mut config: ArenaConfig, jit: Option<PerThreadJit>) -> Arena {
        config.class_bytes = config.class_bytes.next_multiple_of(REGION_ALIGN);
        Arena {
            shared: Arc::new(Shared {
                config,
                page: sys::page_size(),
                // Only a packed arena's writable view is lost across `fork`; the hook
                // (`pthread_atfork`, a first registration in most processes) is not
                // needed otherwise.
                fork_generation: match config.mode {
                    Mode::Packed => sys::fork_generation(),
                    Mode::PageGranular => 0,
                },
                state: Mutex::new(State::default()),
                protect_calls: AtomicU64::new(0),
                jit,
            }),
        }
    }

    /// The arena `elfjit` loads into when no other is named: page-granular, made on first
    /// use, alive for the whole process.
    pub fn process() -> &'static Arena {
        static PROCESS: OnceLock<Arena> = OnceLock::new();
        PROCESS.get_or_init(Arena::new)
    }

    /// Takes a first load's one-time costs off it: makes the arena's first chunk (the
    /// reservation and its regions' protections), then writes, publishes and frees a small
    /// module's memory in each class, so that their page tables exist, the arena's own code
    /// has run once and (page-granular) the pages after them are already writable for the
    /// next loads; those pages are faulted in too (they become resident: 16 per class,
    /// counted in [`ArenaStats::opened`]), so the first load takes no page fault.
    /// Call it at start-up, or while the first kernel compiles; it does nothing once the
    /// arena has a chunk. An error is what a first load would have met.
    pub fn prepare(&self) -> Result<(), ArenaError> {
        if !self.shared.lock().chunks.is_empty() {
            return Ok(());
        }
        let request = elfjit_core::SegmentRequest {
            size: 64,
            align: 16,
        };
        let mut backend = self.backend();
        let written = backend.allocate(&Layout::new([request; 3])).and_then(|_| {
            // Fresh pages read as zero already: the writes are for their page faults.
            for kind in SegmentKind::ALL {
                if let Some(bytes) = backend.segment_mut(kind) {
                    bytes.fill(0);
                }
            }
            backend.publish()
        });
        let written = written.map_err(|e| {
            backend.error().copied().unwrap_or(ArenaError::Os {
                op: e.op,
                size: e.size,
                errno: e.code,
            })
        });
        // Published: its pages go to the pool.
        drop(backend);
        written?;
        self.populate_opened();
        Ok(())
    }

    /// Faults in the opened stretches' pages (`MADV_POPULATE_WRITE`, Linux 5.14): the next
    /// loads take their fresh pages from there, so the first of them then takes no page
    /// fault. Best effort: an older kernel refuses the advice, and those loads fault
    /// instead.
    fn populate_opened(&self) {
        let state = self.shared.lock();
        let page = self.shared.page;
        for region in state.chunks.iter().flat_map(|chunk| chunk.regions.iter()) {
            let Some((start, end)) = region.runs.opened() else {
                continue;
            };
            let at = region.writer + start as usize * page;
            let len = end.saturating_sub(start) as usize * page;
            // SAFETY: the opened stretch is free pages of this region, writable and handed
            // to no load while the lock is held; populating them writes no byte and changes
            // no protection.
            let _ = unsafe { sys::advise(at, len, Advice::PopulateWrite) };
        }
    }

    /// How this arena publishes.
    pub fn mode(&self) -> Mode {
        self.shared.config.mode
    }

    /// Its configuration (with `class_bytes` rounded up).
    pub fn config(&self) -> ArenaConfig {
        self.shared.config
    }

    /// The page size segments are rounded to.
    pub fn page_size(&self) -> usize {
        self.shared.page
    }

    /// The most bytes the arena takes for one segment's size, one segment's alignment,
    /// one module (its segments rounded up to whole pages) and one batch (likewise, all
    /// modules): its reservation limit ([`ArenaConfig::max_reserved`]), and at most 2^30
    /// pages (4 TiB with 4 KiB pages). A larger request is refused before anything is
    /// reserved, with [`ArenaError::TooLarge`] naming it and this limit; a smaller one may
    /// still find the limit reached by what the arena holds ([`ArenaError::Exhausted`]).
    pub fn request_limit(&self) -> u64 {
        self.shared.request_limit()
    }

    /// A backend for one module: pass it to [`elfjit_core::Plan::link_in`]. Its `publish`
    /// protects and flushes at once; the memory is the arena's again when it is dropped.
    pub fn backend(&self) -> ArenaBackend {
        ArenaBackend::new(self.clone(), None)
    }

    /// Memory for several modules at once, one backend per layout (in order): page-granular
    /// segments of a class lie in one contiguous run, so that
    /// [`ArenaBackend::publish_all`] protects each class with one `mprotect`. Each backend's
    /// `publish` (called by `link`) only ends writing; `publish_all` makes them runnable.
    /// Each module is still freed on its own.
    pub fn allocate_batch(&self, layouts: &[Layout]) -> Result<Vec<ArenaBackend>, ArenaError> {
        let allocations = self.shared.allocate_batch(layouts)?;
        Ok(allocations
            .into_iter()
            .zip(layouts)
            .map(|(a, layout)| ArenaBackend::new(self.clone(), Some((a, *layout))))
            .collect())
    }

    /// What the arena holds now.
    pub fn stats(&self) -> ArenaStats {
        let state = self.shared.lock();
        // Read from the regions (a few per chunk): the stretch moves with every take.
        let opened_pages: u64 = state
            .chunks
            .iter()
            .flat_map(|chunk| chunk.regions.iter())
            .map(|region| region.runs.opened_pages())
            .sum();
        ArenaStats {
            opened: opened_pages.saturating_mul(self.shared.page as u64),
            protect_calls: self.shared.protect_calls.load(Ordering::Relaxed),
            ..state.stats
        }
    }

    /// The address ranges of its chunks (for counting mappings in `/proc/self/maps`).
    pub fn regions(&self) -> Vec<(usize, usize)> {
        self.shared.lock().chunks.iter().map(Chunk::span).collect()
    }

    fn same(&self, other: &Arena) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }
}

impl Default for Arena {
    fn default() -> Self {
        Arena::new()
    }
}

impl std::fmt::Debug for Arena {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Arena")
            .field("config", &self.shared.config)
            .field("stats", &self.stats())
            .finish()
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave the tables half-updated in a way that
        // hands out memory twice (each step completes before the next), so keep going.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `mprotect` on memory this arena owns, counted.
    ///
    /// # Safety
    /// As [`sys::protect`].
    unsafe fn protect(&self, addr: usize, len: usize, prot: Prot) -> Result<(), i32> {
        self.protect_calls.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller upholds `sys::protect`'s contract.
        unsafe { sys::protect(addr, len, prot) }
    }

    /// See [`Arena::request_limit`].
    fn request_limit(&self) -> u64 {
        let pages = MAX_SEGMENT_PAGES.saturating_mul(self.page as u64);
        (self.config.max_reserved as u64).min(pages)
    }

    /// A layout's segments as requests. Each size and alignment, and the module's pages,
    /// are at most the request limit (itself at most a `usize`, the reservation limit), so
    /// every sum and round-up of them made later fits.
    fn requests(&self, layout: &Layout) -> Result<[Request; 3], ArenaError> {
        let limit = self.request_limit();
        let page = self.page as u64;
        let mut out = [(0, 1); 3];
        let mut pages: u64 = 0;
        for (slot, kind) in out.iter_mut().zip(SegmentKind::ALL) {
            let r = layout.get(kind);
            let align = r.align.max(1);
            if !align.is_power_of_two() {
                return Err(ArenaError::BadRequest {
                    what: "segment alignment is not a power of two",
                    size: r.size,
                });
            }
            at_most("a segment's size", r.size, limit)?;
            at_most("a segment's alignment", align, limit)?;
            let too_large = |what, size| ArenaError::TooLarge { what, size, limit };
            let size =
                usize::try_from(r.size).map_err(|_| too_large("a segment's size", r.size))?;
            let align =
                usize::try_from(align).map_err(|_| too_large("a segment's alignment", align))?;
            pages = pages.saturating_add(r.size.div_ceil(page));
            *slot = (size, align);
        }
        at_most("a module's pages", pages.saturating_mul(page), limit)?;
        Ok(out)
    }

    fn forked(&self) -> bool {
        self.config.mode == Mode::Packed && sys::fork_generation() != self.fork_generation
    }

    /// Memory for one module, ready to write.
    fn allocate(&self, layout: &Layout) -> Result<Allocation, ArenaError> {
        let reqs = self.requests(layout)?;
        if self.forked() {
            return Err(ArenaError::UsedAfterFork);
        }
        if total(&reqs) == 0 {
            // Nothing to hold: no chunk, nothing to give back.
            return Ok(Allocation {
                chunk: usize::MAX,
                segments: [EMPTY; 3],
                created_chunk: false,
                zero_filled: true,
                ahead: [None; 3],
                forks: 0,
                staging: Vec::new(),
            });
        }
        let mut allocation = {
            let mut state = self.lock();
            let mut allocation = self.place(&mut state, &reqs)?;
            if self.config.mode == Mode::PageGranular {
                self.take_ahead(&mut state, &mut allocation);
            }
            allocation
        };
        if let Err(e) = self.prepare(std::slice::from_mut(&mut allocation)) {
            self.give_back(allocation, true);
            return Err(e);
        }
        self.put_opened(&mut allocation);
        Ok(allocation)
    }

    /// Takes, per class that changes protection, the free pages after a fresh run of the
    /// allocation to be made writable in the same `mprotect` (under the lock: they are
    /// this allocation's until `put_opened`, so no other load sees them half done).
    fn take_ahead(&self, state: &mut State, allocation: &mut Allocation) {
        let page = self.page;
        let Some(chunk) = state.chunks.get_mut(allocation.chunk) else {
            return;
        };
        for &kind in self.protected_in_place() {
            let k = kind.index();
            let (Some(seg), Some(region)) = (allocation.segments.get(k), chunk.regions.get_mut(k))
            else {
                continue;
            };
            let Piece::Pages(run) = seg.piece else {
                continue;
            };
            if run.source != pages::Source::Fresh {
                continue;
            }
            let ahead = region
                .runs
                .take_ahead(run.start + run.count, pages::OPEN_AHEAD)
                .map(|a| (a, seg.writer + run.count as usize * page));
            if let Some(slot) = allocation.ahead.get_mut(k) {
                *slot = ahead;
            }
        }
    }

    /// Gives the pages `take_ahead` took, now writable, to their regions as the opened
    /// stretch.
    fn put_opened(&self, allocation: &mut Allocation) {
        if allocation.ahead.iter().all(Option::is_none) {
            return;
        }
        let mut state = self.lock();
        let Some(chunk) = state.chunks.get_mut(allocation.chunk) else {
            return;
        };
        for (k, ahead) in allocation.ahead.iter_mut().enumerate() {
            if let (Some((run, _)), Some(region)) = (ahead.take(), chunk.regions.get_mut(k)) {
                region.runs.put_opened(run);
            }
        }
    }

    /// Places one module (under the lock): the newest chunk with room, or a new chunk.
    fn place(&self, state: &mut State, reqs: &[Request; 3]) -> Result<Allocation, ArenaError> {
        let page = self.page;
        let mode = self.config.mode;
        for index in (0..state.chunks.len()).rev() {
            let Some(chunk) = state.chunks.get_mut(index) else {
                continue;
            };
            if let Some(segments) = place_in(chunk, mode, page, reqs) {
                return Ok(self.account(state, index, segments, false));
            }
        }
        let index = self.add_chunk(state, reqs)?;
        let chunk = state.chunks.get_mut(index).ok_or(ArenaError::BadRequest {
            what: "chunk vanished",
            size: total(reqs),
        })?;
        let segments = place_in(chunk, mode, page, reqs).ok_or(ArenaError::BadRequest {
            what: "a module larger than the chunk made for it",
            size: total(reqs),
        })?;
        Ok(self.account(state, index, segments, true))
    }

    /// Records a placed allocation in the statistics.
    fn account(
        &self,
        state: &mut State,
        chunk: usize,
        segments: [Placed; 3],
        created_chunk: bool,
    ) -> Allocation {
        let stats = &mut state.stats;
        stats.modules += 1;
        stats.requested += segments.iter().map(|s| s.size as u64).sum::<u64>();
        stats.held += segments.iter().map(|s| s.held as u64).sum::<u64>();
        stats.pooled = state
            .chunks
            .iter()
            .map(|c| pooled_bytes(c, self.page))
            .sum();
        if let Some(c) = state.chunks.get_mut(chunk) {
            c.users += 1;
        }
        Allocation {
            chunk,
            segments,
            created_chunk,
            zero_filled: true,
            ahead: [None; 3],
            forks: match self.config.mode {
                Mode::Packed => sys::forks_begun(),
                Mode::PageGranular => 0,
            },
            staging: Vec::new(),
        }
    }

    /// Reserves a chunk big and aligned enough for `reqs`; returns its index.
    fn add_chunk(&self, state: &mut State, reqs: &[Request; 3]) -> Result<usize, ArenaError> {
        let align = reqs.iter().map(|&(_, a)| a).fold(REGION_ALIGN, usize::max);
        let mut need = [0usize; 3];
        for (n, &(size, a)) in need.iter_mut().zip(reqs) {
            *n = size
                .checked_next_multiple_of(self.page)
                .and_then(|s| s.checked_add(a))
                .and_then(|s| s.checked_next_multiple_of(align))
                .ok_or(ArenaError::BadRequest {
                    what: "segment size overflows",
                    size: size as u64,
                })?;
        }
        // The configured size first; where the address space cannot hold it (a low
        // RLIMIT_AS), half of it, and so on down to what this request needs.
        // In range: `align` is at most the request limit (`requests`), a `usize`.
        let mut class = self.config.class_bytes.next_multiple_of(align);
        loop {
            let bytes = need.map(|n| n.max(class));
            match self.add_chunk_of(state, reqs, bytes, align) {
                Err(ArenaError::Exhausted {
                    resource: Resource::AddressSpace,
                    ..
                }) if class > align && need.iter().any(|&n| n < class) => {
                    class = (class / 2).next_multiple_of(align);
                }
                result => return result,
            }
        }
    }

    /// Reserves a chunk of `bytes` per class, aligned to `align`, for `reqs`.
    fn add_chunk_of(
        &self,
        state: &mut State,
        reqs: &[Request; 3],
        bytes: [usize; 3],
        align: usize,
    ) -> Result<usize, ArenaError> {
        // A length that overflows is past any limit.
        let len = chunk::reservation_len(self.config.mode, bytes).map_or(u64::MAX, |l| l as u64);
        let reserved = state.stats.reserved.saturating_add(len);
        if reserved > self.config.max_reserved as u64 {
            return Err(ArenaError::Exhausted {
                resource: Resource::ArenaLimit,
                requested: total(reqs),
                reserving: len,
                limit: self.config.max_reserved as u64,
                errno: 0,
            });
        }
        let chunk = Chunk::new(self.config.mode, bytes, align, self.page, self.jit)
            .map_err(|e| e.for_request(total(reqs)))?;
        let protects = match self.config.mode {
            Mode::PageGranular => 3,
            Mode::Packed => 1,
        };
        self.protect_calls.fetch_add(protects, Ordering::Relaxed);
        state.stats.reserved = reserved;
        state.stats.chunks += 1;
        state.chunks.push(chunk);
        Ok(state.chunks.len() - 1)
    }

    /// Memory for several modules, page-granular classes each in one contiguous run.
    fn allocate_batch(&self, layouts: &[Layout]) -> Result<Vec<Allocation>, ArenaError> {
        let reqs = layouts
            .iter()
            .map(|layout| self.requests(layout))
            .collect::<Result<Vec<_>, _>>()?;
        if self.forked() {
            return Err(ArenaError::UsedAfterFork);
        }
        let mut allocations = Vec::with_capacity(reqs.len());
        let placed = {
            let mut state = self.lock();
            match self.config.mode {
                // Packed modules need no protection change: placed one by one.
                Mode::Packed => reqs.iter().try_for_each(|r| {
                    allocations.push(self.place(&mut state, r)?);
                    Ok(())
                }),
                Mode::PageGranular => self.place_batch(&mut state, &reqs).map(|a| allocations = a),
            }
        };
        if let Err(e) = placed.and_then(|()| self.prepare(&mut allocations)) {
            for a in allocations.into_iter().rev() {
                self.give_back(a, true);
            }
            return Err(e);
        }
        Ok(allocations)
    }

    /// Page-granular batch placement: per class one run of fresh pages, cut in order.
    fn place_batch(
        &self,
        state: &mut State,
        reqs: &[[Request; 3]],
    ) -> Result<Vec<Allocation>, ArenaError> {
        let page = self.page;
        let limit = self.request_limit();
        let too_large = |pages: Option<u64>| ArenaError::TooLarge {
            what: "a batch's pages",
            size: pages.map_or(u64::MAX, |p| p.saturating_mul(page as u64)),
            limit,
        };
        // A class's run, and all of them together, hold at most the request limit's pages
        // (fewer than 2^32: a region's pages are a `u32`).
        let max_pages = u32::try_from(limit / page as u64).unwrap_or(u32::MAX);
        // Per module and class, where its pages start in the class's run and how many it
        // has; per class the run's length and alignment. All in pages, all checked before
        // anything is taken; empty segments take no pages and need no alignment.
        let mut sum: [(u32, u32); 3] = [(0, 1); 3];
        let mut cuts: Vec<[(u32, u32); 3]> = Vec::with_capacity(reqs.len());
        for r in reqs {
            let mut cut = [(0, 0); 3];
            for ((s, c), &(size, align)) in sum.iter_mut().zip(&mut cut).zip(r) {
                if size == 0 {
                    continue;
                }
                let pages = size.div_ceil(page) as u64;
                let (Ok(a), Ok(count)) =
                    (u32::try_from((align / page).max(1)), u32::try_from(pages))
                else {
                    return Err(too_large(Some(pages)));
                };
                let start = s.0.checked_next_multiple_of(a);
                let end = start.and_then(|start| start.checked_add(count));
                let (Some(start), Some(end)) = (start, end.filter(|&end| end <= max_pages)) else {
                    return Err(too_large(end.map(u64::from)));
                };
                *c = (start, count);
                *s = (end, s.1.max(a));
            }
            cuts.push(cut);
        }
        let all: u64 = sum.iter().map(|&(pages, _)| u64::from(pages)).sum();
        if all > u64::from(max_pages) {
            return Err(too_large(Some(all)));
        }
        let sum = sum.map(|(pages, align)| (pages as usize, align as usize));
        // In range: at most `limit`, which is at most a `usize`.
        let as_bytes = sum.map(|(pages, align)| (pages * page, align * page));
        let mut chosen = None;
        for index in (0..state.chunks.len()).rev() {
            if let Some(chunk) = state.chunks.get_mut(index) {
                if let Some(runs) = take_runs(chunk, page, &sum) {
                    chosen = Some((index, runs, false));
                    break;
                }
            }
        }
        let (index, runs, created) = match chosen {
            Some(c) => c,
            None => {
                let index = self.add_chunk(state, &as_bytes)?;
                let chunk = state.chunks.get_mut(index).ok_or(ArenaError::BadRequest {
                    what: "chunk vanished",
                    size: 0,
                })?;
                let runs = take_runs(chunk, page, &sum).ok_or(ArenaError::BadRequest {
                    what: "a batch larger than the chunk made for it",
                    size: as_bytes.iter().map(|&(s, _)| s as u64).sum(),
                })?;
                (index, runs, true)
            }
        };
        let chunk = state.chunks.get(index).ok_or(ArenaError::BadRequest {
            what: "chunk vanished",
            size: 0,
        })?;
        // Cut each class's run in module order; alignment padding goes to the module
        // before it, so every page has an owner. (`run_start + start + count` stays in the
        // region: the run is `sum` pages long.)
        let run_starts = runs.map(|r| r.map_or(0, |r| r.start));
        let mut out: Vec<[Placed; 3]> = Vec::with_capacity(reqs.len());
        let mut cursor = [0u32; 3];
        for (r, cut) in reqs.iter().zip(&cuts) {
            let mut segments = [EMPTY; 3];
            for (k, (&(size, _), seg)) in r.iter().zip(&mut segments).enumerate() {
                let (Some(region), Some(at), Some(&(start, count)), Some(&run_start)) = (
                    chunk.regions.get(k),
                    cursor.get_mut(k),
                    cut.get(k),
                    run_starts.get(k),
                ) else {
                    continue;
                };
                if size == 0 {
                    continue;
                }
                if start > *at {
                    if let Some(prev) = out.iter_mut().rev().find_map(|p| match p.get_mut(k) {
                        Some(p) if p.size != 0 => Some(p),
                        _ => None,
                    }) {
                        if let Piece::Pages(run) = &mut prev.piece {
                            run.count += start - *at;
                            prev.held += (start - *at) as usize * page;
                        }
                    }
                }
                *seg = pages_placed(
                    region,
                    page,
                    Run {
                        start: run_start + start,
                        count,
                        source: pages::Source::Fresh,
                    },
                    size,
                );
                *at = start + count;
            }
            out.push(segments);
        }
        Ok(out
            .into_iter()
            .map(|segments| self.account(state, index, segments, created))
            .collect())
    }

    /// Makes fresh allocations writable and zeroes what an earlier user left past each
    /// segment's size: an allocation that held such bytes is not `zero_filled`, so the
    /// linker writes every byte up to the size itself (`MemoryBackend::zero_filled`), and
    /// zeroing those too would write the image twice.
    fn prepare(&self, allocations: &mut [Allocation]) -> Result<(), ArenaError> {
        let page = self.page;
        if self.config.mode == Mode::PageGranular {
            for &kind in self.protected_in_place() {
                let mut ranges: Vec<(usize, usize)> = allocations
                    .iter()
                    .flat_map(|a| {
                        let ahead = a.ahead.get(kind.index()).copied().flatten();
                        let ahead = ahead.map(|(run, addr)| (addr, run.count as usize * page));
                        a.segment(kind).pages_to_open(page).into_iter().chain(ahead)
                    })
                    .collect();
                // A run and the pages taken ahead of it are one range: one `mprotect`.
                coalesce(&mut ranges);
                for (addr, len) in ranges {
                    // SAFETY: the pages belong to these allocations (a run and the pages
                    // taken ahead of it), which nothing else uses yet; no reference into
                    // them exists.
                    unsafe { self.protect(addr, len, Prot::ReadWrite) }.map_err(|e| {
                        classify::classify("make pages writable", len as u64, e)
                            .for_request(requested(allocations))
                    })?;
                }
            }
        }
        // Data pages rest writable and are handed out as they are; where writable pages
        // are charged before they are written (Windows' commit), they are backed now.
        for a in allocations.iter() {
            let data = a.segment(SegmentKind::Data);
            if data.held != 0 {
                // SAFETY: the segment's pages belong to this allocation alone and lie in
                // the data region, whose pages rest writable.
                unsafe { sys::commit_writable(data.writer, data.held) }.map_err(|e| {
                    classify::classify("commit data pages", data.held as u64, e)
                        .for_request(requested(allocations))
                })?;
            }
        }
        for a in allocations.iter_mut() {
            a.zero_filled = true;
            for (seg, kind) in a.segments.iter().zip(SegmentKind::ALL) {
                if kind == SegmentKind::Code && self.jit.is_some() {
                    // Written to a zeroed buffer; publishing fills every byte of its pages.
                    a.staging = vec![0; seg.size];
                    continue;
                }
                // As `Chunk::new` maps them: a packed arena's code and read-only data are
                // in its memfd.
                let shared = self.config.mode == Mode::Packed && kind != SegmentKind::Data;
                if !seg.stale(shared) {
                    continue;
                }
                a.zero_filled = false;
                let len = seg.pages(page).map_or(seg.held, |(_, len)| len);
                let tail = len.saturating_sub(seg.size);
                // SAFETY: the segment's memory is writable at `writer` (made so above, or a
                // packed writer view or data region) and belongs to this allocation alone;
                // `[writer + size, writer + len)` lies inside it (`size <= len`, else
                // `tail` is 0).
                unsafe {
                    std::ptr::write_bytes((seg.writer + seg.size.min(len)) as *mut u8, 0, tail)
                };
            }
        }
        Ok(())
    }

    /// Publishes `allocations`: page-granular segments get their final protection (one
    /// call per contiguous run of a class), then the code written is made visible to
    /// instruction fetch.
    fn publish(&self, allocations: &[&Allocation]) -> Result<(), ArenaError> {
        let page = self.page;
        if let Some(jit) = &self.jit {
            self.commit_staged(jit, allocations)?;
        }
        if self.config.mode == Mode::PageGranular {
            for &kind in self.protected_in_place() {
                let prot = chunk::final_prot(kind);
                let mut ranges: Vec<(usize, usize)> = allocations
                    .iter()
                    .filter_map(|a| a.segment(kind).pages(page))
                    .collect();
                coalesce(&mut ranges);
                for (addr, len) in ranges {
                    // SAFETY: the pages belong to these allocations; their backends are
                    // sealed, so no writable slice into them exists any more.
                    unsafe { self.protect(addr, len, prot) }.map_err(|e| {
                        classify::classify("protect published pages", len as u64, e)
                            .for_request(allocations.iter().map(|a| a.requested()).sum())
                    })?;
                }
            }
        }
        let mut code: Vec<(usize, usize)> = allocations
            .iter()
            .map(|a| {
                let seg = a.segment(SegmentKind::Code);
                (seg.target, seg.size)
            })
            .collect();
        coalesce(&mut code);
        // Stores through the writer view must be visible before the code runs elsewhere.
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        let published_code = !code.is_empty();
        for (start, len) in code {
            // SAFETY: the range is code these allocations hold, mapped for their lifetime.
            unsafe { crate::icache::flush(start, start + len) };
        }
        if published_code {
            // The range may have held another module's code that other threads ran.
            crate::icache::sync_all_threads();
        }
        Ok(())
    }

    /// The classes whose pages are made writable to be written and protected again when
    /// published: code and read-only data, or read-only data alone where code is staged.
    fn protected_in_place(&self) -> &'static [SegmentKind] {
        match self.jit {
            None => &[SegmentKind::Code, SegmentKind::ReadOnly],
            Some(_) => &[SegmentKind::ReadOnly],
        }
    }

    /// Copies the staged code of `allocations` into their pages, on this thread, inside one
    /// write bracket (`code_write.rs`).
    fn commit_staged(
        &self,
        jit: &PerThreadJit,
        allocations: &[&Allocation],
    ) -> Result<(), ArenaError> {
        let page = self.page;
        let modules: Vec<code_write::Staged<'_>> = allocations
            .iter()
            .filter_map(|a| {
                let (dst, held) = a.segment(SegmentKind::Code).pages(page)?;
                Some(code_write::Staged {
                    dst,
                    held,
                    bytes: &a.staging,
                })
            })
            .collect();
        let mut ranges: Vec<(usize, usize)> = modules.iter().map(|m| (m.dst, m.held)).collect();
        coalesce(&mut ranges);
        // SAFETY: the pages are these allocations' code pages, whose backends are sealed
        // (no slice into them; they were never handed out: the linker wrote the staging
        // buffers, each `size <= held` bytes); this thread runs nothing between opening
        // and closing the bracket but the copies.
        unsafe { code_write::commit(jit, &ranges, &modules) }.map_err(|(len, e)| {
            classify::classify("make code pages writable for this thread", len as u64, e)
                .for_request(allocations.iter().map(|a| a.requested()).sum())
        })
    }

    /// Gives an allocation's memory back. `undo`: it was never published (a failed load):
    /// restore exactly what allocating it changed.
    fn give_back(&self, allocation: Allocation, undo: bool) {
        let page = self.page;
        if self.forked() {
            // The writable view is the parent's; leave the memory alone.
            return;
        }
        // Placed before the process forked: a child maps its code and read-only slots from
        // the same memfd and may still run them, so they are never written (no traps) nor
        // handed out again.
        let inherited = self.config.mode == Mode::Packed && allocation.forks != sys::forks_begun();
        let mut segments = allocation.segments;
        let mut ahead = allocation.ahead;
        if undo && self.config.mode == Mode::PageGranular {
            // Back to the protection the pages had: their region's resting one (so the
            // region is one mapping again), or writable for a ready or opened run. Pages
            // taken ahead were fresh. What cannot be restored is withheld for good.
            let page_runs = SegmentKind::ALL
                .iter()
                .zip(segments.iter_mut().zip(&mut ahead));
            for (kind, (seg, ahead)) in page_runs {
                if !self.protected_in_place().contains(kind) {
                    continue; // always writable, or staged code (its pages never changed)
                }
                let resting = chunk::final_prot(*kind);
                let prot = match seg.piece {
                    Piece::Pages(run) if run.source.is_writable() => Prot::ReadWrite,
                    _ => resting,
                };
                if let Some((addr, len)) = seg.pages(page) {
                    // SAFETY: our own pages; the backend that wrote them is gone.
                    if unsafe { self.protect(addr, len, prot) }.is_err() {
                        self.lock().stats.quarantined += len as u64;
                        *seg = Placed {
                            piece: Piece::Empty,
                            ..*seg
                        };
                    }
                }
                if let Some((run, addr)) = *ahead {
                    let len = run.count as usize * page;
                    // SAFETY: free pages this allocation took out of its region, never
                    // handed to a backend; no reference into them exists.
                    if unsafe { self.protect(addr, len, resting) }.is_err() {
                        self.lock().stats.quarantined += len as u64;
                        *ahead = None;
                    }
                }
            }
        }
        if !undo && self.config.mode == Mode::Packed && !inherited {
            let seg = allocation.segment(SegmentKind::Code);
            if let Piece::Slot(slot) = seg.piece {
                // A call through a dangling pointer traps instead of running stale code.
                // SAFETY: the slot is ours until given back below, writable at `writer`.
                unsafe { std::ptr::write_bytes(seg.writer as *mut u8, TRAP, slot.size as usize) };
            }
        }
        let mut state = self.lock();
        let State { chunks, stats } = &mut *state;
        let Some(chunk) = chunks.get_mut(allocation.chunk) else {
            return;
        };
        for (k, slot) in ahead.iter().enumerate() {
            if let (Some((run, _)), Some(region)) = (slot, chunk.regions.get_mut(k)) {
                // Never written: back to the free extents, nothing to release.
                region.runs.give_back(*run, true, false);
            }
        }
        for (k, seg) in segments.iter().enumerate() {
            let Some(region) = chunk.regions.get_mut(k) else {
                continue;
            };
            if inherited && region.shared {
                stats.quarantined += seg.held as u64;
                continue;
            }
            // Whether the run this frees fits the pool (a slab's run is at most the pool's
            // longest).
            let longest = match seg.piece {
                Piece::Pages(run) => run.count as usize * page,
                _ => pages::POOL_RUN as usize * page,
            };
            let room = stats.pooled + longest as u64 <= self.config.retain as u64;
            let freed = match seg.piece {
                Piece::Empty => None,
                Piece::Pages(run) => Some((run, region.runs.give_back(run, undo, room))),
                Piece::Slot(slot) => region.slabs.give_back(slot, undo, &mut region.runs, room),
            };
            match freed {
                Some((run, pages::Returned::Pooled)) => {
                    stats.pooled += run.count as u64 * page as u64;
                }
                Some((run, pages::Returned::Freed)) => {
                    // SAFETY: the run is this region's and no longer anyone's.
                    unsafe { region.release(run, page) };
                }
                None => {}
            }
        }
        chunk.users = chunk.users.saturating_sub(1);
        stats.modules = stats.modules.saturating_sub(1);
        stats.requested -= segments.iter().map(|s| s.size as u64).sum::<u64>();
        stats.held -= segments.iter().map(|s| s.held as u64).sum::<u64>();
        stats.pooled = chunks.iter().map(|c| pooled_bytes(c, page)).sum();
        if undo
            && allocation.created_chunk
            && allocation.chunk + 1 == chunks.len()
            && chunks.last().is_some_and(Chunk::is_unused)
        {
            if let Some(chunk) = chunks.pop() {
                stats.chunks -= 1;
                stats.reserved -= chunk.span().1 as u64;
            }
        }
        if undo || self.config.mode != Mode::PageGranular {
            return;
        }
        // Enough neighbouring dirty runs: make them writable together, outside the lock
        // (they belong to no one meanwhile).
        let Some(chunk) = chunks.get_mut(allocation.chunk) else {
            return;
        };
        let mut batch: Vec<(usize, Vec<Run>)> = Vec::new();
        for &kind in self.protected_in_place() {
            if let Some(region) = chunk.regions.get_mut(kind.index()) {
                if let Some(runs) = region.runs.take_recyclable() {
                    batch.push((kind.index(), runs));
                }
            }
        }
        if batch.is_empty() {
            return;
        }
        let writers: Vec<usize> = batch
            .iter()
            .map(|(k, _)| chunk.regions.get(*k).map_or(0, |r| r.writer))
            .collect();
        drop(state);
        let mut opened: Vec<(usize, Run, bool)> = Vec::new();
        for ((k, runs), writer) in batch.into_iter().zip(writers) {
            let mut ranges: Vec<(usize, usize)> = runs
                .iter()
                .map(|r| (writer + r.start as usize * page, r.count as usize * page))
                .collect();
            coalesce(&mut ranges);
            let failed: Vec<(usize, usize)> = ranges
                .into_iter()
                .filter(|&(addr, len)| {
                    // SAFETY: pool pages of our region, taken out of the pool above, so no
                    // one else can be handed them until they are put back below.
                    unsafe { self.protect(addr, len, Prot::ReadWrite) }.is_err()
                })
                .collect();
            for run in runs {
                let addr = writer + run.start as usize * page;
                let ok = !failed.iter().any(|&(a, l)| a <= addr && addr < a + l);
                opened.push((k, run, ok));
            }
        }
        // Highest address first onto the stack, so loads take the lowest first: its
        // publish extends the mapping below instead of splitting the stretch.
        opened.sort_unstable_by_key(|&(k, run, _)| (k, std::cmp::Reverse(run.start)));
        let mut state = self.lock();
        let State { chunks, stats } = &mut *state;
        if let Some(chunk) = chunks.get_mut(allocation.chunk) {
            for (k, run, ok) in opened {
                if let Some(region) = chunk.regions.get_mut(k) {
                    if ok {
                        region.runs.put_ready(run);
                    } else {
                        // Still at its final protection: back to the dirty pool.
                        region.runs.give_back(run, true, true);
                    }
                }
            }
            stats.pooled = chunks.iter().map(|c| pooled_bytes(c, page)).sum();
        }
    }
}

/// The byte freed code slots are filled with: an instruction that traps where one byte
/// does (`int3` on x86); elsewhere zero, which aarch64, riscv64, ppc64le and loongarch64
/// all decode as an undefined instruction.
const TRAP: u8 = if cfg!(any(target_arch = "x86_64", target_arch = "x86")) {
    0xcc
} else {
    0
};

fn pooled_bytes(chunk: &Chunk, page: usize) -> u64 {
    chunk
        .regions
        .iter()
        .map(|r| r.runs.pooled_pages() * page as u64)
        .sum()
}

/// A page run placed in `region`, for a segment of `size` bytes.
fn pages_placed(region: &Region, page: usize, run: Run, size: usize) -> Placed {
    let offset = run.start as usize * page;
    Placed {
        piece: Piece::Pages(run),
        writer: region.writer + offset,
        target: region.target + offset,
        size,
        held: run.count as usize * page,
    }
}

/// One segment in `region`: a slab slot (packed, small) or whole pages.
fn take_in(region: &mut Region, mode: Mode, page: usize, (size, align): Request) -> Option<Placed> {
    if size == 0 {
        return Some(EMPTY);
    }
    if mode == Mode::Packed && size <= slab::SLAB_MAX as usize && align <= page {
        if let Some(class) = slab::class_for(size as u64, align as u64) {
            let slot = region.slabs.take(class, &mut region.runs, page as u32)?;
            let offset = slot.offset as usize;
            return Some(Placed {
                piece: Piece::Slot(slot),
                writer: region.writer + offset,
                target: region.target + offset,
                size,
                held: slot.size as usize,
            });
        }
    }
    if !region.target.is_multiple_of(align.max(page)) {
        return None;
    }
    let count = u32::try_from(size.div_ceil(page)).ok()?;
    let align_pages = u32::try_from((align / page).max(1)).ok()?;
    let run = region.runs.take(count, align_pages, true)?;
    Some(pages_placed(region, page, run, size))
}

/// Gives back what `take_in` took, exactly (a placement that did not fit in the chunk).
fn untake(region: &mut Region, placed: Placed) {
    match placed.piece {
        Piece::Empty => {}
        Piece::Pages(run) => {
            region.runs.give_back(run, true, false);
        }
        Piece::Slot(slot) => {
            // Nothing was written: the pages need no release.
            let _ = region.slabs.give_back(slot, true, &mut region.runs, false);
        }
    }
}

/// All three segments in `chunk`, or nothing (and the chunk as it was).
fn place_in(
    chunk: &mut Chunk,
    mode: Mode,
    page: usize,
    reqs: &[Request; 3],
) -> Option<[Placed; 3]> {
    let mut out = [EMPTY; 3];
    for (k, &req) in reqs.iter().enumerate() {
        let placed = chunk
            .regions
            .get_mut(k)
            .and_then(|r| take_in(r, mode, page, req));
        match (placed, out.get_mut(k)) {
            (Some(p), Some(slot)) => *slot = p,
            _ => {
                for (j, p) in out.iter().enumerate().take(k) {
                    if let Some(region) = chunk.regions.get_mut(j) {
                        untake(region, *p);
                    }
                }
                return None;
            }
        }
    }
    Some(out)
}

/// Per class a run of `pages` fresh pages aligned to `align` pages, all in `chunk`, or
/// nothing (and the chunk as it was).
fn take_runs(chunk: &mut Chunk, page: usize, sum: &[Request; 3]) -> Option<[Option<Run>; 3]> {
    let mut out = [None; 3];
    for (k, &(pages, align)) in sum.iter().enumerate() {
        if pages == 0 {
            continue;
        }
        let fits = chunk.regions.get(k).is_some_and(|r| {
            align
                .checked_mul(page)
                .is_some_and(|a| r.target.is_multiple_of(a))
        });
        let run = if fits {
            let count = u32::try_from(pages).ok();
            let align = u32::try_from(align).ok();
            count.zip(align).and_then(|(c, a)| {
                chunk
                    .regions
                    .get_mut(k)
                    .and_then(|r| r.runs.take(c, a, false))
            })
        } else {
            None
        };
        match (run, out.get_mut(k)) {
            (Some(run), Some(slot)) => *slot = Some(run),
            _ => {
                for (j, run) in out.iter().enumerate().take(k) {
                    if let (Some(run), Some(region)) = (run, chunk.regions.get_mut(j)) {
                        region.runs.give_back(*run, true, false);
                    }
                }
                return None;
            }
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use elfjit_core::{MemoryBackend, SegmentRequest};

    /// Touching ranges merge whatever order they come in; gaps stay; empty ones go.
    #[test]
    fn coalescing_merges_touching_and_overlapping_ranges_in_order() {
        let mut ranges = vec![
            (0x3000, 0x1000),
            (0x1000, 0x1000),
            (0x9000, 0),
            (0x2000, 0x1000),
        ];
        ranges.extend([(0x8000, 0x2000), (0x6000, 0x1000)]);
        coalesce(&mut ranges);
        assert_eq!(
            ranges,
            [(0x1000, 0x3000), (0x6000, 0x1000), (0x8000, 0x2000)]
        );
        let mut none: Vec<(usize, usize)> = vec![(0x1000, 0)];
        coalesce(&mut none);
        assert!(none.is_empty());
        // Overlapping ranges merge into their union, a range inside another into it.
        let mut windows = vec![(0x5000, 0x3000), (0x1000, 0x5000), (0x2000, 0x1000)];
        coalesce(&mut windows);
        assert_eq!(windows, [(0x1000, 0x7000)]);
    }

    /// Allocates one page per class in `arena`, fills each with `byte`, publishes it and
    /// returns it, with what its segments read first.
    fn one_module(arena: &Arena, byte: u8) -> (ArenaBackend, Vec<u8>) {
        let request = SegmentRequest {
            size: 4096,
            align: 16,
        };
        let mut b = arena.backend();
        b.allocate(&Layout::new([request; 3])).expect("allocate");
        let mut first = Vec::new();
        for kind in SegmentKind::ALL {
            let bytes = b.segment_mut(kind).expect("segment");
            first.push(bytes.iter().copied().max().unwrap_or(0));
            bytes.fill(byte);
        }
        b.publish().expect("publish");
        (b, first)
    }

    /// With per-thread JIT memory (here its `mprotect` stand-in, `code_write::by_mprotect`)
    /// the linker writes a buffer, not the code pages; publishing copies it in and zeroes
    /// the rest of the pages (a reused page keeps nothing of its last module), the pages
    /// stay read/execute outside the bracket, a failed load never touches them, and a
    /// batch is committed together.
    #[cfg(target_os = "linux")]
    #[test]
    fn staged_code_is_copied_into_its_pages_at_publish() {
        use crate::icache::tests::returns;
        use crate::test_maps::permissions;
        let config = ArenaConfig {
            class_bytes: 2 << 20,
            ..ArenaConfig::default()
        };
        let arena = Arena::build_with(config, Some(code_write::by_mprotect::JIT));
        let page = arena.page_size();
        let layout = |code: usize| {
            let request = |size: usize| SegmentRequest {
                size: size as u64,
                align: 16,
            };
            Layout::new([request(code), request(16), request(16)])
        };
        let write = |b: &mut ArenaBackend, code: &[u8]| {
            let (target, _) = b.segment(SegmentKind::Code).expect("code");
            let staging = b.segment_mut(SegmentKind::Code).expect("staging");
            assert_ne!(staging.as_ptr() as usize, target, "a buffer, not the pages");
            assert!(staging.iter().all(|&x| x == 0), "a zeroed buffer");
            staging[..code.len()].copy_from_slice(code);
            if let Some(ro) = b.segment_mut(SegmentKind::ReadOnly) {
                ro.fill(1);
            }
            assert_eq!(permissions(target), "r-x", "never writable while written");
            target
        };
        let call = |target: usize| {
            // SAFETY: `target` is published code of this host returning a u32.
            let f: extern "C" fn() -> u32 = unsafe { std::mem::transmute(target) };
            f()
        };
        let page_bytes = |target: usize| {
            // SAFETY: the page is mapped read/execute (readable) while its module lives.
            unsafe { std::slice::from_raw_parts(target as *const u8, page) }.to_vec()
        };
        // A module filling its page (its code, then 0xa5 up to the page's end).
        let mut first = arena.backend();
        first.allocate(&layout(page)).expect("allocate");
        let mut long = returns(17);
        long.resize(page, 0xa5);
        let target = write(&mut first, &long);
        first.publish().expect("publish");
        assert_eq!(call(target), 17);
        assert_eq!(page_bytes(target), long);
        drop(first); // pooled: the next one-page module takes the same page
        let mut second = arena.backend();
        let short = returns(42);
        second.allocate(&layout(short.len())).expect("allocate");
        assert_eq!(write(&mut second, &short), target, "the same page, reused");
        second.publish().expect("publish");
        assert_eq!(call(target), 42);
        let bytes = page_bytes(target);
        assert_eq!(&bytes[..short.len()], &short[..]);
        assert!(bytes[short.len()..].iter().all(|&x| x == 0), "no 0xa5 left");
        assert_eq!(permissions(target), "r-x");
        // A failed load writes its buffer only. (Code only: giving fresh read-only pages
        // back releases them, which would make the release probe that
        // `the_release_probe_waits_for_the_first_release` counts.)
        let mut failed = arena.backend();
        let none = SegmentRequest { size: 0, align: 1 };
        let code_only = Layout::new([
            SegmentRequest {
                size: page as u64,
                align: 16,
            },
            none,
            none,
        ]);
        failed.allocate(&code_only).expect("allocate");
        let failed_target = write(&mut failed, &returns(99));
        drop(failed);
        assert!(page_bytes(failed_target).iter().all(|&x| x == 0));
        // A batch: both modules committed by one publish.
        let mut batch = arena
            .allocate_batch(&[layout(short.len()), layout(short.len())])
            .expect("batch");
        let mut targets = Vec::new();
        for (b, value) in batch.iter_mut().zip([5, 6]) {
            b.allocate(&layout(short.len())).expect("allocate");
            targets.push(write(b, &returns(value)));
            b.publish().expect("sealed");
        }
        ArenaBackend::publish_all(&mut batch).expect("publish_all");
        assert_eq!(targets.iter().map(|&t| call(t)).collect::<Vec<_>>(), [5, 6]);
        assert_eq!(call(target), 42, "the earlier module is untouched");
    }

    #[cfg(target_os = "linux")]
    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(24))]

        /// Staged code, over any sequence of loads (single or batched) and unloads: every
        /// live module's code pages read its bytes, then zeros to the end of its pages,
        /// whatever modules used them before; nothing the linker wrote reaches the pages
        /// before `publish`. (Code only: see the failed load above on the release probe.)
        #[test]
        fn staged_code_pages_hold_exactly_their_module(
            steps in proptest::collection::vec(
                (proptest::collection::vec(1usize..9000, 1..3), proptest::num::u8::ANY, 0usize..4),
                1..12,
            )
        ) {
            let config = ArenaConfig {
                class_bytes: 2 << 20,
                ..ArenaConfig::default()
            };
            let arena = Arena::build_with(config, Some(code_write::by_mprotect::JIT));
            let page = arena.page_size();
            let none = SegmentRequest { size: 0, align: 1 };
            let mut live: Vec<(ArenaBackend, Vec<u8>)> = Vec::new();
            for (sizes, byte, drop_at) in steps {
                let layouts: Vec<Layout> = sizes
                    .iter()
                    .map(|&size| Layout::new([SegmentRequest { size: size as u64, align: 16 }, none, none]))
                    .collect();
                let mut batch = if layouts.len() == 1 {
                    vec![arena.backend()]
                } else {
                    arena.allocate_batch(&layouts).expect("batch")
                };
                let mut written = Vec::new();
                for (i, (b, layout)) in batch.iter_mut().zip(&layouts).enumerate() {
                    b.allocate(layout).expect("allocate");
                    let bytes: Vec<u8> = (0..layout.get(SegmentKind::Code).size)
                        .map(|j| byte.wrapping_add((i as u8).wrapping_mul(31)).wrapping_add(j as u8))
                        .collect();
                    b.segment_mut(SegmentKind::Code).expect("code").copy_from_slice(&bytes);
                    written.push(bytes);
                    b.publish().expect("publish or seal");
                }
                ArenaBackend::publish_all(&mut batch).expect("publish_all");
                live.extend(batch.into_iter().zip(written));
                if drop_at < live.len() {
                    live.remove(drop_at);
                }
                for (b, bytes) in &live {
                    let (target, size) = b.segment(SegmentKind::Code).expect("code");
                    let held = size.next_multiple_of(page);
                    // SAFETY: the module's code pages, mapped read/execute while it lives.
                    let pages = unsafe { std::slice::from_raw_parts(target as *const u8, held) };
                    proptest::prop_assert_eq!(&pages[..size], &bytes[..]);
                    proptest::prop_assert!(pages[size..].iter().all(|&x| x == 0));
                }
            }
        }
    }

    /// Until an arena of the process releases written pages, its free pages have never
    /// been written: the first loads make no probe of what released pages read. After a
    /// release they do (once), and a released page still reads as zero when reused.
    /// (The only unit test that uses an arena: the probe count is the process's.)
    #[test]
    fn the_release_probe_waits_for_the_first_release() {
        let probes = || sys::PROBES.load(Ordering::Relaxed);
        let config = ArenaConfig {
            retain: 0,
            class_bytes: 2 << 20,
            ..ArenaConfig::default()
        };
        let arena = Arena::with_config(config).expect("arena");
        let (first, read) = one_module(&arena, 0xa5);
        let (second, _) = one_module(&arena, 0xa5);
        assert_eq!(read, [0, 0, 0]);
        // Only Linux probes (its release is advice that an emulator may ignore).
        let linux = cfg!(target_os = "linux");
        assert_eq!(probes(), 0, "no probe before a release");
        drop(first); // nothing retained: released to the OS
        let (third, read) = one_module(&arena, 0x5a);
        assert_eq!(read, [0, 0, 0], "released pages read as zero when reused");
        assert_eq!(
            probes(),
            usize::from(linux),
            "one probe, of private pages only"
        );
        drop((second, third));
        let (_fourth, read) = one_module(&arena, 0);
        assert_eq!(read, [0, 0, 0]);
        assert_eq!(probes(), usize::from(linux), "the answer is kept");
    }
}
