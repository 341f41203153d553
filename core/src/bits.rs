//! Bit and byte helpers shared by every architecture: field extraction, sign extension,
//! the signed-field test, and little-endian reads/writes that report short buffers instead
//! of panicking. (Relocation range checks are [`crate::error::Range`]s, in `arch::reloc`.)

/// Bits `hi..=lo` of `v`, shifted down to bit 0. `hi` must be < 64 and >= `lo`.
#[inline]
pub const fn bits(v: u64, hi: u32, lo: u32) -> u64 {
    let width = hi - lo + 1;
    (v >> lo) & mask(width)
}

/// A mask of the low `width` bits (`width` up to 64).
#[inline]
pub const fn mask(width: u32) -> u64 {
    if width >= 64 {
        u64::MAX
    } else {
        (1u64 << width) - 1
    }
}

/// Sign-extends the low `width` bits of `v` (1 ≤ `width` ≤ 64).
#[inline]
pub const fn sign_extend(v: u64, width: u32) -> i64 {
    if width == 0 || width >= 64 {
        v as i64
    } else {
        let shift = 64 - width;
        ((v << shift) as i64) >> shift
    }
}

/// Whether `v` fits a two's-complement field of `width` bits.
#[inline]
pub const fn fits_signed(v: i128, width: u32) -> bool {
    if width == 0 || width > 127 {
        return width > 127 || v == 0;
    }
    let half = 1i128 << (width - 1);
    v >= -half && v < half
}

/// `word` with bits `hi..=lo` replaced by the low bits of `value` (other bits untouched).
#[inline]
pub const fn insert(word: u32, value: u64, hi: u32, lo: u32) -> u32 {
    let field = (mask(hi - lo + 1) as u32) << lo;
    (word & !field) | (((value as u32) << lo) & field)
}

/// The high part of a value split into a high part and a sign-extended 12-bit low part
/// (RISC-V AUIPC/LUI + ADDI, LoongArch PCALAU12I + ADDI): `(v + 0x800) >> 12`, so that
/// `(hi << 12) + sign_extend(lo, 12) == v`.
#[inline]
pub const fn hi20(v: i128) -> i128 {
    (v + 0x800) >> 12
}

/// Reads `N` little-endian bytes at the start of `buf`.
#[inline]
fn read<const N: usize>(buf: &[u8]) -> Option<[u8; N]> {
    let mut out = [0u8; N];
    out.copy_from_slice(buf.get(..N)?);
    Some(out)
}

/// Writes `bytes` at the start of `buf`; `None` if it is too short.
#[inline]
fn write(buf: &mut [u8], bytes: &[u8]) -> Option<()> {
    buf.get_mut(..bytes.len())?.copy_from_slice(bytes);
    Some(())
}

/// Reads a little-endian u16.
#[inline]
pub fn read_u16(buf: &[u8]) -> Option<u16> {
    read::<2>(buf).map(u16::from_le_bytes)
}

/// Reads a little-endian u32.
#[inline]
pub fn read_u32(buf: &[u8]) -> Option<u32> {
    read::<4>(buf).map(u32::from_le_bytes)
}

/// Reads a little-endian u64.
#[inline]
pub fn read_u64(buf: &[u8]) -> Option<u64> {
    read::<8>(buf).map(u64::from_le_bytes)
}

/// Writes a little-endian u16.
#[inline]
pub fn write_u16(buf: &mut [u8], v: u16) -> Option<()> {
    write(buf, &v.to_le_bytes())
}

/// Writes a little-endian u32.
#[inline]
pub fn write_u32(buf: &mut [u8], v: u32) -> Option<()> {
    write(buf, &v.to_le_bytes())
}

/// Writes a little-endian u64.
#[inline]
pub fn write_u64(buf: &mut [u8], v: u64) -> Option<()> {
    write(buf, &v.to_le_bytes())
}

/// Rounds `v` up to a multiple of `align` (a power of two); `None` on overflow.
#[inline]
pub const fn align_up(v: u64, align: u64) -> Option<u64> {
    let m = align.wrapping_sub(1);
    match v.checked_add(m) {
        Some(x) => Some(x & !m),
        None => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn field_extraction_and_masks() {
        assert_eq!(bits(0xABCD, 15, 12), 0xA);
        assert_eq!(bits(0xABCD, 3, 0), 0xD);
        assert_eq!(bits(u64::MAX, 63, 0), u64::MAX);
        assert_eq!(mask(0), 0);
        assert_eq!(mask(64), u64::MAX);
    }

    #[test]
    fn range_boundaries() {
        assert!(fits_signed(i32::MAX as i128, 32));
        assert!(fits_signed(i32::MIN as i128, 32));
        assert!(!fits_signed(i32::MAX as i128 + 1, 32));
        assert!(!fits_signed(i32::MIN as i128 - 1, 32));
    }

    #[test]
    fn splits_recombine() {
        for v in [
            0i128,
            0x7ff,
            0x800,
            -0x800,
            -0x801,
            0x1234_5678,
            -0x7fff_f800,
        ] {
            let lo = sign_extend((v & 0xfff) as u64, 12) as i128;
            assert_eq!((hi20(v) << 12) + lo, v);
        }
        assert_eq!(insert(0xffff_ffff, 0, 15, 8), 0xffff_00ff);
        assert_eq!(insert(0, 0x1ff, 15, 8), 0x0000_ff00);
    }

    #[test]
    fn short_buffers_are_reported() {
        let mut b = [0u8; 3];
        assert_eq!(write_u32(&mut b, 1), None);
        assert_eq!(b, [0, 0, 0]);
        assert_eq!(read_u32(&b), None);
        assert_eq!(write_u16(&mut b, 0xBEEF), Some(()));
        assert_eq!(read_u16(&b), Some(0xBEEF));
        assert_eq!(align_up(u64::MAX, 16), None);
        assert_eq!(align_up(17, 16), Some(32));
    }

    proptest! {
        #[test]
        fn sign_extend_round_trips(v in any::<i64>(), width in 1u32..=64) {
            let truncated = (v as u64) & mask(width);
            let back = sign_extend(truncated, width);
            if fits_signed(v as i128, width) {
                prop_assert_eq!(back, v);
            } else {
                prop_assert_eq!((back as u64) & mask(width), truncated);
            }
        }

        #[test]
        fn le_round_trip(v in any::<u64>(), pad in 0usize..4) {
            let mut b = [0u8; 12];
            prop_assert!(write_u64(&mut b[pad..], v).is_some());
            prop_assert_eq!(read_u64(&b[pad..]), Some(v));
        }
    }
}
