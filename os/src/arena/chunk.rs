//! One chunk: a reservation of address space holding a region per protection class, close
//! enough together that any module placed inside one chunk reaches all of its segments
//! (x86_64 PC32 and riscv64/loongarch64 PC-relative pairs: ±2 GiB; aarch64 ADRP: ±4 GiB).
//!
//! Page-granular chunk, one private anonymous reservation:
//!
//! ```text
//! [ code: r-x ][ read-only: r-- ][ data: rw- ]
//! ```
//!
//! Free pages rest at their region's final protection, so a region is one mapping however
//! many modules live in it; a module's pages are read/write only while it is written.
//!
//! Packed chunk, a memfd holding code and read-only data, mapped twice:
//!
//! ```text
//! [ writer: code + read-only, rw- shared ][ code view: r-x ][ read-only view: r-- ][ data: rw- private ]
//! ```
//!
//! Modules are written through the writer view and run from the other two, so nothing is
//! ever protected after the chunk is made. Data is private anonymous memory: it needs no
//! second view, and a forked child gets its own copy as with any private mapping. The
//! writer view is not inherited by children (`MADV_DONTFORK`): in a forked child its range
//! is a hole the child may map something else into, which the chunk never unmaps there.
//! The memfd's size is sealed and its descriptor closed once the views are mapped (the
//! mappings keep it alive), so no other process can reopen it through `/proc/PID/fd` to
//! rewrite or truncate the code.

use super::classify::classify;
use super::code_write;
use super::error::ArenaError;
use super::pages::{PageRuns, Run};
use super::slab::Slabs;
use super::sys;
use super::sys_api::{Advice, PerThreadJit, Prot};
use super::Mode;
use elfjit_core::SegmentKind;

/// Region starts are aligned at least this much (segments aligned more force a chunk of
/// their own alignment).
pub(crate) const REGION_ALIGN: usize = 2 << 20;

/// One protection class's region of a chunk.
#[derive(Debug)]
pub(crate) struct Region {
    /// Where its bytes are written.
    pub writer: usize,
    /// Where they run (equal to `writer` except for a packed chunk's code and read-only
    /// regions).
    pub target: usize,
    pub bytes: usize,
    /// Backed by the memfd (released with `MADV_REMOVE` instead of `MADV_DONTNEED`).
    pub shared: bool,
    /// The protection free pages rest at (page-granular), and published pages end at.
    pub rest: Prot,
    /// Per-thread JIT memory (the code region, where the OS gives it): never protected
    /// again once made, its freed pages discarded instead of released.
    pub jit: Option<PerThreadJit>,
    pub runs: PageRuns,
    pub slabs: Slabs,
}

/// A reservation and its three regions, indexed by `SegmentKind::index`.
#[derive(Debug)]
pub(crate) struct Chunk {
    base: usize,
    len: usize,
    pub regions: [Region; 3],
    /// Allocations (live or being loaded) with pieces here.
    pub users: u64,
    /// Bytes of the writer view at `base` (packed; 0 for page-granular): not inherited by a
    /// forked child.
    writer_len: usize,
    /// The fork generation the chunk was made in: in a later one (a forked child) the
    /// writer view's range is not ours.
    fork_generation: u64,
}

/// The protection a class's published pages end at, and (page-granular) its free pages
/// rest at.
pub(crate) fn final_prot(kind: SegmentKind) -> Prot {
    match kind {
        SegmentKind::Code => Prot::ReadExecute,
        SegmentKind::ReadOnly => Prot::Read,
        SegmentKind::Data => Prot::ReadWrite,
    }
}

/// The bytes a chunk with `bytes[k]` bytes for class `k` reserves (`None` if that
/// overflows): a packed chunk maps its code and read-only regions twice.
pub(crate) fn reservation_len(mode: Mode, [code, ro, data]: [usize; 3]) -> Option<usize> {
    let shared = code.checked_add(ro)?;
    let views = match mode {
        Mode::PageGranular => shared,
        Mode::Packed => shared.checked_mul(2)?,
    };
    views.checked_add(data)
}

