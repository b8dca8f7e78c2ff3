//! Names read from guest memory, bounded: fixed-size byte arrays (Linux `comm`, Windows
//! `ImageFileName`) and counted UTF-16 strings (`UNICODE_STRING`). Nothing is allocated by a
//! length the guest chose, and control characters become U+FFFD so a name cannot forge lines
//! or terminal escapes in a report.

use crate::mem::{canonical, Memory};

/// Longest UTF-16 name kept, in code units (MAX_PATH).
pub const MAX_UNITS: usize = 260;

/// Replaces control characters with U+FFFD.
fn clean(c: char) -> char {
    if c.is_control() {
        char::REPLACEMENT_CHARACTER
    } else {
        c
    }
}

/// The NUL-terminated name in `bytes` (at most `bytes.len()` bytes; invalid UTF-8 and control
/// characters become U+FFFD).
pub fn fixed(bytes: &[u8]) -> String {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end])
        .chars()
        .map(clean)
        .collect()
}

/// True when `name` is what [`fixed`] makes of `bytes` (allocating only for invalid UTF-8).
pub fn fixed_is(bytes: &[u8], name: &str) -> bool {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end])
        .chars()
        .map(clean)
        .eq(name.chars())
}

/// Reads `length` bytes of UTF-16 at `buffer`, up to [`MAX_UNITS`] units (an odd length reads
/// the whole units it covers), and hands `f` its characters (cleaned). None for an empty,
/// non-canonical or unreadable buffer. Nothing is allocated.
pub fn with_utf16<R>(
    mem: &mut dyn Memory,
    buffer: u64,
    length: u16,
    f: impl FnOnce(&mut dyn Iterator<Item = char>) -> R,
) -> Option<R> {
    let units = (usize::from(length) / 2).min(MAX_UNITS);
    if units == 0 || !canonical(buffer) {
        return None;
    }
    let mut bytes = [0u8; 2 * MAX_UNITS];
    let bytes = &mut bytes[..2 * units];
    mem.read(buffer, bytes).ok()?;
    let units = bytes
        .chunks_exact(2)
        .map(|c| u16::from_le_bytes([c[0], c[1]]));
    let mut chars = char::decode_utf16(units).map(|c| c.map_or(char::REPLACEMENT_CHARACTER, clean));
    Some(f(&mut chars))
}

/// `length` bytes of UTF-16 at `buffer`, bounded as [`with_utf16`].
pub fn utf16(mem: &mut dyn Memory, buffer: u64, length: u16) -> Option<String> {
    with_utf16(mem, buffer, length, |chars| chars.collect())
}

/// The offsets of a `UNICODE_STRING`'s `Length` (u16, in bytes) and `Buffer` (pointer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnicodeOffsets {
    /// `Length`.
    pub length: u32,
    /// `Buffer`.
    pub buffer: u32,
}

impl UnicodeOffsets {
    /// The 64-bit layout every x64 Windows uses (Length at 0, Buffer at 8).
    pub const X64: UnicodeOffsets = UnicodeOffsets {
        length: 0,
        buffer: 8,
    };

    /// Reads the `UNICODE_STRING` at `at`'s header: (Length, Buffer), or None if unreadable.
    pub fn header(&self, mem: &mut dyn Memory, at: u64) -> Option<(u16, u64)> {
        let length = mem.read_u16(at.checked_add(u64::from(self.length))?).ok()?;
        let buffer = mem.read_u64(at.checked_add(u64::from(self.buffer))?).ok()?;
        Some((length, buffer))
    }

    /// The `UNICODE_STRING` at `at`, bounded as [`utf16`].
    pub fn read(&self, mem: &mut dyn Memory, at: u64) -> Option<String> {
        let (length, buffer) = self.header(mem, at)?;
        utf16(mem, buffer, length)
    }

    /// True when the `UNICODE_STRING` at `at` reads as `name` (both None when it does not
    /// read), without allocating.
    pub fn read_is(&self, mem: &mut dyn Memory, at: u64, name: Option<&str>) -> bool {
        let read = self.header(mem, at).and_then(|(length, buffer)| {
            with_utf16(mem, buffer, length, |chars| {
                name.is_some_and(|n| chars.eq(n.chars()))
            })
        });
        match read {
            Some(same) => same,
            None => name.is_none(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Regions;

    #[test]
    fn fixed_names_stop_at_nul_and_are_cleaned() {
        assert_eq!(fixed(b"awk\0junk"), "awk");
        assert_eq!(fixed(b"0123456789abcdef"), "0123456789abcdef");
        assert_eq!(fixed(b"a\x1b[2Jb\xff"), "a\u{fffd}[2Jb\u{fffd}");
        assert_eq!(fixed(b""), "");
    }

    #[test]
    fn utf16_strings_are_bounded() {
        let text: Vec<u8> = "x"
            .repeat(10_000)
            .encode_utf16()
            .flat_map(u16::to_le_bytes)
            .collect();
        let mut mem = Regions::new().with(0x1000, text);
        let s = utf16(&mut mem, 0x1000, u16::MAX).unwrap();
        assert_eq!(s.chars().count(), MAX_UNITS);
        assert_eq!(utf16(&mut mem, 0x1000, 5).as_deref(), Some("xx"));
        assert_eq!(utf16(&mut mem, 0x1000, 1), None);
        assert_eq!(utf16(&mut mem, 0x8000_0000_0000, 8), None);
        assert_eq!(utf16(&mut mem, 0x9_0000, 8), None);
        // A lone surrogate and a control character.
        let mut mem = Regions::new().with(0x10, vec![0x00, 0xd8, 0x07, 0x00, 0x41, 0x00]);
        assert_eq!(
            utf16(&mut mem, 0x10, 6).as_deref(),
            Some("\u{fffd}\u{fffd}A")
        );
    }

    #[test]
    fn names_compare_without_being_built() {
        assert!(fixed_is(b"awk\0x", "awk"));
        assert!(!fixed_is(b"awk\0x", "aw"));
        assert!(fixed_is(b"a\xffb", "a\u{fffd}b"));
        let mut s = vec![0u8; 0x10];
        s[0..2].copy_from_slice(&4u16.to_le_bytes());
        s[8..16].copy_from_slice(&0x2000u64.to_le_bytes());
        let mut mem = Regions::new()
            .with(0x1000, s)
            .with(0x2000, vec![b'o', 0, b'k', 0]);
        let o = UnicodeOffsets::X64;
        assert!(o.read_is(&mut mem, 0x1000, Some("ok")));
        assert!(!o.read_is(&mut mem, 0x1000, Some("ok!")));
        assert!(!o.read_is(&mut mem, 0x1000, None));
        assert!(o.read_is(&mut mem, 0x3000, None));
        assert!(!o.read_is(&mut mem, 0x3000, Some("ok")));
    }

    #[test]
    fn unicode_strings_at_odd_offsets() {
        let o = UnicodeOffsets {
            length: 4,
            buffer: 0x10,
        };
        let mut s = vec![0u8; 0x18];
        s[4..6].copy_from_slice(&4u16.to_le_bytes());
        s[0x10..0x18].copy_from_slice(&0x2000u64.to_le_bytes());
        let mut mem = Regions::new()
            .with(0x1000, s)
            .with(0x2000, vec![b'o', 0, b'k', 0]);
        assert_eq!(o.read(&mut mem, 0x1000).as_deref(), Some("ok"));
        assert_eq!(o.read(&mut mem, 0x3000), None);
        assert_eq!(o.header(&mut mem, u64::MAX - 2), None);
    }
}
