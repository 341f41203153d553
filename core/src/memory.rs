//! Where the image goes: the [`MemoryBackend`] trait, and [`SliceBackend`] over a caller's
//! buffer (for sandboxes, unikernels, tests and cross-target links that only produce bytes).
//!
//! An image has three segments (code, read-only data, data). A backend places each one
//! wherever it likes — one contiguous mapping, or three ranges of a shared arena — as long
//! as each is aligned as [`Layout`] asks. Relocations are computed against the addresses
//! the backend reports, and every range-limited one is checked there, so a backend that
//! puts the segments too far apart gets a relocation error, never wrong code.

use crate::bits::align_up;
use crate::error::BackendError;

/// The permissions of one segment once linking is done. No segment is ever both writable
/// and executable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protection {
    /// Code and stubs.
    ReadExecute,
    /// Read-only data and the GOT.
    ReadOnly,
    /// Writable data, `.bss` and COMMON symbols.
    ReadWrite,
}

/// The three segments of an image, in the order a contiguous layout places them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SegmentKind {
    /// Code and stubs: read/execute.
    Code,
    /// Read-only data and the GOT: read.
    ReadOnly,
    /// Writable data, `.bss` and COMMON symbols: read/write.
    Data,
}

impl SegmentKind {
    /// All segments, in address order of a contiguous layout.
    pub const ALL: [SegmentKind; 3] = [SegmentKind::Code, SegmentKind::ReadOnly, SegmentKind::Data];

    /// The protection the segment ends up with.
    pub const fn protection(self) -> Protection {
        match self {
            SegmentKind::Code => Protection::ReadExecute,
            SegmentKind::ReadOnly => Protection::ReadOnly,
            SegmentKind::Data => Protection::ReadWrite,
        }
    }

    /// The segment's position in [`SegmentKind::ALL`] (0, 1, 2), for per-segment arrays.
    pub const fn index(self) -> usize {
        match self {
            SegmentKind::Code => 0,
            SegmentKind::ReadOnly => 1,
            SegmentKind::Data => 2,
        }
    }
}

/// What one segment needs: `size` bytes starting at a multiple of `align`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct SegmentRequest {
    /// Bytes in use (0 for an empty segment, which needs no memory).
    pub size: u64,
    /// Required alignment of the segment's first byte (a power of two, at least 1).
    pub align: u64,
}

/// The memory an image needs, segment by segment: what a plan asks a backend for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Layout {
    segments: [SegmentRequest; 3],
}

/// One segment's place in a contiguous, page-aligned layout of the image (see
/// [`Layout::contiguous`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Segment {
    /// Offset from the image start (page-aligned).
    pub offset: u64,
    /// Bytes in use.
    pub size: u64,
    /// Bytes mapped (`size` rounded up to whole pages; 0 for an empty segment).
    pub mapped: u64,
}

impl Layout {
    /// A layout from each segment's request, indexed as [`SegmentKind::ALL`].
    pub const fn new(segments: [SegmentRequest; 3]) -> Layout {
        Layout { segments }
    }

    /// What segment `kind` needs.
    pub fn get(&self, kind: SegmentKind) -> SegmentRequest {
        self.segments.get(kind.index()).copied().unwrap_or_default()
    }

    /// The segments one after another on whole pages of `page_size` (a power of two), as
    /// one mapping holds them: each starts on a page boundary (and on its own alignment,
    /// when that is larger), empty ones take no room. Returns the segments and the total
    /// size; `None` if a size overflows, or `page_size` or an alignment (other than 0,
    /// taken as 1) is not a power of two.
    pub fn contiguous(&self, page_size: u64) -> Option<([Segment; 3], u64)> {
        if !page_size.is_power_of_two() {
            return None;
        }
        let mut out = [Segment::default(); 3];
        let mut next = 0u64;
        for (slot, request) in out.iter_mut().zip(self.segments) {
            // Rounding up to a multiple of anything else would not align.
            if !request.align.max(1).is_power_of_two() {
                return None;
            }
            let offset = align_up(next, request.align.max(page_size))?;
            let mapped = align_up(request.size, page_size)?;
            *slot = Segment {
                offset,
                size: request.size,
                mapped,
            };
            next = offset.checked_add(mapped)?;
        }
        Some((out, next))
    }
}

/// The target address of each segment's first byte, as a backend placed them (0 for an
/// empty segment). Indexed by [`SegmentKind`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Placement {
    targets: [u64; 3],
}

impl Placement {
    /// A placement from each segment's target address, indexed as [`SegmentKind::ALL`].
    pub const fn new(targets: [u64; 3]) -> Placement {
        Placement { targets }
    }