/// Reserves `len` bytes aligned to `align` (a power of two, at least a page); with `jit`,
/// the OS's per-thread JIT memory (the whole reservation is: see `sys_macos.rs`), whose
/// refusal is [`ArenaError::JitUnavailable`].
fn reserve_aligned(
    len: usize,
    align: usize,
    jit: Option<&PerThreadJit>,
) -> Result<usize, ArenaError> {
    sys::reserve_aligned(len, align).map_err(|(size, e)| match jit {
        Some(jit) => code_write::refused(jit.reserve_step, size as u64, e),
        None => classify("reserve address space", size as u64, e),
    })
}

/// Best effort: a huge page would commit 2 MiB for one small module's data.
fn no_huge_pages(base: usize, len: usize) {
    // SAFETY: advice on a reservation of our own (the caller's chunk); it changes no
    // contents.
    let _ = unsafe { sys::advise(base, len, Advice::NoHugePages) };
}

impl Chunk {
    /// A chunk with `bytes[k]` bytes for class `k` (multiples of `align`, itself a multiple
    /// of [`REGION_ALIGN`]); with `jit`, its code region is per-thread JIT memory
    /// (page-granular only).
    pub fn new(
        mode: Mode,
        bytes: [usize; 3],
        align: usize,
        page: usize,
        jit: Option<PerThreadJit>,
    ) -> Result<Chunk, ArenaError> {
        if jit.is_some() && mode == Mode::Packed {
            return Err(ArenaError::Unsupported {
                feature: "packed mode with per-thread JIT memory (MAP_JIT)",
                platform: crate::Platform::current(),
            });
        }
        let [code, ro, data] = bytes;
        let too_large = ArenaError::BadRequest {
            what: "chunk size overflows",
            size: u64::MAX,
        };
        let requested = reservation_len(Mode::PageGranular, bytes).ok_or(too_large)? as u64;
        let len = reservation_len(mode, bytes).ok_or(too_large)?;
        // A region counts its pages in a `u32`.
        if bytes.iter().any(|&b| u32::try_from(b / page).is_err()) {
            return Err(ArenaError::BadRequest {
                what: "a chunk region of more than 2^32 pages",
                size: len as u64,
            });
        }
        // The code runs from the region's target: the reservation's start, or a packed
        // chunk's executable view after its writable one.
        let code_offset = match mode {
            Mode::PageGranular => 0,
            Mode::Packed => code + ro,
        };
        let base = crate::code_placement::map_clear_of_blind_addresses(
            || reserve_aligned(len, align, jit.as_ref()),
            // SAFETY: a reservation just made here and refused; nothing refers to it.
            |refused| unsafe { sys::unmap(refused, len) },
            code_offset,
            code,
        )?;
        let mut chunk = Chunk {
            base,
            len,
            regions: [
                Region::new(base, base, code, page),
                Region::new(base + code, base + code, ro, page),
                Region::new(base + code + ro, base + code + ro, data, page),
            ],
            users: 0,
            writer_len: 0,
            fork_generation: 0,
        };
        for kind in SegmentKind::ALL {
            if let Some(region) = chunk.regions.get_mut(kind.index()) {
                region.rest = final_prot(kind);
            }
        }
        // On error, dropping `chunk` unmaps the whole reservation.
        match mode {
            Mode::PageGranular => {
                // Given while the reservation is one mapping: the protections below split
                // it and each part inherits the advice, so the kernel changes one mapping,
                // not three.
                no_huge_pages(base, len);
                let [code, ro, _] = &mut chunk.regions;
                // Dirty runs cost an `mprotect` before they are written, staged code none.
                if jit.is_none() {
                    code.runs.set_dirty_last();
                }
                ro.runs.set_dirty_last();
                code.jit = jit;
                for region in &chunk.regions {
                    // SAFETY: each region lies in the reservation just made; nothing uses it.
                    let made = unsafe {
                        match region.jit {
                            Some(jit) => (jit.open_region)(region.writer, region.bytes)
                                .map_err(|e| code_write::refused(jit.open_step, requested, e)),
                            None => if region.rest == Prot::ReadWrite {
                                sys::rest_writable(region.writer, region.bytes)
                            } else {
                                sys::protect(region.writer, region.bytes, region.rest)
                            }
                            .map_err(|e| classify("protect a new chunk", requested, e)),
                        }
                    };
                    made?;
                }
            }
            Mode::Packed => {
                sys::check_packed()?;
                let shared = code + ro;
                let fd = sys::memfd(shared)
                    .map_err(|(step, errno)| ArenaError::PackedUnavailable { step, errno })?;
                let unavailable = |step| move |errno| ArenaError::PackedUnavailable { step, errno };
                let exec = base + shared;
                // SAFETY: the three views and the data region lie in the reservation just
                // made (`2 * shared + data` bytes from `base`), which nothing uses.
                unsafe {
                    sys::map_file_at(base, shared, Prot::ReadWrite, &fd, 0)
                        .map_err(unavailable("mmap of the writable view"))?;
                    sys::advise(base, shared, Advice::DontFork)
                        .map_err(unavailable("madvise(MADV_DONTFORK) of the writable view"))?;
                    sys::map_file_at(exec, code, Prot::ReadExecute, &fd, 0)
                        .map_err(unavailable("mmap of the executable view"))?;
                    sys::map_file_at(exec + code, ro, Prot::Read, &fd, code)
                        .map_err(unavailable("mmap of the read-only view"))?;
                    sys::protect(exec + shared, data, Prot::ReadWrite)
                        .map_err(|e| classify("protect a new chunk", requested, e))?;
                }
                chunk.writer_len = shared;
                chunk.fork_generation = sys::fork_generation();
                // The mappings keep the memfd alive; an open descriptor would let any
                // process of the same user reopen it writable through /proc/PID/fd.
                drop(fd);
                let [c, r, d] = &mut chunk.regions;
                c.target = exec;
                c.shared = true;
                r.writer = base + code;
                r.target = exec + code;
                r.shared = true;
                d.writer = exec + shared;
                d.target = exec + shared;
                // After the views are mapped: a new mapping does not inherit advice.
                no_huge_pages(base, len);
            }
        }
        Ok(chunk)
    }

