//! Guest RAM as the guest's own memory map defines it (docs/abi.md section 3, "Guest RAM").
//!
//! A memory slot is not enough: the slot below 4 GiB also backs the legacy area
//! 0x9FC00-0xFFFFF (EBDA, VGA hole, option ROMs, BIOS copy), which no PC memory map reports as
//! RAM. Request blocks and pinned frames must lie in the map's RAM entries.

use std::ops::Range;

use super::{MapEntry, RangeKind};

/// The RAM ranges of the guest's memory map, sorted and disjoint.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GuestRam {
    ranges: Vec<Range<u64>>,
}

impl GuestRam {
    /// The usable-RAM entries of `map` (e820 type 1; ACPI and reserved ranges are not RAM).
    pub fn from_map(map: &[MapEntry]) -> Self {
        let mut ranges: Vec<Range<u64>> = map
            .iter()
            .filter(|e| e.kind == RangeKind::Ram && e.size > 0)
            .filter_map(|e| Some(e.addr..e.addr.checked_add(e.size)?))
            .collect();
        ranges.sort_by_key(|r| r.start);
        GuestRam { ranges }
    }

    /// True if every byte of `[start, start + len)` is RAM (`len` 0: the empty range at
    /// `start` is RAM if `start` is). Adjacent entries count as one.
    pub fn contains(&self, start: u64, len: u64) -> bool {
        let Some(end) = start.checked_add(len.max(1)) else {
            return false;
        };
        let mut at = start;
        for r in &self.ranges {
            if r.start <= at && at < r.end {
                at = r.end;
                if at >= end {
                    return true;
                }
            }
        }
        false
    }

    /// True if page frame `frame` (4 KiB) is RAM.
    pub fn has_frame(&self, frame: u64) -> bool {
        frame
            .checked_mul(4096)
            .is_some_and(|gpa| self.contains(gpa, 4096))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::memory_map;

    #[test]
    fn the_legacy_area_is_not_ram() {
        let ram = GuestRam::from_map(&memory_map(64 << 20));
        assert!(ram.contains(0, 0x9f000));
        assert!(ram.has_frame(0x9e));
        assert!(!ram.has_frame(0x9f)); // holds the EBDA from 0x9FC00
        for frame in 0xa0..0x100 {
            assert!(!ram.has_frame(frame), "frame {frame:#x}");
        }
        assert!(ram.has_frame(0x100));
        assert!(ram.has_frame((64 << 8) - 1));
        assert!(!ram.has_frame(64 << 8));
        assert!(!ram.has_frame(u64::MAX));
    }

    #[test]
    fn ranges_must_lie_wholly_in_ram() {
        let ram = GuestRam::from_map(&memory_map(64 << 20));
        assert!(ram.contains(0x1000, 16));
        assert!(!ram.contains(0x9fff0, 0x20)); // runs into the EBDA
        assert!(!ram.contains(0xa0000, 16));
        assert!(!ram.contains(0xfff08, 0x200)); // starts in the BIOS area, ends in RAM
        assert!(!ram.contains((64 << 20) - 8, 16)); // runs off the end
        assert!(!ram.contains(u64::MAX - 4, 16));
    }

    #[test]
    fn adjacent_entries_join_and_large_guests_keep_their_high_ram() {
        let map = [
            MapEntry {
                addr: 0x1000,
                size: 0x1000,
                kind: RangeKind::Ram,
            },
            MapEntry {
                addr: 0,
                size: 0x1000,
                kind: RangeKind::Ram,
            },
            MapEntry {
                addr: 0x2000,
                size: 0x1000,
                kind: RangeKind::Acpi,
            },
        ];
        let ram = GuestRam::from_map(&map);
        assert!(ram.contains(0xff8, 16));
        assert!(!ram.contains(0x1ff8, 16));
        let big = GuestRam::from_map(&memory_map(4 << 30));
        assert!(big.has_frame(0x10_0000));
        assert!(!big.has_frame(0xc_0000)); // the PCI hole
    }
}