    /// The target address of segment `kind`'s first byte.
    pub fn target(&self, kind: SegmentKind) -> u64 {
        self.targets.get(kind.index()).copied().unwrap_or(0)
    }
}

/// Memory for one image. The linker asks for all segments at once with
/// [`allocate`](MemoryBackend::allocate), writes them through
/// [`segment_mut`](MemoryBackend::segment_mut), then calls
/// [`publish`](MemoryBackend::publish) once, which gives each segment its final protection
/// and makes the code visible to instruction fetch. The bytes written and the address they
/// execute at may differ (cross-target and out-of-process installs, double-mapped code):
/// relocations use the target addresses.
///
/// A backend must never hand out writable bytes of a segment after it is published: safe
/// code holding the backend could otherwise write to executable or read-only pages.
pub trait MemoryBackend {
    /// Provides writable memory for every non-empty segment of `layout`, each starting at a
    /// target address that is a multiple of its `align`, and returns those addresses.
    /// Called once per image. An empty segment's address may be reported as 0: the linker
    /// then places it (and the symbols of its empty sections) at the first non-empty
    /// segment's start.
    fn allocate(&mut self, layout: &Layout) -> Result<Placement, BackendError>;

    /// The writable bytes of segment `kind` (at least its requested size), or `None` when
    /// there are none: before `allocate`, after `publish`, or for an empty segment.
    fn segment_mut(&mut self, kind: SegmentKind) -> Option<&mut [u8]>;

    /// Whether the memory `allocate` hands out is known to read as zero. When it is, the
    /// linker does not zero-fill `.bss` and COMMON symbols itself (which would touch, and so
    /// commit, every page of them). When it is not, the linker writes every byte of each
    /// segment's requested size (sections, the gaps between them, `.bss`, COMMON symbols,
    /// GOT and stubs), so the backend needs to clear only what lies past that size, if it
    /// cares what the rest of its pages hold.
    fn zero_filled(&self) -> bool {
        false
    }

    /// Makes the image final: each non-empty segment gets [`SegmentKind::protection`], and
    /// instructions written to the code segment (its requested size, not whole pages)
    /// become visible to instruction fetch at the target address. Afterwards
    /// [`segment_mut`](MemoryBackend::segment_mut) returns `None`.
    fn publish(&mut self) -> Result<(), BackendError>;
}

/// A backend over a buffer the caller owns: the image is laid out contiguously
/// ([`Layout::contiguous`]) in `buffer`, as if it ran at `target_base`. Protection and
/// instruction-cache maintenance are left to the caller: `publish` only ends writing.
pub struct SliceBackend<'b> {
    buffer: &'b mut [u8],
    target_base: u64,
    page_size: u64,
    segments: [Segment; 3],
    size: u64,
    published: bool,
}

impl<'b> SliceBackend<'b> {
    /// `target_base` must be aligned to `page_size`, a power of two (checked by `allocate`).
    pub fn new(buffer: &'b mut [u8], target_base: u64, page_size: u64) -> SliceBackend<'b> {
        SliceBackend {
            buffer,
            target_base,
            page_size,
            segments: [Segment::default(); 3],
            size: 0,
            published: false,
        }
    }

    /// The image bytes written so far (the first bytes of the buffer, as many as the
    /// contiguous layout spans).
    pub fn image(&self) -> &[u8] {
        let n = usize::try_from(self.size).unwrap_or(usize::MAX);
        self.buffer.get(..n).unwrap_or(self.buffer)
    }

    /// Where segment `kind` lies in [`image`](SliceBackend::image), once allocated.
    pub fn segment(&self, kind: SegmentKind) -> Segment {
        self.segments.get(kind.index()).copied().unwrap_or_default()
    }
}

impl MemoryBackend for SliceBackend<'_> {
    fn allocate(&mut self, layout: &Layout) -> Result<Placement, BackendError> {
        if !self.target_base.is_multiple_of(self.page_size.max(1)) {
            return Err(BackendError::new(
                "allocate (target base not page-aligned)",
                0,
                0,
            ));
        }
        let (segments, size) = layout.contiguous(self.page_size).ok_or(BackendError::new(
            "lay out the image (page size or size)",
            0,
            0,
        ))?;
        if size > self.buffer.len() as u64 {
            return Err(BackendError::new("allocate (buffer too small)", size, 0));
        }
        let mut targets = [0u64; 3];
        for ((target, segment), kind) in targets.iter_mut().zip(&segments).zip(SegmentKind::ALL) {
            let address = self
                .target_base
                .checked_add(segment.offset)
                .ok_or(BackendError::new("allocate (address overflows)", size, 0))?;
            if !address.is_multiple_of(layout.get(kind).align.max(1)) {
                return Err(BackendError::new(
                    "allocate (target base not aligned)",
                    size,
                    0,
                ));
            }
            // An empty segment has an address here too (where it would start), so that
            // even an image with no bytes has one.
            *target = address;
        }
        self.segments = segments;
        self.size = size;
        self.published = false;
        Ok(Placement::new(targets))
    }