    /// The reservation's address and length.
    pub fn span(&self) -> (usize, usize) {
        (self.base, self.len)
    }

    /// Whether no page of the chunk is in use.
    pub fn is_unused(&self) -> bool {
        self.users == 0 && self.regions.iter().all(|r| r.runs.is_empty())
    }
}

impl Region {
    fn new(writer: usize, target: usize, bytes: usize, page: usize) -> Region {
        Region {
            writer,
            target,
            bytes,
            shared: false,
            rest: Prot::ReadWrite,
            jit: None,
            // Fits: checked by `Chunk::new`.
            runs: PageRuns::new(u32::try_from(bytes / page).unwrap_or(0)),
            slabs: Slabs::new(),
        }
    }

    /// Returns `run`'s pages to the OS: they read as zero afterwards.
    ///
    /// # Safety
    /// The run lies in this region and nothing uses its pages.
    pub unsafe fn release(&self, run: Run, page: usize) {
        let addr = self.writer + run.start as usize * page;
        let len = run.count as usize * page;
        if let Some(jit) = self.jit {
            // Best effort: staged code fills every byte of the pages it takes.
            // SAFETY: the caller guarantees the run is ours and unused.
            let _ = unsafe { (jit.discard)(addr, len) };
            return;
        }
        // SAFETY: the caller guarantees the run is ours and unused. Released pages are
        // handed out as reading zero, so if the advice fails where the pages can be
        // written (writer view, data), zero them instead; it cannot fail on a range we
        // mapped short of a kernel bug.
        if unsafe { sys::release(addr, len, self.shared, self.rest) }.is_err()
            && (self.shared || self.rest == Prot::ReadWrite)
        {
            // SAFETY: as above; the pages are writable at `writer`.
            unsafe { std::ptr::write_bytes(addr as *mut u8, 0, len) };
        }
    }
}

impl Drop for Chunk {
    fn drop(&mut self) {
        // In a forked child the writer view was not inherited: its range may hold the
        // child's own memory now (an allocator's mapping), so only the rest is ours.
        let skip = if self.writer_len != 0 && sys::fork_generation() != self.fork_generation {
            self.writer_len
        } else {
            0
        };
        // SAFETY: the reservation (without the writer view's range in a forked child) is
        // ours; the arena drops a chunk only when no module uses it (the arena itself is
        // gone, or the chunk was made for a load that failed).
        unsafe { sys::unmap(self.base + skip, self.len - skip) };
    }
}
