//! Bounds-checked little-endian reads from untrusted byte slices.

/// Reads a u16 at `off`, or None past the end.
pub fn le_u16(b: &[u8], off: usize) -> Option<u16> {
    Some(u16::from_le_bytes(
        b.get(off..off.checked_add(2)?)?.try_into().ok()?,
    ))
}

/// Reads a u32 at `off`, or None past the end.
pub fn le_u32(b: &[u8], off: usize) -> Option<u32> {
    Some(u32::from_le_bytes(
        b.get(off..off.checked_add(4)?)?.try_into().ok()?,
    ))
}

/// Reads a u64 at `off`, or None past the end.
pub fn le_u64(b: &[u8], off: usize) -> Option<u64> {
    Some(u64::from_le_bytes(
        b.get(off..off.checked_add(8)?)?.try_into().ok()?,
    ))
}

/// Fills `data` from `src` at `offset`; bytes past the end of `src` read as zero. The
/// register images of small devices are read this way.
pub fn read_padded(src: &[u8], offset: u64, data: &mut [u8]) {
    for (i, b) in data.iter_mut().enumerate() {
        let at = usize::try_from(offset).ok().and_then(|o| o.checked_add(i));
        *b = at.and_then(|a| src.get(a)).copied().unwrap_or(0);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn read_padded_zero_fills_past_the_end() {
        let mut d = [0xaau8; 4];
        super::read_padded(&[1, 2, 3], 1, &mut d);
        assert_eq!(d, [2, 3, 0, 0]);
        super::read_padded(&[1, 2, 3], u64::MAX, &mut d);
        assert_eq!(d, [0; 4]);
    }
}
