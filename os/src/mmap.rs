//! [`MmapBackend`]: one anonymous private mapping per image, written while read/write, then
//! protected segment by segment (never writable and executable at once), unmapped on drop.
//!
//! This is the simplest backend, and the model for a `no_std` user's own: each image costs
//! an mmap, up to three mprotects and a munmap, and one to three VMAs while it lives (on
//! Windows: a reservation committed at once, `VirtualProtect`s and a `MEM_RELEASE`; the
//! calls are the arena's OS layer, `arena::sys`).
//!
//! Where the OS gives per-thread JIT memory instead (macOS on arm64, `MAP_JIT`), the image
//! is one such reservation: its code pages are made read/write/execute once and never
//! protected again, the linker writes the code into a heap buffer, and `publish` copies it
//! in inside a write bracket on the publishing thread (`arena/code_write.rs`, which the
//! arena shares); the other segments are protected as above.

use crate::arena::code_write;
use crate::arena::sys;
use crate::arena::sys_api::{PerThreadJit, Prot};
use crate::icache;
use elfjit_core::{BackendError, Layout, MemoryBackend, Placement, Protection, SegmentKind};
use std::ptr::NonNull;

/// Memory for one image in this process. The target addresses are the mapping's own.
pub struct MmapBackend {
    mapping: Option<Mapping>,
    page_size: u64,
    /// Per-thread JIT memory for code (`sys::JIT`): code is written to `staging` and
    /// copied into its pages at publish.
    jit: Option<PerThreadJit>,
    /// The code segment's bytes while they are written, with `jit`. Empty otherwise.
    staging: Vec<u8>,
}

/// The mapping and where each segment lies in it.
#[derive(Clone, Copy)]
struct Mapping {
    start: NonNull<u8>,
    len: usize,
    /// Offset and requested size of each segment, indexed by `SegmentKind::index`.
    segments: [(usize, usize); 3],
    /// Set by `publish`: the pages are no longer writable, so no slice is handed out.
    published: bool,
}

// SAFETY: the backend exclusively owns its mapping (no aliasing handles exist outside the
// `&mut self` methods), so moving it or sharing `&MmapBackend` across threads is sound; the
// only `&self` accessors return plain integers.
unsafe impl Send for MmapBackend {}
// SAFETY: see `Send`: `&self` methods never touch the mapped bytes.
unsafe impl Sync for MmapBackend {}

fn os_error(op: &'static str, size: usize, errno: i32) -> BackendError {
    BackendError::new(op, size as u64, errno)
}

fn prot(protection: Protection) -> Prot {
    match protection {
        Protection::ReadExecute => Prot::ReadExecute,
        Protection::ReadOnly => Prot::Read,
        Protection::ReadWrite => Prot::ReadWrite,
    }
}

impl MmapBackend {
    /// A backend with no mapping yet, using the system page size.
    pub fn new() -> MmapBackend {
        MmapBackend::with_jit(sys::JIT)
    }

    /// A backend whose code is per-thread JIT memory if `jit` is given (the OS's, or the
    /// tests' `mprotect` stand-in).
    pub(crate) fn with_jit(jit: Option<PerThreadJit>) -> MmapBackend {
        MmapBackend {
            mapping: None,
            page_size: sys::page_size() as u64,
            jit,
            staging: Vec::new(),
        }
    }

    /// The page size segments are aligned to.
    pub fn page_size(&self) -> u64 {
        self.page_size
    }

    /// The address and length of the mapping, once allocated.
    pub fn region(&self) -> Option<(usize, usize)> {
        self.mapping.map(|m| (m.start.as_ptr() as usize, m.len))
    }

    /// Whether [`publish`](MemoryBackend::publish) has run: the image is final.
    pub fn is_published(&self) -> bool {
        self.mapping.is_some_and(|m| m.published)
    }

    /// Maps `len` bytes read/write, starting at a multiple of `align` (a power of two, at
    /// least the page size).
    fn map_aligned(&self, len: usize, align: usize) -> Result<NonNull<u8>, BackendError> {
        let start =
            sys::map_private_aligned(len, align).map_err(|(size, e)| os_error("mmap", size, e))?;
        NonNull::new(start as *mut u8).ok_or(BackendError::new("mmap", len as u64, 0))
    }

