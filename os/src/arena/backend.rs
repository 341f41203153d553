//! [`ArenaBackend`]: one module's memory from an [`Arena`], as the core's
//! [`MemoryBackend`].

use super::{Allocation, Arena, ArenaError, Placed, EMPTY};
use elfjit_core::{BackendError, Layout, MemoryBackend, Placement, SegmentKind};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    /// Nothing allocated yet.
    Unallocated,
    /// Allocated by a batch for a given layout; `allocate` hands it out.
    Reserved,
    /// Being written.
    Writing,
    /// Written; waiting for [`ArenaBackend::publish_all`] (or a failed publish).
    Sealed,
    /// Runnable.
    Published,
}

/// One module's memory from an [`Arena`]: allocate, write, publish (as
/// [`elfjit_core::Plan::link_in`] does), then the module runs until this value is dropped,
/// which gives the memory back to the arena. Dropped before it is published (a load that
/// failed), it leaves the arena as it was before the allocation.
pub struct ArenaBackend {
    arena: Arena,
    allocation: Option<Allocation>,
    reserved: Option<Layout>,
    stage: Stage,
    error: Option<ArenaError>,
}

impl ArenaBackend {
    pub(super) fn new(arena: Arena, reserved: Option<(Allocation, Layout)>) -> ArenaBackend {
        let (allocation, layout, stage) = match reserved {
            Some((a, l)) => (Some(a), Some(l), Stage::Reserved),
            None => (None, None, Stage::Unallocated),
        };
        ArenaBackend {
            arena,
            allocation,
            reserved: layout,
            stage,
            error: None,
        }
    }

    /// The arena this memory comes from.
    pub fn arena(&self) -> &Arena {
        &self.arena
    }

    /// The full error behind the last failed `allocate` or `publish` (the core's
    /// [`BackendError`] keeps only the operation, size and errno): what ran out, the size
    /// asked for and the limit.
    pub fn error(&self) -> Option<&ArenaError> {
        self.error.as_ref()
    }

    /// Whether the module is published (runnable; no longer writable).
    pub fn is_published(&self) -> bool {
        self.stage == Stage::Published
    }

    /// Where segment `kind` runs and how many bytes it has (`None` if empty or not
    /// allocated).
    pub fn segment(&self, kind: SegmentKind) -> Option<(usize, usize)> {
        let seg = self.placed(kind);
        (seg.size != 0).then_some((seg.target, seg.size))
    }

    fn placed(&self, kind: SegmentKind) -> &Placed {
        self.allocation.as_ref().map_or(&EMPTY, |a| a.segment(kind))
    }

    fn placement(&self) -> Placement {
        Placement::new(SegmentKind::ALL.map(|k| {
            let seg = self.placed(k);
            if seg.size == 0 {
                0
            } else {
                seg.target as u64
            }
        }))
    }

    /// Marks it runnable; staged code (per-thread JIT memory) is in its pages now, so its
    /// buffer is freed.
    fn published(&mut self) {
        self.stage = Stage::Published;
        if let Some(a) = self.allocation.as_mut() {
            a.staging = Vec::new();
        }
    }

    fn fail(&mut self, e: ArenaError) -> BackendError {
        self.error = Some(e);
        e.into()
    }

    /// Publishes several backends together: each class's pages are protected with one
    /// `mprotect` per contiguous run (one, for a batch from [`Arena::allocate_batch`]), and
    /// the code written is flushed in one pass. Backends still being written are sealed
    /// first; published ones are left alone.
    pub fn publish_all(backends: &mut [ArenaBackend]) -> Result<(), ArenaError> {
        let mut pending: Vec<usize> = Vec::new();
        for (i, b) in backends.iter_mut().enumerate() {
            match b.stage {
                Stage::Writing | Stage::Sealed | Stage::Reserved if b.allocation.is_some() => {
                    b.stage = Stage::Sealed;
                    pending.push(i);
                }
                _ => {}
            }
        }
        // One publish per arena among them (usually one).
        while let Some(&first) = pending.first() {
            let Some(arena) = backends.get(first).map(|b| b.arena.clone()) else {
                break;
            };
            let (same, rest): (Vec<usize>, Vec<usize>) = pending
                .iter()
                .partition(|&&i| backends.get(i).is_some_and(|b| b.arena.same(&arena)));
            let allocations: Vec<&Allocation> = same
                .iter()
                .filter_map(|&i| backends.get(i).and_then(|b| b.allocation.as_ref()))
                .collect();
            if let Err(e) = arena.shared.publish(&allocations) {
                for &i in &same {
                    if let Some(b) = backends.get_mut(i) {
                        b.error = Some(e);
                    }
                }
                return Err(e);
            }
            for &i in &same {
                if let Some(b) = backends.get_mut(i) {
                    b.published();
                }
            }
            pending = rest;
        }
        Ok(())
    }
}