    fn segment_mut(&mut self, kind: SegmentKind) -> Option<&mut [u8]> {
        if self.published {
            return None;
        }
        let segment = self.segments.get(kind.index())?;
        if segment.size == 0 {
            return None;
        }
        let start = usize::try_from(segment.offset).ok()?;
        let end = usize::try_from(segment.offset.checked_add(segment.size)?).ok()?;
        self.buffer.get_mut(start..end)
    }

    fn publish(&mut self) -> Result<(), BackendError> {
        self.published = true;
        Ok(())
    }
}

/// Resolves undefined symbols (by their raw ELF name) to target addresses.
pub trait SymbolResolver {
    /// The address of `name`, or `None` if this resolver does not provide it.
    fn resolve(&mut self, name: &[u8]) -> Option<u64>;
}

impl<F: FnMut(&[u8]) -> Option<u64> + ?Sized> SymbolResolver for F {
    fn resolve(&mut self, name: &[u8]) -> Option<u64> {
        self(name)
    }
}

/// A resolver that provides nothing: every external reference is an error.
pub struct NoSymbols;

impl SymbolResolver for NoSymbols {
    fn resolve(&mut self, _: &[u8]) -> Option<u64> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout() -> Layout {
        Layout::new([
            SegmentRequest {
                size: 0x1234,
                align: 16,
            },
            SegmentRequest { size: 0, align: 1 },
            SegmentRequest {
                size: 8,
                align: 0x4000,
            },
        ])
    }

    #[test]
    fn contiguous_layout_is_page_aligned_and_skips_empty_segments() {
        let (segments, size) = layout().contiguous(0x1000).unwrap_or_default();
        assert_eq!(
            segments,
            [
                Segment {
                    offset: 0,
                    size: 0x1234,
                    mapped: 0x2000
                },
                Segment {
                    offset: 0x2000,
                    size: 0,
                    mapped: 0
                },
                Segment {
                    offset: 0x4000,
                    size: 8,
                    mapped: 0x1000
                },
            ]
        );
        assert_eq!(size, 0x5000);
        assert_eq!(layout().contiguous(3), None);
        let huge = Layout::new(
            [SegmentRequest {
                size: u64::MAX,
                align: 1,
            }; 3],
        );
        assert_eq!(huge.contiguous(0x1000), None);
        // Not a power of two: rounding with a mask would leave 0x1000, no multiple of 0x3000.
        let odd = Layout::new([
            SegmentRequest {
                size: 0x1000,
                align: 1,
            },
            SegmentRequest {
                size: 8,
                align: 0x3000,
            },
            SegmentRequest::default(),
        ]);
        assert_eq!(odd.contiguous(0x1000), None);
    }

    #[test]
    fn slice_backend_places_checks_and_seals() {
        let mut buffer = [0u8; 0x5000];
        let mut backend = SliceBackend::new(&mut buffer, 0x10_0000, 0x1000);
        assert!(backend.segment_mut(SegmentKind::Code).is_none());
        let placement = backend.allocate(&layout()).unwrap_or_default();
        assert_eq!(placement.target(SegmentKind::Code), 0x10_0000);
        // The empty segment still has the address where it would start.
        assert_eq!(placement.target(SegmentKind::ReadOnly), 0x10_2000);
        assert_eq!(placement.target(SegmentKind::Data), 0x10_4000);
        assert_eq!(
            backend.segment_mut(SegmentKind::Code).map(|s| s.len()),
            Some(0x1234)
        );
        assert!(backend.segment_mut(SegmentKind::ReadOnly).is_none());
        if let Some(data) = backend.segment_mut(SegmentKind::Data) {
            data.fill(7);
        }
        assert_eq!(backend.publish(), Ok(()));
        assert!(backend.segment_mut(SegmentKind::Data).is_none());
        assert_eq!(backend.image().get(0x4000), Some(&7));

        let mut small = [0u8; 0x4fff];
        let err = SliceBackend::new(&mut small, 0, 0x1000).allocate(&layout());
        assert_eq!(err.map_err(|e| e.size), Err(0x5000));
        let mut buffer = [0u8; 0x5000];
        let misaligned = SliceBackend::new(&mut buffer, 0x1000, 0x1000).allocate(&layout());
        assert!(misaligned.is_err(), "data must start on a 16 KiB boundary");
    }
}