    /// Reserves `len` bytes of per-thread JIT memory starting at a multiple of `align`,
    /// `segments` (offset, size) of it made ready: code read/write/execute for good (written
    /// at publish), the others read/write. A refusal names the OS's step.
    fn map_jit(
        jit: &PerThreadJit,
        len: usize,
        align: usize,
        segments: &[(usize, usize); 3],
        page: usize,
    ) -> Result<NonNull<u8>, BackendError> {
        let start = sys::reserve_aligned(len, align)
            .map_err(|(size, e)| code_write::refused(jit.reserve_step, size as u64, e))
            .map_err(BackendError::from)?;
        for (kind, &(offset, size)) in SegmentKind::ALL.into_iter().zip(segments) {
            if size == 0 {
                continue;
            }
            let (addr, mapped) = (start + offset, size.next_multiple_of(page));
            // SAFETY: the segment's pages lie in the reservation just made (offsets and
            // sizes from the layout that sized it), which nothing uses.
            let made = unsafe {
                if kind == SegmentKind::Code {
                    (jit.open_region)(addr, mapped).map_err(|e| {
                        BackendError::from(code_write::refused(jit.open_step, mapped as u64, e))
                    })
                } else {
                    sys::protect(addr, mapped, Prot::ReadWrite)
                        .map_err(|e| os_error("mprotect", mapped, e))
                }
            };
            if let Err(e) = made {
                // SAFETY: the reservation just made; nothing refers to it.
                unsafe { sys::unmap(start, len) };
                return Err(e);
            }
        }
        NonNull::new(start as *mut u8).ok_or(BackendError::new("mmap", len as u64, 0))
    }
}

impl Default for MmapBackend {
    fn default() -> Self {
        MmapBackend::new()
    }
}

impl MemoryBackend for MmapBackend {
    fn allocate(&mut self, layout: &Layout) -> Result<Placement, BackendError> {
        if self.mapping.is_some() {
            return Err(BackendError::new("allocate twice", 0, 0));
        }
        let requests = SegmentKind::ALL.map(|kind| layout.get(kind));
        if let Some(odd) = requests.iter().find(|r| !r.align.max(1).is_power_of_two()) {
            return Err(BackendError::new(
                "allocate (an alignment that is not a power of two)",
                odd.align,
                0,
            ));
        }
        let largest = requests.iter().map(|r| r.size).max().unwrap_or(0);
        let (segments, size) = layout.contiguous(self.page_size).ok_or(BackendError::new(
            "allocate (size overflows)",
            largest,
            0,
        ))?;
        let align = requests
            .iter()
            .map(|r| r.align)
            .fold(self.page_size, u64::max);
        // An image with nothing in it still gets one page, so every module has an address.
        let len = usize::try_from(size.max(self.page_size))
            .map_err(|_| BackendError::new("allocate (size)", size, 0))?;
        let align = usize::try_from(align)
            .ok()
            .filter(|a| a.is_power_of_two())
            .ok_or(BackendError::new("allocate (alignment)", size, 0))?;
        // In range: every segment lies inside `size` bytes, and `size` fits a usize.
        let placed = segments.map(|segment| (segment.offset as usize, segment.size as usize));
        let (code_offset, code_len) = placed
            .get(SegmentKind::Code.index())
            .copied()
            .unwrap_or_default();
        let start = crate::code_placement::map_clear_of_blind_addresses(
            || {
                match &self.jit {
                    None => self.map_aligned(len, align),
                    Some(jit) => {
                        MmapBackend::map_jit(jit, len, align, &placed, self.page_size as usize)
                    }
                }
                .map(|start| start.as_ptr() as usize)
            },
            // SAFETY: a mapping just made here and refused; nothing refers to it.
            |refused| unsafe { sys::unmap(refused, len) },
            code_offset,
            code_len,
        )?;
        let start =
            NonNull::new(start as *mut u8).ok_or(BackendError::new("mmap", len as u64, 0))?;
        let mut targets = [0u64; 3];
        for (target, segment) in targets.iter_mut().zip(&segments) {
            if segment.size != 0 {
                *target = start.as_ptr() as u64 + segment.offset;
            }
        }
        if self.jit.is_some() {
            // Written here by the linker; publishing fills every byte of the code pages.
            let code = placed
                .get(SegmentKind::Code.index())
                .map_or(0, |&(_, size)| size);
            self.staging = vec![0; code];
        }
        self.mapping = Some(Mapping {
            start,
            len,
            segments: placed,
            published: false,
        });
        Ok(Placement::new(targets))
    }