impl MemoryBackend for ArenaBackend {
    fn allocate(&mut self, layout: &Layout) -> Result<Placement, BackendError> {
        match self.stage {
            Stage::Unallocated => match self.arena.shared.allocate(layout) {
                Ok(a) => {
                    self.allocation = Some(a);
                    self.stage = Stage::Writing;
                    Ok(self.placement())
                }
                Err(e) => Err(self.fail(e)),
            },
            Stage::Reserved if self.reserved.as_ref() == Some(layout) => {
                self.stage = Stage::Writing;
                Ok(self.placement())
            }
            Stage::Reserved => Err(self.fail(ArenaError::BadRequest {
                what: "allocate a layout other than the one the batch reserved",
                size: 0,
            })),
            _ => Err(self.fail(ArenaError::BadRequest {
                what: "allocate twice",
                size: 0,
            })),
        }
    }

    fn segment_mut(&mut self, kind: SegmentKind) -> Option<&mut [u8]> {
        // In a forked child a packed arena's writable view is a hole the child may have
        // reused for other memory.
        if self.stage != Stage::Writing || self.arena.shared.forked() {
            return None;
        }
        let seg = *self.placed(kind);
        if seg.size == 0 {
            return None;
        }
        if kind == SegmentKind::Code && self.arena.shared.jit.is_some() {
            // Staged: copied into the pages at publish (`code_write.rs`).
            return self.allocation.as_mut().map(|a| a.staging.as_mut_slice());
        }
        // SAFETY: `[writer, writer + size)` is this allocation's memory (the arena hands
        // it to no one else until it is given back on drop), writable until the backend is
        // sealed (checked above: the stage is `Writing`) and mapped in this process
        // (checked above: not a packed arena's writer view in a forked child); `&mut self`
        // makes this the only slice over it.
        Some(unsafe { std::slice::from_raw_parts_mut(seg.writer as *mut u8, seg.size) })
    }

    fn zero_filled(&self) -> bool {
        // Fresh pages read as zero. Pages an earlier module wrote are zeroed only past
        // each segment's size: the linker writes the rest.
        self.allocation.as_ref().is_none_or(|a| a.zero_filled)
    }

    fn publish(&mut self) -> Result<(), BackendError> {
        if self.stage != Stage::Writing {
            return Err(self.fail(ArenaError::BadRequest {
                what: "publish before allocating, or twice",
                size: 0,
            }));
        }
        // Sealed first: even if a protect fails, no writable slice is handed out again.
        self.stage = Stage::Sealed;
        if self.reserved.is_some() {
            // A batch member: `publish_all` protects the batch at once.
            return Ok(());
        }
        let Some(allocation) = self.allocation.as_ref() else {
            return Ok(());
        };
        match self.arena.shared.publish(&[allocation]) {
            Ok(()) => {
                self.published();
                Ok(())
            }
            Err(e) => Err(self.fail(e)),
        }
    }
}

impl Drop for ArenaBackend {
    fn drop(&mut self) {
        if let Some(allocation) = self.allocation.take() {
            let undo = self.stage != Stage::Published;
            self.arena.shared.give_back(allocation, undo);
        }
    }
}

impl std::fmt::Debug for ArenaBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArenaBackend")
            .field("stage", &self.stage)
            .field("code", &self.segment(SegmentKind::Code))
            .field("read_only", &self.segment(SegmentKind::ReadOnly))
            .field("data", &self.segment(SegmentKind::Data))
            .finish()
    }
}
