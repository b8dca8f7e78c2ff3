//! The locked-buffer page list: `{offset_in_first_page: u32, page_count: u32, frames: [u64]}`.

use super::requests::PageListHeader;
use super::wire::{Field, Wire};
use super::MAX_PAGE_COUNT;
use crate::NtStatus;

/// Guest page size.
pub const PAGE_SIZE: u64 = 4096;
/// log2 of [`PAGE_SIZE`].
pub const PAGE_SHIFT: u32 = 12;

/// Pages a buffer of `size` bytes at virtual address `va` spans (0 for an empty buffer).
/// Exact for every `size`, up to `u64::MAX` (no intermediate sum can overflow).
pub const fn pages_spanned(va: u64, size: u64) -> u64 {
    if size == 0 {
        return 0;
    }
    // The last byte is at offset + (size - 1) from the first page: split size - 1 into whole
    // pages and a remainder so the sum stays below 2 * PAGE_SIZE.
    let offset = va & (PAGE_SIZE - 1);
    let last = size - 1;
    (last >> PAGE_SHIFT) + ((offset + (last & (PAGE_SIZE - 1))) >> PAGE_SHIFT) + 1
}

/// A parsed page list borrowing the request bytes. Frames are read on demand, unaligned-safe.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct PageList<'a> {
    header: PageListHeader,
    frames: &'a [u8],
}

impl<'a> PageList<'a> {
    /// Parses a page list from `bytes` (header then frames; extra bytes after are ignored).
    /// `STATUS_INFO_LENGTH_MISMATCH` if `bytes` is too short, `STATUS_INVALID_PARAMETER` for an
    /// offset of 4096 or more or no pages, `STATUS_INSUFFICIENT_RESOURCES` above
    /// [`MAX_PAGE_COUNT`] pages.
    pub fn parse(bytes: &'a [u8]) -> Result<PageList<'a>, NtStatus> {
        let header = PageListHeader::decode(bytes).ok_or(NtStatus::INFO_LENGTH_MISMATCH)?;
        if u64::from(header.offset_in_first_page) >= PAGE_SIZE || header.page_count == 0 {
            return Err(NtStatus::INVALID_PARAMETER);
        }
        if header.page_count > MAX_PAGE_COUNT {
            return Err(NtStatus::INSUFFICIENT_RESOURCES);
        }
        let len = header.page_count as usize * 8;
        let frames = bytes
            .get(PageListHeader::SIZE..PageListHeader::SIZE + len)
            .ok_or(NtStatus::INFO_LENGTH_MISMATCH)?;
        Ok(PageList { header, frames })
    }

    /// `Buffer & 0xFFF`.
    pub fn offset_in_first_page(&self) -> u32 {
        self.header.offset_in_first_page
    }

    /// Number of frames.
    pub fn page_count(&self) -> u32 {
        self.header.page_count
    }

    /// Frame `i` (guest-physical address >> 12).
    pub fn frame(&self, i: u32) -> Option<u64> {
        let at = i as usize * 8;
        if at + 8 > self.frames.len() {
            return None;
        }
        let mut cursor = at;
        Some(u64::get(self.frames, &mut cursor))
    }

    /// The frames in order.
    pub fn frames(&self) -> impl Iterator<Item = u64> + 'a {
        let frames = self.frames;
        (0..frames.len() / 8).map(move |i| {
            let mut at = i * 8;
            u64::get(frames, &mut at)
        })
    }

    /// `Ok` if the list describes exactly the buffer `[va, va + size)`: the offset is
    /// `va & 0xFFF` and the page count is [`pages_spanned`]; else `STATUS_INVALID_PARAMETER`.
    pub fn check_covers(&self, va: u64, size: u32) -> Result<(), NtStatus> {
        let offset_ok = u64::from(self.header.offset_in_first_page) == va & (PAGE_SIZE - 1);
        let count_ok = u64::from(self.header.page_count) == pages_spanned(va, u64::from(size));
        if offset_ok && count_ok {
            Ok(())
        } else {
            Err(NtStatus::INVALID_PARAMETER)
        }
    }
}