    fn segment_mut(&mut self, kind: SegmentKind) -> Option<&mut [u8]> {
        let mapping = self.mapping.filter(|m| !m.published)?;
        let &(offset, size) = mapping.segments.get(kind.index())?;
        if size == 0 {
            return None;
        }
        if kind == SegmentKind::Code && self.jit.is_some() {
            return Some(&mut self.staging);
        }
        // SAFETY: `offset + size` lies inside the mapping (computed by `allocate` from the
        // same layout), the pages are read/write until `publish` (which sets `published`,
        // checked above), and `&mut self` makes this the only slice over them.
        Some(unsafe { std::slice::from_raw_parts_mut(mapping.start.as_ptr().add(offset), size) })
    }

    fn zero_filled(&self) -> bool {
        // Fresh anonymous pages read as zero.
        true
    }

    fn publish(&mut self) -> Result<(), BackendError> {
        let mapping =
            self.mapping
                .as_mut()
                .ok_or(BackendError::new("publish before allocating", 0, 0))?;
        if mapping.published {
            return Err(BackendError::new("publish twice", 0, 0));
        }
        // Sealed first: even if a protect fails below, no writable slice is handed out
        // over pages that may already be executable.
        mapping.published = true;
        let page = self.page_size as usize;
        if let Some(jit) = &self.jit {
            let staged = std::mem::take(&mut self.staging);
            commit_staged(jit, mapping, &staged, page)?;
        }
        for kind in SegmentKind::ALL {
            let Some(&(offset, size)) = mapping.segments.get(kind.index()) else {
                continue;
            };
            if size == 0 {
                continue;
            }
            let mapped = size.next_multiple_of(page);
            // SAFETY: the range lies in our own mapping (offset and size come from
            // `allocate`); no slice into it outlives a `segment_mut` borrow, and
            // `published` is set, so none will be made after this protection change.
            let start = unsafe { mapping.start.as_ptr().add(offset) };
            // Per-thread JIT code pages stay read/write/execute, never reprotected
            // (docs/os-support.md): each thread sees them executable outside a bracket.
            if !(kind == SegmentKind::Code && self.jit.is_some()) {
                // SAFETY: as above: our own page-aligned range.
                unsafe { sys::protect(start as usize, mapped, prot(kind.protection())) }
                    .map_err(|e| os_error("mprotect", mapped, e))?;
            }
            if kind == SegmentKind::Code {
                // SAFETY: `[start, start + size)` is this image's code, written above and
                // now read/execute; nothing else is writing it.
                unsafe { icache::flush(start as usize, start as usize + size) };
                // The address may have held another image's code that other threads ran.
                icache::sync_all_threads();
            }
        }
        Ok(())
    }
}

/// Copies `staged` (the image's code) into its pages, inside a write bracket on this
/// thread, zeroing the rest of them.
fn commit_staged(
    jit: &PerThreadJit,
    mapping: &Mapping,
    staged: &[u8],
    page: usize,
) -> Result<(), BackendError> {
    let Some(&(offset, size)) = mapping.segments.get(SegmentKind::Code.index()) else {
        return Ok(());
    };
    if size == 0 {
        return Ok(());
    }
    let dst = mapping.start.as_ptr() as usize + offset;
    let held = size.next_multiple_of(page);
    let module = [code_write::Staged {
        dst,
        held,
        bytes: staged,
    }];
    // SAFETY: `[dst, dst + held)` is this image's code pages, per-thread JIT memory made by
    // `allocate` (`staged` is `size <= held` bytes); no slice into them was ever handed
    // out (the linker wrote `staged`), and this thread runs nothing inside the bracket but
    // the copy.
    unsafe { code_write::commit(jit, &[(dst, held)], &module) }
        .map_err(|(len, e)| os_error("make code pages writable for this thread", len, e))
}

