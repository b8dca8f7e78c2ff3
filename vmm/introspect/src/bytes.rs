//! Little-endian integers at byte offsets of a slice, None past its end: the one reader of
//! the formats parsed from bytes here and in report (ELF notes, BTF, PDB type records).

/// The `u16` at `at`.
pub fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(
        b.get(at..at.checked_add(2)?)?.try_into().ok()?,
    ))
}

/// The `u32` at `at`.
pub fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(
        b.get(at..at.checked_add(4)?)?.try_into().ok()?,
    ))
}

/// The `u64` at `at`.
pub fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(
        b.get(at..at.checked_add(8)?)?.try_into().ok()?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_within_the_slice_only() {
        let b = [1, 2, 3, 4, 5, 6, 7, 8];
        assert_eq!(u16_at(&b, 6), Some(0x0807));
        assert_eq!(u32_at(&b, 4), Some(0x0807_0605));
        assert_eq!(u64_at(&b, 0), Some(0x0807_0605_0403_0201));
        assert_eq!(u16_at(&b, 7), None);
        assert_eq!(u32_at(&b, usize::MAX), None);
        assert_eq!(u64_at(&b, 1), None);
    }
}