impl Drop for MmapBackend {
    fn drop(&mut self) {
        if let Some(mapping) = self.mapping.take() {
            // SAFETY: the mapping was created by `allocate` with this length and is unmapped
            // exactly once; any code or data pointers handed out die with the owner.
            unsafe { sys::unmap(mapping.start.as_ptr() as usize, mapping.len) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(target_os = "linux")]
    use crate::test_maps::permissions;
    use elfjit_core::SegmentRequest;

    fn request(size: u64, align: u64) -> SegmentRequest {
        SegmentRequest { size, align }
    }

    /// Code aligned to 512 MiB in mappings kept alive: the OS steps down through the
    /// address space, so one of nine would start at a multiple of 4 GiB, where libgcc's
    /// unwinder cannot see a function (`crate::code_placement`); none does.
    #[cfg(target_pointer_width = "64")]
    #[test]
    fn no_code_starts_where_the_unwinder_is_blind() {
        let mut kept = Vec::new();
        for _ in 0..9 {
            let mut b = MmapBackend::new();
            let layout = Layout::new([request(64, 1 << 29), request(0, 1), request(0, 1)]);
            let placement = b.allocate(&layout).expect("mmap");
            let code = placement.target(SegmentKind::Code) as usize;
            assert_eq!(code % (1 << 29), 0, "{code:#x}");
            assert!(
                !crate::code_placement::holds_unwind_blind_address(code, 64),
                "code at {code:#x}"
            );
            kept.push(b);
        }
    }

    #[test]
    fn allocate_write_publish_and_seal() {
        let mut b = MmapBackend::new();
        let page = b.page_size();
        let layout = Layout::new([request(10, 16), request(page + 1, 8), request(3, 1)]);
        let placement = b.allocate(&layout).expect("mmap");
        let code = placement.target(SegmentKind::Code) as usize;
        let ro = placement.target(SegmentKind::ReadOnly) as usize;
        let data = placement.target(SegmentKind::Data) as usize;
        assert_eq!(code as u64 % page, 0);
        assert_eq!(ro - code, page as usize);
        assert_eq!(data - ro, 2 * page as usize);
        assert_eq!(b.region(), Some((code, 4 * page as usize)));
        assert_eq!(b.segment_mut(SegmentKind::Code).map(|s| s.len()), Some(10));
        b.segment_mut(SegmentKind::Code).expect("code")[0] = 0xc3;
        b.segment_mut(SegmentKind::Data).expect("data")[2] = 7;
        assert!(!b.is_published());
        b.publish().expect("publish");
        assert!(b.is_published());
        assert!(b.segment_mut(SegmentKind::Code).is_none(), "sealed");
        assert!(b.segment_mut(SegmentKind::Data).is_none(), "sealed");
        #[cfg(target_os = "linux")]
        {
            assert_eq!(permissions(code), "r-x");
            let ro_perms = permissions(ro + page as usize);
            // qemu-user reports read-only guest pages as "r-x" on some targets: what
            // matters is that they are readable and not writable.
            assert!(
                ro_perms.starts_with('r') && !ro_perms.contains('w'),
                "{ro_perms}"
            );
            #[cfg(target_arch = "x86_64")]
            assert_eq!(ro_perms, "r--");
            assert_eq!(permissions(data), "rw-");
        }
        // SAFETY: the data segment is mapped read/write and 3 bytes long.
        assert_eq!(unsafe { *(data as *const u8).add(2) }, 7);
        assert!(b.publish().is_err());
        assert!(b.allocate(&layout).is_err());
    }

    /// With per-thread JIT memory (here its `mprotect` stand-in): the code pages are
    /// executable and untouched while the linker writes the staging buffer, hold its bytes
    /// then zeros once published, and the other segments are protected as without it.
    #[cfg(target_os = "linux")]
    #[test]
    fn staged_code_is_copied_in_at_publish() {
        let mut b = MmapBackend::with_jit(Some(crate::arena::code_write::by_mprotect::JIT));
        let page = b.page_size() as usize;
        let layout = Layout::new([request(16, 16), request(3, 8), request(3, 1)]);
        let placement = b.allocate(&layout).expect("mmap");
        let code = placement.target(SegmentKind::Code) as usize;
        let data = placement.target(SegmentKind::Data) as usize;
        assert_eq!(permissions(code), "r-x", "never writable in place");
        assert!(b.zero_filled());
        let staged = b.segment_mut(SegmentKind::Code).expect("code");
        assert_eq!(staged.len(), 16);
        assert!(staged.iter().all(|&x| x == 0));
        assert_ne!(staged.as_ptr() as usize, code, "a buffer, not the pages");
        let returns = crate::icache::tests::returns(42);
        staged[..returns.len()].copy_from_slice(&returns);
        b.segment_mut(SegmentKind::Data).expect("data")[0] = 7;
        let page_bytes = || {
            // SAFETY: the code page is mapped readable (read/execute) while `b` lives.
            unsafe { std::slice::from_raw_parts(code as *const u8, page) }.to_vec()
        };
        assert!(page_bytes().iter().all(|&x| x == 0), "not copied before");
        b.publish().expect("publish");
        assert!(b.segment_mut(SegmentKind::Code).is_none(), "sealed");
        let bytes = page_bytes();
        assert_eq!(&bytes[..returns.len()], &returns[..]);
        assert!(bytes[returns.len()..].iter().all(|&x| x == 0));
        assert_eq!(permissions(code), "r-x");
        // SAFETY: `code` is published code of this host returning a u32.
        let f: extern "C" fn() -> u32 = unsafe { std::mem::transmute(code) };
        assert_eq!(f(), 42);
        let ro = placement.target(SegmentKind::ReadOnly) as usize;
        assert!(!permissions(ro).contains('w'));
        assert_eq!(permissions(data), "rw-");
        // SAFETY: the data segment is mapped read/write.
        assert_eq!(unsafe { *(data as *const u8) }, 7);
    }

    #[test]
    fn alignment_larger_than_a_page_is_honoured() {
        let mut b = MmapBackend::new();
        let align = 16 * b.page_size();
        let layout = Layout::new([request(8, align), request(0, 1), request(0, 1)]);
        let placement = b.allocate(&layout).expect("mmap");
        assert_eq!(placement.target(SegmentKind::Code) % align, 0);
        assert_eq!(placement.target(SegmentKind::ReadOnly), 0, "empty segment");
        assert!(b.segment_mut(SegmentKind::ReadOnly).is_none());
    }

    #[test]
    fn unallocated_backend_refuses_work() {
        let mut b = MmapBackend::new();
        assert!(b.segment_mut(SegmentKind::Code).is_none());
        assert!(b.publish().is_err());
        assert_eq!(b.region(), None);
    }

    /// Sizes and alignments near `u64::MAX`, and alignments that are not powers of two,
    /// are errors naming them, never a mapping or a panic.
    #[test]
    fn sizes_and_alignments_out_of_range_are_errors() {
        let page = MmapBackend::new().page_size();
        let refused = |layout: Layout| {
            let mut b = MmapBackend::new();
            let err = b.allocate(&layout).expect_err("refused");
            assert_eq!(b.region(), None, "{err}");
            assert!(b.segment_mut(SegmentKind::Data).is_none());
            err
        };
        let none = request(0, 1);
        let err = refused(Layout::new([none, none, request(u64::MAX, 1)]));
        assert_eq!(err.size, u64::MAX);
        let err = refused(Layout::new([
            request(1, 1),
            none,
            request(u64::MAX - page, 1),
        ]));
        assert_eq!(err.size, u64::MAX - page);
        let err = refused(Layout::new([request(8, 3 * page), none, none]));
        assert_eq!(err.size, 3 * page, "{err}");
        assert!(err.op.contains("power of two"), "{err}");
        refused(Layout::new([request(8, u64::MAX), none, none]));
        // A 2^63-byte alignment: more address space than there is.
        refused(Layout::new([
            request(8, 1 << 63),
            none,
            request(8, 1 << 63),
        ]));
    }

    #[test]
    fn oversized_request_is_an_error_with_its_size() {
        let mut b = MmapBackend::new();
        let layout = Layout::new([request(1 << 62, 16), request(0, 1), request(0, 1)]);
        let err = b.allocate(&layout).expect_err("refused");
        assert_eq!(err.size, 1 << 62);
        assert_ne!(err.code, 0, "{err}");
    }
}
